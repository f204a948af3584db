//! The prober: liveness, readiness and startup probes. One manager thread (`fl-prober`)
//! keeps every worker's next due time in a heap and hands due probes to a small pool of
//! probe threads; results go into three stores the pod manager reads, and every change is
//! sent to the pod manager, which acts on it (readiness → Ready, startup → Started,
//! liveness failure → kill and restart).

pub mod pool;
pub mod probes;
pub mod worker;

use crate::api::{Container, Probe};
use crate::events::{EventRecorder, Reference, WARNING};
use crate::pods::PodsCommand;
use crossbeam_channel::Sender;
use parking_lot::{Mutex, RwLock};
use pool::{Done, Job, ProbePool};
use probes::Outcome;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use worker::{Decision, Worker};

/// Which probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ProbeType {
    /// Restarts the container when it fails.
    Liveness,
    /// Gates the container's (and pod's) readiness.
    Readiness,
    /// Holds back the other two until the container has started.
    Startup,
}

impl ProbeType {
    /// `Liveness`, `Readiness`, `Startup`: the word in events and metrics.
    pub fn name(self) -> &'static str {
        match self {
            ProbeType::Liveness => "Liveness",
            ProbeType::Readiness => "Readiness",
            ProbeType::Startup => "Startup",
        }
    }
}

/// A probe result, as kubelet's results manager holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProbeResult {
    /// Passing.
    Success,
    /// Failing.
    Failure,
    /// Not known yet.
    Unknown,
}

/// What the prober needs to know about one container with probes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProbeTarget {
    /// Pod uid.
    pub pod_uid: String,
    /// The container ref for events (with the pod's labels).
    pub reference: Reference,
    /// The container spec (probes, ports, env).
    pub container: Container,
    /// Pod address for HTTP, TCP and gRPC probes.
    pub pod_ip: String,
    /// The current container instance.
    pub container_id: Option<String>,
    /// Whether that instance is running.
    pub running: bool,
    /// When it started.
    pub started_at: Option<SystemTime>,
    /// An exited instance will be restarted (restart policy, or a sidecar).
    pub will_restart: bool,
    /// The pod is being deleted.
    pub terminating: bool,
    /// The pod reached Succeeded or Failed.
    pub pod_terminal: bool,
}

/// (pod uid, container name, probe type).
pub type WorkerKey = (String, String, ProbeType);

/// Commands to the prober manager.
pub enum ProberCommand {
    /// Every container with probes, as the pod manager sees them now.
    Targets(Vec<ProbeTarget>),
    /// A probe finished in the pool.
    Done(Done<WorkerKey>),
}

/// The three results stores, keyed by container id; survives agent restarts for
/// readiness and startup (so a Ready container stays Ready across `kill -9` of the agent).
#[derive(Clone, Default)]
pub struct ProbeResults {
    inner: Arc<RwLock<HashMap<(ProbeType, String), ProbeResult>>>,
    path: Option<PathBuf>,
}

#[derive(Serialize, Deserialize)]
struct Persisted {
    kind: ProbeType,
    container_id: String,
    result: ProbeResult,
}

impl ProbeResults {
    /// Results kept in `path` (loaded now, rewritten atomically on every change).
    pub fn persistent(path: PathBuf) -> ProbeResults {
        let loaded: Vec<Persisted> = crate::util::read_json(&path).unwrap_or_default();
        let map = loaded.into_iter().map(|p| ((p.kind, p.container_id), p.result)).collect();
        ProbeResults { inner: Arc::new(RwLock::new(map)), path: Some(path) }
    }

    /// A result, if any.
    pub fn get(&self, kind: ProbeType, container_id: &str) -> Option<ProbeResult> {
        self.inner.read().get(&(kind, container_id.to_string())).copied()
    }

    /// Records a result; true when it changed.
    pub fn set(&self, kind: ProbeType, container_id: &str, result: ProbeResult) -> bool {
        let changed = self.inner.write().insert((kind, container_id.to_string()), result) != Some(result);
        if changed && kind != ProbeType::Liveness {
            self.persist();
        }
        changed
    }

    /// Forgets a result (no update is published, as upstream).
    pub fn remove(&self, kind: ProbeType, container_id: &str) {
        if self.inner.write().remove(&(kind, container_id.to_string())).is_some() && kind != ProbeType::Liveness {
            self.persist();
        }
    }

    fn persist(&self) {
        let Some(path) = &self.path else { return };
        let list: Vec<Persisted> = self
            .inner
            .read()
            .iter()
            .filter(|((k, _), _)| *k != ProbeType::Liveness)
            .map(|((k, id), r)| Persisted { kind: *k, container_id: id.clone(), result: *r })
            .collect();
        if let Err(e) = crate::util::write_json(path, &list) {
            log::warn!("prober: cannot save probe results to {}: {e}", path.display());
        }
    }
}

const BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

/// (container, pod, namespace) of a worker's metric series.
type SeriesLabels = (String, String, String);

/// `prober_probe_total`, `prober_probe_duration_seconds`, and the scheduler's lateness.
#[derive(Default)]
pub struct ProberMetrics {
    total: Mutex<BTreeMap<(ProbeType, &'static str, SeriesLabels), u64>>,
    duration: Mutex<BTreeMap<(ProbeType, SeriesLabels), Histogram>>,
    lateness: Mutex<VecDeque<Duration>>,
    threads: std::sync::atomic::AtomicUsize,
    workers: std::sync::atomic::AtomicUsize,
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

impl ProberMetrics {
    fn observe(&self, kind: ProbeType, result: &'static str, t: &ProbeTarget, took: Duration, late: Duration) {
        let labels = (t.container.name.clone(), t.reference.object.name.clone(), t.reference.object.namespace.clone());
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
    fn forget(&self, kind: ProbeType, t: &ProbeTarget) {
        let labels = (t.container.name.clone(), t.reference.object.name.clone(), t.reference.object.namespace.clone());
        self.total.lock().retain(|k, _| !(k.0 == kind && k.2 == labels));
        self.duration.lock().retain(|k, _| !(k.0 == kind && k.1 == labels));
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
        for ((kind, result, (c, pod, ns)), n) in self.total.lock().iter() {
            let _ = writeln!(out, "prober_probe_total{{probe_type=\"{}\",result=\"{result}\",container=\"{}\",pod=\"{}\",namespace=\"{}\"}} {n}", kind.name(), escape(c), escape(pod), escape(ns));
        }
        let _ = writeln!(out, "# HELP prober_probe_duration_seconds Duration in seconds for a probe response.\n# TYPE prober_probe_duration_seconds histogram");
        for ((kind, (c, pod, ns)), h) in self.duration.lock().iter() {
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

/// Settings of the prober.
#[derive(Clone, Debug)]
pub struct ProberConfig {
    /// Most probe threads at once.
    pub max_threads: usize,
    /// When the agent started (first probes of containers it found running are spread
    /// over one period after that, as kubelet's jitter does).
    pub agent_start: Instant,
}

/// The prober's logic, run by a `ManagerHandle` on `fl-prober`.
pub struct ProberManager {
    cfg: ProberConfig,
    workers: HashMap<WorkerKey, Worker>,
    heap: BinaryHeap<Reverse<(Instant, WorkerKey)>>,
    pool: ProbePool<WorkerKey>,
    results: ProbeResults,
    metrics: Arc<ProberMetrics>,
    recorder: EventRecorder,
    pods: Sender<PodsCommand>,
}

impl ProberManager {
    /// A prober running probes through `runtime` (exec) and reporting changes to `pods`;
    /// `me` is its own command sender, for the pool's results.
    pub fn new(
        cfg: ProberConfig,
        runtime: Arc<dyn crate::runtime::ContainerRuntime>,
        results: ProbeResults,
        metrics: Arc<ProberMetrics>,
        recorder: EventRecorder,
        pods: Sender<PodsCommand>,
        me: Sender<ProberCommand>,
    ) -> Self {
        let report: pool::Report<WorkerKey> = Arc::new(move |d| me.send(ProberCommand::Done(d)).is_ok());
        let pool = ProbePool::new(cfg.max_threads, runtime, report);
        ProberManager { cfg, workers: HashMap::new(), heap: BinaryHeap::new(), pool, results, metrics, recorder, pods }
    }

    fn schedule(&mut self, key: &WorkerKey, at: Instant) {
        if let Some(w) = self.workers.get_mut(key) {
            w.next_due = at;
            self.heap.push(Reverse((at, key.clone())));
        }
    }

    fn started(&self, t: &ProbeTarget) -> bool {
        if t.container.startup_probe.is_none() {
            return t.running;
        }
        let id = t.container_id.as_deref().unwrap_or("");
        t.running && self.results.get(ProbeType::Startup, id) == Some(ProbeResult::Success)
    }

    fn set_result(&mut self, key: &WorkerKey, result: ProbeResult, only_if_unset: bool) {
        let Some(w) = self.workers.get(key) else { return };
        let Some(id) = w.target.container_id.clone() else { return };
        if only_if_unset && self.results.get(key.2, &id).is_some() {
            // A result restored from before an agent restart stands until a probe says otherwise.
            return;
        }
        if self.results.set(key.2, &id, result) {
            let _ = self.pods.send(PodsCommand::ProbeResult {
                pod_uid: key.0.clone(),
                container: key.1.clone(),
                container_id: id,
                kind: key.2,
                result,
            });
            if key.2 == ProbeType::Startup && result == ProbeResult::Success {
                // Started: liveness and readiness of this container run now, not a period later.
                let now = Instant::now();
                for kind in [ProbeType::Liveness, ProbeType::Readiness] {
                    let k = (key.0.clone(), key.1.clone(), kind);
                    if self.workers.get(&k).is_some_and(|w| !w.in_flight) {
                        self.schedule(&k, now);
                    }
                }
            }
        }
    }

    fn remove_worker(&mut self, key: &WorkerKey) {
        if let Some(w) = self.workers.remove(key) {
            if let Some(id) = &w.target.container_id {
                self.results.remove(key.2, id);
            }
            self.metrics.forget(key.2, &w.target);
        }
    }

    fn on_targets(&mut self, targets: Vec<ProbeTarget>) {
        let now = Instant::now();
        let mut seen = Vec::new();
        for t in targets {
            let kinds = [
                (ProbeType::Startup, t.container.startup_probe.is_some()),
                (ProbeType::Readiness, t.container.readiness_probe.is_some()),
                (ProbeType::Liveness, t.container.liveness_probe.is_some()),
            ];
            for (kind, present) in kinds {
                if !present {
                    continue;
                }
                let key: WorkerKey = (t.pod_uid.clone(), t.container.name.clone(), kind);
                seen.push(key.clone());
                if let Some(w) = self.workers.get_mut(&key) {
                    let before = w.next_due;
                    w.update(t.clone(), now);
                    if w.next_due != before {
                        let at = w.next_due;
                        self.heap.push(Reverse((at, key)));
                    }
                    continue;
                }
                let mut first = now;
                // Right after an agent start, spread the first probes of containers that
                // were already running over one period (kubelet's jitter).
                let period =
                    Duration::from_secs(probe_of(&t.container, kind).map_or(10, |p| p.period_seconds.max(1)) as u64);
                let restored = t.container_id.as_deref().is_some_and(|id| self.results.get(kind, id).is_some());
                if restored && now.duration_since(self.cfg.agent_start) < period {
                    first = now + period.mul_f64(crate::util::random_f64());
                }
                self.workers.insert(key.clone(), Worker::new(kind, t.clone(), first));
                self.heap.push(Reverse((first, key)));
            }
        }
        let gone: Vec<WorkerKey> = self.workers.keys().filter(|k| !seen.contains(k)).cloned().collect();
        for k in gone {
            self.remove_worker(&k);
        }
        self.metrics.workers.store(self.workers.len(), std::sync::atomic::Ordering::Relaxed);
    }

    fn run_due(&mut self) {
        let now = Instant::now();
        let wall = SystemTime::now();
        while let Some(Reverse((at, key))) = self.heap.peek().cloned() {
            if at > now {
                break;
            }
            self.heap.pop();
            let Some(w) = self.workers.get(&key) else { continue };
            if w.next_due != at || w.in_flight {
                continue; // a stale heap entry
            }
            let started = self.started(&w.target);
            let w = self.workers.get_mut(&key).expect("checked above");
            let (decision, set, new_instance) = w.decide(started, wall);
            let period = w.period();
            let delay_over = w.delay_over_at(wall, now);
            if let Some(r) = set {
                let initial = new_instance && r == worker::initial_result(key.2);
                self.set_result(&key, r, initial);
            }
            match decision {
                Decision::Stop => self.remove_worker(&key),
                Decision::Wait => {
                    let next = delay_over.filter(|d| *d > now).unwrap_or(at + period).max(now);
                    self.schedule(&key, next);
                }
                Decision::Probe => {
                    let w = self.workers.get_mut(&key).expect("checked above");
                    w.in_flight = true;
                    let target = probes::Target {
                        pod_ip: w.target.pod_ip.clone(),
                        container: w.target.container.clone(),
                        container_id: w.target.container_id.clone().unwrap_or_default(),
                    };
                    let probe = w.probe().clone();
                    self.pool.submit(Job { key: key.clone(), probe, target, scheduled: at });
                }
            }
        }
        self.metrics.threads.store(self.pool.threads(), std::sync::atomic::Ordering::Relaxed);
    }

    fn on_done(&mut self, d: Done<WorkerKey>) {
        let key = d.key.clone();
        let Some(w) = self.workers.get_mut(&key) else { return };
        w.in_flight = false;
        let result = w.complete(&d.outcome);
        let failures = w.failures_in_a_row;
        let threshold = w.probe().failure_threshold.max(1) as u32;
        let target = w.target.clone();
        let period = w.period();
        let label = match (&d.outcome, result) {
            (Outcome::Failure(_), _) => "failed",
            (Outcome::Error(_), _) => "unknown",
            _ => "successful",
        };
        self.metrics.observe(key.2, label, &target, d.took, d.started.saturating_duration_since(d.scheduled));
        let name = key.2.name();
        match &d.outcome {
            // Not one event per failed attempt: the first failure of a run, every
            // threshold crossing, and every 10th failure while it lasts; repeats of the same
            // message are counted by the correlator instead of written again.
            Outcome::Failure(out) if failures == 1 || failures % threshold == 0 || failures % 10 == 0 => {
                self.recorder.event(&target.reference, WARNING, "Unhealthy", &format!("{name} probe failed: {out}"));
            }
            Outcome::Warning(out) => {
                self.recorder.event(&target.reference, WARNING, "ProbeWarning", &format!("{name} probe warning: {out}"))
            }
            Outcome::Error(e) => {
                self.recorder.event(&target.reference, WARNING, "Unhealthy", &format!("{name} probe errored: {e}"))
            }
            _ => {}
        }
        if let Some(r) = result {
            self.set_result(&key, r, false);
        }
        // Keep the cadence: next due one period after this one was due.
        let now = Instant::now();
        let mut next = d.scheduled + period;
        if next < now {
            next = now;
        }
        self.schedule(&key, next);
    }
}

fn probe_of(c: &Container, kind: ProbeType) -> Option<&Probe> {
    match kind {
        ProbeType::Liveness => c.liveness_probe.as_ref(),
        ProbeType::Readiness => c.readiness_probe.as_ref(),
        ProbeType::Startup => c.startup_probe.as_ref(),
    }
}

impl crate::manager::Manager for ProberManager {
    type Command = ProberCommand;

    fn handle(&mut self, cmd: ProberCommand) {
        match cmd {
            ProberCommand::Targets(t) => self.on_targets(t),
            ProberCommand::Done(d) => self.on_done(d),
        }
        self.run_due();
    }

    fn on_tick(&mut self) {
        self.run_due();
    }

    fn tick_interval(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    fn on_deadline(&mut self) {
        self.run_due();
    }
}
