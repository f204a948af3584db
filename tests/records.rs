//! The process runtime's records under damage: oversized, truncated or corrupt files, and
//! interrupted starts. Real shims and workloads; each test has its own state directory.

use crate::common;

use common::{wait_for, Sandbox};
use ferrolet::node::runtime::process::{ExitRecord, ProcessRuntime, ShimState};
use ferrolet::node::runtime::{ContainerConfig, ContainerInfo, ContainerRuntime, ContainerState};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

fn runtime(sb: &Sandbox) -> ProcessRuntime {
    common::process_runtime(sb)
}

fn sandbox(rt: &ProcessRuntime, sb: &Sandbox) -> String {
    common::pod_sandbox(rt, sb)
}

fn config(sb: &Sandbox, name: &str, script: &str) -> ContainerConfig {
    common::sh_container(sb, name, script)
}

fn find(rt: &ProcessRuntime, id: &str) -> Option<ContainerInfo> {
    rt.list_containers().unwrap().into_iter().find(|c| c.id == id)
}

fn dir(sb: &Sandbox, id: &str) -> PathBuf {
    sb.state().join("runtime/containers").join(id)
}

fn wait_exit(rt: &ProcessRuntime, id: &str) -> ContainerInfo {
    wait_for("the container to exit", T, || find(rt, id).filter(|i| i.state == ContainerState::Exited))
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Gives a wrongly aimed signal time to land, then checks the bystander still runs.
fn assert_not_signalled(other: &mut std::process::Child) {
    std::thread::sleep(Duration::from_millis(200));
    assert!(other.try_wait().unwrap().is_none(), "the unrelated process group was not signalled");
}

/// A process group of the test's own, standing in for an unrelated process that reused a
/// container's recorded pid. Start times are in clock ticks (10 ms): a reused pid is a
/// later process, so it starts a few ticks after the recorded one.
fn bystander() -> std::process::Child {
    std::thread::sleep(Duration::from_millis(50));
    std::process::Command::new("sleep").arg("30").process_group(0).spawn().unwrap()
}

#[test]
fn a_record_over_1_mib_starts_and_runs() {
    let sb = Sandbox::new();
    let rt = runtime(&sb);
    let s = sandbox(&rt, &sb);
    let mut cfg = config(&sb, "big", "test ${#V0} -eq 60000 && exit 0; exit 3");
    // 1.2 MB of env (20 values of 60 kB): a valid pod, and within the kernel's limits.
    cfg.env = (0..20).map(|i| (format!("V{i}"), "x".repeat(60_000))).collect();
    let id = rt.create_container(&s, &cfg).unwrap();
    assert!(std::fs::metadata(dir(&sb, &id).join("config.json")).unwrap().len() > 1 << 20);
    rt.start_container(&id).unwrap();
    let done = wait_exit(&rt, &id);
    assert_eq!((done.exit_code, done.reason.as_str()), (0, "Completed"), "{}", done.message);
}

#[test]
fn a_record_over_the_limit_is_a_clear_error_and_leaves_nothing_behind() {
    let sb = Sandbox::new();
    let rt = runtime(&sb);
    let s = sandbox(&rt, &sb);
    let mut cfg = config(&sb, "huge", "exit 0");
    cfg.env = (0..140).map(|i| (format!("V{i}"), "x".repeat(128_000))).collect();
    let err = rt.create_container(&s, &cfg).unwrap_err().to_string();
    assert!(err.contains("huge") && err.contains("over the limit of 16777216 bytes"), "{err}");
    let left = std::fs::read_dir(sb.state().join("runtime/containers")).unwrap().count();
    assert_eq!(left, 0, "no record is leaked");
}

#[test]
fn one_huge_argument_or_too_many_fail_with_argument_list_too_long() {
    let sb = Sandbox::new();
    let rt = runtime(&sb);
    let s = sandbox(&rt, &sb);
    let mut one = config(&sb, "one", "exit 0");
    one.argv.push("y".repeat(200_000));
    let id = rt.create_container(&s, &one).unwrap();
    let err = rt.start_container(&id).unwrap_err().to_string();
    assert!(err.contains("cannot start container one: argument list too long"), "{err}");
    assert!(err.contains("MAX_ARG_STRLEN (131072 bytes)"), "{err}");
    let i = find(&rt, &id).unwrap();
    assert_eq!((i.state, i.reason.as_str()), (ContainerState::Exited, "StartError"));
    assert!(i.message.contains("argument list too long"), "{}", i.message);

    let mut many = config(&sb, "many", "exit 0");
    many.argv.extend((0..100_000).map(|i| format!("argument-number-{i:06}")));
    let id = rt.create_container(&s, &many).unwrap();
    let err = rt.start_container(&id).unwrap_err().to_string();
    assert!(err.contains("argument list too long") && err.contains("ARG_MAX"), "{err}");
    assert!(!err.contains("EOF"), "{err}");
}

#[test]
fn start_errors_name_the_container_not_its_id() {
    let sb = Sandbox::new();
    let rt = runtime(&sb);
    let s = sandbox(&rt, &sb);
    let mut cfg = config(&sb, "web", "");
    cfg.argv = vec!["/no/such/binary".into()];
    let id = rt.create_container(&s, &cfg).unwrap();
    let err = rt.start_container(&id).unwrap_err().to_string();
    assert!(err.starts_with("cannot start container web: "), "{err}");
    assert!(!err.contains(&id), "{err}");
}

#[test]
fn a_damaged_exit_record_keeps_the_exit_and_signals_no_reused_pid() {
    let sb = Sandbox::new();
    let rt = runtime(&sb);
    let s = sandbox(&rt, &sb);
    let id = rt.create_container(&s, &config(&sb, "job", "exit 0")).unwrap();
    rt.start_container(&id).unwrap();
    wait_exit(&rt, &id);
    // The workload's pid now belongs to someone else, and exit.json is damaged.
    let mut other = bystander();
    let d = dir(&sb, &id);
    let mut state: ShimState = ferrolet::base::state_files::read_json(&d.join("state.json")).unwrap();
    state.pid = other.id() as i32;
    ferrolet::base::state_files::write_json(&d.join("state.json"), &state).unwrap();
    std::fs::write(d.join("exit.json"), "{\"exit_code\": 0, \"sig").unwrap();

    let fresh = runtime(&sb);
    let i = find(&fresh, &id).unwrap();
    assert_eq!((i.state, i.exit_code, i.reason.as_str()), (ContainerState::Exited, 0, "Completed"));
    assert_not_signalled(&mut other);

    // Both copies damaged: the exit is unknown, and still nothing is signalled.
    std::fs::write(d.join("exit.backup.json"), "garbage").unwrap();
    let fresh = runtime(&sb);
    let i = find(&fresh, &id).unwrap();
    assert_eq!((i.state, i.reason.as_str()), (ContainerState::Exited, "Unknown"));
    assert!(i.message.contains("exit.json"), "the parse error is kept: {}", i.message);
    assert_not_signalled(&mut other);
    other.kill().unwrap();
    other.wait().unwrap();
}

#[test]
fn a_lost_shim_never_kills_a_process_group_that_is_no_longer_its_workload() {
    let sb = Sandbox::new();
    let rt = runtime(&sb);
    let s = sandbox(&rt, &sb);
    let id = rt.create_container(&s, &config(&sb, "app", "sleep 30")).unwrap();
    rt.start_container(&id).unwrap();
    let d = dir(&sb, &id);
    let state: ShimState = wait_for("state", T, || ferrolet::base::state_files::read_json(&d.join("state.json")).ok());
    // The shim and its workload die without an exit record (kill -9 of both), and the pid
    // is reused by an unrelated process group.
    ferrolet::base::procs::kill_group(state.pid, libc::SIGKILL).unwrap();
    // SAFETY: signalling the shim this test started (pid from its own state file).
    unsafe { libc::kill(state.shim_pid, libc::SIGKILL) };
    wait_for("the shim to die", T, || {
        (!ferrolet::base::procs::process_alive(state.shim_pid, Some(state.shim_start_ticks))).then_some(())
    });
    let _ = std::fs::remove_file(d.join("exit.json"));
    let _ = std::fs::remove_file(d.join("exit.backup.json"));
    let mut other = bystander();
    let mut reused = state.clone();
    reused.pid = other.id() as i32;
    ferrolet::base::state_files::write_json(&d.join("state.json"), &reused).unwrap();

    let fresh = runtime(&sb);
    let i = find(&fresh, &id).unwrap();
    assert_eq!((i.state, i.reason.as_str()), (ContainerState::Exited, "Unknown"));
    assert_not_signalled(&mut other);
    other.kill().unwrap();
    other.wait().unwrap();
}

#[test]
fn a_damaged_state_record_of_a_running_container_still_shows_it_running() {
    let sb = Sandbox::new();
    let rt = runtime(&sb);
    let s = sandbox(&rt, &sb);
    let id = rt.create_container(&s, &config(&sb, "app", "sleep 30")).unwrap();
    rt.start_container(&id).unwrap();
    let d = dir(&sb, &id);
    let state: ShimState = wait_for("state", T, || ferrolet::base::state_files::read_json(&d.join("state.json")).ok());
    std::fs::write(d.join("state.json"), "{\"shim_pid\": 12").unwrap();
    let fresh = runtime(&sb);
    assert_eq!(find(&fresh, &id).unwrap().state, ContainerState::Running);
    // It can still be stopped (through the shim's own identity record).
    fresh.stop_container(&id, Duration::ZERO).unwrap();
    let done = wait_exit(&fresh, &id);
    assert_eq!(done.exit_code, 137);
    assert!(!ferrolet::base::procs::process_alive(state.pid, state.start_ticks));
}

#[test]
fn a_damaged_config_of_a_running_container_is_adopted_not_duplicated() {
    let sb = Sandbox::new();
    let rt = runtime(&sb);
    let s = sandbox(&rt, &sb);
    let id = rt.create_container(&s, &config(&sb, "app", "sleep 30")).unwrap();
    rt.start_container(&id).unwrap();
    let d = dir(&sb, &id);
    let state: ShimState = wait_for("state", T, || ferrolet::base::state_files::read_json(&d.join("state.json")).ok());
    let text = std::fs::read_to_string(d.join("config.json")).unwrap();
    std::fs::write(d.join("config.json"), &text[..text.len() / 2]).unwrap();
    let fresh = runtime(&sb);
    let i = find(&fresh, &id).expect("the running container is still listed");
    assert_eq!((i.state, i.pid, i.config.name.as_str()), (ContainerState::Running, Some(state.pid), "app"));
    assert_eq!(i.config.labels, rt.list_containers().unwrap()[0].config.labels);
}

#[test]
fn a_container_created_but_never_started_is_reported_created_with_no_shim() {
    let sb = Sandbox::new();
    let rt = runtime(&sb);
    let s = sandbox(&rt, &sb);
    // What a crash between writing config.json and spawning the shim leaves.
    let id = rt.create_container(&s, &config(&sb, "app", "sleep 30")).unwrap();
    drop(rt);
    let fresh = runtime(&sb);
    assert_eq!(find(&fresh, &id).unwrap().state, ContainerState::Created);
    // Removing it and creating it again works, and the new one runs.
    fresh.remove_container(&id).unwrap();
    let id2 = fresh.create_container(&s, &config(&sb, "app", "sleep 30")).unwrap();
    fresh.start_container(&id2).unwrap();
    assert_eq!(find(&fresh, &id2).unwrap().state, ContainerState::Running);
    fresh.stop_container(&id2, Duration::ZERO).unwrap();
    wait_exit(&fresh, &id2);
}

#[test]
fn damaged_records_are_moved_aside_once() {
    let sb = Sandbox::new();
    let rt = runtime(&sb);
    let s = sandbox(&rt, &sb);
    drop(rt);
    let root = sb.state().join("runtime");
    std::fs::create_dir_all(root.join("sandboxes/emptysandbox")).unwrap();
    std::fs::create_dir_all(root.join("sandboxes/badsandbox")).unwrap();
    std::fs::write(root.join("sandboxes/badsandbox/sandbox.json"), "{").unwrap();
    std::fs::create_dir_all(root.join("containers/badcontainer")).unwrap();
    std::fs::write(root.join("containers/badcontainer/config.json"), "\0\0\0").unwrap();
    std::fs::write(root.join("containers/notadir"), "x").unwrap();
    let fresh = runtime(&sb);
    let ids: Vec<String> = fresh.list_pod_sandboxes().unwrap().into_iter().map(|x| x.id).collect();
    assert_eq!(ids, vec![s]);
    assert!(fresh.list_containers().unwrap().is_empty());
    let q = fresh.take_quarantined();
    let mut kinds: Vec<(&str, &str)> = q.iter().map(|q| (q.kind, q.id.as_str())).collect();
    kinds.sort();
    let want = [
        ("container", "badcontainer"),
        ("container", "notadir"),
        ("sandbox", "badsandbox"),
        ("sandbox", "emptysandbox"),
    ];
    assert_eq!(kinds, want);
    assert!(q.iter().all(|q| q.moved_to.exists()));
    assert!(!root.join("containers/badcontainer").exists());
    // Once: the next relist finds nothing more to report.
    fresh.list_containers().unwrap();
    assert!(fresh.take_quarantined().is_empty());
}

#[test]
fn state_files_and_logs_are_private() {
    let sb = Sandbox::new();
    let rt = runtime(&sb);
    let s = sandbox(&rt, &sb);
    let mut cfg = config(&sb, "app", "echo secret");
    cfg.env = vec![("PASSWORD".into(), "hunter2".into())];
    let id = rt.create_container(&s, &cfg).unwrap();
    rt.start_container(&id).unwrap();
    wait_exit(&rt, &id);
    let d = dir(&sb, &id);
    // The exit is known from exit.backup.json; exit.json is the shim's last write.
    wait_for("the shim's last record", T, || d.join("exit.json").exists().then_some(()));
    for f in ["config.json", "state.json", "exit.json", "shim.log"] {
        assert_eq!(mode(&d.join(f)), 0o600, "{f}");
    }
    assert_eq!(mode(&d), 0o700);
    assert_eq!(mode(&sb.state().join("runtime")), 0o700);
    assert_eq!(mode(&cfg.log_path), 0o600, "container log");
    assert_eq!(mode(cfg.log_path.parent().unwrap()), 0o700, "container log dir");
    let _: ExitRecord = ferrolet::base::state_files::read_json(&d.join("exit.json")).unwrap();
}

/// A cgroup v2 tree of plain directories under a temp dir: enough for the runtime to record
/// a container's cgroup without root (nothing is ever joined to it).
struct FakeCgroups(PathBuf);

impl ferrolet::node::cm::cgroupfs::CgroupDriver for FakeCgroups {
    fn version(&self) -> ferrolet::node::cm::cgroupfs::CgroupVersion {
        ferrolet::node::cm::cgroupfs::CgroupVersion::V2
    }
    fn dirs(&self, path: &str) -> Vec<PathBuf> {
        vec![self.0.join(path.trim_start_matches('/'))]
    }
    fn dir_for(&self, path: &str, _file: &str) -> Option<PathBuf> {
        self.dirs(path).pop()
    }
    fn memory_dir(&self, _path: &str) -> Option<PathBuf> {
        None
    }
    fn enable_controllers(&self, _path: &str) -> Result<(), ferrolet::node::cm::cgroupfs::CgroupError> {
        Ok(())
    }
}

#[test]
fn removing_an_exited_instance_leaves_the_cgroup_of_the_next_instance_alone() {
    let sb = Sandbox::new();
    let cgroups = sb.dir.path().join("cgroupfs");
    let rt = runtime(&sb).with_cgroups(std::sync::Arc::new(FakeCgroups(cgroups.clone())));
    let s = sandbox(&rt, &sb);
    let mut cfg = config(&sb, "app", "exit 0");
    cfg.linux = Some(ferrolet::node::cm::LinuxContainerConfig {
        cgroup_parent: "/kubepods/podu1".into(),
        files: Default::default(),
        oom_score_adj: 0,
    });
    // The first instance exited (its shim removed the cgroup and recorded the exit) ...
    let old = rt.create_container(&s, &cfg).unwrap();
    let exit = ExitRecord {
        exit_code: 1,
        signal: None,
        reason: "Error".into(),
        message: String::new(),
        finished_at: std::time::SystemTime::now(),
    };
    ferrolet::base::state_files::write_json(&dir(&sb, &old).join("exit.json"), &exit).unwrap();
    // ... and the restarted one runs in the cgroup of the same name.
    cfg.attempt = 1;
    let _new = rt.create_container(&s, &cfg).unwrap();
    let cg = cgroups.join("kubepods/podu1/app");
    let mut workload = std::process::Command::new("sleep").arg("30").process_group(0).spawn().unwrap();
    std::fs::write(cg.join("cgroup.procs"), format!("{}\n", workload.id())).unwrap();

    // Garbage collection of the dead instance.
    rt.remove_container(&old).unwrap();
    assert!(!dir(&sb, &old).exists());
    std::thread::sleep(Duration::from_millis(100));
    let alive = workload.try_wait().unwrap().is_none();
    let _ = workload.kill();
    let _ = workload.wait();
    assert!(alive, "the running instance's process was killed");
    assert!(cg.is_dir(), "the running instance's cgroup was removed");
}

#[test]
fn a_container_whose_shim_does_not_exit_is_not_removed_from_under_it() {
    let sb = Sandbox::new();
    let rt = runtime(&sb);
    let s = sandbox(&rt, &sb);
    let id = rt.create_container(&s, &config(&sb, "app", "sleep 30")).unwrap();
    rt.start_container(&id).unwrap();
    let d = dir(&sb, &id);
    let state: ShimState = wait_for("state", T, || ferrolet::base::state_files::read_json(&d.join("state.json")).ok());
    // A shim that cannot act (stopped here; stuck in the kernel on a real node).
    assert!(ferrolet::base::procs::signal_verified(state.shim_pid, state.shim_start_ticks, libc::SIGSTOP).unwrap());
    let e = rt.remove_container(&id).unwrap_err();
    let shown = ferrolet::base::errors::Chain(&e).to_string();
    assert!(d.join("state.json").exists(), "the record of a live shim was removed");
    assert!(shown.contains("for the shim of container app to exit failed: timed out"), "{shown}");
    // Once the shim can run again it finishes the stop, and the removal succeeds.
    assert!(ferrolet::base::procs::signal_verified(state.shim_pid, state.shim_start_ticks, libc::SIGCONT).unwrap());
    wait_for("the removal", T, || rt.remove_container(&id).ok());
    assert!(!d.exists());
}

#[test]
fn an_unidentifiable_container_whose_shim_died_has_its_workload_killed_before_it_is_moved_aside() {
    let sb = Sandbox::new();
    let rt = runtime(&sb);
    let s = sandbox(&rt, &sb);
    let id = rt.create_container(&s, &config(&sb, "app", "sleep 30")).unwrap();
    rt.start_container(&id).unwrap();
    let d = dir(&sb, &id);
    let state: ShimState = wait_for("state", T, || ferrolet::base::state_files::read_json(&d.join("state.json")).ok());
    // The shim dies (kill -9) and both records that name the container are damaged.
    assert!(ferrolet::base::procs::signal_verified(state.shim_pid, state.shim_start_ticks, libc::SIGKILL).unwrap());
    wait_for("the shim to die", T, || {
        (!ferrolet::base::procs::process_alive(state.shim_pid, Some(state.shim_start_ticks))).then_some(())
    });
    std::fs::write(d.join("config.json"), "{").unwrap();
    std::fs::write(d.join("shim.json"), "{").unwrap();
    let fresh = runtime(&sb);
    assert!(find(&fresh, &id).is_none());
    assert_eq!(fresh.take_quarantined().len(), 1);
    let ticks = state.start_ticks.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while ferrolet::base::procs::process_alive(state.pid, Some(ticks)) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let alive = ferrolet::base::procs::process_alive(state.pid, Some(ticks));
    if alive {
        let _ = ferrolet::base::procs::kill_group_verified(state.pid, ticks, libc::SIGKILL);
    }
    assert!(!alive, "the workload of the quarantined container still runs, unrecorded");
}
