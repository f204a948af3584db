//! The streaming URLs of the CRI runtime (`kubectl exec`, `attach`, `port-forward` through
//! the apiserver) against the real containerd of `tests/cri/up.sh`: `Exec`, `Attach` and
//! `PortForward` answer with URLs of containerd's streaming server, which answers there.
//! Without `FERROLET_CRI_ENDPOINT` the test skips.

use crate::common;

use common::cri::TestPod;

use ferrolet::base::manager::Health;
use ferrolet::node::runtime::cri::CriRuntime;
use ferrolet::node::runtime::{ContainerConfig, ContainerRuntime, ContainerState, RuntimeError, StreamIo};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The node the test's objects are made for (an agent lists only its node's).
const NODE: &str = "cri-streams-test";

/// The address and path of `url`, which must be `http://127.0.0.1:<port>/<kind>/<token>`.
fn local_stream_url(url: &str, kind: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").unwrap_or_else(|| panic!("not an http URL: {url}"));
    let (addr, token) = rest.split_once('/').unwrap_or_else(|| panic!("no path in {url}"));
    let port = addr.strip_prefix("127.0.0.1:").unwrap_or_else(|| panic!("not on 127.0.0.1: {url}"));
    assert!(port.parse::<u16>().is_ok_and(|p| p > 0), "{url}");
    let token = token.strip_prefix(&format!("{kind}/")).unwrap_or_else(|| panic!("not a {kind} URL: {url}"));
    assert!(!token.is_empty(), "{url}");
    (addr.to_string(), format!("/{kind}/{token}"))
}

#[test]
fn exec_attach_and_port_forward_urls_lead_to_containerds_streaming_server() {
    let Some(endpoint) = common::cri::endpoint() else { return };
    let client = common::cri::client(&endpoint);
    let rt = CriRuntime::new(client, &common::cri::var("FERROLET_CRI_PAUSE_IMAGE"), NODE, &Health::default());
    let pod = TestPod::run(&rt, "streams-web");
    // A container made as `stdin: true, tty: true` asks for: what `kubectl attach` reaches.
    let config = ContainerConfig { stdin: true, tty: true, ..pod.config("app", 0, &["sh"]) };
    let id = pod.start(&config);
    pod.wait_state(&id, ContainerState::Running);

    let io = StreamIo { stdin: true, stdout: true, stderr: false, tty: true };
    let exec = rt.exec_url(&id, &["echo".into(), "hi".into()], io).unwrap().expect("containerd serves exec");
    let attach = rt.attach_url(&id, io).unwrap().expect("containerd serves attach");
    let forward = rt.port_forward_url(&pod.sandbox.pod_uid).unwrap().expect("containerd serves port-forward");
    let (addr, path) = local_stream_url(&exec, "exec");
    local_stream_url(&attach, "attach");
    local_stream_url(&forward, "portforward");

    // The server is there: a GET without an upgrade is answered, not refused.
    let mut conn = TcpStream::connect(&addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(conn, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut head = [0u8; 12];
    conn.read_exact(&mut head).unwrap();
    assert!(head.starts_with(b"HTTP/1.1 "), "{}", String::from_utf8_lossy(&head));

    // A pod with no ready sandbox has nothing to forward to.
    match rt.port_forward_url("no-such-pod-uid") {
        Err(RuntimeError::NotFound { kind, id }) => {
            assert_eq!((kind, id.as_str()), ("ready sandbox of pod", "no-such-pod-uid"))
        }
        other => panic!("{other:?}"),
    }
    rt.stop_container(&id, Duration::from_secs(1)).unwrap();
    pod.wait_state(&id, ContainerState::Exited);
}
