//! Cluster mode end to end: a real `ferrolet run` (process runtime) against the fake
//! kube-apiserver of tests/apiserver over TLS with a node client certificate. Without the
//! test venv each test skips with the reason.

mod common;

use common::apiserver::FakeApiserver;
use common::{wait_for, AgentProcess, Sandbox};
use serde_json::{json, Value};
use std::time::Duration;

const NODE: &str = "testnode";
const WAIT: Duration = Duration::from_secs(30);

/// Starts an agent of `sb` joined to `api`.
fn agent(sb: &Sandbox, api: &FakeApiserver) -> AgentProcess {
    let kubeconfig = api.node_kubeconfig();
    AgentProcess::start_with(sb, |text| format!("{text}[apiserver]\nkubeconfig = {kubeconfig:?}\nnode_labels = {{ site = \"north\" }}\nregister_with_taints = [\"edge=true:NoSchedule\"]\n"))
}

fn sleeper(name: &str, grace: i64) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
           "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": grace,
                    "containers": [{"name": "app", "image": "busybox:1.36",
                                    "command": ["sh", "-c", "trap 'echo bye; sleep 1; exit 0' TERM; while true; do sleep 0.2; done"]}]}})
}

/// `wait_for`, but a timeout shows the agent's log and the fake's.
fn wait<T>(agent: &AgentProcess, api: &FakeApiserver, what: &str, f: impl FnMut() -> Option<T>) -> T {
    let mut f = f;
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if std::time::Instant::now() > deadline {
            let log = agent.log_text();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!("timed out waiting for {what}; the agent's log:\n{}\nthe fake's:\n{}", tail.join("\n"), api.log_tail());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn phase(api: &FakeApiserver, name: &str) -> Option<String> {
    api.pod("default", name).and_then(|p| p["status"]["phase"].as_str().map(str::to_string))
}

fn condition<'a>(node: &'a Value, type_: &str) -> &'a Value {
    node["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == type_).unwrap()
}

#[test]
fn the_node_registers_heartbeats_runs_its_pods_and_reports_them() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let sb = Sandbox::new();
    sb.write_manifest("web.yaml", &common::manifest("web", "  containers:\n  - name: app\n    image: busybox\n    command: [sleep, '3600']\n"));
    let agent = agent(&sb, &api);

    // Register: labels, taints, capacity, conditions, node info.
    let node = wait_for("the Node", WAIT, || api.node(NODE));
    let labels = &node["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/hostname"].as_str().is_some(), true);
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["site"], "north");
    assert_eq!(node["spec"]["taints"][0]["key"], "edge");
    let node = wait_for("the Node's status", WAIT, || {
        api.node(NODE).filter(|n| n["status"]["capacity"]["pods"].is_string())
    });
    assert_eq!(condition(&node, "Ready")["reason"], "KubeletReady");
    assert_eq!(condition(&node, "MemoryPressure")["status"], "False");
    assert!(node["status"]["nodeInfo"]["kubeletVersion"].as_str().unwrap().contains("ferrolet"));
    assert_eq!(node["status"]["addresses"][0]["address"], "127.0.0.1");

    // The Lease is renewed every 10 s.
    let first = wait_for("the Lease", WAIT, || api.lease(NODE))["spec"]["renewTime"].clone();
    let renewed = wait_for("a renewed Lease", Duration::from_secs(25), || {
        api.lease(NODE).filter(|l| l["spec"]["renewTime"] != first)
    });
    assert_eq!(renewed["spec"]["leaseDurationSeconds"], 40);
    assert_eq!(renewed["metadata"]["ownerReferences"][0]["uid"], node["metadata"]["uid"]);

    // A pod created in the apiserver runs, and its status comes back.
    api.create_pod("default", &sleeper("api-web", 5));
    wait_for("api-web Running in the apiserver", WAIT, || (phase(&api, "api-web").as_deref() == Some("Running")).then_some(()));
    let pod = api.pod("default", "api-web").unwrap();
    assert_eq!(pod["status"]["containerStatuses"][0]["ready"], true);
    assert_eq!(pod["status"]["hostIP"], "127.0.0.1");

    // The static pod has its mirror, with the static pod's status.
    let mirror = wait(&agent, &api, "the mirror pod", || {
        api.pod("default", "web-testnode").filter(|p| p["status"]["phase"] == "Running")
    });
    assert!(mirror["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string());

    // kubectl shows it as a user expects.
    let nodes = api.kubectl(&["get", "nodes"]);
    assert!(nodes.lines().nth(1).is_some_and(|l| l.starts_with(NODE) && l.contains(" Ready ")), "{nodes}");
    let pods = api.kubectl(&["get", "pods", "-o", "wide"]);
    for name in ["api-web", "web-testnode"] {
        assert!(pods.lines().any(|l| l.starts_with(name) && l.contains("Running") && l.contains(NODE)), "{pods}");
    }
    let describe = api.kubectl(&["describe", "pod", "api-web"]);
    assert!(describe.contains("Started"), "the node's events show: {describe}");
    let events = api.kubectl(&["get", "events"]);
    assert!(events.contains("Started"), "{events}");

    // Delete: graceful termination, then the node deletes the pod.
    api.delete_pod("default", "api-web", None);
    wait_for("api-web gone from the apiserver", WAIT, || api.pod("default", "api-web").is_none().then_some(()));
    assert!(!agent.pods().iter().any(|p| p.metadata.name == "api-web"));
    assert!(agent.log_text().contains("deleted in its source") || agent.log_text().contains("being deleted"), "the log says why");

    api.assert_no_validation_failures();
    drop(agent);
}
