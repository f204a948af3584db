//! The prober's helper threads as owned `manager::Worker`s: the probe threads
//! (`fl-probe-N`), the exec reaper (`fl-probe-exec`) and the host name lookups
//! (`fl-probe-dns`). Each kind lives in a bounded `ThreadSet` that reaps threads which have
//! ended by themselves, so nothing is detached: the agent stops and joins every set with a
//! timeout, and names the threads that outlive it.

use crate::manager::{stop_all, Exit, Health, StopSignal, StopTimeout, Worker};
use parking_lot::Mutex;
use std::time::Duration;

/// A thread could not be added to a set.
#[derive(Debug, thiserror::Error)]
pub enum ThreadSetError {
    /// The set already runs its most threads.
    #[error("too many {name} threads running (at most {max})")]
    Full {
        /// The threads' name.
        name: String,
        /// The bound.
        max: usize,
    },
    /// The set is stopping: no new thread starts.
    #[error("the prober is stopping")]
    Stopping,
    /// The OS refused a thread.
    #[error("cannot start a {name} thread")]
    SpawnThread {
        /// The thread's name.
        name: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// What `signal_stop` does besides the stop signal, for a thread that waits in `poll`
/// (the reaper's wake pipe).
type OnStop = Box<dyn Fn() + Send>;

struct Entry {
    worker: Worker,
    on_stop: Option<OnStop>,
}

struct Inner {
    stopping: bool,
    entries: Vec<Entry>,
}

/// At most `max` threads, registered with `Health`, stopped together.
pub struct ThreadSet {
    max: usize,
    health: Health,
    inner: Mutex<Inner>,
}

impl ThreadSet {
    /// An empty set of at most `max` threads, registered in `health`.
    pub fn new(max: usize, health: &Health) -> ThreadSet {
        ThreadSet { max, health: health.clone(), inner: Mutex::new(Inner { stopping: false, entries: Vec::new() }) }
    }

    /// Starts `body` on a thread called `name`, unless the set is full or stopping.
    pub fn spawn(
        &self,
        name: &str,
        body: impl FnOnce(StopSignal) -> Exit + Send + 'static,
    ) -> Result<(), ThreadSetError> {
        self.spawn_with(name, None, body)
    }

    /// Like `spawn`, with `on_stop` called right after the thread's stop signal (to wake a
    /// `poll`: signalled first, the woken thread sees the stop).
    pub fn spawn_with(
        &self,
        name: &str,
        on_stop: Option<OnStop>,
        body: impl FnOnce(StopSignal) -> Exit + Send + 'static,
    ) -> Result<(), ThreadSetError> {
        let mut inner = self.inner.lock();
        if inner.stopping {
            return Err(ThreadSetError::Stopping);
        }
        reap(&mut inner.entries);
        if inner.entries.len() >= self.max {
            return Err(ThreadSetError::Full { name: name.into(), max: self.max });
        }
        let worker = Worker::spawn(name, &self.health, body)
            .map_err(|source| ThreadSetError::SpawnThread { name: name.into(), source })?;
        inner.entries.push(Entry { worker, on_stop });
        Ok(())
    }

    /// Threads running now (those that ended are reaped first).
    pub fn len(&self) -> usize {
        let mut inner = self.inner.lock();
        reap(&mut inner.entries);
        inner.entries.len()
    }

    /// Whether no thread runs.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Asks every thread to stop, without waiting; no new thread starts from now on.
    pub fn signal_stop(&self) {
        let mut inner = self.inner.lock();
        inner.stopping = true;
        for e in &mut inner.entries {
            e.worker.signal_stop();
            if let Some(wake) = &e.on_stop {
                wake();
            }
        }
    }

    /// Stops every thread and waits up to `timeout` for all of them; returns the ones that
    /// did not end in time (they keep running detached, still listed by `Health`).
    pub fn stop(&self, timeout: Duration) -> Vec<StopTimeout> {
        self.signal_stop();
        let entries = std::mem::take(&mut self.inner.lock().entries);
        stop_all(entries.into_iter().map(|e| e.worker), timeout)
    }
}

/// Joins the threads that have ended (at once: they have).
fn reap(entries: &mut Vec<Entry>) {
    let (ended, running): (Vec<Entry>, Vec<Entry>) = entries.drain(..).partition(|e| e.worker.is_finished());
    *entries = running;
    for e in ended {
        // A finished thread has sent its last word, so the join returns at once.
        let _ = e.worker.join(std::time::Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::bounded;
    use std::time::Instant;

    fn until_stopped(stop: StopSignal) -> Exit {
        let _ = stop.receiver().recv_timeout(Duration::from_secs(10));
        Exit::Done
    }

    #[test]
    fn a_full_set_refuses_until_a_thread_has_ended_and_is_reaped() {
        let health = Health::default();
        let set = ThreadSet::new(2, &health);
        let (release, released) = bounded::<()>(0);
        set.spawn("fl-t-short", move |_| {
            let _ = released.recv_timeout(Duration::from_secs(10));
            Exit::Done
        })
        .unwrap();
        set.spawn("fl-t-long", until_stopped).unwrap();
        let e = set.spawn("fl-t-more", until_stopped).unwrap_err();
        assert_eq!(e.to_string(), "too many fl-t-more threads running (at most 2)");
        drop(release);
        let deadline = Instant::now() + Duration::from_secs(5);
        while set.len() == 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(set.len(), 1, "the ended thread was reaped");
        set.spawn("fl-t-more", until_stopped).unwrap();
        assert!(set.stop(Duration::from_secs(2)).is_empty());
        assert!(health.alive().is_empty() && health.dead().is_empty());
    }

    #[test]
    fn stop_wakes_each_thread_and_names_the_one_that_ignores_it() {
        let health = Health::default();
        let set = ThreadSet::new(4, &health);
        let (woken_tx, woken) = bounded::<()>(1);
        let wake: OnStop = Box::new(move || {
            let _ = woken_tx.try_send(());
        });
        set.spawn_with("fl-t-poll", Some(wake), until_stopped).unwrap();
        set.spawn("fl-t-ok", until_stopped).unwrap();
        let (_hold, never) = bounded::<()>(0);
        set.spawn("fl-t-stuck", move |_| {
            let _ = never.recv_timeout(Duration::from_millis(800));
            Exit::Done
        })
        .unwrap();
        let late = set.stop(Duration::from_millis(200));
        assert_eq!(woken.try_recv(), Ok(()), "the on-stop wake-up ran");
        let names: Vec<&str> = late.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["fl-t-stuck"]);
        assert_eq!(late[0].to_string(), "fl-t-stuck did not stop within 200ms");
        assert!(matches!(set.spawn("fl-t-new", until_stopped), Err(ThreadSetError::Stopping)));
    }
}
