//! What every other area builds on, using nothing else of the crate but each other: the
//! thread pattern (`manager`), the clock, bounded reads of user files, log-safe names,
//! time formats, Prometheus text, the wake pipe, the one HTTP head parser, and the small
//! helpers in rooms of their own: `state_files`, `procs` (processes and signals), `fds`, `errors`
//! (error chains), `net`, `random`, `sealed` (secrets at rest, under a node-local key), `x509`
//! (a self-signed certificate; a certificate's subject and validity).

pub mod clock;
pub mod dbus;
pub mod errors;
pub mod fds;
pub mod httphead;
pub mod inputfile;
pub mod logsafe;
pub mod manager;
pub mod metrics;
pub mod net;
pub mod procs;
pub mod random;
pub mod sealed;
pub mod state_files;
pub mod timefmt;
pub mod wake;
pub mod x509;
