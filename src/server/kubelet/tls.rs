//! TLS of the kubelet API: the serving certificate and key (given as files, or self-signed
//! in the certificate directory as kubelet makes them), the CA that client certificates
//! are verified against, the rustls server configuration, and the user and groups a
//! verified client certificate names.
//!
//! rustls with the ring provider, TLS 1.2 and 1.3, ALPN `http/1.1` only: the apiserver's
//! `exec`, `attach` and `port-forward` upgrade requests need HTTP/1.1, never h2. With a
//! client CA, a client certificate is asked for and verified, but a client without one
//! still finishes the handshake: it may authenticate with a bearer token instead.

use crate::base::errors::Chain;
use crate::base::inputfile::{self, InputFileError};
use crate::base::state_files::{self, StateAccess};
use crate::base::x509::{self, Identity, X509Error};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, ServerConnection, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Largest certificate, key or CA file read (a CA bundle of a few hundred certificates).
pub const MAX_PEM_FILE: u64 = 1 << 20;
/// The self-signed certificate's name in the certificate directory (kubelet's).
pub const SELF_SIGNED_CERT: &str = "kubelet.crt";
/// The self-signed certificate's key's name in the certificate directory (kubelet's).
pub const SELF_SIGNED_KEY: &str = "kubelet.key";
/// How long a self-signed certificate is valid, from its `notBefore` (kubelet's year).
pub const SELF_SIGNED_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// How long before its making a self-signed certificate is valid from, so a client whose
/// clock is a little behind accepts it (kubelet's hour).
pub const SELF_SIGNED_BACKDATE: Duration = Duration::from_secs(3600);
/// The one ALPN protocol offered.
pub const ALPN_HTTP11: &[u8] = b"http/1.1";

/// What a certificate file must hold.
const EXPECT_CERT: &str = "a PEM certificate (-----BEGIN CERTIFICATE-----)";
/// What a key file must hold.
const EXPECT_KEY: &str = "an unencrypted PEM private key: PKCS#8 (-----BEGIN PRIVATE KEY-----), \
     PKCS#1 RSA (-----BEGIN RSA PRIVATE KEY-----) or SEC1 EC (-----BEGIN EC PRIVATE KEY-----)";

/// Why the API's TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate, key or CA file could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: InputFileError,
    },
    /// A file is not valid PEM.
    #[error("{}: not valid PEM: {expected} is expected", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What the file should hold.
        expected: &'static str,
        /// What the PEM parser found wrong.
        #[source]
        source: pem::Error,
    },
    /// A file holds no item of the kind it should.
    #[error("{}: none found: {expected} is expected", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
        /// What the file should hold.
        expected: &'static str,
    },
    /// The key is not one rustls can sign with, or not the certificate's.
    #[error("{} and {}: the key cannot serve the certificate", key.display(), cert.display())]
    Pair {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls found wrong (e.g. `InconsistentKeys(KeyMismatch)`).
        #[source]
        source: rustls::Error,
    },
    /// A certificate in the client CA file cannot be a trust anchor.
    #[error("{}: certificate {index} (from 0) cannot be a trusted CA", path.display())]
    CaCertificate {
        /// The CA file.
        path: PathBuf,
        /// The certificate's place in the file.
        index: usize,
        /// What rustls found wrong.
        #[source]
        source: rustls::Error,
    },
    /// rustls refused the serving certificate chain and key, or the protocol versions.
    #[error("cannot configure TLS with the serving certificate and key")]
    Config {
        /// What rustls found wrong.
        #[source]
        source: rustls::Error,
    },
    /// A client CA certificate (given as DER) cannot be a trust anchor.
    #[error("client CA certificate {index} (from 0) cannot be a trusted CA")]
    ClientCa {
        /// The certificate's place in the list.
        index: usize,
        /// What rustls found wrong.
        #[source]
        source: rustls::Error,
    },
    /// The client certificate verifier could not be built (e.g. no client CA at all).
    #[error("cannot verify client certificates with the client CA")]
    ClientVerifier {
        /// What rustls found wrong.
        #[source]
        source: rustls::server::VerifierBuilderError,
    },
    /// A self-signed certificate could not be made.
    #[error("cannot make a self-signed certificate for {}", path.display())]
    Generate {
        /// The certificate file it was for.
        path: PathBuf,
        /// Why.
        #[source]
        source: X509Error,
    },
    /// The certificate directory could not be created.
    #[error("cannot create the certificate directory {}", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A self-signed certificate or key could not be written.
    #[error("cannot write {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl TlsError {
    /// Whether this is a file that does not exist (rather than one that is wrong).
    fn is_not_found(&self) -> bool {
        matches!(self, TlsError::Read { source: InputFileError::Read(e), .. } if e.kind() == std::io::ErrorKind::NotFound)
    }
}

/// The one crypto provider: ring, as the rest of ferrolet's rustls.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A PEM file's text, at most `MAX_PEM_FILE` bytes.
fn read_pem(path: &Path) -> Result<String, TlsError> {
    inputfile::read_to_string(path, MAX_PEM_FILE).map_err(|source| TlsError::Read { path: path.into(), source })
}

/// Every certificate in the PEM `text` of `path` (at least one); other items are passed over.
fn certificates(path: &Path, text: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(text.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem { path: path.into(), expected: EXPECT_CERT, source })?;
    if certs.is_empty() {
        return Err(TlsError::Missing { path: path.into(), expected: EXPECT_CERT });
    }
    Ok(certs)
}

/// The serving chain in `cert_file` (leaf first, as a `--tls-cert-file` holds it) and the
/// key in `key_file` (PKCS#8, PKCS#1 RSA or SEC1 EC; the first one in the file), checked to
/// belong together.
pub fn load_pair(
    cert_file: &Path,
    key_file: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let chain = certificates(cert_file, &read_pem(cert_file)?)?;
    let key = PrivateKeyDer::from_pem_slice(read_pem(key_file)?.as_bytes()).map_err(|source| match source {
        pem::Error::NoItemsFound => TlsError::Missing { path: key_file.into(), expected: EXPECT_KEY },
        source => TlsError::Pem { path: key_file.into(), expected: EXPECT_KEY, source },
    })?;
    // The same check `with_single_cert` makes, here where the files can be named.
    CertifiedKey::from_der(chain.clone(), key.clone_key(), &provider()).map_err(|source| TlsError::Pair {
        cert: cert_file.into(),
        key: key_file.into(),
        source,
    })?;
    Ok((chain, key))
}

/// The CA certificates in `path` (a `--client-ca-file`): at least one, each usable as a
/// trust anchor.
pub fn load_ca(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    ca_from_pem(path, read_pem(path)?.as_bytes())
}

/// The CA bundle `pem`, which came from `source` (a kubeconfig's
/// `certificate-authority-data`, say), checked as `load_ca` checks a file.
pub fn ca_from_pem(source: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let (path, certs) = (source, certificates(source, &String::from_utf8_lossy(pem))?);
    let mut roots = RootCertStore::empty();
    for (index, cert) in certs.iter().enumerate() {
        roots.add(cert.clone()).map_err(|source| TlsError::CaCertificate { path: path.into(), index, source })?;
    }
    Ok(certs)
}

/// Makes a kept key the owner's alone again if someone opened it up (said, not fatal).
fn keep_private(key_file: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(key_file) else { return };
    if meta.permissions().mode() & 0o077 == 0 {
        return;
    }
    match std::fs::set_permissions(key_file, std::fs::Permissions::from_mode(0o600)) {
        Ok(()) => log::warn!("server: {} was readable by others; it is 0600 again", key_file.display()),
        Err(e) => log::warn!("server: {} is readable by others and cannot be made private: {e}", key_file.display()),
    }
}

/// The serving certificate, replaceable while the server runs: connections made after
/// `replace` are served the new pair, those open keep theirs (the rotation through the
/// cluster's CSR API replaces it).
#[derive(Debug)]
pub struct ServingCert(parking_lot::RwLock<Arc<CertifiedKey>>);

impl ServingCert {
    /// `chain` (leaf first) served with `key`, which must belong to it.
    pub fn new(chain: Vec<CertificateDer<'static>>, key: PrivateKeyDer<'static>) -> Result<Arc<ServingCert>, TlsError> {
        let certified =
            CertifiedKey::from_der(chain, key, &provider()).map_err(|source| TlsError::Config { source })?;
        Ok(Arc::new(ServingCert(parking_lot::RwLock::new(Arc::new(certified)))))
    }

    /// Serves `chain` and `key` from the next connection on.
    pub fn replace(&self, chain: Vec<CertificateDer<'static>>, key: PrivateKeyDer<'static>) -> Result<(), TlsError> {
        let certified =
            CertifiedKey::from_der(chain, key, &provider()).map_err(|source| TlsError::Config { source })?;
        *self.0.write() = Arc::new(certified);
        Ok(())
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().clone())
    }
}

/// The API's rustls configuration: `chain` and `key` served (`server_config_for` with a
/// `ServingCert` of them).
pub fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    client_ca: Option<Vec<CertificateDer<'static>>>,
) -> Result<Arc<ServerConfig>, TlsError> {
    server_config_for(ServingCert::new(chain, key)?, client_ca)
}

/// The API's rustls configuration: `cert` served, TLS 1.2 and 1.3, ALPN `http/1.1` only.
/// With `client_ca`, client certificates are asked for and verified against it, and a
/// client without one still completes the handshake (to present a bearer token); without
/// it, no client certificate is asked for.
pub fn server_config_for(
    cert: Arc<ServingCert>,
    client_ca: Option<Vec<CertificateDer<'static>>>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|source| TlsError::Config { source })?;
    let builder = match client_ca {
        Some(cas) => {
            let mut roots = RootCertStore::empty();
            for (index, ca) in cas.into_iter().enumerate() {
                roots.add(ca).map_err(|source| TlsError::ClientCa { index, source })?;
            }
            // An empty store is refused here (`NoRootAnchors`): asking for certificates no
            // CA could have signed would be a configuration mistake, not a policy.
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|source| TlsError::ClientVerifier { source })?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(cert);
    config.alpn_protocols = vec![ALPN_HTTP11.to_vec()];
    Ok(Arc::new(config))
}

/// Who the client's verified certificate names (its leaf's CN and Os), once the handshake
/// is done; `None` without a certificate, or with one whose CN is empty (kubelet's x509
/// authenticator does not authenticate those either).
pub fn peer_identity(conn: &ServerConnection) -> Option<Identity> {
    // rustls records the peer's chain only once it is verified, but during the handshake
    // nothing has been proven yet.
    if conn.is_handshaking() {
        return None;
    }
    let leaf = conn.peer_certificates()?.first()?;
    match x509::subject_identity(leaf) {
        Ok(identity) if !identity.common_name.is_empty() => Some(identity),
        Ok(_) => None,
        Err(e) => {
            log::warn!("server: a verified client certificate's subject cannot be read: {}", Chain(&e));
            None
        }
    }
}

/// The subject of a self-signed certificate for `hostname` made at `now`, as kubelet names
/// it: the CN `<hostname>@<unix seconds>`, the DNS names `hostname` (unless it is an IP,
/// which goes with the IPs) and then `dns_names`, and `ips`, without repeats.
fn self_signed_subject(
    hostname: &str,
    dns_names: &[String],
    ips: &[IpAddr],
    now: SystemTime,
) -> (String, Vec<String>, Vec<IpAddr>) {
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut names: Vec<String> = Vec::new();
    let mut addrs: Vec<IpAddr> = Vec::new();
    match hostname.parse::<IpAddr>() {
        Ok(ip) => addrs.push(ip),
        Err(_) => names.push(hostname.to_string()),
    }
    for n in dns_names {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    for ip in ips {
        if !addrs.contains(ip) {
            addrs.push(*ip);
        }
    }
    (format!("{hostname}@{secs}"), names, addrs)
}

/// Kubelet's serving certificate when none is configured: `<dir>/kubelet.crt` and
/// `<dir>/kubelet.key` are kept when both load and belong together; otherwise a new
/// self-signed pair (see `self_signed_subject`, valid `SELF_SIGNED_VALIDITY` from
/// `SELF_SIGNED_BACKDATE` before `now`) replaces them. `dir` is created `0700` when it is
/// missing (an existing one keeps its mode); both files are written `0600`, each through a
/// temporary file in `dir` that is synced and renamed, the key first: a crash between the
/// two leaves a key the old certificate does not match, which the next start replaces.
/// Nothing else in `dir` is touched. Returns (certificate, key).
pub fn ensure_self_signed(
    dir: &Path,
    hostname: &str,
    dns_names: &[String],
    ips: &[IpAddr],
    now: SystemTime,
) -> Result<(PathBuf, PathBuf), TlsError> {
    let (cert_file, key_file) = (dir.join(SELF_SIGNED_CERT), dir.join(SELF_SIGNED_KEY));
    match load_pair(&cert_file, &key_file) {
        Ok((chain, _)) => {
            warn_if_expired(&cert_file, &chain[0], now);
            keep_private(&key_file);
            return Ok((cert_file, key_file));
        }
        Err(e) if e.is_not_found() => {
            log::info!("server: no serving certificate yet; making a self-signed one in {}", dir.display())
        }
        Err(e) => log::warn!("server: replacing the self-signed certificate: {}", Chain(&e)),
    }
    let (cn, names, addrs) = self_signed_subject(hostname, dns_names, ips, now);
    let not_before = now.checked_sub(SELF_SIGNED_BACKDATE).unwrap_or(now);
    let made = x509::self_signed(&cn, &names, &addrs, not_before, SELF_SIGNED_VALIDITY)
        .map_err(|source| TlsError::Generate { path: cert_file.clone(), source })?;
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| TlsError::CreateDir { path: dir.into(), source })?;
    }
    // Owner only, whatever group the state directory is shared with: this is a private key.
    let owner_only = StateAccess { gid: None };
    for (path, data) in [(&key_file, &made.key_pem), (&cert_file, &made.cert_pem)] {
        state_files::write_atomic_as(path, data.as_bytes(), owner_only)
            .map_err(|source| TlsError::Write { path: path.clone(), source })?;
    }
    log::info!("server: wrote a self-signed certificate for {cn} to {}", cert_file.display());
    Ok((cert_file, key_file))
}

/// Logs when the certificate kept in `path` has expired at `now` (kubelet keeps it too:
/// it may be one an administrator put there).
fn warn_if_expired(path: &Path, leaf: &CertificateDer<'_>, now: SystemTime) {
    match x509::validity(leaf) {
        Ok((_, not_after)) if not_after < now => log::warn!(
            "server: {} expired at {}; remove it and its key to have a new one made",
            path.display(),
            not_after.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
        ),
        Ok(_) => {}
        Err(e) => log::warn!("server: {}: cannot read its validity: {}", path.display(), Chain(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::ServerName;
    use rustls::{ClientConfig, ClientConnection};
    use std::io::{Read, Write};
    use std::os::unix::fs::PermissionsExt;
    use std::process::Command;

    /// A self-signed serving pair for node-a, localhost, 127.0.0.1 and ::1, as DER.
    fn node_a() -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        let names = ["node-a".to_string(), "localhost".to_string()];
        let ips = ["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()];
        let made =
            x509::self_signed("node-a@1", &names, &ips, SystemTime::now() - SELF_SIGNED_BACKDATE, SELF_SIGNED_VALIDITY)
                .unwrap();
        (
            CertificateDer::from_pem_slice(made.cert_pem.as_bytes()).unwrap(),
            PrivateKeyDer::from_pem_slice(made.key_pem.as_bytes()).unwrap(),
        )
    }

    /// A client that trusts `root`, offers `alpn`, and presents `auth` when given.
    fn client(
        root: &CertificateDer<'static>,
        alpn: &[&[u8]],
        auth: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
        server: &str,
    ) -> ClientConnection {
        let mut store = RootCertStore::empty();
        store.add(root.clone()).unwrap();
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(store);
        let mut config = match auth {
            Some((chain, key)) => builder.with_client_auth_cert(chain, key).unwrap(),
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        ClientConnection::new(Arc::new(config), ServerName::try_from(server.to_string()).unwrap()).unwrap()
    }

    /// Moves what `from` has to write into `to`; the first error `to` finds in it ends it.
    /// Returns whether anything moved.
    fn carry<F, T>(
        from: &mut rustls::ConnectionCommon<F>,
        to: &mut rustls::ConnectionCommon<T>,
    ) -> Result<bool, rustls::Error> {
        let mut moved = false;
        while from.wants_write() {
            let mut buf = Vec::new();
            from.write_tls(&mut buf).unwrap();
            let mut rest = &buf[..];
            while !rest.is_empty() {
                to.read_tls(&mut rest).unwrap();
                to.process_new_packets()?;
            }
            moved = true;
        }
        Ok(moved)
    }

    /// Moves every byte one side writes to the other until neither has anything to say;
    /// the first error either side finds in what it read ends it.
    fn pump(client: &mut ClientConnection, server: &mut ServerConnection) -> Result<(), rustls::Error> {
        use rustls::client::ClientConnectionData as C;
        use rustls::server::ServerConnectionData as S;
        for _ in 0..32 {
            let sent = carry::<C, S>(client, server)?;
            let answered = carry::<S, C>(server, client)?;
            if !sent && !answered && !client.is_handshaking() && !server.is_handshaking() {
                return Ok(());
            }
        }
        panic!("the handshake did not settle");
    }

    /// A request from the client reaches the server whole.
    fn exchange(client: &mut ClientConnection, server: &mut ServerConnection) {
        client.writer().write_all(b"GET /healthz HTTP/1.1\r\n\r\n").unwrap();
        pump(client, server).unwrap();
        let mut got = vec![0; 64];
        let n = server.reader().read(&mut got).unwrap();
        assert_eq!(&got[..n], b"GET /healthz HTTP/1.1\r\n\r\n");
    }

    #[test]
    fn a_client_trusting_the_self_signed_certificate_connects_by_ip_and_by_name() {
        let (cert, key) = node_a();
        let config = server_config(vec![cert.clone()], key, None).unwrap();
        for name in ["127.0.0.1", "::1", "node-a", "localhost"] {
            let mut c = client(&cert, &[b"h2", ALPN_HTTP11], None, name);
            let mut s = ServerConnection::new(config.clone()).unwrap();
            pump(&mut c, &mut s).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(s.alpn_protocol(), Some(ALPN_HTTP11), "{name}");
            assert_eq!(s.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_3));
            assert_eq!(peer_identity(&s), None);
            exchange(&mut c, &mut s);
        }
        // A name the certificate does not hold is refused by the client.
        let mut c = client(&cert, &[], None, "node-b");
        let mut s = ServerConnection::new(config.clone()).unwrap();
        let e = pump(&mut c, &mut s).unwrap_err();
        assert!(matches!(e, rustls::Error::InvalidCertificate(_)), "{e}");
        // TLS 1.2 is served too.
        let mut store = RootCertStore::empty();
        store.add(cert.clone()).unwrap();
        let tls12 = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS12])
            .unwrap()
            .with_root_certificates(store)
            .with_no_client_auth();
        let mut c = ClientConnection::new(Arc::new(tls12), ServerName::try_from("node-a").unwrap()).unwrap();
        let mut s = ServerConnection::new(config.clone()).unwrap();
        pump(&mut c, &mut s).unwrap();
        assert_eq!(s.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_2));
        exchange(&mut c, &mut s);
    }

    #[test]
    fn a_replaced_certificate_is_served_from_the_next_connection_on() {
        let (first, first_key) = node_a();
        let cert = ServingCert::new(vec![first.clone()], first_key).unwrap();
        let config = server_config_for(cert.clone(), None).unwrap();
        let (second, second_key) = node_a();
        cert.replace(vec![second.clone()], second_key).unwrap();
        // A client trusting only the first is refused; one trusting the second connects.
        let mut c = client(&first, &[], None, "node-a");
        let mut s = ServerConnection::new(config.clone()).unwrap();
        assert!(pump(&mut c, &mut s).is_err());
        let mut c = client(&second, &[], None, "node-a");
        let mut s = ServerConnection::new(config).unwrap();
        pump(&mut c, &mut s).unwrap();
        exchange(&mut c, &mut s);
        // A key that does not belong to the chain is refused, and the second stays.
        let (third, _) = node_a();
        let (_, other_key) = node_a();
        assert!(cert.replace(vec![third], other_key).is_err());
    }

    #[test]
    fn alpn_is_http11_only_never_h2() {
        let (cert, key) = node_a();
        let config = server_config(vec![cert.clone()], key, None).unwrap();
        assert_eq!(config.alpn_protocols, [ALPN_HTTP11.to_vec()]);
        let mut c = client(&cert, &[b"h2"], None, "node-a");
        let mut s = ServerConnection::new(config.clone()).unwrap();
        assert_eq!(pump(&mut c, &mut s).unwrap_err(), rustls::Error::NoApplicationProtocol);
        // A client that offers no ALPN at all gets HTTP/1.1 without it.
        let mut c = client(&cert, &[], None, "node-a");
        let mut s = ServerConnection::new(config).unwrap();
        pump(&mut c, &mut s).unwrap();
        assert_eq!(s.alpn_protocol(), None);
    }

    /// Runs openssl with `args` in `dir`; false when there is no openssl.
    fn openssl(dir: &Path, args: &[&str]) -> bool {
        match Command::new("openssl").args(args).current_dir(dir).output() {
            Ok(out) => {
                assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
                true
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => panic!("openssl: {e}"),
        }
    }

    const OPENSSL_CNF: &str = "\
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign
subjectKeyIdentifier = hash
[client]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
[server]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:node-a
";

    /// In `dir`: a CA `<ca>.crt`/`<ca>.key`, and a client certificate `<name>.crt`/`<name>.key`
    /// with `subject` that it signed. False when there is no openssl.
    fn make_ca_and_client(dir: &Path, ca: &str, name: &str, subject: &str) -> bool {
        std::fs::write(dir.join("openssl.cnf"), OPENSSL_CNF).unwrap();
        let (ca_crt, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
        let (crt, key, csr) = (format!("{name}.crt"), format!("{name}.key"), format!("{name}.csr"));
        let ca_subject = format!("/CN={ca}");
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
        let mut make_ca = vec!["req", "-config", "openssl.cnf", "-x509", "-extensions", "ca", "-days", "2"];
        make_ca.extend(ec);
        make_ca.extend(["-keyout", ca_key.as_str(), "-out", ca_crt.as_str(), "-subj", ca_subject.as_str()]);
        let mut request = vec!["req", "-config", "openssl.cnf", "-new"];
        request.extend(ec);
        request.extend(["-keyout", key.as_str(), "-out", csr.as_str(), "-subj", subject]);
        let sign = [
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_crt,
            "-CAkey",
            &ca_key,
            "-set_serial",
            "2",
            "-days",
            "2",
            "-extfile",
            "openssl.cnf",
            "-extensions",
            "client",
            "-out",
            &crt,
        ];
        openssl(dir, &make_ca) && openssl(dir, &request) && openssl(dir, &sign)
    }

    #[test]
    fn client_certificates_authenticate_as_cn_and_os_and_are_optional() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        if !make_ca_and_client(d, "ca", "alice", "/CN=alice/O=devs/O=ops") {
            eprintln!("skipped: no openssl command");
            return;
        }
        assert!(make_ca_and_client(d, "other-ca", "mallory", "/CN=mallory/O=devs"));
        let (cert, key) = node_a();
        let config = server_config(vec![cert.clone()], key, Some(load_ca(&d.join("ca.crt")).unwrap())).unwrap();
        let alice = load_pair(&d.join("alice.crt"), &d.join("alice.key")).unwrap();

        let mut c = client(&cert, &[ALPN_HTTP11], Some(alice), "127.0.0.1");
        let mut s = ServerConnection::new(config.clone()).unwrap();
        pump(&mut c, &mut s).unwrap();
        let want = Identity { common_name: "alice".into(), organizations: vec!["devs".into(), "ops".into()] };
        assert_eq!(peer_identity(&s), Some(want));
        exchange(&mut c, &mut s);

        // Signed by another CA: the server refuses the handshake.
        let mallory = load_pair(&d.join("mallory.crt"), &d.join("mallory.key")).unwrap();
        let mut c = client(&cert, &[ALPN_HTTP11], Some(mallory), "node-a");
        let mut s = ServerConnection::new(config.clone()).unwrap();
        let e = pump(&mut c, &mut s).unwrap_err();
        assert!(matches!(e, rustls::Error::InvalidCertificate(_)), "{e}");
        assert_eq!(peer_identity(&s), None);

        // No certificate: the handshake completes, and nobody is authenticated by it.
        let mut c = client(&cert, &[ALPN_HTTP11], None, "node-a");
        let mut s = ServerConnection::new(config.clone()).unwrap();
        pump(&mut c, &mut s).unwrap();
        assert_eq!(peer_identity(&s), None);
        exchange(&mut c, &mut s);

        // Without a client CA no certificate is asked for: alice's is never sent.
        let (cert2, key2) = node_a();
        let no_ca = server_config(vec![cert2.clone()], key2, None).unwrap();
        let alice = load_pair(&d.join("alice.crt"), &d.join("alice.key")).unwrap();
        let mut c = client(&cert2, &[], Some(alice), "node-a");
        let mut s = ServerConnection::new(no_ca).unwrap();
        pump(&mut c, &mut s).unwrap();
        assert_eq!(s.peer_certificates(), None);
        assert_eq!(peer_identity(&s), None);
    }

    #[test]
    fn keys_load_as_pkcs8_pkcs1_and_sec1() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("openssl.cnf"), OPENSSL_CNF).unwrap();
        let cert_for = |key: &str, crt: &str| {
            openssl(
                d,
                &[
                    "req",
                    "-config",
                    "openssl.cnf",
                    "-x509",
                    "-new",
                    "-key",
                    key,
                    "-out",
                    crt,
                    "-subj",
                    "/CN=node-a",
                    "-days",
                    "2",
                    "-extensions",
                    "server",
                ],
            )
        };
        if !openssl(d, &["genrsa", "-traditional", "-out", "rsa.key", "2048"]) {
            eprintln!("skipped: no openssl command");
            return;
        }
        assert!(openssl(d, &["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ec.key"]));
        assert!(openssl(d, &["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "p8.key"]));
        for (key, label) in [("rsa", "RSA PRIVATE KEY"), ("ec", "EC PRIVATE KEY"), ("p8", "PRIVATE KEY")] {
            let key_file = d.join(format!("{key}.key"));
            let text = std::fs::read_to_string(&key_file).unwrap();
            assert!(text.starts_with(&format!("-----BEGIN {label}-----")), "{text}");
            assert!(cert_for(&format!("{key}.key"), &format!("{key}.crt")));
            let (chain, key) = load_pair(&d.join(format!("{key}.crt")), &key_file).unwrap();
            server_config(chain, key, None).unwrap();
        }
        // The RSA key is not the EC certificate's.
        let e = load_pair(&d.join("ec.crt"), &d.join("rsa.key")).unwrap_err();
        assert!(matches!(e, TlsError::Pair { .. }), "{e}");
        assert!(e.to_string().contains("rsa.key") && e.to_string().contains("ec.crt"), "{e}");
    }

    #[test]
    fn openssl_reads_the_self_signed_certificate_as_made() {
        let tmp = tempfile::tempdir().unwrap();
        let ips = ["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()];
        let (cert, _) =
            ensure_self_signed(tmp.path(), "node-a", &["localhost".into()], &ips, SystemTime::now()).unwrap();
        let out = match Command::new("openssl").args(["x509", "-noout", "-text", "-in"]).arg(&cert).output() {
            Ok(out) => out,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return eprintln!("skipped: no openssl command"),
            Err(e) => panic!("openssl: {e}"),
        };
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout).split_whitespace().collect::<Vec<_>>().join(" ");
        for want in [
            "Version: 3 (0x2)",
            "Signature Algorithm: ecdsa-with-SHA256",
            "Public Key Algorithm: id-ecPublicKey",
            "NIST CURVE: P-256",
            "X509v3 Basic Constraints: critical CA:FALSE",
            "X509v3 Key Usage: critical Digital Signature",
            "X509v3 Extended Key Usage: TLS Web Server Authentication",
            "DNS:node-a, DNS:localhost, IP Address:127.0.0.1, IP Address:0:0:0:0:0:0:0:1",
        ] {
            assert!(text.contains(want), "no {want:?} in {text}");
        }
        assert!(text.contains("Issuer: CN = node-a@") && text.contains("Subject: CN = node-a@"), "{text}");
    }

    #[test]
    fn load_errors_name_the_file_and_what_it_should_hold() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let made = x509::self_signed("n", &[], &[], SystemTime::now(), SELF_SIGNED_VALIDITY).unwrap();
        let (cert, key) = (d.join("c.pem"), d.join("k.pem"));
        std::fs::write(&cert, &made.cert_pem).unwrap();
        std::fs::write(&key, &made.key_pem).unwrap();
        load_pair(&cert, &key).unwrap();

        let missing = d.join("nope.pem");
        let e = load_pair(&missing, &key).unwrap_err();
        assert!(e.is_not_found());
        assert!(
            Chain(&e).to_string().starts_with(&format!("cannot read {}: cannot read: No such file", missing.display())),
            "{}",
            Chain(&e)
        );
        // Swapped: the key file holds no certificate, the certificate file no key.
        let e = load_pair(&key, &key).unwrap_err().to_string();
        assert_eq!(e, format!("{}: none found: {EXPECT_CERT} is expected", key.display()));
        let e = load_pair(&cert, &cert).unwrap_err().to_string();
        assert_eq!(e, format!("{}: none found: {EXPECT_KEY} is expected", cert.display()));
        let broken = d.join("broken.pem");
        std::fs::write(&broken, "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n").unwrap();
        let e = load_pair(&broken, &key).unwrap_err();
        assert!(matches!(&e, TlsError::Pem { path, .. } if *path == broken), "{e}");
        assert!(e.to_string().starts_with(&format!("{}: not valid PEM", broken.display())), "{e}");
        let big = d.join("big.pem");
        std::fs::write(&big, vec![b'a'; MAX_PEM_FILE as usize + 1]).unwrap();
        let e = Chain(&load_ca(&big).unwrap_err()).to_string();
        assert_eq!(
            e,
            format!("cannot read {}: file is 1048577 bytes; at most 1048576 bytes are allowed", big.display())
        );
        let e = load_ca(&key).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{}: none found", key.display())), "{e}");
        assert_eq!(load_ca(&cert).unwrap().len(), 1);
        // An empty client CA list is refused, not taken as "anyone".
        let (c, k) = node_a();
        assert!(matches!(server_config(vec![c], k, Some(vec![])), Err(TlsError::ClientVerifier { .. })));
    }

    #[test]
    fn the_self_signed_subject_is_kubelets() {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let ip: IpAddr = "10.0.0.7".parse().unwrap();
        let (cn, names, ips) = self_signed_subject("node-a", &["node-a".into(), "localhost".into()], &[ip], now);
        assert_eq!(cn, "node-a@1700000000");
        assert_eq!(names, ["node-a", "localhost"]);
        assert_eq!(ips, [ip]);
        let (cn, names, ips) = self_signed_subject("10.0.0.7", &[], &[ip], now);
        assert_eq!((cn.as_str(), names.len(), ips), ("10.0.0.7@1700000000", 0, vec![ip]));
    }

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn ensure_self_signed_keeps_a_good_pair_and_replaces_a_broken_one() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("pki");
        let now = SystemTime::now();
        let ips = ["127.0.0.1".parse().unwrap()];
        let (cert, key) = ensure_self_signed(&dir, "node-a", &[], &ips, now).unwrap();
        assert_eq!((cert.clone(), key.clone()), (dir.join("kubelet.crt"), dir.join("kubelet.key")));
        assert_eq!((mode(&dir), mode(&cert), mode(&key)), (0o700, 0o600, 0o600));
        let (chain, _) = load_pair(&cert, &key).unwrap();
        let secs = now.duration_since(UNIX_EPOCH).unwrap().as_secs();
        assert_eq!(x509::subject_identity(&chain[0]).unwrap().common_name, format!("node-a@{secs}"));
        let (from, to) = x509::validity(&chain[0]).unwrap();
        assert_eq!(to.duration_since(from).unwrap(), SELF_SIGNED_VALIDITY);
        // From an hour before, to the second.
        let backdated = now.duration_since(from).unwrap();
        assert!(backdated >= SELF_SIGNED_BACKDATE && backdated < SELF_SIGNED_BACKDATE + Duration::from_secs(1));
        // The certificate serves node-a.
        let config = server_config(chain.clone(), load_pair(&cert, &key).unwrap().1, None).unwrap();
        let mut c = client(&chain[0], &[], None, "node-a");
        let mut s = ServerConnection::new(config).unwrap();
        pump(&mut c, &mut s).unwrap();

        std::fs::write(dir.join("other"), "mine").unwrap();
        let first = (std::fs::read(&cert).unwrap(), std::fs::read(&key).unwrap());
        let later = now + Duration::from_secs(60);
        // A key someone opened up is kept, and made private again.
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        ensure_self_signed(&dir, "node-a", &[], &ips, later).unwrap();
        assert_eq!((std::fs::read(&cert).unwrap(), std::fs::read(&key).unwrap()), first, "kept");
        assert_eq!(mode(&key), 0o600);

        // A crash after the key was written: the key is not the certificate's.
        let other = x509::self_signed("x", &[], &[], now, SELF_SIGNED_VALIDITY).unwrap();
        std::fs::write(&key, &other.key_pem).unwrap();
        ensure_self_signed(&dir, "node-a", &[], &ips, later).unwrap();
        let (chain2, _) = load_pair(&cert, &key).unwrap();
        assert_ne!(chain2, chain);
        assert_eq!(x509::subject_identity(&chain2[0]).unwrap().common_name, format!("node-a@{}", secs + 60));

        // The key gone: both are made again.
        std::fs::remove_file(&key).unwrap();
        ensure_self_signed(&dir, "node-a", &[], &ips, later).unwrap();
        assert_ne!(load_pair(&cert, &key).unwrap().0, chain2);
        assert_eq!((mode(&dir), mode(&cert), mode(&key)), (0o700, 0o600, 0o600));

        // Nothing else in the directory is touched, and no temporary file is left.
        let mut entries: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        entries.sort();
        assert_eq!(entries, ["kubelet.crt", "kubelet.key", "other"]);
        assert_eq!(std::fs::read_to_string(dir.join("other")).unwrap(), "mine");
    }

    #[test]
    fn ensure_self_signed_reports_a_bad_hostname() {
        let tmp = tempfile::tempdir().unwrap();
        let e = ensure_self_signed(tmp.path(), "bad name", &[], &[], SystemTime::now()).unwrap_err();
        assert!(matches!(e, TlsError::Generate { source: X509Error::DnsName { .. }, .. }), "{e}");
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }
}
