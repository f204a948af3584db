//! A command started in a container and not yet waited for (`ContainerRuntime::exec_start`):
//! its process group and output pipes. One thread can watch many of them at once (the
//! prober's exec reaper polls their pipes), and `exec_sync` waits for one.
//!
//! The leader is never reaped before its group is signalled: exits are checked with
//! `waitid(WNOWAIT)`, so the zombie keeps its pid (and so the group id) from being reused
//! until the group has been killed or the command has finished.

use super::{ExecResult, RuntimeError};
use crate::base::{fds, procs};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Output kept per stream; the rest is read and dropped.
pub const EXEC_OUTPUT_CAP: usize = 1 << 20;
/// How often a command whose output is closed is checked for its exit (it has no fd to poll).
pub const EXIT_CHECK: Duration = Duration::from_millis(2);
/// How often `wait_unless` looks at its interrupt flag while the command's output is quiet.
pub const INTERRUPT_CHECK: Duration = Duration::from_millis(100);

/// What `exec_start` did.
pub enum ExecStart {
    /// The command runs; watch it, then collect its result.
    Running(ExecProcess),
    /// Nothing runs (the executable could not be started: exit code 126 and why, as runc).
    Finished(ExecResult),
}

/// A running command: the leader of its own process group, stdout and stderr piped.
pub struct ExecProcess {
    child: Child,
    pgid: i32,
    streams: [Option<File>; 2],
    out: [Vec<u8>; 2],
    exited: bool,
    reaped: bool,
    cap: usize,
}

impl ExecProcess {
    /// Watches `child`, started with `process_group(0)` and piped stdout and stderr. The
    /// pipes become non-blocking, so reading never stalls a thread that watches many.
    pub fn new(mut child: Child) -> io::Result<ExecProcess> {
        let streams = [child.stdout.take().map(fds::fd_file), child.stderr.take().map(fds::fd_file)];
        let pgid = child.id() as i32;
        let p = ExecProcess {
            child,
            pgid,
            streams,
            out: [Vec::new(), Vec::new()],
            exited: false,
            reaped: false,
            cap: EXEC_OUTPUT_CAP,
        };
        for s in p.streams.iter().flatten() {
            if let Err(e) = fds::set_nonblocking(s) {
                p.kill();
                return Err(e);
            }
        }
        Ok(p)
    }

    /// Keeps at most `cap` bytes per stream instead of `EXEC_OUTPUT_CAP` (a probe needs
    /// 10 KiB, and many may run at once); the rest is still read and dropped.
    pub fn limit_output(&mut self, cap: usize) {
        self.cap = cap.min(EXEC_OUTPUT_CAP);
    }

    /// The pipes still open, to poll for readability.
    pub fn fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.streams.iter().flatten().map(|f| f.as_raw_fd())
    }

    /// Reads whatever the command has written, without blocking. A pipe closes at EOF or on
    /// a read error; output past `EXEC_OUTPUT_CAP` per stream is read and dropped.
    pub fn read_output(&mut self) {
        let mut buf = [0u8; 8192];
        let cap = self.cap;
        for (stream, out) in self.streams.iter_mut().zip(self.out.iter_mut()) {
            let Some(f) = stream.as_mut() else { continue };
            loop {
                match f.read(&mut buf) {
                    Ok(0) => {
                        *stream = None;
                        break;
                    }
                    Ok(n) => {
                        let room = cap.saturating_sub(out.len());
                        out.extend_from_slice(&buf[..n.min(room)]);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        *stream = None;
                        break;
                    }
                }
            }
        }
    }

    /// Both pipes are closed (the command may still run: it can close them early).
    pub fn output_closed(&self) -> bool {
        self.streams.iter().all(Option::is_none)
    }

    /// The command is done: its output is closed and the leader has exited (not reaped yet).
    pub fn finished(&mut self) -> bool {
        if !self.output_closed() {
            return false;
        }
        if !self.exited {
            self.exited = exited_keeping_zombie(self.pgid);
        }
        self.exited
    }

    /// Reaps a finished command and returns what it did.
    pub fn result(mut self) -> Result<ExecResult, RuntimeError> {
        let status =
            self.child.wait().map_err(|source| RuntimeError::Process { action: "waiting for exec".into(), source })?;
        self.reaped = true;
        let exit_code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
        let [stdout, stderr] = std::mem::take(&mut self.out);
        Ok(ExecResult { exit_code, stdout, stderr, timed_out: false })
    }

    /// Ends a command that ran past its timeout: SIGKILL to its whole process group (the
    /// leader is not reaped yet, so the group id is still its own), then reaps the leader;
    /// the pipes close with it.
    pub fn kill(mut self) -> ExecResult {
        let _ = procs::kill_group(self.pgid, libc::SIGKILL);
        // SIGKILL cannot be caught, so this wait returns promptly.
        let _ = self.child.wait();
        self.reaped = true;
        self.read_output();
        let [stdout, stderr] = std::mem::take(&mut self.out);
        ExecResult { exit_code: -1, stdout, stderr, timed_out: true }
    }

    /// Waits for the command, killing its process group once `timeout` has passed.
    pub fn wait(self, timeout: Duration) -> Result<ExecResult, RuntimeError> {
        let never = AtomicBool::new(false);
        // Never interrupted, so always a result.
        Ok(self.wait_unless(timeout, &never)?.unwrap_or_else(|| unreachable!("not interrupted")))
    }

    /// `wait`, but once `interrupted` is set (a signal handler's flag, looked at every
    /// `INTERRUPT_CHECK`) the command's process group is killed and `None` returned.
    pub fn wait_unless(
        mut self,
        timeout: Duration,
        interrupted: &AtomicBool,
    ) -> Result<Option<ExecResult>, RuntimeError> {
        let deadline = Instant::now() + timeout;
        loop {
            self.read_output();
            if self.finished() {
                return self.result().map(Some);
            }
            if interrupted.load(Ordering::Relaxed) {
                // Dropped unreaped: its group is killed.
                return Ok(None);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Some(self.kill()));
            }
            if self.output_closed() {
                std::thread::sleep(EXIT_CHECK.min(deadline - now));
                continue;
            }
            let fds: Vec<RawFd> = self.fds().collect();
            fds::poll_readable(&fds, Some(INTERRUPT_CHECK.min(deadline - now)))
                .map_err(|source| RuntimeError::Process { action: "polling exec output".into(), source })?;
        }
    }
}

impl Drop for ExecProcess {
    /// A command nobody waits for any more (its watcher stopped) is killed, not left behind.
    fn drop(&mut self) {
        if !self.reaped {
            let _ = procs::kill_group(self.pgid, libc::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

/// Whether `pid` (our child) has exited, leaving it a zombie so its pid stays taken.
fn exited_keeping_zombie(pid: i32) -> bool {
    // SAFETY: waitid writes only into the zeroed siginfo_t we pass.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT);
        // With WNOHANG, si_pid stays 0 while the child runs. An error (ECHILD: already
        // reaped) counts as exited, so a caller never waits for ever.
        r != 0 || info.si_pid() != 0
    }
}

/// An interactive command in a container (`kubectl exec -i -t` served by the agent): the
/// leader of its own process group, with stdin, stdout and stderr each a pipe or
/// `/dev/null`, or all three one pseudo-terminal, whose master the session holds. Every fd
/// it holds is non-blocking and close-on-exec, so one thread can poll many sessions.
///
/// As with `ExecProcess`, the leader's exit is seen with `waitid(WNOWAIT)`: it stays a zombie,
/// so its pid (the group id) cannot be reused, until what is left of its group is killed.
pub struct ExecSession {
    child: Child,
    pgid: i32,
    stdin: Option<File>,
    stdout: Option<File>,
    stderr: Option<File>,
    pty: Option<File>,
    /// The terminal's end-of-file character was written (`close_stdin` with a terminal).
    eof_sent: bool,
    /// The exit code, once the leader is reaped.
    exit: Option<i32>,
}

impl ExecSession {
    /// Holds `child`, started as the leader of its own process group (`process_group(0)`, or
    /// `setsid` with a terminal), its piped streams taken from it; `pty` is the master of its
    /// terminal. Every fd is made non-blocking; a failure kills the group.
    pub fn new(mut child: Child, pty: Option<File>) -> io::Result<ExecSession> {
        let pgid = child.id() as i32;
        let mut s = ExecSession {
            stdin: child.stdin.take().map(fds::fd_file),
            stdout: child.stdout.take().map(fds::fd_file),
            stderr: child.stderr.take().map(fds::fd_file),
            pty,
            child,
            pgid,
            eof_sent: false,
            exit: None,
        };
        let nonblocking =
            [&s.stdin, &s.stdout, &s.stderr, &s.pty].into_iter().flatten().try_for_each(fds::set_nonblocking);
        if let Err(e) = nonblocking {
            s.kill();
            return Err(e);
        }
        Ok(s)
    }

    /// The write end of the command's stdin pipe (none with a terminal, or without stdin,
    /// or once `close_stdin` closed it).
    pub fn stdin(&self) -> Option<&File> {
        self.stdin.as_ref()
    }

    /// The read end of the command's stdout pipe (none with a terminal, or when not asked).
    pub fn stdout(&self) -> Option<&File> {
        self.stdout.as_ref()
    }

    /// The read end of the command's stderr pipe (none with a terminal, or when not asked).
    pub fn stderr(&self) -> Option<&File> {
        self.stderr.as_ref()
    }

    /// The master of the command's terminal, read for its output and written for its input.
    /// A read fails with `EIO` once no process holds the terminal any more: that is its end.
    pub fn pty(&self) -> Option<&File> {
        self.pty.as_ref()
    }

    /// Ends the command's input: the stdin pipe is closed; with a terminal, its end-of-file
    /// character (`VEOF`, ^D) is written once, which a reader at the start of a line takes
    /// as end of file.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
        let Some(pty) = &self.pty else { return };
        if self.eof_sent {
            return;
        }
        self.eof_sent = true;
        let eof = terminal_eof_char(pty).unwrap_or(EOT);
        // Best effort: a full terminal (the command reads nothing) cannot take it either way.
        let _ = (&*pty).write(&[eof]);
    }

    /// Sets the terminal's size (`TIOCSWINSZ` on the master; the command gets `SIGWINCH`);
    /// nothing without a terminal.
    pub fn resize(&self, width: u16, height: u16) -> io::Result<()> {
        let Some(pty) = &self.pty else { return Ok(()) };
        let size = libc::winsize { ws_row: height, ws_col: width, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: TIOCSWINSZ reads one winsize from the pointer, which lives across the call.
        if unsafe { libc::ioctl(pty.as_raw_fd(), libc::TIOCSWINSZ, &size as *const libc::winsize) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The command's exit code (128 + the signal when killed by one) once it has exited,
    /// without blocking. The leader's exit is seen first without reaping it, so its group id
    /// is still its own when what is left of the group (background children that would hold
    /// the streams open) is killed; then it is reaped.
    pub fn try_exit(&mut self) -> io::Result<Option<i32>> {
        if let Some(code) = self.exit {
            return Ok(Some(code));
        }
        if !exited_keeping_zombie(self.pgid) {
            return Ok(None);
        }
        self.reap().map(Some)
    }

    /// SIGKILL to the command's process group, then reaps the leader.
    pub fn kill(&mut self) {
        if self.exit.is_some() {
            return;
        }
        if let Err(e) = self.reap() {
            // ECHILD only: nothing of ours is left to wait for.
            log::debug!("runtime: exec session {}: {e}", self.pgid);
            self.exit = Some(-1);
        }
    }

    /// Kills the group (its leader not reaped yet, so the id is still its own) and reaps the
    /// leader, which SIGKILL makes prompt.
    fn reap(&mut self) -> io::Result<i32> {
        let _ = procs::kill_group(self.pgid, libc::SIGKILL);
        let status = self.child.wait()?;
        let code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
        self.exit = Some(code);
        Ok(code)
    }
}

impl Drop for ExecSession {
    /// A session whose client went away is killed, not left behind.
    fn drop(&mut self) {
        self.kill();
    }
}

/// ASCII end of transmission (^D): a terminal's usual `VEOF`.
const EOT: u8 = 0x04;

/// The end-of-file character of the terminal whose master is `pty`.
fn terminal_eof_char(pty: &File) -> io::Result<u8> {
    // SAFETY: tcgetattr writes only into the zeroed termios we pass.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: as above, on an open fd.
    if unsafe { libc::tcgetattr(pty.as_raw_fd(), &mut t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(t.c_cc[libc::VEOF])
}
