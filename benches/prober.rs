//! `make bench`: 1000 probe workers (500 containers, each with an HTTP readiness probe and a
//! TCP liveness probe, 1 s periods) against servers on 127.0.0.1: the agent's CPU, RSS,
//! threads, and probe lateness (start minus scheduled time). The RSS growth is measured
//! against the same 500 containers without probes. Then slow probes beside fast ones:
//! 8 exec probes that hang past their 30 s timeout and 20 HTTP probes at 1 s, to show that
//! a slow probe holds up only its own worker. Prints numbers; asserts nothing.
//! The probe-cost case: 100 pods, each with an HTTP readiness and a TCP liveness probe at
//! 1 s (200 probes/s), three rounds: the agent's CPU per probe and in % of one core, the
//! lateness, and the rate the servers saw (proof that the probes ran).
//! `cargo bench --bench prober -- slow` (or `fast`, `cost`) runs one case only.

mod support;

use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{bin, cpu_ticks, http_get, rss_kib, status_field, thread_ticks, Agent};

const PODS: usize = 500;

/// Requests and connections the probe targets have seen.
struct Hits {
    http: Arc<AtomicUsize>,
    tcp: Arc<AtomicUsize>,
}

impl Hits {
    fn total(&self) -> usize {
        self.http.load(Ordering::SeqCst) + self.tcp.load(Ordering::SeqCst)
    }
}

fn servers() -> ((u16, u16), Hits) {
    let (http, http_hits) = support::common::ok_http_server();
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp.local_addr().unwrap().port();
    let tcp_hits = Arc::new(AtomicUsize::new(0));
    let count = tcp_hits.clone();
    std::thread::spawn(move || {
        for _conn in tcp.incoming() {
            count.fetch_add(1, Ordering::SeqCst);
        }
    });
    ((http, port), Hits { http: http_hits, tcp: tcp_hits })
}

fn pod(i: usize, probes: Option<(u16, u16)>) -> String {
    let mut y = format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p{i:03}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: none\n    command: [sleep, '3600']\n");
    if let Some((http, tcp)) = probes {
        y.push_str(&format!("    readinessProbe:\n      httpGet: {{host: 127.0.0.1, port: {http}, path: /healthz}}\n      periodSeconds: 1\n"));
        y.push_str(&format!(
            "    livenessProbe:\n      tcpSocket: {{host: 127.0.0.1, port: {tcp}}}\n      periodSeconds: 1\n"
        ));
    }
    y
}

fn write_pods(dir: &Path, n: usize, probes: Option<(u16, u16)>) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir.join("manifests")).unwrap();
    for i in 0..n {
        std::fs::write(dir.join(format!("manifests/p{i:03}.yaml")), pod(i, probes)).unwrap();
    }
}

fn wait_ready(agent: &Agent, n: usize) {
    while http_get(agent.port, "/pods").map(|b| b.matches("\"ready\":true").count()).unwrap_or(0) < n {
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn metric(text: &str, prefix: &str) -> Option<f64> {
    text.lines().find(|l| l.starts_with(prefix)).and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

fn total_probes(text: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with("prober_probe_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn run(dir: &Path, probes: Option<(u16, u16)>) -> (u64, u64) {
    write_pods(dir, PODS, probes);
    let (agent, _) = Agent::start(dir);
    let t = Instant::now();
    agent.wait_running(PODS, Duration::from_secs(300));
    if probes.is_some() {
        wait_ready(&agent, PODS);
        println!("{PODS} pods with probes running and Ready after {:.1?}", t.elapsed());
    }
    std::thread::sleep(Duration::from_secs(5));
    let pid = agent.child.id();
    let rss = rss_kib(pid);
    let threads = status_field(pid, "Threads:").unwrap_or(0);
    if probes.is_some() {
        let m0 = http_get(agent.port, "/metrics").unwrap_or_default();
        let t0 = thread_ticks(pid);
        let c0 = cpu_ticks(pid);
        let w = Instant::now();
        std::thread::sleep(Duration::from_secs(20));
        let secs = w.elapsed().as_secs_f64();
        let cpu = (cpu_ticks(pid) - c0) as f64 / 100.0 / secs * 100.0;
        let m = http_get(agent.port, "/metrics").unwrap_or_default();
        let t1 = thread_ticks(pid);
        let per: Vec<String> = t1
            .iter()
            .map(|(name, t)| (name, (t - t0.get(name).copied().unwrap_or(0)) as f64 / 100.0 / secs * 100.0))
            .filter(|(_, pct)| *pct >= 0.05)
            .map(|(name, pct)| format!("{name} {pct:.1}%"))
            .collect();
        let rate = (total_probes(&m) - total_probes(&m0)) / secs;
        let q = |quantile: &str| {
            metric(&m, &format!("ferrolet_prober_lateness_seconds{{quantile=\"{quantile}\"}}")).unwrap_or(f64::NAN)
                * 1000.0
        };
        println!(
            "1000 workers: {rate:.0} probes/s, agent CPU {cpu:.1}% of one core, RSS {rss} KiB, {threads} threads ({} probe threads)",
            metric(&m, "ferrolet_prober_threads ").unwrap_or(0.0)
        );
        println!("CPU by thread: {}", per.join(", "));
        println!(
            "probe lateness over the last 10000 probes: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
            q("0.5"),
            q("0.99"),
            q("1")
        );
    } else {
        println!("{PODS} pods without probes: RSS {rss} KiB, {threads} threads");
    }
    drop(agent);
    (rss, threads)
}

/// Exec probes that hang (`sleep 100`) past their 30 s timeout.
const SLOW: usize = 8;
/// HTTP probes at a 1 s period beside them.
const FAST: usize = 20;
/// How long the mix is watched.
const WINDOW: Duration = Duration::from_secs(45);

fn slow_pod(i: usize) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: slow{i}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: none\n    command: [sleep, '3600']\n    readinessProbe:\n      exec:\n        command: [sleep, '100']\n      timeoutSeconds: 30\n      periodSeconds: 1\n")
}

fn fast_pod(i: usize, http: u16) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: fast{i}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: none\n    command: [sleep, '3600']\n    livenessProbe:\n      httpGet: {{host: 127.0.0.1, port: {http}, path: /healthz}}\n      periodSeconds: 1\n")
}

/// Probes counted in `prober_probe_total` for pods whose name starts with `prefix`.
fn probes_of(text: &str, prefix: &str) -> f64 {
    let needle = format!("pod=\"{prefix}");
    text.lines()
        .filter(|l| l.starts_with("prober_probe_total{") && l.contains(&needle))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn slow_beside_fast(dir: &Path, http: u16) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir.join("manifests")).unwrap();
    for i in 0..SLOW {
        std::fs::write(dir.join(format!("manifests/slow{i}.yaml")), slow_pod(i)).unwrap();
    }
    for i in 0..FAST {
        std::fs::write(dir.join(format!("manifests/fast{i}.yaml")), fast_pod(i, http)).unwrap();
    }
    let (agent, _) = Agent::start(dir);
    agent.wait_running(SLOW + FAST, Duration::from_secs(120));
    // Let every slow probe start hanging.
    std::thread::sleep(Duration::from_secs(3));
    let m0 = http_get(agent.port, "/metrics").unwrap_or_default();
    let w = Instant::now();
    std::thread::sleep(WINDOW);
    let secs = w.elapsed().as_secs_f64();
    let m = http_get(agent.port, "/metrics").unwrap_or_default();
    let fast = (probes_of(&m, "fast") - probes_of(&m0, "fast")) / FAST as f64 / secs * 60.0;
    let slow = probes_of(&m, "slow") - probes_of(&m0, "slow");
    let q = |quantile: &str| {
        metric(&m, &format!("ferrolet_prober_lateness_seconds{{quantile=\"{quantile}\"}}")).unwrap_or(f64::NAN) * 1000.0
    };
    println!(
        "{SLOW} hanging exec probes (timeout 30 s) beside {FAST} HTTP probes (1 s): {fast:.1} probes per minute per fast probe (60 is on time), {slow:.0} slow probes finished in {secs:.0} s, {} probe threads, {} agent threads",
        metric(&m, "ferrolet_prober_threads ").unwrap_or(0.0),
        status_field(agent.child.id(), "Threads:").unwrap_or(0)
    );
    println!(
        "probe lateness with slow probes running: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        q("0.5"),
        q("0.99"),
        q("1")
    );
    drop(agent);
}

/// Pods of the probe-cost case, each with an HTTP and a TCP probe at 1 s.
const COST_PODS: usize = 100;
/// How long each round of the probe-cost case runs before it is measured.
const COST_WARM_UP: Duration = Duration::from_secs(25);
/// How long each round of the probe-cost case is measured.
const COST_WINDOW: Duration = Duration::from_secs(30);

/// What one round of the probe-cost case measured.
struct Round {
    /// Agent CPU, % of one core.
    cpu: f64,
    /// Agent CPU µs per probe.
    per_probe: f64,
    /// Lateness p50, p99, max in ms.
    late: [f64; 3],
    /// Probes per second the servers saw.
    rate: f64,
}

/// One round of the probe-cost case.
fn cost_round(dir: &Path, ports: (u16, u16), hits: &Hits) -> Round {
    write_pods(dir, COST_PODS, Some(ports));
    let (agent, _) = Agent::start(dir);
    agent.wait_running(COST_PODS, Duration::from_secs(120));
    wait_ready(&agent, COST_PODS);
    // Lateness is kept over the last 10000 probes (50 s here): wait until the start-up
    // burst of 200 first probes has left that window.
    std::thread::sleep(COST_WARM_UP);
    let pid = agent.child.id();
    let (c0, h0, w) = (cpu_ticks(pid), hits.total(), Instant::now());
    std::thread::sleep(COST_WINDOW);
    let (c1, h1, secs) = (cpu_ticks(pid), hits.total(), w.elapsed().as_secs_f64());
    let m = http_get(agent.port, "/metrics").unwrap_or_default();
    let cpu_secs = (c1 - c0) as f64 / 100.0;
    let probes = (h1 - h0) as f64;
    let q = |quantile: &str| {
        metric(&m, &format!("ferrolet_prober_lateness_seconds{{quantile=\"{quantile}\"}}")).unwrap_or(f64::NAN) * 1000.0
    };
    drop(agent);
    Round {
        cpu: cpu_secs / secs * 100.0,
        per_probe: cpu_secs / probes * 1e6,
        late: [q("0.5"), q("0.99"), q("1")],
        rate: probes / secs,
    }
}

/// Three rounds of the probe-cost case, reported as min / median / max.
fn probe_cost(dir: &Path, ports: (u16, u16), hits: &Hits) {
    let rounds: Vec<_> = (0..3).map(|i| cost_round(&dir.join(format!("cost{i}")), ports, hits)).collect();
    let stat = |f: &dyn Fn(&Round) -> f64| {
        let mut v: Vec<f64> = rounds.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        format!("{:.2} / {:.2} / {:.2}", v[0], v[1], v[2])
    };
    println!(
        "probe cost, {COST_PODS} pods with an HTTP and a TCP probe at 1 s, 3 rounds of {COST_WINDOW:?} (min / median / max):"
    );
    println!("  probes/s seen by the servers {}", stat(&|r| r.rate));
    println!("  agent CPU % of one core      {}", stat(&|r| r.cpu));
    println!("  agent CPU µs per probe       {}", stat(&|r| r.per_probe));
    println!("  lateness p50 ms              {}", stat(&|r| r.late[0]));
    println!("  lateness p99 ms              {}", stat(&|r| r.late[1]));
    println!("  lateness max ms              {}", stat(&|r| r.late[2]));
}

fn main() {
    let (ports, hits) = servers();
    let dir = tempfile::tempdir().unwrap();
    let only = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    println!("prober benchmark ({}, release build)", bin().display());
    if only.is_none() || only.as_deref() == Some("cost") {
        probe_cost(dir.path(), ports, &hits);
    }
    if only.is_none() || only.as_deref() == Some("fast") {
        let (base_rss, _) = run(&dir.path().join("a"), None);
        let (rss, _) = run(&dir.path().join("b"), Some(ports));
        println!(
            "RSS growth for 1000 probe workers: {} KiB ({:.2} MiB)",
            rss as i64 - base_rss as i64,
            (rss as f64 - base_rss as f64) / 1024.0
        );
    }
    if only.is_none() || only.as_deref() == Some("slow") {
        slow_beside_fast(&dir.path().join("c"), ports.0);
    }
}
