//! Volumes on the process runtime, end to end: a real `ferrolet run` whose workloads see
//! an `emptyDir`, a memory-backed `emptyDir`, a `hostPath` and downward API files in a
//! mount namespace of their own, beside a read-only root; a `hostPath` whose type does not
//! match; and the pod's directory (its tmpfs unmounted) gone with the pod. Mount
//! namespaces need root: without it each test skips.

use crate::common;

use common::{container, manifest, wait_for, AgentProcess, Sandbox};
use ferrolet::api::{EventList, Pod};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

fn is_root() -> bool {
    common::root_or_skip("mounting volumes in a mount namespace of the workload's own needs root")
}

fn running(agent: &AgentProcess, name: &str) -> Pod {
    agent.running(name, T)
}

/// What the workload wrote to its first log, the CRI prefixes removed.
fn output(sb: &Sandbox, p: &Pod, name: &str, last: &str) -> String {
    let log = sb
        .state()
        .join("logs")
        .join(format!("default_{}_{}", p.metadata.name, p.metadata.uid))
        .join(name)
        .join("0.log");
    wait_for("the workload's output", T, || {
        let text = std::fs::read_to_string(&log).ok()?;
        let lines: Vec<&str> = text.lines().filter_map(|l| l.splitn(4, ' ').nth(3)).collect();
        lines.contains(&last).then(|| lines.join("\n"))
    })
}

fn mounted_under(dir: &Path) -> bool {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = dir.display().to_string();
    table.lines().filter_map(|l| l.split(' ').nth(4)).any(|p| p.starts_with(&dir))
}

#[test]
fn a_pod_sees_its_volumes_beside_a_read_only_root_and_its_directory_goes_with_it() {
    if !is_root() {
        return;
    }
    let sb = Sandbox::new();
    let w = sb.work();
    // The workload runs as 65534: it must reach the test's directory.
    std::fs::set_permissions(&w, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The mount points exist on the node (the process runtime makes nothing there), empty.
    for d in ["scratch", "memory", "info", "hostview", "sub"] {
        std::fs::create_dir(w.join(d)).unwrap();
    }
    std::fs::create_dir(w.join("hostsrc")).unwrap();
    std::fs::write(w.join("hostsrc/given"), "from the node").unwrap();
    let w = w.display();
    let script = [
        format!("echo hi > {w}/scratch/f && echo scratch-writable"),
        format!("touch {w}/on-root 2>/dev/null && echo root-writable || echo root-read-only"),
        format!("echo small > {w}/memory/small && echo memory-writable"),
        format!("{{ head -c 2000000 /dev/zero > {w}/memory/big; }} 2>/dev/null && echo memory-unbounded || echo memory-full"),
        format!("echo name=$(cat {w}/info/name)"),
        format!("echo labels=$(cat {w}/info/labels | tr '\\n' ,)"),
        format!("cat {w}/hostview/given; echo"),
        format!("touch {w}/hostview/x 2>/dev/null && echo host-writable || echo host-read-only"),
        format!("echo s > {w}/sub/f && echo sub-writable"),
        format!("cd {w}/scratch && echo in $(ls)"),
        "echo done".to_string(),
        "exec sleep 3600".to_string(),
    ]
    .join("\n      ");
    sb.write_manifest(
        "vol.yaml",
        &manifest(
            "vol",
            &format!(
                "  securityContext: {{runAsUser: 65534, runAsGroup: 65534, fsGroup: 3000}}
  volumes:
  - {{name: scratch, emptyDir: {{}}}}
  - {{name: memory, emptyDir: {{medium: Memory, sizeLimit: 1Mi}}}}
  - {{name: host, hostPath: {{path: {w}/hostsrc, type: Directory}}}}
  - name: info
    downwardAPI:
      items:
      - {{path: name, fieldRef: {{fieldPath: metadata.name}}}}
      - {{path: labels, fieldRef: {{fieldPath: metadata.labels}}}}
  containers:
  - name: app
    image: x
    command:
    - sh
    - -c
    - |
      {script}
    securityContext: {{readOnlyRootFilesystem: true}}
    env: [{{name: POD, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}]
    volumeMounts:
    - {{name: scratch, mountPath: {w}/scratch}}
    - {{name: memory, mountPath: {w}/memory}}
    - {{name: info, mountPath: {w}/info}}
    - {{name: host, mountPath: {w}/hostview, readOnly: true}}
    - {{name: scratch, mountPath: {w}/sub, subPathExpr: 'per-pod/$(POD)'}}
"
            ),
        )
        .replace("  name: vol\n", "  name: vol\n  labels: {app: vol, tier: edge}\n"),
    );
    let agent = AgentProcess::start(&sb);
    let pod = running(&agent, "vol");
    let out = output(&sb, &pod, "app", "done");
    let pod_name = &pod.metadata.name;
    assert_eq!(
        out,
        [
            "scratch-writable",
            "root-read-only",
            "memory-writable",
            "memory-full",
            &format!("name={pod_name}"),
            "labels=app=\"vol\",tier=\"edge\"",
            "from the node",
            "host-read-only",
            "sub-writable",
            "in f per-pod",
            "done"
        ]
        .join("\n")
    );
    // The node's own paths are untouched: the volumes were mounted for the workload only.
    let w = sb.work();
    assert_eq!(std::fs::read_dir(w.join("scratch")).unwrap().count(), 0);
    assert!(!w.join("on-root").exists() && !w.join("hostsrc/x").exists());
    // What it wrote is in the pod's directory, owned by fsGroup through the set-group-id
    // directory kubelet's ownership makes.
    let pod_dir = sb.state().join("pods").join(&pod.metadata.uid);
    let scratch = pod_dir.join("volumes/kubernetes.io~empty-dir/scratch");
    assert_eq!(std::fs::read_to_string(scratch.join("f")).unwrap(), "hi\n");
    assert_eq!(std::fs::read_to_string(scratch.join(format!("per-pod/{pod_name}/f"))).unwrap(), "s\n");
    let meta = std::fs::metadata(&scratch).unwrap();
    assert_eq!((meta.gid(), meta.mode() & 0o7777), (3000, 0o2777));
    assert_eq!(std::fs::metadata(scratch.join("f")).unwrap().gid(), 3000);
    assert!(mounted_under(&pod_dir.join("volumes/kubernetes.io~empty-dir/memory")), "the memory volume is a tmpfs");
    let name = std::fs::metadata(pod_dir.join("volumes/kubernetes.io~downward-api/info/name")).unwrap();
    assert_eq!((name.mode() & 0o7777, name.gid()), (0o644, 3000), "defaultMode, fsGroup's");

    // Removed from its source: the pod goes, and its directory with it, tmpfs unmounted.
    std::fs::remove_file(sb.manifests().join("vol.yaml")).unwrap();
    wait_for("the pod's directory removed", Duration::from_secs(60), || (!pod_dir.exists()).then_some(()));
    assert!(!mounted_under(&pod_dir));
    assert_eq!(
        std::fs::read_to_string(w.join("hostsrc/given")).unwrap(),
        "from the node",
        "a hostPath is never removed"
    );
}

#[test]
fn a_host_path_of_the_wrong_type_fails_the_mount_with_kubelets_message_and_or_create_makes_it() {
    if !is_root() {
        return;
    }
    let sb = Sandbox::new();
    let file = sb.work().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let made = sb.work().join("made/by/ferrolet");
    sb.write_manifest(
        "wrong.yaml",
        &manifest(
            "wrong",
            &format!(
                "  volumes:\n  - {{name: host, hostPath: {{path: {}, type: Directory}}}}\n  containers:\n  - name: app\n    image: x\n    command: [sleep, '3600']\n",
                file.display()
            ),
        ),
    );
    sb.write_manifest(
        "made.yaml",
        &manifest(
            "made",
            &format!(
                "  volumes:\n  - {{name: host, hostPath: {{path: {}, type: DirectoryOrCreate}}}}\n  containers:\n  - name: app\n    image: x\n    command: [sleep, '3600']\n",
                made.display()
            ),
        ),
    );
    let agent = AgentProcess::start(&sb);
    running(&agent, "made");
    assert!(made.is_dir(), "DirectoryOrCreate made it");
    let want = format!(
        "MountVolume.SetUp failed for volume \"host\" : hostPath type check failed: {} is not a directory",
        file.display()
    );
    wait_for("FailedMount", T, || {
        let events: EventList = serde_json::from_str(&agent.get("/events").unwrap()).unwrap();
        events
            .items
            .iter()
            .any(|e| e.reason == "FailedMount" && e.type_ == "Warning" && e.message == want)
            .then_some(())
    });
    let pod = agent.pod("wrong").unwrap();
    assert!(!container(&pod, "app").is_some_and(|c| c.state.running.is_some()), "nothing ran");
}

#[test]
fn a_termination_message_is_read_from_its_file_or_from_the_log_of_a_failure() {
    if !is_root() {
        return;
    }
    let sb = Sandbox::new();
    // The process runtime mounts the message file onto a file that exists on the node.
    let target = sb.work().join("termination-log");
    std::fs::write(&target, "the node's own").unwrap();
    sb.write_manifest(
        "msg.yaml",
        &manifest(
            "msg",
            &format!(
                "  restartPolicy: Never
  containers:
  - name: file
    image: x
    command: [sh, -c, 'printf bye > {t}; exit 3']
    terminationMessagePath: {t}
  - name: logs
    image: x
    command: [sh, -c, 'echo first; echo last words; exit 1']
    terminationMessagePolicy: FallbackToLogsOnError
  - name: quiet
    image: x
    command: [sh, -c, 'echo not a message; exit 1']
",
                t = target.display()
            ),
        ),
    );
    let agent = AgentProcess::start(&sb);
    let pod = wait_for("every container exited", T, || {
        agent.pod("msg").filter(|p| {
            ["file", "logs", "quiet"].iter().all(|c| container(p, c).is_some_and(|s| s.state.terminated.is_some()))
        })
    });
    let message = |name: &str| container(&pod, name).unwrap().state.terminated.as_ref().unwrap().message.clone();
    assert_eq!(message("file"), "bye");
    assert_eq!(message("logs"), "first\nlast words\n");
    assert_eq!(message("quiet"), "", "File policy: the log is not the message");
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "the node's own",
        "written in the container's namespace only"
    );
}

#[test]
fn after_a_crash_drain_unmounts_and_removes_what_the_pods_directories_hold() {
    if !is_root() {
        return;
    }
    let sb = Sandbox::new();
    sb.write_manifest(
        "mem.yaml",
        &manifest(
            "mem",
            "  terminationGracePeriodSeconds: 1\n  volumes:\n  - {name: cache, emptyDir: {medium: Memory, sizeLimit: 1Mi}}\n  containers:\n  - name: app\n    image: x\n    command: [sleep, '3600']\n",
        ),
    );
    let agent = AgentProcess::start(&sb);
    let pod = running(&agent, "mem");
    let pod_dir = sb.state().join("pods").join(&pod.metadata.uid);
    assert!(mounted_under(&pod_dir));
    agent.kill9();
    let out = std::process::Command::new(common::ferrolet_bin())
        .args(["drain", "--config"])
        .arg(sb.dir.path().join("ferrolet.toml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!mounted_under(&pod_dir), "the tmpfs is unmounted");
    assert!(!pod_dir.exists());
}
