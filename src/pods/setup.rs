//! What a pod needs before its sandbox, once per agent run: its cgroup (through the
//! container manager, `cm`) and its volumes (in its own directory, `poddir`); and what the
//! downward API reads of the node.

use super::actor::Actor;
use super::PodEntry;
use crate::api::{downward, Pod};
use crate::base::errors::Chain;
use crate::node::cm::ContainerManager;
use crate::node::objects::{ObjectsChanged, ObjectsView};
use crate::pods::dir::Files;
use std::collections::{BTreeMap, HashSet};

/// The pods' cgroups and volumes.
pub(super) struct PodSetup {
    /// Pod cgroups; `None` when resource enforcement is off.
    pub(super) cm: Option<ContainerManager>,
    /// Pods whose cgroup this agent run has ensured.
    cgroups_ready: HashSet<String>,
    /// Pods whose volumes this agent run has made ready.
    volumes_ready: HashSet<String>,
    /// Pods whose volumes' files are to be written again (what they hold changed).
    refresh: HashSet<String>,
    /// ConfigMaps, Secrets and tokens (cluster mode; empty otherwise).
    pub(super) objects: ObjectsView,
}

/// The pods the manager owns, for the container manager.
fn active_pods(pods: &BTreeMap<String, PodEntry>) -> Vec<&Pod> {
    pods.values().map(|e| &*e.pod).collect()
}

impl PodSetup {
    /// Setup over the container manager `cm` (none: resource enforcement is off).
    pub(super) fn new(cm: Option<ContainerManager>) -> PodSetup {
        PodSetup {
            cm,
            cgroups_ready: HashSet::new(),
            volumes_ready: HashSet::new(),
            refresh: HashSet::new(),
            objects: ObjectsView::default(),
        }
    }

    /// Creates the pod's cgroup once per agent run (first refreshing the QoS cgroups, from
    /// the pods owned); false (with kubelet's `FailedCreatePodContainer` event) when it
    /// cannot be created, so the pod must not start.
    pub(super) fn ensure_cgroup(&mut self, act: &Actor, pod: &Pod, pods: &BTreeMap<String, PodEntry>) -> bool {
        let Some(cm) = self.cm.as_mut() else { return true };
        if self.cgroups_ready.contains(&pod.metadata.uid) {
            return true;
        }
        match cm.ensure_pod(pod, &active_pods(pods)) {
            Ok(()) => {
                self.cgroups_ready.insert(pod.metadata.uid.clone());
                true
            }
            Err(e) => {
                let message = format!("unable to ensure pod container exists: {}", Chain(&e));
                act.event(pod, None, true, "FailedCreatePodContainer", &message);
                false
            }
        }
    }

    /// Makes the pod's volumes ready once per agent run, before its sandbox; false (with
    /// kubelet's `FailedMount` event) while they cannot be, so the pod waits. Once ready,
    /// their files are written again when what they hold changed; a failure then is said
    /// (`FailedMount`) and the files stay as they were, as kubelet's volume manager does.
    pub(super) fn ensure_volumes(&mut self, act: &Actor, pod: &Pod) -> bool {
        let uid = &pod.metadata.uid;
        let ready = self.volumes_ready.contains(uid);
        if pod.spec.volumes.is_empty() || ready && !self.refresh.remove(uid) {
            return true;
        }
        let facts = self.downward_facts(act, pod, None);
        let files = Files { facts: &facts, objects: &self.objects, now: act.clock.now() };
        if ready {
            for e in act.pod_dir(pod).refresh(pod, &files) {
                act.event(pod, None, true, "FailedMount", &e.to_string());
            }
            return true;
        }
        match act.pod_dir(pod).prepare(pod, &files, facts.allocatable.1) {
            Ok(()) => {
                self.volumes_ready.insert(uid.clone());
                true
            }
            Err(e) => {
                act.event(pod, None, true, "FailedMount", &e.to_string());
                false
            }
        }
    }

    /// What the downward API reads besides the pod: the node, the pod's IPs (the node's on
    /// the host network; none before its sandbox), the node's allocatable for unset limits.
    pub(super) fn downward_facts(&self, act: &Actor, pod: &Pod, sandbox_id: Option<&str>) -> downward::Facts {
        let pod_ips = match sandbox_id.filter(|_| !pod.spec.host_network) {
            Some(id) => act.runtime.pod_sandbox_ips(id),
            None => Vec::new(),
        };
        let alloc =
            self.cm.as_ref().map(|cm| cm.node_allocatable()).unwrap_or_else(crate::node::cm::NodeResources::from_proc);
        downward::Facts {
            node_name: act.cfg.node_name.clone(),
            pod_ips,
            host_ip: act.cfg.node_ip.clone(),
            allocatable: (alloc.cpu_millis, alloc.memory),
        }
    }

    /// What pods' volumes hold changed: the ready ones that use it are written again at
    /// their next sync (the others are still being made, from the view as it is then).
    pub(super) fn objects_changed(&mut self, pods: &BTreeMap<String, PodEntry>, changed: &ObjectsChanged) {
        for (uid, entry) in pods {
            if self.volumes_ready.contains(uid) && changed.touches(&crate::node::objects::refs(&entry.pod)) {
                self.refresh.insert(uid.clone());
            }
        }
    }

    /// A pod was removed (and is no longer in `pods`): its cgroup goes.
    pub(super) fn forget_pod(&mut self, uid: &str, pods: &BTreeMap<String, PodEntry>) {
        self.cgroups_ready.remove(uid);
        self.volumes_ready.remove(uid);
        self.refresh.remove(uid);
        if let Some(cm) = self.cm.as_mut() {
            cm.remove_pod(uid, &active_pods(pods));
        }
    }

    /// The container manager's periodic work (orphaned cgroups: those of pods neither
    /// owned nor `desired`); only once every source has reported.
    pub(super) fn on_tick(
        &mut self,
        pods: &BTreeMap<String, PodEntry>,
        desired: &BTreeMap<String, std::sync::Arc<Pod>>,
    ) {
        let Some(cm) = self.cm.as_mut() else { return };
        let known = |uid: &str| pods.contains_key(uid) || desired.contains_key(uid);
        cm.on_tick(&active_pods(pods), &known);
    }
}
