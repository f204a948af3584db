//! The HTTP probe's client, for `http://` and `https://` alike: one strict HTTP/1.1 GET over
//! a blocking `TcpStream` (through rustls for HTTPS, certificates unverified as kubelet's
//! probes), bounded by a deadline. A general client's per-request set-up (request builder,
//! header maps, connector) was a visible part of the CPU a probe costs, for a request that is
//! always the same shape and a response of which a probe reads at most 10 KiB.

use super::resolve::{resolve, Lookups, ResolveError};
use super::{MAX_OUTPUT, USER_AGENT};
use crate::api::HttpHeader;
use crate::base::httphead::{self, ResponseHead};
use std::cell::RefCell;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The most a response's status line and headers may take.
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
    /// The host is not a name or address TLS can be asked for.
    #[error("invalid URL: bad TLS server name {host:?}")]
    ServerName { host: String },
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
    /// The TLS handshake failed.
    #[error("TLS handshake")]
    Handshake {
        #[source]
        source: std::io::Error,
    },
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
    /// The status line is not `HTTP/1.0 NNN ...` or `HTTP/1.1 NNN ...`.
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

/// GETs an `http://` or `https://` URL by the rules of kubelet's probe client: `headers` are
/// the probe's, `Connection: close`, and the whole exchange ends by `deadline`.
pub(super) fn get(
    url: &str,
    headers: &[HttpHeader],
    deadline: Instant,
    lookups: &Lookups,
) -> Result<Response, HttpGetError> {
    let (tls, authority, target) = split_url(url)?;
    let (host, port) = host_port(authority, if tls { 443 } else { 80 })?;
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
        crate::base::net::set_linger(&stream, 1);
        let mut sock = Deadlined { stream: &stream, deadline };
        if !tls {
            return exchange(&mut sock, req, buf);
        }
        let name = rustls::pki_types::ServerName::try_from(host)
            .map_err(|_| HttpGetError::ServerName { host: host.into() })?
            .to_owned();
        let mut conn = rustls::ClientConnection::new(tls_config(), name)
            .map_err(|e| HttpGetError::Handshake { source: std::io::Error::other(e) })?;
        while conn.is_handshaking() {
            conn.complete_io(&mut sock).map_err(|e| io_error(e, |source| HttpGetError::Handshake { source }))?;
        }
        exchange(&mut rustls::Stream::new(&mut conn, &mut sock), req, buf)
    })
}

/// For a GET without TLS to an address (no name to look up): builds its request in `req`
/// and gives where it goes; `None` when the URL needs TLS or a lookup (the blocking client's
/// work).
pub(super) fn prepare_plain(
    url: &str,
    headers: &[HttpHeader],
    req: &mut Vec<u8>,
) -> Result<Option<SocketAddr>, HttpGetError> {
    let (tls, authority, target) = split_url(url)?;
    let (host, port) = host_port(authority, 80)?;
    let Some(ip) = host.parse::<std::net::IpAddr>().ok().filter(|_| !tls) else { return Ok(None) };
    build_request(req, authority, target, headers)?;
    Ok(Some(SocketAddr::new(ip, port)))
}

/// A response read from the bytes received so far, as the blocking client would read it from
/// the socket: `None` while it needs more (`eof`: no more will come). The bytes are read
/// again from the start at each call; a probe's response is small and mostly arrives at once.
pub(super) fn parse_response(received: &[u8], eof: bool) -> Result<Option<Response>, HttpGetError> {
    let mut replay = Replay { rest: received, eof, starved: false };
    let read = BUFFERS.with(|b| {
        let buf = &mut b.borrow_mut().1;
        Conn { stream: &mut replay, buf, pos: 0, end: 0 }.response()
    });
    if replay.starved {
        return Ok(None);
    }
    read.map(Some)
}

/// Bytes already received, read as a socket would give them; past them, end of file or (when
/// more may come) `WouldBlock`, noted in `starved`.
struct Replay<'a> {
    rest: &'a [u8],
    eof: bool,
    starved: bool,
}

impl Read for Replay<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.rest.is_empty() && !self.eof {
            self.starved = true;
            return Err(std::io::ErrorKind::WouldBlock.into());
        }
        self.rest.read(out)
    }
}

/// Sends `req` on `stream` and reads the response with `buf`.
fn exchange(stream: &mut (impl Read + Write), req: &[u8], buf: &mut [u8]) -> Result<Response, HttpGetError> {
    let sent = stream.write_all(req).and_then(|()| stream.flush());
    sent.map_err(|e| io_error(e, |source| HttpGetError::WriteRequest { source }))?;
    Conn { stream, buf, pos: 0, end: 0 }.response()
}

/// The probe's socket, each read and write bounded by what is left of its deadline.
struct Deadlined<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl Deadlined<'_> {
    /// What is left of the deadline, or a timeout when nothing is (a zero socket timeout
    /// would mean "none").
    fn left(&self) -> std::io::Result<Duration> {
        left(self.deadline).map_err(|_| std::io::ErrorKind::TimedOut.into())
    }
}

impl Read for Deadlined<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.stream.set_read_timeout(Some(self.left()?))?;
        (&mut &*self.stream).read(buf)
    }
}

impl Write for Deadlined<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.stream.set_write_timeout(Some(self.left()?))?;
        (&mut &*self.stream).write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The TLS client of HTTPS probes: TLS 1.2 and 1.3 with ring, and any certificate, as
/// kubelet's probes (`InsecureSkipVerify`).
fn tls_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(rustls::ALL_VERSIONS)
            // Cannot fail: ring's provider has the cipher suites of both versions.
            .expect("ring supports TLS 1.2 and 1.3")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth();
        Arc::new(config)
    });
    config.clone()
}

/// Takes any server certificate, as Go's `InsecureSkipVerify`; the handshake's signatures
/// are still checked against the certificate's key, as Go does.
#[derive(Debug)]
pub struct AnyCertificate(pub Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `http://authority/target` or `https://…` → (TLS, authority, target without fragment).
fn split_url(url: &str) -> Result<(bool, &str, &str), HttpGetError> {
    let (tls, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(rest), _) => (false, rest),
        (_, Some(rest)) => (true, rest),
        (None, None) => return Err(HttpGetError::ParseUrl { why: "not an http:// or https:// URL" }),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, target) = rest.split_at(end);
    let target = target.split('#').next().unwrap_or("");
    Ok((tls, authority, if target.is_empty() { "/" } else { target }))
}

/// The host (brackets stripped) and port (`default` when it has none) of an authority.
fn host_port(authority: &str, default: u16) -> Result<(&str, u16), HttpGetError> {
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
        None | Some("") => default,
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
        if h.name.is_empty() || !h.name.bytes().all(httphead::is_token) {
            return Err(HttpGetError::CheckHeader { name: h.name.clone(), what: "name" });
        }
        // httparse's rule (and the http crate's): no control characters but tab.
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
    stream: &'a mut dyn Read,
    buf: &'a mut [u8],
    pos: usize,
    end: usize,
}

impl Conn<'_> {
    /// Reads more; 0 at EOF.
    fn fill(&mut self) -> Result<usize, HttpGetError> {
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.end -= self.pos;
            self.pos = 0;
        }
        loop {
            match self.stream.read(&mut self.buf[self.end..]) {
                Ok(n) => {
                    self.end += n;
                    return Ok(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // A TLS server that closes without `close_notify` (Go takes it as EOF too).
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(0),
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
                // A body cut short, or that times out, is kept as read.
                let _ = self.body(framing, &mut body);
            }
            let body = String::from_utf8(body).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
            return Ok(Response { status, location, body });
        }
    }

    /// The next response head, consumed: its status, `Location` and body framing.
    fn head(&mut self) -> Result<(u16, Option<String>, Framing), HttpGetError> {
        loop {
            let read = &self.buf[self.pos..self.end];
            match httphead::response(read, read_head) {
                Ok(Some(head)) => {
                    let (status, location, framing, len) = head?;
                    self.pos += len;
                    return Ok((status, location, framing));
                }
                Ok(None) => {}
                Err(httphead::Error::Version | httphead::Error::Status) => {
                    let line = String::from_utf8_lossy(httphead::first_line(read)).into_owned();
                    return Err(HttpGetError::ParseStatus { line });
                }
                Err(_) => {
                    let line = String::from_utf8_lossy(httphead::refused_field(read)).into_owned();
                    return Err(HttpGetError::ParseHeader { line });
                }
            }
            if self.pos == 0 && self.end == self.buf.len() {
                return Err(HttpGetError::HeadTooLong { max: MAX_HEAD });
            }
            if self.fill()? == 0 {
                return Err(if self.end == self.pos { HttpGetError::Eof } else { HttpGetError::UnexpectedEof });
            }
        }
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

/// What a probe takes of a response head: status, the first `Location`, the body's framing
/// (`Content-Length`s must agree; `chunked` is the only transfer coding), and its length.
fn read_head(head: &ResponseHead) -> Result<(u16, Option<String>, Framing, usize), HttpGetError> {
    let (mut location, mut length, mut chunked) = (None, None::<u64>, false);
    for field in head.headers {
        let (name, value) = (field.name, field.value.trim_ascii());
        if name.eq_ignore_ascii_case("location") && location.is_none() {
            location = Some(String::from_utf8_lossy(value).into_owned());
        } else if name.eq_ignore_ascii_case("content-length") {
            let bad = || HttpGetError::ParseContentLength { value: String::from_utf8_lossy(value).into_owned() };
            let n = std::str::from_utf8(value).ok().filter(|v| v.bytes().all(|b| b.is_ascii_digit()));
            let n: u64 = n.and_then(|v| v.parse().ok()).ok_or_else(bad)?;
            if length.is_some_and(|l| l != n) {
                return Err(bad());
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
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
    Ok((head.status, location, framing, head.len))
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
mod tests;
