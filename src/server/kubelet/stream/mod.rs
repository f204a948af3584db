//! `exec`, `attach` and `portForward`: the streaming requests. On a runtime with a streaming
//! server of its own (CRI), the runtime is asked for a URL and the upgraded connection is
//! proxied to it byte for byte, as kubelet does. Otherwise (the process runtime) ferrolet is
//! the streaming server: SPDY/3.1 with kubelet's protocols (`v5`…`v1.channel.k8s.io`,
//! `portforward.k8s.io`), the command run in the container (`ContainerRuntime::exec_session`),
//! port-forward connected to the pod's port on the host's loopback (the pods of the process
//! runtime share the host's network), and attach following the container's output. Exec and
//! attach are served over WebSocket too, with kubelet's channel protocols (`websocket.rs`),
//! for the WebSocket clients an apiserver passes through: both transports are a `Session`,
//! which is all `exec`, `run` and `attach` see; port-forward has one loop per transport.
//! Every stream is bounded by the idle timeout, and ends with the connection.

mod forward;
mod session;

use super::request::{is_true, Head, PodPath};
use super::tlsio::{respond, Tls, TlsIo};
use super::websocket;
use crate::base::errors::Chain;
use crate::node::podlogs::{self, LineReader};
use crate::node::runtime::exec::ExecSession;
use crate::node::runtime::{labels, ContainerInfo, ContainerRuntime, ContainerState, StreamIo};
use crate::pods::podcmd::{self, PodRef, Target};
use forward::{forward_ports, port_forward, port_forward_ws};
use session::{Session, Spdy, Streams, Ws};
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Which streaming request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `/exec`.
    Exec,
    /// `/attach`.
    Attach,
    /// `/portForward`.
    PortForward,
}

/// The remote command protocols kubelet accepts, in its order (`v5` is `v4` over SPDY).
pub const REMOTE_COMMAND_PROTOCOLS: [&str; 5] =
    ["v5.channel.k8s.io", "v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io"];
/// The port-forward protocol.
pub const PORT_FORWARD_PROTOCOL: &str = "portforward.k8s.io";
/// The WebSocket protocols of port-forward, as kubelet's (and none offered: binary).
pub const PORT_FORWARD_WS_PROTOCOLS: [&str; 2] = ["v4.channel.k8s.io", "v4.base64.channel.k8s.io"];
/// Ports one WebSocket port-forward may name.
const MAX_WS_PORTS: usize = 16;
/// The client must open its streams within this time of the upgrade (kubelet's
/// `streamCreationTimeout`).
pub const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);
/// Connecting to a runtime's streaming server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Encoded frames kept for the client before the command's output is read no more.
const MAX_PENDING: usize = 128 << 10;
/// The largest data frame written.
const DATA_FRAME: usize = 32 << 10;
/// Port-forward connections at once on one stream.
const MAX_FORWARDS: usize = 128;
/// How long what is left is written after the end.
const FINAL_FLUSH: Duration = Duration::from_secs(10);

/// A remote command's options (kubelet's `NewOptions`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The command (exec).
    pub command: Vec<String>,
    /// Which streams.
    pub io: StreamIo,
}

/// The options of `params` for `kind`, with kubelet's messages.
pub fn options(params: &[(String, String)], kind: Kind) -> Result<Options, String> {
    let flag = |k: &str| params.iter().any(|(key, v)| key == k && is_true(v));
    let command: Vec<String> = params.iter().filter(|(k, _)| k == "command").map(|(_, v)| v.clone()).collect();
    let tty = flag("tty");
    let io = StreamIo {
        stdin: flag("input") || flag("stdin"),
        stdout: flag("output") || flag("stdout"),
        stderr: (flag("error") || flag("stderr")) && !tty,
        tty,
    };
    if kind == Kind::Exec && command.is_empty() {
        return Err("you must specify at least one command for the container".into());
    }
    if !io.stdin && !io.stdout && !io.stderr {
        return Err("you must specify at least 1 of stdin, stdout, stderr".into());
    }
    Ok(Options { command, io })
}

/// The protocol chosen: the client's first that is served (kubelet's `negotiateProtocol`).
pub fn negotiate<'a>(offered: &[&str], served: &[&'a str]) -> Option<&'a str> {
    offered.iter().find_map(|o| served.iter().find(|s| *s == o).copied())
}

/// A streaming request and what serves it.
pub struct Request<'a> {
    /// Its head.
    pub head: &'a Head,
    /// Which request.
    pub kind: Kind,
    /// The pod (and container) its path names.
    pub pod: &'a PodPath,
    /// How long a stream may pass nothing.
    pub idle: Duration,
    /// The container runtime.
    pub runtime: &'a dyn ContainerRuntime,
}

/// Why a streaming request is not served: the status and text the client gets.
type Refused = (u16, String);

/// Serves a streaming request to its end.
pub fn serve(tls: &mut Tls, leftover: Vec<u8>, req: &Request) {
    let head = req.head;
    match serve_or_refuse(tls, leftover, req) {
        Ok(Ok(())) => {}
        // The stream ran and ended early: nothing is left to answer.
        Ok(Err(e)) => log::debug!("server: {} {}: {e}", head.method, head.path),
        Err((status, text)) => {
            log::debug!("server: {} {}: {text}", head.method, head.path);
            let _ = respond(tls, status, &text, true);
        }
    }
}

/// Serves `req` (`Ok`, with how its stream ended), or says why not.
fn serve_or_refuse(tls: &mut Tls, leftover: Vec<u8>, req: &Request) -> Result<io::Result<()>, Refused> {
    let (head, kind, pod, idle, runtime) = (req.head, req.kind, req.pod, req.idle, req.runtime);
    let bad = |text: String| (400, text);
    let params = head.params();
    let opts = match kind {
        Kind::PortForward => None,
        _ => Some(options(&params, kind).map_err(bad)?),
    };
    // The container (exec, attach) or the pod's uid (port-forward).
    let target = Target {
        pod: PodRef { namespace: pod.namespace.clone(), name: pod.pod.clone() },
        container: (kind != Kind::PortForward).then(|| pod.container.clone()),
    };
    let (c, _) = podcmd::find(runtime, &target).map_err(|e| match e {
        podcmd::PodCmdError::PodNotFound { .. } => bad(format!("pod {:?} does not exist", pod.pod)),
        e => bad(Chain(&e).to_string()),
    })?;
    let instance = c.instances.first().cloned().ok_or_else(|| bad(format!("pod {:?} has no containers", pod.pod)))?;
    let uid = labels::get(&instance.config.labels, labels::POD_UID).unwrap_or("").to_string();
    if kind != Kind::PortForward && instance.state != ContainerState::Running {
        return Err(bad(format!("container {:?} in pod {:?} is not running", c.name, pod.pod)));
    }
    let url = match (kind, &opts) {
        (Kind::Exec, Some(o)) => runtime.exec_url(&instance.id, &o.command, o.io),
        (Kind::Attach, Some(o)) => runtime.attach_url(&instance.id, o.io),
        _ => runtime.port_forward_url(&uid),
    }
    .map_err(|e| bad(Chain(&e).to_string()))?;
    if let Some(url) = url {
        return proxy(tls, head, leftover, &url, idle).map(Ok).map_err(bad);
    }
    let ended = match (head.upgrade().as_deref(), &opts) {
        (Some("spdy/3.1"), _) => {
            let (mut s, v4) = spdy_session(tls, head, leftover, kind, idle)?;
            let ended = match &opts {
                Some(o) => remote_command(&mut s, kind, o, v4, &instance, runtime),
                None => port_forward(&mut s, &pod.pod, &uid),
            };
            s.finish();
            ended
        }
        (Some("websocket"), Some(o)) => {
            let mut s = websocket_session(tls, head, leftover, &websocket::CHANNEL_PROTOCOLS, idle)?;
            let v4 = s.protocol.v4;
            let ended = remote_command(&mut s, kind, o, v4, &instance, runtime);
            s.finish();
            ended
        }
        (Some("websocket"), None) => {
            let ports = forward_ports(&params).map_err(bad)?;
            let mut s = websocket_session(tls, head, leftover, &PORT_FORWARD_WS_PROTOCOLS, idle)?;
            let ended = port_forward_ws(&mut s, &ports, &pod.pod, &uid);
            s.finish();
            ended
        }
        (Some(u), _) if !u.is_empty() => {
            return Err(bad(format!("unable to upgrade: {u:?} is not served here; use SPDY/3.1 or WebSocket")))
        }
        _ => return Err(bad("Upgrade request required".into())),
    };
    Ok(ended)
}

/// The SPDY upgrade of `head` with the client's first protocol that `kind` serves, answered,
/// its session, and whether the protocol is v4 (or v5, which is v4 over SPDY).
fn spdy_session<'a>(
    tls: &'a mut Tls,
    head: &Head,
    leftover: Vec<u8>,
    kind: Kind,
    idle: Duration,
) -> Result<(Spdy<'a>, bool), Refused> {
    let served: &[&str] = if kind == Kind::PortForward { &[PORT_FORWARD_PROTOCOL] } else { &REMOTE_COMMAND_PROTOCOLS };
    let offered = head.header_values("x-stream-protocol-version");
    let Some(protocol) = negotiate(&offered, served) else {
        let text = format!(
            "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server supports {served:?}"
        );
        return Err((403, text));
    };
    let reply = format!(
        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: {protocol}\r\n\r\n"
    );
    tls.write_all(reply.as_bytes()).and_then(|()| tls.flush()).map_err(|e| (400, e.to_string()))?;
    let io = TlsIo::new(tls, leftover).map_err(|e| (400, e.to_string()))?;
    Ok((Spdy::new(io, idle, protocol), matches!(protocol, "v5.channel.k8s.io" | "v4.channel.k8s.io")))
}

/// The WebSocket upgrade of `head` with one of the `served` protocols, answered, and its
/// session.
fn websocket_session<'a>(
    tls: &'a mut Tls,
    head: &Head,
    leftover: Vec<u8>,
    served: &[&'static str],
    idle: Duration,
) -> Result<Ws<'a>, Refused> {
    let bad = |text: String| (400, text);
    let accepted = websocket::handshake(head, served).map_err(|e| bad(e.to_string()))?;
    let protocol = websocket::Protocol::named(accepted.protocol)
        .ok_or_else(|| bad(format!("unable to upgrade: protocol {:?} is not served", accepted.protocol)))?;
    tls.write_all(accepted.response.as_bytes()).and_then(|()| tls.flush()).map_err(|e| bad(e.to_string()))?;
    let io = TlsIo::new(tls, leftover).map_err(|e| bad(e.to_string()))?;
    Ok(Ws::new(io, idle, protocol))
}

/// Exec or attach served here over `s`, to its end (the caller finishes the session).
fn remote_command(
    s: &mut dyn Session,
    kind: Kind,
    o: &Options,
    v4: bool,
    instance: &ContainerInfo,
    runtime: &dyn ContainerRuntime,
) -> io::Result<()> {
    match kind {
        Kind::Attach => attach(s, o, v4, instance, runtime),
        _ => exec(s, o, v4, |io| runtime.exec_session(&instance.id, &o.command, io)),
    }
}

/// The byte-for-byte proxy of an upgraded request to `url`, the runtime's streaming server.
fn proxy(tls: &mut Tls, head: &Head, leftover: Vec<u8>, url: &str, idle: Duration) -> Result<(), String> {
    let rest =
        url.strip_prefix("http://").ok_or_else(|| format!("the runtime's streaming URL {url:?} is not http://"))?;
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let addr: SocketAddr = std::net::ToSocketAddrs::to_socket_addrs(host)
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("the runtime's streaming URL {url:?} has no address"))?;
    let mut up = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
        .map_err(|e| format!("cannot reach the runtime's streaming server at {addr}: {e}"))?;
    let mut req = format!("{} {} HTTP/1.1\r\nHost: {host}\r\n", head.method, if path.is_empty() { "/" } else { path });
    for (name, value) in &head.headers {
        // Credentials are the node's business, not the runtime's.
        if name != "host" && name != "authorization" {
            req.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    req.push_str("\r\n");
    up.write_all(req.as_bytes()).map_err(|e| format!("writing to the runtime's streaming server: {e}"))?;
    up.set_nonblocking(true).map_err(|e| e.to_string())?;
    let mut io = TlsIo::new(tls, leftover).map_err(|e| e.to_string())?;
    splice(&mut io, &mut up, idle).map_err(|e| e.to_string())
}

/// Passes bytes both ways until both sides are done or nothing passed for `idle`.
fn splice(io: &mut TlsIo, up: &mut TcpStream, idle: Duration) -> io::Result<()> {
    let mut down: Vec<u8> = Vec::new();
    let (mut up_eof, mut up_shut) = (false, false);
    let mut last = Instant::now();
    let mut chunk = vec![0u8; 16 << 10];
    loop {
        // What rustls held back while the input was full.
        io.ready(0)?;
        let mut up_events = 0;
        if !up_eof && down.len() < MAX_PENDING {
            up_events |= libc::POLLIN;
        }
        if !io.input().is_empty() {
            up_events |= libc::POLLOUT;
        }
        let mut fds = [io.pollfd(), crate::server::kubelet::pollfd(up, up_events)];
        let left = idle.checked_sub(last.elapsed()).ok_or_else(|| io::Error::other("idle timeout"))?;
        if crate::server::kubelet::poll(&mut fds, Some(left))? > 0 {
            last = Instant::now();
        }
        io.ready(fds[0].revents)?;
        if !io.input().is_empty() {
            match up.write(io.input()) {
                Ok(n) => drop(io.input().drain(..n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        if io.eof && io.input().is_empty() && !up_shut {
            let _ = up.shutdown(Shutdown::Write);
            up_shut = true;
        }
        while !up_eof && down.len() < MAX_PENDING {
            match up.read(&mut chunk) {
                Ok(0) => up_eof = true,
                Ok(n) => down.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => up_eof = true,
                Err(e) => return Err(e),
            }
        }
        io.send(&mut down)?;
        if up_eof && down.is_empty() {
            io.close(FINAL_FLUSH);
            return Ok(());
        }
        if io.eof && up_shut && up_eof {
            return Ok(());
        }
    }
}

/// The error stream's last word: a v4 `Status`, or plain text before v4.
fn status(v4: bool, command: &[String], exit: Result<i32, String>) -> Vec<u8> {
    match (exit, v4) {
        (Ok(0), true) => br#"{"metadata":{},"status":"Success"}"#.to_vec(),
        (Ok(0), false) => Vec::new(),
        (Ok(code), true) => serde_json::json!({
            "metadata": {},
            "status": "Failure",
            "message": format!("command terminated with non-zero exit code: error executing command {command:?}, exit code {code}"),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        })
        .to_string()
        .into_bytes(),
        (Ok(code), false) => format!("command terminated with non-zero exit code: exit code {code}").into_bytes(),
        (Err(text), true) => serde_json::json!({"metadata": {}, "status": "Failure", "message": text, "reason": "InternalError"})
            .to_string()
            .into_bytes(),
        (Err(text), false) => text.into_bytes(),
    }
}

/// The terminal sizes in `buf` (kubectl's JSON objects, one a line), taken out of it.
fn resizes(buf: &mut Vec<u8>) -> Vec<(u16, u16)> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Size {
        width: u16,
        height: u16,
    }
    let mut out = Vec::new();
    let mut stream = serde_json::Deserializer::from_slice(buf).into_iter::<Size>();
    let mut used = 0;
    while let Some(Ok(size)) = stream.next() {
        used = stream.byte_offset();
        out.push((size.width, size.height));
    }
    buf.drain(..used);
    if buf.len() > 4096 {
        buf.clear();
    }
    out
}

/// Reads what `file` has (up to a frame), `None` at its end.
fn read_some(file: &File, buf: &mut [u8]) -> Option<Option<usize>> {
    match (&*file).read(buf) {
        Ok(0) => None,
        Ok(n) => Some(Some(n)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => Some(None),
        // A terminal whose last writer closed says EIO.
        Err(_) => None,
    }
}

/// `exec` served here: the command started by `start` with the streams the client opened.
fn exec(
    s: &mut dyn Session,
    opts: &Options,
    v4: bool,
    start: impl FnOnce(StreamIo) -> Result<ExecSession, crate::node::runtime::RuntimeError>,
) -> io::Result<()> {
    let streams = s.open_streams(&opts.io)?;
    let mut session = match start(opts.io) {
        Ok(p) => p,
        Err(e) => {
            let text = format!("failed to start the command: {}", Chain(&e));
            if let Some(id) = streams.error {
                s.data(id, &status(v4, &opts.command, Err(text)), true);
            }
            return Ok(());
        }
    };
    let code = run(s, &streams, &mut session)?;
    for id in [streams.stdout, streams.stderr].into_iter().flatten() {
        s.data(id, &[], true);
    }
    if let (Some(id), Some(code)) = (streams.error, code) {
        s.data(id, &status(v4, &opts.command, Ok(code)), true);
    }
    Ok(())
}

/// Passes the streams until the command ends (its exit code) or the client goes (`None`;
/// the command is killed).
fn run(s: &mut dyn Session, streams: &Streams, p: &mut ExecSession) -> io::Result<Option<i32>> {
    let tty = p.pty().is_some();
    // Output 0 is stdout (the terminal with a tty), 1 stderr.
    let mut open = if tty { [true, false] } else { [p.stdout().is_some(), p.stderr().is_some()] };
    let to = [streams.stdout, if tty { None } else { streams.stderr }];
    let (mut to_stdin, mut stdin_fin, mut resize_buf) = (Vec::<u8>::new(), false, Vec::new());
    let mut buf = vec![0u8; DATA_FRAME];
    let mut exit = None;
    loop {
        while to_stdin.len() < MAX_PENDING {
            let Some(r) = s.received()? else { break };
            if Some(r.stream) == streams.stdin {
                to_stdin.extend_from_slice(&r.data);
                stdin_fin |= r.fin;
            } else if Some(r.stream) == streams.resize {
                resize_buf.extend_from_slice(&r.data);
                for (w, h) in resizes(&mut resize_buf) {
                    let _ = p.resize(w, h);
                }
            }
        }
        if s.closed() {
            p.kill();
            return Ok(None);
        }
        if let Some(f) = input(p, tty).filter(|_| !to_stdin.is_empty()) {
            match (&*f).write(&to_stdin) {
                Ok(n) => drop(to_stdin.drain(..n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The command closed its input: what is left is dropped.
                Err(_) => to_stdin.clear(),
            }
        }
        if stdin_fin && to_stdin.is_empty() {
            p.close_stdin();
            stdin_fin = false;
        }
        for i in 0..2 {
            while open[i] && s.has_room() {
                let Some(f) = output(p, tty, i) else {
                    open[i] = false;
                    break;
                };
                match read_some(f, &mut buf) {
                    None => open[i] = false,
                    Some(None) => break,
                    Some(Some(n)) => {
                        if let Some(id) = to[i] {
                            s.data(id, &buf[..n], false);
                        }
                    }
                }
            }
        }
        if exit.is_none() {
            exit = p.try_exit()?;
        }
        let any_open = open.iter().any(|o| *o);
        if let (Some(code), false) = (exit, any_open) {
            return Ok(Some(code));
        }
        let events = if s.has_room() { libc::POLLIN } else { 0 };
        let mut fds: Vec<libc::pollfd> = (0..2)
            .filter(|i| open[*i])
            .filter_map(|i| output(p, tty, i))
            .map(|f| crate::server::kubelet::pollfd(f, events))
            .collect();
        if let Some(f) = input(p, tty).filter(|_| !to_stdin.is_empty()) {
            fds.push(crate::server::kubelet::pollfd(f, libc::POLLOUT));
        }
        // Nothing to poll for the exit itself: look again soon when nothing else will wake.
        let wait = if any_open { Duration::from_secs(1) } else { Duration::from_millis(20) };
        s.wait(&fds, wait)?;
    }
}

/// The command's output `i` (0: stdout, or the terminal; 1: stderr).
fn output(p: &ExecSession, tty: bool, i: usize) -> Option<&File> {
    match (tty, i) {
        (true, _) => p.pty(),
        (false, 0) => p.stdout(),
        (false, _) => p.stderr(),
    }
}

/// The command's input: its stdin, or the terminal.
fn input(p: &ExecSession, tty: bool) -> Option<&File> {
    if tty {
        p.pty()
    } else {
        p.stdin()
    }
}

/// `attach` on a runtime without a streaming server: the container's output from now on,
/// followed from its log until it ends or the client goes. Its stdin is not attached: such
/// containers have none.
fn attach(
    s: &mut dyn Session,
    opts: &Options,
    v4: bool,
    c: &ContainerInfo,
    runtime: &dyn ContainerRuntime,
) -> io::Result<()> {
    let streams = s.open_streams(&opts.io)?;
    let mut file = BufReader::new(File::open(&c.config.log_path)?);
    file.seek(SeekFrom::End(0))?;
    let mut lines = LineReader::default();
    let mut checked = Instant::now();
    loop {
        while s.received()?.is_some() {}
        if s.closed() {
            return Ok(());
        }
        while s.has_room() {
            let Some(line) = lines.next(&mut file)? else { break };
            let Ok(r) = line.and_then(podlogs::parse_record) else { continue };
            let id = if r.stream == podlogs::Stream::Stderr && !opts.io.tty { streams.stderr } else { streams.stdout };
            if let Some(id) = id {
                let mut data = r.content.to_vec();
                if !r.partial {
                    data.push(b'\n');
                }
                s.data(id, &data, false);
            }
        }
        if checked.elapsed() >= podcmd::RUNNING_CHECK {
            checked = Instant::now();
            let running = podcmd::still_running(runtime, &c.id).map_err(|e| io::Error::other(Chain(&e).to_string()))?;
            if !running {
                for id in [streams.stdout, streams.stderr].into_iter().flatten() {
                    s.data(id, &[], true);
                }
                if let Some(id) = streams.error {
                    s.data(id, &status(v4, &[], Ok(0)), true);
                }
                return Ok(());
            }
        }
        s.wait(&[], podlogs::FOLLOW_POLL)?;
    }
}

#[cfg(test)]
mod tests {
    use super::forward::forward_ports;
    use super::*;

    fn p(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn options_are_kubelets_with_its_messages() {
        let o = options(
            &p(&[("command", "sh"), ("command", "-c"), ("input", "1"), ("output", "1"), ("tty", "1"), ("error", "1")]),
            Kind::Exec,
        )
        .unwrap();
        assert_eq!(o.command, ["sh", "-c"]);
        // A terminal has no separate stderr.
        assert_eq!(o.io, StreamIo { stdin: true, stdout: true, stderr: false, tty: true });
        assert_eq!(
            options(&p(&[("output", "1")]), Kind::Exec).unwrap_err(),
            "you must specify at least one command for the container"
        );
        assert_eq!(
            options(&p(&[("command", "true")]), Kind::Exec).unwrap_err(),
            "you must specify at least 1 of stdin, stdout, stderr"
        );
        assert!(options(&p(&[("stdout", "true")]), Kind::Attach).is_ok());
    }

    #[test]
    fn websocket_forwards_name_their_ports_in_the_query() {
        assert_eq!(forward_ports(&p(&[("ports", "80,8080"), ("ports", "9000")])), Ok(vec![80, 8080, 9000]));
        assert_eq!(forward_ports(&p(&[])), Err("query parameter \"port\" is required".into()));
        assert!(forward_ports(&p(&[("ports", "0")])).unwrap_err().contains("1 to 65535"));
        assert!(forward_ports(&p(&[("ports", "http")])).is_err());
        let many = (1..=17).map(|n| n.to_string()).collect::<Vec<_>>().join(",");
        assert!(forward_ports(&p(&[("ports", many.as_str())])).unwrap_err().contains("at most 16"));
    }

    #[test]
    fn the_clients_first_served_protocol_is_chosen() {
        assert_eq!(
            negotiate(&["v5.channel.k8s.io", "v4.channel.k8s.io"], &REMOTE_COMMAND_PROTOCOLS),
            Some("v5.channel.k8s.io")
        );
        assert_eq!(negotiate(&["v9", "v3.channel.k8s.io"], &REMOTE_COMMAND_PROTOCOLS), Some("v3.channel.k8s.io"));
        assert_eq!(negotiate(&["v9"], &REMOTE_COMMAND_PROTOCOLS), None);
        assert_eq!(negotiate(&[PORT_FORWARD_PROTOCOL], &[PORT_FORWARD_PROTOCOL]), Some(PORT_FORWARD_PROTOCOL));
    }

    #[test]
    fn the_exit_is_told_as_kubelet_tells_it() {
        assert_eq!(status(true, &[], Ok(0)), br#"{"metadata":{},"status":"Success"}"#);
        let v: serde_json::Value = serde_json::from_slice(&status(true, &["sh".into()], Ok(3))).unwrap();
        assert_eq!(v["reason"], "NonZeroExitCode");
        assert_eq!(v["details"]["causes"][0], serde_json::json!({"reason": "ExitCode", "message": "3"}));
        assert!(String::from_utf8(status(false, &[], Ok(3))).unwrap().contains("exit code 3"));
    }

    #[test]
    fn resizes_are_read_as_they_come_whole() {
        let mut buf = br#"{"Width":80,"Height":24}
{"Width":100,"Hei"#
            .to_vec();
        assert_eq!(resizes(&mut buf), [(80, 24)]);
        buf.extend_from_slice(b"ght\":40}\n");
        assert_eq!(resizes(&mut buf), [(100, 40)]);
        assert!(resizes(&mut buf).is_empty());
    }
}
