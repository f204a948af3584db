//! Pod cgroups for real: on this machine as root, cgroup v1 writes read back from the
//! kernel, processes placed in their container cgroups, orphans removed; without access,
//! the agent runs without enforcement (or refuses, when told enforcement is required).

use crate::common;

use common::{container, manifest, wait_for, workload_pid, AgentProcess, Sandbox};
use ferrolet::node::cm::cgroupfs::{detect, CgroupDriver, CgroupVersion};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

/// The host's cgroup v1 driver, or None (with a message) when the test cannot run here.
fn v1_driver(sb: &Sandbox) -> Option<Box<dyn CgroupDriver>> {
    let d = match detect(Path::new("/proc/self/mountinfo"), Some(CgroupVersion::V1)) {
        Ok(d) => d,
        Err(e) => {
            common::skip(&format!("no cgroup v1 on this host: {}", ferrolet::base::errors::Chain(&e)));
            return None;
        }
    };
    let probe = format!("{}/probe", sb.cgroup_root());
    if let Err(e) = d.create(&probe) {
        common::skip(&format!("cannot create cgroups (needs root): {}", ferrolet::base::errors::Chain(&e)));
        return None;
    }
    let _ = d.destroy(&probe);
    Some(d)
}

fn read(d: &dyn CgroupDriver, path: &str, file: &str) -> String {
    let dir = d.dir_for(path, file).unwrap();
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join(file).display()))
        .trim()
        .to_string()
}

#[test]
fn pods_of_each_qos_class_get_kernel_enforced_cgroups_and_lose_them_on_removal() {
    let sb = Sandbox::new();
    let Some(d) = v1_driver(&sb) else { return };
    let spec = |res: &str| {
        format!("  terminationGracePeriodSeconds: 2\n  containers:\n  - name: app\n    image: x\n    command: [sleep, '300']\n{res}")
    };
    sb.write_manifest("g.yaml", &manifest("g", &spec("    resources:\n      limits: {cpu: 500m, memory: 64Mi}\n")));
    sb.write_manifest(
        "b.yaml",
        &manifest("b", &spec("    resources:\n      requests: {cpu: 250m}\n      limits: {memory: 32Mi}\n")),
    );
    sb.write_manifest("e.yaml", &manifest("e", &spec("")));
    let agent = AgentProcess::start(&sb);
    let pods = wait_for("three running pods", T, || {
        let pods = agent.pods();
        (pods.len() == 3 && pods.iter().all(|p| p.status.as_ref().unwrap().phase == "Running")).then_some(pods)
    });
    let root = sb.cgroup_root();
    let kubepods = format!("{root}/kubepods");
    let pod = |n: &str| pods.iter().find(|p| p.metadata.name == format!("{n}-testnode")).unwrap();
    let (g, b, e) = (pod("g"), pod("b"), pod("e"));
    assert_eq!(g.status.as_ref().unwrap().qos_class, "Guaranteed");
    assert_eq!(b.status.as_ref().unwrap().qos_class, "Burstable");
    assert_eq!(e.status.as_ref().unwrap().qos_class, "BestEffort");

    let gp = format!("{kubepods}/pod{}", g.metadata.uid);
    assert_eq!(read(&*d, &gp, "cpu.shares"), "512");
    assert_eq!(read(&*d, &gp, "cpu.cfs_quota_us"), "50000");
    assert_eq!(read(&*d, &gp, "cpu.cfs_period_us"), "100000");
    assert_eq!(read(&*d, &gp, "memory.limit_in_bytes"), (64u64 << 20).to_string());
    let bp = format!("{kubepods}/burstable/pod{}", b.metadata.uid);
    assert_eq!(read(&*d, &bp, "cpu.shares"), "256");
    assert_eq!(read(&*d, &bp, "cpu.cfs_quota_us"), "-1", "no quota without cpu limits");
    assert_eq!(read(&*d, &bp, "memory.limit_in_bytes"), (32u64 << 20).to_string());
    assert_eq!(read(&*d, &format!("{kubepods}/burstable"), "cpu.shares"), "256");
    let ep = format!("{kubepods}/besteffort/pod{}", e.metadata.uid);
    assert_eq!(read(&*d, &ep, "cpu.shares"), "2");
    assert_eq!(read(&*d, &format!("{kubepods}/besteffort"), "cpu.shares"), "2");
    let capacity = ferrolet::node::cm::NodeResources::from_proc();
    let shares = ferrolet::node::cm::helpers::milli_cpu_to_shares(capacity.cpu_millis);
    assert_eq!(read(&*d, &kubepods, "cpu.shares"), shares.to_string());
    assert_eq!(
        read(&*d, &kubepods, "memory.limit_in_bytes"),
        (capacity.memory / 4096 * 4096).to_string(),
        "the kernel rounds to pages"
    );

    // The container process sits in its container cgroup, in every hierarchy.
    let pid = workload_pid(&sb.state(), &container(g, "app").unwrap().container_id).unwrap();
    let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let want = format!("{gp}/app");
    for controller in ["cpu", "memory", "pids"] {
        let line =
            cg.lines().find(|l| l.split(':').nth(1).is_some_and(|c| c.split(',').any(|x| x == controller))).unwrap();
        assert_eq!(line.rsplit(':').next().unwrap(), want, "{controller}: {cg}");
    }
    assert_eq!(read(&*d, &want, "memory.limit_in_bytes"), (64u64 << 20).to_string());
    assert_eq!(read(&*d, &want, "cpu.cfs_quota_us"), "50000");
    // kubelet's OOM scores by QoS class: Guaranteed -997, BestEffort 1000, Burstable by its
    // memory request (none here: 999, the top of its range).
    let score = |pod: &ferrolet::api::Pod| {
        let pid = workload_pid(&sb.state(), &container(pod, "app").unwrap().container_id).unwrap();
        std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).unwrap().trim().to_string()
    };
    assert_eq!((score(b).as_str(), score(e).as_str()), ("999", "1000"));
    if ferrolet::base::procs::has_capability(ferrolet::base::procs::CAP_SYS_RESOURCE) {
        assert_eq!(score(g), "-997");
    } else {
        // This sandbox cannot lower a score: 0, and the agent said why at start.
        assert_eq!(score(g), "0");
        assert!(agent.log_text().contains("the agent lacks CAP_SYS_RESOURCE"), "{}", agent.log_text());
    }

    // Removal: the pod cgroup goes, and the burstable shares drop back.
    std::fs::remove_file(sb.manifests().join("b.yaml")).unwrap();
    wait_for("the burstable pod's cgroup to go", T, || (!d.exists(&bp)).then_some(()));
    wait_for("burstable shares back to 2", T, || {
        (read(&*d, &format!("{kubepods}/burstable"), "cpu.shares") == "2").then_some(())
    });
    assert!(agent.log_text().contains("NodeAllocatableEnforced"));
}

#[test]
fn orphaned_pod_cgroups_left_by_a_crash_are_emptied_and_removed() {
    let sb = Sandbox::new();
    let Some(d) = v1_driver(&sb) else { return };
    // What a crashed agent could leave behind: a pod cgroup nobody owns, with a process in it.
    let orphan = format!("{}/kubepods/besteffort/pod0123456789abcdef0123456789abcdef", sb.cgroup_root());
    // The agent recorded it in its state dir before creating it, then crashed.
    ferrolet::node::cm::ownership::PodCgroupRecords::new(&sb.state()).record(&orphan).unwrap();
    d.create(&orphan).unwrap();
    let mut child = Command::new("sleep").arg("300").spawn().unwrap();
    for f in d.procs_files(&orphan) {
        std::fs::write(f, child.id().to_string()).unwrap();
    }
    let agent = AgentProcess::start(&sb);
    wait_for("the orphan to be removed", T, || (!d.exists(&orphan)).then_some(()));
    let status = wait_for("the orphan's process to be killed", T, || child.try_wait().unwrap());
    assert!(!status.success());
    // The line is written just after the removal the wait above saw.
    wait_for("the removal's log line", T, || agent.log_text().contains("removed orphaned pod cgroup").then_some(()));
    let records = ferrolet::node::cm::ownership::PodCgroupRecords::new(&sb.state());
    wait_for("the record to go", T, || (!records.contains(&orphan)).then_some(()));
}

#[test]
fn a_process_in_a_pod_cgroup_this_agent_did_not_create_survives_and_is_reported() {
    let sb = Sandbox::new();
    let Some(d) = v1_driver(&sb) else { return };
    // What a cgroupfs kubelet or another agent sharing the root would have: a pod cgroup
    // with a workload in it, and no record in this agent's state dir.
    let foreign = format!("{}/kubepods/besteffort/podfeedfacefeedfacefeedfacefeedface", sb.cgroup_root());
    d.create(&foreign).unwrap();
    let mut child = Command::new("sleep").arg("300").spawn().unwrap();
    for f in d.procs_files(&foreign) {
        std::fs::write(f, child.id().to_string()).unwrap();
    }
    sb.write_manifest(
        "web.yaml",
        &manifest("web", "  containers:\n  - name: app\n    image: x\n    command: [sleep, '60']\n"),
    );
    let agent = AgentProcess::start(&sb);
    let evs = wait_for("the ForeignPodCgroup event", T, || {
        let body = agent.get("/events").unwrap();
        body.contains("ForeignPodCgroup").then_some(body)
    });
    assert!(evs.contains(&format!("Pod cgroup {foreign} was not created by this agent")), "{evs}");
    // Several orphan-cleanup rounds (every sync) later, it is all still there.
    wait_for("web running", T, || agent.pod("web").filter(|p| p.status.as_ref().unwrap().phase == "Running"));
    agent.wait_syncs(7);
    assert!(child.try_wait().unwrap().is_none(), "the foreign workload was killed");
    assert!(d.exists(&foreign));
    let log = agent.log_text();
    // Said once, by the event log (the event's line), not again by the container manager.
    assert_eq!(log.matches("was not created by this agent").count(), 1, "reported once:\n{log}");
    assert_eq!(log.matches("reason=\"ForeignPodCgroup\"").count(), 1, "one event:\n{log}");
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs a second agent from `sb` with its config changed by `edit`; returns its exit status
/// and what it printed (it must exit within 10 s).
fn second_agent(sb: &Sandbox, edit: impl FnOnce(String) -> String) -> (std::process::ExitStatus, String) {
    let cfg = sb.dir.path().join("second.toml");
    std::fs::write(&cfg, edit(sb.config_text(common::free_port()))).unwrap();
    let log = sb.dir.path().join("second.log");
    let mut child = Command::new(common::ferrolet_bin())
        .args(["run", "--config"])
        .arg(&cfg)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let Some(status) = status else {
        // Still running: it started beside the first agent. Stop it before failing.
        let _ = child.kill();
        let _ = child.wait();
        panic!("the second agent started instead of refusing:\n{text}");
    };
    (status, text)
}

#[test]
fn a_second_agent_with_the_same_cgroup_root_or_plugin_dir_refuses_to_start() {
    let first = Sandbox::new();
    let Some(_d) = v1_driver(&first) else { return };
    let agent = AgentProcess::start(&first);
    let second = Sandbox::new();
    let own_root = format!("root = {:?}", second.cgroup_root());
    let (status, err) = second_agent(&second, |t| t.replace(&own_root, &format!("root = {:?}", first.cgroup_root())));
    assert!(!status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "refusing to start beside another agent (give each its own [cgroups] root and [devices] plugin_dir): cgroup root {:?} is in use by another ferrolet (it holds the lock /run/ferrolet/cgroup-root",
            first.cgroup_root()
        )),
        "{err}"
    );
    let own_dir = format!("plugin_dir = {:?}", second.plugin_dir());
    let (status, err) =
        second_agent(&second, |t| t.replace(&own_dir, &format!("plugin_dir = {:?}", first.plugin_dir())));
    assert!(!status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "device plugin directory {} is in use by another ferrolet",
            first.plugin_dir().display()
        )),
        "{err}"
    );
    // The first agent is untouched: its registration socket still answers.
    assert!(std::os::unix::net::UnixStream::connect(first.plugin_dir().join("kubelet.sock")).is_ok());
    assert_eq!(agent.get("/healthz").unwrap(), "ok");
    // With its own root and directory, the second agent runs beside the first.
    let other = AgentProcess::start(&second);
    assert_eq!(other.get("/healthz").unwrap(), "ok");
}

#[test]
fn the_dev_config_keeps_make_run_inside_the_checkout() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/etc/ferrolet-dev.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let cfg = ferrolet::config::Config::parse(path, &text).unwrap();
    let inside = |p: &Path| p.is_relative() && p.components().all(|c| matches!(c, std::path::Component::Normal(_)));
    assert!(inside(&cfg.state_dir), "state_dir {:?}", cfg.state_dir);
    assert!(inside(&cfg.manifest_dir), "manifest_dir {:?}", cfg.manifest_dir);
    assert!(inside(&cfg.devices.plugin_dir), "devices.plugin_dir {:?}", cfg.devices.plugin_dir);
    assert!(cfg.devices.plugin_dir.starts_with(".run"), "{:?}", cfg.devices.plugin_dir);
    // cgroups cannot live in the checkout; a root of its own keeps them apart from a
    // kubelet's (/kubepods) and any other agent's.
    assert_eq!(cfg.cgroups.root, "/ferrolet-dev");
    let listen: std::net::SocketAddr = cfg.api.listen.parse().unwrap();
    assert!(listen.ip().is_loopback(), "{listen}");
}

/// Runs the agent with extra `[cgroups]` settings for a moment; returns what it printed.
fn run_with_config(sb: &Sandbox, extra: &str) -> std::process::Output {
    let port = common::free_port();
    let cfg = sb.dir.path().join("ferrolet.toml");
    std::fs::write(&cfg, format!("{}{extra}", sb.config_text(port))).unwrap();
    let mut child = Command::new(common::ferrolet_bin())
        .args(["run", "--config"])
        .arg(&cfg)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    if child.try_wait().unwrap().is_none() {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    }
    child.wait_with_output().unwrap()
}

#[test]
fn without_cgroup_access_pods_run_unenforced_unless_enforcement_is_required() {
    let sb = Sandbox::new();
    // Mounts that point below /dev/null: nothing can ever be created there.
    let mountinfo = sb.dir.path().join("mountinfo");
    std::fs::write(
        &mountinfo,
        "1 0 0:1 / /dev/null/cpu rw - cgroup cgroup rw,cpu\n2 0 0:2 / /dev/null/memory rw - cgroup cgroup rw,memory\n",
    )
    .unwrap();
    let extra = format!("mountinfo = {mountinfo:?}\n");
    let out = run_with_config(&sb, &extra);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("resource enforcement is off: cannot create cgroup /dev/null/cpu"), "{err}");
    let out = run_with_config(&sb, &format!("{extra}enforcement = \"required\"\n"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("resource enforcement is required (cgroups.enforcement = \"required\") but cgroups cannot be used: cannot create cgroup /dev/null/cpu"), "{err}");
}

#[test]
fn the_systemd_driver_without_systemd_is_a_clear_error_and_auto_picks_cgroupfs_here() {
    if std::path::Path::new("/run/systemd/system").exists() {
        eprintln!("skipped: systemd is the init system here (the systemd driver is tested in tests/vm_systemd.rs)");
        return;
    }
    let sb = Sandbox::new();
    let out = run_with_config(&sb, "driver = \"systemd\"\nenforcement = \"required\"\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(
            "but cgroups cannot be used: systemd: reading the version of systemd: /run/dbus/system_bus_socket"
        ),
        "{err}"
    );
    // Where systemd is not PID 1, auto is cgroupfs.
    let out = run_with_config(&sb, "driver = \"auto\"\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("cm: pod cgroups on cgroup v"), "{err}");
    assert!(!err.contains("systemd"), "{err}");
}

#[test]
fn a_pod_whose_cgroup_cannot_be_created_does_not_start_and_says_why() {
    let sb = Sandbox::new();
    // A fake v1 tree where kubepods and the QoS cgroups have their control files but a new
    // pod cgroup gets none (a plain directory): writing cpu.shares fails like a broken kernel.
    let fake = sb.dir.path().join("cgroupfs");
    let root = sb.cgroup_root();
    let mut mi = String::new();
    for (i, c) in ["cpu", "memory", "pids"].iter().enumerate() {
        mi.push_str(&format!("{i} 0 0:{i} / {} rw - cgroup cgroup rw,{c}\n", fake.join(c).display()));
        for level in ["kubepods", "kubepods/burstable", "kubepods/besteffort"] {
            let d = fake.join(c).join(root.trim_start_matches('/')).join(level);
            std::fs::create_dir_all(&d).unwrap();
            for f in ["cpu.shares", "memory.limit_in_bytes", "pids.max", "cgroup.procs"] {
                std::fs::write(d.join(f), "").unwrap();
            }
        }
    }
    let mountinfo = sb.dir.path().join("mountinfo");
    std::fs::write(&mountinfo, mi).unwrap();
    sb.write_manifest(
        "web.yaml",
        &manifest("web", "  containers:\n  - name: app\n    image: x\n    command: [sleep, '60']\n"),
    );
    let port = common::free_port();
    let cfg = sb.dir.path().join("ferrolet.toml");
    std::fs::write(&cfg, format!("{}mountinfo = {mountinfo:?}\n", sb.config_text(port))).unwrap();
    let child = Command::new(common::ferrolet_bin())
        .args(["run", "--config"])
        .arg(&cfg)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let agent = AgentProcess { child, port, log: sb.dir.path().join("none.log") };
    wait_for("the API", T, || agent.get("/healthz").ok());
    let evs = wait_for("FailedCreatePodContainer", T, || {
        let body = agent.get("/events").unwrap();
        body.contains("FailedCreatePodContainer").then_some(body)
    });
    assert!(evs.contains("unable to ensure pod container exists: cannot write"), "{evs}");
    let pod = agent.pod("web").unwrap();
    let c = container(&pod, "app").unwrap();
    assert!(c.container_id.is_empty(), "the container was never created");
    assert_eq!(c.state.waiting.as_ref().unwrap().reason, "ContainerCreating");
}

#[test]
fn plan_cgroups_prints_the_tree_as_json_without_touching_the_system() {
    let sb = Sandbox::new();
    sb.write_manifest("g.yaml", &manifest("g", "  containers:\n  - name: app\n    image: x\n    command: [sleep, '1']\n    resources:\n      limits: {cpu: '1', memory: 1Gi}\n"));
    let out = Command::new(common::ferrolet_bin())
        .args([
            "plan",
            "cgroups",
            "--node-name",
            "n1",
            "--cpus",
            "3",
            "--memory",
            "8Gi",
            "--system-reserved",
            "cpu=500m,memory=1Gi",
        ])
        .args([
            "--kube-reserved",
            "cpu=500m",
            "--qos-reserved",
            "memory=50%",
            "--cgroup-version",
            "1",
            "--cgroup-root",
            "/edge",
            "-o",
            "json",
        ])
        .arg(sb.manifests().join("g.yaml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["node"]["allocatable"]["cpu"], "2");
    assert_eq!(v["node"]["allocatable"]["memory"], "7Gi");
    let cgroups = v["cgroups"].as_array().unwrap();
    assert_eq!(cgroups[0]["path"], "/edge/kubepods");
    assert_eq!(cgroups[0]["level"], "node");
    assert_eq!(cgroups[0]["files"]["cpu.shares"], "2048");
    let pod = cgroups.iter().find(|c| c["level"] == "pod").unwrap();
    assert!(pod["path"].as_str().unwrap().starts_with("/edge/kubepods/pod"));
    assert_eq!(pod["pod"], "default/g-n1");
    assert_eq!(pod["files"]["cpu.cfs_quota_us"], "100000");
    assert_eq!(pod["files"]["memory.limit_in_bytes"], "1073741824");
    let burstable = cgroups.iter().find(|c| c["path"] == "/edge/kubepods/burstable").unwrap();
    assert_eq!(burstable["files"]["memory.limit_in_bytes"], ((7i64 << 30) - (1 << 29)).to_string());
    let c = cgroups.iter().find(|c| c["level"] == "container").unwrap();
    assert_eq!((c["container"].as_str(), c["files"]["cpu.shares"].as_str()), (Some("app"), Some("1024")));
    let text = Command::new(common::ferrolet_bin())
        .args(["plan", "cgroups", "--cpus", "2", "--memory", "1Gi", "--cgroup-version", "2"])
        .arg(sb.manifests().join("g.yaml"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.starts_with("node: cgroup v2, capacity cpu=2 memory=1Gi"), "{text}");
    assert!(text.contains("    cpu.max = 100000 100000"), "{text}");
}
