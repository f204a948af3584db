//! The manager pattern: a plain struct holds the logic (`handle`, `on_tick`), and a
//! `ManagerHandle` runs it on a named thread that loops on `select!` over a stop channel,
//! its command channel and a ticker. Dropping the stop sender stops it; `stop` waits with a
//! timeout so a stuck thread is reported instead of hanging shutdown.

use crossbeam_channel::{bounded, select, tick, unbounded, Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Logic driven by a manager thread.
pub trait Manager: Send + 'static {
    /// Commands the manager accepts.
    type Command: Send + 'static;
    /// Handles one command.
    fn handle(&mut self, cmd: Self::Command);
    /// Periodic work.
    fn on_tick(&mut self);
    /// How often `on_tick` runs.
    fn tick_interval(&self) -> Duration;
    /// A moment the manager wants to be woken at (a timer heap's next entry), if any.
    fn next_deadline(&self) -> Option<Instant> {
        None
    }
    /// Called once `next_deadline` has passed.
    fn on_deadline(&mut self) {}
}

/// Where a producer (the prober, the device manager) publishes its own update type. The
/// consumer decides how an update reaches it (the agent wraps it into the pod manager's
/// command), so no producer imports its consumer's command enum.
pub struct Publisher<U>(Arc<dyn Fn(U) + Send + Sync>);

impl<U> Clone for Publisher<U> {
    fn clone(&self) -> Self {
        Publisher(self.0.clone())
    }
}

impl<U: 'static> Publisher<U> {
    /// Publishes through `f`.
    pub fn new(f: impl Fn(U) + Send + Sync + 'static) -> Self {
        Publisher(Arc::new(f))
    }

    /// Publishes onto a channel of the consumer's commands. A consumer that is gone
    /// (shutdown) drops the update.
    pub fn to<C: From<U> + Send + 'static>(tx: Sender<C>) -> Self {
        Publisher::new(move |u| {
            let _ = tx.send(C::from(u));
        })
    }

    /// Publishes one update.
    pub fn publish(&self, u: U) {
        (self.0)(u)
    }
}

/// What a manager's loop answers to show it is not stuck inside one command: a sender
/// for its reply.
type Ping = Sender<()>;

/// What a manager's loop shows of itself: where to ping it, and since when it has been
/// inside one command (or tick, or deadline), if it is.
#[derive(Clone)]
struct LoopWatch {
    ping: Sender<Ping>,
    busy: Arc<Mutex<Option<Instant>>>,
    /// `on_tick` calls completed: the pod manager's syncs, shown on `/metrics`.
    ticks: Arc<AtomicU64>,
}

impl LoopWatch {
    /// Runs `work` as one piece of the loop's work.
    fn busy<T>(&self, work: impl FnOnce() -> T) -> T {
        *self.busy.lock() = Some(Instant::now());
        let out = work();
        *self.busy.lock() = None;
        out
    }
}

/// A registered thread: its name, whether it is alive, and for a manager its loop.
struct ThreadEntry {
    id: u64,
    name: String,
    alive: Arc<AtomicBool>,
    watch: Option<LoopWatch>,
}

/// Every long-lived thread of the agent and whether it is alive, for `/healthz`.
#[derive(Clone, Default)]
pub struct Health {
    threads: Arc<Mutex<(u64, Vec<ThreadEntry>)>>,
}

impl Health {
    /// Registers a thread (a manager with its loop); returns its id and liveness flag.
    fn register(&self, name: &str, watch: Option<LoopWatch>) -> (u64, Arc<AtomicBool>) {
        let alive = Arc::new(AtomicBool::new(true));
        let mut t = self.threads.lock();
        t.0 += 1;
        let id = t.0;
        t.1.push(ThreadEntry { id, name: name.into(), alive: alive.clone(), watch });
        (id, alive)
    }

    /// Names of the threads that ended unexpectedly, and of the managers that did not answer
    /// a ping within `within` (stuck inside one command), sorted. What the systemd watchdog
    /// is fed on.
    pub fn unresponsive(&self, within: Duration) -> Vec<String> {
        let mut bad = Vec::new();
        let mut waiting = Vec::new();
        for e in self.threads.lock().1.iter() {
            if !e.alive.load(Ordering::Relaxed) {
                bad.push(e.name.clone());
                continue;
            }
            let Some(watch) = &e.watch else { continue };
            let (tx, rx) = bounded(1);
            match watch.ping.try_send(tx) {
                Ok(()) => waiting.push((e.name.clone(), rx)),
                // The last ping is still there: the loop has not come round since.
                Err(crossbeam_channel::TrySendError::Full(_)) => bad.push(e.name.clone()),
                // The loop ended (in order: it is forgotten at once).
                Err(crossbeam_channel::TrySendError::Disconnected(_)) => {}
            }
        }
        let deadline = Instant::now() + within;
        for (name, rx) in waiting {
            if rx.recv_deadline(deadline).is_err() {
                bad.push(name);
            }
        }
        bad.sort();
        bad
    }

    /// The managers that have been inside one piece of work (a command, a tick) for `after`
    /// or longer, with for how long, by name: a manager stuck in one input (`/healthz`).
    pub fn busy_for(&self, after: Duration) -> Vec<(String, Duration)> {
        let now = Instant::now();
        let mut out: Vec<(String, Duration)> = self
            .threads
            .lock()
            .1
            .iter()
            .filter_map(|e| {
                let since = (*e.watch.as_ref()?.busy.lock())?;
                let busy = now.saturating_duration_since(since);
                (busy >= after).then(|| (e.name.clone(), busy))
            })
            .collect();
        out.sort();
        out
    }

    /// Each running manager's completed ticks (`on_tick` calls), by name: the proof that its
    /// periodic work goes on.
    pub fn ticks(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = self
            .threads
            .lock()
            .1
            .iter()
            .filter_map(|e| Some((e.name.clone(), e.watch.as_ref()?.ticks.load(Ordering::Relaxed))))
            .collect();
        out.sort();
        out
    }

    /// Forgets a thread that ended in order (a short-lived one, or one that was stopped).
    fn forget(&self, id: u64) {
        self.threads.lock().1.retain(|e| e.id != id);
    }

    /// Names of threads that ended unexpectedly (returned `Exit::Failed` without being asked).
    pub fn dead(&self) -> Vec<String> {
        self.threads.lock().1.iter().filter(|e| !e.alive.load(Ordering::Relaxed)).map(|e| e.name.clone()).collect()
    }

    /// Names of the registered threads that are alive, sorted.
    pub fn alive(&self) -> Vec<String> {
        let mut v: Vec<String> =
            self.threads.lock().1.iter().filter(|e| e.alive.load(Ordering::Relaxed)).map(|e| e.name.clone()).collect();
        v.sort();
        v
    }
}

/// Clears the liveness flag when the thread ends other than by an orderly stop. (A panic
/// ends the whole agent: `main`'s panic hook aborts the process.)
struct AliveGuard {
    health: Health,
    id: u64,
    alive: Arc<AtomicBool>,
    orderly: bool,
}

impl AliveGuard {
    fn new(health: &Health, name: &str, watch: Option<LoopWatch>) -> Self {
        let (id, alive) = health.register(name, watch);
        AliveGuard { health: health.clone(), id, alive, orderly: false }
    }
}

impl Drop for AliveGuard {
    fn drop(&mut self) {
        if self.orderly {
            self.health.forget(self.id);
        } else {
            self.alive.store(false, Ordering::Relaxed);
        }
    }
}

/// What a worker's body receives: the one stop signal of its owner. The owner stops the
/// worker by dropping the sender, so `receiver()` becomes ready (disconnected) in every
/// `select!` that waits on it.
#[derive(Clone)]
pub struct StopSignal(Receiver<()>);

impl StopSignal {
    /// The channel to select on; it is ready (disconnected) once stop was asked.
    pub fn receiver(&self) -> &Receiver<()> {
        &self.0
    }

    /// Whether stop was asked.
    pub fn is_stopped(&self) -> bool {
        matches!(self.0.try_recv(), Err(crossbeam_channel::TryRecvError::Disconnected))
    }

    /// Sleeps up to `d`; returns true (at once) when stop was asked meanwhile.
    pub fn sleep(&self, d: Duration) -> bool {
        matches!(self.0.recv_timeout(d), Err(RecvTimeoutError::Disconnected))
    }
}

/// How a worker's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Stopped when asked, or its work is done (a short-lived thread): not a failure.
    Done,
    /// Ended on its own although it should have run until stopped: `/healthz` reports it.
    Failed,
}

/// A thread could not be stopped in time.
#[derive(Debug, thiserror::Error)]
#[error("{name} did not stop within {timeout:?}")]
pub struct StopTimeout {
    /// The thread's name.
    pub name: String,
    /// How long it was given.
    pub timeout: Duration,
}

/// A thread with an owner: named (≤ 15 bytes, Linux truncates longer names), registered
/// with `Health` while it runs, stopped by one stop signal, joined with a timeout. Every
/// thread the agent starts is one of these (managers through `ManagerHandle`).
pub struct Worker {
    name: String,
    stop: Option<Sender<()>>,
    done: Receiver<()>,
    join: Option<JoinHandle<()>>,
}

impl Worker {
    /// Starts `body` on a thread called `name`. The body watches its `StopSignal` and
    /// returns `Exit::Done` when stopped or when its work is over; `Exit::Failed` marks it
    /// dead in `health`.
    pub fn spawn(
        name: &str,
        health: &Health,
        body: impl FnOnce(StopSignal) -> Exit + Send + 'static,
    ) -> std::io::Result<Worker> {
        Worker::spawn_pinged(name, health, None, body)
    }

    /// `spawn`, for a manager's loop that answers pings (`Health::unresponsive`) and says
    /// when it is busy (`Health::busy_for`).
    fn spawn_pinged(
        name: &str,
        health: &Health,
        watch: Option<LoopWatch>,
        body: impl FnOnce(StopSignal) -> Exit + Send + 'static,
    ) -> std::io::Result<Worker> {
        debug_assert!(name.len() <= 15, "thread name {name} is longer than 15 bytes");
        let (stop_tx, stop_rx) = bounded::<()>(0);
        let (done_tx, done_rx) = bounded::<()>(1);
        let mut guard = AliveGuard::new(health, name, watch);
        let join = std::thread::Builder::new().name(name.into()).spawn(move || {
            guard.orderly = body(StopSignal(stop_rx)) == Exit::Done;
            drop(guard);
            // Sent last, after everything the body owned was dropped.
            let _ = done_tx.send(());
        })?;
        Ok(Worker { name: name.into(), stop: Some(stop_tx), done: done_rx, join: Some(join) })
    }

    /// The thread's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the thread has ended (a short-lived one is then reaped with `stop`).
    pub fn is_finished(&self) -> bool {
        self.join.as_ref().map_or(true, |j| j.is_finished())
    }

    /// Asks the thread to stop without waiting (to stop many at once, then `join` each).
    pub fn signal_stop(&mut self) {
        drop(self.stop.take());
    }

    /// Waits until `deadline` for the thread to end, then joins it.
    pub fn join(mut self, deadline: Instant) -> Result<(), StopTimeout> {
        let timeout = deadline.saturating_duration_since(Instant::now());
        match self.done.recv_timeout(timeout) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                if let Some(j) = self.join.take() {
                    // The thread has finished, so join returns at once.
                    let _ = j.join();
                }
                Ok(())
            }
            Err(RecvTimeoutError::Timeout) => Err(StopTimeout { name: self.name.clone(), timeout }),
        }
    }

    /// Stops the thread and waits up to `timeout` for it to end.
    pub fn stop(mut self, timeout: Duration) -> Result<(), StopTimeout> {
        self.signal_stop();
        let r = self.join(Instant::now() + timeout);
        r.map_err(|e| StopTimeout { timeout, ..e })
    }
}

/// Stops every worker at once, then joins each within one shared `timeout`; returns the
/// ones that did not end in time.
pub fn stop_all(workers: impl IntoIterator<Item = Worker>, timeout: Duration) -> Vec<StopTimeout> {
    let mut workers: Vec<Worker> = workers.into_iter().collect();
    workers.iter_mut().for_each(Worker::signal_stop);
    let deadline = Instant::now() + timeout;
    workers.into_iter().filter_map(|w| w.join(deadline).err()).map(|e| StopTimeout { timeout, ..e }).collect()
}

/// The way to end a blocking gRPC call early: the owner drops the `Canceller`, and a call
/// waiting in `run` returns at once (the caller then cancels the RPC). A crossbeam stop
/// channel cannot wake a future, so threads that wait in gRPC calls (image pulls, device
/// plugin streams and `PreStartContainer`) wait on this as well.
pub struct Cancel(futures::channel::oneshot::Receiver<()>);

/// The owner's end of a `Cancel`: dropping it cancels.
pub struct Canceller {
    _tx: futures::channel::oneshot::Sender<()>,
}

impl Cancel {
    /// A new pair.
    pub fn pair() -> (Canceller, Cancel) {
        let (tx, rx) = futures::channel::oneshot::channel();
        (Canceller { _tx: tx }, Cancel(rx))
    }

    /// Whether the owner cancelled.
    pub fn is_cancelled(&mut self) -> bool {
        !matches!(self.0.try_recv(), Ok(None))
    }

    /// Waits for `f`; `None` when cancelled first.
    pub fn run<F: std::future::Future + Unpin>(&mut self, f: F) -> Option<F::Output> {
        if self.is_cancelled() {
            return None;
        }
        match futures::executor::block_on(futures::future::select(f, &mut self.0)) {
            futures::future::Either::Left((out, _)) => Some(out),
            futures::future::Either::Right(_) => None,
        }
    }
}

/// What a thread that waits in gRPC calls stops by: its stop signal, for `select!`-style
/// waits and sleeps, and a `Cancel` for the calls. Both fire in one act of its owner.
pub struct CallStop {
    /// The thread's stop signal.
    pub signal: StopSignal,
    /// Cancels the call the thread waits in.
    pub cancel: Cancel,
}

impl CallStop {
    /// Sleeps up to `d`; true (at once) when the thread is to stop.
    pub fn sleep(&self, d: Duration) -> bool {
        self.signal.sleep(d)
    }

    /// Whether the thread is to stop.
    pub fn is_stopped(&self) -> bool {
        self.signal.is_stopped()
    }

    /// Waits for `f`; `None` when the thread is to stop first (the caller then cancels the
    /// call `f` belongs to).
    pub fn run<F: std::future::Future + Unpin>(&mut self, f: F) -> Option<F::Output> {
        if self.is_stopped() {
            return None;
        }
        self.cancel.run(f)
    }
}

/// A thread could not be added to a `WorkerSet`.
#[derive(Debug, thiserror::Error)]
pub enum WorkerSetError {
    /// The set already runs its most threads.
    #[error("too many {name} threads running (at most {max})")]
    Full {
        /// The threads' name.
        name: String,
        /// The bound.
        max: usize,
    },
    /// The set is stopping: no new thread starts.
    #[error("the {owner} is stopping")]
    Stopping {
        /// Who owns the set (`prober`, `device manager`).
        owner: &'static str,
    },
    /// The OS refused a thread.
    #[error("cannot start a {name} thread")]
    Spawn {
        /// The thread's name.
        name: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// One thread of a `WorkerSet`, to stop it alone or to tell it has ended.
pub type WorkerId = u64;

/// What stopping a thread does besides its stop signal: wake a `poll`, cancel a gRPC call.
type OnStop = Box<dyn FnOnce() + Send>;

struct Member {
    id: WorkerId,
    worker: Worker,
    on_stop: Option<OnStop>,
}

impl Member {
    fn signal_stop(&mut self) {
        self.worker.signal_stop();
        if let Some(f) = self.on_stop.take() {
            f();
        }
    }
}

#[derive(Default)]
struct Members {
    stopping: bool,
    next_id: WorkerId,
    running: Vec<Member>,
}

/// The one way the agent owns a changing group of threads (probe threads, host lookups,
/// the exec reaper, CRI stops, pod workers, hooks, image pulls, device plugin streams,
/// PreStart calls): at most `max` at once, each a `Worker` registered with `Health`; threads
/// that ended by themselves are reaped (joined) as new ones start; one can be stopped alone;
/// `stop` signals all of them at once and joins them within one deadline, naming the late
/// ones.
pub struct WorkerSet {
    owner: &'static str,
    max: usize,
    health: Health,
    members: Mutex<Members>,
}

impl WorkerSet {
    /// An empty set of at most `max` threads, registered in `health`; `owner` names it in
    /// errors.
    pub fn new(owner: &'static str, max: usize, health: &Health) -> WorkerSet {
        WorkerSet { owner, max, health: health.clone(), members: Mutex::default() }
    }

    /// Starts `body` on a thread called `name`, unless the set is full or stopping.
    pub fn spawn(
        &self,
        name: &str,
        body: impl FnOnce(StopSignal) -> Exit + Send + 'static,
    ) -> Result<WorkerId, WorkerSetError> {
        self.spawn_with(name, None, body)
    }

    /// `spawn` for a thread that waits in gRPC calls: its `Cancel` fires when it is told to
    /// stop, in the same act as its stop signal.
    pub fn spawn_cancellable(
        &self,
        name: &str,
        body: impl FnOnce(CallStop) -> Exit + Send + 'static,
    ) -> Result<WorkerId, WorkerSetError> {
        let (canceller, cancel) = Cancel::pair();
        self.spawn_with(name, Some(Box::new(move || drop(canceller))), move |signal| body(CallStop { signal, cancel }))
    }

    /// Like `spawn`, with `on_stop` called right after the thread's stop signal (to wake a
    /// `poll`: signalled first, the woken thread sees the stop).
    pub fn spawn_with(
        &self,
        name: &str,
        on_stop: Option<OnStop>,
        body: impl FnOnce(StopSignal) -> Exit + Send + 'static,
    ) -> Result<WorkerId, WorkerSetError> {
        let mut m = self.members.lock();
        if m.stopping {
            return Err(WorkerSetError::Stopping { owner: self.owner });
        }
        reap(&mut m.running);
        if m.running.len() >= self.max {
            return Err(WorkerSetError::Full { name: name.into(), max: self.max });
        }
        let worker = Worker::spawn(name, &self.health, body)
            .map_err(|source| WorkerSetError::Spawn { name: name.into(), source })?;
        m.next_id += 1;
        let id = m.next_id;
        m.running.push(Member { id, worker, on_stop });
        Ok(id)
    }

    /// Threads running now (those that ended are reaped first).
    pub fn len(&self) -> usize {
        let mut m = self.members.lock();
        reap(&mut m.running);
        m.running.len()
    }

    /// Whether no thread runs.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether thread `id` still runs (the threads that ended are reaped first).
    pub fn is_running(&self, id: WorkerId) -> bool {
        let mut m = self.members.lock();
        reap(&mut m.running);
        m.running.iter().any(|member| member.id == id)
    }

    /// Asks thread `id` to stop, without waiting (it is reaped once it has ended).
    pub fn signal_stop_one(&self, id: WorkerId) {
        if let Some(member) = self.members.lock().running.iter_mut().find(|m| m.id == id) {
            member.signal_stop();
        }
    }

    /// Asks every thread to stop, without waiting; no new thread starts from now on.
    pub fn signal_stop(&self) {
        let mut m = self.members.lock();
        m.stopping = true;
        m.running.iter_mut().for_each(Member::signal_stop);
    }

    /// Stops every thread and waits up to `timeout` for all of them; returns the ones that
    /// did not end in time (they keep running detached, still listed by `Health`).
    pub fn stop(&self, timeout: Duration) -> Vec<StopTimeout> {
        self.signal_stop();
        let running = std::mem::take(&mut self.members.lock().running);
        stop_all(running.into_iter().map(|m| m.worker), timeout)
    }
}

/// Joins the threads that have ended (at once: they have).
fn reap(running: &mut Vec<Member>) {
    let (ended, still): (Vec<Member>, Vec<Member>) = running.drain(..).partition(|m| m.worker.is_finished());
    *running = still;
    for m in ended {
        // A finished thread has sent its last word, so the join returns at once.
        let _ = m.worker.join(Instant::now());
    }
}

/// One piece of work for a `JobQueue`'s threads; it may look at their stop signal.
pub type Job = Box<dyn FnOnce(&StopSignal) + Send>;

/// Why a `JobQueue` did not take a job.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// Its threads are busy and its queue is full.
    #[error("at most {max} at once, and as many are already asked")]
    Full {
        /// Threads and queue together.
        max: usize,
    },
    /// It is stopping.
    #[error("it is stopping")]
    Closed,
    /// A thread could not be started.
    #[error("cannot start a thread")]
    Spawn(#[source] std::io::Error),
}

/// Threads named `name`, at most `max` at once, taking jobs from one queue of at most
/// `max_queued`: a bound on concurrency that queues instead of refusing. A thread is
/// started (in a `WorkerSet`) for a job while fewer than `max` run; past that the job
/// waits, and each thread takes the next one when its job is done, ending when none is
/// left. `stop` drops what waits and joins the threads.
pub struct JobQueue {
    name: &'static str,
    max: usize,
    max_queued: usize,
    threads: WorkerSet,
    jobs: Arc<Mutex<Jobs>>,
}

#[derive(Default)]
struct Jobs {
    waiting: std::collections::VecDeque<Job>,
    /// Threads taking jobs (each gives its place up when it finds the queue empty).
    running: usize,
    closed: bool,
}

impl JobQueue {
    /// No thread runs yet; threads are registered in `health`.
    pub fn new(name: &'static str, max: usize, max_queued: usize, health: &Health) -> JobQueue {
        // `running` bounds the threads that take jobs; the set only owns them (one that gave
        // its place up may not have ended yet when the next starts).
        let threads = WorkerSet::new(name, usize::MAX, health);
        JobQueue { name, max, max_queued, threads, jobs: Arc::default() }
    }

    /// Runs `job` on a thread of its own, or queues it.
    pub fn submit(&self, job: Job) -> Result<(), JobError> {
        let mut q = self.jobs.lock();
        if q.closed {
            return Err(JobError::Closed);
        }
        if q.running >= self.max {
            if q.waiting.len() >= self.max_queued {
                return Err(JobError::Full { max: self.max + self.max_queued });
            }
            q.waiting.push_back(job);
            return Ok(());
        }
        let jobs = self.jobs.clone();
        let started = self.threads.spawn(self.name, move |stop| {
            let mut next = Some(job);
            while let Some(job) = next {
                job(&stop);
                let mut q = jobs.lock();
                next = if stop.is_stopped() { None } else { q.waiting.pop_front() };
                if next.is_none() {
                    q.running -= 1;
                }
            }
            Exit::Done
        });
        match started {
            Ok(_) => {
                q.running += 1;
                Ok(())
            }
            // The set has no bound of its own and is stopped only after `close`.
            Err(WorkerSetError::Spawn { source, .. }) => Err(JobError::Spawn(source)),
            Err(WorkerSetError::Full { .. } | WorkerSetError::Stopping { .. }) => Err(JobError::Closed),
        }
    }

    /// Jobs waiting for a thread.
    pub fn waiting(&self) -> usize {
        self.jobs.lock().waiting.len()
    }

    /// Takes no more jobs and drops those waiting; returns how many were dropped.
    pub fn close(&self) -> usize {
        let mut q = self.jobs.lock();
        q.closed = true;
        std::mem::take(&mut q.waiting).len()
    }

    /// `close`, then signals every thread and joins them within `timeout`; returns the
    /// ones that did not end in time.
    pub fn stop(&self, timeout: Duration) -> Vec<StopTimeout> {
        self.close();
        self.threads.stop(timeout)
    }
}

/// A running manager: its command sender and the worker that runs it.
pub struct ManagerHandle<C> {
    commands: Sender<C>,
    worker: Worker,
}

impl<C: Send + 'static> ManagerHandle<C> {
    /// Moves `manager` into a thread called `name` (≤ 15 bytes).
    pub fn spawn<M: Manager<Command = C>>(name: &str, manager: M, health: &Health) -> std::io::Result<Self> {
        let (cmd_tx, cmd_rx) = unbounded::<C>();
        Self::spawn_with_channel(name, manager, (cmd_tx, cmd_rx), health)
    }

    /// Like `spawn`, with a command channel made beforehand (for a manager that hands its
    /// own sender to helpers it owns).
    pub fn spawn_with_channel<M: Manager<Command = C>>(
        name: &str,
        mut manager: M,
        (cmd_tx, cmd_rx): (Sender<C>, Receiver<C>),
        health: &Health,
    ) -> std::io::Result<Self> {
        let (ping_tx, ping_rx) = bounded::<Ping>(1);
        let watch = LoopWatch { ping: ping_tx, busy: Arc::default(), ticks: Arc::default() };
        let worker = Worker::spawn_pinged(name, health, Some(watch.clone()), move |stop| {
            let ticker = tick(manager.tick_interval());
            loop {
                let wait = manager.next_deadline().map(|d| d.saturating_duration_since(Instant::now()));
                let wait = wait.unwrap_or(Duration::from_secs(3600));
                select! {
                    // Running --stop sender dropped--> Stopped
                    recv(stop.receiver()) -> _ => break,
                    recv(cmd_rx) -> cmd => match cmd {
                        Ok(cmd) => watch.busy(|| manager.handle(cmd)),
                        // Every command sender is gone: nothing more can arrive.
                        Err(_) => break,
                    },
                    recv(ticker) -> _ => {
                        watch.busy(|| manager.on_tick());
                        watch.ticks.fetch_add(1, Ordering::Relaxed);
                    }
                    // Between two commands: not stuck in one.
                    recv(ping_rx) -> reply => if let Ok(reply) = reply {
                        let _ = reply.try_send(());
                    },
                    default(wait) => watch.busy(|| manager.on_deadline()),
                }
            }
            Exit::Done
        })?;
        Ok(ManagerHandle { commands: cmd_tx, worker })
    }

    /// A sender for commands to this manager.
    pub fn sender(&self) -> Sender<C> {
        self.commands.clone()
    }

    /// Stops the thread and waits up to `timeout` for it to finish.
    pub fn stop(self, timeout: Duration) -> Result<(), StopTimeout> {
        self.worker.stop(timeout)
    }

    /// The worker, to stop together with others (`stop_all`).
    pub fn into_worker(self) -> Worker {
        self.worker
    }
}

#[cfg(test)]
pub(crate) mod testing {
    use super::Manager;
    use crossbeam_channel::Receiver;
    use std::time::{Duration, Instant};

    /// Polls `done` every 5 ms until it holds; panics naming `what` if it does not within
    /// `deadline` (a deadline so that a test fails instead of hanging, not a speed bound).
    pub fn wait_until(what: &str, deadline: Duration, mut done: impl FnMut() -> bool) {
        let until = Instant::now() + deadline;
        while !done() {
            assert!(Instant::now() < until, "not within {deadline:?}: {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A manager whose every command waits until `release` says so (at most 30 s): a
    /// manager stuck inside a call.
    pub struct Wedged {
        pub release: Receiver<()>,
    }

    impl Manager for Wedged {
        type Command = ();
        fn handle(&mut self, _: ()) {
            let _ = self.release.recv_timeout(Duration::from_secs(30));
        }
        fn on_tick(&mut self) {}
        fn tick_interval(&self) -> Duration {
            Duration::from_secs(3600)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn until_stopped(stop: StopSignal) -> Exit {
        let _ = stop.receiver().recv_timeout(Duration::from_secs(10));
        Exit::Done
    }

    #[test]
    fn a_full_worker_set_refuses_until_a_thread_has_ended_and_is_reaped() {
        let health = Health::default();
        let set = WorkerSet::new("prober", 2, &health);
        let (release, released) = bounded::<()>(0);
        let short = set
            .spawn("fl-t-short", move |_| {
                let _ = released.recv_timeout(Duration::from_secs(10));
                Exit::Done
            })
            .unwrap();
        set.spawn("fl-t-long", until_stopped).unwrap();
        let e = set.spawn("fl-t-more", until_stopped).unwrap_err();
        assert_eq!(e.to_string(), "too many fl-t-more threads running (at most 2)");
        drop(release);
        let deadline = Instant::now() + Duration::from_secs(5);
        while set.is_running(short) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(set.len(), 1, "the ended thread was reaped");
        set.spawn("fl-t-more", until_stopped).unwrap();
        assert!(set.stop(Duration::from_secs(2)).is_empty());
        assert!(health.alive().is_empty() && health.dead().is_empty());
    }

    #[test]
    fn stop_wakes_each_thread_and_names_the_one_that_ignores_it() {
        let health = Health::default();
        let set = WorkerSet::new("prober", 4, &health);
        let (woken_tx, woken) = bounded::<()>(1);
        let wake: OnStop = Box::new(move || {
            let _ = woken_tx.try_send(());
        });
        set.spawn_with("fl-t-poll", Some(wake), until_stopped).unwrap();
        set.spawn("fl-t-ok", until_stopped).unwrap();
        let (_hold, never) = bounded::<()>(0);
        set.spawn("fl-t-stuck", move |_| {
            let _ = never.recv_timeout(Duration::from_millis(800));
            Exit::Done
        })
        .unwrap();
        let late = set.stop(Duration::from_millis(200));
        assert_eq!(woken.try_recv(), Ok(()), "the on-stop wake-up ran");
        let names: Vec<&str> = late.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["fl-t-stuck"]);
        assert_eq!(late[0].to_string(), "fl-t-stuck did not stop within 200ms");
        let e = set.spawn("fl-t-new", until_stopped).unwrap_err();
        assert_eq!(e.to_string(), "the prober is stopping");
    }

    #[test]
    fn one_thread_of_a_set_stops_alone_and_its_grpc_wait_is_cancelled() {
        let health = Health::default();
        let set = WorkerSet::new("device manager", 4, &health);
        // A future that never completes, as a gRPC call to a plugin that never answers.
        let waits = set
            .spawn_cancellable("fl-t-call", |mut stop| {
                assert!(stop.run(futures::future::pending::<()>()).is_none());
                Exit::Done
            })
            .unwrap();
        let sleeps = set
            .spawn_cancellable("fl-t-sleep", |stop| {
                assert!(stop.sleep(Duration::from_secs(60)));
                Exit::Done
            })
            .unwrap();
        set.signal_stop_one(waits);
        let deadline = Instant::now() + Duration::from_secs(5);
        while set.is_running(waits) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!set.is_running(waits) && set.is_running(sleeps), "only the one asked stopped");
        assert_eq!(health.alive(), ["fl-t-sleep"]);
        assert!(set.stop(Duration::from_secs(5)).is_empty());
        assert!(health.alive().is_empty() && health.dead().is_empty());
    }

    #[test]
    fn a_finished_call_is_returned_when_not_cancelled() {
        let (_canceller, mut cancel) = Cancel::pair();
        assert_eq!(cancel.run(futures::future::ready(7)), Some(7));
        let (canceller, mut cancel) = Cancel::pair();
        drop(canceller);
        assert!(cancel.is_cancelled());
        assert_eq!(cancel.run(futures::future::ready(7)), None, "a cancelled wait runs nothing");
    }

    struct Counter {
        ticks: Sender<u32>,
        n: u32,
    }

    impl Manager for Counter {
        type Command = u32;
        fn handle(&mut self, cmd: u32) {
            self.n += cmd;
            let _ = self.ticks.send(self.n);
        }
        fn on_tick(&mut self) {}
        fn tick_interval(&self) -> Duration {
            Duration::from_millis(10)
        }
    }

    #[test]
    fn runs_commands_and_stops_within_timeout() {
        let health = Health::default();
        let (tx, rx) = unbounded();
        let h = ManagerHandle::spawn("fl-test", Counter { ticks: tx, n: 0 }, &health).unwrap();
        h.sender().send(2).unwrap();
        h.sender().send(3).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(2)), Ok(2));
        assert_eq!(rx.recv_timeout(Duration::from_secs(2)), Ok(5));
        h.stop(Duration::from_secs(2)).unwrap();
        assert!(health.dead().is_empty());
    }

    #[test]
    fn completed_ticks_are_counted_until_the_manager_stops() {
        let health = Health::default();
        let (tx, _rx) = unbounded();
        let h = ManagerHandle::spawn("fl-test", Counter { ticks: tx, n: 0 }, &health).unwrap();
        testing::wait_until("3 ticks counted", Duration::from_secs(10), || {
            health.ticks().first().is_some_and(|(_, n)| *n >= 3)
        });
        assert_eq!(health.ticks()[0].0, "fl-test");
        h.stop(Duration::from_secs(2)).unwrap();
        assert!(health.ticks().is_empty(), "a stopped manager is forgotten");
    }

    #[test]
    fn a_manager_stuck_in_a_command_is_unresponsive_until_it_comes_round() {
        let health = Health::default();
        let (release_tx, release) = unbounded();
        let h = ManagerHandle::spawn("fl-wedge", testing::Wedged { release }, &health).unwrap();
        let quiet = Worker::spawn("fl-quiet", &health, |stop| {
            let _ = stop.receiver().recv_timeout(Duration::from_secs(30));
            Exit::Done
        })
        .unwrap();
        let within = Duration::from_millis(200);
        assert_eq!(health.unresponsive(within), Vec::<String>::new(), "idle, it answers; a plain worker is not pinged");
        h.sender().send(()).unwrap();
        assert_eq!(health.unresponsive(within), ["fl-wedge"]);
        assert_eq!(health.unresponsive(within), ["fl-wedge"], "still stuck: the last ping is unanswered");
        release_tx.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut answered = false;
        while !answered && Instant::now() < deadline {
            answered = health.unresponsive(within).is_empty();
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(answered, "it answers again once the command is done");
        h.stop(Duration::from_secs(2)).unwrap();
        quiet.stop(Duration::from_secs(2)).unwrap();
    }

    #[test]
    fn a_manager_inside_one_command_shows_how_long_it_has_been_busy() {
        let health = Health::default();
        let (release_tx, release) = unbounded();
        let h = ManagerHandle::spawn("fl-wedge", testing::Wedged { release }, &health).unwrap();
        assert_eq!(health.busy_for(Duration::ZERO), Vec::new(), "idle");
        h.sender().send(()).unwrap();
        let busy = loop {
            let busy = health.busy_for(Duration::from_millis(50));
            if !busy.is_empty() {
                break busy;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(busy[0].0, "fl-wedge");
        release_tx.send(()).unwrap();
        // Its reply to a ping comes after the command: then it is idle again.
        assert!(health.unresponsive(Duration::from_secs(10)).is_empty());
        assert_eq!(health.busy_for(Duration::ZERO), Vec::new());
        h.stop(Duration::from_secs(2)).unwrap();
    }

    #[test]
    fn a_job_queue_runs_at_most_its_bound_at_once_and_queues_the_rest() {
        use std::sync::atomic::AtomicUsize;
        let health = Health::default();
        let jobs = JobQueue::new("fl-test-job", 3, 5, &health);
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (started, done, (release_tx, release)) = (unbounded(), unbounded(), unbounded::<()>());
        for _ in 0..8 {
            let (now, most, started, done, release) =
                (now.clone(), most.clone(), started.0.clone(), done.0.clone(), release.clone());
            jobs.submit(Box::new(move |_| {
                most.fetch_max(now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                let _ = started.send(());
                let _ = release.recv();
                now.fetch_sub(1, Ordering::SeqCst);
                let _ = done.send(());
            }))
            .unwrap();
        }
        for _ in 0..3 {
            started.1.recv_timeout(Duration::from_secs(5)).unwrap();
        }
        // Three run, five wait in the queue, and a ninth is refused.
        assert_eq!((now.load(Ordering::SeqCst), jobs.waiting()), (3, 5));
        assert!(matches!(jobs.submit(Box::new(|_| {})), Err(JobError::Full { max: 8 })));
        for _ in 0..8 {
            release_tx.send(()).unwrap();
            done.1.recv_timeout(Duration::from_secs(5)).unwrap();
        }
        assert_eq!((most.load(Ordering::SeqCst), jobs.waiting()), (3, 0), "never more than three at once");
        assert!(jobs.stop(Duration::from_secs(2)).is_empty());
        assert!(matches!(jobs.submit(Box::new(|_| {})), Err(JobError::Closed)));
    }

    #[test]
    fn a_finished_worker_is_forgotten_and_a_failed_one_reported() {
        let health = Health::default();
        let done = Worker::spawn("fl-short", &health, |_| Exit::Done).unwrap();
        let failed = Worker::spawn("fl-gave-up", &health, |_| Exit::Failed).unwrap();
        done.stop(Duration::from_secs(2)).unwrap();
        failed.stop(Duration::from_secs(2)).unwrap();
        assert_eq!(health.dead(), vec!["fl-gave-up".to_string()]);
        assert!(health.alive().is_empty());
    }

    #[test]
    fn stop_all_signals_every_worker_and_names_the_stuck_one() {
        let health = Health::default();
        let (_hold, never) = bounded::<()>(0);
        let waits = |stop: StopSignal| {
            let _ = stop.receiver().recv_timeout(Duration::from_secs(5));
            Exit::Done
        };
        let a = Worker::spawn("fl-a", &health, waits).unwrap();
        let b = Worker::spawn("fl-b", &health, waits).unwrap();
        // Ignores its stop signal for longer than the timeout.
        let stuck = Worker::spawn("fl-stuck", &health, move |_| {
            let _ = never.recv_timeout(Duration::from_millis(800));
            Exit::Done
        })
        .unwrap();
        assert_eq!(health.alive(), vec!["fl-a", "fl-b", "fl-stuck"]);
        let late = stop_all([a, b, stuck], Duration::from_millis(300));
        let names: Vec<&str> = late.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["fl-stuck"]);
        assert_eq!(late[0].to_string(), "fl-stuck did not stop within 300ms");
        assert!(health.dead().is_empty());
    }
}
