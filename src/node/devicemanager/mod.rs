//! The device manager: the Kubernetes device-plugin API v1beta1 over grpcio.
//!
//! - `manager`: the `fl-devices` thread, sole owner of the state; admission, allocation,
//!   PreStartContainer, and the child threads below. `messages`: what it takes and
//!   publishes.
//! - `registration`: the Registration service on `<plugin dir>/kubelet.sock`.
//! - `endpoint`: one thread per registration following the plugin's ListAndWatch stream.
//! - `prestart`: PreStartContainer calls on threads of their own.
//! - `allocate`: the GetPreferredAllocation and Allocate calls.
//! - `state`: devices per resource, allocations per container; capacity.
//! - `checkpoint`: allocations on disk, restored after an agent restart.
//! - `view`: the read-only view and metrics the other threads see.
//!
//! This file only names the parts; none of them imports it. Within the module the imports
//! run one way: `state` ← `checkpoint` ← `view` ← `registration` ← `endpoint` ←
//! `messages` ← `manager` (with `error`, `prestart` and `allocate` in between), so
//! no part imports one that imports it back. The children (registration server, endpoint
//! and PreStartContainer threads) each publish their own message type; `messages` wraps
//! them into the manager's command.

mod allocate;
pub mod checkpoint;
pub mod endpoint;
pub mod error;
pub mod manager;
pub mod messages;
pub mod prestart;
pub mod registration;
pub mod state;
pub mod view;

pub use error::{DeviceError, MAX_PRESTART_THREADS};
pub use manager::{device_requests, pod_needs_devices, DeviceManager, DeviceSettings};
pub use messages::{DeviceUpdate, DevicesCommand};
pub use prestart::PRE_START_TIMEOUT;
pub use view::{DeviceMetrics, DeviceView, Devices};
