//! What the eviction manager tells the rest of the agent: the node's pressure conditions
//! (`PressureView`, read by admission, `/node` and the Node's status) and the pod it evicts
//! (`EvictPod`, sent to the pod manager).

use super::NodeConditions;
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// A pod the eviction manager stops: it ends `Failed` with reason `Evicted`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvictPod {
    /// The pod's uid.
    pub uid: String,
    /// Its stop's grace period: 0 for a hard threshold.
    pub grace: Duration,
    /// kubelet's message (`The node was low on resource: memory. …`).
    pub message: String,
    /// kubelet's annotations on the eviction event (`offending_containers`, …).
    pub annotations: BTreeMap<String, String>,
}

/// The last pressure conditions: written by the eviction manager (`fl-stats`), read by the
/// pod manager's admission and the node's conditions. Empty until the manager first decides.
#[derive(Clone, Default)]
pub struct PressureView(Arc<RwLock<Option<NodeConditions>>>);

impl PressureView {
    /// The conditions, if decided yet.
    pub fn get(&self) -> Option<NodeConditions> {
        *self.0.read()
    }

    /// Replaces the conditions.
    pub fn set(&self, p: NodeConditions) {
        *self.0.write() = Some(p);
    }
}
