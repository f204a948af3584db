//! Reading files a user hands to ferrolet (pod manifests, the configuration): regular
//! files only, up to a size limit, without ever blocking. A FIFO, socket, device or
//! directory is refused without being opened (opening a FIFO blocks until a writer
//! comes; opening a device may act on it), and a file swapped for one after the check
//! is caught on the open file, which is opened non-blocking.

use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Why a file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InputFileError {
    /// Stat, open or read failed.
    #[error("cannot read")]
    Read(#[source] std::io::Error),
    /// Not a regular file (after following symbolic links).
    #[error("{kind}, not a regular file: only regular files (or links to them) are read")]
    NotRegular {
        /// `a FIFO`, `a socket`, …
        kind: &'static str,
    },
    /// Larger than the caller's limit.
    #[error("file is {len} bytes; at most {max} bytes are allowed")]
    TooLarge {
        /// The file's size (or what was read of it).
        len: u64,
        /// The limit.
        max: u64,
    },
    /// Not UTF-8.
    #[error("not UTF-8 text")]
    NotUtf8(#[source] std::string::FromUtf8Error),
}

/// What kind of file a file type is, for "is a FIFO, not a regular file".
fn kind(ft: std::fs::FileType) -> &'static str {
    match () {
        _ if ft.is_dir() => "a directory",
        _ if ft.is_fifo() => "a FIFO",
        _ if ft.is_socket() => "a socket",
        _ if ft.is_char_device() => "a character device",
        _ if ft.is_block_device() => "a block device",
        _ => "not a regular file",
    }
}

fn regular(md: Metadata, max: u64) -> Result<Metadata, InputFileError> {
    if !md.is_file() {
        return Err(InputFileError::NotRegular { kind: kind(md.file_type()) });
    }
    if md.len() > max {
        return Err(InputFileError::TooLarge { len: md.len(), max });
    }
    Ok(md)
}

/// Checks without opening: `path` is (or links to) a regular file of at most `max` bytes.
pub fn check(path: &Path, max: u64) -> Result<Metadata, InputFileError> {
    regular(std::fs::metadata(path).map_err(InputFileError::Read)?, max)
}

/// Reads a regular file of at most `max` bytes as text (see the module docs).
pub fn read_to_string(path: &Path, max: u64) -> Result<String, InputFileError> {
    check(path, max)?;
    let f: File =
        OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(InputFileError::Read)?;
    regular(f.metadata().map_err(InputFileError::Read)?, max)?;
    let mut data = Vec::new();
    // One byte more than allowed tells a file that grew since the check.
    f.take(max + 1).read_to_end(&mut data).map_err(InputFileError::Read)?;
    if data.len() as u64 > max {
        return Err(InputFileError::TooLarge { len: data.len() as u64, max });
    }
    String::from_utf8(data).map_err(InputFileError::NotUtf8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_files_are_refused_and_sizes_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("f");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_to_string(&fifo, 100).unwrap_err().to_string();
        assert_eq!(e, "a FIFO, not a regular file: only regular files (or links to them) are read");
        let e = read_to_string(dir.path(), 100).unwrap_err().to_string();
        assert!(e.starts_with("a directory, not a regular file"), "{e}");
        let e = read_to_string(Path::new("/dev/null"), 100).unwrap_err().to_string();
        assert!(e.starts_with("a character device, not a regular file"), "{e}");
        let f = dir.path().join("t");
        std::fs::write(&f, "12345").unwrap();
        assert_eq!(read_to_string(&f, 5).unwrap(), "12345");
        assert_eq!(read_to_string(&f, 4).unwrap_err().to_string(), "file is 5 bytes; at most 4 bytes are allowed");
    }
}
