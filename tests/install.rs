//! `make install` into a temporary DESTDIR: what goes where, with which modes, the units
//! pointing at the installed binary, a second install keeping the configuration, and the
//! installed binary and configuration usable as they are.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).permissions().mode() & 0o7777
}

fn make_install(dest: &Path) -> String {
    let out = Command::new("make")
        .args(["-s", "install", "PREFIX=/usr"])
        .arg(format!("BIN={}", common::ferrolet_bin().display()))
        .arg(format!("DESTDIR={}", dest.display()))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("make");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "make install failed: {text}");
    text
}

#[test]
fn make_install_lays_out_the_binary_configuration_units_and_state_directories() {
    let dest = tempfile::tempdir().unwrap();
    let d = dest.path();
    make_install(d);
    for (path, want) in [
        ("usr/bin/ferrolet", 0o755),
        ("etc/ferrolet/ferrolet.toml", 0o644),
        ("etc/ferrolet/manifests", 0o755),
        ("lib/systemd/system/ferrolet.service", 0o644),
        ("etc/init.d/ferrolet", 0o755),
        ("var/lib/ferrolet", 0o700),
        ("var/log/ferrolet", 0o755),
    ] {
        assert_eq!(mode(&d.join(path)), want, "{path}");
    }
    let unit = std::fs::read_to_string(d.join("lib/systemd/system/ferrolet.service")).unwrap();
    assert!(unit.contains("\nExecStart=/usr/bin/ferrolet run --config /etc/ferrolet/ferrolet.toml\n"), "{unit}");
    assert!(unit.contains("\nType=notify\n") && unit.contains("\nKillMode=process\n"), "{unit}");
    let openrc = std::fs::read_to_string(d.join("etc/init.d/ferrolet")).unwrap();
    assert!(openrc.contains("command=\"/usr/bin/ferrolet\"") && openrc.contains("supervisor=\"supervise-daemon\""));

    // The installed binary runs, and takes the installed configuration as it is.
    let bin = d.join("usr/bin/ferrolet");
    let version = Command::new(&bin).arg("version").output().unwrap();
    assert!(version.status.success() && String::from_utf8_lossy(&version.stdout).contains("ferrolet"));
    let hello = Path::new(env!("CARGO_MANIFEST_DIR")).join("etc/manifests/hello.yaml");
    let plan = Command::new(&bin)
        .args(["plan", "cgroups", "--config"])
        .arg(d.join("etc/ferrolet/ferrolet.toml"))
        .arg(hello)
        .output()
        .unwrap();
    assert!(plan.status.success(), "{}", String::from_utf8_lossy(&plan.stderr));

    // Installed again: the configuration a person may have edited stays.
    let conf = d.join("etc/ferrolet/ferrolet.toml");
    std::fs::write(&conf, "# edited\n").unwrap();
    let said = make_install(d);
    assert_eq!(std::fs::read_to_string(&conf).unwrap(), "# edited\n");
    assert!(d.join("etc/ferrolet/ferrolet.toml.new").exists() && said.contains("kept"), "{said}");
}
