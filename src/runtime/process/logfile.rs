//! Container log files in the CRI format kubelet and `kubectl logs` read:
//! `<RFC3339Nano> <stream> <P|F> <content>`, one record per line, `P` for a partial line
//! (longer than the buffer), `F` for the full line or its last piece. Rotated by size:
//! `<name>.log` becomes `<name>.log.<YYYYMMDD-HHMMSS>`, keeping `max_files` in all.

use crate::runtime::logrotate;
use crate::timefmt::rfc3339_nano;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Longest content written in one record; longer lines are split into `P` records.
pub const MAX_LINE: usize = 16 * 1024;

/// Writes both output streams of one container into its log file.
pub struct LogFile {
    path: PathBuf,
    file: File,
    size: u64,
    max_size: u64,
    max_files: u32,
    pending: [Vec<u8>; 2],
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
    /// Opens (appending to) the log file at `path`, creating its directory.
    pub fn open(path: &Path, max_size: u64, max_files: u32) -> io::Result<LogFile> {
        if let Some(dir) = path.parent() {
            crate::util::create_private_dir_all(dir)?;
        }
        // Logs may hold whatever the workload prints, secrets included: owner (and the
        // configured state group) only.
        let file = crate::util::append_private_file(path)?;
        let size = file.metadata()?.len();
        Ok(LogFile {
            path: path.into(),
            file,
            size,
            max_size,
            max_files: max_files.max(1),
            pending: [Vec::new(), Vec::new()],
        })
    }

    /// Takes a chunk read from a stream; writes every complete line it finishes.
    pub fn write_chunk(&mut self, stream: Stream, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let buf_len = self.pending[stream as usize].len();
            match data.iter().position(|&b| b == b'\n') {
                Some(nl) if buf_len + nl <= MAX_LINE => {
                    let mut line = std::mem::take(&mut self.pending[stream as usize]);
                    line.extend_from_slice(&data[..nl]);
                    self.record(stream, b'F', &line)?;
                    data = &data[nl + 1..];
                }
                _ => {
                    let room = MAX_LINE - buf_len;
                    let take = data.len().min(room);
                    self.pending[stream as usize].extend_from_slice(&data[..take]);
                    data = &data[take..];
                    if self.pending[stream as usize].len() == MAX_LINE {
                        let line = std::mem::take(&mut self.pending[stream as usize]);
                        self.record(stream, b'P', &line)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes out what is left of unfinished lines (at stream end).
    pub fn finish(&mut self) -> io::Result<()> {
        for stream in [Stream::Stdout, Stream::Stderr] {
            let rest = std::mem::take(&mut self.pending[stream as usize]);
            if !rest.is_empty() {
                self.record(stream, b'F', &rest)?;
            }
        }
        self.file.flush()
    }

    fn record(&mut self, stream: Stream, tag: u8, content: &[u8]) -> io::Result<()> {
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
        self.file.write_all(&rec)?;
        self.size += rec.len() as u64;
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        fs::rename(&self.path, logrotate::rotation_path(&self.path, SystemTime::now()))?;
        self.file = crate::util::append_private_file(&self.path)?;
        self.size = 0;
        logrotate::prune_rotated(&self.path, self.max_files);
        Ok(())
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
                assert!(crate::timefmt::parse_rfc3339(ts).is_some(), "timestamp {ts}");
                (it.next().unwrap().into(), it.next().unwrap().into(), it.next().unwrap_or("").into())
            })
            .collect()
    }

    #[test]
    fn writes_full_and_partial_records_per_stream() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c/0.log");
        let mut lf = LogFile::open(&p, 1 << 20, 3).unwrap();
        lf.write_chunk(Stream::Stdout, b"hello\nwor").unwrap();
        lf.write_chunk(Stream::Stderr, b"oops\n").unwrap();
        lf.write_chunk(Stream::Stdout, b"ld\n").unwrap();
        let long = vec![b'x'; MAX_LINE + 10];
        lf.write_chunk(Stream::Stdout, &long).unwrap();
        lf.write_chunk(Stream::Stdout, b"\ntail").unwrap();
        lf.finish().unwrap();
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
        let mut lf = LogFile::open(&p, 4096, 3).unwrap();
        for i in 0..400 {
            lf.write_chunk(Stream::Stdout, format!("line number {i:05} with some padding text\n").as_bytes()).unwrap();
        }
        lf.finish().unwrap();
        let rotated = logrotate::rotated_files(&p);
        assert_eq!(rotated.len(), 2, "max_files 3 = live file + 2 rotated");
        assert!(fs::metadata(&p).unwrap().len() <= 4096);
        let last = records(&p).pop().unwrap();
        assert!(last.2.contains("00399"));
    }
}
