//! `make bench`: 1000 probe workers (500 containers, each with an HTTP readiness probe and a
//! TCP liveness probe, 1 s periods) against servers on 127.0.0.1: the agent's CPU, RSS,
//! threads, and probe lateness (start minus scheduled time). The RSS growth is measured
//! against the same 500 containers without probes. Then slow probes beside fast ones:
//! 8 exec probes that hang past their 30 s timeout and 20 HTTP probes at 1 s, to show that
//! a slow probe holds up only its own worker. Prints numbers; asserts nothing.
//! The probe-cost case: 100 pods, each with an HTTP readiness and a TCP liveness probe at
//! 1 s (200 probes/s), against targets in a process of their own (`support/probe_target.py`)
//! that close first, then against targets that wait for the prober to close; three rounds
//! each, beside three of the same pods without probes: the agent's CPU in % of one core
//! and per probe, what the probes alone cost in CPU and in the agent's wake-ups, the
//! lateness, and the rate the targets saw (proof that the probes ran). `cost-cri` measures
//! the same on the CRI runtime, against the containerd of `tests/cri/up.sh` (`make bench`
//! brings it up; skipped without `FERROLET_CRI_ENDPOINT`), with busybox containers and
//! kubelet's 1 s relist.
//! `wake` measures what a thread's wake-up from a timer sleep costs it in CPU, which is why
//! the scheduler sends out the probes due within 20 ms of each other together.
//! `cargo bench --bench prober -- slow` (or `fast`, `cost`, `cost-cri`, `wake`) runs one case only.

mod support;

use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};
use support::{bin, cpu_ticks, http_get, rss_kib, sleeps, status_field, thread_ticks, Agent};

const PODS: usize = 500;

/// In-process probe targets for the 1000-worker and slow cases: an HTTP server and a TCP
/// port that accepts.
fn servers() -> (u16, u16) {
    let (http, _) = support::common::ok_http_server();
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp.local_addr().unwrap().port();
    std::thread::spawn(move || for _conn in tcp.incoming() {});
    (http, port)
}

fn pod(i: usize, probes: Option<(u16, u16)>) -> String {
    let mut y = format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p{i:03}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: none\n    command: [sleep, '3600']\n");
    y.push_str(&probes_yaml(probes));
    y
}

/// A container's HTTP readiness and TCP liveness probes at 1 s, to 127.0.0.1.
fn probes_yaml(probes: Option<(u16, u16)>) -> String {
    let Some((http, tcp)) = probes else { return String::new() };
    format!(
        "    readinessProbe:\n      httpGet: {{host: 127.0.0.1, port: {http}, path: /healthz}}\n      periodSeconds: 1\n    livenessProbe:\n      tcpSocket: {{host: 127.0.0.1, port: {tcp}}}\n      periodSeconds: 1\n"
    )
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

/// Probe targets in a process of their own (`support/probe_target.py`, one epoll loop), as
/// a real service is: `mode` `server` closes each connection first (as Python's
/// http.server and most health endpoints do), `client` waits for the prober to close.
struct Target {
    child: std::process::Child,
    ports: (u16, u16),
    stats: u16,
}

impl Target {
    fn start(mode: &str) -> Target {
        use std::io::BufRead;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/support/probe_target.py");
        let mut child = std::process::Command::new("python3")
            .arg(script)
            .arg(mode)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs the probe targets");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let p: Vec<u16> = line.split_whitespace().skip(1).filter_map(|w| w.parse().ok()).collect();
        assert_eq!(p.len(), 3, "probe_target.py said {line:?}");
        Target { child, ports: (p[0], p[1]), stats: p[2] }
    }

    /// HTTP requests plus TCP connections seen so far.
    fn hits(&self) -> usize {
        use std::io::Read;
        let mut s = String::new();
        std::net::TcpStream::connect(("127.0.0.1", self.stats)).unwrap().read_to_string(&mut s).unwrap();
        s.split_whitespace().filter_map(|w| w.parse::<usize>().ok()).sum()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        // Its stdin closes: it exits.
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// What one round of the probe-cost case measured.
struct Round {
    /// Agent CPU, % of one core.
    cpu: f64,
    /// Agent CPU µs per probe.
    per_probe: f64,
    /// Lateness p50, p99, max in ms.
    late: [f64; 3],
    /// Probes per second the targets saw.
    rate: f64,
    /// The agent's threads' sleeps (so wake-ups) per second.
    wakes: f64,
}

/// One round of the probe-cost case: `COST_PODS` pods, probing `target` (none: the same
/// pods without probes, the baseline).
fn cost_round(dir: &Path, target: Option<&Target>) -> Round {
    write_pods(dir, COST_PODS, target.map(|t| t.ports));
    let (agent, _) = Agent::start(dir);
    agent.wait_running(COST_PODS, Duration::from_secs(120));
    wait_ready(&agent, COST_PODS);
    measure(agent.child.id(), agent.port, target)
}

/// The same round on the CRI runtime: host-network busybox pods on the harness's containerd.
fn cost_round_cri(endpoint: &str, target: Option<&Target>) -> Round {
    use support::common::cri::{busybox, CriNode};
    let node = CriNode::on(endpoint.into()).expect("the harness's containerd");
    for i in 0..COST_PODS {
        let mut spec = format!(
            "  hostNetwork: true\n  terminationGracePeriodSeconds: 2\n  containers:\n  - name: c\n    image: {}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, '3600']\n",
            busybox()
        );
        spec.push_str(&probes_yaml(target.map(|t| t.ports)));
        node.sb.write_manifest(&format!("p{i:03}.yaml"), &support::common::manifest(&format!("p{i:03}"), &spec));
    }
    // The defaults (a relist and a look at the manifests every second), not the tests' 200 ms.
    let defaults =
        |t: String| t.replace("manifest_check_interval = \"200ms\"\n", "").replace("sync_frequency = \"200ms\"\n", "");
    let agent = node.start_with(defaults, "warn");
    support::common::wait_for("every pod ready", Duration::from_secs(300), || {
        let ready = |p: &ferrolet::api::Pod| {
            p.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        };
        (agent.pods().iter().filter(|p| ready(p)).count() == COST_PODS).then_some(())
    });
    measure(agent.child.id(), agent.port, target)
}

/// Measures a round once its pods are ready: the agent's CPU and lateness, and the rate the
/// targets saw.
fn measure(pid: u32, port: u16, target: Option<&Target>) -> Round {
    // Lateness is kept over the last 10000 probes (50 s here): wait until the start-up
    // burst of 200 first probes has left that window.
    std::thread::sleep(COST_WARM_UP);
    let hits = || target.map_or(0, Target::hits);
    let (c0, s0, h0, w) = (cpu_ticks(pid), sleeps(pid), hits(), Instant::now());
    std::thread::sleep(COST_WINDOW);
    let (c1, s1, h1, secs) = (cpu_ticks(pid), sleeps(pid), hits(), w.elapsed().as_secs_f64());
    let m = http_get(port, "/metrics").unwrap_or_default();
    let cpu_secs = (c1 - c0) as f64 / 100.0;
    let probes = (h1 - h0) as f64;
    let q = |quantile: &str| {
        metric(&m, &format!("ferrolet_prober_lateness_seconds{{quantile=\"{quantile}\"}}")).unwrap_or(f64::NAN) * 1000.0
    };
    Round {
        cpu: cpu_secs / secs * 100.0,
        per_probe: cpu_secs / probes * 1e6,
        late: [q("0.5"), q("0.99"), q("1")],
        rate: probes / secs,
        wakes: s1.saturating_sub(s0) as f64 / secs,
    }
}

/// `f` over `rounds`, sorted.
fn sorted(rounds: &[Round], f: &dyn Fn(&Round) -> f64) -> Vec<f64> {
    let mut v: Vec<f64> = rounds.iter().map(f).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// The median of `f` over `rounds`.
fn median(rounds: &[Round], f: &dyn Fn(&Round) -> f64) -> f64 {
    let v = sorted(rounds, f);
    v[v.len() / 2]
}

/// min / median / max of `f` over `rounds`.
fn stat(rounds: &[Round], f: &dyn Fn(&Round) -> f64) -> String {
    let v = sorted(rounds, f);
    format!("{:.2} / {:.2} / {:.2}", v[0], v[v.len() / 2], v[v.len() - 1])
}

/// The probe-cost case: three rounds of the pods without probes (the baseline), then three
/// with each closing order; what the probes alone cost is the round's CPU less the
/// baseline's median, over the probes the targets saw.
fn probe_cost(runtime: &str, round: &dyn Fn(&str, Option<&Target>) -> Round) {
    println!(
        "probe cost on the {runtime}, {COST_PODS} pods with an HTTP and a TCP probe at 1 s against targets in a process of their own, 3 rounds of {COST_WINDOW:?} each (min / median / max):"
    );
    let base: Vec<_> = (0..3).map(|i| round(&format!("base{i}"), None)).collect();
    let (idle, idle_wakes) = (median(&base, &|r| r.cpu), median(&base, &|r| r.wakes));
    println!("  {COST_PODS} pods, no probes: agent CPU % of one core {}", stat(&base, &|r| r.cpu));
    println!("  {COST_PODS} pods, no probes: agent wake-ups/s   {}", stat(&base, &|r| r.wakes));
    for mode in ["server", "client"] {
        let target = Target::start(mode);
        let rounds: Vec<_> = (0..3).map(|i| round(&format!("cost-{mode}{i}"), Some(&target))).collect();
        println!("  the {mode} closes first:");
        println!("    probes/s seen by the targets   {}", stat(&rounds, &|r| r.rate));
        println!("    agent CPU % of one core        {}", stat(&rounds, &|r| r.cpu));
        println!("    agent CPU µs per probe         {}", stat(&rounds, &|r| r.per_probe));
        println!("    the probes alone, µs per probe {}", stat(&rounds, &|r| (r.cpu - idle) / 100.0 / r.rate * 1e6));
        println!("    the probes alone, wake-ups per probe {}", stat(&rounds, &|r| (r.wakes - idle_wakes) / r.rate));
        println!("    lateness p50 ms                {}", stat(&rounds, &|r| r.late[0]));
        println!("    lateness p99 ms                {}", stat(&rounds, &|r| r.late[1]));
        println!("    lateness max ms                {}", stat(&rounds, &|r| r.late[2]));
    }
}

/// This thread's CPU time so far (the scheduler's exact count, `/proc/thread-self/schedstat`).
fn thread_cpu() -> Duration {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    Duration::from_nanos(text.split_whitespace().next().unwrap().parse().unwrap())
}

/// What one wake-up from a timer sleep costs the woken thread, for a few sleep lengths:
/// nothing else runs in the loop, so the CPU it takes is the wake-up's.
fn wake_cost() {
    println!("a thread's CPU per wake-up from a timer sleep:");
    for (ms, n) in [(1, 2000), (5, 1000), (20, 250)] {
        let before = thread_cpu();
        for _ in 0..n {
            std::thread::sleep(Duration::from_millis(ms));
        }
        let per = (thread_cpu() - before) / n as u32;
        println!("  sleeps of {ms} ms: {:.1} µs of CPU per wake-up ({n} sleeps)", per.as_secs_f64() * 1e6);
    }
}

fn main() {
    let ports = servers();
    let dir = tempfile::tempdir().unwrap();
    let only = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    println!("prober benchmark ({}, release build)", bin().display());
    if only.is_none() || only.as_deref() == Some("wake") {
        wake_cost();
    }
    if only.is_none() || only.as_deref() == Some("cost") {
        probe_cost("process runtime", &|name, target| cost_round(&dir.path().join(name), target));
    }
    if only.is_none() || only.as_deref() == Some("cost-cri") {
        match support::common::cri::endpoint() {
            Some(endpoint) => probe_cost("CRI runtime", &|_, target| cost_round_cri(&endpoint, target)),
            None => println!("probe cost on the CRI runtime: skipped, FERROLET_CRI_ENDPOINT is not set (make bench starts the harness's containerd)"),
        }
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
