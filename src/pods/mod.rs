//! The pod manager: the sync loop. One thread owns every pod's lifecycle: it relists the
//! runtime (generic-PLEG style), starts init containers one at a time, then the app
//! containers, restarts them under the restart policy with back-off, and terminates removed
//! or replaced pods gracefully (app containers first, sidecars after). It never blocks for a
//! grace period: stop requests return at once and the shim enforces the deadline.
//!
//! It decides, then acts, as kubelet's `computePodActions` and `SyncPod`:
//! `actions` decides what a running pod needs (pure) and `sync` applies it;
//! `termination` decides and applies a pod's graceful stop; `admission` keeps the set of
//! pods (desired, retired, adopted); `publish` writes statuses and probe targets; `devices`
//! is the one place that speaks to the device manager; `images` makes sure a container's
//! image is there before it is created (pulls run on the pull threads, never here); `fit`
//! decides whether a pod from the apiserver fits in the node's allocatable (pure).

pub mod actions;
mod admission;
pub mod backoff;
mod devices;
mod dns;
pub mod fit;
mod hooks;
mod images;
pub mod messages;
mod publish;
mod state;
mod sync;
pub mod termination;
#[cfg(test)]
mod tests;
pub mod view;

pub use state::{
    Admission, ContainerKind, ContainerStartError, DevicePrep, PodEntry, PodFailure, RunningHook, Termination, Waiting,
    WaitingReason, SYSCTL_FORBIDDEN, UNEXPECTED_ADMISSION_ERROR,
};

use crate::api::Pod;
use crate::clock::{Clock, RealClock};
use crate::cm::ContainerManager;
use crate::devicemanager::{DeviceUpdate, Devices, DevicesCommand};
use crate::events::{EventRecorder, Reference, NORMAL, WARNING};
use crate::images::{PullDone, PullRequest};
use crate::lifecycle::{HookDone, HookSink};
use crate::prober::{ProbeResult, ProbeResults, ProbeTarget, ProbeType, ProbeUpdate, ProberCommand};
use crate::runtime::{ContainerInfo, ContainerRuntime};
use crate::status::StatusCache;
use crate::util::Chain;
use backoff::Backoff;
use crossbeam_channel::Sender;
use devices::DeviceLink;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use view::Snapshot;

/// Label telling init, sidecar and app containers apart (needed to stop orphans in order);
/// its values are `ContainerKind::as_str`.
pub const CONTAINER_KIND_LABEL: &str = "ferrolet.io/container-kind";
/// Label holding a container's index in its list of the pod spec (`containers`, or
/// `initContainers` for init and sidecar containers), so tools that see only the runtime
/// (`ferrolet logs`, `ferrolet exec`) list and default containers in spec order.
pub const CONTAINER_INDEX_LABEL: &str = "ferrolet.io/container-index";
/// kubelet's `minimumGracePeriodInSeconds`.
pub const MIN_GRACE: Duration = Duration::from_secs(2);

/// Commands to the pod manager.
#[derive(Debug)]
pub enum PodsCommand {
    /// A probe result changed (from the prober).
    Probe(ProbeUpdate),
    /// The device manager admitted a pod or prepared a container's devices.
    Devices(DeviceUpdate),
    /// A pull thread answered.
    Images(PullDone),
    /// A lifecycle hook answered.
    Hook(HookDone),
    /// The complete set of pods a source wants on this node.
    Update {
        /// Source name, e.g. `file`.
        source: String,
        /// The pods (static pods already named and uid'd), shared with the source: one
        /// copy of each spec, whoever holds it.
        pods: Vec<Arc<Pod>>,
    },
}

impl From<ProbeUpdate> for PodsCommand {
    fn from(u: ProbeUpdate) -> Self {
        PodsCommand::Probe(u)
    }
}

impl From<PullDone> for PodsCommand {
    fn from(d: PullDone) -> Self {
        PodsCommand::Images(d)
    }
}

impl From<HookDone> for PodsCommand {
    fn from(d: HookDone) -> Self {
        PodsCommand::Hook(d)
    }
}

impl From<DeviceUpdate> for PodsCommand {
    fn from(u: DeviceUpdate) -> Self {
        PodsCommand::Devices(u)
    }
}

/// Settings the pod manager needs.
#[derive(Clone, Debug)]
pub struct PodManagerConfig {
    /// This node's name (events about the node, such as damaged runtime records).
    pub node_name: String,
    /// Address reported as hostIP/podIP.
    pub node_ip: String,
    /// Root of the per-pod log directories.
    pub log_root: PathBuf,
    /// Root of the pods' own directories (`<state_dir>/pods`: volumes, termination message
    /// files, hosts files; `poddir::PodDir`).
    pub pods_root: PathBuf,
    /// Exited instances kept per container.
    pub max_dead_per_container: u32,
    /// Relist period.
    pub sync_frequency: Duration,
    /// Sysctls beyond kubelet's safe set a pod may set (names, or prefixes ending in `*`).
    pub allowed_unsafe_sysctls: Vec<String>,
    /// Pods' hostnames, resolvers and hosts files (a runtime that gives pods their own:
    /// CRI); `None`: every pod shares the node's (the process runtime).
    pub dns: Option<crate::dns::DnsSettings>,
    /// What the node allocates to pods (device plugin resources aside, which come from the
    /// device manager): pods from the apiserver are admitted only if they fit in it.
    pub allocatable: fit::NodeAllocatable,
}

/// The sync loop's state; `handle` and `on_tick` hold all the logic.
pub struct PodManager {
    cfg: PodManagerConfig,
    runtime: Arc<dyn ContainerRuntime>,
    statuses: StatusCache,
    recorder: EventRecorder,
    /// Where the time comes from (a fake in tests).
    clock: Arc<dyn Clock>,
    /// Pod cgroups; `None` when resource enforcement is off.
    cm: Option<ContainerManager>,
    /// Pods whose cgroup this agent run has ensured.
    cgroups_ready: HashSet<String>,
    /// Pods whose volumes this agent run has made ready.
    volumes_ready: HashSet<String>,
    /// Pod directories left by pods that no longer exist were removed (once per run).
    dirs_swept: bool,
    /// The prober's command channel, and the results it writes.
    prober: Option<Sender<ProberCommand>>,
    probe_results: ProbeResults,
    last_targets: Vec<ProbeTarget>,
    /// The device manager, when connected.
    devices: Option<DeviceLink>,
    /// Containers whose devices are being prepared, or are ready to start.
    device_prep: HashMap<backoff::Key, DevicePrep>,
    /// The pod uids last told to the device manager.
    devices_active: HashSet<String>,
    /// Probe results changed since the last sync.
    resync: bool,
    /// Pods were removed: return freed heap to the OS at the next tick, once the other
    /// threads (prober, status readers) have dropped their copies too.
    trim_heap: bool,
    /// The pods the sources want, by uid.
    desired: BTreeMap<String, Arc<Pod>>,
    /// The desired pods changed since owned pods were last checked against them (`retire`).
    desired_changed: bool,
    /// Sources that have reported at least once.
    sources_seen: HashSet<String>,
    /// Pods the apiserver is deleting whose termination is done: not taken on again while
    /// their source still lists them (until the apiserver has them deleted).
    deleted: HashSet<String>,
    /// The sources that must report before pods no source wants are told apart (`file`,
    /// and `api` in cluster mode).
    sources: Vec<String>,
    /// The pods this manager owns (desired, or being terminated), by uid.
    pods: BTreeMap<String, PodEntry>,
    backoff: Backoff,
    waiting: HashMap<backoff::Key, Waiting>,
    /// Images and their pulls; `None` with a runtime without images (the process runtime).
    images: Option<images::Images>,
    /// Where lifecycle hooks run; `None`: hooks are not run (unit tests that do not ask).
    hooks: Option<Arc<dyn HookSink>>,
    /// `postStart` hooks running, by container id.
    post_start: HashMap<String, RunningHook>,
    /// `preStop` hooks running, by container id (each container's stop waits for its hook).
    pre_stop: HashMap<String, RunningHook>,
    /// Running containers whose `preStop` hook has run (a later kill only stops them).
    pre_stop_done: HashSet<String>,
    /// Set when this pass changed something in the runtime, so statuses need a relist.
    acted: std::cell::Cell<bool>,
    /// What each pod's stored status was computed from (removed with the pod).
    published: HashMap<String, publish::StatusInputs>,
    /// Exited containers' termination messages, by container id.
    termination_messages: std::cell::RefCell<HashMap<String, String>>,
    /// Set while the runtime cannot be listed (a restarting containerd): pods are left as
    /// they are, and the relist is retried with back-off.
    runtime_away: std::cell::Cell<Option<RuntimeAway>>,
    /// The same, for the Node's `Ready` condition.
    runtime_health: crate::status::RuntimeHealth,
    /// The node's `MissingClusterDNS` event was recorded (once per agent run).
    missing_cluster_dns_said: bool,
}

/// The runtime stopped answering: since when, and when to try it next.
#[derive(Clone, Copy, Debug, PartialEq)]
struct RuntimeAway {
    since: SystemTime,
    retry_at: SystemTime,
    delay: Duration,
}

/// The first wait before the runtime is tried again, and the longest.
const RUNTIME_RETRY_FIRST: Duration = Duration::from_secs(1);
const RUNTIME_RETRY_MAX: Duration = Duration::from_secs(30);

impl RuntimeAway {
    /// After a failed relist at `now`: the first failure starts the back-off, a later one
    /// doubles it (at most `RUNTIME_RETRY_MAX`).
    fn after_failure(previous: Option<RuntimeAway>, now: SystemTime) -> RuntimeAway {
        let (since, delay) = match previous {
            None => (now, RUNTIME_RETRY_FIRST),
            Some(p) => (p.since, (p.delay * 2).min(RUNTIME_RETRY_MAX)),
        };
        RuntimeAway { since, retry_at: now + delay, delay }
    }
}

impl PodManager {
    /// A pod manager over `runtime`, publishing statuses into `statuses`.
    pub fn new(
        cfg: PodManagerConfig,
        runtime: Arc<dyn ContainerRuntime>,
        statuses: StatusCache,
        recorder: EventRecorder,
        cm: Option<ContainerManager>,
    ) -> Self {
        PodManager {
            cfg,
            runtime,
            statuses,
            recorder,
            clock: Arc::new(RealClock),
            cm,
            cgroups_ready: HashSet::new(),
            volumes_ready: HashSet::new(),
            dirs_swept: false,
            prober: None,
            probe_results: ProbeResults::default(),
            last_targets: Vec::new(),
            devices: None,
            device_prep: HashMap::new(),
            devices_active: HashSet::new(),
            resync: false,
            trim_heap: false,
            desired: BTreeMap::new(),
            desired_changed: false,
            sources_seen: HashSet::new(),
            deleted: HashSet::new(),
            sources: vec![crate::api::manifest::FILE_SOURCE.to_string()],
            pods: BTreeMap::new(),
            backoff: Backoff::default(),
            waiting: HashMap::new(),
            images: None,
            hooks: None,
            post_start: HashMap::new(),
            pre_stop: HashMap::new(),
            pre_stop_done: HashSet::new(),
            acted: std::cell::Cell::new(false),
            termination_messages: Default::default(),
            published: HashMap::new(),
            runtime_away: std::cell::Cell::new(None),
            runtime_health: Default::default(),
            missing_cluster_dns_said: false,
        }
    }

    /// Reports whether the runtime answers into `health` (read for the Node's `Ready`).
    pub fn with_runtime_health(mut self, health: crate::status::RuntimeHealth) -> Self {
        self.runtime_health = health;
        self
    }

    /// Pods also come from `source` (the apiserver's, in cluster mode): orphans are told
    /// apart only once it has reported too.
    pub fn with_source(mut self, source: &str) -> Self {
        self.sources.push(source.to_string());
        self
    }

    /// Whether every source has reported its pods at least once.
    fn all_sources_seen(&self) -> bool {
        self.sources.iter().all(|s| self.sources_seen.contains(s))
    }

    /// Connects the device manager: pods asking for plugin devices are admitted through it.
    pub fn with_devices(mut self, tx: Sender<DevicesCommand>, devices: Devices) -> Self {
        self.devices = Some(DeviceLink::new(tx, devices));
        self
    }

    /// Connects the pull threads (`images::ImagePuller`): containers are created only once
    /// their image is there, and missing images are pulled through `tx`. Without them (the
    /// process runtime, which ignores images) containers are created at once.
    pub fn with_images(mut self, tx: Sender<PullRequest>) -> Self {
        self.images = Some(images::Images::new(tx));
        self
    }

    /// Connects the hook threads (`lifecycle::HookRunner`): `postStart` and `preStop` hooks
    /// run there, and their answers come back as `PodsCommand::Hook`.
    pub fn with_hooks(mut self, hooks: Arc<dyn HookSink>) -> Self {
        self.hooks = Some(hooks);
        self
    }

    /// Connects the prober: targets go to `tx`, readiness and startup come from `results`.
    pub fn with_prober(mut self, tx: Sender<ProberCommand>, results: ProbeResults) -> Self {
        self.prober = Some(tx);
        self.probe_results = results;
        self
    }

    /// Reads the time from `clock` instead of the system clock (tests drive time).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The runtime, for a call that changes it.
    fn mutate(&self) -> &dyn ContainerRuntime {
        self.acted.set(true);
        &*self.runtime
    }

    /// Records an event on the pod, or on one of its containers.
    fn event(&self, pod: &Pod, container: Option<&str>, warning: bool, reason: &str, message: &str) {
        let obj = match container {
            Some(c) => Reference::container(pod, c),
            None => Reference::pod(pod),
        };
        self.recorder.event(&obj, if warning { WARNING } else { NORMAL }, reason, message);
    }

    /// Relists the runtime; `None` when it cannot. A runtime that stops answering is said
    /// once (a log line, `FailedSync` on every pod) and then tried with back-off, its return
    /// once too; pods are left as they are meanwhile (their containers keep running).
    fn snapshot(&self) -> Option<Snapshot> {
        let now = self.clock.now();
        let away = self.runtime_away.get();
        if away.is_some_and(|a| now < a.retry_at) {
            return None;
        }
        let (sandboxes, containers) = match (self.runtime.list_pod_sandboxes(), self.runtime.list_containers()) {
            (Ok(s), Ok(c)) => (s, c),
            (Err(e), _) | (_, Err(e)) => {
                let next = RuntimeAway::after_failure(away, now);
                self.runtime_away.set(Some(next));
                self.runtime_health.away(next.since, Chain(&e).to_string());
                if away.is_none() {
                    log::error!(
                        "pods: cannot list the runtime's pods: {}; pods are left as they are, retrying with back-off (at most every {:?})",
                        Chain(&e),
                        RUNTIME_RETRY_MAX
                    );
                    let message = format!("error determining status: {}", Chain(&e));
                    for entry in self.pods.values() {
                        self.event(&entry.pod, None, true, "FailedSync", &message);
                    }
                } else {
                    log::debug!("pods: the runtime is still away (next try in {:?}): {}", next.delay, Chain(&e));
                }
                return None;
            }
        };
        self.runtime_health.back();
        if let Some(a) = self.runtime_away.take() {
            let away_for = now.duration_since(a.since).unwrap_or_default();
            log::info!("pods: the runtime answers again after {away_for:.1?}; syncing pods");
        }
        for q in self.runtime.take_quarantined() {
            self.recorder.event(
                &Reference::node(&self.cfg.node_name),
                WARNING,
                "QuarantinedRecord",
                &format!(
                    "damaged {} record {} ({}) moved to {}; `ferrolet drain` removes it",
                    q.kind,
                    q.id,
                    q.reason,
                    q.moved_to.display()
                ),
            );
        }
        let mut containers = containers;
        self.add_termination_messages(&mut containers);
        Some(Snapshot::new(sandboxes, containers))
    }

    /// Exited containers' termination messages, read once each (kept while the container is).
    fn add_termination_messages(&self, containers: &mut [ContainerInfo]) {
        let mut read = self.termination_messages.borrow_mut();
        read.retain(|id, _| containers.iter().any(|c| &c.id == id));
        for c in containers.iter_mut().filter(|c| messages::wants_message(c)) {
            let message = read.entry(c.id.clone()).or_insert_with(|| messages::read(c));
            c.message = messages::joined(&c.message, message);
        }
    }

    /// One pass of the sync loop over every pod.
    pub fn sync(&mut self) {
        self.resync = false;
        let Some(snap) = self.snapshot() else { return };
        let now = self.clock.now();
        self.admit_and_retire(&snap, now);
        self.sweep_hooks(&snap, now);
        let uids: Vec<String> = self.pods.keys().cloned().collect();
        for uid in &uids {
            let Some(entry) = self.pods.get(uid) else { continue };
            if entry.termination.is_some() || entry.failure.is_some() {
                self.sync_termination(uid, &snap, now);
            } else if entry.admission == Admission::Admitted {
                if self.check_active_deadline(uid, now) {
                    self.sync_termination(uid, &snap, now);
                } else {
                    self.sync_pod(uid, &snap, now);
                }
            }
        }
        self.send_active_pods();
        // Publish what the actions above led to: one more relist for all pods, only when
        // something was changed.
        let after = if self.acted.replace(false) { self.snapshot() } else { Some(snap) };
        let Some(after) = after else { return };
        for uid in &uids {
            self.publish(uid, &after, now);
        }
        self.send_probe_targets(&after);
    }

    /// The pod's own directory (`poddir::PodDir`).
    fn pod_dir(&self, pod: &Pod) -> crate::poddir::PodDir {
        crate::poddir::PodDir::new(&self.cfg.pods_root, &pod.metadata.uid)
    }

    /// The directory of a pod's container logs.
    fn log_dir(&self, pod: &Pod) -> PathBuf {
        self.cfg.log_root.join(format!("{}_{}_{}", pod.metadata.namespace, pod.metadata.name, pod.metadata.uid))
    }
}

/// The pods the manager owns, for the container manager (borrowed apart from it).
fn active_pods(pods: &BTreeMap<String, PodEntry>) -> Vec<&Pod> {
    pods.values().map(|e| &*e.pod).collect()
}

impl crate::manager::Manager for PodManager {
    type Command = PodsCommand;

    fn handle(&mut self, cmd: PodsCommand) {
        match cmd {
            PodsCommand::Probe(ProbeUpdate { pod_uid, container, container_id, kind, result }) => {
                log::debug!("pods: {kind:?} probe of {pod_uid}/{container} ({container_id}) is now {result:?}");
                if result == ProbeResult::Failure && kind != ProbeType::Readiness {
                    self.on_probe_failure(&pod_uid, &container, &container_id, kind);
                }
                // One sync for a burst of results (hundreds of containers turning Ready at
                // once), run when the command queue is empty.
                self.resync = true;
            }
            PodsCommand::Devices(update) => self.on_device_update(update),
            PodsCommand::Images(done) => self.on_pull_done(done),
            PodsCommand::Hook(done) => {
                self.on_hook_done(done);
                // What the hook held back (a stop, the next start) goes on at once.
                self.resync = true;
            }
            PodsCommand::Update { source, pods } => {
                self.set_desired(source, pods);
                self.sync();
            }
        }
    }

    fn on_tick(&mut self) {
        if std::mem::take(&mut self.trim_heap) {
            release_freed_memory();
        }
        self.sync();
        // Orphaned cgroups can only be told apart once every source has reported.
        if self.cm.is_some() && self.all_sources_seen() {
            let active = active_pods(&self.pods);
            let (pods, desired) = (&self.pods, &self.desired);
            let known = |uid: &str| pods.contains_key(uid) || desired.contains_key(uid);
            if let Some(cm) = self.cm.as_mut() {
                cm.on_tick(&active, &known);
            }
        }
    }

    fn tick_interval(&self) -> Duration {
        self.cfg.sync_frequency
    }

    fn next_deadline(&self) -> Option<std::time::Instant> {
        self.resync.then(std::time::Instant::now)
    }

    fn on_deadline(&mut self) {
        if std::mem::take(&mut self.resync) {
            self.sync();
        }
    }
}

/// Hands memory freed by a removed pod back to the OS. glibc keeps freed heap for reuse,
/// so a large pod (up to the 1.5 MiB object limit, expanded env, thousands of statuses)
/// would otherwise leave its RSS behind after it is gone.
fn release_freed_memory() {
    crate::util::release_freed_memory();
}

/// The content hash of a static pod (`kubernetes.io/config.hash`), none for other pods.
fn config_hash(pod: &Pod) -> Option<&str> {
    pod.metadata.annotations.get(crate::api::manifest::CONFIG_HASH_ANNOTATION).map(String::as_str)
}
