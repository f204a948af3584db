//! The hook threads (`fl-hook`): a `manager::JobQueue` of at most `MAX_RUNNING_HOOKS`
//! threads, with up to `MAX_QUEUED_HOOKS` hooks waiting their turn (a bound on concurrency
//! queues: it does not fail a `postStart`, and so kill its container). Each hook runs one
//! handler (bounded by its timeout) and publishes a `HookDone`. At stop what waits is
//! dropped, a `sleep` ends at once; an `exec` or HTTP call in flight (bounded by its
//! timeout) is waited for `IN_CALL_STOP_TIMEOUT`, then left to end.

use super::{handlers, HookDone, HookError, HookRequest, HookSink, MAX_RUNNING_HOOKS, THREAD};
use crate::base::manager::{Health, JobError, JobQueue, Publisher, StopTimeout};
use crate::node::prober::probes::Lookups;
use crate::node::runtime::ContainerRuntime;
use std::sync::Arc;
use std::time::Duration;

/// Hooks waiting for a thread.
pub const MAX_QUEUED_HOOKS: usize = 1024;

/// The hook threads, shared by the pod manager (which starts hooks) and the agent (which
/// stops them).
#[derive(Clone)]
pub struct HookRunner {
    jobs: Arc<JobQueue>,
    /// Host name lookups of `httpGet` hooks to a name.
    lookups: Lookups,
    runtime: Arc<dyn ContainerRuntime>,
    done: Publisher<HookDone>,
}

impl HookRunner {
    /// No hook runs yet; threads are registered in `health`, answers go to `done`.
    pub fn new(runtime: Arc<dyn ContainerRuntime>, done: Publisher<HookDone>, health: &Health) -> HookRunner {
        HookRunner {
            jobs: Arc::new(JobQueue::new(THREAD, MAX_RUNNING_HOOKS, MAX_QUEUED_HOOKS, health)),
            lookups: Lookups::new(health),
            runtime,
            done,
        }
    }

    /// Stops every hook thread and waits up to `timeout`; returns those still inside an
    /// exec or HTTP call (each ends by its own timeout).
    pub fn stop(&self, timeout: Duration) -> Vec<StopTimeout> {
        self.jobs.close();
        self.lookups.signal_stop();
        let mut late = self.jobs.stop(timeout);
        late.extend(self.lookups.stop(timeout));
        late
    }
}

impl HookSink for HookRunner {
    fn submit(&self, req: HookRequest) -> Result<(), HookError> {
        let (runtime, lookups, done) = (self.runtime.clone(), self.lookups.clone(), self.done.clone());
        let submitted = self.jobs.submit(Box::new(move |stop| {
            if let Some(result) = handlers::run(&req, &runtime, &lookups, stop) {
                done.publish(HookDone { kind: req.kind, pod_uid: req.pod_uid, container_id: req.container_id, result });
            }
        }));
        submitted.map_err(|e| match e {
            JobError::Full { max } => HookError::Busy { max },
            JobError::Closed => HookError::Stopping,
            JobError::Spawn(source) => HookError::SpawnThread { source },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Container, LifecycleHandler, SleepAction};
    use crate::base::clock::FakeClock;
    use crate::node::lifecycle::HookKind;
    use crate::node::runtime::fake::FakeRuntime;

    fn sleep_hook(seconds: i64) -> HookRequest {
        HookRequest {
            kind: HookKind::PreStop,
            pod_uid: "u1".into(),
            pod_desc: "p_default(u1)".into(),
            pod_ip: "127.0.0.1".into(),
            container: Arc::new(Container { name: "app".into(), ..Default::default() }),
            container_id: "c1".into(),
            handler: LifecycleHandler { sleep: Some(SleepAction { seconds }), ..Default::default() },
            timeout: Duration::from_secs(30),
        }
    }

    #[test]
    fn a_hook_answers_from_its_own_thread_and_a_stop_ends_a_sleep_unreported() {
        let health = Health::default();
        let rt = Arc::new(FakeRuntime::new(FakeClock::new(std::time::SystemTime::UNIX_EPOCH)));
        let (tx, rx) = crossbeam_channel::unbounded();
        let runner = HookRunner::new(rt, Publisher::new(move |d| drop(tx.send(d))), &health);
        runner.submit(sleep_hook(0)).unwrap();
        let done = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(
            done,
            HookDone { kind: HookKind::PreStop, pod_uid: "u1".into(), container_id: "c1".into(), result: Ok(()) }
        );
        runner.submit(sleep_hook(30)).unwrap();
        assert!(runner.stop(Duration::from_secs(2)).is_empty(), "the 30 s sleep ended at the stop");
        assert!(rx.try_recv().is_err(), "an interrupted sleep reports nothing");
        assert!(matches!(runner.submit(sleep_hook(0)), Err(HookError::Stopping)));
        assert!(health.alive().is_empty() && health.dead().is_empty());
    }

    #[test]
    fn an_exec_hook_that_cannot_run_fails_with_kubelets_message() {
        let health = Health::default();
        let rt = Arc::new(FakeRuntime::new(FakeClock::new(std::time::SystemTime::UNIX_EPOCH)));
        let (tx, rx) = crossbeam_channel::unbounded();
        let runner = HookRunner::new(rt, Publisher::new(move |d| drop(tx.send(d))), &health);
        let mut req = sleep_hook(0);
        req.kind = HookKind::PostStart;
        req.handler = LifecycleHandler {
            exec: Some(crate::api::ExecAction { command: vec!["true".into()] }),
            ..Default::default()
        };
        runner.submit(req).unwrap();
        let done = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(
            done.result.unwrap_err(),
            "Exec lifecycle hook ([\"true\"]) for Container \"app\" in Pod \"p_default(u1)\" failed - error: container c1 not found, message: \"\""
        );
        assert!(runner.stop(Duration::from_secs(2)).is_empty());
    }

    #[test]
    fn hooks_past_the_thread_bound_wait_their_turn_and_all_answer() {
        let health = Health::default();
        let rt = Arc::new(FakeRuntime::new(FakeClock::new(std::time::SystemTime::UNIX_EPOCH)));
        let (tx, rx) = crossbeam_channel::unbounded();
        let runner = HookRunner::new(rt, Publisher::new(move |d| drop(tx.send(d))), &health);
        let n = MAX_RUNNING_HOOKS + 10;
        for i in 0..n {
            let mut req = sleep_hook(1);
            req.container_id = format!("c{i}");
            runner.submit(req).unwrap();
        }
        let mut answered = std::collections::HashSet::new();
        while answered.len() < n {
            let done = rx.recv_timeout(Duration::from_secs(10)).expect("every hook answers");
            assert_eq!(done.result, Ok(()));
            answered.insert(done.container_id);
        }
        assert!(runner.stop(Duration::from_secs(2)).is_empty());
    }
}
