//! Stopping a pod gracefully (kubelet's `killPodWithSyncResult`): app and init containers
//! first, sidecars once those have exited, each with what is left of the grace period (never
//! below the minimum); a pod outliving its grace period is reported once; once nothing runs,
//! the workers remove its sandbox and containers, and the pod is forgotten. A pod past its
//! `activeDeadlineSeconds` fails, and its containers stop the same way. `compute_kill_actions`
//! decides (for `ferrolet drain` too); `sync_termination` applies.

use super::actions::{active_deadline_exceeded, KillContainer, DEADLINE_EXCEEDED, DEADLINE_EXCEEDED_MESSAGE};
use super::view::{is_sidecar, PodView, Snapshot};
use super::workers::{Instance, Outcome, PodWork, Turn};
use super::{Admission, PodEntry, PodFailure, PodManager, Termination, MIN_GRACE};
use crate::api::Pod;
use crate::base::errors::Chain;
use crate::node::eviction::{self, view::EvictPod};
use crate::node::runtime::{ContainerInfo, SandboxInfo};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// How long past its grace period a container may take before we say so.
pub const EXCEEDED_GRACE_MARGIN: Duration = Duration::from_secs(5);

/// What a terminating pod needs next.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KillActions {
    /// Containers to ask to stop now (not asked before).
    pub stop: Vec<KillContainer>,
    /// Every container id of this round (app containers, or else sidecars), asked now or before.
    pub requested: Vec<String>,
    /// The pod outlived its grace period: report `ExceededGracePeriod` naming these
    /// still-running containers (once).
    pub exceeded_grace: Option<Vec<String>>,
    /// Nothing runs any more: remove the sandbox and every container, forget the pod.
    pub remove: Option<RemovePod>,
}

/// The remains of a pod whose containers have all stopped.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RemovePod {
    /// Its sandboxes (the newest first), each stopped and removed.
    pub sandboxes: Vec<String>,
    /// Every container instance, removed after the sandbox.
    pub containers: Vec<String>,
}

/// Decides the next step of a pod's termination at `now`.
pub fn compute_kill_actions(t: &Termination, view: PodView, now: SystemTime) -> KillActions {
    let elapsed = now.duration_since(t.started).unwrap_or_default();
    let remaining = t.grace.saturating_sub(elapsed).max(MIN_GRACE);
    let running: Vec<&ContainerInfo> = view.running().collect();
    // App (and init) containers first; sidecars only once those have exited.
    let mut batch: Vec<&ContainerInfo> = running.iter().copied().filter(|c| !is_sidecar(c)).collect();
    if batch.is_empty() {
        batch = running.iter().copied().filter(|c| is_sidecar(c)).collect();
    }
    let stop = batch
        .iter()
        .filter(|c| !t.requested.contains(&c.id))
        .map(|c| KillContainer {
            name: c.config.name.clone(),
            id: c.id.clone(),
            grace: remaining,
            message: format!("Stopping container {}", c.config.name),
        })
        .collect();
    let overdue = elapsed > t.grace + EXCEEDED_GRACE_MARGIN && !running.is_empty() && !t.warned;
    let remove = running.is_empty().then(|| RemovePod {
        sandboxes: view
            .sandbox
            .map(|s| s.id.clone())
            .into_iter()
            .chain(view.older_sandboxes.iter().map(|s| s.id.clone()))
            .collect(),
        containers: view.containers.iter().map(|c| c.id.clone()).collect(),
    });
    KillActions {
        stop,
        requested: batch.iter().map(|c| c.id.clone()).collect(),
        exceeded_grace: overdue.then(|| running.iter().map(|c| c.config.name.clone()).collect()),
        remove,
    }
}

/// The termination, from `now`, of every pod the runtime holds (found by its sandbox, or
/// only by its containers' pod uid label), each with the grace period its sandbox recorded
/// (the default without one): what `ferrolet drain` stops.
pub fn terminate_all(snap: &Snapshot, now: SystemTime) -> BTreeMap<String, Termination> {
    let uids = snap.sandboxes.keys().chain(snap.containers.keys());
    uids.map(|uid| (uid.clone(), Termination::new(now, recorded_grace(snap.pod(uid).sandbox)))).collect()
}

/// The grace period a pod's sandbox recorded; the default for a pod without one.
pub fn recorded_grace(sandbox: Option<&SandboxInfo>) -> Duration {
    let secs = sandbox
        .map_or(crate::api::defaults::DEFAULT_TERMINATION_GRACE_PERIOD, |s| s.config.termination_grace_period_seconds);
    Duration::from_secs(secs.max(0) as u64)
}

impl PodManager {
    /// Applies the next step of a terminating pod, or of the stop of a pod that failed on
    /// the node (which is never removed for it).
    pub(super) fn sync_termination(&mut self, uid: &str, snap: &Snapshot, now: SystemTime) {
        let Some(entry) = self.pods.get(uid) else { return };
        let removing = entry.termination.is_some();
        let Some(t) = entry.termination.as_ref().or(entry.failure.as_ref().map(|f| &f.stopping)) else { return };
        let pod = entry.pod.clone();
        let actions = compute_kill_actions(t, snap.pod(uid), now);
        // A stop the runtime refused is not recorded as asked: the next sync asks again.
        let refused: Vec<&str> =
            actions.stop.iter().filter(|k| !self.hooks.kill(&mut self.act, &pod, k)).map(|k| k.id.as_str()).collect();
        if let Some(names) = &actions.exceeded_grace {
            let message = format!(
                "Container runtime did not kill the pod within specified grace period; still running: {}",
                names.join(", ")
            );
            self.act.event(&pod, None, true, "ExceededGracePeriod", &message);
        }
        let stopping = self.pods.get_mut(uid).and_then(|e| {
            let PodEntry { termination, failure, .. } = e;
            termination.as_mut().or(failure.as_mut().map(|f| &mut f.stopping))
        });
        if let Some(t) = stopping {
            t.requested.extend(actions.requested.iter().filter(|id| !refused.contains(&id.as_str())).cloned());
            t.warned |= actions.exceeded_grace.is_some();
        }
        match actions.remove {
            // While every worker is busy, the next answer syncs it again.
            Some(_) if removing && self.workers.turn(uid, true) == Turn::Full => {}
            Some(remove) if removing => self.remove_pod(&pod, remove, snap.pod(uid)),
            Some(_) => {
                let failure = self.pods.get_mut(uid).and_then(|e| e.failure.as_mut());
                if let Some(f) = failure.filter(|f| f.evicted && !f.reclaimed) {
                    f.reclaimed = true;
                    self.remove_evicted_volumes(&pod);
                }
            }
            _ => {}
        }
    }

    /// Hands the removal of a pod whose containers have all stopped to the workers: its
    /// sandboxes, then what is left of its containers (`removal_answered` forgets it).
    fn remove_pod(&mut self, pod: &Pod, remove: RemovePod, view: PodView) {
        let mut work = PodWork::new(&pod.metadata.uid);
        work.removal = true;
        work.remove_sandboxes = remove.sandboxes;
        let name = |id: &str| view.containers.iter().find(|c| c.id == id).map(|c| c.config.name.clone());
        work.remove_containers =
            remove.containers.into_iter().map(|id| Instance { name: name(&id).unwrap_or_default(), id }).collect();
        self.submit(work);
    }

    /// A pod's removal answered: once its sandboxes are gone it is forgotten, with its
    /// directory (volumes, files; what cannot go now goes at the next agent start). A
    /// sandbox that could not be removed keeps the pod, to be retried at the next sync.
    pub(super) fn removal_answered(&mut self, pod: &Pod, out: Outcome) {
        let uid = pod.metadata.uid.as_str();
        if let Some((id, e)) = &out.sandbox_left {
            log::warn!("pods: pod {}: cannot remove sandbox {id}: {}", pod.key(), Chain(e));
            return;
        }
        // Stopped before all was removed: the next agent start finds the rest as an orphan.
        // A container left is already gone with its sandbox, as a rule.
        if out.stopped {
            return;
        }
        if let Err(e) = self.act.pod_dir(pod).remove() {
            log::warn!("pods: pod {}: cannot remove its directory: {}", pod.key(), Chain(&e));
        }
        log::info!("pods: pod {} terminated and removed", pod.key());
        self.sources.removed(uid);
        self.pods.remove(uid);
        self.act.statuses.remove(uid);
        self.published.inputs.remove(uid);
        self.setup.forget_pod(uid, &self.pods);
        self.restarts.forget_pod(uid);
        if let Some(images) = self.images.as_mut() {
            images.forget_pod(uid);
        }
        self.trim_heap = true;
    }

    /// Fails the pod when it has been active longer than its `activeDeadlineSeconds`
    /// (kubelet's `DeadlineExceeded`): its containers are stopped from now on, and it is
    /// never started again. True when it did.
    pub(super) fn check_active_deadline(&mut self, uid: &str, now: SystemTime) -> bool {
        let Some(entry) = self.pods.get_mut(uid) else { return false };
        let start = self.act.statuses.with_status(uid, |s| s.and_then(|s| s.start_time)).map(|t| t.0);
        if !active_deadline_exceeded(&entry.pod.spec, start, now) {
            return false;
        }
        // kubelet records this as a Normal event.
        self.act.event(&entry.pod, None, false, DEADLINE_EXCEEDED, DEADLINE_EXCEEDED_MESSAGE);
        entry.failure = Some(PodFailure {
            reason: DEADLINE_EXCEEDED,
            message: DEADLINE_EXCEEDED_MESSAGE.into(),
            stopping: Termination::new(now, entry.pod.spec.termination_grace()),
            evicted: false,
            reclaimed: false,
        });
        true
    }

    /// Evicts a pod (the eviction manager's `EvictPod`): it fails with reason `Evicted` and
    /// the manager's message, and its containers stop with the given grace period (kubelet's
    /// `killPodFunc` with the override). A pod already stopping or failed is left as it is.
    /// True when it did.
    pub(super) fn evict(&mut self, e: EvictPod, now: SystemTime) -> bool {
        let Some(entry) = self.pods.get_mut(&e.uid) else {
            log::info!("pods: pod {} to evict is gone already", e.uid);
            return false;
        };
        if entry.termination.is_some() || entry.failure.is_some() || entry.admission != Admission::Admitted {
            return false;
        }
        log::warn!("pods: evicting pod {} (grace period {:?}): {}", entry.pod.key(), e.grace, e.message);
        self.act.annotated_event(&entry.pod, e.annotations, eviction::REASON, &e.message);
        let stopping = Termination::new(now, e.grace);
        entry.failure = Some(PodFailure {
            reason: eviction::REASON,
            message: e.message,
            stopping,
            evicted: true,
            reclaimed: false,
        });
        true
    }

    /// Removes the directory (volumes, files) of an evicted pod whose containers have all
    /// stopped: an `emptyDir` filling the disk is what a disk eviction reclaims (kubelet
    /// tears down the volumes of a terminated pod). The pod never runs again.
    fn remove_evicted_volumes(&mut self, pod: &Pod) {
        match self.act.pod_dir(pod).remove() {
            Ok(()) => log::info!("pods: evicted pod {}: its volumes are removed", pod.key()),
            Err(e) => log::warn!("pods: evicted pod {}: cannot remove its volumes: {}", pod.key(), Chain(&e)),
        }
    }
}
