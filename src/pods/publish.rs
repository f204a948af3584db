//! What the pod manager tells others after a sync: each pod's status into the
//! `StatusCache` (with its devices' health), and the probe targets for the prober.

use super::view::Snapshot;
use super::{Admission, PodManager, WaitingReason, UNEXPECTED_ADMISSION_ERROR};
use crate::api::{Container, PodPhase};
use crate::events::Reference;
use crate::prober::{ProbeResult, ProbeTarget, ProbeType, ProberCommand};
use crate::runtime::{ContainerInfo, ContainerState};
use crate::status::{self, ContainerObservation, PodObservation};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

impl PodManager {
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
    pub(super) fn send_probe_targets(&mut self, snap: &Snapshot) {
        let Some(tx) = &self.prober else { return };
        let mut targets = Vec::new();
        for (uid, entry) in &self.pods {
            let pod = &entry.pod;
            let phase = self.statuses.status(uid).map(|s| s.phase).unwrap_or_default();
            let policy = pod.spec.restart();
            let view = snap.pod(uid);
            for c in pod.spec.init_containers.iter().filter(|c| c.is_sidecar()).chain(&pod.spec.containers) {
                if c.liveness_probe.is_none() && c.readiness_probe.is_none() && c.startup_probe.is_none() {
                    continue;
                }
                let cur = view.latest(&c.name);
                targets.push(ProbeTarget {
                    pod_uid: uid.clone(),
                    reference: Reference::container(pod, &c.name),
                    container: Arc::new(c.clone()),
                    pod_ip: self.cfg.node_ip.clone(),
                    container_id: cur.map(|i| i.id.clone()),
                    running: cur.is_some_and(|i| i.state == ContainerState::Running),
                    started_at: cur.and_then(|i| i.started_at),
                    will_restart: c.is_sidecar() || cur.map_or(true, |i| policy.restarts(i.exit_code)),
                    terminating: entry.termination.is_some(),
                    pod_terminal: phase.is_terminal(),
                });
            }
        }
        if targets != self.last_targets {
            // A prober that is gone (shutdown) needs no targets.
            let _ = tx.send(ProberCommand::Targets(targets.clone()));
            self.last_targets = targets;
        }
    }

    /// What the status shows of one container.
    fn observe(&self, uid: &str, c: &Container, snap: &Snapshot) -> ContainerObservation {
        let inst = snap.pod(uid).instances(&c.name);
        let current = inst.first().map(|i| (*i).clone());
        let running = current.as_ref().is_some_and(|i| i.state == ContainerState::Running);
        let waiting = self
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
        let ready = running && self.probe_passes(c, current.as_ref(), ProbeType::Readiness);
        let started = running && self.probe_passes(c, current.as_ref(), ProbeType::Startup);
        ContainerObservation { previous: inst.get(1).map(|i| (*i).clone()), current, waiting, ready, started }
    }

    /// Computes a pod's status from a relist and stores it for the API.
    pub(super) fn publish(&self, uid: &str, snap: &Snapshot, now: SystemTime) {
        let Some(entry) = self.pods.get(uid) else { return };
        let pod = &entry.pod;
        let init: BTreeMap<String, ContainerObservation> =
            pod.spec.init_containers.iter().map(|c| (c.name.clone(), self.observe(uid, c, snap))).collect();
        let app: BTreeMap<String, ContainerObservation> =
            pod.spec.containers.iter().map(|c| (c.name.clone(), self.observe(uid, c, snap))).collect();
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
        if let Admission::Rejected { message } = &entry.admission {
            new.phase = PodPhase::Failed;
            new.reason = UNEXPECTED_ADMISSION_ERROR.into();
            new.message = message.clone();
        }
        if let Some(link) = self.devices.as_ref().filter(|_| super::devices::pod_needs(pod)) {
            for cs in new.init_container_statuses.iter_mut().chain(new.container_statuses.iter_mut()) {
                cs.allocated_resources_status = link.resource_statuses(uid, &cs.name);
            }
        }
        if previous.as_ref().map(|p| p.phase) != Some(new.phase) {
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
