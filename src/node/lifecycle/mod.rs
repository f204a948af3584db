//! Container lifecycle hooks (kubelet's `pkg/kubelet/lifecycle`): `postStart` and `preStop`
//! handlers — a command in the container (`exec`), an HTTP GET to the pod (`httpGet`), or a
//! pause (`sleep`). The pod manager decides when a hook runs and what follows it; the hooks
//! themselves run on owned threads (`fl-hook`, one per running hook, at most
//! `MAX_RUNNING_HOOKS`), never on `fl-pods`, and each answer is published as a `HookDone`.

pub mod handlers;
mod runner;

pub use runner::HookRunner;

use crate::api::{Container, LifecycleHandler};
use std::sync::Arc;
use std::time::Duration;

/// The name of the hook threads.
pub const THREAD: &str = "fl-hook";
/// Hooks running at once (each holds a thread).
pub const MAX_RUNNING_HOOKS: usize = 64;
/// How long a `postStart` hook may run. kubelet sets no bound (its pod worker waits for
/// the hook); a bound keeps a hook that never returns from holding a thread and the
/// container forever. Past it the hook fails, and the container is killed.
pub const POST_START_TIMEOUT: Duration = Duration::from_secs(300);

/// Which hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookKind {
    /// After the container started.
    PostStart,
    /// Before the container is stopped.
    PreStop,
}

/// A hook to run.
#[derive(Clone, Debug)]
pub struct HookRequest {
    /// Which hook.
    pub kind: HookKind,
    /// The pod's uid.
    pub pod_uid: String,
    /// The pod as kubelet names it in messages (`name_namespace(uid)`).
    pub pod_desc: String,
    /// The pod's address (httpGet's default host).
    pub pod_ip: String,
    /// The container's spec (named ports).
    pub container: Arc<Container>,
    /// The running container instance.
    pub container_id: String,
    /// The handler.
    pub handler: LifecycleHandler,
    /// The hook ends (fails) after this: a `preStop` hook's grace period, `POST_START_TIMEOUT`.
    pub timeout: Duration,
}

/// A hook has answered.
#[derive(Debug, PartialEq)]
pub struct HookDone {
    /// Which hook.
    pub kind: HookKind,
    /// The pod's uid.
    pub pod_uid: String,
    /// The container instance it ran for.
    pub container_id: String,
    /// Success, or kubelet's message of the failure.
    pub result: Result<(), String>,
}

/// A hook could not be started.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// Too many hooks run already.
    #[error("too many lifecycle hooks running (at most {max})")]
    Busy {
        /// The bound.
        max: usize,
    },
    /// The agent is stopping.
    #[error("the agent is stopping")]
    Stopping,
    /// The OS refused a thread.
    #[error("cannot start a hook thread")]
    SpawnThread {
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Where the pod manager hands hooks to (the `HookRunner`; a recorder in tests).
pub trait HookSink: Send + Sync {
    /// Starts a hook; its answer comes back as a `HookDone` later.
    fn submit(&self, req: HookRequest) -> Result<(), HookError>;
}
