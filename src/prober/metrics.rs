//! Probe metrics: `prober_probe_total`, `prober_probe_duration_seconds` (as kubelet), the
//! scheduler's lateness, and the pool's thread and worker gauges.

use super::{ProbeTarget, ProbeType};
use crate::metrics::{CounterVec, Encoder, HistogramVec, Kind, LabelSet};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// (container, pod, namespace) of a worker's metric series, shared by the worker.
pub type SeriesLabels = Arc<(String, String, String)>;

/// The labels of a target's series.
pub fn series_labels(t: &ProbeTarget) -> SeriesLabels {
    Arc::new((t.container.name.clone(), t.reference.object.name.clone(), t.reference.object.namespace.clone()))
}

/// A `prober_probe_total` series: probe type, result, and the worker's labels.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct TotalKey(ProbeType, &'static str, SeriesLabels);

impl LabelSet for TotalKey {
    fn values(&self) -> Vec<&str> {
        let (c, pod, ns) = &*self.2;
        vec![self.0.name(), self.1, c, pod, ns]
    }
}

/// A `prober_probe_duration_seconds` series: probe type and the worker's labels.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct DurationKey(ProbeType, SeriesLabels);

impl LabelSet for DurationKey {
    fn values(&self) -> Vec<&str> {
        let (c, pod, ns) = &*self.1;
        vec![self.0.name(), c, pod, ns]
    }
}

/// `prober_probe_total`, `prober_probe_duration_seconds`, and the scheduler's lateness.
pub struct ProberMetrics {
    total: CounterVec<TotalKey>,
    duration: HistogramVec<DurationKey>,
    lateness: Mutex<VecDeque<Duration>>,
    pub(super) threads: std::sync::atomic::AtomicUsize,
    pub(super) workers: std::sync::atomic::AtomicUsize,
}

impl Default for ProberMetrics {
    fn default() -> Self {
        ProberMetrics {
            total: CounterVec::new(
                "prober_probe_total",
                "Cumulative number of a liveness, readiness or startup probe for a container by result.",
                &["probe_type", "result", "container", "pod", "namespace"],
            ),
            duration: HistogramVec::new(
                "prober_probe_duration_seconds",
                "Duration in seconds for a probe response.",
                &["probe_type", "container", "pod", "namespace"],
            ),
            lateness: Mutex::default(),
            threads: Default::default(),
            workers: Default::default(),
        }
    }
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
        self.total.inc(TotalKey(kind, result, labels.clone()));
        // As kubelet: durations of successful and unknown probes only.
        if result != "failed" {
            self.duration.observe(DurationKey(kind, labels.clone()), took);
        }
        let mut l = self.lateness.lock();
        if l.len() == 10_000 {
            l.pop_front();
        }
        l.push_back(late);
    }

    /// Drops a worker's series.
    pub(super) fn forget(&self, kind: ProbeType, labels: &SeriesLabels) {
        self.total.retain(|k| !(k.0 == kind && &k.2 == labels));
        self.duration.retain(|k| !(k.0 == kind && &k.1 == labels));
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
        use std::sync::atomic::Ordering;
        let mut enc = Encoder::new(out);
        self.total.encode(&mut enc);
        self.duration.encode(&mut enc);
        enc.single("ferrolet_prober_workers", Kind::Gauge, "Probe workers.", self.workers.load(Ordering::Relaxed));
        enc.single("ferrolet_prober_threads", Kind::Gauge, "Probe pool threads.", self.threads.load(Ordering::Relaxed));
        if let Some((p50, p99, max)) = self.lateness() {
            let name = "ferrolet_prober_lateness_seconds";
            enc.family(name, Kind::Summary, "Probe start minus its scheduled time, over the last 10000 probes.");
            for (q, d) in [("0.5", p50), ("0.99", p99), ("1", max)] {
                enc.sample(name, &[("quantile", q)], d.as_secs_f64());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(c: &str) -> SeriesLabels {
        Arc::new((c.to_string(), "web-n1".to_string(), "default".to_string()))
    }

    #[test]
    fn probes_are_counted_by_result_and_only_answered_ones_are_timed() {
        let m = ProberMetrics::default();
        let (app, ms) = (labels("app"), Duration::from_millis(3));
        m.observe(ProbeType::Liveness, "failed", &app, ms, Duration::ZERO);
        m.observe(ProbeType::Readiness, "successful", &app, ms, Duration::from_millis(2));
        let mut out = String::new();
        m.render(&mut out);
        let series = "container=\"app\",pod=\"web-n1\",namespace=\"default\"";
        assert!(
            out.contains(&format!("prober_probe_total{{probe_type=\"Liveness\",result=\"failed\",{series}}} 1\n")),
            "{out}"
        );
        assert!(
            out.contains(&format!(
                "prober_probe_duration_seconds_bucket{{probe_type=\"Readiness\",{series},le=\"0.005\"}} 1\n"
            )),
            "{out}"
        );
        assert!(
            out.contains(&format!("prober_probe_duration_seconds_count{{probe_type=\"Readiness\",{series}}} 1\n")),
            "{out}"
        );
        assert!(!out.contains("prober_probe_duration_seconds_count{probe_type=\"Liveness\""), "{out}");
        assert!(
            out.contains(
                "# TYPE ferrolet_prober_lateness_seconds summary\nferrolet_prober_lateness_seconds{quantile=\"0.5\"}"
            ),
            "{out}"
        );
    }

    #[test]
    fn a_forgotten_worker_leaves_no_series_and_label_values_are_escaped() {
        let m = ProberMetrics::default();
        let odd = labels("a\"b\\c\nd");
        m.observe(ProbeType::Startup, "successful", &odd, Duration::ZERO, Duration::ZERO);
        let mut out = String::new();
        m.render(&mut out);
        assert!(out.contains("container=\"a\\\"b\\\\c\\nd\""), "{out}");
        m.forget(ProbeType::Startup, &odd);
        let mut out = String::new();
        m.render(&mut out);
        assert!(!out.contains("probe_type=\"Startup\""), "{out}");
    }
}
