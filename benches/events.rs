//! `make bench`: the event correlator's throughput on one core, and its memory under an
//! event storm (1,000,000 events over 100,000 objects): the caches are LRUs, so memory must
//! stay bounded by their size whatever the storm. Prints numbers; asserts nothing.

use ferrolet::api::{Event, EventSource, ObjectMeta, ObjectReference, Time};
use ferrolet::base::clock::RealClock;
use ferrolet::node::events::correlator::{Correlation, CorrelatorOptions, EventCorrelator};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

fn vm_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()).unwrap_or(0)
}

fn event(object: usize, reason: &str, message: String) -> Event {
    let now = SystemTime::now();
    Event {
        metadata: ObjectMeta {
            name: format!("pod-{object}.{object:x}"),
            namespace: "default".into(),
            ..Default::default()
        },
        involved_object: ObjectReference {
            kind: "Pod".into(),
            namespace: "default".into(),
            name: format!("pod-{object}"),
            uid: format!("{object:032x}"),
            api_version: "v1".into(),
            field_path: "spec.containers{app}".into(),
            ..Default::default()
        },
        reason: reason.into(),
        message,
        source: EventSource { component: "ferrolet".into(), host: "node1".into() },
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: 1,
        type_: "Warning".into(),
        reporting_component: "ferrolet".into(),
        reporting_instance: "node1".into(),
        ..Default::default()
    }
}

fn main() {
    // The storm runs first, so that its memory reading is not mixed with the throughput
    // run's buffers.
    let reasons = ["BackOff", "Unhealthy", "Killing", "Started"];
    // Storm: 1,000,000 distinct events over 100,000 objects, generated on the fly.
    let base = vm_kib("VmRSS:");
    let mut cor = EventCorrelator::new(CorrelatorOptions::default(), Arc::new(RealClock));
    let start = Instant::now();
    let mut peak = base;
    for i in 0..1_000_000usize {
        let _ = cor.correlate(event(i % 100_000, reasons[i % 4], format!("storm message {i}")));
        if i % 100_000 == 0 {
            peak = peak.max(vm_kib("VmRSS:"));
        }
    }
    peak = peak.max(vm_kib("VmRSS:"));
    println!(
        "event storm: 1,000,000 events over 100,000 objects in {:.2} s; RSS {base} KiB before, peak {peak} KiB (+{} KiB), process high-water mark {} KiB",
        start.elapsed().as_secs_f64(),
        peak.saturating_sub(base),
        vm_kib("VmHWM:")
    );

    // Throughput: a working set of 4096 distinct events over 1000 objects, cycled, so the
    // run exercises de-duplication hits, aggregation and the spam filter like a busy node.
    let pool: Vec<Event> = (0..4096).map(|i| event(i % 1000, reasons[i % 4], format!("message {}", i % 13))).collect();
    let mut cor = EventCorrelator::new(CorrelatorOptions::default(), Arc::new(RealClock));
    let batch = 100_000;
    let rounds = 30;
    let (mut timed, mut total, mut recorded) = (0f64, 0usize, 0u64);
    let wall = Instant::now();
    for r in 0..rounds {
        // Building the events (what a recorder does anyway) is not the correlator's cost.
        let events: Vec<Event> = (0..batch).map(|i| pool[(r * batch + i) % pool.len()].clone()).collect();
        let start = Instant::now();
        for e in events {
            if let Correlation::Record { .. } = cor.correlate(e) {
                recorded += 1;
            }
        }
        timed += start.elapsed().as_secs_f64();
        total += batch;
    }
    println!(
        "correlator throughput: {:.0} events/s on one core ({total} events correlated in {timed:.2} s; {:.0} events/s counting the cloning too; {recorded} passed the spam filter)",
        total as f64 / timed,
        total as f64 / wall.elapsed().as_secs_f64()
    );
}
