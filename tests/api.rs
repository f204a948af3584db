//! The local API and the CLI that reads it.

use crate::common;

use common::{manifest, wait_for, AgentProcess, Sandbox};
use std::process::Command;
use std::time::Duration;

fn get(agent: &AgentProcess, args: &[&str]) -> String {
    agent.cli(&[&["get", "pods"], args].concat())
}

#[test]
fn get_pods_healthz_and_metrics_describe_the_running_pods() {
    let sb = Sandbox::new();
    sb.write_manifest(
        "web.yaml",
        &manifest("web", "  containers:\n  - name: app\n    image: x\n    command: [sleep, '60']\n  - name: helper\n    image: x\n    command: [sleep, '60']\n"),
    );
    let agent = AgentProcess::start(&sb);
    wait_for("running", Duration::from_secs(20), || {
        agent.pod("web").filter(|p| p.status.as_ref().unwrap().phase == "Running")
    });

    let table = get(&agent, &[]);
    let lines: Vec<&str> = table.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(&row[..4], ["web-testnode", "2/2", "Running", "0"]);

    let wide = get(&agent, &["-o", "wide"]);
    assert!(wide.lines().next().unwrap().contains("IP") && wide.contains("127.0.0.1") && wide.contains("testnode"));

    let json: serde_json::Value = serde_json::from_str(&get(&agent, &["-o", "json"])).unwrap();
    assert_eq!(json["kind"], "PodList");
    let pod = &json["items"][0];
    assert_eq!(pod["metadata"]["annotations"]["kubernetes.io/config.source"], "file");
    assert_eq!(pod["status"]["hostIP"], "127.0.0.1");
    assert_eq!(pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"].as_str().unwrap().len(), 20);
    let conditions: Vec<&str> =
        pod["status"]["conditions"].as_array().unwrap().iter().map(|c| c["type"].as_str().unwrap()).collect();
    assert_eq!(conditions, ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]);

    let yaml = get(&agent, &["-o", "yaml"]);
    assert!(yaml.contains("kind: PodList") && yaml.contains("name: web-testnode"), "{yaml}");

    assert_eq!(agent.get("/healthz").unwrap(), "ok");
    let metrics = agent.get("/metrics").unwrap();
    assert!(metrics.contains("ferrolet_pods{phase=\"Running\"} 1"), "{metrics}");
    assert!(metrics.contains("ferrolet_containers{state=\"running\"} 2"), "{metrics}");
    assert!(metrics.contains("process_resident_memory_bytes "), "{metrics}");
    assert!(agent.get("/nope").is_err(), "unknown paths are 404");
}

#[test]
fn verbose_healthz_names_every_long_lived_thread_and_they_all_stop_in_time() {
    let sb = Sandbox::new();
    let agent = AgentProcess::start(&sb);
    let body = agent.get("/healthz?verbose").unwrap();
    for thread in [
        "fl-podsource",
        "fl-podwatch",
        "fl-pods",
        "fl-prober",
        "fl-devices",
        "fl-events",
        "fl-evlog",
        "fl-evstore",
        "fl-api",
        "fl-api-work",
    ] {
        assert!(body.lines().any(|l| l == format!("[+]{thread} ok")), "{thread} missing:\n{body}");
    }
    assert!(body.ends_with("[+]manager-loops ok\nhealthz check passed\n"), "{body}");
    assert!(!body.contains("[-]"), "{body}");
    assert_eq!(agent.get("/healthz").unwrap(), "ok", "the plain answer is unchanged");
    let log = agent.log.clone();
    let status = agent.terminate();
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(status.success(), "every thread stopped in time: {status:?}\n{text}");
    assert!(!text.contains("did not stop"), "{text}");
}

#[test]
fn get_pods_without_an_agent_says_where_it_looked() {
    let port = common::free_port();
    let out = Command::new(common::ferrolet_bin())
        .args(["get", "pods", "--server", &format!("127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("cannot reach the ferrolet API at http://127.0.0.1:{port}/pods")), "{err}");
}

#[test]
fn get_node_shows_ready_and_pressure_conditions_and_describe_shows_the_qos_class() {
    let sb = Sandbox::new();
    sb.write_manifest(
        "web.yaml",
        &manifest("web", "  containers:\n  - name: app\n    image: x\n    command: [sleep, '60']\n"),
    );
    let agent = AgentProcess::start(&sb);
    wait_for("running", Duration::from_secs(20), || {
        agent.pod("web").filter(|p| p.status.as_ref().unwrap().phase == "Running")
    });
    let node: serde_json::Value = serde_json::from_str(&agent.cli(&["get", "node", "-o", "json"])).unwrap();
    let conditions: Vec<(&str, &str, &str)> = node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["type"].as_str().unwrap(), c["status"].as_str().unwrap(), c["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        conditions,
        [
            ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID"),
            ("Ready", "True", "KubeletReady"),
        ]
    );
    assert_eq!(node["status"]["conditions"][3]["message"], "kubelet is posting ready status");
    let table = agent.cli(&["get", "node"]);
    assert!(table.contains("STATUS: Ready\n"), "{table}");
    let ready: Vec<&str> = table.lines().find(|l| l.starts_with("Ready ")).unwrap().split_whitespace().collect();
    assert_eq!(&ready[..3], ["Ready", "True", "KubeletReady"], "{table}");

    let described = agent.cli(&["describe", "pod", "web"]);
    assert!(described.contains("\nQoS Class:        BestEffort\n"), "{described}");
}

#[test]
fn get_pods_into_a_closed_pipe_ends_quietly() {
    use std::io::{Read, Write};
    use std::os::unix::process::ExitStatusExt as _;
    // A one-shot API that answers /pods with one pod.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let server = std::thread::spawn(move || {
        // Never a bare accept: a CLI that fails before connecting must not hang the test.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut s = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(e) => panic!("no request from the CLI: {e}"),
            }
        };
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap() == 1 {
            head.push(byte[0]);
        }
        let body = r#"{"apiVersion":"v1","kind":"PodList","metadata":{},"items":[{"metadata":{"name":"web","namespace":"default"}}]}"#;
        let resp = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        s.write_all(resp.as_bytes()).unwrap();
    });
    let mut child = Command::new(common::ferrolet_bin())
        .args(["get", "pods", "--server", &addr.to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before the first byte, as `| head -0` would.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    server.join().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.status.success() || out.status.signal() == Some(libc::SIGPIPE), "{:?}: {err}", out.status);
}
