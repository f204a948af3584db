//! Agent restarts (adoption, orphans), changed pods, stale instances and garbage collection.

use super::*;
use crate::api::PodPhase;
use crate::node::runtime::{labels, ContainerConfig, ContainerRuntime, SandboxConfig};
use std::collections::BTreeMap;

#[test]
fn after_an_agent_restart_running_containers_are_adopted_not_started_again() {
    let mut before = Node::new();
    let web = pod("web", RestartPolicy::Always, &[app("setup")], &[app("web")]);
    before.apply(&[&web]);
    before.rt.exit("setup", 0);
    before.tick();
    before.calls();

    let mut after = before.restart();
    after.apply(&[&web]);
    assert_eq!(after.calls(), [], "neither the sandbox nor any container is made again");
    assert_eq!(after.phase(&web), PodPhase::Running);
    assert_eq!(after.container(&web, "web").restart_count, 0);
}

#[test]
fn an_orphan_pod_is_terminated_only_once_every_source_has_reported() {
    let mut before = Node::new();
    let mut web = pod("web", RestartPolicy::Always, &[], &[app("web")]);
    web.spec.termination_grace_period_seconds = Some(10);
    before.apply(&[&web]);
    before.calls();

    let mut after = before.restart();
    after.tick();
    assert_eq!(after.calls(), [], "a source that has not reported may still want it");
    after.apply(&[]);
    assert_eq!(after.calls(), [stop("web", 10)], "with the grace period its sandbox recorded");
    after.tick();
    assert_eq!(after.calls(), [Call::StopPodSandbox("web".into()), Call::RemovePodSandbox("web".into())]);
}

#[test]
fn a_static_pod_with_a_new_uid_waits_until_its_old_version_is_gone() {
    let mut node = Node::new();
    let v1 = pod("web", RestartPolicy::Always, &[], &[app("web")]);
    let mut v2 = v1.clone();
    v2.metadata.uid = "uid-web-v2".into();
    node.apply(&[&v1]);
    node.calls();
    node.apply(&[&v2]);
    assert_eq!(node.calls(), [stop("web", 30)], "the old version stops; the new one does not start yet");
    node.tick();
    assert_eq!(node.calls(), [Call::StopPodSandbox("web".into()), Call::RemovePodSandbox("web".into())]);
    node.tick();
    assert_eq!(node.calls(), [Call::RunPodSandbox("web".into()), create("web", 0), start("web")]);
    assert_eq!(node.phase(&v2), PodPhase::Running);
}

#[test]
fn a_static_pod_with_the_same_uid_and_new_content_waits_until_its_old_version_is_gone() {
    let mut node = Node::new();
    let v1 = pod("web", RestartPolicy::Always, &[], &[app("web")]);
    let mut v2 = pod("web", RestartPolicy::Always, &[], &[app("web"), app("extra")]);
    v2.metadata.annotations.insert(CONFIG_HASH_ANNOTATION.into(), "v2".into());
    node.apply(&[&v1]);
    node.calls();
    node.apply(&[&v2]);
    assert_eq!(node.calls(), [stop("web", 30)]);
    node.tick();
    assert_eq!(node.calls(), [Call::StopPodSandbox("web".into()), Call::RemovePodSandbox("web".into())]);
    node.tick();
    assert_eq!(
        node.calls(),
        [Call::RunPodSandbox("web".into()), create("web", 0), start("web"), create("extra", 0), start("extra")]
    );
}

#[test]
fn a_container_created_but_never_started_is_removed_and_created_again() {
    let mut node = Node::new();
    let web = pod("web", RestartPolicy::Never, &[], &[app("web")]);
    // What an agent that died between create and start leaves behind.
    let sandbox = node
        .rt
        .run_pod_sandbox(&SandboxConfig {
            pod_uid: web.metadata.uid.clone(),
            pod_name: "web".into(),
            namespace: "default".into(),
            ..Default::default()
        })
        .unwrap();
    let labels = BTreeMap::from([
        (labels::POD_UID.to_string(), web.metadata.uid.clone()),
        (labels::CONTAINER_NAME.to_string(), "web".to_string()),
    ]);
    node.rt.create_container(&sandbox, &ContainerConfig { name: "web".into(), labels, ..Default::default() }).unwrap();
    node.calls();

    node.apply(&[&web]);
    assert_eq!(
        node.calls(),
        [Call::RemoveContainer("web".into()), create("web", 1), start("web")],
        "whatever the restart policy"
    );
    assert_eq!(node.rt.running(), ["web"]);
}

#[test]
fn garbage_collection_keeps_max_dead_per_container_exited_instances() {
    let mut node = Node::new();
    let web = pod("web", RestartPolicy::Always, &[], &[app("app")]);
    node.apply(&[&web]);
    for (wait, attempt) in [(0, 1), (10, 2)] {
        node.rt.exit("app", 1);
        node.advance(wait);
        node.tick();
        assert_eq!(node.instance("app").config.attempt, attempt);
    }
    node.calls();
    node.rt.exit("app", 1);
    node.advance(20);
    node.tick();
    assert_eq!(
        node.calls(),
        [create("app", 3), start("app"), Call::RemoveContainer("app".into())],
        "the newest instance and one exited one are kept (max_dead_per_container = 1)"
    );
    let attempts: Vec<u32> = node.rt.containers().iter().map(|c| c.config.attempt).collect();
    assert_eq!(attempts, [1, 2, 3]);
}
