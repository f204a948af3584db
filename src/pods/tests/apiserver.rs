//! Pods from the apiserver: the source must report before orphans are told apart, and a
//! pod the apiserver deletes stops with the deletion's grace period and is not taken on
//! again while the apiserver still lists it (until the node deletes it there).

use super::*;
use crate::api::manifest::PodSource;
use crate::api::Time;

/// A pod from the apiserver (no config hash; its uid is the apiserver's).
fn api_pod(name: &str) -> Pod {
    let mut p = pod(name, RestartPolicy::Always, &[], &[app(name)]);
    p.metadata.annotations.insert(CONFIG_SOURCE_ANNOTATION.into(), PodSource::Api.as_str().into());
    p.metadata.annotations.remove(CONFIG_HASH_ANNOTATION);
    p
}

/// The same pod being deleted with `grace` seconds.
fn deleting(p: &Pod, grace: i64) -> Pod {
    let mut p = p.clone();
    p.metadata.deletion_timestamp = Some(Time(t0()));
    p.metadata.deletion_grace_period_seconds = Some(grace);
    p
}

/// The apiserver now binds exactly these pods to the node.
fn bind(node: &mut Node, pods: &[&Pod]) {
    let pods = pods.iter().map(|p| Arc::new((*p).clone())).collect();
    node.pm.handle(PodsCommand::Update { source: PodSource::Api, pods });
}

#[test]
fn a_pod_deleted_in_the_apiserver_stops_with_the_deletions_grace_and_is_not_taken_on_again() {
    let mut node = Node::new();
    let web = api_pod("web");
    bind(&mut node, &[&web]);
    assert_eq!(node.phase(&web), PodPhase::Running);
    node.calls();
    bind(&mut node, &[&deleting(&web, 7)]);
    assert_eq!(node.calls(), [stop("web", 7)], "the deletion's grace, not the spec's 30 s");
    node.tick();
    assert_eq!(node.calls(), [Call::StopPodSandbox("web".into()), Call::RemovePodSandbox("web".into())]);
    assert_eq!(node.pm.act.statuses.take_removed(), ["uid-web"], "done: the node may delete it in the apiserver");
    node.advance(5);
    node.tick();
    node.tick();
    assert_eq!(node.calls(), [], "still listed by the apiserver, never started again");
    bind(&mut node, &[]);
    bind(&mut node, &[&web]);
    assert!(node.calls().contains(&Call::RunPodSandbox("web".into())), "a pod bound again (same uid) runs");
}

#[test]
fn a_pod_already_being_deleted_when_first_seen_is_only_terminated() {
    let mut node = Node::new();
    let web = deleting(&api_pod("web"), 3);
    bind(&mut node, &[&web]);
    node.tick();
    let calls = node.calls();
    assert!(!calls.contains(&Call::RunPodSandbox("web".into())), "{calls:?}");
    assert_eq!(node.pm.act.statuses.take_removed(), ["uid-web"]);
}

#[test]
fn with_an_apiserver_source_orphans_wait_for_it_too() {
    let mut before = Node::new();
    let web = api_pod("web");
    bind(&mut before, &[&web]);
    before.calls();

    let mut after = before.restart();
    after.pm.sources.expected.push(PodSource::Api);
    after.apply(&[]);
    after.tick();
    assert_eq!(after.calls(), [], "the static pods alone do not make web an orphan");
    bind(&mut after, &[&web]);
    after.tick();
    assert_eq!(after.calls(), [], "web is the apiserver's: adopted as it runs");
    assert_eq!(after.phase(&web), PodPhase::Running);
}
