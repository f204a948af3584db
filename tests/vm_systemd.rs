//! ferrolet's systemd cgroup driver on a real systemd host: a VM (qemu, Debian's kernel, the
//! Debian 12 image `tests/vm/systemd/mkimage.sh` builds, with systemd 252 as PID 1 and
//! containerd 1.6) into which the initramfs (`tests/vm/systemd/init`) copies the ferrolet
//! binary under test, the shipped `etc/systemd/ferrolet.service`, its config ([`config`],
//! `cgroups.driver = "auto"`, which picks systemd there) and three static pods, and the VM's
//! test (`tests/vm/systemd/sdvm-test.sh`), which prints what systemd and the kernel show as
//! `SDVM ...` lines on the serial console: `systemctl status kubepods.slice`, the
//! `kubepods*` units and their properties, the slices' control files, each workload's
//! cgroup; again after a `daemon-reload`, after one manifest is removed, and after
//! `systemctl stop ferrolet`.
//!
//! Three boots ([`Case`]): the process runtime on cgroup v2, the same on cgroup v1 (systemd's
//! hybrid layout, `systemd.unified_cgroup_hierarchy=0`), and containerd with its runc on
//! `SystemdCgroup = true` on cgroup v2. Checked: the slices kubelet's systemd driver makes
//! (`kubepods.slice`, `kubepods-burstable.slice`, `kubepods-pod<uid>.slice`, ...), nested,
//! active, with kubelet's values as properties and in the files, unchanged by a
//! `daemon-reload`; each container in a scope under its pod's slice (`ferrolet-<id>.scope`, or
//! containerd's `cri-containerd-<id>.scope`); the slice gone with its pod; the pods still
//! running and nothing failed once the agent is stopped. Needs `tests/vm/setup.sh` and
//! `tests/vm/systemd/mkimage.sh` (setup.sh runs it; `make test` runs setup.sh); skips without
//! qemu, the kernel or the image.

use crate::common;

use ferrolet::api::{Pod, PodList};
use ferrolet::node::cm::helpers::{milli_cpu_to_shares, shares_to_weight_linear};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::vm::{boot, libraries, vm_or_skip, Cpio, Qemu};

/// One boot, from qemu's start to its power-off. The VM's own waits add up to about 150 s
/// at most (tests/vm/systemd/sdvm-test.sh); a passing run takes far less (docs/building.md).
const BOOT_TIMEOUT: Duration = Duration::from_secs(240);
/// The VM's CPUs (kubepods' weight follows from them).
const VM_CPUS: i64 = 2;
/// The node's name in the VM (static pods are named `<name>-<node>`).
const NODE: &str = "sdvm";
/// One boot at a time: three TCG guests of 2 vCPUs each at once would starve each other.
static BOOTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// What one boot runs.
#[derive(Clone, Copy, Debug)]
struct Case {
    /// containerd (runc with `SystemdCgroup = true`) instead of the process runtime.
    cri: bool,
    /// cgroup v1 (systemd's hybrid layout) instead of v2.
    v1: bool,
}

/// The agent's config in the VM (the one place the test's config is written).
fn config(case: Case) -> String {
    let runtime = if case.cri {
        "runtime = \"cri\"\ncontainer_runtime_endpoint = \"unix:///run/containerd/containerd.sock\""
    } else {
        "runtime = \"process\""
    };
    format!(
        r#"node_name = "{NODE}"
node_ip = "127.0.0.1"
{runtime}
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
driver = "auto"
"#
    )
}

/// The VM's containerd: the CRI plugin with runc on systemd's cgroups, the pause image the
/// test imports, no network plugin (the pods are on the host network).
const CONTAINERD_CONFIG: &str = r#"version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:catatonit"
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
"#;

/// The shipped unit's test settings: debug logs, and started after the bus and containerd.
const UNIT_DROP_IN: &str = "[Unit]\nAfter=dbus.service containerd.service\n[Service]\nEnvironment=RUST_LOG=debug\n";

/// The static pods, each running `sleep 300N` (coreutils' sleep from the image on the
/// process runtime, which runs the host's binaries; busybox's on containerd), by file name,
/// with their workload's command line.
fn manifests(case: Case) -> [(&'static str, String, &'static str); 3] {
    // On containerd: the busybox image the test imports, never pulled, on the host network.
    let image = if case.cri { "localhost/busybox:latest\n    imagePullPolicy: Never" } else { "busybox" };
    let network = if case.cri { "  hostNetwork: true\n" } else { "" };
    let pod = |name: &str, seconds: &str, resources: &str| {
        common::manifest(
            name,
            &format!(
                "{network}  terminationGracePeriodSeconds: 2\n  containers:\n  - name: app\n    image: {image}\n    command: [sleep, \"{seconds}\"]\n{resources}"
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
fn initramfs(vm_dir: &Path, busybox: &Path, work: &Path, case: Case) -> PathBuf {
    let read = |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let here = repo.join("tests/vm/systemd");
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
    // The unit a user installs (`make install`), as it ships.
    let unit = read(&repo.join("etc/systemd/ferrolet.service"));
    cpio.file("/sdvm/root/etc/systemd/system/ferrolet.service", 0o644, &unit);
    cpio.file("/sdvm/root/etc/systemd/system/ferrolet.service.d/sdvm.conf", 0o644, UNIT_DROP_IN.as_bytes());
    let test_unit = read(&here.join("sdvm-test.service"));
    cpio.file("/sdvm/root/etc/systemd/system/sdvm-test.service", 0o644, &test_unit);
    cpio.file("/sdvm/enable", 0o644, b"sdvm-test.service\n");
    cpio.file("/sdvm/root/usr/local/sbin/sdvm-test.sh", 0o755, &read(&here.join("sdvm-test.sh")));
    // containerd writes a hostNetwork sandbox's hosts file from the node's.
    cpio.file("/sdvm/root/etc/hosts", 0o644, format!("127.0.0.1 localhost {NODE}\n").as_bytes());
    cpio.file("/sdvm/root/etc/ferrolet/ferrolet.toml", 0o644, config(case).as_bytes());
    for (name, text, _) in manifests(case) {
        cpio.file(&format!("/sdvm/root/etc/ferrolet/manifests/{name}"), 0o644, text.as_bytes());
    }
    if case.cri {
        cpio.file("/sdvm/root/etc/ferrolet/cri", 0o644, b"");
        cpio.file("/sdvm/root/etc/containerd/config.toml", 0o644, CONTAINERD_CONFIG.as_bytes());
        // The images, built offline from Debian's binaries as the CRI tests' are.
        let images: [(&str, &[&str]); 2] = [
            (
                "localhost/pause:catatonit",
                &[
                    "--format",
                    "oci",
                    "--file",
                    "/usr/bin/catatonit:/usr/bin/catatonit",
                    "--entrypoint",
                    "/usr/bin/catatonit,-P",
                ],
            ),
            ("localhost/busybox:latest", &["--format", "docker", "--busybox", "/bin/busybox", "--cmd", "/bin/sh"]),
        ];
        for (i, (name, args)) in images.iter().enumerate() {
            let tar = work.join(format!("image{i}.tar"));
            let status = Command::new("python3")
                .arg(repo.join("tests/cri/mkimage.py"))
                .args(["--name", name, "--arch", "amd64", "--out"])
                .arg(&tar)
                .args(*args)
                .status()
                .expect("python3 runs");
            assert!(status.success(), "mkimage.py {name} failed");
            cpio.file(&format!("/sdvm/root/var/lib/sdvm-images/image{i}.tar"), 0o644, &read(&tar));
        }
    }
    for d in ["/proc", "/sys", "/dev", "/newroot"] {
        cpio.dir(d);
    }
    let out = work.join("initrd.gz");
    cpio.gzip_to(&out);
    out
}

/// The VM's qemu run for `case`: the image as a `snapshot=on` disk (never changed), 1 GiB.
fn qemu<'a>(vm_dir: &'a Path, initrd: &'a Path, case: Case) -> Qemu<'a> {
    let disk = vm_dir.join("systemd/rootfs.ext4");
    let v1 = if case.v1 { " systemd.unified_cgroup_hierarchy=0" } else { "" };
    Qemu {
        vm_dir,
        initrd,
        cpus: VM_CPUS,
        memory: "1G",
        append: format!("console=ttyS0 panic=-1 quiet systemd.getty_auto=0 systemd.show_status=0{v1}"),
        extra: vec!["-drive".into(), format!("file={},format=raw,if=virtio,snapshot=on", disk.display()).into()],
        started: "SDVM initramfs=done",
        done: "SDVM done",
        timeout: BOOT_TIMEOUT,
    }
}

/// The VM directory when the systemd image is there too; otherwise skipped, saying why.
fn systemd_vm_or_skip() -> Option<(PathBuf, PathBuf)> {
    let (dir, busybox) = vm_or_skip()?;
    let image = dir.join("systemd/rootfs.ext4");
    if !image.exists() || !dir.join("systemd/modules/order").exists() {
        common::skip(&format!(
            "no systemd VM image {} (tests/vm/systemd/mkimage.sh builds it; tests/vm/setup.sh, which make test runs, calls it)",
            image.display()
        ));
        return None;
    }
    Some((dir, busybox))
}

#[test]
fn the_systemd_driver_runs_pods_in_slices_on_a_systemd_vm() {
    run(Case { cri: false, v1: false });
}

#[test]
fn the_systemd_driver_on_cgroup_v1_under_systemd() {
    run(Case { cri: false, v1: true });
}

#[test]
fn containerd_on_systemd_cgroups_runs_pods_in_ferrolets_slices() {
    run(Case { cri: true, v1: false });
}

/// Boots the VM for `case` (KVM where it works, TCG otherwise) and checks what it printed.
fn run(case: Case) {
    let Some((vm_dir, busybox)) = systemd_vm_or_skip() else { return };
    let _one = BOOTS.lock().unwrap_or_else(|e| e.into_inner());
    let work = tempfile::tempdir().unwrap();
    let initrd = initramfs(&vm_dir, &busybox, work.path(), case);
    let start = Instant::now();
    let (accel, console) = boot(&qemu(&vm_dir, &initrd, case), "sdvm");
    eprintln!("sdvm: {case:?} booted and tested with {accel} in {:.1} s", start.elapsed().as_secs_f64());
    // The VM's summary lines and the units, for a person reading --nocapture.
    for l in console.lines() {
        if let Some(at) = l.find("SDVM ") {
            let rest = &l[at + 5..];
            if rest.contains('=') && !rest.starts_with("pods ") && !rest.starts_with("prop ")
                || rest.starts_with("unit running ")
                || rest.starts_with("proc ")
                || rest.starts_with("failed ")
            {
                eprintln!("sdvm: {rest}");
            }
        }
    }
    let failures = check(&Report::parse(&console), case);
    assert!(
        failures.0.is_empty(),
        "the systemd VM ({case:?}, {accel}) differs in {} ways:\n  {}\n\nthe VM's console:\n{console}",
        failures.0.len(),
        failures.0.join("\n  ")
    );
}

/// A pod uid as systemd's driver writes it in a unit name (kubelet: `-` would be a level).
fn escaped(uid: &str) -> String {
    uid.replace('-', "_")
}

/// Every check of one boot's report: the host, the pods, the slices and their values, the
/// containers' scopes, a daemon-reload, removal, and a clean stop that leaves the pods.
fn check(r: &Report, case: Case) -> Failures {
    let mut f = Failures::default();
    f.check(r.values.keys().any(|k| k.starts_with("done")), || "the VM never printed `SDVM done`".into());
    for e in &r.errors {
        f.0.push(format!("the VM: {e}"));
    }
    f.check(r.value("pid1") == "systemd", || format!("PID 1 is {:?}, want systemd", r.value("pid1")));
    // The hybrid layout mounts a tmpfs at /sys/fs/cgroup, v2 the unified hierarchy.
    let fs = if case.v1 { "cgroupfs=tmpfs" } else { "cgroupfs=cgroup2fs" };
    f.check(r.values.get("pid1").is_some_and(|v| v.contains(fs)), || {
        format!("not the cgroup layout asked for ({fs}): {:?}", r.values.get("pid1"))
    });
    f.eq("systemctl is-system-running", Some(r.value("is-system-running")), "running");
    f.eq("ferrolet.service (systemctl is-active)", Some(r.value("ferrolet-active")), "active");
    if case.cri {
        f.eq("containerd.service", Some(r.value("containerd")), "active");
        f.eq("images imported", Some(r.value("images")), "2");
    }
    let (Some(g), Some(b), Some(e)) =
        (r.pod("running", "guaranteed"), r.pod("running", "burstable"), r.pod("running", "besteffort"))
    else {
        f.0.push("the three pods are not on `ferrolet get pods`".into());
        return f;
    };
    let qos = |p: &Pod| p.status.as_ref().map(|s| s.qos_class.clone()).unwrap_or_default();
    f.check(qos(g) == "Guaranteed" && qos(b) == "Burstable" && qos(e) == "BestEffort", || {
        format!("QoS classes: {}, {}, {}", qos(g), qos(b), qos(e))
    });
    let pods = [(g, "sleep 3001"), (b, "sleep 3002"), (e, "sleep 3003")];
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
        f.check(listed.is_some_and(|l| l.split_whitespace().nth(1) == Some("active")), || {
            format!("{unit} not active in list-units: {listed:?}")
        });
        f.eq(&format!("{unit} ActiveState"), r.prop("running", unit, "ActiveState"), "active");
        f.eq(&format!("{unit} ControlGroup"), r.prop("running", unit, "ControlGroup"), cgroup);
    }
    // `systemctl status kubepods.slice`: the tree, down to the workloads.
    let status = r.status.get("running").map(|l| l.join("\n")).unwrap_or_default();
    f.check(status.contains("kubepods.slice") && status.contains("Active: active"), || {
        format!("systemctl status kubepods.slice does not show it active:\n{status}")
    });
    for (unit, _) in &slices[1..] {
        f.check(status.contains(unit), || format!("systemctl status kubepods.slice does not show {unit}"));
    }
    for (_, command) in pods {
        f.check(status.contains(command), || format!("systemctl status kubepods.slice does not show `{command}`"));
    }
    // Each container in a scope directly under its pod's slice: ferrolet's shim's, or runc's.
    let scope = if case.cri { "cri-containerd-" } else { "ferrolet-" };
    for ((_, command), pod_cg) in pods.iter().zip([&slices[3].1, &slices[4].1, &slices[5].1]) {
        let Some(cg) = r.cgroup_of("running", command) else {
            f.0.push(format!("no `{command}` running in the VM"));
            continue;
        };
        let (parent, leaf) = cg.rsplit_once('/').unwrap_or(("", cg));
        f.check(leaf.starts_with(scope) && leaf.ends_with(".scope") && parent == pod_cg.as_str(), || {
            format!("`{command}` runs in {cg}, want {pod_cg}/{scope}<id>.scope")
        });
    }
    if case.v1 {
        check_v1_values(r, &slices, &mut f);
    } else {
        check_v2_values(r, &slices, &mut f);
    }
    // A daemon-reload applies the units' settings again: no limit may change.
    let running: Vec<_> = r.files.iter().filter(|((tag, _, _), _)| tag == "running").collect();
    f.check(running.len() > 20, || format!("only {} control files read", running.len()));
    for ((_, path, name), value) in running {
        let after = r.file("reloaded", path, name);
        f.check(after == Some(value.as_str()), || {
            format!("{path}/{name} was {value:?}, {after:?} after systemctl daemon-reload")
        });
    }
    // Removal: the pod, its workload, its slice unit and cgroup go; the others stay.
    let buid = &b.metadata.uid;
    f.check(r.pod("removed", "burstable").is_none(), || "the removed pod is still on `ferrolet get pods`".into());
    f.check(r.cgroup_of("removed", "sleep 3002").is_none(), || "`sleep 3002` still runs after its pod went".into());
    f.check(r.unit("removed", &bs).is_none(), || format!("{bs} still listed after its pod went"));
    for (_, path) in r.dirs.iter().filter(|(tag, _)| tag == "removed") {
        f.check(!path.contains(buid.as_str()) && !path.contains(&escaped(buid)), || {
            format!("{path} still there after its pod went")
        });
    }
    for (unit, _) in [&slices[0], &slices[3], &slices[5]] {
        f.check(r.unit("removed", unit).is_some(), || format!("{unit} went with another pod"));
    }
    // `systemctl stop ferrolet`: the agent ends cleanly, and (KillMode=process, as shipped)
    // its pods go on in their scopes, to be adopted by the next start; nothing failed.
    let stop = r.values.get("stop-rc").map_or("", |s| s.as_str());
    f.check(stop.starts_with("0 ") && stop.contains("Result=success"), || {
        format!("systemctl stop ferrolet: {stop:?}, want rc 0 and Result=success")
    });
    for command in ["sleep 3001", "sleep 3003"] {
        let (before, after) = (r.cgroup_of("removed", command), r.cgroup_of("stopped", command));
        f.check(before.is_some() && before == after, || {
            format!("`{command}` in {before:?} before the agent stopped, {after:?} after")
        });
    }
    for (tag, l) in &r.failed {
        f.0.push(format!("failed unit ({tag}): {l}"));
    }
    f
}

/// kubelet's values on v2, as properties and in the files: the linear weight from the pod's
/// cpu shares, the quota over 100 ms, the summed memory limits, no pids limit on pods
/// (pod_pids_limit -1); kubepods gets the node's allocatable (no reservations configured).
fn check_v2_values(r: &Report, slices: &[(&str, String); 6], f: &mut Failures) {
    let weight = |milli: i64| shares_to_weight_linear(milli_cpu_to_shares(milli)).to_string();
    let mem_total = r.value("mem_total_kb").parse::<u64>().unwrap_or(0) * 1024;
    let pid_max = r.value("pid_max");
    let kubepods_weight = weight(VM_CPUS * 1000);
    f.check(kubepods_weight == "79", || format!("2 CPUs weigh {kubepods_weight}, want 79"));
    f.eq("kubepods.slice CPUWeight", r.prop("running", "kubepods.slice", "CPUWeight"), &kubepods_weight);
    f.eq("/kubepods.slice cpu.weight", r.file("running", "/kubepods.slice", "cpu.weight"), &kubepods_weight);
    let kubepods_max = r.prop("running", "kubepods.slice", "MemoryMax").and_then(|v| v.parse::<u64>().ok());
    f.check(kubepods_max.map(|m| m / 4096) == Some(mem_total / 4096), || {
        format!("kubepods.slice MemoryMax {kubepods_max:?}, want the VM's memory {mem_total}")
    });
    f.eq(
        "/kubepods.slice memory.max",
        r.file("running", "/kubepods.slice", "memory.max"),
        &(mem_total / 4096 * 4096).to_string(),
    );
    f.eq("kubepods.slice TasksMax", r.prop("running", "kubepods.slice", "TasksMax"), pid_max);
    f.eq("/kubepods.slice pids.max", r.file("running", "/kubepods.slice", "pids.max"), pid_max);
    // The QoS slices: burstable weighs its pods' cpu requests (250m), besteffort the minimum.
    for (unit, w) in [(&slices[1], weight(250)), (&slices[2], "1".to_string())] {
        f.eq(&format!("{} CPUWeight", unit.0), r.prop("running", unit.0, "CPUWeight"), &w);
        f.eq(&format!("{} cpu.weight", unit.1), r.file("running", &unit.1, "cpu.weight"), &w);
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
        f.eq(&format!("{unit} CPUWeight"), r.prop("running", unit, "CPUWeight"), &weight);
        f.eq(&format!("{cg} cpu.weight"), r.file("running", cg, "cpu.weight"), &weight);
        f.eq(&format!("{unit} CPUQuotaPerSecUSec"), r.prop("running", unit, "CPUQuotaPerSecUSec"), quota);
        f.eq(&format!("{cg} cpu.max"), r.file("running", cg, "cpu.max"), max);
        f.eq(&format!("{unit} MemoryMax"), r.prop("running", unit, "MemoryMax"), memory);
        f.eq(&format!("{cg} memory.max"), r.file("running", cg, "memory.max"), memory_file);
        f.eq(&format!("{unit} TasksMax"), r.prop("running", unit, "TasksMax"), "infinity");
        f.eq(&format!("{cg} pids.max"), r.file("running", cg, "pids.max"), "max");
        // The controllers the container scopes' limits need, handed down by the pod slice.
        let delegated: BTreeSet<&str> =
            r.file("running", cg, "cgroup.subtree_control").unwrap_or("").split_whitespace().collect();
        f.check(["cpu", "memory", "pids"].iter().all(|c| delegated.contains(c)), || {
            format!("{cg} cgroup.subtree_control {delegated:?}, want cpu memory pids")
        });
    }
}

/// kubelet's values on v1, as properties (`CPUShares`, `MemoryLimit`) and in each
/// controller's hierarchy: shares, the CFS quota, the memory limit, and pids.
fn check_v1_values(r: &Report, slices: &[(&str, String); 6], f: &mut Failures) {
    let (cpu, memory, pids) = ("/cpu,cpuacct", "/memory", "/pids");
    let mem_total = r.value("mem_total_kb").parse::<u64>().unwrap_or(0) * 1024;
    let shares = milli_cpu_to_shares(VM_CPUS * 1000).to_string();
    f.eq("kubepods.slice CPUShares", r.prop("running", "kubepods.slice", "CPUShares"), &shares);
    f.eq("kubepods cpu.shares", r.file("running", &format!("{cpu}/kubepods.slice"), "cpu.shares"), &shares);
    let limit = r.file("running", &format!("{memory}/kubepods.slice"), "memory.limit_in_bytes");
    f.check(limit.and_then(|l| l.parse::<u64>().ok()).map(|m| m / 4096) == Some(mem_total / 4096), || {
        format!("kubepods memory.limit_in_bytes {limit:?}, want the VM's memory {mem_total}")
    });
    f.eq("kubepods pids.max", r.file("running", &format!("{pids}/kubepods.slice"), "pids.max"), r.value("pid_max"));
    // (CPUShares, cpu.cfs_quota_us, MemoryLimit, memory.limit_in_bytes) of the pod slices;
    // v1 shows no limit as the largest page-aligned number.
    for (i, (shares, quota, memory_prop, memory_file)) in [
        (milli_cpu_to_shares(500), "50000", "67108864", "67108864"),
        (milli_cpu_to_shares(250), "100000", "100663296", "100663296"),
        (milli_cpu_to_shares(0), "-1", "infinity", "9223372036854771712"),
    ]
    .into_iter()
    .enumerate()
    {
        let (unit, cg) = (&slices[3 + i].0, &slices[3 + i].1);
        f.eq(&format!("{unit} CPUShares"), r.prop("running", unit, "CPUShares"), &shares.to_string());
        f.eq(&format!("{cg} cpu.shares"), r.file("running", &format!("{cpu}{cg}"), "cpu.shares"), &shares.to_string());
        f.eq(&format!("{cg} cpu.cfs_quota_us"), r.file("running", &format!("{cpu}{cg}"), "cpu.cfs_quota_us"), quota);
        f.eq(&format!("{unit} MemoryLimit"), r.prop("running", unit, "MemoryLimit"), memory_prop);
        let file = r.file("running", &format!("{memory}{cg}"), "memory.limit_in_bytes");
        f.eq(&format!("{cg} memory.limit_in_bytes"), file, memory_file);
    }
}
