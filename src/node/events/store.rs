//! The local event store: what `/events`, `ferrolet get events` and `ferrolet describe`
//! read. It plays the apiserver's part for the correlator (create, patch by name, resource
//! versions), keeps at most `max_events` (least recently updated go first), and survives
//! agent restarts: every create or patch is appended to `<state>/events.log` as one JSON line
//! with a plain write (in the kernel's hands at once, so a `kill -9` loses nothing; fsync is
//! left to compaction and shutdown), and the file is compacted atomically (temp file, fsync,
//! rename) when it holds four times `max_events` lines. A torn or corrupt line is skipped
//! on load.

use super::lru::Lru;
use super::sink::{EventSink, SinkError};
use crate::api::Event;
use parking_lot::Mutex;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Largest file read back at start (a sanity limit; compaction keeps it far smaller).
const MAX_FILE: u64 = 64 << 20;

struct Inner {
    events: Lru<String, Event>,
    max: usize,
    path: Option<PathBuf>,
    file: Option<File>,
    lines: usize,
    version: u64,
    /// Events not written since appending last failed (a full disk): the failure is said
    /// once, and the count when writing works again.
    unwritten: u64,
}

/// A bounded, persistent event store; clones share it.
#[derive(Clone)]
pub struct EventStore {
    inner: Arc<Mutex<Inner>>,
}

/// Which events to list: `None` fields match anything.
#[derive(Clone, Debug, Default)]
pub struct EventFilter {
    /// Involved object kind.
    pub kind: Option<String>,
    /// Involved object namespace.
    pub namespace: Option<String>,
    /// Involved object name.
    pub name: Option<String>,
    /// Involved object uid.
    pub uid: Option<String>,
}

impl EventFilter {
    fn matches(&self, e: &Event) -> bool {
        let o = &e.involved_object;
        let eq = |want: &Option<String>, have: &str| want.as_deref().map_or(true, |w| w == have);
        eq(&self.kind, &o.kind) && eq(&self.namespace, &o.namespace) && eq(&self.name, &o.name) && eq(&self.uid, &o.uid)
    }
}

impl EventStore {
    /// An in-memory store.
    pub fn in_memory(max: usize) -> EventStore {
        EventStore::with(max, None, Vec::new())
    }

    fn with(max: usize, path: Option<PathBuf>, loaded: Vec<Event>) -> EventStore {
        let mut events = Lru::new(max.max(1));
        let mut version = 0;
        for e in loaded {
            version = version.max(e.metadata.resource_version.parse().unwrap_or(0));
            events.put(e.metadata.name.clone(), e);
        }
        let inner = Inner { events, max: max.max(1), path, file: None, lines: 0, version, unwritten: 0 };
        EventStore { inner: Arc::new(Mutex::new(inner)) }
    }

    /// Opens the store persisted at `path`, loading what an earlier run recorded. Reading
    /// stops at the first I/O error (a directory in its place, EIO from a failing SD card):
    /// the error is logged once and the events read before it are kept.
    pub fn open(path: &Path, max: usize) -> EventStore {
        let (loaded, bad) = match File::open(path) {
            Ok(f) => {
                let (loaded, bad, err) = read_events(BufReader::new(f.take(MAX_FILE)));
                if let Some(e) = err {
                    log::warn!(
                        "events: cannot read the event store {}: {}; keeping the {} event(s) read before the error",
                        path.display(),
                        crate::base::errors::Chain(&e),
                        loaded.len()
                    );
                }
                (loaded, bad)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Vec::new(), 0),
            Err(e) => {
                log::warn!(
                    "events: cannot read the event store {}: {}; starting empty",
                    path.display(),
                    crate::base::errors::Chain(&e)
                );
                (Vec::new(), 0)
            }
        };
        if bad > 0 {
            log::warn!("events: skipped {bad} unreadable line(s) in {}", path.display());
        }
        let n = loaded.len();
        let store = EventStore::with(max, Some(path.into()), loaded);
        {
            let mut inner = store.inner.lock();
            if let Err(e) = inner.compact() {
                log::warn!(
                    "events: cannot write the event store {}: {}; events are kept in memory only",
                    path.display(),
                    crate::base::errors::Chain(&e)
                );
            }
        }
        if n > 0 {
            log::info!("events: loaded {} stored event(s) from {}", store.len(), path.display());
        }
        store
    }

    /// Events held.
    pub fn len(&self) -> usize {
        self.inner.lock().events.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Matching events, oldest `lastTimestamp` first.
    pub fn list(&self, filter: &EventFilter) -> Vec<Event> {
        let inner = self.inner.lock();
        let mut v: Vec<Event> = inner.events.values().filter(|e| filter.matches(e)).cloned().collect();
        v.sort_by(|a, b| (a.last_timestamp, &a.metadata.name).cmp(&(b.last_timestamp, &b.metadata.name)));
        v
    }

    /// Flushes the file to disk (at shutdown).
    pub fn sync(&self) {
        if let Some(f) = &self.inner.lock().file {
            let _ = f.sync_all();
        }
    }
}

/// Parses one event per line until the end or the first I/O error: (events, lines that
/// did not parse, the I/O error). A read error repeats for ever on a directory or a
/// failing device, so the loop must stop there. Lines are read as bytes: a torn line
/// that is not UTF-8 (a write cut inside a character) is one bad line, not an I/O error
/// that would drop every event after it.
fn read_events(mut r: impl BufRead) -> (Vec<Event>, usize, Option<std::io::Error>) {
    let (mut loaded, mut bad) = (Vec::new(), 0);
    let mut line = Vec::new();
    loop {
        line.clear();
        match r.read_until(b'\n', &mut line) {
            Ok(0) => return (loaded, bad, None),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return (loaded, bad, Some(e)),
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        match serde_json::from_slice::<Event>(text) {
            Ok(e) => loaded.push(e),
            Err(_) => bad += 1,
        }
    }
}

impl Inner {
    fn persist(&mut self, e: &Event) {
        if self.path.is_none() {
            return;
        }
        if self.lines >= self.max * 4 {
            if let Err(err) = self.compact() {
                log::warn!("events: compacting the event store failed: {}", crate::base::errors::Chain(&err));
            }
            return; // the compacted file already holds `e`
        }
        let Some(f) = self.file.as_mut() else { return };
        let mut line = serde_json::to_vec(e).unwrap_or_default();
        line.push(b'\n');
        match f.write_all(&line) {
            Err(err) => {
                if self.unwritten == 0 {
                    log::warn!(
                        "events: appending to the event store failed: {}; events are kept in memory until it works again",
                        crate::base::errors::Chain(&err)
                    );
                }
                self.unwritten += 1;
            }
            Ok(()) if self.unwritten > 0 => {
                log::info!(
                    "events: the event store is written again ({} event(s) were kept in memory only)",
                    self.unwritten
                );
                self.unwritten = 0;
            }
            Ok(()) => {}
        }
        self.lines += 1;
    }

    /// Rewrites the file with exactly the events held, atomically.
    fn compact(&mut self) -> std::io::Result<()> {
        let Some(path) = self.path.clone() else { return Ok(()) };
        let mut events: Vec<&Event> = self.events.values().collect();
        events.sort_by(|a, b| (a.last_timestamp, &a.metadata.name).cmp(&(b.last_timestamp, &b.metadata.name)));
        let mut data = Vec::new();
        for e in &events {
            data.extend(serde_json::to_vec(e).unwrap_or_default());
            data.push(b'\n');
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        crate::base::state_files::write_atomic(&path, &data)?;
        self.file = Some(OpenOptions::new().append(true).open(&path)?);
        self.lines = events.len();
        Ok(())
    }

    fn store(&mut self, mut e: Event) -> Event {
        self.version += 1;
        e.metadata.resource_version = self.version.to_string();
        self.events.put(e.metadata.name.clone(), e.clone());
        self.persist(&e);
        e
    }
}

impl EventSink for EventStore {
    fn create(&mut self, event: &Event) -> Result<Event, SinkError> {
        let mut inner = self.inner.lock();
        if inner.events.get_mut(&event.metadata.name).is_some() {
            return Err(SinkError::Rejected(format!("events \"{}\" already exists", event.metadata.name)));
        }
        Ok(inner.store(event.clone()))
    }

    fn patch(&mut self, event: &Event) -> Result<Event, SinkError> {
        let mut inner = self.inner.lock();
        let Some(existing) = inner.events.get_mut(&event.metadata.name) else { return Err(SinkError::NotFound) };
        // The fields of `sink::patch_body`, applied as the apiserver would.
        let mut updated = existing.clone();
        updated.count = event.count;
        updated.last_timestamp = event.last_timestamp;
        updated.message = event.message.clone();
        Ok(inner.store(updated))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ObjectReference, Time};
    use std::time::{Duration, UNIX_EPOCH};

    fn ev(name: &str, t: u64) -> Event {
        Event {
            metadata: crate::api::ObjectMeta { name: name.into(), namespace: "default".into(), ..Default::default() },
            involved_object: ObjectReference {
                kind: "Pod".into(),
                name: name.split('.').next().unwrap().into(),
                ..Default::default()
            },
            reason: "R".into(),
            message: "m".into(),
            count: 1,
            last_timestamp: Some(Time(UNIX_EPOCH + Duration::from_secs(t))),
            ..Default::default()
        }
    }

    #[test]
    fn create_patch_and_bounded_size() {
        let mut s = EventStore::in_memory(3);
        s.create(&ev("a.1", 1)).unwrap();
        assert!(matches!(s.create(&ev("a.1", 1)), Err(SinkError::Rejected(_))));
        let mut repeat = ev("a.1", 1);
        (repeat.count, repeat.message) = (5, "new".into());
        let patched = s.patch(&repeat).unwrap();
        assert_eq!(
            (patched.count, patched.message.as_str(), patched.metadata.resource_version.as_str()),
            (5, "new", "2")
        );
        assert_eq!(s.patch(&ev("zz.1", 1)), Err(SinkError::NotFound));
        for (n, t) in [("b.1", 2), ("c.1", 3), ("d.1", 4)] {
            s.create(&ev(n, t)).unwrap();
        }
        let names: Vec<String> = s.list(&EventFilter::default()).into_iter().map(|e| e.metadata.name).collect();
        assert_eq!(names, ["b.1", "c.1", "d.1"], "the least recently updated went first");
        let only_c = s.list(&EventFilter { name: Some("c".into()), ..Default::default() });
        assert_eq!(only_c.len(), 1);
    }

    #[test]
    fn survives_a_restart_and_skips_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.log");
        {
            let mut s = EventStore::open(&path, 100);
            for i in 0..10 {
                s.create(&ev(&format!("p{i}.1"), i)).unwrap();
            }
            let mut repeat = ev("p3.1", 3);
            repeat.count = 7;
            s.patch(&repeat).unwrap();
            // No sync: a kill -9 leaves what was written with plain writes.
        }
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"metadata\":{\"name\":\"torn").unwrap();
        let s = EventStore::open(&path, 100);
        assert_eq!(s.len(), 10);
        let p3 = s.list(&EventFilter { name: Some("p3".into()), ..Default::default() });
        assert_eq!(p3[0].count, 7);
        let mut s2 = s.clone();
        let e = s2.create(&ev("new.1", 99)).unwrap();
        assert_eq!(e.metadata.resource_version, "12", "versions continue after a restart");
    }

    /// Two good lines, then the same I/O error forever, as a failing SD card gives.
    struct FailingCard {
        data: std::io::Cursor<Vec<u8>>,
        errors: usize,
    }

    impl Read for FailingCard {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            match self.data.read(buf)? {
                0 => {
                    self.errors += 1;
                    Err(std::io::Error::from_raw_os_error(libc::EIO))
                }
                n => Ok(n),
            }
        }
    }

    #[test]
    fn reading_stops_at_the_first_io_error_and_keeps_what_was_read() {
        let mut text = Vec::new();
        for (i, name) in ["a.1", "b.1"].iter().enumerate() {
            text.extend(serde_json::to_vec(&ev(name, i as u64)).unwrap());
            text.push(b'\n');
        }
        let mut card = FailingCard { data: std::io::Cursor::new(text), errors: 0 };
        let (loaded, bad, err) = read_events(BufReader::new(&mut card));
        assert_eq!((loaded.len(), bad), (2, 0));
        assert_eq!(err.unwrap().raw_os_error(), Some(libc::EIO));
        assert_eq!(card.errors, 1, "one read error ends the loop");
    }

    #[test]
    fn a_torn_line_that_is_not_utf8_is_skipped_and_later_events_kept() {
        let mut text = serde_json::to_vec(&ev("a.1", 1)).unwrap();
        text.push(b'\n');
        // A write cut inside "é" (0xC3 0xA9), then the next event appended.
        text.extend_from_slice(b"{\"reason\":\"caf\xC3\n");
        text.extend(serde_json::to_vec(&ev("b.1", 2)).unwrap());
        text.push(b'\n');
        let (loaded, bad, err) = read_events(BufReader::new(&text[..]));
        assert!(err.is_none(), "{err:?}");
        assert_eq!((loaded.len(), bad), (2, 1));
    }

    #[test]
    fn a_directory_in_place_of_the_log_gives_an_empty_store() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.log");
        std::fs::create_dir(&path).unwrap();
        let mut s = EventStore::open(&path, 10);
        assert!(s.is_empty());
        s.create(&ev("a.1", 1)).unwrap();
        assert_eq!(s.len(), 1, "the store keeps working in memory");
    }

    #[test]
    fn compaction_keeps_the_file_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.log");
        let mut s = EventStore::open(&path, 10);
        for i in 0..500 {
            s.create(&ev(&format!("p{i}.1"), i)).unwrap();
        }
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        assert!(lines <= 40, "{lines} lines");
        assert_eq!(EventStore::open(&path, 10).len(), 10);
    }
}
