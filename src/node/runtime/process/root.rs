//! A container's own root on the process runtime, as a plan (pure): what the shim mounts,
//! in order, in the workload's private mount namespace before it `pivot_root`s into it.
//!
//! The base is an overlay of the node's `/` (read-only, lowest), under a skeleton layer
//! holding the mount points the plan needs (so no mount point is ever made on the node),
//! with the container's writable layer and overlay work directory in its own directory
//! under the state directory. `readOnlyRootFilesystem` leaves the writable layer out (a
//! read-only overlay). A kernel without overlayfs gets a read-only bind of `/` instead,
//! and a volume whose `mountPath` does not exist on the node is then refused, as before.
//!
//! On top, as runc's defaults: `/proc`; `/dev` as a tmpfs with the node's `null`, `zero`,
//! `full`, `random`, `urandom` and `tty`, a private `devpts` at `/dev/pts` (with `ptmx`),
//! `/dev/shm` and `/dev/mqueue` (a privileged container gets the node's `/dev`); `/sys`
//! read-only (writable for a privileged container); `/run`, and `/tmp` when the root is
//! writable, as tmpfs; the node's mounts below the directories its binaries come from
//! (`BINARY_DIRS`: a separate `/usr` partition, for example), read-only; then the pod's
//! volumes at their `mountPath`s. A volume mounted at one of the default places replaces
//! the default there. Mounts go parents first.

use std::path::{Path, PathBuf};

/// Where the node's binaries and what they need come from: the node's mounts at or below
/// these appear read-only in every container (the root filesystem's own directories come
/// with the overlay's lower layer).
pub const BINARY_DIRS: [&str; 8] = ["/bin", "/etc", "/lib", "/lib32", "/lib64", "/opt", "/sbin", "/usr"];

/// The device nodes of the node that a container's `/dev` gets (runc's default set).
pub const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// Filesystems whose mounts hold files a binary may need (not kernel or memory filesystems).
const DISK_FILESYSTEMS: [&str; 9] = ["ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "vfat", "squashfs", "erofs"];

/// One mount of the node (`/proc/self/mountinfo`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeMount {
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// Its filesystem type.
    pub fs_type: String,
}

/// One volume as the pod asks for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Volume {
    /// Where it appears in the container (absolute).
    pub container_path: PathBuf,
    /// The node's file or directory (under the pod's directory, or a `hostPath`).
    pub source: PathBuf,
    /// Whether the source is a directory (else a file).
    pub is_dir: bool,
    /// Mounted read-only.
    pub read_only: bool,
}

/// What the plan is made from.
#[derive(Clone, Debug)]
pub struct RootInputs<'a> {
    /// The container instance's own directory under the state directory: the writable
    /// layer, the overlay's work directory and the skeleton go there.
    pub layer_dir: &'a Path,
    /// Whether the kernel has overlayfs (`/proc/filesystems`).
    pub overlay: bool,
    /// `readOnlyRootFilesystem`.
    pub read_only_root: bool,
    /// `privileged`.
    pub privileged: bool,
    /// The pod's volumes, the termination message file included.
    pub volumes: &'a [Volume],
    /// The node's mounts.
    pub node_mounts: &'a [NodeMount],
}

/// The base of the root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Base {
    /// An overlay: `skeleton` over the node's `/`, with `upper` and `work` when writable.
    Overlay {
        /// The layer of mount points.
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
    },
    /// A tmpfs with these options.
    Tmpfs(&'static str),
    /// The container's own `/proc`.
    Proc,
    /// `/sys`.
    Sysfs {
        /// Read-only.
        read_only: bool,
    },
    /// A private `devpts` instance.
    Devpts,
    /// A POSIX message queue filesystem.
    Mqueue,
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
    /// The path in the container.
    pub target: PathBuf,
    /// What is mounted there.
    pub what: What,
    /// The mount point it needs (made in the skeleton, or in the mount it is below).
    pub point: Point,
}

/// The whole root: its base, the mount points the skeleton layer holds, the mounts on top
/// in order (parents first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootPlan {
    /// The base.
    pub base: Base,
    /// The skeleton layer's entries (absolute paths in the container): the mount points
    /// not below another mount of the plan (those are made in that mount).
    pub points: Vec<(PathBuf, Point)>,
    /// The mounts, in order.
    pub mounts: Vec<RootMount>,
}

/// The plan for one container instance.
pub fn plan(inp: &RootInputs) -> RootPlan {
    let base = if inp.overlay {
        let writable = (!inp.read_only_root).then(|| (inp.layer_dir.join("upper"), inp.layer_dir.join("work")));
        Base::Overlay { skeleton: inp.layer_dir.join("skeleton"), writable }
    } else {
        Base::ReadOnlyBind
    };
    let taken = |p: &str| inp.volumes.iter().any(|v| v.container_path == Path::new(p));
    let mut mounts = Vec::new();
    let mut add = |target: &str, what: What| mounts.push(RootMount { target: target.into(), what, point: Point::Dir });
    add("/proc", What::Proc);
    if inp.privileged {
        add("/dev", What::Bind { source: "/dev".into(), read_only: false, recursive: true });
    } else {
        add("/dev", What::Tmpfs("mode=755,size=65536k,nosuid,strictatime"));
        for d in DEVICES {
            let node = format!("/dev/{d}");
            add(&node, What::Bind { source: node.clone().into(), read_only: false, recursive: false });
        }
        add("/dev/pts", What::Devpts);
        if !taken("/dev/shm") {
            add("/dev/shm", What::Tmpfs("mode=1777,size=65536k,nosuid,nodev,noexec"));
        }
        add("/dev/mqueue", What::Mqueue);
    }
    add("/sys", What::Sysfs { read_only: !inp.privileged });
    if !taken("/run") {
        add("/run", What::Tmpfs("mode=755,nosuid,nodev"));
    }
    if !inp.read_only_root && !taken("/tmp") {
        add("/tmp", What::Tmpfs("mode=1777,nosuid,nodev"));
    }
    for m in inp.node_mounts.iter().filter(|m| binary_mount(m)) {
        let p = m.mount_point.to_string_lossy().into_owned();
        add(&p, What::Bind { source: m.mount_point.clone(), read_only: true, recursive: false });
    }
    for v in inp.volumes {
        mounts.push(RootMount {
            target: v.container_path.clone(),
            what: What::Bind { source: v.source.clone(), read_only: v.read_only, recursive: false },
            point: Point::Dir,
        });
    }
    // Parents first; a stable sort keeps the order above among mounts at one depth.
    mounts.sort_by_key(|m| m.target.components().count());
    let kinds: Vec<Point> = mounts.iter().map(|m| point(m, inp.volumes)).collect();
    for (m, k) in mounts.iter_mut().zip(kinds) {
        m.point = k;
    }
    // A mount point below another mount is made in that mount when it is mounted (a
    // tmpfs, a volume); the others are the skeleton layer's.
    let mut points: Vec<(PathBuf, Point)> = Vec::new();
    for (i, m) in mounts.iter().enumerate() {
        let under_another = mounts[..i].iter().any(|p| m.target != p.target && m.target.starts_with(&p.target));
        let entry = (m.target.clone(), m.point);
        if !under_another && !points.contains(&entry) {
            points.push(entry);
        }
    }
    RootPlan { base, points, mounts }
}

/// The kind of mount point `m` needs: a file for a file's bind (a device node, a file
/// volume), else a directory.
fn point(m: &RootMount, volumes: &[Volume]) -> Point {
    match &m.what {
        What::Bind { source, .. }
            if volumes.iter().any(|v| &v.source == source && !v.is_dir)
                || DEVICES.iter().any(|d| source == &Path::new("/dev").join(d)) =>
        {
            Point::File
        }
        _ => Point::Dir,
    }
}

/// Whether the node's mount `m` holds what the node's binaries need: a disk filesystem
/// mounted at or below one of `BINARY_DIRS`.
fn binary_mount(m: &NodeMount) -> bool {
    DISK_FILESYSTEMS.contains(&m.fs_type.as_str()) && BINARY_DIRS.iter().any(|d| m.mount_point.starts_with(d))
}

/// Why `plan`'s root cannot hold the volumes when it is a read-only bind of the node's `/`
/// (no overlayfs): a `mountPath` that does not exist on the node (`exists` says what does).
pub fn fallback_refusal(volumes: &[Volume], exists: impl Fn(&Path) -> bool) -> Option<String> {
    volumes.iter().find(|v| !exists(&v.container_path)).map(|v| {
        format!(
            "mountPath {} does not exist on this node, and this kernel has no overlayfs to give the container a root of its own",
            v.container_path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vol(path: &str, is_dir: bool) -> Volume {
        Volume {
            container_path: path.into(),
            source: format!("/var/lib/ferrolet/pods/u1/volumes{path}").into(),
            is_dir,
            read_only: false,
        }
    }

    fn inputs<'a>(volumes: &'a [Volume], node: &'a [NodeMount]) -> RootInputs<'a> {
        RootInputs {
            layer_dir: Path::new("/var/lib/ferrolet/runtime/containers/c1/root"),
            overlay: true,
            read_only_root: false,
            privileged: false,
            volumes,
            node_mounts: node,
        }
    }

    fn targets(p: &RootPlan) -> Vec<String> {
        p.mounts.iter().map(|m| m.target.display().to_string()).collect()
    }

    #[test]
    fn a_writable_root_is_an_overlay_with_its_layers_under_the_state_directory() {
        let p = plan(&inputs(&[], &[]));
        let layer = Path::new("/var/lib/ferrolet/runtime/containers/c1/root");
        assert_eq!(
            p.base,
            Base::Overlay {
                skeleton: layer.join("skeleton"),
                writable: Some((layer.join("upper"), layer.join("work")))
            }
        );
        assert_eq!(
            targets(&p),
            [
                "/proc",
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
                "/dev/mqueue"
            ]
        );
        assert_eq!(p.mounts[2].what, What::Sysfs { read_only: true });
        let dirs = |names: &[&str]| names.iter().map(|n| (PathBuf::from(n), Point::Dir)).collect::<Vec<_>>();
        assert_eq!(p.points, dirs(&["/proc", "/dev", "/sys", "/run", "/tmp"]), "/dev's entries are made in its tmpfs");
    }

    #[test]
    fn volumes_go_at_their_paths_after_their_parents_and_replace_the_defaults_there() {
        let vols =
            [vol("/scratch", true), vol("/dev/termination-log", false), vol("/tmp", true), vol("/etc/app/conf", false)];
        let p = plan(&inputs(&vols, &[]));
        let t = targets(&p);
        assert_eq!(t.iter().filter(|t| *t == "/tmp").count(), 1, "the pod's /tmp, not a tmpfs: {t:?}");
        let tmp = p.mounts.iter().find(|m| m.target == Path::new("/tmp")).unwrap();
        assert!(matches!(&tmp.what, What::Bind { source, .. } if source.ends_with("volumes/tmp")));
        let pos = |x: &str| t.iter().position(|y| y == x).unwrap();
        assert!(pos("/dev") < pos("/dev/termination-log"));
        assert!(!p.points.iter().any(|(t, _)| t == Path::new("/dev/termination-log")), "made in /dev's tmpfs");
        let log = p.mounts.iter().find(|m| m.target == Path::new("/dev/termination-log")).unwrap();
        assert_eq!(log.point, Point::File);
        assert!(p.points.contains(&("/etc/app/conf".into(), Point::File)));
        assert!(p.points.contains(&("/scratch".into(), Point::Dir)));
    }

    #[test]
    fn a_read_only_root_has_no_writable_layer_and_no_tmp() {
        let mut inp = inputs(&[], &[]);
        inp.read_only_root = true;
        let p = plan(&inp);
        assert!(matches!(p.base, Base::Overlay { writable: None, .. }));
        assert!(!targets(&p).contains(&"/tmp".to_string()));
        assert!(targets(&p).contains(&"/run".to_string()));
    }

    #[test]
    fn a_privileged_container_gets_the_nodes_dev_and_a_writable_sys() {
        let mut inp = inputs(&[], &[]);
        inp.privileged = true;
        let p = plan(&inp);
        assert_eq!(p.mounts[1].what, What::Bind { source: "/dev".into(), read_only: false, recursive: true });
        assert!(!targets(&p).contains(&"/dev/pts".to_string()));
        assert!(p.mounts.iter().any(|m| m.target == Path::new("/sys") && m.what == What::Sysfs { read_only: false }));
    }

    #[test]
    fn the_nodes_binary_partitions_come_along_read_only_and_nothing_else_of_its() {
        let m = |p: &str, t: &str| NodeMount { mount_point: p.into(), fs_type: t.into() };
        let node = [
            m("/", "ext4"),
            m("/usr", "ext4"),
            m("/opt/tools", "xfs"),
            m("/home", "ext4"),
            m("/var/lib", "ext4"),
            m("/usr/share/big", "tmpfs"),
        ];
        let p = plan(&inputs(&[], &node));
        let binds: Vec<_> = p
            .mounts
            .iter()
            .filter(|x| matches!(x.what, What::Bind { read_only: true, .. }))
            .map(|x| x.target.display().to_string())
            .collect();
        assert_eq!(binds, ["/usr", "/opt/tools"]);
    }

    #[test]
    fn without_overlayfs_the_root_is_the_nodes_read_only_and_missing_mount_paths_are_refused() {
        let mut inp = inputs(&[], &[]);
        inp.overlay = false;
        assert_eq!(plan(&inp).base, Base::ReadOnlyBind);
        let vols = [vol("/etc", true), vol("/scratch", true)];
        assert_eq!(
            fallback_refusal(&vols, |p| p == Path::new("/etc")),
            Some("mountPath /scratch does not exist on this node, and this kernel has no overlayfs to give the container a root of its own".into())
        );
        assert_eq!(fallback_refusal(&vols[..1], |p| p == Path::new("/etc")), None);
    }
}
