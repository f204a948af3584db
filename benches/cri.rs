//! `make bench`: ferrolet on the CRI runtime, against the harness's containerd
//! (`tests/cri/up.sh`; `make bench` starts one). Prints numbers; asserts nothing.
//!
//! - pod start: a manifest written until its container runs (containerd's `started_at`),
//!   through ferrolet, against the same CRI calls made directly (RunPodSandbox,
//!   CreateContainer, StartContainer); 20 pods each way, one at a time, in turns. Pods use
//!   `imagePullPolicy: IfNotPresent` (the harness's images are imported, not pullable).
//! - 20 pods written at once (as after a reboot): from the writes to each container started;
//!   then the same CRI calls made directly for 20 pods from as many threads as ferrolet has
//!   pod workers, each thread taking the next pod once its last runs: what containerd allows
//! - 20 pods on the pod network, each with an HTTP readiness and an exec liveness probe:
//!   the agent's RSS and CPU
//! - 100 containers (50 pods of two) with no probes: the agent's CPU, which is the relist
//!   every `sync_frequency` (1 s), and the time of one relist

mod support;

use ferrolet::node::runtime::cri::{translate, CriClient, CriRuntime};
use ferrolet::node::runtime::{ContainerConfig, ContainerRuntime, SandboxConfig};
use ferrolet::proto::cri::{self, ContainerFilter, ContainerState};
use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::common::cri::{busybox, client, endpoint, var, CriNode};
use support::common::{manifest, wait_for, AgentProcess};
use support::{cpu_ticks, rss_kib, status_field};

const PODS: usize = 20;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn nanos(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64
}

fn summary(label: &str, mut v: Vec<Duration>) -> Duration {
    v.sort();
    let p50 = percentile(&v, 0.5);
    println!(
        "  {label}: p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms",
        ms(p50),
        ms(percentile(&v, 0.9)),
        ms(v[v.len() - 1])
    );
    p50
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// When the running container of pod `pod` (label) started, by containerd's clock.
fn started_at(c: &CriClient, pod: &str) -> Option<i64> {
    let mut filter = ContainerFilter::new();
    filter.set_label_selector(HashMap::from([("io.kubernetes.pod.name".to_string(), pod.to_string())]));
    let listed = c.list_containers(filter).ok()?;
    let running = listed.into_iter().find(|x| x.state() == ContainerState::CONTAINER_RUNNING)?;
    Some(c.container_status(running.id()).ok()?.started_at())
}

/// One pod started through the same CRI calls the agent makes, without the agent. Returns
/// when its first call was made, when containerd started its container, and its sandbox id.
fn direct_start(c: &CriClient, logs: &std::path::Path, i: usize) -> (SystemTime, i64, String) {
    let owner = translate::owner_labels("bench-direct");
    let uid = ferrolet::base::random::random_id();
    let sandbox = SandboxConfig {
        pod_uid: uid.clone(),
        pod_name: format!("direct{i}"),
        namespace: "default".into(),
        log_directory: logs.join(&uid),
        host_network: true,
        cgroup_parent: format!("{}/bench-direct/pod{uid}", var("FERROLET_CRI_CGROUP")),
        ..Default::default()
    };
    let container = ContainerConfig {
        name: "c".into(),
        image: busybox(),
        argv: vec!["sleep".into(), "3600".into()],
        log_path: logs.join(&uid).join("c/0.log"),
        ..Default::default()
    };
    let t0 = SystemTime::now();
    let mut req = cri::RunPodSandboxRequest::new();
    req.set_config(translate::sandbox_config(&sandbox, &owner).unwrap());
    let id = c.run_pod_sandbox(&req).unwrap();
    let create = translate::create_container_request(&id, &sandbox, &container, &owner).unwrap();
    let cid = c.create_container(&create).unwrap();
    c.start_container(&cid).unwrap();
    (t0, c.container_status(&cid).unwrap().started_at(), id)
}

/// Removes the sandboxes `direct_start` made, and their cgroup parent.
fn remove_direct(c: &CriClient, made: &[String]) {
    for id in made {
        let _ = c.stop_pod_sandbox(id);
        let _ = c.remove_pod_sandbox(id);
    }
    if let Ok(driver) = ferrolet::node::cm::cgroupfs::detect(std::path::Path::new("/proc/self/mountinfo"), None) {
        let _ = driver.destroy(&format!("{}/bench-direct", var("FERROLET_CRI_CGROUP")));
    }
}

/// One pod started through ferrolet: (its manifest written, the agent seeing it) until
/// containerd started its container. The agent sees a manifest once the directory has been
/// quiet for 20 ms (`podsource::watch::SETTLE`); when is read from its log line.
fn agent_start(c: &CriClient, node: &CriNode, agent: &AgentProcess, i: usize) -> (Duration, Duration) {
    let name = format!("start{i}");
    let spec = format!(
        "  hostNetwork: true\n  containers:\n  - name: c\n    image: {}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, '3600']\n",
        busybox()
    );
    let t0 = SystemTime::now();
    node.sb.write_manifest(&format!("{name}.yaml"), &manifest(&name, &spec));
    let pod = format!("{name}-{}", node.node);
    let started = wait_for("the pod's container to run", Duration::from_secs(60), || started_at(c, &pod));
    let seen_line = format!("{name}.yaml: 1 pod(s)");
    let log = agent.log_text();
    let seen = log.lines().find(|l| l.contains(&seen_line)).and_then(|l| l.split_whitespace().next());
    let seen = seen.and_then(ferrolet::base::timefmt::parse_rfc3339).expect("the agent logs each manifest it reads");
    let since = |t: SystemTime| Duration::from_nanos((started - nanos(t)).max(0) as u64);
    (since(t0), since(seen))
}

/// Pod starts both ways, taken in turns so both see the same containerd (as it fills up).
fn pod_starts(endpoint: &str) {
    let c = client(endpoint);
    let logs = tempfile::tempdir().unwrap();
    let node = CriNode::on(endpoint.into()).unwrap();
    let agent = node.start_with(|t| t.replace("sync_frequency = \"200ms\"", "sync_frequency = \"1s\""), "info");
    let (mut direct, mut written, mut seen, mut made) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..PODS {
        let (t0, started, id) = direct_start(&c, logs.path(), i);
        direct.push(Duration::from_nanos((started - nanos(t0)).max(0) as u64));
        made.push(id);
        let (from_write, from_seen) = agent_start(&c, &node, &agent, i);
        written.push(from_write);
        seen.push(from_seen);
    }
    drop(agent);
    remove_direct(&c, &made);
    println!("pod start to container started (containerd's clock), {PODS} pods each way, in turns:");
    let direct = summary("direct CRI calls, from the first call", direct);
    let seen = summary("through ferrolet, from the manifest seen (ms log stamps)", seen);
    let written = summary("through ferrolet, from the manifest written (+20 ms settle)", written);
    println!(
        "  overhead at p50: {:.1} ms from the manifest seen, {:.1} ms from it written",
        ms(seen) - ms(direct),
        ms(written) - ms(direct)
    );
}

/// 20 pods written at once, as after a node's reboot: from the writes to each container's
/// start (containerd's clock): the first, the median and the last.
fn pods_at_once(endpoint: &str) {
    let c = client(endpoint);
    let node = CriNode::on(endpoint.into()).unwrap();
    let agent = node.start_with(|t| t.replace("sync_frequency = \"200ms\"", "sync_frequency = \"1s\""), "info");
    let spec = format!(
        "  hostNetwork: true\n  terminationGracePeriodSeconds: 2\n  containers:\n  - name: c\n    image: {}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, '3600']\n",
        busybox()
    );
    let t0 = SystemTime::now();
    for i in 0..PODS {
        node.sb.write_manifest(&format!("burst{i}.yaml"), &manifest(&format!("burst{i}"), &spec));
    }
    let mut starts: Vec<Duration> = (0..PODS)
        .map(|i| {
            let pod = format!("burst{i}-{}", node.node);
            let started = wait_for("the pod's container to run", Duration::from_secs(120), || started_at(&c, &pod));
            Duration::from_nanos((started - nanos(t0)).max(0) as u64)
        })
        .collect();
    drop(agent);
    starts.sort();
    println!(
        "{PODS} pods written at once, to each container started (containerd's clock): first {:.0} ms, median {:.0} ms, last {:.0} ms",
        ms(starts[0]),
        ms(percentile(&starts, 0.5)),
        ms(starts[PODS - 1])
    );
    // On a containerd as the agent found it: its pods removed first.
    drop(node);
    let threads = ferrolet::pods::workers::MAX_WORKERS;
    let mut direct = direct_at_once(&c, threads);
    direct.sort();
    println!(
        "  the same CRI calls made directly from {threads} threads (ferrolet's pod workers), from the first call: first {:.0} ms, median {:.0} ms, last {:.0} ms",
        ms(direct[0]),
        ms(percentile(&direct, 0.5)),
        ms(direct[PODS - 1])
    );
}

/// `PODS` pods started by `direct_start` from `threads` threads at once, each thread taking
/// the next pod once its last one runs: from the first call to each container started.
fn direct_at_once(c: &CriClient, threads: usize) -> Vec<Duration> {
    let logs = tempfile::tempdir().unwrap();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let t0 = SystemTime::now();
    let started = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= PODS {
                    break;
                }
                let (_, at, id) = direct_start(c, logs.path(), PODS + i);
                started.lock().unwrap().push((at, id));
            });
        }
    });
    let started = started.into_inner().unwrap();
    remove_direct(c, &started.iter().map(|(_, id)| id.clone()).collect::<Vec<_>>());
    started.iter().map(|(at, _)| Duration::from_nanos((at - nanos(t0)).max(0) as u64)).collect()
}

/// The agent's CPU (% of one core) over `secs`.
fn cpu_percent(agent: &AgentProcess, secs: u64) -> f64 {
    let pid = agent.child.id();
    let tick = 100.0; // USER_HZ
    let (c0, t0) = (cpu_ticks(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(secs));
    (cpu_ticks(pid) - c0) as f64 / tick / t0.elapsed().as_secs_f64() * 100.0
}

fn wait_running(agent: &AgentProcess, containers: usize) {
    wait_for("every container running", Duration::from_secs(300), || {
        let n: usize = agent
            .pods()
            .iter()
            .filter_map(|p| p.status.as_ref())
            .map(|s| s.container_statuses.iter().filter(|c| c.state.running.is_some()).count())
            .sum();
        (n >= containers).then_some(())
    });
}

fn probed_pods(endpoint: &str) {
    let node = CriNode::on(endpoint.into()).unwrap();
    for i in 0..PODS {
        let spec = format!(
            "  containers:
  - name: web
    image: {}
    imagePullPolicy: IfNotPresent
    command: [sh, -c, 'mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 8080 -h /www']
    readinessProbe:
      httpGet: {{path: /index.html, port: 8080}}
      periodSeconds: 1
    livenessProbe:
      exec: {{command: ['true']}}
      periodSeconds: 5
",
            busybox()
        );
        node.sb.write_manifest(&format!("web{i}.yaml"), &manifest(&format!("web{i}"), &spec));
    }
    let agent = node.start_with(|t| t.replace("sync_frequency = \"200ms\"", "sync_frequency = \"1s\""), "warn");
    wait_for("every pod ready", Duration::from_secs(300), || {
        let ready = agent
            .pods()
            .iter()
            .filter(|p| {
                p.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        (ready == PODS).then_some(())
    });
    std::thread::sleep(Duration::from_secs(10));
    let cpu = cpu_percent(&agent, 30);
    let pid = agent.child.id();
    println!(
        "{PODS} pods on the pod network, HTTP readiness (1 s) and exec liveness (5 s) probes: agent RSS {:.1} MiB, threads {}, CPU {cpu:.2} % of one core (30 s)",
        rss_kib(pid) as f64 / 1024.0,
        status_field(pid, "Threads:").unwrap_or(0)
    );
}

fn idle_containers(endpoint: &str) {
    let node = CriNode::on(endpoint.into()).unwrap();
    for i in 0..50 {
        let spec = format!(
            "  hostNetwork: true\n  containers:\n  - name: a\n    image: {b}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, '3600']\n  - name: b\n    image: {b}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, '3601']\n",
            b = busybox()
        );
        node.sb.write_manifest(&format!("idle{i}.yaml"), &manifest(&format!("idle{i}"), &spec));
    }
    let agent = node.start_with(|t| t.replace("sync_frequency = \"200ms\"", "sync_frequency = \"1s\""), "warn");
    wait_running(&agent, 100);
    std::thread::sleep(Duration::from_secs(5));
    let cpu = cpu_percent(&agent, 30);
    println!(
        "100 containers (50 pods), no probes, relist every 1 s: agent CPU {cpu:.2} % of one core (30 s), RSS {:.1} MiB",
        rss_kib(agent.child.id()) as f64 / 1024.0
    );
    // One relist as the pod manager makes it, from another client: mostly waiting for
    // containerd (wall time), once the first look has cached every container's status.
    let rt = CriRuntime::new(client(endpoint), &var("FERROLET_CRI_PAUSE_IMAGE"), &node.node, &Default::default());
    let (s, c) = (rt.list_pod_sandboxes().unwrap(), rt.list_containers().unwrap());
    let t = Instant::now();
    for _ in 0..20 {
        rt.list_pod_sandboxes().unwrap();
        rt.list_containers().unwrap();
    }
    println!(
        "  one relist of {} sandboxes and {} containers: {:.2} ms wall (mean of 20)",
        s.len(),
        c.len(),
        ms(t.elapsed()) / 20.0
    );
}

fn main() {
    println!("ferrolet CRI benchmark (release build, containerd of tests/cri/up.sh)");
    let Some(endpoint) = endpoint() else {
        println!("skipped: FERROLET_CRI_ENDPOINT is not set (make bench starts the harness's containerd)");
        return;
    };
    // `cargo bench --bench cri -- at-once` (or `starts`, `probes`, `idle`) runs one case only.
    let only = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let run = |case: &str| only.as_deref().map_or(true, |o| o == case);
    if run("starts") {
        pod_starts(&endpoint);
    }
    if run("at-once") {
        pods_at_once(&endpoint);
    }
    if run("probes") {
        probed_pods(&endpoint);
    }
    if run("idle") {
        idle_containers(&endpoint);
    }
}
