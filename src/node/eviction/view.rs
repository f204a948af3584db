//! What the eviction manager tells the rest of the agent: the node's pressure conditions
//! (`PressureView`, read by admission, `/node` and the Node's status) and the pod it evicts
//! (`EvictPod`, sent to the pod manager).

use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

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

/// One pressure condition: whether it holds, and since when that is so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Condition {
    /// Under pressure.
    pub pressure: bool,
    /// When it last changed (the agent's start before any change).
    pub since: SystemTime,
}

/// The node's pressure conditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pressure {
    /// `MemoryPressure`.
    pub memory: Condition,
    /// `DiskPressure`.
    pub disk: Condition,
    /// `PIDPressure`.
    pub pid: Condition,
}

impl Pressure {
    /// No pressure since `since`.
    pub fn none(since: SystemTime) -> Pressure {
        let c = Condition { pressure: false, since };
        Pressure { memory: c, disk: c, pid: c }
    }
}

/// The last pressure conditions: written by the eviction manager (`fl-stats`), read by the
/// pod manager's admission and the node's conditions. Empty until the manager first decides.
#[derive(Clone, Default)]
pub struct PressureView(Arc<RwLock<Option<Pressure>>>);

impl PressureView {
    /// The conditions, if decided yet.
    pub fn get(&self) -> Option<Pressure> {
        *self.0.read()
    }

    /// Replaces the conditions.
    pub fn set(&self, p: Pressure) {
        *self.0.write() = Some(p);
    }
}
