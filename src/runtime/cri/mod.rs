//! The CRI backend (issue 12, under way): ferrolet as a CRI v1 client of a container
//! runtime such as containerd. So far: the blocking client and the start-up check
//! (`Version`, then `Status`).

pub mod client;

pub use client::{CriClient, CriError};
