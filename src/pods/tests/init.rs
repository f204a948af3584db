//! Init containers and sidecars (restartable init containers).

use super::*;
use crate::api::{PodPhase, Probe};
use crate::node::prober::{ProbeResult, ProbeType};
use crate::node::runtime::labels::CONTAINER_KIND as CONTAINER_KIND_LABEL;
use crate::pods::ContainerKind;

#[test]
fn init_containers_run_one_at_a_time_before_the_app_containers() {
    let mut node = Node::new();
    let web = pod("web", RestartPolicy::Always, &[app("init1"), app("init2")], &[app("web")]);
    node.apply(&[&web]);
    assert_eq!(node.calls(), [Call::RunPodSandbox("web".into()), create("init1", 0), start("init1")]);
    assert_eq!(node.phase(&web), PodPhase::Pending);
    node.tick();
    assert_eq!(node.calls(), [], "the app containers wait while init1 runs");
    node.rt.exit("init1", 0);
    node.tick();
    assert_eq!(node.calls(), [create("init2", 0), start("init2")]);
    node.rt.exit("init2", 0);
    node.tick();
    assert_eq!(node.calls(), [create("web", 0), start("web")]);
    assert_eq!(node.phase(&web), PodPhase::Running);
    assert_eq!(node.instance("init1").config.labels[CONTAINER_KIND_LABEL], ContainerKind::Init.as_str());
    assert_eq!(node.instance("web").config.labels[CONTAINER_KIND_LABEL], ContainerKind::App.as_str());
}

#[test]
fn a_failed_init_container_fails_the_pod_under_never() {
    let mut node = Node::new();
    let job = pod("job", RestartPolicy::Never, &[app("setup")], &[app("work")]);
    node.apply(&[&job]);
    node.calls();
    node.rt.exit("setup", 1);
    node.tick();
    assert_eq!(node.calls(), [], "neither the init container nor the app container starts");
    assert_eq!(node.phase(&job), PodPhase::Failed);
    node.advance(600);
    node.tick();
    assert_eq!(node.calls(), []);
}

#[test]
fn a_failed_init_container_is_restarted_under_always_and_on_failure() {
    for policy in [RestartPolicy::Always, RestartPolicy::OnFailure] {
        let mut node = Node::new();
        let web = pod("web", policy, &[app("setup")], &[app("web")]);
        node.apply(&[&web]);
        node.calls();
        node.rt.exit("setup", 1);
        node.tick();
        assert_eq!(node.calls(), [create("setup", 1), start("setup")], "{policy:?}");
        assert_eq!(node.phase(&web), PodPhase::Pending, "{policy:?}: the app container waits");
    }
}

#[test]
fn a_sidecar_starts_before_the_next_init_container_and_the_apps() {
    let mut node = Node::new();
    let web = pod("web", RestartPolicy::Always, &[sidecar("proxy"), app("setup")], &[app("web")]);
    node.apply(&[&web]);
    assert_eq!(node.calls(), [Call::RunPodSandbox("web".into()), create("proxy", 0), start("proxy")]);
    assert_eq!(node.instance("proxy").config.labels[CONTAINER_KIND_LABEL], ContainerKind::Sidecar.as_str());
    node.tick();
    assert_eq!(node.calls(), [create("setup", 0), start("setup")], "a running sidecar lets the next one start");
    node.rt.exit("setup", 0);
    node.tick();
    assert_eq!(node.calls(), [create("web", 0), start("web")]);
    assert_eq!(node.phase(&web), PodPhase::Running);
    assert_eq!(node.rt.running(), ["proxy", "web"]);
}

#[test]
fn a_sidecar_with_a_startup_probe_holds_the_next_container_until_it_started() {
    let mut node = Node::new();
    let proxy = Container { startup_probe: Some(Probe::default()), ..sidecar("proxy") };
    let web = pod("web", RestartPolicy::Always, &[proxy], &[app("web")]);
    node.apply(&[&web]);
    node.calls();
    node.tick();
    assert_eq!(node.calls(), [], "running is not started");
    node.probes.set(ProbeType::Startup, &node.instance("proxy").id, ProbeResult::Success);
    node.tick();
    assert_eq!(node.calls(), [create("web", 0), start("web")]);
}

#[test]
fn a_sidecar_is_restarted_whatever_the_pods_policy() {
    let mut node = Node::new();
    let job = pod("job", RestartPolicy::Never, &[sidecar("proxy")], &[app("work")]);
    node.apply(&[&job]);
    node.tick();
    assert_eq!(node.rt.running(), ["proxy", "work"]);
    node.calls();
    node.rt.exit("proxy", 0);
    node.tick();
    assert_eq!(node.calls(), [create("proxy", 1), start("proxy")]);
}

#[test]
fn sidecars_stop_once_the_app_containers_are_done() {
    let mut node = Node::new();
    let job = pod("job", RestartPolicy::Never, &[sidecar("proxy")], &[app("work")]);
    node.apply(&[&job]);
    node.tick();
    node.calls();
    node.events();
    node.rt.exit("work", 0);
    node.tick();
    assert_eq!(node.calls(), [stop("proxy", 30)], "with the pod's grace period");
    assert_eq!(node.events(), [("Killing".into(), "Stopping container proxy".into())]);
    assert_eq!(node.phase(&job), PodPhase::Succeeded);
    node.tick();
    assert_eq!(node.calls(), [], "a stopped sidecar of a finished pod stays stopped");
}
