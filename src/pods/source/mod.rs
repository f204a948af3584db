//! The static pod source: watches the manifest directory and sends the pod manager the
//! complete set of static pods whenever a file is added, changed or removed. A file that
//! fails to decode or validate is reported with its field path; the pods it held before
//! keep running (kubelet drops them, so one typo in an edit would stop a running pod).

use crate::api::field::is_dns1123_subdomain;
use crate::api::manifest::{as_static_pod, for_each_pod, ManifestError, MAX_MANIFEST_BYTES};
use crate::api::Pod;
use crate::base::errors::Chain;
use crate::base::inputfile::{self, InputFileError};
use crate::base::logsafe;
use crate::node::events::{EventRecorder, Reference, WARNING};
use crate::pods::PodsCommand;
use crossbeam_channel::Sender;
use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

mod watch;
pub use watch::DirWatcher;

/// Source name in pod updates and the `kubernetes.io/config.source` annotation.
pub const SOURCE: crate::api::manifest::PodSource = crate::api::manifest::PodSource::File;

/// What the file source is asked to do.
#[derive(Debug)]
pub enum SourceCommand {
    /// Look at the directory now (it changed, or the agent has just started).
    Look,
    /// Take manifests from this directory from now on (a reload): the pods of the old one
    /// stop, the new one's start.
    Dir(PathBuf),
}

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
    /// Shared with the pod manager: one copy of each spec.
    pods: Vec<Arc<Pod>>,
}

/// Most problems reported for one file (all documents); the rest are counted in one line.
pub const MAX_PROBLEMS_PER_FILE: usize = 200;
/// Most `FailedValidation` events for one rejected file (the rest of its problems are logged).
const MAX_EVENTS_PER_FILE: usize = 10;

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
    /// Entries named like manifests that are not regular files, reported once each
    /// (with the reason, so a changed reason is reported again).
    skipped: BTreeMap<PathBuf, String>,
    /// Duplicates already reported, so each is logged once, not at every change.
    duplicates: Vec<Duplicate>,
    /// Most pods this source hands on (kubelet's `maxPods`).
    max_pods: usize,
    /// Pods refused for `max_pods` already reported (`namespace/name`).
    over_limit: Vec<String>,
}

/// Whether a directory entry is a manifest: not hidden, ending in .yaml, .yml or .json.
fn is_manifest(path: &Path) -> bool {
    let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    !name.starts_with('.') && [".yaml", ".yml", ".json"].iter().any(|ext| name.ends_with(ext))
}

/// The one check of a directory entry named like a manifest, shared by the agent's
/// source and `ferrolet validate`: it must be (or link to) a regular file; FIFOs,
/// sockets, devices and directories are skipped without being opened. (The size limit
/// is checked when the file is read, so a file grown too large is a rejected manifest,
/// reported as one, and its pods keep their last valid version.)
pub fn check_manifest_file(path: &Path) -> Result<std::fs::Metadata, InputFileError> {
    inputfile::check(path, u64::MAX)
}

/// The problem as a manifest error says it: kubelet's limit is named.
fn manifest_read_problem(e: &InputFileError) -> String {
    match e {
        InputFileError::TooLarge { len, .. } => format!(
            "file is {len} bytes; a manifest file may have at most {MAX_MANIFEST_BYTES} bytes (10 MiB, kubelet's limit for static pod files)"
        ),
        other => Chain(other).to_string(),
    }
}

/// The manifest files of a directory in file name order, each with its metadata or why it
/// is skipped (not a regular file, or gone). Used by the agent and `ferrolet validate`,
/// so both read the same files. A listing error ends the listing: a partial listing
/// would look like removed files.
pub fn list_manifest_dir(dir: &Path) -> std::io::Result<Vec<(PathBuf, Result<std::fs::Metadata, InputFileError>)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if is_manifest(&path) {
            let checked = check_manifest_file(&path);
            out.push((path, checked));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Reads one manifest file into static pods, or the reasons it was rejected (every
/// problem of every document, each on its own).
pub fn read_manifest(path: &Path, node_name: &str) -> Result<Vec<Pod>, Rejections> {
    let file = path.display().to_string();
    let text = inputfile::read_to_string(path, MAX_MANIFEST_BYTES)
        .map_err(|e| vec![ManifestError { file: file.clone(), doc: None, problem: manifest_read_problem(&e) }])?;
    let mut pods = Vec::new();
    let mut errors = Vec::new();
    // Problems past MAX_PROBLEMS_PER_FILE are only counted: a file may have 250,000.
    let mut more = 0usize;
    let mut add = |errors: &mut Vec<ManifestError>, e: ManifestError| {
        if errors.len() < MAX_PROBLEMS_PER_FILE {
            errors.push(e);
        } else {
            more += 1;
        }
    };
    for_each_pod(&file, &text, |r| match r {
        Ok(p) => {
            let name = p.metadata.name.clone();
            let pod = as_static_pod(p, node_name, path);
            // kubelet validates a static pod after appending the node name.
            if is_dns1123_subdomain(&pod.metadata.name) {
                pods.push(pod);
            } else {
                let problem = format!("metadata.name: Invalid value: {name:?}: with \"-{node_name}\" appended, as for every static pod, it must be a lowercase RFC 1123 subdomain of at most 253 characters");
                add(&mut errors, ManifestError { file: file.clone(), doc: None, problem });
            }
        }
        Err(e) => e.into_iter().for_each(|e| add(&mut errors, e)),
    });
    if errors.is_empty() {
        return Ok(pods);
    }
    if more > 0 {
        errors.push(ManifestError { file, doc: None, problem: format!("… and {more} more problem(s)") });
    }
    Err(errors)
}

/// A pod refused because an earlier pod (in file name order, then document order) has
/// the same namespace and name, as kubelet refuses duplicate static pods, or the same uid
/// (which a manifest may set).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Duplicate {
    /// `namespace/name` of the refused pod (and of the first, when the name is the duplicate).
    pub key: String,
    /// The uid both pods set, when that is the duplicate.
    pub uid: Option<String>,
    /// The file of the refused pod.
    pub file: PathBuf,
    /// The file of the pod that runs.
    pub first: PathBuf,
}

impl Duplicate {
    /// What is wrong, naming both files (the agent adds that it ignores this pod).
    pub fn message(&self) -> String {
        if let Some(uid) = &self.uid {
            return format!(
                "{}: metadata.uid: Duplicate value: pod {:?} sets uid {:?}, already the uid of a pod in {}",
                logsafe::path(&self.file),
                self.key,
                uid,
                logsafe::path(&self.first)
            );
        }
        format!(
            "{}: metadata.name: Duplicate value: pod {:?} is already defined in {}",
            logsafe::path(&self.file),
            self.key,
            logsafe::path(&self.first)
        )
    }
}

/// Keeps the first `max` pods; the rest are refused (kubelet's `maxPods` admission).
pub fn split_at_max_pods<P>(mut pods: Vec<P>, max: usize) -> (Vec<P>, Vec<P>) {
    let refused = if pods.len() > max { pods.split_off(max) } else { Vec::new() };
    (pods, refused)
}

/// kubelet's admission message for a pod past `maxPods`, naming the pod's file.
pub fn over_max_pods_message(pod: &Pod, max: usize) -> String {
    let file = pod.metadata.annotations.get(crate::api::manifest::CONFIG_FILE_ANNOTATION).map(String::as_str);
    format!(
        "{}: pod {:?}: Node didn't have enough resource: pods, requested: 1, used: {max}, capacity: {max} (max_pods)",
        logsafe::Escaped(file.unwrap_or("")),
        pod.key()
    )
}

/// Keeps the first pod of each name and of each uid, in the order given (file name order,
/// then document order), and lists the others as duplicates.
pub fn dedupe<'a, P: Borrow<Pod> + Clone + 'a>(
    files: impl IntoIterator<Item = (&'a Path, &'a [P])>,
) -> (Vec<P>, Vec<Duplicate>) {
    let mut seen: BTreeMap<String, &Path> = BTreeMap::new();
    let mut seen_uids: BTreeMap<&str, &Path> = BTreeMap::new();
    let (mut pods, mut dups) = (Vec::new(), Vec::new());
    for (file, list) in files {
        for shared in list {
            let pod: &Pod = shared.borrow();
            let key = pod.key();
            let uid = pod.metadata.uid.as_str();
            if let Some(first) = seen.get(&key) {
                dups.push(Duplicate { key, uid: None, file: file.into(), first: first.to_path_buf() });
            } else if let Some(first) = seen_uids.get(uid).filter(|_| !uid.is_empty()) {
                // Only a uid the manifests set can repeat (hashed ones differ by content).
                dups.push(Duplicate { key, uid: Some(uid.into()), file: file.into(), first: first.to_path_buf() });
            } else {
                seen.insert(key, file);
                seen_uids.insert(uid, file);
                pods.push(shared.clone());
            }
        }
    }
    (pods, dups)
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
            skipped: BTreeMap::new(),
            duplicates: Vec::new(),
            max_pods: crate::api::limits::DEFAULT_MAX_PODS,
            over_limit: Vec::new(),
        }
    }

    /// Hands on at most `n` pods (the first ones in file name, then document order); the
    /// others are refused as kubelet's admission refuses pods past `maxPods`.
    pub fn with_max_pods(mut self, n: usize) -> Self {
        self.max_pods = n;
        self
    }

    /// Looks for changes; sends an update when anything changed (and once at start).
    pub fn poll(&mut self) {
        let mut seen: BTreeMap<PathBuf, Signature> = BTreeMap::new();
        match list_manifest_dir(&self.dir) {
            Ok(entries) => {
                self.missing_dir_reported = false;
                let mut skipped = BTreeMap::new();
                for (path, checked) in entries {
                    let md = match checked {
                        Ok(md) => md,
                        Err(e) => {
                            let why = Chain(&e).to_string();
                            if self.skipped.get(&path) != Some(&why) {
                                log::warn!("podsource: skipping {}: {}", logsafe::path(&path), logsafe::Escaped(&why));
                            }
                            skipped.insert(path, why);
                            continue;
                        }
                    };
                    use std::os::unix::fs::MetadataExt;
                    seen.insert(path, Signature { modified: md.modified().ok(), len: md.len(), inode: md.ino() });
                }
                self.skipped = skipped;
            }
            Err(e) => {
                let exists = self.dir.is_dir();
                if !self.missing_dir_reported {
                    let what = if exists {
                        "keeping the pods as they are until it can be read"
                    } else {
                        "no static pods until it exists"
                    };
                    log::warn!("podsource: cannot read manifest directory {}: {e}; {what}", logsafe::path(&self.dir));
                    self.missing_dir_reported = true;
                }
                if exists {
                    // A listing that failed (half-way, or EIO) would look like removed files.
                    return;
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
                    log::info!("podsource: {}: {} pod(s)", logsafe::path(&path), pods.len());
                    let mut pods: Vec<Arc<Pod>> = pods.into_iter().map(Arc::new).collect();
                    // Collected in place, it would keep the parsed pods' buffer (about 1 KB a
                    // file, for as long as the file is unchanged).
                    pods.shrink_to_fit();
                    self.files.insert(path, FileState { signature: sig, pods });
                }
                Err(errors) => {
                    let kept = self.files.get(&path).map(|f| f.pods.clone()).unwrap_or_default();
                    let what = match kept.len() {
                        0 => "ignoring it".to_string(),
                        n => format!("keeping the {n} pod(s) of its last valid version running"),
                    };
                    let node = Reference::node(&self.node_name);
                    for (i, e) in errors.iter().enumerate() {
                        // Every problem is logged once: the first few as events (the event
                        // log says them), the rest here.
                        if i < MAX_EVENTS_PER_FILE {
                            let message = format!("Error validating pod manifest {e}; {what}");
                            self.recorder.event(&node, WARNING, "FailedValidation", &message);
                        } else {
                            log::error!("podsource: {e}");
                        }
                    }
                    self.files.insert(path, FileState { signature: sig, pods: kept });
                }
            }
        }
        if changed {
            let (pods, duplicates) = dedupe(self.files.iter().map(|(p, f)| (p.as_path(), f.pods.as_slice())));
            let node = Reference::node(&self.node_name);
            for d in &duplicates {
                if !self.duplicates.contains(d) {
                    // kubelet: "Error validating pod … due to duplicate pod name …, ignoring".
                    let message = format!("{}; ignoring it, the first one runs", d.message());
                    self.recorder.event(
                        &node,
                        WARNING,
                        "FailedValidation",
                        &format!("Error validating pod manifest {message}"),
                    );
                }
            }
            self.duplicates = duplicates;
            let (pods, refused) = split_at_max_pods(pods, self.max_pods);
            let mut over_limit = Vec::new();
            for p in &refused {
                let key = p.key();
                if !self.over_limit.contains(&key) {
                    let message = over_max_pods_message(p, self.max_pods);
                    self.recorder.event(&node, WARNING, "OutOfpods", &message);
                }
                over_limit.push(key);
            }
            self.over_limit = over_limit;
            if self.out.send(PodsCommand::Update { source: SOURCE, pods }).is_ok() {
                self.sent_once = true;
            }
            // What was read and decoded is dropped by now: a large manifest (or a refused
            // one of thousands of containers) leaves no memory behind.
            crate::base::procs::release_freed_memory();
        }
    }
}

impl crate::base::manager::Manager for FileSource {
    type Command = SourceCommand;

    fn handle(&mut self, cmd: SourceCommand) {
        if let SourceCommand::Dir(dir) = cmd {
            log::info!(
                "podsource: manifests now come from {} (were from {})",
                logsafe::path(&dir),
                logsafe::path(&self.dir)
            );
            self.dir = dir;
            self.missing_dir_reported = false;
        }
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
        pods.into_iter().map(|p| p.metadata.name.clone()).collect()
    }

    #[test]
    fn a_new_directory_replaces_the_old_ones_pods() {
        use crate::base::manager::Manager;
        let (old, new) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(old.path().join("a.yaml"), POD.replace("NAME", "a")).unwrap();
        std::fs::write(new.path().join("b.yaml"), POD.replace("NAME", "b")).unwrap();
        let (tx, rx) = unbounded();
        let (etx, _erx) = unbounded();
        let recorder = EventRecorder::new(etx, "ferrolet", "node1", Default::default());
        let mut src = FileSource::new(old.path(), "node1", Duration::from_secs(1), tx, recorder);
        src.handle(SourceCommand::Look);
        assert_eq!(names(rx.try_recv().unwrap()), vec!["a-node1"]);
        src.handle(SourceCommand::Dir(new.path().into()));
        assert_eq!(names(rx.try_recv().unwrap()), vec!["b-node1"]);
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

    #[test]
    fn a_uid_two_manifests_set_runs_only_the_first_pod() {
        let pod = |name: &str| {
            let mut p = crate::api::manifest::decode_pods("x", &POD.replace("NAME", name)).remove(0).unwrap();
            p.metadata.uid = "same-uid".into();
            p
        };
        let (a, b) = (vec![pod("web")], vec![pod("db")]);
        let (pods, dups) = dedupe([(Path::new("/m/a.yaml"), a.as_slice()), (Path::new("/m/b.yaml"), b.as_slice())]);
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].metadata.name, "web");
        assert_eq!(
            dups[0].message(),
            "/m/b.yaml: metadata.uid: Duplicate value: pod \"default/db\" sets uid \"same-uid\", already the uid of a pod in /m/a.yaml"
        );
    }

    #[test]
    fn the_first_pod_of_a_name_wins_in_file_then_document_order() {
        let pod = |name: &str, arg: &str| {
            let mut p = crate::api::manifest::decode_pods("x", &POD.replace("NAME", name)).remove(0).unwrap();
            p.spec.containers[0].args.push(arg.into());
            p
        };
        let a = vec![pod("web", "a1"), pod("db", "a2"), pod("web", "a3")];
        let b = vec![pod("db", "b1"), pod("cache", "b2")];
        let (pods, dups) = dedupe([(Path::new("/m/a.yaml"), a.as_slice()), (Path::new("/m/b.yaml"), b.as_slice())]);
        let kept: Vec<(&str, &str)> =
            pods.iter().map(|p| (p.metadata.name.as_str(), p.spec.containers[0].args[0].as_str())).collect();
        assert_eq!(kept, vec![("web", "a1"), ("db", "a2"), ("cache", "b2")]);
        let messages: Vec<String> = dups.iter().map(|d| d.message()).collect();
        assert_eq!(
            messages,
            vec![
                "/m/a.yaml: metadata.name: Duplicate value: pod \"default/web\" is already defined in /m/a.yaml",
                "/m/b.yaml: metadata.name: Duplicate value: pod \"default/db\" is already defined in /m/a.yaml",
            ]
        );
    }

    #[test]
    fn a_static_pod_name_with_the_node_name_must_stay_a_valid_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("long.yaml");
        let labels = vec!["a".repeat(60); 4].join(".");
        std::fs::write(&path, POD.replace("NAME", &format!("{labels}.bbbbbb"))).unwrap();
        let e = read_manifest(&path, "node1").unwrap_err();
        assert_eq!(e.len(), 1);
        assert!(e[0].problem.starts_with("metadata.name: Invalid value: \"aaaa"), "{}", e[0]);
        assert!(e[0].problem.ends_with("with \"-node1\" appended, as for every static pod, it must be a lowercase RFC 1123 subdomain of at most 253 characters"), "{}", e[0]);
        std::fs::write(&path, POD.replace("NAME", &format!("{labels}.bbb"))).unwrap();
        assert_eq!(read_manifest(&path, "node1").unwrap()[0].metadata.name.len(), 253);
    }

    #[test]
    fn ten_thousand_problems_are_reported_as_a_bounded_list() {
        // 40 documents, each with 250 invalid container names: 10,000 problems. Each
        // document reports at most 50, the file at most 200 and a summary line, and every
        // line stays short (no 400 KB line, no 400 KB event).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("many.yaml");
        let containers: String = (0..250).map(|i| format!("  - name: Bad_{i}\n    image: x\n")).collect();
        let doc = format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n{containers}");
        std::fs::write(&path, vec![doc; 40].join("---\n")).unwrap();
        let errors = read_manifest(&path, "node1").unwrap_err();
        assert_eq!(errors.len(), MAX_PROBLEMS_PER_FILE + 1);
        let last = errors.last().unwrap().to_string();
        assert!(last.ends_with("more problem(s)"), "{last}");
        assert!(errors.iter().all(|e| e.to_string().len() < 1024), "every problem is one short line");
    }
}
