//! `pod_dns`, `pod_names` and the hosts file, branch by branch, against kubelet's
//! `dns_test.go` and `kubelet_pods_test.go` cases; no I/O but the executors' own tests.

use super::hosts::{self, ETC_HOSTS};
use super::*;
use crate::api::{HostAlias, PodDnsConfig, PodDnsConfigOption};
use crate::node::runtime::Mount;

fn pod(policy: &str, host_network: bool) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = "web".into();
    p.metadata.namespace = "shop".into();
    p.metadata.uid = "u1".into();
    p.spec.dns_policy = policy.into();
    p.spec.host_network = host_network;
    p
}

fn node() -> ResolvConf {
    ResolvConf::parse(
        "# written by hand\nnameserver 192.168.1.1\nnameserver 192.168.1.2\nsearch old.example\nsearch lan. corp.example\noptions ndots:1 timeout:2\n",
    )
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn cluster() -> DnsSettings {
    DnsSettings { cluster_dns: strings(&["10.96.0.10"]), cluster_domain: "cluster.local".into(), ..Default::default() }
}

#[test]
fn resolv_conf_is_read_as_kubelet_reads_it() {
    let rc = node();
    assert_eq!(rc.nameservers, ["192.168.1.1", "192.168.1.2"], "nameserver lines add up");
    assert_eq!(rc.searches, ["lan", "corp.example"], "the last search line wins, trailing dots dropped");
    assert_eq!(rc.options, ["ndots:1", "timeout:2"]);
    let odd = ResolvConf::parse("nameserver\n  ; a comment\n\tnameserver 1.1.1.1 # trailing\ndomain x\n");
    assert_eq!(odd.nameservers, ["1.1.1.1"], "a nameserver line without an address is skipped, as glibc does");
    assert!(!odd.loopback_only());
    assert!(ResolvConf::parse("nameserver 127.0.0.53\n").loopback_only());
    assert!(!ResolvConf::parse("").loopback_only(), "no nameserver at all is not a loopback one");
}

#[test]
fn default_gets_the_nodes_resolver() {
    let d = pod_dns(&pod("Default", false), Some(&node()), &cluster());
    assert_eq!(d.config.servers, ["192.168.1.1", "192.168.1.2"]);
    assert_eq!(d.config.searches, ["lan", "corp.example"]);
    assert_eq!(d.config.options, ["ndots:1", "timeout:2"]);
    assert_eq!(d.events, []);
}

#[test]
fn without_a_resolv_conf_the_nodes_resolver_is_the_local_machine() {
    let d = pod_dns(&pod("Default", false), None, &DnsSettings::default());
    assert_eq!((d.config.servers, d.config.searches), (strings(&["127.0.0.1"]), strings(&["."])));
}

#[test]
fn cluster_first_uses_the_cluster_dns_with_its_search_domains_first() {
    let mut rc = node();
    rc.searches.push("svc.cluster.local".into());
    let d = pod_dns(&pod("ClusterFirst", false), Some(&rc), &cluster());
    assert_eq!(d.config.servers, ["10.96.0.10"], "only the cluster's nameserver");
    assert_eq!(
        d.config.searches,
        ["shop.svc.cluster.local", "svc.cluster.local", "cluster.local", "lan", "corp.example"],
        "the node's after the cluster's, each once"
    );
    assert_eq!(d.config.options, ["ndots:5"]);
    assert_eq!(d.events, []);
    let no_domain = DnsSettings { cluster_domain: String::new(), ..cluster() };
    let d = pod_dns(&pod("ClusterFirst", false), Some(&node()), &no_domain);
    assert_eq!(d.config.searches, ["lan", "corp.example"], "without a domain only the node's");
}

#[test]
fn cluster_first_without_a_cluster_dns_falls_back_to_the_nodes_resolver_with_kubelets_event() {
    let p = pod("ClusterFirst", false);
    let d = pod_dns(&p, Some(&node()), &DnsSettings::default());
    assert_eq!(d.config.servers, ["192.168.1.1", "192.168.1.2"]);
    assert_eq!(d.config.options, ["ndots:1", "timeout:2"], "the node's options, not ndots:5");
    assert_eq!(d.events, [DnsEvent::MissingClusterDns]);
    assert_eq!(d.events[0].reason(), "MissingClusterDNS");
    assert_eq!(
        d.events[0].message(&p),
        "pod: \"web_shop(u1)\". kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy."
    );
    // An unset policy is the API default, ClusterFirst.
    assert_eq!(pod_dns(&pod("", false), Some(&node()), &DnsSettings::default()), d);
}

#[test]
fn on_the_host_network_cluster_first_is_the_nodes_resolver_and_cluster_first_with_host_net_the_clusters() {
    let d = pod_dns(&pod("ClusterFirst", true), Some(&node()), &cluster());
    assert_eq!(
        (d.config.servers.as_slice(), d.events.as_slice()),
        (&strings(&["192.168.1.1", "192.168.1.2"])[..], &[][..])
    );
    let d = pod_dns(&pod("ClusterFirst", true), Some(&node()), &DnsSettings::default());
    assert_eq!(d.events, [], "no MissingClusterDNS: the host network never asks for it");
    let d = pod_dns(&pod("ClusterFirstWithHostNet", true), Some(&node()), &cluster());
    assert_eq!(d.config.servers, ["10.96.0.10"]);
    let d = pod_dns(&pod("ClusterFirstWithHostNet", true), Some(&node()), &DnsSettings::default());
    assert_eq!(d.events, [DnsEvent::MissingClusterDns]);
}

#[test]
fn none_uses_only_the_pods_dns_config() {
    let mut p = pod("None", false);
    p.spec.dns_config = Some(PodDnsConfig {
        nameservers: strings(&["10.0.0.53"]),
        searches: strings(&["my.example"]),
        options: vec![PodDnsConfigOption { name: "ndots".into(), value: Some("2".into()) }],
    });
    assert!(!reads_node_resolv_conf(&p));
    let d = pod_dns(&p, Some(&node()), &cluster());
    assert_eq!(
        d.config,
        DnsConfig {
            servers: strings(&["10.0.0.53"]),
            searches: strings(&["my.example"]),
            options: strings(&["ndots:2"])
        }
    );
    assert_eq!(d.events, []);
}

#[test]
fn dns_config_merges_onto_the_base_servers_and_searches_after_options_by_name_in_order() {
    let mut p = pod("Default", false);
    p.spec.dns_config = Some(PodDnsConfig {
        nameservers: strings(&["192.168.1.2", "10.0.0.53"]),
        searches: strings(&["lan", "my.example"]),
        options: vec![
            PodDnsConfigOption { name: "timeout".into(), value: Some("5".into()) },
            PodDnsConfigOption { name: "rotate".into(), value: None },
            PodDnsConfigOption { name: "ndots".into(), value: Some(String::new()) },
        ],
    });
    let d = pod_dns(&p, Some(&node()), &DnsSettings::default());
    assert_eq!(d.config.servers, ["192.168.1.1", "192.168.1.2", "10.0.0.53"], "appended, each once");
    assert_eq!(d.config.searches, ["lan", "corp.example", "my.example"]);
    assert_eq!(d.config.options, ["ndots", "timeout:5", "rotate"], "replaced in place, new ones after");
    assert_eq!(d.events, []);
}

#[test]
fn more_than_three_nameservers_are_trimmed_with_kubelets_event() {
    let mut p = pod("Default", false);
    p.spec.dns_config = Some(PodDnsConfig { nameservers: strings(&["10.0.0.53", "10.0.0.54"]), ..Default::default() });
    let d = pod_dns(&p, Some(&node()), &DnsSettings::default());
    assert_eq!(d.config.servers, ["192.168.1.1", "192.168.1.2", "10.0.0.53"]);
    assert_eq!(d.events, [DnsEvent::NameserversTrimmed(d.config.servers.clone())]);
    assert_eq!(d.events[0].reason(), "DNSConfigForming");
    assert_eq!(
        d.events[0].message(&p),
        "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: 192.168.1.1 192.168.1.2 10.0.0.53"
    );
}

#[test]
fn search_lists_past_the_limits_are_cut_from_the_end_with_kubelets_event() {
    // Too many: the first 32 stay.
    let mut rc = node();
    rc.searches = (0..40).map(|i| format!("d{i}.example")).collect();
    let d = pod_dns(&pod("Default", false), Some(&rc), &DnsSettings::default());
    assert_eq!(d.config.searches, rc.searches[..32]);
    assert_eq!(d.events, [DnsEvent::SearchesTrimmed(d.config.searches.clone())]);
    assert!(d.events[0]
        .message(&pod("Default", false))
        .starts_with("Search Line limits were exceeded, some search paths have been omitted, the applied search line is: d0.example d1.example"));
    // A domain glibc would abort on goes; the rest stays in order.
    rc.searches = vec!["a.example".into(), "x".repeat(254), "b.example".into()];
    let d = pod_dns(&pod("Default", false), Some(&rc), &DnsSettings::default());
    assert_eq!(d.config.searches, ["a.example", "b.example"]);
    assert_eq!(d.events.len(), 1);
    // Too long in all: cut from the end until the line fits 2048 characters.
    rc.searches = (0..10).map(|i| format!("{i}{}", "y".repeat(249))).collect();
    let d = pod_dns(&pod("Default", false), Some(&rc), &DnsSettings::default());
    assert_eq!(d.config.searches, rc.searches[..8], "8 × 250 + 7 spaces = 2007 fit; a ninth would not");
    // Within the limits nothing is said.
    rc.searches = (0..32).map(|i| format!("d{i}")).collect();
    assert_eq!(pod_dns(&pod("Default", false), Some(&rc), &DnsSettings::default()).events, []);
}

#[test]
fn the_nodes_search_line_is_checked_against_the_limits_left_for_pods() {
    let path = Path::new("/etc/resolv.conf");
    let mut rc = node();
    assert_eq!(check_node_limits(&rc, path, "cluster.local"), None);
    rc.searches = (0..30).map(|i| format!("d{i}")).collect();
    assert_eq!(check_node_limits(&rc, path, ""), None);
    assert_eq!(
        check_node_limits(&rc, path, "cluster.local").as_deref(),
        Some("Resolv.conf file '/etc/resolv.conf' contains search line consisting of more than 29 domains!")
    );
    rc.searches = vec!["z".repeat(254)];
    assert!(check_node_limits(&rc, path, "").unwrap().contains("a search path which length is more than allowed 253"));
    rc.searches = (0..9).map(|_| "w".repeat(250)).collect();
    assert!(check_node_limits(&rc, path, "").unwrap().contains("search line which length is more than allowed 2048"));
}

#[test]
fn the_hostname_is_the_spec_hostname_or_the_pod_name_cut_at_63_characters() {
    let mut p = pod("", false);
    assert_eq!(pod_names(&p, ""), PodNames { hostname: "web".into(), domain: String::new() });
    p.spec.hostname = "db-0".into();
    assert_eq!(pod_names(&p, "").hostname, "db-0");
    p.spec.hostname = String::new();
    p.metadata.name = format!("{}-.-tail", "a".repeat(61));
    assert_eq!(pod_names(&p, "").hostname, "a".repeat(61), "cut at 63, trailing '-' and '.' dropped");
    p.metadata.name = "b".repeat(80);
    assert_eq!(pod_names(&p, "").hostname, "b".repeat(63));
}

#[test]
fn a_subdomain_gives_the_pod_a_domain_under_its_namespace() {
    let mut p = pod("", false);
    p.spec.subdomain = "sub".into();
    assert_eq!(pod_names(&p, "cluster.local").domain, "sub.shop.svc.cluster.local");
    assert_eq!(pod_names(&p, "").domain, "sub.shop.svc", "without a cluster domain, no dangling dot");
}

#[test]
fn set_hostname_as_fqdn_sets_the_fqdn_if_the_kernel_can_hold_it() {
    let mut p = pod("", false);
    p.spec.hostname = "db-0".into();
    p.spec.subdomain = "sub".into();
    let names = pod_names(&p, "cluster.local");
    assert_eq!(kernel_hostname(&p, &names).unwrap(), "db-0", "the short name unless asked");
    p.spec.set_hostname_as_fqdn = Some(true);
    assert_eq!(kernel_hostname(&p, &names).unwrap(), "db-0.sub.shop.svc.cluster.local");
    let no_domain = PodNames { domain: String::new(), ..names.clone() };
    assert_eq!(kernel_hostname(&p, &no_domain).unwrap(), "db-0", "no domain: no FQDN");
    p.spec.hostname = "h".repeat(40);
    let e = kernel_hostname(&p, &pod_names(&p, "cluster.local")).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("failed to construct FQDN from pod hostname and cluster domain, FQDN {}.sub.shop.svc.cluster.local is too long (64 characters is the max, 67 characters requested)", "h".repeat(40))
    );
}

fn aliases() -> Vec<HostAlias> {
    vec![
        HostAlias { ip: "10.1.2.3".into(), hostnames: strings(&["db", "db.local"]) },
        HostAlias { ip: "fd00::1".into(), hostnames: strings(&["v6"]) },
    ]
}

#[test]
fn a_pod_network_hosts_file_names_the_pod_ip_then_the_host_aliases() {
    let names = PodNames { hostname: "db-0".into(), domain: "sub.shop.svc".into() };
    let text = hosts::managed(&strings(&["10.85.0.7"]), &names, &aliases());
    assert_eq!(
        text,
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n10.85.0.7\tdb-0.sub.shop.svc\tdb-0\n\n# Entries added by HostAliases.\n10.1.2.3\tdb\tdb.local\nfd00::1\tv6\n"
    );
    let plain = hosts::managed(
        &strings(&["10.85.0.7", "fd00::7"]),
        &PodNames { hostname: "web".into(), domain: String::new() },
        &[],
    );
    assert!(plain.ends_with("fe00::2\tip6-allrouters\n10.85.0.7\tweb\nfd00::7\tweb\n"), "{plain}");
    let no_ip = hosts::managed(&[], &names, &aliases());
    assert!(!no_ip.contains("db-0") && no_ip.contains("10.1.2.3\tdb"), "{no_ip}");
}

#[test]
fn a_host_network_hosts_file_is_the_nodes_plus_the_host_aliases() {
    let node_hosts = "127.0.0.1 localhost\n192.168.1.5 edge-1\n";
    assert_eq!(
        hosts::host_network(node_hosts, &aliases()[..1]),
        "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n192.168.1.5 edge-1\n\n# Entries added by HostAliases.\n10.1.2.3\tdb\tdb.local\n"
    );
    assert_eq!(hosts::host_network(node_hosts, &[]), format!("{}{node_hosts}", hosts::MANAGED_HEADER_HOST_NETWORK));
}

#[test]
fn a_container_that_mounts_its_own_etc_hosts_keeps_it() {
    let m = |p: &str| Mount { container_path: p.into(), host_path: "/x".into(), ..Default::default() };
    assert!(hosts::wants_hosts_mount(&[]));
    assert!(hosts::wants_hosts_mount(&[m("/etc/hostname"), m("/data")]));
    assert!(!hosts::wants_hosts_mount(&[m("/etc/hosts")]));
    assert!(!hosts::wants_hosts_mount(&[m("/etc//hosts/")]), "the same path spelled otherwise");
    let mount = hosts::mount("/state/pods/u1/etc-hosts".into());
    assert_eq!((mount.container_path.as_str(), mount.read_only), (ETC_HOSTS, false));
}

#[test]
fn the_hosts_file_is_written_readable_by_all_and_left_alone_when_unchanged() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pods").join("u1").join("etc-hosts");
    ensure_hosts_file(&path, "one\n").unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\n");
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o644);
    assert_eq!(std::fs::metadata(path.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o750);
    let inode = std::fs::metadata(&path).unwrap().ino();
    ensure_hosts_file(&path, "one\n").unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode, "the same content: not written again");
    ensure_hosts_file(&path, "two\n").unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "two\n");
    let e = read_resolv_conf(&dir.path().join("missing")).unwrap_err();
    assert!(crate::base::errors::Chain(&e).to_string().starts_with(&format!(
        "cannot read the node's resolver configuration {} (resolv_conf): cannot read",
        dir.path().join("missing").display()
    )));
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_text_is_read_without_a_panic(text in "\\PC{0,400}") {
            let _ = ResolvConf::parse(&text);
        }

        #[test]
        fn nameservers_add_up_and_the_last_search_and_options_lines_win(
            lines in prop::collection::vec(
                (0..5u8, prop::collection::vec("[a-z0-9.:]{1,12}", 0..4), "[ \t]{1,3}"),
                0..12,
            ),
        ) {
            let (mut nameservers, mut searches, mut options) = (Vec::new(), Vec::new(), Vec::new());
            let mut text = String::new();
            for (kind, words, space) in lines {
                let keyword = ["nameserver", "search", "options", "# nameserver", "domain"][kind as usize];
                text.push_str(&format!("{keyword}{space}{}\n", words.join(&space)));
                match kind {
                    0 => nameservers.extend(words.first().cloned()),
                    1 => searches = words.iter().map(|w| w.strip_suffix('.').unwrap_or(w).to_string()).collect(),
                    2 => options = words.clone(),
                    _ => {}
                }
            }
            let rc = ResolvConf::parse(&text);
            prop_assert_eq!((rc.nameservers, rc.searches, rc.options), (nameservers, searches, options), "{}", text);
        }
    }
}
