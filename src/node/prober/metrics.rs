//! Probe metrics: `prober_probe_total`, `prober_probe_duration_seconds` (as kubelet), the
//! scheduler's lateness, and the pool's thread and worker gauges.

use super::{ProbeTarget, ProbeType};
use crate::base::metrics::{AtomicHistogram, Encoder, Kind};
use parking_lot::Mutex;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// (container, pod, namespace) of a worker's metric series, shared by the worker.
pub type SeriesLabels = Arc<(String, String, String)>;

/// The labels of a target's series.
pub fn series_labels(t: &ProbeTarget) -> SeriesLabels {
    Arc::new((t.container.name.clone(), t.reference.object.name.clone(), t.reference.object.namespace.clone()))
}

/// The results `prober_probe_total` counts, in the order its series are written.
const RESULTS: [&str; 3] = ["failed", "successful", "unknown"];

/// One worker's series (probe type and labels): counts by result and the duration
/// histogram, updated on every probe without a lock or a lookup.
#[derive(Default)]
pub struct Series {
    total: [AtomicU64; 3],
    duration: AtomicHistogram,
}

/// A series' label values after the probe type: container, pod, namespace.
fn values(kind: ProbeType, l: &SeriesLabels) -> [&str; 4] {
    [kind.name(), &l.0, &l.1, &l.2]
}

/// The series of every worker, by probe type and labels.
type SeriesMap = BTreeMap<(ProbeType, SeriesLabels), Arc<Series>>;

/// `prober_probe_total`, `prober_probe_duration_seconds`, and the scheduler's lateness.
#[derive(Default)]
pub struct ProberMetrics {
    series: Mutex<SeriesMap>,
    lateness: Mutex<VecDeque<Duration>>,
    pub(super) threads: std::sync::atomic::AtomicUsize,
    pub(super) workers: std::sync::atomic::AtomicUsize,
}

impl ProberMetrics {
    /// The series a worker updates: made on its first use, shared by workers with the same
    /// type and labels (a pod replaced under the same name) so each is written once.
    pub(super) fn series(&self, kind: ProbeType, labels: &SeriesLabels) -> Arc<Series> {
        self.series.lock().entry((kind, labels.clone())).or_default().clone()
    }

    /// Counts a probe's result (`failed`, `successful` or `unknown`) and, as kubelet, the
    /// duration of successful and unknown ones; records its lateness.
    pub(super) fn observe(&self, series: &Series, result: &'static str, took: Duration, late: Duration) {
        if let Some(i) = RESULTS.iter().position(|r| *r == result) {
            series.total[i].fetch_add(1, Ordering::Relaxed);
        }
        if result != "failed" {
            series.duration.observe(took);
        }
        let mut l = self.lateness.lock();
        if l.len() == 10_000 {
            l.pop_front();
        }
        l.push_back(late);
    }

    /// Drops a worker's series, unless another worker still writes it.
    pub(super) fn forget(&self, kind: ProbeType, labels: &SeriesLabels) {
        let mut all = self.series.lock();
        let key = (kind, labels.clone());
        // The map's reference and the departing worker's.
        if all.get(&key).is_some_and(|s| Arc::strong_count(s) <= 2) {
            all.remove(&key);
        }
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
        let mut enc = Encoder::new(out);
        let all = self.series.lock();
        enc.family(
            "prober_probe_total",
            Kind::Counter,
            "Cumulative number of a liveness, readiness or startup probe for a container by result.",
        );
        let mut totals: Vec<(ProbeType, usize, &SeriesLabels, u64)> = Vec::new();
        for ((kind, labels), s) in all.iter() {
            for (i, n) in s.total.iter().enumerate() {
                let n = n.load(Ordering::Relaxed);
                if n > 0 {
                    totals.push((*kind, i, labels, n));
                }
            }
        }
        totals.sort();
        for (kind, i, l, n) in totals {
            let [t, c, pod, ns] = values(kind, l);
            let labels = [("probe_type", t), ("result", RESULTS[i]), ("container", c), ("pod", pod), ("namespace", ns)];
            enc.sample("prober_probe_total", &labels, n);
        }
        enc.family("prober_probe_duration_seconds", Kind::Histogram, "Duration in seconds for a probe response.");
        for ((kind, l), s) in all.iter() {
            let h = s.duration.snapshot();
            if h.count() == 0 {
                continue;
            }
            let [t, c, pod, ns] = values(*kind, l);
            let labels = [("probe_type", t), ("container", c), ("pod", pod), ("namespace", ns)];
            enc.histogram("prober_probe_duration_seconds", &labels, &h);
        }
        drop(all);
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
        m.observe(&m.series(ProbeType::Liveness, &app), "failed", ms, Duration::ZERO);
        m.observe(&m.series(ProbeType::Readiness, &app), "successful", ms, Duration::from_millis(2));
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
        let series = m.series(ProbeType::Startup, &odd);
        m.observe(&series, "successful", Duration::ZERO, Duration::ZERO);
        let mut out = String::new();
        m.render(&mut out);
        assert!(out.contains("container=\"a\\\"b\\\\c\\nd\""), "{out}");
        m.forget(ProbeType::Startup, &odd);
        drop(series);
        let mut out = String::new();
        m.render(&mut out);
        assert!(!out.contains("probe_type=\"Startup\""), "{out}");
    }

    #[test]
    fn workers_with_the_same_labels_write_one_series_until_the_last_is_forgotten() {
        let m = ProberMetrics::default();
        let app = labels("app");
        let (old, new) = (m.series(ProbeType::Liveness, &app), m.series(ProbeType::Liveness, &app));
        m.observe(&old, "successful", Duration::ZERO, Duration::ZERO);
        m.observe(&new, "successful", Duration::ZERO, Duration::ZERO);
        let line = "prober_probe_total{probe_type=\"Liveness\",result=\"successful\",container=\"app\",pod=\"web-n1\",namespace=\"default\"}";
        let mut out = String::new();
        m.render(&mut out);
        assert_eq!(out.matches(line).count(), 1, "{out}");
        assert!(out.contains(&format!("{line} 2\n")), "{out}");
        // The old worker goes; the new one still counts into the same series.
        m.forget(ProbeType::Liveness, &app);
        drop(old);
        m.observe(&new, "failed", Duration::ZERO, Duration::ZERO);
        let mut out = String::new();
        m.render(&mut out);
        assert!(out.contains(&format!("{line} 2\n")), "{out}");
        assert!(out.contains("result=\"failed\",container=\"app\""), "{out}");
        m.forget(ProbeType::Liveness, &app);
        drop(new);
        let mut out = String::new();
        m.render(&mut out);
        assert!(!out.contains("probe_type=\"Liveness\""), "{out}");
    }
}
