//! kubelet's `TestMakeSignalObservations`, and the memory notification's usage threshold.

use super::*;
use crate::node::eviction::signals::memcg_usage_threshold;
use crate::node::eviction::{observe, NodeInfo, Observation, Signal};
use crate::node::stats::{NodeStats, RlimitStats, Snapshot};

fn fs(available: u64, capacity: u64, inodes_free: u64, inodes: u64, t: u64) -> FsStats {
    FsStats {
        time: Some(at(t)),
        available_bytes: Some(available),
        capacity_bytes: Some(capacity),
        inodes_free: Some(inodes_free),
        inodes: Some(inodes),
        ..Default::default()
    }
}

fn obs(available: u64, capacity: u64, t: u64) -> Observation {
    Observation { available: available as i64, capacity: capacity as i64, time: Some(at(t)) }
}

#[test]
fn every_signal_is_read_as_kubelet_reads_it() {
    let gi = 1u64 << 30;
    let snapshot = Snapshot {
        time: Some(at(10)),
        node: NodeStats {
            memory: Some(MemoryStats {
                time: Some(at(1)),
                available_bytes: Some(gi),
                working_set_bytes: gi,
                ..Default::default()
            }),
            pods_memory: Some(MemoryStats {
                time: Some(at(2)),
                available_bytes: Some(3 * gi),
                working_set_bytes: 2 * gi,
                ..Default::default()
            }),
            fs: Some(fs(1024, 2048, 1024, 1 << 20, 3)),
            image_fs: Some(fs(1 << 20, 2 << 20, 1024, 1 << 20, 4)),
            rlimit: Some(RlimitStats { time: Some(at(5)), max_pid: 255_816, num_of_running_processes: 1000 }),
            ..Default::default()
        },
        pods: vec![],
    };
    let o = observe(&snapshot, &NodeInfo::default());
    assert_eq!(o[&Signal::MemoryAvailable], obs(gi, 2 * gi, 1), "capacity is available + working set");
    assert_eq!(o[&Signal::AllocatableMemoryAvailable], obs(3 * gi, 5 * gi, 2));
    assert_eq!(o[&Signal::NodeFsAvailable], obs(1024, 2048, 3));
    assert_eq!(o[&Signal::NodeFsInodesFree], obs(1024, 1 << 20, 3));
    assert_eq!(o[&Signal::ImageFsAvailable], obs(1 << 20, 2 << 20, 4));
    assert_eq!(o[&Signal::ImageFsInodesFree], obs(1024, 1 << 20, 4));
    assert_eq!(o[&Signal::PidAvailable], obs(255_816 - 1000, 255_816, 5));
}

#[test]
fn the_process_runtime_has_no_image_filesystem_and_missing_numbers_are_no_reading() {
    let snapshot = Snapshot {
        node: NodeStats {
            fs: Some(FsStats { available_bytes: Some(10), capacity_bytes: Some(100), ..Default::default() }),
            rlimit: Some(RlimitStats::default()),
            ..Default::default()
        },
        ..Default::default()
    };
    let o = observe(&snapshot, &NodeInfo::default());
    assert_eq!(o.keys().copied().collect::<Vec<_>>(), [Signal::NodeFsAvailable], "{o:?}");
    assert_eq!(o[&Signal::NodeFsAvailable].time, None);
}

#[test]
fn without_available_bytes_memory_is_read_against_the_nodes_capacities() {
    let snapshot = Snapshot {
        node: NodeStats {
            memory: Some(memory(v("300Mi"))),
            pods_memory: Some(memory(v("250Mi"))),
            ..Default::default()
        },
        ..Default::default()
    };
    let node =
        NodeInfo { memory_capacity: Some(v("512Mi")), allocatable_memory: Some(v("200Mi")), ..Default::default() };
    let o = observe(&snapshot, &node);
    assert_eq!(
        o[&Signal::MemoryAvailable],
        Observation { available: v("212Mi") as i64, capacity: v("512Mi") as i64, time: None }
    );
    assert_eq!(
        o[&Signal::AllocatableMemoryAvailable],
        Observation { available: -(v("50Mi") as i64), capacity: v("200Mi") as i64, time: None },
        "past allocatable, available goes below zero"
    );
    assert!(observe(&snapshot, &NodeInfo::default()).is_empty(), "no capacity, no reading");
}

#[test]
fn the_memory_notification_fires_where_the_working_set_meets_the_threshold() {
    // capacity 1000Mi (available 400Mi + working set 600Mi), inactive file 50Mi: the
    // working set reaches capacity − 100Mi at a usage of 900Mi + 50Mi.
    let m = MemoryStats {
        available_bytes: Some(v("400Mi")),
        working_set_bytes: v("600Mi"),
        usage_bytes: v("650Mi"),
        ..Default::default()
    };
    let snapshot = Snapshot {
        node: NodeStats { memory: Some(m), pods_memory: Some(m), ..Default::default() },
        ..Default::default()
    };
    let threshold = |signal, value: &str| {
        crate::node::eviction::threshold::parse_statement(Signal::as_str(signal), value).unwrap().unwrap()
    };
    assert_eq!(memcg_usage_threshold(&threshold(Signal::MemoryAvailable, "100Mi"), &snapshot), Some(v("950Mi")));
    assert_eq!(
        memcg_usage_threshold(&threshold(Signal::AllocatableMemoryAvailable, "10%"), &snapshot),
        Some(v("1000Mi") - 104_857_601 + v("50Mi")),
        "a percentage of the capacity, kubelet's arithmetic"
    );
    assert_eq!(memcg_usage_threshold(&threshold(Signal::NodeFsAvailable, "1Gi"), &snapshot), None);
    assert_eq!(memcg_usage_threshold(&threshold(Signal::MemoryAvailable, "1Gi"), &Snapshot::default()), None);
}
