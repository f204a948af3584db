//! The pod's hosts file (kubelet's `managedHostsFileContent`, `nodeHostsFileContent` and
//! `hostsEntriesFromHostAliases`): written into the pod's directory and bind-mounted at
//! `/etc/hosts` in each of its containers that does not mount its own.

use super::PodNames;
use crate::api::HostAlias;
use crate::node::runtime::{Mount, Propagation};
use std::path::{Path, PathBuf};

/// Where the hosts file appears in a container.
pub const ETC_HOSTS: &str = "/etc/hosts";
/// The first line of a pod-network pod's hosts file.
pub const MANAGED_HEADER: &str = "# Kubernetes-managed hosts file.\n";
/// The first line of a host-network pod's hosts file (the node's follows).
pub const MANAGED_HEADER_HOST_NETWORK: &str = "# Kubernetes-managed hosts file (host network).\n";

/// A pod-network pod's hosts file: the header, the localhost lines, one line per pod IP
/// naming its FQDN and hostname (or the hostname alone without a domain), then the host
/// aliases. Without an IP (a network plugin that gave none) there is no pod IP line, and the
/// file is still made: kubelet then mounts none, and the aliases would be lost.
pub fn managed(ips: &[String], names: &PodNames, aliases: &[HostAlias]) -> String {
    let mut out = String::from(MANAGED_HEADER);
    out.push_str("127.0.0.1\tlocalhost\n");
    out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
    out.push_str("fe00::0\tip6-localnet\n");
    out.push_str("fe00::0\tip6-mcastprefix\n");
    out.push_str("fe00::1\tip6-allnodes\n");
    out.push_str("fe00::2\tip6-allrouters\n");
    for ip in ips {
        let host = &names.hostname;
        if names.domain.is_empty() {
            out.push_str(&format!("{ip}\t{host}\n"));
        } else {
            out.push_str(&format!("{ip}\t{host}.{}\t{host}\n", names.domain));
        }
    }
    out.push_str(&alias_lines(aliases));
    out
}

/// A host-network pod's hosts file: the header, the node's hosts file as it is, then the
/// host aliases.
pub fn host_network(node_hosts: &str, aliases: &[HostAlias]) -> String {
    let mut out = String::from(MANAGED_HEADER_HOST_NETWORK);
    out.push_str(node_hosts);
    out.push_str(&alias_lines(aliases));
    out
}

/// The host aliases after a blank line and their own header, one line per address with
/// its names tab-separated; nothing without aliases.
fn alias_lines(aliases: &[HostAlias]) -> String {
    if aliases.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n# Entries added by HostAliases.\n");
    for a in aliases {
        out.push_str(&format!("{}\t{}\n", a.ip, a.hostnames.join("\t")));
    }
    out
}

/// Whether a container whose other mounts are `existing` gets the pod's hosts file: not
/// when it mounts something at `/etc/hosts` itself (kubelet's rule; the path compared by
/// its components, so `/etc//hosts/` is `/etc/hosts` too). This is the hook for volume
/// mounts: pass the container's volume mounts before the hosts mount is added.
pub fn wants_hosts_mount(existing: &[Mount]) -> bool {
    !existing.iter().any(|m| Path::new(&m.container_path) == Path::new(ETC_HOSTS))
}

/// The mount of the pod's hosts file `host_path` at `/etc/hosts`: writable, as kubelet
/// mounts it (a container may add its own lines).
pub fn mount(host_path: PathBuf) -> Mount {
    Mount { container_path: ETC_HOSTS.into(), host_path, read_only: false, propagation: Propagation::Private }
}
