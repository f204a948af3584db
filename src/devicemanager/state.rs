//! The device manager's bookkeeping: each resource's devices and plugin connection, and
//! which devices each pod's containers hold. Plain data behind one lock; every method takes
//! `now` so the grace period is testable without waiting.

use super::checkpoint::{CheckpointData, PodDeviceEntry};
use crate::proto::deviceplugin as pb;
use crate::runtime::devices::{DeviceOptions, DeviceSpec, MountSpec};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// kubelet's `Device.ID` limit (from the API's comment).
pub const MAX_DEVICE_ID_LEN: usize = 63;
/// The health value that means usable; anything else counts as unhealthy, as in kubelet.
pub const HEALTHY: &str = "Healthy";

/// Why the bookkeeping refused a plugin's device list or a container's allocation. The
/// messages are kubelet's, which pod events and the README quote.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// A ListAndWatch answer listed more devices than a resource may have.
    #[error(
        "{listed} devices listed, more than the {allowed} allowed per resource (devices.max_devices_per_resource)"
    )]
    ListTooManyDevices {
        /// Devices in the answer.
        listed: usize,
        /// `devices.max_devices_per_resource`.
        allowed: usize,
    },
    /// A ListAndWatch answer held an empty or overlong device ID.
    #[error("device ID {id:?} is empty or longer than {MAX_DEVICE_ID_LEN} characters")]
    ListInvalidDeviceId {
        /// The ID, cut to 80 characters.
        id: String,
    },
    /// A container asked for another number of devices than it already holds.
    #[error("pod {uid:?} container {container:?} changed request for resource {resource:?} from {from} to {to}")]
    AllocateChangedRequest {
        /// Pod uid.
        uid: String,
        /// Container name.
        container: String,
        /// Resource name.
        resource: String,
        /// Devices held.
        from: usize,
        /// Devices asked for now.
        to: usize,
    },
    /// No plugin has registered the resource.
    #[error("cannot allocate unregistered device {resource}")]
    AllocateUnregistered {
        /// Resource name.
        resource: String,
    },
    /// The resource has no healthy device.
    #[error("no healthy devices present; cannot allocate unhealthy devices {resource}")]
    AllocateUnhealthy {
        /// Resource name.
        resource: String,
    },
    /// A device of a finished init container, to be reused, turned unhealthy.
    #[error("previously allocated devices are no longer healthy")]
    ReuseUnhealthy,
    /// Fewer free healthy devices than asked for.
    #[error("requested number of devices unavailable for {resource}. Requested: {requested}, Available: {available}")]
    AllocateUnavailable {
        /// Resource name.
        resource: String,
        /// Devices still needed.
        requested: usize,
        /// Free healthy devices.
        available: usize,
    },
}

/// The runtime-level options from one plugin's answer.
impl From<&pb::ContainerAllocateResponse> for DeviceOptions {
    fn from(r: &pb::ContainerAllocateResponse) -> Self {
        DeviceOptions {
            envs: r.get_envs().iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            mounts: r
                .get_mounts()
                .iter()
                .map(|m| MountSpec {
                    container_path: m.get_container_path().into(),
                    host_path: m.get_host_path().into(),
                    read_only: m.get_read_only(),
                })
                .collect(),
            devices: r
                .get_devices()
                .iter()
                .map(|d| DeviceSpec {
                    container_path: d.get_container_path().into(),
                    host_path: d.get_host_path().into(),
                    permissions: d.get_permissions().into(),
                })
                .collect(),
            annotations: r.get_annotations().iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            cdi_devices: r.get_cdi_devices().iter().map(|d| d.get_name().to_string()).collect(),
        }
    }
}

/// A connected (or reconnecting) plugin.
pub struct Endpoint {
    /// Bumped on every registration of the resource; older endpoint threads see a newer
    /// generation and leave the state alone.
    pub generation: u64,
    /// The plugin's socket.
    pub socket: PathBuf,
    /// The client for Allocate and friends.
    pub client: pb::DevicePluginClient,
    /// `GetDevicePluginOptions`.
    pub pre_start_required: bool,
    /// `GetDevicePluginOptions`.
    pub preferred_allocation: bool,
    /// Dropping it stops the endpoint thread (its ListAndWatch stream is cancelled).
    pub stop: Option<futures::channel::oneshot::Sender<()>>,
}

/// One extended resource.
#[derive(Default)]
pub struct Resource {
    /// Usable devices.
    pub healthy: BTreeSet<String>,
    /// Listed but not usable (or the plugin is gone).
    pub unhealthy: BTreeSet<String>,
    /// NUMA nodes per device (no entry: no topology).
    pub numa: BTreeMap<String, Vec<i64>>,
    /// The plugin; `None` after an agent restart until it registers again.
    pub endpoint: Option<Endpoint>,
    /// When the plugin's stream broke (or the agent restarted); `None` while connected.
    pub stopped_at: Option<Instant>,
    /// A ListAndWatch answer arrived since the plugin (re)connected.
    pub listed: bool,
    generation: u64,
}

impl Resource {
    /// Connected and listed: allocation can proceed.
    pub fn ready(&self) -> bool {
        self.endpoint.is_some() && self.stopped_at.is_none() && self.listed
    }
}

/// One container's devices of one resource.
#[derive(Clone, Debug, PartialEq)]
pub struct Allocation {
    /// Device IDs by NUMA node (`-1`: no topology), as kubelet's `DevicesPerNUMA`.
    pub device_ids: BTreeMap<i64, Vec<String>>,
    /// The plugin's allocate response.
    pub options: DeviceOptions,
}

impl Allocation {
    /// Every device ID, once.
    pub fn ids(&self) -> BTreeSet<String> {
        self.device_ids.values().flatten().cloned().collect()
    }
}

/// pod uid → container name → resource → allocation.
pub type PodDevices = BTreeMap<String, BTreeMap<String, BTreeMap<String, Allocation>>>;

/// What allocating a container's share of a resource needs.
#[derive(Debug, PartialEq)]
pub enum Choice {
    /// Already allocated (a container restart, or restored from the checkpoint).
    Done,
    /// `reused` (from finished init containers) plus `needed` more out of `available`.
    Need {
        /// Taken from devices the pod's finished init containers held.
        reused: Vec<String>,
        /// How many more.
        needed: usize,
        /// Healthy devices nobody holds, sorted.
        available: Vec<String>,
    },
}

/// A resource as the local API shows it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceView {
    /// Resource name.
    pub name: String,
    /// healthy + unhealthy.
    pub capacity: u64,
    /// healthy.
    pub allocatable: u64,
    /// Devices held by containers.
    pub allocated: u64,
    /// `Connected`, `Reconnecting`, `Stopped` (waiting for the plugin to register again).
    pub plugin: String,
    /// The plugin's socket, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Healthy device IDs.
    pub healthy: Vec<String>,
    /// Unhealthy device IDs.
    pub unhealthy: Vec<String>,
}

/// All of the device manager's data.
pub struct DeviceState {
    /// Resources by name.
    pub resources: BTreeMap<String, Resource>,
    /// Allocations.
    pub pods: PodDevices,
    /// How long a stopped resource stays in capacity.
    pub grace: Duration,
    /// Most devices one plugin may list.
    pub max_devices: usize,
}

impl DeviceState {
    /// Empty state.
    pub fn new(grace: Duration, max_devices: usize) -> Self {
        DeviceState { resources: BTreeMap::new(), pods: BTreeMap::new(), grace, max_devices }
    }

    /// A plugin registered: it replaces any earlier endpoint of the resource (whose thread
    /// stops), keeping the known devices until its first ListAndWatch answer. Returns the
    /// new generation.
    pub fn register(&mut self, name: &str, mut endpoint: Endpoint) -> u64 {
        let r = self.resources.entry(name.to_string()).or_default();
        r.generation += 1;
        endpoint.generation = r.generation;
        r.endpoint = Some(endpoint);
        r.stopped_at = None;
        r.listed = false;
        r.generation
    }

    /// Whether `generation` is still the resource's current endpoint.
    pub fn is_current(&self, name: &str, generation: u64) -> bool {
        self.resources.get(name).is_some_and(|r| r.generation == generation && r.endpoint.is_some())
    }

    /// A ListAndWatch answer: replaces the resource's device sets. Oversize lists and bad
    /// IDs are refused whole (the previous sets stay). `Ok(false)` for a stale endpoint.
    pub fn update(&mut self, name: &str, generation: u64, devices: &[pb::Device]) -> Result<bool, StateError> {
        if !self.is_current(name, generation) {
            return Ok(false);
        }
        if devices.len() > self.max_devices {
            return Err(StateError::ListTooManyDevices { listed: devices.len(), allowed: self.max_devices });
        }
        if let Some(d) = devices.iter().find(|d| d.get_ID().is_empty() || d.get_ID().len() > MAX_DEVICE_ID_LEN) {
            let id: String = d.get_ID().chars().take(80).collect();
            return Err(StateError::ListInvalidDeviceId { id });
        }
        let r = self.resources.get_mut(name).expect("current endpoint has a resource");
        r.healthy.clear();
        r.unhealthy.clear();
        r.numa.clear();
        for d in devices {
            let id = d.get_ID().to_string();
            let nodes: Vec<i64> = d.get_topology().get_nodes().iter().map(|n| n.get_ID()).collect();
            if !nodes.is_empty() {
                r.numa.insert(id.clone(), nodes);
            }
            if d.get_health() == HEALTHY {
                r.unhealthy.remove(&id);
                r.healthy.insert(id);
            } else if !r.healthy.contains(&id) {
                r.unhealthy.insert(id);
            }
        }
        r.listed = true;
        Ok(true)
    }

    /// The plugin's stream ended: its devices are unhealthy and the grace period starts.
    pub fn stream_ended(&mut self, name: &str, generation: u64, now: Instant) -> bool {
        if !self.is_current(name, generation) {
            return false;
        }
        let r = self.resources.get_mut(name).expect("current endpoint has a resource");
        let healthy = std::mem::take(&mut r.healthy);
        r.unhealthy.extend(healthy);
        r.stopped_at = Some(now);
        r.listed = false;
        true
    }

    /// The endpoint thread reached the plugin again after a broken stream.
    pub fn reconnected(&mut self, name: &str, generation: u64, pre_start: bool, preferred: bool) -> bool {
        if !self.is_current(name, generation) {
            return false;
        }
        let r = self.resources.get_mut(name).expect("current endpoint has a resource");
        r.stopped_at = None;
        if let Some(e) = r.endpoint.as_mut() {
            e.pre_start_required = pre_start;
            e.preferred_allocation = preferred;
        }
        true
    }

    /// The endpoint thread gave up reconnecting: the resource waits for a new registration.
    pub fn endpoint_gone(&mut self, name: &str, generation: u64) {
        if self.is_current(name, generation) {
            if let Some(r) = self.resources.get_mut(name) {
                r.endpoint = None;
            }
        }
    }

    /// Removes resources stopped longer than the grace period; returns their names.
    pub fn expire(&mut self, now: Instant) -> Vec<String> {
        let grace = self.grace;
        let gone: Vec<String> = self
            .resources
            .iter()
            .filter(|(_, r)| r.stopped_at.is_some_and(|t| now.saturating_duration_since(t) >= grace))
            .map(|(n, _)| n.clone())
            .collect();
        for n in &gone {
            log::info!("devices: resource {n} removed: its plugin did not come back within {:?}", grace);
            self.resources.remove(n);
        }
        gone
    }

    /// Devices of `resource` held by any container.
    pub fn allocated(&self, resource: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for containers in self.pods.values() {
            for resources in containers.values() {
                if let Some(a) = resources.get(resource) {
                    out.extend(a.ids());
                }
            }
        }
        out
    }

    /// Frees the devices of pods not in `active`; true when something was freed.
    pub fn retain_pods(&mut self, active: &std::collections::HashSet<String>) -> bool {
        let before = self.pods.len();
        self.pods.retain(|uid, _| {
            let keep = active.contains(uid);
            if !keep {
                log::info!("devices: freeing the devices of pod {uid}, which is gone");
            }
            keep
        });
        self.pods.len() != before
    }

    /// Plans allocating `required` devices of `resource` to a container, kubelet's
    /// `devicesToAllocate` without topology hints. `reusable` holds devices of the pod's
    /// finished init containers.
    pub fn choose(
        &self,
        uid: &str,
        container: &str,
        resource: &str,
        required: usize,
        reusable: &BTreeSet<String>,
    ) -> Result<Choice, StateError> {
        if let Some(a) = self.pods.get(uid).and_then(|c| c.get(container)).and_then(|r| r.get(resource)) {
            let have = a.ids().len();
            if have != required {
                return Err(StateError::AllocateChangedRequest {
                    uid: uid.into(),
                    container: container.into(),
                    resource: resource.into(),
                    from: have,
                    to: required,
                });
            }
            return Ok(Choice::Done);
        }
        let Some(r) = self.resources.get(resource) else {
            return Err(StateError::AllocateUnregistered { resource: resource.into() });
        };
        if r.healthy.is_empty() {
            return Err(StateError::AllocateUnhealthy { resource: resource.into() });
        }
        let reused: Vec<String> = reusable.iter().take(required).cloned().collect();
        if reused.iter().any(|d| !r.healthy.contains(d)) {
            return Err(StateError::ReuseUnhealthy);
        }
        let needed = required - reused.len();
        let in_use = self.allocated(resource);
        let available: Vec<String> = r.healthy.iter().filter(|d| !in_use.contains(*d)).cloned().collect();
        if available.len() < needed {
            return Err(StateError::AllocateUnavailable {
                resource: resource.into(),
                requested: needed,
                available: available.len(),
            });
        }
        Ok(Choice::Need { reused, needed, available })
    }

    /// Records a container's devices of a resource.
    pub fn record(&mut self, uid: &str, container: &str, resource: &str, ids: &[String], options: DeviceOptions) {
        let numa = self.resources.get(resource).map(|r| &r.numa);
        let mut device_ids: BTreeMap<i64, Vec<String>> = BTreeMap::new();
        for id in ids {
            match numa.and_then(|n| n.get(id)) {
                Some(nodes) => nodes.iter().for_each(|n| device_ids.entry(*n).or_default().push(id.clone())),
                None => device_ids.entry(-1).or_default().push(id.clone()),
            }
        }
        self.pods
            .entry(uid.into())
            .or_default()
            .entry(container.into())
            .or_default()
            .insert(resource.into(), Allocation { device_ids, options });
    }

    /// A container's merged device options, resources in name order; `None` when it holds
    /// no devices.
    pub fn container_options(&self, uid: &str, container: &str) -> Option<DeviceOptions> {
        let resources = self.pods.get(uid)?.get(container)?;
        let mut out = DeviceOptions::default();
        for (name, a) in resources {
            out.merge(&a.options, name);
        }
        Some(out)
    }

    /// Capacity per resource as the API shows it.
    pub fn view(&self) -> Vec<ResourceView> {
        self.resources
            .iter()
            .map(|(name, r)| ResourceView {
                name: name.clone(),
                capacity: (r.healthy.len() + r.unhealthy.len()) as u64,
                allocatable: r.healthy.len() as u64,
                allocated: self.allocated(name).len() as u64,
                plugin: match (&r.endpoint, r.stopped_at) {
                    (Some(_), None) => "Connected",
                    (Some(_), Some(_)) => "Reconnecting",
                    (None, _) => "Stopped",
                }
                .into(),
                endpoint: r.endpoint.as_ref().map(|e| e.socket.display().to_string()),
                healthy: r.healthy.iter().cloned().collect(),
                unhealthy: r.unhealthy.iter().cloned().collect(),
            })
            .collect()
    }

    /// What the checkpoint keeps: allocations, and each resource's healthy devices.
    pub fn checkpoint(&self) -> CheckpointData {
        let mut entries = Vec::new();
        for (uid, containers) in &self.pods {
            for (container, resources) in containers {
                for (resource, a) in resources {
                    entries.push(PodDeviceEntry {
                        pod_uid: uid.clone(),
                        container_name: container.clone(),
                        resource_name: resource.clone(),
                        device_ids: a.device_ids.clone(),
                        alloc_resp: a.options.clone(),
                    });
                }
            }
        }
        let registered = self.resources.iter().map(|(n, r)| (n.clone(), r.healthy.iter().cloned().collect())).collect();
        CheckpointData { pod_device_entries: entries, registered_devices: registered }
    }

    /// Restores a checkpoint: allocations as they were, and each registered resource as a
    /// stopped endpoint with no devices, which its plugin revives by registering again.
    pub fn restore(&mut self, data: CheckpointData, now: Instant) {
        for e in data.pod_device_entries {
            self.pods
                .entry(e.pod_uid)
                .or_default()
                .entry(e.container_name)
                .or_default()
                .insert(e.resource_name, Allocation { device_ids: e.device_ids, options: e.alloc_resp });
        }
        for name in data.registered_devices.into_keys() {
            self.resources.insert(name, Resource { stopped_at: Some(now), ..Resource::default() });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(id: &str, healthy: bool) -> pb::Device {
        let mut d = pb::Device::new();
        d.set_ID(id.into());
        d.set_health(if healthy { HEALTHY } else { "Unhealthy" }.into());
        d
    }

    fn endpoint() -> Endpoint {
        let env = std::sync::Arc::new(grpcio::EnvBuilder::new().cq_count(1).build());
        // Never dialled: a channel connects lazily.
        let ch = grpcio::ChannelBuilder::new(env).connect("unix:/nonexistent/ferrolet-test.sock");
        Endpoint {
            generation: 0,
            socket: "/nonexistent/ferrolet-test.sock".into(),
            client: pb::DevicePluginClient::new(ch),
            pre_start_required: false,
            preferred_allocation: false,
            stop: None,
        }
    }

    fn state_with(devs: &[(&str, bool)]) -> (DeviceState, u64) {
        let mut s = DeviceState::new(Duration::from_secs(300), 16);
        let g = s.register("example.com/dev", endpoint());
        let list: Vec<pb::Device> = devs.iter().map(|(id, h)| device(id, *h)).collect();
        assert_eq!(s.update("example.com/dev", g, &list), Ok(true));
        (s, g)
    }

    #[test]
    fn capacity_counts_healthy_and_unhealthy() {
        let (s, _) = state_with(&[("a", true), ("b", true), ("c", false)]);
        let v = &s.view()[0];
        assert_eq!((v.capacity, v.allocatable, v.plugin.as_str()), (3, 2, "Connected"));
    }

    #[test]
    fn stale_generations_and_oversize_lists_change_nothing() {
        let (mut s, g) = state_with(&[("a", true)]);
        let g2 = s.register("example.com/dev", endpoint());
        assert_eq!(s.update("example.com/dev", g, &[device("x", true)]), Ok(false));
        assert!(!s.stream_ended("example.com/dev", g, Instant::now()), "the old stream must not stop the new one");
        assert!(s.is_current("example.com/dev", g2));
        let many: Vec<pb::Device> = (0..17).map(|i| device(&format!("d{i}"), true)).collect();
        assert_eq!(
            s.update("example.com/dev", g2, &many).unwrap_err(),
            StateError::ListTooManyDevices { listed: 17, allowed: 16 }
        );
        assert!(s.update("example.com/dev", g2, &many).unwrap_err().to_string().contains("17 devices listed"));
        let long = "x".repeat(64);
        assert!(s
            .update("example.com/dev", g2, &[device(&long, true)])
            .unwrap_err()
            .to_string()
            .contains("longer than 63"));
        assert_eq!(s.resources["example.com/dev"].healthy.iter().collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn a_stopped_resource_stays_for_the_grace_period_then_goes() {
        let (mut s, g) = state_with(&[("a", true), ("b", true)]);
        let t0 = Instant::now();
        assert!(s.stream_ended("example.com/dev", g, t0));
        let v = &s.view()[0];
        assert_eq!((v.capacity, v.allocatable, v.plugin.as_str()), (2, 0, "Reconnecting"));
        assert!(s.expire(t0 + Duration::from_secs(299)).is_empty());
        assert_eq!(s.expire(t0 + Duration::from_secs(300)), ["example.com/dev"]);
        assert!(s.view().is_empty());
    }

    #[test]
    fn choose_follows_kubelet_errors_and_reuse() {
        let (mut s, _) = state_with(&[("a", true), ("b", true), ("c", false)]);
        let none = BTreeSet::new();
        assert_eq!(
            s.choose("p", "c", "other.com/x", 1, &none).unwrap_err(),
            StateError::AllocateUnregistered { resource: "other.com/x".into() }
        );
        assert_eq!(
            s.choose("p", "c", "other.com/x", 1, &none).unwrap_err().to_string(),
            "cannot allocate unregistered device other.com/x"
        );
        assert_eq!(
            s.choose("p", "c", "example.com/dev", 3, &none).unwrap_err().to_string(),
            "requested number of devices unavailable for example.com/dev. Requested: 3, Available: 2"
        );
        s.record("p", "init", "example.com/dev", &["a".into()], DeviceOptions::default());
        let reuse: BTreeSet<String> = ["a".to_string()].into();
        assert_eq!(
            s.choose("p", "app", "example.com/dev", 2, &reuse).unwrap(),
            Choice::Need { reused: vec!["a".into()], needed: 1, available: vec!["b".into()] }
        );
        s.record("p", "app", "example.com/dev", &["a".into(), "b".into()], DeviceOptions::default());
        assert_eq!(s.choose("p", "app", "example.com/dev", 2, &none).unwrap(), Choice::Done);
        assert_eq!(
            s.choose("p", "app", "example.com/dev", 1, &none).unwrap_err().to_string(),
            "pod \"p\" container \"app\" changed request for resource \"example.com/dev\" from 2 to 1"
        );
        assert_eq!(
            s.choose("q", "c", "example.com/dev", 1, &none).unwrap_err().to_string(),
            "requested number of devices unavailable for example.com/dev. Requested: 1, Available: 0"
        );
        s.retain_pods(&["q".to_string()].into());
        assert!(s.allocated("example.com/dev").is_empty());
    }

    #[test]
    fn unhealthy_only_resources_cannot_allocate() {
        let (s, _) = state_with(&[("c", false)]);
        assert_eq!(
            s.choose("p", "c", "example.com/dev", 1, &BTreeSet::new()).unwrap_err().to_string(),
            "no healthy devices present; cannot allocate unhealthy devices example.com/dev"
        );
    }

    #[test]
    fn numa_nodes_group_device_ids() {
        let mut s = DeviceState::new(Duration::from_secs(300), 16);
        let g = s.register("example.com/dev", endpoint());
        let mut d0 = device("d0", true);
        let mut topo = pb::TopologyInfo::new();
        let mut n = pb::NUMANode::new();
        n.set_ID(1);
        topo.mut_nodes().push(n);
        d0.set_topology(topo);
        s.update("example.com/dev", g, &[d0, device("d1", true)]).unwrap();
        s.record("p", "c", "example.com/dev", &["d0".into(), "d1".into()], DeviceOptions::default());
        let a = &s.pods["p"]["c"]["example.com/dev"];
        assert_eq!(a.device_ids, BTreeMap::from([(-1, vec!["d1".to_string()]), (1, vec!["d0".to_string()])]));
    }

    #[test]
    fn merge_keeps_the_first_value() {
        let mut a = DeviceOptions::default();
        a.envs.insert("X".into(), "1".into());
        a.devices.push(DeviceSpec {
            container_path: "/dev/a".into(),
            host_path: "/dev/a".into(),
            permissions: "rw".into(),
        });
        let mut b = a.clone();
        b.envs.insert("X".into(), "2".into());
        b.envs.insert("Y".into(), "3".into());
        b.devices[0].host_path = "/dev/b".into();
        b.cdi_devices.push("vendor.com/dev=1".into());
        a.merge(&b, "vendor.com/dev");
        assert_eq!(a.envs, BTreeMap::from([("X".into(), "1".into()), ("Y".into(), "3".into())]));
        assert_eq!(a.devices.len(), 1);
        assert_eq!(a.devices[0].host_path, "/dev/a");
        assert_eq!(a.cdi_devices, ["vendor.com/dev=1"]);
    }

    #[test]
    fn checkpoint_round_trip_restores_allocations_and_stopped_resources() {
        let (mut s, _) = state_with(&[("a", true), ("b", true)]);
        let mut o = DeviceOptions::default();
        o.envs.insert("DEV".into(), "a".into());
        s.record("p", "c", "example.com/dev", &["a".into()], o);
        let data = s.checkpoint();
        let mut r = DeviceState::new(Duration::from_secs(300), 16);
        r.restore(data, Instant::now());
        assert_eq!(r.pods, s.pods);
        let v = &r.view()[0];
        assert_eq!((v.capacity, v.allocatable, v.plugin.as_str()), (0, 0, "Stopped"));
        assert!(!r.resources["example.com/dev"].ready());
    }
}
