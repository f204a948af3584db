//! The manager's message flow, driven by hand: no manager thread, endpoint news made up by
//! the test, children that are plain workers waiting to be stopped.

use super::*;
use crate::api::Quantity;
use crate::base::manager::{Exit, Manager};
use crate::node::devicemanager::state::Endpoint;
use crate::proto::deviceplugin as pb;
use crossbeam_channel::{unbounded, Receiver};
use std::collections::HashSet;
use std::path::Path;

const RES: &str = "example.com/dev";

struct Fixture {
    dm: DeviceManager,
    devices: Devices,
    updates: Receiver<DeviceUpdate>,
    health: Health,
    _dir: tempfile::TempDir,
}

fn settings(dir: &Path) -> DeviceSettings {
    DeviceSettings {
        plugin_dir: dir.join("device-plugins"),
        dial_timeout: Duration::from_secs(1),
        allocate_timeout: Duration::from_secs(1),
        endpoint_grace_period: Duration::from_secs(300),
        admission_wait: Duration::from_millis(20),
        reconnect_attempts: 1,
        max_devices_per_resource: 16,
    }
}

fn fixture_in(dir: tempfile::TempDir) -> Fixture {
    let (tx, updates) = unbounded();
    let (ev_tx, _ev_rx) = unbounded();
    let recorder = EventRecorder::new(ev_tx, "ferrolet", "test", Default::default());
    let (commands, _) = unbounded();
    let health = Health::default();
    let (dm, devices) = DeviceManager::new(settings(dir.path()), recorder, Publisher::to(tx), commands, &health);
    Fixture { dm, devices, updates, health, _dir: dir }
}

fn fixture() -> Fixture {
    fixture_in(tempfile::tempdir().unwrap())
}

/// A plugin connection that is never dialled (a channel connects lazily).
fn endpoint(pre_start_required: bool) -> Endpoint {
    let env = Arc::new(grpcio::EnvBuilder::new().cq_count(1).build());
    let ch = grpcio::ChannelBuilder::new(env).connect("unix:/nonexistent/ferrolet-test.sock");
    Endpoint {
        socket: "/nonexistent/ferrolet-test.sock".into(),
        client: pb::DevicePluginClient::new(ch),
        pre_start_required,
        preferred_allocation: false,
    }
}

fn listed(ids: &[(&str, bool)]) -> Vec<pb::Device> {
    ids.iter()
        .map(|(id, healthy)| {
            let mut d = pb::Device::new();
            d.set_ID(id.to_string());
            d.set_health(if *healthy { "Healthy" } else { "Unhealthy" }.into());
            d
        })
        .collect()
}

fn event(e: EndpointEvent) -> DevicesCommand {
    DevicesCommand::Endpoint(e)
}

/// (capacity, allocatable, plugin) of the resource in the published view.
fn shown(devices: &Devices) -> Option<(u64, u64, String)> {
    devices.resources().into_iter().find(|r| r.name == RES).map(|r| (r.capacity, r.allocatable, r.plugin))
}

/// A thread in `set` that does nothing until it is stopped, as an endpoint thread following
/// a quiet stream.
fn idle(set: &WorkerSet, name: &str) -> WorkerId {
    set.spawn_cancellable(name, |mut stop| {
        let _ = stop.run(futures::future::pending::<()>());
        Exit::Done
    })
    .unwrap()
}

fn pod(uid: &str, resource: &str, n: &str) -> Box<Pod> {
    let mut pod = Pod::default();
    pod.metadata.name = uid.into();
    pod.metadata.namespace = "default".into();
    pod.metadata.uid = uid.into();
    let mut c = Container { name: "app".into(), ..Default::default() };
    c.resources.limits.insert(resource.into(), Quantity::parse(n).unwrap());
    pod.spec.containers.push(c);
    Box::new(pod)
}

fn next_update(f: &Fixture) -> DeviceUpdate {
    f.updates.recv_timeout(Duration::from_secs(5)).expect("an update for the pod manager")
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn endpoint_news_reach_the_published_view_and_a_replaced_registrations_news_change_nothing() {
    let mut f = fixture();
    let old = idle(&f.dm.endpoint_threads, "fl-plugin");
    f.dm.endpoints.insert(1, EndpointWorker { resource: RES.into(), thread: old });
    f.dm.handle(event(EndpointEvent::Registered { resource: RES.into(), generation: 1, endpoint: endpoint(false) }));
    assert_eq!(shown(&f.devices), Some((0, 0, "Connected".into())));
    let devices = listed(&[("a", true), ("b", true)]);
    f.dm.handle(event(EndpointEvent::DevicesChanged { resource: RES.into(), generation: 1, devices }));
    assert_eq!(shown(&f.devices), Some((2, 2, "Connected".into())));
    let saved = checkpoint::load(&f.dm.settings.plugin_dir).unwrap().unwrap();
    assert_eq!(saved.registered_devices[RES], ["a", "b"], "the checkpoint follows the devices");

    // Registration 2 replaces 1: its thread is told to stop, and is reaped once ended.
    f.dm.handle(event(EndpointEvent::Registered { resource: RES.into(), generation: 2, endpoint: endpoint(false) }));
    let old_thread = f.dm.endpoints[&1].thread;
    wait_until("the replaced endpoint thread to end", || !f.dm.endpoint_threads.is_running(old_thread));
    f.dm.on_tick();
    assert!(f.dm.endpoints.is_empty());
    assert!(f.health.alive().is_empty() && f.health.dead().is_empty());
    let late = listed(&[("x", true)]);
    f.dm.handle(event(EndpointEvent::DevicesChanged { resource: RES.into(), generation: 1, devices: late }));
    f.dm.handle(event(EndpointEvent::EndpointEnded { resource: RES.into(), generation: 1 }));
    assert_eq!(shown(&f.devices), Some((2, 2, "Connected".into())), "stale news from registration 1");

    let reason = "the plugin closed the stream".to_string();
    f.dm.handle(event(EndpointEvent::StreamEnded { resource: RES.into(), generation: 2, reason }));
    assert_eq!(shown(&f.devices), Some((2, 0, "Reconnecting".into())));
    f.dm.handle(event(EndpointEvent::Reconnected {
        resource: RES.into(),
        generation: 2,
        pre_start_required: false,
        preferred_allocation: false,
    }));
    assert_eq!(shown(&f.devices).unwrap().2, "Connected");
    f.dm.handle(event(EndpointEvent::EndpointEnded { resource: RES.into(), generation: 2 }));
    assert_eq!(shown(&f.devices), Some((2, 0, "Stopped".into())));
}

#[test]
fn oversize_lists_are_refused_whole() {
    let mut f = fixture();
    f.dm.handle(event(EndpointEvent::Registered { resource: RES.into(), generation: 1, endpoint: endpoint(false) }));
    let ids: Vec<String> = (0..17).map(|i| format!("d{i}")).collect();
    let many: Vec<(&str, bool)> = ids.iter().map(|i| (i.as_str(), true)).collect();
    f.dm.handle(event(EndpointEvent::DevicesChanged { resource: RES.into(), generation: 1, devices: listed(&many) }));
    assert_eq!(shown(&f.devices), Some((0, 0, "Connected".into())));
}

#[test]
fn a_pod_waits_for_its_plugin_then_is_refused_in_kubelets_words() {
    let mut f = fixture();
    f.dm.handle(DevicesCommand::Admit(pod("u1", "example.com/ghost", "1")));
    assert!(f.updates.try_recv().is_err(), "it waits");
    let deadline = f.dm.next_deadline().expect("the wait's deadline");
    std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
    f.dm.on_deadline();
    let DeviceUpdate::Admitted { pod_uid, result } = next_update(&f) else { panic!("not an admission") };
    assert_eq!(pod_uid, "u1");
    let e = result.unwrap_err();
    assert!(matches!(e, DeviceError::Choose(StateError::AllocateUnregistered { .. })));
    assert_eq!(Chain(&e).to_string(), "cannot allocate unregistered device example.com/ghost");
    assert!(f.dm.next_deadline().is_none());
}

/// A fixture whose plugin directory holds a checkpoint: pod u1's container app holds dev0.
fn restored() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let mut st = DeviceState::new(Duration::from_secs(300), 16);
    let mut options = DeviceOptions::default();
    options.envs.insert("DEV".into(), "dev0".into());
    st.record("u1", "app", RES, &["dev0".into()], options);
    st.restore(Restored { pods: Default::default(), resources: vec![RES.into()] }, Instant::now());
    let plugin_dir = settings(dir.path()).plugin_dir;
    std::fs::create_dir_all(&plugin_dir).unwrap();
    checkpoint::save(&plugin_dir, &CheckpointData::from(&st)).unwrap();
    fixture_in(dir)
}

#[test]
fn restored_allocations_admit_and_prepare_without_their_plugin() {
    let mut f = restored();
    assert_eq!(f.devices.container_devices("u1", "app"), [(RES.to_string(), vec![("dev0".to_string(), false)])]);
    f.dm.handle(DevicesCommand::Admit(pod("u1", RES, "1")));
    assert!(matches!(next_update(&f), DeviceUpdate::Admitted { result: Ok(()), .. }));
    f.dm.handle(DevicesCommand::Prepare { pod_uid: "u1".into(), container: "app".into() });
    let DeviceUpdate::Prepared { result, .. } = next_update(&f) else { panic!("not a preparation") };
    assert_eq!(result.unwrap().envs["DEV"], "dev0");

    f.dm.handle(DevicesCommand::Prepare { pod_uid: "u1".into(), container: "other".into() });
    let DeviceUpdate::Prepared { container, result, .. } = next_update(&f) else { panic!("not a preparation") };
    assert_eq!(container, "other");
    assert_eq!(
        result.unwrap_err().to_string(),
        "no devices are allocated to this container (was the checkpoint lost?)"
    );

    // Gone from the active pods: freed, in the view and on disk.
    f.dm.handle(DevicesCommand::ActivePods(HashSet::new()));
    assert!(f.devices.container_devices("u1", "app").is_empty());
    assert!(checkpoint::load(&f.dm.settings.plugin_dir).unwrap().unwrap().pod_device_entries.is_empty());
}

#[test]
fn prestart_answers_reach_the_pod_manager_and_their_threads_are_bounded() {
    let mut f = restored();
    f.dm.handle(event(EndpointEvent::Registered { resource: RES.into(), generation: 1, endpoint: endpoint(true) }));
    f.dm.handle(DevicesCommand::PreStartDone(PreStartDone {
        pod_uid: "u1".into(),
        container: "app".into(),
        result: Ok(DeviceOptions::default()),
    }));
    assert!(matches!(next_update(&f), DeviceUpdate::Prepared { result: Ok(_), .. }));

    for _ in 0..MAX_PRESTART_THREADS {
        idle(&f.dm.prestarts, "fl-prestart");
    }
    f.dm.handle(DevicesCommand::Prepare { pod_uid: "u1".into(), container: "app".into() });
    let DeviceUpdate::Prepared { result, .. } = next_update(&f) else { panic!("not a preparation") };
    assert!(matches!(result, Err(DeviceError::TooManyPreStarts)));
    assert_eq!(f.health.alive().len(), MAX_PRESTART_THREADS);
}

#[test]
fn dropping_the_manager_stops_and_joins_every_child_thread() {
    let f = fixture();
    let mut dm = f.dm.with_stop_timeout(Duration::from_secs(3));
    for g in 1..=3 {
        let thread = idle(&dm.endpoint_threads, "fl-plugin");
        dm.endpoints.insert(g, EndpointWorker { resource: format!("example.com/r{g}"), thread });
    }
    idle(&dm.prestarts, "fl-prestart");
    // One that sleeps instead of waiting on a call (an endpoint between reconnects).
    let sleeper = dm
        .endpoint_threads
        .spawn_cancellable("fl-plugin", |stop| {
            while !stop.sleep(Duration::from_secs(60)) {}
            Exit::Done
        })
        .unwrap();
    dm.endpoints.insert(4, EndpointWorker { resource: "example.com/r4".into(), thread: sleeper });
    assert_eq!(f.health.alive().len(), 5);
    // Each would wait 60 s or for ever: within the 3 s stop timeout, every one ended.
    drop(dm);
    assert!(f.health.alive().is_empty(), "{:?}", f.health.alive());
    assert!(f.health.dead().is_empty(), "{:?}", f.health.dead());
}

#[test]
fn news_from_an_expired_resources_endpoint_stop_its_thread() {
    let mut f = fixture();
    f.dm.state.grace = Duration::ZERO;
    let thread = idle(&f.dm.endpoint_threads, "fl-plugin");
    f.dm.endpoints.insert(1, EndpointWorker { resource: RES.into(), thread });
    f.dm.handle(event(EndpointEvent::Registered { resource: RES.into(), generation: 1, endpoint: endpoint(false) }));
    let reason = "the plugin closed the stream".to_string();
    f.dm.handle(event(EndpointEvent::StreamEnded { resource: RES.into(), generation: 1, reason }));
    // Still reconnecting when the grace period is over: the resource goes.
    f.dm.on_tick();
    assert_eq!(shown(&f.devices), None);
    assert_eq!(f.dm.endpoint_threads.len(), 1, "its thread still runs");
    f.dm.handle(event(EndpointEvent::Reconnected {
        resource: RES.into(),
        generation: 1,
        pre_start_required: false,
        preferred_allocation: false,
    }));
    let stale = f.dm.endpoints[&1].thread;
    wait_until("the stale endpoint thread to end", || !f.dm.endpoint_threads.is_running(stale));
    assert_eq!(shown(&f.devices), None, "a stale reconnect brings nothing back");
}
