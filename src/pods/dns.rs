//! The pod's names, resolver and hosts file, on a runtime that gives pods their own (CRI):
//! the decisions are `dns`'s; this reads the node's files, writes the pod's hosts file into
//! its directory and records kubelet's DNS events. With the process runtime (`cfg.dns` is
//! `None`) every pod shares the node's, and nothing here acts.

use super::actor::Actor;
use super::ContainerStartError;
use crate::api::Pod;
use crate::base::errors::Chain;
use crate::node::dns::{self, hosts};
use crate::node::runtime::{DnsConfig, Mount};

/// What the DNS side remembers.
#[derive(Default)]
pub(super) struct PodDns {
    /// The node's `MissingClusterDNS` event was recorded (once per agent run).
    missing_cluster_dns_said: bool,
}

impl PodDns {
    /// The sandbox's hostname (none on the host network) and resolver configuration, made
    /// as kubelet's `generatePodSandboxConfig` makes them, with its events; `Err` with the
    /// reason the sandbox cannot be made (a FQDN too long, an unreadable resolv.conf).
    pub(super) fn sandbox_names(&mut self, act: &Actor, pod: &Pod) -> Result<(String, Option<DnsConfig>), String> {
        let Some(settings) = &act.cfg.dns else { return Ok((String::new(), None)) };
        let hostname = if pod.spec.host_network {
            String::new()
        } else {
            let names = dns::pod_names(pod, &settings.cluster_domain);
            dns::kernel_hostname(pod, &names).map_err(|e| Chain(&e).to_string())?
        };
        let node = match (&settings.resolv_conf, dns::reads_node_resolv_conf(pod)) {
            (Some(path), true) => Some(dns::read_resolv_conf(path).map_err(|e| Chain(&e).to_string())?),
            _ => None,
        };
        let made = dns::pod_dns(pod, node.as_ref(), settings);
        for event in &made.events {
            act.event(pod, None, true, event.reason(), &event.message(pod));
            // kubelet says it on the node at every sandbox too; once per agent run is enough.
            if *event == dns::DnsEvent::MissingClusterDns && !self.missing_cluster_dns_said {
                self.missing_cluster_dns_said = true;
                act.node_warning(event.reason(), dns::MISSING_CLUSTER_DNS);
            }
        }
        Ok((hostname, Some(made.config)))
    }

    /// The pod's hosts file, mounted at `/etc/hosts` in a container whose other mounts are
    /// `existing` (its volume mounts: one at `/etc/hosts` keeps its own), as kubelet's
    /// `makeHostsMount`: made in the pod's directory before the container is created, from
    /// the sandbox's IPs (or, on the host network, the node's hosts file) and the pod's host
    /// aliases. `None` when the container keeps its own, or the runtime shares the node's.
    pub(super) fn hosts_mount(
        act: &Actor,
        pod: &Pod,
        sandbox_id: &str,
        existing: &[Mount],
    ) -> Result<Option<Mount>, ContainerStartError> {
        let Some(settings) = &act.cfg.dns else { return Ok(None) };
        if !hosts::wants_hosts_mount(existing) {
            return Ok(None);
        }
        let config_error = |e: dns::DnsError| ContainerStartError::Config { message: Chain(&e).to_string() };
        let aliases = &pod.spec.host_aliases;
        let content = if pod.spec.host_network {
            hosts::host_network(&dns::read_node_hosts(&settings.node_hosts).map_err(config_error)?, aliases)
        } else {
            let names = dns::pod_names(pod, &settings.cluster_domain);
            hosts::managed(&act.runtime.pod_sandbox_ips(sandbox_id), &names, aliases)
        };
        let path = act.pod_dir(pod).etc_hosts();
        dns::ensure_hosts_file(&path, &content).map_err(config_error)?;
        Ok(Some(hosts::mount(path)))
    }
}
