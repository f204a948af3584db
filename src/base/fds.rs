//! File descriptors: polling, pipes, non-blocking and close-on-exec flags.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::time::Duration;

/// Waits until one of `fds` is readable or `timeout` passes (`None` waits without limit).
/// Returns the readiness (POLLIN/POLLHUP bits) of each fd, all zero on timeout.
pub fn poll_readable(fds: &[RawFd], timeout: Option<Duration>) -> io::Result<Vec<i16>> {
    let mut pfds: Vec<libc::pollfd> =
        fds.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
    let ms = timeout.map(|t| t.as_millis().min(i32::MAX as u128) as i32).unwrap_or(-1);
    // SAFETY: pfds is a valid array of pollfd of the given length.
    let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(vec![0; fds.len()]);
        }
        return Err(e);
    }
    Ok(pfds.iter().map(|p| p.revents).collect())
}

/// Turns a pipe end (e.g. `ChildStdout`) into a `File` for plain reads.
pub fn fd_file(fd: impl Into<std::os::fd::OwnedFd>) -> File {
    File::from(fd.into())
}

/// A new close-on-exec pipe: (read end, write end).
pub fn pipe() -> io::Result<(File, File)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two fds into the array we pass.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    Ok(unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) })
}

/// Marks every fd from 3 up close-on-exec, so a child started next inherits only its stdio
/// (and what is cleared again afterwards), never an fd the agent itself inherited without
/// `O_CLOEXEC` (a supervisor's pipe or socket). Meant for `pre_exec`: one syscall, which is
/// async-signal-safe. On kernels before 5.11 (no `close_range`) it does nothing.
pub fn cloexec_above_stdio() -> io::Result<()> {
    // SAFETY: close_range takes plain integers; with CLOSE_RANGE_CLOEXEC it closes nothing.
    let r = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENOSYS) | Some(libc::EINVAL) => Ok(()),
        _ => Err(e),
    }
}

/// Puts `fd` into non-blocking mode.
pub fn set_nonblocking(fd: &impl AsRawFd) -> io::Result<()> {
    let fd = fd.as_raw_fd();
    // SAFETY: fcntl on an fd we own; F_GETFL/F_SETFL have no memory preconditions.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
