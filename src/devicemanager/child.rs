//! The device manager's child threads (`fl-plugin`, `fl-prestart`): `manager::Worker`s that
//! spend their time blocked in gRPC futures. A crossbeam stop channel cannot wake a future,
//! so each child also gets a oneshot that its owner drops in the same act as it signals
//! the worker: one stop, seen both by `select!`-style waits (`sleep`) and by gRPC calls
//! (`run`), which are then cancelled.

use crate::manager::{Exit, Health, StopSignal, Worker};
use futures::channel::oneshot;
use futures::future::{select, Either};
use std::future::Future;
use std::time::Duration;

/// A child thread owned by the device manager.
pub struct Child {
    worker: Worker,
    cancel: Option<oneshot::Sender<()>>,
}

/// What a child's body waits with: its owner's one stop, for sleeps and for futures.
pub struct ChildStop {
    signal: StopSignal,
    cancelled: oneshot::Receiver<()>,
}

impl ChildStop {
    /// Sleeps up to `d`; true (at once) when the child is to stop.
    pub fn sleep(&self, d: Duration) -> bool {
        self.signal.sleep(d)
    }

    /// Whether the child is to stop.
    pub fn is_stopped(&self) -> bool {
        self.signal.is_stopped()
    }

    /// Waits for `f`; `None` when the child is to stop first (the caller then cancels the
    /// call `f` belongs to).
    pub fn run<F: Future + Unpin>(&mut self, f: F) -> Option<F::Output> {
        if self.is_stopped() {
            return None;
        }
        match futures::executor::block_on(select(f, &mut self.cancelled)) {
            Either::Left((out, _)) => Some(out),
            Either::Right(_) => None,
        }
    }
}

impl Child {
    /// Starts `body` on a `Worker` called `name`, registered with `health`.
    pub fn spawn(
        name: &str,
        health: &Health,
        body: impl FnOnce(ChildStop) -> Exit + Send + 'static,
    ) -> std::io::Result<Child> {
        let (cancel, cancelled) = oneshot::channel();
        let worker = Worker::spawn(name, health, move |signal| body(ChildStop { signal, cancelled }))?;
        Ok(Child { worker, cancel: Some(cancel) })
    }

    /// Asks the child to stop without waiting.
    pub fn signal_stop(&mut self) {
        drop(self.cancel.take());
        self.worker.signal_stop();
    }

    /// Whether the thread has ended.
    pub fn is_finished(&self) -> bool {
        self.worker.is_finished()
    }

    /// Signals the child to stop and hands over its worker, to join it (alone, or with
    /// others through `manager::stop_all`).
    pub fn into_worker(mut self) -> Worker {
        self.signal_stop();
        self.worker
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn one_stop_wakes_a_child_waiting_on_a_future_or_sleeping() {
        let health = Health::default();
        // A future that never completes, as a gRPC call to a plugin that never answers.
        let waits = Child::spawn("fl-test-fut", &health, |mut stop| {
            assert!(stop.run(futures::future::pending::<()>()).is_none());
            Exit::Done
        })
        .unwrap();
        let sleeps = Child::spawn("fl-test-sleep", &health, |stop| {
            assert!(stop.sleep(Duration::from_secs(60)));
            Exit::Done
        })
        .unwrap();
        assert_eq!(health.alive(), ["fl-test-fut", "fl-test-sleep"]);
        // Within 5 s, where the sleep is 60 s and the future never ends: only the stop ends them.
        let late = crate::manager::stop_all([waits.into_worker(), sleeps.into_worker()], Duration::from_secs(5));
        assert!(late.is_empty(), "{late:?}");
        assert!(health.alive().is_empty() && health.dead().is_empty());
    }

    #[test]
    fn a_finished_future_is_returned() {
        let health = Health::default();
        let (tx, rx) = crossbeam_channel::bounded(1);
        let c = Child::spawn("fl-test-ready", &health, move |mut stop| {
            let _ = tx.send(stop.run(futures::future::ready(7)));
            Exit::Done
        })
        .unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), Some(7));
        c.into_worker().join(Instant::now() + Duration::from_secs(5)).unwrap();
    }
}
