//! Container log files as `ferrolet logs` reads them. Both runtimes write the CRI format, one
//! record a line: `<RFC3339Nano> <stdout|stderr> <P|F> <content>`, `P` for a piece of a
//! line too long for one record (joined with the records after it), `F` for a full line or
//! its last piece. An instance's log is its live file (`<attempt>.log`) and the files it was
//! rotated into (`<attempt>.log.<YYYYMMDD-HHMMSS…>`).
//!
//! The decisions are pure and unit-tested: parsing a record (`parse_record`), the order of
//! an instance's files (`rotation_order`), where the last N lines start (`TailScan`), and
//! what a follower does at the end of its file (`follow_step`). The readers around them keep
//! memory bounded whatever the files hold: a record line is read up to `MAX_RECORD` bytes
//! (longer ones are skipped as malformed), `--tail` walks the files backwards in
//! `CHUNK`-sized reads and never holds more than one chunk, and content is written out as
//! it is read, pieces of long lines included.

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The longest record line read (the writers cut content at 16 KiB a record); a longer line
/// is skipped as malformed.
pub const MAX_RECORD: usize = 64 * 1024;
/// The most lines `--tail` takes.
pub const MAX_TAIL: u64 = 1_000_000;
/// How much of a file the backward walk of `--tail` reads at once.
const CHUNK: usize = 64 * 1024;
/// How much of a record's start tells its kind (timestamp with a numeric offset, stream and
/// tag take at most 46 bytes).
const HEAD: usize = 96;
/// How often a follower looks for new lines, and asks its caller whether to go on.
pub const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// Which output stream a record came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// One parsed record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// The timestamp as written.
    pub timestamp: &'a [u8],
    /// Its stream.
    pub stream: Stream,
    /// `P`: a piece of a line, continued by the stream's next record.
    pub partial: bool,
    /// The content, without the line's newline.
    pub content: &'a [u8],
}

/// Why a line is not a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// No valid RFC 3339 timestamp before the first space.
    #[error("no RFC 3339 timestamp")]
    Timestamp,
    /// The stream is neither `stdout` nor `stderr`.
    #[error("no stream (stdout or stderr)")]
    Stream,
    /// The tag is neither `P` nor `F` (sub-tags after `:` are allowed), or no space follows it.
    #[error("no P or F tag")]
    Tag,
    /// Longer than `MAX_RECORD`.
    #[error("longer than {MAX_RECORD} bytes")]
    TooLong,
}

/// Parses one record line (without its newline), as kubelet does: a space after each of
/// timestamp, stream and tag; the first of the tag's `:`-separated parts decides.
pub fn parse_record(line: &[u8]) -> Result<Record<'_>, Malformed> {
    let mut parts = line.splitn(4, |&b| b == b' ');
    let timestamp = parts.next().unwrap_or_default();
    let valid_time = std::str::from_utf8(timestamp).ok().and_then(crate::base::timefmt::parse_rfc3339).is_some();
    if !valid_time {
        return Err(Malformed::Timestamp);
    }
    let stream = match parts.next() {
        Some(b"stdout") => Stream::Stdout,
        Some(b"stderr") => Stream::Stderr,
        _ => return Err(Malformed::Stream),
    };
    let tag = parts.next().ok_or(Malformed::Tag)?;
    let content = parts.next().ok_or(Malformed::Tag)?;
    let partial = match tag.split(|&b| b == b':').next() {
        Some(b"P") => true,
        Some(b"F") => false,
        _ => return Err(Malformed::Tag),
    };
    Ok(Record { timestamp, stream, partial, content })
}

/// Writes records' content out as `kubectl logs` shows it: both streams together, a newline
/// after each full line, with `timestamps` the timestamp of a line's first record before it.
pub struct LogPrinter<W: Write> {
    out: W,
    timestamps: bool,
    /// Records older than this are skipped (`--since`, `--since-time`).
    since: Option<SystemTime>,
    /// Per stream: whether its next record starts a line (no `P` piece is pending).
    at_line_start: [bool; 2],
    /// Lines skipped as malformed.
    malformed: u64,
}

impl<W: Write> LogPrinter<W> {
    /// A printer to `out`.
    pub fn new(out: W, timestamps: bool) -> LogPrinter<W> {
        LogPrinter { out, timestamps, since: None, at_line_start: [true, true], malformed: 0 }
    }

    /// Skips the records written before `since`.
    pub fn since(mut self, since: Option<SystemTime>) -> LogPrinter<W> {
        self.since = since;
        self
    }

    /// Writes one record line, or counts it as malformed.
    pub fn line(&mut self, line: Result<&[u8], Malformed>) -> io::Result<()> {
        let Ok(r) = line.and_then(parse_record) else {
            self.malformed += 1;
            return Ok(());
        };
        if let Some(since) = self.since {
            // As kubelet: a record whose time cannot be read is kept.
            let at = std::str::from_utf8(r.timestamp).ok().and_then(crate::base::timefmt::parse_rfc3339);
            if at.is_some_and(|at| at < since) {
                return Ok(());
            }
        }
        let start = &mut self.at_line_start[r.stream as usize];
        if *start && self.timestamps {
            self.out.write_all(r.timestamp)?;
            self.out.write_all(b" ")?;
        }
        self.out.write_all(r.content)?;
        if !r.partial {
            self.out.write_all(b"\n")?;
        }
        *start = !r.partial;
        Ok(())
    }

    /// Lines skipped as malformed so far.
    pub fn malformed(&self) -> u64 {
        self.malformed
    }

    /// Flushes what was written.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Reads record lines of at most `MAX_RECORD` bytes; what was read of a line that is not
/// finished yet (a follower reads while the file is written) is kept for the next call.
#[derive(Default)]
pub struct LineReader {
    buf: Vec<u8>,
    /// The line being read is past `MAX_RECORD`: its rest is skipped up to its newline.
    overflow: bool,
}

impl LineReader {
    /// The next line, without its newline; `None` at the end of what `r` has now.
    pub fn next<'a, R: BufRead>(&'a mut self, r: &mut R) -> io::Result<Option<Result<&'a [u8], Malformed>>> {
        if !self.overflow && self.buf.last() == Some(&b'\n') {
            // The line returned by the last call.
            self.buf.clear();
        }
        loop {
            let avail = match r.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if avail.is_empty() {
                return Ok(None);
            }
            let (take, done) = match avail.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (avail.len(), false),
            };
            if !self.overflow && self.buf.len() + take > MAX_RECORD + 1 {
                self.overflow = true;
                self.buf.clear();
            }
            if !self.overflow {
                self.buf.extend_from_slice(&avail[..take]);
            }
            r.consume(take);
            if done {
                if std::mem::take(&mut self.overflow) {
                    return Ok(Some(Err(Malformed::TooLong)));
                }
                return Ok(Some(Ok(&self.buf[..self.buf.len() - 1])));
            }
        }
    }

    /// The unfinished line at the end of a file that will not grow (a writer that died, a
    /// file that was rotated), as a line; `None` when there is none.
    pub fn take_unfinished(&mut self) -> Option<Result<Vec<u8>, Malformed>> {
        let overflow = std::mem::take(&mut self.overflow);
        let line = std::mem::take(&mut self.buf);
        match (overflow, line.last()) {
            (true, _) => Some(Err(Malformed::TooLong)),
            (false, None | Some(b'\n')) => None,
            (false, Some(_)) => Some(Ok(line)),
        }
    }
}

/// Prints the records `r` has now through `lines`.
fn copy_lines<R: BufRead, W: Write>(r: &mut R, lines: &mut LineReader, printer: &mut LogPrinter<W>) -> io::Result<()> {
    while let Some(line) = lines.next(r)? {
        printer.line(line)?;
    }
    Ok(())
}

/// Prints the line left unfinished at the end of a file that is done.
fn finish_file<W: Write>(lines: &mut LineReader, printer: &mut LogPrinter<W>) -> io::Result<()> {
    match lines.take_unfinished() {
        Some(line) => printer.line(line.as_deref().map_err(|e| *e)),
        None => Ok(()),
    }
}

/// Whether `suffix` (after `<name>.`) is a rotation stamp: `YYYYMMDD-HHMMSS`, optionally
/// with a fraction. Compressed (`.gz`) and temporary rotations are not.
fn is_rotation_stamp(suffix: &str) -> bool {
    let b = suffix.as_bytes();
    b.len() >= 15
        && b[..8].iter().all(u8::is_ascii_digit)
        && b[8] == b'-'
        && b[9..15].iter().all(u8::is_ascii_digit)
        && (b.len() == 15 || (b[15] == b'.' && b.len() > 16 && b[16..].iter().all(u8::is_ascii_digit)))
}

/// The rotated files of log file `name` among the names in its directory, oldest first
/// (the stamps sort by time).
pub fn rotation_order<'a>(name: &str, siblings: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let prefix = format!("{name}.");
    let mut rotated: Vec<&str> =
        siblings.into_iter().filter(|s| s.strip_prefix(&prefix).is_some_and(is_rotation_stamp)).collect();
    rotated.sort_unstable();
    rotated
}

/// What reading an instance's log failed on.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// A log file or its directory could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Neither the log file nor any rotation of it exists.
    #[error("no log file at {path}")]
    Missing {
        /// The live log file.
        path: PathBuf,
    },
    /// The output could not be written.
    #[error("cannot write the logs")]
    Write(#[source] io::Error),
}

fn read_err(path: &Path) -> impl FnOnce(io::Error) -> LogError + '_ {
    move |source| LogError::Read { path: path.into(), source }
}

/// The files of the instance whose live log is `live`: its rotated files, oldest first, then
/// `live` itself when it exists.
pub fn instance_files(live: &Path) -> Result<Vec<PathBuf>, LogError> {
    let (Some(dir), Some(name)) = (live.parent(), live.file_name().and_then(|n| n.to_str())) else {
        return Err(LogError::Missing { path: live.into() });
    };
    let mut names = Vec::new();
    match fs::read_dir(dir) {
        Ok(rd) => {
            for e in rd {
                let e = e.map_err(read_err(dir))?;
                if let Ok(n) = e.file_name().into_string() {
                    names.push(n);
                }
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(read_err(dir)(e)),
    }
    let mut files: Vec<PathBuf> =
        rotation_order(name, names.iter().map(String::as_str)).iter().map(|n| dir.join(n)).collect();
    if names.iter().any(|n| n == name) {
        files.push(live.into());
    }
    Ok(files)
}

/// What the kind of a record line is, for counting lines from the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineKind {
    /// A `P` record: a piece of the line its stream's next `F` record ends.
    Partial,
    /// An `F` record: the end of a line.
    Full,
    /// Not a record.
    Malformed,
}

impl LineKind {
    /// The kind of the line starting with `head` (its first `HEAD` bytes, or all of it and
    /// what follows it).
    pub fn of(head: &[u8]) -> LineKind {
        let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
        match parse_record(line) {
            Ok(r) if r.partial => LineKind::Partial,
            Ok(_) => LineKind::Full,
            Err(_) => LineKind::Malformed,
        }
    }
}

/// Counts lines backwards from the end of the log to where its last `want` lines start.
/// A line is an `F` record with the `P` records right before it; malformed lines count for
/// nothing. (A `P` piece of the other stream written before the first counted line's own
/// pieces is left out.)
#[derive(Debug)]
pub struct TailScan {
    want: u64,
    full: u64,
}

impl TailScan {
    /// Looks for the start of the last `want` lines.
    pub fn new(want: u64) -> TailScan {
        TailScan { want, full: 0 }
    }

    /// Takes the next record going backwards; `true` when the tail starts right after it.
    pub fn step(&mut self, kind: LineKind) -> bool {
        if self.full >= self.want {
            // Every line wanted is counted: pieces of the first one are taken too.
            return kind != LineKind::Partial;
        }
        if kind == LineKind::Full {
            self.full += 1;
        }
        false
    }
}

/// Walks the lines of `f` (`len` bytes) from its end, giving `visit` the first `HEAD` bytes
/// of each; when `visit` says stop, returns the offset right after that line. `None` when it
/// went through the whole file. One `CHUNK` is in memory at a time.
fn scan_back<F: Read + Seek>(f: &mut F, len: u64, mut visit: impl FnMut(&[u8]) -> bool) -> io::Result<Option<u64>> {
    let mut chunk = vec![0u8; CHUNK];
    // The first HEAD bytes after the chunk being looked at (a line may start in one chunk
    // and go on in the next).
    let mut after: Vec<u8> = Vec::with_capacity(HEAD);
    let mut head: Vec<u8> = Vec::with_capacity(HEAD);
    // Where the line after the one being looked at starts.
    let mut next = len;
    let mut pos = len;
    while pos > 0 {
        let start = pos.saturating_sub(CHUNK as u64);
        let n = (pos - start) as usize;
        f.seek(SeekFrom::Start(start))?;
        f.read_exact(&mut chunk[..n])?;
        for i in (0..n).rev() {
            if chunk[i] != b'\n' {
                continue;
            }
            let line_start = start + i as u64 + 1;
            if line_start >= len {
                // The end of the file's last line.
                continue;
            }
            head.clear();
            head.extend(chunk[i + 1..n].iter().chain(&after).take(HEAD));
            if visit(&head) {
                return Ok(Some(next));
            }
            next = line_start;
        }
        let joined: Vec<u8> = chunk[..n].iter().chain(&after).take(HEAD).copied().collect();
        after = joined;
        pos = start;
    }
    if len > 0 && visit(&after) {
        return Ok(Some(next));
    }
    Ok(None)
}

/// Where the last `want` lines of a log start: the index of the file in `files` (oldest
/// first, with their lengths) and the offset in it.
pub fn tail_start<F: Read + Seek>(files: &mut [(F, u64)], want: u64) -> io::Result<(usize, u64)> {
    let mut scan = TailScan::new(want);
    for i in (0..files.len()).rev() {
        let (f, len) = &mut files[i];
        if let Some(offset) = scan_back(f, *len, |head| scan.step(LineKind::of(head)))? {
            // The end of a file is the start of the next one.
            if offset == *len && i + 1 < files.len() {
                return Ok((i + 1, 0));
            }
            return Ok((i, offset));
        }
    }
    Ok((0, 0))
}

/// A file's device and inode.
pub type FileKey = (u64, u64);

/// What identifies an open log file, and how far it was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileAt {
    /// Device and inode.
    pub id: FileKey,
    /// The size the path's file has now, or the offset read up to in the open file.
    pub len: u64,
}

impl FileAt {
    fn of(meta: &fs::Metadata, len: u64) -> FileAt {
        FileAt { id: (meta.dev(), meta.ino()), len }
    }
}

/// What a follower does once it read everything of its open file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FollowStep {
    /// Wait for more: nothing changed, or the file was renamed away and no new one is made.
    Wait,
    /// The file was truncated (rotated by copying): read it again from its start.
    Rewind,
    /// Another file is at the path now (the open one was rotated): go on to the next file.
    Reopen,
}

/// What to do at the end of the open file (`open`: its identity and the offset read to),
/// given the file at the log's path now (`None`: there is none).
pub fn follow_step(open: FileAt, at_path: Option<FileAt>) -> FollowStep {
    match at_path {
        None => FollowStep::Wait,
        Some(p) if p.id != open.id => FollowStep::Reopen,
        Some(p) if p.len < open.len => FollowStep::Rewind,
        Some(_) => FollowStep::Wait,
    }
}

/// What a follower's caller says between polls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Follow {
    /// Go on following.
    Go,
    /// The instance ended: read what is left and stop.
    Finish,
    /// Stop now (interrupted).
    Stop,
}

/// How one instance's log is printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// Only the last N lines (`--tail`).
    pub tail: Option<u64>,
    /// Prefix each line with its timestamp (`--timestamps`).
    pub timestamps: bool,
    /// Only records written at or after this time (`--since`, `--since-time`).
    pub since: Option<SystemTime>,
}

/// Prints the log of the instance whose live file is `live` to `out`: from the start of
/// the last `opts.tail` lines (or the oldest rotated file) to the end of the live file.
/// With `follow`, it then goes on reading the live file as it grows, across rotations, and
/// asks `follow` every `FOLLOW_POLL` whether to go on. Returns the malformed lines skipped.
pub fn print_logs<W: Write>(
    live: &Path,
    opts: LogOptions,
    out: W,
    follow: Option<&mut dyn FnMut() -> Follow>,
) -> Result<u64, LogError> {
    let mut printer = LogPrinter::new(out, opts.timestamps).since(opts.since);
    let paths = instance_files(live)?;
    if paths.is_empty() && follow.is_none() {
        return Err(LogError::Missing { path: live.into() });
    }
    let mut files = Vec::with_capacity(paths.len());
    let mut opened = Vec::with_capacity(paths.len());
    for p in paths {
        let f = match File::open(&p) {
            Ok(f) => f,
            // Rotated away (deleted past `max_files`) since it was listed.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(read_err(&p)(e)),
        };
        let len = f.metadata().map_err(read_err(&p))?.len();
        files.push((f, len));
        opened.push(p);
    }
    let paths = opened;
    let (first, offset) = match opts.tail {
        Some(n) => tail_start(&mut files, n).map_err(read_err(live))?,
        None => (0, 0),
    };
    let mut lines = LineReader::default();
    let mut kept: Option<BufReader<File>> = None;
    for (i, ((f, _), path)) in files.into_iter().zip(&paths).enumerate().skip(first) {
        let mut f = f;
        // The tail's walk moved every file's position.
        f.seek(SeekFrom::Start(if i == first { offset } else { 0 })).map_err(read_err(path))?;
        let mut r = BufReader::new(f);
        copy_lines(&mut r, &mut lines, &mut printer).map_err(read_err(path))?;
        if i + 1 == paths.len() && follow.is_some() {
            // The newest file, kept open to follow.
            kept = Some(r);
        } else {
            finish_file(&mut lines, &mut printer).map_err(read_err(path))?;
        }
    }
    printer.flush().map_err(LogError::Write)?;
    if let Some(follow) = follow {
        follow_live(live, kept, &mut lines, &mut printer, follow)?;
    }
    Ok(printer.malformed())
}

/// Which of an instance's files (their identities, oldest first) a follower reads next,
/// once it read all of the one it has open (`None`: it has none yet): the one after it;
/// when it is not among them any more (rotated files beyond `max_files` are deleted, oldest
/// first), every file left is newer, so the oldest. `None`: no newer file yet.
pub fn next_file(files: &[FileKey], open: Option<FileKey>) -> Option<usize> {
    match open.and_then(|id| files.iter().position(|f| *f == id)) {
        Some(i) => (i + 1 < files.len()).then_some(i + 1),
        None => (!files.is_empty()).then_some(0),
    }
}

/// The instance's files (`instance_files`) that still exist, with their identities.
fn files_with_ids(live: &Path) -> Result<Vec<(PathBuf, FileKey)>, LogError> {
    let mut out = Vec::new();
    for p in instance_files(live)? {
        match fs::metadata(&p) {
            Ok(m) => out.push((p, FileAt::of(&m, 0).id)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(read_err(&p)(e)),
        }
    }
    Ok(out)
}

/// Follows the log whose live file is `live`, `open` being its newest file already read
/// (`None`: there was none), until `follow` says to stop: at the end of the open file it
/// waits for more, reads a truncated file again, or goes on to the next file once the
/// open one was rotated (through every file rotated meanwhile, in order).
fn follow_live<W: Write>(
    live: &Path,
    mut open: Option<BufReader<File>>,
    lines: &mut LineReader,
    printer: &mut LogPrinter<W>,
    follow: &mut dyn FnMut() -> Follow,
) -> Result<(), LogError> {
    let mut finishing = false;
    loop {
        let mut open_id = None;
        let step = match open.as_mut() {
            Some(r) => {
                copy_lines(r, lines, printer).map_err(read_err(live))?;
                let at_path = match fs::metadata(live) {
                    Ok(m) => Some(FileAt::of(&m, m.len())),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                    Err(e) => return Err(read_err(live)(e)),
                };
                let pos = r.stream_position().map_err(read_err(live))?;
                let meta = r.get_ref().metadata().map_err(read_err(live))?;
                let at = FileAt::of(&meta, pos);
                open_id = Some(at.id);
                follow_step(at, at_path)
            }
            None => FollowStep::Reopen,
        };
        match step {
            FollowStep::Reopen => {
                if let Some(r) = open.as_mut() {
                    // Written to before it was renamed, after the read above.
                    copy_lines(r, lines, printer).map_err(read_err(live))?;
                }
                let files = files_with_ids(live)?;
                let ids: Vec<FileKey> = files.iter().map(|(_, id)| *id).collect();
                if let Some(i) = next_file(&ids, open_id) {
                    let path = &files[i].0;
                    match File::open(path) {
                        // Opened by path: if another file is there now (the live one was
                        // rotated since it was listed), the one listed would be skipped.
                        Ok(f) if f.metadata().is_ok_and(|m| FileAt::of(&m, 0).id != ids[i]) => continue,
                        Ok(f) => {
                            finish_file(lines, printer).map_err(read_err(live))?;
                            open = Some(BufReader::new(f));
                            continue;
                        }
                        // Rotated or deleted since it was listed: listed again.
                        Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                        Err(e) => return Err(read_err(path)(e)),
                    }
                }
            }
            FollowStep::Rewind => {
                *lines = LineReader::default();
                if let Some(r) = open.as_mut() {
                    r.seek(SeekFrom::Start(0)).map_err(read_err(live))?;
                }
                continue;
            }
            FollowStep::Wait => {}
        }
        printer.flush().map_err(LogError::Write)?;
        if finishing {
            // Everything the ended instance wrote is read.
            finish_file(lines, printer).map_err(read_err(live))?;
            return printer.flush().map_err(LogError::Write);
        }
        match follow() {
            Follow::Go => std::thread::sleep(FOLLOW_POLL),
            // One more pass: what was written before the end is read.
            Follow::Finish => finishing = true,
            Follow::Stop => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    const T: &str = "2024-05-01T10:00:00.123456789Z";

    fn rec(stream: &str, tag: &str, content: &str) -> String {
        format!("{T} {stream} {tag} {content}\n")
    }

    fn print(lines: &[&[u8]], timestamps: bool) -> (String, u64) {
        let mut out = Vec::new();
        let mut p = LogPrinter::new(&mut out, timestamps);
        for l in lines {
            p.line(Ok(l)).unwrap();
        }
        let bad = p.malformed();
        (String::from_utf8(out).unwrap(), bad)
    }

    #[test]
    fn a_record_has_timestamp_stream_tag_and_content() {
        let r = parse_record(b"2024-05-01T10:00:00.123456789Z stdout F hello world").unwrap();
        assert_eq!(r.timestamp, T.as_bytes());
        assert_eq!((r.stream, r.partial, r.content), (Stream::Stdout, false, &b"hello world"[..]));
        let r = parse_record(b"2024-05-01T12:00:00.1+02:00 stderr P  two spaces").unwrap();
        assert_eq!((r.stream, r.partial, r.content), (Stream::Stderr, true, &b" two spaces"[..]));
        // Sub-tags are allowed; content may be empty.
        let r = parse_record(b"2024-05-01T10:00:00Z stdout F:x ").unwrap();
        assert_eq!((r.partial, r.content), (false, &b""[..]));
    }

    #[test]
    fn malformed_lines_say_what_is_missing() {
        assert_eq!(parse_record(b""), Err(Malformed::Timestamp));
        assert_eq!(parse_record(b"yesterday stdout F hi"), Err(Malformed::Timestamp));
        assert_eq!(parse_record(b"2024-05-01T10:00:00Z stdin F hi"), Err(Malformed::Stream));
        assert_eq!(parse_record(b"2024-05-01T10:00:00Z stdout X hi"), Err(Malformed::Tag));
        assert_eq!(parse_record(b"2024-05-01T10:00:00Z stdout F"), Err(Malformed::Tag), "no space after the tag");
        assert_eq!(parse_record(b"2024-05-01T10:00:00Z stdout"), Err(Malformed::Tag));
    }

    #[test]
    fn partial_records_are_joined_per_stream_and_timestamped_once() {
        let a = rec("stdout", "P", "hel");
        let b = rec("stderr", "F", "oops");
        let c = rec("stdout", "F", "lo");
        let lines: Vec<&[u8]> = [&a, &b, &c].iter().map(|s| s.trim_end_matches('\n').as_bytes()).collect();
        // As kubelet: pieces go out as they come, so the other stream's line lands inside.
        assert_eq!(print(&lines, false).0, "heloops\nlo\n");
        assert_eq!(print(&[lines[0], lines[2]], false).0, "hello\n");
        assert_eq!(print(&[lines[0], lines[2]], true).0, format!("{T} hello\n"));
        let (text, bad) = print(&[b"garbage", lines[1]], true);
        assert_eq!((text, bad), (format!("{T} oops\n"), 1));
    }

    #[test]
    fn lines_are_bounded_and_unfinished_ones_kept_for_later() {
        let long = format!("{T} stdout F {}\n", "x".repeat(MAX_RECORD));
        let text = format!("{}{long}{}{T} stdout F unfin", rec("stdout", "F", "a"), rec("stdout", "F", "b"));
        // A tiny buffer: lines come in many reads.
        let mut r = BufReader::with_capacity(7, Cursor::new(text.into_bytes()));
        let mut lr = LineReader::default();
        let mut got = Vec::new();
        while let Some(l) = lr.next(&mut r).unwrap() {
            got.push(l.map(|l| String::from_utf8_lossy(l).into_owned()));
        }
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].as_deref().unwrap(), format!("{T} stdout F a"));
        assert_eq!(got[1], Err(Malformed::TooLong));
        assert_eq!(got[2].as_deref().unwrap(), format!("{T} stdout F b"));
        assert!(lr.buf.len() < 64, "the unfinished line is kept, the long one was not");
        // The writer finishes the line later.
        let mut more = Cursor::new(b"ished\n".to_vec());
        assert_eq!(lr.next(&mut more).unwrap().unwrap().unwrap(), format!("{T} stdout F unfinished").as_bytes());
        assert!(lr.next(&mut more).unwrap().is_none());
        assert!(lr.take_unfinished().is_none());
    }

    #[test]
    fn rotated_files_are_the_stamped_siblings_oldest_first() {
        let names = [
            "0.log",
            "0.log.20240502-090000",
            "0.log.20240501-100000.123456789",
            "0.log.20240501-100000.2",
            "0.log.20240501-080000.gz",
            "0.log.20240501-080000.tmp",
            "0.log.x",
            "1.log.20240501-070000",
            "10.log",
        ];
        assert_eq!(
            rotation_order("0.log", names),
            ["0.log.20240501-100000.123456789", "0.log.20240501-100000.2", "0.log.20240502-090000"]
        );
        assert!(rotation_order("1.log", ["0.log", "1.log"]).is_empty());
    }

    /// Files (oldest first) made of the given records.
    fn files(texts: &[String]) -> Vec<(Cursor<Vec<u8>>, u64)> {
        texts.iter().map(|t| (Cursor::new(t.clone().into_bytes()), t.len() as u64)).collect()
    }

    fn numbered(range: std::ops::Range<u32>) -> String {
        range.map(|i| rec("stdout", "F", &format!("line {i}"))).collect()
    }

    #[test]
    fn tail_counts_lines_back_across_rotated_files() {
        let (old, mid, live) = (numbered(0..3), numbered(3..5), numbered(5..7));
        let mut f = files(&[old.clone(), mid.clone(), live.clone()]);
        assert_eq!(tail_start(&mut f, 1).unwrap(), (2, rec("stdout", "F", "line 5").len() as u64));
        assert_eq!(tail_start(&mut f, 2).unwrap(), (2, 0));
        assert_eq!(tail_start(&mut f, 3).unwrap(), (1, rec("stdout", "F", "line 3").len() as u64));
        assert_eq!(tail_start(&mut f, 4).unwrap(), (1, 0));
        assert_eq!(tail_start(&mut f, 6).unwrap(), (0, rec("stdout", "F", "line 0").len() as u64));
        assert_eq!(tail_start(&mut f, 7).unwrap(), (0, 0));
        assert_eq!(tail_start(&mut f, 100).unwrap(), (0, 0));
        assert_eq!(tail_start(&mut f, 0).unwrap(), (2, live.len() as u64));
        // An empty live file (just rotated).
        let mut f = files(&[old, String::new()]);
        assert_eq!(tail_start(&mut f, 1).unwrap(), (0, 2 * rec("stdout", "F", "line 0").len() as u64));
    }

    #[test]
    fn tail_takes_a_lines_pieces_and_skips_malformed_lines() {
        let text = format!(
            "{}{}{}garbage\n{}{}",
            rec("stdout", "F", "one"),
            rec("stdout", "P", "tw"),
            rec("stdout", "F", "o"),
            rec("stderr", "P", "thr"),
            rec("stderr", "F", "ee")
        );
        let mut f = files(std::slice::from_ref(&text));
        let (_, at) = tail_start(&mut f, 2).unwrap();
        let mut out = Vec::new();
        let mut p = LogPrinter::new(&mut out, false);
        copy_lines(&mut Cursor::new(&text.as_bytes()[at as usize..]), &mut LineReader::default(), &mut p).unwrap();
        let bad = p.malformed();
        assert_eq!((String::from_utf8(out).unwrap(), bad), ("two\nthree\n".into(), 1));
        // A line longer than a chunk: the scan still finds line starts across chunks.
        let long = "y".repeat(CHUNK * 2 + 17);
        let text = format!("{}{}{}", rec("stdout", "F", "a"), rec("stdout", "F", &long), rec("stdout", "F", "b"));
        let mut f = files(&[text]);
        assert_eq!(tail_start(&mut f, 2).unwrap(), (0, rec("stdout", "F", "a").len() as u64));
    }

    #[test]
    fn a_follower_reopens_a_rotated_file_and_rewinds_a_truncated_one() {
        let open = FileAt { id: (1, 10), len: 500 };
        assert_eq!(follow_step(open, Some(FileAt { id: (1, 10), len: 500 })), FollowStep::Wait);
        assert_eq!(follow_step(open, Some(FileAt { id: (1, 10), len: 900 })), FollowStep::Wait, "grew: read on");
        assert_eq!(follow_step(open, Some(FileAt { id: (1, 11), len: 0 })), FollowStep::Reopen);
        assert_eq!(follow_step(open, Some(FileAt { id: (2, 10), len: 9000 })), FollowStep::Reopen);
        assert_eq!(follow_step(open, Some(FileAt { id: (1, 10), len: 20 })), FollowStep::Rewind);
        assert_eq!(follow_step(open, None), FollowStep::Wait, "renamed, the new one not made yet");
    }

    #[test]
    fn a_follower_goes_through_every_file_rotated_meanwhile_in_order() {
        let files = [(1, 10), (1, 11), (1, 12)];
        assert_eq!(next_file(&files, Some((1, 10))), Some(1));
        assert_eq!(next_file(&files, Some((1, 11))), Some(2));
        assert_eq!(next_file(&files, Some((1, 12))), None, "the newest: wait");
        assert_eq!(next_file(&files, Some((1, 9))), Some(0), "deleted: every file left is newer");
        assert_eq!(next_file(&files, None), Some(0));
        assert_eq!(next_file(&[], None), None);
        assert_eq!(next_file(&[], Some((1, 9))), None);
    }

    #[test]
    fn logs_are_printed_from_rotated_files_and_followed_across_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("0.log");
        fs::write(dir.path().join("0.log.20240501-100000"), numbered(0..2)).unwrap();
        fs::write(&live, numbered(2..4)).unwrap();
        let mut out = Vec::new();
        print_logs(&live, LogOptions { tail: Some(3), ..Default::default() }, &mut out, None).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "line 1\nline 2\nline 3\n");
        // Follow: the writer rotates twice between two looks, writes on, and the instance ends.
        let mut polls = 0;
        let (live2, dir2) = (live.clone(), dir.path().to_path_buf());
        let mut follow = move || {
            polls += 1;
            match polls {
                1 => {
                    let mut f = fs::OpenOptions::new().append(true).open(&live2).unwrap();
                    f.write_all(numbered(4..5).as_bytes()).unwrap();
                    fs::rename(&live2, dir2.join("0.log.20240501-110000")).unwrap();
                    fs::write(&live2, numbered(5..6)).unwrap();
                    fs::rename(&live2, dir2.join("0.log.20240501-120000")).unwrap();
                    Follow::Go
                }
                2 => Follow::Go,
                3 => {
                    fs::write(&live2, format!("{}{T} stdout F unfinished", numbered(6..7))).unwrap();
                    Follow::Finish
                }
                _ => panic!("asked again after Finish"),
            }
        };
        let mut out = Vec::new();
        print_logs(&live, LogOptions { tail: Some(1), ..Default::default() }, &mut out, Some(&mut follow)).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "line 3\nline 4\nline 5\nline 6\nunfinished\n");
    }

    #[test]
    fn no_log_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = print_logs(&dir.path().join("0.log"), LogOptions::default(), Vec::new(), None).unwrap_err();
        assert_eq!(e.to_string(), format!("no log file at {}", dir.path().join("0.log").display()));
    }

    /// A writer numbering its lines, rotating every 8 KiB and keeping 3 files (the process
    /// runtime's own writer), and a follower beside it: every line, in order, once.
    #[test]
    fn a_follower_beside_a_fast_rotating_writer_misses_no_line() {
        use crate::node::runtime::process::logfile::{LogFile, Stream as Out};
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("0.log");
        let total = 3_000;
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (live, done) = (live.clone(), done.clone());
            std::thread::spawn(move || {
                let mut log = LogFile::open(&live, 8 << 10, 3);
                for i in 0..total {
                    log.write_chunk(Out::Stdout, format!("line {i}\n").as_bytes());
                    if i % 10 == 0 {
                        // A rotation about every 200 ms, twice the follower's poll: 18 in all.
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
                log.finish();
                done.store(true, std::sync::atomic::Ordering::SeqCst);
            })
        };
        while !live.exists() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut follow = || {
            if done.load(std::sync::atomic::Ordering::SeqCst) {
                Follow::Finish
            } else {
                Follow::Go
            }
        };
        let mut out = Vec::new();
        print_logs(&live, LogOptions::default(), &mut out, Some(&mut follow)).unwrap();
        writer.join().unwrap();
        let text = String::from_utf8(out).unwrap();
        let got: Vec<usize> = text.lines().map(|l| l.strip_prefix("line ").unwrap().parse().unwrap()).collect();
        let first_gap = got.windows(2).find(|w| w[1] != w[0] + 1);
        assert_eq!(first_gap, None, "{} lines read, first {:?}, last {:?}", got.len(), got.first(), got.last());
        assert_eq!((got.first(), got.len()), (Some(&0), total));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// An RFC 3339 timestamp as containerd writes them.
        fn timestamp() -> impl Strategy<Value = String> {
            (1970u32..2100, 1u32..13, 1u32..29, 0u32..24, 0u32..60, 0u32..60, 0u32..1_000_000_000)
                .prop_map(|(y, mo, d, h, mi, s, ns)| format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{ns:09}Z"))
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn any_line_is_a_record_or_malformed_without_a_panic(line in prop::collection::vec(any::<u8>(), 0..512)) {
                if let Ok(r) = parse_record(&line) {
                    prop_assert!(r.timestamp.len() + r.content.len() < line.len());
                }
            }

            #[test]
            fn a_record_as_containerd_writes_it_parses_to_its_fields(
                ts in timestamp(),
                stdout in any::<bool>(),
                partial in any::<bool>(),
                subtag in proptest::option::of("[a-z0-9]{1,6}"),
                content in prop::collection::vec(any::<u8>().prop_filter("no newline", |b| *b != b'\n'), 0..256),
            ) {
                let stream = if stdout { "stdout" } else { "stderr" };
                let tag = if partial { "P" } else { "F" };
                let tag = match subtag {
                    Some(s) => format!("{tag}:{s}"),
                    None => tag.to_string(),
                };
                let mut line = format!("{ts} {stream} {tag} ").into_bytes();
                line.extend_from_slice(&content);
                let r = parse_record(&line).map_err(|e| TestCaseError::fail(format!("{e}")))?;
                prop_assert_eq!(r.timestamp, ts.as_bytes());
                prop_assert_eq!(r.stream, if stdout { Stream::Stdout } else { Stream::Stderr });
                prop_assert_eq!(r.partial, partial);
                prop_assert_eq!(r.content, &content[..]);
            }
        }
    }
}
