//! Lifecycle hooks as the pod manager drives them (kubelet's `startContainer` step 4 and
//! `killContainer` with `executePreStopHook`), and every kill of a container goes through
//! here. Hooks run on the hook threads; this side starts them, holds back what must wait
//! for them, and acts on their answers:
//!
//! * `postStart`: started right after the container. While it runs the container counts
//!   as neither started nor ready, its probes wait, and no other container of the pod
//!   starts (kubelet's sync waits for the hook). A failure is `FailedPostStartHook`, and
//!   the container is killed; it restarts under its policy and back-off.
//! * `preStop`: every kill of a running container with one (termination, a failed probe, a
//!   failed `postStart`, a dead sandbox, the active deadline) runs it first. The runtime is
//!   told the stop's deadline first (`arm_stop`), so the grace period holds even if the
//!   agent dies during the hook. When it answers (or its grace is used up) the container is
//!   stopped with what is left of the grace period, at least `MIN_GRACE`.

use super::actions::KillContainer;
use super::actor::Actor;
use super::view::Snapshot;
use super::{PodEntry, RunningHook, MIN_GRACE};
use crate::api::{Container, LifecycleHandler, Pod};
use crate::base::errors::Chain;
use crate::node::lifecycle::{HookDone, HookKind, HookRequest, HookSink, POST_START_TIMEOUT};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How long past its bound a hook may stay unanswered before the pod manager goes on
/// without it (its thread ends by the same bound; this only covers a lost answer).
const HOOK_ANSWER_MARGIN: Duration = Duration::from_secs(2);

/// The hooks running, and the stops that wait for them.
#[derive(Default)]
pub(super) struct Hooks {
    /// Where lifecycle hooks run; `None`: hooks are not run (unit tests that do not ask).
    pub(super) sink: Option<Arc<dyn HookSink>>,
    /// `postStart` hooks running, by container id.
    post_start: HashMap<String, RunningHook>,
    /// `preStop` hooks running, by container id (each container's stop waits for its hook).
    pre_stop: HashMap<String, RunningHook>,
    /// Running containers whose `preStop` hook has run (a later kill only stops them).
    pre_stop_done: HashSet<String>,
}

impl Hooks {
    /// Whether a `postStart` hook of the pod runs (nothing else of it starts meanwhile).
    pub(super) fn post_start_running(&self, uid: &str) -> bool {
        self.post_start.values().any(|h| h.pod_uid == uid)
    }

    /// Whether container `name` of `pod`, once started, holds back the pod's next
    /// containers: it has a `postStart` hook to run.
    pub(super) fn holds_next(&self, pod: &Pod, name: &str) -> bool {
        let spec = pod.spec.init_containers.iter().chain(&pod.spec.containers).find(|c| c.name == name);
        self.sink.is_some() && spec.is_some_and(|c| c.post_start().is_some())
    }

    /// Whether the container instance's `postStart` hook runs.
    pub(super) fn in_post_start(&self, container_id: &str) -> bool {
        self.post_start.contains_key(container_id)
    }

    /// Starts `c`'s `postStart` hook, if it has one, for the instance `id` just started.
    pub(super) fn start_post_start(&mut self, act: &mut Actor, pod: &Pod, c: &Container, id: &str, now: SystemTime) {
        let (Some(handler), Some(sink)) = (c.post_start(), self.sink.clone()) else { return };
        let req = hook_request(act, pod, c, id, HookKind::PostStart, handler, POST_START_TIMEOUT);
        let hook = RunningHook {
            pod_uid: pod.metadata.uid.clone(),
            name: c.name.clone(),
            started: now,
            grace: POST_START_TIMEOUT,
        };
        match sink.submit(req) {
            Ok(()) => {
                self.post_start.insert(id.into(), hook);
            }
            // A hook that cannot run has failed: the container must not run without it.
            Err(e) => self.post_start_failed(act, pod, &c.name, id, &Chain(&e).to_string()),
        }
    }

    /// kubelet's answer to a failed `postStart`: the event, then the kill.
    fn post_start_failed(&mut self, act: &mut Actor, pod: &Pod, name: &str, id: &str, message: &str) {
        act.event(pod, Some(name), true, "FailedPostStartHook", message);
        let kill = KillContainer {
            name: name.into(),
            id: id.into(),
            grace: pod.spec.termination_grace().max(MIN_GRACE),
            message: "FailedPostStartHook".into(),
        };
        self.kill(act, pod, &kill);
    }

    /// Asks a container to stop: kubelet's `Killing` event; its `preStop` hook first when it
    /// has one (once per instance), else the stop at once (`FailedKillPod` when refused).
    /// Returns whether the stop (or its hook) is under way: a refused one is asked again.
    pub(super) fn kill(&mut self, act: &mut Actor, pod: &Pod, k: &KillContainer) -> bool {
        if self.pre_stop.contains_key(&k.id) {
            // Its hook runs; the stop follows the answer.
            return true;
        }
        act.event(pod, Some(&k.name), false, "Killing", &k.message);
        let spec = pod.spec.init_containers.iter().chain(&pod.spec.containers).find(|c| c.name == k.name);
        let hook = spec.and_then(|c| c.pre_stop().map(|h| (c, h)));
        if let (Some((c, handler)), Some(sink)) = (hook, self.sink.clone()) {
            if !self.pre_stop_done.contains(&k.id) {
                let now = act.clock.now();
                // The stop's deadline first, so it holds even if this agent dies during the hook.
                if let Err(e) = act.mutate().arm_stop(&k.id, now + k.grace, MIN_GRACE) {
                    log::warn!(
                        "pods: pod {} container {}: cannot set the stop's deadline: {}",
                        pod.key(),
                        k.name,
                        Chain(&e)
                    );
                }
                let req = hook_request(act, pod, c, &k.id, HookKind::PreStop, handler, k.grace);
                match sink.submit(req) {
                    Ok(()) => {
                        let hook = RunningHook {
                            pod_uid: pod.metadata.uid.clone(),
                            name: k.name.clone(),
                            started: now,
                            grace: k.grace,
                        };
                        self.pre_stop.insert(k.id.clone(), hook);
                        return true;
                    }
                    Err(e) => {
                        log::warn!("pods: pod {} container {}: preStop hook not run: {}", pod.key(), k.name, Chain(&e));
                        act.event(pod, Some(&k.name), true, "FailedPreStopHook", "PreStopHook failed");
                    }
                }
            }
        }
        stop(act, pod, &k.name, &k.id, k.grace)
    }

    /// A hook of one of `pod`'s containers answered.
    pub(super) fn on_done(&mut self, act: &mut Actor, pod: &Pod, done: HookDone) {
        let now = act.clock.now();
        let HookDone { kind, container_id, result, .. } = done;
        match kind {
            HookKind::PostStart => {
                // Gone from the map: the container stopped meanwhile, or was given up on.
                let Some(hook) = self.post_start.remove(&container_id) else { return };
                if let Err(message) = result {
                    self.post_start_failed(act, pod, &hook.name, &container_id, &message);
                }
            }
            HookKind::PreStop => {
                let Some(hook) = self.pre_stop.remove(&container_id) else { return };
                if let Err(message) = result {
                    // The message stays in the log: the event says only that it failed, as
                    // kubelet's (a command's output may hold secrets).
                    log::warn!("pods: pod {} container {}: {message}", pod.key(), hook.name);
                    act.event(pod, Some(&hook.name), true, "FailedPreStopHook", "PreStopHook failed");
                }
                self.finish_pre_stop(act, pod, &container_id, hook, now);
            }
        }
    }

    /// After the `preStop` hook: the stop, with what the hook left of the grace period.
    fn finish_pre_stop(&mut self, act: &mut Actor, pod: &Pod, id: &str, hook: RunningHook, now: SystemTime) {
        let took = now.duration_since(hook.started).unwrap_or_default();
        let grace = hook.grace.saturating_sub(took).max(MIN_GRACE);
        self.pre_stop_done.insert(id.into());
        // A refused stop is asked again by the pod's termination, whose deadline holds.
        stop(act, pod, &hook.name, id, grace);
    }

    /// Forgets the hooks of containers that no longer run, and goes on without a hook whose
    /// answer is overdue (its bound passed by `HOOK_ANSWER_MARGIN`).
    pub(super) fn sweep(
        &mut self,
        act: &mut Actor,
        pods: &BTreeMap<String, PodEntry>,
        snap: &Snapshot,
        now: SystemTime,
    ) {
        // Not exited yet (a container just started may still be reported as created).
        let running = |id: &String| {
            snap.containers
                .values()
                .flatten()
                .any(|c| &c.id == id && c.state != crate::node::runtime::ContainerState::Exited)
        };
        self.post_start.retain(|id, _| running(id));
        self.pre_stop_done.retain(running);
        let overdue =
            |h: &RunningHook| now.duration_since(h.started).unwrap_or_default() > h.grace + HOOK_ANSWER_MARGIN;
        let late_pre_stop: Vec<String> =
            self.pre_stop.iter().filter(|(_, h)| overdue(h)).map(|(id, _)| id.clone()).collect();
        for id in late_pre_stop {
            let Some(hook) = self.pre_stop.remove(&id) else { continue };
            if let Some(pod) = pods.get(&hook.pod_uid).map(|e| e.pod.clone()) {
                log::warn!(
                    "pods: pod {} container {}: no answer from its preStop hook; stopping it",
                    pod.key(),
                    hook.name
                );
                self.finish_pre_stop(act, &pod, &id, hook, now);
            }
        }
        let late_post_start: Vec<String> =
            self.post_start.iter().filter(|(_, h)| overdue(h)).map(|(id, _)| id.clone()).collect();
        for id in late_post_start {
            let Some(hook) = self.post_start.remove(&id) else { continue };
            if let Some(pod) = pods.get(&hook.pod_uid).map(|e| e.pod.clone()) {
                let message =
                    format!("postStart hook of container {} gave no answer within {:?}", hook.name, hook.grace);
                self.post_start_failed(act, &pod, &hook.name, &id, &message);
            }
        }
    }
}

/// The request for one of `c`'s hooks.
fn hook_request(
    act: &Actor,
    pod: &Pod,
    c: &Container,
    id: &str,
    kind: HookKind,
    handler: &LifecycleHandler,
    timeout: Duration,
) -> HookRequest {
    let uid = &pod.metadata.uid;
    let pod_ip = act.statuses.with_status(uid, |s| s.map(|s| s.pod_ip.clone()).filter(|ip| !ip.is_empty()));
    HookRequest {
        kind,
        pod_uid: uid.clone(),
        pod_desc: pod.desc(),
        pod_ip: pod_ip.unwrap_or_else(|| act.cfg.node_ip.clone()),
        container: Arc::new(c.clone()),
        container_id: id.into(),
        handler: handler.clone(),
        timeout,
    }
}

/// The stop itself (SIGTERM now, SIGKILL after `grace`); whether the runtime took it.
fn stop(act: &mut Actor, pod: &Pod, name: &str, id: &str, grace: Duration) -> bool {
    match act.mutate().stop_container(id, grace) {
        Ok(()) => true,
        Err(e) => {
            let message = format!("error killing container {name}: {}", Chain(&e));
            act.event(pod, Some(name), true, "FailedKillPod", &message);
            false
        }
    }
}
