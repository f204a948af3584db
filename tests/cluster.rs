//! Cluster mode end to end: a real `ferrolet run` (process runtime) against the fake
//! kube-apiserver of tests/apiserver over TLS with a node client certificate. Without the
//! test venv each test skips with the reason.

use crate::common;

use common::apiserver::{FakeApiserver, Options};
use common::{wait_for, AgentProcess, Sandbox};
use serde_json::{json, Value};
use std::time::Duration;

const NODE: &str = "testnode";
const WAIT: Duration = Duration::from_secs(30);

/// Starts an agent of `sb` joined to `api`.
fn start_agent(sb: &Sandbox, api: &FakeApiserver) -> AgentProcess {
    let kubeconfig = api.node_kubeconfig();
    AgentProcess::start_with(sb, |text| {
        format!("{text}[apiserver]\nkubeconfig = {kubeconfig:?}\nnode_labels = {{ site = \"north\" }}\nregister_with_taints = [\"edge=true:NoSchedule\"]\n")
    })
}

fn sleeper(name: &str, grace: i64) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
           "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": grace,
                    "containers": [{"name": "app", "image": "busybox:1.36",
                                    "command": ["sh", "-c", "trap 'echo bye; sleep 1; exit 0' TERM; while true; do sleep 0.2; done"]}]}})
}

/// `wait_for`, but a timeout shows the agent's log and the fake's.
fn wait<T>(agent: &AgentProcess, api: &FakeApiserver, what: &str, f: impl FnMut() -> Option<T>) -> T {
    wait_long(agent, api, what, WAIT, f)
}

/// `wait` for up to `within`.
fn wait_long<T>(
    agent: &AgentProcess,
    api: &FakeApiserver,
    what: &str,
    within: Duration,
    f: impl FnMut() -> Option<T>,
) -> T {
    common::apiserver::wait_logged(agent, api, what, within, f)
}

fn phase(api: &FakeApiserver, name: &str) -> Option<String> {
    api.pod("default", name).and_then(|p| p["status"]["phase"].as_str().map(str::to_string))
}

fn condition<'a>(node: &'a Value, type_: &str) -> &'a Value {
    node["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == type_).unwrap()
}

#[test]
fn the_node_registers_heartbeats_runs_its_pods_and_reports_them() {
    // The oldest apiserver cluster mode supports: nothing it writes may be newer.
    let options = Options { kube_version: "1.26".into(), ..Default::default() };
    let Some(api) = FakeApiserver::start_with(NODE, options) else { return };
    let sb = Sandbox::new();
    sb.write_manifest(
        "web.yaml",
        &common::manifest("web", "  containers:\n  - name: app\n    image: busybox\n    command: [sleep, '3600']\n"),
    );
    let agent = start_agent(&sb, &api);

    // Register: labels, taints, capacity, conditions, node info.
    let node = wait_for("the Node", WAIT, || api.node(NODE));
    let labels = &node["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/hostname"].as_str(), Some(ferrolet::base::net::hostname().as_str()));
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["site"], "north");
    assert_eq!(node["spec"]["taints"][0]["key"], "edge");
    let node =
        wait_for("the Node's status", WAIT, || api.node(NODE).filter(|n| n["status"]["capacity"]["pods"].is_string()));
    assert_eq!(condition(&node, "Ready")["reason"], "KubeletReady");
    assert_eq!(condition(&node, "MemoryPressure")["status"], "False");
    assert!(node["status"]["nodeInfo"]["kubeletVersion"].as_str().unwrap().contains("ferrolet"));
    assert_eq!(node["status"]["addresses"][0]["address"], "127.0.0.1");

    // The Lease is renewed every 10 s.
    let first = wait_for("the Lease", WAIT, || api.lease(NODE))["spec"]["renewTime"].clone();
    let renewed = wait_for("a renewed Lease", Duration::from_secs(25), || {
        api.lease(NODE).filter(|l| l["spec"]["renewTime"] != first)
    });
    assert_eq!(renewed["spec"]["leaseDurationSeconds"], 40);
    assert_eq!(renewed["metadata"]["ownerReferences"][0]["uid"], node["metadata"]["uid"]);

    // A pod created in the apiserver runs, and its status comes back. Each of its instances
    // writes a line when SIGTERM reaches it, into the test's directory shared with it.
    let terms = sb.work().join("api-web-terms");
    let mut web = sleeper("api-web", 5);
    web["spec"]["containers"][0]["command"] = json!([
        "sh",
        "-c",
        format!("trap 'echo TERM >> {}; exit 0' TERM; while true; do sleep 0.2; done", terms.display())
    ]);
    common::share_dir(&mut web, &sb.work());
    api.create_pod("default", &web);
    wait(&agent, &api, "api-web Running in the apiserver", || {
        (phase(&api, "api-web").as_deref() == Some("Running")).then_some(())
    });
    let pod = api.pod("default", "api-web").unwrap();
    assert_eq!(pod["status"]["containerStatuses"][0]["ready"], true);
    assert_eq!(pod["status"]["hostIP"], "127.0.0.1");

    // The static pod has its mirror, with the static pod's status.
    let mirror = wait(&agent, &api, "the mirror pod", || {
        api.pod("default", "web-testnode").filter(|p| p["status"]["phase"] == "Running")
    });
    assert!(mirror["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string());

    // kubectl shows it as a user expects.
    let nodes = api.kubectl(&["get", "nodes"]);
    assert!(nodes.lines().nth(1).is_some_and(|l| l.starts_with(NODE) && l.contains(" Ready ")), "{nodes}");
    let pods = api.kubectl(&["get", "pods", "-o", "wide"]);
    for name in ["api-web", "web-testnode"] {
        assert!(pods.lines().any(|l| l.starts_with(name) && l.contains("Running") && l.contains(NODE)), "{pods}");
    }
    let describe = api.kubectl(&["describe", "pod", "api-web"]);
    assert!(describe.contains("Started"), "the node's events show: {describe}");
    let events = api.kubectl(&["get", "events"]);
    assert!(events.contains("Started"), "{events}");

    // A new image: the pod is started again with it.
    let before = instance(&agent, "api-web").unwrap();
    let mut containers = api.pod("default", "api-web").unwrap()["spec"]["containers"].clone();
    containers[0]["image"] = json!("busybox:1.37");
    api.patch_pod("default", "api-web", &json!({"spec": {"containers": containers}}));
    wait(&agent, &api, "api-web running with its new image", || {
        let pod = api.pod("default", "api-web")?;
        let c = &pod["status"]["containerStatuses"][0];
        (c["image"] == "busybox:1.37" && c["state"]["running"].is_object()).then_some(())
    });
    assert_ne!(instance(&agent, "api-web").unwrap().0, before.0, "a new container");
    assert_eq!(std::fs::read_to_string(&terms).unwrap(), "TERM\n", "the old instance was stopped gracefully");

    // Delete: graceful termination, then the node deletes the pod.
    api.delete_pod("default", "api-web", None);
    wait_for("api-web gone from the apiserver", WAIT, || api.pod("default", "api-web").is_none().then_some(()));
    // The node's own list drops it when the watch brings the deletion, a moment after the
    // apiserver has it gone (kubelet's /pods does the same).
    wait_for("api-web gone from the node's /pods", WAIT, || {
        (!agent.pods().iter().any(|p| p.metadata.name == "api-web")).then_some(())
    });
    assert_eq!(std::fs::read_to_string(&terms).unwrap(), "TERM\nTERM\n", "SIGTERM before the pod was deleted");
    assert!(
        agent.log_text().contains("deleted in its source") || agent.log_text().contains("being deleted"),
        "the log says why"
    );

    api.assert_no_validation_failures();
    // Everything it did is what Node authorization and NodeRestriction let a node do.
    let forbidden: Vec<String> = api
        .requests()
        .into_iter()
        .filter(|r| r.user == format!("system:node:{NODE}") && r.status == 403)
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(forbidden.is_empty(), "the node was refused: {forbidden:?}");
    drop(agent);
}

/// The agent's view of pod `name` from the apiserver: (container id, restart count).
fn instance(agent: &AgentProcess, name: &str) -> Option<(String, i32)> {
    let pod = agent.pods().into_iter().find(|p| p.metadata.name == name)?;
    let c = pod.status?.container_statuses.into_iter().next()?;
    Some((c.container_id.clone(), c.restart_count)).filter(|(id, _)| !id.is_empty())
}

#[test]
fn with_the_apiserver_away_pods_run_on_and_what_waited_arrives_once_it_is_back() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let sb = Sandbox::new();
    let agent = start_agent(&sb, &api);
    api.create_pod("default", &sleeper("steady", 5));
    let mut flaky = sleeper("flaky", 1);
    flaky["spec"]["containers"][0]["command"] = json!(["sh", "-c", "sleep 2; exit 3"]);
    api.create_pod("default", &flaky);
    wait(&agent, &api, "steady Running in the apiserver", || {
        (phase(&api, "steady").as_deref() == Some("Running")).then_some(())
    });
    let steady = wait(&agent, &api, "steady's container", || instance(&agent, "steady"));

    // Away: pods keep running and restarting; statuses and events wait.
    api.down();
    wait(&agent, &api, "the agent to notice", || agent.log_text().contains("cannot be reached").then_some(()));
    let restarts = wait(&agent, &api, "flaky to restart while away", || {
        instance(&agent, "flaky").map(|(_, n)| n).filter(|n| *n >= 2)
    });
    let metrics = agent.get("/metrics").unwrap();
    assert!(metrics.contains("ferrolet_apiserver_online 0"), "{metrics}");
    assert!(!metrics.contains("ferrolet_apiserver_spool_items 0\n"), "writes wait: {metrics}");

    // Back: what waited arrives, in order, once.
    api.up();
    wait(&agent, &api, "flaky's restarts in the apiserver", || {
        let pod = api.pod("default", "flaky")?;
        (pod["status"]["containerStatuses"][0]["restartCount"].as_i64()? >= i64::from(restarts)).then_some(())
    });
    wait(&agent, &api, "the spool to drain", || {
        agent
            .get("/metrics")
            .ok()
            .filter(|m| m.contains("ferrolet_apiserver_spool_items 0\n") && m.contains("ferrolet_apiserver_online 1"))
    });
    assert_eq!(instance(&agent, "steady"), Some(steady.clone()), "steady was never restarted");
    let log = agent.log_text();
    assert_eq!(log.matches("cannot be reached").count(), 1, "one line when it goes:\n{log}");
    assert_eq!(log.matches("reached again").count(), 1, "one line when it is back:\n{log}");
    // Repeats were aggregated into one Event (count), never written twice.
    let events = api.events("default");
    let mut seen = std::collections::BTreeSet::new();
    for e in &events {
        let key = (e["involvedObject"]["uid"].clone().to_string(), e["reason"].to_string(), e["message"].to_string());
        assert!(seen.insert(key.clone()), "an event written twice: {key:?}\n{events:#?}");
    }
    assert!(
        events.iter().any(|e| e["involvedObject"]["name"] == "flaky" && e["count"].as_i64().unwrap_or(0) >= 2),
        "flaky's repeated events arrived with their count: {events:#?}"
    );
    api.assert_no_validation_failures();

    // Restarted while away: the pods the apiserver gave it keep running.
    api.down();
    assert!(agent.terminate().success());
    let agent = start_agent(&sb, &api); // the same state directory
    wait(&agent, &api, "steady adopted", || instance(&agent, "steady").filter(|i| *i == steady));
    assert!(agent.log_text().contains("running the 2 pod(s) it gave this node before"), "{}", agent.log_text());
    agent.wait_syncs(15);
    assert_eq!(instance(&agent, "steady"), Some(steady.clone()), "steady still runs, never restarted");
    api.up();
    wait(&agent, &api, "the node's Lease renewed again", || agent.log_text().contains("reached again").then_some(()));
    assert_eq!(instance(&agent, "steady"), Some(steady));
    api.assert_no_validation_failures();
}

#[test]
fn device_plugin_resources_appear_in_the_node_and_pods_that_do_not_fit_are_refused() {
    use common::plugin::{Behaviour, TestPlugin};
    // The newest schemas the validator has.
    let options = Options { kube_version: "1.37".into(), ..Default::default() };
    let Some(api) = FakeApiserver::start_with(NODE, options) else { return };
    let sb = Sandbox::new();
    let agent = start_agent(&sb, &api);
    let plugin =
        TestPlugin::start(&sb.plugin_dir(), "example.com/widget", "w.sock", &["w0", "w1"], Behaviour::default());
    plugin.register().unwrap();
    let node = wait(&agent, &api, "the widgets in the Node", || {
        api.node(NODE).filter(|n| n["status"]["allocatable"]["example.com/widget"] == "2")
    });
    assert_eq!(node["status"]["capacity"]["example.com/widget"], "2");

    let mut greedy = sleeper("greedy", 1);
    greedy["spec"]["containers"][0]["resources"] = json!({"limits": {"example.com/widget": "3"}});
    api.create_pod("default", &greedy);
    let mut huge = sleeper("huge", 1);
    huge["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "5000"}});
    api.create_pod("default", &huge);
    let mut fits = sleeper("fits", 1);
    fits["spec"]["containers"][0]["resources"] = json!({"limits": {"example.com/widget": "1"}});
    api.create_pod("default", &fits);
    for (name, reason) in [("greedy", "OutOfexample.com/widget"), ("huge", "OutOfcpu")] {
        let pod = wait(&agent, &api, name, || api.pod("default", name).filter(|p| p["status"]["phase"] == "Failed"));
        assert_eq!(pod["status"]["reason"], reason);
        assert!(pod["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Pod was rejected: Node didn't have enough resource"));
    }
    wait(&agent, &api, "fits Running", || (phase(&api, "fits").as_deref() == Some("Running")).then_some(()));

    // The plugin is gone when the agent comes back: the Node says 0 widgets, as kubelet keeps
    // a removed resource at 0, although this run never reported it.
    drop(plugin);
    agent.terminate();
    let agent = start_agent(&sb, &api);
    wait(&agent, &api, "no widgets in the Node", || {
        api.node(NODE).filter(|n| n["status"]["allocatable"]["example.com/widget"] == "0")
    });
    api.assert_no_validation_failures();
}

#[test]
fn a_missing_or_wrong_kubeconfig_stops_the_start_naming_the_file() {
    let sb = Sandbox::new();
    let cfg = sb.dir.path().join("ferrolet.toml");
    let run = |kubeconfig: &std::path::Path| {
        let text = format!("{}[apiserver]\nkubeconfig = {kubeconfig:?}\n", sb.config_text(common::free_port()));
        std::fs::write(&cfg, text).unwrap();
        let out =
            std::process::Command::new(common::ferrolet_bin()).args(["run", "--config"]).arg(&cfg).output().unwrap();
        assert!(!out.status.success(), "it must not start");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let missing = sb.dir.path().join("no-such.kubeconfig");
    let err = run(&missing);
    assert!(err.contains(&missing.display().to_string()), "{err}");
    let wrong = sb.dir.path().join("wrong.kubeconfig");
    std::fs::write(&wrong, "apiVersion: v1\nkind: Config\nclusters: []\n").unwrap();
    let err = run(&wrong);
    assert!(err.contains(&wrong.display().to_string()) && err.contains("cluster"), "{err}");
}

#[test]
fn without_a_ca_in_the_kubeconfig_the_systems_bundle_is_trusted() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let sb = Sandbox::new();
    let text = std::fs::read_to_string(api.node_kubeconfig()).unwrap();
    let no_ca: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("certificate-authority"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(no_ca.len() + 1, text.len(), "the kubeconfig named its CA");
    let kubeconfig = sb.dir.path().join("no-ca.kubeconfig");
    std::fs::write(&kubeconfig, no_ca).unwrap();
    let port = common::free_port();
    let cfg = sb.dir.path().join("ferrolet.toml");
    std::fs::write(&cfg, format!("{}[apiserver]\nkubeconfig = {kubeconfig:?}\n", sb.config_text(port))).unwrap();
    let command = |bundle: &std::path::Path| {
        let mut c = std::process::Command::new(common::ferrolet_bin());
        c.args(["run", "--config"]).arg(&cfg).env("SSL_CERT_FILE", bundle);
        c
    };
    // A system bundle that cannot be read stops the start, naming it.
    let missing = sb.dir.path().join("no-bundle.pem");
    let out = command(&missing).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains(&format!("CA bundle {}", missing.display())), "{err}");
    // The fake's CA as the system's bundle: the node registers over verified TLS.
    let agent = AgentProcess::spawn_command(
        command(&api.ca_cert()),
        port,
        "info",
        sb.dir.path().join("agent.log"),
        Duration::from_millis(50),
    );
    wait(&agent, &api, "the Node registered", || api.node(NODE));
}

#[test]
fn cut_watches_a_compacted_history_and_500s_lose_no_pod_and_no_status() {
    use common::apiserver::CutMode;
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let sb = Sandbox::new();
    let agent = start_agent(&sb, &api);
    let running = |name: &str| {
        wait(&agent, &api, &format!("{name} Running in the apiserver"), || {
            (phase(&api, name).as_deref() == Some("Running")).then_some(())
        })
    };
    api.create_pod("default", &sleeper("a", 1));
    running("a");
    // A watch cut mid-stream: watched again from where it stood.
    api.wait_for_watches(&common::apiserver::node_user(NODE), 1, WAIT);
    assert!(api.cut_watches(CutMode::Partial) >= 1);
    api.create_pod("default", &sleeper("b", 1));
    running("b");
    // History gone: the next watch gets 410 and the node lists again.
    api.compact();
    api.create_pod("default", &sleeper("c", 1));
    api.cut_watches(CutMode::Abrupt);
    running("c");
    // Busy apiserver: statuses answered 500 are tried again.
    api.fail_next_matching(3, 500, "/status", false);
    api.create_pod("default", &sleeper("d", 1));
    running("d");
    let pods: Vec<String> = agent.pods().into_iter().map(|p| p.metadata.name).collect();
    for name in ["a", "b", "c", "d"] {
        assert_eq!(pods.iter().filter(|p| *p == name).count(), 1, "{name} runs once: {pods:?}");
    }
    api.assert_no_validation_failures();
}

/// 140 pods bound to the node, each with 240 KiB of annotations: 34 MB in all, over the
/// client's 32 MiB answer limit. The list after a restart comes in pages; no pod is stopped
/// or restarted, and a pod bound afterwards starts.
#[test]
fn a_node_list_over_32_mib_is_read_in_pages_after_a_restart_and_every_pod_keeps_running() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let sb = Sandbox::new();
    let kubeconfig = api.node_kubeconfig();
    let config = |text: String| format!("max_pods = 200\n{text}[apiserver]\nkubeconfig = {kubeconfig:?}\n");
    let agent = AgentProcess::start_with(&sb, config);
    let blob = "x".repeat(240 << 10);
    let n = 140;
    for i in 0..n {
        let mut pod = sleeper(&format!("big{i:03}"), 1);
        pod["metadata"]["annotations"] = json!({"example.com/blob": blob});
        api.create_pod("default", &pod);
    }
    // As the apiserver has them (the agent's own /pods is over the test client's limit).
    let running = |_: &AgentProcess| {
        (0..n)
            .filter_map(|i| {
                let pod = api.pod("default", &format!("big{i:03}"))?;
                let c = &pod["status"]["containerStatuses"][0];
                c["state"]["running"].is_object().then(|| (c["containerID"].to_string(), c["restartCount"].to_string()))
            })
            .collect::<Vec<(String, String)>>()
    };
    let before = wait_long(&agent, &api, "every pod running", Duration::from_secs(180), || {
        let r = running(&agent);
        (r.len() == n).then_some(r)
    });
    agent.kill9();
    let agent = AgentProcess::start_with(&sb, config);
    wait_long(&agent, &api, "every pod adopted", Duration::from_secs(60), || {
        (running(&agent).len() == n).then_some(())
    });
    let log = agent.log_text();
    assert!(!log.contains("working offline"), "the apiserver was there all along:\n{log}");
    assert!(!log.contains("larger than"), "{log}");
    agent.wait_syncs(15);
    let after = running(&agent);
    assert_eq!(after, before, "every pod runs on, none restarted");
    api.create_pod("default", &sleeper("late", 1));
    wait(&agent, &api, "a pod bound afterwards runs", || {
        (phase(&api, "late").as_deref() == Some("Running")).then_some(())
    });
}

#[test]
fn an_evicted_pod_reaches_the_apiserver_failed_with_kubelets_reason_and_disruption_target() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let sb = Sandbox::new();
    let agent = start_agent(&sb, &api);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "scratchy"},
           "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1,
                    "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "4Mi"}}],
                    "containers": [{"name": "app", "image": "busybox:1.36",
                                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                                    "command": ["sh", "-c", "head -c 8388608 /dev/zero > /scratch/f; exec sleep 3600"]}]}});
    api.create_pod("default", &pod);
    let status = wait_long(&agent, &api, "the evicted pod's status", Duration::from_secs(60), || {
        let status = api.pod("default", "scratchy")?.get("status")?.clone();
        (status["phase"] == "Failed" && status["reason"] == "Evicted").then_some(status)
    });
    assert_eq!(status["message"], "Usage of EmptyDir volume \"scratch\" exceeds the limit \"4Mi\". ");
    let conditions = status["conditions"].as_array().unwrap();
    let target = conditions.iter().find(|c| c["type"] == "DisruptionTarget").expect("DisruptionTarget");
    assert_eq!((&target["status"], &target["reason"]), (&json!("True"), &json!("TerminationByKubelet")));
    assert_eq!(target["message"], status["message"]);
}
