//! systemd's notify protocol with a real agent, against a Unix datagram socket standing in
//! for systemd: `READY=1` once it serves, `WATCHDOG=1` every half `WATCHDOG_USEC`,
//! `STOPPING=1` on SIGTERM, and no workload inherits the socket. (A wedged manager stopping
//! the pings is tested in `src/notify.rs`, where a manager can be wedged on purpose.)

use crate::common;

use common::{manifest, wait_for, Sandbox};
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The datagrams that arrive on `sock` within `d`.
fn datagrams(sock: &UnixDatagram, d: Duration) -> Vec<String> {
    let until = Instant::now() + d;
    let mut buf = [0u8; 512];
    let mut got = Vec::new();
    while Instant::now() < until {
        if let Ok(n) = sock.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
    got
}

#[test]
fn the_agent_says_ready_pings_its_watchdog_and_says_stopping() {
    let sb = Sandbox::new();
    let env_out = sb.work().join("env");
    let envy = manifest(
        "envy",
        &format!(
            "  containers:\n  - name: app\n    image: x\n    command: [sh, -c, 'env > {}; exec sleep 300']\n",
            env_out.display()
        ),
    );
    sb.write_manifest("envy.yaml", &common::sharing_dir(&envy, &sb.work()));
    let sock_path = sb.dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let port = common::free_port();
    let cfg = sb.dir.path().join("ferrolet.toml");
    std::fs::write(&cfg, sb.config_text(port)).unwrap();
    let log = sb.dir.path().join("agent.log");
    let mut child = Command::new(common::ferrolet_bin())
        .args(["run", "--config"])
        .arg(&cfg)
        .env("RUST_LOG", "info")
        .env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "1000000")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let healthz = || ureq::get(&format!("http://127.0.0.1:{port}/healthz")).call().is_ok();

    let ready = wait_for("READY=1", Duration::from_secs(15), || {
        datagrams(&sock, Duration::from_millis(100)).into_iter().find(|d| d.starts_with("READY=1"))
    });
    assert_eq!(ready, "READY=1\nSTATUS=running");
    assert!(healthz(), "ready means serving");

    // WATCHDOG_USEC of 1 s: a ping every 500 ms.
    let pings = datagrams(&sock, Duration::from_secs(3));
    assert!(pings.iter().all(|p| p == "WATCHDOG=1"), "{pings:?}");
    // Six rounds; on a loaded machine a manager busy past a quarter of the interval skips one.
    assert!((3..=7).contains(&pings.len()), "about six pings in 3 s: {pings:?}");

    let env = wait_for("the workload's environment", Duration::from_secs(15), || {
        std::fs::read_to_string(&env_out).ok().filter(|e| e.contains("PATH="))
    });
    for key in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
        assert!(!env.contains(key), "the workload inherited {key}: {env}");
    }

    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let stopping = wait_for("STOPPING=1", Duration::from_secs(15), || {
        datagrams(&sock, Duration::from_millis(100)).into_iter().find(|d| d != "WATCHDOG=1")
    });
    assert_eq!(stopping, "STOPPING=1");
    let status = wait_for("the agent's exit", Duration::from_secs(20), || child.try_wait().unwrap());
    assert!(status.success(), "{}", std::fs::read_to_string(&log).unwrap_or_default());
}

/// At boot the agent may start before its CRI runtime: while it waits, the service manager
/// hears why and for how long at most, and SIGTERM ends the wait at once, leaving nothing.
#[test]
fn while_the_cri_runtime_is_still_starting_systemd_hears_why_and_sigterm_ends_the_wait() {
    let sb = Sandbox::new();
    let sock_path = sb.dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let cfg = sb.dir.path().join("ferrolet.toml");
    std::fs::write(&cfg, format!("runtime_start_wait = \"5m\"\n{}", sb.config_text(common::free_port()))).unwrap();
    let endpoint = format!("unix://{}/later.sock", sb.dir.path().display());
    let log = sb.dir.path().join("agent.log");
    let mut child = Command::new(common::ferrolet_bin())
        .args(["run", "--runtime", "cri", "--container-runtime-endpoint", &endpoint, "--config"])
        .arg(&cfg)
        .env("RUST_LOG", "info")
        .env("NOTIFY_SOCKET", &sock_path)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let status = wait_for("STATUS=waiting", Duration::from_secs(15), || {
        datagrams(&sock, Duration::from_millis(100)).into_iter().find(|d| d.starts_with("STATUS="))
    });
    let expected = format!(
        "STATUS=waiting for the container runtime: container runtime endpoint {endpoint}: No such file or directory (os error 2)\nEXTEND_TIMEOUT_USEC=330000000"
    );
    assert_eq!(status, expected);
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    // Well within the 5 minutes the wait would take.
    let exit = wait_for("the agent's exit", Duration::from_secs(10), || child.try_wait().unwrap());
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(exit.success(), "{log}");
    assert!(log.contains("stopped by a signal while waiting for the container runtime to start"), "{log}");
    assert!(!sb.state().exists(), "nothing made: {log}");
    assert!(datagrams(&sock, Duration::from_millis(200)).iter().all(|d| !d.starts_with("READY=1")));
}
