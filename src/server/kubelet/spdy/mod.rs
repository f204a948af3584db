//! SPDY/3.1 frames as the kube-apiserver (client-go, moby/spdystream) writes and reads them:
//! a pure codec over byte buffers, with the header blocks' zlib compression (`zlib`).
//!
//! One `Decoder` reads everything a peer sends on one session and one `Encoder` writes
//! everything sent to it: each owns that direction's single zlib stream, so frames must pass
//! through them in wire order. Any error ends the session (SPDY/3 calls them session errors;
//! the header stream's state is lost), so the caller sends GOAWAY and closes.

mod zlib;

use zlib::{HeaderDeflater, HeaderInflater};
pub use zlib::{DICTIONARY, DICTIONARY_ID};

use std::collections::BTreeSet;

/// The SPDY version this codec speaks.
pub const VERSION: u16 = 3;
/// FIN: the sender's last frame on the stream (SYN_STREAM, SYN_REPLY, HEADERS, DATA).
pub const FLAG_FIN: u8 = 0x01;
/// UNIDIRECTIONAL: the receiver of a SYN_STREAM never sends on the stream.
pub const FLAG_UNIDIRECTIONAL: u8 = 0x02;
/// CLEAR_SETTINGS on a SETTINGS frame.
pub const FLAG_CLEAR_SETTINGS: u8 = 0x01;

/// RST_STREAM status PROTOCOL_ERROR.
pub const RST_PROTOCOL_ERROR: u32 = 1;
/// RST_STREAM status INVALID_STREAM: a frame for a stream that is not open.
pub const RST_INVALID_STREAM: u32 = 2;
/// RST_STREAM status REFUSED_STREAM: the stream was refused before any processing.
pub const RST_REFUSED_STREAM: u32 = 3;
/// RST_STREAM status CANCEL: what spdystream's `Reset()` sends.
pub const RST_CANCEL: u32 = 5;
/// RST_STREAM status INTERNAL_ERROR.
pub const RST_INTERNAL_ERROR: u32 = 6;
/// RST_STREAM status STREAM_IN_USE: a SYN_STREAM for a stream id already open.
pub const RST_STREAM_IN_USE: u32 = 8;
/// RST_STREAM status STREAM_ALREADY_CLOSED: data after the sender's FIN.
pub const RST_STREAM_ALREADY_CLOSED: u32 = 9;
/// GOAWAY status OK.
pub const GOAWAY_OK: u32 = 0;
/// GOAWAY status PROTOCOL_ERROR.
pub const GOAWAY_PROTOCOL_ERROR: u32 = 1;
/// GOAWAY status INTERNAL_ERROR.
pub const GOAWAY_INTERNAL_ERROR: u32 = 2;

/// Every frame starts with 8 bytes: the type or stream word, flags, and a 24-bit length.
pub const FRAME_HEADER_LEN: usize = 8;
/// The longest payload a frame's 24-bit length can declare.
pub const MAX_FRAME_LENGTH: usize = (1 << 24) - 1;
/// The default bound on a DATA frame's payload.
pub const DEFAULT_MAX_DATA: usize = 1 << 20;
/// The bound on a control frame's payload.
pub const MAX_CONTROL_LENGTH: usize = 64 << 10;
/// The bound on an inflated header block, received or sent.
pub const MAX_HEADER_BLOCK: usize = 256 << 10;
/// The bound on the header values in a received block (a NUL-joined value counts each part).
pub const MAX_HEADERS: usize = 256;

/// Stream ids, SETTINGS values' ids aside, are 31 bits; the top bit is reserved.
const MAX_STREAM_ID: u32 = 0x7fff_ffff;
/// A SETTINGS id is 24 bits.
const MAX_SETTING_ID: u32 = 0x00ff_ffff;

const TYPE_SYN_STREAM: u16 = 1;
const TYPE_SYN_REPLY: u16 = 2;
const TYPE_RST_STREAM: u16 = 3;
const TYPE_SETTINGS: u16 = 4;
const TYPE_PING: u16 = 6;
const TYPE_GOAWAY: u16 = 7;
const TYPE_HEADERS: u16 = 8;
const TYPE_WINDOW_UPDATE: u16 = 9;

/// One SPDY/3 frame, its header block inflated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// SYN_STREAM: the peer opens a stream.
    SynStream {
        /// The new stream (odd from the client).
        stream_id: u32,
        /// The stream it is associated with, 0 for none.
        associated: u32,
        /// 0 (highest) to 7.
        priority: u8,
        /// `FLAG_FIN`, `FLAG_UNIDIRECTIONAL`.
        flags: u8,
        /// The stream's headers (`streamtype`, `port`, `requestid`, …).
        headers: Headers,
    },
    /// SYN_REPLY: the answer to a SYN_STREAM.
    SynReply {
        /// The stream answered.
        stream_id: u32,
        /// `FLAG_FIN`.
        flags: u8,
        /// The reply's headers (spdystream sends none).
        headers: Headers,
    },
    /// RST_STREAM: a stream ends abnormally.
    RstStream {
        /// The stream.
        stream_id: u32,
        /// Why (`RST_CANCEL`, …).
        status: u32,
    },
    /// SETTINGS: the peer's parameters (spdystream ignores them, and so may the session).
    Settings {
        /// `FLAG_CLEAR_SETTINGS`.
        flags: u8,
        /// (flags, id, value) for each setting, in order.
        entries: Vec<(u8, u32, u32)>,
    },
    /// PING: to be echoed with the same id.
    Ping {
        /// The ping's id (odd from the client).
        id: u32,
    },
    /// GOAWAY: the sender starts no more streams.
    GoAway {
        /// The last stream the sender accepted.
        last_good: u32,
        /// `GOAWAY_OK`, …
        status: u32,
    },
    /// HEADERS: more headers for an open stream.
    Headers {
        /// The stream.
        stream_id: u32,
        /// `FLAG_FIN`.
        flags: u8,
        /// The headers.
        headers: Headers,
    },
    /// WINDOW_UPDATE: flow control, which spdystream neither sends nor honours.
    WindowUpdate {
        /// The stream, 0 for the session (SPDY/3.1).
        stream_id: u32,
        /// The bytes added to the window.
        delta: u32,
    },
    /// DATA: bytes on a stream.
    Data {
        /// The stream.
        stream_id: u32,
        /// `FLAG_FIN`.
        flags: u8,
        /// The payload.
        data: Vec<u8>,
    },
    /// A control frame of a type this codec does not know: SPDY/3 says to ignore it, so its
    /// payload is dropped and the caller skips it. It cannot be encoded.
    Unknown {
        /// The control frame type.
        frame_type: u16,
        /// Its flags.
        flags: u8,
    },
}

/// A header block: (lowercase name, value) pairs in order. On the wire each name appears
/// once, its values joined by NUL; here each value is its own pair.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers {
    entries: Vec<(String, String)>,
}

impl Headers {
    /// No headers.
    pub fn new() -> Self {
        Headers::default()
    }

    /// Appends a value; the name is lowercased, as SPDY/3 requires.
    pub fn push(&mut self, name: &str, value: &str) {
        self.entries.push((name.to_ascii_lowercase(), value.to_string()));
    }

    /// The first value of `name` (matched without regard to ASCII case).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Every value of `name` (matched without regard to ASCII case), in order.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.entries.iter().filter(move |(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Every (name, value) pair, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// How many values there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The uncompressed SPDY/3 name/value block: a 32-bit count, then each name once with
    /// its values joined by NUL, in the order names first appear; at most `MAX_HEADER_BLOCK`.
    fn to_block(&self) -> Result<Vec<u8>, SpdyError> {
        let mut seen = BTreeSet::new();
        let names: Vec<&str> = self.entries.iter().map(|(n, _)| n.as_str()).filter(|n| seen.insert(*n)).collect();
        let mut block = Vec::new();
        // A count past u32::MAX never leaves: the names would break the block bound first.
        put_u32(&mut block, names.len() as u32);
        for name in names {
            if name.is_empty() || name.contains('\0') {
                return Err(SpdyError::BadHeader {
                    name: short(name),
                    reason: "a name must be non-empty, without NUL",
                });
            }
            let mut value = Vec::new();
            for (i, v) in self.get_all(name).enumerate() {
                if v.contains('\0') {
                    return Err(SpdyError::BadHeader { name: short(name), reason: "a value must not contain NUL" });
                }
                if i > 0 {
                    value.push(0);
                }
                value.extend_from_slice(v.as_bytes());
                if value.len() > MAX_HEADER_BLOCK {
                    return Err(SpdyError::HeaderBlockTooLarge { max: MAX_HEADER_BLOCK });
                }
            }
            if block.len() + 8 + name.len() + value.len() > MAX_HEADER_BLOCK {
                return Err(SpdyError::HeaderBlockTooLarge { max: MAX_HEADER_BLOCK });
            }
            // Both lengths are at most MAX_HEADER_BLOCK, checked above.
            put_u32(&mut block, name.len() as u32);
            block.extend_from_slice(name.as_bytes());
            put_u32(&mut block, value.len() as u32);
            block.extend_from_slice(&value);
        }
        Ok(block)
    }

    /// Parses an inflated name/value block, with the checks spdystream makes (lowercase,
    /// unique names) and this module's bounds.
    fn parse(block: &[u8]) -> Result<Headers, SpdyError> {
        let mut rest = block;
        let count = take_u32(&mut rest)? as usize;
        if count > MAX_HEADERS {
            return Err(SpdyError::TooManyHeaders { max: MAX_HEADERS });
        }
        let mut headers = Headers { entries: Vec::with_capacity(count) };
        let mut seen: BTreeSet<&[u8]> = BTreeSet::new();
        for _ in 0..count {
            let name = take_bytes(&mut rest)?;
            let value = take_bytes(&mut rest)?;
            let shown = || short(&String::from_utf8_lossy(name));
            let Ok(name_str) = std::str::from_utf8(name) else {
                return Err(SpdyError::BadHeader { name: shown(), reason: "the name is not UTF-8" });
            };
            if name.is_empty() {
                return Err(SpdyError::BadHeader { name: shown(), reason: "the name is empty" });
            }
            if name.iter().any(u8::is_ascii_uppercase) {
                return Err(SpdyError::BadHeader { name: shown(), reason: "the name is not lowercase" });
            }
            if !seen.insert(name) {
                return Err(SpdyError::BadHeader { name: shown(), reason: "the name appears twice" });
            }
            let Ok(value) = std::str::from_utf8(value) else {
                return Err(SpdyError::BadHeader { name: shown(), reason: "the value is not UTF-8" });
            };
            for part in value.split('\0') {
                if headers.entries.len() == MAX_HEADERS {
                    return Err(SpdyError::TooManyHeaders { max: MAX_HEADERS });
                }
                headers.entries.push((name_str.to_string(), part.to_string()));
            }
        }
        if !rest.is_empty() {
            return Err(SpdyError::BadHeaderBlock { reason: "bytes follow the last header" });
        }
        Ok(headers)
    }
}

impl<'a> FromIterator<(&'a str, &'a str)> for Headers {
    fn from_iter<I: IntoIterator<Item = (&'a str, &'a str)>>(iter: I) -> Self {
        let mut headers = Headers::new();
        for (name, value) in iter {
            headers.push(name, value);
        }
        headers
    }
}

/// A frame that cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SpdyError {
    /// A control frame of another SPDY version.
    #[error("SPDY version {version} is not supported (only 3)")]
    UnsupportedVersion {
        /// The version the frame declares.
        version: u16,
    },
    /// A DATA frame longer than the decoder's bound.
    #[error("DATA frame on stream {stream_id} declares {length} bytes, more than the {max} allowed")]
    DataTooLarge {
        /// The stream.
        stream_id: u32,
        /// The declared length.
        length: usize,
        /// The bound.
        max: usize,
    },
    /// A control frame longer than `MAX_CONTROL_LENGTH`.
    #[error("{frame} frame declares {length} bytes, more than the {max} allowed")]
    ControlTooLarge {
        /// The frame type's name.
        frame: &'static str,
        /// The declared length.
        length: usize,
        /// The bound.
        max: usize,
    },
    /// A control frame whose length its layout does not allow.
    #[error("{frame} frame has {length} bytes, which its layout does not allow")]
    BadLength {
        /// The frame type's name.
        frame: &'static str,
        /// The length.
        length: usize,
    },
    /// Stream id 0 (or PING id 0) where a stream is required.
    #[error("{frame} frame names stream 0")]
    ZeroStreamId {
        /// The frame type's name.
        frame: &'static str,
    },
    /// The header stream does not start with a zlib header for deflate.
    #[error("header compression: bad zlib header {cmf:#04x} {flg:#04x}")]
    BadZlibHeader {
        /// The first byte (CMF).
        cmf: u8,
        /// The second byte (FLG).
        flg: u8,
    },
    /// The header stream's zlib header names a dictionary other than SPDY/3's.
    #[error("header compression: dictionary {id:#010x} is not SPDY/3's")]
    WrongDictionary {
        /// The DICTID.
        id: u32,
    },
    /// The compressed header bytes are not valid deflate.
    #[error("header compression: invalid deflate data ({status:?})")]
    Inflate {
        /// miniz_oxide's status.
        status: miniz_oxide::inflate::TINFLStatus,
    },
    /// The peer ended its header stream, or an earlier header block failed.
    #[error("header compression: the stream has ended or failed before")]
    HeaderStreamEnded,
    /// A header block inflates (or would encode) to more than its bound.
    #[error("header block is longer than {max} bytes")]
    HeaderBlockTooLarge {
        /// The bound.
        max: usize,
    },
    /// A header block has more values than `MAX_HEADERS`.
    #[error("header block has more than {max} headers")]
    TooManyHeaders {
        /// The bound.
        max: usize,
    },
    /// A header block's layout is broken.
    #[error("header block: {reason}")]
    BadHeaderBlock {
        /// What is wrong.
        reason: &'static str,
    },
    /// One header is not allowed.
    #[error("header {name:?}: {reason}")]
    BadHeader {
        /// The name (its first 64 characters).
        name: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A field of a frame to send does not fit its bits on the wire.
    #[error("{field} {value} does not fit: at most {max}")]
    ValueTooLarge {
        /// Which field.
        field: &'static str,
        /// Its value.
        value: u64,
        /// The largest the wire allows.
        max: u64,
    },
    /// `Frame::Unknown` was given to the encoder.
    #[error("unknown control frame type {frame_type} cannot be sent")]
    EncodeUnknown {
        /// The type.
        frame_type: u16,
    },
}

/// Reads one direction of a SPDY/3 session: frames from a byte buffer, one at a time.
pub struct Decoder {
    max_data: usize,
    inflater: HeaderInflater,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

impl Decoder {
    /// A decoder for a new session, DATA payloads bounded by `DEFAULT_MAX_DATA`.
    pub fn new() -> Self {
        Decoder::with_max_data(DEFAULT_MAX_DATA)
    }

    /// A decoder for a new session, DATA payloads bounded by `max_data` (at most
    /// `MAX_FRAME_LENGTH`, which the wire cannot exceed anyway).
    pub fn with_max_data(max_data: usize) -> Self {
        Decoder { max_data: max_data.min(MAX_FRAME_LENGTH), inflater: HeaderInflater::new() }
    }

    /// The first frame in `buf` and the bytes it used, or `None` if `buf` does not hold all
    /// of it yet (call again with the same bytes and more). A length beyond the bounds fails
    /// as soon as the 8-byte frame header is in, before its payload is waited for; the
    /// header stream advances only when a whole frame is decoded.
    pub fn decode(&mut self, buf: &[u8]) -> Result<Option<(Frame, usize)>, SpdyError> {
        let Some(head) = buf.get(..FRAME_HEADER_LEN) else {
            return Ok(None);
        };
        let word = be32(&head[..4]);
        let flags = head[4];
        let length = (be32(&head[4..8]) & 0x00ff_ffff) as usize;
        let total = FRAME_HEADER_LEN + length;
        if word & 0x8000_0000 == 0 {
            let stream_id = word;
            if length > self.max_data {
                return Err(SpdyError::DataTooLarge { stream_id, length, max: self.max_data });
            }
            if stream_id == 0 {
                return Err(SpdyError::ZeroStreamId { frame: "DATA" });
            }
            let Some(data) = buf.get(FRAME_HEADER_LEN..total) else {
                return Ok(None);
            };
            return Ok(Some((Frame::Data { stream_id, flags, data: data.to_vec() }, total)));
        }
        let version = ((word >> 16) & 0x7fff) as u16;
        if version != VERSION {
            return Err(SpdyError::UnsupportedVersion { version });
        }
        let frame_type = (word & 0xffff) as u16;
        if length > MAX_CONTROL_LENGTH {
            return Err(SpdyError::ControlTooLarge { frame: type_name(frame_type), length, max: MAX_CONTROL_LENGTH });
        }
        let Some(payload) = buf.get(FRAME_HEADER_LEN..total) else {
            return Ok(None);
        };
        Ok(Some((self.control(frame_type, flags, payload)?, total)))
    }

    /// One whole control frame's payload.
    fn control(&mut self, frame_type: u16, flags: u8, p: &[u8]) -> Result<Frame, SpdyError> {
        let frame = type_name(frame_type);
        let bad_length = || SpdyError::BadLength { frame, length: p.len() };
        let exact = |n: usize| if p.len() == n { Ok(()) } else { Err(bad_length()) };
        let stream = |at: usize| be32(&p[at..at + 4]) & MAX_STREAM_ID;
        let nonzero = |id: u32| if id == 0 { Err(SpdyError::ZeroStreamId { frame }) } else { Ok(id) };
        Ok(match frame_type {
            TYPE_SYN_STREAM => {
                if p.len() < 10 {
                    return Err(bad_length());
                }
                let stream_id = nonzero(stream(0))?;
                // p[9] is the slot (client certificates), which nothing uses.
                let headers = self.headers(&p[10..])?;
                Frame::SynStream { stream_id, associated: stream(4), priority: p[8] >> 5, flags, headers }
            }
            TYPE_SYN_REPLY | TYPE_HEADERS => {
                if p.len() < 4 {
                    return Err(bad_length());
                }
                let stream_id = nonzero(stream(0))?;
                let headers = self.headers(&p[4..])?;
                if frame_type == TYPE_SYN_REPLY {
                    Frame::SynReply { stream_id, flags, headers }
                } else {
                    Frame::Headers { stream_id, flags, headers }
                }
            }
            TYPE_RST_STREAM => {
                exact(8)?;
                Frame::RstStream { stream_id: nonzero(stream(0))?, status: be32(&p[4..8]) }
            }
            TYPE_SETTINGS => {
                if p.len() < 4 {
                    return Err(bad_length());
                }
                let count = be32(&p[..4]) as u64;
                // The count must match the length, which bounds it (8 bytes an entry).
                if 4 + 8 * count != p.len() as u64 {
                    return Err(bad_length());
                }
                let entries =
                    p[4..].chunks_exact(8).map(|e| (e[0], be32(&e[..4]) & MAX_SETTING_ID, be32(&e[4..8]))).collect();
                Frame::Settings { flags, entries }
            }
            TYPE_PING => {
                exact(4)?;
                Frame::Ping { id: nonzero(be32(p))? }
            }
            TYPE_GOAWAY => {
                exact(8)?;
                Frame::GoAway { last_good: stream(0), status: be32(&p[4..8]) }
            }
            TYPE_WINDOW_UPDATE => {
                exact(8)?;
                Frame::WindowUpdate { stream_id: stream(0), delta: be32(&p[4..8]) & MAX_STREAM_ID }
            }
            frame_type => Frame::Unknown { frame_type, flags },
        })
    }

    /// Inflates and parses one header block.
    fn headers(&mut self, compressed: &[u8]) -> Result<Headers, SpdyError> {
        let block = self.inflater.inflate(compressed, MAX_HEADER_BLOCK)?;
        Headers::parse(&block)
    }
}

/// Writes one direction of a SPDY/3 session: frames into a byte buffer.
pub struct Encoder {
    deflater: HeaderDeflater,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder::new()
    }
}

impl Encoder {
    /// An encoder for a new session.
    pub fn new() -> Self {
        Encoder { deflater: HeaderDeflater::new() }
    }

    /// Appends `frame` to `out`. A DATA payload longer than `MAX_FRAME_LENGTH` becomes
    /// several frames, FIN on the last only. A field that does not fit the wire, a header
    /// block over `MAX_HEADER_BLOCK` or `Frame::Unknown` fails, leaving `out` as it was.
    pub fn encode(&mut self, frame: &Frame, out: &mut Vec<u8>) -> Result<(), SpdyError> {
        match frame {
            Frame::SynStream { stream_id, associated, priority, flags, headers } => {
                let stream_id = fits("SYN_STREAM stream id", *stream_id, MAX_STREAM_ID)?;
                let associated = fits("SYN_STREAM associated stream id", *associated, MAX_STREAM_ID)?;
                let priority = fits("SYN_STREAM priority", u32::from(*priority), 7)? as u8;
                let block = headers.to_block()?;
                let length = 10 + self.deflater.deflated_len(block.len());
                control_head(out, TYPE_SYN_STREAM, *flags, length);
                put_u32(out, stream_id);
                put_u32(out, associated);
                out.extend_from_slice(&[priority << 5, 0]);
                self.deflater.deflate(&block, out);
            }
            Frame::SynReply { stream_id, flags, headers } | Frame::Headers { stream_id, flags, headers } => {
                let (frame_type, field) = match frame {
                    Frame::SynReply { .. } => (TYPE_SYN_REPLY, "SYN_REPLY stream id"),
                    _ => (TYPE_HEADERS, "HEADERS stream id"),
                };
                let stream_id = fits(field, *stream_id, MAX_STREAM_ID)?;
                let block = headers.to_block()?;
                control_head(out, frame_type, *flags, 4 + self.deflater.deflated_len(block.len()));
                put_u32(out, stream_id);
                self.deflater.deflate(&block, out);
            }
            Frame::RstStream { stream_id, status } => {
                let stream_id = fits("RST_STREAM stream id", *stream_id, MAX_STREAM_ID)?;
                control_head(out, TYPE_RST_STREAM, 0, 8);
                put_u32(out, stream_id);
                put_u32(out, *status);
            }
            Frame::Settings { flags, entries } => {
                let max_entries = (MAX_FRAME_LENGTH - 4) / 8;
                fits("SETTINGS entry count", entries.len() as u64, max_entries as u64)?;
                for (_, id, _) in entries {
                    fits("SETTINGS id", *id, MAX_SETTING_ID)?;
                }
                control_head(out, TYPE_SETTINGS, *flags, 4 + 8 * entries.len());
                put_u32(out, entries.len() as u32); // bounded by max_entries above
                for (entry_flags, id, value) in entries {
                    put_u32(out, u32::from(*entry_flags) << 24 | id);
                    put_u32(out, *value);
                }
            }
            Frame::Ping { id } => {
                control_head(out, TYPE_PING, 0, 4);
                put_u32(out, *id);
            }
            Frame::GoAway { last_good, status } => {
                let last_good = fits("GOAWAY last good stream id", *last_good, MAX_STREAM_ID)?;
                control_head(out, TYPE_GOAWAY, 0, 8);
                put_u32(out, last_good);
                put_u32(out, *status);
            }
            Frame::WindowUpdate { stream_id, delta } => {
                let stream_id = fits("WINDOW_UPDATE stream id", *stream_id, MAX_STREAM_ID)?;
                let delta = fits("WINDOW_UPDATE delta", *delta, MAX_STREAM_ID)?;
                control_head(out, TYPE_WINDOW_UPDATE, 0, 8);
                put_u32(out, stream_id);
                put_u32(out, delta);
            }
            Frame::Data { stream_id, flags, data } => {
                let stream_id = fits("DATA stream id", *stream_id, MAX_STREAM_ID)?;
                let mut chunks = data.chunks(MAX_FRAME_LENGTH).peekable();
                if chunks.peek().is_none() {
                    data_head(out, stream_id, *flags, 0);
                }
                while let Some(chunk) = chunks.next() {
                    let flags = if chunks.peek().is_some() { flags & !FLAG_FIN } else { *flags };
                    data_head(out, stream_id, flags, chunk.len());
                    out.extend_from_slice(chunk);
                }
            }
            Frame::Unknown { frame_type, .. } => return Err(SpdyError::EncodeUnknown { frame_type: *frame_type }),
        }
        Ok(())
    }
}

/// `value` if it is at most `max`, else the error naming `field`.
fn fits<T: Into<u64> + Copy>(field: &'static str, value: T, max: T) -> Result<T, SpdyError> {
    if value.into() > max.into() {
        return Err(SpdyError::ValueTooLarge { field, value: value.into(), max: max.into() });
    }
    Ok(value)
}

/// A control frame's 8-byte header. `length` is at most MAX_FRAME_LENGTH: every caller's
/// payload is bounded well below it (header blocks by MAX_HEADER_BLOCK, SETTINGS by count).
fn control_head(out: &mut Vec<u8>, frame_type: u16, flags: u8, length: usize) {
    put_u32(out, 0x8000_0000 | u32::from(VERSION) << 16 | u32::from(frame_type));
    put_u32(out, u32::from(flags) << 24 | length as u32);
}

/// A DATA frame's 8-byte header; `length` is at most MAX_FRAME_LENGTH (the caller chunks).
fn data_head(out: &mut Vec<u8>, stream_id: u32, flags: u8, length: usize) {
    put_u32(out, stream_id);
    put_u32(out, u32::from(flags) << 24 | length as u32);
}

fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_be_bytes());
}

/// The big-endian u32 at the start of `b`, which holds at least 4 bytes.
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Takes a big-endian u32 off the front of an inflated header block.
fn take_u32(rest: &mut &[u8]) -> Result<u32, SpdyError> {
    let Some((head, tail)) = rest.split_first_chunk::<4>() else {
        return Err(SpdyError::BadHeaderBlock { reason: "it ends inside a count or length" });
    };
    *rest = tail;
    Ok(u32::from_be_bytes(*head))
}

/// Takes a u32-length-prefixed string off the front of an inflated header block.
fn take_bytes<'a>(rest: &mut &'a [u8]) -> Result<&'a [u8], SpdyError> {
    let length = take_u32(rest)? as usize;
    if length > rest.len() {
        return Err(SpdyError::BadHeaderBlock { reason: "a name or value runs past its end" });
    }
    let (bytes, tail) = rest.split_at(length);
    *rest = tail;
    Ok(bytes)
}

/// The first 64 characters of a name, for an error message.
fn short(name: &str) -> String {
    name.chars().take(64).collect()
}

/// A control frame type's name, for errors.
fn type_name(frame_type: u16) -> &'static str {
    match frame_type {
        TYPE_SYN_STREAM => "SYN_STREAM",
        TYPE_SYN_REPLY => "SYN_REPLY",
        TYPE_RST_STREAM => "RST_STREAM",
        TYPE_SETTINGS => "SETTINGS",
        TYPE_PING => "PING",
        TYPE_GOAWAY => "GOAWAY",
        TYPE_HEADERS => "HEADERS",
        TYPE_WINDOW_UPDATE => "WINDOW_UPDATE",
        _ => "unknown control",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio};

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    fn to_hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        pairs.iter().copied().collect()
    }

    // Made with python3 3.11 at development time: one zlib.compressobj(9, zlib.DEFLATED, 15, 9,
    // zlib.Z_DEFAULT_STRATEGY, zdict=DICTIONARY) for all three, each header block followed by
    // flush(zlib.Z_SYNC_FLUSH), as Go's zlib.NewWriterLevelDict + Flush writes them. The first
    // block's bytes equal the research note's vector for {streamtype: error}.
    const SYN_ERROR: &str =
        "80030001000000280000000100000000000078f9e3c6a7c202a62346703a2b294a4dcc851625aca9a08006000000ffff";
    const SYN_STDOUT: &str = "800300010000001900000003000000000000c22a054ccc29f9a52500000000ffff";
    const SYN_PORTFORWARD: &str = "800300010000002e0000000500000000000002a5550c395009940829cc8bc0f9c6c2c0c20048\
                                   731641223f139429180d00000000ffff";

    fn round_trip(frame: Frame) {
        let mut out = Vec::new();
        Encoder::new().encode(&frame, &mut out).unwrap();
        let (decoded, used) = Decoder::new().decode(&out).unwrap().unwrap();
        assert_eq!(decoded, frame);
        assert_eq!(used, out.len());
    }

    /// Runs `python3 -c script args…` with `input` on stdin; None (and a note) without python3.
    fn python(script: &str, args: &[&str], input: &str) -> Option<String> {
        let child = Command::new("python3")
            .arg("-c")
            .arg(script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match child {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                eprintln!("skipped: python3 is not installed");
                return None;
            }
            Err(e) => panic!("python3: {e}"),
        };
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "python3: {}", String::from_utf8_lossy(&output.stderr));
        Some(String::from_utf8(output.stdout).unwrap())
    }

    #[test]
    fn decodes_go_style_compressed_syn_streams_in_sequence() {
        let mut decoder = Decoder::new();
        let wire = hex(SYN_ERROR);
        let (frame, used) = decoder.decode(&wire).unwrap().unwrap();
        assert_eq!(used, wire.len());
        assert_eq!(
            frame,
            Frame::SynStream {
                stream_id: 1,
                associated: 0,
                priority: 0,
                flags: 0,
                headers: headers(&[("streamtype", "error")])
            }
        );
        // The second block refers back into the first and the dictionary.
        let (frame, _) = decoder.decode(&hex(SYN_STDOUT)).unwrap().unwrap();
        let Frame::SynStream { stream_id: 3, headers, .. } = frame else { panic!("{frame:?}") };
        assert_eq!(headers.get("streamtype"), Some("stdout"));
        let (frame, _) = decoder.decode(&hex(SYN_PORTFORWARD)).unwrap().unwrap();
        let Frame::SynStream { stream_id: 5, headers, .. } = frame else { panic!("{frame:?}") };
        let pairs: Vec<_> = headers.iter().collect();
        assert_eq!(pairs, [("streamtype", "data"), ("port", "8080"), ("requestid", "0")]);
        assert_eq!(headers.get("RequestID"), Some("0"));
    }

    #[test]
    fn the_second_block_cannot_be_read_without_the_first() {
        let err = Decoder::new().decode(&hex(SYN_STDOUT)).unwrap_err();
        assert!(matches!(err, SpdyError::BadZlibHeader { .. }), "{err}");
    }

    #[test]
    fn partial_frames_wait_at_every_split_point_without_touching_the_header_stream() {
        let mut decoder = Decoder::new();
        let mut ping = Vec::new();
        Encoder::new().encode(&Frame::Ping { id: 7 }, &mut ping).unwrap();
        let data = [0, 0, 0, 3, FLAG_FIN, 0, 0, 2, b'h', b'i'];
        for wire in [hex(SYN_ERROR), hex(SYN_STDOUT), ping, data.to_vec(), hex(SYN_PORTFORWARD)] {
            for split in 0..wire.len() {
                assert!(decoder.decode(&wire[..split]).unwrap().is_none(), "split at {split}");
            }
            let mut longer = wire.clone();
            longer.extend_from_slice(&[0x80, 0x03]);
            let (_, used) = decoder.decode(&longer).unwrap().unwrap();
            assert_eq!(used, wire.len());
        }
    }

    #[test]
    fn frames_are_read_one_at_a_time_from_a_buffer() {
        let mut encoder = Encoder::new();
        let mut wire = Vec::new();
        let frames = [
            Frame::SynReply { stream_id: 1, flags: 0, headers: Headers::new() },
            Frame::Data { stream_id: 1, flags: 0, data: b"abc".to_vec() },
            Frame::Headers { stream_id: 1, flags: FLAG_FIN, headers: headers(&[("a", "1")]) },
            Frame::Data { stream_id: 3, flags: FLAG_FIN, data: Vec::new() },
        ];
        for frame in &frames {
            encoder.encode(frame, &mut wire).unwrap();
        }
        let mut decoder = Decoder::new();
        let mut at = 0;
        for frame in &frames {
            let (decoded, used) = decoder.decode(&wire[at..]).unwrap().unwrap();
            assert_eq!(&decoded, frame);
            at += used;
        }
        assert_eq!(at, wire.len());
        // The note's FIN-only DATA frame on stream 3.
        assert_eq!(wire[wire.len() - 8..], hex("0000000301000000"));
    }

    #[test]
    fn header_frames_round_trip_on_one_session() {
        let mut encoder = Encoder::new();
        let mut decoder = Decoder::new();
        let frames = [
            Frame::SynStream {
                stream_id: 1,
                associated: 0,
                priority: 7,
                flags: FLAG_UNIDIRECTIONAL,
                headers: headers(&[("streamtype", "error"), ("port", "80")]),
            },
            Frame::SynStream {
                stream_id: 3,
                associated: 1,
                priority: 0,
                flags: FLAG_FIN,
                headers: headers(&[("streamtype", "stdout")]),
            },
            Frame::SynReply { stream_id: 1, flags: 0, headers: Headers::new() },
            Frame::Headers { stream_id: 3, flags: 0, headers: headers(&[("x", "1"), ("y", ""), ("x", "2")]) },
        ];
        for frame in &frames {
            let mut wire = Vec::new();
            encoder.encode(frame, &mut wire).unwrap();
            let (decoded, used) = decoder.decode(&wire).unwrap().unwrap();
            assert_eq!(used, wire.len());
            match (&decoded, frame) {
                // Values of one name travel joined, so they come back next to each other.
                (Frame::Headers { headers: got, .. }, Frame::Headers { .. }) => {
                    assert_eq!(got.iter().collect::<Vec<_>>(), [("x", "1"), ("x", "2"), ("y", "")]);
                    assert_eq!(got.get_all("x").collect::<Vec<_>>(), ["1", "2"]);
                }
                _ => assert_eq!(&decoded, frame),
            }
        }
    }

    #[test]
    fn fixed_control_frames_round_trip() {
        round_trip(Frame::Ping { id: 1 });
        round_trip(Frame::Ping { id: u32::MAX });
        round_trip(Frame::GoAway { last_good: 5, status: GOAWAY_PROTOCOL_ERROR });
        round_trip(Frame::RstStream { stream_id: 9, status: RST_CANCEL });
        round_trip(Frame::WindowUpdate { stream_id: 0, delta: 65536 });
        round_trip(Frame::WindowUpdate { stream_id: 3, delta: MAX_STREAM_ID });
        round_trip(Frame::Settings { flags: FLAG_CLEAR_SETTINGS, entries: vec![(1, 7, 65536), (0, 4, 100)] });
        round_trip(Frame::Settings { flags: 0, entries: Vec::new() });
        round_trip(Frame::Data { stream_id: MAX_STREAM_ID, flags: FLAG_FIN, data: vec![1, 2, 3] });

        let mut wire = Vec::new();
        Encoder::new().encode(&Frame::Ping { id: 1 }, &mut wire).unwrap();
        assert_eq!(wire, hex("800300060000000400000001"));
        wire.clear();
        Encoder::new().encode(&Frame::RstStream { stream_id: 3, status: RST_CANCEL }, &mut wire).unwrap();
        assert_eq!(wire, hex("80030003000000080000000300000005"));
        wire.clear();
        Encoder::new().encode(&Frame::Settings { flags: 0, entries: vec![(1, 7, 65536)] }, &mut wire).unwrap();
        assert_eq!(wire, hex("800300040000000c000000010100000700010000"));
    }

    #[test]
    fn unknown_control_frames_are_returned_to_skip() {
        let mut wire = hex("8003000a01000004deadbeef");
        wire.extend(hex("800300060000000400000003"));
        let mut decoder = Decoder::new();
        let (frame, used) = decoder.decode(&wire).unwrap().unwrap();
        assert_eq!(frame, Frame::Unknown { frame_type: 10, flags: 1 });
        assert_eq!(used, 12);
        assert_eq!(decoder.decode(&wire[used..]).unwrap().unwrap(), (Frame::Ping { id: 3 }, 12));
        // NOOP (type 5, SPDY/2) is unknown to SPDY/3 too.
        let noop = decoder.decode(&hex("8003000500000000")).unwrap().unwrap();
        assert_eq!(noop, (Frame::Unknown { frame_type: 5, flags: 0 }, 8));
        let err = Encoder::new().encode(&frame, &mut Vec::new()).unwrap_err();
        assert!(matches!(err, SpdyError::EncodeUnknown { frame_type: 10 }));
    }

    #[test]
    fn other_versions_are_refused_by_number() {
        let err = Decoder::new().decode(&hex("800200060000000400000001")).unwrap_err();
        assert!(matches!(err, SpdyError::UnsupportedVersion { version: 2 }));
        assert_eq!(err.to_string(), "SPDY version 2 is not supported (only 3)");
    }

    #[test]
    fn oversized_frames_fail_on_their_header_alone() {
        // 1 MiB + 1 declared, only the 8-byte header present: an error, not a wait.
        let err = Decoder::new().decode(&hex("0000000100100001")).unwrap_err();
        assert!(matches!(err, SpdyError::DataTooLarge { stream_id: 1, length: 0x10_0001, max: DEFAULT_MAX_DATA }));
        assert!(Decoder::new().decode(&hex("0000000100100000")).unwrap().is_none());

        let mut small = Decoder::with_max_data(4);
        assert!(matches!(small.decode(&hex("0000000100000005")), Err(SpdyError::DataTooLarge { max: 4, .. })));
        let (frame, _) = small.decode(&hex("000000010000000461626364")).unwrap().unwrap();
        assert_eq!(frame, Frame::Data { stream_id: 1, flags: 0, data: b"abcd".to_vec() });

        let err = Decoder::new().decode(&hex("8003000100010001")).unwrap_err();
        assert!(matches!(err, SpdyError::ControlTooLarge { frame: "SYN_STREAM", length: 0x1_0001, .. }), "{err}");
        assert!(Decoder::new().decode(&hex("8003000800010000")).unwrap().is_none());
    }

    #[test]
    fn lengths_the_layout_forbids_and_stream_zero_are_refused() {
        let cases = [
            ("80030006000000080000000100000000", "PING"),
            ("800300070000000400000001", "GOAWAY"),
            ("80030003000000040000000a", "RST_STREAM"),
            ("80030009000000040000000a", "WINDOW_UPDATE"),
            ("80030004000000080000000200000000", "SETTINGS"),
            ("8003000100000004000000010000", "SYN_STREAM"),
            ("80030002000000020000", "SYN_REPLY"),
        ];
        for (wire, name) in cases {
            let wire = hex(wire);
            match Decoder::new().decode(&wire) {
                Err(SpdyError::BadLength { frame, .. }) => assert_eq!(frame, name),
                other => panic!("{name}: {other:?}"),
            }
        }
        assert!(matches!(
            Decoder::new().decode(&hex("0000000000000000")),
            Err(SpdyError::ZeroStreamId { frame: "DATA" })
        ));
        let err = Decoder::new().decode(&hex("800300060000000400000000")).unwrap_err();
        assert!(matches!(err, SpdyError::ZeroStreamId { frame: "PING" }));
        let err = Decoder::new().decode(&hex("80030003000000080000000000000005")).unwrap_err();
        assert!(matches!(err, SpdyError::ZeroStreamId { frame: "RST_STREAM" }));
    }

    #[test]
    fn header_count_is_bounded() {
        let mut many = Headers::new();
        for i in 0..MAX_HEADERS {
            many.push(&format!("h{i}"), "v");
        }
        let frame = Frame::SynReply { stream_id: 1, flags: 0, headers: many.clone() };
        let mut wire = Vec::new();
        Encoder::new().encode(&frame, &mut wire).unwrap();
        assert_eq!(Decoder::new().decode(&wire).unwrap().unwrap().0, frame);

        many.push("one-more", "v");
        let mut wire = Vec::new();
        Encoder::new().encode(&Frame::SynReply { stream_id: 1, flags: 0, headers: many }, &mut wire).unwrap();
        assert!(matches!(Decoder::new().decode(&wire), Err(SpdyError::TooManyHeaders { max: MAX_HEADERS })));

        // 300 values of one name, NUL-joined, count as 300 headers.
        let joined: Headers = (0..300).map(|_| ("x", "v")).collect();
        let mut wire = Vec::new();
        Encoder::new().encode(&Frame::SynReply { stream_id: 1, flags: 0, headers: joined }, &mut wire).unwrap();
        assert!(matches!(Decoder::new().decode(&wire), Err(SpdyError::TooManyHeaders { .. })));
    }

    #[test]
    fn inflated_header_block_is_bounded_though_the_frame_is_small() {
        // 300 KiB of zeros deflate to a few hundred bytes: a frame far under 64 KiB.
        let mut block = vec![0u8; 300 << 10];
        block[3] = 1;
        let mut wire = Vec::new();
        control_head(&mut wire, TYPE_SYN_REPLY, 0, 0);
        put_u32(&mut wire, 1);
        wire.extend_from_slice(&[0x78, 0x01]);
        wire.extend(miniz_oxide::deflate::compress_to_vec(&block, 9));
        let length = (wire.len() - FRAME_HEADER_LEN) as u32;
        wire[4..8].copy_from_slice(&length.to_be_bytes());
        assert!(wire.len() < 4096);
        let err = Decoder::new().decode(&wire).unwrap_err();
        assert!(matches!(err, SpdyError::HeaderBlockTooLarge { max: MAX_HEADER_BLOCK }), "{err}");

        let huge: Headers = [("x", "y".repeat(MAX_HEADER_BLOCK).as_str())].into_iter().collect();
        let mut out = vec![1, 2];
        let err = Encoder::new().encode(&Frame::SynReply { stream_id: 1, flags: 0, headers: huge }, &mut out);
        assert!(matches!(err, Err(SpdyError::HeaderBlockTooLarge { .. })));
        assert_eq!(out, [1, 2]);
    }

    #[test]
    fn header_names_must_be_lowercase_unique_and_present() {
        let blocks: [(&[u8], &str); 5] = [
            (b"\0\0\0\x01\0\0\0\x01A\0\0\0\0", "not lowercase"),
            (b"\0\0\0\x02\0\0\0\x01a\0\0\0\0\0\0\0\x01a\0\0\0\0", "appears twice"),
            (b"\0\0\0\x01\0\0\0\0\0\0\0\0", "empty"),
            (b"\0\0\0\x01\0\0\0\x01a\0\0\0\x05ab", "runs past"),
            (b"\0\0\0\x00\0", "follow the last"),
        ];
        for (block, reason) in blocks {
            let err = Headers::parse(block).unwrap_err();
            assert!(err.to_string().contains(reason), "{err} lacks {reason}");
        }
        let parsed = Headers::parse(b"\0\0\0\x01\0\0\0\x01a\0\0\0\x03x\0y").unwrap();
        assert_eq!(parsed.get_all("a").collect::<Vec<_>>(), ["x", "y"]);
    }

    #[test]
    fn encoder_refuses_what_the_wire_cannot_carry_and_writes_nothing() {
        let mut out = Vec::new();
        let mut encoder = Encoder::new();
        let err = encoder.encode(&Frame::Data { stream_id: 1 << 31, flags: 0, data: Vec::new() }, &mut out);
        assert!(matches!(err, Err(SpdyError::ValueTooLarge { field: "DATA stream id", .. })));
        let err = encoder.encode(&Frame::Settings { flags: 0, entries: vec![(0, 1 << 24, 0)] }, &mut out);
        assert!(matches!(err, Err(SpdyError::ValueTooLarge { field: "SETTINGS id", .. })));
        let frame = Frame::SynStream { stream_id: 1, associated: 0, priority: 8, flags: 0, headers: Headers::new() };
        assert!(matches!(encoder.encode(&frame, &mut out), Err(SpdyError::ValueTooLarge { .. })));
        let bad = Frame::SynReply { stream_id: 1, flags: 0, headers: headers(&[("a", "x\0y")]) };
        assert!(matches!(encoder.encode(&bad, &mut out), Err(SpdyError::BadHeader { .. })));
        assert!(out.is_empty());
        // The zlib header was not spent on a failed frame: the next one still carries it.
        encoder.encode(&Frame::SynReply { stream_id: 1, flags: 0, headers: Headers::new() }, &mut out).unwrap();
        assert_eq!(Decoder::new().decode(&out).unwrap().unwrap().1, out.len());
    }

    #[test]
    fn data_longer_than_a_frame_is_split_with_fin_on_the_last() {
        let data = vec![5u8; MAX_FRAME_LENGTH + 10];
        let mut wire = Vec::new();
        Encoder::new().encode(&Frame::Data { stream_id: 1, flags: FLAG_FIN, data }, &mut wire).unwrap();
        let mut decoder = Decoder::with_max_data(MAX_FRAME_LENGTH);
        let (first, used) = decoder.decode(&wire).unwrap().unwrap();
        let Frame::Data { flags: 0, data, .. } = first else { panic!("first frame has FIN") };
        assert_eq!(data.len(), MAX_FRAME_LENGTH);
        let (second, rest) = decoder.decode(&wire[used..]).unwrap().unwrap();
        assert_eq!(second, Frame::Data { stream_id: 1, flags: FLAG_FIN, data: vec![5u8; 10] });
        assert_eq!(used + rest, wire.len());
    }

    #[test]
    fn pythons_zlib_reads_the_encoders_header_blocks() {
        let mut encoder = Encoder::new();
        let sent = [
            headers(&[("streamtype", "error"), ("port", "8080"), ("requestid", "0")]),
            Headers::new(),
            headers(&[("x", "1"), ("x", "2")]),
        ];
        let mut lines = String::new();
        let mut blocks = Vec::new();
        for (i, h) in sent.iter().enumerate() {
            let mut wire = Vec::new();
            let stream_id = 2 * i as u32 + 1;
            encoder.encode(&Frame::SynReply { stream_id, flags: 0, headers: h.clone() }, &mut wire).unwrap();
            lines.push_str(&to_hex(&wire[12..]));
            lines.push('\n');
            blocks.push(to_hex(&h.to_block().unwrap()));
        }
        let script = "import sys, zlib\n\
                      d = zlib.decompressobj(zdict=bytes.fromhex(sys.argv[1]))\n\
                      for line in sys.stdin.read().split():\n    print(d.decompress(bytes.fromhex(line)).hex())\n";
        let Some(out) = python(script, &[&to_hex(DICTIONARY)], &lines) else { return };
        assert_eq!(out.lines().collect::<Vec<_>>(), blocks);
    }

    #[test]
    fn decodes_pythons_compressed_blocks_beyond_the_32k_window() {
        // Sixty blocks of about 1.5 KiB from one compressor: the window wraps, and matches
        // reach back across the wrap into earlier blocks.
        let script = "import sys, zlib, struct\n\
                      D = bytes.fromhex(sys.argv[1])\n\
                      c = zlib.compressobj(9, zlib.DEFLATED, 15, 9, zlib.Z_DEFAULT_STRATEGY, zdict=D)\n\
                      for i in range(60):\n    \
                          hs = [('streamtype', ['data', 'error', 'stdout'][i % 3]), ('port', str(8000 + i % 7)),\n          \
                                ('requestid', str(i)), ('x-pad', ('pad%d-' % (i % 5)) * 300)]\n    \
                          b = struct.pack('>I', len(hs))\n    \
                          for k, v in hs:\n        \
                              b += struct.pack('>I', len(k)) + k.encode() + struct.pack('>I', len(v)) + v.encode()\n    \
                          print(b.hex(), (c.compress(b) + c.flush(zlib.Z_SYNC_FLUSH)).hex())\n";
        let Some(out) = python(script, &[&to_hex(DICTIONARY)], "") else { return };
        let mut decoder = Decoder::new();
        let mut inflated = 0;
        for (i, line) in out.lines().enumerate() {
            let (block, compressed) = line.split_once(' ').unwrap();
            let (block, compressed) = (hex(block), hex(compressed));
            inflated += block.len();
            let mut wire = Vec::new();
            control_head(&mut wire, TYPE_SYN_STREAM, 0, 10 + compressed.len());
            put_u32(&mut wire, 2 * i as u32 + 1);
            wire.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
            wire.extend_from_slice(&compressed);
            let (frame, _) = decoder.decode(&wire).unwrap().unwrap();
            let Frame::SynStream { headers, .. } = frame else { panic!("{frame:?}") };
            assert_eq!(headers, Headers::parse(&block).unwrap(), "block {i}");
            assert_eq!(headers.get("requestid"), Some(i.to_string().as_str()));
        }
        assert!(inflated > 64 << 10, "only {inflated} bytes inflated");
    }
}
