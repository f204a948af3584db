//! The eviction manager (kubelet's `pkg/kubelet/eviction`): node pressure from the stats,
//! node-level reclaim, and pods evicted one at a time before the kernel's OOM killer acts.

pub mod memcg;
pub mod view;
