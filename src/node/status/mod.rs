//! Pod status: container states, phase and conditions computed from what the runtime
//! reports, shaped exactly like Kubernetes `PodStatus`, and the cache the local API reads.

use crate::api::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus,
    ObjectMeta, Pod, PodCondition, PodIp, PodPhase, PodStatus, RestartPolicy, Time,
};
use crate::node::runtime::{self, ContainerInfo};
use parking_lot::{RwLock, RwLockUpgradableReadGuard};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

/// Pod condition types, as the API spells them.
pub mod health;

pub mod condition {
    /// The sandbox is ready.
    pub const POD_READY_TO_START_CONTAINERS: &str = "PodReadyToStartContainers";
    /// Every init container completed (sidecars: started).
    pub const INITIALIZED: &str = "Initialized";
    /// The pod serves: every container (and sidecar) is ready.
    pub const READY: &str = "Ready";
    /// Every container (and sidecar) is ready.
    pub const CONTAINERS_READY: &str = "ContainersReady";
    /// Always true: a pod on this node is scheduled.
    pub const POD_SCHEDULED: &str = "PodScheduled";
}

/// Reasons the status shows, as kubelet words them.
pub mod reason {
    /// A container is being created (or the init containers are done and it waits its turn).
    pub const CONTAINER_CREATING: &str = "ContainerCreating";
    /// A container waits for the init containers.
    pub const POD_INITIALIZING: &str = "PodInitializing";
    /// `Initialized` is false.
    pub const CONTAINERS_NOT_INITIALIZED: &str = "ContainersNotInitialized";
    /// `Ready` is false while the pod runs.
    pub const CONTAINERS_NOT_READY: &str = "ContainersNotReady";
    /// `Ready` is false because the pod succeeded.
    pub const POD_COMPLETED: &str = "PodCompleted";
    /// `Ready` is false because the pod failed.
    pub const POD_FAILED: &str = "PodFailed";
}

/// What the pod manager knows about one container of a pod.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerObservation {
    /// The newest instance.
    pub current: Option<ContainerInfo>,
    /// The instance before it, for `lastState`.
    pub previous: Option<ContainerInfo>,
    /// Why the container is waiting, when the pod manager holds it back (reason, message).
    pub waiting: Option<(String, String)>,
    /// Readiness (probe result, or running when there is no readiness probe).
    pub ready: bool,
    /// Started (startup probe passed, or running when there is none).
    pub started: bool,
}

/// Everything needed to compute one pod's status.
pub struct PodObservation<'a> {
    /// The pod.
    pub pod: &'a Pod,
    /// Init containers, by name.
    pub init: &'a BTreeMap<String, ContainerObservation>,
    /// App containers, by name.
    pub app: &'a BTreeMap<String, ContainerObservation>,
    /// Sandbox creation time, if it exists.
    pub sandbox_created: Option<SystemTime>,
    /// Whether the sandbox is ready.
    pub sandbox_ready: bool,
    /// The node address.
    pub host_ip: &'a str,
    /// The sandbox's IPs on the pod network; empty on the host network (a host-network pod,
    /// or any pod of the process runtime, has the node's address).
    pub sandbox_ips: &'a [String],
    /// The runtime kind, for container ids.
    pub runtime: &'a str,
}

fn terminated(info: &ContainerInfo, runtime: &str) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: info.exit_code,
        signal: None,
        reason: info.reason.clone(),
        message: info.message.clone(),
        started_at: info.started_at.map(Time),
        finished_at: info.finished_at.map(Time),
        container_id: format!("{runtime}://{}", info.id),
    }
}

/// A container's status from its observation; `pending_reason` is the waiting reason when
/// nothing has been created yet (`PodInitializing` or `ContainerCreating`).
pub fn container_status(
    spec: &Container,
    obs: &ContainerObservation,
    runtime: &str,
    pending_reason: &str,
) -> ContainerStatus {
    let mut st = ContainerStatus {
        name: spec.name.clone(),
        image: spec.image.clone(),
        ready: obs.ready,
        started: Some(obs.started),
        ..Default::default()
    };
    if let Some(prev) = &obs.previous {
        st.last_state.terminated = Some(terminated(prev, runtime));
    }
    match &obs.current {
        None => {
            let (reason, message) = obs.waiting.clone().unwrap_or_else(|| (pending_reason.into(), String::new()));
            st.state.waiting = Some(ContainerStateWaiting { reason, message });
        }
        Some(cur) => {
            st.container_id = format!("{runtime}://{}", cur.id);
            st.image_id = cur.image_ref.clone();
            st.restart_count = cur.config.attempt as i32;
            match cur.state {
                runtime::ContainerState::Created => {
                    st.state.waiting = Some(ContainerStateWaiting {
                        reason: reason::CONTAINER_CREATING.into(),
                        message: String::new(),
                    });
                }
                runtime::ContainerState::Running => {
                    st.state.running = Some(ContainerStateRunning { started_at: cur.started_at.map(Time) });
                }
                runtime::ContainerState::Exited => {
                    if let Some((reason, message)) = &obs.waiting {
                        // Held back (crash loop): the exit moves to lastState.
                        st.state.waiting =
                            Some(ContainerStateWaiting { reason: reason.clone(), message: message.clone() });
                        st.last_state =
                            ContainerState { terminated: Some(terminated(cur, runtime)), ..Default::default() };
                    } else {
                        st.state.terminated = Some(terminated(cur, runtime));
                    }
                }
            }
        }
    }
    st
}

fn exited_ok(s: &ContainerStatus) -> bool {
    s.state.terminated.as_ref().is_some_and(|t| t.exit_code == 0)
}

/// kubelet's `getPhase`: the pod phase from its spec and container statuses.
pub fn pod_phase(pod: &Pod, init: &[ContainerStatus], app: &[ContainerStatus]) -> PodPhase {
    let spec = &pod.spec;
    let mut pending_init = 0;
    let mut failed_init = 0;
    for c in &spec.init_containers {
        let Some(s) = init.iter().find(|s| s.name == c.name) else {
            pending_init += 1;
            continue;
        };
        if c.is_sidecar() {
            if !(app_started(app) || s.state.running.is_some() && s.started == Some(true)) {
                pending_init += 1;
            }
            continue;
        }
        if let Some(t) = &s.state.terminated {
            if t.exit_code != 0 {
                failed_init += 1;
            }
        } else if s.state.waiting.is_some() && s.last_state.terminated.as_ref().is_some_and(|t| t.exit_code != 0) {
            failed_init += 1;
        } else {
            pending_init += 1;
        }
    }
    let (mut unknown, mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    for c in &spec.containers {
        let Some(s) = app.iter().find(|s| s.name == c.name) else {
            unknown += 1;
            continue;
        };
        if s.state.running.is_some() {
            running += 1;
        } else if let Some(t) = &s.state.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if s.state.waiting.is_some() {
            if s.last_state.terminated.is_some() {
                stopped += 1;
            } else {
                waiting += 1;
            }
        } else {
            unknown += 1;
        }
    }
    if failed_init > 0 && spec.restart() == RestartPolicy::Never {
        return PodPhase::Failed;
    }
    if pending_init > 0 || failed_init > 0 {
        return PodPhase::Pending;
    }
    if waiting > 0 {
        return PodPhase::Pending;
    }
    if running > 0 && unknown == 0 {
        return PodPhase::Running;
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        if spec.restart() == RestartPolicy::Always {
            return PodPhase::Running;
        }
        if stopped == succeeded {
            return PodPhase::Succeeded;
        }
        if spec.restart() == RestartPolicy::Never {
            return PodPhase::Failed;
        }
        return PodPhase::Running;
    }
    PodPhase::Pending
}

fn app_started(app: &[ContainerStatus]) -> bool {
    app.iter().any(|s| s.state.waiting.is_none() || s.last_state.terminated.is_some())
}

fn condition(type_: &str, ok: bool, reason: &str, message: String) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        last_probe_time: None,
        last_transition_time: None,
        reason: if ok { String::new() } else { reason.into() },
        message: if ok { String::new() } else { message },
    }
}

/// kubelet's `DisruptionTarget` condition of a pod it evicted at `at`: reason
/// `TerminationByKubelet`, the eviction's message.
pub fn disruption_target(message: &str, at: SystemTime) -> PodCondition {
    PodCondition {
        type_: "DisruptionTarget".into(),
        status: "True".into(),
        last_probe_time: None,
        last_transition_time: Some(Time(at)),
        reason: crate::node::eviction::DISRUPTION_REASON.into(),
        message: message.into(),
    }
}

/// Computes the whole status. `previous` keeps condition transition times stable.
pub fn pod_status(o: &PodObservation, previous: Option<&PodStatus>, now: SystemTime) -> PodStatus {
    let pod = o.pod;
    let app_created = o.app.values().any(|c| c.current.is_some());
    let init: Vec<ContainerStatus> = pod
        .spec
        .init_containers
        .iter()
        .map(|c| {
            container_status(
                c,
                o.init.get(&c.name).unwrap_or(&ContainerObservation::default()),
                o.runtime,
                reason::POD_INITIALIZING,
            )
        })
        .collect();
    let init_done = pod.spec.init_containers.iter().zip(&init).all(|(c, s)| {
        if c.is_sidecar() {
            s.started == Some(true) && s.state.running.is_some()
        } else {
            exited_ok(s)
        }
    }) || app_created;
    let pending = if init_done { reason::CONTAINER_CREATING } else { reason::POD_INITIALIZING };
    let app: Vec<ContainerStatus> = pod
        .spec
        .containers
        .iter()
        .map(|c| {
            container_status(c, o.app.get(&c.name).unwrap_or(&ContainerObservation::default()), o.runtime, pending)
        })
        .collect();
    let phase = pod_phase(pod, &init, &app);

    let incomplete: Vec<&str> =
        pod.spec
            .init_containers
            .iter()
            .zip(&init)
            .filter(|(c, s)| {
                if c.is_sidecar() {
                    !(s.started == Some(true) && s.state.running.is_some())
                } else {
                    !exited_ok(s)
                }
            })
            .map(|(c, _)| c.name.as_str())
            .collect();
    let unready: Vec<&str> = pod
        .spec
        .init_containers
        .iter()
        .zip(&init)
        .filter(|(c, s)| c.is_sidecar() && !s.ready)
        .map(|(c, _)| c.name.as_str())
        .chain(app.iter().filter(|s| !s.ready).map(|s| s.name.as_str()))
        .collect();
    let terminal = phase.is_terminal();
    let ready_reason = match phase {
        PodPhase::Succeeded => reason::POD_COMPLETED,
        PodPhase::Failed => reason::POD_FAILED,
        _ => reason::CONTAINERS_NOT_READY,
    };
    let ready_msg =
        if terminal { String::new() } else { format!("containers with unready status: [{}]", unready.join(" ")) };
    let all_ready = unready.is_empty() && !terminal;
    let mut conditions = vec![
        condition(condition::POD_READY_TO_START_CONTAINERS, o.sandbox_ready, "", String::new()),
        condition(
            condition::INITIALIZED,
            init_done,
            reason::CONTAINERS_NOT_INITIALIZED,
            format!("containers with incomplete status: [{}]", incomplete.join(" ")),
        ),
        condition(condition::READY, all_ready, ready_reason, ready_msg.clone()),
        condition(condition::CONTAINERS_READY, all_ready, ready_reason, ready_msg),
        condition(condition::POD_SCHEDULED, true, "", String::new()),
    ];
    for c in &mut conditions {
        let before = previous.and_then(|p| p.conditions.iter().find(|x| x.type_ == c.type_));
        c.last_transition_time = match before {
            Some(b) if b.status == c.status => b.last_transition_time,
            _ => Some(Time(now)),
        };
    }
    let ips = |ip: &str| {
        if ip.is_empty() {
            vec![]
        } else {
            vec![PodIp { ip: ip.into() }]
        }
    };
    // The process runtime has no network isolation: every pod lives on the host network.
    let on_host_network = pod.spec.host_network || o.runtime == "process";
    let pod_ips: Vec<PodIp> = if !o.sandbox_ips.is_empty() {
        o.sandbox_ips.iter().map(|ip| PodIp { ip: ip.clone() }).collect()
    } else if on_host_network {
        ips(o.host_ip)
    } else {
        // On the pod network, with no IP (yet): none shown, as kubelet.
        vec![]
    };
    PodStatus {
        phase,
        conditions,
        host_ip: o.host_ip.into(),
        host_ips: ips(o.host_ip),
        pod_ip: pod_ips.first().map(|p| p.ip.clone()).unwrap_or_default(),
        pod_ips,
        start_time: o.sandbox_created.map(Time).or(previous.and_then(|p| p.start_time)),
        init_container_statuses: init,
        container_statuses: app,
        qos_class: crate::node::cm::qos::pod_qos(pod).as_str().into(),
        ..Default::default()
    }
}

/// Whether the container runtime answers the pod manager's relists: written by `fl-pods`,
/// read for the Node's `Ready` condition (kubelet's `runtimeState`): a runtime away for
/// `RuntimeHealth::DOWN_AFTER` makes the node NotReady, "container runtime is down", so no
/// more pods are scheduled onto a node that cannot run them.
#[derive(Clone, Debug, Default)]
pub struct RuntimeHealth(Arc<parking_lot::Mutex<Option<(SystemTime, String)>>>);

impl RuntimeHealth {
    /// kubelet's `maxWaitForContainerRuntime`.
    pub const DOWN_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

    /// The runtime has not answered since `since`, because of `why`.
    pub fn away(&self, since: SystemTime, why: String) {
        *self.0.lock() = Some((since, why));
    }

    /// The runtime answers.
    pub fn back(&self) {
        *self.0.lock() = None;
    }

    /// The node's problem at `now`, when the runtime has been away too long.
    pub fn problem(&self, now: SystemTime) -> Option<String> {
        let (since, why) = self.0.lock().clone()?;
        let away = now.duration_since(since).unwrap_or_default();
        (away >= Self::DOWN_AFTER)
            .then(|| format!("container runtime is down: no answer for {}s: {why}", away.as_secs()))
    }
}

/// The latest status of every pod, keyed by uid; written by the pod manager, read by the API.
#[derive(Clone, Default)]
pub struct StatusCache {
    pods: Arc<RwLock<BTreeMap<String, Stored>>>,
    /// Pods stored or removed so far.
    writes: Arc<AtomicU64>,
    /// The uids removed and not yet taken (`take_removed`), the newest `MAX_REMOVED`.
    removed: Arc<parking_lot::Mutex<std::collections::VecDeque<String>>>,
}

/// The most removals kept for `take_removed`.
const MAX_REMOVED: usize = 4096;

/// One pod as the cache shows it: the very object it was published from (shared with the
/// pod manager, not copied: an `Arc` never changes while it is shared), its creation time
/// and its status (shared with the readers that list it).
#[derive(Clone)]
struct Stored {
    pod: Arc<Pod>,
    created: Option<Time>,
    status: Arc<PodStatus>,
}

impl Stored {
    /// The pod as the API shows it.
    fn to_pod(&self) -> Pod {
        let mut pod = Pod::clone(&self.pod);
        pod.metadata.creation_timestamp = self.created;
        pod.status = Some(PodStatus::clone(&self.status));
        pod
    }
}

/// Every pod at one moment, sorted by namespace and name, without a copy of any: it
/// serializes as the list of pods the API shows, making each pod (spec and status together)
/// only while it is written out, so `/pods` on 500 pods does not hold 500 copies at once.
pub struct Listed(Vec<Stored>);

impl Listed {
    /// The pods, each made as the API shows it.
    pub fn pods(&self) -> impl Iterator<Item = Pod> + '_ {
        self.0.iter().map(Stored::to_pod)
    }
}

impl serde::Serialize for Listed {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.pods())
    }
}

impl StatusCache {
    /// Stores `pod` with `status`, its creation time defaulted to the status's start time,
    /// unless the stored copy already shows exactly that: a pod that did not change costs a
    /// comparison (not even that when it is published from the same object as last time).
    /// Returns whether it was stored.
    pub fn publish(&self, pod: &Arc<Pod>, status: PodStatus) -> bool {
        let created = pod.metadata.creation_timestamp.or(status.start_time);
        // Upgradable: readers of other pods are not held up by the comparison, and no other
        // writer can come in between it and the store.
        let pods = self.pods.upgradable_read();
        if let Some(old) = pods.get(&pod.metadata.uid).filter(|old| *old.status == status && old.created == created) {
            if Arc::ptr_eq(&old.pod, pod) {
                return false;
            }
            if same_but_status_and_creation(&old.pod, pod) {
                // The same pod in a new object: hold that one, so the old can be freed.
                if let Some(old) = RwLockUpgradableReadGuard::upgrade(pods).get_mut(&pod.metadata.uid) {
                    old.pod = Arc::clone(pod);
                }
                return false;
            }
        }
        let stored = Stored { pod: Arc::clone(pod), created, status: Arc::new(status) };
        RwLockUpgradableReadGuard::upgrade(pods).insert(pod.metadata.uid.clone(), stored);
        self.writes.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Forgets a pod.
    pub fn remove(&self, uid: &str) {
        self.pods.write().remove(uid);
        let mut removed = self.removed.lock();
        if removed.len() == MAX_REMOVED {
            removed.pop_front();
        }
        removed.push_back(uid.to_string());
        drop(removed);
        self.writes.fetch_add(1, Ordering::Relaxed);
    }

    /// The uids of pods removed since the last call (the pod manager is done with them:
    /// cluster mode then deletes a pod the apiserver is deleting).
    pub fn take_removed(&self) -> Vec<String> {
        self.removed.lock().drain(..).collect()
    }

    /// How many times a pod was stored or removed: equal counts mean nothing changed.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// One pod's last status.
    pub fn status(&self, uid: &str) -> Option<PodStatus> {
        self.pods.read().get(uid).map(|p| PodStatus::clone(&p.status))
    }

    /// Runs `f` on one pod's last status, without copying it (the cache is read-locked
    /// meanwhile, so `f` must not write to it).
    pub fn with_status<T>(&self, uid: &str, f: impl FnOnce(Option<&PodStatus>) -> T) -> T {
        f(self.pods.read().get(uid).map(|p| &*p.status))
    }

    /// One pod's last phase (without copying its status).
    pub fn phase(&self, uid: &str) -> Option<PodPhase> {
        self.pods.read().get(uid).map(|p| p.status.phase)
    }

    /// Every pod, sorted by namespace and name (the cache is read-locked only to take them).
    pub fn list(&self) -> Listed {
        let mut pods: Vec<Stored> = self.pods.read().values().cloned().collect();
        pods.sort_by(|a, b| {
            let (a, b) = (&a.pod.metadata, &b.pod.metadata);
            (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name))
        });
        Listed(pods)
    }

    /// Every pod with its last status, in no order, shared (not copied).
    pub fn pods_and_statuses(&self) -> Vec<(Arc<Pod>, Arc<PodStatus>)> {
        self.pods.read().values().map(|p| (Arc::clone(&p.pod), Arc::clone(&p.status))).collect()
    }

    /// Every pod's last status, in no order.
    pub fn statuses(&self) -> Vec<Arc<PodStatus>> {
        self.pods.read().values().map(|p| Arc::clone(&p.status)).collect()
    }
}

/// Whether `a` and `b` are the same object apart from their status and creation time.
fn same_but_status_and_creation(a: &Pod, b: &Pod) -> bool {
    // Destructured, so a field added to either type cannot be forgotten here.
    let Pod { api_version, kind, metadata, spec, status: _ } = a;
    let ObjectMeta {
        name,
        namespace,
        uid,
        labels,
        annotations,
        creation_timestamp: _,
        deletion_timestamp,
        deletion_grace_period_seconds,
        resource_version,
    } = metadata;
    let m = &b.metadata;
    *api_version == b.api_version
        && *kind == b.kind
        && *name == m.name
        && *namespace == m.namespace
        && *uid == m.uid
        && *labels == m.labels
        && *annotations == m.annotations
        && *deletion_timestamp == m.deletion_timestamp
        && *deletion_grace_period_seconds == m.deletion_grace_period_seconds
        && *resource_version == m.resource_version
        && *spec == b.spec
}

#[cfg(test)]
mod tests;
