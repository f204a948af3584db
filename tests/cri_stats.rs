//! The stats thread of an agent on containerd (the harness's, `tests/cri/up.sh`), started in
//! this process so its `StatsView` can be read: a container's cgroup found under its pod's by
//! its id (containerd's cgroupfs naming) and read as the files show it, its writable layer
//! from `ListContainerStats`, the image filesystem from `ImageFsInfo`. Skips without the
//! harness.

use crate::common::cri::{busybox, client, CriNode};
use crate::common::{ferrolet_bin, manifest};
use crate::stats::{container, cpu_ns, near, snapshot_where, working_set, MIB};
use ferrolet::agent::Agent;
use ferrolet::base::manager::Health;
use ferrolet::config::Config;
use ferrolet::node::cm::cgroupfs::{detect, CgroupDriver};
use ferrolet::node::cm::{pod_path, CmSettings};
use ferrolet::node::runtime::cri::CriRuntime;
use ferrolet::node::runtime::ContainerRuntime;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn on_containerd_the_stats_join_the_cgroup_files_and_the_runtimes_writable_layers() {
    let Some(node) = CriNode::new() else { return };
    let pod = format!(
        "  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: mem
    image: {b}
    command: [sh, -c, 'head -c 3145728 /dev/zero > /layer; head -c 1048576 /dev/zero > /cache/data; echo started; dd if=/dev/zero bs=40M count=1 2>/dev/null | sleep 3600']
    resources:
      limits: {{memory: 200Mi}}
    volumeMounts:
    - {{name: cache, mountPath: /cache}}
  - name: burn
    image: {b}
    command: [sh, -c, 'while :; do :; done']
    resources:
      limits: {{cpu: 200m}}
  volumes:
  - {{name: cache, emptyDir: {{}}}}
",
        b = busybox()
    );
    node.sb.write_manifest("stats.yaml", &manifest("stats", &pod));
    let cfg = Config::parse("cri.toml", &node.config_text()).unwrap();
    let agent = Agent::start(&cfg, &ferrolet_bin()).unwrap();
    let name = format!("stats-{}", node.node);
    let (snap, p) = snapshot_where(&agent.stats, &name, Duration::from_secs(120), |p| {
        let rate = p.containers.iter().find(|c| c.name == "burn").and_then(|c| c.cpu?.usage_nano_cores);
        let mem = p.containers.iter().find(|c| c.name == "mem");
        let layer = mem.and_then(|c| c.rootfs?.used_bytes).unwrap_or(0);
        let ws = mem.and_then(|c| c.memory).map_or(0, |m| m.working_set_bytes);
        rate.is_some() && layer >= 3 * MIB && ws >= 40 * MIB
    });

    // The container cgroups are `<pod cgroup>/<container id>`, as containerd's cgroupfs
    // driver names them: read there, they agree with the snapshot.
    let driver: Arc<dyn CgroupDriver> = Arc::from(detect(Path::new("/proc/self/mountinfo"), None).unwrap());
    let api_pod = agent.statuses.list().pods().find(|x| x.metadata.name == name).unwrap();
    let pod_cg = pod_path(&CmSettings { root: node.cgroup_root.clone(), ..Default::default() }, &api_pod);
    let id = |c: &str| {
        let st = api_pod.status.as_ref().unwrap().container_statuses.iter().find(|s| s.name == c).unwrap();
        st.container_id.strip_prefix("containerd://").unwrap().to_string()
    };
    let (mem_cg, burn_cg) = (format!("{pod_cg}/{}", id("mem")), format!("{pod_cg}/{}", id("burn")));
    let mem = container(&p, "mem");
    let m = mem.memory.unwrap();
    near("mem's working set", m.working_set_bytes, working_set(&*driver, &mem_cg), 8 * MIB);
    assert_eq!(m.available_bytes, Some(200 * MIB - m.working_set_bytes));
    let burn = container(&p, "burn").cpu.unwrap();
    let rate = burn.usage_nano_cores.unwrap();
    assert!((20_000_000..=260_000_000).contains(&rate), "burn's rate {rate} under a 200m quota");
    assert!(burn.usage_core_nano_seconds <= cpu_ns(&*driver, &burn_cg));
    let pm = p.memory.unwrap();
    near("the pod's working set", pm.working_set_bytes, working_set(&*driver, &pod_cg), 8 * MIB);
    assert!(p.process_count.is_some_and(|n| n >= 4), "sh, dd, sleep; sh; the pause process: {p:?}");

    // The writable layer, from the runtime, on the snapshotter's filesystem.
    let layer = mem.rootfs.unwrap();
    assert!(layer.used_bytes.unwrap() >= 3 * MIB && layer.inodes_used.is_some(), "{layer:?}");
    assert!(layer.capacity_bytes.is_some() && layer.available_bytes.is_some(), "{layer:?}");
    let logs = mem.logs.unwrap();
    assert!(logs.used_bytes.unwrap() > 0, "{logs:?}");
    let cache = &p.volumes.iter().find(|v| v.name == "cache").unwrap().fs;
    assert!(cache.used_bytes.unwrap() >= MIB, "{cache:?}");
    let e = p.ephemeral_storage.unwrap().used_bytes.unwrap();
    let parts: u64 = p.containers.iter().flat_map(|c| [c.rootfs, c.logs]).flatten().filter_map(|f| f.used_bytes).sum();
    assert_eq!(e, parts + cache.used_bytes.unwrap(), "layers, logs and volumes");

    // The image filesystem: the images' own use on the filesystem containerd names.
    let image_fs = snap.node.image_fs.unwrap();
    assert!(image_fs.used_bytes.unwrap() > 0 && image_fs.capacity_bytes.unwrap() > 0, "{image_fs:?}");

    // What containerd answers itself: every container of this node's, and (1.7 and later)
    // its sandboxes, or no answer (UNIMPLEMENTED in 1.6), never an error.
    let rt = CriRuntime::new(client(&node.endpoint), "", &node.node, &Health::default());
    let listed = rt.container_stats().unwrap().expect("ListContainerStats is answered");
    let mine = listed.iter().find(|c| c.id == id("mem")).unwrap();
    assert!(mine.writable_layer.as_ref().is_some_and(|w| w.used_bytes >= Some(3 * MIB)), "{mine:?}");
    match rt.pod_sandbox_stats().unwrap() {
        Some(pods) => assert!(pods.iter().any(|s| s.pod_uid == api_pod.metadata.uid), "{pods:?}"),
        None => eprintln!("this containerd does not implement ListPodSandboxStats"),
    }

    let late = agent.stop();
    assert!(late.is_empty(), "{late:?}");
}
