//! The wall clock, behind a trait so the pod manager, the event correlator and the fake
//! runtime can be driven by a clock the tests move.

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Where time comes from (a fake in tests).
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> SystemTime;
}

/// The system clock.
pub struct RealClock;

impl Clock for RealClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock tests move by hand.
#[derive(Clone)]
pub struct FakeClock(Arc<Mutex<SystemTime>>);

impl FakeClock {
    /// A fake clock at `t`.
    pub fn new(t: SystemTime) -> Self {
        FakeClock(Arc::new(Mutex::new(t)))
    }
    /// Moves the clock forward.
    pub fn advance(&self, d: Duration) {
        *self.0.lock() += d;
    }
}

impl Clock for FakeClock {
    fn now(&self) -> SystemTime {
        *self.0.lock()
    }
}
