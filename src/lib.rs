//! ferrolet: a kubelet-class node agent for edge and IoT machines. Synchronous and
//! thread-based: every manager owns one OS thread and talks over crossbeam channels.

#![cfg_attr(test, allow(clippy::disallowed_methods))] // tests decode JSON as they like (clippy.toml)

pub mod agent;
pub mod api;
pub mod apiserver;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod cm;
pub mod config;
pub mod devicemanager;
pub mod dns;
pub mod events;
pub mod httphead;
pub mod imagegc;
pub mod images;
pub mod inputfile;
pub mod lifecycle;
pub mod logsafe;
pub mod manager;
pub mod metrics;
pub mod notify;
pub mod podcmd;
pub mod poddir;
pub mod podlogs;
pub mod pods;
pub mod podsource;
pub mod prober;
pub mod proto;
pub mod runtime;
pub mod server;
pub mod status;
pub mod timefmt;
pub mod util;
pub mod wake;

#[cfg(test)]
mod error_tests;
