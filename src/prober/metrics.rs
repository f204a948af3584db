//! Probe metrics: `prober_probe_total`, `prober_probe_duration_seconds` (as kubelet), the
//! scheduler's lateness, and the pool's thread and worker gauges.

use super::{ProbeTarget, ProbeType};
use parking_lot::Mutex;
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

const BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

/// (container, pod, namespace) of a worker's metric series, shared by the worker.
pub type SeriesLabels = Arc<(String, String, String)>;

/// The labels of a target's series.
pub fn series_labels(t: &ProbeTarget) -> SeriesLabels {
    Arc::new((t.container.name.clone(), t.reference.object.name.clone(), t.reference.object.namespace.clone()))
}

/// `prober_probe_total`, `prober_probe_duration_seconds`, and the scheduler's lateness.
#[derive(Default)]
pub struct ProberMetrics {
    total: Mutex<BTreeMap<(ProbeType, &'static str, SeriesLabels), u64>>,
    duration: Mutex<BTreeMap<(ProbeType, SeriesLabels), Histogram>>,
    lateness: Mutex<VecDeque<Duration>>,
    pub(super) threads: std::sync::atomic::AtomicUsize,
    pub(super) workers: std::sync::atomic::AtomicUsize,
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

impl ProberMetrics {
    pub(super) fn observe(
        &self,
        kind: ProbeType,
        result: &'static str,
        labels: &SeriesLabels,
        took: Duration,
        late: Duration,
    ) {
        let labels = labels.clone();
        *self.total.lock().entry((kind, result, labels.clone())).or_insert(0) += 1;
        // As kubelet: durations of successful and unknown probes only.
        if result != "failed" {
            let mut d = self.duration.lock();
            let h = d.entry((kind, labels)).or_default();
            let secs = took.as_secs_f64();
            for (i, b) in BUCKETS.iter().enumerate() {
                if secs <= *b {
                    h.counts[i] += 1;
                }
            }
            h.sum += secs;
            h.count += 1;
        }
        let mut l = self.lateness.lock();
        if l.len() == 10_000 {
            l.pop_front();
        }
        l.push_back(late);
    }

    /// Drops a worker's series.
    pub(super) fn forget(&self, kind: ProbeType, labels: &SeriesLabels) {
        self.total.lock().retain(|k, _| !(k.0 == kind && &k.2 == labels));
        self.duration.lock().retain(|k, _| !(k.0 == kind && &k.1 == labels));
    }

    /// The p50, p99 and maximum scheduling lateness over the last 10,000 probes.
    pub fn lateness(&self) -> Option<(Duration, Duration, Duration)> {
        let mut v: Vec<Duration> = self.lateness.lock().iter().copied().collect();
        if v.is_empty() {
            return None;
        }
        v.sort();
        let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
        Some((q(0.5), q(0.99), v[v.len() - 1]))
    }

    /// Appends the Prometheus text.
    pub fn render(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP prober_probe_total Cumulative number of a liveness, readiness or startup probe for a container by result.\n# TYPE prober_probe_total counter");
        for ((kind, result, l), n) in self.total.lock().iter() {
            let (c, pod, ns) = &**l;
            let _ = writeln!(out, "prober_probe_total{{probe_type=\"{}\",result=\"{result}\",container=\"{}\",pod=\"{}\",namespace=\"{}\"}} {n}", kind.name(), escape(c), escape(pod), escape(ns));
        }
        let _ = writeln!(out, "# HELP prober_probe_duration_seconds Duration in seconds for a probe response.\n# TYPE prober_probe_duration_seconds histogram");
        for ((kind, l), h) in self.duration.lock().iter() {
            let (c, pod, ns) = &**l;
            let labels = format!(
                "probe_type=\"{}\",container=\"{}\",pod=\"{}\",namespace=\"{}\"",
                kind.name(),
                escape(c),
                escape(pod),
                escape(ns)
            );
            for (i, b) in BUCKETS.iter().enumerate() {
                let _ = writeln!(out, "prober_probe_duration_seconds_bucket{{{labels},le=\"{b}\"}} {}", h.counts[i]);
            }
            let _ = writeln!(out, "prober_probe_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
            let _ = writeln!(out, "prober_probe_duration_seconds_sum{{{labels}}} {}", h.sum);
            let _ = writeln!(out, "prober_probe_duration_seconds_count{{{labels}}} {}", h.count);
        }
        use std::sync::atomic::Ordering;
        let _ = writeln!(out, "# HELP ferrolet_prober_workers Probe workers.\n# TYPE ferrolet_prober_workers gauge");
        let _ = writeln!(out, "ferrolet_prober_workers {}", self.workers.load(Ordering::Relaxed));
        let _ =
            writeln!(out, "# HELP ferrolet_prober_threads Probe pool threads.\n# TYPE ferrolet_prober_threads gauge");
        let _ = writeln!(out, "ferrolet_prober_threads {}", self.threads.load(Ordering::Relaxed));
        if let Some((p50, p99, max)) = self.lateness() {
            let _ = writeln!(out, "# HELP ferrolet_prober_lateness_seconds Probe start minus its scheduled time, over the last 10000 probes.\n# TYPE ferrolet_prober_lateness_seconds summary");
            for (q, d) in [("0.5", p50), ("0.99", p99), ("1", max)] {
                let _ = writeln!(out, "ferrolet_prober_lateness_seconds{{quantile=\"{q}\"}} {}", d.as_secs_f64());
            }
        }
    }
}
