//! One probe worker per (pod, container, probe type): kubelet's `doProbe` as a state
//! machine over the container's current instance, without a thread of its own. The prober
//! manager asks it what to do when it is due, and hands it each probe's outcome.

use super::probes::Outcome;
use super::{ProbeResult, ProbeTarget, ProbeType};
use crate::api::Probe;
use std::time::{Duration, Instant, SystemTime};

/// What a due worker should do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Run the probe.
    Probe,
    /// Nothing now; ask again at the next due time.
    Wait,
    /// The worker is done (pod finished, or container gone for good).
    Stop,
}

/// The worker state kubelet keeps per probe.
#[derive(Debug)]
pub struct Worker {
    /// Which probe.
    pub kind: ProbeType,
    /// The container and pod it watches.
    pub target: ProbeTarget,
    /// The container instance the state below belongs to.
    instance: Option<String>,
    last: Option<ProbeResult>,
    run: u32,
    on_hold: bool,
    /// Failures in a row, for throttling `Unhealthy` events.
    pub failures_in_a_row: u32,
    /// When the worker is next due.
    pub next_due: Instant,
    /// A probe is running in the pool.
    pub in_flight: bool,
    /// No probe has been handed out yet for the current instance.
    pub first_probe: bool,
}

/// The result a probe type starts from when a container instance appears.
pub fn initial_result(kind: ProbeType) -> ProbeResult {
    match kind {
        ProbeType::Readiness => ProbeResult::Failure,
        ProbeType::Liveness => ProbeResult::Success,
        ProbeType::Startup => ProbeResult::Unknown,
    }
}

impl Worker {
    /// A worker first due at `first_due`.
    pub fn new(kind: ProbeType, target: ProbeTarget, first_due: Instant) -> Worker {
        Worker {
            kind,
            target,
            instance: None,
            last: None,
            run: 0,
            on_hold: false,
            failures_in_a_row: 0,
            next_due: first_due,
            in_flight: false,
            first_probe: true,
        }
    }

    /// The container instance the worker's state belongs to.
    pub fn instance(&self) -> Option<&str> {
        self.instance.as_deref()
    }

    /// The probe spec this worker runs.
    pub fn probe(&self) -> &Probe {
        let c = &self.target.container;
        let p = match self.kind {
            ProbeType::Liveness => &c.liveness_probe,
            ProbeType::Readiness => &c.readiness_probe,
            ProbeType::Startup => &c.startup_probe,
        };
        // Workers are only created for probes the container declares.
        p.as_ref().expect("worker without its probe")
    }

    /// The probe period.
    pub fn period(&self) -> Duration {
        Duration::from_secs(self.probe().period_seconds.max(1) as u64)
    }

    /// Takes a new view of the container; a new instance makes the worker due at once
    /// (so a readiness probe without a result runs when its container starts, not a period later).
    pub fn update(&mut self, target: ProbeTarget, now: Instant) {
        let new_instance = target.container_id.is_some() && target.container_id != self.instance;
        self.target = target;
        if new_instance && !self.in_flight {
            self.next_due = now;
        }
    }

    /// kubelet's `doProbe` before the probe runs. Returns what to do and, possibly, a
    /// result to record now (the initial value for a new instance, `Failure` for a container
    /// that is not running, `Success` for liveness/startup of a terminating pod).
    pub fn decide(&mut self, started: bool, now: SystemTime) -> (Decision, Option<ProbeResult>, bool) {
        let t = &self.target;
        if t.pod_terminal {
            return (Decision::Stop, None, false);
        }
        let Some(id) = t.container_id.clone() else { return (Decision::Wait, None, false) };
        let mut set = None;
        let mut new_instance = false;
        if self.instance.as_ref() != Some(&id) {
            // New container instance: start over from the initial value.
            self.instance = Some(id);
            self.on_hold = false;
            self.last = None;
            self.run = 0;
            self.failures_in_a_row = 0;
            self.first_probe = true;
            set = Some(initial_result(self.kind));
            new_instance = true;
        }
        if self.on_hold {
            return (Decision::Wait, set, new_instance);
        }
        if !t.running {
            let decision = if t.will_restart { Decision::Wait } else { Decision::Stop };
            return (decision, Some(ProbeResult::Failure), new_instance);
        }
        if t.terminating && self.kind != ProbeType::Readiness {
            // Quiet shutdown: a dying pod's liveness and startup probes stop, readiness goes on.
            return (Decision::Stop, Some(ProbeResult::Success), new_instance);
        }
        let delay = Duration::from_secs(self.probe().initial_delay_seconds.max(0) as u64);
        if let Some(started_at) = t.started_at {
            if now < started_at + delay {
                return (Decision::Wait, set, new_instance);
            }
        }
        match self.kind {
            ProbeType::Startup if started => (Decision::Wait, set, new_instance),
            ProbeType::Liveness | ProbeType::Readiness if !started => (Decision::Wait, set, new_instance),
            _ => (Decision::Probe, set, new_instance),
        }
    }

    /// When the worker should ask again after a `Wait` for the initial delay.
    pub fn delay_over_at(&self, now_wall: SystemTime, now: Instant) -> Option<Instant> {
        let delay = Duration::from_secs(self.probe().initial_delay_seconds.max(0) as u64);
        let end = self.target.started_at? + delay;
        end.duration_since(now_wall).ok().map(|left| now + left)
    }

    /// Whether one more success would change nothing: the result already is `Success`
    /// and stays so, nothing counts failures, and no hold follows. Such a result need not
    /// wake the prober.
    pub fn quiet_on_success(&self) -> bool {
        self.kind != ProbeType::Startup
            && !self.on_hold
            && self.last == Some(ProbeResult::Success)
            && self.run as i32 >= self.probe().success_threshold.max(1)
            && self.failures_in_a_row == 0
    }

    /// kubelet's `doProbe` after the probe: counts runs of equal results and returns the
    /// result to record once a threshold is reached. Errors are not counted.
    pub fn complete(&mut self, outcome: &Outcome) -> Option<ProbeResult> {
        let r = match outcome {
            Outcome::Success(_) | Outcome::Warning(_) => ProbeResult::Success,
            Outcome::Failure(_) => ProbeResult::Failure,
            Outcome::Error(_) => return None,
        };
        if r == ProbeResult::Failure {
            self.failures_in_a_row += 1;
        } else {
            self.failures_in_a_row = 0;
        }
        if self.last == Some(r) {
            self.run += 1;
        } else {
            self.last = Some(r);
            self.run = 1;
        }
        let p = self.probe();
        let threshold = if r == ProbeResult::Failure { p.failure_threshold } else { p.success_threshold };
        if (self.run as i32) < threshold.max(1) {
            return None;
        }
        if (self.kind == ProbeType::Liveness && r == ProbeResult::Failure) || self.kind == ProbeType::Startup {
            // Wait for a new container instance: no exec into a dying container, no extra
            // startup probes.
            self.on_hold = true;
            self.run = 0;
        }
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Container, ExecAction};

    fn target(probe: Probe, kind: ProbeType, id: &str, running: bool) -> ProbeTarget {
        let mut c = Container { name: "app".into(), ..Default::default() };
        match kind {
            ProbeType::Liveness => c.liveness_probe = Some(probe),
            ProbeType::Readiness => c.readiness_probe = Some(probe),
            ProbeType::Startup => c.startup_probe = Some(probe),
        }
        ProbeTarget {
            pod_uid: "u".into(),
            container: std::sync::Arc::new(c),
            container_id: Some(id.into()),
            running,
            started_at: Some(SystemTime::UNIX_EPOCH),
            will_restart: true,
            ..Default::default()
        }
    }

    fn probe(success: i32, failure: i32, delay: i32) -> Probe {
        Probe {
            exec: Some(ExecAction { command: vec!["true".into()] }),
            initial_delay_seconds: delay,
            timeout_seconds: 1,
            period_seconds: 1,
            success_threshold: success,
            failure_threshold: failure,
            termination_grace_period_seconds: None,
            ..Default::default()
        }
    }

    fn ok() -> Outcome {
        Outcome::Success(String::new())
    }

    fn fail() -> Outcome {
        Outcome::Failure("boom".into())
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn a_success_is_quiet_only_when_it_would_change_nothing() {
        // (kind, success threshold, outcomes so far) → quiet?
        let table: [(ProbeType, i32, &[bool], bool); 9] = [
            (ProbeType::Readiness, 1, &[], false),
            (ProbeType::Readiness, 1, &[true], true),
            (ProbeType::Readiness, 2, &[true], false),
            (ProbeType::Readiness, 2, &[true, true], true),
            (ProbeType::Readiness, 1, &[true, false], false),
            (ProbeType::Readiness, 1, &[true, false, true], true),
            (ProbeType::Liveness, 1, &[true, true], true),
            (ProbeType::Liveness, 1, &[false], false),
            (ProbeType::Startup, 1, &[true], false),
        ];
        for (kind, success, outcomes, want) in table {
            let mut w = Worker::new(kind, target(probe(success, 3, 0), kind, "c1", true), Instant::now());
            w.decide(kind != ProbeType::Startup, at(100));
            for &o in outcomes {
                w.complete(&if o { ok() } else { fail() });
            }
            assert_eq!(w.quiet_on_success(), want, "{kind:?} {success} {outcomes:?}");
            if want {
                // What it promises: another success records Success again and counts nothing.
                assert_eq!(w.complete(&ok()), Some(ProbeResult::Success));
                assert!(w.quiet_on_success() && w.failures_in_a_row == 0);
            }
        }
    }

    #[test]
    fn initial_values_per_type() {
        for (kind, want) in [
            (ProbeType::Readiness, ProbeResult::Failure),
            (ProbeType::Liveness, ProbeResult::Success),
            (ProbeType::Startup, ProbeResult::Unknown),
        ] {
            let mut w = Worker::new(kind, target(probe(1, 3, 0), kind, "c1", true), Instant::now());
            let (_, set, new) = w.decide(kind != ProbeType::Startup, at(100));
            assert_eq!((set, new), (Some(want), true), "{kind:?}");
        }
    }

    #[test]
    fn failure_threshold_table_for_liveness() {
        // (outcomes, results recorded)
        let table: Vec<(Vec<Outcome>, Vec<Option<ProbeResult>>)> = vec![
            (vec![fail(), fail(), fail()], vec![None, None, Some(ProbeResult::Failure)]),
            (vec![fail(), fail(), ok(), fail(), fail()], vec![None, None, Some(ProbeResult::Success), None, None]),
            (
                vec![fail(), Outcome::Error("x".into()), fail(), fail()],
                vec![None, None, None, Some(ProbeResult::Failure)],
            ),
        ];
        for (outcomes, want) in table {
            let mut w = Worker::new(
                ProbeType::Liveness,
                target(probe(1, 3, 0), ProbeType::Liveness, "c1", true),
                Instant::now(),
            );
            assert_eq!(w.decide(true, at(100)).0, Decision::Probe);
            let got: Vec<Option<ProbeResult>> = outcomes.iter().map(|o| w.complete(o)).collect();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn liveness_failure_holds_the_worker_until_a_new_instance() {
        let mut w =
            Worker::new(ProbeType::Liveness, target(probe(1, 1, 0), ProbeType::Liveness, "c1", true), Instant::now());
        w.decide(true, at(100));
        assert_eq!(w.complete(&fail()), Some(ProbeResult::Failure));
        assert_eq!(w.decide(true, at(101)).0, Decision::Wait, "on hold");
        w.update(target(probe(1, 1, 0), ProbeType::Liveness, "c2", true), Instant::now());
        let (d, set, new) = w.decide(true, at(102));
        assert_eq!((d, set, new), (Decision::Probe, Some(ProbeResult::Success), true));
    }

    #[test]
    fn readiness_success_threshold_and_initial_delay() {
        let mut w = Worker::new(
            ProbeType::Readiness,
            target(probe(2, 3, 10), ProbeType::Readiness, "c1", true),
            Instant::now(),
        );
        assert_eq!(w.decide(true, at(5)).0, Decision::Wait, "inside the initial delay");
        assert_eq!(w.decide(true, at(10)).0, Decision::Probe);
        assert_eq!(w.complete(&ok()), None);
        assert_eq!(w.complete(&ok()), Some(ProbeResult::Success));
        assert_eq!(w.complete(&ok()), Some(ProbeResult::Success), "set again; the store publishes changes only");
    }

    #[test]
    fn startup_gates_liveness_and_readiness_and_idles_once_started() {
        let mut live =
            Worker::new(ProbeType::Liveness, target(probe(1, 3, 0), ProbeType::Liveness, "c1", true), Instant::now());
        assert_eq!(live.decide(false, at(100)).0, Decision::Wait, "not started yet");
        assert_eq!(live.decide(true, at(100)).0, Decision::Probe);
        let mut start =
            Worker::new(ProbeType::Startup, target(probe(1, 3, 0), ProbeType::Startup, "c1", true), Instant::now());
        assert_eq!(start.decide(false, at(100)).0, Decision::Probe);
        assert_eq!(start.complete(&ok()), Some(ProbeResult::Success));
        assert_eq!(start.decide(true, at(101)).0, Decision::Wait);
    }

    #[test]
    fn a_stopped_container_fails_and_ends_the_worker_unless_it_restarts() {
        let mut t = target(probe(1, 3, 0), ProbeType::Readiness, "c1", false);
        let mut w = Worker::new(ProbeType::Readiness, t.clone(), Instant::now());
        assert_eq!(w.decide(true, at(100)), (Decision::Wait, Some(ProbeResult::Failure), true));
        t.will_restart = false;
        w.update(t, Instant::now());
        assert_eq!(w.decide(true, at(101)), (Decision::Stop, Some(ProbeResult::Failure), false));
    }

    #[test]
    fn a_terminating_pod_keeps_readiness_and_stops_liveness() {
        let mut t = target(probe(1, 3, 0), ProbeType::Liveness, "c1", true);
        t.terminating = true;
        let mut live = Worker::new(ProbeType::Liveness, t.clone(), Instant::now());
        assert_eq!(live.decide(true, at(100)).0, Decision::Stop);
        let mut t = target(probe(1, 3, 0), ProbeType::Readiness, "c1", true);
        t.terminating = true;
        let mut ready = Worker::new(ProbeType::Readiness, t, Instant::now());
        assert_eq!(ready.decide(true, at(100)).0, Decision::Probe);
    }
}
