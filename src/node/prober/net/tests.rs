//! The network probe thread against servers on 127.0.0.1, side by side with the probe
//! threads' blocking probes.

use super::*;
use crate::api::{Container, HttpGetAction, IntOrString, TcpSocketAction};
use crate::base::manager::Health;
use crate::node::prober::probes::Target;
use crate::node::prober::resolve::Lookups;
use crate::node::prober::ProbeType;
use std::net::TcpListener;
use std::time::Duration;

/// The thread, with what it reports and what it hands back.
struct Engine {
    net: NetProbes<u32>,
    threads: WorkerSet,
    done: Receiver<Done<u32>>,
    fallback: Receiver<Job<u32>>,
}

fn engine() -> Engine {
    let threads = WorkerSet::new("test", 1, &Health::default());
    let (done_tx, done) = unbounded();
    let (fallback_tx, fallback) = unbounded();
    let report: Report<u32> = Arc::new(move |d| done_tx.send(d).is_ok());
    let to_pool: Fallback<u32> = Arc::new(move |j| fallback_tx.send(j).unwrap());
    let net = NetProbes::start(report, to_pool, &threads).unwrap();
    Engine { net, threads, done, fallback }
}

impl Engine {
    fn run(&self, key: u32, probe: Probe) {
        assert!(self.net.submit(job(key, probe)).is_ok());
        self.net.flush();
    }

    fn outcome(&self) -> (u32, Outcome) {
        let d = self.done.recv_timeout(Duration::from_secs(10)).expect("an outcome");
        (d.key, d.outcome)
    }
}

fn target(probe: Probe) -> Target {
    let container = Container { readiness_probe: Some(probe), ..Default::default() };
    Target { pod_ip: "127.0.0.1".into(), container: Arc::new(container), container_id: "c".into() }
}

fn job(key: u32, probe: Probe) -> Job<u32> {
    Job { key, kind: ProbeType::Readiness, target: target(probe), scheduled: Instant::now() }
}

fn http(port: u16, path: &str, scheme: &str, host: &str) -> Probe {
    let port = IntOrString::Int(port.into());
    let (path, host, scheme, http_headers) = (path.into(), host.into(), scheme.into(), Vec::new());
    Probe {
        timeout_seconds: 1,
        http_get: Some(HttpGetAction { path, port, host, scheme, http_headers }),
        ..Default::default()
    }
}

fn tcp(port: u16, host: &str) -> Probe {
    let tcp_socket = Some(TcpSocketAction { port: IntOrString::Int(port.into()), host: host.into() });
    Probe { timeout_seconds: 1, tcp_socket, ..Default::default() }
}

/// What the probe threads conclude for `probe` (the reference the thread must match).
fn blocking(probe: &Probe) -> Outcome {
    let runtime: Arc<dyn crate::node::runtime::ContainerRuntime> = Arc::new(
        crate::node::runtime::fake::FakeRuntime::new(crate::base::clock::FakeClock::new(std::time::UNIX_EPOCH)),
    );
    let lookups = Lookups::new(&Health::default());
    probes::run(probe, &target(probe.clone()), &runtime, &probes::GrpcEnv::default(), &lookups)
}

/// How a scripted server ends a connection after its reply.
#[derive(Clone, Copy)]
enum After {
    /// Closes it first.
    Close,
    /// Waits for the prober to close (at most 5 s).
    Hold,
    /// Sends nothing, holds the connection 3 s.
    Silent,
}

/// A server that gives each connection its reply (the list over and over), after reading
/// the request head.
fn serve(replies: Vec<(Vec<u8>, After)>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for (reply, after) in replies.iter().cycle() {
            let Ok((mut c, _)) = l.accept() else { return };
            let (reply, after) = (reply.clone(), *after);
            std::thread::spawn(move || {
                c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let (mut req, mut b) = (Vec::new(), [0u8; 1024]);
                while !req.ends_with(b"\r\n\r\n") {
                    match c.read(&mut b) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&b[..n]),
                    }
                }
                match after {
                    After::Silent => std::thread::sleep(Duration::from_secs(3)),
                    _ => {
                        let _ = c.write_all(&reply);
                        if let After::Hold = after {
                            let _ = c.read(&mut b);
                        }
                    }
                }
            });
        }
    });
    port
}

fn one(reply: &str, after: After) -> u16 {
    serve(vec![(reply.as_bytes().to_vec(), after)])
}

#[test]
fn it_takes_tcp_and_plain_http_probes_to_an_address_only() {
    let cases = [
        (tcp(80, ""), true, "TCP to the pod's address"),
        (tcp(80, "10.0.0.1"), true, "TCP to an address"),
        (tcp(80, "::1"), true, "TCP to an IPv6 address"),
        (tcp(80, "db.example"), false, "TCP to a name: looked up on a probe thread"),
        (http(80, "/", "", ""), true, "HTTP without a scheme"),
        (http(80, "/", "HTTP", "[::1]"), true, "HTTP to a bracketed IPv6 address"),
        (http(80, "/", "HTTPS", ""), false, "HTTPS: TLS on a probe thread"),
        (http(80, "/", "http", "web.example"), false, "HTTP to a name"),
        (Probe::default(), false, "no handler"),
    ];
    for (probe, want, what) in cases {
        assert_eq!(takes(&probe, "127.0.0.1"), want, "{what}");
    }
}

#[test]
fn polls_wait_until_the_nearest_deadline_rounded_up_to_a_millisecond() {
    let now = Instant::now();
    let ms = Duration::from_millis;
    assert_eq!(poll_timeout(now, std::iter::empty()), -1, "nothing runs: no limit");
    assert_eq!(poll_timeout(now, [now + ms(900), now + ms(5)].into_iter()), 5);
    assert_eq!(poll_timeout(now, [now + Duration::from_micros(10)].into_iter()), 1, "never a 0 ms spin");
    assert_eq!(poll_timeout(now + ms(2), [now].into_iter()), 0, "overdue: at once");
}

#[test]
fn http_probes_answer_as_on_a_probe_thread_in_both_closing_orders() {
    let replies = [
        ("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n", "the server closes first"),
        ("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n", "the prober closes first"),
        ("HTTP/1.1 200 OK\r\n\r\nuntil close", "a body read to close"),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\n", "chunked"),
        ("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", "an interim response skipped"),
        ("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy", "a failure"),
        ("HTTP/1.1 302 Found\r\nLocation: http://elsewhere.example/\r\nContent-Length: 2\r\n\r\ngo", "another host"),
        ("HTTP/2 200\r\n\r\n", "a malformed status line"),
        ("", "closed without an answer"),
        ("HTTP/1.1 200 OK\r\nContent-Len", "closed in the middle of the head"),
    ];
    let e = engine();
    for (i, (reply, what)) in replies.iter().enumerate() {
        let after = if what.contains("prober closes") { After::Hold } else { After::Close };
        let probe = http(one(reply, after), "/healthz", "", "");
        let want = blocking(&probe);
        e.run(i as u32, probe);
        assert_eq!(e.outcome(), (i as u32, want), "{what}");
    }
}

#[test]
fn a_long_body_is_cut_at_ten_kib_as_on_a_probe_thread() {
    let body = "y".repeat(super::super::MAX_OUTPUT * 2);
    let reply = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len());
    let e = engine();
    let probe = http(one(&reply, After::Hold), "/", "", "");
    let want = blocking(&probe);
    assert!(matches!(&want, Outcome::Success(b) if b.len() == super::super::MAX_OUTPUT), "{want:?}");
    e.run(1, probe);
    assert_eq!(e.outcome(), (1, want));
}

#[test]
fn refused_connections_fail_with_the_same_words() {
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let e = engine();
    for (i, probe) in [http(closed, "/", "", ""), tcp(closed, "")].into_iter().enumerate() {
        let want = blocking(&probe);
        assert!(matches!(&want, Outcome::Failure(m) if m.contains("Connection refused")), "{want:?}");
        e.run(i as u32, probe);
        assert_eq!(e.outcome(), (i as u32, want));
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    e.run(9, tcp(listener.local_addr().unwrap().port(), "127.0.0.1"));
    assert_eq!(e.outcome(), (9, Outcome::Success(String::new())));
}

#[test]
fn a_silent_server_times_out_and_holds_up_only_its_own_probe() {
    let e = engine();
    let silent = serve(vec![(Vec::new(), After::Silent)]);
    let prompt = one("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", After::Close);
    e.run(1, http(silent, "/slow", "", ""));
    for key in 2..12 {
        e.run(key, http(prompt, "/", "", ""));
    }
    for _ in 2..12 {
        let (key, outcome) = e.outcome();
        assert!((2..12).contains(&key), "the prompt probes answer first, not behind the silent one ({key})");
        assert_eq!(outcome, Outcome::Success(String::new()));
    }
    let want = format!(
        "Get \"http://127.0.0.1:{silent}/slow\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
    );
    assert_eq!(e.outcome(), (1, Outcome::Failure(want)));
}

#[test]
fn a_body_that_times_out_is_kept_as_read() {
    let e = engine();
    let port = one("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npart", After::Hold);
    e.run(1, http(port, "/", "", ""));
    assert_eq!(e.outcome(), (1, Outcome::Success("part".into())));
}

#[test]
fn same_host_redirects_are_followed_here_and_a_redirect_to_https_goes_to_the_probe_threads() {
    let e = engine();
    let port = serve(vec![
        (b"HTTP/1.1 302 Found\r\nLocation: /next\r\nContent-Length: 0\r\n\r\n".to_vec(), After::Close),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\narrived".to_vec(), After::Close),
    ]);
    e.run(1, http(port, "/first", "", ""));
    assert_eq!(e.outcome(), (1, Outcome::Success("arrived".into())));
    let tls = one("HTTP/1.1 301 Moved\r\nLocation: https://127.0.0.1:1/\r\nContent-Length: 0\r\n\r\n", After::Close);
    e.run(2, http(tls, "/", "", ""));
    let handed = e.fallback.recv_timeout(Duration::from_secs(10)).expect("handed to the probe threads");
    assert_eq!(handed.key, 2);
    assert!(e.done.try_recv().is_err(), "and not reported here");
}

#[test]
fn many_probes_at_once_all_answer_and_the_thread_stops_at_once() {
    let e = engine();
    let port = one("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", After::Close);
    for key in 0..100 {
        assert!(e.net.submit(job(key, http(port, "/", "", ""))).is_ok());
    }
    e.net.flush();
    let mut seen: Vec<u32> = (0..100)
        .map(|_| e.outcome())
        .map(|(k, o)| {
            assert_eq!(o, Outcome::Success("ok".into()));
            k
        })
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..100).collect::<Vec<_>>());
    e.threads.signal_stop();
    assert!(e.threads.stop(Duration::from_secs(2)).is_empty(), "woken and ended, not left in its poll");
    let returned = e.net.submit(job(1, http(port, "/", "", ""))).map_err(|j| j.key);
    assert_eq!(returned, Err(1), "a probe for a thread that is gone comes back");
    // A TCP probe on loopback needs no thread: connected within connect, done at once.
    assert!(e.net.submit(job(2, tcp(port, ""))).is_ok());
    assert_eq!(e.done.try_recv().map(|d| (d.key, d.outcome)).ok(), Some((2, Outcome::Success(String::new()))));
}
