//! What a stats snapshot says of each signal (kubelet's `makeSignalObservations`), and the
//! usage at which the kernel should wake the manager for a memory threshold (kubelet's
//! `memoryThresholdNotifier.UpdateThreshold`).

use super::threshold::Threshold;
use super::Signal;
use crate::node::stats::{FsStats, MemoryStats, Snapshot};
use std::collections::BTreeMap;
use std::time::SystemTime;

/// One signal's reading (kubelet's `signalObservation`): bytes or a count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observation {
    /// What is left; below zero when usage is past the capacity.
    pub available: i64,
    /// The whole.
    pub capacity: i64,
    /// When it was read, if the collector said.
    pub time: Option<SystemTime>,
}

/// Every signal read in one snapshot.
pub type Observations = BTreeMap<Signal, Observation>;

/// What the node is, besides its usage: capacities for signals the snapshot has no
/// `available_bytes` for, and the filesystems' layout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeInfo {
    /// The node's memory capacity in bytes (its status's); used when the snapshot's node
    /// memory has no `available_bytes`.
    pub memory_capacity: Option<u64>,
    /// Node allocatable memory (capacity minus reservations); used when the `kubepods`
    /// memory has no `available_bytes`.
    pub allocatable_memory: Option<u64>,
    /// The runtime's image filesystem is another filesystem than `nodefs` (kubelet's
    /// `HasDedicatedImageFs`).
    pub dedicated_image_fs: bool,
    /// The runtime keeps images (CRI); the process runtime has none to remove.
    pub images: bool,
}

/// Saturating `u64` to `i64` (no filesystem or memory is 8 EiB).
fn signed(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Memory as kubelet observes it: `available_bytes` and capacity = available + working set;
/// without `available_bytes`, `capacity` minus the working set.
fn memory(m: Option<&MemoryStats>, capacity: Option<u64>) -> Option<Observation> {
    let m = m?;
    let ws = signed(m.working_set_bytes);
    let (available, capacity) = match (m.available_bytes, capacity) {
        (Some(a), _) => (signed(a), signed(a).saturating_add(ws)),
        (None, Some(c)) => (signed(c).saturating_sub(ws), signed(c)),
        (None, None) => return None,
    };
    Some(Observation { available, capacity, time: m.time })
}

/// A filesystem's bytes and inodes, each when both its numbers are known.
fn fs(f: Option<&FsStats>) -> (Option<Observation>, Option<Observation>) {
    let Some(f) = f else { return (None, None) };
    let pair = |a: Option<u64>, c: Option<u64>| {
        Some(Observation { available: signed(a?), capacity: signed(c?), time: f.time })
    };
    (pair(f.available_bytes, f.capacity_bytes), pair(f.inodes_free, f.inodes))
}

/// kubelet's `makeSignalObservations`: `memory.available` from the node's memory,
/// `allocatableMemory.available` from the `kubepods` cgroup's, `nodefs.*` from the state
/// directory's filesystem, `imagefs.*` from the runtime's image filesystem (none on the
/// process runtime, which has none), `pid.available` from the kernel's limits. A signal the
/// snapshot lacks is left out, and its thresholds are not met.
pub fn observe(snapshot: &Snapshot, node: &NodeInfo) -> Observations {
    let n = &snapshot.node;
    let mut out = Observations::new();
    let mut put = |signal, o: Option<Observation>| {
        if let Some(o) = o {
            out.insert(signal, o);
        }
    };
    put(Signal::MemoryAvailable, memory(n.memory.as_ref(), node.memory_capacity));
    put(Signal::AllocatableMemoryAvailable, memory(n.pods_memory.as_ref(), node.allocatable_memory));
    let (bytes, inodes) = fs(n.fs.as_ref());
    put(Signal::NodeFsAvailable, bytes);
    put(Signal::NodeFsInodesFree, inodes);
    let (bytes, inodes) = fs(n.image_fs.as_ref());
    put(Signal::ImageFsAvailable, bytes);
    put(Signal::ImageFsInodesFree, inodes);
    let pids = n.rlimit.filter(|r| r.max_pid > 0).map(|r| Observation {
        available: signed(r.max_pid) - signed(r.num_of_running_processes),
        capacity: signed(r.max_pid),
        time: r.time,
    });
    put(Signal::PidAvailable, pids);
    out
}

/// The memory cgroup usage at which the working set reaches `threshold` (a
/// `memory.available` threshold on the root cgroup, an `allocatableMemory.available` one on
/// `kubepods`), for a kernel notification (`memory.usage_in_bytes` on cgroup v1): capacity −
/// threshold + inactive file pages (usage − working set), as kubelet's
/// `memoryThresholdNotifier` sets it. `None` for other signals or without the numbers.
pub fn memcg_usage_threshold(threshold: &Threshold, snapshot: &Snapshot) -> Option<u64> {
    let m = match threshold.signal {
        Signal::MemoryAvailable => snapshot.node.memory.as_ref()?,
        Signal::AllocatableMemoryAvailable => snapshot.node.pods_memory.as_ref()?,
        _ => return None,
    };
    let capacity = signed(m.available_bytes?).saturating_add(signed(m.working_set_bytes));
    let inactive_file = signed(m.usage_bytes.saturating_sub(m.working_set_bytes));
    let at = capacity - threshold.value.quantity(capacity).value() + inactive_file;
    u64::try_from(at).ok()
}
