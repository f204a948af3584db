//! The manager pattern: a plain struct holds the logic (`handle`, `on_tick`), and a
//! `ManagerHandle` runs it on a named thread that loops on `select!` over a stop channel,
//! its command channel and a ticker. Dropping the stop sender stops it; `stop` waits with a
//! timeout so a stuck thread is reported instead of hanging shutdown.

use crossbeam_channel::{bounded, select, tick, unbounded, Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// A thread's name and whether it is alive.
type ThreadFlag = (String, Arc<AtomicBool>);

/// Which manager threads are alive, for `/healthz`.
#[derive(Clone, Default)]
pub struct Health {
    threads: Arc<Mutex<Vec<ThreadFlag>>>,
}

impl Health {
    /// Registers a thread and returns its liveness flag.
    pub fn register(&self, name: &str) -> Arc<AtomicBool> {
        let flag = Arc::new(AtomicBool::new(true));
        self.threads.lock().push((name.into(), flag.clone()));
        flag
    }

    /// Names of threads that ended unexpectedly (panicked).
    pub fn dead(&self) -> Vec<String> {
        self.threads.lock().iter().filter(|(_, f)| !f.load(Ordering::Relaxed)).map(|(n, _)| n.clone()).collect()
    }
}

/// Clears the liveness flag when the thread ends other than by an orderly stop (a panic
/// unwinds through it). Threads that do not use `ManagerHandle` hold one too.
pub struct AliveGuard {
    flag: Arc<AtomicBool>,
    orderly: bool,
}

impl AliveGuard {
    /// Registers thread `name` with `health`; hold the guard for the thread's lifetime.
    pub fn new(health: &Health, name: &str) -> Self {
        AliveGuard { flag: health.register(name), orderly: false }
    }

    /// The thread is ending because it was asked to.
    pub fn finish(mut self) {
        self.orderly = true;
    }
}

impl Drop for AliveGuard {
    fn drop(&mut self) {
        if !self.orderly {
            self.flag.store(false, Ordering::Relaxed);
        }
    }
}

/// A running manager: its command sender and the means to stop it.
pub struct ManagerHandle<C> {
    name: String,
    commands: Sender<C>,
    stop: Option<Sender<()>>,
    done: Receiver<()>,
    join: Option<JoinHandle<()>>,
}

impl<C: Send + 'static> ManagerHandle<C> {
    /// Moves `manager` into a thread called `name` (≤ 15 bytes, Linux truncates longer names).
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
        debug_assert!(name.len() <= 15, "thread name {name} is longer than 15 bytes");
        let (stop_tx, stop_rx) = bounded::<()>(0);
        let (done_tx, done_rx) = bounded::<()>(1);
        let guard = AliveGuard::new(health, name);
        let join = std::thread::Builder::new().name(name.into()).spawn(move || {
            let ticker = tick(manager.tick_interval());
            loop {
                let wait = manager.next_deadline().map(|d| d.saturating_duration_since(Instant::now()));
                let wait = wait.unwrap_or(Duration::from_secs(3600));
                select! {
                    // Running --stop sender dropped--> Stopped
                    recv(stop_rx) -> _ => break,
                    recv(cmd_rx) -> cmd => match cmd {
                        Ok(cmd) => manager.handle(cmd),
                        // Every command sender is gone: nothing more can arrive.
                        Err(_) => break,
                    },
                    recv(ticker) -> _ => manager.on_tick(),
                    default(wait) => manager.on_deadline(),
                }
            }
            guard.finish();
            drop(manager);
            let _ = done_tx.send(());
        })?;
        Ok(ManagerHandle { name: name.into(), commands: cmd_tx, stop: Some(stop_tx), done: done_rx, join: Some(join) })
    }

    /// A sender for commands to this manager.
    pub fn sender(&self) -> Sender<C> {
        self.commands.clone()
    }

    /// Stops the thread and waits up to `timeout` for it to finish.
    pub fn stop(mut self, timeout: Duration) -> Result<(), String> {
        drop(self.stop.take());
        match self.done.recv_timeout(timeout) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                if let Some(j) = self.join.take() {
                    // The thread has finished (or panicked), so join returns at once.
                    let _ = j.join();
                }
                Ok(())
            }
            Err(RecvTimeoutError::Timeout) => Err(format!("{} did not stop within {timeout:?}", self.name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counter {
        ticks: Sender<u32>,
        n: u32,
        panic_on: u32,
    }

    impl Manager for Counter {
        type Command = u32;
        fn handle(&mut self, cmd: u32) {
            if cmd == self.panic_on {
                panic!("asked to panic");
            }
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
        let h = ManagerHandle::spawn("fl-test", Counter { ticks: tx, n: 0, panic_on: 99 }, &health).unwrap();
        h.sender().send(2).unwrap();
        h.sender().send(3).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(2)), Ok(2));
        assert_eq!(rx.recv_timeout(Duration::from_secs(2)), Ok(5));
        h.stop(Duration::from_secs(2)).unwrap();
        assert!(health.dead().is_empty());
    }

    #[test]
    fn a_panicked_manager_is_reported_dead() {
        let health = Health::default();
        let (tx, _rx) = unbounded();
        let h = ManagerHandle::spawn("fl-doomed", Counter { ticks: tx, n: 0, panic_on: 1 }, &health).unwrap();
        h.sender().send(1).unwrap();
        for _ in 0..200 {
            if !health.dead().is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(health.dead(), vec!["fl-doomed".to_string()]);
        h.stop(Duration::from_secs(2)).unwrap();
    }
}
