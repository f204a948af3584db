//! The runtime's view of the pods: one relist, grouped by pod uid.

use super::{ContainerKind, CONTAINER_KIND_LABEL};
use crate::runtime::{labels, ContainerInfo, ContainerState, SandboxInfo};
use std::collections::HashMap;

/// One relist of the runtime, grouped by pod uid.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// The newest sandbox of each pod.
    pub sandboxes: HashMap<String, SandboxInfo>,
    /// Every container instance of each pod.
    pub containers: HashMap<String, Vec<ContainerInfo>>,
}

impl Snapshot {
    /// Groups a relist: the newest sandbox per pod, containers by their pod uid label.
    pub fn new(sandboxes: Vec<SandboxInfo>, containers: Vec<ContainerInfo>) -> Self {
        let mut snap = Snapshot::default();
        for s in sandboxes {
            let keep = snap.sandboxes.get(&s.config.pod_uid).map_or(true, |old| old.created_at < s.created_at);
            if keep {
                snap.sandboxes.insert(s.config.pod_uid.clone(), s);
            }
        }
        for c in containers {
            let uid = c.config.labels.get(labels::POD_UID).cloned().unwrap_or_default();
            snap.containers.entry(uid).or_default().push(c);
        }
        snap
    }

    /// What the runtime holds of one pod.
    pub fn pod(&self, uid: &str) -> PodView<'_> {
        PodView {
            sandbox: self.sandboxes.get(uid),
            containers: self.containers.get(uid).map(Vec::as_slice).unwrap_or_default(),
        }
    }
}

/// What the runtime holds of one pod: its sandbox and every container instance.
#[derive(Clone, Copy, Debug, Default)]
pub struct PodView<'a> {
    /// The pod's sandbox, if it has one.
    pub sandbox: Option<&'a SandboxInfo>,
    /// Every instance of every container, in no order.
    pub containers: &'a [ContainerInfo],
}

impl<'a> PodView<'a> {
    /// Instances of one container, newest first.
    pub fn instances(&self, name: &str) -> Vec<&'a ContainerInfo> {
        let mut v: Vec<&ContainerInfo> = self.containers.iter().filter(|c| c.config.name == name).collect();
        v.sort_by_key(|c| std::cmp::Reverse((c.config.attempt, c.created_at)));
        v
    }

    /// The newest instance of one container (the first of `instances`, found without
    /// collecting them: it is asked for every container on every sync).
    pub fn latest(&self, name: &str) -> Option<&'a ContainerInfo> {
        // `min_by_key` keeps the first of equal keys, as the stable sort in `instances` does.
        self.containers
            .iter()
            .filter(|c| c.config.name == name)
            .min_by_key(|c| std::cmp::Reverse((c.config.attempt, c.created_at)))
    }

    /// Instances whose process runs.
    pub fn running(&self) -> impl Iterator<Item = &'a ContainerInfo> {
        self.containers.iter().filter(|c| c.state == ContainerState::Running)
    }
}

/// Whether a runtime container was started as a sidecar (from its label, so it holds for
/// containers found after an agent restart).
pub fn is_sidecar(c: &ContainerInfo) -> bool {
    c.config.labels.get(CONTAINER_KIND_LABEL).map(String::as_str) == Some(ContainerKind::Sidecar.as_str())
}
