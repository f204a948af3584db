//! A root of its own for each container on the process runtime, end to end with a real
//! `ferrolet run`: volumes at paths the node does not have, writes that stay in the
//! container's writable layer (gone with the instance), `readOnlyRootFilesystem`, a
//! `subPath` file, a `hostPath`, exec probes, hooks and `ferrolet exec` in the container's
//! root, the termination message at `/dev/termination-log`, adoption after `kill -9` and
//! `drain`. Mounting needs root: without it each test skips.

use crate::common;

use common::{container, manifest, wait_for, AgentProcess, Sandbox};
use ferrolet::api::Pod;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

fn is_root() -> bool {
    common::root_or_skip("a container's own root needs root to mount it")
}

/// A name no node has at its root.
fn unused(prefix: &str) -> String {
    format!("/{prefix}-{}-{}", std::process::id(), ferrolet::base::random::random_id())
}

fn pod_where(agent: &AgentProcess, name: &str, what: &str, ok: impl Fn(&Pod) -> bool) -> Pod {
    agent.pod_where(name, what, T, ok)
}

fn running(agent: &AgentProcess, name: &str) -> Pod {
    agent.running(name, T)
}

/// The lines container `name` of `p` wrote to log `n` (its n-th instance), once `last` is
/// among them; else a panic with what the log and the agent said.
fn output(sb: &Sandbox, agent: &AgentProcess, p: &Pod, name: &str, n: u32, last: &str) -> Vec<String> {
    let log = sb
        .state()
        .join("logs")
        .join(format!("default_{}_{}", p.metadata.name, p.metadata.uid))
        .join(name)
        .join(format!("{n}.log"));
    let lines = || -> Option<Vec<String>> {
        let text = std::fs::read_to_string(&log).ok()?;
        Some(text.lines().filter_map(|l| l.splitn(4, ' ').nth(3)).map(String::from).collect())
    };
    let deadline = std::time::Instant::now() + T;
    loop {
        if let Some(l) = lines().filter(|l| l.iter().any(|l| l == last)) {
            return l;
        }
        if std::time::Instant::now() > deadline {
            panic!(
                "no {last:?} in {}: {:?}\nevents: {:?}\nlog: {}",
                log.display(),
                lines(),
                agent.get("/events"),
                agent.log_text()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn config(sb: &Sandbox) -> PathBuf {
    sb.dir.path().join("ferrolet.toml")
}

/// `ferrolet exec <pod> -c <ctr> --config … -- ARGS`: (exit code, stdout).
fn exec(sb: &Sandbox, pod: &str, ctr: &str, args: &[&str]) -> (i32, String) {
    let out = Command::new(common::ferrolet_bin())
        .args(["exec", &format!("{pod}-testnode"), "-c", ctr, "--config"])
        .arg(config(sb))
        .arg("--")
        .args(args)
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The writable layers of the containers the runtime holds.
fn writable_layers(sb: &Sandbox) -> Vec<PathBuf> {
    let dir = sb.state().join("runtime/containers");
    std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path().join("root/upper")).filter(|p| p.is_dir()).collect())
        .unwrap_or_default()
}

#[test]
fn a_pod_with_an_empty_dir_at_a_path_the_node_lacks_runs_and_its_hooks_write_there() {
    if !is_root() {
        return;
    }
    let sb = Sandbox::new();
    let scratch = unused("scratch");
    assert!(!Path::new(&scratch).exists());
    // The app waits for what postStart wrote, then on TERM shows what preStop wrote. A
    // liveness probe fails once /tmp/kill exists (the instance's own /tmp): the container is
    // stopped, preStop first, and started again, its log kept beside the new one.
    let script = format!(
        "trap 'echo stop=$(cat {scratch}/stop); exit 0' TERM\n      \
         [ -e {scratch}/mine ] && echo kept=$(cat {scratch}/mine)\n      \
         while [ ! -e {scratch}/post ]; do sleep 0.05; done\n      \
         echo post=$(cat {scratch}/post) id=$(id -u)\n      \
         echo mine > {scratch}/mine && echo wrote\n      \
         while true; do sleep 0.1; done"
    );
    sb.write_manifest(
        "scratch.yaml",
        &manifest(
            "scratch",
            &format!(
                "  terminationGracePeriodSeconds: 10
  securityContext: {{runAsUser: 65534, fsGroup: 2000}}
  volumes:
  - {{name: scratch, emptyDir: {{}}}}
  containers:
  - name: app
    image: x
    command:
    - sh
    - -c
    - |
      {script}
    lifecycle:
      postStart: {{exec: {{command: [sh, -c, 'echo started > {scratch}/post']}}}}
      preStop: {{exec: {{command: [sh, -c, 'echo stopping > {scratch}/stop']}}}}
    livenessProbe:
      exec: {{command: [sh, -c, 'test ! -e /tmp/kill']}}
      periodSeconds: 1
      failureThreshold: 1
    volumeMounts:
    - {{name: scratch, mountPath: {scratch}}}
"
            ),
        ),
    );
    let agent = AgentProcess::start(&sb);
    let pod = running(&agent, "scratch");
    let lines = output(&sb, &agent, &pod, "app", 0, "wrote");
    assert_eq!(lines, ["post=started id=65534", "wrote"]);
    assert_eq!(exec(&sb, "scratch", "app", &["cat", &format!("{scratch}/mine")]), (0, "mine".into()));
    assert!(!Path::new(&scratch).exists(), "nothing appears at {scratch} on the node");
    assert_eq!(exec(&sb, "scratch", "app", &["touch", "/tmp/kill"]).0, 0);
    let lines = output(&sb, &agent, &pod, "app", 0, "stop=stopping");
    // The shell may also say "Terminated" for its `sleep`, before or after the trap's line.
    assert!(lines.iter().any(|l| l == "stop=stopping"), "preStop's write, seen by the workload: {lines:?}");
    let again = output(&sb, &agent, &pod, "app", 1, "wrote");
    assert_eq!(again[0], "kept=mine", "the emptyDir outlives the instance, its /tmp does not: {again:?}");
    assert!(!Path::new(&scratch).exists());
}

#[test]
fn writes_to_the_root_stay_in_the_containers_layer_and_go_with_the_instance() {
    if !is_root() {
        return;
    }
    let sb = Sandbox::new();
    let name = unused("ferrolet-test").trim_start_matches('/').to_string();
    let foo = format!("/etc/{name}");
    // Each instance says whether it saw an earlier one's file, writes its own, and exits.
    let script = format!(
        "[ -e {foo} ] && echo seen-before || echo fresh; echo mine > {foo} && echo wrote=$(cat {foo}); \
         touch /made-at-root && echo root-writable; sleep 0.5; exit 1"
    );
    sb.write_manifest(
        "layer.yaml",
        &manifest(
            "layer",
            &format!(
                "  restartPolicy: OnFailure
  containers:
  - name: app
    image: x
    command: [sh, -c, '{script}']
  - name: ro
    image: x
    command: [sh, -c, 'touch /x 2>/dev/null && echo root-writable || echo root-read-only; echo v > /data/v && echo volume-writable; ls -d /tmp/. >/dev/null 2>&1; exec sleep 3600']
    securityContext: {{readOnlyRootFilesystem: true}}
    volumeMounts:
    - {{name: data, mountPath: /data}}
  volumes:
  - {{name: data, emptyDir: {{}}}}
"
            ),
        ),
    );
    let agent = AgentProcess::start(&sb);
    let pod = pod_where(&agent, "layer", "restarted", |p| container(p, "app").is_some_and(|s| s.restart_count >= 1));
    let first = output(&sb, &agent, &pod, "app", 0, "root-writable");
    assert_eq!(first, ["fresh", "wrote=mine", "root-writable"]);
    let second = output(&sb, &agent, &pod, "app", 1, "root-writable");
    assert_eq!(second[0], "fresh", "a new instance has a new writable layer: {second:?}");
    assert!(!Path::new(&foo).exists(), "the node's {foo} does not exist");
    assert!(!Path::new("/made-at-root").exists());
    let ro = output(&sb, &agent, &pod, "ro", 0, "volume-writable");
    assert_eq!(ro, ["root-read-only", "volume-writable"]);
}

#[test]
fn a_sub_path_file_the_node_lacks_and_a_host_path_are_mounted_and_probes_and_exec_see_the_containers_root() {
    if !is_root() {
        return;
    }
    let sb = Sandbox::new();
    let host = sb.work().join("host");
    std::fs::create_dir(&host).unwrap();
    std::fs::write(host.join("given"), "from the node").unwrap();
    let conf = unused("etc-app");
    sb.write_manifest(
        "paths.yaml",
        &manifest(
            "paths",
            &format!(
                "  volumes:
  - name: info
    downwardAPI:
      items:
      - {{path: app.conf, fieldRef: {{fieldPath: metadata.name}}}}
  - {{name: host, hostPath: {{path: {host}, type: Directory}}}}
  - {{name: scratch, emptyDir: {{}}}}
  containers:
  - name: app
    image: x
    command: [sh, -c, 'echo conf=$(cat {conf}/app.conf); echo host=$(cat /host/given); sleep 1; echo ok > /scratch/ready; exec sleep 3600']
    readinessProbe:
      exec: {{command: [cat, /scratch/ready]}}
      periodSeconds: 1
    volumeMounts:
    - {{name: info, mountPath: {conf}/app.conf, subPath: app.conf}}
    - {{name: host, mountPath: /host, readOnly: true}}
    - {{name: scratch, mountPath: /scratch}}
",
                host = host.display()
            ),
        ),
    );
    let agent = AgentProcess::start(&sb);
    let pod = running(&agent, "paths");
    let lines = output(&sb, &agent, &pod, "app", 0, "host=from the node");
    assert_eq!(lines[0], "conf=paths-testnode");
    assert!(!Path::new(&conf).exists(), "the node has no {conf}");
    // Ready only once the exec probe reads the file the container wrote in its own root.
    pod_where(&agent, "paths", "ready", |p| container(p, "app").is_some_and(|s| s.ready));
    assert_eq!(exec(&sb, "paths", "app", &["cat", "/scratch/ready"]), (0, "ok".into()));
    assert_eq!(
        exec(&sb, "paths", "app", &["sh", "-c", "cat /host/given; touch /host/x 2>/dev/null || echo ' ro'"]).1,
        "from the node ro"
    );
    // A root workload cannot make a device node to reach the node's disks (no MKNOD).
    assert_eq!(
        exec(&sb, "paths", "app", &["sh", "-c", "mknod /scratch/disk b 254 0 2>/dev/null || echo refused"]).1,
        "refused"
    );
    // exec runs in the container's PID namespace, its /proc that namespace's.
    let (code, pids) = exec(&sb, "paths", "app", &["sh", "-c", "ls /proc | grep -c '^[0-9]'"]);
    assert_eq!(code, 0);
    assert!(
        pids.parse::<u32>().unwrap() < 10,
        "only the container's processes (init, sleep, this sh, ls, grep, a probe): {pids}"
    );
}

#[test]
fn the_termination_message_is_read_from_dev_termination_log() {
    if !is_root() {
        return;
    }
    let sb = Sandbox::new();
    sb.write_manifest(
        "msg.yaml",
        &manifest(
            "msg",
            "  restartPolicy: Never\n  containers:\n  - name: app\n    image: x\n    command: [sh, -c, 'echo all done > /dev/termination-log; exit 3']\n",
        ),
    );
    let agent = AgentProcess::start(&sb);
    let pod =
        pod_where(&agent, "msg", "terminated", |p| container(p, "app").is_some_and(|s| s.state.terminated.is_some()));
    let t = container(&pod, "app").unwrap().state.terminated.clone().unwrap();
    assert_eq!((t.exit_code, t.message.as_str()), (3, "all done\n"));
}

#[test]
fn after_kill_9_the_agent_adopts_the_containers_with_their_roots_and_drain_removes_the_layers() {
    if !is_root() {
        return;
    }
    // On the node's root filesystem (not under /tmp, which is a tmpfs in the container), so
    // the overlay's lower layer holds the state directory, which must be hidden.
    let sb = Sandbox::new_in(Path::new("/var/tmp"));
    sb.write_manifest(
        "keep.yaml",
        &manifest(
            "keep",
            "  terminationGracePeriodSeconds: 1\n  volumes:\n  - {name: scratch, emptyDir: {}}\n  containers:\n  - name: app\n    image: x\n    command: [sh, -c, 'echo kept > /scratch/f; echo layer > /etc/ferrolet-kept; echo up; exec sleep 3600']\n    volumeMounts:\n    - {name: scratch, mountPath: /scratch}\n",
        ),
    );
    let agent = AgentProcess::start(&sb);
    let pod = running(&agent, "keep");
    output(&sb, &agent, &pod, "app", 0, "up");
    let id = container(&pod, "app").unwrap().container_id.clone();
    assert_eq!(writable_layers(&sb).len(), 1);
    agent.kill9();
    let agent = AgentProcess::start(&sb);
    let again = running(&agent, "keep");
    let c = container(&again, "app").unwrap();
    assert_eq!((c.container_id.as_str(), c.restart_count), (id.as_str(), 0), "the same instance, adopted");
    assert_eq!(exec(&sb, "keep", "app", &["cat", "/scratch/f", "/etc/ferrolet-kept"]), (0, "kept\nlayer".into()));
    assert!(!Path::new("/etc/ferrolet-kept").exists());
    let state = sb.state().display().to_string();
    assert_eq!(exec(&sb, "keep", "app", &["ls", "-A", &state]), (0, String::new()), "ferrolet's state is hidden");
    agent.kill9();
    let out = Command::new(common::ferrolet_bin()).arg("drain").arg("--config").arg(config(&sb)).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(writable_layers(&sb).is_empty(), "drain removes the writable layers");
}

#[test]
fn without_overlayfs_the_root_is_the_nodes_read_only_and_a_mount_path_it_lacks_is_refused() {
    use ferrolet::node::runtime::process::root::Support;
    use ferrolet::node::runtime::{ContainerRuntime, ContainerState, Mount};
    if !is_root() {
        return;
    }
    let sb = Sandbox::new();
    let rt = common::process_runtime(&sb).with_root_support(Support::ReadOnlyBind);
    let pod = common::pod_sandbox(&rt, &sb);
    let data = sb.work().join("data");
    std::fs::create_dir(&data).unwrap();
    let missing = unused("missing");
    let mut cfg = common::sh_container(&sb, "app", "true");
    cfg.mounts.push(Mount { container_path: missing.clone(), host_path: data.clone(), ..Default::default() });
    let err = rt.create_container(&pod, &cfg).unwrap_err().to_string();
    assert!(
        err.ends_with(&format!("the process runtime cannot mount the container's volumes: mountPath {missing} does not exist on this node, and this kernel has no overlayfs to give the container a root of its own")),
        "{err}"
    );
    // At a path the node has, the volume is there; the root is the node's, read-only.
    let at = unused("ro");
    let script = format!("cat /etc/hostname >/dev/null && echo node-root; touch {at} 2>/dev/null || echo read-only; echo v > /srv/v && echo volume-writable");
    let mut cfg = common::sh_container(&sb, "app", &script);
    cfg.mounts.push(Mount { container_path: "/srv".into(), host_path: data.clone(), ..Default::default() });
    let id = rt.create_container(&pod, &cfg).unwrap();
    rt.start_container(&id).unwrap();
    wait_for("the container to exit", T, || {
        rt.list_containers().unwrap().into_iter().find(|c| c.id == id && c.state == ContainerState::Exited)
    });
    let log = std::fs::read_to_string(&cfg.log_path).unwrap();
    let lines: Vec<&str> = log.lines().filter_map(|l| l.splitn(4, ' ').nth(3)).collect();
    assert_eq!(lines, ["node-root", "read-only", "volume-writable"]);
    assert!(!Path::new(&at).exists());
    assert_eq!(std::fs::read_to_string(data.join("v")).unwrap(), "v\n");
}
