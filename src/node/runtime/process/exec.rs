//! `exec_start` and `exec_session` of the process runtime: a command run in a container —
//! its root and PID namespace (joined, as `runc exec` does, not made again), env, working
//! directory, cgroup and security context — watched, capped and killed at its timeout by
//! `runtime::exec::ExecProcess`, or interactive (pipes or a terminal) in a
//! `runtime::exec::ExecSession`; and the kernel's `execve` limits every container is
//! checked against before it starts.

use crate::base::procs::MAX_ARG_STRLEN;
use crate::node::runtime::exec::{ExecProcess, ExecSession, ExecStart};
use crate::node::runtime::{ContainerConfig, ExecResult, RuntimeError, StreamIo};
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// A command line or environment that `execve` would refuse with `E2BIG`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecLimitsError {
    /// One argument is longer than `MAX_ARG_STRLEN`.
    #[error("argument list too long: argument {index} is {len} bytes, over the kernel's per-string limit MAX_ARG_STRLEN ({MAX_ARG_STRLEN} bytes)")]
    CheckArgument {
        /// Its index in argv.
        index: usize,
        /// Its length.
        len: usize,
    },
    /// One `NAME=value` string is longer than `MAX_ARG_STRLEN`.
    #[error("argument list too long: environment variable {name} is {len} bytes, over the kernel's per-string limit MAX_ARG_STRLEN ({MAX_ARG_STRLEN} bytes)")]
    CheckVariable {
        /// The variable's name.
        name: String,
        /// The length of `NAME=value`.
        len: usize,
    },
    /// Everything together is over `ARG_MAX`.
    #[error("argument list too long: {args} arguments and {vars} environment variables take {total} bytes, over the kernel's ARG_MAX ({arg_max} bytes)")]
    CheckTotal {
        /// Arguments.
        args: usize,
        /// Environment variables.
        vars: usize,
        /// Their bytes, pointers included.
        total: usize,
        /// The limit.
        arg_max: usize,
    },
}

/// Checks a command line and environment against the kernel's `execve` limits, so a
/// container that could never start says why instead of failing obscurely: each string at
/// most `MAX_ARG_STRLEN` (128 KiB), and all of them (with their pointers) within `ARG_MAX`.
pub fn check_exec_limits(argv: &[String], env: &[(String, String)], arg_max: usize) -> Result<(), ExecLimitsError> {
    let ptr = std::mem::size_of::<usize>();
    let mut total = 0usize;
    for (index, a) in argv.iter().enumerate() {
        if a.len() + 1 > MAX_ARG_STRLEN {
            return Err(ExecLimitsError::CheckArgument { index, len: a.len() });
        }
        total += a.len() + 1 + ptr;
    }
    for (k, v) in env {
        let len = k.len() + 1 + v.len();
        if len + 1 > MAX_ARG_STRLEN {
            return Err(ExecLimitsError::CheckVariable { name: k.clone(), len });
        }
        total += len + 1 + ptr;
    }
    if total > arg_max {
        return Err(ExecLimitsError::CheckTotal { args: argv.len(), vars: env.len(), total, arg_max });
    }
    Ok(())
}

/// The kernel's `ARG_MAX` for processes started from here (a quarter of the stack limit).
pub(super) fn arg_max() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_ARG_MAX) };
    if n > 0 {
        n as usize
    } else {
        // POSIX's minimum-guaranteed value on Linux with the default 8 MiB stack.
        2 << 20
    }
}

/// The namespaces of a container's workload that are not the agent's own, which a command
/// run in the container joins: its mount namespace (its root and volumes) and its PID
/// namespace.
pub struct Namespaces {
    mnt: Option<OwnedFd>,
    pid: Option<OwnedFd>,
}

impl Namespaces {
    /// Those of process `pid`, opened and then checked to still be the process that started
    /// at `start_ticks` (a pid reused since is refused).
    pub fn of(pid: i32, start_ticks: Option<u64>) -> io::Result<Namespaces> {
        let open = |kind: &str, own: &str| -> io::Result<Option<OwnedFd>> {
            let f = File::open(format!("/proc/{pid}/ns/{kind}"))?;
            let (theirs, ours) = (f.metadata()?, std::fs::metadata(own)?);
            Ok((theirs.ino() != ours.ino() || theirs.dev() != ours.dev()).then(|| f.into()))
        };
        let ns = Namespaces { mnt: open("mnt", "/proc/self/ns/mnt")?, pid: open("pid", "/proc/thread-self/ns/pid")? };
        if !crate::base::procs::process_alive(pid, start_ticks) {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("process {pid} of the container is gone")));
        }
        Ok(ns)
    }

    /// None to join: the command runs in the agent's own namespaces.
    #[cfg(test)]
    pub fn none() -> Namespaces {
        Namespaces { mnt: None, pid: None }
    }
}

/// `setns(2)`.
fn setns(fd: &impl AsRawFd, kind: libc::c_int) -> io::Result<()> {
    // SAFETY: a plain system call on an open namespace fd.
    if unsafe { libc::setns(fd.as_raw_fd(), kind) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// While it lives, children this thread starts go into another PID namespace; dropped, they
/// go into the thread's own again.
struct PidNamespaceForChildren(File);

impl PidNamespaceForChildren {
    fn enter(ns: &OwnedFd) -> io::Result<PidNamespaceForChildren> {
        let own = File::open("/proc/thread-self/ns/pid")?;
        setns(ns, libc::CLONE_NEWPID)?;
        Ok(PidNamespaceForChildren(own))
    }
}

impl Drop for PidNamespaceForChildren {
    fn drop(&mut self) {
        if let Err(e) = setns(&self.0, libc::CLONE_NEWPID) {
            // Cannot happen for a thread's own namespace; said rather than hidden.
            log::error!("runtime: returning to the agent's PID namespace: {e}");
        }
    }
}

/// How a command's standard streams are connected (`Stdio`s for stdin, stdout, stderr), and
/// whether they are a terminal, which the command then takes as its controlling one.
struct Streams {
    stdin: Stdio,
    stdout: Stdio,
    stderr: Stdio,
    tty: bool,
}

/// Spawns `cmd` as container `cfg` would run it: in its namespaces `ns`, joining the cgroups
/// whose `cgroup.procs` are `procs`, with its environment, working directory and security
/// context, the leader of a process group of its own (with a terminal, of a session of its
/// own too). The outer error is a setup that failed; the inner one, the spawn (the
/// executable was not found, or a step in the child failed).
fn spawn_in_container(
    cfg: &ContainerConfig,
    procs: &[PathBuf],
    ns: &Namespaces,
    cmd: &[String],
    streams: Streams,
) -> Result<io::Result<Child>, RuntimeError> {
    let Some((prog, args)) = cmd.split_first() else {
        return Err(RuntimeError::Process { action: "exec".into(), source: std::io::Error::other("empty command") });
    };
    let cgroups = super::shim::open_cgroup_procs(procs)
        .map_err(|source| RuntimeError::Process { action: "opening the container's cgroup.procs".into(), source })?;
    let wd = if cfg.working_dir.is_empty() { "/" } else { cfg.working_dir.as_str() };
    let wd_c = CString::new(wd).map_err(|_| RuntimeError::Process {
        action: "exec".into(),
        source: io::Error::other("a working directory with a NUL byte"),
    })?;
    let mut env = super::shim::process_env(cfg);
    if streams.tty && !env.iter().any(|(k, _)| k == "TERM") {
        // As containerd gives a command run with a terminal.
        env.push(("TERM".into(), "xterm".into()));
    }
    let mut command = Command::new(prog);
    command.args(args).env_clear().envs(env).stdin(streams.stdin).stdout(streams.stdout).stderr(streams.stderr);
    let tty = streams.tty;
    if !tty {
        // With a terminal, `setsid` below makes the group (a group leader could not call it).
        command.process_group(0);
    }
    if ns.mnt.is_none() {
        command.current_dir(wd);
    }
    let fds: Vec<i32> = cgroups.iter().map(|f| f.as_raw_fd()).collect();
    let mnt = ns.mnt.as_ref().map(|f| f.as_raw_fd());
    // The command runs as the container does: its identity, capabilities, no_new_privs.
    let plan = super::security::host_plan(cfg, true);
    let all_caps = super::security::all_capabilities();
    // SAFETY: the closure only calls close_range(2), setsid(2), ioctl(2), write(2), setns(2),
    // chdir(2) and the system calls of `security::apply`, which are async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            crate::base::fds::cloexec_above_stdio()?;
            if tty {
                // A session of its own, whose controlling terminal is its stdin (the
                // terminal's slave), so a shell has job control and ^C reaches it.
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            super::shim::join_cgroups(&fds)?;
            if let Some(fd) = mnt {
                // The container's root (setns puts the process at its `/`), then its directory.
                if libc::setns(fd, libc::CLONE_NEWNS) != 0 || libc::chdir(wd_c.as_ptr()) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            super::security::apply(&plan, all_caps)
        });
    }
    let spawned = match &ns.pid {
        Some(pid_ns) => PidNamespaceForChildren::enter(pid_ns).and_then(|_guard| command.spawn()),
        None => command.spawn(),
    };
    drop(cgroups);
    Ok(spawned)
}

/// Starts `cmd` as container `cfg` would, in its namespaces `ns`, joining the cgroups whose
/// `cgroup.procs` are `procs`, and returns without waiting: the caller (the prober's reaper,
/// or `exec_sync`) watches it to its deadline.
pub fn exec_start(
    cfg: &ContainerConfig,
    procs: &[PathBuf],
    ns: &Namespaces,
    cmd: &[String],
) -> Result<ExecStart, RuntimeError> {
    let streams = Streams { stdin: Stdio::null(), stdout: Stdio::piped(), stderr: Stdio::piped(), tty: false };
    let child = match spawn_in_container(cfg, procs, ns, cmd, streams)? {
        Ok(c) => c,
        Err(e) => {
            return Ok(ExecStart::Finished(ExecResult {
                exit_code: 126,
                stderr: format!("exec {:?}: {e}", cmd[0]).into_bytes(),
                ..Default::default()
            }))
        }
    };
    let p = ExecProcess::new(child)
        .map_err(|source| RuntimeError::Process { action: "watching exec output".into(), source })?;
    Ok(ExecStart::Running(p))
}

/// A pipe when `wanted`, else `/dev/null`.
fn piped_if(wanted: bool) -> Stdio {
    if wanted {
        Stdio::piped()
    } else {
        Stdio::null()
    }
}

/// Starts `cmd` interactively as `exec_start` does (same namespaces, cgroups, environment,
/// working directory, security context): with `io.tty`, stdin, stdout and stderr are a new
/// pseudo-terminal that becomes its controlling terminal; without, each stream asked for is
/// a pipe and the others `/dev/null`.
pub fn exec_session(
    cfg: &ContainerConfig,
    procs: &[PathBuf],
    ns: &Namespaces,
    cmd: &[String],
    io: StreamIo,
) -> Result<ExecSession, RuntimeError> {
    let failed = |action: &str| {
        let action = action.to_string();
        move |source| RuntimeError::Process { action, source }
    };
    let (streams, master) = if io.tty {
        let (master, slave) = open_pty().map_err(failed("opening a pseudo-terminal"))?;
        let dup = || slave.try_clone().map(Stdio::from).map_err(failed("duplicating the terminal"));
        let (stdin, stdout) = (dup()?, dup()?);
        (Streams { stdin, stdout, stderr: Stdio::from(slave), tty: true }, Some(master))
    } else {
        let streams =
            Streams { stdin: piped_if(io.stdin), stdout: piped_if(io.stdout), stderr: piped_if(io.stderr), tty: false };
        (streams, None)
    };
    // The parent's copies of the slave are closed with `streams` once the child has its own,
    // so the master reads EIO when the command's last process is gone.
    let child = spawn_in_container(cfg, procs, ns, cmd, streams)?.map_err(failed(&format!("exec {:?}", cmd[0])))?;
    ExecSession::new(child, master).map_err(failed("holding the exec session's streams"))
}

/// A new pseudo-terminal: its master (read-write, close-on-exec) and its slave (close-on-exec,
/// never the agent's controlling terminal).
fn open_pty() -> io::Result<(File, File)> {
    // SAFETY: posix_openpt returns a new fd or -1.
    let fd = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let master = unsafe { File::from_raw_fd(fd) };
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: grantpt and unlockpt take the master fd; ptsname_r writes at most `name.len()`
    // bytes, NUL included, into `name`.
    unsafe {
        if libc::grantpt(fd) != 0 || libc::unlockpt(fd) != 0 {
            return Err(io::Error::last_os_error());
        }
        let r = libc::ptsname_r(fd, name.as_mut_ptr(), name.len());
        if r != 0 {
            return Err(io::Error::from_raw_os_error(r));
        }
    }
    // SAFETY: ptsname_r succeeded, so `name` holds a NUL-terminated path.
    let path = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) };
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(path.to_bytes()));
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    Ok((master, slave))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_limits_name_the_kernel_limit_that_is_exceeded() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(check_exec_limits(&args(&["sh", "-c", "true"]), &[], 1 << 20).is_ok());
        let long = "x".repeat(MAX_ARG_STRLEN);
        let e = check_exec_limits(std::slice::from_ref(&long), &[], usize::MAX).unwrap_err();
        assert_eq!(e, ExecLimitsError::CheckArgument { index: 0, len: MAX_ARG_STRLEN });
        assert_eq!(e.to_string(), "argument list too long: argument 0 is 131072 bytes, over the kernel's per-string limit MAX_ARG_STRLEN (131072 bytes)");
        let e = check_exec_limits(&[], &[("K".into(), long)], usize::MAX).unwrap_err().to_string();
        assert_eq!(e, "argument list too long: environment variable K is 131074 bytes, over the kernel's per-string limit MAX_ARG_STRLEN (131072 bytes)");
        // Strings and their pointers count against ARG_MAX.
        let many: Vec<String> = (0..1000).map(|_| "a".into()).collect();
        let e = check_exec_limits(&many, &[], 1000 * (2 + 8) - 1).unwrap_err().to_string();
        assert_eq!(e, "argument list too long: 1000 arguments and 0 environment variables take 10000 bytes, over the kernel's ARG_MAX (9999 bytes)");
        assert!(check_exec_limits(&many, &[], 1000 * (2 + 8)).is_ok());
    }

    /// A command line of `sh -c script`.
    fn sh(script: &str) -> Vec<String> {
        ["/bin/sh", "-c", script].map(String::from).to_vec()
    }

    /// `script` started as a session in no container: no namespaces to join, no cgroups.
    fn session(script: &str, io: StreamIo) -> ExecSession {
        exec_session(&ContainerConfig::default(), &[], &Namespaces::none(), &sh(script), io).unwrap()
    }

    const WAIT: std::time::Duration = std::time::Duration::from_secs(10);

    /// Reads the non-blocking `f` until what was read contains `needle`, or it ends (EOF,
    /// or EIO from a terminal's master); fails at `WAIT`.
    fn read_until(mut f: &File, needle: &str) -> String {
        use std::io::Read;
        let deadline = std::time::Instant::now() + WAIT;
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&seen).contains(needle) {
            let left = deadline.checked_duration_since(std::time::Instant::now());
            let left = left.unwrap_or_else(|| panic!("no {needle:?} in {:?}", String::from_utf8_lossy(&seen)));
            crate::base::fds::poll_readable(&[f.as_raw_fd()], Some(left)).unwrap();
            match f.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.raw_os_error() == Some(libc::EIO) => break,
                Err(e) => panic!("read: {e}"),
            }
        }
        String::from_utf8_lossy(&seen).into_owned()
    }

    /// The session's exit code, waited for up to `WAIT`.
    fn exit_code(s: &mut ExecSession) -> i32 {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if let Some(code) = s.try_exit().unwrap() {
                return code;
            }
            assert!(std::time::Instant::now() < deadline, "the command did not exit");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn a_session_with_a_terminal_has_its_size_its_input_and_its_exit_code() {
        use std::io::Write;
        let io = StreamIo { stdin: true, stdout: true, stderr: true, tty: true };
        // `go` first, so the size is surely set before `stty` reads it.
        let mut s = session("read go; stty size; read x; echo got:$x; exit 7", io);
        assert!(s.stdin().is_none() && s.stdout().is_none() && s.stderr().is_none(), "one terminal for all three");
        s.resize(100, 40).unwrap();
        let mut pty = s.pty().unwrap();
        pty.write_all(b"go\n").unwrap();
        assert!(read_until(pty, "40 100").contains("40 100"));
        pty.write_all(b"hi\n").unwrap();
        assert!(read_until(pty, "got:hi").contains("got:hi"));
        assert_eq!(exit_code(&mut s), 7);
        assert_eq!(s.try_exit().unwrap(), Some(7), "the exit code stays");
    }

    #[test]
    fn a_terminal_is_the_commands_controlling_one_and_end_of_input_ends_a_read() {
        let io = StreamIo { stdin: true, stdout: true, tty: true, ..StreamIo::default() };
        let mut s = session("test -t 0 && test -t 2 && (: </dev/tty) && echo tty:$TERM; cat; echo done", io);
        assert!(read_until(s.pty().unwrap(), "tty:xterm").contains("tty:xterm"));
        s.close_stdin();
        assert!(read_until(s.pty().unwrap(), "done").contains("done"));
        assert_eq!(exit_code(&mut s), 0);
    }

    #[test]
    fn a_session_without_a_terminal_has_pipes_for_what_is_asked() {
        use std::io::Write;
        let io = StreamIo { stdin: true, stdout: true, stderr: true, tty: false };
        let mut s = session("cat; echo err >&2; exit 3", io);
        assert!(s.pty().is_none());
        s.resize(80, 24).unwrap();
        s.stdin().unwrap().write_all(b"hello\n").unwrap();
        s.close_stdin();
        assert!(s.stdin().is_none());
        assert_eq!(read_until(s.stdout().unwrap(), "\0"), "hello\n");
        assert_eq!(read_until(s.stderr().unwrap(), "\0"), "err\n");
        assert_eq!(exit_code(&mut s), 3);
        // What is not asked is /dev/null.
        let mut s = session("cat; echo out", StreamIo { stdout: true, ..StreamIo::default() });
        assert!(s.stdin().is_none() && s.stderr().is_none());
        assert_eq!(read_until(s.stdout().unwrap(), "\0"), "out\n");
        assert_eq!(exit_code(&mut s), 0);
    }

    #[test]
    fn a_killed_session_reports_the_signal_and_what_its_group_left_behind_is_killed() {
        let mut s = session("exec sleep 1000", StreamIo::default());
        assert_eq!(s.try_exit().unwrap(), None);
        s.kill();
        assert_eq!(s.try_exit().unwrap(), Some(128 + libc::SIGKILL));
        // A background child holding stdout ends with the leader, so the stream ends too.
        let mut s = session("sleep 1000 & echo started", StreamIo { stdout: true, ..StreamIo::default() });
        assert_eq!(exit_code(&mut s), 0);
        assert_eq!(read_until(s.stdout().unwrap(), "\0"), "started\n");
    }

    #[test]
    fn a_session_whose_executable_is_missing_says_so() {
        let cmd = vec!["/nonexistent/ferrolet-test".to_string()];
        let e = exec_session(&ContainerConfig::default(), &[], &Namespaces::none(), &cmd, StreamIo::default());
        let e = crate::base::errors::Chain(&e.err().unwrap()).to_string();
        assert!(e.contains("/nonexistent/ferrolet-test") && e.contains("No such file"), "{e}");
    }
}
