//! The pod manager's bookkeeping as named types: where each pod is in admission and
//! termination, why a container is held back, and how far its devices are prepared.

use crate::api::{Container, Pod};
use crate::node::runtime::devices::DeviceOptions;
use crate::node::runtime::RuntimeError;
use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Whether a container is an init container, a sidecar (a restartable init container) or an
/// app container. Recorded as the `labels::CONTAINER_KIND` label, so containers found after an
/// agent restart are still stopped in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerKind {
    /// Runs to completion before the next one starts.
    Init,
    /// Starts with the init containers and runs beside the app containers.
    Sidecar,
    /// One of `spec.containers`.
    App,
}

impl ContainerKind {
    /// The kind of `c`, started as an init container (`init`) or as an app container.
    pub fn of(c: &Container, init: bool) -> ContainerKind {
        match (init, c.is_sidecar()) {
            (true, true) => ContainerKind::Sidecar,
            (true, false) => ContainerKind::Init,
            _ => ContainerKind::App,
        }
    }

    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            ContainerKind::Init => "init",
            ContainerKind::Sidecar => "sidecar",
            ContainerKind::App => "app",
        }
    }
}

/// Why the pod manager holds a container back (the status shows it as `waiting`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitingReason {
    /// It exited and waits out its restart back-off.
    CrashLoopBackOff,
    /// Its create failed; it is retried under back-off.
    CreateContainerError,
    /// Its config cannot be made: a field it (or its pod) sets cannot be honoured
    /// (`api::fields`), a `runAsNonRoot` violation, or a security setting the runtime cannot
    /// honour. It is not created; asked again at every sync, without back-off.
    CreateContainerConfigError,
    /// Its image is absent and its policy is `Never`.
    ErrImageNeverPull,
    /// The last pull of its image failed.
    ErrImagePull,
    /// Pulls of its image back off after a failure.
    ImagePullBackOff,
    /// The runtime cannot tell whether its image is present.
    ImageInspectError,
    /// Its image reference does not parse; nothing is asked of the runtime.
    InvalidImageName,
}

impl WaitingReason {
    /// kubelet's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            WaitingReason::CrashLoopBackOff => "CrashLoopBackOff",
            WaitingReason::CreateContainerError => "CreateContainerError",
            WaitingReason::CreateContainerConfigError => "CreateContainerConfigError",
            WaitingReason::ErrImageNeverPull => crate::node::images::reason::ERR_IMAGE_NEVER_PULL,
            WaitingReason::ErrImagePull => crate::node::images::reason::ERR_IMAGE_PULL,
            WaitingReason::ImagePullBackOff => crate::node::images::reason::IMAGE_PULL_BACK_OFF,
            WaitingReason::ImageInspectError => crate::node::images::reason::IMAGE_INSPECT_ERROR,
            WaitingReason::InvalidImageName => crate::node::images::reason::INVALID_IMAGE_NAME,
        }
    }
}

/// A container held back, with kubelet's message, since when.
#[derive(Clone, Debug, PartialEq)]
pub struct Waiting {
    /// Why.
    pub reason: WaitingReason,
    /// The message the status shows.
    pub message: String,
    /// When it started waiting (a failed create: what its back-off counts from).
    pub since: SystemTime,
}

/// A pod being stopped: since when, with what grace, and what was asked already.
#[derive(Clone, Debug, PartialEq)]
pub struct Termination {
    /// When termination began.
    pub started: SystemTime,
    /// The pod's grace period.
    pub grace: Duration,
    /// Container ids already asked to stop (each is asked once).
    pub requested: HashSet<String>,
    /// Whether `ExceededGracePeriod` was reported.
    pub warned: bool,
}

impl Termination {
    /// A termination starting at `now`.
    pub fn new(now: SystemTime, grace: Duration) -> Self {
        Termination { started: now, grace, requested: HashSet::new(), warned: false }
    }
}

/// kubelet's reason for a pod whose devices cannot be allocated at admission.
pub const UNEXPECTED_ADMISSION_ERROR: &str = "UnexpectedAdmissionError";
/// kubelet's reason for a pod whose sysctl is not allowed on the node.
pub const SYSCTL_FORBIDDEN: &str = "SysctlForbidden";

/// Where a pod is in admission (only pods asking for plugin devices wait).
#[derive(Debug, PartialEq)]
pub enum Admission {
    /// It may run.
    Admitted,
    /// Waiting for the device manager.
    Pending,
    /// Refused: the pod is Failed with this reason and message and never runs.
    Rejected {
        /// kubelet's reason: `UnexpectedAdmissionError` (devices), `SysctlForbidden`,
        /// `OutOf<resource>` (the resource fit of pods from the apiserver).
        reason: Cow<'static, str>,
        /// kubelet's wording (the event's; the status puts `Pod was rejected: ` before it).
        message: String,
    },
}

/// One pod the manager owns.
#[derive(Debug)]
pub struct PodEntry {
    /// The spec (for an orphan: only what its sandbox tells); shared, so a sync reads it
    /// without copying it.
    pub pod: Arc<Pod>,
    /// Where it is in admission.
    pub admission: Admission,
    /// Set once it is being stopped.
    pub termination: Option<Termination>,
    /// Its containers with probes (sidecars, then app containers), made once: an entry's
    /// spec never changes, so every probe target of it shares these instead of a copy.
    pub probed: Vec<Arc<Container>>,
    /// The fields it sets that the runtime does not honour and that stop its containers
    /// (`api::fields::check`, made when the pod is added).
    pub refused: Vec<crate::api::fields::FieldUse>,
    /// Set once the pod failed on the node (`activeDeadlineSeconds`): its containers are
    /// stopped as a termination's, but the pod and its Failed status stay while its source
    /// wants it.
    pub failure: Option<PodFailure>,
}

/// Why a pod failed on the node, and how far its containers are stopped.
#[derive(Clone, Debug, PartialEq)]
pub struct PodFailure {
    /// The status reason, e.g. `DeadlineExceeded`.
    pub reason: &'static str,
    /// The status message.
    pub message: String,
    /// Its containers' stop (never followed by the pod's removal).
    pub stopping: Termination,
    /// Evicted: the status gets kubelet's `DisruptionTarget` condition, and the pod's
    /// volumes go once its containers have stopped (the space they held is what eviction
    /// reclaims).
    pub evicted: bool,
    /// An evicted pod's volumes are removed.
    pub reclaimed: bool,
}

/// A lifecycle hook running for a container instance.
#[derive(Clone, Debug, PartialEq)]
pub struct RunningHook {
    /// The pod's uid.
    pub pod_uid: String,
    /// The container's name.
    pub name: String,
    /// When it was started.
    pub started: SystemTime,
    /// A `preStop` hook's grace period (what the hook leaves of it goes to the stop); a
    /// `postStart` hook's timeout.
    pub grace: Duration,
}

impl PodEntry {
    /// An entry for `pod`.
    pub fn new(pod: Arc<Pod>, admission: Admission, termination: Option<Termination>) -> PodEntry {
        let sidecars = pod.spec.init_containers.iter().filter(|c| c.is_sidecar());
        let probed = sidecars
            .chain(&pod.spec.containers)
            .filter(|c| c.liveness_probe.is_some() || c.readiness_probe.is_some() || c.startup_probe.is_some())
            .map(|c| Arc::new(c.clone()))
            .collect();
        PodEntry { pod, admission, termination, probed, refused: Vec::new(), failure: None }
    }
}

/// How far a container's plugin devices are prepared (`PreStartContainer`).
#[derive(Clone, Debug, PartialEq)]
pub enum DevicePrep {
    /// Asked of the device manager; its answer triggers a sync.
    Requested,
    /// Prepared: start the container with these options.
    Ready(DeviceOptions),
    /// Cannot be prepared: the create fails with this reason.
    Failed(String),
}

/// Why a container could not be created or started. `Display` is the message events and
/// the waiting status show (kubelet's `Error: …` without the prefix).
#[derive(Debug, thiserror::Error)]
pub enum ContainerStartError {
    /// The runtime could not create the container.
    #[error(transparent)]
    CreateContainer {
        /// The runtime's error.
        source: RuntimeError,
    },
    /// The device manager could not prepare the container's devices.
    #[error("{reason}")]
    PrepareDevices {
        /// The device manager's reason.
        reason: String,
    },
    /// A device or mount host path from the device plugin is missing (the process runtime
    /// shares the host's filesystem, so it must exist as given).
    #[error("device path {path} from the device plugin allocation does not exist on the host")]
    DevicePathMissing {
        /// The missing host path.
        path: String,
    },
    /// The container's config cannot be made: kubelet's `CreateContainerConfigError`.
    #[error("{message}")]
    Config {
        /// Why, in kubelet's words where kubelet has them.
        message: String,
    },
    /// The runtime created the container but could not start it (recorded as an exit).
    #[error(transparent)]
    StartContainer {
        /// The runtime's error.
        source: RuntimeError,
    },
}

impl ContainerStartError {
    /// Whether nothing was created: the container waits as `CreateContainerError` under
    /// back-off. A failed start is an exit instead, restarted like any other.
    pub fn is_create_failure(&self) -> bool {
        !matches!(self, ContainerStartError::StartContainer { .. })
    }
}
