//! `/stats/summary` and `/metrics/resource` of a real agent in cluster mode, read as their
//! clients read them: `/metrics/resource` from the local API and from kubelet's API (with
//! the apiserver's kubelet client certificate, and as a user allowed only `nodes/stats`),
//! decoded by metrics-server's rules (`tests/stats/metrics_server_decode.py`) and compared
//! with the pod's cgroup files; `/stats/summary` checked against kubelet's types
//! (`tests/stats/summary.schema.json`, with the test venv's jsonschema); `ferrolet top`.
//! The numbers come from the stats collector (`fl-stats`); the test waits up to
//! `SNAPSHOT_WAIT` for a collection. Without the test venv it skips.

use crate::common;
use crate::kubelet_api::{sh_pod, Cluster};

use common::apiserver::venv;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a collection that saw the pod settled may take to appear (`node::stats::PERIOD`
/// is 10 s).
const SNAPSHOT_WAIT: Duration = Duration::from_secs(25);

fn stats_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/stats")
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// `python SCRIPT ARGS` with `stdin`: its stdout, or a panic with its stderr.
fn python(py: &Path, script: &str, args: &[&str], stdin: &str) -> String {
    let mut child = Command::new(py)
        .arg(stats_dir().join(script))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The scripts read all of stdin before they print.
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{script} failed:\n{stdout}{}\non:\n{stdin}", String::from_utf8_lossy(&out.stderr));
    stdout
}

/// `/metrics/resource` decoded as metrics-server decodes it.
fn decode(py: &Path, page: &str) -> Value {
    serde_json::from_str(&python(py, "metrics_server_decode.py", &[&now_ms().to_string()], page)).unwrap()
}

/// `GET https://127.0.0.1:{port}{path}` with curl's `auth` arguments: (status, body).
fn kubelet_get(port: u16, path: &str, auth: &[&str]) -> (String, String) {
    let out = Command::new("curl")
        .args(["-k", "-s", "-S", "--max-time", "10", "-w", "\n%{http_code}"])
        .args(auth)
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
    (code.to_string(), format!("{body}{}", String::from_utf8_lossy(&out.stderr)))
}

/// A cgroup's control file under a v1 controller's mount or the v2 mount, if it exists.
fn cgroup_file(controller: &str, cgroup: &str, file: &str) -> Option<String> {
    let rel = cgroup.trim_start_matches('/');
    [format!("/sys/fs/cgroup/{controller}/{rel}/{file}"), format!("/sys/fs/cgroup/{rel}/{file}")]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
}

/// A `memory.stat`-style file's value of `key`.
fn stat(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The cgroup's CPU time in nanoseconds: `cpuacct.usage` (v1), `cpu.stat`'s `usage_usec`
/// (v2), or, where the cpuacct hierarchy is mounted apart and the agent made no cgroups in
/// it, the sum of its processes' user and system time (clock ticks).
fn cpu_nanos(cgroup: &str) -> u64 {
    if let Some(v) = cgroup_file("cpuacct", cgroup, "cpuacct.usage").and_then(|t| t.trim().parse().ok()) {
        return v;
    }
    if let Some(usec) = cgroup_file("cpu", cgroup, "cpu.stat").and_then(|t| stat(&t, "usage_usec")) {
        return usec * 1000;
    }
    let procs = cgroup_file("memory", cgroup, "cgroup.procs").unwrap_or_else(|| panic!("no cgroup {cgroup}"));
    // SAFETY: sysconf has no preconditions.
    let tick_ns = 1_000_000_000 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    procs
        .lines()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .map(|s| {
            let after = &s[s.rfind(')').unwrap() + 2..];
            let f: Vec<u64> = after.split(' ').map(|x| x.parse().unwrap_or(0)).collect();
            // Fields 14 and 15 (utime, stime), counted from the state (field 3) at index 0.
            (f[11] + f[12]) * tick_ns
        })
        .sum()
}

/// The cgroup's working set as kubelet computes it: usage less inactive file pages.
fn working_set(cgroup: &str) -> u64 {
    let v1 = cgroup_file("memory", cgroup, "memory.usage_in_bytes");
    let (usage, inactive_key) = match v1 {
        Some(u) => (u.trim().parse::<u64>().unwrap(), "total_inactive_file"),
        None => (cgroup_file("memory", cgroup, "memory.current").unwrap().trim().parse().unwrap(), "inactive_file"),
    };
    let inactive = stat(&cgroup_file("memory", cgroup, "memory.stat").unwrap(), inactive_key).unwrap_or(0);
    usage.saturating_sub(inactive)
}

/// Whether `got` is within `rel` of `want`, or `abs` of it.
fn near(got: u64, want: u64, rel: f64, abs: u64) -> bool {
    got.abs_diff(want) <= abs.max((want as f64 * rel) as u64)
}

/// What metrics-server would store of this node is what the pod's cgroups say; kubelet's
/// API serves the same page to the apiserver's client certificate, and to a user with
/// `nodes/metrics` only what that allows; `/stats/summary` has kubelet's field names and
/// types, whole and with `only_cpu_and_memory=true`; `ferrolet top` shows the pod.
#[test]
fn metrics_server_reads_what_the_pods_cgroups_say_on_both_apis() {
    let Some(c) = Cluster::start(|t| t) else { return };
    let Some(venv) = venv() else { return };
    let py = venv.join("bin/python");
    let started_ms = now_ms();
    // It burns some CPU, then sleeps: its counters stop moving.
    let pod = c.run_pod(sh_pod("burner", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; exec sleep 3600"));
    let uid = c.api.pod("default", &pod).unwrap()["metadata"]["uid"].as_str().unwrap().to_string();
    let pod_cgroup = format!("{}/kubepods/besteffort/pod{uid}", c.sb.cgroup_root());
    let container_cgroup = format!("{pod_cgroup}/c");
    let settled_ms = c.wait("the pod's CPU time to settle", || {
        let before = cpu_nanos(&container_cgroup);
        std::thread::sleep(Duration::from_millis(500));
        (before > 0 && cpu_nanos(&container_cgroup).abs_diff(before) < 5_000_000).then(now_ms)
    });

    // A collection made after that, on the local API.
    let series = format!("container_cpu_usage_seconds_total{{container=\"c\",namespace=\"default\",pod=\"{pod}\"}} ");
    let deadline = Instant::now() + SNAPSHOT_WAIT;
    let page = loop {
        let page = c.agent.get("/metrics/resource").unwrap();
        let at = page.lines().find_map(|l| l.strip_prefix(&series)?.split(' ').nth(1)?.parse::<i64>().ok());
        if at.is_some_and(|ms| ms >= settled_ms) {
            break page;
        }
        assert!(
            Instant::now() < deadline,
            "no collection of the settled pod within {SNAPSHOT_WAIT:?} (is fl-stats running?): /metrics/resource:\n{page}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let m = decode(&py, &page);
    assert_eq!(m["scrape_error"], 0.0, "{page}");
    for (family, kind) in [
        ("container_cpu_usage_seconds_total", "counter"),
        ("container_memory_working_set_bytes", "gauge"),
        ("container_start_time_seconds", "gauge"),
        ("node_cpu_usage_seconds_total", "counter"),
        ("node_memory_working_set_bytes", "gauge"),
        ("pod_cpu_usage_seconds_total", "counter"),
        ("pod_memory_working_set_bytes", "gauge"),
        ("resource_scrape_error", "gauge"),
    ] {
        assert_eq!(m["types"][family], kind, "{family}: {page}");
    }
    let done_ms = now_ms();
    let node = &m["node"];
    assert!(node.is_object(), "metrics-server would drop the node: {m}\n{page}");
    let node_ms = node["timestamp_ms"].as_i64().unwrap();
    assert!((started_ms..=done_ms).contains(&node_ms), "node sample at {node_ms}, test from {started_ms} to {done_ms}");

    let key = format!("default/{pod}");
    let container = &m["pods"][&key]["c"];
    assert!(container.is_object(), "metrics-server would drop {key}: {m}\n{page}");
    let (cpu, mem) = (container["cpu_ns"].as_u64().unwrap(), container["memory"].as_u64().unwrap());
    let (cg_cpu, cg_mem) = (cpu_nanos(&container_cgroup), working_set(&container_cgroup));
    assert!(near(cpu, cg_cpu, 0.05, 30_000_000), "container CPU {cpu} ns, its cgroup {cg_cpu} ns");
    assert!(near(mem, cg_mem, 0.10, 2 << 20), "container working set {mem}, its cgroup {cg_mem}");
    let start_ms = container["start_ns"].as_i64().unwrap() / 1_000_000;
    assert!((started_ms - 1000..=settled_ms).contains(&start_ms), "container started at {start_ms} ms");
    let p = &m["pod_series"][&key];
    let (pod_cpu, pod_mem) = (p["cpu_ns"].as_u64().unwrap(), p["memory"].as_u64().unwrap());
    let (cg_cpu, cg_mem) = (cpu_nanos(&pod_cgroup), working_set(&pod_cgroup));
    assert!(near(pod_cpu, cg_cpu, 0.05, 30_000_000), "pod CPU {pod_cpu} ns, its cgroup {cg_cpu} ns");
    assert!(near(pod_mem, cg_mem, 0.10, 2 << 20), "pod working set {pod_mem}, its cgroup {cg_mem}");

    // kubelet's API: the same page to the apiserver's client certificate.
    let port = c.kubelet_port();
    let (cert, key_file) = (c.api.kubelet_client_cert(), c.api.kubelet_client_key());
    let apiserver = ["--cert", cert.to_str().unwrap(), "--key", key_file.to_str().unwrap()];
    let (code, kpage) = kubelet_get(port, "/metrics/resource", &apiserver);
    assert_eq!(code, "200", "{kpage}");
    let k = decode(&py, &kpage);
    assert_eq!(k["pods"][&key]["c"]["cpu_ns"], container["cpu_ns"], "the same collection on both APIs");
    assert!(k["node"].is_object(), "{kpage}");
    // A user allowed nodes/stats reads the summary, not the metrics.
    c.api.add_token("stats-token", "statsreader", &[]);
    c.api.allow("statsreader", &["get"], "nodes", "stats");
    let reader = ["-H", "Authorization: Bearer stats-token"];
    let (code, body) = kubelet_get(port, "/metrics/resource", &reader);
    assert_eq!(
        (code.as_str(), body.as_str()),
        ("403", "Forbidden (user=statsreader, verb=get, resource=nodes, subresource=metrics)")
    );
    let (code, summary) = kubelet_get(port, "/stats/summary", &reader);
    assert_eq!(code, "200", "{summary}");
    assert_eq!(kubelet_get(port, "/stats/container", &apiserver).0, "404", "only /stats/summary, as kubelet's");

    // The summary has kubelet's field names and types, and the pod.
    python(&py, "validate_summary.py", &[], &summary);
    let s: Value = serde_json::from_str(&summary).unwrap();
    assert_eq!(s["node"]["nodeName"], "testnode");
    let in_summary = s["pods"].as_array().unwrap().iter().find(|p| p["podRef"]["uid"] == uid.as_str()).cloned();
    let in_summary = in_summary.unwrap_or_else(|| panic!("no pod {uid} in the summary: {summary}"));
    assert_eq!(in_summary["podRef"]["name"], pod.as_str());
    assert_eq!(in_summary["containers"][0]["name"], "c");
    let local = c.agent.get("/stats/summary?only_cpu_and_memory=true").unwrap();
    python(&py, "validate_summary.py", &[], &local);
    let only: Value = serde_json::from_str(&local).unwrap();
    for gone in ["fs", "runtime", "rlimit"] {
        assert!(only["node"].get(gone).is_none(), "{gone} in {local}");
    }

    // ferrolet top reads the same summary; a pod is shown once its CPU rate is known (the
    // collection after the one that first saw it).
    let deadline = Instant::now() + SNAPSHOT_WAIT;
    let (top, row) = loop {
        let top = c.agent.cli(&["top", "pods"]);
        if let Some(row) = top.lines().find(|l| l.starts_with(&format!("{pod} "))) {
            break (top.clone(), row.to_string());
        }
        assert!(Instant::now() < deadline, "no {pod} in ferrolet top pods:\n{top}");
        std::thread::sleep(Duration::from_millis(500));
    };
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert!(cells[1].ends_with('m') && cells[2].ends_with("Mi"), "{top}");
    let node_top = c.agent.cli(&["top", "node"]);
    assert!(node_top.starts_with("NAME ") && node_top.lines().nth(1).unwrap().starts_with("testnode "), "{node_top}");
}

/// `ferrolet top` with no agent to ask says so, as `get` does.
#[test]
fn top_without_an_agent_says_it_cannot_reach_one() {
    let port = common::free_port();
    let out = Command::new(common::ferrolet_bin())
        .args(["top", "pods", "--server", &format!("127.0.0.1:{port}")])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("cannot reach the ferrolet API at http://127.0.0.1:{port}/stats/summary")), "{err}");
    assert!(err.contains("is `ferrolet run` running?"), "{err}");
}
