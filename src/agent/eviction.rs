//! `[eviction]` turned into a running eviction manager: its executor hooked onto `fl-stats`
//! (after each collection, and the 1 s memory watch between them), `fl-memcg` for the
//! kernel's memory notification on cgroup v1, and what it acts through: the pods the status
//! cache shows active, the pod manager's channel for evictions, the runtime for dead
//! containers, `fl-imagegc` for unused images.

use crate::api::{Pod, PodPhase};
use crate::base::manager::{Health, Publisher};
use crate::node::cm::cgroupfs::{CgroupDriver, CgroupVersion};
use crate::node::events::EventRecorder;
use crate::node::eviction::decide::{EvictionState, Reclaim, Settings};
use crate::node::eviction::manager::{EvictionManager, MemoryTargets, Parts, UsageSource, WATCH_PERIOD};
use crate::node::eviction::memcg::Notifier;
use crate::node::eviction::view::{EvictPod, PressureView};
use crate::node::eviction::{NodeInfo, Resource};
use crate::node::imagegc::ImageGcClient;
use crate::node::runtime::{labels, ContainerInfo, ContainerRuntime, ContainerState};
use crate::node::stats::manager::{StatsCommand, StatsManager};
use crate::node::status::StatusCache;
use crossbeam_channel::Sender;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

/// How long a reclaim waits for `fl-imagegc` to remove the unused images (within the
/// watchdog's and `/healthz`'s patience with a thread stuck in one call; the removal goes on).
const IMAGE_RECLAIM_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// Where the memory signals are read between collections: the root and `kubepods` memory
/// cgroups (v1 `memory.usage_in_bytes`, with their directories for the kernel notification
/// when `notify`), or `/proc/meminfo` and `kubepods`' `memory.current` on v2.
pub fn memory_targets(driver: Option<&dyn CgroupDriver>, kubepods: Option<&str>, notify: bool) -> MemoryTargets {
    let Some(d) = driver else { return MemoryTargets::default() };
    let v1 = d.version() == CgroupVersion::V1;
    let file = if v1 { "memory.usage_in_bytes" } else { "memory.current" };
    let at = |path: &str| {
        let dir = d.memory_dir(path)?;
        Some((UsageSource::File(dir.join(file)), (v1 && notify).then_some(dir)))
    };
    MemoryTargets { node: if v1 { at("/") } else { Some((UsageSource::Meminfo, None)) }, pods: kubepods.and_then(at) }
}

/// What the eviction manager is built from.
pub struct Wiring {
    /// The node's name.
    pub node_name: String,
    /// The node's memory capacity and allocatable memory, the filesystems' layout.
    pub node: NodeInfo,
    /// Where memory is watched.
    pub memory: MemoryTargets,
    /// The runtime (dead containers).
    pub runtime: Arc<dyn ContainerRuntime>,
    /// The pods and their statuses.
    pub statuses: StatusCache,
    /// `<state_dir>/pods`: an evicted pod is cleaned up once its directory is gone.
    pub pods_root: PathBuf,
    /// The pod manager's channel.
    pub evict: Publisher<EvictPod>,
    /// Node events.
    pub recorder: EventRecorder,
    /// Where the conditions go.
    pub pressure: PressureView,
    /// `fl-imagegc`, which removes every unused image when asked (CRI).
    pub images: Option<ImageGcClient>,
}

/// Hooks the eviction manager onto `stats` (whose commands arrive on `stats_tx`); returns
/// it with `fl-memcg` when the kernel notification is on. With no thresholds it still runs:
/// pods past their own storage limits are evicted whatever the node's pressure.
pub fn attach(
    settings: Settings,
    stats: StatsManager,
    stats_tx: Sender<StatsCommand>,
    w: Wiring,
    health: &Health,
) -> std::io::Result<(StatsManager, Option<Notifier>)> {
    if settings.thresholds.is_empty() {
        log::info!("eviction: no thresholds are set; only pods past their own storage limits are evicted");
    }
    let memory_thresholds = settings.thresholds.iter().any(|t| t.signal.resource() == Resource::Memory);
    let notify = memory_thresholds && w.memory.node.iter().chain(&w.memory.pods).any(|(_, dir)| dir.is_some());
    let notifier = if notify {
        // A full channel already holds a collection to come.
        Some(Notifier::start(health, move || {
            let _ = stats_tx.try_send(StatsCommand::Collect);
        })?)
    } else {
        None
    };
    let Wiring { node_name, node, memory, runtime, statuses, pods_root, evict, recorder, pressure, images } = w;
    let (active, phases) = (statuses.clone(), statuses.clone());
    let parts = Parts {
        node,
        node_name,
        pods: Box::new(move || evictable(&active.pods_and_statuses())),
        cleaned: Box::new(move |uid| cleaned(phases.phase(uid), &pods_root, uid)),
        reclaim: Box::new(move |r| reclaim(r, &*runtime, &active_uids(&statuses), images.as_ref())),
        evict,
        pressure,
        recorder,
        memory,
        notifier: notifier.as_ref().map(Notifier::thresholds),
    };
    let mut manager = EvictionManager::new(EvictionState::new(settings, SystemTime::now()), parts);
    let watch = manager.watch();
    let stats = stats
        .after_collect(Box::new(move |snapshot, collect| manager.step(snapshot, collect)))
        .watch(WATCH_PERIOD, Box::new(move || watch.crossed()));
    Ok((stats, notifier))
}

/// The pods eviction may pick: those still Pending or Running (an evicted or finished pod
/// is not picked again).
fn evictable(pods: &[(Arc<Pod>, Arc<crate::api::PodStatus>)]) -> Vec<Arc<Pod>> {
    pods.iter()
        .filter(|(_, s)| matches!(s.phase, PodPhase::Pending | PodPhase::Running))
        .map(|(p, _)| Arc::clone(p))
        .collect()
}

/// The uids of the pods still Pending or Running.
fn active_uids(statuses: &StatusCache) -> HashSet<String> {
    evictable(&statuses.pods_and_statuses()).iter().map(|p| p.metadata.uid.clone()).collect()
}

/// Whether an evicted pod is cleaned up: no longer active, and its directory (its volumes)
/// gone.
fn cleaned(phase: Option<PodPhase>, pods_root: &Path, uid: &str) -> bool {
    !matches!(phase, Some(PodPhase::Pending | PodPhase::Running)) && !pods_root.join(uid).exists()
}

/// The dead containers a reclaim removes (kubelet's `DeleteAllUnusedContainers` under its
/// policy of one dead instance kept per container): every one of a pod that no longer runs,
/// and of a running pod all but the newest of each container, which its status and restart
/// policy are read from.
pub fn dead_to_remove<'a>(containers: &'a [ContainerInfo], active: &HashSet<String>) -> Vec<&'a ContainerInfo> {
    let mut dead: Vec<&ContainerInfo> = containers.iter().filter(|c| c.state == ContainerState::Exited).collect();
    dead.sort_by_key(|c| std::cmp::Reverse(c.created_at));
    let mut kept = HashSet::new();
    dead.into_iter()
        .filter(|c| {
            let uid = labels::get(&c.config.labels, labels::POD_UID).unwrap_or_default();
            !active.contains(uid) || !kept.insert((uid, c.config.name.as_str()))
        })
        .collect()
}

/// kubelet's node-level reclaim: dead containers, then (CRI) every unused image; the bytes
/// the images held.
fn reclaim(
    r: &Reclaim,
    runtime: &dyn ContainerRuntime,
    active: &HashSet<String>,
    images: Option<&ImageGcClient>,
) -> u64 {
    match runtime.list_containers() {
        Ok(list) => {
            let dead = dead_to_remove(&list, active);
            let removed = dead.iter().filter(|c| runtime.remove_container(&c.id).is_ok()).count();
            log::info!("eviction: removed {removed} of {} dead containers", dead.len());
        }
        Err(e) => {
            log::warn!("eviction: cannot list containers to remove dead ones: {}", crate::base::errors::Chain(&e))
        }
    }
    let Some(gc) = images.filter(|_| r.unused_images) else { return 0 };
    match gc.delete_unused(IMAGE_RECLAIM_WAIT) {
        Ok(bytes) => bytes,
        Err(e) => {
            log::warn!("eviction: removing unused images: {}", crate::base::errors::Chain(&e));
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::runtime::ContainerConfig;
    use std::time::{Duration, UNIX_EPOCH};

    fn container(id: &str, uid: &str, name: &str, state: ContainerState, created: u64) -> ContainerInfo {
        let labels = [(labels::POD_UID.to_string(), uid.to_string())].into();
        ContainerInfo {
            id: id.into(),
            sandbox_id: format!("sandbox-{uid}"),
            config: Arc::new(ContainerConfig { name: name.into(), labels, ..Default::default() }),
            state,
            created_at: UNIX_EPOCH + Duration::from_secs(created),
            started_at: None,
            finished_at: None,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            pid: None,
            image_ref: String::new(),
        }
    }

    #[test]
    fn a_reclaim_keeps_a_running_pods_newest_dead_instance_of_each_container_and_no_other() {
        use ContainerState::{Exited, Running};
        let list = [
            container("web-1", "run", "web", Exited, 1),
            container("web-2", "run", "web", Exited, 2),
            container("web-3", "run", "web", Running, 3),
            container("job-1", "run", "job", Exited, 1),
            container("old-1", "done", "app", Exited, 5),
            container("old-2", "done", "app", Exited, 6),
        ];
        let active: HashSet<String> = ["run".to_string()].into();
        let mut gone: Vec<&str> = dead_to_remove(&list, &active).iter().map(|c| c.id.as_str()).collect();
        gone.sort();
        assert_eq!(gone, ["old-1", "old-2", "web-1"], "web-2 and job-1 keep the running pod's restart history");
    }
}
