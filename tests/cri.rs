//! The CRI client against a real containerd, started on private paths by `tests/cri/up.sh`
//! (`make test` runs it and passes `FERROLET_CRI_ENDPOINT`). Without it, each test skips
//! with the reason.

use crate::common;

use common::cri::{remove_cgroup, TestPod};
use ferrolet::base::manager::Health;
use ferrolet::node::cm::LinuxContainerConfig;
use ferrolet::node::prober::probes::{self, Outcome, Target};
use ferrolet::node::runtime::cri::{CriClient, CriRuntime};
use ferrolet::node::runtime::{labels, ContainerConfig, ContainerRuntime, ContainerState, SandboxConfig};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The harness's containerd, or `None` (and the test skips).
fn endpoint() -> Option<String> {
    match std::env::var("FERROLET_CRI_ENDPOINT") {
        Ok(e) if !e.is_empty() => Some(e),
        _ => {
            common::skip(
                "FERROLET_CRI_ENDPOINT is not set: no test containerd (make test starts one with tests/cri/up.sh)",
            );
            None
        }
    }
}

fn env() -> Arc<grpcio::Environment> {
    Arc::new(grpcio::EnvBuilder::new().cq_count(1).build())
}

#[test]
fn the_start_up_check_sees_a_ready_containerd_speaking_cri_v1() {
    let Some(endpoint) = endpoint() else { return };
    let client = CriClient::connect(&endpoint, Duration::from_secs(10), env()).unwrap();
    let (version, _network) = client.check().unwrap();
    assert_eq!(version.runtime_name(), "containerd");
    assert_eq!(version.runtime_api_version(), "v1");
    assert!(!version.runtime_version().is_empty());
}

#[test]
fn a_socket_nobody_serves_is_an_error_naming_the_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dead.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    drop(listener); // the socket file stays, nobody accepts
    let endpoint = format!("unix://{}", path.display());
    let e = CriClient::connect(&endpoint, Duration::from_millis(300), env()).err().unwrap();
    assert_eq!(e.to_string(), format!("container runtime endpoint {endpoint}: no connection within 300ms"));
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set (tests/cri/up.sh writes it with the endpoint)"))
}

/// The node name the tests' runtimes make their objects for.
const NODE: &str = "cri-test";

fn runtime(endpoint: &str) -> CriRuntime {
    let client = CriClient::connect(endpoint, Duration::from_secs(10), env()).unwrap();
    CriRuntime::new(client, &var("FERROLET_CRI_PAUSE_IMAGE"), NODE, &Health::default())
}

#[test]
fn a_host_network_pod_runs_a_container_that_execs_and_stop_and_remove_leave_nothing() {
    let Some(endpoint) = endpoint() else { return };
    let rt = Arc::new(runtime(&endpoint));
    let pod = TestPod::run(&rt, "sleeper");
    let sandbox = rt.list_pod_sandboxes().unwrap().into_iter().find(|s| s.id == pod.id).expect("sandbox listed");
    assert!(sandbox.ready);
    assert_eq!(sandbox.config.pod_uid, pod.sandbox.pod_uid);
    assert!(sandbox.config.host_network);

    let id = pod.container("app", &["sleep", "1000"]);
    let running = pod.wait_state(&id, ContainerState::Running);
    assert_eq!(running.sandbox_id, pod.id);
    assert_eq!(running.config.name, "app");
    assert_eq!(running.config.labels[labels::POD_UID], pod.sandbox.pod_uid);
    assert!(running.started_at.is_some());

    let hi = rt.exec_sync(&id, &["echo".into(), "hi".into()], Duration::from_secs(5)).unwrap();
    assert_eq!((hi.exit_code, hi.stdout.as_slice(), hi.timed_out), (0, &b"hi\n"[..], false));
    let three = rt.exec_sync(&id, &["sh".into(), "-c".into(), "echo no >&2; exit 3".into()], Duration::from_secs(5));
    let three = three.unwrap();
    assert_eq!((three.exit_code, three.stderr.as_slice()), (3, &b"no\n"[..]));
    let slow = rt.exec_sync(&id, &["sleep".into(), "10".into()], Duration::from_secs(1)).unwrap();
    assert!(slow.timed_out, "{slow:?}");
    assert_eq!(slow.exit_code, -1);
    // An exec probe through the prober's path gets its own timeout from the runtime.
    let runtime: Arc<dyn ContainerRuntime> = rt.clone();
    let target = Target { pod_ip: String::new(), container: Arc::default(), container_id: id.clone() };
    let sleep = ["sleep".to_string(), "10".to_string()];
    let outcome = probes::exec(&sleep, &target, &runtime, Duration::from_secs(1));
    assert_eq!(outcome, Outcome::Failure("command \"sleep 10\" timed out".into()));
    let ok = probes::exec(&["true".to_string()], &target, &runtime, Duration::from_secs(5));
    assert_eq!(ok, Outcome::Success(String::new()));

    // `sleep` is PID 1 of its own PID namespace and ignores SIGTERM: the stop takes the
    // whole grace period, and stop_container must not wait for it.
    rt.stop_container(&id, Duration::from_secs(2)).unwrap();
    assert_eq!(rt.stops_in_flight(), 1, "stop_container returned with its stop still in flight");
    // Asked again with no shorter grace period: the stop in flight stands.
    rt.stop_container(&id, Duration::from_secs(2)).unwrap();
    assert_eq!(rt.stops_in_flight(), 1);
    let exited = pod.wait_state(&id, ContainerState::Exited);
    assert_eq!(exited.exit_code, 137);
    assert!(exited.finished_at.is_some());
    rt.remove_container(&id).unwrap();
    assert!(rt.list_containers().unwrap().iter().all(|c| c.id != id));

    rt.stop_pod_sandbox(&pod.id).unwrap();
    assert!(!rt.list_pod_sandboxes().unwrap().into_iter().find(|s| s.id == pod.id).unwrap().ready);
    rt.remove_pod_sandbox(&pod.id).unwrap();
    assert!(rt.list_pod_sandboxes().unwrap().iter().all(|s| s.id != pod.id));
    assert!(rt.list_containers().unwrap().iter().all(|c| c.sandbox_id != pod.id));
    assert_eq!(rt.stops_in_flight(), 0);
}

/// More stops than threads: the rest wait for a thread, none is refused or forgotten (40
/// containers that ignore SIGTERM, each stop taking its whole 1 s grace period).
#[test]
fn forty_container_stops_at_once_are_all_carried_out_32_at_a_time() {
    let Some(endpoint) = endpoint() else { return };
    let rt = runtime(&endpoint);
    let pod = TestPod::run(&rt, "many");
    let ids: Vec<String> = (0..40).map(|i| pod.container(&format!("c{i}"), &["sleep", "1000"])).collect();
    for id in &ids {
        pod.wait_state(id, ContainerState::Running);
    }
    for id in &ids {
        rt.stop_container(id, Duration::from_secs(1)).unwrap();
    }
    assert_eq!(rt.stops_in_flight(), 40, "every stop is in flight or waiting");
    common::wait_for("all 40 exited", Duration::from_secs(60), || {
        let list = rt.list_containers().unwrap();
        ids.iter().all(|id| list.iter().any(|c| &c.id == id && c.state == ContainerState::Exited)).then_some(())
    });
    common::wait_for("no stop left", Duration::from_secs(20), || (rt.stops_in_flight() == 0).then_some(()));
}

#[test]
fn a_container_that_exits_3_is_reported_with_exit_code_3() {
    let Some(endpoint) = endpoint() else { return };
    let rt = runtime(&endpoint);
    let pod = TestPod::run(&rt, "exits");
    let id = pod.container("fail", &["sh", "-c", "echo bye; exit 3"]);
    let exited = pod.wait_state(&id, ContainerState::Exited);
    assert_eq!((exited.exit_code, exited.reason.as_str()), (3, "Error"));
    // The CRI log file is where the ContainerConfig put it.
    let log = std::fs::read_to_string(pod.sandbox.log_directory.join("fail/0.log")).unwrap();
    assert!(log.trim_end().ends_with(" stdout F bye"), "{log:?}");
    assert!(exited.started_at.is_some() && exited.finished_at.is_some());
    // A second look is the same (kept, not asked again).
    let again = rt.list_containers().unwrap().into_iter().find(|c| c.id == id).unwrap();
    assert_eq!(again, exited);
}

#[test]
fn a_missing_container_is_not_found_and_a_missing_image_is_named() {
    let Some(endpoint) = endpoint() else { return };
    let rt = runtime(&endpoint);
    let e = rt.start_container("0123456789abcdef").unwrap_err();
    assert_eq!(e.to_string(), "container 0123456789abcdef not found");
    let pod = TestPod::run(&rt, "noimage");
    let config = ContainerConfig {
        name: "app".into(),
        image: "localhost/ferrolet-no-such-image:1".into(),
        argv: vec!["true".into()],
        log_path: pod.sandbox.log_directory.join("app/0.log"),
        ..Default::default()
    };
    let e = rt.create_container(&pod.id, &config).unwrap_err();
    let text = ferrolet::base::errors::Chain(&e).to_string();
    assert!(
        text.starts_with(&format!("container app (image localhost/ferrolet-no-such-image:1) in sandbox {}: ", pod.id)),
        "{text}"
    );
    assert!(text.contains("CreateContainer"), "{text}");
}

#[test]
fn the_container_cgroup_gets_its_values_under_the_pod_cgroup() {
    let Some(endpoint) = endpoint() else { return };
    if !std::path::Path::new("/sys/fs/cgroup/memory/cgroup.procs").exists() {
        common::skip("no cgroup v1 memory controller at /sys/fs/cgroup/memory: the check reads v1 files");
        return;
    }
    let rt = runtime(&endpoint);
    let pod = TestPod::run(&rt, "limited");
    let linux = LinuxContainerConfig {
        cgroup_parent: pod.sandbox.cgroup_parent.clone(),
        files: BTreeMap::from([
            ("cpu.shares".to_string(), "512".to_string()),
            ("cpu.cfs_period_us".into(), "100000".into()),
            ("cpu.cfs_quota_us".into(), "50000".into()),
            ("memory.limit_in_bytes".into(), "67108864".into()),
        ]),
        oom_score_adj: 750,
    };
    let id = pod.start(&ContainerConfig { linux: Some(linux), ..pod.config("app", 0, &["sleep", "1000"]) });
    pod.wait_state(&id, ContainerState::Running);
    let read = |controller: &str, file: &str| {
        let path = format!("/sys/fs/cgroup/{controller}{}/{id}/{file}", pod.sandbox.cgroup_parent);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}")).trim().to_string()
    };
    assert_eq!(read("memory", "memory.limit_in_bytes"), "67108864");
    assert_eq!(read("cpu", "cpu.shares"), "512");
    assert_eq!(read("cpu", "cpu.cfs_quota_us"), "50000");
    let pid = read("memory", "cgroup.procs").lines().next().unwrap_or_default().to_string();
    let oom = std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).unwrap();
    assert_eq!(oom.trim(), "750", "the container's process {pid} gets the Burstable score");
}

#[test]
fn sandboxes_and_containers_ferrolet_did_not_make_are_not_listed() {
    let Some(endpoint) = endpoint() else { return };
    let rt = runtime(&endpoint);
    let client = CriClient::connect(&endpoint, Duration::from_secs(10), env()).unwrap();
    // Someone else's pod in the same containerd (no ferrolet label), and the pod of another
    // node's ferrolet sharing it.
    let foreign = |name: &str, owner: Option<&str>| {
        let owner = owner.map(ferrolet::node::runtime::cri::translate::owner_labels).unwrap_or_default();
        let cfg = ferrolet::node::runtime::cri::translate::sandbox_config(
            &SandboxConfig {
                pod_uid: ferrolet::base::random::random_id(),
                pod_name: name.into(),
                namespace: "other".into(),
                host_network: true,
                cgroup_parent: format!("{}/pod{name}", var("FERROLET_CRI_CGROUP")),
                log_directory: std::env::temp_dir(),
                ..Default::default()
            },
            &owner,
        )
        .unwrap();
        assert_eq!(cfg.labels().contains_key(labels::MANAGED_BY), !owner.is_empty());
        let mut req = ferrolet::proto::cri::RunPodSandboxRequest::new();
        req.set_config(cfg);
        client.run_pod_sandbox(&req).unwrap()
    };
    let theirs = [foreign("not-ours", None), foreign("other-node", Some("other-node"))];
    let ours = TestPod::run(&rt, "ours");
    let listed: Vec<String> = rt.list_pod_sandboxes().unwrap().into_iter().map(|s| s.id).collect();
    for id in &theirs {
        let _ = client.stop_pod_sandbox(id);
        let _ = client.remove_pod_sandbox(id);
    }
    remove_cgroup(&format!("{}/podnot-ours", var("FERROLET_CRI_CGROUP")));
    remove_cgroup(&format!("{}/podother-node", var("FERROLET_CRI_CGROUP")));
    assert!(listed.contains(&ours.id));
    assert!(!listed.contains(&theirs[0]) && !listed.contains(&theirs[1]), "{listed:?}");
}
