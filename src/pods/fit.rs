//! kubelet's resource fit at admission, as a pure decision: whether a new pod's requests fit
//! in what the node allocates to pods, less what the pods admitted before it request
//! (`GeneralPredicates`' `noderesources.Fits`, reported as `lifecycle/predicate.go` does:
//! reason `OutOf<resource>`, message `Node didn't have enough resource: …`).
//!
//! One difference from kubelet, on purpose: kubelet drops the requests of extended resources
//! the node does not list before it checks (`removeMissingExtendedResources`, for
//! cluster-level resources that no node lists), and so admits a pod asking for a device the
//! node does not have. Here a resource the node does not list has none (capacity 0), so such
//! a pod is refused, as the device manager refuses a static pod asking for an unregistered
//! device.

use crate::api::{Pod, Quantity};
use std::collections::BTreeMap;

const CPU: &str = "cpu";
const MEMORY: &str = "memory";
const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
const PODS: &str = "pods";

/// What the node allocates to pods (kubelet's node allocatable: capacity less the
/// reservations), without the device plugin resources, which the pod manager adds from the
/// device manager's view when it checks a pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeAllocatable {
    /// CPU in millicores.
    pub cpu_millis: i64,
    /// Memory in bytes.
    pub memory: i64,
    /// How many pods the node runs at most (`max_pods`).
    pub pods: i64,
    /// Local ephemeral storage in bytes; `None` when the node does not account for it, and
    /// then requests of it are not checked.
    pub ephemeral_storage: Option<i64>,
    /// Every other resource by name (device plugin resources, hugepages), in units. A
    /// resource not listed here has none.
    pub scalar: BTreeMap<String, i64>,
}

impl NodeAllocatable {
    /// The allocatable a Node object reports (`status.allocatable`), with `max_pods` as the
    /// pods count.
    pub fn from_list(list: &BTreeMap<String, Quantity>, max_pods: usize) -> NodeAllocatable {
        let mut node = NodeAllocatable { pods: i64::try_from(max_pods).unwrap_or(i64::MAX), ..Default::default() };
        for (name, q) in list {
            match name.as_str() {
                CPU => node.cpu_millis = q.milli_value(),
                MEMORY => node.memory = q.value(),
                EPHEMERAL_STORAGE => node.ephemeral_storage = Some(q.value()),
                PODS => {}
                _ => {
                    node.scalar.insert(name.clone(), q.value());
                }
            }
        }
        node
    }

    /// How much of `name` the node allocates; `None` for a resource it does not account for.
    fn capacity(&self, name: &str) -> Option<i64> {
        match name {
            CPU => Some(self.cpu_millis),
            MEMORY => Some(self.memory),
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            _ => Some(self.scalar.get(name).copied().unwrap_or(0)),
        }
    }
}

/// What the pods admitted so far hold: their count and their summed requests (kubelet's
/// `NodeInfo` built from the active pods).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Admitted pods.
    pub pods: i64,
    /// Their requests summed, by resource (cpu in millicores).
    pub requested: BTreeMap<String, i64>,
}

impl Usage {
    /// The usage of `pods`.
    pub fn of<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> Usage {
        let mut usage = Usage::default();
        for p in pods {
            usage.add(p);
        }
        usage
    }

    /// Counts one more admitted pod.
    pub fn add(&mut self, pod: &Pod) {
        self.pods += 1;
        for (name, v) in pod_requests(pod) {
            let sum = self.requested.entry(name).or_default();
            *sum = sum.saturating_add(v);
        }
    }
}

/// A resource the node has too little of for a pod (kubelet's `InsufficientResourceError`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Insufficient {
    /// The resource's name (`cpu`, `pods`, `example.com/gpu`).
    pub resource: String,
    /// What the pod requests (cpu in millicores; 1 for `pods`).
    pub requested: i64,
    /// What the pods admitted before it request.
    pub used: i64,
    /// What the node allocates to pods.
    pub capacity: i64,
}

impl Insufficient {
    /// kubelet's admission reason: `OutOf<resource>` (`OutOfcpu`, `OutOfpods`,
    /// `OutOfexample.com/gpu`).
    pub fn reason(&self) -> String {
        format!("OutOf{}", self.resource)
    }

    /// kubelet's admission message (the event's; the pod's status puts `Pod was rejected: `
    /// before it).
    pub fn message(&self) -> String {
        format!(
            "Node didn't have enough resource: {}, requested: {}, used: {}, capacity: {}",
            self.resource, self.requested, self.used, self.capacity
        )
    }
}

/// A pod's effective requests by resource (kubelet's `PodRequests`): per resource, the
/// larger of the app containers and sidecars together and the peak of the init containers
/// (`cm::qos::pod_request`), plus the pod's `overhead`; cpu in millicores, any other
/// resource in units. Requests were defaulted from limits (the apiserver's defaulting, or
/// `set_pod_defaults` for static pods).
pub fn pod_requests(pod: &Pod) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    let containers = pod.spec.init_containers.iter().chain(&pod.spec.containers);
    for name in containers.flat_map(|c| c.resources.requests.keys()) {
        if !out.contains_key(name) {
            out.insert(name.clone(), crate::node::cm::qos::pod_request(pod, name));
        }
    }
    // `overhead` is kept as an unmodelled field (a pod that sets it is refused its
    // containers), but kubelet counts it in the pod's requests.
    let overhead = pod.spec.other.get("overhead").map(crate::api::from_value::<BTreeMap<String, Quantity>>);
    for (name, q) in overhead.and_then(Result::ok).unwrap_or_default() {
        let v = if name == CPU { q.milli_value() } else { q.value() };
        let sum = out.entry(name).or_default();
        *sum = sum.saturating_add(v);
    }
    out
}

/// Whether `pod` fits on a node that allocates `node` to pods and where the pods admitted
/// before it hold `used`; else the first resource it does not fit in, in kubelet's order:
/// pods, cpu, memory, ephemeral-storage, then the others by name. A resource the pod does
/// not request (or requests 0 of) never stops it.
pub fn fits(pod: &Pod, used: &Usage, node: &NodeAllocatable) -> Result<(), Insufficient> {
    if used.pods.saturating_add(1) > node.pods {
        return Err(Insufficient { resource: PODS.into(), requested: 1, used: used.pods, capacity: node.pods });
    }
    let wanted = pod_requests(pod);
    let first = [CPU, MEMORY, EPHEMERAL_STORAGE];
    let others = wanted.keys().map(String::as_str).filter(|n| !first.contains(n) && *n != PODS);
    for name in first.into_iter().chain(others) {
        let requested = wanted.get(name).copied().unwrap_or(0);
        if requested <= 0 {
            continue;
        }
        let Some(capacity) = node.capacity(name) else { continue };
        let in_use = used.requested.get(name).copied().unwrap_or(0);
        if requested > capacity.saturating_sub(in_use) {
            return Err(Insufficient { resource: name.into(), requested, used: in_use, capacity });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::defaults::set_pod_defaults;
    use crate::api::Container;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    fn container(name: &str, requests: &[(&str, &str)]) -> Container {
        let mut c = Container { name: name.into(), image: "x".into(), ..Default::default() };
        c.resources.requests = requests.iter().map(|(k, v)| (k.to_string(), q(v))).collect();
        c
    }

    fn pod(requests: &[(&str, &str)]) -> Pod {
        let mut p = Pod::default();
        p.spec.containers = vec![container("a", requests)];
        set_pod_defaults(&mut p);
        p
    }

    /// A node with 1 cpu, 1 GiB, 3 pods and 2 `example.com/gpu`.
    fn node() -> NodeAllocatable {
        NodeAllocatable {
            cpu_millis: 1000,
            memory: 1 << 30,
            pods: 3,
            ephemeral_storage: None,
            scalar: BTreeMap::from([("example.com/gpu".to_string(), 2)]),
        }
    }

    #[test]
    fn a_pod_that_fits_beside_the_admitted_ones_is_ok() {
        let used = Usage::of(&[pod(&[("cpu", "500m"), ("memory", "512Mi")])]);
        assert_eq!(fits(&pod(&[("cpu", "500m"), ("memory", "512Mi")]), &used, &node()), Ok(()));
        assert_eq!(fits(&pod(&[]), &used, &node()), Ok(()), "a pod requesting nothing needs only a pod slot");
    }

    #[test]
    fn too_much_cpu_is_out_of_cpu_in_kubelets_words() {
        let used = Usage::of(&[pod(&[("cpu", "500m")])]);
        let short = fits(&pod(&[("cpu", "600m")]), &used, &node()).unwrap_err();
        assert_eq!(short, Insufficient { resource: "cpu".into(), requested: 600, used: 500, capacity: 1000 });
        assert_eq!(short.reason(), "OutOfcpu");
        assert_eq!(short.message(), "Node didn't have enough resource: cpu, requested: 600, used: 500, capacity: 1000");
    }

    #[test]
    fn memory_is_checked_in_bytes_after_cpu() {
        let used = Usage::of(&[pod(&[("memory", "768Mi")])]);
        let short = fits(&pod(&[("cpu", "100m"), ("memory", "512Mi")]), &used, &node()).unwrap_err();
        assert_eq!((short.reason().as_str(), short.requested, short.used), ("OutOfmemory", 512 << 20, 768 << 20));
        // Both short: cpu is named, as kubelet names the first of its reasons.
        let short = fits(&pod(&[("cpu", "2"), ("memory", "2Gi")]), &Usage::default(), &node()).unwrap_err();
        assert_eq!(short.resource, "cpu");
    }

    #[test]
    fn the_pods_count_is_checked_first_whatever_the_pod_requests() {
        let used = Usage::of(&[pod(&[]), pod(&[]), pod(&[])]);
        let short = fits(&pod(&[("cpu", "2")]), &used, &node()).unwrap_err();
        assert_eq!(short, Insufficient { resource: "pods".into(), requested: 1, used: 3, capacity: 3 });
        assert_eq!(short.reason(), "OutOfpods");
        assert_eq!(short.message(), "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3");
    }

    #[test]
    fn devices_count_against_the_devices_the_node_has() {
        let used = Usage::of(&[pod(&[("example.com/gpu", "1")])]);
        assert_eq!(fits(&pod(&[("example.com/gpu", "1")]), &used, &node()), Ok(()));
        let short = fits(&pod(&[("example.com/gpu", "2")]), &used, &node()).unwrap_err();
        assert_eq!(short.reason(), "OutOfexample.com/gpu");
        assert_eq!(
            short.message(),
            "Node didn't have enough resource: example.com/gpu, requested: 2, used: 1, capacity: 2"
        );
    }

    #[test]
    fn a_resource_the_node_does_not_have_is_out_with_capacity_zero() {
        let short = fits(&pod(&[("example.com/fpga", "1")]), &Usage::default(), &node()).unwrap_err();
        assert_eq!(short.reason(), "OutOfexample.com/fpga");
        assert_eq!(
            short.message(),
            "Node didn't have enough resource: example.com/fpga, requested: 1, used: 0, capacity: 0"
        );
        let short = fits(&pod(&[("hugepages-2Mi", "4Mi")]), &Usage::default(), &node()).unwrap_err();
        assert_eq!((short.reason().as_str(), short.capacity), ("OutOfhugepages-2Mi", 0));
        // Asking for none of it is not asking.
        assert_eq!(fits(&pod(&[("example.com/fpga", "0")]), &Usage::default(), &node()), Ok(()));
    }

    #[test]
    fn ephemeral_storage_is_checked_only_where_the_node_accounts_for_it() {
        let wants = pod(&[("ephemeral-storage", "1Gi")]);
        assert_eq!(fits(&wants, &Usage::default(), &node()), Ok(()));
        let node = NodeAllocatable { ephemeral_storage: Some(512 << 20), ..node() };
        assert_eq!(fits(&wants, &Usage::default(), &node).unwrap_err().reason(), "OutOfephemeral-storage");
    }

    #[test]
    fn requests_follow_kubelets_init_container_and_sidecar_rule() {
        let mut side = container("side", &[("cpu", "200m"), ("example.com/gpu", "1")]);
        side.restart_policy = Some("Always".into());
        let mut p = Pod::default();
        p.spec.init_containers = vec![container("big-init", &[("cpu", "2"), ("example.com/gpu", "2")]), side];
        p.spec.containers = vec![container("a", &[("cpu", "300m"), ("example.com/gpu", "1")])];
        set_pod_defaults(&mut p);
        // cpu: max(2000m, 300m + 200m); gpu: max(2, 1 + 1).
        let want = BTreeMap::from([("cpu".to_string(), 2000), ("example.com/gpu".to_string(), 2)]);
        assert_eq!(pod_requests(&p), want);
    }

    #[test]
    fn requests_default_from_limits_and_add_the_overhead() {
        let mut p = Pod::default();
        let mut c = container("a", &[]);
        c.resources.limits = BTreeMap::from([("cpu".to_string(), q("250m")), ("example.com/gpu".to_string(), q("1"))]);
        p.spec.containers = vec![c];
        p.spec.other.insert("overhead".into(), serde_json::json!({"cpu": "100m", "memory": "10Mi"}));
        set_pod_defaults(&mut p);
        let want = BTreeMap::from([
            ("cpu".to_string(), 350),
            ("example.com/gpu".to_string(), 1),
            ("memory".to_string(), 10 << 20),
        ]);
        assert_eq!(pod_requests(&p), want);
    }

    #[test]
    fn the_node_allocatable_is_read_from_the_node_objects_list() {
        let list = BTreeMap::from([
            ("cpu".to_string(), q("3800m")),
            ("memory".to_string(), q("7Gi")),
            ("pods".to_string(), q("50")),
            ("example.com/gpu".to_string(), q("4")),
        ]);
        let node = NodeAllocatable::from_list(&list, 110);
        let want = NodeAllocatable {
            cpu_millis: 3800,
            memory: 7 << 30,
            pods: 110,
            ephemeral_storage: None,
            scalar: BTreeMap::from([("example.com/gpu".to_string(), 4)]),
        };
        assert_eq!(node, want);
    }
}
