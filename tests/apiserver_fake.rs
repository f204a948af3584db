//! The fake kube-apiserver itself (tests/apiserver/): it is the peer the cluster-mode tests
//! trust, so what it does is specified here. Without the test venv (`make test` makes it
//! with tests/apiserver/setup.sh) each test skips with the reason.

use crate::common;

use base64::Engine;
use common::apiserver::{
    node_user, openssl_csr, CutMode, FakeApiserver, KeyType, Options, WatchStream, CSRS, KUBEADM_NODE_TOKEN_GROUP,
    KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER,
};
use serde_json::{json, Value};
use std::time::Duration;

const NODE: &str = "edge-1";
const STEP: Duration = Duration::from_secs(3);
const SMP: &str = "application/strategic-merge-patch+json";
const JSON: &str = "application/json";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";

/// A Node as a kubelet registers it.
fn node_object(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
        "spec": {},
        "status": {
            "capacity": {"cpu": "4", "memory": "8029172Ki", "pods": "110", "ephemeral-storage": "61255492Ki"},
            "allocatable": {"cpu": "4", "memory": "7926772Ki", "pods": "110", "ephemeral-storage": "56453061334"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "ferrolet is posting ready status",
                            "lastHeartbeatTime": "2024-05-01T10:00:00Z", "lastTransitionTime": "2024-05-01T10:00:00Z"}],
            "addresses": [{"type": "InternalIP", "address": "192.0.2.10"}, {"type": "Hostname", "address": name}],
            "nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "6.1.0-18-amd64",
                         "osImage": "Debian GNU/Linux 12 (bookworm)", "containerRuntimeVersion": "containerd://1.6.20",
                         "kubeletVersion": "v1.30.0-ferrolet", "kubeProxyVersion": "", "operatingSystem": "linux",
                         "architecture": "amd64"}
        }
    })
}

fn lease_object(name: &str, renew: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": name, "namespace": "kube-node-lease"},
           "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": renew}})
}

fn pod_object(name: &str, node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
           "spec": {"nodeName": node, "containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}})
}

fn register(api: &FakeApiserver) -> Value {
    let (code, node) = api.call(&api.node_agent(), "POST", "/api/v1/nodes", Some((JSON, &node_object(NODE))));
    assert_eq!(code, 201, "{node}");
    node
}

#[test]
fn node_writes_its_own_node_and_lease_and_gets_403_for_another_nodes() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let agent = api.node_agent();
    let node = register(&api);
    assert_eq!(node["metadata"]["name"], NODE);
    assert!(node["metadata"]["uid"].is_string() && node["metadata"]["resourceVersion"].is_string());

    // A heartbeat as kubelet sends it: a strategic merge patch that merges conditions by type.
    let patch = json!({"status": {
        "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "MemoryPressure"}],
        "conditions": [{"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                        "lastHeartbeatTime": "2024-05-01T10:00:10Z", "lastTransitionTime": "2024-05-01T10:00:00Z"}]}});
    let (code, patched) = api.call(&agent, "PATCH", &format!("/api/v1/nodes/{NODE}/status"), Some((SMP, &patch)));
    assert_eq!(code, 200, "{patched}");
    let types: Vec<&str> =
        patched["status"]["conditions"].as_array().unwrap().iter().map(|c| c["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["Ready", "MemoryPressure"]);

    // The lease: create, then renew with the resourceVersion read.
    let (code, lease) =
        api.call(&agent, "POST", LEASES, Some((JSON, &lease_object(NODE, "2024-05-01T10:00:00.000000Z"))));
    assert_eq!(code, 201, "{lease}");
    let mut renewed = lease.clone();
    renewed["spec"]["renewTime"] = json!("2024-05-01T10:00:10.000000Z");
    let (code, after) = api.call(&agent, "PUT", &format!("{LEASES}/{NODE}"), Some((JSON, &renewed)));
    assert_eq!(code, 200, "{after}");
    assert_ne!(after["metadata"]["resourceVersion"], lease["metadata"]["resourceVersion"]);
    assert_eq!(api.lease(NODE).unwrap()["spec"]["renewTime"], "2024-05-01T10:00:10.000000Z");

    // Another node's Node and Lease: 403 with a Status, reason Forbidden.
    api.create("/api/v1/nodes", &node_object("edge-2"));
    api.create(LEASES, &lease_object("edge-2", "2024-05-01T10:00:00.000000Z"));
    let other_lease = api.lease("edge-2").unwrap();
    let mut lease_in_default = lease_object(NODE, "2024-05-01T10:00:00.000000Z");
    lease_in_default["metadata"]["namespace"] = json!("default");
    for (method, path, body) in [
        ("POST", "/api/v1/nodes".to_string(), Some(node_object("edge-3"))),
        ("GET", "/api/v1/nodes/edge-2".to_string(), None),
        ("GET", "/api/v1/nodes".to_string(), None),
        ("PATCH", "/api/v1/nodes/edge-2/status".to_string(), Some(patch.clone())),
        ("DELETE", format!("/api/v1/nodes/{NODE}"), None),
        ("PUT", format!("{LEASES}/edge-2"), Some(other_lease)),
        ("POST", LEASES.to_string(), Some(lease_object("edge-3", "2024-05-01T10:00:00.000000Z"))),
        ("POST", "/apis/coordination.k8s.io/v1/namespaces/default/leases".to_string(), Some(lease_in_default)),
    ] {
        let ctype = if method == "PATCH" { SMP } else { JSON };
        let (code, status) = api.call(&agent, method, &path, body.as_ref().map(|b| (ctype, b)));
        assert_eq!(code, 403, "{method} {path}: {status}");
        assert_eq!(
            (status["kind"].as_str(), status["reason"].as_str()),
            (Some("Status"), Some("Forbidden")),
            "{status}"
        );
    }
    // A node lists its own Node only through a field selector on its name.
    let (code, list) = api.call(&agent, "GET", &format!("/api/v1/nodes?fieldSelector=metadata.name%3D{NODE}"), None);
    assert_eq!((code, list["items"].as_array().unwrap().len()), (200, 1), "{list}");
    api.assert_no_validation_failures();
}

#[test]
fn node_restriction_forbids_labels_and_taints_a_kubelet_may_not_set() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let agent = api.node_agent();
    let mut node = node_object(NODE);
    node["metadata"]["labels"]["node-role.kubernetes.io/worker"] = json!("");
    let (code, status) = api.call(&agent, "POST", "/api/v1/nodes", Some((JSON, &node)));
    assert_eq!(code, 403, "{status}");
    assert!(status["message"].as_str().unwrap().contains("node-role.kubernetes.io/worker"), "{status}");

    node["metadata"]["labels"] = json!({"kubernetes.io/hostname": NODE, "node.kubernetes.io/instance-type": "pi4",
                                        "example.com/site": "north"});
    node["spec"]["taints"] = json!([{"key": "edge", "value": "true", "effect": "NoSchedule"}]);
    let (code, created) = api.call(&agent, "POST", "/api/v1/nodes", Some((JSON, &node)));
    assert_eq!(code, 201, "{created}");
    // Taints are set at registration only.
    let patch = json!({"spec": {"taints": null}});
    let (code, status) = api.call(&agent, "PATCH", &format!("/api/v1/nodes/{NODE}"), Some((SMP, &patch)));
    assert_eq!(code, 403, "{status}");
    assert!(status["message"].as_str().unwrap().contains("not allowed to modify taints"), "{status}");
}

#[test]
fn watch_delivers_added_modified_deleted_for_a_pod_the_admin_creates_updates_and_deletes() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let agent = api.node_agent();
    register(&api);
    let selector = format!("fieldSelector=spec.nodeName%3D{NODE}");
    let (code, list) = api.call(&agent, "GET", &format!("/api/v1/pods?{selector}"), None);
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["kind"], "PodList");
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let watch = WatchStream::open(&api, &agent, &format!("/api/v1/pods?{selector}&watch=true&resourceVersion={rv}"));
    assert_eq!(watch.status, 200);
    api.wait_for_watches(&node_user(NODE), 1, STEP);

    api.create_pod("default", &pod_object("elsewhere", "edge-2")); // another node's: never seen
    let created = api.create_pod("default", &pod_object("web", NODE));
    let ev = watch.event(STEP);
    assert_eq!((ev["type"].as_str(), ev["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("web")), "{ev}");
    assert_eq!(ev["object"]["status"]["phase"], "Pending");
    assert_eq!(ev["object"]["spec"]["terminationGracePeriodSeconds"], 30, "defaulted as by the apiserver");

    api.patch_pod("default", "web", &json!({"metadata": {"labels": {"tier": "front"}}}));
    let ev = watch.event(STEP);
    assert_eq!(
        (ev["type"].as_str(), ev["object"]["metadata"]["labels"]["tier"].as_str()),
        (Some("MODIFIED"), Some("front"))
    );

    // A user's delete of a bound pod is graceful: MODIFIED with a deletionTimestamp; the
    // pod goes when its node deletes it with grace period 0.
    let deleting = api.delete_pod("default", "web", None);
    assert_eq!(deleting["metadata"]["deletionGracePeriodSeconds"], 30);
    let ev = watch.event(STEP);
    assert_eq!(ev["type"], "MODIFIED");
    assert!(ev["object"]["metadata"]["deletionTimestamp"].is_string(), "{ev}");
    assert!(api.pod("default", "web").is_some(), "the pod stays until its node deletes it");
    let opts = json!({"gracePeriodSeconds": 0, "preconditions": {"uid": created["metadata"]["uid"]}});
    let (code, gone) = api.call(&agent, "DELETE", "/api/v1/namespaces/default/pods/web", Some((JSON, &opts)));
    assert_eq!(code, 200, "{gone}");
    let ev = watch.event(STEP);
    assert_eq!((ev["type"].as_str(), ev["object"]["metadata"]["name"].as_str()), (Some("DELETED"), Some("web")));
    assert!(api.pod("default", "web").is_none());
    // Each event's resourceVersion is newer than the last.
    assert!(
        ev["object"]["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap() > rv.parse().unwrap()
    );
}

#[test]
fn watch_from_a_compacted_resource_version_gets_410_gone() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let agent = api.node_agent();
    let selector = format!("fieldSelector=spec.nodeName%3D{NODE}");
    let (_, list) = api.call(&agent, "GET", &format!("/api/v1/pods?{selector}"), None);
    let old_rv = list["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    api.create_pod("default", &pod_object("a", NODE));
    api.compact();
    // As the watch cache answers: HTTP 200, one ERROR event with a 410 Expired Status, end.
    let watch =
        WatchStream::open(&api, &agent, &format!("/api/v1/pods?{selector}&watch=true&resourceVersion={old_rv}"));
    assert_eq!(watch.status, 200);
    let ev = watch.event(STEP);
    assert_eq!(ev["type"], "ERROR", "{ev}");
    assert_eq!((ev["object"]["code"].as_u64(), ev["object"]["reason"].as_str()), (Some(410), Some("Expired")));
    assert_eq!(watch.next(STEP), Ok(None), "the stream ends after the error");
    // A re-list gives a resourceVersion to watch from again.
    let (_, list) = api.call(&agent, "GET", &format!("/api/v1/pods?{selector}"), None);
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap();
    let watch = WatchStream::open(&api, &agent, &format!("/api/v1/pods?{selector}&watch=true&resourceVersion={rv}"));
    api.wait_for_watches(&node_user(NODE), 1, STEP);
    api.create_pod("default", &pod_object("b", NODE));
    assert_eq!(watch.event(STEP)["type"], "ADDED");
}

#[test]
fn stale_pod_status_update_gets_409_conflict() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let agent = api.node_agent();
    let pod = api.create_pod("default", &pod_object("web", NODE));
    let path = "/api/v1/namespaces/default/pods/web/status";
    let mut running = pod.clone();
    running["status"] = json!({"phase": "Running", "podIP": "10.88.0.5", "startTime": "2024-05-01T10:00:00Z",
                               "conditions": [{"type": "Ready", "status": "True"}]});
    let (code, updated) = api.call(&agent, "PUT", path, Some((JSON, &running)));
    assert_eq!(code, 200, "{updated}");
    assert_eq!(updated["status"]["phase"], "Running");
    // The same resourceVersion again is now stale.
    let (code, status) = api.call(&agent, "PUT", path, Some((JSON, &running)));
    assert_eq!((code, status["reason"].as_str()), (409, Some("Conflict")), "{status}");
    // A patch carrying the stale resourceVersion as a precondition too; one without is applied.
    let stale =
        json!({"metadata": {"resourceVersion": pod["metadata"]["resourceVersion"]}, "status": {"phase": "Failed"}});
    let (code, _) = api.call(&agent, "PATCH", path, Some((SMP, &stale)));
    assert_eq!(code, 409);
    let wrong_uid = json!({"metadata": {"uid": "00000000-0000-0000-0000-000000000000"}, "status": {"phase": "Failed"}});
    let (code, _) = api.call(&agent, "PATCH", path, Some((SMP, &wrong_uid)));
    assert_eq!(code, 409, "a uid precondition that does not match");
    let fresh = json!({"metadata": {"uid": pod["metadata"]["uid"]}, "status": {"phase": "Succeeded"}});
    let (code, done) = api.call(&agent, "PATCH", path, Some((SMP, &fresh)));
    assert_eq!((code, done["status"]["phase"].as_str()), (200, Some("Succeeded")), "{done}");
    assert_eq!(done["status"]["podIP"], "10.88.0.5", "the patch merged into the stored status");
    // Not this node's pod: 403.
    api.create_pod("default", &pod_object("theirs", "edge-2"));
    let running = json!({"status": {"phase": "Running"}});
    let (code, _) = api.call(&agent, "PATCH", "/api/v1/namespaces/default/pods/theirs/status", Some((SMP, &running)));
    assert_eq!(code, 403);
    api.assert_no_validation_failures();
}

#[test]
fn invalid_objects_are_rejected_with_422_and_recorded() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let agent = api.node_agent();
    register(&api);
    // An unknown field (strict schema).
    let bad = json!({"status": {"capacity": {"cpu": "4"}, "bogus": true}});
    let (code, status) = api.call(&agent, "PATCH", &format!("/api/v1/nodes/{NODE}/status"), Some((SMP, &bad)));
    assert_eq!((code, status["reason"].as_str()), (422, Some("Invalid")), "{status}");
    // A MicroTime without its six fractional digits, as the apiserver's decoder refuses it.
    let (code, status) = api.call(&agent, "POST", LEASES, Some((JSON, &lease_object(NODE, "2024-05-01T10:00:00Z"))));
    assert_eq!(code, 422, "{status}");
    assert!(status["message"].as_str().unwrap().contains("spec.renewTime"), "{status}");
    // A quantity that is not one.
    let bad = json!({"status": {"allocatable": {"example.com/gpu": "two"}}});
    let (code, _) = api.call(&agent, "PATCH", &format!("/api/v1/nodes/{NODE}/status"), Some((SMP, &bad)));
    assert_eq!(code, 422);

    let failures = api.validation_failures();
    assert_eq!(failures.len(), 3, "{failures:#?}");
    assert!(failures.iter().all(|f| f["user"] == node_user(NODE).as_str()));
    assert_eq!(failures[1]["resource"], "leases");
    assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| api.assert_no_validation_failures())).is_err());
    // Nothing was stored.
    assert!(api.lease(NODE).is_none());
    assert!(api.node(NODE).unwrap()["status"].get("bogus").is_none());
}

#[test]
fn node_may_create_only_mirror_pods_bound_to_itself() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let agent = api.node_agent();
    let node = register(&api);
    let mirror = |name: &str, node_name: &str| {
        let mut pod = pod_object(name, node_name);
        pod["metadata"]["annotations"] =
            json!({"kubernetes.io/config.mirror": "3f2a", "kubernetes.io/config.source": "file"});
        pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Node", "name": NODE,
                                                     "uid": node["metadata"]["uid"], "controller": true}]);
        pod
    };
    let pods = "/api/v1/namespaces/default/pods";
    let (code, created) = api.call(&agent, "POST", pods, Some((JSON, &mirror(&format!("static-{NODE}"), NODE))));
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["status"]["phase"], "Pending", "the apiserver resets a new pod's status");

    let mut no_owner = mirror("no-owner", NODE);
    no_owner["metadata"].as_object_mut().unwrap().remove("ownerReferences");
    for (what, pod) in [
        ("not a mirror pod", pod_object("plain", NODE)),
        ("bound to another node", mirror("elsewhere", "edge-2")),
        ("without an owner reference to the node", no_owner),
    ] {
        let (code, status) = api.call(&agent, "POST", pods, Some((JSON, &pod)));
        assert_eq!((code, status["reason"].as_str()), (403, Some("Forbidden")), "{what}: {status}");
    }
    // Nor update a pod's spec, nor list pods without its nodeName selector.
    let (code, _) = api.call(
        &agent,
        "PATCH",
        &format!("{pods}/static-{NODE}"),
        Some((SMP, &json!({"metadata": {"labels": {"x": "y"}}}))),
    );
    assert_eq!(code, 403);
    let (code, _) = api.call(&agent, "GET", "/api/v1/pods", None);
    assert_eq!(code, 403);
    let (code, _) = api.call(&agent, "GET", "/api/v1/namespaces/default/events", None);
    assert_eq!(code, 403, "a node writes events but does not read them");
}

#[test]
fn events_are_created_patched_and_404_when_missing() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let agent = api.node_agent();
    let pod = api.create_pod("default", &pod_object("web", NODE));
    let event = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "web.17c8a4b2e1f0a9d3", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web", "uid": pod["metadata"]["uid"],
                           "apiVersion": "v1", "fieldPath": "spec.containers{app}"},
        "reason": "Started", "message": "Started container app", "type": "Normal", "count": 1,
        "source": {"component": "kubelet", "host": NODE},
        "firstTimestamp": "2024-05-01T10:00:00Z", "lastTimestamp": "2024-05-01T10:00:00Z"});
    let events = "/api/v1/namespaces/default/events";
    let (code, created) = api.call(&agent, "POST", events, Some((JSON, &event)));
    assert_eq!(code, 201, "{created}");
    let repeat = json!({"count": 2, "lastTimestamp": "2024-05-01T10:00:05Z", "message": "Started container app"});
    let (code, patched) = api.call(&agent, "PATCH", &format!("{events}/web.17c8a4b2e1f0a9d3"), Some((SMP, &repeat)));
    assert_eq!((code, patched["count"].as_u64()), (200, Some(2)), "{patched}");
    let (code, status) = api.call(&agent, "PATCH", &format!("{events}/gone.1"), Some((SMP, &repeat)));
    assert_eq!((code, status["reason"].as_str()), (404, Some("NotFound")));
    // A Node's event lives in "default" with no involvedObject namespace; elsewhere it is invalid.
    let mut node_event = event.clone();
    node_event["metadata"] = json!({"name": format!("{NODE}.17c8a4b2e1f0a9d4")});
    node_event["involvedObject"] = json!({"kind": "Node", "name": NODE, "uid": NODE});
    let (code, _) = api.call(&agent, "POST", events, Some((JSON, &node_event)));
    assert_eq!(code, 201);
    let (code, _) = api.call(&agent, "POST", "/api/v1/namespaces/kube-system/events", Some((JSON, &node_event)));
    assert_eq!(code, 422);
    assert_eq!(api.events("default").len(), 2);
}

#[test]
fn kubectl_shows_the_node_pods_and_events_as_stored() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let agent = api.node_agent();
    register(&api);
    let pod = api.create_pod("default", &pod_object("web", NODE));
    let status = json!({"status": {
        "phase": "Running", "podIP": "10.88.0.7", "podIPs": [{"ip": "10.88.0.7"}], "hostIP": "192.0.2.10",
        "startTime": "2024-05-01T10:00:00Z",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-01T10:00:02Z"}],
        "containerStatuses": [{"name": "app", "ready": true, "started": true, "restartCount": 2,
                               "image": "busybox:1.36", "imageID": "sha256:0123", "containerID": "containerd://abc",
                               "state": {"running": {"startedAt": "2024-05-01T10:00:01Z"}},
                               "lastState": {"terminated": {"exitCode": 137, "reason": "Error",
                                                            "finishedAt": "2024-05-01T10:00:00Z"}}}]}});
    let (code, body) = api.call(&agent, "PATCH", "/api/v1/namespaces/default/pods/web/status", Some((SMP, &status)));
    assert_eq!(code, 200, "{body}");
    let event = json!({"metadata": {"name": "web.1"}, "involvedObject": {"kind": "Pod", "namespace": "default",
        "name": "web", "uid": pod["metadata"]["uid"], "apiVersion": "v1"}, "reason": "Pulled", "type": "Normal",
        "message": "Container image \"busybox:1.36\" already present on machine", "count": 1,
        "source": {"component": "kubelet", "host": NODE}, "firstTimestamp": "2024-05-01T10:00:00Z",
        "lastTimestamp": "2024-05-01T10:00:00Z"});
    assert_eq!(api.call(&agent, "POST", "/api/v1/namespaces/default/events", Some((JSON, &event))).0, 201);

    let nodes = api.kubectl(&["get", "nodes"]);
    let row: Vec<&str> = nodes.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!((row[0], row[1], row[2], row[4]), (NODE, "Ready", "<none>", "v1.30.0-ferrolet"), "{nodes}");

    let pods = api.kubectl(&["get", "pods", "-o", "wide"]);
    assert!(pods.lines().next().unwrap().starts_with("NAME   READY   STATUS    RESTARTS"), "{pods}");
    let row: Vec<&str> = pods.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!((row[0], row[1], row[2], row[3]), ("web", "1/1", "Running", "2"), "{pods}");
    assert!(row.contains(&"10.88.0.7") && row.contains(&NODE), "{pods}");

    let describe = api.kubectl(&["describe", "pod", "web"]);
    let lines: Vec<String> = describe.lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
    for want in ["Status: Running", "IP: 10.88.0.7", "Node: edge-1/192.0.2.10", "Restart Count: 2", "Ready: True"] {
        assert!(lines.iter().any(|l| l == want), "no {want:?} in:\n{describe}");
    }
    // The event shows under the pod: it names the pod's uid, as kubectl's selector asks.
    assert!(lines.iter().any(|l| l.starts_with("Normal Pulled") && l.contains("kubelet")), "{describe}");
    let events = api.kubectl(&["get", "events"]);
    assert!(events.contains("pod/web") && events.contains("Pulled"), "{events}");
    let describe_node = api.kubectl(&["describe", "node", NODE]);
    assert!(describe_node.contains("Kubelet Version:            v1.30.0-ferrolet"), "{describe_node}");
}

#[test]
fn both_node_kubeconfigs_authenticate_as_the_node() {
    let Some(api) = FakeApiserver::start_with(NODE, Options { key_type: KeyType::Ec, ..Options::default() }) else {
        return;
    };
    register(&api);
    for kubeconfig in [api.node_kubeconfig(), api.node_kubeconfig_data()] {
        let text = std::fs::read_to_string(&kubeconfig).unwrap();
        assert!(text.contains(&format!("server: {}", api.url())), "{text}");
        let out = api.kubectl_as(&kubeconfig, &["get", "node", NODE, "-o", "name"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("node/{NODE}"));
    }
    assert!(std::fs::read_to_string(api.node_kubeconfig_data()).unwrap().contains("client-key-data: "));
    assert!(api.requests().iter().any(|r| r.user == node_user(NODE) && r.verb == "get"));
}

#[test]
fn a_client_without_credentials_gets_401_and_a_certificate_of_another_ca_fails_the_handshake() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig};
    let ca = Certificate::from_pem(&std::fs::read(api.ca_cert()).unwrap()).unwrap();
    let tls = TlsConfig::builder().root_certs(RootCerts::new_with_certs(std::slice::from_ref(&ca))).build();
    let agent: ureq::Agent = ureq::Agent::config_builder().tls_config(tls).http_status_as_error(false).build().into();
    let (code, body) = api.call(&agent, "GET", "/version", None);
    assert_eq!((code, body["reason"].as_str()), (401, Some("Unauthorized")), "{body}");

    let (cert, key) = api.other_ca_client_cert();
    let cert = Certificate::from_pem(&std::fs::read(cert).unwrap()).unwrap();
    let key = PrivateKey::from_pem(&std::fs::read(key).unwrap()).unwrap();
    let tls = TlsConfig::builder()
        .root_certs(RootCerts::new_with_certs(&[ca]))
        .client_cert(Some(ClientCert::new_with_certs(&[cert], key)))
        .build();
    let agent: ureq::Agent = ureq::Agent::config_builder().tls_config(tls).build().into();
    assert!(agent.get(&format!("{}/version", api.url())).call().is_err());
    common::wait_for("the handshake failure to be counted", STEP, || {
        (api.counters()["tls_handshake_failures"] == 1).then_some(())
    });
    assert_eq!(api.requests().len(), 1, "only the 401 was served");
}

#[test]
fn token_and_subject_access_reviews_answer_as_the_real_ones() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let agent = api.node_agent();
    let review = |token: &str| {
        let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}});
        let (code, answer) =
            api.call(&agent, "POST", "/apis/authentication.k8s.io/v1/tokenreviews", Some((JSON, &body)));
        assert_eq!(code, 201, "{answer}");
        answer["status"].clone()
    };
    api.add_token("alice-token", "alice", &["devs"]);
    let st = review("alice-token");
    assert_eq!(st["authenticated"], true, "{st}");
    assert_eq!(st["user"], json!({"username": "alice", "groups": ["devs", "system:authenticated"]}));
    let st = review("nobody");
    assert_eq!(st["authenticated"], false, "{st}");
    assert!(st["error"].as_str().is_some_and(|e| !e.is_empty()), "{st}");

    let sar = |user: &str, groups: &[&str], subresource: &str| {
        let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
            "resourceAttributes": {"verb": "get", "version": "v1", "resource": "nodes", "subresource": subresource,
                                   "name": NODE},
            "user": user, "groups": groups}});
        let (code, answer) =
            api.call(&agent, "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", Some((JSON, &body)));
        assert_eq!(code, 201, "{answer}");
        answer["status"]["allowed"].as_bool().unwrap()
    };
    assert!(sar("kube-apiserver-kubelet-client", &["kubeadm:cluster-admins"], "proxy"));
    assert!(!sar("alice", &["devs"], "proxy"));
    api.allow("alice", &["get", "create"], "nodes", "proxy");
    assert!(sar("alice", &["devs"], "proxy"));
    assert!(!sar("alice", &["devs"], "stats"));
    assert_eq!((api.token_reviews(), api.subject_access_reviews()), (2, 4));

    // Users other than nodes and admins may not ask.
    let (cert, key) = api.user_cert("bob", &["ops"]);
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "x"}});
    let (code, _) = api.call(
        &api.tls_agent(&cert, &key),
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        Some((JSON, &body)),
    );
    assert_eq!(code, 403);
    // kubectl as a token user: authenticated, then authorized by the rules.
    let kubeconfig = api.kubeconfig_for_token("alice", "alice-token");
    let out = api.kubectl_as(&kubeconfig, &["get", "pods"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("User \"alice\" cannot list"), "{out:?}");
    api.allow("alice", &["list"], "pods", "");
    let out = api.kubectl_as(&kubeconfig, &["get", "pods"]);
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn faults_down_failures_slowness_and_cut_watches_are_observable() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let agent = api.node_agent();
    register(&api);
    let node_path = format!("/api/v1/nodes/{NODE}");

    // Down: connections are refused, open watches drop; up: the same port serves again.
    let selector = format!("fieldSelector=spec.nodeName%3D{NODE}");
    let watch = WatchStream::open(&api, &agent, &format!("/api/v1/pods?{selector}&watch=true"));
    api.wait_for_watches(&node_user(NODE), 1, STEP);
    api.down();
    assert!(watch.next(STEP).is_err(), "the watch broke");
    let fresh = api.node_agent();
    assert!(fresh.get(&format!("{}{node_path}", api.url())).call().is_err(), "refused while down");
    api.up();
    assert_eq!(api.call(&fresh, "GET", &node_path, None).0, 200);

    // The next two requests fail with 500 and are logged as injected.
    api.fail_next(2, 500);
    let codes: Vec<u16> = (0..3).map(|_| api.call(&agent, "GET", &node_path, None).0).collect();
    assert_eq!(codes, [500, 500, 200]);
    let faulted: Vec<_> = api.requests().into_iter().filter(|r| r.fault.as_deref() == Some("fail:500")).collect();
    assert_eq!(faulted.len(), 2);
    // Served, then failed: the change is stored although the client saw a 503.
    api.fail_next_matching(1, 503, "/leases", true);
    let (code, _) = api.call(&agent, "POST", LEASES, Some((JSON, &lease_object(NODE, "2024-05-01T10:00:00.000000Z"))));
    assert_eq!(code, 503);
    assert!(api.lease(NODE).is_some());

    // Slow.
    api.slow(Duration::from_millis(300));
    let t = std::time::Instant::now();
    assert_eq!(api.call(&agent, "GET", &node_path, None).0, 200);
    assert!(t.elapsed() >= Duration::from_millis(300));
    api.slow(Duration::ZERO);

    // Cut mid-stream: the reader sees a broken stream, not a clean end.
    for (mode, clean) in [(CutMode::Abrupt, false), (CutMode::Partial, false), (CutMode::Clean, true)] {
        let watch = WatchStream::open(&api, &agent, &format!("/api/v1/pods?{selector}&watch=true"));
        api.wait_for_watches(&node_user(NODE), 1, STEP);
        assert_eq!(api.cut_watches(mode), 1);
        let end = watch.next(STEP);
        assert_eq!(end == Ok(None), clean, "{mode:?}: {end:?}");
        common::wait_for("the watch to close", STEP, || api.watches().is_empty().then_some(()));
    }
    let counters = api.counters();
    assert_eq!(counters["internal_errors"], 0, "{counters}");
    assert!(counters["by_verb"]["watch"].as_u64().unwrap() >= 4, "{counters}");
}

// ---- ConfigMaps, Secrets, service accounts and their tokens ---------------------------------

const CONFIG_MAPS: &str = "/api/v1/namespaces/default/configmaps";
const SECRETS: &str = "/api/v1/namespaces/default/secrets";
const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// A pod bound to `node` that reads ConfigMap `cm` (a volume and an env var), Secret
/// `secret` (an env var) and pulls its image with Secret `pull`.
fn pod_using(name: &str, node: &str, cm: &str, secret: &str, pull: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"nodeName": node, "serviceAccountName": "default", "imagePullSecrets": [{"name": pull}],
                    "volumes": [{"name": "config", "configMap": {"name": cm}}],
                    "containers": [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "3600"],
                                    "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}],
                                    "env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": secret, "key": "password"}}},
                                            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": cm, "key": "mode"}}}]}]}})
}

/// The 403 the Node authorizer's denial gets, as the apiserver words it.
fn forbidden(resource: &str, name: &str, verb: &str, why: &str) -> String {
    let target = if name.is_empty() { resource.to_string() } else { format!("{resource} \"{name}\"") };
    format!(
        "{target} is forbidden: User \"{}\" cannot {verb} resource \"{resource}\" in API group \"\" in the namespace \"default\": {why}",
        node_user(NODE)
    )
}

fn no_relationship() -> String {
    format!("no relationship found between node '{NODE}' and this object")
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

/// A TokenRequest for service account `sa`'s token bound to `pod` (name, uid), if any.
fn token_request(expiration: u64, pod: Option<&Value>) -> Value {
    let mut tr = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                        "spec": {"expirationSeconds": expiration}});
    if let Some(p) = pod {
        tr["spec"]["boundObjectRef"] = json!({"kind": "Pod", "apiVersion": "v1", "name": p["metadata"]["name"],
                                              "uid": p["metadata"]["uid"]});
    }
    tr
}

#[test]
fn node_reads_the_config_maps_and_secrets_its_pods_use_and_nothing_else() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let agent = api.node_agent();
    register(&api);
    api.create_config_map("default", "app-config", &json!({"mode": "fast"}));
    api.create_config_map("default", "unrelated", &json!({"x": "y"}));
    api.create_secret("default", "app-secret", "Opaque", &[("password", b"hunter2")]);
    api.create_secret("default", "unrelated", "Opaque", &[("password", b"not yours")]);
    let pull = br#"{"auths": {"registry.example": {"auth": "dTpw"}}}"#;
    api.create_secret("default", "pull", "kubernetes.io/dockerconfigjson", &[(".dockerconfigjson", pull)]);
    api.create_config_map("default", "theirs", &json!({"x": "y"}));
    let mut web = pod_using("web", NODE, "app-config", "app-secret", "pull");
    web["spec"]["containers"][0]["envFrom"] = json!([{"configMapRef": {"name": "later", "optional": true}}]);
    api.create_pod("default", &web);
    api.create_pod("default", &pod_using("elsewhere", "edge-2", "theirs", "unrelated", "pull"));

    // What its pod references: a volume and configMapKeyRef, secretKeyRef, imagePullSecrets.
    let (code, cm) = api.call(&agent, "GET", &format!("{CONFIG_MAPS}/app-config"), None);
    assert_eq!((code, cm["data"]["mode"].as_str()), (200, Some("fast")), "{cm}");
    let (code, secret) = api.call(&agent, "GET", &format!("{SECRETS}/app-secret"), None);
    assert_eq!((code, secret["data"]["password"].as_str()), (200, Some("aHVudGVyMg==")), "{secret}");
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(api.call(&agent, "GET", &format!("{SECRETS}/pull"), None).0, 200);
    // Referenced but not there (yet): the node may ask, and hears 404; not referenced: 403.
    let (code, status) = api.call(&agent, "GET", &format!("{CONFIG_MAPS}/later"), None);
    assert_eq!((code, status["reason"].as_str()), (404, Some("NotFound")), "{status}");
    let (code, status) = api.call(&agent, "GET", &format!("{SECRETS}/missing"), None);
    assert_eq!(code, 403, "{status}");

    // Anything else: 403, as the Node authorizer words it, another node's pod's ConfigMap too.
    for (resource, path, name) in [
        ("configmaps", CONFIG_MAPS, "unrelated"),
        ("secrets", SECRETS, "unrelated"),
        ("configmaps", CONFIG_MAPS, "theirs"),
    ] {
        let (code, status) = api.call(&agent, "GET", &format!("{path}/{name}"), None);
        assert_eq!(code, 403, "{status}");
        assert_eq!(status["message"], forbidden(resource, name, "get", &no_relationship()), "{status}");
        assert_eq!((status["kind"].as_str(), status["reason"].as_str()), (Some("Status"), Some("Forbidden")));
    }
    // A list or watch names one object (fieldSelector metadata.name) in one namespace.
    let (code, status) = api.call(&agent, "GET", CONFIG_MAPS, None);
    assert_eq!(
        (code, status["message"].as_str()),
        (403, Some(forbidden("configmaps", "", "list", "No Object name found").as_str()))
    );
    let (code, status) = api.call(&agent, "GET", "/api/v1/secrets?fieldSelector=metadata.name%3Dapp-secret", None);
    assert_eq!(code, 403, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .ends_with("at the cluster scope: can only read namespaced object of this type"),
        "{status}"
    );
    let (code, list) =
        api.call(&agent, "GET", &format!("{CONFIG_MAPS}?fieldSelector=metadata.name%3Dapp-config"), None);
    assert_eq!((code, list["kind"].as_str()), (200, Some("ConfigMapList")), "{list}");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let (code, status) = api.call(&agent, "GET", &format!("{SECRETS}?fieldSelector=metadata.name%3Dunrelated"), None);
    assert_eq!(
        (code, status["message"].as_str()),
        (403, Some(forbidden("secrets", "unrelated", "list", &no_relationship()).as_str()))
    );
    // Never a write.
    let (code, status) = api.call(&agent, "PUT", &format!("{CONFIG_MAPS}/app-config"), Some((JSON, &cm)));
    assert_eq!(
        (code, status["message"].as_str()),
        (403, Some(forbidden("configmaps", "app-config", "update", "can only read resources of this type").as_str()))
    );
    let new = json!({"metadata": {"name": "mine"}, "data": {}});
    assert_eq!(api.call(&agent, "POST", CONFIG_MAPS, Some((JSON, &new))).0, 403);
    assert_eq!(api.call(&agent, "DELETE", &format!("{SECRETS}/app-secret"), None).0, 403);

    // Once the pod is gone, so is the access (graceful: still there while terminating).
    api.delete_pod("default", "web", None);
    assert_eq!(api.call(&agent, "GET", &format!("{CONFIG_MAPS}/app-config"), None).0, 200, "terminating");
    api.delete_pod("default", "web", Some(0));
    let (code, status) = api.call(&agent, "GET", &format!("{CONFIG_MAPS}/app-config"), None);
    assert_eq!(
        (code, status["message"].as_str()),
        (403, Some(forbidden("configmaps", "app-config", "get", &no_relationship()).as_str()))
    );
    assert_eq!(api.call(&agent, "GET", &format!("{SECRETS}/app-secret"), None).0, 403);
}

#[test]
fn node_watches_a_config_map_its_pod_uses_by_name() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let agent = api.node_agent();
    // A projected volume's ConfigMap, which does not exist yet.
    let mut pod = pod_object("web", NODE);
    pod["spec"]["volumes"] = json!([{"name": "p", "projected": {"sources": [{"configMap": {"name": "late"}}]}}]);
    api.create_pod("default", &pod);
    let one = format!("{CONFIG_MAPS}?fieldSelector=metadata.name%3Dlate");
    let (code, list) = api.call(&agent, "GET", &one, None);
    assert_eq!((code, list["items"].as_array().map(Vec::len)), (200, Some(0)), "{list}");
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap();
    let watch = WatchStream::open(&api, &agent, &format!("{one}&watch=true&resourceVersion={rv}"));
    assert_eq!(watch.status, 200);
    api.wait_for_watches(&node_user(NODE), 1, STEP);

    api.create_config_map("default", "other", &json!({"a": "1"})); // another name: never seen
    api.create_config_map("default", "late", &json!({"a": "1"}));
    let ev = watch.event(STEP);
    assert_eq!((ev["type"].as_str(), ev["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("late")), "{ev}");
    let updated = api.update_config_map("default", "late", &json!({"a": "2"}));
    assert_eq!(updated["data"], json!({"a": "2"}));
    let ev = watch.event(STEP);
    assert_eq!((ev["type"].as_str(), ev["object"]["data"]["a"].as_str()), (Some("MODIFIED"), Some("2")), "{ev}");
    assert_eq!(ev["object"]["metadata"]["resourceVersion"], updated["metadata"]["resourceVersion"]);

    // Without the name, or for a name no pod of its uses, the watch is refused.
    let watch = WatchStream::open(&api, &agent, &format!("{CONFIG_MAPS}?watch=true"));
    assert_eq!(watch.status, 403);
    let watch =
        WatchStream::open(&api, &agent, &format!("{CONFIG_MAPS}?fieldSelector=metadata.name%3Dother&watch=true"));
    assert_eq!(watch.status, 403);
}

#[test]
fn node_gets_a_signed_token_bound_to_its_pod_and_403_for_others() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let agent = api.node_agent();
    let node = register(&api);
    let mut web = pod_object("web", NODE);
    web["spec"]["serviceAccountName"] = json!("default");
    let web = api.create_pod("default", &web);
    let sa = api.service_account("default", "default").unwrap();
    let tokens = "/api/v1/namespaces/default/serviceaccounts/default/token";

    let before = unix_now();
    let (code, tr) = api.call(&agent, "POST", tokens, Some((JSON, &token_request(3607, Some(&web)))));
    assert_eq!(code, 201, "{tr}");
    assert_eq!(
        (tr["kind"].as_str(), tr["apiVersion"].as_str()),
        (Some("TokenRequest"), Some("authentication.k8s.io/v1"))
    );
    assert_eq!(tr["spec"]["audiences"], json!([ISSUER]), "the apiserver's audiences by default");
    let token = tr["status"]["token"].as_str().unwrap();
    assert_eq!(token.split('.').count(), 3);
    let claims = api.jwt_claims(token); // the signature verifies against sa.pub
    let iat = claims["iat"].as_u64().unwrap();
    assert!(iat >= before && iat <= unix_now(), "{claims}");
    assert_eq!(
        (claims["nbf"].as_u64(), claims["exp"].as_u64()),
        (Some(iat), Some(iat + 3607)),
        "not extended: {claims}"
    );
    let expires = ferrolet::base::timefmt::rfc3339(std::time::UNIX_EPOCH + Duration::from_secs(iat + 3607));
    assert_eq!(tr["status"]["expirationTimestamp"], expires.as_str());
    assert_eq!(claims["aud"], json!([ISSUER]));
    assert_eq!(
        (claims["iss"].as_str(), claims["sub"].as_str()),
        (Some(ISSUER), Some("system:serviceaccount:default:default"))
    );
    assert_eq!(claims["jti"].as_str().map(str::len), Some(36), "a uuid: {claims}");
    assert_eq!(
        claims["kubernetes.io"],
        json!({"namespace": "default",
               "node": {"name": NODE, "uid": node["metadata"]["uid"]},
               "pod": {"name": "web", "uid": web["metadata"]["uid"]},
               "serviceaccount": {"name": "default", "uid": sa["metadata"]["uid"]}})
    );
    // A token altered after signing is not one of this server's.
    let forged = token.replacen('.', ".e30", 1);
    assert!(api.jwt_signed_here(token) && !api.jwt_signed_here(&forged));
    let issued = api.tokens_issued();
    assert_eq!(issued.len(), 1, "{issued:?}");
    assert_eq!(
        (issued[0]["pod"].as_str(), issued[0]["pod_uid"].as_str()),
        (Some("web"), web["metadata"]["uid"].as_str())
    );
    assert_eq!((issued[0]["serviceaccount"].as_str(), issued[0]["exp"].as_u64()), (Some("default"), Some(iat + 3607)));

    // Bound to another node's pod, or to nothing: NodeRestriction says no.
    let mut theirs = pod_object("theirs", "edge-2");
    theirs["spec"]["serviceAccountName"] = json!("default");
    let theirs = api.create_pod("default", &theirs);
    for (tr, why) in [
        (token_request(3600, Some(&theirs)), "node requested token bound to a pod scheduled on a different node"),
        (token_request(3600, None), "node requested token not bound to a pod"),
    ] {
        let (code, status) = api.call(&agent, "POST", tokens, Some((JSON, &tr)));
        assert_eq!(code, 403, "{status}");
        assert_eq!(status["message"], format!("serviceaccounts \"default\" is forbidden: {why}"));
    }
    let mut stale = token_request(3600, Some(&web));
    stale["spec"]["boundObjectRef"]["uid"] = json!("00000000-0000-0000-0000-000000000000");
    let (code, status) = api.call(&agent, "POST", tokens, Some((JSON, &stale)));
    assert_eq!(code, 403, "{status}");
    assert!(status["message"].as_str().unwrap().contains("does not match the UID in record"), "{status}");
    // A service account none of its pods runs as: the Node authorizer says no.
    api.create("/api/v1/namespaces/default/serviceaccounts", &json!({"metadata": {"name": "builder"}}));
    let (code, status) = api.call(
        &agent,
        "POST",
        "/api/v1/namespaces/default/serviceaccounts/builder/token",
        Some((JSON, &token_request(3600, Some(&web)))),
    );
    assert_eq!(code, 403, "{status}");
    assert_eq!(
        status["message"],
        format!("serviceaccounts \"builder\" is forbidden: User \"{}\" cannot create resource \"serviceaccounts/token\" in API group \"\" in the namespace \"default\": {}", node_user(NODE), no_relationship())
    );
    // Less than ten minutes: 422 Invalid, as ValidateTokenRequest answers.
    let (code, status) = api.call(&agent, "POST", tokens, Some((JSON, &token_request(599, Some(&web)))));
    assert_eq!((code, status["reason"].as_str()), (422, Some("Invalid")), "{status}");
    assert_eq!(
        status["message"],
        "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"
    );
    assert_eq!(api.tokens_issued().len(), 1, "no token for a refused request");
    // The node may read the service account its pod runs as, and no other.
    assert_eq!(api.call(&agent, "GET", "/api/v1/namespaces/default/serviceaccounts/default", None).0, 200);
    assert_eq!(api.call(&agent, "GET", "/api/v1/namespaces/default/serviceaccounts/builder", None).0, 403);
    api.assert_no_validation_failures();
}

#[test]
fn service_account_admission_mounts_the_token_volume_and_extended_tokens_last_a_year() {
    let options = Options { service_account_admission: true, extend_token_expiration: true, ..Options::default() };
    let Some(api) = FakeApiserver::start_with(NODE, options) else { return };
    let agent = api.node_agent();
    let mut pod = pod_object("web", NODE);
    pod["spec"]["initContainers"] = json!([{"name": "init", "image": "busybox:1.36", "command": ["true"]}]);
    let web = api.create_pod("default", &pod);
    let spec = &web["spec"];
    assert_eq!(
        (spec["serviceAccountName"].as_str(), spec["serviceAccount"].as_str()),
        (Some("default"), Some("default"))
    );
    let volumes = spec["volumes"].as_array().unwrap();
    assert_eq!(volumes.len(), 1, "{spec}");
    let name = volumes[0]["name"].as_str().unwrap();
    let suffix = name.strip_prefix("kube-api-access-").unwrap();
    assert!(suffix.len() == 5 && suffix.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()), "{name}");
    assert_eq!(
        volumes[0],
        json!({"name": name, "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace",
                                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}})
    );
    let mount = json!([{"name": name, "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]);
    assert_eq!((&spec["containers"][0]["volumeMounts"], &spec["initContainers"][0]["volumeMounts"]), (&mount, &mount));

    // No volume when the pod or its service account says so, none in a container with its own mount.
    let mut off = pod_object("off", NODE);
    off["spec"]["automountServiceAccountToken"] = json!(false);
    assert!(api.create_pod("default", &off)["spec"].get("volumes").is_none());
    api.create(
        "/api/v1/namespaces/default/serviceaccounts",
        &json!({"metadata": {"name": "quiet"}, "automountServiceAccountToken": false}),
    );
    let mut quiet = pod_object("quiet", NODE);
    quiet["spec"]["serviceAccountName"] = json!("quiet");
    assert!(api.create_pod("default", &quiet)["spec"].get("volumes").is_none());
    let mut own = pod_object("own", NODE);
    own["spec"]["volumes"] = json!([{"name": "mine", "emptyDir": {}}]);
    own["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "mine", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]);
    let own = api.create_pod("default", &own);
    assert_eq!(own["spec"]["volumes"].as_array().unwrap().len(), 1, "{own}");
    // A service account that is not there: the admission plugin refuses the pod.
    let mut lost = pod_object("lost", NODE);
    lost["spec"]["serviceAccountName"] = json!("missing");
    let (code, status) = api.api("POST", "/api/v1/namespaces/default/pods", Some(&lost));
    assert_eq!((code, status["reason"].as_str()), (403, Some("Forbidden")), "{status}");
    assert_eq!(status["message"], "pods \"lost\" is forbidden: error looking up service account default/missing: serviceaccount \"missing\" not found");

    // What the kubelet does with the volume: kube-root-ca.crt (the node may read it now) and a
    // 3607 s token, which the apiserver makes valid for a year with warnafter at 3607 s.
    let (code, ca) = api.call(&agent, "GET", &format!("{CONFIG_MAPS}/kube-root-ca.crt"), None);
    assert_eq!(code, 200, "{ca}");
    assert_eq!(ca["data"]["ca.crt"].as_str().unwrap(), std::fs::read_to_string(api.ca_cert()).unwrap());
    let tokens = "/api/v1/namespaces/default/serviceaccounts/default/token";
    let (code, tr) = api.call(&agent, "POST", tokens, Some((JSON, &token_request(3607, Some(&web)))));
    assert_eq!(code, 201, "{tr}");
    let claims = api.jwt_claims(tr["status"]["token"].as_str().unwrap());
    let iat = claims["iat"].as_u64().unwrap();
    assert_eq!(claims["exp"].as_u64(), Some(iat + 365 * 24 * 3600), "{claims}");
    assert_eq!(claims["kubernetes.io"]["warnafter"].as_u64(), Some(iat + 3607), "{claims}");
    let expires = ferrolet::base::timefmt::rfc3339(std::time::UNIX_EPOCH + Duration::from_secs(iat + 3607));
    assert_eq!(tr["status"]["expirationTimestamp"], expires.as_str(), "the status tells the asked-for expiry");
    // Any other duration is what was asked.
    let (_, tr) = api.call(&agent, "POST", tokens, Some((JSON, &token_request(3600, Some(&web)))));
    let claims = api.jwt_claims(tr["status"]["token"].as_str().unwrap());
    assert_eq!(claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(), 3600);
    assert!(claims["kubernetes.io"].get("warnafter").is_none(), "{claims}");
    let renewals: Vec<u64> =
        api.tokens_issued().iter().map(|t| t["exp"].as_u64().unwrap() - t["iat"].as_u64().unwrap()).collect();
    assert_eq!(renewals, [365 * 24 * 3600, 3600]);
    api.assert_no_validation_failures();
}

#[test]
fn every_namespace_has_a_default_service_account_and_kube_root_ca() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let ca = std::fs::read_to_string(api.ca_cert()).unwrap();
    api.create("/api/v1/namespaces", &json!({"metadata": {"name": "team"}}));
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease", "team"] {
        let sa = api.service_account(ns, "default").unwrap_or_else(|| panic!("no default service account in {ns}"));
        assert!(sa["metadata"]["uid"].as_str().is_some_and(|u| u.len() == 36), "{sa}");
        let cm = api.config_map(ns, "kube-root-ca.crt").unwrap_or_else(|| panic!("no kube-root-ca.crt in {ns}"));
        assert_eq!(cm["data"], json!({"ca.crt": ca}), "{ns}");
        assert!(cm["metadata"]["annotations"]["kubernetes.io/description"].is_string());
    }
    // The controllers put back what is deleted or changed.
    let old = api.config_map("default", "kube-root-ca.crt").unwrap();
    api.delete_object("/api/v1/namespaces/default/configmaps/kube-root-ca.crt");
    let new = api.config_map("default", "kube-root-ca.crt").unwrap();
    assert_ne!(new["metadata"]["uid"], old["metadata"]["uid"]);
    api.update_config_map("default", "kube-root-ca.crt", &json!({"ca.crt": "forged"}));
    assert_eq!(api.config_map("default", "kube-root-ca.crt").unwrap()["data"]["ca.crt"].as_str(), Some(ca.as_str()));
    api.delete_object("/api/v1/namespaces/team/serviceaccounts/default");
    assert!(api.service_account("team", "default").is_some());
}

#[test]
fn config_maps_and_secrets_are_validated_as_the_apiserver_does() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let key_rule = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";
    let cases = [
        (
            CONFIG_MAPS,
            json!({"metadata": {"name": "bad"}, "data": {"bad key": "x"}}),
            format!("ConfigMap \"bad\" is invalid: data[bad key]: Invalid value: \"bad key\": {key_rule}"),
        ),
        (
            CONFIG_MAPS,
            json!({"metadata": {"name": "both"}, "data": {"k": "x"}, "binaryData": {"k": "eA=="}}),
            "ConfigMap \"both\" is invalid: data[k]: Invalid value: \"k\": duplicate of key present in binaryData"
                .into(),
        ),
        (
            CONFIG_MAPS,
            json!({"metadata": {"name": "big"}, "data": {"a": "x".repeat(1 << 19), "b": "y".repeat((1 << 19) + 1)}}),
            "ConfigMap \"big\" is invalid: []: Too long: must have at most 1048576 bytes".into(),
        ),
        (
            SECRETS,
            json!({"metadata": {"name": "big"}, "data": {"a": base64_of(&vec![0u8; (1 << 20) + 1])}}),
            "Secret \"big\" is invalid: data: Too long: must have at most 1048576 bytes".into(),
        ),
        (
            SECRETS,
            json!({"metadata": {"name": "bad"}, "data": {"-/x": "eA=="}}),
            format!("Secret \"bad\" is invalid: data[-/x]: Invalid value: \"-/x\": {key_rule}"),
        ),
        (
            SECRETS,
            json!({"metadata": {"name": "reg"}, "type": "kubernetes.io/dockerconfigjson", "data": {"config": "e30="}}),
            "Secret \"reg\" is invalid: data[.dockerconfigjson]: Required value".into(),
        ),
        (
            SECRETS,
            json!({"metadata": {"name": "cfg"}, "type": "kubernetes.io/dockercfg", "data": {}}),
            "Secret \"cfg\" is invalid: data[.dockercfg]: Required value".into(),
        ),
    ];
    for (path, obj, message) in cases {
        let (code, status) = api.api("POST", path, Some(&obj));
        assert_eq!((code, status["reason"].as_str()), (422, Some("Invalid")), "{status}");
        assert_eq!(status["message"], message.as_str());
    }
    // Exactly 1 MiB is allowed; a Secret's data must be base64 (the decoder says 400).
    api.create(CONFIG_MAPS, &json!({"metadata": {"name": "full"}, "data": {"a": "x".repeat(1 << 20)}}));
    let (code, status) =
        api.api("POST", SECRETS, Some(&json!({"metadata": {"name": "raw"}, "data": {"a": "not base64!"}})));
    assert_eq!((code, status["reason"].as_str()), (400, Some("BadRequest")), "{status}");
    assert!(status["message"]
        .as_str()
        .unwrap()
        .starts_with("Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data"));
    // Defaults: type Opaque; stringData goes into data.
    let s = api.create(SECRETS, &json!({"metadata": {"name": "plain"}, "stringData": {"user": "bob"}}));
    assert_eq!((s["type"].as_str(), s["data"]["user"].as_str()), (Some("Opaque"), Some("Ym9i")), "{s}");
    assert!(s.get("stringData").is_none());
    let reg = br#"{"auths": {}}"#;
    api.create_secret("default", "reg", "kubernetes.io/dockerconfigjson", &[(".dockerconfigjson", reg)]);

    // Immutable: data and immutable itself stay; a Secret's type never changes.
    api.create(CONFIG_MAPS, &json!({"metadata": {"name": "frozen"}, "data": {"a": "1"}, "immutable": true}));
    let path = format!("{CONFIG_MAPS}/frozen");
    let (code, status) = api.api("PATCH", &path, Some(&json!({"data": {"a": "2"}})));
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        "ConfigMap \"frozen\" is invalid: data: Forbidden: field is immutable when `immutable` is set"
    );
    let (code, status) = api.api("PATCH", &path, Some(&json!({"immutable": false})));
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        "ConfigMap \"frozen\" is invalid: immutable: Forbidden: field is immutable when `immutable` is set"
    );
    let (code, _) = api.api("PATCH", &path, Some(&json!({"metadata": {"labels": {"app": "x"}}})));
    assert_eq!(code, 200, "metadata may change");
    let (code, status) =
        api.api("PATCH", &format!("{SECRETS}/plain"), Some(&json!({"type": "kubernetes.io/service-account-token"})));
    assert_eq!(code, 422, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("type: Invalid value: \"kubernetes.io/service-account-token\": field is immutable"),
        "{status}"
    );
}

fn base64_of(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

// ---- TLS bootstrap: bootstrap tokens, CSRs, csrapproving and csrsigning --------------------------

const CLIENT_USAGES: [&str; 3] = ["digital signature", "key encipherment", "client auth"];
const SERVING_USAGES: [&str; 3] = ["digital signature", "key encipherment", "server auth"];
/// How long the controllers may take over a CSR (openssl signs in a few milliseconds).
const SIGNING: Duration = Duration::from_secs(10);
const YEAR: u64 = 365 * 24 * 3600;
const BACKDATE: u64 = 300;

/// A CSR named `name` for `signer` with a new request for `subject` (and `san`), asking for
/// `usages` and, if given, `expiration` seconds.
fn csr_object(
    name: &str,
    signer: &str,
    subject: &str,
    san: Option<&str>,
    usages: &[&str],
    expiration: Option<u64>,
) -> Value {
    let (request, _key) = openssl_csr(subject, san);
    let mut csr = json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
                         "metadata": {"name": name},
                         "spec": {"request": base64_of(request.as_bytes()), "signerName": signer, "usages": usages}});
    if let Some(seconds) = expiration {
        csr["spec"]["expirationSeconds"] = json!(seconds);
    }
    csr
}

fn node_client_csr(name: &str, expiration: Option<u64>) -> Value {
    let subject = format!("/O=system:nodes/CN={}", node_user(NODE));
    csr_object(name, KUBELET_CLIENT_SIGNER, &subject, None, &CLIENT_USAGES, expiration)
}

fn create_csr(api: &FakeApiserver, agent: &ureq::Agent, csr: &Value) -> Value {
    let (code, created) = api.call(agent, "POST", CSRS, Some((JSON, csr)));
    assert_eq!(code, 201, "{created}");
    created
}

fn issued(csr: &Value) -> bool {
    csr["status"]["certificate"].is_string()
}

fn condition_types(csr: &Value) -> Vec<String> {
    let conditions = csr["status"]["conditions"].as_array().cloned().unwrap_or_default();
    conditions.iter().map(|c| c["type"].as_str().unwrap_or_default().to_string()).collect()
}

/// What /control/csrs says of CSR `name`.
fn report(api: &FakeApiserver, name: &str) -> Value {
    api.csrs().into_iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("CSR {name} not reported"))
}

/// `openssl verify` of the certificate CSR `csr` was issued against the cluster CA.
fn assert_verifies_against_the_ca(api: &FakeApiserver, csr: &Value) {
    let pem = base64::engine::general_purpose::STANDARD.decode(csr["status"]["certificate"].as_str().unwrap()).unwrap();
    let path = api.dir().join(format!("{}.crt", csr["metadata"]["name"].as_str().unwrap()));
    std::fs::write(&path, pem).unwrap();
    let out = std::process::Command::new("openssl")
        .arg("verify")
        .arg("-CAfile")
        .arg(api.ca_cert())
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn validity_seconds(cert: &Value) -> u64 {
    cert["notAfterUnix"].as_u64().unwrap() - cert["notBeforeUnix"].as_u64().unwrap()
}

#[test]
fn a_bootstrap_token_authenticates_as_system_bootstrap_and_may_post_csrs_but_not_list_pods() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let token = api.create_bootstrap_token(None, Duration::from_secs(600));
    let id = token.split('.').next().unwrap();
    let user = format!("system:bootstrap:{id}");
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}});
    let (code, answer) =
        api.call(&api.node_agent(), "POST", "/apis/authentication.k8s.io/v1/tokenreviews", Some((JSON, &review)));
    assert_eq!(code, 201, "{answer}");
    assert_eq!(
        answer["status"]["user"],
        json!({"username": user, "groups": ["system:bootstrappers", KUBEADM_NODE_TOKEN_GROUP, "system:authenticated"]})
    );

    let agent = api.bearer_agent(&token);
    let (code, status) = api.call(&agent, "GET", "/api/v1/pods", None);
    assert_eq!(code, 403, "{status}");
    assert_eq!(
        status["message"],
        format!(
            "pods is forbidden: User \"{user}\" cannot list resource \"pods\" in API group \"\" at the cluster scope"
        )
    );
    // kubeadm:get-nodes: a Node by name (404 while there is none), but not the list.
    assert_eq!(api.call(&agent, "GET", &format!("/api/v1/nodes/{NODE}"), None).0, 404);
    assert_eq!(api.call(&agent, "GET", "/api/v1/nodes", None).0, 403);

    // The requester fields are the caller's, whatever the request says.
    let mut csr = node_client_csr("node-csr-1", None);
    csr["spec"]["username"] = json!("kubernetes-admin");
    csr["spec"]["groups"] = json!(["system:masters"]);
    csr["spec"]["extra"] = json!({"scopes": ["all"]});
    csr["status"] = json!({"conditions": [{"type": "Approved", "status": "True", "reason": "Mine"}]});
    let created = create_csr(&api, &agent, &csr);
    assert_eq!(created["spec"]["username"], user.as_str());
    assert_eq!(
        created["spec"]["groups"],
        json!(["system:bootstrappers", KUBEADM_NODE_TOKEN_GROUP, "system:authenticated"])
    );
    assert!(created["spec"]["extra"].is_null() && created["spec"]["uid"].is_null(), "{created}");
    assert_eq!(created["status"], json!({}), "nobody creates an approved request");
    let (code, _) = api.call(&agent, "GET", &format!("{CSRS}/node-csr-1"), None);
    assert_eq!(code, 200);

    // kubectl with the kubeconfig kubeadm would write for the kubelet.
    let kubeconfig = api.bootstrap_kubeconfig(&token);
    let out = api.kubectl_as(&kubeconfig, &["get", "csr", "-o", "name"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "certificatesigningrequest.certificates.k8s.io/node-csr-1");
    let out = api.kubectl_as(&kubeconfig, &["get", "pods"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("User \"{user}\" cannot list")), "{out:?}");
}

#[test]
fn expired_wrong_and_unusable_bootstrap_tokens_get_401_and_expired_ones_are_cleaned_up() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let token = api.create_bootstrap_token(None, Duration::from_secs(600));
    let id = token.split('.').next().unwrap();
    let get_csrs = |token: &str| api.call(&api.bearer_agent(token), "GET", CSRS, None);
    assert_eq!(get_csrs(&token).0, 200);
    for bad in [format!("{id}.0000000000000000"), "zzzzzz.0123456789abcdef".to_string(), format!("{token}x")] {
        let (code, status) = get_csrs(&bad);
        assert_eq!((code, status["reason"].as_str()), (401, Some("Unauthorized")), "{bad}: {status}");
    }
    // A token not marked for authentication (only for signing cluster-info) does not log in.
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
                        "metadata": {"name": "bootstrap-token-signer", "namespace": "kube-system"},
                        "stringData": {"token-id": "signer", "token-secret": "0123456789abcdef",
                                       "usage-bootstrap-signing": "true"}});
    api.create("/api/v1/namespaces/kube-system/secrets", &secret);
    assert_eq!(get_csrs("signer.0123456789abcdef").0, 401);

    // Expired: 401, and the token cleaner deletes its Secret.
    let short = api.create_bootstrap_token(None, Duration::from_secs(4));
    assert_eq!(get_csrs(&short).0, 200);
    common::wait_for("the short token to expire", Duration::from_secs(10), || {
        (get_csrs(&short).0 == 401).then_some(())
    });
    let name = format!("bootstrap-token-{}", short.split('.').next().unwrap());
    common::wait_for("the token cleaner", STEP, || api.secret("kube-system", &name).is_none().then_some(()));
    assert!(api.secret("kube-system", "bootstrap-token-signer").is_some(), "a token without expiration stays");
    assert_eq!(get_csrs(&token).0, 200);
}

#[test]
fn a_bootstrappers_kubelet_client_csr_is_auto_approved_and_signed_with_the_requested_identity() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let token = api.create_bootstrap_token(None, Duration::from_secs(600));
    let agent = api.bearer_agent(&token);
    // What client-go's csr.WaitForCertificate does: a watch on the one name.
    let (_, list) = api.call(&agent, "GET", &format!("{CSRS}?fieldSelector=metadata.name%3Dnode-csr-1"), None);
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let watch = WatchStream::open(
        &api,
        &agent,
        &format!("{CSRS}?fieldSelector=metadata.name%3Dnode-csr-1&watch=true&resourceVersion={rv}&timeoutSeconds=30"),
    );
    assert_eq!(watch.status, 200);
    create_csr(&api, &agent, &node_client_csr("other", None)); // not this watch's
    let created = create_csr(&api, &agent, &node_client_csr("node-csr-1", None));
    let before = unix_now();

    let ev = watch.event(SIGNING);
    assert_eq!((ev["type"].as_str(), ev["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("node-csr-1")));
    let ev = watch.event(SIGNING);
    assert_eq!(ev["type"], "MODIFIED");
    let approved = &ev["object"]["status"]["conditions"][0];
    assert_eq!(
        (
            approved["type"].as_str(),
            approved["status"].as_str(),
            approved["reason"].as_str(),
            approved["message"].as_str()
        ),
        (
            Some("Approved"),
            Some("True"),
            Some("AutoApproved"),
            Some("Auto approving kubelet client certificate after SubjectAccessReview.")
        )
    );
    assert!(approved["lastUpdateTime"].is_string() && approved["lastTransitionTime"].is_string(), "{approved}");
    let ev = watch.event(SIGNING);
    assert_eq!(ev["type"], "MODIFIED");
    assert!(issued(&ev["object"]), "{ev}");
    assert_eq!(ev["object"]["metadata"]["uid"], created["metadata"]["uid"]);
    assert_verifies_against_the_ca(&api, &ev["object"]);

    let cert = report(&api, "node-csr-1")["certificate"].clone();
    assert_eq!(cert["subject"], format!("/O=system:nodes/CN={}", node_user(NODE)));
    assert_eq!(cert["keyUsage"], json!(["Digital Signature", "Key Encipherment"]));
    assert_eq!(cert["extendedKeyUsage"], json!(["TLS Web Client Authentication"]));
    assert_eq!((cert["isCA"].as_bool(), cert["sans"].as_array().map(Vec::len)), (Some(false), Some(0)));
    // --cluster-signing-duration (a year): backdated 5 minutes, and a year from then.
    let not_before = cert["notBeforeUnix"].as_u64().unwrap();
    assert!(not_before + BACKDATE >= before - 5 && not_before + BACKDATE <= unix_now(), "{cert}");
    assert_eq!(validity_seconds(&cert), YEAR);

    let counters = api.counters();
    assert_eq!(
        [&counters["csr_created"], &counters["csr_approved"], &counters["csr_signed"], &counters["csr_denied"]],
        [2, 2, 2, 0],
        "{counters}"
    );
    assert_eq!(counters["controller_errors"], 0);
}

#[test]
fn expiration_seconds_under_600_is_invalid_900_is_honoured_and_more_than_the_signing_duration_is_clamped() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let agent = api.node_agent();
    let (code, status) = api.call(&agent, "POST", CSRS, Some((JSON, &node_client_csr("short", Some(599)))));
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        "CertificateSigningRequest.certificates.k8s.io \"short\" is invalid: spec.expirationSeconds: Invalid value: 599: \
         may not specify a duration less than 600 seconds (10 minutes)"
    );

    // A node's own client CSR is approved through kubeadm's selfnodeclient binding.
    let signed = |name: &str| api.wait_for_csr(name, "issued", SIGNING, issued);
    create_csr(&api, &agent, &node_client_csr("fifteen-minutes", Some(900)));
    let csr = signed("fifteen-minutes");
    assert_eq!(
        csr["status"]["conditions"][0]["message"],
        "Auto approving self kubelet client certificate after SubjectAccessReview."
    );
    // Short-lived (under 8 h): NotAfter = now + 900, NotBefore = now - 5 min.
    assert_eq!(validity_seconds(&report(&api, "fifteen-minutes")["certificate"]), 900 + BACKDATE);

    api.set_signing_duration(Duration::from_secs(2 * 3600));
    create_csr(&api, &agent, &node_client_csr("a-day", Some(24 * 3600)));
    signed("a-day");
    assert_eq!(validity_seconds(&report(&api, "a-day")["certificate"]), 2 * 3600 + BACKDATE);

    // A signing duration under 10 minutes (the tests' rotations): expirationSeconds' floor of
    // 600 does not lift it.
    api.set_signing_duration(Duration::from_secs(120));
    create_csr(&api, &agent, &node_client_csr("default-ttl", None));
    create_csr(&api, &agent, &node_client_csr("ten-minutes", Some(600)));
    for name in ["default-ttl", "ten-minutes"] {
        signed(name);
        assert_eq!(validity_seconds(&report(&api, name)["certificate"]), 120 + BACKDATE, "{name}");
    }
}

#[test]
fn serving_csrs_stay_pending_until_approved_and_are_signed_with_their_alt_names() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let agent = api.node_agent();
    let subject = format!("/O=system:nodes/CN={}", node_user(NODE));
    let csr = csr_object(
        "serving-1",
        KUBELET_SERVING_SIGNER,
        &subject,
        Some("DNS:edge-1,IP:192.0.2.10"),
        &SERVING_USAGES,
        None,
    );
    create_csr(&api, &agent, &csr);
    std::thread::sleep(Duration::from_secs(1)); // the approver has looked at it by now
    let pending = api.csr("serving-1").unwrap();
    assert!(condition_types(&pending).is_empty() && !issued(&pending), "never auto-approved: {pending}");
    let table = api.kubectl(&["get", "csr"]);
    assert!(table.contains("kubernetes.io/kubelet-serving") && table.contains("Pending"), "{table}");

    // kubectl certificate approve sends the approval as protobuf, which the fake does not serve.
    let out = api.kubectl_output(&["certificate", "approve", "serving-1"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown format"), "{out:?}");

    api.approve_csr("serving-1");
    let csr = api.wait_for_csr("serving-1", "issued", SIGNING, issued);
    assert_eq!(csr["status"]["conditions"][0]["reason"], "KubectlApprove");
    assert_verifies_against_the_ca(&api, &csr);
    let cert = report(&api, "serving-1")["certificate"].clone();
    assert_eq!(cert["sans"], json!(["DNS:edge-1", "IP:192.0.2.10"]));
    assert_eq!(cert["extendedKeyUsage"], json!(["TLS Web Server Authentication"]));
    assert_eq!(cert["subject"], subject.as_str());
    let row = api.kubectl(&["get", "csr", "serving-1", "--no-headers"]);
    assert!(row.contains("Approved,Issued") && row.contains(&node_user(NODE)), "{row}");
}

#[test]
fn kubelet_csrs_the_signer_does_not_accept_fail_with_signer_validation_failure() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let agent = api.node_agent();
    let cn = node_user(NODE);
    let client = |name: &str, subject: &str, san: Option<&str>| {
        create_csr(&api, &agent, &csr_object(name, KUBELET_CLIENT_SIGNER, subject, san, &CLIENT_USAGES, None))
    };
    client("wrong-org", &format!("/O=example/CN={cn}"), None);
    client("with-san", &format!("/O=system:nodes/CN={cn}"), Some("DNS:edge-1"));
    client("wrong-cn", "/O=system:nodes/CN=edge-1", None);
    let serving = csr_object(
        "serving-no-san",
        KUBELET_SERVING_SIGNER,
        &format!("/O=system:nodes/CN={cn}"),
        None,
        &SERVING_USAGES,
        None,
    );
    create_csr(&api, &agent, &serving);
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        condition_types(&api.csr("wrong-org").unwrap()).is_empty(),
        "not a kubelet client CSR: never auto-approved"
    );

    for (name, why) in [
        ("wrong-org", "subject organization is not system:nodes"),
        ("with-san", "DNS subjectAltNames are not allowed"),
        ("wrong-cn", "subject common name does not begin with system:node:"),
        ("serving-no-san", "DNS or IP subjectAltName is required"),
    ] {
        api.approve_csr(name);
        let csr = api.wait_for_csr(name, "failed", SIGNING, |c| condition_types(c).contains(&"Failed".to_string()));
        let failed = &csr["status"]["conditions"][1];
        assert_eq!(
            (failed["status"].as_str(), failed["reason"].as_str(), failed["message"].as_str()),
            (Some("True"), Some("SignerValidationFailure"), Some(why)),
            "{name}"
        );
        assert!(!issued(&csr), "{name}");
    }
    let row = api.kubectl(&["get", "csr", "wrong-org", "--no-headers"]);
    assert!(row.contains("Approved,Failed"), "{row}");
}

#[test]
fn denied_is_final_and_approving_takes_the_approve_verb_on_the_signer() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    api.set_csr_approver(false);
    let agent = api.node_agent();
    create_csr(&api, &agent, &node_client_csr("denied", None));
    create_csr(&api, &agent, &node_client_csr("approved", None));

    // A node may not approve its own request; a user needs update on the approval
    // subresource (RBAC) and then `approve` on the signer (CertificateApproval admission).
    let approval = |agent: &ureq::Agent, name: &str| {
        let mut csr = api.csr(name).unwrap();
        csr["status"]["conditions"] = json!([{"type": "Approved", "status": "True", "reason": "Mine"}]);
        api.call(agent, "PUT", &format!("{CSRS}/{name}/approval"), Some((JSON, &csr)))
    };
    assert_eq!(approval(&agent, "approved").0, 403);
    let (cert, key) = api.user_cert("alice", &["ops"]);
    let alice = api.tls_agent(&cert, &key);
    api.allow_rule(&json!({"user": "alice", "verbs": ["update"], "resource": "certificatesigningrequests",
                           "subresource": "approval", "apiGroup": "certificates.k8s.io"}));
    let (code, status) = approval(&alice, "approved");
    assert_eq!(code, 403, "{status}");
    assert_eq!(
        status["message"],
        "certificatesigningrequests.certificates.k8s.io \"approved\" is forbidden: user not permitted to approve \
         requests with signerName \"kubernetes.io/kube-apiserver-client-kubelet\""
    );
    api.allow_rule(&json!({"user": "alice", "verbs": ["approve"], "resource": "signers", "name": "kubernetes.io/*",
                           "apiGroup": "certificates.k8s.io"}));
    assert_eq!(approval(&alice, "approved").0, 200);
    api.wait_for_csr("approved", "issued", SIGNING, issued);

    api.deny_csr("denied", "NotThisNode", "no such machine in the inventory");
    api.set_csr_approver(true);
    std::thread::sleep(Duration::from_secs(1));
    let csr = api.csr("denied").unwrap();
    assert_eq!(condition_types(&csr), ["Denied"], "{csr}");
    assert!(!issued(&csr));
    assert_eq!(csr["status"]["conditions"][0]["message"], "no such machine in the inventory");
    let (code, status) = api.csr_approval("denied", "Approved", "KubectlApprove", "approve anyway");
    assert_eq!(code, 422, "{status}");
    assert!(
        status["message"].as_str().unwrap().ends_with(
            "status.conditions[1].type: Invalid value: \"Approved\": Approved and Denied conditions are mutually exclusive"
        ),
        "{status}"
    );
    let mut undenied = csr.clone();
    undenied["status"]["conditions"] = json!([]);
    let (code, status) = api.api("PUT", &format!("{CSRS}/denied/approval"), Some(&undenied));
    assert_eq!(code, 422, "{status}");
    assert!(status["message"]
        .as_str()
        .unwrap()
        .contains("Forbidden: updates may not remove a condition of type \"Denied\""));
    let counters = api.counters();
    assert_eq!(
        (&counters["csr_denied"], &counters["csr_approved"], &counters["csr_signed"]),
        (&json!(1), &json!(1), &json!(1))
    );
}

#[test]
fn csrs_are_validated_with_the_apiservers_words() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let agent = api.node_agent();
    let invalid = |csr: &Value| {
        let (code, status) = api.call(&agent, "POST", CSRS, Some((JSON, csr)));
        assert_eq!(code, 422, "{status}");
        let message = status["message"].as_str().unwrap().to_string();
        message.split_once(" is invalid: ").unwrap().1.to_string()
    };
    let mut csr = node_client_csr("x", None);
    csr["spec"]["request"] = json!(base64_of(b"hello"));
    assert_eq!(
        invalid(&csr),
        "spec.request: Invalid value: []byte{0x68, 0x65, 0x6c, 0x6c, 0x6f}: PEM block type must be CERTIFICATE REQUEST"
    );
    let mut csr = node_client_csr("x", None);
    csr["spec"]["usages"] = json!(["client auth", "client auth", "sign everything"]);
    csr["spec"].as_object_mut().unwrap().remove("signerName");
    let why = invalid(&csr);
    assert!(
        why.starts_with("[spec.usages[2]: Unsupported value: \"sign everything\": supported values: \"any\", "),
        "{why}"
    );
    assert!(
        why.ends_with(", spec.usages[1]: Duplicate value: \"client auth\", spec.signerName: Required value]"),
        "{why}"
    );
    let mut csr = node_client_csr("x", None);
    csr["spec"]["usages"] = json!([]);
    csr["spec"]["signerName"] = json!("kubelet-client");
    assert_eq!(
        invalid(&csr),
        "[spec.usages: Required value, spec.signerName: Invalid value: \"kubelet-client\": must be a fully qualified \
         domain and path of the form 'example.com/signer-name']"
    );
    // A request whose signature does not verify (one bit of it flipped).
    let (request, _) = openssl_csr("/O=system:nodes/CN=system:node:edge-1", None);
    let der: String = request.lines().filter(|l| !l.starts_with("-----")).collect();
    let mut bytes = base64::engine::general_purpose::STANDARD.decode(der).unwrap();
    let last = bytes.len() - 3;
    bytes[last] ^= 1;
    let pem = format!(
        "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
        base64::engine::general_purpose::STANDARD.encode(&bytes)
    );
    let mut csr = node_client_csr("x", None);
    csr["spec"]["request"] = json!(base64_of(pem.as_bytes()));
    assert!(invalid(&csr).ends_with(": x509: ECDSA verification failure"));
    let mut csr = node_client_csr("x", None);
    csr["spec"]["request"] = json!("not base64!");
    let (code, status) = api.call(&agent, "POST", CSRS, Some((JSON, &csr)));
    assert_eq!(code, 400, "{status}");

    // generateName, and a name that is taken.
    let mut csr = node_client_csr("", None);
    csr["metadata"] = json!({"generateName": "csr-"});
    let created = create_csr(&api, &agent, &csr);
    let name = created["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("csr-") && name.len() == 9, "{name}");
    csr["metadata"] = json!({"name": name});
    let (code, status) = api.call(&agent, "POST", CSRS, Some((JSON, &csr)));
    assert_eq!((code, status["reason"].as_str()), (409, Some("AlreadyExists")), "{status}");
    assert_eq!(status["message"], format!("certificatesigningrequests.certificates.k8s.io \"{name}\" already exists"));
    assert!(api.validation_failures().iter().any(|f| f["resource"] == "certificatesigningrequests"));
    // The spec is immutable through the resource itself; a node may not delete CSRs.
    let mut changed = api.csr(name).unwrap();
    changed["spec"]["usages"] = json!(["client auth"]);
    changed["metadata"]["labels"] = json!({"node": NODE});
    let (code, updated) = api.api("PUT", &format!("{CSRS}/{name}"), Some(&changed));
    assert_eq!(code, 200, "{updated}");
    assert_eq!(
        (updated["spec"]["usages"].clone(), updated["metadata"]["labels"]["node"].as_str()),
        (json!(CLIENT_USAGES), Some(NODE))
    );
    assert_eq!(api.call(&agent, "DELETE", &format!("{CSRS}/{name}"), None).0, 403);
    api.delete_object(&format!("{CSRS}/{name}"));
    assert!(api.csr(name).is_none());
}

#[test]
fn issue_cert_makes_a_key_and_a_certificate_of_the_cluster_ca_with_any_validity() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let now = std::time::SystemTime::now();
    let (cert, key) = api.issue_cert(
        &node_user(NODE),
        &["system:nodes"],
        now - Duration::from_secs(7200),
        now - Duration::from_secs(3600),
    );
    assert!(cert.starts_with("-----BEGIN CERTIFICATE-----") && key.starts_with("-----BEGIN EC PRIVATE KEY-----"));
    let (cert_path, key_path) = (api.dir().join("expired.crt"), api.dir().join("expired.key"));
    std::fs::write(&cert_path, &cert).unwrap();
    std::fs::write(&key_path, &key).unwrap();
    let verify = std::process::Command::new("openssl")
        .arg("verify")
        .arg("-CAfile")
        .arg(api.ca_cert())
        .arg(&cert_path)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&verify.stdout).contains("certificate has expired")
            || String::from_utf8_lossy(&verify.stderr).contains("certificate has expired"),
        "{verify:?}"
    );
    let (cert, key) = api.issue_cert(&node_user(NODE), &["system:nodes"], now, now + Duration::from_secs(3600));
    std::fs::write(&cert_path, &cert).unwrap();
    std::fs::write(&key_path, &key).unwrap();
    // A valid one logs in as the node.
    let (code, _) = api.call(
        &api.tls_agent(&cert_path, &key_path),
        "GET",
        &format!("/api/v1/nodes?fieldSelector=metadata.name%3D{NODE}"),
        None,
    );
    assert_eq!(code, 200);
}

#[test]
fn another_signer_sets_the_certificate_once_through_status_and_needs_the_sign_verb() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let subject = format!("/O=system:nodes/CN={}", node_user(NODE));
    let csr = csr_object("elsewhere", "example.com/edge-signer", &subject, None, &CLIENT_USAGES, None);
    create_csr(&api, &api.node_agent(), &csr);
    api.approve_csr("elsewhere");
    std::thread::sleep(Duration::from_secs(1));
    assert!(!issued(&api.csr("elsewhere").unwrap()), "no signer for example.com here");

    let now = std::time::SystemTime::now();
    let (pem, _) = api.issue_cert(&node_user(NODE), &["system:nodes"], now, now + Duration::from_secs(3600));
    let with_certificate = |pem: &str| {
        let mut csr = api.csr("elsewhere").unwrap();
        csr["status"]["certificate"] = json!(base64_of(pem.as_bytes()));
        csr
    };
    // The node may not; a user allowed to update the status still needs `sign` on the signer.
    let path = format!("{CSRS}/elsewhere/status");
    let (code, _) = api.call(&api.node_agent(), "PUT", &path, Some((JSON, &with_certificate(&pem))));
    assert_eq!(code, 403);
    let (cert, key) = api.user_cert("signer", &[]);
    let signer = api.tls_agent(&cert, &key);
    api.allow_rule(&json!({"user": "signer", "verbs": ["update"], "resource": "certificatesigningrequests",
                           "subresource": "status", "apiGroup": "certificates.k8s.io"}));
    let (code, status) = api.call(&signer, "PUT", &path, Some((JSON, &with_certificate(&pem))));
    assert_eq!(code, 403, "{status}");
    assert!(status["message"]
        .as_str()
        .unwrap()
        .ends_with("user not permitted to sign requests with signerName \"example.com/edge-signer\""));
    api.allow_rule(&json!({"user": "signer", "verbs": ["sign"], "resource": "signers",
                           "name": "example.com/edge-signer", "apiGroup": "certificates.k8s.io"}));
    let (code, signed) = api.call(&signer, "PUT", &path, Some((JSON, &with_certificate(&pem))));
    assert_eq!(code, 200, "{signed}");
    assert_eq!(condition_types(&signed), ["Approved"], "the approval stays as it was");
    assert_eq!(report(&api, "elsewhere")["certificate"]["subject"], subject.as_str());

    // Once set, the certificate stays; the status cannot approve or deny.
    let (other, _) = api.issue_cert(&node_user(NODE), &["system:nodes"], now, now + Duration::from_secs(60));
    let (code, status) = api.call(&signer, "PUT", &path, Some((JSON, &with_certificate(&other))));
    assert_eq!(code, 422, "{status}");
    assert!(status["message"]
        .as_str()
        .unwrap()
        .ends_with("status.certificate: Forbidden: updates may not modify existing certificate content"));
    let mut denied = api.csr("elsewhere").unwrap();
    denied["status"]["conditions"] = json!([denied["status"]["conditions"][0], {"type": "Denied", "status": "True"}]);
    let (code, status) = api.call(&signer, "PUT", &path, Some((JSON, &denied)));
    assert_eq!(code, 422, "{status}");
    assert!(status["message"]
        .as_str()
        .unwrap()
        .contains("Forbidden: updates may not add a condition of type \"Denied\""));
    let (code, status) = api.call(&signer, "PUT", &path, Some((JSON, &with_certificate("no certificate here"))));
    assert_eq!(code, 422, "{status}");
    assert_eq!(api.counters()["csr_signed"], 1);
}
