//! `[eviction]`: kubelet's `evictionHard`, `evictionSoft`, `evictionSoftGracePeriod`,
//! `evictionMaxPodGracePeriod`, `evictionMinimumReclaim`, `evictionPressureTransitionPeriod`
//! and `kernelMemcgNotification`, checked with kubelet's messages, and the settings the
//! eviction manager runs with. The old top-level `eviction_hard_imagefs_available` is a
//! deprecated spelling of `hard."imagefs.available"`.

use super::{Config, Dur, MAX_LONG_PERIOD};
use crate::node::eviction::threshold::{default_hard, parse_statement, parse_thresholds, ThresholdTable};
use crate::node::eviction::{Settings, Signal};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// `[eviction]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EvictionConfig {
    /// Hard thresholds, signal to amount (`"100Mi"`, `"10%"`): pods are evicted at once and
    /// with no grace. Unset: kubelet's four defaults; a table replaces them whole, as
    /// kubelet's `evictionHard` does. `"0%"`, `"100%"`, `"0"` or `""` turns a signal off.
    pub hard: Option<BTreeMap<String, String>>,
    /// Soft thresholds: met for `soft_grace_period`, pods are evicted with their own grace
    /// period, capped by `max_pod_grace_period`.
    pub soft: BTreeMap<String, String>,
    /// Each soft threshold's grace period, signal to duration (`"1m30s"`).
    pub soft_grace_period: BTreeMap<String, String>,
    /// The longest grace period a pod evicted for a soft threshold gets; 0: its own.
    pub max_pod_grace_period: Dur,
    /// How much past its threshold a signal must get back before the pressure counts as
    /// relieved, signal to amount.
    pub minimum_reclaim: BTreeMap<String, String>,
    /// How long a pressure condition stays True after its threshold was last met.
    pub pressure_transition_period: Dur,
    /// Have the kernel wake the manager when memory crosses a threshold (kubelet's
    /// `kernelMemcgNotification`), besides the stats period.
    pub memory_notification: bool,
}

impl Default for EvictionConfig {
    fn default() -> Self {
        EvictionConfig {
            hard: None,
            soft: BTreeMap::new(),
            soft_grace_period: BTreeMap::new(),
            max_pod_grace_period: Dur(Duration::ZERO),
            minimum_reclaim: BTreeMap::new(),
            pressure_transition_period: Dur(Duration::from_secs(300)),
            memory_notification: true,
        }
    }
}

/// The TOML key of `signal` in `table`: `eviction.hard."memory.available"`.
fn key(table: ThresholdTable, signal: &str) -> String {
    let table = match table {
        ThresholdTable::Hard => "hard",
        ThresholdTable::Soft => "soft",
        ThresholdTable::SoftGracePeriod => "soft_grace_period",
        ThresholdTable::MinimumReclaim => "minimum_reclaim",
    };
    format!("eviction.{table}.{signal:?}")
}

/// The deprecated top-level key.
const ALIAS: &str = "eviction_hard_imagefs_available";

impl Config {
    /// The hard thresholds in effect: `[eviction] hard`, with the deprecated
    /// `eviction_hard_imagefs_available` as its `imagefs.available` when set.
    fn hard_statements(&self) -> BTreeMap<String, String> {
        let mut hard = self.eviction.hard.clone().unwrap_or_else(default_hard);
        if let Some(v) = &self.eviction_hard_imagefs_available {
            hard.insert(Signal::ImageFsAvailable.as_str().into(), v.clone());
        }
        hard
    }

    /// What the eviction manager runs with (checked: `check` passed). Warns once per call
    /// when the deprecated key is used.
    pub fn eviction_settings(&self) -> Settings {
        if let Some(v) = &self.eviction_hard_imagefs_available {
            log::warn!(
                "config: {ALIAS} = {v:?} is deprecated: write it as [eviction] hard.\"imagefs.available\" = {v:?}"
            );
        }
        let e = &self.eviction;
        let thresholds = parse_thresholds(&self.hard_statements(), &e.soft, &e.soft_grace_period, &e.minimum_reclaim)
            .unwrap_or_default();
        Settings {
            thresholds,
            pressure_transition_period: e.pressure_transition_period.0,
            max_pod_grace_period: e.max_pod_grace_period.0,
        }
    }
}

/// The first problem with `[eviction]` (and the deprecated key): (key, message).
pub fn check(cfg: &Config) -> Result<(), (String, String)> {
    let e = &cfg.eviction;
    if let Some(v) = &cfg.eviction_hard_imagefs_available {
        if e.hard.as_ref().is_some_and(|h| h.contains_key(Signal::ImageFsAvailable.as_str())) {
            return Err((
                ALIAS.into(),
                format!(
                    "set, and so is [eviction] hard.\"imagefs.available\": keep only the latter ({ALIAS} is its deprecated spelling)"
                ),
            ));
        }
        if let Err(err) = parse_statement(Signal::ImageFsAvailable.as_str(), v) {
            return Err((ALIAS.into(), err.to_string()));
        }
    }
    parse_thresholds(&cfg.hard_statements(), &e.soft, &e.soft_grace_period, &e.minimum_reclaim)
        .map_err(|(table, signal, err)| (key(table, &signal), err.to_string()))?;
    for (signal, value) in &e.soft_grace_period {
        // Parsed above; kubelet has no upper bound, ferrolet's periods stop at a day.
        if let Ok((_, d)) = crate::node::eviction::threshold::parse_grace_period(signal, value) {
            if d > MAX_LONG_PERIOD {
                return Err((
                    key(ThresholdTable::SoftGracePeriod, signal),
                    format!("invalid value {value:?}: must be at most {MAX_LONG_PERIOD:?}"),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::eviction::threshold::Operator;
    use crate::node::eviction::{Threshold, ThresholdValue};

    fn err(text: &str) -> String {
        Config::parse("f.toml", text).unwrap_err().to_string()
    }

    fn settings(text: &str) -> Settings {
        Config::parse("f.toml", text).unwrap().eviction_settings()
    }

    fn q(s: &str) -> ThresholdValue {
        ThresholdValue::Quantity(crate::api::Quantity::parse(s).unwrap())
    }

    fn hard(signal: Signal, value: ThresholdValue) -> Threshold {
        Threshold { signal, operator: Operator::LessThan, value, grace_period: Duration::ZERO, min_reclaim: None }
    }

    #[test]
    fn the_defaults_are_kubelets_four_hard_thresholds_and_the_allocatable_copy() {
        let s = Config::default().eviction_settings();
        assert_eq!(
            s.thresholds,
            [
                hard(Signal::MemoryAvailable, q("100Mi")),
                hard(Signal::NodeFsAvailable, ThresholdValue::Percentage(0.1)),
                hard(Signal::NodeFsInodesFree, ThresholdValue::Percentage(0.05)),
                hard(Signal::ImageFsAvailable, ThresholdValue::Percentage(0.15)),
                hard(Signal::AllocatableMemoryAvailable, q("100Mi")),
            ]
        );
        assert_eq!(s.pressure_transition_period, Duration::from_secs(300));
        assert_eq!(s.max_pod_grace_period, Duration::ZERO);
        assert!(Config::default().eviction.memory_notification);
    }

    #[test]
    fn a_hard_table_replaces_the_defaults_whole_and_soft_ones_take_their_grace_periods() {
        let s = settings(
            "[eviction]\nhard = { \"memory.available\" = \"200Mi\" }\nsoft = { \"memory.available\" = \"300Mi\", \"nodefs.available\" = \"0%\" }\nsoft_grace_period = { \"memory.available\" = \"1m30s\" }\nminimum_reclaim = { \"memory.available\" = \"50Mi\" }\nmax_pod_grace_period = \"20s\"\npressure_transition_period = \"30s\"\n",
        );
        let with_reclaim = |t: Threshold| Threshold { min_reclaim: Some(q("50Mi")), ..t };
        assert_eq!(
            s.thresholds,
            [
                with_reclaim(hard(Signal::MemoryAvailable, q("200Mi"))),
                with_reclaim(Threshold {
                    grace_period: Duration::from_secs(90),
                    ..hard(Signal::MemoryAvailable, q("300Mi"))
                }),
                with_reclaim(hard(Signal::AllocatableMemoryAvailable, q("200Mi"))),
            ],
            "nodefs.available at 0% is off; only the hard memory threshold is copied"
        );
        assert_eq!(
            (s.max_pod_grace_period, s.pressure_transition_period),
            (Duration::from_secs(20), Duration::from_secs(30))
        );
        assert_eq!(settings("[eviction]\nhard = {}\n").thresholds, [], "an empty table: no hard thresholds");
    }

    #[test]
    fn bad_values_get_kubelets_messages_under_their_key() {
        for (text, want) in [
            ("[eviction]\nhard = { \"mem.available\" = \"1Gi\" }\n", "f.toml: eviction.hard.\"mem.available\": unsupported eviction signal mem.available"),
            ("[eviction]\nhard = { \"memory.available\" = \"-150Mi\" }\n", "f.toml: eviction.hard.\"memory.available\": eviction threshold memory.available must be positive: -150Mi"),
            ("[eviction]\nhard = { \"nodefs.available\" = \"-15%\" }\n", "f.toml: eviction.hard.\"nodefs.available\": eviction percentage threshold nodefs.available must be >= 0%: -15%"),
            ("[eviction]\nhard = { \"nodefs.available\" = \"150%\" }\n", "f.toml: eviction.hard.\"nodefs.available\": eviction percentage threshold nodefs.available must be <= 100%: 150%"),
            ("[eviction]\nhard = { \"nodefs.available\" = \"1GB\" }\n", "f.toml: eviction.hard.\"nodefs.available\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
            ("[eviction]\nsoft = { \"memory.available\" = \"150Mi\" }\n", "f.toml: eviction.soft.\"memory.available\": grace period must be specified for the soft eviction threshold memory.available"),
            ("[eviction]\nsoft = { \"memory.available\" = \"150Mi\" }\nsoft_grace_period = { \"memory.available\" = \"-30s\" }\n", "f.toml: eviction.soft_grace_period.\"memory.available\": invalid eviction grace period specified: -30s, must be a positive value"),
            ("[eviction]\nsoft_grace_period = { \"memory.available\" = \"30 seconds\" }\n", "f.toml: eviction.soft_grace_period.\"memory.available\": time: invalid duration \"30 seconds\""),
            ("[eviction]\nsoft_grace_period = { \"memory.available\" = \"25h\" }\n", "f.toml: eviction.soft_grace_period.\"memory.available\": invalid value \"25h\": must be at most 86400s"),
            ("[eviction]\nminimum_reclaim = { \"memory.available\" = \"-300Mi\" }\n", "f.toml: eviction.minimum_reclaim.\"memory.available\": negative eviction minimum reclaim specified for memory.available"),
            ("[eviction]\nminimum_reclaim = { \"memory.available\" = \"0%\" }\n", "f.toml: eviction.minimum_reclaim.\"memory.available\": eviction percentage minimum reclaim memory.available must be positive: 0%"),
            ("[eviction]\npressure_transition_period = \"25h\"\n", "f.toml: eviction.pressure_transition_period: invalid value 90000s: must be at most 86400s"),
        ] {
            assert_eq!(err(text), want, "{text}");
        }
        let e = err("[eviction]\nhard = { \"memory.available\" = 100 }\n");
        assert!(e.starts_with("f.toml: eviction.hard.memory.available: invalid type: integer"), "{e}");
        assert!(err("[eviction]\nhrad = {}\n").starts_with("f.toml: eviction.hrad: unknown field `hrad`"));
    }

    #[test]
    fn the_old_imagefs_key_still_sets_the_hard_threshold_but_not_beside_the_new_one() {
        let c = Config::parse("f.toml", "eviction_hard_imagefs_available = \"2Gi\"\n").unwrap();
        let t = c.eviction_settings().thresholds;
        assert!(t.contains(&hard(Signal::ImageFsAvailable, q("2Gi"))), "{t:?}");
        assert!(t.iter().any(|t| t.signal == Signal::MemoryAvailable), "the other defaults stay: {t:?}");
        let c = Config::parse("f.toml", "eviction_hard_imagefs_available = \"\"\n").unwrap();
        assert!(c.eviction_settings().thresholds.iter().all(|t| t.signal != Signal::ImageFsAvailable), "\"\" is off");
        let c = Config::parse("f.toml", "eviction_hard_imagefs_available = \"10.5%\"\n").unwrap();
        assert!(
            c.eviction_settings()
                .thresholds
                .contains(&hard(Signal::ImageFsAvailable, ThresholdValue::Percentage(0.105))),
            "a percentage, as [eviction] hard takes it"
        );
        assert_eq!(
            err("eviction_hard_imagefs_available = \"10%\"\n[eviction]\nhard = { \"imagefs.available\" = \"15%\" }\n"),
            "f.toml: eviction_hard_imagefs_available: set, and so is [eviction] hard.\"imagefs.available\": keep only the latter (eviction_hard_imagefs_available is its deprecated spelling)"
        );
        // Beside a hard table without imagefs, the old key adds it.
        let c = Config::parse(
            "f.toml",
            "eviction_hard_imagefs_available = \"10%\"\n[eviction]\nhard = { \"memory.available\" = \"1Gi\" }\n",
        )
        .unwrap();
        let signals: Vec<Signal> = c.eviction_settings().thresholds.iter().map(|t| t.signal).collect();
        assert_eq!(signals, [Signal::MemoryAvailable, Signal::ImageFsAvailable, Signal::AllocatableMemoryAvailable]);
    }
}
