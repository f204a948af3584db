//! `[server]` turned into a running `server::kubelet::KubeletServer`: its certificate (the
//! configured pair, or a self-signed one kept under `<state_dir>/pki`, as kubelet keeps
//! `/var/lib/kubelet/pki/kubelet.crt`), the client CA (configured, or the kubeconfig's),
//! and the reviews through the cluster's client.

use crate::cluster::Cluster;
use crate::config::{AuthorizationMode, Config};
use crate::node::runtime::ContainerRuntime;
use crate::server::kubelet::auth::{Gate, GateSettings, Reviews};
use crate::server::kubelet::{tls, Inputs, KubeletServer, Settings};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

/// Why the kubelet API did not start.
#[derive(Debug, thiserror::Error)]
pub enum KubeletApiError {
    /// Its certificate, key or client CA cannot be used.
    #[error("{key}")]
    Tls {
        /// The configuration key concerned.
        key: &'static str,
        /// Why.
        #[source]
        source: Box<tls::TlsError>,
    },
    /// It cannot listen.
    #[error(transparent)]
    Start(#[from] crate::server::kubelet::StartError),
}

/// Where the self-signed certificate is kept (with the certificates from the cluster).
pub fn pki_dir(cfg: &Config) -> std::path::PathBuf {
    cfg.apiserver.cert_dir(&cfg.state_dir)
}

/// Starts the server `cfg.server` describes (when it is on).
pub fn start(
    cfg: &Config,
    cluster: Option<&Cluster>,
    runtime: Arc<dyn ContainerRuntime>,
    local: Arc<crate::server::routes::Routes>,
    stats: crate::node::stats::StatsView,
    health: &crate::base::manager::Health,
) -> Result<Option<KubeletServer>, KubeletApiError> {
    let s = &cfg.server;
    if !s.is_on(cluster.is_some()) {
        return Ok(None);
    }
    let tls_err = |key| move |source| KubeletApiError::Tls { key, source: Box::new(source) };
    let (cert, key) = if s.tls_cert_file.as_os_str().is_empty() {
        let hostname = crate::base::net::hostname();
        let mut names = vec![hostname.clone()];
        if cfg.node_name != hostname {
            names.push(cfg.node_name.clone());
        }
        let ips: Vec<IpAddr> = cfg.node_ip.parse().into_iter().collect();
        tls::ensure_self_signed(&pki_dir(cfg), &hostname, &names, &ips, SystemTime::now())
            .map_err(tls_err("server.tls_cert_file"))?
    } else {
        (s.tls_cert_file.clone(), s.tls_private_key_file.clone())
    };
    let (chain, private) = tls::load_pair(&cert, &key).map_err(tls_err("server.tls_cert_file"))?;
    let auth = &s.authentication;
    let client_ca = if !auth.client_ca_file.as_os_str().is_empty() {
        Some(tls::load_ca(&auth.client_ca_file).map_err(tls_err("server.authentication.client_ca_file"))?)
    } else {
        match cluster.and_then(|c| c.ca.as_deref()) {
            Some(pem) => Some(
                tls::ca_from_pem(&cfg.apiserver.kubeconfig, pem)
                    .map_err(tls_err("server.authentication.client_ca_file"))?,
            ),
            None => {
                log::warn!(
                    "server: no client CA (server.authentication.client_ca_file, or the kubeconfig's): client certificates are not accepted, so the apiserver cannot call this node"
                );
                None
            }
        }
    };
    let serving = tls::ServingCert::new(chain, private).map_err(tls_err("server.tls_cert_file"))?;
    let config = tls::server_config_for(serving.clone(), client_ca).map_err(tls_err("server.tls_cert_file"))?;
    let reviews: Option<Arc<dyn Reviews>> = cluster.map(|c| c.client.clone() as Arc<dyn Reviews>);
    let az = &s.authorization;
    let gate = Gate::new(
        GateSettings {
            anonymous: auth.anonymous,
            token_webhook: auth.webhook,
            token_ttl: auth.webhook_cache_ttl.0,
            authz_webhook: az.mode == AuthorizationMode::Webhook,
            allowed_ttl: az.webhook_cache_authorized_ttl.0,
            denied_ttl: az.webhook_cache_unauthorized_ttl.0,
        },
        reviews,
    );
    let configz = serde_json::json!({"kubeletconfig": {
        "address": s.listen.rsplit_once(':').map(|(a, _)| a).unwrap_or(""),
        "port": s.listen.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()),
        "tlsCertFile": cert,
        "authentication": {
            "anonymous": {"enabled": auth.anonymous},
            "webhook": {"enabled": auth.webhook, "cacheTTL": crate::base::timefmt::go_duration(auth.webhook_cache_ttl.0)},
            "x509": {"clientCAFile": auth.client_ca_file},
        },
        "authorization": {
            "mode": az.mode.as_str(),
            "webhook": {
                "cacheAuthorizedTTL": crate::base::timefmt::go_duration(az.webhook_cache_authorized_ttl.0),
                "cacheUnauthorizedTTL": crate::base::timefmt::go_duration(az.webhook_cache_unauthorized_ttl.0),
            },
        },
        "streamingConnectionIdleTimeout": crate::base::timefmt::go_duration(s.streaming_connection_idle_timeout.0),
        "maxPods": cfg.max_pods,
        "podLogsDir": cfg.logs.pod_logs_dir,
    }})
    .to_string();
    let settings = Settings {
        listen: s.listen.clone(),
        node_name: cfg.node_name.clone(),
        tls: config,
        cert: serving,
        max_connections: s.max_connections,
        max_streams: s.max_streams,
        stream_idle_timeout: s.streaming_connection_idle_timeout.0,
        configz,
    };
    Ok(Some(KubeletServer::start(settings, Inputs { runtime, local, gate, stats }, health)?))
}

/// Puts a serving pair from the cluster in use on `server`: connections from then on are
/// served it (for `apiserver.server_tls_bootstrap`).
pub fn serving_install(server: &KubeletServer) -> crate::cluster::certs::manager::Install {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let cert = server.serving_cert().clone();
    Box::new(move |pair: &crate::cluster::certs::store::Pair| {
        let chain =
            CertificateDer::pem_slice_iter(&pair.cert_pem).collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string())?;
        let key = PrivateKeyDer::from_pem_slice(&pair.key_pem).map_err(|e| e.to_string())?;
        cert.replace(chain, key).map_err(|e| crate::base::errors::Chain(&e).to_string())
    })
}
