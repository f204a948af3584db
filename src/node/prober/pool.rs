//! The probe pool: TCP probes and HTTP probes without TLS to an address (nearly all of them)
//! run on the network probe thread (`net`); the others are blocking calls on a few threads
//! that grow on demand and shrink again when idle. A slow probe holds up only itself:
//!
//! * the network probe thread waits for every socket at once, each to its own deadline;
//! * an exec probe's command is started on a probe thread and handed to the exec reaper,
//!   which watches every running command from one thread, so it holds no probe thread;
//! * a probe that has run for `SLOW_AFTER` (an HTTP, TCP or gRPC peer that does not answer)
//!   stops counting against `max_threads`: the pool starts another thread for the probes
//!   behind it, up to `MAX_SLOW_THREADS` such threads in all.

use super::job::{Done, Job, Report};
use super::net::{self, NetProbes};
use super::probes::{self, GrpcEnv, Lookups, Outcome};
use super::reaper::{ExecReaper, Watch};
use crate::base::manager::WorkerSet;
use crate::base::manager::{Exit, Health, StopTimeout};
use crate::node::runtime::ContainerRuntime;
use crossbeam_channel::{select, unbounded, Receiver, Sender};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// An idle probe thread beyond the first exits after this long.
const IDLE_EXIT: Duration = Duration::from_secs(30);
/// A probe running this long is slow: its thread no longer counts against `max_threads`.
/// Probes that answer (on loopback or a pod network) take well under a millisecond to a few.
pub const SLOW_AFTER: Duration = Duration::from_millis(100);
/// Upper bound of `prober.max_threads`.
pub const MAX_THREADS: usize = 64;
/// Hard cap on threads beyond `max_threads`, for probes that run slow (exec probes need
/// none). Past it, probes wait for a thread again.
pub const MAX_SLOW_THREADS: usize = 32;

/// How long the agent waits at stop for threads inside a call that cannot be interrupted:
/// a probe (bounded by its own timeout, up to minutes) and a host name lookup (inside the
/// resolver). They end by themselves, the process exit ends them anyway, and waiting
/// longer would only delay shutdown.
pub const IN_CALL_STOP_TIMEOUT: Duration = Duration::from_millis(500);

/// Every thread the prober starts besides its own: probe threads, the exec reaper and host
/// name lookups, each kind in its own bounded set. The agent holds a clone and stops them
/// after the prober (whose end already signals them).
#[derive(Clone)]
pub struct ProberThreads {
    probes: Arc<WorkerSet>,
    reaper: Arc<WorkerSet>,
    net: Arc<WorkerSet>,
    lookups: Lookups,
}

/// The threads `ProberThreads::stop` could not join in time.
#[derive(Debug, Default)]
pub struct Leftover {
    /// Threads that should have stopped at once (the exec reaper): a failed shutdown.
    pub stuck: Vec<StopTimeout>,
    /// Threads still inside a probe or a lookup that cannot be interrupted: left to end by
    /// themselves (or with the process), and worth a warning only.
    pub in_calls: Vec<StopTimeout>,
}

impl std::fmt::Debug for ProberThreads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProberThreads")
            .field("probes", &self.probes.len())
            .field("reaper", &self.reaper.len())
            .field("net", &self.net.len())
            .field("lookups", &self.lookups.len())
            .finish()
    }
}

impl ProberThreads {
    /// Empty sets, registering their threads in `health`.
    pub fn new(health: &Health) -> ProberThreads {
        ProberThreads {
            probes: Arc::new(WorkerSet::new("prober", MAX_THREADS + MAX_SLOW_THREADS, health)),
            reaper: Arc::new(WorkerSet::new("prober", 1, health)),
            net: Arc::new(WorkerSet::new("prober", 1, health)),
            lookups: Lookups::new(health),
        }
    }

    /// Stops every thread within `timeout`: the reaper (which kills the commands it watches)
    /// and the network probe thread must end in it; probe threads and lookups are then
    /// waited for `IN_CALL_STOP_TIMEOUT` at most, in what is left.
    pub fn stop(&self, timeout: Duration) -> Leftover {
        self.probes.signal_stop();
        self.reaper.signal_stop();
        self.net.signal_stop();
        self.lookups.signal_stop();
        let deadline = Instant::now() + timeout;
        let mut stuck = self.reaper.stop(timeout);
        stuck.extend(self.net.stop(deadline.saturating_duration_since(Instant::now())));
        let left = || deadline.saturating_duration_since(Instant::now());
        let in_call = IN_CALL_STOP_TIMEOUT.min(left());
        let mut in_calls = self.probes.stop(in_call);
        in_calls.extend(self.lookups.stop(in_call.min(left())));
        Leftover { stuck, in_calls }
    }
}

/// Whether to start another probe thread: jobs are waiting that the idle threads will not
/// all take, the threads not stuck in slow probes are fewer than `max`, and the hard cap
/// allows one more.
fn should_spawn(queued: usize, idle: usize, threads: usize, slow: usize, max: usize) -> bool {
    queued > idle && threads.saturating_sub(slow) < max && threads < max + MAX_SLOW_THREADS
}

/// What the threads share.
struct Shared<K> {
    jobs: Sender<Job<K>>,
    queue: Receiver<Job<K>>,
    /// Threads for prompt probes at most.
    max: AtomicUsize,
    idle: AtomicUsize,
    threads: AtomicUsize,
    /// Per thread: when its current probe started (nanoseconds after `epoch`, plus one), 0
    /// while idle. Written by its thread (two atomic stores per probe), read to count slow ones.
    busy: Mutex<Vec<Arc<AtomicU64>>>,
    epoch: Instant,
    runtime: Arc<dyn ContainerRuntime>,
    grpc: GrpcEnv,
    owned: ProberThreads,
    done: Report<K>,
    /// Started with the first exec probe (nodes without exec probes never run its thread);
    /// `None` when it could not be started (exec probes then wait on their probe thread).
    reaper: OnceLock<Option<ExecReaper<K>>>,
}

impl<K: Clone + Send + 'static> Shared<K> {
    /// Threads whose current probe has run `SLOW_AFTER` or longer.
    fn slow(&self, now: Instant) -> usize {
        let since = now.saturating_duration_since(self.epoch);
        let slow = |s: u64| s != 0 && Duration::from_nanos(s - 1) + SLOW_AFTER <= since;
        self.busy.lock().iter().filter(|b| slow(b.load(Ordering::Relaxed))).count()
    }

    /// The earliest moment a busy thread turns slow (none when every busy one already is).
    fn next_slow(&self, now: Instant) -> Option<Instant> {
        let since = now.saturating_duration_since(self.epoch);
        self.busy
            .lock()
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .filter(|&s| s != 0)
            .map(|s| Duration::from_nanos(s - 1) + SLOW_AFTER)
            .filter(|&at| at > since)
            .min()
            .map(|at| self.epoch + at)
    }

    fn reaper(&self) -> Option<&ExecReaper<K>> {
        self.reaper
            .get_or_init(|| match ExecReaper::start(self.done.clone(), &self.owned.reaper) {
                Ok(r) => Some(r),
                Err(e) => {
                    let e = crate::base::errors::Chain(&e);
                    log::error!("prober: cannot start the exec reaper, exec probes wait on probe threads: {e}");
                    None
                }
            })
            .as_ref()
    }

    /// Runs a job; `None` when an exec probe's command was handed to the reaper, which
    /// reports it.
    fn run(&self, job: &Job<K>, started: Instant) -> Option<Outcome> {
        let Some(probe) = super::probe_of(&job.target.container, job.kind) else {
            return Some(Outcome::Error("the container has no such probe".into()));
        };
        let Some(x) = &probe.exec else {
            return Some(probes::run(probe, &job.target, &self.runtime, &self.grpc, &self.owned.lookups));
        };
        let timeout = probes::timeout_of(probe);
        let command = probes::exec_command(&x.command, &job.target);
        let process = match probes::exec_start(&command, &job.target, &self.runtime, timeout) {
            Ok(p) => p,
            Err(outcome) => return Some(outcome),
        };
        match self.reaper() {
            Some(r) => {
                let deadline = started + timeout;
                let (key, scheduled) = (job.key.clone(), job.scheduled);
                r.watch(Watch { key, process, command, deadline, started, scheduled });
                None
            }
            None => Some(match process.wait(timeout) {
                Ok(r) => probes::exec_outcome(&command, r),
                Err(e) => Outcome::Error(crate::base::errors::Chain(&e).to_string()),
            }),
        }
    }
}

/// A growable pool of probe threads, and the network probe thread beside it.
pub struct ProbePool<K> {
    shared: Arc<Shared<K>>,
    /// Started with the first probe it takes; `None` when it could not be started (the probe
    /// threads then run every probe).
    net: OnceLock<Option<NetProbes<K>>>,
}

impl<K: Clone + Send + 'static> ProbePool<K> {
    /// A pool of `max` threads for prompt probes (plus up to `MAX_SLOW_THREADS` for slow
    /// ones) reporting to `done`; its threads live in `owned`.
    pub fn new(max: usize, runtime: Arc<dyn ContainerRuntime>, done: Report<K>, owned: ProberThreads) -> Self {
        let (jobs, queue) = unbounded();
        let shared = Arc::new(Shared {
            jobs,
            queue,
            max: AtomicUsize::new(max.max(1)),
            idle: AtomicUsize::new(0),
            threads: AtomicUsize::new(0),
            busy: Mutex::new(Vec::new()),
            epoch: Instant::now(),
            runtime,
            grpc: GrpcEnv::default(),
            owned,
            done,
            reaper: OnceLock::new(),
        });
        ProbePool { shared, net: OnceLock::new() }
    }

    /// Threads for prompt probes at most.
    pub fn max(&self) -> usize {
        self.shared.max.load(Ordering::Relaxed)
    }

    /// A new limit: threads past it end once idle (`IDLE_EXIT`); more start as jobs wait.
    pub fn set_max(&mut self, max: usize) {
        self.shared.max.store(max.max(1), Ordering::Relaxed);
        self.rebalance();
    }

    /// Threads running now.
    pub fn threads(&self) -> usize {
        self.shared.threads.load(Ordering::Relaxed)
    }

    /// Starts a job: here and on the network probe thread when it takes it, else on a probe
    /// thread, starting one when the idle ones will not take it and the limits allow.
    pub fn submit(&self, job: Job<K>) {
        let for_net = super::scheduler_starts(&job.target.container, job.kind, &job.target.pod_ip);
        let job = match for_net.then(|| self.net()).flatten() {
            Some(n) => match n.submit(job) {
                Ok(()) => return,
                Err(job) => job,
            },
            None => job,
        };
        self.shared.submit(job);
    }

    /// Wakes the network probe thread for the probes handed to it since the last call.
    pub fn flush(&self) {
        if let Some(Some(n)) = self.net.get() {
            n.flush();
        }
    }

    fn net(&self) -> Option<&NetProbes<K>> {
        self.net
            .get_or_init(|| {
                let shared = self.shared.clone();
                let fallback: net::Fallback<K> = Arc::new(move |job| shared.submit(job));
                match NetProbes::start(self.shared.done.clone(), fallback, &self.shared.owned.net) {
                    Ok(n) => Some(n),
                    Err(e) => {
                        let e = crate::base::errors::Chain(&e);
                        log::error!(
                            "prober: cannot start the network probe thread, probe threads run every probe: {e}"
                        );
                        None
                    }
                }
            })
            .as_ref()
    }

    /// Starts threads for waiting jobs while the limits allow (called again once busy threads
    /// have turned slow: see `recheck_at`).
    pub fn rebalance(&self) {
        self.shared.rebalance();
    }

    /// When jobs are waiting for a thread, the moment a busy thread turns slow and another
    /// may start; the scheduler wakes then and calls `rebalance`.
    pub fn recheck_at(&self) -> Option<Instant> {
        let s = &self.shared;
        if s.queue.len() <= s.idle.load(Ordering::Acquire)
            || s.threads.load(Ordering::Acquire) >= self.max() + MAX_SLOW_THREADS
        {
            return None;
        }
        s.next_slow(Instant::now())
    }
}

impl<K: Clone + Send + 'static> Shared<K> {
    /// Queues a job for a probe thread and starts one when needed (the network probe thread
    /// hands over what it cannot run here too).
    fn submit(self: &Arc<Self>, job: Job<K>) {
        // The pool holds a receiver itself, so the channel never disconnects.
        let _ = self.jobs.send(job);
        self.rebalance();
    }

    fn rebalance(self: &Arc<Self>) {
        loop {
            let queued = self.queue.len();
            let idle = self.idle.load(Ordering::Acquire);
            if queued <= idle {
                return; // the common case: no lock, no scan
            }
            let (threads, max) = (self.threads.load(Ordering::Acquire), self.max.load(Ordering::Relaxed));
            if !should_spawn(queued, idle, threads, self.slow(Instant::now()), max) || !self.spawn() {
                return;
            }
        }
    }

    /// Starts one thread; false when the OS refused.
    fn spawn(self: &Arc<Self>) -> bool {
        let s = self;
        let n = s.threads.fetch_add(1, Ordering::AcqRel);
        s.idle.fetch_add(1, Ordering::AcqRel);
        let slot = Arc::new(AtomicU64::new(0));
        s.busy.lock().push(slot.clone());
        let (queue, shared) = (self.queue.clone(), self.clone());
        let spawned = s.owned.probes.spawn(&format!("fl-probe-{n}"), move |stop| {
            let s = &*shared;
            loop {
                let job = select! {
                    // Idle --stop signal--> Stopped (a probe under way finishes first).
                    recv(stop.receiver()) -> _ => break,
                    recv(queue) -> job => match job {
                        Ok(job) => job,
                        Err(_) => break,
                    },
                    // Shrink, but keep one thread so the next probe does not wait for a spawn.
                    default(IDLE_EXIT) => {
                        if s.threads.load(Ordering::Acquire) > 1 {
                            break;
                        }
                        continue;
                    }
                };
                s.idle.fetch_sub(1, Ordering::AcqRel);
                let started = Instant::now();
                slot.store(started.saturating_duration_since(s.epoch).as_nanos() as u64 + 1, Ordering::Relaxed);
                let outcome = s.run(&job, started);
                slot.store(0, Ordering::Relaxed);
                s.idle.fetch_add(1, Ordering::AcqRel);
                let Some(outcome) = outcome else { continue };
                let took = started.elapsed();
                if !(s.done)(Done { key: job.key, outcome, started, scheduled: job.scheduled, took }) {
                    break;
                }
            }
            s.busy.lock().retain(|b| !Arc::ptr_eq(b, &slot));
            s.idle.fetch_sub(1, Ordering::AcqRel);
            s.threads.fetch_sub(1, Ordering::AcqRel);
            Exit::Done
        });
        match spawned {
            Ok(_) => true,
            Err(e) => {
                s.busy.lock().pop();
                s.idle.fetch_sub(1, Ordering::AcqRel);
                s.threads.fetch_sub(1, Ordering::AcqRel);
                log::error!("prober: {}", crate::base::errors::Chain(&e));
                false
            }
        }
    }
}

impl<K> Drop for ProbePool<K> {
    /// The prober has ended: every probe thread is asked to stop (each finishes the probe it
    /// runs) and the reaper kills the commands still running. The agent joins them
    /// (`ProberThreads::stop`).
    fn drop(&mut self) {
        self.shared.owned.probes.signal_stop();
        self.shared.owned.reaper.signal_stop();
        if let Some(Some(net)) = self.net.get() {
            net.close();
        }
        if let Some(Some(reaper)) = self.shared.reaper.get() {
            reaper.close();
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::prober::probes::Target;
    use std::path::Path;

    #[test]
    fn threads_grow_past_slow_probes_up_to_the_hard_cap() {
        // (queued, idle, threads, slow, max) → spawn?
        let table = [
            ((1, 1, 1, 0, 8), false, "an idle thread takes it"),
            ((1, 0, 1, 0, 8), true, "room under max"),
            ((1, 0, 8, 0, 8), false, "max threads busy with prompt probes: wait for one"),
            ((1, 0, 8, 8, 8), true, "all eight stuck in slow probes: grow"),
            ((3, 0, 12, 5, 8), true, "seven not slow, under max"),
            ((3, 0, 13, 5, 8), false, "eight not slow"),
            ((1, 0, 8 + MAX_SLOW_THREADS, 8 + MAX_SLOW_THREADS, 8), false, "the hard cap"),
            ((0, 0, 1, 1, 8), false, "nothing waits"),
        ];
        for ((queued, idle, threads, slow, max), want, why) in table {
            assert_eq!(should_spawn(queued, idle, threads, slow, max), want, "{why}");
        }
    }

    /// A pool whose results arrive on the returned channel, with a TCP or HTTP probe
    /// target on 127.0.0.1:`port`.
    fn pool_with_target(port: u16, http: bool) -> (ProbePool<u32>, ProberThreads, Receiver<Done<u32>>, Target) {
        use crate::api::{Container, HttpGetAction, IntOrString, Probe, TcpSocketAction};
        let dir = tempfile::tempdir().unwrap();
        let runtime =
            crate::node::runtime::process::ProcessRuntime::new(dir.path(), Path::new("/bin/false"), 1 << 20, 1);
        let (tx, rx) = unbounded();
        let done: Report<u32> = Arc::new(move |d| tx.send(d).is_ok());
        let threads = ProberThreads::new(&Health::default());
        let pool = ProbePool::new(1, Arc::new(runtime.unwrap()), done, threads.clone());
        let port_ = IntOrString::Int(i64::from(port));
        let mut probe = Probe { timeout_seconds: 2, ..Default::default() };
        if http {
            let (path, host, scheme, http_headers) = ("/".into(), String::new(), String::new(), Vec::new());
            probe.http_get = Some(HttpGetAction { path, port: port_, host, scheme, http_headers });
        } else {
            probe.tcp_socket = Some(TcpSocketAction { port: port_, host: String::new() });
        }
        let container = Container { readiness_probe: Some(probe), ..Default::default() };
        let target = Target { pod_ip: "127.0.0.1".into(), container: Arc::new(container), container_id: "c".into() };
        (pool, threads, rx, target)
    }

    fn job(target: &Target) -> Job<u32> {
        Job {
            key: 1,
            kind: crate::node::prober::ProbeType::Readiness,
            target: target.clone(),
            scheduled: Instant::now(),
        }
    }

    #[test]
    fn probes_to_an_address_run_on_the_network_probe_thread_and_the_others_on_probe_threads() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (pool, threads, rx, mut target) = pool_with_target(listener.local_addr().unwrap().port(), false);
        pool.submit(job(&target));
        pool.flush();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap().outcome, Outcome::Success(String::new()));
        assert_eq!((pool.threads(), threads.net.len()), (0, 1), "no probe thread for it");
        // The same probe to a host name: looked up, on a probe thread.
        let mut container = (*target.container).clone();
        container.readiness_probe.as_mut().unwrap().tcp_socket.as_mut().unwrap().host = "localhost".into();
        target.container = Arc::new(container);
        pool.submit(job(&target));
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(pool.threads(), 1);
        drop(pool);
        let left = threads.stop(Duration::from_secs(2));
        assert!(left.stuck.is_empty() && left.in_calls.is_empty(), "{left:?}");
    }

    #[test]
    fn an_idle_probe_thread_stops_at_once_without_waiting_for_its_idle_timeout() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (pool, threads, rx, target) = pool_with_target(listener.local_addr().unwrap().port(), false);
        pool.shared.submit(job(&target)); // past the network probe thread
        let d = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(d.outcome, Outcome::Success(String::new()));
        assert_eq!(pool.threads(), 1, "one idle thread stays");
        drop(pool);
        // Within 2 s, where the idle timeout is 30 s.
        let left = threads.stop(Duration::from_secs(2));
        assert!(left.stuck.is_empty() && left.in_calls.is_empty(), "{left:?}");
    }

    #[test]
    fn a_probe_thread_inside_a_probe_is_named_after_a_short_wait_but_not_stuck() {
        // Accepts (the kernel does) but never answers: the HTTP probe waits its 2 s.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (pool, threads, _rx, target) = pool_with_target(listener.local_addr().unwrap().port(), true);
        pool.shared.submit(job(&target)); // past the network probe thread
        std::thread::sleep(Duration::from_millis(200));
        drop(pool);
        // Named while still inside its probe: the stop did not wait for the probe's 2 s.
        let left = threads.stop(Duration::from_secs(10));
        let names: Vec<&str> = left.in_calls.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["fl-probe-0"]);
        assert!(left.stuck.is_empty());
        assert_eq!(left.in_calls[0].to_string(), "fl-probe-0 did not stop within 500ms");
    }
}
