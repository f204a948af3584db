//! A command run through the CRI runtime's streaming server, as `kubectl exec` reaches it:
//! `Exec` gives a URL, and a WebSocket to it with Kubernetes' `v4.channel.k8s.io` protocol
//! carries the command's stdout (channel 1) and stderr (channel 2), then its exit status
//! (channel 3, a `metav1.Status`). Unlike `ExecSync`, whose one answer containerd cannot send
//! past 16 MiB, the output arrives as it is written, so any amount is read, the first
//! `cap` bytes of each stream kept and the rest dropped.
//!
//! Blocking and bounded: the response head is at most `MAX_HEAD`, the status at most
//! `MAX_STATUS`, and every read waits at most `POLL` before the deadline and the interrupt
//! flag are looked at. The decisions (the request, the accept key, frame headers, the exit
//! code in a status) are pure functions, tested below; `exec` only moves bytes.

use crate::node::runtime::ExecResult;
use base64::Engine;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The subprotocol asked for: binary frames, the first byte the channel, the status as JSON.
pub const PROTOCOL: &str = "v4.channel.k8s.io";
/// The largest HTTP response head accepted.
const MAX_HEAD: usize = 16 << 10;
/// The largest exit status (channel 3) accepted.
const MAX_STATUS: usize = 64 << 10;
/// How long a read waits before the deadline and interrupt are checked again.
const POLL: Duration = Duration::from_millis(100);
/// The key of RFC 6455's accept hash.
const WS_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// What went wrong streaming a command.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The URL is not `http://host:port/path`.
    #[error("the runtime's streaming URL {url:?} is not an http:// URL")]
    BadUrl {
        /// The URL `Exec` returned.
        url: String,
    },
    /// Connecting, reading or writing failed.
    #[error("streaming server {url}")]
    Io {
        /// The URL.
        url: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The server did not switch to the WebSocket protocol asked for.
    #[error("streaming server {url} refused the WebSocket upgrade: {why}")]
    Upgrade {
        /// The URL.
        url: String,
        /// The status line, or what was wrong in the answer.
        why: String,
    },
    /// The server broke the WebSocket or channel protocol.
    #[error("streaming server {url} broke the protocol: {why}")]
    Protocol {
        /// The URL.
        url: String,
        /// What.
        why: String,
    },
    /// The runtime could not run the command (its status was not an exit code).
    #[error("{message}")]
    Failed {
        /// The status's message (e.g. the executable was not found).
        message: String,
    },
}

/// How a streamed command ended.
#[derive(Debug)]
pub enum Streamed {
    /// It finished (or ran past its deadline: `timed_out`), output capped.
    Done(ExecResult),
    /// The interrupt flag was set first; the stream was closed.
    Interrupted,
}

/// `http://host:port/path` as (host:port, /path).
pub fn split_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    (!authority.is_empty()).then_some((authority, if path.is_empty() { "/" } else { path }))
}

/// The upgrade request for `path` on `authority`, with the client's `key`.
pub fn upgrade_request(authority: &str, path: &str, key: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Protocol: {PROTOCOL}\r\n\r\n"
    )
}

/// The `Sec-WebSocket-Accept` a server must answer to `key` (RFC 6455 §4.2.2).
pub fn accept_for(key: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, format!("{key}{WS_GUID}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// Checks a response head against the request's `key`: 101, the upgrade, the accept hash
/// and the protocol. `Err` says what is wrong.
pub fn check_upgrade(head: &str, key: &str) -> Result<(), String> {
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    if status.split(' ').nth(1) != Some("101") {
        return Err(format!("answered {status:?}"));
    }
    let headers: Vec<(String, &str)> =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim())).collect();
    let header = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
    if !header("upgrade").is_some_and(|v| v.eq_ignore_ascii_case("websocket")) {
        return Err("no Upgrade: websocket header".into());
    }
    if header("sec-websocket-accept") != Some(accept_for(key).as_str()) {
        return Err("a wrong Sec-WebSocket-Accept".into());
    }
    match header("sec-websocket-protocol") {
        Some(PROTOCOL) => Ok(()),
        other => Err(format!("protocol {other:?} instead of {PROTOCOL}")),
    }
}

/// A frame's header: what the bytes at the start of `buf` say, and how many they were;
/// `None` when more bytes are needed.
#[derive(Debug, PartialEq, Eq)]
pub struct FrameHead {
    /// The last frame of its message.
    pub fin: bool,
    /// 0 continuation, 1 text, 2 binary, 8 close, 9 ping, 10 pong.
    pub opcode: u8,
    /// The payload's length.
    pub len: u64,
    /// The masking key (a server must not mask, so the caller refuses one).
    pub mask: Option<[u8; 4]>,
    /// The header's own length.
    pub head_len: usize,
}

/// Parses a frame header from the start of `buf`.
pub fn frame_head(buf: &[u8]) -> Option<FrameHead> {
    let (&b0, &b1) = (buf.first()?, buf.get(1)?);
    let (len, mut at) = match b1 & 0x7f {
        126 => (u64::from(u16::from_be_bytes(buf.get(2..4)?.try_into().ok()?)), 4),
        127 => (u64::from_be_bytes(buf.get(2..10)?.try_into().ok()?), 10),
        n => (u64::from(n), 2),
    };
    let mask = if b1 & 0x80 != 0 {
        let m = buf.get(at..at + 4)?.try_into().ok()?;
        at += 4;
        Some(m)
    } else {
        None
    };
    Some(FrameHead { fin: b0 & 0x80 != 0, opcode: b0 & 0x0f, len, mask, head_len: at })
}

/// A client frame (masked with `mask`, as RFC 6455 requires of clients) of at most 125
/// bytes: the close and pong frames this client sends.
pub fn control_frame(opcode: u8, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
    let payload = &payload[..payload.len().min(125)];
    let mut f = vec![0x80 | opcode, 0x80 | payload.len() as u8];
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

/// The exit code in a `v4.channel.k8s.io` status: 0 for `Success`, the `ExitCode` cause of
/// a `NonZeroExitCode` failure; any other failure is the runtime's error, its message.
pub fn exit_code(status: &[u8]) -> Result<i32, String> {
    let v: serde_json::Value =
        serde_json::from_slice(status).map_err(|e| format!("an exit status that is not JSON ({e})"))?;
    match v["status"].as_str() {
        Some("Success") => return Ok(0),
        Some("Failure") if v["reason"] == "NonZeroExitCode" => {}
        _ => return Err(v["message"].as_str().unwrap_or("the runtime could not run the command").to_string()),
    }
    v["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["reason"] == "ExitCode")
        .and_then(|c| c["message"].as_str()?.parse().ok())
        .ok_or_else(|| format!("a NonZeroExitCode status without an exit code: {v}"))
}

/// Where the payload of the frame being read goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sink {
    /// Not known yet: the next payload byte is the channel.
    Channel,
    /// stdout (0), stderr (1) or status (2) of `ExecResult`.
    Out(usize),
    /// Dropped (an empty or unknown channel).
    Drop,
}

/// Runs the command behind `url` (from `Exec`) until it ends, `deadline` passes
/// (`timed_out`, exit code -1) or `interrupt` is set, keeping at most `cap` bytes of each
/// stream. Ending early closes the stream: containerd 2 then kills the command, containerd
/// 1.x lets it run on.
pub fn exec(url: &str, cap: usize, deadline: Instant, interrupt: &AtomicBool) -> Result<Streamed, StreamError> {
    let io_err = |source| StreamError::Io { url: url.into(), source };
    let proto = |why: String| StreamError::Protocol { url: url.into(), why };
    let (authority, path) = split_url(url).ok_or_else(|| StreamError::BadUrl { url: url.into() })?;
    let addr =
        authority.to_socket_addrs().map_err(io_err)?.next().ok_or_else(|| StreamError::BadUrl { url: url.into() })?;
    let wait =
        deadline.saturating_duration_since(Instant::now()).clamp(Duration::from_millis(1), Duration::from_secs(10));
    let mut sock = TcpStream::connect_timeout(&addr, wait).map_err(io_err)?;
    sock.set_read_timeout(Some(POLL)).map_err(io_err)?;
    sock.set_write_timeout(Some(Duration::from_secs(10))).map_err(io_err)?;
    let key = base64::engine::general_purpose::STANDARD.encode(random::<16>());
    sock.write_all(upgrade_request(authority, path, &key).as_bytes()).map_err(io_err)?;

    let mut wire = Wire { sock, buf: Vec::with_capacity(64 << 10), deadline, interrupt };
    let head_end = loop {
        if let Some(i) = wire.buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if wire.buf.len() > MAX_HEAD {
            return Err(StreamError::Upgrade {
                url: url.into(),
                why: format!("a response head over {MAX_HEAD} bytes"),
            });
        }
        match wire.fill().map_err(io_err)? {
            Fill::Read => {}
            Fill::Eof => return Err(proto("the connection closed during the upgrade".into())),
            Fill::Stop(why) => return wire.stop(why, Default::default()),
        }
    };
    let head = String::from_utf8_lossy(&wire.buf[..head_end]).into_owned();
    check_upgrade(&head, &key).map_err(|why| StreamError::Upgrade { url: url.into(), why })?;
    wire.buf.drain(..head_end);

    let mut out = [Vec::new(), Vec::new(), Vec::new()];
    let caps = [cap, cap, MAX_STATUS];
    let mut sink = Sink::Channel;
    loop {
        let Some(h) = frame_head(&wire.buf) else {
            match wire.fill().map_err(io_err)? {
                Fill::Read => continue,
                Fill::Eof => break,
                Fill::Stop(why) => return wire.stop(why, out),
            }
        };
        if h.mask.is_some() {
            return Err(proto("a masked frame from the server".into()));
        }
        wire.buf.drain(..h.head_len);
        let control = h.opcode >= 8;
        if control && (h.len > 125 || !h.fin) {
            return Err(proto(format!("a control frame (opcode {}) of {} bytes", h.opcode, h.len)));
        }
        match h.opcode {
            0 => {}
            1 | 2 => sink = Sink::Channel,
            8..=10 => {}
            op => return Err(proto(format!("a frame with opcode {op}"))),
        }
        let mut left = h.len;
        let mut control_payload = Vec::new();
        while left > 0 {
            if wire.buf.is_empty() {
                match wire.fill().map_err(io_err)? {
                    Fill::Read => {}
                    Fill::Eof => return Err(proto("the connection closed inside a frame".into())),
                    Fill::Stop(why) => return wire.stop(why, out),
                }
                continue;
            }
            let n = wire.buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            let mut chunk = &wire.buf[..n];
            if control {
                control_payload.extend_from_slice(chunk);
            } else {
                if sink == Sink::Channel {
                    sink = match chunk[0] {
                        1 => Sink::Out(0),
                        2 => Sink::Out(1),
                        3 => Sink::Out(2),
                        _ => Sink::Drop,
                    };
                    chunk = &chunk[1..];
                }
                if let Sink::Out(i) = sink {
                    let room = caps[i].saturating_sub(out[i].len());
                    if i == 2 && chunk.len() > room {
                        return Err(proto(format!("an exit status over {MAX_STATUS} bytes")));
                    }
                    out[i].extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
            }
            wire.buf.drain(..n);
            left -= n as u64;
        }
        match h.opcode {
            8 => {
                let _ = wire.sock.write_all(&control_frame(8, control_payload.get(..2).unwrap_or_default(), random()));
                break;
            }
            9 => wire.sock.write_all(&control_frame(10, &control_payload, random())).map_err(io_err)?,
            _ => {}
        }
    }
    if out[2].is_empty() {
        return Err(proto("the connection closed without the command's exit status".into()));
    }
    let exit_code = exit_code(&out[2]).map_err(|message| StreamError::Failed { message })?;
    let [stdout, stderr, _] = out;
    Ok(Streamed::Done(ExecResult { exit_code, stdout, stderr, timed_out: false }))
}

/// Why a read gave up waiting.
enum Why {
    Deadline,
    Interrupt,
}

/// What one read did.
enum Fill {
    Read,
    Eof,
    Stop(Why),
}

/// The connection and what was read from it and not yet used.
struct Wire<'a> {
    sock: TcpStream,
    buf: Vec<u8>,
    deadline: Instant,
    interrupt: &'a AtomicBool,
}

impl Wire<'_> {
    /// Reads what is there into `buf` (at most 64 KiB), waiting at most `POLL` at a time
    /// until the deadline or the interrupt.
    fn fill(&mut self) -> io::Result<Fill> {
        let mut chunk = [0u8; 64 << 10];
        loop {
            if self.interrupt.load(Ordering::Relaxed) {
                return Ok(Fill::Stop(Why::Interrupt));
            }
            if Instant::now() >= self.deadline {
                return Ok(Fill::Stop(Why::Deadline));
            }
            match self.sock.read(&mut chunk) {
                Ok(0) => return Ok(Fill::Eof),
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(Fill::Read);
                }
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Ends early: closes the stream (a close frame, then the socket) and says why, with
    /// the output so far (stdout, stderr, status).
    fn stop(mut self, why: Why, [stdout, stderr, _]: [Vec<u8>; 3]) -> Result<Streamed, StreamError> {
        let _ = self.sock.write_all(&control_frame(8, &1000u16.to_be_bytes(), random()));
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
        Ok(match why {
            Why::Interrupt => Streamed::Interrupted,
            Why::Deadline => Streamed::Done(ExecResult { exit_code: -1, stdout, stderr, timed_out: true }),
        })
    }
}

/// `N` random bytes (a WebSocket key or mask); the kernel's, or the clock's when it has none.
fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    // SAFETY: writes at most N bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), N, libc::GRND_NONBLOCK) };
    if n != N as isize {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        for (i, x) in b.iter_mut().enumerate() {
            *x = (t >> ((i % 16) * 8)) as u8;
        }
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_splits_into_authority_and_path() {
        assert_eq!(split_url("http://127.0.0.1:4123/exec/abc"), Some(("127.0.0.1:4123", "/exec/abc")));
        assert_eq!(split_url("http://[::1]:9"), Some(("[::1]:9", "/")));
        assert_eq!(split_url("https://127.0.0.1/exec"), None);
        assert_eq!(split_url("http:///exec"), None);
    }

    #[test]
    fn the_accept_key_is_rfc_6455s() {
        // RFC 6455 §1.3's example.
        assert_eq!(accept_for("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }

    #[test]
    fn an_upgrade_is_checked_for_status_accept_and_protocol() {
        let key = "dGhlIHNhbXBsZSBub25jZQ==";
        let ok = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nsec-websocket-protocol: {PROTOCOL}\r\n\r\n"
        );
        assert_eq!(check_upgrade(&ok, key), Ok(()));
        assert_eq!(
            check_upgrade("HTTP/1.1 404 Not Found\r\n\r\n", key),
            Err(r#"answered "HTTP/1.1 404 Not Found""#.into())
        );
        assert_eq!(check_upgrade(&ok.replace("s3pP", "AAAA"), key), Err("a wrong Sec-WebSocket-Accept".into()));
        assert_eq!(
            check_upgrade(&ok.replace(PROTOCOL, "channel.k8s.io"), key),
            Err(r#"protocol Some("channel.k8s.io") instead of v4.channel.k8s.io"#.into())
        );
        assert_eq!(
            check_upgrade(&ok.replace("Upgrade: websocket", "Upgrade: h2c"), key),
            Err("no Upgrade: websocket header".into())
        );
    }

    #[test]
    fn frame_heads_of_every_length_form_parse_and_short_ones_wait() {
        assert_eq!(frame_head(&[0x82, 5]), Some(FrameHead { fin: true, opcode: 2, len: 5, mask: None, head_len: 2 }));
        assert_eq!(
            frame_head(&[0x02, 126, 0x01, 0x00]),
            Some(FrameHead { fin: false, opcode: 2, len: 256, mask: None, head_len: 4 })
        );
        let long = [0x80, 127, 0, 0, 0, 1, 0, 0, 0, 0];
        assert_eq!(frame_head(&long).map(|h| h.len), Some(1 << 32));
        assert_eq!(frame_head(&[0x82, 126, 1]), None);
        assert_eq!(frame_head(&[0x82]), None);
        assert_eq!(frame_head(&[0x88, 0x82, 1, 2, 3, 4]).map(|h| (h.mask, h.head_len)), Some((Some([1, 2, 3, 4]), 6)));
    }

    #[test]
    fn a_client_control_frame_is_masked_and_parses_back() {
        let f = control_frame(8, &[0x03, 0xe8], [9, 8, 7, 6]);
        let h = frame_head(&f).unwrap();
        assert_eq!((h.fin, h.opcode, h.len, h.mask), (true, 8, 2, Some([9, 8, 7, 6])));
        let payload: Vec<u8> = f[h.head_len..].iter().enumerate().map(|(i, b)| b ^ [9, 8, 7, 6][i % 4]).collect();
        assert_eq!(payload, [0x03, 0xe8]);
    }

    #[test]
    fn the_exit_code_comes_from_the_status() {
        assert_eq!(exit_code(br#"{"metadata":{},"status":"Success"}"#), Ok(0));
        let failed = br#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#;
        assert_eq!(exit_code(failed), Ok(3));
        let internal = br#"{"metadata":{},"status":"Failure","message":"Internal error occurred: failed to exec in container: executable file not found","reason":"InternalError","code":500}"#;
        assert_eq!(
            exit_code(internal),
            Err("Internal error occurred: failed to exec in container: executable file not found".into())
        );
        assert!(exit_code(br#"{"status":"Failure","reason":"NonZeroExitCode"}"#)
            .unwrap_err()
            .contains("without an exit code"));
        assert!(exit_code(b"not json").unwrap_err().contains("not JSON"));
    }
}
