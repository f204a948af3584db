//! One thread per registered plugin: dial its socket, ask its options, answer the Register
//! call, then follow ListAndWatch. When the stream breaks the devices turn unhealthy at
//! once; while the plugin's socket is still there the thread reconnects with back-off
//! (kubelet gives up at the first break and waits for a new registration).

use super::registration::{DialPermit, RegistrationError};
use super::state::Endpoint;
use super::Devices;
use crate::proto::deviceplugin as pb;
use crate::util::Chain;
use futures::channel::oneshot;
use futures::future::{select, Either};
use futures::StreamExt;
use grpcio::{CallOption, RpcStatus, RpcStatusCode};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// First reconnect delay; doubles per attempt.
const RECONNECT_DELAY: Duration = Duration::from_millis(500);
/// Largest ListAndWatch message accepted (a plugin listing too many devices is refused
/// before it can make the agent buffer more).
const MAX_MESSAGE: i32 = 16 << 20;

/// A dialled plugin with its options.
struct Conn {
    client: pb::DevicePluginClient,
    pre_start_required: bool,
    preferred_allocation: bool,
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

fn connect(devices: &Devices, socket: &Path) -> Result<Conn, EndpointError> {
    // Checked before every dial, reconnects included: the socket may have been replaced.
    super::registration::check_socket(socket)?;
    let timeout = devices.settings.dial_timeout;
    let ch = grpcio::ChannelBuilder::new(devices.env.clone())
        .max_receive_message_len(MAX_MESSAGE)
        .connect(&format!("unix:{}", socket.display()));
    if !futures::executor::block_on(ch.wait_for_connected(timeout)) {
        return Err(EndpointError::Connect { socket: socket.into(), timeout });
    }
    let client = pb::DevicePluginClient::new(ch);
    let opts = client
        .get_device_plugin_options_opt(&pb::Empty::new(), CallOption::default().timeout(timeout))
        .map_err(EndpointError::GetOptions)?;
    Ok(Conn {
        client,
        pre_start_required: opts.get_pre_start_required(),
        preferred_allocation: opts.get_get_preferred_allocation_available(),
    })
}

/// Starts the endpoint thread for a registration; it answers `sink`, and gives `permit`
/// back once the plugin is dialled (or could not be).
pub fn spawn(
    devices: Devices,
    resource: String,
    socket: PathBuf,
    sink: grpcio::UnarySink<pb::Empty>,
    permit: DialPermit,
) {
    let spawned = std::thread::Builder::new()
        .name("fl-plugin".into())
        .spawn(move || run(devices, resource, socket, sink, permit));
    if let Err(e) = spawned {
        log::error!("devices: cannot start an endpoint thread: {}", Chain(&e));
    }
}

enum Ended {
    /// Replaced by a newer registration, or the agent is stopping.
    Stopped,
    /// The stream broke.
    Broken(String),
}

fn run(devices: Devices, resource: String, socket: PathBuf, sink: grpcio::UnarySink<pb::Empty>, permit: DialPermit) {
    let dialled = connect(&devices, &socket);
    drop(permit);
    let mut conn = match dialled {
        Ok(c) => c,
        Err(e) => {
            let message = format!("failed to dial device plugin: {}", Chain(&e));
            log::warn!("devices: registration of {resource} failed: {}", crate::logsafe::short(&message));
            let _ = futures::executor::block_on(sink.fail(RpcStatus::with_message(RpcStatusCode::UNKNOWN, message)));
            return;
        }
    };
    let (stop_tx, mut stop_rx) = oneshot::channel();
    let generation = devices.state.lock().register(
        &resource,
        Endpoint {
            generation: 0,
            socket: socket.clone(),
            client: conn.client.clone(),
            pre_start_required: conn.pre_start_required,
            preferred_allocation: conn.preferred_allocation,
            stop: Some(stop_tx),
        },
    );
    log::info!(
        "devices: plugin for {resource} registered at {} (preStartRequired {}, getPreferredAllocationAvailable {})",
        socket.display(),
        conn.pre_start_required,
        conn.preferred_allocation
    );
    if let Err(e) = futures::executor::block_on(sink.success(pb::Empty::new())) {
        log::warn!("devices: could not answer the registration of {resource}: {e}");
    }
    loop {
        let reason = match watch(&devices, &resource, generation, &conn.client, &mut stop_rx) {
            Ended::Stopped => return,
            Ended::Broken(reason) => reason,
        };
        {
            let mut st = devices.state.lock();
            if !st.stream_ended(&resource, generation, Instant::now()) {
                return;
            }
            devices.save_checkpoint(&st);
        }
        devices.changed();
        log::warn!("devices: ListAndWatch of {resource} ended ({reason}); its devices are unhealthy until it is back");
        match reconnect(&devices, &resource, &socket, &mut stop_rx) {
            Some(c) => {
                if !devices.state.lock().reconnected(
                    &resource,
                    generation,
                    c.pre_start_required,
                    c.preferred_allocation,
                ) {
                    return;
                }
                log::info!("devices: reconnected to the plugin for {resource}");
                conn = c;
            }
            None => {
                devices.state.lock().endpoint_gone(&resource, generation);
                log::warn!(
                    "devices: gave up on the plugin for {resource}; it stays in capacity (allocatable 0) for {:?} unless it registers again",
                    devices.settings.endpoint_grace_period
                );
                return;
            }
        }
    }
}

/// Follows one ListAndWatch stream until it ends or the endpoint is stopped.
fn watch(
    devices: &Devices,
    resource: &str,
    generation: u64,
    client: &pb::DevicePluginClient,
    stop: &mut oneshot::Receiver<()>,
) -> Ended {
    let mut stream = match client.list_and_watch_opt(&pb::Empty::new(), CallOption::default()) {
        Ok(s) => s,
        Err(e) => return Ended::Broken(e.to_string()),
    };
    loop {
        let item = match futures::executor::block_on(select(stream.next(), &mut *stop)) {
            Either::Left((item, _)) => Some(item),
            Either::Right(_) => None,
        };
        let Some(item) = item else {
            stream.cancel();
            return Ended::Stopped;
        };
        let resp = match item {
            Some(Ok(resp)) => resp,
            Some(Err(e)) => return Ended::Broken(e.to_string()),
            None => return Ended::Broken("the plugin closed the stream".into()),
        };
        let mut st = devices.state.lock();
        match st.update(resource, generation, resp.get_devices()) {
            Ok(true) => {
                let r = &st.resources[resource];
                log::info!("devices: {resource}: {} healthy, {} unhealthy", r.healthy.len(), r.unhealthy.len());
                devices.save_checkpoint(&st);
                drop(st);
                devices.changed();
            }
            Ok(false) => {
                stream.cancel();
                return Ended::Stopped;
            }
            Err(e) => {
                log::warn!("devices: refusing a ListAndWatch update from the plugin for {resource}: {}", Chain(&e))
            }
        }
    }
}

/// Reconnects while the plugin's socket exists, up to the configured attempts; `None` when
/// giving up or stopped.
fn reconnect(devices: &Devices, resource: &str, socket: &Path, stop: &mut oneshot::Receiver<()>) -> Option<Conn> {
    let mut delay = RECONNECT_DELAY;
    for attempt in 1..=devices.settings.reconnect_attempts {
        if sleep_unless_stopped(delay, stop) {
            return None;
        }
        if !socket.exists() {
            log::info!("devices: socket {} of {resource} is gone; waiting for a new registration", socket.display());
            return None;
        }
        match connect(devices, socket) {
            Ok(c) => return Some(c),
            Err(e) => log::debug!("devices: reconnect {attempt} to {resource} failed: {}", Chain(&e)),
        }
        delay *= 2;
    }
    None
}

/// Sleeps, waking early to return true when the endpoint is stopped.
fn sleep_unless_stopped(d: Duration, stop: &mut oneshot::Receiver<()>) -> bool {
    let until = Instant::now() + d;
    loop {
        if !matches!(stop.try_recv(), Ok(None)) {
            return true;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}
