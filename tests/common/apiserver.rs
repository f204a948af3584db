//! The fake kube-apiserver of the cluster-mode tests (`tests/apiserver/`, see its README):
//! `FakeApiserver` makes a CA and certificates for one node in a temporary directory with
//! `certs.sh`, starts `fake_apiserver.py` with the test venv's python (made by
//! `tests/apiserver/setup.sh`, which `make test` runs), and gives the node's kubeconfigs,
//! the admin's, the API as admin, fault injection, the request log and `kubectl`; the
//! ConfigMaps, Secrets and service account tokens a node reads (`create_config_map`,
//! `create_secret`, `tokens_issued`, `jwt_claims`); for the kubelet's own API, reached
//! through the apiserver (`pods/log`, `exec`, `attach`, `portforward`): the apiserver's
//! kubelet client certificate, user certificates and bearer tokens, authorization rules,
//! TokenReview and SubjectAccessReview counts, and kubectl as any user; for TLS bootstrap:
//! bootstrap tokens and their kubeconfig, the CSRs and the controllers that approve and sign
//! them, and certificates of the cluster CA with any validity.
//! Dropping it kills the server it started (that child, by its pid) and removes its files.

use base64::Engine;
use serde::Deserialize;
use serde_json::{json, Value};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// The environment variable naming the test venv (`make test` sets it).
pub const VENV_ENV: &str = "FERROLET_TEST_VENV";
/// Where `tests/apiserver/setup.sh` makes the venv when `FERROLET_TEST_VENV` is not set.
pub const DEFAULT_VENV: &str = "/var/tmp/ferrolet-test-venv";
/// The file `setup.sh` writes in the venv once kubernetes-validate and kubectl work.
pub const READY_MARKER: &str = ".ferrolet-ready";
/// The group `kubeadm token create` puts bootstrap tokens in, which kubeadm's RBAC lets post
/// CSRs and have them auto-approved.
pub const KUBEADM_NODE_TOKEN_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";
/// The CertificateSigningRequests collection.
pub const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
/// The signer of kubelet client certificates.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The signer of kubelet serving certificates (never auto-approved).
pub const KUBELET_SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// The node user's name for node `node`, as the Node authorizer expects it.
pub fn node_user(node: &str) -> String {
    format!("system:node:{node}")
}

const START_TIMEOUT: Duration = Duration::from_secs(20);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The test venv, or `None` after saying why the test skips.
pub fn venv() -> Option<PathBuf> {
    let venv = std::env::var_os(VENV_ENV).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(DEFAULT_VENV));
    if venv.join(READY_MARKER).exists() {
        return Some(venv);
    }
    super::skip(&format!(
        "no test venv at {} (kubernetes-validate and kubectl for the fake kube-apiserver): \
         make test makes it with tests/apiserver/setup.sh",
        venv.display()
    ));
    None
}

/// The key type of the certificates (kubeadm writes either).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KeyType {
    /// RSA 2048, PKCS#1 ("RSA PRIVATE KEY").
    #[default]
    Rsa,
    /// ECDSA P-256, SEC1 ("EC PRIVATE KEY").
    Ec,
}

/// How a fake apiserver starts.
#[derive(Clone, Debug)]
pub struct Options {
    pub key_type: KeyType,
    /// The Kubernetes version whose schemas validate what is written.
    pub kube_version: String,
    /// How many changes are kept for watches to resume from (older: 410 Gone).
    pub watch_window: usize,
    /// The ServiceAccount admission plugin: pods the admin creates get `serviceAccountName:
    /// default` when unset and the `kube-api-access-*` token volume mounted in every container
    /// (`--service-account-admission`).
    pub service_account_admission: bool,
    /// As kube-apiserver's `--service-account-extend-token-expiration`: a pod-bound token
    /// asked for 3607 s is valid a year, with `warnafter` at 3607 s (`--extend-token-expiration`).
    pub extend_token_expiration: bool,
    /// Caps every token's lifetime at this many seconds (0: none), as kube-apiserver's
    /// `--service-account-max-token-expiration` does but below its 1 hour minimum, so that
    /// renewals come within seconds (`--max-token-seconds`).
    pub max_token_seconds: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            key_type: KeyType::Rsa,
            kube_version: "1.30".into(),
            watch_window: 1000,
            service_account_admission: false,
            extend_token_expiration: false,
            max_token_seconds: 0,
        }
    }
}

/// How `cut_watches` ends the open watch streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutMode {
    /// The TCP connection drops with no end-of-stream chunk.
    Abrupt,
    /// The stream ends cleanly (as at the apiserver's watch timeout).
    Clean,
    /// Half an event, then the connection drops.
    Partial,
}

/// One request the TLS port served (the control port's are not logged).
#[derive(Clone, Debug, Deserialize)]
pub struct RequestRecord {
    pub seq: u64,
    /// Unix time, seconds.
    pub time: f64,
    pub method: String,
    /// Path and query.
    pub path: String,
    /// The client certificate's CN.
    pub user: String,
    /// get, list, watch, create, update, patch, delete or discovery.
    pub verb: String,
    pub status: u16,
    pub duration_ms: f64,
    /// `slow`, `fail:CODE` or `fail-after:CODE` when a fault touched it.
    pub fault: Option<String>,
    #[serde(default)]
    pub watch: bool,
}

#[derive(Deserialize)]
struct Ready {
    port: u16,
    control_port: u16,
    pid: u32,
}

/// `f` until it gives a value, for up to `within`; a timeout panics with the end of the
/// agent's log and of the fake's.
pub fn wait_logged<T>(
    agent: &super::AgentProcess,
    api: &FakeApiserver,
    what: &str,
    within: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            let log = agent.log_text();
            let tail: Vec<&str> = log.lines().rev().take(80).collect::<Vec<_>>().into_iter().rev().collect();
            panic!(
                "timed out waiting for {what}; the agent's log:\n{}\nthe fake's:\n{}",
                tail.join("\n"),
                api.log_tail()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A running fake kube-apiserver for one node.
pub struct FakeApiserver {
    child: Child,
    dir: tempfile::TempDir,
    venv: PathBuf,
    node: String,
    key_type: KeyType,
    port: u16,
    control_port: u16,
    control: ureq::Agent,
}

fn harness_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apiserver")
}

impl FakeApiserver {
    /// A fake apiserver whose node certificate is for `node`, or `None` (the test skips)
    /// without the test venv.
    pub fn start(node: &str) -> Option<FakeApiserver> {
        Self::start_with(node, Options::default())
    }

    /// As `start`, with `options`.
    pub fn start_with(node: &str, options: Options) -> Option<FakeApiserver> {
        let venv = venv()?;
        let dir = tempfile::Builder::new().prefix("fake-apiserver").tempdir().unwrap();
        let key_type = key_type_name(options.key_type);
        let dir_path = dir.path().to_path_buf();
        let certs = |port: Option<u16>| {
            let mut cmd = Command::new("bash");
            cmd.arg(harness_dir().join("certs.sh")).arg(&dir_path).arg(node);
            if let Some(p) = port {
                cmd.arg(p.to_string());
            }
            let out = cmd.env("FERROLET_TEST_KEY_TYPE", key_type).output().unwrap();
            assert!(out.status.success(), "certs.sh: {}", String::from_utf8_lossy(&out.stderr));
        };
        certs(None);
        let ready_file = dir.path().join("ready.json");
        let log = dir.path().join("server.log");
        let mut cmd = Command::new(venv.join("bin/python"));
        cmd.arg(harness_dir().join("fake_apiserver.py"))
            .arg("--certs")
            .arg(dir.path())
            .arg("--ready-file")
            .arg(&ready_file)
            .args(["--kube-version", &options.kube_version])
            .args(["--watch-window", &options.watch_window.to_string()]);
        if options.service_account_admission {
            cmd.arg("--service-account-admission");
        }
        if options.extend_token_expiration {
            cmd.arg("--extend-token-expiration");
        }
        if options.max_token_seconds > 0 {
            cmd.args(["--max-token-seconds", &options.max_token_seconds.to_string()]);
        }
        let child = cmd
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let control = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(REQUEST_TIMEOUT))
            .build()
            .into();
        let mut server = FakeApiserver {
            child,
            dir,
            venv,
            node: node.to_string(),
            key_type: options.key_type,
            port: 0,
            control_port: 0,
            control,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        let ready: Ready = loop {
            if let Ok(text) = std::fs::read_to_string(&ready_file) {
                break serde_json::from_str(&text).unwrap();
            }
            if server.child.try_wait().ok().flatten().is_some() || Instant::now() >= deadline {
                panic!("the fake apiserver did not start:\n{}", server.log_tail());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(ready.pid, server.child.id(), "the ready file is not our server's");
        server.port = ready.port;
        server.control_port = ready.control_port;
        certs(Some(ready.port));
        Some(server)
    }

    /// The node this server's node certificate is for.
    pub fn node_name(&self) -> &str {
        &self.node
    }
    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
    /// The TLS port.
    pub fn port(&self) -> u16 {
        self.port
    }
    /// The plain-HTTP control port's base URL.
    pub fn control_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.control_port)
    }
    /// The directory holding certificates, kubeconfigs and the server's log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
    pub fn ca_cert(&self) -> PathBuf {
        self.dir().join("ca.crt")
    }
    pub fn node_cert(&self) -> PathBuf {
        self.dir().join("node.crt")
    }
    pub fn node_key(&self) -> PathBuf {
        self.dir().join("node.key")
    }
    /// The node's kubeconfig naming the CA, certificate and key files.
    pub fn node_kubeconfig(&self) -> PathBuf {
        self.dir().join("node.kubeconfig")
    }
    /// The node's kubeconfig with the CA, certificate and key inline (`*-data`, base64).
    pub fn node_kubeconfig_data(&self) -> PathBuf {
        self.dir().join("node-data.kubeconfig")
    }
    /// The admin's (`system:masters`) kubeconfig.
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir().join("admin.kubeconfig")
    }
    /// The apiserver's client certificate to kubelets (kubeadm's `apiserver-kubelet-client.crt`:
    /// CN `kube-apiserver-kubelet-client`, O `kubeadm:cluster-admins`), signed by `ca_cert()`,
    /// which is what a node's `client_ca_file` must hold to accept it.
    pub fn kubelet_client_cert(&self) -> PathBuf {
        self.dir().join("apiserver-kubelet-client.crt")
    }
    pub fn kubelet_client_key(&self) -> PathBuf {
        self.dir().join("apiserver-kubelet-client.key")
    }
    /// A client certificate and key for user `user` in `groups` (CN and O's), signed by the
    /// cluster CA (made once per user: a second call with other groups keeps the first).
    pub fn user_cert(&self, user: &str, groups: &[&str]) -> (PathBuf, PathBuf) {
        let out = Command::new("bash")
            .arg(harness_dir().join("certs.sh"))
            .arg("--user")
            .arg(self.dir())
            .arg(user)
            .args(groups)
            .env("FERROLET_TEST_KEY_TYPE", key_type_name(self.key_type))
            .output()
            .unwrap();
        assert!(out.status.success(), "certs.sh --user: {}", String::from_utf8_lossy(&out.stderr));
        (self.dir().join(format!("user-{user}.crt")), self.dir().join(format!("user-{user}.key")))
    }
    /// A client certificate (CN `kubernetes-admin`, O `system:masters`) and key from another
    /// CA (`other_ca_cert()`): an admin's name nobody should believe.
    pub fn other_ca_client_cert(&self) -> (PathBuf, PathBuf) {
        (self.dir().join("other-client.crt"), self.dir().join("other-client.key"))
    }
    pub fn other_ca_cert(&self) -> PathBuf {
        self.dir().join("other-ca.crt")
    }
    /// A kubeconfig (at `DIR/NAME.kubeconfig`) for this server with the client certificate
    /// `cert` and key `key`.
    pub fn kubeconfig_for_cert(&self, name: &str, cert: &Path, key: &Path) -> PathBuf {
        let user = format!("client-certificate: {}\n    client-key: {}", cert.display(), key.display());
        self.write_kubeconfig(name, &user)
    }
    /// A kubeconfig (at `DIR/NAME.kubeconfig`) for this server with bearer token `token` and
    /// no client certificate.
    pub fn kubeconfig_for_token(&self, name: &str, token: &str) -> PathBuf {
        self.write_kubeconfig(name, &format!("token: {token}"))
    }
    /// The kubeconfig of user `user` in `groups` (a certificate of the cluster CA).
    pub fn user_kubeconfig(&self, user: &str, groups: &[&str]) -> PathBuf {
        let (cert, key) = self.user_cert(user, groups);
        self.kubeconfig_for_cert(user, &cert, &key)
    }
    fn write_kubeconfig(&self, name: &str, user: &str) -> PathBuf {
        let path = self.dir().join(format!("{name}.kubeconfig"));
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n    \
             certificate-authority: {}\nusers:\n- name: {name}\n  user:\n    {user}\ncontexts:\n- name: {name}@fake\n  \
             context:\n    cluster: fake\n    user: {name}\ncurrent-context: {name}@fake\npreferences: {{}}\n",
            self.url(),
            self.ca_cert().display()
        );
        std::fs::write(&path, text).unwrap();
        path
    }
    /// The public key service account tokens are signed with (`sa.pub`, PEM, as kubeadm has
    /// it; the private key `sa.key` is beside it).
    pub fn token_key_path(&self) -> PathBuf {
        self.dir().join("sa.pub")
    }

    /// The end of the server's log (stderr).
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir().join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    // ---- clients -------------------------------------------------------------------------

    /// A ureq agent speaking TLS as the node (its client certificate); HTTP error statuses
    /// are responses, not errors.
    pub fn node_agent(&self) -> ureq::Agent {
        self.tls_agent(&self.node_cert(), &self.node_key())
    }

    /// A ureq agent speaking TLS as the admin (`system:masters`).
    pub fn admin_agent(&self) -> ureq::Agent {
        self.tls_agent(&self.dir().join("admin.crt"), &self.dir().join("admin.key"))
    }

    /// A ureq agent trusting the test CA and presenting `cert` and `key`.
    pub fn tls_agent(&self, cert: &Path, key: &Path) -> ureq::Agent {
        use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig};
        let ca = Certificate::from_pem(&std::fs::read(self.ca_cert()).unwrap()).unwrap();
        let cert = Certificate::from_pem(&std::fs::read(cert).unwrap()).unwrap();
        let key = PrivateKey::from_pem(&std::fs::read(key).unwrap()).unwrap();
        let tls = TlsConfig::builder()
            .root_certs(RootCerts::new_with_certs(&[ca]))
            .client_cert(Some(ClientCert::new_with_certs(&[cert], key)))
            .build();
        ureq::Agent::config_builder()
            .tls_config(tls)
            .http_status_as_error(false)
            .timeout_global(Some(REQUEST_TIMEOUT))
            .build()
            .into()
    }

    /// `method path` on the TLS port with `agent`: (status, body as JSON, or as a JSON
    /// string when it is not JSON).
    pub fn call(&self, agent: &ureq::Agent, method: &str, path: &str, body: Option<(&str, &Value)>) -> (u16, Value) {
        send(agent, method, &format!("{}{path}", self.url()), body)
    }

    /// The API as the admin through the control port (never faulted, never logged); a
    /// PATCH body is a JSON merge patch.
    pub fn api(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let ctype = if method == "PATCH" { "application/merge-patch+json" } else { "application/json" };
        send(&self.control, method, &format!("{}{path}", self.control_url()), body.map(|b| (ctype, b)))
    }

    /// Creates `obj` at collection `path` as the admin; panics unless 201.
    pub fn create(&self, path: &str, obj: &Value) -> Value {
        let (code, body) = self.api("POST", path, Some(obj));
        assert_eq!(code, 201, "POST {path}: {body}");
        body
    }

    /// The object at `path`, or `None` on 404.
    pub fn get(&self, path: &str) -> Option<Value> {
        let (code, body) = self.api("GET", path, None);
        match code {
            200 => Some(body),
            404 => None,
            _ => panic!("GET {path}: {code} {body}"),
        }
    }

    /// Creates pod `pod` in `namespace` as a user would (`kubectl create`).
    pub fn create_pod(&self, namespace: &str, pod: &Value) -> Value {
        self.create(&format!("/api/v1/namespaces/{namespace}/pods"), pod)
    }

    /// Merge-patches pod `namespace/name` as the admin; panics unless 200.
    pub fn patch_pod(&self, namespace: &str, name: &str, patch: &Value) -> Value {
        let (code, body) = self.api("PATCH", &format!("/api/v1/namespaces/{namespace}/pods/{name}"), Some(patch));
        assert_eq!(code, 200, "PATCH pod {namespace}/{name}: {body}");
        body
    }

    /// Deletes pod `namespace/name` as a user would (graceful unless `grace` is Some(0));
    /// returns the answer (the pod with its deletionTimestamp while the node has not
    /// deleted it yet).
    pub fn delete_pod(&self, namespace: &str, name: &str, grace: Option<i64>) -> Value {
        let mut path = format!("/api/v1/namespaces/{namespace}/pods/{name}");
        if let Some(g) = grace {
            path.push_str(&format!("?gracePeriodSeconds={g}"));
        }
        let (code, body) = self.api("DELETE", &path, None);
        assert_eq!(code, 200, "DELETE pod {namespace}/{name}: {body}");
        body
    }

    pub fn pod(&self, namespace: &str, name: &str) -> Option<Value> {
        self.get(&format!("/api/v1/namespaces/{namespace}/pods/{name}"))
    }
    pub fn node(&self, name: &str) -> Option<Value> {
        self.get(&format!("/api/v1/nodes/{name}"))
    }
    pub fn lease(&self, name: &str) -> Option<Value> {
        self.get(&format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"))
    }
    pub fn config_map(&self, namespace: &str, name: &str) -> Option<Value> {
        self.get(&format!("/api/v1/namespaces/{namespace}/configmaps/{name}"))
    }
    pub fn secret(&self, namespace: &str, name: &str) -> Option<Value> {
        self.get(&format!("/api/v1/namespaces/{namespace}/secrets/{name}"))
    }
    pub fn service_account(&self, namespace: &str, name: &str) -> Option<Value> {
        self.get(&format!("/api/v1/namespaces/{namespace}/serviceaccounts/{name}"))
    }

    /// Creates ConfigMap `namespace/name` whose `data` is `data` (a JSON object of strings);
    /// panics unless 201.
    pub fn create_config_map(&self, namespace: &str, name: &str, data: &Value) -> Value {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data});
        self.create(&format!("/api/v1/namespaces/{namespace}/configmaps"), &cm)
    }

    /// Replaces the `data` of ConfigMap `namespace/name` (PUT of the stored object: keys not
    /// in `data` go); returns the updated object.
    pub fn update_config_map(&self, namespace: &str, name: &str, data: &Value) -> Value {
        let path = format!("/api/v1/namespaces/{namespace}/configmaps/{name}");
        let mut cm = self.get(&path).unwrap_or_else(|| panic!("no ConfigMap {namespace}/{name}"));
        cm["data"] = data.clone();
        let (code, body) = self.api("PUT", &path, Some(&cm));
        assert_eq!(code, 200, "PUT {path}: {body}");
        body
    }

    /// Creates Secret `namespace/name` of type `type_` (`Opaque`, `kubernetes.io/dockerconfigjson`,
    /// ...) holding `data` (base64-encoded here); panics unless 201.
    pub fn create_secret(&self, namespace: &str, name: &str, type_: &str, data: &[(&str, &[u8])]) -> Value {
        let b64 = base64::engine::general_purpose::STANDARD;
        let data: serde_json::Map<String, Value> =
            data.iter().map(|(k, v)| (k.to_string(), Value::String(b64.encode(v)))).collect();
        let secret =
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": type_, "data": data});
        self.create(&format!("/api/v1/namespaces/{namespace}/secrets"), &secret)
    }

    /// Deletes the object at `path` as the admin; panics unless 200. Returns the answer (a
    /// Status, or a pod with its deletionTimestamp).
    pub fn delete_object(&self, path: &str) -> Value {
        let (code, body) = self.api("DELETE", path, None);
        assert_eq!(code, 200, "DELETE {path}: {body}");
        body
    }

    /// The events in `namespace`.
    pub fn events(&self, namespace: &str) -> Vec<Value> {
        let list = self.get(&format!("/api/v1/namespaces/{namespace}/events")).unwrap();
        list["items"].as_array().cloned().unwrap_or_default()
    }

    // ---- faults ---------------------------------------------------------------------------

    fn control_post(&self, op: &str, body: &Value) -> Value {
        let url = format!("{}/control/{op}", self.control_url());
        let (code, answer) = send(&self.control, "POST", &url, Some(("application/json", body)));
        assert_eq!(code, 200, "control {op} {body}: {answer}");
        answer
    }

    fn control_op(&self, method: &str, op: &str) -> Value {
        let (code, body) = send(&self.control, method, &format!("{}/control/{op}", self.control_url()), None);
        assert_eq!(code, 200, "control {op}: {body}");
        body
    }

    /// Down: the TLS port refuses connections and every open one (watches too) drops,
    /// until `up`.
    pub fn down(&self) {
        self.control_op("POST", "down");
    }
    /// Up again, on the same port.
    pub fn up(&self) {
        self.control_op("POST", "up");
    }
    /// Delays every response of the TLS port by `delay` (zero: no delay).
    pub fn slow(&self, delay: Duration) {
        self.control_op("POST", &format!("slow?ms={}", delay.as_millis()));
    }
    /// The next `count` requests get HTTP `code` (500, 503, 429 or 504: a `Status` as the
    /// apiserver's, `Retry-After: 1` for 429 and 503) without being served.
    pub fn fail_next(&self, count: u32, code: u16) {
        self.fail_next_matching(count, code, "", false);
    }
    /// As `fail_next`, for requests whose path contains `path` only; with `after`, the
    /// request is served (its change stored) and then the error is answered.
    pub fn fail_next_matching(&self, count: u32, code: u16, path: &str, after: bool) {
        let path: String = path.bytes().map(|b| format!("%{b:02X}")).collect();
        self.control_op("POST", &format!("fail?count={count}&code={code}&path={path}&after={after}"));
    }
    /// Ends every open watch stream; returns how many there were.
    pub fn cut_watches(&self, mode: CutMode) -> u64 {
        let mode = match mode {
            CutMode::Abrupt => "abrupt",
            CutMode::Clean => "clean",
            CutMode::Partial => "partial",
        };
        self.control_op("POST", &format!("cut-watches?mode={mode}"))["cut"].as_u64().unwrap()
    }
    /// Forgets the change history: watches from any older resourceVersion get 410 Gone.
    /// Returns the current resourceVersion.
    pub fn compact(&self) -> String {
        self.control_op("POST", "compact")["compacted"].as_str().unwrap().to_string()
    }
    /// Sends a BOOKMARK to the watches that allow them.
    pub fn bookmark(&self) -> u64 {
        self.control_op("POST", "bookmark")["sent"].as_u64().unwrap()
    }
    /// No delay, no failures, up.
    pub fn reset_faults(&self) {
        self.control_op("POST", "reset-faults");
    }

    // ---- identities and authorization ---------------------------------------------------------

    /// Bearer token `token` authenticates (requests to this server, TokenReviews) as `user`
    /// in `groups` (and `system:authenticated`), as a static token file's line would.
    pub fn add_token(&self, token: &str, user: &str, groups: &[&str]) {
        self.control_post("static-token", &json!({"token": token, "user": user, "groups": groups}));
    }
    /// Allows `user` the `verbs` on `resource`/`subresource` (`""`: the resource itself, `"*"`:
    /// any) in any namespace, name and API group: `allow("alice", &["get", "create"], "nodes",
    /// "proxy")`. Such rules answer SubjectAccessReviews and authorize the user's requests to
    /// this server (e.g. `get pods` and `create pods/exec` for `kubectl exec`).
    pub fn allow(&self, user: &str, verbs: &[&str], resource: &str, subresource: &str) {
        self.allow_rule(&json!({"user": user, "verbs": verbs, "resource": resource, "subresource": subresource}));
    }
    /// A rule as the control port takes it: `user` or `group`, `verbs`, then `resource` with
    /// `subresource`, `apiGroup`, `namespace`, `name` (absent: any), or `nonResourceURLs`.
    pub fn allow_rule(&self, rule: &Value) {
        self.control_post("allow", rule);
    }
    /// As `allow_rule`, but SubjectAccessReviews that match answer `denied: true` (as a webhook
    /// authorizer's explicit denial) and requests get 403.
    pub fn deny_rule(&self, rule: &Value) {
        self.control_post("deny", rule);
    }
    /// Forgets every rule.
    pub fn reset_rules(&self) {
        self.control_op("POST", "reset-rules");
    }
    /// How an upgraded (exec, attach, port-forward) connection ends: false (default) passes a
    /// half-close of either side on to the other; true closes both at the first end, as the
    /// real apiserver's UpgradeAwareHandler does.
    pub fn upgrade_close_both(&self, both: bool) {
        self.control_op("POST", &format!("upgrade-close?mode={}", if both { "both" } else { "half" }));
    }
    /// How many TokenReviews this server answered.
    pub fn token_reviews(&self) -> u64 {
        self.counters()["tokenreviews"].as_u64().unwrap()
    }
    /// How many SubjectAccessReviews this server answered.
    pub fn subject_access_reviews(&self) -> u64 {
        self.counters()["subjectaccessreviews"].as_u64().unwrap()
    }
    /// Every TokenReview and SubjectAccessReview answered, oldest first: time, kind, user
    /// (who asked), spec, status.
    pub fn reviews(&self) -> Vec<Value> {
        self.control_op("GET", "reviews")["reviews"].as_array().cloned().unwrap_or_default()
    }

    // ---- TLS bootstrap: bootstrap tokens, CertificateSigningRequests, the cluster CA -----------

    /// Creates a bootstrap token as `kubeadm token create` does, and the RBAC `kubeadm init`
    /// gives its group: the `bootstrap-token-<id>` Secret in kube-system (type
    /// `bootstrap.kubernetes.io/token`, usable for authentication and signing, expiring after
    /// `ttl`, in `extra_group`, by default kubeadm's `system:bootstrappers:kubeadm:default-node-token`),
    /// and rules that let that group create, get, list and watch CSRs (`system:node-bootstrapper`),
    /// have kubelet client CSRs auto-approved (`.../nodeclient`) and get Nodes
    /// (`kubeadm:get-nodes`). Returns the token, `<id>.<secret>` (random).
    pub fn create_bootstrap_token(&self, extra_group: Option<&str>, ttl: Duration) -> String {
        let random = ferrolet::base::random::random_id();
        let (id, secret) = (&random[..6], &random[6..22]);
        let group = extra_group.unwrap_or(KUBEADM_NODE_TOKEN_GROUP);
        let expiration = ferrolet::base::timefmt::rfc3339(SystemTime::now() + ttl);
        let token_secret = json!({
            "apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
            "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
            "stringData": {"token-id": id, "token-secret": secret, "expiration": expiration,
                           "usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
                           "auth-extra-groups": group}});
        self.create("/api/v1/namespaces/kube-system/secrets", &token_secret);
        let csrs = json!({"apiGroup": "certificates.k8s.io", "resource": "certificatesigningrequests"});
        for (binding, role, verbs, subresource, target) in [
            (
                "kubeadm:kubelet-bootstrap",
                "system:node-bootstrapper",
                &["create", "get", "list", "watch"][..],
                "",
                &csrs,
            ),
            (
                "kubeadm:node-autoapprove-bootstrap",
                "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
                &["create"][..],
                "nodeclient",
                &csrs,
            ),
            ("kubeadm:get-nodes", "kubeadm:get-nodes", &["get"][..], "", &json!({"apiGroup": "", "resource": "nodes"})),
        ] {
            let mut rule = json!({"group": group, "verbs": verbs, "subresource": subresource, "binding": binding,
                                  "role": role});
            rule.as_object_mut().unwrap().extend(target.as_object().unwrap().clone());
            self.allow_rule(&rule);
        }
        format!("{id}.{secret}")
    }

    /// A kubeconfig with bootstrap token `token`, as kubeadm writes `bootstrap-kubelet.conf`
    /// (server, CA inline, user `tls-bootstrap-token-user`), at `DIR/bootstrap-kubelet-<id>.conf`.
    pub fn bootstrap_kubeconfig(&self, token: &str) -> PathBuf {
        let id = token.split('.').next().unwrap_or(token);
        let path = self.dir().join(format!("bootstrap-kubelet-{id}.conf"));
        let ca = base64::engine::general_purpose::STANDARD.encode(std::fs::read(self.ca_cert()).unwrap());
        let text = format!(
            "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: {}\n  name: kubernetes\n\
             contexts:\n- context:\n    cluster: kubernetes\n    user: tls-bootstrap-token-user\n  \
             name: tls-bootstrap-token-user@kubernetes\ncurrent-context: tls-bootstrap-token-user@kubernetes\n\
             kind: Config\npreferences: {{}}\nusers:\n- name: tls-bootstrap-token-user\n  user:\n    token: {token}\n",
            self.url()
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A ureq agent trusting the test CA that sends `Authorization: Bearer <token>` and no
    /// client certificate (a bootstrap token's, a static token's).
    pub fn bearer_agent(&self, token: &str) -> ureq::Agent {
        use ureq::tls::{Certificate, RootCerts, TlsConfig};
        let ca = Certificate::from_pem(&std::fs::read(self.ca_cert()).unwrap()).unwrap();
        let tls = TlsConfig::builder().root_certs(RootCerts::new_with_certs(&[ca])).build();
        let header = ureq::http::HeaderValue::from_str(&format!("Bearer {token}")).unwrap();
        ureq::Agent::config_builder()
            .tls_config(tls)
            .http_status_as_error(false)
            .timeout_global(Some(REQUEST_TIMEOUT))
            .middleware(move |mut req: ureq::http::Request<ureq::SendBody>, next: ureq::middleware::MiddlewareNext| {
                req.headers_mut().insert("Authorization", header.clone());
                next.handle(req)
            })
            .build()
            .into()
    }

    /// Every CSR, in the order they were created: name, uid, requester (username, uid, groups,
    /// extra), signerName, usages, expirationSeconds, conditions, and the issued certificate as
    /// `openssl x509` reads it (`subject` `/O=../CN=..`, `issuer`, `serial`, `notBefore`,
    /// `notAfter` (RFC 3339) and `notBeforeUnix`, `notAfterUnix`, `sans` (`DNS:x`, `IP:a.b.c.d`),
    /// `keyUsage`, `extendedKeyUsage` (openssl's words), `isCA`), or null.
    pub fn csrs(&self) -> Vec<Value> {
        self.control_op("GET", "csrs")["csrs"].as_array().cloned().unwrap_or_default()
    }
    /// CertificateSigningRequest `name` as stored, or `None`.
    pub fn csr(&self, name: &str) -> Option<Value> {
        self.get(&format!("{CSRS}/{name}"))
    }
    /// Waits until CSR `name` satisfies `done` (e.g. it has a certificate) and returns it.
    pub fn wait_for_csr(&self, name: &str, what: &str, timeout: Duration, done: impl Fn(&Value) -> bool) -> Value {
        super::wait_for(&format!("CSR {name} {what}"), timeout, || self.csr(name).filter(|c| done(c)))
    }
    /// Adds a condition (`Approved` or `Denied`, status True) to CSR `name` through its
    /// approval subresource as the admin, as `kubectl certificate approve|deny` does, whatever
    /// the answer: (status, body).
    pub fn csr_approval(&self, name: &str, condition: &str, reason: &str, message: &str) -> (u16, Value) {
        let mut csr = self.csr(name).unwrap_or_else(|| panic!("no CSR {name}"));
        let conditions = csr["status"].as_object_mut().map(|s| s.entry("conditions").or_insert(json!([])));
        let Some(Value::Array(conditions)) = conditions else { panic!("CSR {name} has no status: {csr}") };
        conditions.push(json!({"type": condition, "status": "True", "reason": reason, "message": message}));
        self.api("PUT", &format!("{CSRS}/{name}/approval"), Some(&csr))
    }
    /// Approves CSR `name` as `kubectl certificate approve` does (reason `KubectlApprove`);
    /// panics unless the update succeeds.
    pub fn approve_csr(&self, name: &str) {
        let (code, body) = self.csr_approval(
            name,
            "Approved",
            "KubectlApprove",
            "This CSR was approved by kubectl certificate approve.",
        );
        assert_eq!(code, 200, "approve CSR {name}: {body}");
    }
    /// Denies CSR `name` with `reason` and `message`, as `kubectl certificate deny` does;
    /// panics unless the update succeeds.
    pub fn deny_csr(&self, name: &str, reason: &str, message: &str) {
        let (code, body) = self.csr_approval(name, "Denied", reason, message);
        assert_eq!(code, 200, "deny CSR {name}: {body}");
    }
    /// Turns kube-controller-manager's CSR approver (csrapproving) off, so that CSRs stay
    /// pending until a test approves or denies them, or on again (it then looks at every CSR).
    pub fn set_csr_approver(&self, on: bool) {
        self.control_op("POST", &format!("csr-approver?on={on}"));
    }
    /// kube-controller-manager's `--cluster-signing-duration` (default a year): the longest
    /// certificate the signer issues, and what it issues when a CSR asks for no
    /// `expirationSeconds`. Below 10 minutes is allowed here (the tests' rotations).
    pub fn set_signing_duration(&self, duration: Duration) {
        self.control_op("POST", &format!("signing-duration?seconds={}", duration.as_secs().max(1)));
    }
    /// A new EC P-256 key and a client certificate of the cluster CA for it (CN `cn`, one O per
    /// group, usages digital signature and client auth) valid from `not_before` to `not_after`,
    /// in the past if need be (an expired certificate): (certificate PEM, key PEM).
    pub fn issue_cert(
        &self,
        cn: &str,
        groups: &[&str],
        not_before: SystemTime,
        not_after: SystemTime,
    ) -> (String, String) {
        use ferrolet::base::timefmt::rfc3339;
        let body =
            json!({"cn": cn, "groups": groups, "not_before": rfc3339(not_before), "not_after": rfc3339(not_after)});
        let answer = self.control_post("issue-cert", &body);
        (answer["cert"].as_str().unwrap().to_string(), answer["key"].as_str().unwrap().to_string())
    }

    // ---- what happened -----------------------------------------------------------------------

    /// Every request the TLS port served, in order.
    pub fn requests(&self) -> Vec<RequestRecord> {
        serde_json::from_value(self.control_op("GET", "requests")["requests"].clone()).unwrap()
    }
    /// Counters: requests, by_verb, by_status, by_user, tls_handshake_failures,
    /// watch_events_sent, internal_errors, open_watches, resourceVersion, tokenreviews,
    /// subjectaccessreviews.
    pub fn counters(&self) -> Value {
        self.control_op("GET", "counters")
    }
    /// Every stored object, with the current resourceVersion.
    pub fn objects(&self) -> Value {
        self.control_op("GET", "objects")
    }
    /// Objects rejected by validation: user, verb, resource, name, errors, object.
    pub fn validation_failures(&self) -> Vec<Value> {
        self.control_op("GET", "validation-failures")["failures"].as_array().cloned().unwrap_or_default()
    }
    /// Panics with the failures if anything the node wrote failed validation.
    pub fn assert_no_validation_failures(&self) {
        let user = node_user(&self.node);
        let mine: Vec<Value> = self.validation_failures().into_iter().filter(|f| f["user"] == user.as_str()).collect();
        assert!(mine.is_empty(), "objects written by {user} failed validation:\n{mine:#?}");
    }
    /// Every service account token issued, oldest first: time, user, namespace,
    /// serviceaccount, pod, pod_uid, node, audiences, expirationSeconds (asked), iat, exp and
    /// warnafter (Unix seconds), jti.
    pub fn tokens_issued(&self) -> Vec<Value> {
        self.control_op("GET", "tokens")["tokens"].as_array().cloned().unwrap_or_default()
    }

    /// The claims of JWT `token`, which must be one this server signed (panics otherwise).
    pub fn jwt_claims(&self, token: &str) -> Value {
        assert!(self.jwt_signed_here(token), "not a token signed by this fake apiserver: {token}");
        let payload = token.split('.').nth(1).unwrap();
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    /// Whether JWT `token` (header.payload.signature, base64url) carries a valid RS256
    /// signature by this server's token key.
    pub fn jwt_signed_here(&self, token: &str) -> bool {
        let parts: Vec<&str> = token.split('.').collect();
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let (3, Ok(signature)) = (parts.len(), b64.decode(parts[2])) else { return false };
        // ring wants the PKCS#1 RSAPublicKey; openssl turns the PEM into it.
        let out = Command::new("openssl")
            .args(["rsa", "-pubin", "-RSAPublicKey_out", "-outform", "DER", "-in"])
            .arg(self.token_key_path())
            .output()
            .unwrap();
        assert!(out.status.success(), "openssl rsa: {}", String::from_utf8_lossy(&out.stderr));
        let key = ring::signature::UnparsedPublicKey::new(&ring::signature::RSA_PKCS1_2048_8192_SHA256, out.stdout);
        key.verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &signature).is_ok()
    }

    /// The open watches: user, path, resource.
    pub fn watches(&self) -> Vec<Value> {
        self.control_op("GET", "watches")["watches"].as_array().cloned().unwrap_or_default()
    }
    /// Waits until `user` has `count` watches open.
    pub fn wait_for_watches(&self, user: &str, count: usize, timeout: Duration) {
        super::wait_for(&format!("{count} watch(es) of {user}"), timeout, || {
            (self.watches().iter().filter(|w| w["user"] == user).count() >= count).then_some(())
        });
    }

    // ---- kubectl ---------------------------------------------------------------------------

    /// `kubectl ARGS` with the admin kubeconfig; its stdout, or a panic with its stderr.
    pub fn kubectl(&self, args: &[&str]) -> String {
        let out = self.kubectl_output(args);
        assert!(
            out.status.success(),
            "kubectl {}: {}\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `kubectl ARGS` with the admin kubeconfig, whatever its exit status.
    pub fn kubectl_output(&self, args: &[&str]) -> Output {
        self.kubectl_as(&self.admin_kubeconfig(), args)
    }

    /// `kubectl ARGS` with `kubeconfig` (the node's, say), whatever its exit status.
    pub fn kubectl_as(&self, kubeconfig: &Path, args: &[&str]) -> Output {
        self.kubectl_with(kubeconfig, args, &[], None)
    }

    /// `kubectl ARGS` with `kubeconfig`, the environment variables `env` (e.g.
    /// `KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false`) and `stdin` (None: /dev/null), whatever its
    /// exit status.
    pub fn kubectl_with(&self, kubeconfig: &Path, args: &[&str], env: &[(&str, &str)], stdin: Option<&[u8]>) -> Output {
        use std::io::Write;
        let mut child = Command::new(self.venv.join("bin/kubectl"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir().join("kube-cache"))
            .args(args)
            .env_remove("KUBECONFIG")
            .envs(env.iter().copied())
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if let Some(data) = stdin {
            let mut pipe = child.stdin.take().unwrap();
            let data = data.to_vec();
            // A writer of its own: kubectl may not read all of it before it writes output.
            std::thread::spawn(move || {
                let _ = pipe.write_all(&data);
            });
        }
        child.wait_with_output().unwrap()
    }
}

impl Drop for FakeApiserver {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("fake apiserver log (end):\n{}", self.log_tail());
        }
        // Only our own child: `Child::kill` signals the pid we spawned, which cannot have
        // been reused while it is not reaped, and the ready file said this pid serves.
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

fn key_type_name(key_type: KeyType) -> &'static str {
    match key_type {
        KeyType::Rsa => "rsa",
        KeyType::Ec => "ec",
    }
}

/// A PKCS#10 request made by `openssl req` with a new EC P-256 key, for subject `subject`
/// (`/O=system:nodes/CN=system:node:X`) and, if given, subjectAltNames `san`
/// (`DNS:x,IP:192.0.2.10`): (request PEM, key PEM), as a kubelet would make them.
pub fn openssl_csr(subject: &str, san: Option<&str>) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key.pem");
    let mut cmd = Command::new("openssl");
    cmd.args(["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", subject])
        .arg("-keyout")
        .arg(&key);
    if let Some(san) = san {
        cmd.args(["-addext", &format!("subjectAltName={san}")]);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "openssl req: {}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8(out.stdout).unwrap(), std::fs::read_to_string(key).unwrap())
}

/// `method url` with `agent` and an optional (content type, JSON body).
pub fn send(agent: &ureq::Agent, method: &str, url: &str, body: Option<(&str, &Value)>) -> (u16, Value) {
    let data = body.map(|(_, b)| serde_json::to_vec(b).unwrap());
    let ctype = body.map(|(c, _)| c).unwrap_or("application/json");
    let result = match (method, data) {
        ("GET", _) => agent.get(url).call(),
        ("DELETE", None) => agent.delete(url).call(),
        ("DELETE", Some(d)) => agent.delete(url).force_send_body().header("Content-Type", ctype).send(&d[..]),
        ("POST", d) => agent.post(url).header("Content-Type", ctype).send(&d.unwrap_or_default()[..]),
        ("PUT", d) => agent.put(url).header("Content-Type", ctype).send(&d.unwrap_or_default()[..]),
        ("PATCH", d) => agent.patch(url).header("Content-Type", ctype).send(&d.unwrap_or_default()[..]),
        (m, _) => panic!("unsupported method {m}"),
    };
    let resp = result.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let code = resp.status().as_u16();
    let text = resp.into_body().read_to_string().unwrap_or_default();
    (code, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// A watch stream read on a thread of its own: events come out of `next` with a timeout.
pub struct WatchStream {
    events: crossbeam_channel::Receiver<Result<Value, String>>,
    /// The HTTP status of the watch request.
    pub status: u16,
}

impl WatchStream {
    /// Opens the watch `path` (with `watch=true` in its query) on the TLS port with `agent`.
    pub fn open(server: &FakeApiserver, agent: &ureq::Agent, path: &str) -> WatchStream {
        let url = format!("{}{path}", server.url());
        let resp = agent.get(&url).call().unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let status = resp.status().as_u16();
        let (tx, rx) = crossbeam_channel::unbounded();
        let reader = std::io::BufReader::new(resp.into_body().into_reader());
        std::thread::Builder::new()
            .name("fl-test-watch".into())
            .spawn(move || {
                for line in reader.lines() {
                    let item = line.map_err(|e| e.to_string()).and_then(|l| {
                        serde_json::from_str::<Value>(&l).map_err(|e| format!("not a JSON event: {l:?}: {e}"))
                    });
                    let failed = item.is_err();
                    if tx.send(item).is_err() || failed {
                        return;
                    }
                }
            })
            .unwrap();
        WatchStream { events: rx, status }
    }

    /// The next event; `Err` when the stream broke (the read failed, or half an event),
    /// `Ok(None)` when it ended cleanly. Panics after `timeout` without either.
    pub fn next(&self, timeout: Duration) -> Result<Option<Value>, String> {
        match self.events.recv_timeout(timeout) {
            Ok(Ok(v)) => Ok(Some(v)),
            Ok(Err(e)) => Err(e),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Ok(None),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => panic!("no watch event within {timeout:?}"),
        }
    }

    /// The next event, which must be there within `timeout`.
    pub fn event(&self, timeout: Duration) -> Value {
        match self.next(timeout) {
            Ok(Some(v)) => v,
            other => panic!("expected a watch event, got {other:?}"),
        }
    }
}
