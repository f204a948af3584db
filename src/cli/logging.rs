//! The process's log (`env_logger` behind a swappable level, one line a record, journald
//! priorities under systemd) and its panic hooks.

/// `device:inode` of stderr, to compare with `JOURNAL_STREAM`.
pub fn stderr_identity() -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata("/proc/self/fd/2").ok()?;
    Some((meta.dev(), meta.ino()))
}

/// Whether stderr is the journald stream systemd connected (journald then stamps each line
/// itself). `JOURNAL_STREAM` is `device:inode` of that stream; a process started from a
/// service with stderr redirected elsewhere inherits the variable, so it must match stderr.
pub fn logs_to_journal(journal_stream: Option<&str>, stderr: Option<(u64, u64)>) -> bool {
    let Some((dev, ino)) = journal_stream.and_then(|v| v.split_once(':')) else { return false };
    matches!((dev.parse::<u64>(), ino.parse::<u64>(), stderr), (Ok(d), Ok(i), Some(s)) if (d, i) == s)
}

/// The log line prefix: an RFC 3339 UTC timestamp with milliseconds, or for journald the
/// syslog priority (`<6>`), which it turns into the entry's priority.
pub fn log_prefix(journal: bool, level: log::Level, now: std::time::SystemTime) -> String {
    if journal {
        let priority = match level {
            log::Level::Error => 3,
            log::Level::Warn => 4,
            log::Level::Info => 6,
            log::Level::Debug | log::Level::Trace => 7,
        };
        return format!("<{priority}>");
    }
    // `2024-05-01T10:00:00.123456789Z` cut to milliseconds.
    let nanos = crate::base::timefmt::rfc3339_nano(now);
    format!("{}Z ", &nanos[..nanos.len().saturating_sub(7)])
}

/// The process's logger: env_logger's, replaced whole when a reload changes `log_level`.
pub struct Logger(parking_lot::RwLock<env_logger::Logger>);

impl log::Log for Logger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        self.0.read().enabled(metadata)
    }
    fn log(&self, record: &log::Record) {
        // env_logger's own `log` applies its filter.
        self.0.read().log(record);
    }
    fn flush(&self) {
        self.0.read().flush();
    }
}

pub static LOGGER: std::sync::OnceLock<Logger> = std::sync::OnceLock::new();

/// env_logger for `spec` (RUST_LOG's syntax; `None`: RUST_LOG, else `info`).
pub fn env_logger_for(spec: Option<&str>) -> env_logger::Logger {
    let journal = logs_to_journal(std::env::var("JOURNAL_STREAM").ok().as_deref(), stderr_identity());
    let mut builder = env_logger::Builder::new();
    let asked = match spec {
        Some(s) => s.to_string(),
        None => std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
    };
    builder.parse_filters(&asked);
    if let Ok(style) = std::env::var("RUST_LOG_STYLE") {
        builder.parse_write_style(&style);
    }
    // The HTTP client's and TLS library's own debug lines (every request and handshake of
    // cluster mode) only when the spec names them.
    for module in ["ureq", "ureq_proto", "rustls"] {
        if !asked.contains(module) {
            builder.filter_module(module, log::LevelFilter::Info);
        }
    }
    builder
        .format(move |buf, record| {
            let prefix = log_prefix(journal, record.level(), std::time::SystemTime::now());
            write_log_line(buf, &prefix, record.level(), record.args())
        })
        .build()
}

/// One log record as one line: control characters in it (a user's string with a newline,
/// say, in an image name) are escaped here, so no call site can forget it and forge a line.
pub fn write_log_line(
    out: &mut impl std::io::Write,
    prefix: &str,
    level: log::Level,
    args: &std::fmt::Arguments,
) -> std::io::Result<()> {
    let text = match args.as_str() {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(args.to_string()),
    };
    writeln!(out, "{prefix}[{level:<5}] {}", crate::base::logsafe::Escaped(&text))
}

pub fn init_logging() {
    let inner = env_logger_for(None);
    log::set_max_level(inner.filter());
    let logger = LOGGER.get_or_init(|| Logger(parking_lot::RwLock::new(inner)));
    let _ = log::set_logger(logger);
}

/// Logs from now on as `spec` says (`log_level`; empty: RUST_LOG, else `info`).
pub fn set_log_level(spec: &str) {
    let inner = env_logger_for(Some(spec).filter(|s| !s.is_empty()));
    log::set_max_level(inner.filter());
    if let Some(logger) = LOGGER.get() {
        *logger.0.write() = inner;
    }
}

/// A panic goes to the log with the thread it happened on (and its backtrace, when
/// `RUST_BACKTRACE` asks for one).
pub fn log_panics() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        let backtrace = std::backtrace::Backtrace::capture();
        log::error!("panic on thread {}: {info}", thread.name().unwrap_or("(unnamed)"));
        if backtrace.status() == std::backtrace::BacktraceStatus::Captured {
            // A log record is one line: the backtrace goes a line a record.
            for line in backtrace.to_string().lines() {
                log::error!("  {line}");
            }
        }
    }));
}

/// A panic ends the process at once, in every build (the release profile aborts on panic
/// anyway; the others would unwind one thread and carry on without it): the hook in place
/// says it first, then the process aborts. The service manager restarts the agent, and its
/// pods run on under their shims.
pub fn abort_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::abort();
    }));
}

/// Commands that only print end as any Unix filter does when their reader goes away
/// (`ferrolet get pods | head -1`): killed quietly by SIGPIPE. Rust ignores SIGPIPE, and
/// `print!` then panics on EPIPE. Not for `run` or `drain`, which must not die halfway;
/// sockets are unaffected (std sends with MSG_NOSIGNAL).
pub fn end_quietly_on_a_closed_stdout() {
    // SAFETY: restoring the default disposition of one signal; no handler is involved.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_left_to_journald_only_when_stderr_is_its_stream() {
        assert!(logs_to_journal(Some("8:42"), Some((8, 42))));
        assert!(!logs_to_journal(Some("8:42"), Some((8, 43))), "stderr redirected elsewhere");
        assert!(!logs_to_journal(None, Some((8, 42))));
        assert!(!logs_to_journal(Some("garbage"), Some((8, 42))));
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_123);
        assert_eq!(log_prefix(false, log::Level::Info, t), "2023-11-14T22:13:20.123Z ");
        assert_eq!(log_prefix(true, log::Level::Warn, t), "<4>");
    }

    #[test]
    fn a_log_record_is_one_line_whatever_a_users_string_in_it_holds() {
        let image = "busybox\n2026-01-01T00:00:00.000Z [ERROR] forged\r\u{1b}[2J";
        let mut out = Vec::new();
        write_log_line(&mut out, "T ", log::Level::Info, &format_args!("images: pulling {image}")).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text, "T [INFO ] images: pulling busybox\\n2026-01-01T00:00:00.000Z [ERROR] forged\\r\\u{1b}[2J\n");
        assert_eq!(text.lines().count(), 1);
    }
}
