//! Lifecycle hooks with `ferrolet run` on the real containerd of `tests/cri/up.sh`: a
//! failed `postStart` exec kills the container (`FailedPostStartHook`), which restarts; a
//! `preStop` exec runs in the container before SIGTERM reaches its workload. Without the
//! harness each test skips with the reason.

use crate::common;

use common::cri::{busybox, CriNode};
use common::{container, manifest, wait_for};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn a_failed_post_start_exec_kills_the_container_which_restarts() {
    let Some(node) = CriNode::new() else { return };
    node.sb.write_manifest(
        "web.yaml",
        &manifest(
            "web",
            &format!(
                "  terminationGracePeriodSeconds: 2\n  containers:\n  - name: app\n    image: {}\n    command: [sleep, '300']\n    lifecycle:\n      postStart:\n        exec:\n          command: [sh, -c, 'echo nope; exit 3']\n",
                busybox()
            ),
        ),
    );
    let agent = node.start();
    let pod = wait_for("a restart after the failed hook", WAIT, || {
        node.pod(&agent, "web").filter(|p| container(p, "app").is_some_and(|c| c.restart_count >= 1))
    });
    node.own(&pod.metadata.uid);
    let last = container(&pod, "app").unwrap().last_state.terminated.clone().expect("the killed instance");
    assert_ne!(last.exit_code, 0, "killed, not exited by itself: {last:?}");
    agent.events_where("FailedPostStartHook events with the hook's output", |events| {
        events.contains("\"reason\":\"FailedPostStartHook\"")
            && events.contains("exited with 3, message: \\\"nope\\\\n\\\"")
            && events.contains("\"message\":\"FailedPostStartHook\"")
    });
}

#[test]
fn a_pre_stop_exec_runs_in_the_container_before_sigterm_reaches_its_workload() {
    let Some(node) = CriNode::new() else { return };
    // The workload and its hook both write to the container's stdout (the hook through
    // /proc/1/fd/1), so the container's log shows their order. The pod's active deadline
    // stops it (through the hook) and keeps it, with its log.
    node.sb.write_manifest(
        "web.yaml",
        &manifest(
            "web",
            &format!(
                "  activeDeadlineSeconds: 3\n  terminationGracePeriodSeconds: 10\n  containers:\n  - name: app\n    image: {}\n    command: [sh, -c, 'trap \"echo TERM; exit 0\" TERM; echo up; while :; do sleep 0.1; done']\n    lifecycle:\n      preStop:\n        exec:\n          command: [sh, -c, 'sleep 1; echo hook > /proc/1/fd/1']\n",
                busybox()
            ),
        ),
    );
    let agent = node.start();
    let pod = wait_for("the container stopped at the deadline", WAIT, || {
        node.pod(&agent, "web").filter(|p| container(p, "app").is_some_and(|c| c.state.terminated.is_some()))
    });
    node.own(&pod.metadata.uid);
    let log = node.pod_logs().join(format!("default_{}_{}", pod.metadata.name, pod.metadata.uid)).join("app/0.log");
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().filter_map(|l| l.split_once(" stdout F ").map(|(_, m)| m)).collect();
    assert_eq!(lines, ["up", "hook", "TERM"], "the hook ran first, then SIGTERM: {text}");
    let terminated = container(&pod, "app").unwrap().state.terminated.clone().unwrap();
    assert_eq!(terminated.exit_code, 0, "the workload's trap ended it: {terminated:?}");
    let events = agent.events_where("DeadlineExceeded event", |e| e.contains("\"DeadlineExceeded\""));
    assert!(!events.contains("FailedPreStopHook"), "{events}");
}
