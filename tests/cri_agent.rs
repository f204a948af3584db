//! `ferrolet run` with `runtime = "cri"` against the real containerd of `tests/cri/up.sh`:
//! pods from manifests to running containers, with cgroups, labels, the pod network, probes,
//! restarts, OOM kills, agent and containerd restarts, and removal. Without the harness each
//! test skips with the reason.

use crate::common;

use common::cri::{busybox, CriNode};
use common::{container, manifest, wait_for, AgentProcess};
use ferrolet::api::Pod;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

/// Waits until pod `name` satisfies `ok`, and returns it; on a time-out, panics with the
/// pod's last status and the end of the agent's log.
fn wait_pod(node: &CriNode, agent: &AgentProcess, name: &str, what: &str, ok: impl Fn(&Pod) -> bool) -> Pod {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let pod = node.pod(agent, name);
        if let Some(p) = pod.as_ref().filter(|p| ok(p)) {
            return p.clone();
        }
        if std::time::Instant::now() >= deadline {
            let log = agent.log_text();
            let tail: Vec<&str> = log.lines().filter(|l| !l.contains("DEBUG")).rev().take(30).collect();
            let status = pod.map(|p| serde_json::to_string_pretty(&p.status).unwrap()).unwrap_or_default();
            panic!(
                "timed out after {WAIT:?} waiting for {what}; pod status: {status}\nthe end of the agent's log:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn running(p: &Pod, name: &str) -> bool {
    container(p, name).is_some_and(|c| c.state.running.is_some())
}

fn ready(p: &Pod) -> bool {
    p.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn uid(p: &Pod) -> String {
    p.metadata.uid.clone()
}

fn cid(p: &Pod, name: &str) -> String {
    let id = container(p, name).map(|c| c.container_id.clone()).unwrap_or_default();
    id.rsplit("://").next().unwrap().to_string()
}

/// The events the agent recorded for `pod`, as `reason: message` lines.
fn events(agent: &AgentProcess, pod: &str) -> String {
    agent.get("/events").unwrap_or_default().lines().filter(|l| l.contains(pod)).collect::<Vec<_>>().join("\n")
}

#[test]
fn a_pod_with_an_init_container_a_sidecar_and_two_apps_runs_in_its_cgroups_with_kubelets_labels() {
    let Some(node) = CriNode::new() else { return };
    let image = busybox();
    node.sb.write_manifest(
        "full.yaml",
        &manifest(
            "full",
            &format!(
                "  hostNetwork: true
  initContainers:
  - name: init
    image: {image}
    command: [sh, -c, 'echo init done']
  - name: sidecar
    image: {image}
    restartPolicy: Always
    command: [sleep, '3600']
  containers:
  - name: a
    image: {image}
    command: [sleep, '3601']
    resources: {{requests: {{cpu: 100m, memory: 32Mi}}, limits: {{cpu: 200m, memory: 64Mi}}}}
  - name: b
    image: {image}
    command: [sleep, '3602']
"
            ),
        ),
    );
    let agent = node.start();
    let p = wait_pod(&node, &agent, "full", "every container of pod full running", |p| {
        ["sidecar", "a", "b"].iter().all(|c| running(p, c))
    });
    node.own(&uid(&p));
    let init = container(&p, "init").unwrap().state.terminated.clone().expect("init terminated");
    assert_eq!((init.exit_code, init.reason.as_str()), (0, "Completed"));

    // CRI sees four containers with kubelet's labels.
    let listed = node.containers(&uid(&p));
    let mut names: Vec<String> = listed.iter().map(|c| c.labels()["io.kubernetes.container.name"].clone()).collect();
    names.sort();
    assert_eq!(names, ["a", "b", "init", "sidecar"]);
    for c in &listed {
        assert_eq!(c.labels()["io.kubernetes.pod.name"], format!("full-{}", node.node));
        assert_eq!(c.labels()["io.kubernetes.pod.namespace"], "default");
        assert_eq!(c.labels()["io.kubernetes.pod.uid"], uid(&p));
    }

    // The pod cgroup (Burstable) holds the containers' cgroups with the spec's values, and
    // each app's process runs in its own.
    let pod_cgroup = format!("kubepods/burstable/pod{}", uid(&p));
    let read = |controller: &str, path: &str| {
        let f = node.cgroup_dir(controller, path);
        std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display())).trim().to_string()
    };
    let a = format!("{pod_cgroup}/{}", cid(&p, "a"));
    assert_eq!(read("memory", &format!("{a}/memory.limit_in_bytes")), (64u64 << 20).to_string());
    assert_eq!(read("cpu", &format!("{a}/cpu.cfs_quota_us")), "20000");
    assert_eq!(read("cpu", &format!("{a}/cpu.shares")), "102");
    for (name, argv) in [("a", "sleep\x003601\x00"), ("b", "sleep\x003602\x00"), ("sidecar", "sleep\x003600\x00")] {
        // runc's `init` is in the cgroup until it has exec'd the workload.
        let cmdlines = || -> Vec<String> {
            let procs = read("memory", &format!("{pod_cgroup}/{}/cgroup.procs", cid(&p, name)));
            procs.lines().filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/cmdline")).ok()).collect()
        };
        let seen = common::wait_for(&format!("the process of container {name}"), Duration::from_secs(10), || {
            let now = cmdlines();
            (!now.is_empty() && now.iter().all(|c| !c.starts_with("runc\0"))).then_some(now)
        });
        assert_eq!(seen, [argv], "the process of container {name}");
    }
    // Burstable: 1000 − 1000·request/capacity, kubelet's oom_score_adj.
    let procs = read("memory", &format!("{a}/cgroup.procs"));
    let pid = procs.lines().next().unwrap();
    let total_kib: i64 = std::fs::read_to_string("/proc/meminfo").unwrap().lines().next().unwrap()[9..]
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .unwrap();
    let want = (1000 - 1000 * (32 << 20) / (total_kib * 1024)).clamp(3, 999);
    let score = std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).unwrap();
    assert_eq!(score.trim(), want.to_string());
}

#[test]
fn a_pod_on_the_bridge_network_gets_an_ip_and_an_http_readiness_probe_on_it_makes_it_ready() {
    let Some(node) = CriNode::new() else { return };
    node.sb.write_manifest(
        "web.yaml",
        &manifest(
            "web",
            &format!(
                "  containers:
  - name: app
    image: {}
    command: [sh, -c, 'mkdir -p /www && echo hello > /www/index.html && echo \"my ip $MY_IP\" && exec httpd -f -p 8080 -h /www']
    env:
    - {{name: MY_IP, valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}}}
    readinessProbe:
      httpGet: {{path: /index.html, port: 8080}}
      periodSeconds: 1
",
                busybox()
            ),
        ),
    );
    let agent = node.start();
    let p = wait_pod(&node, &agent, "web", "pod web ready", ready);
    node.own(&uid(&p));
    let status = p.status.clone().unwrap();
    let subnet = common::cri::var("FERROLET_CRI_SUBNET");
    let prefix = subnet.trim_end_matches("0/24");
    assert!(status.pod_ip.starts_with(prefix), "pod IP {} is in {subnet}", status.pod_ip);
    assert_eq!(status.pod_ips.len(), 1);
    assert_eq!(status.host_ip, "127.0.0.1");
    // The host reaches it there too.
    let body = ureq::get(&format!("http://{}:8080/index.html", status.pod_ip))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert_eq!(body, "hello\n");
    // The downward API gave the container its own IP on the pod network.
    let log = node.pod_logs().join(format!("default_web-{}_{}", node.node, uid(&p))).join("app/0.log");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains(&format!(" stdout F my ip {}", status.pod_ip)), "{text}");
}

#[test]
fn exec_probes_succeed_fail_and_time_out_through_exec_sync() {
    let Some(node) = CriNode::new() else { return };
    let probe = |cmd: &str| {
        format!(
            "    readinessProbe:\n      exec: {{command: [sh, -c, '{cmd}']}}\n      periodSeconds: 1\n      timeoutSeconds: 1\n"
        )
    };
    let spec = format!(
        "  hostNetwork: true
  containers:
  - name: ok
    image: {b}
    command: [sleep, '3600']
{ok}  - name: failing
    image: {b}
    command: [sleep, '3600']
{failing}  - name: slow
    image: {b}
    command: [sleep, '3600']
{slow}",
        b = busybox(),
        ok = probe("test -d /proc"),
        failing = probe("echo no; exit 3"),
        slow = probe("sleep 5"),
    );
    node.sb.write_manifest("probed.yaml", &manifest("probed", &spec));
    let agent = node.start();
    let p = wait_pod(&node, &agent, "probed", "container ok ready", |p| container(p, "ok").is_some_and(|c| c.ready));
    node.own(&uid(&p));
    let ev = wait_for("Unhealthy events for both failing probes", WAIT, || {
        let ev = events(&agent, "probed");
        (ev.contains("Readiness probe failed: no") && ev.contains("timed out")).then_some(ev)
    });
    assert!(ev.contains("Unhealthy"), "{ev}");
    let p = node.pod(&agent, "probed").unwrap();
    assert!(!container(&p, "failing").unwrap().ready);
    assert!(!container(&p, "slow").unwrap().ready);
    assert!(!ready(&p));
}

#[test]
fn a_container_that_exits_non_zero_restarts_with_back_off_and_an_oom_kill_is_reported_as_oomkilled() {
    let Some(node) = CriNode::new() else { return };
    let b = busybox();
    node.sb.write_manifest(
        "crash.yaml",
        &manifest("crash", &format!("  hostNetwork: true\n  containers:\n  - name: app\n    image: {b}\n    command: [sh, -c, 'echo bye; exit 3']\n")),
    );
    // The hog waits a second before it fills its memory: containerd's shim starts watching
    // a container for OOM kills only once its start has returned, so one killed in its first
    // milliseconds is reported as `Error` by containerd itself (docs/runtimes.md).
    node.sb.write_manifest(
        "hog.yaml",
        &manifest(
            "hog",
            &format!(
                "  hostNetwork: true
  restartPolicy: Never
  containers:
  - name: app
    image: {b}
    command: [sh, -c, 'sleep 1; exec dd if=/dev/zero of=/dev/null bs=64M count=1']
    resources: {{limits: {{memory: 16Mi}}}}
"
            ),
        ),
    );
    let agent = node.start();
    let p = wait_pod(&node, &agent, "crash", "container app restarted twice and waiting in CrashLoopBackOff", |p| {
        container(p, "app").is_some_and(|c| {
            c.restart_count >= 2 && c.state.waiting.as_ref().is_some_and(|w| w.reason == "CrashLoopBackOff")
        })
    });
    node.own(&uid(&p));
    let last = container(&p, "app").unwrap().last_state.terminated.clone().unwrap();
    assert_eq!((last.exit_code, last.reason.as_str()), (3, "Error"));
    assert!(events(&agent, "crash").contains("Back-off restarting failed container app"));

    let p = wait_pod(&node, &agent, "hog", "container app of pod hog terminated", |p| {
        container(p, "app").is_some_and(|c| c.state.terminated.is_some())
    });
    node.own(&uid(&p));
    let t = container(&p, "app").unwrap().state.terminated.clone().unwrap();
    assert_eq!((t.exit_code, t.reason.as_str()), (137, "OOMKilled"));
    assert_eq!(p.status.unwrap().phase, ferrolet::api::PodPhase::Failed);
}

#[test]
fn an_agent_killed_with_sigkill_and_started_again_keeps_every_container() {
    let Some(node) = CriNode::new() else { return };
    node.sb.write_manifest(
        "keep.yaml",
        &manifest(
            "keep",
            &format!("  containers:\n  - name: app\n    image: {}\n    command: [sleep, '3600']\n", busybox()),
        ),
    );
    let agent = node.start();
    let before = wait_pod(&node, &agent, "keep", "container app running", |p| running(p, "app"));
    node.own(&uid(&before));
    agent.kill9();
    let agent = node.start();
    let after = wait_pod(&node, &agent, "keep", "container app running after the restart", |p| running(p, "app"));
    let (b, a) = (container(&before, "app").unwrap(), container(&after, "app").unwrap());
    assert_eq!(a.container_id, b.container_id, "the same container");
    assert_eq!(a.restart_count, 0);
    assert_eq!(a.state.running, b.state.running, "started at the same time");
    assert_eq!(after.status.unwrap().pod_ip, before.status.unwrap().pod_ip);
    assert_eq!(node.sandboxes().len(), 1);
}

#[test]
fn removing_a_pod_leaves_no_sandbox_container_cgroup_or_log_directory() {
    let Some(node) = CriNode::new() else { return };
    node.sb.write_manifest(
        "gone.yaml",
        &manifest(
            "gone",
            &format!(
                "  terminationGracePeriodSeconds: 2\n  containers:\n  - name: app\n    image: {}\n    command: [sh, -c, 'echo hi; exec sleep 3600']\n",
                busybox()
            ),
        ),
    );
    let agent = node.start();
    let p = wait_pod(&node, &agent, "gone", "container app running", |p| running(p, "app"));
    node.own(&uid(&p));
    let logs = node.pod_logs().join(format!("default_gone-{}_{}", node.node, uid(&p)));
    assert!(logs.join("app/0.log").exists());
    let pod_cgroup = format!("kubepods/besteffort/pod{}", uid(&p));
    // runc makes the pod cgroup in every hierarchy, those ferrolet writes and the others.
    let mounts = ferrolet::node::cm::cgroupfs::Mounts::read(std::path::Path::new("/proc/self/mountinfo")).unwrap();
    let under_root = format!("{}/{pod_cgroup}", node.cgroup_root.trim_start_matches('/'));
    let copies: Vec<std::path::PathBuf> = mounts.all.iter().map(|m| m.join(&under_root)).collect();
    assert!(copies.iter().filter(|d| d.exists()).count() >= 3, "{copies:?}");
    std::fs::remove_file(node.sb.manifests().join("gone.yaml")).unwrap();
    wait_for("pod gone to be removed", WAIT, || node.pod(&agent, "gone").is_none().then_some(()));
    assert!(node.sandboxes().is_empty(), "no sandbox left");
    assert!(node.containers(&uid(&p)).is_empty(), "no container left");
    let left: Vec<_> = copies.iter().filter(|d| d.exists()).collect();
    assert!(left.is_empty(), "pod cgroup left in {left:?}");
    assert!(!logs.exists(), "{} left", logs.display());
}

/// kubelet turns NotReady with "container runtime is down" 30 s after the runtime stopped
/// answering, so no more pods are scheduled onto the node; and Ready again once it answers.
#[test]
fn the_node_is_not_ready_while_containerd_is_down_for_30_s() {
    if common::cri::endpoint().is_none() {
        return;
    }
    let containerd = common::cri::OwnContainerd::start();
    let Some(node) = CriNode::on(containerd.endpoint()) else { return };
    let agent = node.start();
    let ready = |agent: &AgentProcess| -> (String, String) {
        let n: ferrolet::api::Node = serde_json::from_str(&agent.get("/node").unwrap()).unwrap();
        let c = n.status.conditions.into_iter().find(|c| c.type_ == "Ready").unwrap();
        (c.status, c.message)
    };
    assert_eq!(ready(&agent).0, "True");
    let down = std::time::Instant::now();
    containerd.stop();
    let (status, message) =
        wait_for("Ready False", Duration::from_secs(60), || Some(ready(&agent)).filter(|(s, _)| s == "False"));
    assert!(down.elapsed() >= Duration::from_secs(29), "not before 30 s: {:?}", down.elapsed());
    assert_eq!(status, "False");
    assert!(message.starts_with("container runtime is down: no answer for "), "{message}");
    assert_eq!(agent.get("/healthz").unwrap(), "ok", "the agent itself is healthy");
    containerd.script("up.sh");
    wait_for("Ready again", Duration::from_secs(60), || (ready(&agent).0 == "True").then_some(()));
}

/// Without its CNI plugin containerd cannot make a pod-network sandbox, leaves a NOT_READY
/// one behind, and cannot tear that one down either. As kubelet's pod sync, no new sandbox
/// is made while the dead one cannot be removed, and the removal is tried under back-off
/// (at 10 s, then 20 s later), not at every sync: one dead sandbox, not one a second.
#[test]
fn a_missing_cni_plugin_leaves_one_dead_sandbox_tried_under_back_off() {
    if common::cri::endpoint().is_none() {
        return;
    }
    let containerd = common::cri::OwnContainerd::start();
    containerd.break_cni();
    let Some(node) = CriNode::on(containerd.endpoint()) else { return };
    node.sb.write_manifest(
        "netless.yaml",
        &manifest(
            "netless",
            &format!("  containers:\n  - name: app\n    image: {}\n    command: [sleep, '3600']\n", busybox()),
        ),
    );
    let agent = node.start();
    let p = wait_for("the pod", WAIT, || node.pod(&agent, "netless"));
    node.own(&uid(&p));
    let mut most = 0;
    for _ in 0..35 {
        most = most.max(node.sandboxes().len());
        std::thread::sleep(Duration::from_secs(1));
    }
    let list: ferrolet::api::EventList = serde_json::from_str(&agent.get("/events").unwrap()).unwrap();
    let made: i32 = list.items.iter().filter(|e| e.reason == "FailedCreatePodSandBox").map(|e| e.count).sum();
    let removals = agent.log_text().matches("cannot remove dead sandbox").count();
    eprintln!("{made} sandbox(es) made, {removals} removal(s) tried, at most {most} sandbox(es) at once in 35 s");
    assert_eq!((made, most), (1, 1), "{:?}", list.items);
    assert!((1..=3).contains(&removals), "{removals} removals tried in 35 s (at 10 and 30 s)");
}

#[test]
fn a_containerd_restart_restarts_no_pod_and_the_agent_says_so_once_each_way() {
    if common::cri::endpoint().is_none() {
        return;
    }
    let containerd = common::cri::OwnContainerd::start();
    let Some(node) = CriNode::on(containerd.endpoint()) else { return };
    node.sb.write_manifest(
        "steady.yaml",
        &manifest(
            "steady",
            &format!(
                "  hostNetwork: true\n  containers:\n  - name: app\n    image: {}\n    command: [sleep, '3600']\n    livenessProbe:\n      exec: {{command: ['true']}}\n      periodSeconds: 1\n",
                busybox()
            ),
        ),
    );
    let agent = node.start();
    let before = wait_pod(&node, &agent, "steady", "container app running", |p| running(p, "app"));
    node.own(&uid(&before));
    containerd.stop();
    // Several relists (one a sync) and probes (every second) find it away.
    agent.wait_syncs(15);
    containerd.script("up.sh");
    wait_for("the agent to see the runtime back", WAIT, || {
        agent.log_text().contains("the runtime answers again").then_some(())
    });
    agent.wait_syncs(10);
    let after = wait_pod(&node, &agent, "steady", "container app running", |p| running(p, "app"));
    let (b, a) = (container(&before, "app").unwrap(), container(&after, "app").unwrap());
    assert_eq!(a.container_id, b.container_id, "the same container");
    assert_eq!(a.restart_count, 0);
    let log = agent.log_text();
    assert_eq!(log.matches("cannot list the runtime's pods").count(), 1, "one line while it is away");
    assert_eq!(log.matches("the runtime answers again").count(), 1, "one line when it is back");
    assert!(!events(&agent, "steady").contains("Killing"), "no container was killed");
}

#[test]
fn a_running_containers_log_is_rotated_past_max_size_and_containerd_writes_the_new_file() {
    let Some(node) = CriNode::new() else { return };
    let line = "x".repeat(100);
    node.sb.write_manifest(
        "chatty.yaml",
        &manifest(
            "chatty",
            &format!(
                "  hostNetwork: true\n  containers:\n  - name: app\n    image: {}\n    command: [sh, -c, 'i=0; while true; do echo \"$i {line}\"; i=$((i+1)); sleep 0.01; done']\n",
                busybox()
            ),
        ),
    );
    let agent = node.start_with(|t| t.replace("[logs]\n", "[logs]\nmax_size = \"4Ki\"\nmax_files = 3\n"), "debug");
    let p = wait_pod(&node, &agent, "chatty", "container app running", |p| running(p, "app"));
    node.own(&uid(&p));
    let dir = node.pod_logs().join(format!("default_chatty-{}_{}", node.node, uid(&p))).join("app");
    let rotated = || {
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("0.log."))
            .collect();
        names.sort();
        names
    };
    // A follower from the start: every numbered line, in order, across the rotations.
    let followed = node.sb.dir.path().join("followed.txt");
    let mut follower = std::process::Command::new(common::ferrolet_bin())
        .args(["logs", &format!("chatty-{}", node.node), "-c", "app", "-f", "--config"])
        .arg(node.sb.dir.path().join("ferrolet.toml"))
        .stdout(std::fs::File::create(&followed).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Checked every 10 s: by then the log is past 4 KiB, and again 10 s later.
    wait_for("two rotations", Duration::from_secs(40), || (rotated().len() >= 2).then_some(()));
    std::thread::sleep(Duration::from_secs(1));
    let _ = follower.kill();
    let _ = follower.wait();
    let numbers: Vec<u64> = std::fs::read_to_string(&followed)
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').next().and_then(|n| n.parse().ok()))
        .collect();
    let gap = numbers.windows(2).find(|w| w[1] != w[0] + 1);
    assert_eq!(gap, None, "{} lines followed, from {:?} to {:?}", numbers.len(), numbers.first(), numbers.last());
    assert!(numbers.len() > 1000, "{} lines followed", numbers.len());
    // containerd reopened the live file and writes on in it, numbering on.
    let first_number = |path: &std::path::Path| -> u64 {
        let text = std::fs::read_to_string(path).unwrap();
        let first = text.lines().next().unwrap_or_default();
        first.split(' ').nth(3).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{first:?}"))
    };
    wait_for("new lines in the live file", WAIT, || {
        let n = std::fs::read_to_string(dir.join("0.log")).map(|t| t.lines().count()).unwrap_or(0);
        (n > 0).then_some(())
    });
    let names = rotated();
    assert!(names.len() <= 2, "max_files 3 keeps the live file and two rotations: {names:?}");
    let newest_rotation = first_number(&dir.join(names.last().unwrap()));
    assert!(first_number(&dir.join("0.log")) > newest_rotation, "the live file goes on where the rotation ended");
    assert!(std::fs::metadata(dir.join(names.last().unwrap())).unwrap().len() > 4096);
}

/// kubelet's log manager reopens a live log that was deleted: the output goes on in a file
/// that can be read, not into one nobody can.
#[test]
fn a_deleted_live_log_is_reopened_by_the_runtime() {
    let Some(node) = CriNode::new() else { return };
    node.sb.write_manifest(
        "talker.yaml",
        &manifest(
            "talker",
            &format!(
                "  hostNetwork: true\n  containers:\n  - name: app\n    image: {}\n    command: [sh, -c, 'i=0; while true; do echo $i; i=$((i+1)); sleep 0.05; done']\n",
                busybox()
            ),
        ),
    );
    let agent = node.start();
    let p = wait_pod(&node, &agent, "talker", "container app running", |p| running(p, "app"));
    node.own(&uid(&p));
    let live = node.pod_logs().join(format!("default_talker-{}_{}", node.node, uid(&p))).join("app/0.log");
    wait_for("a first line", WAIT, || live.exists().then_some(()));
    std::fs::remove_file(&live).unwrap();
    // Looked at every 10 s.
    let text = wait_for("the log back", Duration::from_secs(30), || {
        std::fs::read_to_string(&live).ok().filter(|t| t.lines().count() > 2)
    });
    assert!(text.lines().all(|l| l.contains(" stdout F ")), "{text}");
    assert!(agent.log_text().contains("was gone; the runtime reopened it"));
    let p = node.pod(&agent, "talker").unwrap();
    assert_eq!(container(&p, "app").unwrap().restart_count, 0);
}

#[test]
fn a_missing_runtime_socket_stops_the_start_with_an_error_naming_the_endpoint_and_leaves_nothing() {
    let sb = common::Sandbox::new();
    let endpoint = format!("unix://{}/nothing.sock", sb.dir.path().display());
    let config = sb.dir.path().join("ferrolet.toml");
    std::fs::write(&config, format!("runtime_start_wait = \"0s\"\n{}", sb.config_text(common::free_port()))).unwrap();
    let out = std::process::Command::new(common::ferrolet_bin())
        .args(["run", "--runtime", "cri", "--container-runtime-endpoint", &endpoint, "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    // Checked before anything is made: no pod cgroup tree.
    assert!(!std::path::Path::new("/sys/fs/cgroup/memory").join(sb.cgroup_root().trim_start_matches('/')).exists());
    assert!(
        stderr.contains(&format!("cannot use the CRI runtime (runtime = \"cri\"): container runtime endpoint {endpoint}: No such file or directory")),
        "{stderr}"
    );
    assert!(!sb.state().exists(), "no state directory, no lock file");
}

/// As at boot, when containerd and the agent start together: the runtime's socket appears
/// two seconds after the agent started. The agent waits for it, says so once, and runs.
#[test]
fn a_runtime_that_is_still_starting_is_waited_for() {
    let Some(node) = CriNode::new() else { return };
    let late = node.sb.dir.path().join("late.sock");
    let real = common::cri::endpoint().unwrap();
    let real = real.strip_prefix("unix://").unwrap().to_string();
    let appear = {
        let late = late.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(2));
            std::os::unix::fs::symlink(real, late).unwrap();
        })
    };
    let endpoint = format!("unix://{}", late.display());
    let agent = node.start_with(
        |t| {
            t.replace(
                &format!("container_runtime_endpoint = {:?}", node.endpoint),
                &format!("container_runtime_endpoint = {endpoint:?}"),
            )
        },
        "info",
    );
    appear.join().unwrap();
    let log = agent.log_text();
    assert_eq!(log.matches("waiting for the runtime to start").count(), 1, "{log}");
    assert!(log.contains("cri: the runtime is up"), "{log}");
    assert!(agent.get("/healthz").is_ok());
}

#[test]
fn drain_stops_and_removes_every_pod_of_the_node_on_containerd() {
    let Some(node) = CriNode::new() else { return };
    node.sb.write_manifest(
        "drained.yaml",
        &manifest(
            "drained",
            &format!(
                "  hostNetwork: true\n  terminationGracePeriodSeconds: 2\n  containers:\n  - name: app\n    image: {}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, '3600']\n",
                busybox()
            ),
        ),
    );
    let agent = node.start();
    let p = wait_pod(&node, &agent, "drained", "container app running", |p| running(p, "app"));
    node.own(&uid(&p));
    assert!(agent.terminate().success());
    // Stopping the agent stops no pod.
    assert_eq!(node.sandboxes().len(), 1);
    let out = std::process::Command::new(common::ferrolet_bin())
        .args(["drain", "--config"])
        .arg(node.sb.dir.path().join("ferrolet.toml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("drained 1 pod(s)"), "{out:?}");
    assert!(node.sandboxes().is_empty(), "no sandbox left");
    assert!(node.containers(&uid(&p)).is_empty(), "no container left");
    let pod_cgroup = node.cgroup_dir("memory", &format!("kubepods/besteffort/pod{}", uid(&p)));
    assert!(!pod_cgroup.exists(), "{} left", pod_cgroup.display());
}
