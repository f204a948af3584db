//! How the process runtime reads a container's files and acts on what they say: the
//! verdict comes from `records::decide`; this is the thin executor (report once, adopt,
//! stop what is proven ours, quarantine).

use super::records::{self, files, Look, Read, Verdict};
use super::{shim, ContainerRecord, ExitRecord, ProcessRuntime, ShimState, UNIDENTIFIED_GRACE};
use crate::runtime::{ContainerInfo, ContainerState, Quarantined, RuntimeError};
use crate::util::{self, write_json};
use std::fs;
use std::path::Path;
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

    /// Reads every file of a container; reports each damaged one once.
    pub(super) fn look(&self, id: &str, dir: &Path) -> Look {
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
        // Liveness first, the exit after: a shim writes its exit before it lets go of its
        // lock (by exiting), so a shim seen dead has written every exit it ever will. Read the
        // other way round, a shim exiting in between would look lost, and its real exit
        // would be overwritten with an unknown one.
        let lock = records::lock_state(dir);
        let state: Read<ShimState> = Read::file(&dir.join(files::STATE));
        let shim_alive = match lock {
            records::LockState::Held => true,
            records::LockState::Free => false,
            // Started by an older shim (no lock): its recorded, verified pid decides.
            records::LockState::Absent => {
                state.ok().is_some_and(|s| util::process_alive(s.shim_pid, Some(s.shim_start_ticks)))
            }
        };
        let exit = Read::file(&dir.join(files::EXIT));
        let exit_backup = match &exit {
            Read::Ok(_) => Read::Missing,
            _ => Read::file(&dir.join(files::EXIT_BACKUP)),
        };
        // Keyed by the error text (which starts with the path): a file damaged differently
        // later is reported again. A damaged config.json is reported where it is dealt with
        // (adopted or moved aside).
        for e in [unreadable(&state), unreadable(&exit)].into_iter().flatten() {
            report(Path::new(&e), &e);
        }
        Look { record, identity, state, exit, exit_backup, shim_alive }
    }

    /// Reads the container's state files, caching what can no longer change, and acts on
    /// what they say: a lost shim's workload is stopped, an unidentifiable record is stopped
    /// and then moved aside. Returns the container with the record it is reported with.
    pub(super) fn observe_full(&self, id: &str) -> Result<(ContainerInfo, ContainerRecord), RuntimeError> {
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
                Verdict::Quarantine(why) => {
                    // Its shim is gone, but a workload it left may still run: once the
                    // record is moved aside nothing would ever find it again.
                    if let Some(ShimState { pid, start_ticks: Some(ticks), .. }) = look.state.ok() {
                        if let Ok(true) = util::kill_group_verified(*pid, *ticks, libc::SIGKILL) {
                            log::warn!("runtime: container {id}: killed process group {pid} its lost shim left");
                        }
                    }
                    self.quarantine("container", &dir, &why)
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
        let state = look.state.ok().cloned();
        let (st, exit) = match verdict {
            Verdict::Exited(e) => (ContainerState::Exited, Some(e)),
            Verdict::Running(_) => (ContainerState::Running, None),
            Verdict::Created => (ContainerState::Created, None),
            Verdict::Lost(e) => (ContainerState::Exited, Some(self.reap_lost(id, &record, &look, e))),
            // `decide` gives these only when no record is usable (handled above); were it
            // ever otherwise, Running is the side that starts and kills nothing.
            Verdict::Quarantine(_) | Verdict::Unidentified => (ContainerState::Running, None),
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
    pub(super) fn stop_unidentified(&self, id: &str, dir: &Path, look: &Look) {
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
