//! The CRI client against a real containerd, started on private paths by `tests/cri/up.sh`
//! (`make test` runs it and passes `FERROLET_CRI_ENDPOINT`). Without it, each test skips
//! with the reason.

mod common;

use ferrolet::runtime::cri::CriClient;
use std::sync::Arc;
use std::time::Duration;

/// The harness's containerd, or `None` (and the test skips).
fn endpoint() -> Option<String> {
    match std::env::var("FERROLET_CRI_ENDPOINT") {
        Ok(e) if !e.is_empty() => Some(e),
        _ => {
            common::skip(
                "FERROLET_CRI_ENDPOINT is not set: no test containerd (make test starts one with tests/cri/up.sh)",
            );
            None
        }
    }
}

fn env() -> Arc<grpcio::Environment> {
    Arc::new(grpcio::EnvBuilder::new().cq_count(1).build())
}

#[test]
fn the_start_up_check_sees_a_ready_containerd_speaking_cri_v1() {
    let Some(endpoint) = endpoint() else { return };
    let client = CriClient::connect(&endpoint, Duration::from_secs(10), env()).unwrap();
    let (version, _network) = client.check().unwrap();
    assert_eq!(version.get_runtime_name(), "containerd");
    assert_eq!(version.get_runtime_api_version(), "v1");
    assert!(!version.get_runtime_version().is_empty());
}

#[test]
fn a_socket_nobody_serves_is_an_error_naming_the_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dead.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    drop(listener); // the socket file stays, nobody accepts
    let endpoint = format!("unix://{}", path.display());
    let e = CriClient::connect(&endpoint, Duration::from_millis(300), env()).err().unwrap();
    assert_eq!(e.to_string(), format!("container runtime endpoint {endpoint}: no connection within 300ms"));
}
