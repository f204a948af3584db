//! What `/stats/summary` and `/metrics/resource` serve, on the local API and on kubelet's
//! API: kubelet's stats `Summary` JSON (`k8s.io/kubelet/pkg/apis/stats/v1alpha1`) and its
//! resource metrics (`pkg/kubelet/metrics/collectors/resource_metrics.go`, what
//! metrics-server scrapes for `kubectl top` and the HorizontalPodAutoscaler). Both are
//! rendered from the last `node::stats::Snapshot` that `fl-stats` collected: nothing is
//! measured per request. The renderers are pure (a snapshot in, bytes out); the two
//! `*_response` functions only read the view and pick the status.

use super::http::Response;
use crate::api::Time;
use crate::base::errors::Chain;
use crate::base::metrics::{Encoder, GoFloat, Kind};
use crate::node::stats::{
    ContainerStats, CpuStats, FsStats, MemoryStats, PodStats, RlimitStats, Snapshot, StatsView, PERIOD,
};
use serde::{Serialize, Serializer};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A snapshot older than this is not served: the collection has stopped, and numbers that
/// no longer move would mislead an autoscaler (three missed collections).
pub const STALE_AFTER: Duration = Duration::from_secs(PERIOD.as_secs() * 3);

/// The largest `/stats/summary` body written. At 110 pods of a few containers each it is a
/// few hundred KiB; the bound holds what a request may cost whatever the snapshot holds.
pub const MAX_SUMMARY_BYTES: usize = 16 << 20;

/// The `Content-Type` of `/metrics/resource` (Prometheus' text format, as kubelet's).
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Why there is nothing to serve.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// No collection has finished since the agent started.
    #[error(
        "metrics not available yet: the first stats collection has not finished (they are collected every {}s)",
        PERIOD.as_secs()
    )]
    NotYet,
    /// The last collection is older than `STALE_AFTER`.
    #[error("metrics not available: the last stats collection ended at {}, over {}s ago", crate::base::timefmt::rfc3339(*.at), STALE_AFTER.as_secs())]
    Stale {
        /// When it ended.
        at: SystemTime,
    },
}

/// The snapshot to serve at `now`, or why there is none. A snapshot without a time, or one
/// from the future (the clock was set back), is served.
pub fn usable(snapshot: Option<&Snapshot>, now: SystemTime) -> Result<&Snapshot, Unavailable> {
    let s = snapshot.ok_or(Unavailable::NotYet)?;
    match s.time {
        Some(at) if now.duration_since(at).is_ok_and(|age| age > STALE_AFTER) => Err(Unavailable::Stale { at }),
        _ => Ok(s),
    }
}

/// Whether a `/stats/summary` query asks for CPU and memory only: as kubelet, exactly one
/// `only_cpu_and_memory` parameter whose value is exactly `true`. `params` are decoded.
pub fn only_cpu_and_memory<'a>(params: impl IntoIterator<Item = (&'a str, &'a str)>) -> bool {
    let values: Vec<&str> = params.into_iter().filter(|(k, _)| *k == "only_cpu_and_memory").map(|(_, v)| v).collect();
    values == ["true"]
}

/// The answer to `GET /stats/summary`: the JSON, or 503 with why there is none.
pub fn summary_response(view: &StatsView, only_cpu_and_memory: bool, now: SystemTime) -> Response {
    let snapshot = view.get();
    match usable(snapshot.as_deref(), now) {
        Err(why) => Response::text(503, format!("{why}\n")),
        Ok(s) => match summary_json(s, only_cpu_and_memory) {
            Ok(body) => Response { body, ..Response::json(String::new()) },
            Err(e) => {
                log::warn!("server: /stats/summary: {}", Chain(&e));
                Response::text(500, format!("Internal Error: {e}\n"))
            }
        },
    }
}

/// The answer to `GET /metrics/resource`: always 200, as kubelet's; without a snapshot to
/// serve, only `resource_scrape_error 1`.
pub fn resource_metrics_response(view: &StatsView, now: SystemTime) -> Response {
    let snapshot = view.get();
    let usable = usable(snapshot.as_deref(), now);
    if let Err(why) = &usable {
        log::debug!("server: /metrics/resource: {why}");
    }
    Response { content_type: METRICS_CONTENT_TYPE, ..Response::text(200, resource_metrics(usable.ok())) }
}

/// Why a summary was not written.
#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    /// It would be larger than `MAX_SUMMARY_BYTES`.
    #[error("the stats summary is larger than {max} bytes")]
    TooLarge {
        /// The bound.
        max: usize,
        /// The write that failed.
        #[source]
        source: serde_json::Error,
    },
}

/// kubelet's `Summary` of `s` as JSON, indented as kubelet's (go-restful's pretty printing).
/// With `only_cpu_and_memory`, as kubelet's `GetCPUAndMemoryStats`: the node's name, start
/// time, CPU, memory and system containers, and each pod's reference, start time, CPU,
/// memory and containers with only their CPU and memory.
pub fn summary_json(s: &Snapshot, only_cpu_and_memory: bool) -> Result<Vec<u8>, SummaryError> {
    write_summary(s, only_cpu_and_memory, MAX_SUMMARY_BYTES)
}

/// `summary_json` with at most `max` bytes.
fn write_summary(s: &Snapshot, only: bool, max: usize) -> Result<Vec<u8>, SummaryError> {
    let containers: usize = s.pods.iter().map(|p| p.containers.len()).sum();
    let estimate = 1024 + s.pods.len() * 1536 + containers * 1024;
    let mut out = Bounded { buf: Vec::with_capacity(estimate.min(max)), max };
    let summary = SummaryOut { node: node_out(s, only), pods: PodsOut { s, only } };
    serde_json::to_writer_pretty(&mut out, &summary).map_err(|source| SummaryError::TooLarge { max, source })?;
    Ok(out.buf)
}

/// A `Vec` writer that refuses to grow past `max`.
struct Bounded {
    buf: Vec<u8>,
    max: usize,
}

impl std::io::Write for Bounded {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + b.len() > self.max {
            return Err(std::io::Error::other("the response buffer is full"));
        }
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// The wire shapes of kubelet's types, field for field in its order, borrowing from the
// snapshot. `metav1.Time` fields without `omitempty` are `null` when unknown, as Go writes a
// zero time; the `omitempty` pointers are left out when `None`.

#[derive(Serialize)]
struct SummaryOut<'a> {
    node: NodeOut<'a>,
    pods: PodsOut<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NodeOut<'a> {
    node_name: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system_containers: Vec<ContainerOut<'a>>,
    start_time: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu: Option<CpuOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory: Option<MemoryOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fs: Option<FsOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    runtime: Option<RuntimeOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rlimit: Option<RlimitOut>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RuntimeOut {
    image_fs: FsOut,
}

#[derive(Serialize)]
struct RlimitOut {
    time: Option<Time>,
    maxpid: u64,
    curproc: u64,
}

/// The pods, written one at a time as the serializer goes.
struct PodsOut<'a> {
    s: &'a Snapshot,
    only: bool,
}

impl Serialize for PodsOut<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        ser.collect_seq(self.s.pods.iter().map(|p| pod_out(p, self.only)))
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PodOut<'a> {
    pod_ref: PodRef<'a>,
    start_time: Option<Time>,
    containers: Vec<ContainerOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu: Option<CpuOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory: Option<MemoryOut>,
    #[serde(rename = "volume", skip_serializing_if = "Vec::is_empty")]
    volumes: Vec<VolumeOut<'a>>,
    #[serde(rename = "ephemeral-storage", skip_serializing_if = "Option::is_none")]
    ephemeral_storage: Option<FsOut>,
    #[serde(rename = "process_stats", skip_serializing_if = "Option::is_none")]
    process_stats: Option<ProcessOut>,
}

#[derive(Serialize)]
struct PodRef<'a> {
    name: &'a str,
    namespace: &'a str,
    uid: &'a str,
}

#[derive(Serialize)]
struct ProcessOut {
    process_count: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ContainerOut<'a> {
    name: &'a str,
    start_time: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu: Option<CpuOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory: Option<MemoryOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rootfs: Option<FsOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    logs: Option<FsOut>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CpuOut {
    time: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage_nano_cores: Option<u64>,
    usage_core_nano_seconds: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MemoryOut {
    time: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    available_bytes: Option<u64>,
    usage_bytes: u64,
    working_set_bytes: u64,
    rss_bytes: u64,
    page_faults: u64,
    major_page_faults: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FsOut {
    time: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    capacity_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    used_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inodes_free: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inodes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inodes_used: Option<u64>,
}

/// kubelet's `VolumeStats`: the `FsStats` fields inline, then the name.
#[derive(Serialize)]
struct VolumeOut<'a> {
    #[serde(flatten)]
    fs: FsOut,
    #[serde(skip_serializing_if = "str::is_empty")]
    name: &'a str,
}

fn time(t: Option<SystemTime>) -> Option<Time> {
    t.map(Time)
}

fn cpu_out(c: CpuStats) -> CpuOut {
    CpuOut {
        time: time(c.time),
        usage_nano_cores: c.usage_nano_cores,
        usage_core_nano_seconds: c.usage_core_nano_seconds,
    }
}

fn memory_out(m: MemoryStats) -> MemoryOut {
    MemoryOut {
        time: time(m.time),
        available_bytes: m.available_bytes,
        usage_bytes: m.usage_bytes,
        working_set_bytes: m.working_set_bytes,
        rss_bytes: m.rss_bytes,
        page_faults: m.page_faults,
        major_page_faults: m.major_page_faults,
    }
}

fn fs_out(f: FsStats) -> FsOut {
    FsOut {
        time: time(f.time),
        available_bytes: f.available_bytes,
        capacity_bytes: f.capacity_bytes,
        used_bytes: f.used_bytes,
        inodes_free: f.inodes_free,
        inodes: f.inodes,
        inodes_used: f.inodes_used,
    }
}

fn rlimit_out(r: RlimitStats) -> RlimitOut {
    RlimitOut { time: time(r.time), maxpid: r.max_pid, curproc: r.num_of_running_processes }
}

/// The name kubelet gives the system container of the pods' cgroup (`kubepods`).
pub const SYSTEM_CONTAINER_PODS: &str = "pods";

fn node_out(s: &Snapshot, only: bool) -> NodeOut<'_> {
    let n = &s.node;
    let mut system_containers = Vec::new();
    if n.pods_cpu.is_some() || n.pods_memory.is_some() {
        system_containers.push(ContainerOut {
            name: SYSTEM_CONTAINER_PODS,
            start_time: None,
            cpu: n.pods_cpu.map(cpu_out),
            memory: n.pods_memory.map(memory_out),
            rootfs: None,
            logs: None,
        });
    }
    NodeOut {
        node_name: &n.node_name,
        system_containers,
        start_time: time(n.start_time),
        cpu: n.cpu.map(cpu_out),
        memory: n.memory.map(memory_out),
        fs: n.fs.filter(|_| !only).map(fs_out),
        runtime: n.image_fs.filter(|_| !only).map(|f| RuntimeOut { image_fs: fs_out(f) }),
        rlimit: n.rlimit.filter(|_| !only).map(rlimit_out),
    }
}

fn container_out(c: &ContainerStats, only: bool) -> ContainerOut<'_> {
    ContainerOut {
        name: &c.name,
        start_time: time(c.start_time),
        cpu: c.cpu.map(cpu_out),
        memory: c.memory.map(memory_out),
        rootfs: c.rootfs.filter(|_| !only).map(fs_out),
        logs: c.logs.filter(|_| !only).map(fs_out),
    }
}

fn pod_out(p: &PodStats, only: bool) -> PodOut<'_> {
    PodOut {
        pod_ref: PodRef { name: &p.name, namespace: &p.namespace, uid: &p.uid },
        start_time: time(p.start_time),
        containers: p.containers.iter().map(|c| container_out(c, only)).collect(),
        cpu: p.cpu.map(cpu_out),
        memory: p.memory.map(memory_out),
        volumes: if only {
            Vec::new()
        } else {
            p.volumes.iter().map(|v| VolumeOut { fs: fs_out(v.fs), name: &v.name }).collect()
        },
        ephemeral_storage: p.ephemeral_storage.filter(|_| !only).map(fs_out),
        process_stats: p.process_count.filter(|_| !only).map(|n| ProcessOut { process_count: n }),
    }
}

/// One family of `/metrics/resource`: its series, each with its label values in the
/// family's label order (sorted by name, as Prometheus' registry writes them), value and
/// timestamp.
struct Family<'a> {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    labels: &'static [&'static str],
    series: Vec<(Vec<&'a str>, f64, Option<i64>)>,
}

impl<'a> Family<'a> {
    fn new(name: &'static str, kind: Kind, help: &'static str, labels: &'static [&'static str]) -> Self {
        Family { name, kind, help, labels, series: Vec::new() }
    }

    fn push(&mut self, labels: Vec<&'a str>, value: f64, at: Option<i64>) {
        debug_assert_eq!(labels.len(), self.labels.len(), "{}", self.name);
        self.series.push((labels, value, at));
    }

    /// Writes the family, its series sorted by label values, as the registry gathers them;
    /// a family without series is left out, and of series with the same labels (a pod
    /// replaced under the same name within one collection) the first is kept, since the
    /// registry refuses duplicates.
    fn encode(mut self, enc: &mut Encoder) {
        if self.series.is_empty() {
            return;
        }
        self.series.sort_by(|a, b| a.0.cmp(&b.0));
        self.series.dedup_by(|later, first| later.0 == first.0);
        enc.family(self.name, self.kind, self.help);
        for (values, value, at) in &self.series {
            let labels: Vec<(&str, &str)> = self.labels.iter().copied().zip(values.iter().copied()).collect();
            enc.sample_at(self.name, &labels, GoFloat(*value), *at);
        }
    }
}

/// `t` in milliseconds since the epoch (`fallback` when `t` is unknown; none before 1970).
fn millis(t: Option<SystemTime>, fallback: Option<SystemTime>) -> Option<i64> {
    let d = t.or(fallback)?.duration_since(UNIX_EPOCH).ok()?;
    i64::try_from(d.as_millis()).ok()
}

/// Cumulative core-nanoseconds as the counter's core-seconds.
fn seconds(nanos: u64) -> f64 {
    nanos as f64 / 1e9
}

const CONTAINER_LABELS: &[&str] = &["container", "namespace", "pod"];
const POD_LABELS: &[&str] = &["namespace", "pod"];

/// kubelet's `/metrics/resource` page for `s` (`None`: there is no snapshot to serve, and
/// the page says only `resource_scrape_error 1`). The families, in name order as kubelet's
/// registry writes them, each left out when it has no series: `container_cpu_usage_seconds_total`,
/// `container_memory_working_set_bytes`, `container_start_time_seconds`,
/// `node_cpu_usage_seconds_total`, `node_memory_working_set_bytes`,
/// `pod_cpu_usage_seconds_total`, `pod_memory_working_set_bytes`, `resource_scrape_error`.
/// Each usage sample carries the time it was read, in milliseconds; the start times none.
/// No `*_swap_*` families: ferrolet does not measure swap.
pub fn resource_metrics(s: Option<&Snapshot>) -> String {
    let mut container_cpu = Family::new(
        "container_cpu_usage_seconds_total",
        Kind::Counter,
        "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
        CONTAINER_LABELS,
    );
    let mut container_memory = Family::new(
        "container_memory_working_set_bytes",
        Kind::Gauge,
        "[STABLE] Current working set of the container in bytes",
        CONTAINER_LABELS,
    );
    let mut container_start = Family::new(
        "container_start_time_seconds",
        Kind::Gauge,
        "[STABLE] Start time of the container since unix epoch in seconds",
        CONTAINER_LABELS,
    );
    let mut node_cpu = Family::new(
        "node_cpu_usage_seconds_total",
        Kind::Counter,
        "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
        &[],
    );
    let mut node_memory = Family::new(
        "node_memory_working_set_bytes",
        Kind::Gauge,
        "[STABLE] Current working set of the node in bytes",
        &[],
    );
    let mut pod_cpu = Family::new(
        "pod_cpu_usage_seconds_total",
        Kind::Counter,
        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
        POD_LABELS,
    );
    let mut pod_memory = Family::new(
        "pod_memory_working_set_bytes",
        Kind::Gauge,
        "[STABLE] Current working set of the pod in bytes",
        POD_LABELS,
    );
    if let Some(s) = s {
        let fallback = s.time;
        if let Some(c) = s.node.cpu {
            node_cpu.push(vec![], seconds(c.usage_core_nano_seconds), millis(c.time, fallback));
        }
        if let Some(m) = s.node.memory {
            node_memory.push(vec![], m.working_set_bytes as f64, millis(m.time, fallback));
        }
        for p in &s.pods {
            for c in &p.containers {
                let labels = || vec![c.name.as_str(), p.namespace.as_str(), p.name.as_str()];
                let started = c.start_time.and_then(|t| t.duration_since(UNIX_EPOCH).ok()).filter(|d| d.as_secs() > 0);
                if let Some(d) = started {
                    container_start.push(labels(), d.as_nanos() as f64 / 1e9, None);
                }
                if let Some(cpu) = c.cpu {
                    container_cpu.push(labels(), seconds(cpu.usage_core_nano_seconds), millis(cpu.time, fallback));
                }
                if let Some(m) = c.memory {
                    container_memory.push(labels(), m.working_set_bytes as f64, millis(m.time, fallback));
                }
            }
            let labels = || vec![p.namespace.as_str(), p.name.as_str()];
            if let Some(cpu) = p.cpu {
                pod_cpu.push(labels(), seconds(cpu.usage_core_nano_seconds), millis(cpu.time, fallback));
            }
            if let Some(m) = p.memory {
                pod_memory.push(labels(), m.working_set_bytes as f64, millis(m.time, fallback));
            }
        }
    }
    let mut out = String::with_capacity(512 + s.map_or(0, |s| s.pods.len()) * 1024);
    let mut enc = Encoder::new(&mut out);
    for family in [container_cpu, container_memory, container_start, node_cpu, node_memory, pod_cpu, pod_memory] {
        family.encode(&mut enc);
    }
    enc.single(
        "resource_scrape_error",
        Kind::Gauge,
        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
        u8::from(s.is_none()),
    );
    out
}

#[cfg(test)]
mod tests;
