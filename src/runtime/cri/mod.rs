//! The CRI backend (issue 12, under way): ferrolet as a CRI v1 client of a container
//! runtime such as containerd. `client` is the blocking client and the start-up check
//! (`Version`, then `Status`); `translate` holds the pure translations between ferrolet's
//! runtime types and CRI messages; `runtime` is `CriRuntime`, the `ContainerRuntime` over
//! them. Not yet selected by the config (a later step).

pub mod client;
pub mod runtime;
pub mod translate;

pub use client::{CriClient, CriError};
pub use runtime::CriRuntime;
