//! `ferrolet logs` and `ferrolet exec` (the built binary, `--runtime cri`) against the real
//! containerd of `tests/cri/up.sh`: the pod is made through `CriRuntime` as the agent makes
//! it, with its logs under a temporary directory. Without `FERROLET_CRI_ENDPOINT` the test
//! skips.

use crate::common;

use common::cri::TestPod;

use ferrolet::base::manager::Health;
use ferrolet::node::runtime::cri::{CriClient, CriRuntime};
use ferrolet::node::runtime::ContainerState;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The node the test's objects are made for (an agent lists only its node's).
const NODE: &str = "cri-logs-test";

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set (tests/cri/up.sh writes it with the endpoint)"))
}

/// Starts instance `attempt` of container `name` running `sh -c script`, with `GREETING`
/// in its environment.
fn sh(pod: &TestPod, name: &str, attempt: u32, script: &str) -> String {
    let mut config = pod.config(name, attempt, &["sh", "-c", script]);
    config.env = vec![("GREETING".into(), format!("hello from {name}"))];
    pod.start(&config)
}

/// `ferrolet ARGS` on the CRI runtime at `endpoint`, with a state directory of the test's
/// own (unused by CRI, but never the real one); `--` and what follows stay last.
fn ferrolet(endpoint: &str, state: &Path, args: &[&str]) -> Output {
    let dash = args.iter().position(|a| *a == "--").unwrap_or(args.len());
    let child = Command::new(common::ferrolet_bin())
        .args(&args[..dash])
        .args(["--runtime", "cri", "--container-runtime-endpoint", endpoint, "--node-name", NODE, "--state-dir"])
        .arg(state)
        .args(&args[dash..])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_output(child, Duration::from_secs(30))
}

/// The output of `child`, which must end within `timeout`; its pipes are read meanwhile
/// (an exec's output fills them).
fn wait_output(mut child: std::process::Child, timeout: Duration) -> Output {
    let drain = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut b = Vec::new();
            pipe.read_to_end(&mut b).unwrap();
            b
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ferrolet did not end within {timeout:?}: {}", text(&stderr.join().unwrap()));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output { status, stdout: stdout.join().unwrap(), stderr: stderr.join().unwrap() }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn logs_and_exec_reach_a_pods_containers_through_cri() {
    let endpoint = match std::env::var("FERROLET_CRI_ENDPOINT") {
        Ok(e) if !e.is_empty() => e,
        _ => {
            return common::skip(
                "FERROLET_CRI_ENDPOINT is not set: no test containerd (make test starts one with tests/cri/up.sh)",
            )
        }
    };
    let env = Arc::new(grpcio::EnvBuilder::new().cq_count(1).build());
    let client = CriClient::connect(&endpoint, Duration::from_secs(10), env).unwrap();
    let rt = CriRuntime::new(client, &var("FERROLET_CRI_PAUSE_IMAGE"), NODE, &Health::default());
    let pod = TestPod::run(&rt, "logs-web");
    let state = tempfile::tempdir().unwrap();
    let state = state.path();
    let run = |args: &[&str]| ferrolet(&endpoint, state, args);

    // Instance 0 fails; instance 1 waits for the test's /go, then writes and ends; helper runs.
    let first = sh(&pod, "app", 0, "echo one; sleep 0.1; echo two >&2; exit 1");
    pod.wait_state(&first, ContainerState::Exited);
    let second =
        sh(&pod, "app", 1, "echo three; while [ ! -e /go ]; do sleep 0.1; done; echo four; sleep 0.3; echo five");
    let helper = sh(&pod, "helper", 0, "exec sleep 600");
    pod.wait_state(&second, ContainerState::Running);
    pod.wait_state(&helper, ContainerState::Running);
    common::wait_for("instance 1 to log", Duration::from_secs(10), || {
        let out = run(&["logs", "logs-web", "-n", "ferrolet-test", "-c", "app"]);
        (text(&out.stdout) == "three\n").then_some(())
    });

    // -f follows instance 1 until it ends; /go is made through exec.
    let follower = Command::new(common::ferrolet_bin())
        .args(["logs", "logs-web", "-n", "ferrolet-test", "-c", "app", "-f", "--timestamps"])
        .args(["--runtime", "cri", "--container-runtime-endpoint", &endpoint, "--node-name", NODE, "--state-dir"])
        .arg(state)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let out = run(&["exec", "logs-web", "-n", "ferrolet-test", "-c", "app", "--", "touch", "/go"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let followed = wait_output(follower, Duration::from_secs(20));
    assert!(followed.status.success(), "{}", text(&followed.stderr));
    let lines: Vec<String> = text(&followed.stdout).lines().map(String::from).collect();
    let content: Vec<&str> = lines
        .iter()
        .map(|l| {
            let (ts, rest) = l.split_once(' ').unwrap();
            assert!(ferrolet::base::timefmt::parse_rfc3339(ts).is_some(), "{ts}");
            rest
        })
        .collect();
    assert_eq!(content, ["three", "four", "five"]);
    pod.wait_state(&second, ContainerState::Exited);

    // The notice names both containers; --previous is instance 0 with both streams.
    let out = run(&["logs", "logs-web", "-n", "ferrolet-test"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "three\nfour\nfive\n");
    assert_eq!(text(&out.stderr).trim(), r#"Defaulted container "app" out of: app, helper"#);
    let out = run(&["logs", "logs-web", "-n", "ferrolet-test", "-c", "app", "--previous"]);
    assert_eq!(text(&out.stdout), "one\ntwo\n", "{}", text(&out.stderr));
    let out = run(&["logs", "logs-web", "-n", "ferrolet-test", "-c", "app", "-p", "--tail", "1"]);
    assert_eq!(text(&out.stdout), "two\n");
    let out = run(&["logs", "logs-web", "-c", "app"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains(r#"pod "logs-web" not found in namespace "default""#), "{}", text(&out.stderr));

    // exec through the runtime's streaming server: both streams, the exit code, the
    // container's environment.
    let helper_sh =
        |script: &str| run(&["exec", "logs-web", "-n", "ferrolet-test", "-c", "helper", "--", "sh", "-c", script]);
    let out = helper_sh("echo out; echo err >&2; exit 7");
    assert_eq!((text(&out.stdout), text(&out.stderr), out.status.code()), ("out\n".into(), "err\n".into(), Some(7)));
    let out = helper_sh("echo $GREETING");
    assert_eq!((text(&out.stdout), out.status.code()), ("hello from helper\n".into(), Some(0)));
    // 50 MB on stdout and 20 MB on stderr: more than one ExecSync answer can carry (16 MiB),
    // streamed instead; each stream is cut to the documented cap, said so, and the exit
    // code is the command's.
    let out = helper_sh("head -c 50000000 /dev/zero; head -c 20000000 /dev/zero >&2; exit 3");
    let cap = ferrolet::node::runtime::exec::EXEC_OUTPUT_CAP;
    let tail = |b: &[u8]| text(&b[b.len().saturating_sub(2000)..]);
    assert_eq!(out.status.code(), Some(3), "{}", tail(&out.stderr));
    assert!(out.stdout.len() == cap && out.stdout.iter().all(|&b| b == 0), "{} bytes of stdout", out.stdout.len());
    assert!(out.stderr.len() > cap && out.stderr[..cap].iter().all(|&b| b == 0), "{}", tail(&out.stderr));
    for stream in ["stdout", "stderr"] {
        let said = format!("warning: the command's {stream} reached the cap of {cap} bytes; the rest was dropped");
        assert!(tail(&out.stderr).contains(&said), "{}", tail(&out.stderr));
    }
    // A command the runtime cannot start is its error, not an exit code.
    let out = run(&["exec", "logs-web", "-n", "ferrolet-test", "-c", "helper", "--", "/no/such/tool"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("/no/such/tool"), "{}", text(&out.stderr));
    let out = run(&["exec", "logs-web", "-n", "ferrolet-test", "-c", "helper", "--timeout", "1s", "--", "sleep", "30"]);
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("ran past its timeout of 1s (exit code 124): its stream was closed"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&["exec", "logs-web", "-n", "ferrolet-test", "-c", "app", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr)
            .contains(r#"container "app" in pod "logs-web" is not running (exited with code 0: Completed)"#),
        "{}",
        text(&out.stderr)
    );
}
