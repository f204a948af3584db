//! Running one probe: HTTP and HTTPS with a small client of its own (`httpget`), TCP, exec
//! through the runtime, gRPC health with grpcio. Each is a blocking call bounded by the probe's timeout, with kubelet's semantics
//! and messages. A failed probe is a result, not an error.

use super::httpget;
use super::resolve::{resolve, resolve_port};
pub use super::resolve::{Lookups, ResolveError, MAX_LOOKUP_THREADS};
use super::{MAX_OUTPUT, USER_AGENT};
use crate::api::expand::expand;
use crate::api::{Container, HttpGetAction, Probe};
use crate::node::runtime::exec::{ExecProcess, ExecStart};
use crate::node::runtime::{ContainerRuntime, ExecResult};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

/// Same-host redirects followed at most.
const MAX_REDIRECTS: usize = 10;

/// What a probe concluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Healthy.
    Success(String),
    /// Healthy, but worth a `ProbeWarning` (e.g. a redirect to another host).
    Warning(String),
    /// Unhealthy, with the reason.
    Failure(String),
    /// The prober itself failed (not counted, as kubelet throws such results away).
    Error(String),
}

/// Where the probe goes: the pod's address and the container.
#[derive(Clone)]
pub struct Target {
    /// Pod IP (the node address for host-network and process-runtime pods).
    pub pod_ip: String,
    /// The container spec (ports by name, env for exec expansion).
    pub container: Arc<Container>,
    /// The running container instance, for exec.
    pub container_id: String,
}

/// A probe's timeout (`timeoutSeconds`, at least 1 s).
pub fn timeout_of(probe: &Probe) -> Duration {
    Duration::from_secs(probe.timeout_seconds.max(1) as u64)
}

/// Runs `probe` against `target`; TCP probes to a host name look it up on a thread of
/// `lookups`.
pub fn run(
    probe: &Probe,
    target: &Target,
    runtime: &Arc<dyn ContainerRuntime>,
    grpc: &GrpcEnv,
    lookups: &Lookups,
) -> Outcome {
    let timeout = timeout_of(probe);
    if let Some(h) = &probe.http_get {
        return http(h, target, timeout, lookups);
    }
    if let Some(t) = &probe.tcp_socket {
        let host = if t.host.is_empty() { target.pod_ip.clone() } else { t.host.clone() };
        return match resolve_port(&t.port, &target.container) {
            Ok(port) => tcp(&host, port, timeout, lookups),
            Err(e) => Outcome::Error(e.to_string()),
        };
    }
    if let Some(x) = &probe.exec {
        return exec(&x.command, target, runtime, timeout);
    }
    if let Some(g) = &probe.grpc {
        return grpc.check(&target.pod_ip, g.port as u16, g.service.as_deref().unwrap_or(""), timeout);
    }
    Outcome::Error("probe has no handler".into())
}

/// Connects with a timeout; success means connected. The socket closes at once with a
/// 1 s linger, as kubelet's dialer does, to keep TIME_WAIT short at high probe rates.
pub fn tcp(host: &str, port: u16, timeout: Duration, lookups: &Lookups) -> Outcome {
    let deadline = std::time::Instant::now() + timeout;
    let addr = match resolve(host, port, timeout, lookups) {
        Ok(a) => a,
        Err(e) => return Outcome::Failure(format!("dial tcp {host}:{port}: {}", crate::base::errors::Chain(&e))),
    };
    let left = deadline.saturating_duration_since(std::time::Instant::now()).max(Duration::from_millis(1));
    let connected = TcpStream::connect_timeout(&addr, left).map(|s| crate::base::net::set_linger(&s, 1));
    tcp_outcome(addr, connected)
}

/// What a TCP probe's connection attempt to `addr` means, in kubelet's words.
pub(super) fn tcp_outcome(addr: std::net::SocketAddr, connected: std::io::Result<()>) -> Outcome {
    match connected {
        Ok(()) => Outcome::Success(String::new()),
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut || e.kind() == std::io::ErrorKind::WouldBlock => {
            Outcome::Failure(format!("dial tcp {addr}: i/o timeout"))
        }
        Err(e) => Outcome::Failure(format!("dial tcp {addr}: connect: {e}")),
    }
}

pub(super) fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    if authority.starts_with('[') {
        return authority.split(']').next().map_or("", |h| h.trim_start_matches('['));
    }
    authority.split(':').next().unwrap_or("")
}

/// Resolves a `Location` against the URL it came from.
fn resolve_location(base: &str, location: &str) -> String {
    if location.contains("://") {
        return location.to_string();
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("http", base));
    let authority = rest.split('/').next().unwrap_or("");
    if let Some(path) = location.strip_prefix("//") {
        return format!("{scheme}://{path}");
    }
    if location.starts_with('/') {
        return format!("{scheme}://{authority}{location}");
    }
    let dir = rest.rsplit_once('/').map_or(authority, |(d, _)| if d.is_empty() { authority } else { d });
    format!("{scheme}://{dir}/{location}")
}

/// HTTP(S) GET; 2xx and same-host 3xx success, a redirect to another host a warning,
/// anything else `HTTP probe failed with statuscode: N` (never the body). Host names are
/// looked up on a thread of `lookups`.
pub fn http(h: &HttpGetAction, target: &Target, timeout: Duration, lookups: &Lookups) -> Outcome {
    let mut url = match http_url(h, target) {
        Ok(url) => url,
        Err(outcome) => return outcome,
    };
    let deadline = std::time::Instant::now() + timeout;
    let original_host = host_of(&url).to_string();
    let mut redirects = 0;
    loop {
        let resp = match httpget::get(&url, &h.http_headers, deadline, lookups) {
            Ok(r) => r,
            Err(e) => return http_failure(&url, &e),
        };
        match after_response(&url, &original_host, redirects, resp) {
            Next::Done(outcome) => return outcome,
            Next::Follow(next) => {
                url = next;
                redirects += 1;
            }
        }
    }
}

/// The URL an HTTP probe GETs first: its scheme, host (the pod's address unless it names
/// one) and port (by number or by the container's port name), and path.
pub(super) fn http_url(h: &HttpGetAction, target: &Target) -> Result<String, Outcome> {
    let port = resolve_port(&h.port, &target.container).map_err(|e| Outcome::Error(e.to_string()))?;
    let host = if h.host.is_empty() { target.pod_ip.as_str() } else { h.host.as_str() };
    let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host.to_string() };
    let scheme = h.scheme.to_lowercase();
    let scheme = if scheme.is_empty() { "http".to_string() } else { scheme };
    let path = if h.path.starts_with('/') { h.path.clone() } else { format!("/{}", h.path) };
    Ok(format!("{scheme}://{host}:{port}{path}"))
}

/// A GET of `url` that got no response, in kubelet's words.
pub(super) fn http_failure(url: &str, e: &httpget::HttpGetError) -> Outcome {
    Outcome::Failure(format!("Get {url:?}: {}", crate::base::errors::Chain(e)))
}

/// What a probe does after a response.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// The probe's outcome.
    Done(Outcome),
    /// GET this URL (a same-host redirect).
    Follow(String),
}

/// Kubelet's reading of a response to `url`, after `redirects` redirects from a URL on
/// `original_host`: a same-host redirect is followed (at most `MAX_REDIRECTS`), another
/// 3xx is a warning with the body, 2xx a success with it, anything else a failure.
pub(super) fn after_response(url: &str, original_host: &str, redirects: usize, resp: httpget::Response) -> Next {
    let status = resp.status;
    if (300..400).contains(&status) {
        if let Some(loc) = resp.location {
            let next = resolve_location(url, &loc);
            if host_of(&next) == original_host {
                if redirects >= MAX_REDIRECTS {
                    return Next::Done(Outcome::Failure(format!(
                        "Get {next:?}: stopped after {MAX_REDIRECTS} redirects"
                    )));
                }
                return Next::Follow(next);
            }
        }
        return Next::Done(Outcome::Warning(format!("Probe terminated redirects, Response body: {}", resp.body)));
    }
    if (200..300).contains(&status) {
        return Next::Done(Outcome::Success(resp.body));
    }
    Next::Done(Outcome::Failure(format!("HTTP probe failed with statuscode: {status}")))
}

/// An exec probe's command with `$(VAR)` expanded from the container's static env.
pub fn exec_command(command: &[String], target: &Target) -> Vec<String> {
    // Downward API variables are not known here: they expand to nothing in the command.
    let env = crate::api::expand::resolve_env(&target.container.env, &[], |_| Some(String::new()));
    let lookup = |name: &str| env.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    command.iter().map(|c| expand(c, &lookup)).collect()
}

/// Starts an exec probe's command (allowed `timeout`) through the runtime without waiting
/// for it; when nothing runs (the executable is missing, the container is gone) or the
/// runtime ran it to its end (CRI), the outcome at once.
pub fn exec_start(
    cmd: &[String],
    target: &Target,
    runtime: &Arc<dyn ContainerRuntime>,
    timeout: Duration,
) -> Result<ExecProcess, Outcome> {
    match runtime.exec_start(&target.container_id, cmd, timeout) {
        Ok(ExecStart::Running(mut p)) => {
            p.limit_output(MAX_OUTPUT);
            Ok(p)
        }
        Ok(ExecStart::Finished(r)) => Err(exec_outcome(cmd, r)),
        Err(e) => Err(Outcome::Error(crate::base::errors::Chain(&e).to_string())),
    }
}

/// What a finished (or timed-out) exec probe command means: exit 0 is success; output
/// (stdout then stderr) is capped at 10 KiB.
pub fn exec_outcome(cmd: &[String], r: ExecResult) -> Outcome {
    if r.timed_out {
        return Outcome::Failure(format!("command {:?} timed out", cmd.join(" ")));
    }
    let mut out = r.stdout;
    out.truncate(MAX_OUTPUT);
    out.extend_from_slice(&r.stderr[..r.stderr.len().min(MAX_OUTPUT - out.len())]);
    let text = String::from_utf8_lossy(&out).into_owned();
    if r.exit_code == 0 {
        Outcome::Success(text)
    } else {
        Outcome::Failure(text)
    }
}

/// Exec through the runtime, waiting for it on this thread (the prober hands running
/// commands to its exec reaper instead).
pub fn exec(command: &[String], target: &Target, runtime: &Arc<dyn ContainerRuntime>, timeout: Duration) -> Outcome {
    let cmd = exec_command(command, target);
    match exec_start(&cmd, target, runtime, timeout) {
        Ok(p) => match p.wait(timeout) {
            Ok(r) => exec_outcome(&cmd, r),
            Err(e) => Outcome::Error(crate::base::errors::Chain(&e).to_string()),
        },
        Err(outcome) => outcome,
    }
}

/// How much longer than the probe a gRPC connection attempt may last. The probe gives up
/// (and drops its channel) first, so gRPC never starts a second attempt; the attempt still
/// running ends this much later.
const GRPC_CONNECT_GRACE: Duration = Duration::from_millis(200);

/// The grpcio environment probes share (one completion-queue thread for all of them).
pub struct GrpcEnv {
    env: std::sync::OnceLock<Arc<grpcio::Environment>>,
}

impl Default for GrpcEnv {
    fn default() -> Self {
        GrpcEnv { env: std::sync::OnceLock::new() }
    }
}

impl GrpcEnv {
    fn env(&self) -> Arc<grpcio::Environment> {
        // Created on first use: nodes without gRPC probes never start its thread.
        self.env.get_or_init(|| Arc::new(grpcio::EnvBuilder::new().cq_count(1).name_prefix("fl-grpc").build())).clone()
    }

    /// `grpc.health.v1.Health/Check` without TLS; SERVING is success. Connecting and the
    /// call together take at most `timeout`, and the connection ends with the probe: the
    /// channel has its own subchannel (not gRPC's process-wide pool, which would keep it
    /// connecting after the channel is dropped) and a connect deadline of `timeout` (gRPC's
    /// default is 20 s, during which a server that accepts but never speaks HTTP/2 kept a
    /// socket open).
    pub fn check(&self, host: &str, port: u16, service: &str, timeout: Duration) -> Outcome {
        use crate::proto::health::{health_check_response::ServingStatus as Status, HealthCheckRequest, HealthClient};
        let deadline = std::time::Instant::now() + timeout;
        let addr = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
        let connect = timeout + GRPC_CONNECT_GRACE;
        let millis = connect.as_millis().min(i32::MAX as u128) as i32;
        let ch = grpcio::ChannelBuilder::new(self.env())
            .primary_user_agent(USER_AGENT)
            .use_local_subchannel_pool(true)
            .initial_reconnect_backoff(connect)
            .max_reconnect_backoff(connect)
            // The connect deadline is max(backoff, this): gRPC has no builder method for it.
            .raw_cfg_int(c"grpc.min_reconnect_backoff_ms".into(), millis)
            .connect(&addr);
        if !futures::executor::block_on(ch.wait_for_connected(timeout)) {
            return Outcome::Failure(format!(
                "timeout: failed to connect service {addr:?} within {}s",
                timeout.as_secs()
            ));
        }
        let client = HealthClient::new(ch);
        let mut req = HealthCheckRequest::new();
        req.set_service(service.into());
        // What is left of the probe's timeout, not a second timeout after connecting.
        let left = deadline.saturating_duration_since(std::time::Instant::now()).max(Duration::from_millis(1));
        let opt = grpcio::CallOption::default().timeout(left);
        match client.check_opt(&req, opt) {
            Ok(resp) if resp.status() == Status::SERVING => Outcome::Success("service healthy".into()),
            Ok(resp) => {
                Outcome::Failure(format!("service unhealthy (responded with {:?})", format!("{:?}", resp.status())))
            }
            Err(grpcio::Error::RpcFailure(s)) if s.code() == grpcio::RpcStatusCode::UNIMPLEMENTED => Outcome::Failure(
                "this server does not implement the grpc health protocol (grpc.health.v1.Health)".into(),
            ),
            Err(grpcio::Error::RpcFailure(s)) if s.code() == grpcio::RpcStatusCode::DEADLINE_EXCEEDED => {
                Outcome::Failure(format!("timeout: health rpc did not complete within {}s", timeout.as_secs()))
            }
            Err(e) => Outcome::Failure(format!("rpc error: {}", crate::base::errors::Chain(&e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_resolve_like_a_browser() {
        assert_eq!(resolve_location("http://a:8080/x/y", "/z"), "http://a:8080/z");
        assert_eq!(resolve_location("http://a:8080/x/y", "z"), "http://a:8080/x/z");
        assert_eq!(resolve_location("http://a:8080/x", "http://b/q"), "http://b/q");
        assert_eq!(resolve_location("https://a/x", "//c/d"), "https://c/d");
        assert_eq!(host_of("http://u@h.example:80/p"), "h.example");
        assert_eq!(host_of("http://[::1]:80/p"), "::1");
    }

    #[test]
    fn responses_are_read_as_kubelet_reads_them() {
        use Outcome::*;
        let url = "https://a:8443/x/y";
        let failure = |s: &str| Next::Done(Failure(s.into()));
        let cases = [
            ("2xx: success with the body", 204, None, 0, Next::Done(Success("body".into()))),
            ("same-host redirect", 302, Some("/z"), 0, Next::Follow("https://a:8443/z".into())),
            ("same host, other port and scheme", 301, Some("http://a:80/"), 9, Next::Follow("http://a:80/".into())),
            (
                "the 11th redirect",
                307,
                Some("z"),
                10,
                failure("Get \"https://a:8443/x/z\": stopped after 10 redirects"),
            ),
            (
                "another host: a warning",
                302,
                Some("https://b/"),
                0,
                Next::Done(Warning("Probe terminated redirects, Response body: body".into())),
            ),
            (
                "3xx without Location: a warning",
                304,
                None,
                0,
                Next::Done(Warning("Probe terminated redirects, Response body: body".into())),
            ),
            ("4xx: failure without the body", 404, None, 0, failure("HTTP probe failed with statuscode: 404")),
            ("1xx that ends the exchange", 101, None, 0, failure("HTTP probe failed with statuscode: 101")),
            ("5xx with a Location", 503, Some("/z"), 0, failure("HTTP probe failed with statuscode: 503")),
        ];
        for (what, status, location, redirects, want) in cases {
            let resp = httpget::Response { status, location: location.map(String::from), body: "body".into() };
            assert_eq!(after_response(url, "a", redirects, resp), want, "{what}");
        }
    }
}
