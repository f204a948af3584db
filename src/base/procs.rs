//! Processes and signals: identity by pid and start time (so a reused pid is never signalled), process groups, limits.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};

/// Linux's `MAX_ARG_STRLEN` (32 pages): the longest argument or `NAME=value` environment
/// string `execve` accepts, terminating NUL included. Validation and the runtime both check it.
pub const MAX_ARG_STRLEN: usize = 32 * 4096;

/// The start time of a process in clock ticks since boot (field 22 of /proc/<pid>/stat),
/// which together with the pid identifies a process across pid reuse.
pub fn process_start_ticks(pid: i32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses; fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// True when a process `pid` exists (signal 0).
pub fn pid_exists(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    pid > 0 && (unsafe { libc::kill(pid, 0) } == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// True when the process `pid` exists and, if `start_ticks` is given, is the same process.
pub fn process_alive(pid: i32, start_ticks: Option<u64>) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let exists = unsafe { libc::kill(pid, 0) } == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    if !exists {
        return false;
    }
    match start_ticks {
        Some(t) => process_start_ticks(pid) == Some(t) && !is_zombie(pid),
        None => !is_zombie(pid),
    }
}

fn is_zombie(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with('Z')))
        .unwrap_or(false)
}

/// Sends `sig` to the process group `pgid`; a group that no longer exists is not an error.
/// Only for a group whose leader is the caller's own unreaped child (so its pid cannot have
/// been reused); any other group goes through `kill_group_verified`.
pub fn kill_group(pgid: i32, sig: i32) -> io::Result<()> {
    if pgid <= 1 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("refusing to signal process group {pgid}")));
    }
    // SAFETY: kill has no memory-safety preconditions; a negative pid names a group.
    if unsafe { libc::kill(-pgid, sig) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ESRCH) {
        Ok(())
    } else {
        Err(e)
    }
}

/// Sends `sig` to process `pid` only if it is still the process that started at
/// `start_ticks` (field 22 of /proc/PID/stat). The process is pinned with a pidfd before
/// its start time is checked, so a pid reused after the check cannot be hit either.
/// Returns false (and signals nothing) when that process is gone.
pub fn signal_verified(pid: i32, start_ticks: u64, sig: i32) -> io::Result<bool> {
    if pid <= 1 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("refusing to signal process {pid}")));
    }
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::ESRCH) { Ok(false) } else { Err(e) };
    }
    // SAFETY: the syscall returned a new fd that nothing else owns.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as RawFd) };
    if process_start_ticks(pid) != Some(start_ticks) || is_zombie(pid) {
        return Ok(false);
    }
    // SAFETY: pidfd_send_signal on a pidfd we own, with no siginfo.
    let r = unsafe {
        libc::syscall(libc::SYS_pidfd_send_signal, fd.as_raw_fd(), sig, std::ptr::null::<libc::siginfo_t>(), 0)
    };
    if r == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ESRCH) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Sends `sig` to the process group led by `pgid` only if its leader is still the process
/// that started at `start_ticks` (a group outlives nothing of ours once its leader's pid is
/// free to be reused). Returns false (and signals nothing) when the leader is gone.
pub fn kill_group_verified(pgid: i32, start_ticks: u64, sig: i32) -> io::Result<bool> {
    if pgid <= 1 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("refusing to signal process group {pgid}")));
    }
    if !process_alive(pgid, Some(start_ticks)) {
        return Ok(false);
    }
    kill_group(pgid, sig).map(|()| true)
}

/// Returns the allocator's free pages to the kernel (glibc keeps them in its arenas; musl's
/// allocator gives them back by itself): after the memory of a large input that was read
/// and dropped.
pub fn release_freed_memory() {
    // SAFETY: malloc_trim only returns free pages of the allocator's arenas to the kernel.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The process's soft limit of open files (1024, the usual default, when it cannot be read).
pub fn open_files_limit() -> u64 {
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } == 0 {
        rl.rlim_cur
    } else {
        1024
    }
}

/// `CAP_SYS_RESOURCE`, which lowering an `oom_score_adj` below what a process inherited needs.
pub const CAP_SYS_RESOURCE: u32 = 24;

/// Whether this process has capability `cap` in its effective set (`CapEff` of
/// `/proc/self/status`); false when it cannot be read.
pub fn has_capability(cap: u32) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|mask| cap < 64 && mask & (1 << cap) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_identified() {
        let me = std::process::id() as i32;
        let ticks = process_start_ticks(me);
        assert!(ticks.is_some());
        assert!(process_alive(me, ticks));
        assert!(!process_alive(me, ticks.map(|t| t + 1)));
    }
}
