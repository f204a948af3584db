//! One request: authenticate, authorize, answer. Plain answers are written here; logs and
//! streams are handed to `logs` and `stream`.

use super::auth::{Attributes, User};
use super::request::{self, is_true, Endpoint, Head, PodPath};
use super::stream::Kind;
use super::tlsio::Tls;
use super::Shared;
use crate::server::conn::Handler;
use crate::server::http::{self, Response};
use crate::server::stats;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

/// What the connection does after a request.
pub enum After {
    /// Read the next request; the bytes already read of it.
    KeepAlive(Vec<u8>),
    /// Close it (with TLS's close_notify).
    Close,
    /// It is over (a stream ended, or writing failed).
    Gone,
}

/// Writes `resp` and says what follows.
fn send(tls: &mut Tls, mut resp: Response, head: &Head, leftover: Vec<u8>) -> After {
    resp.close |= head.close || head.has_body;
    resp.head = head.method == "HEAD";
    match tls.write_all(&resp.to_bytes()).and_then(|()| tls.flush()) {
        Err(_) => After::Gone,
        Ok(()) if resp.close => After::Close,
        Ok(()) => After::KeepAlive(leftover),
    }
}

/// A stream slot, given back when dropped.
pub struct StreamSlot<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for StreamSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A stream slot, unless `max_streams` run.
fn stream_slot(shared: &Shared) -> Option<StreamSlot<'_>> {
    let max = shared.settings.max_streams;
    shared.streams.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1)).ok()?;
    Some(StreamSlot(&shared.streams))
}

/// Answers `head`, read on a connection from `peer` whose client certificate names
/// `cert_user`.
pub fn answer(
    tls: &mut Tls,
    head: Head,
    leftover: Vec<u8>,
    cert_user: Option<User>,
    peer: &str,
    shared: &Shared,
) -> After {
    let now = Instant::now();
    let gate = &shared.inputs.gate;
    let user = match gate.authenticate(cert_user, head.bearer(), now) {
        Ok(u) => u,
        Err(refusal) => {
            let (status, text) = refusal.answer();
            log::debug!("server: {peer}: {} {}: {status} {text}", head.method, head.path);
            return send(tls, Response::text(status, text), &head, leftover);
        }
    };
    let attrs = Attributes {
        verb: request::verb(&head.method),
        subresource: request::subresource(&head.path),
        node: shared.settings.node_name.clone(),
    };
    if let Err(refusal) = gate.authorize(&user, &attrs, now) {
        let (status, text) = refusal.answer();
        log::info!("server: {peer}: {} {} by {}: {status} {text}", head.method, head.path, user.name);
        return send(tls, Response::text(status, text), &head, leftover);
    }
    log::debug!("server: {peer}: {} {} by {}", head.method, head.path, user.name);
    let endpoint = request::endpoint(&head.path);
    let streams = matches!(endpoint, Endpoint::Exec(_) | Endpoint::Attach(_) | Endpoint::PortForward(_));
    // kubelet routes POST to `/stats/summary` too (a body, once a query, is not read).
    let summary_post = endpoint == Endpoint::StatsSummary && head.method == "POST";
    if !streams && !summary_post && !matches!(head.method.as_str(), "GET" | "HEAD") {
        return send(tls, Response::text(405, "405: Method Not Allowed"), &head, leftover);
    }
    let local = |path: &str| {
        let req = http::Request {
            method: "GET".into(),
            path: path.into(),
            query: head.query.clone(),
            close: false,
            http_1_0: false,
        };
        shared.inputs.local.handle(&req)
    };
    match endpoint {
        Endpoint::Healthz => send(tls, local("/healthz"), &head, leftover),
        Endpoint::Pods => send(tls, local("/pods"), &head, leftover),
        Endpoint::Metrics => send(tls, local("/metrics"), &head, leftover),
        Endpoint::MetricsResource => {
            send(tls, stats::resource_metrics_response(&shared.inputs.stats, SystemTime::now()), &head, leftover)
        }
        Endpoint::StatsSummary => {
            let params = head.params();
            let only = stats::only_cpu_and_memory(params.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            send(tls, stats::summary_response(&shared.inputs.stats, only, SystemTime::now()), &head, leftover)
        }
        Endpoint::Configz => send(tls, Response::json(shared.settings.configz.clone()), &head, leftover),
        Endpoint::NotFound => send(tls, Response::text(404, "404 page not found\n"), &head, leftover),
        Endpoint::ContainerLogs(pod) => {
            let follow = head.params().iter().any(|(k, v)| k == "follow" && is_true(v));
            let slot = if follow { stream_slot(shared) } else { None };
            if follow && slot.is_none() {
                return send(tls, too_many(shared), &head, leftover);
            }
            match super::logs::serve(tls, &head, &pod, &*shared.inputs.runtime) {
                Ok(true) => After::KeepAlive(leftover),
                Ok(false) | Err(_) => After::Gone,
            }
        }
        Endpoint::Exec(pod) => stream(tls, head, leftover, Kind::Exec, &pod, shared),
        Endpoint::Attach(pod) => stream(tls, head, leftover, Kind::Attach, &pod, shared),
        Endpoint::PortForward(pod) => stream(tls, head, leftover, Kind::PortForward, &pod, shared),
    }
}

/// Serves a stream in a stream slot; the connection is over after it.
fn stream(tls: &mut Tls, head: Head, leftover: Vec<u8>, kind: Kind, pod: &PodPath, shared: &Shared) -> After {
    let Some(_slot) = stream_slot(shared) else {
        return send(tls, too_many(shared), &head, leftover);
    };
    let req = super::stream::Request {
        head: &head,
        kind,
        pod,
        idle: shared.settings.stream_idle_timeout,
        runtime: &*shared.inputs.runtime,
    };
    super::stream::serve(tls, leftover, &req);
    After::Gone
}

/// The answer past `max_streams`.
fn too_many(shared: &Shared) -> Response {
    let text = format!(
        "too many streams: {} are open, the most this node allows (server.max_streams)\n",
        shared.settings.max_streams
    );
    Response { close: true, ..Response::text(429, text) }
}
