//! The last pod set the apiserver gave this node, kept in `<state_dir>/apiserver-pods/`,
//! one file a pod (`<uid>.json`) (edge autonomy): an agent restarted while the apiserver
//! cannot be listed runs these pods until it can list again, instead of stopping every pod
//! the cluster placed here. What is kept is each pod without its status and
//! resourceVersion, written atomically only when that changed: the echo of every status
//! this node sends is not a write to its flash, nor is one pod's change a write of all.
//!
//! Every file written can be read back: a pod larger than `MAX_POD_BYTES` is not kept
//! (said), and at most `pods::MAX_PODS` are. A file that cannot be read is said and left
//! out, the others kept; a directory that cannot be read is an error, never "no pods".
//! The single file of earlier versions (`apiserver-pods.json`) is read when the directory
//! is not there yet, and removed once the directory is written.

use super::pods::MAX_PODS;
use crate::api::Pod;
use parking_lot::Mutex;
use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};

/// The directory's name in the state directory.
pub const DIR: &str = "apiserver-pods";
/// The file of earlier versions, read once on upgrade.
pub const LEGACY_FILE: &str = "apiserver-pods.json";
/// The most one kept pod may hold (the apiserver stores objects of at most 1.5 MiB).
const MAX_POD_BYTES: u64 = 4 << 20;
/// The most the file of earlier versions may hold.
const MAX_LEGACY_BYTES: u64 = 32 << 20;

/// The kept pod set.
#[derive(Debug)]
pub struct PodStore {
    state_dir: PathBuf,
    /// What each kept file holds (its bytes' hash), so the same pod is not written again.
    written: Mutex<HashMap<String, u64>>,
}

/// The file of earlier versions: each pod's raw JSON, decoded one at a time.
#[derive(serde::Deserialize)]
struct LegacyFile {
    version: u32,
    pods: BTreeMap<String, Box<serde_json::value::RawValue>>,
}

impl PodStore {
    /// The store in `state_dir`.
    pub fn new(state_dir: &Path) -> PodStore {
        PodStore { state_dir: state_dir.to_path_buf(), written: Mutex::new(HashMap::new()) }
    }

    fn dir(&self) -> PathBuf {
        self.state_dir.join(DIR)
    }

    /// The pods kept, by uid: empty when none were ever kept; an error (with its cause)
    /// when what was kept cannot be read at all, so that it is not taken for "no pods".
    pub fn load(&self) -> Result<BTreeMap<String, Pod>, String> {
        let dir = self.dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return self.load_legacy(),
            Err(e) => return Err(format!("cannot list {}: {e}", dir.display())),
        };
        let mut pods = BTreeMap::new();
        for entry in entries {
            let entry = entry.map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(uid) = name.strip_suffix(".json").filter(|u| crate::api::validation::is_uid(u)) else {
                continue;
            };
            if pods.len() == MAX_PODS {
                log::warn!("apiserver: {} holds more than {MAX_PODS} pods; the rest are left out", dir.display());
                break;
            }
            let path = entry.path();
            let bytes = match crate::base::inputfile::read_to_string(&path, MAX_POD_BYTES) {
                Ok(b) => b,
                Err(e) => {
                    log::warn!(
                        "apiserver: kept pod {uid} cannot be read: {}; left out",
                        crate::base::errors::Chain(&e)
                    );
                    continue;
                }
            };
            if let Some(pod) = decode(&path, uid, bytes.as_bytes()) {
                self.written.lock().insert(uid.to_string(), hash(bytes.as_bytes()));
                pods.insert(uid.to_string(), pod);
            }
        }
        Ok(pods)
    }

    /// The pods kept by an earlier version in one file.
    fn load_legacy(&self) -> Result<BTreeMap<String, Pod>, String> {
        let path = self.state_dir.join(LEGACY_FILE);
        let text = match crate::base::inputfile::read_to_string(&path, MAX_LEGACY_BYTES) {
            Ok(t) => t,
            Err(crate::base::inputfile::InputFileError::Read(e)) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(BTreeMap::new())
            }
            Err(e) => return Err(crate::base::errors::Chain(&e).to_string()),
        };
        match serde_json::from_slice::<LegacyFile>(text.as_bytes()) {
            Ok(f) if f.version == 1 => Ok(f
                .pods
                .into_iter()
                .take(MAX_PODS)
                .filter_map(|(uid, raw)| decode(&path, &uid, raw.get().as_bytes()).map(|p| (uid, p)))
                .collect()),
            Ok(f) => Err(format!("{} is version {}, not 1", path.display(), f.version)),
            Err(e) => Err(format!("{} is damaged: {e}", path.display())),
        }
    }

    /// `save` for the pods of `changed` only (a watch event's): the others are as kept.
    pub fn save_changed<P: Borrow<Pod>>(
        &self,
        pods: &BTreeMap<String, P>,
        changed: &BTreeSet<String>,
    ) -> io::Result<usize> {
        let some = changed.iter().filter_map(|uid| pods.get(uid).map(|p| (uid, p.borrow())));
        let gone = changed.iter().filter(|uid| !pods.contains_key(*uid));
        self.write(some, gone)
    }

    /// Keeps `pods` as the whole set (after a list): each pod's file written atomically
    /// when it differs from what was kept, every other pod's file in the directory removed
    /// (also one a previous run left); returns how many files were written. A pod too
    /// large to be read back is not kept, and said.
    pub fn save<P: Borrow<Pod>>(&self, pods: &BTreeMap<String, P>) -> io::Result<usize> {
        let mut gone: BTreeSet<String> =
            self.written.lock().keys().filter(|u| !pods.contains_key(*u)).cloned().collect();
        if let Ok(entries) = std::fs::read_dir(self.dir()) {
            let names = entries.take(2 * MAX_PODS).flatten().map(|e| e.file_name().to_string_lossy().into_owned());
            gone.extend(
                names.filter_map(|n| n.strip_suffix(".json").map(String::from)).filter(|u| !pods.contains_key(u)),
            );
        }
        self.write(pods.iter().map(|(uid, p)| (uid, p.borrow())), gone.iter())
    }

    /// Writes `pods` (each when it differs from what was kept) and removes the files of
    /// `gone`.
    fn write<'a>(
        &self,
        pods: impl Iterator<Item = (&'a String, &'a Pod)>,
        gone: impl Iterator<Item = &'a String>,
    ) -> io::Result<usize> {
        let dir = self.dir();
        std::fs::create_dir_all(&dir)?;
        let mut written = self.written.lock();
        let mut count = 0;
        for (uid, p) in pods.take(MAX_PODS) {
            if !crate::api::validation::is_uid(uid) {
                continue;
            }
            let mut p = p.clone();
            p.status = None;
            p.metadata.resource_version.clear();
            let data = serde_json::to_vec(&p).map_err(io::Error::other)?;
            if data.len() as u64 > MAX_POD_BYTES {
                log::warn!(
                    "apiserver: pod {uid} is {} bytes, over the {MAX_POD_BYTES} a kept pod may hold; it is not kept",
                    data.len()
                );
                continue;
            }
            let h = hash(&data);
            if written.get(uid) == Some(&h) {
                continue;
            }
            crate::base::state_files::write_atomic(&dir.join(format!("{uid}.json")), &data)?;
            written.insert(uid.clone(), h);
            count += 1;
        }
        for uid in gone.filter(|u| crate::api::validation::is_uid(u)) {
            remove_if_there(&dir.join(format!("{uid}.json")))?;
            written.remove(uid);
        }
        remove_if_there(&self.state_dir.join(LEGACY_FILE))?;
        Ok(count)
    }
}

/// One kept pod, or `None` (said) when it cannot be read.
fn decode(path: &Path, uid: &str, bytes: &[u8]) -> Option<Pod> {
    let decoded = serde_json::from_slice(bytes).map_err(|e| e.to_string()).and_then(|v| crate::api::decode(&v));
    match decoded {
        Ok(pod) => Some(pod),
        Err(e) => {
            log::warn!("apiserver: {}: kept pod {uid} cannot be read ({e}); left out", path.display());
            None
        }
    }
}

/// Removes `path`; one already gone is fine.
fn remove_if_there(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn hash(data: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    data.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, name: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.uid = uid.into();
        p.metadata.name = name.into();
        p
    }

    #[test]
    fn the_pod_set_survives_a_restart_and_damage_is_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let store = PodStore::new(dir.path());
        assert!(store.load().unwrap().is_empty());
        let pods = BTreeMap::from([("u1".to_string(), pod("u1", "web")), ("u2".to_string(), pod("u2", "db"))]);
        assert_eq!(store.save(&pods).unwrap(), 2);
        assert_eq!(PodStore::new(dir.path()).load().unwrap(), pods);
        // One damaged file costs that pod only.
        std::fs::write(dir.path().join(DIR).join("u1.json"), "[").unwrap();
        assert_eq!(PodStore::new(dir.path()).load().unwrap().keys().collect::<Vec<_>>(), ["u2"]);
        // A directory that cannot be read is not "no pods".
        std::fs::remove_dir_all(dir.path().join(DIR)).unwrap();
        std::fs::write(dir.path().join(DIR), "").unwrap();
        assert!(PodStore::new(dir.path()).load().unwrap_err().contains("cannot list"));
    }

    #[test]
    fn what_is_kept_can_be_read_back_however_large_the_set() {
        // 175 pods of 200 KiB annotations each: 35 MB in all, over the old single file's
        // 32 MiB, which the agent wrote and then refused.
        let dir = tempfile::tempdir().unwrap();
        let store = PodStore::new(dir.path());
        let big = "x".repeat(200 << 10);
        let pods: BTreeMap<String, Pod> = (0..175)
            .map(|i| {
                let mut p = pod(&format!("u{i}"), &format!("p{i}"));
                p.metadata.annotations.insert("example.com/blob".into(), big.clone());
                (p.metadata.uid.clone(), p)
            })
            .collect();
        assert_eq!(store.save(&pods).unwrap(), 175);
        assert_eq!(PodStore::new(dir.path()).load().unwrap().len(), 175);
        // A pod too large to read back is not written.
        let mut huge = pod("u-huge", "huge");
        huge.metadata.annotations.insert("example.com/blob".into(), "y".repeat(5 << 20));
        assert_eq!(store.save(&BTreeMap::from([("u-huge".to_string(), huge)])).unwrap(), 0);
        assert!(PodStore::new(dir.path()).load().unwrap().is_empty(), "the others are gone from the set");
    }

    #[test]
    fn the_single_file_of_earlier_versions_is_read_and_then_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let text = r#"{"version": 1, "pods": {
            "u1": {"metadata": {"uid": "u1", "name": "web"}},
            "u2": {"metadata": {"uid": "u2"}, "spec": {"containers": "not a list"}}}}"#;
        std::fs::write(dir.path().join(LEGACY_FILE), text).unwrap();
        let store = PodStore::new(dir.path());
        let kept = store.load().unwrap();
        assert_eq!(kept.keys().collect::<Vec<_>>(), ["u1"], "the pod that cannot be read is left out");
        assert_eq!(kept["u1"].metadata.name, "web");
        store.save(&kept).unwrap();
        assert!(!dir.path().join(LEGACY_FILE).exists());
        assert_eq!(PodStore::new(dir.path()).load().unwrap(), kept);
        std::fs::write(dir.path().join(LEGACY_FILE), "[").unwrap();
        assert_eq!(PodStore::new(dir.path()).load().unwrap(), kept, "the directory wins");
        std::fs::remove_dir_all(dir.path().join(DIR)).unwrap();
        assert!(PodStore::new(dir.path()).load().unwrap_err().contains("is damaged"));
    }

    #[test]
    fn a_new_status_or_resource_version_is_not_written_a_new_spec_is() {
        let dir = tempfile::tempdir().unwrap();
        let store = PodStore::new(dir.path());
        let mut p = pod("u1", "web");
        p.metadata.resource_version = "1".into();
        let mut pods = BTreeMap::from([("u1".to_string(), p), ("u2".to_string(), pod("u2", "db"))]);
        assert_eq!(store.save(&pods).unwrap(), 2);
        let web = pods.get_mut("u1").unwrap();
        web.metadata.resource_version = "2".into();
        web.status = Some(crate::api::PodStatus { message: "running".into(), ..Default::default() });
        assert_eq!(store.save(&pods).unwrap(), 0, "only its status changed");
        pods.get_mut("u1").unwrap().metadata.labels.insert("app".into(), "web".into());
        assert_eq!(store.save(&pods).unwrap(), 1, "one pod changed: one file written");
        pods.remove("u2");
        assert_eq!(store.save(&pods).unwrap(), 0);
        let kept = PodStore::new(dir.path()).load().unwrap();
        assert_eq!(kept.keys().collect::<Vec<_>>(), ["u1"]);
        assert!(kept["u1"].status.is_none() && kept["u1"].metadata.labels["app"] == "web");
        // A store started over what is kept does not write it again.
        let again = PodStore::new(dir.path());
        again.load().unwrap();
        assert_eq!(again.save(&pods).unwrap(), 0);
    }

    #[test]
    fn a_whole_set_removes_what_a_previous_run_kept_of_pods_gone_since() {
        let dir = tempfile::tempdir().unwrap();
        let old = BTreeMap::from([("u1".to_string(), pod("u1", "web")), ("u2".to_string(), pod("u2", "db"))]);
        PodStore::new(dir.path()).save(&old).unwrap();
        // A new run lists only u2: u1's file goes too, though this run never wrote it.
        let store = PodStore::new(dir.path());
        store.save(&BTreeMap::from([("u2".to_string(), pod("u2", "db"))])).unwrap();
        assert_eq!(PodStore::new(dir.path()).load().unwrap().keys().collect::<Vec<_>>(), ["u2"]);
    }
}
