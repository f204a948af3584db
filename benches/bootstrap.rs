//! `make bench`: joining a cluster with a bootstrap token, measured on a real `ferrolet run`
//! (release build) against the fake kube-apiserver of the tests, which approves kubelet
//! client CSRs at once (as kube-controller-manager's approver does) and signs them with its
//! test CA. Prints numbers; asserts nothing.
//!
//! - the time from the start of a node that has only a bootstrap kubeconfig to its Node
//!   Ready in the apiserver (five fresh nodes: min, p50, max), and to its certificate
//! - what one renewal of the client certificate costs the apiserver: the requests the node
//!   makes for it (a 2-minute signing duration, so one falls due within 80 s)

mod support;

use std::time::{Duration, Instant};
use support::common::apiserver::FakeApiserver;
use support::Agent;

const NODE: &str = "bench";

fn ready(api: &FakeApiserver) -> bool {
    api.node(NODE).is_some_and(|n| {
        n["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
    })
}

fn wait(what: &str, within: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < within, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
    t.elapsed()
}

fn main() {
    let Some(api) = FakeApiserver::start(NODE) else {
        println!("bootstrap benchmark skipped: no test venv (run tests/apiserver/setup.sh)");
        return;
    };
    println!("ferrolet TLS bootstrap benchmark ({}, release build)", support::bin().display());
    let token = api.create_bootstrap_token(None, Duration::from_secs(3600));
    let bootstrap = api.bootstrap_kubeconfig(&token);
    let mut to_ready = Vec::new();
    for run in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join(format!("n{run}"));
        std::fs::create_dir_all(work.join("manifests")).unwrap();
        let extra = format!(
            "[apiserver]\nkubeconfig = {:?}\nbootstrap_kubeconfig = {bootstrap:?}\nkept_key = {:?}\n",
            work.join("kubelet.conf"),
            work.join("kept.key")
        );
        let t = Instant::now();
        let (agent, _) = Agent::start_with(&work, &extra);
        wait("the client certificate", Duration::from_secs(60), || {
            work.join("state/pki/kubelet-client-current.pem").exists()
        });
        let cert = t.elapsed();
        wait("the Node Ready", Duration::from_secs(60), || ready(&api));
        let took = t.elapsed();
        println!("  node {run}: certificate after {cert:?}, Node Ready after {took:?}");
        to_ready.push(took);
        drop(agent);
        api.delete_object(&format!("/api/v1/nodes/{NODE}"));
    }
    to_ready.sort();
    println!(
        "start to Node Ready with only a bootstrap token (5 nodes): min {:?}, p50 {:?}, max {:?}",
        to_ready[0], to_ready[2], to_ready[4]
    );

    // One renewal: what the node asks of the apiserver for it.
    api.set_signing_duration(Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("r");
    std::fs::create_dir_all(work.join("manifests")).unwrap();
    let extra = format!(
        "[apiserver]\nkubeconfig = {:?}\nbootstrap_kubeconfig = {bootstrap:?}\nkept_key = {:?}\n",
        work.join("kubelet.conf"),
        work.join("kept.key")
    );
    let (agent, _) = Agent::start_with(&work, &extra);
    wait("the Node Ready", Duration::from_secs(60), || ready(&api));
    let from = api.requests().last().map_or(0, |r| r.seq);
    let renewed = |api: &FakeApiserver| {
        api.csrs()
            .into_iter()
            .any(|c| c["requester"]["username"] == "system:node:bench" && c["certificate"].is_object())
    };
    let t = Instant::now();
    wait("a renewal", Duration::from_secs(150), || renewed(&api));
    // The node looks again at most 0.25 s after filing: let it see the certificate.
    std::thread::sleep(Duration::from_secs(2));
    let csr_requests: Vec<_> = api
        .requests()
        .into_iter()
        .filter(|r| r.seq > from && r.user == "system:node:bench")
        // The CSR API, and the new pair's trial (the node's own Node: nothing else GETs it).
        .filter(|r| {
            r.path.contains("certificatesigningrequests") || (r.method == "GET" && r.path == "/api/v1/nodes/bench")
        })
        .collect();
    // A 2-minute certificate is backdated 5 minutes by the signer: a renewal's deadline may
    // fall before it was signed, and a second renewal follow at once.
    let renewals = csr_requests.iter().filter(|r| r.method == "POST").count().max(1);
    println!(
        "client certificate renewals (the first due {:?} after joining): {renewals}, {} requests, {:.1} each ({})",
        t.elapsed(),
        csr_requests.len(),
        csr_requests.len() as f64 / renewals as f64,
        csr_requests.iter().map(|r| format!("{} {} {}", r.method, r.path, r.status)).collect::<Vec<_>>().join(", ")
    );
    drop(agent);
}
