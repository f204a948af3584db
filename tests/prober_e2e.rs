//! Probes end to end with the process runtime: liveness restarts, readiness flips Ready,
//! startup holds liveness back, and Ready survives an agent restart.

use crate::common;

use common::{container, manifest, wait_for, AgentProcess, Sandbox};
use ferrolet::api::{Event, EventList, Pod};
use std::net::TcpListener;
use std::sync::atomic::Ordering;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);
/// Liveness probes of every result on `/metrics`.
const LIVENESS: &str = "prober_probe_total{probe_type=\"Liveness\"";

fn ready(p: &Pod) -> bool {
    p.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn events(agent: &AgentProcess) -> Vec<Event> {
    serde_json::from_str::<EventList>(&agent.get("/events").unwrap()).unwrap().items
}

fn exec_probe(kind: &str, file: &std::path::Path, extra: &str) -> String {
    format!(
        "    {kind}:\n      exec:\n        command: [test, -f, {}]\n      periodSeconds: 1\n{extra}",
        file.display()
    )
}

#[test]
fn a_failing_liveness_probe_restarts_the_container_once_per_threshold_crossing() {
    let sb = Sandbox::new();
    let healthy = sb.work().join("healthy");
    std::fs::write(&healthy, "").unwrap();
    let spec = format!(
        "  containers:\n  - name: app\n    image: x\n    command: [sleep, '300']\n{}",
        exec_probe("livenessProbe", &healthy, "      failureThreshold: 2\n")
    );
    sb.write_manifest("live.yaml", &common::sharing_dir(&manifest("live", &spec), &sb.work()));
    let agent = AgentProcess::start(&sb);
    let pod = wait_for("running", T, || agent.pod("live").filter(|p| p.status.as_ref().unwrap().phase == "Running"));
    let first_id = container(&pod, "app").unwrap().container_id.clone();
    // Two liveness probes (the failure threshold) and the syncs after them.
    agent.wait_metric_growth(LIVENESS, 2);
    agent.wait_syncs(5);
    assert_eq!(container(&agent.pod("live").unwrap(), "app").unwrap().restart_count, 0, "healthy: no restart");

    std::fs::remove_file(&healthy).unwrap();
    let pod = wait_for("a restart", T, || {
        agent
            .pod("live")
            .filter(|p| container(p, "app").is_some_and(|c| c.restart_count == 1 && c.state.running.is_some()))
    });
    // Healthy again at once: the new instance keeps running, no second kill.
    std::fs::write(&healthy, "").unwrap();
    assert_ne!(container(&pod, "app").unwrap().container_id, first_id);
    agent.wait_metric_growth(LIVENESS, 4);
    agent.wait_syncs(5);
    let c = container(&agent.pod("live").unwrap(), "app").unwrap().clone();
    assert_eq!(c.restart_count, 1, "exactly one restart for one threshold crossing");
    let evs = events(&agent);
    let killing: Vec<&Event> = evs.iter().filter(|e| e.reason == "Killing").collect();
    assert_eq!(killing.len(), 1);
    assert_eq!(
        (killing[0].message.as_str(), killing[0].count),
        ("Container app failed liveness probe, will be restarted", 1)
    );
    let unhealthy = evs.iter().find(|e| e.reason == "Unhealthy").unwrap();
    assert_eq!(unhealthy.involved_object.field_path, "spec.containers{app}");
    assert!(unhealthy.message.starts_with("Liveness probe failed"), "{}", unhealthy.message);

    // A second crossing restarts it again: the count grows.
    std::fs::remove_file(&healthy).unwrap();
    wait_for("a second restart", Duration::from_secs(40), || {
        agent.pod("live").filter(|p| container(p, "app").is_some_and(|c| c.restart_count == 2))
    });
    let metrics = agent.get("/metrics").unwrap();
    assert!(metrics.contains("prober_probe_total{probe_type=\"Liveness\",result=\"failed\",container=\"app\",pod=\"live-testnode\",namespace=\"default\"}"), "{metrics}");
    assert!(metrics.contains("prober_probe_duration_seconds_bucket{probe_type=\"Liveness\""), "{metrics}");
}

#[test]
fn readiness_flips_the_ready_condition_both_ways() {
    let sb = Sandbox::new();
    let marker = sb.work().join("ready");
    let spec = format!(
        "  containers:\n  - name: app\n    image: x\n    command: [sleep, '300']\n{}",
        exec_probe("readinessProbe", &marker, "      failureThreshold: 1\n")
    );
    sb.write_manifest("web.yaml", &common::sharing_dir(&manifest("web", &spec), &sb.work()));
    let agent = AgentProcess::start(&sb);
    let pod = wait_for("running", T, || agent.pod("web").filter(|p| p.status.as_ref().unwrap().phase == "Running"));
    assert!(!ready(&pod), "not ready before the probe passes");
    std::fs::write(&marker, "").unwrap();
    let pod = wait_for("Ready", T, || agent.pod("web").filter(ready));
    assert!(container(&pod, "app").unwrap().ready);
    assert_eq!(ferrolet::cli::pod_columns(&pod).1, "1/1");
    std::fs::remove_file(&marker).unwrap();
    let pod = wait_for("not Ready", T, || agent.pod("web").filter(|p| !ready(p)));
    let cond = pod.status.unwrap().conditions.into_iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(
        (cond.reason.as_str(), cond.message.as_str()),
        ("ContainersNotReady", "containers with unready status: [app]")
    );
    assert_eq!(container(&agent.pod("web").unwrap(), "app").unwrap().restart_count, 0, "readiness never restarts");
}

#[test]
fn a_startup_probe_holds_back_liveness_until_it_passes() {
    let sb = Sandbox::new();
    let started = sb.work().join("started");
    let spec = format!(
        "  containers:\n  - name: app\n    image: x\n    command: [sleep, '300']\n{}    livenessProbe:\n      exec:\n        command: ['false']\n      periodSeconds: 1\n      failureThreshold: 1\n",
        exec_probe("startupProbe", &started, "      failureThreshold: 60\n")
    );
    sb.write_manifest("slow.yaml", &common::sharing_dir(&manifest("slow", &spec), &sb.work()));
    let agent = AgentProcess::start(&sb);
    wait_for("running", T, || agent.pod("slow").filter(|p| p.status.as_ref().unwrap().phase == "Running"));
    // Three startup probes fail meanwhile, and the pod manager syncs after them.
    agent.wait_metric_growth("prober_probe_total{probe_type=\"Startup\"", 3);
    agent.wait_syncs(5);
    let c = container(&agent.pod("slow").unwrap(), "app").unwrap().clone();
    assert_eq!((c.restart_count, c.started), (0, Some(false)), "liveness waits for startup");
    std::fs::write(&started, "").unwrap();
    let pod = wait_for("the liveness kill once started", T, || {
        agent.pod("slow").filter(|p| container(p, "app").is_some_and(|c| c.restart_count >= 1))
    });
    assert!(pod.status.is_some());
}

#[test]
fn ready_survives_an_agent_restart_until_a_probe_says_otherwise() {
    let sb = Sandbox::new();
    let marker = sb.work().join("ready");
    std::fs::write(&marker, "").unwrap();
    let spec = format!(
        "  containers:\n  - name: app\n    image: x\n    command: [sleep, '300']\n    readinessProbe:\n      exec:\n        command: [test, -f, {}]\n      periodSeconds: 20\n      failureThreshold: 1\n",
        marker.display()
    );
    sb.write_manifest("web.yaml", &common::sharing_dir(&manifest("web", &spec), &sb.work()));
    let agent = AgentProcess::start(&sb);
    wait_for("Ready", T, || agent.pod("web").filter(ready));
    agent.kill9();
    let agent = AgentProcess::start(&sb);
    let first = wait_for("the pod after the restart", T, || agent.pod("web"));
    assert!(ready(&first), "Ready right after the restart, before any probe ran");
    for _ in 0..10 {
        assert!(ready(&agent.pod("web").unwrap()), "no flap to NotReady");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A listener that accepts connections, keeps them open and never says a word.
fn silent_listener() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in l.incoming().flatten() {
            held.push(conn);
        }
    });
    port
}

#[test]
fn slow_probes_hold_up_only_their_own_workers() {
    let sb = Sandbox::new();
    let pids = sb.work().join("exec-pids");
    let (fast_port, hits) = common::ok_http_server();
    let silent = silent_listener();
    // Four exec probes that hang (each records its container and its pid there) and four HTTP
    // probes to a server that never answers, all with a 30 s timeout, against a pool of two
    // threads.
    let mut spec = String::from("  terminationGracePeriodSeconds: 1\n  containers:\n");
    for i in 0..4 {
        spec.push_str(&format!(
            "  - name: exec{i}\n    image: x\n    command: [sleep, '300']\n    readinessProbe:\n      exec:\n        command: [sh, -c, 'echo exec{i} $$$$ >> {}; exec sleep 100']\n      timeoutSeconds: 30\n      periodSeconds: 1\n",
            pids.display()
        ));
        spec.push_str(&format!(
            "  - name: http{i}\n    image: x\n    command: [sleep, '300']\n    readinessProbe:\n      httpGet: {{host: 127.0.0.1, port: {silent}, path: /}}\n      timeoutSeconds: 30\n      periodSeconds: 1\n"
        ));
    }
    sb.write_manifest("slow.yaml", &common::sharing_dir(&manifest("slow", &spec), &sb.work()));
    let fast = format!(
        "  containers:\n  - name: app\n    image: x\n    command: [sleep, '300']\n    livenessProbe:\n      httpGet: {{host: 127.0.0.1, port: {fast_port}, path: /}}\n      periodSeconds: 1\n"
    );
    sb.write_manifest("fast.yaml", &manifest("fast", &fast));
    let agent = AgentProcess::start_with(&sb, |c| c + "[prober]\nmax_threads = 2\n");
    let started = |p: &Pod| p.status.as_ref().is_some_and(|s| s.phase == "Running");
    wait_for("both pods running", T, || agent.pod("slow").filter(started).and(agent.pod("fast").filter(started)));
    wait_for("a hanging exec probe", T, || {
        (std::fs::read_to_string(&pids).unwrap_or_default().lines().count() >= 1).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    let before = hits.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_secs(10));
    let ran = hits.load(Ordering::SeqCst) - before;
    // About 10 at a 1 s period; a pool stuck behind the slow probes ran it once per 30 s.
    assert!(ran >= 5, "the fast probe ran {ran} times in 10 s while eight slow probes hung");
    assert_eq!(container(&agent.pod("fast").unwrap(), "app").unwrap().restart_count, 0);

    // The hanging commands end with the agent: the exec reaper kills their process groups.
    // Each pid is its container's (probes run in the container's PID namespace): each is
    // looked up there, through its workload.
    let slow = agent.pod("slow").unwrap();
    let exec_pids: Vec<(i32, i32)> = std::fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (name, pid) = l.trim().split_once(' ')?;
            let workload = common::workload_pid(&sb.state(), &container(&slow, name)?.container_id)?;
            Some((workload, pid.parse().ok()?))
        })
        .collect();
    assert!(
        exec_pids.iter().any(|&(workload, pid)| common::alive_in_container(workload, pid)),
        "a hanging probe command is found in its container: {exec_pids:?}"
    );
    assert!(agent.terminate().success());
    wait_for("the exec probe commands to be killed", Duration::from_secs(5), || {
        exec_pids.iter().all(|&(workload, pid)| !common::alive_in_container(workload, pid)).then_some(())
    });
}

#[test]
fn unreadable_saved_probe_results_are_reported_with_their_cause() {
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.state()).unwrap();
    let path = sb.state().join("probe-results.json");
    std::fs::write(&path, "[{\"kind\": \"Readiness\", ").unwrap();
    let agent = AgentProcess::start(&sb);
    let line = wait_for("the warning", T, || {
        agent.log_text().lines().find(|l| l.contains("cannot read saved probe results")).map(String::from)
    });
    assert!(line.contains(&path.display().to_string()), "names the file: {line}");
    assert!(line.contains("EOF while parsing"), "keeps the parse error: {line}");
    assert!(line.contains("probe-results.json.corrupt"), "says where the file went: {line}");
}

#[test]
fn probe_output_in_events_is_cut_at_one_kib() {
    let sb = Sandbox::new();
    let spec = "  containers:\n  - name: app\n    image: x\n    command: [sleep, '300']\n    readinessProbe:\n      exec:\n        command: [sh, -c, 'head -c 20000 /dev/zero | tr \"\\0\" x; exit 1']\n      periodSeconds: 1\n      failureThreshold: 1\n";
    sb.write_manifest("noisy.yaml", &manifest("noisy", spec));
    let agent = AgentProcess::start(&sb);
    let e = wait_for("the Unhealthy event", T, || events(&agent).into_iter().find(|e| e.reason == "Unhealthy"));
    assert!(e.message.starts_with("Readiness probe failed: xxxx"), "{}", e.message);
    assert!(e.message.len() <= 1024, "{} bytes", e.message.len());
    assert!(e.message.ends_with("more bytes)"), "says it was cut: {}", &e.message[e.message.len() - 40..]);
}
