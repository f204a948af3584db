//! The node's own machinery, below the pod manager: the container runtimes, cgroups
//! (`cm`), device plugins, events, eviction under node pressure, image pulls and image GC,
//! probes, lifecycle hooks, pod DNS, container logs as `ferrolet logs` reads them, and pod
//! and node status.

pub mod cm;
pub mod devicemanager;
pub mod dns;
pub mod events;
pub mod eviction;
pub mod imagegc;
pub mod images;
pub mod lifecycle;
pub mod objects;
pub mod podlogs;
pub mod prober;
pub mod runtime;
pub mod stats;
pub mod status;
