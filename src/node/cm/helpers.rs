//! Resource conversions (`pkg/kubelet/cm/helpers_linux.go`) and the cgroup v2 weight formulas.

/// Minimum `cpu.shares`.
pub const MIN_SHARES: u64 = 2;
/// Maximum `cpu.shares`.
pub const MAX_SHARES: u64 = 262_144;
/// `cpu.shares` per CPU.
pub const SHARES_PER_CPU: u64 = 1024;
/// The CFS period in µs (defined with the limits validation checks against it).
pub use crate::api::limits::QUOTA_PERIOD;
/// Smallest CFS quota in µs.
pub const MIN_QUOTA: i64 = 1000;

/// `MilliCPUToShares`: 0 → 2; otherwise millicores·1024/1000 clamped to [2, 262144].
pub fn milli_cpu_to_shares(milli: i64) -> u64 {
    if milli <= 0 {
        return MIN_SHARES;
    }
    ((milli as u64).saturating_mul(SHARES_PER_CPU) / 1000).clamp(MIN_SHARES, MAX_SHARES)
}

/// `MilliCPUToQuota` with the 100 ms period: 0 means no quota; otherwise at least 1 ms.
pub fn milli_cpu_to_quota(milli: i64) -> Option<i64> {
    if milli <= 0 {
        return None;
    }
    Some((milli.saturating_mul(QUOTA_PERIOD as i64) / 1000).max(MIN_QUOTA))
}

/// kubelet's linear shares → `cpu.weight` (KEP-2254), used for kubepods, QoS and pod cgroups.
pub fn shares_to_weight_linear(shares: u64) -> u64 {
    if shares >= MAX_SHARES {
        return 10_000;
    }
    1 + (shares.max(MIN_SHARES) - 2) * 9999 / 262_142
}

/// runc ≥ 1.3.2 / crun ≥ 1.23: `ceil(10^((L² + 125·L)/612 − 7/34))`, `L = log2(shares)`;
/// maps 2 → 1, 1024 → 100 (one CPU weighs like any default cgroup), 262144 → 10000.
pub fn shares_to_weight_quadratic(shares: u64) -> u64 {
    if shares <= MIN_SHARES {
        return 1;
    }
    if shares >= MAX_SHARES {
        return 10_000;
    }
    let l = (shares as f64).log2();
    let exponent = (l * l + 125.0 * l) / 612.0 - 7.0 / 34.0;
    (10f64.powf(exponent).ceil() as u64).clamp(1, 10_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_match_the_reference_vectors() {
        // (millicores, shares, quota µs, linear weight, quadratic weight)
        let vectors: [(i64, u64, i64, u64, u64); 12] = [
            (0, 2, 0, 1, 1),
            (1, 2, 1000, 1, 1),
            (10, 10, 1000, 1, 4),
            (100, 102, 10_000, 4, 17),
            (250, 256, 25_000, 10, 35),
            (500, 512, 50_000, 20, 59),
            (1000, 1024, 100_000, 39, 100),
            (2000, 2048, 200_000, 79, 174),
            (4000, 4096, 400_000, 157, 303),
            (32_000, 32_768, 3_200_000, 1250, 1681),
            (64_000, 65_536, 6_400_000, 2500, 3023),
            (256_000, 262_144, 25_600_000, 10_000, 10_000),
        ];
        for (m, shares, quota, linear, quadratic) in vectors {
            assert_eq!(milli_cpu_to_shares(m), shares, "shares of {m}m");
            assert_eq!(milli_cpu_to_quota(m).unwrap_or(0), quota, "quota of {m}m");
            assert_eq!(shares_to_weight_linear(shares), linear, "linear weight of {shares}");
            assert_eq!(shares_to_weight_quadratic(shares), quadratic, "quadratic weight of {shares}");
        }
        assert_eq!(milli_cpu_to_shares(1_000_000), MAX_SHARES);
    }
}
