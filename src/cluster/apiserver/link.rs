//! The agent's link to the apiserver, shared by its two threads and the event sink: whether
//! it can be reached (said in one log line when it goes and one when it is back, never one
//! per request), and the spool of writes waiting for it.

use super::client::ApiError;
use super::spool::{Bounds, Pending, Spool};
use crate::base::metrics::{Encoder, Kind};
use crossbeam_channel::Sender;
use parking_lot::Mutex;
use std::time::Instant;

/// Reachability and the spool.
pub struct Link {
    server: String,
    state: Mutex<State>,
    /// Wakes the sender when a write is spooled (`None` in tests).
    wake: Mutex<Option<Sender<()>>>,
}

struct State {
    /// Since when the apiserver cannot be reached; `None` while it can.
    offline_since: Option<Instant>,
    spool: Spool,
}

impl Link {
    /// A link to `server` (for the log lines), online until a request fails.
    pub fn new(server: &str, bounds: Bounds) -> Link {
        Link {
            server: server.into(),
            state: Mutex::new(State { offline_since: None, spool: Spool::new(bounds) }),
            wake: Mutex::new(None),
        }
    }

    /// Spooled writes wake `wake`'s receiver.
    pub fn set_wake(&self, wake: Sender<()>) {
        *self.wake.lock() = Some(wake);
    }

    /// Whether the last request reached the apiserver.
    pub fn online(&self) -> bool {
        self.state.lock().offline_since.is_none()
    }

    /// A request got an answer: if the apiserver was away, says it is back and wakes the
    /// sender (what waited goes now, not at its next tick).
    pub fn reached(&self) {
        let mut st = self.state.lock();
        if let Some(since) = st.offline_since.take() {
            if let Some(w) = &*self.wake.lock() {
                let _ = w.try_send(());
            }
            log::info!(
                "apiserver: {} reached again after {}s; delivering {} kept writes ({} dropped while away)",
                self.server,
                since.elapsed().as_secs(),
                st.spool.len(),
                st.spool.dropped
            );
        }
    }

    /// A request failed with `e`. When it means the apiserver cannot be reached and it could
    /// before, says so once. Returns whether the apiserver is now taken as away.
    pub fn failed(&self, e: &ApiError) -> bool {
        if !e.is_away() {
            return false;
        }
        let mut st = self.state.lock();
        if st.offline_since.is_none() {
            st.offline_since = Some(Instant::now());
            let why = match e {
                ApiError::NoCredentials { .. } => format!("{e}"),
                _ => format!("cannot be reached ({})", crate::base::errors::Chain(e)),
            };
            log::warn!(
                "apiserver: {} {why}; working offline: pods keep running, statuses and events are kept until it is back",
                self.server,
            );
        } else {
            log::debug!("apiserver: still away: {}", crate::base::errors::Chain(e));
        }
        true
    }

    /// Spools `p` and wakes the sender.
    pub fn push(&self, p: Pending) {
        self.state.lock().spool.push(p);
        if let Some(w) = &*self.wake.lock() {
            let _ = w.try_send(());
        }
    }

    /// Runs `f` on the spool.
    pub fn spool<R>(&self, f: impl FnOnce(&mut Spool) -> R) -> R {
        f(&mut self.state.lock().spool)
    }

    /// The link's series for `/metrics`.
    pub fn encode(&self, enc: &mut Encoder) {
        let st = self.state.lock();
        let online = u8::from(st.offline_since.is_none());
        enc.single(
            "ferrolet_apiserver_online",
            Kind::Gauge,
            "Whether the apiserver answered the last request.",
            online,
        );
        enc.single("ferrolet_apiserver_spool_items", Kind::Gauge, "Writes waiting for the apiserver.", st.spool.len());
        enc.single(
            "ferrolet_apiserver_spool_bytes",
            Kind::Gauge,
            "Bytes of writes waiting for the apiserver.",
            st.spool.bytes(),
        );
        enc.single(
            "ferrolet_apiserver_spool_dropped_total",
            Kind::Counter,
            "Writes dropped from the spool to stay within its bounds (events first, oldest first).",
            st.spool.dropped,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unreachable_apiserver_takes_the_link_offline_and_an_answer_brings_it_back() {
        let link = Link::new("https://api:6443", Bounds::default());
        let refused = ApiError::with_code(403);
        assert!(!link.failed(&refused));
        assert!(link.online());
        let busy = ApiError::with_code(503);
        assert!(link.failed(&busy));
        assert!(!link.online());
        link.reached();
        assert!(link.online());
    }
}
