use super::*;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};

const NEW: &str = "..2024_05_01_10_00_00.new";
const OLD: &str = "..2024_05_01_09_00_00.old";

/// A checked payload of `(path, content, mode)`.
fn payload(files: &[(&str, &str, u32)]) -> Payload {
    Payload::new(
        files
            .iter()
            .map(|(p, d, m)| (p.to_string(), FileProjection { data: d.as_bytes().to_vec(), mode: *m }))
            .collect(),
    )
    .unwrap()
}

/// What a directory holding `p` as written into `OLD` (group `gid`) reads as.
fn written(p: &Payload, gid: Option<u32>) -> Current {
    let files = p
        .files()
        .iter()
        .map(|(path, f)| {
            (path.clone(), CurrentFile { data: f.data.clone(), mode: file_mode(f.mode, gid), gid: gid.unwrap_or(0) })
        })
        .collect();
    Current {
        data_dir: Some(OLD.into()),
        files: Some(files),
        visible: p.visible_names().into_iter().map(|n| (n.to_string(), Some(visible_target(n)))).collect(),
        data_dirs: [OLD.to_string()].into(),
        data_tmp: false,
    }
}

fn link(name: &str) -> Step<'static> {
    Step::LinkVisible { name: name.into() }
}

fn make_dir(path: &str) -> Step<'static> {
    Step::MakeDir { path: path.into(), mode: 0o755, gid: None }
}

// Payload checks.

#[test]
fn payload_paths_are_checked_and_each_refusal_names_the_path() {
    let long_name = "n".repeat(256);
    let long_path = ["d"; 2049].join("/");
    let cases = [
        ("", "payload path \"\" is empty"),
        ("/etc/passwd", "payload path \"/etc/passwd\" is absolute; it must be relative to the volume"),
        ("a/../../x", "payload path \"a/../../x\" has a '..' element"),
        ("a//b", "payload path \"a//b\" has an empty element (a doubled or trailing '/')"),
        ("a/", "payload path \"a/\" has an empty element (a doubled or trailing '/')"),
        ("..data", "payload path \"..data\" starts with '..', which is kept for the writer's own names"),
        ("..x/y", "payload path \"..x/y\" starts with '..', which is kept for the writer's own names"),
        ("./..x", "payload path \"./..x\" starts with '..', which is kept for the writer's own names"),
        (".", "payload path \".\" names no file"),
        ("a\0b", "payload path \"a\\0b\" contains a NUL byte"),
    ];
    for (path, said) in cases {
        let e = Payload::new([(path.to_string(), FileProjection { data: vec![], mode: 0o644 })].into()).unwrap_err();
        assert_eq!(e.to_string(), said);
    }
    let e = Payload::new([(long_name.clone(), FileProjection { data: vec![], mode: 0o644 })].into()).unwrap_err();
    assert!(e.to_string().ends_with("has an element of 256 bytes; at most 255 are allowed"), "{e}");
    let e = Payload::new([(long_path, FileProjection { data: vec![], mode: 0o644 })].into()).unwrap_err();
    assert!(e.to_string().ends_with("is 4097 bytes long; at most 4096 are allowed"), "{e}");
    let e = Payload::new([("a".to_string(), FileProjection { data: vec![], mode: 0o4755 })].into()).unwrap_err();
    assert_eq!(e.to_string(), "payload path \"a\" has mode 4755: only the permission bits 0777 are allowed");
}

#[test]
fn payload_paths_are_cleaned_and_may_not_collide() {
    let p = payload(&[("./a/./b", "x", 0o644), (".hidden", "y", 0o644)]);
    assert_eq!(p.files().keys().collect::<Vec<_>>(), [".hidden", "a/b"]);
    let twice =
        [("a/b", "x"), ("a/./b", "y")].map(|(p, d)| (p.to_string(), FileProjection { data: d.into(), mode: 0o644 }));
    let e = Payload::new(twice.into()).unwrap_err();
    assert_eq!(e.to_string(), "payload path \"a/b\" is the same file as \"a/./b\"");
    let nested =
        [("a", "x"), ("a/b", "y")].map(|(p, d)| (p.to_string(), FileProjection { data: d.into(), mode: 0o644 }));
    let e = Payload::new(nested.into()).unwrap_err();
    assert_eq!(e.to_string(), "payload path \"a\" is a file, and also the directory of \"a/b\"");
}

// Decisions, against fake directories.

#[test]
fn a_first_write_makes_the_directory_its_files_and_links_then_swaps() {
    let p = payload(&[("a", "1", 0o644), ("sub/deep/c", "2", 0o600), ("sub/d", "3", 0o400)]);
    let steps = plan(&Current::default(), &p, None, NEW).unwrap();
    let file = |path: &str, data: &'static str, mode| Step::WriteFile {
        path: format!("{NEW}/{path}"),
        data: data.as_bytes(),
        mode,
        gid: None,
    };
    assert_eq!(
        steps,
        [
            make_dir(NEW),
            file("a", "1", 0o644),
            make_dir(&format!("{NEW}/sub")),
            file("sub/d", "3", 0o400),
            make_dir(&format!("{NEW}/sub/deep")),
            file("sub/deep/c", "2", 0o600),
            link("a"),
            link("sub"),
            Step::LinkDataTmp { dir: NEW.into() },
            Step::SwapData,
        ]
    );
}

#[test]
fn an_unchanged_payload_plans_nothing() {
    let p = payload(&[("a", "1", 0o644), ("sub/c", "2", 0o600)]);
    assert_eq!(plan(&written(&p, None), &p, None, NEW).unwrap(), []);
    assert_eq!(plan(&written(&p, Some(2000)), &p, Some(2000), NEW).unwrap(), []);
}

#[test]
fn an_unchanged_payload_only_mends_links_and_removes_what_a_crash_left() {
    let p = payload(&[("a", "1", 0o644), ("b", "2", 0o644)]);
    let mut current = written(&p, None);
    current.visible.remove("b");
    current.visible.insert("gone".into(), Some(visible_target("gone")));
    current.data_tmp = true;
    current.data_dirs.insert("..2024_05_01_09_30_00.cut".into());
    assert_eq!(
        plan(&current, &p, None, NEW).unwrap(),
        [
            Step::RemoveDataTmp,
            link("b"),
            Step::RemoveVisible { name: "gone".into() },
            Step::RemoveDataDir { name: "..2024_05_01_09_30_00.cut".into() },
        ],
        "the live directory {OLD} is kept"
    );
}

#[test]
fn a_changed_byte_mode_group_or_file_set_writes_a_new_version() {
    let p = payload(&[("a", "1", 0o644), ("b", "2", 0o644)]);
    type Change = fn(&mut BTreeMap<String, CurrentFile>);
    let changes: [(&str, Change); 4] = [
        ("a byte", |f| f.get_mut("a").unwrap().data = b"9".to_vec()),
        ("a mode", |f| f.get_mut("a").unwrap().mode = 0o600),
        ("a file more", |f| {
            let a = f["a"].clone();
            f.insert("x".into(), a);
        }),
        ("a file less", |f| drop(f.remove("b"))),
    ];
    for (what, change) in changes {
        let mut current = written(&p, None);
        change(current.files.as_mut().unwrap());
        let steps = plan(&current, &p, None, NEW).unwrap();
        assert_eq!(steps[0], make_dir(NEW), "{what}");
        assert_eq!(steps.last(), Some(&Step::RemoveDataDir { name: OLD.into() }), "{what}");
    }
    let mut current = written(&p, None);
    current.files = None;
    assert!(plan(&current, &p, None, NEW).unwrap().contains(&Step::SwapData), "files that could not be compared");
    // With fsGroup, a file of another group is written anew; its mode grants the group read.
    let steps = plan(&written(&p, Some(2000)), &p, Some(2001), NEW).unwrap();
    assert_eq!(steps[0], Step::MakeDir { path: NEW.into(), mode: 0o2755, gid: Some(2001) });
    assert_eq!(steps[1], Step::WriteFile { path: format!("{NEW}/a"), data: b"1", mode: 0o644, gid: Some(2001) });
    let private = payload(&[("a", "1", 0o600)]);
    let steps = plan(&Current::default(), &private, Some(2001), NEW).unwrap();
    assert_eq!(steps[1], Step::WriteFile { path: format!("{NEW}/a"), data: b"1", mode: 0o640, gid: Some(2001) });
}

#[test]
fn an_update_links_new_names_before_the_swap_and_unlinks_gone_ones_after() {
    let old = payload(&[("a", "1", 0o644), ("gone", "1", 0o644), ("sub/c", "1", 0o644)]);
    let new = payload(&[("a", "2", 0o644), ("new/d", "2", 0o644), ("sub/c", "1", 0o644)]);
    let steps = plan(&written(&old, None), &new, None, NEW).unwrap();
    let swap = steps.iter().position(|s| *s == Step::SwapData).unwrap();
    assert_eq!(steps[swap - 2..swap], [link("new"), Step::LinkDataTmp { dir: NEW.into() }]);
    assert_eq!(
        steps[swap + 1..],
        [Step::RemoveVisible { name: "gone".into() }, Step::RemoveDataDir { name: OLD.into() }]
    );
}

#[test]
fn a_name_taken_by_what_the_writer_did_not_make_is_refused_and_never_removed() {
    let p = payload(&[("a", "1", 0o644)]);
    for (what, taken) in [("a file", None), ("a link elsewhere", Some("/etc/passwd".to_string()))] {
        let mut current = Current::default();
        current.visible.insert("a".into(), taken);
        let e = plan(&current, &p, None, NEW).unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"a\" is in the volume's directory and is not a link to ..data/a: it is left as it is, and nothing is written",
            "{what}"
        );
    }
    // Not in the payload: left alone whatever it is.
    let mut current = written(&p, None);
    current.visible.insert("notes".into(), None);
    current.visible.insert("mine".into(), Some("..data/other".into()));
    current.visible.insert("home".into(), Some("/home".into()));
    assert_eq!(plan(&current, &p, None, NEW).unwrap(), []);
}

#[test]
fn a_data_link_that_named_no_version_is_swapped_out() {
    let p = payload(&[("a", "1", 0o644)]);
    // `..data` linked elsewhere (or missing) while timestamped directories are there.
    let mut current = written(&p, None);
    current.data_dir = None;
    current.files = None;
    let steps = plan(&current, &p, None, NEW).unwrap();
    assert!(steps.contains(&Step::SwapData));
    assert_eq!(steps.last(), Some(&Step::RemoveDataDir { name: OLD.into() }));
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn any_payload() -> impl Strategy<Value = Payload> {
        let path = prop::sample::select(vec!["a", "b", "c/x", "c/y", "d/e/f", ".h"]);
        prop::collection::btree_map(path, (0u8..3, prop::sample::select(vec![0o644u32, 0o600])), 0..5).prop_map(
            |files| {
                // `c` never both a file and a directory: the strategy has no file `c`.
                payload(&files.iter().map(|(p, (d, m))| (*p, ["0", "1", "2"][*d as usize], *m)).collect::<Vec<_>>())
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Before the swap nothing a reader can reach changes; after it only what the new
        /// version no longer reaches goes, and never the live directory.
        #[test]
        fn steps_add_before_the_swap_and_remove_only_after(
            old in any_payload(), new in any_payload(), tmp in any::<bool>(), stray in any::<bool>(),
        ) {
            let mut current = written(&old, None);
            current.data_tmp = tmp;
            if stray {
                current.data_dirs.insert("..2024_05_01_09_30_00.cut".into());
            }
            let steps = plan(&current, &new, None, NEW).unwrap();
            let swap = steps.iter().position(|s| *s == Step::SwapData);
            prop_assert_eq!(swap.is_none(), old == new);
            let live = if swap.is_some() { NEW } else { OLD };
            for (i, step) in steps.iter().enumerate() {
                // Without a swap, the steps only mend: both hold.
                let (before, after) = (swap.map_or(true, |s| i < s), swap.map_or(true, |s| i > s));
                match step {
                    Step::RemoveDataTmp => prop_assert_eq!(i, 0),
                    Step::MakeDir { path, .. } | Step::WriteFile { path, .. } => prop_assert!(
                        swap.is_some() && before && (path == NEW || path.starts_with(&format!("{NEW}/"))),
                        "{}",
                        step
                    ),
                    Step::LinkVisible { name } => {
                        prop_assert!(before && !current.visible.contains_key(name), "{}", step)
                    }
                    Step::LinkDataTmp { dir } => prop_assert!(swap == Some(i + 1) && dir == NEW),
                    Step::SwapData => {}
                    Step::RemoveVisible { name } => {
                        prop_assert!(after && !new.visible_names().contains(name.as_str()), "{}", step)
                    }
                    Step::RemoveDataDir { name } => prop_assert!(after && name != live, "{}", step),
                }
            }
        }
    }
}

// The executor, on real directories.

/// A fresh volume directory.
fn volume() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// What each of `paths` reads as through the visible names, as a container reads them.
fn view(dir: &Path, paths: &BTreeSet<String>) -> BTreeMap<String, Option<Vec<u8>>> {
    paths.iter().map(|p| (p.clone(), fs::read(dir.join(p)).ok())).collect()
}

/// What `view` shows of `p` (nothing, before the first write).
fn expected(p: Option<&Payload>, paths: &BTreeSet<String>) -> BTreeMap<String, Option<Vec<u8>>> {
    paths.iter().map(|path| (path.clone(), p.and_then(|p| p.files().get(path)).map(|f| f.data.clone()))).collect()
}

/// The names in `dir`, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    names
}

/// The names a directory holding only `p` has: its links, `..data` and one timestamped
/// directory.
fn assert_only(dir: &Path, p: &Payload) {
    let data_dir = current_data_dir(dir).unwrap().unwrap();
    let mut want: Vec<String> = p.visible_names().into_iter().map(String::from).collect();
    want.push(DATA_LINK.into());
    want.push(data_dir.file_name().unwrap().to_str().unwrap().into());
    want.sort();
    assert_eq!(entries(dir), want);
    assert_eq!(plan(&read_current(dir).unwrap(), p, None, NEW).unwrap(), [], "nothing is left to do");
}

#[test]
fn every_cut_short_write_reads_as_the_old_version_or_the_new_and_the_next_write_finishes_it() {
    let v1 = payload(&[("a", "a1", 0o644), ("b", "b1", 0o644), ("sub/c", "c1", 0o644), ("gone", "g1", 0o600)]);
    let v2 = payload(&[("a", "a2", 0o600), ("b", "b1", 0o644), ("sub/c", "c2", 0o644), ("new/deep/d", "d2", 0o644)]);
    let empty = payload(&[]);
    for (old, new) in [(None, &v1), (Some(&v1), &v2), (Some(&v2), &v1), (Some(&v1), &empty)] {
        let paths: BTreeSet<String> = old.into_iter().chain([new]).flat_map(|p| p.files().keys().cloned()).collect();
        let (want_old, want_new) = (expected(old, &paths), expected(Some(new), &paths));
        for cut in 0.. {
            let dir = volume();
            let dir = dir.path();
            if let Some(old) = old {
                write(dir, old, WriteOptions::default()).unwrap();
            }
            let current = read_current(dir).unwrap();
            let steps = plan(&current, new, None, NEW).unwrap();
            let swap = steps.iter().position(|s| *s == Step::SwapData).unwrap();
            apply(dir, &steps[..cut], false).unwrap();
            let seen = view(dir, &paths);
            if cut <= swap {
                assert_eq!(seen, want_old, "cut after {cut} steps, before the swap: the old version");
            } else {
                assert_eq!(seen, want_new, "cut after {cut} steps, after the swap: the new version");
            }
            let outcome = write(dir, new, WriteOptions::default()).unwrap();
            assert_eq!(outcome == Written::Unchanged, cut > swap, "cut after {cut}: {outcome:?}");
            assert_eq!(view(dir, &paths), want_new);
            assert_only(dir, new);
            if cut == steps.len() {
                break;
            }
        }
    }
}

#[test]
fn a_reader_of_two_files_never_sees_them_from_two_versions() {
    const SIZE: usize = 16 << 10;
    let version = |i: u32| {
        let data = format!("{i:08}").repeat(SIZE / 8);
        payload(&[("a", &data, 0o644), ("b", &data, 0o644)])
    };
    let dir = volume();
    let dir = dir.path();
    write(dir, &version(0), WriteOptions::default()).unwrap();
    let stop = AtomicBool::new(false);
    let (consistent, straddled, versions_seen) = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let (mut consistent, mut straddled, mut seen) = (0u32, 0u32, BTreeSet::new());
            while !stop.load(Ordering::Relaxed) {
                let before = fs::read_link(dir.join(DATA_LINK)).unwrap();
                let (a, b) = (fs::read(dir.join("a")), fs::read(dir.join("b")));
                let after = fs::read_link(dir.join(DATA_LINK)).unwrap();
                for read in [&a, &b].into_iter().flatten() {
                    assert!(read.len() == SIZE && *read == read[..8].repeat(SIZE / 8), "a torn file");
                }
                if before != after {
                    // An update came between the two opens: each path is resolved anew.
                    straddled += 1;
                    continue;
                }
                let (a, b) = (a.unwrap(), b.unwrap());
                assert!(a == b, "a from version {:?}, b from {:?}", &a[..8], &b[..8]);
                seen.insert(a[..8].to_vec());
                consistent += 1;
            }
            (consistent, straddled, seen.len())
        });
        for i in 1..=300 {
            let written = write(dir, &version(i), WriteOptions::default()).unwrap();
            assert!(matches!(written, Written::Updated { .. }));
        }
        stop.store(true, Ordering::Relaxed);
        reader.join().unwrap()
    });
    eprintln!("{consistent} consistent reads of {versions_seen} versions, {straddled} across an update");
    assert!(consistent >= 100 && versions_seen >= 10, "the reader ran while the writer wrote");
    assert_only(dir, &version(300));
}

#[test]
fn names_removed_from_the_payload_disappear_and_what_the_writer_did_not_make_stays() {
    let dir = volume();
    let dir = dir.path();
    fs::write(dir.join("notes"), "a user's").unwrap();
    fs::write(dir.join("..mine"), "a user's").unwrap();
    std::os::unix::fs::symlink("/etc", dir.join("elsewhere")).unwrap();
    write(dir, &payload(&[("a", "1", 0o644), ("gone", "1", 0o644), ("dir/x", "1", 0o644)]), WriteOptions::default())
        .unwrap();
    write(dir, &payload(&[("a", "2", 0o644)]), WriteOptions::default()).unwrap();
    let data_dir = current_data_dir(dir).unwrap().unwrap();
    let data_name = data_dir.file_name().unwrap().to_str().unwrap().to_string();
    let mut want = vec!["..data", "..mine", "a", "elsewhere", "notes", data_name.as_str()];
    want.sort();
    assert_eq!(entries(dir), want);
    assert_eq!(fs::read_to_string(dir.join("notes")).unwrap(), "a user's");
    assert_eq!(fs::read_to_string(dir.join("a")).unwrap(), "2");
    // A file where a payload name goes stops the write before anything is made.
    let before = entries(dir);
    let e = write(dir, &payload(&[("notes", "3", 0o644)]), WriteOptions::default()).unwrap_err();
    assert!(matches!(e, AtomicWriteError::NameTaken { .. }), "{e}");
    assert_eq!(entries(dir), before);
}

#[test]
fn files_get_the_modes_asked_and_with_fs_group_its_group_and_read_access() {
    let p = payload(&[("open", "x", 0o777), ("private", "x", 0o600), ("ro", "x", 0o400), ("d/nested", "x", 0o640)]);
    let mode = |path: &Path| fs::metadata(path).unwrap().mode() & 0o7777;
    let dir = volume();
    let dir = dir.path();
    write(dir, &p, WriteOptions { gid: None, sync: true }).unwrap();
    let data = current_data_dir(dir).unwrap().unwrap();
    let modes = ["open", "private", "ro", "d/nested", "d"].map(|f| mode(&dir.join(f)));
    assert_eq!(modes, [0o777, 0o600, 0o400, 0o640, 0o755], "the umask takes nothing");
    assert_eq!(mode(&data), 0o755);
    assert!(fs::symlink_metadata(dir.join("open")).unwrap().file_type().is_symlink());

    // SAFETY: geteuid and getegid have no preconditions.
    let gid = if unsafe { libc::geteuid() } == 0 { 65534 } else { unsafe { libc::getegid() } };
    let dir = volume();
    let dir = dir.path();
    write(dir, &p, WriteOptions { gid: Some(gid), sync: false }).unwrap();
    let data = current_data_dir(dir).unwrap().unwrap();
    let modes = ["open", "private", "ro", "d/nested", "d"].map(|f| mode(&dir.join(f)));
    assert_eq!(modes, [0o777, 0o640, 0o440, 0o640, 0o2755]);
    assert_eq!(mode(&data), 0o2755);
    for f in ["open", "private", "ro", "d/nested", "d"] {
        assert_eq!(fs::metadata(dir.join(f)).unwrap().gid(), gid, "{f}");
    }
    assert_eq!(write(dir, &p, WriteOptions { gid: Some(gid), sync: false }).unwrap(), Written::Unchanged);
}

#[test]
fn an_unchanged_payload_writes_nothing() {
    let p = payload(&[("a", "1", 0o644), ("sub/b", "2", 0o644)]);
    let dir = volume();
    let dir = dir.path();
    let Written::Updated { data_dir } = write(dir, &p, WriteOptions::default()).unwrap() else { panic!("written") };
    let inode = |path: &Path| fs::metadata(path).unwrap().ino();
    let (dir_inode, file_inode) = (inode(&dir.join(&data_dir)), inode(&dir.join("sub/b")));
    assert_eq!(write(dir, &p, WriteOptions::default()).unwrap(), Written::Unchanged);
    assert_eq!(current_data_dir(dir).unwrap(), Some(dir.join(&data_dir)));
    assert_eq!((inode(&dir.join(&data_dir)), inode(&dir.join("sub/b"))), (dir_inode, file_inode));
    // Only the mode changed: a new version.
    let p = payload(&[("a", "1", 0o600), ("sub/b", "2", 0o644)]);
    assert!(matches!(write(dir, &p, WriteOptions::default()).unwrap(), Written::Updated { .. }));
    assert!(!dir.join(&data_dir).exists());
}

#[test]
fn a_sub_path_opens_the_file_in_the_timestamped_directory_and_keeps_it_after_an_update() {
    let dir = volume();
    let dir = dir.path();
    assert_eq!(current_data_dir(dir).unwrap(), None, "no version yet");
    write(dir, &payload(&[("app.conf", "v1", 0o644)]), WriteOptions::default()).unwrap();
    let data = current_data_dir(dir).unwrap().unwrap();
    assert_eq!(data.parent(), Some(dir));
    assert!(is_timestamp_name(data.file_name().unwrap().to_str().unwrap()));
    // The visible name is a link, which the subPath walk refuses; inside `..data` it opens.
    let e = crate::pods::dir::open_sub_path(dir, "app.conf", None).unwrap_err();
    assert!(e.ends_with("is a symbolic link, which is not followed"), "{e}");
    let fd = crate::pods::dir::open_sub_path(&data, "app.conf", None).unwrap();
    let through_fd = || fs::read_to_string(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
    assert_eq!(through_fd(), "v1");
    write(dir, &payload(&[("app.conf", "v2", 0o644)]), WriteOptions::default()).unwrap();
    assert_eq!(fs::read_to_string(dir.join("app.conf")).unwrap(), "v2");
    assert_eq!(through_fd(), "v1", "a subPath mount does not follow updates, as in kubelet");
}

#[test]
fn current_data_dir_refuses_a_data_link_that_leads_anywhere_but_beside_it() {
    for target in ["/etc", "..", "../x", "..data", "..data_tmp", "..a/b", "x"] {
        let dir = volume();
        std::os::unix::fs::symlink(target, dir.path().join(DATA_LINK)).unwrap();
        let e = current_data_dir(dir.path()).unwrap_err().to_string();
        assert!(
            e.ends_with(&format!("..data links to {target}, not to a directory beside it whose name starts with '..'")),
            "{e}"
        );
    }
    let dir = volume();
    std::os::unix::fs::symlink("/etc", dir.path().join("..link")).unwrap();
    std::os::unix::fs::symlink("..link", dir.path().join(DATA_LINK)).unwrap();
    let e = current_data_dir(dir.path()).unwrap_err().to_string();
    assert!(e.ends_with("..link, which is not a directory"), "{e}");
    fs::remove_file(dir.path().join(DATA_LINK)).unwrap();
    std::os::unix::fs::symlink("..gone", dir.path().join(DATA_LINK)).unwrap();
    let e = current_data_dir(dir.path()).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    let dir = volume();
    fs::create_dir(dir.path().join(DATA_LINK)).unwrap();
    let e = current_data_dir(dir.path()).unwrap_err().to_string();
    assert!(e.ends_with("..data is not a link"), "{e}");
    let e = write(dir.path(), &payload(&[("a", "1", 0o644)]), WriteOptions::default()).unwrap_err();
    assert!(e.to_string().starts_with("cannot read"), "{e}");
}

#[test]
fn a_data_link_leading_elsewhere_is_swapped_out_and_its_target_left() {
    let dir = volume();
    let outside = volume();
    fs::write(outside.path().join("a"), "outside").unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join(DATA_LINK)).unwrap();
    write(dir.path(), &payload(&[("a", "1", 0o644)]), WriteOptions::default()).unwrap();
    assert_eq!(fs::read_to_string(dir.path().join("a")).unwrap(), "1");
    assert_eq!(fs::read_to_string(outside.path().join("a")).unwrap(), "outside");
}

#[test]
fn timestamped_names_are_kubelets_shape() {
    let name =
        new_data_dir_name(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_714_557_600), &BTreeSet::new());
    assert!(name.starts_with("..2024_05_01_10_00_00."), "{name}");
    assert!(is_timestamp_name(&name) && is_timestamp_name(NEW) && is_timestamp_name("..2006_01_02_15_04_05.123"));
    for not in ["..data", "..data_tmp", "..mine", "..2006_01_02_15_04_05.", "..2006_01_02_15_04_05.a/b", ".2006_01_02"]
    {
        assert!(!is_timestamp_name(not), "{not}");
    }
}
