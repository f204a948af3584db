//! The HTTP probe's client: one strict HTTP/1.1 GET over a blocking `TcpStream`, bounded by
//! a deadline. ureq's per-request set-up (request builder, header maps, a TLS-capable
//! connector) was a visible part of the CPU a probe costs, for a request that is always the
//! same shape and a response of which a probe reads at most 10 KiB. HTTPS stays on ureq.

use super::resolve::{resolve, Lookups, ResolveError};
use super::{MAX_OUTPUT, USER_AGENT};
use crate::api::HttpHeader;
use std::cell::RefCell;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

/// The most a response's status line and headers may take (ureq's limit before).
pub(super) const MAX_HEAD: usize = 32 * 1024;

/// What a probe needs of a response.
#[derive(Debug)]
pub(super) struct Response {
    /// The status code.
    pub status: u16,
    /// The `Location` header, if any.
    pub location: Option<String>,
    /// At most `MAX_OUTPUT` bytes of the body (lossy UTF-8).
    pub body: String,
}

/// Why a GET got no response; shown after `Get "<url>": `.
#[derive(Debug, thiserror::Error)]
pub(super) enum HttpGetError {
    /// The URL has no usable host and port.
    #[error("invalid URL: {why}")]
    ParseUrl { why: &'static str },
    /// A header could not be sent as written.
    #[error("invalid header field {what} for {name:?}")]
    CheckHeader { name: String, what: &'static str },
    /// The path has bytes that cannot go on a request line.
    #[error("invalid request target {target:?}")]
    CheckTarget { target: String },
    /// The host name could not be looked up.
    #[error("dial tcp {addr}")]
    Resolve {
        addr: String,
        #[source]
        source: ResolveError,
    },
    /// The connection was refused or failed.
    #[error("dial tcp {addr}: connect")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The deadline passed (kubelet's words for its client timeout).
    #[error("context deadline exceeded (Client.Timeout exceeded while awaiting headers)")]
    Timeout,
    /// Sending the request failed.
    #[error("write request")]
    WriteRequest {
        #[source]
        source: std::io::Error,
    },
    /// Reading the response failed.
    #[error("read response")]
    ReadResponse {
        #[source]
        source: std::io::Error,
    },
    /// The server closed the connection before answering (Go's word for it).
    #[error("EOF")]
    Eof,
    /// The server closed the connection in the middle of the head.
    #[error("unexpected EOF")]
    UnexpectedEof,
    /// The status line and headers did not end within `MAX_HEAD` bytes.
    #[error("response head larger than {max} bytes")]
    HeadTooLong { max: usize },
    /// The status line is not `HTTP/1.x NNN ...`.
    #[error("malformed HTTP response {line:?}")]
    ParseStatus { line: String },
    /// A header line is not `name: value`.
    #[error("malformed MIME header line: {line}")]
    ParseHeader { line: String },
    /// `Content-Length` is not one decimal number.
    #[error("bad Content-Length {value:?}")]
    ParseContentLength { value: String },
    /// A transfer coding other than `chunked`.
    #[error("unsupported transfer encoding: {value:?}")]
    CheckTransferEncoding { value: String },
    /// A chunk-size line is not hexadecimal.
    #[error("malformed chunked encoding")]
    ParseChunk,
}

thread_local! {
    /// Each probe thread's request and read buffers, allocated once: a probe allocates
    /// nothing larger than its body.
    static BUFFERS: RefCell<(Vec<u8>, Vec<u8>)> = RefCell::new((Vec::with_capacity(512), vec![0; MAX_HEAD]));
}

/// GETs an `http://` URL by the rules of kubelet's probe client: `headers` are the probe's,
/// `Connection: close`, and the whole exchange ends by `deadline`.
pub(super) fn get(
    url: &str,
    headers: &[HttpHeader],
    deadline: Instant,
    lookups: &Lookups,
) -> Result<Response, HttpGetError> {
    let (authority, target) = split_url(url)?;
    let (host, port) = host_port(authority)?;
    let addr = resolve(host, port, left(deadline)?, lookups)
        .map_err(|source| HttpGetError::Resolve { addr: format!("{host}:{port}"), source })?;
    BUFFERS.with(|b| {
        let (req, buf) = &mut *b.borrow_mut();
        build_request(req, authority, target, headers)?;
        let stream = match TcpStream::connect_timeout(&addr, left(deadline)?) {
            Ok(s) => s,
            Err(e) if is_timeout(&e) => return Err(HttpGetError::Timeout),
            Err(source) => return Err(HttpGetError::Connect { addr, source }),
        };
        // As kubelet's dialer: a short TIME_WAIT at high probe rates.
        crate::util::set_linger(&stream, 1);
        stream.set_write_timeout(Some(left(deadline)?)).map_err(|source| HttpGetError::WriteRequest { source })?;
        (&stream).write_all(req).map_err(|e| io_error(e, |source| HttpGetError::WriteRequest { source }))?;
        let mut conn = Conn { stream: &stream, buf, pos: 0, end: 0, deadline };
        conn.response()
    })
}

/// `http://authority/target` → (authority, target without fragment).
fn split_url(url: &str) -> Result<(&str, &str), HttpGetError> {
    let rest = url.strip_prefix("http://").ok_or(HttpGetError::ParseUrl { why: "not an http:// URL" })?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, target) = rest.split_at(end);
    let target = target.split('#').next().unwrap_or("");
    Ok((authority, if target.is_empty() { "/" } else { target }))
}

/// The host (brackets stripped) and port (80 by default) of an authority.
fn host_port(authority: &str) -> Result<(&str, u16), HttpGetError> {
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = match hostport.strip_prefix('[') {
        Some(v6) => {
            let (h, rest) = v6.split_once(']').ok_or(HttpGetError::ParseUrl { why: "unclosed [" })?;
            (h, rest.strip_prefix(':'))
        }
        None => match hostport.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        },
    };
    let port = match port {
        None | Some("") => 80,
        Some(p) => p.parse().map_err(|_| HttpGetError::ParseUrl { why: "bad port" })?,
    };
    if host.is_empty() {
        return Err(HttpGetError::ParseUrl { why: "no host" });
    }
    Ok((host, port))
}

/// The request in one buffer: kubelet's defaults, which the probe's headers override
/// (`Host` replaces the authority, a `User-Agent` the default, an `Accept` the default and
/// an empty first `Accept` removes it).
fn build_request(req: &mut Vec<u8>, authority: &str, target: &str, headers: &[HttpHeader]) -> Result<(), HttpGetError> {
    if !target.bytes().all(|b| (0x21..0x7f).contains(&b)) {
        return Err(HttpGetError::CheckTarget { target: target.into() });
    }
    let named = |n: &str| headers.iter().find(|h| h.name.eq_ignore_ascii_case(n));
    let bare = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = named("host").map_or(bare, |h| h.value.as_str());
    let host = if host.is_empty() { bare } else { host };
    req.clear();
    for part in ["GET ", target, " HTTP/1.1\r\nHost: ", host, "\r\n"] {
        req.extend_from_slice(part.as_bytes());
    }
    if named("user-agent").is_none() {
        req.extend_from_slice(b"User-Agent: ");
        req.extend_from_slice(USER_AGENT.as_bytes());
        req.extend_from_slice(b"\r\n");
    }
    let accept = named("accept");
    if accept.is_none() {
        req.extend_from_slice(b"Accept: */*\r\n");
    }
    let drop_accept = accept.is_some_and(|h| h.value.is_empty());
    for h in headers {
        if h.name.eq_ignore_ascii_case("host") || (drop_accept && h.name.eq_ignore_ascii_case("accept")) {
            continue;
        }
        if h.name.is_empty() || !h.name.bytes().all(is_token) {
            return Err(HttpGetError::CheckHeader { name: h.name.clone(), what: "name" });
        }
        // The http crate's rule (ureq's before): no control characters but tab.
        if h.value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(HttpGetError::CheckHeader { name: h.name.clone(), what: "value" });
        }
        for part in [h.name.as_str(), ": ", h.value.as_str(), "\r\n"] {
            req.extend_from_slice(part.as_bytes());
        }
    }
    req.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(())
}

fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// What is left until `deadline`, or `Timeout` when nothing is (a zero socket timeout
/// would mean "none").
fn left(deadline: Instant) -> Result<std::time::Duration, HttpGetError> {
    let d = deadline.saturating_duration_since(Instant::now());
    if d.is_zero() {
        Err(HttpGetError::Timeout)
    } else {
        Ok(d)
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
}

fn io_error(e: std::io::Error, other: impl FnOnce(std::io::Error) -> HttpGetError) -> HttpGetError {
    if is_timeout(&e) {
        HttpGetError::Timeout
    } else {
        other(e)
    }
}

/// How the body is delimited.
enum Framing {
    Length(u64),
    Chunked,
    Close,
}

/// A connection and the thread's read buffer: `buf[pos..end]` is read but not consumed.
struct Conn<'a> {
    stream: &'a TcpStream,
    buf: &'a mut [u8],
    pos: usize,
    end: usize,
    deadline: Instant,
}

impl Conn<'_> {
    /// Reads more, with what is left of the deadline as the socket's timeout; 0 at EOF.
    fn fill(&mut self) -> Result<usize, HttpGetError> {
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.end -= self.pos;
            self.pos = 0;
        }
        self.stream
            .set_read_timeout(Some(left(self.deadline)?))
            .map_err(|source| HttpGetError::ReadResponse { source })?;
        loop {
            match self.stream.read(&mut self.buf[self.end..]) {
                Ok(n) => {
                    self.end += n;
                    return Ok(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_error(e, |source| HttpGetError::ReadResponse { source })),
            }
        }
    }

    /// The next line (without its CRLF or LF) as `pos..line end`, consuming it.
    fn line(&mut self) -> Result<std::ops::Range<usize>, HttpGetError> {
        loop {
            if let Some(i) = self.buf[self.pos..self.end].iter().position(|&b| b == b'\n') {
                let start = self.pos;
                self.pos += i + 1;
                let end = if i > 0 && self.buf[start + i - 1] == b'\r' { start + i - 1 } else { start + i };
                return Ok(start..end);
            }
            if self.pos == 0 && self.end == self.buf.len() {
                return Err(HttpGetError::HeadTooLong { max: self.buf.len() });
            }
            if self.fill()? == 0 {
                return Err(if self.end == self.pos { HttpGetError::Eof } else { HttpGetError::UnexpectedEof });
            }
        }
    }

    /// Reads the response: head (skipping 1xx), then what the probe reads of the body.
    fn response(&mut self) -> Result<Response, HttpGetError> {
        loop {
            let (status, location, framing) = self.head()?;
            if (100..200).contains(&status) && status != 101 {
                continue;
            }
            let mut body = Vec::new();
            if status != 204 && status != 304 {
                // A body cut short, or that times out, is kept as read, as it was with ureq.
                let _ = self.body(framing, &mut body);
            }
            let body = String::from_utf8(body).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
            return Ok(Response { status, location, body });
        }
    }

    fn head(&mut self) -> Result<(u16, Option<String>, Framing), HttpGetError> {
        let status_line = self.line()?;
        // The head's size is counted line by line: `fill` moves consumed lines out.
        let mut used = status_line.len() + 2;
        let status = parse_status(&self.buf[status_line])?;
        let (mut location, mut length, mut chunked) = (None, None::<u64>, false);
        loop {
            let l = self.line().map_err(|e| if let HttpGetError::Eof = e { HttpGetError::UnexpectedEof } else { e })?;
            // With its line end, counted as CRLF (a bound, not an exact size).
            used += l.end - l.start + 2;
            if used > MAX_HEAD {
                return Err(HttpGetError::HeadTooLong { max: MAX_HEAD });
            }
            let line = &self.buf[l];
            if line.is_empty() {
                break;
            }
            let text = || String::from_utf8_lossy(line).into_owned();
            let colon =
                line.iter().position(|&b| b == b':').ok_or_else(|| HttpGetError::ParseHeader { line: text() })?;
            let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
            if colon == 0 || !name.iter().all(|&b| is_token(b)) {
                return Err(HttpGetError::ParseHeader { line: text() });
            }
            if name.eq_ignore_ascii_case(b"location") && location.is_none() {
                location = Some(String::from_utf8_lossy(value).into_owned());
            } else if name.eq_ignore_ascii_case(b"content-length") {
                let bad = || HttpGetError::ParseContentLength { value: String::from_utf8_lossy(value).into_owned() };
                let n = std::str::from_utf8(value).ok().filter(|v| v.bytes().all(|b| b.is_ascii_digit()));
                let n: u64 = n.and_then(|v| v.parse().ok()).ok_or_else(bad)?;
                if length.is_some_and(|l| l != n) {
                    return Err(bad());
                }
                length = Some(n);
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                if !value.eq_ignore_ascii_case(b"chunked") {
                    let value = String::from_utf8_lossy(value).into_owned();
                    return Err(HttpGetError::CheckTransferEncoding { value });
                }
                chunked = true;
            }
        }
        let framing = match (chunked, length) {
            (true, _) => Framing::Chunked,
            (false, Some(n)) => Framing::Length(n),
            (false, None) => Framing::Close,
        };
        Ok((status, location, framing))
    }

    /// Up to `want` more bytes of body into `out`, fewer at EOF.
    fn take(&mut self, out: &mut Vec<u8>, want: usize) -> Result<(), HttpGetError> {
        let stop = out.len() + want;
        while out.len() < stop {
            if self.pos == self.end && self.fill()? == 0 {
                return Ok(());
            }
            let n = (self.end - self.pos).min(stop - out.len());
            out.extend_from_slice(&self.buf[self.pos..self.pos + n]);
            self.pos += n;
        }
        Ok(())
    }

    /// At most `MAX_OUTPUT` bytes of body; the rest is never read (the connection closes).
    fn body(&mut self, framing: Framing, out: &mut Vec<u8>) -> Result<(), HttpGetError> {
        match framing {
            Framing::Length(n) => self.take(out, (n as usize).min(MAX_OUTPUT)),
            Framing::Close => self.take(out, MAX_OUTPUT),
            Framing::Chunked => loop {
                let l = self.line()?;
                let size = self.buf[l].split(|&b| b == b';').next().unwrap_or_default().trim_ascii();
                let size = std::str::from_utf8(size).ok().and_then(|s| usize::from_str_radix(s, 16).ok());
                let size = size.ok_or(HttpGetError::ParseChunk)?;
                if size == 0 || out.len() >= MAX_OUTPUT {
                    return Ok(());
                }
                self.take(out, size.min(MAX_OUTPUT - out.len()))?;
                if out.len() >= MAX_OUTPUT {
                    return Ok(());
                }
                if !self.line()?.is_empty() {
                    return Err(HttpGetError::ParseChunk);
                }
            },
        }
    }
}

/// `HTTP/1.x NNN[ reason]` → NNN.
fn parse_status(line: &[u8]) -> Result<u16, HttpGetError> {
    let bad = || HttpGetError::ParseStatus { line: String::from_utf8_lossy(line).into_owned() };
    let rest = line.strip_prefix(b"HTTP/1.").ok_or_else(bad)?;
    match rest {
        [v, b' ', a, b, c, tail @ ..]
            if v.is_ascii_digit()
                && [a, b, c].iter().all(|d| d.is_ascii_digit())
                && (tail.is_empty() || tail[0] == b' ') =>
        {
            Ok(u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0'))
        }
        _ => Err(bad()),
    }
}

/// One value of each variant of `HttpGetError` that has a source, named by its type (for
/// the crate's test that no error message says its cause twice).
#[cfg(test)]
pub(crate) fn error_samples() -> Vec<(&'static str, Box<dyn std::error::Error>)> {
    let cause = || std::io::Error::other("the disk is on fire");
    let errors = [
        HttpGetError::Resolve { addr: "web:80".into(), source: ResolveError::StartLookup { source: cause() } },
        HttpGetError::Connect { addr: ([10, 0, 0, 1], 80).into(), source: cause() },
        HttpGetError::WriteRequest { source: cause() },
        HttpGetError::ReadResponse { source: cause() },
    ];
    errors.into_iter().map(|e| (std::any::type_name::<HttpGetError>(), Box::new(e) as _)).collect()
}

#[cfg(test)]
#[path = "httpget_tests.rs"]
mod tests;
