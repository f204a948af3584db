//! The node's health as its `Ready` condition and `/healthz` report it: the failed checks,
//! the problems in kubelet's words, and the node's conditions. Pure: the local API and
//! cluster mode's node report both build from these.

use crate::api::{NodeCondition, Time};
use crate::node::eviction::messages::condition_text;
use crate::node::eviction::{NodeConditions, Pressure};
use std::time::SystemTime;

/// kubelet's `device-plugin` health check: the registration server's failure, if any.
pub fn device_plugin_check(d: &crate::node::devicemanager::Devices) -> (&'static str, Option<String>) {
    let failed = d
        .server_error()
        .map(|e| format!("device plugin registration gRPC server failed and no device plugins can register: {e}"));
    ("device-plugin", failed)
}

/// The problems `/healthz` and the node's Ready condition report: the dead threads in one
/// sentence, then each failed check's.
pub fn problems(dead: &[String], checks: &[(&str, Option<String>)]) -> Vec<String> {
    let mut out = Vec::new();
    if !dead.is_empty() {
        out.push(format!("manager thread(s) died: {}", dead.join(", ")));
    }
    out.extend(checks.iter().filter_map(|(_, problem)| problem.clone()));
    out
}

/// The three pressure conditions in kubelet's order and words, as the eviction manager
/// holds them: `MemoryPressure`, `DiskPressure`, `PIDPressure`, each True or False since its
/// last transition.
pub fn pressure_conditions(pressure: &NodeConditions, now: SystemTime) -> Vec<NodeCondition> {
    Pressure::ALL
        .into_iter()
        .map(|p| {
            let c = pressure.get(p);
            let (reason, message) = condition_text(p, c.pressure);
            NodeCondition {
                type_: p.as_str().into(),
                status: if c.pressure { "True" } else { "False" }.into(),
                last_heartbeat_time: Some(Time(now)),
                last_transition_time: Some(Time(c.since)),
                reason: reason.into(),
                message: message.into(),
            }
        })
        .collect()
}

/// The node's conditions in kubelet's order and words: the pressure conditions as the
/// eviction manager last decided them (False since the agent started, before it first
/// decides), and Ready, False with the problems when there are any.
pub fn node_conditions(
    problems: &[String],
    pressure: Option<NodeConditions>,
    started: SystemTime,
    ready_since: SystemTime,
    now: SystemTime,
) -> Vec<NodeCondition> {
    node_conditions_under(&pressure.unwrap_or(NodeConditions::calm(started)), problems, ready_since, now)
}

/// The node's conditions with the eviction manager's pressure conditions, then Ready.
pub fn node_conditions_under(
    pressure: &NodeConditions,
    problems: &[String],
    ready_since: SystemTime,
    now: SystemTime,
) -> Vec<NodeCondition> {
    let mut out = pressure_conditions(pressure, now);
    let ready = |status: &str, reason: &str, message: String| NodeCondition {
        type_: "Ready".into(),
        status: status.into(),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(ready_since)),
        reason: reason.into(),
        message,
    };
    out.push(if problems.is_empty() {
        ready("True", "KubeletReady", "kubelet is posting ready status".into())
    } else {
        ready("False", "KubeletNotReady", problems.join("; "))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::eviction::ConditionState;
    use std::time::Duration;

    #[test]
    fn the_pressure_conditions_are_the_eviction_managers_in_kubelets_order_and_words() {
        let t = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let pressure = NodeConditions {
            memory: ConditionState { pressure: true, since: t(5) },
            disk: ConditionState { pressure: false, since: t(1) },
            pid: ConditionState { pressure: true, since: t(7) },
        };
        let got: Vec<_> = node_conditions_under(&pressure, &[], t(2), t(9))
            .into_iter()
            .map(|c| (c.type_, c.status, c.reason, c.message, c.last_transition_time, c.last_heartbeat_time))
            .collect();
        let row = |ty: &str, st: &str, reason: &str, message: &str, since| {
            (
                ty.to_string(),
                st.to_string(),
                reason.to_string(),
                message.to_string(),
                Some(Time(t(since))),
                Some(Time(t(9))),
            )
        };
        assert_eq!(
            got,
            [
                row(
                    "MemoryPressure",
                    "True",
                    "KubeletHasInsufficientMemory",
                    "kubelet has insufficient memory available",
                    5
                ),
                row("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure", 1),
                row("PIDPressure", "True", "KubeletHasInsufficientPID", "kubelet has insufficient PID available", 7),
                row("Ready", "True", "KubeletReady", "kubelet is posting ready status", 2),
            ]
        );
        let calm = node_conditions(&["x died".into()], None, t(1), t(2), t(3));
        assert_eq!(calm.len(), 4);
        assert!(calm[..3].iter().all(|c| c.status == "False" && c.last_transition_time == Some(Time(t(1)))));
        assert_eq!((calm[3].status.as_str(), calm[3].message.as_str()), ("False", "x died"));
    }
}
