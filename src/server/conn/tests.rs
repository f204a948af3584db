//! The reactor against real sockets on 127.0.0.1, with a handler that serves a large body
//! on `/big` (from a worker) and `ok` on `/healthz` (inline).

use super::*;
use crate::base::manager::testing::wait_until;
use crate::base::manager::Health;
use crate::server::pool::{spawn, Running};
use std::sync::atomic::AtomicUsize;

#[derive(Default)]
struct Fake {
    /// `/slow` requests a worker has begun to answer.
    slow_started: AtomicUsize,
}

impl Handler for Fake {
    fn handle(&self, req: &Request) -> Response {
        match req.path.as_str() {
            "/healthz" => Response::text(200, "ok"),
            "/big" => Response::text(200, "x".repeat(1 << 20)),
            "/slow" => {
                self.slow_started.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_secs(2));
                Response::text(200, "slow")
            }
            _ => Response::text(404, "no\n"),
        }
    }
    fn inline(&self, req: &Request) -> bool {
        req.path.starts_with("/healthz")
    }
}

fn limits() -> Limits {
    Limits {
        max_connections: 8,
        workers: 2,
        request_timeout: Duration::from_millis(500),
        idle_timeout: Duration::from_secs(5),
        write_timeout: Duration::from_millis(700),
        max_requests_per_connection: 3,
    }
}

fn start(limits: Limits) -> (Running, std::net::SocketAddr, Arc<ServerStats>, Health) {
    start_with(Arc::default(), limits)
}

fn start_with(fake: Arc<Fake>, limits: Limits) -> (Running, std::net::SocketAddr, Arc<ServerStats>, Health) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let stats = Arc::new(ServerStats::default());
    let health = Health::default();
    let running = spawn(listener, fake, limits, stats.clone(), &health).unwrap();
    (running, addr, stats, health)
}

/// Waits (at most 10 s) for `counter` to reach `n`.
fn wait_count(what: &str, counter: &AtomicU64, n: u64) {
    wait_until(what, Duration::from_secs(10), || counter.load(Ordering::Relaxed) == n);
}

/// Stops the server; every thread must end within `timeout`.
fn stop(running: Running, timeout: Duration) {
    let late = running.stop(timeout);
    assert!(late.is_empty(), "{late:?}");
}

fn connect(addr: std::net::SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Sends `GET path` on `s` and reads one response: (status line, body).
fn get(s: &mut TcpStream, path: &str) -> (String, Vec<u8>) {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes()).unwrap();
    read_response(s)
}

fn read_response(s: &mut TcpStream) -> (String, Vec<u8>) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "connection closed in a response head: {head:?}");
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let len: usize =
        head.lines().find_map(|l| l.strip_prefix("Content-Length: ")).map(|v| v.trim().parse().unwrap()).unwrap();
    let mut body = vec![0; len];
    s.read_exact(&mut body).unwrap();
    (head, body)
}

fn set_rcvbuf(s: &TcpStream, bytes: i32) {
    // SAFETY: setsockopt on a socket we own, with a pointer to an i32 of the given size.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &bytes as *const i32 as *const libc::c_void,
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
}

/// Reads until EOF or a reset; true if the server closed the connection.
fn closed_by_server(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64 << 10];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn a_client_that_never_reads_blocks_nobody_and_is_closed_at_its_write_deadline() {
    // Enough requests per connection that 60 pipelined 1 MiB answers outgrow the socket
    // buffers (about 4 MiB here) and the write deadline, not the request limit, ends it.
    let (running, addr, stats, _health) = start(Limits { max_requests_per_connection: 100, ..limits() });
    let mut hostile = TcpStream::connect(addr).unwrap();
    set_rcvbuf(&hostile, 1024);
    let pipelined = "GET /big HTTP/1.1\r\nHost: t\r\n\r\n".repeat(60);
    hostile.write_all(pipelined.as_bytes()).unwrap();
    hostile.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // Its answers have started: the server is busy with it before the other client comes.
    assert_eq!(hostile.peek(&mut [0u8; 1]).unwrap(), 1);
    let mut other = connect(addr);
    assert_eq!(get(&mut other, "/healthz").1, b"ok");
    assert_eq!(get(&mut other, "/big").1.len(), 1 << 20, "workers are free for other clients");
    // Reading now would let the answers through: first the server gives up on the client.
    wait_count("the hostile client's write deadline", &stats.timeouts, 1);
    assert!(closed_by_server(&mut hostile));
    stop(running, Duration::from_secs(2));
}

#[test]
fn an_http_1_0_request_is_closed_after_its_response_from_a_worker_as_inline() {
    let (running, addr, _stats, _health) = start(limits());
    for path in ["/healthz", "/big"] {
        let mut s = connect(addr);
        s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes()).unwrap();
        let (head, _) = read_response(&mut s);
        assert!(head.contains("Connection: close"), "{path}: {head}");
        assert!(closed_by_server(&mut s), "{path}: an HTTP/1.0 client reads to EOF");
    }
    stop(running, Duration::from_secs(2));
}

#[test]
fn pipelined_requests_are_answered_in_order_until_the_per_connection_limit() {
    let (running, addr, _stats, _health) = start(limits());
    let mut s = connect(addr);
    s.write_all(b"GET /healthz HTTP/1.1\r\n\r\nGET /nope HTTP/1.1\r\n\r\nGET /healthz HTTP/1.1\r\n\r\nGET /healthz HTTP/1.1\r\n\r\n")
        .unwrap();
    let (h1, b1) = read_response(&mut s);
    let (h2, _) = read_response(&mut s);
    let (h3, _) = read_response(&mut s);
    assert!(h1.starts_with("HTTP/1.1 200") && b1 == b"ok" && h2.starts_with("HTTP/1.1 404"), "{h1}{h2}");
    assert!(h3.contains("Connection: close"), "the third request is the last: {h3}");
    assert!(closed_by_server(&mut s), "the fourth request is not served");
    stop(running, Duration::from_secs(2));
}

#[test]
fn bad_heads_are_answered_with_their_status_and_closed() {
    let (running, addr, _stats, _health) = start(limits());
    let mut s = connect(addr);
    let line = format!("GET /{} HTTP/1.1\r\n", "a".repeat(64 << 10));
    s.write_all(line.as_bytes()).unwrap();
    let (head, _) = read_response(&mut s);
    assert!(head.starts_with("HTTP/1.1 414 URI Too Long\r\n") && head.contains("Connection: close"), "{head}");
    assert!(closed_by_server(&mut s));

    let mut s = connect(addr);
    s.write_all(b"GET / HTTP/1.1\r\n").unwrap();
    for i in 0..200 {
        s.write_all(format!("X-{i}: 1\r\n").as_bytes()).unwrap();
    }
    assert!(read_response(&mut s).0.starts_with("HTTP/1.1 431"));

    let mut s = connect(addr);
    s.write_all(b"BREW /pot HTTP/3\r\n\r\n").unwrap();
    assert!(read_response(&mut s).0.starts_with("HTTP/1.1 400"));
    stop(running, Duration::from_secs(2));
}

#[test]
fn a_slow_request_head_is_closed_at_the_request_deadline() {
    let (running, addr, stats, _health) = start(limits());
    let mut s = connect(addr);
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost:").unwrap();
    assert!(closed_by_server(&mut s));
    assert_eq!(stats.timeouts.load(Ordering::Relaxed), 1);
    stop(running, Duration::from_secs(2));
}

#[test]
fn over_the_cap_idle_connections_make_room_and_busy_ones_get_503() {
    // Queued requests wait for a worker longer than this test runs.
    let (running, addr, stats, _health) = start(Limits { write_timeout: Duration::from_secs(10), ..limits() });
    let idle: Vec<TcpStream> = (0..8).map(|_| connect(addr)).collect();
    wait_count("8 connections open", &stats.open, 8);
    let mut fresh = connect(addr);
    assert_eq!(get(&mut fresh, "/healthz").1, b"ok", "the oldest idle connection made room");
    assert!(stats.evicted.load(Ordering::Relaxed) >= 1);
    drop((idle, fresh));
    wait_count("every connection closed", &stats.open, 0);
    let read = stats.requests.load(Ordering::Relaxed);
    // Eight slow requests (two at the workers, six queued) fill every slot with busy connections.
    let busy: Vec<TcpStream> = (0..8)
        .map(|_| {
            let s = TcpStream::connect(addr).unwrap();
            (&s).write_all(b"GET /slow HTTP/1.1\r\n\r\n").unwrap();
            s
        })
        .collect();
    wait_count("8 more requests read", &stats.requests, read + 8);
    let mut refused = connect(addr);
    let (head, body) = read_response(&mut refused);
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    assert!(String::from_utf8_lossy(&body).contains("limit of 8 connections"));
    assert_eq!(stats.open.load(Ordering::Relaxed), 8);
    drop(busy);
    stop(running, Duration::from_secs(5));
}

#[test]
fn the_connection_cap_follows_the_fd_limit() {
    assert_eq!(connection_cap(1024), 256);
    assert_eq!(connection_cap(1 << 20), MAX_CONNECTIONS);
    assert_eq!(connection_cap(20), 16);
    assert!(accept_error_is_transient(&io::Error::from_raw_os_error(libc::ECONNABORTED)));
    assert!(!accept_error_is_transient(&io::Error::from_raw_os_error(libc::EMFILE)));
}

#[test]
fn a_listener_failing_for_long_is_reported() {
    let stats = ServerStats::default();
    let now = Instant::now();
    assert_eq!(stats.listener_problem(now), None);
    *stats.failing_since.lock() = Some((now, "Too many open files (os error 24)".into()));
    assert_eq!(stats.listener_problem(now), None, "a short burst is not a dead listener");
    let text = stats.listener_problem(now + LISTENER_DEAD_AFTER).unwrap();
    assert!(text.contains("has not accepted a connection for 5s: Too many open files"), "{text}");
}

#[test]
fn thousands_of_pipelined_inline_requests_are_answered_in_a_loop() {
    let (running, addr, _stats, _health) = start(Limits { max_requests_per_connection: 1_000_000, ..limits() });
    let mut s = connect(addr);
    let n = 5000;
    let requests = "GET /healthz HTTP/1.1\r\n\r\n".repeat(n);
    let writer = {
        let mut w = s.try_clone().unwrap();
        std::thread::spawn(move || w.write_all(requests.as_bytes()).unwrap())
    };
    for _ in 0..n {
        assert_eq!(read_response(&mut s).1, b"ok");
    }
    writer.join().unwrap();
    stop(running, Duration::from_secs(2));
}

#[test]
fn an_accept_pause_that_has_passed_no_longer_shortens_the_poll() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let (mut r, _ends, _wake) = Reactor::new(listener, Arc::new(Fake::default()), limits(), Arc::default()).unwrap();
    let now = Instant::now();
    r.accept_paused_until = Some(now + Duration::from_millis(50));
    assert!(!r.listening(now));
    assert_eq!(r.next_wakeup(), Some(now + Duration::from_millis(50)));
    let later = now + Duration::from_millis(60);
    assert!(r.listening(later), "the pause is over");
    assert_eq!(r.next_wakeup(), None, "not a zero timeout on every later poll: no timeout at all");
    assert_eq!(poll_millis(later + Duration::from_micros(300), later), 1, "rounded up, not a zero-timeout spin");
    assert_eq!(poll_millis(later, later + Duration::from_secs(1)), 0);
}

#[test]
fn a_request_followed_by_a_half_close_is_answered_before_the_connection_closes() {
    let (running, addr, _stats, _health) = start(limits());
    for path in ["/healthz", "/big", "/healthz"] {
        let mut s = connect(addr);
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes()).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        // Whether the close is announced depends on whether the FIN came with the request.
        let (head, _) = read_response(&mut s);
        assert!(head.starts_with("HTTP/1.1 200"), "{path}: {head}");
        assert!(closed_by_server(&mut s), "{path}");
    }
    let mut s = connect(addr);
    s.write_all(b"GET /healthz HTTP/1.1\r\n\r\nGET /healthz HTTP/1.1\r\n\r\nGET /heal").unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let (h1, _) = read_response(&mut s);
    let (h2, _) = read_response(&mut s);
    assert!(h1.starts_with("HTTP/1.1 200") && h2.starts_with("HTTP/1.1 200"), "{h1}{h2}");
    assert!(closed_by_server(&mut s), "the cut third request is dropped");
    stop(running, Duration::from_secs(2));
}

/// Reads a response head only (the answer to HEAD has no body).
fn read_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "connection closed in a response head: {head:?}");
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}

#[test]
fn http_1_0_keep_alive_is_confirmed_and_head_answers_carry_no_body() {
    let (running, addr, _stats, _health) = start(Limits { max_requests_per_connection: 100, ..limits() });
    let mut s = connect(addr);
    for path in ["/healthz", "/big"] {
        s.write_all(format!("GET {path} HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").as_bytes()).unwrap();
        let (head, _) = read_response(&mut s);
        assert!(head.contains("Connection: keep-alive\r\n"), "{path}: {head}");
    }
    let mut s = connect(addr);
    for path in ["/healthz", "/big"] {
        s.write_all(format!("HEAD {path} HTTP/1.1\r\n\r\n").as_bytes()).unwrap();
        assert!(read_head(&mut s).starts_with("HTTP/1.1 200"), "{path}");
        // The next answer on the connection starts right after the head: no stray body bytes.
        assert_eq!(get(&mut s, "/healthz").1, b"ok", "after HEAD {path}");
    }
    stop(running, Duration::from_secs(2));
}

#[test]
fn workers_get_one_request_each_so_unsent_output_stays_near_its_budget() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (mut r, ends, _wake) = Reactor::new(listener, Arc::new(Fake::default()), limits(), Arc::default()).unwrap();
    // Ten connections with a request each, waiting for a worker.
    let clients: Vec<TcpStream> = (0..10).map(|_| connect(addr)).collect();
    for id in 0..10 {
        let (stream, _) = r.listener.accept().unwrap();
        let now = Instant::now();
        let conn = Conn {
            stream,
            buf: Vec::new(),
            state: State::Queued { at_worker: false },
            served: 1,
            peer_done: false,
            deadline: now,
            idle_since: now,
        };
        r.conns.insert(id, conn);
        let req =
            Request { method: "GET".into(), path: "/big".into(), query: String::new(), close: false, http_1_0: false };
        r.ready.push_back((id, req));
    }
    r.dispatch();
    assert_eq!((r.in_flight, ends.jobs.len(), r.ready.len()), (2, 2, 8), "not all ten at once");
    // A worker answers: its reply is collected (and counted as unsent output) before the
    // next request is handed over.
    let (id, req) = ends.jobs.try_recv().unwrap();
    ends.replies.send((id, answer(&Fake::default(), &req))).unwrap();
    r.collect_replies();
    r.dispatch();
    assert_eq!((r.in_flight, r.ready.len()), (2, 7));
    drop(clients);
}

#[test]
fn an_idle_connection_gives_back_the_buffer_of_a_large_request_head() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (mut r, _ends, _wake) = Reactor::new(listener, Arc::new(Fake::default()), limits(), Arc::default()).unwrap();
    let _client = connect(addr);
    let (stream, _) = r.listener.accept().unwrap();
    let now = Instant::now();
    let buf = format!("GET /healthz HTTP/1.1\r\nX-Pad: {}\r\n\r\n", "p".repeat(60 << 10)).into_bytes();
    let conn = Conn {
        stream,
        buf,
        state: State::Reading { started: true },
        served: 0,
        peer_done: false,
        deadline: now,
        idle_since: now,
    };
    r.conns.insert(0, conn);
    r.advance(0);
    let c = &r.conns[&0];
    assert!(matches!(c.state, State::Reading { started: false }), "answered inline and idle again");
    assert!(c.buf.capacity() <= KEEP_BUF, "an idle connection keeps {} bytes of buffer", c.buf.capacity());
}

#[test]
fn a_request_that_no_worker_takes_in_time_gets_503_and_frees_its_slot() {
    // Two workers busy with /slow (2 s) for longer than the 700 ms deadline of the third.
    let (running, addr, stats, _health) = start(limits());
    let mut clients: Vec<TcpStream> = (0..3).map(|_| connect(addr)).collect();
    for s in &mut clients {
        s.write_all(b"GET /slow HTTP/1.1\r\n\r\n").unwrap();
    }
    let heads: Vec<String> = clients.iter_mut().map(|s| read_response(s).0).collect();
    let busy: Vec<&String> = heads.iter().filter(|h| h.starts_with("HTTP/1.1 503")).collect();
    assert_eq!(busy.len(), 1, "{heads:?}");
    assert!(busy[0].contains("Connection: close"), "{heads:?}");
    assert_eq!(heads.iter().filter(|h| h.starts_with("HTTP/1.1 200")).count(), 2, "{heads:?}");
    assert!(stats.timeouts.load(Ordering::Relaxed) >= 1);
    stop(running, Duration::from_secs(5));
}

#[test]
fn stop_wakes_the_reactor_and_the_workers_at_once() {
    let (running, addr, _stats, health) = start(Limits { idle_timeout: Duration::from_secs(3600), ..limits() });
    let mut idle = connect(addr);
    assert_eq!(get(&mut idle, "/big").1.len(), 1 << 20);
    assert_eq!(health.alive(), vec!["fl-api", "fl-api-work", "fl-api-work"]);
    // Nothing has a deadline within the stop's 2 s (the idle timeout is an hour): only the
    // stop can wake it.
    stop(running, Duration::from_secs(2));
    assert!(health.alive().is_empty() && health.dead().is_empty());
    assert!(closed_by_server(&mut idle), "open connections are closed");
}

#[test]
fn a_worker_still_answering_past_the_stop_timeout_is_named() {
    let fake = Arc::new(Fake::default());
    let (running, addr, _stats, _health) = start_with(fake.clone(), limits());
    let mut s = connect(addr);
    s.write_all(b"GET /slow HTTP/1.1\r\n\r\n").unwrap();
    wait_until("a worker answering /slow", Duration::from_secs(10), || fake.slow_started.load(Ordering::Relaxed) == 1);
    let late = running.stop(Duration::from_millis(300));
    let names: Vec<&str> = late.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["fl-api-work"], "the reactor and the idle worker stopped");
    assert_eq!(late[0].to_string(), "fl-api-work did not stop within 300ms");
}

#[test]
fn the_poll_waits_without_a_timeout_when_nothing_has_a_deadline() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (mut r, _ends, _wake) = Reactor::new(listener, Arc::new(Fake::default()), limits(), Arc::default()).unwrap();
    assert_eq!(r.next_wakeup(), None, "no connections, no pause: poll until woken");
    let _client = connect(addr);
    let (stream, _) = r.listener.accept().unwrap();
    let now = Instant::now();
    let queued_at_worker = Conn {
        stream,
        buf: Vec::new(),
        state: State::Queued { at_worker: true },
        served: 1,
        peer_done: false,
        deadline: now,
        idle_since: now,
    };
    r.conns.insert(0, queued_at_worker);
    assert_eq!(r.next_wakeup(), None, "a request at a worker is ended by its answer, not a deadline");
    r.conns.get_mut(&0).unwrap().state = State::Reading { started: false };
    assert_eq!(r.next_wakeup(), Some(now), "an idle connection's deadline");
}
