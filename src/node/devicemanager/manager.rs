//! The device manager (thread `fl-devices`): the only owner and writer of the device state.
//!
//! It admits pods that ask for plugin resources: it allocates their containers' devices
//! (init containers first, reusing what finished init containers held) and answers the pod
//! manager; before each such container starts it has PreStartContainer called where the
//! plugin wants it and hands over the merged options. Right after an agent restart a pod
//! whose plugin has not registered again waits for it (`devices.admission_wait`) instead of
//! failing at once as with kubelet.
//!
//! Its children report to it by message: the registration server (`Register`), one
//! `fl-plugin` thread per registration (`Endpoint` events) and the `fl-prestart` threads
//! (`PreStartDone`). It owns those threads, stops a replaced endpoint's, reaps the ones that
//! ended, and when it is dropped (its thread stopping) stops them all with one signal and
//! joins them within `stop_timeout`. After every change it publishes a new `DeviceView`
//! for the readers and, where allocations or devices changed, writes the checkpoint.

use super::allocate::{self, Need, Plugin};
use super::checkpoint::{self, CheckpointData};
use super::endpoint::{self, EndpointConfig, EndpointEvent};
use super::error::{DeviceError, MAX_PRESTART_THREADS};
use super::messages::{DeviceUpdate, DevicesCommand};
use super::prestart::{self, PreStartCall, PreStartDone};
use super::registration::{self, PluginRegistration};
use super::state::{Choice, DeviceState, Restored, StateError};
use super::view::Devices;
use crate::api::validation::is_extended_resource;
use crate::api::{Container, Pod};
use crate::base::errors::Chain;
use crate::base::manager::{Health, Publisher, WorkerId, WorkerSet, WorkerSetError};
use crate::base::timefmt::go_duration;
use crate::node::events::{EventRecorder, Reference, NORMAL};
use crate::node::runtime::devices::DeviceOptions;
use crossbeam_channel::Sender;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the children (endpoint and PreStartContainer threads) get to end when the
/// manager stops, unless `with_stop_timeout` says otherwise.
pub const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_secs(2);

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

struct WaitingPod {
    pod: Box<Pod>,
    deadline: Instant,
}

/// An endpoint thread and the resource it registered.
struct EndpointWorker {
    resource: String,
    thread: WorkerId,
}

/// The `fl-devices` manager.
pub struct DeviceManager {
    state: DeviceState,
    /// The readers' view; replaced after every change.
    devices: Devices,
    settings: DeviceSettings,
    pods: Publisher<DeviceUpdate>,
    recorder: EventRecorder,
    waiting: Vec<WaitingPod>,
    server: Option<grpcio::Server>,
    endpoint_config: EndpointConfig,
    /// This manager's own command channel, handed to its children.
    commands: Sender<DevicesCommand>,
    /// The last registration's id (a generation is unique for the agent's life).
    generation: u64,
    /// Endpoint threads by registration: dialling, connected, or stopping.
    endpoints: BTreeMap<u64, EndpointWorker>,
    /// The endpoint threads (bounded by the registration server's dial slots and one
    /// connected registration per resource, not by the set).
    endpoint_threads: WorkerSet,
    /// PreStartContainer threads (at most `MAX_PRESTART_THREADS` running).
    prestarts: WorkerSet,
    stop_timeout: Duration,
}

impl DeviceManager {
    /// Restores the checkpoint (a bad one is moved aside) and starts the registration
    /// server, whose registrations arrive on `commands` (this manager's own channel). A
    /// server that cannot start is logged and shown in `/devices`; pods asking for devices
    /// then fail admission after the wait. Child threads are registered with `health`.
    pub fn new(
        settings: DeviceSettings,
        recorder: EventRecorder,
        pods: Publisher<DeviceUpdate>,
        commands: Sender<DevicesCommand>,
        health: &Health,
    ) -> (DeviceManager, Devices) {
        let dir = settings.plugin_dir.clone();
        let mut state = DeviceState::new(settings.endpoint_grace_period, settings.max_devices_per_resource);
        match checkpoint::load(&dir) {
            Ok(Some(data)) => {
                log::info!(
                    "devices: restored {} allocations and {} resources from the checkpoint",
                    data.pod_device_entries.len(),
                    data.registered_devices.len()
                );
                state.restore(Restored::from(data), Instant::now());
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
        let devices = Devices::new(&dir, &state);
        let env = Arc::new(grpcio::EnvBuilder::new().cq_count(1).name_prefix("fl-dpgrpc").build());
        let server = match registration::serve(env.clone(), &devices, Publisher::to(commands.clone())) {
            Ok(s) => Some(s),
            Err(e) => {
                let e = Chain(&e).to_string();
                log::error!(
                    "devices: device plugin registration gRPC server failed and no device plugins can register: {e}"
                );
                devices.set_server_error(e);
                None
            }
        };
        let endpoint_config = EndpointConfig {
            env,
            dial_timeout: settings.dial_timeout,
            reconnect_attempts: settings.reconnect_attempts,
            grace_period: settings.endpoint_grace_period,
        };
        let dm = DeviceManager {
            state,
            devices: devices.clone(),
            settings,
            pods,
            recorder,
            waiting: Vec::new(),
            server,
            endpoint_config,
            commands,
            generation: 0,
            endpoints: BTreeMap::new(),
            endpoint_threads: WorkerSet::new("device manager", usize::MAX, health),
            prestarts: WorkerSet::new("device manager", MAX_PRESTART_THREADS, health),
            stop_timeout: DEFAULT_STOP_TIMEOUT,
        };
        (dm, devices)
    }

    /// How long the child threads get to end when the manager stops (keep it shorter than
    /// the manager thread's own stop timeout).
    pub fn with_stop_timeout(mut self, timeout: Duration) -> Self {
        self.stop_timeout = timeout;
        self
    }

    /// After a change: the checkpoint (when `save`), then the readers' view.
    fn changed(&mut self, save: bool) {
        if save {
            if let Err(e) = checkpoint::save(&self.settings.plugin_dir, &CheckpointData::from(&self.state)) {
                // The state in memory stays; the next change writes it again.
                log::error!("devices: {}", Chain(&e));
            }
        }
        self.devices.publish(&self.state);
    }

    /// Tries to admit a pod: `None` means wait (a resource it needs is not ready and
    /// `may_wait`), else the outcome.
    fn admit(&mut self, pod: &Pod, may_wait: bool) -> Option<Result<(), DeviceError>> {
        let uid = &pod.metadata.uid;
        let init = pod.spec.init_containers.iter().map(|c| (c, true));
        let all: Vec<(&Container, bool)> = init.chain(pod.spec.containers.iter().map(|c| (c, false))).collect();
        if may_wait {
            let st = &self.state;
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
                    if self.state.pods.remove(uid).is_some() {
                        self.changed(true);
                    }
                    return Some(Err(e));
                }
            }
            // Devices of a finished (non-sidecar) init container go to later containers;
            // sidecars and app containers keep theirs.
            for (resource, a) in self.state.pods.get(uid).and_then(|p| p.get(&c.name)).into_iter().flatten() {
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

    /// Allocates one container's devices of one resource: the bookkeeping chooses, the
    /// plugin is asked (on this thread, each call bounded by `allocate_timeout`), the
    /// result is recorded.
    fn allocate(
        &mut self,
        uid: &str,
        container: &str,
        resource: &str,
        required: usize,
        reusable: &BTreeSet<String>,
    ) -> Result<(), DeviceError> {
        let Choice::Need { reused, needed, available } =
            self.state.choose(uid, container, resource, required, reusable)?
        else {
            return Ok(());
        };
        let Some(ep) = self.state.resources.get(resource).and_then(|r| r.endpoint.as_ref()) else {
            return Err(StateError::AllocateUnregistered { resource: resource.into() }.into());
        };
        let plugin = Plugin {
            resource,
            client: &ep.client,
            preferred: ep.preferred_allocation,
            timeout: self.settings.allocate_timeout,
        };
        let need = Need { required, reused: &reused, needed, available: &available };
        let (chosen, options) = allocate::allocate(&plugin, &need, self.devices.metrics())?;
        log::info!("devices: pod {uid} container {container}: allocated {resource} {chosen:?}");
        self.state.record(uid, container, resource, &chosen, options);
        self.changed(true);
        Ok(())
    }

    fn reply_admission(&self, pod: &Pod, result: Result<(), DeviceError>) {
        self.pods.publish(DeviceUpdate::Admitted { pod_uid: pod.metadata.uid.clone(), result });
    }

    fn handle_admit(&mut self, pod: Box<Pod>) {
        self.waiting.retain(|w| w.pod.metadata.uid != pod.metadata.uid);
        match self.admit(&pod, true) {
            Some(result) => self.reply_admission(&pod, result),
            None => {
                let wait = self.settings.admission_wait;
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

    /// The merged options, after PreStartContainer for each plugin that wants it (on an
    /// `fl-prestart` thread, whose answer comes back as `PreStartDone`). A plugin that is
    /// not registered (right after an agent restart) is skipped: its devices exist. A
    /// container that cannot have a PreStart thread now fails to start and is retried
    /// under back-off, never left waiting for an answer.
    fn prepare(&mut self, pod_uid: String, container: String) {
        let Some(options) = self.state.container_options(&pod_uid, &container) else {
            let e = DeviceError::PrepareUnallocated { pod_uid: pod_uid.clone(), container: container.clone() };
            return self.reply_prepared(pod_uid, container, Err(e));
        };
        let mut calls = Vec::new();
        for (name, a) in self.state.pods.get(&pod_uid).and_then(|p| p.get(&container)).into_iter().flatten() {
            let ep = self.state.resources.get(name).and_then(|r| r.endpoint.as_ref());
            if let Some(e) = ep.filter(|e| e.pre_start_required) {
                calls.push(PreStartCall { resource: name.clone(), client: e.client.clone(), device_ids: a.ids() });
            }
        }
        if calls.is_empty() {
            return self.reply_prepared(pod_uid, container, Ok(options));
        }
        let done = Publisher::to(self.commands.clone());
        match prestart::spawn(&self.prestarts, (pod_uid.clone(), container.clone()), calls, options, done) {
            Ok(_) => {}
            Err(WorkerSetError::Full { .. }) => {
                self.reply_prepared(pod_uid, container, Err(DeviceError::TooManyPreStarts))
            }
            Err(e) => {
                let source = match e {
                    WorkerSetError::Spawn { source, .. } => source,
                    stopping => std::io::Error::other(stopping),
                };
                let e = DeviceError::SpawnPreStart(Arc::new(source));
                log::error!("devices: {}", Chain(&e));
                self.reply_prepared(pod_uid, container, Err(e));
            }
        }
    }

    fn reply_prepared(&self, pod_uid: String, container: String, result: Result<DeviceOptions, DeviceError>) {
        self.pods.publish(DeviceUpdate::Prepared { pod_uid, container, result });
    }

    /// A registration passed the server's checks: its endpoint thread dials the plugin.
    fn start_endpoint(&mut self, registration: PluginRegistration) {
        self.reap();
        self.generation += 1;
        let resource = registration.resource.clone();
        let events = Publisher::to(self.commands.clone());
        let cfg = self.endpoint_config.clone();
        match endpoint::spawn(&self.endpoint_threads, self.generation, registration, cfg, events) {
            Ok(thread) => {
                self.endpoints.insert(self.generation, EndpointWorker { resource, thread });
            }
            // The registration (its call and dial slot) went with the closure: the plugin
            // sees its call fail and registers again.
            Err(e) => log::error!("devices: cannot start an endpoint thread for {resource}: {}", Chain(&e)),
        }
    }

    /// An endpoint thread's news. Each carries its registration's generation: news of a
    /// replaced registration change nothing.
    fn on_endpoint(&mut self, event: EndpointEvent) {
        let now = Instant::now();
        match event {
            EndpointEvent::Registered { resource, generation, endpoint } => {
                // Connected(old) --replaced--> Stopping: its thread is told to end now and
                // is reaped once it has.
                if let Some(old) = self.state.register(&resource, generation, endpoint) {
                    self.stop_stale_endpoint(old);
                }
                self.changed(false);
            }
            EndpointEvent::DevicesChanged { resource, generation, devices } => {
                match self.state.update(&resource, generation, &devices) {
                    Ok(true) => {
                        let r = &self.state.resources[&resource];
                        log::info!("devices: {resource}: {} healthy, {} unhealthy", r.healthy.len(), r.unhealthy.len());
                        self.changed(true);
                        if !self.waiting.is_empty() {
                            self.retry_waiting();
                        }
                    }
                    Ok(false) => self.stop_stale_endpoint(generation),
                    Err(e) => log::warn!(
                        "devices: refusing a ListAndWatch update from the plugin for {resource}: {}",
                        Chain(&e)
                    ),
                }
            }
            EndpointEvent::StreamEnded { resource, generation, reason } => {
                if self.state.stream_ended(&resource, generation, now) {
                    log::debug!("devices: {resource} is reconnecting after: {reason}");
                    self.changed(true);
                } else {
                    self.stop_stale_endpoint(generation);
                }
            }
            EndpointEvent::Reconnected { resource, generation, pre_start_required, preferred_allocation } => {
                if self.state.reconnected(&resource, generation, pre_start_required, preferred_allocation) {
                    self.changed(false);
                } else {
                    self.stop_stale_endpoint(generation);
                }
            }
            EndpointEvent::EndpointEnded { resource, generation } => {
                if self.state.endpoint_ended(&resource, generation, now) {
                    self.changed(true);
                }
            }
        }
    }

    /// News from a registration that is no longer its resource's (replaced, or the
    /// resource expired while it was reconnecting): its thread has nothing left to do.
    fn stop_stale_endpoint(&mut self, generation: u64) {
        if let Some(w) = self.endpoints.get(&generation) {
            self.endpoint_threads.signal_stop_one(w.thread);
        }
    }

    /// Forgets the registrations whose endpoint threads have ended (and are reaped).
    fn reap(&mut self) {
        let threads = &self.endpoint_threads;
        self.endpoints.retain(|g, w| {
            let running = threads.is_running(w.thread);
            if !running {
                log::debug!("devices: the endpoint thread of {} (registration {g}) ended", w.resource);
            }
            running
        });
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

impl crate::base::manager::Manager for DeviceManager {
    type Command = DevicesCommand;

    fn handle(&mut self, cmd: DevicesCommand) {
        match cmd {
            DevicesCommand::Admit(pod) => self.handle_admit(pod),
            DevicesCommand::Prepare { pod_uid, container } => self.prepare(pod_uid, container),
            DevicesCommand::ActivePods(active) => {
                self.waiting.retain(|w| active.contains(&w.pod.metadata.uid));
                if self.state.retain_pods(&active) {
                    self.changed(true);
                }
            }
            DevicesCommand::Register(registration) => self.start_endpoint(registration),
            DevicesCommand::Endpoint(event) => self.on_endpoint(event),
            DevicesCommand::PreStartDone(PreStartDone { pod_uid, container, result }) => {
                self.reply_prepared(pod_uid, container, result);
                self.reap();
            }
        }
    }

    fn on_tick(&mut self) {
        if !self.state.expire(Instant::now()).is_empty() {
            self.changed(true);
        }
        self.reap();
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
    /// Stops the registration server, then every child thread at once (endpoints' streams
    /// and PreStartContainer calls are cancelled) and joins them within `stop_timeout`.
    fn drop(&mut self) {
        if let Some(mut s) = self.server.take() {
            // A registration still dialling its plugin must not hold up the shutdown.
            let done = s.shutdown();
            s.cancel_all_calls();
            let _ = futures::executor::block_on(done);
        }
        // Every child is told at once (streams and calls cancelled); one deadline for all.
        self.endpoint_threads.signal_stop();
        self.prestarts.signal_stop();
        let deadline = Instant::now() + self.stop_timeout;
        let late = self.endpoint_threads.stop(self.stop_timeout);
        let late = late.into_iter().chain(self.prestarts.stop(deadline.saturating_duration_since(Instant::now())));
        for late in late {
            log::warn!("devices: {late}");
        }
    }
}

#[cfg(test)]
mod tests;
