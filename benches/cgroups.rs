//! `make bench`: time to create, update and remove a pod's cgroups on this machine, over
//! 1000 pods of mixed QoS classes, with the real cgroup driver (needs root; says so and
//! stops otherwise). Prints p50/p99; asserts nothing.

use ferrolet::api::manifest::decode_pods;
use ferrolet::api::Pod;
use ferrolet::node::cm::cgroupfs::detect;
use ferrolet::node::cm::{CmSettings, ContainerManager, NodeResources};
use ferrolet::node::events::EventRecorder;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn pod(i: usize) -> Pod {
    let res = match i % 3 {
        0 => "    resources:\n      limits: {cpu: 100m, memory: 32Mi}\n",
        1 => "    resources:\n      requests: {cpu: 50m}\n",
        _ => "",
    };
    let y = format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p{i}\n  uid: {i:032x}\nspec:\n  containers:\n  - name: app\n    image: x\n{res}");
    decode_pods("bench.yaml", &y).remove(0).unwrap_or_default()
}

fn report(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let p = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    println!(
        "cgroups {what:<7} p50 {:>9.1?}  p99 {:>9.1?}  max {:>9.1?}  ({} pods)",
        p(0.5),
        p(0.99),
        samples[samples.len() - 1],
        samples.len()
    );
}

fn main() {
    let driver = match detect(Path::new("/proc/self/mountinfo"), None) {
        Ok(d) => Arc::<dyn ferrolet::node::cm::cgroupfs::CgroupDriver>::from(d),
        Err(e) => return println!("cgroups benchmark skipped: {e}"),
    };
    let settings = CmSettings { root: format!("/ferrolet-bench-{}", std::process::id()), ..Default::default() };
    let (tx, _rx) = crossbeam_channel::unbounded();
    let recorder = EventRecorder::new(tx, "ferrolet", "bench", Default::default());
    // Pod cgroup records (one fsynced file per pod cgroup created) in a state dir of its own.
    let state = tempfile::tempdir().expect("a temporary state directory");
    let mut cm = match ContainerManager::start(
        driver.clone(),
        settings.clone(),
        NodeResources::from_proc(),
        recorder,
        "bench",
        ferrolet::node::cm::ownership::PodCgroupRecords::new(state.path()),
    ) {
        Ok(cm) => cm,
        Err(e) => return println!("cgroups benchmark skipped (needs root and a writable cgroup tree): {e}"),
    };
    println!(
        "cgroup v{} under {}",
        if cm.version() == ferrolet::node::cm::cgroupfs::CgroupVersion::V1 { 1 } else { 2 },
        settings.root
    );
    let pods: Vec<Pod> = (0..1000).map(pod).collect();
    let (mut create, mut update, mut remove) = (Vec::new(), Vec::new(), Vec::new());
    let mut active: Vec<&Pod> = Vec::new();
    for p in &pods {
        active.push(p);
        let t = Instant::now();
        cm.ensure_pod(p, &active).expect("create pod cgroup");
        create.push(t.elapsed());
    }
    for p in &pods {
        let t = Instant::now();
        cm.ensure_pod(p, &active).expect("update pod cgroup");
        update.push(t.elapsed());
    }
    for p in &pods {
        active.retain(|a| a.metadata.uid != p.metadata.uid);
        let t = Instant::now();
        cm.remove_pod(&p.metadata.uid, &active);
        remove.push(t.elapsed());
    }
    report("create", create);
    report("update", update);
    report("remove", remove);
    println!(
        "(each includes refreshing the burstable and besteffort cgroups, as kubelet does around pod cgroup changes)"
    );
    let _ = driver.destroy(&settings.root);
}
