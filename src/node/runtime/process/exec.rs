//! `exec_start` of the process runtime: a command run in a container — its root and PID
//! namespace (joined, as `runc exec` does, not made again), env, working directory, cgroup
//! and security context — watched, capped and killed at its timeout by
//! `runtime::exec::ExecProcess`; and the kernel's `execve` limits every container is checked
//! against before it starts.

use crate::base::procs::MAX_ARG_STRLEN;
use crate::node::runtime::exec::{ExecProcess, ExecStart};
use crate::node::runtime::{ContainerConfig, ExecResult, RuntimeError};
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

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

/// Starts `cmd` as container `cfg` would, in its namespaces `ns`, joining the cgroups whose
/// `cgroup.procs` are `procs`, and returns without waiting: the caller (the prober's reaper,
/// or `exec_sync`) watches it to its deadline.
pub fn exec_start(
    cfg: &ContainerConfig,
    procs: &[PathBuf],
    ns: &Namespaces,
    cmd: &[String],
) -> Result<ExecStart, RuntimeError> {
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
    let mut command = Command::new(prog);
    command
        .args(args)
        .env_clear()
        .envs(super::shim::process_env(cfg))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if ns.mnt.is_none() {
        command.current_dir(wd);
    }
    let fds: Vec<i32> = cgroups.iter().map(|f| f.as_raw_fd()).collect();
    let mnt = ns.mnt.as_ref().map(|f| f.as_raw_fd());
    // The command runs as the container does: its identity, capabilities, no_new_privs.
    let plan = super::security::host_plan(cfg, true);
    let all_caps = super::security::all_capabilities();
    // SAFETY: the closure only calls close_range(2), write(2), setns(2), chdir(2) and the
    // system calls of `security::apply`, which are async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            crate::base::fds::cloexec_above_stdio()?;
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
    let child = match spawned {
        Ok(c) => c,
        Err(e) => {
            return Ok(ExecStart::Finished(ExecResult {
                exit_code: 126,
                stderr: format!("exec {prog:?}: {e}").into_bytes(),
                ..Default::default()
            }))
        }
    };
    drop(cgroups);
    let p = ExecProcess::new(child)
        .map_err(|source| RuntimeError::Process { action: "watching exec output".into(), source })?;
    Ok(ExecStart::Running(p))
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
}
