//! systemd's service notification protocol (`sd_notify(3)`), spoken directly: datagrams of
//! `KEY=VALUE` lines to the Unix socket named by `$NOTIFY_SOCKET`, with no libsystemd.
//! `READY=1` once every manager is up, `WATCHDOG=1` every half `$WATCHDOG_USEC` while every
//! long-lived thread is alive and every manager answers (`Health::unresponsive`), and
//! `STOPPING=1` when the agent begins to stop. Without `$NOTIFY_SOCKET` (OpenRC, a shell)
//! nothing is sent.

use crate::base::manager::{Exit, Health, Worker};
use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The watchdog thread's name.
const THREAD: &str = "fl-watchdog";

/// Where notifications go.
#[derive(Debug)]
pub struct Notifier {
    socket: UnixDatagram,
    addr: SocketAddr,
    /// `$NOTIFY_SOCKET` as given, for messages.
    name: String,
}

/// What systemd asked for in the environment: where to notify, and the watchdog interval.
#[derive(Debug)]
pub struct Notify {
    /// `$NOTIFY_SOCKET`'s socket.
    pub notifier: Option<Arc<Notifier>>,
    /// `$WATCHDOG_USEC`, when it is meant for this process (`$WATCHDOG_PID`, if set, is ours).
    pub watchdog: Option<Duration>,
}

impl Notify {
    /// Reads `$NOTIFY_SOCKET`, `$WATCHDOG_USEC` and `$WATCHDOG_PID`, and takes them out of the
    /// environment so that shims and workloads do not inherit them (a workload speaking the
    /// protocol would speak for the agent). Call it before any thread starts.
    pub fn from_env() -> io::Result<Notify> {
        let socket = std::env::var_os("NOTIFY_SOCKET");
        let usec = std::env::var("WATCHDOG_USEC").ok();
        let pid = std::env::var("WATCHDOG_PID").ok();
        for key in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
            std::env::remove_var(key);
        }
        let notifier = match socket {
            Some(s) => Some(Arc::new(Notifier::connect(&s.to_string_lossy())?)),
            None => None,
        };
        let watchdog = watchdog_interval(usec.as_deref(), pid.as_deref(), std::process::id());
        Ok(Notify { notifier, watchdog })
    }
}

/// The watchdog interval from `$WATCHDOG_USEC` and `$WATCHDOG_PID`, for process `me`: none
/// when unset, 0, unreadable, or meant for another process.
pub fn watchdog_interval(usec: Option<&str>, pid: Option<&str>, me: u32) -> Option<Duration> {
    if pid.is_some_and(|p| p.trim().parse::<u32>().ok() != Some(me)) {
        return None;
    }
    let usec: u64 = usec?.trim().parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec))
}

impl Notifier {
    /// A notifier for `name`: a socket path, or `@name` in the abstract namespace.
    pub fn connect(name: &str) -> io::Result<Notifier> {
        let addr = if let Some(abstract_name) = name.strip_prefix('@') {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(abstract_name.as_bytes())?
        } else if name.starts_with('/') {
            SocketAddr::from_pathname(name)?
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("NOTIFY_SOCKET {name:?}: must be an absolute path or an @abstract name"),
            ));
        };
        let socket = UnixDatagram::unbound()?;
        socket.set_write_timeout(Some(Duration::from_secs(1)))?;
        Ok(Notifier { socket, addr, name: name.into() })
    }

    /// Sends `state` (newline-separated `KEY=VALUE` lines).
    pub fn notify(&self, state: &str) -> io::Result<()> {
        self.socket.send_to_addr(state.as_bytes(), &self.addr).map(drop)
    }

    /// `notify`, with a failure logged: the service manager's view is not worth stopping for.
    pub fn say(&self, state: &str) {
        if let Err(e) = self.notify(state) {
            log::warn!("notify: cannot tell the service manager {state:?} on {}: {e}", self.name);
        }
    }
}

/// Starts `fl-watchdog`: every half `interval` it sends `WATCHDOG=1`, but only while every
/// thread in `health` is alive and every manager answers a ping within a quarter of
/// `interval`. A stuck manager stops the pings, so the service manager restarts the agent.
pub fn spawn_watchdog(notifier: Arc<Notifier>, health: Health, interval: Duration) -> io::Result<Worker> {
    let period = interval / 2;
    let within = interval / 4;
    let own = health.clone();
    Worker::spawn(THREAD, &own, move |stop| {
        let mut silent_for: Vec<String> = Vec::new();
        let mut next = Instant::now();
        loop {
            let bad = health.unresponsive(within);
            if bad.is_empty() {
                notifier.say("WATCHDOG=1");
                if !silent_for.is_empty() {
                    log::info!("notify: every manager answers again; watchdog pings resume");
                }
            } else if bad != silent_for {
                log::error!(
                    "notify: {} not answering; no watchdog ping, so the service manager will restart the agent",
                    bad.join(", ")
                );
            }
            silent_for = bad;
            next += period;
            // Running --stop--> Done; a late round starts at once.
            if stop.sleep(next.saturating_duration_since(Instant::now())) {
                return Exit::Done;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_interval_is_ours_only_when_the_pid_matches() {
        assert_eq!(watchdog_interval(Some("2000000"), None, 7), Some(Duration::from_secs(2)));
        assert_eq!(watchdog_interval(Some("2000000"), Some("7"), 7), Some(Duration::from_secs(2)));
        assert_eq!(watchdog_interval(Some("2000000"), Some("8"), 7), None, "another process's");
        assert_eq!(watchdog_interval(Some("0"), None, 7), None);
        assert_eq!(watchdog_interval(Some("soon"), None, 7), None);
        assert_eq!(watchdog_interval(None, Some("7"), 7), None);
    }

    #[test]
    fn a_relative_notify_socket_is_refused_and_abstract_names_are_taken() {
        let e = Notifier::connect("run/notify").unwrap_err();
        assert!(e.to_string().contains("must be an absolute path"), "{e}");
        assert!(Notifier::connect("@ferrolet-test-notify").is_ok());
    }

    #[test]
    fn notifications_arrive_as_datagrams_and_a_stuck_manager_stops_the_pings() {
        use crate::base::manager::ManagerHandle;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let listener = UnixDatagram::bind(&path).unwrap();
        listener.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        let recv = |within: Duration| -> Vec<String> {
            let mut got = Vec::new();
            let until = Instant::now() + within;
            let mut buf = [0u8; 256];
            while Instant::now() < until {
                if let Ok(n) = listener.recv(&mut buf) {
                    got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                }
            }
            got
        };
        let notifier = Arc::new(Notifier::connect(&path.display().to_string()).unwrap());
        notifier.notify("READY=1").unwrap();
        assert_eq!(recv(Duration::from_millis(150)), ["READY=1"]);

        let health = Health::default();
        let (release, stuck) = crossbeam_channel::unbounded();
        let wedged = crate::base::manager::testing::Wedged { release: stuck };
        let manager = ManagerHandle::spawn("fl-stuck", wedged, &health).unwrap();
        // 400 ms: a ping every 200 ms.
        let dog = spawn_watchdog(notifier.clone(), health.clone(), Duration::from_millis(400)).unwrap();
        let pings = recv(Duration::from_millis(1000));
        // Five rounds; a loaded machine may delay one past the window.
        assert!((3..=7).contains(&pings.len()) && pings.iter().all(|p| p == "WATCHDOG=1"), "{pings:?}");
        manager.sender().send(()).unwrap();
        // A round may have begun before the command: at most one more ping.
        let during = recv(Duration::from_millis(1000));
        assert!(during.len() <= 1, "a stuck manager stops the pings: {during:?}");
        assert!(health.unresponsive(Duration::from_millis(50)).contains(&"fl-stuck".to_string()));
        release.send(()).unwrap();
        assert!(!recv(Duration::from_millis(600)).is_empty(), "pings resume once it answers");
        dog.stop(Duration::from_secs(2)).unwrap();
        recv(Duration::from_millis(150));
        notifier.notify("STOPPING=1").unwrap();
        assert_eq!(recv(Duration::from_millis(150)), ["STOPPING=1"]);
        manager.stop(Duration::from_secs(2)).unwrap();
    }
}
