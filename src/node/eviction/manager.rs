//! The eviction manager's executor: runs on `fl-stats` after each collection (a
//! `StatsManager::after_collect` hook), hands the snapshot to `EvictionState::synchronize`,
//! and acts on its `Decision`: the pressure conditions into `PressureView` (and their
//! events), a node-level reclaim (dead containers, unused images) followed by a fresh
//! collection, then at most one pod evicted through the pod manager (`EvictPod`), and no
//! other until that one is cleaned up (kubelet's `waitForPodsCleanup`, 30 s at most). It
//! also keeps the memory watches current: the kernel's notification on cgroup v1 (`memcg`)
//! and the 1 s check of the memory cgroups' usage (`MemoryWatch`), both at the usage where
//! a memory threshold is met, so a spike is acted on within a second, not at the next 10 s
//! collection.

use super::decide::{Decision, EvictionState, Inputs, Reclaim};
use super::memcg::Thresholds;
use super::messages::{condition_event, condition_event_message};
use super::signals::{memcg_usage_threshold, NodeInfo};
use super::view::{EvictPod, PressureView};
use super::Signal;
use crate::api::Pod;
use crate::base::manager::Publisher;
use crate::node::events::{EventRecorder, Reference, NORMAL, WARNING};
use crate::node::stats::Snapshot;
use parking_lot::Mutex;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// How long the manager waits for an evicted pod to be cleaned up before it evicts another.
pub const CLEANUP_WAIT: Duration = Duration::from_secs(30);

/// How often `MemoryWatch` reads the memory cgroups' usage.
pub const WATCH_PERIOD: Duration = Duration::from_secs(1);

/// Where a memory signal's usage is read between collections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UsageSource {
    /// A cgroup's usage file (v1 `memory.usage_in_bytes`, v2 `memory.current`).
    File(PathBuf),
    /// The machine's, from `/proc/meminfo` (MemTotal − MemFree; cgroup v2's root has no
    /// usage file).
    Meminfo,
}

/// Where each memory signal is watched: the node's (`memory.available`) and the pods'
/// (`allocatableMemory.available`), with their memory cgroup directories for the v1 kernel
/// notification when it is on.
#[derive(Clone, Debug, Default)]
pub struct MemoryTargets {
    /// `memory.available`: where usage is read, and the v1 memory cgroup to notify on.
    pub node: Option<(UsageSource, Option<PathBuf>)>,
    /// `allocatableMemory.available`: the `kubepods` cgroup's.
    pub pods: Option<(UsageSource, Option<PathBuf>)>,
}

/// The usage levels the 1 s check compares with, shared between the manager (which sets
/// them after each collection) and the check on the same thread. Each file stays open while
/// it is watched and is read from its start each time: no open or close per check.
#[derive(Clone, Default)]
pub struct MemoryWatch(Arc<Mutex<Vec<Watched>>>);

/// One watched usage: where, its file once opened, the level.
struct Watched {
    source: UsageSource,
    file: Option<std::fs::File>,
    level: u64,
}

impl MemoryWatch {
    /// Whether a watched usage is at or above its level now (a memory threshold is met):
    /// the stats thread then collects at once.
    pub fn crossed(&self) -> bool {
        self.0.lock().iter_mut().any(|w| w.read().is_some_and(|u| u >= w.level))
    }

    /// Watches these levels from now on, keeping the files already open.
    fn set(&self, levels: Vec<(UsageSource, u64)>) {
        let mut watched = self.0.lock();
        let mut old: Vec<Watched> = std::mem::take(&mut *watched);
        for (source, level) in levels {
            let file = old.iter().position(|w| w.source == source).and_then(|i| old.swap_remove(i).file);
            watched.push(Watched { source, file, level });
        }
    }
}

impl Watched {
    fn read(&mut self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        if self.file.is_none() {
            let path = match &self.source {
                UsageSource::File(p) => p.as_path(),
                UsageSource::Meminfo => std::path::Path::new("/proc/meminfo"),
            };
            self.file = std::fs::File::open(path).ok();
        }
        let mut buf = [0u8; 4096];
        let Ok(n) = self.file.as_ref()?.read_at(&mut buf, 0) else {
            // Opened again at the next check (the cgroup may have been made again).
            self.file = None;
            return None;
        };
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        match self.source {
            UsageSource::File(_) => text.trim().parse().ok(),
            UsageSource::Meminfo => crate::node::stats::proc::parse_meminfo(text).map(|m| m.usage()),
        }
    }
}

/// What the manager reads and acts through; built by the agent.
pub struct Parts {
    /// The node's capacities and filesystems.
    pub node: NodeInfo,
    /// The node's name (its events).
    pub node_name: String,
    /// The pods that may be evicted: admitted, neither stopping nor finished.
    pub pods: Box<dyn Fn() -> Vec<Arc<Pod>> + Send>,
    /// Whether an evicted pod is cleaned up: its containers stopped and its directory gone.
    pub cleaned: Box<dyn Fn(&str) -> bool + Send>,
    /// Reclaims at node level (dead containers, unused images); the bytes of images freed.
    pub reclaim: Box<dyn FnMut(&Reclaim) -> u64 + Send>,
    /// Where evictions go (the pod manager).
    pub evict: Publisher<EvictPod>,
    /// Where the conditions go.
    pub pressure: PressureView,
    /// Node events.
    pub recorder: EventRecorder,
    /// Where memory is watched between collections.
    pub memory: MemoryTargets,
    /// `fl-memcg`'s thresholds, when the kernel notification is on.
    pub notifier: Option<Thresholds>,
}

/// The executor, owned by the `after_collect` hook of `fl-stats`.
pub struct EvictionManager {
    state: EvictionState,
    run: Parts,
    watch: MemoryWatch,
    /// The pod evicted last, until it is cleaned up or `CLEANUP_WAIT` has passed.
    waiting: Option<(String, Instant)>,
}

impl EvictionManager {
    /// A manager over `state`, publishing its conditions at once.
    pub fn new(state: EvictionState, run: Parts) -> EvictionManager {
        run.pressure.set(state.conditions());
        EvictionManager { state, run, watch: MemoryWatch::default(), waiting: None }
    }

    /// The levels the 1 s check reads (kept current by `step`).
    pub fn watch(&self) -> MemoryWatch {
        self.watch.clone()
    }

    /// One step after a collection; `collect` collects again (after a reclaim).
    pub fn step(&mut self, snapshot: &Arc<Snapshot>, collect: &mut dyn FnMut() -> Arc<Snapshot>) {
        let now = SystemTime::now();
        let pods = (self.run.pods)();
        let decision = self.state.synchronize(&Inputs { snapshot, node: &self.run.node, pods: &pods, now });
        self.publish_conditions(&decision);
        self.set_memory_levels(snapshot);
        if let Some((uid, since)) = &self.waiting {
            if !(self.run.cleaned)(uid) && since.elapsed() < CLEANUP_WAIT {
                log::debug!("eviction: waiting for evicted pod {uid} to be cleaned up");
                return;
            }
            self.waiting = None;
        }
        if !decision.local.is_empty() {
            // Pods past their own storage limits go first, and alone.
            decision.local.into_iter().for_each(|e| self.send(e));
            return;
        }
        for ev in &decision.events {
            self.run.recorder.event(&Reference::node(&self.run.node_name), WARNING, ev.reason, &ev.message);
        }
        if let Some(r) = &decision.reclaim {
            let freed = (self.run.reclaim)(r);
            let again = collect();
            if self.state.reclaim_resolved(&again, &self.run.node) {
                log::info!(
                    "eviction: {} met, {} to free; node-level reclaim (images: {freed} bytes) was enough",
                    r.signal,
                    r.to_free
                );
                return;
            }
            log::info!("eviction: {} met; node-level reclaim (images: {freed} bytes) was not enough", r.signal);
        }
        match (decision.evict, decision.starved) {
            (Some(e), _) => self.send(e),
            (None, Some(signal)) => log::warn!("eviction: {signal} met, but no pod may be evicted"),
            (None, None) => {}
        }
    }

    fn send(&mut self, e: super::Eviction) {
        log::warn!(
            "eviction: evicting pod {} ({}, grace period {:?}): {}",
            e.pod,
            e.cause.as_str(),
            e.grace,
            e.message
        );
        self.waiting = Some((e.uid.clone(), Instant::now()));
        self.run.evict.publish(EvictPod { uid: e.uid, grace: e.grace, message: e.message, annotations: e.annotations });
    }

    fn publish_conditions(&mut self, decision: &Decision) {
        self.run.pressure.set(decision.conditions);
        for &p in &decision.changed {
            let on = decision.conditions.get(p).pressure;
            log::info!("eviction: node condition {p} is now {}", if on { "True" } else { "False" });
            let message = condition_event_message(&self.run.node_name, p, on);
            self.run.recorder.event(&Reference::node(&self.run.node_name), NORMAL, condition_event(p, on), &message);
        }
    }

    /// Puts the memory thresholds' usage levels where the watches see them.
    fn set_memory_levels(&mut self, snapshot: &Snapshot) {
        let mut levels = Vec::new();
        let mut notify = Vec::new();
        for t in &self.state.settings().thresholds {
            let target = match t.signal {
                Signal::MemoryAvailable => &self.run.memory.node,
                Signal::AllocatableMemoryAvailable => &self.run.memory.pods,
                _ => continue,
            };
            let (Some((source, memcg)), Some(level)) = (target, memcg_usage_threshold(t, snapshot)) else { continue };
            levels.push((source.clone(), level));
            notify.extend(memcg.clone().map(|dir| (dir, level)));
        }
        if let Some(n) = &self.run.notifier {
            n.set(notify);
        }
        self.watch.set(levels);
    }
}
