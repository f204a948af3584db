//! Usage as a runtime reports it itself (CRI's `ListContainerStats` and `ListPodSandboxStats`),
//! for what the cgroup files cannot give: a container's writable layer, and CPU and memory
//! where the agent cannot read the cgroups (enforcement off, the runtime's own cgroup
//! parent). The process runtime reports nothing: the agent reads its cgroups.

use std::path::PathBuf;
use std::time::SystemTime;

/// CPU usage (CRI's `CpuUsage`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuntimeCpu {
    /// When the runtime read it.
    pub time: Option<SystemTime>,
    /// Cumulative CPU time, in core-nanoseconds.
    pub usage_core_nano_seconds: u64,
    /// The runtime's own rate, in nanocores, when it gives one.
    pub usage_nano_cores: Option<u64>,
}

/// Memory usage (CRI's `MemoryUsage`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuntimeMemory {
    /// When the runtime read it.
    pub time: Option<SystemTime>,
    /// Usage minus inactive file pages.
    pub working_set_bytes: u64,
    /// The limit minus the working set, when there is a limit.
    pub available_bytes: Option<u64>,
    /// All memory in use.
    pub usage_bytes: Option<u64>,
    /// Anonymous and swap cache memory.
    pub rss_bytes: Option<u64>,
    /// Page faults.
    pub page_faults: Option<u64>,
    /// Major page faults.
    pub major_page_faults: Option<u64>,
}

/// A container's writable layer (CRI's `FilesystemUsage`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeFsUsage {
    /// When the runtime read it.
    pub time: Option<SystemTime>,
    /// The filesystem it is on (its mount point, as the runtime names it).
    pub mount_point: PathBuf,
    /// Bytes the layer uses.
    pub used_bytes: Option<u64>,
    /// Inodes the layer uses.
    pub inodes_used: Option<u64>,
}

/// One container's usage as the runtime reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeContainerStats {
    /// The runtime's container id.
    pub id: String,
    /// CPU.
    pub cpu: Option<RuntimeCpu>,
    /// Memory.
    pub memory: Option<RuntimeMemory>,
    /// The writable layer.
    pub writable_layer: Option<RuntimeFsUsage>,
}

/// One pod sandbox's usage as the runtime reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimePodStats {
    /// The sandbox id.
    pub sandbox_id: String,
    /// The pod's uid (the sandbox's metadata).
    pub pod_uid: String,
    /// CPU of the whole sandbox.
    pub cpu: Option<RuntimeCpu>,
    /// Memory of the whole sandbox.
    pub memory: Option<RuntimeMemory>,
    /// Processes in the sandbox.
    pub process_count: Option<u64>,
}
