//! The CRI backend: ferrolet as a CRI v1 client of a container runtime such as containerd.
//! `client` is the blocking client and the start-up check (`Version`, then `Status`);
//! `translate` holds the pure translations between ferrolet's runtime types and CRI
//! messages; `runtime` is `CriRuntime`, the `ContainerRuntime` over them; `stream` runs a
//! command through the runtime's streaming server (`ferrolet exec`).

pub mod client;
pub mod runtime;
pub mod stream;
pub mod translate;

pub use client::{CriClient, CriError};
pub use runtime::CriRuntime;
