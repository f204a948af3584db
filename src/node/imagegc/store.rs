//! When each image was first seen and last used, kept in `<state_dir>/images.json` so an
//! agent restart does not make old images look new (kubelet keeps them in memory only,
//! and after its restart every image is as new as the restart). Written atomically after a
//! detection that changed them; a file that cannot be read is said and started afresh.

use super::ImageRecord;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The file's name in the state directory.
pub const FILE: &str = "images.json";
/// The most the file may hold (a record is ~300 bytes: thousands of images).
const MAX_BYTES: u64 = 4 << 20;

/// The records file.
#[derive(Clone, Debug)]
pub struct Store {
    path: PathBuf,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct File {
    version: u32,
    images: BTreeMap<String, ImageRecord>,
}

impl Store {
    /// The store in `state_dir`.
    pub fn new(state_dir: &Path) -> Store {
        Store { path: state_dir.join(FILE) }
    }

    /// The records kept; none when there is no file, or (said once) a file that cannot be
    /// read or is not one this version wrote.
    pub fn load(&self) -> BTreeMap<String, ImageRecord> {
        let text = match crate::base::inputfile::read_to_string(&self.path, MAX_BYTES) {
            Ok(t) => t,
            Err(crate::base::inputfile::InputFileError::Read(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return BTreeMap::new()
            }
            Err(e) => {
                log::warn!(
                    "imagegc: cannot read {}: {}; image ages start afresh",
                    self.path.display(),
                    crate::base::errors::Chain(&e)
                );
                return BTreeMap::new();
            }
        };
        match serde_json::from_slice::<File>(text.as_bytes()) {
            Ok(f) if f.version == 1 => f.images,
            Ok(f) => {
                log::warn!("imagegc: {} is version {}, not 1; image ages start afresh", self.path.display(), f.version);
                BTreeMap::new()
            }
            Err(e) => {
                log::warn!("imagegc: {} is damaged ({e}); image ages start afresh", self.path.display());
                BTreeMap::new()
            }
        }
    }

    /// Writes `records` atomically.
    pub fn save(&self, records: &BTreeMap<String, ImageRecord>) -> std::io::Result<()> {
        let file = File { version: 1, images: records.clone() };
        crate::base::state_files::write_json(&self.path, &file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    #[test]
    fn records_survive_a_restart_and_a_damaged_file_starts_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        assert!(store.load().is_empty());
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let r = ImageRecord {
            id: "sha256:a".into(),
            tags: vec!["a:1".into()],
            size: 7,
            pinned: false,
            first_detected: t,
            last_used: t + Duration::from_secs(60),
        };
        let records = BTreeMap::from([(r.id.clone(), r)]);
        store.save(&records).unwrap();
        assert_eq!(Store::new(dir.path()).load(), records);
        std::fs::write(dir.path().join(FILE), "{not json").unwrap();
        assert!(store.load().is_empty());
    }
}
