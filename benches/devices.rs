//! Device plugin numbers: registration to capacity, the Allocate round trip over the Unix
//! socket, and a whole admission (Allocate plus the checkpoint's fsync). The device manager
//! runs in-process on its own thread, exactly as in the agent; the plugins are the tests'
//! grpcio plugin.

#[path = "../tests/common/plugin.rs"]
mod plugin;

use crossbeam_channel::unbounded;
use ferrolet::api::{Container, Pod, Quantity};
use ferrolet::base::manager::Publisher;
use ferrolet::base::manager::{Health, ManagerHandle};
use ferrolet::node::devicemanager::DeviceUpdate;
use ferrolet::node::devicemanager::{DeviceManager, DeviceSettings, DevicesCommand};
use ferrolet::node::events::EventRecorder;
use ferrolet::proto::deviceplugin as pb;
use plugin::{Behaviour, TestPlugin};
use std::time::{Duration, Instant};

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
}

fn report(what: &str, v: &mut [Duration]) {
    let (p50, p99, max) = (pct(v, 0.50), pct(v, 0.99), pct(v, 1.0));
    println!("{what:<44} n={:<5} p50 {:>8.3} ms   p99 {:>8.3} ms   max {:>8.3} ms", v.len(), ms(p50), ms(p99), ms(max));
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let plugin_dir = dir.path().join("device-plugins");
    let (pods_tx, pods_rx) = unbounded();
    let (tx, rx) = unbounded();
    let (ev_tx, _ev_rx) = unbounded();
    let recorder = EventRecorder::new(ev_tx, "ferrolet", "bench", Default::default());
    let settings = DeviceSettings {
        plugin_dir: plugin_dir.clone(),
        dial_timeout: Duration::from_secs(10),
        allocate_timeout: Duration::from_secs(5),
        endpoint_grace_period: Duration::from_secs(300),
        admission_wait: Duration::from_secs(10),
        reconnect_attempts: 5,
        max_devices_per_resource: 1024,
    };
    let health = Health::default();
    let (dm, devices) = DeviceManager::new(settings, recorder, Publisher::to(pods_tx), tx.clone(), &health);
    let handle = ManagerHandle::spawn_with_channel("fl-devices", dm, (tx.clone(), rx), &health).unwrap();

    // Registration to capacity: from the plugin's Register call until the device manager
    // shows the resource's devices as allocatable.
    let mut reg = Vec::new();
    let mut plugins = Vec::new();
    for i in 0..50 {
        let name = format!("example.com/r{i}");
        let p = TestPlugin::start(
            &plugin_dir,
            &name,
            &format!("r{i}.sock"),
            &["d0", "d1", "d2", "d3"],
            Behaviour::default(),
        );
        let t0 = Instant::now();
        p.register().unwrap();
        loop {
            let ready = devices.resources().iter().any(|r| r.name == name && r.allocatable == 4);
            if ready {
                break;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        reg.push(t0.elapsed());
        plugins.push(p);
    }
    println!("device plugins ({} on this machine)", std::thread::available_parallelism().map_or(1, |n| n.get()));
    report("registration -> capacity", &mut reg);

    // The Allocate RPC alone, over the plugin's Unix socket, as the agent makes it.
    let env = std::sync::Arc::new(grpcio::EnvBuilder::new().cq_count(1).build());
    let ch = grpcio::ChannelBuilder::new(env).connect(&format!("unix:{}", plugin_dir.join("r0.sock").display()));
    let client = pb::DevicePluginClient::new(ch);
    let mut req = pb::AllocateRequest::new();
    let mut c = pb::ContainerAllocateRequest::new();
    c.set_devices_ids(vec!["d0".to_string()]);
    req.mut_container_requests().push(c);
    for _ in 0..200 {
        client.allocate(&req).unwrap();
    }
    let mut rpc = Vec::new();
    for _ in 0..5000 {
        let t0 = Instant::now();
        client.allocate_opt(&req, grpcio::CallOption::default().timeout(Duration::from_secs(5))).unwrap();
        rpc.push(t0.elapsed());
    }
    report("Allocate round trip (Unix socket)", &mut rpc);

    // A whole admission through the device manager's thread: choose, Allocate, record,
    // checkpoint (fsync), answer; then the pod is freed (another checkpoint).
    let mut admit = Vec::new();
    for i in 0..500 {
        let mut pod = Pod::default();
        pod.metadata.name = format!("p{i}");
        pod.metadata.namespace = "default".into();
        pod.metadata.uid = format!("uid-{i}");
        let mut c = Container { name: "app".into(), ..Default::default() };
        c.resources.limits.insert("example.com/r0".into(), Quantity::parse("1").unwrap());
        pod.spec.containers.push(c);
        let t0 = Instant::now();
        tx.send(DevicesCommand::Admit(Box::new(pod))).unwrap();
        match pods_rx.recv_timeout(Duration::from_secs(10)).unwrap() {
            DeviceUpdate::Admitted { result, .. } => result.unwrap(),
            other => panic!("unexpected {other:?}"),
        }
        admit.push(t0.elapsed());
        tx.send(DevicesCommand::ActivePods(Default::default())).unwrap();
    }
    report("admission (Allocate + checkpoint fsync)", &mut admit);
    let rss = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_string())
        .unwrap_or_default();
    println!("bench process RSS with 50 plugins connected: {rss} KiB (agent and plugins in one process)");
    drop(plugins);
    let _ = handle.stop(Duration::from_secs(5));
}
