//! Secrets at rest: the kept copies of Secrets and service account tokens under the state
//! directory are sealed (ChaCha20-Poly1305) with a key of this node's, so a copy of the
//! state directory taken elsewhere (a backup, a disk image) does not give them away. The
//! key lives in a file of its own, made at first start; the associated data of each sealed
//! file is the kept file's logical name, so two sealed files swapped on disk fail to open.
//!
//! A sealed file is `FLS1`, a random 12-byte nonce, then the ciphertext and its 16-byte tag.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The first bytes of every sealed file (the format's version is its last byte).
pub const MAGIC: &[u8; 4] = b"FLS1";

/// Length of the key in the key file, in bytes.
pub const KEY_LEN: usize = 32;

/// Length of the authentication tag at the end of a sealed file.
const TAG_LEN: usize = 16;

/// The shortest sealed file: magic, nonce and tag around an empty plaintext.
const MIN_SEALED_LEN: usize = MAGIC.len() + NONCE_LEN + TAG_LEN;

/// What failed while getting the key, sealing or opening.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// The key file exists but could not be read.
    #[error("cannot read the sealing key {}", path.display())]
    ReadKey {
        /// The key file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The key file is not one this node would have made: its kind, mode, owner or size.
    #[error("the sealing key {} {problem}", path.display())]
    BadKey {
        /// The key file.
        path: PathBuf,
        /// What is wrong with it, and what is expected.
        problem: String,
    },
    /// A new key could not be made (its directory, the temporary file, or the link).
    #[error("cannot make the sealing key {}", path.display())]
    CreateKey {
        /// The key file that was to be made.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The kernel's random source failed (while making a key).
    #[error("the random source failed")]
    Random,
    /// The data does not start with `FLS1`: not a sealed file, or one of another format.
    #[error("not a sealed file: it does not start with {:?}", String::from_utf8_lossy(MAGIC))]
    Magic,
    /// The data is shorter than magic, nonce and tag.
    #[error("a sealed file of {len} bytes is too short: it takes at least {MIN_SEALED_LEN}")]
    Short {
        /// The length of what was given.
        len: usize,
    },
    /// Authentication failed: sealed with another key, changed since, or sealed for
    /// another name (the associated data).
    #[error("the sealed file does not authenticate: it was sealed with another key or for another name, or has been changed")]
    Authentication,
}

/// Seals and opens with this node's key.
pub struct Sealer {
    key: LessSafeKey,
    random: SystemRandom,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Sealer").finish_non_exhaustive()
    }
}

impl Sealer {
    /// The sealer with the key in `key_path`, made there first if there is none: the key
    /// file must be a regular file of `KEY_LEN` bytes, owned by this process's uid, that
    /// neither group nor others may access (`0600`). A new key appears whole or not at all,
    /// and never replaces one that another start made meanwhile.
    pub fn open_or_create(key_path: &Path) -> Result<Sealer, SealError> {
        let key = match read_key(key_path) {
            Err(SealError::ReadKey { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                create_key(key_path)?;
                // What is there now: this start's key, or the one a racing start linked first.
                read_key(key_path)?
            }
            other => other?,
        };
        remove_stale_temps(key_path);
        Ok(Sealer::with_key(&key))
    }

    /// A sealer with `key`.
    fn with_key(key: &[u8; KEY_LEN]) -> Sealer {
        // ChaCha20-Poly1305 takes any 32-byte key; the length is the type's.
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, key).expect("a 32-byte ChaCha20-Poly1305 key");
        Sealer { key: LessSafeKey::new(unbound), random: SystemRandom::new() }
    }

    /// `plaintext` sealed for `aad` (the kept file's logical name): `FLS1`, a random nonce,
    /// the ciphertext and its tag.
    ///
    /// # Panics
    ///
    /// When the kernel's random source fails, which `getrandom(2)` does not do once the
    /// system has started: a nonce must never be reused, and there is nothing safe to fall
    /// back to.
    pub fn seal(&self, plaintext: &[u8], aad: &[u8]) -> Vec<u8> {
        // A random 96-bit nonce: after 2^32 sealings with one key the chance of a repeat is
        // still below 2^-32, far more than one node writes.
        let mut nonce = [0u8; NONCE_LEN];
        self.random.fill(&mut nonce).expect("the kernel's random source (getrandom) failed");
        let mut out = Vec::with_capacity(MIN_SEALED_LEN + plaintext.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&nonce);
        let mut body = plaintext.to_vec();
        // Fails only beyond ChaCha20's 256 GiB per message, which no kept file comes near.
        self.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), &mut body)
            .expect("a plaintext under ChaCha20-Poly1305's 256 GiB limit");
        out.extend_from_slice(&body);
        out
    }

    /// The plaintext of `sealed`, which `seal` made for `aad`; refused when it is not a
    /// sealed file, is cut short, or does not authenticate.
    pub fn open(&self, sealed: &[u8], aad: &[u8]) -> Result<Vec<u8>, SealError> {
        if !sealed.starts_with(MAGIC) {
            return Err(if sealed.len() < MAGIC.len() {
                SealError::Short { len: sealed.len() }
            } else {
                SealError::Magic
            });
        }
        if sealed.len() < MIN_SEALED_LEN {
            return Err(SealError::Short { len: sealed.len() });
        }
        let (nonce, body) = sealed[MAGIC.len()..].split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Short { len: sealed.len() })?;
        let mut body = body.to_vec();
        let plain = self.key.open_in_place(nonce, Aad::from(aad), &mut body).map_err(|_| SealError::Authentication)?;
        let n = plain.len();
        body.truncate(n);
        Ok(body)
    }
}

/// Reads and checks the key file at `path`. A symbolic link there is refused, not followed.
fn read_key(path: &Path) -> Result<[u8; KEY_LEN], SealError> {
    let read_err = |source| SealError::ReadKey { path: path.to_path_buf(), source };
    let bad = |problem: String| SealError::BadKey { path: path.to_path_buf(), problem };
    let file = match fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(path) {
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(bad("is a symbolic link; it must be a regular file".into()))
        }
        r => r.map_err(read_err)?,
    };
    let meta = file.metadata().map_err(read_err)?;
    if !meta.is_file() {
        return Err(bad("is not a regular file".into()));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(bad(format!("has mode {mode:04o}: group and others must have no access to it (0600)")));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if meta.uid() != uid {
        return Err(bad(format!("is owned by uid {}; it must be owned by this process's uid {uid}", meta.uid())));
    }
    let mut key = Vec::with_capacity(KEY_LEN + 1);
    file.take(KEY_LEN as u64 + 1).read_to_end(&mut key).map_err(read_err)?;
    <[u8; KEY_LEN]>::try_from(key.as_slice()).map_err(|_| {
        let size = if key.len() > KEY_LEN { format!("more than {KEY_LEN}") } else { key.len().to_string() };
        bad(format!("holds {size} bytes; a key is exactly {KEY_LEN}"))
    })
}

/// Makes a new random key at `path` (its directory `0700` when missing): written whole to
/// a temporary file beside it, synced, then linked into place, which fails rather than
/// replace a key another start linked first (that one is kept).
fn create_key(path: &Path) -> Result<(), SealError> {
    let fail = |source| SealError::CreateKey { path: path.to_path_buf(), source };
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(fail)?;
    let mut key = [0u8; KEY_LEN];
    SystemRandom::new().fill(&mut key).map_err(|_| SealError::Random)?;
    let tmp = temp_path(path);
    let linked = write_key_file(&tmp, &key).and_then(|()| match fs::hard_link(&tmp, path) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        r => r,
    });
    let _ = fs::remove_file(&tmp);
    linked.map_err(fail)?;
    // The key must outlast a power cut: what was sealed with it is unreadable without it.
    File::open(dir).and_then(|d| d.sync_all()).map_err(fail)
}

/// Writes `key` into the new file `tmp` (`0600`, never through a symbolic link) and syncs it.
fn write_key_file(tmp: &Path, key: &[u8]) -> io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(tmp)?;
    // The umask can only have taken bits away; set exactly what the key's check wants.
    f.set_permissions(fs::Permissions::from_mode(0o600))?;
    f.write_all(key)?;
    f.sync_all()
}

/// The prefix of the temporary files of key file `path`'s name: `.<name>.tmp.`.
fn temp_prefix(path: &Path) -> String {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    format!(".{name}.tmp.")
}

/// A temporary file beside `path` that no other start picks: `.<name>.tmp.<pid>.<random>`.
fn temp_path(path: &Path) -> PathBuf {
    let unique = format!("{}{}.{}", temp_prefix(path), std::process::id(), &crate::base::random::random_id()[..12]);
    path.with_file_name(unique)
}

/// Removes the temporary files of `path` that a start which died mid-write left (its pid
/// is gone). A live start's file is left alone, since it is about to link it.
fn remove_stale_temps(path: &Path) {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let prefix = temp_prefix(path);
    let Ok(entries) = fs::read_dir(dir) else { return };
    // The key's directory is small and private; a bound keeps a crowded one cheap.
    for entry in entries.take(4096).flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(&prefix).and_then(|rest| rest.split('.').next()) else { continue };
        let Ok(pid) = pid.parse::<libc::pid_t>() else { continue };
        if pid > 0 && !process_exists(pid) {
            match fs::remove_file(entry.path()) {
                Ok(()) => {
                    log::info!("sealed: removed {}, left by a start that died making the key", entry.path().display())
                }
                Err(e) => log::warn!("sealed: cannot remove {}: {e}", entry.path().display()),
            }
        }
    }
}

/// Whether process `pid` exists (signal 0 reaches it, or it exists under another uid).
fn process_exists(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 checks the target and sends nothing.
    unsafe { libc::kill(pid, 0) == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealer() -> Sealer {
        Sealer::with_key(&[7u8; KEY_LEN])
    }

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn sealed_data_opens_to_the_plaintext_for_the_same_name() {
        let s = sealer();
        let sealed = s.seal(b"token", b"secrets/default/db/password");
        assert!(sealed.starts_with(MAGIC));
        assert_eq!(sealed.len(), MIN_SEALED_LEN + 5);
        assert!(!sealed.windows(5).any(|w| w == b"token"), "the plaintext is not in the clear");
        assert_eq!(s.open(&sealed, b"secrets/default/db/password").unwrap(), b"token");
        assert_eq!(s.open(&s.seal(b"", b"n"), b"n").unwrap(), b"");
    }

    #[test]
    fn each_sealing_takes_a_new_nonce() {
        let s = sealer();
        assert_ne!(s.seal(b"same", b"n"), s.seal(b"same", b"n"));
    }

    #[test]
    fn another_key_does_not_open_it() {
        let sealed = sealer().seal(b"token", b"n");
        let e = Sealer::with_key(&[8u8; KEY_LEN]).open(&sealed, b"n").unwrap_err();
        assert!(matches!(e, SealError::Authentication), "{e}");
        assert!(e.to_string().contains("another key"), "{e}");
    }

    #[test]
    fn any_flipped_byte_fails_authentication() {
        let s = sealer();
        let sealed = s.seal(b"token", b"n");
        for i in MAGIC.len()..sealed.len() {
            let mut changed = sealed.clone();
            changed[i] ^= 0x01;
            assert!(matches!(s.open(&changed, b"n"), Err(SealError::Authentication)), "byte {i}");
        }
    }

    #[test]
    fn a_file_sealed_for_another_name_does_not_open() {
        let s = sealer();
        let sealed = s.seal(b"token", b"tokens/default/a");
        assert!(matches!(s.open(&sealed, b"tokens/default/b"), Err(SealError::Authentication)));
    }

    #[test]
    fn wrong_magic_and_short_input_are_told_apart_from_a_failed_authentication() {
        let s = sealer();
        let mut sealed = s.seal(b"token", b"n");
        sealed[3] = b'2';
        let e = s.open(&sealed, b"n").unwrap_err();
        assert!(matches!(e, SealError::Magic), "{e}");
        assert_eq!(e.to_string(), "not a sealed file: it does not start with \"FLS1\"");
        assert!(matches!(s.open(b"plain text", b"n"), Err(SealError::Magic)));
        assert!(matches!(s.open(b"FL", b"n"), Err(SealError::Short { len: 2 })));
        let cut = &s.seal(b"", b"n")[..MIN_SEALED_LEN - 1];
        let e = s.open(cut, b"n").unwrap_err();
        assert_eq!(e.to_string(), "a sealed file of 31 bytes is too short: it takes at least 32");
    }

    #[test]
    fn the_key_is_made_private_at_first_start_and_reused_after() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys/node.key");
        let first = Sealer::open_or_create(&path).unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&dir.path().join("keys")), 0o700);
        assert_eq!(fs::metadata(&path).unwrap().len(), KEY_LEN as u64);
        let key = fs::read(&path).unwrap();
        let sealed = first.seal(b"token", b"n");
        let second = Sealer::open_or_create(&path).unwrap();
        assert_eq!(fs::read(&path).unwrap(), key, "the key is kept, not made anew");
        assert_eq!(second.open(&sealed, b"n").unwrap(), b"token");
        assert_eq!(fs::read_dir(dir.path().join("keys")).unwrap().count(), 1, "no temporary file is left");
    }

    #[test]
    fn starts_racing_for_the_first_key_all_get_the_same_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.key");
        let sealed: Vec<Vec<u8>> = std::thread::scope(|s| {
            let starts: Vec<_> =
                (0..8).map(|_| s.spawn(|| Sealer::open_or_create(&path).unwrap().seal(b"x", b"n"))).collect();
            starts.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let s = Sealer::open_or_create(&path).unwrap();
        for one in &sealed {
            assert_eq!(s.open(one, b"n").unwrap(), b"x");
        }
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_key_others_may_read_is_refused_with_its_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.key");
        fs::write(&path, [1u8; KEY_LEN]).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let e = Sealer::open_or_create(&path).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "the sealing key {} has mode 0644: group and others must have no access to it (0600)",
                path.display()
            )
        );
        assert_eq!(fs::read(&path).unwrap(), [1u8; KEY_LEN], "a refused key is left as it is");
    }

    #[test]
    fn a_key_of_the_wrong_size_is_refused_with_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.key");
        for (len, said) in [(0, "holds 0 bytes"), (31, "holds 31 bytes"), (64, "holds more than 32 bytes")] {
            fs::write(&path, vec![1u8; len]).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
            let e = Sealer::open_or_create(&path).unwrap_err().to_string();
            assert_eq!(e, format!("the sealing key {} {said}; a key is exactly 32", path.display()));
        }
    }

    #[test]
    fn a_key_that_is_a_link_a_directory_or_someone_elses_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.key");
        fs::write(&real, [1u8; KEY_LEN]).unwrap();
        fs::set_permissions(&real, fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("link.key");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = Sealer::open_or_create(&link).unwrap_err().to_string();
        assert!(e.ends_with("link.key is a symbolic link; it must be a regular file"), "{e}");
        let sub = dir.path().join("sub.key");
        fs::DirBuilder::new().mode(0o700).create(&sub).unwrap();
        let e = Sealer::open_or_create(&sub).unwrap_err().to_string();
        assert!(e.ends_with("sub.key is not a regular file"), "{e}");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(&real, Some(65534), None).unwrap();
            let e = Sealer::open_or_create(&real).unwrap_err().to_string();
            assert!(e.ends_with("is owned by uid 65534; it must be owned by this process's uid 0"), "{e}");
        }
    }

    #[test]
    fn a_temporary_key_a_crash_left_neither_breaks_the_next_start_nor_stays() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.key");
        // A start that died mid-write: its pid is gone, its key half written.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        child.wait().unwrap();
        let left = dir.path().join(format!(".node.key.tmp.{}.0123456789ab", child.id()));
        fs::write(&left, [9u8; 5]).unwrap();
        // One of a start that is still running (this process) is left for it.
        let live = dir.path().join(format!(".node.key.tmp.{}.ba9876543210", std::process::id()));
        fs::write(&live, [9u8; 5]).unwrap();
        let s = Sealer::open_or_create(&path).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), KEY_LEN as u64);
        assert!(!left.exists(), "the dead start's temporary file is removed");
        assert!(live.exists(), "a live start's temporary file is left");
        let sealed = s.seal(b"x", b"n");
        assert_eq!(Sealer::open_or_create(&path).unwrap().open(&sealed, b"n").unwrap(), b"x");
    }
}
