//! The exec reaper: one thread (`fl-probe-exec`) watches the command of every running exec
//! probe, polling all their output pipes at once and killing each at its deadline. A probe
//! thread only starts the command (a fork, about a millisecond) and hands it over, so an
//! exec probe that hangs until its timeout holds no probe thread and delays no other probe.

use super::job::{Done, Report};
use super::probes::{exec_outcome, Outcome};
use crate::base::manager::{Exit, StopSignal};
use crate::base::manager::{WorkerSet, WorkerSetError};
use crate::base::wake::{self, Drained, WakeReceiver, Waker};
use crate::node::runtime::exec::{ExecProcess, EXIT_CHECK};
use crossbeam_channel::{unbounded, Receiver, Sender, TryRecvError};
use parking_lot::Mutex;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// The exec reaper could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ReaperError {
    /// Its wake pipe could not be made.
    #[error("cannot make the exec reaper's wake pipe")]
    MakeWakePipe {
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Its thread could not be started.
    #[error(transparent)]
    StartThread(#[from] WorkerSetError),
}

/// A running exec probe command and what its report needs.
pub struct Watch<K> {
    /// The worker key.
    pub key: K,
    /// The command.
    pub process: ExecProcess,
    /// Its argv (for the timeout message).
    pub command: Vec<String>,
    /// When it is killed.
    pub deadline: Instant,
    /// When the probe started.
    pub started: Instant,
    /// When the worker was due.
    pub scheduled: Instant,
}

/// What to do with a watched command now.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Its output is closed and it has exited: report its result.
    Finished,
    /// It ran past its deadline: kill its process group, report a timeout.
    Kill,
    /// Keep watching.
    Watch,
}

fn step(finished: bool, now: Instant, deadline: Instant) -> Step {
    if finished {
        Step::Finished
    } else if now >= deadline {
        Step::Kill
    } else {
        Step::Watch
    }
}

/// How long to poll: until the nearest deadline, at most `EXIT_CHECK` while a command that
/// closed its output has not exited yet (an exit has no fd to poll), without limit when
/// nothing is watched (a new command or the stop wakes the poll).
fn poll_timeout(now: Instant, deadlines: impl Iterator<Item = Instant>, awaiting_exit: bool) -> Option<Duration> {
    let nearest = deadlines.min().map(|d| d.saturating_duration_since(now));
    match (nearest, awaiting_exit) {
        (Some(d), true) => Some(d.min(EXIT_CHECK)),
        (None, true) => Some(EXIT_CHECK),
        (d, false) => d,
    }
}

/// The handle: hands commands to the thread. Its thread lives in the prober's `WorkerSet`,
/// which stops and joins it; `close` (or dropping the handle) ends it too, killing what it
/// still watches.
pub struct ExecReaper<K> {
    inner: Mutex<Option<Running<K>>>,
    /// Where a command is reported when the thread is gone (it ended on an error).
    done: Report<K>,
}

/// The thread's command channel and its wake-up.
type Running<K> = (Sender<Watch<K>>, Waker);

impl<K: Send + 'static> ExecReaper<K> {
    /// Starts the thread (`fl-probe-exec`) in `threads`; outcomes go to `done`, as from a
    /// probe thread.
    pub fn start(done: Report<K>, threads: &WorkerSet) -> Result<ExecReaper<K>, ReaperError> {
        let (wake_rx, wake) = wake::pair().map_err(|source| ReaperError::MakeWakePipe { source })?;
        let (tx, rx) = unbounded();
        let report = done.clone();
        let on_stop = wake.clone();
        threads.spawn_with("fl-probe-exec", Some(Box::new(move || on_stop.wake())), move |stop| {
            run(rx, wake_rx, report, stop)
        })?;
        Ok(ExecReaper { inner: Mutex::new(Some((tx, wake))), done })
    }

    /// Watches a started command until it finishes or its deadline passes (after `close`,
    /// the command is killed at once).
    pub fn watch(&self, w: Watch<K>) {
        let sent = match &*self.inner.lock() {
            Some((tx, wake)) => tx.send(w).map(|()| wake.wake()),
            None => return, // closed: the command is killed as it is dropped
        };
        // The thread ended on an error: kill the command and report it, or its worker
        // would wait for ever for a result.
        if let Err(crossbeam_channel::SendError(w)) = sent {
            abandon(&self.done, w);
        }
    }
}

impl<K> ExecReaper<K> {
    /// Ends the thread without waiting for it (its `WorkerSet` joins it): the closed
    /// channel and the wake-up make it kill what it still watches and return.
    pub fn close(&self) {
        let Some((tx, wake)) = self.inner.lock().take() else { return };
        drop(tx);
        wake.wake();
    }
}

impl<K> Drop for ExecReaper<K> {
    fn drop(&mut self) {
        self.close();
    }
}

/// Kills a command the thread can no longer watch and reports a prober error for it.
fn abandon<K>(done: &Report<K>, w: Watch<K>) -> bool {
    let (key, started, scheduled) = (w.key, w.started, w.scheduled);
    drop(w.process); // kills its process group and reaps it
    let outcome = Outcome::Error("the exec probe reaper has stopped".into());
    done(Done { key, outcome, started, scheduled, took: started.elapsed() })
}

fn report<K>(done: &Report<K>, w: Watch<K>, step: Step) -> bool {
    let (key, command, started, scheduled) = (w.key, w.command, w.started, w.scheduled);
    let outcome = match step {
        Step::Kill => exec_outcome(&command, w.process.kill()),
        _ => match w.process.result() {
            Ok(r) => exec_outcome(&command, r),
            Err(e) => Outcome::Error(crate::base::errors::Chain(&e).to_string()),
        },
    };
    done(Done { key, outcome, started, scheduled, took: started.elapsed() })
}

/// The thread: settle what is done or overdue, then poll every open pipe and the wake pipe.
/// It ends when stopped (signal, then a wake-up), when the handle is closed, or when nobody
/// listens any more; always `Exit::Done`, since each of those is an orderly end.
fn run<K>(rx: Receiver<Watch<K>>, wake: WakeReceiver, done: Report<K>, stop: StopSignal) -> Exit {
    let mut watched: Vec<Watch<K>> = Vec::new();
    let mut listening = true;
    'outer: loop {
        loop {
            match rx.try_recv() {
                Ok(w) => watched.push(w),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => break 'outer,
            }
        }
        let now = Instant::now();
        let mut i = 0;
        while i < watched.len() {
            let w = &mut watched[i];
            w.process.read_output();
            match step(w.process.finished(), now, w.deadline) {
                Step::Watch => i += 1,
                s => {
                    if !report(&done, watched.swap_remove(i), s) {
                        listening = false;
                        break 'outer; // nobody listens any more
                    }
                }
            }
        }
        let awaiting_exit = watched.iter().any(|w| w.process.output_closed());
        let timeout = poll_timeout(Instant::now(), watched.iter().map(|w| w.deadline), awaiting_exit);
        let mut fds = vec![wake.as_raw_fd()];
        fds.extend(watched.iter().flat_map(|w| w.process.fds()));
        match crate::base::fds::poll_readable(&fds, timeout) {
            // Watching --stop signal, woken--> Killing what is left.
            Ok(_) if stop.is_stopped() => break,
            Ok(ready) if ready[0] != 0 && wake.drain() == Drained::Closed => break,
            Ok(_) => {}
            Err(e) => {
                // Not expected (EINTR is handled); stop rather than spin, killing the commands.
                log::error!("prober: exec reaper: poll failed: {e}");
                break;
            }
        }
    }
    // The rest are killed (ExecProcess::drop); each is reported, so that after an error
    // no worker waits for ever for its result (a stopped prober ignores the reports).
    // From now on `watch` reports what it is given itself (only a command sent between
    // these two lines goes unreported, killed with the channel).
    watched.extend(rx.try_iter());
    drop(rx);
    for w in watched {
        if !listening || !abandon(&done, w) {
            listening = false;
        }
    }
    Exit::Done
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// The results a test's report collected.
    type Got = Arc<Mutex<Vec<Done<u32>>>>;

    /// A report that collects every result.
    fn collector() -> (Got, Report<u32>) {
        let got: Got = Default::default();
        let sink = got.clone();
        (
            got,
            Arc::new(move |d| {
                sink.lock().push(d);
                true
            }),
        )
    }

    /// Hands `reaper` a `sleep 30` with a 60 s deadline as worker `key`; returns its pid.
    fn watch_sleep(reaper: &ExecReaper<u32>, key: u32) -> i32 {
        use std::os::unix::process::CommandExt;
        use std::process::{Command, Stdio};
        let child = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let process = ExecProcess::new(child).unwrap();
        let now = Instant::now();
        let deadline = now + Duration::from_secs(60);
        reaper.watch(Watch { key, process, command: vec!["sleep".into()], deadline, started: now, scheduled: now });
        pid
    }

    #[test]
    fn a_command_is_reported_when_done_and_killed_at_its_deadline() {
        let t0 = Instant::now();
        let deadline = t0 + Duration::from_secs(1);
        assert_eq!(step(true, t0, deadline), Step::Finished);
        assert_eq!(step(true, deadline, deadline), Step::Finished, "a finished command is never killed");
        assert_eq!(step(false, t0, deadline), Step::Watch);
        assert_eq!(step(false, deadline, deadline), Step::Kill);
    }

    #[test]
    fn a_command_handed_over_after_the_thread_ended_is_killed_and_reported() {
        let (got, done) = collector();
        // What is left once the thread has ended on an error: its receiver is gone.
        let (tx, rx) = unbounded();
        drop(rx);
        let (_wake_rx, wake) = wake::pair().unwrap();
        let reaper = ExecReaper { inner: Mutex::new(Some((tx, wake))), done };
        let pid = watch_sleep(&reaper, 7);
        let got = got.lock();
        assert_eq!(got.len(), 1, "its worker gets a result");
        assert_eq!(got[0].key, 7);
        assert_eq!(got[0].outcome, Outcome::Error("the exec probe reaper has stopped".into()));
        // SAFETY: signal 0 only checks that the pid exists.
        assert_ne!(unsafe { libc::kill(pid, 0) }, 0, "the command was killed and reaped");
    }

    #[test]
    fn the_poll_ends_at_the_nearest_deadline_and_checks_exits_often() {
        let t0 = Instant::now();
        let d = [t0 + Duration::from_secs(5), t0 + Duration::from_secs(2)];
        assert_eq!(poll_timeout(t0, d.into_iter(), false), Some(Duration::from_secs(2)));
        assert_eq!(poll_timeout(t0, d.into_iter(), true), Some(EXIT_CHECK));
        assert_eq!(poll_timeout(t0, std::iter::empty(), false), None, "idle: sleep until woken");
        assert_eq!(poll_timeout(t0 + Duration::from_secs(3), d.into_iter(), false), Some(Duration::ZERO));
    }

    #[test]
    fn stopping_the_reaper_kills_what_it_watches_at_once_and_reports_it() {
        use crate::base::manager::Health;
        let (got, done) = collector();
        let health = Health::default();
        let threads = WorkerSet::new("prober", 1, &health);
        let reaper = ExecReaper::start(done, &threads).unwrap();
        assert_eq!(health.alive(), vec!["fl-probe-exec"]);
        let pid = watch_sleep(&reaper, 3);
        std::thread::sleep(Duration::from_millis(50));
        // The reaper waits in poll on the command's pipes (deadline 60 s): only the stop's
        // wake-up ends that wait.
        assert!(threads.stop(Duration::from_secs(2)).is_empty());
        let got = got.lock();
        assert_eq!(got.len(), 1, "its worker gets a result");
        assert_eq!(got[0].outcome, Outcome::Error("the exec probe reaper has stopped".into()));
        // SAFETY: signal 0 only checks that the pid exists.
        assert_ne!(unsafe { libc::kill(pid, 0) }, 0, "the command was killed and reaped");
        assert!(health.alive().is_empty() && health.dead().is_empty());
    }
}
