//! Kubernetes events: every manager records through an `EventRecorder`; a broadcaster thread
//! fans events out to watchers (the log, the local event store, later the apiserver), each
//! with its own bounded channel; sinks that store events run them through the
//! `EventCorrelator` first, as client-go does. Nothing here ever blocks the caller: a full
//! queue drops the event and counts it.

pub mod broadcaster;
pub mod correlator;
pub mod lru;
pub mod sink;
pub mod store;

use crate::api::{Event, EventSource, ObjectMeta, ObjectReference, Pod, Time};
use crate::base::metrics::{Counter, CounterVec, Encoder, Kind};
use crossbeam_channel::{Sender, TrySendError};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Event type for routine happenings.
pub const NORMAL: &str = "Normal";
/// Event type for problems.
pub const WARNING: &str = "Warning";

/// Counters served on `/metrics` (users of kubelet ask for these and never got them).
pub struct EventMetrics {
    total: CounterVec<(String, String)>,
    /// Dropped because the broadcaster's queue was full.
    pub dropped_queue_full: Counter,
    /// Dropped by the correlator's spam filter.
    pub dropped_spam_filter: Counter,
    /// Dropped because a sink failed for good (or a watcher's channel was full).
    pub dropped_sink_failed: Counter,
    /// Events that replaced similar ones by aggregation.
    pub aggregated: Counter,
}

impl Default for EventMetrics {
    fn default() -> Self {
        EventMetrics {
            total: CounterVec::new(
                "ferrolet_events_total",
                "Events recorded, by type and reason.",
                &["type", "reason"],
            ),
            dropped_queue_full: Counter::default(),
            dropped_spam_filter: Counter::default(),
            dropped_sink_failed: Counter::default(),
            aggregated: Counter::default(),
        }
    }
}

impl EventMetrics {
    fn count(&self, type_: &str, reason: &str) {
        self.total.inc((type_.to_string(), reason.to_string()));
    }

    /// Events recorded with this type and reason.
    pub fn total(&self, type_: &str, reason: &str) -> u64 {
        self.total.get(&(type_.to_string(), reason.to_string()))
    }

    /// Appends the Prometheus text for these counters.
    pub fn render(&self, out: &mut String) {
        let mut enc = Encoder::new(out);
        self.total.encode(&mut enc);
        let name = "ferrolet_events_dropped_total";
        enc.family(name, Kind::Counter, "Events dropped, by cause.");
        for (cause, n) in [
            ("queue_full", &self.dropped_queue_full),
            ("spam_filter", &self.dropped_spam_filter),
            ("sink_failed", &self.dropped_sink_failed),
        ] {
            enc.sample(name, &[("cause", cause)], n.get());
        }
        enc.single(
            "ferrolet_events_aggregated_total",
            Kind::Counter,
            "Events that replaced similar ones (\"combined from similar events\").",
            self.aggregated.get(),
        );
    }
}

/// What an event is about: the object reference plus the labels copied onto the event.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reference {
    /// The involved object.
    pub object: ObjectReference,
    /// Labels of the pod, copied to the event so events can be selected like their pods.
    pub labels: BTreeMap<String, String>,
}

impl Reference {
    /// The pod itself.
    pub fn pod(pod: &Pod) -> Reference {
        Reference {
            object: ObjectReference {
                kind: "Pod".into(),
                namespace: pod.metadata.namespace.clone(),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
                api_version: "v1".into(),
                ..Default::default()
            },
            labels: pod.metadata.labels.clone(),
        }
    }

    /// One container of the pod: `spec.containers{name}` or `spec.initContainers{name}`.
    pub fn container(pod: &Pod, name: &str) -> Reference {
        let init = pod.spec.init_containers.iter().any(|c| c.name == name);
        let mut r = Reference::pod(pod);
        r.object.field_path = format!("spec.{}{{{name}}}", if init { "initContainers" } else { "containers" });
        r
    }

    /// The node (cluster-scoped; kubelet uses the node name as its uid).
    pub fn node(name: &str) -> Reference {
        Reference {
            object: ObjectReference { kind: "Node".into(), name: name.into(), uid: name.into(), ..Default::default() },
            labels: BTreeMap::new(),
        }
    }
}

/// The handle every manager records events through; cheap to clone.
#[derive(Clone)]
pub struct EventRecorder {
    tx: Sender<Event>,
    /// Most events queued in `tx` (for an unbounded channel; a bounded one has its own).
    limit: usize,
    source: EventSource,
    metrics: Arc<EventMetrics>,
}

impl EventRecorder {
    /// A recorder feeding `tx` (the broadcaster's queue) as `component` on `host`.
    pub fn new(tx: Sender<Event>, component: &str, host: &str, metrics: Arc<EventMetrics>) -> Self {
        let source = EventSource { component: component.into(), host: host.into() };
        EventRecorder { tx, limit: usize::MAX, source, metrics }
    }

    /// At most `limit` events queued in the (unbounded) channel: past it an event is dropped
    /// and counted as for a full bounded queue. Producers racing at the limit may each add
    /// one more.
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Records an event now.
    pub fn event(&self, obj: &Reference, type_: &str, reason: &str, message: &str) {
        self.generate(obj, BTreeMap::new(), SystemTime::now(), type_, reason, message);
    }

    /// Records an event with a formatted message: `recorder.eventf(&r, NORMAL, "Started", format_args!(…))`.
    pub fn eventf(&self, obj: &Reference, type_: &str, reason: &str, args: std::fmt::Arguments) {
        self.event(obj, type_, reason, &args.to_string());
    }

    /// Records an event that happened at `timestamp`.
    pub fn past_event(&self, obj: &Reference, timestamp: SystemTime, type_: &str, reason: &str, message: &str) {
        self.generate(obj, BTreeMap::new(), timestamp, type_, reason, message);
    }

    /// Records an event carrying annotations.
    pub fn annotated_event(
        &self,
        obj: &Reference,
        annotations: BTreeMap<String, String>,
        type_: &str,
        reason: &str,
        message: &str,
    ) {
        self.generate(obj, annotations, SystemTime::now(), type_, reason, message);
    }

    fn generate(
        &self,
        obj: &Reference,
        annotations: BTreeMap<String, String>,
        at: SystemTime,
        type_: &str,
        reason: &str,
        message: &str,
    ) {
        if type_ != NORMAL && type_ != WARNING {
            log::warn!(
                "events: dropping event {reason:?} on {}/{} with unsupported type {type_:?} (allowed: Normal, Warning)",
                obj.object.kind,
                obj.object.name
            );
            return;
        }
        self.metrics.count(type_, reason);
        // Past the limit the event is not even made.
        if self.tx.len() >= self.limit {
            return self.dropped_full(obj, reason);
        }
        let nanos = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
        let namespace =
            if obj.object.namespace.is_empty() { "default".to_string() } else { obj.object.namespace.clone() };
        let event = Event {
            api_version: "v1".into(),
            kind: "Event".into(),
            metadata: ObjectMeta {
                name: format!("{}.{nanos:x}", obj.object.name),
                namespace,
                labels: obj.labels.clone(),
                annotations,
                ..Default::default()
            },
            involved_object: obj.object.clone(),
            reason: reason.into(),
            message: message.into(),
            source: self.source.clone(),
            first_timestamp: Some(Time(at)),
            last_timestamp: Some(Time(at)),
            count: 1,
            type_: type_.into(),
            event_time: None,
            reporting_component: self.source.component.clone(),
            reporting_instance: self.source.host.clone(),
        };
        match self.tx.try_send(event) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => self.dropped_full(obj, reason),
            Err(TrySendError::Disconnected(_)) => {
                log::debug!("events: broadcaster stopped, dropped {reason} on {}", obj.object.name);
            }
        }
    }

    /// Counts an event dropped because the queue is full.
    fn dropped_full(&self, obj: &Reference, reason: &str) {
        self.metrics.dropped_queue_full.inc();
        log::debug!("events: too many queued events, dropped {reason} on {}", obj.object.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_counters_render_every_cause_and_escape_reasons() {
        let m = EventMetrics::default();
        m.count(WARNING, "BackOff");
        m.count(WARNING, "BackOff");
        m.count(NORMAL, "Odd\"Reason");
        m.dropped_spam_filter.inc();
        let mut out = String::new();
        m.render(&mut out);
        assert_eq!(m.total(WARNING, "BackOff"), 2);
        assert_eq!(
            out,
            "# HELP ferrolet_events_total Events recorded, by type and reason.\n\
             # TYPE ferrolet_events_total counter\n\
             ferrolet_events_total{type=\"Normal\",reason=\"Odd\\\"Reason\"} 1\n\
             ferrolet_events_total{type=\"Warning\",reason=\"BackOff\"} 2\n\
             # HELP ferrolet_events_dropped_total Events dropped, by cause.\n\
             # TYPE ferrolet_events_dropped_total counter\n\
             ferrolet_events_dropped_total{cause=\"queue_full\"} 0\n\
             ferrolet_events_dropped_total{cause=\"spam_filter\"} 1\n\
             ferrolet_events_dropped_total{cause=\"sink_failed\"} 0\n\
             # HELP ferrolet_events_aggregated_total Events that replaced similar ones (\"combined from similar events\").\n\
             # TYPE ferrolet_events_aggregated_total counter\n\
             ferrolet_events_aggregated_total 0\n"
        );
    }
}
