//! Upper bounds of the configuration's numbers and durations: a value past one would
//! exhaust memory (queues and caches are allocated up front), overflow a clock, or make
//! the agent unresponsive. `etc/ferrolet.toml` states each bound.

use super::{Config, ConfigError};
use std::time::Duration;

pub use crate::api::limits::DEFAULT_MAX_PODS;
/// Upper bound of `max_pods`.
pub const MAX_MAX_PODS: usize = crate::api::limits::MAX_PODS_PER_NODE;
/// Largest configuration file read (the sample is a few KiB).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Upper bound of `logs.max_size`.
pub const MAX_LOG_SIZE: u64 = 10 << 30;
/// Upper bound of `logs.max_files`.
pub const MAX_LOG_FILES: u32 = 100;
/// Upper bound of `gc.max_dead_per_container`.
pub const MAX_DEAD_PER_CONTAINER: u32 = 100;
/// Upper bound of `events.queue_size`, `events.store_max_events` and `events.lru_cache_size`
/// (each is allocated or kept in memory as a whole).
pub const MAX_EVENTS: usize = 100_000;
/// Upper bound of `events.aggregate_max_events`.
pub const MAX_AGGREGATE_EVENTS: usize = 1000;
/// Upper bound of `events.spam_burst`.
pub const MAX_SPAM_BURST: u32 = 10_000;
/// Upper bound of `devices.reconnect_attempts`.
pub const MAX_RECONNECT_ATTEMPTS: u32 = 100;
/// Upper bound of `devices.max_devices_per_resource`.
pub const MAX_DEVICES: usize = 100_000;
/// Upper bound of `cgroups.pod_pids_limit` and reserved `pid`: the kernel's `PID_MAX_LIMIT` (2^22).
pub const MAX_PIDS: i64 = 1 << 22;
/// Upper bound of `max_parallel_image_pulls` (each pull holds a thread).
pub const MAX_PARALLEL_IMAGE_PULLS: usize = 16;
/// Upper bound of polling intervals, timeouts and waits: one hour.
pub const MAX_INTERVAL: Duration = Duration::from_secs(3600);
/// Upper bound of `shutdown_timeout`: ten minutes (init systems give up long before).
pub const MAX_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(600);
/// Upper bound of event windows and grace periods: one day.
pub const MAX_LONG_PERIOD: Duration = Duration::from_secs(86_400);

impl Config {
    /// Every number has an upper bound: a value past it would exhaust memory (queues and
    /// caches are allocated up front), overflow, or make the agent unresponsive.
    pub(super) fn check_upper_bounds(&self, file: &str) -> Result<(), ConfigError> {
        let bad =
            |key: &str, message: String| Err(ConfigError::Invalid { file: file.into(), key: key.into(), message });
        let (ev, dv, cg) = (&self.events, &self.devices, &self.cgroups);
        if self.max_pods == 0 {
            return bad("max_pods", "invalid value 0: must be at least 1".into());
        }
        for (key, v, max) in [
            ("max_pods", self.max_pods as u128, MAX_MAX_PODS as u128),
            ("logs.max_size", self.logs.max_size.0 as u128, MAX_LOG_SIZE as u128),
            ("logs.max_files", self.logs.max_files.into(), MAX_LOG_FILES.into()),
            ("gc.max_dead_per_container", self.gc.max_dead_per_container.into(), MAX_DEAD_PER_CONTAINER.into()),
            ("events.queue_size", ev.queue_size as u128, MAX_EVENTS as u128),
            ("events.store_max_events", ev.store_max_events as u128, MAX_EVENTS as u128),
            ("events.lru_cache_size", ev.lru_cache_size as u128, MAX_EVENTS as u128),
            ("events.aggregate_max_events", ev.aggregate_max_events as u128, MAX_AGGREGATE_EVENTS as u128),
            ("events.spam_burst", ev.spam_burst.into(), MAX_SPAM_BURST.into()),
            ("devices.reconnect_attempts", dv.reconnect_attempts.into(), MAX_RECONNECT_ATTEMPTS.into()),
            ("devices.max_devices_per_resource", dv.max_devices_per_resource as u128, MAX_DEVICES as u128),
            ("cgroups.pod_pids_limit", cg.pod_pids_limit.max(0) as u128, MAX_PIDS as u128),
        ] {
            if v > max {
                return bad(key, format!("invalid value {v}: must be at most {max}"));
            }
        }
        if self.container_runtime_endpoint.len() > 4096 || self.pod_sandbox_image.len() > 4096 {
            let key =
                if self.pod_sandbox_image.len() > 4096 { "pod_sandbox_image" } else { "container_runtime_endpoint" };
            return bad(key, "must be at most 4096 characters".into());
        }
        if ev.component.len() > 253 {
            return bad("events.component", format!("{} characters: must be at most 253", ev.component.len()));
        }
        for (key, d, max) in [
            ("manifest_check_interval", self.manifest_check_interval.0, MAX_INTERVAL),
            ("sync_frequency", self.sync_frequency.0, MAX_INTERVAL),
            ("shutdown_timeout", self.shutdown_timeout.0, MAX_SHUTDOWN_TIMEOUT),
            ("runtime_request_timeout", self.runtime_request_timeout.0, MAX_SHUTDOWN_TIMEOUT),
            ("runtime_start_wait", self.runtime_start_wait.0, MAX_SHUTDOWN_TIMEOUT),
            ("image_pull_timeout", self.image_pull_timeout.0, MAX_LONG_PERIOD),
            ("events.aggregate_interval", ev.aggregate_interval.0, MAX_LONG_PERIOD),
            ("events.spam_refill", ev.spam_refill.0, MAX_LONG_PERIOD),
            ("devices.dial_timeout", dv.dial_timeout.0, MAX_INTERVAL),
            ("devices.allocate_timeout", dv.allocate_timeout.0, MAX_INTERVAL),
            ("devices.endpoint_grace_period", dv.endpoint_grace_period.0, MAX_LONG_PERIOD),
            ("devices.admission_wait", dv.admission_wait.0, MAX_INTERVAL),
            ("eviction.max_pod_grace_period", self.eviction.max_pod_grace_period.0, MAX_LONG_PERIOD),
            ("eviction.pressure_transition_period", self.eviction.pressure_transition_period.0, MAX_LONG_PERIOD),
        ] {
            if d > max {
                return bad(key, format!("invalid value {d:?}: must be at most {max:?}"));
            }
        }
        for (what, list) in
            [("cgroups.system_reserved", &cg.system_reserved), ("cgroups.kube_reserved", &cg.kube_reserved)]
        {
            for (k, q) in list {
                let (v, max) = match k.as_str() {
                    "cpu" => (q.milli_value(), crate::api::limits::MAX_CPU_MILLIS),
                    "memory" => (q.value(), crate::api::limits::MAX_MEMORY_BYTES),
                    _ => (q.value(), MAX_PIDS),
                };
                if v > max {
                    let shown = if k == "cpu" { format!("{max}m") } else { max.to_string() };
                    return bad(
                        &format!("{what}.{k}"),
                        format!("invalid value {:?}: must be at most {shown}", q.to_string()),
                    );
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    /// The error `Config::parse` gives for `text`, as the user reads it.
    fn check(text: &str) -> Option<String> {
        Config::parse("f.toml", text).err().map(|e| e.to_string())
    }

    #[test]
    fn each_bound_is_inclusive() {
        for (at, over, want) in [
            ("max_pods = 5000", "max_pods = 5001", "f.toml: max_pods: invalid value 5001: must be at most 5000"),
            (
                "[events]\nqueue_size = 100000",
                "[events]\nqueue_size = 100001",
                "f.toml: events.queue_size: invalid value 100001: must be at most 100000",
            ),
            (
                "sync_frequency = \"1h\"",
                "sync_frequency = \"1h1s\"",
                "f.toml: sync_frequency: invalid value 3601s: must be at most 3600s",
            ),
            (
                "[cgroups]\nkube_reserved = { pid = \"4194304\" }",
                "[cgroups]\nkube_reserved = { pid = \"4194305\" }",
                "f.toml: cgroups.kube_reserved.pid: invalid value \"4194305\": must be at most 4194304",
            ),
            (
                "[cgroups]\nsystem_reserved = { cpu = \"175921860444m\" }",
                "[cgroups]\nsystem_reserved = { cpu = \"175921860445m\" }",
                "f.toml: cgroups.system_reserved.cpu: invalid value \"175921860445m\": must be at most 175921860444m",
            ),
        ] {
            assert_eq!(check(at), None, "{at}");
            assert_eq!(check(over).as_deref(), Some(want), "{over}");
        }
        assert_eq!(check("max_pods = 0").as_deref(), Some("f.toml: max_pods: invalid value 0: must be at least 1"));
    }
}
