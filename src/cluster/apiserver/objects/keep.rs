//! The ConfigMaps, Secrets and tokens the node's pods use, kept under the state directory
//! (`<state_dir>/objects/`, 0700, each file 0600) so that an agent restarted while the
//! apiserver is away starts its pods with their volumes and environments. Every file is
//! sealed (`base::sealed`: ChaCha20-Poly1305) with the node-local key `apiserver.kept_key`,
//! which lives outside the state directory, and named files' names are their associated
//! data, so a file moved to another name does not open. Bounded: `MAX_KEPT_BYTES` in all,
//! `MAX_KEPT_FILES` files.

use crate::base::sealed::Sealer;
use crate::node::objects::{Object, ObjectRef, Token, TokenRef};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// At most this many bytes kept in all (sealed).
pub const MAX_KEPT_BYTES: u64 = 64 << 20;
/// At most this many files kept (and read at start).
pub const MAX_KEPT_FILES: usize = 4096;

/// One kept file's content.
#[derive(Serialize, Deserialize)]
enum Kept {
    Object(ObjectRef, KeptObject),
    Token(TokenRef, Token),
}

/// An object as kept: its values in base64 (JSON would spell bytes as numbers).
#[derive(Serialize, Deserialize)]
struct KeptObject {
    data: BTreeMap<String, String>,
    type_: String,
    resource_version: String,
    immutable: bool,
}

impl From<&Object> for KeptObject {
    fn from(o: &Object) -> Self {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD;
        KeptObject {
            data: o.data.iter().map(|(k, v)| (k.clone(), b64.encode(v))).collect(),
            type_: o.type_.clone(),
            resource_version: o.resource_version.clone(),
            immutable: o.immutable,
        }
    }
}

impl From<KeptObject> for Object {
    fn from(k: KeptObject) -> Self {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD;
        // Sealed: what opens is what was written, so every value decodes.
        let data = k.data.into_iter().map(|(key, v)| (key, b64.decode(v).unwrap_or_default())).collect();
        Object { data, type_: k.type_, resource_version: k.resource_version, immutable: k.immutable }
    }
}

/// Why something could not be kept or read.
#[derive(Debug, thiserror::Error)]
pub enum KeepError {
    /// The key could not be read or made.
    #[error("the key of the kept objects")]
    Key(#[source] crate::base::sealed::SealError),
    /// A file could not be written or removed.
    #[error("{path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The bound would be passed.
    #[error("{path}: keeping it would pass the bound of {MAX_KEPT_BYTES} bytes (or {MAX_KEPT_FILES} files) kept for offline restarts; it is not kept, and pods that use it cannot start while the apiserver is away")]
    Full {
        /// The file not written.
        path: PathBuf,
    },
}

/// What `Keep::load` found: objects, then tokens.
pub type Loaded = (Vec<(ObjectRef, Object)>, Vec<(TokenRef, Token)>);

/// The kept copies: a directory and the key that seals them.
pub struct Keep {
    dir: PathBuf,
    sealer: Sealer,
    /// Every kept file's name and size.
    sizes: BTreeMap<String, u64>,
}

/// The file name of object `r` (names and namespaces are DNS names: no `_`).
fn object_file(r: &ObjectRef) -> String {
    format!("{}_{}_{}", r.kind.word(), r.namespace, r.name)
}

/// The file name of token `r`: the pod's uid and a digest of the rest.
fn token_file(r: &TokenRef) -> String {
    use md5::{Digest, Md5};
    let mut h = Md5::new();
    h.update(format!("{}\n{}\n{}\n{}", r.namespace, r.service_account, r.audience, r.expiration_seconds).as_bytes());
    let digest: String = h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("token_{}_{digest}", r.pod_uid)
}

impl Keep {
    /// The kept copies in `dir` (made 0700), sealed with the key at `key` (made at first).
    pub fn open(dir: &Path, key: &Path) -> Result<Keep, KeepError> {
        let sealer = Sealer::open_or_create(key).map_err(KeepError::Key)?;
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let io = |source| KeepError::Io { path: dir.to_path_buf(), source };
        fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io)?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io)?;
        Ok(Keep { dir: dir.to_path_buf(), sealer, sizes: BTreeMap::new() })
    }

    /// Everything kept that opens; what does not (another key, damage) is logged and left
    /// (it is replaced when read again).
    pub fn load(&mut self) -> Loaded {
        let (mut objects, mut tokens) = (Vec::new(), Vec::new());
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) => {
                log::warn!("apiserver: cannot read the kept objects in {}: {e}", self.dir.display());
                return (objects, tokens);
            }
        };
        for entry in entries.take(MAX_KEPT_FILES) {
            let Ok(entry) = entry else { break };
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let path = entry.path();
            let opened = crate::base::inputfile::check(&path, MAX_KEPT_BYTES)
                .map_err(|e| e.to_string())
                .and_then(|_| fs::read(&path).map_err(|e| e.to_string()))
                .and_then(|sealed| self.sealer.open(&sealed, name.as_bytes()).map_err(|e| e.to_string()))
                .and_then(|plain| serde_json::from_slice::<Kept>(&plain).map_err(|e| e.to_string()));
            match opened {
                Ok(Kept::Object(r, o)) if object_file(&r) == name => objects.push((r, o.into())),
                Ok(Kept::Token(r, t)) if token_file(&r) == name => tokens.push((r, t)),
                Ok(_) => log::warn!(
                    "apiserver: the kept file {} holds another object than its name says; ignored",
                    path.display()
                ),
                Err(e) => {
                    log::warn!("apiserver: the kept file {} cannot be opened: {e}; ignored", path.display());
                    continue;
                }
            }
            self.sizes.insert(name, entry.metadata().map(|m| m.len()).unwrap_or(0));
        }
        (objects, tokens)
    }

    fn save(&mut self, name: String, kept: &Kept) -> Result<(), KeepError> {
        let path = self.dir.join(&name);
        let plain = serde_json::to_vec(kept).map_err(|e| KeepError::Io { path: path.clone(), source: e.into() })?;
        let sealed = self.sealer.seal(&plain, name.as_bytes());
        let others: u64 = self.sizes.iter().filter(|(n, _)| **n != name).map(|(_, s)| s).sum();
        if others + sealed.len() as u64 > MAX_KEPT_BYTES
            || (!self.sizes.contains_key(&name) && self.sizes.len() >= MAX_KEPT_FILES)
        {
            return Err(KeepError::Full { path });
        }
        let access = crate::base::state_files::StateAccess { gid: None };
        crate::base::state_files::write_atomic_mode(&path, &sealed, access, 0o600)
            .map_err(|source| KeepError::Io { path, source })?;
        self.sizes.insert(name, sealed.len() as u64);
        Ok(())
    }

    /// Keeps object `r` as `o`.
    pub fn save_object(&mut self, r: &ObjectRef, o: &Object) -> Result<(), KeepError> {
        self.save(object_file(r), &Kept::Object(r.clone(), o.into()))
    }

    /// Keeps token `r`.
    pub fn save_token(&mut self, r: &TokenRef, t: &Token) -> Result<(), KeepError> {
        self.save(token_file(r), &Kept::Token(r.clone(), t.clone()))
    }

    fn remove(&mut self, name: String) -> Result<(), KeepError> {
        let path = self.dir.join(&name);
        match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(KeepError::Io { path, source: e }),
            _ => {}
        }
        self.sizes.remove(&name);
        Ok(())
    }

    /// Forgets object `r`.
    pub fn remove_object(&mut self, r: &ObjectRef) -> Result<(), KeepError> {
        self.remove(object_file(r))
    }

    /// Forgets token `r`.
    pub fn remove_token(&mut self, r: &TokenRef) -> Result<(), KeepError> {
        self.remove(token_file(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::objects::Kind;
    use std::time::{Duration, SystemTime};

    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn temp() -> Dir {
        let d = std::env::temp_dir().join(format!(
            "ferrolet-keep-{}-{}",
            std::process::id(),
            crate::base::random::random_id()
        ));
        fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    #[test]
    fn what_is_kept_comes_back_sealed_and_only_under_its_own_name() {
        let d = temp();
        let (dir, key) = (d.0.join("state/objects"), d.0.join("etc/kept.key"));
        let mut keep = Keep::open(&dir, &key).unwrap();
        let r = ObjectRef { kind: Kind::Secret, namespace: "shop".into(), name: "db".into() };
        let o = Object { data: [("pw".to_string(), b"hunter2-plain".to_vec())].into(), ..Object::default() };
        keep.save_object(&r, &o).unwrap();
        let t = TokenRef {
            namespace: "shop".into(),
            service_account: "default".into(),
            pod_name: "web".into(),
            pod_uid: "u-1".into(),
            audience: String::new(),
            expiration_seconds: 3607,
        };
        let now = SystemTime::now();
        keep.save_token(
            &t,
            &Token { token: "eyJ.secret-token".into(), issued: now, expires: now + Duration::from_secs(60) },
        )
        .unwrap();
        for entry in fs::read_dir(&dir).unwrap() {
            let bytes = fs::read(entry.unwrap().path()).unwrap();
            let text = String::from_utf8_lossy(&bytes);
            assert!(!text.contains("hunter2") && !text.contains("secret-token"), "a kept file is plain text");
        }
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(fs::metadata(dir.join("secret_shop_db")).unwrap().permissions().mode() & 0o777, 0o600);
        let (objects, tokens) = Keep::open(&dir, &key).unwrap().load();
        assert_eq!(objects, [(r.clone(), o)]);
        assert_eq!(tokens.len(), 1);
        assert_eq!(tokens[0].1.token, "eyJ.secret-token");
        // A file renamed to another object's name does not open.
        fs::rename(dir.join("secret_shop_db"), dir.join("secret_shop_other")).unwrap();
        assert!(Keep::open(&dir, &key).unwrap().load().0.is_empty());
        keep.remove_token(&t).unwrap();
        assert!(Keep::open(&dir, &key).unwrap().load().1.is_empty());
    }

    #[test]
    fn keeping_past_the_bound_is_refused_with_the_file_and_the_bound() {
        let d = temp();
        let mut keep = Keep::open(&d.0.join("objects"), &d.0.join("kept.key")).unwrap();
        let big = Object { data: [("k".to_string(), vec![b'x'; 30 << 20])].into(), ..Object::default() };
        let r = |name: &str| ObjectRef { kind: Kind::ConfigMap, namespace: "shop".into(), name: name.into() };
        keep.save_object(&r("one"), &big).unwrap();
        let e = keep.save_object(&r("two"), &big).unwrap_err().to_string();
        assert!(e.contains("configmap_shop_two") && e.contains("67108864 bytes"), "{e}");
        // Replacing the one kept is within the bound.
        keep.save_object(&r("one"), &big).unwrap();
    }
}
