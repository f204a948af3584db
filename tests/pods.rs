//! The pod manager end to end: a real `ferrolet run` with the process runtime, real
//! processes, manifests written to disk, status read from the local API.

use crate::common;

use common::{container, manifest, wait_for, AgentProcess, Sandbox};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);

fn phase(agent: &AgentProcess, name: &str) -> Option<String> {
    agent.pod(name).and_then(|p| p.status).map(|s| s.phase.to_string())
}

#[test]
fn a_crashing_container_is_restarted_with_backoff_and_shows_crashloopbackoff() {
    let sb = Sandbox::new();
    sb.write_manifest(
        "crash.yaml",
        &manifest("crash", "  containers:\n  - name: app\n    image: x\n    command: [sh, -c, 'echo boom; exit 1']\n"),
    );
    let agent = AgentProcess::start(&sb);
    // First exit: restarted at once (restartCount 1). Second exit: held back 10 s.
    let pod = wait_for("CrashLoopBackOff", T, || {
        agent.pod("crash").filter(|p| {
            container(p, "app").and_then(|c| c.state.waiting.as_ref()).is_some_and(|w| w.reason == "CrashLoopBackOff")
        })
    });
    let c = container(&pod, "app").unwrap();
    let w = c.state.waiting.as_ref().unwrap();
    assert_eq!(
        w.message,
        format!("back-off 10s restarting failed container=app pod=crash-testnode_default({})", pod.metadata.uid)
    );
    assert_eq!(c.restart_count, 1);
    let last = c.last_state.terminated.as_ref().unwrap();
    assert_eq!((last.exit_code, last.reason.as_str()), (1, "Error"));
    assert_eq!(pod.status.as_ref().unwrap().phase, "Running");
    // Still held back twenty syncs (4 s) later: the back-off is honoured, not a hot loop.
    agent.wait_syncs(20);
    let c = container(&agent.pod("crash").unwrap(), "app").unwrap().clone();
    assert_eq!(c.restart_count, 1, "no restart during the 10 s back-off");
    // Then restarted once the back-off passed, and the next wait doubles.
    let pod = wait_for("the second restart", T, || {
        agent.pod("crash").filter(|p| {
            container(p, "app").is_some_and(|c| {
                c.restart_count == 2 && c.state.waiting.as_ref().is_some_and(|w| w.message.starts_with("back-off 20s"))
            })
        })
    });
    assert!(agent.log_text().contains("Back-off restarting failed container app in pod crash-testnode_default"));
    let log_dir = sb.state().join("logs").join(format!("default_crash-testnode_{}", pod.metadata.uid)).join("app");
    let logs: Vec<String> =
        std::fs::read_dir(&log_dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert!(logs.contains(&"2.log".to_string()) && logs.contains(&"1.log".to_string()), "{logs:?}");
    assert!(!logs.contains(&"0.log".to_string()), "older instances are garbage-collected with their logs: {logs:?}");
}

#[test]
fn restart_policies_never_and_onfailure_decide_the_phase() {
    let sb = Sandbox::new();
    let spec = |policy: &str, script: &str| {
        format!("  restartPolicy: {policy}\n  containers:\n  - name: app\n    image: x\n    command: [sh, -c, '{script}']\n")
    };
    sb.write_manifest("never-fail.yaml", &manifest("never-fail", &spec("Never", "exit 2")));
    sb.write_manifest("never-ok.yaml", &manifest("never-ok", &spec("Never", "exit 0")));
    sb.write_manifest("onfailure-ok.yaml", &manifest("onfailure-ok", &spec("OnFailure", "exit 0")));
    sb.write_manifest("onfailure-fail.yaml", &manifest("onfailure-fail", &spec("OnFailure", "exit 3")));
    let agent = AgentProcess::start(&sb);
    wait_for("never-fail Failed", T, || phase(&agent, "never-fail").filter(|p| p == "Failed"));
    wait_for("never-ok Succeeded", T, || phase(&agent, "never-ok").filter(|p| p == "Succeeded"));
    wait_for("onfailure-ok Succeeded", T, || phase(&agent, "onfailure-ok").filter(|p| p == "Succeeded"));
    let p = wait_for("onfailure-fail restarted", T, || {
        agent.pod("onfailure-fail").filter(|p| container(p, "app").is_some_and(|c| c.restart_count >= 1))
    });
    assert_eq!(p.status.unwrap().phase, "Running");
    let failed = agent.pod("never-fail").unwrap();
    let c = container(&failed, "app").unwrap();
    assert_eq!(c.restart_count, 0);
    assert_eq!(c.state.terminated.as_ref().unwrap().exit_code, 2);
    let ready = failed.status.unwrap().conditions.into_iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "PodFailed"));
}

#[test]
fn init_containers_run_one_at_a_time_in_order_before_the_app() {
    let sb = Sandbox::new();
    let out = sb.work().join("order");
    let o = out.display();
    let spec = format!(
        "  initContainers:\n  - name: first\n    image: x\n    command: [sh, -c, 'sleep 0.5; echo first >> {o}']\n  - name: second\n    image: x\n    command: [sh, -c, 'echo second >> {o}']\n  containers:\n  - name: app\n    image: x\n    command: [sh, -c, 'echo app >> {o}; sleep 30']\n"
    );
    sb.write_manifest("init.yaml", &common::sharing_dir(&manifest("init", &spec), &sb.work()));
    let agent = AgentProcess::start(&sb);
    let pod = wait_for("Running", T, || {
        agent.pod("init").filter(|p| p.status.as_ref().is_some_and(|s| s.phase == "Running"))
    });
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "first\nsecond\napp\n");
    for name in ["first", "second"] {
        let t = container(&pod, name).unwrap().state.terminated.clone().unwrap();
        assert_eq!((t.exit_code, t.reason.as_str()), (0, "Completed"));
    }
    let init = pod.status.unwrap().conditions.into_iter().find(|c| c.type_ == "Initialized").unwrap();
    assert_eq!(init.status, "True");
}

#[test]
fn a_failing_init_container_blocks_the_app_and_is_retried() {
    let sb = Sandbox::new();
    let spec = "  initContainers:\n  - name: setup\n    image: x\n    command: [sh, -c, 'exit 5']\n  containers:\n  - name: app\n    image: x\n    command: [sleep, '30']\n";
    sb.write_manifest("blocked.yaml", &manifest("blocked", spec));
    let agent = AgentProcess::start(&sb);
    let pod = wait_for("init crash loop", T, || {
        agent.pod("blocked").filter(|p| {
            container(p, "setup").and_then(|c| c.state.waiting.as_ref()).is_some_and(|w| w.reason == "CrashLoopBackOff")
        })
    });
    assert_eq!(pod.status.as_ref().unwrap().phase, "Pending");
    assert!(container(&pod, "app").unwrap().state.waiting.as_ref().is_some_and(|w| w.reason == "PodInitializing"));
    assert_eq!(ferrolet::cli::pod_columns(&pod).0, "Init:CrashLoopBackOff");
}

#[test]
fn a_sidecar_starts_first_runs_beside_the_app_and_stops_after_it() {
    let sb = Sandbox::new();
    let out = sb.work().join("events");
    let o = out.display();
    let spec = format!(
        "  terminationGracePeriodSeconds: 10\n  initContainers:\n  - name: proxy\n    image: x\n    restartPolicy: Always\n    command: [sh, -c, 'echo proxy-start >> {o}; trap \"echo proxy-stop >> {o}; exit 0\" TERM; while true; do sleep 0.1; done']\n  - name: setup\n    image: x\n    command: [sh, -c, 'echo setup >> {o}']\n  containers:\n  - name: app\n    image: x\n    command: [sh, -c, 'echo app-start >> {o}; trap \"sleep 1; echo app-stop >> {o}; exit 0\" TERM; while true; do sleep 0.1; done']\n"
    );
    sb.write_manifest("side.yaml", &common::sharing_dir(&manifest("side", &spec), &sb.work()));
    let agent = AgentProcess::start(&sb);
    let pod = wait_for("Running 2/2", T, || {
        agent
            .pod("side")
            .filter(|p| ferrolet::cli::pod_columns(p).1 == "2/2" && p.status.as_ref().unwrap().phase == "Running")
    });
    assert!(container(&pod, "proxy").unwrap().state.running.is_some());
    std::fs::remove_file(sb.manifests().join("side.yaml")).unwrap();
    wait_for("pod removed", T, || agent.pod("side").is_none().then_some(()));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "proxy-start\nsetup\napp-start\napp-stop\nproxy-stop\n");
}

#[test]
fn removal_honours_the_grace_period_then_kills() {
    let sb = Sandbox::new();
    let spec = "  terminationGracePeriodSeconds: 3\n  containers:\n  - name: stubborn\n    image: x\n    command: [sh, -c, 'trap \"\" TERM; while true; do sleep 0.1; done']\n";
    sb.write_manifest("stubborn.yaml", &manifest("stubborn", spec));
    let agent = AgentProcess::start(&sb);
    let pod =
        wait_for("Running", T, || agent.pod("stubborn").filter(|p| p.status.as_ref().unwrap().phase == "Running"));
    let id = container(&pod, "stubborn").unwrap().container_id.clone();
    let pid = common::workload_pid(&sb.state(), &id).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let removed = Instant::now();
    std::fs::remove_file(sb.manifests().join("stubborn.yaml")).unwrap();
    wait_for("the process to die", T, || (!ferrolet::base::procs::process_alive(pid, None)).then_some(()));
    let took = removed.elapsed();
    assert!(took >= Duration::from_secs(3), "killed before the grace period ended: {took:?}");
    wait_for("pod removed", T, || agent.pod("stubborn").is_none().then_some(()));
    let terminating = agent.log_text();
    assert!(terminating.contains("terminating with grace period 3s"), "{terminating}");
}

#[test]
fn an_edited_manifest_replaces_the_pod() {
    let sb = Sandbox::new();
    let spec =
        |v: &str| format!("  containers:\n  - name: app\n    image: x\n    command: [sh, -c, 'echo {v}; sleep 30']\n");
    sb.write_manifest("web.yaml", &manifest("web", &spec("v1")));
    let agent = AgentProcess::start(&sb);
    let v1 = wait_for("v1 running", T, || agent.pod("web").filter(|p| p.status.as_ref().unwrap().phase == "Running"));
    sb.write_manifest("web.yaml", &manifest("web", &spec("v2")));
    let v2 = wait_for("v2 running", T, || {
        agent.pod("web").filter(|p| p.metadata.uid != v1.metadata.uid && p.status.as_ref().unwrap().phase == "Running")
    });
    assert!(v2.spec.containers[0].command[2].contains("v2"));
    let old_pid = common::workload_pid(&sb.state(), &container(&v1, "app").unwrap().container_id);
    assert!(old_pid.is_none(), "the old version's container is gone");
    assert_eq!(agent.pods().len(), 1);
}

#[test]
fn an_edited_manifest_that_sets_its_uid_replaces_the_pod_and_keeps_the_uid() {
    let sb = Sandbox::new();
    const UID: &str = "0b5c6d2e-1f3a-4b5c-8d9e-0a1b2c3d4e5f";
    let text = |v: &str| {
        manifest(
            "web",
            &format!("  containers:\n  - name: app\n    image: x\n    command: [sh, -c, 'echo {v}; sleep 30']\n"),
        )
        .replace("  name: web\n", &format!("  name: web\n  uid: {UID}\n"))
    };
    sb.write_manifest("web.yaml", &text("v1"));
    let agent = AgentProcess::start(&sb);
    let v1 = wait_for("v1 running", T, || agent.pod("web").filter(|p| p.status.as_ref().unwrap().phase == "Running"));
    assert_eq!(v1.metadata.uid, UID);
    let old_id = container(&v1, "app").unwrap().container_id.clone();
    sb.write_manifest("web.yaml", &text("v2"));
    let v2 = wait_for("v2 running", T, || {
        agent.pod("web").filter(|p| {
            p.spec.containers[0].command[2].contains("v2")
                && container(p, "app").is_some_and(|c| c.container_id != old_id && c.state.running.is_some())
        })
    });
    assert_eq!(v2.metadata.uid, UID);
    assert!(common::workload_pid(&sb.state(), &old_id).is_none(), "the old version's container is gone");
    assert_eq!(agent.pods().len(), 1);
}

#[test]
fn a_broken_manifest_is_reported_with_its_field_path_and_others_keep_running() {
    let sb = Sandbox::new();
    let good = "  containers:\n  - name: app\n    image: x\n    command: [sleep, '30']\n";
    sb.write_manifest("good.yaml", &manifest("good", good));
    let agent = AgentProcess::start(&sb);
    let before =
        wait_for("good running", T, || agent.pod("good").filter(|p| p.status.as_ref().unwrap().phase == "Running"));
    let bad = "  containers:\n  - name: app\n    image: x\n    command: [sleep, '30']\n    resources:\n      limits:\n        cpu: 1.5.0\n";
    sb.write_manifest("bad.yaml", &manifest("bad", bad));
    let path = sb.manifests().join("bad.yaml");
    let expected = format!("{}: spec.containers[0].resources.limits.cpu: invalid quantity \"1.5.0\"", path.display());
    // The FailedValidation event's line, which quotes the message.
    let quoted = format!("{expected:?}");
    wait_for("the error in the log", T, || agent.log_text().contains(&quoted[1..quoted.len() - 1]).then_some(()));
    // A broken edit of a running pod's manifest keeps the last valid version running.
    sb.write_manifest("good.yaml", &manifest("good", &good.replace("image: x", "image: [")));
    wait_for("the YAML error in the log", T, || agent.log_text().contains("good.yaml: invalid YAML").then_some(()));
    agent.wait_syncs(5);
    let after = agent.pod("good").unwrap();
    assert_eq!(after.metadata.uid, before.metadata.uid);
    assert_eq!(after.status.unwrap().phase, "Running");
    assert!(agent.pod("bad").is_none());
    assert_eq!(agent.get("/healthz").unwrap(), "ok");
}

#[test]
fn a_new_manifest_is_noticed_at_once_not_at_the_next_poll() {
    let sb = Sandbox::new();
    // With a one-hour poll, only the directory watch can pick the manifest up.
    let agent = AgentProcess::start_with(&sb, |t| {
        let slow = t.replace("manifest_check_interval = \"200ms\"", "manifest_check_interval = \"1h\"");
        assert!(slow.contains("\"1h\""), "{slow}");
        slow
    });
    std::thread::sleep(Duration::from_millis(300));
    sb.write_manifest(
        "quick.yaml",
        &manifest("quick", "  containers:\n  - name: app\n    image: x\n    command: [sleep, '30']\n"),
    );
    wait_for("the pod", T, || agent.pod("quick").filter(|p| p.status.as_ref().unwrap().phase == "Running"));
    std::fs::remove_file(sb.manifests().join("quick.yaml")).unwrap();
    wait_for("the pod to go", T, || agent.pod("quick").is_none().then_some(()));
}

#[test]
fn a_pod_asking_for_what_ferrolet_cannot_honour_is_refused_openly_never_run_without_it() {
    let sb = Sandbox::new();
    sb.write_manifest(
        "mounts.yaml",
        &manifest(
            "mounts",
            "  tolerations: [{operator: Exists}]\n  containers:\n  - name: app\n    image: x\n    command: [sleep, '3600']\n    tty: true\n  - name: plain\n    image: x\n    command: [sleep, '3600']\n",
        ),
    );
    let agent = AgentProcess::start(&sb);
    let pod = wait_for("app waiting as CreateContainerConfigError", T, || {
        agent.pod("mounts").filter(|p| {
            container(p, "app")
                .and_then(|c| c.state.waiting.as_ref())
                .is_some_and(|w| w.reason == "CreateContainerConfigError")
                && container(p, "plain").is_some_and(|c| c.state.running.is_some())
        })
    });
    let w = container(&pod, "app").unwrap().state.waiting.clone().unwrap();
    assert_eq!(
        w.message,
        "spec.containers[0].tty: refused: the process runtime attaches no terminal or stdin to containers; the CRI runtime does"
    );
    // Never started without its terminal.
    assert!(container(&pod, "app").unwrap().container_id.is_empty());
    agent.events_where("event of the refused tty", |e| e.contains("Error: spec.containers[0].tty: refused"));
    // The field that means nothing on one node is said once in the log.
    let log = agent.log_text();
    assert_eq!(log.matches("spec.tolerations: accepted, no effect here").count(), 1, "{log}");
}

#[test]
fn downward_api_env_gives_the_container_its_pod_node_and_resources() {
    let sb = Sandbox::new();
    sb.write_manifest(
        "down.yaml",
        &manifest(
            "down",
            "  containers:\n  - name: app\n    image: x\n    command: [sh, -c, 'echo \"$NAME $NS $NODE $IP $MEM $CPU $LABEL\"; exec sleep 3600']\n    resources: {limits: {memory: 64Mi}, requests: {cpu: 250m}}\n    env:\n    - {name: NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}\n    - {name: NS, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}\n    - {name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}\n    - {name: IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}\n    - {name: MEM, valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}}\n    - {name: CPU, valueFrom: {resourceFieldRef: {resource: requests.cpu, divisor: 1m}}}\n    - {name: LABEL, valueFrom: {fieldRef: {fieldPath: \"metadata.labels['app']\"}}}\n",
        )
        .replace("metadata:\n  name: down\n", "metadata:\n  name: down\n  labels: {app: edge}\n"),
    );
    let agent = AgentProcess::start(&sb);
    let pod = wait_for("down running", T, || {
        agent.pod("down").filter(|p| container(p, "app").is_some_and(|c| c.state.running.is_some()))
    });
    let dir = sb.state().join("logs").join(format!("default_down-testnode_{}", pod.metadata.uid)).join("app");
    let line = wait_for("the container's line", T, || {
        let text = std::fs::read_to_string(dir.join("0.log")).ok()?;
        text.lines().next().map(|l| l.splitn(4, ' ').nth(3).unwrap_or_default().to_string())
    });
    assert_eq!(line, "down-testnode default testnode 127.0.0.1 64 250 edge");
}
