//! `fl-stats`: collects at start and every `PERIOD` (or when asked), writes the `StatsView`,
//! then runs what was registered to act on each new snapshot on the same thread, in order
//! (`after_collect`; the eviction manager's decisions go there), so what acts on usage sees
//! every snapshot once, right after it is made, and no request ever waits for a collection.

use super::collector::Collector;
use super::target::TargetSource;
use super::{Snapshot, StatsView, PERIOD};
use crate::base::manager::Manager;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The least time between two collections asked for (`StatsCommand::Collect`): a burst of
/// asks (a memory threshold crossed again and again) costs two collections a second at most.
pub const MIN_INTERVAL: Duration = Duration::from_millis(500);

/// What the stats thread is asked.
#[derive(Debug)]
pub enum StatsCommand {
    /// Collect now, or once the last collection is `MIN_INTERVAL` old.
    Collect,
}

/// Work run on the stats thread after each collection, with the new snapshot and a way to
/// collect again at once (the eviction manager's check after a node-level reclaim).
pub type AfterCollect = Box<dyn FnMut(&Arc<Snapshot>, &mut dyn FnMut() -> Arc<Snapshot>) + Send>;

/// The stats thread's state: the collector, where the pods to measure come from, the view it
/// writes, and what runs after each collection.
pub struct StatsManager {
    collector: Collector,
    targets: TargetSource,
    view: StatsView,
    after: Vec<AfterCollect>,
    /// A collection due before the next tick: the first, at once after the start, or one
    /// asked for within `MIN_INTERVAL` of the last.
    due: Option<Instant>,
    last: Option<Instant>,
    period: Duration,
    /// A cheap check between collections (the eviction manager's memory watch): when it
    /// says so, a collection runs at once.
    watch: Option<(Duration, Watch)>,
    next_watch: Option<Instant>,
}

/// A check run between collections; true asks for a collection now.
pub type Watch = Box<dyn FnMut() -> bool + Send>;

impl StatsManager {
    /// A manager collecting with `collector` the pods `targets` gives, every `PERIOD`.
    pub fn new(collector: Collector, targets: TargetSource) -> StatsManager {
        StatsManager {
            collector,
            targets,
            view: StatsView::default(),
            after: Vec::new(),
            due: Some(Instant::now()),
            last: None,
            period: PERIOD,
            watch: None,
            next_watch: None,
        }
    }

    /// With `f` run after each collection, after those registered before.
    pub fn after_collect(mut self, f: AfterCollect) -> StatsManager {
        self.after.push(f);
        self
    }

    /// Collecting every `period` instead of `PERIOD` (tests, the benchmark).
    pub fn with_period(mut self, period: Duration) -> StatsManager {
        self.period = period;
        self
    }

    /// The view this manager writes (what the APIs, `top` and eviction read).
    pub fn view(&self) -> StatsView {
        self.view.clone()
    }

    /// Runs `check` every `every` between collections; a collection follows at once when it
    /// returns true (at most one per `MIN_INTERVAL`).
    pub fn watch(mut self, every: Duration, check: Watch) -> StatsManager {
        self.next_watch = Some(Instant::now() + every);
        self.watch = Some((every, check));
        self
    }

    /// Collects now, or, when the last collection is under `MIN_INTERVAL` old, as soon as it
    /// is that old (never dropped: a memory spike right after a collection is still seen).
    fn collect_soon(&mut self) {
        match self.last.map(|t| t + MIN_INTERVAL).filter(|due| *due > Instant::now()) {
            Some(due) => self.due = Some(self.due.map_or(due, |d| d.min(due))),
            None => {
                self.collect_now();
            }
        }
    }

    /// Collects now, publishes the snapshot, runs the `after_collect` work; returns the
    /// snapshot.
    pub fn collect_now(&mut self) -> Arc<Snapshot> {
        self.due = None;
        self.last = Some(Instant::now());
        let StatsManager { collector, targets, view, after, .. } = self;
        let mut collect = || {
            let snapshot = Arc::new(collector.collect(&targets()));
            view.publish(snapshot.clone());
            snapshot
        };
        let snapshot = collect();
        for f in after.iter_mut() {
            f(&snapshot, &mut collect);
        }
        snapshot
    }
}

impl Manager for StatsManager {
    type Command = StatsCommand;

    fn handle(&mut self, cmd: StatsCommand) {
        match cmd {
            StatsCommand::Collect => self.collect_soon(),
        }
    }

    fn on_tick(&mut self) {
        self.collect_now();
    }

    fn tick_interval(&self) -> Duration {
        self.period
    }

    fn next_deadline(&self) -> Option<Instant> {
        match (self.due, self.next_watch) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn on_deadline(&mut self) {
        let now = Instant::now();
        if self.due.is_some_and(|t| now >= t) {
            self.collect_now();
        }
        let Some((every, check)) = self.watch.as_mut() else { return };
        if self.next_watch.is_some_and(|t| now >= t) {
            self.next_watch = Some(now + *every);
            if check() {
                self.collect_soon();
            }
        }
    }
}

#[cfg(test)]
mod tests;
