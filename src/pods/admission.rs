//! Which pods the manager owns: the pods sources want (admitted, or waiting for their
//! devices), old versions of changed pods and removed pods (terminated), and pods found in
//! the runtime that no source wants (adopted to be terminated, once every source reported).

use super::actor::Actor;
use super::devices::{pod_needs, DeviceLink};
use super::fit;
use super::termination::recorded_grace;
use super::view::Snapshot;
use super::{config_hash, Admission, PodEntry, Termination, SYSCTL_FORBIDDEN, UNEXPECTED_ADMISSION_ERROR};
use crate::api::manifest::PodSource;
use crate::api::{Pod, PodPhase, Time};
use crate::node::eviction::{self, view::PressureView, Admission::Refuse};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The pods owned, by uid.
type Pods = BTreeMap<String, PodEntry>;

/// What the sources want, and what admission remembers of them.
pub(super) struct Sources {
    /// The pods the sources want, by uid.
    pub(super) desired: BTreeMap<String, Arc<Pod>>,
    /// The desired pods changed since owned pods were last checked against them (`retire`).
    desired_changed: bool,
    /// The sources that must report before pods no source wants are told apart (`file`,
    /// and `api` in cluster mode).
    pub(super) expected: Vec<PodSource>,
    /// Sources that have reported at least once.
    seen: HashSet<PodSource>,
    /// Pods the apiserver is deleting whose termination is done: not taken on again while
    /// their source still lists them (until the apiserver has them deleted).
    deleted: HashSet<String>,
    /// Pod directories left by pods that no longer exist were removed (once per run).
    dirs_swept: bool,
    /// The node's pressure conditions (the eviction manager's): new pods are refused under
    /// pressure as kubelet's eviction admission refuses them.
    pub(super) pressure: PressureView,
}

impl Default for Sources {
    fn default() -> Self {
        Sources {
            desired: BTreeMap::new(),
            desired_changed: false,
            expected: vec![PodSource::File],
            seen: HashSet::new(),
            deleted: HashSet::new(),
            dirs_swept: false,
            pressure: PressureView::default(),
        }
    }
}

impl Sources {
    /// Whether every source has reported its pods at least once.
    pub(super) fn all_seen(&self) -> bool {
        self.expected.iter().all(|s| self.seen.contains(s))
    }

    /// A pod was terminated and removed: one the apiserver is deleting is not taken on
    /// again while it still lists it.
    pub(super) fn removed(&mut self, uid: &str) {
        if self.desired.get(uid).is_some_and(|d| d.metadata.deletion_timestamp.is_some()) {
            self.deleted.insert(uid.to_string());
        }
    }

    /// Takes the complete set of pods a source wants.
    pub(super) fn set_desired(&mut self, source: PodSource, pods: Vec<Arc<Pod>>) {
        self.desired.retain(|_, p| PodSource::of(p) != Some(source));
        for p in pods {
            self.desired.insert(p.metadata.uid.clone(), p);
        }
        self.seen.insert(source);
        self.deleted.retain(|uid| self.desired.contains_key(uid));
        self.desired_changed = true;
    }

    /// Adds newly desired pods, starts terminating pods no longer desired, and adopts
    /// orphans found in the runtime once every source has reported.
    pub(super) fn admit_and_retire(
        &mut self,
        pods: &mut Pods,
        act: &Actor,
        devices: Option<&DeviceLink>,
        snap: &Snapshot,
        now: SystemTime,
    ) {
        // Whether a pod is retired depends on the desired pods alone (a pod taken on since
        // is desired as it is, or adopted and already terminating).
        if std::mem::take(&mut self.desired_changed) {
            self.retire(pods, now);
        }
        self.admit(pods, act, devices, snap, now);
        if self.all_seen() {
            adopt_orphans(pods, snap, now);
            if !std::mem::replace(&mut self.dirs_swept, true) {
                // Every pod the runtime holds is now owned: a directory of any other is left
                // from a crash between the pod's removal and its directory's.
                crate::pods::dir::sweep(&act.cfg.pods_root, |uid| {
                    pods.contains_key(uid) || self.desired.contains_key(uid)
                });
            }
        }
    }

    /// Starts terminating pods that were removed from their source or changed in it.
    fn retire(&self, pods: &mut Pods, now: SystemTime) {
        for (uid, entry) in pods.iter_mut() {
            // A pod whose manifest sets its uid keeps it when the manifest changes: the old
            // version is terminated, and the new one starts once it is gone, as for a new uid.
            let changed = self.desired.get(uid).is_some_and(|d| config_hash(d) != config_hash(&entry.pod));
            // A pod the apiserver is deleting: its grace period is the deletion's.
            let deleting = self.desired.get(uid).filter(|d| d.metadata.deletion_timestamp.is_some());
            if (changed || deleting.is_some() || !self.desired.contains_key(uid)) && entry.termination.is_none() {
                let grace = deleting.map_or_else(|| entry.pod.spec.termination_grace(), |d| deletion_grace(d));
                let why = match (changed, deleting.is_some()) {
                    (true, _) => "changed in",
                    (_, true) => "deleted in",
                    _ => "removed from",
                };
                log::info!("pods: pod {} {why} its source; terminating with grace period {grace:?}", entry.pod.key());
                Arc::make_mut(&mut entry.pod).metadata.deletion_timestamp = Some(Time(now));
                entry.termination = Some(Termination::new(now, grace));
            }
        }
    }

    /// Takes on newly desired pods, oldest first as kubelet does (each pod from the
    /// apiserver is checked against those admitted before it); those asking for plugin
    /// devices wait for the device manager's admission.
    fn admit(&self, pods: &mut Pods, act: &Actor, devices: Option<&DeviceLink>, snap: &Snapshot, now: SystemTime) {
        let mut new: Vec<&Arc<Pod>> = self.desired.values().filter(|p| !pods.contains_key(&p.metadata.uid)).collect();
        // Stable: pods created in the same second keep their uid order; static pods, which
        // have no creation time, come first.
        new.sort_by_key(|p| p.metadata.creation_timestamp);
        // What the admitted pods hold, made for the first pod checked against it.
        let mut usage = None;
        for pod in new {
            let uid = &pod.metadata.uid;
            // A changed static pod gets a new uid: the new version waits for the old one to
            // be gone, so two copies never run at once.
            if pods.values().any(|e| e.pod.key() == pod.key()) {
                continue;
            }
            if self.deleted.contains(uid) {
                continue;
            }
            if pod.metadata.deletion_timestamp.is_some() {
                // Deleted in the apiserver before this agent took it on (or while it was
                // down): only its termination is left to do.
                let grace = deletion_grace(pod);
                log::info!(
                    "pods: pod {} (uid {uid}) is being deleted; terminating with grace period {grace:?}",
                    pod.key()
                );
                let entry = PodEntry::new(pod.clone(), Admission::Admitted, Some(Termination::new(now, grace)));
                pods.insert(uid.clone(), entry);
                continue;
            }
            log::info!("pods: pod {} added (uid {uid})", pod.key());
            let mut admission = Admission::Admitted;
            // kubelet's admit handlers in its order: eviction's, then sysctls', then the fit.
            if let Some((reason, message)) = self.under_pressure(pod, snap) {
                act.event(pod, None, true, reason, &message);
                admission = Admission::Rejected { reason: reason.into(), message };
            } else if let Some(name) = crate::api::security::forbidden_sysctl(pod, &act.cfg.allowed_unsafe_sysctls) {
                // kubelet's sysctl admission: the pod fails and never runs.
                let message = format!("forbidden sysctl: {name:?} not allowlisted");
                act.event(pod, None, true, SYSCTL_FORBIDDEN, &message);
                admission = Admission::Rejected { reason: SYSCTL_FORBIDDEN.into(), message };
            } else if let Some(short) = self.misfit(pods, act, devices, pod, snap, &mut usage) {
                // kubelet's resource fit (GeneralPredicates): the pod fails and never runs.
                let (reason, message) = (short.reason(), short.message());
                act.event(pod, None, true, &reason, &message);
                admission = Admission::Rejected { reason: reason.into(), message };
            } else if let Some(link) = devices.filter(|_| pod_needs(pod)) {
                admission = Admission::Pending;
                link.admit(pod);
            }
            if let Some(u) = usage.as_mut().filter(|_| !matches!(admission, Admission::Rejected { .. })) {
                u.add(pod);
            }
            let mut entry = PodEntry::new(pod.clone(), admission, None);
            // Every field it sets is honoured, refused (its containers wait as
            // CreateContainerConfigError), or accepted with this one line.
            for u in crate::api::fields::check(pod, act.runtime.kind()) {
                if u.is_refused() {
                    entry.refused.push(u);
                } else {
                    log::info!("pods: pod {}: {}", pod.key(), crate::base::logsafe::Escaped(&u.describe()));
                }
            }
            pods.insert(uid.clone(), entry);
        }
    }

    /// The resource a pod from the apiserver does not fit in on this node, if any (kubelet's
    /// resource fit). Static pods are the node owner's choice and are not checked. Nor is a
    /// pod whose containers already run (found after an agent restart, with less allocatable
    /// now): refusing it would leave them running under a Failed pod.
    fn misfit(
        &self,
        pods: &Pods,
        act: &Actor,
        devices: Option<&DeviceLink>,
        pod: &Pod,
        snap: &Snapshot,
        usage: &mut Option<fit::Usage>,
    ) -> Option<fit::Insufficient> {
        if PodSource::of(pod) != Some(PodSource::Api) {
            return None;
        }
        let usage = usage.get_or_insert_with(|| self.usage(pods, act));
        let mut node = act.cfg.allocatable.clone();
        if let Some(link) = devices {
            node.scalar.extend(link.allocatable());
        }
        let short = fit::fits(pod, usage, &node).err()?;
        if snap.pod(&pod.metadata.uid).running().next().is_some() {
            log::warn!("pods: pod {} already runs; admitting it though {}", pod.key(), short.message());
            return None;
        }
        Some(short)
    }

    /// kubelet's eviction admission: the reason and message a new pod is refused with under
    /// node pressure. A pod whose containers already run (after an agent restart) is kept.
    fn under_pressure(&self, pod: &Pod, snap: &Snapshot) -> Option<(&'static str, String)> {
        let conditions = self.pressure.get()?;
        let Refuse { reason, message } = eviction::admit(&conditions, pod) else { return None };
        if snap.pod(&pod.metadata.uid).running().next().is_some() {
            log::warn!("pods: pod {} already runs; admitting it though {message}", pod.key());
            return None;
        }
        Some((reason, message))
    }

    /// What the pods kubelet calls active hold: pods a source still wants, not refused at
    /// admission, whose phase is not Succeeded or Failed.
    fn usage(&self, pods: &Pods, act: &Actor) -> fit::Usage {
        let active = pods.iter().filter(|(uid, e)| {
            self.desired.contains_key(*uid)
                && !matches!(e.admission, Admission::Rejected { .. })
                && !act.statuses.phase(uid).is_some_and(PodPhase::is_terminal)
        });
        fit::Usage::of(active.map(|(_, e)| &*e.pod))
    }
}

/// Pods the runtime holds that no source wants (left from before an agent restart):
/// terminated with the grace period their sandbox recorded.
fn adopt_orphans(pods: &mut Pods, snap: &Snapshot, now: SystemTime) {
    let mut orphans: HashSet<&String> = snap.sandboxes.keys().collect();
    orphans.extend(snap.containers.keys());
    for uid in orphans {
        if pods.contains_key(uid) {
            continue;
        }
        let mut pod = Pod::default();
        let sandbox = snap.sandboxes.get(uid);
        if let Some(s) = sandbox {
            pod.metadata.name = s.config.pod_name.clone();
            pod.metadata.namespace = s.config.namespace.clone();
        }
        let grace = recorded_grace(sandbox);
        pod.metadata.uid = uid.clone();
        pod.metadata.deletion_timestamp = Some(Time(now));
        log::info!("pods: found pod {} (uid {uid}) that no source wants; terminating it", pod.key());
        let entry = PodEntry::new(Arc::new(pod), Admission::Admitted, Some(Termination::new(now, grace)));
        pods.insert(uid.clone(), entry);
    }
}

/// The device manager admitted a pending pod, or could not (`refusal`); whether it was
/// pending (a sync then starts or fails it).
pub(super) fn on_admitted(pods: &mut Pods, act: &Actor, uid: &str, refusal: Option<String>) -> bool {
    let Some(entry) = pods.get_mut(uid).filter(|e| e.admission == Admission::Pending) else {
        return false;
    };
    // A pod whose containers already run (adopted after an agent restart with the
    // checkpoint lost) keeps running, as with kubelet's running-container rule:
    // rejecting it would leave its processes running under a Failed pod.
    let running = act.statuses.status(uid).is_some_and(|s| {
        s.init_container_statuses.iter().chain(&s.container_statuses).any(|c| c.state.running.is_some())
    });
    match refusal {
        None => entry.admission = Admission::Admitted,
        Some(e) if running => {
            log::warn!("pods: pod {} already runs; admitting it without its device allocation: {e}", entry.pod.key());
            entry.admission = Admission::Admitted;
        }
        Some(e) => {
            // kubelet's wording for a device allocation failure at admission.
            let message = format!("Allocate failed due to {e}, which is unexpected");
            entry.admission =
                Admission::Rejected { reason: UNEXPECTED_ADMISSION_ERROR.into(), message: message.clone() };
            act.event(&entry.pod, None, true, UNEXPECTED_ADMISSION_ERROR, &message);
        }
    }
    true
}

/// The grace period of a pod being deleted: the deletion's, else its spec's.
fn deletion_grace(pod: &Pod) -> Duration {
    match pod.metadata.deletion_grace_period_seconds {
        Some(s) => Duration::from_secs(s.max(0) as u64),
        None => pod.spec.termination_grace(),
    }
}
