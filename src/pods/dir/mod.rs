//! A pod's directory on the node (`<state_dir>/pods/<uid>`, kubelet's
//! `/var/lib/kubelet/pods/<uid>`) and the volumes in it: the executor over the decisions of
//! `api::volumes`. The pod manager prepares a pod's volumes before its sandbox
//! (`PodDir::prepare`), asks each container's mounts before it is created
//! (`PodDir::mounts`), and removes the directory with the pod (`PodDir::remove`); what a
//! crash leaves behind is removed once every source has reported (`sweep`).
//!
//! Layout, as kubelet's: `volumes/kubernetes.io~empty-dir/<name>` (a tmpfs there for
//! `medium: Memory`), `volumes/kubernetes.io~downward-api/<name>`,
//! `volumes/kubernetes.io~configmap/<name>`, `volumes/kubernetes.io~secret/<name>` and
//! `volumes/kubernetes.io~projected/<name>` (both always a tmpfs), and the pod's hosts file
//! `etc-hosts`. The files of the last four are written by the atomic writer (`atomic`):
//! `..data` names the current version's directory, and each file's name is a link through it. A
//! `hostPath` volume is the node's own path, checked (and made, for the `…OrCreate` types)
//! but never removed.
//!
//! Nothing is removed through a mount: a directory under which anything is still mounted
//! (a tmpfs that would not unmount, a mount a container propagated back) is left and said.

pub mod atomic;

use crate::api::downward::Facts;
use crate::api::volumes::{self, FileKind, HostPathAction, HostPathType};
use crate::api::Volume;
use crate::api::{Container, Pod};
use crate::base::errors::Chain;
use crate::node::objects::{payload, ObjectsView};
use crate::node::runtime::{Mount, Propagation};
use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// The directory in a pod's directory where each `subPath` is mounted for the runtime.
const SUB_PATHS: &str = "volume-subpaths";

/// At most this many pod directories are looked at by one `sweep`.
const MAX_SWEPT: usize = 4096;

/// A volume that could not be made ready, in kubelet's words (`FailedMount`).
#[derive(Debug, thiserror::Error)]
#[error("MountVolume.SetUp failed for volume {volume:?} : {message}")]
pub struct VolumeError {
    /// The volume's name.
    pub volume: String,
    /// What went wrong, with its cause.
    pub message: String,
}

/// The directory of pod `uid` under `pods_root`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodDir(PathBuf);

impl PodDir {
    /// Pod `uid`'s directory under `pods_root` (`<state_dir>/pods`).
    pub fn new(pods_root: &Path, uid: &str) -> PodDir {
        PodDir(pods_root.join(uid))
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The pod's hosts file (kubelet's `etc-hosts`), mounted at `/etc/hosts`.
    pub fn etc_hosts(&self) -> PathBuf {
        self.0.join("etc-hosts")
    }

    /// Makes (or empties) the file container `name`'s instance `attempt` writes its
    /// termination message to, writable by any uid as kubelet makes it; returns its path.
    pub fn termination_log(&self, name: &str, attempt: u32) -> io::Result<PathBuf> {
        let dir = self.0.join("containers").join(name);
        fs::DirBuilder::new().recursive(true).mode(0o750).create(&dir)?;
        let path = dir.join(format!("{attempt}.termination-log"));
        let f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)?;
        f.set_permissions(fs::Permissions::from_mode(0o666))?;
        Ok(path)
    }

    /// Where volume `v`'s content is on the node: its directory here, or a `hostPath`.
    pub fn volume_path(&self, v: &Volume) -> PathBuf {
        if let Some(h) = &v.host_path {
            return PathBuf::from(&h.path);
        }
        let plugin = if v.empty_dir.is_some() {
            "kubernetes.io~empty-dir"
        } else if v.downward_api.is_some() {
            "kubernetes.io~downward-api"
        } else if v.config_map.is_some() {
            "kubernetes.io~configmap"
        } else if v.secret.is_some() {
            "kubernetes.io~secret"
        } else {
            "kubernetes.io~projected"
        };
        self.0.join("volumes").join(plugin).join(&v.name)
    }

    /// Makes every volume of `pod` ready (idempotent: an agent restart finds them made). An
    /// `emptyDir` is a directory any uid may write (0777), or a tmpfs of
    /// `api::volumes::memory_volume_size` (`node_memory`: the node's allocatable memory);
    /// a `hostPath` passes kubelet's type check; the files of `downwardAPI`, `configMap`,
    /// `secret` and `projected` volumes are written (`write_files`). `fsGroup` owns what is
    /// made here.
    pub fn prepare(&self, pod: &Pod, files: &Files, node_memory: i64) -> Result<(), VolumeError> {
        let fs_group = fs_group(pod);
        for v in &pod.spec.volumes {
            let fail = |what: &str, e: &dyn std::fmt::Display| VolumeError {
                volume: v.name.clone(),
                message: format!("{what}: {e}"),
            };
            let path = self.volume_path(v);
            if let Some(h) = &v.host_path {
                let type_ = HostPathType::parse(h.type_.as_deref().unwrap_or_default()).unwrap_or(HostPathType::Unset);
                host_path(&path, type_).map_err(|message| VolumeError { volume: v.name.clone(), message })?;
                continue;
            }
            let made = make_dir(&path).map_err(|e| fail(&format!("cannot make {}", path.display()), &e))?;
            let mut mounted = false;
            if on_tmpfs(v)
                && !is_mount_point(&path).map_err(|e| fail(&format!("cannot inspect {}", path.display()), &e))?
            {
                let sized = v.empty_dir.clone().unwrap_or_default();
                let size = volumes::memory_volume_size(&sized, pod, node_memory);
                mount_tmpfs(&path, size)
                    .map_err(|e| fail(&format!("cannot mount a tmpfs on {}", path.display()), &e))?;
                mounted = true;
            }
            let holds_files = is_file_volume(v);
            if made || mounted {
                let mode = if holds_files { 0o755 } else { 0o777 };
                fs::set_permissions(&path, fs::Permissions::from_mode(mode))
                    .map_err(|e| fail(&format!("cannot set the mode of {}", path.display()), &e))?;
                if let Some(gid) = fs_group {
                    own(&path, gid, holds_files)
                        .map_err(|e| fail(&format!("cannot set fsGroup {gid} on {}", path.display()), &e))?;
                }
            }
            if holds_files {
                self.write_files(pod, v, files, !on_tmpfs(v))?;
            }
        }
        Ok(())
    }

    /// Writes the files of `pod`'s volumes again where what they are made of changed (an
    /// updated ConfigMap, a renewed token); the files of volumes not made yet are left to
    /// `prepare`. What cannot be written keeps what it held, and is returned.
    pub fn refresh(&self, pod: &Pod, files: &Files) -> Vec<VolumeError> {
        let made = |v: &&Volume| is_file_volume(v) && self.volume_path(v).is_dir();
        pod.spec
            .volumes
            .iter()
            .filter(made)
            .filter_map(|v| self.write_files(pod, v, files, !on_tmpfs(v)).err())
            .collect()
    }

    /// Writes the files of volume `v` (`downwardAPI`, `configMap`, `secret`, `projected`)
    /// with the atomic writer: a reader sees the old files or the new ones, never a mix, and
    /// files already as they should be are not written again. `sync`: the volume is on disk.
    pub fn write_files(&self, pod: &Pod, v: &Volume, files: &Files, sync: bool) -> Result<(), VolumeError> {
        let fail = |message: String| VolumeError { volume: v.name.clone(), message };
        let downward = |item: &crate::api::types::DownwardApiVolumeFile| volumes::downward_file(item, pod, files.facts);
        let Some(payload) = payload::volume_payload(v, pod, files.objects, &downward, files.now) else { return Ok(()) };
        let payload: BTreeMap<String, atomic::FileProjection> = payload
            .map_err(fail)?
            .into_iter()
            .map(|(path, f)| (path, atomic::FileProjection { data: f.data, mode: f.mode }))
            .collect();
        let payload = atomic::Payload::new(payload).map_err(|e| fail(Chain(&e).to_string()))?;
        let path = self.volume_path(v);
        atomic::write(&path, &payload, atomic::WriteOptions { gid: fs_group(pod), sync })
            .map_err(|e| fail(Chain(&e).to_string()))?;
        Ok(())
    }

    /// What container `c` of `pod` mounts, its environment being `env` (for
    /// `subPathExpr`): each volume mount's host path (a `subPath` inside the volume, made
    /// in an `emptyDir` or `hostPath` when missing, never through a symbolic link), in
    /// order. Downward API volumes are always read-only, as kubelet mounts them.
    pub fn mounts(&self, pod: &Pod, c: &Container, env: &[(String, String)]) -> Result<Vec<Mount>, String> {
        let mut out = Vec::with_capacity(c.volume_mounts.len());
        for (i, m) in c.volume_mounts.iter().enumerate() {
            // Validation makes every mount name one of the pod's volumes.
            let Some(v) = pod.spec.volumes.iter().find(|v| v.name == m.name) else {
                return Err(format!("volumeMounts: volume {:?} is not in the pod", m.name));
            };
            let mut base = self.volume_path(v);
            let sub = volumes::sub_path(m, env)?;
            if !sub.is_empty() && is_file_volume(v) {
                // The files are in the version `..data` names now: a subPath mount of one
                // keeps that version (it is not updated, as with kubelet).
                match atomic::current_data_dir(&base) {
                    Ok(Some(dir)) => base = dir,
                    Ok(None) => {}
                    Err(e) => return Err(format!("volume {:?}: cannot read {}: {e}", m.name, base.display())),
                }
            }
            let host_path = if sub.is_empty() {
                base
            } else {
                // kubelet makes a missing subPath 0755 and root's, which a non-root
                // container cannot write; in an emptyDir it is made as the volume is.
                let make = match (&v.empty_dir, &v.host_path) {
                    (Some(_), _) => Some(MakeDir { mode: 0o777, gid: fs_group(pod) }),
                    (None, Some(_)) => Some(MakeDir { mode: 0o755, gid: None }),
                    _ => None,
                };
                let fail = |e: String| format!("volume {:?} subPath {sub:?}: {e}", m.name);
                let fd = open_sub_path(&base, &sub, make).map_err(fail)?;
                // The runtime is given a mount of what was opened, in a directory of
                // ferrolet's that no container can write (kubelet's `volume-subpaths`).
                let pinned = self.sub_path_pin(&m.name, &c.name, i);
                pin(&fd, &pinned).map_err(|e| fail(format!("cannot mount it at {}: {e}", pinned.display())))?;
                pinned
            };
            out.push(Mount {
                container_path: m.mount_path.clone(),
                host_path,
                read_only: m.read_only || is_file_volume(v),
                propagation: match m.mount_propagation.as_deref() {
                    Some("HostToContainer") => Propagation::HostToContainer,
                    Some("Bidirectional") => Propagation::Bidirectional,
                    _ => Propagation::Private,
                },
            });
        }
        Ok(out)
    }

    /// Where mount `index` of container `container`, a `subPath` of volume `volume`, is
    /// mounted for the runtime to take.
    fn sub_path_pin(&self, volume: &str, container: &str, index: usize) -> PathBuf {
        self.0.join(SUB_PATHS).join(volume).join(container).join(index.to_string())
    }

    /// Removes the pod's directory: its `subPath` mounts and tmpfs volumes unmounted, then everything, unless
    /// something is still mounted below it (then nothing is removed, and the error says
    /// what). A directory already gone is fine.
    pub fn remove(&self) -> io::Result<()> {
        // Latest first, so a mount made over another goes before it.
        for m in mounts_below(&self.0.join(SUB_PATHS))?.iter().rev() {
            unmount(Path::new(m))?;
        }
        for plugin in ["kubernetes.io~empty-dir", "kubernetes.io~secret", "kubernetes.io~projected"] {
            match fs::read_dir(self.0.join("volumes").join(plugin)) {
                Ok(entries) => {
                    for entry in entries.take(volumes::MAX_VOLUMES) {
                        let path = entry?.path();
                        if is_mount_point(&path)? {
                            unmount(&path)?;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        if let Some(m) = mounts_below(&self.0)?.first() {
            return Err(io::Error::other(format!("{m} is still mounted; the pod's directory is left as it is")));
        }
        match fs::remove_dir_all(&self.0) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// Removes the directories under `pods_root` of pods `keep` does not want (left by a crash
/// between a pod's removal from the runtime and its directory's). Only names that are pod
/// uids are looked at; each failure is logged.
pub fn sweep(pods_root: &Path, keep: impl Fn(&str) -> bool) {
    let entries = match fs::read_dir(pods_root) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return,
        Err(e) => {
            log::warn!("volumes: cannot list {}: {e}", pods_root.display());
            return;
        }
    };
    for entry in entries.take(MAX_SWEPT) {
        let Ok(entry) = entry else { break };
        let name = entry.file_name().to_string_lossy().into_owned();
        if !crate::api::validation::is_uid(&name) || keep(&name) {
            continue;
        }
        match PodDir::new(pods_root, &name).remove() {
            Ok(()) => log::info!("volumes: removed the directory of pod {name}, which no longer exists"),
            Err(e) => log::warn!("volumes: cannot remove the directory of pod {name}: {e}"),
        }
    }
}

/// The pod's `fsGroup`.
fn fs_group(pod: &Pod) -> Option<u32> {
    // Validation keeps it within 0..=i32::MAX.
    pod.spec.security_context.as_ref().and_then(|s| s.fs_group).map(|g| g as u32)
}

/// How a missing `subPath` directory is made: its mode, and the `fsGroup` that owns it.
#[derive(Clone, Copy, Debug)]
struct MakeDir {
    mode: u32,
    gid: Option<u32>,
}

/// What is at `path` (a symbolic link followed, as kubelet's check does).
fn file_kind(path: &Path) -> io::Result<FileKind> {
    let t = match fs::metadata(path) {
        Ok(m) => m.file_type(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(FileKind::Missing),
        Err(e) => return Err(e),
    };
    Ok(if t.is_dir() {
        FileKind::Directory
    } else if t.is_file() {
        FileKind::File
    } else if t.is_socket() {
        FileKind::Socket
    } else if t.is_char_device() {
        FileKind::CharDevice
    } else if t.is_block_device() {
        FileKind::BlockDevice
    } else {
        FileKind::Other
    })
}

/// kubelet's `hostPath` type check at `path`, making what `…OrCreate` asks for.
fn host_path(path: &Path, type_: HostPathType) -> Result<(), String> {
    let shown = path.display().to_string();
    let found = file_kind(path).map_err(|e| format!("cannot inspect {shown}: {e}"))?;
    match volumes::host_path_check(type_, &shown, found)? {
        HostPathAction::Use => Ok(()),
        HostPathAction::MakeDirectory => fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(path)
            .map_err(|e| format!("cannot make {shown}: {e}")),
        // kubelet makes the file, not its directory.
        HostPathAction::MakeFile => fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(path)
            .map(drop)
            .map_err(|e| format!("cannot make {shown}: {e}")),
    }
}

/// Makes directory `path` (and its parents); true when it was made now.
fn make_dir(path: &Path) -> io::Result<bool> {
    if let Some(parent) = path.parent() {
        fs::DirBuilder::new().recursive(true).mode(0o750).create(parent)?;
    }
    match fs::DirBuilder::new().mode(0o750).create(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether volume `v` holds files ferrolet writes (with the atomic writer), read-only to
/// its containers.
pub fn is_file_volume(v: &Volume) -> bool {
    v.downward_api.is_some() || v.config_map.is_some() || v.secret.is_some() || v.projected.is_some()
}

/// Whether volume `v` is a tmpfs: an `emptyDir` of `medium: Memory`, and, as kubelet makes
/// them, a Secret's and a projected volume's (tokens, Secrets), never written to the disk.
fn on_tmpfs(v: &Volume) -> bool {
    v.empty_dir.as_ref().is_some_and(|d| d.medium == "Memory") || v.secret.is_some() || v.projected.is_some()
}

/// What the files of a volume are made from besides the pod.
pub struct Files<'a> {
    /// What the downward API reads of the node.
    pub facts: &'a Facts,
    /// ConfigMaps, Secrets and tokens.
    pub objects: &'a ObjectsView,
    /// Now, for tokens' expiry.
    pub now: std::time::SystemTime,
}

/// `fsGroup` ownership of everything under `root` (kubelet's `SetVolumeOwnership`): group
/// `gid`, and the group's access (`api::volumes::fs_group_mode`). Symbolic links are not
/// followed.
fn own(root: &Path, gid: u32, read_only: bool) -> io::Result<()> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = fs::symlink_metadata(&path)?;
        if meta.file_type().is_symlink() {
            continue;
        }
        std::os::unix::fs::lchown(&path, None, Some(gid))?;
        let mode = volumes::fs_group_mode(meta.mode() & 0o7777, meta.is_dir(), read_only);
        fs::set_permissions(&path, fs::Permissions::from_mode(mode))?;
        if meta.is_dir() {
            for entry in fs::read_dir(&path)? {
                stack.push(entry?.path());
            }
        }
    }
    Ok(())
}

/// `openat(dir, name, flags | O_CLOEXEC)`, owned as a `File` (an `O_PATH` descriptor
/// answers `metadata`, and `/proc/self/fd/N` names what it holds).
fn open_at(dir: RawFd, name: &std::ffi::CStr, flags: libc::c_int) -> io::Result<fs::File> {
    // SAFETY: a valid NUL-terminated name; the result is checked.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just opened, owned by nobody else.
    Ok(unsafe { fs::File::from_raw_fd(fd) })
}

/// `sub` below the volume at `base`, opened one element at a time under the descriptor of
/// the one before (`O_PATH | O_NOFOLLOW`): a symbolic link on the way is refused, and what
/// the returned descriptor holds is what was checked, whatever is renamed meanwhile (a
/// container could swap a directory for a link to the node's files between a check by path
/// and a mount by path: CVE-2021-25741). A missing directory is made as `make` says, else
/// refused.
fn open_sub_path(base: &Path, sub: &str, make: Option<MakeDir>) -> Result<fs::File, String> {
    let mut dir = open_at(libc::AT_FDCWD, &cstring(base).map_err(|e| e.to_string())?, libc::O_PATH | libc::O_DIRECTORY)
        .map_err(|e| format!("{}: {e}", base.display()))?;
    let mut path = base.to_path_buf();
    let parts: Vec<Component> = Path::new(sub).components().filter(|c| *c != Component::CurDir).collect();
    for (i, part) in parts.iter().enumerate() {
        let Component::Normal(name) = part else {
            return Err("must be a relative path without '..'".into());
        };
        path.push(name);
        let shown = path.display();
        let cname = cstring(Path::new(name)).map_err(|e| e.to_string())?;
        let fd = match open_at(dir.as_raw_fd(), &cname, libc::O_PATH | libc::O_NOFOLLOW) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound && make.is_some() => {
                let how = make.unwrap_or(MakeDir { mode: 0o755, gid: None });
                make_sub_dir(&dir, &cname, how).map_err(|e| format!("cannot make {shown}: {e}"))?
            }
            Err(e) => return Err(format!("{shown}: {e}")),
        };
        let kind = fd.metadata().map_err(|e| format!("{shown}: {e}"))?.file_type();
        if kind.is_symlink() {
            return Err(format!("{shown} is a symbolic link, which is not followed"));
        }
        if !kind.is_dir() && i + 1 < parts.len() {
            return Err(format!("{shown} is not a directory"));
        }
        dir = fd;
    }
    Ok(dir)
}

/// Makes `name` in `dir` (its mode not narrowed by the umask, its group) and opens it. The
/// mode and group are set through the new directory's own descriptor, never by name.
fn make_sub_dir(dir: &fs::File, name: &std::ffi::CStr, how: MakeDir) -> io::Result<fs::File> {
    // SAFETY: a valid NUL-terminated name under an open directory.
    if unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), how.mode) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let made = open_at(dir.as_raw_fd(), name, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW)?;
    let mode = match how.gid {
        Some(gid) => {
            std::os::unix::fs::fchown(&made, None, Some(gid))?;
            volumes::fs_group_mode(how.mode, true, false)
        }
        None => how.mode,
    };
    made.set_permissions(fs::Permissions::from_mode(mode))?;
    Ok(made)
}

/// Bind-mounts what `fd` holds onto `target` (made as a directory or an empty file, as
/// the source is; a mount left there by the container's last instance is replaced), and
/// checks that the mount is that very file.
fn pin(fd: &fs::File, target: &Path) -> io::Result<()> {
    let want = fd.metadata()?;
    let is_dir = want.is_dir();
    if let Some(parent) = target.parent() {
        fs::DirBuilder::new().recursive(true).mode(0o750).create(parent)?;
    }
    // A bind mount on the same filesystem keeps its device number: the mount table says
    // what is mounted there.
    let shown = target.display().to_string();
    while mounts_below(target)?.contains(&shown) {
        unmount(target)?;
    }
    if let Ok(m) = fs::symlink_metadata(target) {
        if m.is_dir() != is_dir {
            if m.is_dir() {
                fs::remove_dir(target)?
            } else {
                fs::remove_file(target)?
            }
        }
    }
    let made = if is_dir {
        fs::DirBuilder::new().mode(0o750).create(target)
    } else {
        fs::OpenOptions::new().write(true).create_new(true).mode(0o640).open(target).map(drop)
    };
    match made {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    let source = std::ffi::CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    let dest = cstring(target)?;
    // SAFETY: valid NUL-terminated strings that outlive the call.
    let r = unsafe { libc::mount(source.as_ptr(), dest.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    let got = fs::metadata(target)?;
    if (got.dev(), got.ino()) != (want.dev(), want.ino()) {
        unmount(target)?;
        return Err(io::Error::other("the mounted file is not the one opened"));
    }
    Ok(())
}

/// Whether `path` is the root of a mount (its device differs from its parent's).
fn is_mount_point(path: &Path) -> io::Result<bool> {
    let own = fs::symlink_metadata(path)?;
    let parent = fs::symlink_metadata(path.join(".."))?;
    Ok(own.dev() != parent.dev() || own.ino() == parent.ino())
}

/// `mount -t tmpfs -o size=<size>,mode=0777,nosuid,nodev tmpfs <path>`.
fn mount_tmpfs(path: &Path, size: i64) -> io::Result<()> {
    let target = cstring(path)?;
    let data = std::ffi::CString::new(format!("size={},mode=0777", size.max(4096)))?;
    // SAFETY: valid NUL-terminated strings that outlive the call.
    let r = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data.as_ptr().cast(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Detaches the mount at `path`.
fn unmount(path: &Path) -> io::Result<()> {
    let target = cstring(path)?;
    // SAFETY: a valid NUL-terminated string that outlives the call.
    if unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn cstring(path: &Path) -> io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    Ok(std::ffi::CString::new(path.as_os_str().as_bytes())?)
}

/// The mount points at or below `dir`, from this process's mount table (bounded).
fn mounts_below(dir: &Path) -> io::Result<Vec<String>> {
    use std::io::Read;
    let mut table = String::new();
    fs::File::open("/proc/self/mountinfo")?.take(4 << 20).read_to_string(&mut table)?;
    Ok(mount_points_under(&table, &dir.display().to_string()))
}

/// The mount points (`/proc/self/mountinfo`'s fifth field, octal escapes as written) at or
/// below `prefix`.
fn mount_points_under(mountinfo: &str, prefix: &str) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| p.replace("\\040", " "))
        .filter(|p| p == prefix || p.starts_with(&format!("{prefix}/")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_below_a_directory_are_found_and_its_neighbours_are_not() {
        let table = "22 1 0:21 / /var/lib/ferrolet/pods/u1/volumes/kubernetes.io~empty-dir/cache rw - tmpfs tmpfs rw\n23 1 0:22 / /var/lib/ferrolet/pods/u10 rw - tmpfs tmpfs rw\n24 1 0:23 / /var/lib/ferrolet/pods/u1/with\\040space rw - tmpfs tmpfs rw\n";
        assert_eq!(
            mount_points_under(table, "/var/lib/ferrolet/pods/u1"),
            ["/var/lib/ferrolet/pods/u1/volumes/kubernetes.io~empty-dir/cache", "/var/lib/ferrolet/pods/u1/with space"]
        );
    }

    /// Removes the pod's directory (and the mounts in it) however the test ends.
    struct Removed<'a>(&'a PodDir);

    impl Drop for Removed<'_> {
        fn drop(&mut self) {
            let _ = self.0.remove();
        }
    }

    /// A pod with an `emptyDir` `data` that container `app` mounts as `mounts` says.
    fn pod_mounting(mounts: &str) -> Pod {
        let text = format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  volumes: [{{name: data, emptyDir: {{}}}}]\n  containers:\n  - {{name: app, image: x, volumeMounts: {mounts}}}\n");
        crate::api::manifest::decode_pods("p.yaml", &text).remove(0).unwrap()
    }

    fn is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !root {
            eprintln!("skipped: mounting a subPath needs root");
        }
        root
    }

    #[test]
    fn a_sub_path_is_made_inside_the_volume_and_never_through_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("vol");
        fs::create_dir(&base).unwrap();
        let make = Some(MakeDir { mode: 0o777, gid: None });
        let fd = open_sub_path(&base, "a/./b", make).unwrap();
        let made = fs::metadata(base.join("a/b")).unwrap();
        assert_eq!((fd.metadata().unwrap().ino(), made.mode() & 0o7777), (made.ino(), 0o777));
        assert!(open_sub_path(&base, "c", None).err().unwrap().contains("No such file"));
        std::os::unix::fs::symlink("/etc", base.join("escape")).unwrap();
        let e = open_sub_path(&base, "escape/x", make).err().unwrap();
        assert!(e.ends_with("escape is a symbolic link, which is not followed"), "{e}");
        assert!(!Path::new("/etc/x").exists());
        fs::write(base.join("file"), "").unwrap();
        assert!(open_sub_path(&base, "file/x", make).err().unwrap().ends_with("file is not a directory"));
        assert!(open_sub_path(&base, "../x", make).err().unwrap().contains("without '..'"));
    }

    /// The CVE-2021-25741 race: a container swaps `sub` (a directory in its volume) and
    /// `alt` (a link to a directory of the node's) as fast as it can while its sidecar
    /// starts. Each start that succeeds must mount the volume's directory, never the node's:
    /// the mount the runtime makes of the path it is given (as the shim and runc do, by
    /// path, a moment later) is checked.
    #[test]
    fn a_sub_path_swapped_for_a_symlink_while_it_is_mounted_never_reaches_the_node() {
        if !is_root() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let node_dir = dir.path().join("root-only");
        fs::create_dir(&node_dir).unwrap();
        let pd = PodDir::new(&dir.path().join("pods"), "uid1");
        let _removed = Removed(&pd);
        let pod = pod_mounting("[{name: data, mountPath: /data, subPath: sub}]");
        let vol = pd.volume_path(&pod.spec.volumes[0]);
        fs::create_dir_all(vol.join("sub")).unwrap();
        let real = fs::metadata(vol.join("sub")).unwrap().ino();
        std::os::unix::fs::symlink(&node_dir, vol.join("alt")).unwrap();
        let probe = dir.path().join("runtime-view");
        fs::create_dir(&probe).unwrap();

        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swapper = {
            let (stop, vol) = (stop.clone(), cstring(&vol).unwrap());
            std::thread::spawn(move || {
                let dir = open_at(libc::AT_FDCWD, &vol, libc::O_PATH | libc::O_DIRECTORY).unwrap();
                let fd = dir.as_raw_fd();
                let mut swaps = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // SAFETY: valid names under an open directory.
                    let r = unsafe {
                        libc::syscall(
                            libc::SYS_renameat2,
                            fd,
                            c"sub".as_ptr(),
                            fd,
                            c"alt".as_ptr(),
                            libc::RENAME_EXCHANGE,
                        )
                    };
                    assert_eq!(r, 0, "renameat2: {}", io::Error::last_os_error());
                    swaps += 1;
                }
                swaps
            })
        };
        // On the code before the fix, about 7 in 10 starts escaped: 300 of them leave no
        // chance of a miss. Most attempts are refused while the swapper runs (the sub path is
        // a symlink at that moment); on busy cores that can be 100,000 of them before 300
        // starts, so the attempts are bounded by time, not by count.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let (mut started, mut refused, mut escaped) = (0, 0, 0);
        while started < 300 && std::time::Instant::now() < deadline {
            let Ok(mounts) = pd.mounts(&pod, &pod.spec.containers[0], &[]) else {
                refused += 1;
                continue;
            };
            started += 1;
            let source = cstring(&mounts[0].host_path).unwrap();
            let target = cstring(&probe).unwrap();
            // SAFETY: valid NUL-terminated strings.
            let r = unsafe {
                libc::mount(source.as_ptr(), target.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null())
            };
            if r != 0 {
                refused += 1;
                continue;
            }
            if fs::metadata(&probe).unwrap().ino() != real {
                escaped += 1;
            }
            unmount(&probe).unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let swaps = swapper.join().unwrap();
        pd.remove().unwrap();
        eprintln!("{started} started, {refused} refused, {escaped} escaped, {swaps} swaps");
        assert_eq!(escaped, 0, "{escaped} of {started} starts mounted the node's directory");
        assert!(started == 300 && swaps > 300, "the race ran: {started} started, {swaps} swaps");
        assert!(!pd.path().exists(), "the pinned mounts went with the pod's directory");
    }

    #[test]
    fn secret_files_are_on_a_tmpfs_and_a_sub_path_keeps_the_version_it_was_mounted_from() {
        if !is_root() {
            return;
        }
        use crate::node::objects::{Kind, Known, Object, ObjectRef};
        let dir = tempfile::tempdir().unwrap();
        let pd = PodDir::new(&dir.path().join("pods"), "uid2");
        let _removed = Removed(&pd);
        let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: shop}\nspec:\n  volumes: [{name: sec, secret: {secretName: db, defaultMode: 0400}}, {name: cfg, configMap: {name: app}}]\n  containers:\n  - name: app\n    image: busybox\n    volumeMounts: [{name: sec, mountPath: /sec}, {name: cfg, mountPath: /etc/app.conf, subPath: app.conf}]\n";
        let pod = crate::api::manifest::decode_pods("p.yaml", text).remove(0).unwrap();
        let objects = ObjectsView::default();
        let set = |kind, name: &str, key: &str, value: &str| {
            let r = ObjectRef { kind, namespace: "shop".into(), name: name.into() };
            let o = Object { data: [(key.to_string(), value.as_bytes().to_vec())].into(), ..Object::default() };
            objects.set_object(&r, Some(Known::Found(std::sync::Arc::new(o))));
        };
        set(Kind::Secret, "db", "pw", "hunter2");
        set(Kind::ConfigMap, "app", "app.conf", "v1");
        let files = Files { facts: &Facts::default(), objects: &objects, now: std::time::SystemTime::now() };
        pd.prepare(&pod, &files, 1 << 30).unwrap();
        let sec = pd.volume_path(&pod.spec.volumes[0]);
        assert!(sec.ends_with("volumes/kubernetes.io~secret/sec") && is_mount_point(&sec).unwrap());
        assert_eq!(fs::read_to_string(sec.join("pw")).unwrap(), "hunter2");
        assert_eq!(fs::metadata(sec.join("pw")).unwrap().permissions().mode() & 0o777, 0o400);
        assert!(
            fs::symlink_metadata(sec.join("pw")).unwrap().file_type().is_symlink(),
            "a name is a link through ..data"
        );
        let mounts = pd.mounts(&pod, &pod.spec.containers[0], &[]).unwrap();
        assert!(mounts.iter().all(|m| m.read_only), "ConfigMap and Secret volumes are read-only");
        assert_eq!(fs::read_to_string(&mounts[1].host_path).unwrap(), "v1");
        // An update reaches the volume, not the subPath mount made from the version before.
        set(Kind::ConfigMap, "app", "app.conf", "v2");
        assert!(pd.refresh(&pod, &files).is_empty());
        let cfg = pd.volume_path(&pod.spec.volumes[1]);
        assert_eq!(fs::read_to_string(cfg.join("app.conf")).unwrap(), "v2");
        assert_eq!(fs::read_to_string(&mounts[1].host_path).unwrap(), "v1");
        // A Secret gone from the apiserver leaves the files as they were, and says why.
        let r = ObjectRef { kind: Kind::Secret, namespace: "shop".into(), name: "db".into() };
        objects.set_object(&r, Some(Known::Missing));
        let failed: Vec<String> = pd.refresh(&pod, &files).iter().map(ToString::to_string).collect();
        assert_eq!(failed, ["MountVolume.SetUp failed for volume \"sec\" : secret \"db\" not found"]);
        assert_eq!(fs::read_to_string(sec.join("pw")).unwrap(), "hunter2");
        pd.remove().unwrap();
        assert!(!pd.path().exists());
    }

    #[test]
    fn a_sub_path_is_pinned_in_the_pods_directory_and_unmounted_with_it() {
        if !is_root() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let pd = PodDir::new(&dir.path().join("pods"), "uid1");
        let _removed = Removed(&pd);
        let pod =
            pod_mounting("[{name: data, mountPath: /data, subPath: a/b}, {name: data, mountPath: /f, subPath: file}]");
        let files =
            Files { facts: &Facts::default(), objects: &ObjectsView::default(), now: std::time::SystemTime::now() };
        pd.prepare(&pod, &files, 1 << 30).unwrap();
        let vol = pd.volume_path(&pod.spec.volumes[0]);
        fs::write(vol.join("file"), "content").unwrap();
        for _ in 0..2 {
            // A restarted container gets the same places, mounted anew.
            let mounts = pd.mounts(&pod, &pod.spec.containers[0], &[]).unwrap();
            assert_eq!(mounts[0].host_path, pd.path().join("volume-subpaths/data/app/0"));
            assert_eq!(mounts[1].host_path, pd.path().join("volume-subpaths/data/app/1"));
            assert_eq!(fs::read_to_string(&mounts[1].host_path).unwrap(), "content");
            fs::write(mounts[0].host_path.join("x"), "through the pin").unwrap();
            assert_eq!(fs::read_to_string(vol.join("a/b/x")).unwrap(), "through the pin");
        }
        assert_eq!(mounts_below(&pd.path().join(SUB_PATHS)).unwrap().len(), 2, "one mount each, not stacked");
        pd.remove().unwrap();
        assert!(!pd.path().exists());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn any_table_is_read_without_a_panic(table in "\\PC{0,400}", prefix in "\\PC{0,20}") {
                let below = format!("{prefix}/");
                for p in mount_points_under(&table, &prefix) {
                    prop_assert!(p == prefix || p.starts_with(&below), "{}", p);
                }
            }

            #[test]
            fn the_mounts_found_are_those_at_or_below_the_directory(
                points in prop::collection::vec("(/[a-z]{1,3}){1,4}", 0..20),
                prefix in "(/[a-z]{1,3}){1,2}",
            ) {
                let table: String = points
                    .iter()
                    .enumerate()
                    .map(|(i, p)| format!("{} 1 0:{i} / {p} rw,relatime shared:1 - tmpfs tmpfs rw\n", 20 + i))
                    .collect();
                let want: Vec<&String> =
                    points.iter().filter(|p| **p == prefix || p.starts_with(&format!("{prefix}/"))).collect();
                let got = mount_points_under(&table, &prefix);
                prop_assert_eq!(got.iter().collect::<Vec<_>>(), want);
            }
        }
    }
}
