//! The kubelet API on :10250, over TLS (`tls`).

pub mod tls;
