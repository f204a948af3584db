//! Termination messages (kubelet's `getTerminationMessage`): what an exited container
//! wrote to its `terminationMessagePath` (at most 4 KiB), or, under
//! `FallbackToLogsOnError`, when it failed and wrote nothing there, the end of its log (its
//! last 80 lines, at most 2 KiB). The message follows the runtime's own, after `: `.

use crate::node::podlogs::{print_logs, LogOptions};
use crate::node::runtime::{ContainerConfig, ContainerInfo, ContainerState};
use std::io::Read;

/// The most read from a termination message file (kubelet's).
pub const MAX_MESSAGE_BYTES: usize = 4096;
/// The log lines a fallback message is taken from, and its most bytes (kubelet's).
pub const FALLBACK_LOG_LINES: u64 = 80;
pub const FALLBACK_LOG_BYTES: usize = 2048;

/// The termination message from the file's contents `file` (already bounded), the exit
/// code and the policy; `log_tail` is asked only when the log is the message.
pub fn termination_message(
    file: &[u8],
    exit_code: i32,
    fallback_to_logs: bool,
    log_tail: impl FnOnce() -> Vec<u8>,
) -> String {
    if !file.is_empty() || !fallback_to_logs || exit_code == 0 {
        return String::from_utf8_lossy(&file[..file.len().min(MAX_MESSAGE_BYTES)]).into_owned();
    }
    let tail = log_tail();
    let mut start = tail.len().saturating_sub(FALLBACK_LOG_BYTES);
    // Not in the middle of a character.
    while start < tail.len() && (tail[start] & 0xC0) == 0x80 {
        start += 1;
    }
    String::from_utf8_lossy(&tail[start..]).into_owned()
}

/// The runtime's message and the termination message, as kubelet joins them.
pub fn joined(runtime: &str, termination: &str) -> String {
    match (runtime.is_empty(), termination.is_empty()) {
        (_, true) => runtime.to_string(),
        (true, false) => termination.to_string(),
        (false, false) => format!("{runtime}: {termination}"),
    }
}

/// Reads the termination message of exited container `info` (nothing for one without a
/// termination message file). A file that cannot be read reads as empty, and is said.
pub fn read(info: &ContainerInfo) -> String {
    let Some(t) = info.config.termination_log.as_ref() else { return String::new() };
    let mut file = Vec::new();
    if let Err(e) =
        std::fs::File::open(&t.host_path).and_then(|f| f.take(MAX_MESSAGE_BYTES as u64).read_to_end(&mut file))
    {
        if e.kind() != std::io::ErrorKind::NotFound {
            log::warn!(
                "pods: container {}: cannot read its termination message {}: {e}",
                info.id,
                t.host_path.display()
            );
        }
    }
    termination_message(&file, info.exit_code, t.fallback_to_logs, || log_tail(&info.config))
}

/// The last `FALLBACK_LOG_LINES` lines of the container's log, as `ferrolet logs --tail`
/// prints them.
fn log_tail(cfg: &ContainerConfig) -> Vec<u8> {
    let mut out = Vec::new();
    let opts = LogOptions { tail: Some(FALLBACK_LOG_LINES), timestamps: false, since: None };
    if let Err(e) = print_logs(&cfg.log_path, opts, &mut out, None) {
        log::debug!(
            "pods: cannot read the log {} for a termination message: {}",
            cfg.log_path.display(),
            crate::base::errors::Chain(&e)
        );
    }
    out.truncate(out.len().min(FALLBACK_LOG_LINES as usize * 16 * 1024));
    out
}

/// Whether `info` is an exit a termination message is read for.
pub fn wants_message(info: &ContainerInfo) -> bool {
    info.state == ContainerState::Exited && info.config.termination_log.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_the_message_and_the_log_only_for_a_failure_that_wrote_nothing() {
        let tail = || b"line 1\nline 2\n".to_vec();
        assert_eq!(termination_message(b"bye", 1, true, || panic!("not asked")), "bye");
        assert_eq!(termination_message(b"", 1, true, tail), "line 1\nline 2\n");
        assert_eq!(termination_message(b"", 0, true, || panic!("not asked")), "", "a success has no fallback");
        assert_eq!(termination_message(b"", 1, false, || panic!("not asked")), "");
        let long = vec![b'x'; 5000];
        assert_eq!(termination_message(&long, 0, false, Vec::new).len(), MAX_MESSAGE_BYTES);
        let mut log = "é".repeat(1500).into_bytes();
        log.extend_from_slice(b"end");
        let m = termination_message(b"", 2, true, || log);
        assert!(m.len() <= FALLBACK_LOG_BYTES && m.ends_with("end") && m.starts_with('é'), "{m}");
    }

    #[test]
    fn the_runtimes_message_comes_first() {
        assert_eq!(joined("", "bye"), "bye");
        assert_eq!(joined("exit 3", "bye"), "exit 3: bye");
        assert_eq!(joined("exit 3", ""), "exit 3");
    }
}
