//! Pod names, resolvers and hosts files on a runtime that gives pods their own (CRI):
//! what the sandbox is made with, what each container mounts, what is written into the
//! pod's directory, and kubelet's DNS events.

use super::*;
use crate::api::{HostAlias, PodDnsConfig};
use crate::node::dns::DnsSettings;
use crate::node::runtime::Mount;

/// A node whose pods get their own names and resolvers, the node's files and the pods'
/// directories in a temporary directory.
struct DnsNode {
    n: Node,
    dir: tempfile::TempDir,
}

impl DnsNode {
    fn new(edit: impl FnOnce(&mut DnsSettings)) -> DnsNode {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("resolv.conf"), "nameserver 192.168.1.1\nsearch lan\noptions ndots:1\n")
            .unwrap();
        std::fs::write(dir.path().join("hosts"), "127.0.0.1 localhost\n192.168.1.5 edge-1\n").unwrap();
        let mut settings = DnsSettings {
            resolv_conf: Some(dir.path().join("resolv.conf")),
            node_hosts: dir.path().join("hosts"),
            ..Default::default()
        };
        edit(&mut settings);
        let mut n = Node::new();
        n.pm.act.cfg.dns = Some(settings);
        n.pm.act.cfg.pods_root = dir.path().join("pods");
        n.rt.give_pod_ips(&["10.85.0.7"]);
        DnsNode { n, dir }
    }

    fn sandbox(&self) -> Arc<crate::node::runtime::SandboxConfig> {
        self.n.rt.sandboxes().last().expect("a sandbox").config.clone()
    }

    fn hosts_file(&self, pod: &Pod) -> String {
        std::fs::read_to_string(self.dir.path().join("pods").join(&pod.metadata.uid).join("etc-hosts")).unwrap()
    }
}

fn named_pod() -> Pod {
    let mut p = pod("db", RestartPolicy::Always, &[], &[app("app"), app("helper")]);
    p.spec.hostname = "db-0".into();
    p.spec.subdomain = "sub".into();
    p.spec.host_aliases = vec![HostAlias { ip: "10.1.2.3".into(), hostnames: vec!["store".into()] }];
    p.spec.dns_policy = "None".into();
    p.spec.dns_config = Some(PodDnsConfig {
        nameservers: vec!["10.0.0.53".into()],
        searches: vec!["my.example".into()],
        ..Default::default()
    });
    p
}

#[test]
fn a_pod_network_sandbox_gets_the_pods_hostname_and_resolver_and_every_container_its_hosts_file() {
    let mut d = DnsNode::new(|_| {});
    let p = named_pod();
    d.n.apply(&[&p]);
    let sandbox = d.sandbox();
    assert_eq!(sandbox.hostname, "db-0");
    let dns = sandbox.dns.clone().expect("a resolver config");
    assert_eq!((dns.servers, dns.searches), (vec!["10.0.0.53".to_string()], vec!["my.example".to_string()]));
    let path = d.dir.path().join("pods/uid-db/etc-hosts");
    let want = vec![Mount { container_path: "/etc/hosts".into(), host_path: path, ..Default::default() }];
    for name in ["app", "helper"] {
        assert_eq!(d.n.instance(name).config.mounts, want, "container {name}");
    }
    let hosts = d.hosts_file(&p);
    assert!(hosts.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"), "{hosts}");
    assert!(hosts.contains("\n10.85.0.7\tdb-0.sub.default.svc\tdb-0\n"), "{hosts}");
    assert!(hosts.ends_with("# Entries added by HostAliases.\n10.1.2.3\tstore\n"), "{hosts}");
    assert_eq!(d.n.reasons().iter().filter(|r| r.contains("DNS")).count(), 0, "nothing to say");
}

#[test]
fn set_hostname_as_fqdn_names_the_sandbox_by_its_fqdn_or_fails_it_with_kubelets_message() {
    let mut d = DnsNode::new(|s| s.cluster_domain = "cluster.local".into());
    let mut p = named_pod();
    p.spec.set_hostname_as_fqdn = Some(true);
    d.n.apply(&[&p]);
    assert_eq!(d.sandbox().hostname, "db-0.sub.default.svc.cluster.local");

    let mut d = DnsNode::new(|s| s.cluster_domain = "cluster.local".into());
    p.spec.hostname = "h".repeat(40);
    d.n.apply(&[&p]);
    assert!(d.n.rt.sandboxes().is_empty(), "no sandbox is made");
    let failed: Vec<String> =
        d.n.events().into_iter().filter(|(r, _)| r == "FailedCreatePodSandBox").map(|(_, m)| m).collect();
    assert_eq!(
        failed,
        [format!("Failed to create pod sandbox: failed to construct FQDN from pod hostname and cluster domain, FQDN {}.sub.default.svc.cluster.local is too long (64 characters is the max, 70 characters requested)", "h".repeat(40))]
    );
}

#[test]
fn cluster_first_without_a_cluster_dns_gets_the_nodes_resolver_and_kubelets_warning_once_on_the_node() {
    let mut d = DnsNode::new(|_| {});
    let web = pod("web", RestartPolicy::Always, &[], &[app("app")]);
    let api = pod("api", RestartPolicy::Always, &[], &[app("app")]);
    d.n.apply(&[&web, &api]);
    for s in d.n.rt.sandboxes() {
        let dns = s.config.dns.clone().unwrap();
        assert_eq!(
            (dns.servers, dns.searches, dns.options),
            (vec!["192.168.1.1".into()], vec!["lan".into()], vec!["ndots:1".into()])
        );
        assert_eq!(s.config.hostname, s.config.pod_name, "no hostname asked: the pod's name");
    }
    let missing: Vec<String> =
        d.n.events().into_iter().filter(|(r, _)| r == "MissingClusterDNS").map(|(_, m)| m).collect();
    assert_eq!(
        missing,
        [
            "pod: \"api_default(uid-api)\". kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.",
            crate::node::dns::MISSING_CLUSTER_DNS,
            "pod: \"web_default(uid-web)\". kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.",
        ],
        "each pod's sandbox says it; the node once"
    );
    // A restarted container makes no new sandbox, so nothing is said again (kubelet says
    // it at every container start).
    d.n.rt.exit("app", 1);
    d.n.advance(20);
    d.n.tick();
    assert!(!d.n.reasons().iter().any(|r| r == "MissingClusterDNS"));
}

#[test]
fn a_host_network_pod_gets_the_nodes_hosts_file_with_its_aliases_and_no_hostname() {
    let mut d = DnsNode::new(|_| {});
    let mut p = named_pod();
    p.spec.host_network = true;
    d.n.apply(&[&p]);
    assert_eq!(d.sandbox().hostname, "", "the node's UTS namespace");
    assert_eq!(
        d.hosts_file(&p),
        "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n192.168.1.5 edge-1\n\n# Entries added by HostAliases.\n10.1.2.3\tstore\n"
    );
    assert_eq!(d.n.instance("app").config.mounts.len(), 1);
}

#[test]
fn a_hosts_file_that_cannot_be_written_holds_the_container_as_create_container_config_error() {
    let mut d = DnsNode::new(|_| {});
    std::fs::write(d.dir.path().join("pods"), "not a directory").unwrap();
    let p = pod("web", RestartPolicy::Always, &[], &[app("app")]);
    d.n.apply(&[&p]);
    assert!(d.n.rt.containers().is_empty(), "nothing is created");
    let (reason, message) = d.n.waiting(&p, "app").expect("the container waits");
    assert_eq!(reason, "CreateContainerConfigError");
    assert!(message.starts_with("cannot create the pod's directory "), "{message}");
}

#[test]
fn an_unreadable_resolv_conf_fails_the_sandbox_but_none_does_not_read_it() {
    let mut d = DnsNode::new(|s| s.resolv_conf = Some("/nonexistent/resolv.conf".into()));
    let web = pod("web", RestartPolicy::Always, &[], &[app("app")]);
    d.n.apply(&[&web]);
    assert!(d.n.rt.sandboxes().is_empty());
    let failed = d.n.events().into_iter().find(|(r, _)| r == "FailedCreatePodSandBox").unwrap().1;
    assert!(
        failed.starts_with("Failed to create pod sandbox: cannot read the node's resolver configuration /nonexistent/resolv.conf (resolv_conf): cannot read"),
        "{failed}"
    );
    d.n.apply(&[&named_pod()]);
    assert_eq!(d.n.rt.sandboxes().len(), 1, "dnsPolicy None does not need the node's file");
}

#[test]
fn with_the_node_sharing_its_names_nothing_is_asked_or_mounted() {
    let mut n = Node::new();
    n.apply(&[&pod("web", RestartPolicy::Always, &[], &[app("app")])]);
    let s = n.rt.sandboxes().remove(0);
    assert_eq!((s.config.hostname.as_str(), s.config.dns.as_ref()), ("", None));
    assert_eq!(n.instance("app").config.mounts, []);
}
