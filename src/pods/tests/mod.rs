//! The pod manager's behaviour, step by step, over the in-memory runtime and a fake clock.
//! The checklist is kubelet's `kuberuntime_manager_test.go` (`TestComputePodActions*`,
//! `TestSyncPodWithInitContainers`, `TestKillPod*`): each test drives `handle`, `sync` and
//! `on_tick`, moves the clock, scripts the runtime, and asserts on the calls the runtime
//! received, the events and the published statuses.

mod actions;
mod apiserver;
mod dns;
mod fit;
mod gate;
mod hooks;
mod images;
mod init;
mod lifecycle;
mod restart;
mod steady;
mod termination;
mod workers;

use super::{PodManager, PodManagerConfig, PodsCommand};
use crate::api::manifest::{CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION};
use crate::api::{Container, ContainerStatus, Event, Pod, PodPhase, PodStatus, RestartPolicy};
use crate::base::clock::FakeClock;
use crate::base::manager::Manager;
use crate::node::events::EventRecorder;
use crate::node::prober::{ProbeResults, ProbeTarget, ProberCommand};
use crate::node::runtime::fake::{Call, FakeRuntime};
use crate::node::runtime::ContainerInfo;
use crate::node::status::StatusCache;
use crossbeam_channel::Receiver;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The source every test pod comes from.
const SOURCE: crate::api::manifest::PodSource = crate::api::manifest::PodSource::File;
/// The pods' grace period.
const GRACE: Duration = Duration::from_secs(30);

/// When every test starts.
fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

/// A node: the pod manager over a fake runtime, both reading a fake clock.
struct Node {
    pm: PodManager,
    rt: Arc<FakeRuntime>,
    clock: FakeClock,
    events: Receiver<Event>,
    statuses: StatusCache,
    probes: ProbeResults,
    targets: Receiver<ProberCommand>,
}

impl Node {
    /// A node with an empty runtime.
    fn new() -> Node {
        let clock = FakeClock::new(t0());
        Node::over(Arc::new(FakeRuntime::new(clock.clone())), clock)
    }

    /// The agent restarted: a new pod manager over the same runtime, which kept running.
    fn restart(&self) -> Node {
        Node::over(self.rt.clone(), self.clock.clone())
    }

    fn over(rt: Arc<FakeRuntime>, clock: FakeClock) -> Node {
        let (events_tx, events) = crossbeam_channel::unbounded();
        let (targets_tx, targets) = crossbeam_channel::unbounded();
        let statuses = StatusCache::default();
        let probes = ProbeResults::default();
        let cfg = PodManagerConfig {
            node_name: "node1".into(),
            node_ip: "10.0.0.5".into(),
            log_root: "/nonexistent/logs".into(),
            pods_root: "/nonexistent/pods".into(),
            registry_config: "/nonexistent/config.json".into(),
            max_dead_per_container: 1,
            sync_frequency: Duration::from_secs(10),
            allowed_unsafe_sysctls: vec!["net.core.*".into()],
            dns: None,
            allocatable: super::fit::NodeAllocatable {
                cpu_millis: 64_000,
                memory: 256 << 30,
                pods: 110,
                ..Default::default()
            },
        };
        let recorder = EventRecorder::new(events_tx, "ferrolet", "node1", Default::default());
        let pm = PodManager::new(cfg, rt.clone(), statuses.clone(), recorder, None)
            .with_prober(targets_tx, probes.clone())
            .with_clock(Arc::new(clock.clone()));
        Node { pm, rt, clock, events, statuses, probes, targets }
    }

    /// The pod manager pulls images through a queue the test answers (`PodsCommand::Images`).
    fn with_images(self) -> (Node, Receiver<crate::node::images::PullRequest>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        (Node { pm: self.pm.with_images(tx), ..self }, rx)
    }

    /// The source now wants exactly these pods.
    fn apply(&mut self, pods: &[&Pod]) {
        let pods = pods.iter().map(|p| Arc::new((*p).clone())).collect();
        self.pm.handle(PodsCommand::Update { source: SOURCE, pods });
    }

    /// One periodic sync.
    fn tick(&mut self) {
        self.pm.on_tick();
    }

    /// Moves the clock.
    fn advance(&self, secs: u64) {
        self.clock.advance(Duration::from_secs(secs));
    }

    /// The runtime calls since the last look.
    fn calls(&self) -> Vec<Call> {
        self.rt.take_calls()
    }

    /// The events since the last look, as (reason, message).
    fn events(&self) -> Vec<(String, String)> {
        self.events.try_iter().map(|e| (e.reason, e.message)).collect()
    }

    /// The reasons of the events since the last look.
    fn reasons(&self) -> Vec<String> {
        self.events().into_iter().map(|(r, _)| r).collect()
    }

    /// The probe-target lists sent to the prober since the last look.
    fn sent_targets(&self) -> Vec<Vec<ProbeTarget>> {
        let sent = self.targets.try_iter().filter_map(|cmd| match cmd {
            ProberCommand::Targets(t) => Some(t),
            _ => None,
        });
        sent.collect()
    }

    /// A pod's published status.
    fn status(&self, pod: &Pod) -> PodStatus {
        self.statuses.status(&pod.metadata.uid).expect("the pod has a status")
    }

    /// A pod's published phase.
    fn phase(&self, pod: &Pod) -> PodPhase {
        self.status(pod).phase
    }

    /// One container's published status (init or app).
    fn container(&self, pod: &Pod, name: &str) -> ContainerStatus {
        let st = self.status(pod);
        let found = st.init_container_statuses.into_iter().chain(st.container_statuses).find(|c| c.name == name);
        found.expect("the container has a status")
    }

    /// Why a container waits, if it does: (reason, message).
    fn waiting(&self, pod: &Pod, name: &str) -> Option<(String, String)> {
        self.container(pod, name).state.waiting.map(|w| (w.reason, w.message))
    }

    /// The newest instance of a container in the runtime.
    fn instance(&self, name: &str) -> ContainerInfo {
        let all = self.rt.containers().into_iter().filter(|c| c.config.name == name);
        all.max_by_key(|c| c.config.attempt).expect("the container exists")
    }
}

/// A container that runs until stopped.
fn app(name: &str) -> Container {
    Container {
        name: name.into(),
        image: "busybox".into(),
        command: vec!["sleep".into(), "infinity".into()],
        ..Default::default()
    }
}

/// A sidecar: an init container with `restartPolicy: Always`.
fn sidecar(name: &str) -> Container {
    Container { restart_policy: Some(RestartPolicy::Always.as_str().into()), ..app(name) }
}

/// A pod from source `file` with uid `uid-<name>`, a 30 s grace period and content hash `v1`.
fn pod(name: &str, policy: RestartPolicy, init: &[Container], apps: &[Container]) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = name.into();
    p.metadata.namespace = "default".into();
    p.metadata.uid = format!("uid-{name}");
    p.metadata.annotations.insert(CONFIG_SOURCE_ANNOTATION.into(), SOURCE.as_str().into());
    p.metadata.annotations.insert(CONFIG_HASH_ANNOTATION.into(), "v1".into());
    p.spec.restart_policy = policy.as_str().into();
    p.spec.termination_grace_period_seconds = Some(GRACE.as_secs() as i64);
    p.spec.init_containers = init.to_vec();
    p.spec.containers = apps.to_vec();
    p
}

/// Shorthands for the calls a test expects.
fn create(name: &str, attempt: u32) -> Call {
    Call::CreateContainer(name.into(), attempt)
}

fn start(name: &str) -> Call {
    Call::StartContainer(name.into())
}

fn stop(name: &str, grace_secs: u64) -> Call {
    Call::StopContainer(name.into(), Duration::from_secs(grace_secs))
}
