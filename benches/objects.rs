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
/// How long the steady state is watched: `FERROLET_BENCH_WINDOW_SECS`, default 120 (watches
/// are opened again every 5 to 10 minutes: a window of 10 minutes sees them).
fn window() -> Duration {
    let secs = std::env::var("FERROLET_BENCH_WINDOW_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(120);
    Duration::from_secs(secs)
}

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
    /// Threads, and the RSS (KiB) of thread stacks (anonymous 2 MiB mappings), the heap and
    /// other anonymous mappings.
    threads: u64,
    stacks_kib: u64,
    heap_kib: u64,
    other_anon_kib: u64,
}

/// Where an agent's resident memory is, from `/proc/PID/smaps`: thread stacks (anonymous
/// mappings of 2 MiB or 8 MiB), `[heap]`, and the other anonymous mappings (malloc's arenas).
fn breakdown(pid: u32) -> (u64, u64, u64) {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let (mut stacks, mut heap, mut other) = (0, 0, 0);
    let mut current: Option<(u64, bool, bool)> = None;
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.first().is_some_and(|f| f.contains('-') && !f.ends_with(':')) {
            let (a, b) = fields[0].split_once('-').unwrap();
            let size = (u64::from_str_radix(b, 16).unwrap() - u64::from_str_radix(a, 16).unwrap()) / 1024;
            let anon = fields.len() < 6;
            current = Some((size, anon, fields.get(5) == Some(&"[heap]")));
        } else if fields.first() == Some(&"Rss:") {
            let kib: u64 = fields[1].parse().unwrap_or(0);
            match current {
                Some((_, _, true)) => heap += kib,
                Some((size, true, _)) if size == 2048 || size == 8192 => stacks += kib,
                Some((_, true, _)) => other += kib,
                _ => {}
            }
        }
    }
    (stacks, heap, other)
}

/// Runs 20 pods (with or without objects) on a fresh agent and fake, waits for them, settles,
/// then measures the window. Returns what it measured, and the agent and fake still running.
fn steady(objects: bool, window: Duration) -> Option<(Steady, Agent, FakeApiserver, tempfile::TempDir)> {
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
    std::thread::sleep(window);
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
    let (stacks_kib, heap_kib, other_anon_kib) = breakdown(pid);
    let s = Steady {
        per_minute: requests.len() as f64 / (window.as_secs_f64() / 60.0),
        by_kind,
        rss_kib: support::rss_kib(pid),
        cpu_percent: cpu as f64 / hz / window.as_secs_f64() * 100.0,
        threads: support::status_field(pid, "Threads").unwrap_or(0),
        stacks_kib,
        heap_kib,
        other_anon_kib,
    };
    Some((s, agent, api, dir))
}

fn main() {
    println!("ferrolet ConfigMap/Secret/token benchmark ({}, release build)", support::bin().display());
    let window = window();
    let Some((plain, agent, api, dir)) = steady(false, window) else {
        println!("objects benchmark skipped: no test venv (run tests/apiserver/setup.sh)");
        return;
    };
    drop((agent, api, dir));
    let (with, agent, api, dir) = steady(true, window).unwrap();
    for (what, s) in [("without", &plain), ("with", &with)] {
        println!(
            "{PODS} pods {what} a token volume, a ConfigMap and a Secret each: {:.1} requests/min over {window:?} {:?}; agent RSS {} KiB ({} threads; stacks {} KiB, heap {} KiB, other anonymous {} KiB), CPU {:.2} %",
            s.per_minute, s.by_kind, s.rss_kib, s.threads, s.stacks_kib, s.heap_kib, s.other_anon_kib, s.cpu_percent
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
