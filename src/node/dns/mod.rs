//! A pod's names and resolver, as kubelet makes them (`pkg/kubelet/network/dns` and the
//! names half of `kubelet_pods.go`): its `/etc/resolv.conf` (`pod_dns`, from the node's
//! resolver configuration, the pod's `dnsPolicy` and `dnsConfig`), its hostname and domain
//! (`pod_names`, `kernel_hostname`) and its hosts file (`hosts`). The decisions are pure:
//! the node's files come in parsed, and what kubelet would record as events comes back as
//! `DnsEvent`s. The thin executors at the bottom read the node's files and write the pod's.
//!
//! There is no cluster DNS on a standalone node unless `cluster_dns` names one: a pod with
//! `ClusterFirst` then gets the node's resolver, as kubelet without `clusterDNS` gives it
//! (with its `MissingClusterDNS` event).

pub mod hosts;

use crate::api::{DnsPolicy, Pod, PodDnsConfigOption};
use crate::base::inputfile::InputFileError;
use crate::node::runtime::DnsConfig;
use std::path::{Path, PathBuf};

/// kubelet's default `resolvConf`.
pub const DEFAULT_RESOLV_CONF: &str = "/etc/resolv.conf";
/// The node's hosts file, which a host-network pod's hosts file starts from.
pub const NODE_HOSTS: &str = "/etc/hosts";
/// The largest node resolv.conf or hosts file read (kubelet reads up to 10 MB of
/// resolv.conf; either file is a few hundred bytes on a real node).
pub const MAX_NODE_FILE_BYTES: u64 = 1 << 20;
/// The longest hostname (the kernel's 64-byte `nodename`, its NUL included).
pub const MAX_HOSTNAME: usize = 63;
/// The longest FQDN `setHostnameAsFQDN` may set (kubelet's limit).
pub const MAX_FQDN: usize = 64;
/// The most nameservers a pod gets (glibc reads three).
pub const MAX_NAMESERVERS: usize = crate::api::validation::MAX_DNS_NAMESERVERS;
/// The most search domains a pod gets.
pub const MAX_SEARCHES: usize = crate::api::validation::MAX_DNS_SEARCH_PATHS;
/// The longest search line, spaces included.
pub const MAX_SEARCH_LINE: usize = crate::api::validation::MAX_DNS_SEARCH_LIST_CHARS;
/// The longest search domain kept: glibc 2.28 aborts on one past 255 characters, and a DNS
/// name has at most 253.
pub const MAX_SEARCH_DOMAIN: usize = 253;
/// The options of a pod on the cluster's DNS (kubelet's `defaultDNSOptions`).
const CLUSTER_OPTIONS: &str = "ndots:5";
/// The nameserver of a pod with the node's resolver when no resolv.conf is configured
/// (kubelet's rule: the resolver's own default, the local machine).
const NO_RESOLV_CONF_SERVER: &str = "127.0.0.1";
/// kubelet's message when `ClusterFirst` falls back to the node's resolver.
pub const MISSING_CLUSTER_DNS: &str = "kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.";

/// A pod's names or resolver could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    /// The node's resolver configuration could not be read.
    #[error("cannot read the node's resolver configuration {path} (resolv_conf)")]
    ReadResolvConf {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: InputFileError,
    },
    /// The node's hosts file could not be read (for a host-network pod's hosts file).
    #[error("cannot read the node's hosts file {path}")]
    ReadNodeHosts {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: InputFileError,
    },
    /// The pod's directory could not be made.
    #[error("cannot create the pod's directory {path}")]
    CreatePodDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The pod's hosts file could not be written.
    #[error("cannot write the pod's hosts file {path}")]
    WriteHostsFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `setHostnameAsFQDN` asks for a hostname the kernel cannot hold (kubelet's message).
    #[error("failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long ({max} characters is the max, {len} characters requested)", max = MAX_FQDN)]
    FqdnTooLong {
        /// The FQDN.
        fqdn: String,
        /// Its length.
        len: usize,
    },
}

/// What the node's configuration says about pods' names and resolvers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsSettings {
    /// The node's resolver configuration pods with `Default` get (kubelet's `resolvConf`);
    /// `None` (configured empty): none, and such pods resolve through 127.0.0.1.
    pub resolv_conf: Option<PathBuf>,
    /// The cluster's nameservers `ClusterFirst` pods get (kubelet's `clusterDNS`); empty:
    /// none, and such pods get the node's resolver.
    pub cluster_dns: Vec<String>,
    /// The cluster's domain (kubelet's `clusterDomain`): search domains of `ClusterFirst`
    /// pods, and the end of a pod's domain; empty: none.
    pub cluster_domain: String,
    /// The node's hosts file (`NODE_HOSTS`), which a host-network pod's hosts file copies.
    pub node_hosts: PathBuf,
}

impl Default for DnsSettings {
    fn default() -> Self {
        DnsSettings {
            resolv_conf: Some(PathBuf::from(DEFAULT_RESOLV_CONF)),
            cluster_dns: Vec::new(),
            cluster_domain: String::new(),
            node_hosts: PathBuf::from(NODE_HOSTS),
        }
    }
}

/// The node's resolver configuration, read as kubelet reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolvConf {
    /// Every `nameserver` line's address, in order.
    pub nameservers: Vec<String>,
    /// The last `search` line's domains, without a trailing dot (so `a.` and `a` count once).
    pub searches: Vec<String>,
    /// The last `options` line's options.
    pub options: Vec<String>,
}

impl ResolvConf {
    /// Parses resolv.conf text: `nameserver` lines add up, the last `search` and the last
    /// `options` line win, `#` comments and other lines are skipped. A `nameserver` line
    /// without an address is skipped too, as glibc skips it (kubelet fails the pod's
    /// sandbox on it).
    pub fn parse(text: &str) -> ResolvConf {
        let mut rc = ResolvConf::default();
        for line in text.lines().map(str::trim).filter(|l| !l.starts_with('#') && !l.starts_with(';')) {
            let mut fields = line.split_whitespace();
            match fields.next() {
                Some("nameserver") => rc.nameservers.extend(fields.next().map(String::from)),
                Some("search") => rc.searches = fields.map(|s| s.strip_suffix('.').unwrap_or(s).to_string()).collect(),
                Some("options") => rc.options = fields.map(String::from).collect(),
                _ => {}
            }
        }
        rc
    }

    /// Whether every nameserver is a loopback address (systemd-resolved's `127.0.0.53`,
    /// a local dnsmasq): a pod on the pod network cannot reach them.
    pub fn loopback_only(&self) -> bool {
        !self.nameservers.is_empty()
            && self.nameservers.iter().all(|n| n.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback()))
    }
}

/// What kubelet records while it makes a pod's resolver configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DnsEvent {
    /// `ClusterFirst` without a cluster DNS: the node's resolver instead.
    MissingClusterDns,
    /// More nameservers than glibc reads: the ones kept.
    NameserversTrimmed(Vec<String>),
    /// A search list past the limits: the one kept.
    SearchesTrimmed(Vec<String>),
}

impl DnsEvent {
    /// The event's reason (a Warning).
    pub fn reason(&self) -> &'static str {
        match self {
            DnsEvent::MissingClusterDns => "MissingClusterDNS",
            DnsEvent::NameserversTrimmed(_) | DnsEvent::SearchesTrimmed(_) => "DNSConfigForming",
        }
    }

    /// The event's message on `pod`, in kubelet's words.
    pub fn message(&self, pod: &Pod) -> String {
        match self {
            DnsEvent::MissingClusterDns => format!("pod: {:?}. {MISSING_CLUSTER_DNS}", pod.desc()),
            DnsEvent::NameserversTrimmed(kept) => format!(
                "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: {}",
                kept.join(" ")
            ),
            DnsEvent::SearchesTrimmed(kept) => format!(
                "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: {}",
                kept.join(" ")
            ),
        }
    }
}

/// A pod's resolver configuration, and what to record about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodDns {
    /// What goes into the pod's resolv.conf.
    pub config: DnsConfig,
    /// kubelet's events about it, in order.
    pub events: Vec<DnsEvent>,
}

/// Whether the pod's resolver starts from the node's (every policy but `None`), so the
/// node's resolv.conf must be read for it.
pub fn reads_node_resolv_conf(pod: &Pod) -> bool {
    pod.spec.dns() != DnsPolicy::None
}

/// kubelet's `GetPodDNS`: the pod's resolver configuration from its policy, the node's
/// resolv.conf (`node`: `None` when no resolv.conf is configured) and the settings.
///
/// * `None`: only the pod's `dnsConfig`.
/// * `ClusterFirst` (on the host network, only `ClusterFirstWithHostNet`): the cluster's
///   nameservers, the cluster's search domains before the node's, `ndots:5`; without a
///   cluster DNS, a `MissingClusterDNS` event and the node's resolver, as `Default`.
/// * `Default` (and `ClusterFirst` on the host network): the node's resolver; without a
///   resolv.conf, 127.0.0.1 and the search domain `.`.
///
/// Then `dnsConfig` is merged in: its nameservers and search domains after the base's
/// (duplicates dropped), its options replacing the base's of the same name. Then glibc's
/// limits: at most 3 nameservers, at most 32 search domains of at most 253 characters,
/// 2048 characters in all (cut from the end), each trim a `DNSConfigForming` event.
/// kubelet orders merged options through a Go map, at random; they keep their order here.
pub fn pod_dns(pod: &Pod, node: Option<&ResolvConf>, settings: &DnsSettings) -> PodDns {
    let mut events = Vec::new();
    let policy = pod.spec.dns();
    let cluster = match policy {
        DnsPolicy::None => None,
        DnsPolicy::ClusterFirstWithHostNet => Some(true),
        DnsPolicy::ClusterFirst => Some(!pod.spec.host_network),
        DnsPolicy::Default => Some(false),
    };
    let mut config = match cluster {
        None => DnsConfig::default(),
        Some(true) if !settings.cluster_dns.is_empty() => DnsConfig {
            servers: settings.cluster_dns.clone(),
            searches: cluster_searches(pod, node.map(|n| n.searches.as_slice()).unwrap_or(&[]), settings),
            options: vec![CLUSTER_OPTIONS.to_string()],
        },
        Some(cluster_wanted) => {
            if cluster_wanted {
                events.push(DnsEvent::MissingClusterDns);
            }
            match node {
                Some(n) => DnsConfig {
                    servers: n.nameservers.clone(),
                    searches: n.searches.clone(),
                    options: n.options.clone(),
                },
                None => DnsConfig {
                    servers: vec![NO_RESOLV_CONF_SERVER.into()],
                    searches: vec![".".into()],
                    options: Vec::new(),
                },
            }
        }
    };
    if let Some(extra) = &pod.spec.dns_config {
        config.servers = without_duplicates(config.servers.into_iter().chain(extra.nameservers.iter().cloned()));
        config.searches = without_duplicates(config.searches.into_iter().chain(extra.searches.iter().cloned()));
        config.options = merge_options(&config.options, &extra.options);
    }
    if config.servers.len() > MAX_NAMESERVERS {
        config.servers.truncate(MAX_NAMESERVERS);
        events.push(DnsEvent::NameserversTrimmed(config.servers.clone()));
    }
    let (searches, trimmed) = fit_searches(config.searches);
    config.searches = searches;
    if trimmed {
        events.push(DnsEvent::SearchesTrimmed(config.searches.clone()));
    }
    PodDns { config, events }
}

/// kubelet's `generateSearchesForDNSClusterFirst`: `<ns>.svc.<domain>`, `svc.<domain>`,
/// `<domain>`, then the node's (duplicates dropped); only the node's without a domain.
fn cluster_searches(pod: &Pod, node: &[String], settings: &DnsSettings) -> Vec<String> {
    let domain = &settings.cluster_domain;
    if domain.is_empty() {
        return node.to_vec();
    }
    let ns = &pod.metadata.namespace;
    let cluster = [format!("{ns}.svc.{domain}"), format!("svc.{domain}"), domain.clone()];
    without_duplicates(cluster.into_iter().chain(node.iter().cloned()))
}

/// The values in order, each once.
fn without_duplicates(values: impl Iterator<Item = String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    values.filter(|v| seen.insert(v.clone())).collect()
}

/// kubelet's `mergeDNSOptions`: options by name (`ndots:5` is `ndots` with value `5`), the
/// pod's replacing the base's; an empty value writes the name alone. In order: the base's
/// first, then the pod's new ones.
fn merge_options(base: &[String], pod: &[PodDnsConfigOption]) -> Vec<String> {
    let mut merged: Vec<(String, String)> = Vec::new();
    let mut set = |name: &str, value: &str| match merged.iter_mut().find(|(n, _)| n == name) {
        Some(entry) => entry.1 = value.to_string(),
        None => merged.push((name.to_string(), value.to_string())),
    };
    for option in base {
        let (name, value) = option.split_once(':').unwrap_or((option, ""));
        set(name, value);
    }
    for option in pod {
        set(&option.name, option.value.as_deref().unwrap_or(""));
    }
    merged.into_iter().map(|(n, v)| if v.is_empty() { n } else { format!("{n}:{v}") }).collect()
}

/// kubelet's `formDNSSearchFitsLimits`: at most `MAX_SEARCHES` domains, none longer than
/// `MAX_SEARCH_DOMAIN`, and the line (spaces included) at most `MAX_SEARCH_LINE` long, cut
/// from the end; and whether anything was cut.
fn fit_searches(mut searches: Vec<String>) -> (Vec<String>, bool) {
    let mut trimmed = false;
    if searches.len() > MAX_SEARCHES {
        searches.truncate(MAX_SEARCHES);
        trimmed = true;
    }
    let before = searches.len();
    searches.retain(|s| s.len() <= MAX_SEARCH_DOMAIN);
    trimmed |= searches.len() != before;
    let line = |s: &[String]| s.iter().map(String::len).sum::<usize>() + s.len().saturating_sub(1);
    while line(&searches) > MAX_SEARCH_LINE {
        searches.pop();
        trimmed = true;
    }
    (searches, trimmed)
}

/// kubelet's `CheckLimitsForResolvConf`: what is wrong with the node's search line for
/// pods (kubelet's Warning `CheckLimitsForResolvConf` on the node), if anything. With a
/// cluster domain, three of the domains are the cluster's.
pub fn check_node_limits(rc: &ResolvConf, path: &Path, cluster_domain: &str) -> Option<String> {
    let path = path.display();
    let limit = if cluster_domain.is_empty() { MAX_SEARCHES } else { MAX_SEARCHES - 3 };
    if rc.searches.len() > limit {
        return Some(format!(
            "Resolv.conf file '{path}' contains search line consisting of more than {limit} domains!"
        ));
    }
    if rc.searches.iter().any(|s| s.len() > MAX_SEARCH_DOMAIN) {
        return Some(format!(
            "Resolv.conf file \"{path}\" contains a search path which length is more than allowed {MAX_SEARCH_DOMAIN} chars!"
        ));
    }
    if rc.searches.join(" ").len() > MAX_SEARCH_LINE {
        return Some(format!(
            "Resolv.conf file '{path}' contains search line which length is more than allowed {MAX_SEARCH_LINE} chars!"
        ));
    }
    None
}

/// A pod's hostname and domain.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodNames {
    /// The short hostname: `hostname`, else the pod's name, at most 63 characters.
    pub hostname: String,
    /// `<subdomain>.<namespace>.svc.<cluster domain>`, or empty without a subdomain.
    pub domain: String,
}

/// kubelet's `GeneratePodHostNameAndDomain`. A hostname past 63 characters is cut there,
/// without a trailing `-` or `.`. Without a cluster domain the domain ends in `.svc`
/// (kubelet writes `.svc.` with an empty label after it, which no lookup matches).
pub fn pod_names(pod: &Pod, cluster_domain: &str) -> PodNames {
    let spec = &pod.spec;
    let name = if spec.hostname.is_empty() { &pod.metadata.name } else { &spec.hostname };
    let hostname = if name.len() <= MAX_HOSTNAME {
        name.clone()
    } else {
        let end = name.char_indices().map(|(i, c)| i + c.len_utf8()).take_while(|e| *e <= MAX_HOSTNAME).last();
        let cut = &name[..end.unwrap_or(0)];
        let trimmed = cut.trim_end_matches(['-', '.']);
        // A validated name starts with a letter or digit: never empty after the trim.
        if trimmed.is_empty() { cut } else { trimmed }.to_string()
    };
    let domain = match (spec.subdomain.as_str(), cluster_domain) {
        ("", _) => String::new(),
        (sub, "") => format!("{sub}.{}.svc", pod.metadata.namespace),
        (sub, cd) => format!("{sub}.{}.svc.{cd}", pod.metadata.namespace),
    };
    PodNames { hostname, domain }
}

/// kubelet's `GetNodenameForKernel`: the hostname the pod's UTS namespace gets, its FQDN
/// with `setHostnameAsFQDN` (and a domain), which must fit the kernel's 64 characters.
pub fn kernel_hostname(pod: &Pod, names: &PodNames) -> Result<String, DnsError> {
    if !pod.spec.hostname_as_fqdn() || names.domain.is_empty() {
        return Ok(names.hostname.clone());
    }
    let fqdn = format!("{}.{}", names.hostname, names.domain);
    if fqdn.len() > MAX_FQDN {
        let len = fqdn.len();
        return Err(DnsError::FqdnTooLong { fqdn, len });
    }
    Ok(fqdn)
}

/// Reads and parses the node's resolver configuration (bounded, a regular file).
pub fn read_resolv_conf(path: &Path) -> Result<ResolvConf, DnsError> {
    crate::base::inputfile::read_to_string(path, MAX_NODE_FILE_BYTES)
        .map(|text| ResolvConf::parse(&text))
        .map_err(|source| DnsError::ReadResolvConf { path: path.into(), source })
}

/// Reads the node's hosts file (bounded, a regular file).
pub fn read_node_hosts(path: &Path) -> Result<String, DnsError> {
    crate::base::inputfile::read_to_string(path, MAX_NODE_FILE_BYTES)
        .map_err(|source| DnsError::ReadNodeHosts { path: path.into(), source })
}

/// Makes `path` hold `content`: the pod's directory (its parent) is made `0750` when
/// missing, and the file is written atomically, readable by all (`0644`, as kubelet's:
/// containers read it through a bind mount as any uid). A file that already holds
/// `content` is left as it is, so every container of the pod shares one inode.
pub fn ensure_hosts_file(path: &Path, content: &str) -> Result<(), DnsError> {
    let limit = content.len() as u64;
    if crate::base::inputfile::read_to_string(path, limit).is_ok_and(|old| old == content) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(dir)
            .map_err(|source| DnsError::CreatePodDir { path: dir.into(), source })?;
    }
    crate::base::state_files::write_atomic_readable(path, content.as_bytes())
        .map_err(|source| DnsError::WriteHostsFile { path: path.into(), source })
}

#[cfg(test)]
mod tests;
