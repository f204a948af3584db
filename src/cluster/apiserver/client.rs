//! Requests to the kube-apiserver: one ureq agent over rustls with the kubeconfig's CA and
//! client certificate (or bearer token), a deadline on every request, and kubelet's
//! client-side rate limit (a token bucket: `kubeAPIQPS` 50, `kubeAPIBurst` 100). Answers
//! other than 2xx are errors carrying the apiserver's `Status` reason and message.

use super::kubeconfig::{Auth, Connection};
use parking_lot::Mutex;
use std::time::{Duration, Instant};

/// The most an answer may hold (a pod list of a full node is far below it).
pub const MAX_BODY_BYTES: u64 = 32 << 20;
/// The most a token file may hold.
const MAX_TOKEN_BYTES: u64 = 64 << 10;
/// Largest CA bundle read (Debian's whole bundle is about 220 KB).
const MAX_CA_BYTES: u64 = 4 << 20;
/// The system's CA bundle, used when the kubeconfig names no CA (kubectl uses the system's
/// roots too): `$SSL_CERT_FILE`, or the first of these that exists (Debian, Ubuntu and
/// Alpine; Fedora and RHEL; OpenSSL's default elsewhere).
const SYSTEM_CA_BUNDLES: [&str; 3] =
    ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"];

/// The client's limits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClientSettings {
    /// Deadline of each request (connect, send, answer).
    pub timeout: Duration,
    /// Requests per second on average (kubelet's `kubeAPIQPS`).
    pub qps: f64,
    /// Requests at once above the average (kubelet's `kubeAPIBurst`).
    pub burst: u32,
}

impl Default for ClientSettings {
    fn default() -> Self {
        ClientSettings { timeout: Duration::from_secs(10), qps: 50.0, burst: 100 }
    }
}

/// A request that failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The kubeconfig's certificates or key cannot be used.
    #[error("the kubeconfig's {what} cannot be used")]
    Credentials {
        /// `CA`, `client certificate`, `client key`.
        what: &'static str,
        /// Why.
        #[source]
        source: ureq::Error,
    },
    /// The kubeconfig names no CA, and the system's bundle cannot be read.
    #[error("the kubeconfig names no certificate authority, and the system's CA bundle {} cannot be read", path.display())]
    SystemCa {
        /// The bundle tried.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: crate::base::inputfile::InputFileError,
    },
    /// The token file cannot be read.
    #[error("token file {}", path.display())]
    TokenFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: crate::base::inputfile::InputFileError,
    },
    /// No answer: the apiserver cannot be reached, or did not answer in time.
    #[error("{method} {url}")]
    Transport {
        /// The method.
        method: &'static str,
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: ureq::Error,
    },
    /// The node has no credentials yet (TLS bootstrap has not got a certificate): the
    /// apiserver is as good as away.
    #[error("no client certificate yet: {why}")]
    NoCredentials {
        /// What it waits for.
        why: String,
    },
    /// An answer other than 2xx.
    #[error("{method} {url}: HTTP {code}{}{}", if reason.is_empty() { String::new() } else { format!(" {reason}") }, if message.is_empty() { String::new() } else { format!(": {message}") })]
    Status {
        /// The method.
        method: &'static str,
        /// The URL.
        url: String,
        /// The HTTP status.
        code: u16,
        /// The `Status` object's `reason` (`NotFound`, `Conflict`, `Forbidden`, `Gone`).
        reason: String,
        /// The `Status` object's `message`.
        message: String,
    },
    /// A 2xx answer that is not what was asked for.
    #[error("{method} {url}: the answer is not a {what}: {message}")]
    Decode {
        /// The method.
        method: &'static str,
        /// The URL.
        url: String,
        /// What was expected.
        what: &'static str,
        /// Why.
        message: String,
    },
}

impl ApiError {
    /// The HTTP status of an answer other than 2xx.
    pub fn code(&self) -> Option<u16> {
        match self {
            ApiError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the apiserver could not be reached or did not answer (as opposed to an
    /// answer that refused the request).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, ApiError::Transport { .. } | ApiError::NoCredentials { .. })
            || self.code().is_some_and(|c| c >= 500 || c == 429)
    }

    /// An answer with HTTP status `code` and nothing else (for tests).
    #[cfg(test)]
    pub(crate) fn with_code(code: u16) -> ApiError {
        ApiError::Status { method: "GET", url: "u".into(), code, reason: String::new(), message: String::new() }
    }

    /// Whether the apiserver is away: no answer at all, or a gateway or availability error
    /// (502, 503, 504) in front of it. Other 5xx and 429 are a busy apiserver, still there;
    /// an answer over `MAX_BODY_BYTES` came from an apiserver that is there.
    pub fn is_away(&self) -> bool {
        (matches!(self, ApiError::Transport { .. }) && !self.is_too_large())
            || matches!(self, ApiError::NoCredentials { .. })
            || matches!(self.code(), Some(502..=504))
    }

    /// Whether the answer was larger than `MAX_BODY_BYTES`.
    pub fn is_too_large(&self) -> bool {
        matches!(self, ApiError::Transport { source: ureq::Error::BodyExceedsLimit(_), .. })
    }
}

/// Kubelet's client-side rate limit: `qps` requests a second on average, `burst` at once.
/// Pure: `reserve` says how long a request made at `now` must wait.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket at `now`.
    pub fn new(qps: f64, burst: u32, now: Instant) -> TokenBucket {
        let burst = f64::from(burst.max(1));
        TokenBucket { qps: qps.max(0.001), burst, tokens: burst, last: now }
    }

    /// Takes a token for a request at `now`; returns how long it must wait for it (zero
    /// when one is there).
    pub fn reserve(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
}

/// The certificates of a PEM bundle (other items, such as keys, are passed over).
fn pem_certificates(pem: &[u8]) -> Result<Vec<ureq::tls::Certificate<'static>>, ureq::Error> {
    ureq::tls::parse_pem(pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(Ok(c)),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        })
        .collect()
}

/// The CA bundle to trust when the kubeconfig names none (`SYSTEM_CA_BUNDLES`).
fn system_ca_bundle() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("SSL_CERT_FILE") {
        return p.into();
    }
    let found = SYSTEM_CA_BUNDLES.iter().find(|p| std::path::Path::new(p).exists());
    found.unwrap_or(&SYSTEM_CA_BUNDLES[0]).into()
}

/// A client of one apiserver.
pub struct ApiClient {
    /// The server and how it is verified (`auth` is in `creds`).
    conn: Connection,
    settings: ClientSettings,
    creds: parking_lot::RwLock<Creds>,
    /// Ready after `set_client_cert` (one waiter: the pod watch, while TLS bootstrap waits).
    creds_set: (crossbeam_channel::Sender<()>, crossbeam_channel::Receiver<()>),
    limiter: Mutex<TokenBucket>,
    /// Requests made (sent, whatever their answer), for `/metrics`.
    pub requests: crate::base::metrics::Counter,
}

/// The credentials requests go with: the agent (its TLS holds the client certificate) and
/// the bearer token, if any; no agent while TLS bootstrap waits for a certificate.
struct Creds {
    agent: Result<ureq::Agent, String>,
    auth: Auth,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClient").field("server", &self.conn.server).field("auth", &self.creds.read().auth).finish()
    }
}

impl ApiClient {
    /// A client of the apiserver `conn` describes.
    pub fn new(conn: &Connection, settings: ClientSettings) -> Result<ApiClient, ApiError> {
        let agent = agent(conn, settings)?;
        Ok(ApiClient::with(conn, settings, Creds { agent: Ok(agent), auth: conn.auth.clone() }))
    }

    /// A client of the apiserver `conn` describes (its `auth` is not used) that has no
    /// credentials yet: every request is `ApiError::NoCredentials` with `why` until
    /// `set_client_cert`.
    pub fn without_credentials(conn: &Connection, settings: ClientSettings, why: &str) -> ApiClient {
        ApiClient::with(conn, settings, Creds { agent: Err(why.into()), auth: Auth::Anonymous })
    }

    fn with(conn: &Connection, settings: ClientSettings, creds: Creds) -> ApiClient {
        ApiClient {
            conn: Connection { auth: Auth::Anonymous, ..conn.clone() },
            settings,
            creds: parking_lot::RwLock::new(creds),
            creds_set: crossbeam_channel::bounded(1),
            limiter: Mutex::new(TokenBucket::new(settings.qps, settings.burst, Instant::now())),
            requests: Default::default(),
        }
    }

    /// Requests made from now on authenticate with the client certificate `cert` (PEM
    /// chain) and its `key`; those in flight finish with the credentials they started
    /// with. The pair is checked first: one that cannot be used changes nothing.
    pub fn set_client_cert(&self, cert: &[u8], key: &[u8]) -> Result<(), ApiError> {
        let auth = Auth::ClientCert { cert: cert.to_vec(), key: key.to_vec() };
        let agent = agent(&Connection { auth: auth.clone(), ..self.conn.clone() }, self.settings)?;
        *self.creds.write() = Creds { agent: Ok(agent), auth };
        let _ = self.creds_set.0.try_send(());
        Ok(())
    }

    /// Ready once credentials were set (`set_client_cert`): what to wait on while requests
    /// are `ApiError::NoCredentials`.
    pub fn credentials_set(&self) -> &crossbeam_channel::Receiver<()> {
        &self.creds_set.1
    }

    /// A client of the same apiserver, with the same limits, that authenticates with the
    /// client certificate `cert` and its `key` (to try a new pair before switching to it).
    pub fn with_client_cert(&self, cert: &[u8], key: &[u8]) -> Result<ApiClient, ApiError> {
        let conn =
            Connection { auth: Auth::ClientCert { cert: cert.to_vec(), key: key.to_vec() }, ..self.conn.clone() };
        ApiClient::new(&conn, self.settings)
    }

    /// Whether requests have credentials (TLS bootstrap is not waiting for them).
    pub fn has_credentials(&self) -> bool {
        self.creds.read().agent.is_ok()
    }

    /// The `Authorization` header, if any (a token file is read now: it may be rotated).
    fn authorization(auth: &Auth) -> Result<Option<String>, ApiError> {
        match auth {
            Auth::Token(t) => Ok(Some(format!("Bearer {t}"))),
            Auth::TokenFile(path) => {
                let t = crate::base::inputfile::read_to_string(path, MAX_TOKEN_BYTES)
                    .map_err(|source| ApiError::TokenFile { path: path.clone(), source })?;
                Ok(Some(format!("Bearer {}", t.trim())))
            }
            Auth::ClientCert { .. } | Auth::Anonymous => Ok(None),
        }
    }

    /// Sends `method path` (with `body` of `content_type`), waiting for the rate limit
    /// first; returns the 2xx answer's body, or the apiserver's refusal.
    pub fn send(&self, method: &'static str, path: &str, body: Option<(&str, &[u8])>) -> Result<Vec<u8>, ApiError> {
        let (url, resp) = self.run(method, path, body, None)?;
        let code = resp.status().as_u16();
        let bytes = resp
            .into_body()
            .with_config()
            .limit(MAX_BODY_BYTES)
            .read_to_vec()
            .map_err(|source| ApiError::Transport { method, url: url.clone(), source })?;
        if (200..300).contains(&code) {
            return Ok(bytes);
        }
        Err(status_error(method, url, code, &bytes))
    }

    /// Makes one request after the rate limit's wait; `timeout` replaces the client's.
    fn run(
        &self,
        method: &'static str,
        path: &str,
        body: Option<(&str, &[u8])>,
        timeout: Option<Duration>,
    ) -> Result<(String, ureq::http::Response<ureq::Body>), ApiError> {
        let wait = self.limiter.lock().reserve(Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        let (agent, auth) = {
            let creds = self.creds.read();
            let agent = creds.agent.clone().map_err(|why| ApiError::NoCredentials { why })?;
            (agent, ApiClient::authorization(&creds.auth)?)
        };
        let url = format!("{}{path}", self.conn.server);
        let transport = |source| ApiError::Transport { method, url: url.clone(), source };
        let mut req = ureq::http::Request::builder().method(method).uri(&url).header("Accept", "application/json");
        if let Some(auth) = auth {
            req = req.header("Authorization", auth);
        }
        if let Some((content_type, _)) = body {
            req = req.header("Content-Type", content_type);
        }
        let req = req.body(body.map(|(_, b)| b.to_vec()).unwrap_or_default()).map_err(|e| transport(e.into()))?;
        let req = match timeout {
            Some(t) => agent.configure_request(req).timeout_global(Some(t)).build(),
            None => req,
        };
        self.requests.inc();
        let resp = agent.run(req).map_err(transport)?;
        Ok((url, resp))
    }

    /// Opens a watch (`GET path` with `watch=true`), its stream ending by `timeout` at the
    /// latest; the lines are read with `WatchLines::next`.
    pub fn watch(&self, path: &str, timeout: Duration) -> Result<WatchLines, ApiError> {
        let (url, resp) = self.run("GET", path, None, Some(timeout))?;
        let code = resp.status().as_u16();
        let body = resp.into_body();
        if !(200..300).contains(&code) {
            let bytes = body.into_with_config().limit(MAX_BODY_BYTES).read_to_vec().unwrap_or_default();
            return Err(status_error("GET", url, code, &bytes));
        }
        let reader = std::io::BufReader::new(body.into_with_config().limit(u64::MAX).reader());
        Ok(WatchLines { reader, url })
    }

    /// `GET path`, decoded.
    pub fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, ApiError> {
        let bytes = self.send("GET", path, None)?;
        self.decode("GET", path, &bytes)
    }

    /// `method path` with `value` as JSON (`POST`, `PUT`), the answer decoded.
    pub fn write<T: serde::de::DeserializeOwned>(
        &self,
        method: &'static str,
        path: &str,
        value: &impl serde::Serialize,
    ) -> Result<T, ApiError> {
        let body = serde_json::to_vec(value).map_err(|e| ApiError::Decode {
            method,
            url: format!("{}{path}", self.conn.server),
            what: "request",
            message: e.to_string(),
        })?;
        let bytes = self.send(method, path, Some(("application/json", &body)))?;
        self.decode(method, path, &bytes)
    }

    /// `PATCH path` with a merge patch (`application/merge-patch+json`), the answer decoded.
    pub fn merge_patch<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        patch: &serde_json::Value,
    ) -> Result<T, ApiError> {
        let body = patch.to_string().into_bytes();
        let bytes = self.send("PATCH", path, Some(("application/merge-patch+json", &body)))?;
        self.decode("PATCH", path, &bytes)
    }

    fn decode<T: serde::de::DeserializeOwned>(
        &self,
        method: &'static str,
        path: &str,
        bytes: &[u8],
    ) -> Result<T, ApiError> {
        serde_json::from_slice(bytes).map_err(|e| ApiError::Decode {
            method,
            url: format!("{}{path}", self.conn.server),
            what: std::any::type_name::<T>().rsplit("::").next().unwrap_or("value"),
            message: e.to_string(),
        })
    }
}

/// The error for a non-2xx answer: the `Status` body's reason and message.
fn status_error(method: &'static str, url: String, code: u16, bytes: &[u8]) -> ApiError {
    let status: serde_json::Value = serde_json::from_slice(bytes).unwrap_or_default();
    let field = |k: &str| status.get(k).and_then(serde_json::Value::as_str).unwrap_or_default().to_string();
    ApiError::Status { method, url, code, reason: field("reason"), message: field("message") }
}

/// The HTTP agent for `conn`: its CA (or the system's), or no verification when it is
/// `insecure`; its client certificate, if any; `settings`' deadline.
fn agent(conn: &Connection, settings: ClientSettings) -> Result<ureq::Agent, ApiError> {
    use ureq::tls::{ClientCert, PrivateKey, RootCerts, TlsConfig};
    let mut tls = TlsConfig::builder().disable_verification(conn.insecure);
    if !conn.insecure {
        let system;
        let ca = match &conn.ca {
            Some(ca) => ca.as_slice(),
            None => {
                let path = system_ca_bundle();
                system = crate::base::inputfile::read_to_string(&path, MAX_CA_BYTES)
                    .map_err(|source| ApiError::SystemCa { path, source })?;
                system.as_bytes()
            }
        };
        let certs = pem_certificates(ca).map_err(|source| ApiError::Credentials { what: "CA", source })?;
        tls = tls.root_certs(RootCerts::new_with_certs(&certs));
    }
    if let Auth::ClientCert { cert, key } = &conn.auth {
        let chain =
            pem_certificates(cert).map_err(|source| ApiError::Credentials { what: "client certificate", source })?;
        let key = PrivateKey::from_pem(key).map_err(|source| ApiError::Credentials { what: "client key", source })?;
        tls = tls.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
    }
    // Each open connection holds its buffers: ureq's 128 KiB each way would be 10 MiB for
    // the watches of 40 ConfigMaps and Secrets. An apiserver's answer header is far below
    // 16 KiB, and a body streams through.
    let config = ureq::Agent::config_builder()
        .input_buffer_size(BUFFER_BYTES)
        .output_buffer_size(BUFFER_BYTES)
        .max_response_header_size(BUFFER_BYTES)
        .tls_config(tls.build())
        .timeout_global(Some(settings.timeout))
        .http_status_as_error(false)
        .user_agent(format!("ferrolet/{}", env!("CARGO_PKG_VERSION")))
        .build();
    Ok(config.into())
}

/// The size of a connection's input and output buffers, and the largest answer header.
const BUFFER_BYTES: usize = 16 << 10;

/// The longest line of a watch stream (one object).
pub const MAX_WATCH_LINE: u64 = 4 << 20;

/// The lines of an open watch.
pub struct WatchLines {
    reader: std::io::BufReader<ureq::BodyReader<'static>>,
    url: String,
}

impl WatchLines {
    /// The next line; `None` when the stream ended cleanly. A line longer than
    /// `MAX_WATCH_LINE` is an error (the watch is started again).
    pub fn next_line(&mut self) -> Result<Option<Vec<u8>>, ApiError> {
        use std::io::{BufRead, Read};
        let mut line = Vec::new();
        let n = (&mut self.reader)
            .take(MAX_WATCH_LINE + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| ApiError::Transport { method: "GET", url: self.url.clone(), source: e.into() })?;
        if n == 0 {
            return Ok(None);
        }
        if line.last() != Some(&b'\n') && n as u64 > MAX_WATCH_LINE {
            return Err(ApiError::Decode {
                method: "GET",
                url: self.url.clone(),
                what: "watch event",
                message: format!("a line is longer than {MAX_WATCH_LINE} bytes"),
            });
        }
        Ok(Some(line))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_lets_a_burst_through_then_paces_requests_at_qps() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(50.0, 100, t0);
        for _ in 0..100 {
            assert_eq!(b.reserve(t0), Duration::ZERO);
        }
        let wait = b.reserve(t0);
        assert!((wait.as_secs_f64() - 0.02).abs() < 1e-9, "{wait:?}");
        let wait = b.reserve(t0);
        assert!((wait.as_secs_f64() - 0.04).abs() < 1e-9, "reservations queue: {wait:?}");
        // A second later 50 tokens came back, of which two were already promised.
        let t1 = t0 + Duration::from_secs(1);
        for _ in 0..48 {
            assert_eq!(b.reserve(t1), Duration::ZERO);
        }
        assert!(b.reserve(t1) > Duration::ZERO);
    }

    #[test]
    fn refusals_carry_the_status_reason_and_unreachable_is_told_apart() {
        let e = ApiError::Status {
            method: "GET",
            url: "https://api:6443/api/v1/nodes/n1".into(),
            code: 404,
            reason: "NotFound".into(),
            message: "nodes \"n1\" not found".into(),
        };
        assert_eq!(e.to_string(), "GET https://api:6443/api/v1/nodes/n1: HTTP 404 NotFound: nodes \"n1\" not found");
        assert_eq!(e.code(), Some(404));
        assert!(!e.is_unreachable());
        let busy = ApiError::with_code(503);
        assert_eq!(busy.to_string(), "GET u: HTTP 503");
        assert!(busy.is_unreachable());
    }

    #[test]
    fn a_pem_that_is_not_one_is_a_credentials_error_naming_what() {
        let conn = Connection {
            server: "https://127.0.0.1:1".into(),
            ca: None,
            insecure: false,
            auth: Auth::ClientCert {
                cert: b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n".to_vec(),
                key: Vec::new(),
            },
        };
        let e = ApiClient::new(&conn, ClientSettings::default()).unwrap_err();
        assert!(e.to_string().starts_with("the kubeconfig's client "), "{e}");
    }
}
