//! The whole `/metrics` page of a real agent, read by a real Prometheus text parser
//! (`prometheus_client.parser` from Debian's python3-prometheus-client, which `make deps`
//! installs): a pod with a probe and a plugin device, so every family has series.

use crate::common;

use common::plugin::{Behaviour, TestPlugin};
use common::{manifest, skip, wait_for, AgentProcess, Sandbox};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

const RES: &str = "example.com/dev";
const T: Duration = Duration::from_secs(30);

/// Parses stdin strictly and prints one `family type sample` line per sample.
const PARSER: &str = "import sys\n\
from prometheus_client.parser import text_string_to_metric_families\n\
for f in text_string_to_metric_families(sys.stdin.read()):\n    \
for s in f.samples:\n        \
print(f.name, f.type, s.name)\n";

/// A python3 that has `prometheus_client`: the one on PATH, else Debian's own (the Debian
/// package installs for /usr/bin/python3 only, which a pyenv `python3` does not see).
fn python_with_parser() -> Option<&'static str> {
    ["python3", "/usr/bin/python3"].into_iter().find(|py| {
        Command::new(py)
            .args(["-c", "import prometheus_client.parser"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// The parser's listing of `text`, or its error.
fn parse(py: &str, text: &str) -> Result<String, String> {
    let mut child = Command::new(py)
        .args(["-c", PARSER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    // Written before reading, and small: the parser reads all of stdin before it prints.
    child.stdin.take().expect("stdin is piped").write_all(text.as_bytes()).map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn the_whole_metrics_page_parses_with_a_real_prometheus_parser() {
    let Some(py) = python_with_parser() else {
        skip("python3 with prometheus_client is missing (make deps installs python3-prometheus-client)");
        return;
    };
    let sb = Sandbox::new();
    let agent = AgentProcess::start(&sb);
    let plugin = TestPlugin::start(&sb.plugin_dir(), RES, "dev.sock", &["dev0"], Behaviour::default());
    plugin.register().unwrap();
    let spec = format!(
        "  containers:\n  - name: app\n    image: x\n    command: [sleep, '300']\n    resources:\n      limits:\n        {RES}: 1\n    readinessProbe:\n      exec:\n        command: ['true']\n      periodSeconds: 1\n"
    );
    sb.write_manifest("probed.yaml", &manifest("probed", &spec));
    let page = wait_for("probe, device and event series on /metrics", T, || {
        let page = agent.get("/metrics").ok()?;
        let all = [
            "prober_probe_total{probe_type=\"Readiness\",result=\"successful\"",
            "prober_probe_duration_seconds_count{probe_type=\"Readiness\"",
            "ferrolet_prober_lateness_seconds{quantile=\"0.5\"}",
            "kubelet_device_plugin_registration_total{resource_name=\"example.com/dev\"} 1",
            "kubelet_device_plugin_alloc_duration_seconds_count{resource_name=\"example.com/dev\"} 1",
            "ferrolet_events_total{type=\"Normal\"",
            "ferrolet_pods{phase=\"Running\"} 1",
        ];
        all.iter().all(|s| page.contains(s)).then_some(page)
    });

    let parsed = parse(py, &page).unwrap_or_else(|e| panic!("the parser rejected /metrics: {e}\n{page}"));
    // Every sample line of the page came through the parser.
    let samples = page.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).count();
    assert_eq!(parsed.lines().count(), samples, "{parsed}\n{page}");
    for want in [
        "prober_probe counter prober_probe_total",
        "prober_probe_duration_seconds histogram prober_probe_duration_seconds_bucket",
        "ferrolet_prober_lateness_seconds summary ferrolet_prober_lateness_seconds",
        "kubelet_device_plugin_alloc_duration_seconds histogram kubelet_device_plugin_alloc_duration_seconds_sum",
        "kubelet_device_plugin_registration counter kubelet_device_plugin_registration_total",
        "ferrolet_events counter ferrolet_events_total",
        "ferrolet_pods gauge ferrolet_pods",
        "process_threads gauge process_threads",
        "ferrolet_api_connections gauge ferrolet_api_connections",
        "ferrolet_manager_threads_dead gauge ferrolet_manager_threads_dead",
    ] {
        assert!(parsed.lines().any(|l| l == want), "no {want:?} in the parser's output:\n{parsed}");
    }
}
