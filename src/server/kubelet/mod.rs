//! kubelet's authenticated HTTPS API (`[server]`, port 10250), which the apiserver calls for
//! `kubectl logs`, `exec`, `attach`, `port-forward` and `cp`, and which metrics scrapers
//! call with service account tokens (`/metrics`, `/metrics/resource`, `/stats/summary`). One thread (`fl-kapi`) accepts; each connection gets a
//! thread of its own (`fl-kapi-conn`, at most `max_connections`; more are closed at once),
//! with time bounds on the handshake, each request head and idle keep-alive, and, for a
//! stream, on its idle time. `request` parses, `auth` authenticates and authorizes, `routes`
//! answers, `logs` streams container logs, `stream` serves exec, attach and port-forward
//! (`spdy` and `websocket` are its framings), `tls` makes the certificate and the TLS settings.

pub mod auth;
mod conn;
pub mod logs;
pub mod request;
mod routes;
pub mod spdy;
pub mod stream;
pub mod tls;
mod tlsio;
pub mod websocket;

use crate::base::manager::{Exit, Health, StopTimeout, Worker, WorkerSet};
use crate::base::wake::{self, Waker};
use crate::node::runtime::ContainerRuntime;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A TLS handshake must finish within this time of the connection.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A request head must arrive in full within this time of its first byte.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// An idle keep-alive connection is closed after this time.
pub const KEEP_ALIVE: Duration = Duration::from_secs(60);
/// A response must be taken by the client within this time (each write).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Requests served on one connection.
pub const MAX_REQUESTS_PER_CONNECTION: u32 = 1000;

/// What the server is set to.
#[derive(Clone)]
pub struct Settings {
    /// The address to listen on.
    pub listen: String,
    /// The node's name (what requests are authorized on).
    pub node_name: String,
    /// The TLS settings (certificate, client CA).
    pub tls: Arc<rustls::ServerConfig>,
    /// The certificate `tls` serves, replaceable while the server runs.
    pub cert: Arc<tls::ServingCert>,
    /// Connections at once.
    pub max_connections: usize,
    /// Streams at once (exec, attach, port-forward, followed logs).
    pub max_streams: usize,
    /// A stream passing nothing for this long is closed.
    pub stream_idle_timeout: Duration,
    /// `/configz`'s JSON.
    pub configz: String,
}

/// What the routes read and act on.
pub struct Inputs {
    /// The container runtime (logs, exec, attach, port-forward).
    pub runtime: Arc<dyn ContainerRuntime>,
    /// The local API's routes: `/healthz`, `/pods`, `/metrics` are answered as there.
    pub local: Arc<crate::server::routes::Routes>,
    /// Authentication and authorization.
    pub gate: auth::Gate,
    /// The last usage snapshot (`/stats/summary`, `/metrics/resource`).
    pub stats: crate::node::stats::StatsView,
}

/// Everything a connection thread shares.
struct Shared {
    settings: Settings,
    inputs: Inputs,
    /// Streams running now.
    streams: AtomicUsize,
}

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The accepting thread could not be started.
    #[error("cannot start the kubelet API's thread")]
    Spawn(#[source] std::io::Error),
}

/// The running server.
pub struct KubeletServer {
    acceptor: Worker,
    wake: Waker,
    conns: Arc<WorkerSet>,
    cert: Arc<tls::ServingCert>,
    /// The bound address (useful when the port was 0).
    pub addr: SocketAddr,
}

impl KubeletServer {
    /// Binds `settings.listen` and serves it.
    pub fn start(settings: Settings, inputs: Inputs, health: &Health) -> Result<KubeletServer, StartError> {
        let bind = |source| StartError::Bind { addr: settings.listen.clone(), source };
        let listener = TcpListener::bind(&settings.listen).map_err(bind)?;
        let addr = listener.local_addr().map_err(bind)?;
        listener.set_nonblocking(true).map_err(bind)?;
        let (wake_rx, wake) = wake::pair().map_err(StartError::Spawn)?;
        let conns = Arc::new(WorkerSet::new("the kubelet API's connections", settings.max_connections, health));
        let max = settings.max_connections;
        let cert = settings.cert.clone();
        let shared = Arc::new(Shared { settings, inputs, streams: AtomicUsize::new(0) });
        let set = conns.clone();
        let acceptor = Worker::spawn("fl-kapi", health, move |stop| {
            conn::accept_loop(&listener, &wake_rx, &set, &shared, &stop);
            Exit::Done
        })
        .map_err(StartError::Spawn)?;
        log::info!(
            "server: serving kubelet's API (logs, exec, attach, port-forward) on https://{addr} (at most {max} connections)"
        );
        Ok(KubeletServer { acceptor, wake, conns, cert, addr })
    }

    /// The serving certificate, to replace when it is renewed (new connections get the new
    /// one).
    pub fn serving_cert(&self) -> &Arc<tls::ServingCert> {
        &self.cert
    }

    /// Stops accepting and closes every connection (streams end), waiting up to `timeout`;
    /// returns the threads that did not end in time.
    pub fn stop(self, timeout: Duration) -> Vec<StopTimeout> {
        let deadline = Instant::now() + timeout;
        let mut late = Vec::new();
        let mut acceptor = self.acceptor;
        acceptor.signal_stop();
        self.wake.wake();
        if let Err(e) = acceptor.join(deadline) {
            late.push(e);
        }
        late.extend(self.conns.stop(deadline.saturating_duration_since(Instant::now())));
        late
    }
}

/// `poll(2)` on `fds` for up to `timeout` (`None`: no limit); EINTR counts as nothing ready.
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> std::io::Result<usize> {
    let ms = timeout.map_or(-1, |t| t.as_millis().clamp(0, i32::MAX as u128) as i32);
    // SAFETY: `fds` is a valid, exclusively borrowed array of pollfd for the call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return if e.kind() == std::io::ErrorKind::Interrupted { Ok(0) } else { Err(e) };
    }
    Ok(n as usize)
}

/// A pollfd for `fd` and `events`.
pub(crate) fn pollfd(fd: &impl AsRawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd { fd: fd.as_raw_fd(), events, revents: 0 }
}
