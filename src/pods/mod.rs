//! The pod manager: the sync loop. One thread owns every pod's lifecycle: it relists the
//! runtime (generic-PLEG style), starts init containers one at a time, then the app
//! containers, restarts them under the restart policy with back-off, and terminates removed
//! or replaced pods gracefully (app containers first, sidecars after). It never blocks for a
//! grace period: stop requests return at once and the shim enforces the deadline.

pub mod backoff;

use crate::api::expand::{expand, resolve_env};
use crate::api::{Container, Pod, ResourceHealth, ResourceStatus, RestartPolicy, Time};
use crate::cm::ContainerManager;
use crate::devicemanager::{device_requests, pod_needs_devices, DeviceUpdate, Devices, DevicesCommand};
use crate::events::{EventRecorder, Reference, NORMAL, WARNING};
use crate::prober::{ProbeResult, ProbeResults, ProbeTarget, ProbeType, ProbeUpdate, ProberCommand};
use crate::runtime::devices::DeviceOptions;
use crate::runtime::{
    labels, ContainerConfig, ContainerInfo, ContainerRuntime, ContainerState, SandboxConfig, SandboxInfo,
};
use crate::status::{self, ContainerObservation, PodObservation, StatusCache};
use crate::timefmt::go_duration;
use backoff::Backoff;
use crossbeam_channel::Sender;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Label telling init, sidecar and app containers apart (needed to stop orphans in order).
pub const CONTAINER_KIND_LABEL: &str = "ferrolet.io/container-kind";
/// kubelet's `minimumGracePeriodInSeconds`.
const MIN_GRACE: Duration = Duration::from_secs(2);
/// How long past its grace period a container may take before we say so.
const EXCEEDED_GRACE_MARGIN: Duration = Duration::from_secs(5);

/// Commands to the pod manager.
#[derive(Debug)]
pub enum PodsCommand {
    /// A probe result changed (from the prober).
    Probe(ProbeUpdate),
    /// The device manager admitted a pod or prepared a container's devices.
    Devices(DeviceUpdate),
    /// The complete set of pods a source wants on this node.
    Update {
        /// Source name, e.g. `file`.
        source: String,
        /// The pods (static pods already named and uid'd).
        pods: Vec<Pod>,
    },
}

impl From<ProbeUpdate> for PodsCommand {
    fn from(u: ProbeUpdate) -> Self {
        PodsCommand::Probe(u)
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
    /// Exited instances kept per container.
    pub max_dead_per_container: u32,
    /// Relist period.
    pub sync_frequency: Duration,
}

#[derive(Clone, Debug)]
struct Waiting {
    reason: String,
    message: String,
    since: SystemTime,
}

#[derive(Debug)]
struct Termination {
    started: SystemTime,
    grace: Duration,
    requested: HashSet<String>,
    warned: bool,
}

/// Where a pod is in admission (only pods asking for plugin devices wait).
#[derive(Debug, PartialEq)]
enum Admission {
    Admitted,
    /// Waiting for the device manager.
    Pending,
    /// Refused: (reason, message); the pod is Failed and never runs.
    Rejected(String, String),
}

#[derive(Debug)]
struct PodEntry {
    pod: Pod,
    admission: Admission,
    termination: Option<Termination>,
}

/// The sync loop's state; `handle` and `on_tick` hold all the logic.
pub struct PodManager {
    cfg: PodManagerConfig,
    runtime: Arc<dyn ContainerRuntime>,
    statuses: StatusCache,
    recorder: EventRecorder,
    /// Pod cgroups; `None` when resource enforcement is off.
    cm: Option<ContainerManager>,
    /// Pods whose cgroup this agent run has ensured.
    cgroups_ready: HashSet<String>,
    /// The prober's command channel, and the results it writes.
    prober: Option<Sender<ProberCommand>>,
    probe_results: ProbeResults,
    last_targets: Vec<ProbeTarget>,
    /// The device manager's command channel and shared state.
    devices: Option<(Sender<DevicesCommand>, Devices)>,
    /// Containers whose devices are being prepared (`None`) or are ready to start.
    device_prep: HashMap<backoff::Key, Option<Result<DeviceOptions, String>>>,
    /// The pod uids last told to the device manager.
    devices_active: HashSet<String>,
    /// Probe results changed since the last sync.
    resync: bool,
    /// Pods were removed: return freed heap to the OS at the next tick, once the other
    /// threads (prober, status readers) have dropped their copies too.
    trim_heap: bool,
    desired: BTreeMap<String, Pod>,
    sources_seen: HashSet<String>,
    pods: BTreeMap<String, PodEntry>,
    backoff: Backoff,
    waiting: HashMap<backoff::Key, Waiting>,
    /// Set when this pass changed something in the runtime, so statuses need a relist.
    acted: std::cell::Cell<bool>,
}

/// One relist of the runtime, grouped by pod uid.
#[derive(Default)]
struct Snapshot {
    sandboxes: HashMap<String, SandboxInfo>,
    containers: HashMap<String, Vec<ContainerInfo>>,
}

impl Snapshot {
    /// Instances of one container of a pod, newest first.
    fn instances(&self, uid: &str, name: &str) -> Vec<&ContainerInfo> {
        let mut v: Vec<&ContainerInfo> = self
            .containers
            .get(uid)
            .map(|cs| cs.iter().filter(|c| c.config.name == name).collect())
            .unwrap_or_default();
        v.sort_by_key(|c| std::cmp::Reverse((c.config.attempt, c.created_at)));
        v
    }
}

fn container_kind(c: &Container, init: bool) -> &'static str {
    match (init, c.is_sidecar()) {
        (true, true) => "sidecar",
        (true, false) => "init",
        _ => "app",
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
            cm,
            cgroups_ready: HashSet::new(),
            prober: None,
            probe_results: ProbeResults::default(),
            last_targets: Vec::new(),
            devices: None,
            device_prep: HashMap::new(),
            devices_active: HashSet::new(),
            resync: false,
            trim_heap: false,
            desired: BTreeMap::new(),
            sources_seen: HashSet::new(),
            pods: BTreeMap::new(),
            backoff: Backoff::default(),
            waiting: HashMap::new(),
            acted: std::cell::Cell::new(false),
        }
    }

    /// Connects the device manager: pods asking for plugin devices are admitted through it.
    pub fn with_devices(mut self, tx: Sender<DevicesCommand>, devices: Devices) -> Self {
        self.devices = Some((tx, devices));
        self
    }

    /// Connects the prober: targets go to `tx`, readiness and startup come from `results`.
    pub fn with_prober(mut self, tx: Sender<ProberCommand>, results: ProbeResults) -> Self {
        self.prober = Some(tx);
        self.probe_results = results;
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

    fn snapshot(&self) -> Option<Snapshot> {
        let (sandboxes, containers) = match (self.runtime.list_pod_sandboxes(), self.runtime.list_containers()) {
            (Ok(s), Ok(c)) => (s, c),
            (Err(e), _) | (_, Err(e)) => {
                log::error!("pods: cannot list the runtime's pods: {}", crate::util::Chain(&e));
                for entry in self.pods.values() {
                    self.event(
                        &entry.pod,
                        None,
                        true,
                        "FailedSync",
                        &format!("error determining status: {}", crate::util::Chain(&e)),
                    );
                }
                return None;
            }
        };
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
        let mut snap = Snapshot::default();
        for s in sandboxes {
            let keep = snap.sandboxes.get(&s.config.pod_uid).map_or(true, |old| old.created_at < s.created_at);
            if keep {
                snap.sandboxes.insert(s.config.pod_uid.clone(), s);
            }
        }
        for c in containers {
            let uid = c.config.labels.get(labels::POD_UID).cloned().unwrap_or_default();
            snap.containers.entry(uid).or_default().push(c);
        }
        Some(snap)
    }

    /// One pass of the sync loop over every pod.
    pub fn sync(&mut self) {
        self.resync = false;
        let Some(snap) = self.snapshot() else { return };
        let now = SystemTime::now();
        self.admit_and_retire(&snap, now);
        let uids: Vec<String> = self.pods.keys().cloned().collect();
        for uid in &uids {
            let Some(entry) = self.pods.get(uid) else { continue };
            if entry.termination.is_some() {
                self.sync_termination(uid, &snap, now);
            } else if entry.admission == Admission::Admitted {
                self.sync_pod(uid, &snap, now);
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

    /// Adds newly desired pods, starts terminating pods no longer desired, and adopts
    /// orphans found in the runtime once every source has reported.
    fn admit_and_retire(&mut self, snap: &Snapshot, now: SystemTime) {
        for (uid, entry) in self.pods.iter_mut() {
            // A pod whose manifest sets its uid keeps it when the manifest changes: the old
            // version is terminated, and the new one starts once it is gone, as for a new uid.
            let changed = self.desired.get(uid).is_some_and(|d| config_hash(d) != config_hash(&entry.pod));
            if (changed || !self.desired.contains_key(uid)) && entry.termination.is_none() {
                let grace = entry.pod.spec.termination_grace();
                let why = if changed { "changed in" } else { "removed from" };
                log::info!("pods: pod {} {why} its source; terminating with grace period {grace:?}", entry.pod.key());
                entry.pod.metadata.deletion_timestamp = Some(Time(now));
                entry.termination = Some(Termination { started: now, grace, requested: HashSet::new(), warned: false });
            }
        }
        for (uid, pod) in &self.desired {
            if self.pods.contains_key(uid) {
                continue;
            }
            // A changed static pod gets a new uid: the new version waits for the old one to
            // be gone, so two copies never run at once.
            if self.pods.values().any(|e| e.pod.key() == pod.key()) {
                continue;
            }
            log::info!("pods: pod {} added (uid {uid})", pod.key());
            let mut admission = Admission::Admitted;
            if let Some((tx, _)) = self.devices.as_ref().filter(|_| pod_needs_devices(pod)) {
                admission = Admission::Pending;
                let _ = tx.send(DevicesCommand::Admit(Box::new(pod.clone())));
            }
            self.pods.insert(uid.clone(), PodEntry { pod: pod.clone(), admission, termination: None });
        }
        if self.sources_seen.is_empty() {
            return;
        }
        let mut orphans: HashSet<&String> = snap.sandboxes.keys().collect();
        orphans.extend(snap.containers.keys());
        for uid in orphans {
            if self.pods.contains_key(uid) {
                continue;
            }
            let mut pod = Pod::default();
            let mut grace = Duration::from_secs(crate::api::defaults::DEFAULT_TERMINATION_GRACE_PERIOD as u64);
            if let Some(s) = snap.sandboxes.get(uid) {
                pod.metadata.name = s.config.pod_name.clone();
                pod.metadata.namespace = s.config.namespace.clone();
                grace = Duration::from_secs(s.config.termination_grace_period_seconds.max(0) as u64);
            }
            pod.metadata.uid = uid.clone();
            pod.metadata.deletion_timestamp = Some(Time(now));
            log::info!("pods: found pod {} (uid {uid}) that no source wants; terminating it", pod.key());
            self.pods.insert(
                uid.clone(),
                PodEntry {
                    pod,
                    admission: Admission::Admitted,
                    termination: Some(Termination { started: now, grace, requested: HashSet::new(), warned: false }),
                },
            );
        }
    }

    fn log_dir(&self, pod: &Pod) -> PathBuf {
        self.cfg.log_root.join(format!("{}_{}_{}", pod.metadata.namespace, pod.metadata.name, pod.metadata.uid))
    }

    fn sync_pod(&mut self, uid: &str, snap: &Snapshot, now: SystemTime) {
        let pod = self.pods[uid].pod.clone();
        if !self.ensure_pod_cgroup(&pod) {
            return;
        }
        let sandbox_id = match snap.sandboxes.get(uid) {
            Some(s) => s.id.clone(),
            None => {
                let cfg = SandboxConfig {
                    pod_uid: uid.into(),
                    pod_name: pod.metadata.name.clone(),
                    namespace: pod.metadata.namespace.clone(),
                    log_directory: self.log_dir(&pod),
                    termination_grace_period_seconds: pod.spec.grace_period_seconds(),
                };
                match self.mutate().run_pod_sandbox(&cfg) {
                    Ok(id) => id,
                    Err(e) => {
                        self.event(
                            &pod,
                            None,
                            true,
                            "FailedCreatePodSandBox",
                            &format!("Failed to create pod sandbox: {}", crate::util::Chain(&e)),
                        );
                        return;
                    }
                }
            }
        };
        let latest = |name: &str| snap.instances(uid, name).first().map(|c| (*c).clone());
        let policy = pod.spec.restart();
        let initialized = pod.spec.containers.iter().any(|c| latest(&c.name).is_some());

        // Init containers, in order: a regular one must exit 0 before the next starts; a
        // sidecar must be running (and later started) before the next starts.
        let mut init_done = initialized;
        let mut init_failed = false;
        let mut to_start: Vec<(Container, bool, Option<ContainerInfo>)> = Vec::new();
        if !initialized {
            init_done = true;
            for c in &pod.spec.init_containers {
                let cur = latest(&c.name);
                let state = cur.as_ref().map(|i| (i.state, i.exit_code));
                if c.is_sidecar() {
                    if !matches!(state, Some((ContainerState::Running, _))) {
                        to_start.push((c.clone(), true, cur));
                        init_done = false;
                        break;
                    }
                    // A sidecar counts once started (its startup probe passed, if any).
                    if !self.probe_passes(c, cur.as_ref(), ProbeType::Startup) {
                        init_done = false;
                        break;
                    }
                    continue;
                }
                match state {
                    Some((ContainerState::Exited, 0)) => continue,
                    None => to_start.push((c.clone(), true, None)),
                    Some((ContainerState::Exited, _)) if policy == RestartPolicy::Never => init_failed = true,
                    Some((ContainerState::Exited, _)) => to_start.push((c.clone(), true, cur)),
                    // Created but never run, and no shim will run it (kubelet restarts a
                    // created container whatever the restart policy).
                    Some((ContainerState::Created, _)) => to_start.push((c.clone(), true, cur)),
                    Some(_) => {}
                }
                init_done = false;
                break;
            }
        }

        // Terminal: init failed under Never, or every app container exited for good.
        let apps_finished = init_done
            && pod.spec.containers.iter().all(|c| {
                matches!(latest(&c.name), Some(i) if i.state == ContainerState::Exited && !policy.restarts(i.exit_code))
            });
        let terminal = init_failed || apps_finished;

        if terminal {
            // Sidecars exist to serve app containers; once those are done, sidecars stop.
            let grace = pod.spec.termination_grace().max(MIN_GRACE);
            for c in pod.spec.init_containers.iter().filter(|c| c.is_sidecar()) {
                if let Some(i) = latest(&c.name).filter(|i| i.state == ContainerState::Running) {
                    self.stop(&pod, &i, grace, &format!("Stopping container {}", i.config.name));
                }
            }
        } else {
            if initialized {
                // Sidecars keep running next to the app containers.
                for c in pod.spec.init_containers.iter().filter(|c| c.is_sidecar()) {
                    let cur = latest(&c.name);
                    if cur.as_ref().map_or(true, |i| i.state != ContainerState::Running) {
                        to_start.push((c.clone(), true, cur));
                    }
                }
            }
            if init_done {
                for c in &pod.spec.containers {
                    let cur = latest(&c.name);
                    let start = match &cur {
                        None => true,
                        Some(i) => {
                            i.state == ContainerState::Created
                                || (i.state == ContainerState::Exited && policy.restarts(i.exit_code))
                        }
                    };
                    if start {
                        to_start.push((c.clone(), false, cur));
                    }
                }
            }
        }
        for (c, init, cur) in to_start {
            self.start_with_backoff(&pod, &sandbox_id, &c, init, cur.as_ref(), now);
        }
        self.collect_dead(uid, &pod, snap);
    }

    /// Creates the pod's cgroup once per agent run (first refreshing the QoS cgroups);
    /// false when it cannot be created, so the pod must not start.
    fn ensure_pod_cgroup(&mut self, pod: &Pod) -> bool {
        if self.cm.is_none() || self.cgroups_ready.contains(&pod.metadata.uid) {
            return true;
        }
        let active: Vec<Pod> = self.pods.values().map(|e| e.pod.clone()).collect();
        let active: Vec<&Pod> = active.iter().collect();
        let result = match self.cm.as_mut() {
            Some(cm) => cm.ensure_pod(pod, &active),
            None => return true,
        };
        match result {
            Ok(()) => {
                self.cgroups_ready.insert(pod.metadata.uid.clone());
                true
            }
            Err(e) => {
                self.event(
                    pod,
                    None,
                    true,
                    "FailedCreatePodContainer",
                    &format!("unable to ensure pod container exists: {}", crate::util::Chain(&e)),
                );
                false
            }
        }
    }

    /// Active pods and every uid the manager knows, for the container manager.
    fn cm_view(&self) -> (Vec<Pod>, HashSet<String>) {
        let pods: Vec<Pod> = self.pods.values().map(|e| e.pod.clone()).collect();
        let mut known: HashSet<String> = self.pods.keys().cloned().collect();
        known.extend(self.desired.keys().cloned());
        (pods, known)
    }

    fn start_with_backoff(
        &mut self,
        pod: &Pod,
        sandbox_id: &str,
        c: &Container,
        init: bool,
        cur: Option<&ContainerInfo>,
        now: SystemTime,
    ) {
        let key: backoff::Key = (pod.metadata.uid.clone(), c.name.clone());
        // What the back-off counts from: the last exit, or the last failed create.
        let event_time = match (cur, self.waiting.get(&key)) {
            // A created container that never ran counts from its creation.
            (Some(i), _) if i.state == ContainerState::Created => Some(i.created_at),
            (Some(i), _) => Some(i.finished_at.unwrap_or(now)),
            (None, Some(w)) if w.reason == "CreateContainerError" => Some(w.since),
            _ => None,
        };
        if let Some(t) = event_time {
            if self.backoff.in_backoff_since(&key, t, now) {
                if cur.is_some() {
                    let delay = self.backoff.delay(&key).unwrap_or(backoff::INITIAL);
                    let message = format!(
                        "back-off {} restarting failed container={} pod={}",
                        go_duration(delay),
                        c.name,
                        pod.desc()
                    );
                    let fresh =
                        self.waiting.get(&key).map_or(true, |w| w.reason != "CrashLoopBackOff" || w.message != message);
                    if fresh {
                        self.event(
                            pod,
                            Some(&c.name),
                            true,
                            "BackOff",
                            &format!("Back-off restarting failed container {} in pod {}", c.name, pod.desc()),
                        );
                        self.waiting.insert(key, Waiting { reason: "CrashLoopBackOff".into(), message, since: now });
                    }
                }
                return;
            }
        }
        let Some(devices) = self.prepared_devices(pod, c) else { return };
        if let Some(t) = event_time {
            self.backoff.next(&key, t, now);
        }
        let attempt = cur.map(|i| i.config.attempt + 1).unwrap_or(0);
        if let Some(stale) = cur.filter(|i| i.state == ContainerState::Created) {
            // The runtime reports Created only when no shim of it is alive: nothing runs it,
            // so it is removed and created again.
            log::info!(
                "pods: pod {} container {}: created but never started (the agent stopped or the start failed); creating it again",
                pod.key(),
                c.name
            );
            if let Err(e) = self.mutate().remove_container(&stale.id) {
                // Not created beside it: the two would share the container's cgroup, and
                // removing the stale one later would kill the new one. Retried under back-off.
                log::warn!(
                    "pods: pod {} container {}: cannot remove it: {}",
                    pod.key(),
                    c.name,
                    crate::util::Chain(&e)
                );
                return;
            }
        }
        // Devices that cannot be prepared fail the create, under the same back-off.
        let started = devices
            .map_err(CreateOrStart::Create)
            .and_then(|d| self.create_and_start(pod, sandbox_id, c, init, attempt, d.as_ref()));
        match started {
            Ok(()) => {
                self.waiting.remove(&key);
            }
            Err(CreateOrStart::Create(message)) => {
                self.event(pod, Some(&c.name), true, "Failed", &format!("Error: {message}"));
                if event_time.is_none() {
                    self.backoff.next(&key, now, now);
                }
                self.waiting.insert(key, Waiting { reason: "CreateContainerError".into(), message, since: now });
            }
            Err(CreateOrStart::Start(message)) => {
                // The runtime recorded the failed start as an exit (StartError); the next
                // sync restarts it under back-off like any other exit.
                self.event(pod, Some(&c.name), true, "Failed", &format!("Error: {message}"));
                self.waiting.remove(&key);
            }
        }
    }

    /// A container's devices before it starts: `Some(Ok(None))` when it has none,
    /// `Some(Ok(Some(..)))` once the device manager prepared them, `None` while it works on
    /// it (the answer triggers a sync).
    fn prepared_devices(&mut self, pod: &Pod, c: &Container) -> Option<Result<Option<DeviceOptions>, String>> {
        let Some((tx, _)) = &self.devices else { return Some(Ok(None)) };
        if device_requests(c).is_empty() {
            return Some(Ok(None));
        }
        let key: backoff::Key = (pod.metadata.uid.clone(), c.name.clone());
        match self.device_prep.remove(&key) {
            Some(Some(result)) => Some(result.map(Some)),
            Some(None) => {
                self.device_prep.insert(key, None);
                None
            }
            None => {
                let _ = tx.send(DevicesCommand::Prepare { pod_uid: key.0.clone(), container: key.1.clone() });
                self.device_prep.insert(key, None);
                None
            }
        }
    }

    /// Tells the device manager which pods may hold devices, when that changed (and only
    /// once every source has reported, so nothing is freed from a pod not yet re-added).
    fn send_active_pods(&mut self) {
        let Some((tx, _)) = &self.devices else { return };
        if self.sources_seen.is_empty() {
            return;
        }
        let active = || self.pods.iter().filter(|(_, e)| !matches!(e.admission, Admission::Rejected(..)));
        let unchanged =
            active().count() == self.devices_active.len() && active().all(|(uid, _)| self.devices_active.contains(uid));
        if unchanged {
            return;
        }
        let active: HashSet<String> = active().map(|(uid, _)| uid.clone()).collect();
        let _ = tx.send(DevicesCommand::ActivePods(active.clone()));
        self.device_prep.retain(|(uid, _), _| active.contains(uid));
        self.devices_active = active;
    }

    fn create_and_start(
        &self,
        pod: &Pod,
        sandbox_id: &str,
        c: &Container,
        init: bool,
        attempt: u32,
        devices: Option<&DeviceOptions>,
    ) -> Result<(), CreateOrStart> {
        for v in c.env.iter().filter(|v| v.value_from.is_some()) {
            log::warn!(
                "pods: pod {} container {}: env {} uses valueFrom, which static pods cannot resolve; it is left empty",
                pod.key(),
                c.name,
                v.name
            );
        }
        let mut env = resolve_env(&c.env, &[]);
        if let Some(d) = devices {
            // The process runtime shares the host's filesystem: a device or mount the
            // plugin names must exist as given.
            let paths = d.devices.iter().map(|x| &x.host_path).chain(d.mounts.iter().map(|m| &m.host_path));
            if let Some(missing) = paths.into_iter().find(|p| !std::path::Path::new(p).exists()) {
                return Err(CreateOrStart::Create(format!(
                    "device path {missing} from the device plugin allocation does not exist on the host"
                )));
            }
            // Device plugin envs first, as kubelet: the container's own env wins.
            let own: HashSet<&String> = env.iter().map(|(k, _)| k).collect();
            let mut with_devices: Vec<(String, String)> =
                d.envs.iter().filter(|(k, _)| !own.contains(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
            with_devices.append(&mut env);
            env = with_devices;
        }
        let lookup = |name: &str| env.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        let argv: Vec<String> = c.command.iter().chain(&c.args).map(|a| expand(a, &lookup)).collect();
        let mut lbl = BTreeMap::new();
        lbl.insert(labels::POD_UID.to_string(), pod.metadata.uid.clone());
        lbl.insert(labels::POD_NAME.to_string(), pod.metadata.name.clone());
        lbl.insert(labels::POD_NAMESPACE.to_string(), pod.metadata.namespace.clone());
        lbl.insert(labels::CONTAINER_NAME.to_string(), c.name.clone());
        lbl.insert(CONTAINER_KIND_LABEL.to_string(), container_kind(c, init).to_string());
        let cfg = ContainerConfig {
            name: c.name.clone(),
            attempt,
            image: c.image.clone(),
            argv,
            env,
            working_dir: c.working_dir.clone(),
            log_path: self.log_dir(pod).join(&c.name).join(format!("{attempt}.log")),
            labels: lbl,
            linux: self.cm.as_ref().map(|cm| cm.container(pod, c)),
            devices: devices.cloned(),
        };
        let id = self
            .mutate()
            .create_container(sandbox_id, &cfg)
            .map_err(|e| CreateOrStart::Create(crate::util::Chain(&e).to_string()))?;
        self.event(pod, Some(&c.name), false, "Created", &format!("Created container {}", c.name));
        self.mutate().start_container(&id).map_err(|e| CreateOrStart::Start(crate::util::Chain(&e).to_string()))?;
        self.event(pod, Some(&c.name), false, "Started", &format!("Started container {}", c.name));
        Ok(())
    }

    fn stop(&self, pod: &Pod, c: &ContainerInfo, grace: Duration, message: &str) {
        self.event(pod, Some(&c.config.name), false, "Killing", message);
        if let Err(e) = self.mutate().stop_container(&c.id, grace) {
            self.event(
                pod,
                Some(&c.config.name),
                true,
                "FailedKillPod",
                &format!("error killing container {}: {}", c.config.name, crate::util::Chain(&e)),
            );
        }
    }

    /// Removes exited instances beyond the retention limit (with their logs).
    fn collect_dead(&self, uid: &str, pod: &Pod, snap: &Snapshot) {
        let names: Vec<&str> =
            pod.spec.init_containers.iter().chain(&pod.spec.containers).map(|c| c.name.as_str()).collect();
        let keep = 1 + self.cfg.max_dead_per_container as usize;
        for name in names {
            for old in snap.instances(uid, name).into_iter().skip(keep) {
                if old.state == ContainerState::Exited {
                    if let Err(e) = self.mutate().remove_container(&old.id) {
                        log::warn!(
                            "pods: pod {} container {name}: cannot remove exited instance {}: {}",
                            pod.key(),
                            old.id,
                            crate::util::Chain(&e)
                        );
                    }
                }
            }
        }
    }

    fn sync_termination(&mut self, uid: &str, snap: &Snapshot, now: SystemTime) {
        let Some(entry) = self.pods.get(uid) else {
            return;
        };
        let pod = entry.pod.clone();
        let Some(t) = entry.termination.as_ref() else {
            return;
        };
        let elapsed = now.duration_since(t.started).unwrap_or_default();
        let remaining = t.grace.saturating_sub(elapsed).max(MIN_GRACE);
        let containers: Vec<&ContainerInfo> = snap.containers.get(uid).map(|v| v.iter().collect()).unwrap_or_default();
        let running: Vec<&ContainerInfo> =
            containers.iter().copied().filter(|c| c.state == ContainerState::Running).collect();
        let is_sidecar =
            |c: &ContainerInfo| c.config.labels.get(CONTAINER_KIND_LABEL).map(String::as_str) == Some("sidecar");
        // App (and init) containers first; sidecars only once those have exited.
        let mut batch: Vec<&ContainerInfo> = running.iter().copied().filter(|c| !is_sidecar(c)).collect();
        if batch.is_empty() {
            batch = running.iter().copied().filter(|c| is_sidecar(c)).collect();
        }
        let requested = t.requested.clone();
        let overdue = elapsed > t.grace + EXCEEDED_GRACE_MARGIN && !running.is_empty() && !t.warned;
        for c in batch.iter().filter(|c| !requested.contains(&c.id)) {
            self.stop(&pod, c, remaining, &format!("Stopping container {}", c.config.name));
        }
        if overdue {
            let names: Vec<&str> = running.iter().map(|c| c.config.name.as_str()).collect();
            self.event(
                &pod,
                None,
                true,
                "ExceededGracePeriod",
                &format!(
                    "Container runtime did not kill the pod within specified grace period; still running: {}",
                    names.join(", ")
                ),
            );
        }
        if let Some(t) = self.pods.get_mut(uid).and_then(|e| e.termination.as_mut()) {
            t.requested.extend(batch.iter().map(|c| c.id.clone()));
            t.warned |= overdue;
        }
        if running.is_empty() {
            if let Some(s) = snap.sandboxes.get(uid) {
                let removed =
                    self.mutate().stop_pod_sandbox(&s.id).and_then(|_| self.mutate().remove_pod_sandbox(&s.id));
                if let Err(e) = removed {
                    log::warn!("pods: pod {}: cannot remove sandbox {}: {}", pod.key(), s.id, crate::util::Chain(&e));
                    return;
                }
            }
            for c in containers {
                let _ = self.mutate().remove_container(&c.id);
            }
            log::info!("pods: pod {} terminated and removed", pod.key());
            self.pods.remove(uid);
            self.statuses.remove(uid);
            self.cgroups_ready.remove(uid);
            if self.cm.is_some() {
                let (pods, _) = self.cm_view();
                let active: Vec<&Pod> = pods.iter().collect();
                if let Some(cm) = self.cm.as_mut() {
                    cm.remove_pod(uid, &active);
                }
            }
            self.backoff.forget_pod(uid);
            self.waiting.retain(|(u, _), _| u != uid);
            self.trim_heap = true;
        }
    }

    /// Whether a container passes its probe of this kind (or has none).
    fn probe_passes(&self, c: &Container, current: Option<&ContainerInfo>, kind: ProbeType) -> bool {
        let declared = match kind {
            ProbeType::Readiness => c.readiness_probe.is_some(),
            ProbeType::Startup => c.startup_probe.is_some(),
            ProbeType::Liveness => c.liveness_probe.is_some(),
        };
        !declared || current.is_some_and(|i| self.probe_results.get(kind, &i.id) == Some(ProbeResult::Success))
    }

    /// Every container with probes as the prober needs to see it; sent when it changed.
    fn send_probe_targets(&mut self, snap: &Snapshot) {
        let Some(tx) = &self.prober else { return };
        let mut targets = Vec::new();
        for (uid, entry) in &self.pods {
            let pod = &entry.pod;
            let phase = self.statuses.status(uid).map(|s| s.phase).unwrap_or_default();
            let policy = pod.spec.restart();
            for c in pod.spec.init_containers.iter().filter(|c| c.is_sidecar()).chain(&pod.spec.containers) {
                if c.liveness_probe.is_none() && c.readiness_probe.is_none() && c.startup_probe.is_none() {
                    continue;
                }
                let cur = snap.instances(uid, &c.name).first().map(|i| (*i).clone());
                let running = cur.as_ref().is_some_and(|i| i.state == ContainerState::Running);
                targets.push(ProbeTarget {
                    pod_uid: uid.clone(),
                    reference: Reference::container(pod, &c.name),
                    container: Arc::new(c.clone()),
                    pod_ip: self.cfg.node_ip.clone(),
                    container_id: cur.as_ref().map(|i| i.id.clone()),
                    running,
                    started_at: cur.as_ref().and_then(|i| i.started_at),
                    will_restart: c.is_sidecar() || cur.as_ref().map_or(true, |i| policy.restarts(i.exit_code)),
                    terminating: entry.termination.is_some(),
                    pod_terminal: matches!(phase.as_str(), "Succeeded" | "Failed"),
                });
            }
        }
        if targets != self.last_targets {
            let _ = tx.send(ProberCommand::Targets(targets.clone()));
            self.last_targets = targets;
        }
    }

    /// A liveness or startup probe failed for good: kill the container (it restarts under
    /// its restart policy and back-off); kubelet's `Killing` event and grace period rules.
    fn on_probe_failure(&mut self, uid: &str, name: &str, container_id: &str, kind: ProbeType) {
        let Some(entry) = self.pods.get(uid) else { return };
        if entry.termination.is_some() {
            return;
        }
        let pod = entry.pod.clone();
        let Some(spec) = pod.spec.init_containers.iter().chain(&pod.spec.containers).find(|c| c.name == name).cloned()
        else {
            return;
        };
        let Ok(containers) = self.runtime.list_containers() else { return };
        let Some(info) = containers.into_iter().find(|c| c.id == container_id && c.state == ContainerState::Running)
        else {
            return;
        };
        let probe =
            if kind == ProbeType::Liveness { spec.liveness_probe.as_ref() } else { spec.startup_probe.as_ref() };
        let pod_grace = pod.spec.grace_period_seconds();
        let grace = probe.and_then(|p| p.termination_grace_period_seconds).unwrap_or(pod_grace);
        let grace = Duration::from_secs(grace.max(0) as u64).max(MIN_GRACE);
        let restarts = spec.is_sidecar() || pod.spec.restart() != RestartPolicy::Never;
        let what = if kind == ProbeType::Liveness { "liveness" } else { "startup" };
        let message =
            format!("Container {name} failed {what} probe{}", if restarts { ", will be restarted" } else { "" });
        self.stop(&pod, &info, grace, &message);
    }

    /// Computes a pod's status from a relist and stores it for the API.
    fn publish(&self, uid: &str, snap: &Snapshot, now: SystemTime) {
        let Some(entry) = self.pods.get(uid) else {
            return;
        };
        let pod = &entry.pod;
        let observe = |c: &Container| {
            let inst = snap.instances(uid, &c.name);
            let current = inst.first().map(|i| (*i).clone());
            let running = current.as_ref().is_some_and(|i| i.state == ContainerState::Running);
            let waiting = self
                .waiting
                .get(&(uid.to_string(), c.name.clone()))
                .map(|w| (w.reason.clone(), w.message.clone()))
                .filter(|(r, _)| {
                    r != "CrashLoopBackOff" || current.as_ref().is_some_and(|i| i.state == ContainerState::Exited)
                });
            // A container with a readiness (startup) probe is ready (started) once the
            // prober says so; without the probe, once it runs.
            let ready = running && self.probe_passes(c, current.as_ref(), ProbeType::Readiness);
            let started = running && self.probe_passes(c, current.as_ref(), ProbeType::Startup);
            ContainerObservation { previous: inst.get(1).map(|i| (*i).clone()), current, waiting, ready, started }
        };
        let init: BTreeMap<String, ContainerObservation> =
            pod.spec.init_containers.iter().map(|c| (c.name.clone(), observe(c))).collect();
        let app: BTreeMap<String, ContainerObservation> =
            pod.spec.containers.iter().map(|c| (c.name.clone(), observe(c))).collect();
        let sandbox = snap.sandboxes.get(uid);
        let o = PodObservation {
            pod,
            init: &init,
            app: &app,
            sandbox_created: sandbox.map(|s| s.created_at),
            sandbox_ready: sandbox.is_some_and(|s| s.ready),
            host_ip: &self.cfg.node_ip,
            runtime: self.runtime.kind(),
        };
        let previous = self.statuses.status(uid);
        let mut new = status::pod_status(&o, previous.as_ref(), now);
        if let Admission::Rejected(reason, message) = &entry.admission {
            new.phase = "Failed".into();
            new.reason = reason.clone();
            new.message = message.clone();
        }
        if let Some((_, devices)) = self.devices.as_ref().filter(|_| pod_needs_devices(pod)) {
            for cs in new.init_container_statuses.iter_mut().chain(new.container_statuses.iter_mut()) {
                cs.allocated_resources_status = devices
                    .container_devices(uid, &cs.name)
                    .into_iter()
                    .map(|(name, ids)| ResourceStatus {
                        name,
                        resources: ids
                            .into_iter()
                            .map(|(id, healthy)| ResourceHealth {
                                resource_id: id,
                                health: if healthy { "Healthy" } else { "Unhealthy" }.into(),
                            })
                            .collect(),
                    })
                    .collect();
            }
        }
        if previous.as_ref().map(|p| &p.phase) != Some(&new.phase) {
            log::info!("pods: pod {} is {}", pod.key(), new.phase);
        }
        let mut published = pod.clone();
        if published.metadata.creation_timestamp.is_none() {
            published.metadata.creation_timestamp = new.start_time;
        }
        published.status = Some(new);
        self.statuses.set(published);
    }
}

enum CreateOrStart {
    Create(String),
    Start(String),
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
            PodsCommand::Devices(DeviceUpdate::Admitted { pod_uid, result }) => {
                let Some(entry) = self.pods.get_mut(&pod_uid).filter(|e| e.admission == Admission::Pending) else {
                    return;
                };
                // A pod whose containers already run (adopted after an agent restart with the
                // checkpoint lost) keeps running, as with kubelet's running-container rule:
                // rejecting it would leave its processes running under a Failed pod.
                let running = self.statuses.status(&pod_uid).is_some_and(|s| {
                    s.init_container_statuses.iter().chain(&s.container_statuses).any(|c| c.state.running.is_some())
                });
                match result {
                    Ok(()) => entry.admission = Admission::Admitted,
                    Err(e) if running => {
                        log::warn!(
                            "pods: pod {} already runs; admitting it without its device allocation: {e}",
                            entry.pod.key()
                        );
                        entry.admission = Admission::Admitted;
                    }
                    Err(e) => {
                        // kubelet's wording for a device allocation failure at admission.
                        let message = format!("Allocate failed due to {e}, which is unexpected");
                        log::warn!("pods: pod {} rejected: {message}", entry.pod.key());
                        entry.admission = Admission::Rejected("UnexpectedAdmissionError".into(), message.clone());
                        let pod = entry.pod.clone();
                        self.event(&pod, None, true, "UnexpectedAdmissionError", &message);
                    }
                }
                self.resync = true;
            }
            PodsCommand::Devices(DeviceUpdate::Prepared { pod_uid, container, result }) => {
                if let Some(slot) = self.device_prep.get_mut(&(pod_uid, container)) {
                    *slot = Some(result);
                    self.resync = true;
                }
            }
            PodsCommand::Update { source, pods } => {
                self.desired.retain(|_, p| {
                    p.metadata.annotations.get(crate::api::manifest::CONFIG_SOURCE_ANNOTATION).map(String::as_str)
                        != Some(source.as_str())
                });
                for p in pods {
                    self.desired.insert(p.metadata.uid.clone(), p);
                }
                self.sources_seen.insert(source);
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
        if self.cm.is_some() && !self.sources_seen.is_empty() {
            let (pods, known) = self.cm_view();
            let active: Vec<&Pod> = pods.iter().collect();
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
    // SAFETY: malloc_trim only returns free pages of the allocator's arenas to the kernel.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The content hash of a static pod (`kubernetes.io/config.hash`), none for other pods.
fn config_hash(pod: &Pod) -> Option<&str> {
    pod.metadata.annotations.get(crate::api::manifest::CONFIG_HASH_ANNOTATION).map(String::as_str)
}
