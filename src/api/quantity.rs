//! Kubernetes resource quantities (`500m`, `1Gi`, `1e3`): parsing, canonical
//! formatting and exact comparison, following `k8s.io/apimachinery`'s
//! `resource.Quantity`.
//!
//! Grammar (the one upstream documents):
//!
//! ```text
//! <quantity>        ::= <signedNumber><suffix>
//! <signedNumber>    ::= <number> | <sign><number>
//! <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
//! <sign>            ::= "+" | "-"
//! <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
//! <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
//! <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
//! <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>
//! ```
//!
//! The value is held as an exact decimal, `mantissa * 10^scale`, so no float
//! ever touches it. Where this module knowingly differs from upstream:
//!
//! * Upstream's scanner is looser than its grammar and reads a number with no
//!   digit at all (`"."`, `"+"`, `"Mi"`, `"e3"`) as zero. Those are rejected
//!   here: a manifest that says `memory: Mi` is a typo, not a request for 0.
//! * Upstream keeps arbitrarily many digits (big integers). This type keeps 38
//!   significant digits after the nano rounding and rejects longer inputs
//!   rather than silently changing them; the resulting power of ten must fit
//!   an `i32` (upstream truncates a larger exponent to 32 bits).
//! * `value()` and `milli_value()` saturate at the `i64` bounds instead of
//!   overflowing, and round toward +infinity for negative values as well
//!   (upstream rounds a negative `-1.5` to `-2` on its fast path).
//! * A binary-SI value beyond `i64::MAX` (only reachable through `add` or
//!   `from_value(i64::MIN, true)`) is printed in decimal form, because its
//!   binary spelling (`8Ei`) would be capped to `i64::MAX` when parsed back.
//! * Decimal-SI values above the largest suffix (`E`, 10^18) print in exponent
//!   form (`1e21`) as current upstream does, not the old truncated form.
//! * Serde sees a bare number only as an integer or float, not its text, so
//!   every number decodes as decimal SI: JSON `1e3` prints as `1k`, where
//!   upstream would keep `1e3`. As upstream does for JSON, strings are trimmed
//!   of surrounding whitespace and `null` decodes as zero.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

/// Mantissas stay strictly below this magnitude (38 significant digits), so
/// two of them add without overflowing `i128` and equal-magnitude values
/// align without overflow when compared.
const MANTISSA_LIMIT: u128 = 10u128.pow(38);
/// How many significant digits a mantissa may carry; see [`MANTISSA_LIMIT`].
const MAX_DIGITS: usize = 38;
/// Scale of one nano: upstream rounds anything finer up to this.
const NANO_SCALE: i128 = -9;
/// One unit expressed in nanos.
const NANOS_PER_UNIT: u128 = 1_000_000_000;
/// Upstream silently caps a binary-SI quantity at `2^63 - 1` when parsing.
const BINARY_CAP: u128 = i64::MAX as u128;
/// Binary suffixes indexed by their power of 1024.
const BINARY_SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

/// How a quantity is written back out; parsing remembers the suffix family used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// Powers of 1024: `Ki`, `Mi`, ... `Ei`.
    BinarySI,
    /// Powers of 1000: `n`, `u`, `m`, `k`, `M`, ... `E`.
    DecimalSI,
    /// Scientific notation: `1e3`, `80e-3`.
    DecimalExponent,
}

/// An exact Kubernetes resource quantity; equality, order and hash follow the numeric value.
#[derive(Clone, Debug)]
pub struct Quantity {
    /// Significant digits with the sign; never ends in a decimal zero unless it is 0.
    mantissa: i128,
    /// Power of ten applied to `mantissa`; 0 when the value is zero, never below -9.
    scale: i32,
    /// Suffix family used when printing.
    format: Format,
}

/// A string that is not a valid Kubernetes quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {input:?}")]
pub struct QuantityError {
    /// The rejected text, exactly as given.
    pub input: String,
}

impl QuantityError {
    /// Builds the error for `input`.
    fn new(input: &str) -> QuantityError {
        QuantityError { input: input.to_string() }
    }
}

impl Quantity {
    /// Parses a quantity such as `"500m"`, `"1.5Gi"` or `"1e3"`.
    pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
        parse_quantity(s).ok_or_else(|| QuantityError::new(s))
    }

    /// A quantity of `m` thousandths, formatted as decimal SI.
    pub fn from_milli(m: i64) -> Quantity {
        Quantity::exact(i128::from(m), -3, Format::DecimalSI)
    }

    /// A whole quantity `v`, formatted as binary SI when `binary` (memory) else decimal SI.
    pub fn from_value(v: i64, binary: bool) -> Quantity {
        let format = if binary { Format::BinarySI } else { Format::DecimalSI };
        Quantity::exact(i128::from(v), 0, format)
    }

    /// The quantity 0, formatted as decimal SI.
    pub fn zero() -> Quantity {
        Quantity { mantissa: 0, scale: 0, format: Format::DecimalSI }
    }

    /// The value in thousandths, rounded up (toward +inf) and saturated to `i64`.
    pub fn milli_value(&self) -> i64 {
        self.ceil_at_scale(-3)
    }

    /// The value in whole units, rounded up (toward +inf) and saturated to `i64`.
    pub fn value(&self) -> i64 {
        self.ceil_at_scale(0)
    }

    /// Whether the value is below zero.
    pub fn is_negative(&self) -> bool {
        self.mantissa < 0
    }

    /// Whether the value is exactly zero.
    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    /// The suffix family used when printing.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The sum; keeps `self`'s format unless `self` is zero, as Kubernetes `Add` does.
    ///
    /// Exact whenever the sum fits 38 significant digits; past that it is
    /// rounded up at the 38th digit (only far-apart magnitudes such as
    /// `1e1000 + 1n` get there).
    pub fn add(&self, other: &Quantity) -> Quantity {
        let format = if self.is_zero() { other.format } else { self.format };
        let (mantissa, scale) = add_parts(self.mantissa, self.scale, other.mantissa, other.scale);
        Quantity::from_parts(mantissa, scale, format).unwrap_or_else(|| Quantity::saturated(mantissa.signum(), format))
    }

    /// The difference; keeps `self`'s format unless `self` is zero, as Kubernetes `Sub` does.
    pub fn sub(&self, other: &Quantity) -> Quantity {
        self.add(&other.neg())
    }

    /// The negated value, same format.
    pub fn neg(&self) -> Quantity {
        // |mantissa| < 10^38, so negation cannot overflow.
        Quantity { mantissa: -self.mantissa, ..self.clone() }
    }

    /// Builds a normalized quantity, or `None` if it needs more than 38
    /// digits or a scale outside `i32`.
    fn from_parts(mut mantissa: i128, mut scale: i128, format: Format) -> Option<Quantity> {
        if mantissa == 0 {
            return Some(Quantity { mantissa: 0, scale: 0, format });
        }
        // Trailing zeros move into the scale so equal values share one form,
        // which is what makes the derived-style Eq/Hash on the fields sound.
        while mantissa % 10 == 0 {
            mantissa /= 10;
            scale += 1;
        }
        if mantissa.unsigned_abs() >= MANTISSA_LIMIT {
            return None;
        }
        Some(Quantity { mantissa, scale: i32::try_from(scale).ok()?, format })
    }

    /// Like [`Quantity::from_parts`] for inputs known to fit.
    fn exact(mantissa: i128, scale: i128, format: Format) -> Quantity {
        // Callers pass mantissas of at most 28 digits (i64, u64, or i64::MAX
        // in nanos) at scales from -9 to 0, far inside the 38-digit and i32
        // limits, so `from_parts` cannot refuse them.
        Quantity::from_parts(mantissa, scale, format).expect("i64-sized quantity always fits")
    }

    /// The largest representable magnitude with the given sign; only for
    /// sums whose order of magnitude no longer fits an `i32` scale.
    fn saturated(sign: i128, format: Format) -> Quantity {
        let magnitude = (MANTISSA_LIMIT - 1) as i128;
        Quantity { mantissa: if sign < 0 { -magnitude } else { magnitude }, scale: i32::MAX, format }
    }

    /// `ceil(self / 10^target)` saturated to `i64`.
    fn ceil_at_scale(&self, target: i32) -> i64 {
        let m = self.mantissa;
        if m == 0 {
            return 0;
        }
        let shift = i64::from(self.scale) - i64::from(target);
        let exact = if shift >= 0 {
            u32::try_from(shift).ok().and_then(|s| 10i128.checked_pow(s)).and_then(|p| m.checked_mul(p))
        } else if shift < -(MAX_DIGITS as i64) {
            // |value| < 1 at the target scale: the ceiling is 1 or 0.
            Some(i128::from(m > 0))
        } else {
            let p = 10i128.pow(shift.unsigned_abs() as u32);
            // Rust division truncates toward zero, which is already the
            // ceiling for negatives; positives with a remainder go up one.
            let (q, r) = (m / p, m % p);
            Some(if r > 0 { q + 1 } else { q })
        };
        match exact {
            Some(v) => v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64,
            None if m > 0 => i64::MAX,
            None => i64::MIN,
        }
    }

    /// The value as an integer when it is one and fits within `±i64::MAX`.
    fn as_small_integer(&self) -> Option<i128> {
        if self.scale < 0 || self.scale > 18 {
            // Normalized: a negative scale means a fraction; 10^19 is past i64.
            return None;
        }
        let v = self.mantissa.checked_mul(10i128.pow(self.scale as u32))?;
        (v.unsigned_abs() <= BINARY_CAP).then_some(v)
    }

    /// The canonical text, as Kubernetes `Quantity.String()` produces it.
    fn canonical(&self) -> String {
        if self.mantissa == 0 {
            return "0".to_string();
        }
        let mut format = self.format;
        if format == Format::BinarySI {
            match self.as_small_integer() {
                // Below 1024, for fractions, and past i64::MAX (see the
                // module docs) no binary spelling is exact and round-trips,
                // so these print as decimal SI, as upstream does for the
                // first two.
                Some(v) if v.unsigned_abs() >= 1024 => return binary_text(v),
                _ => format = Format::DecimalSI,
            }
        }
        // Lower the exponent to a multiple of 3 by appending zeros, so the
        // suffix is as large as possible while no fraction is printed.
        let mut digits = self.mantissa.to_string();
        let mut exponent = i64::from(self.scale);
        let pad = exponent.rem_euclid(3);
        for _ in 0..pad {
            digits.push('0');
        }
        exponent -= pad;
        let suffix = match (format, decimal_si_suffix(exponent)) {
            (Format::DecimalSI, Some(s)) => s.to_string(),
            (_, _) if exponent == 0 => String::new(),
            // Decimal SI has nothing past E (10^18): fall back to exponent
            // form rather than dropping the magnitude.
            _ => format!("e{exponent}"),
        };
        digits + &suffix
    }
}

/// Text of a binary-SI integer `v` with `|v| >= 1024`, using the largest suffix that divides it.
fn binary_text(mut v: i128) -> String {
    let mut power = 0;
    while power < BINARY_SUFFIXES.len() - 1 && v % 1024 == 0 {
        v /= 1024;
        power += 1;
    }
    format!("{v}{}", BINARY_SUFFIXES[power])
}

/// The decimal-SI suffix for a power of ten that is a multiple of 3, if one exists.
fn decimal_si_suffix(exponent: i64) -> Option<&'static str> {
    Some(match exponent {
        -9 => "n",
        -6 => "u",
        -3 => "m",
        0 => "",
        3 => "k",
        6 => "M",
        9 => "G",
        12 => "T",
        15 => "P",
        18 => "E",
        _ => return None,
    })
}

/// What a suffix means once recognized.
enum Suffix {
    /// Multiply by `10^exponent`, remembering the given format.
    Decimal(i64, Format),
    /// Multiply by `1024^power` (1 for `Ki` up to 6 for `Ei`).
    Binary(u32),
}

/// Recognizes a suffix; upstream's table plus `e`/`E` followed by a signed integer.
fn parse_suffix(s: &str) -> Option<Suffix> {
    let decimal = |e| Some(Suffix::Decimal(e, Format::DecimalSI));
    match s {
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "" => decimal(0),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => Some(Suffix::Binary(1)),
        "Mi" => Some(Suffix::Binary(2)),
        "Gi" => Some(Suffix::Binary(3)),
        "Ti" => Some(Suffix::Binary(4)),
        "Pi" => Some(Suffix::Binary(5)),
        "Ei" => Some(Suffix::Binary(6)),
        _ => {
            let rest = s.strip_prefix(['e', 'E'])?;
            let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // Out-of-range exponents are rejected, as Go's ParseInt rejects them.
            let exponent = rest.parse::<i64>().ok()?;
            Some(Suffix::Decimal(exponent, Format::DecimalExponent))
        }
    }
}

/// Splits a leading run of ASCII digits off `s`.
fn take_digits(s: &str) -> (&str, &str) {
    let end = s.bytes().position(|b| !b.is_ascii_digit()).unwrap_or(s.len());
    s.split_at(end)
}

/// The parser behind [`Quantity::parse`]; `None` means invalid.
fn parse_quantity(s: &str) -> Option<Quantity> {
    let (negative, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (int_digits, rest) = take_digits(rest);
    let (frac_digits, rest) = match rest.strip_prefix('.') {
        Some(after_dot) => take_digits(after_dot),
        None => ("", rest),
    };
    if int_digits.is_empty() && frac_digits.is_empty() {
        return None;
    }
    match parse_suffix(rest)? {
        Suffix::Decimal(exponent, format) => parse_decimal(negative, int_digits, frac_digits, exponent, format),
        Suffix::Binary(power) => Some(parse_binary(negative, int_digits, frac_digits, power)),
    }
}

/// `±int.frac × 10^exponent`, rounded away from zero to nano precision.
fn parse_decimal(
    negative: bool,
    int_digits: &str,
    frac_digits: &str,
    exponent: i64,
    format: Format,
) -> Option<Quantity> {
    let all: String = [int_digits, frac_digits].concat();
    let significant = all.trim_start_matches('0');
    let trimmed = significant.trim_end_matches('0');
    if trimmed.is_empty() {
        return Quantity::from_parts(0, 0, format);
    }
    let mut scale = i128::from(exponent) - frac_digits.len() as i128 + (significant.len() - trimmed.len()) as i128;
    let mut digits = trimmed.as_bytes().to_vec();
    if scale < NANO_SCALE {
        // Drop the sub-nano digits; the last one is non-zero, so something is
        // always lost and the kept magnitude goes up by one nano, the way
        // upstream rounds so that asking for a sliver still gets something.
        let dropped = usize::try_from(NANO_SCALE - scale).unwrap_or(usize::MAX);
        digits.truncate(digits.len().saturating_sub(dropped));
        increment_digits(&mut digits);
        scale = NANO_SCALE;
    }
    while digits.len() > 1 && digits.last() == Some(&b'0') {
        digits.pop();
        scale += 1;
    }
    if digits.len() > MAX_DIGITS {
        return None;
    }
    let magnitude = digits.iter().fold(0i128, |acc, d| acc * 10 + i128::from(d - b'0'));
    Quantity::from_parts(if negative { -magnitude } else { magnitude }, scale, format)
}

/// Adds one to a big-endian ASCII digit string (empty counts as 0).
fn increment_digits(digits: &mut Vec<u8>) {
    for d in digits.iter_mut().rev() {
        if *d == b'9' {
            *d = b'0';
        } else {
            *d += 1;
            return;
        }
    }
    digits.insert(0, b'1');
}

/// `±int.frac × 1024^power`, rounded away from zero to nano precision and
/// capped at `2^63 - 1` like upstream.
fn parse_binary(negative: bool, int_digits: &str, frac_digits: &str, power: u32) -> Quantity {
    let multiplier = 1u128 << (10 * power);
    let int_part = int_digits.trim_start_matches('0');
    let magnitude_nanos = if int_part.len() > 19 {
        // At least 10^19 before the multiplier: certainly past the cap.
        None
    } else {
        let int_value = int_part.bytes().fold(0u128, |acc, d| acc * 10 + u128::from(d - b'0'));
        // int_value < 10^19 and multiplier <= 2^60, so this stays below 2^124.
        let whole = int_value * multiplier;
        (whole <= BINARY_CAP).then(|| {
            // Multiply 0.frac by (multiplier × 10^9) one digit at a time from
            // the right; `carry` ends as the floor of the product and any
            // non-zero digit shifted out marks a remainder to round up.
            let scaled = multiplier * NANOS_PER_UNIT;
            let mut carry = 0u128;
            let mut remainder = false;
            for d in frac_digits.bytes().rev() {
                let t = u128::from(d - b'0') * scaled + carry;
                let shifted_out = t % 10;
                remainder |= shifted_out != 0;
                carry = t / 10;
            }
            whole * NANOS_PER_UNIT + carry + u128::from(remainder)
        })
    };
    let nanos = match magnitude_nanos {
        Some(n) if n <= BINARY_CAP * NANOS_PER_UNIT => n,
        _ => BINARY_CAP * NANOS_PER_UNIT,
    };
    // Upstream switches a non-zero value below 1 to decimal SI, since no
    // binary suffix could ever describe it.
    let format = if nanos > 0 && nanos < NANOS_PER_UNIT { Format::DecimalSI } else { Format::BinarySI };
    // nanos <= (2^63 - 1) × 10^9 < 10^28: 28 digits fit both i128 and the mantissa limit.
    let signed = if negative { -(nanos as i128) } else { nanos as i128 };
    Quantity::exact(signed, NANO_SCALE, format)
}

/// Number of decimal digits in a non-zero magnitude.
fn digit_count(m: u128) -> i64 {
    i64::from(m.ilog10()) + 1
}

/// `m × 10^scale` rounded up (toward +inf) to a multiple of `10^target`,
/// expressed as a mantissa at `target`. The caller guarantees the result fits.
fn ceil_to_scale(m: i128, scale: i64, target: i64) -> i128 {
    if scale >= target {
        m * 10i128.pow((scale - target) as u32)
    } else if target - scale > MAX_DIGITS as i64 {
        i128::from(m > 0)
    } else {
        let p = 10i128.pow((target - scale) as u32);
        let (q, r) = (m / p, m % p);
        if r > 0 {
            q + 1
        } else {
            q
        }
    }
}

/// Sum of two normalized values as an (unnormalized) mantissa and scale.
fn add_parts(a: i128, sa: i32, b: i128, sb: i32) -> (i128, i128) {
    if a == 0 {
        return (b, i128::from(sb));
    }
    if b == 0 {
        return (a, i128::from(sa));
    }
    let (sa, sb) = (i64::from(sa), i64::from(sb));
    let low = sa.min(sb);
    let align = |m: i128, s: i64| {
        u32::try_from(s - low).ok().and_then(|e| 10i128.checked_pow(e)).and_then(|p| m.checked_mul(p))
    };
    if let Some(sum) = align(a, sa).zip(align(b, sb)).and_then(|(x, y)| x.checked_add(y)) {
        if Quantity::from_parts(sum, i128::from(low), Format::DecimalSI).is_some() {
            return (sum, i128::from(low));
        }
    }
    // Too many digits for an exact result: keep the 37 highest orders of
    // magnitude (so each operand fits and their sum stays under 10^38) and
    // round the rest up.
    let top = (digit_count(a.unsigned_abs()) + sa).max(digit_count(b.unsigned_abs()) + sb);
    let mut target = low.max(top - (MAX_DIGITS as i64 - 1));
    loop {
        let sum = ceil_to_scale(a, sa, target) + ceil_to_scale(b, sb, target);
        if sum.unsigned_abs() < MANTISSA_LIMIT {
            return (sum, i128::from(target));
        }
        target += 1;
    }
}

/// Compares `a × 10^sa` with `b × 10^sb` for non-zero magnitudes.
fn cmp_magnitude(a: u128, sa: i32, b: u128, sb: i32) -> Ordering {
    let order_a = digit_count(a) + i64::from(sa);
    let order_b = digit_count(b) + i64::from(sb);
    if order_a != order_b {
        return order_a.cmp(&order_b);
    }
    // Same order of magnitude and at most 38 digits each: the scales differ
    // by less than 38, and the aligned value has as many digits as the other
    // operand, so it fits.
    if sa >= sb {
        (a * 10u128.pow((sa - sb) as u32)).cmp(&b)
    } else {
        a.cmp(&(b * 10u128.pow((sb - sa) as u32)))
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Quantity) -> bool {
        // Normalized form is unique per value, so the fields decide.
        self.mantissa == other.mantissa && self.scale == other.scale
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Quantity) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Quantity) -> Ordering {
        let (a, b) = (self.mantissa, other.mantissa);
        match a.signum().cmp(&b.signum()) {
            Ordering::Equal if a == 0 => Ordering::Equal,
            Ordering::Equal => {
                let m = cmp_magnitude(a.unsigned_abs(), self.scale, b.unsigned_abs(), other.scale);
                if a > 0 {
                    m
                } else {
                    m.reverse()
                }
            }
            by_sign => by_sign,
        }
    }
}

impl Hash for Quantity {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Must agree with PartialEq: value only, never the format.
        self.mantissa.hash(state);
        self.scale.hash(state);
    }
}

impl Default for Quantity {
    fn default() -> Quantity {
        Quantity::zero()
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.canonical())
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(s: &str) -> Result<Quantity, QuantityError> {
        Quantity::parse(s)
    }
}

impl serde::Serialize for Quantity {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Quantity {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Quantity, D::Error> {
        // Any, not str: YAML users write `cpu: 1` and `cpu: 0.5` unquoted.
        deserializer.deserialize_any(QuantityVisitor)
    }
}

/// Serde visitor accepting strings, integers, floats and null.
struct QuantityVisitor;

impl QuantityVisitor {
    /// Parses number text produced by us, reporting `shown` on failure.
    fn number<E: serde::de::Error>(text: &str, shown: &str) -> Result<Quantity, E> {
        match Quantity::parse(text) {
            // A number written without quotes reads as plain decimal, as
            // Kubernetes would see `0.5` or `2` in a manifest.
            Ok(q) => Ok(Quantity { format: Format::DecimalSI, ..q }),
            Err(_) => Err(E::custom(QuantityError::new(shown))),
        }
    }
}

impl<'de> serde::de::Visitor<'de> for QuantityVisitor {
    type Value = Quantity;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a quantity such as \"500m\" or \"1Gi\", or a number")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Quantity, E> {
        // Kubernetes trims surrounding whitespace when decoding JSON, though
        // ParseQuantity itself does not.
        Quantity::parse(v.trim()).map_err(|_| E::custom(QuantityError::new(v)))
    }

    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Quantity, E> {
        match std::str::from_utf8(v) {
            Ok(s) => self.visit_str(s),
            Err(_) => Err(E::custom(QuantityError::new(&String::from_utf8_lossy(v)))),
        }
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Quantity, E> {
        Ok(Quantity::from_value(v, false))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Quantity, E> {
        // 20 digits at scale 0 always fit.
        Ok(Quantity::exact(i128::from(v), 0, Format::DecimalSI))
    }

    fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<Quantity, E> {
        let text = v.to_string();
        QuantityVisitor::number(&text, &text)
    }

    fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<Quantity, E> {
        let text = v.to_string();
        QuantityVisitor::number(&text, &text)
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Quantity, E> {
        // `{:e}` gives the shortest digits that read back as the same float,
        // so 0.1 becomes exactly 0.1 and 1e300 stays short; NaN and infinities
        // print as words and fail to parse.
        QuantityVisitor::number(&format!("{v:e}"), &v.to_string())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Quantity, E> {
        // Kubernetes decodes JSON null as the zero quantity.
        Ok(Quantity::zero())
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Quantity, E> {
        Ok(Quantity::zero())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    const MAX: i64 = i64::MAX;

    /// (input, milli_value, value, canonical text), from upstream's tests and docs.
    const PARSE_CASES: &[(&str, i64, i64, &str)] = &[
        ("0", 0, 0, "0"),
        ("0n", 0, 0, "0"),
        ("0Ki", 0, 0, "0"),
        ("-0", 0, 0, "0"),
        ("00.000", 0, 0, "0"),
        ("1", 1000, 1, "1"),
        ("+1", 1000, 1, "1"),
        ("-1", -1000, -1, "-1"),
        ("100m", 100, 1, "100m"),
        ("0.1", 100, 1, "100m"),
        ("0.5", 500, 1, "500m"),
        (".5", 500, 1, "500m"),
        ("5.", 5000, 5, "5"),
        ("0.001", 1, 1, "1m"),
        ("1.2345", 1235, 2, "1234500u"),
        ("1n", 1, 1, "1n"),
        ("5n", 1, 1, "5n"),
        ("1u", 1, 1, "1u"),
        ("4u", 1, 1, "4u"),
        ("3m", 3, 1, "3m"),
        ("1000m", 1000, 1, "1"),
        ("1000", 1_000_000, 1000, "1k"),
        ("8k", 8_000_000, 8000, "8k"),
        ("50k", 50_000_000, 50_000, "50k"),
        ("100.035k", 100_035_000, 100_035, "100035"),
        ("7M", 7_000_000_000, 7_000_000, "7M"),
        ("10.035M", 10_035_000_000, 10_035_000, "10035k"),
        ("1G", 1_000_000_000_000, 1_000_000_000, "1G"),
        ("1000M", 1_000_000_000_000, 1_000_000_000, "1G"),
        ("1.G", 1_000_000_000_000, 1_000_000_000, "1G"),
        ("5T", 5_000_000_000_000_000, 5_000_000_000_000, "5T"),
        ("2P", 2_000_000_000_000_000_000, 2_000_000_000_000_000, "2P"),
        ("1E", MAX, 1_000_000_000_000_000_000, "1E"),
        ("12E", MAX, MAX, "12E"),
        ("1000E", MAX, MAX, "1e21"),
        ("18446744073709551616", MAX, MAX, "18446744073709551616"),
        ("1e3", 1_000_000, 1000, "1e3"),
        ("1E6", 1_000_000_000, 1_000_000, "1e6"),
        ("1E-3", 1, 1, "1e-3"),
        ("1e0", 1000, 1, "1"),
        ("1.2e3", 1_200_000, 1200, "1200"),
        ("1.3E+6", 1_300_000_000, 1_300_000, "1300e3"),
        ("0.5e-1", 50, 1, "50e-3"),
        ("80e-3", 80, 1, "80e-3"),
        ("1e21", MAX, MAX, "1e21"),
        ("1.1E-9", 1, 1, "2e-9"),
        ("1.0000000001", 1001, 2, "1000000001n"),
        ("0.0000000001", 1, 1, "1n"),
        ("0.0000000005", 1, 1, "1n"),
        ("0.9n", 1, 1, "1n"),
        ("3.001n", 1, 1, "4n"),
        ("0.00000012345", 1, 1, "124n"),
        ("-0.0000000001", 0, 0, "-1n"),
        ("1Ki", 1_024_000, 1024, "1Ki"),
        ("8Ki", 8_192_000, 8192, "8Ki"),
        ("1.5Ki", 1_536_000, 1536, "1536"),
        ("1.1Ki", 1_126_400, 1127, "1126400m"),
        ("7Mi", 7_340_032_000, 7_340_032, "7Mi"),
        ("0.5Mi", 524_288_000, 524_288, "512Ki"),
        ("1Gi", 1_073_741_824_000, 1_073_741_824, "1Gi"),
        ("1024Mi", 1_073_741_824_000, 1_073_741_824, "1Gi"),
        ("5Ti", 5_497_558_138_880_000, 5_497_558_138_880, "5Ti"),
        ("4Pi", 4_503_599_627_370_496_000, 4_503_599_627_370_496, "4Pi"),
        ("1Ei", MAX, 1_152_921_504_606_846_976, "1Ei"),
        ("3Ei", MAX, 3_458_764_513_820_540_928, "3Ei"),
        ("9Ei", MAX, MAX, "9223372036854775807"),
        ("9223372036854775807Ki", MAX, MAX, "9223372036854775807"),
        ("100.035Ki", 102_435_840, 102_436, "102435840m"),
        (".001Ki", 1024, 2, "1024m"),
        (".000001Ki", 2, 1, "1024u"),
        (".000000000001Ki", 1, 1, "2n"),
        ("-1Gi", -1_073_741_824_000, -1_073_741_824, "-1Gi"),
        ("-1.5", -1500, -1, "-1500m"),
        ("-0.5", -500, 0, "-500m"),
        ("-100m", -100, 0, "-100m"),
    ];

    /// Inputs Kubernetes rejects (or that this module rejects on purpose; see the module docs).
    const REJECTED: &[&str] = &[
        "",
        " 1",
        "1 ",
        "1 Gi",
        "1\t",
        "1.5.0",
        "1.1.M",
        "1+1.0M",
        "1KB",
        "1K",
        "1ki",
        "1i",
        ".5i",
        "-3.01i",
        "0.1mi",
        "0.1am",
        "aoeu",
        "Mi",
        "e3",
        ".",
        "+",
        "-",
        "+-1",
        "--1",
        "1e",
        "-3.01e-",
        "1e+-3",
        "1e3.5",
        "1Ee3",
        "1e99999999999999999999",
        "1e9999999999",
        "0x10",
        "1_000",
        "\u{ff11}",
        "123456789012345678901234567890123456789",
    ];

    #[test]
    fn parses_like_upstream() {
        for &(input, milli, value, text) in PARSE_CASES {
            let q = Quantity::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(q.milli_value(), milli, "milli_value of {input}");
            assert_eq!(q.value(), value, "value of {input}");
            assert_eq!(q.to_string(), text, "canonical form of {input}");
        }
        assert!(PARSE_CASES.len() >= 40);
    }

    #[test]
    fn rejects_invalid_input() {
        for &input in REJECTED {
            let err = Quantity::parse(input).expect_err(input);
            assert_eq!(err.input, input);
        }
        assert!(REJECTED.len() >= 15);
    }

    #[test]
    fn error_message_is_exact() {
        let err = Quantity::parse("1.5.0").unwrap_err();
        assert_eq!(err.to_string(), r#"invalid quantity "1.5.0""#);
        assert_eq!("1KB".parse::<Quantity>().unwrap_err().input, "1KB");
    }

    #[test]
    fn formats_follow_upstream() {
        assert_eq!(Quantity::parse("1Gi").unwrap().format(), Format::BinarySI);
        assert_eq!(Quantity::parse("0Ki").unwrap().format(), Format::BinarySI);
        assert_eq!(Quantity::parse("1e3").unwrap().format(), Format::DecimalExponent);
        assert_eq!(Quantity::parse("1").unwrap().format(), Format::DecimalSI);
        // A non-zero binary value below 1 becomes decimal SI.
        assert_eq!(Quantity::parse("0.000000000001Ki").unwrap().format(), Format::DecimalSI);
        assert_eq!(Quantity::parse("0.5Ki").unwrap().format(), Format::BinarySI);
    }

    #[test]
    fn compares_by_value() {
        let q = |s| Quantity::parse(s).unwrap();
        assert_eq!(q("1Gi"), q("1073741824"));
        assert_eq!(q("0.5"), q("500m"));
        assert_eq!(q("1e3"), q("1k"));
        assert_eq!(q("0"), q("0Ki"));
        assert!(q("100m") > q("50m"));
        assert!(q("10000T") > q("100Gi"));
        assert!(q("-1") < q("1n"));
        assert!(q("-2") < q("-1"));
        assert!(q("1e1000") > q("9E"));
        assert!(q("-1e1000") < q("-9E"));
        assert!(q("999m") < q("1"));
        let set: HashSet<Quantity> = ["1Gi", "1024Mi", "1073741824", "1Ki", "1024"].iter().map(|s| q(s)).collect();
        assert_eq!(set.len(), 2);
    }

    #[test]
    fn constructors() {
        assert_eq!(Quantity::from_milli(1).to_string(), "1m");
        assert_eq!(Quantity::from_milli(1000).to_string(), "1");
        assert_eq!(Quantity::from_milli(1_234_000).to_string(), "1234");
        assert_eq!(Quantity::from_value(1000, false).to_string(), "1k");
        assert_eq!(Quantity::from_value(1024, true).to_string(), "1Ki");
        assert_eq!(Quantity::from_value(1024 * 1024, true).to_string(), "1Mi");
        assert_eq!(Quantity::from_value(5, true).to_string(), "5");
        assert_eq!(Quantity::zero().to_string(), "0");
        assert!(Quantity::zero().is_zero() && !Quantity::zero().is_negative());
        assert_eq!(Quantity::default(), Quantity::zero());
        // 2^63 has no round-trippable binary spelling, so it prints in decimal.
        let min = Quantity::from_value(i64::MIN, true);
        assert_eq!(min.to_string(), "-9223372036854775808");
        assert_eq!(Quantity::parse(&min.to_string()).unwrap().value(), i64::MIN);
        assert_eq!(Quantity::from_value(MAX, true).value(), MAX);
        assert_eq!(Quantity::from_milli(i64::MIN).milli_value(), i64::MIN);
        assert_eq!(format!("[{:>6}]", Quantity::from_milli(500)), "[  500m]");
    }

    #[test]
    fn add_and_sub() {
        let q = |s| Quantity::parse(s).unwrap();
        let sum = q("1Gi").add(&q("512Mi"));
        assert_eq!(sum.to_string(), "1536Mi");
        assert_eq!(q("10").add(&q("1Ki")).to_string(), "1034");
        assert_eq!(q("100m").add(&q("1")).to_string(), "1100m");
        // Zero takes the other side's format, so the suffix survives both ways.
        for s in ["100m", "1Gi"] {
            assert_eq!(q(s).add(&Quantity::zero()).to_string(), s);
            assert_eq!(Quantity::zero().add(&q(s)).to_string(), s);
        }
        assert_eq!(q("1").sub(&q("1500m")).to_string(), "-500m");
        assert!(q("1Gi").sub(&q("1024Mi")).is_zero());
        assert_eq!(q("-1Gi").neg(), q("1Gi"));
        // Far-apart magnitudes round up at the 38th digit instead of failing.
        let big = q("1e1000").add(&q("1n"));
        assert!(big > q("1e1000"));
        assert_eq!(big.sub(&q("1e1000")), q("1e964"));
        let top = q("99999999999999999999999999999999999999");
        assert!(top.add(&top) > top);
    }

    #[test]
    fn serde_round_trip() {
        let q: Quantity = serde_json::from_str(r#""1.5Gi""#).unwrap();
        assert_eq!(serde_json::to_string(&q).unwrap(), r#""1536Mi""#);
        let one: Quantity = serde_json::from_str("1").unwrap();
        assert_eq!(one.milli_value(), 1000);
        assert_eq!(one.to_string(), "1");
        let half: Quantity = serde_json::from_str("0.5").unwrap();
        assert_eq!(half.milli_value(), 500);
        assert_eq!(half.to_string(), "500m");
        let tenth: Quantity = serde_json::from_str("0.1").unwrap();
        assert_eq!(tenth.to_string(), "100m");
        let neg: Quantity = serde_json::from_str("-1").unwrap();
        assert_eq!(neg.to_string(), "-1");
        let huge: Quantity = serde_json::from_str("18446744073709551615").unwrap();
        assert_eq!(huge.to_string(), "18446744073709551615");
        let float: Quantity = serde_json::from_str("1e3").unwrap();
        assert_eq!(float.to_string(), "1k");
        let spaced: Quantity = serde_json::from_str(r#"" 1 ""#).unwrap();
        assert_eq!(spaced.to_string(), "1");
        let null: Quantity = serde_json::from_str("null").unwrap();
        assert!(null.is_zero());
    }

    #[test]
    fn serde_errors_name_the_input() {
        let err = serde_json::from_str::<Quantity>(r#""1.5.0""#).unwrap_err();
        assert!(err.to_string().contains(r#"invalid quantity "1.5.0""#), "{err}");
        let err = serde_json::from_str::<Quantity>("true").unwrap_err();
        assert!(err.to_string().contains("a quantity"), "{err}");
        let err = serde_json::from_value::<Quantity>(serde_json::json!("1KB")).unwrap_err();
        assert_eq!(err.to_string(), r#"invalid quantity "1KB""#);
    }

    /// A quantity string drawn from the whole grammar.
    fn quantity_text() -> impl Strategy<Value = String> {
        let sign = prop_oneof![Just(""), Just("+"), Just("-")];
        // At most 10 + 12 + 10 significant digits: always within the 38 kept.
        let int = prop_oneof![Just(String::new()), (0u64..10_000_000_000).prop_map(|n| n.to_string())];
        let frac = prop_oneof![
            Just(None),
            (0u32..12, any::<u32>()).prop_map(|(zeros, n)| Some(format!("{}{n}", "0".repeat(zeros as usize)))),
        ];
        let suffix = prop_oneof![
            prop::sample::select(vec![
                "", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
            ])
            .prop_map(str::to_string),
            (prop::sample::select(vec!["e", "E"]), -40i32..60).prop_map(|(e, x)| format!("{e}{x}")),
        ];
        (sign, int, frac, suffix).prop_map(|(sign, int, frac, suffix)| {
            let int = if int.is_empty() && frac.is_none() { "0".to_string() } else { int };
            match frac {
                Some(f) => format!("{sign}{int}.{f}{suffix}"),
                None => format!("{sign}{int}{suffix}"),
            }
        })
    }

    proptest! {
        #[test]
        fn milli_round_trips(m in any::<i64>()) {
            let text = Quantity::from_milli(m).to_string();
            prop_assert_eq!(Quantity::parse(&text).unwrap().milli_value(), m);
        }

        #[test]
        fn bytes_round_trip(v in any::<i64>()) {
            let text = Quantity::from_value(v, true).to_string();
            prop_assert_eq!(Quantity::parse(&text).unwrap().value(), v);
        }

        #[test]
        fn kibibytes_scale(n in 0i64..(1 << 40)) {
            prop_assert_eq!(Quantity::parse(&format!("{n}Ki")).unwrap().value(), n * 1024);
        }

        #[test]
        fn display_reparses_equal(text in quantity_text()) {
            let q = Quantity::parse(&text);
            prop_assert!(q.is_ok(), "{} did not parse", text);
            let q = q.unwrap();
            let shown = q.to_string();
            let back = Quantity::parse(&shown).unwrap();
            prop_assert_eq!(&back, &q, "{} -> {}", text, shown);
            // The canonical form is a fixed point.
            prop_assert_eq!(back.to_string(), shown);
        }

        #[test]
        fn sums_reparse_equal(a in quantity_text(), b in quantity_text()) {
            let (a, b) = (Quantity::parse(&a).unwrap(), Quantity::parse(&b).unwrap());
            let sum = a.add(&b);
            prop_assert_eq!(&sum, &b.add(&a));
            prop_assert_eq!(Quantity::parse(&sum.to_string()).unwrap(), sum.clone());
            // Adding something positive never makes the value smaller.
            if !b.is_negative() {
                prop_assert!(sum >= a);
            }
        }

        #[test]
        fn order_matches_milli_values(a in -1_000_000_000i64..1_000_000_000, b in -1_000_000_000i64..1_000_000_000) {
            let (qa, qb) = (Quantity::from_milli(a), Quantity::from_milli(b));
            prop_assert_eq!(qa.cmp(&qb), a.cmp(&b));
            prop_assert_eq!(qa.add(&qb).milli_value(), a + b);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn any_text_parses_or_is_refused_without_a_panic(text in "[-+0-9.eEkKMGTPinum ]{0,24}|\\PC{0,24}") {
            if let Ok(q) = Quantity::parse(&text) {
                let shown = q.to_string();
                prop_assert_eq!(Quantity::parse(&shown).ok(), Some(q), "{} -> {}", text, shown);
            }
        }
    }
}
