//! SIGHUP with a real agent: the configuration file is read again, the run-time keys are
//! applied (log level, manifest directory, probe pool size, event limits); a file that
//! changes a key only a restart applies (an empty one among them) and a broken file change
//! nothing; a storm of SIGHUPs is a reload a second, of the file as it is then.

use crate::common;

use common::{manifest, wait_for, AgentProcess, Sandbox};
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

fn sleeper(name: &str) -> String {
    manifest(name, "  containers:\n  - name: app\n    image: x\n    command: [sleep, '300']\n")
}

fn hup(agent: &AgentProcess) {
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(agent.child.id() as i32, libc::SIGHUP) };
}

/// A sandbox whose manifest directory has pod `a`, and another directory with pod `b`.
fn two_manifest_dirs() -> (Sandbox, std::path::PathBuf) {
    let sb = Sandbox::new();
    sb.write_manifest("a.yaml", &sleeper("a"));
    let other = sb.dir.path().join("other-manifests");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("b.yaml"), sleeper("b")).unwrap();
    (sb, other)
}

#[test]
fn sighup_applies_the_run_time_keys_and_refuses_a_file_that_needs_a_restart_or_is_broken() {
    let (sb, other) = two_manifest_dirs();
    let cfg = sb.dir.path().join("ferrolet.toml");
    let agent = AgentProcess::start_with(&sb, |t| format!("log_level = \"info\"\n{t}"));
    wait_for("pod a", T, || agent.pod("a").filter(|p| p.status.as_ref().unwrap().phase == "Running"));
    assert!(!agent.log_text().contains("[DEBUG]"), "log_level wins over RUST_LOG=debug");

    let text = std::fs::read_to_string(&cfg).unwrap();
    let manifests = format!("manifest_dir = {:?}", sb.manifests());
    assert!(text.contains(&manifests), "{text}");
    let changed = text
        .replace("log_level = \"info\"", "log_level = \"debug\"")
        .replace(&manifests, &format!("manifest_dir = {other:?}"))
        + "[prober]\nmax_threads = 3\n[events]\nspam_burst = 5\n";
    // With a key only a restart applies, the whole file is refused.
    std::fs::write(&cfg, changed.replace("sync_frequency = \"200ms\"", "sync_frequency = \"300ms\"")).unwrap();
    hup(&agent);
    let log = wait_for("the refusal", T, || {
        let log = agent.log_text();
        log.contains("which only a restart applies").then_some(log)
    });
    assert!(log.contains("changes sync_frequency, which only a restart applies;"), "{log}");
    assert!(!log.contains("SIGHUP: applied"), "{log}");
    // An empty file is valid TOML, and no description of this agent either.
    std::fs::write(&cfg, "").unwrap();
    hup(&agent);
    let log = wait_for("the second refusal", T, || {
        let log = agent.log_text();
        (log.matches("which only a restart applies").count() == 2).then_some(log)
    });
    assert!(log.contains("node_name, server.listen, state_dir"), "{log}");
    assert!(agent.pod("a").is_some_and(|p| p.status.as_ref().unwrap().phase == "Running"), "pod a still runs");

    std::fs::write(&cfg, &changed).unwrap();
    hup(&agent);
    // The prober applies its part on its own thread, after the agent says what it applied.
    let log = wait_for("the reload", T, || {
        let log = agent.log_text();
        (log.contains("SIGHUP: applied") && log.contains("prober: at most")).then_some(log)
    });
    assert!(log.contains("SIGHUP: applied log_level, manifest_dir, prober.max_threads, events.spam_burst"), "{log}");
    assert!(log.contains("prober: at most 3 probe threads (was 8)"), "{log}");
    // The old directory's pod stops, the new one's starts.
    wait_for("pod b", T, || agent.pod("b").filter(|p| p.status.as_ref().unwrap().phase == "Running"));
    wait_for("pod a gone", T, || agent.pod("a").is_none().then_some(()));
    // The new directory is watched: a manifest written there starts at once. Its probe's
    // results are debug lines, which show from now on.
    let probed = "  containers:\n  - name: app\n    image: x\n    command: [sleep, '300']\n    readinessProbe:\n      exec:\n        command: ['true']\n      periodSeconds: 1\n";
    std::fs::write(other.join("c.yaml"), manifest("c", probed)).unwrap();
    wait_for("pod c", T, || agent.pod("c"));
    wait_for("a debug line", T, || agent.log_text().contains("[DEBUG] prober:").then_some(()));

    // A broken file: said, and nothing changes.
    std::fs::write(&cfg, "log_level = \"very loud\"\n").unwrap();
    hup(&agent);
    let log = wait_for("the refusal", T, || {
        let log = agent.log_text();
        log.contains("log_level: invalid value \"very loud\"").then_some(log)
    });
    assert!(log.lines().any(|l| l.contains("invalid value \"very loud\"") && l.ends_with("nothing changed")), "{log}");
    assert!(agent.get("/healthz").is_ok() && agent.pod("b").is_some());
}

#[test]
fn a_storm_of_sighups_is_one_reload_a_second_of_the_file_as_it_is_then() {
    let (sb, other) = two_manifest_dirs();
    let cfg = sb.dir.path().join("ferrolet.toml");
    let agent = AgentProcess::start(&sb);
    wait_for("pod a", T, || agent.pod("a").filter(|p| p.status.as_ref().unwrap().phase == "Running"));
    let text = std::fs::read_to_string(&cfg).unwrap();
    let (here, there) = (format!("manifest_dir = {:?}", sb.manifests()), format!("manifest_dir = {other:?}"));
    // 200 SIGHUPs in about 2 s, the directory flipped between each; the last names `other`.
    let started = std::time::Instant::now();
    for i in 0..200 {
        let dir = if i % 2 == 0 { &here } else { &there };
        let tmp = sb.dir.path().join("ferrolet.toml.tmp");
        std::fs::write(&tmp, text.replace(&here, dir)).unwrap();
        std::fs::rename(&tmp, &cfg).unwrap();
        hup(&agent);
        std::thread::sleep(Duration::from_millis(10));
    }
    let storm = started.elapsed();
    wait_for("pod b", T, || agent.pod("b").filter(|p| p.status.as_ref().unwrap().phase == "Running"));
    wait_for("pod a gone", T, || agent.pod("a").is_none().then_some(()));
    // The agent answered throughout, and reloaded about once a second, not 200 times.
    assert!(agent.get("/healthz").is_ok());
    let reloads = agent.log_text().matches("agent: SIGHUP: ").count();
    let most = storm.as_secs() as usize + 3;
    assert!((1..=most).contains(&reloads), "{reloads} reloads for a storm of {storm:?}");
}
