//! Image references as kubelet reads them before it asks the runtime for anything
//! (`applyDefaultImageTag`, the distribution reference grammar): one that does not parse
//! is `InvalidImageName`, and no pull is made. Pure.
//!
//! ```text
//! reference  := name [ ":" tag ] [ "@" digest ]
//! name       := [domain "/"] component ("/" component)*      at most 255 characters
//! domain     := host [":" port]    host: labels of [A-Za-z0-9-] joined by ".", or [IPv6]
//! component  := [a-z0-9]+ (separator [a-z0-9]+)*             separator: "." "_" "__" "-"+
//! tag        := [A-Za-z0-9_] [A-Za-z0-9_.-]{0,127}
//! digest     := algorithm ":" hex   algorithm: [A-Za-z][A-Za-z0-9]* ([+._-][A-Za-z][A-Za-z0-9]*)*
//! ```

/// The longest name (without tag and digest).
const MAX_NAME: usize = 255;

/// An image reference cut into its parts, as `check` reads it (nothing is checked here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parts<'a> {
    /// The registry (`host[:port]`), when the name starts with one (a first part with a `.`
    /// or `:`, or `localhost`); `None` for a Docker Hub name such as `library/busybox`.
    pub domain: Option<&'a str>,
    /// The repository path after the registry (`library/busybox`, `team/app`).
    pub path: &'a str,
    /// The tag, without its `:`.
    pub tag: Option<&'a str>,
    /// The digest, without its `@`.
    pub digest: Option<&'a str>,
}

/// Cuts `image` into registry, path, tag and digest. Call `check` first to know that the
/// parts are valid.
pub fn split(image: &str) -> Parts<'_> {
    let (rest, digest) = match image.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (image, None),
    };
    // A tag follows the last ':' that is after the last '/' (a port is before it).
    let slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[slash..].find(':') {
        Some(i) => (&rest[..slash + i], Some(&rest[slash + i + 1..])),
        None => (rest, None),
    };
    // The first part is a domain when it looks like one (kubelet's rule: a '.' or ':', or
    // `localhost`), else it is a path component of Docker Hub's.
    let (domain, path) = match name.split_once('/') {
        Some((first, path)) if first.contains(['.', ':']) || first == "localhost" => (Some(first), path),
        _ => (None, name),
    };
    Parts { domain, path, tag, digest }
}

/// Why `image` is not an image reference, in the words of the reference library kubelet
/// uses; `Ok` when it is one.
pub fn check(image: &str) -> Result<(), String> {
    if image.is_empty() {
        return Err("repository name must have at least one component".into());
    }
    let parts = split(image);
    if let Some(d) = parts.digest {
        check_digest(d)?;
    }
    if let Some(t) = parts.tag {
        check_tag(t)?;
    }
    let name_len = parts.domain.map_or(0, |d| d.len() + 1) + parts.path.len();
    if name_len > MAX_NAME {
        return Err(format!("repository name must not be more than {MAX_NAME} characters"));
    }
    if let Some(d) = parts.domain {
        check_domain(d)?;
    }
    for p in parts.path.split('/') {
        if p.chars().any(|c| c.is_ascii_uppercase()) {
            return Err("repository name must be lowercase".into());
        }
        if !is_component(p) {
            return Err("invalid reference format".into());
        }
    }
    Ok(())
}

/// `[a-z0-9]+ (separator [a-z0-9]+)*`, separators `.`, `_`, `__` or any run of `-`.
fn is_component(p: &str) -> bool {
    let b = p.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &p[start..i];
        if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|c| c == b'-')) {
            return false;
        }
    }
    true
}

fn check_domain(d: &str) -> Result<(), String> {
    let bad = || Err("invalid reference format".into());
    let (host, port) = if let Some(v6) = d.strip_prefix('[') {
        let Some((addr, after)) = v6.split_once(']') else { return bad() };
        if addr.parse::<std::net::Ipv6Addr>().is_err() {
            return bad();
        }
        ("", after.strip_prefix(':'))
    } else {
        match d.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (d, None),
        }
    };
    if let Some(p) = port {
        if p.is_empty() || !p.bytes().all(|c| c.is_ascii_digit()) {
            return bad();
        }
    }
    let label = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
    };
    if !host.is_empty() && !host.split('.').all(label) {
        return bad();
    }
    Ok(())
}

fn check_tag(t: &str) -> Result<(), String> {
    let b = t.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    if b.is_empty() || b.len() > 128 || !word(b[0]) || !b.iter().all(|c| word(*c) || *c == b'.' || *c == b'-') {
        return Err("invalid reference format".into());
    }
    Ok(())
}

fn check_digest(d: &str) -> Result<(), String> {
    let bad = || Err("invalid reference format".into());
    let Some((algorithm, hex)) = d.split_once(':') else { return bad() };
    let part = |p: &str| {
        let b = p.as_bytes();
        !b.is_empty() && b[0].is_ascii_alphabetic() && b.iter().all(u8::is_ascii_alphanumeric)
    };
    if !algorithm.split(['+', '.', '_', '-']).all(part) {
        return bad();
    }
    if hex.len() < 32 || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
        return bad();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_kubelet_pulls_are_taken() {
        for ok in [
            "busybox",
            "busybox:1.36",
            "library/busybox:latest",
            "docker.io/library/busybox",
            "registry.k8s.io/pause:3.9",
            "localhost/app",
            "localhost:5000/team/app:v1.2-rc_3",
            "127.0.0.1:5000/app",
            "[::1]:5000/app:x",
            "quay.io/a__b/c-d--e.f_g:tag",
            "busybox@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "gcr.io/x/y:1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn what_does_not_parse_is_refused_with_the_reference_librarys_words() {
        assert_eq!(check("Local/Busy Box::x@@"), Err("invalid reference format".into()));
        assert_eq!(check("Busybox"), Err("repository name must be lowercase".into()));
        assert_eq!(check(""), Err("repository name must have at least one component".into()));
        assert_eq!(
            check(&"a".repeat(4096)),
            Err("repository name must not be more than 255 characters".into()),
            "a 4 KB name"
        );
        for bad in [
            "busybox\n[ERROR] forged",
            "busybox:",
            "busybox:-tag",
            "busybox@sha256:abc",
            "a//b",
            "a/b/",
            "-a",
            "a_-b",
            "host:port/app",
            "[::1/app",
            "busybox:tag:again",
        ] {
            assert!(check(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn split_cuts_registry_path_tag_and_digest() {
        let d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let p = |domain, path, tag, digest| Parts { domain, path, tag, digest };
        assert_eq!(split("busybox"), p(None, "busybox", None, None));
        assert_eq!(split("library/busybox:1"), p(None, "library/busybox", Some("1"), None));
        assert_eq!(split("localhost/app"), p(Some("localhost"), "app", None, None));
        let full = format!("host:5000/a/b:tag@{d}");
        assert_eq!(split(&full), p(Some("host:5000"), "a/b", Some("tag"), Some(d)));
        assert_eq!(split("[::1]:5000/app:x"), p(Some("[::1]:5000"), "app", Some("x"), None));
    }
}
