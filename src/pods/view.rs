//! The runtime's view of the pods: one relist, grouped by pod uid.

use super::ContainerKind;
use crate::node::runtime::{labels, ContainerInfo, ContainerState, SandboxInfo};
use std::collections::HashMap;

/// One relist of the runtime, grouped by pod uid.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// The newest sandbox of each pod.
    pub sandboxes: HashMap<String, SandboxInfo>,
    /// Each pod's older sandboxes (left by a sandbox that died and was replaced), removed
    /// with the pod.
    pub older: HashMap<String, Vec<SandboxInfo>>,
    /// Every container instance of each pod.
    pub containers: HashMap<String, Vec<ContainerInfo>>,
}

impl Snapshot {
    /// Groups a relist: the newest sandbox per pod, containers by their pod uid label.
    pub fn new(sandboxes: Vec<SandboxInfo>, containers: Vec<ContainerInfo>) -> Self {
        let mut snap = Snapshot::default();
        for s in sandboxes {
            let uid = s.config.pod_uid.clone();
            let older = match snap.sandboxes.get(&uid) {
                Some(kept) if kept.created_at >= s.created_at => Some(s),
                _ => snap.sandboxes.insert(uid.clone(), s),
            };
            if let Some(id) = older {
                snap.older.entry(uid).or_default().push(id);
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
            older_sandboxes: self.older.get(uid).map(Vec::as_slice).unwrap_or_default(),
            containers: self.containers.get(uid).map(Vec::as_slice).unwrap_or_default(),
        }
    }
}

/// What the runtime holds of one pod: its sandbox and every container instance.
#[derive(Clone, Copy, Debug, Default)]
pub struct PodView<'a> {
    /// The pod's (newest) sandbox, if it has one.
    pub sandbox: Option<&'a SandboxInfo>,
    /// Its older sandboxes.
    pub older_sandboxes: &'a [SandboxInfo],
    /// Every instance of every container, in no order.
    pub containers: &'a [ContainerInfo],
}

impl<'a> PodView<'a> {
    /// The attempt of the pod's next sandbox: one past the highest it has had (CRI
    /// reserves each sandbox name, which holds the attempt, until the sandbox is removed).
    pub fn next_sandbox_attempt(&self) -> u32 {
        let all = self.sandbox.into_iter().chain(self.older_sandboxes);
        all.map(|s| s.config.attempt + 1).max().unwrap_or(0)
    }

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
    labels::get(&c.config.labels, labels::CONTAINER_KIND) == Some(ContainerKind::Sidecar.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::runtime::SandboxConfig;
    use std::sync::Arc;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn a_pod_keeps_its_newest_sandbox_and_the_older_ones_are_listed_for_removal() {
        let config = Arc::new(SandboxConfig { pod_uid: "u1".into(), ..Default::default() });
        let sandbox = |id: &str, secs: u64| SandboxInfo {
            id: id.into(),
            config: config.clone(),
            created_at: UNIX_EPOCH + Duration::from_secs(secs),
            ready: secs == 3,
            ips: vec![],
        };
        let snap = Snapshot::new(vec![sandbox("b", 2), sandbox("c", 3), sandbox("a", 1)], vec![]);
        let view = snap.pod("u1");
        assert_eq!(view.sandbox.map(|s| s.id.as_str()), Some("c"));
        let mut older: Vec<&str> = view.older_sandboxes.iter().map(|s| s.id.as_str()).collect();
        older.sort();
        assert_eq!(older, ["a", "b"]);
        assert!(snap.pod("u2").older_sandboxes.is_empty());
        assert_eq!(snap.pod("u2").next_sandbox_attempt(), 0);
        let with_attempt = |id: &str, attempt: u32| SandboxInfo {
            config: Arc::new(SandboxConfig { pod_uid: "u3".into(), attempt, ..Default::default() }),
            ..sandbox(id, u64::from(attempt))
        };
        let snap = Snapshot::new(vec![with_attempt("x", 2), with_attempt("y", 0)], vec![]);
        assert_eq!(snap.pod("u3").next_sandbox_attempt(), 3);
    }
}
