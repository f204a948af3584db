//! The local read-only HTTP API (tiny_http, one thread): `/healthz`, `/pods`, `/events`,
//! `/node`, `/devices`, `/metrics`.
//! It binds to loopback by default; it never listens on all addresses unless configured.

use crate::api::{EventList, ListMeta, Node, PodList, Quantity};
use crate::events::store::{EventFilter, EventStore};
use crate::events::EventMetrics;
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
    /// The local event store.
    pub events: EventStore,
    /// Event counters.
    pub event_metrics: Arc<EventMetrics>,
    /// Probe counters and durations.
    pub prober_metrics: Arc<crate::prober::ProberMetrics>,
    /// Device plugins, unless turned off.
    pub devices: Option<crate::devicemanager::Devices>,
    /// The node's name and its cpu and memory (capacity and allocatable).
    pub node: Node,
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
        log::info!("api: serving /healthz /pods /events /metrics on http://{bound}");
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
    let (path, query) = match req.url().split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (req.url().to_string(), String::new()),
    };
    let (code, ctype, body) = if *req.method() != tiny_http::Method::Get {
        (405, "text/plain", "only GET is supported\n".to_string())
    } else {
        match path.as_str() {
            "/healthz" => {
                let dead = state.health.dead();
                let registration = state.devices.as_ref().and_then(|d| d.server_error.lock().clone());
                if !dead.is_empty() {
                    (500, "text/plain", format!("manager thread(s) died: {}", dead.join(", ")))
                } else if let Some(e) = registration {
                    // kubelet's `device-plugin` health check.
                    let message = format!(
                        "device plugin registration gRPC server failed and no device plugins can register: {e}"
                    );
                    (500, "text/plain", message)
                } else {
                    (200, "text/plain", "ok".to_string())
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
            "/events" | "/events/" => match event_filter(&query) {
                Ok(filter) => {
                    let list = EventList {
                        api_version: "v1".into(),
                        kind: "EventList".into(),
                        metadata: ListMeta::default(),
                        items: state.events.list(&filter),
                    };
                    (200, "application/json", serde_json::to_string(&list).unwrap_or_default())
                }
                Err(e) => (400, "text/plain", format!("{e}\n")),
            },
            "/metrics" => (200, "text/plain; version=0.0.4", metrics(state)),
            "/devices" | "/devices/" => {
                let view = state.devices.as_ref().map(|d| d.view()).unwrap_or_else(
                    || serde_json::json!({"registrationServer": "off (devices.plugin_dir is empty)", "resources": [], "allocations": []}),
                );
                (200, "application/json", view.to_string())
            }
            "/node" | "/node/" => (200, "application/json", serde_json::to_string(&node(state)).unwrap_or_default()),
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

/// Decodes `%XX` and `+` in a query component.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => match u8::from_str_radix(&s[i + 1..i + 3], 16) {
                Ok(v) => {
                    out.push(v);
                    i += 3;
                    continue;
                }
                Err(_) => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `/events` filters: `fieldSelector=involvedObject.name=web,involvedObject.kind=Pod` (as
/// kubectl sends) or the short `kind=`, `namespace=`, `name=`, `uid=` parameters.
fn event_filter(query: &str) -> Result<EventFilter, String> {
    let mut f = EventFilter::default();
    let mut set = |field: &str, value: String| -> Result<(), String> {
        match field {
            "kind" => f.kind = Some(value),
            "namespace" => f.namespace = Some(value),
            "name" => f.name = Some(value),
            "uid" => f.uid = Some(value),
            other => return Err(format!("unsupported event filter {other:?}: use kind, namespace, name or uid")),
        }
        Ok(())
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (percent_decode(k), percent_decode(v));
        if k == "fieldSelector" {
            for sel in v.split(',').filter(|s| !s.is_empty()) {
                let (field, value) = sel.split_once('=').ok_or_else(|| format!("bad field selector {sel:?}"))?;
                let field = field.strip_prefix("involvedObject.").ok_or_else(|| {
                    format!("unsupported field selector {field:?}: use involvedObject.<kind|namespace|name|uid>")
                })?;
                set(field, value.to_string())?;
            }
        } else {
            set(&k, v)?;
        }
    }
    Ok(f)
}

/// The Node with device plugin resources added: capacity healthy + unhealthy, allocatable
/// healthy (a resource whose plugin stopped shows allocatable 0 during its grace period).
fn node(state: &ApiState) -> Node {
    let mut node = state.node.clone();
    if let Some(d) = &state.devices {
        for r in d.state.lock().view() {
            node.status.capacity.insert(r.name.clone(), Quantity::from_value(r.capacity as i64, false));
            node.status.allocatable.insert(r.name, Quantity::from_value(r.allocatable as i64, false));
        }
    }
    node
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
    state.event_metrics.render(&mut out);
    state.prober_metrics.render(&mut out);
    if let Some(d) = &state.devices {
        d.metrics.render(&mut out);
    }
    let dead = state.health.dead();
    let _ = writeln!(
        out,
        "# HELP ferrolet_manager_threads_dead Manager threads that died.\n# TYPE ferrolet_manager_threads_dead gauge"
    );
    let _ = writeln!(out, "ferrolet_manager_threads_dead {}", dead.len());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_filters_accept_field_selectors_and_short_parameters() {
        let f = event_filter("fieldSelector=involvedObject.name%3Dweb-n1%2CinvolvedObject.kind%3DPod").unwrap();
        assert_eq!((f.name.as_deref(), f.kind.as_deref()), (Some("web-n1"), Some("Pod")));
        let f = event_filter("namespace=default&uid=abc").unwrap();
        assert_eq!((f.namespace.as_deref(), f.uid.as_deref()), (Some("default"), Some("abc")));
        assert!(event_filter("reason=BackOff").unwrap_err().contains("unsupported event filter"));
        assert!(event_filter("fieldSelector=type=Warning").is_err());
    }
}
