//! The gRPC half of allocating one container's devices of one resource (kubelet's
//! `allocateContainerResources` for one resource): GetPreferredAllocation where the plugin
//! offers it, then Allocate, each bounded by `devices.allocate_timeout`. The bookkeeping's
//! choice (`state::Choice::Need`) comes in; the chosen devices and the plugin's answer go
//! out, for the device manager to record.

use super::error::DeviceError;
use super::view::DeviceMetrics;
use crate::node::runtime::devices::{DeviceOptions, DeviceSpec, MountSpec};
use crate::proto::deviceplugin as pb;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The runtime-level options from one plugin's answer.
impl From<&pb::ContainerAllocateResponse> for DeviceOptions {
    fn from(r: &pb::ContainerAllocateResponse) -> Self {
        DeviceOptions {
            envs: r.envs().iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            mounts: r
                .mounts()
                .iter()
                .map(|m| MountSpec {
                    container_path: m.container_path().into(),
                    host_path: m.host_path().into(),
                    read_only: m.read_only(),
                })
                .collect(),
            devices: r
                .devices()
                .iter()
                .map(|d| DeviceSpec {
                    container_path: d.container_path().into(),
                    host_path: d.host_path().into(),
                    permissions: d.permissions().into(),
                })
                .collect(),
            annotations: r.annotations().iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            cdi_devices: r.cdi_devices().iter().map(|d| d.name().to_string()).collect(),
        }
    }
}

/// A plugin to allocate from.
pub struct Plugin<'a> {
    /// Resource name.
    pub resource: &'a str,
    /// The plugin's client.
    pub client: &'a pb::DevicePluginClient,
    /// The plugin offers GetPreferredAllocation.
    pub preferred: bool,
    /// Bound on each call.
    pub timeout: Duration,
}

/// What the bookkeeping chose: devices reused from finished init containers, and how many
/// more out of which.
pub struct Need<'a> {
    /// Devices required in all.
    pub required: usize,
    /// Reused devices (always kept).
    pub reused: &'a [String],
    /// How many more.
    pub needed: usize,
    /// Healthy devices nobody holds, sorted.
    pub available: &'a [String],
}

/// Picks the devices (the plugin's preference first, then the free ones in order) and asks
/// the plugin to allocate them; returns them and the plugin's options.
pub fn allocate(p: &Plugin, need: &Need, metrics: &DeviceMetrics) -> Result<(Vec<String>, DeviceOptions), DeviceError> {
    let opt = || grpcio::CallOption::default().timeout(p.timeout);
    let resource = p.resource.to_string();
    let mut chosen = need.reused.to_vec();
    if p.preferred && need.needed > 0 {
        let mut req = pb::ContainerPreferredAllocationRequest::new();
        let mut offered: BTreeSet<String> = need.available.iter().cloned().collect();
        offered.extend(need.reused.iter().cloned());
        req.set_available_deviceIDs(offered.into_iter().collect());
        req.set_must_include_deviceIDs(need.reused.to_vec());
        req.set_allocation_size(need.required as i32);
        let mut preq = pb::PreferredAllocationRequest::new();
        preq.mut_container_requests().push(req);
        let resp = p
            .client
            .get_preferred_allocation_opt(&preq, opt())
            .map_err(|e| DeviceError::GetPreferredAllocation { resource: resource.clone(), source: Arc::new(e) })?;
        for id in resp.container_responses().iter().flat_map(|r| r.deviceIDs()) {
            if chosen.len() < need.required && need.available.contains(id) && !chosen.contains(id) {
                chosen.push(id.clone());
            }
        }
    }
    for id in need.available {
        if chosen.len() >= need.required {
            break;
        }
        if !chosen.contains(id) {
            chosen.push(id.clone());
        }
    }
    let mut creq = pb::ContainerAllocateRequest::new();
    creq.set_devices_ids(chosen.clone());
    let mut req = pb::AllocateRequest::new();
    req.mut_container_requests().push(creq);
    let started = Instant::now();
    let resp = p.client.allocate_opt(&req, opt());
    metrics.allocated(p.resource, started.elapsed());
    let resp = resp.map_err(|e| DeviceError::Allocate { resource: resource.clone(), source: Arc::new(e) })?;
    let Some(first) = resp.container_responses().first() else {
        return Err(DeviceError::AllocateEmptyResponse { resource });
    };
    Ok((chosen, first.into()))
}
