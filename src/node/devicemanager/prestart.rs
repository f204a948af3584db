//! PreStartContainer calls (up to 30 s each) on a thread of their own (`fl-prestart`), so
//! admissions go on meanwhile. The thread tells the device manager how they went
//! (`PreStartDone`); stopped, it cancels its call and says nothing.

use super::error::DeviceError;
use crate::base::manager::{CallStop, WorkerId, WorkerSet, WorkerSetError};
use crate::base::manager::{Exit, Publisher};
use crate::node::runtime::devices::DeviceOptions;
use crate::proto::deviceplugin as pb;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// kubelet's `KubeletPreStartContainerRPCTimeoutInSecs`.
pub const PRE_START_TIMEOUT: Duration = Duration::from_secs(30);

/// One plugin's PreStartContainer call for a container.
pub struct PreStartCall {
    /// Resource name.
    pub resource: String,
    /// The plugin.
    pub client: pb::DevicePluginClient,
    /// The container's devices of the resource.
    pub device_ids: BTreeSet<String>,
}

/// A container's PreStartContainer calls are done.
#[derive(Debug)]
pub struct PreStartDone {
    /// Pod uid.
    pub pod_uid: String,
    /// Container name.
    pub container: String,
    /// The container's merged device options, or the first call that failed.
    pub result: Result<DeviceOptions, DeviceError>,
}

/// Starts the calls for a container on an `fl-prestart` thread; `options` are handed back
/// in the `PreStartDone` when every call succeeded.
pub fn spawn(
    threads: &WorkerSet,
    (pod_uid, container): (String, String),
    calls: Vec<PreStartCall>,
    options: DeviceOptions,
    done: Publisher<PreStartDone>,
) -> Result<WorkerId, WorkerSetError> {
    threads.spawn_cancellable("fl-prestart", move |mut stop| {
        if let Some(result) = call_all(calls, &mut stop) {
            done.publish(PreStartDone { pod_uid, container, result: result.map(|()| options) });
        }
        Exit::Done
    })
}

/// The calls in order, stopping at the first failure; `None` when stopped.
fn call_all(calls: Vec<PreStartCall>, stop: &mut CallStop) -> Option<Result<(), DeviceError>> {
    for PreStartCall { resource, client, device_ids } in calls {
        let failed = |source| DeviceError::PreStartContainer { resource: resource.clone(), source: Arc::new(source) };
        let mut req = pb::PreStartContainerRequest::new();
        req.set_devices_ids(device_ids.into_iter().collect::<Vec<_>>());
        let opt = grpcio::CallOption::default().timeout(PRE_START_TIMEOUT);
        let mut call = match client.pre_start_container_async_opt(&req, opt) {
            Ok(call) => call,
            Err(e) => return Some(Err(failed(e))),
        };
        match stop.run(&mut call) {
            None => {
                call.cancel();
                return None;
            }
            Some(Err(e)) => return Some(Err(failed(e))),
            Some(Ok(_)) => {}
        }
    }
    Some(Ok(()))
}
