//! `fl-apisync`: everything the node writes to the apiserver, every second: it registers
//! the Node (or adopts an existing one), renews its Lease every 10 s, spools the node's status
//! (every 10 s when it changed, or every 5 minutes), the pods' statuses (when they changed)
//! and the events the `fl-evapi` watcher correlated, and delivers the spool in order. While
//! the apiserver answers, it also keeps the mirror pods of static pods, and deletes a pod the
//! apiserver is deleting once the pod manager is done with it (kubelet's status manager).
//!
//! Delivery: a write that cannot reach the apiserver stays first in line (the link says
//! once that it is away; tried again after 1 s, 2 s, … at most 10 s). A pod status refused
//! because the pod is gone or replaced (404, 409) is dropped; an event answered with an error
//! other than "away" is tried 12 times, 10 s apart (the first pause random), then dropped, as
//! client-go's event sink does, and while it waits the statuses behind it go on; an event
//! the apiserver rejects is dropped at once.

use super::client::{ApiClient, ApiError};
use super::events::ApiEventSink;
use super::link::Link;
use super::mirror::{is_mirror_of, mirror_plan, mirror_pod};
use super::node::{self, Lease, NodeFacts, LEASE_NAMESPACE, LEASE_RENEW_PERIOD, STATUS_UPDATE_PERIOD};
use super::pods::{status_patch, status_path, with_others_conditions};
use super::spool::Pending;
use super::watch::{is_mirror, PodsView};
use crate::api::manifest::PodSource;
use crate::api::{Node, NodeCondition, NodeStatus, Pod, PodStatus};
use crate::node::events::sink::RetryPolicy;
use crate::node::events::EventMetrics;
use crate::node::status::StatusCache;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// How long one pass delivers spooled writes at most.
const DELIVERY_SLICE: Duration = Duration::from_secs(2);
/// The longest pause before trying an away apiserver again.
const MAX_RETRY: Duration = Duration::from_secs(10);

/// What the node reports now: its facts and its conditions.
pub struct NodeReport {
    /// Names, resources, images, versions.
    pub facts: NodeFacts,
    /// Ready and the pressure conditions (as `/node` shows them).
    pub conditions: Vec<NodeCondition>,
}

/// The writer's state.
pub struct ApiSync {
    client: Arc<ApiClient>,
    link: Arc<Link>,
    node: String,
    report: Box<dyn FnMut() -> NodeReport + Send>,
    statuses: StatusCache,
    view: PodsView,
    event_metrics: Arc<EventMetrics>,
    /// The Node's uid once registered or adopted.
    node_uid: Option<String>,
    /// The apiserver's minor version (what a status may carry), asked before registering.
    server_minor: Option<u32>,
    /// The Lease as last stored.
    lease: Option<Lease>,
    lease_due: Instant,
    status_due: Instant,
    /// The node status last spooled, and when.
    last_status: Option<(NodeStatus, SystemTime)>,
    /// Every resource name ever reported (a gone one is reported as 0).
    reported: BTreeSet<String>,
    /// The status last spooled per apiserver uid.
    sent: HashMap<String, PodStatus>,
    /// `StatusCache::writes` when pod statuses were last compared.
    writes_seen: u64,
    /// Pods to delete (the apiserver is deleting them and the pod manager is done).
    to_delete: BTreeSet<String>,
    /// When to try the apiserver again after it was away (the watcher reaching it ends the
    /// wait sooner).
    retry_at: Option<Instant>,
    /// Whether `retry_at` waits for an away apiserver (not for a refusal).
    waiting_for_link: bool,
    backoff: Duration,
    /// When to try the first write in line again after the apiserver refused it.
    deliver_at: Option<Instant>,
    /// When to try the events again after the first in line failed with an answer: until
    /// then the statuses behind them go on (one failing event holds up no status).
    events_at: Option<Instant>,
    /// `StatusCache::writes` last compared at this time (mirrors appear on their own, so
    /// statuses are compared every `STATUS_UPDATE_PERIOD` anyway).
    compared_at: Instant,
    /// The static pods as statuses were last compared, until their mirrors are checked.
    statics: Option<Vec<Pod>>,
    /// Tries of the first event in line that failed with an answer.
    event_tries: u32,
    policy: RetryPolicy,
    /// Events' own rate limit (kubelet's `eventRecordQPS`, `eventBurst`).
    event_bucket: super::client::TokenBucket,
    /// The first retry pause's fraction of `policy.sleep`.
    jitter: f64,
}

impl ApiSync {
    /// The writer for `node`; `report` says what the node is now.
    pub fn new(
        client: Arc<ApiClient>,
        link: Arc<Link>,
        node: &str,
        report: Box<dyn FnMut() -> NodeReport + Send>,
        statuses: StatusCache,
        view: PodsView,
        event_metrics: Arc<EventMetrics>,
    ) -> ApiSync {
        let now = Instant::now();
        let jitter =
            f64::from(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().subsec_nanos())
                / 1e9;
        ApiSync {
            client,
            link,
            node: node.into(),
            report,
            statuses,
            view,
            event_metrics,
            node_uid: None,
            server_minor: None,
            lease: None,
            lease_due: now,
            status_due: now,
            last_status: None,
            reported: BTreeSet::new(),
            sent: HashMap::new(),
            writes_seen: u64::MAX,
            to_delete: BTreeSet::new(),
            retry_at: None,
            waiting_for_link: false,
            backoff: Duration::ZERO,
            deliver_at: None,
            events_at: None,
            compared_at: now,
            statics: None,
            event_tries: 0,
            policy: RetryPolicy::default(),
            event_bucket: super::client::TokenBucket::new(50.0, 100, now),
            jitter,
        }
    }

    /// Events at most `qps` a second on average, `burst` at once.
    pub fn with_event_limits(mut self, qps: f64, burst: u32) -> ApiSync {
        self.event_bucket = super::client::TokenBucket::new(qps, burst, Instant::now());
        self
    }

    /// A request failed: away (retry later) or not (the caller decides).
    fn away(&mut self, e: &ApiError) -> bool {
        if !self.link.failed(e) {
            return false;
        }
        self.backoff = (self.backoff * 2).clamp(Duration::from_secs(1), MAX_RETRY);
        self.retry_at = Some(Instant::now() + self.backoff);
        self.waiting_for_link = true;
        true
    }

    fn reached(&mut self) {
        self.link.reached();
        self.backoff = Duration::ZERO;
        self.retry_at = None;
    }

    /// One pass: spool what changed, then talk to the apiserver unless it is away.
    fn pass(&mut self) {
        let now = Instant::now();
        if now >= self.status_due {
            self.status_due = now + STATUS_UPDATE_PERIOD;
            self.spool_node_status();
        }
        self.spool_pod_statuses(now);
        let removed = self.statuses.take_removed();
        {
            // Only pods of the apiserver's: the set stays within the pods bound here.
            let view = self.view.read();
            self.to_delete.extend(removed.into_iter().filter(|uid| view.contains_key(uid)));
        }
        // After a failure, wait; when the apiserver was away, the watcher finding it back
        // ends the wait.
        if self.retry_at.is_some_and(|at| now < at) && !(self.waiting_for_link && self.link.online()) {
            return;
        }
        if self.node_uid.is_none() {
            match self.register() {
                Ok(()) => self.reached(),
                Err(e) => {
                    if !self.away(&e) {
                        log::warn!(
                            "apiserver: registering node {} failed: {}",
                            self.node,
                            crate::base::errors::Chain(&e)
                        );
                        self.retry_at = Some(now + MAX_RETRY);
                        self.waiting_for_link = false;
                    }
                    return;
                }
            }
        }
        if now >= self.lease_due {
            match self.renew_lease() {
                Ok(()) => {
                    self.reached();
                    self.lease_due = now + LEASE_RENEW_PERIOD;
                }
                Err(e) if self.away(&e) => return,
                Err(e) => {
                    log::warn!("apiserver: renewing the node's Lease failed: {}", crate::base::errors::Chain(&e));
                    self.lease = None;
                    self.lease_due = now + Duration::from_secs(1);
                }
            }
        }
        if self.deliver_at.is_some_and(|at| now < at) || !self.deliver() {
            return;
        }
        if self.link.spool(|s| s.first_where(|p| !self.held(p)).is_none()) {
            self.mirror_pods();
            self.delete_finished();
        }
    }

    /// Creates the Node, or adopts the one there (its kubelet labels set to this node's).
    fn register(&mut self) -> Result<(), ApiError> {
        let version: serde_json::Value = self.client.get("/version")?;
        let minor = super::pods::server_minor(&version);
        if minor.is_none() {
            log::warn!("apiserver: its /version does not say its minor version ({version}); taking it as 1.26");
        }
        self.server_minor = Some(minor.unwrap_or(26));
        let report = (self.report)();
        let node = node::node_object(&report.facts, report.conditions);
        match self.client.write::<Node>("POST", "/api/v1/nodes", &node) {
            Ok(created) => {
                log::info!("apiserver: registered node {}", self.node);
                self.node_uid = Some(created.metadata.uid);
                Ok(())
            }
            Err(e) if e.code() == Some(409) => {
                let path = format!("/api/v1/nodes/{}", self.node);
                let mut existing: Node = self.client.get(&path)?;
                let labels: BTreeMap<String, String> = node
                    .metadata
                    .labels
                    .iter()
                    .filter(|(k, v)| existing.metadata.labels.get(*k) != Some(v))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                if !labels.is_empty() {
                    existing = self.client.merge_patch(&path, &serde_json::json!({"metadata": {"labels": labels}}))?;
                }
                log::info!("apiserver: node {} was registered before; taking it on", self.node);
                // What an earlier run reported and is gone now goes to 0 (a merge patch
                // would leave its old value in place).
                let before = existing.status.capacity.keys().chain(existing.status.allocatable.keys());
                self.reported.extend(before.cloned());
                self.node_uid = Some(existing.metadata.uid);
                // Its status is sent now, whatever an earlier run sent.
                self.last_status = None;
                self.status_due = Instant::now();
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Renews the Lease (made when missing; read again after a conflict).
    fn renew_lease(&mut self) -> Result<(), ApiError> {
        let path = format!("/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{}", self.node);
        let uid = self.node_uid.clone().unwrap_or_default();
        let now = SystemTime::now();
        if self.lease.is_none() {
            match self.client.get::<Lease>(&path) {
                Ok(l) => self.lease = Some(l),
                Err(e) if e.code() == Some(404) => {
                    let fresh = node::lease(&self.node, &uid, "", now);
                    let base = format!("/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases");
                    self.lease = Some(self.client.write("POST", &base, &fresh)?);
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        let rv = self.lease.as_ref().map(|l| l.metadata.resource_version.clone()).unwrap_or_default();
        match self.client.write::<Lease>("PUT", &path, &node::lease(&self.node, &uid, &rv, now)) {
            Ok(l) => {
                self.lease = Some(l);
                Ok(())
            }
            Err(e) if matches!(e.code(), Some(404 | 409)) => {
                // Changed or removed by someone else: read it again next time.
                self.lease = None;
                self.lease_due = Instant::now();
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Spools the node's status when it changed (heartbeats aside) or is due anyway.
    fn spool_node_status(&mut self) {
        let report = (self.report)();
        let mut node = node::node_object(&report.facts, report.conditions);
        self.reported.extend(node.status.capacity.keys().cloned());
        node.status.capacity = node::with_gone_resources(&node.status.capacity, &self.reported);
        node.status.allocatable = node::with_gone_resources(&node.status.allocatable, &self.reported);
        let now = SystemTime::now();
        if !node::status_due(self.last_status.as_ref().map(|(s, t)| (s, *t)), &node.status, now) {
            return;
        }
        match serde_json::to_value(&node.status) {
            Ok(v) => self.link.push(Pending::NodeStatus(v)),
            Err(e) => log::warn!("apiserver: the node's status cannot be written as JSON: {e}"),
        }
        self.last_status = Some((node.status, now));
    }

    /// Spools each pod status that changed: an `api` pod's to itself, a static pod's to its
    /// mirror (once the mirror exists).
    fn spool_pod_statuses(&mut self, now: Instant) {
        let writes = self.statuses.writes();
        if writes == self.writes_seen && now < self.compared_at + STATUS_UPDATE_PERIOD {
            return;
        }
        self.writes_seen = writes;
        self.compared_at = now;
        let view = self.view.read();
        let mut live = BTreeSet::new();
        let pods: Vec<Pod> = self.statuses.list().pods().collect();
        for pod in &pods {
            let Some(status) = pod.status.as_ref() else { continue };
            let Some(uid) = status_target(pod, &view) else { continue };
            live.insert(uid.clone());
            if self.sent.get(&uid) == Some(status) {
                continue;
            }
            self.sent.insert(uid.clone(), status.clone());
            self.link.push(Pending::PodStatus {
                namespace: pod.metadata.namespace.clone(),
                name: pod.metadata.name.clone(),
                uid,
                status: Box::new(status.clone()),
            });
        }
        self.sent.retain(|uid, _| live.contains(uid));
        drop(view);
        self.statics = Some(pods.into_iter().filter(|p| PodSource::of(p) == Some(PodSource::File)).collect());
    }

    /// Delivers the spool in order; false when the apiserver went away.
    /// At most `DELIVERY_SLICE` at a time: a long spool (the apiserver back after a while)
    /// goes out over several passes, the Lease renewed in between.
    fn deliver(&mut self) -> bool {
        self.deliver_at = None;
        let start = Instant::now();
        while let Some((seq, p)) =
            self.link.spool(|s| s.first_where(|p| !self.held(p)).map(|(seq, p)| (seq, p.clone())))
        {
            if start.elapsed() >= DELIVERY_SLICE {
                return true;
            }
            if matches!(p, Pending::Event(_)) {
                let wait = self.event_bucket.reserve(Instant::now());
                if !wait.is_zero() {
                    std::thread::sleep(wait);
                }
            }
            match self.write(&p) {
                Ok(()) => {
                    self.reached();
                    self.event_tries = 0;
                    self.link.spool(|s| s.take(seq));
                }
                Err(e) if self.away(&e) => return false,
                Err(e) => match self.after_refusal(&p, &e) {
                    Next::Drop => {
                        self.event_tries = 0;
                        self.link.spool(|s| s.take(seq));
                    }
                    Next::Keep(pause) if matches!(p, Pending::Event(_)) => {
                        self.events_at = Some(Instant::now() + pause);
                    }
                    Next::Keep(pause) => {
                        self.deliver_at = Some(Instant::now() + pause);
                        return false;
                    }
                },
            }
        }
        true
    }

    /// Whether `p` waits for the events' retry pause.
    fn held(&self, p: &Pending) -> bool {
        matches!(p, Pending::Event(_)) && self.events_at.is_some_and(|at| Instant::now() < at)
    }

    /// One spooled write.
    fn write(&mut self, p: &Pending) -> Result<(), ApiError> {
        match p {
            Pending::NodeStatus(status) => {
                let path = format!("/api/v1/nodes/{}/status", self.node);
                self.client.merge_patch::<serde_json::Value>(&path, &serde_json::json!({ "status": status })).map(drop)
            }
            Pending::PodStatus { namespace, name, uid, status } => {
                let status = {
                    let view = self.view.read();
                    with_others_conditions(status, view.get(uid).and_then(|p| p.status.as_ref()))
                };
                let patch = status_patch(uid, &status, self.server_minor.unwrap_or(26));
                self.client.merge_patch::<serde_json::Value>(&status_path(namespace, name), &patch).map(drop)
            }
            Pending::Event(event) => {
                let mut sink = ApiEventSink::new(self.client.clone());
                let result = if event.count > 1 {
                    match sink.patch_raw(event) {
                        Err(e) if e.code() == Some(404) => {
                            let mut fresh = (**event).clone();
                            fresh.metadata.resource_version.clear();
                            sink.create_raw(&fresh)
                        }
                        other => other,
                    }
                } else {
                    sink.create_raw(event)
                };
                result.map(drop)
            }
        }
    }

    /// Acts on `refused`'s decision for a write the apiserver answered with an error.
    fn after_refusal(&mut self, p: &Pending, e: &ApiError) -> Next {
        let chain = crate::base::errors::Chain(e);
        match refused(p, e.code(), e.is_unreachable(), self.event_tries, &self.policy, self.jitter) {
            Refused::NodeGone => {
                log::warn!("apiserver: node {} is gone; registering it again", self.node);
                self.node_uid = None;
                self.lease = None;
                Next::Keep(Duration::ZERO)
            }
            Refused::PodGone { namespace, name } => {
                log::debug!(
                    "apiserver: status of pod {namespace}/{name} not sent, the pod is gone or replaced: {chain}"
                );
                Next::Drop
            }
            Refused::EventRetry { tries, pause } => {
                self.event_tries = tries;
                Next::Keep(pause)
            }
            Refused::EventDropped { gave_up } => {
                let Pending::Event(event) = p else { return Next::Drop };
                let why = if gave_up { "retry limit exceeded" } else { "the server rejected it" };
                log::warn!("events: dropping event {} ({}): {why}: {chain}", event.metadata.name, event.reason);
                self.event_metrics.dropped_sink_failed.inc();
                Next::Drop
            }
            Refused::Unreachable => Next::Keep(Duration::from_secs(1)),
            Refused::Dropped => {
                log::warn!("apiserver: a write was refused and is dropped: {chain}");
                Next::Drop
            }
        }
    }

    /// Every static pod has its mirror, of its current version; no mirror outlives its pod.
    fn mirror_pods(&mut self) {
        let Some(node_uid) = self.node_uid.clone() else { return };
        let Some(statics) = self.statics.take() else { return };
        let mirrors: Vec<Pod> = self.view.read().values().filter(|p| is_mirror(p)).map(|p| (**p).clone()).collect();
        let plan = mirror_plan(&statics, &mirrors);
        for m in plan.delete {
            log::info!("apiserver: deleting mirror pod {} (its static pod changed or is gone)", m.key());
            if let Err(e) = self.delete_pod(m, Some(0)) {
                self.away(&e);
                self.statics = Some(statics.clone());
                return;
            }
        }
        for p in plan.create {
            let path = format!("/api/v1/namespaces/{}/pods", p.metadata.namespace);
            match self.client.write::<serde_json::Value>("POST", &path, &mirror_pod(p, &self.node, &node_uid)) {
                Ok(_) => log::info!("apiserver: created mirror pod {}", p.key()),
                Err(e) if e.code() == Some(409) => {}
                Err(e) if self.away(&e) => {
                    self.statics = Some(statics.clone());
                    return;
                }
                Err(e) => {
                    log::warn!("apiserver: creating mirror pod {} failed: {}", p.key(), crate::base::errors::Chain(&e))
                }
            }
        }
    }

    /// Deletes the pods the apiserver is deleting once the pod manager is done with them
    /// (grace 0, on the uid's precondition), as kubelet's status manager does.
    fn delete_finished(&mut self) {
        let view = self.view.read().clone();
        for uid in std::mem::take(&mut self.to_delete) {
            let Some(pod) = view.get(&uid).filter(|p| p.metadata.deletion_timestamp.is_some() && !is_mirror(p)) else {
                continue;
            };
            match self.delete_pod(pod, Some(0)) {
                Ok(()) => log::info!("apiserver: pod {} is gone from this node; deleted it", pod.key()),
                Err(e) if self.away(&e) => {
                    self.to_delete.insert(uid);
                }
                Err(e) => {
                    log::warn!("apiserver: deleting pod {} failed: {}", pod.key(), crate::base::errors::Chain(&e))
                }
            }
        }
    }

    /// `DELETE` of `pod`, only if it is still the same object (uid precondition).
    fn delete_pod(&self, pod: &Pod, grace: Option<i64>) -> Result<(), ApiError> {
        let path = format!("/api/v1/namespaces/{}/pods/{}", pod.metadata.namespace, pod.metadata.name);
        let mut options = serde_json::json!({
            "kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": pod.metadata.uid}
        });
        if let Some(g) = grace {
            options["gracePeriodSeconds"] = g.into();
        }
        match self.client.write::<serde_json::Value>("DELETE", &path, &options) {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.code(), Some(404 | 409)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// A pod's source (`kubernetes.io/config.source`), if it has one.
/// The apiserver uid a pod's status goes to: a pod from the apiserver's own, a static pod's
/// current mirror's (none until the mirror exists), nothing for other pods (orphans).
fn status_target(pod: &Pod, view: &BTreeMap<String, Arc<Pod>>) -> Option<String> {
    match PodSource::of(pod)? {
        PodSource::Api => Some(pod.metadata.uid.clone()),
        PodSource::File => view
            .values()
            .find(|m| is_mirror(m) && m.key() == pod.key() && is_mirror_of(m, pod))
            .map(|m| m.metadata.uid.clone()),
    }
}

/// What a write the apiserver refused leads to (`refused`).
#[derive(Clone, Debug, PartialEq)]
enum Refused {
    /// The Node is gone (404 on its status): forget it and register it again at once.
    NodeGone,
    /// A pod's status whose pod is gone or replaced (404, 409): dropped.
    PodGone {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
    },
    /// An event that failed for a passing reason, `tries` times now: tried again after
    /// `pause` (the first pause jittered, as client-go's sink).
    EventRetry {
        /// Passing failures in a row.
        tries: u32,
        /// Until the next try.
        pause: Duration,
    },
    /// An event dropped: after `max_tries` passing failures (`gave_up`), or rejected.
    EventDropped {
        /// Whether it was the retry limit.
        gave_up: bool,
    },
    /// The apiserver did not answer: kept first in line, tried again in 1 s.
    Unreachable,
    /// Any other refusal: dropped.
    Dropped,
}

/// The decision for write `p` refused with HTTP `code` (`None`: no answer), `unreachable`
/// when the apiserver could not be reached, after `event_tries` passing event failures.
fn refused(
    p: &Pending,
    code: Option<u16>,
    unreachable: bool,
    event_tries: u32,
    policy: &RetryPolicy,
    jitter: f64,
) -> Refused {
    match p {
        Pending::NodeStatus(_) if code == Some(404) => Refused::NodeGone,
        Pending::PodStatus { namespace, name, .. } if matches!(code, Some(404 | 409)) => {
            Refused::PodGone { namespace: namespace.clone(), name: name.clone() }
        }
        // A 404 (the event to patch is gone) is the sink's NotFound: dropped as rejected.
        Pending::Event(_) if unreachable && code != Some(404) => {
            let tries = event_tries + 1;
            if tries >= policy.max_tries {
                Refused::EventDropped { gave_up: true }
            } else {
                let fraction = if tries == 1 { jitter } else { 1.0 };
                Refused::EventRetry { tries, pause: policy.sleep.mul_f64(fraction) }
            }
        }
        Pending::Event(_) => Refused::EventDropped { gave_up: false },
        _ if unreachable => Refused::Unreachable,
        _ => Refused::Dropped,
    }
}

/// What happens to a refused write.
enum Next {
    Drop,
    /// Stays first in line; the next try after this pause.
    Keep(Duration),
}

impl crate::base::manager::Manager for ApiSync {
    type Command = ();

    /// A wake: at start, the apiserver back after it was away, or a spooled write. What
    /// waited goes now (registering the Node first, if it is not yet), not at the next tick.
    fn handle(&mut self, _: ()) {
        if !self.link.online() {
            return;
        }
        if self.node_uid.is_none() || (self.waiting_for_link && self.retry_at.is_some()) {
            self.pass();
        } else if self.retry_at.is_none() && self.deliver_at.is_none() {
            self.deliver();
        }
    }

    fn on_tick(&mut self) {
        self.pass();
    }

    fn tick_interval(&self) -> Duration {
        Duration::from_secs(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::manifest::CONFIG_HASH_ANNOTATION;

    #[test]
    fn a_refused_write_is_kept_retried_or_dropped_as_kubelet_does() {
        let policy = RetryPolicy { max_tries: 3, sleep: Duration::from_secs(10) };
        let node = Pending::NodeStatus(serde_json::json!({}));
        let pod =
            Pending::PodStatus { namespace: "ns".into(), name: "web".into(), uid: "u".into(), status: Box::default() };
        let event = Pending::Event(Box::default());
        let gone = Refused::PodGone { namespace: "ns".into(), name: "web".into() };
        let retry = |tries, secs| Refused::EventRetry { tries, pause: Duration::from_secs(secs) };
        // (write, HTTP code, unreachable, event failures so far) → decision
        let cases = [
            (&node, Some(404), false, 0, Refused::NodeGone),
            (&node, Some(422), false, 0, Refused::Dropped),
            (&node, None, true, 0, Refused::Unreachable),
            (&pod, Some(404), false, 0, gone.clone()),
            (&pod, Some(409), false, 0, gone),
            (&pod, Some(403), false, 0, Refused::Dropped),
            (&pod, None, true, 0, Refused::Unreachable),
            // The first pause is jittered (half, here), the next ones whole.
            (&event, None, true, 0, retry(1, 5)),
            (&event, None, true, 1, retry(2, 10)),
            (&event, None, true, 2, Refused::EventDropped { gave_up: true }),
            (&event, Some(404), false, 0, Refused::EventDropped { gave_up: false }),
            (&event, Some(422), false, 1, Refused::EventDropped { gave_up: false }),
        ];
        for (p, code, unreachable, tries, want) in cases {
            assert_eq!(refused(p, code, unreachable, tries, &policy, 0.5), want, "{code:?} {unreachable} {tries}");
        }
    }

    #[test]
    fn a_status_goes_to_the_pod_itself_or_to_the_current_mirror_of_a_static_pod() {
        let mut api = Pod::default();
        api.metadata.uid = "u-api".into();
        api.metadata
            .annotations
            .insert(crate::api::manifest::CONFIG_SOURCE_ANNOTATION.into(), PodSource::Api.as_str().into());
        let mut web = Pod::default();
        web.metadata.name = "web-edge1".into();
        web.metadata.uid = "hash1".into();
        web.metadata
            .annotations
            .insert(crate::api::manifest::CONFIG_SOURCE_ANNOTATION.into(), PodSource::File.as_str().into());
        web.metadata.annotations.insert(CONFIG_HASH_ANNOTATION.into(), "hash1".into());
        let mut mirror: Pod = serde_json::from_value(super::mirror_pod(&web, "edge1", "n")).unwrap();
        mirror.metadata.uid = "u-mirror".into();
        let mut view = BTreeMap::new();
        assert_eq!(status_target(&api, &view).as_deref(), Some("u-api"));
        assert_eq!(status_target(&web, &view), None, "no mirror yet");
        view.insert("u-mirror".to_string(), Arc::new(mirror.clone()));
        assert_eq!(status_target(&web, &view).as_deref(), Some("u-mirror"));
        web.metadata.annotations.insert(CONFIG_HASH_ANNOTATION.into(), "hash2".into());
        assert_eq!(status_target(&web, &view), None, "the mirror of an old version gets nothing");
        assert_eq!(status_target(&Pod::default(), &view), None, "an orphan has no source");
    }
}
