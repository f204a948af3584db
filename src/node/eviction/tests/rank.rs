//! kubelet's `TestOrderedBy*` cases, run through the ranking kubelet uses for each signal.

use super::*;
use crate::node::eviction::rank::{pick, protection, rank, ranking, Candidate, DiskUsage, Protection, Ranking};
use crate::node::eviction::{Resource, Signal};

const LOW: Option<i64> = Some(-1);
const HIGH: Option<i64> = Some(1);

/// The names of `pods` in the order `by` ranks them, each with its stats.
fn order(by: Ranking, pods: &[(Arc<Pod>, Option<PodStats>)]) -> Vec<String> {
    let mut c: Vec<Candidate> = pods.iter().map(|(p, s)| Candidate { pod: p, stats: s.as_ref() }).collect();
    rank(by, &mut c);
    c.iter().map(|c| c.pod.metadata.name.clone()).collect()
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

const ALL_DISK: Ranking =
    Ranking::Disk(DiskUsage { root: true, logs: true, volumes: true }, Resource::EphemeralStorage);
const ALL_INODES: Ranking = Ranking::Disk(DiskUsage { root: true, logs: true, volumes: true }, Resource::Inodes);

#[test]
fn memory_a_pod_past_its_request_goes_before_one_of_lower_priority_within_it() {
    // TestOrderedByExceedsRequestMemory
    let below = pod("below-requests", LOW, resources("", "200Mi", ""), resources("", "", ""), false);
    let exceeds = pod("exceeds-requests", HIGH, resources("", "100Mi", ""), resources("", "", ""), false);
    let pods = [
        (below.clone(), Some(memory_stats(&below, "199Mi"))),
        (exceeds.clone(), Some(memory_stats(&exceeds, "101Mi"))),
    ];
    assert_eq!(order(Ranking::Memory, &pods), names(&["exceeds-requests", "below-requests"]));
}

#[test]
fn disk_a_pod_past_its_ephemeral_storage_request_goes_first() {
    // TestOrderedByExceedsRequestDisk
    let below = pod("below-requests", LOW, resources("", "", "200Mi"), resources("", "", ""), false);
    let exceeds = pod("exceeds-requests", HIGH, resources("", "", "100Mi"), resources("", "", ""), false);
    let pods = [
        (below.clone(), Some(disk_stats(&below, "100Mi", "99Mi", "0Mi"))),
        (exceeds.clone(), Some(disk_stats(&exceeds, "90Mi", "11Mi", "0Mi"))),
    ];
    assert_eq!(order(ALL_DISK, &pods), names(&["exceeds-requests", "below-requests"]));
}

#[test]
fn lower_priority_goes_first() {
    // TestOrderedByPriority: no stats at all, so priority alone decides.
    let low = pod("low-priority", Some(-134), resources("", "", ""), resources("", "", ""), false);
    let medium = pod("medium-priority", Some(1), resources("100m", "100Mi", ""), resources("200m", "200Mi", ""), false);
    let high = pod("high-priority", Some(12534), resources("200m", "200Mi", ""), resources("200m", "200Mi", ""), false);
    let pods = [(high, None), (medium, None), (low, None)];
    for by in [Ranking::Memory, Ranking::Pids, ALL_DISK] {
        assert_eq!(order(by, &pods), names(&["low-priority", "medium-priority", "high-priority"]), "{by:?}");
    }
}

#[test]
fn disk_the_largest_use_above_requests_goes_first() {
    // TestOrderedbyDisk
    let p = |name: &str, req: &str, lim: &str| pod(name, None, resources("", "", req), resources("", "", lim), true);
    let pods = [
        ("best-effort-high", "", "", ("50Mi", "100Mi", "150Mi")),
        ("best-effort-low", "", "", ("25Mi", "25Mi", "50Mi")),
        ("burstable-high", "100Mi", "400Mi", ("150Mi", "150Mi", "50Mi")),
        ("burstable-low", "100Mi", "400Mi", ("25Mi", "35Mi", "50Mi")),
        ("guaranteed-high", "400Mi", "400Mi", ("225Mi", "100Mi", "50Mi")),
        ("guaranteed-low", "400Mi", "400Mi", ("25Mi", "45Mi", "50Mi")),
    ]
    .map(|(name, req, lim, (root, logs, vol))| {
        let pod = p(name, req, lim);
        let s = disk_stats(&pod, root, logs, vol);
        (pod, Some(s))
    });
    assert_eq!(
        order(ALL_DISK, &pods),
        names(&[
            "best-effort-high",
            "burstable-high",
            "best-effort-low",
            "burstable-low",
            "guaranteed-high",
            "guaranteed-low"
        ])
    );
}

#[test]
fn inodes_the_largest_use_goes_first() {
    // TestOrderedbyInodes
    let p = |name: &str| pod(name, None, resources("", "", ""), resources("", "", ""), true);
    let pods = [
        ("low", "50000", "100000", "50000"),
        ("medium", "100000", "150000", "50000"),
        ("high", "200000", "150000", "50000"),
    ]
    .map(|(name, root, logs, vol)| {
        let pod = p(name);
        let s = inode_stats(&pod, root, logs, vol);
        (pod, Some(s))
    });
    assert_eq!(order(ALL_INODES, &pods), names(&["high", "medium", "low"]));
}

#[test]
fn disk_past_requests_then_priority_then_use() {
    // TestOrderedByPriorityDisk
    let pods = [
        ("above-requests-low-priority-high-usage", LOW, "", ("200Mi", "100Mi", "200Mi")),
        ("above-requests-low-priority-low-usage", LOW, "", ("10Mi", "10Mi", "30Mi")),
        ("above-requests-high-priority-high-usage", HIGH, "100Mi", ("200Mi", "150Mi", "250Mi")),
        ("above-requests-high-priority-low-usage", HIGH, "100Mi", ("90Mi", "50Mi", "10Mi")),
        ("below-requests-low-priority-high-usage", LOW, "1Gi", ("500Mi", "200Mi", "100Mi")),
        ("below-requests-low-priority-low-usage", LOW, "1Gi", ("50Mi", "100Mi", "50Mi")),
        ("below-requests-high-priority-high-usage", HIGH, "1Gi", ("250Mi", "500Mi", "50Mi")),
        ("below-requests-high-priority-low-usage", HIGH, "1Gi", ("100Mi", "60Mi", "40Mi")),
    ]
    .map(|(name, prio, req, (root, logs, vol))| {
        let pod = pod(name, prio, resources("", "", req), resources("", "", ""), true);
        let s = disk_stats(&pod, root, logs, vol);
        (pod, Some(s))
    });
    let want: Vec<String> = pods.iter().map(|(p, _)| p.metadata.name.clone()).collect();
    let mut reversed = pods.clone();
    reversed.reverse();
    assert_eq!(order(ALL_DISK, &reversed), want);
}

#[test]
fn inodes_priority_then_use() {
    // TestOrderedByPriorityInodes: pods cannot request inodes, so every pod is past its request.
    let pods = [
        ("low-priority-high-usage", LOW, ("50000", "100000", "250000")),
        ("low-priority-low-usage", LOW, ("60000", "30000", "10000")),
        ("high-priority-high-usage", HIGH, ("150000", "150000", "50000")),
        ("high-priority-low-usage", HIGH, ("10000", "40000", "100000")),
    ]
    .map(|(name, prio, (root, logs, vol))| {
        let pod = pod(name, prio, resources("", "", ""), resources("", "", ""), true);
        let s = inode_stats(&pod, root, logs, vol);
        (pod, Some(s))
    });
    let want: Vec<String> = pods.iter().map(|(p, _)| p.metadata.name.clone()).collect();
    let mut reversed = pods.clone();
    reversed.reverse();
    assert_eq!(order(ALL_INODES, &reversed), want);
}

#[test]
fn memory_the_largest_use_above_requests_goes_first() {
    // TestOrderedByMemory
    let pods = [
        ("best-effort-high", "", "", "500Mi"),
        ("best-effort-low", "", "", "300Mi"),
        ("burstable-high", "100Mi", "1Gi", "800Mi"),
        ("burstable-low", "100Mi", "1Gi", "300Mi"),
        ("guaranteed-high", "1Gi", "1Gi", "800Mi"),
        ("guaranteed-low", "1Gi", "1Gi", "200Mi"),
    ]
    .map(|(name, req, lim, ws)| {
        let pod = pod(name, None, resources("", req, ""), resources("", lim, ""), false);
        let s = memory_stats(&pod, ws);
        (pod, Some(s))
    });
    assert_eq!(
        order(Ranking::Memory, &pods),
        names(&[
            "burstable-high",
            "best-effort-high",
            "best-effort-low",
            "burstable-low",
            "guaranteed-high",
            "guaranteed-low"
        ])
    );
}

#[test]
fn memory_past_requests_then_priority_then_use() {
    // TestOrderedByPriorityMemory
    let pods = [
        ("above-requests-low-priority-high-usage", LOW, "", "500Mi"),
        ("above-requests-low-priority-low-usage", LOW, "", "50Mi"),
        ("above-requests-high-priority-high-usage", HIGH, "100Mi", "600Mi"),
        ("above-requests-high-priority-low-usage", HIGH, "100Mi", "150Mi"),
        ("below-requests-low-priority-high-usage", LOW, "1Gi", "800Mi"),
        ("below-requests-low-priority-low-usage", LOW, "1Gi", "200Mi"),
        ("below-requests-high-priority-high-usage", HIGH, "1Gi", "800Mi"),
        ("below-requests-high-priority-low-usage", HIGH, "1Gi", "200Mi"),
    ]
    .map(|(name, prio, req, ws)| {
        let pod = pod(name, prio, resources("", req, ""), resources("", "", ""), false);
        let s = memory_stats(&pod, ws);
        (pod, Some(s))
    });
    let want: Vec<String> = pods.iter().map(|(p, _)| p.metadata.name.clone()).collect();
    let mut reversed = pods.clone();
    reversed.reverse();
    assert_eq!(order(Ranking::Memory, &reversed), want);
}

#[test]
fn pids_priority_then_processes() {
    // TestOrderedByPriorityProcess
    let pods = [
        ("low-priority-high-usage", LOW, 20),
        ("low-priority-low-usage", LOW, 6),
        ("high-priority-high-usage", HIGH, 20),
        ("high-priority-low-usage", HIGH, 5),
    ]
    .map(|(name, prio, n)| {
        let pod = pod(name, prio, resources("", "", ""), resources("", "", ""), false);
        let s = process_stats(&pod, n);
        (pod, Some(s))
    });
    let want: Vec<String> = pods.iter().map(|(p, _)| p.metadata.name.clone()).collect();
    let mut reversed = pods.clone();
    reversed.reverse();
    assert_eq!(order(Ranking::Pids, &reversed), want);
}

#[test]
fn a_pod_without_stats_goes_first() {
    let seen = best_effort("seen");
    let unseen = pod("unseen", Some(1000), resources("", "1Gi", ""), resources("", "1Gi", ""), false);
    let pods = [(seen.clone(), Some(memory_stats(&seen, "2Gi"))), (unseen, None)];
    assert_eq!(order(Ranking::Memory, &pods), names(&["unseen", "seen"]));
    assert_eq!(order(ALL_DISK, &pods), names(&["unseen", "seen"]));
}

#[test]
fn disk_usage_counts_what_the_filesystem_layout_puts_on_the_signal() {
    // With a dedicated image filesystem nodefs ranks by logs and volumes, imagefs by
    // writable layers; without one both count everything (buildSignalToRankFunc).
    let all = DiskUsage { root: true, logs: true, volumes: true };
    assert_eq!(ranking(Signal::NodeFsAvailable, false), Ranking::Disk(all, Resource::EphemeralStorage));
    assert_eq!(ranking(Signal::ImageFsInodesFree, false), Ranking::Disk(all, Resource::Inodes));
    let node = DiskUsage { root: false, ..all };
    let image = DiskUsage { root: true, logs: false, volumes: false };
    assert_eq!(ranking(Signal::NodeFsInodesFree, true), Ranking::Disk(node, Resource::Inodes));
    assert_eq!(ranking(Signal::ImageFsAvailable, true), Ranking::Disk(image, Resource::EphemeralStorage));
    assert_eq!(ranking(Signal::AllocatableMemoryAvailable, true), Ranking::Memory);
    assert_eq!(ranking(Signal::PidAvailable, false), Ranking::Pids);

    // big-layer has the larger writable layer, big-logs the larger logs plus volume.
    let layer = best_effort("big-layer");
    let logs = pod("big-logs", None, resources("", "", ""), resources("", "", ""), true);
    let pods = [
        (layer.clone(), Some(disk_stats(&layer, "500Mi", "10Mi", "0"))),
        (logs.clone(), Some(disk_stats(&logs, "10Mi", "100Mi", "100Mi"))),
    ];
    assert_eq!(order(ranking(Signal::NodeFsAvailable, true), &pods), names(&["big-logs", "big-layer"]));
    assert_eq!(order(ranking(Signal::ImageFsAvailable, true), &pods), names(&["big-layer", "big-logs"]));
    assert_eq!(order(ranking(Signal::NodeFsAvailable, false), &pods), names(&["big-layer", "big-logs"]));
}

#[test]
fn memory_backed_and_projected_volumes_are_not_disk_usage() {
    let mut p = (*pod("p", None, resources("", "", ""), resources("", "", ""), false)).clone();
    p.spec.volumes = crate::api::from_value(&serde_json::json!([
        {"name": "ram", "emptyDir": {"medium": "Memory"}},
        {"name": "disk", "emptyDir": {}},
        {"name": "host", "hostPath": {"path": "/data"}},
        {"name": "down", "downwardAPI": {"items": []}},
    ]))
    .unwrap();
    let mut s = stats_of(&p);
    s.volumes = ["ram", "disk", "host", "down"]
        .iter()
        .map(|n| VolumeStats { name: n.to_string(), fs: used_bytes(v("1Mi")) })
        .collect();
    let parts = DiskUsage { root: false, logs: false, volumes: true };
    assert_eq!(crate::node::eviction::rank::disk_usage(&p, &s, parts, Resource::EphemeralStorage), v("2Mi") as i64);
}

#[test]
fn static_and_mirror_pods_go_last_and_system_critical_ones_never() {
    let ordinary = best_effort("ordinary");
    let static_pod = annotated(&best_effort("static"), "kubernetes.io/config.source", "file");
    let mirror = annotated(&best_effort("mirror"), "kubernetes.io/config.mirror", "abc");
    let critical = pod("critical", Some(2_000_000_000), resources("", "", ""), resources("", "", ""), false);
    let node_critical = annotated(
        &pod("node-critical", Some(2_000_001_000), resources("", "", ""), resources("", "", ""), false),
        "kubernetes.io/config.source",
        "file",
    );
    assert_eq!(protection(&ordinary), Protection::None);
    assert_eq!(protection(&static_pod), Protection::LastResort);
    assert_eq!(protection(&mirror), Protection::LastResort);
    assert_eq!(protection(&critical), Protection::Never);
    assert_eq!(protection(&node_critical), Protection::Never, "priority wins over being static");
    assert_eq!(
        protection(&pod("just-below", Some(1_999_999_999), resources("", "", ""), resources("", "", ""), false)),
        Protection::None
    );

    let cand = |p: &'static Arc<Pod>| Candidate { pod: p, stats: None };
    let leak = |p: Arc<Pod>| -> &'static Arc<Pod> { Box::leak(Box::new(p)) };
    let (o, s, m, c) = (leak(ordinary), leak(static_pod), leak(mirror), leak(critical));
    let ranked = [cand(c), cand(s), cand(m), cand(o)];
    assert_eq!(pick(&ranked).unwrap().pod.metadata.name, "ordinary", "though ranked last");
    assert_eq!(pick(&ranked[..3]).unwrap().pod.metadata.name, "static", "the first static or mirror pod");
    assert!(pick(&ranked[..1]).is_none(), "never a system-critical pod");
    assert!(pick(&[]).is_none());
}
