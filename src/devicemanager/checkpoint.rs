//! The device checkpoint: which devices each container holds, with the plugin's allocate
//! response, and each resource's healthy devices. It lives in the plugin directory (which
//! the agent cleans of sockets, never of this file) as
//! `ferrolet_internal_checkpoint`, format version 1:
//!
//! ```json
//! {"version":1,"checksum":"fnv1a64:5c0e2a7d1d3c9f01","data":{
//!   "podDeviceEntries":[{"podUID":"…","containerName":"app","resourceName":"example.com/dev",
//!     "deviceIDs":{"-1":["dev0","dev1"]},"allocResp":{"envs":{"DEV":"dev0,dev1"}}}],
//!   "registeredDevices":{"example.com/dev":["dev0","dev1","dev2"]}}}
//! ```
//!
//! `deviceIDs` groups the IDs by NUMA node (`-1`: no topology), as kubelet does;
//! `allocResp` is the `ContainerAllocateResponse` as JSON (envs, mounts, devices,
//! annotations, cdiDevices). `checksum` is FNV-1a (64 bit) over the compact JSON of `data`
//! exactly as written. Unlike kubelet's file (a Go-specific spew hash over Go type names,
//! protobuf in base64) any tool can read and verify it. Writes go to a temporary file that
//! is fsynced and renamed over the old one, so a crash leaves the old or the new checkpoint.

use crate::runtime::devices::DeviceOptions;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The checkpoint's file name in the plugin directory.
pub const FILE_NAME: &str = "ferrolet_internal_checkpoint";
/// The format version this build reads and writes.
pub const VERSION: u32 = 1;
/// Largest checkpoint read back (64 resources of 1024 devices and their allocations fit
/// many times over); a larger file is treated as corrupt.
pub const MAX_SIZE: u64 = 64 << 20;

/// What the checkpoint holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckpointData {
    /// One entry per (pod, container, resource).
    pub pod_device_entries: Vec<PodDeviceEntry>,
    /// Healthy devices per resource.
    pub registered_devices: BTreeMap<String, Vec<String>>,
}

/// One container's devices of one resource.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodDeviceEntry {
    /// Pod uid.
    #[serde(rename = "podUID")]
    pub pod_uid: String,
    /// Container name.
    pub container_name: String,
    /// Resource name.
    pub resource_name: String,
    /// Device IDs by NUMA node.
    #[serde(rename = "deviceIDs")]
    pub device_ids: BTreeMap<i64, Vec<String>>,
    /// The plugin's allocate response.
    pub alloc_resp: DeviceOptions,
}

/// Why the checkpoint could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The file could not be opened or read, is not a regular file, or is too large.
    #[error("cannot read {}", path.display())]
    Read {
        /// The checkpoint's path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a checkpoint's JSON.
    #[error("{}: not a checkpoint", path.display())]
    Decode {
        /// The checkpoint's path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// The file is of a format version this build does not read.
    #[error("{}: version {version} is not supported (this build reads {VERSION})", path.display())]
    UnsupportedVersion {
        /// The checkpoint's path.
        path: PathBuf,
        /// The version recorded.
        version: u32,
    },
    /// The content does not match its recorded checksum.
    #[error("{}: checksum mismatch (recorded {recorded}, content has {computed})", path.display())]
    VerifyChecksum {
        /// The checkpoint's path.
        path: PathBuf,
        /// The checksum in the file.
        recorded: String,
        /// The checksum of the content.
        computed: String,
    },
    /// The checksummed data does not decode.
    #[error("{}: data", path.display())]
    DecodeData {
        /// The checkpoint's path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    version: u32,
    checksum: String,
    data: Box<serde_json::value::RawValue>,
}

fn fnv1a64(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("fnv1a64:{h:016x}")
}

/// The checkpoint's path in a plugin directory.
pub fn path(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

/// Writes the checkpoint atomically (temporary file, fsync, rename, fsync of the directory).
pub fn save(dir: &Path, data: &CheckpointData) -> std::io::Result<()> {
    let body = serde_json::to_string(data).map_err(std::io::Error::other)?;
    let file = File {
        version: VERSION,
        checksum: fnv1a64(body.as_bytes()),
        data: serde_json::value::RawValue::from_string(body).map_err(std::io::Error::other)?,
    };
    let text = serde_json::to_vec(&file).map_err(std::io::Error::other)?;
    // Owner-only whatever `state_group` says: the plugin directory is not the state directory.
    crate::util::write_atomic_as(&path(dir), &text, crate::util::StateAccess::default())
}

/// Reads the checkpoint: `Ok(None)` when there is none, `Err` (saying what is wrong) when
/// it is unreadable, corrupt, or of another version.
pub fn load(dir: &Path) -> Result<Option<CheckpointData>, CheckpointError> {
    let p = path(dir);
    let read = || -> std::io::Result<Vec<u8>> {
        // O_NOFOLLOW: a symlink in the checkpoint's place is refused, not read through.
        // O_NONBLOCK: a FIFO in its place (plugins may create files in this directory)
        // must not block the start; it is refused as not a regular file.
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&p)?;
        if !f.metadata()?.is_file() {
            return Err(std::io::Error::other("not a regular file"));
        }
        let mut text = Vec::new();
        f.take(MAX_SIZE + 1).read_to_end(&mut text)?;
        if text.len() as u64 > MAX_SIZE {
            return Err(std::io::Error::other(format!("larger than {MAX_SIZE} bytes")));
        }
        Ok(text)
    };
    let text = match read() {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(CheckpointError::Read { path: p, source }),
    };
    let file: File = match serde_json::from_slice(&text) {
        Ok(f) => f,
        Err(source) => return Err(CheckpointError::Decode { path: p, source }),
    };
    if file.version != VERSION {
        return Err(CheckpointError::UnsupportedVersion { path: p, version: file.version });
    }
    let computed = fnv1a64(file.data.get().as_bytes());
    if computed != file.checksum {
        return Err(CheckpointError::VerifyChecksum { path: p, recorded: file.checksum, computed });
    }
    let data = match serde_json::from_str(file.data.get()) {
        Ok(d) => d,
        Err(source) => return Err(CheckpointError::DecodeData { path: p, source }),
    };
    Ok(Some(data))
}

/// Moves an unusable checkpoint aside (to `<name>.corrupt`) so the agent can start empty
/// and a human can still look at it.
pub fn quarantine(dir: &Path) -> Option<PathBuf> {
    let aside = dir.join(format!("{FILE_NAME}.corrupt"));
    std::fs::rename(path(dir), &aside).ok().map(|_| aside)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::Chain;

    fn load_err(dir: &Path) -> String {
        Chain(&load(dir).unwrap_err()).to_string()
    }

    fn sample() -> CheckpointData {
        let mut alloc = DeviceOptions::default();
        alloc.envs.insert("DEV".into(), "dev0".into());
        CheckpointData {
            pod_device_entries: vec![PodDeviceEntry {
                pod_uid: "u1".into(),
                container_name: "app".into(),
                resource_name: "example.com/dev".into(),
                device_ids: BTreeMap::from([(-1, vec!["dev0".into()]), (0, vec!["dev1".into()])]),
                alloc_resp: alloc,
            }],
            registered_devices: BTreeMap::from([("example.com/dev".into(), vec!["dev0".into(), "dev1".into()])]),
        }
    }

    #[test]
    fn round_trip_and_documented_shape() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()).unwrap(), None);
        save(dir.path(), &sample()).unwrap();
        assert_eq!(load(dir.path()).unwrap(), Some(sample()));
        let text = std::fs::read_to_string(path(dir.path())).unwrap();
        assert!(text.starts_with("{\"version\":1,\"checksum\":\"fnv1a64:"), "{text}");
        assert!(text.contains("\"deviceIDs\":{\"-1\":[\"dev0\"],\"0\":[\"dev1\"]}"), "{text}");
        assert!(text.contains("\"podUID\":\"u1\""), "{text}");
    }

    #[test]
    fn corruption_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        save(dir.path(), &sample()).unwrap();
        let p = path(dir.path());
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, text.replace("dev1", "dev9")).unwrap();
        assert!(matches!(load(dir.path()), Err(CheckpointError::VerifyChecksum { .. })));
        assert!(load_err(dir.path()).contains("checksum mismatch"));
        std::fs::write(&p, &text[..text.len() / 2]).unwrap();
        assert!(matches!(load(dir.path()), Err(CheckpointError::Decode { .. })));
        assert!(load_err(dir.path()).contains("not a checkpoint: "));
        std::fs::write(&p, text.replace("\"version\":1", "\"version\":7")).unwrap();
        assert!(matches!(load(dir.path()), Err(CheckpointError::UnsupportedVersion { version: 7, .. })));
        assert!(load_err(dir.path()).contains("version 7 is not supported"));
        assert!(quarantine(dir.path()).is_some());
        assert_eq!(load(dir.path()).unwrap(), None);
    }

    #[test]
    fn a_fifo_in_the_checkpoints_place_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let c = std::ffi::CString::new(path(dir.path()).as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = load_err(dir.path());
        assert!(e.ends_with("not a regular file"), "{e}");
    }

    #[test]
    fn symlinks_in_the_checkpoints_place_are_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join(format!(".{FILE_NAME}.tmp"))).unwrap();
        save(dir.path(), &sample()).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious", "not written through the link");
        assert_eq!(load(dir.path()).unwrap(), Some(sample()));
        std::fs::remove_file(path(dir.path())).unwrap();
        save(outside.path(), &sample()).unwrap();
        std::os::unix::fs::symlink(path(outside.path()), path(dir.path())).unwrap();
        let e = load_err(dir.path());
        assert!(e.contains("Too many levels of symbolic links") || e.contains("symbolic"), "{e}");
    }
}
