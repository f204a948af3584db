//! The pods in eviction order, as kubelet ranks them for each signal
//! (`buildSignalToRankFunc`): memory by whether usage exceeds requests, then priority, then
//! usage above requests; PIDs by priority, then process count; disk by whether usage exceeds
//! `ephemeral-storage` requests, then priority, then usage above requests. A pod without
//! stats goes first, as kubelet's. The sort is stable: equal pods keep the order given.
//!
//! Which pods may go at all (`Protection`) is ferrolet's (see the module above): ordinary
//! pods, then static and mirror pods as a last resort, never a pod of system-critical
//! priority.

use super::{is_mirror, is_static, pod_priority, Resource, Signal, SYSTEM_CRITICAL_PRIORITY};
use crate::api::Pod;
use crate::node::cm::qos::pod_request;
use crate::node::stats::{FsStats, PodStats};
use std::cmp::Ordering;

/// A pod that may be evicted, with its stats if the snapshot has them.
#[derive(Clone, Copy, Debug)]
pub struct Candidate<'a> {
    /// The pod.
    pub pod: &'a Pod,
    /// Its usage.
    pub stats: Option<&'a PodStats>,
}

/// Which parts of a pod's disk usage count (kubelet's `fsStatsType`s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskUsage {
    /// The containers' writable layers (`fsStatsRoot`).
    pub root: bool,
    /// The containers' logs (`fsStatsLogs`).
    pub logs: bool,
    /// The pod's local volumes (`fsStatsLocalVolumeSource`).
    pub volumes: bool,
}

/// How pods are ordered for a signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ranking {
    /// `rankMemoryPressure`.
    Memory,
    /// `rankPIDPressure`.
    Pids,
    /// `rankDiskPressureFunc` over these parts, of bytes (`EphemeralStorage`) or `Inodes`.
    Disk(DiskUsage, Resource),
}

/// kubelet's `buildSignalToRankFunc` (no split container filesystem): with a dedicated
/// image filesystem, nodefs counts logs and local volumes and imagefs the writable layers;
/// without one, both count everything.
pub fn ranking(signal: Signal, dedicated_image_fs: bool) -> Ranking {
    let all = DiskUsage { root: true, logs: true, volumes: true };
    let (node, image) = if dedicated_image_fs {
        (DiskUsage { root: false, ..all }, DiskUsage { root: true, logs: false, volumes: false })
    } else {
        (all, all)
    };
    match signal {
        Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => Ranking::Memory,
        Signal::PidAvailable => Ranking::Pids,
        Signal::NodeFsAvailable => Ranking::Disk(node, Resource::EphemeralStorage),
        Signal::NodeFsInodesFree => Ranking::Disk(node, Resource::Inodes),
        Signal::ImageFsAvailable => Ranking::Disk(image, Resource::EphemeralStorage),
        Signal::ImageFsInodesFree => Ranking::Disk(image, Resource::Inodes),
    }
}

/// Whether and when a pod may be evicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Protection {
    /// Any time it ranks first.
    None,
    /// A static or mirror pod: only when no unprotected pod is left to evict.
    LastResort,
    /// A pod of system-critical priority: never.
    Never,
}

/// How `pod` is protected from eviction.
pub fn protection(pod: &Pod) -> Protection {
    if pod_priority(pod) >= SYSTEM_CRITICAL_PRIORITY {
        Protection::Never
    } else if is_static(pod) || is_mirror(pod) {
        Protection::LastResort
    } else {
        Protection::None
    }
}

/// The working set of the pod's cgroup (kubelet's `memoryUsage`: 0 when unknown).
fn memory_usage(s: &PodStats) -> i64 {
    s.memory.map_or(0, |m| i64::try_from(m.working_set_bytes).unwrap_or(i64::MAX))
}

/// A pod's request of `resource` (0 for inodes and PIDs, which pods cannot request).
pub fn request(pod: &Pod, resource: Resource) -> i64 {
    match resource {
        Resource::Memory => pod_request(pod, "memory"),
        Resource::EphemeralStorage => pod_request(pod, "ephemeral-storage"),
        Resource::Inodes | Resource::Pids => 0,
    }
}

/// The volumes of `pod` on the node's disk (kubelet's `localVolumeNames`): `hostPath`,
/// `emptyDir` not in memory, `configMap` and `gitRepo`.
fn local_volume(pod: &Pod, name: &str) -> bool {
    pod.spec.volumes.iter().any(|v| {
        v.name == name
            && (v.host_path.is_some()
                || v.empty_dir.as_ref().is_some_and(|e| e.medium.is_empty())
                || v.config_map.is_some()
                || v.other.contains_key("gitRepo"))
    })
}

fn used(fs: Option<&FsStats>, resource: Resource) -> i64 {
    let v = match resource {
        Resource::Inodes => fs.and_then(|f| f.inodes_used),
        _ => fs.and_then(|f| f.used_bytes),
    };
    v.map_or(0, |v| i64::try_from(v).unwrap_or(i64::MAX))
}

/// kubelet's `podDiskUsage`: the parts `parts` count of `resource` (bytes or inodes).
pub fn disk_usage(pod: &Pod, s: &PodStats, parts: DiskUsage, resource: Resource) -> i64 {
    let mut total = 0i64;
    for c in &s.containers {
        if parts.root {
            total = total.saturating_add(used(c.rootfs.as_ref(), resource));
        }
        if parts.logs {
            total = total.saturating_add(used(c.logs.as_ref(), resource));
        }
    }
    if parts.volumes {
        for v in s.volumes.iter().filter(|v| local_volume(pod, &v.name)) {
            total = total.saturating_add(used(Some(&v.fs), resource));
        }
    }
    total
}

/// `true` before `false` (kubelet's `cmpBool`).
fn first_if(a: bool, b: bool) -> Ordering {
    b.cmp(&a)
}

/// Pods without stats first (kubelet's comparators all start so), else `then`.
fn with_stats(a: &Candidate, b: &Candidate, then: impl Fn(&PodStats, &PodStats) -> Ordering) -> Ordering {
    match (a.stats, b.stats) {
        (Some(x), Some(y)) => then(x, y),
        (x, y) => first_if(x.is_none(), y.is_none()),
    }
}

/// Lower priority first (kubelet's `priority`).
fn by_priority(a: &Candidate, b: &Candidate) -> Ordering {
    pod_priority(a.pod).cmp(&pod_priority(b.pod))
}

/// How the two compare under `ranking`: `Less` is evicted first.
pub fn compare(ranking: Ranking, a: &Candidate, b: &Candidate) -> Ordering {
    match ranking {
        Ranking::Memory => {
            let exceeds = |p: &Pod, s: &PodStats| memory_usage(s) > request(p, Resource::Memory);
            let above = |p: &Pod, s: &PodStats| memory_usage(s) - request(p, Resource::Memory);
            with_stats(a, b, |x, y| first_if(exceeds(a.pod, x), exceeds(b.pod, y)))
                .then_with(|| by_priority(a, b))
                .then_with(|| with_stats(a, b, |x, y| above(b.pod, y).cmp(&above(a.pod, x))))
        }
        Ranking::Pids => by_priority(a, b)
            .then_with(|| with_stats(a, b, |x, y| y.process_count.unwrap_or(0).cmp(&x.process_count.unwrap_or(0)))),
        Ranking::Disk(parts, resource) => {
            let usage = |p: &Pod, s: &PodStats| disk_usage(p, s, parts, resource);
            with_stats(a, b, |x, y| {
                first_if(usage(a.pod, x) > request(a.pod, resource), usage(b.pod, y) > request(b.pod, resource))
            })
            .then_with(|| by_priority(a, b))
            .then_with(|| {
                with_stats(a, b, |x, y| {
                    (usage(b.pod, y) - request(b.pod, resource)).cmp(&(usage(a.pod, x) - request(a.pod, resource)))
                })
            })
        }
    }
}

/// Sorts `pods` into eviction order, first to go first.
pub fn rank(ranking: Ranking, pods: &mut [Candidate]) {
    pods.sort_by(|a, b| compare(ranking, a, b));
}

/// The pod to evict from ranked `pods`: the first unprotected one, else the first static or
/// mirror pod, never one of system-critical priority.
pub fn pick<'a, 'b>(ranked: &'b [Candidate<'a>]) -> Option<&'b Candidate<'a>> {
    [Protection::None, Protection::LastResort]
        .into_iter()
        .find_map(|tier| ranked.iter().find(|c| protection(c.pod) == tier))
}
