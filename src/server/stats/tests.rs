use super::*;
use crate::node::stats::{NodeStats, VolumeStats};
use serde_json::{json, Value};

/// 2023-11-14T22:13:20Z.
const T0: u64 = 1_700_000_000;
/// When the hand-made snapshot's values were read: 2023-11-14T22:13:30.250Z.
const READ_MS: u64 = (T0 + 10) * 1000 + 250;
const MI: u64 = 1 << 20;

fn secs(s: u64) -> Option<SystemTime> {
    Some(UNIX_EPOCH + Duration::from_secs(s))
}

fn read_at() -> Option<SystemTime> {
    Some(UNIX_EPOCH + Duration::from_millis(READ_MS))
}

fn cpu(total_nanos: u64, rate: Option<u64>) -> Option<CpuStats> {
    Some(CpuStats { time: read_at(), usage_core_nano_seconds: total_nanos, usage_nano_cores: rate })
}

fn memory(working_set: u64) -> Option<MemoryStats> {
    Some(MemoryStats {
        time: read_at(),
        available_bytes: None,
        usage_bytes: working_set + MI,
        working_set_bytes: working_set,
        rss_bytes: working_set / 2,
        page_faults: 100,
        major_page_faults: 2,
    })
}

fn fs(used: u64) -> FsStats {
    FsStats {
        time: read_at(),
        available_bytes: Some(900 * MI),
        capacity_bytes: Some(1000 * MI),
        used_bytes: Some(used),
        inodes_free: Some(9000),
        inodes: Some(10_000),
        inodes_used: Some(12),
    }
}

fn container(name: &str, start: Option<SystemTime>) -> ContainerStats {
    ContainerStats { name: name.into(), start_time: start, ..Default::default() }
}

/// A process-runtime node with two pods: `default/web` (an app container and a sidecar
/// that has no CPU reading yet, an `emptyDir`) and `kube-system/db` (its CPU read without
/// a time of its own), and a stale `default/web` of another uid after them, as when a
/// static pod is replaced between two collections.
fn snapshot() -> Snapshot {
    let web = PodStats {
        name: "web".into(),
        namespace: "default".into(),
        uid: "u-web".into(),
        start_time: secs(T0 - 600),
        containers: vec![
            ContainerStats {
                cpu: cpu(2_500_000_000, Some(5_000_000)),
                memory: memory(30 * MI),
                logs: Some(fs(4096)),
                ..container("app", secs(T0 - 590))
            },
            ContainerStats { memory: memory(MI), ..container("sidecar", None) },
        ],
        cpu: cpu(2_600_000_000, Some(6_000_000)),
        memory: memory(31 * MI),
        volumes: vec![VolumeStats { name: "cache".into(), fs: fs(8192) }],
        ephemeral_storage: Some(fs(12_288)),
        process_count: Some(7),
    };
    let db = PodStats {
        name: "db".into(),
        namespace: "kube-system".into(),
        uid: "u-db".into(),
        start_time: secs(T0 - 120),
        containers: vec![ContainerStats {
            cpu: Some(CpuStats { time: None, usage_core_nano_seconds: 1_000_000, usage_nano_cores: None }),
            memory: memory(4096),
            ..container("db", secs(T0 - 100))
        }],
        cpu: cpu(2_000_000, None),
        memory: memory(8192),
        ..Default::default()
    };
    let replaced = PodStats {
        uid: "u-web-old".into(),
        containers: vec![ContainerStats { cpu: cpu(9_000_000_000, None), ..container("app", secs(T0 - 5000)) }],
        cpu: cpu(9_000_000_000, None),
        ..web.clone()
    };
    Snapshot {
        time: secs(T0 + 11),
        node: NodeStats {
            node_name: "edge1".into(),
            start_time: secs(T0 - 3600),
            cpu: cpu(123_456_789_000, Some(250_000_000)),
            memory: Some(MemoryStats { available_bytes: Some(400 * MI), ..memory(112 * MI).unwrap() }),
            fs: Some(fs(100 * MI)),
            image_fs: None,
            rlimit: Some(RlimitStats { time: read_at(), max_pid: 4_194_304, num_of_running_processes: 321 }),
            pods_cpu: cpu(2_602_000_000, Some(6_000_000)),
            pods_memory: Some(MemoryStats { available_bytes: Some(200 * MI), ..memory(39 * MI).unwrap() }),
        },
        pods: vec![web, db, replaced],
    }
}

fn summary(s: &Snapshot, only: bool) -> (String, Value) {
    let bytes = summary_json(s, only).unwrap();
    let text = String::from_utf8(bytes).unwrap();
    let value = serde_json::from_str(&text).unwrap();
    (text, value)
}

fn memory_json(working_set: u64, available: Option<u64>) -> Value {
    let mut m = json!({"time": "2023-11-14T22:13:30Z", "usageBytes": working_set + MI,
        "workingSetBytes": working_set, "rssBytes": working_set / 2, "pageFaults": 100, "majorPageFaults": 2});
    if let Some(a) = available {
        m["availableBytes"] = json!(a);
    }
    m
}

fn fs_json(used: u64) -> Value {
    json!({"time": "2023-11-14T22:13:30Z", "availableBytes": 900 * MI, "capacityBytes": 1000 * MI,
        "usedBytes": used, "inodesFree": 9000, "inodes": 10_000, "inodesUsed": 12})
}

#[test]
fn the_summary_has_kubelets_field_names_and_leaves_out_what_is_unknown() {
    let (text, v) = summary(&snapshot(), false);
    let at = "2023-11-14T22:13:30Z";
    assert_eq!(
        v["node"],
        json!({
            "nodeName": "edge1",
            "systemContainers": [{"name": "pods", "startTime": null,
                "cpu": {"time": at, "usageNanoCores": 6_000_000, "usageCoreNanoSeconds": 2_602_000_000u64},
                "memory": memory_json(39 * MI, Some(200 * MI))}],
            "startTime": "2023-11-14T21:13:20Z",
            "cpu": {"time": at, "usageNanoCores": 250_000_000, "usageCoreNanoSeconds": 123_456_789_000u64},
            "memory": memory_json(112 * MI, Some(400 * MI)),
            "fs": fs_json(100 * MI),
            "rlimit": {"time": at, "maxpid": 4_194_304, "curproc": 321},
        }),
        "no runtime on the process runtime, which has no image filesystem"
    );
    assert_eq!(
        v["pods"][0],
        json!({
            "podRef": {"name": "web", "namespace": "default", "uid": "u-web"},
            "startTime": "2023-11-14T22:03:20Z",
            "containers": [
                {"name": "app", "startTime": "2023-11-14T22:03:30Z",
                 "cpu": {"time": at, "usageNanoCores": 5_000_000, "usageCoreNanoSeconds": 2_500_000_000u64},
                 "memory": memory_json(30 * MI, None), "logs": fs_json(4096)},
                {"name": "sidecar", "startTime": null, "memory": memory_json(MI, None)},
            ],
            "cpu": {"time": at, "usageNanoCores": 6_000_000, "usageCoreNanoSeconds": 2_600_000_000u64},
            "memory": memory_json(31 * MI, None),
            "volume": [{"time": at, "availableBytes": 900 * MI, "capacityBytes": 1000 * MI, "usedBytes": 8192,
                        "inodesFree": 9000, "inodes": 10_000, "inodesUsed": 12, "name": "cache"}],
            "ephemeral-storage": fs_json(12_288),
            "process_stats": {"process_count": 7},
        })
    );
    // A CPU reading without a rate (the first one) has no usageNanoCores; no volumes, no
    // ephemeral storage and no process count are left out.
    assert_eq!(
        v["pods"][1],
        json!({
            "podRef": {"name": "db", "namespace": "kube-system", "uid": "u-db"},
            "startTime": "2023-11-14T22:11:20Z",
            "containers": [{"name": "db", "startTime": "2023-11-14T22:11:40Z",
                "cpu": {"time": null, "usageCoreNanoSeconds": 1_000_000}, "memory": memory_json(4096, None)}],
            "cpu": {"time": at, "usageCoreNanoSeconds": 2_000_000},
            "memory": memory_json(8192, None),
        })
    );
    assert_eq!(v["pods"].as_array().unwrap().len(), 3, "the summary keeps every pod, as kubelet's");
    // Indented as go-restful writes it, the fields in kubelet's order (the decoder keeps
    // the order it read).
    assert!(text.starts_with("{\n  \"node\": {\n    \"nodeName\": \"edge1\",\n"), "{text}");
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&v["node"]), ["nodeName", "systemContainers", "startTime", "cpu", "memory", "fs", "rlimit"]);
    assert_eq!(
        keys(&v["pods"][0]),
        ["podRef", "startTime", "containers", "cpu", "memory", "volume", "ephemeral-storage", "process_stats"]
    );
    assert_eq!(keys(&v["pods"][0]["containers"][0]), ["name", "startTime", "cpu", "memory", "logs"]);
    assert_eq!(keys(&v["pods"][0]["containers"][0]["cpu"]), ["time", "usageNanoCores", "usageCoreNanoSeconds"]);
    assert_eq!(
        keys(&v["pods"][0]["volume"][0]),
        ["time", "availableBytes", "capacityBytes", "usedBytes", "inodesFree", "inodes", "inodesUsed", "name"],
        "the name after the inline FsStats"
    );
}

#[test]
fn the_summary_names_the_image_filesystem_under_runtime() {
    let mut s = snapshot();
    s.node.image_fs = Some(fs(300 * MI));
    let (_, v) = summary(&s, false);
    assert_eq!(v["node"]["runtime"], json!({"imageFs": fs_json(300 * MI)}));
}

#[test]
fn only_cpu_and_memory_keeps_what_metrics_server_read_and_nothing_else() {
    let mut s = snapshot();
    s.node.image_fs = Some(fs(300 * MI));
    let (_, v) = summary(&s, true);
    let node = v["node"].as_object().unwrap();
    assert_eq!(node.keys().collect::<Vec<_>>(), ["nodeName", "systemContainers", "startTime", "cpu", "memory"]);
    assert_eq!(v["node"]["systemContainers"][0]["name"], "pods");
    let web = v["pods"][0].as_object().unwrap();
    assert_eq!(web.keys().collect::<Vec<_>>(), ["podRef", "startTime", "containers", "cpu", "memory"]);
    let app = v["pods"][0]["containers"][0].as_object().unwrap();
    assert_eq!(app.keys().collect::<Vec<_>>(), ["name", "startTime", "cpu", "memory"]);
    assert_eq!(v["pods"][0]["containers"][0]["cpu"]["usageNanoCores"], 5_000_000);
}

#[test]
fn an_empty_snapshot_is_a_summary_of_nothing() {
    let (text, v) = summary(&Snapshot::default(), false);
    assert_eq!(v, json!({"node": {"nodeName": "", "startTime": null}, "pods": []}));
    assert_eq!(text, "{\n  \"node\": {\n    \"nodeName\": \"\",\n    \"startTime\": null\n  },\n  \"pods\": []\n}");
}

#[test]
fn a_summary_past_its_bound_is_refused_not_cut() {
    let s = snapshot();
    let whole = summary_json(&s, false).unwrap().len();
    assert!(write_summary(&s, false, whole).is_ok());
    let e = write_summary(&s, false, whole - 1).unwrap_err();
    assert_eq!(e.to_string(), format!("the stats summary is larger than {} bytes", whole - 1));
}

/// The resource metrics page of `snapshot()`, line for line as kubelet writes it.
const PAGE: &str = "\
# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container=\"app\",namespace=\"default\",pod=\"web\"} 2.5 1700000010250
container_cpu_usage_seconds_total{container=\"db\",namespace=\"kube-system\",pod=\"db\"} 0.001 1700000011000
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container=\"app\",namespace=\"default\",pod=\"web\"} 3.145728e+07 1700000010250
container_memory_working_set_bytes{container=\"db\",namespace=\"kube-system\",pod=\"db\"} 4096 1700000010250
container_memory_working_set_bytes{container=\"sidecar\",namespace=\"default\",pod=\"web\"} 1.048576e+06 1700000010250
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container=\"app\",namespace=\"default\",pod=\"web\"} 1.69999941e+09
container_start_time_seconds{container=\"db\",namespace=\"kube-system\",pod=\"db\"} 1.6999999e+09
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 123.456789 1700000010250
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 1.17440512e+08 1700000010250
# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace=\"default\",pod=\"web\"} 2.6 1700000010250
pod_cpu_usage_seconds_total{namespace=\"kube-system\",pod=\"db\"} 0.002 1700000010250
# HELP pod_memory_working_set_bytes [STABLE] Current working set of the pod in bytes
# TYPE pod_memory_working_set_bytes gauge
pod_memory_working_set_bytes{namespace=\"default\",pod=\"web\"} 3.2505856e+07 1700000010250
pod_memory_working_set_bytes{namespace=\"kube-system\",pod=\"db\"} 8192 1700000010250
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
";

#[test]
fn resource_metrics_are_kubelets_families_sorted_with_timestamps_in_milliseconds() {
    // The sidecar has no CPU reading and no start time: only its memory is there. The
    // replaced web pod's series come after the live one's and are dropped as duplicates.
    assert_eq!(resource_metrics(Some(&snapshot())), PAGE);
}

#[test]
fn without_a_snapshot_the_page_says_only_that_scraping_failed() {
    let page = resource_metrics(None);
    assert_eq!(
        page,
        "# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise\n\
         # TYPE resource_scrape_error gauge\nresource_scrape_error 1\n"
    );
    // An empty snapshot is no error: there is just nothing measured.
    assert!(resource_metrics(Some(&Snapshot::default())).ends_with("\nresource_scrape_error 0\n"));
    assert!(!resource_metrics(Some(&Snapshot::default())).contains("node_"));
}

#[test]
fn a_snapshot_is_served_until_three_collections_were_missed() {
    let s = Snapshot { time: secs(T0), ..Default::default() };
    let at = |d: u64| UNIX_EPOCH + Duration::from_secs(T0 + d);
    assert_eq!(usable(None, at(0)), Err(Unavailable::NotYet));
    assert!(usable(Some(&s), at(30)).is_ok());
    assert_eq!(usable(Some(&s), at(31)), Err(Unavailable::Stale { at: secs(T0).unwrap() }));
    assert!(usable(Some(&s), UNIX_EPOCH).is_ok(), "a clock set back serves what it has");
    assert!(usable(Some(&Snapshot::default()), at(1000)).is_ok(), "no time: nothing to judge");
    assert_eq!(
        Unavailable::Stale { at: secs(T0).unwrap() }.to_string(),
        "metrics not available: the last stats collection ended at 2023-11-14T22:13:20Z, over 30s ago"
    );
    assert!(Unavailable::NotYet.to_string().starts_with("metrics not available yet"));
}

#[test]
fn the_responses_say_why_there_is_nothing_to_serve() {
    let view = StatsView::default();
    let now = UNIX_EPOCH + Duration::from_secs(T0 + 12);
    let r = summary_response(&view, false, now);
    assert_eq!(r.status, 503);
    assert!(String::from_utf8_lossy(&r.body).starts_with("metrics not available yet"));
    let r = resource_metrics_response(&view, now);
    assert_eq!((r.status, r.content_type), (200, METRICS_CONTENT_TYPE));
    assert!(String::from_utf8_lossy(&r.body).ends_with("resource_scrape_error 1\n"));
    view.publish(std::sync::Arc::new(snapshot()));
    let r = summary_response(&view, true, now);
    assert_eq!((r.status, r.content_type), (200, "application/json"));
    assert_eq!(String::from_utf8(r.body).unwrap().as_bytes(), summary_json(&snapshot(), true).unwrap());
    assert_eq!(String::from_utf8(resource_metrics_response(&view, now).body).unwrap(), PAGE);
    let later = now + STALE_AFTER;
    assert_eq!(summary_response(&view, false, later).status, 503);
    assert!(String::from_utf8(resource_metrics_response(&view, later).body).unwrap().ends_with(" 1\n"));
}

#[test]
fn only_cpu_and_memory_must_be_exactly_one_true_as_kubelet_reads_it() {
    let q = |pairs: &[(&'static str, &'static str)]| only_cpu_and_memory(pairs.iter().copied());
    assert!(q(&[("only_cpu_and_memory", "true")]));
    assert!(q(&[("x", "1"), ("only_cpu_and_memory", "true")]));
    for no in
        [&[][..], &[("only_cpu_and_memory", "1")], &[("only_cpu_and_memory", "True")], &[("only_cpu_and_memory", "")]]
    {
        assert!(!q(no), "{no:?}");
    }
    assert!(!q(&[("only_cpu_and_memory", "true"), ("only_cpu_and_memory", "true")]));
}
