//! The device manager's threads, in process: the manager (`fl-devices`) runs on its own
//! thread exactly as in the agent, with the tests' grpcio plugin on a Unix socket. Its
//! endpoint (`fl-plugin`) and PreStartContainer (`fl-prestart`) threads are its own: a
//! replaced registration's thread ends, and stopping the manager ends and joins them all,
//! even one blocked in a call the plugin never answers.

#[path = "common/plugin.rs"]
mod plugin;

use crossbeam_channel::{unbounded, Receiver};
use ferrolet::api::{Container, Pod, Quantity};
use ferrolet::base::manager::{Health, ManagerHandle, Publisher};
use ferrolet::node::devicemanager::{DeviceManager, DeviceSettings, DeviceUpdate, Devices, DevicesCommand};
use ferrolet::node::events::EventRecorder;
use parking_lot::Mutex;
use plugin::{Behaviour, TestPlugin};
use std::path::Path;
use std::time::{Duration, Instant};

const RES: &str = "example.com/dev";
const T: Duration = Duration::from_secs(15);

/// The tests count this process's threads by name, so they run one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

struct Running {
    handle: ManagerHandle<DevicesCommand>,
    devices: Devices,
    updates: Receiver<DeviceUpdate>,
    health: Health,
}

fn start(plugin_dir: &Path) -> Running {
    let settings = DeviceSettings {
        plugin_dir: plugin_dir.into(),
        dial_timeout: Duration::from_secs(5),
        allocate_timeout: Duration::from_secs(5),
        endpoint_grace_period: Duration::from_secs(300),
        admission_wait: Duration::from_secs(10),
        reconnect_attempts: 5,
        max_devices_per_resource: 16,
    };
    let (pods_tx, updates) = unbounded();
    let (tx, rx) = unbounded();
    let (ev_tx, _ev_rx) = unbounded();
    let recorder = EventRecorder::new(ev_tx, "ferrolet", "test", Default::default());
    let health = Health::default();
    let (dm, devices) = DeviceManager::new(settings, recorder, Publisher::to(pods_tx), tx.clone(), &health);
    let dm = dm.with_stop_timeout(Duration::from_secs(2));
    let handle = ManagerHandle::spawn_with_channel("fl-devices", dm, (tx, rx), &health).unwrap();
    Running { handle, devices, updates, health }
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + T;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn allocatable(devices: &Devices) -> Option<u64> {
    devices.resources().into_iter().find(|r| r.name == RES).map(|r| r.allocatable)
}

/// Threads of this process called `name`.
fn threads(name: &str) -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0 };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .filter(|c| c.trim() == name)
        .count()
}

fn alive(health: &Health, name: &str) -> usize {
    health.alive().iter().filter(|n| *n == name).count()
}

#[test]
fn a_replaced_registrations_endpoint_thread_ends() {
    let _serial = ONE_AT_A_TIME.lock();
    let dir = tempfile::tempdir().unwrap();
    let plugin_dir = dir.path().join("device-plugins");
    let m = start(&plugin_dir);
    let p = TestPlugin::start(&plugin_dir, RES, "dev.sock", &["d0", "d1"], Behaviour::default());
    p.register().unwrap();
    wait_for("the first plugin's devices", || allocatable(&m.devices) == Some(2));
    assert_eq!(alive(&m.health, "fl-plugin"), 1);
    let q = TestPlugin::start(&plugin_dir, RES, "dev2.sock", &["a", "b", "c"], Behaviour::default());
    q.register().unwrap();
    wait_for("the second plugin's devices", || allocatable(&m.devices) == Some(3));
    wait_for("the replaced endpoint thread to end", || alive(&m.health, "fl-plugin") == 1);
    assert!(m.health.dead().is_empty(), "{:?}", m.health.dead());
    // The first plugin's stream was cancelled: its devices no longer reach the manager.
    p.set_devices(&[("d0", true)]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(allocatable(&m.devices), Some(3));
    m.handle.stop(Duration::from_secs(5)).unwrap();
    assert!(m.health.alive().is_empty(), "{:?}", m.health.alive());
}

#[test]
fn stopping_the_device_manager_joins_its_endpoint_and_prestart_threads() {
    let _serial = ONE_AT_A_TIME.lock();
    let dir = tempfile::tempdir().unwrap();
    let plugin_dir = dir.path().join("device-plugins");
    let m = start(&plugin_dir);
    let behaviour = Behaviour { pre_start_required: true, pre_start_hangs: true, ..Behaviour::default() };
    let p = TestPlugin::start(&plugin_dir, RES, "dev.sock", &["d0", "d1"], behaviour);
    p.register().unwrap();
    wait_for("the plugin's devices", || allocatable(&m.devices) == Some(2));

    let mut pod = Pod::default();
    pod.metadata.name = "gpu".into();
    pod.metadata.namespace = "default".into();
    pod.metadata.uid = "uid-1".into();
    let mut c = Container { name: "app".into(), ..Default::default() };
    c.resources.limits.insert(RES.into(), Quantity::parse("1").unwrap());
    pod.spec.containers.push(c);
    let tx = m.handle.sender();
    tx.send(DevicesCommand::Admit(Box::new(pod))).unwrap();
    match m.updates.recv_timeout(T).unwrap() {
        DeviceUpdate::Admitted { result, .. } => result.unwrap(),
        other => panic!("unexpected {other:?}"),
    }
    // The plugin never answers this PreStartContainer (kubelet would wait 30 s).
    tx.send(DevicesCommand::Prepare { pod_uid: "uid-1".into(), container: "app".into() }).unwrap();
    wait_for("the PreStartContainer call", || p.calls(|c| c.pre_start.len()) == 1);
    assert_eq!(m.health.alive(), ["fl-devices", "fl-plugin", "fl-prestart"]);
    assert_eq!((threads("fl-plugin"), threads("fl-prestart")), (1, 1));

    // Within 5 s, where the call would wait 30 s: the stop cancelled it.
    m.handle.stop(Duration::from_secs(5)).unwrap();
    assert!(m.health.alive().is_empty(), "{:?}", m.health.alive());
    assert!(m.health.dead().is_empty(), "{:?}", m.health.dead());
    // Joined threads have ended; the kernel drops their /proc/self/task entries an instant
    // after the join returns (the join wakes on the exit's tid clear, before the task is
    // released), so the count is read until it settles.
    let counts = || (threads("fl-devices"), threads("fl-plugin"), threads("fl-prestart"));
    let settle = Instant::now() + Duration::from_millis(500);
    while counts() != (0, 0, 0) && Instant::now() < settle {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(counts(), (0, 0, 0), "every thread of the device manager is joined");
    assert!(m.updates.try_recv().is_err(), "a cancelled PreStartContainer answers nothing");
}
