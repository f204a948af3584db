//! The eviction manager for real, on a node made small on purpose: memory (the `kubepods`
//! cgroup limited by `kube_reserved`, so a few hundred MiB is the whole node), disk (the state
//! directory on a small tmpfs, so an `emptyDir` fills `nodefs`), and process ids (a
//! threshold just below what the node has free). Each evicts the right pod before the kernel
//! acts, with kubelet's reason, message, event and node condition.

use crate::common;

use common::{container, manifest, wait_for, with_eviction, AgentProcess, Sandbox};
use ferrolet::api::{Node, Pod, PodPhase};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(30);

fn mem_total() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let line = text.lines().find(|l| l.starts_with("MemTotal:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// Whether the test can make memory cgroups (root on a v1 host).
fn cgroups_or_skip(sb: &Sandbox) -> bool {
    use ferrolet::node::cm::cgroupfs::{detect, CgroupVersion};
    let d = match detect(Path::new("/proc/self/mountinfo"), Some(CgroupVersion::V1)) {
        Ok(d) => d,
        Err(e) => {
            common::skip(&format!("no cgroup v1 here: {}", ferrolet::base::errors::Chain(&e)));
            return false;
        }
    };
    let probe = format!("{}/probe", sb.cgroup_root());
    if let Err(e) = d.create(&probe) {
        common::skip(&format!("cannot create cgroups (needs root): {}", ferrolet::base::errors::Chain(&e)));
        return false;
    }
    let _ = d.destroy(&probe);
    true
}

fn node(agent: &AgentProcess) -> Node {
    serde_json::from_str(&agent.get("/node").unwrap()).unwrap()
}

fn condition(agent: &AgentProcess, type_: &str) -> (String, String) {
    let n = node(agent);
    let c = n.status.conditions.iter().find(|c| c.type_ == type_).unwrap();
    (c.status.clone(), c.reason.clone())
}

fn evicted(agent: &AgentProcess, name: &str, timeout: Duration) -> Pod {
    agent.pod_where(name, "evicted", timeout, |p| {
        p.status.as_ref().is_some_and(|s| s.phase == PodPhase::Failed && s.reason == "Evicted")
    })
}

fn status_message(p: &Pod) -> String {
    p.status.as_ref().unwrap().message.clone()
}

fn oom_kills(dir: &Path) -> u64 {
    let text = std::fs::read_to_string(dir.join("memory.oom_control")).unwrap_or_default();
    text.lines().find_map(|l| l.strip_prefix("oom_kill ")).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
}

/// A pod that writes `step_mib` MiB every 200 ms into a Memory `emptyDir` (a tmpfs: the
/// pages count in its cgroup's working set) up to `max_mib`, then sleeps.
fn filler(name: &str, resources: &str, step_mib: u32, max_mib: u32) -> String {
    manifest(
        name,
        &format!(
            "  terminationGracePeriodSeconds: 1\n  volumes:\n  - {{name: mem, emptyDir: {{medium: Memory, sizeLimit: 2Gi}}}}\n  containers:\n  - name: {name}\n    image: x\n{resources}    volumeMounts: [{{name: mem, mountPath: /mnt/mem}}]\n    command: [sh, -c, 'i=0; while [ $i -lt {n} ]; do head -c {step} /dev/zero > /mnt/mem/f$i; i=$((i+1)); sleep 0.2; done; exec sleep 3600']\n",
            n = max_mib / step_mib,
            step = (step_mib as u64) << 20,
        ),
    )
}

#[test]
fn a_best_effort_pod_filling_memory_is_evicted_before_a_guaranteed_one_and_before_any_oom_kill() {
    let sb = Sandbox::new();
    if !cgroups_or_skip(&sb) {
        return;
    }
    // 600 MiB for pods (the kubepods limit), 500 MiB allocatable, evicting below 100 MiB
    // available: from a 400 MiB working set on.
    let reserved = mem_total() - (600 << 20);
    sb.write_manifest(
        "guaranteed.yaml",
        &filler("steady", "    resources: {limits: {memory: 64Mi, cpu: 100m}}\n", 8, 16),
    );
    sb.write_manifest("hog.yaml", &filler("hog", "", 5, 560));
    let agent = AgentProcess::start_with(&sb, |t| {
        let t = t.replace("[cgroups]\n", &format!("[cgroups]\nkube_reserved = {{ memory = \"{reserved}\" }}\n"));
        with_eviction(&t, "hard = { \"memory.available\" = \"150Mi\" }\npressure_transition_period = \"5s\"\n")
    });
    agent.running("steady", T);
    let started = Instant::now();
    let hog = evicted(&agent, "hog", Duration::from_secs(90));
    let took = started.elapsed();
    let message = status_message(&hog);
    assert!(
        message.starts_with("The node was low on resource: memory. Threshold quantity: 150Mi, available: "),
        "{message}"
    );
    assert!(message.contains("Container hog was using "), "{message}");
    assert!(message.contains(", request is 0, has larger consumption of memory. "), "{message}");
    let dt = hog.status.as_ref().unwrap().conditions.iter().find(|c| c.type_ == "DisruptionTarget").cloned();
    assert_eq!(dt.map(|c| (c.status, c.reason)), Some(("True".into(), "TerminationByKubelet".into())));
    // MemoryPressure went True while the threshold was met.
    agent.events_where("Evicted, EvictionThresholdMet and NodeHasInsufficientMemory events", |e| {
        ["Evicted", "EvictionThresholdMet", "NodeHasInsufficientMemory"].iter().all(|r| e.contains(&format!("\"{r}\"")))
    });
    // The Guaranteed pod runs on, untouched.
    let steady = agent.running("steady", T);
    assert_eq!(container(&steady, "steady").unwrap().restart_count, 0);
    // Nothing under kubepods was OOM-killed.
    let kubepods = PathBuf::from(format!("/sys/fs/cgroup/memory{}/kubepods", sb.cgroup_root()));
    assert_eq!(oom_kills(&kubepods), 0, "the kernel's OOM killer acted in {}", kubepods.display());
    // MemoryPressure False once the threshold has not been met for the transition period.
    wait_for("MemoryPressure to clear", Duration::from_secs(30), || {
        (condition(&agent, "MemoryPressure") == ("False".into(), "KubeletHasSufficientMemory".into())).then_some(())
    });
    agent.events_where("NodeHasSufficientMemory event", |e| e.contains("\"NodeHasSufficientMemory\""));
    eprintln!("eviction took {took:?} from the hog's start");
}

#[test]
fn an_empty_dir_filling_a_small_nodefs_evicts_its_pod_and_its_directory_goes() {
    let sb = Sandbox::new();
    if !common::root_or_skip("mounting a tmpfs for the state directory needs root") {
        return;
    }
    let state = sb.state();
    std::fs::create_dir_all(&state).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64m", "ferrolet-test-nodefs"])
        .arg(&state)
        .status()
        .unwrap();
    assert!(mounted.success());
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(state.clone());
    sb.write_manifest(
        "quiet.yaml",
        &manifest("quiet", "  containers:\n  - name: quiet\n    image: x\n    command: [sleep, '3600']\n"),
    );
    sb.write_manifest(
        "filler.yaml",
        &manifest(
            "disk",
            "  terminationGracePeriodSeconds: 1\n  volumes:\n  - {name: scratch, emptyDir: {}}\n  containers:\n  - name: disk\n    image: x\n    volumeMounts: [{name: scratch, mountPath: /scratch}]\n    command: [sh, -c, 'i=0; while [ $i -lt 12 ]; do head -c 4194304 /dev/zero > /scratch/f$i; i=$((i+1)); sleep 0.5; done; exec sleep 3600']\n",
        ),
    );
    let agent = AgentProcess::start_with(&sb, |t| {
        with_eviction(&t, "hard = { \"nodefs.available\" = \"30%\" }\npressure_transition_period = \"5s\"\n")
    });
    agent.running("quiet", T);
    let disk = evicted(&agent, "disk", Duration::from_secs(90));
    let message = status_message(&disk);
    assert!(message.starts_with("The node was low on resource: ephemeral-storage. Threshold quantity: "), "{message}");
    let uid = disk.metadata.uid.clone();
    wait_for("the evicted pod's directory to go", T, || (!state.join("pods").join(&uid).exists()).then_some(()));
    assert_eq!(condition(&agent, "DiskPressure").0, "True", "until the transition period has passed");
    wait_for("DiskPressure to clear", Duration::from_secs(30), || {
        (condition(&agent, "DiskPressure") == ("False".into(), "KubeletHasNoDiskPressure".into())).then_some(())
    });
    let quiet = agent.running("quiet", T);
    assert_eq!(container(&quiet, "quiet").unwrap().restart_count, 0);
    drop(agent);
}

/// Process ids the node has free now, as kubelet counts them.
fn pids_available() -> u64 {
    let read = |p: &str| std::fs::read_to_string(p).unwrap().trim().parse::<u64>().unwrap();
    let max = read("/proc/sys/kernel/pid_max").min(read("/proc/sys/kernel/threads-max"));
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap();
    let running: u64 = loadavg.split_whitespace().nth(3).unwrap().split('/').nth(1).unwrap().parse().unwrap();
    max - running
}

#[test]
fn a_pod_forking_past_pid_available_is_evicted() {
    let sb = Sandbox::new();
    if !cgroups_or_skip(&sb) {
        return;
    }
    sb.write_manifest(
        "quiet.yaml",
        &manifest("quiet", "  containers:\n  - name: quiet\n    image: x\n    command: [sleep, '3600']\n"),
    );
    sb.write_manifest(
        "bomb.yaml",
        &manifest(
            "bomb",
            "  terminationGracePeriodSeconds: 1\n  containers:\n  - name: bomb\n    image: x\n    command: [sh, -c, 'i=0; while [ $i -lt 2500 ]; do sleep 600 & i=$((i+1)); done; wait']\n",
        ),
    );
    // Pressure once the node has 1500 fewer process ids free than now; the bomb takes 2500,
    // within its pod's own limit of 3000.
    let threshold = pids_available() - 1500;
    let agent = AgentProcess::start_with(&sb, |t| {
        let t = t.replace("[cgroups]\n", "[cgroups]\npod_pids_limit = 3000\n");
        with_eviction(
            &t,
            &format!("hard = {{ \"pid.available\" = \"{threshold}\" }}\npressure_transition_period = \"5s\"\n"),
        )
    });
    let bomb = evicted(&agent, "bomb", Duration::from_secs(90));
    let message = status_message(&bomb);
    assert!(message.starts_with("The node was low on resource: pids. Threshold quantity: "), "{message}");
    let quiet = agent.running("quiet", T);
    assert_eq!(container(&quiet, "quiet").unwrap().restart_count, 0);
    wait_for("PIDPressure to clear", Duration::from_secs(40), || {
        (condition(&agent, "PIDPressure").0 == "False").then_some(())
    });
}

#[test]
fn on_containerd_a_best_effort_pod_filling_memory_is_evicted_and_a_guaranteed_one_runs_on() {
    let Some(node) = common::cri::CriNode::new() else { return };
    let image = common::cri::busybox();
    let reserved = mem_total() - (600 << 20);
    let on_image = |m: String| m.replace("image: x", &format!("image: {image}"));
    node.sb.write_manifest(
        "guaranteed.yaml",
        &on_image(filler("steady", "    resources: {limits: {memory: 64Mi, cpu: 100m}}\n", 8, 16)),
    );
    node.sb.write_manifest("hog.yaml", &on_image(filler("hog", "", 5, 560)));
    let agent = node.start_with(
        |t| {
            let t = t.replace("[cgroups]\n", &format!("[cgroups]\nkube_reserved = {{ memory = \"{reserved}\" }}\n"));
            with_eviction(&t, "hard = { \"memory.available\" = \"150Mi\" }\npressure_transition_period = \"5s\"\n")
        },
        "debug",
    );
    let pod = |name: &str, what: &str, ok: &dyn Fn(&Pod) -> bool| {
        wait_for(what, Duration::from_secs(120), || node.pod(&agent, name).filter(|p| ok(p)))
    };
    pod("steady", "steady running", &|p| container(p, "steady").is_some_and(|c| c.state.running.is_some()));
    let hog = pod("hog", "hog evicted", &|p| {
        p.status.as_ref().is_some_and(|s| s.phase == PodPhase::Failed && s.reason == "Evicted")
    });
    let message = status_message(&hog);
    assert!(message.starts_with("The node was low on resource: memory. "), "{message}");
    assert!(message.contains("Container hog was using "), "{message}");
    let steady = node.pod(&agent, "steady").unwrap();
    let c = container(&steady, "steady").unwrap();
    assert!(c.state.running.is_some() && c.restart_count == 0, "{c:?}");
    let kubepods = PathBuf::from(format!("/sys/fs/cgroup/memory{}/kubepods", node.cgroup_root));
    assert_eq!(oom_kills(&kubepods), 0, "the kernel's OOM killer acted in {}", kubepods.display());
}

#[test]
fn a_pod_writing_past_its_empty_dirs_size_limit_is_evicted_with_kubelets_message() {
    let sb = Sandbox::new();
    sb.write_manifest(
        "limited.yaml",
        &manifest(
            "limited",
            "  terminationGracePeriodSeconds: 1\n  volumes:\n  - {name: scratch, emptyDir: {sizeLimit: 4Mi}}\n  containers:\n  - name: limited\n    image: x\n    volumeMounts: [{name: scratch, mountPath: /scratch}]\n    command: [sh, -c, 'head -c 8388608 /dev/zero > /scratch/f; exec sleep 3600']\n",
        ),
    );
    let agent = AgentProcess::start(&sb);
    let pod = evicted(&agent, "limited", Duration::from_secs(60));
    assert_eq!(status_message(&pod), "Usage of EmptyDir volume \"scratch\" exceeds the limit \"4Mi\". ");
    let uid = pod.metadata.uid.clone();
    wait_for("its directory to go", T, || (!sb.state().join("pods").join(&uid).exists()).then_some(()));
}
