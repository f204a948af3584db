//! The device manager's messages: the commands it takes (from the pod manager, and from
//! its own children, each of which publishes its own type) and the updates it publishes to
//! the pod manager.

use super::endpoint::EndpointEvent;
use super::error::DeviceError;
use super::prestart::PreStartDone;
use super::registration::PluginRegistration;
use crate::api::Pod;
use crate::node::runtime::devices::DeviceOptions;
use std::collections::HashSet;

/// Commands to the device manager: from the pod manager, and from its own children.
#[derive(Debug)]
pub enum DevicesCommand {
    /// Allocate a pod's devices; answered with `DeviceUpdate::Admitted`.
    Admit(Box<Pod>),
    /// A container with devices is about to start; answered with
    /// `DeviceUpdate::Prepared` after PreStartContainer where the plugin wants it.
    Prepare {
        /// Pod uid.
        pod_uid: String,
        /// Container name.
        container: String,
    },
    /// The pods that may hold devices; the others' devices are freed.
    ActivePods(HashSet<String>),
    /// A plugin's checked Register call (from the registration server).
    Register(PluginRegistration),
    /// News from an endpoint thread.
    Endpoint(EndpointEvent),
    /// A PreStartContainer thread is done.
    PreStartDone(PreStartDone),
}

impl From<PluginRegistration> for DevicesCommand {
    fn from(r: PluginRegistration) -> Self {
        DevicesCommand::Register(r)
    }
}

impl From<EndpointEvent> for DevicesCommand {
    fn from(e: EndpointEvent) -> Self {
        DevicesCommand::Endpoint(e)
    }
}

impl From<PreStartDone> for DevicesCommand {
    fn from(d: PreStartDone) -> Self {
        DevicesCommand::PreStartDone(d)
    }
}

/// What the device manager publishes to the pod manager.
#[derive(Clone, Debug)]
pub enum DeviceUpdate {
    /// A pod was admitted (its devices are allocated) or refused, and why.
    Admitted {
        /// Pod uid.
        pod_uid: String,
        /// Why the pod cannot have its devices.
        result: Result<(), DeviceError>,
    },
    /// A container's devices are prepared (PreStartContainer done), or why not.
    Prepared {
        /// Pod uid.
        pod_uid: String,
        /// Container name.
        container: String,
        /// The merged device options, or why the container cannot start.
        result: Result<DeviceOptions, DeviceError>,
    },
}
