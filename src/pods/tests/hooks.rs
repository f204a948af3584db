//! Lifecycle hooks and `activeDeadlineSeconds`: what waits for a hook, what follows its
//! answer, and a pod failed for outliving its deadline. Hooks go to a recording sink; the
//! test answers them as the hook threads would (`PodsCommand::Hook`).

use super::*;
use crate::api::{ExecAction, Lifecycle, LifecycleHandler, SleepAction};
use crate::node::lifecycle::{HookDone, HookError, HookKind, HookRequest, HookSink};
use parking_lot::Mutex;

/// Records every hook submitted.
#[derive(Default)]
struct Hooks(Mutex<Vec<HookRequest>>);

impl HookSink for Hooks {
    fn submit(&self, req: HookRequest) -> Result<(), HookError> {
        self.0.lock().push(req);
        Ok(())
    }
}

impl Hooks {
    /// The hooks submitted since the last look, as (kind, container name, timeout).
    fn take(&self) -> Vec<(HookKind, String, Duration)> {
        self.0.lock().drain(..).map(|r| (r.kind, r.container.name.clone(), r.timeout)).collect()
    }
}

fn node_with_hooks() -> (Node, Arc<Hooks>) {
    let node = Node::new();
    let hooks = Arc::new(Hooks::default());
    let pm = node.pm.with_hooks(hooks.clone());
    (Node { pm, ..node }, hooks)
}

fn exec(cmd: &str) -> LifecycleHandler {
    LifecycleHandler { exec: Some(ExecAction { command: vec![cmd.into()] }), ..Default::default() }
}

fn with_post_start(c: Container) -> Container {
    Container { lifecycle: Some(Lifecycle { post_start: Some(exec("hook")), pre_stop: None }), ..c }
}

fn with_pre_stop(c: Container) -> Container {
    let sleep = LifecycleHandler { sleep: Some(SleepAction { seconds: 5 }), ..Default::default() };
    Container { lifecycle: Some(Lifecycle { post_start: None, pre_stop: Some(sleep) }), ..c }
}

/// The hook threads' answer for the newest instance of `name`.
fn answer(node: &mut Node, kind: HookKind, pod: &Pod, name: &str, result: Result<(), String>) {
    let container_id = node.instance(name).id;
    node.pm.handle(PodsCommand::Hook(HookDone { kind, pod_uid: pod.metadata.uid.clone(), container_id, result }));
    // The answer asks for a sync, which the manager's loop runs when its queue is empty.
    node.pm.on_deadline();
}

#[test]
fn a_post_start_hook_holds_back_the_next_container_and_the_containers_start_until_it_answers() {
    let (mut node, hooks) = node_with_hooks();
    let web = pod("web", RestartPolicy::Always, &[with_post_start(sidecar("proxy"))], &[app("web")]);
    node.apply(&[&web]);
    assert_eq!(node.calls(), [Call::RunPodSandbox("web".into()), create("proxy", 0), start("proxy")]);
    assert_eq!(hooks.take(), [(HookKind::PostStart, "proxy".into(), crate::node::lifecycle::POST_START_TIMEOUT)]);
    let proxy = node.container(&web, "proxy");
    assert!(proxy.state.running.is_some());
    assert_eq!((proxy.started, proxy.ready), (Some(false), false), "not started while its hook runs");

    node.advance(5);
    node.tick();
    assert_eq!(node.calls(), [], "the app container waits for the hook");

    answer(&mut node, HookKind::PostStart, &web, "proxy", Ok(()));
    assert_eq!(node.calls(), [create("web", 0), start("web")]);
    assert_eq!(node.container(&web, "proxy").started, Some(true));
}

#[test]
fn a_probed_container_is_not_shown_to_the_prober_until_its_post_start_hook_answers() {
    use crate::api::{IntOrString, Probe, TcpSocketAction};
    let (mut node, _hooks) = node_with_hooks();
    let tcp = TcpSocketAction { port: IntOrString::Int(80), host: String::new() };
    let probe = Probe { tcp_socket: Some(tcp), ..Default::default() };
    let web = pod(
        "web",
        RestartPolicy::Always,
        &[],
        &[Container { liveness_probe: Some(probe), ..with_post_start(app("web")) }],
    );
    node.apply(&[&web]);
    // A target with the instance but not running would be failed by the prober (as kubelet
    // fails an exited container), and the container killed once the hook is over.
    let during = node.sent_targets().concat();
    assert!(!during.is_empty());
    assert!(during.iter().all(|t| t.container_id.is_none() && !t.running), "{during:?}");
    answer(&mut node, HookKind::PostStart, &web, "web", Ok(()));
    let after = node.sent_targets().concat();
    let id = node.instance("web").id;
    assert!(after.iter().any(|t| t.container_id.as_deref() == Some(id.as_str()) && t.running), "{after:?}");
}

#[test]
fn a_failed_post_start_hook_is_reported_and_the_container_is_killed_and_restarted_under_back_off() {
    let (mut node, hooks) = node_with_hooks();
    let web = pod("web", RestartPolicy::Always, &[], &[with_post_start(app("web"))]);
    node.apply(&[&web]);
    hooks.take();
    node.calls();
    node.events();

    let message = "Exec lifecycle hook ([\"hook\"]) for Container \"web\" in Pod \"web_default(uid-web)\" failed - error: command 'hook' exited with 1, message: \"\"";
    answer(&mut node, HookKind::PostStart, &web, "web", Err(message.into()));
    assert_eq!(
        node.events()[..2],
        [("FailedPostStartHook".into(), message.into()), ("Killing".into(), "FailedPostStartHook".into())]
    );
    assert_eq!(node.calls()[..3], [stop("web", 30), create("web", 1), start("web")], "killed, then restarted");
    assert_eq!(hooks.take(), [(HookKind::PostStart, "web".into(), crate::node::lifecycle::POST_START_TIMEOUT)]);

    // It fails again: now the restart waits out the back-off.
    answer(&mut node, HookKind::PostStart, &web, "web", Err(message.into()));
    assert_eq!(node.calls(), [stop("web", 30)]);
    assert_eq!(node.waiting(&web, "web").map(|w| w.0), Some("CrashLoopBackOff".into()));
    node.advance(10);
    node.tick();
    assert_eq!(node.calls(), [create("web", 2), start("web")]);
}

#[test]
fn a_pre_stop_hook_runs_before_the_stop_which_gets_the_grace_it_left() {
    let (mut node, hooks) = node_with_hooks();
    let web = pod("web", RestartPolicy::Always, &[], &[with_pre_stop(app("web")), app("plain")]);
    node.apply(&[&web]);
    node.calls();
    node.events();

    node.apply(&[]);
    assert_eq!(
        node.calls(),
        [Call::ArmStop("web".into(), GRACE, crate::pods::MIN_GRACE), stop("plain", 30)],
        "the hooked container's deadline goes to the runtime first; the other stops at once"
    );
    assert_eq!(hooks.take(), [(HookKind::PreStop, "web".into(), GRACE)]);
    assert_eq!(node.reasons(), ["Killing", "Killing"]);

    node.advance(3);
    node.tick();
    assert_eq!(node.calls(), [], "no stop while the hook runs, and no second hook");
    assert_eq!(hooks.take(), []);

    node.advance(4);
    answer(&mut node, HookKind::PreStop, &web, "web", Err("hook failed".into()));
    assert_eq!(node.reasons(), ["FailedPreStopHook"]);
    assert_eq!(node.calls()[0], stop("web", 23), "30 s less the 7 s the hook took");
}

#[test]
fn a_pre_stop_hook_that_used_up_the_grace_leaves_the_minimum_and_an_unanswered_one_is_given_up() {
    let (mut node, hooks) = node_with_hooks();
    let web = pod("web", RestartPolicy::Always, &[], &[with_pre_stop(app("web"))]);
    node.apply(&[&web]);
    node.apply(&[]);
    node.calls();
    hooks.take();

    node.advance(GRACE.as_secs() + 3);
    node.tick();
    assert_eq!(node.calls()[0], stop("web", 2), "no answer past the grace period: stopped with the minimum");
    // A late answer changes nothing.
    node.advance(1);
    node.tick();
    node.calls();
}

#[test]
fn a_pod_past_its_active_deadline_fails_and_its_containers_stop_through_their_pre_stop_hooks() {
    let (mut node, hooks) = node_with_hooks();
    let mut web = pod("web", RestartPolicy::Always, &[], &[with_pre_stop(app("web")), app("plain")]);
    web.spec.active_deadline_seconds = Some(60);
    node.apply(&[&web]);
    node.calls();
    node.events();

    node.advance(59);
    node.tick();
    assert_eq!(node.calls(), []);
    assert_eq!(node.phase(&web), PodPhase::Running);

    node.advance(1);
    node.tick();
    assert_eq!(
        node.events()[0],
        ("DeadlineExceeded".into(), "Pod was active on the node longer than the specified deadline".into())
    );
    assert_eq!(node.calls(), [Call::ArmStop("web".into(), GRACE, crate::pods::MIN_GRACE), stop("plain", 30)]);
    assert_eq!(hooks.take(), [(HookKind::PreStop, "web".into(), GRACE)]);
    let st = node.status(&web);
    assert_eq!(
        (st.phase, st.reason.as_str(), st.message.as_str()),
        (PodPhase::Failed, "DeadlineExceeded", "Pod was active on the node longer than the specified deadline")
    );

    answer(&mut node, HookKind::PreStop, &web, "web", Ok(()));
    assert_eq!(node.calls(), [stop("web", 30)]);
    node.advance(60);
    node.tick();
    node.tick();
    assert_eq!(node.calls(), [], "nothing restarts, and the failed pod is kept");
    assert_eq!(node.phase(&web), PodPhase::Failed);
    assert_eq!(node.reasons(), [] as [&str; 0], "the deadline is reported once");
}
