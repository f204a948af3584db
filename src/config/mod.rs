//! The TOML configuration. Every field has a default (so `ferrolet run` works with no
//! file at all); unknown keys and bad values are errors naming the file, the key and what
//! is allowed. `etc/ferrolet.toml` documents each field.

use crate::api::Quantity;
use crate::base::timefmt::parse_duration;
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod bounds;
mod choice;
mod cluster;
mod eviction;
mod host;
mod imagegc;
pub mod reload;
mod reserved;
mod server;

pub use bounds::*;
pub use choice::{CgroupDriverSetting, CgroupVersionSetting, Enforcement, ParseChoiceError, RuntimeBackend};
pub use cluster::ApiserverConfig;
pub use eviction::EvictionConfig;
pub use host::{check_state_dir, HostError};
pub use reserved::{
    parse_resource_list, qos_reserved_memory, reserved_resources, ReservationError, ReservationProblem,
};
pub use server::{AuthenticationConfig, AuthorizationConfig, AuthorizationMode, ServerConfig};

/// A configuration problem, with the file and key it concerns.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read (or is not a regular file, or is too large).
    #[error("cannot read config file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: crate::base::inputfile::InputFileError,
    },
    /// The machine cannot give `run` what a setting asks for (see [`Config::check_host`]).
    #[error("{file}: {key}")]
    Host {
        /// The file, or `defaults`.
        file: String,
        /// The dotted key.
        key: String,
        /// What is wrong on this machine.
        #[source]
        source: HostError,
    },
    /// A key is unknown or a value is malformed or out of range.
    #[error("{file}: {key}: {message}")]
    Invalid {
        /// The file, or `flags`/`defaults`.
        file: String,
        /// The dotted key, e.g. `logs.max_size`.
        key: String,
        /// What is wrong and what is allowed.
        message: String,
    },
}

/// A duration written Go-style (`10s`, `1m30s`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s).map(Dur).map_err(serde::de::Error::custom)
    }
}

/// A byte size written as a Kubernetes quantity (`10Mi`, `1G`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let q = Quantity::deserialize(d)?;
        if q.is_negative() {
            return Err(serde::de::Error::custom(format!("invalid size {:?}: must not be negative", q.to_string())));
        }
        Ok(Bytes(q.value() as u64))
    }
}

/// The whole configuration.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// This node's name; default: the host name.
    pub node_name: String,
    /// This node's address reported as hostIP/podIP; default: first non-loopback IPv4.
    pub node_ip: String,
    /// Where ferrolet keeps container state and logs.
    pub state_dir: PathBuf,
    /// A group (name or gid) given read access to the state directory and logs; empty:
    /// owner only.
    pub state_group: String,
    /// What the log shows, as `RUST_LOG` says it (`info`, `debug`, `info,ferrolet::node::prober=debug`);
    /// empty: `RUST_LOG`, else `info`. Set here, it wins over `RUST_LOG`; SIGHUP applies it.
    pub log_level: String,
    /// Directory of static pod manifests.
    pub manifest_dir: PathBuf,
    /// Container runtime backend.
    pub runtime: RuntimeBackend,
    /// The CRI runtime's socket, `unix:///absolute/path` (`runtime = "cri"`; kubelet's name).
    pub container_runtime_endpoint: String,
    /// Deadline of each CRI call (kubelet's `runtimeRequestTimeout`); calls that wait by
    /// design (a stop's grace period, an exec's timeout, a pull) add their wait to it.
    pub runtime_request_timeout: Dur,
    /// How long a CRI runtime that is still starting (no socket yet, "not initialized
    /// yet") is waited for at the agent's start; zero: not at all.
    pub runtime_start_wait: Dur,
    /// The sandbox (pause) image the CRI runtime uses; empty: the one the runtime reports
    /// (containerd's `sandbox_image`).
    pub pod_sandbox_image: String,
    /// Sysctls beyond kubelet's safe set that pods may set (kubelet's
    /// `allowedUnsafeSysctls`): names, or prefixes ending in `*` (`net.core.*`).
    pub allowed_unsafe_sysctls: Vec<String>,
    /// The node's resolver configuration pods with `dnsPolicy: Default` get (kubelet's
    /// `resolvConf`; CRI runtime); empty: none (such pods resolve through 127.0.0.1).
    pub resolv_conf: PathBuf,
    /// Nameservers of a cluster DNS `ClusterFirst` pods get (kubelet's `clusterDNS`; CRI
    /// runtime); empty: none, and such pods get the node's resolver, as kubelet's.
    pub cluster_dns: Vec<String>,
    /// The cluster's DNS domain (kubelet's `clusterDomain`): search domains of `ClusterFirst`
    /// pods and the end of a pod's `subdomain` domain; empty: none.
    pub cluster_domain: String,
    /// Deadline of each image pull (kubelet has none).
    pub image_pull_timeout: Dur,
    /// Image pulls at once, each on a thread of its own; 1 serializes them (kubelet's
    /// `serializeImagePulls`, on by default, and `maxParallelImagePulls`).
    pub max_parallel_image_pulls: usize,
    /// Image GC starts when the image filesystem is this full, in percent (kubelet's
    /// `imageGCHighThresholdPercent`); 100 with no maximum age and no byte threshold turns
    /// the periodic GC off (the eviction threshold still reclaims).
    pub image_gc_high_threshold_percent: u8,
    /// ... and removes images until it is this full (`imageGCLowThresholdPercent`).
    pub image_gc_low_threshold_percent: u8,
    /// Images seen for less than this are never removed (`imageMinimumGCAge`; 0 is 2m).
    pub image_minimum_gc_age: Dur,
    /// Images unused for longer than this are removed whatever the disk, once the agent has
    /// run that long (`imageMaximumGCAge`); 0s: off.
    pub image_maximum_gc_age: Dur,
    /// Image GC also starts when fewer bytes than this are free (small disks); unset: off.
    pub image_gc_high_threshold_bytes_free: Option<Bytes>,
    /// ... and removes images until this many bytes are free.
    pub image_gc_low_threshold_bytes_free: Option<Bytes>,
    /// Images image GC never removes (names like `docker.io/library/busybox:1.36`, or ids),
    /// besides the sandbox image and images the runtime pins.
    pub image_gc_keep: Vec<String>,
    /// How often an image GC pass runs (kubelet's 5m).
    pub image_gc_period: Dur,
    /// Deprecated: `[eviction] hard."imagefs.available"` (kubelet's `evictionHard`
    /// `imagefs.available`), which it sets when given; setting both is an error.
    pub eviction_hard_imagefs_available: Option<String>,
    /// How often the manifest directory is checked for changes.
    pub manifest_check_interval: Dur,
    /// How often the pod manager relists containers and syncs every pod.
    pub sync_frequency: Dur,
    /// How long an orderly shutdown may take before threads are abandoned.
    pub shutdown_timeout: Dur,
    /// Most pods on this node (kubelet's `maxPods`); static pods past it are refused.
    pub max_pods: usize,
    /// Local read-only API.
    pub api: ApiConfig,
    /// Container log files.
    pub logs: LogsConfig,
    /// Exited-container garbage collection.
    pub gc: GcConfig,
    /// Event recording.
    pub events: EventsConfig,
    /// Pod cgroups and node allocatable.
    pub cgroups: CgroupsConfig,
    /// Liveness, readiness and startup probes.
    pub prober: ProberSettings,
    /// Device plugins.
    pub devices: DevicesConfig,
    /// Cluster mode: the kube-apiserver.
    pub apiserver: ApiserverConfig,
    /// kubelet's authenticated HTTPS API (`kubectl logs`, `exec`, `port-forward`).
    pub server: ServerConfig,
    /// Node-pressure eviction.
    pub eviction: EvictionConfig,
}

/// `[devices]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DevicesConfig {
    /// Where kubelet.sock, plugin sockets and the checkpoint live; empty disables device plugins.
    pub plugin_dir: PathBuf,
    /// Dialling a plugin and asking its options.
    pub dial_timeout: Dur,
    /// Allocate and GetPreferredAllocation calls.
    pub allocate_timeout: Dur,
    /// How long a resource whose plugin stopped stays in capacity (allocatable 0).
    pub endpoint_grace_period: Dur,
    /// How long a pod waits for its device plugin to register before admission fails.
    pub admission_wait: Dur,
    /// Reconnect attempts after a plugin's ListAndWatch stream broke (0: none, as kubelet).
    pub reconnect_attempts: u32,
    /// Most devices one plugin may list for its resource.
    pub max_devices_per_resource: usize,
}

impl Default for DevicesConfig {
    fn default() -> Self {
        DevicesConfig {
            plugin_dir: PathBuf::from("/var/lib/kubelet/device-plugins"),
            dial_timeout: Dur(Duration::from_secs(10)),
            allocate_timeout: Dur(Duration::from_secs(5)),
            endpoint_grace_period: Dur(Duration::from_secs(300)),
            admission_wait: Dur(Duration::from_secs(120)),
            reconnect_attempts: 5,
            max_devices_per_resource: 1024,
        }
    }
}

impl DevicesConfig {
    /// The device manager's settings.
    pub fn settings(&self) -> crate::node::devicemanager::DeviceSettings {
        crate::node::devicemanager::DeviceSettings {
            plugin_dir: self.plugin_dir.clone(),
            dial_timeout: self.dial_timeout.0,
            allocate_timeout: self.allocate_timeout.0,
            endpoint_grace_period: self.endpoint_grace_period.0,
            admission_wait: self.admission_wait.0,
            reconnect_attempts: self.reconnect_attempts,
            max_devices_per_resource: self.max_devices_per_resource,
        }
    }
}

/// `[prober]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProberSettings {
    /// Probe threads for probes that answer promptly (1 to 64); the pool grows to this on
    /// demand and shrinks when idle, plus up to 32 more while probes run slow.
    pub max_threads: usize,
}

impl Default for ProberSettings {
    fn default() -> Self {
        ProberSettings { max_threads: 8 }
    }
}

/// `[cgroups]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CgroupsConfig {
    /// `auto` (enforce when the cgroup tree is writable), `required` (exit when it is not), `off`.
    pub enforcement: Enforcement,
    /// `auto`, `1` or `2`.
    pub version: CgroupVersionSetting,
    /// `auto`, `cgroupfs` or `systemd` (kubelet's `cgroupDriver`).
    pub driver: CgroupDriverSetting,
    /// Parent of `kubepods` in the cgroup hierarchy.
    pub root: String,
    /// Where the cgroup mounts are read from.
    pub mountinfo: PathBuf,
    /// Reserved for the OS: `cpu`, `memory`, `pid`.
    pub system_reserved: BTreeMap<String, Quantity>,
    /// Reserved for the agent and runtime: `cpu`, `memory`, `pid`.
    pub kube_reserved: BTreeMap<String, Quantity>,
    /// `memory = "N%"`: share of pods' memory requests withheld from lower QoS classes.
    pub qos_reserved: BTreeMap<String, String>,
    /// Process limit per pod; 0 or less is unlimited.
    pub pod_pids_limit: i64,
    /// Turn CPU limits into CFS quotas.
    pub cpu_cfs_quota: bool,
    /// cgroup v2 `cpu.weight` conversion for container cgroups: `quadratic` or `linear`.
    pub container_cpu_weight: crate::node::cm::WeightFormula,
    /// kubelet's `singleProcessOOMKill`: false sets v2 `memory.oom.group` on container
    /// cgroups (an OOM kills the whole container).
    pub single_process_oom_kill: bool,
    /// kubelet's `memorySwap.swapBehavior`: `NoSwap` or `LimitedSwap` (v2).
    pub swap_behavior: crate::node::cm::SwapBehavior,
}

impl Default for CgroupsConfig {
    fn default() -> Self {
        CgroupsConfig {
            enforcement: Enforcement::Auto,
            version: CgroupVersionSetting::Auto,
            driver: CgroupDriverSetting::Auto,
            root: "/".into(),
            mountinfo: PathBuf::from("/proc/self/mountinfo"),
            system_reserved: BTreeMap::new(),
            kube_reserved: BTreeMap::new(),
            qos_reserved: BTreeMap::new(),
            pod_pids_limit: -1,
            cpu_cfs_quota: true,
            container_cpu_weight: crate::node::cm::WeightFormula::Quadratic,
            single_process_oom_kill: false,
            swap_behavior: crate::node::cm::SwapBehavior::NoSwap,
        }
    }
}

impl CgroupsConfig {
    /// The cgroup layout settings these options describe.
    pub fn settings(&self) -> Result<crate::node::cm::CmSettings, ReservationError> {
        Ok(crate::node::cm::CmSettings {
            root: self.root.clone(),
            system_reserved: reserved_resources("cgroups.system_reserved", &self.system_reserved)?,
            kube_reserved: reserved_resources("cgroups.kube_reserved", &self.kube_reserved)?,
            qos_reserved_memory: qos_reserved_memory("cgroups.qos_reserved", &self.qos_reserved)?,
            pod_pids_limit: self.pod_pids_limit,
            cpu_cfs_quota: self.cpu_cfs_quota,
            container_weight: self.container_cpu_weight,
            single_process_oom_kill: self.single_process_oom_kill,
            swap_behavior: self.swap_behavior,
            systemd: self.systemd_driver(),
        })
    }

    /// Whether pod cgroups are systemd's slices: `systemd`, or `auto` where systemd is the
    /// init system with its bus up. The agent first makes `auto` follow a CRI runtime's own
    /// driver (`CgroupDriverSetting::resolve`).
    pub fn systemd_driver(&self) -> bool {
        self.driver.resolve(crate::node::cm::systemd::available(), None).unwrap_or(false)
    }

    /// The forced cgroup version, if any.
    pub fn forced_version(&self) -> Option<crate::node::cm::cgroupfs::CgroupVersion> {
        self.version.forced()
    }
}

/// `[api]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// Address of the read-only HTTP API; empty disables it.
    pub listen: String,
}

/// `[logs]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogsConfig {
    /// Rotate a container log when it grows past this size.
    pub max_size: Bytes,
    /// Log files kept per container, the live one included (at least 2).
    pub max_files: u32,
    /// Root of the pod log directories (`<ns>_<name>_<uid>/<container>/<restart>.log`,
    /// kubelet's `podLogsDir`); empty: `<state_dir>/logs` for the process runtime,
    /// `/var/log/pods` for CRI.
    pub pod_logs_dir: PathBuf,
}

/// `[gc]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GcConfig {
    /// Exited instances kept per container (for `lastState` and logs); older ones are removed.
    pub max_dead_per_container: u32,
}

/// `[events]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EventsConfig {
    /// `source.component` of every event.
    pub component: String,
    /// Events the broadcaster queues before dropping (and counting) new ones.
    pub queue_size: usize,
    /// Events the local store keeps (and persists in the state directory).
    pub store_max_events: usize,
    /// Entries in each correlator cache (aggregation, de-duplication, spam filter).
    pub lru_cache_size: usize,
    /// Distinct messages of similar events that make one aggregated event.
    pub aggregate_max_events: usize,
    /// Window in which similar events are aggregated.
    pub aggregate_interval: Dur,
    /// Events per object and type let through at once.
    pub spam_burst: u32,
    /// After the burst, one more event per object and type per this period.
    pub spam_refill: Dur,
}

impl Default for EventsConfig {
    fn default() -> Self {
        EventsConfig {
            component: "ferrolet".into(),
            queue_size: 1000,
            store_max_events: 1000,
            lru_cache_size: 4096,
            aggregate_max_events: 10,
            aggregate_interval: Dur(Duration::from_secs(600)),
            spam_burst: 25,
            spam_refill: Dur(Duration::from_secs(300)),
        }
    }
}

impl EventsConfig {
    /// The correlator limits these settings describe.
    pub fn correlator_options(&self) -> crate::node::events::correlator::CorrelatorOptions {
        crate::node::events::correlator::CorrelatorOptions {
            lru_cache_size: self.lru_cache_size,
            max_events: self.aggregate_max_events,
            max_interval: self.aggregate_interval.0,
            burst: self.spam_burst,
            qps: 1.0 / self.spam_refill.0.as_secs_f64(),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            node_name: String::new(),
            node_ip: String::new(),
            state_dir: PathBuf::from("/var/lib/ferrolet"),
            state_group: String::new(),
            log_level: String::new(),
            manifest_dir: PathBuf::from("/etc/ferrolet/manifests"),
            runtime: RuntimeBackend::Process,
            container_runtime_endpoint: "unix:///run/containerd/containerd.sock".into(),
            runtime_request_timeout: Dur(Duration::from_secs(120)),
            runtime_start_wait: Dur(Duration::from_secs(60)),
            pod_sandbox_image: String::new(),
            allowed_unsafe_sysctls: Vec::new(),
            resolv_conf: PathBuf::from(crate::node::dns::DEFAULT_RESOLV_CONF),
            cluster_dns: Vec::new(),
            cluster_domain: String::new(),
            image_pull_timeout: Dur(Duration::from_secs(600)),
            max_parallel_image_pulls: 1,
            image_gc_high_threshold_percent: 85,
            image_gc_low_threshold_percent: 80,
            image_minimum_gc_age: Dur(Duration::from_secs(120)),
            image_maximum_gc_age: Dur(Duration::ZERO),
            image_gc_high_threshold_bytes_free: None,
            image_gc_low_threshold_bytes_free: None,
            image_gc_keep: Vec::new(),
            image_gc_period: Dur(Duration::from_secs(300)),
            eviction_hard_imagefs_available: None,
            manifest_check_interval: Dur(Duration::from_secs(1)),
            sync_frequency: Dur(Duration::from_secs(1)),
            shutdown_timeout: Dur(Duration::from_secs(10)),
            max_pods: DEFAULT_MAX_PODS,
            api: ApiConfig::default(),
            logs: LogsConfig::default(),
            gc: GcConfig::default(),
            events: EventsConfig::default(),
            cgroups: CgroupsConfig::default(),
            prober: ProberSettings::default(),
            devices: DevicesConfig::default(),
            apiserver: ApiserverConfig::default(),
            server: ServerConfig::default(),
            eviction: EvictionConfig::default(),
        }
    }
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig { listen: "127.0.0.1:10255".into() }
    }
}

impl Default for LogsConfig {
    fn default() -> Self {
        LogsConfig { max_size: Bytes(10 << 20), max_files: 5, pod_logs_dir: PathBuf::new() }
    }
}

impl Default for GcConfig {
    fn default() -> Self {
        GcConfig { max_dead_per_container: 1 }
    }
}

/// Command-line values that win over the file.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `--node-name`.
    pub node_name: Option<String>,
    /// `--manifest-dir`.
    pub manifest_dir: Option<PathBuf>,
    /// `--state-dir`.
    pub state_dir: Option<PathBuf>,
    /// `--listen`.
    pub listen: Option<String>,
    /// `--runtime`.
    pub runtime: Option<String>,
    /// `--container-runtime-endpoint`.
    pub container_runtime_endpoint: Option<String>,
    /// `--device-plugin-dir`.
    pub device_plugin_dir: Option<PathBuf>,
    /// `--image-gc-high-threshold` (kubelet's flag).
    pub image_gc_high_threshold: Option<String>,
    /// `--image-gc-low-threshold` (kubelet's flag).
    pub image_gc_low_threshold: Option<String>,
    /// `--minimum-image-ttl-duration` (kubelet's flag).
    pub minimum_image_ttl_duration: Option<String>,
    /// `--kubeconfig` (kubelet's flag).
    pub kubeconfig: Option<PathBuf>,
}

impl Config {
    /// Parses configuration text; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Config, ConfigError> {
        let de = toml::Deserializer::new(text);
        let cfg: Config = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            let inner = e.into_inner();
            // toml's own message carries a source snippet; the first line without it is what we want.
            let message = inner.message().to_string();
            let line = inner
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1)
                .map(|l| format!(" (line {l})"))
                .unwrap_or_default();
            let key = if key == "." { "(top level)".to_string() } else { key };
            ConfigError::Invalid { file: file.into(), key, message: format!("{message}{line}") }
        })?;
        cfg.check(file)?;
        cfg.check_upper_bounds(file)?;
        Ok(cfg)
    }

    /// Reads the file, or returns the defaults when `path` is `None`.
    pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
        match path {
            Some(p) => Ok(Config::load_file(p, overrides)?.0),
            None => Config::default().with_overrides("defaults".into(), overrides),
        }
    }

    /// Reads the file once: the configuration, and the file as TOML (what a reload compares).
    pub fn load_file(path: &Path, overrides: &Overrides) -> Result<(Config, toml::Table), ConfigError> {
        let file = path.display().to_string();
        let text = crate::base::inputfile::read_to_string(path, MAX_CONFIG_BYTES)
            .map_err(|source| ConfigError::Read { path: path.into(), source })?;
        let cfg = Config::parse(&file, &text)?;
        let table = text.parse().map_err(|e: toml::de::Error| ConfigError::Invalid {
            file: file.clone(),
            key: "(top level)".into(),
            message: e.message().to_string(),
        })?;
        Ok((cfg.with_overrides(file, overrides)?, table))
    }

    /// The command line's flags over this configuration (read from `file`).
    fn with_overrides(self, file: String, overrides: &Overrides) -> Result<Config, ConfigError> {
        let mut cfg = self;
        if let Some(v) = &overrides.node_name {
            cfg.node_name = v.clone();
        }
        if let Some(v) = &overrides.manifest_dir {
            cfg.manifest_dir = v.clone();
        }
        if let Some(v) = &overrides.state_dir {
            cfg.state_dir = v.clone();
        }
        if let Some(v) = &overrides.listen {
            cfg.api.listen = v.clone();
        }
        if let Some(v) = &overrides.runtime {
            cfg.runtime = RuntimeBackend::parse(v).map_err(|e| ConfigError::Invalid {
                file: "command line".into(),
                key: "runtime".into(),
                message: e.to_string(),
            })?;
        }
        if let Some(v) = &overrides.container_runtime_endpoint {
            cfg.container_runtime_endpoint = v.clone();
        }
        if let Some(v) = &overrides.device_plugin_dir {
            cfg.devices.plugin_dir = v.clone();
        }
        let flag_err =
            |key: &str, message: String| ConfigError::Invalid { file: "command line".into(), key: key.into(), message };
        let percent = |flag: &str, v: &str| {
            v.trim()
                .parse::<u8>()
                .map_err(|_| flag_err(flag, format!("invalid value {v:?}: must be a whole percentage from 0 to 100")))
        };
        if let Some(v) = &overrides.image_gc_high_threshold {
            cfg.image_gc_high_threshold_percent = percent("--image-gc-high-threshold", v)?;
        }
        if let Some(v) = &overrides.image_gc_low_threshold {
            cfg.image_gc_low_threshold_percent = percent("--image-gc-low-threshold", v)?;
        }
        if let Some(v) = &overrides.minimum_image_ttl_duration {
            cfg.image_minimum_gc_age = Dur(parse_duration(v)
                .map_err(|e| flag_err("--minimum-image-ttl-duration", format!("invalid value {v:?}: {e}")))?);
        }
        if let Some(v) = &overrides.kubeconfig {
            cfg.apiserver.kubeconfig = v.clone();
        }
        let any_flag = overrides.node_name.is_some()
            || overrides.kubeconfig.is_some()
            || overrides.image_gc_high_threshold.is_some()
            || overrides.image_gc_low_threshold.is_some()
            || overrides.minimum_image_ttl_duration.is_some()
            || overrides.manifest_dir.is_some()
            || overrides.state_dir.is_some()
            || overrides.listen.is_some()
            || overrides.runtime.is_some()
            || overrides.container_runtime_endpoint.is_some()
            || overrides.device_plugin_dir.is_some();
        let source = if any_flag { "command line" } else { &file };
        cfg.check(source)?;
        cfg.check_upper_bounds(source)?;
        // Shims and log paths outlive the agent's working directory: keep paths absolute.
        if let Ok(cwd) = std::env::current_dir() {
            cfg.state_dir = cwd.join(&cfg.state_dir);
            cfg.manifest_dir = cwd.join(&cfg.manifest_dir);
            if !cfg.devices.plugin_dir.as_os_str().is_empty() {
                cfg.devices.plugin_dir = cwd.join(&cfg.devices.plugin_dir);
            }
            for path in
                [&mut cfg.apiserver.kubeconfig, &mut cfg.apiserver.bootstrap_kubeconfig, &mut cfg.apiserver.cert_dir]
            {
                if !path.as_os_str().is_empty() {
                    *path = cwd.join(&*path);
                }
            }
            cfg.apiserver.kept_key = cwd.join(&cfg.apiserver.kept_key);
        }
        if cfg.node_name.is_empty() {
            cfg.node_name = crate::base::net::hostname().to_lowercase();
        }
        if cfg.node_ip.is_empty() {
            cfg.node_ip = crate::base::net::primary_ipv4().unwrap_or_else(|| "127.0.0.1".into());
        }
        Ok(cfg)
    }

    /// Pods' names and resolvers: `Some` for the CRI runtime, which gives each pod its own
    /// (the process runtime shares the node's).
    pub fn dns_settings(&self) -> Option<crate::node::dns::DnsSettings> {
        (self.runtime == RuntimeBackend::Cri).then(|| crate::node::dns::DnsSettings {
            resolv_conf: (!self.resolv_conf.as_os_str().is_empty()).then(|| self.resolv_conf.clone()),
            cluster_dns: self.cluster_dns.clone(),
            cluster_domain: self.cluster_domain.clone(),
            node_hosts: PathBuf::from(crate::node::dns::NODE_HOSTS),
        })
    }

    /// Where pod log directories go: `logs.pod_logs_dir`, else the runtime's default.
    pub fn pod_logs_dir(&self) -> PathBuf {
        match (self.logs.pod_logs_dir.as_os_str().is_empty(), self.runtime) {
            (false, _) => self.logs.pod_logs_dir.clone(),
            (true, RuntimeBackend::Process) => self.state_dir.join("logs"),
            (true, RuntimeBackend::Cri) => PathBuf::from("/var/log/pods"),
        }
    }

    fn check(&self, file: &str) -> Result<(), ConfigError> {
        let bad =
            |key: &str, message: String| Err(ConfigError::Invalid { file: file.into(), key: key.into(), message });
        if !self.node_name.is_empty() && !crate::api::field::is_dns1123_subdomain(&self.node_name) {
            return bad("node_name", format!("invalid value {:?}: must be a lowercase RFC 1123 subdomain (lower case letters, digits, '-' and '.')", self.node_name));
        }
        if let Err(e) = reload::check_log_level(&self.log_level) {
            return bad("log_level", e);
        }
        if !self.node_ip.is_empty() && self.node_ip.parse::<std::net::IpAddr>().is_err() {
            return bad("node_ip", format!("invalid value {:?}: must be an IP address", self.node_ip));
        }
        if !self.api.listen.is_empty() && self.api.listen.parse::<SocketAddr>().is_err() {
            return bad(
                "api.listen",
                format!(
                    "invalid value {:?}: must be an address and port like \"127.0.0.1:10255\" (empty disables the API)",
                    self.api.listen
                ),
            );
        }
        if self.logs.max_files < 2 {
            return bad("logs.max_files", format!("invalid value {}: must be at least 2", self.logs.max_files));
        }
        if self.logs.max_size.0 < 4096 {
            return bad("logs.max_size", format!("invalid value {}: must be at least 4Ki", self.logs.max_size.0));
        }
        if crate::node::runtime::cri::client::socket_path(&self.container_runtime_endpoint).is_none() {
            return bad(
                "container_runtime_endpoint",
                format!(
                    "invalid value {:?}: must be a Unix socket like \"unix:///run/containerd/containerd.sock\"",
                    self.container_runtime_endpoint
                ),
            );
        }
        if self.allowed_unsafe_sysctls.len() > 64 {
            return bad(
                "allowed_unsafe_sysctls",
                format!("{} entries: must be at most 64", self.allowed_unsafe_sysctls.len()),
            );
        }
        for s in &self.allowed_unsafe_sysctls {
            let name = s.strip_suffix('*').unwrap_or(s);
            let ok = !name.is_empty()
                && name.len() <= 253
                && name
                    .split(['.', '/'])
                    .all(|p| p.is_empty() || p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
            if !ok {
                return bad(
                    "allowed_unsafe_sysctls",
                    format!("invalid value {s:?}: must be a sysctl name like \"kernel.msgmax\", or a prefix ending in * like \"net.core.*\""),
                );
            }
        }
        if !self.resolv_conf.as_os_str().is_empty() && !self.resolv_conf.is_absolute() {
            return bad(
                "resolv_conf",
                format!(
                    "invalid value {:?}: must be an absolute path (empty: no resolver configuration)",
                    self.resolv_conf.display()
                ),
            );
        }
        let most = crate::node::dns::MAX_NAMESERVERS;
        if self.cluster_dns.len() > most {
            return bad(
                "cluster_dns",
                format!("{} entries: must be at most {most} (the resolver reads {most})", self.cluster_dns.len()),
            );
        }
        if let Some(ip) = self.cluster_dns.iter().find(|ip| ip.parse::<std::net::IpAddr>().is_err()) {
            return bad("cluster_dns", format!("invalid value {ip:?}: must be an IP address like \"10.96.0.10\""));
        }
        if !self.cluster_domain.is_empty() && !crate::api::field::is_dns1123_subdomain(&self.cluster_domain) {
            return bad(
                "cluster_domain",
                format!("invalid value {:?}: must be a lowercase RFC 1123 subdomain like \"cluster.local\", without a trailing dot (empty: none)", self.cluster_domain),
            );
        }
        if !self.logs.pod_logs_dir.as_os_str().is_empty() && !self.logs.pod_logs_dir.is_absolute() {
            return bad(
                "logs.pod_logs_dir",
                format!("invalid value {:?}: must be an absolute path", self.logs.pod_logs_dir.display()),
            );
        }
        for (key, d, min) in [
            ("runtime_request_timeout", self.runtime_request_timeout.0, Duration::from_secs(1)),
            ("image_pull_timeout", self.image_pull_timeout.0, Duration::from_secs(1)),
            ("manifest_check_interval", self.manifest_check_interval.0, Duration::from_millis(100)),
            ("sync_frequency", self.sync_frequency.0, Duration::from_millis(100)),
            ("shutdown_timeout", self.shutdown_timeout.0, Duration::from_millis(100)),
        ] {
            if d < min {
                return bad(key, format!("invalid value {d:?}: must be at least {min:?}"));
            }
        }
        let pulls = self.max_parallel_image_pulls;
        if !(1..=MAX_PARALLEL_IMAGE_PULLS).contains(&pulls) {
            return bad(
                "max_parallel_image_pulls",
                format!(
                    "invalid value {pulls}: must be between 1 (pulls one at a time) and {MAX_PARALLEL_IMAGE_PULLS}"
                ),
            );
        }
        let threads = self.prober.max_threads;
        let most = crate::node::prober::pool::MAX_THREADS;
        if !(1..=most).contains(&threads) {
            return bad("prober.max_threads", format!("invalid value {threads}: must be between 1 and {most}"));
        }
        if let Err((key, message)) = imagegc::check(self) {
            return bad(key, message);
        }
        if let Err((key, message)) = eviction::check(self) {
            return bad(&key, message);
        }
        if let Err((key, message)) = self.apiserver.check() {
            return bad(key, message);
        }
        if let Err((key, message)) = self.server.check(!self.apiserver.kubeconfig.as_os_str().is_empty()) {
            return bad(key, message);
        }
        if self.apiserver.server_tls_bootstrap && self.server.enabled == Some(false) {
            return bad(
                "apiserver.server_tls_bootstrap",
                "asks for the kubelet API's serving certificate, but server.enabled is false".into(),
            );
        }
        if self.apiserver.server_tls_bootstrap && !self.server.tls_cert_file.as_os_str().is_empty() {
            return bad(
                "apiserver.server_tls_bootstrap",
                "the serving certificate comes from the cluster, so server.tls_cert_file must be empty".into(),
            );
        }
        let cg = &self.cgroups;
        if !cg.root.starts_with('/') {
            return bad(
                "cgroups.root",
                format!("invalid value {:?}: must be an absolute cgroup path like \"/\"", cg.root),
            );
        }
        if let Err(e) = cg.settings() {
            return Err(e.in_file(file));
        }
        let ev = &self.events;
        if ev.component.is_empty() {
            return bad("events.component", "must not be empty".into());
        }
        for (key, v) in [
            ("events.queue_size", ev.queue_size),
            ("events.store_max_events", ev.store_max_events),
            ("events.lru_cache_size", ev.lru_cache_size),
            ("events.aggregate_max_events", ev.aggregate_max_events),
            ("events.spam_burst", ev.spam_burst as usize),
        ] {
            if v == 0 {
                return bad(key, "invalid value 0: must be at least 1".into());
            }
        }
        for (key, d) in
            [("events.aggregate_interval", ev.aggregate_interval.0), ("events.spam_refill", ev.spam_refill.0)]
        {
            if d.is_zero() {
                return bad(key, "invalid value 0: must be a positive duration".into());
            }
        }
        let dv = &self.devices;
        for (key, d) in [
            ("devices.dial_timeout", dv.dial_timeout.0),
            ("devices.allocate_timeout", dv.allocate_timeout.0),
            ("devices.endpoint_grace_period", dv.endpoint_grace_period.0),
        ] {
            if d.is_zero() {
                return bad(key, "invalid value 0: must be a positive duration".into());
            }
        }
        // The device manager's thread must be able to stop while an Allocate call hangs.
        if dv.allocate_timeout.0 >= self.shutdown_timeout.0 {
            return bad(
                "devices.allocate_timeout",
                format!(
                    "invalid value {:?}: must be shorter than shutdown_timeout ({:?})",
                    dv.allocate_timeout.0, self.shutdown_timeout.0
                ),
            );
        }
        if dv.max_devices_per_resource == 0 {
            return bad("devices.max_devices_per_resource", "invalid value 0: must be at least 1".into());
        }
        for (key, p) in [("state_dir", &self.state_dir), ("manifest_dir", &self.manifest_dir)] {
            if p.as_os_str().is_empty() {
                return bad(key, "must not be empty".into());
            }
        }
        if let Err(e) = self.state_access() {
            return bad("state_group", e.message());
        }
        Ok(())
    }
}

impl Config {
    /// Who may read the state directory: `state_group` resolved to its gid.
    pub fn state_access(&self) -> Result<crate::base::state_files::StateAccess, StateGroupError> {
        if self.state_group.is_empty() {
            return Ok(crate::base::state_files::StateAccess::default());
        }
        let gid = crate::base::state_files::group_id(&self.state_group)
            .map_err(|source| StateGroupError::LookUpGroup { group: self.state_group.clone(), source })?;
        Ok(crate::base::state_files::StateAccess { gid: Some(gid) })
    }
}

/// `state_group` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateGroupError {
    /// The group is not in the group database (nor a number).
    #[error("invalid value {group:?} (a group name or numeric gid; empty: owner only)")]
    LookUpGroup {
        /// The configured value.
        group: String,
        /// Why the lookup failed.
        #[source]
        source: std::io::Error,
    },
}

impl StateGroupError {
    /// The message of `state_group` errors, cause and hint together:
    /// `invalid value "x": no such group (a group name or numeric gid; empty: owner only)`.
    pub fn message(&self) -> String {
        match self {
            StateGroupError::LookUpGroup { group, source } => {
                format!("invalid value {group:?}: {source} (a group name or numeric gid; empty: owner only)")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        Config::parse("f.toml", text).unwrap_err().to_string()
    }

    #[test]
    fn a_serving_certificate_from_the_cluster_excludes_a_configured_one_and_a_disabled_server() {
        let base = "[apiserver]\nkubeconfig = \"/k\"\nserver_tls_bootstrap = true\n";
        assert!(Config::parse("f.toml", base).is_ok());
        let e = err(&format!("{base}[server]\ntls_cert_file = \"/c\"\ntls_private_key_file = \"/k\"\n"));
        assert!(
            e.contains("apiserver.server_tls_bootstrap") && e.contains("server.tls_cert_file must be empty"),
            "{e}"
        );
        let e = err(&format!("{base}[server]\nenabled = false\n"));
        assert!(e.contains("server.enabled is false"), "{e}");
    }

    #[test]
    fn empty_file_gives_defaults() {
        let c = Config::parse("f.toml", "").unwrap();
        assert_eq!(c.api.listen, "127.0.0.1:10255");
        assert_eq!(c.logs.max_size, Bytes(10 << 20));
        assert_eq!(c.sync_frequency, Dur(Duration::from_secs(1)));
    }

    #[test]
    fn the_documented_sample_config_is_the_defaults() {
        let c = Config::parse("etc/ferrolet.toml", include_str!("../../etc/ferrolet.toml")).unwrap();
        let d = Config::default();
        assert_eq!(format!("{c:?}"), format!("{d:?}"));
    }

    /// docs/configuration.md names every key of the sample file (which is the defaults), by
    /// its bare name in backticks, each section under a `## `[section]`` heading, so a new
    /// key cannot go undocumented.
    #[test]
    fn the_configuration_reference_names_every_key() {
        let sample: toml::Table = include_str!("../../etc/ferrolet.toml").parse().unwrap();
        let doc = include_str!("../../docs/configuration.md");
        let mut missing = Vec::new();
        for (key, value) in &sample {
            match value.as_table() {
                Some(section) => {
                    if !doc.contains(&format!("## `[{key}]`")) {
                        missing.push(format!("[{key}]"));
                    }
                    missing.extend(
                        section.keys().filter(|k| !doc.contains(&format!("`{k}`"))).map(|k| format!("{key}.{k}")),
                    );
                }
                None if !doc.contains(&format!("`{key}`")) => missing.push(key.clone()),
                None => {}
            }
        }
        assert!(missing.is_empty(), "docs/configuration.md does not name {missing:?}");
    }

    #[test]
    fn image_gc_keys_are_checked_as_kubelet_checks_them() {
        assert_eq!(
            err("image_gc_high_threshold_percent = 101\n"),
            "f.toml: image_gc_high_threshold_percent: invalid value 101: must be between 0 and 100, inclusive"
        );
        assert_eq!(
            err("image_gc_low_threshold_percent = 85\n"),
            "f.toml: image_gc_low_threshold_percent: invalid value 85: must be less than image_gc_high_threshold_percent (85)"
        );
        assert_eq!(
            err("image_maximum_gc_age = \"1m\"\n"),
            "f.toml: image_maximum_gc_age: invalid value 60s: must be greater than image_minimum_gc_age (120s), or 0s (off)"
        );
        assert_eq!(
            err("image_minimum_gc_age = \"0s\"\nimage_maximum_gc_age = \"1m\"\n"),
            "f.toml: image_maximum_gc_age: invalid value 60s: must be greater than image_minimum_gc_age (120s), or 0s (off)",
            "0 is the 2m default"
        );
        assert_eq!(
            err("image_gc_high_threshold_bytes_free = \"1Gi\"\n"),
            "f.toml: image_gc_low_threshold_bytes_free: must be set with image_gc_high_threshold_bytes_free"
        );
        assert_eq!(
            err("image_gc_high_threshold_bytes_free = \"2Gi\"\nimage_gc_low_threshold_bytes_free = \"1Gi\"\n"),
            "f.toml: image_gc_low_threshold_bytes_free: invalid value 1073741824: must be more than image_gc_high_threshold_bytes_free (2147483648): GC frees until that much is free"
        );
        assert_eq!(
            err("eviction_hard_imagefs_available = \"15 percent\"\n"),
            "f.toml: eviction_hard_imagefs_available: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        );
        let c = Config::parse(
            "f.toml",
            "image_minimum_gc_age = \"0s\"\nimage_gc_high_threshold_bytes_free = \"1Gi\"\nimage_gc_low_threshold_bytes_free = \"2Gi\"\neviction_hard_imagefs_available = \"512Mi\"\n",
        )
        .unwrap();
        let s = c.image_gc_settings();
        assert_eq!(s.policy.min_age, Duration::from_secs(120), "kubelet turns 0 into 2m");
        assert_eq!((s.policy.high_bytes_free, s.policy.low_bytes_free), (Some(1 << 30), Some(2 << 30)));
    }

    #[test]
    fn kubelets_image_gc_flags_win_over_the_file() {
        let o = Overrides {
            image_gc_high_threshold: Some("90".into()),
            image_gc_low_threshold: Some("70".into()),
            minimum_image_ttl_duration: Some("10m".into()),
            ..Default::default()
        };
        let c = Config::load(None, &o).unwrap();
        assert_eq!((c.image_gc_high_threshold_percent, c.image_gc_low_threshold_percent), (90, 70));
        assert_eq!(c.image_minimum_gc_age.0, Duration::from_secs(600));
        let o = Overrides { image_gc_high_threshold: Some("90%".into()), ..Default::default() };
        assert_eq!(
            Config::load(None, &o).unwrap_err().to_string(),
            "command line: --image-gc-high-threshold: invalid value \"90%\": must be a whole percentage from 0 to 100"
        );
    }

    #[test]
    fn values_parse() {
        let c = Config::parse(
            "f.toml",
            "state_dir = \"/s\"\nshutdown_timeout = \"1m30s\"\n[logs]\nmax_size = \"1Mi\"\nmax_files = 3\n",
        )
        .unwrap();
        assert_eq!(c.state_dir, PathBuf::from("/s"));
        assert_eq!(c.shutdown_timeout.0, Duration::from_secs(90));
        assert_eq!(c.logs.max_size, Bytes(1 << 20));
    }

    #[test]
    fn unknown_keys_are_named_with_what_is_allowed() {
        let e = err("nodename = \"x\"\n");
        assert!(e.starts_with("f.toml: nodename: unknown field `nodename`, expected one of"), "{e}");
        assert!(e.contains("`node_name`"), "{e}");
        let e = err("[logs]\nmax_sise = \"1Mi\"\n");
        assert!(e.starts_with("f.toml: logs.max_sise: unknown field `max_sise`"), "{e}");
        assert!(e.ends_with("(line 2)"), "{e}");
    }

    #[test]
    fn choices_are_enums_refused_with_what_is_allowed() {
        let c = Config::parse("f.toml", "[cgroups]\nenforcement = \"off\"\nversion = \"1\"\n").unwrap();
        assert_eq!(c.cgroups.enforcement, Enforcement::Off);
        assert_eq!(c.cgroups.forced_version(), Some(crate::node::cm::cgroupfs::CgroupVersion::V1));
        assert_eq!(c.runtime, RuntimeBackend::Process);
        assert_eq!(
            err("[cgroups]\nversion = \"3\"\n"),
            "f.toml: cgroups.version: unsupported value \"3\": supported values: auto, 1, 2 (line 2)"
        );
        assert_eq!(
            err("runtime = \"docker\"\n"),
            "f.toml: runtime: unsupported value \"docker\": supported values: process, cri (line 1)"
        );
        let flags = Overrides { runtime: Some("docker".into()), ..Default::default() };
        assert_eq!(
            Config::load(None, &flags).unwrap_err().to_string(),
            "command line: runtime: unsupported value \"docker\": supported values: process, cri"
        );
    }

    #[test]
    fn the_cri_runtime_is_chosen_with_kubelets_names_and_its_endpoint_checked() {
        let c = Config::parse("f.toml", "runtime = \"cri\"\ncontainer_runtime_endpoint = \"unix:///run/k3s.sock\"\n")
            .unwrap();
        assert_eq!((c.runtime, c.container_runtime_endpoint.as_str()), (RuntimeBackend::Cri, "unix:///run/k3s.sock"));
        assert_eq!(c.pod_logs_dir(), PathBuf::from("/var/log/pods"));
        assert_eq!(Config::default().pod_logs_dir(), PathBuf::from("/var/lib/ferrolet/logs"));
        let c = Config::parse("f.toml", "[logs]\npod_logs_dir = \"/data/pods\"\n").unwrap();
        assert_eq!(c.pod_logs_dir(), PathBuf::from("/data/pods"));
        assert_eq!(
            err("container_runtime_endpoint = \"tcp://1.2.3.4:5\"\n"),
            "f.toml: container_runtime_endpoint: invalid value \"tcp://1.2.3.4:5\": must be a Unix socket like \"unix:///run/containerd/containerd.sock\""
        );
        assert!(err("[logs]\npod_logs_dir = \"pods\"\n").contains("must be an absolute path"));
        assert!(err("runtime_request_timeout = \"100ms\"\n").contains("must be at least 1s"));
        assert_eq!(
            err("image_pull_timeout = \"500ms\"\n"),
            "f.toml: image_pull_timeout: invalid value 500ms: must be at least 1s"
        );
        assert_eq!(
            err("image_pull_timeout = \"24h1s\"\n"),
            "f.toml: image_pull_timeout: invalid value 86401s: must be at most 86400s"
        );
        assert_eq!(
            err("max_parallel_image_pulls = 0\n"),
            "f.toml: max_parallel_image_pulls: invalid value 0: must be between 1 (pulls one at a time) and 16"
        );
        assert!(err("max_parallel_image_pulls = 17\n").contains("must be between 1 (pulls one at a time) and 16"));
        let c = Config::parse("f.toml", "max_parallel_image_pulls = 3\nimage_pull_timeout = \"30m\"\n").unwrap();
        assert_eq!((c.max_parallel_image_pulls, c.image_pull_timeout.0), (3, Duration::from_secs(1800)));
        let flags = Overrides {
            runtime: Some("cri".into()),
            container_runtime_endpoint: Some("unix:///tmp/c.sock".into()),
            ..Default::default()
        };
        let c = Config::load(None, &flags).unwrap();
        assert_eq!((c.runtime, c.container_runtime_endpoint.as_str()), (RuntimeBackend::Cri, "unix:///tmp/c.sock"));
    }

    #[test]
    fn pod_dns_settings_are_kubelets_and_only_the_cri_runtime_uses_them() {
        assert_eq!(Config::default().dns_settings(), None, "the process runtime shares the node's");
        let c = Config::parse("f.toml", "runtime = \"cri\"\n").unwrap();
        assert_eq!(c.dns_settings(), Some(crate::node::dns::DnsSettings::default()));
        let c = Config::parse(
            "f.toml",
            "runtime = \"cri\"\nresolv_conf = \"\"\ncluster_dns = [\"10.96.0.10\"]\ncluster_domain = \"cluster.local\"\n",
        )
        .unwrap();
        let d = c.dns_settings().unwrap();
        assert_eq!(
            (d.resolv_conf, d.cluster_dns, d.cluster_domain.as_str()),
            (None, vec!["10.96.0.10".to_string()], "cluster.local")
        );
        assert_eq!(
            err("resolv_conf = \"resolv.conf\"\n"),
            "f.toml: resolv_conf: invalid value \"resolv.conf\": must be an absolute path (empty: no resolver configuration)"
        );
        assert_eq!(
            err("cluster_dns = [\"dns.local\"]\n"),
            "f.toml: cluster_dns: invalid value \"dns.local\": must be an IP address like \"10.96.0.10\""
        );
        assert!(err("cluster_dns = [\"1.1.1.1\", \"1.1.1.2\", \"1.1.1.3\", \"1.1.1.4\"]\n")
            .contains("4 entries: must be at most 3"));
        assert!(err("cluster_domain = \"cluster.local.\"\n").contains("without a trailing dot"));
    }

    #[test]
    fn an_unknown_state_group_says_what_is_allowed() {
        let cfg = Config { state_group: "no-such-group-fl".into(), ..Default::default() };
        let e = cfg.state_access().unwrap_err();
        let hint = "(a group name or numeric gid; empty: owner only)";
        assert_eq!(e.message(), format!("invalid value \"no-such-group-fl\": no such group {hint}"));
        assert_eq!(
            crate::base::errors::Chain(&e).to_string(),
            format!("invalid value \"no-such-group-fl\" {hint}: no such group")
        );
        let e = err("state_group = \"no-such-group-fl\"\n");
        assert_eq!(e, format!("f.toml: state_group: invalid value \"no-such-group-fl\": no such group {hint}"));
    }
}
