//! Mirror pods: the apiserver's copy of a static pod, so `kubectl get pods` shows it, as
//! kubelet makes them. The mirror carries the static pod's spec and metadata, the
//! `kubernetes.io/config.mirror` annotation (the static pod's content hash), and the Node
//! as its owner; its uid is the apiserver's. A mirror whose hash no longer matches is an old
//! version: deleted and made again.

use crate::api::manifest::CONFIG_HASH_ANNOTATION;
use crate::api::Pod;

/// The annotation that makes a pod a mirror pod.
pub const MIRROR_ANNOTATION: &str = crate::api::source::CONFIG_MIRROR_ANNOTATION;

/// The mirror pod of static pod `pod` on node `node` (uid `node_uid`).
pub fn mirror_pod(pod: &Pod, node: &str, node_uid: &str) -> serde_json::Value {
    let mut m = pod.clone();
    let hash = pod.metadata.annotations.get(CONFIG_HASH_ANNOTATION).cloned().unwrap_or_default();
    m.metadata.annotations.insert(MIRROR_ANNOTATION.into(), hash);
    // The apiserver gives the mirror its own uid and resourceVersion; no status is created.
    m.metadata.uid.clear();
    m.metadata.resource_version.clear();
    m.metadata.deletion_timestamp = None;
    m.metadata.deletion_grace_period_seconds = None;
    m.status = Default::default();
    let mut v = serde_json::to_value(&m).unwrap_or_default();
    if !node_uid.is_empty() {
        v["metadata"]["ownerReferences"] = serde_json::json!([{
            "apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": true
        }]);
    }
    v
}

/// Whether `mirror` (as the apiserver has it) is the mirror of the current `pod`.
pub fn is_mirror_of(mirror: &Pod, pod: &Pod) -> bool {
    let hash = |p: &Pod, key: &str| p.metadata.annotations.get(key).cloned();
    hash(mirror, MIRROR_ANNOTATION).is_some() && hash(mirror, MIRROR_ANNOTATION) == hash(pod, CONFIG_HASH_ANNOTATION)
}

/// What keeping the mirrors right takes: mirrors to delete (of an old version, or of a
/// static pod that is gone) and static pods whose mirror to create.
#[derive(Debug, Default, PartialEq)]
pub struct MirrorPlan<'a> {
    /// Mirrors to delete.
    pub delete: Vec<&'a Pod>,
    /// Static pods without a mirror (one being deleted counts as there until it is gone).
    pub create: Vec<&'a Pod>,
}

/// The plan for static pods `statics` and the apiserver's mirrors `mirrors`.
pub fn mirror_plan<'a>(statics: &'a [Pod], mirrors: &'a [Pod]) -> MirrorPlan<'a> {
    let delete = mirrors
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .filter(|m| !statics.iter().any(|p| p.key() == m.key() && is_mirror_of(m, p)))
        .collect();
    let create = statics
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| !mirrors.iter().any(|m| m.key() == p.key()))
        .collect();
    MirrorPlan { delete, create }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::manifest::decode_pods;

    fn static_pod() -> Pod {
        let p = decode_pods("web.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: busybox\n").remove(0).unwrap();
        crate::api::manifest::as_static_pod(p, "edge1", std::path::Path::new("/etc/ferrolet/manifests/web.yaml"))
    }

    #[test]
    fn a_mirror_is_the_static_pod_marked_with_its_hash_and_owned_by_the_node() {
        let p = static_pod();
        let m = mirror_pod(&p, "edge1", "node-uid");
        assert_eq!(m["metadata"]["name"], "web-edge1");
        assert_eq!(m["metadata"]["annotations"][MIRROR_ANNOTATION], p.metadata.annotations[CONFIG_HASH_ANNOTATION]);
        assert_eq!(m["metadata"]["ownerReferences"][0]["kind"], "Node");
        assert!(m["metadata"].get("uid").is_none(), "the apiserver's own");
        assert_eq!(m["spec"]["nodeName"], "edge1");
        let stored: Pod = serde_json::from_value(m).unwrap();
        assert!(is_mirror_of(&stored, &p));
        let mut changed = p.clone();
        changed.metadata.annotations.insert(CONFIG_HASH_ANNOTATION.into(), "other".into());
        assert!(!is_mirror_of(&stored, &changed), "an old version");
        assert!(!is_mirror_of(&p, &p), "the static pod itself is no mirror");
    }

    #[test]
    fn the_plan_deletes_old_and_orphaned_mirrors_and_creates_missing_ones() {
        let web = static_pod();
        let stored = |p: &Pod| -> Pod { serde_json::from_value(mirror_pod(p, "edge1", "node-uid")).unwrap() };
        let current = stored(&web);
        let mut old = current.clone();
        old.metadata.annotations.insert(MIRROR_ANNOTATION.into(), "old-hash".into());
        let mut orphan = current.clone();
        orphan.metadata.name = "gone-edge1".into();
        let statics = vec![web.clone()];

        assert_eq!(mirror_plan(&statics, std::slice::from_ref(&current)), MirrorPlan::default(), "all is right");
        let mirrors = vec![old.clone(), orphan.clone()];
        let plan = mirror_plan(&statics, &mirrors);
        assert_eq!(plan.delete, vec![&old, &orphan]);
        assert!(plan.create.is_empty(), "the old version must be gone first");
        assert_eq!(mirror_plan(&statics, &[]).create, vec![&web]);
        let mut going = old.clone();
        going.metadata.deletion_timestamp = Some(crate::api::Time(std::time::SystemTime::now()));
        assert_eq!(mirror_plan(&statics, std::slice::from_ref(&going)), MirrorPlan::default(), "wait for it to go");
    }
}
