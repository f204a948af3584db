//! TLS bootstrap and certificate rotation end to end: a real `ferrolet run` against the fake
//! kube-apiserver (tests/apiserver), which authenticates bootstrap tokens, serves the
//! `certificates.k8s.io/v1` CSR API, approves kubelet client CSRs as kube-controller-manager
//! does, and signs approved ones with its test CA. Without the test venv each test skips.

use crate::common;

use common::apiserver::FakeApiserver;
use common::{AgentProcess, Sandbox};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const NODE: &str = "testnode";
const WAIT: Duration = Duration::from_secs(40);
const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

/// An agent of `sb` with `[apiserver]` `extra`: its kubeconfig is written to
/// `<work>/kubelet.conf` by TLS bootstrap when it is not there.
fn start(sb: &Sandbox, extra: &str) -> AgentProcess {
    let kubeconfig = kubeconfig_path(sb);
    let key = sb.work().join("etc/kept.key");
    AgentProcess::start_with(sb, |text| {
        format!("{text}[apiserver]\nkubeconfig = {kubeconfig:?}\nkept_key = {key:?}\n{extra}")
    })
}

fn kubeconfig_path(sb: &Sandbox) -> PathBuf {
    sb.work().join("kubelet.conf")
}

fn pki(sb: &Sandbox) -> PathBuf {
    sb.state().join("pki")
}

/// `f` until it gives a value within `within`; a timeout shows both logs.
fn wait<T>(agent: &AgentProcess, api: &FakeApiserver, what: &str, within: Duration, f: impl FnMut() -> Option<T>) -> T {
    common::apiserver::wait_logged(agent, api, what, within, f)
}

fn ready(api: &FakeApiserver) -> Option<()> {
    let node = api.node(NODE)?;
    let conditions = node["status"]["conditions"].as_array()?;
    conditions.iter().any(|c| c["type"] == "Ready" && c["status"] == "True").then_some(())
}

/// The CSRs of `signer`, oldest first, as the fake reports them (`name`, `requester`,
/// `usages`, `conditions`, the issued `certificate` described).
fn csrs_of(api: &FakeApiserver, signer: &str) -> Vec<Value> {
    api.csrs().into_iter().filter(|c| c["signerName"] == signer).collect()
}

fn issued(csr: &Value) -> bool {
    csr["certificate"].is_object()
}

/// The leaf of the store's current pair `prefix` (DER).
fn current_leaf(sb: &Sandbox, prefix: &str) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    let path = pki(sb).join(format!("{prefix}-current.pem"));
    rustls::pki_types::CertificateDer::pem_file_iter(&path).unwrap().next().unwrap().unwrap().to_vec()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn sleeper(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 2,
                    "containers": [{"name": "app", "image": "busybox", "command": ["sleep", "3600"]}]}})
}

fn running(api: &FakeApiserver, name: &str) -> Option<Value> {
    api.pod("default", name).filter(|p| p["status"]["phase"] == "Running")
}

#[test]
fn a_node_with_only_a_bootstrap_token_joins_registers_and_runs_a_pod() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let token = api.create_bootstrap_token(None, Duration::from_secs(3600));
    let bootstrap = api.bootstrap_kubeconfig(&token);
    let sb = Sandbox::new();
    let extra = format!("bootstrap_kubeconfig = {bootstrap:?}\n");
    let agent = start(&sb, &extra);
    wait(&agent, &api, "the Node Ready", WAIT, || ready(&api));
    api.create_pod("default", &sleeper("web"));
    wait(&agent, &api, "the pod running", WAIT, || running(&api, "web"));

    // One CSR, filed with the token, named by its key, signed for system:node:NODE.
    let csrs = csrs_of(&api, CLIENT_SIGNER);
    assert_eq!(csrs.len(), 1, "{csrs:#?}");
    let csr = &csrs[0];
    let name = csr["name"].as_str().unwrap();
    assert!(name.starts_with("node-csr-"), "{name}");
    let id = token.split('.').next().unwrap();
    assert_eq!(csr["requester"]["username"], format!("system:bootstrap:{id}"));
    assert_eq!(csr["usages"], json!(["digital signature", "client auth"]));
    assert!(issued(csr));
    let leaf = current_leaf(&sb, "kubelet-client");
    let who = ferrolet::base::x509::subject_identity(&leaf).unwrap();
    assert_eq!(
        (who.common_name.as_str(), who.organizations),
        ("system:node:testnode", vec!["system:nodes".to_string()])
    );

    // The files as kubelet keeps them: a dated pair behind a symlink, owner only.
    let dir = pki(&sb);
    assert_eq!(mode(&dir), 0o700);
    let target = std::fs::read_link(dir.join("kubelet-client-current.pem")).unwrap();
    let target = target.to_string_lossy().into_owned();
    assert!(
        target.starts_with("kubelet-client-20")
            && target.ends_with(".pem")
            && target.len() == "kubelet-client-2026-11-28-02-40-00.pem".len(),
        "{target}"
    );
    assert_eq!(mode(&dir.join(&target)), 0o600);
    assert!(!dir.join("kubelet-client.key.tmp").exists(), "the bootstrap key is gone once its certificate is kept");
    let kubeconfig = kubeconfig_path(&sb);
    assert_eq!(mode(&kubeconfig), 0o600);
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(text.contains(&dir.join("kubelet-client-current.pem").display().to_string()), "{text}");
    assert!(!text.contains(&token), "the token stays in the bootstrap kubeconfig: {text}");
    let log = agent.log_text();
    assert!(
        log.contains(&format!(
            "filed CertificateSigningRequest {name} for the client certificate (with the bootstrap token"
        )),
        "{log}"
    );

    // kubelet's certificate metrics, as kube-prometheus's alerts read them.
    let metrics = ureq::get(&format!("http://127.0.0.1:{}/metrics", agent.port))
        .call()
        .unwrap()
        .into_body()
        .read_to_string()
        .unwrap();
    let ttl: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("kubelet_certificate_manager_client_ttl_seconds "))
        .unwrap_or_else(|| panic!("{metrics}"))
        .parse()
        .unwrap();
    assert!(ttl > 300.0 * 86_400.0 && ttl <= 366.0 * 86_400.0, "the signer's year: {ttl}");
    assert!(metrics.contains("kubelet_certificate_manager_client_expiration_renew_errors 0\n"), "{metrics}");
    assert!(
        !metrics.contains("kubelet_certificate_manager_server_ttl_seconds"),
        "no serving certificate from the cluster"
    );

    // Restarted, it uses what it got: no new CSR, the same pod still running.
    drop(agent);
    let agent = start(&sb, &extra);
    wait(&agent, &api, "the Node Ready again", WAIT, || ready(&api));
    wait(&agent, &api, "the pod running again", WAIT, || running(&api, "web"));
    assert_eq!(csrs_of(&api, CLIENT_SIGNER).len(), 1);

    // A crash after the pair was kept but before the kubeconfig was written: the next
    // start uses the kept pair, writes the kubeconfig, and files nothing.
    drop(agent);
    std::fs::remove_file(&kubeconfig).unwrap();
    let agent = start(&sb, &extra);
    wait(&agent, &api, "the Node Ready after the crash", WAIT, || ready(&api));
    assert_eq!(csrs_of(&api, CLIENT_SIGNER).len(), 1);
    assert_eq!(std::fs::read_to_string(&kubeconfig).unwrap(), text);
    api.assert_no_validation_failures();
}

#[test]
fn a_short_lived_client_certificate_is_renewed_before_it_expires_with_no_failed_request_and_no_restart() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    // kube-controller-manager's --cluster-signing-duration: notBefore is backdated by 5
    // minutes, notAfter is 2 minutes from signing, so renewal falls 0 to 78 s after it.
    api.set_signing_duration(Duration::from_secs(120));
    let token = api.create_bootstrap_token(None, Duration::from_secs(3600));
    let bootstrap = api.bootstrap_kubeconfig(&token);
    let sb = Sandbox::new();
    let agent = start(&sb, &format!("bootstrap_kubeconfig = {bootstrap:?}\n"));
    wait(&agent, &api, "the Node Ready", WAIT, || ready(&api));
    api.create_pod("default", &sleeper("web"));
    let pod = wait(&agent, &api, "the pod running", WAIT, || running(&api, "web"));
    // The certificate it joined with (the bootstrap CSR's).
    let joined = csrs_of(&api, CLIENT_SIGNER).into_iter().next().unwrap();
    assert!(joined["requester"]["username"].as_str().unwrap().starts_with("system:bootstrap:"));
    let first_expiry =
        SystemTime::UNIX_EPOCH + Duration::from_secs(joined["certificate"]["notAfterUnix"].as_u64().unwrap());
    let since = api.requests().len();

    // A renewal, filed as the node itself (approved as selfnodeclient), before the expiry
    // (with this lifetime it may come at once: the deadline can fall before the signing).
    let renewal = wait(&agent, &api, "a renewed client certificate", Duration::from_secs(150), || {
        csrs_of(&api, CLIENT_SIGNER)
            .into_iter()
            .find(|c| c["requester"]["username"] == "system:node:testnode" && issued(c))
    });
    assert!(SystemTime::now() < first_expiry, "renewed before the first certificate expired");
    assert!(renewal["name"].as_str().unwrap().starts_with("csr-"), "{renewal}");
    wait(&agent, &api, "a newer pair in the store", WAIT, || {
        let (_, expiry) = ferrolet::base::x509::validity(&current_leaf(&sb, "kubelet-client")).ok()?;
        (expiry > first_expiry).then_some(())
    });

    // Past the first certificate's expiry the node still reaches the apiserver: its
    // requests go with the new one.
    let past = first_expiry.duration_since(SystemTime::now()).unwrap_or_default() + Duration::from_secs(3);
    std::thread::sleep(past);
    let heartbeat =
        |api: &FakeApiserver| api.lease(NODE).and_then(|l| l["spec"]["renewTime"].as_str().map(str::to_string));
    let before = heartbeat(&api);
    wait(&agent, &api, "a Lease renewal after the first certificate expired", WAIT, || {
        (heartbeat(&api) != before).then_some(())
    });
    ready(&api).expect("still Ready");
    // No request failed for want of credentials, and the pod never restarted.
    let refused: Vec<_> =
        api.requests()[since..].iter().filter(|r| r.status == 401 || r.status == 403).cloned().collect();
    assert!(refused.is_empty(), "{refused:#?}");
    let now = running(&api, "web").unwrap();
    assert_eq!(now["status"]["containerStatuses"][0]["restartCount"], 0);
    assert_eq!(
        now["status"]["containerStatuses"][0]["containerID"],
        pod["status"]["containerStatuses"][0]["containerID"]
    );
    // The previous pair is kept beside the current one, older ones go.
    let dated = std::fs::read_dir(pki(&sb))
        .unwrap()
        .filter(|e| {
            let n = e.as_ref().unwrap().file_name().to_string_lossy().into_owned();
            n.starts_with("kubelet-client-20")
        })
        .count();
    assert_eq!(dated, 2);
}

#[test]
fn a_denied_csr_is_a_clear_error_naming_it_and_static_pods_run_meanwhile() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    api.set_csr_approver(false);
    let token = api.create_bootstrap_token(None, Duration::from_secs(3600));
    let bootstrap = api.bootstrap_kubeconfig(&token);
    let sb = Sandbox::new();
    sb.write_manifest(
        "local.yaml",
        &common::manifest("local", "  containers:\n  - name: app\n    image: busybox\n    command: [sleep, '3600']\n"),
    );
    let agent = start(&sb, &format!("bootstrap_kubeconfig = {bootstrap:?}\n"));
    let csr = wait(&agent, &api, "a CSR", WAIT, || csrs_of(&api, CLIENT_SIGNER).into_iter().next());
    let name = csr["name"].as_str().unwrap().to_string();
    // Nobody approves it: the node says so once, naming the CSR and the command.
    wait(&agent, &api, "the wait for approval said", WAIT, || {
        agent
            .log_text()
            .contains(&format!("CertificateSigningRequest {name} for the client certificate waits for approval: kubectl certificate approve {name}"))
            .then_some(())
    });
    // Not joined, the node runs its static pods all the same.
    wait(&agent, &api, "the static pod running", WAIT, || {
        let body = ureq::get(&format!("http://127.0.0.1:{}/pods", agent.port))
            .call()
            .ok()?
            .into_body()
            .read_to_string()
            .ok()?;
        body.contains("\"Running\"").then_some(())
    });
    api.deny_csr(&name, "NotEnrolled", "this device is not in the inventory");
    wait(&agent, &api, "the denial said", WAIT, || {
        agent
            .log_text()
            .contains(&format!("CertificateSigningRequest {name} for the client certificate was denied: NotEnrolled: this device is not in the inventory"))
            .then_some(())
    });
    assert!(api.node(NODE).is_none(), "no Node without a certificate");
    assert!(!pki(&sb).join("kubelet-client.key.tmp").exists(), "a denied CSR's key is dropped: the next one is new");
    assert_eq!(csrs_of(&api, CLIENT_SIGNER).len(), 1, "no tight loop after a denial");
}

/// The certificate the kubelet API presents on `port`, when it verifies against `ca` for
/// 127.0.0.1 (`Err` with why otherwise).
fn verified_serving_cert(port: u16, ca: &Path) -> Result<Vec<u8>, String> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut conn = rustls::ClientConnection::new(std::sync::Arc::new(config), "127.0.0.1".try_into().unwrap()).unwrap();
    let mut sock = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).map_err(|e| e.to_string())?;
    }
    Ok(conn.peer_certificates().unwrap()[0].to_vec())
}

#[test]
fn the_serving_certificate_is_requested_approved_installed_and_presented() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let sb = Sandbox::new();
    let kubeconfig = api.node_kubeconfig();
    let extra = "server_tls_bootstrap = true\n";
    let key = sb.work().join("etc/kept.key");
    let begin = |sb: &Sandbox| {
        AgentProcess::start_with(sb, |text| {
            format!("{text}[apiserver]\nkubeconfig = {kubeconfig:?}\nkept_key = {key:?}\n{extra}")
        })
    };
    let agent = begin(&sb);
    let port = wait(&agent, &api, "the Node's kubelet port", WAIT, || {
        api.node(NODE)?["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"].as_u64().filter(|p| *p > 0)
    }) as u16;
    let csr = wait(&agent, &api, "a serving CSR", WAIT, || csrs_of(&api, SERVING_SIGNER).into_iter().next());
    let name = csr["name"].as_str().unwrap().to_string();
    assert_eq!(csr["requester"]["username"], "system:node:testnode");
    assert_eq!(csr["usages"], json!(["digital signature", "server auth"]));
    // Until it is approved the self-signed certificate serves (and does not verify).
    let e = verified_serving_cert(port, &api.ca_cert()).unwrap_err();
    assert!(e.contains("UnknownIssuer") || e.contains("invalid peer certificate"), "{e}");
    wait(&agent, &api, "the pending serving CSR said", WAIT, || {
        agent.log_text().contains(&format!("{name} for the serving certificate waits for approval (serving certificates are not approved automatically): kubectl certificate approve {name}")).then_some(())
    });
    api.approve_csr(&name);
    let served = wait(&agent, &api, "the issued serving certificate presented", WAIT, || {
        verified_serving_cert(port, &api.ca_cert()).ok()
    });
    let (dns, ips) = ferrolet::base::x509::subject_alt_names(&served).unwrap();
    assert_eq!(dns, [ferrolet::base::net::hostname()]);
    assert_eq!(ips, ["127.0.0.1".parse::<std::net::IpAddr>().unwrap()]);
    assert_eq!(served, current_leaf(&sb, "kubelet-server"));
    // A restart serves it at once, without a new CSR.
    drop(agent);
    let agent = begin(&sb);
    let port = wait(&agent, &api, "the Node's kubelet port again", WAIT, || {
        let p = api.node(NODE)?["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"].as_u64()? as u16;
        (p != port).then_some(p)
    });
    assert_eq!(verified_serving_cert(port, &api.ca_cert()).unwrap(), served);
    assert_eq!(csrs_of(&api, SERVING_SIGNER).len(), 1);
    drop(agent);
}

#[test]
fn a_node_restarted_with_an_expired_client_certificate_joins_again_with_its_bootstrap_token() {
    let Some(api) = FakeApiserver::start(NODE) else { return };
    let token = api.create_bootstrap_token(None, Duration::from_secs(3600));
    let bootstrap = api.bootstrap_kubeconfig(&token);
    let sb = Sandbox::new();
    // Months offline: the certificate in its kubeconfig expired an hour ago.
    let now = SystemTime::now();
    let (cert, key) = api.issue_cert(
        "system:node:testnode",
        &["system:nodes"],
        now - Duration::from_secs(400 * 86_400),
        now - Duration::from_secs(3600),
    );
    std::fs::create_dir_all(sb.work()).unwrap();
    let (cert_file, key_file) = (sb.work().join("old.crt"), sb.work().join("old.key"));
    std::fs::write(&cert_file, cert).unwrap();
    std::fs::write(&key_file, key).unwrap();
    let old = api.kubeconfig_for_cert("old-node", &cert_file, &key_file);
    std::fs::copy(&old, kubeconfig_path(&sb)).unwrap();
    let agent = start(&sb, &format!("bootstrap_kubeconfig = {bootstrap:?}\n"));
    wait(&agent, &api, "the Node Ready", WAIT, || ready(&api));
    let log = agent.log_text();
    assert!(log.contains("asking the cluster for a client certificate: the current one expired at"), "{log}");
    let csrs = csrs_of(&api, CLIENT_SIGNER);
    assert_eq!(csrs.len(), 1);
    assert!(csrs[0]["requester"]["username"].as_str().unwrap().starts_with("system:bootstrap:"));
    // The kubeconfig now names the new pair.
    let text = std::fs::read_to_string(kubeconfig_path(&sb)).unwrap();
    assert!(text.contains("kubelet-client-current.pem"), "{text}");
}
