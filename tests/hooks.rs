//! Lifecycle hooks and `activeDeadlineSeconds` with a real agent on the process runtime:
//! a preStop hook finishes before SIGTERM reaches the workload, even when the agent dies
//! during the hook (the shim keeps the deadline); a failed postStart hook kills the
//! container, which restarts; a pod past its active deadline fails.

use crate::common;

use common::{container, manifest, wait_for, AgentProcess, Sandbox};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);

/// A container that records SIGTERM in `out` and exits, and a preStop hook (`hook`, a
/// shell script) — both appending to the same file, in the test's directory shared with it.
fn traps_term(sb: &Sandbox, name: &str, grace: u32, hook: &str, out: &std::path::Path) {
    let out = out.display();
    let pod = manifest(
        name,
        &format!(
            "  terminationGracePeriodSeconds: {grace}\n  containers:\n  - name: app\n    image: x\n    command: [sh, -c, 'trap \"echo TERM >> {out}; exit 0\" TERM; echo up >> {out}; while :; do sleep 0.1; done']\n    lifecycle:\n      preStop:\n        exec:\n          command: [sh, -c, '{hook}']\n"
        ),
    );
    sb.write_manifest(&format!("{name}.yaml"), &common::sharing_dir(&pod, &sb.work()));
}

fn lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(String::from).collect()
}

#[test]
fn a_pre_stop_hook_finishes_before_sigterm_reaches_the_workload() {
    let sb = Sandbox::new();
    let out = sb.work().join("order");
    let hook = format!("sleep 1; echo hook >> {}", out.display());
    traps_term(&sb, "web", 10, &hook, &out);
    let agent = AgentProcess::start(&sb);
    wait_for("the workload", T, || (lines(&out) == ["up"]).then_some(()));
    // Its removal below is only seen once the pod was shown (the workload may write before).
    wait_for("the pod shown running", T, || {
        agent.pod("web").filter(|p| container(p, "app").is_some_and(|c| c.state.running.is_some()))
    });
    std::fs::remove_file(sb.manifests().join("web.yaml")).unwrap();
    wait_for("the pod's removal", T, || agent.pod("web").is_none().then_some(()));
    assert_eq!(lines(&out), ["up", "hook", "TERM"], "the hook ran first, then SIGTERM");
    let events = agent.events_where("Killing event", |e| e.contains("\"Killing\""));
    assert!(!events.contains("FailedPreStopHook"), "{events}");
}

#[test]
fn the_shim_keeps_the_grace_period_when_the_agent_dies_during_a_pre_stop_hook() {
    let sb = Sandbox::new();
    let out = sb.work().join("order");
    let started = sb.work().join("hook-started");
    // The hook outlasts the grace period (3 s): SIGTERM must come at its end anyway.
    let hook = format!("touch {}; sleep 8", started.display());
    traps_term(&sb, "web", 3, &hook, &out);
    let agent = AgentProcess::start(&sb);
    wait_for("the workload", T, || (lines(&out) == ["up"]).then_some(()));
    std::fs::remove_file(sb.manifests().join("web.yaml")).unwrap();
    wait_for("the hook", T, || started.exists().then_some(()));
    let hook_began = Instant::now();
    agent.kill9();
    wait_for("SIGTERM from the shim", T, || (lines(&out) == ["up", "TERM"]).then_some(()));
    let after = hook_began.elapsed();
    assert!(after >= Duration::from_secs(2), "not before the grace period ends ({after:?})");
    assert!(after < Duration::from_secs(6), "at the grace period's end, not the hook's ({after:?})");
}

#[test]
fn a_failed_post_start_hook_kills_the_container_which_restarts() {
    let sb = Sandbox::new();
    sb.write_manifest(
        "web.yaml",
        &manifest(
            "web",
            "  terminationGracePeriodSeconds: 2\n  containers:\n  - name: app\n    image: x\n    command: [sleep, '300']\n    lifecycle:\n      postStart:\n        exec:\n          command: [sh, -c, 'echo nope; exit 3']\n",
        ),
    );
    let agent = AgentProcess::start(&sb);
    let pod = wait_for("a restart", T, || {
        agent.pod("web").filter(|p| container(p, "app").is_some_and(|c| c.restart_count >= 1))
    });
    let last = container(&pod, "app").unwrap().last_state.terminated.clone().expect("the killed instance");
    assert_ne!(last.exit_code, 0);
    agent.events_where("FailedPostStartHook events with the hook's output", |events| {
        events.contains("FailedPostStartHook")
            && events
                .contains("failed - error: command 'sh -c echo nope; exit 3' exited with 3, message: \\\"nope\\\\n\\\"")
            && events.contains("\"message\":\"FailedPostStartHook\"")
    });
}

#[test]
fn a_pod_past_its_active_deadline_fails_with_deadline_exceeded() {
    let sb = Sandbox::new();
    sb.write_manifest(
        "job.yaml",
        &manifest(
            "job",
            "  activeDeadlineSeconds: 2\n  terminationGracePeriodSeconds: 2\n  containers:\n  - name: app\n    image: x\n    command: [sleep, '300']\n",
        ),
    );
    let agent = AgentProcess::start(&sb);
    let pod = wait_for("the deadline", T, || {
        agent.pod("job").filter(|p| {
            p.status.as_ref().is_some_and(|s| s.phase == "Failed")
                && container(p, "app").is_some_and(|c| c.state.terminated.is_some())
        })
    });
    let st = pod.status.unwrap();
    assert_eq!(
        (st.reason.as_str(), st.message.as_str()),
        ("DeadlineExceeded", "Pod was active on the node longer than the specified deadline")
    );
    assert_eq!(container(agent.pod("job").as_ref().unwrap(), "app").unwrap().restart_count, 0);
    agent.events_where("DeadlineExceeded event", |e| e.contains("\"DeadlineExceeded\""));
}
