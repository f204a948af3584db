//! Events end to end: what the agent records for real pods, read back through the local API
//! and the CLI, counted in metrics, and kept across an agent restart.

use crate::common;

use common::{manifest, wait_for, AgentProcess, Sandbox};
use ferrolet::api::{Event, EventList};
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

fn events(agent: &AgentProcess, query: &str) -> Vec<Event> {
    let list: EventList = serde_json::from_str(&agent.get(&format!("/events{query}")).unwrap()).unwrap();
    list.items
}

fn find<'a>(evs: &'a [Event], reason: &str, field_path: &str) -> Vec<&'a Event> {
    evs.iter().filter(|e| e.reason == reason && e.involved_object.field_path == field_path).collect()
}

#[test]
fn a_crash_looping_pod_produces_backoff_events_whose_count_grows_instead_of_flooding() {
    let sb = Sandbox::new();
    sb.write_manifest(
        "crash.yaml",
        &manifest("crash", "  containers:\n  - name: app\n    image: x\n    command: [sh, -c, 'exit 1']\n"),
    );
    let agent = AgentProcess::start(&sb);
    let q = "?kind=Pod&name=crash-testnode";
    let evs = wait_for("a second BackOff", T, || {
        let evs = events(&agent, q);
        find(&evs, "BackOff", "spec.containers{app}").first().is_some_and(|e| e.count >= 2).then_some(evs)
    });
    let backoff = find(&evs, "BackOff", "spec.containers{app}");
    assert_eq!(backoff.len(), 1, "one event with a growing count, not one per occurrence");
    let b = backoff[0];
    assert_eq!(b.type_, "Warning");
    assert!(
        b.message.starts_with("Back-off restarting failed container app in pod crash-testnode_default("),
        "{}",
        b.message
    );
    assert!(b.first_timestamp < b.last_timestamp, "first and last occurrence differ");
    let started = find(&evs, "Started", "spec.containers{app}");
    assert_eq!(started.len(), 1);
    assert!(started[0].count >= 3, "Started x{}", started[0].count);
    assert_eq!(started[0].message, "Started container app");
    assert_eq!(started[0].source.component, "ferrolet");
    assert_eq!(started[0].source.host, "testnode");
    assert_eq!(started[0].metadata.namespace, "default");
    assert!(started[0].metadata.name.starts_with("crash-testnode."));

    let metrics = agent.get("/metrics").unwrap();
    assert!(metrics.contains("ferrolet_events_total{type=\"Warning\",reason=\"BackOff\"} 2"), "{metrics}");
    assert!(metrics.contains("ferrolet_events_dropped_total{cause=\"queue_full\"} 0"), "{metrics}");
    assert!(metrics.contains("ferrolet_events_aggregated_total 0"), "{metrics}");

    let table = agent.cli(&["get", "events", "--for", "pod/crash"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]);
    let row = table.lines().find(|l| l.contains("BackOff")).unwrap();
    assert!(row.contains("(x2 over") && row.contains("Warning") && row.contains("pod/crash-testnode"), "{row}");

    let described = agent.cli(&["describe", "pod", "crash"]);
    assert!(described.starts_with("Name:             crash-testnode\nNamespace:        default\n"), "{described}");
    let events_at_bottom = described.split("Events:").nth(1).unwrap();
    assert!(
        events_at_bottom.contains("Warning  BackOff") || events_at_bottom.contains("Warning   BackOff"),
        "{described}"
    );
    assert!(
        described.contains("    Last State:    Terminated\n      Reason:       Error\n      Exit Code:    1\n"),
        "{described}"
    );
}

#[test]
fn lifecycle_validation_and_node_events_are_recorded_with_kubelets_reasons() {
    let sb = Sandbox::new();
    sb.write_manifest(
        "web.yaml",
        &manifest("web", "  terminationGracePeriodSeconds: 2\n  initContainers:\n  - name: setup\n    image: x\n    command: [sh, -c, 'exit 0']\n  containers:\n  - name: app\n    image: x\n    command: [sleep, '60']\n"),
    );
    let agent = AgentProcess::start(&sb);
    wait_for("web running", T, || agent.pod("web").filter(|p| p.status.as_ref().unwrap().phase == "Running"));
    sb.write_manifest(
        "bad.yaml",
        &manifest("bad", "  restartPolicy: Sometimes\n  containers:\n  - name: a\n    image: b\n"),
    );
    std::fs::remove_file(sb.manifests().join("web.yaml")).unwrap();
    let evs = wait_for("Killing and FailedValidation", T, || {
        let evs = events(&agent, "");
        (evs.iter().any(|e| e.reason == "Killing") && evs.iter().any(|e| e.reason == "FailedValidation")).then_some(evs)
    });
    let starting = evs.iter().find(|e| e.reason == "Starting").unwrap();
    assert_eq!((starting.involved_object.kind.as_str(), starting.message.as_str()), ("Node", "Starting ferrolet."));
    assert_eq!(starting.metadata.namespace, "default", "cluster-scoped objects' events live in default");
    let created =
        evs.iter().find(|e| e.reason == "Created" && e.involved_object.field_path == "spec.initContainers{setup}");
    assert_eq!(created.unwrap().message, "Created container setup");
    let killing = evs.iter().find(|e| e.reason == "Killing").unwrap();
    assert_eq!(
        (killing.message.as_str(), killing.involved_object.field_path.as_str()),
        ("Stopping container app", "spec.containers{app}")
    );
    let invalid = evs.iter().find(|e| e.reason == "FailedValidation").unwrap();
    assert_eq!((invalid.type_.as_str(), invalid.involved_object.kind.as_str()), ("Warning", "Node"));
    assert!(
        invalid.message.contains("bad.yaml: spec.restartPolicy: Unsupported value: \"Sometimes\""),
        "{}",
        invalid.message
    );
    let pod_events = events(&agent, "?fieldSelector=involvedObject.kind%3DPod%2CinvolvedObject.name%3Dweb-testnode");
    assert!(!pod_events.is_empty() && pod_events.iter().all(|e| e.involved_object.name == "web-testnode"));
}

#[test]
fn stored_events_survive_an_agent_restart() {
    let sb = Sandbox::new();
    sb.write_manifest(
        "web.yaml",
        &manifest("web", "  containers:\n  - name: app\n    image: x\n    command: [sleep, '60']\n"),
    );
    let agent = AgentProcess::start(&sb);
    let before = wait_for("Started", T, || {
        let evs = events(&agent, "");
        evs.iter().any(|e| e.reason == "Started").then_some(evs)
    });
    agent.kill9();
    let agent = AgentProcess::start(&sb);
    let after = wait_for("a second Starting", T, || {
        let evs = events(&agent, "");
        (evs.iter().filter(|e| e.reason == "Starting").count() == 2).then_some(evs)
    });
    for e in &before {
        assert!(
            after.iter().any(|a| a.metadata.name == e.metadata.name && a.reason == e.reason),
            "{} kept",
            e.metadata.name
        );
    }
}

#[test]
fn get_events_watch_prints_new_and_updated_events_as_they_come() {
    let sb = Sandbox::new();
    let agent = AgentProcess::start(&sb);
    wait_for("Starting", T, || events(&agent, "").iter().any(|e| e.reason == "Starting").then_some(()));
    let out_path = sb.dir.path().join("watch.out");
    let mut watch = Command::new(common::ferrolet_bin())
        .args(["get", "events", "--watch", "--server", &format!("127.0.0.1:{}", agent.port)])
        .stdout(std::fs::File::create(&out_path).unwrap())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    sb.write_manifest(
        "late.yaml",
        &manifest("late", "  containers:\n  - name: app\n    image: x\n    command: [sleep, '60']\n"),
    );
    let text = wait_for("the new pod's events in the watch output", T, || {
        let t = std::fs::read_to_string(&out_path).unwrap_or_default();
        t.contains("Started container app").then_some(t)
    });
    let _ = watch.kill();
    let _ = watch.wait();
    assert_eq!(text.matches("LAST SEEN").count(), 1, "one header:\n{text}");
    assert_eq!(text.matches("Starting ferrolet.").count(), 1, "an unchanged event is not printed again:\n{text}");
    assert!(text.contains("pod/late-testnode"), "{text}");
}

#[test]
fn an_unreadable_event_log_is_logged_once_and_the_agent_starts_with_an_empty_store() {
    let sb = Sandbox::new();
    // A directory where events.log should be: every read fails with EISDIR, as a failing
    // SD card fails every read with EIO.
    std::fs::create_dir_all(sb.state().join("events.log")).unwrap();
    let agent = AgentProcess::start(&sb);
    assert_eq!(agent.get("/healthz").unwrap(), "ok");
    let evs = wait_for("Starting", T, || {
        let evs = events(&agent, "");
        evs.iter().any(|e| e.reason == "Starting").then_some(evs)
    });
    // Nothing was loaded: every event is this start's own, numbered from 1.
    assert!(evs.iter().all(|e| e.involved_object.kind == "Node" && e.count == 1), "{evs:?}");
    let versions: Vec<u64> = evs.iter().map(|e| e.metadata.resource_version.parse().unwrap()).collect();
    assert!(versions.contains(&1), "{versions:?}");
    let log = agent.log_text();
    let read_errors: Vec<&str> = log.lines().filter(|l| l.contains("cannot read the event store")).collect();
    assert_eq!(read_errors.len(), 1, "{log}");
    assert!(read_errors[0].contains("Is a directory"), "{}", read_errors[0]);
}
