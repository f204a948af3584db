//! What `run` needs from the machine besides a well-formed file, checked without changing
//! anything: `ferrolet validate` and `ferrolet run` call the same [`Config::check_host`].

use super::{ApiConfig, Config, ConfigError};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Why this machine cannot give `run` what a setting asks for.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// A directory to create lies under something that is not a directory.
    #[error("{} exists and is not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// The directory (or the parent it would be created in) is not writable.
    #[error("cannot create or write files in {}", path.display())]
    NotWritable {
        /// The directory.
        path: PathBuf,
        /// From access(2).
        #[source]
        source: std::io::Error,
    },
    /// The directory is (or would be made) on a kernel filesystem that holds no files of
    /// anyone's (`/proc`, `/sys`, a cgroup tree).
    #[error("{} is on the kernel's {fs} filesystem, where no state can be kept", path.display())]
    KernelFilesystem {
        /// The directory that exists.
        path: PathBuf,
        /// The filesystem's name.
        fs: &'static str,
    },
    /// Stat failed for another reason.
    #[error("cannot use {}", path.display())]
    Stat {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The API address's IP is not one of this machine's.
    #[error("invalid value {listen:?}: {ip} is not an address of this machine")]
    NotLocal {
        /// The configured address.
        listen: String,
        /// Its IP.
        ip: std::net::IpAddr,
        /// From binding it.
        #[source]
        source: std::io::Error,
    },
    /// With enforcement required, the cgroup mounts cannot be read.
    #[error("resource enforcement is required but cgroups cannot be used")]
    Cgroups(#[source] crate::node::cm::cgroupfs::CgroupError),
}
impl Config {
    /// What `run` needs from the machine besides a well-formed file, checked without
    /// changing anything, so `ferrolet validate` refuses what `run` would: a state (or
    /// device plugin) directory that cannot be created or written, an API address that is
    /// not one of this machine's (the agent could not listen on it), and unreadable
    /// cgroup mounts when enforcement is required.
    pub fn check_host(&self, file: &str) -> Vec<ConfigError> {
        let host = |key: &str, source| ConfigError::Host { file: file.into(), key: key.into(), source };
        let mut out = Vec::new();
        if let Err(e) = check_state_dir(&self.state_dir) {
            out.push(host("state_dir", e));
        }
        if let Err(e) = self.api.check_bindable() {
            out.push(host("api.listen", e));
        }
        // The device manager creates its directory at start, as the agent does the state dir.
        if !self.devices.plugin_dir.as_os_str().is_empty() {
            if let Err(e) = check_state_dir(&self.devices.plugin_dir) {
                out.push(host("devices.plugin_dir", e));
            }
        }
        // With enforcement required, `run` refuses to start when the cgroup mounts cannot be
        // read; reading them changes nothing (whether the tree is writable shows at start).
        if self.cgroups.enforcement == super::Enforcement::Required {
            if let Err(e) = crate::node::cm::cgroupfs::detect(&self.cgroups.mountinfo, self.cgroups.forced_version()) {
                out.push(host("cgroups.enforcement", HostError::Cgroups(e)));
            }
        }
        out
    }
}

/// Whether `run` could use `dir` as its state directory: it, or the nearest ancestor that
/// exists, is a directory this process may write (`run` creates the rest).
pub fn check_state_dir(dir: &Path) -> Result<(), HostError> {
    let mut p = dir;
    loop {
        match std::fs::metadata(p) {
            Ok(md) if md.is_dir() => {
                let not_writable = |source| HostError::NotWritable { path: p.into(), source };
                let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes())
                    .map_err(|e| not_writable(std::io::Error::other(e)))?;
                // SAFETY: access reads a NUL-terminated path we own.
                if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
                    return Err(not_writable(std::io::Error::last_os_error()));
                }
                // Root may "write" /proc and /sys as access(2) sees it; nothing is made there.
                // SAFETY: a zeroed statfs is a valid out-parameter; the path is NUL-terminated.
                let mut st: libc::statfs = unsafe { std::mem::zeroed() };
                if unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0 {
                    if let Some(fs) = kernel_filesystem(st.f_type as i64) {
                        return Err(HostError::KernelFilesystem { path: p.into(), fs });
                    }
                }
                return Ok(());
            }
            Ok(_) => return Err(HostError::NotADirectory(p.into())),
            // Missing, or below a file (ENOTDIR): look at the parent to say which.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR) => {
                match p.parent() {
                    Some(parent) if !parent.as_os_str().is_empty() => p = parent,
                    _ => return Ok(()),
                }
            }
            Err(source) => return Err(HostError::Stat { path: p.into(), source }),
        }
    }
}

/// The name of a kernel filesystem of `statfs`'s `f_type` that holds no files of anyone's.
fn kernel_filesystem(f_type: i64) -> Option<&'static str> {
    Some(match f_type {
        0x9fa0 => "proc",
        0x6265_6572 => "sysfs",
        0x0027_e0eb => "cgroup",
        0x6367_7270 => "cgroup2",
        0x1cd1 => "devpts",
        0x6462_6720 => "debugfs",
        0x7472_6163 => "tracefs",
        0x7363_6673 => "securityfs",
        0xcafe_4a11 => "bpf",
        0x6265_6570 => "configfs",
        _ => return None,
    })
}

impl ApiConfig {
    /// Whether the API address is one the agent can listen on: its IP must belong to
    /// this machine. Checked by binding the IP with port 0, so the real port (which a
    /// running agent holds) is not needed. Empty disables the API and is fine.
    pub fn check_bindable(&self) -> Result<(), HostError> {
        // `check` has made sure a non-empty address parses.
        let Ok(addr) = self.listen.parse::<SocketAddr>() else { return Ok(()) };
        std::net::TcpListener::bind(SocketAddr::new(addr.ip(), 0)).map(drop).map_err(|source| HostError::NotLocal {
            listen: self.listen.clone(),
            ip: addr.ip(),
            source,
        })
    }
}
