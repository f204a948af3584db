//! The three probe results stores (kubelet's `prober/results`): liveness, readiness and
//! startup, keyed by container instance. Readiness and startup are saved in the state
//! directory on every change, so a Ready container stays Ready across an agent restart.

use super::{ProbeResult, ProbeType};
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// What failed in the prober (a failed probe is a result, not one of these).
#[derive(Debug, thiserror::Error)]
pub enum ProberError {
    /// The saved probe results could not be read or parsed.
    #[error("cannot read saved probe results {path}")]
    ReadResults {
        /// The results file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An unreadable results file could not be moved aside.
    #[error("cannot move {path} aside")]
    SetAside {
        /// The results file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The probe results could not be saved.
    #[error("cannot save probe results to {path}")]
    SaveResults {
        /// The results file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The three results stores, keyed by container id; survives agent restarts for
/// readiness and startup (so a Ready container stays Ready across `kill -9` of the agent).
#[derive(Clone, Default)]
pub struct ProbeResults {
    inner: Arc<RwLock<HashMap<String, [Option<ProbeResult>; 3]>>>,
    path: Option<PathBuf>,
    /// Saving failed last time: the failure was logged once, the recovery will be too.
    save_failing: Arc<std::sync::atomic::AtomicBool>,
}

#[derive(Serialize, Deserialize)]
struct Persisted {
    kind: ProbeType,
    container_id: String,
    result: ProbeResult,
}

fn slot(kind: ProbeType) -> usize {
    kind as usize
}

impl ProbeResults {
    /// Results kept in `path` (loaded now, rewritten atomically on every change). An
    /// unreadable file is reported with its cause and moved aside to `<path>.corrupt` (so
    /// the next save does not destroy it), and the prober starts without saved results.
    pub fn persistent(path: PathBuf) -> ProbeResults {
        let loaded: Vec<Persisted> = match crate::base::state_files::read_json(&path) {
            Ok(v) => v,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => {
                let e = ProberError::ReadResults { path: path.clone(), source };
                let aside = PathBuf::from(format!("{}.corrupt", path.display()));
                let kept = match std::fs::rename(&path, &aside) {
                    Ok(()) => format!("kept as {}", aside.display()),
                    Err(source) => {
                        crate::base::errors::Chain(&ProberError::SetAside { path: path.clone(), source }).to_string()
                    }
                };
                log::warn!(
                    "prober: {}; readiness and startup start over from their initial values ({kept})",
                    crate::base::errors::Chain(&e)
                );
                Vec::new()
            }
        };
        let mut map: HashMap<String, [Option<ProbeResult>; 3]> = HashMap::new();
        for p in loaded {
            map.entry(p.container_id).or_default()[slot(p.kind)] = Some(p.result);
        }
        ProbeResults { inner: Arc::new(RwLock::new(map)), path: Some(path), save_failing: Arc::default() }
    }

    /// A result, if any.
    pub fn get(&self, kind: ProbeType, container_id: &str) -> Option<ProbeResult> {
        self.inner.read().get(container_id).and_then(|r| r[slot(kind)])
    }

    /// Records a result; true when it changed.
    pub fn set(&self, kind: ProbeType, container_id: &str, result: ProbeResult) -> bool {
        let changed = {
            let mut map = self.inner.write();
            let old = match map.get_mut(container_id) {
                Some(r) => r[slot(kind)].replace(result),
                None => {
                    map.entry(container_id.to_string()).or_default()[slot(kind)] = Some(result);
                    None
                }
            };
            old != Some(result)
        };
        if changed && kind != ProbeType::Liveness {
            self.persist();
        }
        changed
    }

    /// Forgets a result (no update is published, as upstream).
    pub fn remove(&self, kind: ProbeType, container_id: &str) {
        let removed = {
            let mut map = self.inner.write();
            let removed = map.get_mut(container_id).and_then(|r| r[slot(kind)].take()).is_some();
            if map.get(container_id).is_some_and(|r| r.iter().all(Option::is_none)) {
                map.remove(container_id);
            }
            removed
        };
        if removed && kind != ProbeType::Liveness {
            self.persist();
        }
    }

    fn persist(&self) {
        let Some(path) = &self.path else { return };
        let list: Vec<Persisted> = self
            .inner
            .read()
            .iter()
            .flat_map(|(id, r)| {
                [ProbeType::Readiness, ProbeType::Startup]
                    .into_iter()
                    .filter_map(|k| r[slot(k)].map(|result| Persisted { kind: k, container_id: id.clone(), result }))
            })
            .collect();
        use std::sync::atomic::Ordering;
        // One line when saving starts failing (a full disk would fail every change) and one
        // when it works again.
        match crate::base::state_files::write_json(path, &list) {
            Err(source) if !self.save_failing.swap(true, Ordering::Relaxed) => {
                let e = ProberError::SaveResults { path: path.clone(), source };
                log::warn!("prober: {} (reported once until a save succeeds)", crate::base::errors::Chain(&e));
            }
            Ok(()) if self.save_failing.swap(false, Ordering::Relaxed) => {
                log::info!("prober: probe results saved to {} again", path.display());
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_saved_results_are_set_aside_and_the_store_starts_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe-results.json");
        std::fs::write(&path, "{ not json").unwrap();
        let r = ProbeResults::persistent(path.clone());
        assert_eq!(r.get(ProbeType::Readiness, "c1"), None);
        assert!(!path.exists());
        let aside = dir.path().join("probe-results.json.corrupt");
        assert_eq!(std::fs::read_to_string(&aside).unwrap(), "{ not json", "kept for a person to look at");
        r.set(ProbeType::Readiness, "c1", ProbeResult::Success);
        let again = ProbeResults::persistent(path);
        assert_eq!(again.get(ProbeType::Readiness, "c1"), Some(ProbeResult::Success), "saving works again");
    }
}
