//! `make hot-text`'s run, not part of `make bench`: what an agent on a device does most, for
//! etc/link/hot-text.py to order the static binary's code by. `FERROLET_BIN` is there a
//! wrapper that runs `ferrolet run` under qemu-user, which logs each block of code the
//! first time it runs (other commands, such as the clean-up's `drain`, run unlogged).
//!
//! The agent starts (logging at `info`, its default) and idles; a device plugin registers;
//! a pod that asks for one of its devices starts, with TCP startup, exec liveness and HTTP
//! readiness probes; `/pods`, `/metrics` and `/healthz` are read; the agent stops on SIGTERM.

mod support;

use std::process::Command;
use std::time::Duration;
use support::common::plugin::{Behaviour, TestPlugin};
use support::common::{manifest, wait_for, AgentProcess, Sandbox};

fn main() {
    let sb = Sandbox::new();
    let config = sb.dir.path().join("ferrolet.toml");
    let port = support::common::free_port();
    std::fs::write(&config, sb.config_text(port)).unwrap();
    let mut cmd = Command::new(support::bin());
    cmd.args(["run", "--config"]).arg(&config);
    let agent =
        AgentProcess::spawn_command(cmd, port, "info", sb.dir.path().join("agent.log"), Duration::from_millis(100));
    // Idle long enough for the periodic work (housekeeping, status and event ticks).
    std::thread::sleep(Duration::from_secs(10));

    let plugin =
        TestPlugin::start(&sb.plugin_dir(), "example.com/dev", "dev.sock", &["d0", "d1"], Behaviour::default());
    plugin.register().expect("the plugin registers");
    std::thread::sleep(Duration::from_secs(3));

    let spec = format!(
        "  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: none\n    command: [sleep, '3600']\n    resources:\n      limits:\n        example.com/dev: 1\n    startupProbe: {{tcpSocket: {{host: 127.0.0.1, port: {port}}}, periodSeconds: 1}}\n    livenessProbe: {{exec: {{command: ['true']}}, periodSeconds: 1}}\n    readinessProbe: {{httpGet: {{host: 127.0.0.1, port: {port}, path: /healthz}}, periodSeconds: 1}}\n"
    );
    sb.write_manifest("hot.yaml", &manifest("hot", &spec));
    wait_for("the pod to be ready", Duration::from_secs(120), || {
        let pod = agent.pod("hot")?;
        support::common::container(&pod, "c").filter(|c| c.ready).map(|_| ())
    });
    for path in ["/pods", "/metrics", "/healthz"] {
        agent.get(path).unwrap();
    }
    std::thread::sleep(Duration::from_secs(10));
    let status = agent.terminate();
    assert!(status.success(), "the agent's exit after SIGTERM: {status}");
    drop(plugin);
    println!("hot-text: the agent ran its course under {}", support::bin().display());
}
