//! The last pod set the apiserver gave this node, kept in `<state_dir>/apiserver-pods.json`
//! (edge autonomy): an agent restarted while the apiserver cannot be reached runs these
//! pods until it can list again, instead of stopping every pod the cluster placed here.
//! What is kept is the pods without their status and resourceVersion, written atomically
//! only when that changed: the echo of every status this node sends is not a write to its
//! flash. A file that cannot be read is said and ignored; so is a pod in it that cannot be
//! read (with the field it is about), the others kept.

use crate::api::Pod;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The file's name in the state directory.
pub const FILE: &str = "apiserver-pods.json";
/// The most it may hold.
const MAX_BYTES: u64 = 32 << 20;

/// The kept pod set.
#[derive(Debug)]
pub struct PodStore {
    path: PathBuf,
    /// What was written last (its bytes' hash), so the same set is not written again.
    written: Mutex<Option<u64>>,
}

/// The file: written with `Pod`s, read with each pod's raw JSON, decoded one at a time.
#[derive(serde::Serialize, serde::Deserialize)]
struct File<P> {
    version: u32,
    pods: BTreeMap<String, P>,
}

impl PodStore {
    /// The store in `state_dir`.
    pub fn new(state_dir: &Path) -> PodStore {
        PodStore { path: state_dir.join(FILE), written: Mutex::new(None) }
    }

    /// The pods kept, by uid; empty without a file.
    pub fn load(&self) -> BTreeMap<String, Pod> {
        let text = match crate::inputfile::read_to_string(&self.path, MAX_BYTES) {
            Ok(t) => t,
            Err(crate::inputfile::InputFileError::Read(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Default::default()
            }
            Err(e) => {
                log::warn!("apiserver: cannot read {}: {}; no kept pods", self.path.display(), crate::util::Chain(&e));
                return Default::default();
            }
        };
        match serde_json::from_slice::<File<Box<serde_json::value::RawValue>>>(text.as_bytes()) {
            Ok(f) if f.version == 1 => {
                f.pods.into_iter().filter_map(|(uid, raw)| self.decode(&uid, &raw).map(|p| (uid, p))).collect()
            }
            Ok(f) => {
                log::warn!("apiserver: {} is version {}, not 1; no kept pods", self.path.display(), f.version);
                Default::default()
            }
            Err(e) => {
                log::warn!("apiserver: {} is damaged ({e}); no kept pods", self.path.display());
                Default::default()
            }
        }
    }

    /// One kept pod, or `None` (said) when it cannot be read.
    fn decode(&self, uid: &str, raw: &serde_json::value::RawValue) -> Option<Pod> {
        let decoded = serde_json::from_slice(raw.get().as_bytes())
            .map_err(|e| e.to_string())
            .and_then(|v| crate::api::decode(&v));
        match decoded {
            Ok(pod) => Some(pod),
            Err(e) => {
                log::warn!("apiserver: {}: kept pod {uid} cannot be read ({e}); left out", self.path.display());
                None
            }
        }
    }

    /// Keeps `pods` (without status and resourceVersion), atomically, when that differs
    /// from what was kept last; returns whether it wrote.
    pub fn save(&self, pods: &BTreeMap<String, Pod>) -> std::io::Result<bool> {
        let kept = pods
            .iter()
            .map(|(uid, p)| {
                let mut p = p.clone();
                p.status = None;
                p.metadata.resource_version.clear();
                (uid.clone(), p)
            })
            .collect();
        let data = serde_json::to_vec_pretty(&File { version: 1, pods: kept }).map_err(std::io::Error::other)?;
        let hash = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            data.hash(&mut h);
            h.finish()
        };
        let mut written = self.written.lock();
        if *written == Some(hash) {
            return Ok(false);
        }
        crate::util::write_atomic(&self.path, &data)?;
        *written = Some(hash);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pod_set_survives_a_restart_and_damage_is_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let store = PodStore::new(dir.path());
        assert!(store.load().is_empty());
        let mut p = Pod::default();
        p.metadata.uid = "u1".into();
        p.metadata.name = "web".into();
        let pods = BTreeMap::from([("u1".to_string(), p)]);
        assert!(store.save(&pods).unwrap());
        assert_eq!(PodStore::new(dir.path()).load(), pods);
        std::fs::write(dir.path().join(FILE), "[").unwrap();
        assert!(store.load().is_empty());
    }

    #[test]
    fn a_kept_pod_that_cannot_be_read_is_left_out_and_the_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        let text = r#"{"version": 1, "pods": {
            "u1": {"metadata": {"uid": "u1", "name": "web"}},
            "u2": {"metadata": {"uid": "u2"}, "spec": {"containers": "not a list"}}}}"#;
        std::fs::write(dir.path().join(FILE), text).unwrap();
        let kept = PodStore::new(dir.path()).load();
        assert_eq!(kept.keys().collect::<Vec<_>>(), ["u1"]);
        assert_eq!(kept["u1"].metadata.name, "web");
    }

    #[test]
    fn a_new_status_or_resource_version_is_not_written_a_new_spec_is() {
        let dir = tempfile::tempdir().unwrap();
        let store = PodStore::new(dir.path());
        let mut p = Pod::default();
        p.metadata.uid = "u1".into();
        p.metadata.resource_version = "1".into();
        let mut pods = BTreeMap::from([("u1".to_string(), p)]);
        assert!(store.save(&pods).unwrap());
        let web = pods.get_mut("u1").unwrap();
        web.metadata.resource_version = "2".into();
        web.status = Some(crate::api::PodStatus { message: "running".into(), ..Default::default() });
        assert!(!store.save(&pods).unwrap(), "only its status changed");
        pods.get_mut("u1").unwrap().metadata.labels.insert("app".into(), "web".into());
        assert!(store.save(&pods).unwrap());
        let kept = store.load();
        assert!(kept["u1"].status.is_none() && kept["u1"].metadata.labels["app"] == "web");
    }
}
