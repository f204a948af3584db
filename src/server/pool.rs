//! The threads of the API server: the reactor (`fl-api`) and its workers (`fl-api-work`),
//! each a `manager::Worker`: registered with `Health` for `/healthz`, stopped by one stop
//! signal, joined with a timeout. The reactor waits in `poll`, so its stop is the signal
//! plus a wake-up through its wake pipe; the workers wait in `select!` on the job channel
//! and the stop signal.

use super::conn::{answer, Handler, Limits, Reactor, ServerStats};
use super::jobs::WorkerEnds;
use crate::base::manager::{stop_all, Exit, Health, StopSignal, StopTimeout, Worker};
use crate::base::wake::Waker;
use crossbeam_channel::select;
use std::io;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

/// A worker's loop: answer jobs until the reactor drops the job sender or stop is
/// signalled. A job being answered is finished first (routes are bounded in time).
pub fn work<H: Handler>(handler: &H, ends: &WorkerEnds, stop: &StopSignal) {
    loop {
        let (id, req) = select! {
            recv(stop.receiver()) -> _ => return,
            recv(ends.jobs) -> job => match job {
                Ok(job) => job,
                // Idle --reactor gone--> Stopped.
                Err(_) => return,
            },
        };
        let resp = answer(handler, &req);
        if ends.replies.send((id, resp)).is_err() {
            return;
        }
        ends.wake.wake();
    }
}

/// A thread of the server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// The reactor's wake pipe could not be made, or its listener set non-blocking.
    #[error("cannot set up the API reactor")]
    SetUpReactor {
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A thread could not be spawned.
    #[error("cannot start the {name} thread")]
    SpawnThread {
        /// The thread's name.
        name: &'static str,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// A running server: the reactor thread and its workers.
pub struct Running {
    wake: Waker,
    threads: Vec<Worker>,
}

/// Starts the reactor (`fl-api`) and `limits.workers` workers (`fl-api-work`) on `listener`,
/// counting into `stats`; every thread is registered in `health`.
pub fn spawn<H: Handler>(
    listener: TcpListener,
    handler: Arc<H>,
    limits: Limits,
    stats: Arc<ServerStats>,
    health: &Health,
) -> Result<Running, PoolError> {
    let workers = limits.workers.max(1);
    let (reactor, ends, wake) = Reactor::new(listener, handler.clone(), limits, stats.clone())
        .map_err(|source| PoolError::SetUpReactor { source })?;
    let mut running = Running { wake, threads: Vec::new() };
    let spawn_err = |name| move |source| PoolError::SpawnThread { name, source };
    for _ in 0..workers {
        let ends = WorkerEnds { jobs: ends.jobs.clone(), replies: ends.replies.clone(), wake: ends.wake.clone() };
        let handler = handler.clone();
        let worker = Worker::spawn("fl-api-work", health, move |stop| {
            work(&*handler, &ends, &stop);
            Exit::Done
        });
        // On an error, `running` is dropped: the workers already started see their job
        // channel close once the reactor (never started) is dropped, and end.
        running.threads.push(worker.map_err(spawn_err("fl-api-work"))?);
    }
    drop(ends);
    let reactor = Worker::spawn("fl-api", health, move |stop| {
        reactor.run(&stop);
        Exit::Done
    });
    running.threads.push(reactor.map_err(spawn_err("fl-api"))?);
    Ok(running)
}

impl Running {
    /// Stops the reactor and the workers (stop signals, then a wake-up of the reactor's
    /// `poll`), waiting up to `timeout` for them; returns every thread that did not end.
    pub fn stop(mut self, timeout: Duration) -> Vec<StopTimeout> {
        // Signal before waking: woken first, the reactor could miss the stop and poll again.
        self.threads.iter_mut().for_each(Worker::signal_stop);
        self.wake.wake();
        stop_all(self.threads, timeout)
    }
}
