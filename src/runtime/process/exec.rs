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
