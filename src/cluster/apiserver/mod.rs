//! Cluster mode's client of the kube-apiserver (ureq over rustls): the kubeconfig it reads
//! (`kubeconfig`) and the requests it makes (`client`), with kubelet's client-side rate
//! limits. Static-pod mode uses none of it.

pub mod client;
pub mod events;
pub mod kubeconfig;
pub mod link;
pub mod mirror;
pub mod node;
pub mod objects;
pub mod pods;
pub mod podstore;
pub mod spool;
pub mod sync;
pub mod watch;

pub use client::{ApiClient, ApiError, ClientSettings};
pub use kubeconfig::{Auth, Connection, KubeconfigError};
