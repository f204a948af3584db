//! `[eviction]` turned into a running eviction manager: its executor hooked onto `fl-stats`
//! (after each collection, and the 1 s memory watch between them), `fl-memcg` for the
//! kernel's memory notification on cgroup v1, and what it acts through: the pods the status
//! cache shows active, the pod manager's channel for evictions, the runtime for dead
//! containers, `fl-imagegc` for unused images.

use crate::api::{Pod, PodPhase};
use crate::base::manager::{Health, Publisher};
use crate::config::Config;
use crate::node::cm::cgroupfs::{CgroupDriver, CgroupVersion};
use crate::node::events::EventRecorder;
use crate::node::eviction::decide::{EvictionState, Reclaim};
use crate::node::eviction::manager::{EvictionManager, Executors, MemoryTargets, UsageSource, WATCH_PERIOD};
use crate::node::eviction::memcg::Notifier;
use crate::node::eviction::view::{EvictPod, PressureView};
use crate::node::eviction::NodeInfo;
use crate::node::imagegc::ImageGcClient;
use crate::node::runtime::{ContainerRuntime, ContainerState};
use crate::node::stats::manager::{StatsCommand, StatsManager};
use crate::node::status::StatusCache;
use crossbeam_channel::Sender;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

/// How long a reclaim waits for `fl-imagegc` to remove the unused images.
const IMAGE_RECLAIM_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

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
/// it with `fl-memcg` when the kernel notification is on.
pub fn attach(
    cfg: &Config,
    stats: StatsManager,
    stats_tx: Sender<StatsCommand>,
    w: Wiring,
    health: &Health,
) -> std::io::Result<(StatsManager, Option<Notifier>)> {
    let settings = cfg.eviction_settings();
    if settings.thresholds.is_empty() {
        log::info!("eviction: no thresholds are set; nothing is evicted for node pressure");
        return Ok((stats, None));
    }
    let notify = w.memory.node.iter().chain(&w.memory.pods).any(|(_, dir)| dir.is_some());
    let notifier = if notify {
        Some(Notifier::start(health, move || {
            let _ = stats_tx.send(StatsCommand::Collect);
        })?)
    } else {
        None
    };
    let Wiring { node, memory, runtime, statuses, pods_root, evict, recorder, pressure, images } = w;
    let active = statuses.clone();
    let run = Executors {
        pods: Box::new(move || evictable(&active.pods_and_statuses())),
        cleaned: Box::new(move |uid| cleaned(statuses.phase(uid), &pods_root, uid)),
        reclaim: Box::new(move |r| reclaim(r, &*runtime, images.as_ref())),
        evict,
    };
    let state = EvictionState::new(settings, SystemTime::now());
    let thresholds = notifier.as_ref().map(Notifier::thresholds);
    let mut manager = EvictionManager::new(state, node, &cfg.node_name, run, pressure, recorder, memory, thresholds);
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

/// Whether an evicted pod is cleaned up: no longer active, and its directory (its volumes)
/// gone.
fn cleaned(phase: Option<PodPhase>, pods_root: &Path, uid: &str) -> bool {
    !matches!(phase, Some(PodPhase::Pending | PodPhase::Running)) && !pods_root.join(uid).exists()
}

/// kubelet's node-level reclaim: every dead container, then (CRI) every unused image.
fn reclaim(r: &Reclaim, runtime: &dyn ContainerRuntime, images: Option<&ImageGcClient>) -> u64 {
    let mut freed = 0;
    if r.dead_containers {
        match runtime.list_containers() {
            Ok(list) => {
                let dead: Vec<_> = list.iter().filter(|c| c.state == ContainerState::Exited).collect();
                let removed = dead.iter().filter(|c| runtime.remove_container(&c.id).is_ok()).count();
                log::info!("eviction: removed {removed} of {} dead containers", dead.len());
            }
            Err(e) => {
                log::warn!("eviction: cannot list containers to remove dead ones: {}", crate::base::errors::Chain(&e))
            }
        }
    }
    if let Some(gc) = images.filter(|_| r.unused_images) {
        match gc.delete_unused(IMAGE_RECLAIM_WAIT) {
            Ok(bytes) => freed += bytes,
            Err(e) => log::warn!("eviction: removing unused images: {}", crate::base::errors::Chain(&e)),
        }
    }
    freed
}
