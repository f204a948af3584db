//! The process runtime against real processes: shims, logs, stop with grace, exits, exec,
//! OOM detection, and re-adoption by a fresh runtime object.

use crate::common;

use common::{ferrolet_bin, wait_for, Sandbox};
use ferrolet::node::runtime::process::ProcessRuntime;
use ferrolet::node::runtime::{ContainerConfig, ContainerInfo, ContainerRuntime, ContainerState};
use std::time::{Duration, Instant};

fn runtime(sb: &Sandbox) -> ProcessRuntime {
    common::process_runtime(sb)
}

fn sandbox(rt: &ProcessRuntime, sb: &Sandbox) -> String {
    common::pod_sandbox(rt, sb)
}

fn config(sb: &Sandbox, name: &str, script: &str) -> ContainerConfig {
    ContainerConfig { env: vec![("GREETING".into(), "hi there".into())], ..common::sh_container(sb, name, script) }
}

fn info(rt: &ProcessRuntime, id: &str) -> ContainerInfo {
    rt.list_containers().unwrap().into_iter().find(|c| c.id == id).unwrap()
}

fn wait_exit(rt: &ProcessRuntime, id: &str, timeout: Duration) -> ContainerInfo {
    wait_for("the container to exit", timeout, || Some(info(rt, id)).filter(|i| i.state == ContainerState::Exited))
}

fn run(rt: &ProcessRuntime, sb: &Sandbox, s: &str, name: &str, script: &str) -> String {
    let id = rt.create_container(s, &config(sb, name, script)).unwrap();
    rt.start_container(&id).unwrap();
    id
}

#[test]
fn a_container_runs_in_its_own_session_with_env_workdir_and_cri_logs() {
    let sb = Sandbox::new();
    let rt = runtime(&sb);
    let s = sandbox(&rt, &sb);
    let mut cfg = config(&sb, "app", "echo \"$GREETING from $(pwd)\"; echo oops >&2; exit 0");
    cfg.working_dir = sb.work().display().to_string();
    let id = rt.create_container(&s, &cfg).unwrap();
    assert_eq!(info(&rt, &id).state, ContainerState::Created);
    rt.start_container(&id).unwrap();
    let done = wait_exit(&rt, &id, Duration::from_secs(10));
    assert_eq!((done.exit_code, done.reason.as_str()), (0, "Completed"));
    assert!(done.started_at.unwrap() <= done.finished_at.unwrap());
    let log = std::fs::read_to_string(&cfg.log_path).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    let out = lines.iter().find(|l| l.contains(" stdout ")).unwrap();
    let (ts, rest) = out.split_once(' ').unwrap();
    assert!(ferrolet::base::timefmt::parse_rfc3339(ts).is_some(), "{ts}");
    assert_eq!(rest, format!("stdout F hi there from {}", sb.work().display()));
    assert!(lines.iter().any(|l| l.ends_with(" stderr F oops")));
}

#[test]
fn the_workload_leads_its_own_session_and_process_group() {
    let sb = Sandbox::new();
    let rt = runtime(&sb);
    let s = sandbox(&rt, &sb);
    let id = run(&rt, &sb, &s, "app", "sleep 30");
    let pid = wait_for("a pid", Duration::from_secs(5), || info(&rt, &id).pid);
    // SAFETY: plain queries about a process.
    let (pgid, sid) = unsafe { (libc::getpgid(pid), libc::getsid(pid)) };
    assert_eq!((pgid, sid), (pid, pid));
    rt.stop_container(&id, Duration::from_secs(5)).unwrap();
    wait_exit(&rt, &id, Duration::from_secs(10));
}

#[test]
fn exit_codes_and_signals_map_to_kubernetes_reasons() {
    let sb = Sandbox::new();
    let rt = runtime(&sb);
    let s = sandbox(&rt, &sb);
    let failed = run(&rt, &sb, &s, "failed", "exit 3");
    let killed = run(&rt, &sb, &s, "killed", "kill -9 $$");
    let f = wait_exit(&rt, &failed, Duration::from_secs(10));
    assert_eq!((f.exit_code, f.reason.as_str()), (3, "Error"));
    let k = wait_exit(&rt, &killed, Duration::from_secs(10));
    assert_eq!((k.exit_code, k.reason.as_str()), (137, "Error"));
}

#[test]
fn a_missing_executable_is_a_start_error_recorded_as_an_exit() {
    let sb = Sandbox::new();
    let rt = runtime(&sb);
    let s = sandbox(&rt, &sb);
    let mut cfg = config(&sb, "app", "");
    cfg.argv = vec!["/no/such/binary".into()];
    let id = rt.create_container(&s, &cfg).unwrap();
    let err = rt.start_container(&id).unwrap_err().to_string();
    assert!(err.contains("/no/such/binary"), "{err}");
    let i = info(&rt, &id);
    assert_eq!((i.state, i.exit_code, i.reason.as_str()), (ContainerState::Exited, 128, "StartError"));
    let mut no_command = config(&sb, "x", "");
    no_command.argv.clear();
    let err = rt.create_container(&s, &no_command).unwrap_err().to_string();
    assert!(err.contains("needs `command`"), "{err}");
}

#[test]
fn stop_gives_a_trapping_process_its_grace_and_kills_one_that_ignores_sigterm() {
    let sb = Sandbox::new();
    let rt = runtime(&sb);
    let s = sandbox(&rt, &sb);
    let polite = run(&rt, &sb, &s, "polite", "trap 'sleep 1; exit 0' TERM; while true; do sleep 0.1; done");
    let stubborn = run(&rt, &sb, &s, "stubborn", "trap '' TERM; while true; do sleep 0.1; done");
    std::thread::sleep(Duration::from_millis(300)); // let the shells install their traps
    let asked = Instant::now();
    rt.stop_container(&polite, Duration::from_secs(10)).unwrap();
    rt.stop_container(&stubborn, Duration::from_secs(2)).unwrap();
    let p = wait_exit(&rt, &polite, Duration::from_secs(10));
    let polite_took = asked.elapsed();
    assert_eq!((p.exit_code, p.reason.as_str()), (0, "Completed"), "the trap ran and exited cleanly");
    assert!(polite_took >= Duration::from_millis(900), "the trap's own sleep ran: {polite_took:?}");
    let k = wait_exit(&rt, &stubborn, Duration::from_secs(10));
    let stubborn_took = asked.elapsed();
    assert_eq!(k.exit_code, 137, "SIGKILLed after the grace period");
    assert!(stubborn_took >= Duration::from_secs(2), "not killed before its grace period: {stubborn_took:?}");
}

#[test]
fn exec_runs_with_the_container_env_and_enforces_its_timeout() {
    let sb = Sandbox::new();
    let rt = runtime(&sb);
    let s = sandbox(&rt, &sb);
    let id = run(&rt, &sb, &s, "app", "sleep 30");
    let sh = |script: &str| vec!["sh".to_string(), "-c".to_string(), script.to_string()];
    let r = rt.exec_sync(&id, &sh("echo $GREETING; echo err >&2; exit 4"), Duration::from_secs(5)).unwrap();
    assert_eq!((r.exit_code, r.timed_out), (4, false));
    assert_eq!(String::from_utf8_lossy(&r.stdout), "hi there\n");
    assert_eq!(String::from_utf8_lossy(&r.stderr), "err\n");
    let r = rt.exec_sync(&id, &sh("sleep 20"), Duration::from_millis(500)).unwrap();
    assert!(r.timed_out, "killed at its timeout, not waited for: {r:?}");
    let r = rt.exec_sync(&id, &["/no/such/probe".to_string()], Duration::from_secs(1)).unwrap();
    assert_eq!(r.exit_code, 126);
    rt.stop_container(&id, Duration::from_secs(2)).unwrap();
    wait_exit(&rt, &id, Duration::from_secs(10));
}

#[test]
fn a_fresh_runtime_adopts_running_containers_and_sees_exits_that_happened_meanwhile() {
    let sb = Sandbox::new();
    let marker = sb.work().join("go");
    let (s, long, short, pid) = {
        let rt = runtime(&sb);
        let s = sandbox(&rt, &sb);
        let long = run(&rt, &sb, &s, "long", "sleep 30");
        // `short` sees the marker in the test's directory, shared with it.
        let script = format!("while [ ! -f {} ]; do sleep 0.05; done; exit 7", marker.display());
        let cfg =
            ContainerConfig { mounts: vec![common::shared_dir_mount(&sb.work())], ..config(&sb, "short", &script) };
        let short = rt.create_container(&s, &cfg).unwrap();
        rt.start_container(&short).unwrap();
        let pid = wait_for("a pid", Duration::from_secs(5), || info(&rt, &long).pid);
        (s, long, short, pid)
        // The runtime object (the agent's view) is dropped here; the shims live on.
    };
    std::fs::write(&marker, "").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let rt = runtime(&sb);
    let l = info(&rt, &long);
    assert_eq!((l.state, l.pid), (ContainerState::Running, Some(pid)), "same process, not restarted");
    let e = wait_exit(&rt, &short, Duration::from_secs(10));
    assert_eq!((e.exit_code, e.reason.as_str()), (7, "Error"));
    assert_eq!(rt.list_pod_sandboxes().unwrap()[0].id, s);
    rt.remove_pod_sandbox(&s).unwrap();
    assert!(rt.list_containers().unwrap().is_empty());
}

#[test]
fn logs_rotate_by_size_keeping_max_files() {
    let sb = Sandbox::new();
    let rt = ProcessRuntime::new(&sb.state().join("runtime"), &ferrolet_bin(), 8192, 3).unwrap();
    let s = sandbox(&rt, &sb);
    let id = run(&rt, &sb, &s, "chatty", "i=0; while [ $i -lt 2000 ]; do echo line $i; i=$((i+1)); done");
    wait_exit(&rt, &id, Duration::from_secs(20));
    let log = sb.state().join("logs/p/chatty/0.log");
    let rotated = ferrolet::node::runtime::logrotate::rotated_files(&log);
    assert_eq!(rotated.len(), 2, "{rotated:?}");
    assert!(std::fs::metadata(&log).unwrap().len() <= 8192);
    assert!(std::fs::read_to_string(&log).unwrap().trim_end().ends_with("stdout F line 1999"));
}

#[test]
fn a_container_gets_its_own_cgroup_and_an_oom_kill_there_is_reported_as_oomkilled() {
    use ferrolet::node::cm::cgroupfs::{detect, CgroupVersion};
    let driver = match detect(std::path::Path::new("/proc/self/mountinfo"), Some(CgroupVersion::V1)) {
        Ok(d) => d,
        Err(e) => return common::skip(&format!("no cgroup v1 here: {}", ferrolet::base::errors::Chain(&e))),
    };
    let parent = format!("/ferrolet-test-oom-{}", std::process::id());
    if let Err(e) = driver.create(&parent) {
        return common::skip(&format!(
            "cannot create cgroup {parent} (needs root): {}",
            ferrolet::base::errors::Chain(&e)
        ));
    }
    let driver: std::sync::Arc<dyn ferrolet::node::cm::cgroupfs::CgroupDriver> = std::sync::Arc::from(driver);
    let sb = Sandbox::new();
    let rt = runtime(&sb).with_cgroups(driver.clone());
    let s = sandbox(&rt, &sb);
    let mut cfg = config(&sb, "hog", "exec tail /dev/zero");
    let files = [("memory.limit_in_bytes".to_string(), "33554432".to_string())].into_iter().collect();
    cfg.linux =
        Some(ferrolet::node::cm::LinuxContainerConfig { cgroup_parent: parent.clone(), files, oom_score_adj: 0 });
    let id = rt.create_container(&s, &cfg).unwrap();
    let container_cgroup = format!("{parent}/hog");
    assert!(driver.exists(&container_cgroup));
    rt.start_container(&id).unwrap();
    let e = wait_exit(&rt, &id, Duration::from_secs(30));
    assert!(!driver.exists(&container_cgroup), "the shim removed the container cgroup");
    let _ = driver.destroy(&parent);
    assert_eq!((e.exit_code, e.reason.as_str()), (137, "OOMKilled"));
}
