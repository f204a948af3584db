//! The HTTP probe client against scripted servers on 127.0.0.1.

use super::*;
use crate::base::manager::Health;
use crate::node::prober::probes::{self, Outcome, Target};
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

/// A server that answers one connection per reply, in order, over TLS with `tls`, and sends
/// each request head it read on the returned channel.
fn serve_with(replies: Vec<(Vec<u8>, After)>, tls: Option<Arc<rustls::ServerConfig>>) -> (u16, Receiver<String>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::spawn(move || {
        for (reply, after) in replies {
            let Ok((c, _)) = l.accept() else { return };
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut c: Box<dyn Io> = match &tls {
                Some(config) => {
                    Box::new(rustls::StreamOwned::new(rustls::ServerConnection::new(config.clone()).unwrap(), c))
                }
                None => Box::new(c),
            };
            let (mut req, mut b) = (Vec::new(), [0u8; 1024]);
            while !req.ends_with(b"\r\n\r\n") {
                match c.read(&mut b) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&b[..n]),
                }
            }
            let _ = tx.send(String::from_utf8_lossy(&req).into_owned());
            let _ = c.write_all(&reply).and_then(|()| c.flush());
            if let After::Hold = after {
                let _ = c.read(&mut b);
            }
        }
    });
    (port, rx)
}

trait Io: Read + Write {}
impl<T: Read + Write> Io for T {}

fn serve(replies: Vec<(Vec<u8>, After)>) -> (u16, Receiver<String>) {
    serve_with(replies, None)
}

/// A TLS server's configuration: the test certificate, only `version`.
fn tls_server(version: &'static rustls::SupportedProtocolVersion) -> Arc<rustls::ServerConfig> {
    let cert = rustls::pki_types::CertificateDer::from(include_bytes!("../testdata/probe-tls.crt.der").to_vec());
    let key = rustls::pki_types::PrivatePkcs8KeyDer::from(include_bytes!("../testdata/probe-tls.key.der").to_vec());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[version])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key.into())
        .unwrap();
    Arc::new(config)
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
    crate::base::errors::Chain(&r.unwrap_err()).to_string()
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
    probe_with("HTTP", port, path, headers)
}

fn probe_with(scheme: &str, port: u16, path: &str, headers: &[(&str, &str)]) -> Outcome {
    let h = crate::api::HttpGetAction {
        path: path.into(),
        port: crate::api::IntOrString::Int(port.into()),
        host: String::new(),
        scheme: scheme.into(),
        http_headers: headers.iter().map(|(n, v)| HttpHeader { name: (*n).into(), value: (*v).into() }).collect(),
    };
    let t = Target { pod_ip: "127.0.0.1".into(), container: Arc::default(), container_id: String::new() };
    probes::http(
        &h,
        &t,
        Duration::from_secs(5),
        &crate::node::prober::resolve::Lookups::new(&crate::base::manager::Health::default()),
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

/// A header field as a probe gives it: name, value.
type Field = (&'static str, &'static str);

#[test]
fn the_request_is_kubelets_whatever_the_headers() {
    let kubelets = |extra: &str| {
        format!("GET / HTTP/1.1\r\nHost: h:80\r\nUser-Agent: {USER_AGENT}\r\nAccept: */*\r\n{extra}Connection: close\r\n\r\n")
    };
    // (what, the probe's headers, the request sent)
    let cases: &[(&str, &[Field], String)] = &[
        ("none: kubelet's defaults", &[], kubelets("")),
        ("the probe's own, as given", &[("x-a", " 1 "), ("X-A", "2")], kubelets("x-a:  1 \r\nX-A: 2\r\n")),
        (
            "Host replaces the authority",
            &[("host", "app.example")],
            "GET / HTTP/1.1\r\nHost: app.example\r\nUser-Agent: kube-probe/1.35\r\nAccept: */*\r\nConnection: close\r\n\r\n".into(),
        ),
        ("an empty Host is the authority", &[("Host", "")], kubelets("")),
        (
            "a User-Agent replaces the default",
            &[("User-Agent", "mine")],
            "GET / HTTP/1.1\r\nHost: h:80\r\nAccept: */*\r\nUser-Agent: mine\r\nConnection: close\r\n\r\n".into(),
        ),
        (
            "an Accept replaces the default",
            &[("accept", "text/plain")],
            "GET / HTTP/1.1\r\nHost: h:80\r\nUser-Agent: kube-probe/1.35\r\naccept: text/plain\r\nConnection: close\r\n\r\n".into(),
        ),
        (
            "a first Accept that is empty removes them all",
            &[("Accept", ""), ("Accept", "text/plain")],
            "GET / HTTP/1.1\r\nHost: h:80\r\nUser-Agent: kube-probe/1.35\r\nConnection: close\r\n\r\n".into(),
        ),
        (
            "a later empty Accept is sent as given",
            &[("Accept", "a"), ("Accept", "")],
            "GET / HTTP/1.1\r\nHost: h:80\r\nUser-Agent: kube-probe/1.35\r\nAccept: a\r\nAccept: \r\nConnection: close\r\n\r\n".into(),
        ),
    ];
    for (what, headers, want) in cases {
        let headers: Vec<_> =
            headers.iter().map(|(n, v)| HttpHeader { name: (*n).into(), value: (*v).into() }).collect();
        let mut req = Vec::new();
        build_request(&mut req, "user@h:80", "/", &headers).unwrap();
        assert_eq!(String::from_utf8(req).unwrap(), *want, "{what}");
    }
}

#[test]
fn headers_and_targets_that_cannot_be_sent_are_refused() {
    for (name, value, target, want) in [
        ("X A", "1", "/", "invalid header field name for \"X A\""),
        ("", "1", "/", "invalid header field name for \"\""),
        ("X-A", "a\r\nX-Injected: 1", "/", "invalid header field value for \"X-A\""),
        ("X-A", "\x7f", "/", "invalid header field value for \"X-A\""),
        ("X-A", "tab\tok", "/a b", "invalid request target \"/a b\""),
    ] {
        let headers = [HttpHeader { name: name.into(), value: value.into() }];
        let e = build_request(&mut Vec::new(), "h", target, &headers).unwrap_err();
        assert_eq!(e.to_string(), want);
    }
}

#[test]
fn urls_give_their_scheme_authority_and_port() {
    assert_eq!(split_url("http://h:1/p?q#f").unwrap(), (false, "h:1", "/p?q"));
    assert_eq!(split_url("https://[::1]").unwrap(), (true, "[::1]", "/"));
    assert!(split_url("ftp://h/").is_err());
    assert_eq!(host_port("h", 443).unwrap(), ("h", 443));
    assert_eq!(host_port("u@[::1]:8443", 443).unwrap(), ("::1", 8443));
    assert!(host_port(":80", 80).is_err());
}

#[test]
fn https_probes_send_the_same_request_over_tls_1_2_and_1_3() {
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec();
        let (port, requests) = serve_with(vec![(reply, After::Close)], Some(tls_server(version)));
        let headers = [("Accept", ""), ("X-A", "1")];
        assert_eq!(probe_with("HTTPS", port, "/p", &headers), Outcome::Success("ok".into()), "{version:?}");
        let req = requests.recv_timeout(Duration::from_secs(5)).unwrap();
        let want = format!(
            "GET /p HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: {USER_AGENT}\r\nX-A: 1\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(req, want, "{version:?}");
    }
}

#[test]
fn an_https_same_host_redirect_is_followed_over_tls() {
    let (port, requests) = serve_with(
        vec![
            (b"HTTP/1.1 301 Moved\r\nLocation: /next\r\n\r\n".to_vec(), After::Close),
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7\r\narrived\r\n0\r\n\r\n".to_vec(), After::Hold),
        ],
        Some(tls_server(&rustls::version::TLS13)),
    );
    assert_eq!(probe_with("HTTPS", port, "/first", &[]), Outcome::Success("arrived".into()));
    assert!(requests.recv_timeout(Duration::from_secs(5)).unwrap().starts_with("GET /first HTTP/1.1\r\n"));
    assert!(requests.recv_timeout(Duration::from_secs(5)).unwrap().starts_with("GET /next HTTP/1.1\r\n"));
}

#[test]
fn an_https_probe_to_a_plain_http_server_fails_its_handshake() {
    // It answers at once: the ClientHello never ends a request head.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        if let Ok((mut c, _)) = l.accept() {
            let _ = c.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    match probe_with("HTTPS", port, "/", &[]) {
        Outcome::Failure(m) => assert_eq!(
            m,
            format!(
                "Get \"https://127.0.0.1:{port}/\": TLS handshake: received corrupt message of type InvalidContentType"
            )
        ),
        o => panic!("{o:?}"),
    }
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
        let mut stream = Deadlined { stream: &client, deadline: Instant::now() + Duration::from_secs(10) };
        Conn { stream: &mut stream, buf: &mut buf, pos: 0, end: 0 }.response()
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

    /// A response read by `parse_response` as `reply` arrives in pieces (cut at `cuts`): each
    /// piece's answer, when it has one, and the final answer at end of file, as text.
    fn parse_in_pieces(reply: &[u8], cuts: &[usize]) -> Vec<String> {
        let show = |r: Result<Option<Response>, HttpGetError>| r.transpose().map(shown);
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (reply.len() + 1)).collect();
        cuts.sort_unstable();
        let mut answers: Vec<String> = cuts.iter().filter_map(|&c| show(parse_response(&reply[..c], false))).collect();
        answers.extend(show(parse_response(reply, true)));
        answers
    }

    /// A response in full; an error by its kind (the line it quotes is the part read when it
    /// was found, which depends on how the bytes arrived, on a socket as here).
    fn shown(r: Result<Response, HttpGetError>) -> String {
        match r {
            Ok(r) => format!("{} {:?} {:?}", r.status, r.location, r.body),
            Err(e) => format!("{e:?}").split([' ', '{', '(']).next().unwrap_or_default().to_string(),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn a_reply_read_in_pieces_gives_what_the_socket_reader_gives(
            head in prop::sample::select(vec![
                "",
                "HTTP/1.1 200 OK\r\n",
                "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
                "HTTP/1.1 302 Found\r\nLocation: /x\r\n\r\n",
                "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            ]),
            chunked_body in prop::collection::vec(b'a'..=b'z', 0..64),
            bytes in prop::collection::vec(any::<u8>(), 0..256),
            cuts in prop::collection::vec(any::<usize>(), 0..6),
        ) {
            let mut reply = head.as_bytes().to_vec();
            if head.ends_with("chunked\r\n\r\n") {
                reply.extend_from_slice(&chunked(&chunked_body, &[3, 7], false));
            }
            reply.extend_from_slice(&bytes);
            let want = shown(read_reply(&reply));
            for answer in parse_in_pieces(&reply, &cuts) {
                prop_assert_eq!(&answer, &want);
            }
        }

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
