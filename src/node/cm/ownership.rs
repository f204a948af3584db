//! What this agent owns, and proof that nobody else uses it.
//!
//! - `PodCgroupRecords`: every pod cgroup the agent creates is recorded in its state
//!   directory (`<state>/pod-cgroups/`, one file per cgroup, written and fsynced *before*
//!   the cgroup is created, removed after the cgroup is). The orphan cleanup removes only
//!   recorded cgroups; a pod cgroup it finds without a record belongs to someone else (a
//!   cgroupfs kubelet, another ferrolet) and is reported once and left alone.
//! - `LockFile`: an flock'ed file, held for the agent's life. One per cgroup root under
//!   `/run/ferrolet/` and one in the plugin directory, so a second ferrolet with the same
//!   cgroup root or plugin directory refuses to start.
//! - `kubelet_sharing_root`: a running kubelet whose cgroup root (`--cgroup-root`, default
//!   `/`) is ours. kubelet takes none of our locks, so it is looked for by process name;
//!   only its command line is read (a `cgroupRoot` set in its config file is not seen).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Where the per-cgroup-root lock files live (tmpfs: gone at reboot, as the cgroups are).
pub const LOCK_DIR: &str = "/run/ferrolet";
/// The state directory's subdirectory of pod cgroup records.
pub const RECORDS_DIR: &str = "pod-cgroups";

/// Failures to prove or record ownership.
#[derive(Debug, thiserror::Error)]
pub enum OwnershipError {
    /// The lock file could not be created or opened.
    #[error("cannot create the lock file {path}")]
    CreateLock {
        /// The lock file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// Another process holds the lock.
    #[error("{what} is in use by another ferrolet (it holds the lock {path})")]
    Locked {
        /// What is shared, e.g. `cgroup root "/"`.
        what: String,
        /// The lock file.
        path: PathBuf,
    },
    /// A kubelet runs with the same cgroup root.
    #[error("cgroup root {root:?} is in use by a running kubelet (pid {pid}, cgroup root {kubelet_root:?})")]
    Kubelet {
        /// Our root.
        root: String,
        /// kubelet's pid.
        pid: i32,
        /// kubelet's root.
        kubelet_root: String,
    },
    /// The plugin directory's `kubelet.sock` answers: someone else serves Registration there.
    #[error(
        "device plugin directory {dir} is in use: {socket} accepts connections (a running kubelet, or another agent)"
    )]
    Served {
        /// The plugin directory.
        dir: PathBuf,
        /// Its registration socket.
        socket: PathBuf,
    },
    /// A pod cgroup record could not be written or removed.
    #[error("cannot record pod cgroup {cgroup} in {path}")]
    Record {
        /// The cgroup path.
        cgroup: String,
        /// The record file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
}

/// An exclusive, non-blocking flock on a file, released (and the file removed) on drop.
#[derive(Debug)]
pub struct LockFile {
    _file: File,
    path: PathBuf,
}

impl LockFile {
    /// Locks `path` (creating it, and its directory, 0700); `what` names the shared thing
    /// in the error when another process holds the lock.
    pub fn acquire(path: &Path, what: &str) -> Result<LockFile, OwnershipError> {
        let create = |source| OwnershipError::CreateLock { path: path.into(), source };
        if let Some(dir) = path.parent() {
            use std::os::unix::fs::DirBuilderExt;
            // Only directories created here get 0700; an existing one keeps its mode.
            fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(create)?;
        }
        // A lock file that is removed while another process waits to lock it would let two
        // processes hold "the" lock: after locking, check that the path still names our file.
        for _ in 0..10 {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(path)
                .map_err(create)?;
            // SAFETY: flock on an fd we own; no memory is passed.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                let err = io::Error::last_os_error();
                if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                    return Err(OwnershipError::Locked { what: what.into(), path: path.into() });
                }
                return Err(create(err));
            }
            let ours = file.metadata().map_err(create)?;
            match fs::symlink_metadata(path) {
                Ok(m) if m.ino() == ours.ino() && m.dev() == ours.dev() => {
                    return Ok(LockFile { _file: file, path: path.into() });
                }
                _ => continue, // removed or replaced meanwhile: lock the new one
            }
        }
        Err(create(io::Error::other("the lock file keeps being replaced")))
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        // Removed while still locked, so nobody can lock the old file after this.
        let _ = fs::remove_file(&self.path);
    }
}

/// The lock file for a cgroup root: `/run/ferrolet/cgroup-root<escaped root>.lock`.
pub fn cgroup_root_lock_path(lock_dir: &Path, root: &str) -> PathBuf {
    let normal = format!("/{}", root.trim_matches('/'));
    lock_dir.join(format!("cgroup-root{}.lock", escape(&normal)))
}

/// `/` becomes `%2F` and `%` becomes `%25`, so every path maps to its own file name.
fn escape(path: &str) -> String {
    path.replace('%', "%25").replace('/', "%2F")
}

/// The cgroup root a kubelet with these arguments uses (`--cgroup-root`, default `/`).
pub fn kubelet_cgroup_root(args: &[String]) -> String {
    let mut root = "/".to_string();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if let Some(v) = a.strip_prefix("--cgroup-root=").or_else(|| a.strip_prefix("-cgroup-root=")) {
            root = v.to_string();
        } else if a == "--cgroup-root" || a == "-cgroup-root" {
            if let Some(v) = it.next() {
                root = v.clone();
            }
        }
    }
    if root.is_empty() {
        "/".into()
    } else {
        root
    }
}

/// Whether two cgroup roots are the same (`/a/` is `/a`).
fn same_root(a: &str, b: &str) -> bool {
    a.trim_matches('/') == b.trim_matches('/')
}

/// A running kubelet (a process whose name is `kubelet`) that uses cgroup root `root`.
pub fn kubelet_sharing_root(proc_dir: &Path, root: &str) -> Result<(), OwnershipError> {
    let Ok(entries) = fs::read_dir(proc_dir) else { return Ok(()) };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let is_kubelet = fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "kubelet");
        if !is_kubelet {
            continue;
        }
        let Ok(cmdline) = fs::read(e.path().join("cmdline")) else { continue };
        let args: Vec<String> =
            cmdline.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into()).collect();
        let kubelet_root = kubelet_cgroup_root(&args);
        if same_root(&kubelet_root, root) {
            return Err(OwnershipError::Kubelet { root: root.into(), pid, kubelet_root });
        }
    }
    Ok(())
}

/// The pod cgroups this agent created, recorded in its state directory.
#[derive(Clone, Debug)]
pub struct PodCgroupRecords {
    dir: PathBuf,
}

impl PodCgroupRecords {
    /// Records under `<state_dir>/pod-cgroups`.
    pub fn new(state_dir: &Path) -> PodCgroupRecords {
        PodCgroupRecords { dir: state_dir.join(RECORDS_DIR) }
    }

    fn file(&self, cgroup: &str) -> PathBuf {
        self.dir.join(escape(cgroup))
    }

    /// Records `cgroup` durably (file and directory fsynced) before it is created.
    pub fn record(&self, cgroup: &str) -> Result<(), OwnershipError> {
        let path = self.file(cgroup);
        if path.is_file() {
            return Ok(());
        }
        let err = |source| OwnershipError::Record { cgroup: cgroup.into(), path: path.clone(), source };
        crate::base::state_files::create_private_dir_all(&self.dir).map_err(err)?;
        crate::base::state_files::write_atomic(&path, cgroup.as_bytes()).map_err(err)
    }

    /// Forgets `cgroup` after it was removed.
    pub fn forget(&self, cgroup: &str) -> Result<(), OwnershipError> {
        let path = self.file(cgroup);
        let err = |source| OwnershipError::Record { cgroup: cgroup.into(), path: path.clone(), source };
        match fs::remove_file(&path) {
            Ok(()) => File::open(&self.dir).and_then(|d| d.sync_all()).map_err(err),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(err(e)),
        }
    }

    /// Whether this agent created `cgroup`.
    pub fn contains(&self, cgroup: &str) -> bool {
        self.file(cgroup).is_file()
    }

    /// Every recorded cgroup path.
    pub fn list(&self) -> Vec<String> {
        let Ok(rd) = fs::read_dir(&self.dir) else { return Vec::new() };
        rd.flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| e.file_name().to_str().map(|n| n.replace("%2F", "/").replace("%25", "%")))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn kubelets_cgroup_root_comes_from_its_flags_and_defaults_to_slash() {
        assert_eq!(kubelet_cgroup_root(&args("/usr/bin/kubelet --config /etc/k.yaml")), "/");
        assert_eq!(kubelet_cgroup_root(&args("kubelet --cgroup-root=/edge")), "/edge");
        assert_eq!(kubelet_cgroup_root(&args("kubelet --cgroup-root /edge --v 2")), "/edge");
        assert_eq!(kubelet_cgroup_root(&args("kubelet --cgroup-root=")), "/");
        assert!(same_root("/edge/", "/edge") && same_root("/", "") && !same_root("/a", "/b"));
    }

    #[test]
    fn a_second_lock_on_the_same_file_is_refused_and_dropping_frees_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = cgroup_root_lock_path(dir.path(), "/ferrolet-dev/");
        assert_eq!(p, dir.path().join("cgroup-root%2Fferrolet-dev.lock"));
        assert_eq!(cgroup_root_lock_path(dir.path(), "/"), dir.path().join("cgroup-root%2F.lock"));
        let first = LockFile::acquire(&p, "cgroup root \"/ferrolet-dev\"").unwrap();
        let e = LockFile::acquire(&p, "cgroup root \"/ferrolet-dev\"").unwrap_err().to_string();
        assert!(e.starts_with("cgroup root \"/ferrolet-dev\" is in use by another ferrolet"), "{e}");
        drop(first);
        assert!(!p.exists());
        let _again = LockFile::acquire(&p, "x").unwrap();
        let nested = dir.path().join("run/ferrolet/x.lock");
        let _l = LockFile::acquire(&nested, "x").unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!((mode(&dir.path().join("run/ferrolet")), mode(&nested)), (0o700, 0o600));
    }

    #[test]
    fn records_are_kept_per_cgroup_path_until_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let r = PodCgroupRecords::new(dir.path());
        assert!(r.list().is_empty());
        r.record("/a%b/kubepods/besteffort/pod1").unwrap();
        r.record("/a%b/kubepods/pod2").unwrap();
        assert!(r.contains("/a%b/kubepods/pod2") && !r.contains("/a%b/kubepods/burstable/pod2"));
        let mut l = r.list();
        l.sort();
        assert_eq!(l, ["/a%b/kubepods/besteffort/pod1", "/a%b/kubepods/pod2"]);
        r.forget("/a%b/kubepods/pod2").unwrap();
        r.forget("/a%b/kubepods/pod2").unwrap();
        assert_eq!(r.list(), ["/a%b/kubepods/besteffort/pod1"]);
    }

    #[test]
    fn a_kubelet_is_found_by_name_and_root_in_a_fake_proc() {
        let proc = tempfile::tempdir().unwrap();
        let pid = proc.path().join("4242");
        fs::create_dir_all(&pid).unwrap();
        fs::write(pid.join("comm"), "kubelet\n").unwrap();
        fs::write(pid.join("cmdline"), b"/usr/bin/kubelet\0--cgroup-root=/edge\0").unwrap();
        fs::create_dir_all(proc.path().join("self")).unwrap();
        assert!(kubelet_sharing_root(proc.path(), "/").is_ok());
        let e = kubelet_sharing_root(proc.path(), "/edge/").unwrap_err().to_string();
        assert_eq!(e, "cgroup root \"/edge/\" is in use by a running kubelet (pid 4242, cgroup root \"/edge\")");
    }
}
