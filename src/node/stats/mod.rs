//! Resource usage of the node, its pods and their containers: one `Snapshot`, collected by
//! `fl-stats` every `PERIOD` from the cgroups ferrolet made, `/proc`, the filesystems and (CRI)
//! the runtime's stats, and read by everything that shows or acts on usage: `/stats/summary`,
//! `/metrics/resource`, `ferrolet top` and the eviction manager. Nothing here is computed per
//! request. The shapes follow kubelet's `stats/v1alpha1` `Summary`.

pub mod cgroup;
pub mod collector;
pub mod disk;
pub mod manager;
pub mod proc;
pub mod target;

use parking_lot::RwLock;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How often the stats are collected (kubelet's housekeeping interval).
pub const PERIOD: Duration = Duration::from_secs(10);

/// CPU usage at `time`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuStats {
    /// When it was read.
    pub time: Option<SystemTime>,
    /// Cumulative CPU time, in core-nanoseconds.
    pub usage_core_nano_seconds: u64,
    /// The rate over the last period, in nanocores; `None` before a second reading.
    pub usage_nano_cores: Option<u64>,
}

/// Memory usage at `time` (kubelet's `MemoryStats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// When it was read.
    pub time: Option<SystemTime>,
    /// The limit (or the node's capacity) minus the working set, when there is a limit.
    pub available_bytes: Option<u64>,
    /// All memory in use, page cache included.
    pub usage_bytes: u64,
    /// Usage minus inactive file pages, never below 0: what the OOM killer and eviction see.
    pub working_set_bytes: u64,
    /// Anonymous and swap cache memory.
    pub rss_bytes: u64,
    /// Page faults.
    pub page_faults: u64,
    /// Major page faults.
    pub major_page_faults: u64,
}

/// A filesystem's, or one user's share of one (kubelet's `FsStats`): the `*_bytes` and inode
/// totals are the filesystem's, `used_bytes` and `inodes_used` the user's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsStats {
    /// When it was read.
    pub time: Option<SystemTime>,
    /// Bytes free for unprivileged users.
    pub available_bytes: Option<u64>,
    /// The filesystem's size.
    pub capacity_bytes: Option<u64>,
    /// Bytes used (by the user; by the filesystem for the node's).
    pub used_bytes: Option<u64>,
    /// Inodes free.
    pub inodes_free: Option<u64>,
    /// The filesystem's inodes.
    pub inodes: Option<u64>,
    /// Inodes used (by the user; by the filesystem for the node's).
    pub inodes_used: Option<u64>,
}

/// One container's usage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerStats {
    /// The container's name in the pod.
    pub name: String,
    /// When the running instance started.
    pub start_time: Option<SystemTime>,
    /// CPU.
    pub cpu: Option<CpuStats>,
    /// Memory.
    pub memory: Option<MemoryStats>,
    /// The writable layer (CRI; `None` on the process runtime, which has none).
    pub rootfs: Option<FsStats>,
    /// Its log files.
    pub logs: Option<FsStats>,
}

/// One volume's usage (the pod's `emptyDir`s).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeStats {
    /// The volume's name in the pod.
    pub name: String,
    /// Its usage, with the filesystem's totals.
    pub fs: FsStats,
}

/// One pod's usage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodStats {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// UID.
    pub uid: String,
    /// The pod's start time (its status's `startTime`).
    pub start_time: Option<SystemTime>,
    /// Its running containers.
    pub containers: Vec<ContainerStats>,
    /// The pod cgroup's CPU.
    pub cpu: Option<CpuStats>,
    /// The pod cgroup's memory.
    pub memory: Option<MemoryStats>,
    /// Its disk-backed volumes.
    pub volumes: Vec<VolumeStats>,
    /// Writable layers + logs + disk-backed volumes (kubelet's `ephemeral-storage`).
    pub ephemeral_storage: Option<FsStats>,
    /// Processes (threads) in the pod's cgroup.
    pub process_count: Option<u64>,
}

/// The node's process id limits (kubelet's `RlimitStats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RlimitStats {
    /// When it was read.
    pub time: Option<SystemTime>,
    /// The most process ids the kernel hands out.
    pub max_pid: u64,
    /// Processes (threads) now.
    pub num_of_running_processes: u64,
}

/// The node's usage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// The node's name.
    pub node_name: String,
    /// When the node booted.
    pub start_time: Option<SystemTime>,
    /// The whole machine's CPU.
    pub cpu: Option<CpuStats>,
    /// The whole machine's memory; `available_bytes` is capacity minus working set.
    pub memory: Option<MemoryStats>,
    /// `nodefs`: the filesystem of the state directory.
    pub fs: Option<FsStats>,
    /// `imagefs`: the runtime's image filesystem (CRI); `None` on the process runtime.
    pub image_fs: Option<FsStats>,
    /// Process ids.
    pub rlimit: Option<RlimitStats>,
    /// The `kubepods` cgroup's CPU (kubelet's system container `pods`).
    pub pods_cpu: Option<CpuStats>,
    /// The `kubepods` cgroup's memory; `available_bytes` is node allocatable minus working set.
    pub pods_memory: Option<MemoryStats>,
}

/// Everything one collection found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// When the collection ended.
    pub time: Option<SystemTime>,
    /// The node.
    pub node: NodeStats,
    /// Every pod the agent runs.
    pub pods: Vec<PodStats>,
}

/// The last snapshot: written by `fl-stats`, read by the APIs and the CLI's `top`.
#[derive(Clone, Default)]
pub struct StatsView(Arc<RwLock<Option<Arc<Snapshot>>>>);

impl StatsView {
    /// The last snapshot, if one was collected.
    pub fn get(&self) -> Option<Arc<Snapshot>> {
        self.0.read().clone()
    }

    /// Replaces the snapshot with one already shared (the stats thread's, which it also hands
    /// to what runs after a collection).
    pub fn publish(&self, s: Arc<Snapshot>) {
        *self.0.write() = Some(s);
    }
}
