//! Stopping a pod gracefully (kubelet's `killPodWithSyncResult`): app and init containers
//! first, sidecars once those have exited, each with what is left of the grace period (never
//! below the minimum); a pod outliving its grace period is reported once; once nothing runs,
//! its sandbox and containers are removed and the pod is forgotten. `compute_kill_actions`
//! decides; `sync_termination` applies.

use super::actions::KillContainer;
use super::view::{is_sidecar, PodView, Snapshot};
use super::{PodEntry, PodManager, Termination, MIN_GRACE};
use crate::api::Pod;
use crate::runtime::ContainerInfo;
use crate::util::Chain;
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
        let refused: Vec<&str> = actions.stop.iter().filter(|k| !self.kill(&pod, k)).map(|k| k.id.as_str()).collect();
        if let Some(names) = &actions.exceeded_grace {
            let message = format!(
                "Container runtime did not kill the pod within specified grace period; still running: {}",
                names.join(", ")
            );
            self.event(&pod, None, true, "ExceededGracePeriod", &message);
        }
        let stopping = self.pods.get_mut(uid).and_then(|e| {
            let PodEntry { termination, failure, .. } = e;
            termination.as_mut().or(failure.as_mut().map(|f| &mut f.stopping))
        });
        if let Some(t) = stopping {
            t.requested.extend(actions.requested.iter().filter(|id| !refused.contains(&id.as_str())).cloned());
            t.warned |= actions.exceeded_grace.is_some();
        }
        if let Some(remove) = actions.remove.filter(|_| removing) {
            self.remove_pod(&pod, remove);
        }
    }

    /// Removes a pod whose containers have all stopped, and forgets it. A sandbox that
    /// cannot be removed keeps the pod, to be retried at the next sync.
    fn remove_pod(&mut self, pod: &Pod, remove: RemovePod) {
        let uid = pod.metadata.uid.as_str();
        for id in &remove.sandboxes {
            let removed = self.mutate().stop_pod_sandbox(id).and_then(|_| self.mutate().remove_pod_sandbox(id));
            if let Err(e) = removed {
                log::warn!("pods: pod {}: cannot remove sandbox {id}: {}", pod.key(), Chain(&e));
                return;
            }
        }
        for id in &remove.containers {
            // Already gone with the sandbox, as a rule; what is left goes now.
            let _ = self.mutate().remove_container(id);
        }
        // Its volumes and files go with it; what cannot go now goes at the next agent start.
        if let Err(e) = self.pod_dir(pod).remove() {
            log::warn!("pods: pod {}: cannot remove its directory: {}", pod.key(), Chain(&e));
        }
        log::info!("pods: pod {} terminated and removed", pod.key());
        if self.desired.get(uid).is_some_and(|d| d.metadata.deletion_timestamp.is_some()) {
            self.deleted.insert(uid.to_string());
        }
        self.pods.remove(uid);
        self.statuses.remove(uid);
        self.published.remove(uid);
        self.cgroups_ready.remove(uid);
        self.volumes_ready.remove(uid);
        if self.cm.is_some() {
            let active = super::active_pods(&self.pods);
            if let Some(cm) = self.cm.as_mut() {
                cm.remove_pod(uid, &active);
            }
        }
        self.backoff.forget_pod(uid);
        self.waiting.retain(|(u, _), _| u != uid);
        if let Some(images) = self.images.as_mut() {
            images.forget_pod(uid);
        }
        self.trim_heap = true;
    }
}
