//! Lifecycle hooks and the pod's active deadline, as the pod manager drives them (kubelet's
//! `startContainer` step 4, `killContainer` with `executePreStopHook`, and the active
//! deadline handler). Hooks run on the hook threads; this side starts them, holds back what
//! must wait for them, and acts on their answers:
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

use super::actions::{active_deadline_exceeded, KillContainer, DEADLINE_EXCEEDED, DEADLINE_EXCEEDED_MESSAGE};
use super::view::Snapshot;
use super::{PodFailure, PodManager, RunningHook, Termination, MIN_GRACE};
use crate::api::{Container, LifecycleHandler, Pod};
use crate::lifecycle::{HookDone, HookKind, HookRequest, POST_START_TIMEOUT};
use crate::util::Chain;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How long past its bound a hook may stay unanswered before the pod manager goes on
/// without it (its thread ends by the same bound; this only covers a lost answer).
const HOOK_ANSWER_MARGIN: Duration = Duration::from_secs(2);

impl PodManager {
    /// Whether a `postStart` hook of the pod runs (nothing else of it starts meanwhile).
    pub(super) fn post_start_running(&self, uid: &str) -> bool {
        self.post_start.values().any(|h| h.pod_uid == uid)
    }

    /// Whether the container instance's `postStart` hook runs.
    pub(super) fn in_post_start(&self, container_id: &str) -> bool {
        self.post_start.contains_key(container_id)
    }

    /// The request for one of `c`'s hooks.
    fn hook_request(
        &self,
        pod: &Pod,
        c: &Container,
        id: &str,
        kind: HookKind,
        handler: &LifecycleHandler,
        timeout: Duration,
    ) -> HookRequest {
        let uid = &pod.metadata.uid;
        let pod_ip = self.statuses.with_status(uid, |s| s.map(|s| s.pod_ip.clone()).filter(|ip| !ip.is_empty()));
        HookRequest {
            kind,
            pod_uid: uid.clone(),
            pod_desc: pod.desc(),
            pod_ip: pod_ip.unwrap_or_else(|| self.cfg.node_ip.clone()),
            container: Arc::new(c.clone()),
            container_id: id.into(),
            handler: handler.clone(),
            timeout,
        }
    }

    /// Starts `c`'s `postStart` hook, if it has one, for the instance `id` just started.
    pub(super) fn start_post_start(&mut self, pod: &Pod, c: &Container, id: &str, now: SystemTime) {
        let (Some(handler), Some(hooks)) = (c.post_start(), self.hooks.clone()) else { return };
        let req = self.hook_request(pod, c, id, HookKind::PostStart, handler, POST_START_TIMEOUT);
        let hook = RunningHook {
            pod_uid: pod.metadata.uid.clone(),
            name: c.name.clone(),
            started: now,
            grace: POST_START_TIMEOUT,
        };
        match hooks.submit(req) {
            Ok(()) => {
                self.post_start.insert(id.into(), hook);
            }
            // A hook that cannot run has failed: the container must not run without it.
            Err(e) => self.post_start_failed(pod, &c.name, id, &Chain(&e).to_string()),
        }
    }

    /// kubelet's answer to a failed `postStart`: the event, then the kill.
    fn post_start_failed(&mut self, pod: &Pod, name: &str, id: &str, message: &str) {
        self.event(pod, Some(name), true, "FailedPostStartHook", message);
        let kill = KillContainer {
            name: name.into(),
            id: id.into(),
            grace: pod.spec.termination_grace().max(MIN_GRACE),
            message: "FailedPostStartHook".into(),
        };
        self.kill(pod, &kill);
    }

    /// Asks a container to stop: kubelet's `Killing` event; its `preStop` hook first when it
    /// has one (once per instance), else the stop at once (`FailedKillPod` when refused).
    /// Returns whether the stop (or its hook) is under way: a refused one is asked again.
    pub(super) fn kill(&mut self, pod: &Pod, k: &KillContainer) -> bool {
        if self.pre_stop.contains_key(&k.id) {
            // Its hook runs; the stop follows the answer.
            return true;
        }
        self.event(pod, Some(&k.name), false, "Killing", &k.message);
        let spec = pod.spec.init_containers.iter().chain(&pod.spec.containers).find(|c| c.name == k.name);
        let hook = spec.and_then(|c| c.pre_stop().map(|h| (c, h)));
        if let (Some((c, handler)), Some(hooks)) = (hook, self.hooks.clone()) {
            if !self.pre_stop_done.contains(&k.id) {
                let now = self.clock.now();
                // The stop's deadline first, so it holds even if this agent dies during the hook.
                if let Err(e) = self.mutate().arm_stop(&k.id, now + k.grace, MIN_GRACE) {
                    log::warn!(
                        "pods: pod {} container {}: cannot set the stop's deadline: {}",
                        pod.key(),
                        k.name,
                        Chain(&e)
                    );
                }
                let req = self.hook_request(pod, c, &k.id, HookKind::PreStop, handler, k.grace);
                match hooks.submit(req) {
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
                        self.event(pod, Some(&k.name), true, "FailedPreStopHook", "PreStopHook failed");
                    }
                }
            }
        }
        self.stop(pod, &k.name, &k.id, k.grace)
    }

    /// The stop itself (SIGTERM now, SIGKILL after `grace`); whether the runtime took it.
    fn stop(&self, pod: &Pod, name: &str, id: &str, grace: Duration) -> bool {
        match self.mutate().stop_container(id, grace) {
            Ok(()) => true,
            Err(e) => {
                let message = format!("error killing container {name}: {}", Chain(&e));
                self.event(pod, Some(name), true, "FailedKillPod", &message);
                false
            }
        }
    }

    /// A hook answered.
    pub(super) fn on_hook_done(&mut self, done: HookDone) {
        let now = self.clock.now();
        let HookDone { kind, pod_uid, container_id, result } = done;
        let Some(pod) = self.pods.get(&pod_uid).map(|e| e.pod.clone()) else { return };
        match kind {
            HookKind::PostStart => {
                // Gone from the map: the container stopped meanwhile, or was given up on.
                let Some(hook) = self.post_start.remove(&container_id) else { return };
                if let Err(message) = result {
                    self.post_start_failed(&pod, &hook.name, &container_id, &message);
                }
            }
            HookKind::PreStop => {
                let Some(hook) = self.pre_stop.remove(&container_id) else { return };
                if let Err(message) = result {
                    // The message stays in the log: the event says only that it failed, as
                    // kubelet's (a command's output may hold secrets).
                    log::warn!("pods: pod {} container {}: {message}", pod.key(), hook.name);
                    self.event(&pod, Some(&hook.name), true, "FailedPreStopHook", "PreStopHook failed");
                }
                self.finish_pre_stop(&pod, &container_id, hook, now);
            }
        }
    }

    /// After the `preStop` hook: the stop, with what the hook left of the grace period.
    fn finish_pre_stop(&mut self, pod: &Pod, id: &str, hook: RunningHook, now: SystemTime) {
        let took = now.duration_since(hook.started).unwrap_or_default();
        let grace = hook.grace.saturating_sub(took).max(MIN_GRACE);
        self.pre_stop_done.insert(id.into());
        // A refused stop is asked again by the pod's termination, whose deadline holds.
        self.stop(pod, &hook.name, id, grace);
    }

    /// Forgets the hooks of containers that no longer run, and goes on without a hook whose
    /// answer is overdue (its bound passed by `HOOK_ANSWER_MARGIN`).
    pub(super) fn sweep_hooks(&mut self, snap: &Snapshot, now: SystemTime) {
        // Not exited yet (a container just started may still be reported as created).
        let running = |id: &String| {
            snap.containers.values().flatten().any(|c| &c.id == id && c.state != crate::runtime::ContainerState::Exited)
        };
        self.post_start.retain(|id, _| running(id));
        self.pre_stop_done.retain(running);
        let overdue =
            |h: &RunningHook| now.duration_since(h.started).unwrap_or_default() > h.grace + HOOK_ANSWER_MARGIN;
        let late_pre_stop: Vec<String> =
            self.pre_stop.iter().filter(|(_, h)| overdue(h)).map(|(id, _)| id.clone()).collect();
        for id in late_pre_stop {
            let Some(hook) = self.pre_stop.remove(&id) else { continue };
            if let Some(pod) = self.pods.get(&hook.pod_uid).map(|e| e.pod.clone()) {
                log::warn!(
                    "pods: pod {} container {}: no answer from its preStop hook; stopping it",
                    pod.key(),
                    hook.name
                );
                self.finish_pre_stop(&pod, &id, hook, now);
            }
        }
        let late_post_start: Vec<String> =
            self.post_start.iter().filter(|(_, h)| overdue(h)).map(|(id, _)| id.clone()).collect();
        for id in late_post_start {
            let Some(hook) = self.post_start.remove(&id) else { continue };
            if let Some(pod) = self.pods.get(&hook.pod_uid).map(|e| e.pod.clone()) {
                let message =
                    format!("postStart hook of container {} gave no answer within {:?}", hook.name, hook.grace);
                self.post_start_failed(&pod, &hook.name, &id, &message);
            }
        }
    }

    /// Fails the pod when it has been active longer than its `activeDeadlineSeconds`
    /// (kubelet's `DeadlineExceeded`): its containers are stopped from now on, and it is
    /// never started again. True when it did.
    pub(super) fn check_active_deadline(&mut self, uid: &str, now: SystemTime) -> bool {
        let Some(entry) = self.pods.get(uid) else { return false };
        let start = self.statuses.with_status(uid, |s| s.and_then(|s| s.start_time)).map(|t| t.0);
        if !active_deadline_exceeded(&entry.pod.spec, start, now) {
            return false;
        }
        let pod = entry.pod.clone();
        // kubelet records this as a Normal event.
        self.event(&pod, None, false, DEADLINE_EXCEEDED, DEADLINE_EXCEEDED_MESSAGE);
        if let Some(e) = self.pods.get_mut(uid) {
            e.failure = Some(PodFailure {
                reason: DEADLINE_EXCEEDED,
                message: DEADLINE_EXCEEDED_MESSAGE.into(),
                stopping: Termination::new(now, pod.spec.termination_grace()),
            });
        }
        true
    }
}
