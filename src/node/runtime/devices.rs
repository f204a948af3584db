//! What a container is given from device plugins, in the runtime's (CRI's) terms.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How to expose a container's devices (CRI's envs, mounts, devices, annotations and CDI
/// devices): one device plugin's allocation, or several merged. The runtime creates the
/// container with them; the device manager produces them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DeviceOptions {
    /// Environment variables for the container.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub envs: BTreeMap<String, String>,
    /// Host paths to mount.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<MountSpec>,
    /// Device nodes to expose.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceSpec>,
    /// Annotations for the runtime.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Fully qualified CDI device names.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cdi_devices: Vec<String>,
}

/// A mount from an allocate response.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MountSpec {
    /// Path inside the container.
    pub container_path: String,
    /// Path on the host.
    pub host_path: String,
    /// Read-only mount.
    pub read_only: bool,
}

/// A device node from an allocate response.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DeviceSpec {
    /// Path inside the container.
    pub container_path: String,
    /// Path on the host.
    pub host_path: String,
    /// cgroup device permissions (`rwm`).
    pub permissions: String,
}

impl DeviceOptions {
    /// Adds `other` (from `resource`): envs and annotations by key, devices and mounts by
    /// container path, CDI devices by name. The first value wins; a conflict is logged.
    pub fn merge(&mut self, other: &DeviceOptions, resource: &str) {
        fn by_key(into: &mut BTreeMap<String, String>, from: &BTreeMap<String, String>, what: &str, r: &str) {
            for (k, v) in from {
                match into.get(k) {
                    Some(old) if old != v => {
                        log::warn!("devices: {what} {k}={v:?} from {r} conflicts with {old:?}; keeping the first")
                    }
                    Some(_) => {}
                    None => {
                        into.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        fn by_path<T: Clone + PartialEq>(into: &mut Vec<T>, from: &[T], path: fn(&T) -> &str, what: &str, r: &str) {
            for x in from {
                match into.iter().find(|y| path(y) == path(x)) {
                    Some(y) if y != x => {
                        log::warn!(
                            "devices: {what} {} from {r} conflicts with an earlier one; keeping the first",
                            path(x)
                        )
                    }
                    Some(_) => {}
                    None => into.push(x.clone()),
                }
            }
        }
        by_key(&mut self.envs, &other.envs, "env", resource);
        by_key(&mut self.annotations, &other.annotations, "annotation", resource);
        by_path(&mut self.mounts, &other.mounts, |m| &m.container_path, "mount", resource);
        by_path(&mut self.devices, &other.devices, |d| &d.container_path, "device", resource);
        for c in &other.cdi_devices {
            if !self.cdi_devices.contains(c) {
                self.cdi_devices.push(c.clone());
            }
        }
    }
}
