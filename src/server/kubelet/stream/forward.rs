//! `portForward` served here (the process runtime): each forwarded connection goes to its
//! port on the host's loopback, over SPDY (a stream pair per connection, as kubectl opens
//! them) or WebSocket (a channel pair per port named in the query, as kubelet serves it).

use super::session::{Session, Spdy, Ws};
use super::{CONNECT_TIMEOUT, DATA_FRAME, MAX_FORWARDS, MAX_WS_PORTS};
use crate::server::kubelet::spdy::{Frame, Headers, FLAG_FIN};
use crate::server::kubelet::websocket;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

/// One forwarded connection: a data stream and an error stream of one `requestid`.
#[derive(Default)]
struct Forward {
    port: u16,
    data: Option<u32>,
    error: Option<u32>,
    sock: Option<TcpStream>,
    /// From the client, not yet written to the port.
    to_port: Vec<u8>,
    client_fin: bool,
    port_eof: bool,
    done: bool,
}

/// `portForward` served here: each stream pair connects to its port on the host's loopback.
pub(super) fn port_forward(s: &mut Spdy, pod: &str, uid: &str) -> io::Result<()> {
    let mut forwards: HashMap<String, Forward> = HashMap::new();
    let mut by_stream: HashMap<u32, String> = HashMap::new();
    let mut buf = vec![0u8; DATA_FRAME];
    loop {
        while let Some(f) = s.next()? {
            match f {
                Frame::SynStream { stream_id, headers, .. } => {
                    s.frame(&Frame::SynReply { stream_id, flags: 0, headers: Headers::default() });
                    let id = headers.get("requestid").unwrap_or("").to_string();
                    let port = headers.get("port").and_then(|p| p.parse::<u16>().ok()).filter(|p| *p > 0);
                    if forwards.len() >= MAX_FORWARDS && !forwards.contains_key(&id) {
                        s.frame(&Frame::RstStream { stream_id, status: 3 });
                        continue;
                    }
                    let fw = forwards.entry(id.clone()).or_default();
                    by_stream.insert(stream_id, id);
                    match (headers.get("streamtype"), port) {
                        (Some("error"), _) => fw.error = Some(stream_id),
                        (Some("data"), Some(port)) => {
                            fw.data = Some(stream_id);
                            fw.port = port;
                        }
                        _ => {
                            let text = format!("invalid port-forward stream: {:?}", headers.get("port"));
                            s.data(stream_id, text.as_bytes(), true);
                        }
                    }
                }
                Frame::Data { stream_id, flags, data } => {
                    if let Some(fw) = by_stream.get(&stream_id).and_then(|id| forwards.get_mut(id)) {
                        if fw.data == Some(stream_id) {
                            fw.to_port.extend_from_slice(&data);
                            fw.client_fin |= flags & FLAG_FIN != 0;
                        }
                    }
                }
                Frame::RstStream { stream_id, .. } => {
                    if let Some(fw) = by_stream.get(&stream_id).and_then(|id| forwards.get_mut(id)) {
                        fw.done = true;
                    }
                }
                _ => {}
            }
        }
        if s.closed() {
            return Ok(());
        }
        let mut fds = Vec::new();
        let mut polled = Vec::new();
        for (id, fw) in forwards.iter_mut() {
            step(s, fw, pod, uid, &mut buf)?;
            if let Some(sock) = fw.sock.as_ref().filter(|_| !fw.done) {
                let mut ev = 0;
                if !fw.port_eof && s.has_room() {
                    ev |= libc::POLLIN;
                }
                if !fw.to_port.is_empty() {
                    ev |= libc::POLLOUT;
                }
                fds.push(crate::server::kubelet::pollfd(sock, ev));
                polled.push(id.clone());
            }
        }
        forwards.retain(|_, fw| !fw.done);
        by_stream.retain(|_, id| forwards.contains_key(id));
        s.wait(&fds, Duration::from_secs(1))?;
    }
}

/// Moves one forwarded connection along: connects when both its streams are open, passes
/// bytes, and closes the streams when the port's side ends.
fn step(s: &mut Spdy, fw: &mut Forward, pod: &str, uid: &str, buf: &mut [u8]) -> io::Result<()> {
    let (Some(data), Some(error)) = (fw.data, fw.error) else { return Ok(()) };
    if fw.done {
        return Ok(());
    }
    if fw.sock.is_none() {
        match connect_local(fw.port) {
            Ok(sock) => fw.sock = Some(sock),
            Err(e) => {
                let text = format!("error forwarding port {} to pod {pod}, uid {uid}: {e}", fw.port);
                s.data(error, text.as_bytes(), true);
                s.data(data, &[], true);
                fw.done = true;
                return Ok(());
            }
        }
    }
    let Some(sock) = fw.sock.as_mut() else { return Ok(()) };
    if !fw.to_port.is_empty() {
        match sock.write(&fw.to_port) {
            Ok(n) => drop(fw.to_port.drain(..n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => fw.port_eof = true,
        }
    }
    if fw.client_fin && fw.to_port.is_empty() {
        let _ = sock.shutdown(Shutdown::Write);
    }
    while !fw.port_eof && s.has_room() {
        match sock.read(buf) {
            Ok(0) => fw.port_eof = true,
            Ok(n) => s.data(data, &buf[..n], false),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(_) => fw.port_eof = true,
        }
    }
    if fw.port_eof {
        s.data(data, &[], true);
        s.data(error, &[], true);
        fw.done = true;
    }
    Ok(())
}

/// The ports of a WebSocket port-forward (`ports=80,8080`, or repeated), with kubelet's
/// messages.
pub(super) fn forward_ports(params: &[(String, String)]) -> Result<Vec<u16>, String> {
    let mut ports = Vec::new();
    for value in params.iter().filter(|(k, _)| k == "ports").flat_map(|(_, v)| v.split(',')) {
        let port = value
            .trim()
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("unable to parse {value:?} as a port: it must be 1 to 65535"))?;
        ports.push(port);
    }
    if ports.is_empty() {
        return Err("query parameter \"port\" is required".into());
    }
    if ports.len() > MAX_WS_PORTS {
        return Err(format!("{} ports: at most {MAX_WS_PORTS} may be forwarded at once", ports.len()));
    }
    Ok(ports)
}

/// `portForward` over WebSocket, as kubelet serves it: port `i` has data channel `2i` and
/// error channel `2i+1`, each starting with the port (2 bytes, little-endian); one
/// connection to each port, made at once; the stream ends when every connection has.
pub(super) fn port_forward_ws(s: &mut Ws, ports: &[u16], pod: &str, uid: &str) -> io::Result<()> {
    let base64 = s.protocol.base64;
    let mut forwards: Vec<Forward> = Vec::with_capacity(ports.len());
    for (i, port) in ports.iter().enumerate() {
        for ch in [2 * i, 2 * i + 1] {
            websocket::channel_frame(base64, ch as u8, &port.to_le_bytes(), &mut s.link.out);
        }
        let mut fw =
            Forward { port: *port, data: Some(2 * i as u32), error: Some(2 * i as u32 + 1), ..Default::default() };
        match connect_local(*port) {
            Ok(sock) => fw.sock = Some(sock),
            Err(e) => {
                let text = format!("error forwarding port {port} to pod {pod}, uid {uid}: {e}");
                websocket::channel_frame(base64, 2 * i as u8 + 1, text.as_bytes(), &mut s.link.out);
                fw.done = true;
            }
        }
        forwards.push(fw);
    }
    let mut buf = vec![0u8; DATA_FRAME];
    loop {
        while let Some(m) = s.next()? {
            if let Some((ch, data)) = websocket::channel_message(base64, &m) {
                if let Some(fw) = forwards.get_mut(usize::from(ch) / 2).filter(|_| ch % 2 == 0) {
                    fw.to_port.extend_from_slice(&data);
                }
            }
        }
        if s.closed() || forwards.iter().all(|fw| fw.done) {
            return Ok(());
        }
        let mut fds = Vec::new();
        for fw in forwards.iter_mut().filter(|fw| !fw.done) {
            let data = fw.data.unwrap_or(0);
            let Some(sock) = fw.sock.as_mut() else { continue };
            if !fw.to_port.is_empty() {
                match sock.write(&fw.to_port) {
                    Ok(n) => drop(fw.to_port.drain(..n)),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => fw.port_eof = true,
                }
            }
            while !fw.port_eof && s.has_room() {
                match sock.read(&mut buf) {
                    Ok(0) => fw.port_eof = true,
                    Ok(n) => websocket::channel_frame(base64, data as u8, &buf[..n], &mut s.link.out),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => fw.port_eof = true,
                }
            }
            fw.done = fw.port_eof;
            if !fw.done {
                let mut ev = if s.has_room() { libc::POLLIN } else { 0 };
                if !fw.to_port.is_empty() {
                    ev |= libc::POLLOUT;
                }
                fds.push(crate::server::kubelet::pollfd(sock, ev));
            }
        }
        s.wait(&fds, Duration::from_secs(1))?;
    }
}

/// Connects to `port` on the loopback (IPv4, then IPv6), non-blocking once connected.
fn connect_local(port: u16) -> io::Result<TcpStream> {
    let v4 = SocketAddr::from(([127, 0, 0, 1], port));
    let sock = TcpStream::connect_timeout(&v4, CONNECT_TIMEOUT).or_else(|e4| {
        TcpStream::connect_timeout(&SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port)), CONNECT_TIMEOUT)
            .map_err(|_| io::Error::new(e4.kind(), format!("dial tcp4 {v4}: connect: {e4}")))
    })?;
    sock.set_nonblocking(true)?;
    let _ = sock.set_nodelay(true);
    Ok(sock)
}
