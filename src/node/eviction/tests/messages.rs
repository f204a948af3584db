//! kubelet's words, byte for byte.

use super::*;
use crate::node::eviction::messages::{
    admission_message, amount, condition_event, condition_event_message, condition_text, eviction_message,
    threshold_met_message,
};
use crate::node::eviction::threshold::parse_statement;
use crate::node::eviction::{Observation, Observations, Pressure, Resource, Signal, Threshold};
use std::collections::BTreeMap;

fn threshold(signal: Signal, value: &str) -> Threshold {
    parse_statement(signal.as_str(), value).unwrap().unwrap()
}

fn observed(signal: Signal, available: u64, capacity: u64) -> Observations {
    Observations::from([(signal, Observation { available: available as i64, capacity: capacity as i64, time: None })])
}

fn annotations(containers: &str, usage: &str, resource: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("offending_containers".to_string(), containers.to_string()),
        ("offending_containers_usage".to_string(), usage.to_string()),
        ("starved_resource".to_string(), resource.to_string()),
    ])
}

#[test]
fn the_issues_memory_message_exactly() {
    let web = pod("web", None, resources("", "100Mi", ""), resources("", "", ""), false);
    let mut web_pod = (*web).clone();
    web_pod.spec.containers[0].name = "web".into();
    let stats = memory_stats(&web_pod, "300Mi");
    let t = threshold(Signal::MemoryAvailable, "100Mi");
    let (message, ann) = eviction_message(
        Resource::Memory,
        &web_pod,
        Some(&stats),
        &[&t],
        &observed(Signal::MemoryAvailable, v("80Mi"), v("2Gi")),
    );
    assert_eq!(
        message,
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi. Container web was using 300Mi, request is 100Mi, has larger consumption of memory. "
    );
    assert_eq!(ann, annotations("web", "300Mi", "memory"));
}

#[test]
fn only_app_containers_past_their_requests_are_named_as_kubelet_names_them() {
    let mut p = (*best_effort("p")).clone();
    let template = p.spec.containers[0].clone();
    let c = |name: &str, req: Option<&str>| {
        let mut c = template.clone();
        c.name = name.into();
        c.resources.requests.clear();
        if let Some(r) = req {
            c.resources.requests.insert("memory".into(), Quantity::parse(r).unwrap());
        }
        c
    };
    p.spec.containers = vec![c("a", Some("1Gi")), c("b", None), c("d", Some("10Mi"))];
    p.spec.init_containers = vec![c("sidecar", Some("1Mi"))];
    let mut stats = stats_of(&p);
    for (name, ws) in [("a", "200Mi"), ("b", "1000001"), ("d", "10Mi"), ("sidecar", "2Mi"), ("gone", "1Gi")] {
        stats.containers.push(ContainerStats { name: name.into(), memory: Some(memory(v(ws))), ..Default::default() });
    }
    // Below 1024 bytes kubelet's Quantity prints in decimal SI (1000 is 1k).
    let t = threshold(Signal::MemoryAvailable, "10%");
    let (message, ann) =
        eviction_message(Resource::Memory, &p, Some(&stats), &[&t], &observed(Signal::MemoryAvailable, 1000, v("1Gi")));
    assert_eq!(
        message,
        "The node was low on resource: memory. Threshold quantity: 107374184, available: 1k. Container b was using 1000001, request is 0, has larger consumption of memory. "
    );
    assert_eq!(ann, annotations("b", "1000001", "memory"), "a sidecar past its request is not named");
}

#[test]
fn without_stats_the_message_stops_after_the_threshold_and_has_no_annotations() {
    let p = best_effort("p");
    let t = threshold(Signal::NodeFsAvailable, "10%");
    let (message, ann) = eviction_message(
        Resource::EphemeralStorage,
        &p,
        None,
        &[&t],
        &observed(Signal::NodeFsAvailable, v("1Gi"), v("20Gi")),
    );
    assert_eq!(
        message,
        "The node was low on resource: ephemeral-storage. Threshold quantity: 2147483680, available: 1Gi. "
    );
    assert!(ann.is_empty());
    // A threshold of another resource, or one never observed, says nothing of quantities.
    let m = threshold(Signal::MemoryAvailable, "1Gi");
    let (message, _) = eviction_message(Resource::EphemeralStorage, &p, None, &[&m, &t], &Observations::new());
    assert_eq!(message, "The node was low on resource: ephemeral-storage. ");
}

#[test]
fn disk_usage_is_the_writable_layer_and_logs_or_the_logs_alone_on_the_process_runtime() {
    let p = pod("p", None, resources("", "", "100Mi"), resources("", "", ""), true);
    let t = threshold(Signal::NodeFsAvailable, "500Mi");
    let o = observed(Signal::NodeFsAvailable, v("100Mi"), v("10Gi"));
    let cri = disk_stats(&p, "100Mi", "50Mi", "1Gi");
    let (message, ann) = eviction_message(Resource::EphemeralStorage, &p, Some(&cri), &[&t], &o);
    assert_eq!(
        message,
        "The node was low on resource: ephemeral-storage. Threshold quantity: 500Mi, available: 100Mi. Container p was using 150Mi, request is 100Mi, has larger consumption of ephemeral-storage. "
    );
    assert_eq!(ann, annotations("p", "150Mi", "ephemeral-storage"));
    let mut process = cri.clone();
    process.containers[0].rootfs = None;
    process.containers[0].logs = Some(used_bytes(v("120Mi")));
    let (message, _) = eviction_message(Resource::EphemeralStorage, &p, Some(&process), &[&t], &o);
    assert!(
        message
            .ends_with("Container p was using 120Mi, request is 100Mi, has larger consumption of ephemeral-storage. "),
        "{message}"
    );
}

#[test]
fn counts_print_in_decimal_and_name_no_container() {
    let p = best_effort("p");
    let t = threshold(Signal::PidAvailable, "1000");
    let (message, ann) = eviction_message(
        Resource::Pids,
        &p,
        Some(&process_stats(&p, 5000)),
        &[&t],
        &observed(Signal::PidAvailable, 900, 32768),
    );
    assert_eq!(message, "The node was low on resource: pids. Threshold quantity: 1k, available: 900. ");
    assert_eq!(ann, annotations("", "", "pids"));
    let t = threshold(Signal::NodeFsInodesFree, "5%");
    let (message, _) =
        eviction_message(Resource::Inodes, &p, None, &[&t], &observed(Signal::NodeFsInodesFree, 2000, 1_000_000));
    assert_eq!(message, "The node was low on resource: inodes. Threshold quantity: 50000, available: 2k. ");
    assert_eq!((amount(Resource::Inodes, 1024), amount(Resource::Memory, 1024)), ("1024".into(), "1Ki".into()));
}

#[test]
fn conditions_events_and_admission_in_kubelets_words() {
    assert_eq!(
        condition_text(Pressure::Memory, true),
        ("KubeletHasInsufficientMemory", "kubelet has insufficient memory available")
    );
    assert_eq!(
        condition_text(Pressure::Memory, false),
        ("KubeletHasSufficientMemory", "kubelet has sufficient memory available")
    );
    assert_eq!(condition_text(Pressure::Disk, true), ("KubeletHasDiskPressure", "kubelet has disk pressure"));
    assert_eq!(condition_text(Pressure::Disk, false), ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"));
    assert_eq!(
        condition_text(Pressure::Pid, true),
        ("KubeletHasInsufficientPID", "kubelet has insufficient PID available")
    );
    assert_eq!(
        condition_text(Pressure::Pid, false),
        ("KubeletHasSufficientPID", "kubelet has sufficient PID available")
    );
    assert_eq!(condition_event(Pressure::Disk, true), "NodeHasDiskPressure");
    assert_eq!(condition_event_message("n1", Pressure::Pid, false), "Node n1 status is now: NodeHasSufficientPID");
    assert_eq!(threshold_met_message(Resource::EphemeralStorage), "Attempting to reclaim ephemeral-storage");
    assert_eq!(admission_message(&[Pressure::Memory]), "The node had condition: [MemoryPressure]. ");
    assert_eq!(
        admission_message(&[Pressure::Memory, Pressure::Disk]),
        "The node had condition: [MemoryPressure DiskPressure]. "
    );
}
