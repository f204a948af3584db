//! A container's own root on the process runtime. `plan` (pure) says what is mounted where,
//! in order; `build` makes it in the shim's private mount namespace, and the workload
//! `pivot_root`s into it before it starts.
//!
//! The base is an overlay of the node's `/` (read-only, lowest) under a skeleton layer (a
//! small tmpfs holding the mount points the plan needs, so no mount point is ever made on
//! the node), with the container's writable layer and overlay work directory in its own
//! directory under the state directory. `readOnlyRootFilesystem` leaves the writable layer
//! out (a read-only overlay). A kernel without overlayfs gets a read-only bind of `/`
//! instead, and a volume whose `mountPath` does not exist on the node is then refused
//! (`fallback_refusal`).
//!
//! On top, as runc's defaults: `/proc` (mounted by the workload's first process, in its PID
//! namespace, with kubelet's masked and read-only paths unless `procMount: Unmasked`);
//! `/dev` as a tmpfs with the node's `null`, `zero`, `full`, `random`, `urandom` and `tty`, a
//! private `devpts` at `/dev/pts`, `/dev/shm` and `/dev/mqueue` (a privileged container gets
//! the node's `/dev`); `/sys` read-only with the node's cgroup hierarchies read-only below it
//! (writable for a privileged container); `/run`, and `/tmp` when the root is writable, as
//! tmpfs; the node's disk mounts below the directories its binaries come from
//! (`BINARY_DIRS`: a separate `/usr` partition, for example), read-only; ferrolet's state
//! and log directories masked (other pods' volumes and logs are there); then the pod's volumes and devices at
//! their paths. A volume at one of the default places replaces the default there.
//!
//! Paths: a `mountPath` is resolved in the container's root as runc does, the node's
//! symbolic links followed within it (`/var/run` → `/run`), never out of it. Mounts go
//! parents first.

pub mod build;

use crate::api::security::{DEFAULT_MASKED_PATHS, DEFAULT_READONLY_PATHS};
use crate::node::runtime::{ContainerConfig, Mount, Propagation};
use std::collections::VecDeque;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Where the node's binaries and what they need come from: the node's disk mounts at or
/// below these appear read-only in every container (the root filesystem's own directories
/// come with the overlay's lower layer).
pub const BINARY_DIRS: [&str; 8] = ["/bin", "/etc", "/lib", "/lib32", "/lib64", "/opt", "/sbin", "/usr"];

/// The device nodes of the node that a container's `/dev` gets (runc's default set).
pub const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// Filesystems whose mounts hold files a binary may need (not kernel or memory filesystems).
const DISK_FILESYSTEMS: [&str; 9] = ["ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "vfat", "squashfs", "erofs"];

/// Where the node's cgroup hierarchies are mounted.
const CGROUP_DIR: &str = "/sys/fs/cgroup";

/// How many symbolic links resolving one path may follow (the kernel's limit).
const MAX_LINKS: usize = 40;

/// One mount of the node (`/proc/self/mountinfo`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeMount {
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// Its filesystem type.
    pub fs_type: String,
}

/// One volume (or device node, or device plugin mount) as the pod asks for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Volume {
    /// Where it appears in the container (absolute).
    pub container_path: PathBuf,
    /// The node's file or directory (under the pod's directory, a `hostPath`, a device).
    pub source: PathBuf,
    /// Whether the source is a directory (else a file).
    pub is_dir: bool,
    /// Mounted read-only.
    pub read_only: bool,
    /// Mounts the node makes below it arrive in the container (`HostToContainer`).
    pub from_host: bool,
}

/// What the plan is made from.
pub struct RootInputs<'a> {
    /// The container instance's own directory for its root: the writable layer, the
    /// overlay's work directory, the skeleton and the merged root go there.
    pub layer_dir: &'a Path,
    /// The node's directories hidden in the container (ferrolet's state and log
    /// directories: other pods' volumes and logs are there).
    pub hidden: &'a [PathBuf],
    /// Whether the kernel has overlayfs (`/proc/filesystems`).
    pub overlay: bool,
    /// `readOnlyRootFilesystem`.
    pub read_only_root: bool,
    /// `privileged`.
    pub privileged: bool,
    /// `procMount: Unmasked`.
    pub unmasked_proc: bool,
    /// The pod's volumes (the termination message file and the hosts file included) and
    /// the device plugins' devices and mounts.
    pub volumes: &'a [Volume],
    /// The node's mounts.
    pub node_mounts: &'a [NodeMount],
    /// The target of the node's path when it is a symbolic link.
    pub link: &'a dyn Fn(&Path) -> Option<PathBuf>,
}

/// The base of the root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Base {
    /// An overlay: `skeleton` over the node's `/`, with `upper` and `work` when writable.
    Overlay {
        /// The layer of mount points (a tmpfs mounted there).
        skeleton: PathBuf,
        /// The writable layer and the overlay's work directory (`None`: read-only).
        writable: Option<(PathBuf, PathBuf)>,
    },
    /// The node's `/`, bound read-only (no overlayfs).
    ReadOnlyBind,
}

/// What one mount is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum What {
    /// A bind of the node's `source`.
    Bind {
        /// The node's path.
        source: PathBuf,
        /// Read-only.
        read_only: bool,
        /// With the mounts below it (`rbind`).
        recursive: bool,
        /// Mounts the node makes below it arrive (slave); else private.
        from_host: bool,
    },
    /// A tmpfs with these options.
    Tmpfs(&'static str),
    /// `/dev` as a tmpfs, with runc's links (`ptmx`, `fd`, `stdin`, `stdout`, `stderr`).
    DevTmpfs,
    /// `/sys`.
    Sysfs {
        /// Read-only.
        read_only: bool,
    },
    /// A private `devpts` instance.
    Devpts,
    /// A POSIX message queue filesystem.
    Mqueue,
    /// Hidden: an empty read-only tmpfs on a directory, `/dev/null` on a file; nothing
    /// when the path does not exist.
    Masked,
}

/// A mount point the skeleton layer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    /// A directory.
    Dir,
    /// A file (to bind a file onto).
    File,
}

/// One mount of the plan, at `target` inside the new root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootMount {
    /// The path in the container, resolved (no symbolic link of the node on the way).
    pub target: PathBuf,
    /// What is mounted there.
    pub what: What,
    /// The mount point it needs (made in the skeleton, or in the mount it is below).
    pub point: Point,
}

/// The whole root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootPlan {
    /// The base.
    pub base: Base,
    /// Where the merged root is mounted, and the workload `pivot_root`s into.
    pub merged: PathBuf,
    /// The skeleton layer's entries (absolute paths in the container): the mount points
    /// not below another mount of the plan (those are made in that mount when it is there).
    pub points: Vec<(PathBuf, Point)>,
    /// The mounts the shim makes, in order (parents first).
    pub mounts: Vec<RootMount>,
    /// `/proc`'s masked and read-only paths, which the workload's first process mounts once
    /// it has mounted `/proc` in its PID namespace.
    pub proc_masked: Vec<PathBuf>,
    /// As above, the paths made read-only.
    pub proc_read_only: Vec<PathBuf>,
}

/// The plan for one container instance.
pub fn plan(inp: &RootInputs) -> RootPlan {
    let base = if inp.overlay {
        let writable = (!inp.read_only_root).then(|| (inp.layer_dir.join("upper"), inp.layer_dir.join("work")));
        Base::Overlay { skeleton: inp.layer_dir.join("skeleton"), writable }
    } else {
        Base::ReadOnlyBind
    };
    // The volumes first, shallowest first: each is resolved in the root as it will be when
    // it is mounted (below a mount of the plan, the node's links are not there to follow).
    let mut volumes: Vec<&Volume> = inp.volumes.iter().collect();
    volumes.sort_by_key(|v| v.container_path.components().count());
    let defaults = ["/proc", "/dev", "/sys", "/run", "/tmp"].map(PathBuf::from);
    let mut resolved: Vec<(PathBuf, &Volume)> = Vec::new();
    for v in volumes {
        let opaque: Vec<&PathBuf> = defaults.iter().chain(resolved.iter().map(|(t, _)| t)).collect();
        let target = resolve(&v.container_path, inp.link, &opaque);
        resolved.push((target, v));
    }
    let taken = |p: &str| resolved.iter().any(|(t, _)| t == Path::new(p));
    let mut mounts = Vec::new();
    let mut add = |target: &str, what: What| mounts.push(RootMount { target: target.into(), what, point: Point::Dir });
    let bind =
        |source: &str, read_only| What::Bind { source: source.into(), read_only, recursive: false, from_host: false };
    if inp.privileged {
        add("/dev", What::Bind { source: "/dev".into(), read_only: false, recursive: true, from_host: true });
    } else {
        add("/dev", What::DevTmpfs);
        for d in DEVICES {
            let node = format!("/dev/{d}");
            add(&node, bind(&node, false));
        }
        add("/dev/pts", What::Devpts);
        if !taken("/dev/shm") {
            add("/dev/shm", What::Tmpfs("mode=1777,size=65536k,nosuid,nodev,noexec"));
        }
        add("/dev/mqueue", What::Mqueue);
    }
    add("/sys", What::Sysfs { read_only: !inp.privileged });
    for m in inp.node_mounts.iter().filter(|m| m.mount_point.starts_with(CGROUP_DIR)) {
        add(&m.mount_point.to_string_lossy(), bind(&m.mount_point.to_string_lossy(), !inp.privileged));
    }
    let masked = !(inp.privileged || inp.unmasked_proc);
    if masked {
        for p in DEFAULT_MASKED_PATHS.iter().filter(|p| p.starts_with("/sys/")) {
            add(p, What::Masked);
        }
    }
    if !taken("/run") {
        add("/run", What::Tmpfs("mode=755,nosuid,nodev"));
    }
    if !inp.read_only_root && !taken("/tmp") {
        add("/tmp", What::Tmpfs("mode=1777,nosuid,nodev"));
    }
    for m in inp.node_mounts.iter().filter(|m| binary_mount(m)) {
        add(&m.mount_point.to_string_lossy(), bind(&m.mount_point.to_string_lossy(), true));
    }
    for h in inp.hidden {
        add(&h.to_string_lossy(), What::Masked);
    }
    for (target, v) in &resolved {
        mounts.push(RootMount {
            target: target.clone(),
            what: What::Bind {
                source: v.source.clone(),
                read_only: v.read_only,
                recursive: true,
                from_host: v.from_host,
            },
            point: if v.is_dir { Point::Dir } else { Point::File },
        });
    }
    // The device nodes are bound onto files.
    for m in mounts.iter_mut().filter(|m| DEVICES.iter().any(|d| m.target == Path::new("/dev").join(d))) {
        m.point = Point::File;
    }
    // Parents first; a stable sort keeps the order above among mounts at one depth.
    mounts.sort_by_key(|m| m.target.components().count());
    // A mount point below another mount is made in that mount when it is mounted (a
    // tmpfs, a volume); the others are the skeleton layer's. `/proc` is one of them.
    let mut points: Vec<(PathBuf, Point)> = vec![("/proc".into(), Point::Dir)];
    for (i, m) in mounts.iter().enumerate() {
        let under_another = mounts[..i].iter().any(|p| m.target != p.target && m.target.starts_with(&p.target));
        let entry = (m.target.clone(), m.point);
        if !under_another && !points.contains(&entry) {
            points.push(entry);
        }
    }
    let in_proc = |paths: &[&str]| -> Vec<PathBuf> {
        if masked {
            paths.iter().filter(|p| p.starts_with("/proc/")).map(PathBuf::from).collect()
        } else {
            Vec::new()
        }
    };
    RootPlan {
        merged: inp.layer_dir.join("merged"),
        base,
        points,
        mounts,
        proc_masked: in_proc(&DEFAULT_MASKED_PATHS),
        proc_read_only: in_proc(&DEFAULT_READONLY_PATHS),
    }
}

/// `path` resolved in the container's root: `..` and the node's symbolic links (`link`)
/// followed, an absolute link from the root, never above it; below a path of `opaque` (a
/// mount of the plan) nothing of the node is there to follow. A loop stops after
/// `MAX_LINKS` links, taking the rest as it is.
fn resolve(path: &Path, link: &dyn Fn(&Path) -> Option<PathBuf>, opaque: &[&PathBuf]) -> PathBuf {
    let mut out = PathBuf::from("/");
    let mut rest: VecDeque<std::ffi::OsString> = names(path).collect();
    let mut links = 0;
    while let Some(name) = rest.pop_front() {
        if name == ".." {
            out.pop();
            continue;
        }
        let next = out.join(&name);
        let below_a_mount = opaque.iter().any(|o| next.starts_with(o));
        match link(&next).filter(|_| !below_a_mount && links < MAX_LINKS) {
            Some(target) => {
                links += 1;
                if target.is_absolute() {
                    out = PathBuf::from("/");
                }
                for n in names(&target).rev() {
                    rest.push_front(n);
                }
            }
            None => out = next,
        }
    }
    out
}

/// The names of `path` (`..` kept, `.` and `/` left out).
fn names(path: &Path) -> impl DoubleEndedIterator<Item = std::ffi::OsString> + '_ {
    path.components().filter_map(|c| match c {
        Component::Normal(n) => Some(n.to_os_string()),
        Component::ParentDir => Some(OsStr::new("..").to_os_string()),
        _ => None,
    })
}

/// The mounts of a `/proc/<pid>/mountinfo` text (the kernel's `\ooo` escapes undone);
/// lines that are not mountinfo lines are left out.
pub fn parse_mountinfo(text: &str) -> Vec<NodeMount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mount_point = left.split(' ').nth(4)?;
            let fs_type = right.split(' ').next()?;
            Some(NodeMount { mount_point: unescape(mount_point).into(), fs_type: fs_type.into() })
        })
        .collect()
}

/// A mountinfo field with its octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> std::ffi::OsString {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push(d.iter().fold(0u8, |n, c| n.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(out)
}

/// Whether the node's mount `m` holds what the node's binaries need: a disk filesystem
/// mounted at or below one of `BINARY_DIRS`.
fn binary_mount(m: &NodeMount) -> bool {
    DISK_FILESYSTEMS.contains(&m.fs_type.as_str()) && BINARY_DIRS.iter().any(|d| m.mount_point.starts_with(d))
}

/// The volumes of `cfg` as the root mounts them: its mounts (volumes, the termination
/// message file, the hosts file), then the device plugins' devices and mounts; `is_dir`
/// says what the node's path is.
pub fn volumes(cfg: &ContainerConfig, is_dir: impl Fn(&Path) -> bool) -> Vec<Volume> {
    let mut out: Vec<Volume> = cfg
        .mounts
        .iter()
        .map(|m| Volume {
            container_path: m.container_path.clone().into(),
            source: m.host_path.clone(),
            is_dir: is_dir(&m.host_path),
            read_only: m.read_only,
            from_host: m.propagation != Propagation::Private,
        })
        .collect();
    if let Some(d) = &cfg.devices {
        for dev in &d.devices {
            out.push(Volume {
                container_path: dev.container_path.clone().into(),
                source: dev.host_path.clone().into(),
                is_dir: false,
                // A read-only mount does not stop writes to a device node (a device cgroup
                // would; the process runtime sets none).
                read_only: false,
                from_host: false,
            });
        }
        for m in &d.mounts {
            out.push(Volume {
                container_path: m.container_path.clone().into(),
                source: m.host_path.clone().into(),
                is_dir: is_dir(Path::new(&m.host_path)),
                read_only: m.read_only,
                from_host: false,
            });
        }
    }
    out
}

/// What the node offers a container's root.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Support {
    /// The shim is not root: no root of its own, the container shares the node's.
    None,
    /// No overlayfs: a read-only bind of the node's `/`.
    ReadOnlyBind,
    /// An overlay.
    Overlay,
}

/// Why the process runtime cannot give `cfg` its mounts with `support`, `exists` saying
/// what is on the node; `None` when it can.
pub fn refusal(cfg: &ContainerConfig, support: Support, exists: impl Fn(&Path) -> bool) -> Option<String> {
    let why = |w: String| Some(format!("the process runtime cannot mount the container's volumes: {w}"));
    for m in &cfg.mounts {
        let path = &m.container_path;
        if path.as_bytes().contains(&0) || m.host_path.as_os_str().as_bytes().contains(&0) {
            return why(format!("mountPath {path}: a path with a NUL byte"));
        }
        if m.propagation == Propagation::Bidirectional {
            return why(format!(
                "mountPath {path}: mountPropagation Bidirectional (nothing propagates back to the node)"
            ));
        }
    }
    match support {
        Support::Overlay => None,
        Support::None => {
            // The termination message then comes from the log alone.
            let is_log = |m: &&Mount| cfg.termination_log.as_ref().is_some_and(|t| t.host_path == m.host_path);
            if cfg.mounts.iter().any(|m| !is_log(&m))
                || cfg.devices.as_ref().is_some_and(|d| !d.mounts.is_empty() || !d.devices.is_empty())
            {
                why("it needs root to give the container a root of its own".into())
            } else if cfg.security.readonly_rootfs {
                Some("the process runtime cannot honour securityContext.readOnlyRootFilesystem: it needs root to give the container a root of its own".into())
            } else {
                None
            }
        }
        Support::ReadOnlyBind => {
            let vols = volumes(cfg, |p| p.is_dir());
            let inp = RootInputs {
                layer_dir: Path::new("/"),
                hidden: &[],
                overlay: false,
                read_only_root: true,
                privileged: cfg.security.privileged,
                unmasked_proc: true,
                volumes: &vols,
                node_mounts: &[],
                link: &|p| std::fs::read_link(p).ok(),
            };
            fallback_refusal(&plan(&inp), exists).and_then(why)
        }
    }
}

/// Why `plan`'s root cannot be made when it is a read-only bind of the node's `/` (no
/// overlayfs): a mount point that does not exist on the node (`exists` says what does).
pub fn fallback_refusal(plan: &RootPlan, exists: impl Fn(&Path) -> bool) -> Option<String> {
    plan.points.iter().find(|(p, _)| !exists(p)).map(|(p, _)| {
        format!(
            "mountPath {} does not exist on this node, and this kernel has no overlayfs to give the container a root of its own",
            p.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::runtime::TerminationLog;

    fn vol(path: &str, is_dir: bool) -> Volume {
        Volume {
            container_path: path.into(),
            source: format!("/var/lib/ferrolet/pods/u1/volumes{path}").into(),
            is_dir,
            read_only: false,
            from_host: false,
        }
    }

    const HIDDEN: [&str; 1] = ["/var/lib/ferrolet"];

    fn no_links(_: &Path) -> Option<PathBuf> {
        None
    }

    fn inputs<'a>(volumes: &'a [Volume], node: &'a [NodeMount], hidden: &'a [PathBuf]) -> RootInputs<'a> {
        RootInputs {
            layer_dir: Path::new("/var/lib/ferrolet/runtime/containers/c1/root"),
            hidden,
            overlay: true,
            read_only_root: false,
            privileged: false,
            unmasked_proc: false,
            volumes,
            node_mounts: node,
            link: &no_links,
        }
    }

    fn targets(p: &RootPlan) -> Vec<String> {
        p.mounts.iter().map(|m| m.target.display().to_string()).collect()
    }

    fn dirs(names: &[&str]) -> Vec<(PathBuf, Point)> {
        names.iter().map(|n| (PathBuf::from(n), Point::Dir)).collect()
    }

    #[test]
    fn a_writable_root_is_an_overlay_with_its_layers_under_the_state_directory_and_runcs_mounts() {
        let hidden: Vec<PathBuf> = HIDDEN.iter().map(PathBuf::from).collect();
        let p = plan(&inputs(&[], &[], &hidden));
        let layer = Path::new("/var/lib/ferrolet/runtime/containers/c1/root");
        assert_eq!(
            p.base,
            Base::Overlay {
                skeleton: layer.join("skeleton"),
                writable: Some((layer.join("upper"), layer.join("work")))
            }
        );
        assert_eq!(p.merged, layer.join("merged"));
        assert_eq!(
            targets(&p),
            [
                "/dev",
                "/sys",
                "/run",
                "/tmp",
                "/dev/null",
                "/dev/zero",
                "/dev/full",
                "/dev/random",
                "/dev/urandom",
                "/dev/tty",
                "/dev/pts",
                "/dev/shm",
                "/dev/mqueue",
                "/sys/firmware",
                "/var/lib/ferrolet",
                "/sys/devices/virtual/powercap",
            ]
        );
        assert_eq!(p.mounts[1].what, What::Sysfs { read_only: true });
        assert_eq!(p.mounts[4].point, Point::File, "a device node is bound onto a file");
        assert_eq!(p.mounts[14].what, What::Masked, "ferrolet's own directory is hidden");
        assert_eq!(p.points, dirs(&["/proc", "/dev", "/sys", "/run", "/tmp", "/var/lib/ferrolet"]));
        assert!(p.proc_masked.contains(&PathBuf::from("/proc/kcore")) && p.proc_masked.len() == 9);
        assert_eq!(p.proc_read_only.len(), 5);
    }

    #[test]
    fn volumes_go_at_their_paths_after_their_parents_and_replace_the_defaults_there() {
        let vols = [
            vol("/scratch", true),
            vol("/dev/termination-log", false),
            vol("/tmp", true),
            vol("/etc/app/conf", false),
            vol("/scratch/inner", true),
        ];
        let p = plan(&inputs(&vols, &[], &[]));
        let t = targets(&p);
        assert_eq!(t.iter().filter(|t| *t == "/tmp").count(), 1, "the pod's /tmp, not a tmpfs: {t:?}");
        let tmp = p.mounts.iter().find(|m| m.target == Path::new("/tmp")).unwrap();
        assert!(matches!(&tmp.what, What::Bind { source, .. } if source.ends_with("volumes/tmp")));
        let pos = |x: &str| t.iter().position(|y| y == x).unwrap();
        assert!(pos("/dev") < pos("/dev/termination-log"));
        assert!(pos("/scratch") < pos("/scratch/inner"));
        let log = p.mounts.iter().find(|m| m.target == Path::new("/dev/termination-log")).unwrap();
        assert_eq!(log.point, Point::File);
        assert!(!p.points.iter().any(|(t, _)| t == Path::new("/dev/termination-log")), "made in /dev's tmpfs");
        assert!(!p.points.iter().any(|(t, _)| t == Path::new("/scratch/inner")), "made in the /scratch volume");
        assert!(p.points.contains(&("/etc/app/conf".into(), Point::File)));
        assert!(p.points.contains(&("/scratch".into(), Point::Dir)));
    }

    #[test]
    fn a_read_only_root_has_no_writable_layer_and_no_tmp_unless_the_pod_mounts_one() {
        let mut inp = inputs(&[], &[], &[]);
        inp.read_only_root = true;
        let p = plan(&inp);
        assert!(matches!(p.base, Base::Overlay { writable: None, .. }));
        assert!(!targets(&p).contains(&"/tmp".to_string()));
        assert!(targets(&p).contains(&"/run".to_string()));
        let vols = [vol("/tmp", true)];
        let mut inp = inputs(&vols, &[], &[]);
        inp.read_only_root = true;
        assert!(matches!(
            plan(&inp).mounts.iter().find(|m| m.target == Path::new("/tmp")).unwrap().what,
            What::Bind { .. }
        ));
    }

    #[test]
    fn a_privileged_container_gets_the_nodes_dev_a_writable_sys_and_nothing_masked() {
        let node = [NodeMount { mount_point: "/sys/fs/cgroup/memory".into(), fs_type: "cgroup".into() }];
        let mut inp = inputs(&[], &node, &[]);
        inp.privileged = true;
        let p = plan(&inp);
        assert_eq!(
            p.mounts[0].what,
            What::Bind { source: "/dev".into(), read_only: false, recursive: true, from_host: true }
        );
        assert!(!targets(&p).contains(&"/dev/pts".to_string()));
        assert!(p.mounts.iter().any(|m| m.target == Path::new("/sys") && m.what == What::Sysfs { read_only: false }));
        assert!(p
            .mounts
            .iter()
            .any(|m| m.target == Path::new("/sys/fs/cgroup/memory")
                && matches!(m.what, What::Bind { read_only: false, .. })));
        assert!(p.proc_masked.is_empty() && p.proc_read_only.is_empty());
        assert!(!p.mounts.iter().any(|m| m.what == What::Masked));
        // procMount: Unmasked leaves /proc as it is, and nothing else.
        let mut inp = inputs(&[], &[], &[]);
        inp.unmasked_proc = true;
        let p = plan(&inp);
        assert!(p.proc_masked.is_empty() && targets(&p).contains(&"/dev/pts".to_string()));
    }

    #[test]
    fn the_nodes_binary_partitions_and_cgroups_come_along_read_only_and_nothing_else_of_its() {
        let m = |p: &str, t: &str| NodeMount { mount_point: p.into(), fs_type: t.into() };
        let node = [
            m("/", "ext4"),
            m("/usr", "ext4"),
            m("/opt/tools", "xfs"),
            m("/home", "ext4"),
            m("/var/lib", "ext4"),
            m("/usr/share/big", "tmpfs"),
            m("/sys/fs/cgroup", "tmpfs"),
            m("/sys/fs/cgroup/cpu", "cgroup"),
        ];
        let p = plan(&inputs(&[], &node, &[]));
        let binds: Vec<_> = p
            .mounts
            .iter()
            .filter(|x| matches!(x.what, What::Bind { read_only: true, .. }))
            .map(|x| x.target.display().to_string())
            .collect();
        assert_eq!(binds, ["/usr", "/opt/tools", "/sys/fs/cgroup", "/sys/fs/cgroup/cpu"]);
    }

    #[test]
    fn a_mount_path_is_resolved_in_the_root_through_the_nodes_links_never_out_of_it() {
        let links = |p: &Path| match p.to_str().unwrap() {
            "/var/run" => Some(PathBuf::from("/run")),
            "/opt/app" => Some(PathBuf::from("../srv/app")),
            "/loop" => Some(PathBuf::from("/loop")),
            "/up" => Some(PathBuf::from("../../../etc")),
            "/scratch/evil" => Some(PathBuf::from("/etc")),
            _ => None,
        };
        let vols = [
            vol("/var/run/secrets/token", true),
            vol("/opt/app/data", true),
            vol("/up/x", true),
            vol("/scratch", true),
            vol("/scratch/evil/y", true),
        ];
        let mut inp = inputs(&vols, &[], &[]);
        inp.link = &links;
        let p = plan(&inp);
        let t = targets(&p);
        for want in ["/run/secrets/token", "/srv/app/data", "/etc/x", "/scratch/evil/y"] {
            assert!(t.contains(&want.to_string()), "{want} in {t:?}");
        }
        assert!(!p.points.iter().any(|(t, _)| t.starts_with("/run/secrets")), "made in the /run tmpfs");
        assert_eq!(resolve(Path::new("/loop/a"), &links, &[]), Path::new("/loop/a"), "a loop stops");
    }

    #[test]
    fn without_overlayfs_a_mount_point_missing_on_the_node_is_refused() {
        let vols = [vol("/etc", true), vol("/scratch", true)];
        let mut inp = inputs(&vols, &[], &[]);
        inp.overlay = false;
        let p = plan(&inp);
        assert_eq!(p.base, Base::ReadOnlyBind);
        let on_node = |p: &Path| ["/proc", "/dev", "/sys", "/run", "/tmp", "/etc"].iter().any(|n| p == Path::new(n));
        assert_eq!(
            fallback_refusal(&p, on_node),
            Some("mountPath /scratch does not exist on this node, and this kernel has no overlayfs to give the container a root of its own".into())
        );
        inp.volumes = &vols[..1];
        assert_eq!(fallback_refusal(&plan(&inp), on_node), None);
    }

    #[test]
    fn what_cannot_be_mounted_is_refused_naming_the_mount_and_the_termination_file_needs_nothing() {
        let mount = |c: &str, h: &str| Mount { container_path: c.into(), host_path: h.into(), ..Default::default() };
        let mut cfg = ContainerConfig { mounts: vec![mount("/data", "/vol/data")], ..Default::default() };
        assert_eq!(refusal(&cfg, Support::Overlay, |_| false), None);
        assert_eq!(
            refusal(&cfg, Support::None, |_| true).unwrap(),
            "the process runtime cannot mount the container's volumes: it needs root to give the container a root of its own"
        );
        cfg.mounts[0].propagation = Propagation::Bidirectional;
        assert!(refusal(&cfg, Support::Overlay, |_| true)
            .unwrap()
            .ends_with("mountPropagation Bidirectional (nothing propagates back to the node)"));
        let cfg = ContainerConfig {
            mounts: vec![mount("/dev/termination-log", "/vol/log")],
            termination_log: Some(TerminationLog { host_path: "/vol/log".into(), fallback_to_logs: false }),
            ..Default::default()
        };
        assert_eq!(refusal(&cfg, Support::None, |_| false), None, "the message then comes from the log");
        let mut cfg = ContainerConfig::default();
        cfg.security.readonly_rootfs = true;
        assert!(refusal(&cfg, Support::None, |_| true).unwrap().contains("readOnlyRootFilesystem"));
    }

    #[test]
    fn mountinfo_lines_give_each_mount_point_and_type_with_escapes_undone() {
        let text = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n\
                    40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime shared:5 - cgroup cgroup rw,name=systemd\n\
                    41 27 0:40 / /mnt/with\\040space rw - tmpfs tmpfs rw\n\
                    garbage\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[1], NodeMount { mount_point: "/sys/fs/cgroup/systemd".into(), fs_type: "cgroup".into() });
        assert_eq!(m[2].mount_point, Path::new("/mnt/with space"));
    }
}
