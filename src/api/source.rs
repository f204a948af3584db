//! Where a pod came from (kubelet's `kubernetes.io/config.source`).

use super::types::Pod;

/// Annotation kubelet puts on static pods: where the pod came from.
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// Annotation of a mirror pod (the apiserver's copy of a static pod): the static pod's
/// content hash.
pub const CONFIG_MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
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
