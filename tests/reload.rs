//! SIGHUP with a real agent: the configuration file is read again, the run-time keys are
//! applied (log level, manifest directory, probe pool size, event limits), a key that needs
//! a restart is named as such, and a broken file changes nothing.

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

#[test]
fn sighup_applies_the_run_time_keys_names_the_others_and_survives_a_broken_file() {
    let sb = Sandbox::new();
    sb.write_manifest("a.yaml", &sleeper("a"));
    let other = sb.dir.path().join("other-manifests");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("b.yaml"), sleeper("b")).unwrap();
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
        .replace("sync_frequency = \"200ms\"", "sync_frequency = \"300ms\"")
        + "[prober]\nmax_threads = 3\n[events]\nspam_burst = 5\n";
    std::fs::write(&cfg, changed).unwrap();
    hup(&agent);
    let log = wait_for("the reload", T, || {
        let log = agent.log_text();
        log.contains("SIGHUP: changed since the start").then_some(log)
    });
    assert!(log.contains("SIGHUP: applied log_level, manifest_dir, prober.max_threads, events.spam_burst"), "{log}");
    assert!(log.contains("taking effect at the next start: sync_frequency"), "{log}");
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
        log.contains("nothing changed").then_some(log)
    });
    assert!(log.contains("log_level: invalid value \"very loud\""), "{log}");
    assert!(agent.get("/healthz").is_ok() && agent.pod("b").is_some());
}
