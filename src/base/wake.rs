//! Wake-ups for a thread that waits in `poll(2)`: a non-blocking pipe whose read end sits
//! in the thread's poll set. Whoever stops the thread signals its `manager::StopSignal`
//! first and then calls `Waker::wake`, so the thread returns from `poll`, sees the stop and
//! ends; no thread polls a flag on a timer. The byte stays in the pipe until the thread
//! drains it, so a wake sent before the thread reached `poll` is never lost.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::sync::Arc;

/// The write end: wakes the thread polling the read end. Clones share one pipe end.
#[derive(Clone)]
pub struct Waker(Arc<File>);

/// The read end, polled for `POLLIN` by the thread that is woken.
pub struct WakeReceiver(File);

/// What draining the read end found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// Every pending wake-up was read; wakers remain.
    Open,
    /// Every `Waker` is gone (end of file), or reading failed: nothing can wake it again.
    Closed,
}

/// A new pipe: (read end, write end), both non-blocking and close-on-exec.
pub fn pair() -> io::Result<(WakeReceiver, Waker)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two fds into the array we pass.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    let (read, write) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    Ok((WakeReceiver(read), Waker(Arc::new(write))))
}

impl Waker {
    /// Makes the read end readable. A full pipe (`EAGAIN`) already holds a wake-up.
    pub fn wake(&self) {
        let _ = (&*self.0).write(&[1]);
    }
}

impl WakeReceiver {
    /// Reads every pending wake-up, so the next `poll` waits again.
    pub fn drain(&self) -> Drained {
        let mut buf = [0u8; 64];
        loop {
            match (&self.0).read(&mut buf) {
                Ok(0) => return Drained::Closed,
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Drained::Open,
                Err(_) => return Drained::Closed,
            }
        }
    }
}

impl AsRawFd for WakeReceiver {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn readable(r: &WakeReceiver) -> bool {
        crate::base::fds::poll_readable(&[r.as_raw_fd()], Some(Duration::ZERO)).unwrap()[0] != 0
    }

    #[test]
    fn a_wake_is_kept_until_drained_and_dropping_every_waker_closes() {
        let (r, w) = pair().unwrap();
        assert!(!readable(&r));
        w.wake();
        w.clone().wake();
        assert!(readable(&r), "a wake sent before the poll is not lost");
        assert_eq!(r.drain(), Drained::Open);
        assert!(!readable(&r), "drained: the next poll waits");
        let clone = w.clone();
        drop(w);
        assert_eq!(r.drain(), Drained::Open, "a clone keeps the pipe open");
        drop(clone);
        assert!(readable(&r));
        assert_eq!(r.drain(), Drained::Closed);
    }

    #[test]
    fn waking_a_full_pipe_neither_blocks_nor_fails() {
        let (r, w) = pair().unwrap();
        for _ in 0..100_000 {
            w.wake();
        }
        assert_eq!(r.drain(), Drained::Open);
    }
}
