//! One thread (`fl-plugin`) per registration: dial the plugin, ask its options, answer the
//! Register call, then follow ListAndWatch. It owns no state: it tells the device manager
//! what happened (`EndpointEvent`, each with its registration's generation, so a replaced
//! endpoint's news change nothing) and the manager decides. When the stream breaks the
//! devices turn unhealthy at once; while the plugin's socket is still there the thread
//! reconnects with back-off (kubelet gives up at the first break and waits for a new
//! registration). It ends with `Exit::Done` when it gives up, when its plugin could not be
//! dialled, and when it is stopped (replaced, or the agent stops): a plugin that went away
//! is not an agent failure.

use super::registration::{check_socket, PluginRegistration, RegistrationError};
use super::state::Endpoint;
use crate::base::errors::Chain;
use crate::base::manager::{CallStop, Exit, Publisher, WorkerId, WorkerSet, WorkerSetError};
use crate::proto::deviceplugin as pb;
use futures::StreamExt;
use grpcio::{CallOption, RpcStatus, RpcStatusCode};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// First reconnect delay; doubles per attempt.
const RECONNECT_DELAY: Duration = Duration::from_millis(500);
/// Largest ListAndWatch message accepted (a plugin listing too many devices is refused
/// before it can make the agent buffer more).
const MAX_MESSAGE: i32 = 16 << 20;

/// What an endpoint thread needs to know.
#[derive(Clone)]
pub struct EndpointConfig {
    /// The grpcio environment shared with the registration server.
    pub env: Arc<grpcio::Environment>,
    /// Dialling a plugin, and GetDevicePluginOptions.
    pub dial_timeout: Duration,
    /// Reconnect attempts after a broken ListAndWatch stream.
    pub reconnect_attempts: u32,
    /// How long a stopped resource stays in capacity (for the log).
    pub grace_period: Duration,
}

/// What an endpoint thread tells the device manager.
pub enum EndpointEvent {
    /// The plugin was dialled; its endpoint replaces the resource's earlier one.
    Registered {
        /// Resource name.
        resource: String,
        /// This registration's id.
        generation: u64,
        /// The connection and the plugin's options.
        endpoint: Endpoint,
    },
    /// A ListAndWatch answer.
    DevicesChanged {
        /// Resource name.
        resource: String,
        /// This registration's id.
        generation: u64,
        /// The devices as listed.
        devices: Vec<pb::Device>,
    },
    /// The stream broke; the thread tries to reconnect.
    StreamEnded {
        /// Resource name.
        resource: String,
        /// This registration's id.
        generation: u64,
        /// Why, for the log.
        reason: String,
    },
    /// Reconnected after a broken stream.
    Reconnected {
        /// Resource name.
        resource: String,
        /// This registration's id.
        generation: u64,
        /// `GetDevicePluginOptions` again.
        pre_start_required: bool,
        /// `GetDevicePluginOptions` again.
        preferred_allocation: bool,
    },
    /// The thread is ending.
    EndpointEnded {
        /// Resource name.
        resource: String,
        /// This registration's id.
        generation: u64,
    },
}

impl std::fmt::Debug for EndpointEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (what, resource, generation) = match self {
            EndpointEvent::Registered { resource, generation, .. } => ("Registered", resource, generation),
            EndpointEvent::DevicesChanged { resource, generation, .. } => ("DevicesChanged", resource, generation),
            EndpointEvent::StreamEnded { resource, generation, .. } => ("StreamEnded", resource, generation),
            EndpointEvent::Reconnected { resource, generation, .. } => ("Reconnected", resource, generation),
            EndpointEvent::EndpointEnded { resource, generation } => ("EndpointEnded", resource, generation),
        };
        write!(f, "{what} {{ resource: {resource:?}, generation: {generation} }}")
    }
}

/// Why a plugin could not be dialled.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The socket path is not a socket in the plugin directory.
    #[error(transparent)]
    CheckSocket(#[from] RegistrationError),
    /// The plugin did not accept the connection in time.
    #[error("cannot connect to {} within {timeout:?}", socket.display())]
    Connect {
        /// The plugin's socket.
        socket: PathBuf,
        /// `devices.dial_timeout`.
        timeout: Duration,
    },
    /// The plugin's GetDevicePluginOptions failed.
    #[error("GetDevicePluginOptions")]
    GetOptions(#[source] grpcio::Error),
}

/// Why a ListAndWatch stream ended.
#[derive(Debug, thiserror::Error)]
enum StreamError {
    /// The call failed or broke.
    #[error(transparent)]
    Call(#[from] grpcio::Error),
    /// The plugin ended the stream.
    #[error("the plugin closed the stream")]
    Closed,
}

/// A dialled plugin with its options.
struct Conn {
    client: pb::DevicePluginClient,
    pre_start_required: bool,
    preferred_allocation: bool,
}

/// Dials the plugin; `None` when stopped meanwhile.
fn connect(cfg: &EndpointConfig, socket: &Path, stop: &mut CallStop) -> Option<Result<Conn, EndpointError>> {
    // Checked before every dial, reconnects included: the socket may have been replaced.
    if let Err(e) = check_socket(socket) {
        return Some(Err(e.into()));
    }
    let timeout = cfg.dial_timeout;
    let ch = grpcio::ChannelBuilder::new(cfg.env.clone())
        .max_receive_message_len(MAX_MESSAGE)
        .connect(&format!("unix:{}", socket.display()));
    if !stop.run(Box::pin(ch.wait_for_connected(timeout)))? {
        return Some(Err(EndpointError::Connect { socket: socket.into(), timeout }));
    }
    let client = pb::DevicePluginClient::new(ch);
    let opt = CallOption::default().timeout(timeout);
    let mut call = match client.get_device_plugin_options_async_opt(&pb::Empty::new(), opt) {
        Ok(call) => call,
        Err(e) => return Some(Err(EndpointError::GetOptions(e))),
    };
    let Some(answer) = stop.run(&mut call) else {
        call.cancel();
        return None;
    };
    Some(answer.map_err(EndpointError::GetOptions).map(|opts| Conn {
        client,
        pre_start_required: opts.pre_start_required(),
        preferred_allocation: opts.get_preferred_allocation_available(),
    }))
}

/// Starts the endpoint thread for registration `generation`.
pub fn spawn(
    threads: &WorkerSet,
    generation: u64,
    registration: PluginRegistration,
    cfg: EndpointConfig,
    events: Publisher<EndpointEvent>,
) -> Result<WorkerId, WorkerSetError> {
    threads.spawn_cancellable("fl-plugin", move |stop| {
        let resource = registration.resource.clone();
        run(&cfg, generation, registration, &events, stop);
        events.publish(EndpointEvent::EndpointEnded { resource, generation });
        Exit::Done
    })
}

fn run(
    cfg: &EndpointConfig,
    generation: u64,
    registration: PluginRegistration,
    events: &Publisher<EndpointEvent>,
    mut stop: CallStop,
) {
    let PluginRegistration { resource, socket, sink, permit } = registration;
    let dialled = connect(cfg, &socket, &mut stop);
    drop(permit);
    let mut conn = match dialled {
        // Stopped while dialling: the server is going away and cancels the call.
        None => return,
        Some(Ok(c)) => c,
        Some(Err(e)) => {
            let message = format!("failed to dial device plugin: {}", Chain(&e));
            log::warn!("devices: registration of {resource} failed: {}", crate::base::logsafe::short(&message));
            let _ = futures::executor::block_on(sink.fail(RpcStatus::with_message(RpcStatusCode::UNKNOWN, message)));
            return;
        }
    };
    log::info!(
        "devices: plugin for {resource} registered at {} (preStartRequired {}, getPreferredAllocationAvailable {})",
        socket.display(),
        conn.pre_start_required,
        conn.preferred_allocation
    );
    events.publish(EndpointEvent::Registered {
        resource: resource.clone(),
        generation,
        endpoint: Endpoint {
            socket: socket.clone(),
            client: conn.client.clone(),
            pre_start_required: conn.pre_start_required,
            preferred_allocation: conn.preferred_allocation,
        },
    });
    if let Err(e) = futures::executor::block_on(sink.success(pb::Empty::new())) {
        log::warn!("devices: could not answer the registration of {resource}: {}", Chain(&e));
    }
    loop {
        // Connected --stream broke--> Reconnecting --dialled--> Connected; any --stop--> end.
        let reason = match watch(&resource, generation, &conn.client, events, &mut stop) {
            None => return,
            Some(reason) => reason,
        };
        log::warn!(
            "devices: ListAndWatch of {resource} ended ({}); its devices are unhealthy until it is back",
            Chain(&reason)
        );
        let reason = Chain(&reason).to_string();
        events.publish(EndpointEvent::StreamEnded { resource: resource.clone(), generation, reason });
        match reconnect(cfg, &resource, &socket, &mut stop) {
            Some(c) => {
                log::info!("devices: reconnected to the plugin for {resource}");
                events.publish(EndpointEvent::Reconnected {
                    resource: resource.clone(),
                    generation,
                    pre_start_required: c.pre_start_required,
                    preferred_allocation: c.preferred_allocation,
                });
                conn = c;
            }
            None if stop.is_stopped() => return,
            None => {
                // Reconnecting --gave up--> end (the farewell tells the manager).
                log::warn!(
                    "devices: gave up on the plugin for {resource}; it stays in capacity (allocatable 0) for {:?} unless it registers again",
                    cfg.grace_period
                );
                return;
            }
        }
    }
}

/// Follows one ListAndWatch stream until it ends (why) or the thread is stopped (`None`).
fn watch(
    resource: &str,
    generation: u64,
    client: &pb::DevicePluginClient,
    events: &Publisher<EndpointEvent>,
    stop: &mut CallStop,
) -> Option<StreamError> {
    let mut stream = match client.list_and_watch_opt(&pb::Empty::new(), CallOption::default()) {
        Ok(s) => s,
        Err(e) => return Some(e.into()),
    };
    loop {
        let Some(item) = stop.run(stream.next()) else {
            stream.cancel();
            return None;
        };
        match item {
            Some(Ok(mut resp)) => events.publish(EndpointEvent::DevicesChanged {
                resource: resource.into(),
                generation,
                devices: resp.take_devices(),
            }),
            Some(Err(e)) => return Some(e.into()),
            None => return Some(StreamError::Closed),
        }
    }
}

/// Reconnects while the plugin's socket exists, up to the configured attempts; `None` when
/// giving up or stopped.
fn reconnect(cfg: &EndpointConfig, resource: &str, socket: &Path, stop: &mut CallStop) -> Option<Conn> {
    let mut delay = RECONNECT_DELAY;
    for attempt in 1..=cfg.reconnect_attempts {
        if stop.sleep(delay) {
            return None;
        }
        if !socket.exists() {
            log::info!("devices: socket {} of {resource} is gone; waiting for a new registration", socket.display());
            return None;
        }
        match connect(cfg, socket, stop)? {
            Ok(c) => return Some(c),
            Err(e) => log::debug!("devices: reconnect {attempt} to {resource} failed: {}", Chain(&e)),
        }
        delay *= 2;
    }
    None
}

/// One value of `StreamError`, named by its type (for the crate's test that no error
/// message says its cause twice).
#[cfg(test)]
pub(crate) fn error_samples() -> Vec<(&'static str, Box<dyn std::error::Error>)> {
    vec![(std::any::type_name::<StreamError>(), Box::new(StreamError::Closed))]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::manager::Health;
    use crossbeam_channel::unbounded;

    fn config(dial_timeout: Duration) -> EndpointConfig {
        EndpointConfig {
            env: Arc::new(grpcio::EnvBuilder::new().cq_count(1).build()),
            dial_timeout,
            reconnect_attempts: 1,
            grace_period: Duration::from_secs(300),
        }
    }

    #[test]
    fn a_dial_in_progress_ends_at_once_when_stopped() {
        let dir = tempfile::tempdir().unwrap();
        // Accepts connections and never speaks gRPC: the dial would wait its whole timeout.
        let socket = dir.path().join("silent.sock");
        let _silent = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        std::fs::write(dir.path().join("file.sock"), "").unwrap();
        let health = Health::default();
        let (tx, rx) = unbounded();
        let cfg = config(Duration::from_secs(30));
        let file = dir.path().join("file.sock");
        let set = WorkerSet::new("device manager", 1, &health);
        set.spawn_cancellable("fl-plugin", move |mut stop| {
            let not_a_socket = connect(&cfg, &file, &mut stop).map(|r| r.err().map(|e| e.to_string()));
            let _ = tx.send(not_a_socket);
            let _ = tx.send(connect(&cfg, &socket, &mut stop).map(|r| r.err().map(|e| e.to_string())));
            Exit::Done
        })
        .unwrap();
        let first = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(first.unwrap().unwrap().ends_with("file.sock is not a socket"));
        std::thread::sleep(Duration::from_millis(200));
        // The dial would wait 30 s: the stop ends it within the 5 s join.
        assert!(set.stop(Duration::from_secs(5)).is_empty());
        assert_eq!(rx.recv_timeout(Duration::from_secs(1)).unwrap(), None, "stopped, not failed");
        assert!(health.alive().is_empty() && health.dead().is_empty());
    }
}
