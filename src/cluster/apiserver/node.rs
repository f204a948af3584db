//! The Node object and the Lease, as kubelet makes them, as pure functions: the labels a
//! node registers with, its status from what the agent knows, when the status is sent again
//! (only when it changed, or every 5 minutes), and the Lease renewed every 10 s.

use crate::api::{ContainerImage, Node, NodeStatus, ObjectMeta, Quantity, Taint};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

/// How often the node's status is computed and, when it changed, sent (kubelet's
/// `nodeStatusUpdateFrequency`).
pub const STATUS_UPDATE_PERIOD: Duration = Duration::from_secs(10);
/// The longest an unchanged status goes unsent (kubelet's `nodeStatusReportFrequency`).
pub const STATUS_REPORT_PERIOD: Duration = Duration::from_secs(300);
/// How often the Lease is renewed, and how long it holds (kubelet's 10 s and 40 s).
pub const LEASE_RENEW_PERIOD: Duration = Duration::from_secs(10);
/// The Lease's `leaseDurationSeconds`.
pub const LEASE_DURATION_SECONDS: i32 = 40;
/// The namespace of node Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// The most images a node reports (kubelet's `nodeStatusMaxImages`).
pub const MAX_IMAGES: usize = 50;

/// What the agent knows of its node, for the Node object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeFacts {
    /// The node's name.
    pub name: String,
    /// Its address (`InternalIP`).
    pub ip: String,
    /// The host name (`Hostname` address, `kubernetes.io/hostname`).
    pub hostname: String,
    /// GOARCH spelling of the machine's architecture.
    pub arch: String,
    /// `node.kubernetes.io/instance-type`, when configured.
    pub instance_type: String,
    /// Labels from the configuration (they cannot override kubelet's own).
    pub labels: BTreeMap<String, String>,
    /// Taints from the configuration.
    pub taints: Vec<Taint>,
    /// Capacity and allocatable: cpu, memory, pods, ephemeral-storage, device resources.
    pub capacity: BTreeMap<String, Quantity>,
    /// What pods may use.
    pub allocatable: BTreeMap<String, Quantity>,
    /// The images (names, bytes).
    pub images: Vec<(Vec<String>, u64)>,
    /// Kernel, OS and runtime versions.
    pub node_info: crate::api::NodeSystemInfo,
    /// The agent's API port (`daemonEndpoints.kubeletEndpoint.Port`).
    pub port: i32,
}

/// The GOARCH name of this machine's architecture (`x86_64` is `amd64`).
pub fn goarch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "riscv64" => "riscv64",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        other => other,
    }
}

/// The labels a node registers with: the configured ones, then kubelet's own (which win).
pub fn labels(f: &NodeFacts) -> BTreeMap<String, String> {
    let mut out = f.labels.clone();
    for (k, v) in [
        ("kubernetes.io/hostname", f.hostname.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", f.arch.as_str()),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", f.arch.as_str()),
    ] {
        out.insert(k.into(), v.into());
    }
    if !f.instance_type.is_empty() {
        out.insert("node.kubernetes.io/instance-type".into(), f.instance_type.clone());
    }
    out
}

/// Resources reported before and gone now are reported as 0, as kubelet keeps a removed
/// device plugin resource at 0 (so pods asking for it are refused, not left pending).
pub fn with_gone_resources(
    current: &BTreeMap<String, Quantity>,
    reported_before: &BTreeSet<String>,
) -> BTreeMap<String, Quantity> {
    let mut out = current.clone();
    for name in reported_before.iter().filter(|n| crate::api::validation::is_extended_resource(n)) {
        out.entry(name.clone()).or_insert_with(Quantity::zero);
    }
    out
}

/// The Node object for `f` with `conditions` (the `/node` ones).
pub fn node_object(f: &NodeFacts, conditions: Vec<crate::api::NodeCondition>) -> Node {
    let mut images: Vec<&(Vec<String>, u64)> = f.images.iter().filter(|(names, _)| !names.is_empty()).collect();
    images.sort_by_key(|i| std::cmp::Reverse(i.1));
    let images = images
        .into_iter()
        .take(MAX_IMAGES)
        .map(|(names, size)| ContainerImage {
            names: names.clone(),
            size_bytes: i64::try_from(*size).unwrap_or(i64::MAX),
        })
        .collect();
    let mut addresses = vec![crate::api::NodeAddress { type_: "InternalIP".into(), address: f.ip.clone() }];
    addresses.push(crate::api::NodeAddress { type_: "Hostname".into(), address: f.hostname.clone() });
    Node {
        api_version: "v1".into(),
        kind: "Node".into(),
        metadata: ObjectMeta { name: f.name.clone(), labels: labels(f), ..Default::default() },
        spec: crate::api::NodeSpec { taints: f.taints.clone(), ..Default::default() },
        status: NodeStatus {
            addresses,
            node_info: Some(f.node_info.clone()),
            images,
            daemon_endpoints: Some(crate::api::NodeDaemonEndpoints {
                kubelet_endpoint: crate::api::DaemonEndpoint { port: f.port },
            }),
            capacity: f.capacity.clone(),
            allocatable: f.allocatable.clone(),
            conditions,
        },
    }
}

/// `status` without its heartbeat times: what decides whether it changed.
fn without_heartbeats(status: &NodeStatus) -> NodeStatus {
    let mut s = status.clone();
    for c in &mut s.conditions {
        c.last_heartbeat_time = None;
    }
    s
}

/// Whether `new` must be sent at `now`: it changed since `last` (heartbeats aside), or the
/// last was sent `STATUS_REPORT_PERIOD` ago, or none was ever sent.
pub fn status_due(last: Option<(&NodeStatus, SystemTime)>, new: &NodeStatus, now: SystemTime) -> bool {
    match last {
        None => true,
        Some((sent, at)) => {
            now.duration_since(at).unwrap_or_default() >= STATUS_REPORT_PERIOD
                || without_heartbeats(sent) != without_heartbeats(new)
        }
    }
}

/// `coordination.k8s.io/v1` `Lease` (the fields a node sets).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Lease {
    /// `coordination.k8s.io/v1`.
    pub api_version: String,
    /// `Lease`.
    pub kind: String,
    /// Name (the node's), namespace `kube-node-lease`, owner the Node.
    pub metadata: LeaseMeta,
    /// Holder, duration, renew time.
    pub spec: LeaseSpec,
}

/// A Lease's metadata (with the owner reference kubelet sets to its Node).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LeaseMeta {
    /// The node's name.
    pub name: String,
    /// `kube-node-lease`.
    pub namespace: String,
    /// For updates.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    /// The Node, so the Lease goes with it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
}

/// `metav1.OwnerReference`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OwnerReference {
    /// `v1`.
    pub api_version: String,
    /// `Node`.
    pub kind: String,
    /// The node's name.
    pub name: String,
    /// The node's uid.
    pub uid: String,
}

/// `LeaseSpec`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LeaseSpec {
    /// The node's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder_identity: Option<String>,
    /// 40.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_duration_seconds: Option<i32>,
    /// When it was last renewed (`MicroTime`: RFC 3339 with microseconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renew_time: Option<String>,
}

/// The node's Lease renewed at `now`, owned by the Node `node_uid` (empty before the Node
/// is known: no owner then, as kubelet).
pub fn lease(node: &str, node_uid: &str, resource_version: &str, now: SystemTime) -> Lease {
    Lease {
        api_version: "coordination.k8s.io/v1".into(),
        kind: "Lease".into(),
        metadata: LeaseMeta {
            name: node.into(),
            namespace: LEASE_NAMESPACE.into(),
            resource_version: resource_version.into(),
            owner_references: if node_uid.is_empty() {
                Vec::new()
            } else {
                vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: node.into(),
                    uid: node_uid.into(),
                }]
            },
        },
        spec: LeaseSpec {
            holder_identity: Some(node.into()),
            lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
            renew_time: Some(micro_time(now)),
        },
    }
}

/// `metav1.MicroTime`: `2006-01-02T15:04:05.000000Z`.
pub fn micro_time(t: SystemTime) -> String {
    // rfc3339_nano writes nine fraction digits; MicroTime has six.
    let nanos = crate::base::timefmt::rfc3339_nano(t);
    format!("{}Z", &nanos[..nanos.len() - 4])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NodeCondition, Time};

    fn facts() -> NodeFacts {
        NodeFacts {
            name: "edge1".into(),
            ip: "10.0.0.5".into(),
            hostname: "edge1".into(),
            arch: "arm64".into(),
            instance_type: "rpi4".into(),
            labels: BTreeMap::from([("site".into(), "north".into()), ("kubernetes.io/os".into(), "windows".into())]),
            taints: vec![Taint { key: "edge".into(), value: "true".into(), effect: "NoSchedule".into() }],
            capacity: BTreeMap::from([("cpu".into(), Quantity::parse("4").unwrap())]),
            allocatable: BTreeMap::from([("cpu".into(), Quantity::parse("3800m").unwrap())]),
            images: (0..60).map(|i| (vec![format!("img{i}:1")], i as u64)).chain([(vec![], 999)]).collect(),
            node_info: Default::default(),
            port: 10255,
        }
    }

    #[test]
    fn the_node_carries_kubelets_labels_over_the_configured_ones_and_its_largest_50_images() {
        let n = node_object(&facts(), Vec::new());
        let l = &n.metadata.labels;
        assert_eq!(l["kubernetes.io/os"], "linux", "kubelet's own label wins");
        assert_eq!((l["kubernetes.io/arch"].as_str(), l["beta.kubernetes.io/arch"].as_str()), ("arm64", "arm64"));
        assert_eq!(l["node.kubernetes.io/instance-type"], "rpi4");
        assert_eq!(l["site"], "north");
        assert_eq!(n.spec.taints.len(), 1);
        assert_eq!(n.status.images.len(), 50);
        assert_eq!(n.status.images[0].names, ["img59:1"], "largest first; an image without a name is left out");
        assert_eq!(n.status.addresses[0].address, "10.0.0.5");
        assert_eq!(n.status.daemon_endpoints.as_ref().unwrap().kubelet_endpoint.port, 10255);
        let json = serde_json::to_value(&n).unwrap();
        assert_eq!(json["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"], 10255);
        assert_eq!(json["status"]["nodeInfo"]["machineID"], "");
    }

    #[test]
    fn a_device_resource_that_went_away_is_reported_as_zero() {
        let current = BTreeMap::from([("cpu".to_string(), Quantity::parse("4").unwrap())]);
        let before = BTreeSet::from(["vendor.com/gpu".to_string(), "memory".to_string()]);
        let out = with_gone_resources(&current, &before);
        assert_eq!(out["vendor.com/gpu"], Quantity::zero());
        assert!(!out.contains_key("memory"), "only extended resources");
    }

    #[test]
    fn the_status_is_sent_when_it_changed_or_every_five_minutes_not_for_a_new_heartbeat() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let cond = |hb: u64, status: &str| NodeCondition {
            type_: "Ready".into(),
            status: status.into(),
            last_heartbeat_time: Some(Time(t0 + Duration::from_secs(hb))),
            last_transition_time: Some(Time(t0)),
            reason: String::new(),
            message: String::new(),
        };
        let sent = NodeStatus { conditions: vec![cond(0, "True")], ..Default::default() };
        let beat = NodeStatus { conditions: vec![cond(10, "True")], ..Default::default() };
        let changed = NodeStatus { conditions: vec![cond(10, "False")], ..Default::default() };
        assert!(status_due(None, &sent, t0));
        assert!(!status_due(Some((&sent, t0)), &beat, t0 + Duration::from_secs(10)));
        assert!(status_due(Some((&sent, t0)), &changed, t0 + Duration::from_secs(10)));
        assert!(status_due(Some((&sent, t0)), &beat, t0 + STATUS_REPORT_PERIOD));
    }

    #[test]
    fn the_lease_is_kubelets_40_seconds_owned_by_the_node_with_a_micro_time() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        let l = lease("edge1", "uid-1", "42", t);
        let json = serde_json::to_value(&l).unwrap();
        assert_eq!(json["spec"]["leaseDurationSeconds"], 40);
        assert_eq!(json["spec"]["holderIdentity"], "edge1");
        assert_eq!(json["spec"]["renewTime"], "2023-11-14T22:13:20.123456Z");
        assert_eq!(json["metadata"]["namespace"], "kube-node-lease");
        assert_eq!(json["metadata"]["ownerReferences"][0]["kind"], "Node");
        assert!(lease("edge1", "", "", t).metadata.owner_references.is_empty());
        assert_eq!(
            micro_time(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
            "2023-11-14T22:13:20.000000Z"
        );
    }
}
