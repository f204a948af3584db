//! Each probe kind against real peers on 127.0.0.1: a small HTTP server, TCP listeners,
//! real processes for exec, and a real grpcio health server.

use crate::common;

use common::{ferrolet_bin, wait_for, Sandbox};
use ferrolet::api::{Container, ContainerPort, HttpGetAction, HttpHeader, IntOrString};
use ferrolet::node::prober::probes::{self, GrpcEnv, Outcome, Target};
use ferrolet::node::prober::MAX_OUTPUT;
use ferrolet::node::runtime::process::ProcessRuntime;
use ferrolet::node::runtime::{ContainerConfig, ContainerRuntime, SandboxConfig};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A tiny HTTP/1.1 server: one thread per connection, routes by path.
fn http_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                if r.read_line(&mut line).is_err() {
                    return;
                }
                let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
                let mut headers = String::new();
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                    headers.push_str(&h);
                }
                let (status, extra, body): (u16, String, String) = match path.as_str() {
                    "/ok" => (200, String::new(), "fine".into()),
                    "/headers" => (200, String::new(), headers.to_lowercase()),
                    "/big" => (200, String::new(), "x".repeat(50_000)),
                    "/slow" => {
                        std::thread::sleep(Duration::from_secs(3));
                        (200, String::new(), "late".into())
                    }
                    "/same-host" => (302, "Location: /ok\r\n".into(), String::new()),
                    "/loop" => (302, "Location: /loop\r\n".into(), String::new()),
                    "/other-host" => (302, format!("Location: http://localhost:{port}/ok\r\n"), "moved".into()),
                    p if p.starts_with("/status/") => {
                        (p[8..].parse().unwrap_or(500), String::new(), "secret body".into())
                    }
                    _ => (404, String::new(), "not found".into()),
                };
                let mut w = conn;
                let _ = write!(
                    w,
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

/// An HTTP probe from a test: host names are looked up on a lookup set of its own.
fn http(h: &HttpGetAction, t: &Target, timeout: Duration) -> Outcome {
    probes::http(h, t, timeout, &probes::Lookups::new(&ferrolet::base::manager::Health::default()))
}

fn get(port: u16, path: &str, headers: Vec<(&str, &str)>) -> HttpGetAction {
    HttpGetAction {
        path: path.into(),
        port: IntOrString::Int(port as i64),
        host: String::new(),
        scheme: "HTTP".into(),
        http_headers: headers.into_iter().map(|(n, v)| HttpHeader { name: n.into(), value: v.into() }).collect(),
    }
}

fn target() -> Target {
    Target { pod_ip: "127.0.0.1".into(), container: Arc::new(Container::default()), container_id: String::new() }
}

const SEC: Duration = Duration::from_secs(1);

#[test]
fn http_probes_follow_kubelets_rules() {
    let port = http_server();
    let t = target();
    assert_eq!(http(&get(port, "/ok", vec![]), &t, SEC), Outcome::Success("fine".into()));
    assert_eq!(http(&get(port, "/status/204", vec![]), &t, SEC), Outcome::Success(String::new()));
    for code in [404, 500, 503] {
        let o = http(&get(port, &format!("/status/{code}"), vec![]), &t, SEC);
        assert_eq!(
            o,
            Outcome::Failure(format!("HTTP probe failed with statuscode: {code}")),
            "the body is never in the message"
        );
    }
    assert_eq!(
        http(&get(port, "/same-host", vec![]), &t, SEC),
        Outcome::Success("fine".into()),
        "same-host redirect followed"
    );
    match http(&get(port, "/loop", vec![]), &t, SEC) {
        Outcome::Failure(m) => assert!(m.contains("stopped after 10 redirects"), "{m}"),
        o => panic!("{o:?}"),
    }
    // 127.0.0.1 → localhost is another host name: not followed, a warning (still success).
    assert_eq!(
        http(&get(port, "/other-host", vec![]), &t, SEC),
        Outcome::Warning("Probe terminated redirects, Response body: moved".into())
    );
    match http(&get(port, "/big", vec![]), &t, SEC) {
        Outcome::Success(body) => assert_eq!(body.len(), MAX_OUTPUT, "body read up to 10 KiB"),
        o => panic!("{o:?}"),
    }
    match http(&get(port, "/slow", vec![]), &t, SEC) {
        Outcome::Failure(m) => assert!(m.contains("Client.Timeout exceeded"), "{m}"),
        o => panic!("{o:?}"),
    }
}

#[test]
fn http_probes_send_kube_probe_headers_custom_headers_and_host() {
    let port = http_server();
    let t = target();
    let body = match http(
        &get(port, "/headers", vec![("X-Custom", "a"), ("X-Custom", "b"), ("Host", "app.example")]),
        &t,
        SEC,
    ) {
        Outcome::Success(b) => b,
        o => panic!("{o:?}"),
    };
    assert!(body.contains("user-agent: kube-probe/1."), "{body}");
    assert!(body.contains("accept: */*"), "{body}");
    assert!(body.contains("x-custom: a") && body.contains("x-custom: b"), "repeated headers accumulate: {body}");
    assert!(body.contains("host: app.example"), "{body}");
    // A named port resolves through the container's ports.
    let mut named = target();
    let mut c = Container::default();
    c.ports.push(ContainerPort { name: "http".into(), container_port: port as i64, ..Default::default() });
    named.container = Arc::new(c);
    let mut action = get(port, "/ok", vec![]);
    action.port = IntOrString::String("http".into());
    assert_eq!(http(&action, &named, SEC), Outcome::Success("fine".into()));
    // Nothing listening: a failure with the transport error, not an error.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    assert!(matches!(http(&get(closed, "/", vec![]), &t, SEC), Outcome::Failure(_)));
}

#[test]
fn tcp_probes_succeed_on_connect_and_fail_when_refused() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let lookups = probes::Lookups::new(&ferrolet::base::manager::Health::default());
    assert_eq!(probes::tcp("127.0.0.1", port, SEC, &lookups), Outcome::Success(String::new()));
    match probes::tcp("no-such-host.invalid", port, SEC, &lookups) {
        Outcome::Failure(m) => assert!(m.starts_with("dial tcp no-such-host.invalid:"), "{m}"),
        o => panic!("{o:?}"),
    }
    drop(l);
    match probes::tcp("127.0.0.1", port, SEC, &lookups) {
        Outcome::Failure(m) => assert!(m.contains("connection refused") || m.contains("Connection refused"), "{m}"),
        o => panic!("{o:?}"),
    }
}

#[test]
fn exec_probes_use_exit_codes_static_env_a_timeout_and_cap_output() {
    let sb = Sandbox::new();
    let rt: Arc<dyn ContainerRuntime> =
        Arc::new(ProcessRuntime::new(&sb.state().join("runtime"), &ferrolet_bin(), 1 << 20, 2).unwrap());
    let s = rt
        .run_pod_sandbox(&SandboxConfig {
            pod_uid: "u".into(),
            pod_name: "p".into(),
            namespace: "default".into(),
            log_directory: sb.state().join("logs"),
            termination_grace_period_seconds: 1,
            ..Default::default()
        })
        .unwrap();
    // The test's directory is shared with the container (and so with its exec probes).
    let cfg = ContainerConfig {
        name: "app".into(),
        argv: vec!["sleep".into(), "30".into()],
        log_path: sb.state().join("logs/app/0.log"),
        mounts: vec![common::shared_dir_mount(&sb.work())],
        ..Default::default()
    };
    let id = rt.create_container(&s, &cfg).unwrap();
    rt.start_container(&id).unwrap();
    let workload = wait_for("the workload", Duration::from_secs(5), || {
        rt.list_containers().unwrap().into_iter().find(|c| c.id == id)?.pid
    });
    let mut t = target();
    t.container_id = id.clone();
    let mut c = Container::default();
    c.env.push(ferrolet::api::EnvVar { name: "WHO".into(), value: "probe".into(), value_from: None });
    t.container = Arc::new(c);
    let sh = |s: &str| vec!["sh".to_string(), "-c".to_string(), s.to_string()];
    assert_eq!(
        probes::exec(&sh("echo $(WHO)"), &t, &rt, SEC),
        Outcome::Success("probe\n".into()),
        "$(VAR) from the static env"
    );
    assert_eq!(probes::exec(&sh("echo bad; exit 3"), &t, &rt, SEC), Outcome::Failure("bad\n".into()));
    match probes::exec(&sh("head -c 100000 /dev/zero | tr '\\0' y"), &t, &rt, SEC) {
        Outcome::Success(out) => assert_eq!(out.len(), MAX_OUTPUT),
        o => panic!("{o:?}"),
    }
    assert_eq!(
        probes::exec(&sh("sleep 10"), &t, &rt, SEC),
        Outcome::Failure("command \"sh -c sleep 10\" timed out".into())
    );
    // A command that exits at once but leaves a child holding its output open times out,
    // and the whole group goes at the timeout, the leftover child included. (Its pid is the
    // container's: it is looked up there, where the workload is PID 1.)
    let pid_file = sb.work().join("bg.pid");
    let bg = format!("sleep 100 & echo $! > {}", pid_file.display());
    assert_eq!(probes::exec(&sh(&bg), &t, &rt, SEC), Outcome::Failure(format!("command \"sh -c {bg}\" timed out")));
    let pid: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    assert!(common::alive_in_container(workload, 1), "the container's processes are seen");
    wait_for("the leftover child to be killed", Duration::from_secs(1), || {
        (!common::alive_in_container(workload, pid)).then_some(())
    });
    rt.stop_container(&id, Duration::from_secs(1)).unwrap();
}

/// A listener that accepts and never says a word; each accepted connection reports
/// when it saw EOF (the prober closed it).
fn silent_listener() -> (u16, std::sync::mpsc::Receiver<Instant>, Arc<std::sync::atomic::AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let tx = tx.clone();
            std::thread::spawn(move || {
                use std::io::Read;
                let mut conn = conn;
                let mut buf = [0u8; 4096];
                while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
                let _ = tx.send(Instant::now());
            });
        }
    });
    (port, rx, accepted)
}

#[test]
fn an_http_probe_closes_its_connection_at_the_timeout_when_the_server_never_answers() {
    let (port, closed, accepted) = silent_listener();
    let started = Instant::now();
    match http(&get(port, "/", vec![]), &target(), SEC) {
        Outcome::Failure(m) => assert!(m.contains("Client.Timeout exceeded"), "{m}"),
        o => panic!("{o:?}"),
    }
    let returned = Instant::now();
    // Generous margins for a loaded machine; the defect was a connection open for 20 s.
    assert!(returned - started < Duration::from_secs(3), "bounded by the timeout");
    let at = closed.recv_timeout(Duration::from_secs(5)).expect("the connection is closed at the timeout");
    assert!(at - returned < Duration::from_secs(3), "closed {:?} after the probe returned", at - returned);
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// Established TCP connections from or to `port` on this host (both ends of a loopback
/// connection count), from /proc/net/tcp and tcp6.
fn established(port: u16) -> usize {
    let hex = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f).unwrap_or_default().lines().skip(1).map(String::from).collect::<Vec<_>>()
        })
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[3] == "01" && (f[1].ends_with(&hex) || f[2].ends_with(&hex))
        })
        .count()
}

mod grpc {
    use super::*;
    use ferrolet::proto::health::{
        create_health, health_check_response::ServingStatus as S, Health, HealthCheckRequest, HealthCheckResponse,
    };
    use grpcio::{RpcContext, UnarySink};

    #[derive(Clone)]
    struct Server {
        status: Option<S>,
        delay: Duration,
    }

    impl Health for Server {
        fn check(&mut self, ctx: RpcContext, req: HealthCheckRequest, sink: UnarySink<HealthCheckResponse>) {
            std::thread::sleep(self.delay);
            match self.status {
                Some(s) => {
                    let mut r = HealthCheckResponse::new();
                    r.set_status(if req.service() == "unknown" { S::SERVICE_UNKNOWN } else { s });
                    ctx.spawn(async move {
                        let _ = sink.success(r).await;
                    });
                }
                None => {
                    let status = grpcio::RpcStatus::new(grpcio::RpcStatusCode::UNIMPLEMENTED);
                    ctx.spawn(async move {
                        let _ = sink.fail(status).await;
                    });
                }
            }
        }
    }

    fn serve(status: Option<S>, delay: Duration) -> (grpcio::Server, u16) {
        let env = Arc::new(grpcio::Environment::new(1));
        let mut server =
            grpcio::ServerBuilder::new(env).register_service(create_health(Server { status, delay })).build().unwrap();
        let port = server.add_listening_port("127.0.0.1:0", grpcio::ServerCredentials::insecure()).unwrap();
        server.start();
        (server, port)
    }

    #[test]
    fn a_grpc_probe_closes_its_connection_at_the_timeout_when_the_server_never_speaks_http2() {
        let (port, closed, accepted) = silent_listener();
        let env = GrpcEnv::default();
        let started = Instant::now();
        match env.check("127.0.0.1", port, "", SEC) {
            Outcome::Failure(m) => assert!(m.starts_with("timeout: failed to connect service"), "{m}"),
            o => panic!("{o:?}"),
        }
        let returned = Instant::now();
        // Generous margins for a loaded machine; the defect was a connection open for 20 s.
        assert!(returned - started < Duration::from_secs(3), "bounded by the timeout: {:?}", returned - started);
        let n = accepted.load(std::sync::atomic::Ordering::SeqCst);
        assert!(n >= 1, "the probe connected");
        for _ in 0..n {
            let at = closed
                .recv_timeout(Duration::from_secs(5))
                .expect("every connection the probe opened is closed soon after its timeout");
            assert!(at - returned < Duration::from_secs(3), "closed {:?} after the probe returned", at - returned);
        }
        std::thread::sleep(Duration::from_secs(1));
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), n, "no reconnection after the probe ended");
    }

    #[test]
    fn a_grpc_probe_closes_its_connection_when_the_call_times_out() {
        let (_server, port) = serve(Some(S::SERVING), Duration::from_secs(3));
        let env = GrpcEnv::default();
        assert_eq!(
            env.check("127.0.0.1", port, "", SEC),
            Outcome::Failure("timeout: health rpc did not complete within 1s".into())
        );
        wait_for("the probe's connection to close", Duration::from_secs(3), || (established(port) == 0).then_some(()));
    }

    #[test]
    fn grpc_health_probes_against_a_real_grpcio_server() {
        let env = GrpcEnv::default();
        let (_s1, serving) = serve(Some(S::SERVING), Duration::ZERO);
        assert_eq!(env.check("127.0.0.1", serving, "", SEC), Outcome::Success("service healthy".into()));
        assert_eq!(
            env.check("127.0.0.1", serving, "unknown", SEC),
            Outcome::Failure("service unhealthy (responded with \"SERVICE_UNKNOWN\")".into())
        );
        let (_s2, not_serving) = serve(Some(S::NOT_SERVING), Duration::ZERO);
        assert_eq!(
            env.check("127.0.0.1", not_serving, "", SEC),
            Outcome::Failure("service unhealthy (responded with \"NOT_SERVING\")".into())
        );
        let (_s3, unimplemented) = serve(None, Duration::ZERO);
        assert_eq!(
            env.check("127.0.0.1", unimplemented, "", SEC),
            Outcome::Failure("this server does not implement the grpc health protocol (grpc.health.v1.Health)".into())
        );
        let (_s4, slow) = serve(Some(S::SERVING), Duration::from_millis(1500));
        assert_eq!(
            env.check("127.0.0.1", slow, "", SEC),
            Outcome::Failure("timeout: health rpc did not complete within 1s".into())
        );
        let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        match env.check("127.0.0.1", closed, "", SEC) {
            Outcome::Failure(m) => assert!(m.starts_with("timeout: failed to connect service"), "{m}"),
            o => panic!("{o:?}"),
        }
    }
}
