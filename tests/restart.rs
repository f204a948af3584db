//! Agent restarts: `kill -9` of the agent must not restart any container; statuses come
//! back from the runtime's records, including exits that happened while the agent was down.

use crate::common;

use common::{container, manifest, wait_for, workload_pid, AgentProcess, Sandbox};
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

#[test]
fn kill_9_of_the_agent_restarts_no_container_and_recovers_statuses() {
    let sb = Sandbox::new();
    let marker = sb.work().join("exit-now");
    sb.write_manifest(
        "steady.yaml",
        &manifest("steady", "  containers:\n  - name: app\n    image: x\n    command: [sleep, '300']\n"),
    );
    sb.write_manifest(
        "sidecar.yaml",
        &manifest(
            "sidecar",
            "  initContainers:\n  - name: proxy\n    image: x\n    restartPolicy: Always\n    command: [sleep, '300']\n  containers:\n  - name: app\n    image: x\n    command: [sleep, '300']\n",
        ),
    );
    let oneshot = manifest(
        "oneshot",
        &format!(
            "  restartPolicy: Never\n  containers:\n  - name: job\n    image: x\n    command: [sh, -c, 'while [ ! -f {} ]; do sleep 0.05; done; exit 7']\n",
            marker.display()
        ),
    );
    sb.write_manifest("oneshot.yaml", &common::sharing_dir(&oneshot, &sb.work()));
    let agent = AgentProcess::start(&sb);
    let running = |a: &AgentProcess| {
        let pods = a.pods();
        (pods.len() == 3 && pods.iter().all(|p| p.status.as_ref().is_some_and(|s| s.phase == "Running")))
            .then_some(pods)
    };
    let before = wait_for("three running pods", T, || running(&agent));
    let ids = |pods: &[ferrolet::api::Pod]| -> Vec<(String, String, i32)> {
        let mut v: Vec<(String, String, i32)> = pods
            .iter()
            .flat_map(|p| {
                let s = p.status.clone().unwrap();
                s.container_statuses
                    .into_iter()
                    .chain(s.init_container_statuses)
                    .map(|c| (c.name, c.container_id, c.restart_count))
            })
            .collect();
        v.sort();
        v
    };
    let before_ids = ids(&before);
    let pids: Vec<i32> = before_ids.iter().map(|(_, id, _)| workload_pid(&sb.state(), id).unwrap()).collect();
    agent.kill9();

    // While the agent is down, the one-shot job exits with its own code.
    std::fs::write(&marker, "").unwrap();
    std::thread::sleep(Duration::from_millis(500));

    let agent = AgentProcess::start(&sb);
    let pod =
        wait_for("the job's exit", T, || agent.pod("oneshot").filter(|p| p.status.as_ref().unwrap().phase == "Failed"));
    let t = container(&pod, "job").unwrap().state.terminated.clone().unwrap();
    assert_eq!((t.exit_code, t.reason.as_str(), container(&pod, "job").unwrap().restart_count), (7, "Error", 0));
    let after = agent.pods();
    let steady: Vec<_> = after.iter().filter(|p| p.metadata.name != "oneshot-testnode").cloned().collect();
    assert!(steady.iter().all(|p| p.status.as_ref().unwrap().phase == "Running"));
    let after_ids = ids(&after);
    for ((name, id, restarts), pid) in before_ids.iter().zip(&pids) {
        if name == "job" {
            continue;
        }
        assert!(after_ids.contains(&(name.clone(), id.clone(), *restarts)), "{name} kept its container {id}");
        assert_eq!(workload_pid(&sb.state(), id), Some(*pid), "{name} kept its process");
        assert!(ferrolet::base::procs::process_alive(*pid, None));
    }
    let start_before =
        before.iter().find(|p| p.metadata.name == "steady-testnode").unwrap().status.clone().unwrap().start_time;
    let start_after =
        after.iter().find(|p| p.metadata.name == "steady-testnode").unwrap().status.clone().unwrap().start_time;
    assert_eq!(start_before, start_after, "start time comes from the runtime's records");
}

#[test]
fn sigterm_stops_the_agent_in_order_and_leaves_workloads_running() {
    let sb = Sandbox::new();
    sb.write_manifest(
        "steady.yaml",
        &manifest("steady", "  containers:\n  - name: app\n    image: x\n    command: [sleep, '300']\n"),
    );
    let agent = AgentProcess::start(&sb);
    let pod = wait_for("running", T, || agent.pod("steady").filter(|p| p.status.as_ref().unwrap().phase == "Running"));
    let pid = workload_pid(&sb.state(), &container(&pod, "app").unwrap().container_id).unwrap();
    let log = agent.log.clone();
    let status = agent.terminate();
    assert!(status.success(), "orderly exit: {status:?}");
    assert!(std::fs::read_to_string(log).unwrap().contains("agent: stopped"));
    assert!(ferrolet::base::procs::process_alive(pid, None), "the workload outlives the agent");

    // `ferrolet drain` then stops it and removes the pod's records and logs.
    let out = std::process::Command::new(common::ferrolet_bin())
        .arg("drain")
        .arg("--state-dir")
        .arg(sb.state())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("drained 1 pod(s) from {}", sb.state().display()));
    assert!(!ferrolet::base::procs::process_alive(pid, None));
    assert_eq!(std::fs::read_dir(sb.state().join("runtime/sandboxes")).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(sb.state().join("logs")).unwrap().count(), 0);
}

#[test]
fn a_second_agent_on_the_same_state_directory_is_refused() {
    let sb = Sandbox::new();
    let _agent = AgentProcess::start(&sb);
    let out = std::process::Command::new(common::ferrolet_bin())
        .args(["run", "--listen", "127.0.0.1:0", "--manifest-dir"])
        .arg(sb.manifests())
        .arg("--state-dir")
        .arg(sb.state())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is running with this state directory"), "{err}");
    assert!(err.contains("ferrolet.lock"), "names the lock file: {err}");
}

#[test]
fn a_manifest_removed_while_the_agent_was_down_is_terminated_on_restart() {
    let sb = Sandbox::new();
    sb.write_manifest("gone.yaml", &manifest("gone", "  terminationGracePeriodSeconds: 2\n  containers:\n  - name: app\n    image: x\n    command: [sh, -c, 'trap \"\" TERM; sleep 300']\n"));
    sb.write_manifest(
        "kept.yaml",
        &manifest("kept", "  containers:\n  - name: app\n    image: x\n    command: [sleep, '300']\n"),
    );
    let agent = AgentProcess::start(&sb);
    let pods = wait_for("both running", T, || {
        let pods = agent.pods();
        (pods.len() == 2 && pods.iter().all(|p| p.status.as_ref().unwrap().phase == "Running")).then_some(pods)
    });
    let pid_of = |name: &str| {
        let p = pods.iter().find(|p| p.metadata.name == format!("{name}-testnode")).unwrap();
        workload_pid(&sb.state(), &container(p, "app").unwrap().container_id).unwrap()
    };
    let (gone, kept) = (pid_of("gone"), pid_of("kept"));
    agent.kill9();
    std::fs::remove_file(sb.manifests().join("gone.yaml")).unwrap();
    let agent = AgentProcess::start(&sb);
    wait_for("the removed pod to be stopped", T, || (!ferrolet::base::procs::process_alive(gone, None)).then_some(()));
    wait_for("the removed pod to be gone", T, || agent.pod("gone").is_none().then_some(()));
    assert!(agent.log_text().contains("that no source wants; terminating it"));
    assert!(ferrolet::base::procs::process_alive(kept, None), "the other pod was not touched");
    assert_eq!(agent.pods().len(), 1);
}
