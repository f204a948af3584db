//! kubelet's resource fit at admission: a pod from the apiserver that does not fit in what
//! the node allocates to pods fails as `OutOf<resource>` and never runs; static pods are
//! never refused by it, but count in what is used.

use super::*;
use crate::api::manifest::PodSource;
use crate::api::{Quantity, Time};
use crate::pods::fit::NodeAllocatable;

/// A node that allocates 1 cpu, 1 GiB and `pods` pods.
fn small_node(pods: i64) -> Node {
    let mut node = Node::new();
    node.pm.act.cfg.allocatable = NodeAllocatable { cpu_millis: 1000, memory: 1 << 30, pods, ..Default::default() };
    node
}

/// A container `name` requesting `requests` (as the apiserver defaults them).
fn asking(name: &str, requests: &[(&str, &str)]) -> Container {
    let mut c = app(name);
    c.resources.requests = requests.iter().map(|(k, v)| (k.to_string(), Quantity::parse(v).unwrap())).collect();
    c
}

/// A pod from the apiserver, created `created` seconds after `t0`, whose one container
/// (named after the pod) requests `requests`.
fn api_pod(name: &str, created: u64, requests: &[(&str, &str)]) -> Pod {
    let mut p = pod(name, RestartPolicy::Always, &[], &[asking(name, requests)]);
    p.metadata.annotations.insert(CONFIG_SOURCE_ANNOTATION.into(), PodSource::Api.as_str().into());
    p.metadata.annotations.remove(CONFIG_HASH_ANNOTATION);
    p.metadata.creation_timestamp = Some(Time(t0() + Duration::from_secs(created)));
    p
}

/// The apiserver now binds exactly these pods to the node.
fn bind(node: &mut Node, pods: &[&Pod]) {
    let pods = pods.iter().map(|p| Arc::new((*p).clone())).collect();
    node.pm.handle(PodsCommand::Update { source: PodSource::Api, pods });
}

/// Whether the pod's sandbox was asked for in `calls`.
fn started(calls: &[Call], pod: &Pod) -> bool {
    calls.contains(&Call::RunPodSandbox(pod.metadata.name.clone()))
}

/// The pod is Failed with this reason, its status message is kubelet's, and the event too.
fn assert_refused(node: &Node, pod: &Pod, reason: &str, message: &str) {
    let status = node.status(pod);
    assert_eq!(
        (status.phase, status.reason.as_str(), status.message.as_str()),
        (PodPhase::Failed, reason, format!("Pod was rejected: {message}").as_str())
    );
    assert!(node.events().contains(&(reason.to_string(), message.to_string())), "the event is kubelet's");
}

#[test]
fn an_api_pod_short_of_cpu_fails_as_out_of_cpu_and_never_starts() {
    let mut node = small_node(110);
    let web = api_pod("web", 0, &[("cpu", "500m")]);
    let big = api_pod("big", 1, &[("cpu", "600m")]);
    bind(&mut node, &[&web]);
    bind(&mut node, &[&web, &big]);
    assert_refused(
        &node,
        &big,
        "OutOfcpu",
        "Node didn't have enough resource: cpu, requested: 600, used: 500, capacity: 1000",
    );
    assert!(!started(&node.calls(), &big));
    node.advance(5);
    node.tick();
    assert!(!started(&node.calls(), &big), "a refusal is final");
    assert_eq!(node.phase(&web), PodPhase::Running);
}

#[test]
fn an_api_pod_that_fits_runs() {
    let mut node = small_node(110);
    let web = api_pod("web", 0, &[("cpu", "500m"), ("memory", "512Mi")]);
    let side = api_pod("side", 1, &[("cpu", "500m"), ("memory", "512Mi")]);
    bind(&mut node, &[&web, &side]);
    let calls = node.calls();
    assert!(started(&calls, &web) && started(&calls, &side), "{calls:?}");
    assert_eq!((node.phase(&web), node.phase(&side)), (PodPhase::Running, PodPhase::Running));
}

#[test]
fn a_static_pod_is_never_refused_by_the_fit_but_counts_in_what_is_used() {
    let mut node = small_node(110);
    let mut own = pod("own", RestartPolicy::Always, &[], &[asking("own", &[("cpu", "4"), ("example.com/gpu", "1")])]);
    own.metadata.creation_timestamp = Some(Time(t0()));
    node.apply(&[&own]);
    assert!(started(&node.calls(), &own), "the node owner's choice");
    assert_eq!(node.phase(&own), PodPhase::Running);

    let web = api_pod("web", 1, &[("cpu", "100m")]);
    bind(&mut node, &[&web]);
    assert_refused(
        &node,
        &web,
        "OutOfcpu",
        "Node didn't have enough resource: cpu, requested: 100, used: 4000, capacity: 1000",
    );
}

#[test]
fn api_pods_beyond_the_pods_bound_fail_as_out_of_pods() {
    let mut node = small_node(2);
    let own = pod("own", RestartPolicy::Always, &[], &[app("own")]);
    let a = api_pod("a", 1, &[]);
    let b = api_pod("b", 2, &[]);
    node.apply(&[&own]);
    bind(&mut node, &[&a, &b]);
    assert_eq!(node.phase(&a), PodPhase::Running);
    assert_refused(
        &node,
        &b,
        "OutOfpods",
        "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2",
    );
    assert!(!started(&node.calls(), &b));
}

#[test]
fn an_extended_resource_the_node_does_not_have_is_out_of_it() {
    // No device manager: the node has no extended resources at all.
    let mut node = small_node(110);
    let gpu = api_pod("gpu", 0, &[("cpu", "100m"), ("example.com/gpu", "1")]);
    bind(&mut node, &[&gpu]);
    assert_refused(
        &node,
        &gpu,
        "OutOfexample.com/gpu",
        "Node didn't have enough resource: example.com/gpu, requested: 1, used: 0, capacity: 0",
    );
    assert!(!started(&node.calls(), &gpu));
}

#[test]
fn terminal_and_refused_pods_do_not_count_as_used() {
    let mut node = small_node(110);
    let mut job = api_pod("job", 0, &[("cpu", "800m")]);
    job.spec.restart_policy = RestartPolicy::Never.as_str().into();
    let early = api_pod("early", 1, &[("cpu", "500m")]);
    bind(&mut node, &[&job, &early]);
    assert_eq!(node.status(&early).reason, "OutOfcpu", "the job holds 800m while it runs");

    node.advance(1);
    node.rt.exit("job", 0);
    node.tick();
    assert_eq!(node.phase(&job), PodPhase::Succeeded);
    node.calls();
    // Neither the finished job nor the refused pod holds anything now.
    let late = api_pod("late", 2, &[("cpu", "1")]);
    bind(&mut node, &[&job, &early, &late]);
    assert!(started(&node.calls(), &late));
    assert_eq!(node.phase(&late), PodPhase::Running);
}

#[test]
fn pods_bound_together_are_admitted_oldest_first() {
    let mut node = small_node(110);
    // `uid-a-new` comes first in uid order, but was created last.
    let old = api_pod("z-old", 0, &[("cpu", "600m")]);
    let new = api_pod("a-new", 5, &[("cpu", "600m")]);
    bind(&mut node, &[&new, &old]);
    assert_eq!(node.phase(&old), PodPhase::Running);
    assert_eq!(node.status(&new).reason, "OutOfcpu");
}

#[test]
fn a_running_api_pod_is_kept_after_a_restart_with_less_allocatable() {
    let mut before = small_node(110);
    let web = api_pod("web", 0, &[("cpu", "800m")]);
    bind(&mut before, &[&web]);
    assert_eq!(before.phase(&web), PodPhase::Running);
    before.calls();

    // The agent restarts with more reserved for the system: refusing the pod now would
    // leave its container running under a Failed pod.
    let mut after = before.restart();
    after.pm.act.cfg.allocatable.cpu_millis = 500;
    bind(&mut after, &[&web]);
    assert_eq!(after.phase(&web), PodPhase::Running);
    assert_eq!(after.calls(), [], "nothing is stopped or started again");
}
