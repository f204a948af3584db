//! Pod names and resolvers with `ferrolet run` on the real containerd of `tests/cri/up.sh`:
//! what a container sees in `/etc/hosts`, `/etc/resolv.conf` and `hostname` for the pod's
//! `hostname`, `subdomain`, `setHostnameAsFQDN`, `hostAliases`, `dnsPolicy` and
//! `dnsConfig`, on the pod network and on the host network. Without the harness each test
//! skips with the reason.

use crate::common;

use common::cri::{busybox, client, var, CriNode};
use common::{container, manifest, wait_for, AgentProcess};
use ferrolet::base::manager::Health;
use ferrolet::node::runtime::cri::CriRuntime;
use ferrolet::node::runtime::ContainerRuntime;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

/// Waits until container `app` of pod `name` runs; returns the pod's status IP and the
/// container's id.
fn running(node: &CriNode, agent: &AgentProcess, name: &str) -> (String, String) {
    let p = wait_for(&format!("pod {name} running"), WAIT, || {
        node.pod(agent, name).filter(|p| container(p, "app").is_some_and(|c| c.state.running.is_some()))
    });
    node.own(&p.metadata.uid);
    let id = container(&p, "app").unwrap().container_id.rsplit("://").next().unwrap().to_string();
    (p.status.unwrap().pod_ip, id)
}

/// Runs `cmd` in container `id` and returns its standard output (it must succeed).
fn exec(node: &CriNode, id: &str, cmd: &[&str]) -> String {
    let rt = CriRuntime::new(client(&node.endpoint), &var("FERROLET_CRI_PAUSE_IMAGE"), &node.node, &Health::default());
    let cmd: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
    let r = rt.exec_sync(id, &cmd, Duration::from_secs(10)).unwrap();
    assert_eq!(r.exit_code, 0, "{cmd:?}: {}", String::from_utf8_lossy(&r.stderr));
    String::from_utf8(r.stdout).unwrap()
}

#[test]
fn a_container_sees_the_pods_hostname_host_aliases_and_dns_config() {
    let Some(node) = CriNode::new() else { return };
    node.sb.write_manifest(
        "names.yaml",
        &manifest(
            "names",
            &format!(
                "  hostname: db-0
  subdomain: sub
  hostAliases:
  - ip: 10.1.2.3
    hostnames: [store, store.local]
  - ip: 'fd00::1'
    hostnames: [v6]
  dnsPolicy: None
  dnsConfig:
    nameservers: [10.0.0.53, 10.0.0.54]
    searches: [my.example, other.example]
    options: [{{name: ndots, value: '2'}}, {{name: rotate}}]
  containers:
  - name: app
    image: {}
    command: [sleep, '3600']
    securityContext: {{runAsUser: 1000}}
",
                busybox()
            ),
        ),
    );
    let agent = node.start();
    let (ip, id) = running(&node, &agent, "names");
    assert!(!ip.is_empty(), "the pod is on the pod network");

    // Read as uid 1000: the hosts file is readable by every user.
    let hosts = exec(&node, &id, &["cat", "/etc/hosts"]);
    let want = format!(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n{ip}\tdb-0.sub.default.svc\tdb-0\n\n# Entries added by HostAliases.\n10.1.2.3\tstore\tstore.local\nfd00::1\tv6\n"
    );
    assert_eq!(hosts, want);
    assert_eq!(exec(&node, &id, &["hostname"]), "db-0\n");

    let resolv = exec(&node, &id, &["cat", "/etc/resolv.conf"]);
    let lines: Vec<&str> = resolv.lines().collect();
    assert!(lines.contains(&"search my.example other.example"), "{resolv}");
    assert!(lines.contains(&"nameserver 10.0.0.53") && lines.contains(&"nameserver 10.0.0.54"), "{resolv}");
    assert!(lines.contains(&"options ndots:2 rotate"), "{resolv}");
    assert_eq!(lines.iter().filter(|l| l.starts_with("nameserver")).count(), 2, "only the pod's: {resolv}");
    // The file on the node is the pod's own, in its directory.
    let on_node = node.sb.state().join("pods").join(node.pod(&agent, "names").unwrap().metadata.uid).join("etc-hosts");
    assert_eq!(std::fs::read_to_string(on_node).unwrap(), want);
}

#[test]
fn cluster_first_without_a_cluster_dns_gets_the_nodes_resolv_conf_and_set_hostname_as_fqdn_the_fqdn() {
    let Some(node) = CriNode::new() else { return };
    let resolv = node.sb.dir.path().join("node-resolv.conf");
    std::fs::write(&resolv, "# the node's\nnameserver 10.0.0.10\nsearch corp.example\noptions ndots:3\n").unwrap();
    node.sb.write_manifest(
        "fqdn.yaml",
        &manifest(
            "fqdn",
            &format!(
                "  hostname: web\n  subdomain: sub\n  setHostnameAsFQDN: true\n  containers:\n  - name: app\n    image: {}\n    command: [sleep, '3600']\n",
                busybox()
            ),
        ),
    );
    let agent = node
        .start_with(|text| format!("resolv_conf = {resolv:?}\ncluster_domain = \"cluster.local\"\n{text}"), "debug");
    let (ip, id) = running(&node, &agent, "fqdn");
    assert_eq!(exec(&node, &id, &["hostname"]), "web.sub.default.svc.cluster.local\n");
    let hosts = exec(&node, &id, &["cat", "/etc/hosts"]);
    assert!(hosts.contains(&format!("\n{ip}\tweb.sub.default.svc.cluster.local\tweb\n")), "{hosts}");
    let resolv = exec(&node, &id, &["cat", "/etc/resolv.conf"]);
    let lines: Vec<&str> = resolv.lines().collect();
    assert!(
        lines.contains(&"nameserver 10.0.0.10")
            && lines.contains(&"search corp.example")
            && lines.contains(&"options ndots:3"),
        "{resolv}"
    );
    agent.events_where("MissingClusterDNS event with kubelet's message", |events| {
        events.contains("\"reason\":\"MissingClusterDNS\"")
            && events.contains("kubelet does not have ClusterDNS IP configured and cannot create Pod using \\\"ClusterFirst\\\" policy. Falling back to \\\"Default\\\" policy.")
    });
}

#[test]
fn a_host_network_pod_sees_the_nodes_hosts_file_with_its_aliases_and_the_nodes_hostname() {
    let Some(node) = CriNode::new() else { return };
    node.sb.write_manifest(
        "hostnet.yaml",
        &manifest(
            "hostnet",
            &format!(
                "  hostNetwork: true\n  hostAliases:\n  - ip: 10.1.2.3\n    hostnames: [store]\n  containers:\n  - name: app\n    image: {}\n    command: [sleep, '3600']\n",
                busybox()
            ),
        ),
    );
    let agent = node.start();
    let (_, id) = running(&node, &agent, "hostnet");
    let node_hosts = std::fs::read_to_string("/etc/hosts").unwrap();
    assert_eq!(
        exec(&node, &id, &["cat", "/etc/hosts"]),
        format!("# Kubernetes-managed hosts file (host network).\n{node_hosts}\n# Entries added by HostAliases.\n10.1.2.3\tstore\n")
    );
    assert_eq!(exec(&node, &id, &["hostname"]), format!("{}\n", ferrolet::base::net::hostname()));
}
