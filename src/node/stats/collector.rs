//! One collection: the node, the `kubepods` cgroup, and every pod the agent runs with its
//! containers, logs and volumes, into a `Snapshot`. The decisions are pure and table-tested
//! (`nano_cores`, `memory_stats`, `fs_usage`, `ephemeral_storage`, `next_walk`); `Collector`
//! is the executor that reads the files and asks the runtime, once per collection.
//!
//! Sources, by what the agent can read: the cgroups ferrolet made (both versions, through the
//! `CgroupDriver`), `/proc` for the node, `statvfs` and bounded walks (`disk::du`) for the
//! filesystems, and on CRI the runtime's `ListContainerStats` (a container's writable layer,
//! and CPU and memory where its cgroup cannot be read) and `ListPodSandboxStats` (a pod's
//! where its cgroup cannot be read). A CPU rate needs two readings: the collector keeps each
//! source's last reading, keyed by cgroup path (or runtime id), and forgets the keys a
//! collection did not see.

use super::cgroup::{CgroupReader, CgroupUsage, MemoryUsage, Want};
use super::disk::{self, DiskUsage, FsTotals};
use super::proc::ProcReader;
use super::target::{ContainerTarget, PodTarget, VolumeTarget};
use super::{ContainerStats, CpuStats, FsStats, MemoryStats, NodeStats, PodStats, RlimitStats, Snapshot, VolumeStats};
use crate::base::errors::Chain;
use crate::node::cm::cgroupfs::{CgroupDriver, CgroupVersion};
use crate::node::runtime::stats::{RuntimeContainerStats, RuntimeCpu, RuntimeMemory, RuntimePodStats};
use crate::node::runtime::ContainerRuntime;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The longest a tree's walk result is reused: a tree is walked again after 100 times as long
/// as its last walk took (so walks take at most 1 % of the thread's time), but never later
/// than this.
pub const MAX_WALK_AGE: Duration = Duration::from_secs(300);

/// What the collector is set up with.
#[derive(Clone, Debug)]
pub struct CollectorSettings {
    /// The node's name.
    pub node_name: String,
    /// A directory on `nodefs` (the state directory).
    pub nodefs: PathBuf,
    /// The `kubepods` cgroup, when pod cgroups are on.
    pub kubepods: Option<String>,
    /// The node's allocatable memory (what `kubepods` may use).
    pub allocatable_memory: Option<u64>,
    /// Where `/proc` is (tests point it at a fake one).
    pub proc_root: PathBuf,
    /// Entries one walk of a tree visits at most.
    pub max_walk_entries: usize,
}

impl CollectorSettings {
    /// Settings for node `node_name` with its state in `nodefs`, `/proc`, and the default walk
    /// bound.
    pub fn new(node_name: &str, nodefs: &Path) -> CollectorSettings {
        CollectorSettings {
            node_name: node_name.into(),
            nodefs: nodefs.into(),
            kubepods: None,
            allocatable_memory: None,
            proc_root: PathBuf::from("/proc"),
            max_walk_entries: disk::MAX_ENTRIES,
        }
    }
}

/// One cumulative CPU reading, at a moment on the clock of its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuSample {
    /// Cumulative CPU time, in nanoseconds.
    pub usage_ns: u64,
    /// When, on the source's clock.
    pub at: Duration,
}

/// The CPU rate between two readings of one source, in nanocores; `None` without an earlier
/// reading, when no time passed, or when the counter went back (a new cgroup at the same path,
/// a restarted container).
pub fn nano_cores(prev: Option<CpuSample>, cur: CpuSample) -> Option<u64> {
    let prev = prev?;
    let used = cur.usage_ns.checked_sub(prev.usage_ns)?;
    let wall = cur.at.checked_sub(prev.at)?.as_nanos();
    if wall == 0 {
        return None;
    }
    u64::try_from(u128::from(used) * 1_000_000_000 / wall).ok()
}

/// A memory reading as the stats show it: the working set, and what is available below
/// `capacity` (the node's memory, or allocatable for `kubepods`) or else the cgroup's limit.
pub fn memory_stats(m: &MemoryUsage, capacity: Option<u64>, time: SystemTime) -> MemoryStats {
    let ws = m.working_set();
    MemoryStats {
        time: Some(time),
        available_bytes: capacity.or(m.limit).map(|c| c.saturating_sub(ws)),
        usage_bytes: m.usage,
        working_set_bytes: ws,
        rss_bytes: m.rss,
        page_faults: m.page_faults,
        major_page_faults: m.major_page_faults,
    }
}

/// A runtime's memory reading as the stats show it.
fn runtime_memory_stats(m: &RuntimeMemory, now: SystemTime) -> MemoryStats {
    MemoryStats {
        time: Some(m.time.unwrap_or(now)),
        available_bytes: m.available_bytes,
        usage_bytes: m.usage_bytes.unwrap_or(m.working_set_bytes),
        working_set_bytes: m.working_set_bytes,
        rss_bytes: m.rss_bytes.unwrap_or(0),
        page_faults: m.page_faults.unwrap_or(0),
        major_page_faults: m.major_page_faults.unwrap_or(0),
    }
}

/// A user's share of a filesystem: what it uses (`None`: not measured), with the
/// filesystem's totals when known.
pub fn fs_usage(
    time: SystemTime,
    totals: Option<FsTotals>,
    used_bytes: Option<u64>,
    inodes_used: Option<u64>,
) -> FsStats {
    FsStats {
        time: Some(time),
        available_bytes: totals.map(|t| t.available),
        capacity_bytes: totals.map(|t| t.capacity),
        used_bytes,
        inodes_free: totals.map(|t| t.inodes_free),
        inodes: totals.map(|t| t.inodes),
        inodes_used,
    }
}

/// A whole filesystem's numbers (`nodefs`; `imagefs` with the runtime's own use instead).
pub fn fs_totals(time: SystemTime, t: FsTotals) -> FsStats {
    fs_usage(time, Some(t), Some(t.used), Some(t.inodes_used()))
}

/// A pod's `ephemeral-storage` (kubelet's): its containers' writable layers and logs and its
/// disk-backed volumes together, with `nodefs`' totals.
pub fn ephemeral_storage(
    time: SystemTime,
    nodefs: Option<FsTotals>,
    containers: &[ContainerStats],
    volumes: &[VolumeStats],
) -> FsStats {
    let parts = containers
        .iter()
        .flat_map(|c| [c.rootfs.as_ref(), c.logs.as_ref()])
        .flatten()
        .chain(volumes.iter().map(|v| &v.fs));
    let (mut bytes, mut inodes) = (0u64, 0u64);
    for p in parts {
        bytes = bytes.saturating_add(p.used_bytes.unwrap_or(0));
        inodes = inodes.saturating_add(p.inodes_used.unwrap_or(0));
    }
    fs_usage(time, nodefs, Some(bytes), Some(inodes))
}

/// When a tree whose walk took `took` is walked again: after 100 times that, at most
/// `MAX_WALK_AGE` (a tree of a few files is walked at every collection).
pub fn next_walk(took: Duration) -> Duration {
    took.saturating_mul(100).min(MAX_WALK_AGE)
}

/// An answer of the runtime's about its `what` stats; a failure is logged once, until it
/// answers again (`failing` remembers which).
fn said<T>(failing: &mut bool, what: &str, got: Result<Option<T>, crate::node::runtime::RuntimeError>) -> Option<T> {
    match got {
        Ok(v) => {
            if std::mem::take(failing) {
                log::info!("stats: the runtime reports its {what} stats again");
            }
            v
        }
        Err(e) => {
            if !std::mem::replace(failing, true) {
                log::warn!("stats: the runtime's {what} stats are not available: {}", Chain(&e));
            }
            None
        }
    }
}

/// The last reading of each CPU source, and which collection last saw it.
#[derive(Default)]
struct CpuHistory {
    last: HashMap<String, (CpuSample, u64)>,
    generation: u64,
}

impl CpuHistory {
    /// The rate since `key`'s last reading; `cur` becomes its last.
    fn observe(&mut self, key: &str, cur: CpuSample) -> Option<u64> {
        let generation = self.generation;
        match self.last.get_mut(key) {
            Some(entry) => {
                let rate = nano_cores(Some(entry.0), cur);
                *entry = (cur, generation);
                rate
            }
            None => {
                self.last.insert(key.to_string(), (cur, generation));
                None
            }
        }
    }

    /// Forgets the sources this collection did not read (pods and containers gone), and
    /// starts the next.
    fn sweep(&mut self) {
        let generation = self.generation;
        self.last.retain(|_, (_, g)| *g == generation);
        self.generation += 1;
    }
}

/// The last walk of each tree: its result (`None`: in memory), and when it is due again.
struct Walked {
    usage: Option<DiskUsage>,
    due: Instant,
    generation: u64,
}

/// Walks of trees, each repeated only when due (`next_walk`).
#[derive(Default)]
struct Walks {
    trees: HashMap<PathBuf, Walked>,
    generation: u64,
}

impl Walks {
    /// The usage of the tree at `path` (`None`: in memory, or not there), walked if due.
    fn usage(&mut self, path: &Path, max_entries: usize, now: Instant) -> Option<DiskUsage> {
        let generation = self.generation;
        if let Some(w) = self.trees.get_mut(path) {
            w.generation = generation;
            if now < w.due {
                return w.usage;
            }
        }
        let started = Instant::now();
        let usage = match disk::du(path, max_entries) {
            Ok(u) => Some(u),
            Err(e) => {
                if e.kind() != std::io::ErrorKind::NotFound {
                    log::debug!("stats: cannot measure {}: {}", path.display(), Chain(&e));
                }
                self.trees.remove(path);
                return None;
            }
        };
        let was_cut = self.trees.get(path).and_then(|w| w.usage).is_some_and(|u| u.truncated);
        if let Some(u) = usage.filter(|u| u.truncated && !was_cut) {
            log::warn!(
                "stats: {} holds more than {} entries; its disk usage counts the first {} only (at least {} bytes)",
                path.display(),
                max_entries,
                u.visited,
                u.bytes
            );
        }
        let due = now + next_walk(started.elapsed());
        self.trees.insert(path.to_path_buf(), Walked { usage, due, generation });
        usage
    }

    fn sweep(&mut self) {
        let generation = self.generation;
        self.trees.retain(|_, w| w.generation == generation);
        self.generation += 1;
    }
}

/// What the runtime reported in one collection (CRI), by container id and pod uid.
#[derive(Default)]
struct RuntimeReport {
    containers: HashMap<String, RuntimeContainerStats>,
    /// Asked only when a pod's cgroup could not be read; `None` until then.
    pods: Option<HashMap<String, RuntimePodStats>>,
}

/// The collector: readers, the last CPU readings and walks, and what to read.
pub struct Collector {
    settings: CollectorSettings,
    driver: Option<Arc<dyn CgroupDriver>>,
    runtime: Arc<dyn ContainerRuntime>,
    cgroups: CgroupReader,
    proc: ProcReader,
    cpu: CpuHistory,
    walks: Walks,
    /// The monotonic origin of CPU readings from files.
    origin: Instant,
    /// Whether the last `ListContainerStats` and `ListPodSandboxStats` failed (each said once,
    /// not every period).
    runtime_failing: [bool; 2],
    /// The filesystems seen this collection, by device.
    filesystems: HashMap<u64, Option<FsTotals>>,
    /// The filesystems the runtime named this collection (its writable layers'), by mount point.
    mounts: HashMap<PathBuf, Option<FsTotals>>,
}

impl Collector {
    /// A collector over `driver` (the cgroup hierarchy; `None`: no cgroups are read) and
    /// `runtime`.
    pub fn new(
        settings: CollectorSettings,
        driver: Option<Arc<dyn CgroupDriver>>,
        runtime: Arc<dyn ContainerRuntime>,
    ) -> Collector {
        let proc = ProcReader::new(&settings.proc_root);
        Collector {
            settings,
            driver,
            runtime,
            cgroups: CgroupReader::default(),
            proc,
            cpu: CpuHistory::default(),
            walks: Walks::default(),
            origin: Instant::now(),
            runtime_failing: [false; 2],
            filesystems: HashMap::new(),
            mounts: HashMap::new(),
        }
    }

    /// The CPU sources and trees remembered (for the benchmark's memory figures).
    pub fn remembered(&self) -> (usize, usize) {
        (self.cpu.last.len(), self.walks.trees.len())
    }

    /// Collects everything about the node and `pods`.
    pub fn collect(&mut self, pods: &[PodTarget]) -> Snapshot {
        self.filesystems.clear();
        self.mounts.clear();
        let mut report = RuntimeReport { containers: self.runtime_containers(), pods: None };
        let nodefs = disk::statvfs(&self.settings.nodefs)
            .map_err(|e| log::debug!("stats: nodefs {}: {}", self.settings.nodefs.display(), Chain(&e)))
            .ok();
        let node = self.node(nodefs);
        let pods = pods.iter().map(|p| self.pod(p, nodefs, &mut report)).collect();
        self.cpu.sweep();
        self.walks.sweep();
        Snapshot { time: Some(SystemTime::now()), node, pods }
    }

    /// The runtime's `ListContainerStats`, by container id (empty when it reports none).
    fn runtime_containers(&mut self) -> HashMap<String, RuntimeContainerStats> {
        let got = self.runtime.container_stats();
        let got = said(&mut self.runtime_failing[0], "container", got);
        got.map(|v| v.into_iter().map(|c| (c.id.clone(), c)).collect()).unwrap_or_default()
    }

    /// The runtime's `ListPodSandboxStats`, by pod uid (newest sandbox last wins).
    fn runtime_pods(&mut self) -> HashMap<String, RuntimePodStats> {
        let got = self.runtime.pod_sandbox_stats();
        let got = said(&mut self.runtime_failing[1], "pod sandbox", got);
        got.map(|v| v.into_iter().map(|p| (p.pod_uid.clone(), p)).collect()).unwrap_or_default()
    }

    /// The filesystem of device `dev`, found at `path` (each read once per collection).
    fn filesystem(&mut self, dev: u64, path: &Path) -> Option<FsTotals> {
        *self.filesystems.entry(dev).or_insert_with(|| disk::statvfs(path).ok())
    }

    /// The rate of a CPU reading from cgroup files (their clock is this process's).
    fn file_cpu(&mut self, key: &str, usage_ns: u64, time: SystemTime) -> CpuStats {
        let cur = CpuSample { usage_ns, at: self.origin.elapsed() };
        CpuStats { time: Some(time), usage_core_nano_seconds: usage_ns, usage_nano_cores: self.cpu.observe(key, cur) }
    }

    /// The rate of a CPU reading from the runtime (on its own clock, its timestamps; its own
    /// rate when two readings are the same one, as a runtime's cache gives).
    fn runtime_cpu(&mut self, key: &str, c: &RuntimeCpu, now: SystemTime) -> CpuStats {
        let time = c.time.unwrap_or(now);
        let at = time.duration_since(UNIX_EPOCH).unwrap_or_default();
        let rate = self.cpu.observe(key, CpuSample { usage_ns: c.usage_core_nano_seconds, at });
        CpuStats {
            time: Some(time),
            usage_core_nano_seconds: c.usage_core_nano_seconds,
            usage_nano_cores: rate.or(c.usage_nano_cores),
        }
    }

    /// Reads cgroup `path`, saying a failure other than its absence.
    fn read_cgroup(&mut self, path: &str, want: Want) -> CgroupUsage {
        let Some(driver) = &self.driver else { return CgroupUsage::default() };
        let (usage, failed) = self.cgroups.read(&**driver, path, want);
        if let Some(e) = failed {
            log::debug!("stats: cgroup {path}: {}", Chain(&e));
        }
        usage
    }

    fn node(&mut self, nodefs: Option<FsTotals>) -> NodeStats {
        let now = SystemTime::now();
        let meminfo = self.proc.meminfo().map_err(|e| log::debug!("stats: /proc/meminfo: {}", Chain(&e))).ok();
        let stat = self.proc.stat().ok();
        let version = self.driver.as_ref().map(|d| d.version());
        // The node's memory: the root memory cgroup on v1 (as cAdvisor), /proc/meminfo on v2,
        // whose root cgroup has no memory.current (as runc reads the root).
        let memory = match version {
            Some(CgroupVersion::V1) => self.read_cgroup("/", Want { usage: true, pids: false }).memory,
            _ => None,
        };
        let memory = memory.or_else(|| {
            let m = meminfo?;
            let (page_faults, major_page_faults) = self.proc.faults().unwrap_or_default();
            Some(MemoryUsage {
                usage: m.usage(),
                limit: None,
                inactive_file: m.inactive_file,
                rss: m.anon,
                page_faults,
                major_page_faults,
            })
        });
        let memory = memory.map(|m| memory_stats(&m, meminfo.map(|i| i.total), now));
        // The node's CPU: the root cgroup's (cpuacct.usage, or cpu.stat on v2), else /proc/stat.
        let cgroup_cpu = match &self.driver {
            Some(d) => {
                let d = d.clone();
                self.cgroups.cpu(&*d, "/").ok().map(|ns| ("/", ns))
            }
            None => None,
        };
        let cpu = cgroup_cpu
            .or_else(|| Some(("/proc/stat", self.proc.cpu_ns(stat.as_ref()?)?)))
            .map(|(key, ns)| self.file_cpu(key, ns, now));
        let fs = nodefs.map(|t| fs_totals(now, t));
        let image_fs = self.image_fs(now);
        // Both or neither: a limit of 0 would read as no process id left (`pid.available`).
        let rlimit = match (self.proc.processes().ok(), self.proc.max_pid()) {
            (Some(running), Some(max_pid)) => {
                Some(RlimitStats { time: Some(now), max_pid, num_of_running_processes: running })
            }
            _ => None,
        };
        let (pods_cpu, pods_memory) = match self.settings.kubepods.clone() {
            Some(path) => {
                let u = self.read_cgroup(&path, Want { usage: true, pids: false });
                let cpu = u.cpu_usage_ns.map(|ns| self.file_cpu(&path, ns, now));
                (cpu, u.memory.map(|m| memory_stats(&m, self.settings.allocatable_memory, now)))
            }
            None => (None, None),
        };
        NodeStats {
            node_name: self.settings.node_name.clone(),
            start_time: stat.and_then(|s| s.boot_time).map(|s| UNIX_EPOCH + Duration::from_secs(s)),
            cpu,
            memory,
            fs,
            image_fs,
            rlimit,
            pods_cpu,
            pods_memory,
        }
    }

    /// `imagefs`: the filesystem the runtime reports its images on, with the images' own use.
    fn image_fs(&mut self, now: SystemTime) -> Option<FsStats> {
        let infos = match self.runtime.image_fs_info() {
            Ok(i) => i,
            Err(e) => {
                log::debug!("stats: the runtime's image filesystem: {}", Chain(&e));
                return None;
            }
        };
        let info = infos.first()?;
        let totals = disk::statvfs(&info.mount_point)
            .map_err(|e| log::debug!("stats: image filesystem {}: {}", info.mount_point.display(), Chain(&e)))
            .ok()?;
        Some(fs_usage(now, Some(totals), Some(info.used_bytes), info.inodes_used))
    }

    /// A tree's usage with the totals of its filesystem.
    fn tree(&mut self, path: &Path, now: SystemTime, started: Instant) -> Option<FsStats> {
        let max = self.settings.max_walk_entries;
        let u = self.walks.usage(path, max, started)?;
        let totals = self.filesystem(u.dev, path);
        Some(fs_usage(now, totals, Some(u.bytes), Some(u.inodes)))
    }

    fn pod(&mut self, p: &PodTarget, nodefs: Option<FsTotals>, report: &mut RuntimeReport) -> PodStats {
        let now = SystemTime::now();
        let started = Instant::now();
        let containers: Vec<ContainerStats> =
            p.containers.iter().map(|c| self.container(c, now, started, &report.containers)).collect();
        let volumes: Vec<VolumeStats> = p
            .volumes
            .iter()
            .filter_map(|v: &VolumeTarget| {
                Some(VolumeStats { name: v.name.clone(), fs: self.tree(&v.path, now, started)? })
            })
            .collect();
        let u = match &p.cgroup {
            Some(path) => self.read_cgroup(path, Want { usage: true, pids: true }),
            None => CgroupUsage::default(),
        };
        let key = p.cgroup.as_deref().unwrap_or_default();
        let mut cpu = u.cpu_usage_ns.map(|ns| self.file_cpu(key, ns, now));
        let mut memory = u.memory.map(|m| memory_stats(&m, None, now));
        let mut process_count = u.pids;
        if cpu.is_none() || memory.is_none() || process_count.is_none() {
            // The pod's cgroup cannot be read (enforcement off, the runtime's own cgroup
            // parent): the runtime's numbers, if it gives any.
            if report.pods.is_none() {
                report.pods = Some(self.runtime_pods());
            }
            if let Some(r) = report.pods.as_ref().and_then(|m| m.get(&p.uid)).cloned() {
                let key = format!("sandbox:{}", r.sandbox_id);
                cpu = cpu.or_else(|| r.cpu.map(|c| self.runtime_cpu(&key, &c, now)));
                memory = memory.or_else(|| r.memory.map(|m| runtime_memory_stats(&m, now)));
                process_count = process_count.or(r.process_count);
            }
        }
        let ephemeral = ephemeral_storage(now, nodefs, &containers, &volumes);
        PodStats {
            name: p.name.clone(),
            namespace: p.namespace.clone(),
            uid: p.uid.clone(),
            start_time: p.start_time,
            containers,
            cpu,
            memory,
            volumes,
            ephemeral_storage: Some(ephemeral),
            process_count,
        }
    }

    fn container(
        &mut self,
        c: &ContainerTarget,
        now: SystemTime,
        started: Instant,
        runtime: &HashMap<String, RuntimeContainerStats>,
    ) -> ContainerStats {
        let u = match &c.cgroup {
            Some(path) => self.read_cgroup(path, Want { usage: true, pids: false }),
            None => CgroupUsage::default(),
        };
        let key = c.cgroup.as_deref().unwrap_or_default();
        let mut cpu = u.cpu_usage_ns.map(|ns| self.file_cpu(key, ns, now));
        let mut memory = u.memory.map(|m| memory_stats(&m, None, now));
        let r = runtime.get(&c.id);
        if let Some(r) = r {
            let key = format!("container:{}", c.id);
            cpu = cpu.or_else(|| r.cpu.map(|rc| self.runtime_cpu(&key, &rc, now)));
            memory = memory.or_else(|| r.memory.map(|m| runtime_memory_stats(&m, now)));
        }
        // The writable layer, on the filesystem the runtime names (its snapshotter's).
        let rootfs = r.and_then(|r| r.writable_layer.clone()).map(|w| {
            let totals =
                *self.mounts.entry(w.mount_point.clone()).or_insert_with(|| disk::statvfs(&w.mount_point).ok());
            fs_usage(w.time.unwrap_or(now), totals, w.used_bytes, w.inodes_used)
        });
        let logs = c.log_dir.as_deref().and_then(|d| self.tree(d, now, started));
        ContainerStats { name: c.name.clone(), start_time: c.start_time, cpu, memory, rootfs, logs }
    }
}

#[cfg(test)]
mod tests;
