//! ferrolet's systemd cgroup driver on a real systemd host (issue 37): a VM (qemu, Debian's
//! kernel, the Debian 12 image `tests/vm/systemd/mkimage.sh` builds, with systemd as PID 1)
//! into which the initramfs (`tests/vm/systemd/init`) copies the ferrolet binary under test,
//! `ferrolet.service` (`Type=notify`), its config ([`config`]) and three static pods, and the
//! VM's test (`tests/vm/systemd/sdvm-test.sh`), which prints what systemd and the kernel show
//! as `SDVM ...` lines on the serial console: `systemctl status kubepods.slice`, the
//! `kubepods*` units and their properties, the slices' control files, each workload's cgroup;
//! then again after one manifest is removed, and after `systemctl stop ferrolet`.
//!
//! Checked here: the pod slices kubelet's systemd driver makes (`kubepods.slice`,
//! `kubepods-burstable.slice`, `kubepods-pod<uid>.slice`, ...), nested, active, with kubelet's
//! values as properties and in the files, each container in a `ferrolet-*.scope` under its
//! pod's slice, the slice gone with its pod, nothing failed once the agent is stopped.
//! `FERROLET_SDVM_DRIVER` picks the config's `[cgroups] driver`: `systemd` (the default),
//! `cgroupfs`, or `none` (the key left out: main before the driver has no such key). With
//! these two the systemd driver's checks are printed, not asserted. `fake` leaves the key out
//! and has `tests/vm/systemd/sdvm-fake-driver.sh` make the slices over D-Bus as kubelet's
//! driver would, then asserts every check: a test of the checks, not of ferrolet.
//! Needs `tests/vm/setup.sh` and `tests/vm/systemd/mkimage.sh` (setup.sh runs it; `make test`
//! runs setup.sh); skips without qemu, the kernel or the image.

use crate::common;

use ferrolet::api::{Pod, PodList};
use ferrolet::node::cm::helpers::{milli_cpu_to_shares, shares_to_weight_linear};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::vm_cgroup2::{libraries, Cpio};

/// The environment variable naming the directory `tests/vm/setup.sh` filled.
const VM_DIR_ENV: &str = "FERROLET_VM_DIR";
/// Its default.
const VM_DIR: &str = "/var/tmp/ferrolet-vm";
/// The config's `[cgroups] driver`: `systemd` (default), `cgroupfs`, `none` (no key), or
/// `fake` (no key, and a script in the VM stands in for the systemd driver).
const DRIVER_ENV: &str = "FERROLET_SDVM_DRIVER";
/// One boot, from qemu's start to its power-off. The VM's own waits add up to about 150 s
/// at most (tests/vm/systemd/sdvm-test.sh); a passing run takes far less (docs/building.md).
const BOOT_TIMEOUT: Duration = Duration::from_secs(240);
/// How long a KVM boot may take to reach the initramfs's end; a KVM that does not boot
/// (nested virtualisation that is half there) is then given up for TCG.
const KVM_START_TIMEOUT: Duration = Duration::from_secs(20);
/// The VM's CPUs (kubepods' weight follows from them).
const VM_CPUS: i64 = 2;
/// The node's name in the VM (static pods are named `<name>-<node>`).
const NODE: &str = "sdvm";

/// The agent's config in the VM, with `[cgroups] driver = "<driver>"` unless `driver` is
/// None (the one place the test's config is written).
fn config(driver: Option<&str>) -> String {
    let driver = driver.map(|d| format!("driver = \"{d}\"\n")).unwrap_or_default();
    format!(
        r#"node_name = "{NODE}"
node_ip = "127.0.0.1"
runtime = "process"
state_dir = "/var/lib/ferrolet"
manifest_dir = "/etc/ferrolet/manifests"
manifest_check_interval = "200ms"
sync_frequency = "200ms"
[api]
listen = "127.0.0.1:10255"
[server]
listen = "127.0.0.1:0"
[devices]
plugin_dir = ""
[eviction]
hard = {{ "memory.available" = "20Mi" }}
[cgroups]
root = "/"
{driver}"#
    )
}

/// The driver the test asks for ([`DRIVER_ENV`]): the config's key (None leaves it out),
/// and whether the fake driver stands in for the systemd driver.
fn driver() -> (Option<String>, bool) {
    match std::env::var(DRIVER_ENV).ok().filter(|s| !s.is_empty()).as_deref() {
        None => (Some("systemd".into()), false),
        Some("none") => (None, false),
        Some("fake") => (None, true),
        Some(d) => (Some(d.into()), false),
    }
}

/// The static pods, each running `sleep 300N` (coreutils' sleep from the image: the process
/// runtime runs the host's binaries), by file name, with their workload's command line.
fn manifests() -> [(&'static str, String, &'static str); 3] {
    let pod = |name: &str, seconds: &str, resources: &str| {
        common::manifest(
            name,
            &format!(
                "  terminationGracePeriodSeconds: 2\n  containers:\n  - name: app\n    image: busybox\n    command: [sleep, \"{seconds}\"]\n{resources}"
            ),
        )
    };
    [
        (
            "guaranteed.yaml",
            pod("guaranteed", "3001", "    resources:\n      limits: {cpu: 500m, memory: 64Mi}\n"),
            "sleep 3001",
        ),
        (
            "burstable.yaml",
            pod(
                "burstable",
                "3002",
                "    resources:\n      requests: {cpu: 250m, memory: 32Mi}\n      limits: {cpu: '1', memory: 96Mi}\n",
            ),
            "sleep 3002",
        ),
        ("besteffort.yaml", pod("besteffort", "3003", ""), "sleep 3003"),
    ]
}

/// What the VM printed (tests/vm/systemd/sdvm-test.sh lists the lines).
#[derive(Default)]
struct Report {
    values: BTreeMap<String, String>,
    pods: BTreeMap<String, Vec<Pod>>,
    /// tag → `systemctl status kubepods.slice`.
    status: BTreeMap<String, Vec<String>>,
    /// tag → unit → its list-units columns (load, active, sub, description).
    units: BTreeMap<String, BTreeMap<String, String>>,
    /// (tag, unit, key) → value.
    props: BTreeMap<(String, String, String), String>,
    dirs: BTreeSet<(String, String)>,
    files: BTreeMap<(String, String, String), String>,
    /// (tag, cgroup, command line).
    procs: Vec<(String, String, String)>,
    /// (tag, line of systemctl --failed).
    failed: Vec<(String, String)>,
    errors: Vec<String>,
}

impl Report {
    fn parse(console: &str) -> Report {
        let mut r = Report::default();
        for line in console.lines().map(|l| l.trim_end_matches('\r')) {
            let Some(rest) = line.find("SDVM ").map(|at| &line[at + 5..]) else { continue };
            let mut words = rest.splitn(2, ' ');
            let (kind, tail) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
            let fields = |n: usize| -> Vec<&str> { tail.splitn(n, ' ').collect() };
            match kind {
                "pods" => {
                    // Nothing when the agent does not answer (its failure is reported apart).
                    if let Some((tag, json)) = tail.split_once(' ').filter(|(_, json)| !json.trim().is_empty()) {
                        match serde_json::from_str::<PodList>(json) {
                            Ok(list) => {
                                r.pods.insert(tag.into(), list.items);
                            }
                            Err(e) => r.errors.push(format!("the pods at {tag} do not decode: {e}: {json:?}")),
                        }
                    }
                }
                "status" => {
                    if let Some((tag, text)) = tail.split_once(" | ") {
                        r.status.entry(tag.into()).or_default().push(text.into());
                    } else if let Some(tag) = tail.strip_suffix(" |") {
                        r.status.entry(tag.into()).or_default().push(String::new());
                    }
                }
                "unit" => {
                    let f = fields(3);
                    if f.len() >= 2 {
                        r.units
                            .entry(f[0].into())
                            .or_default()
                            .insert(f[1].into(), f.get(2).unwrap_or(&"").to_string());
                    }
                }
                "prop" => {
                    let f = fields(3);
                    if let (3, Some((k, v))) = (f.len(), f.get(2).and_then(|kv| kv.split_once('='))) {
                        r.props.insert((f[0].into(), f[1].into(), k.into()), v.trim().into());
                    }
                }
                "dir" => {
                    if let Some((tag, path)) = tail.split_once(' ') {
                        r.dirs.insert((tag.into(), path.into()));
                    }
                }
                "file" => {
                    let f = fields(4);
                    if f.len() >= 3 {
                        let value = f.get(3).unwrap_or(&"").trim().to_string();
                        r.files.insert((f[0].into(), f[1].into(), f[2].into()), value);
                    }
                }
                "proc" => {
                    let f = fields(4);
                    if f.len() == 4 {
                        r.procs.push((f[0].into(), f[2].into(), f[3].trim().into()));
                    }
                }
                "failed" => {
                    if let Some((tag, l)) = tail.split_once(' ') {
                        r.failed.push((tag.into(), l.into()));
                    }
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

    fn pod(&self, tag: &str, name: &str) -> Option<&Pod> {
        self.pods.get(tag)?.iter().find(|p| p.metadata.name == format!("{name}-{NODE}"))
    }

    fn unit(&self, tag: &str, unit: &str) -> Option<&str> {
        self.units.get(tag)?.get(unit).map(|s| s.as_str())
    }

    fn prop(&self, tag: &str, unit: &str, key: &str) -> Option<&str> {
        self.props.get(&(tag.into(), unit.into(), key.into())).map(|s| s.as_str())
    }

    fn file(&self, tag: &str, path: &str, name: &str) -> Option<&str> {
        self.files.get(&(tag.into(), path.into(), name.into())).map(|s| s.as_str())
    }

    /// The cgroup of the workload running `command` at `tag`.
    fn cgroup_of(&self, tag: &str, command: &str) -> Option<&str> {
        self.procs.iter().find(|(t, _, c)| t == tag && c == command).map(|(_, cg, _)| cg.as_str())
    }

    /// The first word of `values[key]`.
    fn value(&self, key: &str) -> &str {
        self.values.get(key).and_then(|v| v.split_whitespace().next()).unwrap_or("")
    }
}

/// The checks' failures, all of them, so one run shows everything that differs.
#[derive(Default)]
struct Failures(Vec<String>);

impl Failures {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.0.push(what());
        }
    }

    /// `got` is `want`.
    fn eq(&mut self, what: &str, got: Option<&str>, want: &str) {
        self.check(got == Some(want), || format!("{what}: {got:?}, want {want:?}"));
    }
}

/// The gzipped initramfs: busybox, the modules, `init`, and under `/sdvm` what it copies into
/// the image (tests/vm/systemd/init).
fn initramfs(vm_dir: &Path, busybox: &Path, out: &Path, config: &str, fake: bool) {
    let read = |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vm/systemd");
    let mut cpio = Cpio::new();
    cpio.file("/init", 0o755, &read(&here.join("init")));
    cpio.file("/bin/busybox", 0o755, &read(busybox));
    let modules = vm_dir.join("systemd/modules");
    let order = std::fs::read_to_string(modules.join("order")).unwrap_or_default();
    cpio.file("/modules/order", 0o644, order.as_bytes());
    for m in order.lines().filter(|l| !l.is_empty()) {
        cpio.file(&format!("/modules/{m}"), 0o644, &read(&modules.join(m)));
    }
    let bin = common::ferrolet_bin();
    cpio.file("/sdvm/root/usr/local/bin/ferrolet", 0o755, &read(&bin));
    for lib in libraries(&bin) {
        cpio.file(&format!("/sdvm/lib{}", lib.display()), 0o755, &read(&lib));
    }
    for unit in ["ferrolet.service", "sdvm-test.service"] {
        cpio.file(&format!("/sdvm/root/etc/systemd/system/{unit}"), 0o644, &read(&here.join(unit)));
    }
    cpio.file("/sdvm/enable", 0o644, b"ferrolet.service\nsdvm-test.service\n");
    cpio.file("/sdvm/root/usr/local/sbin/sdvm-test.sh", 0o755, &read(&here.join("sdvm-test.sh")));
    if fake {
        let script = read(&here.join("sdvm-fake-driver.sh"));
        cpio.file("/sdvm/root/usr/local/sbin/sdvm-fake-driver.sh", 0o755, &script);
    }
    cpio.file("/sdvm/root/etc/ferrolet/ferrolet.toml", 0o644, config.as_bytes());
    for (name, text, _) in manifests() {
        cpio.file(&format!("/sdvm/root/etc/ferrolet/manifests/{name}"), 0o644, text.as_bytes());
    }
    for d in ["/proc", "/sys", "/dev", "/newroot"] {
        cpio.dir(d);
    }
    let mut gzip = Command::new("gzip")
        .arg("-1")
        .stdin(Stdio::piped())
        .stdout(std::fs::File::create(out).unwrap())
        .spawn()
        .expect("gzip runs");
    gzip.stdin.take().unwrap().write_all(&cpio.finish()).unwrap();
    assert!(gzip.wait().unwrap().success(), "gzip failed");
}

/// How a boot ended.
enum Boot {
    /// The console, through `SDVM done` and power-off (or the timeout, which the checks see).
    Ran(String),
    /// KVM never reached the initramfs's end (the console so far).
    NoStart(String),
}

/// Boots the VM once with `accel` (`kvm` or `tcg`), the image as a `snapshot=on` disk,
/// bounded in time; qemu is killed at the end.
fn boot(vm_dir: &Path, initrd: &Path, accel: &str) -> Boot {
    let mut cmd = Command::new("qemu-system-x86_64");
    if accel == "kvm" {
        cmd.args(["-enable-kvm", "-cpu", "host"]);
    } else {
        cmd.args(["-accel", "tcg", "-cpu", "max"]);
    }
    let disk = vm_dir.join("systemd/rootfs.ext4");
    cmd.args(["-smp", &VM_CPUS.to_string(), "-m", "1G", "-kernel"])
        .arg(vm_dir.join("vmlinuz"))
        .arg("-initrd")
        .arg(initrd)
        .arg("-drive")
        .arg(format!("file={},format=raw,if=virtio,snapshot=on", disk.display()))
        .args(["-append", "console=ttyS0 panic=-1 quiet systemd.getty_auto=0 systemd.show_status=0"])
        .args(["-nographic", "-nodefaults", "-serial", "stdio", "-no-reboot"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("qemu-system-x86_64 starts");
    let (tx, rx) = mpsc::channel::<String>();
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    let tx2 = tx.clone();
    // Both readers end when qemu exits (or is killed): their pipes close.
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx2.send(format!("qemu: {line}"));
        }
    });
    let start = Instant::now();
    let mut console = String::new();
    let (mut started, mut done) = (false, false);
    loop {
        let limit = if accel == "kvm" && !started { KVM_START_TIMEOUT } else { BOOT_TIMEOUT };
        let Some(left) = limit.checked_sub(start.elapsed()) else {
            console.push_str(&format!("(the test: no power-off after {:?}; qemu killed)\n", start.elapsed()));
            break;
        };
        match rx.recv_timeout(left.min(Duration::from_millis(500))) {
            Ok(line) => {
                started |= line.contains("SDVM initramfs=done");
                done |= line.contains("SDVM done");
                console.push_str(&line);
                console.push('\n');
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break, // qemu exited
        }
        if done && child.try_wait().ok().flatten().is_some() {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    if accel == "kvm" && !started {
        return Boot::NoStart(console);
    }
    Boot::Ran(console)
}

/// The VM's directory when the kernel and the systemd image are there, with qemu and a
/// static busybox; otherwise skipped, saying why.
fn vm_or_skip() -> Option<(PathBuf, PathBuf)> {
    let dir = std::env::var_os(VM_DIR_ENV).map_or_else(|| PathBuf::from(VM_DIR), PathBuf::from);
    if !dir.join(".ferrolet-ready").exists() || !dir.join("vmlinuz").exists() {
        common::skip(&format!(
            "no VM kernel in {} (tests/vm/setup.sh, which make test runs, downloads it; FERROLET_SKIP_VM=1 skips it)",
            dir.display()
        ));
        return None;
    }
    let image = dir.join("systemd/rootfs.ext4");
    if !image.exists() || !dir.join("systemd/modules/order").exists() {
        common::skip(&format!(
            "no systemd VM image {} (tests/vm/systemd/mkimage.sh builds it; tests/vm/setup.sh, which make test runs, calls it)",
            image.display()
        ));
        return None;
    }
    if Command::new("qemu-system-x86_64").arg("--version").output().is_err() {
        common::skip("no qemu-system-x86_64 (tests/vm/setup.sh installs qemu-system-x86)");
        return None;
    }
    let busybox = PathBuf::from("/bin/busybox");
    match common::elf_machine_and_interp(&busybox) {
        Some((_, false)) => {}
        _ => {
            common::skip("no static /bin/busybox (tests/vm/setup.sh installs busybox-static)");
            return None;
        }
    }
    if Command::new("gzip").arg("--version").output().is_err() {
        common::skip("no gzip");
        return None;
    }
    Some((dir, busybox))
}

#[test]
fn the_systemd_driver_runs_pods_in_slices_on_a_systemd_vm() {
    let Some((vm_dir, busybox)) = vm_or_skip() else { return };
    let (driver, fake) = driver();
    let work = tempfile::tempdir().unwrap();
    let initrd = work.path().join("initrd.gz");
    initramfs(&vm_dir, &busybox, &initrd, &config(driver.as_deref()), fake);

    let start = Instant::now();
    let kvm = std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm").is_ok();
    let (accel, console) = match kvm.then(|| boot(&vm_dir, &initrd, "kvm")) {
        Some(Boot::Ran(console)) => ("kvm", console),
        Some(Boot::NoStart(console)) => {
            let tail: Vec<&str> = console.lines().rev().take(3).collect();
            eprintln!(
                "sdvm: KVM did not reach the initramfs's end (within {KVM_START_TIMEOUT:?}: {tail:?}); TCG instead"
            );
            match boot(&vm_dir, &initrd, "tcg") {
                Boot::Ran(c) | Boot::NoStart(c) => ("tcg", c),
            }
        }
        None => match boot(&vm_dir, &initrd, "tcg") {
            Boot::Ran(c) | Boot::NoStart(c) => ("tcg", c),
        },
    };
    eprintln!(
        "sdvm: booted and tested with {accel} in {:.1} s, driver {}{}",
        start.elapsed().as_secs_f64(),
        driver.as_deref().unwrap_or("(no key)"),
        if fake { ", the fake systemd driver standing in" } else { "" }
    );
    // The VM's summary lines and the units, for a person reading --nocapture.
    for l in console.lines() {
        if let Some(at) = l.find("SDVM ") {
            let rest = &l[at + 5..];
            if rest.contains('=') && !rest.starts_with("pods ") && !rest.starts_with("prop ")
                || rest.starts_with("unit ")
                || rest.starts_with("proc ")
                || rest.starts_with("failed ")
            {
                eprintln!("sdvm: {rest}");
            }
        }
    }
    let r = Report::parse(&console);
    let (harness, systemd) = check(&r);
    let systemd_asserted = fake || driver.as_deref() == Some("systemd");
    if !systemd_asserted && !systemd.0.is_empty() {
        eprintln!(
            "sdvm: not asserted with driver {:?} ({} systemd driver checks fail):\n  {}",
            driver,
            systemd.0.len(),
            systemd.0.join("\n  ")
        );
    }
    let mut all = harness.0;
    if systemd_asserted {
        all.extend(systemd.0);
    }
    assert!(
        all.is_empty(),
        "the systemd VM ({accel}, driver {driver:?}, fake {fake}) differs in {} ways:\n  {}\n\nthe VM's console:\n{console}",
        all.len(),
        all.join("\n  ")
    );
}

/// A pod uid as systemd's driver writes it in a unit name (kubelet: `-` would be a level).
fn escaped(uid: &str) -> String {
    uid.replace('-', "_")
}

/// Every check of one boot's report: those that hold on either driver (the harness, the
/// pods, removal, a clean stop), and those of the systemd driver.
fn check(r: &Report) -> (Failures, Failures) {
    let (mut f, mut s) = (Failures::default(), Failures::default());
    f.check(r.values.keys().any(|k| k.starts_with("done")), || "the VM never printed `SDVM done`".into());
    for e in &r.errors {
        f.0.push(format!("the VM: {e}"));
    }
    f.check(r.value("pid1") == "systemd", || format!("PID 1 is {:?}, want systemd", r.value("pid1")));
    f.check(r.values.get("pid1").is_some_and(|v| v.contains("cgroupfs=cgroup2fs")), || {
        format!("not a cgroup v2 host: {:?}", r.values.get("pid1"))
    });
    f.eq("systemctl is-system-running", Some(r.value("is-system-running")), "running");
    f.eq("ferrolet.service (systemctl is-active)", Some(r.value("ferrolet-active")), "active");
    let (Some(g), Some(b), Some(e)) =
        (r.pod("running", "guaranteed"), r.pod("running", "burstable"), r.pod("running", "besteffort"))
    else {
        f.0.push("the three pods are not on `ferrolet get pods`".into());
        return (f, s);
    };
    let qos = |p: &Pod| p.status.as_ref().map(|s| s.qos_class.clone()).unwrap_or_default();
    f.check(qos(g) == "Guaranteed" && qos(b) == "Burstable" && qos(e) == "BestEffort", || {
        format!("QoS classes: {}, {}, {}", qos(g), qos(b), qos(e))
    });
    // Either driver: each workload runs in a cgroup named after its pod.
    let pods = [(g, "sleep 3001"), (b, "sleep 3002"), (e, "sleep 3003")];
    for (p, command) in pods {
        let uid = &p.metadata.uid;
        match r.cgroup_of("running", command) {
            Some(cg) => f.check(cg.contains(uid.as_str()) || cg.contains(&escaped(uid)), || {
                format!("`{command}` runs in {cg}, not in a cgroup of pod {uid}")
            }),
            None => f.0.push(format!("no `{command}` running in the VM")),
        }
    }
    // Either driver: removal. The pod, its workload and its cgroup go; the others stay.
    let buid = b.metadata.uid.clone();
    f.check(r.pod("removed", "burstable").is_none(), || "the removed pod is still on `ferrolet get pods`".into());
    f.check(r.pod("removed", "guaranteed").is_some(), || "the guaranteed pod went with another's manifest".into());
    f.check(r.cgroup_of("removed", "sleep 3002").is_none(), || "`sleep 3002` still runs after its pod went".into());
    for (tag, path) in r.dirs.iter().filter(|(tag, _)| tag == "removed") {
        f.check(!path.contains(&buid) && !path.contains(&escaped(&buid)), || {
            format!("{path} still there ({tag}) after its pod went")
        });
    }
    // Either driver: `systemctl stop ferrolet` ends the agent cleanly, nothing failed.
    let stop = r.values.get("stop-rc").map_or("", |s| s.as_str());
    f.check(stop.starts_with("0 ") && stop.contains("Result=success"), || {
        format!("systemctl stop ferrolet: {stop:?}, want rc 0 and Result=success")
    });
    for (tag, l) in &r.failed {
        f.0.push(format!("failed unit ({tag}): {l}"));
    }

    // The systemd driver (fails until the driver lands on main: with the cgroupfs driver
    // there is no kubepods*.slice, and the workloads sit in /kubepods/.../<container>).
    let gs = format!("kubepods-pod{}.slice", escaped(&g.metadata.uid));
    let bs = format!("kubepods-burstable-pod{}.slice", escaped(&b.metadata.uid));
    let es = format!("kubepods-besteffort-pod{}.slice", escaped(&e.metadata.uid));
    let slices: [(&str, String); 6] = [
        ("kubepods.slice", "/kubepods.slice".into()),
        ("kubepods-burstable.slice", "/kubepods.slice/kubepods-burstable.slice".into()),
        ("kubepods-besteffort.slice", "/kubepods.slice/kubepods-besteffort.slice".into()),
        (&gs, format!("/kubepods.slice/{gs}")),
        (&bs, format!("/kubepods.slice/kubepods-burstable.slice/{bs}")),
        (&es, format!("/kubepods.slice/kubepods-besteffort.slice/{es}")),
    ];
    for (unit, cgroup) in &slices {
        let listed = r.unit("running", unit);
        s.check(listed.is_some_and(|l| l.split_whitespace().nth(1) == Some("active")), || {
            format!("{unit} not active in list-units: {listed:?}")
        });
        s.eq(&format!("{unit} ActiveState"), r.prop("running", unit, "ActiveState"), "active");
        s.eq(&format!("{unit} ControlGroup"), r.prop("running", unit, "ControlGroup"), cgroup);
        s.check(r.dirs.contains(&("running".into(), cgroup.clone())), || format!("no cgroup {cgroup}"));
    }
    // `systemctl status kubepods.slice`: the tree, down to the workloads.
    let status = r.status.get("running").map(|l| l.join("\n")).unwrap_or_default();
    s.check(status.contains("kubepods.slice") && status.contains("Active: active"), || {
        format!("systemctl status kubepods.slice does not show it active:\n{status}")
    });
    for (unit, _) in &slices[1..] {
        s.check(status.contains(unit), || format!("systemctl status kubepods.slice does not show {unit}"));
    }
    for (_, command) in pods {
        s.check(status.contains(command), || format!("systemctl status kubepods.slice does not show `{command}`"));
    }
    // Each container in a ferrolet-*.scope directly under its pod's slice.
    for ((_, command), pod_cg) in pods.iter().zip([&slices[3].1, &slices[4].1, &slices[5].1]) {
        let Some(cg) = r.cgroup_of("running", command) else { continue };
        let (parent, leaf) = cg.rsplit_once('/').unwrap_or(("", cg));
        s.check(leaf.starts_with("ferrolet-") && leaf.ends_with(".scope") && parent == pod_cg.as_str(), || {
            format!("`{command}` runs in {cg}, want {pod_cg}/ferrolet-<...>.scope")
        });
    }
    // The values: kubelet's linear weight from the pod's cpu shares, the quota over 100 ms,
    // the summed memory limits, no pids limit on pods (pod_pids_limit -1); kubepods gets the
    // node's allocatable (no reservations in the config). Properties and files agree.
    let weight = |milli: i64| shares_to_weight_linear(milli_cpu_to_shares(milli)).to_string();
    let mem_total = r.value("mem_total_kb").parse::<u64>().unwrap_or(0) * 1024;
    let pid_max = r.value("pid_max");
    let kubepods_weight = weight(VM_CPUS * 1000);
    s.check(kubepods_weight == "79", || format!("2 CPUs weigh {kubepods_weight}, want 79"));
    s.eq("kubepods.slice CPUWeight", r.prop("running", "kubepods.slice", "CPUWeight"), &kubepods_weight);
    s.eq("/kubepods.slice cpu.weight", r.file("running", "/kubepods.slice", "cpu.weight"), &kubepods_weight);
    let kubepods_max = r.prop("running", "kubepods.slice", "MemoryMax").and_then(|v| v.parse::<u64>().ok());
    s.check(kubepods_max.map(|m| m / 4096) == Some(mem_total / 4096), || {
        format!("kubepods.slice MemoryMax {kubepods_max:?}, want the VM's memory {mem_total}")
    });
    s.eq(
        "/kubepods.slice memory.max",
        r.file("running", "/kubepods.slice", "memory.max"),
        &(mem_total / 4096 * 4096).to_string(),
    );
    s.eq("kubepods.slice TasksMax", r.prop("running", "kubepods.slice", "TasksMax"), pid_max);
    s.eq("/kubepods.slice pids.max", r.file("running", "/kubepods.slice", "pids.max"), pid_max);
    // The QoS slices: burstable weighs its pods' cpu requests (250m), besteffort the minimum.
    for (unit, w) in [(&slices[1], weight(250)), (&slices[2], "1".to_string())] {
        s.eq(&format!("{} CPUWeight", unit.0), r.prop("running", unit.0, "CPUWeight"), &w);
        s.eq(&format!("{} cpu.weight", unit.1), r.file("running", &unit.1, "cpu.weight"), &w);
    }
    // The pod slices: (CPUWeight, CPUQuotaPerSecUSec, cpu.max, MemoryMax, memory.max).
    for (i, (weight, quota, max, memory, memory_file)) in [
        (weight(500), "500ms", "50000 100000", "67108864", "67108864"),
        (weight(250), "1s", "100000 100000", "100663296", "100663296"),
        (weight(0), "infinity", "max 100000", "infinity", "max"),
    ]
    .into_iter()
    .enumerate()
    {
        let (unit, cg) = (&slices[3 + i].0, &slices[3 + i].1);
        s.eq(&format!("{unit} CPUWeight"), r.prop("running", unit, "CPUWeight"), &weight);
        s.eq(&format!("{cg} cpu.weight"), r.file("running", cg, "cpu.weight"), &weight);
        s.eq(&format!("{unit} CPUQuotaPerSecUSec"), r.prop("running", unit, "CPUQuotaPerSecUSec"), quota);
        s.eq(&format!("{cg} cpu.max"), r.file("running", cg, "cpu.max"), max);
        s.eq(&format!("{unit} MemoryMax"), r.prop("running", unit, "MemoryMax"), memory);
        s.eq(&format!("{cg} memory.max"), r.file("running", cg, "memory.max"), memory_file);
        s.eq(&format!("{unit} TasksMax"), r.prop("running", unit, "TasksMax"), "infinity");
        s.eq(&format!("{cg} pids.max"), r.file("running", cg, "pids.max"), "max");
        // The controllers the container scopes' limits need, handed down by the pod slice.
        let delegated: BTreeSet<&str> =
            r.file("running", cg, "cgroup.subtree_control").unwrap_or("").split_whitespace().collect();
        s.check(["cpu", "memory", "pids"].iter().all(|c| delegated.contains(c)), || {
            format!("{cg} cgroup.subtree_control {delegated:?}, want cpu memory pids")
        });
    }
    f.eq("500m's linear weight", Some(&weight(500)), "20");
    // Removal: the burstable pod's slice unit and cgroup gone, the others there.
    s.check(r.unit("removed", &bs).is_none(), || {
        format!("{bs} still listed after its pod went: {:?}", r.unit("removed", &bs))
    });
    s.check(!r.dirs.contains(&("removed".into(), slices[4].1.clone())), || {
        format!("{} still there after its pod went", slices[4].1)
    });
    for (unit, _) in [&slices[0], &slices[3], &slices[5]] {
        s.check(r.unit("removed", unit).is_some(), || format!("{unit} went with another pod"));
    }
    // After `systemctl stop ferrolet`: no kubepods unit failed.
    for (unit, cols) in r.units.get("stopped").into_iter().flatten() {
        s.check(!cols.contains("failed"), || format!("{unit} after systemctl stop ferrolet: {cols}"));
    }
    (f, s)
}
