//! Ordinary cluster pods on the process runtime: service account tokens, ConfigMaps and
//! Secrets as volumes and environment, their updates, what is missing or refused, and an
//! agent restarted while the apiserver is away. A real `ferrolet run` against the fake
//! kube-apiserver (tests/apiserver), which issues real signed tokens and answers as the Node
//! authorizer does. Without the test venv each test skips with the reason.

use crate::common;

use common::apiserver::{FakeApiserver, Options};
use common::{AgentProcess, Sandbox};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

const NODE: &str = "testnode";
const WAIT: Duration = Duration::from_secs(40);
const TOKEN_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Starts an agent of `sb` joined to `api`, its kept objects' key under the sandbox (not in
/// its state directory).
fn start_agent(sb: &Sandbox, api: &FakeApiserver) -> AgentProcess {
    let kubeconfig = api.node_kubeconfig();
    let key = key_path(sb);
    AgentProcess::start_with(sb, |text| format!("{text}[apiserver]\nkubeconfig = {kubeconfig:?}\nkept_key = {key:?}\n"))
}

fn key_path(sb: &Sandbox) -> PathBuf {
    sb.work().join("etc/kept.key")
}

/// `wait_for`, but a timeout shows the agent's log and the fake's.
fn wait<T>(agent: &AgentProcess, api: &FakeApiserver, what: &str, f: impl FnMut() -> Option<T>) -> T {
    common::apiserver::wait_logged(agent, api, what, WAIT, f)
}

fn pod(api: &FakeApiserver, name: &str) -> Value {
    api.pod("default", name).unwrap_or_else(|| panic!("no pod {name}"))
}

fn running(api: &FakeApiserver, name: &str) -> Option<Value> {
    api.pod("default", name).filter(|p| p["status"]["phase"] == "Running")
}

/// A pod on this node running `script` in `sh`, sharing `out` with the test.
fn script_pod(name: &str, script: &str, out: &Path) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "app", "image": "busybox:1.36", "command": ["sh", "-c", script],
                                    "env": [{"name": "OUT", "value": out.to_str().unwrap()}]}]}});
    common::share_dir(&mut p, out);
    p
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The events of `reason` about pod `name`, their messages.
fn events(api: &FakeApiserver, name: &str, reason: &str) -> Vec<String> {
    api.events("default")
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == name && e["reason"] == reason)
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The environment of the oldest process on the node whose environment holds `marker`.
fn workload_env(marker: &str) -> String {
    let mut found: Vec<(u64, String)> = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let dir = entry.path();
        let (Ok(env), Ok(stat)) = (std::fs::read(dir.join("environ")), std::fs::read_to_string(dir.join("stat")))
        else {
            continue;
        };
        let env = String::from_utf8_lossy(&env).replace('\0', "\n");
        let started = stat.rsplit(')').next().and_then(|s| s.split_whitespace().nth(19)).and_then(|s| s.parse().ok());
        if let (true, Some(started)) = (env.lines().any(|l| l == marker), started) {
            found.push((started, env));
        }
    }
    found.into_iter().min().map(|(_, env)| env).unwrap_or_default()
}

#[test]
fn an_ordinary_pod_reads_its_bound_token_its_config_map_and_secret_files_and_env() {
    let options = Options { service_account_admission: true, ..Default::default() };
    let Some(api) = FakeApiserver::start_with(NODE, options) else { return };
    let sb = Sandbox::new();
    let out = sb.work().join("out");
    std::fs::create_dir_all(&out).unwrap();
    api.create_config_map("default", "app", &json!({"a.conf": "alpha", "b.conf": "beta", "1bad": "x", "MODE": "prod"}));
    api.create_secret("default", "db", "Opaque", &[("pw", b"hunter2"), ("user", b"admin")]);
    let agent = start_agent(&sb, &api);

    let script = format!(
        "cd {TOKEN_DIR} && cat token > $OUT/token && cat ca.crt > $OUT/ca && cat namespace > $OUT/ns && \
         cat /cfg/conf/a > $OUT/cfg && stat -L -c '%a %g' /cfg/conf/a > $OUT/cfgmode && ls /cfg > $OUT/cfgls && \
         cat /sec/pw > $OUT/pw && stat -L -c '%a %g' /sec/pw > $OUT/secmode && stat -f -c %T /sec > $OUT/secfs && \
         touch $OUT/done; sleep 3600"
    );
    let mut web = script_pod("web", &script, &out);
    web["spec"]["securityContext"] = json!({"fsGroup": 2000});
    web["spec"]["volumes"].as_array_mut().unwrap().extend([
        json!({"name": "cfg", "configMap": {"name": "app", "defaultMode": 0o440, "items": [{"key": "a.conf", "path": "conf/a", "mode": 0o600}, {"key": "b.conf", "path": "b"}]}}),
        json!({"name": "sec", "secret": {"secretName": "db", "defaultMode": 0o400}}),
    ]);
    let c = &mut web["spec"]["containers"][0];
    c["volumeMounts"]
        .as_array_mut()
        .unwrap()
        .extend([json!({"name": "cfg", "mountPath": "/cfg"}), json!({"name": "sec", "mountPath": "/sec"})]);
    c["envFrom"] = json!([{"configMapRef": {"name": "app"}}, {"secretRef": {"name": "db"}, "prefix": "DB_"}]);
    c["env"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}));
    let created = api.create_pod("default", &web);
    let volumes = created["spec"]["volumes"].as_array().unwrap();
    assert!(
        volumes.iter().any(|v| v["name"].as_str().unwrap().starts_with("kube-api-access-")),
        "the admission added the token volume: {volumes:?}"
    );

    wait(&agent, &api, "web Running", || running(&api, "web"));
    wait(&agent, &api, "the container's report", || read(&out.join("done")));
    let uid = pod(&api, "web")["metadata"]["uid"].as_str().unwrap().to_string();

    // The token is the apiserver's, bound to this very pod.
    let token = read(&out.join("token")).unwrap();
    let claims = api.jwt_claims(&token);
    assert_eq!(claims["kubernetes.io"]["pod"]["uid"], uid.as_str(), "{claims}");
    assert_eq!(claims["kubernetes.io"]["pod"]["name"], "web");
    assert_eq!(claims["sub"], "system:serviceaccount:default:default");
    assert_eq!(read(&out.join("ca")).unwrap(), std::fs::read_to_string(api.ca_cert()).unwrap());
    assert_eq!(read(&out.join("ns")).unwrap(), "default");

    // Items, modes, fsGroup; the Secret on a tmpfs.
    assert_eq!(read(&out.join("cfg")).unwrap(), "alpha");
    assert_eq!(read(&out.join("cfgmode")).unwrap().trim(), "640 2000", "0600, with the group's read for fsGroup");
    assert_eq!(read(&out.join("cfgls")).unwrap().split_whitespace().collect::<Vec<_>>(), ["b", "conf"]);
    assert_eq!(read(&out.join("pw")).unwrap(), "hunter2");
    assert_eq!(read(&out.join("secmode")).unwrap().trim(), "440 2000");
    assert_eq!(read(&out.join("secfs")).unwrap().trim(), "tmpfs");

    // Environment: envFrom in order, a prefix, a key that is no variable name skipped.
    // As the runtime gave it: the environment the workload started with, read from the node
    // (a shell passes on only the names it can use).
    let env = workload_env(&format!("OUT={}", out.display()));
    for line in ["a.conf=alpha", "MODE=prod", "DB_pw=hunter2", "DB_user=admin", "PW=hunter2"] {
        assert!(env.lines().any(|l| l == line), "{line} in the env:\n{env}");
    }
    assert!(!env.lines().any(|l| l.starts_with("1bad=")), "{env}");
    let skipped = wait(&agent, &api, "the InvalidEnvironmentVariableNames event", || {
        Some(events(&api, "web", "InvalidEnvironmentVariableNames")).filter(|e| !e.is_empty())
    });
    assert_eq!(
        skipped[0],
        "Keys [1bad] from the EnvFrom configmap default/app were skipped since they are considered invalid environment variable names."
    );

    // Only what its pods reference was read, one object at a time, never a namespace.
    let node_user = common::apiserver::node_user(NODE);
    for r in api
        .requests()
        .iter()
        .filter(|r| r.user == node_user && (r.path.contains("/configmaps") || r.path.contains("/secrets")))
    {
        assert!(r.path.contains("fieldSelector=metadata.name%3D"), "a read of one object: {}", r.path);
        assert_eq!(r.status, 200, "{}", r.path);
    }
    api.assert_no_validation_failures();
}

#[test]
fn an_update_reaches_the_running_container_whole_and_a_sub_path_keeps_its_version() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let sb = Sandbox::new();
    let out = sb.work().join("out");
    std::fs::create_dir_all(&out).unwrap();
    api.create_config_map("default", "live", &json!({"a": "v0", "b": "v0"}));
    let agent = start_agent(&sb, &api);
    // Both files read from the version `..data` names: never one from each version.
    let script = "cat /pinned > $OUT/pinned; while true; do d=$(readlink /live/..data); \
                  if a=$(cat /live/$d/a 2>/dev/null) && b=$(cat /live/$d/b 2>/dev/null); then \
                  [ \"$a\" = \"$b\" ] || echo \"$a $b\" >> $OUT/mix; echo \"$a\" > $OUT/seen.tmp; mv $OUT/seen.tmp $OUT/seen; fi; \
                  sleep 0.02; done";
    let mut p = script_pod("reader", script, &out);
    p["spec"]["volumes"].as_array_mut().unwrap().push(json!({"name": "live", "configMap": {"name": "live"}}));
    p["spec"]["containers"][0]["volumeMounts"].as_array_mut().unwrap().extend([
        json!({"name": "live", "mountPath": "/live"}),
        json!({"name": "live", "mountPath": "/pinned", "subPath": "a"}),
    ]);
    api.create_pod("default", &p);
    wait(&agent, &api, "reader Running", || running(&api, "reader"));
    wait(&agent, &api, "v0 read", || read(&out.join("seen")).filter(|s| s.trim() == "v0"));
    for i in 1..=5 {
        let v = format!("v{i}");
        api.update_config_map("default", "live", &json!({"a": v, "b": v}));
        wait(&agent, &api, &format!("{v} read in the container"), || read(&out.join("seen")).filter(|s| s.trim() == v));
    }
    assert_eq!(read(&out.join("mix")), None, "a reader saw two versions at once");
    assert_eq!(read(&out.join("pinned")).unwrap(), "v0", "a subPath mount is not updated");
    // The ConfigMap is watched, not listed again and again: one list, one watch at a time.
    let node_user = common::apiserver::node_user(NODE);
    let lists =
        api.requests().iter().filter(|r| r.user == node_user && r.path.contains("/configmaps") && !r.watch).count();
    assert_eq!(lists, 1, "the ConfigMap was listed once, then watched");
}

#[test]
fn a_token_is_renewed_before_80_percent_of_its_lifetime() {
    // The apiserver caps tokens at 10 s (its --service-account-max-token-expiration): renewals
    // are due every 8 s.
    let options = Options { max_token_seconds: 10, ..Default::default() };
    let Some(api) = FakeApiserver::start_with(NODE, options) else { return };
    let sb = Sandbox::new();
    let agent = start_agent(&sb, &api);
    let mut p = script_pod("tok", "sleep 3600", &sb.work());
    p["spec"]["volumes"].as_array_mut().unwrap().push(json!({"name": "tok", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 600, "audience": "vault"}}]}}));
    p["spec"]["containers"][0]["volumeMounts"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "tok", "mountPath": "/tok"}));
    api.create_pod("default", &p);
    wait(&agent, &api, "tok Running", || running(&api, "tok"));
    let uid = pod(&api, "tok")["metadata"]["uid"].as_str().unwrap().to_string();
    let file = sb.state().join("pods").join(&uid).join("volumes/kubernetes.io~projected/tok/token");
    let first = read(&file).unwrap();
    let issued = wait(&agent, &api, "three tokens", || {
        let t: Vec<Value> = api.tokens_issued().into_iter().filter(|t| t["pod_uid"] == uid.as_str()).collect();
        (t.len() >= 3).then_some(t)
    });
    for pair in issued.windows(2) {
        let (a, b) = (pair[0]["iat"].as_f64().unwrap(), pair[1]["iat"].as_f64().unwrap());
        let exp = pair[0]["exp"].as_f64().unwrap();
        assert!(b < exp && b - a >= 7.0, "renewed at 80 % of 10 s, before expiry: {a} then {b} (exp {exp})");
        assert_eq!(pair[1]["audiences"], json!(["vault"]));
    }
    let now = wait(&agent, &api, "the renewed token in the volume", || read(&file).filter(|t| *t != first));
    assert_eq!(api.jwt_claims(&now)["kubernetes.io"]["pod"]["uid"], uid.as_str());
}

#[test]
fn missing_objects_and_keys_wait_with_kubelets_reasons_and_optional_ones_do_not() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let sb = Sandbox::new();
    api.create_secret("default", "db", "Opaque", &[("pw", b"hunter2")]);
    let agent = start_agent(&sb, &api);
    let sleeper = |name: &str| script_pod(name, "sleep 3600", &sb.work());

    let mut needs_cm = sleeper("needs-cm");
    needs_cm["spec"]["volumes"].as_array_mut().unwrap().push(json!({"name": "cfg", "configMap": {"name": "later"}}));
    api.create_pod("default", &needs_cm);
    let mut needs_key = sleeper("needs-key");
    needs_key["spec"]["containers"][0]["env"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "K", "valueFrom": {"secretKeyRef": {"name": "db", "key": "nokey"}}}));
    api.create_pod("default", &needs_key);
    let mut optional = sleeper("optional");
    optional["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "cfg", "configMap": {"name": "absent", "optional": true}}));
    optional["spec"]["containers"][0]["env"].as_array_mut().unwrap().extend([
        json!({"name": "K", "valueFrom": {"secretKeyRef": {"name": "db", "key": "nokey", "optional": true}}}),
        json!({"name": "L", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "x", "optional": true}}}),
    ]);
    api.create_pod("default", &optional);

    wait(&agent, &api, "optional Running", || running(&api, "optional"));
    // First `not registered` (not read yet, as kubelet says it), then what the apiserver said.
    let mount = "MountVolume.SetUp failed for volume \"cfg\" : configmap \"later\" not found";
    wait(&agent, &api, "FailedMount on needs-cm", || {
        events(&api, "needs-cm", "FailedMount").into_iter().find(|m| m == mount)
    });
    assert_eq!(pod(&api, "needs-cm")["status"]["phase"], "Pending");
    let waiting = wait(&agent, &api, "needs-key waiting", || {
        let p = pod(&api, "needs-key");
        let w = p["status"]["containerStatuses"][0]["state"]["waiting"].clone();
        (w["reason"] == "CreateContainerConfigError").then_some(w)
    });
    assert_eq!(waiting["message"], "couldn't find key nokey in Secret default/db");

    // What was missing arrives: the pod starts.
    api.create_config_map("default", "later", &json!({"k": "v"}));
    wait(&agent, &api, "needs-cm Running", || running(&api, "needs-cm"));

    // An object the apiserver refuses to this node is said on the pod; it is asked again
    // after a pause, not in a tight loop.
    api.fail_next_matching(1000, 403, "/configmaps?fieldSelector=metadata.name%3Ddenied", false);
    let mut denied = sleeper("denied");
    denied["spec"]["volumes"].as_array_mut().unwrap().push(json!({"name": "cfg", "configMap": {"name": "denied"}}));
    api.create_pod("default", &denied);
    let said = wait(&agent, &api, "FailedMount on denied", || {
        events(&api, "denied", "FailedMount").into_iter().find(|m| !m.contains("not registered"))
    });
    assert!(said.starts_with("MountVolume.SetUp failed for volume \"cfg\" : "), "{said}");
    std::thread::sleep(Duration::from_secs(5));
    let asked = api.requests().iter().filter(|r| r.path.contains("metadata.name%3Ddenied")).count();
    assert!(asked <= 3, "a refused object is asked again after a pause, not in a loop: {asked} requests");
}

/// Stops every container of `sb` as a reboot would (drain), then drops what a reboot loses:
/// the pods' directories, their tmpfs volumes unmounted.
fn reboot(sb: &Sandbox, config: &Path) {
    let out =
        std::process::Command::new(common::ferrolet_bin()).arg("drain").arg("--config").arg(config).output().unwrap();
    assert!(out.status.success(), "drain: {}", String::from_utf8_lossy(&out.stderr));
    let pods = sb.state().join("pods");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mut mounts: Vec<&str> =
        mountinfo.lines().filter_map(|l| l.split(' ').nth(4)).filter(|m| Path::new(m).starts_with(&pods)).collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in mounts {
        let c = std::ffi::CString::new(m).unwrap();
        // SAFETY: a NUL-terminated path of a mount this test's agent made.
        assert_eq!(unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) }, 0, "umount {m}");
    }
    std::fs::remove_dir_all(&pods).unwrap();
}

#[test]
fn restarted_while_the_apiserver_is_away_a_pod_starts_from_the_kept_copies() {
    let options = Options { service_account_admission: true, ..Default::default() };
    let Some(api) = FakeApiserver::start_with(NODE, options) else { return };
    let sb = Sandbox::new();
    let out = sb.work().join("out");
    std::fs::create_dir_all(&out).unwrap();
    api.create_config_map("default", "app", &json!({"mode": "edge"}));
    api.create_secret("default", "db", "Opaque", &[("pw", b"kept-secret-value")]);
    let agent = start_agent(&sb, &api);
    let script = format!(
        "cat {TOKEN_DIR}/token > $OUT/token.$$ && cat /cfg/mode > $OUT/mode.$$ && cat /sec/pw > $OUT/pw.$$ && \
         echo $PW > $OUT/env.$$ && echo $$ >> $OUT/started; sleep 3600"
    );
    let mut p = script_pod("edge", &script, &out);
    p["spec"]["volumes"].as_array_mut().unwrap().extend([
        json!({"name": "cfg", "configMap": {"name": "app"}}),
        json!({"name": "sec", "secret": {"secretName": "db"}}),
    ]);
    let c = &mut p["spec"]["containers"][0];
    c["volumeMounts"]
        .as_array_mut()
        .unwrap()
        .extend([json!({"name": "cfg", "mountPath": "/cfg"}), json!({"name": "sec", "mountPath": "/sec"})]);
    c["env"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}));
    api.create_pod("default", &p);
    wait(&agent, &api, "edge Running", || running(&api, "edge"));
    let first = wait(&agent, &api, "the first start", || read(&out.join("started")));
    let first = first.trim().to_string();
    wait(&agent, &api, "the first report", || read(&out.join(format!("env.{first}"))));
    let token = read(&out.join(format!("token.{first}"))).unwrap();

    // The kept copies are sealed: the Secret's value and the token are nowhere in plain text.
    let kept = sb.state().join("objects");
    let mut files = 0;
    for entry in std::fs::read_dir(&kept).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains("kept-secret-value") && !text.contains(&token[..40]), "a kept file holds plain text");
        files += 1;
    }
    assert!(files >= 4, "the ConfigMap, the Secret, kube-root-ca.crt and the token are kept: {files}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(key_path(&sb)).unwrap().permissions().mode() & 0o777, 0o600);

    // The node reboots while the apiserver is away.
    assert!(agent.terminate().success());
    api.down();
    reboot(&sb, &sb.dir.path().join("ferrolet.toml"));
    let agent = start_agent(&sb, &api);
    let second = wait(&agent, &api, "a second start", || {
        read(&out.join("started")).and_then(|s| s.lines().nth(1).map(str::to_string))
    });
    wait(&agent, &api, "the second report", || read(&out.join(format!("env.{second}"))));
    assert_eq!(read(&out.join(format!("mode.{second}"))).unwrap(), "edge");
    assert_eq!(read(&out.join(format!("pw.{second}"))).unwrap(), "kept-secret-value");
    assert_eq!(read(&out.join(format!("env.{second}"))).unwrap().trim(), "kept-secret-value");
    assert_eq!(read(&out.join(format!("token.{second}"))).unwrap(), token, "the kept token, still valid");
    api.up();
}
