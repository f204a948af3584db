//! `make bench`: kubelet's API on the node (`[server]`), measured from outside with the real
//! `kubectl` through the fake kube-apiserver of the tests, on a release `ferrolet run`.
//! Prints numbers; asserts nothing.
//!
//! - `kubectl exec POD -- true`, round trip, 20 times (p50, p90), on the process runtime and,
//!   when the harness's containerd runs (`FERROLET_CRI_ENDPOINT`), on CRI; each includes
//!   kubectl's start and its WebSocket attempt before SPDY (the fake passes WebSockets on and
//!   the node refuses them, as described in tests/apiserver/README.md)
//! - `kubectl cp` of 100 MB into the pod and back: MB/s each way, both runtimes
//! - the agent's memory with 20 idle exec streams open, against none
//! - the agent's RSS idle, with the server on and with it off

mod support;

use serde_json::{json, Value};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::common::apiserver::FakeApiserver;
use support::common::cri::{busybox, CriNode};
use support::Agent;

const NODE: &str = "bench";
const RUNS: usize = 20;
const CP_BYTES: usize = 100 << 20;
const STREAMS: usize = 20;

fn kubectl(api: &FakeApiserver, args: &[&str]) -> Output {
    api.kubectl_output(args)
}

fn kubectl_child(api: &FakeApiserver, args: &[&str]) -> Child {
    Command::new(support::common::apiserver::venv().unwrap().join("bin/kubectl"))
        .arg("--kubeconfig")
        .arg(api.admin_kubeconfig())
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn wait_running(api: &FakeApiserver, name: &str) {
    let t = Instant::now();
    while api.pod("default", name).map_or(true, |p| p["status"]["phase"] != "Running") {
        assert!(t.elapsed() < Duration::from_secs(120), "pod {name} did not run");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// p50 and p90 of 20 `kubectl exec POD -- true`.
fn exec_round_trips(api: &FakeApiserver, pod: &str) -> (Duration, Duration) {
    let mut took = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let out = kubectl(api, &["exec", pod, "--", "true"]);
        assert!(out.status.success(), "exec: {}", String::from_utf8_lossy(&out.stderr));
        took.push(t.elapsed());
    }
    took.sort();
    (took[RUNS / 2], took[RUNS * 9 / 10])
}

/// p50 of 20 `kubectl get pod POD`: kubectl's own start and one request through the fake,
/// the part of an exec's round trip that is not the node's.
fn get_round_trip(api: &FakeApiserver, pod: &str) -> Duration {
    let mut took: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            assert!(kubectl(api, &["get", "pod", pod]).status.success());
            t.elapsed()
        })
        .collect();
    took.sort();
    took[RUNS / 2]
}

/// `kubectl cp` of 100 MB to `dest` in the pod and back: MB/s each way.
fn cp_throughput(api: &FakeApiserver, pod: &str, dest: &str, scratch: &Path) -> (f64, f64) {
    let file = scratch.join("cp-100mb");
    let data: Vec<u8> = (0..CP_BYTES as u32).map(|i| (i.wrapping_mul(2654435761) >> 7) as u8).collect();
    std::fs::write(&file, &data).unwrap();
    let mbps = |took: Duration| CP_BYTES as f64 / (1 << 20) as f64 / took.as_secs_f64();
    let t = Instant::now();
    let out = kubectl(api, &["cp", file.to_str().unwrap(), &format!("default/{pod}:{dest}")]);
    let into = mbps(t.elapsed());
    assert!(out.status.success(), "cp: {}", String::from_utf8_lossy(&out.stderr));
    let back = scratch.join("cp-100mb-back");
    let t = Instant::now();
    let out = kubectl(api, &["cp", &format!("default/{pod}:{dest}"), back.to_str().unwrap()]);
    let from = mbps(t.elapsed());
    assert!(out.status.success(), "cp back: {}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read(&back).unwrap() == data, "the file came back different");
    let _ = (std::fs::remove_file(&file), std::fs::remove_file(&back));
    (into, from)
}

fn pod(name: &str, extra: Value) -> Value {
    let mut p = json!({"metadata": {"name": name},
        "spec": {"nodeName": NODE, "hostNetwork": true, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}});
    for (k, v) in extra.as_object().unwrap() {
        p["spec"]["containers"][0][k] = v.clone();
    }
    p
}

fn process_runtime() -> Option<()> {
    let api = FakeApiserver::start(NODE)?;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("manifests")).unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let key = dir.path().join("kept.key");
    let cluster = format!("[apiserver]\nkubeconfig = {:?}\nkept_key = {key:?}\n", api.node_kubeconfig());
    let (agent, _) = Agent::start_with(dir.path(), &cluster);
    let mut p = pod("target", json!({}));
    p["spec"]["volumes"] = json!([{"name": "shared", "hostPath": {"path": shared, "type": "Directory"}}]);
    p["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "shared", "mountPath": shared}]);
    api.create_pod("default", &p);
    wait_running(&api, "target");
    std::thread::sleep(Duration::from_secs(5));
    let pid = agent.child.id();
    let idle_on = support::rss_kib(pid);
    let (p50, p90) = exec_round_trips(&api, "target");
    let get = get_round_trip(&api, "target");
    println!(
        "process runtime: kubectl exec -- true, {RUNS} runs: p50 {p50:?}, p90 {p90:?} (kubectl get pod: p50 {get:?})"
    );
    let (into, from) = cp_throughput(&api, "target", &format!("{}/in", shared.display()), dir.path());
    println!("process runtime: kubectl cp of 100 MB: {into:.1} MB/s into the pod, {from:.1} MB/s out of it");

    let before = (support::rss_kib(pid), support::status_field(pid, "Threads").unwrap_or(0));
    let mut idle: Vec<Child> =
        (0..STREAMS).map(|_| kubectl_child(&api, &["exec", "target", "--", "sleep", "600"])).collect();
    std::thread::sleep(Duration::from_secs(8));
    let after = (support::rss_kib(pid), support::status_field(pid, "Threads").unwrap_or(0));
    println!(
        "process runtime: {STREAMS} idle exec streams: agent RSS {} KiB -> {} KiB ({:+} KiB, {:.0} KiB a stream), threads {} -> {}",
        before.0,
        after.0,
        after.0 as i64 - before.0 as i64,
        (after.0 as f64 - before.0 as f64) / STREAMS as f64,
        before.1,
        after.1
    );
    for c in &mut idle {
        let _ = c.kill();
        let _ = c.wait();
    }
    drop(agent);

    // The same agent with the server off: what the server costs idle.
    let dir_off = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir_off.path().join("manifests")).unwrap();
    let key = dir_off.path().join("kept.key");
    let api_off = FakeApiserver::start(NODE)?;
    let cluster_off = format!("[apiserver]\nkubeconfig = {:?}\nkept_key = {key:?}\n", api_off.node_kubeconfig());
    let (agent_off, _) = Agent::start_with(dir_off.path(), &format!("{cluster_off}[server]\nenabled = false\n"));
    api_off.create_pod("default", &pod("target", json!({})));
    wait_running(&api_off, "target");
    std::thread::sleep(Duration::from_secs(5));
    let idle_off = support::rss_kib(agent_off.child.id());
    println!(
        "process runtime: agent RSS idle with one pod: {idle_on} KiB with the server on, {idle_off} KiB with it off"
    );
    Some(())
}

fn cri_runtime() -> Option<()> {
    let node = CriNode::new()?;
    let api = FakeApiserver::start(&node.node)?;
    let kubeconfig = api.node_kubeconfig();
    let agent = node.start_with(|text| format!("{text}[apiserver]\nkubeconfig = {kubeconfig:?}\n"), "warn");
    let p = json!({"metadata": {"name": "target"},
        "spec": {"nodeName": node.node, "hostNetwork": true, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "c", "image": busybox(), "imagePullPolicy": "Never", "command": ["sleep", "3600"]}]}});
    api.create_pod("default", &p);
    wait_running(&api, "target");
    let (p50, p90) = exec_round_trips(&api, "target");
    println!("CRI runtime: kubectl exec -- true, {RUNS} runs: p50 {p50:?}, p90 {p90:?}");
    let scratch = tempfile::tempdir().unwrap();
    let (into, from) = cp_throughput(&api, "target", "/tmp/in", scratch.path());
    println!("CRI runtime: kubectl cp of 100 MB: {into:.1} MB/s into the pod, {from:.1} MB/s out of it");
    drop(agent);
    Some(())
}

fn main() {
    println!("ferrolet kubelet API benchmark ({}, release build)", support::bin().display());
    if process_runtime().is_none() {
        println!("kubelet API benchmark skipped: no test venv (run tests/apiserver/setup.sh)");
        return;
    }
    if cri_runtime().is_none() {
        println!("kubelet API benchmark on CRI skipped: no containerd (FERROLET_CRI_ENDPOINT)");
    }
}
