//! The sessions a stream runs over: `Link` (the client's connection: what waits for the
//! socket, the idle timeout, the backpressure both transports share), the `Session` a remote
//! command sees, and its two transports, `Spdy` (SPDY/3.1, as the apiserver speaks to
//! kubelets) and `Ws` (kubelet's WebSocket channel protocols).

use super::{DATA_FRAME, FINAL_FLUSH, MAX_PENDING, STREAM_CREATION_TIMEOUT};
use crate::node::runtime::StreamIo;
use crate::server::kubelet::spdy::{self, Frame, Headers, FLAG_FIN};
use crate::server::kubelet::tlsio::TlsIo;
use crate::server::kubelet::websocket;
use std::io;
use std::time::{Duration, Instant};

/// The client's connection as a session drives it: what waits for the socket, and the idle
/// timeout. Shared by SPDY and WebSocket, so both keep the same bounds.
pub(super) struct Link<'a> {
    pub(super) io: TlsIo<'a>,
    /// Encoded frames not yet taken by TLS.
    pub(super) out: Vec<u8>,
    idle: Duration,
    last: Instant,
}

impl<'a> Link<'a> {
    pub(super) fn new(io: TlsIo<'a>, idle: Duration) -> Link<'a> {
        Link { io, out: Vec::new(), idle, last: Instant::now() }
    }

    pub(super) fn has_room(&self) -> bool {
        self.out.len() < MAX_PENDING
    }

    /// Moves output along and reads input, waiting in `poll` with `more` fds for at most
    /// `wait`; returns their revents. Errors end the session (the idle timeout too). The
    /// caller made `more` when the output was full, perhaps (without asking to read): if
    /// sending made room, it returns at once, for the caller to read.
    pub(super) fn wait(&mut self, more: &[libc::pollfd], wait: Duration) -> io::Result<Vec<libc::c_short>> {
        let full = !self.has_room();
        self.io.send(&mut self.out)?;
        // Input rustls held back while `input` was full comes in now, for the caller.
        let had = self.io.buffered();
        self.io.ready(0)?;
        let wait = if (full && self.has_room()) || self.io.buffered() > had { Duration::ZERO } else { wait };
        let mut fds = Vec::with_capacity(1 + more.len());
        fds.push(self.io.pollfd());
        fds.extend_from_slice(more);
        let left = self.idle.checked_sub(self.last.elapsed()).ok_or_else(|| io::Error::other("idle timeout"))?;
        if crate::server::kubelet::poll(&mut fds, Some(wait.min(left)))? > 0 {
            self.last = Instant::now();
        }
        self.io.ready(fds[0].revents)?;
        Ok(fds[1..].iter().map(|f| f.revents).collect())
    }

    /// Writes what is left (bounded in time); false if the connection failed.
    pub(super) fn flush_out(&mut self) -> bool {
        let deadline = Instant::now() + FINAL_FLUSH;
        while !self.out.is_empty() && Instant::now() < deadline && !self.io.eof {
            if self.wait(&[], Duration::from_millis(100)).is_err() {
                return false;
            }
        }
        true
    }
}

/// What a remote command (exec, attach) needs of its session, over SPDY or WebSocket.
pub(super) trait Session {
    /// The command's streams once the client has them (under a terminal, a resize stream
    /// too where the protocol has one).
    fn open_streams(&mut self, io: &StreamIo) -> io::Result<Streams>;
    /// What the client sent next on a stream, if anything arrived.
    fn received(&mut self) -> io::Result<Option<Received>>;
    /// `data` on stream `id`, then its end if `fin` (when the transport has one).
    fn data(&mut self, id: u32, data: &[u8], fin: bool);
    /// Whether more output may be queued.
    fn has_room(&self) -> bool;
    /// `Link::wait`.
    fn wait(&mut self, more: &[libc::pollfd], wait: Duration) -> io::Result<Vec<libc::c_short>>;
    /// Whether the client is gone.
    fn closed(&self) -> bool;
    /// Writes what is left (bounded in time), says goodbye and closes.
    fn finish(&mut self);
}

/// Data from the client on a stream; `fin` is its end (a FIN, or the stream reset).
pub(super) struct Received {
    pub(super) stream: u32,
    pub(super) data: Vec<u8>,
    pub(super) fin: bool,
}

/// A SPDY session over the client's connection.
pub(super) struct Spdy<'a> {
    pub(super) link: Link<'a>,
    dec: spdy::Decoder,
    enc: spdy::Encoder,
    /// The client said GOAWAY.
    gone: bool,
    /// The protocol has a resize stream (v3 and later), which a terminal's client opens.
    resize: bool,
}

impl<'a> Spdy<'a> {
    /// A session of `protocol` (v1 and v2 have no resize stream).
    pub(super) fn new(io: TlsIo<'a>, idle: Duration, protocol: &str) -> Spdy<'a> {
        let resize = !matches!(protocol, "v2.channel.k8s.io" | "channel.k8s.io");
        Spdy {
            link: Link::new(io, idle),
            dec: spdy::Decoder::default(),
            enc: spdy::Encoder::default(),
            gone: false,
            resize,
        }
    }

    pub(super) fn frame(&mut self, f: &Frame) {
        // Only frames made here, which the codec takes (its bounds are for what it reads).
        if let Err(e) = self.enc.encode(f, &mut self.link.out) {
            log::warn!("server: a SPDY frame was not written: {e}");
        }
    }

    /// `data` on stream `id` in frames of at most `DATA_FRAME`, the last with FIN if `fin`.
    pub(super) fn data(&mut self, id: u32, data: &[u8], fin: bool) {
        let mut pieces = data.chunks(DATA_FRAME).peekable();
        if data.is_empty() && fin {
            self.frame(&Frame::Data { stream_id: id, flags: FLAG_FIN, data: Vec::new() });
        }
        while let Some(p) = pieces.next() {
            let flags = if fin && pieces.peek().is_none() { FLAG_FIN } else { 0 };
            self.frame(&Frame::Data { stream_id: id, flags, data: p.to_vec() });
        }
    }

    pub(super) fn has_room(&self) -> bool {
        self.link.has_room()
    }

    pub(super) fn wait(&mut self, more: &[libc::pollfd], wait: Duration) -> io::Result<Vec<libc::c_short>> {
        self.link.wait(more, wait)
    }

    /// The next frame received, answering PINGs.
    pub(super) fn next(&mut self) -> io::Result<Option<Frame>> {
        loop {
            let input = self.link.io.input();
            let Some((frame, used)) = self.dec.decode(input).map_err(io::Error::other)? else {
                return Ok(None);
            };
            input.drain(..used);
            match frame {
                Frame::Ping { id } => self.frame(&Frame::Ping { id }),
                Frame::GoAway { .. } => self.gone = true,
                f => return Ok(Some(f)),
            }
        }
    }

    /// Whether the client is gone.
    pub(super) fn closed(&self) -> bool {
        self.gone || self.link.io.drained()
    }

    /// Writes what is left (bounded in time), says GOAWAY and closes.
    pub(super) fn finish(&mut self) {
        self.frame(&Frame::GoAway { last_good: 0, status: 0 });
        if self.link.flush_out() {
            self.link.io.close(Duration::from_secs(1));
        }
    }
}

impl Session for Spdy<'_> {
    /// Waits for the client's streams (answering each), as kubelet's `waitForStreams`.
    fn open_streams(&mut self, io: &StreamIo) -> io::Result<Streams> {
        let resize = self.resize;
        let mut streams = Streams::default();
        let deadline = Instant::now() + STREAM_CREATION_TIMEOUT;
        loop {
            while let Some(f) = self.next()? {
                if let Frame::SynStream { stream_id, headers, .. } = f {
                    self.frame(&Frame::SynReply { stream_id, flags: 0, headers: Headers::default() });
                    let slot = match headers.get("streamtype") {
                        Some("error") => &mut streams.error,
                        Some("stdin") => &mut streams.stdin,
                        Some("stdout") => &mut streams.stdout,
                        Some("stderr") => &mut streams.stderr,
                        Some("resize") => &mut streams.resize,
                        _ => continue,
                    };
                    *slot = Some(stream_id);
                }
            }
            // The last reply goes out with the first output.
            if streams.complete(io, resize) {
                return Ok(streams);
            }
            if self.closed() {
                return Err(io::Error::other("the client went away before opening its streams"));
            }
            let left = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero());
            let Some(left) = left else {
                return Err(io::Error::other("timed out waiting for client to create streams"));
            };
            self.wait(&[], left)?;
        }
    }

    fn received(&mut self) -> io::Result<Option<Received>> {
        while let Some(f) = self.next()? {
            match f {
                Frame::Data { stream_id, flags, data } => {
                    return Ok(Some(Received { stream: stream_id, data, fin: flags & FLAG_FIN != 0 }))
                }
                Frame::RstStream { stream_id, .. } => {
                    return Ok(Some(Received { stream: stream_id, data: Vec::new(), fin: true }))
                }
                _ => {}
            }
        }
        Ok(None)
    }

    fn data(&mut self, id: u32, data: &[u8], fin: bool) {
        Spdy::data(self, id, data, fin)
    }

    fn has_room(&self) -> bool {
        Spdy::has_room(self)
    }

    fn wait(&mut self, more: &[libc::pollfd], wait: Duration) -> io::Result<Vec<libc::c_short>> {
        Spdy::wait(self, more, wait)
    }

    fn closed(&self) -> bool {
        Spdy::closed(self)
    }

    fn finish(&mut self) {
        Spdy::finish(self)
    }
}

/// The channels of kubelet's WebSocket remote command protocols.
const WS_STDIN: u32 = 0;
const WS_STDOUT: u32 = 1;
const WS_STDERR: u32 = 2;
const WS_ERROR: u32 = 3;
const WS_RESIZE: u32 = 4;
/// How long the client's answer to the close frame is waited for, so that closing does not
/// reset a connection the client still writes on (and drop output in flight).
const WS_CLOSE_WAIT: Duration = Duration::from_secs(2);

/// A WebSocket session over the client's connection, as kubelet's wsstream: the channels
/// exist from the start, by protocol; there is no end of stdin before v5 (not served), so
/// the command's stdin stays open until the client goes.
pub(super) struct Ws<'a> {
    pub(super) link: Link<'a>,
    dec: websocket::Decoder,
    pub(super) protocol: websocket::Protocol,
    /// The client sent its close frame.
    gone: bool,
    /// The close code said at the end: normal, or what the client broke.
    close_code: u16,
}

impl<'a> Ws<'a> {
    pub(super) fn new(io: TlsIo<'a>, idle: Duration, protocol: websocket::Protocol) -> Ws<'a> {
        Ws {
            link: Link::new(io, idle),
            dec: websocket::Decoder::default(),
            protocol,
            gone: false,
            close_code: websocket::CLOSE_NORMAL,
        }
    }

    /// The next message received, answering pings; a close frame marks the client gone.
    pub(super) fn next(&mut self) -> io::Result<Option<websocket::Message>> {
        use websocket::Message;
        while !self.gone {
            let input = self.link.io.input();
            let (used, message) = match self.dec.decode(input) {
                Ok(r) => r,
                Err(e) => {
                    self.close_code = e.close_code();
                    return Err(io::Error::other(e));
                }
            };
            input.drain(..used);
            match message {
                None => return Ok(None),
                Some(Message::Ping(p)) => websocket::frame(websocket::OP_PONG, &p, &mut self.link.out),
                Some(Message::Pong) => {}
                Some(Message::Close(_)) => self.gone = true,
                Some(m) => return Ok(Some(m)),
            }
        }
        Ok(None)
    }
}

impl Session for Ws<'_> {
    fn open_streams(&mut self, io: &StreamIo) -> io::Result<Streams> {
        let streams = Streams {
            error: Some(WS_ERROR),
            stdin: io.stdin.then_some(WS_STDIN),
            stdout: io.stdout.then_some(WS_STDOUT),
            stderr: io.stderr.then_some(WS_STDERR),
            resize: Some(WS_RESIZE),
        };
        // kubelet tells the client the streams are there with an empty message on the
        // lowest channel it writes.
        let first = streams.stdout.or(streams.stderr).unwrap_or(WS_ERROR);
        websocket::channel_frame(self.protocol.base64, first as u8, &[], &mut self.link.out);
        Ok(streams)
    }

    fn received(&mut self) -> io::Result<Option<Received>> {
        while let Some(m) = self.next()? {
            // Messages on channels the client may not write are ignored, as kubelet does.
            match websocket::channel_message(self.protocol.base64, &m) {
                Some((ch, data)) if matches!(u32::from(ch), WS_STDIN | WS_RESIZE) => {
                    return Ok(Some(Received { stream: u32::from(ch), data, fin: false }))
                }
                _ => {}
            }
        }
        Ok(None)
    }

    /// `data` on channel `id` in messages of at most `DATA_FRAME`; the end of a channel is
    /// not told before v5.
    fn data(&mut self, id: u32, data: &[u8], _fin: bool) {
        for piece in data.chunks(DATA_FRAME) {
            websocket::channel_frame(self.protocol.base64, id as u8, piece, &mut self.link.out);
        }
    }

    fn has_room(&self) -> bool {
        self.link.has_room()
    }

    fn wait(&mut self, more: &[libc::pollfd], wait: Duration) -> io::Result<Vec<libc::c_short>> {
        self.link.wait(more, wait)
    }

    fn closed(&self) -> bool {
        self.gone || self.link.io.drained()
    }

    /// Writes what is left and the close frame, waits a little for the client's close, and
    /// closes.
    fn finish(&mut self) {
        websocket::close_frame(self.close_code, &mut self.link.out);
        if !self.link.flush_out() {
            return;
        }
        let deadline = Instant::now() + WS_CLOSE_WAIT;
        while self.close_code == websocket::CLOSE_NORMAL && !self.closed() {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else { break };
            if self.wait(&[], left.min(Duration::from_millis(100))).is_err() || self.received().is_err() {
                break;
            }
        }
        self.link.io.close(Duration::from_secs(1));
    }
}

/// The streams of a remote command, by id.
#[derive(Default)]
pub(super) struct Streams {
    pub(super) error: Option<u32>,
    pub(super) stdin: Option<u32>,
    pub(super) stdout: Option<u32>,
    pub(super) stderr: Option<u32>,
    pub(super) resize: Option<u32>,
}

impl Streams {
    pub(super) fn complete(&self, io: &StreamIo, resize: bool) -> bool {
        self.error.is_some()
            && (!io.stdin || self.stdin.is_some())
            && (!io.stdout || self.stdout.is_some())
            && (!io.stderr || self.stderr.is_some())
            && (!resize || !io.tty || self.resize.is_some())
    }
}
