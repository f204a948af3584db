//! The one place the pod manager touches the device manager's types: its command channel,
//! its shared view (allocations and device health) and the updates it publishes.

use super::{DevicePrep, PodManager};
use crate::api::{Container, Pod, ResourceHealth, ResourceStatus};
use crate::devicemanager::{device_requests, pod_needs_devices, DeviceUpdate, Devices, DevicesCommand};
use crossbeam_channel::Sender;
use std::collections::HashSet;

/// The device manager as the pod manager sees it.
pub(super) struct DeviceLink {
    tx: Sender<DevicesCommand>,
    devices: Devices,
}

impl DeviceLink {
    /// A link over the device manager's command channel and shared view.
    pub(super) fn new(tx: Sender<DevicesCommand>, devices: Devices) -> Self {
        DeviceLink { tx, devices }
    }

    /// Asks for a pod's devices; answered with `DeviceUpdate::Admitted`.
    pub(super) fn admit(&self, pod: &Pod) {
        // A device manager that is gone (shutdown) leaves the pod pending, which is moot then.
        let _ = self.tx.send(DevicesCommand::Admit(Box::new(pod.clone())));
    }

    /// Asks for a container's devices to be prepared; answered with `DeviceUpdate::Prepared`.
    pub(super) fn prepare(&self, pod_uid: &str, container: &str) {
        let _ = self.tx.send(DevicesCommand::Prepare { pod_uid: pod_uid.into(), container: container.into() });
    }

    /// Tells which pods may hold devices; the others' are freed.
    pub(super) fn active_pods(&self, uids: HashSet<String>) {
        let _ = self.tx.send(DevicesCommand::ActivePods(uids));
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

impl PodManager {
    /// Applies an answer of the device manager.
    pub(super) fn on_device_update(&mut self, update: DeviceUpdate) {
        match update {
            DeviceUpdate::Admitted { pod_uid, result } => {
                self.on_admitted(&pod_uid, result.err().map(|e| crate::util::Chain(&e).to_string()));
            }
            DeviceUpdate::Prepared { pod_uid, container, result } => {
                if let Some(slot) = self.device_prep.get_mut(&(pod_uid, container)) {
                    *slot = match result {
                        Ok(options) => DevicePrep::Ready(options),
                        Err(reason) => DevicePrep::Failed(crate::util::Chain(&reason).to_string()),
                    };
                    self.resync = true;
                }
            }
        }
    }

    /// Tells the device manager which pods may hold devices, when that changed (and only
    /// once every source has reported, so nothing is freed from a pod not yet re-added).
    pub(super) fn send_active_pods(&mut self) {
        let Some(link) = &self.devices else { return };
        if !self.all_sources_seen() {
            return;
        }
        let active = || self.pods.iter().filter(|(_, e)| !matches!(e.admission, super::Admission::Rejected { .. }));
        let unchanged =
            active().count() == self.devices_active.len() && active().all(|(uid, _)| self.devices_active.contains(uid));
        if unchanged {
            return;
        }
        let active: HashSet<String> = active().map(|(uid, _)| uid.clone()).collect();
        link.active_pods(active.clone());
        self.device_prep.retain(|(uid, _), _| active.contains(uid));
        self.devices_active = active;
    }
}
