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
//!
//! The file has its own types here, converted to and from the bookkeeping's (`state`), so
//! the format stays put when the state or the runtime's device options change shape.
//! This module imports `state`; `state` knows nothing of the file.

use super::state::{Allocation, DeviceState, PodDevices, Restored};
use crate::node::runtime::devices::{DeviceOptions, DeviceSpec, MountSpec};
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
    pub alloc_resp: AllocResp,
}

/// The part of a plugin's `ContainerAllocateResponse` the agent keeps, as JSON. Empty
/// fields are left out; missing ones read as empty.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AllocResp {
    /// Environment variables.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub envs: BTreeMap<String, String>,
    /// Mounts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
    /// Device nodes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceNode>,
    /// Annotations.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// CDI device names.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cdi_devices: Vec<String>,
}

/// A mount in an allocate response.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Mount {
    /// Path inside the container.
    pub container_path: String,
    /// Path on the host.
    pub host_path: String,
    /// Read-only mount.
    pub read_only: bool,
}

/// A device node in an allocate response.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DeviceNode {
    /// Path inside the container.
    pub container_path: String,
    /// Path on the host.
    pub host_path: String,
    /// cgroup device permissions.
    pub permissions: String,
}

impl From<&DeviceOptions> for AllocResp {
    fn from(o: &DeviceOptions) -> Self {
        AllocResp {
            envs: o.envs.clone(),
            mounts: o
                .mounts
                .iter()
                .map(|m| Mount {
                    container_path: m.container_path.clone(),
                    host_path: m.host_path.clone(),
                    read_only: m.read_only,
                })
                .collect(),
            devices: o
                .devices
                .iter()
                .map(|d| DeviceNode {
                    container_path: d.container_path.clone(),
                    host_path: d.host_path.clone(),
                    permissions: d.permissions.clone(),
                })
                .collect(),
            annotations: o.annotations.clone(),
            cdi_devices: o.cdi_devices.clone(),
        }
    }
}

impl From<AllocResp> for DeviceOptions {
    fn from(r: AllocResp) -> Self {
        DeviceOptions {
            envs: r.envs,
            mounts: r
                .mounts
                .into_iter()
                .map(|m| MountSpec { container_path: m.container_path, host_path: m.host_path, read_only: m.read_only })
                .collect(),
            devices: r
                .devices
                .into_iter()
                .map(|d| DeviceSpec {
                    container_path: d.container_path,
                    host_path: d.host_path,
                    permissions: d.permissions,
                })
                .collect(),
            annotations: r.annotations,
            cdi_devices: r.cdi_devices,
        }
    }
}

/// One entry per (pod, container, resource), in that order.
pub fn entries(pods: &PodDevices) -> Vec<PodDeviceEntry> {
    let mut out = Vec::new();
    for (uid, containers) in pods {
        for (container, resources) in containers {
            for (resource, a) in resources {
                out.push(PodDeviceEntry {
                    pod_uid: uid.clone(),
                    container_name: container.clone(),
                    resource_name: resource.clone(),
                    device_ids: a.device_ids.clone(),
                    alloc_resp: AllocResp::from(&a.options),
                });
            }
        }
    }
    out
}

/// What the checkpoint keeps of the state: allocations, and each resource's healthy devices.
impl From<&DeviceState> for CheckpointData {
    fn from(st: &DeviceState) -> Self {
        CheckpointData {
            pod_device_entries: entries(&st.pods),
            registered_devices: st
                .resources
                .iter()
                .map(|(n, r)| (n.clone(), r.healthy.iter().cloned().collect()))
                .collect(),
        }
    }
}

/// What an agent restart gets back: the allocations, and the resource names (their devices
/// are listed again by the plugins when they register).
impl From<CheckpointData> for Restored {
    fn from(data: CheckpointData) -> Self {
        let mut pods = PodDevices::new();
        for e in data.pod_device_entries {
            let a = Allocation { device_ids: e.device_ids, options: e.alloc_resp.into() };
            pods.entry(e.pod_uid).or_default().entry(e.container_name).or_default().insert(e.resource_name, a);
        }
        Restored { pods, resources: data.registered_devices.into_keys().collect() }
    }
}

/// Why the checkpoint could not be written or read back.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The data could not be encoded as JSON.
    #[error("cannot encode the checkpoint")]
    Encode(#[source] serde_json::Error),
    /// The file could not be written.
    #[error("cannot write {}", path.display())]
    Write {
        /// The checkpoint's path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
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
pub fn save(dir: &Path, data: &CheckpointData) -> Result<(), CheckpointError> {
    let body = serde_json::to_string(data).map_err(CheckpointError::Encode)?;
    let file = File {
        version: VERSION,
        checksum: fnv1a64(body.as_bytes()),
        data: serde_json::value::RawValue::from_string(body).map_err(CheckpointError::Encode)?,
    };
    let text = serde_json::to_vec(&file).map_err(CheckpointError::Encode)?;
    let p = path(dir);
    // Owner-only whatever `state_group` says: the plugin directory is not the state directory.
    crate::base::state_files::write_atomic_as(&p, &text, crate::base::state_files::StateAccess::default())
        .map_err(|source| CheckpointError::Write { path: p, source })
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
    let data = match serde_json::from_slice(file.data.get().as_bytes()) {
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
    use crate::base::errors::Chain;

    fn load_err(dir: &Path) -> String {
        Chain(&load(dir).unwrap_err()).to_string()
    }

    fn sample() -> CheckpointData {
        let mut alloc = AllocResp::default();
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

    /// A checkpoint exactly as the agent wrote it before the file had types of its own.
    const WRITTEN_BEFORE: &str = r#"{"version":1,"checksum":"fnv1a64:b2dbd81a0a2a884b","data":{"podDeviceEntries":[{"podUID":"u1","containerName":"app","resourceName":"example.com/dev","deviceIDs":{"-1":["dev0"],"1":["dev1"]},"allocResp":{"envs":{"DEV":"dev0,dev1"},"mounts":[{"containerPath":"/var/lib/dev","hostPath":"/srv/dev","readOnly":true}],"devices":[{"containerPath":"/dev/example-dev0","hostPath":"/dev/null","permissions":"rw"}],"annotations":{"example.com/note":"x"},"cdiDevices":["example.com/dev=dev0"]}},{"podUID":"u2","containerName":"init","resourceName":"example.com/other","deviceIDs":{"-1":["o0"]},"allocResp":{}}],"registeredDevices":{"example.com/dev":["dev0","dev1","dev2"],"example.com/other":[]}}}"#;

    #[test]
    fn a_checkpoint_written_by_earlier_agents_still_loads_and_is_written_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(path(dir.path()), WRITTEN_BEFORE).unwrap();
        let data = load(dir.path()).unwrap().unwrap();
        let restored = Restored::from(data.clone());
        assert_eq!(restored.resources, ["example.com/dev", "example.com/other"]);
        let a = &restored.pods["u1"]["app"]["example.com/dev"];
        assert_eq!(a.device_ids, BTreeMap::from([(-1, vec!["dev0".to_string()]), (1, vec!["dev1".to_string()])]));
        assert_eq!(a.options.envs["DEV"], "dev0,dev1");
        assert_eq!(
            a.options.mounts[0],
            MountSpec { container_path: "/var/lib/dev".into(), host_path: "/srv/dev".into(), read_only: true }
        );
        assert_eq!(a.options.devices[0].host_path, "/dev/null");
        assert_eq!(a.options.annotations["example.com/note"], "x");
        assert_eq!(a.options.cdi_devices, ["example.com/dev=dev0"]);
        assert_eq!(restored.pods["u2"]["init"]["example.com/other"].options, DeviceOptions::default());
        // Through the state and back: byte for byte what was read.
        let mut st = DeviceState::new(std::time::Duration::from_secs(300), 16);
        st.restore(restored, std::time::Instant::now());
        let mut again = CheckpointData::from(&st);
        // The state keeps no devices until the plugins list them again.
        again.registered_devices = data.registered_devices.clone();
        assert_eq!(again, data);
        save(dir.path(), &again).unwrap();
        assert_eq!(std::fs::read_to_string(path(dir.path())).unwrap(), WRITTEN_BEFORE);
    }

    #[test]
    fn allocate_responses_convert_both_ways_without_loss() {
        let mut o = DeviceOptions::default();
        o.envs.insert("A".into(), "1".into());
        o.mounts.push(MountSpec { container_path: "/c".into(), host_path: "/h".into(), read_only: false });
        o.devices.push(DeviceSpec {
            container_path: "/dev/x".into(),
            host_path: "/dev/y".into(),
            permissions: "rwm".into(),
        });
        o.annotations.insert("k".into(), "v".into());
        o.cdi_devices.push("vendor.com/dev=1".into());
        assert_eq!(DeviceOptions::from(AllocResp::from(&o)), o);
        assert_eq!(serde_json::to_value(AllocResp::from(&o)).unwrap(), serde_json::to_value(&o).unwrap());
    }

    #[test]
    fn a_write_failure_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("no-such-dir");
        let e = save(&gone, &sample()).unwrap_err();
        assert!(matches!(e, CheckpointError::Write { .. }));
        assert!(e.to_string().starts_with(&format!("cannot write {}", path(&gone).display())), "{e}");
    }
}
