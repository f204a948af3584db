//! The pod manager: the sync loop. One thread owns every pod's lifecycle: it relists the
//! runtime (generic-PLEG style), starts init containers one at a time, then the app
//! containers, restarts them under the restart policy with back-off, and terminates removed
//! or replaced pods gracefully (app containers first, sidecars after). It never blocks for a
//! grace period: stop requests return at once and the shim enforces the deadline.
//!
//! It decides, then acts, as kubelet's `computePodActions` and `SyncPod`: `actions` decides
//! what a running pod needs and whether a container may be created (`start_gate`), and
//! `termination` how a pod stops (pure); `sync` and `termination` apply them. `PodManager`
//! holds one part per concern, each owning its state in its own file: `actor` (what every
//! part acts through: settings, runtime, events, clock, statuses), `relist`, `admission`
//! (the sources' pods), `setup` (cgroups, volumes), `restarts` (back-off, waiting reasons),
//! `hooks` (and every kill), `images` (the image gate; pulls run on the pull threads, never
//! here), `devices` (the one place that speaks to the device manager), `dns` and `publish`
//! (statuses, probe targets). The runtime calls a sync makes for a pod (sandboxes, container
//! creates and starts, removals) go to the pod workers (`workers`) as one work per pod, so
//! pods start side by side and the sync never waits for them; one pod's work is in flight
//! at a time. `fit` decides whether a pod from the apiserver fits in the node's allocatable
//! (pure). `stats` tells the stats thread which pods to measure (pure).

pub mod actions;
mod actor;
mod admission;
pub mod backoff;
mod devices;
pub mod dir;
mod dns;
pub mod fit;
mod hooks;
mod images;
pub mod messages;
pub mod podcmd;
mod publish;
mod relist;
mod restarts;
mod setup;
pub mod source;
mod state;
pub mod stats;
mod sync;
pub mod termination;
#[cfg(test)]
mod tests;
pub mod view;
pub mod workers;

pub use state::{
    Admission, ContainerKind, ContainerStartError, DevicePrep, PodEntry, PodFailure, RunningHook, Termination, Waiting,
    WaitingReason, SYSCTL_FORBIDDEN, UNEXPECTED_ADMISSION_ERROR,
};

use crate::api::manifest::PodSource;
use crate::api::Pod;
use crate::base::clock::{Clock, RealClock};
use crate::base::errors::Chain;
use crate::node::cm::ContainerManager;
use crate::node::devicemanager::{DeviceUpdate, Devices, DevicesCommand};
use crate::node::events::EventRecorder;
use crate::node::eviction::view::EvictPod;
use crate::node::images::{PullDone, PullRequest};
use crate::node::lifecycle::{HookDone, HookSink};
use crate::node::objects::{ObjectsChanged, ObjectsView};
use crate::node::prober::{ProbeResult, ProbeResults, ProbeType, ProbeUpdate, ProberCommand};
use crate::node::runtime::ContainerRuntime;
use crate::node::status::StatusCache;
use actor::Actor;
use admission::Sources;
use crossbeam_channel::Sender;
use devices::DeviceLink;
use dns::PodDns;
use hooks::Hooks;
use publish::{Published, Seen};
use relist::{NoRelist, Relist};
use restarts::Restarts;
use setup::PodSetup;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use view::Snapshot;
use workers::{PodWork, Turn, WorkDone, WorkSink, Workers};

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
    /// A pod worker answered (boxed: a work holds a sandbox's config).
    Work(Box<WorkDone>),
    /// ConfigMaps, Secrets or tokens that pods use changed (from `fl-apiobjects`).
    Objects(ObjectsChanged),
    /// The eviction manager evicts a pod.
    Evict(EvictPod),
    /// The complete set of pods a source wants on this node.
    Update {
        /// Source name, e.g. `file`.
        source: PodSource,
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

impl From<WorkDone> for PodsCommand {
    fn from(d: WorkDone) -> Self {
        PodsCommand::Work(Box::new(d))
    }
}

impl From<EvictPod> for PodsCommand {
    fn from(e: EvictPod) -> Self {
        PodsCommand::Evict(e)
    }
}

impl From<ObjectsChanged> for PodsCommand {
    fn from(c: ObjectsChanged) -> Self {
        PodsCommand::Objects(c)
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
    /// The node's registry credentials (`<state_dir>/config.json`, a docker `config.json`),
    /// tried after a pod's `imagePullSecrets`; absent: none.
    pub registry_config: PathBuf,
    /// Root of the pods' own directories (`<state_dir>/pods`: volumes, termination message
    /// files, hosts files; `dir::PodDir`).
    pub pods_root: PathBuf,
    /// Exited instances kept per container.
    pub max_dead_per_container: u32,
    /// Relist period.
    pub sync_frequency: Duration,
    /// Sysctls beyond kubelet's safe set a pod may set (names, or prefixes ending in `*`).
    pub allowed_unsafe_sysctls: Vec<String>,
    /// Pods' hostnames, resolvers and hosts files (a runtime that gives pods their own:
    /// CRI); `None`: every pod shares the node's (the process runtime).
    pub dns: Option<crate::node::dns::DnsSettings>,
    /// What the node allocates to pods (device plugin resources aside, which come from the
    /// device manager): pods from the apiserver are admitted only if they fit in it.
    pub allocatable: fit::NodeAllocatable,
}

/// The sync loop's state, in parts that each own one concern; `handle` and `on_tick` hold
/// all the logic.
pub struct PodManager {
    /// Settings, runtime, events, clock and statuses: what every part acts through.
    act: Actor,
    /// The relist and the runtime's health.
    relist: Relist,
    /// What the sources want (admission).
    sources: Sources,
    /// The pods this manager owns (desired, or being terminated), by uid.
    pods: BTreeMap<String, PodEntry>,
    /// Pod cgroups and volumes.
    setup: PodSetup,
    /// Restart back-off and waiting reasons.
    restarts: Restarts,
    /// Lifecycle hooks, and every kill.
    hooks: Hooks,
    /// Images and their pulls; `None` with a runtime without images (the process runtime).
    images: Option<images::Images>,
    /// The device manager and device preparation, when connected.
    devices: Option<DeviceLink>,
    /// Pods' names and resolvers.
    dns: PodDns,
    /// Statuses and probe targets as last told.
    published: Published,
    /// Where each pod's runtime calls are made, and which pods have work in flight.
    workers: Workers,
    /// Something (a probe result, a hook's, a worker's or a device manager's answer) wants a
    /// sync as soon as the command queue is empty.
    resync: bool,
    /// Work made on this thread (no workers) made a sandbox during this sync: its pod is
    /// synced again at once, so its containers start in the same sync.
    again: bool,
    /// Pods were removed: return freed heap to the OS at the next tick, once the other
    /// threads (prober, status readers) have dropped their copies too.
    trim_heap: bool,
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
            act: Actor::new(cfg, runtime, statuses, recorder, Arc::new(RealClock)),
            relist: Relist::default(),
            sources: Sources::default(),
            pods: BTreeMap::new(),
            setup: PodSetup::new(cm),
            restarts: Restarts::default(),
            hooks: Hooks::default(),
            images: None,
            devices: None,
            dns: PodDns::default(),
            published: Published::default(),
            workers: Workers::default(),
            resync: false,
            again: false,
            trim_heap: false,
        }
    }

    /// Reports whether the runtime answers into `health` (read for the Node's `Ready`).
    pub fn with_runtime_health(mut self, health: crate::node::status::RuntimeHealth) -> Self {
        self.relist.health = health;
        self
    }

    /// Admits new pods under the node's pressure conditions as kubelet's eviction manager
    /// does (`PressureView`, written by it).
    pub fn with_pressure(mut self, pressure: crate::node::eviction::view::PressureView) -> Self {
        self.sources.pressure = pressure;
        self
    }

    /// Pods also come from `source` (the apiserver's, in cluster mode): orphans are told
    /// apart only once it has reported too.
    pub fn with_source(mut self, source: PodSource) -> Self {
        self.sources.expected.push(source);
        self
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

    /// Connects the pod workers (`workers::PodWorkers`): each pod's runtime calls are made
    /// there, pods side by side, and their answers come back as `PodsCommand::Work`. Without
    /// them (the process runtime, whose calls are fast) this thread makes them itself.
    pub fn with_workers(mut self, workers: Arc<dyn WorkSink>) -> Self {
        self.workers.sink = Some(workers);
        self
    }

    /// Connects the hook threads (`lifecycle::HookRunner`): `postStart` and `preStop` hooks
    /// run there, and their answers come back as `PodsCommand::Hook`.
    pub fn with_hooks(mut self, hooks: Arc<dyn HookSink>) -> Self {
        self.hooks.sink = Some(hooks);
        self
    }

    /// Connects the prober: targets go to `tx`, readiness and startup come from `results`.
    pub fn with_prober(mut self, tx: Sender<ProberCommand>, results: ProbeResults) -> Self {
        self.published.prober = Some(tx);
        self.published.probe_results = results;
        self
    }

    /// Reads ConfigMaps, Secrets and tokens from `view` (cluster mode): pods from the
    /// apiserver may use them in volumes, env and pulls.
    pub fn with_objects(mut self, view: ObjectsView) -> Self {
        self.setup.objects = view;
        self
    }

    /// Reads the time from `clock` instead of the system clock (tests drive time).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.act.clock = clock;
        self
    }

    /// Relists the runtime; `None` when it cannot (`relist.rs`): a runtime that just
    /// stopped answering is said on every pod (`FailedSync`), and pods are left as they are
    /// meanwhile (their containers keep running).
    fn snapshot(&mut self) -> Option<Snapshot> {
        let now = self.act.clock.now();
        match self.relist.list(&self.act, now) {
            Ok(snap) => Some(snap),
            Err(NoRelist::Away) => None,
            Err(NoRelist::Lost(message)) => {
                for entry in self.pods.values() {
                    self.act.event(&entry.pod, None, true, "FailedSync", &message);
                }
                None
            }
        }
    }

    /// Syncs every pod: one pass of the sync loop; without workers, a pass whose work made a
    /// sandbox is followed by another (at most `MAX_PASSES`), so the sandbox's containers
    /// start in the same sync, as a worker's answer has them start at once.
    pub fn sync(&mut self) {
        for _ in 0..MAX_PASSES {
            self.resync = false;
            self.again = false;
            self.sync_pass();
            if !self.again {
                break;
            }
        }
    }

    fn sync_pass(&mut self) {
        let Some(snap) = self.snapshot() else { return };
        let now = self.act.clock.now();
        self.sources.admit_and_retire(&mut self.pods, &self.act, self.devices.as_ref(), &snap, now);
        self.hooks.sweep(&mut self.act, &self.pods, &snap, now);
        let uids: Vec<String> = self.pods.keys().cloned().collect();
        for uid in workers::order(&uids, &snap.sandboxes) {
            // Its answer syncs it again: one pod's steps stay in order.
            if self.workers.turn(uid, false) == Turn::InFlight {
                continue;
            }
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
        // Which pods may hold devices, once every source has reported (so nothing is freed
        // from a pod not yet re-added).
        if let Some(link) = self.devices.as_mut().filter(|_| self.sources.all_seen()) {
            link.tell_active_pods(&self.pods);
        }
        // Publish what the actions above led to: one more relist for all pods, only when
        // something was changed.
        let after = if self.act.take_acted() { self.snapshot() } else { Some(snap) };
        let Some(after) = after else { return };
        let seen = Seen {
            act: &self.act,
            pods: &self.pods,
            hooks: &self.hooks,
            restarts: &self.restarts,
            devices: self.devices.as_ref(),
        };
        for uid in &uids {
            self.published.publish(&seen, uid, &after, now);
        }
        self.published.send_probe_targets(&seen, &after);
    }

    /// Hands a pod's `work` to the workers, or, without them, makes it here and applies its
    /// answer at once.
    fn submit(&mut self, work: PodWork) {
        if work.is_empty() {
            return;
        }
        let uid = work.uid.clone();
        // A work without calls (the removal of a pod the runtime holds nothing of) needs no
        // worker.
        let Some(sink) = self.workers.sink.clone().filter(|_| work.calls()) else {
            let done = workers::run(self.act.mutate(), work, &|| false);
            self.again |= self.on_work_done(done);
            return;
        };
        let (what, pod) = (work.describe(), self.pods.get(&uid).map_or_else(|| uid.clone(), |e| e.pod.key()));
        match sink.submit(work) {
            Ok(()) => {
                log::debug!("pods: pod {pod}: {what} asked of the runtime");
                self.workers.sent(&uid);
            }
            // Nothing was asked: the next sync decides again.
            Err(e) => log::warn!("pods: pod {pod}: {what} not asked of the runtime: {}", Chain(&e)),
        }
    }

    /// A pod's work answered: its outcome applied (`sync_answered`, `removal_answered`).
    /// Returns whether it made a sandbox, whose containers start next.
    fn on_work_done(&mut self, done: WorkDone) -> bool {
        let WorkDone { work, outcome } = done;
        self.workers.answered(&work.uid);
        // A pod is forgotten only by its removal's answer, so its entry is there.
        let Some(pod) = self.pods.get(&work.uid).map(|e| e.pod.clone()) else {
            log::debug!("pods: pod {}: answer for a pod no longer owned", work.uid);
            return false;
        };
        if work.removal {
            self.removal_answered(&pod, outcome);
            return false;
        }
        let now = self.act.clock.now();
        self.sync_answered(&pod, work, outcome, now)
    }
}

/// Passes of one sync without workers: every pod, then the containers of the sandboxes the
/// first made.
const MAX_PASSES: usize = 2;

impl crate::base::manager::Manager for PodManager {
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
            PodsCommand::Devices(DeviceUpdate::Admitted { pod_uid, result }) => {
                let refusal = result.err().map(|e| Chain(&e).to_string());
                self.resync |= admission::on_admitted(&mut self.pods, &self.act, &pod_uid, refusal);
            }
            PodsCommand::Devices(DeviceUpdate::Prepared { pod_uid, container, result }) => {
                if let Some(link) = self.devices.as_mut() {
                    let result = result.map_err(|reason| Chain(&reason).to_string());
                    self.resync |= link.prepared((pod_uid, container), result);
                }
            }
            PodsCommand::Images(done) => {
                if let Some(images) = self.images.as_mut() {
                    images.on_pull_done(&self.act, &mut self.restarts, &self.pods, done);
                    self.resync = true;
                }
            }
            PodsCommand::Work(done) => {
                self.on_work_done(*done);
                // The pod goes on (its containers after its sandbox), and its status is told.
                self.resync = true;
            }
            PodsCommand::Hook(done) => {
                if let Some(pod) = self.pods.get(&done.pod_uid).map(|e| Arc::clone(&e.pod)) {
                    self.hooks.on_done(&mut self.act, &pod, done);
                }
                // What the hook held back (a stop, the next start) goes on at once.
                self.resync = true;
            }
            PodsCommand::Objects(changed) => {
                self.setup.objects_changed(&self.pods, &changed);
                self.resync = true;
            }
            PodsCommand::Evict(e) => {
                let now = self.act.clock.now();
                self.resync |= self.evict(e, now);
            }
            PodsCommand::Update { source, pods } => {
                self.sources.set_desired(source, pods);
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
        if self.sources.all_seen() {
            self.setup.on_tick(&self.pods, &self.sources.desired);
        }
    }

    fn tick_interval(&self) -> Duration {
        self.act.cfg.sync_frequency
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
    crate::base::procs::release_freed_memory();
}

/// The content hash of a static pod (`kubernetes.io/config.hash`), none for other pods.
fn config_hash(pod: &Pod) -> Option<&str> {
    pod.metadata.annotations.get(crate::api::manifest::CONFIG_HASH_ANNOTATION).map(String::as_str)
}
