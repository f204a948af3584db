//! kubelet's API on the node (`[server]`, HTTPS), reached as a cluster reaches it: the real
//! `kubectl` through the fake kube-apiserver (tests/apiserver), which passes `pods/log`,
//! `exec`, `attach` and `portforward` on to the node with its kubelet client certificate,
//! and answers the node's TokenReviews and SubjectAccessReviews. Process runtime here;
//! `cri_kubelet_api.rs` does the same on containerd. Without the test venv each test skips.

use crate::common;

use common::apiserver::FakeApiserver;
use common::{AgentProcess, Sandbox};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const NODE: &str = "testnode";
const WAIT: Duration = Duration::from_secs(40);

/// A fake apiserver and an agent joined to it.
pub struct Cluster {
    pub api: FakeApiserver,
    pub agent: AgentProcess,
    pub sb: Sandbox,
}

impl Cluster {
    /// Both started, or `None` (skipped) without the venv. `edit` changes the agent's config.
    pub fn start(edit: impl FnOnce(String) -> String) -> Option<Cluster> {
        let api = FakeApiserver::start(NODE)?;
        let sb = Sandbox::new();
        let kubeconfig = api.node_kubeconfig();
        let key = sb.work().join("etc/kept.key");
        let agent = AgentProcess::start_with(&sb, |text| {
            edit(format!("{text}[apiserver]\nkubeconfig = {kubeconfig:?}\nkept_key = {key:?}\n"))
        });
        Some(Cluster { api, agent, sb })
    }

    /// `f` until it gives a value; a timeout shows both logs.
    pub fn wait<T>(&self, what: &str, f: impl FnMut() -> Option<T>) -> T {
        common::apiserver::wait_logged(&self.agent, &self.api, what, WAIT, f)
    }

    /// Creates `pod` and waits until it runs.
    pub fn run_pod(&self, pod: Value) -> String {
        let name = pod["metadata"]["name"].as_str().unwrap().to_string();
        self.api.create_pod("default", &pod);
        self.wait(&format!("pod {name} running"), || {
            self.api.pod("default", &name).filter(|p| p["status"]["phase"] == "Running").map(|_| ())
        });
        name
    }

    /// The node's kubelet API port, as the Node says.
    pub fn kubelet_port(&self) -> u16 {
        self.wait("the Node's kubelet port", || {
            let node = self.api.node(NODE)?;
            node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"].as_u64().filter(|p| *p > 0).map(|p| p as u16)
        })
    }

    /// `kubectl ARGS` as admin, through the fake.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.api.kubectl_output(args)
    }

    /// `kubectl ARGS` as admin with `stdin`.
    pub fn kubectl_in(&self, args: &[&str], stdin: &[u8]) -> Output {
        self.api.kubectl_with(&self.api.admin_kubeconfig(), args, &[], Some(stdin))
    }
}

/// A pod on this node running `script` in `sh`.
pub fn sh_pod(name: &str, script: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": "busybox:1.36", "command": ["sh", "-c", script]}]}})
}

pub fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

impl Cluster {
    /// The output of a command that must have succeeded; else the agent's log says why.
    pub fn ok(&self, out: Output, what: &str) -> String {
        ok_or_log(&self.agent, out, what)
    }
}

/// The output of a command that must have succeeded; else the agent's `server` lines say why.
pub fn ok_or_log(agent: &AgentProcess, out: Output, what: &str) -> String {
    if !out.status.success() {
        let log = agent.log_text();
        let tail: Vec<&str> =
            log.lines().filter(|l| l.contains("server")).rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
        panic!("{what}: {}\n{}\nthe agent's server lines:\n{}", out.status, text(&out), tail.join("\n"));
    }
    String::from_utf8(out.stdout).unwrap()
}

/// `kubectl logs` with its options, `logs -f` to the container's end, and `--previous`.
#[test]
fn kubectl_logs_reaches_the_node() {
    let Some(c) = Cluster::start(|t| t) else { return };
    let pod = c.run_pod(sh_pod("talker", "i=0; while [ $i -lt 5 ]; do echo line $i; i=$((i+1)); done; sleep 3600"));
    let all = c.wait("five lines", || {
        let out = c.kubectl(&["logs", &pod]);
        let t = String::from_utf8_lossy(&out.stdout).to_string();
        (t.lines().count() == 5).then_some(t)
    });
    assert_eq!(all, "line 0\nline 1\nline 2\nline 3\nline 4\n");
    assert_eq!(c.ok(c.kubectl(&["logs", &pod, "--tail=2"]), "--tail"), "line 3\nline 4\n");
    let stamped = c.ok(c.kubectl(&["logs", &pod, "--timestamps", "--tail=1"]), "--timestamps");
    let (stamp, line) = stamped.trim_end().split_once(' ').unwrap();
    assert!(stamp.starts_with("20") && stamp.ends_with('Z'), "{stamped}");
    assert_eq!(line, "line 4");
    assert_eq!(c.ok(c.kubectl(&["logs", &pod, "--since=1h"]), "--since").lines().count(), 5);
    assert_eq!(c.ok(c.kubectl(&["logs", &pod, "--limit-bytes=8"]), "--limit-bytes"), "line 0\nl");
    assert_eq!(c.ok(c.kubectl(&["logs", &pod, "-c", "c"]), "-c").lines().count(), 5);
    let missing = c.kubectl(&["logs", &pod, "--previous"]);
    assert!(
        !missing.status.success() && text(&missing).contains("previous terminated container"),
        "{}",
        text(&missing)
    );

    // A follow shows lines as they come and ends with the container.
    let pod = c.run_pod(sh_pod("counter", "sleep 1; for i in 1 2 3; do echo tick $i; sleep 1; done"));
    let started = Instant::now();
    let out = c.ok(c.kubectl(&["logs", "-f", &pod]), "logs -f");
    assert_eq!(out, "tick 1\ntick 2\ntick 3\n");
    assert!(started.elapsed() < Duration::from_secs(30));

    // --previous after a restart: the instance before.
    let pod = c.run_pod(sh_pod("restarter", "echo run $(cat /proc/sys/kernel/random/uuid); sleep 1; exit 1"));
    c.wait("a restart", || {
        let p = c.api.pod("default", &pod)?;
        (p["status"]["containerStatuses"][0]["restartCount"].as_u64()? >= 1).then_some(())
    });
    let previous = c.ok(c.kubectl(&["logs", &pod, "--previous"]), "--previous");
    assert!(previous.starts_with("run "), "{previous}");
    c.wait("the new instance's own line", || {
        let now = String::from_utf8(c.kubectl(&["logs", &pod]).stdout).ok()?;
        (now.starts_with("run ") && now != previous).then_some(())
    });
}

/// `kubectl exec`: the exit code, stdin, and `cp` both ways.
#[test]
fn kubectl_exec_and_cp_reach_the_node() {
    let Some(c) = Cluster::start(|t| t) else { return };
    let data = c.sb.work().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut p = sh_pod("shell", "sleep 3600");
    common::share_dir(&mut p, &data);
    let pod = c.run_pod(p);
    assert_eq!(c.ok(c.kubectl(&["exec", &pod, "--", "echo", "hi"]), "exec echo"), "hi\n");
    let failed = c.kubectl(&["exec", &pod, "--", "sh", "-c", "echo out; echo err >&2; exit 3"]);
    assert_eq!(failed.status.code(), Some(3), "{}", text(&failed));
    assert_eq!(String::from_utf8_lossy(&failed.stdout), "out\n");
    assert!(String::from_utf8_lossy(&failed.stderr).contains("err"));
    // Output larger than every buffer on the way arrives whole.
    let big = c.ok(c.kubectl(&["exec", &pod, "--", "head", "-c", "20000000", "/dev/zero"]), "exec of 20 MB");
    assert_eq!(big.len(), 20_000_000);
    let cat = c.kubectl_in(&["exec", "-i", &pod, "--", "sh", "-c", "cat; echo done"], b"hello\nworld\n");
    assert_eq!(c.ok(cat, "exec -i"), "hello\nworld\ndone\n");

    // kubectl cp is exec of tar: 5 MB each way, byte for byte.
    let blob: Vec<u8> = (0..5_000_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let local = c.sb.work().join("blob");
    std::fs::write(&local, &blob).unwrap();
    let inside = data.join("blob-in");
    c.ok(c.kubectl(&["cp", local.to_str().unwrap(), &format!("default/{pod}:{}", inside.display())]), "cp to the pod");
    assert!(std::fs::read(&inside).unwrap() == blob, "the file copied in differs");
    let back = c.sb.work().join("blob-back");
    c.ok(c.kubectl(&["cp", &format!("default/{pod}:{}", inside.display()), back.to_str().unwrap()]), "cp from the pod");
    assert!(std::fs::read(&back).unwrap() == blob, "the file copied out differs");
}

/// Drives `kubectl exec -it` on a pseudo-terminal: a shell answers `stty size`, a resize
/// changes it, and the shell's exit code comes back.
pub const TTY_DRIVER: &str = r#"
import fcntl, os, pty, select, signal, struct, sys, termios, time
argv = sys.argv[1:]
pid, fd = pty.fork()
if pid == 0:
    os.execvp(argv[0], argv)
def size(rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
size(24, 80)
seen = b""
def expect(token, timeout=20):
    global seen
    end = time.time() + timeout
    while token not in seen:
        if time.time() > end:
            sys.stdout.write("TIMEOUT waiting for %r; seen %r\n" % (token, seen)); sys.exit(99)
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                seen += os.read(fd, 4096)
            except OSError:
                break
    seen = seen[seen.index(token) + len(token):]
time.sleep(1)
os.write(fd, b"stty size; echo mark1\n")
expect(b"24 80")
expect(b"mark1")
size(40, 100)
os.kill(pid, signal.SIGWINCH)
time.sleep(1)
os.write(fd, b"stty size; echo mark2\n")
expect(b"40 100")
expect(b"mark2")
os.write(fd, b"exit 5\n")
_, status = os.waitpid(pid, 0)
print("EXIT", os.waitstatus_to_exitcode(status))
"#;

#[test]
fn kubectl_exec_with_a_terminal_follows_its_size() {
    let Some(c) = Cluster::start(|t| t) else { return };
    let pod = c.run_pod(sh_pod("term", "sleep 3600"));
    let venv = common::apiserver::venv().unwrap();
    let kubectl = venv.join("bin/kubectl");
    let kubeconfig = c.api.admin_kubeconfig();
    let out = Command::new(venv.join("bin/python"))
        .arg("-c")
        .arg(TTY_DRIVER)
        .arg(&kubectl)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["exec", "-it", &pod, "--", "sh"])
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    let t = text(&out);
    assert!(t.contains("EXIT 5"), "{t}");
}

/// `kubectl port-forward` to a server in the pod, and an HTTP request through it.
#[test]
fn kubectl_port_forward_reaches_the_pod() {
    let Some(c) = Cluster::start(|t| t) else { return };
    let port = common::free_port();
    let script = format!("exec python3 -m http.server {port} --bind 127.0.0.1");
    let pod = c.run_pod(sh_pod("web", &script));
    let local = common::free_port();
    let mut pf = Command::new(common::apiserver::venv().unwrap().join("bin/kubectl"))
        .arg("--kubeconfig")
        .arg(c.api.admin_kubeconfig())
        .args(["port-forward", &format!("pod/{pod}"), &format!("{local}:{port}")])
        .env_remove("KUBECONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let get = || -> Option<String> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", local)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        s.write_all(b"GET / HTTP/1.0\r\n\r\n").ok()?;
        let mut answer = String::new();
        s.read_to_string(&mut answer).ok()?;
        answer.starts_with("HTTP/1.0 200").then_some(answer)
    };
    let answer = c.wait("an answer through port-forward", get);
    assert!(answer.contains("Directory listing"), "{answer}");
    // Several connections, one after another, over the same forward.
    for _ in 0..3 {
        assert!(get().is_some());
    }
    let _ = pf.kill();
    let _ = pf.wait();
}

/// Who may call the node: the apiserver's kubelet client certificate; a user allowed
/// `nodes/proxy`; not one allowed only `nodes/stats`, nor a token the apiserver rejects, nor
/// anyone without credentials, nor a certificate of another CA.
#[test]
fn the_node_authenticates_and_authorizes_as_kubelet() {
    let Some(c) = Cluster::start(|t| t) else { return };
    let pod = c.run_pod(sh_pod("quiet", "echo hello; sleep 3600"));
    let port = c.kubelet_port();
    let url = format!("https://127.0.0.1:{port}/containerLogs/default/{pod}/c");
    let curl = |args: &[&str]| -> (String, String) {
        let out = Command::new("curl")
            .args(["-k", "-s", "-S", "--max-time", "10", "-w", "\n%{http_code}"])
            .args(args)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, code) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
        (code.to_string(), format!("{body}{}", String::from_utf8_lossy(&out.stderr)))
    };
    let path = |p: &Path| p.to_str().unwrap().to_string();
    // The apiserver's client certificate.
    let (cert, key) = (c.api.kubelet_client_cert(), c.api.kubelet_client_key());
    assert_eq!(curl(&["--cert", &path(&cert), "--key", &path(&key), &url]), ("200".into(), "hello\n".into()));
    // Nobody.
    assert_eq!(curl(&[&url]), ("401".into(), "Unauthorized".into()));
    // Another CA's certificate: the handshake fails.
    let (other, other_key) = c.api.other_ca_client_cert();
    let (code, _) = curl(&["--cert", &path(&other), "--key", &path(&other_key), &url]);
    assert_eq!(code, "000");
    // A token the apiserver does not know.
    assert_eq!(curl(&["-H", "Authorization: Bearer nope", &url]).0, "401");
    // Alice may proxy; bob may only read stats.
    c.api.add_token("alice-token", "alice", &["devs"]);
    c.api.add_token("bob-token", "bob", &[]);
    c.api.allow("alice", &["get", "create"], "nodes", "proxy");
    c.api.allow("bob", &["get"], "nodes", "stats");
    assert_eq!(curl(&["-H", "Authorization: Bearer alice-token", &url]).0, "200");
    let (code, body) = curl(&["-H", "Authorization: Bearer bob-token", &url]);
    assert_eq!(
        (code.as_str(), body.as_str()),
        ("403", "Forbidden (user=bob, verb=get, resource=nodes, subresource=proxy)")
    );
    // Alice may exec (the upgrade is granted), bob may not.
    let exec = format!("https://127.0.0.1:{port}/exec/default/{pod}/c?command=true&output=1");
    let upgrade = [
        "-X",
        "POST",
        "-H",
        "Connection: Upgrade",
        "-H",
        "Upgrade: SPDY/3.1",
        "-H",
        "X-Stream-Protocol-Version: v4.channel.k8s.io",
        "--max-time",
        "2",
    ];
    let (code, _) = curl(&[&upgrade[..], &["-H", "Authorization: Bearer alice-token", &exec]].concat());
    assert_eq!(code, "101");
    let (code, _) = curl(&[&upgrade[..], &["-H", "Authorization: Bearer bob-token", &exec]].concat());
    assert_eq!(code, "403");
    // A user certificate of the cluster CA is a user too.
    let (carol, carol_key) = c.api.user_cert("carol", &["devs"]);
    assert_eq!(curl(&["--cert", &path(&carol), "--key", &path(&carol_key), &url]).0, "403");
    c.api.allow("carol", &["get"], "nodes", "proxy");
    // Denied answers are kept 30 s: carol's is still the cached no.
    assert_eq!(curl(&["--cert", &path(&carol), "--key", &path(&carol_key), &url]).0, "403");
    // Answers are cached: asking again does not ask the apiserver again.
    let (tokens, reviews) = (c.api.token_reviews(), c.api.subject_access_reviews());
    for _ in 0..3 {
        assert_eq!(curl(&["-H", "Authorization: Bearer alice-token", &url]).0, "200");
    }
    assert_eq!((c.api.token_reviews(), c.api.subject_access_reviews()), (tokens, reviews));
}

/// A hostile client: many idle connections, a handshake that never finishes, a reader that
/// stops reading, a head too large. The local API answers throughout, and so does the node.
#[test]
fn hostile_clients_stall_nothing_else() {
    let Some(c) = Cluster::start(|t| t) else { return };
    let pod = c.run_pod(sh_pod("target", "sleep 3600"));
    let port = c.kubelet_port();
    let healthz = || {
        let started = Instant::now();
        let mut s = std::net::TcpStream::connect(("127.0.0.1", c.agent.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        started.elapsed()
    };
    // 1000 connections that never say anything.
    let idle: Vec<std::net::TcpStream> =
        (0..1000).filter_map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).ok()).collect();
    assert!(idle.len() >= 900);
    let slow = healthz();
    assert!(slow < Duration::from_secs(2), "/healthz took {slow:?}");
    // A handshake that stops half-way is closed by the node within its handshake timeout.
    let mut half = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let _ = half.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]);
    drop(idle);
    half.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut buf = [0u8; 64];
    let started = Instant::now();
    let read = half.read(&mut buf);
    let closed = matches!(read, Ok(0) | Err(_));
    assert!(closed && started.elapsed() < Duration::from_secs(25), "{read:?} after {:?}", started.elapsed());
    // A reader that stops reading a stream that writes without end holds only itself.
    let mut stuck = Command::new(common::apiserver::venv().unwrap().join("bin/kubectl"))
        .arg("--kubeconfig")
        .arg(c.api.admin_kubeconfig())
        .args(["exec", &pod, "--", "sh", "-c", "while true; do echo 0123456789abcdef0123456789abcdef; done"])
        .env_remove("KUBECONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(c.ok(c.kubectl(&["exec", &pod, "--", "echo", "still"]), "exec beside a stuck one"), "still\n");
    let _ = healthz();
    let _ = stuck.kill();
    let _ = stuck.wait();
    // A head of 64 KiB and more is refused (431), and the node goes on.
    let (cert, key) = (c.api.kubelet_client_cert(), c.api.kubelet_client_key());
    let big = format!("X-Big: {}", "a".repeat(70_000));
    let out = Command::new("curl")
        .args(["-k", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "-H", &big])
        .args(["--cert", cert.to_str().unwrap(), "--key", key.to_str().unwrap()])
        .arg(format!("https://127.0.0.1:{port}/healthz"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "431");
    assert_eq!(c.ok(c.kubectl(&["exec", &pod, "--", "echo", "after"]), "exec after"), "after\n");
}

/// `kubectl attach` on the process runtime: the container's output from now on.
#[test]
fn kubectl_attach_follows_the_containers_output() {
    let Some(c) = Cluster::start(|t| t) else { return };
    let pod = c.run_pod(sh_pod("ticker", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.3; done"));
    let mut attach = Command::new(common::apiserver::venv().unwrap().join("bin/kubectl"))
        .arg("--kubeconfig")
        .arg(c.api.admin_kubeconfig())
        .args(["attach", &pod])
        .env_remove("KUBECONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = attach.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut seen = String::new();
        let mut buf = [0u8; 256];
        while seen.matches("tick").count() < 3 {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => seen.push_str(&String::from_utf8_lossy(&buf[..k])),
            }
        }
        seen
    });
    let deadline = Instant::now() + WAIT;
    while !reader.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = attach.kill();
    let _ = attach.wait();
    let seen = reader.join().unwrap();
    assert!(seen.matches("tick").count() >= 3, "{seen}");
    // From now on: the first lines the container wrote are not replayed.
    assert!(!seen.contains("tick 0\n"), "{seen}");
}

type TlsClient = rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>;

/// A TLS connection to the node's kubelet port as the apiserver (its kubelet client
/// certificate), having sent a WebSocket upgrade of `path` offering `protocol`; the
/// response head and the bytes read past it.
fn ws_connect(c: &Cluster, port: u16, path: &str, protocol: &str) -> (TlsClient, String, Vec<u8>) {
    use ferrolet::node::prober::httpget::AnyCertificate;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let certs = CertificateDer::pem_file_iter(c.api.kubelet_client_cert()).unwrap().map(|c| c.unwrap()).collect();
    let key = PrivateKeyDer::from_pem_file(c.api.kubelet_client_key()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        // Any server certificate: the test reaches the node's self-made one by address.
        .with_custom_certificate_verifier(std::sync::Arc::new(AnyCertificate(provider)))
        .with_client_auth_cert(certs, key)
        .unwrap();
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), "127.0.0.1".try_into().unwrap()).unwrap();
    let sock = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: {protocol}\r\n\r\n"
    );
    tls.write_all(req.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match tls.read(&mut chunk) {
            Ok(0) | Err(_) => break buf.len(),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    (tls, head, buf[end..].to_vec())
}

/// A masked client frame.
fn ws_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [1u8, 2, 3, 4];
    assert!(payload.len() < 126);
    let mut f = vec![0x80 | opcode, 0x80 | payload.len() as u8];
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

/// Every server message (opcode, payload) until the server's close frame or the end.
fn ws_messages(tls: &mut TlsClient, mut buf: Vec<u8>) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    loop {
        // A server frame: unmasked, final (as ferrolet writes them).
        let parsed = (buf.len() >= 2).then(|| {
            let (len, at) = match buf[1] & 0x7f {
                126 if buf.len() >= 4 => (u16::from_be_bytes([buf[2], buf[3]]) as usize, 4),
                127 if buf.len() >= 10 => (u64::from_be_bytes(buf[2..10].try_into().unwrap()) as usize, 10),
                126 | 127 => return None,
                n => (n as usize, 2),
            };
            (buf.len() >= at + len).then(|| (buf[0] & 0x0f, buf[at..at + len].to_vec(), at + len))
        });
        if let Some(Some((op, payload, used))) = parsed {
            assert_eq!(buf[1] & 0x80, 0, "a server frame is not masked");
            buf.drain(..used);
            out.push((op, payload));
            if op == 8 {
                return out;
            }
            continue;
        }
        match tls.read(&mut chunk) {
            Ok(0) | Err(_) => return out,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A WebSocket client of the kind an apiserver passes through to a node (python, JS):
/// exec over `v4.channel.k8s.io` and `base64.channel.k8s.io`, stdin in and the exit status
/// out; a request offering only `v5.channel.k8s.io` is refused (kubectl then uses SPDY).
#[test]
fn websocket_exec_reaches_the_node() {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let Some(c) = Cluster::start(|t| t) else { return };
    let pod = c.run_pod(sh_pod("wsshell", "sleep 3600"));
    let port = c.kubelet_port();
    let path = format!(
        "/exec/default/{pod}/c?command=sh&command=-c&command=read+x%3B+echo+got+%24x%3B+exit+3&input=1&output=1&error=1"
    );

    // Binary: the channel the first byte.
    let (mut tls, head, rest) = ws_connect(&c, port, &path, "v4.channel.k8s.io");
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(head.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"), "{head}");
    assert!(head.contains("Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n"), "{head}");
    tls.write_all(&ws_frame(2, b"\x00hello\n")).unwrap();
    let messages = ws_messages(&mut tls, rest);
    let channel = |n: u8| -> Vec<u8> {
        messages.iter().filter(|(op, p)| *op == 2 && p.first() == Some(&n)).flat_map(|(_, p)| p[1..].to_vec()).collect()
    };
    assert_eq!(String::from_utf8_lossy(&channel(1)), "got hello\n", "{messages:?}");
    let status: Value = serde_json::from_slice(&channel(3)).unwrap();
    assert_eq!(status["reason"], "NonZeroExitCode", "{status}");
    assert_eq!(status["details"]["causes"][0], json!({"reason": "ExitCode", "message": "3"}));
    assert_eq!(messages.last().map(|(op, _)| *op), Some(8), "the server closes: {messages:?}");

    // base64: text, the channel a digit, the payload base64; the status before v4 is text.
    let (mut tls, head, rest) = ws_connect(&c, port, &path, "base64.channel.k8s.io");
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(head.contains("Sec-WebSocket-Protocol: base64.channel.k8s.io\r\n"), "{head}");
    tls.write_all(&ws_frame(1, format!("0{}", b64.encode("hello\n")).as_bytes())).unwrap();
    let messages = ws_messages(&mut tls, rest);
    let channel = |n: u8| -> Vec<u8> {
        messages
            .iter()
            .filter(|(op, p)| *op == 1 && p.first() == Some(&(b'0' + n)))
            .flat_map(|(_, p)| b64.decode(&p[1..]).unwrap())
            .collect()
    };
    assert_eq!(String::from_utf8_lossy(&channel(1)), "got hello\n", "{messages:?}");
    assert!(String::from_utf8_lossy(&channel(3)).contains("exit code 3"), "{messages:?}");

    // Only v5: refused, as today, so kubectl falls back to SPDY.
    let (_, head, _) = ws_connect(&c, port, &path, "v5.channel.k8s.io");
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    // A client that goes away kills its command.
    let sleeper = format!("/exec/default/{pod}/c?command=sleep&command=4242&input=1&output=1");
    let (tls, head, _) = ws_connect(&c, port, &sleeper, "v4.channel.k8s.io");
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let running = || {
        let out = Command::new("pgrep").args(["-f", "^sleep 4242$"]).output().unwrap();
        out.status.success()
    };
    c.wait("the command running", || running().then_some(()));
    drop(tls);
    c.wait("the command killed", || (!running()).then_some(()));
}

/// Port-forward over WebSocket, as a client the apiserver passes through gets it: each port's
/// data and error channels start with the port, the data reaches the pod's server, and a
/// port nothing listens on says why on its error channel.
#[test]
fn websocket_port_forward_reaches_the_pod() {
    let Some(c) = Cluster::start(|t| t) else { return };
    let web = common::free_port();
    let pod = c.run_pod(sh_pod("wsweb", &format!("exec python3 -m http.server {web} --bind 127.0.0.1")));
    let port = c.kubelet_port();
    let closed = common::free_port();
    let path = format!("/portForward/default/{pod}?ports={web},{closed}");
    let messages = c.wait("an answer through the forward", || {
        let (mut tls, head, rest) = ws_connect(&c, port, &path, "v4.channel.k8s.io");
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        let mut request = vec![0u8];
        request.extend_from_slice(b"GET / HTTP/1.0\r\n\r\n");
        tls.write_all(&ws_frame(2, &request)).unwrap();
        let messages = ws_messages(&mut tls, rest);
        let data: Vec<u8> = messages
            .iter()
            .filter(|(op, p)| *op == 2 && p.first() == Some(&0))
            .flat_map(|(_, p)| p[1..].to_vec())
            .collect();
        String::from_utf8_lossy(&data).contains("HTTP/1.0 200").then_some(messages)
    });
    let channel = |n: u8| -> Vec<u8> {
        messages.iter().filter(|(op, p)| *op == 2 && p.first() == Some(&n)).flat_map(|(_, p)| p[1..].to_vec()).collect()
    };
    assert_eq!(&channel(0)[..2], &web.to_le_bytes(), "the data channel starts with its port");
    assert!(String::from_utf8_lossy(&channel(0)[2..]).contains("Directory listing"));
    assert_eq!(channel(1), web.to_le_bytes(), "the error channel of a good port says only its port");
    assert_eq!(&channel(3)[..2], &closed.to_le_bytes());
    let why = String::from_utf8_lossy(&channel(3)[2..]).to_string();
    assert!(why.contains(&format!("error forwarding port {closed} to pod {pod}")), "{why}");
    assert_eq!(messages.last().map(|(op, _)| *op), Some(8), "the server closes");
}
