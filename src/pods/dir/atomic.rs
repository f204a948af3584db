//! kubelet's atomic writer (`pkg/volume/util/atomic_writer.go`): the files of a ConfigMap,
//! Secret or projected volume change all at once, so a container never reads half of an
//! update.
//!
//! In the volume's directory the files live in a timestamped directory
//! (`..2006_01_02_15_04_05.<random>`); `..data` is a relative link to that directory's name;
//! each top-level name of the payload is a link `name -> ..data/name`. An update writes a
//! new timestamped directory, points `..data_tmp` at it and renames `..data_tmp` over
//! `..data`: that one rename is the moment every visible name moves to the new version.
//!
//! `plan` decides the steps from what `read_current` found; `apply` only makes the calls.
//! Every prefix of a plan leaves a directory whose visible names read entirely as the old
//! version or entirely as the new one, and the next `write` finishes what a crash cut short
//! and removes what it left. One writer per directory at a time (the pod manager's thread).

use crate::api::volumes::fs_group_mode;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The link to the timestamped directory of the current version.
pub const DATA_LINK: &str = "..data";

/// The link made to the new version's directory, then renamed over `..data`.
pub const DATA_LINK_TMP: &str = "..data_tmp";

/// Longest payload path, in bytes (kubelet's `maxPathLength`).
const MAX_PATH_LEN: usize = 4096;

/// Longest element of a payload path, in bytes (kubelet's `maxFileNameLength`).
const MAX_NAME_LEN: usize = 255;

/// At most this many entries are read from a volume's directory or its data directory.
const MAX_ENTRIES: usize = 65_536;

/// At most this many bytes of the current files are read to compare them with a payload;
/// beyond it the payload is written anew. A ConfigMap or Secret holds at most 1 MiB.
const MAX_COMPARED: u64 = 64 << 20;

/// Mode of the timestamped directory and of the directories in it.
const DIR_MODE: u32 = 0o755;

/// What went wrong while checking a payload, reading the volume's directory or writing it.
#[derive(Debug, thiserror::Error)]
pub enum AtomicWriteError {
    /// A payload path that cannot be written: what is wrong with it.
    #[error("payload path {path:?} {reason}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// What is wrong with it, and what is allowed.
        reason: String,
    },
    /// A payload name is taken in the volume's directory by something that is not the
    /// writer's link (a file, a directory, or a link elsewhere), which is never replaced.
    #[error("{name:?} is in the volume's directory and is not a link to {DATA_LINK}/{name}: it is left as it is, and nothing is written")]
    NameTaken {
        /// The payload's top-level name.
        name: String,
    },
    /// The volume's directory could not be read, or holds what the writer never makes.
    #[error("cannot read {}", path.display())]
    ReadCurrent {
        /// What was being read.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A step of the plan failed; the steps before it were made.
    #[error("cannot {step} in {}", dir.display())]
    Apply {
        /// The volume's directory.
        dir: PathBuf,
        /// The step, in words.
        step: String,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// One file of a payload (kubelet's `FileProjection`): its content and its mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileProjection {
    /// The file's content.
    pub data: Vec<u8>,
    /// The file's permission bits (at most `0777`).
    pub mode: u32,
}

/// The files of a volume by relative path, checked: every path is relative, of normal
/// elements (`.` elements dropped), within kubelet's length limits, does not start with
/// `..`, and no file is also another one's directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Payload(BTreeMap<String, FileProjection>);

impl Payload {
    /// Checks `files` (kubelet's `validatePayload`), naming the first bad path.
    pub fn new(files: BTreeMap<String, FileProjection>) -> Result<Payload, AtomicWriteError> {
        let mut clean = BTreeMap::new();
        let mut given: BTreeMap<String, String> = BTreeMap::new();
        for (path, file) in files {
            let invalid = |reason: String| AtomicWriteError::InvalidPath { path: path.clone(), reason };
            let cleaned = clean_path(&path).map_err(invalid)?;
            if file.mode & !0o777 != 0 {
                return Err(invalid(format!("has mode {:04o}: only the permission bits 0777 are allowed", file.mode)));
            }
            if let Some(first) = given.get(&cleaned) {
                return Err(invalid(format!("is the same file as {first:?}")));
            }
            given.insert(cleaned.clone(), path.clone());
            clean.insert(cleaned, file);
        }
        for path in clean.keys() {
            for (i, _) in path.match_indices('/') {
                if let Some(file) = given.get(&path[..i]) {
                    return Err(AtomicWriteError::InvalidPath {
                        path: file.clone(),
                        reason: format!("is a file, and also the directory of {:?}", given[path]),
                    });
                }
            }
        }
        Ok(Payload(clean))
    }

    /// The files by their cleaned paths.
    pub fn files(&self) -> &BTreeMap<String, FileProjection> {
        &self.0
    }

    /// The top-level names, each a visible link in the volume's directory.
    fn visible_names(&self) -> BTreeSet<&str> {
        self.0.keys().map(|p| p.split('/').next().unwrap_or(p)).collect()
    }
}

/// `path` without `.` elements, or what is wrong with it (kubelet's `validatePath`, and no
/// empty element).
fn clean_path(path: &str) -> Result<String, String> {
    if path.is_empty() {
        return Err("is empty".into());
    }
    if path.starts_with('/') {
        return Err("is absolute; it must be relative to the volume".into());
    }
    if path.len() > MAX_PATH_LEN {
        return Err(format!("is {} bytes long; at most {MAX_PATH_LEN} are allowed", path.len()));
    }
    if path.contains('\0') {
        return Err("contains a NUL byte".into());
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" => return Err("has an empty element (a doubled or trailing '/')".into()),
            ".." => return Err("has a '..' element".into()),
            "." => {}
            p if p.len() > MAX_NAME_LEN => {
                return Err(format!("has an element of {} bytes; at most {MAX_NAME_LEN} are allowed", p.len()))
            }
            p => parts.push(p),
        }
    }
    match parts.first() {
        None => Err("names no file".into()),
        Some(first) if first.starts_with("..") => {
            Err("starts with '..', which is kept for the writer's own names".into())
        }
        Some(_) => Ok(parts.join("/")),
    }
}

/// What is in a volume's directory now, as `plan` needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Current {
    /// The directory `..data` names, when it names one beside it.
    pub data_dir: Option<String>,
    /// The files under `data_dir` by relative path; `None` when they are not all regular
    /// files that could be compared (then the payload is written anew).
    pub files: Option<BTreeMap<String, CurrentFile>>,
    /// Every entry whose name does not start with `..`: a link's target, `None` for
    /// anything that is not a link.
    pub visible: BTreeMap<String, Option<String>>,
    /// The timestamped directories there (the one `data_dir` names among them).
    pub data_dirs: BTreeSet<String>,
    /// Whether a `..data_tmp` link is there (a write was cut short).
    pub data_tmp: bool,
}

/// A file of the current version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CurrentFile {
    /// Its content.
    pub data: Vec<u8>,
    /// Its permission bits.
    pub mode: u32,
    /// Its group.
    pub gid: u32,
}

/// One action on a volume's directory; paths are relative to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step<'a> {
    /// Removes the `..data_tmp` link a cut-short write left.
    RemoveDataTmp,
    /// Makes directory `path` with `mode` (and group `gid`).
    MakeDir {
        /// The directory.
        path: String,
        /// Its mode.
        mode: u32,
        /// Its group (`fsGroup`), if any.
        gid: Option<u32>,
    },
    /// Writes the new file `path` (never through a link, never over a file).
    WriteFile {
        /// The file.
        path: String,
        /// Its content.
        data: &'a [u8],
        /// Its mode.
        mode: u32,
        /// Its group (`fsGroup`), if any.
        gid: Option<u32>,
    },
    /// Links visible name `name` to `..data/<name>`.
    LinkVisible {
        /// The payload's top-level name.
        name: String,
    },
    /// Links `..data_tmp` to timestamped directory `dir`.
    LinkDataTmp {
        /// The new version's directory.
        dir: String,
    },
    /// Renames `..data_tmp` over `..data`: the one step at which readers move to the new
    /// version.
    SwapData,
    /// Removes visible link `name` (only while it links to `..data/<name>`).
    RemoveVisible {
        /// The name no longer in the payload.
        name: String,
    },
    /// Removes timestamped directory `name` and everything in it (never the one `..data`
    /// names).
    RemoveDataDir {
        /// The directory.
        name: String,
    },
}

impl std::fmt::Display for Step<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::RemoveDataTmp => write!(f, "remove the link {DATA_LINK_TMP}"),
            Step::MakeDir { path, mode, .. } => write!(f, "make the directory {path} ({mode:04o})"),
            Step::WriteFile { path, mode, .. } => write!(f, "write {path} ({mode:04o})"),
            Step::LinkVisible { name } => write!(f, "link {name} to {DATA_LINK}/{name}"),
            Step::LinkDataTmp { dir } => write!(f, "link {DATA_LINK_TMP} to {dir}"),
            Step::SwapData => write!(f, "rename {DATA_LINK_TMP} to {DATA_LINK}"),
            Step::RemoveVisible { name } => write!(f, "remove the link {name}"),
            Step::RemoveDataDir { name } => write!(f, "remove the directory {name}"),
        }
    }
}

/// The target of visible link `name`.
fn visible_target(name: &str) -> String {
    format!("{DATA_LINK}/{name}")
}

/// The mode a payload file with `mode` gets: with `fsGroup`, its group may read it too, as
/// kubelet's `SetVolumeOwnership` sets on a read-only volume.
fn file_mode(mode: u32, gid: Option<u32>) -> u32 {
    if gid.is_some() {
        fs_group_mode(mode, false, true)
    } else {
        mode
    }
}

/// The mode of the directories the writer makes (with `fsGroup`: set-group-ID, group access).
fn dir_mode(gid: Option<u32>) -> u32 {
    if gid.is_some() {
        fs_group_mode(DIR_MODE, true, true)
    } else {
        DIR_MODE
    }
}

/// Whether `files` are exactly `payload` as it would be written with `gid`: the same paths,
/// bytes and modes (and group, when one is set). kubelet's `shouldWritePayload`, negated.
fn same_files(files: &BTreeMap<String, CurrentFile>, payload: &Payload, gid: Option<u32>) -> bool {
    files.len() == payload.0.len()
        && payload.0.iter().all(|(path, want)| {
            files.get(path).is_some_and(|got| {
                got.data == want.data && got.mode == file_mode(want.mode, gid) && gid.map_or(true, |g| got.gid == g)
            })
        })
}

/// The steps that make `current` hold `payload` (files of group `gid`, when set), a new
/// version going into timestamped directory `new_dir`, which must not be there yet.
///
/// Before the swap, steps only add: the new directory and its files, links for names that
/// are new (they point at nothing until the swap, so they read as missing, as in the old
/// version), and `..data_tmp`. After it, they only remove what the new version no longer
/// has. An unchanged payload writes nothing; it only mends links and removes what a
/// cut-short write left.
pub fn plan<'a>(
    current: &Current,
    payload: &'a Payload,
    gid: Option<u32>,
    new_dir: &str,
) -> Result<Vec<Step<'a>>, AtomicWriteError> {
    let names = payload.visible_names();
    for name in &names {
        match current.visible.get(*name) {
            None => {}
            Some(Some(target)) if *target == visible_target(name) => {}
            Some(_) => return Err(AtomicWriteError::NameTaken { name: name.to_string() }),
        }
    }
    let unchanged = match (&current.data_dir, &current.files) {
        (Some(_), Some(files)) => same_files(files, payload, gid),
        _ => false,
    };
    let mut steps = Vec::new();
    if current.data_tmp {
        steps.push(Step::RemoveDataTmp);
    }
    if !unchanged {
        steps.push(Step::MakeDir { path: new_dir.to_string(), mode: dir_mode(gid), gid });
        let mut made = BTreeSet::new();
        for (path, file) in &payload.0 {
            for (i, _) in path.match_indices('/') {
                if made.insert(&path[..i]) {
                    steps.push(Step::MakeDir { path: format!("{new_dir}/{}", &path[..i]), mode: dir_mode(gid), gid });
                }
            }
            steps.push(Step::WriteFile {
                path: format!("{new_dir}/{path}"),
                data: &file.data,
                mode: file_mode(file.mode, gid),
                gid,
            });
        }
    }
    for name in names.iter().filter(|n| !current.visible.contains_key(**n)) {
        steps.push(Step::LinkVisible { name: name.to_string() });
    }
    let live = match (&current.data_dir, unchanged) {
        (Some(dir), true) => dir.as_str(),
        _ => {
            steps.push(Step::LinkDataTmp { dir: new_dir.to_string() });
            steps.push(Step::SwapData);
            new_dir
        }
    };
    for (name, target) in &current.visible {
        if !names.contains(name.as_str()) && target.as_deref() == Some(visible_target(name).as_str()) {
            steps.push(Step::RemoveVisible { name: name.clone() });
        }
    }
    for dir in current.data_dirs.iter().filter(|d| *d != live) {
        steps.push(Step::RemoveDataDir { name: dir.clone() });
    }
    Ok(steps)
}

/// Makes `steps` in the volume's directory `dir`, one by one, stopping at the first that
/// fails. With `sync`, each step syncs what it wrote and the directory it wrote it in, so the
/// new version is on disk before the swap.
pub fn apply(dir: &Path, steps: &[Step<'_>], sync: bool) -> Result<(), AtomicWriteError> {
    for step in steps {
        apply_step(dir, step, sync).map_err(|source| AtomicWriteError::Apply {
            dir: dir.to_path_buf(),
            step: step.to_string(),
            source,
        })?;
    }
    Ok(())
}

fn apply_step(dir: &Path, step: &Step<'_>, sync: bool) -> io::Result<()> {
    let synced = |path: &Path| if sync { fs::File::open(path)?.sync_all() } else { Ok(()) };
    match step {
        Step::RemoveDataTmp => remove_link(&dir.join(DATA_LINK_TMP), None)?,
        Step::MakeDir { path, mode, gid } => {
            let path = dir.join(path);
            fs::DirBuilder::new().mode(*mode & 0o777).create(&path)?;
            // The group first: a change of owner may clear the set-group-ID bit.
            if let Some(gid) = gid {
                std::os::unix::fs::lchown(&path, None, Some(*gid))?;
            }
            fs::set_permissions(&path, fs::Permissions::from_mode(*mode))?;
            synced(path.parent().unwrap_or(dir))?;
        }
        Step::WriteFile { path, data, mode, gid } => {
            let path = dir.join(path);
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(*mode & 0o777)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path)?;
            if let Some(gid) = gid {
                std::os::unix::fs::fchown(&f, None, Some(*gid))?;
            }
            // The umask may have taken bits the mode asks for.
            f.set_permissions(fs::Permissions::from_mode(*mode))?;
            f.write_all(data)?;
            if sync {
                f.sync_all()?;
                synced(path.parent().unwrap_or(dir))?;
            }
        }
        Step::LinkVisible { name } => {
            std::os::unix::fs::symlink(visible_target(name), dir.join(name))?;
            synced(dir)?;
        }
        Step::LinkDataTmp { dir: target } => {
            std::os::unix::fs::symlink(target, dir.join(DATA_LINK_TMP))?;
            synced(dir)?;
        }
        Step::SwapData => {
            fs::rename(dir.join(DATA_LINK_TMP), dir.join(DATA_LINK))?;
            synced(dir)?;
        }
        Step::RemoveVisible { name } => {
            remove_link(&dir.join(name), Some(&visible_target(name)))?;
            synced(dir)?;
        }
        Step::RemoveDataDir { name } => {
            if !is_timestamp_name(name) {
                return Err(io::Error::other("not a timestamped directory's name"));
            }
            if let DataLink::Dir(live) = read_data_link(dir)? {
                if live == *name {
                    return Err(io::Error::other(format!("{DATA_LINK} names it")));
                }
            }
            let path = dir.join(name);
            match fs::symlink_metadata(&path) {
                // remove_dir_all does not follow links inside it.
                Ok(m) if m.is_dir() => fs::remove_dir_all(&path)?,
                Ok(_) => return Err(io::Error::other("not a directory")),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// Removes the link `path` when it is one (and links to `target`, when given); anything
/// else there is refused, never removed. A link already gone is fine.
fn remove_link(path: &Path, target: Option<&str>) -> io::Result<()> {
    match fs::read_link(path) {
        Ok(t) if target.map_or(true, |want| t == Path::new(want)) => match fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
        Ok(t) => Err(io::Error::other(format!("it links to {}, not to {}", t.display(), target.unwrap_or_default()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Err(io::Error::other("it is not a link")),
        Err(e) => Err(e),
    }
}

/// How a directory was written: the outcome of `write`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// The files were the payload already; nothing was written.
    Unchanged,
    /// A new version was written and swapped in, in timestamped directory `data_dir`.
    Updated {
        /// The new version's directory.
        data_dir: String,
    },
}

/// How `write` writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// The pod's `fsGroup`: the group of what is written, which may read it.
    pub gid: Option<u32>,
    /// Whether each file and directory is synced before the swap (a volume on a disk, not
    /// on a tmpfs, whose update must survive a power cut).
    pub sync: bool,
}

/// Makes the volume's directory `dir` (which must exist) hold `payload`, atomically for
/// its readers (kubelet's `AtomicWriter.Write`): `read_current`, `plan`, `apply`.
pub fn write(dir: &Path, payload: &Payload, options: WriteOptions) -> Result<Written, AtomicWriteError> {
    let current = read_current(dir)?;
    let new_dir = new_data_dir_name(SystemTime::now(), &current.data_dirs);
    let steps = plan(&current, payload, options.gid, &new_dir)?;
    apply(dir, &steps, options.sync)?;
    Ok(if steps.contains(&Step::SwapData) { Written::Updated { data_dir: new_dir } } else { Written::Unchanged })
}

/// A timestamped directory's name for a version written at `now` (kubelet's
/// `..2006_01_02_15_04_05.<random>`, UTC), not one of `taken`.
fn new_data_dir_name(now: SystemTime, taken: &BTreeSet<String>) -> String {
    let stamp = crate::base::timefmt::rfc3339(now);
    let stamp = stamp.trim_end_matches('Z').replace(['-', 'T', ':'], "_");
    loop {
        let name = format!("..{stamp}.{}", &crate::base::random::random_id()[..10]);
        if !taken.contains(&name) {
            return name;
        }
    }
}

/// Whether `name` is a timestamped directory's: `..YYYY_MM_DD_HH_MM_SS.` and a suffix of
/// 1 to 64 letters and digits.
fn is_timestamp_name(name: &str) -> bool {
    let b = name.as_bytes();
    let stamp = b"..dddd_dd_dd_dd_dd_dd.";
    b.len() > stamp.len()
        && b.len() <= stamp.len() + 64
        && stamp.iter().zip(b).all(|(want, got)| if *want == b'd' { got.is_ascii_digit() } else { want == got })
        && b[stamp.len()..].iter().all(u8::is_ascii_alphanumeric)
}

/// What `..data` is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum DataLink {
    /// Not there.
    Missing,
    /// A link to the name of a directory beside it (starting with `..`, without a `/`).
    Dir(String),
    /// A link anywhere else.
    Elsewhere(PathBuf),
}

/// Reads `dir/..data`; anything there but a link is an error.
fn read_data_link(dir: &Path) -> io::Result<DataLink> {
    let path = dir.join(DATA_LINK);
    let target = match fs::read_link(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(DataLink::Missing),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{} is not a link", path.display())))
        }
        Err(e) => return Err(e),
    };
    Ok(match target.to_str() {
        Some(t) if t.starts_with("..") && t.len() > 2 && !t.contains('/') && t != DATA_LINK && t != DATA_LINK_TMP => {
            DataLink::Dir(t.to_string())
        }
        _ => DataLink::Elsewhere(target),
    })
}

/// The timestamped directory `dir/..data` names, `None` when there is no `..data` yet; an
/// error when `..data` is not a link to a `..`-prefixed directory beside it. A `subPath` of
/// such a volume is opened inside this directory (a visible name is a link, which the
/// `subPath` walk refuses), and, as in kubelet, does not follow later updates.
pub fn current_data_dir(dir: &Path) -> io::Result<Option<PathBuf>> {
    match read_data_link(dir)? {
        DataLink::Missing => Ok(None),
        DataLink::Dir(name) => {
            let path = dir.join(name);
            if !fs::symlink_metadata(&path)?.is_dir() {
                let e = format!("{} names {}, which is not a directory", dir.join(DATA_LINK).display(), path.display());
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            Ok(Some(path))
        }
        DataLink::Elsewhere(target) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} links to {}, not to a directory beside it whose name starts with '..'",
                dir.join(DATA_LINK).display(),
                target.display()
            ),
        )),
    }
}

/// Reads what `plan` needs of the volume's directory `dir`. A `..data` that links
/// elsewhere counts as no version (a write swaps it out and leaves its target); a `..data`
/// or `..data_tmp` that is not a link is an error, as the writer never makes one.
pub fn read_current(dir: &Path) -> Result<Current, AtomicWriteError> {
    let failed = |path: &Path| {
        let path = path.to_path_buf();
        move |source| AtomicWriteError::ReadCurrent { path, source }
    };
    let mut current = Current::default();
    if let DataLink::Dir(name) = read_data_link(dir).map_err(failed(dir))? {
        current.files = read_files(&dir.join(&name)).map_err(failed(&dir.join(&name)))?;
        current.data_dir = Some(name);
    }
    for entry in fs::read_dir(dir).map_err(failed(dir))?.take(MAX_ENTRIES) {
        let entry = entry.map_err(failed(dir))?;
        // A name that is not UTF-8 is no payload name and no name of the writer's.
        let Ok(name) = entry.file_name().into_string() else { continue };
        let path = entry.path();
        let kind = entry.file_type().map_err(failed(&path))?;
        if name == DATA_LINK {
            continue;
        } else if name == DATA_LINK_TMP {
            if !kind.is_symlink() {
                let e = io::Error::new(io::ErrorKind::InvalidData, "not a link, which the writer never makes");
                return Err(failed(&path)(e));
            }
            current.data_tmp = true;
        } else if name.starts_with("..") {
            if kind.is_dir() && is_timestamp_name(&name) {
                current.data_dirs.insert(name);
            }
        } else if kind.is_symlink() {
            let target = fs::read_link(&path).map_err(failed(&path))?;
            current.visible.insert(name, Some(target.to_string_lossy().into_owned()));
        } else {
            current.visible.insert(name, None);
        }
    }
    Ok(current)
}

/// The regular files under `root` by relative path; `None` when `root` is not a directory
/// (or not there), or holds a link or a special file, or more than `MAX_ENTRIES` or
/// `MAX_COMPARED` bytes.
fn read_files(root: &Path) -> io::Result<Option<BTreeMap<String, CurrentFile>>> {
    match fs::symlink_metadata(root) {
        Ok(m) if m.is_dir() => {}
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => return Ok(None),
    }
    let mut files = BTreeMap::new();
    let mut stack = vec![String::new()];
    let (mut entries, mut bytes) = (0, 0u64);
    while let Some(rel) = stack.pop() {
        for entry in fs::read_dir(root.join(&rel))? {
            entries += 1;
            if entries > MAX_ENTRIES {
                return Ok(None);
            }
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else { return Ok(None) };
            let path = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            let kind = entry.file_type()?;
            if kind.is_dir() {
                stack.push(path);
                continue;
            }
            if !kind.is_file() {
                return Ok(None);
            }
            let f = fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(root.join(&path))?;
            let meta = f.metadata()?;
            bytes += meta.len();
            if bytes > MAX_COMPARED {
                return Ok(None);
            }
            let mut data = Vec::with_capacity(meta.len() as usize);
            f.take(meta.len() + 1).read_to_end(&mut data)?;
            files.insert(path, CurrentFile { data, mode: meta.mode() & 0o7777, gid: meta.gid() });
        }
    }
    Ok(Some(files))
}

#[cfg(test)]
mod tests;
