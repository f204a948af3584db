//! The eviction manager's decisions, as kubelet's `pkg/kubelet/eviction` makes them, over plain
//! data: no threads, no I/O. The executor (on `fl-stats`) hands in each `stats::Snapshot`, the
//! node's capacities and the active pods, acts on the `Decision` it gets back (reclaim
//! node-level resources, stop one pod, record events), and reads the node's pressure
//! conditions and the admission verdicts from the same state.
//!
//! - `threshold`: the signals' thresholds, parsed and checked as `ParseThresholdConfig`.
//! - `signals`: what a snapshot says of each signal (`makeSignalObservations`).
//! - `rank`: the pods in eviction order (`rankMemoryPressure`, `rankPIDPressure`,
//!   `rankDiskPressureFunc`), and which pods may go at all.
//! - `messages`: kubelet's words, byte for byte: eviction messages and annotations, node
//!   conditions, events, admission.
//! - `local`: pods past their own storage limits (`localStorageEviction`).
//! - `decide`: kubelet's `synchronize` as one pure step, `EvictionState::synchronize`.
//! - `admit`: kubelet's `Admit` under pressure.
//!
//! Where ferrolet differs from kubelet, on purpose:
//! - kubelet never evicts a static or mirror pod (`IsCriticalPod`). Here they go last: only
//!   when every pod left to rank is one, since on a standalone node every pod is static and
//!   the kernel's OOM killer would otherwise choose; and a static pod past its own storage
//!   limits is evicted like any other. A pod with a priority of `SYSTEM_CRITICAL_PRIORITY`
//!   or more is never evicted, as kubelet's.
//! - On the process runtime there are no images and no image filesystem: `imagefs.*` are not
//!   observed (their thresholds never fire), and nodefs pressure reclaims dead containers
//!   only. kubelet would observe imagefs as nodefs there, so its default
//!   `imagefs.available<15%` would evict pods at 15 % free with nothing to reclaim.
//! - `max_pod_grace_period = 0` means the pod's own grace period; kubelet's 0 means none
//!   (its minimum of 2 s).

pub mod admit;
pub mod decide;
pub mod local;
pub mod manager;
pub mod memcg;
pub mod messages;
pub mod rank;
pub mod signals;
pub mod threshold;
pub mod view;

#[cfg(test)]
mod tests;

pub use admit::{admit, Admission};
pub use decide::{Decision, EvictionState, Inputs, NodeEvent, Reclaim, Settings};
pub use signals::{observe, NodeInfo, Observation, Observations};
pub use threshold::{parse_thresholds, Threshold, ThresholdError, ThresholdTable, ThresholdValue};

/// The reason of an evicted pod's status, of its event and of a refused admission.
pub const REASON: &str = "Evicted";
/// The reason of the `DisruptionTarget` condition an evicted pod gets (cluster mode).
pub const DISRUPTION_REASON: &str = "TerminationByKubelet";
/// The event annotation naming the containers that used more than they requested.
pub const OFFENDING_CONTAINERS_KEY: &str = "offending_containers";
/// The event annotation with those containers' usage, in the same order.
pub const OFFENDING_CONTAINERS_USAGE_KEY: &str = "offending_containers_usage";
/// The event annotation naming the starved resource.
pub const STARVED_RESOURCE_KEY: &str = "starved_resource";
pub use crate::api::source::{is_critical, is_mirror, is_static, pod_priority, SYSTEM_CRITICAL_PRIORITY};
/// The annotation of a mirror pod (the apiserver's copy of a static pod).
pub const MIRROR_ANNOTATION: &str = crate::api::source::CONFIG_MIRROR_ANNOTATION;
/// The taint a pod tolerates to be admitted under memory pressure though BestEffort.
pub const MEMORY_PRESSURE_TAINT: &str = "node.kubernetes.io/memory-pressure";

/// An eviction signal (kubelet's `evictionapi.Signal`), in the order thresholds are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Signal {
    /// `memory.available`: the node's memory capacity minus its working set.
    MemoryAvailable,
    /// `allocatableMemory.available`: node allocatable minus the `kubepods` working set.
    AllocatableMemoryAvailable,
    /// `nodefs.available`: bytes free on the state directory's filesystem.
    NodeFsAvailable,
    /// `nodefs.inodesFree`: inodes free there.
    NodeFsInodesFree,
    /// `imagefs.available`: bytes free on the runtime's image filesystem.
    ImageFsAvailable,
    /// `imagefs.inodesFree`: inodes free there.
    ImageFsInodesFree,
    /// `pid.available`: the kernel's process id limit minus the processes running.
    PidAvailable,
}

impl Signal {
    /// Every signal, in order.
    pub const ALL: [Signal; 7] = [
        Signal::MemoryAvailable,
        Signal::AllocatableMemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::PidAvailable,
    ];

    /// kubelet's name of the signal.
    pub const fn as_str(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::AllocatableMemoryAvailable => "allocatableMemory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    /// The signal kubelet names `s`, if it is one.
    pub fn parse(s: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|sig| sig.as_str() == s)
    }

    /// The resource it measures (kubelet's `signalToResource`).
    pub const fn resource(self) -> Resource {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => Resource::Memory,
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => Resource::EphemeralStorage,
            Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => Resource::Inodes,
            Signal::PidAvailable => Resource::Pids,
        }
    }

    /// The node condition it drives (kubelet's `signalToNodeCondition`).
    pub const fn pressure(self) -> Pressure {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => Pressure::Memory,
            Signal::PidAvailable => Pressure::Pid,
            _ => Pressure::Disk,
        }
    }

    /// Whether it is one of the image filesystem's.
    pub const fn is_image_fs(self) -> bool {
        matches!(self, Signal::ImageFsAvailable | Signal::ImageFsInodesFree)
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A starved resource, as kubelet names it in messages and annotations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    /// `memory`, in bytes.
    Memory,
    /// `ephemeral-storage`, in bytes.
    EphemeralStorage,
    /// `inodes`, a count.
    Inodes,
    /// `pids`, a count.
    Pids,
}

impl Resource {
    /// kubelet's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Resource::Memory => "memory",
            Resource::EphemeralStorage => "ephemeral-storage",
            Resource::Inodes => "inodes",
            Resource::Pids => "pids",
        }
    }

    /// Whether amounts of it are bytes (printed in binary SI: `100Mi`), not counts.
    pub const fn is_bytes(self) -> bool {
        matches!(self, Resource::Memory | Resource::EphemeralStorage)
    }
}

impl std::fmt::Display for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a pod is evicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// A threshold of this signal was met.
    Threshold(Signal),
    /// An `emptyDir` outgrew its `sizeLimit`.
    EmptyDirLimit,
    /// The pod's writable layers, logs and local volumes outgrew its `ephemeral-storage`
    /// limit.
    PodEphemeralStorageLimit,
    /// A container's writable layer and logs outgrew its `ephemeral-storage` limit.
    ContainerEphemeralStorageLimit,
}

impl Cause {
    /// kubelet's `eviction_signal` label of `kubelet_evictions`: the signal, or
    /// `emptydirfs.limit`, `ephemeralpodfs.limit`, `ephemeralcontainerfs.limit`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Cause::Threshold(s) => s.as_str(),
            Cause::EmptyDirLimit => "emptydirfs.limit",
            Cause::PodEphemeralStorageLimit => "ephemeralpodfs.limit",
            Cause::ContainerEphemeralStorageLimit => "ephemeralcontainerfs.limit",
        }
    }
}

/// A pod to evict (kubelet's `evictPod`): stopped with `grace`, its status `Failed` with
/// `reason` and `message`, an `Evicted` Warning event with `annotations`, and in cluster
/// mode a `DisruptionTarget` condition (reason `DISRUPTION_REASON`, the same message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eviction {
    /// The pod's uid.
    pub uid: String,
    /// `namespace/name`, for logs.
    pub pod: String,
    /// Why.
    pub cause: Cause,
    /// Its grace period: 0 for a hard threshold or a limit, else its own capped by
    /// `max_pod_grace_period`.
    pub grace: std::time::Duration,
    /// kubelet's message.
    pub message: String,
    /// The event's annotations (none for a limit).
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// A node pressure condition, in the order the node reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pressure {
    /// `MemoryPressure`.
    Memory,
    /// `DiskPressure`.
    Disk,
    /// `PIDPressure`.
    Pid,
}

impl Pressure {
    /// Every condition, in the node's order.
    pub const ALL: [Pressure; 3] = [Pressure::Memory, Pressure::Disk, Pressure::Pid];

    /// The condition's type.
    pub const fn as_str(self) -> &'static str {
        match self {
            Pressure::Memory => "MemoryPressure",
            Pressure::Disk => "DiskPressure",
            Pressure::Pid => "PIDPressure",
        }
    }
}

impl std::fmt::Display for Pressure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One pressure condition: whether it holds, and since when that last changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConditionState {
    /// Under pressure.
    pub pressure: bool,
    /// The last transition (at first: when the eviction manager started).
    pub since: std::time::SystemTime,
}

/// The node's three pressure conditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeConditions {
    /// `MemoryPressure`.
    pub memory: ConditionState,
    /// `DiskPressure`.
    pub disk: ConditionState,
    /// `PIDPressure`.
    pub pid: ConditionState,
}

impl NodeConditions {
    /// No pressure at all, since `since`.
    pub fn calm(since: std::time::SystemTime) -> NodeConditions {
        let c = ConditionState { pressure: false, since };
        NodeConditions { memory: c, disk: c, pid: c }
    }

    /// One condition.
    pub fn get(&self, p: Pressure) -> ConditionState {
        match p {
            Pressure::Memory => self.memory,
            Pressure::Disk => self.disk,
            Pressure::Pid => self.pid,
        }
    }

    fn get_mut(&mut self, p: Pressure) -> &mut ConditionState {
        match p {
            Pressure::Memory => &mut self.memory,
            Pressure::Disk => &mut self.disk,
            Pressure::Pid => &mut self.pid,
        }
    }

    /// The conditions that hold, in the node's order.
    pub fn active(&self) -> Vec<Pressure> {
        Pressure::ALL.into_iter().filter(|p| self.get(*p).pressure).collect()
    }
}
