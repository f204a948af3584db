//! The device manager: the Kubernetes device-plugin API v1beta1 over grpcio.
//!
//! - `registration`: the Registration service on `<plugin dir>/kubelet.sock`.
//! - `endpoint`: one thread per plugin following its ListAndWatch stream.
//! - `state`: devices per resource, allocations per container; capacity.
//! - `checkpoint`: allocations on disk, restored after an agent restart.
//!
//! This module's manager (thread `fl-devices`) admits pods that ask for plugin resources:
//! it allocates their containers' devices (init containers first, reusing what finished
//! init containers held) and answers the pod manager; before each such container starts it
//! calls PreStartContainer where the plugin wants it and hands over the merged options.
//! Right after an agent restart a pod whose plugin has not registered again waits for it
//! (`devices.admission_wait`) instead of failing at once as with kubelet.

pub mod checkpoint;
mod endpoint;
pub mod registration;
pub mod state;

use crate::api::validation::is_extended_resource;
use crate::api::{Container, Pod};
use crate::events::{EventRecorder, Reference, NORMAL};
use crate::manager::Publisher;
use crate::metrics::{CounterVec, Encoder, HistogramVec};
use crate::proto::deviceplugin as pb;
use crate::timefmt::go_duration;
use crate::util::Chain;
use crossbeam_channel::Sender;
use parking_lot::Mutex;
use state::{Choice, DeviceState, StateError};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// kubelet's `KubeletPreStartContainerRPCTimeoutInSecs`.
pub const PRE_START_TIMEOUT: Duration = Duration::from_secs(30);
/// Most PreStartContainer calls (each on its own thread) in progress at once.
pub const MAX_PRESTART_THREADS: usize = 16;

/// Why a container's devices could not be allocated or prepared. The messages are
/// kubelet's; the pod manager shows them in `Allocate failed due to …` events.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The bookkeeping refused the allocation (unregistered, unhealthy, too few devices).
    #[error(transparent)]
    Choose(#[from] StateError),
    /// The plugin's GetPreferredAllocation failed.
    #[error("device plugin GetPreferredAllocation rpc failed with err")]
    GetPreferredAllocation(#[source] grpcio::Error),
    /// The plugin's Allocate failed.
    #[error("device plugin Allocate rpc failed for {resource}")]
    Allocate {
        /// Resource name.
        resource: String,
        /// The cause.
        #[source]
        source: grpcio::Error,
    },
    /// The plugin's Allocate answered without a container response.
    #[error("no containers return in allocation response from the plugin for {resource}")]
    AllocateEmptyResponse {
        /// Resource name.
        resource: String,
    },
    /// A container to prepare holds no devices.
    #[error("no devices are allocated to this container (was the checkpoint lost?)")]
    PrepareUnallocated,
    /// Every PreStartContainer slot is in use.
    #[error("too many PreStartContainer calls in progress (at most {MAX_PRESTART_THREADS})")]
    TooManyPreStarts,
    /// A PreStartContainer thread could not be started.
    #[error("cannot start a PreStartContainer thread")]
    SpawnPreStart(#[source] std::io::Error),
    /// The plugin's PreStartContainer failed.
    #[error("device plugin PreStartContainer rpc failed with err")]
    PreStartContainer(#[source] grpcio::Error),
}

/// The `[devices]` settings.
#[derive(Clone, Debug)]
pub struct DeviceSettings {
    /// Where kubelet.sock, the plugins' sockets and the checkpoint live.
    pub plugin_dir: PathBuf,
    /// Dialling a plugin, and GetDevicePluginOptions.
    pub dial_timeout: Duration,
    /// Allocate and GetPreferredAllocation.
    pub allocate_timeout: Duration,
    /// How long a resource whose plugin stopped stays in capacity.
    pub endpoint_grace_period: Duration,
    /// How long a pod waits for its plugin to register before admission fails.
    pub admission_wait: Duration,
    /// Reconnect attempts after a broken ListAndWatch stream.
    pub reconnect_attempts: u32,
    /// Most devices one resource may list.
    pub max_devices_per_resource: usize,
}

/// The device-plugin resources a container asks for: its limits on extended resources
/// (validation makes requests equal limits).
pub fn device_requests(c: &Container) -> Vec<(String, usize)> {
    c.resources
        .limits
        .iter()
        .filter(|(name, q)| is_extended_resource(name) && q.value() > 0)
        .map(|(name, q)| (name.clone(), q.value() as usize))
        .collect()
}

/// Whether any container of the pod needs plugin devices.
pub fn pod_needs_devices(pod: &Pod) -> bool {
    pod.spec.init_containers.iter().chain(&pod.spec.containers).any(|c| !device_requests(c).is_empty())
}

/// `kubelet_device_plugin_*` metrics.
pub struct DeviceMetrics {
    registrations: CounterVec<String>,
    alloc: HistogramVec<String>,
}

impl Default for DeviceMetrics {
    fn default() -> Self {
        DeviceMetrics {
            registrations: CounterVec::new(
                "kubelet_device_plugin_registration_total",
                "Cumulative number of device plugin registrations.",
                &["resource_name"],
            ),
            alloc: HistogramVec::new(
                "kubelet_device_plugin_alloc_duration_seconds",
                "Duration in seconds to serve a device plugin Allocation request.",
                &["resource_name"],
            ),
        }
    }
}

impl DeviceMetrics {
    /// Counts a registration of a valid resource name. The names come from any client of
    /// the registration socket, so at most `registration::MAX_RESOURCES` of them get a
    /// series; registrations of further new names are not counted.
    fn registered(&self, resource: &str) {
        self.registrations.update_bounded(resource.to_string(), registration::MAX_RESOURCES, |n| *n += 1);
    }

    fn allocated(&self, resource: &str, d: Duration) {
        self.alloc.observe(resource.to_string(), d);
    }

    /// Appends the metrics in Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let mut enc = Encoder::new(out);
        self.registrations.encode(&mut enc);
        self.alloc.encode(&mut enc);
    }
}

/// What the registration server, the endpoint threads, the manager thread and the local API
/// share.
#[derive(Clone)]
pub struct Devices {
    inner: Arc<Shared>,
}

/// The shared parts (reached through `Devices`' `Deref`).
pub struct Shared {
    /// Devices and allocations.
    pub state: Mutex<DeviceState>,
    /// The plugin directory.
    pub dir: PathBuf,
    /// Settings.
    pub settings: DeviceSettings,
    /// Metrics.
    pub metrics: DeviceMetrics,
    /// One grpcio environment for the server and every plugin client.
    env: Arc<grpcio::Environment>,
    /// Wakes the manager thread when a resource changed.
    notify: Sender<DevicesCommand>,
    /// Why the registration server is not running, if it is not.
    pub server_error: Mutex<Option<String>>,
    /// Registrations being dialled now (at most `registration::MAX_CONCURRENT_DIALS`).
    dialling: std::sync::atomic::AtomicUsize,
}

impl std::ops::Deref for Devices {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.inner
    }
}

impl Devices {
    /// Writes the checkpoint of `st` (called with the state lock held, so writes are in
    /// order); a failure is logged, the state in memory stays.
    pub fn save_checkpoint(&self, st: &DeviceState) {
        if let Err(e) = checkpoint::save(&self.dir, &st.checkpoint()) {
            log::error!("devices: cannot write the checkpoint in {}: {e}", self.dir.display());
        }
    }

    fn changed(&self) {
        let _ = self.notify.send(DevicesCommand::Changed);
    }

    /// The local API's view: resources and allocations.
    pub fn view(&self) -> serde_json::Value {
        let st = self.state.lock();
        let allocations = st.checkpoint().pod_device_entries;
        serde_json::json!({
            "pluginDir": self.dir,
            "registrationServer": match &*self.server_error.lock() {
                None => "serving".to_string(),
                Some(e) => format!("not running: {e}"),
            },
            "resources": st.view(),
            "allocations": allocations,
        })
    }

    /// (resource, [(device, healthy)]) per resource a container holds, for its status.
    pub fn container_devices(&self, uid: &str, container: &str) -> Vec<(String, Vec<(String, bool)>)> {
        let st = self.state.lock();
        let Some(resources) = st.pods.get(uid).and_then(|c| c.get(container)) else {
            return Vec::new();
        };
        resources
            .iter()
            .map(|(name, a)| {
                let healthy = st.resources.get(name).map(|r| &r.healthy);
                let ids =
                    a.ids().into_iter().map(|id| (id.clone(), healthy.is_some_and(|h| h.contains(&id)))).collect();
                (name.clone(), ids)
            })
            .collect()
    }
}

/// Commands to the device manager.
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
    /// A plugin registered, listed devices or went away.
    Changed,
}

struct WaitingPod {
    pod: Box<Pod>,
    deadline: Instant,
}

/// What the device manager publishes to the pod manager.
#[derive(Clone, Debug)]
pub enum DeviceUpdate {
    /// A pod was admitted (its devices are allocated) or refused, and why.
    Admitted {
        /// Pod uid.
        pod_uid: String,
        /// Why the pod cannot have its devices.
        result: Result<(), String>,
    },
    /// A container's devices are prepared (PreStartContainer done), or why not.
    Prepared {
        /// Pod uid.
        pod_uid: String,
        /// Container name.
        container: String,
        /// The merged device options, or why the container cannot start.
        result: Result<crate::runtime::devices::DeviceOptions, String>,
    },
}

/// The `fl-devices` manager.
pub struct DeviceManager {
    devices: Devices,
    pods: Publisher<DeviceUpdate>,
    recorder: EventRecorder,
    waiting: Vec<WaitingPod>,
    server: Option<grpcio::Server>,
    /// PreStartContainer threads running now (at most `MAX_PRESTART_THREADS`).
    prestarts: Arc<AtomicUsize>,
}

impl DeviceManager {
    /// Restores the checkpoint (a bad one is moved aside) and starts the registration
    /// server. A server that cannot start is logged and shown in `/devices`; pods asking
    /// for devices then fail admission after the wait.
    pub fn new(
        settings: DeviceSettings,
        recorder: EventRecorder,
        pods: Publisher<DeviceUpdate>,
        notify: Sender<DevicesCommand>,
    ) -> (DeviceManager, Devices) {
        let dir = settings.plugin_dir.clone();
        let mut st = DeviceState::new(settings.endpoint_grace_period, settings.max_devices_per_resource);
        match checkpoint::load(&dir) {
            Ok(Some(data)) => {
                log::info!(
                    "devices: restored {} allocations and {} resources from the checkpoint",
                    data.pod_device_entries.len(),
                    data.registered_devices.len()
                );
                st.restore(data, Instant::now());
            }
            Ok(None) => {}
            Err(e) => {
                let aside = checkpoint::quarantine(&dir);
                log::error!(
                    "devices: continuing without the checkpoint: {}; moved to {}",
                    Chain(&e),
                    aside.map_or("(could not move it)".into(), |p| p.display().to_string())
                );
            }
        }
        let env = Arc::new(grpcio::EnvBuilder::new().cq_count(1).name_prefix("fl-dpgrpc").build());
        let devices = Devices {
            inner: Arc::new(Shared {
                state: Mutex::new(st),
                dir,
                settings,
                metrics: DeviceMetrics::default(),
                env,
                notify,
                server_error: Mutex::new(None),
                dialling: Default::default(),
            }),
        };
        let server = match registration::serve(&devices) {
            Ok(s) => Some(s),
            Err(e) => {
                let e = Chain(&e).to_string();
                log::error!(
                    "devices: device plugin registration gRPC server failed and no device plugins can register: {e}"
                );
                *devices.server_error.lock() = Some(e);
                None
            }
        };
        let dm = DeviceManager {
            devices: devices.clone(),
            pods,
            recorder,
            waiting: Vec::new(),
            server,
            prestarts: Arc::new(AtomicUsize::new(0)),
        };
        (dm, devices)
    }

    /// Tries to admit a pod: `None` means wait (a resource it needs is not ready and
    /// `may_wait`), else the outcome.
    fn admit(&self, pod: &Pod, may_wait: bool) -> Option<Result<(), DeviceError>> {
        let uid = &pod.metadata.uid;
        let init = pod.spec.init_containers.iter().map(|c| (c, true));
        let all: Vec<(&Container, bool)> = init.chain(pod.spec.containers.iter().map(|c| (c, false))).collect();
        if may_wait {
            let st = self.devices.state.lock();
            let held = |c: &Container, r: &str| {
                st.pods.get(uid).and_then(|p| p.get(&c.name)).is_some_and(|m| m.contains_key(r))
            };
            let not_ready = all
                .iter()
                .flat_map(|(c, _)| device_requests(c).into_iter().map(move |(r, _)| (*c, r)))
                .find(|(c, r)| !held(c, r) && !st.resources.get(r).is_some_and(|x| x.ready()));
            if not_ready.is_some() {
                return None;
            }
        }
        let mut reuse: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (c, init) in all {
            for (resource, n) in device_requests(c) {
                let reusable = reuse.get(&resource).cloned().unwrap_or_default();
                if let Err(e) = self.allocate(uid, &c.name, &resource, n, &reusable) {
                    let mut st = self.devices.state.lock();
                    if st.pods.remove(uid).is_some() {
                        self.devices.save_checkpoint(&st);
                    }
                    return Some(Err(e));
                }
            }
            // Devices of a finished (non-sidecar) init container go to later containers;
            // sidecars and app containers keep theirs.
            let st = self.devices.state.lock();
            for (resource, a) in st.pods.get(uid).and_then(|p| p.get(&c.name)).into_iter().flatten() {
                let set = reuse.entry(resource.clone()).or_default();
                if init && !c.is_sidecar() {
                    set.extend(a.ids());
                } else {
                    a.ids().iter().for_each(|id| {
                        set.remove(id);
                    });
                }
            }
        }
        Some(Ok(()))
    }

    /// Allocates one container's devices of one resource (kubelet's
    /// `allocateContainerResources` for one resource).
    fn allocate(
        &self,
        uid: &str,
        container: &str,
        resource: &str,
        required: usize,
        reusable: &BTreeSet<String>,
    ) -> Result<(), DeviceError> {
        let (choice, client, preferred) = {
            let st = self.devices.state.lock();
            let choice = st.choose(uid, container, resource, required, reusable)?;
            let ep = st.resources.get(resource).and_then(|r| r.endpoint.as_ref());
            (choice, ep.map(|e| e.client.clone()), ep.is_some_and(|e| e.preferred_allocation))
        };
        let Choice::Need { reused, needed, available } = choice else {
            return Ok(());
        };
        let Some(client) = client else {
            return Err(StateError::AllocateUnregistered { resource: resource.into() }.into());
        };
        let opt = || grpcio::CallOption::default().timeout(self.devices.settings.allocate_timeout);
        let mut chosen = reused.clone();
        if preferred && needed > 0 {
            let mut req = pb::ContainerPreferredAllocationRequest::new();
            let mut offered: BTreeSet<String> = available.iter().cloned().collect();
            offered.extend(reused.iter().cloned());
            req.set_available_deviceIDs(offered.into_iter().collect());
            req.set_must_include_deviceIDs(reused.clone().into());
            req.set_allocation_size(required as i32);
            let mut preq = pb::PreferredAllocationRequest::new();
            preq.mut_container_requests().push(req);
            let resp =
                client.get_preferred_allocation_opt(&preq, opt()).map_err(DeviceError::GetPreferredAllocation)?;
            for id in resp.get_container_responses().iter().flat_map(|r| r.get_deviceIDs()) {
                if chosen.len() < required && available.contains(id) && !chosen.contains(id) {
                    chosen.push(id.clone());
                }
            }
        }
        for id in &available {
            if chosen.len() >= required {
                break;
            }
            if !chosen.contains(id) {
                chosen.push(id.clone());
            }
        }
        let mut creq = pb::ContainerAllocateRequest::new();
        creq.set_devices_ids(chosen.clone().into());
        let mut req = pb::AllocateRequest::new();
        req.mut_container_requests().push(creq);
        let started = Instant::now();
        let resp = client.allocate_opt(&req, opt());
        self.devices.metrics.allocated(resource, started.elapsed());
        let resp = resp.map_err(|source| DeviceError::Allocate { resource: resource.into(), source })?;
        let Some(first) = resp.get_container_responses().first() else {
            return Err(DeviceError::AllocateEmptyResponse { resource: resource.into() });
        };
        log::info!("devices: pod {uid} container {container}: allocated {resource} {chosen:?}");
        let mut st = self.devices.state.lock();
        st.record(uid, container, resource, &chosen, first.into());
        self.devices.save_checkpoint(&st);
        Ok(())
    }

    fn reply_admission(&self, pod: &Pod, result: Result<(), DeviceError>) {
        // The pod manager's message types still carry text; the error's chain goes whole.
        let result = result.map_err(|e| Chain(&e).to_string());
        self.pods.publish(DeviceUpdate::Admitted { pod_uid: pod.metadata.uid.clone(), result });
    }

    fn handle_admit(&mut self, pod: Box<Pod>) {
        self.waiting.retain(|w| w.pod.metadata.uid != pod.metadata.uid);
        match self.admit(&pod, true) {
            Some(result) => self.reply_admission(&pod, result),
            None => {
                let wait = self.devices.settings.admission_wait;
                log::info!("devices: pod {} waits up to {wait:?} for its device plugins", pod.key());
                self.recorder.event(
                    &Reference::pod(&pod),
                    NORMAL,
                    "WaitingForDevicePlugin",
                    &format!(
                        "Waiting up to {} for the device plugins of {} to register",
                        go_duration(wait),
                        pod_resources(&pod).join(", ")
                    ),
                );
                self.waiting.push(WaitingPod { pod, deadline: Instant::now() + wait });
            }
        }
    }

    /// Retries waiting pods; those past their deadline get a final answer.
    fn retry_waiting(&mut self) {
        let now = Instant::now();
        for w in std::mem::take(&mut self.waiting) {
            match self.admit(&w.pod, now < w.deadline) {
                Some(result) => self.reply_admission(&w.pod, result),
                None => self.waiting.push(w),
            }
        }
    }

    /// PreStartContainer for each plugin that wants it, then the merged options. A plugin
    /// that is not registered (right after an agent restart) is skipped: its devices exist.
    fn prepare(&self, uid: String, container: String) {
        let (options, calls) = {
            let st = self.devices.state.lock();
            let mut calls = Vec::new();
            for (name, a) in st.pods.get(&uid).and_then(|p| p.get(&container)).into_iter().flatten() {
                if let Some(e) = st.resources.get(name).and_then(|r| r.endpoint.as_ref()) {
                    if e.pre_start_required {
                        calls.push((e.client.clone(), a.ids()));
                    }
                }
            }
            (st.container_options(&uid, &container), calls)
        };
        let pods = self.pods.clone();
        let reply = move |uid: String, container: String, result: Result<_, DeviceError>| {
            let result = result.map_err(|e| Chain(&e).to_string());
            pods.publish(DeviceUpdate::Prepared { pod_uid: uid, container, result });
        };
        let Some(options) = options else {
            return reply(uid, container, Err(DeviceError::PrepareUnallocated));
        };
        if calls.is_empty() {
            return reply(uid, container, Ok(options));
        }
        // Up to 30 s per call: on a thread of its own, so admissions go on meanwhile; at most
        // MAX_PRESTART_THREADS at once. A container that cannot have one now fails to start
        // and is retried under back-off, never left waiting for an answer.
        if self.prestarts.fetch_add(1, Ordering::AcqRel) >= MAX_PRESTART_THREADS {
            self.prestarts.fetch_sub(1, Ordering::AcqRel);
            return reply(uid, container, Err(DeviceError::TooManyPreStarts));
        }
        let (in_flight, reply_in_thread) = (self.prestarts.clone(), reply.clone());
        let (uid_in_thread, container_in_thread) = (uid.clone(), container.clone());
        let spawned = std::thread::Builder::new().name("fl-prestart".into()).spawn(move || {
            let result = calls.into_iter().try_for_each(|(client, ids)| {
                let mut req = pb::PreStartContainerRequest::new();
                req.set_devices_ids(ids.into_iter().collect::<Vec<_>>().into());
                let opt = grpcio::CallOption::default().timeout(PRE_START_TIMEOUT);
                client.pre_start_container_opt(&req, opt).map(|_| ()).map_err(DeviceError::PreStartContainer)
            });
            in_flight.fetch_sub(1, Ordering::AcqRel);
            reply_in_thread(uid_in_thread, container_in_thread, result.map(|()| options));
        });
        if let Err(e) = spawned {
            self.prestarts.fetch_sub(1, Ordering::AcqRel);
            let e = DeviceError::SpawnPreStart(e);
            log::error!("devices: {}", Chain(&e));
            reply(uid, container, Err(e));
        }
    }
}

/// The plugin resources a pod asks for, for messages.
fn pod_resources(pod: &Pod) -> Vec<String> {
    let set: BTreeSet<String> = pod
        .spec
        .init_containers
        .iter()
        .chain(&pod.spec.containers)
        .flat_map(|c| device_requests(c).into_iter().map(|(r, _)| r))
        .collect();
    set.into_iter().collect()
}

impl crate::manager::Manager for DeviceManager {
    type Command = DevicesCommand;

    fn handle(&mut self, cmd: DevicesCommand) {
        match cmd {
            DevicesCommand::Admit(pod) => self.handle_admit(pod),
            DevicesCommand::Prepare { pod_uid, container } => self.prepare(pod_uid, container),
            DevicesCommand::ActivePods(active) => {
                self.waiting.retain(|w| active.contains(&w.pod.metadata.uid));
                let mut st = self.devices.state.lock();
                if st.retain_pods(&active) {
                    self.devices.save_checkpoint(&st);
                }
            }
            DevicesCommand::Changed => {
                if !self.waiting.is_empty() {
                    self.retry_waiting();
                }
            }
        }
    }

    fn on_tick(&mut self) {
        let mut st = self.devices.state.lock();
        if !st.expire(Instant::now()).is_empty() {
            self.devices.save_checkpoint(&st);
        }
    }

    fn tick_interval(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.waiting.iter().map(|w| w.deadline).min()
    }

    fn on_deadline(&mut self) {
        self.retry_waiting();
    }
}

impl Drop for DeviceManager {
    /// Stops the registration server and every endpoint thread (their streams are
    /// cancelled when the endpoints are dropped).
    fn drop(&mut self) {
        if let Some(mut s) = self.server.take() {
            // A registration still dialling its plugin must not hold up the shutdown.
            let done = s.shutdown();
            s.cancel_all_calls();
            let _ = futures::executor::block_on(done);
        }
        let mut st = self.devices.state.lock();
        for r in st.resources.values_mut() {
            r.endpoint = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_counts_keep_a_bounded_set_of_resource_names() {
        let m = DeviceMetrics::default();
        for i in 0..registration::MAX_RESOURCES + 100 {
            m.registered(&format!("example.com/r{i}"));
        }
        m.registered("example.com/r0");
        let mut out = String::new();
        m.render(&mut out);
        let series = out.lines().filter(|l| l.starts_with("kubelet_device_plugin_registration_total{")).count();
        assert_eq!(series, registration::MAX_RESOURCES);
        assert!(out.contains("kubelet_device_plugin_registration_total{resource_name=\"example.com/r0\"} 2"), "{out}");
    }

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
        let e = DeviceError::SpawnPreStart(std::io::Error::from_raw_os_error(libc::EAGAIN));
        assert!(Chain(&e).to_string().starts_with("cannot start a PreStartContainer thread: Resource temporarily"));
        assert_eq!(
            DeviceError::TooManyPreStarts.to_string(),
            format!("too many PreStartContainer calls in progress (at most {MAX_PRESTART_THREADS})")
        );
    }
}
