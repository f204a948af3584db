//! kubelet's `TestParseThresholdConfig`, `TestThresholdsMet`, `TestPercentageThresholdsMet`
//! and `GetThresholdQuantity`.

use super::*;
use crate::node::eviction::threshold::{
    is_off, parse_grace_period, parse_min_reclaim, parse_statement, parse_thresholds, Operator, ThresholdError,
    ThresholdTable,
};
use crate::node::eviction::{Signal, Threshold, ThresholdValue};
use std::collections::BTreeMap;

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn q(s: &str) -> ThresholdValue {
    ThresholdValue::Quantity(Quantity::parse(s).unwrap())
}

fn pct(p: f32) -> ThresholdValue {
    ThresholdValue::Percentage(p)
}

fn t(signal: Signal, value: ThresholdValue, grace: u64, min: Option<ThresholdValue>) -> Threshold {
    Threshold {
        signal,
        operator: Operator::LessThan,
        value,
        grace_period: Duration::from_secs(grace),
        min_reclaim: min,
    }
}

type Parsed = Result<Vec<Threshold>, (ThresholdTable, String, ThresholdError)>;

fn parse(hard: &[(&str, &str)], soft: &[(&str, &str)], grace: &[(&str, &str)], min: &[(&str, &str)]) -> Parsed {
    parse_thresholds(&map(hard), &map(soft), &map(grace), &map(min))
}

#[test]
fn no_values_no_thresholds() {
    assert_eq!(parse(&[], &[], &[], &[]), Ok(vec![]));
}

#[test]
fn all_flag_values_with_the_allocatable_copy_of_the_hard_memory_threshold() {
    let min = Some(q("0"));
    assert_eq!(
        parse(
            &[("memory.available", "150Mi")],
            &[("memory.available", "300Mi")],
            &[("memory.available", "30s")],
            &[("memory.available", "0")]
        ),
        Ok(vec![
            t(Signal::MemoryAvailable, q("150Mi"), 0, min.clone()),
            t(Signal::MemoryAvailable, q("300Mi"), 30, min.clone()),
            t(Signal::AllocatableMemoryAvailable, q("150Mi"), 0, min),
        ])
    );
}

#[test]
fn percentages_are_fractions_as_kubelet_keeps_them() {
    assert_eq!(
        parse(
            &[("imagefs.available", "15%"), ("nodefs.available", "10.5%")],
            &[("imagefs.available", "30%"), ("nodefs.available", "20.5%")],
            &[("imagefs.available", "30s"), ("nodefs.available", "30s")],
            &[("imagefs.available", "10%"), ("nodefs.available", "5%")],
        ),
        Ok(vec![
            t(Signal::NodeFsAvailable, pct(0.105), 0, Some(pct(0.05))),
            t(Signal::ImageFsAvailable, pct(0.15), 0, Some(pct(0.1))),
            t(Signal::NodeFsAvailable, pct(0.205), 30, Some(pct(0.05))),
            t(Signal::ImageFsAvailable, pct(0.3), 30, Some(pct(0.1))),
        ])
    );
}

#[test]
fn inode_and_pid_thresholds_are_counts() {
    assert_eq!(
        parse(
            &[("imagefs.inodesFree", "150Mi"), ("nodefs.inodesFree", "100Mi"), ("pid.available", "1000")],
            &[],
            &[],
            &[("nodefs.inodesFree", "1Gi")]
        ),
        Ok(vec![
            t(Signal::NodeFsInodesFree, q("100Mi"), 0, Some(q("1Gi"))),
            t(Signal::ImageFsInodesFree, q("150Mi"), 0, None),
            t(Signal::PidAvailable, q("1000"), 0, None),
        ])
    );
}

#[test]
fn zero_and_full_percentages_and_empty_values_turn_a_signal_off() {
    assert_eq!(
        parse(
            &[
                ("memory.available", "0%"),
                ("nodefs.available", "100%"),
                ("imagefs.available", ""),
                ("pid.available", "0")
            ],
            &[],
            &[],
            &[]
        ),
        Ok(vec![])
    );
    assert!(is_off(" 0% ") && !is_off("0.0%") && !is_off("1"));
    // An off soft threshold needs no grace period.
    assert_eq!(parse(&[], &[("memory.available", "0%")], &[], &[]), Ok(vec![]));
}

#[test]
fn invalid_statements_are_refused_with_kubelets_messages() {
    let e = |r: Parsed| {
        let (table, key, err) = r.unwrap_err();
        (table, key, err.to_string())
    };
    let s = |x: &str| x.to_string();
    assert_eq!(
        e(parse(&[("mem.available", "150Mi")], &[], &[], &[])),
        (ThresholdTable::Hard, s("mem.available"), s("unsupported eviction signal mem.available"))
    );
    assert_eq!(
        e(parse(&[("memory.available", "150Mi"), ("invalid.foo", "150Mi")], &[], &[], &[])),
        (ThresholdTable::Hard, s("invalid.foo"), s("unsupported eviction signal invalid.foo"))
    );
    assert_eq!(
        e(parse(&[("memory.available", "-150Mi")], &[], &[], &[])),
        (
            ThresholdTable::Hard,
            s("memory.available"),
            s("eviction threshold memory.available must be positive: -150Mi")
        )
    );
    assert_eq!(
        e(parse(&[("memory.available", "-15%")], &[], &[], &[])).2,
        "eviction percentage threshold memory.available must be >= 0%: -15%"
    );
    assert_eq!(
        e(parse(&[], &[("memory.available", "-150Mi")], &[], &[])),
        (
            ThresholdTable::Soft,
            s("memory.available"),
            s("eviction threshold memory.available must be positive: -150Mi")
        )
    );
    assert_eq!(
        e(parse(&[], &[("memory.available", "150Mi")], &[], &[])),
        (
            ThresholdTable::Soft,
            s("memory.available"),
            s("grace period must be specified for the soft eviction threshold memory.available")
        )
    );
    assert_eq!(
        e(parse(&[], &[("memory.available", "150Mi")], &[("memory.available", "-30s")], &[])),
        (
            ThresholdTable::SoftGracePeriod,
            s("memory.available"),
            s("invalid eviction grace period specified: -30s, must be a positive value")
        )
    );
    assert_eq!(
        e(parse(&[], &[], &[], &[("memory.available", "-300Mi")])),
        (
            ThresholdTable::MinimumReclaim,
            s("memory.available"),
            s("negative eviction minimum reclaim specified for memory.available")
        )
    );
    assert_eq!(
        e(parse(&[], &[], &[("pid.avail", "1m")], &[])),
        (ThresholdTable::SoftGracePeriod, s("pid.avail"), s("unsupported eviction signal pid.avail"))
    );
}

#[test]
fn single_values_parse_as_kubelet_parses_them() {
    assert_eq!(
        parse_statement("memory.available", "1%x").unwrap_err().to_string(),
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    );
    assert_eq!(
        parse_statement("memory.available", "x%").unwrap_err().to_string(),
        "strconv.ParseFloat: parsing \"x\": invalid syntax"
    );
    assert_eq!(
        parse_statement("memory.available", "inf%").unwrap_err().to_string(),
        "strconv.ParseFloat: parsing \"inf\": invalid syntax"
    );
    assert_eq!(
        parse_statement("nodefs.available", "150%").unwrap_err().to_string(),
        "eviction percentage threshold nodefs.available must be <= 100%: 150%"
    );
    assert_eq!(parse_statement("nodefs.available", "1e1%").unwrap().unwrap().value, pct(0.1));
    assert_eq!(
        parse_statement("allocatableMemory.available", "1Gi").unwrap().unwrap().signal,
        Signal::AllocatableMemoryAvailable,
        "kubelet accepts the allocatable signal as written"
    );
    assert_eq!(parse_grace_period("memory.available", "1m30s"), Ok((Signal::MemoryAvailable, Duration::from_secs(90))));
    assert_eq!(parse_grace_period("memory.available", "0s"), Ok((Signal::MemoryAvailable, Duration::ZERO)));
    assert_eq!(parse_grace_period("memory.available", "-0s"), Ok((Signal::MemoryAvailable, Duration::ZERO)));
    assert_eq!(
        parse_grace_period("memory.available", "soon").unwrap_err().to_string(),
        "time: invalid duration \"soon\""
    );
    assert_eq!(parse_min_reclaim("nodefs.available", "0"), Ok((Signal::NodeFsAvailable, q("0"))));
    assert_eq!(
        parse_min_reclaim("nodefs.available", "-1%").unwrap_err().to_string(),
        "eviction percentage minimum reclaim nodefs.available must be positive: -1%"
    );
}

#[test]
fn a_threshold_is_met_below_its_amount_and_until_its_minimum_reclaim_once_enforced() {
    // TestThresholdsMet
    let hard = t(Signal::MemoryAvailable, q("1Gi"), 0, Some(q("500Mi")));
    let cap = v("8Gi") as i64;
    assert!(hard.met(v("500Mi") as i64, cap, false));
    assert!(!hard.met(v("2Gi") as i64, cap, false));
    assert!(!hard.met(v("1Gi") as i64, cap, false), "at the threshold is not below it");
    assert!(hard.met((1.05 * v("1Gi") as f64) as i64, cap, true));
    assert!(!hard.met((1.05 * v("1Gi") as f64) as i64, cap, false));
    assert!(!hard.met(v("2Gi") as i64, cap, true));
    assert!(hard.met(-1, cap, false), "usage past the capacity");
}

#[test]
fn percentage_thresholds_are_shares_of_the_capacity() {
    // TestPercentageThresholdsMet
    let memory = t(Signal::MemoryAvailable, pct(0.2), 0, Some(pct(0.05)));
    let disk = t(Signal::NodeFsAvailable, pct(0.3), 0, None);
    let (mcap, dcap) = (v("1000Mi") as i64, v("1000Gi") as i64);
    assert!(memory.met(v("100Mi") as i64, mcap, false) && disk.met(v("100Gi") as i64, dcap, false));
    assert!(!memory.met(v("300Mi") as i64, mcap, false) && !disk.met(v("400Gi") as i64, dcap, false));
    assert!(memory.met(v("225Mi") as i64, mcap, true), "20% + 5% of 1000Mi is 250Mi");
    assert!(!memory.met(v("225Mi") as i64, mcap, false));
    assert!(!memory.met(v("300Mi") as i64, mcap, true));
}

#[test]
fn a_percentage_amounts_to_kubelets_float_arithmetic() {
    // int64(float64(capacity) * float64(float32(0.1))): the float32 rounding shows.
    assert_eq!(pct(0.1).quantity(1_000_000_000).value(), 100_000_001);
    assert_eq!(pct(0.1).quantity(v("1000Mi") as i64).to_string(), "104857601");
    assert_eq!(pct(0.5).quantity(v("1Gi") as i64).to_string(), "512Mi");
    assert_eq!(q("100Mi").quantity(12345).to_string(), "100Mi", "a quantity as written");
}
