//! `make bench` (footprint): the memory budget of a 64 MB device, measured on the binary
//! `$FERROLET_BIN` names (`make bench` passes `make static`'s when it has been built) or
//! else on the release build, with the process runtime. Prints numbers:
//!
//! - RSS, PSS and private memory (`/proc/PID/smaps_rollup`) idle with the device-plugin
//!   server on, with one plugin registered, with 50 pods and with 500 pods (a `sleep` each);
//! - each shim's private memory;
//! - the agent's threads by name;
//! - then the budget itself: 20 pods with liveness, readiness and startup probes (exec,
//!   HTTP, TCP, every 1–2 s), the agent and its shims in a memory cgroup limited to 64 MB
//!   (the workloads are in their pods' cgroups, elsewhere; the binary's pages are dropped
//!   from the page cache first, so the cgroup pays for those it reads), for
//!   `FERROLET_BENCH_BUDGET_SECS` (default 600; 0 skips it). It fails if the cgroup's OOM
//!   killer killed anything or the agent died.

#![allow(clippy::disallowed_methods)] // decoding JSON as it likes (clippy.toml)

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::common::plugin::{Behaviour, TestPlugin};
use support::{bin, rollup_kib, shims_memory_kib, status_field, Agent};

const LIMIT: u64 = 64 << 20;

fn main() {
    let b = bin();
    let size = std::fs::metadata(&b).map(|m| m.len()).unwrap_or(0);
    println!(
        "ferrolet footprint benchmark: {} ({:.1} MB, {})",
        b.display(),
        size as f64 / 1e6,
        if support::common::elf_machine_and_interp(&b).is_some_and(|(_, interp)| !interp) {
            "statically linked"
        } else {
            "dynamically linked: not the static binary; run `make static` first"
        }
    );

    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("manifests")).unwrap();
    std::fs::create_dir_all(dir.path().join("device-plugins")).unwrap();
    let (agent, _) = Agent::start(dir.path());
    let pid = agent.child.id();
    std::thread::sleep(Duration::from_secs(3));
    report("idle, device-plugin server on", pid);
    print_threads(pid);

    let plugin = TestPlugin::start(
        &dir.path().join("device-plugins"),
        "example.com/dev",
        "dev.sock",
        &["d0", "d1"],
        Behaviour::default(),
    );
    plugin.register().expect("the plugin registers");
    std::thread::sleep(Duration::from_secs(3));
    report("idle, one device plugin registered", pid);

    for (n, from) in [(50, 0), (500, 50)] {
        for i in from..n {
            let name = format!("p{i:03}");
            std::fs::write(dir.path().join(format!("manifests/{name}.yaml")), sleep_pod(&name, "")).unwrap();
        }
        agent.wait_running(n, Duration::from_secs(600));
        std::thread::sleep(Duration::from_secs(5));
        report(&format!("{n} pods"), pid);
        let (shims, _, private) = shims_memory_kib(&dir.path().join("state"));
        println!("  shims: {shims}, private memory {} KiB each on average", private / shims.max(1) as u64);
    }
    print_threads(pid);
    drop(plugin);
    drop(agent);

    let secs = std::env::var("FERROLET_BENCH_BUDGET_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(600);
    if secs > 0 {
        budget(Duration::from_secs(secs));
    }
}

/// A pod with one `sleep` container and `probes` (YAML lines under the container).
fn sleep_pod(name: &str, probes: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: none\n    command: [sleep, '86400']\n{probes}"
    )
}

/// 20 pods with probes, the agent and its shims in a 64 MB memory cgroup, for `run`.
fn budget(run: Duration) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("manifests")).unwrap();
    let name = dir.path().file_name().unwrap().to_string_lossy().trim_start_matches('.').to_string();
    let path = Path::new("/sys/fs/cgroup/memory").join(format!("ferrolet-bench-budget-{name}"));
    let cg = match MemCgroup::create(&path, LIMIT) {
        Ok(cg) => cg,
        Err(e) => {
            println!(
                "64 MB budget: skipped: cannot make the memory cgroup {} (cgroup v1, as root): {e}",
                path.display()
            );
            return;
        }
    };
    // The cgroup pays for the binary's pages it reads, as on a device that just booted.
    uncache(&bin());
    let (mut agent, _) = Agent::start_in(dir.path(), "", Some(&cg.0));
    let port = agent.port;
    let probes = format!(
        "    startupProbe: {{tcpSocket: {{host: 127.0.0.1, port: {port}}}, periodSeconds: 1}}\n    livenessProbe: {{exec: {{command: ['true']}}, periodSeconds: 2}}\n    readinessProbe: {{httpGet: {{host: 127.0.0.1, port: {port}, path: /healthz}}, periodSeconds: 1}}\n"
    );
    for i in 0..20 {
        let name = format!("b{i:02}");
        std::fs::write(dir.path().join(format!("manifests/{name}.yaml")), sleep_pod(&name, &probes)).unwrap();
    }
    agent.wait_running(20, Duration::from_secs(120));
    println!("64 MB budget: 20 pods with probes running; the agent and its shims in {}", cg.0.display());
    let start = Instant::now();
    let mut peak_rss = 0;
    while start.elapsed() < run {
        std::thread::sleep(Duration::from_secs(30).min(run.saturating_sub(start.elapsed())));
        let rss = status_field(agent.child.id(), "VmRSS:").unwrap_or(0);
        peak_rss = peak_rss.max(rss);
        println!(
            "  {:>4.0}s cgroup {:.1} MiB (peak {:.1} MiB, of it cache {:.1} MiB), agent RSS {:.1} MiB, ready containers {}, oom kills {}",
            start.elapsed().as_secs_f64(),
            mib(cg.read("memory.usage_in_bytes")),
            mib(cg.read("memory.max_usage_in_bytes")),
            mib(cg.stat("total_cache")),
            rss as f64 / 1024.0,
            ready_containers(&agent),
            cg.oom_kills()
        );
        assert_eq!(cg.oom_kills(), 0, "the 64 MB cgroup's OOM killer killed a process");
        assert!(agent.process.child.try_wait().ok().flatten().is_none(), "the agent died; see {}", agent.log.display());
    }
    println!(
        "64 MB budget: {:?} with no OOM kill; cgroup peak {:.1} MiB (rss {:.1} MiB of it at the end), agent peak RSS {:.1} MiB, {} restarts",
        run,
        mib(cg.read("memory.max_usage_in_bytes")),
        mib(cg.stat("total_rss")),
        peak_rss as f64 / 1024.0,
        restarts(&agent)
    );
    drop(agent);
}

/// Drops `path`'s pages from the page cache (those no process maps), so the next reader is
/// charged for them.
fn uncache(path: &Path) {
    use std::os::fd::AsRawFd;
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.sync_data();
        // SAFETY: advice on an open descriptor; no memory of this process is touched.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

fn ready_containers(agent: &Agent) -> usize {
    agent.get("/pods").map(|b| b.matches("\"ready\":true").count()).unwrap_or(0)
}

fn restarts(agent: &Agent) -> u64 {
    let body = agent.get("/pods").unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    let pods = v["items"].as_array().cloned().unwrap_or_default();
    pods.iter()
        .flat_map(|p| p["status"]["containerStatuses"].as_array().cloned().unwrap_or_default())
        .map(|c| c["restartCount"].as_u64().unwrap_or(0))
        .sum()
}

/// A cgroup v1 memory cgroup this benchmark made, removed when dropped (once empty).
struct MemCgroup(PathBuf);

impl MemCgroup {
    fn create(path: &Path, limit: u64) -> std::io::Result<MemCgroup> {
        std::fs::create_dir(path)?;
        let cg = MemCgroup(path.into());
        std::fs::write(path.join("memory.limit_in_bytes"), limit.to_string())?;
        Ok(cg)
    }

    fn read(&self, file: &str) -> u64 {
        std::fs::read_to_string(self.0.join(file)).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
    }

    fn stat(&self, key: &str) -> u64 {
        let s = std::fs::read_to_string(self.0.join("memory.stat")).unwrap_or_default();
        s.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok()).unwrap_or(0)
    }

    fn oom_kills(&self) -> u64 {
        let s = std::fs::read_to_string(self.0.join("memory.oom_control")).unwrap_or_default();
        s.lines().find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok()).unwrap_or(0)
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        // The agent was killed and its shims drained; the last exits take a moment.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("could not remove {}", self.0.display());
    }
}

/// RSS, PSS and private memory from `/proc/PID/smaps_rollup`, in KiB.
fn report(what: &str, pid: u32) {
    let field = |k: &str| rollup_kib(pid, k);
    println!(
        "{what}: RSS {:.2} MiB, PSS {:.2} MiB, private {:.2} MiB (anonymous {:.2} MiB), threads {}",
        field("Rss:") as f64 / 1024.0,
        field("Pss:") as f64 / 1024.0,
        field("Private_") as f64 / 1024.0,
        field("Anonymous:") as f64 / 1024.0,
        status_field(pid, "Threads:").unwrap_or(0)
    );
}

/// The agent's threads, counted by name (digits at the end dropped: `fl-probe-3` is one
/// of `fl-probe-`).
fn print_threads(pid: u32) {
    let mut by_name: BTreeMap<String, usize> = BTreeMap::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        *by_name.entry(comm.trim().trim_end_matches(|c: char| c.is_ascii_digit()).to_string()).or_default() += 1;
    }
    let list: Vec<String> = by_name.iter().map(|(n, c)| if *c > 1 { format!("{n} x{c}") } else { n.clone() }).collect();
    println!("  threads: {}", list.join(", "));
}
