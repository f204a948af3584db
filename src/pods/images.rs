//! The pod manager's side of images: before a container (or a pod's sandbox) is created its
//! image must be there. `images::decide` says what to do; this file does it — records
//! kubelet's events and waiting reasons, hands pulls to the pull threads, and takes their
//! answers (`PodsCommand::Images`). The sync thread never waits for a pull: a container
//! whose image is being pulled is simply not started yet, and the answer triggers a sync.

use super::actor::Actor;
use super::backoff::{Backoff, Key};
use super::restarts::Restarts;
use super::{PodEntry, Waiting, WaitingReason};
use crate::api::{Container, Pod};
use crate::base::errors::Chain;
use crate::node::images::keyring::{candidates, Keyring};
use crate::node::images::{decide, message, reason, ImageAction, ImageState, PullDone, PullPolicy, PullRequest};
use crate::node::objects::{Kind, Known, ObjectRef, ObjectsView};
use crate::node::runtime::PullAuth;
use crossbeam_channel::{Sender, TrySendError};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::SystemTime;

/// The container name under which a pod's sandbox image is tracked (no container is named
/// so: names are DNS labels).
const SANDBOX: &str = "";

/// A container (or a sandbox) waiting for a pull.
#[derive(Debug)]
struct Requester {
    key: Key,
    /// When it asked (the `Pulled` event's time "including waiting").
    since: SystemTime,
    /// `Always` with the image present and no credentials: a failed pull starts it from the
    /// present image.
    fallback: bool,
}

/// What the pod manager keeps about images (only with a runtime that has them).
pub(super) struct Images {
    /// The pull threads' queue.
    tx: Sender<PullRequest>,
    /// Pulls in flight by `pull_key`, with who waits for each (emptied, not removed, when their
    /// pods go: the answer then finds nobody).
    pulls: HashMap<String, Vec<Requester>>,
    /// Containers whose pull for their next start has answered.
    pulled: HashSet<Key>,
    /// Containers (and sandboxes) whose next start was looked ahead at (`pull_ahead`): not
    /// again until that start, whose gate looks anyway.
    looked_ahead: HashSet<Key>,
    /// kubelet's image back-off, per (pod uid, image): 10 s doubling to 300 s.
    backoff: Backoff,
}

impl Images {
    /// Image bookkeeping over the pull threads' queue.
    pub(super) fn new(tx: Sender<PullRequest>) -> Images {
        Images {
            tx,
            pulls: HashMap::new(),
            pulled: HashSet::new(),
            looked_ahead: HashSet::new(),
            backoff: Backoff::default(),
        }
    }

    /// How many pulls in flight, answered pulls, looks ahead and back-off entries are kept.
    #[cfg(test)]
    pub(super) fn tracked(&self) -> (usize, usize, usize, usize) {
        let waiting = self.pulls.values().map(Vec::len).sum();
        (waiting, self.pulled.len(), self.looked_ahead.len(), self.backoff.entries())
    }

    /// Forgets a removed pod: its back-off, its answered pulls, its place in pulls in flight.
    pub(super) fn forget_pod(&mut self, uid: &str) {
        self.backoff.forget_pod(uid);
        self.pulled.retain(|(u, _)| u != uid);
        self.looked_ahead.retain(|(u, _)| u != uid);
        for waiting in self.pulls.values_mut() {
            waiting.retain(|r| r.key.0 != uid);
        }
    }
}

/// Why the image gate is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Look {
    /// For a start now: a usable image is used (and said).
    Start,
    /// Ahead of a start: only a pull is queued.
    Ahead,
}

/// What tells a pull of `image` for `pod` apart: pods with the same pull secrets (or none)
/// share one pull of an image; a pod with other secrets gets its own, with its credentials.
fn pull_key(image: &str, pod: &Pod) -> String {
    if pod.spec.image_pull_secrets.is_empty() {
        return image.to_string();
    }
    let names: Vec<&str> = pod.spec.image_pull_secrets.iter().map(|r| r.name.as_str()).collect();
    format!("{image} with pull secrets {}/{}", pod.metadata.namespace, names.join(","))
}

/// The largest node credentials file read (`<state_dir>/config.json`).
const MAX_NODE_CONFIG: u64 = 1 << 20;

/// The credentials to try for `image`, as kubelet's keyring gives them: those of the pod's
/// `imagePullSecrets` (of type `kubernetes.io/dockerconfigjson` or `kubernetes.io/dockercfg`)
/// in order, then the node's `config.json` (`<state_dir>/config.json`, as kubelet reads one
/// in its root directory). Secrets that cannot be read are said once per pull
/// (`FailedToRetrieveImagePullSecret`), and the pull goes on without them.
fn credentials(act: &Actor, pod: &Pod, objects: &ObjectsView, image: &str) -> Vec<PullAuth> {
    let mut keyrings = Vec::new();
    let mut missing = Vec::new();
    for r in &pod.spec.image_pull_secrets {
        let secret = ObjectRef { kind: Kind::Secret, namespace: pod.metadata.namespace.clone(), name: r.name.clone() };
        let Known::Found(o) = objects.object(&secret) else {
            missing.push(r.name.as_str());
            continue;
        };
        let parsed = match o.type_.as_str() {
            "kubernetes.io/dockerconfigjson" => {
                o.data.get(".dockerconfigjson").map(|d| Keyring::parse_dockerconfigjson(d))
            }
            "kubernetes.io/dockercfg" => o.data.get(".dockercfg").map(|d| Keyring::parse_dockercfg(d)),
            _ => None,
        };
        match parsed {
            Some(Ok(k)) => keyrings.push(k),
            Some(Err(e)) => log::warn!("pods: pod {}: pull secret {} cannot be read: {}", pod.key(), r.name, Chain(&e)),
            None => log::warn!(
                "pods: pod {}: pull secret {} is of type {:?}, not kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg with its key; not used",
                pod.key(),
                r.name,
                o.type_
            ),
        }
    }
    if !missing.is_empty() {
        let message = format!(
            "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
            missing.join(", ")
        );
        act.event(pod, None, true, "FailedToRetrieveImagePullSecret", &message);
    }
    let path = &act.cfg.registry_config;
    let node = crate::base::inputfile::check(path, MAX_NODE_CONFIG)
        .ok()
        .and_then(|_| std::fs::read(path).ok())
        .map(|data| Keyring::parse_dockerconfigjson(&data));
    match node {
        Some(Ok(k)) => keyrings.push(k),
        Some(Err(e)) => log::warn!("images: {} cannot be read: {}; pulls go without it", path.display(), Chain(&e)),
        None => {}
    }
    candidates(&keyrings.iter().collect::<Vec<_>>(), image)
}

/// The key under which container `c` (or, for `None`, the pod's sandbox) waits for its image.
fn key_of(pod: &Pod, c: Option<&Container>) -> Key {
    (pod.metadata.uid.clone(), c.map_or(SANDBOX, |c| c.name.as_str()).to_string())
}

impl Images {
    /// Whether container `c` (or, for `None`, the pod's sandbox) may be created now as far
    /// as its image goes. When not, what happens meanwhile is done here: a pull is queued
    /// or joined, or the container waits with kubelet's reason (events once per change).
    pub(super) fn gate(
        &mut self,
        act: &Actor,
        restarts: &mut Restarts,
        pod: &Pod,
        c: Option<&Container>,
        now: SystemTime,
        objects: &ObjectsView,
    ) -> bool {
        let key = key_of(pod, c);
        self.looked_ahead.remove(&key);
        self.look(Look::Start, act, restarts, pod, c, now, objects)
    }

    /// Looks ahead at the image a later start of `c` (or of the pod's sandbox) needs, while
    /// the pod waits for a pod worker or for its sandbox: the pull is queued now, as the
    /// gate would queue it, so no pull waits for a worker; an image that is there is left
    /// for the start to use and say (`Pulled`). Once per start: a pod waits through many
    /// syncs, and the start's gate looks again.
    pub(super) fn pull_ahead(
        &mut self,
        act: &Actor,
        restarts: &mut Restarts,
        pod: &Pod,
        c: Option<&Container>,
        now: SystemTime,
        objects: &ObjectsView,
    ) {
        let key = key_of(pod, c);
        if self.looked_ahead.insert(key) {
            self.look(Look::Ahead, act, restarts, pod, c, now, objects);
        }
    }

    /// `gate`, or `pull_ahead`.
    #[allow(clippy::too_many_arguments)]
    fn look(
        &mut self,
        look: Look,
        act: &Actor,
        restarts: &mut Restarts,
        pod: &Pod,
        c: Option<&Container>,
        now: SystemTime,
        objects: &ObjectsView,
    ) -> bool {
        let (image, policy) = match c {
            Some(c) => (c.image.clone(), PullPolicy::of(&c.image_pull_policy, &c.image)),
            None => match act.runtime.sandbox_image() {
                Some(i) => (i.to_string(), PullPolicy::IfNotPresent),
                None => return true,
            },
        };
        let name = c.map_or(SANDBOX, |c| c.name.as_str());
        let key: Key = (pod.metadata.uid.clone(), name.to_string());
        if let Err(why) = crate::node::images::reference::check(&image) {
            // kubelet's `applyDefaultImageTag`: refused before any runtime call.
            let text = message::invalid_name(&image, &why);
            let why = Some((true, reason::INSPECT_FAILED, text.as_str()));
            wait_for_image(act, restarts, pod, c, &key, WaitingReason::InvalidImageName, &text, why, now);
            return false;
        }
        let pull = pull_key(&image, pod);
        let mut state = ImageState {
            policy,
            pulled: self.pulled.contains(&key),
            waiting_for_pull: self.pulls.get(&pull).is_some_and(|w| w.iter().any(|r| r.key == key)),
            pull_in_flight: self.pulls.contains_key(&pull),
            in_backoff: self.backoff.in_backoff_since_update(&(key.0.clone(), image.clone()), now),
            // Only pods from the apiserver have pull secrets (`fields` refuses them elsewhere).
            credentials: !pod.spec.image_pull_secrets.is_empty(),
            present: false,
        };
        if !state.pulled && !state.waiting_for_pull {
            match act.runtime.image_status(&image) {
                Ok(found) => state.present = found.is_some(),
                Err(e) => {
                    let text = message::inspect_failed(&image, &Chain(&e).to_string());
                    let why = Some((true, reason::INSPECT_FAILED, text.as_str()));
                    wait_for_image(act, restarts, pod, c, &key, WaitingReason::ImageInspectError, &text, why, now);
                    return false;
                }
            }
        }
        let container = c.map(|c| c.name.as_str());
        let action = decide(&state);
        let usable =
            matches!(action, ImageAction::UsePulled | ImageAction::UsePresent | ImageAction::UsePresentInBackOff);
        if look == Look::Ahead && usable {
            return true;
        }
        let ready = match action {
            ImageAction::UsePulled => {
                self.pulled.remove(&key);
                true
            }
            ImageAction::UsePresent => {
                // Not for the sandbox image: kubelet never reports it unless it is pulled.
                if container.is_some() {
                    act.event(pod, container, false, reason::PULLED, &message::already_present(&image));
                }
                true
            }
            ImageAction::UsePresentInBackOff => {
                act.event(pod, container, false, reason::PULLED, &message::present_in_backoff(&image));
                true
            }
            ImageAction::NeverPull => {
                let text = message::never_pull(&image);
                let why = Some((true, reason::ERR_IMAGE_NEVER_PULL, text.as_str()));
                wait_for_image(act, restarts, pod, c, &key, WaitingReason::ErrImageNeverPull, &text, why, now);
                false
            }
            ImageAction::BackOff => {
                let last = restarts.waiting.get(&key).filter(|w| w.reason == WaitingReason::ErrImagePull);
                let last_failure = last.map(|w| w.message.clone());
                let already = restarts.waiting.get(&key).is_some_and(|w| w.reason == WaitingReason::ImagePullBackOff);
                if !already {
                    let text = message::back_off_status(&image, last_failure.as_deref());
                    let back_off = message::back_off(&image);
                    let why = Some((false, reason::BACK_OFF, back_off.as_str()));
                    wait_for_image(act, restarts, pod, c, &key, WaitingReason::ImagePullBackOff, &text, why, now);
                }
                false
            }
            ImageAction::Wait => false,
            ImageAction::Join | ImageAction::Pull => {
                let requester =
                    Requester { key: key.clone(), since: now, fallback: state.present && !state.credentials };
                if self.request_pull(&image, &pull, requester, || credentials(act, pod, objects, &image)) {
                    act.event(pod, container, false, reason::PULLING, &message::pulling(&image));
                }
                false
            }
        };
        if ready && c.is_none() {
            // A container's reason goes when it starts; a sandbox's when its image is there.
            restarts.waiting.remove(&key);
        }
        ready
    }

    /// Queues a pull of `image` for `requester`, or adds it to the pull in flight; false when
    /// the queue is full (asked again at the next sync).
    /// `pull` tells the pull apart (`pull_key`); `auths` gives the credentials of a new pull
    /// (a pull in flight is joined as it is).
    fn request_pull(
        &mut self,
        image: &str,
        pull: &str,
        requester: Requester,
        auths: impl FnOnce() -> Vec<PullAuth>,
    ) -> bool {
        if let Some(waiting) = self.pulls.get_mut(pull) {
            waiting.push(requester);
            return true;
        }
        match self.tx.try_send(PullRequest { image: image.into(), key: pull.into(), auths: auths() }) {
            Ok(()) => {
                self.pulls.insert(pull.into(), vec![requester]);
                true
            }
            Err(TrySendError::Full(_)) => {
                log::debug!("pods: the pull queue is full; {image} is asked for again at the next sync");
                false
            }
            // The pull threads are gone: the agent is stopping.
            Err(TrySendError::Disconnected(_)) => false,
        }
    }

    /// A pull answered: every container (and sandbox) that waits for it gets kubelet's
    /// events, and starts at the next sync or waits as `ErrImagePull` under back-off.
    /// Containers of pods removed or terminating meanwhile are skipped.
    pub(super) fn on_pull_done(
        &mut self,
        act: &Actor,
        restarts: &mut Restarts,
        pods: &BTreeMap<String, PodEntry>,
        done: PullDone,
    ) {
        let now = act.clock.now();
        let waiting = self.pulls.remove(&done.key).unwrap_or_default();
        let mut backed_off: HashSet<String> = HashSet::new();
        for r in waiting {
            let Some(pod) = pods.get(&r.key.0).filter(|e| e.termination.is_none()).map(|e| e.pod.clone()) else {
                continue;
            };
            let c = pod.spec.init_containers.iter().chain(&pod.spec.containers).find(|c| c.name == r.key.1);
            let container = c.map(|c| c.name.as_str());
            // One failure advances the pod's back-off once, however many of its containers
            // waited for the image.
            if done.result.is_err() && backed_off.insert(r.key.0.clone()) {
                self.backoff.next(&(r.key.0.clone(), done.image.clone()), now, now);
            }
            if done.result.is_ok() || r.fallback {
                self.pulled.insert(r.key.clone());
            }
            match &done.result {
                Ok(p) => {
                    let total = now.duration_since(r.since).unwrap_or_default().max(done.pull_time);
                    let text = message::pulled(&done.image, done.pull_time, total, p.size);
                    act.event(&pod, container, false, reason::PULLED, &text);
                }
                Err(e) => {
                    let cause = Chain(e).to_string();
                    // Every failed pull is reported, as kubelet's.
                    act.event(&pod, container, true, reason::FAILED, &message::pull_failed(&done.image, &cause));
                    if r.fallback {
                        let present = message::present_after_failure(&done.image);
                        act.event(&pod, container, false, reason::PULLED, &present);
                    } else {
                        wait_for_image(act, restarts, &pod, c, &r.key, WaitingReason::ErrImagePull, &cause, None, now);
                    }
                }
            }
        }
    }
}

/// Sets a container's image waiting reason (`text` is its message). When it changed, the
/// event `why` (warning, reason, message), if any, is recorded, then for a container kubelet's
/// `Error: <reason>`: once per change, where kubelet repeats them at every sync. A
/// sandbox's reason shows in the pod's events only.
#[allow(clippy::too_many_arguments)]
fn wait_for_image(
    act: &Actor,
    restarts: &mut Restarts,
    pod: &Pod,
    c: Option<&Container>,
    key: &Key,
    waiting: WaitingReason,
    text: &str,
    why: Option<(bool, &str, &str)>,
    now: SystemTime,
) {
    if restarts.waiting.get(key).is_some_and(|w| w.reason == waiting && w.message == text) {
        return;
    }
    let container = c.map(|c| c.name.as_str());
    if let Some((warning, why, why_text)) = why {
        act.event(pod, container, warning, why, why_text);
    }
    if container.is_some() {
        act.event(pod, container, true, reason::FAILED, &message::error(waiting.as_str()));
    }
    restarts.waiting.insert(key.clone(), Waiting { reason: waiting, message: text.into(), since: now });
}
