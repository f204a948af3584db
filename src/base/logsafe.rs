//! Text that comes from users (manifest file names, pod and container names, values
//! quoted in errors) made safe for one log line: control characters are escaped, so a
//! file named `x\nINFO fake line.yaml` cannot split a line or forge another one.

use std::fmt;
use std::path::Path;

/// Displays a string with its control characters escaped (`\n`, `\t`, `\u{1b}`); all
/// other characters, non-ASCII ones included, are printed as they are.
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

/// Most characters of one value from a peer (a plugin's endpoint or version) in a log line.
pub const MAX_LOGGED_CHARS: usize = 256;

/// A value from a peer for one log line: control characters escaped, and cut after
/// `MAX_LOGGED_CHARS` characters with the number of bytes left out, so a 4 MB gRPC string
/// never becomes a 4 MB log line.
pub fn short(s: &str) -> String {
    match s.char_indices().nth(MAX_LOGGED_CHARS) {
        None => Escaped(s).to_string(),
        Some((i, _)) => format!("{}… ({} more bytes)", Escaped(&s[..i]), s.len() - i),
    }
}

/// A path as it may appear in a log line (lossy UTF-8, control characters escaped).
pub fn path(p: &Path) -> String {
    Escaped(&p.to_string_lossy()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(Escaped("a\nb\tc\u{1b}[31m").to_string(), "a\\nb\\tc\\u{1b}[31m");
        assert_eq!(Escaped("café/ü.yaml").to_string(), "café/ü.yaml");
        assert_eq!(path(Path::new("/m/x\r\n.yaml")), "/m/x\\r\\n.yaml");
        assert_eq!(short("é\n"), "é\\n");
        let long = "ü".repeat(4 << 20);
        let cut = short(&long);
        assert!(cut.starts_with(&"ü".repeat(MAX_LOGGED_CHARS)), "{}", &cut[..20]);
        assert!(
            cut.ends_with(&format!("… ({} more bytes)", long.len() - 2 * MAX_LOGGED_CHARS)),
            "{}",
            &cut[cut.len() - 40..]
        );
    }
}
