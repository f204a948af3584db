//! Disk usage: `statvfs` of a filesystem (its size, what is free, its inodes), and `du`, a
//! bounded walk of one directory tree (a pod's `emptyDir`, a container's logs) that counts
//! the blocks and inodes it holds as kubelet's `du` does: blocks as `st_blocks` × 512, each
//! hard-linked inode once, without following symbolic links or crossing into another
//! filesystem (a mount inside the tree). A tree on a tmpfs is counted too: `nodefs` itself
//! may be one on a small device (a `medium: Memory` `emptyDir` is left out by the pod's
//! targets, as it is memory). A walk opens each directory
//! relative to its parent with `O_NOFOLLOW`, so a workload that swaps a directory for a link
//! while it is walked cannot lead it out of its tree, and it stops after `max_entries`
//! entries, saying so, so that no pod can make the stats thread slow.

use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Entries a walk of one tree visits at most (kubelet's `du` has no bound; a pod with a
/// million files would hold this thread for seconds every period).
pub const MAX_ENTRIES: usize = 100_000;

/// Directories open at once in a walk, so a deep tree cannot use up the agent's descriptors;
/// deeper directories are counted as entries but not walked (the walk says it was cut).
pub const MAX_DEPTH: usize = 64;

/// `TMPFS_MAGIC` and `RAMFS_MAGIC`: filesystems in memory.
#[cfg(test)]
const MEMORY_FS: [i64; 2] = [0x0102_1994, 0x8584_58f6];

/// A filesystem's size and what is left of it (`statvfs`), in bytes and inodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsTotals {
    /// The size.
    pub capacity: u64,
    /// Free for unprivileged users (`f_bavail`), as `df` shows.
    pub available: u64,
    /// Used by anyone: size less everything free, the root's reserve included (`f_bfree`).
    pub used: u64,
    /// Its inodes.
    pub inodes: u64,
    /// Inodes free.
    pub inodes_free: u64,
}

impl FsTotals {
    /// The numbers of `statvfs`'s answer.
    #[allow(clippy::unnecessary_cast)] // 32 bits wide on 32-bit ARM, 64 here
    pub fn from_statvfs(st: &libc::statvfs) -> FsTotals {
        let block = st.f_frsize as u64;
        let capacity = (st.f_blocks as u64).saturating_mul(block);
        FsTotals {
            capacity,
            available: (st.f_bavail as u64).saturating_mul(block),
            used: capacity.saturating_sub((st.f_bfree as u64).saturating_mul(block)),
            inodes: st.f_files as u64,
            inodes_free: st.f_ffree as u64,
        }
    }

    /// Inodes in use.
    pub fn inodes_used(&self) -> u64 {
        self.inodes.saturating_sub(self.inodes_free)
    }
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the path"))
}

/// The filesystem holding `path`.
pub fn statvfs(path: &Path) -> io::Result<FsTotals> {
    let c = c_path(path)?;
    // SAFETY: an all-zero statvfs is a valid value for the call to fill.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a valid out pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(FsTotals::from_statvfs(&st))
}

/// What a walk of a tree found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// The filesystem the tree is on (`st_dev`).
    pub dev: u64,
    /// Bytes its blocks take (`st_blocks` × 512).
    pub bytes: u64,
    /// Inodes: files, directories and links, the tree's root included.
    pub inodes: u64,
    /// Entries looked at.
    pub visited: u64,
    /// Cut short (`max_entries` or `MAX_DEPTH` reached): the numbers are at least this.
    pub truncated: bool,
}

/// An open directory stream; closed when dropped.
struct Dir(*mut libc::DIR);

impl Dir {
    /// The stream of directory `fd` (which it then owns).
    fn from_fd(fd: OwnedFd) -> io::Result<Dir> {
        let raw = fd.as_raw_fd();
        // SAFETY: a valid open directory descriptor; on success the stream owns it.
        let d = unsafe { libc::fdopendir(raw) };
        if d.is_null() {
            return Err(io::Error::last_os_error());
        }
        std::mem::forget(fd);
        Ok(Dir(d))
    }

    fn fd(&self) -> RawFd {
        // SAFETY: a valid open stream.
        unsafe { libc::dirfd(self.0) }
    }

    /// The next entry's name (not `.` or `..`), `None` at the end.
    fn next(&mut self) -> io::Result<Option<CString>> {
        loop {
            // SAFETY: errno is thread-local; cleared to tell the end from an error.
            unsafe { *libc::__errno_location() = 0 };
            // SAFETY: a valid open stream, used by this thread alone.
            let e = unsafe { libc::readdir(self.0) };
            if e.is_null() {
                let err = io::Error::last_os_error();
                return if err.raw_os_error() == Some(0) { Ok(None) } else { Err(err) };
            }
            // SAFETY: readdir returned a valid entry whose name is NUL-terminated; it is copied
            // before the next call.
            let name = unsafe { CStr::from_ptr((*e).d_name.as_ptr()) };
            if name.to_bytes() != b"." && name.to_bytes() != b".." {
                return Ok(Some(name.to_owned()));
            }
        }
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        // SAFETY: the stream is open and closed once, here.
        unsafe { libc::closedir(self.0) };
    }
}

/// Opens directory `name` in `dir` (or the path `name` with `AT_FDCWD`) without following a
/// link.
fn open_dir(dir: RawFd, name: &CStr) -> io::Result<OwnedFd> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a valid directory descriptor (or AT_FDCWD) and a NUL-terminated name.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openat returned a new descriptor this function owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn fstatat(dir: RawFd, name: &CStr, flags: i32) -> io::Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid value for the call to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor, a NUL-terminated name and a valid out pointer.
    if unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// Whether the filesystem of `fd` is in memory (tmpfs, ramfs).
#[cfg(test)]
fn in_memory(fd: RawFd) -> io::Result<bool> {
    // SAFETY: an all-zero statfs is a valid value for the call to fill.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a valid out pointer.
    if unsafe { libc::fstatfs(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(MEMORY_FS.contains(&(st.f_type as i64)))
}

/// The blocks of one inode, in bytes.
fn bytes_of(st: &libc::stat) -> u64 {
    (st.st_blocks as u64).saturating_mul(512)
}

/// Walks the tree at `path` (a directory, not followed if a link) and counts what it holds,
/// visiting at most `max_entries` entries. A file that goes while it is walked is skipped.
pub fn du(path: &Path, max_entries: usize) -> io::Result<DiskUsage> {
    let root = open_dir(libc::AT_FDCWD, &c_path(path)?)?;
    let st = fstatat(root.as_raw_fd(), c".", 0)?;
    let dev = st.st_dev;
    let mut usage = DiskUsage { dev, bytes: bytes_of(&st), inodes: 1, visited: 1, truncated: false };
    // Inodes with more than one link, counted once each (as du does).
    let mut linked: HashSet<u64> = HashSet::new();
    let mut stack = vec![Dir::from_fd(root)?];
    'walk: while let Some(dir) = stack.last_mut() {
        let name = match dir.next() {
            Ok(Some(name)) => name,
            Ok(None) => {
                stack.pop();
                continue;
            }
            // A directory removed while it is read: what was counted stays counted.
            Err(_) => {
                stack.pop();
                continue;
            }
        };
        if usage.visited >= max_entries as u64 {
            usage.truncated = true;
            break 'walk;
        }
        usage.visited += 1;
        let st = match fstatat(dir.fd(), &name, libc::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(_) => continue,
        };
        // A mount inside the tree: another filesystem's, not this one's.
        if st.st_dev != dev {
            continue;
        }
        if st.st_nlink > 1 && (st.st_mode & libc::S_IFMT) != libc::S_IFDIR && !linked.insert(st.st_ino) {
            continue;
        }
        usage.bytes = usage.bytes.saturating_add(bytes_of(&st));
        usage.inodes += 1;
        if (st.st_mode & libc::S_IFMT) == libc::S_IFDIR {
            let parent = dir.fd();
            if stack.len() >= MAX_DEPTH {
                usage.truncated = true;
                continue;
            }
            // Gone, or swapped for a link or another directory since the stat: not walked.
            let same = |fd: &OwnedFd| {
                fstatat(fd.as_raw_fd(), c".", 0).is_ok_and(|o| o.st_dev == st.st_dev && o.st_ino == st.st_ino)
            };
            if let Some(child) = open_dir(parent, &name).ok().filter(same).and_then(|fd| Dir::from_fd(fd).ok()) {
                stack.push(child);
            }
        }
    }
    Ok(usage)
}

#[cfg(test)]
mod tests;
