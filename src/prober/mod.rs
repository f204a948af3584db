//! The prober: liveness, readiness and startup probes. One manager thread (`fl-prober`)
//! keeps every worker's next due time in a heap and hands due probes to a small pool of
//! probe threads; results go into three stores the pod manager reads, and every change is
//! sent to the pod manager, which acts on it (readiness → Ready, startup → Started,
//! liveness failure → kill and restart).

pub mod pool;
pub mod probes;
pub mod reaper;
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
    /// The container spec (probes, ports, env), shared with every probe job.
    pub container: Arc<Container>,
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
    Done(Done<WorkerId>),
}

/// What failed in the prober (a failed probe is a result, not one of these).
#[derive(Debug, thiserror::Error)]
pub enum ProberError {
    /// The saved probe results could not be read or parsed.
    #[error("cannot read saved probe results {path}")]
    ReadResults {
        /// The results file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An unreadable results file could not be moved aside.
    #[error("cannot move {path} aside")]
    SetAside {
        /// The results file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The probe results could not be saved.
    #[error("cannot save probe results to {path}")]
    SaveResults {
        /// The results file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The three results stores, keyed by container id; survives agent restarts for
/// readiness and startup (so a Ready container stays Ready across `kill -9` of the agent).
#[derive(Clone, Default)]
pub struct ProbeResults {
    inner: Arc<RwLock<HashMap<String, [Option<ProbeResult>; 3]>>>,
    path: Option<PathBuf>,
    /// Saving failed last time: the failure was logged once, the recovery will be too.
    save_failing: Arc<std::sync::atomic::AtomicBool>,
}

#[derive(Serialize, Deserialize)]
struct Persisted {
    kind: ProbeType,
    container_id: String,
    result: ProbeResult,
}

fn slot(kind: ProbeType) -> usize {
    kind as usize
}

impl ProbeResults {
    /// Results kept in `path` (loaded now, rewritten atomically on every change). An
    /// unreadable file is reported with its cause and moved aside to `<path>.corrupt` (so
    /// the next save does not destroy it), and the prober starts without saved results.
    pub fn persistent(path: PathBuf) -> ProbeResults {
        let loaded: Vec<Persisted> = match crate::util::read_json(&path) {
            Ok(v) => v,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => {
                let e = ProberError::ReadResults { path: path.clone(), source };
                let aside = PathBuf::from(format!("{}.corrupt", path.display()));
                let kept = match std::fs::rename(&path, &aside) {
                    Ok(()) => format!("kept as {}", aside.display()),
                    Err(source) => {
                        crate::util::Chain(&ProberError::SetAside { path: path.clone(), source }).to_string()
                    }
                };
                log::warn!(
                    "prober: {}; readiness and startup start over from their initial values ({kept})",
                    crate::util::Chain(&e)
                );
                Vec::new()
            }
        };
        let mut map: HashMap<String, [Option<ProbeResult>; 3]> = HashMap::new();
        for p in loaded {
            map.entry(p.container_id).or_default()[slot(p.kind)] = Some(p.result);
        }
        ProbeResults { inner: Arc::new(RwLock::new(map)), path: Some(path), save_failing: Arc::default() }
    }

    /// A result, if any.
    pub fn get(&self, kind: ProbeType, container_id: &str) -> Option<ProbeResult> {
        self.inner.read().get(container_id).and_then(|r| r[slot(kind)])
    }

    /// Records a result; true when it changed.
    pub fn set(&self, kind: ProbeType, container_id: &str, result: ProbeResult) -> bool {
        let changed = {
            let mut map = self.inner.write();
            let old = match map.get_mut(container_id) {
                Some(r) => r[slot(kind)].replace(result),
                None => {
                    map.entry(container_id.to_string()).or_default()[slot(kind)] = Some(result);
                    None
                }
            };
            old != Some(result)
        };
        if changed && kind != ProbeType::Liveness {
            self.persist();
        }
        changed
    }

    /// Forgets a result (no update is published, as upstream).
    pub fn remove(&self, kind: ProbeType, container_id: &str) {
        let removed = {
            let mut map = self.inner.write();
            let removed = map.get_mut(container_id).and_then(|r| r[slot(kind)].take()).is_some();
            if map.get(container_id).is_some_and(|r| r.iter().all(Option::is_none)) {
                map.remove(container_id);
            }
            removed
        };
        if removed && kind != ProbeType::Liveness {
            self.persist();
        }
    }

    fn persist(&self) {
        let Some(path) = &self.path else { return };
        let list: Vec<Persisted> = self
            .inner
            .read()
            .iter()
            .flat_map(|(id, r)| {
                [ProbeType::Readiness, ProbeType::Startup]
                    .into_iter()
                    .filter_map(|k| r[slot(k)].map(|result| Persisted { kind: k, container_id: id.clone(), result }))
            })
            .collect();
        use std::sync::atomic::Ordering;
        // One line when saving starts failing (a full disk would fail every change) and one
        // when it works again.
        match crate::util::write_json(path, &list) {
            Err(source) if !self.save_failing.swap(true, Ordering::Relaxed) => {
                let e = ProberError::SaveResults { path: path.clone(), source };
                log::warn!("prober: {} (reported once until a save succeeds)", crate::util::Chain(&e));
            }
            Ok(()) if self.save_failing.swap(false, Ordering::Relaxed) => {
                log::info!("prober: probe results saved to {} again", path.display());
            }
            _ => {}
        }
    }
}

/// Longest event message the prober records, the `note` limit of events.k8s.io (1 KiB):
/// probe output (up to 10 KiB) and error chains past it are cut.
pub const MAX_EVENT_MESSAGE: usize = 1024;

/// `message` cut to at most `MAX_EVENT_MESSAGE` bytes at a character boundary, ending with
/// how much was cut.
pub fn bounded_message(message: String) -> String {
    if message.len() <= MAX_EVENT_MESSAGE {
        return message;
    }
    // Room for "… (NNNNNNNNNN more bytes)".
    let mut end = MAX_EVENT_MESSAGE - 32;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} more bytes)", &message[..end], message.len() - end)
}

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
    threads: std::sync::atomic::AtomicUsize,
    workers: std::sync::atomic::AtomicUsize,
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

impl ProberMetrics {
    fn observe(&self, kind: ProbeType, result: &'static str, labels: &SeriesLabels, took: Duration, late: Duration) {
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
    fn forget(&self, kind: ProbeType, labels: &SeriesLabels) {
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

/// Settings of the prober.
#[derive(Clone, Debug)]
pub struct ProberConfig {
    /// Most probe threads at once.
    pub max_threads: usize,
    /// When the agent started (first probes of containers it found running are spread
    /// over one period after that, as kubelet's jitter does).
    pub agent_start: Instant,
}

/// A worker's index in the manager (cheap to hash, copy and queue).
pub type WorkerId = u64;

/// The prober's logic, run by a `ManagerHandle` on `fl-prober`.
pub struct ProberManager {
    cfg: ProberConfig,
    ids: HashMap<WorkerKey, WorkerId>,
    workers: HashMap<WorkerId, Slot, crate::events::lru::FxBuild>,
    next_id: WorkerId,
    heap: BinaryHeap<Reverse<(Instant, WorkerId)>>,
    pool: ProbePool<WorkerId>,
    results: ProbeResults,
    metrics: Arc<ProberMetrics>,
    recorder: EventRecorder,
    pods: Sender<PodsCommand>,
}

/// A worker with what the manager keeps beside it.
struct Slot {
    key: WorkerKey,
    worker: Worker,
    labels: SeriesLabels,
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
        let report: pool::Report<WorkerId> = Arc::new(move |d| me.send(ProberCommand::Done(d)).is_ok());
        let pool = ProbePool::new(cfg.max_threads, runtime, report);
        ProberManager {
            cfg,
            ids: HashMap::new(),
            workers: HashMap::default(),
            next_id: 0,
            heap: BinaryHeap::new(),
            pool,
            results,
            metrics,
            recorder,
            pods,
        }
    }

    fn schedule(&mut self, id: WorkerId, at: Instant) {
        if let Some(s) = self.workers.get_mut(&id) {
            s.worker.next_due = at;
            self.heap.push(Reverse((at, id)));
        }
    }

    fn started(&self, t: &ProbeTarget) -> bool {
        if t.container.startup_probe.is_none() {
            return t.running;
        }
        let id = t.container_id.as_deref().unwrap_or("");
        t.running && self.results.get(ProbeType::Startup, id) == Some(ProbeResult::Success)
    }

    fn set_result(&mut self, id: WorkerId, result: ProbeResult, only_if_unset: bool) {
        let Some(s) = self.workers.get(&id) else { return };
        let Some(cid) = s.worker.target.container_id.clone() else { return };
        let key = s.key.clone();
        if only_if_unset && self.results.get(key.2, &cid).is_some() {
            // A result restored from before an agent restart stands until a probe says otherwise.
            return;
        }
        if self.results.set(key.2, &cid, result) {
            let _ = self.pods.send(PodsCommand::ProbeResult {
                pod_uid: key.0.clone(),
                container: key.1.clone(),
                container_id: cid,
                kind: key.2,
                result,
            });
            if key.2 == ProbeType::Startup && result == ProbeResult::Success {
                // Started: liveness and readiness of this container run now, not a period later.
                let now = Instant::now();
                for kind in [ProbeType::Liveness, ProbeType::Readiness] {
                    let other = self.ids.get(&(key.0.clone(), key.1.clone(), kind)).copied();
                    if let Some(o) = other.filter(|o| self.workers.get(o).is_some_and(|s| !s.worker.in_flight)) {
                        self.schedule(o, now);
                    }
                }
            }
        }
    }

    fn remove_worker(&mut self, id: WorkerId) {
        if let Some(s) = self.workers.remove(&id) {
            self.ids.remove(&s.key);
            if let Some(cid) = &s.worker.target.container_id {
                self.results.remove(s.key.2, cid);
            }
            self.metrics.forget(s.key.2, &s.labels);
        }
    }

    fn on_targets(&mut self, targets: Vec<ProbeTarget>) {
        let now = Instant::now();
        let mut seen = std::collections::HashSet::new();
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
                if let Some(&id) = self.ids.get(&key) {
                    seen.insert(id);
                    let s = self.workers.get_mut(&id).expect("ids and workers agree");
                    let before = s.worker.next_due;
                    s.worker.update(t.clone(), now);
                    if s.worker.next_due != before {
                        let at = s.worker.next_due;
                        self.heap.push(Reverse((at, id)));
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
                let id = self.next_id;
                self.next_id += 1;
                seen.insert(id);
                self.ids.insert(key.clone(), id);
                let labels = series_labels(&t);
                self.workers.insert(id, Slot { key, worker: Worker::new(kind, t.clone(), first), labels });
                self.heap.push(Reverse((first, id)));
            }
        }
        let gone: Vec<WorkerId> = self.workers.keys().filter(|id| !seen.contains(*id)).copied().collect();
        for id in gone {
            self.remove_worker(id);
        }
        self.metrics.workers.store(self.workers.len(), std::sync::atomic::Ordering::Relaxed);
    }

    fn run_due(&mut self) {
        let now = Instant::now();
        let wall = SystemTime::now();
        while let Some(&Reverse((at, id))) = self.heap.peek() {
            if at > now {
                break;
            }
            self.heap.pop();
            let Some(s) = self.workers.get(&id) else { continue };
            if s.worker.next_due != at || s.worker.in_flight {
                continue; // a stale heap entry
            }
            let started = self.started(&s.worker.target);
            let s = self.workers.get_mut(&id).expect("checked above");
            let kind = s.key.2;
            let previous = s.worker.instance().map(String::from);
            let (decision, set, new_instance) = s.worker.decide(started, wall);
            if let (true, Some(old)) = (new_instance, previous) {
                // The old instance's result goes with it (kubelet removes it too).
                self.results.remove(kind, &old);
            }
            let period = s.worker.period();
            let delay_over = s.worker.delay_over_at(wall, now);
            if let Some(r) = set {
                let initial = new_instance && r == worker::initial_result(kind);
                self.set_result(id, r, initial);
            }
            match decision {
                Decision::Stop => self.remove_worker(id),
                Decision::Wait => {
                    let next = delay_over.filter(|d| *d > now).unwrap_or(at + period).max(now);
                    self.schedule(id, next);
                }
                Decision::Probe => {
                    let s = self.workers.get_mut(&id).expect("checked above");
                    s.worker.in_flight = true;
                    let t = &s.worker.target;
                    let target = probes::Target {
                        pod_ip: t.pod_ip.clone(),
                        container: t.container.clone(),
                        container_id: t.container_id.clone().unwrap_or_default(),
                    };
                    self.pool.submit(Job { key: id, kind, target, scheduled: at });
                }
            }
        }
        // Probes queued behind threads that have turned slow get a thread of their own.
        self.pool.rebalance();
        self.metrics.threads.store(self.pool.threads(), std::sync::atomic::Ordering::Relaxed);
    }

    fn on_done(&mut self, d: Done<WorkerId>) {
        let id = d.key;
        let Some(s) = self.workers.get_mut(&id) else { return };
        let w = &mut s.worker;
        let kind = s.key.2;
        w.in_flight = false;
        let result = w.complete(&d.outcome);
        let failures = w.failures_in_a_row;
        let threshold = w.probe().failure_threshold.max(1) as u32;
        let period = w.period();
        // After a container's first probe (run as soon as it starts) the second comes after
        // a random half to whole period, so containers started together do not probe in
        // lockstep for ever; after that, one period from when the last one was due.
        let gap = if std::mem::replace(&mut w.first_probe, false) {
            period.mul_f64(0.5 + crate::util::random_f64() / 2.0)
        } else {
            period
        };
        let label = match &d.outcome {
            Outcome::Failure(_) => "failed",
            Outcome::Error(_) => "unknown",
            _ => "successful",
        };
        self.metrics.observe(kind, label, &s.labels, d.took, d.started.saturating_duration_since(d.scheduled));
        let name = kind.name();
        let reference = &s.worker.target.reference;
        match &d.outcome {
            // Not one event per failed attempt: the first failure of a run, every
            // threshold crossing, and every 10th failure while it lasts; repeats of the same
            // message are counted by the correlator instead of written again.
            Outcome::Failure(out) if failures == 1 || failures % threshold == 0 || failures % 10 == 0 => {
                let message = bounded_message(format!("{name} probe failed: {out}"));
                self.recorder.event(reference, WARNING, "Unhealthy", &message);
            }
            Outcome::Warning(out) => {
                let message = bounded_message(format!("{name} probe warning: {out}"));
                self.recorder.event(reference, WARNING, "ProbeWarning", &message)
            }
            Outcome::Error(e) => {
                let message = bounded_message(format!("{name} probe errored: {e}"));
                self.recorder.event(reference, WARNING, "Unhealthy", &message)
            }
            _ => {}
        }
        if let Some(r) = result {
            self.set_result(id, r, false);
        }
        let next = (d.scheduled + gap).max(Instant::now());
        self.schedule(id, next);
    }
}

/// A container's probe of one kind.
pub fn probe_of(c: &Container, kind: ProbeType) -> Option<&Probe> {
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
            ProberCommand::Targets(t) => {
                log::debug!("prober: {} containers with probes", t.len());
                self.on_targets(t)
            }
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
        let due = self.heap.peek().map(|Reverse((at, _))| *at);
        match (due, self.pool.recheck_at()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn on_deadline(&mut self) {
        self.run_due();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_messages_are_cut_at_one_kib_on_a_character_boundary() {
        assert_eq!(bounded_message("Liveness probe failed: short".into()), "Liveness probe failed: short");
        let long = format!("Readiness probe failed: {}", "é".repeat(5000));
        let m = bounded_message(long.clone());
        assert!(m.len() <= MAX_EVENT_MESSAGE, "{}", m.len());
        assert!(m.starts_with("Readiness probe failed: éé"));
        let kept = m.rsplit_once('…').unwrap().0.len();
        assert!(m.ends_with(&format!("… ({} more bytes)", long.len() - kept)), "{m}");
    }

    #[test]
    fn max_threads_is_bounded() {
        for (n, ok) in [
            (0, false),
            (1, true),
            (8, true),
            (pool::MAX_THREADS, true),
            (pool::MAX_THREADS + 1, false),
            (100_000_000_000, false),
        ] {
            let r = crate::config::Config::parse("f.toml", &format!("[prober]\nmax_threads = {n}\n"));
            assert_eq!(r.is_ok(), ok, "{n}: {:?}", r.err().map(|e| e.to_string()));
            if let Err(e) = r {
                assert!(e.to_string().contains("prober.max_threads"), "{e}");
                assert!(e.to_string().contains("between 1 and 64"), "{e}");
            }
        }
    }

    #[test]
    fn unreadable_saved_results_are_set_aside_and_the_store_starts_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe-results.json");
        std::fs::write(&path, "{ not json").unwrap();
        let r = ProbeResults::persistent(path.clone());
        assert_eq!(r.get(ProbeType::Readiness, "c1"), None);
        assert!(!path.exists());
        let aside = dir.path().join("probe-results.json.corrupt");
        assert_eq!(std::fs::read_to_string(&aside).unwrap(), "{ not json", "kept for a person to look at");
        r.set(ProbeType::Readiness, "c1", ProbeResult::Success);
        let again = ProbeResults::persistent(path);
        assert_eq!(again.get(ProbeType::Readiness, "c1"), Some(ProbeResult::Success), "saving works again");
    }
}
