//! The security context on the CRI runtime, end to end: `ferrolet run` with `runtime =
//! "cri"` against the real containerd of `tests/cri/up.sh`, the container processes'
//! identity, capabilities, `no_new_privs`, namespaces and sysctls read from `/proc`, a
//! read-only root filesystem seen by the workload, and `runAsNonRoot` against busybox (whose
//! image runs as root). Without the harness each test skips with the reason.

use crate::common;

use common::cri::{busybox, CriNode};
use common::{container, manifest, wait_for, AgentProcess};
use ferrolet::api::Pod;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn wait_pod(node: &CriNode, agent: &AgentProcess, name: &str, what: &str, ok: impl Fn(&Pod) -> bool) -> Pod {
    wait_for(what, WAIT, || node.pod(agent, name).filter(|p| ok(p)))
}

fn running(p: &Pod, names: &[&str]) -> bool {
    names.iter().all(|n| container(p, n).is_some_and(|c| c.state.running.is_some()))
}

/// The pid of container `name`'s process, from its cgroup (CRI reports no pid).
fn pid(node: &CriNode, p: &Pod, name: &str) -> i32 {
    let id = container(p, name).unwrap().container_id.rsplit("://").next().unwrap().to_string();
    let procs = node.cgroup_dir("memory", &format!("kubepods/besteffort/pod{}/{id}/cgroup.procs", p.metadata.uid));
    let text = std::fs::read_to_string(&procs).unwrap_or_else(|e| panic!("{}: {e}", procs.display()));
    text.lines().next().unwrap_or_else(|| panic!("container {name} has no process")).parse().unwrap()
}

fn status_line(pid: i32, key: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = text.lines().find(|l| l.starts_with(&format!("{key}:"))).unwrap();
    line[key.len() + 1..].split_whitespace().collect::<Vec<_>>().join(" ")
}

fn capabilities(pid: i32, key: &str) -> u64 {
    u64::from_str_radix(&status_line(pid, key), 16).unwrap()
}

fn pid_namespace(pid: &str) -> std::path::PathBuf {
    std::fs::read_link(format!("/proc/{pid}/ns/pid")).unwrap()
}

/// What container `name` of pod `p` wrote to its first log, without the CRI prefixes.
fn log(node: &CriNode, p: &Pod, name: &str) -> String {
    let file = node.pod_logs().join(format!("default_{}_{}", p.metadata.name, p.metadata.uid)).join(name).join("0.log");
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    text.lines().filter_map(|l| l.splitn(4, ' ').nth(3)).collect::<Vec<_>>().join("\n")
}

#[test]
fn a_cri_pod_runs_with_its_ids_capabilities_no_new_privs_read_only_root_and_sysctls() {
    let Some(node) = CriNode::new() else { return };
    let image = busybox();
    let probe = "touch /x 2>/dev/null && echo root-writable || echo root-read-only; cat /proc/sys/kernel/shm_rmid_forced; exec sleep 3600";
    node.sb.write_manifest(
        "sec.yaml",
        &manifest(
            "sec",
            &format!(
                "  hostNetwork: true
  securityContext:
    runAsUser: 65534
    runAsGroup: 65534
    supplementalGroups: [3000]
    sysctls: [{{name: kernel.shm_rmid_forced, value: '1'}}]
  containers:
  - name: app
    image: {image}
    imagePullPolicy: IfNotPresent
    command: [sleep, '3600']
    securityContext:
      allowPrivilegeEscalation: false
      capabilities: {{drop: [ALL]}}
  - name: ro
    image: {image}
    imagePullPolicy: IfNotPresent
    command: [sh, -c, '{probe}']
    securityContext:
      runAsUser: 0
      readOnlyRootFilesystem: true
      capabilities: {{drop: [NET_RAW]}}
  - name: rw
    image: {image}
    imagePullPolicy: IfNotPresent
    command: [sh, -c, '{probe}']
    securityContext: {{runAsUser: 0}}
"
            ),
        ),
    );
    let agent = node.start();
    let p = wait_pod(&node, &agent, "sec", "every container of pod sec running", |p| running(p, &["app", "ro", "rw"]));
    node.own(&p.metadata.uid);

    let app = pid(&node, &p, "app");
    assert_eq!(status_line(app, "Uid"), "65534 65534 65534 65534");
    assert_eq!(status_line(app, "Gid"), "65534 65534 65534 65534");
    assert!(status_line(app, "Groups").split(' ').any(|g| g == "3000"), "{}", status_line(app, "Groups"));
    assert_eq!(capabilities(app, "CapEff"), 0);
    assert_eq!(capabilities(app, "CapBnd"), 0, "drop: [ALL]");
    assert_eq!(status_line(app, "NoNewPrivs"), "1");

    let ro = pid(&node, &p, "ro");
    assert_eq!(status_line(ro, "Uid"), "0 0 0 0", "the container's runAsUser overrides the pod's");
    assert_eq!(capabilities(ro, "CapEff") & (1 << 13), 0, "NET_RAW dropped");
    assert_ne!(capabilities(ro, "CapEff"), 0, "the runtime's other defaults stay");
    assert_eq!(status_line(ro, "NoNewPrivs"), "0");
    // Each container its own PID namespace (kubelet's default), none the host's.
    assert_ne!(pid_namespace(&ro.to_string()), pid_namespace("self"));
    assert_ne!(pid_namespace(&ro.to_string()), pid_namespace(&app.to_string()));

    let said = |name: &str| {
        wait_for("the container's log", WAIT, || Some(log(&node, &p, name)).filter(|l| l.lines().count() >= 2))
    };
    assert_eq!(said("ro"), "root-read-only\n1", "readOnlyRootFilesystem, and the pod's sysctl in its IPC namespace");
    assert_eq!(said("rw"), "root-writable\n1");
}

#[test]
fn a_host_pid_pod_shares_the_hosts_pid_namespace_and_share_process_namespace_shares_the_pods() {
    let Some(node) = CriNode::new() else { return };
    let image = busybox();
    let pod = |name: &str, field: &str| {
        manifest(
            name,
            &format!(
                "  hostNetwork: true
  {field}: true
  containers:
  - name: a
    image: {image}
    imagePullPolicy: IfNotPresent
    command: [sleep, '3600']
  - name: b
    image: {image}
    imagePullPolicy: IfNotPresent
    command: [sleep, '3601']
"
            ),
        )
    };
    node.sb.write_manifest("hostpid.yaml", &pod("hostpid", "hostPID"));
    node.sb.write_manifest("shared.yaml", &pod("shared", "shareProcessNamespace"));
    let agent = node.start();
    let host = wait_pod(&node, &agent, "hostpid", "pod hostpid running", |p| running(p, &["a", "b"]));
    node.own(&host.metadata.uid);
    let shared = wait_pod(&node, &agent, "shared", "pod shared running", |p| running(p, &["a", "b"]));
    node.own(&shared.metadata.uid);
    let ns = |p: &Pod, c: &str| pid_namespace(&pid(&node, p, c).to_string());
    assert_eq!(ns(&host, "a"), pid_namespace("self"), "hostPID: the node's PID namespace");
    assert_eq!(ns(&host, "b"), pid_namespace("self"));
    assert_eq!(ns(&shared, "a"), ns(&shared, "b"), "shareProcessNamespace: one namespace for the pod");
    assert_ne!(ns(&shared, "a"), pid_namespace("self"));
}

#[test]
fn run_as_non_root_refuses_busybox_which_runs_as_root() {
    let Some(node) = CriNode::new() else { return };
    node.sb.write_manifest(
        "nonroot.yaml",
        &manifest(
            "nonroot",
            &format!(
                "  hostNetwork: true
  securityContext: {{runAsNonRoot: true}}
  containers:
  - name: app
    image: {}
    imagePullPolicy: IfNotPresent
    command: [sleep, '3600']
",
                busybox()
            ),
        ),
    );
    let agent = node.start();
    let p = wait_pod(&node, &agent, "nonroot", "container app refused", |p| {
        container(p, "app")
            .and_then(|c| c.state.waiting.as_ref())
            .is_some_and(|w| w.reason == "CreateContainerConfigError")
    });
    node.own(&p.metadata.uid);
    let w = container(&p, "app").unwrap().state.waiting.clone().unwrap();
    assert_eq!(
        w.message,
        format!("container has runAsNonRoot and image will run as root (pod: \"{}\", container: app)", p.desc())
    );
    assert!(node.containers(&p.metadata.uid).is_empty(), "no container was created");
}
