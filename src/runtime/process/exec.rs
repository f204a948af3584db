//! `exec_sync` of the process runtime: a command run on the host with a container's env,
//! working directory and cgroup, its output captured up to a cap, killed at its timeout.

use crate::runtime::{ContainerConfig, ExecResult, RuntimeError};
use crate::util;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Output kept per stream by `exec_sync`; the rest is read and dropped.
const EXEC_OUTPUT_CAP: usize = 1 << 20;

use crate::util::MAX_ARG_STRLEN;

/// Checks a command line and environment against the kernel's `execve` limits, so a
/// container that could never start says why instead of failing obscurely: each string at
/// most `MAX_ARG_STRLEN` (128 KiB), and all of them (with their pointers) within `ARG_MAX`.
pub fn check_exec_limits(argv: &[String], env: &[(String, String)], arg_max: usize) -> Result<(), String> {
    let ptr = std::mem::size_of::<usize>();
    let mut total = 0usize;
    for (i, a) in argv.iter().enumerate() {
        if a.len() + 1 > MAX_ARG_STRLEN {
            return Err(format!(
                "argument list too long: argument {i} is {} bytes, over the kernel's per-string limit MAX_ARG_STRLEN ({MAX_ARG_STRLEN} bytes)",
                a.len()
            ));
        }
        total += a.len() + 1 + ptr;
    }
    for (k, v) in env {
        let len = k.len() + 1 + v.len();
        if len + 1 > MAX_ARG_STRLEN {
            return Err(format!(
                "argument list too long: environment variable {k} is {len} bytes, over the kernel's per-string limit MAX_ARG_STRLEN ({MAX_ARG_STRLEN} bytes)"
            ));
        }
        total += len + 1 + ptr;
    }
    if total > arg_max {
        return Err(format!(
            "argument list too long: {} arguments and {} environment variables take {total} bytes, over the kernel's ARG_MAX ({arg_max} bytes)",
            argv.len(),
            env.len()
        ));
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

/// Runs `cmd` as container `cfg` would, joining the cgroups whose `cgroup.procs` are `procs`.
pub fn exec_sync(
    cfg: &ContainerConfig,
    procs: &[PathBuf],
    cmd: &[String],
    timeout: Duration,
) -> Result<ExecResult, RuntimeError> {
    let Some((prog, args)) = cmd.split_first() else {
        return Err(RuntimeError::Process { action: "exec".into(), source: std::io::Error::other("empty command") });
    };
    let cgroups = super::shim::open_cgroup_procs(procs)
        .map_err(|source| RuntimeError::Process { action: "opening the container's cgroup.procs".into(), source })?;
    let mut command = Command::new(prog);
    command
        .args(args)
        .env_clear()
        .envs(super::shim::process_env(cfg))
        .current_dir(if cfg.working_dir.is_empty() { "/" } else { &cfg.working_dir })
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let fds: Vec<i32> = cgroups.iter().map(|f| f.as_raw_fd()).collect();
    // SAFETY: the closure only calls write(2), which is async-signal-safe.
    unsafe {
        command.pre_exec(move || super::shim::join_cgroups(&fds));
    }
    let started = Instant::now();
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Ok(ExecResult {
                exit_code: 126,
                stderr: format!("exec {prog:?}: {e}").into_bytes(),
                ..Default::default()
            })
        }
    };
    drop(cgroups);
    let pid = child.id() as i32;
    let mut streams = [child.stdout.take().map(util::fd_file), child.stderr.take().map(util::fd_file)];
    let mut outs: [Vec<u8>; 2] = [Vec::new(), Vec::new()];
    let deadline = started + timeout;
    let mut timed_out = false;
    let mut buf = [0u8; 8192];
    while streams.iter().any(Option::is_some) {
        let now = Instant::now();
        if now >= deadline {
            timed_out = true;
            break;
        }
        let open: Vec<(usize, i32)> = streams
            .iter()
            .enumerate()
            .filter_map(|(i, s): (usize, &Option<File>)| s.as_ref().map(|f| (i, f.as_raw_fd())))
            .collect();
        let fds: Vec<i32> = open.iter().map(|(_, fd)| *fd).collect();
        let ready = util::poll_readable(&fds, Some(deadline - now))
            .map_err(|source| RuntimeError::Process { action: "polling exec output".into(), source })?;
        for ((i, _), r) in open.iter().zip(ready) {
            if r == 0 {
                continue;
            }
            let Some(f) = streams[*i].as_mut() else {
                continue;
            };
            match f.read(&mut buf) {
                Ok(0) | Err(_) => streams[*i] = None,
                Ok(n) => {
                    let room = EXEC_OUTPUT_CAP.saturating_sub(outs[*i].len());
                    outs[*i].extend_from_slice(&buf[..n.min(room)]);
                }
            }
        }
    }
    // The output is closed; the command may still run (it closed its pipes early).
    let status = loop {
        let waited =
            child.try_wait().map_err(|source| RuntimeError::Process { action: "waiting for exec".into(), source })?;
        if let Some(status) = waited {
            break status;
        }
        if timed_out || Instant::now() >= deadline {
            timed_out = true;
            let _ = util::kill_group(pid, libc::SIGKILL);
            // SIGKILL cannot be caught, so this wait returns promptly.
            break child
                .wait()
                .map_err(|source| RuntimeError::Process { action: "waiting for exec".into(), source })?;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let exit_code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    let [stdout, stderr] = outs;
    Ok(ExecResult { exit_code: if timed_out { -1 } else { exit_code }, stdout, stderr, timed_out })
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
        assert!(e.contains("argument 0") && e.contains("MAX_ARG_STRLEN (131072 bytes)"), "{e}");
        let e = check_exec_limits(&[], &[("K".into(), long)], usize::MAX).unwrap_err();
        assert!(e.contains("environment variable K"), "{e}");
        // Strings and their pointers count against ARG_MAX.
        let many: Vec<String> = (0..1000).map(|_| "a".into()).collect();
        let e = check_exec_limits(&many, &[], 1000 * (2 + 8) - 1).unwrap_err();
        assert!(e.contains("1000 arguments") && e.contains("ARG_MAX (9999 bytes)"), "{e}");
        assert!(check_exec_limits(&many, &[], 1000 * (2 + 8)).is_ok());
    }
}
