//! A small blocking D-Bus client: the wire format (types, marshalling, messages), SASL
//! `EXTERNAL` authentication on a Unix socket, and method calls with a deadline. Enough to
//! drive systemd's manager (`StartTransientUnit`, `StopUnit`, unit properties) without an
//! async executor or libdbus (which would complicate the static musl builds).
//!
//! Little-endian messages only are sent; both byte orders are read. Every read is bounded:
//! a message is at most `MAX_MESSAGE` bytes, containers nest at most `MAX_DEPTH` deep, and
//! every call has a deadline.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// The largest message read (the specification allows 128 MiB; systemd's answers are
/// kilobytes).
pub const MAX_MESSAGE: usize = 16 << 20;
/// The deepest nesting of arrays, structs and variants read.
const MAX_DEPTH: usize = 64;
/// The system bus.
pub const SYSTEM_BUS: &str = "/run/dbus/system_bus_socket";

/// A D-Bus type (one complete type of a signature).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Type {
    /// `y`.
    Byte,
    /// `b`.
    Bool,
    /// `n`.
    I16,
    /// `q`.
    U16,
    /// `i`.
    I32,
    /// `u`.
    U32,
    /// `x`.
    I64,
    /// `t`.
    U64,
    /// `d`.
    Double,
    /// `s`.
    Str,
    /// `o`.
    Path,
    /// `g`.
    Signature,
    /// `v`.
    Variant,
    /// `h` (a file descriptor's index; none are passed here).
    UnixFd,
    /// `a<t>`.
    Array(Box<Type>),
    /// `(...)`.
    Struct(Vec<Type>),
    /// `{kv}` (only as an array's element).
    DictEntry(Box<Type>, Box<Type>),
}

impl Type {
    /// Its signature.
    pub fn signature(&self) -> String {
        match self {
            Type::Byte => "y".into(),
            Type::Bool => "b".into(),
            Type::I16 => "n".into(),
            Type::U16 => "q".into(),
            Type::I32 => "i".into(),
            Type::U32 => "u".into(),
            Type::I64 => "x".into(),
            Type::U64 => "t".into(),
            Type::Double => "d".into(),
            Type::Str => "s".into(),
            Type::Path => "o".into(),
            Type::Signature => "g".into(),
            Type::Variant => "v".into(),
            Type::UnixFd => "h".into(),
            Type::Array(t) => format!("a{}", t.signature()),
            Type::Struct(ts) => format!("({})", ts.iter().map(Type::signature).collect::<String>()),
            Type::DictEntry(k, v) => format!("{{{}{}}}", k.signature(), v.signature()),
        }
    }

    /// The alignment of its values on the wire.
    fn alignment(&self) -> usize {
        match self {
            Type::Byte | Type::Signature | Type::Variant => 1,
            Type::I16 | Type::U16 => 2,
            Type::Bool | Type::I32 | Type::U32 | Type::Str | Type::Path | Type::UnixFd | Type::Array(_) => 4,
            Type::I64 | Type::U64 | Type::Double | Type::Struct(_) | Type::DictEntry(..) => 8,
        }
    }
}

/// Every complete type of `sig`, in order.
pub fn parse_signature(sig: &str) -> Result<Vec<Type>, DbusError> {
    if sig.len() > 255 {
        return Err(DbusError::Malformed("a signature longer than 255 bytes".into()));
    }
    let mut chars = sig.as_bytes();
    let mut out = Vec::new();
    while !chars.is_empty() {
        out.push(parse_one(&mut chars, 0)?);
    }
    Ok(out)
}

fn parse_one(chars: &mut &[u8], depth: usize) -> Result<Type, DbusError> {
    let bad = |what: &str| DbusError::Malformed(format!("signature: {what}"));
    if depth > MAX_DEPTH {
        return Err(bad("nested too deep"));
    }
    let (&c, rest) = chars.split_first().ok_or_else(|| bad("ends inside a type"))?;
    *chars = rest;
    Ok(match c {
        b'y' => Type::Byte,
        b'b' => Type::Bool,
        b'n' => Type::I16,
        b'q' => Type::U16,
        b'i' => Type::I32,
        b'u' => Type::U32,
        b'x' => Type::I64,
        b't' => Type::U64,
        b'd' => Type::Double,
        b's' => Type::Str,
        b'o' => Type::Path,
        b'g' => Type::Signature,
        b'v' => Type::Variant,
        b'h' => Type::UnixFd,
        b'a' => {
            if chars.first() == Some(&b'{') {
                *chars = &chars[1..];
                let key = parse_one(chars, depth + 1)?;
                let value = parse_one(chars, depth + 1)?;
                match chars.split_first() {
                    Some((b'}', rest)) => *chars = rest,
                    _ => return Err(bad("a dict entry with other than two types")),
                }
                Type::Array(Box::new(Type::DictEntry(Box::new(key), Box::new(value))))
            } else {
                Type::Array(Box::new(parse_one(chars, depth + 1)?))
            }
        }
        b'(' => {
            let mut fields = Vec::new();
            loop {
                match chars.first() {
                    Some(b')') => {
                        *chars = &chars[1..];
                        break;
                    }
                    Some(_) => fields.push(parse_one(chars, depth + 1)?),
                    None => return Err(bad("an unclosed struct")),
                }
            }
            if fields.is_empty() {
                return Err(bad("an empty struct"));
            }
            Type::Struct(fields)
        }
        other => return Err(bad(&format!("unknown type code {:?}", char::from(other)))),
    })
}

/// A D-Bus value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `y`.
    Byte(u8),
    /// `b`.
    Bool(bool),
    /// `n`.
    I16(i16),
    /// `q`.
    U16(u16),
    /// `i`.
    I32(i32),
    /// `u`.
    U32(u32),
    /// `x`.
    I64(i64),
    /// `t`.
    U64(u64),
    /// `d`.
    Double(f64),
    /// `s`.
    Str(String),
    /// `o`.
    Path(String),
    /// `g`.
    Signature(String),
    /// `v`.
    Variant(Box<Value>),
    /// `h`.
    UnixFd(u32),
    /// `a<t>`: the element type (an empty array still has one) and the elements.
    Array(Type, Vec<Value>),
    /// `(...)`.
    Struct(Vec<Value>),
    /// `{kv}`.
    DictEntry(Box<Value>, Box<Value>),
}

impl Value {
    /// Its type.
    pub fn type_of(&self) -> Type {
        match self {
            Value::Byte(_) => Type::Byte,
            Value::Bool(_) => Type::Bool,
            Value::I16(_) => Type::I16,
            Value::U16(_) => Type::U16,
            Value::I32(_) => Type::I32,
            Value::U32(_) => Type::U32,
            Value::I64(_) => Type::I64,
            Value::U64(_) => Type::U64,
            Value::Double(_) => Type::Double,
            Value::Str(_) => Type::Str,
            Value::Path(_) => Type::Path,
            Value::Signature(_) => Type::Signature,
            Value::Variant(_) => Type::Variant,
            Value::UnixFd(_) => Type::UnixFd,
            Value::Array(t, _) => Type::Array(Box::new(t.clone())),
            Value::Struct(vs) => Type::Struct(vs.iter().map(Value::type_of).collect()),
            Value::DictEntry(k, v) => Type::DictEntry(Box::new(k.type_of()), Box::new(v.type_of())),
        }
    }

    /// A string (`s`).
    pub fn str(s: &str) -> Value {
        Value::Str(s.into())
    }

    /// The string inside, if it is one (`s`, `o`, `g`).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) | Value::Path(s) | Value::Signature(s) => Some(s),
            _ => None,
        }
    }
}

/// Appends values to a message body, aligned from the message's start.
struct Writer {
    buf: Vec<u8>,
    /// Where the body starts in the message (alignment is from the message's start).
    base: usize,
}

impl Writer {
    fn pad(&mut self, align: usize) {
        while (self.base + self.buf.len()) % align != 0 {
            self.buf.push(0);
        }
    }

    fn u32(&mut self, v: u32) {
        self.pad(4);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn value(&mut self, v: &Value) -> Result<(), DbusError> {
        match v {
            Value::Byte(b) => self.buf.push(*b),
            Value::Bool(b) => self.u32(u32::from(*b)),
            Value::I16(n) => {
                self.pad(2);
                self.buf.extend_from_slice(&n.to_le_bytes());
            }
            Value::U16(n) => {
                self.pad(2);
                self.buf.extend_from_slice(&n.to_le_bytes());
            }
            Value::I32(n) => {
                self.pad(4);
                self.buf.extend_from_slice(&n.to_le_bytes());
            }
            Value::U32(n) | Value::UnixFd(n) => self.u32(*n),
            Value::I64(n) => {
                self.pad(8);
                self.buf.extend_from_slice(&n.to_le_bytes());
            }
            Value::U64(n) => {
                self.pad(8);
                self.buf.extend_from_slice(&n.to_le_bytes());
            }
            Value::Double(d) => {
                self.pad(8);
                self.buf.extend_from_slice(&d.to_le_bytes());
            }
            Value::Str(s) | Value::Path(s) => {
                if s.contains('\0') {
                    return Err(DbusError::Malformed("a string with a NUL".into()));
                }
                self.u32(u32::try_from(s.len()).map_err(|_| DbusError::Malformed("a string over 4 GiB".into()))?);
                self.buf.extend_from_slice(s.as_bytes());
                self.buf.push(0);
            }
            Value::Signature(s) => {
                let len =
                    u8::try_from(s.len()).map_err(|_| DbusError::Malformed("a signature over 255 bytes".into()))?;
                self.buf.push(len);
                self.buf.extend_from_slice(s.as_bytes());
                self.buf.push(0);
            }
            Value::Variant(inner) => {
                self.value(&Value::Signature(inner.type_of().signature()))?;
                self.value(inner)?;
            }
            Value::Array(t, items) => {
                self.u32(0);
                let len_at = self.buf.len() - 4;
                self.pad(t.alignment());
                let start = self.buf.len();
                for item in items {
                    if item.type_of() != *t {
                        return Err(DbusError::Malformed(format!(
                            "an array of {} holding a {}",
                            t.signature(),
                            item.type_of().signature()
                        )));
                    }
                    self.value(item)?;
                }
                let len = u32::try_from(self.buf.len() - start)
                    .map_err(|_| DbusError::Malformed("an array over 4 GiB".into()))?;
                self.buf[len_at..len_at + 4].copy_from_slice(&len.to_le_bytes());
            }
            Value::Struct(fields) => {
                self.pad(8);
                for f in fields {
                    self.value(f)?;
                }
            }
            Value::DictEntry(k, v) => {
                self.pad(8);
                self.value(k)?;
                self.value(v)?;
            }
        }
        Ok(())
    }
}

/// Reads values off a message, aligned from the message's start.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    big_endian: bool,
}

impl Reader<'_> {
    fn malformed(what: &str) -> DbusError {
        DbusError::Malformed(what.into())
    }

    fn align(&mut self, a: usize) -> Result<(), DbusError> {
        let to = self.pos.div_ceil(a) * a;
        if to > self.data.len() {
            return Err(Reader::malformed("padding past the end"));
        }
        self.pos = to;
        Ok(())
    }

    fn take(&mut self, n: usize) -> Result<&[u8], DbusError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.data.len())
            .ok_or_else(|| Reader::malformed("a value past the end"))?;
        let out = &self.data[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], DbusError> {
        self.align(N)?;
        let mut b: [u8; N] = self.take(N)?.try_into().map_err(|_| Reader::malformed("a short value"))?;
        if self.big_endian {
            b.reverse();
        }
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32, DbusError> {
        Ok(u32::from_le_bytes(self.fixed::<4>()?))
    }

    fn text(&mut self, len: usize) -> Result<String, DbusError> {
        let bytes = self.take(len)?.to_vec();
        if self.take(1)? != [0] {
            return Err(Reader::malformed("a string without its NUL"));
        }
        String::from_utf8(bytes).map_err(|_| Reader::malformed("a string that is not UTF-8"))
    }

    fn value(&mut self, t: &Type, depth: usize) -> Result<Value, DbusError> {
        if depth > MAX_DEPTH {
            return Err(Reader::malformed("values nested too deep"));
        }
        Ok(match t {
            Type::Byte => Value::Byte(self.take(1)?[0]),
            Type::Bool => match self.u32()? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                _ => return Err(Reader::malformed("a boolean other than 0 or 1")),
            },
            Type::I16 => Value::I16(i16::from_le_bytes(self.fixed::<2>()?)),
            Type::U16 => Value::U16(u16::from_le_bytes(self.fixed::<2>()?)),
            Type::I32 => Value::I32(i32::from_le_bytes(self.fixed::<4>()?)),
            Type::U32 => Value::U32(self.u32()?),
            Type::UnixFd => Value::UnixFd(self.u32()?),
            Type::I64 => Value::I64(i64::from_le_bytes(self.fixed::<8>()?)),
            Type::U64 => Value::U64(u64::from_le_bytes(self.fixed::<8>()?)),
            Type::Double => Value::Double(f64::from_le_bytes(self.fixed::<8>()?)),
            Type::Str | Type::Path => {
                let len = self.u32()? as usize;
                let s = self.text(len)?;
                if *t == Type::Str {
                    Value::Str(s)
                } else {
                    Value::Path(s)
                }
            }
            Type::Signature => {
                let len = usize::from(self.take(1)?[0]);
                Value::Signature(self.text(len)?)
            }
            Type::Variant => {
                let len = usize::from(self.take(1)?[0]);
                let sig = self.text(len)?;
                let mut types = parse_signature(&sig)?;
                if types.len() != 1 {
                    return Err(Reader::malformed("a variant of other than one type"));
                }
                Value::Variant(Box::new(self.value(&types.remove(0), depth + 1)?))
            }
            Type::Array(elem) => {
                let len = self.u32()? as usize;
                if len > MAX_MESSAGE {
                    return Err(Reader::malformed("an array over the message bound"));
                }
                self.align(elem.alignment())?;
                let end = self
                    .pos
                    .checked_add(len)
                    .filter(|e| *e <= self.data.len())
                    .ok_or_else(|| Reader::malformed("an array past the end"))?;
                let mut items = Vec::new();
                while self.pos < end {
                    items.push(self.value(elem, depth + 1)?);
                }
                if self.pos != end {
                    return Err(Reader::malformed("an array whose elements overrun its length"));
                }
                Value::Array((**elem).clone(), items)
            }
            Type::Struct(fields) => {
                self.align(8)?;
                Value::Struct(fields.iter().map(|f| self.value(f, depth + 1)).collect::<Result<_, _>>()?)
            }
            Type::DictEntry(k, v) => {
                self.align(8)?;
                Value::DictEntry(Box::new(self.value(k, depth + 1)?), Box::new(self.value(v, depth + 1)?))
            }
        })
    }
}

/// What a message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A method call.
    Call = 1,
    /// A method's answer.
    Return = 2,
    /// A method's error.
    Error = 3,
    /// A signal.
    Signal = 4,
}

/// A message: its header fields and body.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Message {
    /// Call, return, error or signal (`None` for an unknown kind, which is passed over).
    pub kind: Option<Kind>,
    /// Its serial.
    pub serial: u32,
    /// The call it answers (returns and errors).
    pub reply_serial: Option<u32>,
    /// Object path.
    pub path: Option<String>,
    /// Interface.
    pub interface: Option<String>,
    /// Method or signal name.
    pub member: Option<String>,
    /// Error name (errors).
    pub error_name: Option<String>,
    /// Destination bus name.
    pub destination: Option<String>,
    /// Sender bus name.
    pub sender: Option<String>,
    /// The body.
    pub body: Vec<Value>,
}

impl Message {
    /// A method call.
    pub fn call(destination: &str, path: &str, interface: &str, member: &str, body: Vec<Value>) -> Message {
        Message {
            kind: Some(Kind::Call),
            path: Some(path.into()),
            interface: Some(interface.into()),
            member: Some(member.into()),
            destination: Some(destination.into()),
            body,
            ..Default::default()
        }
    }

    /// The message as bytes (little-endian), with `serial`.
    pub fn encode(&self, serial: u32) -> Result<Vec<u8>, DbusError> {
        let mut body = Writer { buf: Vec::new(), base: 0 };
        for v in &self.body {
            body.value(v)?;
        }
        let signature: String = self.body.iter().map(|v| v.type_of().signature()).collect();
        let mut fields = Vec::new();
        let mut field =
            |code: u8, v: Value| fields.push(Value::Struct(vec![Value::Byte(code), Value::Variant(Box::new(v))]));
        if let Some(p) = &self.path {
            field(1, Value::Path(p.clone()));
        }
        if let Some(i) = &self.interface {
            field(2, Value::str(i));
        }
        if let Some(m) = &self.member {
            field(3, Value::str(m));
        }
        if let Some(e) = &self.error_name {
            field(4, Value::str(e));
        }
        if let Some(r) = self.reply_serial {
            field(5, Value::U32(r));
        }
        if let Some(d) = &self.destination {
            field(6, Value::str(d));
        }
        if !signature.is_empty() {
            field(8, Value::Signature(signature));
        }
        let mut head = Writer { buf: Vec::new(), base: 0 };
        let kind = self.kind.map_or(0, |k| k as u8);
        head.buf.extend_from_slice(&[b'l', kind, 0, 1]);
        let len = u32::try_from(body.buf.len()).map_err(|_| DbusError::Malformed("a body over 4 GiB".into()))?;
        head.u32(len);
        head.u32(serial);
        head.value(&Value::Array(Type::Struct(vec![Type::Byte, Type::Variant]), fields))?;
        head.pad(8);
        head.buf.extend_from_slice(&body.buf);
        if head.buf.len() > MAX_MESSAGE {
            return Err(DbusError::Malformed("a message over the bound".into()));
        }
        Ok(head.buf)
    }

    /// How long the message starting with these 16 bytes is, in all.
    pub fn length(head: &[u8; 16]) -> Result<usize, DbusError> {
        let big = match head[0] {
            b'l' => false,
            b'B' => true,
            _ => return Err(DbusError::Malformed("neither byte order".into())),
        };
        let word = |b: &[u8]| {
            let a: [u8; 4] = b.try_into().unwrap_or_default();
            if big {
                u32::from_be_bytes(a)
            } else {
                u32::from_le_bytes(a)
            }
        };
        let body = word(&head[4..8]) as usize;
        let fields = word(&head[12..16]) as usize;
        let total = (16 + fields).div_ceil(8) * 8 + body;
        if total > MAX_MESSAGE {
            return Err(DbusError::Malformed(format!("a message of {total} bytes, over the bound")));
        }
        Ok(total)
    }

    /// A whole message from its bytes.
    pub fn decode(data: &[u8]) -> Result<Message, DbusError> {
        if data.len() < 16 {
            return Err(DbusError::Malformed("a message shorter than its header".into()));
        }
        let mut r = Reader { data, pos: 0, big_endian: data[0] == b'B' };
        let head: [u8; 4] = r.take(4)?.try_into().unwrap_or_default();
        let mut m = Message {
            kind: match head[1] {
                1 => Some(Kind::Call),
                2 => Some(Kind::Return),
                3 => Some(Kind::Error),
                4 => Some(Kind::Signal),
                _ => None,
            },
            ..Default::default()
        };
        let body_len = r.u32()? as usize;
        m.serial = r.u32()?;
        let fields = r.value(&Type::Array(Box::new(Type::Struct(vec![Type::Byte, Type::Variant]))), 0)?;
        let mut signature = String::new();
        if let Value::Array(_, fields) = fields {
            for f in fields {
                let Value::Struct(parts) = f else { continue };
                let (Some(Value::Byte(code)), Some(Value::Variant(v))) = (parts.first(), parts.get(1)) else {
                    continue;
                };
                let s = v.as_str().map(str::to_string);
                match code {
                    1 => m.path = s,
                    2 => m.interface = s,
                    3 => m.member = s,
                    4 => m.error_name = s,
                    5 => m.reply_serial = if let Value::U32(n) = **v { Some(n) } else { None },
                    6 => m.destination = s,
                    7 => m.sender = s,
                    8 => signature = s.unwrap_or_default(),
                    _ => {}
                }
            }
        }
        r.align(8)?;
        if r.pos + body_len != data.len() {
            return Err(DbusError::Malformed("a body whose length is not the header's".into()));
        }
        for t in parse_signature(&signature)? {
            m.body.push(r.value(&t, 0)?);
        }
        if r.pos != data.len() {
            return Err(DbusError::Malformed("a body longer than its signature".into()));
        }
        Ok(m)
    }
}

/// A D-Bus problem.
#[derive(Debug, thiserror::Error)]
pub enum DbusError {
    /// The bus socket cannot be reached.
    #[error("{path}")]
    Connect {
        /// The socket.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The bus refused or broke the authentication.
    #[error("authentication: {0}")]
    Auth(String),
    /// Reading or writing the socket failed.
    #[error("the bus connection")]
    Io(#[from] io::Error),
    /// A message that is not one.
    #[error("malformed D-Bus message: {0}")]
    Malformed(String),
    /// The method answered with an error.
    #[error("{name}: {message}")]
    Remote {
        /// The error's name (`org.freedesktop.systemd1.NoSuchUnit`).
        name: String,
        /// Its message.
        message: String,
    },
    /// No answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// A connection to a bus, authenticated, with its unique name.
pub struct Connection {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    serial: u32,
    /// The name the bus gave this connection (`Hello`).
    pub unique_name: String,
    /// Signals that came while a call waited for its answer, oldest first (at most 1024).
    pub signals: std::collections::VecDeque<Message>,
}

impl Connection {
    /// Connects to the bus at `path` as this process's user (SASL `EXTERNAL`), and says
    /// `Hello`; everything within `timeout`.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Connection, DbusError> {
        let stream = UnixStream::connect(path)
            .map_err(|source| DbusError::Connect { path: path.display().to_string(), source })?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let mut writer = stream.try_clone()?;
        let mut reader = BufReader::new(stream);
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        let hex: String = uid.to_string().bytes().map(|b| format!("{b:02x}")).collect();
        writer.write_all(format!("\0AUTH EXTERNAL {hex}\r\n").as_bytes())?;
        let mut line = String::new();
        (&mut reader).take(512).read_line(&mut line)?;
        if !line.starts_with("OK ") {
            return Err(DbusError::Auth(line.trim().chars().take(200).collect()));
        }
        writer.write_all(b"BEGIN\r\n")?;
        let mut conn =
            Connection { reader, writer, serial: 0, unique_name: String::new(), signals: Default::default() };
        let hello =
            Message::call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "Hello", vec![]);
        let answer = conn.call(&hello, timeout)?;
        conn.unique_name = answer.first().and_then(Value::as_str).unwrap_or_default().to_string();
        Ok(conn)
    }

    /// Sends `msg` and waits up to `timeout` for its answer: the return's body, or the
    /// error. Signals that come meanwhile are kept in `signals`; other messages passed over.
    pub fn call(&mut self, msg: &Message, timeout: Duration) -> Result<Vec<Value>, DbusError> {
        self.serial = self.serial.wrapping_add(1).max(1);
        let serial = self.serial;
        self.writer.write_all(&msg.encode(serial)?)?;
        let deadline = Instant::now() + timeout;
        loop {
            let m = self.read(deadline, timeout)?;
            match m.kind {
                Some(Kind::Return) if m.reply_serial == Some(serial) => return Ok(m.body),
                Some(Kind::Error) if m.reply_serial == Some(serial) => {
                    return Err(DbusError::Remote {
                        name: m.error_name.unwrap_or_default(),
                        message: m.body.first().and_then(Value::as_str).unwrap_or_default().to_string(),
                    })
                }
                Some(Kind::Signal) => {
                    if self.signals.len() >= 1024 {
                        self.signals.pop_front();
                    }
                    self.signals.push_back(m);
                }
                _ => {}
            }
        }
    }

    /// The next message, by `deadline`.
    pub fn read(&mut self, deadline: Instant, timeout: Duration) -> Result<Message, DbusError> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(DbusError::Timeout(timeout));
        }
        self.reader.get_ref().set_read_timeout(Some(left))?;
        let mut head = [0u8; 16];
        self.read_exact(&mut head, timeout)?;
        let total = Message::length(&head)?;
        let mut data = head.to_vec();
        data.resize(total, 0);
        self.read_exact(&mut data[16..], timeout)?;
        Message::decode(&data)
    }

    fn read_exact(&mut self, buf: &mut [u8], timeout: Duration) -> Result<(), DbusError> {
        self.reader.read_exact(buf).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => DbusError::Timeout(timeout),
            _ => DbusError::Io(e),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_parse_into_types_and_back() {
        for sig in ["y", "a{sv}", "(sa(sv))", "ssa(sv)a(sa(sv))", "a(yv)", "aay", "v", "h", "t"] {
            let types = parse_signature(sig).unwrap();
            assert_eq!(types.iter().map(Type::signature).collect::<String>(), sig);
        }
        for bad in ["(", "()", "a", "a{s}", "a{sss}", "z", "(s"] {
            assert!(parse_signature(bad).is_err(), "{bad}");
        }
        assert!(parse_signature(&"a".repeat(100)).is_err(), "nested too deep");
    }

    #[test]
    fn a_message_round_trips_with_alignment_as_the_specification_has_it() {
        // StartTransientUnit's arguments: ssa(sv)a(sa(sv)).
        let props = Value::Array(
            Type::Struct(vec![Type::Str, Type::Variant]),
            vec![
                Value::Struct(vec![Value::str("Description"), Value::Variant(Box::new(Value::str("pod")))]),
                Value::Struct(vec![Value::str("MemoryMax"), Value::Variant(Box::new(Value::U64(1 << 30)))]),
                Value::Struct(vec![Value::str("Delegate"), Value::Variant(Box::new(Value::Bool(true)))]),
            ],
        );
        let aux = Value::Array(
            Type::Struct(vec![Type::Str, Type::Array(Box::new(Type::Struct(vec![Type::Str, Type::Variant])))]),
            vec![],
        );
        let call = Message::call(
            "org.freedesktop.systemd1",
            "/org/freedesktop/systemd1",
            "org.freedesktop.systemd1.Manager",
            "StartTransientUnit",
            vec![Value::str("kubepods.slice"), Value::str("fail"), props, aux],
        );
        let bytes = call.encode(7).unwrap();
        assert_eq!(&bytes[..4], b"l\x01\x00\x01");
        assert_eq!(Message::length(bytes[..16].try_into().unwrap()).unwrap(), bytes.len());
        let back = Message::decode(&bytes).unwrap();
        assert_eq!(back.serial, 7);
        assert_eq!(Message { serial: 0, ..back }, call);
        // The header fields end on an 8-byte boundary, where the body starts.
        let body_len = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
        assert_eq!((bytes.len() - body_len) % 8, 0);
        // Cut anywhere, it is an error, never a panic.
        for cut in 0..bytes.len() {
            assert!(Message::decode(&bytes[..cut]).is_err());
        }
    }

    #[test]
    fn a_big_endian_message_reads_as_well() {
        // A return (serial 2, reply to 1) with body "s" = "ok", as a big-endian peer sends it.
        let mut m = vec![b'B', 2, 0, 1];
        m.extend_from_slice(&7u32.to_be_bytes()); // body: u32 length, "ok", NUL
        m.extend_from_slice(&2u32.to_be_bytes());
        // fields: (5, v u 1), (8, v g "s")
        let mut fields = Vec::new();
        fields.extend_from_slice(&[5, 1, b'u', 0]);
        fields.extend_from_slice(&1u32.to_be_bytes());
        fields.extend_from_slice(&[8, 1, b'g', 0, 1, b's', 0]);
        m.extend_from_slice(&(fields.len() as u32).to_be_bytes());
        m.extend_from_slice(&fields);
        while m.len() % 8 != 0 {
            m.push(0);
        }
        m.extend_from_slice(&2u32.to_be_bytes());
        m.extend_from_slice(b"ok\0");
        let back = Message::decode(&m).unwrap();
        assert_eq!(back.kind, Some(Kind::Return));
        assert_eq!(back.reply_serial, Some(1));
        assert_eq!(back.body, vec![Value::str("ok")]);
    }

    #[test]
    fn a_real_bus_answers_calls_and_errors() {
        // A private dbus-daemon: a real peer, nothing of the host's.
        let Ok(dir) = tempfile::tempdir() else { return };
        let socket = dir.path().join("bus");
        let config = dir.path().join("bus.conf");
        std::fs::write(
            &config,
            format!(
                "<busconfig><type>session</type><listen>unix:path={}</listen><auth>EXTERNAL</auth>\
                 <policy context=\"default\"><allow send_destination=\"*\" eavesdrop=\"true\"/><allow eavesdrop=\"true\"/><allow own=\"*\"/></policy></busconfig>",
                socket.display()
            ),
        )
        .unwrap();
        let child = std::process::Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .arg("--nofork")
            .spawn();
        let Ok(mut child) = child else { return eprintln!("skipping: no dbus-daemon") };
        let deadline = Instant::now() + Duration::from_secs(5);
        while !socket.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let run = || -> Result<(), DbusError> {
            let mut c = Connection::connect(&socket, Duration::from_secs(5))?;
            assert!(c.unique_name.starts_with(':'), "{}", c.unique_name);
            let names = c.call(
                &Message::call(
                    "org.freedesktop.DBus",
                    "/org/freedesktop/DBus",
                    "org.freedesktop.DBus",
                    "ListNames",
                    vec![],
                ),
                Duration::from_secs(5),
            )?;
            let Some(Value::Array(Type::Str, names)) = names.first() else { panic!("{names:?}") };
            assert!(
                names.contains(&Value::str("org.freedesktop.DBus"))
                    && names.contains(&Value::Str(c.unique_name.clone()))
            );
            let e = c
                .call(
                    &Message::call(
                        "org.freedesktop.DBus",
                        "/org/freedesktop/DBus",
                        "org.freedesktop.DBus",
                        "GetNameOwner",
                        vec![Value::str("org.example.Nobody")],
                    ),
                    Duration::from_secs(5),
                )
                .unwrap_err();
            assert!(
                matches!(&e, DbusError::Remote { name, .. } if name == "org.freedesktop.DBus.Error.NameHasNoOwner"),
                "{e}"
            );
            Ok(())
        };
        let result = run();
        let _ = child.kill();
        let _ = child.wait();
        result.unwrap();
    }
}
