//! The threads of the API server: the reactor (`fl-api`) and its workers (`fl-api-work`),
//! owned as the manager pattern owns its thread: alive guards for `/healthz`, and a stop
//! that waits with a timeout.

use super::conn::{answer, Handler, Limits, Reactor, ServerStats};
use super::http::{Request, Response};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use std::io::{self, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    threads: Vec<std::thread::JoinHandle<()>>,
    done: Receiver<()>,
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
    let (done_tx, done) = bounded::<()>(workers + 1);
    let mut threads = Vec::new();
    for _ in 0..workers {
        let ends = WorkerEnds { jobs: ends.jobs.clone(), replies: ends.replies.clone(), wake: ends.wake.try_clone()? };
        let (handler, guard, done_tx) =
            (handler.clone(), crate::manager::AliveGuard::new(health, "fl-api-work"), done_tx.clone());
        threads.push(std::thread::Builder::new().name("fl-api-work".into()).spawn(move || {
            work(&*handler, &ends);
            guard.finish();
            let _ = done_tx.send(());
        })?);
    }
    drop(ends);
    let (flag, guard) = (stop.clone(), crate::manager::AliveGuard::new(health, "fl-api"));
    threads.push(std::thread::Builder::new().name("fl-api".into()).spawn(move || {
        reactor.run(&flag);
        guard.finish();
        let _ = done_tx.send(());
    })?);
    Ok(Running { stop, wake, threads, done })
}

impl Running {
    /// Stops the reactor and the workers, waiting up to `timeout` for them.
    pub fn stop(self, timeout: Duration) -> Result<(), String> {
        self.stop.store(true, Ordering::Relaxed);
        let _ = (&self.wake).write(&[1]);
        let deadline = Instant::now() + timeout;
        for _ in 0..self.threads.len() {
            match self.done.recv_deadline(deadline) {
                Ok(()) => {}
                // A thread that panicked drops its sender without sending: it has ended too.
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    return Err(format!("fl-api did not stop within {timeout:?}"))
                }
            }
        }
        for t in self.threads {
            // Every thread has finished (or panicked), so join returns at once.
            let _ = t.join();
        }
        Ok(())
    }
}
