//! The pods bound to this node, as client-go's reflector keeps them: a list sets them and
//! the resourceVersion to watch from, each watch event moves them on, and a watch that is
//! too old (`410 Gone`, or an `ERROR` event saying so) asks for a new list. Pure: the
//! thread that makes the requests (and backs off) feeds it lines and answers.

use crate::api::{Pod, PodStatus};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The most pods a node takes from the apiserver (kubelet's `maxPods` bounds what runs; a
/// list beyond this is cut, and said).
pub const MAX_PODS: usize = 1024;

/// Pods asked for in one page of a list. client-go's reflector asks for 500; a pod may
/// carry up to 256 KiB of annotations here, so a page of 100 stays below the client's
/// `MAX_BODY_BYTES`, and a page that does not is asked again in halves.
pub const LIST_PAGE: u32 = 100;

/// The most pages one list may take (a server that pages forever is cut off).
pub const MAX_LIST_PAGES: usize = 2 * MAX_PODS;

/// The path of one page (at most `limit` pods, from `cont`, a continue token; empty: the
/// first page) of the list of the pods bound to `node`.
pub fn list_path(node: &str, limit: u32, cont: &str) -> String {
    let mut path = format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{}&limit={limit}", percent(node));
    if !cont.is_empty() {
        path.push_str(&format!("&continue={}", percent(cont)));
    }
    path
}

/// The path of the watch of the pods bound to `node`, from resourceVersion `rv`.
pub fn watch_path(node: &str, rv: &str) -> String {
    format!(
        "/api/v1/pods?fieldSelector=spec.nodeName%3D{}&watch=true&allowWatchBookmarks=true&resourceVersion={}&timeoutSeconds=300",
        percent(node),
        percent(rv)
    )
}

/// Percent-encodes what is not unreserved in a query value.
fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A `PodList` as the apiserver answers a list.
#[derive(Deserialize)]
pub struct PodListAnswer {
    /// The list's resourceVersion.
    pub metadata: ListMeta,
    /// The pods.
    #[serde(default)]
    pub items: Vec<serde_json::Value>,
}

/// `metav1.ListMeta` (what a reflector reads).
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
pub struct ListMeta {
    /// Where a watch starts from.
    pub resource_version: String,
    /// Where the next page starts; empty on the last.
    #[serde(rename = "continue")]
    pub continue_: String,
}

/// One line of a watch stream.
#[derive(Deserialize)]
struct WatchLine {
    #[serde(rename = "type")]
    type_: String,
    object: serde_json::Value,
}

/// What one watch line did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// The pod set changed.
    Changed,
    /// Only the resourceVersion moved (a bookmark), or nothing happened.
    Unchanged,
    /// The watch is too old: list again.
    Relist,
    /// The line is not a watch event; the watch should be started again.
    Broken(String),
}

/// The pods bound to this node and where the watch stands.
#[derive(Clone, Debug, Default)]
pub struct Reflector {
    /// This node: a pod bound to another (a proxy's or a broken apiserver's answer, since
    /// the field selector asks for this node's) is never taken.
    node: String,
    /// By uid; each pod shared with the view and the pod manager, never copied.
    pods: BTreeMap<String, Arc<Pod>>,
    /// The uids whose pod was added, changed or removed since `take_changed`.
    changed: BTreeSet<String>,
    /// Where the next watch starts; empty until a list.
    resource_version: String,
    /// Pods the apiserver sent that could not be read, by `namespace/name`, with why.
    pub unreadable: BTreeMap<String, String>,
}

impl Reflector {
    /// A reflector of the pods bound to `node`.
    pub fn new(node: &str) -> Reflector {
        Reflector { node: node.into(), ..Reflector::default() }
    }

    /// The pods, by uid.
    pub fn pods(&self) -> &BTreeMap<String, Arc<Pod>> {
        &self.pods
    }

    /// The uids whose pod was added, changed or removed since the last call.
    pub fn take_changed(&mut self) -> BTreeSet<String> {
        std::mem::take(&mut self.changed)
    }

    /// Where the next watch starts; `None` before the first list.
    pub fn resource_version(&self) -> Option<&str> {
        (!self.resource_version.is_empty()).then_some(self.resource_version.as_str())
    }

    /// A list replaces everything; a pod it holds as it was keeps its shared copy (and is
    /// not a change).
    pub fn listed(&mut self, list: PodListAnswer) {
        let old = std::mem::take(&mut self.pods);
        self.unreadable.clear();
        if list.items.len() > MAX_PODS {
            log::warn!("apiserver: {} pods are bound to this node; taking the first {MAX_PODS}", list.items.len());
        }
        for item in list.items.into_iter().take(MAX_PODS) {
            self.upsert(item);
        }
        for (uid, pod) in self.pods.iter_mut() {
            if let Some(was) = old.get(uid).filter(|was| ***was == **pod) {
                *pod = was.clone();
                self.changed.remove(uid);
            }
        }
        self.changed.extend(old.into_keys().filter(|uid| !self.pods.contains_key(uid)));
        self.resource_version = list.metadata.resource_version;
    }

    fn upsert(&mut self, object: serde_json::Value) -> bool {
        let key = object_key(&object);
        match crate::api::decode::<Pod>(&object) {
            Ok(pod) if pod.spec.node_name != self.node => {
                let why = format!("the pod is bound to node {:?}, not to this one", pod.spec.node_name);
                self.unreadable.insert(key, why);
                false
            }
            Ok(pod) if !pod.metadata.uid.is_empty() => {
                self.unreadable.remove(&key);
                let changed = self.pods.get(&pod.metadata.uid).map_or(true, |p| **p != pod);
                if changed && (self.pods.contains_key(&pod.metadata.uid) || self.pods.len() < MAX_PODS) {
                    self.changed.insert(pod.metadata.uid.clone());
                    self.pods.insert(pod.metadata.uid.clone(), Arc::new(pod));
                    return true;
                }
                false
            }
            Ok(_) => {
                self.unreadable.insert(key, "the pod has no metadata.uid".into());
                false
            }
            Err(e) => {
                self.unreadable.insert(key, e);
                false
            }
        }
    }

    /// Applies one line of the watch stream.
    pub fn watched(&mut self, line: &[u8]) -> Step {
        let event: WatchLine = match serde_json::from_slice(line) {
            Ok(e) => e,
            Err(e) => return Step::Broken(format!("not a watch event: {e}")),
        };
        let rv = event
            .object
            .get("metadata")
            .and_then(|m| m.get("resourceVersion"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string();
        let step = match event.type_.as_str() {
            "ADDED" | "MODIFIED" => {
                if self.upsert(event.object) {
                    Step::Changed
                } else {
                    Step::Unchanged
                }
            }
            "DELETED" => {
                let uid = event.object.get("metadata").and_then(|m| m.get("uid")).and_then(serde_json::Value::as_str);
                if let Some(p) = uid.and_then(|u| self.pods.remove(u)) {
                    self.changed.insert(p.metadata.uid.clone());
                    Step::Changed
                } else {
                    Step::Unchanged
                }
            }
            "BOOKMARK" => Step::Unchanged,
            "ERROR" => {
                // A `Status`: 410 (Expired/Gone) means the watch fell too far behind.
                let code = event.object.get("code").and_then(serde_json::Value::as_u64);
                return if code == Some(410) {
                    Step::Relist
                } else {
                    let message = event.object.get("message").and_then(serde_json::Value::as_str).unwrap_or_default();
                    Step::Broken(format!("the watch ended with an error: {message}"))
                };
            }
            other => return Step::Broken(format!("unknown watch event type {other:?}")),
        };
        if !rv.is_empty() {
            self.resource_version = rv;
        }
        step
    }
}

/// The path of pod `namespace/name`'s status.
pub fn status_path(namespace: &str, name: &str) -> String {
    format!("/api/v1/namespaces/{}/pods/{}/status", percent(namespace), percent(name))
}

/// The merge patch (`application/merge-patch+json`) that sets a pod's status, as kubelet's
/// status manager sends it: with the pod's uid as a precondition, so a status never lands
/// on a newer pod of the same name (that is a 409 Conflict, and the update is dropped).
///
/// What an apiserver of minor version `minor` (1.`minor`) does not know is left out:
/// `hostIPs` before 1.28, and always `allocatedResourcesStatus` (what `/pods` shows of a
/// container's devices' health), which kubelet sends only behind an alpha feature gate.
pub fn status_patch(uid: &str, status: &PodStatus, minor: u32) -> serde_json::Value {
    let mut status = serde_json::to_value(status).unwrap_or_default();
    if minor < 28 {
        if let Some(s) = status.as_object_mut() {
            s.remove("hostIPs");
        }
    }
    for list in ["initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"] {
        if let Some(items) = status.get_mut(list).and_then(serde_json::Value::as_array_mut) {
            for c in items.iter_mut().filter_map(serde_json::Value::as_object_mut) {
                c.remove("allocatedResourcesStatus");
            }
        }
    }
    serde_json::json!({ "metadata": { "uid": uid }, "status": status })
}

/// The pod conditions kubelet always writes; the others (a readiness gate's, a
/// `DisruptionTarget` the API's eviction set) are other writers', kept unless the status
/// sets them (kubelet sets `DisruptionTarget` on a pod it evicts).
const KUBELET_CONDITIONS: [&str; 5] =
    ["PodScheduled", "PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"];

/// `status` with the conditions other writers set in `current` (the apiserver's copy) kept
/// where `status` does not set them, as kubelet's `mergePodStatus` keeps them: a merge
/// patch replaces the whole list.
pub fn with_others_conditions(status: &PodStatus, current: Option<&PodStatus>) -> PodStatus {
    let mut out = status.clone();
    let others = current.into_iter().flat_map(|c| &c.conditions).filter(|c| {
        !KUBELET_CONDITIONS.contains(&c.type_.as_str()) && !status.conditions.iter().any(|s| s.type_ == c.type_)
    });
    out.conditions.extend(others.cloned());
    out
}

/// The minor version of a `/version` answer (`"minor": "30"`, or `"30+"` on some
/// distributions); `None` when it cannot be read.
pub fn server_minor(version: &serde_json::Value) -> Option<u32> {
    let minor = version.get("minor")?.as_str()?;
    minor.trim_end_matches('+').parse().ok()
}

fn object_key(object: &serde_json::Value) -> String {
    let meta = object.get("metadata");
    let field = |k: &str| meta.and_then(|m| m.get(k)).and_then(serde_json::Value::as_str).unwrap_or("?").to_string();
    format!("{}/{}", field("namespace"), field("name"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_status_keeps_the_conditions_other_writers_set_and_replaces_kubelets() {
        let cond = |type_: &str, status: &str| crate::api::PodCondition {
            type_: type_.into(),
            status: status.into(),
            last_probe_time: None,
            last_transition_time: None,
            reason: String::new(),
            message: String::new(),
        };
        let ours = PodStatus { conditions: vec![cond("Ready", "True")], ..Default::default() };
        let theirs = PodStatus {
            conditions: vec![cond("Ready", "False"), cond("example.com/gate", "True"), cond("Initialized", "False")],
            ..Default::default()
        };
        let merged = with_others_conditions(&ours, Some(&theirs));
        let got: Vec<(&str, &str)> = merged.conditions.iter().map(|c| (c.type_.as_str(), c.status.as_str())).collect();
        assert_eq!(got, [("Ready", "True"), ("example.com/gate", "True")]);
        assert_eq!(with_others_conditions(&ours, None), ours);
    }

    fn pod(uid: &str, rv: &str, image: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": format!("p-{uid}"), "namespace": "default", "uid": uid, "resourceVersion": rv},
               "spec": {"nodeName": "edge1", "containers": [{"name": "c", "image": image}]}})
    }

    fn line(type_: &str, object: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"type": type_, "object": object})).unwrap()
    }

    #[test]
    fn a_list_then_watch_events_keep_the_pods_and_where_to_watch_from() {
        let mut r = Reflector::new("edge1");
        assert_eq!(r.resource_version(), None);
        let list: PodListAnswer =
            serde_json::from_value(json!({"metadata": {"resourceVersion": "10"}, "items": [pod("a", "5", "x:1")]}))
                .unwrap();
        r.listed(list);
        assert_eq!((r.pods().len(), r.resource_version()), (1, Some("10")));
        assert_eq!(r.watched(&line("ADDED", pod("b", "11", "y:1"))), Step::Changed);
        assert_eq!(r.watched(&line("MODIFIED", pod("b", "12", "y:2"))), Step::Changed);
        assert_eq!(r.pods()["b"].spec.containers[0].image, "y:2");
        assert_eq!(r.watched(&line("BOOKMARK", json!({"metadata": {"resourceVersion": "13"}}))), Step::Unchanged);
        assert_eq!(r.resource_version(), Some("13"));
        assert_eq!(r.watched(&line("DELETED", pod("a", "14", "x:1"))), Step::Changed);
        assert_eq!(r.pods().keys().collect::<Vec<_>>(), ["b"]);
        assert_eq!(r.resource_version(), Some("14"));
    }

    #[test]
    fn a_gone_watch_asks_for_a_list_and_garbage_breaks_the_watch() {
        let mut r = Reflector::new("edge1");
        let gone = json!({"kind": "Status", "status": "Failure", "reason": "Expired", "code": 410, "message": "too old resource version: 5 (20)"});
        assert_eq!(r.watched(&line("ERROR", gone)), Step::Relist);
        let other = json!({"kind": "Status", "code": 500, "message": "etcd is sad"});
        assert_eq!(r.watched(&line("ERROR", other)), Step::Broken("the watch ended with an error: etcd is sad".into()));
        assert!(matches!(r.watched(b"{nope"), Step::Broken(_)));
    }

    #[test]
    fn a_pod_that_cannot_be_read_is_named_and_others_are_kept() {
        let mut r = Reflector::new("edge1");
        let mut bad = pod("c", "3", "z:1");
        bad["spec"]["containers"] = json!("not a list");
        assert_eq!(r.watched(&line("ADDED", bad)), Step::Unchanged);
        let why = &r.unreadable["default/p-c"];
        assert!(why.starts_with("spec.containers: invalid type"), "{why}");
        assert_eq!(r.watched(&line("ADDED", pod("c", "4", "z:1"))), Step::Changed);
        assert!(r.unreadable.is_empty(), "fixed");
    }

    #[test]
    fn a_pod_bound_to_another_node_is_never_taken() {
        let mut r = Reflector::new("edge1");
        let mut elsewhere = pod("d", "5", "z:1");
        elsewhere["spec"]["nodeName"] = json!("edge2");
        assert_eq!(r.watched(&line("ADDED", elsewhere.clone())), Step::Unchanged);
        let mut unbound = pod("e", "6", "z:1");
        unbound["spec"].as_object_mut().unwrap().remove("nodeName");
        let list: PodListAnswer = serde_json::from_value(
            json!({"metadata": {"resourceVersion": "7"}, "items": [elsewhere, unbound, pod("f", "7", "z:1")]}),
        )
        .unwrap();
        r.listed(list);
        assert_eq!(r.pods().keys().collect::<Vec<_>>(), ["f"]);
        assert_eq!(r.unreadable["default/p-d"], "the pod is bound to node \"edge2\", not to this one");
        assert_eq!(r.unreadable["default/p-e"], "the pod is bound to node \"\", not to this one");
        // A pod that runs here is not taken away by a forged event moving it elsewhere.
        let mut moved = pod("f", "8", "z:2");
        moved["spec"]["nodeName"] = json!("edge2");
        assert_eq!(r.watched(&line("MODIFIED", moved)), Step::Unchanged);
        assert_eq!(r.pods()["f"].spec.containers[0].image, "z:1");
    }

    #[test]
    fn a_status_patch_carries_the_uid_precondition_and_only_what_the_apiserver_knows() {
        let ip = crate::api::PodIp { ip: "10.0.0.5".into() };
        let mut status =
            crate::api::PodStatus { phase: crate::api::PodPhase::Running, host_ips: vec![ip], ..Default::default() };
        status.container_statuses.push(crate::api::ContainerStatus {
            allocated_resources_status: vec![Default::default()],
            ..Default::default()
        });
        let p = status_patch("u1", &status, 30);
        assert_eq!(p["metadata"]["uid"], "u1");
        assert_eq!(p["status"]["phase"], "Running");
        assert_eq!(p["status"]["hostIPs"][0]["ip"], "10.0.0.5");
        assert!(p["status"]["containerStatuses"][0].get("allocatedResourcesStatus").is_none());
        assert!(status_patch("u1", &status, 26)["status"].get("hostIPs").is_none(), "1.26 has no hostIPs");
        assert_eq!(server_minor(&json!({"major": "1", "minor": "30+"})), Some(30));
        assert_eq!(server_minor(&json!({})), None);
        assert_eq!(status_path("kube-system", "web-edge1"), "/api/v1/namespaces/kube-system/pods/web-edge1/status");
    }

    #[test]
    fn paths_select_this_nodes_pods() {
        assert_eq!(list_path("edge-1", 100, ""), "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&limit=100");
        assert_eq!(
            list_path("edge-1", 50, "eyJ2Ijo+/="),
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&limit=50&continue=eyJ2Ijo%2B%2F%3D"
        );
        assert_eq!(
            watch_path("edge-1", "42"),
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&watch=true&allowWatchBookmarks=true&resourceVersion=42&timeoutSeconds=300"
        );
    }
}
