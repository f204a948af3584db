//! `[apiserver]`: cluster mode (kubelet's `--kubeconfig`, `--bootstrap-kubeconfig`,
//! `--cert-dir`, `rotateCertificates`, `serverTLSBootstrap`, `kubeAPIQPS`, `kubeAPIBurst`,
//! `--node-labels`, `--register-with-taints`). Without a kubeconfig the agent runs static
//! pods alone.

use super::Dur;
use crate::api::Taint;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// `[apiserver]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiserverConfig {
    /// The kubeconfig to reach the kube-apiserver with; empty: no cluster (static pods only).
    /// With `bootstrap_kubeconfig`, where the kubeconfig the node gets is written.
    pub kubeconfig: PathBuf,
    /// A kubeconfig with a bootstrap token (kubelet's `--bootstrap-kubeconfig`): when
    /// `kubeconfig` is missing or its certificate expired, the node asks the cluster's CSR
    /// API for a client certificate with it. Empty: no TLS bootstrap.
    pub bootstrap_kubeconfig: PathBuf,
    /// Where the node's certificates and keys are kept (kubelet's `--cert-dir`); empty:
    /// `<state_dir>/pki`.
    pub cert_dir: PathBuf,
    /// Whether the client certificate is renewed through the CSR API before it expires
    /// (kubelet's `rotateCertificates`).
    pub rotate_certificates: bool,
    /// Whether the kubelet API's serving certificate is asked of the cluster's CSR API
    /// (signer `kubernetes.io/kubelet-serving`) and renewed (kubelet's
    /// `serverTLSBootstrap`); until it is issued the self-signed one is served.
    pub server_tls_bootstrap: bool,
    /// Requests per second on average (kubelet's `kubeAPIQPS`).
    pub qps: f64,
    /// Requests at once above it (kubelet's `kubeAPIBurst`).
    pub burst: u32,
    /// Events written per second on average (kubelet's `eventRecordQPS`), within `qps`.
    pub event_qps: f64,
    /// Events written at once above it (kubelet's `eventBurst`).
    pub event_burst: u32,
    /// Deadline of each request.
    pub request_timeout: Dur,
    /// Labels the Node registers with (kubelet's `--node-labels`); kubelet's own win.
    pub node_labels: BTreeMap<String, String>,
    /// Taints the Node registers with, `key=value:Effect` (kubelet's
    /// `--register-with-taints`).
    pub register_with_taints: Vec<String>,
    /// `node.kubernetes.io/instance-type`; empty: not set.
    pub instance_type: String,
    /// The node-local key that encrypts the Secrets and tokens kept under the state
    /// directory for offline restarts; made (0600) at first start. Outside the state
    /// directory, so a copy of it alone does not reveal them.
    pub kept_key: PathBuf,
}

/// Where the key of the kept Secrets and tokens is, unless `apiserver.kept_key` says.
pub const DEFAULT_KEPT_KEY: &str = "/etc/ferrolet/kept.key";

impl Default for ApiserverConfig {
    fn default() -> Self {
        ApiserverConfig {
            kubeconfig: PathBuf::new(),
            bootstrap_kubeconfig: PathBuf::new(),
            cert_dir: PathBuf::new(),
            rotate_certificates: true,
            server_tls_bootstrap: false,
            qps: 50.0,
            burst: 100,
            event_qps: 50.0,
            event_burst: 100,
            request_timeout: Dur(Duration::from_secs(10)),
            node_labels: BTreeMap::new(),
            register_with_taints: Vec::new(),
            instance_type: String::new(),
            kept_key: PathBuf::from(DEFAULT_KEPT_KEY),
        }
    }
}

/// Whether a node may set label `key` on itself (kubelet's `--node-labels` rule, which the
/// NodeRestriction admission plugin enforces): any outside the `kubernetes.io` and `k8s.io`
/// namespaces; inside them, kubelet's own and those under `kubelet.kubernetes.io/` and
/// `node.kubernetes.io/`.
fn node_may_set(key: &str) -> bool {
    const OWN: [&str; 11] = [
        "kubernetes.io/hostname",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "failure-domain.beta.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
    ];
    let Some((prefix, _)) = key.split_once('/') else { return true };
    let under = |ns: &str| prefix == ns || prefix.ends_with(&format!(".{ns}"));
    if !under("kubernetes.io") && !under("k8s.io") {
        return true;
    }
    OWN.contains(&key) || under("kubelet.kubernetes.io") || under("node.kubernetes.io")
}

/// `key=value:Effect` or `key:Effect`, as kubelet's `--register-with-taints` reads them.
pub fn parse_taint(s: &str) -> Result<Taint, String> {
    let (kv, effect) =
        s.rsplit_once(':').ok_or_else(|| format!("invalid taint {s:?}: must be key=value:Effect or key:Effect"))?;
    const EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
    if !EFFECTS.contains(&effect) {
        return Err(format!("invalid taint {s:?}: the effect must be one of {}", EFFECTS.join(", ")));
    }
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    if !crate::api::validation::is_qualified_name(key) {
        return Err(format!("invalid taint {s:?}: {key:?} is not a qualified name like example.com/edge"));
    }
    Ok(Taint { key: key.into(), value: value.into(), effect: effect.into() })
}

impl ApiserverConfig {
    /// The first problem: (key, message).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if !(self.qps > 0.0 && self.qps <= 10_000.0) {
            return Err((
                "apiserver.qps",
                format!("invalid value {}: must be more than 0 and at most 10000", self.qps),
            ));
        }
        if !(1..=10_000).contains(&self.burst) {
            return Err(("apiserver.burst", format!("invalid value {}: must be between 1 and 10000", self.burst)));
        }
        if !(self.event_qps > 0.0 && self.event_qps <= 10_000.0) {
            return Err((
                "apiserver.event_qps",
                format!("invalid value {}: must be more than 0 and at most 10000", self.event_qps),
            ));
        }
        if !(1..=10_000).contains(&self.event_burst) {
            return Err((
                "apiserver.event_burst",
                format!("invalid value {}: must be between 1 and 10000", self.event_burst),
            ));
        }
        if self.request_timeout.0 < Duration::from_secs(1) {
            return Err((
                "apiserver.request_timeout",
                format!("invalid value {:?}: must be at least 1s", self.request_timeout.0),
            ));
        }
        for (k, v) in &self.node_labels {
            if !crate::api::validation::is_qualified_name(k) || v.len() > 63 {
                return Err((
                    "apiserver.node_labels",
                    format!("invalid label {k:?}={v:?}: must be a qualified name and a value of at most 63 characters"),
                ));
            }
        }
        if let Some(k) = self.node_labels.keys().find(|k| !node_may_set(k)) {
            return Err((
                "apiserver.node_labels",
                format!(
                    "label {k:?} is in the kubernetes.io or k8s.io namespace but not one a node may set (the NodeRestriction admission plugin refuses it): use your own prefix, or node.kubernetes.io/ or kubelet.kubernetes.io/"
                ),
            ));
        }
        for t in &self.register_with_taints {
            parse_taint(t).map_err(|e| ("apiserver.register_with_taints", e))?;
        }
        if !self.bootstrap_kubeconfig.as_os_str().is_empty() && self.kubeconfig.as_os_str().is_empty() {
            return Err((
                "apiserver.bootstrap_kubeconfig",
                "needs apiserver.kubeconfig: the path where the kubeconfig the node gets is written".into(),
            ));
        }
        if self.server_tls_bootstrap && self.kubeconfig.as_os_str().is_empty() {
            return Err((
                "apiserver.server_tls_bootstrap",
                "needs apiserver.kubeconfig: the serving certificate is asked of the cluster".into(),
            ));
        }
        Ok(())
    }

    /// Where the node's certificates are kept (`cert_dir`, else `<state_dir>/pki`).
    pub fn cert_dir(&self, state_dir: &std::path::Path) -> PathBuf {
        if self.cert_dir.as_os_str().is_empty() {
            state_dir.join("pki")
        } else {
            self.cert_dir.clone()
        }
    }

    /// The taints (checked: `check` passed).
    pub fn taints(&self) -> Vec<Taint> {
        self.register_with_taints.iter().filter_map(|t| parse_taint(t).ok()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_bootstrap_needs_a_kubeconfig_to_write_and_the_cert_dir_defaults_under_the_state() {
        let c = ApiserverConfig { bootstrap_kubeconfig: "/etc/ferrolet/bootstrap.conf".into(), ..Default::default() };
        let (key, message) = c.check().unwrap_err();
        assert_eq!(key, "apiserver.bootstrap_kubeconfig");
        assert!(message.contains("needs apiserver.kubeconfig"), "{message}");
        let c = ApiserverConfig { kubeconfig: "/etc/ferrolet/kubelet.conf".into(), ..c };
        assert_eq!(c.check(), Ok(()));
        let serving = ApiserverConfig { server_tls_bootstrap: true, ..Default::default() };
        assert_eq!(serving.check().unwrap_err().0, "apiserver.server_tls_bootstrap");
        assert_eq!(c.cert_dir(std::path::Path::new("/var/lib/ferrolet")), PathBuf::from("/var/lib/ferrolet/pki"));
        let c = ApiserverConfig { cert_dir: "/etc/ferrolet/pki".into(), ..c };
        assert_eq!(c.cert_dir(std::path::Path::new("/var/lib/ferrolet")), PathBuf::from("/etc/ferrolet/pki"));
        assert!(ApiserverConfig::default().rotate_certificates, "on by default, as kubelet's");
    }

    #[test]
    fn node_labels_in_kubernetes_namespaces_are_limited_to_kubelets_set() {
        let with = |k: &str| ApiserverConfig {
            node_labels: BTreeMap::from([(k.to_string(), "x".to_string())]),
            ..Default::default()
        };
        assert_eq!(ApiserverConfig::default().check(), Ok(()));
        assert_eq!(with("site").check(), Ok(()));
        assert_eq!(with("node.kubernetes.io/role").check(), Ok(()));
        assert_eq!(with("topology.kubernetes.io/zone").check(), Ok(()));
        let (key, message) = with("node-role.kubernetes.io/edge").check().unwrap_err();
        assert_eq!(key, "apiserver.node_labels");
        assert!(message.contains("NodeRestriction"), "{message}");
    }

    #[test]
    fn taints_read_as_kubelets_flag_reads_them() {
        assert_eq!(
            parse_taint("edge=true:NoSchedule").unwrap(),
            Taint { key: "edge".into(), value: "true".into(), effect: "NoSchedule".into() }
        );
        assert_eq!(parse_taint("example.com/gpu:NoExecute").unwrap().value, "");
        assert_eq!(
            parse_taint("edge=true").unwrap_err(),
            "invalid taint \"edge=true\": must be key=value:Effect or key:Effect"
        );
        assert_eq!(
            parse_taint("edge:Sometimes").unwrap_err(),
            "invalid taint \"edge:Sometimes\": the effect must be one of NoSchedule, PreferNoSchedule, NoExecute"
        );
    }
}
