//! The threads of the API server: the reactor (`fl-api`) and its workers (`fl-api-work`),
//! owned as the manager pattern owns its thread: alive guards for `/healthz`, and a stop
//! that waits with a timeout.

use super::conn::{answer, Handler, Limits, Reactor, ServerStats};
use super::http::{Request, Response};
use crate::manager::{stop_all, Exit, StopTimeout, Worker};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::io::{self, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Worker threads' end of the reactor: jobs in, replies out, and the wakeup socket.
pub struct WorkerEnds {
    /// Requests to answer.
    pub jobs: Receiver<(u64, Request)>,
    /// Answers.
    pub replies: Sender<(u64, Response)>,
    /// Written to after each answer so the reactor's `poll` returns.
    pub wake: UnixStream,
}

/// A worker's loop: answer jobs until the reactor drops the job sender.
pub fn work<H: Handler>(handler: &H, ends: &WorkerEnds) {
    loop {
        let (id, req) = match ends.jobs.recv_timeout(Duration::from_secs(1)) {
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let resp = answer(handler, &req);
        if ends.replies.send((id, resp)).is_err() {
            return;
        }
        // WouldBlock means a wakeup is already pending.
        let _ = (&ends.wake).write(&[1]);
    }
}

/// A running server: the reactor thread and its workers.
pub struct Running {
    stop: Arc<AtomicBool>,
    wake: UnixStream,
    threads: Vec<crate::manager::Worker>,
}

/// Starts the reactor (`fl-api`) and `limits.workers` workers (`fl-api-work`) on `listener`,
/// counting into `stats`; each thread holds an alive guard in `health`.
pub fn spawn<H: Handler>(
    listener: TcpListener,
    handler: Arc<H>,
    limits: Limits,
    stats: Arc<ServerStats>,
    health: &crate::manager::Health,
) -> io::Result<Running> {
    let workers = limits.workers.max(1);
    let (reactor, ends, wake) = Reactor::new(listener, handler.clone(), limits, stats.clone())?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for _ in 0..workers {
        let ends = WorkerEnds { jobs: ends.jobs.clone(), replies: ends.replies.clone(), wake: ends.wake.try_clone()? };
        let handler = handler.clone();
        threads.push(Worker::spawn("fl-api-work", health, move |_| {
            work(&*handler, &ends);
            Exit::Done
        })?);
    }
    drop(ends);
    let flag = stop.clone();
    threads.push(Worker::spawn("fl-api", health, move |_| {
        reactor.run(&flag);
        Exit::Done
    })?);
    Ok(Running { stop, wake, threads })
}

impl Running {
    /// Stops the reactor and the workers, waiting up to `timeout` for them.
    pub fn stop(self, timeout: Duration) -> Result<(), StopTimeout> {
        self.stop.store(true, Ordering::Relaxed);
        let _ = (&self.wake).write(&[1]);
        stop_all(self.threads, timeout).into_iter().next().map_or(Ok(()), Err)
    }
}
