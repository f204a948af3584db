//! The manifest directory watcher (`fl-podwatch`): wakes the file source as soon as the
//! directory changes (inotify), so a new manifest starts in milliseconds rather than at the
//! next poll. The poll stays as the safety net, and is the only mechanism where inotify is
//! unavailable or has failed.

use super::SourceCommand;
use crate::base::logsafe;
use crate::base::manager::{Exit, Health, StopSignal, StopTimeout, Worker};
use crate::base::wake::{self, WakeReceiver, Waker};
use crossbeam_channel::Sender;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

/// A burst of writes (an editor saving, a `cp`) settles this long and counts as one change.
const SETTLE: Duration = Duration::from_millis(20);
/// How often a watch on a directory that does not exist (yet) is tried again; meanwhile the
/// source's poll reports the missing directory.
const REARM: Duration = Duration::from_millis(500);

/// The running watcher: its thread and the wake-up that interrupts its `poll`.
pub struct DirWatcher {
    wake: Waker,
    worker: Worker,
}

impl DirWatcher {
    /// Watches `dir` on a thread named `fl-podwatch`, sending `SourceCommand::Look` to
    /// `changed` on changes.
    pub fn start(dir: &Path, changed: Sender<SourceCommand>, health: &Health) -> io::Result<DirWatcher> {
        let (wake_rx, wake) = wake::pair()?;
        let dir = dir.to_path_buf();
        let worker = Worker::spawn("fl-podwatch", health, move |stop| watch(&dir, &changed, &wake_rx, &stop))?;
        Ok(DirWatcher { wake, worker })
    }

    /// Stops the thread (its stop signal, then a wake-up of its `poll`) and waits up to
    /// `timeout` for it.
    pub fn stop(mut self, timeout: Duration) -> Result<(), StopTimeout> {
        // Signal before waking: woken first, the thread could miss the stop and poll again.
        self.worker.signal_stop();
        self.wake.wake();
        self.worker.join(Instant::now() + timeout).map_err(|e| StopTimeout { timeout, ..e })
    }
}

/// An inotify instance (closed when dropped).
struct Inotify(OwnedFd);

impl Inotify {
    fn new() -> io::Result<Inotify> {
        // SAFETY: inotify_init1 takes flags only.
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new fd owned by nobody else.
        Ok(Inotify(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Watches `dir` for manifests written, moved, removed or changed in mode.
    fn watch(&self, dir: &Path) -> io::Result<()> {
        let mask = libc::IN_CLOSE_WRITE
            | libc::IN_MOVED_TO
            | libc::IN_MOVED_FROM
            | libc::IN_DELETE
            | libc::IN_CREATE
            | libc::IN_ATTRIB;
        let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: a valid fd and a NUL-terminated path.
        if unsafe { libc::inotify_add_watch(self.0.as_raw_fd(), path.as_ptr(), mask) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Reads every queued event (which events does not matter: any change means a re-read).
    fn drain(&self) -> io::Result<()> {
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: reading into a buffer we own, within its length.
            let n = unsafe { libc::read(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n > 0 {
                continue;
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(()),
                io::ErrorKind::Interrupted => continue,
                // Zero is not a valid inotify read; treat it as the error it would be.
                _ if n == 0 => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
                _ => return Err(e),
            }
        }
    }
}

/// The thread. It ends when stopped, or when inotify fails, with `Exit::Done` either way: the
/// source's poll still delivers every manifest (within `manifest_check_interval`), so a
/// failed watcher slows pickup but breaks nothing, as when inotify is unavailable from the
/// start. Failing `/healthz` for it would have the agent restarted for a lost optimization.
fn watch(dir: &Path, changed: &Sender<SourceCommand>, wake: &WakeReceiver, stop: &StopSignal) -> Exit {
    let polled_only = |what: &str, e: io::Error| {
        log::warn!("podsource: {what} {}: {e}; manifests are polled only", logsafe::path(dir));
        Exit::Done
    };
    let inotify = match Inotify::new() {
        Ok(i) => i,
        Err(e) => return polled_only("inotify unavailable for", e),
    };
    // Unwatched --directory exists--> Watching. The retry waits on the stop signal, so a
    // stop ends it at once.
    while let Err(e) = inotify.watch(dir) {
        log::debug!("podsource: cannot watch {} yet: {e}", logsafe::path(dir));
        if stop.sleep(REARM) {
            return Exit::Done;
        }
    }
    loop {
        // Watching: only a change or a wake-up (the stop) returns from this poll.
        let ready = match crate::base::fds::poll_readable(&[inotify.0.as_raw_fd(), wake.as_raw_fd()], None) {
            Ok(r) => r,
            Err(e) => return polled_only("waiting for changes in", e),
        };
        // Watching --stop signal, woken--> Stopped.
        if stop.is_stopped() {
            return Exit::Done;
        }
        if ready[1] != 0 {
            wake.drain();
        }
        if ready[0] == 0 {
            continue;
        }
        if stop.sleep(SETTLE) {
            return Exit::Done;
        }
        if let Err(e) = inotify.drain() {
            // Watching --read error--> Stopped: the poll covers the directory from now on.
            return polled_only("reading inotify events for", e);
        }
        if changed.send(SourceCommand::Look).is_err() {
            // The source is gone (shutdown): nobody to wake.
            return Exit::Done;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::unbounded;

    #[test]
    fn a_change_wakes_the_source_and_stop_returns_without_waiting_for_a_tick() {
        let dir = tempfile::tempdir().unwrap();
        let health = Health::default();
        let (tx, rx) = unbounded();
        let w = DirWatcher::start(dir.path(), tx, &health).unwrap();
        assert_eq!(health.alive(), vec!["fl-podwatch"]);
        // The watch is added on the thread; give it a moment before the change.
        std::thread::sleep(Duration::from_millis(50));
        std::fs::write(dir.path().join("a.yaml"), "x").unwrap();
        assert!(matches!(rx.recv_timeout(Duration::from_secs(5)), Ok(SourceCommand::Look)));
        // Its poll has no timeout: only the stop's wake-up ends it.
        w.stop(Duration::from_secs(2)).unwrap();
        assert!(health.alive().is_empty() && health.dead().is_empty());
    }

    #[test]
    fn a_watcher_waiting_for_its_directory_stops_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let health = Health::default();
        let (tx, _rx) = unbounded();
        let w = DirWatcher::start(&dir.path().join("not-yet"), tx, &health).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        w.stop(Duration::from_secs(2)).unwrap();
    }

    #[test]
    fn a_watcher_whose_source_is_gone_ends_without_failing_health() {
        let dir = tempfile::tempdir().unwrap();
        let health = Health::default();
        let (tx, rx) = unbounded();
        drop(rx);
        let w = DirWatcher::start(dir.path(), tx, &health).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        std::fs::write(dir.path().join("a.yaml"), "x").unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !w.worker.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(w.worker.is_finished());
        assert!(health.dead().is_empty(), "a watcher with nobody to wake is done, not dead");
        w.stop(Duration::from_secs(1)).unwrap();
    }
}
