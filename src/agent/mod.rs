//! Builds the managers, wires their channels, and starts and stops them in order.

pub mod eviction;
pub mod kubeletapi;
pub mod notify;
use crate::base::clock::RealClock;
use crate::base::manager::{Health, ManagerHandle, Publisher, StopTimeout};
use crate::config::RuntimeBackend;
use crate::config::{Config, Enforcement};
use crate::node::cm::cgroupfs;
use crate::node::cm::ownership::LockFile;
use crate::node::cm::{ContainerManager, NodeResources};
use crate::node::devicemanager::{DeviceManager, DevicesCommand};
use crate::node::events::broadcaster::Broadcaster;
use crate::node::events::correlator::{EventCorrelator, EventLimits};
use crate::node::events::sink::{self, RetryPolicy};
use crate::node::events::store::EventStore;
use crate::node::events::{EventMetrics, EventRecorder, Reference, NORMAL, WARNING};
use crate::node::imagegc::{ImageGcClient, ImageGcCommand};
use crate::node::images::{ImagePuller, PullerSettings};
use crate::node::lifecycle::HookRunner;
use crate::node::prober::pool::ProberThreads;
use crate::node::prober::{ProbeResults, ProberCommand, ProberConfig, ProberManager, ProberMetrics};
use crate::node::runtime::cri::runtime::LogRotation;
use crate::node::runtime::cri::{CriClient, CriRuntime};
use crate::node::runtime::process::ProcessRuntime;
use crate::node::runtime::{ContainerRuntime, RuntimeError};
use crate::node::stats::manager::{StatsCommand, StatsManager};
use crate::node::stats::StatsView;
use crate::node::status::StatusCache;
use crate::pods::source::{DirWatcher, FileSource, SourceCommand};
use crate::pods::workers::PodWorkers;
use crate::pods::{PodManager, PodManagerConfig, PodsCommand};
use crate::server::{ApiServer, ApiState, ServerError};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// SIGTERM or SIGINT came while the agent waited for its CRI runtime to start.
    #[error("stopped while waiting for the container runtime to start")]
    StoppedWaiting,
    /// The state directory cannot be created or locked.
    #[error("cannot use state directory {path}: {message}")]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// Another agent holds the state directory's lock file.
    #[error("cannot lock {path}: another ferrolet{holder} is running with this state directory{hint}")]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// ` (pid N)` when the holder wrote its pid, else empty.
        holder: String,
        /// What to do about it, for the command that wanted the lock.
        hint: &'static str,
    },
    /// The runtime backend could not be set up.
    #[error("cannot set up the {runtime} runtime")]
    Runtime {
        /// Backend name.
        runtime: String,
        /// Cause.
        #[source]
        source: RuntimeError,
    },
    /// A step of `drain` failed.
    #[error("drain: {what}")]
    Drain {
        /// What it was doing.
        what: String,
        /// Cause.
        #[source]
        source: RuntimeError,
    },
    /// The runtime's records could not be opened to read (`open_runtime_read_only`).
    #[error("cannot read the {runtime} runtime")]
    ReadRuntime {
        /// Backend name.
        runtime: String,
        /// Cause.
        #[source]
        source: RuntimeError,
    },
    /// A manager thread could not be spawned.
    #[error("cannot start the {name} thread")]
    Spawn {
        /// Thread name.
        name: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Cgroups are required but unusable, or misconfigured.
    #[error("{message}")]
    Cgroups {
        /// What is wrong.
        message: String,
    },
    /// The local API could not listen.
    #[error(transparent)]
    Api(#[from] ServerError),
    /// kubelet's HTTPS API could not start.
    #[error("cannot start kubelet's API ([server])")]
    KubeletApi(#[source] Box<kubeletapi::KubeletApiError>),
    /// A cgroup reservation is malformed (validation refuses it earlier).
    #[error(transparent)]
    Reservation(#[from] crate::config::ReservationError),
    /// The CRI runtime cannot be reached, or is not ready.
    #[error("cannot use the CRI runtime (runtime = \"cri\")")]
    Cri {
        /// What the runtime said, naming the endpoint.
        #[source]
        source: crate::node::runtime::cri::CriError,
    },
    /// The CRI runtime's cgroup driver is not the one configured.
    #[error("the CRI runtime at {endpoint}: {message}")]
    CgroupDriver {
        /// The endpoint.
        endpoint: String,
        /// The two drivers and what to change.
        message: String,
    },
    /// The CRI runtime does not say which pause image it uses, and none is configured.
    #[error("the CRI runtime at {endpoint} does not report its sandbox image: set pod_sandbox_image")]
    NoSandboxImage {
        /// The endpoint.
        endpoint: String,
    },
    /// Cluster mode cannot start (its kubeconfig).
    #[error("cluster mode cannot start")]
    Cluster {
        /// Why.
        source: Box<crate::cluster::ClusterError>,
    },
    /// A cgroup root or plugin directory is in use by another agent or a kubelet.
    #[error("refusing to start beside another agent (give each its own [cgroups] root and [devices] plugin_dir)")]
    Shared {
        /// What is shared, and with whom.
        #[source]
        source: crate::node::cm::ownership::OwnershipError,
    },
}

/// The running agent.
pub struct Agent {
    source: Option<ManagerHandle<SourceCommand>>,
    watcher: Option<DirWatcher>,
    pods: Option<ManagerHandle<PodsCommand>>,
    prober: Option<ManagerHandle<ProberCommand>>,
    /// The probe threads, the exec reaper and the host name lookups.
    prober_threads: ProberThreads,
    devices: Option<ManagerHandle<DevicesCommand>>,
    /// The CRI backend (when selected), whose container stops in flight are joined at stop.
    cri: Option<Arc<CriRuntime>>,
    /// The image pull threads (CRI backend only: the process runtime ignores images).
    images: Option<ImagePuller>,
    /// The pod workers, where each pod's runtime calls are made (CRI backend only: the
    /// process runtime's take milliseconds, and the pod manager makes them itself).
    pod_workers: Option<Arc<PodWorkers>>,
    /// Image garbage collection (CRI backend only).
    image_gc: Option<ManagerHandle<ImageGcCommand>>,
    /// The stats thread (`fl-stats`), which runs the eviction manager.
    stats_thread: Option<ManagerHandle<StatsCommand>>,
    /// The kernel's memory notification for the eviction manager (`fl-memcg`, cgroup v1).
    memcg: Option<crate::node::eviction::memcg::Notifier>,
    /// The lifecycle hook threads.
    hooks: Option<HookRunner>,
    /// Cluster mode's threads (with a kubeconfig).
    cluster: Option<crate::cluster::ClusterThreads>,
    events: Option<EventsPipeline>,
    api: Option<ApiServer>,
    /// kubelet's HTTPS API (`[server]`).
    kubelet_api: Option<crate::server::kubelet::KubeletServer>,
    cfg: Config,
    _lock: File,
    /// The cgroup root's and the plugin directory's locks, held while the agent runs.
    _owned: Vec<LockFile>,
    /// Pod statuses (what `/pods` serves).
    pub statuses: StatusCache,
    /// The node's, pods' and containers' usage, collected by `fl-stats` (what the stats
    /// endpoints, `top` and eviction read).
    pub stats: StatsView,
    /// Manager liveness (what `/healthz` reports).
    pub health: Health,
}

/// The event broadcaster with its two local watchers: the log, and the correlated,
/// persistent event store the API serves.
struct EventsPipeline {
    broadcaster: Broadcaster,
    store: EventStore,
    metrics: Arc<EventMetrics>,
    /// The correlators' limits, which a reload may change.
    limits: EventLimits,
}

impl EventsPipeline {
    fn start(cfg: &Config, health: &Health) -> std::io::Result<EventsPipeline> {
        let ev = &cfg.events;
        let metrics = Arc::new(EventMetrics::default());
        let mut broadcaster = Broadcaster::start(ev.queue_size, ev.queue_size, metrics.clone(), health)?;
        broadcaster.start_watcher("fl-evlog", |e| sink::log_event(&e))?;
        let store = EventStore::open(&cfg.state_dir.join("events.log"), ev.store_max_events);
        let mut sink = store.clone();
        let limits = EventLimits::new(ev.correlator_options());
        let mut correlator = EventCorrelator::following(&limits, Arc::new(RealClock));
        let m = metrics.clone();
        broadcaster.start_watcher("fl-evstore", move |e| {
            // The local store never fails transiently, so the retry sleep is never taken.
            sink::record_to_sink(&mut sink, &mut correlator, e, RetryPolicy::default(), &m, &mut |_| true, 0.0);
        })?;
        Ok(EventsPipeline { broadcaster, store, metrics, limits })
    }
}

/// The longest wait for the CRI runtime's socket to accept a connection at start.
const CRI_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The runtime the config selects. `cri` is set for the CRI backend, whose stop threads the
/// agent joins at shutdown.
struct SelectedRuntime {
    runtime: Arc<dyn ContainerRuntime>,
    cri: Option<Arc<CriRuntime>>,
}

/// The CRI backend when the config selects it, connected and checked (`Version`, then
/// `Status` with `RuntimeReady`): a missing socket or a runtime that is not ready stops the
/// start with an error naming the endpoint, before anything (a cgroup) is made.
fn cri_if_selected(cfg: &Config, health: &Health, wait: &mut StartWait) -> Result<Option<Arc<CriRuntime>>, AgentError> {
    match cfg.runtime {
        RuntimeBackend::Process => Ok(None),
        RuntimeBackend::Cri => Ok(Some(Arc::new(cri_runtime_when_up(cfg, health, wait)?))),
    }
}

/// Asked every `WAIT_SLICE` while the agent waits for a CRI runtime that is still starting,
/// with why it waits and for how long at most: whether to go on waiting (`false` when a
/// signal asks the agent to stop). `main` also tells the service manager from here.
pub type StartWait<'a> = dyn FnMut(&str, std::time::Duration) -> bool + 'a;

/// How often a wait for the CRI runtime asks whether to go on.
const WAIT_SLICE: std::time::Duration = std::time::Duration::from_millis(100);

/// `cri_runtime`, waiting (1 s, 2 s, … at most 5 s apart, `runtime_start_wait` in all)
/// while the runtime is still starting, as at boot when both start together; said once.
/// Nothing else starts meanwhile: a start that fails must leave nothing behind (no state
/// directory, cgroup or bound port), and every manager works through the runtime.
fn cri_runtime_when_up(cfg: &Config, health: &Health, go_on: &mut StartWait) -> Result<CriRuntime, AgentError> {
    let wait = cfg.runtime_start_wait.0;
    let deadline = std::time::Instant::now() + wait;
    let mut pause = std::time::Duration::from_secs(1);
    let mut said = false;
    loop {
        match cri_runtime(cfg, health) {
            Err(AgentError::Cri { source }) if source.is_starting() && std::time::Instant::now() + pause < deadline => {
                let why = crate::base::errors::Chain(&source).to_string();
                if !said {
                    log::warn!("cri: {why}; waiting for the runtime to start (at most {wait:?})");
                    said = true;
                }
                let until = std::time::Instant::now() + pause;
                while std::time::Instant::now() < until {
                    if !go_on(&why, wait) {
                        return Err(AgentError::StoppedWaiting);
                    }
                    std::thread::sleep(WAIT_SLICE);
                }
                pause = (pause * 2).min(std::time::Duration::from_secs(5));
            }
            Ok(rt) if said => {
                log::info!("cri: the runtime is up");
                return Ok(rt);
            }
            other => return other,
        }
    }
}

/// The configured runtime: the checked CRI backend, or the process runtime, which gets the
/// cgroup driver when pod cgroups are on (a CRI runtime makes container cgroups itself,
/// under `cgroup_parent`).
fn open_runtime(
    cfg: &Config,
    shim_exe: &Path,
    cgroups: Option<Arc<dyn cgroupfs::CgroupDriver>>,
    cri: Option<Arc<CriRuntime>>,
) -> Result<SelectedRuntime, AgentError> {
    if let Some(cri) = cri {
        return Ok(SelectedRuntime { runtime: cri.clone(), cri: Some(cri) });
    }
    let rt = process_runtime(cfg, shim_exe)?;
    let rt = match cgroups {
        Some(driver) => rt.with_cgroups(driver),
        None => rt,
    };
    Ok(SelectedRuntime { runtime: Arc::new(rt), cri: None })
}

/// Opens the configured runtime to look at it, for `ferrolet logs` and `ferrolet exec`,
/// which may run beside a live agent: the process runtime read-only
/// (`ProcessRuntime::open_read_only`: nothing created, moved or killed), the CRI runtime
/// with neither the start-up check nor a sandbox image (it only lists and execs).
pub fn open_runtime_read_only(cfg: &Config) -> Result<Arc<dyn ContainerRuntime>, AgentError> {
    match cfg.runtime {
        RuntimeBackend::Process => ProcessRuntime::open_read_only(&runtime_root(cfg))
            .map(|rt| Arc::new(rt) as Arc<dyn ContainerRuntime>)
            .map_err(|source| AgentError::ReadRuntime { runtime: cfg.runtime.to_string(), source }),
        RuntimeBackend::Cri => Ok(Arc::new(CriRuntime::new(cri_client(cfg)?, "", &cfg.node_name, &Health::default()))),
    }
}

/// Connects to `container_runtime_endpoint`; each call gets `runtime_request_timeout`.
fn cri_client(cfg: &Config) -> Result<CriClient, AgentError> {
    let env = Arc::new(grpcio::EnvBuilder::new().cq_count(1).name_prefix("fl-crigrpc").build());
    let timeout = cfg.runtime_request_timeout.0;
    let client = CriClient::connect(&cfg.container_runtime_endpoint, CRI_CONNECT_TIMEOUT.min(timeout), env)
        .map_err(|source| AgentError::Cri { source })?;
    Ok(client.with_call_timeout(timeout))
}

/// Connects to `container_runtime_endpoint`, checks the runtime and learns its pause image.
fn cri_runtime(cfg: &Config, health: &Health) -> Result<CriRuntime, AgentError> {
    let endpoint = &cfg.container_runtime_endpoint;
    let cri_err = |source| AgentError::Cri { source };
    let client = cri_client(cfg)?;
    let (version, network) = client.check().map_err(cri_err)?;
    log::info!(
        "cri: {} {} (CRI {}) at {endpoint}",
        version.runtime_name(),
        version.runtime_version(),
        version.runtime_api_version()
    );
    if let Some(why) = network {
        log::warn!(
            "cri: {endpoint}: {why}: pods without hostNetwork cannot start until the runtime's network is ready"
        );
    }
    // Its driver decides ferrolet's (`cgroups.driver = "auto"`), or must agree with it.
    let driver = client.cgroup_driver().map_err(cri_err)?;
    match driver {
        Some(driver) => log::info!("cri: the runtime's cgroup driver is {driver:?}"),
        None => log::info!(
            "cri: the runtime does not report its cgroup driver (RuntimeConfig is unimplemented before containerd 2.0); \
             its runc must use ferrolet's driver (SystemdCgroup = true with the systemd driver, false with cgroupfs)"
        ),
    }
    let pause = if cfg.pod_sandbox_image.is_empty() {
        let image = client.sandbox_image().map_err(cri_err)?;
        image.ok_or_else(|| AgentError::NoSandboxImage { endpoint: endpoint.clone() })?
    } else {
        cfg.pod_sandbox_image.clone()
    };
    log::info!("cri: pod sandboxes use {pause}");
    Ok(CriRuntime::new(client, &pause, &cfg.node_name, health)
        .with_version(version.runtime_name(), version.runtime_version())
        .with_cgroup_driver(driver.map(|d| d == crate::proto::cri::CgroupDriver::SYSTEMD)))
}

fn process_runtime(cfg: &Config, shim_exe: &Path) -> Result<ProcessRuntime, AgentError> {
    // Other pods' volumes, secrets and logs stay out of sight of every container.
    let hidden =
        [cfg.state_dir.clone(), cfg.logs.pod_logs_dir.clone()].into_iter().filter(|d| !d.as_os_str().is_empty());
    Ok(ProcessRuntime::new(&runtime_root(cfg), shim_exe, cfg.logs.max_size.0, cfg.logs.max_files)
        .map_err(|source| AgentError::Runtime { runtime: cfg.runtime.to_string(), source })?
        .with_hidden(hidden.collect()))
}

/// Where the process runtime keeps its records.
fn runtime_root(cfg: &Config) -> PathBuf {
    cfg.state_dir.join("runtime")
}

/// kubelet's `CheckLimitsForResolvConf` at start: a Warning on the node when its resolv.conf
/// cannot be read, or when its search line leaves pods too little room. And a warning when
/// every nameserver in it is a loopback one (systemd-resolved's 127.0.0.53), which a pod on
/// the pod network gets with `Default` but cannot reach (kubelet says nothing).
fn check_resolv_conf(dns: &crate::node::dns::DnsSettings, recorder: &EventRecorder, node: &str) {
    let Some(path) = &dns.resolv_conf else { return };
    let problem = match crate::node::dns::read_resolv_conf(path) {
        Err(e) => Some(crate::base::errors::Chain(&e).to_string()),
        Ok(rc) => {
            if rc.loopback_only() {
                log::warn!(
                    "dns: {} names only loopback nameservers ({}): pods on the pod network with dnsPolicy Default (or ClusterFirst without cluster_dns) get them and cannot reach them; set resolv_conf to a file naming the upstream servers (with systemd-resolved: /run/systemd/resolve/resolv.conf)",
                    path.display(),
                    rc.nameservers.join(", ")
                );
            }
            crate::node::dns::check_node_limits(&rc, path, &dns.cluster_domain)
        }
    };
    if let Some(message) = problem {
        recorder.event(&Reference::node(node), WARNING, "CheckLimitsForResolvConf", &message);
    }
}

/// Sets up pod cgroups unless `cgroups.enforcement` is `off`. Without access to the cgroup
/// tree (not root, read-only /sys/fs/cgroup) the agent runs pods without enforcement and
/// says why, unless enforcement is `required`. A cgroup root in use by another ferrolet or
/// a kubelet is always refused. Returns the manager and the cgroup root's lock.
fn start_container_manager(
    cfg: &Config,
    recorder: &EventRecorder,
) -> Result<(Option<ContainerManager>, Option<LockFile>), AgentError> {
    use crate::node::cm::ownership::{self, OwnershipError};
    let cg = &cfg.cgroups;
    if cg.enforcement == Enforcement::Off {
        log::info!("cm: resource enforcement is off (cgroups.enforcement = \"off\")");
        return Ok((None, None));
    }
    let settings = cg.settings()?;
    if cfg.runtime == crate::config::RuntimeBackend::Process
        && !crate::base::procs::has_capability(crate::base::procs::CAP_SYS_RESOURCE)
    {
        log::warn!(
            "cm: the agent lacks CAP_SYS_RESOURCE: containers of Guaranteed and Burstable pods keep oom_score_adj 0 instead of kubelet's -997 (Guaranteed) or lower, so the kernel's OOM killer may pick them before others"
        );
    }
    let kubepods = crate::node::cm::kubepods_path(&settings);
    let shared = |source| AgentError::Shared { source };
    ownership::kubelet_sharing_root(Path::new("/proc"), &settings.root).map_err(shared)?;
    let what = format!("cgroup root {:?}", settings.root);
    let lock_path = ownership::cgroup_root_lock_path(Path::new(ownership::LOCK_DIR), &settings.root);
    let lock = match LockFile::acquire(&lock_path, &what) {
        Ok(l) => Some(l),
        Err(e @ OwnershipError::CreateLock { .. }) if cg.enforcement != Enforcement::Required => {
            // Where /run/ferrolet cannot be written (not root), neither can the cgroup tree.
            log::warn!(
                "cm: resource enforcement is off: {}; pods run without cgroup limits",
                crate::base::errors::Chain(&e)
            );
            return Ok((None, None));
        }
        Err(e @ OwnershipError::CreateLock { .. }) => {
            return Err(AgentError::Cgroups {
                message: format!("resource enforcement is required but {}", crate::base::errors::Chain(&e)),
            })
        }
        Err(e) => return Err(shared(e)),
    };
    let records = crate::node::cm::ownership::PodCgroupRecords::new(&cfg.state_dir);
    let started = crate::node::cm::open_driver(&cg.mountinfo, cg.forced_version(), &settings)
        .map_err(crate::node::cm::CmError::from)
        .and_then(|driver| {
            ContainerManager::start(
                Arc::from(driver),
                settings,
                NodeResources::from_proc(),
                recorder.clone(),
                &cfg.node_name,
                records,
            )
        });
    match started {
        Ok(cm) => {
            let v = if cm.version() == cgroupfs::CgroupVersion::V1 { 1 } else { 2 };
            log::info!("cm: pod cgroups on cgroup v{v} under {kubepods}");
            Ok((Some(cm), lock))
        }
        Err(e) if cg.enforcement == Enforcement::Required => Err(AgentError::Cgroups {
            message: format!(
                "resource enforcement is required (cgroups.enforcement = \"required\") but cgroups cannot be used: {}",
                crate::base::errors::Chain(&e)
            ),
        }),
        Err(e) => {
            log::warn!("cm: resource enforcement is off: {}; pods run without cgroup limits (set cgroups.enforcement = \"required\" to refuse to start instead)", crate::base::errors::Chain(&e));
            Ok((None, None))
        }
    }
}

/// The stats thread, not yet started: it reads the cgroups `cm` makes (or, with pod cgroups
/// off, the node's root cgroup only, read-only), `/proc`, the state directory's filesystem
/// and the runtime's stats, for the pods `statuses` shows running.
fn stats_manager(
    cfg: &Config,
    cm: Option<&ContainerManager>,
    runtime: Arc<dyn ContainerRuntime>,
    statuses: StatusCache,
) -> StatsManager {
    use crate::node::stats::collector::{Collector, CollectorSettings};
    let cm_settings = cm.and_then(|_| cfg.cgroups.settings().ok());
    let driver = match cm {
        Some(cm) => Some(cm.driver()),
        None => cgroupfs::detect(&cfg.cgroups.mountinfo, cfg.cgroups.forced_version()).ok().map(Arc::from),
    };
    let mut settings = CollectorSettings::new(&cfg.node_name, &cfg.state_dir);
    settings.kubepods = cm_settings.as_ref().map(crate::node::cm::kubepods_path);
    settings.allocatable_memory = cm.map(|cm| cm.node_allocatable().memory).and_then(|m| u64::try_from(m).ok());
    let targets = crate::pods::stats::TargetSettings {
        cgroups: cm_settings,
        log_root: cfg.pod_logs_dir(),
        pods_root: cfg.state_dir.join(PODS_DIR),
        runtime: runtime.kind(),
    };
    let collector = Collector::new(settings, driver, runtime);
    StatsManager::new(collector, Box::new(move || crate::pods::stats::targets(&statuses.pods_and_statuses(), &targets)))
}

/// Whether the runtime's image filesystem is another filesystem than the state directory's
/// (kubelet's `HasDedicatedImageFs`): the device of its mount point differs.
fn dedicated_image_fs(runtime: &dyn ContainerRuntime, state_dir: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let dev = |p: &std::path::Path| std::fs::metadata(p).ok().map(|m| m.dev());
    let image = runtime.image_fs_info().ok().and_then(|fs| fs.first().map(|f| f.mount_point.clone()));
    image.is_some_and(|m| dev(&m).is_some() && dev(&m) != dev(state_dir))
}

/// The Node as the local API starts from: name, cpu and memory (allocatable less the
/// configured reservations and the hard eviction threshold), `pods` (`max_pods`) and `ephemeral-storage` (the state
/// directory's filesystem, as kubelet's root directory's).
fn node_object(cfg: &Config, thresholds: &[crate::node::eviction::Threshold]) -> crate::api::Node {
    use crate::api::Quantity;
    use crate::node::eviction::Signal;
    let capacity = NodeResources::from_proc();
    let mut alloc = cfg.cgroups.settings().map(|s| crate::node::cm::allocatable(&s, &capacity)).unwrap_or(capacity);
    let storage =
        crate::node::stats::disk::statvfs(&cfg.state_dir).ok().map(|fs| i64::try_from(fs.capacity).unwrap_or(i64::MAX));
    // Less the hard eviction thresholds, as kubelet's node allocatable (the cgroup keeps them,
    // so eviction acts before the kernel's OOM killer).
    let hard = |signal, capacity: i64| {
        let t = thresholds.iter().find(|t| t.signal == signal && t.grace_period.is_zero());
        t.map_or(0, |t| t.value.quantity(capacity).value())
    };
    alloc.memory = (alloc.memory - hard(Signal::MemoryAvailable, capacity.memory)).max(0);
    let alloc_storage = storage.map(|s| (s - hard(Signal::NodeFsAvailable, s)).max(0));
    let resources = |r: &NodeResources, storage: Option<i64>| {
        [
            ("cpu".to_string(), Quantity::from_milli(r.cpu_millis)),
            ("memory".to_string(), Quantity::from_value(r.memory, true)),
            ("pods".to_string(), Quantity::from_value(cfg.max_pods as i64, false)),
        ]
        .into_iter()
        .chain(storage.map(|s| ("ephemeral-storage".to_string(), Quantity::from_value(s, true))))
        .collect()
    };
    let mut node = crate::api::Node { api_version: "v1".into(), kind: "Node".into(), ..Default::default() };
    node.metadata.name = cfg.node_name.clone();
    node.status.capacity = resources(&capacity, storage);
    node.status.allocatable = resources(&alloc, alloc_storage);
    node
}

/// The prober's persisted results, in the state directory.
const PROBE_RESULTS_FILE: &str = "probe-results.json";
/// The pods' own directories (`poddir::PodDir`) under the state directory.
const PODS_DIR: &str = "pods";
/// Name of the lock file in the state directory.
const LOCK_FILE: &str = "ferrolet.lock";
/// How long start-up waits for the state lock: a previous agent killed a moment ago may
/// still hold it (through a child forked but not yet exec'd when it died), as after a
/// crash and an immediate restart by the init system.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// How often `drain` relists the runtime while containers stop.
const DRAIN_RELIST: std::time::Duration = std::time::Duration::from_millis(250);

/// Tries to take an exclusive flock on `f` until `wait` has passed.
fn flock_within(f: &File, wait: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + wait;
    loop {
        // SAFETY: flock on an fd we own; no memory is passed.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Takes an exclusive lock on `<state>/ferrolet.lock` so two agents never share a state dir,
/// and writes this process's pid into it (so the refusal can name the holder). `purpose`
/// says what the caller wanted, for the message when the lock is taken.
fn lock_state_dir(cfg: &Config, purpose: LockPurpose) -> Result<File, AgentError> {
    use std::io::{Read, Seek, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let dir = &cfg.state_dir;
    let path = dir.join(LOCK_FILE);
    let err = |message: String| AgentError::StateDir { path: dir.clone(), message };
    let access = cfg.state_access().map_err(|e| err(format!("state_group: {}", e.message())))?;
    access.install();
    crate::base::state_files::create_private_dir_all(dir).map_err(|e| err(e.to_string()))?;
    let mut f = std::fs::OpenOptions::new()
        .mode(access.file_mode())
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        // Never lock (and later write our pid) through a link planted in the state dir.
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| err(format!("{}: {e}", path.display())))?;
    if !flock_within(&f, LOCK_WAIT) {
        let mut holder = String::new();
        // A pid is a few bytes; never read more than that from a file anyone could have grown.
        let _ = (&f).take(32).read_to_string(&mut holder);
        let holder = match holder.trim() {
            "" => String::new(),
            pid => format!(" (pid {pid})"),
        };
        let hint = match purpose {
            LockPurpose::Run => "",
            LockPurpose::Drain => {
                "; stop it first (e.g. `systemctl stop ferrolet`), then run drain again: drain works only while no agent runs"
            }
        };
        return Err(AgentError::Locked { path, holder, hint });
    }
    let _ = f.set_len(0).and_then(|()| f.rewind()).and_then(|()| writeln!(f, "{}", std::process::id()));
    // Secrets live here: make the directory and everything in it private again, in case an
    // older version (or a person) left it readable. Not the pods' directories: their
    // volumes have the modes the pods asked for, and hold what the containers wrote.
    // Nor the kubelet API's key: it stays the owner's, whatever group the state is shared with.
    let pods = dir.join(PODS_DIR);
    let pki = kubeletapi::pki_dir(cfg);
    match crate::base::state_files::fix_state_modes(dir, &[&cfg.devices.plugin_dir, &pods, &pki]) {
        Ok(0) => {}
        Ok(n) => log::info!("agent: made {n} file(s) and directories under {} private", dir.display()),
        Err(e) => log::warn!("agent: cannot correct the modes under {}: {e}", dir.display()),
    }
    Ok(f)
}

/// Why the state directory is locked.
#[derive(Clone, Copy)]
enum LockPurpose {
    Run,
    Drain,
}

/// `ferrolet drain`: with no agent running, stops every container recorded in the state
/// directory (each pod's grace period honoured by its shim; app containers first, sidecars
/// once those have exited, as pod termination does) and removes the pods' records, logs,
/// probe results and damaged records set aside. For decommissioning a node, or cleaning up
/// after `make run`.
pub fn drain(cfg: &Config, shim_exe: &Path) -> Result<usize, AgentError> {
    use crate::pods::termination::{compute_kill_actions, terminate_all};
    use crate::pods::view::Snapshot;
    use std::time::SystemTime;
    let cri = cri_if_selected(cfg, &Health::default(), &mut |_, _| true)?;
    let _lock = lock_state_dir(cfg, LockPurpose::Drain)?;
    let SelectedRuntime { runtime, .. } = open_runtime(cfg, shim_exe, None, cri)?;
    let step = |what: &str| {
        let what = what.to_string();
        move |source| AgentError::Drain { what, source }
    };
    let sandboxes = runtime.list_pod_sandboxes().map_err(step("listing the sandboxes"))?;
    let relist = || -> Result<Snapshot, AgentError> {
        let containers = runtime.list_containers().map_err(step("listing the containers"))?;
        Ok(Snapshot::new(runtime.list_pod_sandboxes().map_err(step("listing the sandboxes"))?, containers))
    };
    // Every pod stops as the pod manager stops one (`compute_kill_actions`): app containers
    // first, sidecars once those have exited, with what is left of its grace period. The
    // shims kill at its end; a pod still running past it (and the margin) is said and left
    // to the removal below.
    let mut snap = relist()?;
    let mut stops = terminate_all(&snap, SystemTime::now());
    loop {
        let now = SystemTime::now();
        let mut stopping = false;
        for (uid, t) in stops.iter_mut().filter(|(_, t)| !t.warned) {
            let actions = compute_kill_actions(t, snap.pod(uid), now);
            for k in &actions.stop {
                let container = snap.pod(uid).containers.iter().find(|c| c.id == k.id);
                let pod = container.and_then(|c| c.config.labels.get(crate::node::runtime::labels::POD_NAME));
                let pod = pod.map_or("?", String::as_str);
                log::info!("drain: stopping {} of pod {pod} (grace {:?})", k.name, k.grace);
                runtime.stop_container(&k.id, k.grace).map_err(step(&format!("stopping container {}", k.name)))?;
            }
            t.requested.extend(actions.requested);
            if let Some(names) = actions.exceeded_grace {
                log::warn!("drain: still running past their grace period: {}", names.join(", "));
                t.warned = true;
            }
            stopping |= actions.remove.is_none() && !t.warned;
        }
        if !stopping {
            break;
        }
        std::thread::sleep(DRAIN_RELIST);
        snap = relist()?;
    }
    for s in &sandboxes {
        // Marking it stopped is a write (impossible on a full disk); removing it frees space.
        if let Err(e) = runtime.stop_pod_sandbox(&s.id) {
            log::warn!(
                "drain: stopping sandbox {}: {}; removing it all the same",
                s.id,
                crate::base::errors::Chain(&e)
            );
        }
        runtime.remove_pod_sandbox(&s.id).map_err(step(&format!("removing sandbox {}", s.id)))?;
    }
    // Pod cgroups go too, when ferrolet manages them here.
    if cfg.cgroups.enforcement != Enforcement::Off {
        let settings = cfg.cgroups.settings().ok();
        let driver = settings
            .as_ref()
            .and_then(|s| crate::node::cm::open_driver(&cfg.cgroups.mountinfo, cfg.cgroups.forced_version(), s).ok());
        if let (Some(settings), Some(driver)) = (settings, driver) {
            let records = crate::node::cm::ownership::PodCgroupRecords::new(&cfg.state_dir);
            for s in &sandboxes {
                if let Err(e) = crate::node::cm::remove_pod_cgroup(&*driver, &settings, &records, &s.config.pod_uid) {
                    log::warn!("drain: {}", crate::base::errors::Chain(&e));
                }
            }
        }
    }
    for c in runtime.list_containers().map_err(step("listing the containers"))? {
        runtime.remove_container(&c.id).map_err(step(&format!("removing container {}", c.config.name)))?;
    }
    // The pods' own directories: their volumes (tmpfs unmounted), hosts and termination files.
    crate::pods::dir::sweep(&cfg.state_dir.join(PODS_DIR), |_| false);
    // What is left is state of pods that are gone: results of their probes (read back by
    // the next start otherwise) and damaged records moved aside.
    let mut leftovers = vec![cfg.state_dir.join(PROBE_RESULTS_FILE)];
    if cfg.runtime == RuntimeBackend::Process {
        leftovers.push(process_runtime(cfg, shim_exe)?.quarantine_dir());
    }
    for p in leftovers {
        let removed = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
        match removed {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                log::warn!("drain: cannot remove {}: {e}", p.display())
            }
            _ => {}
        }
    }
    Ok(sandboxes.len())
}

/// A client of `fl-imagegc`, when it runs.
fn image_gc_client(handle: Option<&ManagerHandle<ImageGcCommand>>) -> Option<ImageGcClient> {
    handle.map(|h| ImageGcClient::new(h.sender()))
}

/// `cfg` with `cgroups.driver` decided (`CgroupDriverSetting::resolve`): the CRI runtime's
/// own driver where it reports one, else systemd where it is the init system with its bus
/// up; a runtime on the other driver than the one configured is refused.
fn with_cgroup_driver(cfg: &Config, cri: Option<&CriRuntime>) -> Result<Config, AgentError> {
    use crate::config::CgroupDriverSetting;
    let mut cfg = cfg.clone();
    if cfg.cgroups.enforcement == Enforcement::Off {
        return Ok(cfg);
    }
    let systemd = cfg
        .cgroups
        .driver
        .resolve(crate::node::cm::systemd::available(), cri.and_then(CriRuntime::systemd_cgroups))
        .map_err(|message| AgentError::CgroupDriver { endpoint: cfg.container_runtime_endpoint.clone(), message })?;
    cfg.cgroups.driver = if systemd { CgroupDriverSetting::Systemd } else { CgroupDriverSetting::Cgroupfs };
    Ok(cfg)
}

impl Agent {
    /// Starts every manager: runtime, pod manager, static pod source, then the local API.
    /// `shim_exe` is the ferrolet binary, started as `ferrolet shim` per container.
    pub fn start(cfg: &Config, shim_exe: &Path) -> Result<Agent, AgentError> {
        Agent::start_waiting(cfg, shim_exe, &mut |_, _| true)
    }

    /// `start`, asking `go_on` while it waits for a CRI runtime that is still starting.
    pub fn start_waiting(cfg: &Config, shim_exe: &Path, go_on: &mut StartWait) -> Result<Agent, AgentError> {
        let health = Health::default();
        // The runtime is checked before anything is made, the state directory included.
        let cri = cri_if_selected(cfg, &health, go_on)?;
        let cfg = &with_cgroup_driver(cfg, cri.as_deref())?;
        if let Some(c) = &cri {
            let rotation = LogRotation { max_size: cfg.logs.max_size.0, max_files: cfg.logs.max_files };
            c.start_log_rotation(rotation, &health)
                .map_err(|source| AgentError::Spawn { name: "fl-cri-logs".into(), source })?;
        }
        let lock = lock_state_dir(cfg, LockPurpose::Run)?;
        let cluster = crate::cluster::connect(cfg).map_err(|e| AgentError::Cluster { source: Box::new(e) })?;
        let statuses = StatusCache::default();
        let pressure = crate::node::eviction::view::PressureView::default();
        let spawn_err = |name: &str| {
            let name = name.to_string();
            move |source| AgentError::Spawn { name, source }
        };
        let mut events = EventsPipeline::start(cfg, &health).map_err(spawn_err("fl-events"))?;
        if let Some(c) = &cluster {
            c.start_events(&events.limits, &mut events.broadcaster, events.metrics.clone())
                .map_err(spawn_err("fl-evapi"))?;
        }
        let recorder = events.broadcaster.recorder(&cfg.events.component, &cfg.node_name);
        recorder.event(&Reference::node(&cfg.node_name), NORMAL, "Starting", "Starting ferrolet.");
        // Ownership first: nothing is created, removed or killed before the cgroup root and
        // the plugin directory are known to be this agent's alone.
        let plugin_lock = if cfg.devices.plugin_dir.as_os_str().is_empty() {
            None
        } else {
            match crate::node::devicemanager::registration::claim_dir(&cfg.devices.plugin_dir) {
                Ok(lock) => Some(lock),
                // The registration server will fail on the same directory and say so.
                Err(e @ crate::node::cm::ownership::OwnershipError::CreateLock { .. }) => {
                    log::warn!("devices: {}", crate::base::errors::Chain(&e));
                    None
                }
                Err(source) => return Err(AgentError::Shared { source }),
            }
        };
        let (cm, cgroup_lock) = start_container_manager(cfg, &recorder)?;
        let owned: Vec<LockFile> = plugin_lock.into_iter().chain(cgroup_lock).collect();
        let SelectedRuntime { runtime, cri } = open_runtime(cfg, shim_exe, cm.as_ref().map(|cm| cm.driver()), cri)?;
        let stats = stats_manager(cfg, cm.as_ref(), runtime.clone(), statuses.clone());
        let stats_view = stats.view();
        let eviction_node = {
            let driver = cm.as_ref().map(|c| c.driver());
            let kubepods =
                cm.as_ref().and_then(|_| cfg.cgroups.settings().ok()).map(|s| crate::node::cm::kubepods_path(&s));
            let memory =
                eviction::memory_targets(driver.as_deref(), kubepods.as_deref(), cfg.eviction.memory_notification);
            let info = crate::node::eviction::NodeInfo {
                memory_capacity: u64::try_from(NodeResources::from_proc().memory).ok(),
                allocatable_memory: cm.as_ref().and_then(|c| u64::try_from(c.node_allocatable().memory).ok()),
                dedicated_image_fs: cri.is_some() && dedicated_image_fs(&*runtime, &cfg.state_dir),
                images: cri.is_some(),
            };
            (info, memory)
        };
        let dns = cfg.dns_settings();
        if let Some(d) = &dns {
            check_resolv_conf(d, &recorder, &cfg.node_name);
        }
        // The node's resources, read once: admission, the local API and the apiserver share them.
        let eviction_settings = cfg.eviction_settings();
        let node = node_object(cfg, &eviction_settings.thresholds);
        let pm = PodManager::new(
            PodManagerConfig {
                node_name: cfg.node_name.clone(),
                node_ip: cfg.node_ip.clone(),
                log_root: cfg.pod_logs_dir(),
                pods_root: cfg.state_dir.join(PODS_DIR),
                registry_config: cfg.state_dir.join("config.json"),
                max_dead_per_container: cfg.gc.max_dead_per_container,
                sync_frequency: cfg.sync_frequency.0,
                allowed_unsafe_sysctls: cfg.allowed_unsafe_sysctls.clone(),
                dns,
                // What `/node` shows as allocatable: capacity less the reservations.
                allocatable: crate::pods::fit::NodeAllocatable::from_list(&node.status.allocatable, cfg.max_pods),
            },
            runtime.clone(),
            statuses.clone(),
            recorder.clone(),
            cm,
        );
        let runtime_health = crate::node::status::RuntimeHealth::default();
        let pm = pm.with_runtime_health(runtime_health.clone()).with_pressure(pressure.clone());
        let objects = crate::node::objects::ObjectsView::default();
        let pm = if cluster.is_some() {
            pm.with_source(crate::api::manifest::PodSource::Api).with_objects(objects.clone())
        } else {
            pm
        };
        let pods_channel = crossbeam_channel::unbounded();
        let (pm, images) = if cri.is_some() {
            let settings =
                PullerSettings { max_parallel: cfg.max_parallel_image_pulls, timeout: cfg.image_pull_timeout.0 };
            let (puller, tx) =
                ImagePuller::start(runtime.clone(), settings, Publisher::to(pods_channel.0.clone()), &health)
                    .map_err(spawn_err(crate::node::images::puller::THREAD))?;
            (pm.with_images(tx), Some(puller))
        } else {
            (pm, None)
        };
        let (pm, pod_workers) = if cri.is_some() {
            let workers = Arc::new(PodWorkers::new(runtime.clone(), Publisher::to(pods_channel.0.clone()), &health));
            (pm.with_workers(workers.clone()), Some(workers))
        } else {
            (pm, None)
        };
        let hooks = HookRunner::new(runtime.clone(), Publisher::to(pods_channel.0.clone()), &health);
        let pm = pm.with_hooks(Arc::new(hooks.clone()));
        let prober_channel = crossbeam_channel::unbounded();
        let probe_results = ProbeResults::persistent(cfg.state_dir.join(PROBE_RESULTS_FILE));
        let prober_metrics = Arc::new(ProberMetrics::default());
        let prober_threads = ProberThreads::new(&health);
        let prober = ProberManager::new(
            ProberConfig {
                max_threads: cfg.prober.max_threads,
                agent_start: std::time::Instant::now(),
                threads: prober_threads.clone(),
            },
            runtime.clone(),
            probe_results.clone(),
            prober_metrics.clone(),
            recorder.clone(),
            Publisher::to(pods_channel.0.clone()),
            prober_channel.0.clone(),
        );
        let mut pm = pm.with_prober(prober_channel.0.clone(), probe_results);
        let (devices, device_state) = if cfg.devices.plugin_dir.as_os_str().is_empty() {
            log::info!("devices: device plugins are off (devices.plugin_dir is empty)");
            (None, None)
        } else {
            let channel = crossbeam_channel::unbounded();
            let (dm, shared) = DeviceManager::new(
                cfg.devices.settings(),
                recorder.clone(),
                Publisher::to(pods_channel.0.clone()),
                channel.0.clone(),
                &health,
            );
            // Its endpoint and PreStartContainer threads are joined within half of the
            // time `fl-devices` itself gets, so a stuck child is named, not the manager.
            let dm = dm.with_stop_timeout(cfg.shutdown_timeout.0 / 2);
            pm = pm.with_devices(channel.0.clone(), shared.clone());
            let handle = ManagerHandle::spawn_with_channel("fl-devices", dm, channel, &health)
                .map_err(spawn_err("fl-devices"))?;
            (Some(handle), Some(shared))
        };
        let (image_gc, images_view) = if cri.is_some() {
            let gc = crate::node::imagegc::ImageGc::new(
                cfg.image_gc_settings(),
                runtime.clone(),
                recorder.clone(),
                Arc::new(crate::base::clock::RealClock),
                &cfg.state_dir,
            );
            let view = gc.view();
            let channel = crate::node::imagegc::manager::command_channel();
            let handle = ManagerHandle::spawn_with_channel("fl-imagegc", gc, channel, &health)
                .map_err(spawn_err("fl-imagegc"))?;
            (Some(handle), Some(view))
        } else {
            (None, None)
        };
        // One ask waiting is enough: it is answered by the next collection.
        let stats_channel = crossbeam_channel::bounded(1);
        let wiring = eviction::Wiring {
            node_name: cfg.node_name.clone(),
            node: eviction_node.0,
            memory: eviction_node.1,
            runtime: runtime.clone(),
            statuses: statuses.clone(),
            pods_root: cfg.state_dir.join(PODS_DIR),
            evict: Publisher::to(pods_channel.0.clone()),
            recorder: recorder.clone(),
            pressure: pressure.clone(),
            images: image_gc_client(image_gc.as_ref()),
        };
        let (stats, memcg) = eviction::attach(eviction_settings, stats, stats_channel.0.clone(), wiring, &health)
            .map_err(spawn_err("fl-memcg"))?;
        let stats_thread = ManagerHandle::spawn_with_channel("fl-stats", stats, stats_channel, &health)
            .map_err(spawn_err("fl-stats"))?;
        let prober = ManagerHandle::spawn_with_channel("fl-prober", prober, prober_channel, &health)
            .map_err(spawn_err("fl-prober"))?;
        let pods =
            ManagerHandle::spawn_with_channel("fl-pods", pm, pods_channel, &health).map_err(spawn_err("fl-pods"))?;
        let src =
            FileSource::new(&cfg.manifest_dir, &cfg.node_name, cfg.manifest_check_interval.0, pods.sender(), recorder)
                .with_max_pods(cfg.max_pods);
        let source = ManagerHandle::spawn("fl-podsource", src, &health).map_err(spawn_err("fl-podsource"))?;
        // Read the manifests right away instead of after the first tick.
        let _ = source.sender().send(SourceCommand::Look);
        let watcher =
            DirWatcher::start(&cfg.manifest_dir, source.sender(), &health).map_err(spawn_err("fl-podwatch"))?;
        let runtime_version = match &cri {
            Some(c) => c.version().to_string(),
            None => format!("process://{}", env!("CARGO_PKG_VERSION")),
        };
        let api_state = ApiState {
            statuses: statuses.clone(),
            health: health.clone(),
            events: events.store.clone(),
            event_metrics: events.metrics.clone(),
            prober_metrics: prober_metrics.clone(),
            devices: device_state.clone(),
            node: node.clone(),
            images: images_view.clone(),
            runtime: runtime_health.clone(),
            pressure: pressure.clone(),
            apiserver: cluster.as_ref().map(|c| (c.link.clone(), c.client.clone())),
            certs: cluster.as_ref().map(|c| c.cert_metrics.clone()),
            stats: stats_view.clone(),
        };
        let local_routes = Arc::new(crate::server::routes::Routes::new(api_state.clone(), Default::default()));
        let kubelet_api =
            kubeletapi::start(cfg, cluster.as_ref(), runtime.clone(), local_routes, stats_view.clone(), &health)
                .map_err(|e| AgentError::KubeletApi(Box::new(e)))?;
        // The Node names the port the apiserver calls: the kubelet API's, else the local API's.
        let port = match &kubelet_api {
            Some(k) => i32::from(k.addr.port()),
            None => cfg.api.listen.rsplit_once(':').and_then(|(_, p)| p.parse().ok()).unwrap_or(0),
        };
        let report = crate::cluster::ReportInputs {
            port,
            base: node.clone(),
            devices: device_state.clone(),
            images: images_view.clone(),
            health: health.clone(),
            runtime_version,
            runtime: runtime_health.clone(),
            pressure: pressure.clone(),
        };
        let cluster = match cluster {
            Some(c) => {
                let report = crate::cluster::node_report(cfg, report);
                let serving = kubelet_api
                    .as_ref()
                    .filter(|_| cfg.apiserver.server_tls_bootstrap)
                    .map(kubeletapi::serving_install);
                let threads = c
                    .start(
                        cfg,
                        serving,
                        pods.sender(),
                        objects,
                        statuses.clone(),
                        report,
                        events.metrics.clone(),
                        &health,
                    )
                    .map_err(spawn_err("fl-apisync"))?;
                Some(threads)
            }
            None => None,
        };
        let api = if cfg.api.listen.is_empty() { None } else { Some(ApiServer::start(&cfg.api.listen, api_state)?) };
        log::info!(
            "agent: node {} ({}) running, runtime {}, manifests in {}, state in {}",
            cfg.node_name,
            cfg.node_ip,
            cfg.runtime,
            cfg.manifest_dir.display(),
            cfg.state_dir.display()
        );
        Ok(Agent {
            source: Some(source),
            watcher: Some(watcher),
            pods: Some(pods),
            prober: Some(prober),
            prober_threads,
            devices,
            cri,
            images,
            pod_workers,
            image_gc,
            stats_thread: Some(stats_thread),
            memcg,
            hooks: Some(hooks),
            cluster,
            events: Some(events),
            api,
            kubelet_api,
            cfg: cfg.clone(),
            _lock: lock,
            _owned: owned,
            statuses,
            stats: stats_view,
            health,
        })
    }

    /// The local API's bound address, if it runs.
    pub fn api_addr(&self) -> Option<std::net::SocketAddr> {
        self.api.as_ref().map(|a| a.addr)
    }

    /// kubelet's HTTPS API's bound address, if it runs.
    pub fn kubelet_api_addr(&self) -> Option<std::net::SocketAddr> {
        self.kubelet_api.as_ref().map(|a| a.addr)
    }

    /// How to ask `fl-imagegc` to remove every unused image (`ImageGcClient::delete_unused`,
    /// the eviction manager's imagefs reclaim); `None` when image GC does not run (the
    /// process runtime has no images).
    pub fn image_gc(&self) -> Option<ImageGcClient> {
        image_gc_client(self.image_gc.as_ref())
    }

    /// Applies a reloaded configuration's run-time keys that differ from what runs
    /// (`config::reload::AT_RUN_TIME`; `log_level` is `main`'s, the logger being process-wide):
    /// a new manifest directory (watched anew; the old one's pods stop, the new one's start),
    /// the probe pool's size, the events' aggregation and spam limits. Returns what changed.
    pub fn reload(&mut self, new: &Config) -> Vec<String> {
        let mut changed = Vec::new();
        if new.manifest_dir != self.cfg.manifest_dir {
            if let Some(w) = self.watcher.take() {
                if let Err(e) = w.stop(self.cfg.shutdown_timeout.0) {
                    log::warn!("agent: {e}");
                }
            }
            if let Some(source) = &self.source {
                let _ = source.sender().send(SourceCommand::Dir(new.manifest_dir.clone()));
                match DirWatcher::start(&new.manifest_dir, source.sender(), &self.health) {
                    Ok(w) => self.watcher = Some(w),
                    Err(e) => log::warn!(
                        "agent: cannot watch {}: {e}; manifests are polled only",
                        crate::base::logsafe::path(&new.manifest_dir)
                    ),
                }
            }
            self.cfg.manifest_dir = new.manifest_dir.clone();
            changed.push("manifest_dir".to_string());
        }
        if new.prober.max_threads != self.cfg.prober.max_threads {
            if let Some(p) = &self.prober {
                let _ = p.sender().send(ProberCommand::SetMaxThreads(new.prober.max_threads));
            }
            self.cfg.prober.max_threads = new.prober.max_threads;
            changed.push("prober.max_threads".to_string());
        }
        let limits = new.events.correlator_options();
        if limits != self.cfg.events.correlator_options() {
            if let Some(ev) = &self.events {
                // The caches keep the size they were made with.
                ev.limits.set(limits);
            }
            let (old, new) = (&mut self.cfg.events, &new.events);
            for (key, differs) in [
                ("events.aggregate_max_events", old.aggregate_max_events != new.aggregate_max_events),
                ("events.aggregate_interval", old.aggregate_interval.0 != new.aggregate_interval.0),
                ("events.spam_burst", old.spam_burst != new.spam_burst),
                ("events.spam_refill", old.spam_refill.0 != new.spam_refill.0),
            ] {
                if differs {
                    changed.push(key.to_string());
                }
            }
            old.aggregate_max_events = new.aggregate_max_events;
            old.aggregate_interval = new.aggregate_interval;
            old.spam_burst = new.spam_burst;
            old.spam_refill = new.spam_refill;
        }
        changed
    }

    /// Orderly shutdown: intake first (the manifest watcher and the pod source), then the
    /// pod manager and its workers (each ends at its next runtime call), the image pulls
    /// (cancelled), the prober and its threads, the device manager, image GC, the stats
    /// thread, the events still queued (delivered), and the API last, so `/healthz` answers until the end. All of it within
    /// one deadline, `shutdown_timeout` from now: each step waits for what time is left, and
    /// once it is spent the rest are signalled and not waited for. Containers keep running;
    /// the next start adopts them. Returns every thread that did not stop in time; threads
    /// still inside a probe or a host name lookup after a short wait are logged instead (they
    /// cannot be interrupted, and end by themselves or with the process).
    pub fn stop(mut self) -> Vec<String> {
        let started = Instant::now();
        let in_call = crate::node::prober::pool::IN_CALL_STOP_TIMEOUT;
        let late = |r: Result<(), StopTimeout>| r.err().map(|e| e.to_string()).into_iter().collect::<Vec<_>>();
        let named = |v: Vec<StopTimeout>| v.into_iter().map(|e| e.to_string()).collect::<Vec<_>>();
        let (watcher, source, pods, pod_workers, cluster) =
            (self.watcher.take(), self.source.take(), self.pods.take(), self.pod_workers.take(), self.cluster.take());
        let (images, hooks, prober, prober_threads) =
            (self.images.take(), self.hooks.take(), self.prober.take(), self.prober_threads);
        let (devices, image_gc, cri, events, api) =
            (self.devices.take(), self.image_gc.take(), self.cri.take(), self.events.take(), self.api.take());
        let (stats, memcg) = (self.stats_thread.take(), self.memcg.take());
        let kubelet_api = self.kubelet_api.take();
        let steps: Vec<StopStep> = vec![
            Box::new(move |t| watcher.map_or_else(Vec::new, |w| late(w.stop(t)))),
            Box::new(move |t| source.map_or_else(Vec::new, |s| late(s.stop(t)))),
            // Before the pod manager: nothing is evicted or reclaimed while it stops.
            Box::new(move |t| stats.map_or_else(Vec::new, |s| late(s.stop(t)))),
            Box::new(move |t| memcg.map_or_else(Vec::new, |m| late(m.stop(t)))),
            Box::new(move |t| pods.map_or_else(Vec::new, |p| late(p.stop(t)))),
            // Works waiting are dropped; one in flight ends at its next runtime call (what it
            // made is the runtime's, adopted or replaced by the next start).
            Box::new(move |t| pod_workers.map_or_else(Vec::new, |w| named(w.stop(t)))),
            Box::new(move |t| cluster.map_or_else(Vec::new, |c| named(c.stop(t)))),
            // Pulls in flight are cancelled (the runtime stops them); nobody waits for them.
            Box::new(move |t| images.map_or_else(Vec::new, |i| named(i.stop(t)))),
            Box::new(move |t| {
                // A sleep ends at once; an exec or HTTP hook in flight ends by its own timeout
                // (a preStop's stop is then the shim's, at the deadline it was given).
                for e in hooks.map(|h| h.stop(in_call.min(t))).unwrap_or_default() {
                    log::warn!("agent: left to end by itself (in a lifecycle hook): {e}");
                }
                Vec::new()
            }),
            Box::new(move |t| prober.map_or_else(Vec::new, |p| late(p.stop(t)))),
            Box::new(move |t| {
                // The prober's end has signalled them. A thread still inside a probe or a host
                // name lookup (neither can be interrupted) ends by itself, or with the process.
                let left = prober_threads.stop(t);
                for e in left.in_calls {
                    log::warn!("agent: left to end by itself (in a probe or a host name lookup): {e}");
                }
                named(left.stuck)
            }),
            Box::new(move |t| devices.map_or_else(Vec::new, |d| late(d.stop(t)))),
            Box::new(move |t| image_gc.map_or_else(Vec::new, |g| late(g.stop(t)))),
            // Container stops the pod manager asked for finish (each is bounded by its grace
            // period); the containers themselves keep running otherwise.
            Box::new(move |t| cri.map_or_else(Vec::new, |c| named(c.stop(t)))),
            Box::new(move |t| {
                events.map_or_else(Vec::new, |e| {
                    let stuck = e.broadcaster.shutdown(t);
                    e.store.sync();
                    stuck
                })
            }),
            Box::new(move |t| api.map_or_else(Vec::new, |a| named(a.stop(t)))),
            Box::new(move |t| kubelet_api.map_or_else(Vec::new, |a| named(a.stop(t)))),
        ];
        let stuck = stop_in_order(steps, self.cfg.shutdown_timeout.0, || started.elapsed());
        log::info!("agent: stopped; containers keep running and are adopted by the next start");
        stuck
    }
}

/// One step of `Agent::stop`: it stops its part, waiting at most the time it is given, and
/// returns the threads that did not end in that time.
type StopStep = Box<dyn FnOnce(Duration) -> Vec<String>>;

/// Runs `steps` in order under one deadline, `budget` after the start (`elapsed` is the time
/// since then): each step gets the time left, nothing once it is spent (it then signals its
/// threads and names those not already ended). Returns every name the steps gave.
fn stop_in_order(steps: Vec<StopStep>, budget: Duration, elapsed: impl Fn() -> Duration) -> Vec<String> {
    let mut stuck = Vec::new();
    for step in steps {
        stuck.extend(step(budget.saturating_sub(elapsed())));
    }
    stuck
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};
    use std::rc::Rc;
    use std::time::Duration;

    /// Runs `stop_in_order` over steps that each take `took` seconds of a fake clock and
    /// name themselves stuck when they needed more than they were given; returns the time
    /// each was given and the names reported.
    fn run_steps(budget: u64, took: &[u64]) -> (Vec<u64>, Vec<String>) {
        let now = Rc::new(Cell::new(0));
        let given = Rc::new(RefCell::new(Vec::new()));
        let steps: Vec<super::StopStep> = took
            .iter()
            .enumerate()
            .map(|(i, &took)| {
                let (now, given) = (now.clone(), given.clone());
                Box::new(move |t: Duration| {
                    given.borrow_mut().push(t.as_secs());
                    now.set(now.get() + took.min(t.as_secs()));
                    if took > t.as_secs() {
                        vec![format!("fl-step{i}")]
                    } else {
                        Vec::new()
                    }
                }) as super::StopStep
            })
            .collect();
        let stuck = super::stop_in_order(steps, Duration::from_secs(budget), || Duration::from_secs(now.get()));
        let given = given.borrow().clone();
        (given, stuck)
    }

    #[test]
    fn a_stop_shares_one_deadline_among_its_steps_and_names_what_was_still_running() {
        // (budget, what each step takes, the time each is given, what is named stuck)
        type Case = (u64, &'static [u64], &'static [u64], &'static [&'static str]);
        let cases: [Case; 4] = [
            // Every step quick: each is given what is left of the whole budget.
            (10, &[0, 1, 2], &[10, 10, 9], &[]),
            // A stuck step spends the rest: the later ones are given nothing, and say so.
            (10, &[3, 60, 1, 0], &[10, 7, 0, 0], &["fl-step1", "fl-step2"]),
            // Steps that each fit in the budget alone, but not all together.
            (10, &[6, 6, 6], &[10, 4, 0], &["fl-step1", "fl-step2"]),
            (10, &[], &[], &[]),
        ];
        for (budget, took, want_given, want_stuck) in cases {
            let (given, stuck) = run_steps(budget, took);
            assert_eq!(given, want_given, "time given, steps taking {took:?}");
            assert_eq!(stuck, want_stuck, "stuck, steps taking {took:?}");
            assert!(took.iter().zip(&given).map(|(t, g)| t.min(g)).sum::<u64>() <= budget);
        }
    }

    #[test]
    fn a_held_state_lock_names_the_lock_file() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = crate::config::Config { state_dir: dir.path().into(), ..Default::default() };
        let _held = super::lock_state_dir(&cfg, super::LockPurpose::Run).unwrap();
        let e = super::lock_state_dir(&cfg, super::LockPurpose::Drain).unwrap_err().to_string();
        let want = format!(
            "cannot lock {}: another ferrolet (pid {})",
            dir.path().join("ferrolet.lock").display(),
            std::process::id()
        );
        assert!(e.starts_with(&want), "{e}");
        assert!(e.ends_with("drain works only while no agent runs"), "{e}");
    }
}
