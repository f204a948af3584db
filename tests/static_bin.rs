//! The smoke test of a binary `make static` built, for any of its targets: run only when
//! `FERROLET_STATIC_BIN` names it (CI builds nothing static: too slow for its time limit).
//! A foreign-architecture binary (aarch64, armv7) runs under qemu-user through the kernel's
//! binfmt_misc, as it must: the agent starts its container shims by executing itself again.
//!
//! Its code starts with the functions the agent runs (`.text.hot`, see etc/link/hot-text.py).
//! `ferrolet version`, then `ferrolet run` with one pod on the process runtime, `/healthz`
//! and `/pods` showing it running, then SIGTERM and an orderly exit.

use crate::common;

use common::{manifest, skip, wait_for, AgentProcess, Sandbox};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

#[test]
fn the_static_binary_says_its_version_runs_a_pod_and_stops() {
    let Some(bin) = std::env::var_os("FERROLET_STATIC_BIN") else {
        skip("FERROLET_STATIC_BIN is not set (`make static [TARGET=…]`, then FERROLET_STATIC_BIN=target/<target>/release/ferrolet)");
        return;
    };
    let bin = Path::new(&bin);
    let (machine, interp) = common::elf_machine_and_interp(bin)
        .unwrap_or_else(|| panic!("{} is not a little-endian ELF file", bin.display()));
    assert!(!interp, "{} has a program interpreter: it is not statically linked", bin.display());
    let arch = match machine {
        0x3e => "x86_64",
        0xb7 => "aarch64",
        0x28 => "arm",
        m => panic!("{}: unexpected ELF machine {m:#x}", bin.display()),
    };
    // `make static` links the functions the agent runs first into `.text.hot`
    // (etc/link/hot-text-<target>.ld): without it an idle agent has about 3 MiB more resident.
    let hot = common::elf_section_size(bin, ".text.hot").unwrap_or_else(|| {
        panic!("{}: no .text.hot section: not linked with etc/link/hot-text-<target>.ld", bin.display())
    });
    eprintln!("{arch}: .text.hot is {hot} bytes");
    let version = match Command::new(bin).arg("version").output() {
        Ok(out) => out,
        Err(e) if e.raw_os_error() == Some(libc::ENOEXEC) => {
            skip(&format!(
                "this machine cannot execute {arch} binaries: install qemu-user-static and enable its binfmt_misc entry (update-binfmts --enable qemu-{arch})"
            ));
            return;
        }
        Err(e) => panic!("{}: {e}", bin.display()),
    };
    let text = String::from_utf8_lossy(&version.stdout);
    assert!(version.status.success() && text.starts_with("ferrolet "), "version: {text}");
    eprintln!("{arch}: {}", text.trim());

    let sb = Sandbox::new();
    sb.write_manifest(
        "hello.yaml",
        &manifest("hello", "  containers:\n  - name: c\n    image: none\n    command: [sleep, '3600']\n"),
    );
    let cfg = sb.dir.path().join("ferrolet.toml");
    let port = common::free_port();
    std::fs::write(&cfg, sb.config_text(port)).unwrap();
    let mut cmd = Command::new(bin);
    cmd.args(["run", "--config"]).arg(&cfg);
    // Emulated, the start-up is slower: the helper waits 10 s for /healthz at most.
    let agent =
        AgentProcess::spawn_command(cmd, port, "info", sb.dir.path().join("agent.log"), Duration::from_millis(100));
    assert_eq!(agent.get("/healthz").unwrap().trim(), "ok");
    // Under binfmt_misc the process's executable is the emulator.
    let exe = std::fs::read_link(format!("/proc/{}/exe", agent.child.id())).unwrap_or_default();
    eprintln!("{arch}: the agent runs as {}", exe.display());
    wait_for("the pod to run", Duration::from_secs(60), || {
        let pod = agent.pod("hello")?;
        common::container(&pod, "c")?.state.running.as_ref().map(|_| ())
    });
    let status = agent.terminate();
    assert!(status.success(), "the agent's exit after SIGTERM: {status}");
}
