//! The pod workers (kubelet's pod workers, for the runtime's slow calls). What one sync asks
//! of the runtime for one pod — its old sandboxes removed, a new sandbox, its containers
//! created and started, exited instances removed, or its removal — is one `PodWork`, made
//! in order by `run` on one of at most `MAX_WORKERS` threads (`fl-pod-worker`) that take
//! works from one queue (`manager::JobQueue`), so the sandboxes and containers of different
//! pods start side by side. Each answer comes back to `fl-pods` as a `WorkDone`
//! (`PodsCommand::Work`), which applies it (events, back-off, hooks, the pod's removal) and
//! syncs again, as pulls answer (`images.rs`).
//!
//! One pod's steps stay in order: the sync skips a pod whose work is in flight until its
//! answer is in (`turn`). A work is decided only when a worker is free to make it, so it is
//! never stale, and what a sync decides before a work (its events, its back-off) is never
//! decided twice: a pod whose actions ask the runtime waits while every worker is busy, and
//! the next answer syncs it. The sync visits the pods the runtime already holds first
//! (`order`), so a pod whose sandbox was just made gets its containers before another pod
//! gets a sandbox: pods come up one after another, side by side, not all at the end. A work
//! is a few whole runtime calls; a worker told to stop ends between two of them, never
//! inside one, leaving what the runtime records (a sandbox, a container created and not
//! started) for the next agent to adopt or replace, as after a crash.
//!
//! Without workers (the process runtime, whose calls take milliseconds) the sync thread
//! makes each work itself and applies its answer at once.

use crate::base::manager::{Health, JobError, JobQueue, Publisher, StopTimeout};
use crate::node::runtime::{ContainerConfig, ContainerRuntime, RuntimeError, SandboxConfig};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// The name of the worker threads.
pub const THREAD: &str = "fl-pod-worker";
/// Works made at once, each on a thread of its own. containerd makes a sandbox or starts a
/// container in 0.1–0.2 s, mostly in runc and the shims it starts, on the node's CPUs: on
/// two cores, the calls of 20 pods made directly (one pod after another on each thread) end
/// after 3.9 s from 1 thread, 2.4 s from 2, 2.0–2.3 s from 4, 2.1–2.7 s from 8 and 2.5 s
/// from 20, the first pod later the more threads (`benches/cri.rs`, `at-once`).
pub const MAX_WORKERS: usize = 4;
/// Works waiting for a thread: the pod manager hands out no more than `MAX_WORKERS` at
/// once, but a thread that has answered may not yet have taken the next.
pub const MAX_QUEUED: usize = MAX_WORKERS;

/// A sandbox to make.
#[derive(Debug)]
pub struct NewSandbox {
    /// The pod's dead sandbox, stopped and removed first (it holds no container instance);
    /// while it cannot be, no new one is made.
    pub remove_dead: Option<String>,
    /// It replaces a dead one, whose death advanced the pod's sandbox back-off already.
    pub replaces_dead: bool,
    /// What it is made with.
    pub config: SandboxConfig,
}

/// A container to create and start.
#[derive(Debug)]
pub struct NewContainer {
    /// Its instance that was created but never started, removed first (never created beside
    /// it: the two would share the container's cgroup); while it cannot be, this one is not
    /// created.
    pub replace: Option<String>,
    /// What it is created with.
    pub config: ContainerConfig,
    /// Its start advanced its restart back-off already (a failed create does not again).
    pub counted: bool,
}

/// A container instance to remove.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    /// Container name.
    pub name: String,
    /// Instance id.
    pub id: String,
}

/// What one sync asks of the runtime for one pod, made in this order (kubelet's `SyncPod`
/// once `computePodActions` has decided, or `killPod`'s removal).
#[derive(Debug, Default)]
pub struct PodWork {
    /// The pod's uid.
    pub uid: String,
    /// Sandboxes to stop and remove, in turn until one cannot be: the pod's older dead ones,
    /// or, for its removal, every one.
    pub remove_sandboxes: Vec<String>,
    /// A new sandbox (its containers are started by the next work, once it is listed).
    pub sandbox: Option<NewSandbox>,
    /// The sandbox `start` is in.
    pub sandbox_id: String,
    /// Containers to create and start, in order.
    pub start: Vec<NewContainer>,
    /// Container instances to remove: exited ones past the retention limit, or, for the
    /// pod's removal, what is left of its containers.
    pub remove_containers: Vec<Instance>,
    /// The pod's removal: a sandbox that cannot be removed ends the work (its containers
    /// stay, and the pod is kept, to be removed at a later sync); once all of it is gone the
    /// pod is forgotten.
    pub removal: bool,
}

impl PodWork {
    /// Work for pod `uid`, nothing asked yet.
    pub fn new(uid: &str) -> PodWork {
        PodWork { uid: uid.into(), ..PodWork::default() }
    }

    /// What it asks, for the log: `a sandbox`, `2 container start(s)`, `its removal`, ….
    pub fn describe(&self) -> String {
        if self.removal {
            return "its removal".into();
        }
        let mut parts = Vec::new();
        if !self.remove_sandboxes.is_empty() {
            parts.push(format!("{} old sandbox removal(s)", self.remove_sandboxes.len()));
        }
        match &self.sandbox {
            Some(s) if s.remove_dead.is_some() => parts.push("a sandbox in place of its dead one".into()),
            Some(_) => parts.push("a sandbox".into()),
            None => {}
        }
        if !self.start.is_empty() {
            parts.push(format!("{} container start(s)", self.start.len()));
        }
        if !self.remove_containers.is_empty() {
            parts.push(format!("{} exited instance removal(s)", self.remove_containers.len()));
        }
        parts.join(", ")
    }

    /// Whether it makes any runtime call.
    pub fn calls(&self) -> bool {
        !self.remove_sandboxes.is_empty()
            || self.sandbox.is_some()
            || !self.start.is_empty()
            || !self.remove_containers.is_empty()
    }

    /// Whether there is nothing to do: no call, and not a removal (whose answer forgets the
    /// pod, calls or none).
    pub fn is_empty(&self) -> bool {
        !self.removal && !self.calls()
    }
}

/// Why a new sandbox was not made.
#[derive(Debug)]
pub enum SandboxFailure {
    /// The dead sandbox it replaces could not be removed.
    DeadLeft(RuntimeError),
    /// `RunPodSandbox` failed.
    Run(RuntimeError),
}

/// How one container's start went.
#[derive(Debug)]
pub enum Started {
    /// Its stale instance could not be removed; it was not created.
    StaleLeft(RuntimeError),
    /// Its create failed.
    CreateFailed(RuntimeError),
    /// Created (this id), but its start failed (the runtime recorded it as an exit).
    StartFailed(String, RuntimeError),
    /// Created and started (this id).
    Running(String),
}

/// What a work did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The first sandbox of `remove_sandboxes` that could not be removed, with why.
    pub sandbox_left: Option<(String, RuntimeError)>,
    /// The new sandbox's id, or why it was not made.
    pub sandbox: Option<Result<String, SandboxFailure>>,
    /// Each container of `start`, in order (fewer when the work ended early).
    pub started: Vec<Started>,
    /// Instances of `remove_containers` that could not be removed, with why.
    pub containers_left: Vec<(Instance, RuntimeError)>,
    /// The work ended early, between two calls, because the agent is stopping: what is not
    /// answered above was not asked.
    pub stopped: bool,
}

/// A work has answered.
#[derive(Debug)]
pub struct WorkDone {
    /// The work, as asked.
    pub work: PodWork,
    /// What it did.
    pub outcome: Outcome,
}

/// Makes `work`'s calls in order through `runtime`; `stopping` is asked before each call,
/// and once it says so the rest is left undone. The thin executor: every decision was made
/// before, by the sync.
pub fn run(runtime: &dyn ContainerRuntime, work: PodWork, stopping: &dyn Fn() -> bool) -> WorkDone {
    let mut out = Outcome::default();
    out.stopped = make(runtime, &work, &mut out, stopping).is_none();
    WorkDone { work, outcome: out }
}

/// `run`'s calls; `None` when it stopped early.
fn make(runtime: &dyn ContainerRuntime, work: &PodWork, out: &mut Outcome, stopping: &dyn Fn() -> bool) -> Option<()> {
    let go = || (!stopping()).then_some(());
    for id in &work.remove_sandboxes {
        go()?;
        if let Err(e) = remove_sandbox(runtime, id) {
            out.sandbox_left = Some((id.clone(), e));
            break;
        }
    }
    if work.removal && out.sandbox_left.is_some() {
        return Some(());
    }
    if let Some(s) = &work.sandbox {
        go()?;
        let removed = s.remove_dead.as_deref().map_or(Ok(()), |id| remove_sandbox(runtime, id));
        out.sandbox = Some(match removed {
            Err(e) => Err(SandboxFailure::DeadLeft(e)),
            Ok(()) => {
                go()?;
                runtime.run_pod_sandbox(&s.config).map_err(SandboxFailure::Run)
            }
        });
    }
    for c in &work.start {
        go()?;
        out.started.push(start(runtime, &work.sandbox_id, c, &go)?);
    }
    for i in &work.remove_containers {
        go()?;
        if let Err(e) = runtime.remove_container(&i.id) {
            out.containers_left.push((i.clone(), e));
        }
    }
    Some(())
}

/// Stops and removes one sandbox.
fn remove_sandbox(runtime: &dyn ContainerRuntime, id: &str) -> Result<(), RuntimeError> {
    runtime.stop_pod_sandbox(id).and_then(|_| runtime.remove_pod_sandbox(id))
}

/// One container: its stale instance removed, then created, then started; `None` when the
/// agent began stopping between two of these calls.
fn start(
    runtime: &dyn ContainerRuntime,
    sandbox_id: &str,
    c: &NewContainer,
    go: &dyn Fn() -> Option<()>,
) -> Option<Started> {
    if let Some(stale) = &c.replace {
        if let Err(e) = runtime.remove_container(stale) {
            return Some(Started::StaleLeft(e));
        }
        go()?;
    }
    let id = match runtime.create_container(sandbox_id, &c.config) {
        Ok(id) => id,
        Err(e) => return Some(Started::CreateFailed(e)),
    };
    go()?;
    Some(match runtime.start_container(&id) {
        Ok(()) => Started::Running(id),
        Err(e) => Started::StartFailed(id, e),
    })
}

/// Where works are handed to (the `PodWorkers`; a recorder in tests).
pub trait WorkSink: Send + Sync {
    /// Queues `work`; its answer comes back as a `WorkDone` later. Refused when the queue is
    /// full or closed.
    fn submit(&self, work: PodWork) -> Result<(), JobError>;
    /// The most works the pod manager hands out at once (a worker free for each).
    fn capacity(&self) -> usize;
}

/// The worker threads (`fl-pod-worker`): at most `MAX_WORKERS`, taking works from one queue
/// of at most `MAX_QUEUED`.
pub struct PodWorkers {
    jobs: JobQueue,
    runtime: Arc<dyn ContainerRuntime>,
    done: Publisher<WorkDone>,
}

impl PodWorkers {
    /// Workers over `runtime` (no thread runs until a work comes), publishing each answer
    /// through `done`; their threads are registered in `health`.
    pub fn new(runtime: Arc<dyn ContainerRuntime>, done: Publisher<WorkDone>, health: &Health) -> PodWorkers {
        PodWorkers { jobs: JobQueue::new(THREAD, MAX_WORKERS, MAX_QUEUED, health), runtime, done }
    }

    /// Drops the works waiting (nothing of them was asked of the runtime), lets each thread
    /// end its work at its next call, and joins them within `timeout`; returns the ones that
    /// did not end in time (inside one runtime call, which ends by its own deadline).
    pub fn stop(&self, timeout: Duration) -> Vec<StopTimeout> {
        let dropped = self.jobs.close();
        if dropped > 0 {
            log::info!("pods: {dropped} pod work(s) not begun (the agent is stopping); the next start does them");
        }
        self.jobs.stop(timeout)
    }
}

impl WorkSink for PodWorkers {
    fn submit(&self, work: PodWork) -> Result<(), JobError> {
        let (runtime, done) = (self.runtime.clone(), self.done.clone());
        self.jobs.submit(Box::new(move |stop| done.publish(run(&*runtime, work, &|| stop.is_stopped()))))
    }

    fn capacity(&self) -> usize {
        MAX_WORKERS
    }
}

/// What a pod's sync may do now, as far as work in flight goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// Go on.
    Sync,
    /// Nothing: its work is in flight, and its answer syncs it again.
    InFlight,
    /// Nothing that asks the runtime: every worker is busy, and the next answer syncs it.
    Full,
}

/// The pod manager's side of the workers: where works go, and which pods have one in flight.
#[derive(Default)]
pub(super) struct Workers {
    /// The workers; `None`: works are made on the sync thread.
    pub(super) sink: Option<Arc<dyn WorkSink>>,
    /// Pods whose work is in flight.
    in_flight: HashSet<String>,
}

impl Workers {
    /// Whether pod `uid` may be synced now, its actions asking the runtime (`asks`) or not:
    /// not while its own work is in flight (one pod's steps stay in order), and not for a
    /// work while every worker is busy (the work is decided when it can be made).
    pub(super) fn turn(&self, uid: &str, asks: bool) -> Turn {
        let capacity = self.sink.as_ref().map_or(usize::MAX, |s| s.capacity());
        turn(&self.in_flight, uid, asks, capacity)
    }

    /// `work` was handed to the workers.
    pub(super) fn sent(&mut self, uid: &str) {
        self.in_flight.insert(uid.into());
    }

    /// The work of pod `uid` answered.
    pub(super) fn answered(&mut self, uid: &str) {
        self.in_flight.remove(uid);
    }
}

/// `Workers::turn`, over the pods with work in flight and the most works the workers take.
pub(super) fn turn(in_flight: &HashSet<String>, uid: &str, asks: bool, capacity: usize) -> Turn {
    if in_flight.contains(uid) {
        Turn::InFlight
    } else if asks && in_flight.len() >= capacity {
        Turn::Full
    } else {
        Turn::Sync
    }
}

/// The order a sync visits pods in: first those the runtime holds something of (running,
/// starting, stopping), then the others (not begun), each in uid order. A pod whose sandbox
/// was just made so gets a free worker before a pod not begun.
pub(super) fn order<'a, T>(uids: &'a [String], held: &HashMap<String, T>) -> Vec<&'a String> {
    let mut order: Vec<&String> = uids.iter().collect();
    order.sort_by_key(|uid| !held.contains_key(*uid));
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::clock::FakeClock;
    use crate::node::runtime::fake::{Call, FakeRuntime};
    use std::cell::Cell;
    use std::time::UNIX_EPOCH;

    fn runtime() -> FakeRuntime {
        FakeRuntime::new(FakeClock::new(UNIX_EPOCH + Duration::from_secs(1_700_000_000)))
    }

    fn sandbox(name: &str) -> SandboxConfig {
        SandboxConfig { pod_uid: format!("uid-{name}"), pod_name: name.into(), ..Default::default() }
    }

    fn container(name: &str) -> NewContainer {
        let config = ContainerConfig { name: name.into(), argv: vec!["sleep".into()], ..Default::default() };
        NewContainer { replace: None, config, counted: false }
    }

    #[test]
    fn a_pod_in_flight_waits_for_its_answer_and_busy_workers_hold_only_pods_that_ask_the_runtime() {
        let in_flight: HashSet<String> = ["a".to_string()].into();
        // (pod, asks the runtime, workers) → turn
        let table = [
            ("a", false, 8, Turn::InFlight),
            ("a", true, 8, Turn::InFlight),
            ("a", true, 1, Turn::InFlight),
            ("b", true, 8, Turn::Sync),
            ("b", true, 2, Turn::Sync),
            ("b", true, 1, Turn::Full),
            ("b", false, 1, Turn::Sync),
        ];
        for (uid, asks, workers, want) in table {
            assert_eq!(turn(&in_flight, uid, asks, workers), want, "{uid} asking {asks}, {workers} worker(s)");
        }
    }

    #[test]
    fn pods_the_runtime_holds_are_synced_before_pods_not_begun() {
        let uids: Vec<String> = ["a", "b", "c", "d"].iter().map(|s| s.to_string()).collect();
        let held: HashMap<String, ()> = [("b".to_string(), ()), ("d".to_string(), ())].into();
        assert_eq!(order(&uids, &held), ["b", "d", "a", "c"]);
    }

    #[test]
    fn a_work_makes_its_calls_in_order() {
        let rt = runtime();
        let id = rt.run_pod_sandbox(&sandbox("web")).unwrap();
        let old = rt.create_container(&id, &container("old").config).unwrap();
        rt.stop_container(&old, Duration::ZERO).unwrap();
        let stale = rt.create_container(&id, &container("web").config).unwrap();
        rt.take_calls();
        let mut work = PodWork::new("uid-web");
        work.sandbox_id = id;
        work.start = vec![NewContainer { replace: Some(stale), ..container("web") }, container("log")];
        work.remove_containers = vec![Instance { name: "old".into(), id: old }];
        let done = run(&rt, work, &|| false);
        assert_eq!(
            rt.take_calls(),
            [
                Call::RemoveContainer("web".into()),
                Call::CreateContainer("web".into(), 0),
                Call::StartContainer("web".into()),
                Call::CreateContainer("log".into(), 0),
                Call::StartContainer("log".into()),
                Call::RemoveContainer("old".into()),
            ]
        );
        assert!(matches!(done.outcome.started[..], [Started::Running(_), Started::Running(_)]));
        assert!(done.outcome.containers_left.is_empty() && !done.outcome.stopped);
    }

    #[test]
    fn a_failed_create_or_start_is_answered_and_the_next_container_still_starts() {
        let rt = runtime();
        let id = rt.run_pod_sandbox(&sandbox("web")).unwrap();
        rt.fail_create("a", 1);
        rt.fail_start("b", 1);
        let mut work = PodWork::new("uid-web");
        work.sandbox_id = id;
        work.start = vec![container("a"), container("b"), container("c")];
        let done = run(&rt, work, &|| false);
        assert!(matches!(
            done.outcome.started[..],
            [Started::CreateFailed(_), Started::StartFailed(..), Started::Running(_)]
        ));
    }

    #[test]
    fn a_dead_sandbox_that_cannot_be_removed_keeps_the_new_one_from_being_made() {
        let rt = runtime();
        let mut work = PodWork::new("uid-web");
        work.sandbox =
            Some(NewSandbox { remove_dead: Some("gone".into()), replaces_dead: true, config: sandbox("web") });
        let done = run(&rt, work, &|| false);
        assert!(matches!(done.outcome.sandbox, Some(Err(SandboxFailure::DeadLeft(_)))));
        // The stop of a sandbox the runtime does not know (a fake's has no pod name) failed.
        assert_eq!(rt.take_calls(), [Call::StopPodSandbox(String::new())], "and no RunPodSandbox");
    }

    #[test]
    fn a_removal_ends_at_the_first_sandbox_that_cannot_be_removed() {
        let rt = runtime();
        let id = rt.run_pod_sandbox(&sandbox("web")).unwrap();
        rt.take_calls();
        let mut work = PodWork::new("uid-web");
        work.removal = true;
        work.remove_sandboxes = vec!["gone".into(), id];
        work.remove_containers = vec![Instance { name: "web".into(), id: "c1".into() }];
        let done = run(&rt, work, &|| false);
        assert_eq!(done.outcome.sandbox_left.as_ref().map(|(id, _)| id.as_str()), Some("gone"));
        assert_eq!(
            rt.take_calls(),
            [Call::StopPodSandbox(String::new())],
            "the unknown one's stop failed; neither the next sandbox nor the containers"
        );
        assert!(!done.outcome.stopped);
    }

    #[test]
    fn a_worker_told_to_stop_ends_between_two_calls() {
        let rt = runtime();
        let id = rt.run_pod_sandbox(&sandbox("web")).unwrap();
        rt.take_calls();
        let mut work = PodWork::new("uid-web");
        work.sandbox_id = id;
        work.start = vec![container("a"), container("b")];
        // Stopping once the first call is made: after CreateContainer, before its start.
        let asked = Cell::new(0);
        let done = run(&rt, work, &|| {
            asked.set(asked.get() + 1);
            asked.get() > 1
        });
        assert_eq!(rt.take_calls(), [Call::CreateContainer("a".into(), 0)]);
        assert!(done.outcome.stopped && done.outcome.started.is_empty());
    }
}
