//! The last pod set the apiserver gave this node, kept in `<state_dir>/apiserver-pods.json`
//! (edge autonomy): an agent restarted while the apiserver cannot be reached runs these
//! pods until it can list again, instead of stopping every pod the cluster placed here.
//! Written atomically when the set changes; a file that cannot be read is said and ignored.

use crate::api::Pod;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The file's name in the state directory.
pub const FILE: &str = "apiserver-pods.json";
/// The most it may hold.
const MAX_BYTES: u64 = 32 << 20;

/// The kept pod set.
#[derive(Clone, Debug)]
pub struct PodStore {
    path: PathBuf,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct File {
    version: u32,
    /// Where the watch stood when they were kept.
    resource_version: String,
    pods: BTreeMap<String, Pod>,
}

impl PodStore {
    /// The store in `state_dir`.
    pub fn new(state_dir: &Path) -> PodStore {
        PodStore { path: state_dir.join(FILE) }
    }

    /// The pods kept, by uid, and the resourceVersion they were at; empty without a file.
    pub fn load(&self) -> (BTreeMap<String, Pod>, String) {
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
        match serde_json::from_str::<File>(&text) {
            Ok(f) if f.version == 1 => (f.pods, f.resource_version),
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

    /// Keeps `pods` at `resource_version`, atomically.
    pub fn save(&self, pods: &BTreeMap<String, Pod>, resource_version: &str) -> std::io::Result<()> {
        let file = File { version: 1, resource_version: resource_version.into(), pods: pods.clone() };
        crate::util::write_json(&self.path, &file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pod_set_survives_a_restart_and_damage_is_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let store = PodStore::new(dir.path());
        assert!(store.load().0.is_empty());
        let mut p = Pod::default();
        p.metadata.uid = "u1".into();
        p.metadata.name = "web".into();
        let pods = BTreeMap::from([("u1".to_string(), p)]);
        store.save(&pods, "42").unwrap();
        assert_eq!(PodStore::new(dir.path()).load(), (pods, "42".to_string()));
        std::fs::write(dir.path().join(FILE), "[").unwrap();
        assert!(store.load().0.is_empty());
    }
}
