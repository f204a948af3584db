//! QoS classes and pod-level resource sums, as Kubernetes computes them
//! (`helper/qos.ComputePodQOS`, component-helpers `PodRequests`/`PodLimits`).

use crate::api::{Container, Pod, Quantity};
use std::collections::BTreeMap;

/// A pod's quality-of-service class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QosClass {
    /// Every container has cpu and memory limits equal to its requests.
    Guaranteed,
    /// Anything in between.
    Burstable,
    /// No requests and no limits at all.
    BestEffort,
}

impl QosClass {
    /// The name in `status.qosClass`.
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

const COMPUTE: [&str; 2] = ["cpu", "memory"];

/// `ComputePodQOS`: only cpu and memory with quantities above zero count, summed over init
/// and app containers; requests were already defaulted from limits.
pub fn pod_qos(pod: &Pod) -> QosClass {
    let mut requests: BTreeMap<&str, Quantity> = BTreeMap::new();
    let mut limits: BTreeMap<&str, Quantity> = BTreeMap::new();
    let mut guaranteed = true;
    for c in pod.spec.init_containers.iter().chain(&pod.spec.containers) {
        for name in COMPUTE {
            if let Some(q) = c.resources.requests.get(name).filter(|q| !q.is_zero() && !q.is_negative()) {
                let sum = requests.get(name).map_or_else(|| q.clone(), |s| s.add(q));
                requests.insert(name, sum);
            }
        }
        let mut limited = 0;
        for name in COMPUTE {
            if let Some(q) = c.resources.limits.get(name).filter(|q| !q.is_zero() && !q.is_negative()) {
                limited += 1;
                let sum = limits.get(name).map_or_else(|| q.clone(), |s| s.add(q));
                limits.insert(name, sum);
            }
        }
        if limited != COMPUTE.len() {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return QosClass::BestEffort;
    }
    if guaranteed && requests.keys().eq(limits.keys()) && requests.iter().all(|(k, v)| limits.get(k) == Some(v)) {
        return QosClass::Guaranteed;
    }
    QosClass::Burstable
}

fn milli(c: &Container, list: fn(&Container) -> &BTreeMap<String, Quantity>, name: &str) -> i64 {
    list(c).get(name).map(|q| if name == "cpu" { q.milli_value() } else { q.value() }).unwrap_or(0)
}

fn requests(c: &Container) -> &BTreeMap<String, Quantity> {
    &c.resources.requests
}

fn limits(c: &Container) -> &BTreeMap<String, Quantity> {
    &c.resources.limits
}

/// `PodRequests`/`PodLimits` for one resource (cpu in millicores, others in units):
/// `max(Σ app + Σ sidecars, max_i(init_i + Σ sidecars declared before i))`.
fn pod_sum(pod: &Pod, name: &str, list: fn(&Container) -> &BTreeMap<String, Quantity>) -> i64 {
    let apps: i64 = pod.spec.containers.iter().map(|c| milli(c, list, name)).sum();
    let mut sidecars = 0;
    let mut init_peak = 0;
    for c in &pod.spec.init_containers {
        let v = milli(c, list, name);
        if c.is_sidecar() {
            sidecars += v;
            init_peak = init_peak.max(sidecars);
        } else {
            init_peak = init_peak.max(v + sidecars);
        }
    }
    (apps + sidecars).max(init_peak)
}

/// A pod's effective cpu (millicores) and memory (bytes) requests.
pub fn pod_requests(pod: &Pod) -> (i64, i64) {
    (pod_request(pod, "cpu"), pod_request(pod, "memory"))
}

/// A pod's effective request of one resource, by the same rule (cpu in millicores, any
/// other resource in units: bytes, devices).
pub fn pod_request(pod: &Pod, name: &str) -> i64 {
    pod_sum(pod, name, requests)
}

/// A pod's effective cpu (millicores) and memory (bytes) limits.
pub fn pod_limits(pod: &Pod) -> (i64, i64) {
    (pod_sum(pod, "cpu", limits), pod_sum(pod, "memory", limits))
}

/// A pod's effective limit of one resource, by the same rule as `pod_request` (0 where no
/// container declares one).
pub fn pod_limit(pod: &Pod, name: &str) -> i64 {
    pod_sum(pod, name, limits)
}

/// Whether every container (init and app) declares a limit for `name`.
pub fn all_declare_limit(pod: &Pod, name: &str) -> bool {
    pod.spec.init_containers.iter().chain(&pod.spec.containers).all(|c| c.resources.limits.contains_key(name))
}

/// `oom_score_adj` of Guaranteed containers (and node-critical ones).
pub const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
/// `oom_score_adj` of BestEffort containers.
pub const BEST_EFFORT_OOM_SCORE_ADJ: i64 = 1000;

/// Kubelet's `GetContainerOOMScoreAdjust`: −997 for Guaranteed, 1000 for BestEffort, and
/// for Burstable `1000 − 1000·memoryRequest/memoryCapacity` clamped to [3, 999], a sidecar
/// never above the lowest of the pod's app containers (so it outlives what it serves).
pub fn oom_score_adj(pod: &Pod, c: &Container, memory_capacity: i64) -> i64 {
    match pod_qos(pod) {
        QosClass::Guaranteed => return GUARANTEED_OOM_SCORE_ADJ,
        QosClass::BestEffort => return BEST_EFFORT_OOM_SCORE_ADJ,
        QosClass::Burstable => {}
    }
    let burstable = |c: &Container| {
        let request = milli(c, requests, "memory") as i128;
        let score = 1000 - (1000 * request) / (memory_capacity.max(1) as i128);
        (score as i64).clamp(1000 + GUARANTEED_OOM_SCORE_ADJ, BEST_EFFORT_OOM_SCORE_ADJ - 1)
    };
    let own = burstable(c);
    if c.is_sidecar() {
        pod.spec.containers.iter().map(burstable).fold(own, i64::min)
    } else {
        own
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::defaults::set_pod_defaults;

    fn container(name: &str, req: &[(&str, &str)], lim: &[(&str, &str)]) -> Container {
        let mut c = Container { name: name.into(), image: "x".into(), ..Default::default() };
        for (k, v) in req {
            c.resources.requests.insert(k.to_string(), Quantity::parse(v).unwrap());
        }
        for (k, v) in lim {
            c.resources.limits.insert(k.to_string(), Quantity::parse(v).unwrap());
        }
        c
    }

    fn pod(inits: Vec<Container>, apps: Vec<Container>) -> Pod {
        let mut p = Pod::default();
        p.spec.init_containers = inits;
        p.spec.containers = apps;
        set_pod_defaults(&mut p);
        p
    }

    #[test]
    fn qos_classes_match_kubernetes() {
        let g = [("cpu", "1"), ("memory", "1Gi")];
        let cases: Vec<(Pod, QosClass)> = vec![
            (pod(vec![], vec![container("a", &[], &[])]), QosClass::BestEffort),
            (pod(vec![], vec![container("a", &[], &g)]), QosClass::Guaranteed),
            (pod(vec![], vec![container("a", &g, &g), container("b", &[], &g)]), QosClass::Guaranteed),
            (pod(vec![], vec![container("a", &[("cpu", "500m")], &g)]), QosClass::Burstable),
            (pod(vec![], vec![container("a", &[], &[("cpu", "1")])]), QosClass::Burstable),
            (pod(vec![], vec![container("a", &[], &g), container("b", &[], &[])]), QosClass::Burstable),
            (pod(vec![container("i", &[], &[])], vec![container("a", &[], &g)]), QosClass::Burstable),
            (pod(vec![], vec![container("a", &[("ephemeral-storage", "1Gi")], &[])]), QosClass::BestEffort),
            (pod(vec![], vec![container("a", &[("cpu", "0")], &[])]), QosClass::BestEffort),
            (pod(vec![], vec![container("a", &[("memory", "10Mi")], &[])]), QosClass::Burstable),
        ];
        for (i, (p, want)) in cases.iter().enumerate() {
            assert_eq!(pod_qos(p), *want, "case {i}");
        }
    }

    #[test]
    fn pod_requests_count_init_containers_and_sidecars_like_kubernetes() {
        let mut side = container("side", &[("cpu", "200m")], &[]);
        side.restart_policy = Some("Always".into());
        let p = pod(
            vec![container("big-init", &[("cpu", "2")], &[]), side, container("small-init", &[("cpu", "500m")], &[])],
            vec![container("a", &[("cpu", "300m"), ("memory", "64Mi")], &[]), container("b", &[("cpu", "100m")], &[])],
        );
        // apps 400m + sidecar 200m = 600m; init peak max(2000m, 500m + 200m) = 2000m.
        assert_eq!(pod_requests(&p), (2000, 64 << 20));
        let p = pod(
            vec![],
            vec![container("a", &[], &[("cpu", "1"), ("memory", "1Gi")]), container("b", &[], &[("cpu", "250m")])],
        );
        assert_eq!(pod_limits(&p), (1250, 1 << 30));
        assert!(all_declare_limit(&p, "cpu") && !all_declare_limit(&p, "memory"));
    }

    #[test]
    fn oom_score_adj_follows_kubelets_policy() {
        let gi = 1i64 << 30;
        let g = [("cpu", "1"), ("memory", "1Gi")];
        let p = pod(vec![], vec![container("a", &g, &g)]);
        assert_eq!(oom_score_adj(&p, &p.spec.containers[0], 4 * gi), -997);
        let p = pod(vec![], vec![container("a", &[], &[])]);
        assert_eq!(oom_score_adj(&p, &p.spec.containers[0], 4 * gi), 1000);
        // Burstable: a quarter of memory requested → 750.
        let p = pod(vec![], vec![container("a", &[("memory", "1Gi")], &[]), container("b", &[("cpu", "100m")], &[])]);
        assert_eq!(oom_score_adj(&p, &p.spec.containers[0], 4 * gi), 750);
        // No memory request: 1000 would be BestEffort's, so 999.
        assert_eq!(oom_score_adj(&p, &p.spec.containers[1], 4 * gi), 999);
        // Requesting (nearly) everything: at least 3, never Guaranteed's score.
        let p = pod(vec![], vec![container("a", &[("memory", "4Gi")], &[])]);
        assert_eq!(oom_score_adj(&p, &p.spec.containers[0], 4 * gi), 3);
        // A sidecar asking for nothing is capped at the lowest app container's score.
        let mut sidecar = container("s", &[("cpu", "10m")], &[]);
        sidecar.restart_policy = Some("Always".into());
        let p = pod(vec![sidecar], vec![container("a", &[("memory", "2Gi")], &[])]);
        assert_eq!(oom_score_adj(&p, &p.spec.init_containers[0], 4 * gi), 500);
        assert_eq!(oom_score_adj(&p, &p.spec.containers[0], 4 * gi), 500);
    }
}
