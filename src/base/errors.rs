//! Error chains: an error with every cause after it.

/// Displays an error followed by each of its sources, `outer: cause: root cause`, as
/// anyhow's `{:#}` does. Every log line and message that shows an error uses it, so no
/// cause is ever dropped (`cannot create cgroup …: Invalid argument (os error 22)`).
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'a));

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(s) = source {
            write!(f, ": {s}")?;
            source = s.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn chain_prints_every_source() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot create cgroup /x")]
        struct Outer(#[source] io::Error);
        let e = Outer(io::Error::from_raw_os_error(libc::EMFILE));
        let text = Chain(&e).to_string();
        assert!(text.starts_with("cannot create cgroup /x: "), "{text}");
        assert!(text.contains("Too many open files"), "{text}");
    }
}
