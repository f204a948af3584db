//! A full disk under the state directory (a small tmpfs of the test's own, filled by the
//! test): on the process runtime a workload that writes keeps running (its output is
//! dropped and counted), an exit made meanwhile is recorded as it was (in a link, which
//! needs no data block), `drain` works, and the agent says the condition rather than a
//! warning a second. Needs root (the mount); skips without it.

use crate::common;

use common::{container, ferrolet_bin, manifest, wait_for, AgentProcess, Sandbox};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);

/// A tmpfs of `size` at `dir`; on drop, whatever ran from it is killed, then it goes.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0755"), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(status.success(), "mount a tmpfs on {}", dir.display());
        Tmpfs(dir.into())
    }

    /// Fills it up; returns the file that holds the space.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let block = vec![0u8; 64 << 10];
        while f.write_all(&block).is_ok() {}
        let _ = f.write_all(&[0]);
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        common::kill_everything(&self.0);
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn is_root() -> bool {
    common::root_or_skip("mounting a small tmpfs for the state directory needs root")
}

#[test]
fn a_full_state_directory_kills_no_workload_and_loses_no_exit() {
    if !is_root() {
        return;
    }
    let sb = Sandbox::new();
    let fs = Tmpfs::mount(&sb.state(), "16m");
    sb.write_manifest(
        "talker.yaml",
        &manifest(
            "talker",
            "  containers:\n  - name: app\n    image: x\n    command: [sh, -c, 'while true; do echo talking; sleep 0.02; done']\n",
        ),
    );
    sb.write_manifest(
        "once.yaml",
        &manifest(
            "once",
            "  restartPolicy: Never\n  containers:\n  - name: app\n    image: x\n    command: [sh, -c, 'sleep 4; exit 3']\n",
        ),
    );
    let agent = AgentProcess::start(&sb);
    let running =
        |name: &str| agent.pod(name).and_then(|p| container(&p, "app").filter(|c| c.state.running.is_some()).cloned());
    wait_for("both running", T, || running("talker").and(running("once")));
    let filler = fs.fill();
    let full_at = Instant::now();
    // Full for longer than `once` runs: the agent answers throughout.
    while full_at.elapsed() < Duration::from_secs(8) {
        assert!(agent.get("/healthz").is_ok());
        std::thread::sleep(Duration::from_millis(500));
    }
    let talker = running("talker")
        .unwrap_or_else(|| panic!("the talker stopped: {:?}\n{}", agent.pod("talker"), agent.log_text()));
    assert_eq!(talker.restart_count, 0, "{talker:?}");
    // `once` exited on the full disk: its exit is there as it was.
    let once = wait_for("once's exit", T, || {
        agent.pod("once").and_then(|p| container(&p, "app").and_then(|c| c.state.terminated.clone()))
    });
    assert_eq!((once.exit_code, once.reason.as_str()), (3, "Error"), "{once:?}");
    std::fs::remove_file(&filler).unwrap();
    let talker = running("talker").expect("the talker still runs");
    assert_eq!(talker.restart_count, 0, "{talker:?}");
    let log = agent.log_text();
    let warnings = log.lines().filter(|l| l.contains("[WARN") || l.contains("[ERROR")).count();
    eprintln!("{warnings} warnings:\n{log}");
    assert!(warnings < 10, "{warnings} warnings for 8 s of a full disk");

    // Full again, the agent stopped: drain stops what runs.
    let _filler = fs.fill();
    assert!(agent.terminate().success());
    let out = std::process::Command::new(ferrolet_bin())
        .args(["drain", "--config"])
        .arg(sb.dir.path().join("ferrolet.toml"))
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("drained 2 pod(s)"), "{text}");
}
