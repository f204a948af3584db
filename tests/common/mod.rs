//! Shared helpers for integration tests: temporary agents (in-process or as a real
//! `ferrolet run` process), waiting for conditions, and cleaning up every process a test
//! started (through the runtime's own state files, never by process name). The benchmarks
//! include this file too (`benches/support`), for the one agent-process helper.

#![allow(dead_code)]

pub mod apiserver;
pub mod cri;
pub mod plugin;
pub mod registry;
pub mod vm;

use ferrolet::api::{ContainerStatus, Pod, PodList};
use ferrolet::node::runtime::process::ShimState;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The pod manager's completed syncs on `/metrics`.
pub const POD_SYNCS: &str = "ferrolet_manager_ticks_total{manager=\"fl-pods\"}";

/// The environment variable naming another ferrolet binary to run instead of the one cargo
/// built (the benchmarks measure `make static`'s with it; the static smoke test sets it).
pub const BIN_ENV: &str = "FERROLET_BIN";

/// The ferrolet binary these tests run: `$FERROLET_BIN`, or the one cargo built for them.
pub fn ferrolet_bin() -> PathBuf {
    std::env::var_os(BIN_ENV).map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_ferrolet")), PathBuf::from)
}

/// A little-endian ELF file's bytes, read whole (32- or 64-bit).
struct Elf(Vec<u8>);

impl Elf {
    fn read(path: &Path) -> Option<Elf> {
        let b = std::fs::read(path).ok()?;
        (b.len() >= 64 && &b[..4] == b"\x7fELF" && b[5] == 1).then_some(Elf(b))
    }

    /// The little-endian unsigned number of `n` bytes at `at` (0 past the end).
    fn le(&self, at: usize, n: usize) -> usize {
        self.0.get(at..at + n).map_or(0, |s| s.iter().rev().fold(0usize, |a, x| a << 8 | *x as usize))
    }

    fn is_64bit(&self) -> bool {
        self.0[4] == 2
    }

    /// A field that is 8 bytes at `wide` in a 64-bit file and 4 bytes at `narrow` in a 32-bit one.
    fn word(&self, base: usize, wide: usize, narrow: usize) -> usize {
        if self.is_64bit() {
            self.le(base + wide, 8)
        } else {
            self.le(base + narrow, 4)
        }
    }
}

/// An ELF file's machine (`e_machine`: 0x3e x86_64, 0xb7 aarch64, 0x28 arm) and whether it
/// has a program interpreter (a dynamic loader: not static); `None` for a file that is not
/// a little-endian ELF file.
pub fn elf_machine_and_interp(path: &Path) -> Option<(u16, bool)> {
    let elf = Elf::read(path)?;
    let phoff = elf.word(0, 0x20, 0x1c);
    let (phentsize, phnum) =
        if elf.is_64bit() { (elf.le(0x36, 2), elf.le(0x38, 2)) } else { (elf.le(0x2a, 2), elf.le(0x2c, 2)) };
    let interp = (0..phnum).any(|i| elf.le(phoff + i * phentsize, 4) == 3); // PT_INTERP
    Some((elf.le(0x12, 2) as u16, interp))
}

/// The size of an ELF file's section called `name` (section headers survive `strip`); `None`
/// when it has none or is not a little-endian ELF file.
pub fn elf_section_size(path: &Path, name: &str) -> Option<usize> {
    let elf = Elf::read(path)?;
    let shoff = elf.word(0, 0x28, 0x20);
    let (shentsize, shnum, shstrndx) = if elf.is_64bit() {
        (elf.le(0x3a, 2), elf.le(0x3c, 2), elf.le(0x3e, 2))
    } else {
        (elf.le(0x2e, 2), elf.le(0x30, 2), elf.le(0x32, 2))
    };
    let header = |i: usize| shoff + i * shentsize;
    let names = elf.word(header(shstrndx), 0x18, 0x10); // the name table's sh_offset
    let wanted = [name.as_bytes(), b"\0"].concat();
    (0..shnum)
        .find(|&i| {
            let at = names + elf.le(header(i), 4); // sh_name
            elf.0.get(at..at + wanted.len()) == Some(&wanted[..])
        })
        .map(|i| elf.word(header(i), 0x20, 0x14)) // sh_size
}

/// The environment variable naming the file skipped tests append to (`make test` sets it
/// and prints a summary after `cargo test`).
pub const SKIP_LOG_ENV: &str = "FERROLET_SKIP_LOG";

/// Reports that the current test is skipped and why: on stderr (seen with `--nocapture`)
/// and, when `FERROLET_SKIP_LOG` is set, as one `test<TAB>reason` line appended to that file.
pub fn skip(reason: &str) {
    let test = std::thread::current().name().unwrap_or("?").to_string();
    eprintln!("skipping {test}: {reason}");
    if let Some(path) = std::env::var_os(SKIP_LOG_ENV) {
        use std::io::Write;
        let line = format!("{test}\t{}\n", reason.replace(['\n', '\t'], " "));
        // One write of one short line with O_APPEND: parallel tests never interleave.
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = appended {
            eprintln!("cannot record the skip in {}: {e}", std::path::Path::new(&path).display());
        }
    }
}

/// Whether the tests run as root; when not, the current test is reported skipped for
/// `reason` (what needs root).
pub fn root_or_skip(reason: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        skip(reason);
    }
    root
}

/// Polls `f` every 50 ms until it returns `Some`, or panics with `what` after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A free loopback port (bound and released; good enough for tests).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A pod manifest with the given spec body (YAML, indented under `spec:`).
pub fn manifest(name: &str, spec: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{spec}")
}

/// Shares the node's directory `dir` with every container of `pod` (a pod as JSON), the
/// Kubernetes way: a hostPath volume mounted at the same path. Each container has a root of
/// its own, so only there do the test and the workload (its probes and hooks too) see the
/// same files.
pub fn share_dir(pod: &mut serde_json::Value, dir: &Path) {
    fn push(list: &mut serde_json::Value, item: serde_json::Value) {
        if list.is_null() {
            *list = serde_json::Value::Array(Vec::new());
        }
        list.as_array_mut().expect("a list").push(item);
    }
    let dir = dir.to_str().unwrap();
    let spec = &mut pod["spec"];
    push(&mut spec["volumes"], serde_json::json!({"name": "shared", "hostPath": {"path": dir, "type": "Directory"}}));
    for list in ["initContainers", "containers"] {
        for c in spec.get_mut(list).and_then(|l| l.as_array_mut()).into_iter().flatten() {
            push(&mut c["volumeMounts"], serde_json::json!({"name": "shared", "mountPath": dir}));
        }
    }
}

/// `share_dir` on a manifest's YAML text.
pub fn sharing_dir(manifest: &str, dir: &Path) -> String {
    let mut pod: serde_json::Value = serde_norway::from_str(manifest).unwrap();
    share_dir(&mut pod, dir);
    serde_norway::to_string(&pod).unwrap()
}

/// The mount of a `ContainerConfig` that shares the node's directory `dir` with the
/// container at the same path (as `share_dir` does for a pod).
pub fn shared_dir_mount(dir: &Path) -> ferrolet::node::runtime::Mount {
    ferrolet::node::runtime::Mount {
        container_path: dir.to_str().unwrap().into(),
        host_path: dir.into(),
        ..Default::default()
    }
}

/// Whether process `pid` of a container's PID namespace lives (and is no zombie), seen in
/// the container's own `/proc` through its workload, the node's process `workload`. Exec
/// probes, hooks and `ferrolet exec` run in that namespace: a pid they print is the
/// container's, not the node's.
pub fn alive_in_container(workload: i32, pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{workload}/root/proc/{pid}/stat"))
        .is_ok_and(|s| s.rfind(')').is_some_and(|i| !s[i + 1..].trim_start().starts_with('Z')))
}

/// Kills every shim and workload recorded under a state directory.
pub fn kill_everything(state_dir: &Path) {
    let Ok(rd) = std::fs::read_dir(state_dir.join("runtime/containers")) else { return };
    for e in rd.flatten() {
        if let Ok(s) = ferrolet::base::state_files::read_json::<ShimState>(&e.path().join("state.json")) {
            // Only processes proven ours by their start time (a pid may have been reused).
            if let Some(t) = s.start_ticks {
                let _ = ferrolet::base::procs::kill_group_verified(s.pid, t, libc::SIGKILL);
            }
            let _ = ferrolet::base::procs::signal_verified(s.shim_pid, s.shim_start_ticks, libc::SIGKILL);
        }
    }
}

/// A test directory with manifests/ and state/ that kills what it started when dropped.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Self {
        Self::new_in(&std::env::temp_dir())
    }

    /// A sandbox in directory `parent`.
    pub fn new_in(parent: &Path) -> Self {
        let dir = tempfile::tempdir_in(parent).unwrap();
        std::fs::create_dir_all(dir.path().join("manifests")).unwrap();
        Sandbox { dir }
    }
    pub fn manifests(&self) -> PathBuf {
        self.dir.path().join("manifests")
    }
    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }
    pub fn work(&self) -> PathBuf {
        let p = self.dir.path().join("work");
        std::fs::create_dir_all(&p).unwrap();
        p
    }
    pub fn write_manifest(&self, file: &str, text: &str) {
        // Write then rename, as editors and config management do, so the source never reads half a file.
        let tmp = self.dir.path().join(format!(".{file}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(tmp, self.manifests().join(file)).unwrap();
    }
    /// The device plugin directory of this test's agent (never the real one).
    pub fn plugin_dir(&self) -> PathBuf {
        self.dir.path().join("device-plugins")
    }
    /// The test agent's configuration. Eviction watches memory only: the disk is this
    /// machine's, shared with everything else on it, and how full it is must not change what
    /// a test sees (`tests/eviction.rs` sets its own thresholds with `with_eviction`).
    pub fn config_text(&self, port: u16) -> String {
        format!(
            "node_name = \"testnode\"\nnode_ip = \"127.0.0.1\"\nstate_dir = {:?}\nmanifest_dir = {:?}\nmanifest_check_interval = \"200ms\"\nsync_frequency = \"200ms\"\n[api]\nlisten = \"127.0.0.1:{port}\"\n[server]\nlisten = \"127.0.0.1:0\"\n[devices]\nplugin_dir = {:?}\n{EVICTION}[cgroups]\nroot = {:?}\n",
            self.state(),
            self.manifests(),
            self.plugin_dir(),
            self.cgroup_root()
        )
    }

    /// A cgroup root of this test's own, so parallel test agents never see each other's
    /// pod cgroups as orphans (nor a developer's `make run`).
    pub fn cgroup_root(&self) -> String {
        cgroup_root_of("test", self.dir.path())
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        kill_everything(&self.state());
        if let Ok(driver) = ferrolet::node::cm::cgroupfs::detect(Path::new("/proc/self/mountinfo"), None) {
            let _ = driver.destroy(&self.cgroup_root());
        }
        // The cgroup root's lock file, left behind when the test's agent was SIGKILLed.
        use ferrolet::node::cm::ownership::{cgroup_root_lock_path, LOCK_DIR};
        let _ = std::fs::remove_file(cgroup_root_lock_path(Path::new(LOCK_DIR), &self.cgroup_root()));
    }
}

/// The `[eviction]` section of the test configurations (before `[cgroups]`, which they end
/// with, so tests can add `[cgroups]` keys at the end).
pub const EVICTION: &str = "[eviction]\nhard = { \"memory.available\" = \"100Mi\" }\n";

/// A test configuration `text` with its `[eviction]` section's keys replaced by `section`.
pub fn with_eviction(text: &str, section: &str) -> String {
    assert!(text.contains(EVICTION), "the configuration has the tests' [eviction] section");
    text.replacen(EVICTION, &format!("[eviction]\n{section}"), 1)
}

/// The cgroup root `/ferrolet-KIND-NAME` of the agent whose files are in `dir` (named after
/// the directory, so parallel agents never share one, nor a developer's `make run`).
pub fn cgroup_root_of(kind: &str, dir: &Path) -> String {
    let name = dir.file_name().map(|n| n.to_string_lossy().trim_start_matches('.').to_string()).unwrap_or_default();
    format!("/ferrolet-{kind}-{name}")
}

/// A real `ferrolet run` process on a free port: the one agent-process helper of the
/// integration tests and the benchmarks.
pub struct AgentProcess {
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl AgentProcess {
    pub fn start(sb: &Sandbox) -> AgentProcess {
        Self::start_with(sb, |text| text)
    }

    /// Starts with the test configuration as changed by `edit`.
    pub fn start_with(sb: &Sandbox, edit: impl FnOnce(String) -> String) -> AgentProcess {
        let port = free_port();
        let cfg = sb.dir.path().join("ferrolet.toml");
        std::fs::write(&cfg, edit(sb.config_text(port))).unwrap();
        let log = sb.dir.path().join(format!("agent-{port}.log"));
        Self::spawn(&cfg, port, "debug", log, Duration::from_millis(50))
    }

    /// Runs `ferrolet run --config CONFIG` (a configuration that listens on
    /// `127.0.0.1:PORT`), logging at `log_level` into `log`, and returns once its
    /// `/healthz` answers (asked every `poll`: the start-up benchmark polls finely);
    /// panics with the end of the log when it exits or takes over 10 s.
    pub fn spawn(config: &Path, port: u16, log_level: &str, log: PathBuf, poll: Duration) -> AgentProcess {
        let mut cmd = Command::new(ferrolet_bin());
        cmd.args(["run", "--config"]).arg(config);
        Self::spawn_command(cmd, port, log_level, log, poll)
    }

    /// As `spawn`, running `cmd` (which ends in `ferrolet run …`, e.g. behind a wrapper).
    pub fn spawn_command(mut cmd: Command, port: u16, log_level: &str, log: PathBuf, poll: Duration) -> AgentProcess {
        let child = cmd
            .env("RUST_LOG", log_level)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut agent = AgentProcess { child, port, log };
        let deadline = Instant::now() + Duration::from_secs(10);
        while agent.get("/healthz").is_err() {
            let exited = agent.child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() >= deadline {
                let log = std::fs::read_to_string(&agent.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
                panic!(
                    "the agent's /healthz did not answer (exit: {exited:?}); the end of its log:\n{}",
                    tail.join("\n")
                );
            }
            std::thread::sleep(poll);
        }
        agent
    }

    pub fn get(&self, path: &str) -> Result<String, String> {
        let mut resp = ureq::get(&format!("http://127.0.0.1:{}{path}", self.port)).call().map_err(|e| e.to_string())?;
        resp.body_mut().read_to_string().map_err(|e| e.to_string())
    }

    /// The sum of the `/metrics` samples whose name and labels start with `series`
    /// (`prober_probe_total{probe_type="Liveness"` sums every result of that probe type).
    pub fn metric(&self, series: &str) -> u64 {
        let page = self.get("/metrics").unwrap_or_else(|e| panic!("/metrics: {e}"));
        page.lines()
            .filter(|l| l.starts_with(series))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }

    /// Waits until `series` on `/metrics` has grown by `by`: what a test that watches for
    /// something not to happen waits on, so that it proves the agent was working meanwhile
    /// (a stalled agent fails here instead of passing).
    pub fn wait_metric_growth(&self, series: &str, by: u64) {
        let from = self.metric(series);
        wait_for(&format!("{series} to grow by {by} from {from}"), Duration::from_secs(60), || {
            (self.metric(series) >= from + by).then_some(())
        });
    }

    /// Waits for `n` more syncs of the pod manager (one every `sync_frequency`, 200 ms in the
    /// test configuration).
    pub fn wait_syncs(&self, n: u64) {
        self.wait_metric_growth(POD_SYNCS, n);
    }

    pub fn pods(&self) -> Vec<Pod> {
        let list: PodList = serde_json::from_str(&self.get("/pods").unwrap()).unwrap();
        list.items
    }

    /// Pod `name` once `ok` holds of it, within `timeout`; else a panic saying it is not
    /// `what`, with its status, the events and the agent's log.
    pub fn pod_where(&self, name: &str, what: &str, timeout: Duration, ok: impl Fn(&Pod) -> bool) -> Pod {
        let deadline = Instant::now() + timeout;
        loop {
            let pod = self.pod(name);
            if let Some(p) = pod.as_ref().filter(|p| ok(p)) {
                return p.clone();
            }
            if Instant::now() > deadline {
                let status = pod.map(|p| serde_json::to_string(&p.status).unwrap());
                panic!("{name} not {what}: {status:?}\nevents: {:?}\nlog: {}", self.get("/events"), self.log_text());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The `/events` page once `ok` holds of it, within 30 s; else a panic with the page.
    /// Events reach the store through the recorder's thread, so one recorded with a status
    /// change may show a moment after that status.
    pub fn events_where(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let page = self.get("/events").unwrap_or_default();
            if ok(&page) {
                return page;
            }
            if Instant::now() > deadline {
                panic!("no {what} in the events: {page}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Pod `name` once every app container of it runs, within `timeout`.
    pub fn running(&self, name: &str, timeout: Duration) -> Pod {
        self.pod_where(name, "running", timeout, |p| {
            p.spec.containers.iter().all(|c| container(p, &c.name).is_some_and(|s| s.state.running.is_some()))
        })
    }

    pub fn pod(&self, name: &str) -> Option<Pod> {
        self.pods().into_iter().find(|p| p.metadata.name == format!("{name}-testnode"))
    }

    /// Runs `ferrolet ARGS --server <this agent>` and returns its output (it must succeed).
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new(ferrolet_bin())
            .args(args)
            .args(["--server", &format!("127.0.0.1:{}", self.port)])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL, the way a crash or OOM kill would end the agent.
    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM and wait for the orderly exit; returns the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        wait_for("the agent to exit", Duration::from_secs(15), || self.child.try_wait().unwrap())
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The status of container `name` of a pod (app or init).
pub fn container<'a>(pod: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    let st = pod.status.as_ref()?;
    st.container_statuses.iter().chain(&st.init_container_statuses).find(|c| c.name == name)
}

/// Pid of the running workload with this container id, from the runtime's state files.
pub fn workload_pid(state_dir: &Path, container_id: &str) -> Option<i32> {
    let id = container_id.strip_prefix("process://")?;
    let s: ShimState =
        ferrolet::base::state_files::read_json(&state_dir.join("runtime/containers").join(id).join("state.json"))
            .ok()?;
    Some(s.pid)
}

/// A process runtime over `sb`'s state directory, with this build's shim (1 MiB logs, 3 files).
pub fn process_runtime(sb: &Sandbox) -> ferrolet::node::runtime::process::ProcessRuntime {
    ferrolet::node::runtime::process::ProcessRuntime::new(&sb.state().join("runtime"), &ferrolet_bin(), 1 << 20, 3)
        .unwrap()
}

/// A sandbox for pod `default/p` (uid `uid1`) with its logs under `sb`.
pub fn pod_sandbox(rt: &dyn ferrolet::node::runtime::ContainerRuntime, sb: &Sandbox) -> String {
    rt.run_pod_sandbox(&ferrolet::node::runtime::SandboxConfig {
        pod_uid: "uid1".into(),
        pod_name: "p".into(),
        namespace: "default".into(),
        log_directory: sb.state().join("logs/p"),
        termination_grace_period_seconds: 30,
        ..Default::default()
    })
    .unwrap()
}

/// A container `name` running `sh -c script`, logging under `sb`.
pub fn sh_container(sb: &Sandbox, name: &str, script: &str) -> ferrolet::node::runtime::ContainerConfig {
    ferrolet::node::runtime::ContainerConfig {
        name: name.into(),
        argv: vec!["sh".into(), "-c".into(), script.into()],
        log_path: sb.state().join(format!("logs/p/{name}/0.log")),
        ..Default::default()
    }
}

/// An HTTP server that answers every request with 200 and counts the requests.
pub fn ok_http_server() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = hits.clone();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            let count = count.clone();
            std::thread::spawn(move || {
                let mut r = std::io::BufReader::new(match conn.try_clone() {
                    Ok(c) => c,
                    Err(_) => return,
                });
                use std::io::{BufRead, Write};
                let mut line = String::new();
                while r.read_line(&mut line).unwrap_or(0) > 2 {
                    line.clear();
                }
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut w = conn;
                let _ = w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
            });
        }
    });
    (port, hits)
}
