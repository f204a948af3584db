//! `make bench`: how fast the eviction manager acts on a memory spike. The release agent on
//! the process runtime, on a node made small on purpose (`kube_reserved` leaves 600 MiB to
//! `kubepods`, `memory.available<150Mi`, so pods may use 450 MiB), runs one BestEffort pod at
//! a time that waits for a signal and then writes 500 MiB into a Memory `emptyDir` at once.
//! Measured from the moment the write starts (and from when it ends, which the pod records)
//! to the agent's `evicting pod` log line, for each way the agent learns of it: the kernel's
//! memory threshold notification (cgroup v1) and the 1 s memory watch alone. Prints p50 and
//! max. Then the cost of it all in the agent: the CPU of the `fl-stats` thread (every
//! collection, the eviction manager's decisions after it, the 1 s memory watch) and of
//! `fl-memcg` over 60 s with 100 pods, each with a disk `emptyDir` and a log. Asserts nothing.
//! Needs root and cgroup v1 (it says so and stops otherwise).

#[path = "support/mod.rs"]
mod support;

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::Agent;

const ROUNDS: usize = 6;

fn mem_total() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let line = text.lines().find(|l| l.starts_with("MemTotal:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

fn now_secs() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// The time of the first log line containing `needle`, as seconds since the epoch.
fn logged_at(log: &Path, needle: &str) -> Option<f64> {
    let text = std::fs::read_to_string(log).ok()?;
    let line = text.lines().find(|l| l.contains(needle))?;
    // `2026-11-28T00:36:33.552Z [WARN ] …`
    let stamp = line.split_whitespace().next()?.trim_end_matches('Z');
    let (date, time) = stamp.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().unwrap_or(0));
    let (y, m, day) = (d.next()?, d.next()?, d.next()?);
    let mut t = time.split(':');
    let (h, min, s) = (t.next()?.parse::<f64>().ok()?, t.next()?.parse::<f64>().ok()?, t.next()?.parse::<f64>().ok()?);
    // Days since the epoch (civil calendar).
    let (y2, m2) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * m2 + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days as f64 * 86_400.0 + h * 3600.0 + min * 60.0 + s)
}

fn pod(name: &str, signal: &Path) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  terminationGracePeriodSeconds: 1\n  volumes:\n  - {{name: mem, emptyDir: {{medium: Memory, sizeLimit: 1Gi}}}}\n  - {{name: signal, hostPath: {{path: {dir}}}}}\n  containers:\n  - name: hog\n    image: x\n    volumeMounts: [{{name: mem, mountPath: /mnt/mem}}, {{name: signal, mountPath: /signal}}]\n    command: [sh, -c, 'while [ ! -e /signal/go ]; do sleep 0.01; done; head -c 524288000 /dev/zero > /mnt/mem/f; date +%s.%N > /signal/filled; exec sleep 3600']\n",
        dir = signal.display()
    )
}

/// `p50 X ms, max Y ms` of `v`, or why there is none.
fn p50_max(v: &mut [f64]) -> String {
    if v.is_empty() {
        return "none (every pod was evicted before its write ended)".into();
    }
    v.sort_by(f64::total_cmp);
    format!("p50 {:.0} ms, max {:.0} ms ({} rounds)", v[(v.len() - 1) / 2], v[v.len() - 1], v.len())
}

fn run(notification: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("e");
    let manifests = dir.join("manifests");
    let signal = dir.join("signal");
    std::fs::create_dir_all(&manifests).unwrap();
    std::fs::create_dir_all(&signal).unwrap();
    let reserved = mem_total() - (600 << 20);
    let extra = format!(
        "kube_reserved = {{ memory = \"{reserved}\" }}\n[eviction]\nhard = {{ \"memory.available\" = \"150Mi\" }}\npressure_transition_period = \"2s\"\nmemory_notification = {notification}\n"
    );
    let (agent, _) = Agent::start_with(&dir, &extra);
    let log = dir.join("agent.log");
    let (mut from_start, mut from_end) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let name = format!("hog{round}");
        let _ = std::fs::remove_file(signal.join("go"));
        let _ = std::fs::remove_file(signal.join("filled"));
        std::fs::write(manifests.join(format!("{name}.yaml")), pod(&name, &signal)).unwrap();
        agent.wait_running(1, Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(500));
        let started = now_secs();
        std::fs::write(signal.join("go"), "").unwrap();
        let needle = format!("evicting pod default/{name}-bench");
        let deadline = Instant::now() + Duration::from_secs(60);
        let evicted = loop {
            if let Some(t) = logged_at(&log, &needle) {
                break t;
            }
            assert!(Instant::now() < deadline, "no eviction of {name}; see {}", log.display());
            std::thread::sleep(Duration::from_millis(20));
        };
        let filled = std::fs::read_to_string(signal.join("filled")).ok().and_then(|s| s.trim().parse::<f64>().ok());
        from_start.push((evicted - started) * 1000.0);
        if let Some(f) = filled {
            from_end.push((evicted - f).max(0.0) * 1000.0);
        }
        std::fs::remove_file(manifests.join(format!("{name}.yaml"))).unwrap();
        // Gone, and the pressure over, before the next round (a BestEffort pod is refused
        // under memory pressure).
        let deadline = Instant::now() + Duration::from_secs(60);
        while support::running_containers(agent.port) > 0
            || support::http_get(agent.port, "/node").is_some_and(|n| n.contains("KubeletHasInsufficientMemory"))
        {
            assert!(Instant::now() < deadline, "round {round} did not end");
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let how = if notification { "kernel notification + 1 s watch" } else { "1 s watch alone" };
    println!(
        "eviction: memory spike to eviction ({how}): from the write's start {}; from its end {}",
        p50_max(&mut from_start),
        p50_max(&mut from_end)
    );
}

fn stats_thread_at_100_pods() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    for i in 0..100 {
        let pod = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i:03}, namespace: default}}\nspec:\n  terminationGracePeriodSeconds: 1\n  volumes:\n  - {{name: scratch, emptyDir: {{}}}}\n  containers:\n  - name: app\n    image: x\n    volumeMounts: [{{name: scratch, mountPath: /scratch}}]\n    command: [sh, -c, 'echo started; head -c 65536 /dev/zero > /scratch/f; exec sleep 3600']\n"
        );
        std::fs::write(manifests.join(format!("p{i:03}.yaml")), pod).unwrap();
    }
    let (agent, _) = Agent::start(&dir);
    agent.wait_running(100, Duration::from_secs(180));
    std::thread::sleep(Duration::from_secs(15));
    let pid = agent.child.id();
    let window = Duration::from_secs(60);
    let ticks = |name: &str| support::thread_ticks(pid).get(name).copied().unwrap_or(0);
    let (s0, m0) = (ticks("fl-stats"), ticks("fl-memcg"));
    std::thread::sleep(window);
    let (s1, m1) = (ticks("fl-stats"), ticks("fl-memcg"));
    let share = |ticks: u64| ticks as f64 / 100.0 / window.as_secs_f64() * 100.0;
    println!(
        "eviction: in the agent with 100 pods, over {window:?}: fl-stats {:.3} % of one core ({} ticks: 6 collections with their eviction decisions, 60 memory checks), fl-memcg {:.3} %",
        share(s1 - s0),
        s1 - s0,
        share(m1 - m0)
    );
}

fn main() {
    // SAFETY: geteuid has no preconditions.
    if !Path::new("/sys/fs/cgroup/memory").is_dir() || unsafe { libc::geteuid() } != 0 {
        println!("eviction: needs root and cgroup v1 memory; skipped");
        return;
    }
    run(true);
    run(false);
    stats_thread_at_100_pods();
}
