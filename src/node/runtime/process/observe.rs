//! How the process runtime reads a container's files and acts on what they say: the
//! verdict comes from `records::decide`, whether an earlier look still holds from
//! `records::may_reuse` and `records::still_holds`; this is the thin executor (look again or
//! reuse, report once, adopt, stop what is proven ours, quarantine).

use super::records::{self, files, FileId, Fingerprint, LockState, Look, Read, Seen, Verdict};
use super::{shim, ContainerRecord, ExitRecord, Observed, ProcessRuntime, ShimState, UNIDENTIFIED_GRACE};
use crate::base::state_files::write_json;
use crate::base::{procs, state_files};
use crate::node::runtime::{ContainerInfo, ContainerState, Quarantined, RuntimeError};
use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

impl ProcessRuntime {
    /// Logs a damaged file once per agent run (`key` tells what was already said).
    pub(super) fn report_once(&self, key: &Path, what: &str) {
        if self.reported.lock().insert(key.to_path_buf()) {
            log::warn!("runtime: {what}");
        }
    }

    /// Moves a damaged record aside, once: one log line, and an event via `take_quarantined`.
    pub(super) fn quarantine(&self, kind: &'static str, dir: &Path, reason: &str) {
        if self.read_only {
            self.report_once(dir, &format!("{kind} record {} is damaged ({reason}); skipped", dir.display()));
            return;
        }
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let qdir = self.quarantine_dir();
        let stamp = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
        let target = qdir.join(format!("{kind}-{name}-{stamp}"));
        let moved = state_files::create_private_dir_all(&qdir).and_then(|()| fs::rename(dir, &target));
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

    /// Reads every file of a container whose lock was just found `lock` (liveness first, the
    /// exit after: a shim writes its exit before it lets go of its lock, by exiting, so a shim
    /// seen dead has written every exit it ever will; read the other way round, a shim
    /// exiting in between would look lost, and its real exit would be overwritten with an
    /// unknown one). Reports each damaged file once. Also returns what was seen of the
    /// directory and the files read, `None` when some of it could not be looked at.
    pub(super) fn look(&self, id: &str, dir: &Path, lock: LockState) -> (Look, Option<Fingerprint>) {
        let report = |path: &Path, e: &str| self.report_once(path, &format!("container {id}: cannot read {e}"));
        // Taken before any file is read, so whatever changes from here on is seen next time.
        let mut print = fs::metadata(dir).ok().map(|m| Fingerprint::new(FileId::of(&m)));
        let cached = self.cache.lock().get(id).and_then(|c| c.record.clone());
        let record = match cached {
            Some(r) => Read::Ok(r),
            None => read(dir, files::CONFIG, &mut print).map(Arc::new),
        };
        let identity = match &record {
            Read::Ok(_) => Read::Missing,
            _ => read(dir, files::SHIM, &mut print),
        };
        let state: Read<ShimState> = read(dir, files::STATE, &mut print);
        let shim_alive = match lock {
            LockState::Held => true,
            LockState::Free => false,
            // Started by an older shim (no lock): its recorded, verified pid decides.
            LockState::Absent => state.ok().is_some_and(|s| procs::process_alive(s.shim_pid, Some(s.shim_start_ticks))),
        };
        let exit = read(dir, files::EXIT, &mut print);
        let exit_backup = match &exit {
            Read::Ok(_) => Read::Missing,
            _ => match read(dir, files::EXIT_BACKUP, &mut print) {
                Read::Missing => exit_link(dir),
                other => other,
            },
        };
        // Keyed by the error text (which starts with the path): a file damaged differently
        // later is reported again. A damaged config.json is reported where it is dealt with
        // (adopted or moved aside).
        for e in [unreadable(&state), unreadable(&exit)].into_iter().flatten() {
            report(Path::new(&e), &e);
        }
        #[cfg(test)]
        self.looks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        (Look { record, identity, state, exit, exit_backup, shim_alive }, print)
    }

    /// Reads the container's state files, unless the last look still holds (an exit, or a
    /// running container nothing changed of), and acts on what they say: a lost shim's
    /// workload is stopped, an unidentifiable record is stopped and then moved aside.
    /// Returns the container with the record it is reported with.
    pub(super) fn observe_full(&self, id: &str) -> Result<(ContainerInfo, Arc<ContainerRecord>), RuntimeError> {
        let dir = self.container_dir(id);
        if !dir.is_dir() {
            return Err(RuntimeError::NotFound { kind: "container", id: id.into() });
        }
        self.observe_dir(id, &dir, self.clock.now())
    }

    /// `observe_full` of a container whose directory `dir` exists; `now` was read before.
    pub(super) fn observe_dir(
        &self,
        id: &str,
        dir: &Path,
        now: SystemTime,
    ) -> Result<(ContainerInfo, Arc<ContainerRecord>), RuntimeError> {
        let last = self.cache.lock().get(id).and_then(|c| c.last.clone());
        let lock = match last.as_deref() {
            Some(Observed::Final { info, record }) => return Ok((info.clone(), Arc::clone(record))),
            Some(Observed::Running { info, record, seen, lock }) => {
                let lock = match lock {
                    Some(kept) => records::lock_state_of(&kept.file),
                    None => records::lock_state(dir),
                };
                let again = if lock == LockState::Held { look_again(&self.containers, id, seen) } else { None };
                if records::still_holds(lock, seen, again.as_ref()) {
                    return Ok((info.clone(), Arc::clone(record)));
                }
                lock
            }
            // Read-only: liveness by the shim's verified pid, never by trying its lock.
            None if self.read_only => LockState::Absent,
            None => records::lock_state(dir),
        };
        let (look, print) = self.look(id, dir, lock);
        let verdict = records::decide(&look, id, SystemTime::now());
        let reusable = print.filter(|p| records::may_reuse(&verdict, lock, p, now));
        let Some(record) = records::usable_record(&look, id) else {
            match verdict {
                Verdict::Unidentified => self.stop_unidentified(id, dir, &look),
                Verdict::Quarantine(why) => {
                    // Its shim is gone, but a workload it left may still run: once the
                    // record is moved aside nothing would ever find it again.
                    if let Some(ShimState { pid, start_ticks: Some(ticks), .. }) = look.state.ok() {
                        if let Ok(true) = procs::kill_group_verified(*pid, *ticks, libc::SIGKILL) {
                            log::warn!("runtime: container {id}: killed process group {pid} its lost shim left");
                        }
                    }
                    self.quarantine("container", dir, &why)
                }
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
        let state = look.state.ok();
        let (st, exit) = match verdict {
            Verdict::Exited(e) => (ContainerState::Exited, Some(e)),
            Verdict::Running(_) => (ContainerState::Running, None),
            Verdict::Created => (ContainerState::Created, None),
            Verdict::Lost(e) => (ContainerState::Exited, Some(self.reap_lost(id, &record, &look, e))),
            // `decide` gives these only when no record is usable (handled above); were it
            // ever otherwise, Running is the side that starts and kills nothing.
            Verdict::Quarantine(_) | Verdict::Unidentified => (ContainerState::Running, None),
        };
        let info = info(id, &record, st, state, exit.as_ref());
        let config_read = look.record.ok().is_some();
        let last = match (exit.is_some() && config_read, reusable) {
            (true, _) => Some(Observed::Final { info: info.clone(), record: Arc::clone(&record) }),
            (false, Some(seen)) => {
                let lock = self.keep_lock(dir);
                Some(Observed::Running { info: info.clone(), record: Arc::clone(&record), seen, lock })
            }
            (false, None) => None,
        };
        let mut cache = self.cache.lock();
        let c = cache.entry(id.into()).or_default();
        if config_read {
            c.record = Some(Arc::clone(&record));
        }
        c.last = last.map(Arc::new);
        drop(cache);
        Ok((info, record))
    }

    pub(super) fn observe(&self, id: &str) -> Result<ContainerInfo, RuntimeError> {
        self.observe_full(id).map(|(i, _)| i)
    }

    /// The shim died without recording an exit (killed by hand, OOM): stop what is left of
    /// the workload, since nobody can report its exit any more, and record that. Only
    /// processes proven ours are signalled: the process group whose leader still has the
    /// recorded start time, and whatever is in the container's own cgroup.
    pub(super) fn reap_lost(
        &self,
        id: &str,
        record: &ContainerRecord,
        look: &Look,
        mut exit: ExitRecord,
    ) -> ExitRecord {
        let name = &record.config.name;
        if self.read_only {
            // Reported as it is; the agent (or drain) stops what is left and records it.
            return exit;
        }
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
            match s.start_ticks.map(|t| procs::kill_group_verified(s.pid, t, libc::SIGKILL)) {
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
    pub(super) fn stop_unidentified(&self, id: &str, dir: &Path, look: &Look) {
        if self.read_only {
            return;
        }
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
        let _ =
            state_files::write_atomic(&dir.join(files::STOP), UNIDENTIFIED_GRACE.as_millis().to_string().as_bytes());
        if !matches!(procs::signal_verified(s.shim_pid, s.shim_start_ticks, libc::SIGTERM), Ok(true)) {
            if let Some(t) = s.start_ticks {
                let _ = procs::kill_group_verified(s.pid, t, libc::SIGKILL);
            }
        }
    }
}

/// The exit a shim kept in `files::EXIT_LINK` on a full disk (the directory's own
/// fingerprint tells when it appears).
fn exit_link(dir: &Path) -> Read<ExitRecord> {
    let path = dir.join(files::EXIT_LINK);
    let Ok(target) = fs::read_link(&path) else { return Read::Missing };
    let made = fs::symlink_metadata(&path).and_then(|m| m.modified()).unwrap_or_else(|_| std::time::SystemTime::now());
    match ExitRecord::from_link(&target.to_string_lossy(), made) {
        Some(exit) => Read::Ok(exit),
        None => Read::Unreadable(format!("{}: not an exit: {}", path.display(), target.display())),
    }
}

/// Reads file `name` of `dir`, adding what was seen of it to `print` (which becomes `None`
/// when the file could not be looked at).
fn read<T: serde::de::DeserializeOwned>(dir: &Path, name: &'static str, print: &mut Option<Fingerprint>) -> Read<T> {
    let (read, seen) = Read::file_seen(&dir.join(name));
    if !print.as_mut().is_some_and(|p| p.add(name, seen)) {
        *print = None;
    }
    read
}

/// Container `id`'s directory (in `containers`, the open directory of all of them) and the
/// files that `then` saw, looked at again; as far as needed only (a changed directory is
/// enough to tell), `None` when something cannot be looked at.
fn look_again(containers: &fs::File, id: &str, then: &Fingerprint) -> Option<Fingerprint> {
    let mut now = Fingerprint::new(stat_at(containers, id).ok()?);
    if now.dir != then.dir {
        return Some(now);
    }
    for (name, _) in &then.files {
        let seen = match stat_at(containers, &format!("{id}/{name}")) {
            Ok(seen) => Seen::Present(seen),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Seen::Missing,
            Err(_) => Seen::Unknown,
        };
        if !now.add(name, seen) {
            return None;
        }
    }
    Some(now)
}

/// `stat(2)` of `path` relative to the open directory `dir` (following symbolic links, as
/// `fs::metadata` does): the walk starts there instead of at the root, which matters for a
/// look repeated at every container every second.
fn stat_at(dir: &fs::File, path: &str) -> io::Result<FileId> {
    let path = std::ffi::CString::new(path).map_err(io::Error::other)?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: an open directory fd, a NUL-terminated path, and room for one `stat`.
    if unsafe { libc::fstatat(dir.as_raw_fd(), path.as_ptr(), st.as_mut_ptr(), 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatat succeeded, so it filled `st`.
    Ok(FileId::of_stat(unsafe { &st.assume_init() }))
}

pub(super) fn unreadable<T>(r: &Read<T>) -> Option<String> {
    match r {
        Read::Unreadable(e) => Some(e.clone()),
        _ => None,
    }
}

pub(super) fn info(
    id: &str,
    record: &ContainerRecord,
    st: ContainerState,
    state: Option<&ShimState>,
    exit: Option<&ExitRecord>,
) -> ContainerInfo {
    ContainerInfo {
        image_ref: String::new(),
        id: id.into(),
        sandbox_id: record.sandbox_id.clone(),
        config: Arc::clone(&record.config),
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

#[cfg(test)]
mod tests {
    //! The reuse of looks on real files, with the test standing in for the shim: it holds the
    //! container's lock and writes the shim's records. Every file's modification time is set
    //! back first, so any later change is told by it, whatever the clock's granularity.
    use super::super::{files, records, ExitRecord, ProcessRuntime, ShimState};
    use crate::base::clock::FakeClock;
    use crate::base::state_files::write_json;
    use crate::base::{procs, state_files};
    use crate::node::runtime::{ContainerConfig, ContainerRuntime, ContainerState, SandboxConfig};
    use std::fs::File;
    use std::os::unix::ffi::OsStrExt;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    struct Fixture {
        _tmp: tempfile::TempDir,
        rt: ProcessRuntime,
        id: String,
        dir: PathBuf,
    }

    /// A running container: its config recorded by the runtime, its lock held and its state
    /// written by the test. The runtime's clock is an hour ahead, so what it sees is settled.
    fn running() -> (Fixture, File) {
        let tmp = tempfile::tempdir().unwrap();
        let clock = FakeClock::new(SystemTime::now() + Duration::from_secs(3600));
        let rt = ProcessRuntime::new(&tmp.path().join("runtime"), Path::new("/bin/false"), 1 << 20, 1)
            .unwrap()
            .with_clock(Arc::new(clock));
        let logs = tmp.path().join("logs");
        let sandbox = rt.run_pod_sandbox(&SandboxConfig { log_directory: logs.clone(), ..Default::default() }).unwrap();
        let config = ContainerConfig {
            name: "app".into(),
            argv: vec!["sleep".into(), "30".into()],
            log_path: logs.join("app.log"),
            ..Default::default()
        };
        let id = rt.create_container(&sandbox, &config).unwrap();
        let dir = rt.container_dir(&id);
        let lock = state_files::create_private_file(&dir.join(files::LOCK)).unwrap();
        assert!(records::try_lock(&lock).unwrap());
        write_state(&dir, 4242);
        let f = Fixture { _tmp: tmp, rt, id, dir };
        f.settle();
        (f, lock)
    }

    /// What a shim writes once the workload runs (no start time: nothing is ever signalled).
    fn write_state(dir: &Path, pid: i32) {
        let state =
            ShimState { shim_pid: 1, shim_start_ticks: 1, pid, start_ticks: None, started_at: SystemTime::now() };
        write_json(&dir.join(files::STATE), &state).unwrap();
    }

    /// Sets the modification time of `path` to 2001.
    fn set_back(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        let t = libc::timespec { tv_sec: 1_000_000_000, tv_nsec: 0 };
        // SAFETY: a valid C path and two valid timespecs.
        assert_eq!(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), [t, t].as_ptr(), 0) }, 0);
    }

    impl Fixture {
        /// Sets back every file of the container, then its directory.
        fn settle(&self) {
            for f in [files::CONFIG, files::STATE] {
                set_back(&self.dir.join(f));
            }
            set_back(&self.dir);
        }

        fn list(&self) -> crate::node::runtime::ContainerInfo {
            let all = self.rt.list_containers().unwrap();
            assert_eq!(all.len(), 1);
            all.into_iter().next().unwrap()
        }

        /// Looks that read the container's files so far.
        fn looks(&self) -> usize {
            self.rt.looks.load(Ordering::Relaxed)
        }
    }

    #[test]
    fn a_read_only_runtime_tells_liveness_by_the_shims_pid_and_changes_nothing() {
        let (f, lock) = running();
        let root = f.dir.parent().unwrap().parent().unwrap().to_path_buf();
        // The lock is free (never tried), the shim's recorded pid is alive: running.
        drop(lock);
        let me = std::process::id() as i32;
        let ticks = procs::process_start_ticks(me).unwrap();
        let state = ShimState {
            shim_pid: me,
            shim_start_ticks: ticks,
            pid: 4242,
            start_ticks: None,
            started_at: SystemTime::now(),
        };
        write_json(&f.dir.join(files::STATE), &state).unwrap();
        let ro = ProcessRuntime::open_read_only(&root).unwrap();
        let all = ro.list_containers().unwrap();
        assert_eq!((all.len(), all[0].state), (1, ContainerState::Running));
        // Its shim gone without recording an exit: reported lost, nothing recorded.
        let dead = ShimState { shim_start_ticks: ticks + 1, ..state };
        write_json(&f.dir.join(files::STATE), &dead).unwrap();
        let ro = ProcessRuntime::open_read_only(&root).unwrap();
        let i = &ro.list_containers().unwrap()[0];
        assert_eq!((i.state, i.reason.as_str()), (ContainerState::Exited, "Unknown"));
        assert!(!f.dir.join(files::EXIT).exists(), "the exit is left for the agent to record");
        // A damaged record stays where it is.
        let damaged = root.join("containers/damaged");
        std::fs::create_dir(&damaged).unwrap();
        std::fs::write(damaged.join(files::CONFIG), "{").unwrap();
        assert_eq!(ro.list_containers().unwrap().len(), 1);
        assert!(damaged.join(files::CONFIG).exists() && !ro.quarantine_dir().exists());
        // Every change is refused.
        let e = ro.stop_container(&f.id, Duration::ZERO).unwrap_err();
        assert_eq!(e.to_string(), "the process runtime does not support stopping containers (opened read-only)");
        assert!(ro.remove_container(&f.id).is_err() && f.dir.exists());
        assert!(ro.create_container("s", &ContainerConfig::default()).is_err());
        // Nothing is made where there is no runtime directory.
        let none = f._tmp.path().join("nothing");
        assert!(ProcessRuntime::open_read_only(&none).is_err());
        assert!(!none.exists());
    }

    #[test]
    fn an_unchanged_running_container_is_not_read_again() {
        let (f, _lock) = running();
        let first = f.list();
        assert_eq!((first.state, first.pid), (ContainerState::Running, Some(4242)));
        let looks = f.looks();
        for _ in 0..3 {
            let again = f.list();
            assert_eq!((again.state, again.pid, again.started_at), (first.state, first.pid, first.started_at));
        }
        assert_eq!(f.looks(), looks, "reused, not read");
        assert!(Arc::ptr_eq(&f.list().config, &first.config), "its config is shared, not copied");
    }

    #[test]
    fn a_state_rewritten_at_once_at_the_same_size_is_seen_on_the_next_relist() {
        let (f, _lock) = running();
        assert_eq!(f.list().pid, Some(4242));
        // A new file renamed over the old one: a new inode, whatever the times say.
        write_state(&f.dir, 4343);
        f.settle();
        assert_eq!(f.list().pid, Some(4343));
        // Edited in place, at the same size.
        let text = std::fs::read_to_string(f.dir.join(files::STATE)).unwrap();
        std::fs::write(f.dir.join(files::STATE), text.replace("4343", "4444")).unwrap();
        assert_eq!(f.list().pid, Some(4444));
    }

    #[test]
    fn a_container_whose_shim_exits_is_seen_exited_on_the_next_relist() {
        let (f, lock) = running();
        assert_eq!(f.list().state, ContainerState::Running);
        let exit = ExitRecord {
            exit_code: 3,
            signal: None,
            reason: "Error".into(),
            message: String::new(),
            finished_at: SystemTime::now(),
        };
        write_json(&f.dir.join(files::EXIT_BACKUP), &exit).unwrap();
        write_json(&f.dir.join(files::EXIT), &exit).unwrap();
        f.settle();
        drop(lock);
        let i = f.list();
        assert_eq!((i.state, i.exit_code, i.reason.as_str()), (ContainerState::Exited, 3, "Error"));
        // Final: kept, and no longer read.
        let looks = f.looks();
        assert_eq!(f.list().exit_code, 3);
        assert_eq!(f.looks(), looks);
    }

    #[test]
    fn an_exit_recorded_while_the_shim_still_holds_its_lock_is_seen_on_the_next_relist() {
        let (f, _lock) = running();
        assert_eq!(f.list().state, ContainerState::Running);
        let exit = ExitRecord {
            exit_code: 0,
            signal: None,
            reason: "Completed".into(),
            message: String::new(),
            finished_at: SystemTime::now(),
        };
        write_json(&f.dir.join(files::EXIT_BACKUP), &exit).unwrap();
        let i = f.list();
        assert_eq!((i.state, i.reason.as_str()), (ContainerState::Exited, "Completed"));
    }

    #[test]
    fn a_shim_that_dies_without_recording_an_exit_is_seen_lost_on_the_next_relist() {
        // With its lock file kept open, and (past the budget) opened at each look.
        for budget in [usize::MAX, 0] {
            let (mut f, lock) = running();
            f.rt.lock_budget = budget;
            assert_eq!(f.list().state, ContainerState::Running);
            assert_eq!(f.list().state, ContainerState::Running);
            assert_eq!(f.rt.kept_locks.load(Ordering::Relaxed), usize::from(budget > 0));
            // Not a file changes: only the lock tells.
            drop(lock);
            let i = f.list();
            assert_eq!((i.state, i.reason.as_str()), (ContainerState::Exited, "Unknown"));
            assert!(f.dir.join(files::EXIT).exists(), "the lost exit is recorded");
            assert_eq!(f.rt.kept_locks.load(Ordering::Relaxed), 0, "its lock file was closed");
            assert_eq!(records::lock_state(&f.dir), records::LockState::Free, "and is not held");
        }
    }

    #[test]
    fn a_removed_container_leaves_nothing_behind() {
        let (f, lock) = running();
        f.list();
        assert!(f.rt.cache.lock().contains_key(&f.id));
        drop(lock);
        f.rt.remove_container(&f.id).unwrap();
        assert!(f.rt.cache.lock().is_empty());
        assert_eq!(f.rt.kept_locks.load(Ordering::Relaxed), 0);
        // One gone behind the runtime's back is forgotten by the next relist.
        let (g, _lock) = running();
        g.list();
        std::fs::remove_dir_all(&g.dir).unwrap();
        assert!(g.rt.list_containers().unwrap().is_empty());
        assert!(g.rt.cache.lock().is_empty());
        assert_eq!(g.rt.kept_locks.load(Ordering::Relaxed), 0);
    }
}
