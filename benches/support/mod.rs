//! Helpers the benchmark programs share: a real `ferrolet run` on a free port (the
//! integration tests' `AgentProcess`, with the benchmarks' own configuration), and readings
//! from /proc.

#![allow(dead_code)]
#![allow(clippy::disallowed_methods)] // decoding JSON as it likes (clippy.toml)

#[path = "../../tests/common/mod.rs"]
pub mod common;

pub use common::ferrolet_bin as bin;
use common::AgentProcess;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub fn status_field(pid: u32, field: &str) -> Option<u64> {
    field_of(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?, field)
}

/// The number after `field` in a `/proc/.../status` text.
fn field_of(status: &str, field: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

pub fn rss_kib(pid: u32) -> u64 {
    status_field(pid, "VmRSS:").unwrap_or(0)
}

/// (processes, RSS KiB, private KiB) of every shim: RSS counts the binary's pages that all
/// shims and the agent share; the private part is what each shim really adds.
pub fn shims_memory_kib(state: &Path) -> (usize, u64, u64) {
    let mut n = 0;
    let mut total = 0;
    let mut private = 0;
    for e in std::fs::read_dir(state.join("runtime/containers")).into_iter().flatten().flatten() {
        let Ok(text) = std::fs::read_to_string(e.path().join("state.json")) else { continue };
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let pid = v["shim_pid"].as_u64().unwrap_or(0) as u32;
        n += 1;
        total += rss_kib(pid);
        private += rollup_kib(pid, "Private_");
    }
    (n, total, private)
}

/// The sum of the `/proc/PID/smaps_rollup` fields whose names start with `prefix`, in KiB
/// (`Rss:`, `Pss:`, `Private_` for clean and dirty together).
pub fn rollup_kib(pid: u32, prefix: &str) -> u64 {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    rollup
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

/// How often the threads of `pid` now running have gone to sleep so far
/// (`voluntary_ctxt_switches`): each such sleep ends in a wake-up.
pub fn sleeps(pid: u32) -> u64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten();
    let status = |t: std::fs::DirEntry| std::fs::read_to_string(t.path().join("status")).ok();
    tasks.filter_map(|t| field_of(&status(t)?, "voluntary_ctxt_switches:")).sum()
}

pub fn cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = &s[s.rfind(')').map(|i| i + 2).unwrap_or(0)..];
    let f: Vec<&str> = rest.split(' ').collect();
    f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
}

pub fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    (body.split_whitespace().nth(1) == Some("200")).then(|| body.split("\r\n\r\n").nth(1).unwrap_or("").to_string())
}

pub fn running_containers(port: u16) -> usize {
    http_get(port, "/pods").map(|b| b.matches("\"running\":{").count()).unwrap_or(0)
}

/// An agent started for a benchmark, in a directory of the benchmark's own.
pub struct Agent {
    pub process: AgentProcess,
    pub dir: PathBuf,
}

impl std::ops::Deref for Agent {
    type Target = AgentProcess;
    fn deref(&self) -> &AgentProcess {
        &self.process
    }
}

impl Agent {
    /// Starts `ferrolet run` with its files in `dir`; returns it and how long it took to
    /// answer `/healthz`.
    pub fn start(dir: &Path) -> (Agent, Duration) {
        Self::start_with(dir, "")
    }

    /// As `start`, with `extra` appended to the configuration.
    pub fn start_with(dir: &Path, extra: &str) -> (Agent, Duration) {
        Self::start_in(dir, extra, None)
    }

    /// As `start_with`; with `cgroup` (a cgroup v1 directory), the agent, and so every shim
    /// it starts, runs in it from its first instruction (its workloads go to their pods'
    /// cgroups).
    pub fn start_in(dir: &Path, extra: &str, cgroup: Option<&Path>) -> (Agent, Duration) {
        let port = common::free_port();
        let started = Instant::now();
        // Its own cgroup root and plugin directory: a benchmark touches nothing it did not make.
        // The prober benchmark runs 500 pods, past kubelet's default of 110 per node.
        let config = dir.join("bench.toml");
        // kubelet's API on a port of its own, unless `extra` says more of `[server]`.
        let server = if extra.contains("[server]") { "" } else { "[server]\nlisten = \"127.0.0.1:0\"\n" };
        let text = format!(
            "node_name = \"bench\"\nnode_ip = \"127.0.0.1\"\nstate_dir = {:?}\nmanifest_dir = {:?}\nmax_pods = 1000\n[api]\nlisten = \"127.0.0.1:{port}\"\n{server}[devices]\nplugin_dir = {:?}\n[cgroups]\nroot = {:?}\n",
            dir.join("state"),
            dir.join("manifests"),
            dir.join("device-plugins"),
            cgroup_root(dir)
        ) + extra;
        std::fs::write(&config, text).unwrap();
        let mut cmd = match cgroup {
            Some(cg) => {
                let mut c = Command::new("sh");
                c.args(["-c", "echo $$ > \"$0/cgroup.procs\" && exec \"$@\""]).arg(cg).arg(bin());
                c
            }
            None => Command::new(bin()),
        };
        cmd.args(["run", "--config"]).arg(&config);
        let process = AgentProcess::spawn_command(cmd, port, "warn", dir.join("agent.log"), Duration::from_micros(500));
        let took = started.elapsed();
        (Agent { process, dir: dir.into() }, took)
    }

    pub fn wait_running(&self, n: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while running_containers(self.port) < n {
            assert!(Instant::now() < deadline, "timed out waiting for {n} running containers");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.process.child.kill();
        let _ = self.process.child.wait();
        // Stop every container this agent started, through the state directory.
        let _ = Command::new(bin())
            .args(["drain", "--state-dir"])
            .arg(self.dir.join("state"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if let Ok(driver) = ferrolet::node::cm::cgroupfs::detect(Path::new("/proc/self/mountinfo"), None) {
            let _ = driver.destroy(&cgroup_root(&self.dir));
        }
        // The cgroup root's lock file, left behind by the killed agent.
        use ferrolet::node::cm::ownership::{cgroup_root_lock_path, LOCK_DIR};
        let _ = std::fs::remove_file(cgroup_root_lock_path(Path::new(LOCK_DIR), &cgroup_root(&self.dir)));
    }
}

/// The cgroup root of the agent benchmarked in `dir` (one per run, never kubelet's).
fn cgroup_root(dir: &Path) -> String {
    // Every benchmark names its directories alike (`a`, `b`, `cost0`) inside a temporary
    // directory: that one's name keeps two benchmark runs at once on different roots.
    let run = dir.parent().and_then(Path::file_name).map(|n| n.to_string_lossy().trim_start_matches('.').to_string());
    common::cgroup_root_of(&format!("bench-{}", run.unwrap_or_default()), dir)
}

/// CPU ticks (utime + stime, in 1/100 s) of process `pid`'s threads by name, numbered
/// threads summed under their common name (`fl-probe-3` as `fl-probe`).
pub fn thread_ticks(pid: u32) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let name = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default().trim().to_string();
        let name = name.trim_end_matches(|c: char| c.is_ascii_digit()).trim_end_matches('-').to_string();
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        let rest = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
        let f: Vec<&str> = rest.split(' ').collect();
        let ticks = f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
            + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        *out.entry(name).or_insert(0) += ticks;
    }
    out
}
