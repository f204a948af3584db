//! cgroupfs drivers for cgroup v1 and v2 behind one trait. Every function takes the cgroup
//! path (`/kubepods/burstable/pod<uid>`); the mounts come from a mountinfo file, so tests
//! build a fake cgroup tree in a temp dir. Control files are opened for writing without
//! `create`, so a misspelled or missing file fails exactly as the kernel would make it fail.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A cgroup operation that failed; every variant names the path (and value).
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// The mountinfo file could not be read.
    #[error("cannot read {path}")]
    ReadMountinfo {
        /// The mountinfo file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// No usable cgroup hierarchy is mounted.
    #[error("{0}")]
    NoHierarchy(String),
    /// A cgroup directory could not be created.
    #[error("cannot create cgroup {path}")]
    CreateCgroup {
        /// The directory.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// A control file could not be written.
    #[error("cannot write {value:?} to {path}")]
    WriteControlFile {
        /// The control file.
        path: PathBuf,
        /// The value.
        value: String,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// A cgroup could not be removed (processes left, or permissions).
    #[error("cannot remove cgroup {path}")]
    RemoveCgroup {
        /// The directory.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// systemd's manager refused or did not answer (the systemd driver).
    #[error("systemd: {action} {unit}")]
    Systemd {
        /// The unit.
        unit: String,
        /// What was asked ("starting", "stopping", ...).
        action: &'static str,
        /// Cause.
        #[source]
        source: Box<crate::base::dbus::DbusError>,
    },
}

/// cgroup v1 (one hierarchy per controller) or v2 (one unified hierarchy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum CgroupVersion {
    /// Legacy and hybrid hosts.
    V1,
    /// The unified hierarchy.
    V2,
}

/// The controllers ferrolet writes to.
pub const CONTROLLERS: [&str; 3] = ["cpu", "memory", "pids"];

/// The v1 controllers whose hierarchies get ferrolet's cgroups too, and its processes, but
/// none of its writes: `cpuacct` counts a cgroup's CPU time (`cpuacct.usage`, the stats').
/// systemd mounts it with `cpu`; a host that mounts it apart would otherwise count no pod's
/// CPU (kubelet's cgroupfs manager, too, makes a pod's cgroup in every hierarchy).
pub const ACCOUNTING_CONTROLLERS: [&str; 1] = ["cpuacct"];

/// The cgroup mounts found in a mountinfo file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mounts {
    /// v1 controller → mount point (`cpu` → `/sys/fs/cgroup/cpu,cpuacct`), for `CONTROLLERS`
    /// and `ACCOUNTING_CONTROLLERS`.
    pub v1: BTreeMap<String, PathBuf>,
    /// The cgroup2 mount point.
    pub v2: Option<PathBuf>,
    /// Every cgroup hierarchy's mount point (v1 ones ferrolet does not write included).
    pub all: Vec<PathBuf>,
    /// Named v1 hierarchies without controllers (`name=systemd` → `/sys/fs/cgroup/systemd`).
    pub named: BTreeMap<String, PathBuf>,
}

/// Undoes mountinfo's octal escapes (`\040` is a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Mounts {
    /// Parses `/proc/self/mountinfo` text.
    pub fn parse(text: &str) -> Mounts {
        let mut m = Mounts::default();
        for line in text.lines() {
            let Some((left, right)) = line.split_once(" - ") else { continue };
            let fields: Vec<&str> = left.split(' ').collect();
            let rfields: Vec<&str> = right.split(' ').collect();
            if fields.len() < 5 || rfields.len() < 3 {
                continue;
            }
            let mount_point = PathBuf::from(unescape(fields[4]));
            if matches!(rfields[0], "cgroup" | "cgroup2") {
                m.all.push(mount_point.clone());
            }
            match rfields[0] {
                "cgroup2" => m.v2 = Some(mount_point),
                "cgroup" => {
                    for opt in rfields[2].split(',') {
                        if let Some(name) = opt.strip_prefix("name=") {
                            m.named.insert(name.to_string(), mount_point.clone());
                        }
                        if CONTROLLERS.contains(&opt) || ACCOUNTING_CONTROLLERS.contains(&opt) {
                            m.v1.insert(opt.to_string(), mount_point.clone());
                        }
                    }
                }
                _ => {}
            }
        }
        m
    }

    /// Reads and parses a mountinfo file.
    pub fn read(path: &Path) -> Result<Mounts, CgroupError> {
        let text =
            fs::read_to_string(path).map_err(|source| CgroupError::ReadMountinfo { path: path.into(), source })?;
        Ok(Mounts::parse(&text))
    }

    /// Which version to use: a hybrid host (v1 controllers and an empty unified mount) is
    /// v1; a pure v2 host is v2; `forced` overrides when that hierarchy is present.
    pub fn version(&self, forced: Option<CgroupVersion>) -> Result<CgroupVersion, CgroupError> {
        let has_v1 = self.v1.contains_key("cpu") && self.v1.contains_key("memory");
        match forced {
            Some(CgroupVersion::V1) if has_v1 => Ok(CgroupVersion::V1),
            Some(CgroupVersion::V1) => Err(CgroupError::NoHierarchy(
                "cgroup v1 was asked for, but no v1 cpu and memory hierarchies are mounted".into(),
            )),
            Some(CgroupVersion::V2) if self.v2.is_some() => Ok(CgroupVersion::V2),
            Some(CgroupVersion::V2) => {
                Err(CgroupError::NoHierarchy("cgroup v2 was asked for, but no cgroup2 filesystem is mounted".into()))
            }
            None if has_v1 => Ok(CgroupVersion::V1),
            None if self.v2.is_some() => Ok(CgroupVersion::V2),
            None => Err(CgroupError::NoHierarchy(
                "no cgroup filesystem is mounted (neither v1 cpu and memory nor cgroup2)".into(),
            )),
        }
    }
}

/// Writes `value` to an existing control file.
pub fn write_control_file(path: &Path, value: &str) -> Result<(), CgroupError> {
    let err = |source| CgroupError::WriteControlFile { path: path.into(), value: value.into(), source };
    // O_TRUNC as runc does; never O_CREAT.
    let mut f = OpenOptions::new().write(true).truncate(true).open(path).map_err(err)?;
    f.write_all(value.as_bytes()).map_err(err)
}

fn rel(path: &str) -> &str {
    path.trim_start_matches('/')
}

/// A cgroup driver: create, write, destroy cgroups by path.
pub trait CgroupDriver: Send + Sync {
    /// v1 or v2.
    fn version(&self) -> CgroupVersion;
    /// The cgroup's directories (one per controller on v1).
    fn dirs(&self, path: &str) -> Vec<PathBuf>;
    /// The directory holding control file `file` of the cgroup.
    fn dir_for(&self, path: &str, file: &str) -> Option<PathBuf>;
    /// The memory controller's directory (where OOM kills are counted).
    fn memory_dir(&self, path: &str) -> Option<PathBuf>;
    /// Makes every controller usable below `path`'s parent (v2 `cgroup.subtree_control`).
    fn enable_controllers(&self, path: &str) -> Result<(), CgroupError>;

    /// Whether systemd makes the cgroups (the systemd driver): a container's cgroup is then
    /// a scope started around its process (`systemd::start_scope`), not a directory.
    fn systemd(&self) -> bool {
        false
    }

    /// Creates the cgroup and any missing ancestors in every hierarchy ferrolet uses.
    fn create(&self, path: &str) -> Result<(), CgroupError> {
        self.enable_controllers(path)?;
        for d in self.dirs(path) {
            fs::create_dir_all(&d).map_err(|source| CgroupError::CreateCgroup { path: d.clone(), source })?;
        }
        Ok(())
    }

    /// Whether the cgroup exists.
    fn exists(&self, path: &str) -> bool {
        self.dirs(path).iter().all(|d| d.is_dir())
    }

    /// Writes control files (in name order, so `cpu.cfs_period_us` precedes `cpu.cfs_quota_us`).
    fn apply(&self, path: &str, files: &BTreeMap<String, String>) -> Result<(), CgroupError> {
        for (file, value) in files {
            let Some(dir) = self.dir_for(path, file) else { continue };
            write_control_file(&dir.join(file), value)?;
        }
        Ok(())
    }

    /// The `cgroup.procs` files a process is written into to join the cgroup.
    fn procs_files(&self, path: &str) -> Vec<PathBuf> {
        self.dirs(path).into_iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// Names of the child cgroups of `path` (from the first hierarchy).
    fn children(&self, path: &str) -> Vec<String> {
        let Some(d) = self.dirs(path).into_iter().next() else { return Vec::new() };
        fs::read_dir(d)
            .map(|rd| {
                rd.flatten()
                    // The type the directory listing gives (no stat per entry: a pod cgroup
                    // lists hundreds beside its control files, every tick).
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Kills every process left in the cgroup tree (SIGKILL, up to 5 rounds), then removes
    /// it bottom-up. A cgroup that does not exist is already destroyed.
    fn destroy(&self, path: &str) -> Result<(), CgroupError> {
        for dir in self.dirs(path) {
            kill_and_remove(&dir)?;
        }
        Ok(())
    }
}

/// Every directory of a cgroup tree, deepest first.
fn tree(dir: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.path().is_dir() {
                tree(&e.path(), out);
            }
        }
    }
    out.push(dir.into());
}

/// Removes the cgroup tree at `path` in every hierarchy of `mounts` where it is empty,
/// deepest first. A CRI runtime's runc makes a pod's and its containers' cgroups in every v1
/// hierarchy, not only in those ferrolet manages, and leaves the pod's behind. A cgroup
/// with a process in it stays (the kernel refuses).
pub fn remove_empty_everywhere(mounts: &Mounts, path: &str) {
    for m in &mounts.all {
        let mut dirs = Vec::new();
        tree(&m.join(path.trim_start_matches('/')), &mut dirs);
        for d in dirs {
            let _ = fs::remove_dir(&d);
        }
    }
}

/// Pids in a cgroup tree.
pub fn tree_pids(dir: &Path) -> Vec<i32> {
    let mut dirs = Vec::new();
    tree(dir, &mut dirs);
    dirs.iter()
        .filter_map(|d| fs::read_to_string(d.join("cgroup.procs")).ok())
        .flat_map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect::<Vec<i32>>())
        .collect()
}

/// How long a cgroup directory that is still busy (its killed processes not yet gone) is
/// retried before its removal fails; shared by the whole tree.
const REMOVE_BUSY_BUDGET: Duration = Duration::from_millis(500);

/// Kills every process left in the cgroup tree at `dir` (SIGKILL, up to 5 rounds), then
/// removes the tree deepest first, retrying a directory the kernel still calls busy. A
/// cgroup that does not exist is already removed. This is the one kill-and-remove: the
/// drivers' `destroy` (pod cgroups, orphans) and the shim (a container's cgroup) use it.
pub fn kill_and_remove(dir: &Path) -> Result<(), CgroupError> {
    if !dir.exists() {
        return Ok(());
    }
    for round in 0..5u32 {
        let pids = tree_pids(dir);
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(10 << round));
    }
    let mut dirs = Vec::new();
    tree(dir, &mut dirs);
    let deadline = std::time::Instant::now() + REMOVE_BUSY_BUDGET;
    for d in dirs {
        loop {
            match fs::remove_dir(&d) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                // A fake tree in a temp dir holds plain files; the kernel's cgroupfs removes
                // its control files with the directory.
                Err(_) if d.join("cgroup.procs").is_file() && !is_cgroupfs(&d) => {
                    fs::remove_dir_all(&d).map_err(|source| CgroupError::RemoveCgroup { path: d.clone(), source })?;
                }
                // A killed process leaves its cgroup only once it has exited.
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                Err(source) => return Err(CgroupError::RemoveCgroup { path: d, source }),
            }
            break;
        }
    }
    Ok(())
}

/// True when `dir` is on a real cgroup filesystem.
fn is_cgroupfs(dir: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else { return false };
    // SAFETY: statfs writes into a zeroed struct we own; the path is a valid C string.
    unsafe {
        let mut s: libc::statfs = std::mem::zeroed();
        if libc::statfs(c.as_ptr(), &mut s) != 0 {
            return false;
        }
        const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;
        const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
        let t = s.f_type as i64;
        t == CGROUP_SUPER_MAGIC || t == CGROUP2_SUPER_MAGIC
    }
}

/// cgroup v1: one directory per controller.
pub struct V1 {
    mounts: BTreeMap<String, PathBuf>,
}

impl V1 {
    /// A v1 driver over these controller mounts.
    pub fn new(mounts: &Mounts) -> V1 {
        V1 { mounts: mounts.v1.clone() }
    }
}

impl CgroupDriver for V1 {
    fn version(&self) -> CgroupVersion {
        CgroupVersion::V1
    }

    fn dirs(&self, path: &str) -> Vec<PathBuf> {
        let mut seen = Vec::new();
        // The written hierarchies first: the first is where `children` looks.
        for c in CONTROLLERS.into_iter().chain(ACCOUNTING_CONTROLLERS) {
            if let Some(m) = self.mounts.get(c) {
                let d = m.join(rel(path));
                if !seen.contains(&d) {
                    seen.push(d);
                }
            }
        }
        seen
    }

    fn dir_for(&self, path: &str, file: &str) -> Option<PathBuf> {
        let controller = file.split('.').next()?;
        self.mounts.get(controller).map(|m| m.join(rel(path)))
    }

    fn memory_dir(&self, path: &str) -> Option<PathBuf> {
        self.mounts.get("memory").map(|m| m.join(rel(path)))
    }

    fn enable_controllers(&self, _path: &str) -> Result<(), CgroupError> {
        Ok(())
    }
}

/// cgroup v2: one unified directory; controllers are enabled top-down.
pub struct V2 {
    mount: PathBuf,
}

impl V2 {
    /// A v2 driver over the cgroup2 mount.
    pub fn new(mount: &Path) -> V2 {
        V2 { mount: mount.into() }
    }
}

impl CgroupDriver for V2 {
    fn version(&self) -> CgroupVersion {
        CgroupVersion::V2
    }

    fn dirs(&self, path: &str) -> Vec<PathBuf> {
        vec![self.mount.join(rel(path))]
    }

    fn dir_for(&self, path: &str, _file: &str) -> Option<PathBuf> {
        Some(self.mount.join(rel(path)))
    }

    fn memory_dir(&self, path: &str) -> Option<PathBuf> {
        Some(self.mount.join(rel(path)))
    }

    fn enable_controllers(&self, path: &str) -> Result<(), CgroupError> {
        // Every ancestor of the new cgroup delegates every controller it has to its children
        // (as runc does): cpu, memory and pids for the limits written here, and io, cpuset,
        // hugetlb and the others for pods and runtimes that set them.
        let mut dir = self.mount.clone();
        let parts: Vec<&str> = rel(path).split('/').filter(|p| !p.is_empty()).collect();
        for part in parts {
            let available = fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
            let enabled = fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
            let missing: Vec<String> = available
                .split_whitespace()
                .filter(|c| !enabled.split_whitespace().any(|e| e == *c))
                .map(|c| format!("+{c}"))
                .collect();
            if !missing.is_empty() {
                write_control_file(&dir.join("cgroup.subtree_control"), &missing.join(" "))?;
            }
            dir = dir.join(part);
            if !dir.exists() {
                fs::create_dir(&dir).map_err(|source| CgroupError::CreateCgroup { path: dir.clone(), source })?;
            }
        }
        Ok(())
    }
}

/// Picks the driver from a mountinfo file and an optional forced version.
pub fn detect(mountinfo: &Path, forced: Option<CgroupVersion>) -> Result<Box<dyn CgroupDriver>, CgroupError> {
    let mounts = Mounts::read(mountinfo)?;
    Ok(match mounts.version(forced)? {
        CgroupVersion::V1 => Box::new(V1::new(&mounts)),
        // version() returned V2 only with a mount present.
        CgroupVersion::V2 => Box::new(V2::new(mounts.v2.as_deref().unwrap_or(Path::new("/sys/fs/cgroup")))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn a_hybrid_host_uses_v1_and_a_pure_v2_host_v2() {
        let m = Mounts::parse(HYBRID);
        // systemd's own hierarchy, where it tracks a unit's processes on v1.
        assert_eq!(m.named.get("systemd"), Some(&PathBuf::from("/sys/fs/cgroup/systemd")));
        assert_eq!(m.v1["cpu"], PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"));
        assert_eq!(m.v1["memory"], PathBuf::from("/sys/fs/cgroup/memory"));
        assert_eq!(m.v1["cpuacct"], PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"));
        let v1 = V1::new(&m);
        assert_eq!(
            v1.dir_for("/kubepods", "cpuacct.usage"),
            Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/kubepods"))
        );
        assert_eq!(v1.dirs("/kubepods").len(), 3, "cpu and cpuacct mounted together: one directory");
        assert_eq!(m.v2, Some(PathBuf::from("/sys/fs/cgroup/unified")));
        assert_eq!(m.version(None).unwrap(), CgroupVersion::V1);
        assert_eq!(m.version(Some(CgroupVersion::V2)).unwrap(), CgroupVersion::V2);
        let pure = Mounts::parse("30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
        assert_eq!(pure.version(None).unwrap(), CgroupVersion::V2);
        assert!(pure.version(Some(CgroupVersion::V1)).unwrap_err().to_string().contains("no v1 cpu and memory"));
        assert!(Mounts::parse("").version(None).is_err());
        assert_eq!(
            Mounts::parse(r"1 2 0:3 / /mnt/cg\040x rw - cgroup2 cgroup2 rw").v2,
            Some(PathBuf::from("/mnt/cg x"))
        );
    }

    #[test]
    fn a_cpuacct_hierarchy_mounted_apart_gets_the_cgroups_and_their_processes_too() {
        let apart = "\
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
";
        let v1 = V1::new(&Mounts::parse(apart));
        let dirs = v1.dirs("/kubepods/podu1");
        assert_eq!(dirs[0], PathBuf::from("/sys/fs/cgroup/cpu/kubepods/podu1"), "children are listed in cpu's");
        assert_eq!(dirs.last(), Some(&PathBuf::from("/sys/fs/cgroup/cpuacct/kubepods/podu1")));
        assert_eq!(v1.procs_files("/kubepods/podu1").len(), 4, "a process joins the accounting cgroup too");
        assert_eq!(v1.dir_for("/kubepods/podu1", "cpuacct.usage"), Some(dirs[3].clone()));
        assert_eq!(v1.dir_for("/kubepods/podu1", "cpu.shares"), Some(dirs[0].clone()));
    }

    #[test]
    fn a_misspelled_control_file_fails_naming_path_and_value() {
        let dir = tempfile::tempdir().unwrap();
        let err = write_control_file(&dir.path().join("cpu.sharez"), "1024").unwrap_err().to_string();
        assert!(err.starts_with("cannot write \"1024\" to ") && err.contains("cpu.sharez"), "{err}");
        assert!(!dir.path().join("cpu.sharez").exists(), "never created");
    }

    #[test]
    fn kill_and_remove_kills_what_is_listed_and_removes_the_tree_deepest_first() {
        let root = tempfile::tempdir().unwrap();
        let cg = root.path().join("pod1");
        let child = cg.join("app");
        fs::create_dir_all(&child).unwrap();
        fs::write(cg.join("cgroup.procs"), "").unwrap();
        let mut sleeper = std::process::Command::new("sleep").arg("100").spawn().unwrap();
        fs::write(child.join("cgroup.procs"), format!("{}\n", sleeper.id())).unwrap();
        kill_and_remove(&cg).unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(sleeper.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert!(!cg.exists(), "the whole tree is gone");
        kill_and_remove(&cg).expect("a cgroup that is gone is already removed");
    }

    #[test]
    fn v2_delegates_every_controller_each_ancestor_has() {
        let dir = tempfile::tempdir().unwrap();
        let all = "cpuset cpu io memory hugetlb pids rdma misc";
        std::fs::write(dir.path().join("cgroup.controllers"), all).unwrap();
        std::fs::write(dir.path().join("cgroup.subtree_control"), "cpu memory").unwrap();
        std::fs::create_dir(dir.path().join("kubepods")).unwrap();
        std::fs::write(dir.path().join("kubepods/cgroup.controllers"), "cpu io memory pids").unwrap();
        std::fs::write(dir.path().join("kubepods/cgroup.subtree_control"), "").unwrap();
        V2::new(dir.path()).enable_controllers("/kubepods/burstable").unwrap();
        // A real subtree_control adds what is written; the fake file holds the last write.
        let root = std::fs::read_to_string(dir.path().join("cgroup.subtree_control")).unwrap();
        assert_eq!(root, "+cpuset +io +hugetlb +pids +rdma +misc", "what was not enabled yet, all of it");
        let kubepods = std::fs::read_to_string(dir.path().join("kubepods/cgroup.subtree_control")).unwrap();
        assert_eq!(kubepods, "+cpu +io +memory +pids");
        assert!(dir.path().join("kubepods/burstable").is_dir());
    }
}
