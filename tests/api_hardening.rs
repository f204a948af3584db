//! The local API against hostile clients and a failing machine, on a real agent process:
//! fd exhaustion, many idle connections, a client that never reads, huge request heads.
//! Timeouts here are generous upper bounds for a loaded machine, not timing assertions.

use crate::common;

use common::{manifest, wait_for, AgentProcess, Sandbox};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::Duration;

fn connect(agent: &AgentProcess) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// One request on an open connection; returns (status line and headers, body).
fn request(s: &mut TcpStream, path: &str) -> std::io::Result<(String, String)> {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())?;
    read_response(s)
}

fn read_response(s: &mut TcpStream) -> std::io::Result<(String, String)> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let len: usize = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    s.read_exact(&mut body)?;
    Ok((head, String::from_utf8_lossy(&body).into_owned()))
}

/// A GET on a fresh connection with a 20 s limit, as a health checker would send it.
fn fresh_get(agent: &AgentProcess, path: &str) -> Result<(u16, String), String> {
    let config =
        ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(20))).http_status_as_error(false).build();
    let client: ureq::Agent = config.into();
    let mut resp = client.get(&format!("http://127.0.0.1:{}{path}", agent.port)).call().map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    Ok((status, resp.body_mut().read_to_string().map_err(|e| e.to_string())?))
}

fn proc_status(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = text.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// CPU time (user + system, in clock ticks) of the thread of `pid` named `name`.
fn thread_ticks(pid: u32, name: &str) -> u64 {
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        if std::fs::read_to_string(task.path().join("comm")).unwrap_or_default().trim() == name {
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap();
            // Fields after the `(comm)`: state is the 3rd field, utime the 14th, stime the 15th.
            let rest: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
            return rest[11].parse::<u64>().unwrap() + rest[12].parse::<u64>().unwrap();
        }
    }
    panic!("no thread {name} in {pid}")
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

/// Sets the soft RLIMIT_NOFILE of process `pid`; returns the old limits.
fn set_nofile(pid: u32, soft: u64) -> libc::rlimit {
    let mut old = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: reading the limits of our own child into a struct we own.
    assert_eq!(unsafe { libc::prlimit(pid as i32, libc::RLIMIT_NOFILE, std::ptr::null(), &mut old) }, 0);
    let new = libc::rlimit { rlim_cur: soft, rlim_max: old.rlim_max };
    // SAFETY: changing the fd limit of our own child; both pointers are valid.
    assert_eq!(unsafe { libc::prlimit(pid as i32, libc::RLIMIT_NOFILE, &new, std::ptr::null_mut()) }, 0);
    old
}

/// Waits until the agent holds what it keeps open once started: the first stats collection
/// made, the eviction manager's kernel notifications armed (cgroup v1: the root's and
/// `kubepods`'), and its 1 s memory watch's files open. Until then other threads open files,
/// and close some, beside the API's.
fn settled(agent: &AgentProcess) {
    wait_for("the first stats collection", Duration::from_secs(20), || agent.get("/stats/summary").ok());
    let armed = std::time::Instant::now() + Duration::from_secs(5);
    while agent.log_text().matches("notification armed").count() < 2 && std::time::Instant::now() < armed {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1200));
}

#[test]
fn fd_exhaustion_is_reported_by_healthz_and_the_listener_recovers() {
    let sb = Sandbox::new();
    let agent = AgentProcess::start(&sb);
    let pid = agent.child.id();
    settled(&agent);
    let mut keep = connect(&agent);
    assert_eq!(request(&mut keep, "/healthz").unwrap().1, "ok");

    // Leave the agent a few fds, then connect more clients than it can accept.
    let old = set_nofile(pid, open_fds(pid) as u64 + 4);
    let flood: Vec<TcpStream> = (0..40).map(|_| TcpStream::connect(("127.0.0.1", agent.port)).unwrap()).collect();
    let unhealthy = wait_for("/healthz to report the listener", Duration::from_secs(30), || {
        let (head, body) = request(&mut keep, "/healthz").unwrap();
        (head.starts_with("HTTP/1.1 500") && body.contains("api listener")).then_some(body)
    });
    assert!(unhealthy.contains("Too many open files"), "{unhealthy}");
    let node = request(&mut keep, "/node").unwrap().1;
    assert!(node.contains("\"KubeletNotReady\""), "Ready is False while the listener is down: {node}");

    // Give the fds back: new connections are served again, and /healthz is ok.
    drop(flood);
    // SAFETY: restoring the limits of our own child.
    assert_eq!(unsafe { libc::prlimit(pid as i32, libc::RLIMIT_NOFILE, &old, std::ptr::null_mut()) }, 0);
    wait_for("a new connection to be served", Duration::from_secs(30), || {
        fresh_get(&agent, "/healthz").ok().filter(|(status, _)| *status == 200)
    });
    // Recovered and idle, the reactor sleeps in poll: no busy loop left over from the pause.
    let before = thread_ticks(pid, "fl-api");
    std::thread::sleep(Duration::from_secs(2));
    let spent = thread_ticks(pid, "fl-api") - before;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    assert!(spent < hz / 2, "the idle reactor used {spent} ticks of CPU in 2 s (at {hz} per second)");
    let log = agent.log_text();
    assert_eq!(log.matches("api: accept failed").count(), 1, "one line per burst:\n{log}");
    assert!(log.contains("api: accepting connections again"), "{log}");
}

#[test]
fn idle_connections_are_bounded_and_cost_no_thread() {
    let sb = Sandbox::new();
    let agent = AgentProcess::start(&sb);
    let pid = agent.child.id();
    settled(&agent);
    let (fds_before, threads_before) = (open_fds(pid), proc_status(pid, "Threads:"));
    let idle: Vec<TcpStream> = (0..700).map(|_| TcpStream::connect(("127.0.0.1", agent.port)).unwrap()).collect();
    std::thread::sleep(Duration::from_secs(1));
    let (status, body) = fresh_get(&agent, "/healthz").unwrap();
    assert_eq!((status, body.as_str()), (200, "ok"), "a new client is served beside 700 idle ones");
    let (fds, threads) = (open_fds(pid), proc_status(pid, "Threads:"));
    assert!(
        fds <= fds_before + 512 + 2,
        "the agent holds {fds} fds (before: {fds_before}); the cap is 512 connections"
    );
    assert!(threads <= threads_before + 2, "{threads} threads with 700 idle connections (before: {threads_before})");
    let metrics = fresh_get(&agent, "/metrics").unwrap().1;
    let evicted = metrics.lines().find(|l| l.starts_with("ferrolet_api_evicted_total ")).unwrap();
    assert_ne!(evicted, "ferrolet_api_evicted_total 0", "{metrics}");
    drop(idle);
}

#[test]
fn a_client_that_never_reads_its_responses_blocks_nobody() {
    let sb = Sandbox::new();
    let containers: String = (0..4)
        .map(|i| format!("  - name: c{i}\n    image: x\n    command: [sleep, '60']\n    env:\n    - {{name: PAD, value: '{}'}}\n", "p".repeat(200)))
        .collect();
    sb.write_manifest("web.yaml", &manifest("web", &format!("  containers:\n{containers}")));
    let agent = AgentProcess::start(&sb);
    wait_for("events of the started pod", Duration::from_secs(20), || {
        agent.get("/events").ok().filter(|e| e.matches("\"Started\"").count() >= 4)
    });

    let hostile = TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
    let rcvbuf: libc::c_int = 1024;
    // SAFETY: setsockopt on our own socket with a pointer to a c_int of that size.
    let rc = unsafe {
        libc::setsockopt(
            hostile.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &rcvbuf as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
    // 1000 responses of ~6 KB: more than the 4 MiB send buffer Linux grows a loopback socket to
    // (60 were enough on a machine with more events), so the writes must wait for the client.
    (&hostile).write_all("GET /events HTTP/1.1\r\nHost: t\r\n\r\n".repeat(1000).as_bytes()).unwrap();
    std::thread::sleep(Duration::from_secs(1));

    for path in ["/healthz", "/pods", "/events", "/healthz"] {
        let (status, _) = fresh_get(&agent, path).unwrap_or_else(|e| panic!("{path} beside a non-reading client: {e}"));
        assert_eq!(status, 200, "{path}");
    }
    // The server gives up on the non-reading client at its write deadline (10 s) and resets it.
    wait_for("the write deadline to close the non-reading client", Duration::from_secs(40), || {
        let metrics = fresh_get(&agent, "/metrics").ok()?.1;
        metrics.lines().any(|l| l.starts_with("ferrolet_api_timeouts_total ") && !l.ends_with(" 0")).then_some(())
    });
    hostile.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = vec![0u8; 64 << 10];
    let closed = loop {
        match (&hostile).read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(_) => break false,
        }
    };
    assert!(closed, "the non-reading client's connection is closed");
}

#[test]
fn huge_request_lines_and_headers_are_refused_without_being_buffered() {
    let sb = Sandbox::new();
    let agent = AgentProcess::start(&sb);
    let pid = agent.child.id();

    let mut s = connect(&agent);
    s.write_all(format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(64 << 10)).as_bytes()).unwrap();
    let (head, _) = read_response(&mut s).unwrap();
    assert!(head.starts_with("HTTP/1.1 414"), "{head}");

    let mut s = connect(&agent);
    let headers: String = (0..101).map(|i| format!("X-H{i}: v\r\n")).collect();
    s.write_all(format!("GET /healthz HTTP/1.1\r\n{headers}\r\n").as_bytes()).unwrap();
    assert!(read_response(&mut s).unwrap().0.starts_with("HTTP/1.1 431"));

    let mut s = connect(&agent);
    s.write_all(format!("GET /healthz HTTP/1.1\r\nX-Big: {}\r\n\r\n", "b".repeat(70 << 10)).as_bytes()).unwrap();
    assert!(read_response(&mut s).unwrap().0.starts_with("HTTP/1.1 431"));

    // A 256 MiB request line: the agent stops reading it; its peak RSS stays small.
    let port = agent.port;
    let sender = std::thread::spawn(move || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        let chunk = vec![b'a'; 1 << 20];
        let mut sent = 0usize;
        let mut result = s.write_all(b"GET /");
        while result.is_ok() && sent < 256 << 20 {
            result = s.write_all(&chunk);
            sent += chunk.len();
        }
        (sent, result.err().map(|e| e.kind()))
    });
    let (sent, error) = sender.join().unwrap();
    assert!(sent < 256 << 20, "the agent read the whole 256 MiB line");
    assert!(
        matches!(error, Some(std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset)),
        "the agent closes the connection instead of waiting: {error:?} after {sent} bytes"
    );
    let peak_kib = proc_status(pid, "VmHWM:");
    assert!(peak_kib < 100 << 10, "agent peak RSS {peak_kib} KiB after a 256 MiB request line");
    assert_eq!(fresh_get(&agent, "/healthz").unwrap(), (200, "ok".to_string()));
}

#[test]
fn agent_log_lines_carry_a_utc_timestamp_unless_journald_adds_one() {
    let sb = Sandbox::new();
    let agent = AgentProcess::start(&sb);
    let log = agent.log_text();
    assert!(!log.is_empty());
    for line in log.lines() {
        let (ts, rest) = line.split_once(' ').unwrap_or_else(|| panic!("{line:?}"));
        assert!(ts.len() == 24 && ts.ends_with('Z') && ts.as_bytes()[19] == b'.', "not RFC 3339 with ms: {line:?}");
        assert!(ferrolet::base::timefmt::parse_rfc3339(ts).is_some(), "{line:?}");
        assert!(rest.starts_with('['), "{line:?}");
    }
    drop(agent);

    // Under systemd, stderr is the journal stream named by JOURNAL_STREAM: no timestamp, and
    // the level as a syslog priority prefix.
    use std::os::unix::fs::MetadataExt as _;
    let port = common::free_port();
    let cfg = sb.dir.path().join("journal.toml");
    std::fs::write(&cfg, sb.config_text(port)).unwrap();
    let log_path = sb.dir.path().join("journal.log");
    let stderr = std::fs::File::create(&log_path).unwrap();
    let meta = stderr.metadata().unwrap();
    let mut child = std::process::Command::new(common::ferrolet_bin())
        .args(["run", "--config"])
        .arg(&cfg)
        .env("RUST_LOG", "info")
        .env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let text = wait_for("the agent to log", Duration::from_secs(20), || {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        text.contains("api: serving").then_some(text)
    });
    let _ = child.kill();
    let _ = child.wait();
    let line = text.lines().find(|l| l.contains("api: serving")).unwrap();
    assert!(line.starts_with("<6>[INFO ] api: serving"), "{line:?}");
}

#[test]
fn service_units_raise_the_fd_limit_above_what_the_api_may_take() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let unit = std::fs::read_to_string(root.join("etc/systemd/ferrolet.service")).unwrap();
    let nofile: u64 = unit.lines().find_map(|l| l.strip_prefix("LimitNOFILE=")).expect("LimitNOFILE").parse().unwrap();
    let openrc = std::fs::read_to_string(root.join("etc/openrc/ferrolet")).unwrap();
    let ulimit = openrc.lines().find_map(|l| l.strip_prefix("rc_ulimit=\"-n ")).expect("rc_ulimit -n");
    assert_eq!(ulimit.trim_end_matches('"').parse::<u64>().unwrap(), nofile);
    // The API's connection cap (a quarter of the limit, at most 512) leaves the rest to pods.
    assert!(nofile >= 4 * ferrolet::server::conn::MAX_CONNECTIONS as u64, "{nofile}");
}
