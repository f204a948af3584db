use super::*;
use std::os::unix::fs::MetadataExt;

/// A temporary directory on a disk: where `/tmp` is a tmpfs, under `/var/tmp`.
fn disk_tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let fd = open_dir(libc::AT_FDCWD, &c_path(dir.path()).unwrap()).unwrap();
    if in_memory(fd.as_raw_fd()).unwrap() {
        return tempfile::tempdir_in("/var/tmp").unwrap();
    }
    dir
}

/// What `st_blocks` says a path takes, in bytes.
fn blocks(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).unwrap().blocks() * 512
}

#[test]
fn a_tree_counts_its_blocks_and_inodes_and_each_hard_link_once() {
    let dir = disk_tempdir();
    let root = dir.path().join("vol");
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    std::fs::write(root.join("a/one"), vec![7u8; 100_000]).unwrap();
    std::fs::write(root.join("a/b/two"), vec![7u8; 5000]).unwrap();
    std::fs::hard_link(root.join("a/one"), root.join("again")).unwrap();
    let want_bytes = ["", "a", "a/b", "a/one", "a/b/two"].iter().map(|p| blocks(&root.join(p))).sum::<u64>();
    let u = du(&root, MAX_ENTRIES).unwrap();
    assert_eq!(u.bytes, want_bytes, "the second link to one adds nothing");
    assert_eq!(u.inodes, 5, "vol, a, a/b, one, two");
    assert_eq!(u.visited, 6, "every entry looked at, the link too");
    assert!(!u.truncated);
    assert_eq!(u.dev, std::fs::metadata(&root).unwrap().dev());
}

#[test]
fn links_are_not_followed_out_of_the_tree() {
    let dir = disk_tempdir();
    let root = dir.path().join("vol");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("big"), vec![1u8; 1 << 20]).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("to-dir")).unwrap();
    std::os::unix::fs::symlink(outside.join("big"), root.join("to-file")).unwrap();
    let u = du(&root, MAX_ENTRIES).unwrap();
    assert_eq!(u.inodes, 3, "the root and the two links themselves");
    assert!(u.bytes < 1 << 20, "nothing of what they point at: {}", u.bytes);
    // A root that is itself a link is refused, not followed.
    let e = du(&root.join("to-dir"), MAX_ENTRIES).unwrap_err();
    assert!(matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)), "{e}");
    assert_eq!(du(&dir.path().join("none"), MAX_ENTRIES).unwrap_err().kind(), io::ErrorKind::NotFound);
}

#[test]
fn a_walk_stops_at_its_bound_and_says_so() {
    let dir = disk_tempdir();
    for i in 0..50 {
        std::fs::write(dir.path().join(format!("f{i}")), b"x").unwrap();
    }
    let u = du(dir.path(), 10).unwrap();
    assert!(u.truncated);
    assert_eq!(u.visited, 10);
    assert_eq!(u.inodes, 10, "the root and nine files");

    // Deeper than MAX_DEPTH: the directories below are counted but not entered.
    let mut deep = dir.path().join("deep");
    for _ in 0..MAX_DEPTH + 2 {
        deep = deep.join("d");
    }
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("bottom"), b"x").unwrap();
    let u = du(&dir.path().join("deep"), MAX_ENTRIES).unwrap();
    assert!(u.truncated);
    assert_eq!(u.inodes as usize, MAX_DEPTH + 1, "each directory down to the depth bound, not the file at the bottom");
}

#[test]
fn statvfs_reads_the_filesystem_of_a_path() {
    let dir = disk_tempdir();
    let fs = statvfs(dir.path()).unwrap();
    assert!(fs.capacity > 0 && fs.available <= fs.capacity && fs.used <= fs.capacity, "{fs:?}");
    assert!(fs.inodes == 0 || fs.inodes_free <= fs.inodes, "{fs:?}");
    assert_eq!(fs.inodes_used(), fs.inodes - fs.inodes_free);
    assert_eq!(statvfs(&dir.path().join("none")).unwrap_err().kind(), io::ErrorKind::NotFound);
}

/// Mounts a small tmpfs at `at`; `false` when this process may not (not root).
fn mount_tmpfs(at: &Path) -> bool {
    let target = CString::new(at.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid C strings; mounting a new tmpfs on a directory of this test's.
    unsafe {
        libc::mount(c"ferrolet-test".as_ptr(), target.as_ptr(), c"tmpfs".as_ptr(), 0, c"size=4m".as_ptr().cast()) == 0
    }
}

fn unmount(at: &Path) {
    let target = CString::new(at.as_os_str().as_bytes()).unwrap();
    // SAFETY: unmounting the tmpfs this test mounted.
    unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
}

#[test]
fn a_memory_volume_is_not_disk_and_a_mount_inside_a_tree_is_not_its() {
    let dir = disk_tempdir();
    let memory = dir.path().join("memory");
    let disk = dir.path().join("disk");
    let inner = disk.join("mnt");
    std::fs::create_dir_all(&memory).unwrap();
    std::fs::create_dir_all(&inner).unwrap();
    if !mount_tmpfs(&memory) {
        eprintln!("skipping: cannot mount a tmpfs here (needs root)");
        return;
    }
    let mounted_inner = mount_tmpfs(&inner);
    std::fs::write(memory.join("f"), vec![1u8; 1 << 20]).unwrap();
    std::fs::write(inner.join("f"), vec![1u8; 1 << 20]).unwrap();
    let on_memory = du(&memory, MAX_ENTRIES);
    let on_disk = du(&disk, MAX_ENTRIES);
    unmount(&memory);
    unmount(&inner);
    assert!(on_memory.unwrap().bytes >= 1 << 20, "a tree on a tmpfs is counted (nodefs may be one)");
    assert!(mounted_inner);
    let u = on_disk.unwrap();
    assert_eq!(u.inodes, 1, "the tree's root only: the mount point belongs to the tmpfs");
    assert!(u.bytes < 1 << 20);
}
