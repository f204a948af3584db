//! HTTP/1.1 as far as the local API needs it, as pure functions: parsing a request head
//! with hard bounds (request line, header count, header bytes) and writing a response.
//! No I/O here; `conn` feeds bytes in and writes bytes out. Heads are parsed by `httphead`.

use crate::base::httphead::{self, RequestPart};

/// Longest request line accepted (method, target, version), as the request-URI limit of
/// common servers (nginx, Go's own 8 KiB line buffer); longer is `414 URI Too Long`.
pub const MAX_REQUEST_LINE: usize = 8 * 1024;
/// Most bytes of header lines after the request line; more is `431`.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Most header fields; more is `431`.
pub const MAX_HEADERS: usize = 100;
/// The most a connection buffers while it waits for a complete request head.
pub const MAX_HEAD: usize = MAX_REQUEST_LINE + MAX_HEADER_BYTES;

/// A parsed request head. Bodies are never read: a request that announces one is answered
/// and its connection closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path, before `?`.
    pub path: String,
    /// The raw query, after `?` (empty when there is none).
    pub query: String,
    /// The connection must close after the response (HTTP/1.0, `Connection: close`, a body).
    pub close: bool,
    /// HTTP/1.0: a connection kept open must be confirmed with `Connection: keep-alive`.
    pub http_1_0: bool,
}

/// Why a request head was refused; each maps to a status code and closes the connection.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// The request line is longer than `MAX_REQUEST_LINE`.
    #[error("request line longer than {MAX_REQUEST_LINE} bytes")]
    LineTooLong,
    /// More than `MAX_HEADERS` header fields.
    #[error("more than {MAX_HEADERS} header fields")]
    TooManyHeaders,
    /// Header lines longer than `MAX_HEADER_BYTES` in total.
    #[error("header fields longer than {MAX_HEADER_BYTES} bytes in total")]
    HeadersTooLarge,
    /// Not HTTP/1.x, or a malformed line.
    #[error("malformed request: {0}")]
    Malformed(&'static str),
}

impl HeadError {
    /// The status code the client gets.
    pub fn status(&self) -> u16 {
        match self {
            HeadError::LineTooLong => 414,
            HeadError::TooManyHeaders | HeadError::HeadersTooLarge => 431,
            HeadError::Malformed(_) => 400,
        }
    }
}

/// The outcome of looking at the bytes received so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// More bytes are needed (and allowed).
    Incomplete,
    /// A request, and how many bytes of the buffer its head used.
    Complete(Request, usize),
    /// The head breaks a rule; answer `error.status()` and close.
    Refused(HeadError),
}

/// Looks for one request head at the start of `buf`. Every bound is checked on partial
/// input too, so a client can never make the caller buffer more than `MAX_HEAD` bytes.
pub fn parse_head(buf: &[u8]) -> Parsed {
    let mut fields = [httphead::EMPTY_HEADER; MAX_HEADERS];
    let head = match bounded_head(buf, &mut fields) {
        Ok(Some(head)) => head,
        Ok(None) => return Parsed::Incomplete,
        Err(e) => return Parsed::Refused(e),
    };
    // HTTP/1.0 closes unless asked to keep alive; a body we will not read always closes,
    // whatever order the fields come in.
    let (mut close_token, mut keep_alive_token, mut body) = (false, false, false);
    for field in head.headers {
        let Ok(value) = std::str::from_utf8(field.value) else {
            return Parsed::Refused(HeadError::Malformed("header field is not UTF-8"));
        };
        let (name, value) = (field.name, value.trim());
        if name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                close_token |= token.eq_ignore_ascii_case("close");
                keep_alive_token |= token.eq_ignore_ascii_case("keep-alive");
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding")
            || (name.eq_ignore_ascii_case("content-length") && value != "0")
        {
            // A body we will not read: the connection cannot carry another request.
            body = true;
        }
    }
    let close = body || close_token || (head.minor == 0 && !keep_alive_token);
    let (path, query) = match head.target.split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (head.target.to_string(), String::new()),
    };
    let request = Request { method: head.method.to_string(), path, query, close, http_1_0: head.minor == 0 };
    Parsed::Complete(request, head.len)
}

/// The request head at the start of `buf` parsed into `fields`, within the bounds
/// (`MAX_REQUEST_LINE`, `MAX_HEADER_BYTES`, `fields.len()`), which are checked on partial
/// input too; `Ok(None)` while it is incomplete. The target must be an absolute path.
pub fn bounded_head<'h, 'b>(
    buf: &'b [u8],
    fields: &'h mut [httphead::Header<'b>],
) -> Result<Option<httphead::RequestHead<'h, 'b>>, HeadError> {
    let line_end = buf.iter().position(|&b| b == b'\n');
    if line_end.unwrap_or(buf.len()) > MAX_REQUEST_LINE {
        return Err(HeadError::LineTooLong);
    }
    // Bytes after the request line: the header fields and their blank line.
    let header_bytes = |end: usize| line_end.map_or(0, |l| end.saturating_sub(l + 1));
    let head = match httphead::request(buf, fields) {
        Ok(Some(head)) => head,
        Ok(None) if header_bytes(buf.len()) > MAX_HEADER_BYTES => return Err(HeadError::HeadersTooLarge),
        Ok(None) => return Ok(None),
        Err((e, part)) => return Err(refusal(e, part)),
    };
    if header_bytes(head.len) > MAX_HEADER_BYTES {
        return Err(HeadError::HeadersTooLarge);
    }
    if !head.target.starts_with('/') {
        return Err(HeadError::Malformed("the target must be an absolute path"));
    }
    Ok(Some(head))
}

/// The answer to a head httparse refused.
fn refusal(e: httphead::Error, part: RequestPart) -> HeadError {
    match (e, part) {
        (httphead::Error::TooManyHeaders, _) => HeadError::TooManyHeaders,
        (_, RequestPart::Method) => HeadError::Malformed("bad method"),
        (_, RequestPart::Target) => HeadError::Malformed("request line is not METHOD TARGET VERSION"),
        (_, RequestPart::Version) => HeadError::Malformed("only HTTP/1.0 and HTTP/1.1 are served"),
        (httphead::Error::HeaderName, _) => HeadError::Malformed("bad header field name"),
        (httphead::Error::HeaderValue, _) => HeadError::Malformed("bad header field value"),
        _ => HeadError::Malformed("bad line end"),
    }
}

/// A response; `close` ends the connection after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
    /// Close the connection after this response.
    pub close: bool,
    /// Say `Connection: keep-alive` (an HTTP/1.0 client otherwise waits for the close).
    pub keep_alive: bool,
    /// The answer to a HEAD request: its headers (`Content-Length` included), no body.
    pub head: bool,
}

impl Response {
    /// A response with a text body.
    pub fn text(status: u16, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into().into_bytes(),
            close: false,
            keep_alive: false,
            head: false,
        }
    }

    /// A response with a JSON body.
    pub fn json(body: String) -> Response {
        Response {
            status: 200,
            content_type: "application/json",
            body: body.into_bytes(),
            close: false,
            keep_alive: false,
            head: false,
        }
    }

    /// The answer to a refused head: its status, and the connection closes.
    pub fn refused(e: &HeadError) -> Response {
        Response { close: true, ..Response::text(e.status(), format!("{e}\n")) }
    }

    /// Status line, headers and body, ready to write.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nX-Content-Type-Options: nosniff\r\n{}\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len(),
            match (self.close, self.keep_alive) {
                (true, _) => "Connection: close\r\n",
                (false, true) => "Connection: keep-alive\r\n",
                (false, false) => "",
            }
        )
        .into_bytes();
        if !self.head {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

/// The reason phrase of `status`.
pub fn reason(status: u16) -> &'static str {
    match status {
        101 => "Switching Protocols",
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        414 => "URI Too Long",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        429 => "Too Many Requests",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(buf: &[u8]) -> (Request, usize) {
        match parse_head(buf) {
            Parsed::Complete(r, n) => (r, n),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn pipelined_requests_are_parsed_one_head_at_a_time() {
        let buf = b"GET /events?kind=Pod HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\n\r\n";
        let (r, n) = complete(buf);
        assert_eq!(
            (r.method.as_str(), r.path.as_str(), r.query.as_str(), r.close),
            ("GET", "/events", "kind=Pod", false)
        );
        let (r, m) = complete(&buf[n..]);
        assert_eq!((r.path.as_str(), n + m), ("/healthz", buf.len()));
    }

    #[test]
    fn partial_heads_wait_for_more_bytes() {
        assert_eq!(parse_head(b"GET /pods HT"), Parsed::Incomplete);
        assert_eq!(parse_head(b"GET /pods HTTP/1.1\r\nHost: x\r\n"), Parsed::Incomplete);
    }

    #[test]
    fn connection_close_http_1_0_and_bodies_close_the_connection() {
        assert!(complete(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").0.close);
        assert!(complete(b"GET / HTTP/1.0\r\n\r\n").0.close);
        let (r, _) = complete(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
        assert!(!r.close && r.http_1_0);
        assert!(!complete(b"GET / HTTP/1.1\r\n\r\n").0.http_1_0);
        assert!(complete(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello").0.close);
        assert!(complete(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").0.close);
        // A later keep-alive cannot reopen a connection whose unread body follows the head.
        assert!(complete(b"POST / HTTP/1.0\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello").0.close);
        assert!(complete(b"GET / HTTP/1.0\r\nConnection: close, keep-alive\r\n\r\n").0.close);
    }

    #[test]
    fn a_long_request_line_is_414_even_before_its_end_arrives() {
        let mut buf = b"GET /".to_vec();
        buf.resize(MAX_REQUEST_LINE + 1, b'a');
        assert_eq!(parse_head(&buf), Parsed::Refused(HeadError::LineTooLong));
        buf.extend_from_slice(b" HTTP/1.1\r\n\r\n");
        assert_eq!(parse_head(&buf), Parsed::Refused(HeadError::LineTooLong));
        let mut ok = b"GET /".to_vec();
        ok.resize(MAX_REQUEST_LINE - 12, b'a');
        ok.extend_from_slice(b" HTTP/1.1\r\n\r\n");
        assert!(matches!(parse_head(&ok), Parsed::Complete(..)));
    }

    #[test]
    fn too_many_or_too_large_headers_are_431() {
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("X-{i}: 1\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(parse_head(&many), Parsed::Refused(HeadError::TooManyHeaders));
        let mut large = b"GET / HTTP/1.1\r\nX-Big: ".to_vec();
        large.resize(MAX_HEADER_BYTES + 100, b'a');
        assert_eq!(parse_head(&large), Parsed::Refused(HeadError::HeadersTooLarge), "before the line ends");
        large.extend_from_slice(b"\r\n\r\n");
        assert_eq!(parse_head(&large), Parsed::Refused(HeadError::HeadersTooLarge));
        assert_eq!(HeadError::TooManyHeaders.status(), 431);
    }

    #[test]
    fn malformed_heads_are_400() {
        for bad in [
            &b"GET /\r\n\r\n"[..],
            b"GET http://x/ HTTP/1.1\r\n\r\n",
            b"GET / HTTP/2.0\r\n\r\n",
            b"G(T / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nno colon\r\n\r\n",
            b"GET / HTTP/1.1\r\n folded: x\r\n\r\n",
            b"GET /\xff HTTP/1.1\r\n\r\n",
        ] {
            match parse_head(bad) {
                Parsed::Refused(e) => assert_eq!(e.status(), 400, "{bad:?}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_refused_head_says_what_broke() {
        for (bad, why) in [
            (&b"G(T / HTTP/1.1\r\n\r\n"[..], "bad method"),
            (b"GET /\r\n\r\n", "request line is not METHOD TARGET VERSION"),
            (b"GET http://x/ HTTP/1.1\r\n\r\n", "the target must be an absolute path"),
            (b"GET / HTTP/2.0\r\n\r\n", "only HTTP/1.0 and HTTP/1.1 are served"),
            (b"GET / HTTP/1.1 x\r\n\r\n", "bad line end"),
            (b"GET / HTTP/1.1\r\nno colon\r\n\r\n", "bad header field name"),
            (b"GET / HTTP/1.1\r\nX-A: \x01\r\n\r\n", "bad header field value"),
            (b"GET / HTTP/1.1\r\nX-A: \xff\r\n\r\n", "header field is not UTF-8"),
        ] {
            assert_eq!(parse_head(bad), Parsed::Refused(HeadError::Malformed(why)), "{bad:?}");
        }
    }

    #[test]
    fn responses_carry_length_and_close() {
        let r = Response { close: true, ..Response::text(503, "busy\n") };
        let text = String::from_utf8(r.to_bytes()).unwrap();
        assert!(text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{text}");
        assert!(text.contains("Content-Length: 5\r\n") && text.contains("Connection: close\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\nbusy\n"), "{text}");
        let r = Response { keep_alive: true, head: true, ..Response::text(200, "ok") };
        let text = String::from_utf8(r.to_bytes()).unwrap();
        assert!(text.contains("Content-Length: 2\r\n") && text.contains("Connection: keep-alive\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\n"), "no body after the head of a HEAD answer: {text}");
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// A request head the parser must take: (text, method, path, query, HTTP/1.0).
        fn well_formed() -> impl Strategy<Value = (String, String, String, String, bool)> {
            (
                "[A-Z]{1,8}",
                "(/[a-zA-Z0-9._~%-]{0,12}){1,4}",
                proptest::option::of("[a-zA-Z0-9=&%._-]{0,20}"),
                any::<bool>(),
                prop::collection::vec(("X-[A-Za-z0-9-]{1,12}", "[ -~]{0,30}"), 0..8),
                any::<bool>(),
            )
                .prop_map(|(method, path, query, http_1_0, headers, crlf)| {
                    let eol = if crlf { "\r\n" } else { "\n" };
                    let version = if http_1_0 { "HTTP/1.0" } else { "HTTP/1.1" };
                    let target = match &query {
                        Some(q) => format!("{path}?{q}"),
                        None => path.clone(),
                    };
                    let mut text = format!("{method} {target} {version}{eol}");
                    for (name, value) in headers {
                        text.push_str(&format!("{name}: {value}{eol}"));
                    }
                    text.push_str(eol);
                    (text, method, path, query.unwrap_or_default(), http_1_0)
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn any_bytes_are_parsed_refused_or_awaited_without_a_panic(buf in prop::collection::vec(any::<u8>(), 0..2048)) {
                if let Parsed::Complete(_, used) = parse_head(&buf) {
                    prop_assert!(used <= buf.len());
                }
            }

            #[test]
            fn a_well_formed_head_parses_to_its_parts_and_every_prefix_waits_for_more(
                (text, method, path, query, http_1_0) in well_formed(),
                extra in prop::collection::vec(any::<u8>(), 0..64),
            ) {
                let mut buf = text.clone().into_bytes();
                buf.extend_from_slice(&extra);
                let (req, used) = match parse_head(&buf) {
                    Parsed::Complete(req, used) => (req, used),
                    other => return Err(TestCaseError::fail(format!("{text:?}: {other:?}"))),
                };
                prop_assert_eq!(used, text.len(), "the head ends where its blank line does");
                prop_assert_eq!((req.method, req.path, req.query, req.http_1_0), (method, path, query, http_1_0));
                for cut in 0..text.len() {
                    prop_assert_eq!(parse_head(&text.as_bytes()[..cut]), Parsed::Incomplete, "cut at {}", cut);
                }
            }
        }
    }
}
