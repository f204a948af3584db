//! kubelet's `kernelMemcgNotification` on cgroup v1: the kernel wakes `fl-memcg` the moment a
//! memory cgroup's usage crosses a threshold (`cgroup.event_control` with an eventfd over
//! `memory.usage_in_bytes`), so the eviction manager acts on a memory spike at once instead
//! of at its next 10 s collection. The thresholds are set from each collection
//! (`signals::memcg_usage_threshold`): usage = working set + inactive file, so the kernel's
//! usage threshold is the working set the signal's threshold allows plus the inactive file
//! pages now.
//! cgroup v2 has no usage threshold notification; there the eviction manager's 1 s memory
//! check is what reacts between collections.

use crate::base::manager::{Exit, Health, StopSignal, StopTimeout, Worker};
use crate::base::wake::{self, Drained, WakeReceiver, Waker};
use parking_lot::Mutex;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The thread's name.
pub const THREAD: &str = "fl-memcg";

/// The most thresholds watched at once (the node's and `kubepods`').
const MAX_THRESHOLDS: usize = 4;

/// One registered threshold: the eventfd the kernel signals, and the usage file it watches
/// (held open while registered). Dropping it unregisters it.
pub struct Armed {
    event: File,
    _usage: File,
}

impl Armed {
    /// Registers `bytes` on the memory cgroup at `dir`.
    pub fn arm(dir: &Path, bytes: u64) -> io::Result<Armed> {
        let usage = File::open(dir.join("memory.usage_in_bytes"))?;
        // SAFETY: eventfd returns a new fd or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the fd was just created and is owned by nobody else.
        let event = unsafe { File::from_raw_fd(fd) };
        let line = format!("{} {} {bytes}", event.as_raw_fd(), usage.as_raw_fd());
        OpenOptions::new().write(true).open(dir.join("cgroup.event_control"))?.write_all(line.as_bytes())?;
        Ok(Armed { event, _usage: usage })
    }

    /// Reads the counter, so the next poll waits again; whether the kernel had signalled.
    pub fn take(&self) -> bool {
        let mut buf = [0u8; 8];
        matches!((&self.event).read(&mut buf), Ok(8))
    }
}

/// The running `fl-memcg`: `set` replaces what it watches.
pub struct Notifier {
    thresholds: Thresholds,
    worker: Worker,
}

/// (memory cgroup directory, usage threshold) pairs to watch, taken by the thread when set.
type Wanted = Arc<Mutex<Option<Vec<(PathBuf, u64)>>>>;

/// Sets what `fl-memcg` watches (a clone goes to the eviction manager).
#[derive(Clone)]
pub struct Thresholds {
    want: Wanted,
    wake: Waker,
}

impl Thresholds {
    /// Watches these (memory cgroup directory, usage threshold) pairs from now on.
    pub fn set(&self, thresholds: Vec<(PathBuf, u64)>) {
        *self.want.lock() = Some(thresholds);
        self.wake.wake();
    }
}

impl Notifier {
    /// Starts the thread; `crossed` runs each time a threshold is crossed (either way).
    pub fn start(health: &Health, crossed: impl Fn() + Send + 'static) -> io::Result<Notifier> {
        let (wake_rx, wake) = wake::pair()?;
        let want: Wanted = Arc::new(Mutex::new(None));
        let shared = want.clone();
        let worker = Worker::spawn(THREAD, health, move |stop| watch(&shared, &wake_rx, &stop, &crossed))?;
        Ok(Notifier { thresholds: Thresholds { want, wake }, worker })
    }

    /// What sets the thresholds it watches.
    pub fn thresholds(&self) -> Thresholds {
        self.thresholds.clone()
    }

    /// Stops the thread within `timeout`.
    pub fn stop(mut self, timeout: Duration) -> Result<(), StopTimeout> {
        self.worker.signal_stop();
        self.thresholds.wake.wake();
        self.worker.join(Instant::now() + timeout).map_err(|e| StopTimeout { timeout, ..e })
    }
}

fn watch(
    want: &Mutex<Option<Vec<(PathBuf, u64)>>>,
    wake_rx: &WakeReceiver,
    stop: &StopSignal,
    crossed: &dyn Fn(),
) -> Exit {
    let mut armed: Vec<(PathBuf, u64, Armed)> = Vec::new();
    let mut failed: Option<String> = None;
    loop {
        if stop.is_stopped() {
            return Exit::Done;
        }
        if wake_rx.drain() == Drained::Closed {
            return Exit::Done;
        }
        let new = want.lock().take().filter(|new| !same(&armed, new));
        if let Some(new) = new {
            // The new ones first: a crossing between the two sets is not missed.
            let mut next = Vec::new();
            for (dir, bytes) in new.into_iter().take(MAX_THRESHOLDS) {
                match Armed::arm(&dir, bytes) {
                    Ok(a) => {
                        log::debug!(
                            "eviction: memory threshold notification armed on {} at {bytes} bytes",
                            dir.display()
                        );
                        next.push((dir, bytes, a))
                    }
                    Err(e) => {
                        let why = format!("{}: {e}", dir.display());
                        if failed.as_deref() != Some(&why) {
                            log::warn!("eviction: cannot set a memory threshold notification on {why}; memory is checked every second instead");
                        }
                        failed = Some(why);
                    }
                }
            }
            armed = next;
        }
        let mut fds = vec![wake_rx.as_raw_fd()];
        fds.extend(armed.iter().map(|(_, _, a)| a.event.as_raw_fd()));
        let ready = match crate::base::fds::poll_readable(&fds, None) {
            Ok(r) => r,
            Err(e) => {
                log::error!("eviction: polling the memory threshold notifications: {e}");
                return Exit::Failed;
            }
        };
        if armed.iter().zip(&ready[1..]).filter(|(_, r)| **r != 0).fold(false, |any, ((_, _, a), _)| a.take() || any) {
            crossed();
        }
    }
}

/// Whether `new` is what is armed, give or take 1 % (at least 4 MiB) of each level: the
/// levels move with the page cache at every collection, and re-arming each time would open
/// and close three files every 10 s for nothing.
fn same(armed: &[(PathBuf, u64, Armed)], new: &[(PathBuf, u64)]) -> bool {
    armed.len() == new.len()
        && armed.iter().zip(new).all(|((dir, level, _), (new_dir, new_level))| {
            dir == new_dir && level.abs_diff(*new_level) <= (*level / 100).max(4 << 20)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arming_a_missing_cgroup_fails_naming_nothing_but_the_io_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Armed::arm(&dir.path().join("nope"), 1).is_err());
    }

    #[test]
    fn the_kernel_wakes_the_notifier_when_a_cgroups_usage_crosses_the_threshold() {
        let root = Path::new("/sys/fs/cgroup/memory");
        let dir = root.join(format!("ferrolet-memcg-test-{}", std::process::id()));
        if std::fs::create_dir(&dir).is_err() {
            eprintln!("SKIP: cannot make a v1 memory cgroup under {}", root.display());
            return;
        }
        let health = Health::default();
        let (tx, rx) = crossbeam_channel::unbounded();
        let notifier = Notifier::start(&health, move || {
            let _ = tx.send(());
        })
        .unwrap();
        let used: u64 = std::fs::read_to_string(dir.join("memory.usage_in_bytes")).unwrap().trim().parse().unwrap();
        notifier.thresholds().set(vec![(dir.clone(), used + (16 << 20))]);
        std::thread::sleep(Duration::from_millis(100));
        assert!(rx.try_recv().is_err(), "nothing crossed yet");
        // A child in the cgroup that fills 32 MiB of page cache on a tmpfs.
        let file = format!("/dev/shm/ferrolet-memcg-test-{}", std::process::id());
        let script =
            format!("echo $$ > {}/cgroup.procs && head -c 33554432 /dev/zero > {file}; rm -f {file}", dir.display());
        let status = std::process::Command::new("sh").arg("-c").arg(script).status().unwrap();
        assert!(status.success());
        let got = rx.recv_timeout(Duration::from_secs(5));
        notifier.stop(Duration::from_secs(2)).unwrap();
        let _ = std::fs::write(dir.join("memory.force_empty"), "0");
        std::fs::remove_dir(&dir).unwrap();
        assert!(got.is_ok(), "the crossing woke the notifier");
    }
}
