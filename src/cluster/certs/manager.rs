//! `fl-certs`: gets the node's certificates from the cluster's CSR API and renews them.
//! One thread, at most two certificates (the client one, the kubelet API's serving one),
//! each a small state machine: idle until its renewal deadline, then a CSR filed, then
//! looked at (0.25 s, then doubling up to 30 s) until it is signed, denied or failed. It
//! never blocks on one CSR, so a serving certificate nobody approves does not hold up the
//! client certificate's renewal. A signed certificate is checked (its key, what it names),
//! written to the store, then put in use; anything that fails leaves the pair in use as it
//! was and is tried again after a back-off (`super::retry_after`).
//!
//! TLS bootstrap is the client certificate requested with the bootstrap kubeconfig (read
//! afresh at each attempt: an operator may drop in a new token): the key is kept in
//! `kubelet-client.key.tmp` until the certificate is in the store, and the CSR is named by
//! a digest of it (`csr::digested_name`), so a restart finds the CSR it filed instead of
//! filing another. The kubeconfig is written once the pair is in the store.

use super::csr::{self, Outcome};
use super::store::{CertStore, Pair};
use super::{rotation_deadline, Kind, Template};
use crate::base::errors::Chain;
use crate::base::manager::{Exit, StopSignal};
use crate::base::timefmt::rfc3339;
use crate::cluster::apiserver::client::{ApiClient, ClientSettings};
use crate::cluster::apiserver::kubeconfig::{self, Connection};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The bootstrap key, kept until its certificate is in the store (kubelet's name).
pub const BOOTSTRAP_KEY: &str = "kubelet-client.key.tmp";
/// The first look at a CSR after filing it (an approver that answers at once).
const FIRST_LOOK: Duration = Duration::from_millis(250);
/// The longest pause between two looks at a CSR.
const MAX_LOOK: Duration = Duration::from_secs(30);
/// How long a CSR is waited for before a new one is filed (kubelet waits an hour too).
const MAX_WAIT: Duration = Duration::from_secs(3600);
/// The longest sleep: the wall clock is read again at least this often (an edge device
/// that booted without a clock may have its time set later).
const MAX_SLEEP: Duration = Duration::from_secs(60);
/// The fewest failures a denial counts as: the next CSR waits minutes, not seconds.
const DENIED_FAILURES: u32 = 7;

/// Puts a pair in use (the client's credentials, the kubelet API's certificate).
pub type Install = Box<dyn FnMut(&Pair) -> Result<(), String> + Send>;

/// The client certificate's part: how it starts and where it comes from.
pub struct ClientPart {
    /// The decision `connect` made with the pair it found.
    pub start: super::Start,
    /// The pair in use, if any.
    pub current: Option<Pair>,
    /// The bootstrap kubeconfig, if any.
    pub bootstrap: Option<PathBuf>,
    /// Where the kubeconfig the node gets is written after a bootstrap.
    pub kubeconfig: PathBuf,
    /// Whether it is to be written at start too (it cannot be read, and the store has a
    /// good pair: a crash came between the two).
    pub write_kubeconfig: bool,
    /// The cluster (server, CA) that kubeconfig names.
    pub cluster: Connection,
}

/// What `fl-certs` manages.
pub struct Setup {
    /// The node's name.
    pub node: String,
    /// The certificate directory.
    pub dir: PathBuf,
    /// Whether certificates are renewed before they expire.
    pub rotate: bool,
    /// The client's request limits (for the bootstrap client).
    pub settings: ClientSettings,
    /// The client certificate, when it is managed here.
    pub client: Option<ClientPart>,
    /// The serving certificate's template and how it is put in use, when it is managed.
    pub serving: Option<(Template, Install)>,
}

/// One certificate.
struct Slot {
    kind: Kind,
    template: Template,
    store: CertStore,
    current: Option<Pair>,
    state: State,
    /// Failed attempts in a row.
    failures: u32,
    install: Install,
}

enum State {
    /// Nothing to do until then (`None`: never).
    Idle(Option<SystemTime>),
    /// A CSR is filed.
    Waiting(Waiting),
}

struct Waiting {
    name: String,
    key_pem: String,
    /// The bootstrap client it was filed with (`None`: the node's own).
    bootstrap: Option<Arc<ApiClient>>,
    filed: SystemTime,
    next: SystemTime,
    looks: u32,
    said: bool,
}

/// The thread's state.
pub struct CertManager {
    client: Arc<ApiClient>,
    metrics: Arc<super::CertMetrics>,
    dir: PathBuf,
    rotate: bool,
    settings: ClientSettings,
    bootstrap: Option<PathBuf>,
    kubeconfig: Option<(PathBuf, Connection)>,
    slots: Vec<Slot>,
}

impl CertManager {
    /// The manager of what `setup` names; `client` is the node's client, whose credentials
    /// the client certificate replaces; `metrics` says what it manages. A serving pair already in the store that is still
    /// good is put in use at once.
    pub fn new(setup: Setup, client: Arc<ApiClient>, metrics: Arc<super::CertMetrics>) -> CertManager {
        let now = SystemTime::now();
        let mut slots = Vec::new();
        let mut bootstrap = None;
        let mut kubeconfig = None;
        let mut write_at_start = false;
        if let Some(part) = setup.client {
            let at = match &part.start {
                super::Start::Use(at) => *at,
                super::Start::Request { why } => {
                    log::info!("certificates: asking the cluster for a client certificate: {why}");
                    Some(now)
                }
            };
            if let Some(p) = &part.current {
                metrics.set_expiry(Kind::Client, p.not_after);
            }
            let (c, node) = (client.clone(), setup.node.clone());
            let install: Install = Box::new(move |p: &Pair| {
                if c.has_credentials() {
                    works(&c, p, &node)?;
                }
                c.set_client_cert(&p.cert_pem, &p.key_pem).map_err(|e| Chain(&e).to_string())
            });
            slots.push(Slot {
                kind: Kind::Client,
                template: Template::client(&setup.node),
                store: CertStore::new(&setup.dir, Kind::Client.prefix()),
                current: part.current,
                state: State::Idle(at),
                failures: 0,
                install,
            });
            bootstrap = part.bootstrap;
            kubeconfig = Some((part.kubeconfig, part.cluster));
            write_at_start = part.write_kubeconfig && matches!(part.start, super::Start::Use(_));
        }
        if let Some((template, install)) = setup.serving {
            slots.push(serving_slot(&setup.dir, setup.rotate, template, install, &metrics, now));
        }
        let manager = CertManager {
            client,
            metrics,
            dir: setup.dir,
            rotate: setup.rotate,
            settings: setup.settings,
            bootstrap,
            kubeconfig,
            slots,
        };
        if write_at_start {
            manager.write_kubeconfig();
        }
        manager
    }

    /// The thread's body.
    pub fn run(mut self, stop: StopSignal) -> Exit {
        loop {
            let now = SystemTime::now();
            let next = self.slots.iter().filter_map(Slot::next).min();
            let pause = next.map_or(MAX_SLEEP, |t| t.duration_since(now).unwrap_or_default()).min(MAX_SLEEP);
            if (!pause.is_zero() && stop.sleep(pause)) || stop.is_stopped() {
                return Exit::Done;
            }
            for i in 0..self.slots.len() {
                let now = SystemTime::now();
                if self.slots[i].next().is_some_and(|t| t <= now) {
                    self.step(i, now);
                }
            }
        }
    }

    fn step(&mut self, i: usize, now: SystemTime) {
        match std::mem::replace(&mut self.slots[i].state, State::Idle(None)) {
            State::Idle(_) => self.file(i, now),
            State::Waiting(w) => self.look(i, w, now),
        }
    }

    /// Files a CSR for slot `i`.
    fn file(&mut self, i: usize, now: SystemTime) {
        let slot = &self.slots[i];
        let (kind, what) = (slot.kind, slot.kind.what());
        let expired = !slot.current.as_ref().is_some_and(|p| p.valid_at(now));
        // The serving certificate is asked for with the node's own credentials.
        if kind == Kind::Serving && !self.client.has_credentials() {
            self.slots[i].state = State::Idle(Some(now + Duration::from_secs(1)));
            return;
        }
        let bootstrap = match (kind, expired, &self.bootstrap) {
            (Kind::Client, true, Some(path)) => match self.bootstrap_client(path) {
                Ok(c) => {
                    if let Some(p) = &self.slots[i].current {
                        log::warn!(
                            "certificates: the client certificate expired at {}; asking for a new one with the bootstrap kubeconfig {}",
                            rfc3339(p.not_after),
                            path.display()
                        );
                    }
                    Some(c)
                }
                Err(e) => return self.fail(i, now, format!("the bootstrap kubeconfig cannot be used: {e}")),
            },
            _ => None,
        };
        let key = match &bootstrap {
            Some(_) => self.bootstrap_key(),
            None => crate::base::x509::new_private_key().map_err(|e| e.to_string()),
        };
        let slot = &self.slots[i];
        let t = &slot.template;
        let orgs: Vec<&str> = t.organizations.iter().map(String::as_str).collect();
        let request = key.and_then(|k| {
            crate::base::x509::certificate_request_for_key(&k, &t.common_name, &orgs, &t.dns_names, &t.ips)
                .map_err(|e| e.to_string())
        });
        let request = match request {
            Ok(r) => r,
            Err(e) => return self.fail(i, now, format!("cannot make a certificate request: {e}")),
        };
        let name = bootstrap
            .as_ref()
            .map(|_| csr::digested_name(&request.public_key_info, &t.common_name, &t.organizations, &kind.usages()));
        let body = csr::object(name.as_deref(), &request.csr_pem, kind);
        let via = bootstrap.as_deref().unwrap_or(&self.client);
        let name = match via.write::<serde_json::Value>("POST", csr::PATH, &body) {
            Ok(obj) => {
                let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
                log::info!(
                    "certificates: filed CertificateSigningRequest {name} for the {what} ({}, signer {})",
                    if bootstrap.is_some() { "with the bootstrap token" } else { "as the node" },
                    kind.signer()
                );
                name
            }
            Err(e) if e.code() == Some(409) && name.is_some() => {
                let name = name.unwrap_or_default();
                log::info!("certificates: CertificateSigningRequest {name} was filed before a restart; waiting for it");
                name
            }
            Err(e) => {
                return self.fail(
                    i,
                    now,
                    format!("cannot file a CertificateSigningRequest for the {what}: {}", Chain(&e)),
                )
            }
        };
        self.slots[i].state = State::Waiting(Waiting {
            name,
            key_pem: request.key_pem,
            bootstrap,
            filed: now,
            next: now + FIRST_LOOK,
            looks: 0,
            said: false,
        });
    }

    /// Looks at the CSR slot `i` waits for.
    fn look(&mut self, i: usize, mut w: Waiting, now: SystemTime) {
        let what = self.slots[i].kind.what();
        let via = w.bootstrap.as_deref().unwrap_or(&self.client);
        let answer = via.get::<serde_json::Value>(&format!("{}/{}", csr::PATH, w.name));
        let outcome = match answer.map(|obj| csr::outcome(&obj)) {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => return self.fail(i, now, format!("CertificateSigningRequest {}: {e}", w.name)),
            Err(e) if e.code() == Some(404) => {
                return self.fail(i, now, format!("CertificateSigningRequest {} is gone before it was signed", w.name))
            }
            Err(e) => {
                // Away or refused: look again later, as long as it is worth waiting.
                log::debug!("certificates: cannot look at CertificateSigningRequest {}: {}", w.name, Chain(&e));
                return self.wait_more(i, w, now);
            }
        };
        match outcome {
            Outcome::Issued(cert) => self.install(i, w, cert, now),
            Outcome::Denied { reason, message } => self.refused(i, &w, now, "was denied", &reason, &message),
            Outcome::Failed { reason, message } => self.refused(i, &w, now, "failed", &reason, &message),
            Outcome::Pending { approved } => {
                if !w.said && !approved && now.duration_since(w.filed).unwrap_or_default() >= Duration::from_secs(5) {
                    w.said = true;
                    log::warn!(
                        "certificates: CertificateSigningRequest {name} for the {what} waits for approval{hint}: kubectl certificate approve {name}",
                        name = w.name,
                        hint = if self.slots[i].kind == Kind::Serving {
                            " (serving certificates are not approved automatically)"
                        } else {
                            ""
                        }
                    );
                }
                self.wait_more(i, w, now)
            }
        }
    }

    /// The CSR `w` of slot `i` was denied or failed: a new one (with a new key) after a
    /// longer pause.
    fn refused(&mut self, i: usize, w: &Waiting, now: SystemTime, verb: &str, reason: &str, message: &str) {
        self.forget_bootstrap_key(w);
        let what = self.slots[i].kind.what();
        self.slots[i].failures = self.slots[i].failures.max(DENIED_FAILURES);
        let why = format!("CertificateSigningRequest {} for the {what} {verb}: {reason}: {message}", w.name);
        self.fail_loud(i, now, why, true);
    }

    /// Keeps waiting for `w`, or, past `MAX_WAIT`, gives it up and files a new one.
    fn wait_more(&mut self, i: usize, mut w: Waiting, now: SystemTime) {
        if now.duration_since(w.filed).unwrap_or_default() >= MAX_WAIT {
            let msg = format!("CertificateSigningRequest {} was not signed within {}s", w.name, MAX_WAIT.as_secs());
            return self.fail(i, now, msg);
        }
        w.looks += 1;
        w.next = now + FIRST_LOOK.saturating_mul(1 << w.looks.min(10)).min(MAX_LOOK);
        self.slots[i].state = State::Waiting(w);
    }

    /// Checks, stores and puts in use the certificate `cert` issued for `w`.
    fn install(&mut self, i: usize, w: Waiting, cert: Vec<u8>, now: SystemTime) {
        let slot = &mut self.slots[i];
        let what = slot.kind.what();
        let pair = Pair::parse(&cert, w.key_pem.as_bytes()).and_then(|p| {
            if slot.template.matches(&p) {
                Ok(p)
            } else {
                Err(format!("it does not name {} as asked", slot.template.common_name))
            }
        });
        let pair = match pair {
            Ok(p) => p,
            Err(e) => {
                self.forget_bootstrap_key(&w);
                return self.fail(
                    i,
                    now,
                    format!("CertificateSigningRequest {} was signed, but the certificate cannot be used: {e}", w.name),
                );
            }
        };
        let file = match slot.store.update(&pair, now) {
            Ok(f) => f,
            Err(e) => return self.fail(i, now, format!("the {what} from {} cannot be kept: {e}", w.name)),
        };
        if let Err(e) = (slot.install)(&pair) {
            return self.fail(i, now, format!("the {what} from {} cannot be put in use: {e}", w.name));
        }
        let deadline =
            self.rotate.then(|| rotation_deadline(pair.not_before, pair.not_after, crate::base::random::random_f64()));
        log::info!(
            "certificates: the {what} from CertificateSigningRequest {} is in use ({}, valid until {}{})",
            w.name,
            file.display(),
            rfc3339(pair.not_after),
            deadline.map(|d| format!(", renewed from {}", rfc3339(d))).unwrap_or_default()
        );
        self.metrics.set_expiry(slot.kind, pair.not_after);
        slot.current = Some(pair);
        slot.failures = 0;
        slot.state = State::Idle(deadline);
        if w.bootstrap.is_some() {
            self.write_kubeconfig();
            self.forget_bootstrap_key(&w);
        }
    }

    /// After a bootstrap: the kubeconfig naming the store's current pair.
    fn write_kubeconfig(&self) {
        let Some((path, cluster)) = &self.kubeconfig else { return };
        let current = CertStore::new(&self.dir, Kind::Client.prefix()).current_path();
        let text = kubeconfig::node_text(cluster, &current);
        let owner_only = crate::base::state_files::StateAccess { gid: None };
        match crate::base::state_files::write_atomic_as(path, text.as_bytes(), owner_only) {
            Ok(()) => log::info!("certificates: wrote {} (its client certificate is {})", path.display(), current.display()),
            Err(e) => log::error!(
                "certificates: cannot write {}: {e}; the node keeps its certificate, and a restart joins with the bootstrap kubeconfig again",
                path.display()
            ),
        }
    }

    /// A client of the bootstrap kubeconfig at `path`, read now.
    fn bootstrap_client(&self, path: &std::path::Path) -> Result<Arc<ApiClient>, String> {
        let conn = kubeconfig::load(path).map_err(|e| e.to_string())?;
        ApiClient::new(&conn, self.settings).map(Arc::new).map_err(|e| Chain(&e).to_string())
    }

    /// The bootstrap key (PKCS#8 DER): the one kept from an attempt before, else a new one,
    /// kept (0600) until its certificate is in the store.
    fn bootstrap_key(&self) -> Result<Vec<u8>, String> {
        use rustls::pki_types::pem::PemObject;
        let path = self.dir.join(BOOTSTRAP_KEY);
        if let Ok(text) = crate::base::inputfile::read_to_string(&path, 16 << 10) {
            match rustls::pki_types::PrivatePkcs8KeyDer::from_pem_slice(text.as_bytes()) {
                Ok(k) => return Ok(k.secret_pkcs8_der().to_vec()),
                Err(e) => log::warn!("certificates: {} cannot be used ({e}); making a new key", path.display()),
            }
        }
        let key = crate::base::x509::new_private_key().map_err(|e| e.to_string())?;
        let pem = crate::base::x509::private_key_pem(&key);
        super::store::ensure_private_dir(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))?;
        let owner_only = crate::base::state_files::StateAccess { gid: None };
        crate::base::state_files::write_atomic_as(&path, pem.as_bytes(), owner_only)
            .map_err(|e| format!("cannot keep the key in {}: {e}", path.display()))?;
        Ok(key)
    }

    /// Removes the bootstrap key of `w` (its CSR is done with).
    fn forget_bootstrap_key(&self, w: &Waiting) {
        if w.bootstrap.is_some() {
            let _ = std::fs::remove_file(self.dir.join(BOOTSTRAP_KEY));
        }
    }

    /// Slot `i`'s attempt failed: says why (the first time in a row; later ones at debug),
    /// and tries again after the back-off. Nothing in use changes.
    fn fail(&mut self, i: usize, now: SystemTime, why: String) {
        self.fail_loud(i, now, why, false);
    }

    /// `fail`, said at error level when `loud` whatever came before.
    fn fail_loud(&mut self, i: usize, now: SystemTime, why: String, loud: bool) {
        let slot = &mut self.slots[i];
        self.metrics.failed(slot.kind);
        let pause = super::retry_after(slot.failures);
        if slot.failures == 0 || loud {
            log::error!("certificates: {why}; trying again in {}s", pause.as_secs());
        } else {
            log::debug!("certificates: {why}; trying again in {}s", pause.as_secs());
        }
        slot.failures = slot.failures.saturating_add(1);
        slot.state = State::Idle(Some(now + pause));
    }
}

/// The serving certificate's slot: the pair in the store put in use at once when it is
/// still good and names what `template` asks, else one asked for now.
fn serving_slot(
    dir: &std::path::Path,
    rotate: bool,
    template: Template,
    install: Install,
    metrics: &super::CertMetrics,
    now: SystemTime,
) -> Slot {
    let store = CertStore::new(dir, Kind::Serving.prefix());
    let loaded = store.load().map_err(|e| e.to_string());
    let decision = super::start(&loaded, &template, rotate, now, crate::base::random::random_f64());
    let mut slot = Slot {
        kind: Kind::Serving,
        template,
        store,
        current: None,
        state: State::Idle(Some(now)),
        failures: 0,
        install,
    };
    match (decision, loaded) {
        (super::Start::Use(at), Ok(Some(pair))) => match (slot.install)(&pair) {
            Ok(()) => {
                log::info!(
                    "certificates: serving the certificate from {} (valid until {})",
                    slot.store.current_path().display(),
                    rfc3339(pair.not_after)
                );
                metrics.set_expiry(Kind::Serving, pair.not_after);
                slot.current = Some(pair);
                slot.state = State::Idle(at);
            }
            Err(e) => log::warn!("certificates: the stored serving certificate cannot be served ({e}); asking for a new one"),
        },
        (super::Start::Request { why }, _) => log::info!(
            "certificates: asking the cluster for a serving certificate: {why}; the self-signed one is served until then"
        ),
        _ => {}
    }
    slot
}

/// Whether the apiserver takes the new client pair `pair`, tried with one request (the
/// node's own Node: any answer but 401 says it authenticates); the pair in use stays until
/// then. A TLS failure with the new pair while the current one gets an answer is a refusal
/// too (the apiserver checks client certificates in the handshake); when neither gets an
/// answer nothing can be told, and the new pair, which the cluster's signer issued for this
/// key, is taken.
fn works(current: &ApiClient, pair: &Pair, node: &str) -> Result<(), String> {
    use crate::cluster::apiserver::ApiError;
    let trial = current.with_client_cert(&pair.cert_pem, &pair.key_pem).map_err(|e| Chain(&e).to_string())?;
    let path = format!("/api/v1/nodes/{node}");
    let refused = |e: &ApiError| format!("the apiserver does not take it: {}", Chain(e));
    match trial.send("GET", &path, None) {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Some(401) => Err(refused(&e)),
        Err(e @ ApiError::Transport { .. }) => match current.send("GET", &path, None) {
            Err(ApiError::Transport { .. } | ApiError::NoCredentials { .. }) => Ok(()),
            _ => Err(refused(&e)),
        },
        Err(_) => Ok(()),
    }
}

impl Slot {
    /// When it next has something to do.
    fn next(&self) -> Option<SystemTime> {
        match &self.state {
            State::Idle(at) => *at,
            State::Waiting(w) => Some(w.next),
        }
    }
}
