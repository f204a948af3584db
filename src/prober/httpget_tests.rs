//! The HTTP probe client against scripted servers on 127.0.0.1.

use super::*;
use crate::manager::Health;
use crate::prober::probes::{self, Outcome, Target};
use crossbeam_channel::Receiver;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

/// What the server does after its reply.
#[derive(Clone, Copy)]
enum After {
    Close,
    /// Keeps the connection open until the client closes it (at most 10 s).
    Hold,
}

/// A server that answers one connection per reply, in order, and sends each request head
/// it read on the returned channel.
fn serve(replies: Vec<(Vec<u8>, After)>) -> (u16, Receiver<String>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::spawn(move || {
        for (reply, after) in replies {
            let Ok((mut c, _)) = l.accept() else { return };
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let (mut req, mut b) = (Vec::new(), [0u8; 1024]);
            while !req.ends_with(b"\r\n\r\n") {
                match c.read(&mut b) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&b[..n]),
                }
            }
            let _ = tx.send(String::from_utf8_lossy(&req).into_owned());
            let _ = c.write_all(&reply);
            if let After::Hold = after {
                let _ = c.read(&mut b);
            }
        }
    });
    (port, rx)
}

fn one(reply: impl Into<Vec<u8>>, after: After) -> (u16, Receiver<String>) {
    serve(vec![(reply.into(), after)])
}

fn fetch_within(port: u16, path: &str, timeout: Duration) -> Result<Response, HttpGetError> {
    let lookups = Lookups::new(&Health::default());
    get(&format!("http://127.0.0.1:{port}{path}"), &[], Instant::now() + timeout, &lookups)
}

fn fetch(port: u16) -> Result<Response, HttpGetError> {
    fetch_within(port, "/", Duration::from_secs(5))
}

fn message(r: Result<Response, HttpGetError>) -> String {
    crate::util::Chain(&r.unwrap_err()).to_string()
}

#[test]
fn a_content_length_body_ends_at_its_length_while_the_connection_stays_open() {
    let (port, _) = one("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloEXTRA", After::Hold);
    let r = fetch(port).unwrap();
    assert_eq!((r.status, r.body.as_str()), (200, "hello"));
}

#[test]
fn a_chunked_body_is_decoded() {
    let reply = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWiki\r\n5;x=1\r\npedia\r\n0\r\n\r\n";
    let (port, _) = one(reply, After::Hold);
    assert_eq!(fetch(port).unwrap().body, "Wikipedia");
}

#[test]
fn a_body_without_length_is_read_to_close() {
    let (port, _) = one("HTTP/1.0 200 OK\r\nX-A: b\r\n\r\nuntil close", After::Close);
    assert_eq!(fetch(port).unwrap().body, "until close");
}

#[test]
fn bodies_are_cut_at_ten_kib_whatever_their_framing() {
    let long = format!("HTTP/1.1 200 OK\r\nContent-Length: 50000\r\n\r\n{}", "x".repeat(50_000));
    let (port, _) = one(long, After::Close);
    assert_eq!(fetch(port).unwrap().body.len(), MAX_OUTPUT);
    let chunk = format!("1770\r\n{}\r\n", "y".repeat(6000));
    let chunked = format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{chunk}{chunk}{chunk}0\r\n\r\n");
    let (port, _) = one(chunked, After::Hold);
    assert_eq!(fetch(port).unwrap().body, "y".repeat(MAX_OUTPUT));
}

#[test]
fn a_head_that_never_ends_times_out_with_kubelets_words() {
    let (port, _) = one("HTTP/1.1 200 OK\r\nX-A: b\r\n", After::Hold);
    let m = message(fetch_within(port, "/", Duration::from_millis(300)));
    assert_eq!(m, "context deadline exceeded (Client.Timeout exceeded while awaiting headers)");
}

#[test]
fn a_head_longer_than_the_bound_fails() {
    let reply = format!("HTTP/1.1 200 OK\r\nX-Pad: {}\r\n\r\nok", "a".repeat(40_000));
    let (port, _) = one(reply, After::Hold);
    assert_eq!(message(fetch(port)), format!("response head larger than {MAX_HEAD} bytes"));
    let many = format!("HTTP/1.1 200 OK\r\n{}\r\nok", "X-Short: line\r\n".repeat(3000));
    let (port, _) = one(many, After::Hold);
    assert_eq!(message(fetch(port)), format!("response head larger than {MAX_HEAD} bytes"), "short lines add up");
}

#[test]
fn a_server_that_closes_early_is_an_eof() {
    let (port, _) = one("", After::Close);
    assert_eq!(message(fetch(port)), "EOF");
    let (port, _) = one("HTTP/1.1 200 OK\r\nX-A: b\r\n", After::Close);
    assert_eq!(message(fetch(port)), "unexpected EOF");
}

#[test]
fn malformed_heads_are_refused() {
    let (port, _) = one("HTTP/2 200\r\n\r\n", After::Close);
    assert_eq!(message(fetch(port)), "malformed HTTP response \"HTTP/2 200\"");
    let (port, _) = one("HTTP/1.1 200 OK\r\n folded\r\n\r\n", After::Close);
    assert_eq!(message(fetch(port)), "malformed MIME header line:  folded");
    let (port, _) = one("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", After::Close);
    assert_eq!(message(fetch(port)), "bad Content-Length \"2\"");
}

#[test]
fn interim_responses_are_skipped() {
    let (port, _) = one("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", After::Hold);
    let r = fetch(port).unwrap();
    assert_eq!((r.status, r.body.as_str()), (200, "ok"));
}

#[test]
fn the_request_is_kubelets_with_connection_close() {
    let (port, requests) = one("HTTP/1.1 204 No Content\r\n\r\n", After::Hold);
    let r = fetch_within(port, "/p?q=1#frag", Duration::from_secs(5)).unwrap();
    assert_eq!((r.status, r.body.as_str()), (204, ""));
    let req = requests.recv_timeout(Duration::from_secs(5)).unwrap();
    let want = format!(
        "GET /p?q=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: {USER_AGENT}\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(req, want);
}

fn probe(port: u16, path: &str, headers: &[(&str, &str)]) -> Outcome {
    let h = crate::api::HttpGetAction {
        path: path.into(),
        port: crate::api::IntOrString::Int(port.into()),
        host: String::new(),
        scheme: "HTTP".into(),
        http_headers: headers.iter().map(|(n, v)| HttpHeader { name: (*n).into(), value: (*v).into() }).collect(),
    };
    let t = Target { pod_ip: "127.0.0.1".into(), container: Arc::default(), container_id: String::new() };
    probes::http(
        &h,
        &t,
        Duration::from_secs(5),
        &crate::prober::resolve::Lookups::new(&crate::manager::Health::default()),
    )
}

#[test]
fn the_probes_host_user_agent_and_accept_headers_replace_the_defaults() {
    let (port, requests) = one("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", After::Hold);
    let headers = [("Host", "app.example"), ("User-Agent", "mine"), ("Accept", ""), ("X-A", "1")];
    assert_eq!(probe(port, "/", &headers), Outcome::Success(String::new()));
    let req = requests.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(req, "GET / HTTP/1.1\r\nHost: app.example\r\nUser-Agent: mine\r\nX-A: 1\r\nConnection: close\r\n\r\n");
}

#[test]
fn a_same_host_redirect_is_followed_on_a_new_connection() {
    let (port, requests) = serve(vec![
        (b"HTTP/1.1 302 Found\r\nLocation: /next\r\nContent-Length: 0\r\n\r\n".to_vec(), After::Hold),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\narrived".to_vec(), After::Hold),
    ]);
    assert_eq!(probe(port, "/first", &[]), Outcome::Success("arrived".into()));
    assert!(requests.recv_timeout(Duration::from_secs(5)).unwrap().starts_with("GET /first HTTP/1.1\r\n"));
    assert!(requests.recv_timeout(Duration::from_secs(5)).unwrap().starts_with("GET /next HTTP/1.1\r\n"));
}

#[test]
fn refused_connections_and_bad_headers_fail_with_gos_shape() {
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    match probe(closed, "/", &[]) {
        Outcome::Failure(m) => assert_eq!(
            m,
            format!("Get \"http://127.0.0.1:{closed}/\": dial tcp 127.0.0.1:{closed}: connect: Connection refused (os error 111)")
        ),
        o => panic!("{o:?}"),
    }
    let (port, _) = one("HTTP/1.1 200 OK\r\n\r\n", After::Close);
    match probe(port, "/", &[("X-A", "a\r\nX-Injected: 1")]) {
        Outcome::Failure(m) => assert!(m.ends_with(": invalid header field value for \"X-A\""), "{m}"),
        o => panic!("{o:?}"),
    }
}

/// CPU time of this thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Not a pass/fail test: `cargo test --lib cpu_per_probe -- --ignored --nocapture` prints
/// the probe thread's CPU per HTTP probe, ureq against this client.
#[test]
#[ignore]
fn cpu_per_probe_ureq_against_httpget() {
    const N: u32 = 2000;
    let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".to_vec();
    let (port, _requests) = serve(vec![(reply, After::Close); 2 * N as usize + 20]);
    let url = format!("http://127.0.0.1:{port}/healthz");
    let lookups = Lookups::new(&Health::default());
    let deadline = || Instant::now() + Duration::from_secs(1);
    // Warm both (thread-locals, the ureq agent).
    for _ in 0..10 {
        probes::ureq_get(&url, &[], deadline()).unwrap();
        get(&url, &[], deadline(), &lookups).unwrap();
    }
    let (cpu, wall) = (thread_cpu(), Instant::now());
    for _ in 0..N {
        assert_eq!(probes::ureq_get(&url, &[], deadline()).unwrap().body, "ok");
    }
    let ureq = ((thread_cpu() - cpu) / N, wall.elapsed() / N);
    let (cpu, wall) = (thread_cpu(), Instant::now());
    for _ in 0..N {
        assert_eq!(get(&url, &[], deadline(), &lookups).unwrap().body, "ok");
    }
    let own = ((thread_cpu() - cpu) / N, wall.elapsed() / N);
    println!("per probe (cpu, wall): ureq {ureq:?}, httpget {own:?}");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// Reads `reply`, the whole of a server's answer, as a probe reads a response.
    fn read_reply(reply: &[u8]) -> Result<Response, HttpGetError> {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        server.write_all(reply).unwrap();
        drop(server);
        let mut buf = vec![0; MAX_HEAD];
        let deadline = Instant::now() + Duration::from_secs(10);
        Conn { stream: &client, buf: &mut buf, pos: 0, end: 0, deadline }.response()
    }

    /// `body` in chunks of the given sizes (the rest in one), each size line with or without
    /// an extension, then the last chunk.
    fn chunked(body: &[u8], sizes: &[usize], extension: bool) -> Vec<u8> {
        let mut out = Vec::new();
        let mut rest = body;
        let mut sizes = sizes.iter().copied().chain(std::iter::once(usize::MAX));
        while !rest.is_empty() {
            let n = sizes.next().unwrap_or(usize::MAX).clamp(1, rest.len());
            let ext = if extension { ";name=value" } else { "" };
            out.extend_from_slice(format!("{n:x}{ext}\r\n").as_bytes());
            out.extend_from_slice(&rest[..n]);
            out.extend_from_slice(b"\r\n");
            rest = &rest[n..];
        }
        out.extend_from_slice(b"0\r\n\r\n");
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn any_answer_is_a_response_or_an_error_without_a_panic(
            head in prop::sample::select(vec!["", "HTTP/1.1 200 OK\r\n", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"]),
            bytes in prop::collection::vec(any::<u8>(), 0..1024),
        ) {
            let mut reply = head.as_bytes().to_vec();
            reply.extend_from_slice(&bytes);
            if let Ok(r) = read_reply(&reply) {
                prop_assert!(r.body.len() <= MAX_OUTPUT * 3, "lossy UTF-8 at most triples the bytes read");
            }
        }

        #[test]
        fn a_status_line_gives_its_code_and_a_length_its_body(
            status in 200u16..600,
            reason in "[A-Za-z ]{0,12}",
            body in "[ -~]{0,64}",
            trailing in "[ -~]{0,16}",
        ) {
            prop_assume!(status != 204 && status != 304);
            let reply = format!("HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\n\r\n{body}{trailing}", body.len());
            let r = read_reply(reply.as_bytes()).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!((r.status, r.body), (status, body));
        }

        #[test]
        fn a_chunked_body_decodes_to_its_bytes_cut_at_the_bound(
            body in prop::collection::vec(b'a'..=b'z', 0..(MAX_OUTPUT + 512)),
            sizes in prop::collection::vec(1usize..3000, 0..8),
            extension in any::<bool>(),
        ) {
            let mut reply = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            reply.extend_from_slice(&chunked(&body, &sizes, extension));
            let r = read_reply(&reply).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let want = &body[..body.len().min(MAX_OUTPUT)];
            prop_assert_eq!(r.body.as_bytes(), want);
        }
    }
}
