//! `CriRuntime`: the `ContainerRuntime` over a CRI v1 runtime (containerd). Every method is
//! a thin executor: translate (`translate.rs`, pure and unit-tested), call (`CriClient`,
//! every call with a deadline), translate back. It lists and touches only objects carrying
//! `labels::MANAGED_BY`, so other pods in the same containerd are never seen.
//!
//! `StopContainer` blocks for up to the grace period, but the trait promises that
//! `stop_container` returns at once: stops run on a `manager::JobQueue` (`fl-cri-stop`, at
//! most `MAX_STOPS` at a time, up to `MAX_QUEUED_STOPS` waiting), so a pod of 100
//! containers, or 100 pods removed at once, are all stopped, 32 at a time. `stop` joins
//! the threads.

use super::client::{CriClient, CriError};
use super::{stream, translate};
use crate::api::fields::RuntimeKind;
use crate::base::errors::Chain;
use crate::base::manager::Cancel;
use crate::base::manager::{Exit, Health, JobError, JobQueue, StopTimeout, Worker};
use crate::node::runtime::exec::{ExecStart, EXEC_OUTPUT_CAP};
use crate::node::runtime::logrotate::{self, LogAction};
use crate::node::runtime::stats::{RuntimeContainerStats, RuntimePodStats};
use crate::node::runtime::{
    labels, ContainerConfig, ContainerInfo, ContainerRuntime, ContainerState, ExecResult, ImageFsInfo, ImageInfo,
    PullAuth, RuntimeError, SandboxConfig, SandboxInfo, StreamIo,
};
use crate::proto::cri::{self, ContainerFilter, PodSandboxFilter};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The most container stops in flight at once (each holds a thread for up to its grace
/// period).
pub const MAX_STOPS: usize = 32;
/// The most container stops waiting for a thread.
pub const MAX_QUEUED_STOPS: usize = 4096;
/// The name of the stop threads.
const STOP_THREAD: &str = "fl-cri-stop";
/// The name of the log rotation thread.
const LOG_THREAD: &str = "fl-cri-logs";
/// The longest wait for the runtime's stats (`ListContainerStats`, `ListPodSandboxStats`):
/// the stats thread has a collection to finish, and an answer older than this is stale.
pub const STATS_TIMEOUT: Duration = Duration::from_secs(5);

/// What the runtime keeps of a container between relists.
struct Known {
    config: Arc<ContainerConfig>,
    /// The last status, running or exited, and when it was read: it stands for the next
    /// ones while `translate::reusable`.
    settled: Option<ContainerInfo>,
    read_at: SystemTime,
}

/// What the runtime keeps of a sandbox between relists.
struct KnownSandbox {
    config: Arc<SandboxConfig>,
    /// Its pod IPs, asked once (`PodSandboxStatus`) when it is first seen ready; a pod's IP
    /// does not change while its sandbox lives.
    ips: Option<Vec<String>>,
}

impl KnownSandbox {
    fn new(config: Arc<SandboxConfig>) -> KnownSandbox {
        // A host-network pod has the node's addresses: nothing to ask.
        let ips = config.host_network.then(Vec::new);
        KnownSandbox { config, ips }
    }
}

/// How often running containers' log sizes are looked at (kubelet's
/// `containerLogMonitorInterval`).
pub const LOG_CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// Container log rotation: CRI runtimes only append, so the agent rotates (kubelet's
/// container log manager).
#[derive(Clone, Copy, Debug)]
pub struct LogRotation {
    /// Rotate a running container's log past this size.
    pub max_size: u64,
    /// Files kept per container instance, the live one included.
    pub max_files: u32,
}

/// The CRI backend.
pub struct CriRuntime {
    client: Arc<CriClient>,
    pause_image: String,
    pause_seen: AtomicBool,
    /// The labels of this node's objects (`translate::owner_labels`).
    owner: HashMap<String, String>,
    sandboxes: Mutex<HashMap<String, KnownSandbox>>,
    containers: Arc<Mutex<HashMap<String, Known>>>,
    stops: JobQueue,
    /// The stops asked and not done yet (in flight or waiting), by container id and grace.
    asked: Arc<Mutex<Vec<(String, Duration)>>>,
    /// The log rotation thread (`fl-cri-logs`), when rotation is on.
    logs: Mutex<Option<Worker>>,
    /// `name://version` of the runtime (a Node's `containerRuntimeVersion`).
    version: String,
    /// The runtime's name (`containerd`): the scheme of container ids, as kubelet's.
    name: String,
    /// What a relative streaming URL from the runtime is resolved against (containerd
    /// answers with absolute ones).
    stream_base: Option<String>,
    /// Whether the runtime said it uses the systemd cgroup driver (`None`: it did not say).
    systemd_cgroups: Option<bool>,
}

impl CriRuntime {
    /// A runtime over `client`. `pause_image` is the sandbox image the runtime is configured
    /// with (containerd's `sandbox_image`; CRI takes none per call): a sandbox is made only
    /// once the runtime has it. It lists and touches only the objects it made for node
    /// `node`. Stop threads are registered in `health`.
    pub fn new(client: CriClient, pause_image: &str, node: &str, health: &Health) -> CriRuntime {
        CriRuntime {
            client: Arc::new(client),
            pause_image: pause_image.into(),
            pause_seen: AtomicBool::new(false),
            owner: translate::owner_labels(node),
            sandboxes: Mutex::new(HashMap::new()),
            containers: Arc::default(),
            stops: JobQueue::new(STOP_THREAD, MAX_STOPS, MAX_QUEUED_STOPS, health),
            asked: Arc::default(),
            logs: Mutex::new(None),
            version: String::new(),
            name: "cri".into(),
            stream_base: None,
            systemd_cgroups: None,
        }
    }

    /// The same runtime, resolving a relative streaming URL the runtime answers `Exec`,
    /// `Attach` or `PortForward` with against `base` (`http://127.0.0.1:10010/`).
    pub fn with_stream_base(mut self, base: &str) -> CriRuntime {
        self.stream_base = Some(base.into());
        self
    }

    /// The runtime's streaming URL `url` for `object`, made absolute (`translate::stream_url`).
    fn stream_url(&self, url: String, object: String) -> Result<String, RuntimeError> {
        translate::stream_url(&url, self.stream_base.as_deref())
            .ok_or(RuntimeError::Stream { object, source: stream::StreamError::BadUrl { url } })
    }

    /// The same runtime, known to use the systemd cgroup driver (`Some(true)`), cgroupfs
    /// (`Some(false)`), or not saying (`RuntimeConfig`).
    pub fn with_cgroup_driver(mut self, systemd: Option<bool>) -> CriRuntime {
        self.systemd_cgroups = systemd;
        self
    }

    /// Whether the runtime said it uses the systemd cgroup driver.
    pub fn systemd_cgroups(&self) -> Option<bool> {
        self.systemd_cgroups
    }

    /// The same runtime, named `name` (`containerd`) at `version` (`1.6.20`).
    pub fn with_version(mut self, name: &str, version: &str) -> CriRuntime {
        self.version = format!("{name}://{version}");
        if !name.is_empty() {
            self.name = name.into();
        }
        self
    }

    /// `name://version` of the runtime.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Starts the thread (`fl-cri-logs`, registered in `health`) that every
    /// `LOG_CHECK_INTERVAL` rotates the logs of running containers past
    /// `rotation.max_size` and has the runtime reopen one that was deleted (kubelet's
    /// container log manager). It works from the last relist (no call but the reopens);
    /// `stop` ends it.
    pub fn start_log_rotation(&self, rotation: LogRotation, health: &Health) -> std::io::Result<()> {
        let (client, containers) = (self.client.clone(), self.containers.clone());
        let worker = Worker::spawn(LOG_THREAD, health, move |stop| {
            while !stop.sleep(LOG_CHECK_INTERVAL) {
                let running: Vec<ContainerInfo> = containers
                    .lock()
                    .values()
                    .filter_map(|k| k.settled.clone())
                    .filter(|c| c.state == ContainerState::Running)
                    .collect();
                rotate_logs(&client, &running, rotation);
            }
            Exit::Done
        })?;
        *self.logs.lock() = Some(worker);
        Ok(())
    }

    /// Ends the log rotation thread, stops taking container stops and waits up to `timeout`
    /// for those in flight (each is bounded by its grace period plus the call timeout);
    /// returns the ones still running.
    /// Stops waiting for a thread are dropped (the pod manager asks again after a restart).
    pub fn stop(&self, timeout: Duration) -> Vec<StopTimeout> {
        let dropped = self.stops.close();
        if dropped > 0 {
            log::info!("cri: {dropped} container stop(s) not sent (the agent is stopping)");
        }
        let mut late: Vec<StopTimeout> =
            self.logs.lock().take().and_then(|w| w.stop(timeout).err()).into_iter().collect();
        // The stops in flight are bounded by their calls (the stop signal is not watched).
        late.extend(self.stops.stop(timeout));
        late
    }

    /// Container stops in flight or waiting for a thread.
    pub fn stops_in_flight(&self) -> usize {
        self.asked.lock().len()
    }

    /// Maps a failed call about `object`; the runtime's NOT_FOUND becomes `NotFound`.
    fn failed<'a>(kind: &'static str, id: &'a str, object: String) -> impl FnOnce(CriError) -> RuntimeError + 'a {
        move |source| {
            if source.is_not_found() {
                RuntimeError::NotFound { kind, id: id.into() }
            } else {
                RuntimeError::Cri { object, source }
            }
        }
    }

    /// `container <id>`, with its name when known.
    fn container_object(&self, id: &str) -> String {
        match self.containers.lock().get(id) {
            Some(k) => format!("container {} ({id})", k.config.name),
            None => format!("container {id}"),
        }
    }

    /// The config sandbox `id` was made with: from the cache, else from the runtime.
    fn sandbox_config(&self, id: &str) -> Result<Arc<SandboxConfig>, RuntimeError> {
        if let Some(k) = self.sandboxes.lock().get(id) {
            return Ok(k.config.clone());
        }
        let mut filter = PodSandboxFilter::new();
        filter.set_id(id.into());
        filter.set_label_selector(self.owner.clone());
        let found =
            self.client.list_pod_sandbox(filter).map_err(Self::failed("sandbox", id, format!("sandbox {id}")))?;
        let s = found.into_iter().find(|s| s.id() == id);
        let s = s.ok_or_else(|| RuntimeError::NotFound { kind: "sandbox", id: id.into() })?;
        let config = Arc::new(translate::sandbox_config_of(s.metadata(), s.annotations()));
        self.sandboxes.lock().insert(id.into(), KnownSandbox::new(config.clone()));
        Ok(config)
    }

    /// The pause image must be in the runtime before a sandbox is made (checked until
    /// seen). The pod manager pulls it first, off its sync thread (`sandbox_image`); this
    /// guard keeps `RunPodSandbox` from pulling it inside the call, which would block the
    /// sync thread for as long as the pull takes (containerd pulls a missing sandbox image
    /// itself, with no deadline but the call's).
    fn ensure_pause_image(&self, pod: &str) -> Result<(), RuntimeError> {
        if self.pause_seen.load(Ordering::Relaxed) {
            return Ok(());
        }
        let object = || format!("pod {pod}: pause image {}", self.pause_image);
        match self.client.image_status(&self.pause_image) {
            Ok(Some(_)) => {
                self.pause_seen.store(true, Ordering::Relaxed);
                Ok(())
            }
            Ok(None) => Err(RuntimeError::NotFound { kind: "image", id: self.pause_image.clone() }),
            Err(source) => Err(RuntimeError::Cri { object: object(), source }),
        }
    }

    /// Asks for a stop of `id` unless one with no longer a grace period is asked already.
    fn spawn_stop(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        let mut asked = self.asked.lock();
        if asked.iter().any(|(i, g)| i == id && *g <= grace) {
            return Ok(());
        }
        let (client, done) = (self.client.clone(), self.asked.clone());
        let (cid, object, seconds) =
            (id.to_string(), self.container_object(id), translate::stop_timeout_seconds(grace));
        let submitted = self.stops.submit(Box::new(move |_stop| {
            // Bounded by its grace period plus the call timeout.
            match client.stop_container(&cid, seconds) {
                Ok(()) => log::debug!("cri: {object} stopped"),
                Err(e) if e.is_not_found() => log::debug!("cri: {object} was already gone"),
                Err(e) => log::warn!("cri: stopping {object}: {}", Chain(&e)),
            }
            let mut asked = done.lock();
            if let Some(i) = asked.iter().position(|(i, g)| *i == cid && *g == grace) {
                asked.swap_remove(i);
            }
        }));
        match submitted {
            Ok(()) => {
                asked.push((id.to_string(), grace));
                Ok(())
            }
            Err(JobError::Full { max }) => Err(RuntimeError::Busy { what: "container stops", max }),
            Err(JobError::Closed) => Err(RuntimeError::Unsupported {
                runtime: "cri",
                what: "stopping containers while shutting down".into(),
            }),
            Err(JobError::Spawn(source)) => {
                Err(RuntimeError::Process { action: format!("starting a {STOP_THREAD} thread for {id}"), source })
            }
        }
    }
}

impl Drop for CriRuntime {
    /// Stops in flight are waited for (bounded by the call timeout), not left detached.
    fn drop(&mut self) {
        for t in self.stop(self.client.call_timeout()) {
            log::warn!("cri: {} did not end within {:?}", t.name, t.timeout);
        }
    }
}

/// Rotates or reopens the logs of `running` containers as `logrotate::log_action` decides
/// (one `stat` each). Failures are logged: a log that cannot be rotated keeps growing, and
/// is tried again.
fn rotate_logs(client: &CriClient, running: &[ContainerInfo], rotation: LogRotation) {
    for c in running {
        let path = &c.config.log_path;
        let size = match std::fs::metadata(path) {
            Ok(m) => Some(m.len()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(_) => continue,
        };
        match logrotate::log_action(size, rotation.max_size) {
            Some(LogAction::Rotate) => rotate_log(client, c, rotation.max_files),
            Some(LogAction::Reopen) => match client.reopen_container_log(&c.id) {
                Ok(()) => log::info!(
                    "cri: container {} ({}): its log {} was gone; the runtime reopened it",
                    c.config.name,
                    c.id,
                    path.display()
                ),
                Err(e) => log::warn!(
                    "cri: container {} ({}): its log {} is gone and the runtime did not reopen it: {}",
                    c.config.name,
                    c.id,
                    path.display(),
                    Chain(&e)
                ),
            },
            None => {}
        }
    }
}

/// Renames a container's log away and has the runtime reopen it; when the runtime
/// cannot, the file is put back (it still writes to it), as kubelet does.
fn rotate_log(client: &CriClient, c: &ContainerInfo, max_files: u32) {
    let path = &c.config.log_path;
    let rotated = logrotate::rotation_path(path, std::time::SystemTime::now());
    if let Err(e) = std::fs::rename(path, &rotated) {
        log::warn!(
            "cri: container {} ({}): cannot rotate its log {}: {}",
            c.config.name,
            c.id,
            path.display(),
            Chain(&e)
        );
        return;
    }
    if let Err(e) = client.reopen_container_log(&c.id) {
        let _ = std::fs::rename(&rotated, path);
        log::warn!("cri: container {} ({}): the runtime did not reopen its log: {}", c.config.name, c.id, Chain(&e));
        return;
    }
    logrotate::prune_rotated(path, max_files);
}

impl ContainerRuntime for CriRuntime {
    fn id_scheme(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Cri
    }

    fn run_pod_sandbox(&self, config: &SandboxConfig) -> Result<String, RuntimeError> {
        let pod = format!("{}/{}", config.namespace, config.pod_name);
        self.ensure_pause_image(&pod)?;
        let mut req = cri::RunPodSandboxRequest::new();
        let sandbox = translate::sandbox_config(config, &self.owner);
        req.set_config(sandbox.map_err(|source| RuntimeError::Translate { object: format!("pod {pod}"), source })?);
        let id = self
            .client
            .run_pod_sandbox(&req)
            .map_err(|source| RuntimeError::Cri { object: format!("pod {pod}"), source })?;
        self.sandboxes.lock().insert(id.clone(), KnownSandbox::new(Arc::new(config.clone())));
        Ok(id)
    }

    fn stop_pod_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        self.client.stop_pod_sandbox(id).map_err(Self::failed("sandbox", id, format!("sandbox {id}")))
    }

    /// Removes the sandbox (the runtime removes its containers), then what the runtime
    /// leaves behind: its pod cgroup where it is empty, and its log directory.
    fn remove_pod_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        let config = self.sandbox_config(id).ok();
        self.client.remove_pod_sandbox(id).map_err(Self::failed("sandbox", id, format!("sandbox {id}")))?;
        let parent = config.as_ref().map(|c| c.cgroup_parent.clone()).filter(|p| !p.is_empty());
        if let Some(parent) = parent {
            // runc leaves the pod's cgroup in every v1 hierarchy; the pod cgroup manager
            // removes it only from the ones it writes.
            match crate::node::cm::cgroupfs::Mounts::read(std::path::Path::new("/proc/self/mountinfo")) {
                Ok(mounts) => crate::node::cm::cgroupfs::remove_empty_everywhere(&mounts, &parent),
                Err(e) => log::warn!("cri: sandbox {id}: cannot remove its cgroup {parent}: {}", Chain(&e)),
            }
        }
        if let Some(dir) = config.map(|c| c.log_directory.clone()).filter(|d| !d.as_os_str().is_empty()) {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    log::warn!("cri: sandbox {id}: cannot remove its log directory {}: {e}", dir.display());
                }
            }
        }
        self.sandboxes.lock().remove(id);
        self.containers.lock().retain(|_, k| k.settled.as_ref().map_or(true, |i| i.sandbox_id != id));
        Ok(())
    }

    /// Lists this agent's sandboxes; a ready sandbox on the pod network seen for the first
    /// time costs one `PodSandboxStatus` for its IPs (retried at the next relist if it fails).
    fn list_pod_sandboxes(&self) -> Result<Vec<SandboxInfo>, RuntimeError> {
        let mut filter = PodSandboxFilter::new();
        filter.set_label_selector(self.owner.clone());
        let listed = self
            .client
            .list_pod_sandbox(filter)
            .map_err(|source| RuntimeError::Cri { object: "listing sandboxes".into(), source })?;
        let mut out: Vec<SandboxInfo> = {
            let mut cache = self.sandboxes.lock();
            cache.retain(|id, _| listed.iter().any(|s| s.id() == id));
            listed
                .iter()
                .map(|s| {
                    let k = cache.entry(s.id().into()).or_insert_with(|| {
                        KnownSandbox::new(Arc::new(translate::sandbox_config_of(s.metadata(), s.annotations())))
                    });
                    SandboxInfo {
                        ips: k.ips.clone().unwrap_or_default(),
                        ..translate::sandbox_info(s, k.config.clone())
                    }
                })
                .collect()
        };
        for info in out.iter_mut().filter(|i| i.ready && i.ips.is_empty() && !i.config.host_network) {
            info.ips = self.pod_sandbox_ips(&info.id);
        }
        Ok(out)
    }

    fn create_container(&self, sandbox_id: &str, config: &ContainerConfig) -> Result<String, RuntimeError> {
        let sandbox = self.sandbox_config(sandbox_id)?;
        let req = translate::create_container_request(sandbox_id, &sandbox, config, &self.owner).map_err(|source| {
            RuntimeError::Translate { object: format!("container {} in sandbox {sandbox_id}", config.name), source }
        })?;
        // Not mapped to `NotFound`: the sandbox was just found, and the runtime's NOT_FOUND
        // here is most often a missing image (removed since the pod manager saw it).
        let object = format!("container {} (image {}) in sandbox {sandbox_id}", config.name, config.image);
        let id = self.client.create_container(&req).map_err(|source| RuntimeError::Cri { object, source })?;
        self.containers
            .lock()
            .insert(id.clone(), Known { config: Arc::new(config.clone()), settled: None, read_at: UNIX_EPOCH });
        Ok(id)
    }

    fn start_container(&self, id: &str) -> Result<(), RuntimeError> {
        let object = self.container_object(id);
        self.client.start_container(id).map_err(Self::failed("container", id, object))
    }

    fn stop_container(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        self.spawn_stop(id, grace)
    }

    fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        let object = self.container_object(id);
        self.client.remove_container(id).map_err(Self::failed("container", id, object))?;
        self.containers.lock().remove(id);
        Ok(())
    }

    fn list_containers(&self) -> Result<Vec<ContainerInfo>, RuntimeError> {
        let mut filter = ContainerFilter::new();
        filter.set_label_selector(self.owner.clone());
        let listed = self
            .client
            .list_containers(filter)
            .map_err(|source| RuntimeError::Cri { object: "listing containers".into(), source })?;
        let mut out = Vec::with_capacity(listed.len());
        for c in &listed {
            let id = c.id();
            let (config, settled) = {
                let mut cache = self.containers.lock();
                let k = cache.entry(id.into()).or_insert_with(|| Known {
                    config: Arc::new(translate::container_config_of(c)),
                    settled: None,
                    read_at: UNIX_EPOCH,
                });
                (k.config.clone(), k.settled.clone().map(|i| (i, k.read_at)))
            };
            let same_state = |i: &ContainerInfo| {
                matches!(
                    (i.state, c.state()),
                    (ContainerState::Running, cri::ContainerState::CONTAINER_RUNNING)
                        | (ContainerState::Exited, cri::ContainerState::CONTAINER_EXITED)
                )
            };
            let now = SystemTime::now();
            if let Some((info, _)) = settled.filter(|(i, at)| same_state(i) && translate::reusable(i, *at, now)) {
                out.push(info);
                continue;
            }
            let status = match self.client.container_status(id) {
                Ok(s) => s,
                // Removed between the list and this look.
                Err(e) if e.is_not_found() => continue,
                Err(source) => {
                    return Err(RuntimeError::Cri { object: format!("container {} ({id})", config.name), source })
                }
            };
            let info = translate::container_info(c.pod_sandbox_id(), &status, config);
            if info.state != ContainerState::Created {
                if let Some(k) = self.containers.lock().get_mut(id) {
                    k.settled = Some(info.clone());
                    k.read_at = now;
                }
            }
            out.push(info);
        }
        self.containers.lock().retain(|id, _| listed.iter().any(|c| c.id() == id));
        Ok(out)
    }

    /// `ListContainerStats` of this node's containers; UNIMPLEMENTED is no answer.
    fn container_stats(&self) -> Result<Option<Vec<RuntimeContainerStats>>, RuntimeError> {
        let mut filter = cri::ContainerStatsFilter::new();
        filter.set_label_selector(self.owner.clone());
        match self.client.list_container_stats(filter, STATS_TIMEOUT) {
            Ok(listed) => Ok(Some(listed.iter().map(translate::container_stats).collect())),
            Err(e) if e.is_unimplemented() => Ok(None),
            Err(source) => Err(RuntimeError::Cri { object: "container stats".into(), source }),
        }
    }

    /// `ListPodSandboxStats` of this node's sandboxes; UNIMPLEMENTED is no answer.
    fn pod_sandbox_stats(&self) -> Result<Option<Vec<RuntimePodStats>>, RuntimeError> {
        let mut filter = cri::PodSandboxStatsFilter::new();
        filter.set_label_selector(self.owner.clone());
        match self.client.list_pod_sandbox_stats(filter, STATS_TIMEOUT) {
            Ok(listed) => Ok(Some(listed.iter().map(translate::pod_stats).collect())),
            Err(e) if e.is_unimplemented() => Ok(None),
            Err(source) => Err(RuntimeError::Cri { object: "pod sandbox stats".into(), source }),
        }
    }

    /// From the cache, else asked once (`PodSandboxStatus`) and cached.
    fn pod_sandbox_ips(&self, id: &str) -> Vec<String> {
        if let Some(ips) = self.sandboxes.lock().get(id).and_then(|k| k.ips.clone()) {
            return ips;
        }
        match self.client.pod_sandbox_status(id) {
            Ok(status) => {
                let ips = translate::sandbox_ips(&status);
                if let Some(k) = self.sandboxes.lock().get_mut(id) {
                    k.ips = Some(ips.clone());
                }
                ips
            }
            Err(e) => {
                log::debug!("cri: sandbox {id}: no IPs yet: {}", Chain(&e));
                Vec::new()
            }
        }
    }

    /// CRI has no way to start a command and watch it: this runs `ExecSync` for at most
    /// `timeout` and returns the finished result.
    fn exec_start(&self, id: &str, cmd: &[String], timeout: Duration) -> Result<ExecStart, RuntimeError> {
        self.exec_sync(id, cmd, timeout).map(ExecStart::Finished)
    }

    /// `Exec`, then the command's output streamed from the runtime's streaming server
    /// (`stream::exec`), so output past `ExecSync`'s 16 MiB answer is cut to the cap
    /// instead of losing the whole answer. At the timeout or interrupt the stream is closed:
    /// containerd 2 kills the command then, containerd 1.x lets it run to its end.
    fn exec_interactive(
        &self,
        id: &str,
        cmd: &[String],
        timeout: Duration,
        interrupt: &AtomicBool,
    ) -> Result<Option<ExecResult>, RuntimeError> {
        let deadline = Instant::now() + timeout;
        let object = || self.container_object(id);
        let io = StreamIo { stdout: true, stderr: true, ..StreamIo::default() };
        let req = translate::exec_request(id, cmd, io);
        let url = self.client.exec(&req).map_err(|source| RuntimeError::Cri { object: object(), source })?;
        let url = self.stream_url(url, object())?;
        match stream::exec(&url, EXEC_OUTPUT_CAP, deadline, interrupt) {
            Ok(stream::Streamed::Done(r)) => Ok(Some(r)),
            Ok(stream::Streamed::Interrupted) => Ok(None),
            Err(source) => Err(RuntimeError::Stream { object: object(), source }),
        }
    }

    /// `Exec` with the streams asked: the runtime's streaming server runs the command.
    fn exec_url(&self, id: &str, cmd: &[String], io: StreamIo) -> Result<Option<String>, RuntimeError> {
        let req = translate::exec_request(id, cmd, io);
        let url = self.client.exec(&req).map_err(Self::failed("container", id, self.container_object(id)))?;
        self.stream_url(url, self.container_object(id)).map(Some)
    }

    /// `Attach`: the runtime's streaming server serves the container's own streams (a
    /// container made with `stdin` or `tty` has them open).
    fn attach_url(&self, id: &str, io: StreamIo) -> Result<Option<String>, RuntimeError> {
        let req = translate::attach_request(id, io);
        let url = self.client.attach(&req).map_err(Self::failed("container", id, self.container_object(id)))?;
        self.stream_url(url, self.container_object(id)).map(Some)
    }

    /// `PortForward` on the pod's ready sandbox, found by its uid label among this node's.
    fn port_forward_url(&self, pod_uid: &str) -> Result<Option<String>, RuntimeError> {
        let mut filter = PodSandboxFilter::new();
        let mut selector = self.owner.clone();
        selector.insert(labels::POD_UID.into(), pod_uid.into());
        filter.set_label_selector(selector);
        let object = || format!("pod {pod_uid}");
        let listed =
            self.client.list_pod_sandbox(filter).map_err(|source| RuntimeError::Cri { object: object(), source })?;
        let sandbox = translate::ready_sandbox(&listed, pod_uid)
            .ok_or_else(|| RuntimeError::NotFound { kind: "ready sandbox of pod", id: pod_uid.into() })?;
        let id = sandbox.id();
        let req = translate::port_forward_request(id);
        let url = self.client.port_forward(&req).map_err(Self::failed(
            "sandbox",
            id,
            format!("sandbox {id} of pod {pod_uid}"),
        ))?;
        self.stream_url(url, format!("sandbox {id} of pod {pod_uid}")).map(Some)
    }

    fn list_images(&self) -> Result<Vec<ImageInfo>, RuntimeError> {
        let listed = self
            .client
            .list_images()
            .map_err(|source| RuntimeError::Cri { object: "listing images".into(), source })?;
        Ok(listed.iter().map(translate::image_info).collect())
    }

    fn image_status(&self, image: &str) -> Result<Option<ImageInfo>, RuntimeError> {
        let found = self
            .client
            .image_status(image)
            .map_err(|source| RuntimeError::Cri { object: format!("image {image}"), source })?;
        Ok(found.as_ref().map(translate::image_info))
    }

    /// `PullImage` with `timeout` as its deadline; cancelled, the call is cancelled too, and
    /// the runtime stops the pull (what it fetched stays in its content store for the next).
    fn pull_image(
        &self,
        image: &str,
        auth: Option<&PullAuth>,
        timeout: Duration,
        cancel: &mut Cancel,
    ) -> Result<String, RuntimeError> {
        let req = translate::pull_image_request(image, auth);
        let failed = |source: CriError| {
            let object = if source.is_deadline_exceeded() {
                format!("image {image}: no answer within the pull deadline of {timeout:?} (image_pull_timeout)")
            } else {
                format!("image {image}")
            };
            RuntimeError::Cri { object, source }
        };
        let mut call = self.client.start_pull_image(&req, timeout).map_err(failed)?;
        match cancel.run(&mut call) {
            None => {
                call.cancel();
                Err(RuntimeError::Cancelled { what: format!("pull of image {image}") })
            }
            Some(Ok(resp)) => Ok(resp.image_ref),
            Some(Err(e)) => Err(failed(self.client.pull_failed(e))),
        }
    }

    fn remove_image(&self, image: &str) -> Result<(), RuntimeError> {
        self.client.remove_image(image).map_err(Self::failed("image", image, format!("image {image}")))
    }

    /// Every container in the runtime, not only this node's: `ListContainers` without the
    /// owner filter; each one's resolved image (`image_ref`) and the image it asked for.
    fn images_in_use(&self) -> Result<Vec<String>, RuntimeError> {
        let listed = self
            .client
            .list_containers(ContainerFilter::new())
            .map_err(|source| RuntimeError::Cri { object: "listing every container".into(), source })?;
        Ok(listed
            .iter()
            .flat_map(|c| [c.image_ref().to_string(), c.image().image().to_string()])
            .filter(|i| !i.is_empty())
            .collect())
    }

    fn image_fs_info(&self) -> Result<Vec<ImageFsInfo>, RuntimeError> {
        let resp = self
            .client
            .image_fs_info()
            .map_err(|source| RuntimeError::Cri { object: "image filesystem".into(), source })?;
        Ok(translate::image_fs_info(&resp))
    }

    fn sandbox_image(&self) -> Option<&str> {
        Some(&self.pause_image)
    }

    /// `ExecSync` with `timeout`; the runtime's DEADLINE_EXCEEDED is a timed-out command,
    /// reported as the process runtime reports one it killed.
    fn exec_sync(&self, id: &str, cmd: &[String], timeout: Duration) -> Result<ExecResult, RuntimeError> {
        let req = translate::exec_sync_request(id, cmd, timeout);
        match self.client.exec_sync(&req) {
            Ok(resp) => Ok(translate::exec_result(resp)),
            Err(e) if e.is_deadline_exceeded() => Ok(translate::exec_timed_out()),
            // containerd keeps up to 16 MiB of each stream but sends no message over 16 MiB:
            // the whole answer, exit code included, is lost.
            Err(e) if e.is_too_large() => Err(RuntimeError::Unsupported {
                runtime: "cri",
                what: format!(
                    "returning more than 16 MiB of output through ExecSync ({} wrote more; its output and exit code are lost): \
                     redirect its output to a file in the container, or cut it (| head -c 1M)",
                    cmd.first().map_or("the command", String::as_str)
                ),
            }),
            Err(e) => Err(Self::failed("container", id, format!("exec in {}", self.container_object(id)))(e)),
        }
    }
}
