//! The CRI side of the integration tests: the harness's containerd (`tests/cri/up.sh`, which
//! `make test` runs and whose endpoint it passes as `FERROLET_CRI_ENDPOINT`), and `CriNode`,
//! a real `ferrolet run` on `runtime = "cri"` that removes what it made when dropped.

use super::{AgentProcess, Sandbox};
use ferrolet::node::runtime::cri::{CriClient, CriRuntime};
use ferrolet::node::runtime::{
    labels, ContainerConfig, ContainerInfo, ContainerRuntime, ContainerState, SandboxConfig,
};
use ferrolet::proto::cri::{ContainerFilter, PodSandbox, PodSandboxFilter};
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The harness's containerd, or `None` after saying why the test skips.
pub fn endpoint() -> Option<String> {
    match std::env::var("FERROLET_CRI_ENDPOINT") {
        Ok(e) if !e.is_empty() => Some(e),
        _ => {
            super::skip(
                "FERROLET_CRI_ENDPOINT is not set: no test containerd (make test starts one with tests/cri/up.sh)",
            );
            None
        }
    }
}

/// A value `tests/cri/up.sh` writes beside the endpoint.
pub fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set (tests/cri/up.sh writes it with the endpoint)"))
}

/// A gRPC environment for a test's client.
pub fn grpc_env() -> Arc<grpcio::Environment> {
    Arc::new(grpcio::EnvBuilder::new().cq_count(1).build())
}

/// A client of the runtime at `endpoint`.
pub fn client(endpoint: &str) -> CriClient {
    CriClient::connect(endpoint, Duration::from_secs(10), grpc_env()).unwrap()
}

/// The busybox image the harness imported.
pub fn busybox() -> String {
    var("FERROLET_CRI_BUSYBOX_IMAGE")
}

/// A test agent on the CRI runtime: its state, manifests and pod logs in a temporary
/// directory, its pod cgroups under the harness's cgroup parent. Dropping it stops the
/// agent, then removes every sandbox whose logs are in its directory (so only its own pods)
/// and its cgroup root.
pub struct CriNode {
    pub sb: Sandbox,
    /// Its node name, its own: agents of different nodes sharing a runtime never see each
    /// other's pods.
    pub node: String,
    pub endpoint: String,
    pub cgroup_root: String,
    pub port: u16,
}

impl CriNode {
    /// A node on the harness's containerd, or `None` (the test skips).
    pub fn new() -> Option<CriNode> {
        Self::on(endpoint()?)
    }

    /// A node on the containerd at `endpoint`.
    pub fn on(endpoint: String) -> Option<CriNode> {
        // Under the harness's shared mount, so what the agent mounts there reaches containerd.
        let sb = match std::env::var_os("FERROLET_CRI_NODES") {
            Some(nodes) => Sandbox::new_in(Path::new(&nodes)),
            None => Sandbox::new(),
        };
        let name = sb.dir.path().file_name().unwrap().to_string_lossy().trim_start_matches('.').to_string();
        let cgroup_root = format!("{}/{name}", var("FERROLET_CRI_CGROUP"));
        let node = format!("cri-{}", name.to_lowercase().trim_start_matches("tmp"));
        Some(CriNode { sb, node, endpoint, cgroup_root, port: super::free_port() })
    }

    /// Where pod log directories go.
    pub fn pod_logs(&self) -> PathBuf {
        self.sb.dir.path().join("pods")
    }

    /// The agent's configuration. The image filesystem is this machine's disk, shared with
    /// everything else on it: its eviction threshold (under 15 % free, the eviction manager
    /// has every unused image removed) is off, or a full disk would change what the tests
    /// see. Its decisions are tested against a fake runtime.
    pub fn config_text(&self) -> String {
        format!(
            "node_name = {:?}\nnode_ip = \"127.0.0.1\"\nstate_dir = {:?}\nmanifest_dir = {:?}\n\
             manifest_check_interval = \"200ms\"\nsync_frequency = \"200ms\"\nruntime = \"cri\"\n\
             container_runtime_endpoint = {:?}\n[api]\nlisten = \"127.0.0.1:{}\"\n[server]\nlisten = \"127.0.0.1:0\"\n[logs]\npod_logs_dir = {:?}\n\
             [devices]\nplugin_dir = \"\"\n{}[cgroups]\nroot = {:?}\n",
            self.node,
            self.sb.state(),
            self.sb.manifests(),
            self.endpoint,
            self.port,
            self.pod_logs(),
            super::EVICTION,
            self.cgroup_root
        )
    }

    /// Starts `ferrolet run` on this node's configuration.
    pub fn start(&self) -> AgentProcess {
        self.start_with(|text| text, "debug")
    }

    /// Starts `ferrolet run` on this node's configuration as changed by `edit`, logging at
    /// `log_level`.
    pub fn start_with(&self, edit: impl FnOnce(String) -> String, log_level: &str) -> AgentProcess {
        let cfg = self.sb.dir.path().join("ferrolet.toml");
        std::fs::write(&cfg, edit(self.config_text())).unwrap();
        let log = self.sb.dir.path().join(format!("agent-{}.log", super::free_port()));
        AgentProcess::spawn(&cfg, self.port, log_level, log, Duration::from_millis(50))
    }

    /// Static pod `name` of this node, as its agent reports it.
    pub fn pod(&self, agent: &AgentProcess, name: &str) -> Option<ferrolet::api::Pod> {
        agent.pods().into_iter().find(|p| p.metadata.name == format!("{name}-{}", self.node))
    }

    /// The sandboxes of this node's pods (their logs are under its directory).
    pub fn sandboxes(&self) -> Vec<PodSandbox> {
        let mut filter = PodSandboxFilter::new();
        filter.set_label_selector(managed());
        let all = client(&self.endpoint).list_pod_sandbox(filter).unwrap();
        let ours = |s: &PodSandbox| {
            let uid = s.metadata().uid();
            std::fs::read_dir(self.pod_logs()).is_ok_and(|mut d| {
                d.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().ends_with(&format!("_{uid}"))))
            }) || self.sb.dir.path().join("uids").join(uid).exists()
        };
        all.into_iter().filter(ours).collect()
    }

    /// The containers of pod `uid`, with their labels.
    pub fn containers(&self, uid: &str) -> Vec<ferrolet::proto::cri::Container> {
        let mut filter = ContainerFilter::new();
        let mut selector = managed();
        selector.insert(labels::POD_UID.into(), uid.into());
        filter.set_label_selector(selector);
        client(&self.endpoint).list_containers(filter).unwrap()
    }

    /// Remembers a pod uid as this node's (for cleanup after its log directory is gone).
    pub fn own(&self, uid: &str) {
        let dir = self.sb.dir.path().join("uids");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(uid), "").unwrap();
    }

    /// A v1 cgroup directory of this node (`controller`, path under its root).
    pub fn cgroup_dir(&self, controller: &str, path: &str) -> PathBuf {
        Path::new("/sys/fs/cgroup").join(controller).join(self.cgroup_root.trim_start_matches('/')).join(path)
    }
}

fn managed() -> HashMap<String, String> {
    HashMap::from([(labels::MANAGED_BY.to_string(), labels::MANAGED_BY_FERROLET.to_string())])
}

impl Drop for CriNode {
    fn drop(&mut self) {
        let c = client(&self.endpoint);
        for s in self.sandboxes() {
            let _ = c.stop_pod_sandbox(s.id());
            let _ = c.remove_pod_sandbox(s.id());
        }
        if let Ok(driver) = ferrolet::node::cm::cgroupfs::detect(Path::new("/proc/self/mountinfo"), None) {
            let _ = driver.destroy(&self.cgroup_root);
        }
        if let Ok(mounts) = ferrolet::node::cm::cgroupfs::Mounts::read(Path::new("/proc/self/mountinfo")) {
            ferrolet::node::cm::cgroupfs::remove_empty_everywhere(&mounts, &self.cgroup_root);
        }
        use ferrolet::node::cm::ownership::{cgroup_root_lock_path, LOCK_DIR};
        let _ = std::fs::remove_file(cgroup_root_lock_path(Path::new(LOCK_DIR), &self.cgroup_root));
    }
}

/// A host-network test pod made through a `CriRuntime` directly (no agent), in the
/// harness's cgroup parent, its logs in a temporary directory; removed (with what is in
/// it) when dropped, also when the test fails.
pub struct TestPod<'a> {
    pub rt: &'a CriRuntime,
    pub sandbox: SandboxConfig,
    pub id: String,
    _logs: tempfile::TempDir,
}

impl<'a> TestPod<'a> {
    pub fn run(rt: &'a CriRuntime, name: &str) -> TestPod<'a> {
        let logs = tempfile::tempdir().unwrap();
        let uid = ferrolet::base::random::random_id();
        let sandbox = SandboxConfig {
            pod_uid: uid.clone(),
            pod_name: name.into(),
            namespace: "ferrolet-test".into(),
            log_directory: logs.path().to_path_buf(),
            termination_grace_period_seconds: 1,
            host_network: true,
            cgroup_parent: format!("{}/pod{uid}", var("FERROLET_CRI_CGROUP")),
            ..Default::default()
        };
        let id = rt.run_pod_sandbox(&sandbox).unwrap();
        TestPod { rt, sandbox, id, _logs: logs }
    }

    /// A busybox container `name` running `argv`, instance `attempt`, logging to
    /// `<name>/<attempt>.log` as the pod manager lays logs out, with kubelet's labels.
    pub fn config(&self, name: &str, attempt: u32, argv: &[&str]) -> ContainerConfig {
        let dir = self.sandbox.log_directory.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        ContainerConfig {
            name: name.into(),
            attempt,
            image: busybox(),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            log_path: dir.join(format!("{attempt}.log")),
            labels: BTreeMap::from([
                (labels::POD_UID.to_string(), self.sandbox.pod_uid.clone()),
                (labels::POD_NAME.to_string(), self.sandbox.pod_name.clone()),
                (labels::POD_NAMESPACE.to_string(), self.sandbox.namespace.clone()),
                (labels::CONTAINER_NAME.to_string(), name.into()),
            ]),
            ..Default::default()
        }
    }

    /// Creates and starts a container; returns its id.
    pub fn start(&self, config: &ContainerConfig) -> String {
        let id = self.rt.create_container(&self.id, config).unwrap();
        self.rt.start_container(&id).unwrap();
        id
    }

    /// `config(name, 0, argv)`, started.
    pub fn container(&self, name: &str, argv: &[&str]) -> String {
        self.start(&self.config(name, 0, argv))
    }

    pub fn wait_state(&self, id: &str, state: ContainerState) -> ContainerInfo {
        super::wait_for(&format!("container {id} {state:?}"), Duration::from_secs(20), || {
            self.rt.list_containers().unwrap().into_iter().find(|c| c.id == id && c.state == state)
        })
    }
}

impl Drop for TestPod<'_> {
    fn drop(&mut self) {
        let _ = self.rt.stop_pod_sandbox(&self.id);
        let _ = self.rt.remove_pod_sandbox(&self.id);
        remove_cgroup(&self.sandbox.cgroup_parent);
    }
}

/// runc leaves the pod cgroup behind (the agent's cm removes it): rmdir each hierarchy's
/// copy, best effort.
pub fn remove_cgroup(path: &str) {
    if let Ok(mounts) = ferrolet::node::cm::cgroupfs::Mounts::read(Path::new("/proc/self/mountinfo")) {
        ferrolet::node::cm::cgroupfs::remove_empty_everywhere(&mounts, path);
    }
}

/// A containerd of this test's own (the harness's, on other paths), so restarting it
/// disturbs no other test; torn down when dropped.
pub struct OwnContainerd {
    base: String,
    cgroup: String,
}

impl OwnContainerd {
    pub fn start() -> OwnContainerd {
        let id = ferrolet::base::random::random_id();
        let own = OwnContainerd {
            base: format!("/tmp/ferrolet-cri-{}", &id[..8]),
            cgroup: format!("{}-{}", var("FERROLET_CRI_CGROUP"), &id[..8]),
        };
        own.script("up.sh");
        own
    }

    /// Breaks its pod network as a missing CNI plugin does: the network's plugin type is
    /// one that does not exist (containerd reads its CNI directory again by itself).
    pub fn break_cni(&self) {
        let dir = format!("{}/cni/net.d", self.base);
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let text = std::fs::read_to_string(e.path()).unwrap();
            std::fs::write(e.path(), text.replace("\"type\": \"bridge\"", "\"type\": \"ferrolet-missing-plugin\""))
                .unwrap();
        }
    }

    /// A value of its `env` file (`FERROLET_CRI_SNAPSHOTTER`, …).
    pub fn env(&self, key: &str) -> String {
        let text = std::fs::read_to_string(format!("{}/env", self.base)).unwrap();
        let prefix = format!("{key}=");
        text.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_else(|| panic!("no {key} in its env")).to_string()
    }

    /// Imports the image tarball `tar` (`tests/cri/mkimage.py`'s) into its CRI namespace.
    pub fn import(&self, tar: &Path) {
        let out = std::process::Command::new("ctr")
            .args(["--address", &format!("{}/containerd.sock", self.base), "-n", "k8s.io", "images", "import"])
            .args(["--snapshotter", &self.env("FERROLET_CRI_SNAPSHOTTER")])
            .arg(tar)
            .output()
            .unwrap();
        assert!(out.status.success(), "ctr import: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Runs the harness's script `name` (`up.sh`, `down.sh`) on its paths.
    pub fn script(&self, name: &str) {
        let out = std::process::Command::new("bash")
            .arg(format!("{}/tests/cri/{name}", env!("CARGO_MANIFEST_DIR")))
            .env("FERROLET_CRI_BASE", &self.base)
            .env("FERROLET_CRI_CGROUP", &self.cgroup)
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && !text.contains("CRI tests will be skipped"), "{name}: {text}");
    }

    pub fn endpoint(&self) -> String {
        format!("unix://{}/containerd.sock", self.base)
    }

    /// Stops containerd (SIGTERM to the pid the harness recorded; its shims and containers
    /// live on) and waits until it is gone.
    pub fn stop(&self) {
        let pid: i32 =
            std::fs::read_to_string(format!("{}/containerd.pid", self.base)).unwrap().trim().parse().unwrap();
        // SAFETY: signalling the containerd this test started (its pid file).
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        super::wait_for("containerd to exit", Duration::from_secs(30), || {
            (!std::path::Path::new(&format!("/proc/{pid}")).exists()).then_some(())
        });
    }
}

impl Drop for OwnContainerd {
    fn drop(&mut self) {
        self.script("down.sh");
    }
}
