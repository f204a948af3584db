use super::*;
use crate::node::stats::{ContainerStats, CpuStats, MemoryStats, NodeStats, PodStats, Snapshot};

const MI: u64 = 1 << 20;

fn c(name: &str, nano_cores: Option<u64>, bytes: u64) -> ContainerStats {
    ContainerStats {
        name: name.into(),
        cpu: Some(CpuStats { usage_nano_cores: nano_cores, usage_core_nano_seconds: 1, ..Default::default() }),
        memory: Some(MemoryStats { working_set_bytes: bytes, ..Default::default() }),
        ..Default::default()
    }
}

fn pod(ns: &str, name: &str, containers: Vec<ContainerStats>) -> PodStats {
    PodStats { name: name.into(), namespace: ns.into(), uid: format!("uid-{name}"), containers, ..Default::default() }
}

/// The summary `top` reads, made the way the agent serves it: rendered by the
/// `/stats/summary` renderer from a snapshot, then decoded.
fn summary() -> Summary {
    let s = Snapshot {
        node: NodeStats {
            node_name: "edge1".into(),
            cpu: Some(CpuStats { usage_nano_cores: Some(250_400_000), ..Default::default() }),
            memory: Some(MemoryStats { working_set_bytes: 512 * MI, ..Default::default() }),
            ..Default::default()
        },
        pods: vec![
            // 1.5m + 0.2m: kubectl adds the quantities, then rounds up.
            pod(
                "default",
                "web-edge1",
                vec![c("app", Some(1_500_000), 30 * MI + 900_000), c("proxy", Some(200_000), 4 * MI)],
            ),
            pod("default", "api-edge1", vec![c("api", Some(40_000_000), 8 * MI)]),
            pod("kube-system", "dns-edge1", vec![c("dns", Some(3_000_000), 12 * MI)]),
            // Measured once: no rate yet, so not shown.
            pod("default", "new-edge1", vec![c("c", None, MI)]),
            // Every container ended: nothing to show.
            pod("default", "done-edge1", vec![]),
        ],
        ..Default::default()
    };
    let json = crate::server::stats::summary_json(&s, true).unwrap();
    let value: serde_json::Value = serde_json::from_slice(&json).unwrap();
    crate::api::decode(&value).unwrap()
}

fn q(namespace: Option<&str>) -> PodsQuery {
    PodsQuery { namespace: namespace.map(Into::into), ..Default::default() }
}

#[test]
fn top_pods_prints_kubectls_columns_for_one_namespace_sorted_by_name() {
    let out = render_top_pods(&summary(), &q(Some("default"))).unwrap();
    assert_eq!(
        out,
        "NAME        CPU(cores)   MEMORY(bytes)\n\
         api-edge1   40m          8Mi\n\
         web-edge1   2m           34Mi\n"
    );
}

#[test]
fn every_namespace_adds_the_namespace_column() {
    let out = render_top_pods(&summary(), &q(None)).unwrap();
    assert_eq!(
        out,
        "NAMESPACE     NAME        CPU(cores)   MEMORY(bytes)\n\
         default       api-edge1   40m          8Mi\n\
         default       web-edge1   2m           34Mi\n\
         kube-system   dns-edge1   3m           12Mi\n"
    );
}

#[test]
fn containers_get_a_row_each_and_sorting_by_usage_puts_the_largest_first() {
    let query = PodsQuery { containers: true, sort_by: SortBy::Memory, ..q(Some("default")) };
    let out = render_top_pods(&summary(), &query).unwrap();
    assert_eq!(
        out,
        "POD         NAME    CPU(cores)   MEMORY(bytes)\n\
         web-edge1   app     2m           30Mi\n\
         web-edge1   proxy   1m           4Mi\n\
         api-edge1   api     40m          8Mi\n"
    );
    let by_cpu = render_top_pods(&summary(), &PodsQuery { sort_by: SortBy::Cpu, ..q(None) }).unwrap();
    let names: Vec<&str> = by_cpu.lines().skip(1).map(|l| l.split_whitespace().nth(1).unwrap()).collect();
    assert_eq!(names, ["api-edge1", "dns-edge1", "web-edge1"]);
    assert!("size".parse::<SortBy>().unwrap_err().to_string().contains("sort by cpu or memory"));
}

#[test]
fn a_named_pod_is_found_by_its_manifest_name_or_says_why_it_is_missing() {
    let one = |name: &str| render_top_pods(&summary(), &PodsQuery { pod: Some(name.into()), ..q(Some("default")) });
    assert_eq!(one("web").unwrap(), one("web-edge1").unwrap());
    assert_eq!(one("web").unwrap().lines().count(), 2);
    assert_eq!(one("nope").unwrap_err().to_string(), "pod \"nope\" not found in default namespace");
    let early = one("new").unwrap_err().to_string();
    assert!(early.starts_with("metrics not available yet for pod default/new-edge1"), "{early}");
}

#[test]
fn nothing_measured_is_no_resources_found() {
    assert_eq!(render_top_pods(&summary(), &q(Some("empty"))).unwrap(), "No resources found in empty namespace.\n");
    assert_eq!(render_top_pods(&Summary::default(), &q(None)).unwrap(), "No resources found.\n");
}

fn node(allocatable: &[(&str, &str)], capacity: &[(&str, &str)]) -> Node {
    let list = |l: &[(&str, &str)]| l.iter().map(|(k, v)| (k.to_string(), v.parse::<Quantity>().unwrap())).collect();
    let mut n = Node::default();
    n.metadata.name = "edge1".into();
    n.status.allocatable = list(allocatable);
    n.status.capacity = list(capacity);
    n
}

#[test]
fn top_node_shows_percentages_of_allocatable_else_of_capacity() {
    let out =
        render_top_node(&summary(), &node(&[("cpu", "2"), ("memory", "1Gi")], &[("cpu", "4"), ("memory", "2Gi")]));
    assert_eq!(
        out,
        "NAME    CPU(cores)   CPU(%)   MEMORY(bytes)   MEMORY(%)\n\
         edge1   251m         12%      512Mi           50%\n"
    );
    let out = render_top_node(&summary(), &node(&[], &[("cpu", "4"), ("memory", "2Gi")]));
    assert!(out.ends_with("edge1   251m         6%       512Mi           25%\n"), "{out}");
    let out = render_top_node(&summary(), &node(&[], &[]));
    assert!(out.ends_with("edge1   251m         <unknown>   512Mi           <unknown>\n"), "{out}");
}

#[test]
fn top_node_before_a_cpu_rate_shows_unknown_cpu() {
    let mut s = summary();
    s.node.cpu = Some(CpuUsage { usage_nano_cores: None });
    let out = render_top_node(&s, &node(&[("cpu", "2"), ("memory", "1Gi")], &[]));
    assert!(out.ends_with("edge1   <unknown>    <unknown>   512Mi           50%\n"), "{out}");
}
