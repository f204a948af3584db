//! Pods started side by side on the real containerd of `tests/cri/up.sh` (the pod workers,
//! `src/pods/workers.rs`): pods written at once all run, each with one sandbox and one
//! container, each pod's runtime calls asked in order; and a pod deleted while its sandbox
//! is being made is removed once the sandbox answers, leaving nothing behind. No timing is
//! asserted (speed is `benches/cri.rs`' `at-once`). Without the harness each test skips.

use crate::common;

use common::cri::{busybox, client, CriNode};
use common::{container, manifest, wait_for, AgentProcess};
use ferrolet::api::Pod;
use ferrolet::node::runtime::labels;
use ferrolet::proto::cri::{ContainerFilter, PodSandbox, PodSandboxFilter};
use std::collections::HashMap;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// A host-network pod running `sleep`, with the short grace period of the benchmark's.
fn sleeper(name: &str) -> String {
    let spec = format!(
        "  hostNetwork: true\n  terminationGracePeriodSeconds: 2\n  containers:\n  - name: c\n    image: {}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, '3600']\n",
        busybox()
    );
    manifest(name, &spec)
}

/// Every label selector of this node's objects in the runtime (whatever their log
/// directory: a removed pod's is gone).
fn this_node(node: &CriNode) -> HashMap<String, String> {
    HashMap::from([
        (labels::MANAGED_BY.to_string(), labels::MANAGED_BY_FERROLET.to_string()),
        (labels::NODE.to_string(), node.node.clone()),
    ])
}

/// This node's sandboxes, of any pod, running or not.
fn sandboxes(node: &CriNode) -> Vec<PodSandbox> {
    let mut filter = PodSandboxFilter::new();
    filter.set_label_selector(this_node(node));
    client(&node.endpoint).list_pod_sandbox(filter).unwrap()
}

/// The uids of this node's containers, one per container.
fn container_pods(node: &CriNode) -> Vec<String> {
    let mut filter = ContainerFilter::new();
    filter.set_label_selector(this_node(node));
    let listed = client(&node.endpoint).list_containers(filter).unwrap();
    listed.iter().map(|c| c.labels()[labels::POD_UID].clone()).collect()
}

/// Pod `name` once its container runs.
fn running(node: &CriNode, agent: &AgentProcess, name: &str) -> Pod {
    wait_for(&format!("pod {name}'s container running"), WAIT, || {
        node.pod(agent, name).filter(|p| container(p, "c").is_some_and(|c| c.state.running.is_some()))
    })
}

/// The uid of pod `name`, from the agent's log line that added it.
fn uid_of(node: &CriNode, agent: &AgentProcess, name: &str) -> String {
    let added = format!("pods: pod default/{name}-{} added (uid ", node.node);
    wait_for(&format!("pod {name} added"), WAIT, || {
        let log = agent.log_text();
        let line = log.lines().find(|l| l.contains(&added))?;
        Some(line.rsplit("(uid ").next()?.trim_end_matches(')').to_string())
    })
}

/// The index of the first line of `log` that has every one of `parts`.
fn line_of(log: &str, parts: &[&str]) -> Option<usize> {
    log.lines().position(|l| parts.iter().all(|p| l.contains(p)))
}

#[test]
fn pods_written_at_once_all_run_each_with_one_sandbox_its_calls_asked_in_order() {
    let Some(node) = CriNode::new() else { return };
    const PODS: usize = 8;
    let names: Vec<String> = (0..PODS).map(|i| format!("burst{i}")).collect();
    // Written before the agent starts: its first sync finds them all.
    for name in &names {
        node.sb.write_manifest(&format!("{name}.yaml"), &sleeper(name));
    }
    let agent = node.start();
    for name in &names {
        let p = running(&node, &agent, name);
        node.own(&p.metadata.uid);
        assert_eq!(container(&p, "c").unwrap().restart_count, 0, "{name}");
    }
    // One sandbox and one container each: no call was asked twice for a pod whose work was
    // in flight (the relist every 200 ms sees each pod half-made, for a while).
    let per_pod = |uids: Vec<String>| {
        let mut n: HashMap<String, usize> = HashMap::new();
        uids.into_iter().for_each(|u| *n.entry(u).or_default() += 1);
        n
    };
    let sandboxes = per_pod(sandboxes(&node).iter().map(|s| s.metadata().uid().to_string()).collect());
    assert_eq!(sandboxes.len(), PODS, "{sandboxes:?}");
    assert!(sandboxes.values().all(|n| *n == 1), "one sandbox per pod: {sandboxes:?}");
    let containers = per_pod(container_pods(&node));
    assert!(containers.len() == PODS && containers.values().all(|n| *n == 1), "{containers:?}");
    // Each pod's calls were asked once each, in order: its sandbox, then its container.
    let log = agent.log_text();
    for name in &names {
        let pod = format!("pod default/{name}-{}:", node.node);
        let asked: Vec<&str> = log.lines().filter(|l| l.contains(&pod) && l.contains("asked of the runtime")).collect();
        assert_eq!(asked.len(), 2, "{asked:#?}");
        assert!(asked[0].contains("a sandbox asked") && asked[1].contains("1 container start(s) asked"), "{asked:#?}");
    }
}

#[test]
fn a_pod_deleted_while_its_sandbox_is_being_made_is_removed_after_it_and_nothing_is_left() {
    let Some(node) = CriNode::new() else { return };
    // Four deleted pods among six: each is deleted as soon as its sandbox is asked of the
    // runtime, while the workers make it (a sandbox takes 0.1 s or more; the deletion
    // reaches the pod manager in some 30 ms).
    let (gone, kept) = (["gone0", "gone1", "gone2", "gone3"], ["kept0", "kept1"]);
    for name in gone.iter().chain(&kept) {
        node.sb.write_manifest(&format!("{name}.yaml"), &sleeper(name));
    }
    let agent = node.start();
    // Each is deleted as soon as its sandbox is asked, in whatever order they are: the log
    // is looked at every 5 ms (`wait_for`'s 50 ms would use up much of the window).
    let mut left: Vec<&str> = gone.to_vec();
    let deadline = std::time::Instant::now() + WAIT;
    while !left.is_empty() {
        let log = agent.log_text();
        left.retain(|name| {
            let key = format!("pod default/{name}-{}:", node.node);
            if line_of(&log, &[&key, "a sandbox asked of the runtime"]).is_none() {
                return true;
            }
            std::fs::remove_file(node.sb.manifests().join(format!("{name}.yaml"))).unwrap();
            false
        });
        assert!(std::time::Instant::now() < deadline, "never asked for the sandboxes of {left:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    let uids: Vec<String> = gone.iter().map(|name| uid_of(&node, &agent, name)).collect();
    for name in kept {
        node.own(&running(&node, &agent, name).metadata.uid);
    }
    for (name, uid) in gone.iter().zip(&uids) {
        node.own(uid);
        wait_for(&format!("{name} removed"), WAIT, || node.pod(&agent, name).is_none().then_some(()));
    }
    let log = agent.log_text();
    // The deletion came while the sandbox was being made (for one at least: the test's
    // point), and the removal was asked only once it was made.
    let mut raced = 0;
    for name in gone {
        let pod = format!("pod default/{name}-{}", node.node);
        let deleted = line_of(&log, &[&pod, "removed from its source"]).expect("the deletion is logged");
        let made = line_of(&log, &[&format!("{pod}: sandbox"), "made"]).expect("its sandbox answered");
        let removal = line_of(&log, &[&format!("{pod}:"), "its removal asked"]).expect("its removal asked");
        assert!(made < removal, "{pod}: the removal was asked before its sandbox was made");
        raced += usize::from(deleted < made);
    }
    assert!(raced > 0, "no pod was deleted while its sandbox was being made; the agent's log:\n{log}");
    // Nothing was left for the orphan sweep to find: the pod manager removed each sandbox itself.
    assert!(!log.contains("that no source wants"), "an orphan was found:\n{log}");
    // Only the kept pods are in the runtime; nothing of the deleted ones.
    let left: Vec<String> = sandboxes(&node).iter().map(|s| s.metadata().name().to_string()).collect();
    assert_eq!(left.len(), kept.len(), "{left:?}");
    let containers = container_pods(&node);
    assert!(uids.iter().all(|u| !containers.contains(u)), "a container of a deleted pod is left");
    // Nor their pod cgroups, in any hierarchy (runc makes them in every one).
    let mounts = ferrolet::node::cm::cgroupfs::Mounts::read(std::path::Path::new("/proc/self/mountinfo")).unwrap();
    for uid in &uids {
        let under_root = format!("{}/kubepods/besteffort/pod{uid}", node.cgroup_root.trim_start_matches('/'));
        let copies: Vec<std::path::PathBuf> =
            mounts.all.iter().map(|m| m.join(&under_root)).filter(|d| d.exists()).collect();
        assert!(copies.is_empty(), "pod cgroup left in {copies:?}");
    }
}
