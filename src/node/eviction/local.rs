//! kubelet's `localStorageEviction` (local storage capacity isolation): a pod whose
//! `emptyDir` outgrew its `sizeLimit`, whose writable layers, logs and local volumes
//! outgrew its `ephemeral-storage` limit, or one of whose containers outgrew its own, is
//! evicted at once, whatever the node's thresholds, with kubelet's message.

use super::messages::{container_ephemeral_storage_message, empty_dir_limit_message, pod_ephemeral_storage_message};
use super::{Cause, Eviction};
use crate::api::{Pod, Quantity};
use crate::node::cm::qos::pod_limit;
use crate::node::stats::{FsStats, PodStats};
use std::collections::BTreeMap;
use std::time::Duration;

const EPHEMERAL_STORAGE: &str = "ephemeral-storage";

fn used(fs: Option<&FsStats>) -> u64 {
    fs.and_then(|f| f.used_bytes).unwrap_or(0)
}

fn past(used: u64, limit: &Quantity) -> bool {
    Quantity::from_value(i64::try_from(used).unwrap_or(i64::MAX), true) > *limit
}

/// Why `pod` is past one of its own storage limits, if it is (kubelet checks the
/// `emptyDir`s, then the pod, then each container, and stops at the first).
fn over_limit(pod: &Pod, stats: &PodStats, dedicated_image_fs: bool) -> Option<(Cause, String)> {
    for v in &pod.spec.volumes {
        let Some(limit) = v.empty_dir.as_ref().and_then(|e| e.size_limit.as_ref()) else { continue };
        let Some(vs) = stats.volumes.iter().find(|s| s.name == v.name) else { continue };
        if !limit.is_negative() && !limit.is_zero() && vs.fs.used_bytes.is_some_and(|u| past(u, limit)) {
            return Some((Cause::EmptyDirLimit, empty_dir_limit_message(&v.name, limit)));
        }
    }
    let declared = pod
        .spec
        .init_containers
        .iter()
        .chain(&pod.spec.containers)
        .any(|c| c.resources.limits.contains_key(EPHEMERAL_STORAGE));
    if declared {
        let limit = Quantity::from_value(pod_limit(pod, EPHEMERAL_STORAGE), true);
        if past(used(stats.ephemeral_storage.as_ref()), &limit) {
            return Some((Cause::PodEphemeralStorageLimit, pod_ephemeral_storage_message(&limit)));
        }
    }
    for cs in &stats.containers {
        let Some(limit) = pod
            .spec
            .containers
            .iter()
            .find(|c| c.name == cs.name)
            .and_then(|c| c.resources.limits.get(EPHEMERAL_STORAGE))
            .filter(|l| !l.is_zero())
        else {
            continue;
        };
        // With a dedicated image filesystem the writable layer is not on nodefs.
        let mut usage = used(cs.logs.as_ref());
        if !dedicated_image_fs {
            usage = usage.saturating_add(used(cs.rootfs.as_ref()));
        }
        if past(usage, limit) {
            return Some((Cause::ContainerEphemeralStorageLimit, container_ephemeral_storage_message(&cs.name, limit)));
        }
    }
    None
}

/// Every pod of `pods` past one of its own storage limits, to evict at once with no grace
/// and no event annotations. Pods without stats are skipped.
pub fn local_storage_evictions(pods: &[&Pod], stats: &[PodStats], dedicated_image_fs: bool) -> Vec<Eviction> {
    let by_uid: BTreeMap<&str, &PodStats> = stats.iter().map(|s| (s.uid.as_str(), s)).collect();
    pods.iter()
        .filter_map(|pod| {
            let s = by_uid.get(pod.metadata.uid.as_str())?;
            let (cause, message) = over_limit(pod, s, dedicated_image_fs)?;
            Some(Eviction {
                uid: pod.metadata.uid.clone(),
                pod: pod.key(),
                cause,
                grace: Duration::ZERO,
                message,
                annotations: BTreeMap::new(),
            })
        })
        .collect()
}
