//! `[server]`: kubelet's authenticated HTTPS API (kubelet's `address`/`port`,
//! `tlsCertFile`/`tlsPrivateKeyFile`, `authentication`, `authorization` and
//! `streamingConnectionIdleTimeout`), which the apiserver calls for `kubectl logs`, `exec`,
//! `attach`, `port-forward` and `cp`.

pub use super::choice::AuthorizationMode;
use super::Dur;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// `[server]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Serve it; unset: when `[apiserver] kubeconfig` is set.
    pub enabled: Option<bool>,
    /// Address and port (kubelet's `address` and `port`).
    pub listen: String,
    /// The serving certificate (PEM, the chain); empty: a self-signed one kept in the state
    /// directory, as kubelet makes.
    pub tls_cert_file: PathBuf,
    /// Its key.
    pub tls_private_key_file: PathBuf,
    /// How long a stream (exec, attach, port-forward) may pass nothing before it is closed
    /// (kubelet's `streamingConnectionIdleTimeout`).
    pub streaming_connection_idle_timeout: Dur,
    /// Connections at once, streams included; more are closed at once.
    pub max_connections: usize,
    /// Streams (exec, attach, port-forward, followed logs) at once.
    pub max_streams: usize,
    /// Who a request comes from.
    pub authentication: AuthenticationConfig,
    /// What they may do.
    pub authorization: AuthorizationConfig,
}

/// `[server.authentication]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthenticationConfig {
    /// Requests without credentials are served as `system:anonymous` (and then authorized);
    /// off by default here, unlike kubelet's historic default.
    pub anonymous: bool,
    /// Bearer tokens are checked with a `TokenReview` to the apiserver.
    pub webhook: bool,
    /// How long a `TokenReview`'s answer is reused.
    pub webhook_cache_ttl: Dur,
    /// The CA client certificates are verified against (kubelet's `x509.clientCAFile`);
    /// empty: the CA of `[apiserver] kubeconfig`, the cluster's CA, which signs the
    /// apiserver's kubelet client certificate.
    pub client_ca_file: PathBuf,
}

/// `[server.authorization]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthorizationConfig {
    /// `Webhook` or `AlwaysAllow`.
    pub mode: AuthorizationMode,
    /// How long an allowed answer is reused.
    pub webhook_cache_authorized_ttl: Dur,
    /// How long a denied answer is reused.
    pub webhook_cache_unauthorized_ttl: Dur,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            enabled: None,
            listen: "0.0.0.0:10250".into(),
            tls_cert_file: PathBuf::new(),
            tls_private_key_file: PathBuf::new(),
            streaming_connection_idle_timeout: Dur(Duration::from_secs(4 * 3600)),
            max_connections: 128,
            max_streams: 32,
            authentication: AuthenticationConfig::default(),
            authorization: AuthorizationConfig::default(),
        }
    }
}

impl Default for AuthenticationConfig {
    fn default() -> Self {
        AuthenticationConfig {
            anonymous: false,
            webhook: true,
            webhook_cache_ttl: Dur(Duration::from_secs(120)),
            client_ca_file: PathBuf::new(),
        }
    }
}

impl Default for AuthorizationConfig {
    fn default() -> Self {
        AuthorizationConfig {
            mode: AuthorizationMode::Webhook,
            webhook_cache_authorized_ttl: Dur(Duration::from_secs(300)),
            webhook_cache_unauthorized_ttl: Dur(Duration::from_secs(30)),
        }
    }
}

impl ServerConfig {
    /// Whether it is served, given whether the agent joins a cluster.
    pub fn is_on(&self, cluster: bool) -> bool {
        self.enabled.unwrap_or(cluster)
    }

    /// The first problem, as (key, message), for an agent that joins a cluster or not.
    pub fn check(&self, cluster: bool) -> Result<(), (&'static str, String)> {
        if !self.is_on(cluster) {
            return Ok(());
        }
        if self.listen.parse::<SocketAddr>().is_err() {
            return Err((
                "server.listen",
                format!("invalid address {:?}: must be IP:PORT, like 0.0.0.0:10250", self.listen),
            ));
        }
        if self.tls_cert_file.as_os_str().is_empty() != self.tls_private_key_file.as_os_str().is_empty() {
            return Err((
                "server.tls_cert_file",
                "tls_cert_file and tls_private_key_file go together: give both, or neither for a self-signed certificate"
                    .into(),
            ));
        }
        if !(1..=4096).contains(&self.max_connections) {
            return Err((
                "server.max_connections",
                format!("invalid value {}: must be between 1 and 4096", self.max_connections),
            ));
        }
        if !(1..=self.max_connections).contains(&self.max_streams) {
            return Err((
                "server.max_streams",
                format!(
                    "invalid value {}: must be between 1 and max_connections ({})",
                    self.max_streams, self.max_connections
                ),
            ));
        }
        if self.streaming_connection_idle_timeout.0 < Duration::from_secs(1) {
            return Err((
                "server.streaming_connection_idle_timeout",
                "must be at least 1s (kubelet's default is 4h)".into(),
            ));
        }
        if !cluster && self.authorization.mode == AuthorizationMode::Webhook {
            return Err((
                "server.authorization.mode",
                "Webhook asks the apiserver, and [apiserver] kubeconfig is not set: set it, or mode = \"AlwaysAllow\""
                    .into(),
            ));
        }
        if !cluster && self.authentication.client_ca_file.as_os_str().is_empty() && !self.authentication.anonymous {
            return Err((
                "server.authentication.client_ca_file",
                "without [apiserver] nobody could authenticate: set client_ca_file (or anonymous = true)".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_is_on_in_a_cluster_unless_turned_off_and_off_alone_unless_turned_on() {
        let mut s = ServerConfig::default();
        assert!(s.is_on(true) && !s.is_on(false));
        s.enabled = Some(false);
        assert!(!s.is_on(true));
        s.enabled = Some(true);
        assert!(s.is_on(false));
    }

    #[test]
    fn checks_name_the_key_and_what_is_allowed() {
        let on = |f: fn(&mut ServerConfig)| {
            let mut s = ServerConfig { enabled: Some(true), ..Default::default() };
            f(&mut s);
            s
        };
        assert_eq!(on(|_| {}).check(true), Ok(()));
        assert_eq!(on(|s| s.listen = "10250".into()).check(true).unwrap_err().0, "server.listen");
        assert_eq!(on(|s| s.tls_cert_file = "/a".into()).check(true).unwrap_err().0, "server.tls_cert_file");
        assert_eq!(on(|s| s.max_streams = 0).check(true).unwrap_err().0, "server.max_streams");
        assert_eq!(on(|_| {}).check(false).unwrap_err().0, "server.authorization.mode");
        let alone = on(|s| s.authorization.mode = AuthorizationMode::AlwaysAllow);
        assert_eq!(alone.check(false).unwrap_err().0, "server.authentication.client_ca_file");
        let alone = on(|s| {
            s.authorization.mode = AuthorizationMode::AlwaysAllow;
            s.authentication.client_ca_file = "/ca.crt".into();
        });
        assert_eq!(alone.check(false), Ok(()));
        // Off, nothing is checked.
        assert_eq!(ServerConfig { listen: "x".into(), ..Default::default() }.check(false), Ok(()));
    }
}
