//! Cluster mode's wiring: the kubeconfig read at start (a missing or wrong one stops the
//! start), the link shared by the apiserver's threads, the events watcher `fl-evapi`, and
//! the two threads `fl-apiwatch` (pods bound here, `apiserver::watch`) and `fl-apisync`
//! (everything written, `apiserver::sync`). What the node reports is gathered here from what
//! the agent's managers publish. Without a kubeconfig none of it runs.

pub mod apiserver;
pub mod certs;
use crate::api::{Node, NodeSystemInfo, Quantity};
use crate::base::manager::{Health, ManagerHandle, Publisher, StopTimeout, Worker, WorkerSet};
use crate::cluster::apiserver::link::Link;
use crate::cluster::apiserver::node::NodeFacts;
use crate::cluster::apiserver::objects::{Keep, ObjectsCommand, ObjectsManager};
use crate::cluster::apiserver::podstore::PodStore;
use crate::cluster::apiserver::spool::Bounds;
use crate::cluster::apiserver::sync::{ApiSync, NodeReport};
use crate::cluster::apiserver::watch::{ApiPods, PodWatch, PodsView, SOURCE};
use crate::cluster::apiserver::{kubeconfig, ApiClient};
use crate::cluster::certs::manager::{CertManager, ClientPart, Install, Setup};
use crate::config::Config;
use crate::node::events::broadcaster::Broadcaster;
use crate::node::events::correlator::{EventCorrelator, EventLimits};
use crate::node::events::sink::{self, RetryPolicy};
use crate::node::events::EventMetrics;
use crate::node::objects::ObjectsView;
use crate::node::status::StatusCache;
use crate::pods::PodsCommand;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Where the kept ConfigMaps, Secrets and tokens are, under the state directory.
const KEPT_DIR: &str = "objects";

impl From<ApiPods> for PodsCommand {
    fn from(p: ApiPods) -> Self {
        PodsCommand::Update { source: SOURCE, pods: p.0 }
    }
}

/// Why cluster mode cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The kubeconfig cannot be used.
    #[error(transparent)]
    Kubeconfig(#[from] kubeconfig::KubeconfigError),
    /// Its credentials cannot be used.
    #[error("{}", path.display())]
    Client {
        /// The kubeconfig.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: Box<crate::cluster::apiserver::ApiError>,
    },
}

/// The connection to the apiserver, before its threads run.
pub struct Cluster {
    /// The client every thread shares.
    pub client: Arc<ApiClient>,
    /// Reachability and the spool.
    pub link: Arc<Link>,
    /// The kubeconfig's CA bundle (PEM), the cluster's CA: the kubelet API's client CA
    /// unless `server.authentication.client_ca_file` says otherwise.
    pub ca: Option<Vec<u8>>,
    /// The client certificate's part of `fl-certs`, when it is managed.
    client_cert: Option<ClientPart>,
    /// What `fl-certs` manages, for `/metrics`.
    pub cert_metrics: Arc<certs::CertMetrics>,
    view: PodsView,
}

/// The apiserver client's limits from `[apiserver]`.
fn client_settings(c: &crate::config::ApiserverConfig) -> crate::cluster::apiserver::ClientSettings {
    crate::cluster::apiserver::ClientSettings { timeout: c.request_timeout.0, qps: c.qps, burst: c.burst }
}

/// Reads the configured kubeconfig; `None` without one (static pods only). Nothing is
/// asked of the apiserver yet: one that cannot be reached is not a start-up error. With
/// `bootstrap_kubeconfig`, a kubeconfig that is missing, unreadable or whose certificate
/// expired is not one either: the client starts without credentials and `fl-certs` asks
/// for a certificate with the bootstrap token.
pub fn connect(cfg: &Config) -> Result<Option<Cluster>, ClusterError> {
    let a = &cfg.apiserver;
    let path = &a.kubeconfig;
    if path.as_os_str().is_empty() {
        return Ok(None);
    }
    let settings = client_settings(a);
    let bootstrap = (!a.bootstrap_kubeconfig.as_os_str().is_empty()).then(|| a.bootstrap_kubeconfig.clone());
    let client_err = |p: &std::path::Path| {
        let p = p.to_path_buf();
        move |e| ClusterError::Client { path: p, source: Box::new(e) }
    };
    let loaded = kubeconfig::load(path);
    let (conn, kept_path) = match (loaded, &bootstrap) {
        (Ok(conn), _) => (conn, path.clone()),
        (Err(e), Some(b)) => {
            if std::fs::symlink_metadata(path).is_ok() {
                log::warn!("apiserver: {e}; joining with the bootstrap kubeconfig {}", b.display());
            }
            (kubeconfig::load(b)?, b.clone())
        }
        (Err(e), None) => return Err(e.into()),
    };
    let from_bootstrap = kept_path != *path;
    // The client certificate is managed here when TLS bootstrap may be needed or it is to
    // be renewed; a kubeconfig with a token that loads is used as it is (kubelet ignores the
    // bootstrap kubeconfig then too).
    let cert_auth = matches!(conn.auth, kubeconfig::Auth::ClientCert { .. }) && !from_bootstrap;
    let managed = from_bootstrap || (cert_auth && (bootstrap.is_some() || a.rotate_certificates));
    if !managed {
        let client = ApiClient::new(&conn, settings).map_err(client_err(path))?;
        return Ok(Some(Cluster::new(cfg, &conn, client, None)));
    }
    // The pair in use: the store's (renewed here) before the kubeconfig's own.
    let store = certs::store::CertStore::new(&a.cert_dir(&cfg.state_dir), certs::Kind::Client.prefix());
    let current = match store.load() {
        Ok(Some(p)) => Ok(Some(p)),
        Ok(None) => match &conn.auth {
            kubeconfig::Auth::ClientCert { cert, key } if cert_auth => {
                certs::store::Pair::parse(cert, key).map(Some).map_err(|e| format!("{}: {e}", path.display()))
            }
            _ => Ok(None),
        },
        Err(e) => Err(e.to_string()),
    };
    let template = certs::Template::client(&cfg.node_name);
    let start =
        certs::start(&current, &template, a.rotate_certificates, SystemTime::now(), crate::base::random::random_f64());
    let current = current.ok().flatten();
    let client = match (&start, &current) {
        (certs::Start::Use(_), Some(p)) => {
            let auth = kubeconfig::Auth::ClientCert { cert: p.cert_pem.clone(), key: p.key_pem.clone() };
            let with_pair = kubeconfig::Connection { auth, ..conn.clone() };
            ApiClient::new(&with_pair, settings).map_err(client_err(&store.current_path()))?
        }
        (certs::Start::Request { why }, _) if bootstrap.is_some() => {
            ApiClient::without_credentials(&conn, settings, &format!("TLS bootstrap: {why}"))
        }
        // Nothing better to use: requests fail, and `fl-certs` says why.
        _ => ApiClient::new(&conn, settings).map_err(client_err(path))?,
    };
    let part = ClientPart {
        start,
        current,
        bootstrap,
        kubeconfig: path.clone(),
        write_kubeconfig: from_bootstrap,
        cluster: kubeconfig::Connection { auth: kubeconfig::Auth::Anonymous, ..conn.clone() },
    };
    Ok(Some(Cluster::new(cfg, &conn, client, Some(part))))
}

impl Cluster {
    fn new(cfg: &Config, conn: &kubeconfig::Connection, client: ApiClient, client_cert: Option<ClientPart>) -> Cluster {
        log::info!(
            "apiserver: cluster mode: node {} of {} ({})",
            cfg.node_name,
            conn.server,
            cfg.apiserver.kubeconfig.display()
        );
        let link = Arc::new(Link::new(&conn.server, Bounds::default()));
        Cluster {
            client: Arc::new(client),
            link,
            ca: conn.ca.clone(),
            client_cert,
            cert_metrics: Arc::default(),
            view: PodsView::default(),
        }
    }
}

/// Cluster mode's threads.
pub struct ClusterThreads {
    certs: Option<Worker>,
    watch: Worker,
    sync: ManagerHandle<()>,
    objects: ManagerHandle<ObjectsCommand>,
    watchers: Arc<WorkerSet>,
}

impl Cluster {
    /// `fl-evapi`: the correlator's events into the spool, in kubelet's aggregation.
    pub fn start_events(
        &self,
        limits: &EventLimits,
        broadcaster: &mut Broadcaster,
        metrics: Arc<EventMetrics>,
    ) -> std::io::Result<()> {
        let mut sink = crate::cluster::apiserver::events::SpoolSink::new(self.link.clone());
        let mut correlator = EventCorrelator::following(limits, Arc::new(crate::base::clock::RealClock));
        broadcaster.start_watcher("fl-evapi", move |e| {
            // The spool never fails: delivery and its retries are `fl-apisync`'s.
            sink::record_to_sink(&mut sink, &mut correlator, e, RetryPolicy::default(), &metrics, &mut |_| true, 0.0);
        })
    }

    /// Starts `fl-certs` (when a certificate is managed: the client one, or the serving one
    /// `serving` puts in use), `fl-apiwatch`, `fl-apiobjects` (writing `objects`) and
    /// `fl-apisync`.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        mut self,
        cfg: &Config,
        serving: Option<Install>,
        pods: crossbeam_channel::Sender<PodsCommand>,
        objects: ObjectsView,
        statuses: StatusCache,
        report: Box<dyn FnMut() -> NodeReport + Send>,
        metrics: Arc<EventMetrics>,
        health: &Health,
    ) -> std::io::Result<ClusterThreads> {
        let a = &cfg.apiserver;
        let serving = serving.map(|install| {
            (certs::Template::serving(&cfg.node_name, &crate::base::net::hostname(), &cfg.node_ip), install)
        });
        let client_cert = self.client_cert.take();
        let certs = if client_cert.is_some() || serving.is_some() {
            let setup = Setup {
                node: cfg.node_name.clone(),
                dir: a.cert_dir(&cfg.state_dir),
                rotate: a.rotate_certificates,
                settings: client_settings(a),
                client: client_cert,
                serving,
            };
            let manager = CertManager::new(setup, self.client.clone(), self.cert_metrics.clone());
            Some(Worker::spawn("fl-certs", health, move |stop| manager.run(stop))?)
        } else {
            None
        };
        let sync = ApiSync::new(
            self.client.clone(),
            self.link.clone(),
            &cfg.node_name,
            report,
            statuses,
            self.view.clone(),
            metrics,
        )
        .with_event_limits(cfg.apiserver.event_qps, cfg.apiserver.event_burst);
        let channel = crossbeam_channel::bounded(1);
        self.link.set_wake(channel.0.clone());
        // The first pass (the Node's registration) at once, not after the first tick.
        let _ = channel.0.try_send(());
        let sync = ManagerHandle::spawn_with_channel("fl-apisync", sync, channel, health)?;
        let keep = match Keep::open(&cfg.state_dir.join(KEPT_DIR), &cfg.apiserver.kept_key) {
            Ok(k) => Some(k),
            Err(e) => {
                log::warn!(
                    "apiserver: ConfigMaps, Secrets and tokens are not kept for offline restarts: {}",
                    crate::base::errors::Chain(&e)
                );
                None
            }
        };
        let channel = crossbeam_channel::unbounded();
        let manager = ObjectsManager::new(
            self.client.clone(),
            self.link.clone(),
            objects,
            Publisher::to(pods.clone()),
            keep,
            channel.0.clone(),
            health,
        );
        let watchers = manager.watchers();
        let objects = ManagerHandle::spawn_with_channel("fl-apiobjects", manager, channel, health)?;
        // The pod set goes to the pod manager and to `fl-apiobjects`, which reads what it references.
        let to_pods: Publisher<ApiPods> = Publisher::to(pods);
        let to_objects = objects.sender();
        let publish = Publisher::new(move |p: ApiPods| {
            let _ = to_objects.send(ObjectsCommand::Pods(p.0.clone()));
            to_pods.publish(p);
        });
        let watch = PodWatch {
            client: self.client.clone(),
            link: self.link.clone(),
            node: cfg.node_name.clone(),
            store: PodStore::new(&cfg.state_dir),
            publish,
            view: self.view.clone(),
        };
        let watch = Worker::spawn("fl-apiwatch", health, move |stop| watch.run(stop))?;
        Ok(ClusterThreads { certs, watch, sync, objects, watchers })
    }
}

impl ClusterThreads {
    /// Stops both within `timeout`. `fl-apiwatch` waits in a watch read that cannot be
    /// interrupted (it ends within the watch's timeout, and sends nothing once stopped):
    /// after 500 ms it is left to end by itself, or with the process. `fl-apisync` finishes
    /// its request in flight (bounded by `request_timeout`) in the time left.
    pub fn stop(self, timeout: Duration) -> Vec<StopTimeout> {
        let deadline = std::time::Instant::now() + timeout;
        let in_call = crate::node::prober::pool::IN_CALL_STOP_TIMEOUT.min(timeout);
        if let Err(e) = self.watch.stop(in_call) {
            log::info!("apiserver: the pod watch is left to end by itself ({e})");
        }
        if let Some(Err(e)) = self.certs.map(|c| c.stop(in_call)) {
            log::info!("certificates: left to end by itself ({e})");
        }
        for late in self.watchers.stop(in_call) {
            log::info!("apiserver: {late}: left to end by itself");
        }
        let left = || deadline.saturating_duration_since(std::time::Instant::now());
        let mut late: Vec<StopTimeout> = self.objects.stop(left()).err().into_iter().collect();
        late.extend(self.sync.stop(left()).err());
        late
    }
}

/// What the node's report is made from.
pub struct ReportInputs {
    /// The agent's Node (`/node`'s base: name, cpu and memory).
    pub base: Node,
    /// Device plugins, when on.
    pub devices: Option<crate::node::devicemanager::Devices>,
    /// Images (CRI runtime).
    pub images: Option<crate::node::imagegc::ImagesView>,
    /// Manager liveness.
    pub health: Health,
    /// `containerd://1.6.20`, `process://0.1.0`.
    pub runtime_version: String,
    /// Whether the runtime answers.
    pub runtime: crate::node::status::RuntimeHealth,
    /// The node's pressure conditions (the eviction manager's).
    pub pressure: crate::node::eviction::view::PressureView,
    /// The port the apiserver calls (`daemonEndpoints.kubeletEndpoint.Port`).
    pub port: i32,
}

/// The closure `fl-apisync` calls for the node's facts and conditions.
pub fn node_report(cfg: &Config, inputs: ReportInputs) -> Box<dyn FnMut() -> NodeReport + Send> {
    let started = SystemTime::now();
    let mut ready = (true, started);
    let mut facts = NodeFacts {
        name: cfg.node_name.clone(),
        ip: cfg.node_ip.clone(),
        hostname: crate::base::net::hostname(),
        arch: crate::cluster::apiserver::node::goarch().into(),
        instance_type: cfg.apiserver.instance_type.clone(),
        labels: cfg.apiserver.node_labels.clone(),
        taints: cfg.apiserver.taints(),
        node_info: node_info(&inputs.runtime_version),
        port: inputs.port,
        ..Default::default()
    };
    Box::new(move || {
        let mut capacity = inputs.base.status.capacity.clone();
        let mut allocatable = inputs.base.status.allocatable.clone();
        let mut checks = Vec::new();
        if let Some(d) = &inputs.devices {
            for r in d.resources() {
                capacity.insert(r.name.clone(), Quantity::from_value(r.capacity as i64, false));
                allocatable.insert(r.name, Quantity::from_value(r.allocatable as i64, false));
            }
            checks.push(crate::node::status::health::device_plugin_check(d));
        }
        let now = SystemTime::now();
        let mut problems = crate::node::status::health::problems(&inputs.health.dead(), &checks);
        problems.extend(inputs.runtime.problem(now));
        facts.capacity = capacity;
        facts.allocatable = allocatable;
        facts.images = inputs
            .images
            .as_ref()
            .map_or_else(Vec::new, |v| v.images().into_iter().map(|i| (i.tags, i.size)).collect());
        if ready.0 != problems.is_empty() {
            ready = (problems.is_empty(), now);
        }
        let conditions =
            crate::node::status::health::node_conditions(&problems, inputs.pressure.get(), started, ready.1, now);
        NodeReport { facts: facts.clone(), conditions }
    })
}

/// A small file's trimmed text, empty when unreadable.
fn read_small(path: &str) -> String {
    crate::base::inputfile::read_to_string(std::path::Path::new(path), 64 << 10)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// `nodeInfo`: what kubelet reports of the machine, with ferrolet's version.
fn node_info(runtime_version: &str) -> NodeSystemInfo {
    let os_image = read_small("/etc/os-release")
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "Linux".into());
    NodeSystemInfo {
        machine_id: read_small("/etc/machine-id"),
        system_uuid: read_small("/sys/class/dmi/id/product_uuid"),
        boot_id: read_small("/proc/sys/kernel/random/boot_id"),
        kernel_version: read_small("/proc/sys/kernel/osrelease"),
        os_image,
        container_runtime_version: runtime_version.into(),
        kubelet_version: format!("v{}-ferrolet", env!("CARGO_PKG_VERSION")),
        kube_proxy_version: String::new(),
        operating_system: "linux".into(),
        architecture: crate::cluster::apiserver::node::goarch().into(),
    }
}
