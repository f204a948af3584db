//! The threads: `fl-kapi` accepts (non-blocking, in `poll` with a wake pipe) and gives each
//! connection a `fl-kapi-conn` thread, which does the TLS handshake, reads request heads
//! and answers them (`routes`) until the connection closes, a stream takes it over, or a
//! bound is reached. Its sockets block with timeouts; stopping shuts the socket down.

use super::request::{self, Head, Parsed};
use super::tlsio::{respond, Sock, Tls};
use super::{
    pollfd, Shared, HANDSHAKE_TIMEOUT, KEEP_ALIVE, MAX_REQUESTS_PER_CONNECTION, REQUEST_TIMEOUT, WRITE_TIMEOUT,
};
use crate::base::manager::{Exit, StopSignal, WorkerSet, WorkerSetError};
use crate::base::wake::WakeReceiver;
use crate::server::http::HeadError;
use rustls::{ServerConnection, StreamOwned};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The pause after `accept` failed (EMFILE and the like), so it is not spun on.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(200);

/// Accepts until stopped; a connection past the bound is closed at once.
pub fn accept_loop(
    listener: &TcpListener,
    wake: &WakeReceiver,
    conns: &WorkerSet,
    shared: &Arc<Shared>,
    stop: &StopSignal,
) {
    let mut refused_logged = Instant::now() - Duration::from_secs(60);
    while !stop.is_stopped() {
        let mut fds = [pollfd(listener, libc::POLLIN), pollfd(wake, libc::POLLIN)];
        if let Err(e) = super::poll(&mut fds, None) {
            log::error!("server: poll: {e}");
            stop.sleep(ACCEPT_BACKOFF);
            continue;
        }
        if fds[1].revents != 0 {
            wake.drain();
        }
        loop {
            let sock = match listener.accept() {
                Ok((sock, _)) => sock,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("server: accept: {e}");
                    stop.sleep(ACCEPT_BACKOFF);
                    break;
                }
            };
            // The listener is non-blocking; its connections block (with deadlines).
            if sock.set_nonblocking(false).is_err() {
                continue;
            }
            let sock = Arc::new(sock);
            let weak = Arc::downgrade(&sock);
            let shared = shared.clone();
            let on_stop = Box::new(move || {
                if let Some(s) = weak.upgrade() {
                    let _ = s.shutdown(Shutdown::Both);
                }
            });
            match conns.spawn_with("fl-kapi-conn", Some(on_stop), move |stop| {
                serve(Sock(sock), &shared, &stop);
                Exit::Done
            }) {
                Ok(_) => {}
                Err(WorkerSetError::Full { max, .. }) => {
                    if refused_logged.elapsed() > Duration::from_secs(60) {
                        log::warn!("server: {max} connections are open, the most allowed (server.max_connections): closing new ones");
                        refused_logged = Instant::now();
                    }
                }
                Err(e) => log::warn!("server: {e}"),
            }
        }
    }
}

/// Serves one connection to its end.
fn serve(sock: Sock, shared: &Shared, stop: &StopSignal) {
    let _ = sock.set_nodelay(true);
    let peer = sock.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let Some(mut tls) = handshake(sock, shared) else { return };
    let cert_user = super::tls::peer_identity(&tls.conn).map(|id| super::auth::User {
        name: id.common_name,
        uid: String::new(),
        groups: id.organizations,
    });
    let mut buf = Vec::new();
    for n in 0..MAX_REQUESTS_PER_CONNECTION {
        let wait = if n == 0 { REQUEST_TIMEOUT } else { KEEP_ALIVE };
        let head = match read_head(&mut tls, &mut buf, wait) {
            Ok(Some(h)) => h,
            Ok(None) => return,
            Err(refused) => {
                let _ = respond(&mut tls, refused.status(), &format!("{refused}\n"), true);
                return;
            }
        };
        if stop.is_stopped() {
            return;
        }
        let leftover = std::mem::take(&mut buf);
        match super::routes::answer(&mut tls, head, leftover, cert_user.clone(), &peer, shared) {
            super::routes::After::KeepAlive(rest) => buf = rest,
            super::routes::After::Close => {
                tls.conn.send_close_notify();
                let _ = tls.flush();
                return;
            }
            super::routes::After::Gone => return,
        }
    }
}

/// The TLS handshake, bounded in time as a whole (each read waits only for what is left).
fn handshake(mut sock: Sock, shared: &Shared) -> Option<Tls> {
    let mut conn = ServerConnection::new(shared.settings.tls.clone()).ok()?;
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    sock.set_write_timeout(Some(WRITE_TIMEOUT)).ok()?;
    loop {
        while conn.wants_write() {
            conn.write_tls(&mut sock).ok()?;
        }
        if !conn.is_handshaking() {
            return Some(StreamOwned::new(conn, sock));
        }
        let left = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())?;
        sock.set_read_timeout(Some(left)).ok()?;
        if matches!(conn.read_tls(&mut sock), Ok(0) | Err(_)) {
            return None;
        }
        if let Err(e) = conn.process_new_packets() {
            log::debug!("server: TLS handshake: {e}");
            // The alert, if rustls has one to send.
            let _ = conn.write_tls(&mut sock);
            return None;
        }
    }
}

/// Reads the next request head into `buf` (which may hold bytes already): `None` when the
/// client closed or went quiet for `wait` before a first byte; the head must then be
/// complete within `REQUEST_TIMEOUT`. What follows the head stays in `buf`.
fn read_head(tls: &mut Tls, buf: &mut Vec<u8>, wait: Duration) -> Result<Option<Head>, HeadError> {
    let mut deadline = Instant::now() + wait;
    let mut started = !buf.is_empty();
    let mut chunk = [0u8; 4096];
    loop {
        if started {
            match request::parse(buf) {
                Parsed::Complete(head, used) => {
                    buf.drain(..used);
                    return Ok(Some(head));
                }
                Parsed::Refused(e) => return Err(e),
                Parsed::Incomplete => {}
            }
        }
        let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) else {
            return Ok(None);
        };
        if tls.sock.set_read_timeout(Some(left)).is_err() {
            return Ok(None);
        }
        match tls.read(&mut chunk) {
            Ok(0) => return Ok(None),
            Ok(n) => {
                if !started {
                    started = true;
                    deadline = Instant::now() + REQUEST_TIMEOUT;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Ok(None),
        }
    }
}
