//! The one place the pod manager touches the device manager's types: its command channel,
//! its shared view (allocations and device health) and the updates it publishes; and how far
//! each container's devices are prepared.

use super::backoff::Key;
use super::{Admission, DevicePrep, PodEntry};
use crate::api::{Container, Pod, ResourceHealth, ResourceStatus};
use crate::node::devicemanager::{device_requests, pod_needs_devices, Devices, DevicesCommand};
use crate::node::runtime::devices::DeviceOptions;
use crossbeam_channel::Sender;
use std::collections::{BTreeMap, HashMap, HashSet};

/// The device manager as the pod manager sees it.
pub(super) struct DeviceLink {
    tx: Sender<DevicesCommand>,
    devices: Devices,
    /// Containers whose devices are being prepared, or are ready to start.
    pub(super) prep: HashMap<Key, DevicePrep>,
    /// The pod uids last told to the device manager.
    active: HashSet<String>,
}

impl DeviceLink {
    /// A link over the device manager's command channel and shared view.
    pub(super) fn new(tx: Sender<DevicesCommand>, devices: Devices) -> Self {
        DeviceLink { tx, devices, prep: HashMap::new(), active: HashSet::new() }
    }

    /// Asks for a pod's devices; answered with `DeviceUpdate::Admitted`.
    pub(super) fn admit(&self, pod: &Pod) {
        // A device manager that is gone (shutdown) leaves the pod pending, which is moot then.
        let _ = self.tx.send(DevicesCommand::Admit(Box::new(pod.clone())));
    }

    /// Asks for a container's devices to be prepared; answered with `DeviceUpdate::Prepared`.
    pub(super) fn prepare(&mut self, pod_uid: &str, container: &str) {
        let _ = self.tx.send(DevicesCommand::Prepare { pod_uid: pod_uid.into(), container: container.into() });
        self.prep.insert((pod_uid.into(), container.into()), DevicePrep::Requested);
    }

    /// The device manager's answer to `prepare`; whether it was asked for (a sync then
    /// starts the container).
    pub(super) fn prepared(&mut self, key: Key, result: Result<DeviceOptions, String>) -> bool {
        let Some(slot) = self.prep.get_mut(&key) else { return false };
        *slot = match result {
            Ok(options) => DevicePrep::Ready(options),
            Err(reason) => DevicePrep::Failed(reason),
        };
        true
    }

    /// Takes a container's finished preparation: each serves one start.
    pub(super) fn take_prepared(&mut self, key: &Key) -> Option<DevicePrep> {
        match self.prep.get(key) {
            Some(DevicePrep::Ready(_) | DevicePrep::Failed(_)) => self.prep.remove(key),
            _ => None,
        }
    }

    /// Tells the device manager which pods may hold devices (every pod not refused at
    /// admission), when that changed; the others' devices are freed.
    pub(super) fn tell_active_pods(&mut self, pods: &BTreeMap<String, PodEntry>) {
        let active = || pods.iter().filter(|(_, e)| !matches!(e.admission, Admission::Rejected { .. }));
        let unchanged = active().count() == self.active.len() && active().all(|(uid, _)| self.active.contains(uid));
        if unchanged {
            return;
        }
        let active: HashSet<String> = active().map(|(uid, _)| uid.clone()).collect();
        let _ = self.tx.send(DevicesCommand::ActivePods(active.clone()));
        self.prep.retain(|(uid, _), _| active.contains(uid));
        self.active = active;
    }

    /// The devices the node has for pods, by resource: the healthy ones, or as many as are
    /// allocated if that is more (kubelet's `sanitizeNodeAllocatable`: pods holding devices
    /// of a plugin not registered again yet still fit).
    pub(super) fn allocatable(&self) -> impl Iterator<Item = (String, i64)> {
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.devices.resources().into_iter().map(move |r| (r.name, count(r.allocatable.max(r.allocated))))
    }

    /// A container's allocated devices and their health, for its status.
    pub(super) fn resource_statuses(&self, pod_uid: &str, container: &str) -> Vec<ResourceStatus> {
        self.devices
            .container_devices(pod_uid, container)
            .into_iter()
            .map(|(name, ids)| ResourceStatus {
                name,
                resources: ids
                    .into_iter()
                    .map(|(id, healthy)| ResourceHealth {
                        resource_id: id,
                        health: if healthy { "Healthy" } else { "Unhealthy" }.into(),
                    })
                    .collect(),
            })
            .collect()
    }
}

/// Whether a container asks for plugin devices.
pub(super) fn needs_devices(c: &Container) -> bool {
    !device_requests(c).is_empty()
}

/// Whether any container of a pod asks for plugin devices.
pub(super) fn pod_needs(pod: &Pod) -> bool {
    pod_needs_devices(pod)
}
