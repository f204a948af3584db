//! The probe pool: blocking probes run on a few threads that grow on demand up to a
//! maximum (so one slow probe never holds up the others) and shrink again when idle.

use super::probes::{self, GrpcEnv, Outcome, Target};
use crate::runtime::ContainerRuntime;
use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An idle probe thread beyond the first exits after this long.
const IDLE_EXIT: Duration = Duration::from_secs(30);

/// One probe to run.
pub struct Job<K> {
    /// Who asked (the worker key).
    pub key: K,
    /// Which of the container's probes.
    pub kind: super::ProbeType,
    /// Where to.
    pub target: Target,
    /// When the worker was due.
    pub scheduled: Instant,
}

/// What came of a job.
pub struct Done<K> {
    /// The worker key.
    pub key: K,
    /// The outcome.
    pub outcome: Outcome,
    /// When the probe started (minus `scheduled` is its lateness).
    pub started: Instant,
    /// When the worker was due.
    pub scheduled: Instant,
    /// How long the probe took.
    pub took: Duration,
}

/// Where finished probes are reported; false when nobody listens any more.
pub type Report<K> = Arc<dyn Fn(Done<K>) -> bool + Send + Sync>;

/// A growable pool of probe threads.
pub struct ProbePool<K> {
    jobs: Sender<Job<K>>,
    queue: Receiver<Job<K>>,
    done: Report<K>,
    idle: Arc<AtomicUsize>,
    threads: Arc<AtomicUsize>,
    max: usize,
    runtime: Arc<dyn ContainerRuntime>,
    grpc: Arc<GrpcEnv>,
}

impl<K: Send + 'static> ProbePool<K> {
    /// A pool of at most `max` threads reporting to `done`.
    pub fn new(max: usize, runtime: Arc<dyn ContainerRuntime>, done: Report<K>) -> Self {
        let (jobs, queue) = unbounded();
        ProbePool {
            jobs,
            queue,
            done,
            idle: Arc::default(),
            threads: Arc::default(),
            max: max.max(1),
            runtime,
            grpc: Arc::default(),
        }
    }

    /// Threads running now.
    pub fn threads(&self) -> usize {
        self.threads.load(Ordering::Relaxed)
    }

    /// Queues a job, starting a thread when none is idle and the maximum allows.
    pub fn submit(&self, job: Job<K>) {
        if self.idle.load(Ordering::Acquire) == 0 && self.threads.load(Ordering::Acquire) < self.max {
            self.spawn();
        }
        // The pool holds a receiver itself, so the channel never disconnects.
        let _ = self.jobs.send(job);
    }

    fn spawn(&self) {
        let n = self.threads.fetch_add(1, Ordering::AcqRel);
        self.idle.fetch_add(1, Ordering::AcqRel);
        let (queue, done, idle, threads) =
            (self.queue.clone(), self.done.clone(), self.idle.clone(), self.threads.clone());
        let (runtime, grpc) = (self.runtime.clone(), self.grpc.clone());
        let (idle2, threads2) = (self.idle.clone(), self.threads.clone());
        let spawned = std::thread::Builder::new().name(format!("fl-probe-{n}")).spawn(move || {
            loop {
                match queue.recv_timeout(IDLE_EXIT) {
                    Ok(job) => {
                        idle.fetch_sub(1, Ordering::AcqRel);
                        let started = Instant::now();
                        let outcome = match super::probe_of(&job.target.container, job.kind) {
                            Some(p) => probes::run(p, &job.target, &runtime, &grpc),
                            None => Outcome::Error("the container has no such probe".into()),
                        };
                        let took = started.elapsed();
                        idle.fetch_add(1, Ordering::AcqRel);
                        if !done(Done { key: job.key, outcome, started, scheduled: job.scheduled, took }) {
                            break;
                        }
                    }
                    // Shrink, but keep one thread so the next probe does not wait for a spawn.
                    Err(RecvTimeoutError::Timeout) if threads.load(Ordering::Acquire) > 1 => break,
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
            idle.fetch_sub(1, Ordering::AcqRel);
            threads.fetch_sub(1, Ordering::AcqRel);
        });
        if let Err(e) = spawned {
            idle2.fetch_sub(1, Ordering::AcqRel);
            threads2.fetch_sub(1, Ordering::AcqRel);
            log::error!("prober: cannot start a probe thread: {e}");
        }
    }
}
