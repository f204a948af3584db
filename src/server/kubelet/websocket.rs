//! WebSocket (RFC 6455) as kubelet serves exec and attach over it, for the WebSocket clients
//! a kube-apiserver passes through to a node (python and JS clients, dashboards): the
//! server's handshake (`handshake`), the client's frames read incrementally (`Decoder`), the
//! server's frames (`frame`), and Kubernetes' channel protocols on top (`Protocol`,
//! `channel_message`, `channel_frame`): one message is one channel's data, its first byte
//! the channel (0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize), or with the base64
//! protocols a text message whose first character is the channel's digit, the rest base64.
//!
//! `v5.channel.k8s.io` is not served: a 1.30+ apiserver translates it to SPDY itself, and a
//! request offering only it is refused, so that kubectl falls back to SPDY.
//!
//! Pure: bytes in, values out; `stream.rs` moves them. The accept hash and frame headers are
//! those of the CRI runtime's WebSocket client (`cri::stream`).

use super::request::Head;
use crate::node::runtime::cri::stream::{accept_for, frame_head};
use base64::Engine;

/// The largest message taken, all its frames together.
pub const MAX_MESSAGE: usize = 1 << 20;
/// The largest control frame payload (RFC 6455 §5.5).
pub const MAX_CONTROL: usize = 125;

/// A continuation frame.
pub const OP_CONTINUATION: u8 = 0;
/// A text frame.
pub const OP_TEXT: u8 = 1;
/// A binary frame.
pub const OP_BINARY: u8 = 2;
/// A close frame.
pub const OP_CLOSE: u8 = 8;
/// A ping.
pub const OP_PING: u8 = 9;
/// A pong.
pub const OP_PONG: u8 = 10;

/// The close code of a normal end.
pub const CLOSE_NORMAL: u16 = 1000;

/// The channel protocols served for exec and attach (kubelet's wsstream protocols, with
/// `v3` and `v2` as the binary protocol before `v4`).
pub const CHANNEL_PROTOCOLS: [&str; 6] = [
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
    "base64.channel.k8s.io",
];

/// A channel protocol: how channels are framed, and what the error channel says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Protocol {
    /// Text messages, the channel a digit and the payload base64 (else binary messages).
    pub base64: bool,
    /// The error channel carries a `metav1.Status`, success too (else a failure's text).
    pub v4: bool,
}

impl Protocol {
    /// The protocol `name` (empty: the client offered none, which kubelet serves as
    /// `channel.k8s.io`), if it is served.
    pub fn named(name: &str) -> Option<Protocol> {
        match name {
            "v4.channel.k8s.io" => Some(Protocol { base64: false, v4: true }),
            "v4.base64.channel.k8s.io" => Some(Protocol { base64: true, v4: true }),
            "" | "v3.channel.k8s.io" | "v2.channel.k8s.io" | "channel.k8s.io" => {
                Some(Protocol { base64: false, v4: false })
            }
            "base64.channel.k8s.io" => Some(Protocol { base64: true, v4: false }),
            _ => None,
        }
    }
}

/// Why a WebSocket upgrade was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// RFC 6455 upgrades only GET requests.
    #[error("a WebSocket upgrade must be a GET request, not {method}")]
    Method {
        /// The request's method.
        method: String,
    },
    /// Only version 13 (RFC 6455) is served.
    #[error("unsupported Sec-WebSocket-Version {version:?}: only 13 is served")]
    Version {
        /// The version asked for.
        version: String,
    },
    /// The key is missing, or not 16 bytes in base64.
    #[error("a WebSocket upgrade needs a Sec-WebSocket-Key of 16 bytes in base64")]
    Key,
    /// No offered protocol is served.
    #[error(
        "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server supports {served:?}"
    )]
    Protocol {
        /// The client's `Sec-WebSocket-Protocol` values.
        offered: Vec<String>,
        /// The protocols served.
        served: Vec<&'static str>,
    },
}

/// An upgrade accepted: the protocol chosen and the 101 answer.
#[derive(Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The protocol, empty when the client offered none.
    pub protocol: &'static str,
    /// The response head.
    pub response: String,
}

/// The server's side of the opening handshake (RFC 6455 §4.2): the client's first offered
/// protocol that is in `served`, or, when it offers none, the empty protocol (kubelet's
/// wsstream serves that as `channel.k8s.io`).
pub fn handshake(head: &Head, served: &[&'static str]) -> Result<Accepted, HandshakeError> {
    if head.method != "GET" {
        return Err(HandshakeError::Method { method: head.method.clone() });
    }
    let version = head.header("sec-websocket-version").unwrap_or("");
    if version != "13" {
        return Err(HandshakeError::Version { version: version.to_string() });
    }
    let key = head.header("sec-websocket-key").unwrap_or("").trim();
    let decoded = base64::engine::general_purpose::STANDARD.decode(key).map_err(|_| HandshakeError::Key)?;
    if decoded.len() != 16 {
        return Err(HandshakeError::Key);
    }
    let offered = head.header_values("sec-websocket-protocol");
    let protocol = if offered.is_empty() {
        ""
    } else {
        offered.iter().find_map(|o| served.iter().find(|s| *s == o).copied()).ok_or_else(|| {
            HandshakeError::Protocol {
                offered: offered.iter().map(|o| o.to_string()).collect(),
                served: served.to_vec(),
            }
        })?
    };
    let mut response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n",
        accept_for(key)
    );
    if !protocol.is_empty() {
        response.push_str(&format!("Sec-WebSocket-Protocol: {protocol}\r\n"));
    }
    response.push_str("\r\n");
    Ok(Accepted { protocol, response })
}

/// A message received.
#[derive(Debug, PartialEq, Eq)]
pub enum Message {
    /// A text message (UTF-8).
    Text(Vec<u8>),
    /// A binary message.
    Binary(Vec<u8>),
    /// The client closes, with its status code if it gave one.
    Close(Option<u16>),
    /// A ping, to be answered with a pong of the same payload.
    Ping(Vec<u8>),
    /// A pong.
    Pong,
}

/// A client frame that breaks RFC 6455 or the bounds taken; the connection ends.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A client must mask its frames.
    #[error("a client frame that is not masked")]
    Unmasked,
    /// No extension was negotiated.
    #[error("a frame with reserved bits set")]
    Reserved,
    /// Not an opcode of RFC 6455.
    #[error("a frame of unknown opcode {opcode}")]
    Opcode {
        /// The opcode.
        opcode: u8,
    },
    /// Control frames carry at most 125 bytes.
    #[error("a control frame of {len} bytes (at most {MAX_CONTROL})")]
    ControlTooLong {
        /// Its length.
        len: u64,
    },
    /// Control frames are never fragmented.
    #[error("a fragmented control frame")]
    FragmentedControl,
    /// Past `MAX_MESSAGE`.
    #[error("a message over {MAX_MESSAGE} bytes")]
    TooLarge,
    /// A continuation with no message begun.
    #[error("a continuation frame outside a message")]
    Continuation,
    /// A new text or binary frame before the last message ended.
    #[error("a new message before the last one ended")]
    Interleaved,
    /// Text must be UTF-8.
    #[error("a text message that is not UTF-8")]
    NotUtf8,
    /// A close payload is empty or at least 2 bytes.
    #[error("a close frame of 1 byte")]
    BadClose,
}

impl FrameError {
    /// The close code that tells the client (RFC 6455 §7.4.1).
    pub fn close_code(&self) -> u16 {
        match self {
            FrameError::TooLarge => 1009,
            FrameError::NotUtf8 => 1007,
            _ => 1002,
        }
    }
}

/// The frame being read.
struct Partial {
    fin: bool,
    opcode: u8,
    len: usize,
    mask: [u8; 4],
    payload: Vec<u8>,
}

/// Reads client frames as their bytes come, into messages. Bounded: a message at most
/// `MAX_MESSAGE`, a control frame at most `MAX_CONTROL`; what it holds is at most that.
#[derive(Default)]
pub struct Decoder {
    /// The frame begun, its head read.
    frame: Option<Partial>,
    /// The data message begun: its opcode (text or binary) and its bytes so far.
    message: Option<(u8, Vec<u8>)>,
}

impl Decoder {
    /// Takes what it can of `input`: how many bytes it took, and the message they completed
    /// (then the rest waits for the next call). Control frames may come between the frames
    /// of a message.
    pub fn decode(&mut self, input: &[u8]) -> Result<(usize, Option<Message>), FrameError> {
        let mut used = 0;
        loop {
            if self.frame.is_none() {
                let Some(h) = frame_head(&input[used..]) else { return Ok((used, None)) };
                if input[used] & 0x70 != 0 {
                    return Err(FrameError::Reserved);
                }
                let Some(mask) = h.mask else { return Err(FrameError::Unmasked) };
                let begun = self.message.as_ref().map(|(_, m)| m.len());
                match h.opcode {
                    OP_CONTINUATION if begun.is_none() => return Err(FrameError::Continuation),
                    OP_TEXT | OP_BINARY if begun.is_some() => return Err(FrameError::Interleaved),
                    OP_CONTINUATION | OP_TEXT | OP_BINARY => {
                        if h.len > (MAX_MESSAGE - begun.unwrap_or(0)) as u64 {
                            return Err(FrameError::TooLarge);
                        }
                    }
                    OP_CLOSE | OP_PING | OP_PONG => {
                        if !h.fin {
                            return Err(FrameError::FragmentedControl);
                        }
                        if h.len > MAX_CONTROL as u64 {
                            return Err(FrameError::ControlTooLong { len: h.len });
                        }
                    }
                    opcode => return Err(FrameError::Opcode { opcode }),
                }
                used += h.head_len;
                // At most MAX_MESSAGE, checked above.
                let len = h.len as usize;
                self.frame = Some(Partial { fin: h.fin, opcode: h.opcode, len, mask, payload: Vec::new() });
            }
            let Some(f) = self.frame.as_mut() else { continue };
            let take = (f.len - f.payload.len()).min(input.len() - used);
            let at = f.payload.len();
            f.payload.extend(input[used..used + take].iter().enumerate().map(|(i, b)| b ^ f.mask[(at + i) % 4]));
            used += take;
            if f.payload.len() < f.len {
                return Ok((used, None));
            }
            let Some(f) = self.frame.take() else { continue };
            match f.opcode {
                OP_CLOSE => {
                    return match f.payload.len() {
                        0 => Ok((used, Some(Message::Close(None)))),
                        1 => Err(FrameError::BadClose),
                        _ => Ok((used, Some(Message::Close(Some(u16::from_be_bytes([f.payload[0], f.payload[1]])))))),
                    };
                }
                OP_PING => return Ok((used, Some(Message::Ping(f.payload)))),
                OP_PONG => return Ok((used, Some(Message::Pong))),
                opcode => {
                    let (kind, data) = self.message.get_or_insert_with(|| (opcode, Vec::new()));
                    let kind = *kind;
                    data.extend_from_slice(&f.payload);
                    if f.fin {
                        let data = self.message.take().map(|(_, d)| d).unwrap_or_default();
                        if kind == OP_TEXT {
                            std::str::from_utf8(&data).map_err(|_| FrameError::NotUtf8)?;
                            return Ok((used, Some(Message::Text(data))));
                        }
                        return Ok((used, Some(Message::Binary(data))));
                    }
                }
            }
        }
    }
}

/// Appends a server frame (unmasked, final) of `opcode` with `payload`.
pub fn frame(opcode: u8, payload: &[u8], out: &mut Vec<u8>) {
    out.push(0x80 | opcode);
    match payload.len() {
        n if n < 126 => out.push(n as u8),
        n if n <= 0xffff => {
            out.push(126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
}

/// Appends a close frame with `code`.
pub fn close_frame(code: u16, out: &mut Vec<u8>) {
    frame(OP_CLOSE, &code.to_be_bytes(), out);
}

/// A data message as (channel, payload), framed as the protocol says (`base64`, else
/// binary); `None` for one kubelet ignores: empty, not a data message, or base64 that does
/// not decode. The channel is not checked: the caller ignores those it has not.
pub fn channel_message(base64: bool, message: &Message) -> Option<(u8, Vec<u8>)> {
    let (Message::Text(data) | Message::Binary(data)) = message else { return None };
    let (&first, rest) = data.split_first()?;
    if !base64 {
        return Some((first, rest.to_vec()));
    }
    let payload = base64::engine::general_purpose::STANDARD.decode(rest).ok()?;
    Some((first.wrapping_sub(b'0'), payload))
}

/// Appends the message that carries `data` on `channel`: binary, the channel its first byte,
/// or with `base64` text, the channel's digit then the payload in base64.
pub fn channel_frame(base64: bool, channel: u8, data: &[u8], out: &mut Vec<u8>) {
    if base64 {
        let mut text = vec![b'0' + channel];
        text.extend_from_slice(base64::engine::general_purpose::STANDARD.encode(data).as_bytes());
        frame(OP_TEXT, &text, out);
    } else {
        let mut msg = Vec::with_capacity(1 + data.len());
        msg.push(channel);
        msg.extend_from_slice(data);
        frame(OP_BINARY, &msg, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::kubelet::request::{parse, Parsed};

    fn head(extra: &str) -> Head {
        let text = format!(
            "GET /exec/default/p/c?command=sh HTTP/1.1\r\nHost: node\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{extra}\r\n"
        );
        match parse(text.as_bytes()) {
            Parsed::Complete(h, _) => h,
            other => panic!("{other:?}"),
        }
    }

    /// A client frame: masked, `fin` or not.
    fn client(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mask = [0x37, 0xfa, 0x21, 0x3d];
        let mut f = vec![if fin { 0x80 } else { 0 } | opcode];
        match payload.len() {
            n if n < 126 => f.push(0x80 | n as u8),
            n if n <= 0xffff => {
                f.push(0x80 | 126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(0x80 | 127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        f.extend_from_slice(&mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        f
    }

    /// Every message of `bytes`, fed in pieces cut at `cuts`.
    fn decode_all(bytes: &[u8], cuts: &[usize]) -> Result<Vec<Message>, FrameError> {
        let mut dec = Decoder::default();
        let mut pending = Vec::new();
        let mut out = Vec::new();
        let mut start = 0;
        for end in cuts.iter().copied().chain([bytes.len()]) {
            pending.extend_from_slice(&bytes[start..end]);
            start = end;
            loop {
                let (used, msg) = dec.decode(&pending)?;
                pending.drain(..used);
                match msg {
                    Some(m) => out.push(m),
                    None => break,
                }
            }
        }
        assert!(pending.is_empty());
        Ok(out)
    }

    #[test]
    fn the_accept_key_is_rfc_6455s_and_the_first_served_protocol_is_chosen() {
        let a =
            handshake(&head("Sec-WebSocket-Protocol: v5.channel.k8s.io, v4.channel.k8s.io\r\n"), &CHANNEL_PROTOCOLS)
                .unwrap();
        assert_eq!(a.protocol, "v4.channel.k8s.io");
        assert!(a.response.starts_with("HTTP/1.1 101 Switching Protocols\r\n"), "{}", a.response);
        assert!(a.response.contains("\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
        assert!(a.response.contains("\r\nSec-WebSocket-Protocol: v4.channel.k8s.io\r\n"));
        assert!(a.response.ends_with("\r\n\r\n"));
        let b = handshake(
            &head("Sec-WebSocket-Protocol: base64.channel.k8s.io\r\nSec-WebSocket-Protocol: v4.channel.k8s.io\r\n"),
            &CHANNEL_PROTOCOLS,
        )
        .unwrap();
        assert_eq!(b.protocol, "base64.channel.k8s.io");
        // None offered: kubelet's empty protocol, and no protocol header in the answer.
        let none = handshake(&head(""), &CHANNEL_PROTOCOLS).unwrap();
        assert_eq!(none.protocol, "");
        assert!(!none.response.contains("Sec-WebSocket-Protocol"));
        assert_eq!(Protocol::named(""), Some(Protocol { base64: false, v4: false }));
        assert_eq!(Protocol::named("v4.base64.channel.k8s.io"), Some(Protocol { base64: true, v4: true }));
        assert!(CHANNEL_PROTOCOLS.iter().all(|p| Protocol::named(p).is_some()));
    }

    #[test]
    fn only_v5_offered_is_refused_as_are_bad_keys_and_versions() {
        let e = handshake(&head("Sec-WebSocket-Protocol: v5.channel.k8s.io\r\n"), &CHANNEL_PROTOCOLS).unwrap_err();
        assert!(matches!(&e, HandshakeError::Protocol { offered, .. } if offered == &["v5.channel.k8s.io"]));
        assert!(e.to_string().starts_with("unable to upgrade: unable to negotiate protocol"));
        assert_eq!(Protocol::named("v5.channel.k8s.io"), None);
        let text = "GET /x HTTP/1.1\r\nSec-WebSocket-Version: 8\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
        let Parsed::Complete(old, _) = parse(text.as_bytes()) else { panic!() };
        assert_eq!(handshake(&old, &CHANNEL_PROTOCOLS).unwrap_err(), HandshakeError::Version { version: "8".into() });
        let text = "GET /x HTTP/1.1\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: c2hvcnQ=\r\n\r\n";
        let Parsed::Complete(short, _) = parse(text.as_bytes()) else { panic!() };
        assert_eq!(handshake(&short, &CHANNEL_PROTOCOLS).unwrap_err(), HandshakeError::Key);
        let mut post = head("");
        post.method = "POST".into();
        assert!(matches!(handshake(&post, &CHANNEL_PROTOCOLS), Err(HandshakeError::Method { .. })));
    }

    #[test]
    fn masked_frames_decode_at_every_split_point() {
        let mut bytes = client(true, OP_BINARY, b"\x00hello\n");
        bytes.extend(client(false, OP_TEXT, b"3aGV"));
        bytes.extend(client(true, OP_PING, b"p"));
        bytes.extend(client(true, OP_CONTINUATION, b"sbG8="));
        let big = vec![7u8; 300];
        bytes.extend(client(true, OP_BINARY, &big));
        bytes.extend(client(true, OP_CLOSE, &1000u16.to_be_bytes()));
        let want = vec![
            Message::Binary(b"\x00hello\n".to_vec()),
            Message::Ping(b"p".to_vec()),
            Message::Text(b"3aGVsbG8=".to_vec()),
            Message::Binary(big),
            Message::Close(Some(1000)),
        ];
        for i in 0..=bytes.len() {
            assert_eq!(decode_all(&bytes, &[i]).unwrap(), want, "cut at {i}");
        }
        let every: Vec<usize> = (1..bytes.len()).collect();
        assert_eq!(decode_all(&bytes, &every).unwrap(), want);
    }

    #[test]
    fn frames_past_their_bounds_or_rules_are_refused() {
        let unmasked = [0x82, 0x01, 0x00];
        assert_eq!(decode_all(&unmasked, &[]), Err(FrameError::Unmasked));
        assert_eq!(decode_all(&client(true, OP_PING, &[0; 126]), &[]), Err(FrameError::ControlTooLong { len: 126 }));
        assert_eq!(decode_all(&client(false, OP_PING, b""), &[]), Err(FrameError::FragmentedControl));
        assert_eq!(decode_all(&client(true, OP_CONTINUATION, b"x"), &[]), Err(FrameError::Continuation));
        assert_eq!(decode_all(&client(true, 3, b""), &[]), Err(FrameError::Opcode { opcode: 3 }));
        assert_eq!(
            decode_all(&[client(false, OP_TEXT, b"a"), client(true, OP_TEXT, b"b")].concat(), &[]),
            Err(FrameError::Interleaved)
        );
        assert_eq!(decode_all(&client(true, OP_TEXT, &[0xff]), &[]), Err(FrameError::NotUtf8));
        assert_eq!(decode_all(&client(true, OP_CLOSE, b"x"), &[]), Err(FrameError::BadClose));
        let mut rsv = client(true, OP_BINARY, b"x");
        rsv[0] |= 0x40;
        assert_eq!(decode_all(&rsv, &[]), Err(FrameError::Reserved));
        // 1 MiB a message: whole, or in fragments, refused from the header that passes it,
        // before its payload is read.
        let max = vec![1u8; MAX_MESSAGE];
        assert_eq!(decode_all(&client(true, OP_BINARY, &max), &[]).unwrap(), [Message::Binary(max)]);
        let head_only = &client(true, OP_BINARY, &vec![0; MAX_MESSAGE + 1])[..14];
        assert_eq!(Decoder::default().decode(head_only), Err(FrameError::TooLarge));
        let fragments = [client(false, OP_BINARY, &vec![0; MAX_MESSAGE - 1]), client(true, OP_CONTINUATION, b"ab")];
        assert_eq!(decode_all(&fragments.concat(), &[]), Err(FrameError::TooLarge));
        assert_eq!(FrameError::TooLarge.close_code(), 1009);
    }

    #[test]
    fn server_frames_are_unmasked_with_each_length_form() {
        for n in [0, 125, 126, 0xffff, 0x10000] {
            let mut out = Vec::new();
            frame(OP_BINARY, &vec![9; n], &mut out);
            let h = frame_head(&out).unwrap();
            assert_eq!((h.fin, h.opcode, h.len, h.mask), (true, OP_BINARY, n as u64, None));
            assert_eq!(out.len(), h.head_len + n);
        }
        let mut out = Vec::new();
        close_frame(CLOSE_NORMAL, &mut out);
        assert_eq!(out, [0x88, 2, 0x03, 0xe8]);
    }

    #[test]
    fn channels_are_a_first_byte_or_a_digit_and_base64() {
        let mut out = Vec::new();
        channel_frame(false, 1, b"hi", &mut out);
        assert_eq!(out, [0x82, 3, 1, b'h', b'i']);
        out.clear();
        channel_frame(true, 3, b"hello", &mut out);
        assert_eq!(&out[2..], b"3aGVsbG8=");
        assert_eq!(out[0], 0x81);
        assert_eq!(channel_message(false, &Message::Binary(b"\x00x".to_vec())), Some((0, b"x".to_vec())));
        assert_eq!(channel_message(true, &Message::Text(b"0aGVsbG8K".to_vec())), Some((0, b"hello\n".to_vec())));
        // kubelet takes either frame type, by the protocol.
        assert_eq!(channel_message(true, &Message::Binary(b"4e30=".to_vec())), Some((4, b"{}".to_vec())));
        assert_eq!(channel_message(true, &Message::Text(b"0not base64!".to_vec())), None);
        assert_eq!(channel_message(false, &Message::Binary(Vec::new())), None);
        assert_eq!(channel_message(false, &Message::Ping(b"x".to_vec())), None);
        // Not a digit: a channel nobody has.
        assert!(channel_message(true, &Message::Text(b"x".to_vec())).is_some_and(|(c, _)| c > 4));
    }
}
