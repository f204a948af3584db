//! The container runtime interface the pod manager drives, shaped after CRI v1 (sandboxes,
//! create/start/stop/remove, list, exec, images), with two backends: the built-in process
//! runtime and the CRI client.

pub mod cri;
pub mod devices;
pub mod exec;
#[cfg(test)]
pub mod fake;
pub mod logrotate;
pub mod process;
pub mod stats;

use crate::api::fields::RuntimeKind;
use crate::api::security::{ContainerSecurity, SandboxSecurity};
use crate::base::manager::Cancel;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// A runtime operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The sandbox, container or image is unknown.
    #[error("{kind} {id} not found")]
    NotFound {
        /// `sandbox`, `container` or `image`.
        kind: &'static str,
        /// The id.
        id: String,
    },
    /// The container cannot be created from its configuration.
    #[error("cannot create container {name}: {message}")]
    CreateContainer {
        /// Container name.
        name: String,
        /// Why.
        message: String,
    },
    /// The container's process could not be started.
    #[error("cannot start container {name}: {message}")]
    StartContainer {
        /// Container name (what events show; ids are internal).
        name: String,
        /// Why, e.g. the executable was not found.
        message: String,
    },
    /// A file under the runtime's state directory could not be read or written.
    #[error("runtime state {path}")]
    State {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A call to the CRI runtime failed.
    #[error("{object}")]
    Cri {
        /// What it was about: `sandbox <id>`, `container <id>`, `pod <ns>/<name>`.
        object: String,
        /// The failed call (it names the endpoint and the CRI method).
        #[source]
        source: cri::CriError,
    },
    /// A config cannot be put into CRI's terms.
    #[error("{object}")]
    Translate {
        /// What it was for: `pod <ns>/<name>`, `container <name> in sandbox <id>`.
        object: String,
        /// Why.
        #[source]
        source: cri::translate::TranslateError,
    },
    /// Too many operations of a kind are in flight (each holds a thread).
    #[error("too many {what} in flight (at most {max})")]
    Busy {
        /// What, e.g. `container stops`.
        what: &'static str,
        /// The bound.
        max: usize,
    },
    /// A command streamed through the CRI runtime's streaming server failed.
    #[error("{object}")]
    Stream {
        /// The container: `container <name> (<id>)`.
        object: String,
        /// What went wrong.
        #[source]
        source: cri::stream::StreamError,
    },
    /// The runtime cannot do this (yet).
    #[error("the {runtime} runtime does not support {what}")]
    Unsupported {
        /// `process` or `cri`.
        runtime: &'static str,
        /// What was asked.
        what: String,
    },
    /// A wait was ended by its owner (an image pull at agent stop).
    #[error("{what} was cancelled")]
    Cancelled {
        /// What, e.g. `pull of image busybox:1.36`.
        what: String,
    },
    /// A process could not be spawned or signalled.
    #[error("{action} failed")]
    Process {
        /// What was attempted.
        action: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// A damaged record the runtime moved aside (so it is reported once, not every relist).
#[derive(Clone, Debug)]
pub struct Quarantined {
    /// `sandbox` or `container`.
    pub kind: &'static str,
    /// Its id (the directory name).
    pub id: String,
    /// Where it went.
    pub moved_to: PathBuf,
    /// What was wrong with it.
    pub reason: String,
}

/// What the pod manager asks for when it creates a pod sandbox.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct SandboxConfig {
    /// Pod uid.
    pub pod_uid: String,
    /// Pod name.
    pub pod_name: String,
    /// Pod namespace.
    pub namespace: String,
    /// The pod's sandbox attempt, 0 for its first (a sandbox that dies is replaced by the
    /// next attempt).
    #[serde(default)]
    pub attempt: u32,
    /// Directory for the pod's container logs.
    pub log_directory: PathBuf,
    /// The pod's grace period, kept so a pod found after an agent restart with no source
    /// wanting it is still stopped gracefully.
    pub termination_grace_period_seconds: i64,
    /// The pod uses the host's network (and so its UTS namespace: no hostname of its own).
    #[serde(default)]
    pub host_network: bool,
    /// The pod's cgroup (cgroupfs path), the parent of its containers' cgroups; empty: the
    /// runtime's default.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cgroup_parent: String,
    /// Annotations for the runtime (kubelet passes the pod's annotations).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The pod's namespaces and pod-level security context (`api::security::sandbox`).
    #[serde(default, skip_serializing_if = "SandboxSecurity::is_default")]
    pub security: SandboxSecurity,
    /// The containers' `hostPort`s, for the runtime's port mapping (CNI `portmap`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub port_mappings: Vec<PortMapping>,
    /// The kernel hostname of a pod-network sandbox (`dns::pod_names`); empty: the pod name,
    /// as records written before it existed were made. A host-network sandbox gets none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    /// The pod's resolver configuration (`dns::pod_dns`); `None`: the runtime's default (the
    /// process runtime, which shares the node's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<DnsConfig>,
}

/// A pod's resolver configuration, the lines of its `/etc/resolv.conf` (CRI's `DNSConfig`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DnsConfig {
    /// `nameserver` addresses, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<String>,
    /// The `search` domains, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub searches: Vec<String>,
    /// The `options` (`ndots:5`, `rotate`), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

/// A container port published on the node (`ports[].hostPort`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PortMapping {
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// The port in the pod.
    pub container_port: i32,
    /// The port on the node.
    pub host_port: i32,
}

/// A sandbox as the runtime reports it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct SandboxInfo {
    /// Sandbox id.
    pub id: String,
    /// What it was created with (shared: a relist reports it without copying it).
    pub config: Arc<SandboxConfig>,
    /// Creation time (the pod's start time).
    pub created_at: SystemTime,
    /// False once stopped.
    pub ready: bool,
    /// The pod's IPs on the pod network (CRI's `PodSandboxStatus`), first the primary; empty
    /// on the host network.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
}

/// What the pod manager asks for when it creates a container.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContainerConfig {
    /// Container name in the pod spec.
    pub name: String,
    /// Restart attempt, 0 for the first instance.
    pub attempt: u32,
    /// Image reference as written in the spec.
    pub image: String,
    /// The command line: `command` + `args`, `$(VAR)`-expanded.
    pub argv: Vec<String>,
    /// Environment, in order.
    pub env: Vec<(String, String)>,
    /// Working directory; empty means `/`.
    pub working_dir: String,
    /// Log file for stdout and stderr (CRI log format).
    pub log_path: PathBuf,
    /// Labels identifying the pod and container.
    pub labels: BTreeMap<String, String>,
    /// Where the container's cgroup goes and its control-file values (cgroup enforcement on).
    #[serde(default)]
    pub linux: Option<crate::node::cm::LinuxContainerConfig>,
    /// Device plugin allocations, merged: envs (already in `env`), device nodes, mounts,
    /// annotations, CDI names. The process runtime records them; a CRI runtime gets them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<devices::DeviceOptions>,
    /// The container's effective security context (`api::security::effective`); records
    /// written before it existed read as the default (nothing asked).
    #[serde(default, skip_serializing_if = "ContainerSecurity::is_default")]
    pub security: ContainerSecurity,
    /// What is mounted in the container (its volumes, the termination message file, the
    /// pod's hosts file), in order; a device plugin's mounts are in `devices`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
    /// The node's file mounted at the container's `terminationMessagePath` (one of
    /// `mounts`), read when it exits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_log: Option<TerminationLog>,
    /// The runtime keeps a stdin open for attaching (`stdin`; the CRI runtime only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stdin: bool,
    /// That stdin closes when the first attached client detaches (`stdinOnce`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stdin_once: bool,
    /// Its stdin, stdout and stderr are a terminal (`tty`; the CRI runtime only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tty: bool,
}

/// Where a container's termination message is read from when it exits.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TerminationLog {
    /// The node's file (in the pod's directory), mounted at `terminationMessagePath`.
    pub host_path: PathBuf,
    /// `FallbackToLogsOnError`: a failed container that wrote nothing there gets the tail of
    /// its log.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fallback_to_logs: bool,
}

/// A host path mounted in a container (CRI's `Mount`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mount {
    /// Where it appears in the container.
    pub container_path: String,
    /// What is mounted: a directory or file on the node.
    pub host_path: PathBuf,
    /// Mounted read-only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
    /// How mounts below it propagate (`mountPropagation`).
    #[serde(default, skip_serializing_if = "Propagation::is_private")]
    pub propagation: Propagation,
}

/// A volume mount's `mountPropagation`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Propagation {
    /// `None`: no mount propagates either way.
    #[default]
    Private,
    /// `HostToContainer`: mounts the host makes below it appear in the container.
    HostToContainer,
    /// `Bidirectional`: and the container's appear on the host (privileged containers only).
    Bidirectional,
}

impl Propagation {
    fn is_private(&self) -> bool {
        *self == Propagation::Private
    }
}

/// Label keys the pod manager sets on containers (as kubelet does on CRI containers).
pub mod labels {
    /// Pod uid.
    pub const POD_UID: &str = "io.kubernetes.pod.uid";
    /// Pod name.
    pub const POD_NAME: &str = "io.kubernetes.pod.name";
    /// Pod namespace.
    pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
    /// Container name.
    pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
    /// Set (to `MANAGED_BY_FERROLET`) on every CRI sandbox and container ferrolet makes, so
    /// it lists and touches only its own objects in a runtime others use too.
    pub const MANAGED_BY: &str = "io.ferrolet.managed-by";
    /// The value of `MANAGED_BY`.
    pub const MANAGED_BY_FERROLET: &str = "ferrolet";
    /// The node name of the agent that made a CRI object (it lists only its node's).
    pub const NODE: &str = "io.ferrolet.node";
    /// Tells init, sidecar and app containers apart (needed to stop orphans in order); its
    /// values are `pods::ContainerKind::as_str`.
    pub const CONTAINER_KIND: &str = "io.ferrolet.container.kind";
    /// A container's index in its list of the pod spec (`containers`, or `initContainers`
    /// for init and sidecar containers), so tools that see only the runtime (`ferrolet
    /// logs`, `ferrolet exec`) list and default containers in spec order.
    pub const CONTAINER_INDEX: &str = "io.ferrolet.container.index";
    /// The names earlier versions gave these labels, read on the containers they made so an
    /// upgraded agent adopts what runs.
    const EARLIER_NAMES: [(&str, &str); 2] =
        [(CONTAINER_KIND, "ferrolet.io/container-kind"), (CONTAINER_INDEX, "ferrolet.io/container-index")];

    /// The value of label `key` in `labels`, under its name or an earlier one.
    pub fn get<'a>(labels: &'a std::collections::BTreeMap<String, String>, key: &str) -> Option<&'a str> {
        let earlier = EARLIER_NAMES.iter().find(|(now, _)| *now == key).map(|(_, old)| *old);
        labels.get(key).or_else(|| earlier.and_then(|old| labels.get(old))).map(String::as_str)
    }
}

/// A container's lifecycle state, as CRI reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ContainerState {
    /// Created, not started.
    Created,
    /// Process running.
    Running,
    /// Process exited (or never started).
    Exited,
}

/// A container as the runtime reports it. Equal when it reports the same (its config
/// compared by pointer first: the runtime shares one config per container).
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerInfo {
    /// Container id.
    pub id: String,
    /// Sandbox it belongs to.
    pub sandbox_id: String,
    /// What it was created with (shared: a relist reports it without copying it).
    pub config: Arc<ContainerConfig>,
    /// Lifecycle state.
    pub state: ContainerState,
    /// Creation time.
    pub created_at: SystemTime,
    /// Process start time.
    pub started_at: Option<SystemTime>,
    /// Process exit time.
    pub finished_at: Option<SystemTime>,
    /// Exit code (128 + signal when signalled).
    pub exit_code: i32,
    /// `Completed`, `Error`, `OOMKilled`, `StartError`.
    pub reason: String,
    /// Details, e.g. why the start failed.
    pub message: String,
    /// Process id while running.
    pub pid: Option<i32>,
    /// The image it runs, resolved by the runtime (CRI `imageRef`: a digest); empty for
    /// the process runtime.
    pub image_ref: String,
}

/// The outcome of `exec_sync`.
#[derive(Clone, Debug, Default)]
pub struct ExecResult {
    /// Exit code of the command (-1 when it timed out).
    pub exit_code: i32,
    /// Standard output (capped).
    pub stdout: Vec<u8>,
    /// Standard error (capped).
    pub stderr: Vec<u8>,
    /// The command ran past its timeout and was killed.
    pub timed_out: bool,
}

/// Which of a streamed command's streams a client asked for (`kubectl exec -i -t`, `attach`),
/// as CRI's `ExecRequest` and `AttachRequest` carry them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamIo {
    /// The client sends stdin.
    pub stdin: bool,
    /// The client reads stdout.
    pub stdout: bool,
    /// The client reads stderr (never with `tty`: a terminal has one output).
    pub stderr: bool,
    /// A terminal: stdin, stdout and stderr are one pseudo-terminal.
    pub tty: bool,
}

/// An image the runtime holds (CRI's `Image`): what image garbage collection works from.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ImageInfo {
    /// The runtime's id of the image (`sha256:…`); what `PullImage` returns.
    pub id: String,
    /// Names it is known by (`docker.io/library/busybox:1.36`).
    pub repo_tags: Vec<String>,
    /// Digests it is known by (`docker.io/library/busybox@sha256:…`).
    pub repo_digests: Vec<String>,
    /// Size in bytes.
    pub size: u64,
    /// The runtime asks that it never be removed (the sandbox image, as a rule).
    pub pinned: bool,
    /// The uid the image runs as, when its user is numeric (CRI's `Image.uid`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<i64>,
    /// The image's user when it is a name (CRI's `Image.username`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
}

/// Who a container runs as when its security context names no uid (kubelet's
/// `getImageUser`): a uid, a user name, or nothing known (which kubelet treats as root).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageUser {
    /// The uid, when known.
    pub uid: Option<i64>,
    /// The user's name, when the image names it instead.
    pub username: String,
}

/// The usage of the filesystem holding the runtime's images (CRI's `ImageFsInfo`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ImageFsInfo {
    /// Where it is mounted (or the runtime's directory on it).
    pub mount_point: PathBuf,
    /// Bytes the images use on it (not the whole filesystem's usage).
    pub used_bytes: u64,
    /// Inodes the images use, when the runtime reports them.
    pub inodes_used: Option<u64>,
}

/// Credentials for a pull (CRI's `AuthConfig`), filled from a pod's `imagePullSecrets` in
/// cluster mode; static pods pull without. `Debug` hides the secrets.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PullAuth {
    /// User name.
    pub username: String,
    /// Password.
    pub password: String,
    /// `base64(username:password)`, as in a Docker config file.
    pub auth: String,
    /// The registry the credentials are for (empty from the keyring, as kubelet's: the
    /// match is made before the pull).
    pub server_address: String,
    /// An identity token to get a registry token with.
    pub identity_token: String,
    /// A bearer token for the registry.
    pub registry_token: String,
}

impl std::fmt::Debug for PullAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullAuth")
            .field("username", &self.username)
            .field("server_address", &self.server_address)
            .finish_non_exhaustive()
    }
}

/// The runtime backend: sandboxes (one per pod), containers in them, exec, and images.
pub trait ContainerRuntime: Send + Sync {
    /// Which backend (what a Pod field means depends on it).
    fn kind(&self) -> RuntimeKind;
    /// The scheme of container ids in statuses (`process://<id>`; kubelet's is the CRI
    /// runtime's name, `containerd://<id>`).
    fn id_scheme(&self) -> &str;
    /// Creates the pod's sandbox and returns its id.
    fn run_pod_sandbox(&self, config: &SandboxConfig) -> Result<String, RuntimeError>;
    /// Marks the sandbox stopped (its containers must already be stopped).
    fn stop_pod_sandbox(&self, id: &str) -> Result<(), RuntimeError>;
    /// Removes the sandbox and its containers' records.
    fn remove_pod_sandbox(&self, id: &str) -> Result<(), RuntimeError>;
    /// Every sandbox the runtime knows, including ones created before an agent restart.
    fn list_pod_sandboxes(&self) -> Result<Vec<SandboxInfo>, RuntimeError>;
    /// Creates a container in a sandbox and returns its id.
    fn create_container(&self, sandbox_id: &str, config: &ContainerConfig) -> Result<String, RuntimeError>;
    /// Starts a created container.
    fn start_container(&self, id: &str) -> Result<(), RuntimeError>;
    /// Asks the container to stop: SIGTERM now, SIGKILL after `grace`. Returns without
    /// waiting for the exit, which `list_containers` reports later, so a sync loop never
    /// blocks for a grace period.
    fn stop_container(&self, id: &str, grace: Duration) -> Result<(), RuntimeError>;
    /// Makes the runtime stop the container by itself at `deadline` (SIGTERM, then SIGKILL
    /// `grace` later) unless it is stopped before, so a stop the agent has begun (a
    /// `preStop` hook running first) ends in time even if the agent dies meanwhile. A later
    /// `stop_container` may stop it sooner, never later. Returns at once. A runtime that
    /// cannot (CRI) does nothing: the agent stops the container when the hook is over.
    fn arm_stop(&self, _id: &str, _deadline: SystemTime, _grace: Duration) -> Result<(), RuntimeError> {
        Ok(())
    }
    /// Removes an exited container's record (its log file stays until the pod is removed).
    fn remove_container(&self, id: &str) -> Result<(), RuntimeError>;
    /// Every container the runtime knows.
    fn list_containers(&self) -> Result<Vec<ContainerInfo>, RuntimeError>;
    /// Starts a command in the container's environment and returns without waiting for it,
    /// so one thread can watch many commands (the prober's exec reaper), which enforces
    /// `timeout`. A runtime that cannot start a command without waiting for it (CRI's
    /// `ExecSync`) runs it for at most `timeout` and returns it finished.
    fn exec_start(&self, id: &str, cmd: &[String], timeout: Duration) -> Result<exec::ExecStart, RuntimeError>;
    /// Runs a command in the container's environment with a timeout, after which its
    /// process group is killed.
    fn exec_sync(&self, id: &str, cmd: &[String], timeout: Duration) -> Result<ExecResult, RuntimeError> {
        match self.exec_start(id, cmd, timeout)? {
            exec::ExecStart::Running(p) => p.wait(timeout),
            exec::ExecStart::Finished(r) => Ok(r),
        }
    }
    /// `ferrolet exec`: runs a command for at most `timeout`, each stream capped at
    /// `exec::EXEC_OUTPUT_CAP` however much it writes; `None` when `interrupt` was set
    /// first. The command is killed at the timeout or interrupt (the CRI runtime closes
    /// its stream instead: see `CriRuntime::exec_interactive`).
    fn exec_interactive(
        &self,
        id: &str,
        cmd: &[String],
        timeout: Duration,
        interrupt: &AtomicBool,
    ) -> Result<Option<ExecResult>, RuntimeError> {
        match self.exec_start(id, cmd, timeout)? {
            exec::ExecStart::Running(p) => p.wait_unless(timeout, interrupt),
            exec::ExecStart::Finished(r) => Ok(Some(r)),
        }
    }
    /// The URL of the runtime's own streaming server where `cmd` runs in container `id` with
    /// the streams `io` once the apiserver's connection is proxied there (CRI's `Exec`);
    /// `None`: the runtime has no streaming server and the agent serves the stream itself,
    /// from `exec_session`.
    fn exec_url(&self, id: &str, cmd: &[String], io: StreamIo) -> Result<Option<String>, RuntimeError> {
        let _ = (id, cmd, io);
        Ok(None)
    }
    /// The URL where the runtime serves an attach to container `id`'s own streams (CRI's
    /// `Attach`); `None`: the runtime cannot attach (the process runtime attaches no stdin or
    /// terminal to containers).
    fn attach_url(&self, id: &str, io: StreamIo) -> Result<Option<String>, RuntimeError> {
        let _ = (id, io);
        Ok(None)
    }
    /// The URL where the runtime serves port forwarding into pod `pod_uid`'s network (CRI's
    /// `PortForward` on its ready sandbox); `None`: the agent forwards itself.
    fn port_forward_url(&self, pod_uid: &str) -> Result<Option<String>, RuntimeError> {
        let _ = pod_uid;
        Ok(None)
    }
    /// Starts `cmd` interactively in container `id` (`kubectl exec` when `exec_url` is
    /// `None`): its stdin, stdout and stderr, or a terminal, are the returned session's to
    /// read and write. The default refuses: such a runtime serves streams itself (`exec_url`).
    fn exec_session(&self, id: &str, cmd: &[String], io: StreamIo) -> Result<exec::ExecSession, RuntimeError> {
        let _ = (id, cmd, io);
        let runtime = match self.kind() {
            RuntimeKind::Process => "process",
            RuntimeKind::Cri => "cri",
        };
        Err(RuntimeError::Unsupported {
            runtime,
            what: "exec sessions served by the agent (it serves streams itself, at its exec URL)".into(),
        })
    }
    /// Every image the runtime holds (none for a runtime without images).
    fn list_images(&self) -> Result<Vec<ImageInfo>, RuntimeError>;
    /// The image `image` (a name, a digest reference or an id), or `None` when absent.
    fn image_status(&self, image: &str) -> Result<Option<ImageInfo>, RuntimeError>;
    /// Pulls `image` with `auth`, for at most `timeout`, or until `cancel` fires; returns the
    /// runtime's id of the image. It blocks: the pod manager calls it from a pull thread.
    fn pull_image(
        &self,
        image: &str,
        auth: Option<&PullAuth>,
        timeout: Duration,
        cancel: &mut Cancel,
    ) -> Result<String, RuntimeError>;
    /// Removes an image (by name, digest reference or id).
    fn remove_image(&self, image: &str) -> Result<(), RuntimeError>;
    /// The filesystems holding the images (none for a runtime without images).
    fn image_fs_info(&self) -> Result<Vec<ImageFsInfo>, RuntimeError>;
    /// The images every container the runtime holds uses, running or exited, as ids,
    /// digests or names: image GC never removes them. Every container, not only this
    /// agent's: a runtime shared with other nodes or clients keeps their images too.
    fn images_in_use(&self) -> Result<Vec<String>, RuntimeError> {
        Ok(self.list_containers()?.into_iter().map(|c| c.config.image.clone()).filter(|i| !i.is_empty()).collect())
    }
    /// The image every pod sandbox is made from, which must be present before one is made;
    /// `None` when sandboxes need no image.
    fn sandbox_image(&self) -> Option<&str> {
        None
    }
    /// Who a container of `image` runs as when its security context names no uid. The
    /// default asks `image_status`; an image it does not know runs as root, as kubelet
    /// assumes.
    fn image_user(&self, image: &str) -> Result<ImageUser, RuntimeError> {
        Ok(match self.image_status(image)? {
            Some(i) => ImageUser { uid: i.uid, username: i.username },
            None => ImageUser::default(),
        })
    }
    /// Why this runtime cannot honour a container's security settings (its own, or its pod's
    /// `sandbox` ones), naming the fields; `None` when it can. The pod manager does not create
    /// such a container (`CreateContainerConfigError`), and `create_container` refuses it too.
    fn security_refusal(&self, _sandbox: &SandboxSecurity, _container: &ContainerSecurity) -> Option<String> {
        None
    }
    /// Why this runtime cannot make `config`'s mounts, naming them; `None` when it can. As
    /// `security_refusal`: the pod manager asks first, and `create_container` refuses too.
    fn mount_refusal(&self, _config: &ContainerConfig) -> Option<String> {
        None
    }
    /// The pod IPs of sandbox `id` on the pod network (CRI's `PodSandboxStatus`); empty on
    /// the host network, and for the process runtime.
    fn pod_sandbox_ips(&self, id: &str) -> Vec<String> {
        let _ = id;
        Vec::new()
    }
    /// Damaged records moved aside since the last call (each reported once, as an event).
    fn take_quarantined(&self) -> Vec<Quarantined> {
        Vec::new()
    }
    /// The usage of every running container of this agent's, as the runtime measures it
    /// (CRI's `ListContainerStats`), for at most a few seconds; `None` when the runtime does
    /// not report it (the process runtime: the agent reads its cgroups; a CRI runtime that
    /// does not implement the call).
    fn container_stats(&self) -> Result<Option<Vec<stats::RuntimeContainerStats>>, RuntimeError> {
        Ok(None)
    }
    /// The usage of every pod sandbox of this agent's, as the runtime measures it (CRI's
    /// `ListPodSandboxStats`); `None` as for `container_stats`.
    fn pod_sandbox_stats(&self) -> Result<Option<Vec<stats::RuntimePodStats>>, RuntimeError> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::labels;
    use std::collections::BTreeMap;

    #[test]
    fn a_label_is_read_under_its_name_or_the_one_earlier_versions_wrote() {
        let now = BTreeMap::from([(labels::CONTAINER_KIND.to_string(), "sidecar".to_string())]);
        let earlier = BTreeMap::from([("ferrolet.io/container-index".to_string(), "2".to_string())]);
        assert_eq!(labels::get(&now, labels::CONTAINER_KIND), Some("sidecar"));
        assert_eq!(labels::get(&earlier, labels::CONTAINER_INDEX), Some("2"));
        assert_eq!(labels::get(&earlier, labels::CONTAINER_KIND), None);
        assert_eq!(labels::get(&earlier, labels::POD_UID), None);
    }

    #[test]
    fn a_runtime_without_a_streaming_server_leaves_streams_to_the_agent_or_refuses_them() {
        use super::{ContainerRuntime, RuntimeError, StreamIo};
        let rt = super::fake::FakeRuntime::new(crate::base::clock::FakeClock::new(std::time::UNIX_EPOCH));
        let io = StreamIo { stdin: true, stdout: true, ..StreamIo::default() };
        assert_eq!(rt.exec_url("c1", &["sh".into()], io).unwrap(), None);
        assert_eq!(rt.attach_url("c1", io).unwrap(), None);
        assert_eq!(rt.port_forward_url("u1").unwrap(), None);
        let e = rt.exec_session("c1", &["sh".into()], io).err().unwrap();
        assert!(matches!(e, RuntimeError::Unsupported { runtime: "cri", .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "the cri runtime does not support exec sessions served by the agent (it serves streams itself, at its exec URL)"
        );
    }
}
