//! Device plugins end to end: a real `ferrolet run` and test plugins serving the v1beta1
//! DevicePlugin service with grpcio on Unix sockets in the agent's plugin directory.

use crate::common;

use common::plugin::{register_raw, Behaviour, TestPlugin};
use common::{container, manifest, wait_for, AgentProcess, Sandbox};
use serde_json::Value;
use std::time::Duration;

const RES: &str = "example.com/dev";
const T: Duration = Duration::from_secs(15);
/// The device manager's completed ticks (one a second) on `/metrics`.
const DEVICE_TICKS: &str = "ferrolet_manager_ticks_total{manager=\"fl-devices\"}";

/// The agent with extra `[devices]` settings.
fn agent(sb: &Sandbox, devices: &str) -> AgentProcess {
    let devices = devices.to_string();
    AgentProcess::start_with(sb, move |t| t.replace("[devices]\n", &format!("[devices]\n{devices}")))
}

fn devices(a: &AgentProcess) -> Value {
    serde_json::from_str(&a.get("/devices").unwrap()).unwrap()
}

/// (capacity, allocatable, plugin state) of the test resource, if listed.
fn resource(a: &AgentProcess) -> Option<(u64, u64, String)> {
    let v = devices(a);
    let r = v["resources"].as_array()?.iter().find(|r| r["name"] == RES)?.clone();
    Some((r["capacity"].as_u64()?, r["allocatable"].as_u64()?, r["plugin"].as_str()?.to_string()))
}

fn wait_resource(a: &AgentProcess, want: (u64, u64, &str)) {
    wait_for(&format!("{RES} at {want:?}"), T, || {
        resource(a).filter(|(c, al, p)| (*c, *al, p.as_str()) == want).map(|_| ())
    });
}

fn device_pod(name: &str, limits: &str, command: &str) -> String {
    manifest(
        name,
        &format!(
            "  containers:\n  - name: app\n    image: busybox\n    command: [\"sh\", \"-c\", {command:?}]\n    resources:\n      limits:\n{limits}"
        ),
    )
}

fn phase(a: &AgentProcess, name: &str) -> Option<(String, String, String)> {
    let p = a.pod(name)?;
    let s = p.status?;
    Some((s.phase.to_string(), s.reason, s.message))
}

#[test]
fn registration_lists_devices_and_capacity_follows_health() {
    let sb = Sandbox::new();
    let a = agent(&sb, "");
    let p = TestPlugin::start(&sb.plugin_dir(), RES, "dev.sock", &["dev0", "dev1", "dev2"], Behaviour::default());
    p.register().unwrap();
    wait_resource(&a, (3, 3, "Connected"));
    p.set_devices(&[("dev0", true), ("dev1", true), ("dev2", false)]);
    wait_resource(&a, (3, 2, "Connected"));
    let node = a.cli(&["get", "node"]);
    assert!(node.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == [RES, "3", "2"]), "{node}");
    let node: Value = serde_json::from_str(&a.cli(&["get", "node", "-o", "json"])).unwrap();
    assert_eq!(
        (node["status"]["capacity"][RES].as_str(), node["status"]["allocatable"][RES].as_str()),
        (Some("3"), Some("2"))
    );
    assert!(a.cli(&["get", "devices"]).contains("Connected"));
    let metrics = a.get("/metrics").unwrap();
    assert!(
        metrics.contains("kubelet_device_plugin_registration_total{resource_name=\"example.com/dev\"} 1"),
        "{metrics}"
    );
}

#[test]
fn malicious_registrations_are_refused_and_change_nothing() {
    let sb = Sandbox::new();
    let a = agent(&sb, "dial_timeout = \"1s\"\nmax_devices_per_resource = 1000\n");
    let dir = sb.plugin_dir();
    assert_eq!(
        register_raw(&dir, "v1alpha", "dev.sock", RES).unwrap_err(),
        "requested API version \"v1alpha\" is not supported by kubelet. Supported version is [\"v1beta1\"]"
    );
    assert_eq!(register_raw(&dir, "v1beta1", "dev.sock", "dev").unwrap_err(), "the ResourceName \"dev\" is invalid");
    assert_eq!(
        register_raw(&dir, "v1beta1", "dev.sock", "kubernetes.io/dev").unwrap_err(),
        "the ResourceName \"kubernetes.io/dev\" is invalid"
    );
    for endpoint in ["../x.sock", "/tmp/x.sock", "sub/x.sock"] {
        let e = register_raw(&dir, "v1beta1", endpoint, RES).unwrap_err();
        assert!(e.starts_with(&format!("the endpoint {endpoint:?} is invalid")), "{e}");
    }
    let e = register_raw(&dir, "v1beta1", "nobody-here.sock", RES).unwrap_err();
    assert!(e.starts_with("failed to dial device plugin:"), "{e}");
    assert!(devices(&a)["resources"].as_array().unwrap().is_empty());

    // 100 000 devices: the list is refused whole; a sane list afterwards is taken.
    let ids: Vec<String> = (0..100_000).map(|i| format!("dev{i}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let p = TestPlugin::start(&dir, RES, "many.sock", &refs, Behaviour::default());
    p.register().unwrap();
    wait_for("the refusal in the log", T, || {
        a.log_text()
            .contains("refusing a ListAndWatch update from the plugin for example.com/dev: 100000 devices listed")
            .then_some(())
    });
    assert_eq!(resource(&a), Some((0, 0, "Connected".into())));
    p.set_devices(&[("dev0", true), ("x".repeat(64).as_str(), true)]);
    wait_for("the long ID refused", T, || a.log_text().contains("longer than 63 characters").then_some(()));
    p.set_devices(&[("dev0", true)]);
    wait_resource(&a, (1, 1, "Connected"));
    assert_eq!(a.get("/healthz").unwrap(), "ok");
}

#[test]
fn a_pod_runs_with_its_devices_envs_preferred_allocation_and_pre_start() {
    let sb = Sandbox::new();
    let a = agent(&sb, "");
    let behaviour = Behaviour {
        pre_start_required: true,
        preferred: Some(vec!["dev3".into(), "dev1".into()]),
        ..Behaviour::default()
    };
    let p = TestPlugin::start(&sb.plugin_dir(), RES, "dev.sock", &["dev0", "dev1", "dev2", "dev3"], behaviour);
    p.register().unwrap();
    wait_resource(&a, (4, 4, "Connected"));
    let out = sb.work().join("env.txt");
    let devs = sb.work().join("dev.txt");
    let cmd = format!("ls /dev > {}; echo \"$EXAMPLE_DEVICES\" > {}; exec sleep 3600", devs.display(), out.display());
    let pod = device_pod("gpu", "        example.com/dev: 2\n", &cmd);
    sb.write_manifest("gpu.yaml", &common::sharing_dir(&pod, &sb.work()));
    wait_for("gpu Running", T, || phase(&a, "gpu").filter(|p| p.0 == "Running"));
    let written = wait_for("the env file", T, || std::fs::read_to_string(&out).ok().filter(|s| s.ends_with('\n')));
    assert_eq!(written.trim(), "dev3,dev1", "the env from Allocate, with the plugin's preferred devices in its order");
    // The allocated device nodes are in the container's own /dev, and no other of the plugin's.
    let listed = std::fs::read_to_string(&devs).unwrap();
    let mine: Vec<&str> = listed.lines().filter(|l| l.starts_with("example-")).collect();
    assert_eq!(mine, ["example-dev1", "example-dev3"], "{listed}");
    p.calls(|c| {
        assert_eq!(c.preferred.len(), 1);
        assert_eq!(c.preferred[0].0, ["dev0", "dev1", "dev2", "dev3"], "offered: every free healthy device");
        assert!(c.preferred[0].1.is_empty());
        assert_eq!(c.preferred[0].2, 2);
        assert_eq!(c.allocate, [vec!["dev3".to_string(), "dev1".to_string()]]);
        assert_eq!(c.pre_start.len(), 1);
        let mut ids = c.pre_start[0].clone();
        ids.sort();
        assert_eq!(ids, ["dev1", "dev3"]);
    });
    let pod = a.pod("gpu").unwrap();
    let cs = container(&pod, "app").unwrap();
    assert_eq!(cs.allocated_resources_status.len(), 1);
    assert_eq!(cs.allocated_resources_status[0].name, RES);
    assert_eq!(cs.allocated_resources_status[0].resources.len(), 2);
    // The device nodes are in the container's runtime record (what CRI CreateContainer gets).
    let id = cs.container_id.trim_start_matches("process://");
    let config = std::fs::read_to_string(sb.state().join(format!("runtime/containers/{id}/config.json"))).unwrap();
    let config: Value = serde_json::from_str(&config).unwrap();
    let specs = config["config"]["devices"]["devices"].as_array().unwrap();
    assert!(
        specs.iter().any(|d| d["containerPath"] == "/dev/example-dev3" && d["hostPath"] == "/dev/null"),
        "{config}"
    );
    let describe = a.cli(&["describe", "pod", "gpu-testnode"]);
    assert!(describe.contains("Devices:       example.com/dev: dev1 (Healthy), dev3 (Healthy)"), "{describe}");
    let v = devices(&a);
    assert_eq!(v["resources"][0]["allocated"], 2);
    assert_eq!(v["allocations"][0]["allocResp"]["envs"]["EXAMPLE_DEVICES"], "dev3,dev1");
    let metrics = a.get("/metrics").unwrap();
    assert!(
        metrics.contains("kubelet_device_plugin_alloc_duration_seconds_count{resource_name=\"example.com/dev\"} 1"),
        "{metrics}"
    );

    // Removing the pod frees its devices and updates the checkpoint.
    std::fs::remove_file(sb.manifests().join("gpu.yaml")).unwrap();
    wait_for("the devices freed", T, || (devices(&a)["resources"][0]["allocated"] == 0).then_some(()));
    let cp = std::fs::read_to_string(sb.plugin_dir().join("ferrolet_internal_checkpoint")).unwrap();
    assert!(cp.contains("\"podDeviceEntries\":[]"), "{cp}");
}

#[test]
fn init_container_devices_are_reused_by_the_app_container() {
    let sb = Sandbox::new();
    let a = agent(&sb, "");
    let p = TestPlugin::start(&sb.plugin_dir(), RES, "dev.sock", &["only"], Behaviour::default());
    p.register().unwrap();
    wait_resource(&a, (1, 1, "Connected"));
    let limits = "      limits:\n        example.com/dev: 1\n";
    let spec = format!(
        "  initContainers:\n  - name: setup\n    image: busybox\n    command: [\"true\"]\n    resources:\n{limits}  containers:\n  - name: app\n    image: busybox\n    command: [\"sleep\", \"3600\"]\n    resources:\n{limits}"
    );
    sb.write_manifest("reuse.yaml", &manifest("reuse", &spec));
    wait_for("reuse Running", T, || phase(&a, "reuse").filter(|p| p.0 == "Running"));
    p.calls(|c| assert_eq!(c.allocate, [vec!["only".to_string()], vec!["only".to_string()]]));
}

#[test]
fn allocation_failures_reject_the_pod_and_spare_the_others() {
    let sb = Sandbox::new();
    let a = agent(&sb, "admission_wait = \"1s\"\nallocate_timeout = \"1s\"\n");
    let p = TestPlugin::start(&sb.plugin_dir(), RES, "dev.sock", &["dev0"], Behaviour::default());
    p.register().unwrap();
    let slow = TestPlugin::start(
        &sb.plugin_dir(),
        "example.com/slow",
        "slow.sock",
        &["s0"],
        Behaviour { allocate_hangs: true, ..Behaviour::default() },
    );
    slow.register().unwrap();
    wait_resource(&a, (1, 1, "Connected"));
    sb.write_manifest("big.yaml", &device_pod("big", "        example.com/dev: 2\n", "sleep 3600"));
    sb.write_manifest("hang.yaml", &device_pod("hang", "        example.com/slow: 1\n", "sleep 3600"));
    sb.write_manifest("ghost.yaml", &device_pod("ghost", "        example.com/ghost: 1\n", "sleep 3600"));
    sb.write_manifest(
        "plain.yaml",
        &manifest("plain", "  containers:\n  - name: app\n    image: busybox\n    command: [\"sleep\", \"3600\"]\n"),
    );
    let failed = |name: &str| wait_for(&format!("{name} Failed"), T, || phase(&a, name).filter(|p| p.0 == "Failed"));
    let (_, reason, message) = failed("big");
    assert_eq!(reason, "UnexpectedAdmissionError");
    assert_eq!(
        message,
        "Pod was rejected: Allocate failed due to requested number of devices unavailable for example.com/dev. Requested: 2, Available: 1, which is unexpected"
    );
    let (_, _, message) = failed("hang");
    assert!(
        message.contains("device plugin Allocate rpc failed for example.com/slow") && message.contains("Deadline"),
        "{message}"
    );
    let (_, _, message) = failed("ghost");
    assert_eq!(
        message,
        "Pod was rejected: Allocate failed due to cannot allocate unregistered device example.com/ghost, which is unexpected"
    );
    wait_for("plain Running", T, || phase(&a, "plain").filter(|p| p.0 == "Running"));
    let events = a.cli(&["get", "events", "--for", "pod/ghost-testnode"]);
    assert!(events.contains("WaitingForDevicePlugin") && events.contains("UnexpectedAdmissionError"), "{events}");
    assert!(devices(&a)["allocations"].as_array().unwrap().is_empty(), "failed pods hold nothing");
    assert_eq!(a.get("/healthz").unwrap(), "ok");
}

#[test]
fn a_dead_plugin_goes_unhealthy_then_leaves_after_the_grace_period() {
    let sb = Sandbox::new();
    let a = agent(&sb, "endpoint_grace_period = \"3s\"\n");
    let mut p = TestPlugin::start(&sb.plugin_dir(), RES, "dev.sock", &["dev0", "dev1"], Behaviour::default());
    p.register().unwrap();
    wait_resource(&a, (2, 2, "Connected"));
    p.stop(false);
    wait_resource(&a, (2, 0, "Stopped"));
    let node: Value = serde_json::from_str(&a.get("/node").unwrap()).unwrap();
    assert_eq!(node["status"]["allocatable"][RES], "0");
    wait_for("the resource to go", T, || resource(&a).is_none().then_some(()));
}

#[test]
fn a_restarted_plugin_is_reconnected_and_a_reregistration_replaces_cleanly() {
    let sb = Sandbox::new();
    let a = agent(&sb, "");
    let mut p = TestPlugin::start(&sb.plugin_dir(), RES, "dev.sock", &["dev0", "dev1"], Behaviour::default());
    p.register().unwrap();
    wait_resource(&a, (2, 2, "Connected"));
    // Crash and come back on the same socket without registering again (kubelet would
    // leave the resource at 0 until a registration).
    p.stop(true);
    p.restart();
    wait_for("the agent to reconnect", T, || {
        a.log_text().contains("reconnected to the plugin for example.com/dev").then_some(())
    });
    wait_resource(&a, (2, 2, "Connected"));
    assert_eq!(p.calls(|c| c.list_and_watch), 2);

    // A second instance registers on another socket; the first one's stream ending later
    // must not disconnect it.
    let q = TestPlugin::start(&sb.plugin_dir(), RES, "dev2.sock", &["a", "b", "c"], Behaviour::default());
    q.register().unwrap();
    wait_resource(&a, (3, 3, "Connected"));
    p.stop(false);
    a.wait_metric_growth(DEVICE_TICKS, 2);
    assert_eq!(resource(&a), Some((3, 3, "Connected".into())));
    q.set_devices(&[("a", true), ("b", false), ("c", true)]);
    wait_resource(&a, (3, 2, "Connected"));
}

#[test]
fn after_an_agent_restart_allocations_come_back_and_new_pods_wait_for_the_plugin() {
    let sb = Sandbox::new();
    let a = agent(&sb, "");
    let p = TestPlugin::start(&sb.plugin_dir(), RES, "dev.sock", &["dev0", "dev1"], Behaviour::default());
    p.register().unwrap();
    wait_resource(&a, (2, 2, "Connected"));
    sb.write_manifest("first.yaml", &device_pod("first", "        example.com/dev: 1\n", "sleep 3600"));
    wait_for("first Running", T, || phase(&a, "first").filter(|p| p.0 == "Running"));
    let held = devices(&a)["allocations"][0]["deviceIDs"].clone();
    a.kill9();

    let a = agent(&sb, "");
    assert!(!p.socket.exists(), "the agent removes stale plugin sockets so plugins register again");
    assert_eq!(resource(&a), Some((0, 0, "Stopped".into())), "known from the checkpoint, waiting for its plugin");
    // A new pod asking for the resource waits instead of failing (kubelet fails it).
    sb.write_manifest("second.yaml", &device_pod("second", "        example.com/dev: 1\n", "sleep 3600"));
    wait_for("second to wait", T, || {
        a.log_text().contains("message=\"Waiting up to 2m0s for the device plugins").then_some(())
    });
    assert_eq!(phase(&a, "second").unwrap().0, "Pending");
    assert_eq!(phase(&a, "first").unwrap().0, "Running");

    // The plugin sees its socket gone, comes back and registers again.
    let p = TestPlugin::start(&sb.plugin_dir(), RES, "dev.sock", &["dev0", "dev1"], Behaviour::default());
    p.register().unwrap();
    wait_for("second Running", T, || phase(&a, "second").filter(|p| p.0 == "Running"));
    let v = devices(&a);
    let allocs = v["allocations"].as_array().unwrap();
    assert_eq!(allocs.len(), 2);
    let first_uid = a.pod("first").unwrap().metadata.uid;
    let first = allocs.iter().find(|e| e["podUID"] == first_uid.as_str()).unwrap();
    assert_eq!(first["deviceIDs"], held, "the running pod keeps its devices");
    let second = allocs.iter().find(|e| e["podUID"] != first_uid.as_str()).unwrap();
    assert_ne!(second["deviceIDs"], held, "the new pod gets the other device");
    p.calls(|c| assert_eq!(c.allocate.len(), 1, "only the new pod is allocated"));
}

#[test]
fn a_corrupt_checkpoint_is_moved_aside_and_the_agent_starts_empty() {
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.plugin_dir()).unwrap();
    let cp = sb.plugin_dir().join("ferrolet_internal_checkpoint");
    std::fs::write(
        &cp,
        "{\"version\":1,\"checksum\":\"fnv1a64:0\",\"data\":{\"podDeviceEntries\":[],\"registeredDevices\":{}}}",
    )
    .unwrap();
    let a = agent(&sb, "");
    assert_eq!(a.get("/healthz").unwrap(), "ok");
    assert!(a.log_text().contains("continuing without the checkpoint"), "{}", a.log_text());
    assert!(sb.plugin_dir().join("ferrolet_internal_checkpoint.corrupt").exists());
    assert!(devices(&a)["resources"].as_array().unwrap().is_empty());
    let p = TestPlugin::start(&sb.plugin_dir(), RES, "dev.sock", &["dev0"], Behaviour::default());
    p.register().unwrap();
    wait_resource(&a, (1, 1, "Connected"));
    assert!(cp.exists(), "a fresh checkpoint is written");
}

#[test]
fn a_restarted_container_keeps_its_devices_and_a_missing_device_node_stops_the_start() {
    let sb = Sandbox::new();
    let a = agent(&sb, "");
    let p = TestPlugin::start(
        &sb.plugin_dir(),
        RES,
        "dev.sock",
        &["dev0", "dev1"],
        Behaviour { pre_start_required: true, ..Behaviour::default() },
    );
    p.register().unwrap();
    let bad = TestPlugin::start(
        &sb.plugin_dir(),
        "example.com/bad",
        "bad.sock",
        &["b0"],
        Behaviour { device_host_path: Some("/dev/ferrolet-no-such-device".into()), ..Behaviour::default() },
    );
    bad.register().unwrap();
    wait_resource(&a, (2, 2, "Connected"));
    sb.write_manifest("crash.yaml", &device_pod("crash", "        example.com/dev: 1\n", "exit 1"));
    wait_for("a restart", T, || {
        let p = a.pod("crash")?;
        container(&p, "app").filter(|c| c.restart_count >= 1).map(|_| ())
    });
    p.calls(|c| {
        assert_eq!(c.allocate.len(), 1, "a restart reuses the container's devices");
        assert!(c.pre_start.len() >= 2, "PreStartContainer before every start: {:?}", c.pre_start);
        assert!(c.pre_start.iter().all(|ids| ids == &c.allocate[0]));
    });

    sb.write_manifest("nodev.yaml", &device_pod("nodev", "        example.com/bad: 1\n", "sleep 3600"));
    let waiting = wait_for("CreateContainerError", T, || {
        let p = a.pod("nodev")?;
        container(&p, "app")?.state.waiting.clone().filter(|w| w.reason == "CreateContainerError")
    });
    assert_eq!(
        waiting.message,
        "device path /dev/ferrolet-no-such-device from the device plugin allocation does not exist on the host"
    );
}

#[test]
fn a_running_pod_whose_checkpoint_was_lost_keeps_running() {
    let sb = Sandbox::new();
    let a = agent(&sb, "admission_wait = \"1s\"\n");
    let mut p = TestPlugin::start(&sb.plugin_dir(), RES, "dev.sock", &["dev0"], Behaviour::default());
    p.register().unwrap();
    wait_resource(&a, (1, 1, "Connected"));
    sb.write_manifest("keep.yaml", &device_pod("keep", "        example.com/dev: 1\n", "sleep 3600"));
    wait_for("keep Running", T, || phase(&a, "keep").filter(|p| p.0 == "Running"));
    a.kill9();
    p.stop(false);
    std::fs::remove_file(sb.plugin_dir().join("ferrolet_internal_checkpoint")).unwrap();
    let a = agent(&sb, "admission_wait = \"1s\"\n");
    wait_for("the admission decision", T, || {
        a.log_text().contains("already runs; admitting it without its device allocation").then_some(())
    });
    a.wait_syncs(3);
    assert_eq!(phase(&a, "keep").unwrap().0, "Running");
    assert_eq!(container(&a.pod("keep").unwrap(), "app").unwrap().restart_count, 0);
}

/// Threads of a process, from /proc/<pid>/task: (all, named `name`).
fn threads(pid: u32, name: &str) -> (usize, usize) {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return (0, 0) };
    let comms: Vec<String> =
        tasks.flatten().filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok()).collect();
    (comms.len(), comms.iter().filter(|c| c.trim() == name).count())
}

#[test]
fn concurrent_registrations_are_dialled_a_few_at_a_time_and_the_rest_refused_at_once() {
    use ferrolet::node::devicemanager::registration::MAX_CONCURRENT_DIALS;
    use ferrolet::proto::deviceplugin as pb;
    let sb = Sandbox::new();
    let a = agent(&sb, "dial_timeout = \"3s\"\n");
    let dir = sb.plugin_dir();
    // A socket that accepts connections and never speaks gRPC: each dial waits its timeout.
    let _silent = std::os::unix::net::UnixListener::bind(dir.join("silent.sock")).unwrap();
    let pid = a.child.id();
    let (before, _) = threads(pid, "fl-plugin");
    let env = std::sync::Arc::new(grpcio::EnvBuilder::new().cq_count(1).build());
    let ch = grpcio::ChannelBuilder::new(env).connect(&format!("unix:{}", dir.join("kubelet.sock").display()));
    let client = pb::RegistrationClient::new(ch);
    let calls: Vec<_> = (0..300)
        .map(|i| {
            let mut req = pb::RegisterRequest::new();
            req.set_version("v1beta1".into());
            req.set_endpoint("silent.sock".into());
            req.set_resource_name(format!("example.com/r{}", i % 50));
            let opt = grpcio::CallOption::default().timeout(Duration::from_secs(20)).wait_for_ready(true);
            client.register_async_opt(&req, opt).unwrap()
        })
        .collect();
    let (mut most, mut most_dialling) = (before, 0);
    for _ in 0..20 {
        let (all, dialling) = threads(pid, "fl-plugin");
        (most, most_dialling) = (most.max(all), most_dialling.max(dialling));
        std::thread::sleep(Duration::from_millis(50));
    }
    let (mut exhausted, mut other) = (0, Vec::new());
    for c in calls {
        match futures::executor::block_on(c) {
            Err(grpcio::Error::RpcFailure(s)) if s.code() == grpcio::RpcStatusCode::RESOURCE_EXHAUSTED => {
                assert!(s.message().starts_with("too many device plugin registrations in progress (at most 8"));
                exhausted += 1
            }
            r => other.push(format!("{r:?}")),
        }
    }
    eprintln!("threads: {before} before, at most {most} ({most_dialling} dialling) with 300 registrations in flight; {exhausted} refused at once");
    assert!(most_dialling <= MAX_CONCURRENT_DIALS, "{most_dialling} dialling threads");
    assert!(most <= before + MAX_CONCURRENT_DIALS + 4, "{most} threads (from {before})");
    assert!(exhausted >= 300 - MAX_CONCURRENT_DIALS * 3, "{exhausted} refused; others: {other:?}");
    assert!(other.iter().all(|o| o.contains("failed to dial device plugin")), "{other:?}");
    assert_eq!(a.get("/healthz").unwrap(), "ok");
    wait_for("the dial threads to end", T, || (threads(pid, "fl-plugin").1 == 0).then_some(()));
}

#[test]
fn a_symlink_in_the_plugin_dir_is_never_dialled() {
    let sb = Sandbox::new();
    let a = agent(&sb, "dial_timeout = \"2s\"\n");
    // A real plugin outside the plugin directory, and a link to it inside.
    let outside = sb.dir.path().join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    let p = TestPlugin::start(&outside, RES, "real.sock", &["dev0"], Behaviour::default());
    std::os::unix::fs::symlink(&p.socket, sb.plugin_dir().join("link.sock")).unwrap();
    let e = common::plugin::register_raw(&sb.plugin_dir(), "v1beta1", "link.sock", RES).unwrap_err();
    assert!(e.starts_with("failed to dial device plugin: "), "{e}");
    assert!(
        e.ends_with("link.sock is a symbolic link; a plugin must create its socket in the plugin directory itself"),
        "{e}"
    );
    assert_eq!(p.calls(|c| c.list_and_watch), 0, "the plugin behind the link was never asked");
    assert!(devices(&a)["resources"].as_array().unwrap().is_empty());
}
