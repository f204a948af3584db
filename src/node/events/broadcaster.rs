//! The broadcaster: one thread takes events from a bounded queue and offers each to every
//! watcher's own bounded channel, skipping a watcher whose channel is full (counted), so no
//! producer and no other watcher ever waits for a slow one. Each watcher runs on its own
//! named thread. Shutdown drains what is queued, within a timeout. The channels are
//! unbounded ones held to their bounds by counting: a bounded channel allocates every slot
//! up front (an event is 0.6 KB, so 1000 slots are 0.6 MB each, resident however idle the
//! node), an unbounded one a block of 31 at a time, freed once read.

use super::{EventMetrics, EventRecorder};
use crate::api::Event;
use crate::base::manager::{Exit, Health, Worker};
use crossbeam_channel::{select, unbounded, Receiver, Sender};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Watcher names and their channels.
type Watchers = Arc<Mutex<Vec<(String, Sender<Event>)>>>;

/// The running broadcaster and its watchers.
pub struct Broadcaster {
    incoming: Sender<Event>,
    /// Most events queued in `incoming`.
    queue: usize,
    watchers: Watchers,
    metrics: Arc<EventMetrics>,
    health: Health,
    /// `fl-events` first, then the watchers.
    threads: Vec<Worker>,
}

impl Broadcaster {
    /// Starts the distribution thread (`fl-events`) with an incoming queue of `queue` events;
    /// each watcher gets a channel of `watcher_capacity`.
    pub fn start(
        queue: usize,
        watcher_capacity: usize,
        metrics: Arc<EventMetrics>,
        health: &Health,
    ) -> std::io::Result<Self> {
        let (tx, rx) = unbounded::<Event>();
        let watcher_capacity = watcher_capacity.max(1);
        let watchers: Watchers = Arc::default();
        let (w, m) = (watchers.clone(), metrics.clone());
        let worker = Worker::spawn("fl-events", health, move |stop| {
            loop {
                select! {
                    // Running --stop--> Draining: deliver what is already queued, then end.
                    recv(stop.receiver()) -> _ => break,
                    recv(rx) -> e => match e {
                        Ok(e) => distribute(&w, watcher_capacity, &m, e),
                        Err(_) => break,
                    },
                }
            }
            while let Ok(e) = rx.try_recv() {
                distribute(&w, watcher_capacity, &m, e);
            }
            // Dropping the watcher senders ends each watcher once it has drained its channel.
            w.lock().clear();
            Exit::Done
        })?;
        Ok(Broadcaster {
            incoming: tx,
            queue: queue.max(1),
            watchers,
            metrics,
            health: health.clone(),
            threads: vec![worker],
        })
    }

    /// A recorder feeding this broadcaster.
    pub fn recorder(&self, component: &str, host: &str) -> EventRecorder {
        EventRecorder::new(self.incoming.clone(), component, host, self.metrics.clone()).with_limit(self.queue)
    }

    /// A raw watcher: a channel receiving every event from now on, at most
    /// `watcher_capacity` of them waiting.
    pub fn watch(&self, name: &str) -> Receiver<Event> {
        let (tx, rx) = unbounded();
        self.watchers.lock().push((name.into(), tx));
        rx
    }

    /// A watcher on its own thread `name` that calls `handle` for every event.
    pub fn start_watcher(&mut self, name: &str, mut handle: impl FnMut(Event) + Send + 'static) -> std::io::Result<()> {
        let rx = self.watch(name);
        let worker = Worker::spawn(name, &self.health, move |_| {
            // A watcher ends once `fl-events` has dropped its sender and the channel is
            // drained, so every queued event is handled before shutdown completes.
            for e in rx.iter() {
                handle(e);
            }
            Exit::Done
        })?;
        self.threads.push(worker);
        Ok(())
    }

    /// Stops intake, delivers what is queued and waits for the watchers to finish, all
    /// within `timeout`. Returns the threads that did not finish in time.
    pub fn shutdown(mut self, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let mut threads = self.threads.drain(..);
        let mut stuck = Vec::new();
        // Only `fl-events` is signalled: the watchers end when it drops their senders.
        if let Some(mut events) = threads.next() {
            events.signal_stop();
            stuck.extend(events.join(deadline).err());
        }
        stuck.extend(threads.filter_map(|w| w.join(deadline).err()));
        stuck.into_iter().map(|e| format!("{} did not finish delivering events within {timeout:?}", e.name)).collect()
    }
}

fn distribute(watchers: &Mutex<Vec<(String, Sender<Event>)>>, capacity: usize, metrics: &EventMetrics, e: Event) {
    for (name, w) in watchers.lock().iter() {
        if w.len() >= capacity {
            metrics.dropped_sink_failed.inc();
            log::debug!("events: watcher {name} is full, dropped {} on {}", e.reason, e.involved_object.name);
        } else {
            // Only `fl-events` sends to a watcher, so it cannot have filled up meanwhile;
            // a watcher that ended is simply gone.
            let _ = w.send(e.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::manager::testing::wait_until;
    use crate::node::events::{Reference, NORMAL};
    use crossbeam_channel::bounded;

    #[test]
    fn a_stuck_watcher_never_blocks_producers_and_drops_are_counted_exactly() {
        let metrics = Arc::new(EventMetrics::default());
        let health = Health::default();
        let mut b = Broadcaster::start(10, 5, metrics.clone(), &health).unwrap();
        // One watcher that never reads, one whose handler blocks on its first event.
        let stuck = b.watch("stuck");
        let (block_tx, block_rx) = bounded::<()>(0);
        b.start_watcher("fl-test-block", move |_| {
            let _ = block_rx.recv_timeout(Duration::from_secs(30));
        })
        .unwrap();
        let r = b.recorder("ferrolet", "node1");
        // On a thread of its own, so that a recorder that waited fails here instead of hanging.
        let (recorded_tx, recorded) = bounded::<()>(1);
        std::thread::spawn(move || {
            for i in 0..1000 {
                r.event(&Reference::node("node1"), NORMAL, "Test", &format!("event {i}"));
            }
            let _ = recorded_tx.send(());
        });
        recorded.recv_timeout(Duration::from_secs(10)).expect("recording never waits for a watcher");
        let delivered = 1000 - metrics.dropped_queue_full.get();
        // Every delivered event is either accepted or counted, once per watcher: the stuck
        // one holds 5; the blocked one took 1 or 0 (timing) and holds 5. Waited for:
        // `fl-events` offers each event in turn, and neither watcher holds it up.
        let counted = || stuck.len() as u64 + 5 + metrics.dropped_sink_failed.get();
        wait_until("every delivered event offered to both watchers", Duration::from_secs(10), || {
            counted() + 1 >= 2 * delivered
        });
        assert_eq!(stuck.len(), 5);
        let blocked_took = 2 * delivered - counted();
        assert!(blocked_took <= 1, "delivered={delivered} counted={}", counted());
        assert_eq!(metrics.total(NORMAL, "Test"), 1000);
        drop(block_tx);
        assert!(b.shutdown(Duration::from_secs(5)).is_empty());
    }

    #[test]
    fn shutdown_delivers_what_was_queued() {
        let metrics = Arc::new(EventMetrics::default());
        let mut b = Broadcaster::start(1000, 1000, metrics, &Health::default()).unwrap();
        let seen = Arc::new(Mutex::new(0));
        let s = seen.clone();
        b.start_watcher("fl-test-count", move |_| *s.lock() += 1).unwrap();
        let r = b.recorder("ferrolet", "node1");
        for _ in 0..500 {
            r.event(&Reference::node("node1"), NORMAL, "Test", "m");
        }
        assert!(b.shutdown(Duration::from_secs(5)).is_empty());
        assert_eq!(*seen.lock(), 500);
        r.event(&Reference::node("node1"), NORMAL, "Test", "after shutdown is dropped quietly");
    }
}
