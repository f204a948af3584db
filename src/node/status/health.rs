//! The node's health as its `Ready` condition and `/healthz` report it: the failed checks,
//! the problems in kubelet's words, and the node's conditions. Pure: the local API and
//! cluster mode's node report both build from these.

use crate::api::{NodeCondition, Time};
use crate::node::eviction::view::{Condition, Pressure};
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

/// The node's conditions in kubelet's order and words: the pressure conditions as the
/// eviction manager last decided (False since the agent started before it first decides),
/// and Ready, False with the problems when there are any.
pub fn node_conditions(
    problems: &[String],
    pressure: Option<Pressure>,
    started: SystemTime,
    ready_since: SystemTime,
    now: SystemTime,
) -> Vec<NodeCondition> {
    let cond = |type_: &str, status: &str, since: SystemTime, reason: &str, message: &str| NodeCondition {
        type_: type_.into(),
        status: status.into(),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(since)),
        reason: reason.into(),
        message: message.into(),
    };
    let p = pressure.unwrap_or(Pressure::none(started));
    let pressure_cond = |type_: &str, c: Condition, yes: [&str; 2], no: [&str; 2]| {
        let [reason, message] = if c.pressure { yes } else { no };
        cond(type_, if c.pressure { "True" } else { "False" }, c.since, reason, message)
    };
    let mut out = vec![
        pressure_cond(
            "MemoryPressure",
            p.memory,
            ["KubeletHasInsufficientMemory", "kubelet has insufficient memory available"],
            ["KubeletHasSufficientMemory", "kubelet has sufficient memory available"],
        ),
        pressure_cond(
            "DiskPressure",
            p.disk,
            ["KubeletHasDiskPressure", "kubelet has disk pressure"],
            ["KubeletHasNoDiskPressure", "kubelet has no disk pressure"],
        ),
        pressure_cond(
            "PIDPressure",
            p.pid,
            ["KubeletHasInsufficientPID", "kubelet has insufficient PID available"],
            ["KubeletHasSufficientPID", "kubelet has sufficient PID available"],
        ),
    ];
    out.push(if problems.is_empty() {
        cond("Ready", "True", ready_since, "KubeletReady", "kubelet is posting ready status")
    } else {
        cond("Ready", "False", ready_since, "KubeletNotReady", &problems.join("; "))
    });
    out
}
