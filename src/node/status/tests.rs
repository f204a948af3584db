//! Pod status tests: phases, conditions and container states as kubelet computes them.

use super::*;
use crate::node::runtime::{ContainerConfig, ContainerState as RtState};

fn info(name: &str, state: RtState, exit: i32, attempt: u32) -> ContainerInfo {
    ContainerInfo {
        image_ref: String::new(),
        id: format!("{name}-{attempt}"),
        sandbox_id: "s".into(),
        config: Arc::new(ContainerConfig { name: name.into(), attempt, ..Default::default() }),
        state,
        created_at: SystemTime::UNIX_EPOCH,
        started_at: Some(SystemTime::UNIX_EPOCH),
        finished_at: (state == RtState::Exited).then_some(SystemTime::UNIX_EPOCH),
        exit_code: exit,
        reason: match (state, exit) {
            (RtState::Exited, 0) => "Completed".into(),
            (RtState::Exited, _) => "Error".into(),
            _ => String::new(),
        },
        message: String::new(),
        pid: None,
    }
}

fn pod(policy: RestartPolicy, inits: &[(&str, bool)], apps: &[&str]) -> Pod {
    let mut p = Pod::default();
    p.spec.restart_policy = policy.as_str().into();
    for (n, sidecar) in inits {
        p.spec.init_containers.push(Container {
            name: n.to_string(),
            restart_policy: sidecar.then(|| RestartPolicy::Always.as_str().to_string()),
            ..Default::default()
        });
    }
    for n in apps {
        p.spec.containers.push(Container { name: n.to_string(), ..Default::default() });
    }
    p
}

fn obs(current: Option<ContainerInfo>) -> ContainerObservation {
    let running = current.as_ref().is_some_and(|c| c.state == RtState::Running);
    ContainerObservation { current, ready: running, started: running, ..Default::default() }
}

fn status(p: &Pod, init: Vec<(&str, ContainerObservation)>, app: Vec<(&str, ContainerObservation)>) -> PodStatus {
    let init: BTreeMap<String, ContainerObservation> = init.into_iter().map(|(n, o)| (n.to_string(), o)).collect();
    let app: BTreeMap<String, ContainerObservation> = app.into_iter().map(|(n, o)| (n.to_string(), o)).collect();
    let o = PodObservation {
        pod: p,
        init: &init,
        app: &app,
        sandbox_created: Some(SystemTime::UNIX_EPOCH),
        sandbox_ready: true,
        host_ip: "10.0.0.5",
        sandbox_ips: &[],
        runtime: "process",
    };
    pod_status(&o, None, SystemTime::UNIX_EPOCH)
}

#[test]
fn the_pod_ip_is_the_sandboxs_on_the_pod_network_and_the_nodes_on_the_host_network() {
    let p = pod(RestartPolicy::Always, &[], &["app"]);
    let (init, app) = (BTreeMap::new(), BTreeMap::new());
    let observe = |p: &Pod, ips: &[String], runtime: &str| {
        let o = PodObservation {
            pod: p,
            init: &init,
            app: &app,
            sandbox_created: None,
            sandbox_ready: true,
            host_ip: "10.0.0.5",
            sandbox_ips: ips,
            runtime,
        };
        let s = pod_status(&o, None, SystemTime::UNIX_EPOCH);
        (s.pod_ip, s.pod_ips.into_iter().map(|i| i.ip).collect::<Vec<_>>(), s.host_ip)
    };
    let both = ["10.222.0.7".to_string(), "fd00::7".to_string()];
    assert_eq!(
        observe(&p, &both, "cri"),
        ("10.222.0.7".into(), vec!["10.222.0.7".to_string(), "fd00::7".into()], "10.0.0.5".into())
    );
    // On the pod network with no IP yet: none, as kubelet shows it.
    assert_eq!(observe(&p, &[], "cri"), (String::new(), vec![], "10.0.0.5".into()));
    // The process runtime, and host-network pods: the node's address.
    assert_eq!(observe(&p, &[], "process").0, "10.0.0.5");
    let mut host = p.clone();
    host.spec.host_network = true;
    assert_eq!(observe(&host, &[], "cri").0, "10.0.0.5");
}

fn cond<'a>(s: &'a PodStatus, t: &str) -> &'a PodCondition {
    s.conditions.iter().find(|c| c.type_ == t).unwrap()
}

#[test]
fn running_pod_is_ready() {
    let p = pod(RestartPolicy::Always, &[], &["app"]);
    let s = status(&p, vec![], vec![("app", obs(Some(info("app", RtState::Running, 0, 0))))]);
    assert_eq!(s.phase, PodPhase::Running);
    assert_eq!(cond(&s, "Ready").status, "True");
    assert_eq!(s.pod_ip, "10.0.0.5");
    assert!(s.container_statuses[0].state.running.is_some());
}

#[test]
fn pending_init_holds_the_pod_in_pending_with_kubelets_reasons() {
    let p = pod(RestartPolicy::Always, &[("setup", false)], &["app"]);
    let s = status(&p, vec![("setup", obs(Some(info("setup", RtState::Running, 0, 0))))], vec![]);
    assert_eq!(s.phase, PodPhase::Pending);
    let init = cond(&s, "Initialized");
    assert_eq!((init.status.as_str(), init.reason.as_str()), ("False", "ContainersNotInitialized"));
    assert_eq!(init.message, "containers with incomplete status: [setup]");
    assert_eq!(s.container_statuses[0].state.waiting.as_ref().unwrap().reason, "PodInitializing");
    let ready = cond(&s, "Ready");
    assert_eq!(
        (ready.reason.as_str(), ready.message.as_str()),
        ("ContainersNotReady", "containers with unready status: [app]")
    );
}

#[test]
fn failed_init_with_restart_never_fails_the_pod() {
    let p = pod(RestartPolicy::Never, &[("setup", false)], &["app"]);
    let s = status(&p, vec![("setup", obs(Some(info("setup", RtState::Exited, 2, 0))))], vec![]);
    assert_eq!(s.phase, PodPhase::Failed);
    assert_eq!(cond(&s, "Ready").reason, "PodFailed");
}

#[test]
fn phases_for_exited_app_containers_follow_restart_policy() {
    for (policy, exit, want) in [
        (RestartPolicy::Never, 0, PodPhase::Succeeded),
        (RestartPolicy::Never, 1, PodPhase::Failed),
        (RestartPolicy::OnFailure, 0, PodPhase::Succeeded),
        (RestartPolicy::OnFailure, 1, PodPhase::Running),
        (RestartPolicy::Always, 0, PodPhase::Running),
    ] {
        let p = pod(policy, &[], &["app"]);
        let s = status(&p, vec![], vec![("app", obs(Some(info("app", RtState::Exited, exit, 0))))]);
        assert_eq!(s.phase, want, "{policy:?} exit {exit}");
    }
}

#[test]
fn crash_loop_shows_waiting_with_last_state() {
    let p = pod(RestartPolicy::Always, &[], &["app"]);
    let mut o = obs(Some(info("app", RtState::Exited, 1, 3)));
    o.waiting = Some(("CrashLoopBackOff".into(), "back-off 40s restarting failed container=app pod=x".into()));
    let s = status(&p, vec![], vec![("app", o)]);
    let c = &s.container_statuses[0];
    assert_eq!(c.state.waiting.as_ref().unwrap().reason, "CrashLoopBackOff");
    assert_eq!(c.last_state.terminated.as_ref().unwrap().exit_code, 1);
    assert_eq!(c.restart_count, 3);
    assert_eq!(s.phase, PodPhase::Running);
}

#[test]
fn running_sidecar_counts_as_initialized_and_must_be_ready() {
    let p = pod(RestartPolicy::Always, &[("proxy", true)], &["app"]);
    let mut side = obs(Some(info("proxy", RtState::Running, 0, 0)));
    side.ready = false;
    let s = status(&p, vec![("proxy", side)], vec![("app", obs(Some(info("app", RtState::Running, 0, 0))))]);
    assert_eq!(cond(&s, "Initialized").status, "True");
    assert_eq!(cond(&s, "Ready").message, "containers with unready status: [proxy]");
    assert_eq!(s.phase, PodPhase::Running);
}

#[test]
fn transition_times_survive_unchanged_conditions() {
    let p = pod(RestartPolicy::Always, &[], &["app"]);
    let s1 = status(&p, vec![], vec![("app", obs(Some(info("app", RtState::Running, 0, 0))))]);
    let later = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(100);
    let init = BTreeMap::new();
    let app: BTreeMap<String, ContainerObservation> =
        [("app".to_string(), obs(Some(info("app", RtState::Exited, 1, 0))))].into_iter().collect();
    let o = PodObservation {
        pod: &p,
        init: &init,
        app: &app,
        sandbox_created: None,
        sandbox_ready: true,
        host_ip: "",
        sandbox_ips: &[],
        runtime: "process",
    };
    let s2 = pod_status(&o, Some(&s1), later);
    assert_eq!(cond(&s2, "PodScheduled").last_transition_time, Some(Time(SystemTime::UNIX_EPOCH)));
    assert_eq!(cond(&s2, "Ready").last_transition_time, Some(Time(later)));
}

#[test]
fn publishing_what_the_cache_already_shows_stores_nothing() {
    let cache = StatusCache::default();
    let mut p = pod(RestartPolicy::Always, &[], &["app"]);
    p.metadata.uid = "u1".into();
    let p = Arc::new(p);
    let s = status(&p, vec![], vec![("app", obs(Some(info("app", RtState::Running, 0, 0))))]);
    let started = Some(Time(SystemTime::UNIX_EPOCH));
    let s = PodStatus { start_time: started, ..s };

    assert!(cache.publish(&p, s.clone()), "a new pod is stored");
    let stored = cache.list().pods().last().expect("stored");
    assert_eq!(stored.metadata.creation_timestamp, started, "created when its sandbox was");
    let writes = cache.writes();
    assert!(!cache.publish(&p, s.clone()), "the same pod and status again");
    let copy = Arc::new(Pod::clone(&p));
    assert!(!cache.publish(&copy, s.clone()), "an equal pod and the same status");
    assert_eq!(cache.writes(), writes);
    assert_eq!(Arc::strong_count(&copy), 2, "the cache holds the newer object, so the older can be freed");
    assert_eq!(Arc::strong_count(&p), 1);

    let mut ready = s.clone();
    ready.conditions[2].status = "False".into();
    assert!(cache.publish(&p, ready), "a changed status is stored");
    let mut deleted = Arc::clone(&p);
    Arc::make_mut(&mut deleted).metadata.deletion_timestamp = started;
    assert!(cache.publish(&deleted, s), "a changed pod is stored");
    assert_eq!(cache.list().pods().last().expect("stored").metadata.deletion_timestamp, started);
}

#[test]
fn the_listing_serializes_as_the_pods_themselves_in_namespace_and_name_order() {
    let cache = StatusCache::default();
    for (uid, name) in [("u1", "b"), ("u2", "a")] {
        let mut p = pod(RestartPolicy::Always, &[], &["app"]);
        p.metadata.uid = uid.into();
        p.metadata.name = name.into();
        let p = Arc::new(p);
        let s = status(&p, vec![], vec![("app", obs(Some(info("app", RtState::Running, 0, 0))))]);
        cache.publish(&p, PodStatus { start_time: Some(Time(SystemTime::UNIX_EPOCH)), ..s });
    }
    let listed = serde_json::to_value(cache.list()).unwrap();
    let pods: Vec<Pod> = cache.list().pods().collect();
    assert_eq!(listed, serde_json::to_value(&pods).unwrap(), "written out one at a time, the same JSON");
    assert_eq!(pods.iter().map(|p| p.metadata.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    assert!(pods.iter().all(|p| p.status.is_some() && p.metadata.creation_timestamp.is_some()));
    assert_eq!(cache.statuses().len(), 2);
}
