//! The files of one container and what they say together. Reading is defensive: every file
//! may be missing, damaged or from an older ferrolet, and `decide` (pure, unit-tested) turns
//! what was read into one verdict without ever guessing that a process is ours.
//!
//! A relist looks at every container each second. A running container's look is reused
//! while it provably still holds (`may_reuse`, `still_holds`): its shim still holds the lock,
//! and neither its directory nor any file read changed (`Fingerprint`). Then the container
//! costs a lock check and two `stat`s instead of reading and parsing its files.

use crate::node::runtime::ContainerConfig;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

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
    /// The exit on a full disk, where `exit.json` cannot be written: a symbolic link (an
    /// inode, no data block) whose target is `<exit code> <signal or 0> <reason>`, made
    /// when the link was (`ExitRecord::to_link`, `from_link`).
    pub const EXIT_LINK: &str = "exit.link";
    /// Grace period in ms, written by the agent before it signals the shim.
    pub const STOP: &str = "stop";
    /// `<unix ms> <grace ms>`: a stop the shim makes by itself at that time unless stopped
    /// before (written by the agent before a `preStop` hook, then SIGUSR1 to the shim).
    pub const STOP_AT: &str = "stop-at";
    /// Locked by the shim for its whole life (the lock is taken by the agent and inherited).
    pub const LOCK: &str = "shim.lock";
    /// The shim's own errors.
    pub const SHIM_LOG: &str = "shim.log";
    /// The container's own root (`root::plan`): its writable layer (`upper`), the overlay's
    /// `work` directory, and the mount points of `skeleton` and `merged`.
    pub const ROOT: &str = "root";
}

/// What the agent writes when it creates a container.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ContainerRecord {
    /// Container id.
    pub id: String,
    /// Sandbox id.
    pub sandbox_id: String,
    /// The configuration (shared with every `ContainerInfo` reported of the container).
    pub config: Arc<ContainerConfig>,
    /// Creation time.
    pub created_at: SystemTime,
    /// Rotate the log past this size.
    pub log_max_size: u64,
    /// Log files to keep.
    pub log_max_files: u32,
    /// The container's own cgroup, when cgroups are enforced.
    #[serde(default)]
    pub cgroup: Option<ContainerCgroup>,
    /// The pod's `hostPID`: the workload stays in the node's PID namespace (without it,
    /// and as root, it gets one of its own).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub host_pid: bool,
    /// The node's directories hidden in the container's root (ferrolet's own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<PathBuf>,
    /// The root the shim makes (decided at create, when the mounts were checked against
    /// it); records of earlier releases have none, and their shim looks at the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<super::root::Support>,
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
    /// On the systemd driver: the scope the shim starts before its workload joins it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<ContainerScope>,
}

/// A container's transient scope (the systemd driver): `dirs` are its cgroup, which systemd
/// makes when the shim starts it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ContainerScope {
    /// `ferrolet-<container id>.scope`.
    pub unit: String,
    /// Its pod's slice.
    pub slice: String,
    /// The container's control files and values (also the scope's properties).
    pub limits: std::collections::BTreeMap<String, String>,
    /// Where each of them is written once the scope is there, in name order.
    pub writes: Vec<(PathBuf, String)>,
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
    /// Whether the shim reads `stop-at` when sent SIGUSR1 (false for shims of older
    /// ferrolets, which SIGUSR1 would kill).
    #[serde(default)]
    pub stop_at: bool,
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
            stop_at: true,
        }
    }

    /// The container record as far as the identity knows it (no command, env or devices).
    pub fn partial_record(&self, id: &str) -> ContainerRecord {
        ContainerRecord {
            id: id.into(),
            sandbox_id: self.sandbox_id.clone(),
            config: Arc::new(ContainerConfig {
                name: self.name.clone(),
                attempt: self.attempt,
                labels: self.labels.clone(),
                log_path: self.log_path.clone(),
                ..Default::default()
            }),
            created_at: self.created_at,
            log_max_size: 0,
            log_max_files: 0,
            cgroup: self.cgroup.clone(),
            host_pid: false,
            hidden: Vec::new(),
            root: None,
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

impl ExitRecord {
    /// The target of `files::EXIT_LINK` for this exit (its message is left out: a full
    /// disk's record keeps what a status needs).
    pub fn to_link(&self) -> String {
        format!("{} {} {}", self.exit_code, self.signal.unwrap_or(0), self.reason)
    }

    /// The exit a `files::EXIT_LINK` target says, made at `finished_at`.
    pub fn from_link(target: &str, finished_at: SystemTime) -> Option<ExitRecord> {
        let mut f = target.splitn(3, ' ');
        let exit_code = f.next()?.parse().ok()?;
        let signal = f.next()?.parse::<i32>().ok()?;
        let reason = f.next()?;
        let known = ["Completed", "Error", "OOMKilled", "StartError", "Unknown"];
        known.contains(&reason).then(|| ExitRecord {
            exit_code,
            signal: (signal != 0).then_some(signal),
            reason: reason.into(),
            message: String::new(),
            finished_at,
        })
    }
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
    /// Reads `path` with `state_files::read_json` (bounded by `MAX_RECORD_SIZE`).
    pub fn file(path: &Path) -> Read<T> {
        Self::file_seen(path).0
    }

    /// Reads `path` as `file` does, and tells which version of it was read: the identity is
    /// taken from the open file before it is read, so a change made meanwhile shows as a
    /// different identity later (a needless read then, never a missed change).
    pub fn file_seen(path: &Path) -> (Read<T>, Seen) {
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return (Read::Missing, Seen::Missing),
            Err(e) => return (Read::Unreadable(with_path(path, &e)), Seen::Unknown),
        };
        let seen = file.metadata().map_or(Seen::Unknown, |m| Seen::Present(FileId::of(&m)));
        let read = match crate::base::state_files::read_json_from(file, path) {
            Ok(v) => Read::Ok(v),
            Err(e) => Read::Unreadable(with_path(path, &e)),
        };
        (read, seen)
    }
}

impl<T> Read<T> {
    /// The value mapped by `f`, the rest as it is.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Read<U> {
        match self {
            Read::Missing => Read::Missing,
            Read::Ok(v) => Read::Ok(f(v)),
            Read::Unreadable(e) => Read::Unreadable(e),
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

/// How long after its last change a file's times are trusted to tell every later change:
/// file times come from the kernel's coarse clock (ticks of 1 to 10 ms), so a write right
/// after a look may get the very time the look saw. Seen this long before the look began,
/// no later write can share a time with what was seen (git's "racily clean" rule).
pub const SETTLE_TIME: Duration = Duration::from_secs(1);

/// Which version of a file or directory was seen. A file rewritten through a rename (every
/// record is) gets a new inode: the old one still exists when the new one is made, so the
/// two never share a number. A file edited in place gets a new size or modification time;
/// a directory in which a file is made, renamed or removed gets new times. (No device: a
/// container's directory and its files are on one filesystem.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileId {
    ino: u64,
    size: u64,
    /// Modification time, seconds and nanoseconds.
    mtime: (i64, i64),
    /// Status change time (changes with every write, rename, `chmod`; cannot be set back).
    ctime: (i64, i64),
}

impl FileId {
    /// The identity in `meta`.
    pub fn of(meta: &Metadata) -> FileId {
        FileId {
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// The identity in `st`, as `stat(2)` fills it (the same fields `of` reads).
    // The times are 32-bit on 32-bit ARM (as the libc crate declares musl's `stat` there).
    #[allow(clippy::useless_conversion)]
    pub fn of_stat(st: &libc::stat) -> FileId {
        FileId {
            ino: st.st_ino,
            size: u64::try_from(st.st_size).unwrap_or_default(),
            mtime: (i64::from(st.st_mtime), i64::from(st.st_mtime_nsec)),
            ctime: (i64::from(st.st_ctime), i64::from(st.st_ctime_nsec)),
        }
    }

    /// Whether both its times are at least `SETTLE_TIME` before `now`.
    fn settled(&self, now: SystemTime) -> bool {
        let Some(limit) = now.checked_sub(SETTLE_TIME) else { return false };
        let Ok(limit) = limit.duration_since(SystemTime::UNIX_EPOCH) else { return false };
        let limit = (limit.as_secs() as i64, i64::from(limit.subsec_nanos()));
        self.mtime <= limit && self.ctime <= limit
    }
}

/// What opening a file found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// No such file.
    Missing,
    /// This version of it.
    Present(FileId),
    /// It could not be opened or looked at: nothing can tell later whether it changed.
    Unknown,
}

/// What a look saw of a container's files: its directory (taken before any file is read)
/// and each file it read from disk that exists, by name. A file that was missing needs no
/// entry: making it changes the directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    /// The container's directory.
    pub dir: FileId,
    /// The files read that exist.
    pub files: Vec<(&'static str, FileId)>,
}

impl Fingerprint {
    /// A fingerprint of directory `dir` with no file in it yet.
    pub fn new(dir: FileId) -> Fingerprint {
        Fingerprint { dir, files: Vec::new() }
    }

    /// Adds what was seen of file `name`; `false` when it cannot be told apart later.
    #[must_use]
    pub fn add(&mut self, name: &'static str, seen: Seen) -> bool {
        match seen {
            Seen::Missing => true,
            Seen::Present(id) => {
                self.files.push((name, id));
                true
            }
            Seen::Unknown => false,
        }
    }

    /// Whether everything seen is older than `SETTLE_TIME` at `now`.
    pub fn settled(&self, now: SystemTime) -> bool {
        self.dir.settled(now) && self.files.iter().all(|(_, id)| id.settled(now))
    }
}

/// Whether a look, with its fingerprint taken at `now` (read before it), may stand for later
/// looks while `still_holds` says so. Only a running container's: its shim held the lock,
/// so until the shim ends (lets go of the lock, after it recorded any exit) the verdict can
/// change only through its files. Every other verdict is a state that does not last (its
/// look is repeated) or is final (an exit, kept for good once `config.json` was read).
pub fn may_reuse(verdict: &Verdict, lock: LockState, print: &Fingerprint, now: SystemTime) -> bool {
    matches!(verdict, Verdict::Running(_)) && lock == LockState::Held && print.settled(now)
}

/// Whether a reusable look (fingerprint `then`) still holds: the shim still holds its lock
/// (looked at first, as every look does), and what was seen is unchanged (`now`: the same
/// directory and files looked at again; `None` when that failed).
pub fn still_holds(lock: LockState, then: &Fingerprint, now: Option<&Fingerprint>) -> bool {
    lock == LockState::Held && now == Some(then)
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

/// Looks at a shim lock through `f`, the lock file kept open (one call, where `lock_state`
/// opens, locks and closes), without holding it.
pub fn lock_state_of(f: &File) -> LockState {
    match try_lock(f) {
        Ok(true) => {
            // Let go at once: held, it would make the container look alive to every other
            // look (and keep a start or a removal waiting).
            // SAFETY: flock on an fd we own; no memory is passed.
            unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
            LockState::Free
        }
        // Cannot look: assume alive, the safe side, as `lock_state` does.
        Ok(false) | Err(_) => LockState::Held,
    }
}

/// Everything read about one container.
#[derive(Clone, Debug)]
pub struct Look {
    /// `config.json`.
    pub record: Read<Arc<ContainerRecord>>,
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
pub fn usable_record(look: &Look, id: &str) -> Option<Arc<ContainerRecord>> {
    match (&look.record, &look.identity) {
        (Read::Ok(r), _) => Some(Arc::clone(r)),
        (_, Read::Ok(i)) => Some(Arc::new(i.partial_record(id))),
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
            config: Arc::new(ContainerConfig { name: "app".into(), ..Default::default() }),
            created_at: SystemTime::UNIX_EPOCH,
            log_max_size: 1,
            log_max_files: 1,
            cgroup: None,
            host_pid: false,
            hidden: Vec::new(),
            root: None,
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
            record: Read::Ok(Arc::new(record())),
            identity: Read::Missing,
            state: Read::Missing,
            exit: Read::Missing,
            exit_backup: Read::Missing,
            shim_alive: false,
        }
    }

    /// A version of a file last changed `age` before `now`.
    fn id(ino: u64, size: u64, now: SystemTime, age: Duration) -> FileId {
        let t = (now - age).duration_since(SystemTime::UNIX_EPOCH).unwrap();
        let t = (t.as_secs() as i64, i64::from(t.subsec_nanos()));
        FileId { ino, size, mtime: t, ctime: t }
    }

    fn print(now: SystemTime, age: Duration) -> Fingerprint {
        let mut p = Fingerprint::new(id(1, 4096, now, age));
        assert!(p.add(files::STATE, Seen::Present(id(2, 180, now, age))));
        assert!(p.add(files::EXIT, Seen::Missing));
        p
    }

    #[test]
    fn only_a_running_container_whose_shim_holds_its_lock_is_looked_at_by_its_fingerprint() {
        let now = SystemTime::now();
        let old = print(now, Duration::from_secs(60));
        let running = Verdict::Running(Some(state()));
        assert!(may_reuse(&running, LockState::Held, &old, now));
        assert!(may_reuse(&Verdict::Running(None), LockState::Held, &old, now), "a starting container too");
        // An older shim's liveness is its pid, which no file tells.
        assert!(!may_reuse(&running, LockState::Absent, &old, now));
        assert!(!may_reuse(&Verdict::Created, LockState::Free, &old, now));
        assert!(!may_reuse(&Verdict::Exited(exit(0)), LockState::Free, &old, now));
        assert!(!may_reuse(&Verdict::Unidentified, LockState::Held, &old, now));
    }

    #[test]
    fn what_changed_within_the_settle_time_is_looked_at_again() {
        let now = SystemTime::now();
        let running = Verdict::Running(Some(state()));
        assert!(!may_reuse(&running, LockState::Held, &print(now, Duration::ZERO), now));
        assert!(!may_reuse(&running, LockState::Held, &print(now, SETTLE_TIME / 2), now));
        assert!(may_reuse(&running, LockState::Held, &print(now, SETTLE_TIME), now));
        // A file changed more recently than its directory.
        let mut p = print(now, Duration::from_secs(60));
        p.files[0].1.ctime = id(2, 180, now, Duration::from_millis(10)).ctime;
        assert!(!may_reuse(&running, LockState::Held, &p, now));
        // Times ahead of the clock (it was set back): nothing is trusted.
        assert!(!may_reuse(&running, LockState::Held, &print(now + Duration::from_secs(60), Duration::ZERO), now));
        // A file whose version cannot be told makes the whole look unusable.
        assert!(!print(now, Duration::from_secs(60)).add(files::EXIT_BACKUP, Seen::Unknown));
    }

    #[test]
    fn a_look_holds_while_the_shim_holds_its_lock_and_nothing_seen_changed() {
        let now = SystemTime::now();
        let then = print(now, Duration::from_secs(60));
        assert!(still_holds(LockState::Held, &then, Some(&then.clone())));
        // The shim ended, with or without writing anything.
        assert!(!still_holds(LockState::Free, &then, Some(&then.clone())));
        assert!(!still_holds(LockState::Absent, &then, Some(&then.clone())));
        // Nothing could be looked at again.
        assert!(!still_holds(LockState::Held, &then, None));
        let changed = |f: &dyn Fn(&mut Fingerprint)| {
            let mut p = then.clone();
            f(&mut p);
            still_holds(LockState::Held, &then, Some(&p))
        };
        // A file made, renamed or removed in the directory (exit.json, a new state.json).
        assert!(!changed(&|p| p.dir.mtime.1 += 1));
        assert!(!changed(&|p| p.dir.ctime.1 += 1));
        // state.json rewritten through a rename within the same clock tick, at the same size.
        assert!(!changed(&|p| p.files[0].1.ino = 3));
        // state.json edited in place.
        assert!(!changed(&|p| p.files[0].1.size += 1));
        assert!(!changed(&|p| p.files[0].1.mtime.1 += 1));
        assert!(!changed(&|p| p.files[0].1.ctime.0 += 1));
        // state.json removed.
        assert!(!changed(&|p| {
            p.files.clear();
        }));
    }

    #[test]
    fn a_lock_looked_at_through_a_kept_file_is_never_left_held() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(files::LOCK);
        let kept = File::create(&path).unwrap();
        assert_eq!(lock_state_of(&kept), LockState::Free);
        assert_eq!(lock_state(dir.path()), LockState::Free, "let go at once");
        let shim = File::open(&path).unwrap();
        assert!(try_lock(&shim).unwrap());
        assert_eq!(lock_state_of(&kept), LockState::Held);
        drop(shim);
        assert_eq!(lock_state_of(&kept), LockState::Free, "the shim ended");
        assert!(try_lock(&File::open(&path).unwrap()).unwrap(), "and nothing holds it");
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

    #[test]
    fn an_exit_kept_in_a_link_reads_back_as_it_was() {
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(5);
        let exit = ExitRecord {
            exit_code: 137,
            signal: Some(9),
            reason: "OOMKilled".into(),
            message: "x".into(),
            finished_at: at,
        };
        let back = ExitRecord::from_link(&exit.to_link(), at).unwrap();
        assert_eq!(
            (back.exit_code, back.signal, back.reason.as_str(), back.finished_at),
            (137, Some(9), "OOMKilled", at)
        );
        let three = ExitRecord::from_link("3 0 Error", at).unwrap();
        assert_eq!((three.exit_code, three.signal), (3, None));
        assert!(ExitRecord::from_link("3 0 Made up", at).is_none());
        assert!(ExitRecord::from_link("x 0 Error", at).is_none());
    }
}
