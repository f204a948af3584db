//! Where a pod came from (kubelet's `kubernetes.io/config.source`).

use super::types::Pod;

/// Annotation kubelet puts on static pods: where the pod came from.
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// Annotation of a mirror pod (the apiserver's copy of a static pod): the static pod's
/// content hash.
pub const CONFIG_MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// kubelet's `SystemCriticalPriority`: a pod with this priority or more is never evicted
/// and always admitted (`system-cluster-critical` is 2000000000, `system-node-critical`
/// 2000001000).
pub const SYSTEM_CRITICAL_PRIORITY: i64 = 2_000_000_000;

/// A pod's priority (`spec.priority`, which the apiserver fills from its priority class);
/// 0 when unset, as kubelet's `PodPriority`.
pub fn pod_priority(pod: &Pod) -> i64 {
    pod.spec.other.get("priority").and_then(serde_json::Value::as_i64).unwrap_or(0)
}

/// kubelet's `IsStaticPod`: a source annotation other than `api`.
pub fn is_static(pod: &Pod) -> bool {
    pod.metadata.annotations.get(CONFIG_SOURCE_ANNOTATION).is_some_and(|s| s != "api")
}

/// kubelet's `IsMirrorPod`.
pub fn is_mirror(pod: &Pod) -> bool {
    pod.metadata.annotations.contains_key(CONFIG_MIRROR_ANNOTATION)
}

/// kubelet's `IsCriticalPod`: static, mirror, or a priority of `SYSTEM_CRITICAL_PRIORITY` or
/// more. Such pods are admitted whatever the pressure, evicted last, and get no swap.
pub fn is_critical(pod: &Pod) -> bool {
    is_static(pod) || is_mirror(pod) || pod_priority(pod) >= SYSTEM_CRITICAL_PRIORITY
}

/// Where a pod came from, as kubelet's `kubernetes.io/config.source` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PodSource {
    /// A static pod from the manifest directory (`file`).
    File,
    /// A pod the apiserver bound to the node (`api`, kubelet's `ApiserverSource`).
    Api,
}

impl PodSource {
    /// The `CONFIG_SOURCE_ANNOTATION` value.
    pub fn as_str(self) -> &'static str {
        match self {
            PodSource::File => "file",
            PodSource::Api => "api",
        }
    }

    /// The source `pod`'s annotation names, if it names one of these.
    pub fn of(pod: &Pod) -> Option<PodSource> {
        match pod.metadata.annotations.get(CONFIG_SOURCE_ANNOTATION).map(String::as_str) {
            Some("file") => Some(PodSource::File),
            Some("api") => Some(PodSource::Api),
            _ => None,
        }
    }
}
