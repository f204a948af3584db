//! What the VM tests (`vm_cgroup2`, `vm_systemd`) share: the directory `tests/vm/setup.sh`
//! fills and the skips when something is missing, a newc cpio writer for their initramfs,
//! the libraries a binary links, and one bounded qemu boot, on KVM where it starts and TCG
//! otherwise.

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The environment variable naming the directory `tests/vm/setup.sh` filled.
const VM_DIR_ENV: &str = "FERROLET_VM_DIR";
/// Its default.
const VM_DIR: &str = "/var/tmp/ferrolet-vm";
/// How long a KVM boot may take to reach the end of its initramfs; a KVM that does not boot
/// (nested virtualisation that is half there) is then given up for TCG.
const KVM_START_TIMEOUT: Duration = Duration::from_secs(20);

/// The VM directory with its kernel, qemu, a static busybox and gzip; otherwise skipped,
/// saying why. Returns the directory and busybox.
pub fn vm_or_skip() -> Option<(PathBuf, PathBuf)> {
    let dir = std::env::var_os(VM_DIR_ENV).map_or_else(|| PathBuf::from(VM_DIR), PathBuf::from);
    if !dir.join(".ferrolet-ready").exists() || !dir.join("vmlinuz").exists() {
        super::skip(&format!(
            "no VM kernel in {} (tests/vm/setup.sh, which make test runs, downloads it; FERROLET_SKIP_VM=1 skips it)",
            dir.display()
        ));
        return None;
    }
    if Command::new("qemu-system-x86_64").arg("--version").output().is_err() {
        super::skip("no qemu-system-x86_64 (tests/vm/setup.sh installs qemu-system-x86)");
        return None;
    }
    let busybox = PathBuf::from("/bin/busybox");
    match super::elf_machine_and_interp(&busybox) {
        Some((_, false)) => {}
        _ => {
            super::skip("no static /bin/busybox (tests/vm/setup.sh installs busybox-static)");
            return None;
        }
    }
    if Command::new("gzip").arg("--version").output().is_err() {
        super::skip("no gzip");
        return None;
    }
    Some((dir, busybox))
}

/// A newc cpio archive, written as the kernel's initramfs unpacker reads it.
pub struct Cpio {
    out: Vec<u8>,
    ino: u32,
    dirs: BTreeSet<String>,
}

impl Cpio {
    pub fn new() -> Cpio {
        Cpio { out: Vec::new(), ino: 1, dirs: BTreeSet::new() }
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        let name = name.trim_start_matches('/');
        let header = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            0,
            0,
            name.len() + 1,
            0
        );
        self.ino += 1;
        self.out.extend_from_slice(header.as_bytes());
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while self.out.len() % 4 != 0 {
            self.out.push(0);
        }
    }

    /// Directory `path` and its parents (the unpacker makes no parents itself).
    pub fn dir(&mut self, path: &str) {
        let mut at = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            at = format!("{at}/{part}");
            if self.dirs.insert(at.clone()) {
                self.entry(&at, 0o040755, &[]);
            }
        }
    }

    /// A regular file at `path` (its directory made first).
    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) {
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent);
        }
        self.entry(path, 0o100000 | mode, data);
    }

    /// The archive, gzipped into `out`.
    pub fn gzip_to(mut self, out: &Path) {
        self.entry("TRAILER!!!", 0, &[]);
        let mut gzip = Command::new("gzip")
            .arg("-1")
            .stdin(Stdio::piped())
            .stdout(std::fs::File::create(out).unwrap())
            .spawn()
            .expect("gzip runs");
        gzip.stdin.take().unwrap().write_all(&self.out).unwrap();
        assert!(gzip.wait().unwrap().success(), "gzip failed");
    }
}

/// The shared libraries and the loader `ldd` names for `bin` (none for a static binary).
pub fn libraries(bin: &Path) -> Vec<PathBuf> {
    let Ok(out) = Command::new("ldd").arg(bin).output() else { return Vec::new() };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let path = l.split("=>").last()?.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// One VM run: Debian's kernel from the VM directory with `initrd`, `cpus` and `memory`,
/// the kernel's command line, any other qemu arguments (a disk), the console text that
/// marks the end of the initramfs (how a KVM start is told from a hang) and the end of the
/// test, and how long the whole boot may take.
pub struct Qemu<'a> {
    /// The VM directory (its `vmlinuz`).
    pub vm_dir: &'a Path,
    /// The initramfs.
    pub initrd: &'a Path,
    /// `-smp`.
    pub cpus: i64,
    /// `-m` (`512M`).
    pub memory: &'a str,
    /// The kernel's command line.
    pub append: String,
    /// Further arguments (`-drive ...`).
    pub extra: Vec<std::ffi::OsString>,
    /// Printed at the end of the initramfs.
    pub started: &'a str,
    /// Printed when the test is over, before the power-off.
    pub done: &'a str,
    /// From qemu's start to its power-off; qemu is killed after.
    pub timeout: Duration,
}

/// Boots `q` on KVM when `/dev/kvm` opens and the guest starts within 20 s, on TCG
/// otherwise; returns the accelerator and the console (with qemu's stderr as `qemu: `
/// lines). `label` prefixes what is said about a KVM that did not start.
pub fn boot(q: &Qemu, label: &str) -> (&'static str, String) {
    let kvm = std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm").is_ok();
    if kvm {
        match boot_with(q, "kvm") {
            (true, console) => return ("kvm", console),
            (false, console) => {
                let tail: Vec<&str> = console.lines().rev().take(3).collect();
                eprintln!("{label}: KVM did not start the guest (within {KVM_START_TIMEOUT:?}: {tail:?}); TCG instead");
            }
        }
    }
    ("tcg", boot_with(q, "tcg").1)
}

/// One boot with `accel`: whether the guest started, and the console.
fn boot_with(q: &Qemu, accel: &str) -> (bool, String) {
    let mut cmd = Command::new("qemu-system-x86_64");
    if accel == "kvm" {
        cmd.args(["-enable-kvm", "-cpu", "host"]);
    } else {
        cmd.args(["-accel", "tcg", "-cpu", "max"]);
    }
    cmd.args(["-smp", &q.cpus.to_string(), "-m", q.memory, "-kernel"])
        .arg(q.vm_dir.join("vmlinuz"))
        .arg("-initrd")
        .arg(q.initrd)
        .args(["-append", &q.append])
        .args(&q.extra)
        .args(["-nographic", "-nodefaults", "-serial", "stdio", "-no-reboot"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("qemu-system-x86_64 starts");
    let (tx, rx) = mpsc::channel::<String>();
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    let tx2 = tx.clone();
    // Both readers end when qemu exits (or is killed): their pipes close.
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx2.send(format!("qemu: {line}"));
        }
    });
    let start = Instant::now();
    let mut console = String::new();
    let (mut started, mut done) = (false, false);
    loop {
        let limit = if accel == "kvm" && !started { KVM_START_TIMEOUT } else { q.timeout };
        let Some(left) = limit.checked_sub(start.elapsed()) else {
            console.push_str(&format!("(the test: no power-off after {:?}; qemu killed)\n", start.elapsed()));
            break;
        };
        match rx.recv_timeout(left.min(Duration::from_millis(500))) {
            Ok(line) => {
                started |= line.contains(q.started);
                done |= line.contains(q.done);
                console.push_str(&line);
                console.push('\n');
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break, // qemu exited
        }
        if done && child.try_wait().ok().flatten().is_some() {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    (started || accel != "kvm", console)
}
