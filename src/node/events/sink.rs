//! Sinks: where correlated events are written. `EventSink` is the interface the local event
//! store implements and the apiserver sink will; `record_to_sink` is client-go's
//! `recordToSink`: correlate, then create (or patch a repeat, falling back to create when
//! the old event is gone), retrying transport failures up to 12 times, 10 s apart, the first
//! sleep randomized so that many nodes do not retry in step.

use super::correlator::{Correlation, EventCorrelator};
use super::EventMetrics;
use crate::api::Event;
use std::time::Duration;

/// Why a sink did not store an event.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SinkError {
    /// The event to patch does not exist (any more): create it instead.
    #[error("event not found")]
    NotFound,
    /// A transient failure (transport, timeout): try again.
    #[error("{0}")]
    Transient(String),
    /// Rejected for good (an API status error): do not retry.
    #[error("{0}")]
    Rejected(String),
}

/// Where events are stored: the local store, or an apiserver.
pub trait EventSink: Send {
    /// Creates a new event; returns it as stored.
    fn create(&mut self, event: &Event) -> Result<Event, SinkError>;
    /// Patches the stored event named like `event` with `patch_body(event)` (its count,
    /// lastTimestamp and message); returns it as stored.
    fn patch(&mut self, event: &Event) -> Result<Event, SinkError>;
}

/// The strategic merge patch client-go sends for a repeated event: what differs between the
/// event and a copy with count 0, lastTimestamp at the epoch and no message.
pub fn patch_body(event: &Event) -> serde_json::Value {
    serde_json::json!({
        "count": event.count,
        "lastTimestamp": event.last_timestamp,
        "message": event.message,
    })
}

/// client-go's retry policy for one event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// `maxTriesPerEvent`.
    pub max_tries: u32,
    /// `defaultSleepDuration`.
    pub sleep: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { max_tries: 12, sleep: Duration::from_secs(10) }
    }
}

/// What became of one event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Stored after this many tries.
    Stored(u32),
    /// Dropped by the spam filter.
    Filtered,
    /// Rejected by the sink, or out of tries, or stopped while waiting to retry.
    Failed,
}

/// Correlates `event` and writes it to `sink`. `sleep(d)` waits between tries and returns
/// false when the caller is shutting down; `jitter` in [0, 1) scales the first sleep.
pub fn record_to_sink(
    sink: &mut dyn EventSink,
    correlator: &mut EventCorrelator,
    event: Event,
    policy: RetryPolicy,
    metrics: &EventMetrics,
    sleep: &mut dyn FnMut(Duration) -> bool,
    jitter: f64,
) -> Outcome {
    let (event, repeat) = match correlator.correlate(event) {
        Correlation::Skip => {
            metrics.dropped_spam_filter.inc();
            return Outcome::Filtered;
        }
        Correlation::Record { event, repeat, aggregated } => {
            if aggregated {
                metrics.aggregated.inc();
            }
            (event, repeat)
        }
    };
    let give_up = |why: &str| {
        let o = &event.involved_object;
        log::warn!("events: dropping event {} ({} on {}): {why}", event.metadata.name, event.reason, o.name);
        metrics.dropped_sink_failed.inc();
        Outcome::Failed
    };
    let mut tries = 0;
    loop {
        tries += 1;
        let result = match repeat && event.count > 1 {
            true => match sink.patch(&event) {
                Err(SinkError::NotFound) => {
                    let mut fresh = event.clone();
                    fresh.metadata.resource_version.clear();
                    sink.create(&fresh)
                }
                other => other,
            },
            _ => sink.create(&event),
        };
        match result {
            Ok(stored) => {
                correlator.update_state(&stored);
                return Outcome::Stored(tries);
            }
            Err(SinkError::Rejected(e)) => return give_up(&format!("the server rejected it ({e})")),
            Err(e) => log::debug!("events: writing {} failed (try {tries}): {e}", event.metadata.name),
        }
        if tries >= policy.max_tries {
            return give_up("retry limit exceeded");
        }
        let pause = if tries == 1 { policy.sleep.mul_f64(jitter.clamp(0.0, 1.0)) } else { policy.sleep };
        if !sleep(pause) {
            return give_up("stopping while waiting to retry");
        }
    }
}

/// The log watcher's line for an event, like kubelet's "Event occurred" line.
pub fn log_event(e: &Event) {
    let o = &e.involved_object;
    let object = if o.namespace.is_empty() { o.name.clone() } else { format!("{}/{}", o.namespace, o.name) };
    let line = format!(
        "events: Event occurred object={object:?} fieldPath={:?} kind={:?} type={:?} reason={:?} message={:?}",
        o.field_path, o.kind, e.type_, e.reason, e.message
    );
    if e.type_ == super::WARNING {
        log::warn!("{line}");
    } else {
        log::info!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::clock::FakeClock;
    use crate::node::events::correlator::CorrelatorOptions;
    use crate::node::events::{EventRecorder, Reference, WARNING};
    use std::sync::Arc;
    use std::time::UNIX_EPOCH;

    /// A sink that fails the way it is told to and records every call.
    struct FakeSink {
        fail_with: Vec<SinkError>,
        calls: Vec<String>,
        stored: Vec<Event>,
    }

    impl FakeSink {
        fn next(&mut self, call: String, e: &Event) -> Result<Event, SinkError> {
            self.calls.push(call);
            if !self.fail_with.is_empty() {
                return Err(self.fail_with.remove(0));
            }
            let mut e = e.clone();
            e.metadata.resource_version = self.calls.len().to_string();
            self.stored.push(e.clone());
            Ok(e)
        }
    }

    impl EventSink for FakeSink {
        fn create(&mut self, e: &Event) -> Result<Event, SinkError> {
            self.next(format!("create {}", e.count), e)
        }
        fn patch(&mut self, e: &Event) -> Result<Event, SinkError> {
            self.next(format!("patch {}", patch_body(e)["count"]), e)
        }
    }

    fn one_event() -> Event {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let r = EventRecorder::new(tx, "ferrolet", "node1", Arc::new(EventMetrics::default()));
        r.event(&Reference::node("node1"), WARNING, "Boom", "it broke");
        rx.try_recv().unwrap()
    }

    fn setup(fail_with: Vec<SinkError>) -> (FakeSink, EventCorrelator, EventMetrics) {
        let clock = FakeClock::new(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        (
            FakeSink { fail_with, calls: vec![], stored: vec![] },
            EventCorrelator::new(CorrelatorOptions::default(), Arc::new(clock)),
            EventMetrics::default(),
        )
    }

    #[test]
    fn transient_failures_are_retried_12_times_10s_apart_with_a_random_first_sleep() {
        let (mut sink, mut cor, m) = setup(vec![SinkError::Transient("connection refused".into()); 20]);
        let mut sleeps = Vec::new();
        let out = record_to_sink(
            &mut sink,
            &mut cor,
            one_event(),
            RetryPolicy::default(),
            &m,
            &mut |d| {
                sleeps.push(d);
                true
            },
            0.25,
        );
        assert_eq!(out, Outcome::Failed);
        assert_eq!(sink.calls.len(), 12);
        assert_eq!(sleeps.len(), 11);
        assert_eq!(sleeps[0], Duration::from_millis(2500));
        assert!(sleeps[1..].iter().all(|d| *d == Duration::from_secs(10)));
        assert_eq!(m.dropped_sink_failed.get(), 1);
    }

    #[test]
    fn success_after_failures_stops_retrying_and_a_rejection_is_final() {
        let (mut sink, mut cor, m) =
            setup(vec![SinkError::Transient("timeout".into()), SinkError::Transient("timeout".into())]);
        let out = record_to_sink(&mut sink, &mut cor, one_event(), RetryPolicy::default(), &m, &mut |_| true, 0.0);
        assert_eq!(out, Outcome::Stored(3));
        let (mut sink, mut cor, m) = setup(vec![SinkError::Rejected("namespace terminating".into())]);
        let out = record_to_sink(&mut sink, &mut cor, one_event(), RetryPolicy::default(), &m, &mut |_| true, 0.0);
        assert_eq!((out, sink.calls.len()), (Outcome::Failed, 1));
    }

    #[test]
    fn repeats_are_patched_and_a_vanished_event_is_created_again() {
        let (mut sink, mut cor, m) = setup(vec![]);
        let e = one_event();
        record_to_sink(&mut sink, &mut cor, e.clone(), RetryPolicy::default(), &m, &mut |_| true, 0.0);
        record_to_sink(&mut sink, &mut cor, e.clone(), RetryPolicy::default(), &m, &mut |_| true, 0.0);
        sink.fail_with.push(SinkError::NotFound);
        record_to_sink(&mut sink, &mut cor, e, RetryPolicy::default(), &m, &mut |_| true, 0.0);
        assert_eq!(sink.calls, ["create 1", "patch 2", "patch 3", "create 3"]);
        assert_eq!(sink.stored.last().unwrap().metadata.resource_version, "4");
    }

    #[test]
    fn stopping_while_waiting_to_retry_gives_up() {
        let (mut sink, mut cor, m) = setup(vec![SinkError::Transient("down".into()); 5]);
        let out = record_to_sink(&mut sink, &mut cor, one_event(), RetryPolicy::default(), &m, &mut |_| false, 0.5);
        assert_eq!((out, sink.calls.len()), (Outcome::Failed, 1));
    }
}
