//! Container restart back-off, as kubelet's `flowcontrol.Backoff` with 10 s initial delay and
//! a 5 min cap: the first crash restarts at once, then 10 s, 20 s, 40 s … 300 s; an exit more
//! than 10 min (twice the cap) after the last restart starts the schedule over.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// kubelet's `backOffPeriod`.
pub const INITIAL: Duration = Duration::from_secs(10);
/// kubelet's `MaxContainerBackOff`.
pub const MAX: Duration = Duration::from_secs(300);

/// (pod uid, container name).
pub type Key = (String, String);

#[derive(Clone, Copy, Debug)]
struct Entry {
    delay: Duration,
    last_update: SystemTime,
}

/// Per-container back-off state.
#[derive(Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: HashMap<Key, Entry>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(INITIAL, MAX)
    }
}

fn since(later: SystemTime, earlier: SystemTime) -> Duration {
    later.duration_since(earlier).unwrap_or(Duration::ZERO)
}

impl Backoff {
    /// A back-off with the given initial delay and cap.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff { initial, max, entries: HashMap::new() }
    }

    fn expired(&self, e: &Entry, event_time: SystemTime) -> bool {
        since(event_time, e.last_update) > self.max * 2
    }

    /// Records a restart caused by an event (exit) at `event_time`: the delay before the
    /// next restart grows, or starts over when the container had been stable.
    pub fn next(&mut self, key: &Key, event_time: SystemTime, now: SystemTime) {
        let (initial, max) = (self.initial, self.max);
        let fresh = match self.entries.get(key) {
            None => true,
            Some(e) => self.expired(e, event_time),
        };
        let e = self.entries.entry(key.clone()).or_insert(Entry { delay: initial, last_update: now });
        e.delay = if fresh { initial } else { (e.delay * 2).min(max) };
        e.last_update = now;
    }

    /// Whether a restart for an event at `event_time` must still wait at `now`.
    pub fn in_backoff_since(&self, key: &Key, event_time: SystemTime, now: SystemTime) -> bool {
        match self.entries.get(key) {
            None => false,
            Some(e) if self.expired(e, event_time) => false,
            Some(e) => since(now, event_time) < e.delay,
        }
    }

    /// kubelet's `IsInBackOffSinceUpdate` (image pulls): whether `now` is still within the
    /// delay since the last `next`.
    pub fn in_backoff_since_update(&self, key: &Key, now: SystemTime) -> bool {
        match self.entries.get(key) {
            None => false,
            Some(e) if self.expired(e, now) => false,
            Some(e) => since(now, e.last_update) < e.delay,
        }
    }

    /// The current delay for a key.
    pub fn delay(&self, key: &Key) -> Option<Duration> {
        self.entries.get(key).map(|e| e.delay)
    }

    /// How many keys have a back-off.
    #[cfg(test)]
    pub fn entries(&self) -> usize {
        self.entries.len()
    }

    /// Forgets every container of a pod.
    pub fn forget_pod(&mut self, uid: &str) {
        self.entries.retain(|(u, _), _| u != uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        ("uid".into(), "app".into())
    }

    #[test]
    fn schedule_is_immediate_then_doubles_to_the_cap() {
        let mut b = Backoff::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut now = t0;
        let mut waits = Vec::new();
        for _ in 0..9 {
            // The container exits right after it was (re)started.
            let exit = now;
            let mut waited = Duration::ZERO;
            while b.in_backoff_since(&key(), exit, now) {
                now += Duration::from_secs(1);
                waited += Duration::from_secs(1);
            }
            waits.push(waited.as_secs());
            b.next(&key(), exit, now);
        }
        assert_eq!(waits, vec![0, 10, 20, 40, 80, 160, 300, 300, 300]);
    }

    #[test]
    fn ten_minutes_of_running_resets_the_schedule() {
        let mut b = Backoff::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        b.next(&key(), t0, t0);
        b.next(&key(), t0, t0);
        assert_eq!(b.delay(&key()), Some(Duration::from_secs(20)));
        let exit = t0 + Duration::from_secs(601);
        assert!(!b.in_backoff_since(&key(), exit, exit));
        b.next(&key(), exit, exit);
        assert_eq!(b.delay(&key()), Some(INITIAL));
    }

    #[test]
    fn pull_back_off_counts_from_each_failure_and_doubles_to_the_cap() {
        let mut b = Backoff::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut now = t0;
        let mut waits = Vec::new();
        for _ in 0..8 {
            // A pull fails as soon as the back-off lets it start.
            b.next(&key(), now, now);
            let failed = now;
            while b.in_backoff_since_update(&key(), now) {
                now += Duration::from_secs(1);
            }
            waits.push(now.duration_since(failed).unwrap().as_secs());
        }
        assert_eq!(waits, vec![10, 20, 40, 80, 160, 300, 300, 300]);
        // Ten quiet minutes after the last failure, the next one starts over at 10 s.
        now += Duration::from_secs(601);
        assert!(!b.in_backoff_since_update(&key(), now));
        b.next(&key(), now, now);
        assert_eq!(b.delay(&key()), Some(INITIAL));
    }

    #[test]
    fn forgetting_a_pod_drops_its_entries() {
        let mut b = Backoff::default();
        let t0 = SystemTime::UNIX_EPOCH;
        b.next(&key(), t0, t0);
        b.forget_pod("uid");
        assert_eq!(b.delay(&key()), None);
    }
}
