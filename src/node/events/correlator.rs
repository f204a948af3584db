//! The EventCorrelator, with client-go's semantics (`tools/record/events_cache.go`) so that
//! cluster users see the events they know. For each event, in this order:
//!
//! 1. **aggregate**: events alike but for their message (same source, object, type, reason)
//!    that show 10 or more distinct messages within 600 s become one event
//!    `(combined from similar events): <message>`;
//! 2. **observe** (de-duplicate): an event seen before becomes the old event with `count`
//!    incremented, its name and `firstTimestamp` kept, and a patch of
//!    `count`/`lastTimestamp`/`message`;
//! 3. **spam filter**: a token bucket per source + object + type (burst 25, one token per
//!    300 s) drops the rest. It runs last, so the counters have already moved for a dropped
//!    event, as upstream.
//!
//! Each cache is an LRU of 4096 entries. Keys are 64-bit hashes of upstream's key strings:
//! equal strings give equal keys; a collision between different ones (about 1 in 10^15 for
//! caches this size) would merge two events' counts.

use super::lru::{FxBuild, FxHasher, Lru};
use crate::api::{Event, Time};
use crate::base::clock::Clock;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Correlator limits (client-go's `CorrelatorOptions`).
#[derive(Clone, Debug, PartialEq)]
pub struct CorrelatorOptions {
    /// Entries in each of the three LRU caches.
    pub lru_cache_size: usize,
    /// Distinct messages that trigger aggregation.
    pub max_events: usize,
    /// Aggregation window.
    pub max_interval: Duration,
    /// Spam filter burst.
    pub burst: u32,
    /// Spam filter refill, tokens per second.
    pub qps: f64,
}

impl Default for CorrelatorOptions {
    fn default() -> Self {
        CorrelatorOptions {
            lru_cache_size: 4096,
            max_events: 10,
            max_interval: Duration::from_secs(600),
            burst: 25,
            qps: 1.0 / 300.0,
        }
    }
}

/// Prefix of aggregated messages.
pub const AGGREGATED_PREFIX: &str = "(combined from similar events): ";

/// What the correlator decided for one event.
#[derive(Clone, Debug, PartialEq)]
// The event travels by value on the hot path; boxing it would cost an allocation per event
// to shrink the rare `Skip`.
#[allow(clippy::large_enum_variant)]
pub enum Correlation {
    /// Send it: create it, or (when `repeat`) patch the existing event with
    /// `sink::patch_body(&event)`.
    Record {
        /// The event to create or patch.
        event: Event,
        /// Seen before: patch `count`, `lastTimestamp` and `message` of the stored event.
        repeat: bool,
        /// The event replaced several similar ones (aggregation).
        aggregated: bool,
    },
    /// Dropped by the spam filter.
    Skip,
}

fn hash_fields(fields: &[&str]) -> u64 {
    let mut h = FxHasher::default();
    for f in fields {
        // The length prefix keeps ("ab","c") and ("a","bc") apart, where upstream's
        // plain concatenation would not; equal events still get equal keys.
        f.len().hash(&mut h);
        h.write(f.as_bytes());
    }
    h.finish()
}

/// Upstream `getEventKey`: everything that makes two events the same, message included.
fn event_key(e: &Event) -> u64 {
    let o = &e.involved_object;
    hash_fields(&[
        &e.source.component,
        &e.source.host,
        &o.kind,
        &o.namespace,
        &o.name,
        &o.field_path,
        &o.uid,
        &o.api_version,
        &e.type_,
        &e.reason,
        &e.message,
    ])
}

/// Upstream `EventAggregatorByReasonFunc`: the aggregate key (no field path, no message).
fn aggregate_key(e: &Event) -> u64 {
    let o = &e.involved_object;
    hash_fields(&[
        &e.source.component,
        &e.source.host,
        &o.kind,
        &o.namespace,
        &o.name,
        &o.uid,
        &o.api_version,
        &e.type_,
        &e.reason,
        &e.reporting_component,
        &e.reporting_instance,
    ])
}

/// Upstream `getSpamKey`: one bucket per source, object and type.
fn spam_key(e: &Event) -> u64 {
    let o = &e.involved_object;
    hash_fields(&[
        &e.source.component,
        &e.source.host,
        &o.kind,
        &o.namespace,
        &o.name,
        &o.uid,
        &o.api_version,
        &e.type_,
    ])
}

struct AggregateRecord {
    messages: HashSet<u64, FxBuild>,
    last: SystemTime,
}

#[derive(Clone)]
struct Observation {
    count: i32,
    first: Option<Time>,
    name: String,
    resource_version: String,
}

/// A token bucket that refills continuously (golang.org/x/time/rate semantics).
struct Bucket {
    tokens: f64,
    last: SystemTime,
}

/// Correlator limits that a running agent may change (SIGHUP): every correlator made with
/// the same `EventLimits` takes a new setting at its next event. The LRU caches keep the
/// size they were made with.
#[derive(Clone, Debug)]
pub struct EventLimits(Arc<LimitsInner>);

#[derive(Debug)]
struct LimitsInner {
    /// Bumped by each `set`, so a correlator copies the options only when they changed.
    generation: AtomicU64,
    opts: parking_lot::Mutex<CorrelatorOptions>,
}

impl EventLimits {
    /// Limits starting at `opts`.
    pub fn new(opts: CorrelatorOptions) -> EventLimits {
        EventLimits(Arc::new(LimitsInner { generation: AtomicU64::new(0), opts: parking_lot::Mutex::new(opts) }))
    }

    /// New limits for every correlator sharing these.
    pub fn set(&self, opts: CorrelatorOptions) {
        *self.0.opts.lock() = opts;
        self.0.generation.fetch_add(1, Ordering::Release);
    }

    /// The limits now.
    pub fn get(&self) -> CorrelatorOptions {
        self.0.opts.lock().clone()
    }
}

/// The correlator: three LRU caches and a clock.
pub struct EventCorrelator {
    opts: CorrelatorOptions,
    /// Where changed limits come from, and the generation last taken.
    limits: Option<(EventLimits, u64)>,
    clock: Arc<dyn Clock>,
    aggregates: Lru<u64, AggregateRecord>,
    observations: Lru<u64, Observation>,
    buckets: Lru<u64, Bucket>,
}

fn since(now: SystemTime, then: SystemTime) -> Duration {
    now.duration_since(then).unwrap_or(Duration::ZERO)
}

impl EventCorrelator {
    /// A correlator with the given limits.
    pub fn new(opts: CorrelatorOptions, clock: Arc<dyn Clock>) -> Self {
        let n = opts.lru_cache_size;
        EventCorrelator {
            opts,
            limits: None,
            clock,
            aggregates: Lru::new(n),
            observations: Lru::new(n),
            buckets: Lru::new(n),
        }
    }

    /// A correlator that follows `limits` (its caches sized as they are now).
    pub fn following(limits: &EventLimits, clock: Arc<dyn Clock>) -> Self {
        let generation = limits.0.generation.load(Ordering::Acquire);
        let mut c = EventCorrelator::new(limits.get(), clock);
        c.limits = Some((limits.clone(), generation));
        c
    }

    /// Runs the three steps on one event.
    pub fn correlate(&mut self, event: Event) -> Correlation {
        if let Some((limits, seen)) = &mut self.limits {
            let now = limits.0.generation.load(Ordering::Acquire);
            if now != *seen {
                *seen = now;
                let lru_cache_size = self.opts.lru_cache_size;
                self.opts = CorrelatorOptions { lru_cache_size, ..limits.get() };
            }
        }
        let (event, key, aggregated) = self.aggregate(event);
        let (event, repeat) = self.observe(event, key);
        if self.filter(&event) {
            return Correlation::Skip;
        }
        Correlation::Record { event, repeat, aggregated }
    }

    fn aggregate(&mut self, event: Event) -> (Event, u64, bool) {
        let now = self.clock.now();
        let key = aggregate_key(&event);
        let max_interval = self.opts.max_interval;
        let record = self
            .aggregates
            .get_or_insert_with(key, || AggregateRecord { messages: HashSet::default(), last: UNIX_EPOCH });
        if since(now, record.last) > max_interval {
            record.messages.clear();
        }
        let mut h = FxHasher::default();
        h.write(event.message.as_bytes());
        record.messages.insert(h.finish());
        record.last = now;
        if record.messages.len() < self.opts.max_events {
            let key = event_key(&event);
            return (event, key, false);
        }
        // Keep the set from growing past the limit.
        if let Some(any) = record.messages.iter().next().copied() {
            record.messages.remove(&any);
        }
        let nanos = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
        let combined = Event {
            api_version: event.api_version.clone(),
            kind: event.kind.clone(),
            metadata: crate::api::ObjectMeta {
                name: format!("{}.{nanos:x}", event.involved_object.name),
                namespace: event.metadata.namespace.clone(),
                labels: event.metadata.labels.clone(),
                ..Default::default()
            },
            count: 1,
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            message: format!("{AGGREGATED_PREFIX}{}", event.message),
            ..event
        };
        (combined, key, true)
    }

    fn observe(&mut self, mut event: Event, key: u64) -> (Event, bool) {
        let mut repeat = false;
        if let Some(last) = self.observations.get_mut(&key).filter(|o| o.count > 0) {
            event.metadata.name = last.name.clone();
            event.metadata.resource_version = last.resource_version.clone();
            event.first_timestamp = last.first;
            event.count = last.count + 1;
            repeat = true;
        }
        self.observations.put(
            key,
            Observation {
                count: event.count,
                first: event.first_timestamp,
                name: event.metadata.name.clone(),
                resource_version: event.metadata.resource_version.clone(),
            },
        );
        (event, repeat)
    }

    /// True when the event must be dropped.
    fn filter(&mut self, event: &Event) -> bool {
        let now = self.clock.now();
        let (burst, qps) = (self.opts.burst as f64, self.opts.qps);
        let b = self.buckets.get_or_insert_with(spam_key(event), || Bucket { tokens: burst, last: now });
        b.tokens = (b.tokens + since(now, b.last).as_secs_f64() * qps).min(burst);
        b.last = b.last.max(now);
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            false
        } else {
            true
        }
    }

    /// After a sink stored the event: remember its name, version and count (upstream
    /// `UpdateState`, keyed by the full event key).
    pub fn update_state(&mut self, event: &Event) {
        self.observations.put(
            event_key(event),
            Observation {
                count: event.count,
                first: event.first_timestamp,
                name: event.metadata.name.clone(),
                resource_version: event.metadata.resource_version.clone(),
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{EventSource, ObjectReference};
    use crate::base::clock::FakeClock;

    fn clock() -> FakeClock {
        FakeClock::new(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
    }

    fn event(c: &FakeClock, object: &str, type_: &str, reason: &str, message: &str) -> Event {
        let now = c.now();
        Event {
            metadata: crate::api::ObjectMeta {
                name: format!("{object}.{}", now.duration_since(UNIX_EPOCH).unwrap().as_nanos()),
                namespace: "default".into(),
                ..Default::default()
            },
            involved_object: ObjectReference {
                kind: "Pod".into(),
                namespace: "default".into(),
                name: object.into(),
                uid: format!("uid-{object}"),
                api_version: "v1".into(),
                ..Default::default()
            },
            reason: reason.into(),
            message: message.into(),
            source: EventSource { component: "ferrolet".into(), host: "node1".into() },
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: 1,
            type_: type_.into(),
            ..Default::default()
        }
    }

    fn record(c: Correlation) -> (Event, Option<serde_json::Value>, bool) {
        match c {
            Correlation::Record { event, repeat, aggregated } => {
                let patch = repeat.then(|| crate::node::events::sink::patch_body(&event));
                (event, patch, aggregated)
            }
            Correlation::Skip => panic!("unexpected skip"),
        }
    }

    fn correlator(c: &FakeClock, opts: CorrelatorOptions) -> EventCorrelator {
        EventCorrelator::new(opts, Arc::new(c.clone()))
    }

    #[test]
    fn identical_events_are_deduplicated_with_a_count_patch() {
        let c = clock();
        let mut cor = correlator(&c, CorrelatorOptions::default());
        let (first, patch, _) = record(cor.correlate(event(&c, "web", "Warning", "BackOff", "back-off")));
        assert_eq!((first.count, patch), (1, None));
        c.advance(Duration::from_secs(7));
        let (second, patch, _) = record(cor.correlate(event(&c, "web", "Warning", "BackOff", "back-off")));
        assert_eq!(second.count, 2);
        assert_eq!(second.metadata.name, first.metadata.name, "the original name is kept");
        assert_eq!(second.first_timestamp, first.first_timestamp, "and the first timestamp");
        let later = Time(c.now());
        assert_eq!(patch, Some(serde_json::json!({"count": 2, "lastTimestamp": later, "message": "back-off"})));
        let (third, _, _) = record(cor.correlate(event(&c, "web", "Warning", "BackOff", "back-off")));
        assert_eq!(third.count, 3);
        let (other, patch, _) = record(cor.correlate(event(&c, "web", "Warning", "BackOff", "different")));
        assert_eq!((other.count, patch), (1, None), "another message is another event");
    }

    #[test]
    fn ten_distinct_messages_within_the_window_aggregate() {
        let c = clock();
        let mut cor = correlator(&c, CorrelatorOptions::default());
        for i in 0..9 {
            let (e, _, aggregated) =
                record(cor.correlate(event(&c, "web", "Warning", "Unhealthy", &format!("probe failed {i}"))));
            assert!(!aggregated);
            assert_eq!(e.message, format!("probe failed {i}"));
            c.advance(Duration::from_secs(1));
        }
        let (e, patch, aggregated) = record(cor.correlate(event(&c, "web", "Warning", "Unhealthy", "probe failed 9")));
        assert!(aggregated);
        assert_eq!(e.message, "(combined from similar events): probe failed 9");
        assert_eq!((e.count, patch), (1, None));
        assert!(e.metadata.name.starts_with("web."));
        // The next distinct one updates the aggregate event instead of creating one.
        let (e2, patch, _) = record(cor.correlate(event(&c, "web", "Warning", "Unhealthy", "probe failed 10")));
        assert_eq!(e2.metadata.name, e.metadata.name);
        assert_eq!(e2.count, 2);
        assert_eq!(patch.unwrap()["message"], "(combined from similar events): probe failed 10");
    }

    #[test]
    fn the_aggregation_window_resets_after_600_seconds() {
        let c = clock();
        let mut cor = correlator(&c, CorrelatorOptions::default());
        for i in 0..9 {
            record(cor.correlate(event(&c, "web", "Warning", "Unhealthy", &format!("m{i}"))));
        }
        c.advance(Duration::from_secs(601));
        let (e, _, aggregated) = record(cor.correlate(event(&c, "web", "Warning", "Unhealthy", "m9")));
        assert!(!aggregated, "the window restarted with this message");
        assert_eq!(e.message, "m9");
    }

    #[test]
    fn changed_limits_reach_a_following_correlator_at_its_next_event() {
        let c = clock();
        let limits = EventLimits::new(CorrelatorOptions { burst: 1, ..CorrelatorOptions::default() });
        let mut cor = EventCorrelator::following(&limits, Arc::new(c.clone()));
        let e = |m: &str| event(&c, "web", "Warning", "BackOff", m);
        assert!(matches!(cor.correlate(e("a")), Correlation::Record { .. }));
        assert!(matches!(cor.correlate(e("b")), Correlation::Skip), "a burst of 1");
        limits.set(CorrelatorOptions { burst: 3, qps: 1000.0, ..CorrelatorOptions::default() });
        c.advance(Duration::from_secs(1));
        assert!(matches!(cor.correlate(e("c")), Correlation::Record { .. }), "refilled at the new rate");
    }

    #[test]
    fn spam_filter_allows_a_burst_of_25_then_one_per_300_seconds() {
        let c = clock();
        let mut cor = correlator(&c, CorrelatorOptions::default());
        let mut accepted = 0;
        for i in 0..40 {
            // Distinct reasons defeat aggregation; the bucket is per object and type only.
            if cor.correlate(event(&c, "web", "Warning", &format!("R{i}"), "m")) != Correlation::Skip {
                accepted += 1;
            }
        }
        assert_eq!(accepted, 25);
        c.advance(Duration::from_secs(299));
        assert_eq!(cor.correlate(event(&c, "web", "Warning", "Late", "m")), Correlation::Skip);
        c.advance(Duration::from_secs(1));
        assert_ne!(cor.correlate(event(&c, "web", "Warning", "Later", "m")), Correlation::Skip);
        assert_eq!(cor.correlate(event(&c, "web", "Warning", "Latest", "m")), Correlation::Skip);
        assert_ne!(
            cor.correlate(event(&c, "web", "Normal", "Other", "m")),
            Correlation::Skip,
            "types have separate buckets"
        );
        assert_ne!(
            cor.correlate(event(&c, "db", "Warning", "Other", "m")),
            Correlation::Skip,
            "objects have separate buckets"
        );
    }

    #[test]
    fn caches_are_bounded_and_evict_the_least_recent() {
        let c = clock();
        let opts = CorrelatorOptions { lru_cache_size: 2, ..Default::default() };
        let mut cor = correlator(&c, opts);
        record(cor.correlate(event(&c, "a", "Normal", "R", "m")));
        record(cor.correlate(event(&c, "b", "Normal", "R", "m")));
        record(cor.correlate(event(&c, "c", "Normal", "R", "m"))); // evicts a's observation
        let (again, patch, _) = record(cor.correlate(event(&c, "a", "Normal", "R", "m")));
        assert_eq!((again.count, patch), (1, None), "a was forgotten, so it is new again");
        let (c2, _, _) = record(cor.correlate(event(&c, "c", "Normal", "R", "m")));
        assert_eq!(c2.count, 2, "c is still remembered");
        assert!(cor.observations.len() <= 2 && cor.aggregates.len() <= 2 && cor.buckets.len() <= 2);
    }

    #[test]
    fn update_state_records_what_the_sink_stored() {
        let c = clock();
        let mut cor = correlator(&c, CorrelatorOptions::default());
        let (mut e, _, _) = record(cor.correlate(event(&c, "web", "Normal", "Started", "Started container app")));
        e.metadata.resource_version = "42".into();
        cor.update_state(&e);
        let (again, _, _) = record(cor.correlate(event(&c, "web", "Normal", "Started", "Started container app")));
        assert_eq!(again.metadata.resource_version, "42");
        assert_eq!(again.count, 2);
    }
}
