//! A sync that finds nothing changed tells nobody anything, and one that finds a change
//! still tells it.

use super::*;
use crate::api::{IntOrString, Probe, TcpSocketAction};

/// A container with a TCP liveness probe.
fn probed(name: &str) -> Container {
    let tcp = TcpSocketAction { port: IntOrString::Int(80), host: String::new() };
    Container { liveness_probe: Some(Probe { tcp_socket: Some(tcp), ..Default::default() }), ..app(name) }
}

#[test]
fn a_sync_with_nothing_changed_sends_the_prober_no_targets() {
    let mut n = Node::new();
    let web = pod("web", RestartPolicy::Never, &[], &[probed("web"), app("plain")]);
    n.apply(&[&web]);
    let sent = n.sent_targets();
    let last = sent.last().expect("the new pod's targets are sent");
    assert_eq!(last.len(), 1, "only the container with a probe is a target");
    assert!(last[0].running);

    n.advance(1);
    n.tick();
    n.tick();
    assert!(n.sent_targets().is_empty(), "nothing changed");
}

#[test]
fn a_container_exit_is_still_sent_to_the_prober_after_steady_syncs() {
    let mut n = Node::new();
    let web = pod("web", RestartPolicy::Never, &[], &[probed("web")]);
    n.apply(&[&web]);
    n.tick();
    n.sent_targets();

    n.rt.exit("web", 1);
    n.tick();
    let sent = n.sent_targets();
    let last = sent.last().expect("the exit changes the target");
    assert!(!last[0].running);
    assert!(!last[0].will_restart, "restartPolicy Never");
    assert_eq!(last[0].container_id.as_deref(), Some(n.instance("web").id.as_str()));
}

#[test]
fn a_pod_being_terminated_is_sent_as_terminating() {
    let mut n = Node::new();
    let web = pod("web", RestartPolicy::Always, &[], &[probed("web")]);
    n.apply(&[&web]);
    n.tick();
    n.sent_targets();

    n.apply(&[]);
    let sent = n.sent_targets();
    assert!(sent.last().expect("termination changes the target")[0].terminating);
}

#[test]
fn a_sync_with_nothing_changed_leaves_the_published_status_untouched() {
    let mut n = Node::new();
    let web = pod("web", RestartPolicy::Always, &[], &[probed("web")]);
    n.apply(&[&web]);
    n.tick();
    let before = n.status(&web);
    let writes = n.statuses.writes();

    n.advance(5);
    n.tick();
    assert_eq!(n.statuses.writes(), writes, "nothing was stored again");
    assert_eq!(n.status(&web), before, "transition times included");

    n.rt.exit("web", 1);
    n.tick();
    assert!(n.statuses.writes() > writes, "an exit is published");
    let exited = n.container(&web, "web").last_state.terminated.expect("the exit shows");
    assert_eq!(exited.exit_code, 1);
}

#[test]
fn a_readiness_result_is_published_after_steady_syncs() {
    let mut n = Node::new();
    let tcp = TcpSocketAction { port: IntOrString::Int(80), host: String::new() };
    let web = Container { readiness_probe: Some(Probe { tcp_socket: Some(tcp), ..Default::default() }), ..app("web") };
    let web = pod("web", RestartPolicy::Always, &[], &[web]);
    n.apply(&[&web]);
    n.tick();
    n.tick();
    assert!(!n.container(&web, "web").ready);

    // Nothing in the runtime changed: only the prober's result.
    n.probes.set(
        crate::node::prober::ProbeType::Readiness,
        &n.instance("web").id,
        crate::node::prober::ProbeResult::Success,
    );
    n.tick();
    assert!(n.container(&web, "web").ready);
    let ready = n.status(&web).conditions.into_iter().find(|c| c.type_ == "Ready").expect("a Ready condition");
    assert_eq!(ready.status, "True");
}

#[test]
fn a_removed_pod_leaves_nothing_of_its_status_behind() {
    let mut n = Node::new();
    let web = pod("web", RestartPolicy::Always, &[], &[app("web")]);
    n.apply(&[&web]);
    n.tick();
    assert!(n.pm.published.inputs.contains_key(&web.metadata.uid));

    n.apply(&[]);
    n.tick();
    n.tick();
    assert!(n.statuses.status(&web.metadata.uid).is_none(), "the pod is gone");
    assert!(n.pm.published.inputs.is_empty());
}
