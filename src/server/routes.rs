//! The routes of the local API as plain functions: request in, response out (`/stats/summary`
//! and `/metrics/resource` are rendered by `stats`, which kubelet's API shares).

use super::conn::{Handler, ServerStats};
use super::http::{Request, Response};
use super::{stats, ApiState};
use crate::api::{EventList, ListMeta, Node, PodPhase, Quantity};
use crate::base::metrics::{Encoder, Kind};
use crate::node::events::store::EventFilter;
use crate::node::status::health::{device_plugin_check, node_conditions, problems};
use parking_lot::Mutex;
use std::collections::BTreeMap;
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
        problems(&self.state.health.dead(), &self.checks())
    }

    /// The health checks besides the threads, by name, each with its problem if it has one.
    fn checks(&self) -> Vec<(&'static str, Option<String>)> {
        let mut out = Vec::new();
        if let Some(d) = &self.state.devices {
            out.push(device_plugin_check(d));
        }
        out.push(("api-listener", self.stats.listener_problem(Instant::now())));
        out.push(("manager-loops", busy_problem(&self.state.health.busy_for(STUCK_AFTER))));
        out
    }

    /// `/healthz`: `ok`, or status 500 with one problem a line. With `?verbose`, as
    /// kubelet's, one line per check: every registered thread by name, then the other
    /// checks, then the verdict; the status is the same.
    fn healthz(&self, query: &str) -> Response {
        let health = &self.state.health;
        let (alive, dead, checks) = (health.alive(), health.dead(), self.checks());
        let problems = problems(&dead, &checks);
        let status = if problems.is_empty() { 200 } else { 500 };
        if query.split('&').any(|p| p == "verbose" || p.starts_with("verbose=")) {
            return Response::text(status, verbose_healthz(&alive, &dead, &checks));
        }
        match problems.as_slice() {
            [] => Response::text(200, "ok"),
            problems => Response::text(500, problems.join("\n")),
        }
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
        let now = SystemTime::now();
        let mut problems = self.problems();
        problems.extend(self.state.runtime.problem(now));
        let since = {
            let mut ready = self.ready.lock();
            if ready.0 != problems.is_empty() {
                *ready = (problems.is_empty(), now);
            }
            ready.1
        };
        node.status.conditions = node_conditions(&problems, self.state.pressure.get(), self.started, since, now);
        node
    }

    fn route(&self, req: &Request) -> Response {
        if req.method != "GET" {
            return Response::text(405, "only GET is supported\n");
        }
        let s = &self.state;
        match req.path.as_str() {
            "/healthz" => self.healthz(&req.query),
            "/pods" | "/pods/" => {
                // `PodList`'s shape, its items written out one pod at a time.
                #[derive(serde::Serialize)]
                #[serde(rename_all = "camelCase")]
                struct Listing {
                    api_version: &'static str,
                    kind: &'static str,
                    metadata: ListMeta,
                    items: crate::node::status::Listed,
                }
                let list = Listing {
                    api_version: "v1",
                    kind: "PodList",
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
            "/metrics/resource" => stats::resource_metrics_response(&s.stats, SystemTime::now()),
            "/stats/summary" => {
                let params = parse_query(&req.query);
                let only = stats::only_cpu_and_memory(params.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                stats::summary_response(&s.stats, only, SystemTime::now())
            }
            "/devices" | "/devices/" => {
                let view = s.devices.as_ref().map(|d| d.to_json()).unwrap_or_else(
                    || serde_json::json!({"registrationServer": "off (devices.plugin_dir is empty)", "resources": [], "allocations": []}),
                );
                Response::json(view.to_string())
            }
            "/node" | "/node/" => Response::json(to_json(&self.node())),
            "/images" | "/images/" => {
                let images = s.images.as_ref().map(|v| v.images()).unwrap_or_default();
                Response::json(to_json(&serde_json::json!({
                    "imageGC": if s.images.is_some() { "on" } else { "off (the runtime has no images)" },
                    "images": images,
                })))
            }
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

/// How long a manager may be inside one piece of work (a command, a tick) before
/// `/healthz` says it is stuck (a runtime call is bounded by `runtime_request_timeout`, 2
/// minutes by default; a manifest is read in well under a second).
pub const STUCK_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// The problem of managers busy past `STUCK_AFTER` (`Health::busy_for`), if any.
pub fn busy_problem(busy: &[(String, std::time::Duration)]) -> Option<String> {
    if busy.is_empty() {
        return None;
    }
    let each: Vec<String> = busy.iter().map(|(name, d)| format!("{name} for {}s", d.as_secs())).collect();
    Some(format!("manager(s) stuck inside one piece of work: {}", each.join(", ")))
}

/// The body of `/healthz?verbose`: `[+]fl-pods ok` for a running thread and `[-]fl-prober
/// failed` for a dead one (a name shared by several threads, such as `fl-api-work`, gets
/// one line, failed if any of them died), `[+]name ok` or `[-]name failed: why` for each
/// other check, then `healthz check passed` or `healthz check failed`.
pub fn verbose_healthz(alive: &[String], dead: &[String], checks: &[(&str, Option<String>)]) -> String {
    let mut threads: BTreeMap<&str, bool> = alive.iter().map(|n| (n.as_str(), true)).collect();
    threads.extend(dead.iter().map(|n| (n.as_str(), false)));
    let mut out = String::new();
    for (name, ok) in threads {
        out.push_str(&if ok { format!("[+]{name} ok\n") } else { format!("[-]{name} failed\n") });
    }
    for (name, problem) in checks {
        out.push_str(&match problem {
            None => format!("[+]{name} ok\n"),
            Some(why) => format!("[-]{name} failed: {why}\n"),
        });
    }
    let passed = dead.is_empty() && checks.iter().all(|(_, p)| p.is_none());
    out.push_str(if passed { "healthz check passed\n" } else { "healthz check failed\n" });
    out
}

fn to_json<T: serde::Serialize>(v: &T) -> String {
    // Serializing our own plain types into a String cannot fail (no maps with non-string keys).
    serde_json::to_string(v).unwrap_or_default()
}

/// Decodes `%XX` and `+` in a query component.
pub fn percent_decode(s: &str) -> String {
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

/// `a=1&b=x%20y&b=z` as (key, value) pairs, `+` as a space, percent-decoded.
pub fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// An `/events` query that is not a filter the store understands (answered with 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventFilterError {
    /// A parameter or selector field other than kind, namespace, name and uid.
    #[error("unsupported event filter {field:?}: use kind, namespace, name or uid")]
    CheckField {
        /// The field.
        field: String,
    },
    /// A field selector without `=`.
    #[error("bad field selector {selector:?}")]
    SplitSelector {
        /// The selector.
        selector: String,
    },
    /// A field selector on something other than `involvedObject`.
    #[error("unsupported field selector {field:?}: use involvedObject.<kind|namespace|name|uid>")]
    CheckSelectorField {
        /// The field.
        field: String,
    },
}

/// `/events` filters: `fieldSelector=involvedObject.name=web,involvedObject.kind=Pod` (as
/// kubectl sends) or the short `kind=`, `namespace=`, `name=`, `uid=` parameters.
fn event_filter(query: &str) -> Result<EventFilter, EventFilterError> {
    let mut f = EventFilter::default();
    let mut set = |field: &str, value: String| -> Result<(), EventFilterError> {
        match field {
            "kind" => f.kind = Some(value),
            "namespace" => f.namespace = Some(value),
            "name" => f.name = Some(value),
            "uid" => f.uid = Some(value),
            other => return Err(EventFilterError::CheckField { field: other.into() }),
        }
        Ok(())
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (percent_decode(k), percent_decode(v));
        if k == "fieldSelector" {
            for sel in v.split(',').filter(|s| !s.is_empty()) {
                let (field, value) =
                    sel.split_once('=').ok_or_else(|| EventFilterError::SplitSelector { selector: sel.into() })?;
                let field = field
                    .strip_prefix("involvedObject.")
                    .ok_or_else(|| EventFilterError::CheckSelectorField { field: field.into() })?;
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
        let statuses = state.statuses.statuses();
        let mut out = String::new();
        let mut phases = std::collections::BTreeMap::new();
        let mut containers = std::collections::BTreeMap::new();
        for s in &statuses {
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
        if let Some(images) = &state.images {
            images.render_metrics(&mut out);
        }
        if let Some((link, client)) = &state.apiserver {
            let mut enc = Encoder::new(&mut out);
            link.encode(&mut enc);
            enc.single(
                "ferrolet_apiserver_requests_total",
                Kind::Counter,
                "Requests made to the apiserver (watches included).",
                client.requests.get(),
            );
        }
        if let Some(certs) = &state.certs {
            certs.encode(&mut Encoder::new(&mut out), std::time::SystemTime::now());
        }
        let dead = state.health.dead();
        Encoder::new(&mut out).single(
            "ferrolet_manager_threads_dead",
            Kind::Gauge,
            "Manager threads that died.",
            dead.len(),
        );
        let mut enc = Encoder::new(&mut out);
        enc.family("ferrolet_manager_ticks_total", Kind::Counter, "Periodic passes each manager thread completed.");
        for (manager, ticks) in state.health.ticks() {
            enc.sample("ferrolet_manager_ticks_total", &[("manager", &manager)], ticks);
        }
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
            ("requests", "Request heads read in full.", &st.requests),
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
        assert_eq!(
            event_filter("reason=BackOff").unwrap_err().to_string(),
            "unsupported event filter \"reason\": use kind, namespace, name or uid"
        );
        assert_eq!(
            event_filter("fieldSelector=type=Warning").unwrap_err().to_string(),
            "unsupported field selector \"type\": use involvedObject.<kind|namespace|name|uid>"
        );
        assert_eq!(
            event_filter("fieldSelector=involvedObject.name").unwrap_err(),
            EventFilterError::SplitSelector { selector: "involvedObject.name".into() }
        );
    }

    #[test]
    fn percent_decoding_never_splits_a_character() {
        assert_eq!(percent_decode("a%20b+c%zz%4"), "a b c%zz%4");
        assert_eq!(percent_decode("%a\u{e9}x"), "%a\u{e9}x");
        assert_eq!(percent_decode("%+1"), "% 1");
        assert_eq!(event_filter("name=%\u{e9}").unwrap().name.as_deref(), Some("%\u{e9}"));
    }

    #[test]
    fn verbose_healthz_names_every_thread_once_and_each_check() {
        let alive: Vec<String> = ["fl-api", "fl-api-work", "fl-api-work", "fl-pods"].map(String::from).into();
        let body = verbose_healthz(&alive, &[], &[("api-listener", None)]);
        assert_eq!(body, "[+]fl-api ok\n[+]fl-api-work ok\n[+]fl-pods ok\n[+]api-listener ok\nhealthz check passed\n");
        let dead = vec!["fl-prober".to_string()];
        let checks = [("device-plugin", Some("it failed".to_string())), ("api-listener", None)];
        let body = verbose_healthz(&alive, &dead, &checks);
        assert!(body.contains("[+]fl-pods ok\n[-]fl-prober failed\n[-]device-plugin failed: it failed\n"), "{body}");
        assert!(body.ends_with("[+]api-listener ok\nhealthz check failed\n"), "{body}");
        assert_eq!(problems(&dead, &checks), ["manager thread(s) died: fl-prober", "it failed"]);
    }
}
