//! `make bench`: the agent's footprint and latencies, measured on a real `ferrolet run`
//! (release build) with the process runtime. Prints numbers; asserts nothing.
//!
//! - start-up: `ferrolet run` to the first `/healthz` 200
//! - RSS and threads idle with 0 pods, and with 50 pods (one `sleep` each), plus the
//!   agent's CPU over 10 s idle with 50 pods and the shims' RSS
//! - manifest-to-running: a manifest written to disk until its container process runs; the
//!   same for a pod with volumes (an `emptyDir`, a memory-backed one, downward API files,
//!   mounted at paths the node does not have, in the container's own root), as root

mod support;

use std::path::Path;
use std::time::{Duration, Instant};
use support::{bin, cpu_ticks, rss_kib, running_containers, shims_memory_kib, status_field, Agent};

fn pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: none\n    command: [sleep, '3600']\n"
    )
}

/// A pod whose container mounts three volumes at directories under `/data` (made in the
/// container's own root, not on the node).
fn pod_with_volumes(name: &str) -> String {
    let m = "/data";
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n  volumes:\n  - {{name: a, emptyDir: {{}}}}\n  - {{name: b, emptyDir: {{medium: Memory, sizeLimit: 1Mi}}}}\n  - {{name: c, downwardAPI: {{items: [{{path: name, fieldRef: {{fieldPath: metadata.name}}}}]}}}}\n  containers:\n  - name: c\n    image: none\n    command: [sleep, '3600']\n    volumeMounts:\n    - {{name: a, mountPath: {m}/a}}\n    - {{name: b, mountPath: {m}/b}}\n    - {{name: c, mountPath: {m}/c}}\n"
    )
}

/// The disk space (allocated blocks) of the directories named `name` in each directory
/// of `parent`, with what they hold, in KiB.
fn disk_kib(parent: &Path, name: &str) -> u64 {
    fn walk(p: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        let Ok(m) = std::fs::symlink_metadata(p) else { return 0 };
        let below = if m.is_dir() {
            std::fs::read_dir(p).into_iter().flatten().flatten().map(|e| walk(&e.path())).sum()
        } else {
            0
        };
        m.blocks() * 512 / 1024 + below
    }
    std::fs::read_dir(parent).into_iter().flatten().flatten().map(|e| walk(&e.path().join(name))).sum()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("manifests")).unwrap();
    println!("ferrolet agent benchmark ({} , release build)", bin().display());

    let mut startups = Vec::new();
    for _ in 0..5 {
        let (agent, took) = Agent::start(dir.path());
        startups.push(took);
        drop(agent);
    }
    startups.sort();
    println!("start-up to /healthz 200: p50 {:?}, max {:?} (5 runs)", percentile(&startups, 0.5), startups[4]);

    let (agent, _) = Agent::start(dir.path());
    std::thread::sleep(Duration::from_secs(3));
    let pid = agent.child.id();
    println!(
        "idle, 0 pods:   RSS {} KiB ({:.2} MiB), threads {}",
        rss_kib(pid),
        rss_kib(pid) as f64 / 1024.0,
        status_field(pid, "Threads:").unwrap_or(0)
    );

    for i in 0..50 {
        std::fs::write(dir.path().join(format!("manifests/p{i:02}.yaml")), pod(&format!("p{i:02}"))).unwrap();
    }
    let t = Instant::now();
    agent.wait_running(50, Duration::from_secs(120));
    println!("50 pods written at once: all running after {:?}", t.elapsed());
    std::thread::sleep(Duration::from_secs(3));
    let ticks_per_sec = 100.0; // USER_HZ on Linux
    let c0 = cpu_ticks(pid);
    let w = Instant::now();
    std::thread::sleep(Duration::from_secs(10));
    let cpu = (cpu_ticks(pid) - c0) as f64 / ticks_per_sec / w.elapsed().as_secs_f64() * 100.0;
    let (shims, shim_rss, shim_private) = shims_memory_kib(&dir.path().join("state"));
    println!(
        "idle, 50 pods:  RSS {} KiB ({:.2} MiB), threads {}, CPU {:.2}% of one core over 10 s",
        rss_kib(pid),
        rss_kib(pid) as f64 / 1024.0,
        status_field(pid, "Threads:").unwrap_or(0),
        cpu
    );
    println!(
        "shims:          {shims} processes, RSS {} KiB each on average, of which {} KiB private (the rest is the shared binary)",
        shim_rss / shims.max(1) as u64,
        shim_private / shims.max(1) as u64
    );
    let layers = disk_kib(&dir.path().join("state/runtime/containers"), "root");
    println!(
        "root:           each idle container's own root (writable layer, overlay work dir, mount points) takes {} KiB on disk on average",
        layers / shims.max(1) as u64
    );

    let mut latencies = Vec::new();
    for i in 0..10 {
        let before = running_containers(agent.port);
        let t = Instant::now();
        std::fs::write(dir.path().join(format!("manifests/late{i}.yaml")), pod(&format!("late{i}"))).unwrap();
        agent.wait_running(before + 1, Duration::from_secs(30));
        latencies.push(t.elapsed());
        std::thread::sleep(Duration::from_millis(137)); // decorrelate from the 1 s poll
    }
    latencies.sort();
    println!(
        "manifest on disk -> container running (directory watch; poll every 1s as the fallback): p50 {:?}, max {:?} (10 runs)",
        percentile(&latencies, 0.5),
        latencies[9]
    );

    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("manifest on disk -> running, pod with 3 volumes: skipped (a container's own root needs root)");
        return;
    }
    let mut latencies = Vec::new();
    for i in 0..10 {
        let before = running_containers(agent.port);
        let t = Instant::now();
        std::fs::write(dir.path().join(format!("manifests/vol{i}.yaml")), pod_with_volumes(&format!("vol{i}")))
            .unwrap();
        agent.wait_running(before + 1, Duration::from_secs(30));
        latencies.push(t.elapsed());
        std::thread::sleep(Duration::from_millis(137));
    }
    latencies.sort();
    println!(
        "manifest on disk -> container running, pod with 3 volumes (emptyDir, tmpfs, downward API): p50 {:?}, max {:?} (10 runs)",
        percentile(&latencies, 0.5),
        latencies[9]
    );
}
