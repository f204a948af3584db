//! What the collector is told to measure: the pods the agent runs, as plain data. `node`
//! cannot see the pod manager (layering), so the `pods` layer makes these (`pods::stats`)
//! from what the pod manager publishes, and the agent hands the stats thread a source of them.

use std::path::PathBuf;
use std::time::SystemTime;

/// One running container of a pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerTarget {
    /// Its name in the pod.
    pub name: String,
    /// The runtime's id of the running instance (without the `containerd://` scheme).
    pub id: String,
    /// When the running instance started.
    pub start_time: Option<SystemTime>,
    /// Its cgroup (cgroupfs path), when the agent knows where it is.
    pub cgroup: Option<String>,
    /// The directory of its log files (every instance's and their rotations).
    pub log_dir: Option<PathBuf>,
}

/// One disk-backed volume of a pod (an `emptyDir` without `medium: Memory`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeTarget {
    /// Its name in the pod.
    pub name: String,
    /// Its directory on the node.
    pub path: PathBuf,
}

/// One pod the agent runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodTarget {
    /// UID.
    pub uid: String,
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Its status's `startTime`.
    pub start_time: Option<SystemTime>,
    /// The pod's cgroup (cgroupfs path), when pod cgroups are on.
    pub cgroup: Option<String>,
    /// Its running containers (init and sidecar containers too).
    pub containers: Vec<ContainerTarget>,
    /// Its disk-backed volumes.
    pub volumes: Vec<VolumeTarget>,
}

/// Where the stats thread gets the pods to measure from, at each collection.
pub type TargetSource = Box<dyn Fn() -> Vec<PodTarget> + Send>;
