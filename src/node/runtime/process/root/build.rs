//! Makes a container's root (`root::plan`) in two halves. `prepare` runs in the shim (a
//! single-threaded process, before it forks the workload): it takes a mount namespace of
//! its own and makes the base and every mount of the plan there, saying which one failed.
//! `enter` runs in the workload's first process between fork and exec, with system calls
//! only: a mount namespace of its own (a copy of the shim's), its `/proc` with the masked
//! and read-only paths, `pivot_root` into the new root, the old one detached, and the
//! working directory.
//!
//! Every mount point is reached by a walk from the new root one name at a time, a symbolic
//! link on the way refused (one made in a volume by an earlier container cannot send a
//! mount, or a mount point, to the node), and mounted through `/proc/self/fd/N`.

use super::{Base, Point, RootMount, RootPlan, What};
use std::ffi::{CStr, CString};
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// The skeleton layer's tmpfs: mount points only (directories and empty files).
const SKELETON_OPTIONS: &str = "mode=755,size=1m,nr_inodes=16384";

/// What the workload's first process needs to enter the root (`enter`), made by `prepare`.
#[derive(Debug)]
pub struct Entry {
    merged: CString,
    proc: CString,
    proc_masked: Vec<CString>,
    proc_read_only: Vec<CString>,
    dev_null: CString,
    workdir: CString,
}

/// A step of `enter`, written to the shim when it fails (so the start error names it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Step {
    /// A mount namespace of its own.
    Namespace = 1,
    /// Mounting `/proc`.
    Proc,
    /// Masking or making read-only a `/proc` path.
    ProcPaths,
    /// `pivot_root` and detaching the old root.
    Pivot,
    /// Entering the working directory.
    WorkingDir,
}

impl Step {
    /// The step a byte written by `enter` names.
    pub fn from_byte(b: u8) -> Option<Step> {
        [Step::Namespace, Step::Proc, Step::ProcPaths, Step::Pivot, Step::WorkingDir]
            .into_iter()
            .find(|s| *s as u8 == b)
    }

    /// What the step does, for a start error.
    pub fn describe(self, workdir: &str) -> String {
        match self {
            Step::Namespace => "taking a mount namespace of its own".into(),
            Step::Proc => "mounting /proc".into(),
            Step::ProcPaths => "masking /proc paths".into(),
            Step::Pivot => "entering its root (pivot_root)".into(),
            Step::WorkingDir => format!("entering working directory {workdir:?}"),
        }
    }
}

/// What this node offers a container's root: nothing without root, else an overlay when
/// the kernel has overlayfs, else a read-only bind of `/`.
pub fn support() -> super::Support {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return super::Support::None;
    }
    let read = |p: &str| fs::read_to_string(p).unwrap_or_default();
    let release = read("/proc/sys/kernel/osrelease");
    let modules = |f: &str| read(&format!("/lib/modules/{}/{f}", release.trim()));
    if has_overlay(&read("/proc/filesystems"), &modules("modules.dep"), &modules("modules.builtin")) {
        super::Support::Overlay
    } else {
        super::Support::ReadOnlyBind
    }
}

/// Whether the kernel has overlayfs: registered (`/proc/filesystems`), or a module of it
/// there to be loaded by the first overlay mount (`modules.dep`, `modules.builtin`), as on
/// a freshly booted Debian, where nothing has loaded it yet.
fn has_overlay(filesystems: &str, modules_dep: &str, modules_builtin: &str) -> bool {
    let module =
        |l: &str| l.split(':').next().is_some_and(|m| m.ends_with("/overlay.ko") || m.contains("/overlay.ko."));
    filesystems.lines().any(|l| l.split_whitespace().last() == Some("overlay"))
        || modules_dep.lines().chain(modules_builtin.lines()).any(module)
}

/// The node's mounts, from `/proc/self/mountinfo`.
pub fn node_mounts() -> io::Result<Vec<super::NodeMount>> {
    Ok(super::parse_mountinfo(&fs::read_to_string("/proc/self/mountinfo")?))
}

/// An error with what was being done.
fn context(what: impl std::fmt::Display) -> impl FnOnce(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::other(format!("{}: a path with a NUL byte", p.display())))
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `mount(2)`.
fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> io::Result<()> {
    let p = |c: Option<&CStr>| c.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: every pointer is a NUL-terminated string that outlives the call, or null.
    check(unsafe { libc::mount(p(source), target.as_ptr(), p(fstype), flags, p(data).cast()) })
}

/// Splits mount options as `mount(8)` writes them into `mount(2)` flags and the
/// filesystem's own options.
fn split_options(options: &str) -> (libc::c_ulong, String) {
    let mut flags = 0;
    let mut data = Vec::new();
    for o in options.split(',').filter(|o| !o.is_empty()) {
        match o {
            "ro" => flags |= libc::MS_RDONLY,
            "nosuid" => flags |= libc::MS_NOSUID,
            "nodev" => flags |= libc::MS_NODEV,
            "noexec" => flags |= libc::MS_NOEXEC,
            "strictatime" => flags |= libc::MS_STRICTATIME,
            other => data.push(other),
        }
    }
    (flags, data.join(","))
}

/// The path in the shim's namespace of `target` (absolute in the container) below `merged`.
fn inside(merged: &Path, target: &Path) -> PathBuf {
    merged.join(target.strip_prefix("/").unwrap_or(target))
}

/// In the shim, before it forks the workload: a mount namespace of its own (the node's
/// later mounts still arrive, nothing goes back), and in it the root `plan` describes,
/// mounted at `plan.merged`. `workdir` (absolute in the container) is made when missing,
/// as runc does, where the root is writable.
pub fn prepare(plan: &RootPlan, workdir: &str) -> io::Result<Entry> {
    // SAFETY: a plain system call in a single-threaded process.
    check(unsafe { libc::unshare(libc::CLONE_NEWNS) }).map_err(context("a mount namespace of its own"))?;
    mount(None, c"/", None, libc::MS_REC | libc::MS_SLAVE, None).map_err(context("making / a slave of the node's"))?;
    let merged = &plan.merged;
    fs::DirBuilder::new().recursive(true).mode(0o755).create(merged).map_err(context(merged.display()))?;
    let merged_c = cstr(merged)?;
    match &plan.base {
        Base::Overlay { skeleton, writable } => {
            fs::DirBuilder::new().recursive(true).mode(0o755).create(skeleton).map_err(context(skeleton.display()))?;
            let sk = cstr(skeleton)?;
            let data = CString::new(SKELETON_OPTIONS).expect("no NUL");
            mount(Some(c"tmpfs"), &sk, Some(c"tmpfs"), libc::MS_NOSUID | libc::MS_NODEV, Some(&data))
                .map_err(context(format!("mounting the skeleton layer at {}", skeleton.display())))?;
            make_points(skeleton, &plan.points)?;
            let mut flags = 0;
            let data = match writable {
                Some((upper, work)) => {
                    for d in [upper, work] {
                        fs::DirBuilder::new().recursive(true).mode(0o755).create(d).map_err(context(d.display()))?;
                    }
                    // The root of the writable layer is the container's `/`: as the node's.
                    let root = fs::metadata("/").map_err(context("/"))?;
                    copy_owner_and_mode(upper, &root)?;
                    format!("lowerdir={}:/,upperdir={},workdir={}", escape(skeleton), escape(upper), escape(work))
                }
                None => {
                    flags |= libc::MS_RDONLY;
                    format!("lowerdir={}:/", escape(skeleton))
                }
            };
            let data = CString::new(data).map_err(|_| io::Error::other("a layer path with a NUL byte"))?;
            mount(Some(c"overlay"), &merged_c, Some(c"overlay"), flags, Some(&data))
                .map_err(context(format!("mounting the overlay of / at {}", merged.display())))?;
        }
        Base::ReadOnlyBind => {
            mount(Some(c"/"), &merged_c, None, libc::MS_BIND, None).map_err(context("binding / as the root"))?;
            mount(None, &merged_c, None, libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY, None)
                .map_err(context("making the root read-only"))?;
        }
    }
    let root = open_dir(&merged_c)?;
    for m in &plan.mounts {
        mount_one(&root, m).map_err(context(format!("mounting {}", m.target.display())))?;
    }
    if workdir != "/" {
        // Made where it can be (a writable root, a volume); a read-only one says at chdir.
        let _ = walk(&root, Path::new(workdir), Some(Point::Dir));
    }
    let merged_path = |p: &Path| cstr(&inside(merged, p));
    Ok(Entry {
        proc: merged_path(Path::new("/proc"))?,
        proc_masked: plan.proc_masked.iter().map(|p| merged_path(p)).collect::<io::Result<_>>()?,
        proc_read_only: plan.proc_read_only.iter().map(|p| merged_path(p)).collect::<io::Result<_>>()?,
        dev_null: merged_path(Path::new("/dev/null"))?,
        merged: merged_c,
        workdir: CString::new(workdir).map_err(|_| io::Error::other("a working directory with a NUL byte"))?,
    })
}

/// A layer's path in overlayfs's options: `\`, `:` and `,` escaped.
fn escape(p: &Path) -> String {
    let s = p.to_string_lossy();
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | ':' | ',') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn copy_owner_and_mode(path: &Path, like: &fs::Metadata) -> io::Result<()> {
    std::os::unix::fs::chown(path, Some(like.uid()), Some(like.gid())).map_err(context(path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(like.mode() & 0o7777)).map_err(context(path.display()))
}

/// The skeleton layer's mount points, each directory on the way with the owner and mode of
/// the node's directory there (the overlay shows the skeleton's), else root's 0755.
fn make_points(skeleton: &Path, points: &[(PathBuf, Point)]) -> io::Result<()> {
    for (target, kind) in points {
        let mut node = PathBuf::from("/");
        let names: Vec<_> = target.components().filter(|c| matches!(c, Component::Normal(_))).collect();
        for (i, name) in names.iter().enumerate() {
            node.push(name);
            let at = inside(skeleton, &node);
            let last = i + 1 == names.len();
            if at.symlink_metadata().is_ok() {
                continue;
            }
            if last && *kind == Point::File {
                fs::File::create(&at).map_err(context(at.display()))?;
                continue;
            }
            fs::DirBuilder::new().mode(0o755).create(&at).map_err(context(at.display()))?;
            if let Some(m) = fs::symlink_metadata(&node).ok().filter(|m| m.is_dir()) {
                copy_owner_and_mode(&at, &m)?;
            }
        }
    }
    Ok(())
}

fn open_dir(path: &CStr) -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated path; the fd returned is owned here.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    check(fd)?;
    // SAFETY: a new fd, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat(at, name, O_PATH|O_NOFOLLOW)`; `None` when there is nothing there.
fn open_at(at: RawFd, name: &CStr) -> io::Result<Option<OwnedFd>> {
    // SAFETY: a NUL-terminated name relative to an open directory fd.
    let fd = unsafe { libc::openat(at, name.as_ptr(), libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::NotFound { Ok(None) } else { Err(e) };
    }
    // SAFETY: a new fd, owned by no one else.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

fn file_type(fd: &OwnedFd) -> io::Result<libc::mode_t> {
    // SAFETY: fstat into a zeroed stat on an open fd.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st.st_mode & libc::S_IFMT)
}

/// Opens `target` (absolute in the root `root`) one name at a time, never through a
/// symbolic link; with `make`, what is missing is made (directories 0755, the last one as
/// `make` says). `None`: nothing there and nothing to make.
fn walk(root: &OwnedFd, target: &Path, make: Option<Point>) -> io::Result<Option<OwnedFd>> {
    let names: Vec<_> =
        target.components().filter_map(|c| if let Component::Normal(n) = c { Some(n) } else { None }).collect();
    let mut cur: Option<OwnedFd> = None;
    for (i, name) in names.iter().enumerate() {
        let last = i + 1 == names.len();
        let at = cur.as_ref().unwrap_or(root).as_raw_fd();
        let c = CString::new(name.as_bytes()).map_err(|_| io::Error::other("a path with a NUL byte"))?;
        let fd = match open_at(at, &c)? {
            Some(fd) => fd,
            None => {
                let Some(kind) = make else { return Ok(None) };
                if last && kind == Point::File {
                    // SAFETY: a NUL-terminated name relative to an open directory fd.
                    let f = unsafe {
                        libc::openat(
                            at,
                            c.as_ptr(),
                            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                            0o644,
                        )
                    };
                    check(f)?;
                    // SAFETY: a new fd, closed at once.
                    drop(unsafe { OwnedFd::from_raw_fd(f) });
                } else {
                    // SAFETY: as above.
                    check(unsafe { libc::mkdirat(at, c.as_ptr(), 0o755) })?;
                }
                open_at(at, &c)?.ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?
            }
        };
        let t = file_type(&fd)?;
        if t == libc::S_IFLNK {
            let on = names[..=i].iter().fold(PathBuf::from("/"), |p, n| p.join(n));
            return Err(io::Error::other(format!(
                "{} is a symbolic link (refused on the way to a mount point)",
                on.display()
            )));
        }
        if !last && t != libc::S_IFDIR {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        cur = Some(fd);
    }
    Ok(Some(match cur {
        Some(fd) => fd,
        None => root.try_clone()?,
    }))
}

/// `/proc/self/fd/N`: the path through which a walked-to mount point is mounted on.
fn fd_path(fd: &OwnedFd) -> CString {
    CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("no NUL")
}

fn mount_one(root: &OwnedFd, m: &RootMount) -> io::Result<()> {
    let make = if m.what == What::Masked { None } else { Some(m.point) };
    let Some(point) = walk(root, &m.target, make)? else { return Ok(()) };
    let at = fd_path(&point);
    // The mount on top, reached again by name (the walked fd is the mount point below it).
    let mounted = || walk(root, &m.target, None)?.ok_or_else(|| io::Error::from(io::ErrorKind::NotFound));
    match &m.what {
        What::Bind { source, read_only, recursive, from_host } => {
            let flags = libc::MS_BIND | if *recursive { libc::MS_REC } else { 0 };
            mount(Some(&cstr(source)?), &at, None, flags, None)
                .map_err(context(format!("binding {}", source.display())))?;
            let top_fd = mounted()?;
            let top = fd_path(&top_fd);
            if *read_only {
                mount(None, &top, None, libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY, None)
                    .map_err(context("making it read-only"))?;
            }
            // Nothing is ever mounted below a file: its propagation does not matter.
            if m.point == Point::Dir {
                let propagation = if *from_host { libc::MS_SLAVE } else { libc::MS_PRIVATE };
                mount(None, &top, None, libc::MS_REC | propagation, None)
                    .map_err(context("setting its propagation"))?;
            }
        }
        What::Tmpfs(options) => {
            let (flags, data) = split_options(options);
            let data = CString::new(data).expect("no NUL");
            mount(Some(c"tmpfs"), &at, Some(c"tmpfs"), flags, Some(&data))?;
        }
        What::DevTmpfs => {
            let (flags, data) = split_options("mode=755,size=65536k,nosuid,strictatime");
            let data = CString::new(data).expect("no NUL");
            mount(Some(c"tmpfs"), &at, Some(c"tmpfs"), flags, Some(&data))?;
            let dev = mounted()?;
            for (name, to) in [
                (c"ptmx", c"pts/ptmx"),
                (c"fd", c"/proc/self/fd"),
                (c"stdin", c"/proc/self/fd/0"),
                (c"stdout", c"/proc/self/fd/1"),
                (c"stderr", c"/proc/self/fd/2"),
                (c"core", c"/proc/kcore"),
            ] {
                // SAFETY: NUL-terminated strings, a directory fd.
                check(unsafe { libc::symlinkat(to.as_ptr(), dev.as_raw_fd(), name.as_ptr()) })?;
            }
        }
        What::Sysfs { read_only } => {
            let flags =
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | if *read_only { libc::MS_RDONLY } else { 0 };
            mount(Some(c"sysfs"), &at, Some(c"sysfs"), flags, None)?;
        }
        What::Devpts => {
            let data = c"newinstance,ptmxmode=0666,mode=0620,gid=5";
            mount(Some(c"devpts"), &at, Some(c"devpts"), libc::MS_NOSUID | libc::MS_NOEXEC, Some(data))?;
        }
        What::Mqueue => {
            mount(Some(c"mqueue"), &at, Some(c"mqueue"), libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, None)?;
        }
        What::Masked => {
            if file_type(&point)? == libc::S_IFDIR {
                let data = c"size=4k,mode=755";
                mount(Some(c"tmpfs"), &at, Some(c"tmpfs"), libc::MS_RDONLY, Some(data))?;
            } else {
                mount(Some(c"/dev/null"), &at, None, libc::MS_BIND, None)?;
            }
        }
    }
    Ok(())
}

/// In the workload's first process, between fork and exec (system calls only, nothing
/// allocated): a mount namespace of its own, `/proc` (of its PID namespace) with its
/// masked and read-only paths, `pivot_root` into the new root, the old one detached, and
/// the working directory. On failure, the step that failed.
pub fn enter(e: &Entry) -> Result<(), (Step, io::Error)> {
    let at = |s: Step| move |err: io::Error| (s, err);
    // A copy of the shim's namespace, so `pivot_root` moves only the workload's root.
    // SAFETY: a plain system call.
    check(unsafe { libc::unshare(libc::CLONE_NEWNS) }).map_err(at(Step::Namespace))?;
    mount(Some(c"proc"), &e.proc, Some(c"proc"), libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, None)
        .map_err(at(Step::Proc))?;
    for p in &e.proc_masked {
        // SAFETY: stat into a zeroed struct on a NUL-terminated path.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::stat(p.as_ptr(), &mut st) } != 0 {
            continue;
        }
        let r = if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            mount(Some(c"tmpfs"), p, Some(c"tmpfs"), libc::MS_RDONLY, Some(c"size=4k,mode=755"))
        } else {
            mount(Some(&e.dev_null), p, None, libc::MS_BIND, None)
        };
        r.map_err(at(Step::ProcPaths))?;
    }
    for p in &e.proc_read_only {
        // SAFETY: as above.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::stat(p.as_ptr(), &mut st) } != 0 {
            continue;
        }
        mount(Some(p), p, None, libc::MS_BIND | libc::MS_REC, None).map_err(at(Step::ProcPaths))?;
        mount(None, p, None, libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY, None).map_err(at(Step::ProcPaths))?;
    }
    // runc's way: the old root stacked on the new one, then detached.
    // SAFETY: plain system calls on NUL-terminated paths.
    check(unsafe { libc::chdir(e.merged.as_ptr()) }).map_err(at(Step::Pivot))?;
    // SAFETY: as above.
    check(unsafe { libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) } as libc::c_int)
        .map_err(at(Step::Pivot))?;
    // SAFETY: as above.
    check(unsafe { libc::umount2(c".".as_ptr(), libc::MNT_DETACH) }).map_err(at(Step::Pivot))?;
    // SAFETY: as above.
    check(unsafe { libc::chdir(e.workdir.as_ptr()) }).map_err(at(Step::WorkingDir))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlayfs_is_there_when_registered_or_a_module_of_it_can_be_loaded() {
        assert!(has_overlay("nodev\tproc\nnodev\toverlay\n", "", ""));
        let dep = "kernel/fs/overlayfs/overlay.ko.xz: \nkernel/fs/fuse/fuse.ko.xz:\n";
        assert!(has_overlay("nodev\tproc\n", dep, ""));
        assert!(has_overlay("", "", "kernel/fs/overlayfs/overlay.ko\n"));
        assert!(!has_overlay("nodev\tproc\n\text4\n", "kernel/fs/fuse/fuse.ko.xz:\n", ""));
        assert!(!has_overlay("", "kernel/fs/overlayfs2/not-overlay.ko:\n", ""));
    }

    #[test]
    fn mount_options_split_into_flags_and_the_filesystems_own() {
        let (flags, data) = split_options("mode=1777,size=65536k,nosuid,nodev,noexec");
        assert_eq!(flags, libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC);
        assert_eq!(data, "mode=1777,size=65536k");
        assert_eq!(split_options("ro,strictatime"), (libc::MS_RDONLY | libc::MS_STRICTATIME, String::new()));
    }

    #[test]
    fn a_layer_path_is_escaped_for_overlayfs() {
        assert_eq!(escape(Path::new("/var/lib/a:b,c\\d")), "/var/lib/a\\:b\\,c\\\\d");
        assert_eq!(escape(Path::new("/plain/path")), "/plain/path");
    }

    #[test]
    fn a_step_survives_the_byte_it_is_written_as() {
        for s in [Step::Namespace, Step::Proc, Step::ProcPaths, Step::Pivot, Step::WorkingDir] {
            assert_eq!(Step::from_byte(s as u8), Some(s));
        }
        assert_eq!(Step::from_byte(0), None);
        assert_eq!(Step::WorkingDir.describe("/app"), "entering working directory \"/app\"");
    }
}
