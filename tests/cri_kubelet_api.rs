//! kubelet's API on a CRI node: `kubectl logs`, `exec` (exit code, stdin, a terminal),
//! `attach`, `port-forward` and `cp` through the fake kube-apiserver, the node proxying
//! exec, attach and port-forward to containerd's streaming server byte for byte, as kubelet
//! does. Without containerd (tests/cri) or the test venv each test skips.

use crate::common;
use crate::kubelet_api::{ok_or_log, text, TTY_DRIVER};

use common::apiserver::FakeApiserver;
use common::cri::{busybox, CriNode};
use common::{wait_for, AgentProcess};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

struct Node {
    api: FakeApiserver,
    agent: AgentProcess,
    node: CriNode,
}

impl Node {
    fn start() -> Option<Node> {
        let node = CriNode::new()?;
        let api = FakeApiserver::start(&node.node)?;
        let kubeconfig = api.node_kubeconfig();
        let agent = node.start_with(|text| format!("{text}[apiserver]\nkubeconfig = {kubeconfig:?}\n"), "debug");
        Some(Node { api, agent, node })
    }

    /// A busybox pod on the host network running `script`, running; `extra` merged into its
    /// container.
    fn run(&self, name: &str, script: &str, extra: Value) -> String {
        let mut container =
            json!({"name": "c", "image": busybox(), "imagePullPolicy": "Never", "command": ["sh", "-c", script]});
        for (k, v) in extra.as_object().unwrap() {
            container[k] = v.clone();
        }
        let pod = json!({"metadata": {"name": name},
            "spec": {"nodeName": self.node.node, "hostNetwork": true, "terminationGracePeriodSeconds": 1,
                     "containers": [container]}});
        self.api.create_pod("default", &pod);
        wait_for(&format!("{name} running"), WAIT, || {
            self.api.pod("default", name).filter(|p| p["status"]["phase"] == "Running").map(|_| ())
        });
        name.to_string()
    }

    fn kubectl(&self, args: &[&str]) -> Output {
        self.api.kubectl_output(args)
    }

    fn ok(&self, out: Output, what: &str) -> String {
        ok_or_log(&self.agent, out, what)
    }
}

#[test]
fn kubectl_logs_exec_and_cp_on_containerd() {
    let Some(n) = Node::start() else { return };
    let pod = n.run("box", "echo first; echo second; sleep 3600", json!({}));
    let logs = wait_for("two lines", WAIT, || {
        let t = String::from_utf8(n.kubectl(&["logs", &pod]).stdout).ok()?;
        (t.lines().count() == 2).then_some(t)
    });
    assert_eq!(logs, "first\nsecond\n");
    assert_eq!(n.ok(n.kubectl(&["logs", &pod, "--tail=1"]), "--tail"), "second\n");
    assert_eq!(n.ok(n.kubectl(&["exec", &pod, "--", "echo", "hi"]), "exec"), "hi\n");
    // Output larger than every buffer on the way arrives whole (the proxy once lost its end).
    let big = n.ok(n.kubectl(&["exec", &pod, "--", "head", "-c", "20000000", "/dev/zero"]), "exec of 20 MB");
    assert_eq!(big.len(), 20_000_000);
    let failed = n.kubectl(&["exec", &pod, "--", "sh", "-c", "exit 3"]);
    assert_eq!(failed.status.code(), Some(3), "{}", text(&failed));
    let cat =
        n.api.kubectl_with(&n.api.admin_kubeconfig(), &["exec", "-i", &pod, "--", "cat"], &[], Some(b"in and out\n"));
    assert_eq!(n.ok(cat, "exec -i"), "in and out\n");

    let blob: Vec<u8> = (0..5_000_000u32).map(|i| (i.wrapping_mul(2246822519) >> 11) as u8).collect();
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("blob");
    std::fs::write(&local, &blob).unwrap();
    n.ok(n.kubectl(&["cp", local.to_str().unwrap(), &format!("default/{pod}:/tmp/blob")]), "cp in");
    let size = n.ok(n.kubectl(&["exec", &pod, "--", "sh", "-c", "wc -c < /tmp/blob"]), "size");
    assert_eq!(size.trim(), "5000000");
    let back = dir.path().join("back");
    n.ok(n.kubectl(&["cp", &format!("default/{pod}:/tmp/blob"), back.to_str().unwrap()]), "cp out");
    assert!(std::fs::read(&back).unwrap() == blob, "the file copied out differs");
}

#[test]
fn kubectl_exec_with_a_terminal_and_attach_on_containerd() {
    let Some(n) = Node::start() else { return };
    let pod = n.run("term", "sleep 3600", json!({}));
    let venv = common::apiserver::venv().unwrap();
    let out = Command::new(venv.join("bin/python"))
        .arg("-c")
        .arg(TTY_DRIVER)
        .arg(venv.join("bin/kubectl"))
        .arg("--kubeconfig")
        .arg(n.api.admin_kubeconfig())
        .args(["exec", "-it", &pod, "--", "sh"])
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    assert!(text(&out).contains("EXIT 5"), "{}", text(&out));

    // A container started with stdin and a terminal: attach, type, and read it back.
    let pod = n.run("console", "while read line; do echo got $line; done", json!({"stdin": true, "tty": true}));
    let mut attach = Command::new(venv.join("bin/kubectl"))
        .arg("--kubeconfig")
        .arg(n.api.admin_kubeconfig())
        .args(["attach", "-i", &pod])
        .env_remove("KUBECONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = attach.stdin.take().unwrap();
    let mut stdout = attach.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 256];
        while !String::from_utf8_lossy(&seen).contains("got hello") {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => seen.extend_from_slice(&buf[..k]),
            }
        }
        String::from_utf8_lossy(&seen).to_string()
    });
    for _ in 0..20 {
        if reader.is_finished() {
            break;
        }
        let _ = stdin.write_all(b"hello\n");
        std::thread::sleep(Duration::from_millis(500));
    }
    let _ = attach.kill();
    let _ = attach.wait();
    let seen = reader.join().unwrap();
    assert!(seen.contains("got hello"), "{seen}");
}

#[test]
fn kubectl_port_forward_on_containerd() {
    let Some(n) = Node::start() else { return };
    let port = common::free_port();
    let pod = n.run(
        "web",
        &format!("mkdir -p /www && echo served > /www/index.html && exec httpd -f -p 127.0.0.1:{port} -h /www"),
        json!({}),
    );
    let local = common::free_port();
    let mut pf = Command::new(common::apiserver::venv().unwrap().join("bin/kubectl"))
        .arg("--kubeconfig")
        .arg(n.api.admin_kubeconfig())
        .args(["port-forward", &format!("pod/{pod}"), &format!("{local}:{port}")])
        .env_remove("KUBECONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let answer = wait_for("an answer through port-forward", WAIT, || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", local)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        s.write_all(b"GET /index.html HTTP/1.0\r\n\r\n").ok()?;
        let mut answer = String::new();
        s.read_to_string(&mut answer).ok()?;
        answer.contains("200").then_some(answer)
    });
    assert!(answer.ends_with("served\n"), "{answer}");
    let _ = pf.kill();
    let _ = pf.wait();
}

/// `kubectl logs` on containerd's log files: `--timestamps`, `--since`, `-f` to the
/// container's end, and `--previous` after a restart.
#[test]
fn kubectl_logs_follow_and_previous_on_containerd() {
    let Some(n) = Node::start() else { return };
    let pod = n.run("stamper", "echo one; echo two; sleep 3600", json!({}));
    wait_for("two lines", WAIT, || {
        (String::from_utf8(n.kubectl(&["logs", &pod]).stdout).ok()?.lines().count() == 2).then_some(())
    });
    let stamped = n.ok(n.kubectl(&["logs", &pod, "--timestamps", "--tail=1"]), "--timestamps");
    let (stamp, line) = stamped.trim_end().split_once(' ').unwrap();
    assert!(stamp.starts_with("20") && stamp.ends_with('Z'), "{stamped}");
    assert_eq!(line, "two");
    assert_eq!(n.ok(n.kubectl(&["logs", &pod, "--since=1h"]), "--since"), "one\ntwo\n");
    let pod = n.run("counter", "sleep 1; for i in 1 2 3; do echo tick $i; sleep 1; done", json!({}));
    assert_eq!(n.ok(n.kubectl(&["logs", "-f", &pod]), "logs -f"), "tick 1\ntick 2\ntick 3\n");
    let pod = n.run("restarter", "echo run $(cat /proc/sys/kernel/random/uuid); sleep 1; exit 1", json!({}));
    wait_for("a restart", WAIT, || {
        let p = n.api.pod("default", &pod)?;
        (p["status"]["containerStatuses"][0]["restartCount"].as_u64()? >= 1).then_some(())
    });
    let previous = n.ok(n.kubectl(&["logs", &pod, "--previous"]), "--previous");
    assert!(previous.starts_with("run "), "{previous}");
}
