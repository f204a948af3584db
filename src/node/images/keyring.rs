//! Registry credentials for image pulls, as kubelet's `pkg/credentialprovider` keyring
//! (`keyring.go`, `config.go`) decides them: which of the credentials a pod (or the node)
//! has may be sent with the pull of a given image, and in which order to try them. Pure: it
//! reads bytes it is handed and answers with `PullAuth`s; it fetches no Secret and reads no
//! file.
//!
//! The pod manager asks it for each pull (`pods/images.rs`). The sources are:
//!
//! - a Secret of type `kubernetes.io/dockerconfigjson`, key `.dockerconfigjson`:
//!   `{"auths": {"<registry>": {"username", "password", "auth", ...}}}`, which is also the
//!   shape of a node-wide docker `config.json` (`parse_dockerconfigjson`);
//! - a Secret of type `kubernetes.io/dockercfg`, key `.dockercfg`: the same map without the
//!   `auths` wrapper (`parse_dockercfg`).
//!
//! A registry key is a host with an optional port and path (`registry.example.com:5000/team`),
//! perhaps with a scheme; its host labels may be globs (`*.example.com`). The credentials
//! of a key are offered for an image when the host, the port and the leading path segments
//! match (`Keyring::lookup`); `candidates` merges several sources in order.

use crate::node::images::reference;
use crate::node::runtime::PullAuth;
use base64::Engine as _;
use serde_json::{Map, Value};

/// The largest config accepted, in bytes (a Secret holds at most 1 MiB).
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// The most registries one config may name.
pub const MAX_ENTRIES: usize = 1000;

/// Docker Hub's name here: the other names it goes by are read as this one.
const DOCKER_HUB: &str = "docker.io";

/// The names Docker Hub goes by in configs and image references.
const DOCKER_HUB_ALIASES: [&str; 3] = ["docker.io", "index.docker.io", "registry-1.docker.io"];

/// Why a config was refused. No message repeats a secret's content: JSON errors say only
/// where the input went wrong.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyringError {
    /// The input is longer than `MAX_CONFIG_BYTES`.
    #[error("the registry config is {size} bytes, more than the {limit} allowed")]
    TooLarge {
        /// Its length.
        size: usize,
        /// `MAX_CONFIG_BYTES`.
        limit: usize,
    },
    /// The input names more registries than `MAX_ENTRIES`.
    #[error("the registry config has {count} entries, more than the {limit} allowed")]
    TooManyEntries {
        /// How many it has.
        count: usize,
        /// `MAX_ENTRIES`.
        limit: usize,
    },
    /// The input is not JSON of the expected shape.
    #[error("the registry config is not valid: {kind} at line {line}, column {column}")]
    BadJson {
        /// What went wrong: `syntax`, `data` (a value of the wrong type) or `eof`.
        kind: &'static str,
        /// Where (1-based).
        line: usize,
        /// Where (1-based).
        column: usize,
    },
    /// A value is not of the type it must have (an object, or a string).
    #[error("{what} is not {expected}")]
    WrongType {
        /// Which value: `auths`, a registry's entry, or a field of one.
        what: String,
        /// `an object` or `a string`.
        expected: &'static str,
    },
    /// An entry's `auth` is not `base64(username:password)`.
    #[error("the auth of registry {registry:?} is not base64(username:password): {reason}")]
    BadAuth {
        /// The entry's key, as written.
        registry: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl From<serde_json::Error> for KeyringError {
    fn from(e: serde_json::Error) -> KeyringError {
        let kind = match e.classify() {
            serde_json::error::Category::Io => "io",
            serde_json::error::Category::Syntax => "syntax",
            serde_json::error::Category::Data => "data",
            serde_json::error::Category::Eof => "eof",
        };
        KeyringError::BadJson { kind, line: e.line(), column: e.column() }
    }
}

/// Where a registry key says its credentials apply: a host (whose labels may be globs), a
/// port, and leading path segments.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Pattern {
    /// Lowercase, Docker Hub's aliases as `docker.io`; `[…]` kept around an IPv6 address.
    host: String,
    /// The port, when the key names one.
    port: Option<String>,
    /// The path without leading or trailing `/`; empty for the whole registry.
    path: String,
}

impl Pattern {
    /// What entries are sorted by: `host[:port][/path]`.
    fn sort_key(&self) -> String {
        let mut key = self.host.clone();
        if let Some(port) = &self.port {
            key = format!("{key}:{port}");
        }
        if !self.path.is_empty() {
            key = format!("{key}/{}", self.path);
        }
        key
    }
}

/// The credentials of one source (a Secret, or the node's config), with where each applies.
#[derive(Clone, Debug, Default)]
pub struct Keyring {
    entries: Vec<(Pattern, PullAuth)>,
}

impl Keyring {
    /// Reads a `.dockerconfigjson` (a Secret of type `kubernetes.io/dockerconfigjson`) or a
    /// docker `config.json`: `{"auths": {"<registry>": {...}}}`. A config without `auths`
    /// has no credentials.
    pub fn parse_dockerconfigjson(data: &[u8]) -> Result<Keyring, KeyringError> {
        check_size(data)?;
        let top: Map<String, Value> = serde_json::from_slice(data)?;
        match top.get("auths") {
            None | Some(Value::Null) => Ok(Keyring::default()),
            Some(Value::Object(auths)) => Keyring::from_entries(auths),
            Some(_) => Err(KeyringError::WrongType { what: "`auths`".into(), expected: "an object" }),
        }
    }

    /// Reads a `.dockercfg` (a Secret of type `kubernetes.io/dockercfg`): the registries'
    /// map itself, `{"<registry>": {...}}`.
    pub fn parse_dockercfg(data: &[u8]) -> Result<Keyring, KeyringError> {
        check_size(data)?;
        let entries: Map<String, Value> = serde_json::from_slice(data)?;
        Keyring::from_entries(&entries)
    }

    /// The entries of a registries' map, in the order written. An entry's unknown fields
    /// (`email`, ...) are ignored; `null` stands for an empty entry or field, as in Go.
    fn from_entries(raw: &Map<String, Value>) -> Result<Keyring, KeyringError> {
        if raw.len() > MAX_ENTRIES {
            return Err(KeyringError::TooManyEntries { count: raw.len(), limit: MAX_ENTRIES });
        }
        let mut entries = Vec::with_capacity(raw.len());
        for (registry, entry) in raw {
            let empty = Map::new();
            let entry = match entry {
                Value::Object(e) => e,
                Value::Null => &empty,
                _ => {
                    let what = format!("the entry of registry {registry:?}");
                    return Err(KeyringError::WrongType { what, expected: "an object" });
                }
            };
            let field = |name: &str| match entry.get(name) {
                None | Some(Value::Null) => Ok(String::new()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(_) => {
                    let what = format!("the field `{name}` of registry {registry:?}");
                    Err(KeyringError::WrongType { what, expected: "a string" })
                }
            };
            let (mut username, mut password, auth) = (field("username")?, field("password")?, field("auth")?);
            if !auth.is_empty() {
                (username, password) = decode_auth(&auth)
                    .map_err(|reason| KeyringError::BadAuth { registry: registry.clone(), reason })?;
            }
            let (identity_token, registry_token) = (field("identitytoken")?, field("registrytoken")?);
            // A key that names no host can match no image; kubelet skips it too.
            let Some(pattern) = parse_key(registry) else { continue };
            // As kubelet's keyring: no server address (containerd 1.6 refuses one without a
            // scheme, `127.0.0.1:5000`, and the match is made here already).
            let server_address = String::new();
            entries
                .push((pattern, PullAuth { username, password, auth, server_address, identity_token, registry_token }));
        }
        Ok(Keyring { entries })
    }

    /// How many registry entries it has.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The credentials that apply to `image` (`host:5000/a/b:tag@sha256:…`, or a Docker Hub
    /// name such as `busybox`), the most specific key first (keys in reverse lexical order,
    /// as kubelet's), for the caller to try in turn. Empty when none applies, or when
    /// `image` is not a valid reference.
    pub fn lookup(&self, image: &str) -> Vec<PullAuth> {
        let Some(target) = image_target(image) else { return Vec::new() };
        let mut found: Vec<(String, &PullAuth)> =
            self.entries.iter().filter(|(p, _)| applies(p, &target)).map(|(p, a)| (p.sort_key(), a)).collect();
        // Stable: entries under the same key keep their order.
        found.sort_by(|a, b| b.0.cmp(&a.0));
        found.into_iter().map(|(_, a)| a.clone()).collect()
    }
}

/// The credentials to try for `image`, from several sources in the order given (the pod's
/// `imagePullSecrets` in their order, then the node's config): each source's matches, most
/// specific first, and any credentials already offered (the same user, password and
/// tokens, for whatever key) left out.
pub fn candidates(keyrings: &[&Keyring], image: &str) -> Vec<PullAuth> {
    let mut out: Vec<PullAuth> = Vec::new();
    for keyring in keyrings {
        for auth in keyring.lookup(image) {
            if !out.iter().any(|seen| same_credentials(seen, &auth)) {
                out.push(auth);
            }
        }
    }
    out
}

/// Whether two entries carry the same credentials, whatever registry key they were under.
fn same_credentials(a: &PullAuth, b: &PullAuth) -> bool {
    a.username == b.username
        && a.password == b.password
        && a.identity_token == b.identity_token
        && a.registry_token == b.registry_token
}

fn check_size(data: &[u8]) -> Result<(), KeyringError> {
    if data.len() > MAX_CONFIG_BYTES {
        return Err(KeyringError::TooLarge { size: data.len(), limit: MAX_CONFIG_BYTES });
    }
    Ok(())
}

/// `base64(username:password)` into its two halves; the password may hold `:`.
fn decode_auth(auth: &str) -> Result<(String, String), &'static str> {
    let bytes = base64::engine::general_purpose::STANDARD.decode(auth.trim()).map_err(|_| "not base64")?;
    let text = String::from_utf8(bytes).map_err(|_| "not UTF-8 once decoded")?;
    let (user, password) = text.split_once(':').ok_or("no ':' between username and password")?;
    Ok((user.to_string(), password.to_string()))
}

/// Splits `host[:port]` (the host possibly a bracketed IPv6 address) and lowercases the
/// host, reading Docker Hub's aliases as `docker.io`.
fn host_port(domain: &str) -> (String, Option<String>) {
    let (host, port) = match domain.strip_prefix('[').and_then(|v6| v6.split_once(']')) {
        Some((addr, after)) => (format!("[{addr}]"), after.strip_prefix(':')),
        None => match domain.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (domain.to_string(), None),
        },
    };
    let mut host = host.to_ascii_lowercase();
    if DOCKER_HUB_ALIASES.contains(&host.as_str()) {
        host = DOCKER_HUB.to_string();
    }
    (host, port.filter(|p| !p.is_empty()).map(str::to_string))
}

/// A config key (`https://index.docker.io/v1/`, `registry.example.com:5000/team/`,
/// `*.example.com`) as a pattern: the scheme dropped, and a leading `/v1` or `/v2` (the
/// registry API's version, as Docker writes it) and surrounding `/` dropped from the path.
/// `None` when it names no host.
fn parse_key(key: &str) -> Option<Pattern> {
    let key = key.trim();
    let rest = key.strip_prefix("https://").or_else(|| key.strip_prefix("http://")).unwrap_or(key);
    let (domain, path) = rest.split_once('/').unwrap_or((rest, ""));
    let path = path.trim_matches('/');
    let path = match path.split_once('/') {
        Some(("v1" | "v2", after)) => after,
        None if path == "v1" || path == "v2" => "",
        _ => path,
    };
    let (host, port) = host_port(domain);
    if host.is_empty() {
        return None;
    }
    Some(Pattern { host, port, path: path.trim_matches('/').to_string() })
}

/// What an image is matched on: its registry's host and port, and its repository path, a
/// name without registry being Docker Hub's (`busybox` is `docker.io/library/busybox`).
fn image_target(image: &str) -> Option<Pattern> {
    reference::check(image).ok()?;
    let parts = reference::split(image);
    let (host, port) = host_port(parts.domain.unwrap_or(DOCKER_HUB));
    let path = if host == DOCKER_HUB && !parts.path.contains('/') {
        format!("library/{}", parts.path)
    } else {
        parts.path.to_string()
    };
    Some(Pattern { host, port, path })
}

/// Whether a key's pattern applies to an image's target: the same port (or both none),
/// the same number of host labels each matching its glob, and the key's path segments
/// leading the image's path (`reg/a` covers `reg/a/b`, not `reg/ab`).
fn applies(key: &Pattern, image: &Pattern) -> bool {
    if key.port != image.port {
        return false;
    }
    let (key_labels, image_labels): (Vec<&str>, Vec<&str>) =
        (key.host.split('.').collect(), image.host.split('.').collect());
    if key_labels.len() != image_labels.len() || !key_labels.iter().zip(&image_labels).all(|(k, i)| glob(k, i)) {
        return false;
    }
    if key.path.is_empty() {
        return true;
    }
    let mut image_segments = image.path.split('/');
    key.path.split('/').all(|k| image_segments.next() == Some(k))
}

/// Whether `text` (one host label) matches `pattern`, where `*` stands for any run of
/// characters and `?` for one.
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // Classic wildcard matching: remember the last `*` and how much of the text it took.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    /// A keyring whose entry for each key has that key as its username.
    fn keyring(keys: &[&str]) -> Keyring {
        let auths: serde_json::Map<String, serde_json::Value> =
            keys.iter().map(|k| (k.to_string(), serde_json::json!({"username": k, "password": "p"}))).collect();
        let data = serde_json::json!({ "auths": auths }).to_string();
        Keyring::parse_dockerconfigjson(data.as_bytes()).unwrap()
    }

    fn users(auths: &[PullAuth]) -> Vec<&str> {
        auths.iter().map(|a| a.username.as_str()).collect()
    }

    #[test]
    fn keys_are_normalised() {
        let p = |host: &str, port: Option<&str>, path: &str| {
            Some(Pattern { host: host.into(), port: port.map(Into::into), path: path.into() })
        };
        for (key, want) in [
            ("registry.example.com", p("registry.example.com", None, "")),
            ("https://registry.example.com/", p("registry.example.com", None, "")),
            ("http://Registry.Example.com:5000/team/", p("registry.example.com", Some("5000"), "team")),
            ("https://index.docker.io/v1/", p("docker.io", None, "")),
            ("index.docker.io", p("docker.io", None, "")),
            ("registry-1.docker.io/v2/myuser", p("docker.io", None, "myuser")),
            ("docker.io/myuser/app", p("docker.io", None, "myuser/app")),
            ("[::1]:5000/x", p("[::1]", Some("5000"), "x")),
            ("*.example.com", p("*.example.com", None, "")),
            ("", None),
            ("https:///path", None),
        ] {
            assert_eq!(parse_key(key), want, "{key:?}");
        }
    }

    #[test]
    fn images_are_read_with_docker_hub_as_the_default_registry() {
        let t = |image: &str| image_target(image).map(|p| p.sort_key());
        for (image, want) in [
            ("busybox", Some("docker.io/library/busybox")),
            ("library/busybox:1.36", Some("docker.io/library/busybox")),
            ("user/app", Some("docker.io/user/app")),
            ("docker.io/busybox", Some("docker.io/library/busybox")),
            ("index.docker.io/user/app", Some("docker.io/user/app")),
            ("host:5000/a/b:tag@sha256:0123456789abcdef0123456789abcdef", Some("host:5000/a/b")),
            ("localhost/app", Some("localhost/app")),
            ("Not A Reference", None),
        ] {
            assert_eq!(t(image).as_deref(), want, "{image:?}");
        }
    }

    #[test]
    fn host_globs_match_one_label_each() {
        for (pattern, text, want) in [
            ("*", "a", true),
            ("*", "", true),
            ("a*", "abc", true),
            ("*c", "abc", true),
            ("a*c", "abbbc", true),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("a*d", "abc", false),
            ("abc", "abc", true),
            ("abc", "abd", false),
        ] {
            assert_eq!(glob(pattern, text), want, "{pattern:?} {text:?}");
        }
    }

    #[test]
    fn a_key_matches_by_host_port_and_leading_path_segments() {
        for (key, image, want) in [
            ("reg.example.com", "reg.example.com/a/b", true),
            ("reg.example.com", "other.example.com/a", false),
            ("*.example.com", "a.example.com/x", true),
            ("*.example.com", "example.com/x", false),
            ("*.example.com", "a.b.example.com/x", false),
            ("*.*.example.com", "a.b.example.com/x", true),
            ("a.*.com", "a.example.com/x", true),
            ("*.example.com:5000", "a.example.com:5000/x", true),
            // Ports are compared exactly: none matches only none.
            ("reg.example.com", "reg.example.com:5000/x", false),
            ("reg.example.com:5000", "reg.example.com/x", false),
            ("reg.example.com:5000", "reg.example.com:5001/x", false),
            ("localhost:5000", "localhost:5000/x:1", true),
            ("[::1]:5000", "[::1]:5000/x", true),
            // Paths on whole segments.
            ("reg.example.com/a", "reg.example.com/a", true),
            ("reg.example.com/a", "reg.example.com/a/b:1", true),
            ("reg.example.com/a", "reg.example.com/ab", false),
            ("reg.example.com/a/b", "reg.example.com/a", false),
            ("https://reg.example.com/v2/a/", "reg.example.com/a/b", true),
            // Docker Hub, by any of its names.
            ("https://index.docker.io/v1/", "busybox", true),
            ("docker.io", "library/busybox", true),
            ("registry-1.docker.io", "user/app", true),
            ("index.docker.io", "docker.io/user/app", true),
            ("docker.io/user", "user/app", true),
            ("docker.io/user", "busybox", false),
            ("docker.io/library", "busybox:1.36", true),
            ("docker.io", "quay.io/user/app", false),
            ("quay.io", "busybox", false),
            // Case does not matter in hosts; a bad reference matches nothing.
            ("REG.example.com", "reg.example.com/a", true),
            ("reg.example.com", "reg.example.com/A", false),
        ] {
            let found = keyring(&[key]).lookup(image);
            assert_eq!(!found.is_empty(), want, "{key:?} for {image:?}");
        }
    }

    #[test]
    fn all_matches_come_most_specific_first() {
        let ring = keyring(&["reg.io", "reg.io/team", "reg.io/team/app", "*.io", "reg.io/other", "quay.io"]);
        assert_eq!(users(&ring.lookup("reg.io/team/app:1")), ["reg.io/team/app", "reg.io/team", "reg.io", "*.io"]);
        assert_eq!(users(&ring.lookup("reg.io/x")), ["reg.io", "*.io"]);
        assert!(ring.lookup("reg.com/x").is_empty());
    }

    #[test]
    fn sources_merge_in_order_without_duplicates() {
        let pod_a = keyring(&["reg.io"]);
        let pod_b = keyring(&["reg.io/team", "reg.io"]);
        let node = keyring(&["*.io"]);
        // Each source's matches in turn: the first secret's `reg.io` before the second's
        // more specific `reg.io/team`; the second's `reg.io` is the first's credentials
        // again and is left out.
        assert_eq!(users(&candidates(&[&pod_a, &pod_b, &node], "reg.io/team/app")), ["reg.io", "reg.io/team", "*.io"]);
        assert_eq!(users(&candidates(&[&node, &pod_a], "reg.io/x")), ["*.io", "reg.io"]);
        assert_eq!(users(&candidates(&[&pod_a, &pod_a], "reg.io/x")), ["reg.io"]);
        assert!(candidates(&[], "reg.io/x").is_empty());
        assert!(candidates(&[&pod_a], "quay.io/x").is_empty());
        // The same credentials under two names of one registry are offered once.
        let hub = Keyring::parse_dockercfg(br#"{"docker.io": {"auth": "dTpw"}, "index.docker.io": {"auth": "dTpw"}}"#)
            .unwrap();
        assert_eq!(candidates(&[&hub], "busybox").len(), 1);
    }

    #[test]
    fn dockerconfigjson_and_dockercfg_give_the_same_credentials() {
        let entry =
            format!(r#"{{"reg.io:5000": {{"auth": "{}", "email": "a@b", "identitytoken": "it"}}}}"#, b64("user:pa:ss"));
        let json = Keyring::parse_dockerconfigjson(format!(r#"{{"auths": {entry}}}"#).as_bytes()).unwrap();
        let cfg = Keyring::parse_dockercfg(entry.as_bytes()).unwrap();
        let want = PullAuth {
            username: "user".into(),
            password: "pa:ss".into(),
            auth: b64("user:pa:ss"),
            server_address: String::new(),
            identity_token: "it".into(),
            registry_token: String::new(),
        };
        assert_eq!(json.lookup("reg.io:5000/app"), std::slice::from_ref(&want));
        assert_eq!(cfg.lookup("reg.io:5000/app"), [want]);
        // The wrapper decides the shape: each read as the other offers nothing for the image
        // (a `.dockercfg` with `auths` has an entry for a registry named `auths`).
        assert!(Keyring::parse_dockerconfigjson(entry.as_bytes()).unwrap().is_empty());
        assert!(Keyring::parse_dockercfg(br#"{"auths": {"reg.io": {}}}"#).unwrap().lookup("reg.io/x").is_empty());
    }

    #[test]
    fn username_and_password_stand_when_there_is_no_auth() {
        let ring =
            Keyring::parse_dockercfg(br#"{"reg.io": {"username": "u", "password": "p", "registrytoken": "rt"}}"#)
                .unwrap();
        let found = ring.lookup("reg.io/x");
        assert_eq!((found[0].username.as_str(), found[0].password.as_str()), ("u", "p"));
        assert_eq!((found[0].auth.as_str(), found[0].registry_token.as_str()), ("", "rt"));
        // `auth` wins over the fields, as in kubelet.
        let ring = Keyring::parse_dockercfg(
            format!(r#"{{"reg.io": {{"username": "u", "auth": "{}"}}}}"#, b64("v:q")).as_bytes(),
        )
        .unwrap();
        assert_eq!(ring.lookup("reg.io/x")[0].username, "v");
        // A key without a host is skipped; the rest still counts.
        assert_eq!(Keyring::parse_dockercfg(br#"{"": {}, "reg.io": {}}"#).unwrap().len(), 1);
        assert!(Keyring::parse_dockerconfigjson(b"{}").unwrap().is_empty());
    }

    #[test]
    fn malformed_configs_are_refused_without_echoing_secrets() {
        let bad_auth =
            |auth: &str| Keyring::parse_dockercfg(format!(r#"{{"reg.io": {{"auth": "{auth}"}}}}"#).as_bytes());
        let auth_err = |reason| Err(KeyringError::BadAuth { registry: "reg.io".into(), reason });
        assert_eq!(bad_auth("not base64!").map(|k| k.len()), auth_err("not base64"));
        assert_eq!(bad_auth(&b64("nocolon")).map(|k| k.len()), auth_err("no ':' between username and password"));
        assert_eq!(bad_auth("/w==").map(|k| k.len()), auth_err("not UTF-8 once decoded"));
        let e = bad_auth(&b64("nocolon")).unwrap_err().to_string();
        assert!(e.contains("\"reg.io\"") && !e.contains("nocolon"), "{e}");

        for (data, kind) in
            [(&b"{not json"[..], "syntax"), (b"{\"auths\": ", "eof"), (b"[]", "data"), (b"\"hunter2\"", "data")]
        {
            let err = Keyring::parse_dockerconfigjson(data).unwrap_err();
            assert!(matches!(err, KeyringError::BadJson { kind: k, .. } if k == kind), "{err:?}");
            assert!(!err.to_string().contains("hunter2") && !err.to_string().contains("12345"), "{err}");
        }

        for (data, what, expected) in [
            (&br#"{"auths": "hunter2"}"#[..], "`auths`", "an object"),
            (br#"{"auths": {"reg.io": ["u", "hunter2"]}}"#, "the entry of registry \"reg.io\"", "an object"),
            (
                br#"{"auths": {"reg.io": {"password": 12345}}}"#,
                "the field `password` of registry \"reg.io\"",
                "a string",
            ),
        ] {
            let err = Keyring::parse_dockerconfigjson(data).unwrap_err();
            assert_eq!(err, KeyringError::WrongType { what: what.into(), expected }, "{data:?}");
            assert!(!err.to_string().contains("hunter2") && !err.to_string().contains("12345"), "{err}");
        }
        assert!(Keyring::parse_dockercfg(br#"{"reg.io": null, "quay.io": {"auth": null}}"#).unwrap().len() == 2);

        let big = vec![b' '; MAX_CONFIG_BYTES + 1];
        assert_eq!(
            Keyring::parse_dockercfg(&big).unwrap_err(),
            KeyringError::TooLarge { size: MAX_CONFIG_BYTES + 1, limit: MAX_CONFIG_BYTES }
        );
        let many: serde_json::Map<String, serde_json::Value> =
            (0..=MAX_ENTRIES).map(|i| (format!("r{i}.io"), serde_json::json!({}))).collect();
        let data = serde_json::Value::Object(many).to_string();
        assert_eq!(
            Keyring::parse_dockercfg(data.as_bytes()).unwrap_err(),
            KeyringError::TooManyEntries { count: MAX_ENTRIES + 1, limit: MAX_ENTRIES }
        );
    }
}
