//! The integration tests, but two, in one test binary: cargo links and runs one binary
//! instead of thirty-four, and its tests run side by side (`make test` runs 8 at a time;
//! most wait on processes, sockets and timers, not on the CPU). Each module is one
//! subject (`cargo test --test integration cluster::` runs one); they share `common`.
//! Two are binaries of their own: `devices_threads` counts its process's threads by name,
//! and `input_limits` measures its children's peak memory with `wait4`, which includes the
//! test process's own peak at the moment the child was started (the kernel carries the
//! old memory's high-water mark across `exec`).

#![allow(clippy::disallowed_methods)] // decoding JSON as it likes (clippy.toml)

mod common;

mod api;
mod api_hardening;
mod apiserver_fake;
mod architecture;
mod bad_input;
mod certificates;
mod cgroups;
mod cluster;
mod cluster_objects;
mod crash;
mod cri;
mod cri_agent;
mod cri_cluster;
mod cri_dns;
mod cri_hooks;
mod cri_imagegc;
mod cri_images;
mod cri_kubelet_api;
mod cri_logs_exec;
mod cri_registry;
mod cri_security;
mod cri_starts;
mod cri_stats;
mod cri_streams;
mod cri_volumes;
mod devices;
mod events;
mod eviction;
mod full_disk;
mod hooks;
mod install;
mod kubelet_api;
mod logs_exec;
mod metrics;
mod notify;
mod own_root;
mod pods;
mod prober_e2e;
mod probes;
mod process_runtime;
mod proto;
mod records;
mod reload;
mod restart;
mod security;
mod static_bin;
mod stats;
mod stats_api;
mod vm_cgroup2;
mod vm_systemd;
mod volumes;
