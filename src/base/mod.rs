//! What every other area builds on, using nothing else of the crate but each other: the
//! thread pattern (`manager`), the clock, bounded reads of user files, log-safe names,
//! time formats, Prometheus text, the wake pipe, the one HTTP head parser, and the small
//! helpers of `util` (files, processes and signals, fds, error chains, sockets).

pub mod clock;
pub mod httphead;
pub mod inputfile;
pub mod logsafe;
pub mod manager;
pub mod metrics;
pub mod timefmt;
pub mod util;
pub mod wake;
