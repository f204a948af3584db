//! ferrolet: a kubelet-class node agent for edge and IoT machines. Synchronous and
//! thread-based: every manager owns one OS thread and talks over crossbeam channels.

#![cfg_attr(test, allow(clippy::disallowed_methods))] // tests decode JSON as they like (clippy.toml)

pub mod agent;
pub mod api;
pub mod base;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod node;
pub mod pods;
pub mod proto;
pub mod server;

#[cfg(test)]
mod error_tests;
