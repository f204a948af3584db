//! What the device manager shows the other threads: a read-only view of its state that only
//! `fl-devices` replaces (after every change), and its metrics. The pod manager reads a
//! container's devices from it, the local API its resources and allocations; nobody else
//! writes it, and nobody reads the state itself.

use super::checkpoint;
use super::state::{DeviceState, PodDevices, ResourceView, MAX_RESOURCES};
use crate::base::metrics::{CounterVec, Encoder, HistogramVec};
use parking_lot::RwLock;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// A snapshot of the device manager's state, as readers need it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceView {
    /// Every resource, in name order.
    pub resources: Vec<ResourceView>,
    /// Allocations.
    pub pods: PodDevices,
}

impl From<&DeviceState> for DeviceView {
    fn from(st: &DeviceState) -> Self {
        DeviceView { resources: st.view(), pods: st.pods.clone() }
    }
}

impl DeviceView {
    /// (resource, [(device, healthy)]) per resource a container holds, for its status.
    pub fn container_devices(&self, uid: &str, container: &str) -> Vec<(String, Vec<(String, bool)>)> {
        let Some(resources) = self.pods.get(uid).and_then(|c| c.get(container)) else {
            return Vec::new();
        };
        resources
            .iter()
            .map(|(name, a)| {
                let healthy = self.resources.iter().find(|r| &r.name == name).map(|r| &r.healthy);
                let ids =
                    a.ids().into_iter().map(|id| (id.clone(), healthy.is_some_and(|h| h.contains(&id)))).collect();
                (name.clone(), ids)
            })
            .collect()
    }
}

/// `kubelet_device_plugin_*` metrics.
pub struct DeviceMetrics {
    registrations: CounterVec<String>,
    alloc: HistogramVec<String>,
}

impl Default for DeviceMetrics {
    fn default() -> Self {
        DeviceMetrics {
            registrations: CounterVec::new(
                "kubelet_device_plugin_registration_total",
                "Cumulative number of device plugin registrations.",
                &["resource_name"],
            ),
            alloc: HistogramVec::new(
                "kubelet_device_plugin_alloc_duration_seconds",
                "Duration in seconds to serve a device plugin Allocation request.",
                &["resource_name"],
            ),
        }
    }
}

impl DeviceMetrics {
    /// Counts a registration of a valid resource name. The names come from any client of
    /// the registration socket, so at most `MAX_RESOURCES` of them get a series;
    /// registrations of further new names are not counted.
    pub fn registered(&self, resource: &str) {
        self.registrations.update_bounded(resource.to_string(), MAX_RESOURCES, |n| *n += 1);
    }

    /// Records how long an Allocate call took.
    pub fn allocated(&self, resource: &str, d: Duration) {
        self.alloc.observe(resource.to_string(), d);
    }

    /// Appends the metrics in Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let mut enc = Encoder::new(out);
        self.registrations.encode(&mut enc);
        self.alloc.encode(&mut enc);
    }
}

/// The device manager as the other threads see it: read-only (cheap to clone).
#[derive(Clone)]
pub struct Devices {
    inner: Arc<Shared>,
}

struct Shared {
    /// Replaced by `fl-devices` only.
    view: RwLock<DeviceView>,
    dir: PathBuf,
    /// Set once, by the device manager's constructor, when the registration server fails.
    server_error: OnceLock<String>,
    metrics: DeviceMetrics,
}

impl Devices {
    /// A view of `st` for the plugin directory `dir`.
    pub(super) fn new(dir: &Path, st: &DeviceState) -> Devices {
        Devices {
            inner: Arc::new(Shared {
                view: RwLock::new(DeviceView::from(st)),
                dir: dir.into(),
                server_error: OnceLock::new(),
                metrics: DeviceMetrics::default(),
            }),
        }
    }

    /// Replaces the view (`fl-devices` only, after each change of its state).
    pub(super) fn publish(&self, st: &DeviceState) {
        let view = DeviceView::from(st);
        *self.inner.view.write() = view;
    }

    /// Records why the registration server is not running (once, at start).
    pub(super) fn set_server_error(&self, message: String) {
        let _ = self.inner.server_error.set(message);
    }

    /// The plugin directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Why the registration server is not running, if it is not.
    pub fn server_error(&self) -> Option<&str> {
        self.inner.server_error.get().map(String::as_str)
    }

    /// The metrics.
    pub fn metrics(&self) -> &DeviceMetrics {
        &self.inner.metrics
    }

    /// Every resource as the API shows it.
    pub fn resources(&self) -> Vec<ResourceView> {
        self.inner.view.read().resources.clone()
    }

    /// Whether a resource is known, and how many are.
    pub fn known_resources(&self, name: &str) -> (bool, usize) {
        let v = self.inner.view.read();
        (v.resources.iter().any(|r| r.name == name), v.resources.len())
    }

    /// (resource, [(device, healthy)]) per resource a container holds, for its status.
    pub fn container_devices(&self, uid: &str, container: &str) -> Vec<(String, Vec<(String, bool)>)> {
        self.inner.view.read().container_devices(uid, container)
    }

    /// The local API's `/devices`: resources and allocations (in the checkpoint's shape).
    pub fn to_json(&self) -> serde_json::Value {
        let (resources, allocations) = {
            let v = self.inner.view.read();
            (v.resources.clone(), checkpoint::entries(&v.pods))
        };
        serde_json::json!({
            "pluginDir": self.inner.dir,
            "registrationServer": match self.server_error() {
                None => "serving".to_string(),
                Some(e) => format!("not running: {e}"),
            },
            "resources": resources,
            "allocations": allocations,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::runtime::devices::DeviceOptions;

    #[test]
    fn registration_counts_keep_a_bounded_set_of_resource_names() {
        let m = DeviceMetrics::default();
        for i in 0..MAX_RESOURCES + 100 {
            m.registered(&format!("example.com/r{i}"));
        }
        m.registered("example.com/r0");
        let mut out = String::new();
        m.render(&mut out);
        let series = out.lines().filter(|l| l.starts_with("kubelet_device_plugin_registration_total{")).count();
        assert_eq!(series, MAX_RESOURCES);
        assert!(out.contains("kubelet_device_plugin_registration_total{resource_name=\"example.com/r0\"} 2"), "{out}");
    }

    #[test]
    fn readers_see_what_was_published_and_nothing_before() {
        let mut st = DeviceState::new(Duration::from_secs(300), 16);
        let devices = Devices::new(Path::new("/plugins"), &st);
        st.record("p", "app", "example.com/dev", &["d0".into()], DeviceOptions::default());
        assert!(devices.container_devices("p", "app").is_empty(), "not published yet");
        devices.publish(&st);
        // No resource lists d0 (the plugin has not registered again): held, not healthy.
        assert_eq!(
            devices.container_devices("p", "app"),
            [("example.com/dev".to_string(), vec![("d0".to_string(), false)])]
        );
        let json = devices.to_json();
        assert_eq!(json["registrationServer"], "serving");
        assert_eq!(json["allocations"][0]["podUID"], "p");
        assert_eq!(json["allocations"][0]["deviceIDs"]["-1"][0], "d0");
        devices.set_server_error("cannot listen".into());
        assert_eq!(devices.to_json()["registrationServer"], "not running: cannot listen");
    }
}
