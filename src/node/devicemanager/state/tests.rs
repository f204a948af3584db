//! The bookkeeping, step by step: no threads, `now` passed in.
use super::*;
use crate::node::runtime::devices::DeviceSpec;

fn device(id: &str, healthy: bool) -> pb::Device {
    let mut d = pb::Device::new();
    d.set_ID(id.into());
    d.set_health(if healthy { HEALTHY } else { "Unhealthy" }.into());
    d
}

fn endpoint() -> Endpoint {
    let env = std::sync::Arc::new(grpcio::EnvBuilder::new().cq_count(1).build());
    // Never dialled: a channel connects lazily.
    let ch = grpcio::ChannelBuilder::new(env).connect("unix:/nonexistent/ferrolet-test.sock");
    Endpoint {
        socket: "/nonexistent/ferrolet-test.sock".into(),
        client: pb::DevicePluginClient::new(ch),
        pre_start_required: false,
        preferred_allocation: false,
    }
}

fn state_with(devs: &[(&str, bool)]) -> (DeviceState, u64) {
    let mut s = DeviceState::new(Duration::from_secs(300), 16);
    let g = 1;
    assert_eq!(s.register("example.com/dev", g, endpoint()), None);
    let list: Vec<pb::Device> = devs.iter().map(|(id, h)| device(id, *h)).collect();
    assert_eq!(s.update("example.com/dev", g, &list), Ok(true));
    (s, g)
}

#[test]
fn capacity_counts_healthy_and_unhealthy() {
    let (s, _) = state_with(&[("a", true), ("b", true), ("c", false)]);
    let v = &s.view()[0];
    assert_eq!((v.capacity, v.allocatable, v.plugin.as_str()), (3, 2, "Connected"));
}

#[test]
fn stale_generations_and_oversize_lists_change_nothing() {
    let (mut s, g) = state_with(&[("a", true)]);
    let g2 = g + 1;
    assert_eq!(s.register("example.com/dev", g2, endpoint()), Some(g), "the old endpoint is to stop");
    assert_eq!(s.update("example.com/dev", g, &[device("x", true)]), Ok(false));
    assert!(!s.stream_ended("example.com/dev", g, Instant::now()), "the old stream must not stop the new one");
    assert!(s.is_current("example.com/dev", g2));
    let many: Vec<pb::Device> = (0..17).map(|i| device(&format!("d{i}"), true)).collect();
    assert_eq!(
        s.update("example.com/dev", g2, &many).unwrap_err(),
        StateError::ListTooManyDevices { listed: 17, allowed: 16 }
    );
    assert!(s.update("example.com/dev", g2, &many).unwrap_err().to_string().contains("17 devices listed"));
    let long = "x".repeat(64);
    assert!(s
        .update("example.com/dev", g2, &[device(&long, true)])
        .unwrap_err()
        .to_string()
        .contains("longer than 63"));
    assert_eq!(s.resources["example.com/dev"].healthy.iter().collect::<Vec<_>>(), ["a"]);
}

#[test]
fn a_stopped_resource_stays_for_the_grace_period_then_goes() {
    let (mut s, g) = state_with(&[("a", true), ("b", true)]);
    let t0 = Instant::now();
    assert!(s.stream_ended("example.com/dev", g, t0));
    let v = &s.view()[0];
    assert_eq!((v.capacity, v.allocatable, v.plugin.as_str()), (2, 0, "Reconnecting"));
    assert!(s.expire(t0 + Duration::from_secs(299)).is_empty());
    assert_eq!(s.expire(t0 + Duration::from_secs(300)), ["example.com/dev"]);
    assert!(s.view().is_empty());
}

#[test]
fn choose_follows_kubelet_errors_and_reuse() {
    let (mut s, _) = state_with(&[("a", true), ("b", true), ("c", false)]);
    let none = BTreeSet::new();
    assert_eq!(
        s.choose("p", "c", "other.com/x", 1, &none).unwrap_err(),
        StateError::AllocateUnregistered { resource: "other.com/x".into() }
    );
    assert_eq!(
        s.choose("p", "c", "other.com/x", 1, &none).unwrap_err().to_string(),
        "cannot allocate unregistered device other.com/x"
    );
    assert_eq!(
        s.choose("p", "c", "example.com/dev", 3, &none).unwrap_err().to_string(),
        "requested number of devices unavailable for example.com/dev. Requested: 3, Available: 2"
    );
    s.record("p", "init", "example.com/dev", &["a".into()], DeviceOptions::default());
    let reuse: BTreeSet<String> = ["a".to_string()].into();
    assert_eq!(
        s.choose("p", "app", "example.com/dev", 2, &reuse).unwrap(),
        Choice::Need { reused: vec!["a".into()], needed: 1, available: vec!["b".into()] }
    );
    s.record("p", "app", "example.com/dev", &["a".into(), "b".into()], DeviceOptions::default());
    assert_eq!(s.choose("p", "app", "example.com/dev", 2, &none).unwrap(), Choice::Done);
    assert_eq!(
        s.choose("p", "app", "example.com/dev", 1, &none).unwrap_err().to_string(),
        "pod \"p\" container \"app\" changed request for resource \"example.com/dev\" from 2 to 1"
    );
    assert_eq!(
        s.choose("q", "c", "example.com/dev", 1, &none).unwrap_err().to_string(),
        "requested number of devices unavailable for example.com/dev. Requested: 1, Available: 0"
    );
    s.retain_pods(&["q".to_string()].into());
    assert!(s.allocated("example.com/dev").is_empty());
}

#[test]
fn unhealthy_only_resources_cannot_allocate() {
    let (s, _) = state_with(&[("c", false)]);
    assert_eq!(
        s.choose("p", "c", "example.com/dev", 1, &BTreeSet::new()).unwrap_err().to_string(),
        "no healthy devices present; cannot allocate unhealthy devices example.com/dev"
    );
}

#[test]
fn numa_nodes_group_device_ids() {
    let mut s = DeviceState::new(Duration::from_secs(300), 16);
    let g = 1;
    s.register("example.com/dev", g, endpoint());
    let mut d0 = device("d0", true);
    let mut topo = pb::TopologyInfo::new();
    let mut n = pb::NUMANode::new();
    n.set_ID(1);
    topo.mut_nodes().push(n);
    d0.set_topology(topo);
    s.update("example.com/dev", g, &[d0, device("d1", true)]).unwrap();
    s.record("p", "c", "example.com/dev", &["d0".into(), "d1".into()], DeviceOptions::default());
    let a = &s.pods["p"]["c"]["example.com/dev"];
    assert_eq!(a.device_ids, BTreeMap::from([(-1, vec!["d1".to_string()]), (1, vec!["d0".to_string()])]));
}

#[test]
fn merge_keeps_the_first_value() {
    let mut a = DeviceOptions::default();
    a.envs.insert("X".into(), "1".into());
    a.devices.push(DeviceSpec {
        container_path: "/dev/a".into(),
        host_path: "/dev/a".into(),
        permissions: "rw".into(),
    });
    let mut b = a.clone();
    b.envs.insert("X".into(), "2".into());
    b.envs.insert("Y".into(), "3".into());
    b.devices[0].host_path = "/dev/b".into();
    b.cdi_devices.push("vendor.com/dev=1".into());
    a.merge(&b, "vendor.com/dev");
    assert_eq!(a.envs, BTreeMap::from([("X".into(), "1".into()), ("Y".into(), "3".into())]));
    assert_eq!(a.devices.len(), 1);
    assert_eq!(a.devices[0].host_path, "/dev/a");
    assert_eq!(a.cdi_devices, ["vendor.com/dev=1"]);
}

#[test]
fn an_ended_endpoint_leaves_the_resource_stopped_and_a_stale_end_changes_nothing() {
    let (mut s, g) = state_with(&[("a", true), ("b", false)]);
    let t0 = Instant::now();
    assert!(!s.endpoint_ended("example.com/dev", g + 7, t0), "not this resource's registration");
    assert!(s.resources["example.com/dev"].ready());
    // A thread that died mid-stream: its devices turn unhealthy and the grace starts.
    assert!(s.endpoint_ended("example.com/dev", g, t0));
    let v = &s.view()[0];
    assert_eq!((v.capacity, v.allocatable, v.plugin.as_str()), (2, 0, "Stopped"));
    assert!(!s.endpoint_ended("example.com/dev", g, t0), "only once");
    assert_eq!(s.expire(t0 + Duration::from_secs(300)), ["example.com/dev"]);

    // After a broken stream the grace period runs from the break, not from the end.
    let (mut s, g) = state_with(&[("a", true)]);
    assert!(s.stream_ended("example.com/dev", g, t0));
    assert!(s.endpoint_ended("example.com/dev", g, t0 + Duration::from_secs(100)));
    assert_eq!(s.expire(t0 + Duration::from_secs(300)), ["example.com/dev"]);
}

#[test]
fn restore_brings_back_allocations_and_stopped_resources() {
    let (mut s, _) = state_with(&[("a", true), ("b", true)]);
    let mut o = DeviceOptions::default();
    o.envs.insert("DEV".into(), "a".into());
    s.record("p", "c", "example.com/dev", &["a".into()], o);
    let mut r = DeviceState::new(Duration::from_secs(300), 16);
    r.restore(Restored { pods: s.pods.clone(), resources: vec!["example.com/dev".into()] }, Instant::now());
    assert_eq!(r.pods, s.pods);
    let v = &r.view()[0];
    assert_eq!((v.capacity, v.allocatable, v.plugin.as_str()), (0, 0, "Stopped"));
    assert!(!r.resources["example.com/dev"].ready());
    assert!(r.choose("q", "c", "example.com/dev", 1, &BTreeSet::new()).is_err());
}
