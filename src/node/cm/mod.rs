//! Pod cgroups by QoS, as kubelet lays them out with the cgroupfs driver:
//!
//! ```text
//! <root>/kubepods                      node allocatable: capacity − system-reserved − kube-reserved
//! <root>/kubepods/pod<uid>             Guaranteed pods
//! <root>/kubepods/burstable            shares = Σ cpu requests of Burstable pods
//! <root>/kubepods/burstable/pod<uid>
//! <root>/kubepods/besteffort           shares = 2
//! <root>/kubepods/besteffort/pod<uid>
//! <pod cgroup>/<container name>        with the process runtime, one per container
//! ```
//!
//! `plan` computes the whole tree and every control-file value from the node and the pods
//! (a pure function: `ferrolet plan cgroups` prints it); `ContainerManager` applies it.

pub mod cgroupfs;
pub mod helpers;
pub mod ownership;
pub mod qos;
pub mod systemd;

use crate::api::{Container, Pod};
use crate::node::events::{EventRecorder, Reference, NORMAL, WARNING};
use cgroupfs::{CgroupDriver, CgroupError, CgroupVersion};
use helpers::{
    milli_cpu_to_quota, milli_cpu_to_shares, shares_to_weight_linear, shares_to_weight_quadratic, QUOTA_PERIOD,
};
use ownership::{OwnershipError, PodCgroupRecords};
use qos::{all_declare_limit, pod_limits, pod_qos, pod_requests, QosClass};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

/// How v2 `cpu.weight` is derived from shares for container cgroups ferrolet writes itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightFormula {
    /// runc ≥ 1.3.2 / crun ≥ 1.23 (one CPU = weight 100, like every other cgroup's default).
    Quadratic,
    /// kubelet's KEP-2254 conversion (one CPU = weight 39).
    Linear,
}

/// kubelet's `memorySwap.swapBehavior`: how much swap a container may use (cgroup v2,
/// where the kernel accounts swap per cgroup).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub enum SwapBehavior {
    /// No container swaps (`memory.swap.max` 0): at its limit it is OOM-killed, as without
    /// swap. kubelet's default.
    #[default]
    NoSwap,
    /// A container of a Burstable pod swaps up to its share of the node's swap, its memory
    /// request over the node's memory (kubelet's formula); every other container none.
    LimitedSwap,
}

/// The resources of one cgroup, before conversion to control files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ResourceConfig {
    /// `cpu.shares` (v1) or its weight (v2).
    pub cpu_shares: Option<u64>,
    /// CFS quota in µs per period.
    pub cpu_quota: Option<i64>,
    /// CFS period in µs.
    pub cpu_period: Option<u64>,
    /// Memory limit in bytes.
    pub memory: Option<i64>,
    /// Process limit.
    pub pids: Option<i64>,
    /// Swap limit in bytes (v2 `memory.swap.max`; containers, when swap is accounted).
    pub swap: Option<i64>,
    /// Whether an OOM kill takes the whole cgroup (v2 `memory.oom.group`; containers).
    pub oom_group: bool,
}

impl ResourceConfig {
    /// The control files and values for this cgroup version.
    pub fn files(&self, version: CgroupVersion, weight: WeightFormula) -> BTreeMap<String, String> {
        let mut f = BTreeMap::new();
        match version {
            CgroupVersion::V1 => {
                if let Some(s) = self.cpu_shares {
                    f.insert("cpu.shares".into(), s.to_string());
                }
                if let Some(q) = self.cpu_quota {
                    f.insert("cpu.cfs_period_us".into(), self.cpu_period.unwrap_or(QUOTA_PERIOD).to_string());
                    f.insert("cpu.cfs_quota_us".into(), q.to_string());
                }
                if let Some(m) = self.memory {
                    f.insert("memory.limit_in_bytes".into(), m.to_string());
                }
            }
            CgroupVersion::V2 => {
                if let Some(s) = self.cpu_shares {
                    let w = match weight {
                        WeightFormula::Linear => shares_to_weight_linear(s),
                        WeightFormula::Quadratic => shares_to_weight_quadratic(s),
                    };
                    f.insert("cpu.weight".into(), w.to_string());
                }
                if let Some(q) = self.cpu_quota {
                    f.insert("cpu.max".into(), format!("{q} {}", self.cpu_period.unwrap_or(QUOTA_PERIOD)));
                }
                if let Some(m) = self.memory {
                    f.insert("memory.max".into(), m.to_string());
                }
                if let Some(sw) = self.swap {
                    f.insert("memory.swap.max".into(), sw.to_string());
                }
                if self.oom_group {
                    f.insert("memory.oom.group".into(), "1".into());
                }
            }
        }
        if let Some(p) = self.pids {
            f.insert("pids.max".into(), p.to_string());
        }
        f
    }
}

/// The node's resources.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NodeResources {
    /// CPU in millicores.
    pub cpu_millis: i64,
    /// Memory in bytes.
    pub memory: i64,
    /// Process ids.
    pub pids: i64,
    /// Swap that containers may be given (`SwapTotal`), when the kernel accounts swap per
    /// cgroup (v2 `memory.swap.max`); `None` when it does not (v1, or no swap accounting).
    pub swap: Option<i64>,
}

impl NodeResources {
    /// Capacity from /proc: online CPUs, MemTotal, kernel.pid_max.
    pub fn from_proc() -> NodeResources {
        use procfs::Current;
        let cpus = procfs::CpuInfo::current().map(|c| c.num_cores()).unwrap_or(1) as i64;
        let memory = procfs::Meminfo::current().map(|m| m.mem_total).unwrap_or(0) as i64;
        let pids = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(32_768);
        NodeResources { cpu_millis: cpus * 1000, memory, pids, swap: None }
    }
}

/// Settings of the cgroup layout (the `[cgroups]` config section, resolved).
#[derive(Clone, Debug, PartialEq)]
pub struct CmSettings {
    /// Parent of `kubepods` (`cgroupRoot`).
    pub root: String,
    /// Reserved for the OS: (cpu millicores, memory bytes).
    pub system_reserved: NodeResources,
    /// Reserved for the agent and runtime.
    pub kube_reserved: NodeResources,
    /// `qosReserved` memory percentage.
    pub qos_reserved_memory: Option<u32>,
    /// `podPidsLimit`; ≤ 0 leaves pids unlimited.
    pub pod_pids_limit: i64,
    /// Whether CPU limits become CFS quotas.
    pub cpu_cfs_quota: bool,
    /// Container `cpu.weight` conversion on v2.
    pub container_weight: WeightFormula,
    /// kubelet's `singleProcessOOMKill`: false (the default) sets v2 `memory.oom.group` on
    /// every container cgroup, so an OOM kills the whole container, not one of its
    /// processes.
    pub single_process_oom_kill: bool,
    /// kubelet's `memorySwap.swapBehavior`.
    pub swap_behavior: SwapBehavior,
    /// The systemd driver's names: `kubepods` is `/kubepods.slice`, a pod
    /// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`.
    pub systemd: bool,
}

impl Default for CmSettings {
    fn default() -> Self {
        CmSettings {
            root: "/".into(),
            system_reserved: NodeResources::default(),
            kube_reserved: NodeResources::default(),
            qos_reserved_memory: None,
            pod_pids_limit: -1,
            cpu_cfs_quota: true,
            container_weight: WeightFormula::Quadratic,
            single_process_oom_kill: false,
            swap_behavior: SwapBehavior::NoSwap,
            systemd: false,
        }
    }
}

/// Which level of the tree a cgroup is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// `kubepods`.
    Node,
    /// `burstable` / `besteffort`.
    Qos,
    /// `pod<uid>`.
    Pod,
    /// A container.
    Container,
}

/// One cgroup of the plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlannedCgroup {
    /// Path below the hierarchy root, e.g. `/kubepods/burstable/pod<uid>`.
    pub path: String,
    /// Level.
    pub level: Level,
    /// `namespace/name` for pod and container levels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// Container name for the container level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Control file → value, with the chosen version's file names.
    pub files: BTreeMap<String, String>,
    #[serde(skip)]
    /// The resources behind `files`.
    pub resources: ResourceConfig,
}

/// The node part of a plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanNode {
    /// v1 or v2.
    #[serde(rename = "cgroupVersion")]
    pub cgroup_version: u8,
    /// Capacity.
    pub capacity: PlanQuantities,
    /// Capacity minus reservations.
    pub allocatable: PlanQuantities,
}

/// Resources as Kubernetes quantities.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanQuantities {
    /// e.g. `3` or `2500m`.
    pub cpu: String,
    /// e.g. `8Gi`.
    pub memory: String,
    /// Process ids.
    pub pids: String,
}

impl PlanQuantities {
    fn of(r: &NodeResources) -> PlanQuantities {
        PlanQuantities {
            cpu: crate::api::Quantity::from_milli(r.cpu_millis).to_string(),
            memory: crate::api::Quantity::from_value(r.memory, true).to_string(),
            pids: r.pids.to_string(),
        }
    }
}

/// The whole tree ferrolet would write.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// The node.
    pub node: PlanNode,
    /// Every cgroup, parents before children.
    pub cgroups: Vec<PlannedCgroup>,
}

fn join(a: &str, b: &str) -> String {
    format!("{}/{}", a.trim_end_matches('/'), b)
}

/// The path of cgroup name `parts` below the root (kubelet's `CgroupName`): joined as
/// directories by the cgroupfs driver, nested slices by the systemd driver.
fn cgroup_path(s: &CmSettings, parts: &[&str]) -> String {
    if s.systemd {
        let all: Vec<&str> = s.root.split('/').chain(parts.iter().copied()).collect();
        return systemd::slice_path(&all);
    }
    parts.iter().fold(s.root.clone(), |path, part| join(&path, part))
}

/// The cgroup name of a QoS class's parent of pod cgroups.
fn qos_parts(class: QosClass) -> &'static [&'static str] {
    match class {
        QosClass::Guaranteed => &["kubepods"],
        QosClass::Burstable => &["kubepods", "burstable"],
        QosClass::BestEffort => &["kubepods", "besteffort"],
    }
}

/// `kubepods` under the root.
pub fn kubepods_path(s: &CmSettings) -> String {
    cgroup_path(s, &["kubepods"])
}

/// The QoS parent of a pod's cgroup.
pub fn qos_path(s: &CmSettings, class: QosClass) -> String {
    cgroup_path(s, qos_parts(class))
}

/// The cgroup of pod `uid` in QoS class `class`.
fn pod_path_in(s: &CmSettings, class: QosClass, uid: &str) -> String {
    let pod = format!("pod{uid}");
    cgroup_path(s, &[qos_parts(class), &[pod.as_str()]].concat())
}

/// The pod's cgroup.
pub fn pod_path(s: &CmSettings, pod: &Pod) -> String {
    pod_path_in(s, pod_qos(pod), &pod.metadata.uid)
}

/// The pod UID of a child cgroup of a QoS parent, if it is a pod's (`pod<uid>`, or the
/// systemd driver's `…-pod<uid>.slice`).
fn pod_uid_of(s: &CmSettings, child: &str) -> Option<String> {
    if s.systemd {
        return systemd::pod_uid_of_slice(child);
    }
    child.strip_prefix("pod").map(str::to_string)
}

/// Capacity − system-reserved − kube-reserved (never negative).
pub fn allocatable(s: &CmSettings, capacity: &NodeResources) -> NodeResources {
    let sub = |c: i64, a: i64, b: i64| (c - a - b).max(0);
    NodeResources {
        cpu_millis: sub(capacity.cpu_millis, s.system_reserved.cpu_millis, s.kube_reserved.cpu_millis),
        memory: sub(capacity.memory, s.system_reserved.memory, s.kube_reserved.memory),
        pids: sub(capacity.pids, s.system_reserved.pids, s.kube_reserved.pids),
        swap: capacity.swap,
    }
}

/// kubepods' resources: node allocatable.
fn node_config(alloc: &NodeResources) -> ResourceConfig {
    ResourceConfig {
        cpu_shares: Some(milli_cpu_to_shares(alloc.cpu_millis)),
        memory: Some(alloc.memory),
        pids: Some(alloc.pids),
        ..Default::default()
    }
}

/// The burstable and besteffort cgroups' resources for the active pods.
fn qos_configs(s: &CmSettings, alloc: &NodeResources, pods: &[&Pod]) -> (ResourceConfig, ResourceConfig) {
    let mut burstable_cpu = 0;
    let (mut guaranteed_mem, mut burstable_mem) = (0i64, 0i64);
    for p in pods {
        let (cpu, mem) = pod_requests(p);
        match pod_qos(p) {
            QosClass::Burstable => {
                burstable_cpu += cpu;
                burstable_mem += mem;
            }
            QosClass::Guaranteed => guaranteed_mem += mem,
            QosClass::BestEffort => {}
        }
    }
    let mut burstable = ResourceConfig { cpu_shares: Some(milli_cpu_to_shares(burstable_cpu)), ..Default::default() };
    let mut besteffort = ResourceConfig { cpu_shares: Some(helpers::MIN_SHARES), ..Default::default() };
    if let Some(pct) = s.qos_reserved_memory {
        let pct = pct as i64;
        let b = (alloc.memory - guaranteed_mem * pct / 100).max(0);
        burstable.memory = Some(b);
        besteffort.memory = Some((b - burstable_mem * pct / 100).max(0));
    }
    (burstable, besteffort)
}

/// `ResourceConfigForPod`.
pub fn pod_config(s: &CmSettings, pod: &Pod) -> ResourceConfig {
    let class = pod_qos(pod);
    if class == QosClass::BestEffort {
        return ResourceConfig {
            cpu_shares: Some(helpers::MIN_SHARES),
            pids: (s.pod_pids_limit > 0).then_some(s.pod_pids_limit),
            ..Default::default()
        };
    }
    let (cpu_req, _) = pod_requests(pod);
    let (cpu_lim, mem_lim) = pod_limits(pod);
    let cpu_limited = all_declare_limit(pod, "cpu");
    let mem_limited = all_declare_limit(pod, "memory");
    let quota = if s.cpu_cfs_quota { milli_cpu_to_quota(cpu_lim) } else { None };
    ResourceConfig {
        cpu_shares: Some(milli_cpu_to_shares(cpu_req)),
        cpu_quota: if cpu_limited { quota } else { None },
        cpu_period: if cpu_limited && quota.is_some() { Some(QUOTA_PERIOD) } else { None },
        memory: if mem_limited && mem_lim > 0 { Some(mem_lim) } else { None },
        pids: (s.pod_pids_limit > 0).then_some(s.pod_pids_limit),
        ..Default::default()
    }
}

/// The container's resources (`calculateLinuxResources`): shares from the cpu request,
/// quota from the cpu limit, memory from the memory limit.
pub fn container_config(s: &CmSettings, c: &Container) -> ResourceConfig {
    let get = |list: &BTreeMap<String, crate::api::Quantity>, name: &str| {
        list.get(name).map(|q| if name == "cpu" { q.milli_value() } else { q.value() })
    };
    let cpu_req = get(&c.resources.requests, "cpu").or(get(&c.resources.limits, "cpu")).unwrap_or(0);
    let quota = if s.cpu_cfs_quota { get(&c.resources.limits, "cpu").and_then(milli_cpu_to_quota) } else { None };
    ResourceConfig {
        cpu_shares: Some(milli_cpu_to_shares(cpu_req)),
        cpu_quota: quota,
        cpu_period: quota.map(|_| QUOTA_PERIOD),
        memory: get(&c.resources.limits, "memory").filter(|m| *m > 0),
        ..Default::default()
    }
}

/// kubelet's swap limit of container `c` of `pod` (`memory.swap.max`), on a node with
/// `node_memory` bytes of memory and `node_swap` of swap: none under `NoSwap`; under
/// `LimitedSwap`, a container of a Burstable pod that is not critical, and whose memory
/// request is set and below its limit, gets `request / node_memory * node_swap`; any other
/// none.
pub fn container_swap(behavior: SwapBehavior, pod: &Pod, c: &Container, node_memory: i64, node_swap: i64) -> i64 {
    let memory = |list: &BTreeMap<String, crate::api::Quantity>| list.get("memory").map_or(0, |q| q.value());
    let (request, limit) = (memory(&c.resources.requests), memory(&c.resources.limits));
    let limited = behavior == SwapBehavior::LimitedSwap
        && qos::pod_qos(pod) == QosClass::Burstable
        && !crate::api::source::is_critical(pod)
        && request > 0
        && request != limit
        && node_memory > 0;
    if !limited {
        return 0;
    }
    (request as f64 / node_memory as f64 * node_swap.max(0) as f64) as i64
}

impl PlannedCgroup {
    fn new(path: String, level: Level, r: ResourceConfig, version: CgroupVersion, w: WeightFormula) -> PlannedCgroup {
        PlannedCgroup { path, level, pod: None, container: None, files: r.files(version, w), resources: r }
    }
}

/// `kubepods`, limited to the node's allocatable `alloc`.
pub fn plan_node(s: &CmSettings, version: CgroupVersion, alloc: &NodeResources) -> PlannedCgroup {
    PlannedCgroup::new(kubepods_path(s), Level::Node, node_config(alloc), version, WeightFormula::Linear)
}

/// The burstable and besteffort cgroups for the active `pods`.
pub fn plan_qos(s: &CmSettings, version: CgroupVersion, alloc: &NodeResources, pods: &[&Pod]) -> [PlannedCgroup; 2] {
    let (burstable, besteffort) = qos_configs(s, alloc, pods);
    let qos = |class, r| PlannedCgroup::new(qos_path(s, class), Level::Qos, r, version, WeightFormula::Linear);
    [qos(QosClass::Burstable, burstable), qos(QosClass::BestEffort, besteffort)]
}

/// The pod's cgroup.
pub fn plan_pod(s: &CmSettings, version: CgroupVersion, pod: &Pod) -> PlannedCgroup {
    let r = pod_config(s, pod);
    PlannedCgroup {
        pod: Some(pod.key()),
        ..PlannedCgroup::new(pod_path(s, pod), Level::Pod, r, version, WeightFormula::Linear)
    }
}

/// Container `c`'s cgroup, under its pod's, on a node with `capacity` (its memory and swap
/// decide the swap limit).
pub fn plan_container(
    s: &CmSettings,
    version: CgroupVersion,
    capacity: &NodeResources,
    pod: &Pod,
    c: &Container,
) -> PlannedCgroup {
    // The systemd driver's container cgroup is a scope named by the container's ID.
    let leaf = if s.systemd { systemd::container_scope("<container-id>") } else { c.name.clone() };
    let path = join(&pod_path(s, pod), &leaf);
    let r = ResourceConfig {
        swap: capacity.swap.map(|swap| container_swap(s.swap_behavior, pod, c, capacity.memory, swap)),
        oom_group: !s.single_process_oom_kill,
        ..container_config(s, c)
    };
    let planned = PlannedCgroup::new(path, Level::Container, r, version, s.container_weight);
    PlannedCgroup { pod: Some(pod.key()), container: Some(c.name.clone()), ..planned }
}

/// Computes the whole tree for `pods` on a node with `capacity`: what `ContainerManager`
/// writes, part by part (`plan_node`, `plan_qos`, `plan_pod`, `plan_container`).
pub fn plan(s: &CmSettings, version: CgroupVersion, capacity: &NodeResources, pods: &[&Pod], containers: bool) -> Plan {
    let alloc = allocatable(s, capacity);
    let mut cgroups = vec![plan_node(s, version, &alloc)];
    cgroups.extend(plan_qos(s, version, &alloc, pods));
    for p in pods {
        cgroups.push(plan_pod(s, version, p));
        if containers {
            cgroups.extend(
                p.spec
                    .init_containers
                    .iter()
                    .chain(&p.spec.containers)
                    .map(|c| plan_container(s, version, capacity, p, c)),
            );
        }
    }
    let version_number = if version == CgroupVersion::V1 { 1 } else { 2 };
    Plan {
        node: PlanNode {
            cgroup_version: version_number,
            capacity: PlanQuantities::of(capacity),
            allocatable: PlanQuantities::of(&alloc),
        },
        cgroups,
    }
}

/// Where a container's cgroup goes and what it gets (CRI's `cgroup_parent` plus
/// `LinuxContainerResources`), handed to the runtime.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LinuxContainerConfig {
    /// The pod's cgroup path.
    pub cgroup_parent: String,
    /// Control files for the container cgroup, already in the host's version.
    pub files: BTreeMap<String, String>,
    /// The container's `oom_score_adj` by QoS class (kubelet's policy): a CRI runtime sets
    /// it, and the process runtime's workload sets it before it runs its command.
    #[serde(default)]
    pub oom_score_adj: i64,
}

/// Removes the cgroup of pod `uid`, whichever QoS class it was in, killing what is left,
/// and then its records. Only for pods of this agent (a pod it knows, or a recorded cgroup).
pub fn remove_pod_cgroup(
    driver: &dyn CgroupDriver,
    s: &CmSettings,
    records: &PodCgroupRecords,
    uid: &str,
) -> Result<(), CmError> {
    for class in [QosClass::Guaranteed, QosClass::Burstable, QosClass::BestEffort] {
        let path = pod_path_in(s, class, uid);
        driver.destroy(&path)?;
        records.forget(&path)?;
    }
    Ok(())
}

/// Failures of the container manager.
#[derive(Debug, thiserror::Error)]
pub enum CmError {
    /// A cgroup operation failed.
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// A pod cgroup could not be recorded as this agent's (so it is not created).
    #[error(transparent)]
    Ownership(#[from] OwnershipError),
}

#[derive(Debug)]
struct Orphan {
    attempts: u32,
    next: Instant,
}

/// Gives up on an orphaned cgroup after this many failed removals (a restart tries again).
const ORPHAN_MAX_ATTEMPTS: u32 = 8;
/// How often QoS cgroups are refreshed and a failed kubepods enforcement retried.
pub const QOS_UPDATE_PERIOD: Duration = Duration::from_secs(60);
/// How often records of pod cgroups that no longer exist are looked for (which lists the
/// records): such a record is only a file, left by a crash between recording a cgroup and
/// creating it, or by a cgroup removed by hand.
const RECORD_SWEEP_PERIOD: Duration = Duration::from_secs(60);

/// Writes the plan's parts to the host (`plan_node`, `plan_qos`, `plan_pod`; and
/// `plan_container`'s files for the runtime), one pod at a time, from the pod manager's
/// thread: what `ferrolet plan cgroups` prints is what it writes, by construction.
pub struct ContainerManager {
    driver: std::sync::Arc<dyn CgroupDriver>,
    settings: CmSettings,
    capacity: NodeResources,
    recorder: EventRecorder,
    node: Reference,
    allocatable_enforced: bool,
    last_qos_update: Option<Instant>,
    last_record_sweep: Option<Instant>,
    orphans: HashMap<String, Orphan>,
    records: PodCgroupRecords,
    /// Pod cgroups of others already reported (once each).
    foreign: HashSet<String>,
}

/// The driver for `settings`: the cgroupfs driver of the mounts' version (`detect`), inside
/// the systemd driver when pod cgroups are systemd's slices.
pub fn open_driver(
    mountinfo: &std::path::Path,
    forced: Option<CgroupVersion>,
    settings: &CmSettings,
) -> Result<Box<dyn CgroupDriver>, CgroupError> {
    let fs = cgroupfs::detect(mountinfo, forced)?;
    if !settings.systemd {
        return Ok(fs);
    }
    // On v1 systemd tracks a unit's processes in its own hierarchy (and, on a hybrid host,
    // the unified one): a container joins its scope there too, or systemd sees it empty.
    let mounts = cgroupfs::Mounts::read(mountinfo)?;
    let tracking = match fs.version() {
        CgroupVersion::V1 => mounts.named.get("systemd").into_iter().chain(mounts.v2.as_ref()).cloned().collect(),
        CgroupVersion::V2 => Vec::new(),
    };
    let driver = systemd::Systemd::new(fs, &systemd::system_bus(), tracking);
    let version = driver.systemd_version()?;
    log::info!("cm: pod cgroups are systemd {version}'s slices (cgroups.driver = \"systemd\")");
    Ok(Box::new(driver))
}

/// The node's swap (`SwapTotal`) when the kernel accounts swap per cgroup: v2, and
/// `memory.swap.max` beside `kubepods`' `memory.max`. kubelet's `swapControllerAvailable`.
pub fn swap_accounted(driver: &dyn CgroupDriver, kubepods: &str) -> Option<i64> {
    use procfs::Current;
    if driver.version() != CgroupVersion::V2 || !driver.memory_dir(kubepods)?.join("memory.swap.max").exists() {
        return None;
    }
    procfs::Meminfo::current().ok().map(|m| i64::try_from(m.swap_total).unwrap_or(i64::MAX))
}

impl ContainerManager {
    /// Creates `kubepods` and the QoS cgroups and enforces node allocatable; fails when the
    /// hierarchy cannot be written at all.
    pub fn start(
        driver: std::sync::Arc<dyn CgroupDriver>,
        settings: CmSettings,
        capacity: NodeResources,
        recorder: EventRecorder,
        node_name: &str,
        records: PodCgroupRecords,
    ) -> Result<Self, CmError> {
        let mut cm = ContainerManager {
            driver,
            settings,
            capacity,
            recorder,
            node: Reference::node(node_name),
            allocatable_enforced: false,
            last_qos_update: None,
            last_record_sweep: None,
            orphans: HashMap::new(),
            records,
            foreign: HashSet::new(),
        };
        // Creating kubepods is the test of whether enforcement is possible at all.
        cm.driver.create(&kubepods_path(&cm.settings))?;
        cm.capacity.swap = swap_accounted(&*cm.driver, &kubepods_path(&cm.settings));
        cm.enforce_allocatable();
        cm.update_qos(&[])?;
        Ok(cm)
    }

    /// The driver's cgroup version.
    pub fn version(&self) -> CgroupVersion {
        self.driver.version()
    }

    /// The driver, shared with the runtime for container cgroups.
    pub fn driver(&self) -> std::sync::Arc<dyn CgroupDriver> {
        self.driver.clone()
    }

    /// Creates a planned cgroup (if missing) and writes its control files.
    fn write(&self, cg: &PlannedCgroup) -> Result<(), CmError> {
        self.driver.create(&cg.path)?;
        Ok(self.driver.apply(&cg.path, &cg.files)?)
    }

    fn enforce_allocatable(&mut self) {
        let node = plan_node(&self.settings, self.driver.version(), &self.node_allocatable());
        let path = &node.path;
        match self.write(&node) {
            Ok(()) => {
                if !self.allocatable_enforced {
                    log::debug!("cm: node allocatable enforced on {path}: {:?}", node.files);
                    self.recorder.event(
                        &self.node,
                        NORMAL,
                        "NodeAllocatableEnforced",
                        "Updated Node Allocatable limit across pods",
                    );
                }
                self.allocatable_enforced = true;
            }
            Err(e) => {
                self.allocatable_enforced = false;
                self.recorder.event(
                    &self.node,
                    WARNING,
                    "FailedNodeAllocatableEnforcement",
                    &format!("Failed to update Node Allocatable Limits {path:?}: {}", crate::base::errors::Chain(&e)),
                );
            }
        }
    }

    /// Refreshes the burstable and besteffort cgroups for the active pods.
    pub fn update_qos(&mut self, pods: &[&Pod]) -> Result<(), CmError> {
        for cg in plan_qos(&self.settings, self.driver.version(), &self.node_allocatable(), pods) {
            self.write(&cg)?;
        }
        self.last_qos_update = Some(Instant::now());
        Ok(())
    }

    /// Creates (or updates) the pod's cgroup after refreshing the QoS cgroups for `active`.
    pub fn ensure_pod(&mut self, pod: &Pod, active: &[&Pod]) -> Result<(), CmError> {
        self.update_qos(active)?;
        let cg = plan_pod(&self.settings, self.driver.version(), pod);
        // Recorded first: a crash right after `create` must not leave a cgroup that the
        // orphan cleanup takes for someone else's.
        self.records.record(&cg.path)?;
        self.write(&cg)
    }

    /// The node's allocatable resources (capacity less the reservations).
    pub fn node_allocatable(&self) -> NodeResources {
        allocatable(&self.settings, &self.capacity)
    }

    /// The pod's cgroup (cgroupfs path), the parent of its containers' cgroups.
    pub fn pod_cgroup(&self, pod: &Pod) -> String {
        pod_path(&self.settings, pod)
    }

    /// What the runtime needs to create the container's cgroup.
    pub fn container(&self, pod: &Pod, c: &Container) -> LinuxContainerConfig {
        LinuxContainerConfig {
            cgroup_parent: pod_path(&self.settings, pod),
            files: plan_container(&self.settings, self.driver.version(), &self.capacity, pod, c).files,
            oom_score_adj: qos::oom_score_adj(pod, c, self.capacity.memory),
        }
    }

    /// Removes a terminated pod's cgroup (killing anything left) and refreshes QoS.
    pub fn remove_pod(&mut self, uid: &str, active: &[&Pod]) {
        if let Err(e) = remove_pod_cgroup(&*self.driver, &self.settings, &self.records, uid) {
            log::warn!("cm: {}; the orphan cleanup will retry", crate::base::errors::Chain(&e));
        }
        if let Err(e) = self.update_qos(active) {
            log::warn!("cm: updating QoS cgroups: {}", crate::base::errors::Chain(&e));
        }
    }

    /// Periodic work: QoS refresh and allocatable retry every minute, and removal of pod
    /// cgroups no pod owns (after an agent restart, or left behind), with back-off.
    /// `known_uid` tells the pods the agent knows (running, being stopped, or wanted).
    pub fn on_tick(&mut self, active: &[&Pod], known_uid: &dyn Fn(&str) -> bool) {
        if self.last_qos_update.map_or(true, |t| t.elapsed() >= QOS_UPDATE_PERIOD) {
            if !self.allocatable_enforced {
                self.enforce_allocatable();
            }
            if let Err(e) = self.update_qos(active) {
                log::warn!("cm: updating QoS cgroups: {}", crate::base::errors::Chain(&e));
            }
        }
        self.cleanup_orphans(known_uid);
    }

    fn cleanup_orphans(&mut self, known: &dyn Fn(&str) -> bool) {
        let mut found = Vec::new();
        let mut seen = HashSet::new();
        for class in [QosClass::Guaranteed, QosClass::Burstable, QosClass::BestEffort] {
            let parent = qos_path(&self.settings, class);
            for child in self.driver.children(&parent) {
                let Some(uid) = pod_uid_of(&self.settings, &child) else { continue };
                let path = join(&parent, &child);
                seen.insert(path.clone());
                let known = known(&uid);
                // Looked up only where it decides something: a known pod's cgroup is kept.
                let recorded = !known && self.records.contains(&path);
                match orphan_action(known, recorded) {
                    OrphanAction::Keep => {}
                    OrphanAction::Remove => found.push((uid, path)),
                    OrphanAction::LeaveAlone => self.report_foreign(&path),
                }
            }
        }
        let now = Instant::now();
        // A record without its cgroup: the agent stopped between recording and creating it,
        // or the cgroup was removed by hand.
        if self.last_record_sweep.map_or(true, |t| now.duration_since(t) >= RECORD_SWEEP_PERIOD) {
            self.last_record_sweep = Some(now);
            for path in self.records.list() {
                let uid = path.rsplit('/').next().and_then(|c| pod_uid_of(&self.settings, c)).unwrap_or_default();
                if !seen.contains(&path) && !known(&uid) && !self.driver.exists(&path) {
                    if let Err(e) = self.records.forget(&path) {
                        log::warn!("cm: {}", crate::base::errors::Chain(&e));
                    }
                }
            }
        }
        self.foreign.retain(|p| seen.contains(p));
        self.orphans.retain(|uid, _| found.iter().any(|(u, _)| u == uid));
        for (uid, path) in found {
            let o = self.orphans.entry(uid.clone()).or_insert(Orphan { attempts: 0, next: now });
            if o.attempts >= ORPHAN_MAX_ATTEMPTS || now < o.next {
                continue;
            }
            match self.driver.destroy(&path).map_err(CmError::from).and_then(|_| Ok(self.records.forget(&path)?)) {
                Ok(()) => log::info!("cm: removed orphaned pod cgroup {path}"),
                Err(e) => {
                    o.attempts += 1;
                    // 1 s, 2 s, 4 s … 128 s between tries; never a busy loop.
                    o.next = now + Duration::from_secs(1 << (o.attempts - 1).min(7));
                    if o.attempts >= ORPHAN_MAX_ATTEMPTS {
                        log::error!(
                            "cm: giving up on orphaned pod cgroup {path} after {} attempts: {}",
                            o.attempts,
                            crate::base::errors::Chain(&e)
                        );
                    } else {
                        log::warn!(
                            "cm: removing orphaned pod cgroup {path} (attempt {}): {}",
                            o.attempts,
                            crate::base::errors::Chain(&e)
                        );
                    }
                }
            }
        }
    }

    /// A pod cgroup this agent did not create: said once (log and Warning event), never touched.
    fn report_foreign(&mut self, path: &str) {
        if !self.foreign.insert(path.to_string()) {
            return;
        }
        let message = format!(
            "Pod cgroup {path} was not created by this agent (no record in its state directory); it and its processes are left alone"
        );
        self.recorder.event(&self.node, WARNING, "ForeignPodCgroup", &message);
    }
}

/// What the orphan cleanup does with a `pod<uid>` cgroup under a QoS cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrphanAction {
    /// A pod this agent runs.
    Keep,
    /// This agent created it and no pod owns it any more.
    Remove,
    /// Someone else created it (a kubelet, another ferrolet): report it, touch nothing.
    LeaveAlone,
}

/// Decides what to do with a pod cgroup: whether a known pod owns it, and whether this
/// agent recorded creating it.
pub fn orphan_action(known: bool, recorded: bool) -> OrphanAction {
    match (known, recorded) {
        (true, _) => OrphanAction::Keep,
        (false, true) => OrphanAction::Remove,
        (false, false) => OrphanAction::LeaveAlone,
    }
}

#[cfg(test)]
mod tests {
    use super::cgroupfs::{Mounts, V1, V2};
    use super::*;
    use crate::api::manifest::decode_pods;
    use std::path::Path;
    use std::sync::Arc;

    fn pod(name: &str, uid: &str, containers: &[(&str, &str, &str)]) -> Pod {
        // (name, requests, limits) as "cpu=…,memory=…".
        let mut y =
            format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  uid: {uid}\nspec:\n  containers:\n");
        for (c, req, lim) in containers {
            y.push_str(&format!(
                "  - name: {c}\n    image: x\n    resources:\n      requests: {{{}}}\n      limits: {{{}}}\n",
                req.replace('=', ": "),
                lim.replace('=', ": ")
            ));
        }
        decode_pods("t.yaml", &y).remove(0).unwrap()
    }

    fn mixed() -> Vec<Pod> {
        vec![
            pod("g", "g1", &[("app", "", "cpu=1,memory=1Gi")]),
            pod("b", "b1", &[("app", "cpu=250m,memory=128Mi", "cpu=500m"), ("side", "cpu=250m", "")]),
            pod("e", "e1", &[("app", "", "")]),
        ]
    }

    fn files<'a>(p: &'a Plan, path: &str) -> &'a BTreeMap<String, String> {
        &p.cgroups.iter().find(|c| c.path == path).unwrap_or_else(|| panic!("{path} not planned")).files
    }

    fn node() -> NodeResources {
        NodeResources { cpu_millis: 3000, memory: 8 << 30, pids: 4096, swap: None }
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_v1_tree_for_mixed_pods() {
        let settings = CmSettings {
            system_reserved: NodeResources { cpu_millis: 500, memory: 1 << 30, pids: 0, swap: None },
            kube_reserved: NodeResources { cpu_millis: 500, memory: 0, pids: 96, swap: None },
            ..Default::default()
        };
        let pods = mixed();
        let refs: Vec<&Pod> = pods.iter().collect();
        let p = plan(&settings, CgroupVersion::V1, &node(), &refs, true);
        assert_eq!(p.node.allocatable.cpu, "2");
        assert_eq!(p.node.allocatable.memory, "7Gi");
        assert_eq!(
            files(&p, "/kubepods"),
            &map(&[("cpu.shares", "2048"), ("memory.limit_in_bytes", "7516192768"), ("pids.max", "4000")])
        );
        assert_eq!(files(&p, "/kubepods/burstable"), &map(&[("cpu.shares", "512")]));
        assert_eq!(files(&p, "/kubepods/besteffort"), &map(&[("cpu.shares", "2")]));
        assert_eq!(
            files(&p, "/kubepods/podg1"),
            &map(&[
                ("cpu.cfs_period_us", "100000"),
                ("cpu.cfs_quota_us", "100000"),
                ("cpu.shares", "1024"),
                ("memory.limit_in_bytes", "1073741824")
            ])
        );
        // Burstable: no quota or memory limit at pod level, since `side` declares neither.
        assert_eq!(files(&p, "/kubepods/burstable/podb1"), &map(&[("cpu.shares", "512")]));
        assert_eq!(
            files(&p, "/kubepods/burstable/podb1/app"),
            &map(&[("cpu.cfs_period_us", "100000"), ("cpu.cfs_quota_us", "50000"), ("cpu.shares", "256")])
        );
        assert_eq!(files(&p, "/kubepods/besteffort/pode1"), &map(&[("cpu.shares", "2")]));
        assert_eq!(p.cgroups.iter().filter(|c| c.level == Level::Container).count(), 4);
    }

    #[test]
    fn the_v2_tree_uses_weights_cpu_max_and_memory_max() {
        let pods = mixed();
        let refs: Vec<&Pod> = pods.iter().collect();
        let p = plan(&CmSettings::default(), CgroupVersion::V2, &node(), &refs, true);
        assert_eq!(
            files(&p, "/kubepods"),
            &map(&[("cpu.weight", "118"), ("memory.max", "8589934592"), ("pids.max", "4096")])
        );
        assert_eq!(
            files(&p, "/kubepods/podg1"),
            &map(&[("cpu.max", "100000 100000"), ("cpu.weight", "39"), ("memory.max", "1073741824")])
        );
        // Container cgroups use the runc >= 1.3.2 conversion by default: 1 CPU = 100.
        assert_eq!(files(&p, "/kubepods/podg1/app")["cpu.weight"], "100");
        let linear = CmSettings { container_weight: WeightFormula::Linear, ..Default::default() };
        let p = plan(&linear, CgroupVersion::V2, &node(), &refs, true);
        assert_eq!(files(&p, "/kubepods/podg1/app")["cpu.weight"], "39");
    }

    #[test]
    fn v2_containers_are_killed_whole_on_oom_and_do_not_swap_by_default() {
        let pods = mixed();
        let refs: Vec<&Pod> = pods.iter().collect();
        // The kernel accounts swap: 2Gi of it.
        let swap = NodeResources { swap: Some(2 << 30), ..node() };
        let p = plan(&CmSettings::default(), CgroupVersion::V2, &swap, &refs, true);
        for c in p.cgroups.iter().filter(|c| c.level == Level::Container) {
            assert_eq!(c.files["memory.oom.group"], "1", "{}", c.path);
            assert_eq!(c.files["memory.swap.max"], "0", "{}", c.path);
        }
        for c in p.cgroups.iter().filter(|c| c.level != Level::Container) {
            assert!(
                !c.files.contains_key("memory.oom.group") && !c.files.contains_key("memory.swap.max"),
                "{}",
                c.path
            );
        }
        // Without swap accounting no swap file is written (it is not there to write).
        let p = plan(&CmSettings::default(), CgroupVersion::V2, &node(), &refs, true);
        assert!(!files(&p, "/kubepods/burstable/podb1/app").contains_key("memory.swap.max"));
        assert_eq!(files(&p, "/kubepods/burstable/podb1/app")["memory.oom.group"], "1");
        // singleProcessOOMKill: the kernel picks one process, as on v1.
        let single = CmSettings { single_process_oom_kill: true, ..Default::default() };
        let p = plan(&single, CgroupVersion::V2, &swap, &refs, true);
        assert!(!files(&p, "/kubepods/podg1/app").contains_key("memory.oom.group"));
        // v1 has neither file.
        let p = plan(&CmSettings::default(), CgroupVersion::V1, &swap, &refs, true);
        assert!(p
            .cgroups
            .iter()
            .all(|c| !c.files.keys().any(|f| f.starts_with("memory.swap") || f == "memory.oom.group")));
    }

    #[test]
    fn limited_swap_gives_burstable_containers_their_share_of_the_nodes_swap() {
        let limited = CmSettings { swap_behavior: SwapBehavior::LimitedSwap, ..Default::default() };
        let pods = [
            pod("g", "g1", &[("app", "", "cpu=1,memory=1Gi")]),
            pod(
                "b",
                "b1",
                &[("app", "memory=1Gi", "memory=2Gi"), ("nolimit", "memory=512Mi", ""), ("none", "cpu=1", "")],
            ),
            pod("b2", "b2", &[("same", "memory=1Gi", "memory=1Gi"), ("other", "cpu=1", "")]),
            pod("e", "e1", &[("app", "", "")]),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        // 8Gi of memory, 2Gi of swap: a 1Gi request is an eighth, 256Mi of swap.
        let node = NodeResources { swap: Some(2 << 30), ..node() };
        let p = plan(&limited, CgroupVersion::V2, &node, &refs, true);
        let swap = |path: &str| files(&p, path)["memory.swap.max"].clone();
        assert_eq!(swap("/kubepods/burstable/podb1/app"), (256i64 << 20).to_string());
        assert_eq!(swap("/kubepods/burstable/podb1/nolimit"), (128i64 << 20).to_string());
        assert_eq!(swap("/kubepods/burstable/podb1/none"), "0", "no memory request");
        assert_eq!(swap("/kubepods/burstable/podb2/same"), "0", "request equals limit");
        assert_eq!(swap("/kubepods/podg1/app"), "0", "Guaranteed");
        assert_eq!(swap("/kubepods/besteffort/pode1/app"), "0", "BestEffort");
        // Critical pods (static, mirror, system priority) never swap.
        let mut critical = pods[1].clone();
        critical.metadata.annotations.insert(crate::api::source::CONFIG_SOURCE_ANNOTATION.into(), "file".into());
        assert_eq!(
            container_swap(SwapBehavior::LimitedSwap, &critical, &critical.spec.containers[0], 8 << 30, 2 << 30),
            0
        );
        assert_eq!(container_swap(SwapBehavior::NoSwap, &pods[1], &pods[1].spec.containers[0], 8 << 30, 2 << 30), 0);
        assert_eq!(container_swap(SwapBehavior::LimitedSwap, &pods[1], &pods[1].spec.containers[0], 0, 2 << 30), 0);
    }

    #[test]
    fn qos_reserved_withholds_memory_from_lower_classes() {
        let settings = CmSettings { qos_reserved_memory: Some(50), ..Default::default() };
        let pods = mixed();
        let refs: Vec<&Pod> = pods.iter().collect();
        let p = plan(&settings, CgroupVersion::V1, &node(), &refs, false);
        // burstable = 8Gi − 1Gi·50% ; besteffort = burstable − 128Mi·50%
        let burstable = (8i64 << 30) - (1 << 30) / 2;
        assert_eq!(files(&p, "/kubepods/burstable")["memory.limit_in_bytes"], burstable.to_string());
        assert_eq!(
            files(&p, "/kubepods/besteffort")["memory.limit_in_bytes"],
            (burstable - (128 << 20) / 2).to_string()
        );
        assert!(p.cgroups.iter().all(|c| c.level != Level::Container));
    }

    /// Builds a fake cgroup v1 tree: mounts for cpu, memory and pids under `dir`, and the
    /// control files of every planned cgroup pre-created, as the kernel would show them.
    fn fake_tree(dir: &Path, version: CgroupVersion, plan: &Plan) -> Arc<dyn CgroupDriver> {
        let driver: Arc<dyn CgroupDriver> = match version {
            CgroupVersion::V1 => {
                let mut m = Mounts::default();
                for c in cgroupfs::CONTROLLERS {
                    m.v1.insert(c.into(), dir.join(c));
                }
                Arc::new(V1::new(&m))
            }
            CgroupVersion::V2 => Arc::new(V2::new(dir)),
        };
        let mut paths: Vec<String> = vec!["/".into()];
        paths.extend(plan.cgroups.iter().map(|c| c.path.clone()));
        for path in paths {
            for d in driver.dirs(&path) {
                std::fs::create_dir_all(&d).unwrap();
                let names = [
                    "cgroup.procs",
                    "cpu.shares",
                    "cpu.cfs_quota_us",
                    "cpu.cfs_period_us",
                    "memory.limit_in_bytes",
                    "pids.max",
                    "cpu.weight",
                    "cpu.max",
                    "memory.max",
                    "cgroup.subtree_control",
                ];
                for f in names {
                    std::fs::write(d.join(f), "").unwrap();
                }
                std::fs::write(d.join("cgroup.controllers"), "cpu memory pids").unwrap();
            }
        }
        driver
    }

    #[test]
    fn the_container_manager_writes_the_plan_into_a_fake_v1_and_v2_tree() {
        for version in [CgroupVersion::V1, CgroupVersion::V2] {
            let dir = tempfile::tempdir().unwrap();
            let pods = mixed();
            let refs: Vec<&Pod> = pods.iter().collect();
            let settings = CmSettings::default();
            let p = plan(&settings, version, &node(), &refs, false);
            let driver = fake_tree(dir.path(), version, &p);
            let (tx, _rx) = crossbeam_channel::unbounded();
            let recorder = EventRecorder::new(tx, "ferrolet", "n1", Default::default());
            let state = tempfile::tempdir().unwrap();
            let records = PodCgroupRecords::new(state.path());
            let mut cm =
                ContainerManager::start(driver.clone(), settings, node(), recorder, "n1", records.clone()).unwrap();
            for pod in &pods {
                cm.ensure_pod(pod, &refs).unwrap();
            }
            for c in &p.cgroups {
                for (file, value) in &c.files {
                    let d = driver.dir_for(&c.path, file).unwrap();
                    assert_eq!(&std::fs::read_to_string(d.join(file)).unwrap(), value, "{version:?} {} {file}", c.path);
                }
            }
            if version == CgroupVersion::V2 {
                assert_eq!(
                    std::fs::read_to_string(dir.path().join("kubepods/cgroup.subtree_control")).unwrap(),
                    "+cpu +memory +pids"
                );
            }
            // Removing a pod removes its cgroup and updates the burstable shares.
            assert!(records.contains("/kubepods/burstable/podb1"), "recorded when created");
            cm.remove_pod("b1", &[&pods[0], &pods[2]]);
            assert!(!driver.exists("/kubepods/burstable/podb1"));
            assert!(!records.contains("/kubepods/burstable/podb1"), "forgotten when removed");
            let shares = driver.dir_for("/kubepods/burstable", "cpu.shares").unwrap();
            if version == CgroupVersion::V1 {
                assert_eq!(std::fs::read_to_string(shares.join("cpu.shares")).unwrap(), "2");
            }
        }
    }

    #[test]
    fn orphan_cleanup_removes_only_cgroups_this_agent_recorded() {
        use OrphanAction::*;
        assert_eq!([orphan_action(true, true), orphan_action(true, false)], [Keep, Keep]);
        assert_eq!([orphan_action(false, true), orphan_action(false, false)], [Remove, LeaveAlone]);
    }

    #[test]
    fn recorded_orphans_are_removed_foreign_pod_cgroups_reported_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let pods = mixed();
        let refs: Vec<&Pod> = pods.iter().collect();
        let p = plan(&CmSettings::default(), CgroupVersion::V1, &node(), &refs, false);
        let driver = fake_tree(dir.path(), CgroupVersion::V1, &p);
        let (tx, rx) = crossbeam_channel::unbounded();
        let recorder = EventRecorder::new(tx, "ferrolet", "n1", Default::default());
        let records = PodCgroupRecords::new(state.path());
        records.record("/kubepods/burstable/podb1").unwrap();
        records.record("/kubepods/besteffort/podgone").unwrap();
        let mut cm =
            ContainerManager::start(driver.clone(), CmSettings::default(), node(), recorder, "n1", records.clone())
                .unwrap();
        let known: HashSet<String> = ["g1".to_string()].into_iter().collect();
        for _ in 0..3 {
            cm.on_tick(&refs, &|uid| known.contains(uid));
        }
        assert!(driver.exists("/kubepods/podg1"), "a known pod's");
        assert!(!driver.exists("/kubepods/burstable/podb1"), "b1 was ours and no known pod's");
        assert!(driver.exists("/kubepods/besteffort/pode1"), "e1 was never recorded: someone else's");
        assert_eq!(records.list(), Vec::<String>::new(), "b1's record went with it, the stale one too");
        let foreign: Vec<_> = rx.try_iter().filter(|e| e.reason == "ForeignPodCgroup").collect();
        assert_eq!(foreign.len(), 1, "reported once: {foreign:?}");
        assert_eq!(foreign[0].type_, WARNING);
        assert!(foreign[0].message.starts_with("Pod cgroup /kubepods/besteffort/pode1 was not created by this agent"));
    }

    #[test]
    fn the_systemd_driver_names_the_same_tree_as_nested_slices_with_containers_in_scopes() {
        let sd = CmSettings { systemd: true, ..Default::default() };
        let mut pods = mixed();
        pods[1].metadata.uid = "0e1b-22".into();
        let refs: Vec<&Pod> = pods.iter().collect();
        let p = plan(&sd, CgroupVersion::V2, &node(), &refs, true);
        let paths: Vec<&str> =
            p.cgroups.iter().filter(|c| c.level != Level::Container).map(|c| c.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/kubepods.slice",
                "/kubepods.slice/kubepods-burstable.slice",
                "/kubepods.slice/kubepods-besteffort.slice",
                "/kubepods.slice/kubepods-podg1.slice",
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0e1b_22.slice",
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pode1.slice",
            ]
        );
        let app = p.cgroups.iter().find(|c| c.container.as_deref() == Some("app")).unwrap();
        assert_eq!(app.path, "/kubepods.slice/kubepods-podg1.slice/ferrolet-<container-id>.scope");
        // The same files as cgroupfs: only the names differ.
        let fs = plan(&CmSettings::default(), CgroupVersion::V2, &node(), &refs, true);
        let values = |p: &Plan| p.cgroups.iter().map(|c| c.files.clone()).collect::<Vec<_>>();
        assert_eq!(values(&p), values(&fs));
        // Under a root of its own: `/ferrolet` is ferrolet.slice.
        let rooted = CmSettings { root: "/ferrolet".into(), ..sd.clone() };
        assert_eq!(
            qos_path(&rooted, QosClass::Burstable),
            "/ferrolet.slice/ferrolet-kubepods.slice/ferrolet-kubepods-burstable.slice"
        );
        // Pod slices give their UID back (the orphan cleanup's lookup); QoS slices none.
        assert_eq!(pod_uid_of(&sd, "kubepods-burstable-pod0e1b_22.slice").as_deref(), Some("0e1b-22"));
        assert_eq!(pod_uid_of(&sd, "kubepods-burstable.slice"), None);
        assert_eq!(pod_uid_of(&CmSettings::default(), "pod0e1b-22").as_deref(), Some("0e1b-22"));
    }

    #[test]
    fn the_orphan_cleanup_finds_pod_slices_by_their_escaped_uid() {
        let dir = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let sd = CmSettings { systemd: true, ..Default::default() };
        let mut pods = mixed();
        pods[1].metadata.uid = "0e1b-22".into();
        let refs: Vec<&Pod> = pods.iter().collect();
        let p = plan(&sd, CgroupVersion::V2, &node(), &refs, false);
        let driver = fake_tree(dir.path(), CgroupVersion::V2, &p);
        let (tx, _rx) = crossbeam_channel::unbounded();
        let recorder = EventRecorder::new(tx, "ferrolet", "n1", Default::default());
        let records = PodCgroupRecords::new(state.path());
        let burstable = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0e1b_22.slice";
        records.record(burstable).unwrap();
        let mut cm = ContainerManager::start(driver.clone(), sd, node(), recorder, "n1", records.clone()).unwrap();
        // Known by its UID with dashes: kept.
        cm.on_tick(&refs, &|uid| uid == "0e1b-22");
        assert!(driver.exists(burstable));
        // No longer known: ours, so removed.
        cm.on_tick(&refs, &|_| false);
        assert!(!driver.exists(burstable));
        assert!(driver.exists("/kubepods.slice/kubepods-podg1.slice"), "never recorded: left alone");
    }
}
