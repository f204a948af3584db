//! What passes between the prober, its probe threads and the exec reaper: a probe to run
//! (`Job`) and what came of it (`Done`), reported through `Report` into the prober's `Inbox`.

use super::probes::{Outcome, Target};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One probe to run.
pub struct Job<K> {
    /// Who asked (the worker key).
    pub key: K,
    /// Which of the container's probes.
    pub kind: super::ProbeType,
    /// Where to.
    pub target: Target,
    /// When the worker was due.
    pub scheduled: Instant,
}

/// What came of a job.
pub struct Done<K> {
    /// The worker key.
    pub key: K,
    /// The outcome.
    pub outcome: Outcome,
    /// When the probe started (minus `scheduled` is its lateness).
    pub started: Instant,
    /// When the worker was due.
    pub scheduled: Instant,
    /// How long the probe took.
    pub took: Duration,
}

/// Where finished probes are reported; false when nobody listens any more.
pub type Report<K> = Arc<dyn Fn(Done<K>) -> bool + Send + Sync>;

/// Finished probes on their way to the prober. A result that changes nothing (a success
/// like the ones before it) waits in the inbox for the prober's next wake-up, which comes
/// at the next due time or tick anyway; any other result asks for a wake-up, once until the
/// prober drains the inbox. It holds at most one result per worker (a worker has one probe
/// in flight at a time).
pub struct Inbox<K> {
    done: parking_lot::Mutex<Vec<Done<K>>>,
    wake_asked: AtomicBool,
}

impl<K> Default for Inbox<K> {
    fn default() -> Self {
        Inbox { done: parking_lot::Mutex::new(Vec::new()), wake_asked: AtomicBool::new(false) }
    }
}

impl<K> Inbox<K> {
    /// Adds a result; true when the prober should be woken for it now (`urgent`, and no
    /// wake-up is already on its way).
    pub fn push(&self, d: Done<K>, urgent: bool) -> bool {
        self.done.lock().push(d);
        urgent && !self.wake_asked.swap(true, Ordering::AcqRel)
    }

    /// Moves every waiting result into `into` (kept empty by the caller, so its capacity is reused).
    pub fn drain_into(&self, into: &mut Vec<Done<K>>) {
        // Cleared first: a result pushed from here on asks for a wake-up of its own.
        self.wake_asked.store(false, Ordering::Release);
        std::mem::swap(&mut *self.done.lock(), into);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::prober::probes::Outcome;

    fn done(key: u32) -> Done<u32> {
        let now = Instant::now();
        Done { key, outcome: Outcome::Success(String::new()), started: now, scheduled: now, took: Duration::ZERO }
    }

    #[test]
    fn only_the_first_urgent_result_since_a_drain_asks_for_a_wake_up() {
        let inbox = Inbox::default();
        assert!(!inbox.push(done(1), false), "a result that changes nothing waits");
        assert!(inbox.push(done(2), true), "the first urgent one wakes the prober");
        assert!(!inbox.push(done(3), true), "a wake-up is already on its way");
        let mut got = Vec::new();
        inbox.drain_into(&mut got);
        assert_eq!(got.iter().map(|d| d.key).collect::<Vec<_>>(), [1, 2, 3]);
        got.clear();
        assert!(!inbox.push(done(4), false));
        assert!(inbox.push(done(5), true), "after a drain, an urgent result wakes it again");
        inbox.drain_into(&mut got);
        assert_eq!(got.len(), 2);
    }
}
