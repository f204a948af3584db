//! The Registration service on `<plugin dir>/kubelet.sock`: checks a plugin's request and
//! hands it to a new endpoint thread, which dials the plugin and answers the call.

use super::{endpoint, Devices};
use crate::api::validation::{is_extended_resource, is_qualified_name};
use crate::proto::deviceplugin as pb;
use futures::FutureExt;
use grpcio::{RpcStatus, RpcStatusCode};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The only API version plugins may speak.
pub const VERSION: &str = "v1beta1";
/// The agent's socket name in the plugin directory.
pub const SOCKET: &str = "kubelet.sock";

/// Checks a registration; returns the plugin's socket path, or kubelet's message.
pub fn validate(req: &pb::RegisterRequest, dir: &Path) -> Result<PathBuf, String> {
    if req.get_version() != VERSION {
        return Err(format!(
            "requested API version {:?} is not supported by kubelet. Supported version is [\"{VERSION}\"]",
            req.get_version()
        ));
    }
    let name = req.get_resource_name();
    if !is_extended_resource(name) || !is_qualified_name(&format!("requests.{name}")) {
        return Err(format!("the ResourceName {name:?} is invalid"));
    }
    // kubelet joins whatever it is given to the directory; ferrolet dials only sockets in it.
    let endpoint = req.get_endpoint();
    let plain = !endpoint.is_empty()
        && endpoint != "."
        && endpoint != ".."
        && endpoint != SOCKET
        && !endpoint.contains('/')
        && !endpoint.contains('\0');
    if !plain {
        return Err(format!(
            "the endpoint {endpoint:?} is invalid: must be the file name of a socket in {} (no '/', not '..' or {SOCKET})",
            dir.display()
        ));
    }
    Ok(dir.join(endpoint))
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

#[derive(Clone)]
struct Registration {
    devices: Devices,
}

impl pb::Registration for Registration {
    fn register(&mut self, ctx: grpcio::RpcContext, req: pb::RegisterRequest, sink: grpcio::UnarySink<pb::Empty>) {
        let resource = req.get_resource_name().to_string();
        self.devices.metrics.registered(&resource);
        log::info!(
            "devices: plugin registering: resource {resource:?}, endpoint {:?}, version {:?}",
            req.get_endpoint(),
            req.get_version()
        );
        match validate(&req, &self.devices.dir) {
            Ok(socket) => endpoint::spawn(self.devices.clone(), resource, socket, sink),
            Err(message) => {
                log::warn!("devices: registration refused: {message}");
                ctx.spawn(sink.fail(RpcStatus::with_message(RpcStatusCode::UNKNOWN, message)).map(|_| ()));
            }
        }
    }
}

/// Starts the gRPC server for the Registration service on `<dir>/kubelet.sock`.
pub fn serve(devices: &Devices) -> Result<grpcio::Server, String> {
    prepare_dir(&devices.dir).map_err(|e| format!("cannot prepare {}: {e}", devices.dir.display()))?;
    let socket = devices.dir.join(SOCKET);
    let service = pb::create_registration(Registration { devices: devices.clone() });
    let mut server = grpcio::ServerBuilder::new(devices.env.clone())
        .register_service(service)
        .build()
        .map_err(|e| format!("cannot build the registration server: {e}"))?;
    server
        .add_listening_port(format!("unix:{}", socket.display()), grpcio::ServerCredentials::insecure())
        .map_err(|e| format!("cannot listen on {}: {e}", socket.display()))?;
    server.start();
    log::info!("devices: registration server listening on {}", socket.display());
    Ok(server)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(validate(&req("v1beta1", "dev.sock", "example.com/dev"), dir), Ok(dir.join("dev.sock")));
        assert_eq!(
            validate(&req("v1", "dev.sock", "example.com/dev"), dir).unwrap_err(),
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
                validate(&req("v1beta1", "dev.sock", bad), dir).unwrap_err(),
                format!("the ResourceName {bad:?} is invalid")
            );
        }
        for bad in ["../x", "/tmp/x.sock", "a/b", "..", "", "kubelet.sock"] {
            let e = validate(&req("v1beta1", bad, "example.com/dev"), dir).unwrap_err();
            assert!(e.starts_with(&format!("the endpoint {bad:?} is invalid")), "{e}");
        }
    }

    #[test]
    fn prepare_dir_removes_sockets_only() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("device-plugins");
        std::fs::create_dir_all(&d).unwrap();
        let _l = std::os::unix::net::UnixListener::bind(d.join("old.sock")).unwrap();
        std::fs::write(d.join(super::super::checkpoint::FILE_NAME), "{}").unwrap();
        prepare_dir(&d).unwrap();
        assert!(!d.join("old.sock").exists());
        assert!(d.join(super::super::checkpoint::FILE_NAME).exists());
        assert_eq!(std::fs::metadata(&d).unwrap().permissions().mode() & 0o777, 0o750);
    }
}
