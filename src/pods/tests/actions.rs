//! Table tests of the pure decisions: `compute_pod_actions` (kubelet's
//! `TestComputePodActions*`) and `compute_kill_actions` (`TestKillPod*`).

use super::*;
use crate::api::{Probe, Quantity};
use crate::node::runtime::labels::CONTAINER_KIND as CONTAINER_KIND_LABEL;
use crate::node::runtime::{ContainerConfig, ContainerState, SandboxInfo};
use crate::pods::actions::{
    compute_pod_actions, CrashLoop, DeadInstance, KillContainer, PodActions, PodInput, StartContainer, StartReason,
};
use crate::pods::backoff::{Backoff, Key};
use crate::pods::termination::{compute_kill_actions, KillActions, RemovePod};
use crate::pods::view::PodView;
use crate::pods::{ContainerKind, DevicePrep, Termination, Waiting, WaitingReason};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ContainerState::{Created, Exited, Running};

/// The time of the decision.
fn now() -> SystemTime {
    t0() + Duration::from_secs(100)
}

/// Instance `attempt` of container `name`, id `<name>-<attempt>`, created at t0 + attempt.
fn instance(name: &str, attempt: u32, state: ContainerState, exit_code: i32) -> ContainerInfo {
    ContainerInfo {
        image_ref: String::new(),
        id: format!("{name}-{attempt}"),
        sandbox_id: "sandbox".into(),
        config: Arc::new(ContainerConfig { name: name.into(), attempt, ..Default::default() }),
        state,
        created_at: t0() + Duration::from_secs(attempt.into()),
        started_at: (state != Created).then(|| t0() + Duration::from_secs(attempt.into())),
        finished_at: (state == Exited).then(|| t0() + Duration::from_secs(attempt.into())),
        exit_code,
        reason: String::new(),
        message: String::new(),
        pid: None,
    }
}

fn sidecar_instance(name: &str, attempt: u32, state: ContainerState) -> ContainerInfo {
    let mut i = instance(name, attempt, state, 0);
    Arc::make_mut(&mut i.config).labels.insert(CONTAINER_KIND_LABEL.into(), ContainerKind::Sidecar.as_str().into());
    i
}

fn sandbox() -> SandboxInfo {
    SandboxInfo { id: "sandbox".into(), config: Arc::default(), created_at: t0(), ready: true, ips: vec![] }
}

/// What the decision reads besides the pod and its containers.
#[derive(Default)]
struct World {
    backoff: Backoff,
    waiting: HashMap<Key, Waiting>,
    started: HashSet<String>,
    devices: Option<HashMap<Key, DevicePrep>>,
    no_sandbox: bool,
    sandbox_dead: bool,
    post_start_running: bool,
}

impl World {
    fn decide(&self, pod: &Pod, containers: &[ContainerInfo]) -> PodActions {
        let sandbox = SandboxInfo { ready: !self.sandbox_dead, ..sandbox() };
        compute_pod_actions(&PodInput {
            pod,
            view: PodView { sandbox: (!self.no_sandbox).then_some(&sandbox), containers, ..Default::default() },
            backoff: &self.backoff,
            waiting: &self.waiting,
            startup_succeeded: &self.started,
            device_prep: self.devices.as_ref(),
            max_dead_per_container: 1,
            post_start_running: self.post_start_running,
            now: now(),
        })
    }
}

fn decide(pod: &Pod, containers: &[ContainerInfo]) -> PodActions {
    World::default().decide(pod, containers)
}

/// A start of a container with no instance yet.
fn first(name: &str, kind: ContainerKind) -> StartContainer {
    StartContainer {
        name: name.into(),
        kind,
        attempt: 0,
        replace: None,
        reason: StartReason::FirstStart,
        backoff_from: None,
    }
}

/// A restart of `name` after instance `attempt - 1` exited with `exit_code`.
fn restart(name: &str, kind: ContainerKind, attempt: u32, exit_code: i32, policy: RestartPolicy) -> StartContainer {
    StartContainer {
        attempt,
        reason: StartReason::Restart { exit_code, policy },
        backoff_from: Some(t0() + Duration::from_secs((attempt - 1).into())),
        ..first(name, kind)
    }
}

fn starts(a: &PodActions) -> Vec<&str> {
    a.start.iter().map(|s| s.name.as_str()).collect()
}

#[test]
fn a_new_pod_creates_its_sandbox_and_starts_every_app_container() {
    let p = pod("web", RestartPolicy::Always, &[], &[app("a"), app("b")]);
    let a = World { no_sandbox: true, ..Default::default() }.decide(&p, &[]);
    let want = PodActions {
        create_sandbox: true,
        start: vec![first("a", ContainerKind::App), first("b", ContainerKind::App)],
        ..Default::default()
    };
    assert_eq!(a, want);
}

#[test]
fn a_sandbox_waits_out_the_back_off_of_the_last_that_failed_and_old_dead_ones_go() {
    let p = pod("web", RestartPolicy::Always, &[], &[app("a")]);
    let mut world = World { sandbox_dead: true, ..Default::default() };
    // The last sandbox failed 5 s ago: its replacement waits 10 s.
    let key = crate::pods::actions::sandbox_key(&p.metadata.uid);
    world.backoff.next(&key, now() - Duration::from_secs(5), now() - Duration::from_secs(5));
    let a = world.decide(&p, &[]);
    assert_eq!((a.create_sandbox, a.sandbox_back_off, a.start.len()), (false, true, 0));
    let none = World { no_sandbox: true, backoff: world.backoff, ..Default::default() };
    assert!(none.decide(&p, &[]).sandbox_back_off, "also when the failed one left nothing behind");
    // Older sandboxes: a dead one without instances goes; one an instance still counts on
    // stays, and so does the newest.
    let older = [
        SandboxInfo { id: "s1".into(), ready: false, ..sandbox() },
        SandboxInfo { id: "s2".into(), ready: false, ..sandbox() },
    ];
    let mut exited = instance("a", 0, Exited, 1);
    exited.sandbox_id = "s2".into();
    let gc = |backoff: &Backoff| {
        compute_pod_actions(&PodInput {
            pod: &p,
            view: PodView {
                sandbox: Some(&sandbox()),
                older_sandboxes: &older,
                containers: std::slice::from_ref(&exited),
            },
            backoff,
            waiting: &HashMap::new(),
            startup_succeeded: &HashSet::new(),
            device_prep: None,
            max_dead_per_container: 1,
            post_start_running: false,
            now: now(),
        })
        .remove_sandboxes
    };
    assert_eq!(gc(&Backoff::default()), ["s1"]);
    assert!(gc(&none.backoff).is_empty(), "not while the sandbox back-off holds");
}

#[test]
fn a_dead_sandbox_is_replaced_once_nothing_runs_in_it() {
    let p = pod("web", RestartPolicy::Always, &[], &[app("a"), app("b")]);
    let dead = World { sandbox_dead: true, ..Default::default() };
    // Its network never came up: nothing ran, a new sandbox and first starts.
    let a = dead.decide(&p, &[]);
    assert!(a.create_sandbox);
    assert_eq!(starts(&a), ["a", "b"]);
    // Its pause process died under running containers: they are stopped first.
    let a = dead.decide(&p, &[instance("a", 0, Running, 0), instance("b", 0, Exited, 0)]);
    assert!(!a.create_sandbox);
    assert!(a.start.is_empty());
    assert_eq!(a.kill.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(), ["a"]);
    // Then the pod gets a new sandbox and its containers restart, counting on.
    let a = dead.decide(&p, &[instance("a", 0, Exited, 137), instance("b", 0, Exited, 0)]);
    assert!(a.create_sandbox);
    assert_eq!(a.start.iter().map(|s| (s.name.as_str(), s.attempt)).collect::<Vec<_>>(), [("a", 1), ("b", 1)]);
}

#[test]
fn a_running_pod_needs_nothing() {
    let p = pod("web", RestartPolicy::Always, &[], &[app("a"), app("b")]);
    let a = decide(&p, &[instance("a", 0, Running, 0), instance("b", 0, Running, 0)]);
    assert_eq!(a, PodActions::default());
}

#[test]
fn exited_app_containers_restart_as_the_policy_says() {
    use RestartPolicy::*;
    let cases = [
        (Always, 0, true, false),
        (Always, 1, true, false),
        (OnFailure, 0, false, true),
        (OnFailure, 1, true, false),
        (Never, 0, false, true),
        (Never, 1, false, true),
    ];
    for (policy, code, restarts, terminal) in cases {
        let p = pod("web", policy, &[], &[app("a")]);
        let a = decide(&p, &[instance("a", 0, Exited, code)]);
        let want = if restarts { vec![restart("a", ContainerKind::App, 1, code, policy)] } else { vec![] };
        assert_eq!((a.start, a.terminal), (want, terminal), "{policy:?} after exit {code}");
    }
}

#[test]
fn a_created_instance_that_never_ran_is_replaced() {
    let p = pod("web", RestartPolicy::Never, &[], &[app("a")]);
    let a = decide(&p, &[instance("a", 0, Created, 0)]);
    let want = StartContainer {
        attempt: 1,
        replace: Some("a-0".into()),
        reason: StartReason::CreatedNeverStarted,
        backoff_from: Some(t0()),
        ..first("a", ContainerKind::App)
    };
    assert_eq!(a.start, [want]);
}

#[test]
fn init_containers_start_one_at_a_time_and_hold_the_app_containers() {
    let p = pod("web", RestartPolicy::Always, &[app("i1"), app("i2")], &[app("a")]);
    let cases: [(&[ContainerInfo], &[&str]); 4] = [
        (&[], &["i1"]),
        (&[instance("i1", 0, Running, 0)], &[]),
        (&[instance("i1", 0, Exited, 0)], &["i2"]),
        (&[instance("i1", 0, Exited, 0), instance("i2", 0, Exited, 0)], &["a"]),
    ];
    for (containers, want) in cases {
        assert_eq!(starts(&decide(&p, containers)), want, "{containers:?}");
    }
    let a = decide(&p, &[]);
    assert_eq!(a.start[0].kind, ContainerKind::Init);
}

#[test]
fn a_failed_init_container_restarts_unless_the_policy_is_never() {
    for (policy, restarts) in
        [(RestartPolicy::Always, true), (RestartPolicy::OnFailure, true), (RestartPolicy::Never, false)]
    {
        let p = pod("web", policy, &[app("i1")], &[app("a")]);
        let a = decide(&p, &[instance("i1", 0, Exited, 1)]);
        let want = if restarts { vec![restart("i1", ContainerKind::Init, 1, 1, policy)] } else { vec![] };
        assert_eq!((a.start, a.terminal), (want, !restarts), "{policy:?}");
    }
}

#[test]
fn a_failed_init_container_under_never_stops_the_running_sidecars() {
    let p = pod("web", RestartPolicy::Never, &[sidecar("proxy"), app("i1")], &[app("a")]);
    let a = decide(&p, &[sidecar_instance("proxy", 0, Running), instance("i1", 0, Exited, 1)]);
    let kill = KillContainer {
        name: "proxy".into(),
        id: "proxy-0".into(),
        grace: GRACE,
        message: "Stopping container proxy".into(),
    };
    assert_eq!(a, PodActions { kill: vec![kill], terminal: true, ..Default::default() });
}

#[test]
fn a_sidecar_must_run_and_have_started_before_the_next_container() {
    let probed = Container { startup_probe: Some(Probe::default()), ..sidecar("proxy") };
    let p = pod("web", RestartPolicy::Always, &[probed, app("i1")], &[app("a")]);
    let a = decide(&p, &[]);
    assert_eq!(a.start, [first("proxy", ContainerKind::Sidecar)]);
    let running = [sidecar_instance("proxy", 0, Running)];
    assert_eq!(starts(&decide(&p, &running)), [] as [&str; 0], "its startup probe has not passed");
    let started = World { started: HashSet::from(["proxy-0".to_string()]), ..Default::default() };
    assert_eq!(starts(&started.decide(&p, &running)), ["i1"]);
}

#[test]
fn an_exited_sidecar_restarts_beside_the_apps_whatever_the_pods_policy() {
    let p = pod("web", RestartPolicy::Never, &[sidecar("proxy")], &[app("a")]);
    let a = decide(&p, &[sidecar_instance("proxy", 0, Exited), instance("a", 0, Running, 0)]);
    assert_eq!(a.start, [restart("proxy", ContainerKind::Sidecar, 1, 0, RestartPolicy::Always)]);
}

#[test]
fn a_container_in_back_off_waits_and_its_crash_loop_is_reported_once_per_message() {
    let p = pod("web", RestartPolicy::Always, &[], &[app("a")]);
    let key: Key = (p.metadata.uid.clone(), "a".into());
    let exited = [instance("a", 3, Exited, 1)];
    let mut world = World::default();
    world.backoff.next(&key, t0(), t0());
    world.backoff.next(&key, t0(), t0());
    let message = "back-off 20s restarting failed container=a pod=web_default(uid-web)".to_string();
    // The exit was at t0 + 3 and the decision is at t0 + 100: long past 20 s.
    assert_eq!(starts(&world.decide(&p, &exited)), ["a"]);
    let recent = [ContainerInfo { finished_at: Some(now() - Duration::from_secs(5)), ..exited[0].clone() }];
    let a = world.decide(&p, &recent);
    let crash = CrashLoop { name: "a".into(), message: message.clone(), report: true };
    assert_eq!(a, PodActions { back_off: vec![crash.clone()], ..Default::default() });
    let waiting = Waiting { reason: WaitingReason::CrashLoopBackOff, message, since: now() };
    world.waiting.insert(key, waiting);
    assert_eq!(world.decide(&p, &recent).back_off, [CrashLoop { report: false, ..crash }]);
}

#[test]
fn a_failed_create_is_retried_only_after_its_back_off() {
    let p = pod("web", RestartPolicy::Always, &[], &[app("a")]);
    let key: Key = (p.metadata.uid.clone(), "a".into());
    let mut world = World::default();
    let since = now() - Duration::from_secs(5);
    world.backoff.next(&key, since, since);
    let message = "cannot create container a".to_string();
    world.waiting.insert(key, Waiting { reason: WaitingReason::CreateContainerError, message, since });
    assert_eq!(world.decide(&p, &[]), PodActions::default(), "no crash loop: it never ran");
    world.backoff = Backoff::default();
    assert_eq!(
        world.decide(&p, &[]).start,
        [StartContainer { backoff_from: Some(since), ..first("a", ContainerKind::App) }]
    );
}

#[test]
fn a_container_with_plugin_devices_starts_once_they_are_prepared() {
    let mut gpu = app("a");
    gpu.resources.limits.insert("example.com/gpu".into(), Quantity::from_value(1, false));
    let p = pod("web", RestartPolicy::Always, &[], &[gpu]);
    let key: Key = (p.metadata.uid.clone(), "a".into());
    let mut world = World { devices: Some(HashMap::new()), ..Default::default() };
    let a = world.decide(&p, &[]);
    assert_eq!((a.prepare_devices, a.start), (vec!["a".to_string()], vec![]));
    for (prep, starts_now) in [
        (DevicePrep::Requested, false),
        (DevicePrep::Ready(Default::default()), true),
        (DevicePrep::Failed("no".into()), true),
    ] {
        world.devices = Some(HashMap::from([(key.clone(), prep.clone())]));
        let a = world.decide(&p, &[]);
        assert_eq!((a.prepare_devices.is_empty(), !a.start.is_empty()), (true, starts_now), "{prep:?}");
    }
}

#[test]
fn exited_instances_beyond_the_limit_are_removed() {
    let p = pod("web", RestartPolicy::Always, &[], &[app("a")]);
    let containers: Vec<ContainerInfo> =
        (0..4).map(|n| instance("a", n, if n == 3 { Running } else { Exited }, 1)).collect();
    let a = decide(&p, &containers);
    let dead = |n: u32| DeadInstance { name: "a".into(), id: format!("a-{n}") };
    assert_eq!(a.remove_dead, [dead(1), dead(0)], "the running one and one exited are kept");
}

/// A termination that began `secs` ago.
fn terminating(secs: u64) -> Termination {
    Termination::new(now() - Duration::from_secs(secs), GRACE)
}

fn kills(actions: &KillActions) -> Vec<(&str, u64)> {
    actions.stop.iter().map(|k| (k.name.as_str(), k.grace.as_secs())).collect()
}

#[test]
fn termination_stops_app_and_init_containers_before_sidecars() {
    let sandbox = sandbox();
    let all = [sidecar_instance("proxy", 0, Running), instance("a", 0, Running, 0), instance("i", 0, Running, 0)];
    let view = PodView { sandbox: Some(&sandbox), containers: &all, ..Default::default() };
    let a = compute_kill_actions(&terminating(0), view, now());
    assert_eq!(kills(&a), [("a", 30), ("i", 30)]);
    assert_eq!(a.requested, ["a-0", "i-0"]);
    assert_eq!((a.exceeded_grace, a.remove), (None, None));

    let apps_gone = [sidecar_instance("proxy", 0, Running), instance("a", 0, Exited, 143)];
    let a = compute_kill_actions(
        &terminating(10),
        PodView { sandbox: Some(&sandbox), containers: &apps_gone, ..Default::default() },
        now(),
    );
    assert_eq!(kills(&a), [("proxy", 20)], "sidecars last, with the grace left");
}

#[test]
fn termination_asks_each_container_once_never_below_the_minimum_grace() {
    let running = [instance("a", 0, Running, 0), instance("b", 0, Running, 0)];
    let view = PodView { sandbox: None, containers: &running, ..Default::default() };
    let mut t = terminating(29);
    t.requested.insert("a-0".into());
    let a = compute_kill_actions(&t, view, now());
    assert_eq!(kills(&a), [("b", 2)]);
    assert_eq!(a.requested, ["a-0", "b-0"]);
}

#[test]
fn a_pod_past_its_grace_and_margin_is_reported_once() {
    let running = [instance("a", 0, Running, 0)];
    let view = PodView { sandbox: None, containers: &running, ..Default::default() };
    assert_eq!(compute_kill_actions(&terminating(35), view, now()).exceeded_grace, None, "within the margin");
    let mut t = terminating(36);
    assert_eq!(compute_kill_actions(&t, view, now()).exceeded_grace, Some(vec!["a".to_string()]));
    t.warned = true;
    assert_eq!(compute_kill_actions(&t, view, now()).exceeded_grace, None);
}

#[test]
fn once_nothing_runs_the_sandbox_and_every_container_are_removed() {
    let sandbox = sandbox();
    let gone = [instance("a", 0, Exited, 0), instance("a", 1, Exited, 0), instance("b", 0, Created, 0)];
    let a = compute_kill_actions(
        &terminating(3),
        PodView { sandbox: Some(&sandbox), containers: &gone, ..Default::default() },
        now(),
    );
    let remove =
        RemovePod { sandboxes: vec!["sandbox".into()], containers: vec!["a-0".into(), "a-1".into(), "b-0".into()] };
    assert_eq!(a, KillActions { remove: Some(remove), ..Default::default() });
}

#[test]
fn the_active_deadline_counts_from_the_start_time_and_needs_both() {
    use crate::pods::actions::active_deadline_exceeded;
    let mut spec = crate::api::PodSpec { active_deadline_seconds: Some(30), ..Default::default() };
    let start = now() - Duration::from_secs(30);
    assert!(active_deadline_exceeded(&spec, Some(start), now()), "at the deadline, as kubelet's >=");
    assert!(!active_deadline_exceeded(&spec, Some(start + Duration::from_secs(1)), now()));
    assert!(!active_deadline_exceeded(&spec, None, now()), "no start time yet");
    spec.active_deadline_seconds = None;
    assert!(!active_deadline_exceeded(&spec, Some(start), now()));
}

#[test]
fn nothing_starts_while_a_post_start_hook_of_the_pod_runs() {
    let p = pod("web", RestartPolicy::Always, &[], &[app("a"), app("b")]);
    let world = World { post_start_running: true, ..Default::default() };
    assert_eq!(world.decide(&p, &[]).start, []);
    assert_eq!(World::default().decide(&p, &[]).start.len(), 2);
}

#[test]
fn drain_stops_every_pod_the_runtime_holds_with_the_grace_its_sandbox_recorded() {
    use crate::node::runtime::{labels, SandboxConfig};
    use crate::pods::termination::terminate_all;
    use crate::pods::view::Snapshot;
    let recorded =
        SandboxConfig { pod_uid: "with-sandbox".into(), termination_grace_period_seconds: 7, ..Default::default() };
    let with_sandbox = SandboxInfo { config: Arc::new(recorded), ..sandbox() };
    let mut orphan = instance("app", 0, Running, 0);
    Arc::make_mut(&mut orphan.config).labels.insert(labels::POD_UID.into(), "containers-only".into());
    let stops = terminate_all(&Snapshot::new(vec![with_sandbox], vec![orphan]), now());
    let graces: Vec<(&str, Duration)> = stops.iter().map(|(uid, t)| (uid.as_str(), t.grace)).collect();
    let default = Duration::from_secs(crate::api::defaults::DEFAULT_TERMINATION_GRACE_PERIOD as u64);
    assert_eq!(graces, [("containers-only", default), ("with-sandbox", Duration::from_secs(7))]);
    assert!(stops.values().all(|t| t.started == now() && t.requested.is_empty() && !t.warned));
}
