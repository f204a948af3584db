//! The prober: liveness, readiness and startup probes. One manager thread (`fl-prober`)
//! keeps every worker's next due time in a heap and starts due probes: TCP and plain HTTP
//! probes to an address itself, their waits on one thread (`net`), the others on a small
//! pool of probe threads (exec probe commands to one reaper thread); results go into three stores
//! the pod manager reads, and every change is sent to the pod manager, which acts on it
//! (readiness → Ready, startup → Started, liveness failure → kill and restart).
//!
//! Wake-ups are what a probe costs beside its own I/O, so the prober saves them: the probes
//! due within `AHEAD` of the first go out with it, in one wake-up; a worker's
//! next due time is set when its probe goes out; and a finished probe that changes nothing
//! (a success like the ones before) waits in the `Inbox` for the next wake-up instead of
//! making one.

pub mod httpget;
pub mod job;
pub mod metrics;
pub mod net;
pub mod pool;
pub mod probes;
pub mod reaper;
pub mod resolve;
pub mod results;
pub mod worker;

/// The `User-Agent` of probes, as kubelet sends it (`kube-probe/<major>.<minor>`).
pub const USER_AGENT: &str = "kube-probe/1.35";
/// At most this much of a response body or command output is read.
pub const MAX_OUTPUT: usize = 10 * 1024;

#[cfg(test)]
pub(crate) use httpget::error_samples as httpget_error_samples;
pub use metrics::{series_labels, ProberMetrics, SeriesLabels};
pub use results::{ProbeResults, ProberError};

use crate::api::{Container, Probe};
use crate::base::manager::Publisher;
use crate::node::events::{EventRecorder, Reference, WARNING};
use crossbeam_channel::Sender;
use job::{Done, Inbox, Job, Report};
use pool::ProbePool;
use probes::Outcome;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
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
    /// Results wait in the inbox that the prober should see now.
    Results,
    /// A new `prober.max_threads` (a reload): more threads start as probes need them;
    /// the ones past it end once idle.
    SetMaxThreads(usize),
}

/// When the scheduler wakes for a due probe, the TCP and plain HTTP probes it starts itself
/// (`net::takes`) that are due within this long after it go out with it, early: one wake-up
/// for all of them, and their answers tend to come in together too. A wake-up from a timer
/// sleep costs a thread 10–60 µs of CPU on a small virtual machine (`cargo bench --bench
/// prober -- wake`), as much as a loopback probe's `connect`. No probe goes out late for
/// it, and none earlier than 2 % of the shortest period (1 s); a worker's next due time
/// stays a period after the last, so it does not drift. The probes that go to the probe
/// threads (exec, gRPC, TLS) keep their due times: their start costs far more than a
/// wake-up, and early ones would queue there behind each other.
pub const AHEAD: Duration = Duration::from_millis(20);

/// Pops the next probe to send out at `now`: one due by `now + AHEAD`.
fn take_due(heap: &mut BinaryHeap<Reverse<(Instant, WorkerId)>>, now: Instant) -> Option<(Instant, WorkerId)> {
    let &Reverse((at, _)) = heap.peek()?;
    (at <= now + AHEAD).then(|| heap.pop().expect("peeked").0)
}

/// Whether the scheduler starts container `c`'s probe of `kind` itself (`net::takes`): what
/// the pool hands to the network probe thread, and what goes out early (`AHEAD`).
fn scheduler_starts(c: &Container, kind: ProbeType, pod_ip: &str) -> bool {
    probe_of(c, kind).is_some_and(|p| net::takes(p, pod_ip))
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

/// Settings of the prober.
#[derive(Clone, Debug)]
pub struct ProberConfig {
    /// Probe threads for probes that answer promptly (the pool adds up to
    /// `pool::MAX_SLOW_THREADS` while probes run slow).
    pub max_threads: usize,
    /// When the agent started (first probes of containers it found running are spread
    /// over one period after that, as kubelet's jitter does).
    pub agent_start: Instant,
    /// Where the prober's helper threads live; the agent stops them after the prober.
    pub threads: pool::ProberThreads,
}

/// A worker's index in the manager (cheap to hash, copy and queue).
pub type WorkerId = u64;

/// What a job carries back to the prober: its worker, and whether a success would change
/// nothing (then it need not wake the prober).
#[derive(Clone, Copy, Debug)]
pub struct JobTag {
    worker: WorkerId,
    quiet_on_success: bool,
}

/// The prober's logic, run by a `ManagerHandle` on `fl-prober`.
pub struct ProberManager {
    cfg: ProberConfig,
    ids: HashMap<WorkerKey, WorkerId>,
    workers: HashMap<WorkerId, Slot, crate::node::events::lru::FxBuild>,
    next_id: WorkerId,
    heap: BinaryHeap<Reverse<(Instant, WorkerId)>>,
    pool: ProbePool<JobTag>,
    inbox: Arc<Inbox<JobTag>>,
    /// The inbox's results while they are handled (kept for its capacity).
    drained: Vec<Done<JobTag>>,
    results: ProbeResults,
    metrics: Arc<ProberMetrics>,
    recorder: EventRecorder,
    pods: Publisher<ProbeUpdate>,
}

/// A probe result that changed, published to the pod manager (kubelet's results manager
/// `Updates()`).
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeUpdate {
    /// Pod uid.
    pub pod_uid: String,
    /// Container name.
    pub container: String,
    /// The container instance the result is about.
    pub container_id: String,
    /// Which probe.
    pub kind: ProbeType,
    /// The new result.
    pub result: ProbeResult,
}

/// A worker with what the manager keeps beside it.
struct Slot {
    key: WorkerKey,
    worker: Worker,
    labels: SeriesLabels,
    /// Its metric series, updated on every probe without a lookup.
    series: Arc<metrics::Series>,
}

impl ProberManager {
    /// A prober running probes through `runtime` (exec) and reporting changes to `pods`;
    /// `me` is its own command sender, for the pool's results.
    pub fn new(
        cfg: ProberConfig,
        runtime: Arc<dyn crate::node::runtime::ContainerRuntime>,
        results: ProbeResults,
        metrics: Arc<ProberMetrics>,
        recorder: EventRecorder,
        pods: Publisher<ProbeUpdate>,
        me: Sender<ProberCommand>,
    ) -> Self {
        let inbox = Arc::new(Inbox::default());
        let to_inbox = inbox.clone();
        let report: Report<JobTag> = Arc::new(move |d: Done<JobTag>| {
            let urgent = !(d.key.quiet_on_success && matches!(d.outcome, Outcome::Success(_)));
            !to_inbox.push(d, urgent) || me.send(ProberCommand::Results).is_ok()
        });
        let pool = ProbePool::new(cfg.max_threads, runtime, report, cfg.threads.clone());
        ProberManager {
            cfg,
            ids: HashMap::new(),
            workers: HashMap::default(),
            next_id: 0,
            heap: BinaryHeap::new(),
            pool,
            inbox,
            drained: Vec::new(),
            results,
            metrics,
            recorder,
            pods,
        }
    }

    /// Makes a worker due at `at`.
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
            self.pods.publish(ProbeUpdate {
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
            drop(s.series);
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
                        self.schedule(id, at);
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
                    first = now + period.mul_f64(crate::base::random::random_f64());
                }
                let id = self.next_id;
                self.next_id += 1;
                seen.insert(id);
                self.ids.insert(key.clone(), id);
                let labels = series_labels(&t);
                let series = self.metrics.series(kind, &labels);
                let worker = Worker::new(kind, t.clone(), first);
                self.workers.insert(id, Slot { key, worker, labels, series });
                self.schedule(id, first);
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
        let mut not_yet = Vec::new();
        while let Some((at, id)) = take_due(&mut self.heap, now) {
            let Some(s) = self.workers.get(&id) else { continue };
            if s.worker.next_due != at {
                continue; // a stale heap entry
            }
            let t = &s.worker.target;
            if at > now && !scheduler_starts(&t.container, s.key.2, &t.pod_ip) {
                not_yet.push(Reverse((at, id)));
                continue;
            }
            if s.worker.in_flight {
                // Its last probe still runs: this round is skipped, as kubelet's ticker
                // drops a tick.
                let period = s.worker.period();
                self.schedule(id, at + period);
                continue;
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
                    let w = &mut s.worker;
                    w.in_flight = true;
                    // After a container's first probe (run as soon as it starts) the second
                    // comes after a random half to whole period, so containers started
                    // together do not probe in lockstep for ever; after that, one period.
                    let gap = if std::mem::replace(&mut w.first_probe, false) {
                        period.mul_f64(0.5 + crate::base::random::random_f64() / 2.0)
                    } else {
                        period
                    };
                    let t = &w.target;
                    let target = probes::Target {
                        pod_ip: t.pod_ip.clone(),
                        container: t.container.clone(),
                        container_id: t.container_id.clone().unwrap_or_default(),
                    };
                    let key = JobTag { worker: id, quiet_on_success: w.quiet_on_success() };
                    self.pool.submit(Job { key, kind, target, scheduled: at });
                    self.schedule(id, at + gap);
                }
            }
        }
        self.heap.extend(not_yet);
        // One wake-up of the network probe thread for the probes due together.
        self.pool.flush();
        // Probes queued behind threads that have turned slow get a thread of their own.
        self.pool.rebalance();
        self.metrics.threads.store(self.pool.threads(), std::sync::atomic::Ordering::Relaxed);
    }

    /// Handles the results waiting in the inbox.
    fn drain_inbox(&mut self) {
        let mut drained = std::mem::take(&mut self.drained);
        self.inbox.drain_into(&mut drained);
        for d in drained.drain(..) {
            self.on_done(d);
        }
        self.drained = drained;
    }

    fn on_done(&mut self, d: Done<JobTag>) {
        let id = d.key.worker;
        let Some(s) = self.workers.get_mut(&id) else { return };
        let w = &mut s.worker;
        let kind = s.key.2;
        w.in_flight = false;
        let result = w.complete(&d.outcome);
        let failures = w.failures_in_a_row;
        let threshold = w.probe().failure_threshold.max(1) as u32;
        let label = match &d.outcome {
            Outcome::Failure(_) => "failed",
            Outcome::Error(_) => "unknown",
            _ => "successful",
        };
        self.metrics.observe(&s.series, label, d.took, d.started.saturating_duration_since(d.scheduled));
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

impl crate::base::manager::Manager for ProberManager {
    type Command = ProberCommand;

    fn handle(&mut self, cmd: ProberCommand) {
        self.drain_inbox();
        match cmd {
            ProberCommand::Targets(t) => {
                log::debug!("prober: {} containers with probes", t.len());
                self.on_targets(t)
            }
            ProberCommand::Results => {}
            ProberCommand::SetMaxThreads(n) => {
                log::info!("prober: at most {n} probe threads (was {})", self.pool.max());
                self.pool.set_max(n);
            }
        }
        self.run_due();
    }

    /// Also the latest a quiet result waits in the inbox.
    fn on_tick(&mut self) {
        self.drain_inbox();
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
        self.drain_inbox();
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
    fn the_probes_due_within_ahead_go_out_together_in_due_order() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        let mut heap: BinaryHeap<_> =
            [(now + ms(30), 5), (now + AHEAD, 4), (now + ms(5), 3), (now, 2)].into_iter().map(Reverse).collect();
        heap.push(Reverse((now - ms(3), 1)));
        let mut out = Vec::new();
        while let Some((_, id)) = take_due(&mut heap, now) {
            out.push(id);
        }
        assert_eq!(out, [1, 2, 3, 4], "the overdue first, then the ones due within AHEAD");
        assert_eq!(heap.len(), 1, "one due later waits");
        assert_eq!(take_due(&mut heap, now + ms(10)), Some((now + ms(30), 5)));
    }

    #[test]
    fn only_the_probes_the_scheduler_starts_itself_go_out_early() {
        use crate::api::{ExecAction, HttpGetAction, IntOrString, Probe, TcpSocketAction};
        let port = IntOrString::Int(8080);
        let http = |scheme: &str, host: &str| Probe {
            http_get: Some(HttpGetAction {
                port: port.clone(),
                scheme: scheme.into(),
                host: host.into(),
                path: "/".into(),
                http_headers: Vec::new(),
            }),
            ..Default::default()
        };
        let tcp = Probe {
            tcp_socket: Some(TcpSocketAction { port: port.clone(), host: String::new() }),
            ..Default::default()
        };
        let exec = Probe { exec: Some(ExecAction { command: vec!["true".into()] }), ..Default::default() };
        for (probe, early) in [
            (http("", ""), true),
            (http("HTTP", "10.0.0.7"), true),
            (tcp, true),
            (http("HTTPS", ""), false),
            (http("", "db.example"), false),
            (exec, false),
        ] {
            let container = Container { liveness_probe: Some(probe.clone()), ..Default::default() };
            assert_eq!(scheduler_starts(&container, ProbeType::Liveness, "10.0.0.5"), early, "{probe:?}");
        }
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
}
