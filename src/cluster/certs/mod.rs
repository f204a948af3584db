//! The node's certificates from the cluster, as kubelet's certificate managers get them:
//! TLS bootstrap (a bootstrap token files a CertificateSigningRequest for the client
//! certificate `system:node:<name>`), renewal of the client certificate before it expires,
//! and the kubelet API's serving certificate (signer `kubernetes.io/kubelet-serving`).
//! `csr` (the CSR objects and their outcome) and the decisions here are pure; `store` keeps
//! the files; `manager` is the thread `fl-certs` that acts.

pub mod csr;
pub mod manager;
pub mod store;

use std::net::IpAddr;
use std::time::{Duration, SystemTime};
use store::Pair;

/// kubelet's certificate manager metrics, which kube-prometheus alerts on
/// (`KubeletClientCertificateExpiration`, `...RenewalErrors`, and the server ones): the
/// expiry of each certificate managed here, and the renewals that failed. Written by
/// `fl-certs`, read by `/metrics`.
#[derive(Debug, Default)]
pub struct CertMetrics {
    /// The client certificate's notAfter (Unix seconds); 0: not managed yet.
    client_not_after: std::sync::atomic::AtomicI64,
    /// The serving certificate's notAfter (Unix seconds); 0: not issued here yet.
    server_not_after: std::sync::atomic::AtomicI64,
    client_errors: crate::base::metrics::Counter,
    server_errors: crate::base::metrics::Counter,
}

impl CertMetrics {
    /// `kind`'s certificate in use now expires at `not_after`.
    pub fn set_expiry(&self, kind: Kind, not_after: SystemTime) {
        let secs = not_after.duration_since(SystemTime::UNIX_EPOCH).map_or(1, |d| d.as_secs().max(1));
        let cell = match kind {
            Kind::Client => &self.client_not_after,
            Kind::Serving => &self.server_not_after,
        };
        cell.store(i64::try_from(secs).unwrap_or(i64::MAX), std::sync::atomic::Ordering::Relaxed);
    }

    /// An attempt to get `kind`'s certificate failed.
    pub fn failed(&self, kind: Kind) {
        match kind {
            Kind::Client => self.client_errors.inc(),
            Kind::Serving => self.server_errors.inc(),
        }
    }

    /// kubelet's series, the TTLs as of `now` (negative once expired); a certificate not
    /// managed here has none.
    pub fn encode(&self, enc: &mut crate::base::metrics::Encoder, now: SystemTime) {
        use crate::base::metrics::Kind as K;
        let now = now.duration_since(SystemTime::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        let load = |c: &std::sync::atomic::AtomicI64| c.load(std::sync::atomic::Ordering::Relaxed);
        let client = load(&self.client_not_after);
        if client > 0 {
            enc.single(
                "kubelet_certificate_manager_client_ttl_seconds",
                K::Gauge,
                "Seconds until the client certificate expires (negative once it has).",
                client as f64 - now,
            );
            enc.single(
                "kubelet_certificate_manager_client_expiration_renew_errors",
                K::Counter,
                "Failed attempts to get or renew the client certificate.",
                self.client_errors.get(),
            );
        }
        let server = load(&self.server_not_after);
        if server > 0 {
            enc.single(
                "kubelet_certificate_manager_server_ttl_seconds",
                K::Gauge,
                "Seconds until the serving certificate expires (negative once it has).",
                server as f64 - now,
            );
        }
        if server > 0 || self.server_errors.get() > 0 {
            enc.single(
                "kubelet_server_expiration_renew_errors",
                K::Counter,
                "Failed attempts to get or renew the serving certificate.",
                self.server_errors.get(),
            );
        }
    }
}

/// Which of the node's certificates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The client certificate the node reaches the apiserver with.
    Client,
    /// The kubelet API's serving certificate.
    Serving,
}

impl Kind {
    /// The file prefix in the certificate directory (kubelet's).
    pub fn prefix(self) -> &'static str {
        match self {
            Kind::Client => "kubelet-client",
            Kind::Serving => "kubelet-server",
        }
    }

    /// The CSR's `signerName`.
    pub fn signer(self) -> &'static str {
        match self {
            Kind::Client => "kubernetes.io/kube-apiserver-client-kubelet",
            Kind::Serving => "kubernetes.io/kubelet-serving",
        }
    }

    /// The CSR's `usages` for an ECDSA key (an RSA one would add key encipherment).
    pub fn usages(self) -> [&'static str; 2] {
        match self {
            Kind::Client => ["digital signature", "client auth"],
            Kind::Serving => ["digital signature", "server auth"],
        }
    }

    /// For messages.
    pub fn what(self) -> &'static str {
        match self {
            Kind::Client => "client certificate",
            Kind::Serving => "serving certificate",
        }
    }
}

/// What a certificate must say (kubelet's template): the subject and the alt names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    /// `system:node:<name>`.
    pub common_name: String,
    /// `system:nodes`.
    pub organizations: Vec<String>,
    /// The DNS names (serving only).
    pub dns_names: Vec<String>,
    /// The IP addresses (serving only).
    pub ips: Vec<IpAddr>,
}

impl Template {
    /// The client certificate of node `node`: `O=system:nodes, CN=system:node:<node>`.
    pub fn client(node: &str) -> Template {
        Template {
            common_name: format!("system:node:{node}"),
            organizations: vec!["system:nodes".into()],
            dns_names: Vec::new(),
            ips: Vec::new(),
        }
    }

    /// The serving certificate of node `node`, named as its Node's addresses name it: the
    /// `Hostname` address as a DNS name and the `InternalIP` as an IP (kubelet's serving
    /// template takes the DNS-typed and IP-typed addresses).
    pub fn serving(node: &str, hostname: &str, node_ip: &str) -> Template {
        let mut t = Template::client(node);
        if !hostname.is_empty() {
            t.dns_names.push(hostname.to_string());
        }
        t.ips.extend(node_ip.parse::<IpAddr>());
        t
    }

    /// Whether `pair` says what this template asks (subject and alt names, in any order).
    pub fn matches(&self, pair: &Pair) -> bool {
        let Ok(id) = crate::base::x509::subject_identity(&pair.leaf) else { return false };
        let Ok((mut dns, mut ips)) = crate::base::x509::subject_alt_names(&pair.leaf) else { return false };
        let (mut want_dns, mut want_ips) = (self.dns_names.clone(), self.ips.clone());
        for v in [&mut dns, &mut want_dns] {
            v.sort();
        }
        for v in [&mut ips, &mut want_ips] {
            v.sort();
        }
        id.common_name == self.common_name
            && id.organizations == self.organizations
            && dns == want_dns
            && ips == want_ips
    }
}

/// When a certificate valid from `not_before` to `not_after` is renewed: at 70 to 90 % of
/// its lifetime, `jitter` (0 to 1) choosing where, as kubelet's `nextRotationDeadline`
/// spreads a fleet's renewals.
pub fn rotation_deadline(not_before: SystemTime, not_after: SystemTime, jitter: f64) -> SystemTime {
    let total = not_after.duration_since(not_before).unwrap_or_default();
    not_before + total.mul_f64(0.7 + 0.2 * jitter.clamp(0.0, 1.0))
}

/// The pause before the next attempt after `failures` failed ones in a row: 2 s doubling
/// up to 5 minutes, so neither a CSR that waits nor an apiserver that is away gets a
/// tight loop.
pub fn retry_after(failures: u32) -> Duration {
    Duration::from_secs(2u64.saturating_mul(1 << failures.min(16))).min(Duration::from_secs(300))
}

/// What to do at start with the pair the node has.
#[derive(Debug, PartialEq, Eq)]
pub enum Start {
    /// Use it; renew it at the time given (`None`: rotation is off).
    Use(Option<SystemTime>),
    /// Ask for a new one now (`why` is said once).
    Request {
        /// Why.
        why: String,
    },
}

/// The decision at start for a pair `current` (or why there is none usable): a valid pair
/// that says what `template` asks is used (renewed at its deadline when `rotate`), anything
/// else is requested anew.
pub fn start(
    current: &Result<Option<Pair>, String>,
    template: &Template,
    rotate: bool,
    now: SystemTime,
    jitter: f64,
) -> Start {
    let why = match current {
        Err(e) => format!("the current one cannot be used ({e})"),
        Ok(None) => "there is none yet".into(),
        Ok(Some(p)) if now >= p.not_after => {
            format!("the current one expired at {}", crate::base::timefmt::rfc3339(p.not_after))
        }
        Ok(Some(p)) if !template.matches(p) => "the current one does not name what this node is now".into(),
        Ok(Some(p)) => return Start::Use(rotate.then(|| rotation_deadline(p.not_before, p.not_after, jitter))),
    };
    Start::Request { why }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn the_rotation_deadline_falls_between_70_and_90_percent_of_the_lifetime() {
        let (from, to) = (at(1_000), at(1_000 + 100_000));
        assert_eq!(rotation_deadline(from, to, 0.0), at(71_000));
        assert_eq!(rotation_deadline(from, to, 1.0), at(91_000));
        assert_eq!(rotation_deadline(from, to, 0.5), at(81_000));
        assert_eq!(rotation_deadline(from, to, 7.0), at(91_000), "jitter is clamped");
        for _ in 0..1000 {
            let d = rotation_deadline(from, to, crate::base::random::random_f64());
            assert!(d >= at(71_000) && d <= at(91_000), "{d:?}");
        }
        // A signer backdates notBefore by 5 minutes: a 2-minute certificate lives 7, and is
        // renewed 4.9 to 6.3 minutes after its notBefore.
        let issued = at(10_000);
        let (nb, na) = (issued - Duration::from_secs(300), issued + Duration::from_secs(120));
        assert_eq!(rotation_deadline(nb, na, 0.0), nb + Duration::from_secs(294));
        assert_eq!(rotation_deadline(nb, na, 1.0), nb + Duration::from_secs(378));
        assert_eq!(rotation_deadline(to, from, 0.5), to, "an inverted validity renews at once");
    }

    #[test]
    fn the_metrics_are_kubelets_and_only_for_what_is_managed() {
        let m = CertMetrics::default();
        let render = |m: &CertMetrics| {
            let mut out = String::new();
            m.encode(&mut crate::base::metrics::Encoder::new(&mut out), at(1_000));
            out
        };
        assert_eq!(render(&m), "");
        m.set_expiry(Kind::Client, at(4_600));
        m.failed(Kind::Client);
        let out = render(&m);
        assert!(out.contains("kubelet_certificate_manager_client_ttl_seconds 3600\n"), "{out}");
        assert!(out.contains("kubelet_certificate_manager_client_expiration_renew_errors 1\n"), "{out}");
        assert!(!out.contains("server"), "{out}");
        m.failed(Kind::Serving);
        assert!(render(&m).contains("kubelet_server_expiration_renew_errors 1\n"));
        m.set_expiry(Kind::Serving, at(400));
        assert!(render(&m).contains("kubelet_certificate_manager_server_ttl_seconds -600\n"), "expired: negative");
    }

    #[test]
    fn retries_back_off_from_2s_to_5_minutes() {
        let pauses: Vec<u64> = (0..10).map(|n| retry_after(n).as_secs()).collect();
        assert_eq!(pauses, [2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(retry_after(u32::MAX), Duration::from_secs(300));
    }

    #[test]
    fn the_serving_template_names_the_nodes_addresses() {
        let t = Template::serving("edge-1", "edge-1.lan", "10.0.0.7");
        assert_eq!(t.common_name, "system:node:edge-1");
        assert_eq!(t.organizations, ["system:nodes"]);
        assert_eq!(t.dns_names, ["edge-1.lan"]);
        assert_eq!(t.ips, ["10.0.0.7".parse::<IpAddr>().unwrap()]);
        let t = Template::serving("edge-1", "", "not-an-ip");
        assert!(t.dns_names.is_empty() && t.ips.is_empty());
        assert!(Template::client("n").dns_names.is_empty());
    }

    #[test]
    fn at_start_a_valid_matching_pair_is_used_and_anything_else_is_requested() {
        let now = SystemTime::now();
        let made = crate::base::x509::self_signed(
            "system:node:n",
            &["n".to_string()],
            &["10.0.0.7".parse().unwrap()],
            now - Duration::from_secs(100),
            Duration::from_secs(1000),
        )
        .unwrap();
        let pair = Pair::parse(made.cert_pem.as_bytes(), made.key_pem.as_bytes()).unwrap();
        // `self_signed` has no O: a template without one matches it.
        let mut t = Template::serving("n", "n", "10.0.0.7");
        t.organizations.clear();
        match start(&Ok(Some(pair.clone())), &t, true, now, 0.0) {
            Start::Use(Some(d)) => assert_eq!(d, pair.not_before + Duration::from_secs(700)),
            other => panic!("{other:?}"),
        }
        assert_eq!(start(&Ok(Some(pair.clone())), &t, false, now, 0.0), Start::Use(None));
        let later = now + Duration::from_secs(2000);
        assert!(
            matches!(start(&Ok(Some(pair.clone())), &t, true, later, 0.0), Start::Request { why } if why.contains("expired at"))
        );
        let moved = Template::serving("n", "n", "10.0.0.8");
        assert!(
            matches!(start(&Ok(Some(pair.clone())), &moved, true, now, 0.0), Start::Request { why } if why.contains("does not name"))
        );
        assert_eq!(start(&Ok(None), &t, true, now, 0.0), Start::Request { why: "there is none yet".into() });
        assert!(
            matches!(start(&Err("bad".into()), &t, true, now, 0.0), Start::Request { why } if why.contains("(bad)"))
        );
    }
}
