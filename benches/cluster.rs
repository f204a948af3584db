//! `make bench`: cluster mode's cost to the apiserver, measured on a real `ferrolet run`
//! (release build, process runtime) joined to the fake kube-apiserver of the tests (over
//! TLS, with a node client certificate). Prints numbers; asserts nothing.
//!
//! - requests per minute to the apiserver from an idle node running 20 pods (kubelet's
//!   steady state: a Lease renewal every 10 s, and a node status at least every 5 minutes)
//! - the spool while the apiserver is away: its bytes and writes over 3 minutes with the 20
//!   pods and one crash-looping pod, and what that makes per hour
//! - memory: the agent's peak RSS (`VmHWM`) with 300 pods bound at once through the
//!   apiserver, against the same 300 pods as static manifests

mod support;

use serde_json::json;
use std::time::{Duration, Instant};
use support::common::apiserver::FakeApiserver;
use support::{http_get, Agent};

const NODE: &str = "bench";

fn metric(port: u16, name: &str) -> f64 {
    let text = http_get(port, "/metrics").unwrap_or_default();
    text.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok())).unwrap_or(f64::NAN)
}

fn main() {
    let Some(api) = FakeApiserver::start(NODE) else {
        println!("cluster benchmark skipped: no test venv (run tests/apiserver/setup.sh)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("manifests")).unwrap();
    let extra = format!("[apiserver]\nkubeconfig = {:?}\n", api.node_kubeconfig());
    let (agent, _) = Agent::start_with(dir.path(), &extra);
    println!("ferrolet cluster-mode benchmark ({}, release build)", support::bin().display());
    for i in 0..20 {
        api.create_pod(
            "default",
            &json!({"metadata": {"name": format!("p{i:02}")},
                    "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1,
                             "containers": [{"name": "c", "image": "none", "command": ["sleep", "3600"]}]}}),
        );
    }
    let t = Instant::now();
    while (0..20).any(|i| api.pod("default", &format!("p{i:02}")).map_or(true, |p| p["status"]["phase"] != "Running")) {
        assert!(t.elapsed() < Duration::from_secs(120), "the 20 pods did not run");
        std::thread::sleep(Duration::from_millis(200));
    }
    println!("20 pods created in the apiserver: Running there after {:?}", t.elapsed());

    // Idle: settle, then count what the node asks for 2 minutes.
    std::thread::sleep(Duration::from_secs(15));
    let window = Duration::from_secs(120);
    let from = api.requests().last().map_or(0, |r| r.seq);
    std::thread::sleep(window);
    let requests: Vec<_> = api.requests().into_iter().filter(|r| r.seq > from && r.verb != "watch").collect();
    let minutes = window.as_secs_f64() / 60.0;
    let mut by_kind = std::collections::BTreeMap::new();
    for r in &requests {
        let kind = if r.path.contains("/leases/") {
            "lease"
        } else if r.path.contains("/nodes/") {
            "node"
        } else if r.path.contains("/pods") {
            "pods"
        } else if r.path.contains("/events") {
            "events"
        } else {
            "other"
        };
        *by_kind.entry(format!("{} {kind}", r.method)).or_insert(0u32) += 1;
    }
    println!(
        "idle with 20 pods: {:.1} requests/min to the apiserver over {:?} (open watch not counted): {by_kind:?}",
        requests.len() as f64 / minutes,
        window
    );

    // Away: 20 idle pods and one crash loop for 3 minutes.
    api.create_pod(
        "default",
        &json!({"metadata": {"name": "crashloop"},
                "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "c", "image": "none", "command": ["sh", "-c", "sleep 1; exit 1"]}]}}),
    );
    std::thread::sleep(Duration::from_secs(5));
    // FERROLET_BENCH_AWAY_SECS=3600 measures a whole hour away (default: 3 minutes).
    let away_for = std::env::var("FERROLET_BENCH_AWAY_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(180u64);
    api.down();
    let away = Instant::now();
    let mut last = (0.0, 0.0);
    let mut peak = 0.0f64;
    for round in 1..=away_for.div_ceil(30) {
        std::thread::sleep(Duration::from_secs(30));
        last = (
            metric(agent.port, "ferrolet_apiserver_spool_bytes"),
            metric(agent.port, "ferrolet_apiserver_spool_items"),
        );
        peak = peak.max(last.0);
        // Every 30 s for the first 3 minutes, then every 5.
        if round <= 6 || round % 10 == 0 {
            println!(
                "away {:>4}s: spool {} bytes in {} writes, {} dropped",
                away.elapsed().as_secs(),
                last.0,
                last.1,
                metric(agent.port, "ferrolet_apiserver_spool_dropped_total")
            );
        }
    }
    println!(
        "spool while away: {:.0} bytes after {}s (peak {peak:.0}); statuses and repeated events replace their older copies",
        last.0,
        away.elapsed().as_secs()
    );
    api.up();
    let back = Instant::now();
    while metric(agent.port, "ferrolet_apiserver_spool_items") != 0.0 {
        assert!(back.elapsed() < Duration::from_secs(60), "the spool did not drain");
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("back: the spool delivered in {:?}", back.elapsed());
    drop(agent);
    memory_of_300_pods(&api);
}

/// The agent's peak RSS in KiB once `n` pods run, started by `start` (which makes them).
fn peak_with(n: usize, start: impl FnOnce() -> Agent) -> (u64, u64) {
    let agent = start();
    agent.wait_running(n, Duration::from_secs(600));
    std::thread::sleep(Duration::from_secs(10));
    let pid = agent.child.id();
    (support::status_field(pid, "VmHWM").unwrap_or(0), support::rss_kib(pid))
}

/// 300 pods bound at once through the apiserver (each watch event once copied the whole
/// pod set twice: 785 MiB), against the same 300 as static manifests.
fn memory_of_300_pods(api: &FakeApiserver) {
    let n = 300;
    let pod = |i: usize| {
        json!({"metadata": {"name": format!("m{i:03}")},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "c", "image": "none", "command": ["sleep", "3600"]}]}})
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("manifests")).unwrap();
    for i in 0..n {
        let mut p = pod(i);
        p["apiVersion"] = json!("v1");
        p["kind"] = json!("Pod");
        std::fs::write(dir.path().join("manifests").join(format!("m{i:03}.json")), p.to_string()).unwrap();
    }
    let (static_peak, static_rss) = peak_with(n, || Agent::start(dir.path()).0);
    println!("{n} static pods: agent peak RSS {} KiB, {} KiB after", static_peak, static_rss);
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("manifests")).unwrap();
    let extra = format!("[apiserver]\nkubeconfig = {:?}\n", api.node_kubeconfig());
    let (api_peak, api_rss) = peak_with(n, || {
        let (agent, _) = Agent::start_with(dir.path(), &extra);
        for i in 0..n {
            api.create_pod("default", &pod(i));
        }
        agent
    });
    println!(
        "{n} pods bound at once through the apiserver: agent peak RSS {api_peak} KiB, {api_rss} KiB after ({:+} KiB peak against static pods)",
        api_peak as i64 - static_peak as i64
    );
}
