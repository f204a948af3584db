//! The relist: the runtime's pods and containers at every sync (generic-PLEG style), with
//! exited containers' termination messages read once each. A runtime that stops answering
//! is said once and then tried with back-off (`RuntimeAway`), its return once too.

use super::actor::Actor;
use super::messages;
use super::view::Snapshot;
use crate::base::errors::Chain;
use crate::node::runtime::ContainerInfo;
use crate::node::status::RuntimeHealth;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// The first wait before the runtime is tried again, and the longest.
const RUNTIME_RETRY_FIRST: Duration = Duration::from_secs(1);
const RUNTIME_RETRY_MAX: Duration = Duration::from_secs(30);

/// The runtime stopped answering: since when, and when to try it next.
#[derive(Clone, Copy, Debug, PartialEq)]
struct RuntimeAway {
    since: SystemTime,
    retry_at: SystemTime,
    delay: Duration,
}

impl RuntimeAway {
    /// After a failed relist at `now`: the first failure starts the back-off, a later one
    /// doubles it (at most `RUNTIME_RETRY_MAX`).
    fn after_failure(previous: Option<RuntimeAway>, now: SystemTime) -> RuntimeAway {
        let (since, delay) = match previous {
            None => (now, RUNTIME_RETRY_FIRST),
            Some(p) => (p.since, (p.delay * 2).min(RUNTIME_RETRY_MAX)),
        };
        RuntimeAway { since, retry_at: now + delay, delay }
    }
}

/// Why there is no relist this time.
pub(super) enum NoRelist {
    /// The runtime is away and its next try is not due, or it failed again.
    Away,
    /// It just stopped answering: say so on every pod (`FailedSync`) with this message.
    Lost(String),
}

/// What the relist keeps between syncs.
#[derive(Default)]
pub(super) struct Relist {
    /// Set while the runtime cannot be listed (a restarting containerd): pods are left as
    /// they are, and the relist is retried with back-off.
    away: Option<RuntimeAway>,
    /// The same, for the Node's `Ready` condition.
    pub(super) health: RuntimeHealth,
    /// Exited containers' termination messages, by container id.
    messages: HashMap<String, String>,
}

impl Relist {
    /// Relists the runtime at `now`. Damaged records the runtime set aside are said on the
    /// node (`QuarantinedRecord`).
    pub(super) fn list(&mut self, act: &Actor, now: SystemTime) -> Result<Snapshot, NoRelist> {
        let away = self.away;
        if away.is_some_and(|a| now < a.retry_at) {
            return Err(NoRelist::Away);
        }
        let (sandboxes, mut containers) = match (act.runtime.list_pod_sandboxes(), act.runtime.list_containers()) {
            (Ok(s), Ok(c)) => (s, c),
            (Err(e), _) | (_, Err(e)) => {
                let next = RuntimeAway::after_failure(away, now);
                self.away = Some(next);
                self.health.away(next.since, Chain(&e).to_string());
                if away.is_some() {
                    log::debug!("pods: the runtime is still away (next try in {:?}): {}", next.delay, Chain(&e));
                    return Err(NoRelist::Away);
                }
                log::error!(
                    "pods: cannot list the runtime's pods: {}; pods are left as they are, retrying with back-off (at most every {:?})",
                    Chain(&e),
                    RUNTIME_RETRY_MAX
                );
                return Err(NoRelist::Lost(format!("error determining status: {}", Chain(&e))));
            }
        };
        self.health.back();
        if let Some(a) = self.away.take() {
            let away_for = now.duration_since(a.since).unwrap_or_default();
            log::info!("pods: the runtime answers again after {away_for:.1?}; syncing pods");
        }
        for q in act.runtime.take_quarantined() {
            let message = format!(
                "damaged {} record {} ({}) moved to {}; `ferrolet drain` removes it",
                q.kind,
                q.id,
                q.reason,
                q.moved_to.display()
            );
            act.node_warning("QuarantinedRecord", &message);
        }
        self.add_termination_messages(&mut containers);
        Ok(Snapshot::new(sandboxes, containers))
    }

    /// Exited containers' termination messages, read once each (kept while the container is).
    fn add_termination_messages(&mut self, containers: &mut [ContainerInfo]) {
        self.messages.retain(|id, _| containers.iter().any(|c| &c.id == id));
        for c in containers.iter_mut().filter(|c| messages::wants_message(c)) {
            let message = self.messages.entry(c.id.clone()).or_insert_with(|| messages::read(c));
            c.message = messages::joined(&c.message, message);
        }
    }
}
