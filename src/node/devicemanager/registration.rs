//! The Registration service on `<plugin dir>/kubelet.sock`: checks a plugin's request and
//! hands it to the device manager (`PluginRegistration`), which starts the endpoint thread
//! that dials the plugin and answers the call. The handler runs on gRPC's threads and
//! touches no state: it reads the published view and takes a dial slot.

use super::view::Devices;
use crate::api::validation::{is_extended_resource, is_qualified_name};
use crate::base::errors::Chain;
use crate::base::logsafe::short;
use crate::base::manager::Publisher;
use crate::node::cm::ownership::{LockFile, OwnershipError};
use crate::proto::deviceplugin as pb;
use futures::FutureExt;
use grpcio::{RpcStatus, RpcStatusCode};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub use super::state::MAX_RESOURCES;

/// The only API version plugins may speak.
pub const VERSION: &str = "v1beta1";
/// The agent's socket name in the plugin directory.
pub const SOCKET: &str = "kubelet.sock";
/// Most registrations dialled at once. Each one holds a thread for up to
/// `devices.dial_timeout`; the ones beyond are answered at once with RESOURCE_EXHAUSTED
/// (the plugin retries, as it does after any failed registration).
pub const MAX_CONCURRENT_DIALS: usize = 8;

/// Why a registration was refused, or the registration server could not start. The
/// refusals' messages are kubelet's (plugins and the README quote them).
#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    /// The plugin speaks another API version.
    #[error("requested API version {version:?} is not supported by kubelet. Supported version is [\"{VERSION}\"]")]
    CheckVersion {
        /// The version asked for.
        version: String,
    },
    /// The resource name is not an extended resource name.
    #[error("the ResourceName {name:?} is invalid")]
    CheckResourceName {
        /// The name given.
        name: String,
    },
    /// The endpoint is not the plain file name of a socket in the plugin directory.
    #[error(
        "the endpoint {endpoint:?} is invalid: must be the file name of a socket in {} (no '/', not '..' or {SOCKET})",
        dir.display()
    )]
    CheckEndpoint {
        /// The endpoint given.
        endpoint: String,
        /// The plugin directory.
        dir: PathBuf,
    },
    /// The plugin's socket path is a symbolic link.
    #[error("{} is a symbolic link; a plugin must create its socket in the plugin directory itself", path.display())]
    SocketIsSymlink {
        /// The socket path.
        path: PathBuf,
    },
    /// The plugin's socket path is another kind of file.
    #[error("{} is not a socket", path.display())]
    NotASocket {
        /// The socket path.
        path: PathBuf,
    },
    /// The plugin's socket path cannot be looked at.
    #[error("cannot use {}", path.display())]
    StatSocket {
        /// The socket path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A new resource beyond `MAX_RESOURCES`.
    #[error("too many device plugin resources (at most {MAX_RESOURCES}); {name:?} is refused")]
    TooManyResources {
        /// The new resource.
        name: String,
    },
    /// Every dial slot is in use.
    #[error(
        "too many device plugin registrations in progress (at most {MAX_CONCURRENT_DIALS} are dialled at once); register again later"
    )]
    TooManyDials,
    /// The plugin directory could not be created or cleaned.
    #[error("cannot prepare {}", dir.display())]
    PrepareDir {
        /// The plugin directory.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// gRPC could not build the server.
    #[error("cannot build the registration server")]
    BuildServer(#[source] grpcio::Error),
    /// gRPC could not listen on `kubelet.sock`.
    #[error("cannot listen on {}", socket.display())]
    Listen {
        /// `<plugin dir>/kubelet.sock`.
        socket: PathBuf,
        /// The cause.
        #[source]
        source: grpcio::Error,
    },
}

/// Checks a registration; returns the plugin's socket path, or kubelet's message.
pub fn validate(req: &pb::RegisterRequest, dir: &Path) -> Result<PathBuf, RegistrationError> {
    if req.version() != VERSION {
        return Err(RegistrationError::CheckVersion { version: req.version().into() });
    }
    let name = req.resource_name();
    if !is_extended_resource(name) || !is_qualified_name(&format!("requests.{name}")) {
        return Err(RegistrationError::CheckResourceName { name: name.into() });
    }
    // kubelet joins whatever it is given to the directory; ferrolet dials only sockets in it.
    let endpoint = req.endpoint();
    let plain = !endpoint.is_empty()
        && endpoint != "."
        && endpoint != ".."
        && endpoint != SOCKET
        && !endpoint.contains('/')
        && !endpoint.contains('\0');
    if !plain {
        return Err(RegistrationError::CheckEndpoint { endpoint: endpoint.into(), dir: dir.into() });
    }
    Ok(dir.join(endpoint))
}

/// Checks that `socket` is a Unix socket itself, right before it is dialled: a symbolic
/// link (which could lead anywhere, even to another program's socket outside the plugin
/// directory) or another kind of file is refused, without following it.
pub fn check_socket(socket: &Path) -> Result<(), RegistrationError> {
    match std::fs::symlink_metadata(socket) {
        Ok(m) if m.file_type().is_symlink() => Err(RegistrationError::SocketIsSymlink { path: socket.into() }),
        Ok(m) if !m.file_type().is_socket() => Err(RegistrationError::NotASocket { path: socket.into() }),
        Ok(_) => Ok(()),
        Err(source) => Err(RegistrationError::StatSocket { path: socket.into(), source }),
    }
}

/// The lock file in the plugin directory, held by the agent that serves `kubelet.sock` there.
pub const LOCK_FILE: &str = "ferrolet.lock";

/// Claims the plugin directory for this agent before anything in it is touched: locks
/// `<dir>/ferrolet.lock` (refused while another ferrolet holds it), then checks that no
/// other process answers on `<dir>/kubelet.sock` (a kubelet takes no lock of ours).
pub fn claim_dir(dir: &Path) -> Result<LockFile, OwnershipError> {
    std::fs::create_dir_all(dir).map_err(|source| OwnershipError::CreateLock { path: dir.join(LOCK_FILE), source })?;
    let lock = LockFile::acquire(&dir.join(LOCK_FILE), &format!("device plugin directory {}", dir.display()));
    if let Err(OwnershipError::Locked { .. }) = lock {
        return lock;
    }
    // Checked even when the lock file could not be created (the agent then goes on
    // without it): a live kubelet.sock must never be taken over.
    let socket = dir.join(SOCKET);
    let is_socket = std::fs::symlink_metadata(&socket).is_ok_and(|m| m.file_type().is_socket());
    if is_socket && listened_on(&socket) {
        return Err(OwnershipError::Served { dir: dir.into(), socket });
    }
    lock
}

/// Whether a process listens on the Unix socket `path`, found without blocking: a plain
/// connect to a listener whose backlog is full (a hung kubelet) would wait for ever.
fn listened_on(path: &Path) -> bool {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data, for which all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        return false; // no socket can be bound at such a path
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: socket(2) takes no pointers; the fd is owned below.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return false;
    }
    // SAFETY: `fd` was just created and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes that outlives the call.
    let r = unsafe { libc::connect(fd.as_raw_fd(), (&addr as *const libc::sockaddr_un).cast(), len) };
    // EAGAIN: a listener whose backlog is full, which is still someone's server.
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN)
}

/// Creates the plugin directory (0750) and removes the sockets left in it: plugins watch
/// for their socket to disappear and then register again. Other files (the checkpoint)
/// stay.
pub fn prepare_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o750))?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_socket() {
            log::info!("devices: removing stale socket {}", entry.path().display());
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Refuses a new resource beyond `MAX_RESOURCES` (a known one may always register again).
fn too_many_resources((known, count): (bool, usize), name: &str) -> Option<RegistrationError> {
    (!known && count >= MAX_RESOURCES).then(|| RegistrationError::TooManyResources { name: name.into() })
}

/// One of the `MAX_CONCURRENT_DIALS` slots for dialling a plugin; freed when dropped.
pub struct DialPermit {
    dialling: Arc<AtomicUsize>,
}

impl DialPermit {
    /// Takes a slot, or `None` when all are in use.
    fn take(dialling: &Arc<AtomicUsize>) -> Option<DialPermit> {
        dialling
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < MAX_CONCURRENT_DIALS).then_some(n + 1))
            .ok()
            .map(|_| DialPermit { dialling: dialling.clone() })
    }
}

impl Drop for DialPermit {
    fn drop(&mut self) {
        self.dialling.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A checked registration for the device manager: it starts the endpoint thread, which
/// dials the plugin, gives the slot back and answers `sink`.
pub struct PluginRegistration {
    /// Resource name.
    pub resource: String,
    /// The plugin's socket (in the plugin directory).
    pub socket: PathBuf,
    /// The pending Register call.
    pub sink: grpcio::UnarySink<pb::Empty>,
    /// The dial slot, held until the plugin is dialled (or could not be).
    pub permit: DialPermit,
}

impl std::fmt::Debug for PluginRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginRegistration").field("resource", &self.resource).field("socket", &self.socket).finish()
    }
}

#[derive(Clone)]
struct Registration {
    devices: Devices,
    requests: Publisher<PluginRegistration>,
    dialling: Arc<AtomicUsize>,
}

impl pb::Registration for Registration {
    fn register(&mut self, ctx: grpcio::RpcContext, req: pb::RegisterRequest, sink: grpcio::UnarySink<pb::Empty>) {
        let resource = req.resource_name().to_string();
        log::info!(
            "devices: plugin registering: resource \"{}\", endpoint \"{}\", version \"{}\"",
            short(&resource),
            short(req.endpoint()),
            short(req.version())
        );
        let refused = |sink: grpcio::UnarySink<pb::Empty>, code, error: RegistrationError| {
            let message = Chain(&error).to_string();
            log::warn!("devices: registration refused: {}", short(&message));
            ctx.spawn(sink.fail(RpcStatus::with_message(code, message)).map(|_| ()));
        };
        let socket = match validate(&req, self.devices.dir()) {
            Ok(socket) => socket,
            Err(error) => return refused(sink, RpcStatusCode::UNKNOWN, error),
        };
        // Counted once the name is known to be valid (short), in a bounded set of series.
        self.devices.metrics().registered(&resource);
        if let Some(error) = too_many_resources(self.devices.known_resources(&resource), &resource) {
            return refused(sink, RpcStatusCode::RESOURCE_EXHAUSTED, error);
        }
        match DialPermit::take(&self.dialling) {
            Some(permit) => self.requests.publish(PluginRegistration { resource, socket, sink, permit }),
            None => refused(sink, RpcStatusCode::RESOURCE_EXHAUSTED, RegistrationError::TooManyDials),
        }
    }
}

/// Starts the gRPC server for the Registration service on `<dir>/kubelet.sock`; checked
/// registrations go to `requests`.
pub fn serve(
    env: Arc<grpcio::Environment>,
    devices: &Devices,
    requests: Publisher<PluginRegistration>,
) -> Result<grpcio::Server, RegistrationError> {
    let dir = devices.dir();
    prepare_dir(dir).map_err(|source| RegistrationError::PrepareDir { dir: dir.into(), source })?;
    let socket = dir.join(SOCKET);
    let service = pb::create_registration(Registration {
        devices: devices.clone(),
        requests,
        dialling: Arc::new(AtomicUsize::new(0)),
    });
    let mut server =
        grpcio::ServerBuilder::new(env).register_service(service).build().map_err(RegistrationError::BuildServer)?;
    server
        .add_listening_port(format!("unix:{}", socket.display()), grpcio::ServerCredentials::insecure())
        .map_err(|source| RegistrationError::Listen { socket: socket.clone(), source })?;
    server.start();
    log::info!("devices: registration server listening on {}", socket.display());
    Ok(server)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(e: RegistrationError) -> String {
        Chain(&e).to_string()
    }

    fn req(version: &str, endpoint: &str, name: &str) -> pb::RegisterRequest {
        let mut r = pb::RegisterRequest::new();
        r.set_version(version.into());
        r.set_endpoint(endpoint.into());
        r.set_resource_name(name.into());
        r
    }

    #[test]
    fn registrations_are_checked_like_kubelet_and_endpoints_stay_inside() {
        let dir = Path::new("/var/lib/kubelet/device-plugins");
        assert_eq!(validate(&req("v1beta1", "dev.sock", "example.com/dev"), dir).unwrap(), dir.join("dev.sock"));
        assert!(matches!(
            validate(&req("v1", "dev.sock", "example.com/dev"), dir),
            Err(RegistrationError::CheckVersion { version }) if version == "v1"
        ));
        assert_eq!(
            message(validate(&req("v1", "dev.sock", "example.com/dev"), dir).unwrap_err()),
            "requested API version \"v1\" is not supported by kubelet. Supported version is [\"v1beta1\"]"
        );
        for bad in [
            "dev",
            "kubernetes.io/dev",
            "foo.kubernetes.io/dev",
            "requests.example.com/dev",
            "example.com/-x",
            "Example_com/dev",
        ] {
            assert_eq!(
                message(validate(&req("v1beta1", "dev.sock", bad), dir).unwrap_err()),
                format!("the ResourceName {bad:?} is invalid")
            );
        }
        for bad in ["../x", "/tmp/x.sock", "a/b", "..", "", "kubelet.sock"] {
            let e = message(validate(&req("v1beta1", bad, "example.com/dev"), dir).unwrap_err());
            assert!(e.starts_with(&format!("the endpoint {bad:?} is invalid")), "{e}");
        }
    }

    #[test]
    fn only_a_socket_itself_is_dialled_never_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let _l = std::os::unix::net::UnixListener::bind(outside.path().join("other.sock")).unwrap();
        let _m = std::os::unix::net::UnixListener::bind(dir.path().join("mine.sock")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("other.sock"), dir.path().join("link.sock")).unwrap();
        std::fs::write(dir.path().join("file.sock"), "").unwrap();
        check_socket(&dir.path().join("mine.sock")).unwrap();
        assert!(matches!(check_socket(&dir.path().join("link.sock")), Err(RegistrationError::SocketIsSymlink { .. })));
        let e = message(check_socket(&dir.path().join("link.sock")).unwrap_err());
        assert!(
            e.ends_with("link.sock is a symbolic link; a plugin must create its socket in the plugin directory itself"),
            "{e}"
        );
        assert!(message(check_socket(&dir.path().join("file.sock")).unwrap_err()).ends_with("is not a socket"));
        let e = message(check_socket(&dir.path().join("none.sock")).unwrap_err());
        assert!(e.contains("none.sock: No such file"), "{e}");
    }

    #[test]
    fn new_resources_are_bounded_and_known_ones_may_register_again() {
        assert!(too_many_resources((true, MAX_RESOURCES), "example.com/r0").is_none());
        let e = too_many_resources((false, MAX_RESOURCES), "example.com/new").unwrap().to_string();
        assert_eq!(
            e,
            format!("too many device plugin resources (at most {MAX_RESOURCES}); \"example.com/new\" is refused")
        );
        assert!(too_many_resources((false, MAX_RESOURCES - 1), "example.com/new").is_none());
    }

    #[test]
    fn dial_slots_are_bounded_and_given_back() {
        let dialling = Arc::new(AtomicUsize::new(0));
        let held: Vec<DialPermit> = (0..MAX_CONCURRENT_DIALS).map_while(|_| DialPermit::take(&dialling)).collect();
        assert_eq!(held.len(), MAX_CONCURRENT_DIALS);
        assert!(DialPermit::take(&dialling).is_none());
        drop(held);
        assert_eq!(dialling.load(Ordering::Acquire), 0);
        assert!(DialPermit::take(&dialling).is_some());
    }

    #[test]
    fn a_plugin_dir_is_claimed_by_one_agent_and_never_beside_a_live_kubelet_sock() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("device-plugins");
        let first = claim_dir(&d).unwrap();
        let e = claim_dir(&d).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("device plugin directory {} is in use by another ferrolet", d.display())),
            "{e}"
        );
        drop(first);
        // A stale kubelet.sock nobody listens on is fine (prepare_dir removes it) ...
        drop(std::os::unix::net::UnixListener::bind(d.join(SOCKET)).unwrap());
        drop(claim_dir(&d).unwrap());
        // ... a live one is someone's registration server.
        std::fs::remove_file(d.join(SOCKET)).unwrap();
        let _kubelet = std::os::unix::net::UnixListener::bind(d.join(SOCKET)).unwrap();
        let e = claim_dir(&d).unwrap_err().to_string();
        assert!(e.ends_with("kubelet.sock accepts connections (a running kubelet, or another agent)"), "{e}");
    }

    #[test]
    fn a_live_kubelet_sock_is_found_even_when_the_lock_file_cannot_be_created() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("device-plugins");
        // Something that cannot be opened as the lock file: the agent would go on without it.
        std::fs::create_dir_all(d.join(LOCK_FILE)).unwrap();
        assert!(matches!(claim_dir(&d), Err(OwnershipError::CreateLock { .. })));
        let _kubelet = std::os::unix::net::UnixListener::bind(d.join(SOCKET)).unwrap();
        let e = claim_dir(&d).unwrap_err().to_string();
        assert!(e.ends_with("kubelet.sock accepts connections (a running kubelet, or another agent)"), "{e}");
    }

    #[test]
    fn a_kubelet_sock_with_a_full_backlog_is_in_use_and_never_blocks_the_claim() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("device-plugins");
        std::fs::create_dir_all(&d).unwrap();
        let hung = std::os::unix::net::UnixListener::bind(d.join(SOCKET)).unwrap();
        // SAFETY: listen(2) on a socket we own; a backlog of 0 holds one connection.
        assert_eq!(unsafe { libc::listen(hung.as_raw_fd(), 0) }, 0);
        let _queued = std::os::unix::net::UnixStream::connect(d.join(SOCKET)).unwrap();
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let _ = tx.send(claim_dir(&d).map(|_| ()).map_err(|e| e.to_string()));
        });
        let got = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("claim_dir blocked on a full backlog");
        let e = got.unwrap_err();
        assert!(e.ends_with("kubelet.sock accepts connections (a running kubelet, or another agent)"), "{e}");
    }

    #[test]
    fn prepare_dir_removes_sockets_only() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("device-plugins");
        std::fs::create_dir_all(&d).unwrap();
        let _l = std::os::unix::net::UnixListener::bind(d.join("old.sock")).unwrap();
        std::fs::write(d.join(super::super::checkpoint::FILE_NAME), "{}").unwrap();
        // A link to a socket outside is not a socket in the directory: neither it nor its
        // target is removed.
        let outside = tempfile::tempdir().unwrap();
        let _o = std::os::unix::net::UnixListener::bind(outside.path().join("theirs.sock")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("theirs.sock"), d.join("link.sock")).unwrap();
        prepare_dir(&d).unwrap();
        assert!(!d.join("old.sock").exists());
        assert!(d.join("link.sock").symlink_metadata().is_ok() && outside.path().join("theirs.sock").exists());
        assert!(d.join(super::super::checkpoint::FILE_NAME).exists());
        assert_eq!(std::fs::metadata(&d).unwrap().permissions().mode() & 0o777, 0o750);
    }
}
