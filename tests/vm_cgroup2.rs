//! ferrolet on a real cgroup v2 host: a VM (qemu, Debian's kernel, an initramfs built here
//! with busybox and the ferrolet binary under test) mounts cgroup2 with every controller
//! enabled at the root and swap on zram, runs the agent on the process runtime with four
//! pods, and prints what the kernel shows (`FLVM ...` lines on its serial console,
//! `tests/vm/test.sh`). Checked against kubelet's v2 values: the tree and its `cpu.weight`,
//! `cpu.max`, `memory.max` and `pids.max`, delegation, process placement, whole-container
//! OOM kill (`memory.oom.group`), no swap for containers (`memory.swap.max`), and removal.
//! Needs `tests/vm/setup.sh` (which `make test` runs); skips without qemu or the kernel.

use crate::common;
use crate::common::vm::{boot, libraries, vm_or_skip, Cpio, Qemu};

use ferrolet::api::{Pod, PodList};
use ferrolet::node::cm::helpers::{milli_cpu_to_shares, shares_to_weight_linear};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

/// One boot, from qemu's start to its power-off: 16-20 s with TCG when every check
/// passes, 55 s when the OOM checks fail (the VM waits for them); the VM's own waits add up
/// to 125 s at most.
const BOOT_TIMEOUT: Duration = Duration::from_secs(150);
/// The VM's CPUs (kubepods' weight follows from them).
const VM_CPUS: i64 = 2;

/// The pods, started in phases by `tests/vm/test.sh` (by file name).
fn manifests() -> [(&'static str, String); 4] {
    let pod = |name: &str, restart: &str, script: &str, resources: &str| {
        common::manifest(
            name,
            &format!(
                "  terminationGracePeriodSeconds: 2\n  restartPolicy: {restart}\n  containers:\n  - name: app\n    image: busybox\n    command: [sh, -c, {script:?}]\n{resources}"
            ),
        )
    };
    [
        (
            "guaranteed.yaml",
            pod("guaranteed", "Always", "exec sleep 300", "    resources:\n      limits: {cpu: 500m, memory: 64Mi}\n"),
        ),
        (
            "burstable.yaml",
            pod(
                "burstable",
                "Always",
                "exec sleep 301",
                "    resources:\n      requests: {cpu: 250m, memory: 32Mi}\n      limits: {cpu: '1', memory: 96Mi}\n",
            ),
        ),
        ("besteffort.yaml", pod("besteffort", "Always", "exec sleep 302", "")),
        // The shell stays the container's first process and `sleep 1000` a second one, so an
        // OOM kill of `tail` alone (memory.oom.group 0) leaves the container running.
        (
            "oom.yaml",
            pod(
                "oom",
                "Never",
                "sleep 1000 & sleep 2; tail /dev/zero; wait",
                "    resources:\n      limits: {memory: 32Mi}\n",
            ),
        ),
    ]
}

/// What the VM printed: `FLVM key=value`, `FLVM dir TAG PATH`, `FLVM file TAG PATH NAME VALUE`,
/// `FLVM proc TAG PATH PID CMDLINE`, `FLVM pods TAG JSON`, `FLVM oom ...`.
#[derive(Default)]
struct Report {
    values: BTreeMap<String, String>,
    dirs: BTreeSet<(String, String)>,
    files: BTreeMap<(String, String, String), String>,
    procs: Vec<(String, String, String)>,
    /// (tag, cgroup, pid) → `oom_score_adj`.
    scores: BTreeMap<(String, String, String), String>,
    pods: BTreeMap<String, Vec<Pod>>,
    oom: Vec<String>,
    errors: Vec<String>,
}

impl Report {
    fn parse(console: &str) -> Report {
        let mut r = Report::default();
        for line in console.lines().map(|l| l.trim_end_matches('\r')) {
            // The first line follows the firmware's terminal escapes on the same line.
            let Some(rest) = line.find("FLVM ").map(|at| &line[at + 5..]) else { continue };
            let mut words = rest.splitn(2, ' ');
            let (kind, tail) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
            match kind {
                "dir" => {
                    if let Some((tag, path)) = tail.split_once(' ') {
                        r.dirs.insert((tag.into(), path.into()));
                    }
                }
                "file" => {
                    let f: Vec<&str> = tail.splitn(4, ' ').collect();
                    if f.len() >= 3 {
                        let value = f.get(3).unwrap_or(&"").trim().to_string();
                        r.files.insert((f[0].into(), f[1].into(), f[2].into()), value);
                    }
                }
                "score" => {
                    let f: Vec<&str> = tail.splitn(4, ' ').collect();
                    if f.len() == 4 {
                        r.scores.insert((f[0].into(), f[1].into(), f[2].into()), f[3].trim().into());
                    }
                }
                "proc" => {
                    let f: Vec<&str> = tail.splitn(4, ' ').collect();
                    if f.len() == 4 {
                        r.procs.push((f[0].into(), f[1].into(), f[3].trim().into()));
                    }
                }
                "pods" => {
                    if let Some((tag, json)) = tail.split_once(' ') {
                        match serde_json::from_str::<PodList>(json) {
                            Ok(list) => {
                                r.pods.insert(tag.into(), list.items);
                            }
                            Err(e) => r.errors.push(format!("the pods at {tag} do not decode: {e}")),
                        }
                    }
                }
                "oom" => {
                    if let Some(e) = tail.strip_prefix("error=") {
                        r.errors.push(format!("oom: {e}"));
                    }
                    r.oom.push(tail.into());
                }
                _ => {
                    let (k, v) = rest.split_once('=').unwrap_or((rest, ""));
                    if k == "error" {
                        r.errors.push(v.into());
                    }
                    r.values.insert(k.trim().into(), v.into());
                }
            }
        }
        r
    }

    fn file(&self, tag: &str, path: &str, name: &str) -> Option<&str> {
        self.files.get(&(tag.into(), path.into(), name.into())).map(|s| s.as_str())
    }

    fn pod(&self, tag: &str, name: &str) -> Option<&Pod> {
        self.pods.get(tag)?.iter().find(|p| p.metadata.name == format!("{name}-vm"))
    }
}

/// The checks' failures, all of them, so one run shows everything that differs.
#[derive(Default)]
struct Failures(Vec<String>);

impl Failures {
    /// Control file `name` of cgroup `path` as dumped at `tag` is `want`.
    fn file(&mut self, r: &Report, tag: &str, path: &str, name: &str, want: &str) {
        match r.file(tag, path, name) {
            Some(got) if got == want => {}
            got => self.0.push(format!("{path}/{name} ({tag}): {got:?}, want {want:?}")),
        }
    }

    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.0.push(what());
        }
    }
}

/// The gzipped initramfs: busybox, ferrolet and its libraries, the kernel modules, the
/// scripts and the manifests.
fn initramfs(vm_dir: &Path, busybox: &Path, out: &Path) {
    let read = |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vm");
    let mut cpio = Cpio::new();
    cpio.file("/init", 0o755, &read(&here.join("init")));
    cpio.file("/bin/busybox", 0o755, &read(busybox));
    cpio.file("/vm/test.sh", 0o755, &read(&here.join("test.sh")));
    let bin = common::ferrolet_bin();
    cpio.file("/vm/ferrolet", 0o755, &read(&bin));
    for lib in libraries(&bin) {
        cpio.file(lib.to_str().unwrap(), 0o755, &read(&lib));
    }
    let modules = vm_dir.join("modules");
    let order = std::fs::read_to_string(modules.join("order")).unwrap_or_default();
    cpio.file("/vm/modules/order", 0o644, order.as_bytes());
    for m in order.lines().filter(|l| !l.is_empty()) {
        cpio.file(&format!("/vm/modules/{m}"), 0o644, &read(&modules.join(m)));
    }
    for (name, text) in manifests() {
        cpio.file(&format!("/vm/manifests/{name}"), 0o644, text.as_bytes());
    }
    for d in ["/proc", "/sys", "/dev", "/tmp", "/var", "/run", "/etc"] {
        cpio.dir(d);
    }
    cpio.gzip_to(out);
}

/// The VM's qemu run: the initramfs holds the whole root; 512 MiB.
fn qemu<'a>(vm_dir: &'a Path, initrd: &'a Path) -> Qemu<'a> {
    Qemu {
        vm_dir,
        initrd,
        cpus: VM_CPUS,
        memory: "512M",
        append: "console=ttyS0 quiet loglevel=1 panic=-1".into(),
        extra: Vec::new(),
        started: "FLVM boot",
        done: "FLVM done",
        timeout: BOOT_TIMEOUT,
    }
}

#[test]
fn a_cgroup_v2_vm_gets_kubelets_values_whole_container_oom_kills_and_removal() {
    let Some((vm_dir, busybox)) = vm_or_skip() else { return };
    let work = tempfile::tempdir().unwrap();
    let initrd = work.path().join("initrd.gz");
    initramfs(&vm_dir, &busybox, &initrd);

    let start = Instant::now();
    let (accel, console) = boot(&qemu(&vm_dir, &initrd), "vm");
    eprintln!("vm: booted and tested with {accel} in {:.1} s", start.elapsed().as_secs_f64());
    // The VM's summary lines (not the dumps), for a person reading --nocapture.
    for l in console.lines().filter(|l| !l.contains("FLVM dir ") && !l.contains("FLVM file ")) {
        if let Some(at) = l.find("FLVM ").filter(|_| !l.contains("FLVM proc ") && !l.contains("FLVM pods ")) {
            eprintln!("vm: {}", &l[at + 5..]);
        }
    }
    let r = Report::parse(&console);
    let fail = check(&r);
    assert!(
        fail.0.is_empty(),
        "the cgroup v2 VM ({accel}) differs from kubelet in {} ways:\n  {}\n\nthe VM's console:\n{console}",
        fail.0.len(),
        fail.0.join("\n  ")
    );
}

/// Every check of one boot's report.
fn check(r: &Report) -> Failures {
    let mut f = Failures::default();
    f.check(r.values.contains_key("done"), || "the VM never printed `FLVM done`".into());
    for e in &r.errors {
        f.0.push(format!("the VM: {e}"));
    }
    let (Some(g), Some(b), Some(e)) =
        (r.pod("running", "guaranteed"), r.pod("running", "burstable"), r.pod("running", "besteffort"))
    else {
        f.0.push("the three pods are not on /pods".into());
        return f;
    };
    let qos = |p: &Pod| p.status.as_ref().map(|s| s.qos_class.clone()).unwrap_or_default();
    f.check(qos(g) == "Guaranteed" && qos(b) == "Burstable" && qos(e) == "BestEffort", || {
        format!("QoS classes: {}, {}, {}", qos(g), qos(b), qos(e))
    });
    let gp = format!("/kubepods/pod{}", g.metadata.uid);
    let bp = format!("/kubepods/burstable/pod{}", b.metadata.uid);
    let ep = format!("/kubepods/besteffort/pod{}", e.metadata.uid);
    let has_swap = r.values.get("swap_kb").and_then(|s| s.parse::<u64>().ok()).unwrap_or(0) > 0;
    if !has_swap {
        eprintln!("vm: no swap in the VM (zram); memory.swap.max is not checked");
    }

    // kubepods: the node's allocatable (no reservations in the VM's configuration).
    let kubepods_weight = shares_to_weight_linear(milli_cpu_to_shares(VM_CPUS * 1000));
    f.file(r, "running", "/kubepods", "cpu.weight", &kubepods_weight.to_string());
    f.check(kubepods_weight == 79, || format!("2 CPUs weigh {kubepods_weight}, want 79"));
    let mem_total = r.values.get("mem_total_kb").and_then(|s| s.parse::<u64>().ok()).unwrap_or(0) * 1024;
    f.file(r, "running", "/kubepods", "memory.max", &(mem_total / 4096 * 4096).to_string());
    f.file(r, "running", "/kubepods", "pids.max", r.values.get("pid_max").map_or("?", |s| s.as_str()));
    // The QoS cgroups: burstable weighs the Burstable pods' cpu requests (250m).
    f.file(r, "running", "/kubepods/burstable", "cpu.weight", "10");
    f.file(r, "running", "/kubepods/besteffort", "cpu.weight", "1");
    // Pod cgroups: kubelet's linear weight, quota over a 100 ms period, the summed limits.
    for (path, weight, max, memory) in [
        (&gp, "20", "50000 100000", "67108864"),
        (&bp, "10", "100000 100000", "100663296"),
        (&ep, "1", "max 100000", "max"),
    ] {
        f.file(r, "running", path, "cpu.weight", weight);
        f.file(r, "running", path, "cpu.max", max);
        f.file(r, "running", path, "memory.max", memory);
        f.file(r, "running", path, "pids.max", "max");
    }
    // Container cgroups: runc's quadratic weight, the container's own limits, the whole
    // container killed on OOM, no swap.
    for (path, weight, max, memory, command) in [
        (&gp, "59", "50000 100000", "67108864", "sleep 300"),
        (&bp, "35", "100000 100000", "100663296", "sleep 301"),
        (&ep, "1", "max 100000", "max", "sleep 302"),
    ] {
        let c = format!("{path}/app");
        f.file(r, "running", &c, "cpu.weight", weight);
        f.file(r, "running", &c, "cpu.max", max);
        f.file(r, "running", &c, "memory.max", memory);
        f.file(r, "running", &c, "memory.oom.group", "1");
        if has_swap {
            f.file(r, "running", &c, "memory.swap.max", "0");
        }
        let placed = r.procs.iter().any(|(tag, p, cmd)| tag == "running" && *p == c && cmd == command);
        f.check(placed, || format!("no `{command}` in {c}/cgroup.procs"));
    }
    // kubelet's OOM scores by QoS class (the VM's root may lower them): Guaranteed -997,
    // BestEffort 1000, Burstable 1000 − 1000 × its 32Mi memory request / MemTotal.
    let burstable = (1000 - 1000 * (32u64 << 20) / mem_total.max(1)).clamp(2, 999);
    for (path, want) in [(&gp, "-997".to_string()), (&bp, burstable.to_string()), (&ep, "1000".to_string())] {
        let c = format!("{path}/app");
        let scores: Vec<&String> =
            r.scores.iter().filter(|((tag, p, _), _)| tag == "running" && *p == c).map(|(_, s)| s).collect();
        f.check(!scores.is_empty() && scores.iter().all(|s| **s == want), || {
            format!("{c}: oom_score_adj {scores:?}, want {want}")
        });
    }
    // Delegation: every level above a container hands every controller it has (cpu, memory
    // and pids for the limits above; io, cpuset, hugetlb and the rest, as runc does) to its
    // children.
    for path in ["/kubepods", "/kubepods/burstable", "/kubepods/besteffort", &gp, &bp, &ep] {
        let words =
            |name| -> BTreeSet<&str> { r.file("running", path, name).unwrap_or("").split_whitespace().collect() };
        let (has, delegated) = (words("cgroup.controllers"), words("cgroup.subtree_control"));
        f.check(["cpu", "memory", "pids"].iter().all(|c| has.contains(c)) && delegated == has, || {
            format!("{path}: cgroup.subtree_control {delegated:?}, want every controller of cgroup.controllers {has:?}")
        });
    }
    let root: BTreeSet<&str> =
        r.file("running", "/", "cgroup.subtree_control").unwrap_or("").split_whitespace().collect();
    let controllers = r.values.get("controllers").map_or("", |s| s.as_str());
    for c in ["cpu", "memory", "pids", "io", "cpuset", "hugetlb"] {
        f.check(!controllers.split_whitespace().any(|x| x == c) || root.contains(c), || {
            format!("the VM's root does not delegate {c}: {root:?}")
        });
    }

    // The OOM: the whole container killed, reported as OOMKilled.
    let oom_cg = r.oom.iter().find_map(|l| l.strip_prefix("cgroup=")?.split_whitespace().next());
    match oom_cg {
        Some(cg) => {
            f.file(r, "oom", cg, "memory.max", "33554432");
            f.file(r, "oom", cg, "memory.oom.group", "1");
            if has_swap {
                f.file(r, "oom", cg, "memory.swap.max", "0");
            }
        }
        None => f.0.push("the OOM pod's container was never seen".into()),
    }
    for l in r.oom.iter().filter(|l| l.starts_with("alive ")) {
        f.0.push(format!("after the OOM, still {l} (kubelet's memory.oom.group=1 kills the whole container)"));
    }
    let reason = r.pod("oom", "oom").and_then(|p| common::container(p, "app")).and_then(|c| {
        c.state
            .terminated
            .as_ref()
            .map(|t| t.reason.clone())
            .or_else(|| c.last_state.terminated.as_ref().map(|t| t.reason.clone()))
    });
    f.check(reason.as_deref() == Some("OOMKilled"), || {
        let status = r.pod("oom", "oom").map(|p| serde_json::to_string(&p.status).unwrap());
        format!("the OOM pod's container ended with {reason:?}, want OOMKilled; its status: {status:?}")
    });

    // Removal: the deleted pod's cgroup goes, the others stay, burstable's weight drops back
    // (the OOM pod left in it requests no cpu).
    f.check(r.dirs.contains(&("running".into(), bp.clone())), || format!("{bp} was never there"));
    f.check(!r.dirs.contains(&("removed".into(), bp.clone())), || {
        format!("{bp} is still there after its manifest went")
    });
    f.check(r.pod("removed", "burstable").is_none(), || "the deleted pod is still on /pods".into());
    f.check(r.dirs.contains(&("removed".into(), gp.clone())), || format!("{gp} went with another pod's manifest"));
    f.file(r, "removed", "/kubepods/burstable", "cpu.weight", "1");
    f
}
