//! A blocking CRI v1 client over grpcio on a Unix socket. Every call has a deadline, and
//! every error names the endpoint and the call.

use crate::proto::cri::{
    AttachRequest, CgroupDriver, Container, ContainerFilter, ContainerStats, ContainerStatsFilter, ContainerStatus,
    ContainerStatusRequest, CreateContainerRequest, ExecRequest, ExecSyncRequest, ExecSyncResponse, Image,
    ImageFsInfoRequest, ImageFsInfoResponse, ImageServiceClient, ImageStatusRequest, ListContainerStatsRequest,
    ListContainersRequest, ListImagesRequest, ListPodSandboxRequest, ListPodSandboxStatsRequest, PodSandbox,
    PodSandboxFilter, PodSandboxStats, PodSandboxStatsFilter, PodSandboxStatus, PodSandboxStatusRequest,
    PortForwardRequest, PullImageRequest, PullImageResponse, RemoveContainerRequest, RemoveImageRequest,
    RemovePodSandboxRequest, ReopenContainerLogRequest, RunPodSandboxRequest, RuntimeConfigRequest,
    RuntimeServiceClient, RuntimeStatus, StartContainerRequest, StatusRequest, StopContainerRequest,
    StopPodSandboxRequest, VersionRequest, VersionResponse,
};
use grpcio::{CallOption, ChannelBuilder, Environment};
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The largest message accepted from the runtime (kubelet's CRI client allows 16 MiB).
pub const MAX_MESSAGE: i32 = 16 << 20;

/// What can go wrong talking to the runtime.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    /// The endpoint is not a `unix://` path.
    #[error("container runtime endpoint {endpoint:?}: only unix:///absolute/path endpoints are supported")]
    BadEndpoint {
        /// As configured.
        endpoint: String,
    },
    /// Nothing that could be a runtime's socket is at the endpoint.
    #[error("container runtime endpoint {endpoint}: {why}")]
    NoSocket {
        /// As configured.
        endpoint: String,
        /// What is there instead.
        why: String,
        /// Nothing at all is there (the runtime may not have started yet).
        missing: bool,
    },
    /// The runtime did not answer within the deadline.
    #[error("container runtime endpoint {endpoint}: no connection within {timeout:?}")]
    Connect {
        /// As configured.
        endpoint: String,
        /// How long it was given.
        timeout: Duration,
    },
    /// A call failed.
    #[error("container runtime endpoint {endpoint}: {call}")]
    Call {
        /// As configured.
        endpoint: String,
        /// The CRI method.
        call: &'static str,
        /// The gRPC error (boxed: it is large).
        #[source]
        source: Box<grpcio::Error>,
    },
    /// The runtime answers but does not say it is ready.
    #[error("container runtime endpoint {endpoint}: the runtime is not ready: {why}")]
    NotReady {
        /// As configured.
        endpoint: String,
        /// Its conditions.
        why: String,
    },
}

impl CriError {
    /// The gRPC status code of a failed call, if the runtime answered with one.
    fn code(&self) -> Option<grpcio::RpcStatusCode> {
        match self {
            CriError::Call { source, .. } => match &**source {
                grpcio::Error::RpcFailure(s) => Some(s.code()),
                _ => None,
            },
            _ => None,
        }
    }

    /// Whether the runtime said the object does not exist.
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(grpcio::RpcStatusCode::NOT_FOUND)
    }

    /// Whether the runtime does not implement the call (containerd 1.6: `RuntimeConfig`,
    /// `GetContainerEvents`).
    pub fn is_unimplemented(&self) -> bool {
        self.code() == Some(grpcio::RpcStatusCode::UNIMPLEMENTED)
    }

    /// Whether the runtime may be there soon, as at boot when both start together: no
    /// socket yet, no connection yet, a runtime that is not ready or not initialized yet
    /// (containerd answers "server is not initialized yet" for its first moments).
    pub fn is_starting(&self) -> bool {
        match self {
            CriError::NoSocket { missing, .. } => *missing,
            CriError::Connect { .. } | CriError::NotReady { .. } => true,
            CriError::Call { source, .. } => match &**source {
                grpcio::Error::RpcFailure(s) => {
                    s.code() == grpcio::RpcStatusCode::UNAVAILABLE || s.message().contains("not initialized")
                }
                _ => false,
            },
            CriError::BadEndpoint { .. } => false,
        }
    }

    /// Whether an answer was larger than a gRPC message may be (containerd sends at most
    /// 16 MiB).
    pub fn is_too_large(&self) -> bool {
        self.code() == Some(grpcio::RpcStatusCode::RESOURCE_EXHAUSTED)
    }

    /// Whether the call ran past its deadline (an `ExecSync` past its timeout).
    pub fn is_deadline_exceeded(&self) -> bool {
        self.code() == Some(grpcio::RpcStatusCode::DEADLINE_EXCEEDED)
    }
}

/// The socket path of a `unix:///path` endpoint (kubelet's form; a bare absolute path is
/// accepted too).
pub fn socket_path(endpoint: &str) -> Option<PathBuf> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    path.starts_with('/').then(|| PathBuf::from(path))
}

/// Why the runtime is not ready, from `Status`: `RuntimeReady` must be true. A network
/// that is not ready is not fatal (host-network pods run without it); it is returned as a
/// warning.
pub fn readiness(status: &RuntimeStatus) -> (Option<String>, Option<String>) {
    let find = |t: &str| status.conditions().iter().find(|c| c.type_() == t);
    let describe = |t: &str| match find(t) {
        None => Some(format!("{t} is not reported")),
        Some(c) if c.status() => None,
        Some(c) => Some(format!("{t} is false ({}: {})", c.reason(), c.message())),
    };
    (describe("RuntimeReady"), describe("NetworkReady"))
}

/// The sandbox image in a verbose `Status`'s info: containerd puts its CRI config, as JSON,
/// under `config`, with the image as `sandboxImage`.
pub fn sandbox_image_of(info: &std::collections::HashMap<String, String>) -> Option<String> {
    let config: serde_json::Value = serde_json::from_slice(info.get("config")?.as_bytes()).ok()?;
    let image = config.get("sandboxImage")?.as_str()?;
    (!image.is_empty()).then(|| image.to_string())
}

/// A connected client: the runtime and image services on one channel.
pub struct CriClient {
    endpoint: String,
    runtime: RuntimeServiceClient,
    images: ImageServiceClient,
    timeout: Duration,
}

impl CriClient {
    /// Connects to `endpoint`, waiting up to `timeout`; calls get `timeout` each.
    pub fn connect(endpoint: &str, timeout: Duration, env: Arc<Environment>) -> Result<CriClient, CriError> {
        let e = || endpoint.to_string();
        let path = socket_path(endpoint).ok_or_else(|| CriError::BadEndpoint { endpoint: e() })?;
        match std::fs::metadata(&path) {
            Ok(m) if m.file_type().is_socket() => {}
            Ok(_) => return Err(CriError::NoSocket { endpoint: e(), why: "not a socket".into(), missing: false }),
            Err(err) => {
                let missing = err.kind() == std::io::ErrorKind::NotFound;
                return Err(CriError::NoSocket {
                    endpoint: e(),
                    why: crate::base::errors::Chain(&err).to_string(),
                    missing,
                });
            }
        }
        // A restarted runtime is reconnected to within seconds (gRPC's default back-off
        // grows to two minutes).
        let ch = ChannelBuilder::new(env)
            .max_receive_message_len(MAX_MESSAGE)
            .initial_reconnect_backoff(Duration::from_millis(500))
            .max_reconnect_backoff(Duration::from_secs(5))
            .connect(&format!("unix:{}", path.display()));
        if !futures::executor::block_on(ch.wait_for_connected(timeout)) {
            return Err(CriError::Connect { endpoint: e(), timeout });
        }
        Ok(CriClient {
            endpoint: e(),
            runtime: RuntimeServiceClient::new(ch.clone()),
            images: ImageServiceClient::new(ch),
            timeout,
        })
    }

    /// The same client with each call's deadline set to `timeout`.
    pub fn with_call_timeout(self, timeout: Duration) -> CriClient {
        CriClient { timeout, ..self }
    }

    fn opt(&self) -> CallOption {
        CallOption::default().timeout(self.timeout)
    }

    fn failed(&self, call: &'static str) -> impl FnOnce(grpcio::Error) -> CriError + '_ {
        move |source| CriError::Call { endpoint: self.endpoint.clone(), call, source: Box::new(source) }
    }

    /// `Version`: the runtime's name and versions.
    pub fn version(&self) -> Result<VersionResponse, CriError> {
        self.runtime.version_opt(&VersionRequest::new(), self.opt()).map_err(self.failed("Version"))
    }

    /// `Status`: the runtime's conditions.
    pub fn status(&self) -> Result<RuntimeStatus, CriError> {
        let resp = self.runtime.status_opt(&StatusRequest::new(), self.opt()).map_err(self.failed("Status"))?;
        Ok(resp.status().clone())
    }

    /// The sandbox (pause) image the runtime is configured with, from `Status`'s verbose
    /// info (containerd reports its CRI config there); `None` when it does not say.
    pub fn sandbox_image(&self) -> Result<Option<String>, CriError> {
        let mut req = StatusRequest::new();
        req.set_verbose(true);
        let resp = self.runtime.status_opt(&req, self.opt()).map_err(self.failed("Status"))?;
        Ok(sandbox_image_of(resp.info()))
    }

    /// `RuntimeConfig`: the runtime's cgroup driver; `None` when it does not say (the call
    /// is UNIMPLEMENTED before containerd 2.0, as kubelet allows).
    pub fn cgroup_driver(&self) -> Result<Option<CgroupDriver>, CriError> {
        match self.runtime.runtime_config_opt(&RuntimeConfigRequest::new(), self.opt()) {
            Ok(resp) => Ok(resp.has_linux().then(|| resp.linux().cgroup_driver())),
            Err(e) => {
                let e = self.failed("RuntimeConfig")(e);
                if e.is_unimplemented() {
                    Ok(None)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// The deadline of each call (calls that wait longer by design add their wait to it).
    pub fn call_timeout(&self) -> Duration {
        self.timeout
    }

    /// `RunPodSandbox`: the new sandbox's id.
    pub fn run_pod_sandbox(&self, req: &RunPodSandboxRequest) -> Result<String, CriError> {
        let resp = self.runtime.run_pod_sandbox_opt(req, self.opt()).map_err(self.failed("RunPodSandbox"))?;
        Ok(resp.pod_sandbox_id)
    }

    /// `PodSandboxStatus`.
    pub fn pod_sandbox_status(&self, id: &str) -> Result<PodSandboxStatus, CriError> {
        let mut req = PodSandboxStatusRequest::new();
        req.set_pod_sandbox_id(id.into());
        let mut resp =
            self.runtime.pod_sandbox_status_opt(&req, self.opt()).map_err(self.failed("PodSandboxStatus"))?;
        Ok(resp.take_status())
    }

    /// `ReopenContainerLog`: the runtime opens the container's log path again (after it
    /// was renamed away).
    pub fn reopen_container_log(&self, id: &str) -> Result<(), CriError> {
        let mut req = ReopenContainerLogRequest::new();
        req.set_container_id(id.into());
        self.runtime.reopen_container_log_opt(&req, self.opt()).map_err(self.failed("ReopenContainerLog"))?;
        Ok(())
    }

    /// `StopPodSandbox` (containerd stops what still runs in it).
    pub fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let mut req = StopPodSandboxRequest::new();
        req.set_pod_sandbox_id(id.into());
        self.runtime.stop_pod_sandbox_opt(&req, self.opt()).map_err(self.failed("StopPodSandbox"))?;
        Ok(())
    }

    /// `RemovePodSandbox`.
    pub fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let mut req = RemovePodSandboxRequest::new();
        req.set_pod_sandbox_id(id.into());
        self.runtime.remove_pod_sandbox_opt(&req, self.opt()).map_err(self.failed("RemovePodSandbox"))?;
        Ok(())
    }

    /// `ListPodSandbox` with `filter`.
    pub fn list_pod_sandbox(&self, filter: PodSandboxFilter) -> Result<Vec<PodSandbox>, CriError> {
        let mut req = ListPodSandboxRequest::new();
        req.set_filter(filter);
        let mut resp = self.runtime.list_pod_sandbox_opt(&req, self.opt()).map_err(self.failed("ListPodSandbox"))?;
        Ok(resp.take_items())
    }

    /// `CreateContainer`: the new container's id.
    pub fn create_container(&self, req: &CreateContainerRequest) -> Result<String, CriError> {
        let resp = self.runtime.create_container_opt(req, self.opt()).map_err(self.failed("CreateContainer"))?;
        Ok(resp.container_id)
    }

    /// `StartContainer`.
    pub fn start_container(&self, id: &str) -> Result<(), CriError> {
        let mut req = StartContainerRequest::new();
        req.set_container_id(id.into());
        self.runtime.start_container_opt(&req, self.opt()).map_err(self.failed("StartContainer"))?;
        Ok(())
    }

    /// `StopContainer` with a grace period of `grace_seconds`; it blocks until the container
    /// has exited, so its deadline is the grace period plus the call timeout.
    pub fn stop_container(&self, id: &str, grace_seconds: i64) -> Result<(), CriError> {
        let mut req = StopContainerRequest::new();
        req.set_container_id(id.into());
        req.set_timeout(grace_seconds);
        let opt = CallOption::default().timeout(Duration::from_secs(grace_seconds.max(0) as u64) + self.timeout);
        self.runtime.stop_container_opt(&req, opt).map_err(self.failed("StopContainer"))?;
        Ok(())
    }

    /// `RemoveContainer`.
    pub fn remove_container(&self, id: &str) -> Result<(), CriError> {
        let mut req = RemoveContainerRequest::new();
        req.set_container_id(id.into());
        self.runtime.remove_container_opt(&req, self.opt()).map_err(self.failed("RemoveContainer"))?;
        Ok(())
    }

    /// `ListContainers` with `filter`.
    pub fn list_containers(&self, filter: ContainerFilter) -> Result<Vec<Container>, CriError> {
        let mut req = ListContainersRequest::new();
        req.set_filter(filter);
        let mut resp = self.runtime.list_containers_opt(&req, self.opt()).map_err(self.failed("ListContainers"))?;
        Ok(resp.take_containers())
    }

    /// `ListContainerStats` with `filter`, within `timeout` (or the call timeout, if shorter).
    pub fn list_container_stats(
        &self,
        filter: ContainerStatsFilter,
        timeout: Duration,
    ) -> Result<Vec<ContainerStats>, CriError> {
        let mut req = ListContainerStatsRequest::new();
        req.set_filter(filter);
        let opt = CallOption::default().timeout(timeout.min(self.timeout));
        let mut resp = self.runtime.list_container_stats_opt(&req, opt).map_err(self.failed("ListContainerStats"))?;
        Ok(resp.take_stats())
    }

    /// `ListPodSandboxStats` with `filter`, within `timeout` (or the call timeout, if shorter).
    pub fn list_pod_sandbox_stats(
        &self,
        filter: PodSandboxStatsFilter,
        timeout: Duration,
    ) -> Result<Vec<PodSandboxStats>, CriError> {
        let mut req = ListPodSandboxStatsRequest::new();
        req.set_filter(filter);
        let opt = CallOption::default().timeout(timeout.min(self.timeout));
        let mut resp =
            self.runtime.list_pod_sandbox_stats_opt(&req, opt).map_err(self.failed("ListPodSandboxStats"))?;
        Ok(resp.take_stats())
    }

    /// `ContainerStatus`.
    pub fn container_status(&self, id: &str) -> Result<ContainerStatus, CriError> {
        let mut req = ContainerStatusRequest::new();
        req.set_container_id(id.into());
        let mut resp = self.runtime.container_status_opt(&req, self.opt()).map_err(self.failed("ContainerStatus"))?;
        Ok(resp.take_status())
    }

    /// `ExecSync` with `req.timeout` seconds; the call's deadline is that plus the call
    /// timeout, so the runtime's own timeout answers first.
    pub fn exec_sync(&self, req: &ExecSyncRequest) -> Result<ExecSyncResponse, CriError> {
        let opt = CallOption::default().timeout(Duration::from_secs(req.timeout.max(0) as u64) + self.timeout);
        self.runtime.exec_sync_opt(req, opt).map_err(self.failed("ExecSync"))
    }

    /// `Exec`: the URL of the runtime's streaming server where the request's command runs
    /// once a client connects.
    pub fn exec(&self, req: &ExecRequest) -> Result<String, CriError> {
        let mut resp = self.runtime.exec_opt(req, self.opt()).map_err(self.failed("Exec"))?;
        Ok(resp.take_url())
    }

    /// `Attach`: the URL of the runtime's streaming server where a client reaches the
    /// container's own streams.
    pub fn attach(&self, req: &AttachRequest) -> Result<String, CriError> {
        let mut resp = self.runtime.attach_opt(req, self.opt()).map_err(self.failed("Attach"))?;
        Ok(resp.take_url())
    }

    /// `PortForward`: the URL of the runtime's streaming server that forwards ports into
    /// the sandbox's network.
    pub fn port_forward(&self, req: &PortForwardRequest) -> Result<String, CriError> {
        let mut resp = self.runtime.port_forward_opt(req, self.opt()).map_err(self.failed("PortForward"))?;
        Ok(resp.take_url())
    }

    /// `ImageStatus`: the image if the runtime has it.
    pub fn image_status(&self, image: &str) -> Result<Option<Image>, CriError> {
        let mut req = ImageStatusRequest::new();
        req.mut_image().set_image(image.into());
        let mut resp = self.images.image_status_opt(&req, self.opt()).map_err(self.failed("ImageStatus"))?;
        Ok(resp.has_image().then(|| resp.take_image()))
    }

    /// `ListImages`: every image the runtime holds.
    pub fn list_images(&self) -> Result<Vec<Image>, CriError> {
        let mut resp =
            self.images.list_images_opt(&ListImagesRequest::new(), self.opt()).map_err(self.failed("ListImages"))?;
        Ok(resp.take_images())
    }

    /// `PullImage`, started: the caller waits on the returned call (and may cancel it), whose
    /// deadline is `timeout`. Map its error with `pull_failed`.
    pub fn start_pull_image(
        &self,
        req: &PullImageRequest,
        timeout: Duration,
    ) -> Result<grpcio::ClientUnaryReceiver<PullImageResponse>, CriError> {
        let opt = CallOption::default().timeout(timeout);
        self.images.pull_image_async_opt(req, opt).map_err(self.failed("PullImage"))
    }

    /// The error of a failed `PullImage` call.
    pub fn pull_failed(&self, source: grpcio::Error) -> CriError {
        self.failed("PullImage")(source)
    }

    /// `RemoveImage`.
    pub fn remove_image(&self, image: &str) -> Result<(), CriError> {
        let mut req = RemoveImageRequest::new();
        req.mut_image().set_image(image.into());
        self.images.remove_image_opt(&req, self.opt()).map_err(self.failed("RemoveImage"))?;
        Ok(())
    }

    /// `ImageFsInfo`: the filesystems holding the images (and, on newer runtimes, the
    /// containers' writable layers).
    pub fn image_fs_info(&self) -> Result<ImageFsInfoResponse, CriError> {
        self.images.image_fs_info_opt(&ImageFsInfoRequest::new(), self.opt()).map_err(self.failed("ImageFsInfo"))
    }

    /// The start-up check: `Version`, then `Status` with `RuntimeReady`. Returns the
    /// version and a warning when the network is not ready.
    pub fn check(&self) -> Result<(VersionResponse, Option<String>), CriError> {
        let version = self.version()?;
        let (runtime, network) = readiness(&self.status()?);
        if let Some(why) = runtime {
            return Err(CriError::NotReady { endpoint: self.endpoint.clone(), why });
        }
        Ok((version, network))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::cri::RuntimeCondition;

    #[test]
    fn endpoints_are_unix_socket_paths() {
        assert_eq!(
            socket_path("unix:///run/containerd/containerd.sock"),
            Some("/run/containerd/containerd.sock".into())
        );
        assert_eq!(socket_path("/run/crio/crio.sock"), Some("/run/crio/crio.sock".into()));
        assert_eq!(socket_path("tcp://127.0.0.1:1234"), None);
        assert_eq!(socket_path("unix://relative.sock"), None);
    }

    fn status(conditions: &[(&str, bool)]) -> RuntimeStatus {
        let mut s = RuntimeStatus::new();
        for (t, ok) in conditions {
            let mut c = RuntimeCondition::new();
            c.set_type(t.to_string());
            c.set_status(*ok);
            if !ok {
                c.set_reason("NetworkPluginNotReady".into());
                c.set_message("cni plugin not initialized".into());
            }
            s.mut_conditions().push(c);
        }
        s
    }

    #[test]
    fn the_runtime_must_be_ready_and_the_network_only_warns() {
        let (r, n) = readiness(&status(&[("RuntimeReady", true), ("NetworkReady", true)]));
        assert_eq!((r, n), (None, None));
        let (r, n) = readiness(&status(&[("RuntimeReady", true), ("NetworkReady", false)]));
        assert_eq!(r, None);
        assert_eq!(n.unwrap(), "NetworkReady is false (NetworkPluginNotReady: cni plugin not initialized)");
        let (r, _) = readiness(&status(&[("NetworkReady", true)]));
        assert_eq!(r.unwrap(), "RuntimeReady is not reported");
    }

    #[test]
    fn the_sandbox_image_comes_from_containerds_verbose_status() {
        let info = |config: &str| std::collections::HashMap::from([("config".to_string(), config.to_string())]);
        let cfg = r#"{"containerd":{},"sandboxImage":"registry.k8s.io/pause:3.6","maxConcurrentDownloads":3}"#;
        assert_eq!(sandbox_image_of(&info(cfg)).as_deref(), Some("registry.k8s.io/pause:3.6"));
        assert_eq!(sandbox_image_of(&info(r#"{"sandboxImage":""}"#)), None);
        assert_eq!(sandbox_image_of(&info("not json")), None);
        assert_eq!(sandbox_image_of(&Default::default()), None);
    }

    #[test]
    fn a_missing_socket_or_a_bad_endpoint_is_named() {
        let env = Arc::new(grpcio::EnvBuilder::new().cq_count(1).build());
        let t = Duration::from_millis(100);
        let e = CriClient::connect("unix:///nonexistent/ferrolet-cri.sock", t, env.clone()).err().unwrap();
        let text = e.to_string();
        assert!(text.starts_with("container runtime endpoint unix:///nonexistent/ferrolet-cri.sock: "), "{text}");
        assert!(text.contains("No such file"), "{text}");
        let e = CriClient::connect("tcp://127.0.0.1:1", t, env.clone()).err().unwrap();
        assert!(e.to_string().contains("only unix:///absolute/path"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain");
        std::fs::write(&file, "").unwrap();
        let e = CriClient::connect(&format!("unix://{}", file.display()), t, env).err().unwrap();
        assert!(e.to_string().ends_with(": not a socket"), "{e}");
    }
}
