//! kubelet's `TestAdmit`-style cases: who starts under which pressure.

use super::*;
use crate::node::eviction::{admit, is_critical, pod_priority, Admission, ConditionState, NodeConditions};

fn under(memory: bool, disk: bool, pid: bool) -> NodeConditions {
    let c = |pressure| ConditionState { pressure, since: at(0) };
    NodeConditions { memory: c(memory), disk: c(disk), pid: c(pid) }
}

fn refused(message: &str) -> Admission {
    Admission::Refuse { reason: "Evicted", message: message.into() }
}

fn tolerating(p: &Arc<Pod>, tolerations: serde_json::Value) -> Arc<Pod> {
    let mut p = (**p).clone();
    p.spec.other.insert("tolerations".into(), tolerations);
    Arc::new(p)
}

#[test]
fn memory_pressure_refuses_only_best_effort_pods() {
    let be = best_effort("be");
    let burstable = pod("bu", None, resources("", "100Mi", ""), resources("", "", ""), false);
    let memory = under(true, false, false);
    assert_eq!(admit(&under(false, false, false), &be), Admission::Admit);
    assert_eq!(admit(&memory, &be), refused("The node had condition: [MemoryPressure]. "));
    assert_eq!(admit(&memory, &burstable), Admission::Admit);
}

#[test]
fn a_best_effort_pod_tolerating_the_memory_pressure_taint_is_admitted() {
    let be = best_effort("be");
    let memory = under(true, false, false);
    for (t, ok) in [
        (
            serde_json::json!([{"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}]),
            true,
        ),
        (serde_json::json!([{"key": "node.kubernetes.io/memory-pressure", "operator": "Exists"}]), true),
        (serde_json::json!([{"operator": "Exists"}]), true),
        (serde_json::json!([{"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"}]), true),
        (
            serde_json::json!([{"key": "node.kubernetes.io/memory-pressure", "value": "x", "effect": "NoSchedule"}]),
            false,
        ),
        (
            serde_json::json!([{"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoExecute"}]),
            false,
        ),
        (
            serde_json::json!([{"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"}]),
            false,
        ),
        (serde_json::json!([]), false),
    ] {
        let want = if ok { Admission::Admit } else { refused("The node had condition: [MemoryPressure]. ") };
        assert_eq!(admit(&memory, &tolerating(&be, t.clone())), want, "{t}");
    }
    // A toleration admits under memory pressure only.
    let t = serde_json::json!([{"operator": "Exists"}]);
    assert_eq!(
        admit(&under(true, true, false), &tolerating(&be, t)),
        refused("The node had condition: [MemoryPressure DiskPressure]. ")
    );
}

#[test]
fn disk_or_pid_pressure_refuses_every_pod_but_critical_ones() {
    let guaranteed = pod("gu", None, resources("1", "1Gi", ""), resources("1", "1Gi", ""), false);
    assert_eq!(admit(&under(false, true, false), &guaranteed), refused("The node had condition: [DiskPressure]. "));
    assert_eq!(admit(&under(false, false, true), &guaranteed), refused("The node had condition: [PIDPressure]. "));
    let be = best_effort("be");
    for critical in [
        annotated(&be, "kubernetes.io/config.source", "file"),
        annotated(&be, "kubernetes.io/config.mirror", "hash"),
        pod("node-critical", Some(2_000_001_000), resources("", "", ""), resources("", "", ""), false),
        pod("cluster-critical", Some(2_000_000_000), resources("", "", ""), resources("", "", ""), false),
    ] {
        assert!(is_critical(&critical), "{}", critical.metadata.name);
        assert_eq!(admit(&under(true, true, true), &critical), Admission::Admit, "{}", critical.metadata.name);
    }
    assert!(!is_critical(&annotated(&be, "kubernetes.io/config.source", "api")));
    assert_eq!(pod_priority(&be), 0, "unset is 0");
}
