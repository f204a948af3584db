//! What waits for the apiserver while it cannot be reached (edge autonomy): the node's
//! status, pods' statuses and events, delivered in the order they were made when it is back.
//! A status only matters in its latest form, so a newer one replaces the older (it keeps its
//! place at the end of the line); events are all kept, up to a bound in count and bytes, the
//! oldest dropped first and counted. Pure: the sender drives it.

use crate::api::{Event, PodStatus};
use std::collections::BTreeMap;

/// One write waiting for the apiserver.
#[derive(Clone, Debug, PartialEq)]
pub enum Pending {
    /// The node's status (the whole `status`).
    NodeStatus(serde_json::Value),
    /// A pod's status.
    PodStatus {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Uid (a status for an older pod of the same name is not sent to the new one).
        uid: String,
        /// The status.
        status: Box<PodStatus>,
    },
    /// An event, as correlated.
    Event(Box<Event>),
}

impl Pending {
    /// What a newer write replaces: the node's status, one pod's, or an event's older count
    /// (the correlator's repeats of one event share its name).
    fn key(&self) -> Option<String> {
        match self {
            Pending::NodeStatus(_) => Some("node".into()),
            Pending::PodStatus { uid, .. } => Some(format!("pod/{uid}")),
            Pending::Event(e) if !e.metadata.name.is_empty() => {
                Some(format!("event/{}/{}", e.metadata.namespace, e.metadata.name))
            }
            Pending::Event(_) => None,
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Pending::NodeStatus(v) => v.to_string().len(),
            Pending::PodStatus { status, .. } => serde_json::to_vec(status).map_or(0, |v| v.len()),
            Pending::Event(e) => serde_json::to_vec(e).map_or(0, |v| v.len()),
        }
    }
}

/// The spool's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Writes kept at most (statuses count once per pod).
    pub max_items: usize,
    /// Bytes kept at most (as JSON).
    pub max_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds { max_items: 4096, max_bytes: 4 << 20 }
    }
}

/// The writes waiting, in order.
#[derive(Clone, Debug, Default)]
pub struct Spool {
    bounds: Bounds,
    /// By sequence number: the order they were made in.
    items: BTreeMap<u64, (Pending, usize)>,
    /// Where the latest write of each key sits.
    keys: BTreeMap<String, u64>,
    next_seq: u64,
    bytes: usize,
    /// Writes dropped to stay within the bounds (events first, oldest first).
    pub dropped: u64,
}

impl Spool {
    /// An empty spool with `bounds`.
    pub fn new(bounds: Bounds) -> Spool {
        Spool { bounds, ..Default::default() }
    }

    /// Writes waiting.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Bytes waiting.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Adds `p` at the end of the line; an older write it replaces goes.
    pub fn push(&mut self, p: Pending) {
        if let Some(key) = p.key() {
            if let Some(old) = self.keys.remove(&key) {
                if let Some((_, b)) = self.items.remove(&old) {
                    self.bytes -= b;
                }
            }
            self.keys.insert(key, self.next_seq);
        }
        let b = p.bytes();
        self.items.insert(self.next_seq, (p, b));
        self.bytes += b;
        self.next_seq += 1;
        while self.items.len() > self.bounds.max_items || self.bytes > self.bounds.max_bytes {
            if !self.drop_one() {
                break;
            }
        }
    }

    /// Drops the oldest event, else the oldest write.
    fn drop_one(&mut self) -> bool {
        let victim = self
            .items
            .iter()
            .find(|(_, (p, _))| matches!(p, Pending::Event(_)))
            .or_else(|| self.items.iter().next())
            .map(|(seq, _)| *seq);
        let Some(seq) = victim else { return false };
        self.take(seq);
        self.dropped += 1;
        true
    }

    /// The oldest write, with its sequence number (to `take` once delivered).
    pub fn first(&self) -> Option<(u64, &Pending)> {
        self.first_where(|_| true)
    }

    /// The oldest write that `pick` takes.
    pub fn first_where(&self, pick: impl Fn(&Pending) -> bool) -> Option<(u64, &Pending)> {
        self.items.iter().find(|(_, (p, _))| pick(p)).map(|(seq, (p, _))| (*seq, p))
    }

    /// Removes write `seq` (delivered, or refused for good).
    pub fn take(&mut self, seq: u64) -> Option<Pending> {
        let (p, b) = self.items.remove(&seq)?;
        self.bytes -= b;
        if let Some(key) = p.key() {
            if self.keys.get(&key) == Some(&seq) {
                self.keys.remove(&key);
            }
        }
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(reason: &str) -> Pending {
        Pending::Event(Box::new(Event { reason: reason.into(), ..Default::default() }))
    }

    fn pod(uid: &str, message: &str) -> Pending {
        let status = Box::new(PodStatus { message: message.into(), ..Default::default() });
        Pending::PodStatus { namespace: "default".into(), name: format!("p-{uid}"), uid: uid.into(), status }
    }

    fn drain(s: &mut Spool) -> Vec<Pending> {
        let mut out = Vec::new();
        while let Some((seq, _)) = s.first() {
            out.push(s.take(seq).unwrap());
        }
        out
    }

    #[test]
    fn writes_come_out_in_order_and_a_newer_status_replaces_the_older() {
        let mut s = Spool::new(Bounds::default());
        s.push(pod("a", "1"));
        s.push(event("Started"));
        s.push(Pending::NodeStatus(serde_json::json!({"v": 1})));
        s.push(pod("a", "2"));
        s.push(Pending::NodeStatus(serde_json::json!({"v": 2})));
        s.push(event("Killing"));
        assert_eq!(
            drain(&mut s),
            [event("Started"), pod("a", "2"), Pending::NodeStatus(serde_json::json!({"v": 2})), event("Killing")]
        );
        assert_eq!((s.len(), s.bytes()), (0, 0));
    }

    #[test]
    fn statuses_behind_held_events_come_out_first_and_the_events_keep_their_order() {
        let mut s = Spool::new(Bounds::default());
        s.push(event("E1"));
        s.push(pod("a", "1"));
        s.push(event("E2"));
        let not_event = |p: &Pending| !matches!(p, Pending::Event(_));
        let (seq, first) = s.first_where(not_event).unwrap();
        assert_eq!(first, &pod("a", "1"));
        s.take(seq);
        assert!(s.first_where(not_event).is_none());
        assert_eq!(drain(&mut s), [event("E1"), event("E2")]);
    }

    #[test]
    fn a_repeated_event_waits_once_with_its_latest_count() {
        let mut s = Spool::new(Bounds::default());
        let named = |count: i32| {
            let mut e = Event { reason: "BackOff".into(), count, ..Default::default() };
            e.metadata.name = "web.1".into();
            Pending::Event(Box::new(e))
        };
        s.push(named(1));
        s.push(event("Started"));
        s.push(named(7));
        assert_eq!(drain(&mut s), [event("Started"), named(7)]);
    }

    #[test]
    fn past_its_bounds_the_oldest_event_goes_first_and_is_counted() {
        let mut s = Spool::new(Bounds { max_items: 3, max_bytes: 1 << 20 });
        s.push(pod("a", "1"));
        s.push(event("E1"));
        s.push(event("E2"));
        s.push(event("E3"));
        assert_eq!(s.dropped, 1);
        assert_eq!(drain(&mut s), [pod("a", "1"), event("E2"), event("E3")]);
        // Bytes bound too.
        let one = pod("b", &"x".repeat(100));
        let size = one.bytes();
        let mut s = Spool::new(Bounds { max_items: 100, max_bytes: size * 2 });
        for uid in ["b", "c", "d"] {
            s.push(pod(uid, &"x".repeat(100)));
        }
        assert_eq!((s.len(), s.dropped), (2, 1), "the oldest status went: no event to drop");
    }
}
