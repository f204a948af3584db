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

/// A pod on `node` running `script` in busybox, on the host network, sharing `out` with the
/// test (a hostPath volume at the same path).
fn script_pod(node: &CriNode, name: &str, image: &str, script: &str, out: &std::path::Path) -> serde_json::Value {
    let mut p = json!({"metadata": {"name": name},
            "spec": {"nodeName": node.node, "hostNetwork": true, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "app", "image": image, "imagePullPolicy": "IfNotPresent",
                                     "command": ["sh", "-c", script],
                                     "env": [{"name": "OUT", "value": out.to_str().unwrap()}]}]}});
    common::share_dir(&mut p, out);
    p
}

#[test]
fn an_ordinary_pod_on_containerd_reads_its_token_config_map_secret_and_env() {
    let Some(node) = CriNode::new() else { return };
    let options = common::apiserver::Options { service_account_admission: true, ..Default::default() };
    let Some(api) = FakeApiserver::start_with(&node.node, options) else { return };
    let out = node.sb.work().join("out");
    std::fs::create_dir_all(&out).unwrap();
    api.create_config_map("default", "app", &json!({"mode": "edge"}));
    api.create_secret("default", "db", "Opaque", &[("pw", b"hunter2")]);
    let kubeconfig = api.node_kubeconfig();
    let key = node.sb.work().join("kept.key");
    let agent = node
        .start_with(|text| format!("{text}[apiserver]\nkubeconfig = {kubeconfig:?}\nkept_key = {key:?}\n"), "debug");
    let dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    let script = format!(
        "cat {dir}/token > $OUT/token && cat {dir}/namespace > $OUT/ns && cat /cfg/mode > $OUT/mode && \
         cat /sec/pw > $OUT/pw && echo \"$MODE $PW\" > $OUT/env && touch $OUT/done; sleep 3600"
    );
    let mut p = script_pod(&node, "web", &busybox(), &script, &out);
    p["spec"]["volumes"].as_array_mut().unwrap().extend([
        json!({"name": "cfg", "configMap": {"name": "app"}}),
        json!({"name": "sec", "secret": {"secretName": "db"}}),
    ]);
    let c = &mut p["spec"]["containers"][0];
    c["imagePullPolicy"] = json!("Never");
    c["volumeMounts"]
        .as_array_mut()
        .unwrap()
        .extend([json!({"name": "cfg", "mountPath": "/cfg"}), json!({"name": "sec", "mountPath": "/sec"})]);
    c["envFrom"] = json!([{"configMapRef": {"name": "app"}, "prefix": "X_"}]);
    c["env"].as_array_mut().unwrap().extend([
        json!({"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "app", "key": "mode"}}}),
        json!({"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}),
    ]);
    api.create_pod("default", &p);
    wait_for("the container's report", WAIT, || std::fs::read_to_string(out.join("done")).ok());
    let uid = api.pod("default", "web").unwrap()["metadata"]["uid"].as_str().unwrap().to_string();
    let token = std::fs::read_to_string(out.join("token")).unwrap();
    assert_eq!(api.jwt_claims(&token)["kubernetes.io"]["pod"]["uid"], uid.as_str());
    assert_eq!(std::fs::read_to_string(out.join("ns")).unwrap(), "default");
    assert_eq!(std::fs::read_to_string(out.join("mode")).unwrap(), "edge");
    assert_eq!(std::fs::read_to_string(out.join("pw")).unwrap(), "hunter2");
    assert_eq!(std::fs::read_to_string(out.join("env")).unwrap().trim(), "edge hunter2");
    drop(agent);
}

#[test]
fn pull_secrets_pull_a_private_image_and_without_them_the_pull_fails_as_kubelets_does() {
    use common::registry::{mkimage, Registry};
    let Some(node) = CriNode::new() else { return };
    let Some(api) = FakeApiserver::start(&node.node) else { return };
    let Some(registry) = Registry::start(&node.sb.work().join("registry")) else { return };
    registry.trust(std::path::Path::new(&common::cri::var("FERROLET_CRI_CERTS_D")));
    let tar = node.sb.work().join("private.tar");
    mkimage(&tar, &["--name", "team/private:1", "--format", "docker", "--busybox", "/bin/busybox", "--cmd", "/bin/sh"]);
    let image = registry.push("team/private", "1", &tar);
    let config = |password: &str| {
        json!({"auths": {registry.host(): {"username": registry.user, "password": password}}}).to_string().into_bytes()
    };
    api.create_secret(
        "default",
        "regcred",
        "kubernetes.io/dockerconfigjson",
        &[(".dockerconfigjson", &config(&registry.password))],
    );
    api.create_secret(
        "default",
        "wrongcred",
        "kubernetes.io/dockerconfigjson",
        &[(".dockerconfigjson", &config("nope"))],
    );
    let kubeconfig = api.node_kubeconfig();
    let agent = node.start_with(|text| format!("{text}[apiserver]\nkubeconfig = {kubeconfig:?}\n"), "debug");
    let pod = |name: &str, secret: Option<&str>| {
        let mut p = json!({"metadata": {"name": name},
            "spec": {"nodeName": node.node, "hostNetwork": true, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "app", "image": image, "imagePullPolicy": "Always", "command": ["sleep", "3600"]}]}});
        if let Some(s) = secret {
            p["spec"]["imagePullSecrets"] = json!([{"name": s}]);
        }
        p
    };
    // Without credentials first, so the image is not there yet when they are tried.
    api.create_pod("default", &pod("anonymous", None));
    api.create_pod("default", &pod("wrong", Some("wrongcred")));
    let waiting = |name: &str| {
        wait_for(&format!("{name} waiting after a failed pull"), WAIT, || {
            let p = api.pod("default", name)?;
            let w = p["status"]["containerStatuses"][0]["state"]["waiting"].clone();
            (w["reason"] == "ErrImagePull" || w["reason"] == "ImagePullBackOff").then_some(w)
        })
    };
    for name in ["anonymous", "wrong"] {
        let w = waiting(name);
        let events: Vec<String> = api
            .events("default")
            .into_iter()
            .filter(|e| e["involvedObject"]["name"] == name && e["reason"] == "Failed")
            .map(|e| e["message"].as_str().unwrap().to_string())
            .collect();
        assert!(
            events
                .iter()
                .any(|m| m.starts_with(&format!("Failed to pull image \"{image}\"")) && m.contains("401 Unauthorized")),
            "{name}: kubelet's Failed event with the registry's answer: {events:?} ({w})"
        );
    }
    api.create_pod("default", &pod("private", Some("regcred")));
    wait_for("private Running", WAIT, || api.pod("default", "private").filter(|p| p["status"]["phase"] == "Running"));
    drop(agent);
    // The image goes with the test (its id is its own: the harness's busybox stays).
    let rt = common::cri::client(&node.endpoint);
    let _ = rt.remove_image(&image);
}
