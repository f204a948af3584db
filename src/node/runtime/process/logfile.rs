//! Container log files in the CRI format kubelet and `kubectl logs` read:
//! `<RFC3339Nano> <stream> <P|F> <content>`, one record per line, `P` for a partial line
//! (longer than the buffer), `F` for the full line or its last piece. Rotated by size:
//! `<name>.log` becomes `<name>.log.<YYYYMMDD-HHMMSS>`, keeping `max_files` in all.
//!
//! A log that cannot be written (a full disk, a missing directory) never stops the
//! workload, as containerd's shim does not: the record is dropped and counted, a record
//! cut short is taken back out of the file, the file is opened again at most once a
//! second, and the shim's own log says when writing stopped and when it resumed, with how
//! many records were lost.

use crate::base::timefmt::rfc3339_nano;
use crate::node::runtime::logrotate;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// Longest content written in one record; longer lines are split into `P` records.
pub const MAX_LINE: usize = 16 * 1024;

/// Writes a line to the shim's own log (its stderr, `shim.log`). A line that cannot be
/// written (a full disk) is lost, never fatal: `eprintln!` would panic.
pub fn say(args: std::fmt::Arguments) {
    use std::io::Write as _;
    let _ = writeln!(io::stderr(), "{args}");
}

/// How long after a failed open the file is tried again.
const REOPEN_PAUSE: Duration = Duration::from_secs(1);

/// Writes both output streams of one container into its log file.
pub struct LogFile {
    path: PathBuf,
    /// `None` while it cannot be opened.
    file: Option<File>,
    /// Its length up to the last whole record.
    size: u64,
    max_size: u64,
    max_files: u32,
    pending: [Vec<u8>; 2],
    /// Records dropped since writing last failed.
    dropped: u64,
    /// When the file may next be opened again.
    reopen_at: Option<Instant>,
}

/// Which stream a chunk came from.
#[derive(Clone, Copy, Debug)]
pub enum Stream {
    /// Standard output.
    Stdout = 0,
    /// Standard error.
    Stderr = 1,
}

impl Stream {
    fn tag(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

impl LogFile {
    /// The log file at `path` (appended to), its directory made; one that cannot be opened
    /// now is tried again as records come.
    pub fn open(path: &Path, max_size: u64, max_files: u32) -> LogFile {
        let mut log = LogFile {
            path: path.into(),
            file: None,
            size: 0,
            max_size,
            max_files: max_files.max(1),
            pending: [Vec::new(), Vec::new()],
            dropped: 0,
            reopen_at: None,
        };
        if let Err(e) = log.reopen() {
            log.failed(&e);
        }
        log
    }

    /// Records dropped since writing last failed (0 while it works).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    fn reopen(&mut self) -> io::Result<()> {
        if let Some(dir) = self.path.parent() {
            crate::base::state_files::create_private_dir_all(dir)?;
        }
        // Logs may hold whatever the workload prints, secrets included: owner (and the
        // configured state group) only.
        let file = crate::base::state_files::append_private_file(&self.path)?;
        self.size = file.metadata()?.len();
        self.file = Some(file);
        Ok(())
    }

    /// Writing failed: said in the shim's log when it starts failing.
    fn failed(&mut self, e: &io::Error) {
        if self.dropped == 0 {
            say(format_args!(
                "shim: cannot write {}: {e}; the container's output is dropped until it can",
                self.path.display()
            ));
        }
        self.dropped += 1;
    }

    /// Takes a chunk read from a stream; writes every complete line it finishes.
    pub fn write_chunk(&mut self, stream: Stream, mut data: &[u8]) {
        while !data.is_empty() {
            let buf_len = self.pending[stream as usize].len();
            match data.iter().position(|&b| b == b'\n') {
                Some(nl) if buf_len + nl <= MAX_LINE => {
                    let mut line = std::mem::take(&mut self.pending[stream as usize]);
                    line.extend_from_slice(&data[..nl]);
                    self.record(stream, b'F', &line);
                    data = &data[nl + 1..];
                }
                _ => {
                    let room = MAX_LINE - buf_len;
                    let take = data.len().min(room);
                    self.pending[stream as usize].extend_from_slice(&data[..take]);
                    data = &data[take..];
                    if self.pending[stream as usize].len() == MAX_LINE {
                        let line = std::mem::take(&mut self.pending[stream as usize]);
                        self.record(stream, b'P', &line);
                    }
                }
            }
        }
    }

    /// Writes out what is left of unfinished lines (at stream end).
    pub fn finish(&mut self) {
        for stream in [Stream::Stdout, Stream::Stderr] {
            let rest = std::mem::take(&mut self.pending[stream as usize]);
            if !rest.is_empty() {
                self.record(stream, b'F', &rest);
            }
        }
        if self.dropped > 0 {
            say(format_args!("shim: {} record(s) of the container's output could not be written", self.dropped));
        }
    }

    /// Writes one record, or drops it (counted) when it cannot be written.
    fn record(&mut self, stream: Stream, tag: u8, content: &[u8]) {
        if self.file.is_none() {
            if self.reopen_at.is_some_and(|at| Instant::now() < at) {
                self.dropped += 1;
                return;
            }
            if let Err(e) = self.reopen() {
                self.reopen_at = Some(Instant::now() + REOPEN_PAUSE);
                self.failed(&e);
                return;
            }
        }
        match self.try_record(stream, tag, content) {
            Ok(()) if self.dropped > 0 => {
                say(format_args!(
                    "shim: writing {} again; {} record(s) of the container's output were dropped",
                    self.path.display(),
                    self.dropped
                ));
                self.dropped = 0;
            }
            Ok(()) => {}
            Err(e) => {
                // A record cut short is taken back out, so the next one starts a line.
                if self.file.as_ref().is_some_and(|f| f.set_len(self.size).is_err()) {
                    self.file = None;
                }
                if self.file.is_none() {
                    self.reopen_at = Some(Instant::now() + REOPEN_PAUSE);
                }
                self.failed(&e);
            }
        }
    }

    fn try_record(&mut self, stream: Stream, tag: u8, content: &[u8]) -> io::Result<()> {
        let mut rec = Vec::with_capacity(content.len() + 48);
        rec.extend_from_slice(rfc3339_nano(SystemTime::now()).as_bytes());
        rec.push(b' ');
        rec.extend_from_slice(stream.tag().as_bytes());
        rec.push(b' ');
        rec.push(tag);
        rec.push(b' ');
        rec.extend_from_slice(content);
        rec.push(b'\n');
        if self.size > 0 && self.size + rec.len() as u64 > self.max_size {
            self.rotate()?;
        }
        let file = self.file.as_mut().ok_or_else(|| io::Error::other("the log file is not open"))?;
        file.write_all(&rec)?;
        self.size += rec.len() as u64;
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        fs::rename(&self.path, logrotate::rotation_path(&self.path, SystemTime::now()))?;
        // Older files go first: on a full disk that is what makes room.
        logrotate::prune_rotated(&self.path, self.max_files);
        self.file = None;
        self.reopen()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(path: &Path) -> Vec<(String, String, String)> {
        fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| {
                let mut it = l.splitn(4, ' ');
                let ts = it.next().unwrap();
                assert!(crate::base::timefmt::parse_rfc3339(ts).is_some(), "timestamp {ts}");
                (it.next().unwrap().into(), it.next().unwrap().into(), it.next().unwrap_or("").into())
            })
            .collect()
    }

    #[test]
    fn writes_full_and_partial_records_per_stream() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c/0.log");
        let mut lf = LogFile::open(&p, 1 << 20, 3);
        lf.write_chunk(Stream::Stdout, b"hello\nwor");
        lf.write_chunk(Stream::Stderr, b"oops\n");
        lf.write_chunk(Stream::Stdout, b"ld\n");
        let long = vec![b'x'; MAX_LINE + 10];
        lf.write_chunk(Stream::Stdout, &long);
        lf.write_chunk(Stream::Stdout, b"\ntail");
        lf.finish();
        let r = records(&p);
        assert_eq!(r[0], ("stdout".into(), "F".into(), "hello".into()));
        assert_eq!(r[1], ("stderr".into(), "F".into(), "oops".into()));
        assert_eq!(r[2], ("stdout".into(), "F".into(), "world".into()));
        assert_eq!((r[3].1.as_str(), r[3].2.len()), ("P", MAX_LINE));
        assert_eq!((r[4].1.as_str(), r[4].2.len()), ("F", 10));
        assert_eq!(r[5], ("stdout".into(), "F".into(), "tail".into()));
    }

    #[test]
    fn rotates_by_size_and_keeps_max_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("0.log");
        let mut lf = LogFile::open(&p, 4096, 3);
        for i in 0..400 {
            lf.write_chunk(Stream::Stdout, format!("line number {i:05} with some padding text\n").as_bytes());
        }
        lf.finish();
        let rotated = logrotate::rotated_files(&p);
        assert_eq!(rotated.len(), 2, "max_files 3 = live file + 2 rotated");
        assert!(fs::metadata(&p).unwrap().len() <= 4096);
        let last = records(&p).pop().unwrap();
        assert!(last.2.contains("00399"));
    }

    #[test]
    fn a_full_disk_drops_records_whole_and_writing_resumes_when_space_returns() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: mounting a small tmpfs needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let target = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: valid NUL-terminated strings.
        let r = unsafe {
            libc::mount(c"tmpfs".as_ptr(), target.as_ptr(), c"tmpfs".as_ptr(), 0, c"size=64k".as_ptr().cast())
        };
        assert_eq!(r, 0, "{}", io::Error::last_os_error());
        struct Unmount<'a>(&'a std::ffi::CStr);
        impl Drop for Unmount<'_> {
            fn drop(&mut self) {
                // SAFETY: a valid NUL-terminated string.
                unsafe { libc::umount2(self.0.as_ptr(), libc::MNT_DETACH) };
            }
        }
        let _unmount = Unmount(&target);
        let p = dir.path().join("c/0.log");
        let mut lf = LogFile::open(&p, 1 << 20, 3);
        let line = |i: usize| format!("line {i:06} {}\n", "x".repeat(300));
        for i in 0..1000 {
            lf.write_chunk(Stream::Stdout, line(i).as_bytes());
        }
        let dropped = lf.dropped();
        assert!(dropped > 500, "the 64 KiB filled up: {dropped} dropped");
        let kept = records(&p);
        assert!(kept.iter().all(|r| r.1 == "F" && r.2.len() == 312), "every record whole");
        // Space returns: the next record is written, the count starts again.
        fs::write(&p, "").unwrap();
        lf.size = 0;
        lf.write_chunk(Stream::Stdout, b"after\n");
        assert_eq!(lf.dropped(), 0);
        assert_eq!(records(&p).last().unwrap().2, "after");
    }
}
