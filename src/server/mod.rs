//! The local read-only HTTP API: `/healthz`, `/pods`, `/events`, `/node`, `/devices`,
//! `/images`, `/metrics`, `/stats/summary`, `/metrics/resource`. It binds to loopback by
//! default; it never listens on all addresses unless configured. `http` parses and writes
//! HTTP/1.1 with hard bounds, `conn` serves connections without blocking (one reactor
//! thread, a fixed set of workers), `routes` answers requests, `stats` renders the usage
//! statistics (for kubelet's API too).

pub mod conn;
pub mod http;
pub mod jobs;
pub mod kubelet;
pub mod pool;
pub mod routes;
pub mod stats;

use crate::api::Node;
use crate::base::manager::{Health, StopTimeout};
use crate::node::events::store::EventStore;
use crate::node::events::EventMetrics;
use crate::node::status::StatusCache;
use std::sync::Arc;
use std::time::Duration;

/// A server failure.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The server's threads could not be started.
    #[error("cannot start the API server on {addr}")]
    Spawn {
        /// The address.
        addr: String,
        /// Why.
        #[source]
        source: pool::PoolError,
    },
}

/// What the API reads.
#[derive(Clone)]
pub struct ApiState {
    /// Pod statuses.
    pub statuses: StatusCache,
    /// Manager liveness.
    pub health: Health,
    /// The local event store.
    pub events: EventStore,
    /// Event counters.
    pub event_metrics: Arc<EventMetrics>,
    /// Probe counters and durations.
    pub prober_metrics: Arc<crate::node::prober::ProberMetrics>,
    /// Device plugins, unless turned off.
    pub devices: Option<crate::node::devicemanager::Devices>,
    /// The node's name and its cpu and memory (capacity and allocatable).
    pub node: Node,
    /// The images and the image GC's numbers (CRI runtime).
    pub images: Option<crate::node::imagegc::ImagesView>,
    /// Whether the container runtime answers (the Node's `Ready`).
    pub runtime: crate::node::status::RuntimeHealth,
    /// The node's pressure conditions (the eviction manager's).
    pub pressure: crate::node::eviction::view::PressureView,
    /// The last usage snapshot (`/stats/summary`, `/metrics/resource`).
    pub stats: crate::node::stats::StatsView,
    /// Cluster mode's link and client (their series in `/metrics`).
    pub apiserver: Option<(Arc<crate::cluster::apiserver::link::Link>, Arc<crate::cluster::apiserver::ApiClient>)>,
    /// What `fl-certs` manages (cluster mode), for `/metrics`.
    pub certs: Option<Arc<crate::cluster::certs::CertMetrics>>,
}

/// The running API server.
pub struct ApiServer {
    running: pool::Running,
    /// The bound address (useful when the port was 0).
    pub addr: std::net::SocketAddr,
}

impl ApiServer {
    /// Binds `addr` and serves it with the documented limits (`conn::Limits`).
    pub fn start(addr: &str, state: ApiState) -> Result<ApiServer, ServerError> {
        let bind = |source| ServerError::Bind { addr: addr.into(), source };
        let listener = std::net::TcpListener::bind(addr).map_err(bind)?;
        let bound = listener.local_addr().map_err(bind)?;
        let limits = conn::Limits::for_this_process();
        let stats = Arc::new(conn::ServerStats::default());
        let health = state.health.clone();
        let routes = Arc::new(routes::Routes::new(state, stats.clone()));
        let running = pool::spawn(listener, routes, limits.clone(), stats, &health)
            .map_err(|source| ServerError::Spawn { addr: addr.into(), source })?;
        log::info!(
            "api: serving /healthz /pods /events /node /devices /images /metrics /stats/summary /metrics/resource on http://{bound} (at most {} connections)",
            limits.max_connections
        );
        Ok(ApiServer { running, addr: bound })
    }

    /// Stops serving (open connections are closed), waiting up to `timeout` for the
    /// threads; returns those that did not end in time.
    pub fn stop(self, timeout: Duration) -> Vec<StopTimeout> {
        self.running.stop(timeout)
    }
}
