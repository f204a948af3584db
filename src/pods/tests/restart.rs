//! Restart policies, back-off, and failed creates and starts.

use super::*;
use crate::api::PodPhase;
use crate::node::runtime::ContainerState;

#[test]
fn a_new_pod_gets_its_sandbox_then_every_app_container() {
    let mut node = Node::new();
    let web = pod("web", RestartPolicy::Always, &[], &[app("a"), app("b")]);
    node.apply(&[&web]);
    assert_eq!(
        node.calls(),
        [Call::RunPodSandbox("web".into()), create("a", 0), start("a"), create("b", 0), start("b")]
    );
    assert_eq!(node.reasons(), ["Created", "Started", "Created", "Started"]);
    assert_eq!(node.phase(&web), PodPhase::Running);
    node.tick();
    assert_eq!(node.calls(), [], "a running pod needs nothing");
}

#[test]
fn the_restart_policy_decides_whether_an_exited_container_runs_again() {
    let cases = [
        (RestartPolicy::Always, 0, true, PodPhase::Running),
        (RestartPolicy::Always, 1, true, PodPhase::Running),
        (RestartPolicy::OnFailure, 0, false, PodPhase::Succeeded),
        (RestartPolicy::OnFailure, 1, true, PodPhase::Running),
        (RestartPolicy::Never, 0, false, PodPhase::Succeeded),
        (RestartPolicy::Never, 1, false, PodPhase::Failed),
    ];
    for (policy, code, restarts, phase) in cases {
        let mut node = Node::new();
        let web = pod("web", policy, &[], &[app("app")]);
        node.apply(&[&web]);
        node.calls();
        node.advance(1);
        node.rt.exit("app", code);
        node.tick();
        let want = if restarts { vec![create("app", 1), start("app")] } else { vec![] };
        assert_eq!(node.calls(), want, "{policy:?} after exit {code}: the first exit restarts at once");
        assert_eq!(node.phase(&web), phase, "{policy:?} after exit {code}");
    }
}

#[test]
fn a_reason_the_runtime_settles_after_the_exit_reaches_the_status() {
    let mut node = Node::new();
    let hog = pod("hog", RestartPolicy::Never, &[], &[app("app")]);
    node.apply(&[&hog]);
    node.advance(1);
    node.rt.exit("app", 137);
    node.tick();
    let terminated = |node: &Node| node.container(&hog, "app").state.terminated.map(|t| (t.exit_code, t.reason));
    assert_eq!(terminated(&node), Some((137, "Error".into())));
    // containerd's OOM event arrives after the exit.
    node.rt.set_exit_reason("app", "OOMKilled");
    node.advance(1);
    node.tick();
    assert_eq!(terminated(&node), Some((137, "OOMKilled".into())));
    assert_eq!(node.phase(&hog), PodPhase::Failed);
}

#[test]
fn a_crashing_container_waits_out_a_doubling_back_off() {
    let mut node = Node::new();
    let web = pod("web", RestartPolicy::Always, &[], &[app("app")]);
    node.apply(&[&web]);
    node.calls();
    node.events();

    node.advance(1);
    node.rt.exit("app", 1);
    node.tick();
    assert_eq!(node.calls(), [create("app", 1), start("app")], "the first crash restarts at once");
    node.events();

    node.advance(1);
    node.rt.exit("app", 1);
    node.tick();
    assert_eq!(node.calls(), [], "held back for 10 s");
    let message = "back-off 10s restarting failed container=app pod=web_default(uid-web)";
    assert_eq!(node.waiting(&web, "app"), Some(("CrashLoopBackOff".into(), message.into())));
    assert_eq!(node.container(&web, "app").last_state.terminated.map(|t| t.exit_code), Some(1));
    assert_eq!(
        node.events(),
        [("BackOff".into(), "Back-off restarting failed container app in pod web_default(uid-web)".into())]
    );

    node.advance(9);
    node.tick();
    assert_eq!((node.calls(), node.reasons()), (vec![], vec![]), "still held back; BackOff is reported once");

    node.advance(1);
    node.tick();
    assert_eq!(node.calls(), [create("app", 2), start("app")], "restarted once 10 s have passed");
    assert_eq!(node.phase(&web), PodPhase::Running);

    node.rt.exit("app", 1);
    node.tick();
    let message = "back-off 20s restarting failed container=app pod=web_default(uid-web)";
    assert_eq!(node.waiting(&web, "app"), Some(("CrashLoopBackOff".into(), message.into())), "the delay doubles");
    assert_eq!(node.reasons(), ["Created", "Started", "BackOff"], "a new message is reported again");
    assert_eq!(node.calls(), [Call::RemoveContainer("app".into())], "only the oldest exited instance goes");
    node.advance(19);
    node.tick();
    assert_eq!(node.calls(), []);
    node.advance(1);
    node.tick();
    assert_eq!(node.calls(), [create("app", 3), start("app")]);
}

#[test]
fn ten_minutes_of_running_start_the_back_off_over() {
    let mut node = Node::new();
    let web = pod("web", RestartPolicy::Always, &[], &[app("app")]);
    node.apply(&[&web]);
    node.rt.exit("app", 1);
    node.tick(); // attempt 1 at once; the delay is now 10 s
    node.rt.exit("app", 1);
    node.advance(10);
    node.tick(); // attempt 2; the delay is now 20 s
    assert_eq!(node.instance("app").config.attempt, 2);
    node.calls();

    node.advance(660);
    node.rt.exit("app", 1);
    node.tick();
    let gc = Call::RemoveContainer("app".into());
    assert_eq!(node.calls(), [create("app", 3), start("app"), gc], "a stable container restarts at once");
    node.rt.exit("app", 1);
    node.tick();
    let message = "back-off 10s restarting failed container=app pod=web_default(uid-web)";
    assert_eq!(node.waiting(&web, "app"), Some(("CrashLoopBackOff".into(), message.into())));
}

#[test]
fn a_failed_create_waits_as_create_container_error_under_back_off() {
    let mut node = Node::new();
    let web = pod("web", RestartPolicy::Always, &[], &[app("app")]);
    node.rt.fail_create("app", 2);
    node.apply(&[&web]);
    assert_eq!(node.calls(), [Call::RunPodSandbox("web".into()), create("app", 0)]);
    let message = "cannot create container app: scripted failure";
    assert_eq!(node.events(), [("Failed".into(), format!("Error: {message}"))]);
    assert_eq!(node.waiting(&web, "app"), Some(("CreateContainerError".into(), message.into())));
    assert_eq!(node.phase(&web), PodPhase::Pending);

    node.advance(9);
    node.tick();
    assert_eq!(node.calls(), [], "retried only after 10 s");
    assert_eq!(node.waiting(&web, "app").map(|w| w.0), Some("CreateContainerError".into()), "not a crash loop");
    node.advance(1);
    node.tick();
    assert_eq!(node.calls(), [create("app", 0)], "the second create fails too; the delay doubles");
    node.advance(19);
    node.tick();
    assert_eq!(node.calls(), []);
    node.advance(1);
    node.tick();
    assert_eq!(node.calls(), [create("app", 0), start("app")]);
    assert_eq!(node.waiting(&web, "app"), None);
    assert_eq!(node.phase(&web), PodPhase::Running);
}

#[test]
fn a_failed_start_is_an_exit_restarted_under_the_policy() {
    let mut node = Node::new();
    let web = pod("web", RestartPolicy::Always, &[], &[app("app")]);
    node.rt.fail_start("app", 1);
    node.apply(&[&web]);
    assert_eq!(node.calls(), [Call::RunPodSandbox("web".into()), create("app", 0), start("app")]);
    assert_eq!(
        node.events(),
        [
            ("Created".into(), "Created container app".into()),
            ("Failed".into(), "Error: cannot start container app: scripted failure".into())
        ]
    );
    let failed = node.instance("app");
    assert_eq!((failed.state, failed.reason.as_str()), (ContainerState::Exited, "StartError"));
    node.tick();
    assert_eq!(node.calls(), [create("app", 1), start("app")]);
}

#[test]
fn a_failed_relist_changes_nothing_and_says_so_on_every_pod() {
    let mut node = Node::new();
    let web = pod("web", RestartPolicy::Always, &[], &[app("app")]);
    node.apply(&[&web]);
    node.calls();
    node.events();
    node.rt.exit("app", 1);
    node.rt.fail_list(1);
    node.tick();
    assert_eq!(node.calls(), []);
    let events = node.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].0, "FailedSync");
    assert!(events[0].1.starts_with("error determining status: "), "{events:?}");
    node.tick();
    assert_eq!(node.calls(), [], "the runtime is tried again after a second, not at once");
    node.advance(1);
    node.tick();
    assert_eq!(node.calls(), [create("app", 1), start("app")], "the next relist acts");
}

#[test]
fn a_runtime_that_stays_away_is_said_once_and_retried_with_back_off() {
    let mut node = Node::new();
    let web = pod("web", RestartPolicy::Always, &[], &[app("app")]);
    node.apply(&[&web]);
    node.calls();
    node.events();
    // Away for four relists: tried after 1, 2, 4 and 8 s.
    node.rt.fail_list(4);
    let mut tried_at = vec![];
    for second in 0..16 {
        let before = node.rt.fail_list_left();
        node.tick();
        if node.rt.fail_list_left() != before {
            tried_at.push(second);
        }
        node.advance(1);
    }
    assert_eq!(tried_at, [0, 1, 3, 7], "then the fifth try, at 15 s, succeeds");
    assert_eq!(node.rt.fail_list_left(), 0);
    assert_eq!(node.reasons(), ["FailedSync"], "said once, not at every try");
    assert_eq!(node.calls(), [], "nothing is restarted while the runtime is away");
    assert_eq!(node.phase(&web), PodPhase::Running);
}

#[test]
fn a_failed_liveness_probe_kills_the_container_with_the_pods_grace() {
    use crate::node::prober::{ProbeResult, ProbeType, ProbeUpdate};
    let mut node = Node::new();
    let web = pod("web", RestartPolicy::Always, &[], &[app("app")]);
    node.apply(&[&web]);
    node.calls();
    node.events();
    let id = node.instance("app").id;
    node.pm.handle(PodsCommand::Probe(ProbeUpdate {
        pod_uid: web.metadata.uid.clone(),
        container: "app".into(),
        container_id: id,
        kind: ProbeType::Liveness,
        result: ProbeResult::Failure,
    }));
    assert_eq!(node.calls(), [stop("app", 30)]);
    assert_eq!(node.events(), [("Killing".into(), "Container app failed liveness probe, will be restarted".into())]);
    node.pm.on_deadline();
    assert_eq!(node.calls(), [create("app", 1), start("app")], "restarted under the policy");
}

#[test]
fn a_run_as_non_root_violation_waits_as_a_config_error_said_once_and_retried_every_sync_without_back_off() {
    use crate::api::{PodSecurityContext, SecurityContext};
    let mut node = Node::new();
    let mut web = pod("web", RestartPolicy::Always, &[], &[app("app")]);
    web.spec.security_context = Some(PodSecurityContext { run_as_non_root: Some(true), ..Default::default() });
    node.apply(&[&web]);
    // The fake runtime knows no image: kubelet treats an unknown image user as root.
    assert_eq!(node.calls(), [Call::RunPodSandbox("web".into())], "nothing is created");
    let message =
        format!("container has runAsNonRoot and image will run as root (pod: \"{}\", container: app)", web.desc());
    assert_eq!(node.events(), [("Failed".into(), format!("Error: {message}"))]);
    assert_eq!(node.waiting(&web, "app"), Some(("CreateContainerConfigError".into(), message.clone())));
    assert_eq!(node.phase(&web), PodPhase::Pending);
    node.tick();
    node.tick();
    assert_eq!((node.calls(), node.events()), (vec![], vec![]), "asked again, said once");

    // A non-root uid passes the check and reaches the runtime in the container's config.
    let mut nobody = pod("nobody", RestartPolicy::Always, &[], &[app("app")]);
    nobody.spec.security_context = web.spec.security_context.clone();
    nobody.spec.containers[0].security_context =
        Some(SecurityContext { run_as_user: Some(65534), ..Default::default() });
    node.apply(&[&web, &nobody]);
    assert_eq!(node.calls(), [Call::RunPodSandbox("nobody".into()), create("app", 0), start("app")]);
    assert_eq!(node.waiting(&nobody, "app"), None);
    let created = node
        .rt
        .containers()
        .into_iter()
        .find(|c| c.config.labels.get(crate::node::runtime::labels::POD_NAME).map(String::as_str) == Some("nobody"))
        .unwrap();
    assert_eq!((created.config.security.run_as_user, created.config.security.run_as_non_root), (Some(65534), true));
}

#[test]
fn a_field_that_cannot_be_honoured_holds_its_container_as_create_container_config_error() {
    let mut node = Node::new();
    let mut raw_block = app("a");
    raw_block.other.insert("volumeDevices".into(), serde_json::json!([{"name": "data", "devicePath": "/dev/xvda"}]));
    let web = pod("web", RestartPolicy::Always, &[], &[raw_block, app("b")]);
    node.apply(&[&web]);
    assert_eq!(
        node.calls(),
        [Call::RunPodSandbox("web".into()), create("b", 0), start("b")],
        "only the container that may run runs"
    );
    let (reason, message) = node.waiting(&web, "a").unwrap();
    assert_eq!(reason, "CreateContainerConfigError");
    assert_eq!(
        message,
        "spec.containers[0].volumeDevices: refused: raw block volumes need a PersistentVolumeClaim, which ferrolet does not support"
    );
    let failed: Vec<(String, String)> = node.events().into_iter().filter(|(r, _)| r == "Failed").collect();
    assert_eq!(failed, [("Failed".to_string(), format!("Error: {message}"))]);
    node.tick();
    node.advance(5);
    node.tick();
    assert_eq!(node.calls(), [], "never created");
    assert!(node.events().iter().all(|(r, _)| r != "Failed"), "the event is not repeated at every sync");
}

#[test]
fn a_pod_with_a_sysctl_not_allowed_here_fails_at_admission_as_sysctl_forbidden() {
    use crate::api::{PodSecurityContext, Sysctl};
    let mut node = Node::new();
    let with = |name: &str, sysctls: &[&str]| {
        let mut p = pod(name, RestartPolicy::Always, &[], &[app("app")]);
        let list = sysctls.iter().map(|s| Sysctl { name: s.to_string(), value: "1".into() }).collect();
        p.spec.security_context = Some(PodSecurityContext { sysctls: list, ..Default::default() });
        p
    };
    // Safe, and allowed by the node's `net.core.*`: it runs.
    let fine = with("fine", &["net.ipv4.tcp_syncookies", "net.core.somaxconn"]);
    let unsafe_one = with("bad", &["net.ipv4.tcp_syncookies", "kernel.msgmax"]);
    node.apply(&[&fine, &unsafe_one]);
    assert_eq!(node.phase(&unsafe_one), PodPhase::Failed);
    let status = node.status(&unsafe_one);
    assert_eq!(status.reason, "SysctlForbidden");
    // kubelet's rejectPod: the status says so before the admission message; the event not.
    assert_eq!(status.message, "Pod was rejected: forbidden sysctl: \"kernel.msgmax\" not allowlisted");
    let event = ("SysctlForbidden".to_string(), "forbidden sysctl: \"kernel.msgmax\" not allowlisted".to_string());
    assert!(node.events().contains(&event));
    let calls = node.calls();
    assert!(calls.contains(&Call::RunPodSandbox("fine".into())), "{calls:?}");
    assert!(!calls.contains(&Call::RunPodSandbox("bad".into())), "{calls:?}");
}

#[test]
fn a_runtime_away_for_30_s_makes_the_node_not_ready_until_it_answers_again() {
    use crate::base::clock::Clock;
    let health = crate::node::status::RuntimeHealth::default();
    let mut node = Node::new();
    node.pm = node.pm.with_runtime_health(health.clone());
    let web = pod("web", RestartPolicy::Always, &[], &[app("app")]);
    node.apply(&[&web]);
    node.rt.fail_list(100);
    let mut down_at = None;
    for second in 0..40 {
        node.tick();
        if down_at.is_none() && health.problem(node.clock.now()).is_some() {
            down_at = Some(second);
        }
        node.advance(1);
    }
    assert_eq!(down_at, Some(30), "kubelet's 30 s");
    let problem = health.problem(node.clock.now()).unwrap();
    assert!(problem.starts_with("container runtime is down: no answer for 40s: "), "{problem}");
    node.rt.fail_list(0);
    node.advance(30);
    node.tick();
    assert_eq!(health.problem(node.clock.now()), None, "back at the next try");
}

#[test]
fn a_sandbox_that_cannot_be_made_is_tried_under_back_off_and_leaves_at_most_one_behind() {
    let mut node = Node::new();
    node.rt.fail_sandboxes(100);
    let web = pod("web", RestartPolicy::Always, &[], &[app("app")]);
    node.apply(&[&web]);
    let mut tried_at = vec![0];
    node.calls();
    for second in 1..=80 {
        node.advance(1);
        node.tick();
        if node.calls().contains(&Call::RunPodSandbox("web".into())) {
            tried_at.push(second);
        }
        assert!(node.rt.sandboxes().len() <= 1, "the dead one goes before the next is made ({second} s)");
    }
    assert_eq!(tried_at, [0, 10, 30, 70], "10 s, 20 s, 40 s apart, not every second");
    node.rt.fail_sandboxes(0);
    node.advance(80);
    node.tick();
    assert_eq!(node.rt.sandboxes().iter().filter(|s| s.ready).count(), 1);
    assert_eq!(node.rt.running(), ["app"]);
}
