//! The pull threads (`fl-pull`): `max_parallel` `manager::Worker`s take `PullRequest`s from
//! one bounded queue, pull each through the runtime with its deadline, and publish a
//! `PullDone` (for the pod manager, which never waits for a pull). With one thread (the
//! default) pulls are serialized, as kubelet's `serializeImagePulls`. At stop every thread
//! is signalled and its pull cancelled at once (the runtime stops the pull), then joined.

use crate::base::manager::{Cancel, Exit, Health, Publisher, StopSignal, StopTimeout, WorkerSet, WorkerSetError};
use crate::node::runtime::{ContainerRuntime, PullAuth, RuntimeError};
use crossbeam_channel::{select, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The name of the pull threads.
pub const THREAD: &str = "fl-pull";
/// The most pulls waiting for a thread; the pod manager asks again at a later sync when the
/// queue is full (it queues one pull per image, so this is rarely reached).
pub const MAX_QUEUED: usize = 256;

/// How pulls are made.
#[derive(Clone, Copy, Debug)]
pub struct PullerSettings {
    /// Pulls at once (each on a thread of its own); 1 serializes them.
    pub max_parallel: usize,
    /// Deadline of each pull.
    pub timeout: Duration,
}

/// A pull to make.
#[derive(Clone, Debug)]
pub struct PullRequest {
    /// The image, as the pod names it.
    pub image: String,
    /// What tells this pull apart from others of the image: the image, and the pull secrets
    /// its credentials come from (pods with other secrets do not join it).
    pub key: String,
    /// Credentials to try in turn until one pulls (the pod's `imagePullSecrets`, then the
    /// node's `config.json`, as the keyring matched them); none: one pull without.
    pub auths: Vec<PullAuth>,
}

/// A pulled image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pulled {
    /// The runtime's id of the image.
    pub image_ref: String,
    /// Its size in bytes (0 when the runtime could not tell right after the pull).
    pub size: u64,
}

/// A pull has answered.
#[derive(Debug)]
pub struct PullDone {
    /// The image, as requested.
    pub image: String,
    /// The request's `key`.
    pub key: String,
    /// The pulled image, or why the pull failed.
    pub result: Result<Pulled, RuntimeError>,
    /// How long the pull itself took (the queue not counted).
    pub pull_time: Duration,
}

/// The pull threads.
pub struct ImagePuller {
    threads: WorkerSet,
}

impl ImagePuller {
    /// Starts `settings.max_parallel` pull threads over `runtime`, registered in `health`;
    /// returns them and the sender of the pull queue (bounded by `MAX_QUEUED`).
    pub fn start(
        runtime: Arc<dyn ContainerRuntime>,
        settings: PullerSettings,
        done: Publisher<PullDone>,
        health: &Health,
    ) -> std::io::Result<(ImagePuller, Sender<PullRequest>)> {
        let (tx, rx) = crossbeam_channel::bounded(MAX_QUEUED);
        let n = settings.max_parallel.max(1);
        let puller = ImagePuller { threads: WorkerSet::new("image puller", n, health) };
        for _ in 0..n {
            let (runtime, rx, done) = (runtime.clone(), rx.clone(), done.clone());
            let started = puller.threads.spawn_cancellable(THREAD, move |stop| {
                run(&*runtime, settings.timeout, &rx, &stop.signal, stop.cancel, &done)
            });
            if let Err(e) = started {
                // The ones started are stopped, not left behind.
                for late in puller.stop(Duration::from_secs(1)) {
                    log::warn!("images: {late}");
                }
                return Err(match e {
                    WorkerSetError::Spawn { source, .. } => source,
                    other => std::io::Error::other(other),
                });
            }
        }
        Ok((puller, tx))
    }

    /// Cancels the pulls in flight, stops every thread and joins them within `timeout`;
    /// returns the ones that did not end in time.
    pub fn stop(self, timeout: Duration) -> Vec<StopTimeout> {
        self.threads.stop(timeout)
    }
}

/// A pull thread's loop: Idle --request--> Pulling --answer--> Idle; Idle or Pulling
/// --stop--> Stopped (a pull is cancelled and says nothing).
fn run(
    runtime: &dyn ContainerRuntime,
    timeout: Duration,
    requests: &Receiver<PullRequest>,
    stop: &StopSignal,
    mut cancel: Cancel,
    done: &Publisher<PullDone>,
) -> Exit {
    loop {
        let req = select! {
            recv(stop.receiver()) -> _ => return Exit::Done,
            recv(requests) -> r => match r {
                Ok(r) => r,
                // Every sender is gone (the pod manager stopped): nothing more to pull.
                Err(_) => return Exit::Done,
            },
        };
        match pull(runtime, &req, timeout, &mut cancel) {
            Some(answer) => done.publish(answer),
            None => return Exit::Done,
        }
    }
}

/// One pull, then the image's size (best effort, as kubelet's); `None` when cancelled.
fn pull(runtime: &dyn ContainerRuntime, req: &PullRequest, timeout: Duration, cancel: &mut Cancel) -> Option<PullDone> {
    let started = Instant::now();
    log::debug!("images: pulling {} (deadline {timeout:?})", crate::base::logsafe::short(&req.image));
    // As kubelet: each credential in turn; the last failure is the answer.
    let mut tried = runtime.pull_image(&req.image, req.auths.first(), timeout, cancel);
    for auth in req.auths.iter().skip(1) {
        match &tried {
            Err(RuntimeError::Cancelled { .. }) | Ok(_) => break,
            Err(e) => log::debug!(
                "images: pull of {} failed ({}); trying the next credentials",
                req.image,
                crate::base::errors::Chain(e)
            ),
        }
        tried = runtime.pull_image(&req.image, Some(auth), timeout, cancel);
    }
    let result = match tried {
        Err(RuntimeError::Cancelled { .. }) => {
            log::info!("images: pull of {} cancelled (agent stopping)", crate::base::logsafe::short(&req.image));
            return None;
        }
        Err(e) => Err(e),
        Ok(image_ref) => {
            let size = match runtime.image_status(&image_ref) {
                Ok(i) => i.map_or(0, |i| i.size),
                Err(e) => {
                    log::debug!("images: {}: no size after the pull: {}", req.image, crate::base::errors::Chain(&e));
                    0
                }
            };
            Ok(Pulled { image_ref, size })
        }
    };
    let pull_time = started.elapsed();
    // The pod manager records the pull as its pods' events (Pulled, Failed): debug only here.
    match &result {
        Ok(p) => log::debug!("images: pulled {} ({}, {} bytes) in {pull_time:?}", req.image, p.image_ref, p.size),
        Err(e) => {
            log::debug!("images: pull of {} failed after {pull_time:?}: {}", req.image, crate::base::errors::Chain(e))
        }
    }
    Some(PullDone { image: req.image.clone(), key: req.key.clone(), result, pull_time })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::clock::FakeClock;
    use crate::node::runtime::fake::FakeRuntime;

    fn start(
        rt: &Arc<FakeRuntime>,
        max_parallel: usize,
    ) -> (ImagePuller, Sender<PullRequest>, Receiver<PullDone>, Health) {
        let health = Health::default();
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        let publisher = Publisher::new(move |d| {
            let _ = done_tx.send(d);
        });
        let settings = PullerSettings { max_parallel, timeout: Duration::from_secs(60) };
        let (p, tx) = ImagePuller::start(rt.clone(), settings, publisher, &health).unwrap();
        (p, tx, done_rx, health)
    }

    fn request(image: &str) -> PullRequest {
        PullRequest { image: image.into(), key: image.into(), auths: Vec::new() }
    }

    #[test]
    fn a_pull_answers_with_the_image_and_its_size_or_the_failure() {
        let rt = Arc::new(FakeRuntime::new(FakeClock::new(std::time::SystemTime::UNIX_EPOCH)));
        rt.pull_succeeds("app:1", 4096);
        rt.pull_fails("app:2", "manifest unknown");
        let (p, tx, done, health) = start(&rt, 1);
        assert_eq!(health.alive(), [THREAD]);
        tx.send(request("app:1")).unwrap();
        tx.send(request("app:2")).unwrap();
        let first = done.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(first.image, "app:1");
        assert_eq!(first.result.unwrap(), Pulled { image_ref: "sha256:app:1".into(), size: 4096 });
        let second = done.recv_timeout(Duration::from_secs(5)).unwrap();
        let e = crate::base::errors::Chain(&second.result.unwrap_err()).to_string();
        assert!(e.contains("manifest unknown"), "{e}");
        use crate::node::runtime::fake::Call;
        assert_eq!(rt.take_calls(), [Call::PullImage("app:1".into(), false), Call::PullImage("app:2".into(), false)]);
        assert!(p.stop(Duration::from_secs(5)).is_empty());
        assert!(health.alive().is_empty() && health.dead().is_empty());
    }

    #[test]
    fn a_hanging_pull_holds_only_its_own_thread_and_is_cancelled_at_stop() {
        let rt = Arc::new(FakeRuntime::new(FakeClock::new(std::time::SystemTime::UNIX_EPOCH)));
        rt.hang_pulls("slow:1");
        rt.pull_succeeds("fast:1", 1);
        let (p, tx, done, health) = start(&rt, 2);
        assert_eq!(health.alive(), [THREAD, THREAD]);
        tx.send(request("slow:1")).unwrap();
        tx.send(request("fast:1")).unwrap();
        // The second thread answers while the first is stuck in its pull.
        assert_eq!(done.recv_timeout(Duration::from_secs(5)).unwrap().image, "fast:1");
        let late = p.stop(Duration::from_secs(5));
        assert!(late.is_empty(), "{late:?}");
        // A cancelled pull says nothing: the agent is stopping.
        assert!(done.try_recv().is_err());
        assert!(health.alive().is_empty() && health.dead().is_empty());
    }

    #[test]
    fn the_queue_is_bounded() {
        let rt = Arc::new(FakeRuntime::new(FakeClock::new(std::time::SystemTime::UNIX_EPOCH)));
        rt.hang_pulls("slow:1");
        let (p, tx, _done, _health) = start(&rt, 1);
        let mut queued = 0;
        while tx.try_send(request("slow:1")).is_ok() {
            queued += 1;
            assert!(queued <= MAX_QUEUED + 1, "the queue grows past its bound");
        }
        // One is in the thread (or about to be), the rest wait in the queue.
        assert!(queued >= MAX_QUEUED, "{queued}");
        assert!(p.stop(Duration::from_secs(5)).is_empty());
    }
}
