//! TCP probes, and HTTP probes without TLS, to an address (the pod's, or a host given as
//! one), over non-blocking sockets. The scheduler (`fl-prober`) starts each itself, as far
//! as it goes without waiting (`NetProbes::submit`): it connects, and on loopback, where the
//! connection is made within `connect`, a TCP probe is done and an HTTP probe's request is
//! sent. What is left, the waits for connections and answers, goes to one thread,
//! `fl-probe-net`, which polls every socket at once. A probe costs its system calls and the
//! wake-ups it cannot share, nothing more: no hand-off to a probe thread per probe, no
//! thread asleep in `read` per probe, and the probes due together are answered together.
//! A probe whose peer does not answer only waits for its own deadline beside the others.
//!
//! Each probe reads and decides exactly as on a probe thread (`probes::http`): the request
//! is `httpget`'s, the bytes received are read by `httpget::parse_response` as the blocking
//! client reads them, and `probes::after_response` says what a response means. What this
//! thread cannot do (TLS, a host name to look up, a redirect to either) goes to the probe
//! threads (`Fallback`), which run the probe from its start.
//!
//! The socket is closed without `SO_LINGER`. kubelet's probe dialer sets a 1 s linger to
//! shorten `TIME_WAIT`; on Linux a non-zero linger only makes `close` wait for the peer to
//! acknowledge the end of the connection, and sends the same segments. That wait would hold
//! up every probe on this thread.

use super::httpget::{self, HttpGetError};
use super::job::{Done, Job, Report};
use super::probes::{self, Next, Outcome};
use super::resolve::resolve_port;
use crate::api::{HttpHeader, Probe};
use crate::base::manager::{Exit, StopSignal, WorkerSet, WorkerSetError};
use crate::base::wake::{self, Drained, WakeReceiver, Waker};
use crossbeam_channel::{unbounded, Receiver, Sender, TryRecvError};
use parking_lot::Mutex;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Probes running at once on the thread (each holds a socket); more wait in its queue.
pub const MAX_RUNNING: usize = 1024;
/// The most of a response kept: a head, the body a probe reads, and chunk framing.
const MAX_RECEIVED: usize = httpget::MAX_HEAD + super::MAX_OUTPUT + 8 * 1024;

/// Where a probe goes that this thread cannot run: the probe threads, from its start.
pub type Fallback<K> = Arc<dyn Fn(Job<K>) + Send + Sync>;

/// The thread could not be started.
#[derive(Debug, thiserror::Error)]
pub enum NetProbesError {
    /// Its wake pipe could not be made.
    #[error("cannot make the network probe thread's wake pipe")]
    MakeWakePipe {
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Its thread could not be started.
    #[error(transparent)]
    StartThread(#[from] WorkerSetError),
}

/// Whether `probe` (of a pod at `pod_ip`) is one this thread runs: TCP, or HTTP without
/// TLS, to an address.
pub fn takes(probe: &Probe, pod_ip: &str) -> bool {
    let is_address = |host: &str| {
        let host = if host.is_empty() { pod_ip } else { host };
        host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().is_ok()
    };
    if let Some(t) = &probe.tcp_socket {
        return is_address(&t.host);
    }
    if let Some(h) = &probe.http_get {
        return (h.scheme.is_empty() || h.scheme.eq_ignore_ascii_case("http")) && is_address(&h.host);
    }
    false
}

/// The handle: starts probes and hands them to the thread. Its thread lives in the
/// prober's `WorkerSet`, which stops and joins it; `close` (or dropping the handle) ends it too.
pub struct NetProbes<K> {
    inner: Mutex<Option<(Sender<Running<K>>, Waker)>>,
    /// Probes were handed over since the last wake-up.
    queued: AtomicBool,
    /// Where a probe done at its start is reported.
    done: Report<K>,
}

impl<K: Send + 'static> NetProbes<K> {
    /// Starts the thread (`fl-probe-net`) in `threads`; outcomes go to `done`, as from a
    /// probe thread, and what it cannot run to `fallback`.
    pub fn start(done: Report<K>, fallback: Fallback<K>, threads: &WorkerSet) -> Result<Self, NetProbesError> {
        let (wake_rx, wake) = wake::pair().map_err(|source| NetProbesError::MakeWakePipe { source })?;
        let (tx, rx) = unbounded();
        let (on_stop, report) = (wake.clone(), done.clone());
        threads.spawn_with("fl-probe-net", Some(Box::new(move || on_stop.wake())), move |stop| {
            run(rx, wake_rx, report, fallback, stop)
        })?;
        Ok(NetProbes { inner: Mutex::new(Some((tx, wake))), queued: AtomicBool::new(false), done })
    }

    /// Starts a probe on the caller's thread, as far as it goes without waiting, and hands
    /// what is left to the thread (which is woken at the next `flush`). The probe comes back
    /// when it needs the probe threads (TLS, a host name) or the thread is gone.
    pub fn submit(&self, job: Job<K>) -> Result<(), Job<K>> {
        let started = Instant::now();
        let mut r = match start(job, started) {
            Started::Running(r) => r,
            Started::Done(job, outcome) => {
                report(&self.done, job, started, outcome);
                return Ok(());
            }
            Started::Fallback(job) => return Err(job),
        };
        if let Some(outcome) = r.connected_at_once() {
            report(&self.done, r.job, started, outcome);
            return Ok(());
        }
        let Some((tx, _)) = &*self.inner.lock() else { return Err(r.job) };
        tx.send(r).map_err(|e| e.0.job)?;
        self.queued.store(true, Ordering::Release);
        Ok(())
    }
}

impl<K> NetProbes<K> {
    /// Wakes the thread for the probes queued since the last call: one wake-up for all of them.
    pub fn flush(&self) {
        if self.queued.swap(false, Ordering::AcqRel) {
            if let Some((_, wake)) = &*self.inner.lock() {
                wake.wake();
            }
        }
    }

    /// Ends the thread without waiting for it (its `WorkerSet` joins it).
    pub fn close(&self) {
        let Some((tx, wake)) = self.inner.lock().take() else { return };
        drop(tx);
        wake.wake();
    }
}

impl<K> Drop for NetProbes<K> {
    fn drop(&mut self) {
        self.close();
    }
}

/// An HTTP probe's exchange under way.
struct Http {
    url: String,
    /// The host redirects must stay on.
    original_host: String,
    redirects: usize,
    /// The request, and how much of it is sent.
    request: Vec<u8>,
    sent: usize,
    received: Vec<u8>,
}

/// A probe running on the thread.
struct Running<K> {
    job: Job<K>,
    started: Instant,
    deadline: Instant,
    socket: TcpStream,
    addr: SocketAddr,
    connected: bool,
    /// `None` for a TCP probe.
    http: Option<Http>,
}

/// What came of a step.
enum Step {
    /// Waiting for the socket.
    Wait,
    /// The probe's outcome.
    Done(Outcome),
    /// The probe threads must run it.
    Fallback,
}

/// What starting a probe gave.
enum Started<K> {
    Running(Running<K>),
    Done(Job<K>, Outcome),
    Fallback(Job<K>),
}

fn start<K>(job: Job<K>, started: Instant) -> Started<K> {
    let container = job.target.container.clone();
    let Some(probe) = super::probe_of(&container, job.kind) else {
        return Started::Done(job, Outcome::Error("the container has no such probe".into()));
    };
    let deadline = started + probes::timeout_of(probe);
    if let Some(t) = &probe.tcp_socket {
        let host = if t.host.is_empty() { job.target.pod_ip.as_str() } else { t.host.as_str() };
        let port = match resolve_port(&t.port, &job.target.container) {
            Ok(p) => p,
            Err(e) => return Started::Done(job, Outcome::Error(e.to_string())),
        };
        let Ok(ip) = host.parse::<IpAddr>() else { return Started::Fallback(job) };
        let addr = SocketAddr::new(ip, port);
        return match crate::base::net::connect_nonblocking(&addr) {
            Ok(socket) => {
                Started::Running(Running { job, started, deadline, socket, addr, connected: false, http: None })
            }
            Err(e) => Started::Done(job, probes::tcp_outcome(addr, Err(e))),
        };
    }
    let Some(h) = &probe.http_get else { return Started::Fallback(job) };
    let url = match probes::http_url(h, &job.target) {
        Ok(url) => url,
        Err(outcome) => return Started::Done(job, outcome),
    };
    let original_host = probes::host_of(&url).to_string();
    let http = Http { url, original_host, redirects: 0, request: Vec::new(), sent: 0, received: Vec::new() };
    match connect(http, &h.http_headers) {
        Connect::Open(socket, addr, http) => {
            Started::Running(Running { job, started, deadline, socket, addr, connected: false, http: Some(http) })
        }
        Connect::Done(outcome) => Started::Done(job, outcome),
        Connect::Fallback => Started::Fallback(job),
    }
}

/// What opening a connection for `http.url` gave.
enum Connect {
    Open(TcpStream, SocketAddr, Http),
    Done(Outcome),
    Fallback,
}

/// Prepares the request for `http.url` and starts connecting.
fn connect(mut http: Http, headers: &[HttpHeader]) -> Connect {
    let addr = match httpget::prepare_plain(&http.url, headers, &mut http.request) {
        Ok(Some(addr)) => addr,
        Ok(None) => return Connect::Fallback,
        Err(e) => return Connect::Done(probes::http_failure(&http.url, &e)),
    };
    (http.sent, http.received) = (0, Vec::new());
    match crate::base::net::connect_nonblocking(&addr) {
        Ok(socket) => Connect::Open(socket, addr, http),
        Err(source) => Connect::Done(probes::http_failure(&http.url, &HttpGetError::Connect { addr, source })),
    }
}

impl<K> Running<K> {
    /// Right after `connect`: whether the connection is already made (on loopback it is),
    /// and then a TCP probe's outcome, or an HTTP probe's request sent as far as it goes.
    fn connected_at_once(&mut self) -> Option<Outcome> {
        let connected = crate::base::net::connect_again(&self.socket, &self.addr);
        match (&self.http, connected) {
            (_, Ok(false)) => None,
            (None, connected) => Some(probes::tcp_outcome(self.addr, connected.map(|_| ()))),
            (Some(h), Err(source)) => {
                Some(probes::http_failure(&h.url, &HttpGetError::Connect { addr: self.addr, source }))
            }
            (Some(_), Ok(true)) => {
                self.connected = true;
                match self.send() {
                    Step::Done(outcome) => Some(outcome),
                    _ => None,
                }
            }
        }
    }

    /// Sends what is left of the request; `Wait` once it is sent or the socket is full.
    fn send(&mut self) -> Step {
        let Some(h) = &mut self.http else { return Step::Wait };
        while h.sent < h.request.len() {
            match (&self.socket).write(&h.request[h.sent..]) {
                Ok(n) => h.sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Step::Wait,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(source) => return Step::Done(probes::http_failure(&h.url, &HttpGetError::WriteRequest { source })),
            }
        }
        Step::Wait
    }

    /// What the thread waits for on the socket.
    fn events(&self) -> libc::c_short {
        match &self.http {
            Some(h) if self.connected && h.sent == h.request.len() => libc::POLLIN,
            _ => libc::POLLOUT,
        }
    }

    fn headers(&self) -> &[HttpHeader] {
        let probe = super::probe_of(&self.job.target.container, self.job.kind);
        probe.and_then(|p| p.http_get.as_ref()).map_or(&[], |h| &h.http_headers)
    }

    /// Goes as far as the socket allows now; called when the poll found it ready.
    fn step(&mut self) -> Step {
        if !self.connected {
            let connected = match self.socket.take_error() {
                Ok(None) => Ok(()),
                Ok(Some(e)) | Err(e) => Err(e),
            };
            let Some(h) = &self.http else { return Step::Done(probes::tcp_outcome(self.addr, connected)) };
            if let Err(source) = connected {
                let e = HttpGetError::Connect { addr: self.addr, source };
                return Step::Done(probes::http_failure(&h.url, &e));
            }
            self.connected = true;
        }
        if let Step::Done(outcome) = self.send() {
            return Step::Done(outcome);
        }
        let Some(h) = &mut self.http else { return Step::Wait };
        if h.sent < h.request.len() {
            return Step::Wait;
        }
        let mut eof = false;
        loop {
            let room = MAX_RECEIVED - h.received.len();
            if room == 0 {
                eof = true; // all a probe reads is here: the rest is never read
                break;
            }
            let at = h.received.len();
            h.received.resize(at + room.min(4096), 0);
            let read = (&self.socket).read(&mut h.received[at..]);
            h.received.truncate(at + *read.as_ref().unwrap_or(&0));
            match read {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(source) => {
                    // A body cut short is kept as read; a head cut short fails.
                    return match httpget::parse_response(&h.received, true) {
                        Ok(Some(resp)) => self.respond(resp, false),
                        _ => Step::Done(probes::http_failure(&h.url, &HttpGetError::ReadResponse { source })),
                    };
                }
            }
        }
        match httpget::parse_response(&h.received, eof) {
            Ok(None) => Step::Wait,
            Ok(Some(resp)) => self.respond(resp, false),
            Err(e) => Step::Done(probes::http_failure(&h.url, &e)),
        }
    }

    /// The deadline has passed: what the probe has is its outcome.
    fn expire(&mut self) -> Step {
        let Some(h) = &self.http else {
            return Step::Done(probes::tcp_outcome(self.addr, Err(ErrorKind::TimedOut.into())));
        };
        // A body that times out is kept as read, as on a probe thread.
        match httpget::parse_response(&h.received, true) {
            Ok(Some(resp)) if self.connected => self.respond(resp, true),
            _ => Step::Done(probes::http_failure(&h.url, &HttpGetError::Timeout)),
        }
    }

    /// A response: the outcome, or a redirect followed on a new connection.
    fn respond(&mut self, resp: httpget::Response, expired: bool) -> Step {
        let h = self.http.as_mut().expect("responses are HTTP's");
        let next = match probes::after_response(&h.url, &h.original_host, h.redirects, resp) {
            Next::Done(outcome) => return Step::Done(outcome),
            Next::Follow(next) => next,
        };
        if expired {
            return Step::Done(probes::http_failure(&next, &HttpGetError::Timeout));
        }
        let mut http = self.http.take().expect("checked above");
        (http.url, http.redirects) = (next, http.redirects + 1);
        match connect(http, self.headers()) {
            Connect::Open(socket, addr, http) => {
                (self.socket, self.addr, self.connected, self.http) = (socket, addr, false, Some(http));
                Step::Wait
            }
            Connect::Done(outcome) => Step::Done(outcome),
            Connect::Fallback => Step::Fallback,
        }
    }
}

fn report<K>(done: &Report<K>, job: Job<K>, started: Instant, outcome: Outcome) -> bool {
    let (key, scheduled) = (job.key, job.scheduled);
    done(Done { key, outcome, started, scheduled, took: started.elapsed() })
}

/// How long to poll: until the nearest deadline, rounded up to a millisecond (so a deadline
/// less than one away is not polled for in a loop), without limit when nothing runs.
fn poll_timeout(now: Instant, deadlines: impl Iterator<Item = Instant>) -> libc::c_int {
    match deadlines.min() {
        None => -1,
        Some(d) => d.saturating_duration_since(now).as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int,
    }
}

/// The thread: take what was handed over, poll every socket and the wake pipe, step what
/// is ready and settle what is overdue. It ends when stopped (signal, then a wake-up), when the
/// handle is closed, or when nobody listens any more; always `Exit::Done`, since each of
/// those is an orderly end. Probes still running are dropped with it.
fn run<K>(
    rx: Receiver<Running<K>>,
    wake: WakeReceiver,
    done: Report<K>,
    fallback: Fallback<K>,
    stop: StopSignal,
) -> Exit {
    let mut running: Vec<Running<K>> = Vec::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    loop {
        while running.len() < MAX_RUNNING {
            match rx.try_recv() {
                Ok(r) => running.push(r),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return Exit::Done,
            }
        }
        fds.clear();
        fds.push(libc::pollfd { fd: wake.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        fds.extend(running.iter().map(|r| libc::pollfd { fd: r.socket.as_raw_fd(), events: r.events(), revents: 0 }));
        let timeout = poll_timeout(Instant::now(), running.iter().map(|r| r.deadline));
        // SAFETY: fds is a valid array of pollfd of the given length.
        if unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) } < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != ErrorKind::Interrupted {
                // Not expected; stop rather than spin.
                log::error!("prober: network probes: poll failed: {e}");
                return Exit::Done;
            }
            continue;
        }
        // Running --stop signal, woken--> Stopped.
        if stop.is_stopped() || (fds[0].revents != 0 && wake.drain() == Drained::Closed) {
            return Exit::Done;
        }
        let now = Instant::now();
        // From the end, so that swap_remove moves only entries already seen.
        for i in (0..running.len()).rev() {
            let r = &mut running[i];
            let step = match (fds[i + 1].revents != 0, now >= r.deadline) {
                (true, _) => match r.step() {
                    Step::Wait if now >= r.deadline => r.expire(),
                    step => step,
                },
                (false, true) => r.expire(),
                (false, false) => continue,
            };
            match step {
                Step::Wait => {}
                Step::Done(outcome) => {
                    let r = running.swap_remove(i);
                    if !report(&done, r.job, r.started, outcome) {
                        return Exit::Done;
                    }
                }
                Step::Fallback => fallback(running.swap_remove(i).job),
            }
        }
    }
}

#[cfg(test)]
mod tests;
