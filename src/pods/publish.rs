//! What the pod manager tells others after a sync: each pod's status into the
//! `StatusCache` (with its devices' health), and the probe targets for the prober.

use super::actor::Actor;
use super::devices::{pod_needs, DeviceLink};
use super::hooks::Hooks;
use super::restarts::Restarts;
use super::view::Snapshot;
use super::{Admission, PodEntry, WaitingReason};
use crate::api::{Container, Pod, PodPhase};
use crate::node::events::Reference;
use crate::node::prober::{ProbeResult, ProbeResults, ProbeTarget, ProbeType, ProberCommand};
use crate::node::runtime::{ContainerInfo, ContainerState};
use crate::node::status::{self, ContainerObservation, PodObservation};
use crossbeam_channel::Sender;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::SystemTime;

/// What the pod manager last told others, and the prober's link.
#[derive(Default)]
pub(super) struct Published {
    /// The prober's command channel.
    pub(super) prober: Option<Sender<ProberCommand>>,
    /// The results the prober writes (readiness and startup).
    pub(super) probe_results: ProbeResults,
    /// The probe targets last sent.
    last_targets: Vec<ProbeTarget>,
    /// What each pod's stored status was computed from (removed with the pod).
    pub(super) inputs: HashMap<String, StatusInputs>,
}

/// The other parts a status and a probe target read.
pub(super) struct Seen<'a> {
    /// The settings and the status cache.
    pub(super) act: &'a Actor,
    /// The pods owned.
    pub(super) pods: &'a BTreeMap<String, PodEntry>,
    /// `postStart` hooks running (their containers are neither started nor ready).
    pub(super) hooks: &'a Hooks,
    /// Why containers wait.
    pub(super) restarts: &'a Restarts,
    /// The device manager, for the health of pods' devices.
    pub(super) devices: Option<&'a DeviceLink>,
}

/// What kubelet's `rejectPod` puts before the admission message in a refused pod's status.
const REJECTED: &str = "Pod was rejected: ";

/// The part of a probe target that follows the runtime and the pod's state; the rest
/// (pod, reference, spec, address) is fixed for a pod entry.
struct TargetState<'a> {
    container_id: Option<&'a str>,
    running: bool,
    started_at: Option<SystemTime>,
    will_restart: bool,
    terminating: bool,
    pod_terminal: bool,
}

impl TargetState<'_> {
    /// Whether target `t` shows this state.
    fn is_shown_by(&self, t: &ProbeTarget) -> bool {
        t.container_id.as_deref() == self.container_id
            && t.running == self.running
            && t.started_at == self.started_at
            && t.will_restart == self.will_restart
            && t.terminating == self.terminating
            && t.pod_terminal == self.pod_terminal
    }
}

/// Everything a pod's status was last computed from, but the status before it.
/// `status::pod_status` is a pure function of these and the status before, and what it
/// returns is a fixed point (computed again from the same inputs and itself, it comes out
/// the same): while they stay equal, the status stored last stands, and a sync need neither
/// compute it nor compare it. Pods with plugin devices are not kept: their statuses also
/// show the device manager's view, which changes on its own.
pub(super) struct StatusInputs {
    /// The pod object (the entry's: a changed pod is a new object).
    pod: Arc<Pod>,
    /// Its init and app containers, in spec order (kept as lists: a map's node holds room
    /// for eleven, and this is kept for every pod).
    init: Vec<ContainerObservation>,
    app: Vec<ContainerObservation>,
    sandbox_created: Option<SystemTime>,
    sandbox_ready: bool,
    /// The sandbox's pod IPs (empty on the host network).
    sandbox_ips: Vec<String>,
    /// Why the pod failed on the node (admission refused it, its active deadline passed):
    /// the status reason and message.
    failed: Option<(Cow<'static, str>, String)>,
    /// When it was evicted (kubelet's `DisruptionTarget` condition).
    evicted: Option<SystemTime>,
}

impl StatusInputs {
    /// Whether `other` would compute the same status.
    fn same_as(&self, other: &StatusInputs) -> bool {
        Arc::ptr_eq(&self.pod, &other.pod)
            && self.init == other.init
            && self.app == other.app
            && self.sandbox_created == other.sandbox_created
            && self.sandbox_ready == other.sandbox_ready
            && self.sandbox_ips == other.sandbox_ips
            && self.failed == other.failed
            && self.evicted == other.evicted
    }
}

impl Published {
    /// Whether a container passes its probe of this kind (or has none).
    fn probe_passes(&self, c: &Container, current: Option<&ContainerInfo>, kind: ProbeType) -> bool {
        let declared = match kind {
            ProbeType::Readiness => c.readiness_probe.is_some(),
            ProbeType::Startup => c.startup_probe.is_some(),
            ProbeType::Liveness => c.liveness_probe.is_some(),
        };
        !declared || current.is_some_and(|i| self.probe_results.get(kind, &i.id) == Some(ProbeResult::Success))
    }

    /// Every probed container with what its target shows now, in target order.
    fn probe_states<'a>(
        seen: &'a Seen<'a>,
        snap: &'a Snapshot,
    ) -> impl Iterator<Item = (&'a String, &'a PodEntry, &'a Arc<Container>, TargetState<'a>)> + 'a {
        seen.pods.iter().flat_map(move |(uid, entry)| {
            let pod_terminal = seen.act.statuses.phase(uid).unwrap_or_default().is_terminal();
            let policy = entry.pod.spec.restart();
            let view = snap.pod(uid);
            entry.probed.iter().map(move |c| {
                let cur = view.latest(&c.name);
                // Probes wait for the postStart hook, as kubelet's do: until it is over (and
                // while the instance is only created), the prober does not see the instance,
                // as kubelet's sees no container ID in a waiting status. Seen as a container
                // that is not running, it would be failed, and killed once the hook is over.
                let shown = cur.filter(|i| {
                    i.state != ContainerState::Created
                        && !(i.state == ContainerState::Running && seen.hooks.in_post_start(&i.id))
                });
                let state = TargetState {
                    container_id: shown.map(|i| i.id.as_str()),
                    running: shown.is_some_and(|i| i.state == ContainerState::Running),
                    started_at: shown.and_then(|i| i.started_at),
                    will_restart: c.is_sidecar() || cur.map_or(true, |i| policy.restarts(i.exit_code)),
                    terminating: entry.termination.is_some(),
                    pod_terminal,
                };
                (uid, entry, c, state)
            })
        })
    }

    /// Every container with probes as the prober needs to see it; sent when it changed.
    pub(super) fn send_probe_targets(&mut self, seen: &Seen, snap: &Snapshot) {
        let Some(tx) = &self.prober else { return };
        // Compared in place first, so a sync that changed nothing builds nothing. The same
        // shared spec means the same entry (the last targets keep it alive), and with it the
        // same pod, reference and address: only the state can differ.
        let mut last = self.last_targets.iter();
        let unchanged = Self::probe_states(seen, snap).all(|(uid, _, c, state)| {
            last.next().is_some_and(|t| {
                t.pod_uid == *uid
                    && Arc::ptr_eq(&t.container, c)
                    && state.is_shown_by(t)
                    && t.pod_ip == pod_ip(seen.act, uid, snap)
            })
        }) && last.next().is_none();
        if unchanged {
            return;
        }
        let targets: Vec<ProbeTarget> = Self::probe_states(seen, snap)
            .map(|(uid, entry, c, s)| ProbeTarget {
                pod_uid: uid.clone(),
                reference: Reference::container(&entry.pod, &c.name),
                container: Arc::clone(c),
                pod_ip: pod_ip(seen.act, uid, snap).to_string(),
                container_id: s.container_id.map(String::from),
                running: s.running,
                started_at: s.started_at,
                will_restart: s.will_restart,
                terminating: s.terminating,
                pod_terminal: s.pod_terminal,
            })
            .collect();
        if targets != self.last_targets {
            // A prober that is gone (shutdown) needs no targets.
            let _ = tx.send(ProberCommand::Targets(targets.clone()));
            self.last_targets = targets;
        }
    }

    /// What the status shows of one container.
    fn observe(&self, seen: &Seen, uid: &str, c: &Container, snap: &Snapshot) -> ContainerObservation {
        let inst = snap.pod(uid).instances(&c.name);
        let current = inst.first().map(|i| (*i).clone());
        let running = current.as_ref().is_some_and(|i| i.state == ContainerState::Running);
        let waiting = seen
            .restarts
            .waiting
            .get(&(uid.to_string(), c.name.clone()))
            // A crash loop shows only while the exited instance is the newest.
            .filter(|w| {
                w.reason != WaitingReason::CrashLoopBackOff
                    || current.as_ref().is_some_and(|i| i.state == ContainerState::Exited)
            })
            .map(|w| (w.reason.as_str().to_string(), w.message.clone()));
        // A container with a readiness (startup) probe is ready (started) once the prober
        // says so; without the probe, once it runs.
        // Nor while its postStart hook runs.
        let running = running && current.as_ref().is_some_and(|i| !seen.hooks.in_post_start(&i.id));
        let ready = running && self.probe_passes(c, current.as_ref(), ProbeType::Readiness);
        let started = running && self.probe_passes(c, current.as_ref(), ProbeType::Startup);
        ContainerObservation { previous: inst.get(1).map(|i| (*i).clone()), current, waiting, ready, started }
    }

    /// Computes a pod's status from a relist and stores it for the API, unless what it is
    /// computed from did not change since it was last stored (`StatusInputs`).
    pub(super) fn publish(&mut self, seen: &Seen, uid: &str, snap: &Snapshot, now: SystemTime) {
        let Some(entry) = seen.pods.get(uid) else { return };
        let pod = &entry.pod;
        let sandbox = snap.sandboxes.get(uid);
        let inputs = StatusInputs {
            pod: Arc::clone(pod),
            init: pod.spec.init_containers.iter().map(|c| self.observe(seen, uid, c, snap)).collect(),
            app: pod.spec.containers.iter().map(|c| self.observe(seen, uid, c, snap)).collect(),
            sandbox_created: sandbox.map(|s| s.created_at),
            sandbox_ready: sandbox.is_some_and(|s| s.ready),
            sandbox_ips: sandbox.map(|s| s.ips.clone()).unwrap_or_default(),
            failed: match &entry.admission {
                Admission::Rejected { reason, message } => Some((reason.clone(), format!("{REJECTED}{message}"))),
                _ => entry.failure.as_ref().map(|f| (f.reason.into(), f.message.clone())),
            },
            evicted: entry.failure.as_ref().filter(|f| f.evicted).map(|f| f.stopping.started),
        };
        let devices = seen.devices.filter(|_| pod_needs(pod));
        if devices.is_none() && self.inputs.get(uid).is_some_and(|last| last.same_as(&inputs)) {
            return;
        }
        let o = PodObservation {
            pod,
            init: &by_name(&pod.spec.init_containers, &inputs.init),
            app: &by_name(&pod.spec.containers, &inputs.app),
            sandbox_created: inputs.sandbox_created,
            sandbox_ready: inputs.sandbox_ready,
            host_ip: &seen.act.cfg.node_ip,
            sandbox_ips: &inputs.sandbox_ips,
            runtime: seen.act.runtime.id_scheme(),
        };
        let (mut new, before) = seen
            .act
            .statuses
            .with_status(uid, |previous| (status::pod_status(&o, previous, now), previous.map(|p| p.phase)));
        if let Some((reason, message)) = &inputs.failed {
            new.phase = PodPhase::Failed;
            new.reason = reason.to_string();
            new.message = message.clone();
            if let Some(at) = inputs.evicted {
                new.conditions.push(status::disruption_target(message, at));
            }
        }
        if let Some(link) = devices {
            for cs in new.init_container_statuses.iter_mut().chain(new.container_statuses.iter_mut()) {
                cs.allocated_resources_status = link.resource_statuses(uid, &cs.name);
            }
        }
        if before != Some(new.phase) {
            log::info!("pods: pod {} is {}", pod.key(), new.phase);
        }
        // Stored only when it differs from what the API shows now.
        seen.act.statuses.publish(pod, new);
        if devices.is_none() {
            self.inputs.insert(uid.to_string(), inputs);
        } else {
            self.inputs.remove(uid);
        }
    }
}

/// Where probes reach the pod: its sandbox's IP on the pod network, else the node's.
fn pod_ip<'a>(act: &'a Actor, uid: &str, snap: &'a Snapshot) -> &'a str {
    snap.sandboxes.get(uid).and_then(|s| s.ips.first()).unwrap_or(&act.cfg.node_ip)
}

/// Observations in spec order, by container name.
fn by_name(spec: &[Container], observed: &[ContainerObservation]) -> BTreeMap<String, ContainerObservation> {
    spec.iter().zip(observed).map(|(c, o)| (c.name.clone(), o.clone())).collect()
}
