//! Cluster mode on the CRI runtime: a pod created in the fake kube-apiserver runs on the
//! harness's containerd, its status (containerd's container id, the image) comes back, and
//! a deletion stops and removes it. Skips without the CRI harness or the test venv.

use crate::common;

use common::apiserver::FakeApiserver;
use common::cri::{busybox, CriNode};
use common::wait_for;
use serde_json::json;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn a_pod_from_the_apiserver_runs_on_containerd_and_is_deleted_gracefully() {
    let Some(node) = CriNode::new() else { return };
    let Some(api) = FakeApiserver::start(&node.node) else { return };
    let kubeconfig = api.node_kubeconfig();
    let agent = node.start_with(|text| format!("{text}[apiserver]\nkubeconfig = {kubeconfig:?}\n"), "debug");
    api.create_pod(
        "default",
        &json!({"metadata": {"name": "web"},
                "spec": {"nodeName": node.node, "hostNetwork": true, "terminationGracePeriodSeconds": 2,
                         "containers": [{"name": "app", "image": busybox(), "imagePullPolicy": "Never",
                                         "command": ["sleep", "3600"]}]}}),
    );
    let pod = wait_for("web Running in the apiserver", WAIT, || {
        api.pod("default", "web").filter(|p| p["status"]["phase"] == "Running")
    });
    let status = &pod["status"]["containerStatuses"][0];
    assert!(status["containerID"].as_str().unwrap().starts_with("containerd://"), "{status}");
    assert_eq!(status["ready"], true);
    assert!(!status["imageID"].as_str().unwrap().is_empty(), "the runtime's image reference: {status}");
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    assert_eq!(node.containers(&uid).len(), 1, "the container is in containerd");
    let nodes = api.kubectl(&["get", "nodes", "-o", "wide"]);
    assert!(nodes.contains("containerd://"), "the runtime's version: {nodes}");

    api.delete_pod("default", "web", None);
    wait_for("web gone from the apiserver", WAIT, || api.pod("default", "web").is_none().then_some(()));
    assert!(node.containers(&uid).is_empty(), "its container was removed before the pod was deleted");
    assert!(agent.log_text().contains("deleted in its source"), "the log says why it stopped");
    api.assert_no_validation_failures();
}
