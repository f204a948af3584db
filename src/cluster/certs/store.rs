//! The node's certificate files, kept as kubelet keeps them in its `--cert-dir`: each pair
//! (the certificate chain, then its key, PEM) in one dated file
//! `<prefix>-<YYYY-MM-DD-HH-MM-SS>.pem` (0600), and `<prefix>-current.pem` a symlink to the
//! one in use. A new pair is written whole and synced before the symlink moves to it (a
//! new symlink renamed over the old one), so a crash at any instant leaves the old pair or
//! the new one current, never a torn file. The directory is the owner's alone (0700). The
//! previous pair stays beside the current one; older ones are removed.

use crate::base::state_files::{self, StateAccess};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The most a pair file may hold.
const MAX_PAIR_BYTES: u64 = 64 << 10;

/// A certificate (chain) and its key, as read and checked.
#[derive(Clone)]
pub struct Pair {
    /// The chain, leaf first (PEM).
    pub cert_pem: Vec<u8>,
    /// The private key (PEM).
    pub key_pem: Vec<u8>,
    /// The leaf's notBefore.
    pub not_before: SystemTime,
    /// The leaf's notAfter.
    pub not_after: SystemTime,
    /// The leaf (DER).
    pub leaf: Vec<u8>,
}

impl std::fmt::Debug for Pair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Pair").field("not_before", &self.not_before).field("not_after", &self.not_after).finish()
    }
}

impl Pair {
    /// `cert_pem` and `key_pem` checked: the chain has a leaf whose validity can be read,
    /// and the key belongs to it.
    pub fn parse(cert_pem: &[u8], key_pem: &[u8]) -> Result<Pair, String> {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("the certificate is not PEM: {e}"))?;
        let leaf = chain.first().ok_or("no certificate")?.to_vec();
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("no usable private key: {e}"))?;
        let provider = rustls::crypto::ring::default_provider();
        rustls::sign::CertifiedKey::from_der(chain, key, &provider)
            .map_err(|e| format!("the key does not belong to the certificate: {e}"))?;
        let (not_before, not_after) = crate::base::x509::validity(&leaf).map_err(|e| e.to_string())?;
        Ok(Pair { cert_pem: cert_pem.to_vec(), key_pem: key_pem.to_vec(), not_before, not_after, leaf })
    }

    /// Whether it is valid at `now`.
    pub fn valid_at(&self, now: SystemTime) -> bool {
        self.not_before <= now && now < self.not_after
    }
}

/// A problem with the store: the path and the cause.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct StoreError {
    /// The file or directory.
    pub path: PathBuf,
    /// What went wrong, with its cause.
    pub message: String,
}

/// The pairs of one kind (`kubelet-client`, `kubelet-server`) in a directory.
#[derive(Clone, Debug)]
pub struct CertStore {
    dir: PathBuf,
    prefix: &'static str,
}

impl CertStore {
    /// The `prefix` pairs in `dir`.
    pub fn new(dir: &Path, prefix: &'static str) -> CertStore {
        CertStore { dir: dir.into(), prefix }
    }

    /// `<prefix>-current.pem`, what a kubeconfig names for both certificate and key.
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{}-current.pem", self.prefix))
    }

    /// The current pair; `None` when there is none yet.
    pub fn load(&self) -> Result<Option<Pair>, StoreError> {
        let path = self.current_path();
        if std::fs::symlink_metadata(&path).is_err() {
            return Ok(None);
        }
        let err = |message: String| StoreError { path: path.clone(), message };
        // Read through the symlink: the file it names is checked as any input file.
        let text = crate::base::inputfile::read_to_string(&path, MAX_PAIR_BYTES)
            .map_err(|e| err(crate::base::errors::Chain(&e).to_string()))?;
        Pair::parse(text.as_bytes(), text.as_bytes()).map(Some).map_err(err)
    }

    /// Writes `pair` as the new current one, named by `now`, and removes all but the
    /// previous one. Returns the dated file.
    pub fn update(&self, pair: &Pair, now: SystemTime) -> Result<PathBuf, StoreError> {
        let err =
            |path: &Path, what: &str, e: io::Error| StoreError { path: path.into(), message: format!("{what}: {e}") };
        ensure_private_dir(&self.dir).map_err(|e| err(&self.dir, "cannot make the directory private", e))?;
        // Two pairs in one second (a very short lifetime) get `-1`, `-2`: the previous one
        // is never overwritten.
        let base = format!("{}-{}", self.prefix, stamp(now));
        let name = (0..100)
            .map(|n| if n == 0 { format!("{base}.pem") } else { format!("{base}-{n}.pem") })
            .find(|n| std::fs::symlink_metadata(self.dir.join(n)).is_err())
            .ok_or_else(|| StoreError {
                path: self.dir.join(format!("{base}.pem")),
                message: "100 pairs in one second".into(),
            })?;
        let file = self.dir.join(&name);
        let mut data = pair.cert_pem.clone();
        if !data.ends_with(b"\n") {
            data.push(b'\n');
        }
        data.extend_from_slice(&pair.key_pem);
        // Owner only, whatever group the state directory is shared with: this holds a key.
        state_files::write_atomic_as(&file, &data, StateAccess { gid: None })
            .map_err(|e| err(&file, "cannot write", e))?;
        let current = self.current_path();
        let previous = std::fs::read_link(&current).ok();
        let tmp = self.dir.join(format!(".{}-current.pem.tmp", self.prefix));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&name, &tmp).map_err(|e| err(&tmp, "cannot make the symlink", e))?;
        std::fs::rename(&tmp, &current).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            err(&current, "cannot replace", e)
        })?;
        std::fs::File::open(&self.dir).and_then(|d| d.sync_all()).map_err(|e| err(&self.dir, "cannot sync", e))?;
        self.prune(&[Path::new(&name), previous.as_deref().unwrap_or(Path::new(""))]);
        Ok(file)
    }

    /// Removes the dated files other than `keep` (names in the directory).
    fn prune(&self, keep: &[&Path]) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        let current = format!("{}-current.pem", self.prefix);
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let dated = name.starts_with(&format!("{}-", self.prefix)) && name.ends_with(".pem") && name != current;
            if dated && !keep.iter().any(|k| k.file_name().is_some_and(|k| k.to_string_lossy() == name)) {
                if let Err(e) = std::fs::remove_file(entry.path()) {
                    log::warn!("certificates: cannot remove the old pair {}: {e}", entry.path().display());
                }
            }
        }
    }
}

/// Creates `dir` (0700) when missing, and makes it 0700 when it is not.
pub fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let mode = std::fs::metadata(dir)?.permissions().mode() & 0o777;
    if mode != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        log::warn!("certificates: {} was mode {mode:o}; it is 0700 now", dir.display());
    }
    Ok(())
}

/// `now` as kubelet names its pair files: `YYYY-MM-DD-HH-MM-SS`, UTC.
fn stamp(now: SystemTime) -> String {
    let t = crate::base::timefmt::rfc3339(now);
    // 2026-11-28T02:40:00Z
    t.trim_end_matches('Z').replace(['T', ':'], "-")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;

    fn pair(valid_for: Duration) -> Pair {
        let made = crate::base::x509::self_signed("system:node:n", &[], &[], SystemTime::now(), valid_for).unwrap();
        Pair::parse(made.cert_pem.as_bytes(), made.key_pem.as_bytes()).unwrap()
    }

    #[test]
    fn pairs_are_dated_files_behind_a_current_symlink_owner_only_and_two_are_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("pki");
        let store = CertStore::new(&dir, "kubelet-client");
        assert!(store.load().unwrap().is_none());
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        let first = pair(Duration::from_secs(3600));
        let file = store.update(&first, t0).unwrap();
        assert_eq!(file.file_name().unwrap(), "kubelet-client-2026-11-18-11-06-40.pem");
        assert_eq!(
            std::fs::read_link(store.current_path()).unwrap(),
            Path::new("kubelet-client-2026-11-18-11-06-40.pem")
        );
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        let loaded = store.load().unwrap().unwrap();
        assert_eq!(loaded.leaf, first.leaf);
        // The file is certificate then key, as kubelet writes it.
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.find("BEGIN CERTIFICATE").unwrap() < text.find("BEGIN PRIVATE KEY").unwrap());

        // A second pair in the same second does not overwrite the first.
        let again = pair(Duration::from_secs(3600));
        let file = store.update(&again, t0).unwrap();
        assert_eq!(file.file_name().unwrap(), "kubelet-client-2026-11-18-11-06-40-1.pem");
        assert_eq!(
            Pair::parse(
                &std::fs::read(dir.join("kubelet-client-2026-11-18-11-06-40.pem")).unwrap(),
                &std::fs::read(dir.join("kubelet-client-2026-11-18-11-06-40.pem")).unwrap()
            )
            .unwrap()
            .leaf,
            first.leaf
        );
        let second = pair(Duration::from_secs(7200));
        store.update(&second, t0 + Duration::from_secs(60)).unwrap();
        let third = pair(Duration::from_secs(7200));
        store.update(&third, t0 + Duration::from_secs(120)).unwrap();
        assert_eq!(store.load().unwrap().unwrap().leaf, third.leaf);
        let mut names: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "kubelet-client-2026-11-18-11-07-40.pem",
                "kubelet-client-2026-11-18-11-08-40.pem",
                "kubelet-client-current.pem"
            ],
            "the previous pair is kept, older ones go"
        );
    }

    #[test]
    fn the_current_pair_is_replaced_atomically_and_a_bad_one_is_an_error_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        let store = CertStore::new(tmp.path(), "kubelet-server");
        let old = pair(Duration::from_secs(3600));
        store.update(&old, SystemTime::now()).unwrap();
        // A crash after the new file was written but before the symlink moved: the old
        // pair is still current, and the next update goes through.
        let stray = tmp.path().join(".kubelet-server-current.pem.tmp");
        std::os::unix::fs::symlink("nowhere", &stray).unwrap();
        let new = pair(Duration::from_secs(3600));
        store.update(&new, SystemTime::now() + Duration::from_secs(1)).unwrap();
        assert_eq!(store.load().unwrap().unwrap().leaf, new.leaf);
        assert!(!stray.exists() && std::fs::symlink_metadata(&stray).is_err());
        // A pair whose key is another's is refused.
        let other = pair(Duration::from_secs(3600));
        assert!(Pair::parse(&new.cert_pem, &other.key_pem).unwrap_err().contains("does not belong"));
        std::fs::write(tmp.path().join("kubelet-server-9999.pem"), "junk").unwrap();
        std::os::unix::fs::symlink("kubelet-server-9999.pem", tmp.path().join("x")).unwrap();
        std::fs::rename(tmp.path().join("x"), store.current_path()).unwrap();
        let e = store.load().unwrap_err();
        assert!(e.to_string().starts_with(&store.current_path().display().to_string()), "{e}");
    }
}
