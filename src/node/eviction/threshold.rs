//! Eviction thresholds as kubelet parses and checks them (`ParseThresholdConfig`,
//! `parseThresholdStatement`, `parseGracePeriods`, `parseMinimumReclaims`), with its error
//! messages, and what a threshold amounts to against a capacity (`GetThresholdQuantity`).

use super::Signal;
use crate::api::Quantity;
use std::collections::BTreeMap;
use std::time::Duration;

/// A threshold's operator (kubelet's `OpForSignal`: every signal's is `LessThan`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operator {
    /// Met when the signal's available amount is below the threshold.
    LessThan,
}

/// A threshold's amount: a quantity, or a share of the signal's capacity.
#[derive(Clone, Debug, PartialEq)]
pub enum ThresholdValue {
    /// Bytes or a count (`100Mi`, `1000`).
    Quantity(Quantity),
    /// A fraction of the capacity, 0 to 1 (`"10%"` is 0.1), as kubelet's `float32`.
    Percentage(f32),
}

impl ThresholdValue {
    /// The amount against `capacity` (kubelet's `GetThresholdQuantity`: a percentage is
    /// `int64(float64(capacity) * float64(percentage))`, in binary SI).
    pub fn quantity(&self, capacity: i64) -> Quantity {
        match self {
            ThresholdValue::Quantity(q) => q.clone(),
            ThresholdValue::Percentage(p) => Quantity::from_value((capacity as f64 * f64::from(*p)) as i64, true),
        }
    }
}

/// One eviction threshold (kubelet's `evictionapi.Threshold`).
#[derive(Clone, Debug, PartialEq)]
pub struct Threshold {
    /// What is measured.
    pub signal: Signal,
    /// How it is compared.
    pub operator: Operator,
    /// The amount.
    pub value: ThresholdValue,
    /// How long it must be met before pods are evicted; zero for a hard threshold.
    pub grace_period: Duration,
    /// How much more than the threshold an eviction should free before it counts as resolved.
    pub min_reclaim: Option<ThresholdValue>,
}

impl Threshold {
    /// A hard threshold (kubelet's `isHardEvictionThreshold`: no grace period) evicts at once
    /// and with no grace.
    pub fn is_hard(&self) -> bool {
        self.grace_period.is_zero()
    }

    /// Whether `available` of `capacity` meets it; with `enforce_min_reclaim` the threshold
    /// is raised by its minimum reclaim (kubelet's `thresholdsMet`).
    pub fn met(&self, available: i64, capacity: i64, enforce_min_reclaim: bool) -> bool {
        let mut quantity = self.value.quantity(capacity);
        if let Some(min) = self.min_reclaim.as_ref().filter(|_| enforce_min_reclaim) {
            quantity = quantity.add(&min.quantity(capacity));
        }
        match self.operator {
            Operator::LessThan => quantity > Quantity::from_value(available, true),
        }
    }
}

/// The table of the configuration a threshold setting came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThresholdTable {
    /// Hard thresholds (kubelet's `evictionHard`).
    Hard,
    /// Soft thresholds (`evictionSoft`).
    Soft,
    /// Soft thresholds' grace periods (`evictionSoftGracePeriod`).
    SoftGracePeriod,
    /// Minimum reclaims (`evictionMinimumReclaim`).
    MinimumReclaim,
}

/// A threshold setting kubelet would refuse, with kubelet's message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ThresholdError {
    /// Not one of the signals.
    #[error("unsupported eviction signal {signal}")]
    UnsupportedSignal {
        /// As written.
        signal: String,
    },
    /// A percentage that is not a number.
    #[error("strconv.ParseFloat: parsing {value:?}: invalid syntax")]
    ParsePercentage {
        /// The number, without its `%`.
        value: String,
    },
    /// A percentage below 0 %.
    #[error("eviction percentage threshold {signal} must be >= 0%: {value}")]
    NegativePercentage {
        /// The signal.
        signal: Signal,
        /// As written.
        value: String,
    },
    /// A percentage above 100 %.
    #[error("eviction percentage threshold {signal} must be <= 100%: {value}")]
    PercentageAbove100 {
        /// The signal.
        signal: Signal,
        /// As written.
        value: String,
    },
    /// Not a quantity (kubelet's `resource.ErrFormatWrong`).
    #[error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]
    ParseQuantity {
        /// As written.
        value: String,
    },
    /// A threshold quantity of 0 or less.
    #[error("eviction threshold {signal} must be positive: {quantity}")]
    NotPositive {
        /// The signal.
        signal: Signal,
        /// As kubelet prints it.
        quantity: Quantity,
    },
    /// A soft threshold without a grace period.
    #[error("grace period must be specified for the soft eviction threshold {signal}")]
    SoftWithoutGracePeriod {
        /// The signal.
        signal: Signal,
    },
    /// Not a Go duration.
    #[error("time: invalid duration {value:?}")]
    ParseDuration {
        /// As written.
        value: String,
    },
    /// A negative grace period.
    #[error("invalid eviction grace period specified: {value}, must be a positive value")]
    NegativeGracePeriod {
        /// As written.
        value: String,
    },
    /// A minimum reclaim percentage of 0 or less.
    #[error("eviction percentage minimum reclaim {signal} must be positive: {value}")]
    MinReclaimPercentageNotPositive {
        /// The signal.
        signal: Signal,
        /// As written.
        value: String,
    },
    /// A negative minimum reclaim quantity.
    #[error("negative eviction minimum reclaim specified for {signal}")]
    NegativeMinReclaim {
        /// The signal.
        signal: Signal,
    },
}

fn signal(name: &str) -> Result<Signal, ThresholdError> {
    Signal::parse(name).ok_or_else(|| ThresholdError::UnsupportedSignal { signal: name.into() })
}

/// kubelet's `parsePercentage`: `"10.5%"` is 0.105, parsed as a `float32` as kubelet does.
fn percentage(value: &str) -> Result<f32, ThresholdError> {
    let number = value.trim_end_matches('%');
    // Rust, unlike Go, would read "inf" and "NaN"; neither is a share of anything.
    let bad = || ThresholdError::ParsePercentage { value: number.into() };
    let parsed: f64 = number.parse().map_err(|_| bad())?;
    if !parsed.is_finite() || number.chars().any(|c| c.is_ascii_alphabetic() && c != 'e' && c != 'E') {
        return Err(bad());
    }
    Ok(parsed as f32 / 100.0)
}

fn quantity(value: &str) -> Result<Quantity, ThresholdError> {
    Quantity::parse(value).map_err(|_| ThresholdError::ParseQuantity { value: value.into() })
}

/// Whether a statement turns its signal off: kubelet ignores `"0%"` and `"100%"`; ferrolet
/// also reads `""` and `"0"` so (kubelet refuses `"0"` as not positive).
pub fn is_off(value: &str) -> bool {
    matches!(value.trim(), "" | "0" | "0%" | "100%")
}

/// kubelet's `parseThresholdStatement`: `signal` below `value` (`"100Mi"`, `"10%"`); `None`
/// for a statement that turns the signal off.
pub fn parse_statement(name: &str, value: &str) -> Result<Option<Threshold>, ThresholdError> {
    let signal = signal(name)?;
    if is_off(value) {
        return Ok(None);
    }
    let value = value.trim();
    let amount = if value.ends_with('%') {
        let p = percentage(value)?;
        if p < 0.0 {
            return Err(ThresholdError::NegativePercentage { signal, value: value.into() });
        }
        if p > 1.0 {
            return Err(ThresholdError::PercentageAbove100 { signal, value: value.into() });
        }
        ThresholdValue::Percentage(p)
    } else {
        let q = quantity(value)?;
        if q.is_negative() || q.is_zero() {
            return Err(ThresholdError::NotPositive { signal, quantity: q });
        }
        ThresholdValue::Quantity(q)
    };
    Ok(Some(Threshold {
        signal,
        operator: Operator::LessThan,
        value: amount,
        grace_period: Duration::ZERO,
        min_reclaim: None,
    }))
}

/// One entry of kubelet's `parseGracePeriods`: a Go duration, not negative.
pub fn parse_grace_period(name: &str, value: &str) -> Result<(Signal, Duration), ThresholdError> {
    let signal = signal(name)?;
    let value = value.trim();
    let parse = |s: &str| {
        crate::base::timefmt::parse_duration(s).map_err(|_| ThresholdError::ParseDuration { value: value.into() })
    };
    match value.strip_prefix('-') {
        // Go's time.ParseDuration reads a sign; kubelet then refuses what is below zero.
        Some(rest) => match parse(rest)? {
            d if d.is_zero() => Ok((signal, d)),
            _ => Err(ThresholdError::NegativeGracePeriod { value: value.into() }),
        },
        None => Ok((signal, parse(value.strip_prefix('+').unwrap_or(value))?)),
    }
}

/// One entry of kubelet's `parseMinimumReclaims`: a positive percentage, or a quantity not
/// below zero.
pub fn parse_min_reclaim(name: &str, value: &str) -> Result<(Signal, ThresholdValue), ThresholdError> {
    let signal = signal(name)?;
    let value = value.trim();
    if value.ends_with('%') {
        let p = percentage(value)?;
        if p <= 0.0 {
            return Err(ThresholdError::MinReclaimPercentageNotPositive { signal, value: value.into() });
        }
        return Ok((signal, ThresholdValue::Percentage(p)));
    }
    let q = quantity(value)?;
    if q.is_negative() {
        return Err(ThresholdError::NegativeMinReclaim { signal });
    }
    Ok((signal, ThresholdValue::Quantity(q)))
}

/// kubelet's `ParseThresholdConfig`, with node allocatable enforced for pods (ferrolet
/// always enforces it): the hard thresholds, then the soft ones with their grace periods,
/// each with its minimum reclaim, then a copy of every hard `memory.available` threshold as
/// `allocatableMemory.available` (`addAllocatableThresholds`). Within each table the
/// thresholds are in signal order. The error names the table and the key it is about.
pub fn parse_thresholds(
    hard: &BTreeMap<String, String>,
    soft: &BTreeMap<String, String>,
    soft_grace_period: &BTreeMap<String, String>,
    minimum_reclaim: &BTreeMap<String, String>,
) -> Result<Vec<Threshold>, (ThresholdTable, String, ThresholdError)> {
    let statements = |table: ThresholdTable, map: &BTreeMap<String, String>| {
        let mut out = Vec::new();
        for (name, value) in map {
            if let Some(t) = parse_statement(name, value).map_err(|e| (table, name.clone(), e))? {
                out.push(t);
            }
        }
        out.sort_by_key(|t| t.signal);
        Ok::<_, (ThresholdTable, String, ThresholdError)>(out)
    };
    let hard = statements(ThresholdTable::Hard, hard)?;
    let mut soft = statements(ThresholdTable::Soft, soft)?;
    let mut grace = BTreeMap::new();
    for (name, value) in soft_grace_period {
        let (signal, d) =
            parse_grace_period(name, value).map_err(|e| (ThresholdTable::SoftGracePeriod, name.clone(), e))?;
        grace.insert(signal, d);
    }
    let mut reclaim = BTreeMap::new();
    for (name, value) in minimum_reclaim {
        let (signal, v) =
            parse_min_reclaim(name, value).map_err(|e| (ThresholdTable::MinimumReclaim, name.clone(), e))?;
        reclaim.insert(signal, v);
    }
    for t in &mut soft {
        let Some(d) = grace.get(&t.signal) else {
            let e = ThresholdError::SoftWithoutGracePeriod { signal: t.signal };
            return Err((ThresholdTable::Soft, t.signal.as_str().into(), e));
        };
        t.grace_period = *d;
    }
    let mut all: Vec<Threshold> = hard.into_iter().chain(soft).collect();
    for t in &mut all {
        t.min_reclaim = reclaim.get(&t.signal).cloned();
    }
    let allocatable: Vec<Threshold> = all
        .iter()
        .filter(|t| t.signal == Signal::MemoryAvailable && t.is_hard())
        .map(|t| Threshold { signal: Signal::AllocatableMemoryAvailable, ..t.clone() })
        .collect();
    all.extend(allocatable);
    Ok(all)
}

/// kubelet's default `evictionHard`: `memory.available<100Mi`, `nodefs.available<10%`,
/// `imagefs.available<15%`, `nodefs.inodesFree<5%`.
pub fn default_hard() -> BTreeMap<String, String> {
    [
        ("memory.available", "100Mi"),
        ("nodefs.available", "10%"),
        ("imagefs.available", "15%"),
        ("nodefs.inodesFree", "5%"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}
