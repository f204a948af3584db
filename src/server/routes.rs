//! The routes of the local API as plain functions: request in, response out.

use super::conn::{Handler, ServerStats};
use super::http::{Request, Response};
use super::ApiState;
use crate::api::{EventList, ListMeta, Node, NodeCondition, PodList, PodPhase, Quantity, Time};
use crate::events::store::EventFilter;
use crate::metrics::{Encoder, Kind};
use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// The API's handler: what it reads, and when the node last changed readiness.
pub struct Routes {
    state: ApiState,
    stats: Arc<ServerStats>,
    /// Whether the node was last reported ready, and since when.
    ready: Mutex<(bool, SystemTime)>,
    started: SystemTime,
}

impl Routes {
    /// Routes over `state`, reporting the listener's health from `stats`.
    pub fn new(state: ApiState, stats: Arc<ServerStats>) -> Routes {
        let now = SystemTime::now();
        Routes { state, stats, ready: Mutex::new((true, now)), started: now }
    }

    /// Everything that makes the agent unhealthy: dead threads, a failed registration
    /// server, a listener that cannot accept. Each is one sentence.
    fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let dead = self.state.health.dead();
        if !dead.is_empty() {
            out.push(format!("manager thread(s) died: {}", dead.join(", ")));
        }
        if let Some(e) = self.state.devices.as_ref().and_then(|d| d.server_error()) {
            // kubelet's `device-plugin` health check.
            out.push(format!("device plugin registration gRPC server failed and no device plugins can register: {e}"));
        }
        out.extend(self.stats.listener_problem(Instant::now()));
        out
    }

    /// The Node with device plugin resources added: capacity healthy + unhealthy,
    /// allocatable healthy (a resource whose plugin stopped shows allocatable 0 during its
    /// grace period), and its conditions.
    fn node(&self) -> Node {
        let mut node = self.state.node.clone();
        if let Some(d) = &self.state.devices {
            for r in d.resources() {
                node.status.capacity.insert(r.name.clone(), Quantity::from_value(r.capacity as i64, false));
                node.status.allocatable.insert(r.name, Quantity::from_value(r.allocatable as i64, false));
            }
        }
        let problems = self.problems();
        let now = SystemTime::now();
        let since = {
            let mut ready = self.ready.lock();
            if ready.0 != problems.is_empty() {
                *ready = (problems.is_empty(), now);
            }
            ready.1
        };
        node.status.conditions = node_conditions(&problems, self.started, since, now);
        node
    }

    fn route(&self, req: &Request) -> Response {
        if req.method != "GET" {
            return Response::text(405, "only GET is supported\n");
        }
        let s = &self.state;
        match req.path.as_str() {
            "/healthz" => match self.problems().as_slice() {
                [] => Response::text(200, "ok"),
                problems => Response::text(500, problems.join("\n")),
            },
            "/pods" | "/pods/" => {
                let list = PodList {
                    api_version: "v1".into(),
                    kind: "PodList".into(),
                    metadata: ListMeta::default(),
                    items: s.statuses.list(),
                };
                Response::json(to_json(&list))
            }
            "/events" | "/events/" => match event_filter(&req.query) {
                Ok(filter) => {
                    let list = EventList {
                        api_version: "v1".into(),
                        kind: "EventList".into(),
                        metadata: ListMeta::default(),
                        items: s.events.list(&filter),
                    };
                    Response::json(to_json(&list))
                }
                Err(e) => Response::text(400, format!("{e}\n")),
            },
            "/metrics" => Response { content_type: "text/plain; version=0.0.4", ..Response::text(200, self.metrics()) },
            "/devices" | "/devices/" => {
                let view = s.devices.as_ref().map(|d| d.to_json()).unwrap_or_else(
                    || serde_json::json!({"registrationServer": "off (devices.plugin_dir is empty)", "resources": [], "allocations": []}),
                );
                Response::json(view.to_string())
            }
            "/node" | "/node/" => Response::json(to_json(&self.node())),
            path => Response::text(404, format!("404 page not found: {path}\n")),
        }
    }
}

impl Handler for Routes {
    fn handle(&self, req: &Request) -> Response {
        self.route(req)
    }

    fn inline(&self, req: &Request) -> bool {
        req.path == "/healthz" || req.method != "GET"
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> String {
    // Serializing our own plain types into a String cannot fail (no maps with non-string keys).
    serde_json::to_string(v).unwrap_or_default()
}

/// The node's conditions in kubelet's order and words: the pressure conditions (ferrolet
/// does not evict, so they are False) and Ready, False with the problems when there are any.
pub fn node_conditions(
    problems: &[String],
    started: SystemTime,
    ready_since: SystemTime,
    now: SystemTime,
) -> Vec<NodeCondition> {
    let cond = |type_: &str, status: &str, since: SystemTime, reason: &str, message: String| NodeCondition {
        type_: type_.into(),
        status: status.into(),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(since)),
        reason: reason.into(),
        message,
    };
    // The pressure conditions have held since the agent started.
    let mut out = vec![
        cond(
            "MemoryPressure",
            "False",
            started,
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available".into(),
        ),
        cond("DiskPressure", "False", started, "KubeletHasNoDiskPressure", "kubelet has no disk pressure".into()),
        cond("PIDPressure", "False", started, "KubeletHasSufficientPID", "kubelet has sufficient PID available".into()),
    ];
    out.push(if problems.is_empty() {
        cond("Ready", "True", ready_since, "KubeletReady", "kubelet is posting ready status".into())
    } else {
        cond("Ready", "False", ready_since, "KubeletNotReady", problems.join("; "))
    });
    out
}

/// Decodes `%XX` and `+` in a query component.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            // On bytes: a `%` before a multi-byte character must not slice inside it.
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
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

impl Routes {
    /// Prometheus text exposition of the agent's own gauges.
    fn metrics(&self) -> String {
        let state = &self.state;
        let pods = state.statuses.list();
        let mut out = String::new();
        let mut phases = std::collections::BTreeMap::new();
        let mut containers = std::collections::BTreeMap::new();
        for p in &pods {
            let Some(s) = &p.status else { continue };
            *phases.entry(s.phase).or_insert(0u64) += 1;
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
        let mut enc = Encoder::new(&mut out);
        enc.family("ferrolet_pods", Kind::Gauge, "Pods known to the agent, by phase.");
        for phase in [PodPhase::Pending, PodPhase::Running, PodPhase::Succeeded, PodPhase::Failed] {
            enc.sample("ferrolet_pods", &[("phase", phase.as_str())], phases.get(&phase).copied().unwrap_or(0));
        }
        enc.family("ferrolet_containers", Kind::Gauge, "Containers known to the agent, by state.");
        for st in ["running", "waiting", "exited"] {
            enc.sample("ferrolet_containers", &[("state", st)], containers.get(st).copied().unwrap_or(0));
        }
        if let Ok(me) = procfs::process::Process::myself() {
            if let Ok(stat) = me.stat() {
                let tps = procfs::ticks_per_second() as f64;
                let page = procfs::page_size();
                enc.single(
                    "process_cpu_seconds_total",
                    Kind::Counter,
                    "Total user and system CPU time spent in seconds.",
                    (stat.utime + stat.stime) as f64 / tps,
                );
                enc.single(
                    "process_resident_memory_bytes",
                    Kind::Gauge,
                    "Resident memory size in bytes.",
                    stat.rss * page,
                );
                enc.single("process_threads", Kind::Gauge, "Number of OS threads.", stat.num_threads);
            }
        }
        state.event_metrics.render(&mut out);
        state.prober_metrics.render(&mut out);
        if let Some(d) = &state.devices {
            d.metrics().render(&mut out);
        }
        let dead = state.health.dead();
        Encoder::new(&mut out).single(
            "ferrolet_manager_threads_dead",
            Kind::Gauge,
            "Manager threads that died.",
            dead.len(),
        );
        self.api_metrics(&mut out);
        out
    }

    /// The API server's own counters.
    fn api_metrics(&self, out: &mut String) {
        let st = &self.stats;
        let mut enc = Encoder::new(out);
        let open = st.open.load(Ordering::Relaxed);
        enc.single("ferrolet_api_connections", Kind::Gauge, "Open connections to the local API.", open);
        for (name, help, counter) in [
            ("accepted", "Connections accepted.", &st.accepted),
            ("rejected", "Connections refused with 503 because every connection slot was busy.", &st.rejected),
            ("evicted", "Idle connections closed to make room for new ones.", &st.evicted),
            ("timeouts", "Connections closed because a request or response missed its deadline.", &st.timeouts),
            ("accept_errors", "Failed accept calls (out of file descriptors and the like).", &st.accept_errors),
        ] {
            let v = counter.load(Ordering::Relaxed);
            enc.single(&format!("ferrolet_api_{name}_total"), Kind::Counter, help, v);
        }
    }
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

    #[test]
    fn percent_decoding_never_splits_a_character() {
        assert_eq!(percent_decode("a%20b+c%zz%4"), "a b c%zz%4");
        assert_eq!(percent_decode("%a\u{e9}x"), "%a\u{e9}x");
        assert_eq!(percent_decode("%+1"), "% 1");
        assert_eq!(event_filter("name=%\u{e9}").unwrap().name.as_deref(), Some("%\u{e9}"));
    }
}
