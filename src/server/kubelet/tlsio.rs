//! A connection's TLS: `Tls` (its socket, `Sock`, blocking with deadlines) for requests and
//! their plain answers (`respond`), and `TlsIo`, the same connection driven without
//! blocking for the streams: the caller polls its socket with `pollfd`'s events, calls
//! `ready` with what `poll` said, takes what arrived from `input`, and sends with `send`
//! (which takes only what the socket takes, so a client that stops reading slows its own
//! stream down and nothing else).

use crate::server::http::Response;
use rustls::{ServerConnection, StreamOwned};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

/// Plaintext kept from the client and not yet taken; past it, the socket is not read.
pub const MAX_INPUT: usize = 256 << 10;
/// Encrypted output rustls holds before `send` takes no more.
pub const MAX_OUTPUT: usize = 256 << 10;

/// A TLS connection as the routes use it.
pub type Tls = StreamOwned<ServerConnection, Sock>;

/// A connection's socket. Its thread owns it; stopping the thread shuts it down through a
/// weak reference, so the socket closes as soon as the thread is done with it.
pub struct Sock(pub Arc<TcpStream>);

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self.0).read(buf)
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self.0).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        (&*self.0).flush()
    }
}

impl std::ops::Deref for Sock {
    type Target = TcpStream;

    fn deref(&self) -> &TcpStream {
        &self.0
    }
}

/// Writes a plain-text answer.
pub fn respond(tls: &mut impl Write, status: u16, text: &str, close: bool) -> io::Result<()> {
    let resp = Response { close, ..Response::text(status, text) };
    tls.write_all(&resp.to_bytes())?;
    tls.flush()
}

/// The connection, non-blocking.
pub struct TlsIo<'a> {
    tls: &'a mut Tls,
    input: Vec<u8>,
    /// The client closed its side (close_notify, or the socket's end).
    pub eof: bool,
}

impl<'a> TlsIo<'a> {
    /// Takes over `tls` (made non-blocking) with `input` already read.
    pub fn new(tls: &'a mut Tls, input: Vec<u8>) -> io::Result<TlsIo<'a>> {
        tls.sock.set_nonblocking(true)?;
        tls.conn.set_buffer_limit(Some(MAX_OUTPUT));
        Ok(TlsIo { tls, input, eof: false })
    }

    /// The socket's pollfd: readable while input is wanted, writable while output waits.
    pub fn pollfd(&self) -> libc::pollfd {
        let mut events = 0;
        if !self.eof && self.input.len() < MAX_INPUT {
            events |= libc::POLLIN;
        }
        if self.tls.conn.wants_write() {
            events |= libc::POLLOUT;
        }
        super::pollfd(&*self.tls.sock, events)
    }

    /// Reads and writes what `revents` allows. An error ends the connection.
    pub fn ready(&mut self, revents: libc::c_short) -> io::Result<()> {
        if revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 && !self.eof {
            self.read()?;
        } else {
            // What rustls decrypted before `input` was full, now that it may have room: the
            // socket says nothing about it.
            self.take_plaintext()?;
        }
        self.flush()
    }

    fn read(&mut self) -> io::Result<()> {
        // rustls holds what did not fit in `input` (and refuses records past 16 KiB of it).
        while !self.take_plaintext()? && !self.eof {
            match self.tls.conn.read_tls(&mut self.tls.sock) {
                Ok(0) => self.eof = true,
                Ok(_) => {
                    let state = self.tls.conn.process_new_packets().map_err(io::Error::other)?;
                    self.eof |= state.peer_has_closed() && state.plaintext_bytes_to_read() == 0;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The bytes taken and not yet consumed.
    pub fn buffered(&self) -> usize {
        self.input.len()
    }

    /// Moves decrypted bytes into `input`; true when it is full.
    fn take_plaintext(&mut self) -> io::Result<bool> {
        let mut chunk = [0u8; 16 << 10];
        while self.input.len() < MAX_INPUT {
            match self.tls.conn.reader().read(&mut chunk) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => self.input.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    self.eof = true;
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Writes what rustls holds, as far as the socket takes it.
    pub fn flush(&mut self) -> io::Result<()> {
        while self.tls.conn.wants_write() {
            match self.tls.conn.write_tls(&mut self.tls.sock) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The bytes received and not yet taken.
    pub fn input(&mut self) -> &mut Vec<u8> {
        &mut self.input
    }

    /// Whether the client closed and everything it sent was taken.
    pub fn drained(&self) -> bool {
        self.eof && self.input.is_empty()
    }

    /// Sends what it can of `data` (taken off its front): into rustls as far as its buffer
    /// goes, to the socket as far as it takes, again while both move, so what is left waits
    /// only for the socket (which `pollfd` then asks about).
    pub fn send(&mut self, data: &mut Vec<u8>) -> io::Result<()> {
        // rustls takes nothing while its buffer is full; once flushed it takes more. Taking
        // nothing from an empty buffer twice means it takes no more at all.
        let mut refused = false;
        while !data.is_empty() {
            let n = self.tls.conn.writer().write(data)?;
            data.drain(..n);
            self.flush()?;
            if self.tls.conn.wants_write() || (n == 0 && refused) {
                break;
            }
            refused = n == 0;
        }
        Ok(())
    }

    /// Ends the TLS session (close_notify) and writes what is left, waiting up to `wait`.
    pub fn close(&mut self, wait: std::time::Duration) {
        self.tls.conn.send_close_notify();
        let deadline = std::time::Instant::now() + wait;
        while self.tls.conn.wants_write() {
            let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) else { break };
            let mut fds = [super::pollfd(&*self.tls.sock, libc::POLLOUT)];
            if super::poll(&mut fds, Some(left)).is_err() || self.flush().is_err() {
                break;
            }
        }
    }
}
