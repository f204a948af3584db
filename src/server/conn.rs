//! The connection reactor: one thread (`fl-api`) owns the listener and every connection,
//! all non-blocking, and waits on them with `poll(2)`; a fixed pool of workers
//! (`fl-api-work`) computes responses. No socket is ever read or written by a blocking
//! call, so a client that stops reading holds only its own connection (until its write
//! deadline), and cheap requests (`/healthz`) are answered on the reactor itself, ahead of
//! any queued work. Connections, buffered bytes, queued work and unsent output are bounded.

use super::http::{parse_head, Parsed, Request, Response, MAX_HEAD};
use super::jobs::WorkerEnds;
use crate::base::manager::StopSignal;
use crate::base::wake::{self, WakeReceiver, Waker};
use crossbeam_channel::{bounded, unbounded, Receiver, Sender, TrySendError};
use parking_lot::Mutex;
use std::collections::{BTreeMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Accepted connections are capped at a quarter of the fd limit, and at most this many.
pub const MAX_CONNECTIONS: usize = 512;
/// Worker threads that compute responses.
pub const WORKERS: usize = 2;
/// A request head must arrive in full within this time of its first byte.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// An idle keep-alive connection is closed after this time.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// A response must be taken by the client within this time, or the connection closes.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests served on one connection; the last one is answered with `Connection: close`.
pub const MAX_REQUESTS_PER_CONNECTION: u32 = 1000;
/// Unsent response bytes over all connections; past it, queued requests wait. Responses
/// being computed are not counted yet, so workers get one request each at a time: the
/// budget is then exceeded by at most `workers` responses.
pub const OUTPUT_BUDGET: usize = 32 << 20;
/// `/healthz` fails once `accept` has failed without a success for this long.
pub const LISTENER_DEAD_AFTER: Duration = Duration::from_secs(5);
/// After a response that closes the connection, unread input is drained this long (so the
/// client is not reset before it reads the response), up to `LINGER_BYTES`.
const LINGER: Duration = Duration::from_millis(500);
const LINGER_BYTES: usize = 256 << 10;
/// Input buffer capacity an idle connection keeps (a head may take up to `MAX_HEAD`).
const KEEP_BUF: usize = 4 << 10;
/// The first and the longest pause of `accept` after it failed (EMFILE and the like).
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(1));
/// The pause after `poll` itself failed (not expected: EINTR is retried), so a persistent
/// failure is logged a few times a second rather than spun on.
const POLL_RETRY: Duration = Duration::from_millis(200);
/// Connections accepted per wakeup, so accepting cannot starve the open ones.
const ACCEPT_BATCH: usize = 64;

/// What the reactor needs from the routes.
pub trait Handler: Send + Sync + 'static {
    /// Answers a request; runs on a worker (or on the reactor when `inline` says so).
    fn handle(&self, req: &Request) -> Response;
    /// Whether the answer is cheap and must not wait behind queued work (`/healthz`).
    fn inline(&self, req: &Request) -> bool;
}

/// The bounds of one server.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Open connections; see `connection_cap`.
    pub max_connections: usize,
    /// Worker threads.
    pub workers: usize,
    /// See `REQUEST_TIMEOUT`.
    pub request_timeout: Duration,
    /// See `IDLE_TIMEOUT`.
    pub idle_timeout: Duration,
    /// See `WRITE_TIMEOUT`.
    pub write_timeout: Duration,
    /// See `MAX_REQUESTS_PER_CONNECTION`.
    pub max_requests_per_connection: u32,
}

impl Limits {
    /// The documented limits, with the connection cap derived from the fd limit.
    pub fn for_this_process() -> Limits {
        Limits {
            max_connections: connection_cap(crate::base::procs::open_files_limit()),
            workers: WORKERS,
            request_timeout: REQUEST_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            write_timeout: WRITE_TIMEOUT,
            max_requests_per_connection: MAX_REQUESTS_PER_CONNECTION,
        }
    }
}

/// The API may use a quarter of the fd limit for connections (systemd's default soft limit
/// of 1024 gives 256), never more than `MAX_CONNECTIONS`, never fewer than 16.
pub fn connection_cap(nofile_soft: u64) -> usize {
    (nofile_soft / 4).clamp(16, MAX_CONNECTIONS as u64) as usize
}

/// Whether an `accept` error concerns only the connection being accepted (retry at once)
/// or the process (out of fds or memory: pause accepting for a while).
pub fn accept_error_is_transient(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ECONNABORTED | libc::EINTR | libc::EPROTO | libc::EPERM))
}

/// Counters and the listener's state, read by `/healthz` and `/metrics`.
#[derive(Default)]
pub struct ServerStats {
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Connections refused with 503 because every slot was busy.
    pub rejected: AtomicU64,
    /// Idle connections closed to make room for a new one.
    pub evicted: AtomicU64,
    /// Connections closed because a request or a response missed its deadline.
    pub timeouts: AtomicU64,
    /// Request heads read in full (answered inline or queued for a worker).
    pub requests: AtomicU64,
    /// `accept` failures (EMFILE and the like).
    pub accept_errors: AtomicU64,
    /// Open connections.
    pub open: AtomicU64,
    failing_since: Mutex<Option<(Instant, String)>>,
}

impl ServerStats {
    /// Set when the listener has failed to accept for longer than `LISTENER_DEAD_AFTER`.
    pub fn listener_problem(&self, now: Instant) -> Option<String> {
        let failing = self.failing_since.lock();
        let (since, error) = failing.as_ref()?;
        let d = now.saturating_duration_since(*since);
        (d >= LISTENER_DEAD_AFTER)
            .then(|| format!("api listener has not accepted a connection for {}s: {error}", d.as_secs()))
    }
}

enum State {
    /// Waiting for (the rest of) a request head; `started` once a byte of it arrived.
    Reading { started: bool },
    /// A worker has the request (`at_worker`), or it waits for one until the deadline.
    Queued { at_worker: bool },
    /// Sending `out`; close afterwards if `close`.
    Writing { out: Vec<u8>, pos: usize, close: bool },
    /// Response sent and write side shut; discarding input until EOF or the deadline.
    Lingering { drained: usize },
}

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    state: State,
    served: u32,
    /// The client shut down its side after sending: answer what is buffered, then close.
    peer_done: bool,
    deadline: Instant,
    /// When it last became idle, for choosing whom to evict.
    idle_since: Instant,
}

/// The reactor's state; `run` drives it on the `fl-api` thread.
pub struct Reactor<H: Handler> {
    listener: TcpListener,
    wake: WakeReceiver,
    replies: Receiver<(u64, Response)>,
    jobs: Option<Sender<(u64, Request)>>,
    conns: BTreeMap<u64, Conn>,
    next_id: u64,
    ready: VecDeque<(u64, Request)>,
    in_flight: usize,
    pending_out: usize,
    accept_paused_until: Option<Instant>,
    backoff: Duration,
    handler: Arc<H>,
    limits: Limits,
    stats: Arc<ServerStats>,
}

impl<H: Handler> Reactor<H> {
    /// A reactor over a bound listener, and the ends its workers use.
    pub fn new(
        listener: TcpListener,
        handler: Arc<H>,
        limits: Limits,
        stats: Arc<ServerStats>,
    ) -> io::Result<(Self, WorkerEnds, Waker)> {
        listener.set_nonblocking(true)?;
        let (wake_rx, wake_tx) = wake::pair()?;
        let (jobs_tx, jobs_rx) = bounded(limits.workers.max(1));
        let (replies_tx, replies_rx) = unbounded();
        let ends = WorkerEnds { jobs: jobs_rx, replies: replies_tx, wake: wake_tx.clone() };
        let reactor = Reactor {
            listener,
            wake: wake_rx,
            replies: replies_rx,
            jobs: Some(jobs_tx),
            conns: BTreeMap::new(),
            next_id: 0,
            ready: VecDeque::new(),
            in_flight: 0,
            pending_out: 0,
            accept_paused_until: None,
            backoff: ACCEPT_BACKOFF.0,
            handler,
            limits,
            stats,
        };
        Ok((reactor, ends, wake_tx))
    }

    /// Serves until `stop` is signalled; the stopper then wakes the `poll` through the
    /// wake pipe (`Waker`), so nothing here waits on a timer to see the stop.
    pub fn run(mut self, stop: &StopSignal) {
        let mut pfds: Vec<libc::pollfd> = Vec::new();
        let mut ids: Vec<u64> = Vec::new();
        // Serving --stop signal, woken--> Stopped.
        while !stop.is_stopped() {
            let now = Instant::now();
            pfds.clear();
            ids.clear();
            let listening = self.listening(now);
            pfds.push(pollfd(self.wake.as_raw_fd(), libc::POLLIN));
            pfds.push(pollfd(self.listener.as_raw_fd(), if listening { libc::POLLIN } else { 0 }));
            for (id, c) in &self.conns {
                let events = match c.state {
                    State::Reading { .. } | State::Lingering { .. } => libc::POLLIN,
                    State::Writing { .. } => libc::POLLOUT,
                    State::Queued { .. } => 0,
                };
                pfds.push(pollfd(c.stream.as_raw_fd(), events));
                ids.push(*id);
            }
            let ms = self.next_wakeup().map_or(-1, |at| poll_millis(at, now));
            // SAFETY: pfds is a valid array of pollfd of the given length.
            if unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) } < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    log::error!("api: poll failed: {}", crate::base::errors::Chain(&e));
                    stop.sleep(POLL_RETRY);
                }
                continue;
            }
            if pfds[0].revents != 0 {
                // Every waker lives as long as the reactor's owner: never `Closed` here.
                self.wake.drain();
            }
            self.collect_replies();
            if pfds[1].revents != 0 {
                self.accept_batch();
            }
            for (i, id) in ids.iter().enumerate() {
                if pfds[i + 2].revents != 0 {
                    self.on_ready(*id, pfds[i + 2].revents);
                }
            }
            self.expire(Instant::now());
            self.dispatch();
        }
        // Dropping the job sender ends the workers.
        self.jobs.take();
    }

    /// Whether to accept: paused --pause over--> listening. A pause left set after it passed
    /// would keep `next_wakeup` in the past, and every later `poll` would return at once.
    fn listening(&mut self, now: Instant) -> bool {
        if self.accept_paused_until.is_some_and(|t| now >= t) {
            self.accept_paused_until = None;
        }
        self.accept_paused_until.is_none()
    }

    /// When `poll` must return at the latest: the end of an accept pause, the earliest
    /// deadline of a connection that has one (a queued one waits for its worker); `None`
    /// (wait until something happens) when there is neither. Sockets, workers' answers and
    /// the stop all wake `poll` themselves.
    fn next_wakeup(&self) -> Option<Instant> {
        let pause = self.accept_paused_until;
        // A request at a worker has no deadline of ours: the worker's answer ends it.
        let deadlines = self.conns.values().filter(|c| !matches!(c.state, State::Queued { at_worker: true }));
        pause.into_iter().chain(deadlines.map(|c| c.deadline)).min()
    }

    fn collect_replies(&mut self) {
        while let Ok((id, resp)) = self.replies.try_recv() {
            self.in_flight -= 1;
            if matches!(self.conns.get(&id).map(|c| &c.state), Some(State::Queued { .. })) {
                self.respond(id, resp);
                self.advance(id);
            }
        }
    }

    fn accept_batch(&mut self) {
        for _ in 0..ACCEPT_BATCH {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if let Some((_, error)) = self.stats.failing_since.lock().take() {
                        log::info!("api: accepting connections again (the last error was: {error})");
                    }
                    self.backoff = ACCEPT_BACKOFF.0;
                    self.admit(stream);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if accept_error_is_transient(&e) => continue,
                Err(e) => {
                    self.stats.accept_errors.fetch_add(1, Ordering::Relaxed);
                    let mut failing = self.stats.failing_since.lock();
                    if failing.is_none() {
                        // Once per burst: the next line is the recovery.
                        log::warn!(
                            "api: accept failed, pausing and retrying (up to every {:?}): {}",
                            ACCEPT_BACKOFF.1,
                            crate::base::errors::Chain(&e)
                        );
                        *failing = Some((Instant::now(), e.to_string()));
                    }
                    self.accept_paused_until = Some(Instant::now() + self.backoff);
                    self.backoff = (self.backoff * 2).min(ACCEPT_BACKOFF.1);
                    return;
                }
            }
        }
    }

    fn admit(&mut self, stream: TcpStream) {
        self.stats.accepted.fetch_add(1, Ordering::Relaxed);
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        let _ = stream.set_nodelay(true);
        if self.conns.len() >= self.limits.max_connections {
            // Make room by closing the connection idle the longest (HTTP lets a server close an
            // idle connection at any time); if every one is busy, refuse this one.
            let idle = self
                .conns
                .iter()
                .filter(|(_, c)| matches!(c.state, State::Reading { .. } | State::Lingering { .. }))
                .min_by_key(|(_, c)| c.idle_since)
                .map(|(id, _)| *id);
            match idle {
                Some(id) => {
                    self.stats.evicted.fetch_add(1, Ordering::Relaxed);
                    self.close(id);
                }
                None => {
                    self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                    let msg = format!(
                        "the ferrolet API is serving its limit of {} connections; try again later\n",
                        self.limits.max_connections
                    );
                    let resp = Response { close: true, ..Response::text(503, msg) };
                    // Best effort on a fresh socket: the send buffer is empty, so it fits.
                    let _ = (&stream).write(&resp.to_bytes());
                    let _ = stream.shutdown(Shutdown::Both);
                    return;
                }
            }
        }
        let now = Instant::now();
        let id = self.next_id;
        self.next_id += 1;
        let deadline = now + self.limits.idle_timeout;
        let conn = Conn {
            stream,
            buf: Vec::new(),
            state: State::Reading { started: false },
            served: 0,
            peer_done: false,
            deadline,
            idle_since: now,
        };
        self.conns.insert(id, conn);
        self.stats.open.store(self.conns.len() as u64, Ordering::Relaxed);
    }

    fn on_ready(&mut self, id: u64, revents: i16) {
        let Some(c) = self.conns.get_mut(&id) else { return };
        match &mut c.state {
            State::Reading { started } => {
                let mut chunk = [0u8; 16 << 10];
                loop {
                    match (&c.stream).read(&mut chunk) {
                        // A client may half-close right after its request (`nc -N`, `shutdown(SHUT_WR)`).
                        Ok(0) if c.buf.is_empty() => return self.close(id),
                        Ok(0) => {
                            c.peer_done = true;
                            break;
                        }
                        Ok(n) => {
                            c.buf.extend_from_slice(&chunk[..n]);
                            if !*started {
                                *started = true;
                                c.deadline = c.deadline.min(Instant::now() + self.limits.request_timeout);
                            }
                            // Bounded: parse_head refuses anything longer than MAX_HEAD.
                            if c.buf.len() > MAX_HEAD {
                                break;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(_) => return self.close(id),
                    }
                }
                self.advance(id);
            }
            State::Lingering { drained } => {
                let mut chunk = [0u8; 16 << 10];
                loop {
                    match (&c.stream).read(&mut chunk) {
                        Ok(n) if n > 0 && *drained + n <= LINGER_BYTES => *drained += n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        _ => return self.close(id),
                    }
                }
            }
            State::Writing { .. } => {
                self.flush(id);
                self.advance(id);
            }
            // Not polled for input; an error or hang-up means the client is gone.
            State::Queued { .. } if revents & (libc::POLLERR | libc::POLLHUP) != 0 => self.close(id),
            State::Queued { .. } => {}
        }
    }

    /// Parses what has arrived: answers inline, queues for a worker, or refuses. Callers
    /// run it after any step that may leave the connection reading with bytes buffered;
    /// it loops (never recurses) over pipelined requests.
    fn advance(&mut self, id: u64) {
        loop {
            let Some(c) = self.conns.get_mut(&id) else { return };
            if !matches!(c.state, State::Reading { .. }) {
                return;
            }
            match parse_head(&c.buf) {
                Parsed::Incomplete if c.peer_done => return self.close(id),
                Parsed::Incomplete => return,
                Parsed::Refused(e) => {
                    log::debug!("api: refusing a request: {e}");
                    c.buf.clear();
                    return self.respond(id, Response::refused(&e));
                }
                Parsed::Complete(mut req, used) => {
                    self.stats.requests.fetch_add(1, Ordering::Relaxed);
                    c.buf.drain(..used);
                    if c.buf.is_empty() && c.buf.capacity() > KEEP_BUF {
                        // An idle connection does not keep the room its largest head took.
                        c.buf = Vec::new();
                    }
                    c.served += 1;
                    if c.served >= self.limits.max_requests_per_connection || (c.peer_done && c.buf.is_empty()) {
                        req.close = true;
                    }
                    if self.handler.inline(&req) {
                        let resp = answer(&*self.handler, &req);
                        self.respond(id, resp);
                        // Loop: a pipelined request may already be buffered.
                    } else {
                        // Reading --complete--> Queued: a worker must take it within the
                        // write deadline (workers slower than that leave clients waiting).
                        c.state = State::Queued { at_worker: false };
                        c.deadline = Instant::now() + self.limits.write_timeout;
                        self.ready.push_back((id, req));
                        return;
                    }
                }
            }
        }
    }

    fn respond(&mut self, id: u64, resp: Response) {
        let Some(c) = self.conns.get_mut(&id) else { return };
        let out = resp.to_bytes();
        self.pending_out += out.len();
        c.state = State::Writing { out, pos: 0, close: resp.close };
        c.deadline = Instant::now() + self.limits.write_timeout;
        self.flush(id);
    }

    fn flush(&mut self, id: u64) {
        let Some(c) = self.conns.get_mut(&id) else { return };
        let State::Writing { out, pos, close } = &mut c.state else { return };
        while *pos < out.len() {
            match (&c.stream).write(&out[*pos..]) {
                Ok(0) => return self.close(id),
                Ok(n) => *pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return self.close(id),
            }
        }
        self.pending_out -= out.len();
        let now = Instant::now();
        if *close {
            let _ = c.stream.shutdown(Shutdown::Write);
            c.state = State::Lingering { drained: 0 };
            c.deadline = now + LINGER;
            c.idle_since = now;
        } else {
            // Writing --sent--> Reading (keep-alive); pipelined bytes count as a started request.
            let started = !c.buf.is_empty();
            c.state = State::Reading { started };
            c.idle_since = now;
            c.deadline = now + if started { self.limits.request_timeout } else { self.limits.idle_timeout };
        }
    }

    fn close(&mut self, id: u64) {
        if let Some(c) = self.conns.remove(&id) {
            if let State::Writing { out, .. } = &c.state {
                self.pending_out -= out.len();
                // Reset instead of a FIN: the kernel would otherwise keep sending what is
                // buffered to a client that does not read, long after we gave up on it.
                crate::base::net::set_linger(&c.stream, 0);
            }
        }
        self.stats.open.store(self.conns.len() as u64, Ordering::Relaxed);
    }

    fn expire(&mut self, now: Instant) {
        let late: Vec<(u64, bool, bool)> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline <= now && !matches!(c.state, State::Queued { at_worker: true }))
            .map(|(id, c)| {
                let waiting = matches!(c.state, State::Queued { at_worker: false });
                (*id, waiting, waiting || matches!(c.state, State::Writing { .. } | State::Reading { started: true }))
            })
            .collect();
        for (id, waiting, counted) in late {
            if waiting {
                // Queued --no worker in time--> Writing a 503: the slot is not held forever
                // by a client that may long have given up.
                self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                self.ready.retain(|(r, _)| *r != id);
                let resp =
                    Response { close: true, ..Response::text(503, "the ferrolet API is busy; try again later\n") };
                self.respond(id, resp);
                continue;
            }
            if counted {
                self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                log::debug!("api: closing a connection that missed its read or write deadline");
            }
            self.close(id);
        }
    }

    /// Hands queued requests to idle workers while unsent output allows. One request per
    /// worker: requests handed over ahead of time would all be answered before the budget
    /// is checked again (64 non-reading clients of `/events` held 64 responses).
    fn dispatch(&mut self) {
        while self.in_flight < self.limits.workers.max(1) && self.pending_out < OUTPUT_BUDGET {
            let Some((id, req)) = self.ready.pop_front() else { return };
            if !self.conns.contains_key(&id) {
                continue;
            }
            let Some(jobs) = &self.jobs else { return };
            match jobs.try_send((id, req)) {
                Ok(()) => {
                    self.in_flight += 1;
                    if let Some(c) = self.conns.get_mut(&id) {
                        c.state = State::Queued { at_worker: true };
                    }
                }
                Err(TrySendError::Full(job)) => {
                    self.ready.push_front(job);
                    return;
                }
                Err(TrySendError::Disconnected(_)) => {
                    let resp = Response { close: true, ..Response::text(503, "the API workers have stopped\n") };
                    self.respond(id, resp);
                }
            }
        }
    }
}

/// The handler's answer.
/// A request that ends its connection (HTTP/1.0, `Connection: close`, the last one allowed)
/// gets a response that says so, from a worker as from the reactor; an HTTP/1.0 one that
/// keeps it is told so, and a HEAD request gets no body.
pub fn answer<H: Handler>(handler: &H, req: &Request) -> Response {
    let resp = handler.handle(req);
    let close = resp.close || req.close;
    Response { close, keep_alive: !close && req.http_1_0, head: req.method == "HEAD", ..resp }
}

/// `poll`'s timeout for waking at `at`, rounded up to a whole millisecond: rounding down
/// would spin with a zero timeout through the last millisecond before a deadline.
fn poll_millis(at: Instant, now: Instant) -> i32 {
    let d = at.saturating_duration_since(now);
    d.as_millis().saturating_add(u128::from(d.subsec_nanos() % 1_000_000 != 0)).min(i32::MAX as u128) as i32
}

fn pollfd(fd: i32, events: i16) -> libc::pollfd {
    libc::pollfd { fd, events, revents: 0 }
}

#[cfg(test)]
mod tests;
