//! The security context on the process runtime, end to end: a real `ferrolet run`, real
//! processes whose identity, capabilities and `no_new_privs` are read from `/proc`, and
//! the pods the runtime must refuse (`runAsNonRoot` as root, a seccomp profile it cannot
//! load) waiting with kubelet's reason and message. Switching users needs root: without it
//! each test skips.

use crate::common;

use common::{container, manifest, wait_for, workload_pid, AgentProcess, Sandbox};
use ferrolet::api::{EventList, Pod};
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

fn is_root() -> bool {
    common::root_or_skip("switching a workload's uid and capabilities needs root")
}

/// The `Key:` line of `/proc/<pid>/status`, its value with whitespace collapsed.
/// Whether the test's own directory is on the root filesystem (a write there shows whether
/// a workload's `/` is read-only); skips otherwise.
fn work_on_root_fs(sb: &Sandbox) -> bool {
    use std::os::unix::fs::MetadataExt;
    let same = std::fs::metadata(sb.work()).unwrap().dev() == std::fs::metadata("/").unwrap().dev();
    if !same {
        common::skip("the test directory is not on the root filesystem");
    }
    same
}

fn status_line(pid: i32, key: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = text.lines().find(|l| l.starts_with(&format!("{key}:"))).unwrap_or_else(|| panic!("no {key} in {text}"));
    line[key.len() + 1..].split_whitespace().collect::<Vec<_>>().join(" ")
}

fn capabilities(pid: i32, key: &str) -> u64 {
    u64::from_str_radix(&status_line(pid, key), 16).unwrap()
}

/// The process runtime's default capabilities: containerd's (CHOWN, DAC_OVERRIDE, FOWNER,
/// FSETID, KILL, SETGID, SETUID, SETPCAP, NET_BIND_SERVICE, NET_RAW, SYS_CHROOT, MKNOD,
/// AUDIT_WRITE, SETFCAP: 0xa80425fb) less MKNOD (no device cgroup backs it).
const PROCESS_DEFAULTS: u64 = 0xa80425fb & !(1 << 27);

fn waiting(p: &Pod, name: &str) -> Option<(String, String)> {
    let w = container(p, name)?.state.waiting.as_ref()?;
    Some((w.reason.clone(), w.message.clone()))
}

fn events(agent: &AgentProcess) -> EventList {
    serde_json::from_str(&agent.get("/events").unwrap()).unwrap()
}

#[test]
fn a_pod_running_as_65534_has_that_identity_no_capabilities_and_no_new_privs() {
    if !is_root() {
        return;
    }
    let sb = Sandbox::new();
    sb.write_manifest(
        "ids.yaml",
        &manifest(
            "ids",
            "  securityContext:
    supplementalGroups: [3000]
  containers:
  - name: app
    image: x
    command: [sleep, '3600']
    securityContext:
      runAsUser: 65534
      runAsGroup: 65534
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL]}
  - name: raw
    image: x
    command: [sleep, '3601']
    securityContext:
      capabilities: {drop: [NET_RAW]}
",
        ),
    );
    let agent = AgentProcess::start(&sb);
    let pod = wait_for("both containers running", T, || {
        agent
            .pod("ids")
            .filter(|p| ["app", "raw"].iter().all(|c| container(p, c).is_some_and(|s| s.state.running.is_some())))
    });
    let pid = |name: &str| workload_pid(&sb.state(), &container(&pod, name).unwrap().container_id).unwrap();

    let app = pid("app");
    assert_eq!(status_line(app, "Uid"), "65534 65534 65534 65534");
    assert_eq!(status_line(app, "Gid"), "65534 65534 65534 65534");
    assert_eq!(status_line(app, "Groups"), "3000 65534", "the gid and the pod's supplemental group, nothing of root's");
    assert_eq!(capabilities(app, "CapEff"), 0);
    assert_eq!(capabilities(app, "CapPrm"), 0);
    assert_eq!(capabilities(app, "CapBnd"), 0, "drop: [ALL] empties the bounding set");
    assert_eq!(status_line(app, "NoNewPrivs"), "1");

    // Root with one capability dropped from containerd's default set: the rest of that set
    // stays, and that one is gone for good.
    let raw = pid("raw");
    assert_eq!(status_line(raw, "Uid"), "0 0 0 0");
    let net_raw = 1u64 << 13;
    assert_eq!(capabilities(raw, "CapEff") & net_raw, 0);
    assert_eq!(capabilities(raw, "CapBnd") & net_raw, 0);
    assert_eq!(capabilities(raw, "CapBnd"), PROCESS_DEFAULTS & !net_raw);
    assert_eq!(status_line(raw, "NoNewPrivs"), "0");

    // A command exec'd into the container runs as it does.
    let config = sb.dir.path().join("ferrolet.toml");
    let out = Command::new(common::ferrolet_bin())
        .args(["exec", "ids-testnode", "-c", "app", "--config", config.to_str().unwrap(), "--", "sh", "-c"])
        .arg("id -u; id -G; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<String> = text.lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
    assert_eq!(lines, ["65534", "65534 3000", "CapEff: 0000000000000000", "NoNewPrivs: 1"]);
}

#[test]
fn run_as_non_root_refuses_root_with_kubelets_message_once_and_without_a_restart_loop() {
    if !is_root() {
        return;
    }
    let sb = Sandbox::new();
    sb.write_manifest(
        "nonroot.yaml",
        &manifest(
            "nonroot",
            "  securityContext:
    runAsNonRoot: true
  containers:
  - name: zero
    image: x
    command: [sleep, '3600']
    securityContext: {runAsUser: 0}
  - name: agentuser
    image: x
    command: [sleep, '3601']
  - name: nobody
    image: x
    command: [sleep, '3602']
    securityContext: {runAsUser: 65534}
",
        ),
    );
    let agent = AgentProcess::start(&sb);
    let pod = wait_for("two containers refused and one running", T, || {
        agent.pod("nonroot").filter(|p| {
            waiting(p, "zero").is_some_and(|w| w.0 == "CreateContainerConfigError")
                && waiting(p, "agentuser").is_some_and(|w| w.0 == "CreateContainerConfigError")
                && container(p, "nobody").is_some_and(|c| c.state.running.is_some())
        })
    });
    let who = |c: &str| format!("(pod: \"nonroot-testnode_default({})\", container: {c})", pod.metadata.uid);
    assert_eq!(
        waiting(&pod, "zero").unwrap().1,
        format!("container's runAsUser breaks non-root policy {}", who("zero"))
    );
    assert_eq!(
        waiting(&pod, "agentuser").unwrap().1,
        format!("container has runAsNonRoot and image will run as root {}", who("agentuser")),
        "without runAsUser a process-runtime container runs as the agent (root here)"
    );
    assert_eq!(container(&pod, "zero").unwrap().container_id, "", "nothing was created");

    // Retried at every sync but said once: one Failed event per container, count 1.
    agent.wait_syncs(10);
    let failed: Vec<_> = events(&agent)
        .items
        .into_iter()
        .filter(|e| e.reason == "Failed" && e.involved_object.field_path == "spec.containers{zero}")
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].type_, "Warning");
    assert_eq!(failed[0].count, 1);
    assert_eq!(failed[0].message, format!("Error: container's runAsUser breaks non-root policy {}", who("zero")));
    let pod = agent.pod("nonroot").unwrap();
    assert_eq!(container(&pod, "zero").unwrap().restart_count, 0);
}

#[test]
fn a_seccomp_profile_the_process_runtime_cannot_load_is_refused_naming_the_field() {
    if !is_root() {
        return;
    }
    let sb = Sandbox::new();
    sb.write_manifest(
        "seccomp.yaml",
        &manifest(
            "seccomp",
            "  containers:
  - name: app
    image: x
    command: [sleep, '3600']
    securityContext:
      seccompProfile: {type: Localhost, localhostProfile: profiles/audit.json}
",
        ),
    );
    let agent = AgentProcess::start(&sb);
    let pod = wait_for("the container refused", T, || {
        agent.pod("seccomp").filter(|p| waiting(p, "app").is_some_and(|w| w.0 == "CreateContainerConfigError"))
    });
    let message = waiting(&pod, "app").unwrap().1;
    assert_eq!(
        message,
        "the process runtime cannot honour securityContext.seccompProfile Localhost (profiles/audit.json) (it loads no seccomp filter)"
    );
    let failed = events(&agent).items.into_iter().find(|e| e.reason == "Failed").expect("a Failed event");
    assert_eq!((failed.type_.as_str(), failed.message.as_str()), ("Warning", format!("Error: {message}").as_str()));
    let dir = sb.state().join("runtime/containers");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "no container record was made");
}

#[test]
fn a_read_only_root_filesystem_cannot_be_written_by_the_workload_and_the_host_stays_writable() {
    if !is_root() {
        return;
    }
    let sb = Sandbox::new();
    // The test's own directory is on the root filesystem here (checked below): a write there
    // shows whether the workload's `/` is read-only.
    let target = sb.work().join("written-by-the-workload");
    if !work_on_root_fs(&sb) {
        return;
    }
    let script = format!(
        "if touch {t} 2>/dev/null; then echo WROTE; else echo READ-ONLY; fi; exec sleep 3600",
        t = target.display()
    );
    sb.write_manifest(
        "ro.yaml",
        &manifest(
            "ro",
            &format!(
                "  containers:\n  - name: app\n    image: x\n    command: [sh, -c, '{script}']\n    securityContext: {{readOnlyRootFilesystem: true}}\n"
            ),
        ),
    );
    let agent = AgentProcess::start(&sb);
    let pod = wait_for("ro running", T, || {
        agent.pod("ro").filter(|p| container(p, "app").is_some_and(|c| c.state.running.is_some()))
    });
    let log = sb.state().join("logs").join(format!("default_ro-testnode_{}", pod.metadata.uid)).join("app/0.log");
    let line = wait_for("the workload's verdict", T, || std::fs::read_to_string(&log).ok().filter(|t| !t.is_empty()));
    assert!(line.contains(" stdout F READ-ONLY"), "{line}");
    assert!(!target.exists());
    // Only the workload's view is read-only: the host writes there as before.
    std::fs::write(&target, "host").unwrap();
}

/// What a root workload with the default security context could once do to the node: remount
/// its read-only `/` read-write, write through `/proc/1/root` or `/proc/$PPID/root`, see the
/// node's processes. Now it has containerd's capabilities and a PID namespace of its own.
#[test]
fn a_root_workload_cannot_undo_its_read_only_root_nor_see_the_nodes_processes() {
    if !is_root() {
        return;
    }
    let sb = Sandbox::new();
    let target = sb.work().join("written-by-the-workload");
    let t = target.display();
    if !work_on_root_fs(&sb) {
        return;
    }
    let script = format!(
        "mount -o remount,rw / 2>/dev/null && echo REMOUNTED; \
         touch {t} 2>/dev/null && echo WROTE; \
         touch /proc/1/root{t} 2>/dev/null && echo WROTE-PID1; \
         touch /proc/$PPID/root{t} 2>/dev/null && echo WROTE-PPID; \
         echo pid=$$$$ procs=$(ls /proc | grep -c ^[0-9]); exec sleep 3600"
    );
    sb.write_manifest(
        "ro.yaml",
        &manifest(
            "ro",
            &format!(
                "  containers:\n  - name: app\n    image: x\n    command: [sh, -c, '{script}']\n    securityContext: {{readOnlyRootFilesystem: true}}\n  - name: host\n    image: x\n    command: [sh, -c, 'echo procs=$(ls /proc | grep -c ^[0-9]); exec sleep 3600']\n"
            ),
        ),
    );
    let agent = AgentProcess::start(&sb);
    let pod = wait_for("ro running", T, || {
        agent
            .pod("ro")
            .filter(|p| ["app", "host"].iter().all(|c| container(p, c).is_some_and(|s| s.state.running.is_some())))
    });
    let log = |c: &str| {
        sb.state().join("logs").join(format!("default_ro-testnode_{}", pod.metadata.uid)).join(format!("{c}/0.log"))
    };
    let text = wait_for("the workload's verdict", T, || {
        std::fs::read_to_string(log("app")).ok().filter(|t| t.contains("pid="))
    });
    assert!(!text.contains("WROTE") && !text.contains("REMOUNTED"), "{text}");
    assert!(!target.exists());
    // PID 1 is its reaper, the workload PID 2; with its command substitution, ls and grep
    // that is all it sees.
    assert!(text.contains(" stdout F pid=2 procs="), "{text}");
    let procs: usize = text.split("procs=").nth(1).unwrap().trim().parse().unwrap();
    assert!(procs <= 6, "{procs} processes visible: {text}");
    let pid = workload_pid(&sb.state(), &container(&pod, "app").unwrap().container_id).unwrap();
    assert_eq!(capabilities(pid, "CapBnd"), PROCESS_DEFAULTS, "containerd's set less MKNOD, without SYS_ADMIN");
    // Its SIGTERM ends it at once (the workload is not PID 1, which would ignore it).
    std::fs::remove_file(sb.manifests().join("ro.yaml")).unwrap();
    wait_for("ro gone within its 30 s grace period", Duration::from_secs(15), || {
        agent.pod("ro").is_none().then_some(())
    });
}

#[test]
fn a_host_pid_pod_sees_the_nodes_processes_and_a_shared_process_namespace_is_refused() {
    if !is_root() {
        return;
    }
    let sb = Sandbox::new();
    sb.write_manifest(
        "hostpid.yaml",
        &manifest(
            "hostpid",
            "  hostPID: true\n  containers:\n  - name: app\n    image: x\n    command: [sh, -c, 'echo procs=$(ls /proc | grep -c ^[0-9]); exec sleep 3600']\n",
        ),
    );
    sb.write_manifest(
        "shared.yaml",
        &manifest(
            "shared",
            "  shareProcessNamespace: true\n  containers:\n  - name: app\n    image: x\n    command: [sleep, '3600']\n",
        ),
    );
    let agent = AgentProcess::start(&sb);
    let pod = wait_for("hostpid running", T, || {
        agent.pod("hostpid").filter(|p| container(p, "app").is_some_and(|c| c.state.running.is_some()))
    });
    let log = sb.state().join("logs").join(format!("default_hostpid-testnode_{}", pod.metadata.uid)).join("app/0.log");
    let text = wait_for("its count", T, || std::fs::read_to_string(&log).ok().filter(|t| t.contains("procs=")));
    let procs: usize = text.split("procs=").nth(1).unwrap().trim().parse().unwrap();
    assert!(procs > 10, "the node's processes: {text}");
    let (reason, message) = wait_for("shared refused", T, || agent.pod("shared").and_then(|p| waiting(&p, "app")));
    assert_eq!(reason, "CreateContainerConfigError");
    assert!(message.contains("spec.shareProcessNamespace"), "{message}");
}
