//! What every part of the pod manager acts through: its settings, the runtime (a call that
//! changes it is noted, so the sync relists before it publishes), the event recorder, the
//! clock and the status cache.

use super::PodManagerConfig;
use crate::api::Pod;
use crate::base::clock::Clock;
use crate::node::events::{EventRecorder, Reference, NORMAL, WARNING};
use crate::node::runtime::ContainerRuntime;
use crate::node::status::StatusCache;
use crate::pods::dir::PodDir;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// The pod manager's hands: shared by every part, owned by none of them.
pub(super) struct Actor {
    /// The settings.
    pub(super) cfg: PodManagerConfig,
    /// The runtime, for calls that only read it (`mutate` for the others).
    pub(super) runtime: Arc<dyn ContainerRuntime>,
    /// Where statuses are published (and read back: start times, pod IPs, phases).
    pub(super) statuses: StatusCache,
    /// Where events go.
    pub(super) recorder: EventRecorder,
    /// Where the time comes from (a fake in tests).
    pub(super) clock: Arc<dyn Clock>,
    /// Set when this pass changed something in the runtime, so statuses need a relist.
    acted: bool,
}

impl Actor {
    /// Hands over `runtime`, publishing into `statuses`, reading the time from `clock`.
    pub(super) fn new(
        cfg: PodManagerConfig,
        runtime: Arc<dyn ContainerRuntime>,
        statuses: StatusCache,
        recorder: EventRecorder,
        clock: Arc<dyn Clock>,
    ) -> Actor {
        Actor { cfg, runtime, statuses, recorder, clock, acted: false }
    }

    /// The runtime, for a call that changes it.
    pub(super) fn mutate(&mut self) -> &dyn ContainerRuntime {
        self.acted = true;
        &*self.runtime
    }

    /// Whether the runtime was changed since the last call.
    pub(super) fn take_acted(&mut self) -> bool {
        std::mem::take(&mut self.acted)
    }

    /// Records an event on the pod, or on one of its containers.
    pub(super) fn event(&self, pod: &Pod, container: Option<&str>, warning: bool, reason: &str, message: &str) {
        let obj = match container {
            Some(c) => Reference::container(pod, c),
            None => Reference::pod(pod),
        };
        self.recorder.event(&obj, if warning { WARNING } else { NORMAL }, reason, message);
    }

    /// Records a Warning event on the pod with annotations (kubelet's `AnnotatedEventf`).
    pub(super) fn annotated_event(
        &self,
        pod: &Pod,
        annotations: BTreeMap<String, String>,
        reason: &str,
        message: &str,
    ) {
        self.recorder.annotated_event(&Reference::pod(pod), annotations, WARNING, reason, message);
    }

    /// Records a Warning event on the node.
    pub(super) fn node_warning(&self, reason: &str, message: &str) {
        self.recorder.event(&Reference::node(&self.cfg.node_name), WARNING, reason, message);
    }

    /// The pod's own directory (`pods::dir::PodDir`).
    pub(super) fn pod_dir(&self, pod: &Pod) -> PodDir {
        PodDir::new(&self.cfg.pods_root, &pod.metadata.uid)
    }

    /// The directory of a pod's container logs.
    pub(super) fn log_dir(&self, pod: &Pod) -> PathBuf {
        pod_log_dir(&self.cfg.log_root, pod)
    }
}

/// The directory of a pod's container logs under `log_root`: `<namespace>_<name>_<uid>`, as
/// kubelet's `/var/log/pods`; each container's in its own directory there.
pub(super) fn pod_log_dir(log_root: &std::path::Path, pod: &Pod) -> PathBuf {
    log_root.join(format!("{}_{}_{}", pod.metadata.namespace, pod.metadata.name, pod.metadata.uid))
}
