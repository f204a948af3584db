//! The files of one container and what they say together. Reading is defensive: every file
//! may be missing, damaged or from an older ferrolet, and `decide` (pure, unit-tested) turns
//! what was read into one verdict without ever guessing that a process is ours.

use crate::runtime::ContainerConfig;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// File names inside a container directory.
pub mod files {
    /// `ContainerRecord`, written by the agent.
    pub const CONFIG: &str = "config.json";
    /// `ShimIdentity`, written by the shim as soon as it runs.
    pub const SHIM: &str = "shim.json";
    /// `ShimState`, written by the shim once the workload runs.
    pub const STATE: &str = "state.json";
    /// `ExitRecord`, written by the shim when the workload is gone.
    pub const EXIT: &str = "exit.json";
    /// A second copy of `exit.json`.
    pub const EXIT_BACKUP: &str = "exit.backup.json";
    /// Grace period in ms, written by the agent before it signals the shim.
    pub const STOP: &str = "stop";
    /// Locked by the shim for its whole life (the lock is taken by the agent and inherited).
    pub const LOCK: &str = "shim.lock";
    /// The shim's own errors.
    pub const SHIM_LOG: &str = "shim.log";
}

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

/// What the shim writes first: who it is and which container it runs, so a running
/// container is still known (and adopted) when its `config.json` is damaged later.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ShimIdentity {
    /// The shim's pid.
    pub shim_pid: i32,
    /// The shim's start time in clock ticks.
    pub shim_start_ticks: u64,
    /// Sandbox id.
    pub sandbox_id: String,
    /// Container name.
    pub name: String,
    /// Restart attempt.
    pub attempt: u32,
    /// Labels (pod uid, pod name, container name, kind).
    pub labels: BTreeMap<String, String>,
    /// Log file.
    pub log_path: PathBuf,
    /// Creation time of the record.
    pub created_at: SystemTime,
    /// The container's cgroup.
    pub cgroup: Option<ContainerCgroup>,
}

impl ShimIdentity {
    /// The identity of shim `pid` running `record`.
    pub fn new(pid: i32, start_ticks: u64, record: &ContainerRecord) -> ShimIdentity {
        ShimIdentity {
            shim_pid: pid,
            shim_start_ticks: start_ticks,
            sandbox_id: record.sandbox_id.clone(),
            name: record.config.name.clone(),
            attempt: record.config.attempt,
            labels: record.config.labels.clone(),
            log_path: record.config.log_path.clone(),
            created_at: record.created_at,
            cgroup: record.cgroup.clone(),
        }
    }

    /// The container record as far as the identity knows it (no command, env or devices).
    pub fn partial_record(&self, id: &str) -> ContainerRecord {
        ContainerRecord {
            id: id.into(),
            sandbox_id: self.sandbox_id.clone(),
            config: ContainerConfig {
                name: self.name.clone(),
                attempt: self.attempt,
                labels: self.labels.clone(),
                log_path: self.log_path.clone(),
                ..Default::default()
            },
            created_at: self.created_at,
            log_max_size: 0,
            log_max_files: 0,
            cgroup: self.cgroup.clone(),
        }
    }
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
    /// The workload's start time in clock ticks; absent in records of older versions, whose
    /// workloads are then never signalled by pid.
    #[serde(default)]
    pub start_ticks: Option<u64>,
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

/// One file as read: missing, parsed, or present but unreadable (with why).
#[derive(Clone, Debug)]
pub enum Read<T> {
    /// The file does not exist.
    Missing,
    /// Parsed.
    Ok(T),
    /// It exists but cannot be read or parsed; the error, with the path.
    Unreadable(String),
}

impl<T: serde::de::DeserializeOwned> Read<T> {
    /// Reads `path` with `util::read_json` (bounded by `MAX_RECORD_SIZE`).
    pub fn file(path: &Path) -> Read<T> {
        match crate::util::read_json(path) {
            Ok(v) => Read::Ok(v),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Read::Missing,
            Err(e) => Read::Unreadable(with_path(path, &e)),
        }
    }
}

impl<T> Read<T> {
    /// The value, if parsed.
    pub fn ok(&self) -> Option<&T> {
        match self {
            Read::Ok(v) => Some(v),
            _ => None,
        }
    }
}

fn with_path(path: &Path, e: &io::Error) -> String {
    let text = e.to_string();
    // read_json's parse errors already start with the path.
    if text.starts_with(&path.display().to_string()) {
        text
    } else {
        format!("{}: {text}", path.display())
    }
}

/// Whether a shim holds the container's lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockState {
    /// A shim (or the agent, while it spawns one) holds it: the shim is alive.
    Held,
    /// Nobody holds it: no shim is alive.
    Free,
    /// No lock file: the container was never started, or by an older shim.
    Absent,
}

/// Tries a non-blocking exclusive lock; true when it was taken.
pub fn try_lock(f: &File) -> io::Result<bool> {
    // SAFETY: flock on an fd we own; no memory is passed.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Looks at the shim lock of container directory `dir` without holding it.
pub fn lock_state(dir: &Path) -> LockState {
    let f = match File::open(dir.join(files::LOCK)) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return LockState::Absent,
        // Cannot look: assume alive, the safe side (nothing is started or killed).
        Err(_) => return LockState::Held,
    };
    match try_lock(&f) {
        // Dropping the file releases the lock we just took.
        Ok(true) => LockState::Free,
        Ok(false) | Err(_) => LockState::Held,
    }
}

/// Everything read about one container.
#[derive(Clone, Debug)]
pub struct Look {
    /// `config.json`.
    pub record: Read<ContainerRecord>,
    /// `shim.json`.
    pub identity: Read<ShimIdentity>,
    /// `state.json`.
    pub state: Read<ShimState>,
    /// `exit.json`.
    pub exit: Read<ExitRecord>,
    /// `exit.backup.json` (read only when `exit.json` is not usable).
    pub exit_backup: Read<ExitRecord>,
    /// Whether its shim is alive (the lock, or for older shims the verified pid).
    pub shim_alive: bool,
}

/// What a container is, decided from a `Look`.
#[derive(Clone, Debug)]
pub enum Verdict {
    /// The recorded exit.
    Exited(ExitRecord),
    /// Its shim is alive: running, or starting when no state is recorded yet.
    Running(Option<ShimState>),
    /// Created and never run, with no shim alive: to be removed and created again.
    Created,
    /// The shim died without recording an exit: stop what is left of the workload (only
    /// processes proven ours), then record this exit.
    Lost(ExitRecord),
    /// Nothing identifies the container and nothing of it runs: move it aside.
    Quarantine(String),
    /// Nothing identifies the container, but a shim of it is alive: leave it until the shim
    /// is gone (it is stopped meanwhile), never start a second one in its place.
    Unidentified,
}

/// The record to report the container with: `config.json`, else what the shim recorded.
pub fn usable_record(look: &Look, id: &str) -> Option<ContainerRecord> {
    match (&look.record, &look.identity) {
        (Read::Ok(r), _) => Some(r.clone()),
        (_, Read::Ok(i)) => Some(i.partial_record(id)),
        _ => None,
    }
}

/// Decides what a container is from what was read, at `now`.
pub fn decide(look: &Look, id: &str, now: SystemTime) -> Verdict {
    let exit = look.exit.ok().or(look.exit_backup.ok());
    if usable_record(look, id).is_none() {
        // Nothing names the container's pod: it cannot be reported. While its shim lives it
        // is stopped (through state.json's verified pids); then it is moved aside.
        return if look.shim_alive { Verdict::Unidentified } else { Verdict::Quarantine(unreadable_reason(look)) };
    }
    if let Some(e) = exit {
        return Verdict::Exited(e.clone());
    }
    if look.shim_alive {
        return Verdict::Running(look.state.ok().cloned());
    }
    let lost = |message: String| ExitRecord {
        exit_code: 128 + libc::SIGKILL,
        signal: Some(libc::SIGKILL),
        reason: "Unknown".into(),
        message,
        finished_at: now,
    };
    match (&look.exit, &look.state) {
        // Recorded exits exist but cannot be read: the workload is gone (the shim saw it
        // exit); only its exit status is unknown. Nothing is signalled.
        (Read::Unreadable(e), _) => Verdict::Lost(ExitRecord {
            exit_code: 128 + libc::SIGKILL,
            signal: None,
            reason: "Unknown".into(),
            message: format!("the exit record is unreadable ({e}); the exit status is unknown"),
            finished_at: now,
        }),
        (_, Read::Ok(_)) => {
            Verdict::Lost(lost("the container's shim exited without recording the exit; its processes were killed".into()))
        }
        (_, Read::Unreadable(e)) => Verdict::Lost(lost(format!(
            "the container's shim is gone and its state record is unreadable ({e}); what was left in its cgroup was killed"
        ))),
        (_, Read::Missing) => Verdict::Created,
    }
}

fn unreadable_reason(look: &Look) -> String {
    match &look.record {
        Read::Unreadable(e) => e.clone(),
        Read::Missing => format!("no {} (created by an interrupted start)", files::CONFIG),
        Read::Ok(_) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> ContainerRecord {
        ContainerRecord {
            id: "c1".into(),
            sandbox_id: "s1".into(),
            config: ContainerConfig { name: "app".into(), ..Default::default() },
            created_at: SystemTime::UNIX_EPOCH,
            log_max_size: 1,
            log_max_files: 1,
            cgroup: None,
        }
    }

    fn state() -> ShimState {
        ShimState {
            shim_pid: 10,
            shim_start_ticks: 1,
            pid: 11,
            start_ticks: Some(2),
            started_at: SystemTime::UNIX_EPOCH,
        }
    }

    fn exit(code: i32) -> ExitRecord {
        ExitRecord {
            exit_code: code,
            signal: None,
            reason: "Completed".into(),
            message: String::new(),
            finished_at: SystemTime::UNIX_EPOCH,
        }
    }

    fn look() -> Look {
        Look {
            record: Read::Ok(record()),
            identity: Read::Missing,
            state: Read::Missing,
            exit: Read::Missing,
            exit_backup: Read::Missing,
            shim_alive: false,
        }
    }

    #[test]
    fn created_with_no_live_shim_is_to_be_created_again() {
        assert!(matches!(decide(&look(), "c1", SystemTime::now()), Verdict::Created));
    }

    #[test]
    fn a_live_shim_without_state_is_a_container_starting() {
        let l = Look { shim_alive: true, ..look() };
        assert!(matches!(decide(&l, "c1", SystemTime::now()), Verdict::Running(None)));
    }

    #[test]
    fn a_damaged_exit_record_falls_back_to_its_backup() {
        let l = Look {
            state: Read::Ok(state()),
            exit: Read::Unreadable("exit.json: EOF".into()),
            exit_backup: Read::Ok(exit(0)),
            ..look()
        };
        assert!(matches!(decide(&l, "c1", SystemTime::now()), Verdict::Exited(e) if e.exit_code == 0));
    }

    #[test]
    fn an_unreadable_exit_is_unknown_and_signals_nothing() {
        let l = Look { state: Read::Ok(state()), exit: Read::Unreadable("exit.json: EOF".into()), ..look() };
        match decide(&l, "c1", SystemTime::now()) {
            Verdict::Lost(e) => {
                assert_eq!(e.signal, None, "no kill is implied");
                assert!(e.message.contains("exit.json: EOF"), "{}", e.message);
            }
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn a_damaged_state_with_a_live_shim_is_running() {
        let l = Look { state: Read::Unreadable("state.json: EOF".into()), shim_alive: true, ..look() };
        assert!(matches!(decide(&l, "c1", SystemTime::now()), Verdict::Running(None)));
    }

    #[test]
    fn a_damaged_config_is_adopted_from_the_shim_identity() {
        let ident = ShimIdentity::new(10, 1, &record());
        let l = Look {
            record: Read::Unreadable("config.json: EOF".into()),
            identity: Read::Ok(ident),
            state: Read::Ok(state()),
            shim_alive: true,
            ..look()
        };
        assert!(matches!(decide(&l, "c1", SystemTime::now()), Verdict::Running(Some(_))));
        assert_eq!(usable_record(&l, "c1").unwrap().config.name, "app");
    }

    #[test]
    fn an_unidentifiable_container_is_left_while_its_shim_lives_then_quarantined() {
        let l = Look {
            record: Read::Unreadable("config.json: EOF".into()),
            state: Read::Ok(state()),
            shim_alive: true,
            ..look()
        };
        assert!(matches!(decide(&l, "c1", SystemTime::now()), Verdict::Unidentified));
        let l = Look { shim_alive: false, ..l };
        assert!(matches!(decide(&l, "c1", SystemTime::now()), Verdict::Quarantine(why) if why.contains("EOF")));
        let empty = Look { record: Read::Missing, ..look() };
        assert!(matches!(decide(&empty, "c1", SystemTime::now()), Verdict::Quarantine(_)));
    }
}
