//! The static pod source: watches the manifest directory and sends the pod manager the
//! complete set of static pods whenever a file is added, changed or removed. A file that
//! fails to decode or validate is reported with its field path; the pods it held before
//! keep running (kubelet drops them, so one typo in an edit would stop a running pod).

use crate::api::manifest::{as_static_pod, decode_pods, ManifestError};
use crate::api::Pod;
use crate::events::{EventRecorder, Reference, WARNING};
use crate::pods::PodsCommand;
use crossbeam_channel::Sender;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Source name in pod updates and the `kubernetes.io/config.source` annotation.
pub const SOURCE: &str = "file";

/// What identifies one version of a file without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Signature {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

#[derive(Debug)]
struct FileState {
    signature: Signature,
    pods: Vec<Pod>,
}

/// Reports about manifests that were rejected (for events once they exist).
pub type Rejections = Vec<ManifestError>;

/// Polls the manifest directory (a stat per file per interval; files are read only when
/// their size, mtime or inode changed).
pub struct FileSource {
    dir: PathBuf,
    node_name: String,
    interval: Duration,
    files: BTreeMap<PathBuf, FileState>,
    out: Sender<PodsCommand>,
    recorder: EventRecorder,
    sent_once: bool,
    missing_dir_reported: bool,
}

/// Whether a directory entry is a manifest: not hidden, ending in .yaml, .yml or .json.
fn is_manifest(path: &Path) -> bool {
    let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    !name.starts_with('.') && [".yaml", ".yml", ".json"].iter().any(|ext| name.ends_with(ext))
}

/// Reads one manifest file into static pods, or the reasons it was rejected.
pub fn read_manifest(path: &Path, node_name: &str) -> Result<Vec<Pod>, Rejections> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| vec![ManifestError { file: file.clone(), doc: None, problem: format!("cannot read: {e}") }])?;
    let mut pods = Vec::new();
    let mut errors = Vec::new();
    for r in decode_pods(&file, &text) {
        match r {
            Ok(p) => pods.push(as_static_pod(p, node_name, path)),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(pods)
    } else {
        Err(errors)
    }
}

impl FileSource {
    /// A source for `dir` sending updates to the pod manager.
    pub fn new(
        dir: &Path,
        node_name: &str,
        interval: Duration,
        out: Sender<PodsCommand>,
        recorder: EventRecorder,
    ) -> Self {
        FileSource {
            dir: dir.into(),
            node_name: node_name.into(),
            interval,
            files: BTreeMap::new(),
            out,
            recorder,
            sent_once: false,
            missing_dir_reported: false,
        }
    }

    /// Looks for changes; sends an update when anything changed (and once at start).
    pub fn poll(&mut self) {
        let mut seen: BTreeMap<PathBuf, Signature> = BTreeMap::new();
        match std::fs::read_dir(&self.dir) {
            Ok(rd) => {
                self.missing_dir_reported = false;
                for entry in rd.flatten() {
                    let path = entry.path();
                    if !is_manifest(&path) {
                        continue;
                    }
                    let Ok(md) = std::fs::metadata(&path) else {
                        continue;
                    };
                    if !md.is_file() {
                        continue;
                    }
                    use std::os::unix::fs::MetadataExt;
                    seen.insert(path, Signature { modified: md.modified().ok(), len: md.len(), inode: md.ino() });
                }
            }
            Err(e) => {
                if !self.missing_dir_reported {
                    log::warn!(
                        "podsource: cannot read manifest directory {}: {e}; no static pods until it exists",
                        self.dir.display()
                    );
                    self.missing_dir_reported = true;
                }
            }
        }
        let mut changed = !self.sent_once;
        let before = self.files.len();
        self.files.retain(|p, _| seen.contains_key(p));
        if self.files.len() != before {
            changed = true;
        }
        for (path, sig) in seen {
            if self.files.get(&path).is_some_and(|f| f.signature == sig) {
                continue;
            }
            changed = true;
            match read_manifest(&path, &self.node_name) {
                Ok(pods) => {
                    log::info!("podsource: {}: {} pod(s)", path.display(), pods.len());
                    self.files.insert(path, FileState { signature: sig, pods });
                }
                Err(errors) => {
                    let kept = self.files.get(&path).map(|f| f.pods.clone()).unwrap_or_default();
                    let what = match kept.len() {
                        0 => "ignoring it".to_string(),
                        n => format!("keeping the {n} pod(s) of its last valid version running"),
                    };
                    let node = Reference::node(&self.node_name);
                    for e in &errors {
                        log::error!("podsource: {e}");
                        let message = format!("Error validating pod manifest {e}; {what}");
                        self.recorder.event(&node, WARNING, "FailedValidation", &message);
                    }
                    self.files.insert(path, FileState { signature: sig, pods: kept });
                }
            }
        }
        if changed {
            let pods: Vec<Pod> = self.files.values().flat_map(|f| f.pods.iter().cloned()).collect();
            if self.out.send(PodsCommand::Update { source: SOURCE.into(), pods }).is_ok() {
                self.sent_once = true;
            }
        }
    }
}

/// Wakes the file source as soon as the manifest directory changes (inotify), so a new
/// manifest starts in milliseconds rather than at the next poll; the poll stays as the
/// safety net (and the only mechanism where inotify is unavailable).
pub struct DirWatcher {
    stop: Arc<AtomicBool>,
    join: Option<std::thread::JoinHandle<()>>,
}

impl DirWatcher {
    /// Watches `dir` on a thread named `fl-podwatch`, sending `()` to `wake` on changes.
    pub fn start(dir: &Path, wake: Sender<()>, health: &crate::manager::Health) -> std::io::Result<DirWatcher> {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, dir) = (stop.clone(), dir.to_path_buf());
        let guard = crate::manager::AliveGuard::new(health, "fl-podwatch");
        let join = std::thread::Builder::new().name("fl-podwatch".into()).spawn(move || {
            watch_loop(&dir, &wake, &flag);
            guard.finish();
        })?;
        Ok(DirWatcher { stop, join: Some(join) })
    }

    /// Stops the thread (it checks every 500 ms).
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

fn watch_loop(dir: &Path, wake: &Sender<()>, stop: &AtomicBool) {
    // SAFETY: inotify_init1 takes flags only; the fd is closed below.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
    if fd < 0 {
        log::warn!("podsource: inotify unavailable ({}); manifests are polled only", std::io::Error::last_os_error());
        return;
    }
    let mask = libc::IN_CLOSE_WRITE
        | libc::IN_MOVED_TO
        | libc::IN_MOVED_FROM
        | libc::IN_DELETE
        | libc::IN_CREATE
        | libc::IN_ATTRIB;
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap_or_default();
    let mut watching = false;
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        if !watching {
            // SAFETY: a valid fd and NUL-terminated path.
            watching = unsafe { libc::inotify_add_watch(fd, path.as_ptr(), mask) } >= 0;
            if !watching {
                // The directory may appear later; the poll covers it meanwhile.
                std::thread::sleep(Duration::from_millis(500));
                continue;
            }
        }
        match crate::util::poll_readable(&[fd], Some(Duration::from_millis(500))) {
            Ok(r) if r[0] != 0 => {
                // Let a burst of writes settle, then take all of it as one change.
                std::thread::sleep(Duration::from_millis(20));
                // SAFETY: reading into a buffer we own, within its length.
                while unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
                if wake.send(()).is_err() {
                    break;
                }
            }
            Ok(_) => {}
            Err(e) => {
                log::warn!("podsource: watching {}: {e}", dir.display());
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }
    // SAFETY: closing the fd we opened.
    unsafe { libc::close(fd) };
}

impl crate::manager::Manager for FileSource {
    type Command = ();

    fn handle(&mut self, _: ()) {
        self.poll();
    }

    fn on_tick(&mut self) {
        self.poll();
    }

    fn tick_interval(&self) -> Duration {
        self.interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::unbounded;

    const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: NAME\nspec:\n  containers:\n  - name: c\n    image: busybox\n    command: [sleep, '1']\n";

    fn names(cmd: PodsCommand) -> Vec<String> {
        let PodsCommand::Update { pods, .. } = cmd else { panic!("not an update") };
        pods.into_iter().map(|p| p.metadata.name).collect()
    }

    #[test]
    fn sends_full_sets_on_add_change_remove_and_keeps_last_good_version() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, rx) = unbounded();
        let (etx, erx) = unbounded();
        let recorder = EventRecorder::new(etx, "ferrolet", "node1", Default::default());
        let mut src = FileSource::new(dir.path(), "node1", Duration::from_secs(1), tx, recorder);
        src.poll();
        assert_eq!(names(rx.try_recv().unwrap()), Vec::<String>::new());
        std::fs::write(dir.path().join("a.yaml"), POD.replace("NAME", "a")).unwrap();
        std::fs::write(dir.path().join("b.yaml~"), POD.replace("NAME", "ignored")).unwrap();
        src.poll();
        assert_eq!(names(rx.try_recv().unwrap()), vec!["a-node1"]);
        src.poll();
        assert!(rx.try_recv().is_err(), "no change, no update");
        std::fs::write(dir.path().join("a.yaml"), POD.replace("NAME", "a").replace("image: busybox", "image: ["))
            .unwrap();
        src.poll();
        assert_eq!(names(rx.try_recv().unwrap()), vec!["a-node1"], "broken edit keeps the running pod");
        let e = erx.try_recv().unwrap();
        assert_eq!((e.reason.as_str(), e.involved_object.kind.as_str()), ("FailedValidation", "Node"));
        assert!(e.message.contains("a.yaml: invalid YAML"), "{}", e.message);
        assert!(e.message.ends_with("keeping the 1 pod(s) of its last valid version running"), "{}", e.message);
        std::fs::remove_file(dir.path().join("a.yaml")).unwrap();
        src.poll();
        assert_eq!(names(rx.try_recv().unwrap()), Vec::<String>::new());
    }
}
