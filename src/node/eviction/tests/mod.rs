//! Unit tests of the eviction decisions; kubelet's `eviction/helpers_test.go` and
//! `eviction_manager_test.go` cases are the checklist.

mod admit;
mod decide;
mod messages;
mod rank;
mod signals;
mod threshold;

use crate::api::{Pod, Quantity};
use crate::node::stats::{ContainerStats, FsStats, MemoryStats, PodStats, VolumeStats};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// `n` seconds after the epoch.
fn at(n: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(n)
}

/// The value of a quantity written as kubelet's tests write it.
fn v(q: &str) -> u64 {
    Quantity::parse(q).unwrap().value() as u64
}

/// kubelet's `newResourceList(cpu, memory, disk)` as a JSON object; empty strings are left out.
fn resources(cpu: &str, memory: &str, disk: &str) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    for (k, q) in [("cpu", cpu), ("memory", memory), ("ephemeral-storage", disk)] {
        if !q.is_empty() {
            m.insert(k.into(), q.into());
        }
    }
    serde_json::Value::Object(m)
}

/// kubelet's `newPod`: one container named as the pod, with `requests` and `limits`
/// (`resources(..)`), a priority when `Some`, an `emptyDir` named `local-volume` when
/// `volume`, uid = name, from the apiserver.
fn pod(
    name: &str,
    priority: Option<i64>,
    requests: serde_json::Value,
    limits: serde_json::Value,
    volume: bool,
) -> Arc<Pod> {
    let mut spec = serde_json::json!({
        "containers": [{"name": name, "image": "busybox", "resources": {"requests": requests, "limits": limits}}],
    });
    if let Some(p) = priority {
        spec["priority"] = p.into();
    }
    if volume {
        spec["volumes"] = serde_json::json!([{"name": "local-volume", "emptyDir": {}}]);
    }
    let value = serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "uid": name,
                     "annotations": {"kubernetes.io/config.source": "api"}},
        "spec": spec,
    });
    Arc::new(crate::api::from_value(&value).unwrap())
}

/// A BestEffort pod of default priority.
fn best_effort(name: &str) -> Arc<Pod> {
    pod(name, None, resources("", "", ""), resources("", "", ""), false)
}

/// `p` with `annotation` set.
fn annotated(p: &Arc<Pod>, key: &str, value: &str) -> Arc<Pod> {
    let mut p = (**p).clone();
    p.metadata.annotations.insert(key.into(), value.into());
    Arc::new(p)
}

fn stats_of(p: &Pod) -> PodStats {
    PodStats {
        name: p.metadata.name.clone(),
        namespace: p.metadata.namespace.clone(),
        uid: p.metadata.uid.clone(),
        ..Default::default()
    }
}

fn memory(ws: u64) -> MemoryStats {
    MemoryStats { working_set_bytes: ws, usage_bytes: ws, ..Default::default() }
}

/// kubelet's `newPodMemoryStats`: the pod and each of its containers use `ws`.
fn memory_stats(p: &Pod, ws: &str) -> PodStats {
    let ws = v(ws);
    PodStats {
        memory: Some(memory(ws)),
        containers: p
            .spec
            .containers
            .iter()
            .map(|c| ContainerStats { name: c.name.clone(), memory: Some(memory(ws)), ..Default::default() })
            .collect(),
        ..stats_of(p)
    }
}

fn used_bytes(b: u64) -> FsStats {
    FsStats { used_bytes: Some(b), ..Default::default() }
}

fn used_inodes(n: u64) -> FsStats {
    FsStats { inodes_used: Some(n), ..Default::default() }
}

/// kubelet's `newPodDiskStats` / `newPodInodeStats`: each container's writable layer and
/// logs, and each local volume, use the given amounts.
fn fs_stats(p: &Pod, root: &str, logs: &str, per_volume: &str, fs: fn(u64) -> FsStats) -> PodStats {
    PodStats {
        containers: p
            .spec
            .containers
            .iter()
            .map(|c| ContainerStats {
                name: c.name.clone(),
                rootfs: Some(fs(v(root))),
                logs: Some(fs(v(logs))),
                ..Default::default()
            })
            .collect(),
        volumes: p
            .spec
            .volumes
            .iter()
            .map(|vol| VolumeStats { name: vol.name.clone(), fs: fs(v(per_volume)) })
            .collect(),
        ..stats_of(p)
    }
}

fn disk_stats(p: &Pod, root: &str, logs: &str, per_volume: &str) -> PodStats {
    fs_stats(p, root, logs, per_volume, used_bytes)
}

fn inode_stats(p: &Pod, root: &str, logs: &str, per_volume: &str) -> PodStats {
    fs_stats(p, root, logs, per_volume, used_inodes)
}

/// kubelet's `newPodProcessStats`.
fn process_stats(p: &Pod, n: u64) -> PodStats {
    PodStats { process_count: Some(n), ..stats_of(p) }
}
