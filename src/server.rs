//! The local read-only HTTP API (tiny_http, one thread): `/healthz`, `/pods`, `/metrics`.
//! It binds to loopback by default; it never listens on all addresses unless configured.

use crate::api::{ListMeta, PodList};
use crate::manager::Health;
use crate::status::StatusCache;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A server failure.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {message}")]
    Bind {
        /// The address.
        addr: String,
        /// Why.
        message: String,
    },
}

/// What the API reads.
#[derive(Clone)]
pub struct ApiState {
    /// Pod statuses.
    pub statuses: StatusCache,
    /// Manager liveness.
    pub health: Health,
}

/// The running API server.
pub struct ApiServer {
    stop: Arc<AtomicBool>,
    join: Option<JoinHandle<()>>,
    /// The bound address (useful when the port was 0).
    pub addr: std::net::SocketAddr,
}

impl ApiServer {
    /// Binds `addr` and serves on a thread named `fl-api`.
    pub fn start(addr: &str, state: ApiState) -> Result<ApiServer, ServerError> {
        let server = tiny_http::Server::http(addr)
            .map_err(|e| ServerError::Bind { addr: addr.into(), message: e.to_string() })?;
        let bound = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| ServerError::Bind { addr: addr.into(), message: "not an IP address".into() })?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let guard = crate::manager::AliveGuard::new(&state.health, "fl-api");
        let join = std::thread::Builder::new()
            .name("fl-api".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    match server.recv_timeout(Duration::from_millis(200)) {
                        Ok(Some(req)) => respond(req, &state),
                        Ok(None) => {}
                        Err(e) => {
                            log::error!("api: accept failed: {e}");
                            std::thread::sleep(Duration::from_millis(200));
                        }
                    }
                }
                guard.finish();
            })
            .map_err(|e| ServerError::Bind { addr: addr.into(), message: e.to_string() })?;
        log::info!("api: serving /healthz /pods /metrics on http://{bound}");
        Ok(ApiServer { stop, join: Some(join), addr: bound })
    }

    /// Stops serving; waits for the current request to finish.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(j) = self.join.take() {
            // The loop checks the flag at least every 200 ms.
            let _ = j.join();
        }
    }
}

fn respond(req: tiny_http::Request, state: &ApiState) {
    let path = req.url().split('?').next().unwrap_or("").to_string();
    let (code, ctype, body) = if *req.method() != tiny_http::Method::Get {
        (405, "text/plain", "only GET is supported\n".to_string())
    } else {
        match path.as_str() {
            "/healthz" => {
                let dead = state.health.dead();
                if dead.is_empty() {
                    (200, "text/plain", "ok".to_string())
                } else {
                    (500, "text/plain", format!("manager thread(s) died: {}", dead.join(", ")))
                }
            }
            "/pods" | "/pods/" => {
                let list = PodList {
                    api_version: "v1".into(),
                    kind: "PodList".into(),
                    metadata: ListMeta::default(),
                    items: state.statuses.list(),
                };
                (200, "application/json", serde_json::to_string(&list).unwrap_or_default())
            }
            "/metrics" => (200, "text/plain; version=0.0.4", metrics(state)),
            _ => (404, "text/plain", format!("404 page not found: {path}\n")),
        }
    };
    let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], ctype.as_bytes()).ok();
    let mut resp = tiny_http::Response::from_string(body).with_status_code(code);
    if let Some(h) = header {
        resp = resp.with_header(h);
    }
    if let Err(e) = req.respond(resp) {
        log::debug!("api: writing response for {path}: {e}");
    }
}

/// Prometheus text exposition of the agent's own gauges.
fn metrics(state: &ApiState) -> String {
    let pods = state.statuses.list();
    let mut out = String::new();
    let mut phases = std::collections::BTreeMap::new();
    let mut containers = std::collections::BTreeMap::new();
    for p in &pods {
        let Some(s) = &p.status else { continue };
        *phases.entry(s.phase.clone()).or_insert(0u64) += 1;
        for c in s.init_container_statuses.iter().chain(&s.container_statuses) {
            let st = if c.state.running.is_some() {
                "running"
            } else if c.state.terminated.is_some() {
                "exited"
            } else {
                "waiting"
            };
            *containers.entry(st).or_insert(0u64) += 1;
        }
    }
    let _ = writeln!(out, "# HELP ferrolet_pods Pods known to the agent, by phase.\n# TYPE ferrolet_pods gauge");
    for phase in ["Pending", "Running", "Succeeded", "Failed"] {
        let _ = writeln!(out, "ferrolet_pods{{phase=\"{phase}\"}} {}", phases.get(phase).copied().unwrap_or(0));
    }
    let _ = writeln!(
        out,
        "# HELP ferrolet_containers Containers known to the agent, by state.\n# TYPE ferrolet_containers gauge"
    );
    for st in ["running", "waiting", "exited"] {
        let _ = writeln!(out, "ferrolet_containers{{state=\"{st}\"}} {}", containers.get(st).copied().unwrap_or(0));
    }
    if let Ok(me) = procfs::process::Process::myself() {
        if let Ok(stat) = me.stat() {
            let tps = procfs::ticks_per_second() as f64;
            let page = procfs::page_size();
            let _ = writeln!(out, "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n# TYPE process_cpu_seconds_total counter");
            let _ = writeln!(out, "process_cpu_seconds_total {}", (stat.utime + stat.stime) as f64 / tps);
            let _ = writeln!(out, "# HELP process_resident_memory_bytes Resident memory size in bytes.\n# TYPE process_resident_memory_bytes gauge");
            let _ = writeln!(out, "process_resident_memory_bytes {}", stat.rss * page);
            let _ = writeln!(out, "# HELP process_threads Number of OS threads.\n# TYPE process_threads gauge");
            let _ = writeln!(out, "process_threads {}", stat.num_threads);
        }
    }
    let dead = state.health.dead();
    let _ = writeln!(
        out,
        "# HELP ferrolet_manager_threads_dead Manager threads that died.\n# TYPE ferrolet_manager_threads_dead gauge"
    );
    let _ = writeln!(out, "ferrolet_manager_threads_dead {}", dead.len());
    out
}
