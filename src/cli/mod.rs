//! `ferrolet get pods`: reads the local API and prints what `kubectl get pods` would.

pub mod drain;
pub mod flags;
pub mod get;
pub mod logging;
pub mod logs_exec;
pub mod plan;
pub mod run;
pub mod top;
pub mod validate;
use crate::api::{ContainerState, Event, EventList, Pod, PodList, PodPhase};
use crate::base::timefmt::human_age;
use std::time::{Duration, SystemTime};

/// Output format of `get`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// NAME READY STATUS RESTARTS AGE.
    Table,
    /// Table plus IP and NODE.
    Wide,
    /// The PodList as JSON.
    Json,
    /// The PodList as YAML.
    Yaml,
}

/// An `-o` value that is not an output format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported output format {value:?}: allowed formats are wide, json, yaml")]
pub struct ParseOutputError {
    /// The value as given.
    pub value: String,
}

impl std::str::FromStr for Output {
    type Err = ParseOutputError;
    fn from_str(s: &str) -> Result<Self, ParseOutputError> {
        match s {
            "wide" => Ok(Output::Wide),
            "json" => Ok(Output::Json),
            "yaml" => Ok(Output::Yaml),
            _ => Err(ParseOutputError { value: s.into() }),
        }
    }
}

/// The whole exchange with the local API, connect to last byte.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest response the CLI reads (a PodList of 500 pods is about 3 MiB).
const MAX_RESPONSE_BYTES: u64 = 64 << 20;

/// An answer of the local API: its status and body.
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The body (at most `MAX_RESPONSE_BYTES`).
    pub body: Vec<u8>,
}

impl Answer {
    /// The body's first line, for a message (control characters escaped, at most 300 bytes).
    pub fn first_line(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        let line: String = text.lines().next().unwrap_or("").chars().take(300).collect();
        crate::base::logsafe::Escaped(&line).to_string()
    }
}

/// `GET http://{server}{path}`, whatever the status.
fn fetch_answer(server: &str, path: &str) -> anyhow::Result<Answer> {
    use anyhow::Context as _;
    let url = format!("http://{server}{path}");
    let config = ureq::Agent::config_builder().timeout_global(Some(FETCH_TIMEOUT)).http_status_as_error(false).build();
    let agent: ureq::Agent = config.into();
    let mut resp = agent.get(&url).call().map_err(|e| {
        anyhow::anyhow!(
            "cannot reach the ferrolet API at {url}: {e} (is `ferrolet run` running? use --server to point elsewhere)"
        )
    })?;
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(MAX_RESPONSE_BYTES)
        .read_to_vec()
        .with_context(|| format!("reading the response of {url}"))?;
    Ok(Answer { status, body })
}

/// Decodes a JSON answer of `path` (from `server`) into `T`; any status but 200 is an error
/// that says what the agent answered.
fn decode_answer<T: serde::de::DeserializeOwned>(server: &str, path: &str, answer: &Answer) -> anyhow::Result<T> {
    use anyhow::Context as _;
    let url = format!("http://{server}{path}");
    if answer.status != 200 {
        // The agent answered, with an error of its own: say that, not "cannot reach".
        anyhow::bail!("the ferrolet API at {url} answered HTTP {}: {}", answer.status, answer.first_line());
    }
    let value: serde_json::Value =
        serde_json::from_slice(&answer.body).with_context(|| format!("decoding the response of {url}"))?;
    crate::api::decode(&value).map_err(|e| anyhow::anyhow!("decoding the response of {url}: {e}"))
}

fn fetch<T: serde::de::DeserializeOwned>(server: &str, path: &str) -> anyhow::Result<T> {
    decode_answer(server, path, &fetch_answer(server, path)?)
}

/// Fetches `/pods` from the agent at `server` (`host:port`).
pub fn fetch_pods(server: &str) -> anyhow::Result<PodList> {
    fetch(server, "/pods")
}

/// Fetches `/events`, optionally only those about one pod.
pub fn fetch_events(server: &str, pod: Option<&Pod>) -> anyhow::Result<EventList> {
    let path = match pod {
        // By uid too, as kubectl does: an edited static pod is a new pod with the same name.
        Some(p) => format!(
            "/events?kind=Pod&namespace={}&name={}&uid={}",
            p.metadata.namespace, p.metadata.name, p.metadata.uid
        ),
        None => "/events".to_string(),
    };
    fetch(server, &path)
}

/// Finds a pod by the name its manifest gave it (`web`) or its full static-pod name
/// (`web-<node>`), optionally `namespace/`-qualified.
pub fn find_pod(list: &PodList, name: &str) -> anyhow::Result<Pod> {
    let (ns, name) = name.split_once('/').map_or((None, name), |(n, p)| (Some(n), p));
    let found: Vec<&Pod> = list
        .items
        .iter()
        .filter(|p| ns.map_or(true, |n| n == p.metadata.namespace))
        .filter(|p| p.metadata.name == name || p.metadata.name == format!("{name}-{}", p.spec.node_name))
        .collect();
    match found.as_slice() {
        [p] => Ok((*p).clone()),
        [] => anyhow::bail!("pod {name:?} not found"),
        _ => anyhow::bail!("pod name {name:?} is ambiguous: qualify it with its namespace (namespace/name)"),
    }
}

/// The STATUS column, READY column and restarts of a pod, computed the way kubectl does.
pub fn pod_columns(pod: &Pod) -> (String, String, String) {
    let Some(st) = &pod.status else {
        return (PodPhase::Unknown.as_str().into(), "0/0".into(), "0".into());
    };
    let mut reason = if st.reason.is_empty() { st.phase.to_string() } else { st.reason.clone() };
    let sidecars: Vec<&str> =
        pod.spec.init_containers.iter().filter(|c| c.is_sidecar()).map(|c| c.name.as_str()).collect();
    let total = pod.spec.containers.len() + sidecars.len();
    let mut ready = 0;
    let mut restarts = 0;
    let mut last_restart: Option<SystemTime> = None;
    let mut note_restart = |c: &crate::api::ContainerStatus| {
        if let Some(t) = c.last_state.terminated.as_ref().and_then(|t| t.finished_at) {
            last_restart = Some(last_restart.map_or(t.0, |l| l.max(t.0)));
        }
    };
    let mut initializing = false;
    let mut sidecar_restarts = 0;
    for (i, c) in st.init_container_statuses.iter().enumerate() {
        restarts += c.restart_count;
        note_restart(c);
        let is_sidecar = sidecars.contains(&c.name.as_str());
        if is_sidecar {
            sidecar_restarts += c.restart_count;
        }
        if c.state.terminated.as_ref().is_some_and(|t| t.exit_code == 0) {
            continue;
        }
        if is_sidecar && c.started == Some(true) {
            if c.ready {
                ready += 1;
            }
            continue;
        }
        if let Some(t) = &c.state.terminated {
            reason = if t.reason.is_empty() {
                format!("Init:ExitCode:{}", t.exit_code)
            } else {
                format!("Init:{}", t.reason)
            };
        } else if let Some(w) =
            c.state.waiting.as_ref().filter(|w| !w.reason.is_empty() && w.reason != "PodInitializing")
        {
            reason = format!("Init:{}", w.reason);
        } else {
            reason = format!("Init:{i}/{}", pod.spec.init_containers.len());
        }
        initializing = true;
        break;
    }
    let initialized = st.conditions.iter().any(|c| c.type_ == "Initialized" && c.status == "True");
    if !initializing || initialized {
        restarts = sidecar_restarts;
        let mut has_running = false;
        for c in st.container_statuses.iter().rev() {
            restarts += c.restart_count;
            note_restart(c);
            if let Some(w) = c.state.waiting.as_ref().filter(|w| !w.reason.is_empty()) {
                reason = w.reason.clone();
            } else if let Some(t) = &c.state.terminated {
                reason = if t.reason.is_empty() { format!("ExitCode:{}", t.exit_code) } else { t.reason.clone() };
            } else if c.ready && c.state.running.is_some() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let pod_ready = st.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True");
            reason = if pod_ready { PodPhase::Running.as_str().into() } else { "NotReady".into() };
        }
    }
    if pod.metadata.deletion_timestamp.is_some() {
        reason = "Terminating".into();
    }
    let restarts = match last_restart {
        Some(t) if restarts > 0 => {
            let ago = SystemTime::now().duration_since(t).unwrap_or_default();
            format!("{restarts} ({} ago)", human_age(ago))
        }
        _ => restarts.to_string(),
    };
    (reason, format!("{ready}/{total}"), restarts)
}

/// Renders pods in the chosen format.
pub fn render_pods(list: &PodList, output: Output) -> anyhow::Result<String> {
    match output {
        Output::Json => return Ok(serde_json::to_string_pretty(list)? + "\n"),
        Output::Yaml => return Ok(serde_norway::to_string(list)?),
        _ => {}
    }
    if list.items.is_empty() {
        return Ok("No resources found\n".into());
    }
    let wide = output == Output::Wide;
    let mut rows = vec![{
        let mut h = vec!["NAME", "READY", "STATUS", "RESTARTS", "AGE"];
        if wide {
            h.extend(["IP", "NODE"]);
        }
        h.into_iter().map(String::from).collect::<Vec<_>>()
    }];
    let now = SystemTime::now();
    for p in &list.items {
        let (status, ready, restarts) = pod_columns(p);
        let created = p.metadata.creation_timestamp.map(|t| t.0).unwrap_or(now);
        let mut row = vec![
            p.metadata.name.clone(),
            ready,
            status,
            restarts,
            human_age(now.duration_since(created).unwrap_or_default()),
        ];
        if wide {
            let ip = p
                .status
                .as_ref()
                .map(|s| s.pod_ip.clone())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "<none>".into());
            row.push(ip);
            row.push(p.spec.node_name.clone());
        }
        rows.push(row);
    }
    Ok(table(rows, ""))
}

/// Fetches `/node`.
pub fn fetch_node(server: &str) -> anyhow::Result<crate::api::Node> {
    fetch(server, "/node")
}

/// `ferrolet get node`: the node's name and status, its conditions, then each resource's
/// capacity and allocatable.
pub fn render_node(node: &crate::api::Node, output: Output) -> anyhow::Result<String> {
    match output {
        Output::Json => return Ok(serde_json::to_string_pretty(node)? + "\n"),
        Output::Yaml => return Ok(serde_norway::to_string(node)?),
        _ => {}
    }
    let ready = node.status.conditions.iter().find(|c| c.type_ == "Ready");
    // kubectl's STATUS column: Ready, NotReady, or Unknown when the agent does not say.
    let status = match ready.map(|c| c.status.as_str()) {
        Some("True") => "Ready",
        Some("False") => "NotReady",
        _ => "Unknown",
    };
    let mut out = format!("NAME: {}\nSTATUS: {status}\n", node.metadata.name);
    if !node.status.conditions.is_empty() {
        let mut rows = vec![["CONDITION", "STATUS", "REASON", "MESSAGE"].map(String::from).to_vec()];
        for c in &node.status.conditions {
            rows.push(vec![c.type_.clone(), c.status.clone(), c.reason.clone(), c.message.clone()]);
        }
        out.push_str(&table(rows, ""));
    }
    let mut rows = vec![vec!["RESOURCE".to_string(), "CAPACITY".into(), "ALLOCATABLE".into()]];
    for (name, cap) in &node.status.capacity {
        let alloc = node.status.allocatable.get(name).map_or("0".into(), |q| q.to_string());
        rows.push(vec![name.clone(), cap.to_string(), alloc]);
    }
    Ok(out + &table(rows, ""))
}

/// `ferrolet get devices`: each device plugin resource, its plugin and allocations.
pub fn render_devices(view: &serde_json::Value, output: Output) -> anyhow::Result<String> {
    match output {
        Output::Json => return Ok(serde_json::to_string_pretty(view)? + "\n"),
        Output::Yaml => return Ok(serde_norway::to_string(view)?),
        _ => {}
    }
    let resources: Vec<crate::node::devicemanager::state::ResourceView> =
        crate::api::from_value(&view["resources"]).unwrap_or_default();
    let mut out = format!("registration server: {}\n", view["registrationServer"].as_str().unwrap_or("?"));
    if resources.is_empty() {
        out.push_str("No device plugin resources\n");
        return Ok(out);
    }
    let mut rows = vec![["RESOURCE", "CAPACITY", "ALLOCATABLE", "ALLOCATED", "PLUGIN"].map(String::from).to_vec()];
    for r in resources {
        rows.push(vec![r.name, r.capacity.to_string(), r.allocatable.to_string(), r.allocated.to_string(), r.plugin]);
    }
    Ok(out + &table(rows, ""))
}

/// A size as `crictl images` shows it: `4.3MiB`, `1.2GiB`, `512B`.
fn human_bytes(n: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n}B")
    } else {
        format!("{v:.1}{}", units[u])
    }
}

/// Fetches `/images`.
pub fn fetch_images(server: &str) -> anyhow::Result<serde_json::Value> {
    fetch(server, "/images")
}

/// `ferrolet get images`: each image, its size, when it was last used, and whether image
/// GC may remove it (or why not).
pub fn render_images(view: &serde_json::Value, output: Output) -> anyhow::Result<String> {
    match output {
        Output::Json => return Ok(serde_json::to_string_pretty(view)? + "\n"),
        Output::Yaml => return Ok(serde_norway::to_string(view)?),
        _ => {}
    }
    let images: Vec<crate::node::imagegc::ImageView> = crate::api::from_value(&view["images"]).unwrap_or_default();
    if images.is_empty() {
        return Ok(format!("No images (image GC: {})\n", view["imageGC"].as_str().unwrap_or("?")));
    }
    let mut rows = vec![["IMAGE", "ID", "SIZE", "LAST USED", "GC"].map(String::from).to_vec()];
    for i in images {
        let id = i.id.strip_prefix("sha256:").unwrap_or(&i.id).chars().take(13).collect();
        let name = i.tags.first().cloned().unwrap_or_else(|| "<none>".into());
        let gc = match i.kept {
            Some(why) => format!("kept: {why}"),
            None => "may remove".into(),
        };
        rows.push(vec![name, id, human_bytes(i.size), i.last_used, gc]);
    }
    Ok(table(rows, ""))
}

/// Fetches `/devices`.
pub fn fetch_devices(server: &str) -> anyhow::Result<serde_json::Value> {
    fetch(server, "/devices")
}

/// `ferrolet plan cgroups` as text: the node, then each cgroup with its control files.
pub fn render_plan(plan: &crate::node::cm::Plan) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let n = &plan.node;
    let _ = writeln!(
        out,
        "node: cgroup v{}, capacity cpu={} memory={} pids={}, allocatable cpu={} memory={} pids={}",
        n.cgroup_version,
        n.capacity.cpu,
        n.capacity.memory,
        n.capacity.pids,
        n.allocatable.cpu,
        n.allocatable.memory,
        n.allocatable.pids
    );
    for c in &plan.cgroups {
        let what = match (&c.pod, &c.container) {
            (Some(p), Some(name)) => format!("container {name} of {p}"),
            (Some(p), None) => format!("pod {p}"),
            _ => format!("{:?}", c.level).to_lowercase(),
        };
        let _ = writeln!(out, "{}  ({what})", c.path);
        for (file, value) in &c.files {
            let _ = writeln!(out, "    {file} = {value}");
        }
    }
    out
}

/// kubectl's LAST SEEN / AGE cell for an event: `5s`, or `2m (x4 over 10m)` for repeats.
fn event_age(e: &Event, now: SystemTime) -> String {
    let last = e.last_timestamp.map(|t| t.0).unwrap_or(now);
    let ago = human_age(now.duration_since(last).unwrap_or_default());
    if e.count > 1 {
        let first = e.first_timestamp.map(|t| t.0).unwrap_or(last);
        format!("{ago} (x{} over {})", e.count, human_age(now.duration_since(first).unwrap_or_default()))
    } else {
        ago
    }
}

fn table(rows: Vec<Vec<String>>, indent: &str) -> String {
    // Cells come from pods, events and plugins: never let one move the cursor or split a row.
    let rows: Vec<Vec<String>> =
        rows.into_iter().map(|r| r.iter().map(|c| crate::base::logsafe::Escaped(c).to_string()).collect()).collect();
    let widths: Vec<usize> = (0..rows[0].len()).map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        out.push_str(indent);
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

/// One `get events` row: LAST SEEN, TYPE, REASON, OBJECT, MESSAGE.
fn event_row(e: &Event, now: SystemTime) -> Vec<String> {
    let o = &e.involved_object;
    vec![
        event_age(e, now),
        e.type_.clone(),
        e.reason.clone(),
        format!("{}/{}", o.kind.to_lowercase(), o.name),
        e.message.clone(),
    ]
}

/// `ferrolet get events`: the table kubectl prints.
pub fn render_events(events: &[Event], header: bool) -> String {
    let now = SystemTime::now();
    let mut rows = Vec::new();
    if header {
        rows.push(["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"].map(String::from).to_vec());
    }
    rows.extend(events.iter().map(|e| event_row(e, now)));
    if rows.is_empty() {
        return String::new();
    }
    table(rows, "")
}

fn state_lines(out: &mut String, label: &str, s: &ContainerState) {
    use std::fmt::Write as _;
    if let Some(r) = &s.running {
        let _ = writeln!(out, "    {label:<14} Running");
        if let Some(t) = r.started_at {
            let _ = writeln!(out, "      Started:      {}", crate::base::timefmt::rfc3339(t.0));
        }
    } else if let Some(t) = &s.terminated {
        let _ = writeln!(out, "    {label:<14} Terminated");
        let _ = writeln!(out, "      Reason:       {}", t.reason);
        let _ = writeln!(out, "      Exit Code:    {}", t.exit_code);
        if let Some(st) = t.started_at {
            let _ = writeln!(out, "      Started:      {}", crate::base::timefmt::rfc3339(st.0));
        }
        if let Some(f) = t.finished_at {
            let _ = writeln!(out, "      Finished:     {}", crate::base::timefmt::rfc3339(f.0));
        }
    } else if let Some(w) = &s.waiting {
        let _ = writeln!(out, "    {label:<14} Waiting");
        let _ = writeln!(out, "      Reason:       {}", w.reason);
        if !w.message.is_empty() {
            let _ = writeln!(out, "      Message:      {}", crate::base::logsafe::Escaped(&w.message));
        }
    }
}

/// `ferrolet describe pod`: the pod's status and, at the bottom, its events, as
/// `kubectl describe pod` shows them.
pub fn describe_pod(pod: &Pod, events: &[Event]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let st = pod.status.clone().unwrap_or_default();
    let m = &pod.metadata;
    let kv = |map: &std::collections::BTreeMap<String, String>, sep: &str| {
        if map.is_empty() {
            "<none>".to_string()
        } else {
            map.iter().map(|(k, v)| format!("{k}{sep}{v}")).collect::<Vec<_>>().join("\n                  ")
        }
    };
    let _ = writeln!(out, "Name:             {}", m.name);
    let _ = writeln!(out, "Namespace:        {}", m.namespace);
    let _ = writeln!(out, "Node:             {}/{}", pod.spec.node_name, st.host_ip);
    if let Some(t) = st.start_time {
        let _ = writeln!(out, "Start Time:       {}", crate::base::timefmt::rfc3339(t.0));
    }
    let _ = writeln!(out, "Labels:           {}", kv(&m.labels, "="));
    let _ = writeln!(out, "Annotations:      {}", kv(&m.annotations, ": "));
    let status = if m.deletion_timestamp.is_some() { "Terminating".to_string() } else { st.phase.to_string() };
    let _ = writeln!(out, "Status:           {status}");
    let _ = writeln!(out, "IP:               {}", st.pod_ip);
    let sections = [
        ("Init Containers:", &pod.spec.init_containers, &st.init_container_statuses),
        ("Containers:", &pod.spec.containers, &st.container_statuses),
    ];
    for (title, specs, statuses) in sections {
        if specs.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{title}");
        for c in specs {
            let _ = writeln!(out, "  {}:", c.name);
            let cs = statuses.iter().find(|s| s.name == c.name);
            if let Some(cs) = cs.filter(|cs| !cs.container_id.is_empty()) {
                let _ = writeln!(out, "    Container ID:  {}", cs.container_id);
            }
            let _ = writeln!(out, "    Image:         {}", c.image);
            if !c.command.is_empty() {
                let _ = writeln!(out, "    Command:       {}", c.command.join(" "));
            }
            if !c.args.is_empty() {
                let _ = writeln!(out, "    Args:          {}", c.args.join(" "));
            }
            if let Some(cs) = cs {
                state_lines(&mut out, "State:", &cs.state);
                state_lines(&mut out, "Last State:", &cs.last_state);
                let _ = writeln!(out, "    Ready:         {}", if cs.ready { "True" } else { "False" });
                let _ = writeln!(out, "    Restart Count: {}", cs.restart_count);
                for r in &cs.allocated_resources_status {
                    let ids: Vec<String> =
                        r.resources.iter().map(|d| format!("{} ({})", d.resource_id, d.health)).collect();
                    let _ = writeln!(out, "    Devices:       {}: {}", r.name, ids.join(", "));
                }
            }
            for (kind, q) in [("Limits", &c.resources.limits), ("Requests", &c.resources.requests)] {
                if !q.is_empty() {
                    let _ = writeln!(out, "    {kind}:");
                    for (k, v) in q {
                        let _ = writeln!(out, "      {k}: {v}");
                    }
                }
            }
            if !c.env.is_empty() {
                let _ = writeln!(out, "    Environment:");
                for e in &c.env {
                    let _ = writeln!(out, "      {}: {}", e.name, e.value);
                }
            }
        }
    }
    if !st.conditions.is_empty() {
        let _ = writeln!(out, "Conditions:");
        let mut rows = vec![vec!["Type".to_string(), "Status".to_string()]];
        rows.extend(st.conditions.iter().map(|c| vec![c.type_.clone(), c.status.clone()]));
        out.push_str(&table(rows, "  "));
    }
    if !st.qos_class.is_empty() {
        let _ = writeln!(out, "QoS Class:        {}", st.qos_class);
    }
    if events.is_empty() {
        let _ = writeln!(out, "Events:           <none>");
    } else {
        let _ = writeln!(out, "Events:");
        let now = SystemTime::now();
        let mut rows = vec![["Type", "Reason", "Age", "From", "Message"].map(String::from).to_vec()];
        rows.push(["----", "------", "----", "----", "-------"].map(String::from).to_vec());
        for e in events {
            rows.push(vec![
                e.type_.clone(),
                e.reason.clone(),
                event_age(e, now),
                e.source.component.clone(),
                e.message.clone(),
            ]);
        }
        out.push_str(&table(rows, "  "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        Container, ContainerState, ContainerStateWaiting, ContainerStatus, PodCondition, PodPhase, PodStatus,
    };

    fn waiting(name: &str, reason: &str, restarts: i32) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            restart_count: restarts,
            state: ContainerState {
                waiting: Some(ContainerStateWaiting { reason: reason.into(), message: String::new() }),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn images_show_their_size_last_use_and_what_keeps_them() {
        let view = serde_json::json!({"imageGC": "on", "images": [
            {"id": "sha256:0123456789abcdef", "tags": ["docker.io/library/busybox:1.36"], "size": 4_400_000u64,
             "firstDetected": "2026-11-23T08:00:00Z", "lastUsed": "2026-11-23T09:00:00Z", "kept": "in use"},
            {"id": "sha256:fedcba9876543210", "tags": [], "size": 512,
             "firstDetected": "2026-11-23T08:00:00Z", "lastUsed": "2026-11-23T08:00:00Z"},
        ]});
        assert_eq!(
            render_images(&view, Output::Table).unwrap(),
            "IMAGE                            ID              SIZE     LAST USED              GC\n\
             docker.io/library/busybox:1.36   0123456789abc   4.2MiB   2026-11-23T09:00:00Z   kept: in use\n\
             <none>                           fedcba9876543   512B     2026-11-23T08:00:00Z   may remove\n"
        );
        assert_eq!(
            render_images(
                &serde_json::json!({"imageGC": "off (the runtime has no images)", "images": []}),
                Output::Table
            )
            .unwrap(),
            "No images (image GC: off (the runtime has no images))\n"
        );
    }

    #[test]
    fn table_cells_cannot_carry_terminal_control_characters() {
        let out = table(vec![vec!["MESSAGE".into()], vec!["probe said \u{1b}[2Jhi\nfake row".into()]], "");
        assert_eq!(out, "MESSAGE\nprobe said \\u{1b}[2Jhi\\nfake row\n");
    }

    #[test]
    fn status_column_follows_kubectl() {
        let mut pod = Pod::default();
        pod.spec.containers.push(Container { name: "app".into(), ..Default::default() });
        pod.status = Some(PodStatus {
            phase: PodPhase::Running,
            container_statuses: vec![waiting("app", "CrashLoopBackOff", 4)],
            ..Default::default()
        });
        assert_eq!(pod_columns(&pod), ("CrashLoopBackOff".into(), "0/1".into(), "4".into()));

        pod.spec.init_containers.push(Container { name: "setup".into(), ..Default::default() });
        pod.status = Some(PodStatus {
            phase: PodPhase::Pending,
            init_container_statuses: vec![waiting("setup", "PodInitializing", 0)],
            container_statuses: vec![waiting("app", "PodInitializing", 0)],
            conditions: vec![PodCondition {
                type_: "Initialized".into(),
                status: "False".into(),
                last_probe_time: None,
                last_transition_time: None,
                reason: String::new(),
                message: String::new(),
            }],
            ..Default::default()
        });
        assert_eq!(pod_columns(&pod).0, "Init:0/1");
    }

    #[test]
    fn describe_pod_shows_the_qos_class() {
        let pod = Pod {
            status: Some(PodStatus { qos_class: "Burstable".into(), ..Default::default() }),
            ..Default::default()
        };
        let text = describe_pod(&pod, &[]);
        assert!(text.contains("\nQoS Class:        Burstable\n"), "{text}");
    }

    #[test]
    fn get_node_shows_readiness_and_the_conditions() {
        let mut node = crate::api::Node::default();
        node.metadata.name = "edge1".into();
        let now = SystemTime::now();
        node.status.conditions = crate::node::status::health::node_conditions(&[], None, now, now, now);
        let text = render_node(&node, Output::Table).unwrap();
        let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(lines[1], ["STATUS:", "Ready"]);
        assert_eq!(&lines[2][..3], ["CONDITION", "STATUS", "REASON"]);
        assert_eq!(&lines[3][..3], ["MemoryPressure", "False", "KubeletHasSufficientMemory"]);
        assert_eq!(&lines[6][..3], ["Ready", "True", "KubeletReady"]);
        assert!(text.contains("kubelet is posting ready status"), "{text}");
        node.status.conditions =
            crate::node::status::health::node_conditions(&["fl-pods died".into()], None, now, now, now);
        let text = render_node(&node, Output::Table).unwrap();
        let ready: Vec<&str> = text.lines().find(|l| l.starts_with("Ready")).unwrap().split_whitespace().collect();
        assert!(text.contains("STATUS: NotReady"), "{text}");
        assert_eq!(ready, ["Ready", "False", "KubeletNotReady", "fl-pods", "died"]);
    }
}
