//! kubelet's words, byte for byte: an eviction's message and event annotations
//! (`evictionMessage`), the node's pressure conditions (`nodestatus` setters), the events,
//! and the admission refusal. Quantities print as kubelet's `resource.Quantity` does:
//! bytes in binary SI (`100Mi`, or the plain number when no suffix divides it), counts in
//! decimal SI.

use super::signals::Observations;
use super::threshold::Threshold;
use super::{Pressure, Resource, OFFENDING_CONTAINERS_KEY, OFFENDING_CONTAINERS_USAGE_KEY, STARVED_RESOURCE_KEY};
use crate::api::{Pod, Quantity};
use crate::node::stats::PodStats;
use std::collections::BTreeMap;

/// An amount of `resource` as kubelet prints it.
pub fn amount(resource: Resource, v: i64) -> String {
    Quantity::from_value(v, resource.is_bytes()).to_string()
}

/// kubelet's `getThresholdMetInfo`: the first of `thresholds` that starves `resource` and
/// was observed, as (threshold quantity, available).
fn threshold_met_info(resource: Resource, thresholds: &[&Threshold], obs: &Observations) -> Option<(String, String)> {
    thresholds.iter().filter(|t| t.signal.resource() == resource).find_map(|t| {
        let o = obs.get(&t.signal)?;
        Some((t.value.quantity(o.capacity).to_string(), amount(resource, o.available)))
    })
}

/// kubelet's `evictionMessage`: `The node was low on resource: memory. Threshold quantity:
/// 100Mi, available: 80Mi. Container web was using 300Mi, request is 100Mi, has larger
/// consumption of memory. ` (each sentence ends in a space), and the event's annotations:
/// the containers past their requests, their usage, and the starved resource. Without the
/// pod's stats the message stops after the threshold and there are no annotations.
///
/// A container's disk usage is its writable layer plus its logs; on the process runtime,
/// which has no writable layer, its logs alone (kubelet needs both numbers and says nothing
/// of a container without them).
pub fn eviction_message(
    resource: Resource,
    pod: &Pod,
    stats: Option<&PodStats>,
    thresholds: &[&Threshold],
    obs: &Observations,
) -> (String, BTreeMap<String, String>) {
    let mut message = format!("The node was low on resource: {resource}. ");
    let mut annotations = BTreeMap::new();
    if let Some((quantity, available)) = threshold_met_info(resource, thresholds, obs) {
        message += &format!("Threshold quantity: {quantity}, available: {available}. ");
    }
    let Some(stats) = stats else { return (message, annotations) };
    let (mut names, mut usages) = (Vec::new(), Vec::new());
    // kubelet's `evictionMessage` names app containers only.
    let containers: Vec<_> = pod.spec.containers.iter().collect();
    for cs in &stats.containers {
        let Some(c) = containers.iter().find(|c| c.name == cs.name) else { continue };
        let usage = match resource {
            Resource::EphemeralStorage => cs
                .logs
                .and_then(|l| l.used_bytes)
                .map(|logs| logs.saturating_add(cs.rootfs.and_then(|r| r.used_bytes).unwrap_or(0))),
            Resource::Memory => cs.memory.map(|m| m.working_set_bytes),
            Resource::Inodes | Resource::Pids => None,
        };
        let Some(usage) = usage.map(|u| i64::try_from(u).unwrap_or(i64::MAX)) else { continue };
        let requested = c.resources.requests.get(resource.as_str()).cloned().unwrap_or_default();
        let usage = Quantity::from_value(usage, true);
        if usage > requested {
            message += &format!(
                "Container {} was using {usage}, request is {requested}, has larger consumption of {resource}. ",
                c.name
            );
            names.push(c.name.clone());
            usages.push(usage.to_string());
        }
    }
    annotations.insert(OFFENDING_CONTAINERS_KEY.to_string(), names.join(","));
    annotations.insert(OFFENDING_CONTAINERS_USAGE_KEY.to_string(), usages.join(","));
    annotations.insert(STARVED_RESOURCE_KEY.to_string(), resource.to_string());
    (message, annotations)
}

/// The reason of the node event recorded when a threshold is met (Warning, on the node).
pub const THRESHOLD_MET_REASON: &str = "EvictionThresholdMet";

/// That event's message: `Attempting to reclaim memory`.
pub fn threshold_met_message(resource: Resource) -> String {
    format!("Attempting to reclaim {resource}")
}

/// A pressure condition's reason and message, as kubelet's node status setters write them.
pub fn condition_text(p: Pressure, pressure: bool) -> (&'static str, &'static str) {
    match (p, pressure) {
        (Pressure::Memory, true) => ("KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
        (Pressure::Memory, false) => ("KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        (Pressure::Disk, true) => ("KubeletHasDiskPressure", "kubelet has disk pressure"),
        (Pressure::Disk, false) => ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        (Pressure::Pid, true) => ("KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
        (Pressure::Pid, false) => ("KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    }
}

/// The node event kubelet records when a pressure condition changes (Normal, on the node,
/// message `Node <name> status is now: <reason>`).
pub fn condition_event(p: Pressure, pressure: bool) -> &'static str {
    match (p, pressure) {
        (Pressure::Memory, true) => "NodeHasInsufficientMemory",
        (Pressure::Memory, false) => "NodeHasSufficientMemory",
        (Pressure::Disk, true) => "NodeHasDiskPressure",
        (Pressure::Disk, false) => "NodeHasNoDiskPressure",
        (Pressure::Pid, true) => "NodeHasInsufficientPID",
        (Pressure::Pid, false) => "NodeHasSufficientPID",
    }
}

/// That event's message.
pub fn condition_event_message(node: &str, p: Pressure, pressure: bool) -> String {
    format!("Node {node} status is now: {}", condition_event(p, pressure))
}

/// kubelet's admission refusal: `The node had condition: [MemoryPressure]. ` (Go prints the
/// list of conditions in brackets, separated by spaces).
pub fn admission_message(conditions: &[Pressure]) -> String {
    let names: Vec<&str> = conditions.iter().map(|p| p.as_str()).collect();
    format!("The node had condition: [{}]. ", names.join(" "))
}

/// kubelet's message for an `emptyDir` past its `sizeLimit`:
/// `Usage of EmptyDir volume "data" exceeds the limit "1Gi". `
pub fn empty_dir_limit_message(volume: &str, limit: &Quantity) -> String {
    format!("Usage of EmptyDir volume {volume:?} exceeds the limit {:?}. ", limit.to_string())
}

/// kubelet's message for a pod past its containers' summed `ephemeral-storage` limits.
pub fn pod_ephemeral_storage_message(limit: &Quantity) -> String {
    format!("Pod ephemeral local storage usage exceeds the total limit of containers {limit}. ")
}

/// kubelet's message for a container past its `ephemeral-storage` limit.
pub fn container_ephemeral_storage_message(container: &str, limit: &Quantity) -> String {
    format!("Container {container} exceeded its local ephemeral storage limit {:?}. ", limit.to_string())
}
