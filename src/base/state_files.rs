//! Files the agent writes and reads back: atomic writes, private (or group-shared) modes, bounded JSON records.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::Path;

/// Largest record `read_json` accepts (and the process runtime writes). A container record
/// holds the pod's command, args and env (a pod passes validation up to about 1.5 MiB, as
/// etcd's default request limit) plus a device plugin's merged `Allocate` responses (up to
/// grpcio's 4 MiB message limit), with the plugin envs in two places; JSON escaping and
/// indentation add to that. 16 MiB admits every record such inputs make, and still bounds
/// what one corrupt or hostile file can make the agent allocate.
pub const MAX_RECORD_SIZE: u64 = 16 << 20;

/// Who may read the state directory: the owner only (`0700` directories, `0600` files), or
/// also one group (`0750`, `0640`) when `state_group` is configured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateAccess {
    /// The group given read access, if any.
    pub gid: Option<u32>,
}

static STATE_GID: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(-1);

impl StateAccess {
    /// The access every file written from now on gets (process-wide: the agent and its shims
    /// write the same state directory).
    pub fn install(self) {
        STATE_GID.store(self.gid.map_or(-1, i64::from), std::sync::atomic::Ordering::Relaxed);
    }

    /// The access installed for this process (owner only by default).
    pub fn current() -> StateAccess {
        let g = STATE_GID.load(std::sync::atomic::Ordering::Relaxed);
        StateAccess { gid: u32::try_from(g).ok() }
    }

    /// Mode of directories: `0700`, or `0750` with a group.
    pub fn dir_mode(self) -> u32 {
        if self.gid.is_some() {
            0o750
        } else {
            0o700
        }
    }

    /// Mode of files: `0600`, or `0640` with a group.
    pub fn file_mode(self) -> u32 {
        if self.gid.is_some() {
            0o640
        } else {
            0o600
        }
    }

    /// Gives `path` this access: its mode, and its group when one is configured.
    pub fn apply(self, path: &Path, is_dir: bool) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        if let Some(gid) = self.gid {
            std::os::unix::fs::lchown(path, None, Some(gid))?;
        }
        let mode = if is_dir { self.dir_mode() } else { self.file_mode() };
        fs::set_permissions(path, fs::Permissions::from_mode(mode))
    }
}

/// The gid of group `name` (a name from the group database, or a number).
pub fn group_id(name: &str) -> io::Result<u32> {
    if let Ok(gid) = name.parse::<u32>() {
        return Ok(gid);
    }
    let cname = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a group name cannot contain NUL"))?;
    // SAFETY: `group` is plain old data (integers and pointers); all-zero is a valid value.
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut buf = vec![0u8; 16 * 1024];
    let mut result: *mut libc::group = std::ptr::null_mut();
    // SAFETY: getgrnam_r writes into grp and buf, both valid for the lengths given.
    let rc = unsafe { libc::getgrnam_r(cname.as_ptr(), &mut grp, buf.as_mut_ptr().cast(), buf.len(), &mut result) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    if result.is_null() {
        return Err(io::Error::new(io::ErrorKind::NotFound, "no such group"));
    }
    Ok(grp.gr_gid)
}

/// Creates `path` and its missing parents with the state directory's access (`0700`), and
/// gives `path` itself that access even when it existed.
pub fn create_private_dir_all(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let access = StateAccess::current();
    fs::DirBuilder::new().recursive(true).mode(access.dir_mode()).create(path)?;
    access.apply(path, true)
}

/// Creates (or truncates) a file readable only as `StateAccess` allows.
pub fn create_private_file(path: &Path) -> io::Result<File> {
    open_private(path, false)
}

/// Opens a file for appending, creating it readable only as `StateAccess` allows.
pub fn append_private_file(path: &Path) -> io::Result<File> {
    open_private(path, true)
}

fn open_private(path: &Path, append: bool) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let access = StateAccess::current();
    let mut opts = fs::OpenOptions::new();
    opts.create(true).mode(access.file_mode());
    if append {
        opts.append(true);
    } else {
        opts.write(true).truncate(true);
    }
    let f = opts.open(path)?;
    if let Some(gid) = access.gid {
        std::os::unix::fs::fchown(&f, None, Some(gid))?;
    }
    Ok(f)
}

/// Gives every directory and regular file under `root` (and `root` itself) the state
/// directory's access, without following symlinks; sockets and other special files keep
/// theirs, and so does everything under `skip` (a device plugin directory must stay
/// reachable by plugins). Returns how many modes it changed.
pub fn fix_state_modes(root: &Path, skip: &[&Path]) -> io::Result<usize> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let access = StateAccess::current();
    let mut changed = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        if skip.iter().any(|s| !s.as_os_str().is_empty() && p.starts_with(s)) {
            continue;
        }
        let meta = fs::symlink_metadata(&p)?;
        let ft = meta.file_type();
        if !ft.is_dir() && !ft.is_file() {
            continue;
        }
        let want = if ft.is_dir() { access.dir_mode() } else { access.file_mode() };
        let group_ok = access.gid.map_or(true, |g| meta.gid() == g);
        if meta.permissions().mode() & 0o7777 != want || !group_ok {
            access.apply(&p, ft.is_dir())?;
            changed += 1;
        }
        if ft.is_dir() {
            for entry in fs::read_dir(&p)? {
                stack.push(entry?.path());
            }
        }
    }
    Ok(changed)
}

/// Writes `data` to `path` atomically: temp file in the same directory, fsync, rename,
/// fsync the directory. A reader sees the old content or the new one, never a torn file.
/// The file is readable only as `StateAccess` allows (it may hold secrets, such as env).
/// This is the one atomic-write helper: state records and the device checkpoint use it.
pub fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    write_atomic_as(path, data, StateAccess::current())
}

/// `write_atomic` with the access given, not the process-wide one (the device checkpoint
/// lives in the plugin directory, outside the state directory, and stays owner-only).
pub fn write_atomic_as(path: &Path, data: &[u8], access: StateAccess) -> io::Result<()> {
    write_atomic_mode(path, data, access, access.file_mode())
}

/// `write_atomic` for a file every user may read (`0644`, with the state group when one
/// is configured): a pod's hosts file, which its containers read through a bind mount as
/// whatever uid they run as. Nothing secret goes in such a file.
pub fn write_atomic_readable(path: &Path, data: &[u8]) -> io::Result<()> {
    write_atomic_mode(path, data, StateAccess::current(), 0o644)
}

/// `write_atomic` with `access`'s group and file mode `mode` (not narrowed by the umask):
/// a downward API volume file, whose mode the pod sets.
pub fn write_atomic_mode(path: &Path, data: &[u8], access: StateAccess, mode: u32) -> io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or_else(|| Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // Unique per call, not only per process: two threads may write the same file (a lost
    // container's exit, seen by the pod manager and a probe at once), and sharing one temp
    // file would interleave their writes into a torn record.
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.tmp.{}.{seq}", std::process::id()));
    write_via(&tmp, path, data, access, mode)?;
    File::open(dir)?.sync_all()
}

/// Writes `data` into the new file `tmp` (mode `mode`, `access`'s group), syncs it and
/// renames it to `path`; `tmp` is gone afterwards whatever happened.
fn write_via(tmp: &Path, path: &Path, data: &[u8], access: StateAccess, mode: u32) -> io::Result<()> {
    let written = create_new_private(tmp, access, mode).and_then(|mut f| {
        f.write_all(data)?;
        f.sync_all()?;
        fs::rename(tmp, path)
    });
    if written.is_err() {
        let _ = fs::remove_file(tmp);
    }
    written
}

/// Creates `tmp` afresh with `mode` and `access`'s group. Whatever is in its place (a file
/// a crashed run left, or a symlink planted there) is removed, never written through:
/// `O_EXCL` and `O_NOFOLLOW` do not follow a symlink.
fn create_new_private(tmp: &Path, access: StateAccess, mode: u32) -> io::Result<File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let open = || {
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(tmp)
    };
    let f = match open() {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            fs::remove_file(tmp)?;
            open()?
        }
        r => r?,
    };
    if let Some(gid) = access.gid {
        std::os::unix::fs::fchown(&f, None, Some(gid))?;
    }
    // The umask may have taken bits the mode asks for (a readable file must be readable).
    f.set_permissions(fs::Permissions::from_mode(mode))?;
    Ok(f)
}

/// Writes `value` as JSON atomically.
pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let data = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    write_atomic(path, &data)
}

/// Reads a JSON file written by `write_json`. A file over `MAX_RECORD_SIZE` is refused
/// with an error that says so (never parsed half and reported as a syntax error).
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> io::Result<T> {
    read_json_from(File::open(path)?, path)
}

/// `read_json` of a file already opened from `path` (a caller that looks at the open file
/// first, e.g. with `metadata`, reads exactly what it looked at).
pub fn read_json_from<T: serde::de::DeserializeOwned>(file: File, path: &Path) -> io::Result<T> {
    let mut data = Vec::new();
    file.take(MAX_RECORD_SIZE + 1).read_to_end(&mut data)?;
    if data.len() as u64 > MAX_RECORD_SIZE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: larger than the record limit of {MAX_RECORD_SIZE} bytes", path.display()),
        ));
    }
    serde_json::from_slice(&data)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_json_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.json");
        write_json(&p, &vec![1, 2, 3]).unwrap();
        let v: Vec<i32> = read_json(&p).unwrap();
        assert_eq!(v, vec![1, 2, 3]);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "no temp file left behind");
    }

    #[test]
    fn concurrent_atomic_writes_of_one_file_never_tear_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("exit.json");
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let path = &path;
                s.spawn(move || {
                    let data = vec![b'a' + t; 256 * 1024];
                    for _ in 0..20 {
                        write_atomic(path, &data).unwrap();
                        let read = fs::read(path).unwrap();
                        assert!(read.len() == data.len() && read.iter().all(|&b| b == read[0]), "a torn file");
                    }
                });
            }
        });
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "no temp file left behind");
    }

    #[test]
    fn atomic_writes_are_owner_only_by_default() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("secret");
        write_atomic_as(&p, b"env", StateAccess::default()).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::read(&p).unwrap(), b"env");
    }

    #[test]
    fn a_symlink_in_the_temp_files_place_is_removed_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        fs::write(&victim, "precious").unwrap();
        let tmp = dir.path().join(".x.tmp");
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        let p = dir.path().join("x");
        write_via(&tmp, &p, b"new", StateAccess::default(), 0o600).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(fs::read_to_string(&p).unwrap(), "new");
        assert!(fs::symlink_metadata(&tmp).is_err(), "the temp name is gone");
    }

    #[test]
    fn a_leftover_temp_file_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join(".x.tmp");
        fs::write(&tmp, "half a record from a crash").unwrap();
        let p = dir.path().join("x");
        write_via(&tmp, &p, b"whole", StateAccess::default(), 0o600).unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "whole");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn oversized_records_are_refused_with_the_limit_not_a_parse_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.json");
        let f = File::create(&p).unwrap();
        f.set_len(MAX_RECORD_SIZE + 1).unwrap();
        let e = read_json::<serde_json::Value>(&p).unwrap_err().to_string();
        assert!(e.contains("larger than the record limit of 16777216 bytes"), "{e}");
    }

    #[test]
    fn state_modes_are_fixed_without_touching_sockets_or_skipped_dirs() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("state");
        fs::create_dir_all(root.join("sub")).unwrap();
        fs::create_dir_all(root.join("plugins")).unwrap();
        fs::write(root.join("sub/f"), "x").unwrap();
        fs::write(root.join("plugins/keep"), "x").unwrap();
        let _sock = std::os::unix::net::UnixListener::bind(root.join("sock")).unwrap();
        let mode = |p: &Path| fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
        let sock_mode = mode(&root.join("sock"));
        fs::set_permissions(root.join("sub/f"), fs::Permissions::from_mode(0o644)).unwrap();
        fs::set_permissions(root.join("plugins/keep"), fs::Permissions::from_mode(0o644)).unwrap();
        let n = fix_state_modes(&root, &[&root.join("plugins")]).unwrap();
        assert!(n >= 2);
        assert_eq!((mode(&root), mode(&root.join("sub")), mode(&root.join("sub/f"))), (0o700, 0o700, 0o600));
        assert_eq!(mode(&root.join("plugins/keep")), 0o644);
        assert_eq!(mode(&root.join("sock")), sock_mode);
        assert_eq!(fix_state_modes(&root, &[&root.join("plugins")]).unwrap(), 0, "nothing left to fix");
    }
}
