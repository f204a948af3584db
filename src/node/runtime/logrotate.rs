//! Log rotation shared by both runtimes: a container log `<name>.log` is renamed to
//! `<name>.log.<YYYYMMDD-HHMMSS.nanos>` (sortable and unique) and the oldest rotations
//! beyond `logs.max_files` are deleted. The process runtime's shim rotates as it writes; the
//! CRI runtime renames and asks the runtime to reopen (kubelet's container log manager).
//! `ferrolet logs` reads the rotations back in order.

use crate::base::timefmt::rfc3339_nano;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Where log file `path` is rotated to at `now`: `<path>.<YYYYMMDD-HHMMSS.nanos>`, sortable
/// and unique (both runtimes rotate so; `ferrolet logs` reads them back in order).
pub fn rotation_path(path: &Path, now: SystemTime) -> PathBuf {
    // `2024-05-01T10:00:00.123456789Z` -> `20240501-100000.123456789`.
    let stamp: String = rfc3339_nano(now).replace(['-', ':'], "").replace('T', "-").trim_end_matches('Z').to_string();
    PathBuf::from(format!("{}.{stamp}", path.display()))
}

/// What a running container's log needs, from its size on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogAction {
    /// Past `max_size`: rename it away and have the runtime reopen it.
    Rotate,
    /// Gone (deleted by hand, by a cleaner): the runtime writes into a file nobody can
    /// read until it reopens, as kubelet has it do.
    Reopen,
}

/// The action for a running container's log of `size` bytes (`None`: no such file), with
/// logs rotated past `max_size`; `None` when it needs nothing.
pub fn log_action(size: Option<u64>, max_size: u64) -> Option<LogAction> {
    match size {
        None => Some(LogAction::Reopen),
        Some(n) if n > max_size => Some(LogAction::Rotate),
        Some(_) => None,
    }
}

/// Deletes the oldest rotated files of log file `path` beyond `max_files` (the live file
/// counts as one).
pub fn prune_rotated(path: &Path, max_files: u32) {
    let mut old = rotated_files(path);
    let keep = max_files.saturating_sub(1) as usize;
    if old.len() > keep {
        old.sort();
        for p in &old[..old.len() - keep] {
            let _ = fs::remove_file(p);
        }
    }
}

/// The rotated siblings of a log file (`<path>.<stamp>`).
pub fn rotated_files(path: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Vec::new();
    };
    let prefix = format!("{}.", name.to_string_lossy());
    fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_is_rotated_past_its_size_and_reopened_when_gone() {
        for (size, want) in
            [(Some(0), None), (Some(10), None), (Some(11), Some(LogAction::Rotate)), (None, Some(LogAction::Reopen))]
        {
            assert_eq!(log_action(size, 10), want, "{size:?}");
        }
    }
}
