//! kubelet's `synchronize`, step by step (its `eviction_manager_test.go` scenarios), and its
//! helpers' tables (`TestThresholdsUpdatedStats`, `TestThresholdsFirstObservedAt`,
//! `TestThresholdsMetGracePeriod`, `TestNodeConditions*`, `TestSortByEvictionPriority`).

use super::*;
use crate::node::eviction::decide::{
    conditions_last_observed_at, eviction_order, first_observed_at, met_grace_period, node_conditions, observed_since,
    updated_stats,
};
use crate::node::eviction::threshold::parse_thresholds;
use crate::node::eviction::{
    Cause, ConditionState, Decision, EvictionState, Inputs, NodeConditions, NodeEvent, NodeInfo, Observation,
    Observations, Pressure, Reclaim, Settings, Signal, Threshold,
};
use crate::node::stats::{NodeStats, RlimitStats, Snapshot};
use std::collections::BTreeMap;

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Hard thresholds, soft ones with their grace periods, minimum reclaims; 5 min transition.
fn settings(hard: &[(&str, &str)], soft: &[(&str, &str)], grace: &[(&str, &str)], min: &[(&str, &str)]) -> Settings {
    Settings {
        thresholds: parse_thresholds(&map(hard), &map(soft), &map(grace), &map(min)).unwrap(),
        pressure_transition_period: Duration::from_secs(300),
        max_pod_grace_period: Duration::ZERO,
    }
}

const GI2: &str = "2Gi";

/// A snapshot read at `t` of a 2 GiB node with `available` memory, 10 GiB of disk with
/// `disk_free` free, and `pods`' stats.
fn snap(t: u64, available: &str, disk_free: &str, pods: Vec<PodStats>) -> Snapshot {
    let mem = MemoryStats {
        time: Some(at(t)),
        available_bytes: Some(v(available)),
        working_set_bytes: v(GI2) - v(available),
        usage_bytes: v(GI2) - v(available),
        ..Default::default()
    };
    Snapshot {
        time: Some(at(t)),
        node: NodeStats {
            memory: Some(mem),
            fs: Some(FsStats {
                time: Some(at(t)),
                available_bytes: Some(v(disk_free)),
                capacity_bytes: Some(v("10Gi")),
                inodes_free: Some(900_000),
                inodes: Some(1_000_000),
                ..Default::default()
            }),
            ..Default::default()
        },
        pods,
    }
}

struct Node {
    state: EvictionState,
    info: NodeInfo,
    pods: Vec<Arc<Pod>>,
}

impl Node {
    fn new(settings: Settings, pods: Vec<Arc<Pod>>) -> Node {
        Node { state: EvictionState::new(settings, at(0)), info: NodeInfo::default(), pods }
    }

    fn step(&mut self, now: u64, snapshot: &Snapshot) -> Decision {
        self.state.synchronize(&Inputs { snapshot, node: &self.info, pods: &self.pods, now: at(now) })
    }
}

fn calm_since(t: u64) -> ConditionState {
    ConditionState { pressure: false, since: at(t) }
}

fn under_since(t: u64) -> ConditionState {
    ConditionState { pressure: true, since: at(t) }
}

/// kubelet's `TestMemoryPressure` cast: a BestEffort pod far past its (no) request, a
/// Burstable one a little past it, a Guaranteed one within it.
fn memory_pods() -> (Vec<Arc<Pod>>, Vec<PodStats>) {
    let be = best_effort("best-effort");
    let bu = pod("burstable", None, resources("100m", "100Mi", ""), resources("200m", "1Gi", ""), false);
    let gu = pod("guaranteed", None, resources("100m", "1Gi", ""), resources("100m", "1Gi", ""), false);
    let stats = vec![memory_stats(&be, "500Mi"), memory_stats(&bu, "200Mi"), memory_stats(&gu, "800Mi")];
    (vec![gu, bu, be], stats)
}

#[test]
fn hard_memory_pressure_evicts_the_worst_pod_at_once_and_once_per_reading() {
    let (pods, stats) = memory_pods();
    let mut node = Node::new(settings(&[("memory.available", "1Gi")], &[], &[], &[]), pods);

    let d = node.step(1, &snap(1, "1500Mi", "5Gi", stats.clone()));
    assert_eq!(
        d,
        Decision {
            conditions: NodeConditions::calm(at(0)),
            changed: vec![],
            local: vec![],
            starved: None,
            events: vec![],
            reclaim: None,
            evict: None
        }
    );

    let d = node.step(10, &snap(10, "500Mi", "5Gi", stats.clone()));
    assert_eq!(d.conditions, NodeConditions { memory: under_since(10), disk: calm_since(0), pid: calm_since(0) });
    assert_eq!(d.changed, [Pressure::Memory]);
    assert_eq!(d.starved, Some(Signal::MemoryAvailable));
    assert_eq!(
        d.events,
        [NodeEvent { reason: "EvictionThresholdMet", message: "Attempting to reclaim memory".into() }]
    );
    assert_eq!(d.reclaim, None, "memory has nothing to reclaim at node level");
    let e = d.evict.unwrap();
    assert_eq!(
        (e.uid.as_str(), e.pod.as_str(), e.cause, e.grace),
        ("best-effort", "default/best-effort", Cause::Threshold(Signal::MemoryAvailable), Duration::ZERO)
    );
    assert_eq!(
        e.message,
        "The node was low on resource: memory. Threshold quantity: 1Gi, available: 500Mi. Container best-effort was using 500Mi, request is 0, has larger consumption of memory. "
    );
    assert_eq!(e.annotations["starved_resource"], "memory");
    assert_eq!(node.state.conditions(), d.conditions);

    // The same reading again (the executor woke early): no second eviction.
    let d = node.step(11, &snap(10, "500Mi", "5Gi", stats.clone()));
    assert_eq!((d.starved, &d.evict, d.changed.len()), (None, &None, 0));
    assert!(d.conditions.memory.pressure);

    // A new reading, still short: the next pod goes (the evicted one has left).
    node.pods.retain(|p| p.metadata.name != "best-effort");
    let d = node.step(20, &snap(20, "800Mi", "5Gi", stats));
    assert_eq!(d.evict.unwrap().uid, "burstable", "past its request, before the Guaranteed pod");
}

#[test]
fn the_condition_holds_for_the_transition_period_after_the_threshold_was_last_met() {
    let (pods, stats) = memory_pods();
    let mut node = Node::new(settings(&[("memory.available", "1Gi")], &[], &[], &[]), pods);
    assert!(node.step(10, &snap(10, "500Mi", "5Gi", stats.clone())).conditions.memory.pressure);
    let d = node.step(20, &snap(20, "1500Mi", "5Gi", stats.clone()));
    assert_eq!((d.conditions.memory, d.starved, d.changed.len()), (under_since(10), None, 0), "relieved, but held");
    let d = node.step(309, &snap(309, "1500Mi", "5Gi", stats.clone()));
    assert!(d.conditions.memory.pressure, "299 s after the last sighting");
    let d = node.step(310, &snap(310, "1500Mi", "5Gi", stats.clone()));
    assert_eq!((d.conditions.memory, d.changed.as_slice()), (calm_since(310), &[Pressure::Memory][..]));
    // Met again: at once True, and a new transition.
    let d = node.step(320, &snap(320, "100Mi", "5Gi", stats));
    assert_eq!((d.conditions.memory, d.changed.as_slice()), (under_since(320), &[Pressure::Memory][..]));
}

#[test]
fn a_soft_threshold_waits_its_grace_period_then_evicts_with_the_capped_grace() {
    let (pods, stats) = memory_pods();
    let mut s = settings(&[], &[("memory.available", "1Gi")], &[("memory.available", "1m")], &[]);
    s.max_pod_grace_period = Duration::from_secs(10);
    let mut node = Node::new(s, pods);
    let d = node.step(0, &snap(0, "500Mi", "5Gi", stats.clone()));
    assert!(d.conditions.memory.pressure, "the condition does not wait for the grace period");
    assert_eq!((d.starved, d.evict), (None, None));
    assert_eq!(node.step(59, &snap(59, "500Mi", "5Gi", stats.clone())).evict, None);
    let e = node.step(60, &snap(60, "500Mi", "5Gi", stats.clone())).evict.unwrap();
    assert_eq!((e.uid.as_str(), e.grace), ("best-effort", Duration::from_secs(10)), "30 s of its own, capped at 10 s");

    // Relieved in between: the grace period starts again.
    let d = node.step(61, &snap(61, "1500Mi", "5Gi", stats.clone()));
    assert_eq!(d.evict, None);
    assert_eq!(node.step(62, &snap(62, "500Mi", "5Gi", stats.clone())).evict, None);
    assert!(node.step(122, &snap(122, "500Mi", "5Gi", stats)).evict.is_some());
}

#[test]
fn a_soft_eviction_keeps_a_shorter_own_grace_and_uncapped_takes_the_pods_own() {
    let (pods, stats) = memory_pods();
    let mut pods = pods;
    let mut be = (*pods[2]).clone();
    be.spec.termination_grace_period_seconds = Some(5);
    pods[2] = Arc::new(be);
    let mut s = settings(&[], &[("memory.available", "1Gi")], &[("memory.available", "0s")], &[]);
    s.max_pod_grace_period = Duration::from_secs(10);
    let mut node = Node::new(s.clone(), pods.clone());
    // A grace period of 0 makes the soft threshold a hard one (kubelet's isHardEvictionThreshold).
    assert_eq!(node.step(0, &snap(0, "500Mi", "5Gi", stats.clone())).evict.unwrap().grace, Duration::ZERO);
    let mut s = settings(&[], &[("memory.available", "1Gi")], &[("memory.available", "1s")], &[]);
    s.max_pod_grace_period = Duration::from_secs(10);
    let mut node = Node::new(s, pods.clone());
    node.step(0, &snap(0, "500Mi", "5Gi", stats.clone()));
    assert_eq!(node.step(1, &snap(1, "500Mi", "5Gi", stats.clone())).evict.unwrap().grace, Duration::from_secs(5));
    let mut node = Node::new(settings(&[], &[("memory.available", "1Gi")], &[("memory.available", "1s")], &[]), pods);
    node.step(0, &snap(0, "500Mi", "5Gi", stats.clone()));
    assert_eq!(node.step(1, &snap(1, "500Mi", "5Gi", stats)).evict.unwrap().grace, Duration::from_secs(5), "uncapped");
}

#[test]
fn once_met_a_threshold_stays_met_until_its_minimum_reclaim_is_freed() {
    let (pods, stats) = memory_pods();
    let mut node =
        Node::new(settings(&[("memory.available", "1Gi")], &[], &[], &[("memory.available", "500Mi")]), pods);
    assert!(node.step(10, &snap(10, "900Mi", "5Gi", stats.clone())).evict.is_some());
    // Above the threshold, below threshold + minimum reclaim: still starved.
    let d = node.step(20, &snap(20, "1200Mi", "5Gi", stats.clone()));
    assert_eq!(d.starved, Some(Signal::MemoryAvailable));
    assert!(d.evict.is_some());
    // Past both: resolved, and the minimum reclaim no longer applies.
    assert_eq!(node.step(30, &snap(30, "1600Mi", "5Gi", stats.clone())).starved, None);
    assert_eq!(node.step(40, &snap(40, "1200Mi", "5Gi", stats)).starved, None, "1200Mi is above the bare threshold");
}

#[test]
fn disk_pressure_reclaims_dead_containers_first_and_evicts_only_if_that_was_not_enough() {
    let small = pod("small", None, resources("", "", ""), resources("", "", ""), true);
    let big = pod("big", None, resources("", "", ""), resources("", "", ""), true);
    let stats = vec![disk_stats(&small, "0", "1Mi", "10Mi"), disk_stats(&big, "0", "5Mi", "2Gi")];
    let s = settings(&[("nodefs.available", "10%")], &[], &[], &[("nodefs.available", "500Mi")]);
    let mut node = Node::new(s, vec![small, big]);
    let d = node.step(10, &snap(10, "1Gi", "512Mi", stats.clone()));
    assert!(d.conditions.disk.pressure && !d.conditions.memory.pressure);
    assert_eq!(d.events[0].message, "Attempting to reclaim ephemeral-storage");
    // 10% of 10Gi (kubelet's float32 arithmetic) + 500Mi − 512Mi.
    let want = 1_073_741_840 + v("500Mi") - v("512Mi");
    assert_eq!(d.reclaim, Some(Reclaim { signal: Signal::NodeFsAvailable, unused_images: false, to_free: want }));
    let e = d.evict.unwrap();
    assert_eq!(e.uid, "big");
    assert!(
        e.message.starts_with(
            "The node was low on resource: ephemeral-storage. Threshold quantity: 1073741840, available: 512Mi. "
        ),
        "{}",
        e.message
    );

    // The executor reclaims, collects again, and asks.
    assert!(!node.state.reclaim_resolved(&snap(11, "1Gi", "1200Mi", stats.clone()), &node.info), "below 10% + 500Mi");
    assert!(node.state.reclaim_resolved(&snap(11, "1Gi", "2Gi", stats), &node.info));
}

#[test]
fn with_a_dedicated_image_filesystem_only_imagefs_pressure_reclaims_and_then_images_too() {
    let p = best_effort("p");
    let stats = vec![disk_stats(&p, "1Gi", "1Mi", "0")];
    let s = settings(&[("nodefs.available", "10%"), ("imagefs.available", "15%")], &[], &[], &[]);
    let mut node = Node::new(s.clone(), vec![p.clone()]);
    node.info = NodeInfo { dedicated_image_fs: true, images: true, ..Default::default() };
    let mut image_full = snap(10, "1Gi", "5Gi", stats.clone());
    image_full.node.image_fs =
        Some(FsStats { available_bytes: Some(v("1Gi")), capacity_bytes: Some(v("20Gi")), ..Default::default() });
    let d = node.step(10, &image_full);
    let r = d.reclaim.unwrap();
    assert_eq!((r.signal, r.unused_images), (Signal::ImageFsAvailable, true));
    assert_eq!(d.evict.unwrap().uid, "p");

    let mut node = Node::new(s, vec![p]);
    node.info = NodeInfo { dedicated_image_fs: true, images: true, ..Default::default() };
    let d = node.step(10, &snap(10, "1Gi", "100Mi", stats));
    assert_eq!(
        (d.starved, d.reclaim),
        (Some(Signal::NodeFsAvailable), None),
        "neither images nor layers live on nodefs"
    );
}

#[test]
fn memory_is_reclaimed_before_disk_when_both_are_short() {
    let (pods, stats) = memory_pods();
    let mut node =
        Node::new(settings(&[("nodefs.available", "10%"), ("memory.available", "1Gi")], &[], &[], &[]), pods);
    let d = node.step(10, &snap(10, "500Mi", "100Mi", stats));
    assert!(d.conditions.memory.pressure && d.conditions.disk.pressure);
    assert_eq!(d.changed, [Pressure::Memory, Pressure::Disk]);
    assert_eq!((d.starved, d.reclaim), (Some(Signal::MemoryAvailable), None));
}

#[test]
fn allocatable_memory_is_watched_through_the_kubepods_cgroup() {
    let (pods, stats) = memory_pods();
    let mut node = Node::new(settings(&[("memory.available", "100Mi")], &[], &[], &[]), pods);
    let mut s = snap(10, "1Gi", "5Gi", stats);
    s.node.pods_memory = Some(MemoryStats {
        time: Some(at(10)),
        available_bytes: Some(v("50Mi")),
        working_set_bytes: v("1Gi"),
        ..Default::default()
    });
    let d = node.step(10, &s);
    assert_eq!(d.starved, Some(Signal::AllocatableMemoryAvailable));
    assert!(d.evict.unwrap().message.contains("Threshold quantity: 100Mi, available: 50Mi. "));
}

#[test]
fn pid_pressure_evicts_the_pod_with_the_most_processes_among_the_lowest_priority() {
    let a = best_effort("a");
    let b = best_effort("b");
    let c = pod("c", Some(100), resources("", "", ""), resources("", "", ""), false);
    let stats = vec![process_stats(&a, 10), process_stats(&b, 500), process_stats(&c, 5000)];
    let mut node = Node::new(settings(&[("pid.available", "1000")], &[], &[], &[]), vec![a, b, c]);
    let mut s = snap(10, "1Gi", "5Gi", stats);
    s.node.rlimit = Some(RlimitStats { time: Some(at(10)), max_pid: 32768, num_of_running_processes: 32000 });
    let d = node.step(10, &s);
    assert!(d.conditions.pid.pressure);
    assert_eq!(d.reclaim, None);
    let e = d.evict.unwrap();
    assert_eq!(e.uid, "b");
    assert_eq!(e.message, "The node was low on resource: pids. Threshold quantity: 1k, available: 768. ");
}

#[test]
fn static_pods_go_only_when_nothing_else_is_left_and_system_critical_ones_never() {
    let (pods, mut stats) = memory_pods();
    let static_hog = annotated(&best_effort("static-hog"), "kubernetes.io/config.source", "file");
    let critical = pod("critical", Some(2_000_001_000), resources("", "", ""), resources("", "", ""), false);
    stats.push(memory_stats(&static_hog, "1500Mi"));
    stats.push(memory_stats(&critical, "1900Mi"));
    let mut all = pods.clone();
    all.push(static_hog.clone());
    all.push(critical.clone());
    let mut node = Node::new(settings(&[("memory.available", "1Gi")], &[], &[], &[]), all);
    assert_eq!(node.step(10, &snap(10, "100Mi", "5Gi", stats.clone())).evict.unwrap().uid, "best-effort");
    node.pods = vec![static_hog, critical.clone(), pods[0].clone()];
    assert_eq!(node.step(20, &snap(20, "100Mi", "5Gi", stats.clone())).evict.unwrap().uid, "guaranteed");
    node.pods.retain(|p| p.metadata.uid != "guaranteed");
    assert_eq!(node.step(30, &snap(30, "100Mi", "5Gi", stats.clone())).evict.unwrap().uid, "static-hog");
    node.pods = vec![critical];
    let d = node.step(40, &snap(40, "100Mi", "5Gi", stats.clone()));
    assert_eq!((d.starved, d.evict), (Some(Signal::MemoryAvailable), None), "starved, but nothing may go");
    node.pods.clear();
    assert_eq!(node.step(50, &snap(50, "100Mi", "5Gi", stats)).evict, None, "no pods at all");
}

#[test]
fn no_thresholds_no_decisions() {
    let (pods, stats) = memory_pods();
    let mut node = Node::new(settings(&[], &[], &[], &[]), pods);
    let d = node.step(10, &snap(10, "1Mi", "1Mi", stats));
    assert_eq!((d.conditions, d.starved, d.evict), (NodeConditions::calm(at(0)), None, None));
}

#[test]
fn an_eviction_for_a_pod_without_stats_still_says_why() {
    let p = best_effort("unseen");
    let mut node = Node::new(settings(&[("memory.available", "1Gi")], &[], &[], &[]), vec![p]);
    let e = node.step(10, &snap(10, "100Mi", "5Gi", vec![])).evict.unwrap();
    assert_eq!(e.message, "The node was low on resource: memory. Threshold quantity: 1Gi, available: 100Mi. ");
    assert!(e.annotations.is_empty());
}

#[test]
fn admission_follows_the_current_conditions() {
    let (pods, stats) = memory_pods();
    let mut node = Node::new(settings(&[("memory.available", "1Gi")], &[], &[], &[]), pods);
    let newcomer = best_effort("newcomer");
    assert_eq!(node.state.admit(&newcomer), crate::node::eviction::Admission::Admit);
    node.step(10, &snap(10, "100Mi", "5Gi", stats));
    assert_eq!(
        node.state.admit(&newcomer),
        crate::node::eviction::Admission::Refuse {
            reason: "Evicted",
            message: "The node had condition: [MemoryPressure]. ".into()
        }
    );
}

fn thresholds(pairs: &[(&str, &str)]) -> Vec<Threshold> {
    parse_thresholds(&map(pairs), &BTreeMap::new(), &BTreeMap::new(), &BTreeMap::new()).unwrap()
}

fn reading(t: Option<u64>) -> Observation {
    Observation { available: 0, capacity: 0, time: t.map(at) }
}

#[test]
fn a_threshold_is_acted_on_once_per_new_reading() {
    // TestThresholdsUpdatedStats
    let all = thresholds(&[("memory.available", "1Gi")]);
    let o = |t| Observations::from([(Signal::MemoryAvailable, reading(t))]);
    assert_eq!(updated_stats(&all, &[], &Observations::new(), &Observations::new()), Vec::<usize>::new());
    assert_eq!(updated_stats(&all, &[0], &o(None), &Observations::new()), [0], "no time");
    assert_eq!(updated_stats(&all, &[0], &o(Some(0)), &Observations::new()), [0], "no last reading");
    assert_eq!(updated_stats(&all, &[0], &o(Some(0)), &o(Some(60))), Vec::<usize>::new(), "time machine");
    assert_eq!(updated_stats(&all, &[0], &o(Some(0)), &o(Some(0))), Vec::<usize>::new(), "same reading");
    assert_eq!(updated_stats(&all, &[0], &o(Some(60)), &o(Some(0))), [0], "new reading");
    assert_eq!(updated_stats(&all, &[0], &Observations::new(), &o(Some(0))), Vec::<usize>::new(), "no reading now");
}

#[test]
fn first_sightings_grace_periods_and_conditions_as_kubelets_tables() {
    // TestThresholdsFirstObservedAt
    assert_eq!(first_observed_at(&[], &[], at(60)), []);
    assert_eq!(first_observed_at(&[0], &[], at(60)), [(0, at(60))]);
    assert_eq!(first_observed_at(&[0], &[(0, at(0)), (1, at(5))], at(60)), [(0, at(0))], "1 is no longer met");
    // TestThresholdsMetGracePeriod
    let mut all = thresholds(&[("memory.available", "1Gi")]);
    all.push(Threshold { grace_period: Duration::from_secs(60), ..all[0].clone() });
    assert_eq!(met_grace_period(&all, &[], at(120)), Vec::<usize>::new());
    assert_eq!(met_grace_period(&all, &[(0, at(120))], at(120)), [0], "hard: at once");
    assert_eq!(met_grace_period(&all, &[(2, at(120))], at(120)), Vec::<usize>::new(), "soft, not yet");
    assert_eq!(met_grace_period(&all, &[(2, at(0))], at(120)), [2], "soft, past its grace");
    assert_eq!(met_grace_period(&all, &[(2, at(200))], at(120)), Vec::<usize>::new(), "a clock gone back waits");
    // TestNodeConditions
    let all = thresholds(&[("memory.available", "1Gi"), ("nodefs.available", "1Gi"), ("imagefs.inodesFree", "1k")]);
    assert_eq!(node_conditions(&all, &[]), []);
    assert_eq!(node_conditions(&all, &[0]), [Pressure::Memory]);
    assert_eq!(
        node_conditions(&all, &[2, 1, 3]),
        [Pressure::Memory, Pressure::Disk],
        "allocatable is memory; one Disk"
    );
    // TestNodeConditionsLastObservedAt
    let old = BTreeMap::from([(Pressure::Memory, at(0))]);
    assert_eq!(
        conditions_last_observed_at(&[Pressure::Memory], &BTreeMap::new(), at(60)),
        BTreeMap::from([(Pressure::Memory, at(60))])
    );
    assert_eq!(
        conditions_last_observed_at(&[Pressure::Memory], &old, at(60)),
        BTreeMap::from([(Pressure::Memory, at(60))])
    );
    assert_eq!(conditions_last_observed_at(&[], &old, at(60)), old);
    // TestNodeConditionsObservedSince
    let seen = BTreeMap::from([(Pressure::Memory, at(0))]);
    assert_eq!(observed_since(&seen, Duration::from_secs(120), at(60)), [Pressure::Memory]);
    assert_eq!(observed_since(&seen, Duration::from_secs(30), at(60)), []);
}

#[test]
fn memory_thresholds_are_acted_on_first() {
    // TestSortByEvictionPriority
    let all = thresholds(&[("nodefs.available", "1Gi"), ("pid.available", "10"), ("memory.available", "1Gi")]);
    let names = |order: Vec<usize>| order.iter().map(|&i| all[i].signal).collect::<Vec<_>>();
    assert_eq!(names(eviction_order(&all, vec![])), []);
    assert_eq!(
        names(eviction_order(&all, vec![1, 2, 0])),
        [Signal::MemoryAvailable, Signal::NodeFsAvailable, Signal::PidAvailable]
    );
    assert_eq!(
        names(eviction_order(&all, vec![1, 2, 3])),
        [Signal::AllocatableMemoryAvailable, Signal::NodeFsAvailable, Signal::PidAvailable]
    );
}

/// A pod with a 1Gi `emptyDir` `data`, and `ephemeral-storage` limits: `pod_limit` on the
/// container `app`, `sidecar_limit` on a second container `sidecar`.
fn limited(name: &str, size_limit: &str, app_limit: &str, sidecar_limit: &str) -> Arc<Pod> {
    let limits =
        |l: &str| if l.is_empty() { serde_json::json!({}) } else { serde_json::json!({"ephemeral-storage": l}) };
    let value = serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "uid": name},
        "spec": {
            "containers": [
                {"name": "app", "image": "busybox", "resources": {"limits": limits(app_limit)}},
                {"name": "sidecar", "image": "busybox", "resources": {"limits": limits(sidecar_limit)}},
            ],
            "volumes": [{"name": "data", "emptyDir": {"sizeLimit": size_limit}}],
        },
    });
    Arc::new(crate::api::from_value(&value).unwrap())
}

/// Stats of `limited`: `data` holds `volume`; each container's layer and logs.
fn limited_stats(p: &Pod, volume: &str, app: (&str, &str), sidecar: (&str, &str)) -> PodStats {
    let c = |name: &str, (root, logs): (&str, &str)| ContainerStats {
        name: name.into(),
        rootfs: (!root.is_empty()).then(|| used_bytes(v(root))),
        logs: Some(used_bytes(v(logs))),
        ..Default::default()
    };
    let total =
        [app, sidecar].iter().map(|(r, l)| v(if r.is_empty() { "0" } else { r }) + v(l)).sum::<u64>() + v(volume);
    PodStats {
        containers: vec![c("app", app), c("sidecar", sidecar)],
        volumes: vec![VolumeStats { name: "data".into(), fs: used_bytes(v(volume)) }],
        ephemeral_storage: Some(used_bytes(total)),
        ..stats_of(p)
    }
}

#[test]
fn pods_past_their_own_storage_limits_are_evicted_at_once_before_any_threshold() {
    let empty_dir = limited("empty-dir", "1Gi", "", "");
    let whole_pod = limited("whole-pod", "10Gi", "300Mi", "300Mi");
    let container = limited("container", "10Gi", "1Gi", "100Mi");
    let within = limited("within", "1Gi", "1Gi", "1Gi");
    let critical = {
        let mut p = (*limited("critical", "1Gi", "", "")).clone();
        p.spec.other.insert("priority".into(), 2_000_001_000.into());
        Arc::new(p)
    };
    let stats = vec![
        limited_stats(&empty_dir, "1025Mi", ("", "1Mi"), ("", "1Mi")),
        limited_stats(&whole_pod, "500Mi", ("", "100Mi"), ("", "1Mi")),
        limited_stats(&container, "0", ("", "1Mi"), ("90Mi", "20Mi")),
        limited_stats(&within, "1Gi", ("", "1Mi"), ("", "1Mi")),
        limited_stats(&critical, "2Gi", ("", "1Mi"), ("", "1Mi")),
    ];
    let pods = vec![empty_dir, whole_pod, container, within, critical];
    let mut node = Node::new(settings(&[("memory.available", "1Gi")], &[], &[], &[]), pods);
    let d = node.step(10, &snap(10, "100Mi", "5Gi", stats.clone()));
    let got: Vec<_> = d.local.iter().map(|e| (e.uid.as_str(), e.cause, e.message.as_str(), e.grace)).collect();
    assert_eq!(
        got,
        [
            (
                "empty-dir",
                Cause::EmptyDirLimit,
                "Usage of EmptyDir volume \"data\" exceeds the limit \"1Gi\". ",
                Duration::ZERO
            ),
            (
                "whole-pod",
                Cause::PodEphemeralStorageLimit,
                "Pod ephemeral local storage usage exceeds the total limit of containers 600Mi. ",
                Duration::ZERO
            ),
            (
                "container",
                Cause::ContainerEphemeralStorageLimit,
                "Container sidecar exceeded its local ephemeral storage limit \"100Mi\". ",
                Duration::ZERO
            ),
        ],
        "a system-critical pod is never evicted"
    );
    assert!(d.local.iter().all(|e| e.annotations.is_empty()));
    assert!(d.conditions.memory.pressure, "the conditions are still observed");
    assert_eq!((d.starved, d.evict, d.events.len()), (None, None, 0), "and nothing else is decided");
    assert_eq!(Cause::ContainerEphemeralStorageLimit.as_str(), "ephemeralcontainerfs.limit");
    assert_eq!(Cause::Threshold(Signal::PidAvailable).as_str(), "pid.available");

    // With a dedicated image filesystem a container's writable layer does not count.
    node.info.dedicated_image_fs = true;
    node.pods.retain(|p| p.metadata.uid == "container");
    assert_eq!(node.step(20, &snap(20, "1500Mi", "5Gi", stats.clone())).local, []);
    // And without thresholds the limits still hold.
    let mut node = Node::new(settings(&[], &[], &[], &[]), vec![limited("empty-dir", "1Gi", "", "")]);
    assert_eq!(node.step(10, &snap(10, "1Gi", "5Gi", stats)).local.len(), 1);
}
