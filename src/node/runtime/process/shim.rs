//! The per-container shim: `ferrolet shim <container-dir>`. It detaches from the agent,
//! builds the container's own root (`root::build`), starts the workload there in its own
//! session (with the identity, capabilities and `no_new_privs` of its security context:
//! `security::apply`), copies its output into the
//! CRI log file, stops it on request (SIGTERM, then SIGKILL after the grace period the
//! agent wrote to `stop`; or by itself at the time the agent wrote to `stop-at` before a
//! preStop hook)
//! and records how it exited. It is single-threaded: one `poll` loop over the output pipes
//! and three signal pipes, waking only when something happens.

use super::logfile::{say, LogFile, Stream};
use super::root::{self, build};
use super::security;
use super::{files, ContainerRecord, ExitRecord, ShimIdentity, ShimState};
use crate::base::state_files::{read_json, write_json};
use crate::base::{errors, fds, procs, state_files};
use crate::node::runtime::ContainerConfig;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// PATH for workloads whose env does not set one (what container images usually set).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Grace period when SIGTERM arrives without a `stop` file (e.g. the host shuts down).
const DEFAULT_GRACE: Duration = crate::api::defaults::DEFAULT_TERMINATION_GRACE;
/// How long output is still drained after the workload exited.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// The environment a container process gets: its env plus PATH and HOSTNAME defaults.
pub fn process_env(cfg: &ContainerConfig) -> Vec<(String, String)> {
    let mut env = cfg.env.clone();
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.insert(0, ("PATH".into(), DEFAULT_PATH.into()));
    }
    if !env.iter().any(|(k, _)| k == "HOSTNAME") {
        env.insert(0, ("HOSTNAME".into(), crate::base::net::hostname()));
    }
    env
}

/// Opens the `cgroup.procs` files a process must join, before forking (no allocation may
/// happen between fork and exec in a threaded program, so the files are opened here).
pub fn open_cgroup_procs(paths: &[PathBuf]) -> io::Result<Vec<File>> {
    paths
        .iter()
        .map(|p| {
            OpenOptions::new()
                .write(true)
                .open(p)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
        })
        .collect()
}

/// In the child after fork: moves the calling process into each cgroup (`0` means self).
pub fn join_cgroups(fds: &[RawFd]) -> io::Result<()> {
    for &fd in fds {
        // SAFETY: write(2) on an open fd with a valid one-byte buffer; async-signal-safe.
        if unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) } != 1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The kernel's OOM-kill count for a memory cgroup (v1 `memory.oom_control`, v2 `memory.events`).
pub fn oom_kills(memory_cgroup: &Path) -> Option<u64> {
    for (file, key) in [("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill")] {
        if let Ok(text) = std::fs::read_to_string(memory_cgroup.join(file)) {
            for line in text.lines() {
                if let Some(v) = line.strip_prefix(key).and_then(|r| r.strip_prefix(' ')) {
                    return v.trim().parse().ok();
                }
            }
        }
    }
    None
}

/// Entry point of `ferrolet shim <dir>`; returns the shim's exit code.
pub fn main(dir: &Path) -> i32 {
    // Detach: the first process exits at once (the agent reaps it), the second becomes a
    // session leader that no terminal signal and no agent exit can reach.
    // SAFETY: called first thing in a fresh, single-threaded process.
    match unsafe { libc::fork() } {
        -1 => {
            say(format_args!("shim: fork: {}", io::Error::last_os_error()));
            return 1;
        }
        0 => {}
        _ => return 0,
    }
    // SAFETY: setsid has no preconditions; failure only means we already lead a session.
    unsafe { libc::setsid() };
    if let Some(gid) = std::env::var(STATE_GID_ENV).ok().and_then(|g| g.parse().ok()) {
        state_files::StateAccess { gid: Some(gid) }.install();
    }
    // The lock on `shim.lock` is held for as long as this shim lives: it is how the agent
    // tells a live shim from a dead one without trusting a pid.
    let _lock = match hold_lock(dir) {
        Ok(l) => l,
        Err(e) => {
            say(format_args!("shim: {}: {e}", dir.display()));
            return 1;
        }
    };
    match run(dir) {
        Ok(()) => 0,
        Err(e) => {
            say(format_args!("shim: {}: {e}", dir.display()));
            1
        }
    }
}

/// Environment variable naming the fd of the agent's locked `shim.lock` (inherited).
pub const LOCK_FD_ENV: &str = "FERROLET_SHIM_LOCK_FD";
/// Environment variable carrying the configured state group's gid, if any.
pub const STATE_GID_ENV: &str = "FERROLET_STATE_GID";

/// Keeps the lock the agent took for this shim (passed as an inherited fd), or takes it when
/// started by hand. Either way the workload must not inherit it.
fn hold_lock(dir: &Path) -> io::Result<File> {
    if let Some(fd) = std::env::var(LOCK_FD_ENV).ok().and_then(|v| v.parse::<RawFd>().ok()) {
        // SAFETY: the agent passed this fd open to us for exactly this purpose; we own it now.
        let f = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        // SAFETY: fcntl on an fd we own.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
        return Ok(f);
    }
    let f = state_files::create_private_file(&dir.join(files::LOCK))?;
    if !super::records::try_lock(&f)? {
        return Err(io::Error::other("another shim is running for this container"));
    }
    Ok(f)
}

fn signal_pipe(sig: i32) -> io::Result<UnixStream> {
    let (read, write) = UnixStream::pair()?;
    read.set_nonblocking(true)?;
    signal_hook::low_level::pipe::register(sig, write)?;
    Ok(read)
}

fn drain(sock: &mut UnixStream) {
    let mut buf = [0u8; 64];
    while matches!(sock.read(&mut buf), Ok(n) if n > 0) {}
}

fn run(dir: &Path) -> io::Result<()> {
    // Signals first: a stop request from now on is seen, never the default SIGTERM death.
    let mut sigchld = signal_pipe(libc::SIGCHLD)?;
    let mut sigterm = signal_pipe(libc::SIGTERM)?;
    let mut sigusr1 = signal_pipe(libc::SIGUSR1)?;
    let record: ContainerRecord = read_json(&dir.join(files::CONFIG))?;
    let cfg = &record.config;
    let me = std::process::id() as i32;
    let identity = ShimIdentity::new(me, procs::process_start_ticks(me).unwrap_or(0), &record);
    write_json(&dir.join(files::SHIM), &identity)?;
    if dir.join(files::STOP).exists() {
        // Stopped before it ran: record that instead of starting the workload.
        let exit = ExitRecord {
            exit_code: 128 + libc::SIGTERM,
            signal: Some(libc::SIGTERM),
            reason: "Error".into(),
            message: "stopped before the container process started".into(),
            finished_at: SystemTime::now(),
        };
        return write_exit(dir, &exit);
    }
    let mut log = LogFile::open(&cfg.log_path, record.log_max_size, record.log_max_files);
    let cgroup = record.cgroup.clone().unwrap_or_default();
    // A scope's cgroup is made below, with no OOM kill counted yet.
    let oom_before = cgroup.memory.as_deref().and_then(oom_kills).or(cgroup.scope.as_ref().map(|_| 0));

    // The scope's placeholder goes once the workload is in the scope (or failed to start).
    let scope = cgroup.scope.as_ref().map(start_scope).transpose();
    let spawned = scope
        .map_err(|e| io::Error::other(errors::Chain(&e).to_string()))
        .and_then(|_placeholder| spawn_workload(dir, &record, &cgroup.procs));
    let (mut child, mut init_status) = match spawned {
        Ok(c) => c,
        Err(e) => {
            let msg = format!(
                "failed to start container process {:?}: {e}",
                cfg.argv.first().map(String::as_str).unwrap_or("")
            );
            log.write_chunk(Stream::Stderr, format!("{msg}\n").as_bytes());
            log.finish();
            remove_cgroup(&cgroup);
            let exit = ExitRecord {
                exit_code: 128,
                signal: None,
                reason: "StartError".into(),
                message: msg,
                finished_at: SystemTime::now(),
            };
            return write_exit(dir, &exit);
        }
    };
    let pid = child.id() as i32;
    let state = ShimState {
        shim_pid: me,
        shim_start_ticks: identity.shim_start_ticks,
        pid,
        start_ticks: procs::process_start_ticks(pid),
        started_at: SystemTime::now(),
    };
    if let Err(e) = write_json(&dir.join(files::STATE), &state) {
        // Unrecorded, it could not be stopped: it goes, and that is recorded.
        let _ = procs::kill_group(pid, libc::SIGKILL);
        let _ = child.wait();
        remove_cgroup(&cgroup);
        let exit = ExitRecord {
            exit_code: 128,
            signal: None,
            reason: "StartError".into(),
            message: format!("cannot record the started process: {e}"),
            finished_at: SystemTime::now(),
        };
        return write_exit(dir, &exit);
    }
    // The agent writes `stop` and then looks for state.json; we write state.json and then
    // look for `stop`: one of us sees the other, so a stop racing the start is never lost.
    let mut stop_pending = dir.join(files::STOP).exists();
    // The same for a stop set for later (`stop-at`, before a preStop hook).
    let mut stop_at = read_stop_at(&dir.join(files::STOP_AT));

    let mut outputs: [Option<File>; 2] = [child.stdout.take().map(fds::fd_file), child.stderr.take().map(fds::fd_file)];
    for f in outputs.iter().flatten() {
        fds::set_nonblocking(f)?;
    }
    let mut kill_at: Option<Instant> = None;
    let mut exited: Option<(std::process::ExitStatus, Instant)> = None;
    let mut buf = vec![0u8; 32 * 1024];

    // Running --exit--> Draining --pipes closed or DRAIN_LIMIT--> Done.
    // Running --SIGTERM--> Stopping (SIGTERM sent) --grace over--> SIGKILL sent.
    // Running --SIGUSR1--> Running with a stop set for later (`stop-at`) --its time--> Stopping.
    loop {
        if let Some((_, at)) = exited {
            if outputs.iter().all(Option::is_none) || at.elapsed() >= DRAIN_LIMIT {
                break;
            }
        }
        let now = Instant::now();
        let mut timeout = kill_at.map(|t| t.saturating_duration_since(now));
        if let Some((_, at)) = exited {
            timeout = Some((at + DRAIN_LIMIT).saturating_duration_since(now));
        }
        if let (Some((at, _)), None) = (stop_at, exited) {
            let until = at.saturating_duration_since(now);
            timeout = Some(timeout.map_or(until, |t| t.min(until)));
        }
        if stop_pending {
            timeout = Some(Duration::ZERO);
        }
        let mut fds = vec![sigchld.as_raw_fd(), sigterm.as_raw_fd(), sigusr1.as_raw_fd()];
        fds.extend(outputs.iter().flatten().map(|f| f.as_raw_fd()));
        let ready = fds::poll_readable(&fds, timeout)?;

        if ready[2] != 0 {
            drain(&mut sigusr1);
            // An earlier deadline replaces a later one, never the other way round.
            if let Some((at, grace)) = read_stop_at(&dir.join(files::STOP_AT)) {
                if stop_at.map_or(true, |(t, _)| at < t) {
                    stop_at = Some((at, grace));
                }
            }
        }
        if ready[1] != 0 || std::mem::take(&mut stop_pending) {
            drain(&mut sigterm);
            if exited.is_none() {
                begin_stop(pid, stop_grace(&dir.join(files::STOP)), &mut kill_at);
            }
        }
        if let (Some((at, grace)), None) = (stop_at, exited) {
            // The agent did not stop it in time (it died during the preStop hook).
            if Instant::now() >= at {
                begin_stop(pid, grace, &mut kill_at);
                stop_at = None;
            }
        }
        if let (Some(at), None) = (kill_at, exited) {
            if Instant::now() >= at {
                let _ = procs::kill_group(pid, libc::SIGKILL);
                kill_at = None;
            }
        }
        if ready[0] != 0 || exited.is_none() {
            drain(&mut sigchld);
            if exited.is_none() {
                if let Some(status) = child.try_wait()? {
                    // Like a PID namespace going away: whatever the workload left in its
                    // process group dies with it.
                    let _ = procs::kill_group(pid, libc::SIGKILL);
                    exited = Some((status, Instant::now()));
                }
            }
        }
        let mut idx = 3;
        for (i, slot) in outputs.iter_mut().enumerate() {
            let Some(f) = slot.as_mut() else { continue };
            let r = ready[idx];
            idx += 1;
            if r == 0 {
                continue;
            }
            let stream = if i == 0 { Stream::Stdout } else { Stream::Stderr };
            loop {
                match f.read(&mut buf) {
                    Ok(0) => {
                        *slot = None;
                        break;
                    }
                    Ok(n) => log.write_chunk(stream, &buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        *slot = None;
                        break;
                    }
                }
            }
        }
    }
    log.finish();
    let Some((status, _)) = exited else {
        return Err(io::Error::other("the workload's exit was not observed"));
    };
    // With a PID namespace, `child` is its reaping PID 1, which passed on how the workload
    // ended; without that word (PID 1 itself was killed), PID 1's own end is the workload's.
    let status = init_status.as_mut().and_then(read_init_status).unwrap_or(status);
    let signal = status.signal();
    let exit_code = status.code().unwrap_or_else(|| 128 + signal.unwrap_or(0));
    let oom_after = cgroup.memory.as_deref().and_then(oom_kills);
    // The cgroup goes before the exit is recorded, so a restarted instance never finds
    // the old one's cgroup in its way.
    remove_cgroup(&cgroup);
    let oom = signal == Some(libc::SIGKILL) && matches!((oom_before, oom_after), (Some(b), Some(a)) if a > b);
    let reason = match (oom, exit_code) {
        (true, _) => "OOMKilled",
        (false, 0) => "Completed",
        _ => "Error",
    };
    let exit =
        ExitRecord { exit_code, signal, reason: reason.into(), message: String::new(), finished_at: SystemTime::now() };
    write_exit(dir, &exit)
}

/// SIGTERM now and SIGKILL after `grace` (at once when it is zero). A second request may
/// shorten the grace period, never lengthen it.
fn begin_stop(pid: i32, grace: Duration, kill_at: &mut Option<Instant>) {
    let at = Instant::now() + grace;
    if kill_at.map_or(true, |k| at < k) {
        let sig = if grace.is_zero() { libc::SIGKILL } else { libc::SIGTERM };
        let _ = procs::kill_group(pid, sig);
        *kill_at = Some(at);
    }
}

/// The stop the agent set for later in `stop-at` (`<unix ms> <grace ms>`), as a time on
/// this shim's monotonic clock; none without the file. A damaged file is said in shim.log.
fn read_stop_at(path: &Path) -> Option<(Instant, Duration)> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => {
            say(format_args!("shim: {}: {e}", path.display()));
            return None;
        }
    };
    let mut parts = text.split_whitespace().map(str::parse::<u64>);
    let (Some(Ok(at_ms)), Some(Ok(grace_ms))) = (parts.next(), parts.next()) else {
        say(format_args!("shim: {}: not `<unix ms> <grace ms>`: {text:?}", path.display()));
        return None;
    };
    let at = SystemTime::UNIX_EPOCH + Duration::from_millis(at_ms);
    let from_now = at.duration_since(SystemTime::now()).unwrap_or_default();
    Some((Instant::now() + from_now, Duration::from_millis(grace_ms)))
}

/// The grace period the agent wrote to `stop`; without one (SIGTERM from elsewhere, e.g.
/// the host shutting down) `DEFAULT_GRACE`. A damaged file is said in shim.log, not ignored.
fn stop_grace(path: &Path) -> Duration {
    match std::fs::read_to_string(path) {
        // Made empty on a full disk: no grace period was given.
        Ok(text) if text.trim().is_empty() => DEFAULT_GRACE,
        Ok(text) => match text.trim().parse::<u64>() {
            Ok(ms) => Duration::from_millis(ms),
            Err(e) => {
                say(format_args!("shim: {}: {e}; using the default grace period {DEFAULT_GRACE:?}", path.display()));
                DEFAULT_GRACE
            }
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => DEFAULT_GRACE,
        Err(e) => {
            say(format_args!("shim: {}: {e}; using the default grace period {DEFAULT_GRACE:?}", path.display()));
            DEFAULT_GRACE
        }
    }
}

/// Records the exit twice, so one damaged file cannot turn a container that succeeded into
/// one whose exit is unknown. The backup goes first: `exit.json` is the shim's last write,
/// so once it is there nothing more is written in the directory. A record that cannot be
/// written (a full disk) is kept and tried again, after 1 s, 2 s, … at most every 10 s,
/// until it is: the shim lives on (holding its lock, so the container is seen running)
/// rather than lose how the workload ended.
fn write_exit(dir: &Path, exit: &ExitRecord) -> io::Result<()> {
    let mut pause = Duration::from_secs(1);
    let mut said = false;
    loop {
        let written =
            write_json(&dir.join(files::EXIT_BACKUP), exit).and_then(|()| write_json(&dir.join(files::EXIT), exit));
        match written {
            Ok(()) => return Ok(()),
            // A directory that is gone has no one to read it.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(e),
            // No data block to be had: the exit goes into a link's target (an inode only).
            Err(e)
                if matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
                    && std::os::unix::fs::symlink(exit.to_link(), dir.join(files::EXIT_LINK)).is_ok() =>
            {
                say(format_args!("shim: cannot write the exit record ({e}); kept in {}", files::EXIT_LINK));
                return Ok(());
            }
            Err(e) => {
                if !said {
                    say(format_args!("shim: cannot record the exit ({e}); trying again until it can be written"));
                    said = true;
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(10));
            }
        }
    }
}

/// A placeholder process holding a new scope until the workload is in it (killed and
/// reaped when dropped).
struct Placeholder(libc::pid_t);

impl Drop for Placeholder {
    fn drop(&mut self) {
        // SAFETY: kill and waitpid of the shim's own child.
        unsafe {
            libc::kill(self.0, libc::SIGKILL);
            libc::waitpid(self.0, std::ptr::null_mut(), 0);
        }
    }
}

/// Starts the container's scope (the systemd driver) around a placeholder process and
/// writes its control files; the workload then joins the scope's cgroup as it would join a
/// cgroupfs one, and the placeholder goes. (systemd starts a scope only around a process,
/// stops it when it is empty, and the workload's pid is not known before it runs.)
fn start_scope(scope: &super::ContainerScope) -> Result<Placeholder, crate::node::cm::cgroupfs::CgroupError> {
    use crate::node::cm::{cgroupfs, systemd};
    // SAFETY: the child only calls async-signal-safe functions (prctl, pause).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let source = io::Error::last_os_error();
        return Err(cgroupfs::CgroupError::CreateCgroup { path: scope.unit.clone().into(), source });
    }
    if pid == 0 {
        // SAFETY: as above; it waits for the SIGKILL of `Placeholder::drop`, or the shim's death.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            loop {
                libc::pause();
            }
        }
    }
    let placeholder = Placeholder(pid);
    systemd::start_scope(&systemd::system_bus(), &scope.unit, &scope.slice, pid as u32, &scope.limits)?;
    for (file, value) in &scope.writes {
        cgroupfs::write_control_file(file, value)?;
    }
    Ok(placeholder)
}

/// Kills what is left in a container cgroup and removes it (best effort: the orphan
/// cleanup of the pod cgroup catches anything left).
pub fn remove_cgroup(cg: &super::ContainerCgroup) {
    for d in &cg.dirs {
        if let Err(e) = crate::node::cm::cgroupfs::kill_and_remove(d) {
            log::warn!("runtime: {}", errors::Chain(&e));
        }
    }
}

/// The container's root for `record` (in `dir`), made in the shim's own mount namespace
/// (`root::build::prepare`); `None` when the shim is not root (the container shares the
/// node's, its mounts refused at create).
fn prepare_root(dir: &Path, record: &ContainerRecord, wd: &str) -> io::Result<Option<build::Entry>> {
    let support = record.root.unwrap_or_else(build::support);
    if support == root::Support::None {
        return Ok(None);
    }
    let cfg = &record.config;
    let volumes = root::volumes(cfg, |p| p.is_dir());
    let node_mounts = build::node_mounts()?;
    let plan = root::plan(&root::RootInputs {
        layer_dir: &dir.join(files::ROOT),
        hidden: &record.hidden,
        overlay: support == root::Support::Overlay,
        read_only_root: cfg.security.readonly_rootfs,
        privileged: cfg.security.privileged,
        unmasked_proc: cfg.security.unmasked_proc,
        volumes: &volumes,
        node_mounts: &node_mounts,
        link: &|p| std::fs::read_link(p).ok(),
    });
    build::prepare(&plan, wd).map(Some)
}

/// Starts the workload in its own root (as root); with a PID namespace
/// (`security::Plan::pid_namespace`) the child is the namespace's reaping PID 1, and the
/// returned pipe brings the workload's wait status.
fn spawn_workload(dir: &Path, record: &ContainerRecord, procs: &[PathBuf]) -> io::Result<(Child, Option<File>)> {
    let cfg = &record.config;
    let (prog, args) = cfg.argv.split_first().ok_or_else(|| io::Error::other("empty command"))?;
    let cgroups = open_cgroup_procs(procs)?;
    let fds: Vec<RawFd> = cgroups.iter().map(|f| f.as_raw_fd()).collect();
    let wd = if cfg.working_dir.is_empty() { "/" } else { cfg.working_dir.as_str() };
    let entry = prepare_root(dir, record, wd).map_err(|e| io::Error::new(e.kind(), format!("making its root: {e}")))?;
    if entry.is_none() && !Path::new(wd).is_dir() {
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("working directory {wd:?} does not exist")));
    }
    let plan = security::host_plan(cfg, record.host_pid);
    let all_caps = security::all_capabilities();
    let status_pipe = if plan.pid_namespace {
        // The shim's next child (the only one it makes) is the new namespace's PID 1.
        // SAFETY: a plain system call; this process stays where it is.
        if unsafe { libc::unshare(libc::CLONE_NEWPID) } != 0 {
            return Err(io::Error::other(format!("a PID namespace: {}", io::Error::last_os_error())));
        }
        Some(fds::pipe()?)
    } else {
        None
    };
    let status_fd = status_pipe.as_ref().map(|(_, w)| w.as_raw_fd());
    // kubelet's OOM score by QoS class (Guaranteed -997, BestEffort 1000, Burstable by its
    // memory request), written by the workload itself before it drops its capabilities
    // (lowering it needs CAP_SYS_RESOURCE); formatted now, no allocation after the fork.
    // Without CAP_SYS_RESOURCE (some sandboxes) a score below the inherited 0 cannot be
    // set: 0 then, the lowest it may have (the agent said so at start).
    let oom_score = cfg.linux.as_ref().map(|l| {
        let value =
            if l.oom_score_adj < 0 && !procs::has_capability(procs::CAP_SYS_RESOURCE) { 0 } else { l.oom_score_adj };
        let text = value.to_string();
        let mut buf = [0u8; 24];
        let n = text.len().min(buf.len());
        buf[..n].copy_from_slice(&text.as_bytes()[..n]);
        (buf, n)
    });
    // The step of `build::enter` that failed, if one did.
    let (mut step_read, step_write) = fds::pipe()?;
    let step_fd = step_write.as_raw_fd();
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .env_clear()
        .envs(process_env(cfg))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if entry.is_none() {
        cmd.current_dir(wd);
    }
    // SAFETY: only async-signal-safe calls (setsid, close_range, write, mount, pivot_root,
    // chdir, fork, waitpid and the system calls of `security::apply`) run between fork and
    // exec; everything they use was made before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            fds::cloexec_above_stdio()?;
            // The cgroups first: joining them needs the shim's own identity.
            join_cgroups(&fds)?;
            if let Some((buf, n)) = &oom_score {
                set_oom_score_adj(&buf[..*n])?;
            }
            if let Some(e) = &entry {
                if let Err((step, err)) = build::enter(e) {
                    libc::write(step_fd, [step as u8].as_ptr().cast(), 1);
                    return Err(err);
                }
            }
            security::apply(&plan, all_caps)?;
            match status_fd {
                Some(fd) => split_init(fd),
                None => Ok(()),
            }
        });
    }
    let child = cmd.spawn().map_err(|e| {
        drop(step_write);
        let mut b = [0u8; 1];
        match step_read.read(&mut b).ok().filter(|n| *n == 1).and_then(|_| build::Step::from_byte(b[0])) {
            Some(step) => io::Error::new(e.kind(), format!("{}: {e}", step.describe(wd))),
            None => e,
        }
    })?;
    Ok((child, status_pipe.map(|(r, _)| r)))
}

/// Writes `value` (decimal text) to this process's `oom_score_adj`; between fork and exec
/// (open, write and close only).
fn set_oom_score_adj(value: &[u8]) -> io::Result<()> {
    // SAFETY: a static NUL-terminated path, a buffer that lives through the call, and an
    // fd closed on every path.
    unsafe {
        let fd = libc::open(c"/proc/self/oom_score_adj".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let written = libc::write(fd, value.as_ptr().cast(), value.len());
        let err = io::Error::last_os_error();
        libc::close(fd);
        if written < 0 {
            return Err(err);
        }
    }
    Ok(())
}

/// In a new PID namespace's first process, between fork and exec: forks again; the new
/// process (PID 2) returns to exec the workload, and this one stays as the namespace's
/// PID 1 (`reap_as_init`), never returning.
fn split_init(status_fd: RawFd) -> io::Result<()> {
    // SAFETY: fork in the single-threaded child of a fork; the child only returns to exec.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(()),
        workload => reap_as_init(workload, status_fd),
    }
}

/// PID 1 of a container's PID namespace: reaps every process that ends in it, and when the
/// workload ends writes its wait status (4 bytes, native order) to `status_fd` and exits,
/// which ends whatever is left in the namespace. It holds no other descriptor, so the
/// workload's output pipes close with the workload, and has no signal handler: a SIGTERM
/// from the shim (to the whole process group) stops the workload, not it. Only
/// async-signal-safe system calls.
fn reap_as_init(workload: libc::pid_t, status_fd: RawFd) -> ! {
    // SAFETY: plain system calls on integers and a local out-parameter.
    unsafe {
        for sig in [libc::SIGTERM, libc::SIGUSR1, libc::SIGCHLD, libc::SIGINT, libc::SIGHUP] {
            libc::signal(sig, libc::SIG_DFL);
        }
        libc::close(libc::STDOUT_FILENO);
        libc::close(libc::STDERR_FILENO);
        if status_fd > 3 {
            libc::syscall(libc::SYS_close_range, 3u32, (status_fd - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (status_fd + 1) as u32, u32::MAX, 0u32);
        loop {
            let mut status: libc::c_int = 0;
            let pid = libc::waitpid(-1, &mut status, 0);
            if pid == workload {
                let bytes = status.to_ne_bytes();
                libc::write(status_fd, bytes.as_ptr().cast(), bytes.len());
                libc::_exit(0);
            }
            if pid < 0 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(127);
            }
        }
    }
}

/// The workload's wait status as its PID 1 wrote it, if it did.
fn read_init_status(pipe: &mut File) -> Option<std::process::ExitStatus> {
    fds::set_nonblocking(pipe).ok()?;
    let mut word = [0u8; 4];
    pipe.read_exact(&mut word).ok()?;
    Some(std::process::ExitStatus::from_raw(libc::c_int::from_ne_bytes(word)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_container_cgroup_is_removed_in_every_hierarchy() {
        let root = tempfile::tempdir().unwrap();
        let dirs: Vec<PathBuf> = ["cpu/pod1/app", "memory/pod1/app"].iter().map(|d| root.path().join(d)).collect();
        for d in &dirs {
            std::fs::create_dir_all(d).unwrap();
            std::fs::write(d.join("cgroup.procs"), "").unwrap();
        }
        let cg = super::super::ContainerCgroup { dirs: dirs.clone(), procs: Vec::new(), memory: None, scope: None };
        remove_cgroup(&cg);
        assert!(dirs.iter().all(|d| !d.exists()));
        assert!(dirs.iter().all(|d| d.parent().unwrap().exists()), "the pod cgroup stays");
    }
}
