//! Why a container's devices could not be allocated or prepared: what the device manager
//! publishes to the pod manager in `DeviceUpdate`s.
//!
//! The error is `Clone` because an update is a value the consumer may keep and show twice
//! (a pod's status and its event). Its causes (gRPC and I/O errors, which are not `Clone`)
//! are held in an `Arc`, so the chain stays typed and whole (`source()` reaches the gRPC
//! status) instead of being flattened into a message when it crosses the channel.

use super::state::StateError;
use std::sync::Arc;

/// Most PreStartContainer calls (each on its own thread) in progress at once.
pub const MAX_PRESTART_THREADS: usize = 16;

/// Why a container's devices could not be allocated or prepared. The messages are
/// kubelet's; the pod manager shows the chain in `Allocate failed due to …` events.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DeviceError {
    /// The bookkeeping refused the allocation (unregistered, unhealthy, too few devices).
    #[error(transparent)]
    Choose(#[from] StateError),
    /// The plugin's GetPreferredAllocation failed.
    #[error("device plugin GetPreferredAllocation rpc failed with err")]
    GetPreferredAllocation {
        /// Resource name.
        resource: String,
        /// The cause.
        #[source]
        source: Arc<grpcio::Error>,
    },
    /// The plugin's Allocate failed.
    #[error("device plugin Allocate rpc failed for {resource}")]
    Allocate {
        /// Resource name.
        resource: String,
        /// The cause.
        #[source]
        source: Arc<grpcio::Error>,
    },
    /// The plugin's Allocate answered without a container response.
    #[error("no containers return in allocation response from the plugin for {resource}")]
    AllocateEmptyResponse {
        /// Resource name.
        resource: String,
    },
    /// A container to prepare holds no devices.
    #[error("no devices are allocated to this container (was the checkpoint lost?)")]
    PrepareUnallocated {
        /// Pod uid.
        pod_uid: String,
        /// Container name.
        container: String,
    },
    /// Every PreStartContainer slot is in use.
    #[error("too many PreStartContainer calls in progress (at most {MAX_PRESTART_THREADS})")]
    TooManyPreStarts,
    /// A PreStartContainer thread could not be started.
    #[error("cannot start a PreStartContainer thread")]
    SpawnPreStart(#[source] Arc<std::io::Error>),
    /// The plugin's PreStartContainer failed.
    #[error("device plugin PreStartContainer rpc failed with err")]
    PreStartContainer {
        /// Resource name.
        resource: String,
        /// The cause.
        #[source]
        source: Arc<grpcio::Error>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::errors::Chain;

    #[test]
    fn device_errors_keep_kubelets_words_for_the_pod_manager() {
        let e = DeviceError::from(StateError::AllocateUnavailable {
            resource: "example.com/dev".into(),
            requested: 2,
            available: 1,
        });
        assert_eq!(
            Chain(&e).to_string(),
            "requested number of devices unavailable for example.com/dev. Requested: 2, Available: 1"
        );
        let e = DeviceError::from(StateError::AllocateUnregistered { resource: "example.com/ghost".into() });
        assert_eq!(Chain(&e).to_string(), "cannot allocate unregistered device example.com/ghost");
        let e = DeviceError::SpawnPreStart(Arc::new(std::io::Error::from_raw_os_error(libc::EAGAIN)));
        assert!(Chain(&e).to_string().starts_with("cannot start a PreStartContainer thread: Resource temporarily"));
        assert_eq!(
            DeviceError::TooManyPreStarts.to_string(),
            format!("too many PreStartContainer calls in progress (at most {MAX_PRESTART_THREADS})")
        );
    }

    #[test]
    fn a_cloned_error_keeps_its_typed_cause() {
        let status =
            grpcio::RpcStatus::with_message(grpcio::RpcStatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded".into());
        let e = DeviceError::Allocate {
            resource: "example.com/slow".into(),
            source: Arc::new(grpcio::Error::RpcFailure(status)),
        };
        let copy = e.clone();
        assert_eq!(Chain(&copy).to_string(), Chain(&e).to_string());
        let cause = std::error::Error::source(&copy).and_then(|s| s.downcast_ref::<Arc<grpcio::Error>>());
        assert!(
            matches!(cause.map(|c| &**c), Some(grpcio::Error::RpcFailure(s)) if s.code() == grpcio::RpcStatusCode::DEADLINE_EXCEEDED)
        );
        let message = Chain(&e).to_string();
        assert!(message.starts_with("device plugin Allocate rpc failed for example.com/slow: "), "{message}");
        assert!(message.contains("Deadline"), "{message}");
    }
}
