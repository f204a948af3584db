//! Volumes on the CRI runtime, end to end: `ferrolet run` with `runtime = "cri"` against the
//! real containerd of `tests/cri/up.sh`. A busybox container with a read-only root writes
//! to its `emptyDir` and memory-backed `emptyDir` (a tmpfs of its `sizeLimit`), reads its
//! downward API files and a read-only `hostPath`, writes through a `subPathExpr`; a
//! `hostPath` whose type does not match fails the mount with kubelet's message; the pod's
//! directory goes with the pod. Without the harness each test skips with the reason.

use crate::common;

use common::cri::{busybox, CriNode};
use common::{container, manifest, wait_for, AgentProcess};
use ferrolet::api::{EventList, Pod};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

/// What container `name` of pod `p` wrote to its first log, without the CRI prefixes, once
/// it wrote `last`.
fn output(node: &CriNode, p: &Pod, name: &str, last: &str) -> String {
    let file = node.pod_logs().join(format!("default_{}_{}", p.metadata.name, p.metadata.uid)).join(name).join("0.log");
    wait_for("the container's output", WAIT, || {
        let text = std::fs::read_to_string(&file).ok()?;
        let lines: Vec<&str> = text.lines().filter_map(|l| l.splitn(4, ' ').nth(3)).collect();
        lines.contains(&last).then(|| lines.join("\n"))
    })
}

#[test]
fn a_cri_pod_writes_its_volumes_beside_a_read_only_root_and_they_go_with_it() {
    let Some(node) = CriNode::new() else { return };
    let image = busybox();
    let host = node.sb.work().join("hostsrc");
    std::fs::create_dir(&host).unwrap();
    std::fs::write(host.join("given"), "from the node").unwrap();
    let script = [
        "echo hi > /data/f && echo data-writable",
        "touch /on-root 2>/dev/null && echo root-writable || echo root-read-only",
        "echo small > /cache/small && echo cache-writable",
        "{ head -c 2000000 /dev/zero > /cache/big; } 2>/dev/null && echo cache-unbounded || echo cache-full",
        "echo name=$(cat /etc/podinfo/name)",
        "echo cpu=$(cat /etc/podinfo/cpu)",
        "touch /etc/podinfo/x 2>/dev/null && echo info-writable || echo info-read-only",
        "cat /host/given; echo",
        "touch /host/x 2>/dev/null && echo host-writable || echo host-read-only",
        "echo s > /sub/f && echo sub-writable",
        "echo done",
        "exec sleep 3600",
    ]
    .join("\n      ");
    node.sb.write_manifest(
        "vol.yaml",
        &manifest(
            "vol",
            &format!(
                "  terminationGracePeriodSeconds: 1
  securityContext: {{runAsUser: 65534, runAsGroup: 65534, fsGroup: 3000}}
  volumes:
  - {{name: data, emptyDir: {{}}}}
  - {{name: cache, emptyDir: {{medium: Memory, sizeLimit: 1Mi}}}}
  - {{name: host, hostPath: {{path: {host}, type: Directory}}}}
  - name: info
    projected:
      sources:
      - downwardAPI:
          items:
          - {{path: name, fieldRef: {{fieldPath: metadata.name}}}}
          - {{path: cpu, resourceFieldRef: {{containerName: app, resource: limits.cpu, divisor: 1m}}}}
  containers:
  - name: app
    image: {image}
    imagePullPolicy: IfNotPresent
    command:
    - sh
    - -c
    - |
      {script}
    resources: {{limits: {{cpu: 250m}}}}
    securityContext: {{readOnlyRootFilesystem: true}}
    env: [{{name: POD, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}]
    volumeMounts:
    - {{name: data, mountPath: /data}}
    - {{name: cache, mountPath: /cache}}
    - {{name: info, mountPath: /etc/podinfo}}
    - {{name: host, mountPath: /host, readOnly: true}}
    - {{name: data, mountPath: /sub, subPathExpr: 'per-pod/$(POD)'}}
",
                host = host.display()
            ),
        ),
    );
    let agent = node.start();
    let pod = wait_for("vol running", WAIT, || {
        node.pod(&agent, "vol").filter(|p| container(p, "app").is_some_and(|c| c.state.running.is_some()))
    });
    let name = &pod.metadata.name;
    assert_eq!(
        output(&node, &pod, "app", "done"),
        [
            "data-writable",
            "root-read-only",
            "cache-writable",
            "cache-full",
            &format!("name={name}"),
            "cpu=250",
            "info-read-only",
            "from the node",
            "host-read-only",
            "sub-writable",
            "done"
        ]
        .join("\n")
    );
    let pod_dir = node.sb.state().join("pods").join(&pod.metadata.uid);
    let data = pod_dir.join("volumes/kubernetes.io~empty-dir/data");
    assert_eq!(std::fs::read_to_string(data.join("f")).unwrap(), "hi\n");
    assert_eq!(std::fs::read_to_string(data.join(format!("per-pod/{name}/f"))).unwrap(), "s\n");
    assert!(!host.join("x").exists());

    std::fs::remove_file(node.sb.manifests().join("vol.yaml")).unwrap();
    wait_for("the pod's directory removed", Duration::from_secs(60), || (!pod_dir.exists()).then_some(()));
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!table.contains(&pod_dir.display().to_string()), "its tmpfs is unmounted");
    assert_eq!(std::fs::read_to_string(host.join("given")).unwrap(), "from the node", "a hostPath is never removed");
}

#[test]
fn a_cri_host_path_of_the_wrong_type_fails_the_mount_and_nothing_is_created() {
    let Some(node) = CriNode::new() else { return };
    let image = busybox();
    let dir = node.sb.work().join("a-directory");
    std::fs::create_dir(&dir).unwrap();
    node.sb.write_manifest(
        "wrong.yaml",
        &manifest(
            "wrong",
            &format!(
                "  volumes:\n  - {{name: sock, hostPath: {{path: {}, type: Socket}}}}\n  containers:\n  - name: app\n    image: {image}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, '3600']\n    volumeMounts: [{{name: sock, mountPath: /run/x.sock}}]\n",
                dir.display()
            ),
        ),
    );
    let agent: AgentProcess = node.start();
    let want = format!(
        "MountVolume.SetUp failed for volume \"sock\" : hostPath type check failed: {} is not a socket file",
        dir.display()
    );
    wait_for("FailedMount", WAIT, || {
        let events: EventList = serde_json::from_str(&agent.get("/events").unwrap()).unwrap();
        events.items.iter().any(|e| e.reason == "FailedMount" && e.message == want).then_some(())
    });
    let pod = node.pod(&agent, "wrong").unwrap();
    assert!(node.sandboxes().iter().all(|s| s.metadata().uid() != pod.metadata.uid), "no sandbox was made");
}

#[test]
fn a_cri_termination_message_is_read_from_its_file_or_from_the_log_of_a_failure() {
    let Some(node) = CriNode::new() else { return };
    let image = busybox();
    let c = |name: &str, script: &str, extra: &str| {
        format!("  - name: {name}\n    image: {image}\n    imagePullPolicy: IfNotPresent\n    command: [sh, -c, '{script}']\n{extra}")
    };
    let spec = [
        "  restartPolicy: Never\n  securityContext: {runAsUser: 65534}\n  containers:\n".to_string(),
        c("file", "printf bye > /dev/termination-log; exit 3", ""),
        c("custom", "printf done > /tmp/msg", "    terminationMessagePath: /tmp/msg\n"),
        c("logs", "echo first; echo last words; exit 1", "    terminationMessagePolicy: FallbackToLogsOnError\n"),
    ]
    .concat();
    node.sb.write_manifest("msg.yaml", &manifest("msg", &spec));
    let agent = node.start();
    let pod = wait_for("every container exited", WAIT, || {
        node.pod(&agent, "msg").filter(|p| {
            ["file", "custom", "logs"].iter().all(|c| container(p, c).is_some_and(|s| s.state.terminated.is_some()))
        })
    });
    let terminated = |name: &str| container(&pod, name).unwrap().state.terminated.clone().unwrap();
    assert_eq!((terminated("file").exit_code, terminated("file").message), (3, "bye".to_string()));
    assert_eq!(terminated("custom").message, "done");
    assert_eq!(terminated("logs").message, "first\nlast words\n");
}
