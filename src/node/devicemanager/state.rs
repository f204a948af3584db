//! The device manager's bookkeeping: each resource's devices and plugin connection, and
//! which devices each pod's containers hold. Plain data owned by the `fl-devices` thread
//! alone (other threads send it messages and read its published view); every method takes
//! `now` so the grace period is testable without waiting, and every endpoint message
//! carries its registration's generation so a stale one changes nothing.

use crate::node::runtime::devices::DeviceOptions;
use crate::proto::deviceplugin as pb;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// kubelet's `Device.ID` limit (from the API's comment).
pub const MAX_DEVICE_ID_LEN: usize = 63;
/// The health value that means usable; anything else counts as unhealthy, as in kubelet.
pub const HEALTHY: &str = "Healthy";
/// Most resources (plugins) known at once; each has one endpoint thread.
pub const MAX_RESOURCES: usize = 64;

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

/// A connected (or reconnecting) plugin.
pub struct Endpoint {
    /// The plugin's socket.
    pub socket: PathBuf,
    /// The client for Allocate and friends.
    pub client: pb::DevicePluginClient,
    /// `GetDevicePluginOptions`.
    pub pre_start_required: bool,
    /// `GetDevicePluginOptions`.
    pub preferred_allocation: bool,
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
    /// The registration whose endpoint this is (0: none yet).
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

    /// A plugin registered as `generation` (a registration's id, unique for the agent's
    /// life): it replaces any earlier endpoint of the resource, keeping the known devices
    /// until its first ListAndWatch answer. Returns the generation it replaced, whose
    /// endpoint thread is to stop.
    pub fn register(&mut self, name: &str, generation: u64, endpoint: Endpoint) -> Option<u64> {
        let r = self.resources.entry(name.to_string()).or_default();
        let replaced = (r.endpoint.is_some() && r.generation != generation).then_some(r.generation);
        r.generation = generation;
        r.endpoint = Some(endpoint);
        r.stopped_at = None;
        r.listed = false;
        replaced
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
        if let Some(d) = devices.iter().find(|d| d.ID().is_empty() || d.ID().len() > MAX_DEVICE_ID_LEN) {
            let id: String = d.ID().chars().take(80).collect();
            return Err(StateError::ListInvalidDeviceId { id });
        }
        let r = self.resources.get_mut(name).expect("current endpoint has a resource");
        r.healthy.clear();
        r.unhealthy.clear();
        r.numa.clear();
        for d in devices {
            let id = d.ID().to_string();
            let nodes: Vec<i64> = d.topology().nodes().iter().map(|n| n.ID()).collect();
            if !nodes.is_empty() {
                r.numa.insert(id.clone(), nodes);
            }
            if d.health() == HEALTHY {
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

    /// The endpoint thread ended (it gave up reconnecting, or died): the resource waits for
    /// a new registration. A resource still connected (a thread that died mid-stream) turns
    /// unhealthy and starts its grace period here. False for a stale generation.
    pub fn endpoint_ended(&mut self, name: &str, generation: u64, now: Instant) -> bool {
        if !self.is_current(name, generation) {
            return false;
        }
        let r = self.resources.get_mut(name).expect("current endpoint has a resource");
        if r.stopped_at.is_none() {
            let healthy = std::mem::take(&mut r.healthy);
            r.unhealthy.extend(healthy);
            r.stopped_at = Some(now);
            r.listed = false;
        }
        r.endpoint = None;
        true
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

    /// Restores what a checkpoint kept: allocations as they were, and each resource as a
    /// stopped endpoint with no devices, which its plugin revives by registering again.
    pub fn restore(&mut self, restored: Restored, now: Instant) {
        for (uid, containers) in restored.pods {
            let pod = self.pods.entry(uid).or_default();
            for (container, resources) in containers {
                pod.entry(container).or_default().extend(resources);
            }
        }
        for name in restored.resources {
            self.resources.insert(name, Resource { stopped_at: Some(now), ..Resource::default() });
        }
    }
}

/// What an agent restart gets back from the checkpoint.
#[derive(Debug, Default, PartialEq)]
pub struct Restored {
    /// Allocations.
    pub pods: PodDevices,
    /// Resources that had registered.
    pub resources: Vec<String>,
}

#[cfg(test)]
mod tests;
