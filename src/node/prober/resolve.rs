//! Where a probe goes: its port (by number or by the container's port name) and its host
//! (an IP literal, or a name looked up on an owned, bounded thread).

use crate::api::{Container, IntOrString};
use crate::base::manager::{Exit, Health, StopTimeout};
use crate::base::manager::{WorkerSet, WorkerSetError};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

/// A probe's port or host could not be resolved (the probe's result says so, with
/// kubelet's words).
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// A named port is not among the container's ports.
    #[error("couldn't find port {name:?} in container")]
    FindPort {
        /// The port name.
        name: String,
    },
    /// The port number is outside 1..65535.
    #[error("invalid port number: {port}")]
    CheckPort {
        /// The number.
        port: i64,
    },
    /// A lookup could not start: its threads are all busy.
    #[error("too many host name lookups in progress (at most {max})")]
    StartLookupBusy {
        /// The bound.
        max: usize,
    },
    /// A lookup could not start: the prober is stopping.
    #[error("the prober is stopping")]
    StartLookupStopping,
    /// A lookup could not start: the OS refused a thread.
    #[error("cannot start a resolver thread")]
    StartLookup {
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The resolver answered with an error (its message is the whole story).
    #[error(transparent)]
    Lookup(std::io::Error),
    /// The resolver answered without an address.
    #[error("no address")]
    LookupEmpty,
    /// The resolver did not answer within the probe's timeout.
    #[error("i/o timeout (resolving the host)")]
    LookupTimeout,
}

/// Resolves a port given by number or by container port name.
pub(super) fn resolve_port(port: &IntOrString, c: &Container) -> Result<u16, ResolveError> {
    let n = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => match c.ports.iter().find(|p| &p.name == name) {
            Some(p) => p.container_port,
            None => name.parse::<i64>().map_err(|_| ResolveError::FindPort { name: name.clone() })?,
        },
    };
    if (1..65536).contains(&n) {
        Ok(n as u16)
    } else {
        Err(ResolveError::CheckPort { port: n })
    }
}

/// Host name lookups (TCP probes to a name) that may run at once, each on its own thread.
pub const MAX_LOOKUP_THREADS: usize = 16;

/// The threads of host name lookups (`fl-probe-dns`): at most `MAX_LOOKUP_THREADS`, so a
/// resolver that hangs cannot pile them up; reaped as they end, stopped with the prober. A
/// lookup cannot be interrupted inside the resolver, so a stop only waits a short while.
#[derive(Clone)]
pub struct Lookups(Arc<WorkerSet>);

impl Lookups {
    /// No lookups yet; threads are registered in `health`.
    pub fn new(health: &Health) -> Lookups {
        Lookups(Arc::new(WorkerSet::new("prober", MAX_LOOKUP_THREADS, health)))
    }

    /// Asks every lookup to stop (they end when the resolver answers), without waiting.
    pub fn signal_stop(&self) {
        self.0.signal_stop();
    }

    /// Waits up to `timeout` for the lookups; returns those still in the resolver.
    pub fn stop(&self, timeout: Duration) -> Vec<StopTimeout> {
        self.0.stop(timeout)
    }

    /// Lookups running now.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no lookup runs.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The first address of `host`: IP literals at once; names through the system resolver on
/// a thread of `lookups`, so a resolver that hangs costs the probe no more than its timeout
/// (the thread ends when the resolver gives up).
pub(super) fn resolve(host: &str, port: u16, timeout: Duration, lookups: &Lookups) -> Result<SocketAddr, ResolveError> {
    if let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let (tx, rx) = crossbeam_channel::bounded(1);
    let name = host.to_string();
    // The stop signal is not watched: getaddrinfo cannot be interrupted.
    let started = lookups.0.spawn("fl-probe-dns", move |_stop| {
        let _ = tx.send((name.as_str(), port).to_socket_addrs().map(|mut a| a.next()));
        Exit::Done
    });
    started.map_err(|e| match e {
        WorkerSetError::Full { max, .. } => ResolveError::StartLookupBusy { max },
        WorkerSetError::Stopping { .. } => ResolveError::StartLookupStopping,
        WorkerSetError::Spawn { source, .. } => ResolveError::StartLookup { source },
    })?;
    match rx.recv_timeout(timeout) {
        Ok(Ok(Some(addr))) => Ok(addr),
        Ok(Ok(None)) => Err(ResolveError::LookupEmpty),
        Ok(Err(e)) => Err(ResolveError::Lookup(e)),
        Err(_) => Err(ResolveError::LookupTimeout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_ports_resolve_from_the_container() {
        let mut c = Container::default();
        c.ports.push(crate::api::ContainerPort { name: "http".into(), container_port: 8080, ..Default::default() });
        assert_eq!(resolve_port(&IntOrString::String("http".into()), &c).unwrap(), 8080);
        assert_eq!(resolve_port(&IntOrString::String("9090".into()), &c).unwrap(), 9090);
        let e = resolve_port(&IntOrString::String("grpc".into()), &c).unwrap_err();
        assert_eq!(e.to_string(), "couldn't find port \"grpc\" in container");
        let e = resolve_port(&IntOrString::Int(0), &c).unwrap_err();
        assert_eq!(e.to_string(), "invalid port number: 0");
    }

    #[test]
    fn a_lookup_runs_on_an_owned_thread_that_is_reaped() {
        let health = Health::default();
        let lookups = Lookups::new(&health);
        let addr = resolve("localhost", 80, Duration::from_secs(5), &lookups).unwrap();
        assert!(addr.ip().is_loopback(), "{addr}");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !lookups.is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(lookups.is_empty(), "the ended lookup was reaped");
        assert!(resolve("10.1.2.3", 80, Duration::from_secs(1), &lookups).is_ok(), "a literal needs no thread");
        assert!(lookups.stop(Duration::from_millis(100)).is_empty());
        let e = resolve("localhost", 80, Duration::from_secs(1), &lookups).unwrap_err();
        assert_eq!(e.to_string(), "the prober is stopping");
        assert!(health.dead().is_empty());
    }

    #[test]
    fn resolve_errors_keep_kubelets_words() {
        assert_eq!(
            ResolveError::StartLookupBusy { max: MAX_LOOKUP_THREADS }.to_string(),
            "too many host name lookups in progress (at most 16)"
        );
        assert_eq!(ResolveError::LookupTimeout.to_string(), "i/o timeout (resolving the host)");
        assert_eq!(ResolveError::LookupEmpty.to_string(), "no address");
        let e = ResolveError::StartLookup { source: std::io::Error::from_raw_os_error(libc::EAGAIN) };
        let chain = crate::base::errors::Chain(&e).to_string();
        assert!(chain.starts_with("cannot start a resolver thread: Resource temporarily unavailable"), "{chain}");
    }
}
