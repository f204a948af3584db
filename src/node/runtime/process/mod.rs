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
//! <root>/containers/<id>/stop-at         `<unix ms> <grace ms>`: a stop the shim makes by itself at
//!                                        that time (written before a preStop hook, then SIGUSR1)
//! <root>/containers/<id>/shim.log        the shim's own errors
//! <root>/containers/<id>/root/           the container's own root (`root`): its writable
//!                                        layer `upper`, overlayfs's `work`, and the mount
//!                                        points `skeleton` and `merged`
//! <root>/quarantine/                     damaged records, moved aside once (cleared by drain)
//! ```
//!
//! A record is made in a hidden temporary directory and renamed into place, so a crash never
//! leaves a half-made one. Whether a shim lives is told by its lock, never by a pid alone; a
//! pid or process group is signalled only after its start time proves it is still ours.

mod exec;
pub mod logfile;
mod observe;
pub mod records;
pub mod root;
pub mod security;
pub mod shim;

pub use records::{files, ContainerCgroup, ContainerRecord, ContainerScope, ExitRecord, ShimIdentity, ShimState};

use super::exec::{ExecSession, ExecStart};
use crate::api::fields::RuntimeKind;
use crate::base::manager::Cancel;

use super::{
    ContainerConfig, ContainerInfo, ContainerRuntime, ContainerState, ImageFsInfo, ImageInfo, ImageUser, PullAuth,
    Quarantined, RuntimeError, SandboxConfig, SandboxInfo, StreamIo,
};
use crate::api::security::{ContainerSecurity, SandboxSecurity};
use crate::base::clock::{Clock, RealClock};
use crate::base::errors::Chain;
use crate::base::state_files::{read_json, write_json};
use crate::base::{fds, procs, random, state_files};
use crate::node::cm::cgroupfs::CgroupDriver;
use parking_lot::Mutex;
use records::Read;
use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// How long `start_container` waits for the shim to report the process running (shorter
/// than the agent's default stop timeout, so a stuck start never stalls shutdown).
const START_TIMEOUT: Duration = Duration::from_secs(5);
/// Directory (under the runtime root) damaged records are moved to.
const QUARANTINE_DIR: &str = "quarantine";
/// How long a force-remove waits for the container's shim to record the exit and go.
const REMOVE_WAIT: Duration = Duration::from_secs(5);
/// How much of shim.log a start error quotes.
const SHIM_LOG_SHOWN: u64 = 4096;
/// Prefix of the temporary directories records are made in.
const TMP_PREFIX: &str = ".tmp-";
/// Grace period for stopping a container whose record is damaged (kubelet's default).
const UNIDENTIFIED_GRACE: Duration = crate::api::defaults::DEFAULT_TERMINATION_GRACE;

pub use exec::{check_exec_limits, ExecLimitsError};

/// What the runtime keeps of one container between looks (dropped with the container, and
/// by a relist that no longer finds it).
#[derive(Default)]
struct Cached {
    /// `config.json` once read: only the agent writes it, once, before any shim runs.
    record: Option<Arc<ContainerRecord>>,
    /// The last look, when it may stand for the next ones.
    last: Option<Arc<Observed>>,
}

/// A look that may stand for later ones, with the record the container is reported with.
enum Observed {
    /// Exited, with its `config.json` read: nothing of it changes any more.
    Final { info: ContainerInfo, record: Arc<ContainerRecord> },
    /// Running, for as long as `records::still_holds` with what was `seen`; its shim lock
    /// kept open to look at it, when the budget allowed.
    Running { info: ContainerInfo, record: Arc<ContainerRecord>, seen: records::Fingerprint, lock: Option<KeptLock> },
}

/// A container's shim lock file, kept open while its shim runs (`records::lock_state_of`),
/// counted against the runtime's budget of such files.
struct KeptLock {
    file: File,
    kept: Arc<AtomicUsize>,
}

impl Drop for KeptLock {
    fn drop(&mut self) {
        self.kept.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How many shim lock files are kept open at most: a quarter of the fd limit (the API may
/// take another quarter for its connections; the rest stays for probes, exec pipes and
/// the agent's own files). Past it, a lock is looked at by opening it each time.
fn lock_budget() -> usize {
    usize::try_from(procs::open_files_limit() / 4).unwrap_or(usize::MAX)
}

/// Writes the stop request for a container (its grace period in ms). On a full disk,
/// where no data block can be had, an empty `stop` is made instead (an inode only): the
/// shim then stops the workload with its default grace period, rather than not at all.
fn write_stop(path: &Path, grace: Duration) -> std::io::Result<()> {
    match state_files::write_atomic(path, grace.as_millis().to_string().as_bytes()) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)) => {
            log::warn!(
                "runtime: {}: {e}; asking for the stop without its grace period ({grace:?})",
                crate::base::logsafe::path(path)
            );
            fs::OpenOptions::new().write(true).create(true).truncate(false).open(path).map(drop)
        }
        other => other,
    }
}
/// The process runtime; cheap to share (`Arc`) between the pod manager and probe threads.
pub struct ProcessRuntime {
    root: PathBuf,
    shim_exe: PathBuf,
    log_max_size: u64,
    log_max_files: u32,
    cgroups: Option<Arc<dyn CgroupDriver>>,
    /// `<root>/containers`, open: a relist looks at each container relative to it.
    containers: File,
    cache: Mutex<HashMap<String, Cached>>,
    /// The clock a look's age is told by (`records::SETTLE_TIME`; tests move it).
    clock: Arc<dyn Clock>,
    /// Shim lock files kept open now, and how many may be.
    kept_locks: Arc<AtomicUsize>,
    lock_budget: usize,
    /// Looks that read a container's files (the ones not reused).
    #[cfg(test)]
    looks: AtomicUsize,
    /// Sandbox records, read from disk once: this runtime is their only writer (the state
    /// directory is locked), so a relist need not read every sandbox.json again.
    sandboxes: Mutex<Option<HashMap<String, SandboxInfo>>>,
    /// Damaged files already reported (each once per agent run).
    reported: Mutex<HashSet<PathBuf>>,
    /// Records moved aside since the last `take_quarantined`.
    quarantined: Mutex<Vec<Quarantined>>,
    /// Opened by `open_read_only`: records are read, never written, moved or acted on.
    read_only: bool,
    /// The node's directories hidden in every container's root (`root::RootInputs::hidden`).
    hidden: Vec<PathBuf>,
    /// What the node offers a container's root, looked at once.
    root_support: std::sync::OnceLock<root::Support>,
}

fn state_err(path: &Path) -> impl FnOnce(std::io::Error) -> RuntimeError + '_ {
    move |source| RuntimeError::State { path: path.into(), source }
}

fn is_tmp(name: &std::ffi::OsStr) -> bool {
    name.to_string_lossy().starts_with(TMP_PREFIX)
}

impl ProcessRuntime {
    /// A runtime keeping its files under `root`, starting `shim_exe shim <dir>` per container.
    pub fn new(root: &Path, shim_exe: &Path, log_max_size: u64, log_max_files: u32) -> Result<Self, RuntimeError> {
        for sub in ["sandboxes", "containers"] {
            let p = root.join(sub);
            state_files::create_private_dir_all(&p).map_err(state_err(&p))?;
            // Half-made records of a crash: nothing was started for them (a shim is only
            // spawned once the record is in place).
            for entry in fs::read_dir(&p).map_err(state_err(&p))?.flatten() {
                if is_tmp(&entry.file_name()) {
                    let _ = fs::remove_dir_all(entry.path());
                }
            }
        }
        Self::open(root, shim_exe, log_max_size, log_max_files, false)
    }

    /// Opens the records under `root` to read them only, for commands that may run beside a
    /// live agent (`ferrolet logs`, `ferrolet exec`): nothing is created, swept, moved aside,
    /// killed or recorded, and every call that would change a record is refused. A shim's
    /// liveness is told by its recorded pid and start time instead of by trying its lock: a
    /// try takes the lock for an instant, and a container the agent starts in that instant
    /// would fail to start. `exec_start` still runs commands in running containers.
    pub fn open_read_only(root: &Path) -> Result<Self, RuntimeError> {
        Self::open(root, Path::new(""), 0, 0, true)
    }

    /// The runtime over the existing directories under `root`.
    fn open(
        root: &Path,
        shim_exe: &Path,
        log_max_size: u64,
        log_max_files: u32,
        read_only: bool,
    ) -> Result<Self, RuntimeError> {
        let containers = root.join("containers");
        let containers = File::open(&containers).map_err(state_err(&containers))?;
        Ok(ProcessRuntime {
            containers,
            root: root.into(),
            shim_exe: shim_exe.into(),
            log_max_size,
            log_max_files,
            cgroups: None,
            cache: Mutex::new(HashMap::new()),
            clock: Arc::new(RealClock),
            kept_locks: Arc::new(AtomicUsize::new(0)),
            lock_budget: lock_budget(),
            #[cfg(test)]
            looks: AtomicUsize::new(0),
            sandboxes: Mutex::new(None),
            reported: Mutex::new(HashSet::new()),
            quarantined: Mutex::new(Vec::new()),
            read_only,
            hidden: vec![root.into()],
            root_support: std::sync::OnceLock::new(),
        })
    }

    /// Hides `dirs` of the node (the state and log directories) in every container's root;
    /// the runtime's own directory is always hidden.
    pub fn with_hidden(mut self, dirs: Vec<PathBuf>) -> Self {
        self.hidden.extend(dirs);
        self
    }

    /// Gives containers the root `support` instead of what the node offers (a kernel without
    /// overlayfs, in tests).
    pub fn with_root_support(self, support: root::Support) -> Self {
        let _ = self.root_support.set(support);
        self
    }

    /// What the node offers a container's root; without overlayfs, said once.
    fn root_support(&self) -> root::Support {
        *self.root_support.get_or_init(|| {
            let s = root::build::support();
            match s {
                root::Support::ReadOnlyBind => log::warn!(
                    "runtime: this kernel has no overlayfs (not in /proc/filesystems, no module of it): each container's root is the node's `/`, read-only, and a volume's mountPath must exist on the node"
                ),
                root::Support::None => log::info!(
                    "runtime: not running as root: containers share the node's filesystem, and volumes are refused"
                ),
                root::Support::Overlay => {}
            }
            s
        })
    }

    /// Refuses `what` on a runtime opened with `open_read_only`.
    fn writable(&self, what: &str) -> Result<(), RuntimeError> {
        if self.read_only {
            return Err(RuntimeError::Unsupported { runtime: "process", what: format!("{what} (opened read-only)") });
        }
        Ok(())
    }

    /// Puts containers that ask for it (`ContainerConfig::linux`) in their own cgroup.
    pub fn with_cgroups(mut self, driver: Arc<dyn CgroupDriver>) -> Self {
        self.cgroups = Some(driver);
        self
    }

    /// Tells the age of what a look saw by `clock` instead of the system clock.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Creates `<cgroup_parent>/<name>` with its control files; on the systemd driver, says
    /// which scope the shim starts in the pod's slice (`ferrolet-<id>.scope`).
    fn create_cgroup(&self, id: &str, config: &ContainerConfig) -> Result<Option<ContainerCgroup>, RuntimeError> {
        let (Some(driver), Some(linux)) = (&self.cgroups, &config.linux) else { return Ok(None) };
        let parent = linux.cgroup_parent.trim_end_matches('/');
        if driver.systemd() {
            let unit = crate::node::cm::systemd::container_scope(id);
            let path = format!("{parent}/{unit}");
            let writes = linux
                .files
                .iter()
                .filter_map(|(file, value)| driver.dir_for(&path, file).map(|d| (d.join(file), value.clone())))
                .collect();
            let slice = parent.rsplit('/').next().unwrap_or_default().to_string();
            return Ok(Some(ContainerCgroup {
                dirs: driver.dirs(&path),
                procs: driver.procs_files(&path),
                memory: driver.memory_dir(&path),
                scope: Some(ContainerScope { unit, slice, limits: linux.files.clone(), writes }),
            }));
        }
        let path = format!("{parent}/{}", config.name);
        let err = |e: crate::node::cm::cgroupfs::CgroupError| RuntimeError::CreateContainer {
            name: config.name.clone(),
            message: Chain(&e).to_string(),
        };
        driver.create(&path).map_err(err)?;
        driver.apply(&path, &linux.files).map_err(err)?;
        Ok(Some(ContainerCgroup {
            dirs: driver.dirs(&path),
            procs: driver.procs_files(&path),
            memory: driver.memory_dir(&path),
            scope: None,
        }))
    }

    fn container_dir(&self, id: &str) -> PathBuf {
        self.root.join("containers").join(id)
    }

    /// Opens the shim lock of container directory `dir` to keep, if the budget allows.
    fn keep_lock(&self, dir: &Path) -> Option<KeptLock> {
        // Counted first, so two threads never both take the last one.
        if self.kept_locks.fetch_add(1, Ordering::Relaxed) >= self.lock_budget {
            self.kept_locks.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        match File::open(dir.join(files::LOCK)) {
            // Counted back down when it drops.
            Ok(file) => Some(KeptLock { file, kept: Arc::clone(&self.kept_locks) }),
            Err(_) => {
                self.kept_locks.fetch_sub(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Where damaged records go.
    pub fn quarantine_dir(&self) -> PathBuf {
        self.root.join(QUARANTINE_DIR)
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

    fn spawn_shim(&self, id: &str, lock: &File) -> Result<(), RuntimeError> {
        let dir = self.container_dir(id);
        let log_path = dir.join(files::SHIM_LOG);
        let log = state_files::create_private_file(&log_path).map_err(state_err(&log_path))?;
        let lock_fd = lock.as_raw_fd();
        let mut cmd = Command::new(&self.shim_exe);
        cmd.arg("shim")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .env_remove("RUST_LOG_STYLE")
            .env(shim::LOCK_FD_ENV, lock_fd.to_string());
        if let Some(gid) = state_files::StateAccess::current().gid {
            cmd.env(shim::STATE_GID_ENV, gid.to_string());
        }
        // SAFETY: only close_range and fcntl, which are async-signal-safe, run between fork
        // and exec.
        unsafe {
            cmd.pre_exec(move || {
                fds::cloexec_above_stdio()?;
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

/// The first `limit` bytes of a file, as text (empty when unreadable).
fn read_head(path: &Path, limit: u64) -> String {
    use std::io::Read as _;
    let mut buf = Vec::new();
    let _ = File::open(path).and_then(|f| f.take(limit).read_to_end(&mut buf));
    String::from_utf8_lossy(&buf).into_owned()
}

impl ContainerRuntime for ProcessRuntime {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Process
    }

    fn id_scheme(&self) -> &str {
        "process"
    }

    fn run_pod_sandbox(&self, config: &SandboxConfig) -> Result<String, RuntimeError> {
        self.writable("creating sandboxes")?;
        let id = random::random_id();
        state_files::create_private_dir_all(&config.log_directory).map_err(state_err(&config.log_directory))?;
        let info = SandboxInfo {
            ips: Vec::new(),
            id: id.clone(),
            config: Arc::new(config.clone()),
            created_at: SystemTime::now(),
            ready: true,
        };
        let dir = self.root.join("sandboxes").join(&id);
        self.make_record_dir(&dir, "sandbox.json", &info)?;
        self.with_sandboxes(|m| m.insert(id.clone(), info))?;
        Ok(id)
    }

    fn stop_pod_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        self.writable("stopping sandboxes")?;
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
        self.writable("removing sandboxes")?;
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
        self.writable("creating containers")?;
        let Some(sandbox) = self.with_sandboxes(|m| m.get(sandbox_id).map(|s| Arc::clone(&s.config)))? else {
            return Err(RuntimeError::NotFound { kind: "sandbox", id: sandbox_id.into() });
        };
        let create_err = |message: String| RuntimeError::CreateContainer { name: config.name.clone(), message };
        // The pod manager asks first; a caller that did not is refused here all the same.
        let refused = self.security_refusal(&sandbox.security, &config.security).or_else(|| self.mount_refusal(config));
        if let Some(why) = refused {
            return Err(create_err(why));
        }
        if config.argv.is_empty() {
            return Err(create_err(
                "the process runtime needs `command` (there is no image to take an entrypoint from)".into(),
            ));
        }
        let id = random::random_id();
        let mut record = ContainerRecord {
            id: id.clone(),
            sandbox_id: sandbox_id.into(),
            config: Arc::new(config.clone()),
            created_at: SystemTime::now(),
            log_max_size: self.log_max_size,
            log_max_files: self.log_max_files,
            cgroup: None,
            host_pid: sandbox.security.host_pid,
            hidden: self.hidden.clone(),
            root: Some(self.root_support()),
        };
        // Refused before anything is made, so an oversized container never leaks a record.
        let size = serde_json::to_vec_pretty(&record).map(|v| v.len() as u64).unwrap_or(u64::MAX);
        if size > state_files::MAX_RECORD_SIZE {
            return Err(create_err(format!(
                "its record (command, args, env and device options) is {size} bytes, over the limit of {} bytes",
                state_files::MAX_RECORD_SIZE
            )));
        }
        record.cgroup = self.create_cgroup(&id, config)?;
        self.make_record_dir(&self.container_dir(&id), files::CONFIG, &record)?;
        self.cache.lock().insert(id.clone(), Cached { record: Some(Arc::new(record)), last: None });
        Ok(id)
    }

    fn start_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.writable("starting containers")?;
        let (info, record) = self.observe_full(id)?;
        let name = record.config.name.clone();
        let start_err = |message: String| RuntimeError::StartContainer { name: name.clone(), message };
        if info.state != ContainerState::Created {
            return Err(start_err("container was already started".into()));
        }
        let dir = self.container_dir(id);
        if let Err(e) = check_exec_limits(&record.config.argv, &shim::process_env(&record.config), exec::arg_max()) {
            // What execve would refuse with E2BIG, said plainly and recorded as the start
            // error it is (the restart policy decides what follows, as for any failed start).
            let exit = ExitRecord {
                exit_code: 128,
                signal: None,
                reason: "StartError".into(),
                message: e.to_string(),
                finished_at: SystemTime::now(),
            };
            // No shim will remove the cgroup made at create: it goes before the exit is
            // recorded, as a shim does it (an exited instance's cgroup is never removed later).
            if let Some(cg) = &record.cgroup {
                shim::remove_cgroup(cg);
            }
            let path = dir.join(files::EXIT);
            write_json(&path, &exit).map_err(state_err(&path))?;
            return Err(start_err(e.to_string()));
        }
        // The lock is taken here and inherited by the shim, so there is no moment in which a
        // starting container looks dead, and two shims can never run for one container.
        let lock_path = dir.join(files::LOCK);
        let lock = state_files::create_private_file(&lock_path).map_err(state_err(&lock_path))?;
        if !records::try_lock(&lock).map_err(state_err(&lock_path))? {
            return Err(start_err("its shim is already running".into()));
        }
        self.spawn_shim(id, &lock).map_err(|e| start_err(Chain(&e).to_string()))?;
        drop(lock);
        let deadline = Instant::now() + START_TIMEOUT;
        let mut pause = Duration::from_micros(200);
        while Instant::now() < deadline {
            // Looked at before the records: a shim that is gone wrote all it ever will.
            let shim_gone = records::lock_state(&dir) == records::LockState::Free;
            if let Ok(exit) = read_json::<ExitRecord>(&dir.join(files::EXIT)) {
                if exit.reason == "StartError" {
                    return Err(start_err(exit.message));
                }
                return Ok(());
            }
            if dir.join(files::STATE).exists() {
                return Ok(());
            }
            if shim_gone {
                break;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
        let shim_log = read_head(&dir.join(files::SHIM_LOG), SHIM_LOG_SHOWN);
        Err(start_err(format!("shim did not report the process started: {}", shim_log.trim())))
    }

    fn stop_container(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        self.writable("stopping containers")?;
        let info = self.observe(id)?;
        if info.state != ContainerState::Running {
            return Ok(());
        }
        let dir = self.container_dir(id);
        let stop = dir.join(files::STOP);
        write_stop(&stop, grace).map_err(state_err(&stop))?;
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
            procs::signal_verified(shim_pid, shim_ticks, libc::SIGTERM).map_err(|source| RuntimeError::Process {
                action: format!("signalling shim {shim_pid} of container {}", info.config.name),
                source,
            })?;
        if !signalled {
            // The shim is gone; stop the workload directly (if it is still ours).
            if let Some((pid, Some(ticks))) = workload {
                procs::kill_group_verified(pid, ticks, libc::SIGKILL).map_err(|source| RuntimeError::Process {
                    action: format!("killing process group {pid} of container {}", info.config.name),
                    source,
                })?;
            }
        }
        Ok(())
    }

    fn arm_stop(&self, id: &str, deadline: SystemTime, grace: Duration) -> Result<(), RuntimeError> {
        self.writable("stopping containers")?;
        let info = self.observe(id)?;
        if info.state != ContainerState::Running {
            return Ok(());
        }
        let dir = self.container_dir(id);
        let path = dir.join(files::STOP_AT);
        let at = deadline.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        let text = format!("{} {}", at.as_millis(), grace.as_millis());
        state_files::write_atomic(&path, text.as_bytes()).map_err(state_err(&path))?;
        // Read after `stop-at` is written: a shim that had not identified itself yet reads
        // the file once its workload runs (see shim::run).
        let Ok(shim) = read_json::<ShimIdentity>(&dir.join(files::SHIM)) else { return Ok(()) };
        if !shim.stop_at {
            log::warn!(
                "runtime: container {} runs under a shim of an older ferrolet, which cannot stop it by itself; the agent stops it",
                info.config.name
            );
            return Ok(());
        }
        procs::signal_verified(shim.shim_pid, shim.shim_start_ticks, libc::SIGUSR1).map_err(|source| {
            RuntimeError::Process {
                action: format!("signalling shim {} of container {}", shim.shim_pid, info.config.name),
                source,
            }
        })?;
        Ok(())
    }

    fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.writable("removing containers")?;
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
                let deadline = Instant::now() + REMOVE_WAIT;
                while self.observe(id).is_ok_and(|i| i.state == ContainerState::Running) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            // A shim that recorded the exit may still be exiting; its directory goes once it
            // is gone (bounded: a stuck shim leaves the removal to fail and be retried).
            let dir = self.container_dir(id);
            let deadline = Instant::now() + REMOVE_WAIT;
            while records::lock_state(&dir) == records::LockState::Held && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            // An exited instance's cgroup was removed by whoever recorded its exit; the path
            // (`<pod cgroup>/<name>`) may now be the next instance's, which must not be killed.
            if info.state != ContainerState::Exited {
                if let Some(cg) = &record.cgroup {
                    shim::remove_cgroup(cg);
                }
            }
            if records::lock_state(&dir) == records::LockState::Held {
                // Its directory is how the shim is found and stopped: removed now, the shim
                // (and whatever it still runs) would be lost to every later look.
                return Err(RuntimeError::Process {
                    action: format!("waiting {REMOVE_WAIT:?} for the shim of container {} to exit", info.config.name),
                    source: std::io::ErrorKind::TimedOut.into(),
                });
            }
            let _ = fs::remove_file(&info.config.log_path);
            for p in super::logrotate::rotated_files(&info.config.log_path) {
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
        // Read before any container is looked at: what a look sees is at least this old.
        let now = self.clock.now();
        for entry in fs::read_dir(&dir).map_err(state_err(&dir))? {
            let entry = entry.map_err(state_err(&dir))?;
            if is_tmp(&entry.file_name()) {
                continue;
            }
            let id = entry.file_name().to_string_lossy().into_owned();
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                self.quarantine("container", &entry.path(), "not a directory");
                continue;
            }
            match self.observe_dir(&id, &entry.path(), now).map(|(i, _)| i) {
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

    /// The command runs until its caller's wait or reaper ends it at `timeout`.
    fn exec_start(&self, id: &str, cmd: &[String], _timeout: Duration) -> Result<ExecStart, RuntimeError> {
        let (config, procs, ns) = self.exec_target(id)?;
        exec::exec_start(&config, &procs, &ns, cmd)
    }

    /// A command in the container's namespaces, cgroups and security context, as
    /// `exec_start`'s, with pipes or a terminal the agent's stream serves.
    fn exec_session(&self, id: &str, cmd: &[String], io: StreamIo) -> Result<ExecSession, RuntimeError> {
        let (config, procs, ns) = self.exec_target(id)?;
        exec::exec_session(&config, &procs, &ns, cmd, io)
    }

    /// Containers are host processes: the runtime holds no images.
    fn list_images(&self) -> Result<Vec<ImageInfo>, RuntimeError> {
        Ok(Vec::new())
    }

    fn image_status(&self, _image: &str) -> Result<Option<ImageInfo>, RuntimeError> {
        Ok(None)
    }

    /// A container runs as the shim does (the agent's user) unless it names a uid.
    fn image_user(&self, _image: &str) -> Result<ImageUser, RuntimeError> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        Ok(ImageUser { uid: Some(i64::from(unsafe { libc::geteuid() })), username: String::new() })
    }

    fn security_refusal(&self, sandbox: &SandboxSecurity, container: &ContainerSecurity) -> Option<String> {
        security::refusal(sandbox, container)
    }

    fn mount_refusal(&self, config: &ContainerConfig) -> Option<String> {
        root::refusal(config, self.root_support(), |p| p.exists())
    }

    /// The pod manager never pulls for this runtime (a container's image is ignored).
    fn pull_image(
        &self,
        image: &str,
        _auth: Option<&PullAuth>,
        _timeout: Duration,
        _cancel: &mut Cancel,
    ) -> Result<String, RuntimeError> {
        Err(RuntimeError::Unsupported { runtime: "process", what: format!("pulling image {image}") })
    }

    fn remove_image(&self, image: &str) -> Result<(), RuntimeError> {
        Err(RuntimeError::NotFound { kind: "image", id: image.into() })
    }

    fn image_fs_info(&self) -> Result<Vec<ImageFsInfo>, RuntimeError> {
        Ok(Vec::new())
    }

    fn take_quarantined(&self) -> Vec<Quarantined> {
        std::mem::take(&mut *self.quarantined.lock())
    }
}

impl ProcessRuntime {
    /// What a command run in running container `id` joins: its config, the `cgroup.procs`
    /// files of its cgroups, and its namespaces.
    fn exec_target(&self, id: &str) -> Result<(Arc<ContainerConfig>, Vec<PathBuf>, exec::Namespaces), RuntimeError> {
        let (info, record) = self.observe_full(id)?;
        if info.state != ContainerState::Running {
            return Err(RuntimeError::StartContainer {
                name: info.config.name.clone(),
                message: "cannot exec in a container that is not running".into(),
            });
        }
        let procs = record.cgroup.as_ref().map(|c| c.procs.clone()).unwrap_or_default();
        // The workload's start time too (`info.pid` alone): its namespaces are joined only
        // while the pid is still that process.
        let state_path = self.container_dir(id).join(files::STATE);
        let state = read_json::<ShimState>(&state_path).map_err(state_err(&state_path))?;
        let ns = exec::Namespaces::of(state.pid, state.start_ticks).map_err(|source| RuntimeError::Process {
            action: format!("opening the namespaces of container {}", info.config.name),
            source,
        })?;
        Ok((info.config, procs, ns))
    }

    /// Makes a record directory atomically: a hidden temporary directory with the record in
    /// it, renamed into place.
    fn make_record_dir<T: serde::Serialize>(&self, dir: &Path, file: &str, value: &T) -> Result<(), RuntimeError> {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = dir.with_file_name(format!("{TMP_PREFIX}{name}"));
        state_files::create_private_dir_all(&tmp).map_err(state_err(&tmp))?;
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
