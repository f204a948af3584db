//! Graceful termination: order, grace, overrun, removal.

use super::*;
use std::time::Duration;

/// A running pod with a sidecar and two app containers.
fn running_pod(node: &mut Node) -> Pod {
    let web = pod("web", RestartPolicy::Always, &[sidecar("proxy")], &[app("web"), app("worker")]);
    node.apply(&[&web]);
    node.tick();
    assert_eq!(node.rt.running(), ["proxy", "web", "worker"]);
    node.calls();
    node.events();
    web
}

#[test]
fn a_removed_pod_stops_its_apps_then_its_sidecars_then_loses_its_sandbox() {
    let mut node = Node::new();
    let web = running_pod(&mut node);
    node.apply(&[]);
    assert_eq!(node.calls(), [stop("web", 30), stop("worker", 30)], "app containers first");
    assert_eq!(node.reasons(), ["Killing", "Killing"]);
    assert!(node.statuses.status(&web.metadata.uid).is_some(), "the pod stays while anything runs");

    node.advance(10);
    node.tick();
    assert_eq!(node.calls(), [stop("proxy", 20)], "then sidecars, with the grace left");

    node.tick();
    assert_eq!(
        node.calls(),
        [Call::StopPodSandbox("web".into()), Call::RemovePodSandbox("web".into())],
        "the sandbox goes once nothing runs"
    );
    assert!(node.rt.sandboxes().is_empty() && node.rt.containers().is_empty());
    assert!(node.statuses.status(&web.metadata.uid).is_none(), "the pod is forgotten");
    node.tick();
    assert_eq!(node.calls(), []);
}

#[test]
fn a_pod_outliving_its_grace_is_reported_once_and_its_sidecars_get_the_minimum_grace() {
    let mut node = Node::new();
    running_pod(&mut node);
    node.rt.ignore_stop("web");
    node.apply(&[]);
    assert_eq!(node.calls(), [stop("web", 30), stop("worker", 30)]);
    node.events();

    node.advance(29);
    node.tick();
    assert_eq!(node.calls(), [], "each container is asked once");
    node.advance(6);
    node.tick();
    assert_eq!(node.reasons(), [] as [&str; 0], "not before the grace period and its margin have passed");
    node.advance(1);
    node.tick();
    assert_eq!(
        node.events(),
        [(
            "ExceededGracePeriod".into(),
            "Container runtime did not kill the pod within specified grace period; still running: proxy, web".into()
        )]
    );
    node.advance(10);
    node.tick();
    assert_eq!(node.reasons(), [] as [&str; 0], "reported once");

    node.rt.exit("web", 137);
    node.tick();
    assert_eq!(node.calls(), [stop("proxy", 2)], "no grace is left: the minimum");
    node.tick();
    assert_eq!(node.calls(), [Call::StopPodSandbox("web".into()), Call::RemovePodSandbox("web".into())]);
}

#[test]
fn an_evicted_pod_fails_with_kubelets_reason_message_and_condition_and_its_containers_stop_with_the_given_grace() {
    let mut node = Node::new();
    let web = running_pod(&mut node);
    let message = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi. ";
    let evict = |grace| crate::node::eviction::view::EvictPod {
        uid: web.metadata.uid.clone(),
        grace: Duration::from_secs(grace),
        message: message.into(),
        annotations: [("starved_resource".to_string(), "memory".to_string())].into(),
    };
    node.pm.handle(PodsCommand::Evict(evict(0)));
    node.tick();
    assert_eq!(node.events()[0], ("Evicted".into(), message.into()));
    assert_eq!(node.calls(), [stop("web", 2), stop("worker", 2)], "a hard eviction: the minimum grace");
    let st = node.status(&web);
    assert_eq!((st.phase, st.reason.as_str(), st.message.as_str()), (PodPhase::Failed, "Evicted", message));
    let dt = st.conditions.iter().find(|c| c.type_ == "DisruptionTarget").expect("DisruptionTarget");
    assert_eq!(
        (dt.status.as_str(), dt.reason.as_str(), dt.message.as_str()),
        ("True", "TerminationByKubelet", message)
    );

    // A second eviction of the same pod changes nothing; it is never started again.
    node.pm.handle(PodsCommand::Evict(evict(30)));
    node.advance(60);
    node.tick();
    node.tick();
    assert!(node.calls().iter().all(|c| !matches!(c, Call::StartContainer(_))), "nothing restarts");
    assert_eq!(node.reasons().iter().filter(|r| *r == "Evicted").count(), 0, "evicted once");
    assert_eq!(node.phase(&web), PodPhase::Failed);
}
