//! Restarts and why containers wait: the restart back-off of every container (and of every
//! pod's sandbox, under `actions::sandbox_key`), and the waiting reason each container held
//! back shows in its status (a crash loop, a failed create, a config that cannot be made,
//! its image).

use super::actions::CrashLoop;
use super::actor::Actor;
use super::backoff::{Backoff, Key};
use super::{Waiting, WaitingReason};
use crate::api::Pod;
use std::collections::HashMap;
use std::time::SystemTime;

/// Back-off and waiting reasons, by (pod uid, container name).
#[derive(Default)]
pub(super) struct Restarts {
    /// Restart back-off of every container and sandbox.
    pub(super) backoff: Backoff,
    /// Containers held back, and why.
    pub(super) waiting: HashMap<Key, Waiting>,
}

impl Restarts {
    /// A container waits out its back-off: kubelet's `BackOff` event and `CrashLoopBackOff`
    /// reason, once per message.
    pub(super) fn hold_in_back_off(&mut self, act: &Actor, pod: &Pod, b: CrashLoop, now: SystemTime) {
        if !b.report {
            return;
        }
        let message = format!("Back-off restarting failed container {} in pod {}", b.name, pod.desc());
        act.event(pod, Some(&b.name), true, "BackOff", &message);
        let waiting = Waiting { reason: WaitingReason::CrashLoopBackOff, message: b.message, since: now };
        self.waiting.insert((pod.metadata.uid.clone(), b.name), waiting);
    }

    /// A container whose config cannot be made (a field it, or its pod, sets that the
    /// runtime does not honour) waits as `CreateContainerConfigError`, with a Warning
    /// `Failed` event naming why once.
    pub(super) fn hold_config_error(&mut self, act: &Actor, pod: &Pod, name: &str, why: String, now: SystemTime) {
        let key: Key = (pod.metadata.uid.clone(), name.to_string());
        let reason = WaitingReason::CreateContainerConfigError;
        if self.waiting.get(&key).is_some_and(|w| w.reason == reason && w.message == why) {
            return;
        }
        act.event(pod, Some(name), true, "Failed", &format!("Error: {why}"));
        self.waiting.insert(key, Waiting { reason, message: why, since: now });
    }

    /// A container's create failed: it waits as `CreateContainerError`, and its back-off
    /// advances unless its start already advanced it (`counted`).
    pub(super) fn create_failed(&mut self, key: Key, message: String, counted: bool, now: SystemTime) {
        if !counted {
            self.backoff.next(&key, now, now);
        }
        self.waiting.insert(key, Waiting { reason: WaitingReason::CreateContainerError, message, since: now });
    }

    /// Forgets every container of a removed pod.
    pub(super) fn forget_pod(&mut self, uid: &str) {
        self.backoff.forget_pod(uid);
        self.waiting.retain(|(u, _), _| u != uid);
    }
}
