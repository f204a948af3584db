//! RFC 3339 timestamps without a date-time dependency: Kubernetes `metav1.Time` (seconds),
//! CRI log lines (nanoseconds), and Go-style durations (`10s`, `1m30s`) for configuration.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Days since 1970-01-01 to a civil (year, month, day), Howard Hinnant's algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// A civil date to days since 1970-01-01 (inverse of `civil_from_days`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 } as i64;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn split(t: SystemTime) -> (i64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(_) => (0, 0),
    }
}

fn date_time(secs: i64) -> String {
    let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!("{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}", s / 3600, s % 3600 / 60, s % 60)
}

/// `2024-05-01T10:00:00Z`, the shape of Kubernetes `metav1.Time`.
pub fn rfc3339(t: SystemTime) -> String {
    format!("{}Z", date_time(split(t).0))
}

/// `2024-05-01T10:00:00.123456789Z`, the shape of CRI log timestamps.
pub fn rfc3339_nano(t: SystemTime) -> String {
    let (s, n) = split(t);
    format!("{}.{n:09}Z", date_time(s))
}

/// Parses what `rfc3339` and `rfc3339_nano` write (UTC `Z` or a numeric offset).
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || (b[10] != b'T' && b[10] != b't') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut nanos = 0u32;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 9 {
            return None;
        }
        nanos = frac[..digits].parse::<u32>().ok()? * 10u32.pow(9 - digits as u32);
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && (rest.starts_with('+') || rest.starts_with('-')) => {
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (rest[1..3].parse::<i64>().ok()? * 3600 + rest[4..6].parse::<i64>().ok()? * 60)
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo as u32, d as u32) * 86_400 + h * 3600 + mi * 60 + se - offset;
    if secs < 0 {
        return None;
    }
    Some(UNIX_EPOCH + Duration::new(secs as u64, nanos))
}

/// A duration that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not a number with a unit.
    #[error("invalid duration {text:?}: use a number with a unit (ms, s, m, h), e.g. \"10s\" or \"1m30s\"")]
    ParseDuration {
        /// The text as written.
        text: String,
    },
    /// More seconds than a `Duration` holds.
    #[error("invalid duration {text:?}: too long to represent")]
    RepresentDuration {
        /// The text as written.
        text: String,
    },
}

/// Parses a Go-style duration: `300ms`, `10s`, `5m`, `1h30m`, `0`.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let err = || DurationError::ParseDuration { text: s.into() };
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return Err(err());
    }
    while !rest.is_empty() {
        let n = rest.bytes().take_while(|c| c.is_ascii_digit() || *c == b'.').count();
        if n == 0 {
            return Err(err());
        }
        let value: f64 = rest[..n].parse().map_err(|_| err())?;
        rest = &rest[n..];
        let u = rest.bytes().take_while(|c| c.is_ascii_alphabetic()).count();
        let scale = match &rest[..u] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(err()),
        };
        rest = &rest[u..];
        total += value * scale;
    }
    // from_secs_f64 panics past u64 seconds ("99999999999999999999h").
    Duration::try_from_secs_f64(total).map_err(|_| DurationError::RepresentDuration { text: s.into() })
}

/// Formats a duration the way `kubectl get` prints ages: `45s`, `3m12s`, `5h`, `2d3h`.
pub fn human_age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=119 => format!("{s}s"),
        120..=599 => format!("{}m{}s", s / 60, s % 60),
        600..=10_799 => format!("{}m", s / 60),
        10_800..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d{}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// Formats a duration as Go does for back-off messages: `10s`, `1m20s`, `5m0s`.
pub fn go_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{}h{}m{}s", s / 3600, s % 3600 / 60, s % 60)
    }
}

/// Go's `Duration.String` of `d` truncated to milliseconds, as kubelet prints pull times:
/// `0s`, `567ms`, `1.234s`, `2m3.4s`, `1h0m0.5s`.
pub fn go_duration_millis(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return if ms == 0 { "0s".into() } else { format!("{ms}ms") };
    }
    let (h, m, s, frac) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    let frac = format!("{frac:03}");
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        out.push_str(&format!("{s}s"));
    } else {
        out.push_str(&format!("{s}.{frac}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_round_trip() {
        let t = UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
        assert_eq!(rfc3339(t), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339_nano(t), "2023-11-14T22:13:20.123456789Z");
        assert_eq!(parse_rfc3339(&rfc3339_nano(t)), Some(t));
        assert_eq!(parse_rfc3339("2023-11-14T23:13:20+01:00"), Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000)));
        assert_eq!(parse_rfc3339("2023-13-14T23:13:20Z"), None);
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn prints_millisecond_durations_as_go_does() {
        let ms = Duration::from_millis;
        assert_eq!(go_duration_millis(Duration::from_micros(999)), "0s");
        assert_eq!(go_duration_millis(ms(567)), "567ms");
        assert_eq!(go_duration_millis(ms(1234)), "1.234s");
        assert_eq!(go_duration_millis(ms(1200)), "1.2s");
        assert_eq!(go_duration_millis(ms(5000)), "5s");
        assert_eq!(go_duration_millis(ms(123_400)), "2m3.4s");
        assert_eq!(go_duration_millis(ms(3_600_500)), "1h0m0.5s");
    }

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("ten seconds").is_err());
        assert!(parse_duration("").is_err());
        assert_eq!(
            parse_duration("10").unwrap_err().to_string(),
            "invalid duration \"10\": use a number with a unit (ms, s, m, h), e.g. \"10s\" or \"1m30s\""
        );
        assert_eq!(
            parse_duration("99999999999999999999h").unwrap_err(),
            DurationError::RepresentDuration { text: "99999999999999999999h".into() }
        );
        assert_eq!(
            DurationError::RepresentDuration { text: "1h".into() }.to_string(),
            "invalid duration \"1h\": too long to represent"
        );
    }

    #[test]
    fn prints_ages_like_kubectl() {
        assert_eq!(human_age(Duration::from_secs(45)), "45s");
        assert_eq!(human_age(Duration::from_secs(192)), "3m12s");
        assert_eq!(human_age(Duration::from_secs(3 * 3600)), "3h");
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
    }
}
