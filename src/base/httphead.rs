//! HTTP/1.x heads, parsed by httparse for both ends of ferrolet's HTTP: the request heads of
//! the local API (`server::http`) and the response heads HTTP probes read
//! (`prober::httpget`). Pure functions over bytes; the bounds and answers are the callers'.

pub use httparse::{Error, Header, EMPTY_HEADER};

/// Header fields a response head is parsed with before a larger array is taken.
const RESPONSE_HEADERS: usize = 32;

/// A complete request head.
#[derive(Debug)]
pub struct RequestHead<'h, 'b> {
    /// `GET`, `POST`, … (a token).
    pub method: &'b str,
    /// The request target as sent (UTF-8, no spaces or control characters).
    pub target: &'b str,
    /// The minor version: 0 or 1.
    pub minor: u8,
    /// The header fields, in order.
    pub headers: &'h [Header<'b>],
    /// The bytes the head took, its blank line included.
    pub len: usize,
}

/// Where a refused request head broke: the first part httparse could not take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestPart {
    /// The method.
    Method,
    /// The target.
    Target,
    /// The version.
    Version,
    /// The end of the request line, or a header field.
    Rest,
}

/// Parses the request head at the start of `buf` into `headers` (more fields than it holds
/// is `Error::TooManyHeaders`); `Ok(None)` while it is incomplete.
pub fn request<'h, 'b>(
    buf: &'b [u8],
    headers: &'h mut [Header<'b>],
) -> Result<Option<RequestHead<'h, 'b>>, (Error, RequestPart)> {
    let mut req = httparse::Request::new(headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => {
            let part = match (req.method, req.path, req.version) {
                (None, ..) => RequestPart::Method,
                (_, None, _) => RequestPart::Target,
                (.., None) => RequestPart::Version,
                _ => RequestPart::Rest,
            };
            return Err((e, part));
        }
    };
    Ok(Some(RequestHead {
        // Complete: httparse set every part.
        method: req.method.unwrap_or_default(),
        target: req.path.unwrap_or_default(),
        minor: req.version.unwrap_or_default(),
        headers: req.headers,
        len,
    }))
}

/// A complete response head.
#[derive(Debug)]
pub struct ResponseHead<'h, 'b> {
    /// The status code.
    pub status: u16,
    /// The header fields, in order.
    pub headers: &'h [Header<'b>],
    /// The bytes the head took, its blank line included.
    pub len: usize,
}

/// Parses the response head at the start of `buf` and gives it to `read`; `Ok(None)` while
/// it is incomplete. The number of header fields is bounded by `buf` alone: past
/// `RESPONSE_HEADERS` of them the head is parsed again into an array as long as its lines.
pub fn response<R>(buf: &[u8], read: impl FnOnce(&ResponseHead<'_, '_>) -> R) -> Result<Option<R>, Error> {
    let mut stack = [EMPTY_HEADER; RESPONSE_HEADERS];
    let mut heap;
    let mut resp = httparse::Response::new(&mut stack);
    let mut parsed = resp.parse(buf);
    if parsed == Err(Error::TooManyHeaders) {
        // Each field takes a line of its own.
        heap = vec![EMPTY_HEADER; buf.iter().filter(|&&b| b == b'\n').count()];
        resp = httparse::Response::new(&mut heap);
        parsed = resp.parse(buf);
    }
    Ok(match parsed? {
        httparse::Status::Complete(len) => {
            // Complete: httparse set the code.
            Some(read(&ResponseHead { status: resp.code.unwrap_or_default(), headers: resp.headers, len }))
        }
        httparse::Status::Partial => None,
    })
}

/// The first line of `head` (without its line end), as far as it goes.
pub fn first_line(head: &[u8]) -> &[u8] {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The first line after the first of `head` that httparse refuses as a header field
/// (without its line end), or all of them when none alone is refused: what a message
/// about a refused head shows.
pub fn refused_field(head: &[u8]) -> &[u8] {
    let fields = head.iter().position(|&b| b == b'\n').map_or(&head[head.len()..], |i| &head[i + 1..]);
    let mut rest = fields;
    while !rest.is_empty() {
        let end = rest.iter().position(|&b| b == b'\n').map_or(rest.len(), |i| i + 1);
        let (line, after) = rest.split_at(end);
        match httparse::parse_headers(line, &mut [EMPTY_HEADER; 1]) {
            Err(_) => return first_line(line),
            // The blank line: the head ended before this.
            Ok(httparse::Status::Complete(_)) => break,
            Ok(httparse::Status::Partial) => rest = after,
        }
    }
    first_line(fields)
}

/// A `tchar` of RFC 9110, what methods and header names are made of (httparse's rule).
pub fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_head_gives_its_line_fields_and_length() {
        let buf = b"GET /p?q HTTP/1.0\r\nHost: x\nX-A:  b \r\n\r\nbody";
        let mut headers = [EMPTY_HEADER; 4];
        let head = request(buf, &mut headers).unwrap().unwrap();
        assert_eq!((head.method, head.target, head.minor, head.len), ("GET", "/p?q", 0, buf.len() - 4));
        let fields: Vec<_> = head.headers.iter().map(|h| (h.name, h.value)).collect();
        assert_eq!(fields, [("Host", &b"x"[..]), ("X-A", b"b")]);
    }

    #[test]
    fn a_refused_request_head_says_which_part_broke() {
        for (buf, want) in [
            (&b"G(T / HTTP/1.1\r\n\r\n"[..], (Error::Token, RequestPart::Method)),
            (b"GET /\r\n\r\n", (Error::Token, RequestPart::Target)),
            (b"GET /\xff HTTP/1.1\r\n\r\n", (Error::Token, RequestPart::Target)),
            (b"GET / HTTP/2.0\r\n\r\n", (Error::Version, RequestPart::Version)),
            (b"GET / HTTP/1.1 x\r\n\r\n", (Error::NewLine, RequestPart::Rest)),
            (b"GET / HTTP/1.1\r\n folded: x\r\n\r\n", (Error::HeaderName, RequestPart::Rest)),
            (b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\n\r\n", (Error::TooManyHeaders, RequestPart::Rest)),
        ] {
            let mut headers = [EMPTY_HEADER; 1];
            assert_eq!(request(buf, &mut headers).unwrap_err(), want, "{buf:?}");
        }
        assert!(request(b"GET / HTTP/1.1\r\nA: 1\r\n", &mut [EMPTY_HEADER; 1]).unwrap().is_none());
    }

    #[test]
    fn a_response_head_takes_any_number_of_fields() {
        let mut buf = b"HTTP/1.1 302 Found\r\n".to_vec();
        for i in 0..RESPONSE_HEADERS * 3 {
            buf.extend_from_slice(format!("X-{i}: {i}\r\n").as_bytes());
        }
        buf.extend_from_slice(b"Location: /next\r\n\r\nbody");
        let read = |h: &ResponseHead| (h.status, h.headers.len(), h.headers.last().map(|h| h.value.to_vec()), h.len);
        let want = (302, RESPONSE_HEADERS * 3 + 1, Some(b"/next".to_vec()), buf.len() - 4);
        assert_eq!(response(&buf, read), Ok(Some(want)));
        assert_eq!(response(&buf[..buf.len() - 6], read), Ok(None), "no blank line yet");
    }

    #[test]
    fn the_refused_field_is_the_line_httparse_stops_at() {
        for (head, want) in [
            (&b"HTTP/1.1 200 OK\r\nA: 1\r\n folded\r\n\r\n"[..], &b" folded"[..]),
            (b"HTTP/1.1 200 OK\r\nA: 1\r\nno colon\r\nB: 2\r\n", b"no colon"),
            (b"HTTP/1.1 200 OK\nA: \x01\n\n", b"A: \x01"),
            (b"HTTP/1.1 200 OK\r\nbad name: 1", b"bad name: 1"),
        ] {
            assert_eq!(refused_field(head), want, "{head:?}");
        }
        assert_eq!(first_line(b"HTTP/2 200\r\n\r\n"), b"HTTP/2 200");
        assert_eq!(first_line(b"HTTP/2"), b"HTTP/2");
    }

    #[test]
    fn tokens_are_rfc_9110s_tchars() {
        let tokens: String = (0u8..128).filter(|&b| is_token(b)).map(char::from).collect();
        assert_eq!(tokens, "!#$%&'*+-.0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ^_`abcdefghijklmnopqrstuvwxyz|~");
        assert!(!is_token(0x80));
    }
}
