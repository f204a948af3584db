//! Images against a real containerd (started on private paths by `tests/cri/up.sh`, which
//! imports `$FERROLET_CRI_BUSYBOX_IMAGE`): the image service of `CriRuntime`, and the agent's
//! pull policy seen through its API (`/pods`, `/events`). Without `FERROLET_CRI_ENDPOINT`
//! each test skips with the reason.

use crate::common;

use common::cri::{client, endpoint, var, CriNode};
use common::{container, manifest, wait_for, AgentProcess};
use ferrolet::api::{Event, EventList, Pod};
use ferrolet::base::manager::Cancel;
use ferrolet::base::manager::Health;
use ferrolet::node::runtime::cri::CriRuntime;
use ferrolet::node::runtime::{ContainerRuntime, RuntimeError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);
/// An image no registry serves: port 1 refuses at once, so its pull fails fast.
const UNREACHABLE: &str = "127.0.0.1:1/nothing:1";

/// The node the tests' own runtimes make their objects for.
const NODE: &str = "cri-images-test";

fn runtime(endpoint: &str) -> CriRuntime {
    CriRuntime::new(client(endpoint), &var("FERROLET_CRI_PAUSE_IMAGE"), NODE, &Health::default())
}

#[test]
fn the_imported_busybox_has_a_status_a_place_in_the_list_and_an_image_filesystem() {
    let Some(endpoint) = endpoint() else { return };
    let rt = runtime(&endpoint);
    let busybox = var("FERROLET_CRI_BUSYBOX_IMAGE");
    let image = rt.image_status(&busybox).unwrap().expect("the harness imported busybox");
    assert!(image.id.starts_with("sha256:"), "{image:?}");
    assert!(image.size > 0, "{image:?}");
    assert!(image.repo_tags.iter().any(|t| t.ends_with(busybox.trim_start_matches("localhost/"))), "{image:?}");
    // Its id names it too.
    assert_eq!(rt.image_status(&image.id).unwrap().map(|i| i.id), Some(image.id.clone()));
    let listed = rt.list_images().unwrap();
    assert!(listed.iter().any(|i| i.id == image.id), "{listed:?}");
    assert!(listed.iter().any(|i| i.repo_tags.contains(&var("FERROLET_CRI_PAUSE_IMAGE"))), "{listed:?}");
    let fs = rt.image_fs_info().unwrap();
    assert!(!fs.is_empty(), "containerd reports its image filesystem");
    assert!(fs[0].mount_point.is_absolute() && fs[0].used_bytes > 0, "{fs:?}");
    assert_eq!(rt.image_status("localhost/ferrolet-absent:1").unwrap(), None);
}

#[test]
fn a_pull_from_nowhere_fails_fast_naming_the_image_and_a_cancelled_pull_says_so() {
    let Some(endpoint) = endpoint() else { return };
    let rt = runtime(&endpoint);
    let (_keep, mut cancel) = Cancel::pair();
    let e = rt.pull_image(UNREACHABLE, None, Duration::from_secs(30), &mut cancel).unwrap_err();
    let text = ferrolet::base::errors::Chain(&e).to_string();
    assert!(
        text.starts_with(&format!("image {UNREACHABLE}: container runtime endpoint {endpoint}: PullImage")),
        "{text}"
    );
    // Cancelled before it starts: the call is never waited for.
    let (owner, mut cancel) = Cancel::pair();
    drop(owner);
    let e = rt.pull_image(UNREACHABLE, None, Duration::from_secs(30), &mut cancel).unwrap_err();
    assert!(matches!(e, RuntimeError::Cancelled { .. }), "{e:?}");
}

/// A `ferrolet run` on the harness's containerd (`CriNode`: a node name, state and cgroup
/// root of its own, removed at the end).
struct CriAgent {
    agent: Option<AgentProcess>,
    node: CriNode,
}

impl CriAgent {
    fn start() -> Option<CriAgent> {
        let node = CriNode::new()?;
        let agent = node.start_with(
            |t| t.replace("runtime = \"cri\"\n", "runtime = \"cri\"\nimage_pull_timeout = \"30s\"\n"),
            "debug",
        );
        Some(CriAgent { agent: Some(agent), node })
    }

    fn api(&self) -> &AgentProcess {
        self.agent.as_ref().unwrap()
    }

    fn pod(&self, name: &str) -> Option<Pod> {
        self.node.pod(self.api(), name)
    }

    /// Container `c` of pod `name` waits with this reason (and returns its message).
    fn waits(&self, name: &str, c: &str, reason: &str) -> String {
        wait_for(&format!("{name}/{c} waiting as {reason}"), T, || {
            let pod = self.pod(name)?;
            let w = container(&pod, c)?.state.waiting.clone()?;
            (w.reason == reason).then_some(w.message)
        })
    }

    fn runs(&self, name: &str, c: &str) {
        wait_for(&format!("{name}/{c} running"), T, || {
            let pod = self.pod(name)?;
            container(&pod, c)?.state.running.as_ref().map(|_| ())
        });
    }

    /// Events about pod `name` (static pods are named `<name>-<node>`), oldest first.
    fn events(&self, name: &str) -> Vec<Event> {
        let body = self.api().get("/events").unwrap();
        let list: EventList = serde_json::from_str(&body).unwrap();
        let pod = format!("{name}-{}", self.node.node);
        list.items.into_iter().filter(|e| e.involved_object.name == pod).collect()
    }

    /// (reason, message) of pod `name`'s events with `reason`.
    fn with_reason(&self, name: &str, reason: &str) -> Vec<String> {
        self.events(name).into_iter().filter(|e| e.reason == reason).map(|e| e.message).collect()
    }
}

impl Drop for CriAgent {
    fn drop(&mut self) {
        if let Some(a) = self.agent.take() {
            let _ = a.terminate();
        }
    }
}

/// Pod cgroup directories (`pod<uid>`) under `root` in the hierarchies the agent manages
/// (`cgroupfs::CONTROLLERS` on cgroup v1, the unified tree on v2). On v1 runc also makes the
/// pod cgroup in the other hierarchies and leaves it after `RemovePodSandbox`
/// (tests/cri/README.md); `tests/cri/down.sh` removes those.
fn pod_cgroups(root: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                if e.file_name().to_string_lossy().starts_with("pod") {
                    out.push(p.clone());
                }
                walk(&p, out);
            }
        }
    }
    let base = Path::new("/sys/fs/cgroup");
    let trees: Vec<PathBuf> = if base.join("cgroup.controllers").exists() {
        vec![base.into()]
    } else {
        ferrolet::node::cm::cgroupfs::CONTROLLERS.iter().map(|c| base.join(c)).collect()
    };
    let mut out = Vec::new();
    for tree in trees {
        walk(&tree.join(root.trim_start_matches('/')), &mut out);
    }
    out
}

fn host_pod(image: &str, policy: Option<&str>) -> String {
    let policy = policy.map(|p| format!("    imagePullPolicy: {p}\n")).unwrap_or_default();
    format!(
        "  hostNetwork: true\n  terminationGracePeriodSeconds: 2\n  containers:\n  - name: app\n    image: {image}\n{policy}    command: [\"sleep\", \"3600\"]\n"
    )
}

#[test]
fn the_agent_follows_the_pull_policy_with_kubelets_events_and_leaves_nothing_behind() {
    let Some(mut a) = CriAgent::start() else { return };
    let endpoint = a.node.endpoint.clone();
    let busybox = var("FERROLET_CRI_BUSYBOX_IMAGE");
    a.node.sb.write_manifest("present.yaml", &manifest("present", &host_pod(&busybox, Some("IfNotPresent"))));
    a.node.sb.write_manifest("never.yaml", &manifest("never", &host_pod("localhost/ferrolet-absent:1", Some("Never"))));
    a.node.sb.write_manifest("nowhere.yaml", &manifest("nowhere", &host_pod(UNREACHABLE, None)));
    // `:latest` defaults to Always; containerd 1.6 cannot pull an imported localhost/ image,
    // so this pull fails and the present image is used (ferrolet's difference from kubelet).
    a.node.sb.write_manifest("latest.yaml", &manifest("latest", &host_pod(&busybox, None)));

    // IfNotPresent with the image present: started without a pull.
    a.runs("present", "app");
    assert_eq!(
        a.with_reason("present", "Pulled"),
        [format!("Container image \"{busybox}\" already present on machine")]
    );
    assert!(a.with_reason("present", "Pulling").is_empty());

    // Never and absent.
    let message = a.waits("never", "app", "ErrImageNeverPull");
    assert_eq!(message, "Container image \"localhost/ferrolet-absent:1\" is not present with pull policy of Never");
    wait_for("the ErrImageNeverPull event", T, || {
        (!a.with_reason("never", "ErrImageNeverPull").is_empty()).then_some(())
    });

    // A pull that fails: ErrImagePull, then ImagePullBackOff with the failure in its message.
    wait_for("the failed pull", T, || {
        let failed = a.with_reason("nowhere", "Failed");
        failed.iter().any(|m| m.starts_with(&format!("Failed to pull image \"{UNREACHABLE}\": "))).then_some(())
    });
    let message = a.waits("nowhere", "app", "ImagePullBackOff");
    assert!(message.starts_with(&format!("Back-off pulling image \"{UNREACHABLE}\": ErrImagePull: ")), "{message}");
    assert_eq!(a.with_reason("nowhere", "Pulling"), [format!("Pulling image \"{UNREACHABLE}\"")]);
    assert_eq!(a.with_reason("nowhere", "BackOff"), [format!("Back-off pulling image \"{UNREACHABLE}\"")]);
    let errors = a.with_reason("nowhere", "Failed");
    assert!(errors.contains(&"Error: ErrImagePull".to_string()), "{errors:?}");
    assert!(errors.contains(&"Error: ImagePullBackOff".to_string()), "{errors:?}");

    // Always with the image present, the pull failing: it runs from the present image.
    a.runs("latest", "app");
    let pulled = a.with_reason("latest", "Pulled");
    assert_eq!(
        pulled,
        [format!("Container image \"{busybox}\" already present on machine; it is used, as the pull failed")]
    );

    // Every pod removed: no sandbox, no container, no pod cgroup is left.
    for f in ["present.yaml", "never.yaml", "nowhere.yaml", "latest.yaml"] {
        std::fs::remove_file(a.node.sb.manifests().join(f)).unwrap();
    }
    wait_for("every pod removed", T, || a.api().pods().is_empty().then_some(()));
    let rt = CriRuntime::new(client(&endpoint), &var("FERROLET_CRI_PAUSE_IMAGE"), &a.node.node, &Health::default());
    let started = Instant::now();
    let leftovers = || {
        let sandboxes = rt.list_pod_sandboxes().unwrap();
        let ours: Vec<_> = sandboxes.iter().filter(|s| s.config.namespace == "default").map(|s| s.id.clone()).collect();
        let containers: Vec<_> = rt.list_containers().unwrap().into_iter().map(|c| c.id).collect();
        (ours, containers, pod_cgroups(&a.node.cgroup_root))
    };
    let mut left = leftovers();
    while left != (vec![], vec![], vec![]) && started.elapsed() < T {
        std::thread::sleep(Duration::from_millis(200));
        left = leftovers();
    }
    assert_eq!(
        left,
        (vec![], vec![], vec![]),
        "sandboxes, containers and pod cgroups left after {:?}",
        started.elapsed()
    );
    // The agent stops in order: its pull threads end with it.
    let status = a.agent.take().unwrap().terminate();
    assert!(status.success(), "{status:?}");
}
