//! The image GC keys (kubelet's `imageGC*` and `imageMinimumGCAge`/`imageMaximumGCAge`,
//! ferrolet's absolute thresholds and keep-list): their checks, with kubelet's rules, and the
//! settings `fl-imagegc` runs with. Imagefs pressure (`[eviction] hard."imagefs.available"`)
//! is the eviction manager's (`config/eviction.rs`), which asks `fl-imagegc` to reclaim.

use super::Config;
use crate::node::imagegc::manager::ImageGcSettings;
use crate::node::imagegc::Policy;
use std::time::Duration;

/// The most names `image_gc_keep` may hold.
const MAX_KEEP: usize = 256;

/// kubelet's default minimum image age (`imageMinimumGCAge`), also what 0 stands for.
const DEFAULT_MIN_AGE: Duration = Duration::from_secs(120);

/// The minimum age GC runs with: kubelet turns 0 into its default.
fn effective_min_age(configured: Duration) -> Duration {
    if configured.is_zero() {
        DEFAULT_MIN_AGE
    } else {
        configured
    }
}

/// The first problem with the image GC keys: (key, message).
pub fn check(cfg: &Config) -> Result<(), (&'static str, String)> {
    let (high, low) = (cfg.image_gc_high_threshold_percent, cfg.image_gc_low_threshold_percent);
    for (key, v) in [("image_gc_high_threshold_percent", high), ("image_gc_low_threshold_percent", low)] {
        if v > 100 {
            return Err((key, format!("invalid value {v}: must be between 0 and 100, inclusive")));
        }
    }
    if low >= high {
        return Err((
            "image_gc_low_threshold_percent",
            format!("invalid value {low}: must be less than image_gc_high_threshold_percent ({high})"),
        ));
    }
    // Against the minimum age GC runs with (0 is kubelet's default), as kubelet checks it.
    let (min, max) = (effective_min_age(cfg.image_minimum_gc_age.0), cfg.image_maximum_gc_age.0);
    if !max.is_zero() && max <= min {
        return Err((
            "image_maximum_gc_age",
            format!("invalid value {max:?}: must be greater than image_minimum_gc_age ({min:?}), or 0s (off)"),
        ));
    }
    match (&cfg.image_gc_high_threshold_bytes_free, &cfg.image_gc_low_threshold_bytes_free) {
        (None, None) => {}
        (Some(h), Some(l)) if l.0 > h.0 => {}
        (Some(h), Some(l)) => {
            return Err((
                "image_gc_low_threshold_bytes_free",
                format!("invalid value {}: must be more than image_gc_high_threshold_bytes_free ({}): GC frees until that much is free", l.0, h.0),
            ))
        }
        (Some(_), None) => {
            return Err(("image_gc_low_threshold_bytes_free", "must be set with image_gc_high_threshold_bytes_free".into()))
        }
        (None, Some(_)) => {
            return Err(("image_gc_high_threshold_bytes_free", "must be set with image_gc_low_threshold_bytes_free".into()))
        }
    }
    if cfg.image_gc_period.0 < Duration::from_secs(1) {
        return Err(("image_gc_period", format!("invalid value {:?}: must be at least 1s", cfg.image_gc_period.0)));
    }
    if cfg.image_gc_keep.len() > MAX_KEEP {
        return Err(("image_gc_keep", format!("{} entries: must be at most {MAX_KEEP}", cfg.image_gc_keep.len())));
    }
    if let Some(k) = cfg.image_gc_keep.iter().find(|k| k.trim().is_empty() || k.len() > 512) {
        return Err(("image_gc_keep", format!("invalid entry {k:?}: must be an image name or id (at most 512 bytes)")));
    }
    Ok(())
}

impl Config {
    /// What `fl-imagegc` runs with (checked: `check` passed).
    pub fn image_gc_settings(&self) -> ImageGcSettings {
        ImageGcSettings {
            node_name: self.node_name.clone(),
            policy: Policy {
                high_percent: self.image_gc_high_threshold_percent,
                low_percent: self.image_gc_low_threshold_percent,
                min_age: effective_min_age(self.image_minimum_gc_age.0),
                max_age: self.image_maximum_gc_age.0,
                high_bytes_free: self.image_gc_high_threshold_bytes_free.map(|b| b.0),
                low_bytes_free: self.image_gc_low_threshold_bytes_free.map(|b| b.0),
            },
            keep: self.image_gc_keep.clone(),
            period: self.image_gc_period.0,
        }
    }
}
