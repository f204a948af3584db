//! The built-in `process` runtime: each container is a host process in its own session and
//! process group, supervised by a small shim process (`ferrolet shim <dir>`, the way
//! containerd uses shims). The shim outlives the agent: it waits on the workload, writes its
//! logs, enforces the stop grace period and records the exit, so an agent restart (even
//! `kill -9`) neither restarts nor loses a container. Everything lives in files:
//!
//! ```text
//! <root>/sandboxes/<id>/sandbox.json     SandboxInfo
//! <root>/containers/<id>/config.json     ContainerRecord (written by the agent)
//! <root>/containers/<id>/shim.lock       locked by the shim for its whole life
//! <root>/containers/<id>/shim.json       ShimIdentity (written by the shim when it starts)
//! <root>/containers/<id>/state.json      ShimState (written by the shim once the process runs)
//! <root>/containers/<id>/exit.json       ExitRecord (written by the shim when it exits,
//!                                        with a copy in exit.backup.json)
//! <root>/containers/<id>/stop            grace period in ms (written by the agent, then SIGTERM to the shim)
//! <root>/containers/<id>/shim.log        the shim's own errors
//! <root>/quarantine/                     damaged records, moved aside once (cleared by drain)
//! ```
//!
//! A record is made in a hidden temporary directory and renamed into place, so a crash never
//! leaves a half-made one. Whether a shim lives is told by its lock, never by a pid alone; a
//! pid or process group is signalled only after its start time proves it is still ours.

mod exec;
pub mod logfile;
pub mod records;
pub mod shim;

pub use records::{files, ContainerCgroup, ContainerRecord, ExitRecord, ShimIdentity, ShimState};

use super::{
    ContainerConfig, ContainerInfo, ContainerRuntime, ContainerState, ExecResult, Quarantined, RuntimeError,
    SandboxConfig, SandboxInfo,
};
use crate::cm::cgroupfs::CgroupDriver;
use crate::util::{self, read_json, write_json, Chain};
use parking_lot::Mutex;
use records::{Look, Read, Verdict};
use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// How long `start_container` waits for the shim to report the process running (shorter
/// than the agent's default stop timeout, so a stuck start never stalls shutdown).
const START_TIMEOUT: Duration = Duration::from_secs(5);
/// Directory (under the runtime root) damaged records are moved to.
const QUARANTINE_DIR: &str = "quarantine";
/// Prefix of the temporary directories records are made in.
const TMP_PREFIX: &str = ".tmp-";
/// Grace period for stopping a container whose record is damaged (kubelet's default).
const UNIDENTIFIED_GRACE: Duration = Duration::from_secs(30);

/// The kernel's limit on one argument or environment string, `MAX_ARG_STRLEN` (32 pages).
pub const MAX_ARG_STRLEN: usize = 32 * 4096;

#[derive(Default)]
struct Cached {
    record: Option<ContainerRecord>,
    state: Option<ShimState>,
    exit: Option<ExitRecord>,
}

/// The process runtime; cheap to share (`Arc`) between the pod manager and probe threads.
pub struct ProcessRuntime {
    root: PathBuf,
    shim_exe: PathBuf,
    log_max_size: u64,
    log_max_files: u32,
    cgroups: Option<Arc<dyn CgroupDriver>>,
    cache: Mutex<HashMap<String, Cached>>,
    /// Sandbox records, read from disk once: this runtime is their only writer (the state
    /// directory is locked), so a relist need not read every sandbox.json again.
    sandboxes: Mutex<Option<HashMap<String, SandboxInfo>>>,
    /// Damaged files already reported (each once per agent run).
    reported: Mutex<HashSet<PathBuf>>,
    /// Records moved aside since the last `take_quarantined`.
    quarantined: Mutex<Vec<Quarantined>>,
}

fn state_err(path: &Path) -> impl FnOnce(std::io::Error) -> RuntimeError + '_ {
    move |source| RuntimeError::State { path: path.into(), source }
}

fn is_tmp(name: &std::ffi::OsStr) -> bool {
    name.to_string_lossy().starts_with(TMP_PREFIX)
}

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
fn arg_max() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_ARG_MAX) };
    if n > 0 {
        n as usize
    } else {
        // POSIX's minimum-guaranteed value on Linux with the default 8 MiB stack.
        2 << 20
    }
}

impl ProcessRuntime {
    /// A runtime keeping its files under `root`, starting `shim_exe shim <dir>` per container.
    pub fn new(root: &Path, shim_exe: &Path, log_max_size: u64, log_max_files: u32) -> Result<Self, RuntimeError> {
        for sub in ["sandboxes", "containers"] {
            let p = root.join(sub);
            util::create_private_dir_all(&p).map_err(state_err(&p))?;
            // Half-made records of a crash: nothing was started for them (a shim is only
            // spawned once the record is in place).
            for entry in fs::read_dir(&p).map_err(state_err(&p))?.flatten() {
                if is_tmp(&entry.file_name()) {
                    let _ = fs::remove_dir_all(entry.path());
                }
            }
        }
        Ok(ProcessRuntime {
            root: root.into(),
            shim_exe: shim_exe.into(),
            log_max_size,
            log_max_files,
            cgroups: None,
            cache: Mutex::new(HashMap::new()),
            sandboxes: Mutex::new(None),
            reported: Mutex::new(HashSet::new()),
            quarantined: Mutex::new(Vec::new()),
        })
    }

    /// Puts containers that ask for it (`ContainerConfig::linux`) in their own cgroup.
    pub fn with_cgroups(mut self, driver: Arc<dyn CgroupDriver>) -> Self {
        self.cgroups = Some(driver);
        self
    }

    /// Creates `<cgroup_parent>/<name>` with its control files.
    fn create_cgroup(&self, config: &ContainerConfig) -> Result<Option<ContainerCgroup>, RuntimeError> {
        let (Some(driver), Some(linux)) = (&self.cgroups, &config.linux) else { return Ok(None) };
        let path = format!("{}/{}", linux.cgroup_parent.trim_end_matches('/'), config.name);
        let err = |e: crate::cm::cgroupfs::CgroupError| RuntimeError::CreateContainer {
            name: config.name.clone(),
            message: Chain(&e).to_string(),
        };
        driver.create(&path).map_err(err)?;
        driver.apply(&path, &linux.files).map_err(err)?;
        Ok(Some(ContainerCgroup {
            dirs: driver.dirs(&path),
            procs: driver.procs_files(&path),
            memory: driver.memory_dir(&path),
        }))
    }

    fn container_dir(&self, id: &str) -> PathBuf {
        self.root.join("containers").join(id)
    }

    /// Where damaged records go.
    pub fn quarantine_dir(&self) -> PathBuf {
        self.root.join(QUARANTINE_DIR)
    }

    /// Logs a damaged file once per agent run (`key` tells what was already said).
    fn report_once(&self, key: &Path, what: &str) {
        if self.reported.lock().insert(key.to_path_buf()) {
            log::warn!("runtime: {what}");
        }
    }

    /// Moves a damaged record aside, once: one log line, and an event via `take_quarantined`.
    fn quarantine(&self, kind: &'static str, dir: &Path, reason: &str) {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let qdir = self.quarantine_dir();
        let stamp = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
        let target = qdir.join(format!("{kind}-{name}-{stamp}"));
        let moved = util::create_private_dir_all(&qdir).and_then(|()| fs::rename(dir, &target));
        match moved {
            Ok(()) => {
                log::warn!(
                    "runtime: {kind} record {name} is damaged ({reason}); moved it to {} (ferrolet drain removes it)",
                    target.display()
                );
                self.quarantined.lock().push(Quarantined { kind, id: name, moved_to: target, reason: reason.into() });
            }
            Err(e) => self.report_once(
                dir,
                &format!("{kind} record {} is damaged ({reason}) and cannot be moved aside: {e}", dir.display()),
            ),
        }
    }

    /// The sandbox records, loading them from disk on first use.
    fn with_sandboxes<T>(&self, f: impl FnOnce(&mut HashMap<String, SandboxInfo>) -> T) -> Result<T, RuntimeError> {
        let mut guard = self.sandboxes.lock();
        if guard.is_none() {
            let dir = self.root.join("sandboxes");
            let mut map = HashMap::new();
            for entry in fs::read_dir(&dir).map_err(state_err(&dir))? {
                let entry = entry.map_err(state_err(&dir))?;
                if is_tmp(&entry.file_name()) {
                    continue;
                }
                let file = entry.path().join("sandbox.json");
                match Read::<SandboxInfo>::file(&file) {
                    Read::Ok(info) => {
                        map.insert(info.id.clone(), info);
                    }
                    Read::Missing => self.quarantine("sandbox", &entry.path(), "no sandbox.json"),
                    Read::Unreadable(e) => self.quarantine("sandbox", &entry.path(), &e),
                }
            }
            *guard = Some(map);
        }
        // Just loaded above when it was empty.
        Ok(f(guard.as_mut().expect("sandboxes loaded")))
    }

    fn sandbox_file(&self, id: &str) -> PathBuf {
        self.root.join("sandboxes").join(id).join("sandbox.json")
    }

    /// Reads every file of a container; reports each damaged one once.
    fn look(&self, id: &str, dir: &Path) -> Look {
        let report = |path: &Path, e: &str| self.report_once(path, &format!("container {id}: cannot read {e}"));
        let cached = self.cache.lock().get(id).map(|c| c.record.clone());
        let record = match cached.flatten() {
            Some(r) => Read::Ok(r),
            None => Read::file(&dir.join(files::CONFIG)),
        };
        let identity = match &record {
            Read::Ok(_) => Read::Missing,
            _ => Read::file(&dir.join(files::SHIM)),
        };
        let exit = Read::file(&dir.join(files::EXIT));
        let exit_backup = match &exit {
            Read::Ok(_) => Read::Missing,
            _ => Read::file(&dir.join(files::EXIT_BACKUP)),
        };
        let state: Read<ShimState> = Read::file(&dir.join(files::STATE));
        // Keyed by the error text (which starts with the path): a file damaged differently
        // later is reported again.
        // A damaged config.json is reported where it is dealt with (adopted or moved aside).
        for e in [unreadable(&state), unreadable(&exit)].into_iter().flatten() {
            report(Path::new(&e), &e);
        }
        let shim_alive = match records::lock_state(dir) {
            records::LockState::Held => true,
            records::LockState::Free => false,
            // Started by an older shim (no lock): its recorded, verified pid decides.
            records::LockState::Absent => {
                state.ok().is_some_and(|s| util::process_alive(s.shim_pid, Some(s.shim_start_ticks)))
            }
        };
        Look { record, identity, state, exit, exit_backup, shim_alive }
    }

    /// Reads the container's state files, caching what can no longer change, and acts on
    /// what they say: a lost shim's workload is stopped, an unidentifiable record is stopped
    /// and then moved aside. Returns the container with the record it is reported with.
    fn observe_full(&self, id: &str) -> Result<(ContainerInfo, ContainerRecord), RuntimeError> {
        let dir = self.container_dir(id);
        if !dir.is_dir() {
            return Err(RuntimeError::NotFound { kind: "container", id: id.into() });
        }
        let cached = {
            let cache = self.cache.lock();
            cache.get(id).and_then(|c| Some((c.record.clone()?, c.exit.clone()?)))
        };
        if let Some((record, exit)) = cached {
            let state = self.cache.lock().get(id).and_then(|c| c.state.clone());
            return Ok((info(id, &record, ContainerState::Exited, state.as_ref(), Some(&exit)), record));
        }
        let look = self.look(id, &dir);
        let verdict = records::decide(&look, id, SystemTime::now());
        let Some(record) = records::usable_record(&look, id) else {
            match verdict {
                Verdict::Unidentified => self.stop_unidentified(id, &dir, &look),
                Verdict::Quarantine(why) => self.quarantine("container", &dir, &why),
                _ => {}
            }
            return Err(RuntimeError::NotFound { kind: "container", id: id.into() });
        };
        if look.record.ok().is_none() {
            self.report_once(
                &dir.join(files::SHIM),
                &format!(
                    "container {id} ({}): {}; adopted from {} (its command and env are unknown until it exits)",
                    record.config.name,
                    unreadable(&look.record).unwrap_or_else(|| format!("no {}", files::CONFIG)),
                    files::SHIM
                ),
            );
        }
        let state = look.state.ok().cloned();
        let (st, exit) = match verdict {
            Verdict::Exited(e) => (ContainerState::Exited, Some(e)),
            Verdict::Running(_) => (ContainerState::Running, None),
            Verdict::Created => (ContainerState::Created, None),
            Verdict::Lost(e) => (ContainerState::Exited, Some(self.reap_lost(id, &record, &look, e))),
            Verdict::Quarantine(_) | Verdict::Unidentified => (ContainerState::Created, None),
        };
        {
            let mut cache = self.cache.lock();
            let c = cache.entry(id.into()).or_default();
            if look.record.ok().is_some() {
                c.record = Some(record.clone());
            }
            c.state = state.clone();
            c.exit = exit.clone();
        }
        Ok((info(id, &record, st, state.as_ref(), exit.as_ref()), record))
    }

    fn observe(&self, id: &str) -> Result<ContainerInfo, RuntimeError> {
        self.observe_full(id).map(|(i, _)| i)
    }

    /// The shim died without recording an exit (killed by hand, OOM): stop what is left of
    /// the workload, since nobody can report its exit any more, and record that. Only
    /// processes proven ours are signalled: the process group whose leader still has the
    /// recorded start time, and whatever is in the container's own cgroup.
    fn reap_lost(&self, id: &str, record: &ContainerRecord, look: &Look, mut exit: ExitRecord) -> ExitRecord {
        let name = &record.config.name;
        if exit.signal.is_none() {
            // The exit record exists but is damaged: the workload already ended.
            self.report_once(
                &self.container_dir(id).join(files::EXIT_BACKUP),
                &format!("container {id} ({name}): {}", exit.message),
            );
            return exit;
        }
        let mut killed = Vec::new();
        if let Some(s) = look.state.ok() {
            match s.start_ticks.map(|t| util::kill_group_verified(s.pid, t, libc::SIGKILL)) {
                Some(Ok(true)) => killed.push(format!("process group {}", s.pid)),
                Some(Ok(false)) => {}
                Some(Err(e)) => {
                    log::warn!("runtime: container {id} ({name}): cannot kill process group {}: {e}", s.pid)
                }
                None => log::warn!(
                    "runtime: container {id} ({name}): process group {} has no recorded start time; not signalled",
                    s.pid
                ),
            }
        }
        if let Some(cg) = &record.cgroup {
            shim::remove_cgroup(cg);
            killed.push("its cgroup".into());
        }
        log::warn!(
            "runtime: container {id} ({name}): shim is gone without recording an exit; killed {}",
            if killed.is_empty() { "nothing (no process of it is left)".to_string() } else { killed.join(" and ") }
        );
        exit.message = format!("{} ({})", exit.message, if killed.is_empty() { "none left" } else { "killed" });
        let path = self.container_dir(id).join(files::EXIT);
        if let Err(e) = write_json(&path, &exit) {
            log::warn!("runtime: container {id} ({name}): cannot record its exit in {}: {e}", path.display());
        }
        exit
    }

    /// A container nothing identifies, whose shim still runs: ask the shim to stop it (the
    /// shim's pid proven by its start time), or kill the workload's verified group.
    fn stop_unidentified(&self, id: &str, dir: &Path, look: &Look) {
        let Some(s) = look.state.ok() else {
            self.report_once(
                dir,
                &format!(
                    "container {id}: its records are unreadable and its shim still runs; waiting for the shim to exit"
                ),
            );
            return;
        };
        self.report_once(
            dir,
            &format!(
                "container {id}: its records are unreadable; stopping its shim {} before it is moved aside",
                s.shim_pid
            ),
        );
        let _ = util::write_atomic(&dir.join(files::STOP), UNIDENTIFIED_GRACE.as_millis().to_string().as_bytes());
        if !matches!(util::signal_verified(s.shim_pid, s.shim_start_ticks, libc::SIGTERM), Ok(true)) {
            if let Some(t) = s.start_ticks {
                let _ = util::kill_group_verified(s.pid, t, libc::SIGKILL);
            }
        }
    }

    fn spawn_shim(&self, id: &str, lock: &File) -> Result<(), RuntimeError> {
        let dir = self.container_dir(id);
        let log_path = dir.join(files::SHIM_LOG);
        let log = util::create_private_file(&log_path).map_err(state_err(&log_path))?;
        let lock_fd = lock.as_raw_fd();
        let mut cmd = Command::new(&self.shim_exe);
        cmd.arg("shim")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .env_remove("RUST_LOG_STYLE")
            .env(shim::LOCK_FD_ENV, lock_fd.to_string());
        if let Some(gid) = util::StateAccess::current().gid {
            cmd.env(shim::STATE_GID_ENV, gid.to_string());
        }
        // SAFETY: only fcntl, which is async-signal-safe, runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // The shim inherits the locked fd, and with it the lock.
                if libc::fcntl(lock_fd, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|source| RuntimeError::Process {
            action: format!("spawning shim {}", self.shim_exe.display()),
            source,
        })?;
        // The shim forks at once and its first process exits; reap it so no zombie is left.
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return Ok(()),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(RuntimeError::Process {
                        action: "waiting for the shim to detach".into(),
                        source: std::io::Error::from(std::io::ErrorKind::TimedOut),
                    });
                }
                Err(source) => return Err(RuntimeError::Process { action: "waiting for the shim".into(), source }),
            }
        }
    }
}

fn unreadable<T>(r: &Read<T>) -> Option<String> {
    match r {
        Read::Unreadable(e) => Some(e.clone()),
        _ => None,
    }
}

fn info(
    id: &str,
    record: &ContainerRecord,
    st: ContainerState,
    state: Option<&ShimState>,
    exit: Option<&ExitRecord>,
) -> ContainerInfo {
    ContainerInfo {
        id: id.into(),
        sandbox_id: record.sandbox_id.clone(),
        config: record.config.clone(),
        state: st,
        created_at: record.created_at,
        started_at: state.map(|s| s.started_at),
        finished_at: exit.map(|e| e.finished_at),
        exit_code: exit.map_or(0, |e| e.exit_code),
        reason: exit.map(|e| e.reason.clone()).unwrap_or_default(),
        message: exit.map(|e| e.message.clone()).unwrap_or_default(),
        pid: if st == ContainerState::Running { state.map(|s| s.pid) } else { None },
    }
}

impl ContainerRuntime for ProcessRuntime {
    fn kind(&self) -> &'static str {
        "process"
    }

    fn run_pod_sandbox(&self, config: &SandboxConfig) -> Result<String, RuntimeError> {
        let id = util::random_id();
        util::create_private_dir_all(&config.log_directory).map_err(state_err(&config.log_directory))?;
        let info = SandboxInfo { id: id.clone(), config: config.clone(), created_at: SystemTime::now(), ready: true };
        let dir = self.root.join("sandboxes").join(&id);
        self.make_record_dir(&dir, "sandbox.json", &info)?;
        self.with_sandboxes(|m| m.insert(id.clone(), info))?;
        Ok(id)
    }

    fn stop_pod_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        let file = self.sandbox_file(id);
        let info = self.with_sandboxes(|m| m.get(id).cloned())?;
        let mut info = info.ok_or_else(|| RuntimeError::NotFound { kind: "sandbox", id: id.into() })?;
        if info.ready {
            info.ready = false;
            write_json(&file, &info).map_err(state_err(&file))?;
            self.with_sandboxes(|m| m.insert(id.to_string(), info))?;
        }
        Ok(())
    }

    fn remove_pod_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        let info = self.with_sandboxes(|m| m.get(id).cloned())?;
        for c in self.list_containers()? {
            if c.sandbox_id == id {
                self.remove_container(&c.id)?;
            }
        }
        if let Some(info) = info {
            let _ = fs::remove_dir_all(&info.config.log_directory);
        }
        let dir = self.root.join("sandboxes").join(id);
        let removed = match fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(RuntimeError::State { path: dir, source: e }),
            _ => Ok(()),
        };
        if removed.is_ok() {
            self.with_sandboxes(|m| m.remove(id))?;
        }
        removed
    }

    fn list_pod_sandboxes(&self) -> Result<Vec<SandboxInfo>, RuntimeError> {
        self.with_sandboxes(|m| m.values().cloned().collect())
    }

    fn create_container(&self, sandbox_id: &str, config: &ContainerConfig) -> Result<String, RuntimeError> {
        if !self.with_sandboxes(|m| m.contains_key(sandbox_id))? {
            return Err(RuntimeError::NotFound { kind: "sandbox", id: sandbox_id.into() });
        }
        let create_err = |message: String| RuntimeError::CreateContainer { name: config.name.clone(), message };
        if config.argv.is_empty() {
            return Err(create_err(
                "the process runtime needs `command` (there is no image to take an entrypoint from)".into(),
            ));
        }
        let id = util::random_id();
        let mut record = ContainerRecord {
            id: id.clone(),
            sandbox_id: sandbox_id.into(),
            config: config.clone(),
            created_at: SystemTime::now(),
            log_max_size: self.log_max_size,
            log_max_files: self.log_max_files,
            cgroup: None,
        };
        // Refused before anything is made, so an oversized container never leaks a record.
        let size = serde_json::to_vec_pretty(&record).map(|v| v.len() as u64).unwrap_or(u64::MAX);
        if size > util::MAX_RECORD_SIZE {
            return Err(create_err(format!(
                "its record (command, args, env and device options) is {size} bytes, over the limit of {} bytes",
                util::MAX_RECORD_SIZE
            )));
        }
        record.cgroup = self.create_cgroup(config)?;
        self.make_record_dir(&self.container_dir(&id), files::CONFIG, &record)?;
        self.cache.lock().insert(id.clone(), Cached { record: Some(record), ..Default::default() });
        Ok(id)
    }

    fn start_container(&self, id: &str) -> Result<(), RuntimeError> {
        let (info, record) = self.observe_full(id)?;
        let name = record.config.name.clone();
        let start_err = |message: String| RuntimeError::StartContainer { name: name.clone(), message };
        if info.state != ContainerState::Created {
            return Err(start_err("container was already started".into()));
        }
        let dir = self.container_dir(id);
        if let Err(message) = check_exec_limits(&record.config.argv, &shim::process_env(&record.config), arg_max()) {
            // What execve would refuse with E2BIG, said plainly and recorded as the start
            // error it is (the restart policy decides what follows, as for any failed start).
            let exit = ExitRecord {
                exit_code: 128,
                signal: None,
                reason: "StartError".into(),
                message: message.clone(),
                finished_at: SystemTime::now(),
            };
            let path = dir.join(files::EXIT);
            write_json(&path, &exit).map_err(state_err(&path))?;
            return Err(start_err(message));
        }
        // The lock is taken here and inherited by the shim, so there is no moment in which a
        // starting container looks dead, and two shims can never run for one container.
        let lock_path = dir.join(files::LOCK);
        let lock = util::create_private_file(&lock_path).map_err(state_err(&lock_path))?;
        if !records::try_lock(&lock).map_err(state_err(&lock_path))? {
            return Err(start_err("its shim is already running".into()));
        }
        self.spawn_shim(id, &lock).map_err(|e| start_err(Chain(&e).to_string()))?;
        drop(lock);
        let deadline = Instant::now() + START_TIMEOUT;
        let mut pause = Duration::from_micros(200);
        while Instant::now() < deadline {
            if let Ok(exit) = read_json::<ExitRecord>(&dir.join(files::EXIT)) {
                if exit.reason == "StartError" {
                    return Err(start_err(exit.message));
                }
                return Ok(());
            }
            if dir.join(files::STATE).exists() {
                return Ok(());
            }
            if records::lock_state(&dir) == records::LockState::Free {
                break;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
        let shim_log = fs::read_to_string(dir.join(files::SHIM_LOG)).unwrap_or_default();
        Err(start_err(format!("shim did not report the process started: {}", shim_log.trim())))
    }

    fn stop_container(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        let info = self.observe(id)?;
        if info.state != ContainerState::Running {
            return Ok(());
        }
        let dir = self.container_dir(id);
        let stop = dir.join(files::STOP);
        util::write_atomic(&stop, grace.as_millis().to_string().as_bytes()).map_err(state_err(&stop))?;
        // Read after `stop` is written: a shim that had not written its state yet will see
        // the stop file when it does (see shim::run).
        let identity = read_json::<ShimState>(&dir.join(files::STATE))
            .map(|s| (s.shim_pid, s.shim_start_ticks, Some((s.pid, s.start_ticks))))
            .or_else(|_| {
                read_json::<ShimIdentity>(&dir.join(files::SHIM)).map(|i| (i.shim_pid, i.shim_start_ticks, None))
            });
        let Ok((shim_pid, shim_ticks, workload)) = identity else {
            // Starting, and not yet identified: it reads `stop` before it runs anything.
            return Ok(());
        };
        let signalled =
            util::signal_verified(shim_pid, shim_ticks, libc::SIGTERM).map_err(|source| RuntimeError::Process {
                action: format!("signalling shim {shim_pid} of container {}", info.config.name),
                source,
            })?;
        if !signalled {
            // The shim is gone; stop the workload directly (if it is still ours).
            if let Some((pid, Some(ticks))) = workload {
                util::kill_group_verified(pid, ticks, libc::SIGKILL).map_err(|source| RuntimeError::Process {
                    action: format!("killing process group {pid} of container {}", info.config.name),
                    source,
                })?;
            }
        }
        Ok(())
    }

    fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        let found = match self.observe_full(id) {
            Ok(i) => Some(i),
            Err(RuntimeError::NotFound { .. }) => None,
            Err(e) => return Err(e),
        };
        if let Some((info, record)) = &found {
            if info.state == ContainerState::Running {
                // Force-remove, as CRI does: kill at once, then let the shim record the exit
                // before its directory goes away.
                self.stop_container(id, Duration::ZERO)?;
                let deadline = Instant::now() + Duration::from_secs(5);
                while self.observe(id).is_ok_and(|i| i.state == ContainerState::Running) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            if let Some(cg) = &record.cgroup {
                shim::remove_cgroup(cg);
            }
            let _ = fs::remove_file(&info.config.log_path);
            for p in logfile::rotated_files(&info.config.log_path) {
                let _ = fs::remove_file(p);
            }
        }
        self.cache.lock().remove(id);
        let dir = self.container_dir(id);
        match fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(RuntimeError::State { path: dir, source: e }),
            _ => Ok(()),
        }
    }

    fn list_containers(&self) -> Result<Vec<ContainerInfo>, RuntimeError> {
        let dir = self.root.join("containers");
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        for entry in fs::read_dir(&dir).map_err(state_err(&dir))? {
            let entry = entry.map_err(state_err(&dir))?;
            if is_tmp(&entry.file_name()) {
                continue;
            }
            let id = entry.file_name().to_string_lossy().into_owned();
            match self.observe(&id) {
                Ok(info) => {
                    seen.insert(id);
                    out.push(info)
                }
                // Reported (once) and dealt with by observe.
                Err(RuntimeError::NotFound { .. }) => {}
                Err(e) => self.report_once(&entry.path(), &format!("ignoring container {id}: {}", Chain(&e))),
            }
        }
        self.cache.lock().retain(|id, _| seen.contains(id));
        Ok(out)
    }

    fn exec_sync(&self, id: &str, cmd: &[String], timeout: Duration) -> Result<ExecResult, RuntimeError> {
        let (info, record) = self.observe_full(id)?;
        if info.state != ContainerState::Running {
            return Err(RuntimeError::StartContainer {
                name: info.config.name,
                message: "cannot exec in a container that is not running".into(),
            });
        }
        let procs = record.cgroup.map(|c| c.procs).unwrap_or_default();
        exec::exec_sync(&info.config, &procs, cmd, timeout)
    }

    fn take_quarantined(&self) -> Vec<Quarantined> {
        std::mem::take(&mut *self.quarantined.lock())
    }
}

impl ProcessRuntime {
    /// Makes a record directory atomically: a hidden temporary directory with the record in
    /// it, renamed into place.
    fn make_record_dir<T: serde::Serialize>(&self, dir: &Path, file: &str, value: &T) -> Result<(), RuntimeError> {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = dir.with_file_name(format!("{TMP_PREFIX}{name}"));
        util::create_private_dir_all(&tmp).map_err(state_err(&tmp))?;
        let path = tmp.join(file);
        let made = write_json(&path, value).map_err(state_err(&path)).and_then(|()| {
            fs::rename(&tmp, dir).map_err(state_err(dir))?;
            dir.parent().map_or(Ok(()), |p| File::open(p).and_then(|f| f.sync_all()).map_err(state_err(p)))
        });
        if made.is_err() {
            let _ = fs::remove_dir_all(&tmp);
        }
        made
    }
}
