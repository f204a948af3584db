//! What passes between the prober, its probe threads and the exec reaper: a probe to run
//! (`Job`) and what came of it (`Done`), reported through `Report`.

use super::probes::{Outcome, Target};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One probe to run.
pub struct Job<K> {
    /// Who asked (the worker key).
    pub key: K,
    /// Which of the container's probes.
    pub kind: super::ProbeType,
    /// Where to.
    pub target: Target,
    /// When the worker was due.
    pub scheduled: Instant,
}

/// What came of a job.
pub struct Done<K> {
    /// The worker key.
    pub key: K,
    /// The outcome.
    pub outcome: Outcome,
    /// When the probe started (minus `scheduled` is its lateness).
    pub started: Instant,
    /// When the worker was due.
    pub scheduled: Instant,
    /// How long the probe took.
    pub took: Duration,
}

/// Where finished probes are reported; false when nobody listens any more.
pub type Report<K> = Arc<dyn Fn(Done<K>) -> bool + Send + Sync>;
