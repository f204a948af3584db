//! What a running pod needs next, decided without touching anything: kubelet's
//! `computePodActions`. From the pod's spec, the runtime's view of it, the back-off state,
//! the waiting reasons, startup probe results, device preparation and the time, it says
//! which sandbox to create, which containers to start, kill or remove, and why. The
//! executor (`sync.rs`) applies the answer; terminating pods are decided in
//! `termination.rs`.

use super::backoff::{self, Backoff, Key};
use super::devices::needs_devices;
use super::view::PodView;
use super::{ContainerKind, DevicePrep, Waiting, WaitingReason, MIN_GRACE};
use crate::api::{Container, Pod, PodSpec, RestartPolicy};
use crate::base::timefmt::go_duration;
use crate::node::runtime::{ContainerInfo, ContainerState};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

/// Everything the decision reads about one pod.
pub struct PodInput<'a> {
    /// The pod as its source wants it.
    pub pod: &'a Pod,
    /// What the runtime holds of it.
    pub view: PodView<'a>,
    /// Restart back-off of every container.
    pub backoff: &'a Backoff,
    /// Containers held back, and why.
    pub waiting: &'a HashMap<Key, Waiting>,
    /// Container ids whose startup probe succeeded (sidecars count as started then).
    pub startup_succeeded: &'a HashSet<String>,
    /// Device preparation per container; `None` when no device manager is connected.
    pub device_prep: Option<&'a HashMap<Key, DevicePrep>>,
    /// Exited instances kept per container.
    pub max_dead_per_container: u32,
    /// A `postStart` hook of the pod runs: nothing starts until it answers (kubelet's sync
    /// waits for the hook).
    pub post_start_running: bool,
    /// The time of this sync.
    pub now: SystemTime,
}

/// The pod status reason of a pod past its `activeDeadlineSeconds`.
pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
/// Its message, kubelet's.
pub const DEADLINE_EXCEEDED_MESSAGE: &str = "Pod was active on the node longer than the specified deadline";

/// Whether a pod that started at `start` has been active for its `activeDeadlineSeconds`
/// at `now` (kubelet's `pastActiveDeadline`): never without a deadline or a start time.
pub fn active_deadline_exceeded(spec: &PodSpec, start: Option<SystemTime>, now: SystemTime) -> bool {
    let (Some(limit), Some(start)) = (spec.active_deadline_seconds, start) else { return false };
    let active = now.duration_since(start).unwrap_or_default();
    active >= Duration::from_secs(limit.max(0) as u64)
}

/// Why a container is started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartReason {
    /// It has no instance yet (or its create failed).
    FirstStart,
    /// Its last instance exited, and `policy` restarts it (a sidecar's is always `Always`).
    Restart {
        /// The exit code of the last instance.
        exit_code: i32,
        /// The restart policy that applies.
        policy: RestartPolicy,
    },
    /// Its last instance was created but never started (nothing will run it).
    CreatedNeverStarted,
}

/// A container to create and start.
#[derive(Clone, Debug, PartialEq)]
pub struct StartContainer {
    /// Container name.
    pub name: String,
    /// Init, sidecar or app.
    pub kind: ContainerKind,
    /// The restart attempt of the new instance.
    pub attempt: u32,
    /// A stale `Created` instance to remove first (never created beside it: the two would
    /// share the container's cgroup).
    pub replace: Option<String>,
    /// Why.
    pub reason: StartReason,
    /// The exit (or creation, or failed create) the back-off counts from; the back-off
    /// advances from it when the container starts.
    pub backoff_from: Option<SystemTime>,
}

/// A running container to stop.
#[derive(Clone, Debug, PartialEq)]
pub struct KillContainer {
    /// Container name.
    pub name: String,
    /// Container id.
    pub id: String,
    /// SIGKILL follows SIGTERM after this.
    pub grace: Duration,
    /// The `Killing` event's message.
    pub message: String,
}

/// A container that exited and waits out its back-off.
#[derive(Clone, Debug, PartialEq)]
pub struct CrashLoop {
    /// Container name.
    pub name: String,
    /// kubelet's `back-off 20s restarting failed container=… pod=…`.
    pub message: String,
    /// A new message: record the `BackOff` event and the `CrashLoopBackOff` waiting reason
    /// (once per message, not every sync).
    pub report: bool,
}

/// An exited instance beyond the retention limit.
#[derive(Clone, Debug, PartialEq)]
pub struct DeadInstance {
    /// Container name.
    pub name: String,
    /// Instance id.
    pub id: String,
}

/// What a running pod needs next.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodActions {
    /// The pod has no ready sandbox: create one before any container (kubelet's
    /// `podSandboxChanged`; a sandbox that died is replaced once nothing runs in it).
    pub create_sandbox: bool,
    /// A sandbox is needed but waits out the back-off of the last that failed (one that
    /// could not be made, or died): a missing CNI plugin makes one try every 10 s, 20 s, …
    /// 5 min, not one a second.
    pub sandbox_back_off: bool,
    /// The pod's older sandboxes that are not ready and hold no container instance
    /// (kubelet's sandbox garbage collection keeps the newest sandbox only); none while the
    /// sandbox back-off holds.
    pub remove_sandboxes: Vec<String>,
    /// Containers to start, in order.
    pub start: Vec<StartContainer>,
    /// Containers to stop (sidecars once the app containers are done).
    pub kill: Vec<KillContainer>,
    /// Containers held back by their back-off.
    pub back_off: Vec<CrashLoop>,
    /// Containers whose devices the device manager must prepare before they start.
    pub prepare_devices: Vec<String>,
    /// Exited instances to remove.
    pub remove_dead: Vec<DeadInstance>,
    /// Nothing will start again: an init container failed under `Never`, or every app
    /// container exited for good.
    pub terminal: bool,
}

impl PodActions {
    /// Whether they ask the runtime for a call the pod workers make (a sandbox made or
    /// removed, a container started or removed); kills and back-off are the sync's own.
    pub fn ask_runtime(&self) -> bool {
        (self.create_sandbox && !self.sandbox_back_off)
            || !self.remove_sandboxes.is_empty()
            || !self.start.is_empty()
            || !self.remove_dead.is_empty()
    }
}

/// A container that should run, with its newest instance.
struct Candidate<'a> {
    spec: &'a Container,
    kind: ContainerKind,
    current: Option<&'a ContainerInfo>,
}

/// The back-off key of a pod's sandbox (no container has an empty name).
pub fn sandbox_key(uid: &str) -> crate::pods::backoff::Key {
    (uid.to_string(), String::new())
}

/// kubelet's `computePodActions` for a pod that is not terminating.
pub fn compute_pod_actions(input: &PodInput) -> PodActions {
    let pod = input.pod;
    let view = input.view;
    let policy = pod.spec.restart();
    let mut actions = PodActions { create_sandbox: view.sandbox.is_none(), ..Default::default() };
    let sandbox_held = input.backoff.in_backoff_since_update(&sandbox_key(&pod.metadata.uid), input.now);
    // Under the same back-off: a runtime that cannot tear a sandbox down (its CNI plugin
    // gone) is asked again in 10 s, 20 s, … not at every sync.
    if !sandbox_held {
        actions.remove_sandboxes = view
            .older_sandboxes
            .iter()
            .filter(|s| !s.ready && view.containers.iter().all(|c| c.sandbox_id != s.id))
            .map(|s| s.id.clone())
            .collect();
    }
    if actions.create_sandbox && sandbox_held {
        actions.create_sandbox = false;
        actions.sandbox_back_off = true;
        return actions;
    }
    if view.sandbox.is_some_and(|s| !s.ready) {
        // The sandbox died (its pause process, or its network never came up): what still
        // runs in it is stopped first, then the pod gets a new sandbox. Container instances
        // keep counting restarts across sandboxes.
        let grace = pod.spec.termination_grace().max(MIN_GRACE);
        actions.kill = view
            .running()
            .map(|i| KillContainer {
                name: i.config.name.clone(),
                id: i.id.clone(),
                grace,
                message: format!("Stopping container {}", i.config.name),
            })
            .collect();
        actions.create_sandbox = actions.kill.is_empty() && !sandbox_held;
        actions.sandbox_back_off = actions.kill.is_empty() && sandbox_held;
        if !actions.create_sandbox {
            return actions;
        }
    }
    // Once any app container exists, initialization is over for good.
    let initialized = pod.spec.containers.iter().any(|c| view.latest(&c.name).is_some());

    // Init containers, in order: a regular one must exit 0 before the next starts; a
    // sidecar must be running (and started, if it has a startup probe) before the next starts.
    let mut init_done = initialized;
    let mut init_failed = false;
    let mut candidates: Vec<Candidate> = Vec::new();
    if !initialized {
        init_done = true;
        for c in &pod.spec.init_containers {
            let current = view.latest(&c.name);
            let candidate = Candidate { spec: c, kind: ContainerKind::of(c, true), current };
            let state = current.map(|i| (i.state, i.exit_code));
            if c.is_sidecar() {
                if !matches!(state, Some((ContainerState::Running, _))) {
                    candidates.push(candidate);
                    init_done = false;
                    break;
                }
                if !sidecar_started(input, c, current) {
                    init_done = false;
                    break;
                }
                continue;
            }
            match state {
                Some((ContainerState::Exited, 0)) => continue,
                None => candidates.push(candidate),
                Some((ContainerState::Exited, _)) if policy == RestartPolicy::Never => init_failed = true,
                Some((ContainerState::Exited, _)) => candidates.push(candidate),
                // Created but never run, and nothing will run it (kubelet restarts a created
                // container whatever the restart policy).
                Some((ContainerState::Created, _)) => candidates.push(candidate),
                Some((ContainerState::Running, _)) => {}
            }
            init_done = false;
            break;
        }
    }

    let apps_finished = init_done
        && pod.spec.containers.iter().all(|c| {
            view.latest(&c.name).is_some_and(|i| i.state == ContainerState::Exited && !policy.restarts(i.exit_code))
        });
    actions.terminal = init_failed || apps_finished;

    if actions.terminal {
        // Sidecars exist to serve app containers; once those are done, sidecars stop.
        let grace = pod.spec.termination_grace().max(MIN_GRACE);
        for c in pod.spec.init_containers.iter().filter(|c| c.is_sidecar()) {
            if let Some(i) = view.latest(&c.name).filter(|i| i.state == ContainerState::Running) {
                actions.kill.push(KillContainer {
                    name: c.name.clone(),
                    id: i.id.clone(),
                    grace,
                    message: format!("Stopping container {}", c.name),
                });
            }
        }
    } else {
        if initialized {
            // Sidecars keep running next to the app containers, whatever the pod's policy.
            for c in pod.spec.init_containers.iter().filter(|c| c.is_sidecar()) {
                let current = view.latest(&c.name);
                if current.map_or(true, |i| i.state != ContainerState::Running) {
                    candidates.push(Candidate { spec: c, kind: ContainerKind::Sidecar, current });
                }
            }
        }
        if init_done {
            for c in &pod.spec.containers {
                let current = view.latest(&c.name);
                let start = current.map_or(true, |i| {
                    i.state == ContainerState::Created
                        || (i.state == ContainerState::Exited && policy.restarts(i.exit_code))
                });
                if start {
                    candidates.push(Candidate { spec: c, kind: ContainerKind::App, current });
                }
            }
        }
    }
    if !input.post_start_running {
        for candidate in candidates {
            decide_start(input, candidate, &mut actions);
        }
    }
    actions.remove_dead = dead_instances(pod, view, input.max_dead_per_container);
    actions
}

/// Whether a running sidecar counts as started: its startup probe passed, or it has none.
fn sidecar_started(input: &PodInput, c: &Container, current: Option<&ContainerInfo>) -> bool {
    c.startup_probe.is_none() || current.is_some_and(|i| input.startup_succeeded.contains(&i.id))
}

/// Starts a candidate, or holds it in back-off, or asks for its devices first.
fn decide_start(input: &PodInput, candidate: Candidate, actions: &mut PodActions) {
    let Candidate { spec: c, kind, current } = candidate;
    let pod = input.pod;
    let key: Key = (pod.metadata.uid.clone(), c.name.clone());
    let waiting = input.waiting.get(&key);
    // What the back-off counts from: the last exit, or the last failed create.
    let backoff_from = match (current, waiting) {
        // A created container that never ran counts from its creation.
        (Some(i), _) if i.state == ContainerState::Created => Some(i.created_at),
        (Some(i), _) => Some(i.finished_at.unwrap_or(input.now)),
        (None, Some(w)) if w.reason == WaitingReason::CreateContainerError => Some(w.since),
        _ => None,
    };
    if let Some(t) = backoff_from {
        if input.backoff.in_backoff_since(&key, t, input.now) {
            // A failed create keeps its CreateContainerError; an exit shows the crash loop.
            if current.is_some() {
                let delay = input.backoff.delay(&key).unwrap_or(backoff::INITIAL);
                let message = format!(
                    "back-off {} restarting failed container={} pod={}",
                    go_duration(delay),
                    c.name,
                    pod.desc()
                );
                let report =
                    waiting.map_or(true, |w| w.reason != WaitingReason::CrashLoopBackOff || w.message != message);
                actions.back_off.push(CrashLoop { name: c.name.clone(), message, report });
            }
            return;
        }
    }
    if let Some(prep) = input.device_prep.filter(|_| needs_devices(c)) {
        match prep.get(&key) {
            None => {
                actions.prepare_devices.push(c.name.clone());
                return;
            }
            // The device manager's answer triggers a sync.
            Some(DevicePrep::Requested) => return,
            Some(DevicePrep::Ready(_) | DevicePrep::Failed(_)) => {}
        }
    }
    let reason = match current {
        None => StartReason::FirstStart,
        Some(i) if i.state == ContainerState::Created => StartReason::CreatedNeverStarted,
        Some(i) => StartReason::Restart {
            exit_code: i.exit_code,
            policy: if kind == ContainerKind::Sidecar { RestartPolicy::Always } else { pod.spec.restart() },
        },
    };
    actions.start.push(StartContainer {
        name: c.name.clone(),
        kind,
        attempt: current.map_or(0, |i| i.config.attempt + 1),
        replace: current.filter(|i| i.state == ContainerState::Created).map(|i| i.id.clone()),
        reason,
        backoff_from,
    });
}

/// Exited instances beyond the newest one and `max_dead` more, per container.
fn dead_instances(pod: &Pod, view: PodView, max_dead: u32) -> Vec<DeadInstance> {
    let keep = 1 + max_dead as usize;
    pod.spec
        .init_containers
        .iter()
        .chain(&pod.spec.containers)
        .flat_map(|c| view.instances(&c.name).into_iter().skip(keep))
        .filter(|i| i.state == ContainerState::Exited)
        .map(|i| DeadInstance { name: i.config.name.clone(), id: i.id.clone() })
        .collect()
}

/// What stands between a container the pod's actions start and its create.
#[derive(Clone, Debug, PartialEq)]
pub enum Gate {
    /// A field it (or its pod) sets cannot be honoured: it waits as
    /// `CreateContainerConfigError`, with this message, and its image is not looked at.
    ConfigError(String),
    /// Its image is to be looked at (which may queue a pull and record events); decide again
    /// with the answer.
    CheckImage,
    /// Its image is not there yet (pulled, backing off, or refused): nothing else is used up.
    WaitForImage,
    /// Its devices are being prepared; the device manager's answer triggers a sync.
    WaitForDevices,
    /// Its devices cannot be prepared: its create fails with this reason, under back-off.
    DevicesFailed(String),
    /// Create it (with its prepared devices, if it asks for any).
    Create,
}

/// The checks before a container is created, in kubelet's order (its config, then its
/// image, then, ferrolet's, its devices): `refusal` is why its config cannot be made, if it
/// cannot (`api::fields::refusal`); `image_ready` the image gate's answer (`None`: not asked
/// yet); `devices` how far its devices are prepared (`None`: it asks for none).
pub fn start_gate(refusal: Option<&str>, image_ready: Option<bool>, devices: Option<&DevicePrep>) -> Gate {
    if let Some(why) = refusal {
        return Gate::ConfigError(why.to_string());
    }
    match image_ready {
        None => return Gate::CheckImage,
        Some(false) => return Gate::WaitForImage,
        Some(true) => {}
    }
    match devices {
        Some(DevicePrep::Requested) => Gate::WaitForDevices,
        Some(DevicePrep::Failed(reason)) => Gate::DevicesFailed(reason.clone()),
        Some(DevicePrep::Ready(_)) | None => Gate::Create,
    }
}
