//! `make bench`: what ConfigMaps, Secrets and service account tokens cost a node, measured on
//! a real `ferrolet run` (release build, process runtime) joined to the fake kube-apiserver of
//! the tests. Prints numbers; asserts nothing.
//!
//! - 20 pods each with the default token volume (`kube-api-access-*`, as the ServiceAccount
//!   admission writes it), one ConfigMap and one Secret of its own, against the same 20 pods
//!   without them: the agent's requests per minute to the apiserver at steady state (watch
//!   re-opens included, the watches themselves open), its RSS, and its CPU over the window
//! - the time from a ConfigMap update in the apiserver to the new content in the file the
//!   container reads (20 updates: p50, max)

mod support;

use serde_json::json;
use std::time::{Duration, Instant};
use support::common::apiserver::{FakeApiserver, Options};
use support::Agent;

const NODE: &str = "bench";
const PODS: usize = 20;
const WINDOW: Duration = Duration::from_secs(120);

/// The pods, with or without what the apiserver holds.
fn pod(i: usize, objects: bool) -> serde_json::Value {
    let mut p = json!({"metadata": {"name": format!("p{i:02}")},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1,
                 "automountServiceAccountToken": objects,
                 "containers": [{"name": "c", "image": "none", "command": ["sleep", "3600"]}]}});
    if objects {
        p["spec"]["volumes"] = json!([{"name": "cfg", "configMap": {"name": format!("cm{i:02}")}},
                                      {"name": "sec", "secret": {"secretName": format!("sec{i:02}")}}]);
        p["spec"]["containers"][0]["volumeMounts"] =
            json!([{"name": "cfg", "mountPath": "/cfg"}, {"name": "sec", "mountPath": "/sec"}]);
    }
    p
}

struct Steady {
    per_minute: f64,
    by_kind: std::collections::BTreeMap<String, u32>,
    rss_kib: u64,
    cpu_percent: f64,
}

/// Runs 20 pods (with or without objects) on a fresh agent and fake, waits for them, settles,
/// then measures the window. Returns what it measured, and the agent and fake still running.
fn steady(objects: bool) -> Option<(Steady, Agent, FakeApiserver, tempfile::TempDir)> {
    let options = Options { service_account_admission: true, ..Default::default() };
    let api = FakeApiserver::start_with(NODE, options)?;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("manifests")).unwrap();
    let key = dir.path().join("kept.key");
    let extra = format!("[apiserver]\nkubeconfig = {:?}\nkept_key = {key:?}\n", api.node_kubeconfig());
    let (agent, _) = Agent::start_with(dir.path(), &extra);
    for i in 0..PODS {
        if objects {
            api.create_config_map("default", &format!("cm{i:02}"), &json!({"app.conf": format!("v0-{i}")}));
            api.create_secret("default", &format!("sec{i:02}"), "Opaque", &[("pw", b"bench-secret")]);
        }
        api.create_pod("default", &pod(i, objects));
    }
    let t = Instant::now();
    while (0..PODS).any(|i| api.pod("default", &format!("p{i:02}")).map_or(true, |p| p["status"]["phase"] != "Running"))
    {
        assert!(t.elapsed() < Duration::from_secs(180), "the pods did not run");
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(15));
    let pid = agent.child.id();
    let from = api.requests().last().map_or(0, |r| r.seq);
    let cpu0 = support::cpu_ticks(pid);
    std::thread::sleep(WINDOW);
    let cpu = support::cpu_ticks(pid) - cpu0;
    let requests: Vec<_> = api.requests().into_iter().filter(|r| r.seq > from).collect();
    let mut by_kind = std::collections::BTreeMap::new();
    for r in &requests {
        let kind = ["leases", "nodes", "configmaps", "secrets", "token", "pods", "events"]
            .into_iter()
            .find(|k| r.path.contains(&format!("/{k}")))
            .unwrap_or("other");
        let verb = if r.watch { "WATCH" } else { r.method.as_str() };
        *by_kind.entry(format!("{verb} {kind}")).or_insert(0u32) += 1;
    }
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let s = Steady {
        per_minute: requests.len() as f64 / (WINDOW.as_secs_f64() / 60.0),
        by_kind,
        rss_kib: support::rss_kib(pid),
        cpu_percent: cpu as f64 / hz / WINDOW.as_secs_f64() * 100.0,
    };
    Some((s, agent, api, dir))
}

fn main() {
    println!("ferrolet ConfigMap/Secret/token benchmark ({}, release build)", support::bin().display());
    let Some((plain, agent, api, dir)) = steady(false) else {
        println!("objects benchmark skipped: no test venv (run tests/apiserver/setup.sh)");
        return;
    };
    drop((agent, api, dir));
    let (with, agent, api, dir) = steady(true).unwrap();
    for (what, s) in [("without", &plain), ("with", &with)] {
        println!(
            "{PODS} pods {what} a token volume, a ConfigMap and a Secret each: {:.1} requests/min over {WINDOW:?} {:?}; agent RSS {} KiB, CPU {:.2} %",
            s.per_minute, s.by_kind, s.rss_kib, s.cpu_percent
        );
    }
    let issued = api.tokens_issued();
    println!(
        "tokens issued: {} for {PODS} pods (renewed at 80 % of 3607 s: {:.2} requests/min more at steady state)",
        issued.len(),
        PODS as f64 / (3607.0 * 0.8 / 60.0)
    );

    // Update latency: the file the container reads (its volume, bind-mounted into its root).
    let uid = api.pod("default", "p00").unwrap()["metadata"]["uid"].as_str().unwrap().to_string();
    let file = dir.path().join("state/pods").join(&uid).join("volumes/kubernetes.io~configmap/cfg/app.conf");
    let mut took = Vec::new();
    for n in 1..=20 {
        let want = format!("v{n}");
        let t = Instant::now();
        api.update_config_map("default", "cm00", &json!({"app.conf": want}));
        while std::fs::read_to_string(&file).ok().as_deref() != Some(want.as_str()) {
            assert!(t.elapsed() < Duration::from_secs(60), "update {n} did not arrive in {}", file.display());
            std::thread::sleep(Duration::from_millis(2));
        }
        took.push(t.elapsed());
        std::thread::sleep(Duration::from_millis(300));
    }
    took.sort();
    println!(
        "ConfigMap update to the container's file, 20 updates: p50 {:?}, max {:?}",
        took[took.len() / 2],
        took[took.len() - 1]
    );
    drop(agent);
}
