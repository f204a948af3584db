//! The built-in `process` runtime: each container is a host process in its own session and
//! process group, supervised by a small shim process (`ferrolet shim <dir>`, the way
//! containerd uses shims). The shim outlives the agent: it waits on the workload, writes its
//! logs, enforces the stop grace period and records the exit, so an agent restart (even
//! `kill -9`) neither restarts nor loses a container. Everything lives in files:
//!
//! ```text
//! <root>/sandboxes/<id>/sandbox.json     SandboxInfo
//! <root>/containers/<id>/config.json     ContainerRecord (written by the agent)
//! <root>/containers/<id>/state.json      ShimState (written by the shim once the process runs)
//! <root>/containers/<id>/exit.json       ExitRecord (written by the shim when it exits)
//! <root>/containers/<id>/stop            grace period in ms (written by the agent, then SIGTERM to the shim)
//! <root>/containers/<id>/shim.log        the shim's own errors
//! ```

pub mod logfile;
pub mod shim;

use super::exec::{ExecProcess, ExecStart};
use super::{
    ContainerConfig, ContainerInfo, ContainerRuntime, ContainerState, ExecResult, RuntimeError, SandboxConfig,
    SandboxInfo,
};
use crate::cm::cgroupfs::CgroupDriver;
use crate::util::{self, read_json, write_json};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
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

/// What the agent writes when it creates a container.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ContainerRecord {
    /// Container id.
    pub id: String,
    /// Sandbox id.
    pub sandbox_id: String,
    /// The configuration.
    pub config: ContainerConfig,
    /// Creation time.
    pub created_at: SystemTime,
    /// Rotate the log past this size.
    pub log_max_size: u64,
    /// Log files to keep.
    pub log_max_files: u32,
    /// The container's own cgroup, when cgroups are enforced.
    #[serde(default)]
    pub cgroup: Option<ContainerCgroup>,
}

/// The container cgroup the runtime created (in each hierarchy on cgroup v1).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ContainerCgroup {
    /// Its directories (removed by the shim when the container exits).
    pub dirs: Vec<PathBuf>,
    /// The `cgroup.procs` files the process joins before it runs its command.
    pub procs: Vec<PathBuf>,
    /// The memory controller's directory, read to tell an OOM kill from other kills.
    pub memory: Option<PathBuf>,
}

/// What the shim writes once the workload runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ShimState {
    /// The shim's pid.
    pub shim_pid: i32,
    /// The shim's start time in clock ticks (identifies it across pid reuse).
    pub shim_start_ticks: u64,
    /// The workload's pid (also its process group and session id).
    pub pid: i32,
    /// When the workload started.
    pub started_at: SystemTime,
}

/// What the shim writes when the workload is gone.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ExitRecord {
    /// Exit code, 128 + signal when signalled.
    pub exit_code: i32,
    /// Signal number when signalled.
    pub signal: Option<i32>,
    /// `Completed`, `Error`, `OOMKilled`, `StartError` or `Unknown`.
    pub reason: String,
    /// Details.
    pub message: String,
    /// Exit time.
    pub finished_at: SystemTime,
}

#[derive(Default)]
struct Cached {
    record: Option<ContainerRecord>,
    state: Option<ShimState>,
    exit: Option<ExitRecord>,
    verified: bool,
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
}

fn state_err(path: &Path) -> impl FnOnce(std::io::Error) -> RuntimeError + '_ {
    move |source| RuntimeError::State { path: path.into(), source }
}

impl ProcessRuntime {
    /// A runtime keeping its files under `root`, starting `shim_exe shim <dir>` per container.
    pub fn new(root: &Path, shim_exe: &Path, log_max_size: u64, log_max_files: u32) -> Result<Self, RuntimeError> {
        for sub in ["sandboxes", "containers"] {
            let p = root.join(sub);
            fs::create_dir_all(&p).map_err(state_err(&p))?;
        }
        Ok(ProcessRuntime {
            root: root.into(),
            shim_exe: shim_exe.into(),
            log_max_size,
            log_max_files,
            cgroups: None,
            cache: Mutex::new(HashMap::new()),
            sandboxes: Mutex::new(None),
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
            message: e.to_string(),
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

    /// The sandbox records, loading them from disk on first use.
    fn with_sandboxes<T>(&self, f: impl FnOnce(&mut HashMap<String, SandboxInfo>) -> T) -> Result<T, RuntimeError> {
        let mut guard = self.sandboxes.lock();
        if guard.is_none() {
            let dir = self.root.join("sandboxes");
            let mut map = HashMap::new();
            for entry in fs::read_dir(&dir).map_err(state_err(&dir))?.flatten() {
                let file = entry.path().join("sandbox.json");
                match read_json::<SandboxInfo>(&file) {
                    Ok(info) => {
                        map.insert(info.id.clone(), info);
                    }
                    Err(e) => log::warn!("runtime: ignoring unreadable sandbox record {}: {e}", file.display()),
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

    fn record(&self, id: &str) -> Result<ContainerRecord, RuntimeError> {
        if let Some(r) = self.cache.lock().get(id).and_then(|c| c.record.clone()) {
            return Ok(r);
        }
        let path = self.container_dir(id).join("config.json");
        let r: ContainerRecord = read_json(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => RuntimeError::NotFound { kind: "container", id: id.into() },
            _ => RuntimeError::State { path: path.clone(), source: e },
        })?;
        self.cache.lock().entry(id.into()).or_default().record = Some(r.clone());
        Ok(r)
    }

    /// Reads the container's state files, caching what can no longer change.
    fn observe(&self, id: &str) -> Result<ContainerInfo, RuntimeError> {
        let record = self.record(id)?;
        let dir = self.container_dir(id);
        let (mut state, mut exit) = {
            let cache = self.cache.lock();
            let c = cache.get(id);
            (c.and_then(|c| c.state.clone()), c.and_then(|c| c.exit.clone()))
        };
        if exit.is_none() {
            exit = read_json::<ExitRecord>(&dir.join("exit.json")).ok();
        }
        if exit.is_none() && state.is_none() {
            state = read_json::<ShimState>(&dir.join("state.json")).ok();
        }
        if exit.is_none() {
            if let Some(s) = &state {
                // The shim's identity (start time) is checked once per agent run; after
                // that a signal-0 probe is enough (a shim is reparented to init and reaped
                // at once, so it is never left a zombie).
                let verified = self.cache.lock().get(id).is_some_and(|c| c.verified);
                let alive = if verified {
                    util::pid_exists(s.shim_pid)
                } else {
                    util::process_alive(s.shim_pid, Some(s.shim_start_ticks))
                };
                if alive && !verified {
                    self.cache.lock().entry(id.into()).or_default().verified = true;
                }
                if !alive {
                    // The shim may have written exit.json between our two looks.
                    exit = read_json::<ExitRecord>(&dir.join("exit.json")).ok();
                    if exit.is_none() {
                        exit = Some(self.reap_lost(id, s));
                    }
                }
            }
        }
        if state.is_none() {
            state = read_json::<ShimState>(&dir.join("state.json")).ok();
        }
        {
            let mut cache = self.cache.lock();
            let c = cache.entry(id.into()).or_default();
            c.state = state.clone();
            c.exit = exit.clone();
        }
        let (st, exit_code, reason, message, finished_at) = match (&exit, &state) {
            (Some(e), _) => {
                (ContainerState::Exited, e.exit_code, e.reason.clone(), e.message.clone(), Some(e.finished_at))
            }
            (None, Some(_)) => (ContainerState::Running, 0, String::new(), String::new(), None),
            (None, None) => (ContainerState::Created, 0, String::new(), String::new(), None),
        };
        Ok(ContainerInfo {
            id: id.into(),
            sandbox_id: record.sandbox_id.clone(),
            config: record.config,
            state: st,
            created_at: record.created_at,
            started_at: state.as_ref().map(|s| s.started_at),
            finished_at,
            exit_code,
            reason,
            message,
            pid: if st == ContainerState::Running { state.map(|s| s.pid) } else { None },
        })
    }

    /// The shim died without recording an exit (killed by hand, OOM): stop what is left of
    /// the workload, since nobody can report its exit any more, and record that.
    fn reap_lost(&self, id: &str, s: &ShimState) -> ExitRecord {
        log::warn!(
            "runtime: container {id}: shim {} is gone without recording an exit; killing process group {}",
            s.shim_pid,
            s.pid
        );
        let _ = util::kill_group(s.pid, libc::SIGKILL);
        let rec = ExitRecord {
            exit_code: 137,
            signal: Some(libc::SIGKILL),
            reason: "Unknown".into(),
            message: "the container's shim exited without recording the exit; the process group was killed".into(),
            finished_at: SystemTime::now(),
        };
        let _ = write_json(&self.container_dir(id).join("exit.json"), &rec);
        rec
    }

    fn spawn_shim(&self, id: &str) -> Result<(), RuntimeError> {
        let dir = self.container_dir(id);
        let log = File::create(dir.join("shim.log")).map_err(state_err(&dir))?;
        let mut child = Command::new(&self.shim_exe)
            .arg("shim")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .env_remove("RUST_LOG_STYLE")
            .spawn()
            .map_err(|source| RuntimeError::Process {
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
                    return Err(RuntimeError::StartContainer {
                        id: id.into(),
                        message: "shim did not detach in time".into(),
                    });
                }
                Err(source) => return Err(RuntimeError::Process { action: "waiting for the shim".into(), source }),
            }
        }
    }
}

impl ContainerRuntime for ProcessRuntime {
    fn kind(&self) -> &'static str {
        "process"
    }

    fn run_pod_sandbox(&self, config: &SandboxConfig) -> Result<String, RuntimeError> {
        let id = util::random_id();
        let file = self.sandbox_file(&id);
        if let Some(dir) = file.parent() {
            fs::create_dir_all(dir).map_err(state_err(dir))?;
        }
        fs::create_dir_all(&config.log_directory).map_err(state_err(&config.log_directory))?;
        let info = SandboxInfo { id: id.clone(), config: config.clone(), created_at: SystemTime::now(), ready: true };
        write_json(&file, &info).map_err(state_err(&file))?;
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
        if config.argv.is_empty() {
            return Err(RuntimeError::CreateContainer {
                name: config.name.clone(),
                message: "the process runtime needs `command` (there is no image to take an entrypoint from)".into(),
            });
        }
        let cgroup = self.create_cgroup(config)?;
        let id = util::random_id();
        let dir = self.container_dir(&id);
        fs::create_dir_all(&dir).map_err(state_err(&dir))?;
        let record = ContainerRecord {
            id: id.clone(),
            sandbox_id: sandbox_id.into(),
            config: config.clone(),
            created_at: SystemTime::now(),
            log_max_size: self.log_max_size,
            log_max_files: self.log_max_files,
            cgroup,
        };
        let file = dir.join("config.json");
        write_json(&file, &record).map_err(state_err(&file))?;
        self.cache.lock().insert(id.clone(), Cached { record: Some(record), ..Default::default() });
        Ok(id)
    }

    fn start_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.record(id)?;
        let dir = self.container_dir(id);
        if dir.join("state.json").exists() || dir.join("exit.json").exists() {
            return Err(RuntimeError::StartContainer {
                id: id.into(),
                message: "container was already started".into(),
            });
        }
        self.spawn_shim(id)?;
        let deadline = Instant::now() + START_TIMEOUT;
        let mut pause = Duration::from_micros(200);
        while Instant::now() < deadline {
            if let Ok(exit) = read_json::<ExitRecord>(&dir.join("exit.json")) {
                if exit.reason == "StartError" {
                    return Err(RuntimeError::StartContainer { id: id.into(), message: exit.message });
                }
                return Ok(());
            }
            if dir.join("state.json").exists() {
                return Ok(());
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
        let shim_log = fs::read_to_string(dir.join("shim.log")).unwrap_or_default();
        Err(RuntimeError::StartContainer {
            id: id.into(),
            message: format!("shim did not report the process started: {}", shim_log.trim()),
        })
    }

    fn stop_container(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        let info = self.observe(id)?;
        if info.state != ContainerState::Running {
            return Ok(());
        }
        let dir = self.container_dir(id);
        let stop = dir.join("stop");
        util::write_atomic(&stop, grace.as_millis().to_string().as_bytes()).map_err(state_err(&stop))?;
        let state = self.cache.lock().get(id).and_then(|c| c.state.clone());
        if let Some(s) = state {
            // SAFETY: kill has no memory-safety preconditions.
            if unsafe { libc::kill(s.shim_pid, libc::SIGTERM) } != 0 {
                // The shim is gone; stop the workload directly so the stop still happens.
                util::kill_group(s.pid, libc::SIGKILL).map_err(|source| RuntimeError::Process {
                    action: format!("killing process group {}", s.pid),
                    source,
                })?;
            }
        }
        Ok(())
    }

    fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        let info = match self.observe(id) {
            Ok(i) => Some(i),
            Err(RuntimeError::NotFound { .. }) => None,
            Err(e) => return Err(e),
        };
        if let Some(info) = &info {
            if info.state == ContainerState::Running {
                // Force-remove, as CRI does: kill at once, then let the shim record the exit
                // before its directory goes away.
                self.stop_container(id, Duration::ZERO)?;
                let deadline = Instant::now() + Duration::from_secs(5);
                while self.observe(id).is_ok_and(|i| i.state == ContainerState::Running) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            if let Some(cg) = self.record(id).ok().and_then(|r| r.cgroup) {
                shim::remove_cgroup(&cg);
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
        let mut seen = std::collections::HashSet::new();
        for entry in fs::read_dir(&dir).map_err(state_err(&dir))?.flatten() {
            let id = entry.file_name().to_string_lossy().into_owned();
            match self.observe(&id) {
                Ok(info) => {
                    seen.insert(id);
                    out.push(info)
                }
                Err(e) => log::warn!("runtime: ignoring container {id}: {}", crate::util::Chain(&e)),
            }
        }
        self.cache.lock().retain(|id, _| seen.contains(id));
        Ok(out)
    }

    fn exec_start(&self, id: &str, cmd: &[String]) -> Result<ExecStart, RuntimeError> {
        let info = self.observe(id)?;
        if info.state != ContainerState::Running {
            return Err(RuntimeError::StartContainer {
                id: id.into(),
                message: "cannot exec in a container that is not running".into(),
            });
        }
        let Some((prog, args)) = cmd.split_first() else {
            return Err(RuntimeError::Process {
                action: "exec".into(),
                source: std::io::Error::other("empty command"),
            });
        };
        let cfg = &info.config;
        let procs = self.record(id)?.cgroup.map(|c| c.procs).unwrap_or_default();
        let cgroups = shim::open_cgroup_procs(&procs).map_err(|source| RuntimeError::Process {
            action: "opening the container's cgroup.procs".into(),
            source,
        })?;
        let mut command = Command::new(prog);
        command
            .args(args)
            .env_clear()
            .envs(shim::process_env(cfg))
            .current_dir(if cfg.working_dir.is_empty() { "/" } else { &cfg.working_dir })
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let fds: Vec<i32> = cgroups.iter().map(|f| f.as_raw_fd()).collect();
        // SAFETY: the closure only calls write(2), which is async-signal-safe.
        unsafe {
            command.pre_exec(move || shim::join_cgroups(&fds));
        }
        let child = match command.spawn() {
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
}
