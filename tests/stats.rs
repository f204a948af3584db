//! The stats thread (`fl-stats`) of an agent on the process runtime, started in this process
//! so its `StatsView` can be read: a pod whose one container holds 50 MiB and whose other
//! burns CPU under a 200m quota, its numbers checked against the cgroup files (v1 or v2),
//! its logs and its disk `emptyDir` measured, its memory `emptyDir` not counted as disk, and
//! the node's numbers against `/proc`. Needs root (cgroups, mount namespaces): without it
//! the test skips.

use crate::common::{ferrolet_bin, free_port, manifest, root_or_skip, wait_for, Sandbox};
use ferrolet::agent::Agent;
use ferrolet::api::Pod;
use ferrolet::config::Config;
use ferrolet::node::cm::cgroupfs::{detect, CgroupDriver, CgroupVersion};
use ferrolet::node::cm::{pod_path, CmSettings};
use ferrolet::node::stats::{ContainerStats, PodStats, Snapshot};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub const MIB: u64 = 1 << 20;

/// A control file of cgroup `path`, as a number (v1's `total_*` and v2's keys of a
/// flat-keyed file with `key`).
pub fn control(driver: &dyn CgroupDriver, path: &str, file: &str, key: Option<&str>) -> u64 {
    let dir = driver.dir_for(path, file).unwrap_or_else(|| panic!("no hierarchy holds {file}"));
    let text = std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{path}/{file}: {e}"));
    let value = match key {
        None => text.trim(),
        Some(key) => text
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {key} in {file}")),
    };
    value.trim().parse().unwrap_or_else(|_| panic!("{path}/{file}: {value:?}"))
}

/// The working set of cgroup `path` from its files, as kubelet computes it.
pub fn working_set(driver: &dyn CgroupDriver, path: &str) -> u64 {
    let (usage, inactive) = match driver.version() {
        CgroupVersion::V1 => (
            control(driver, path, "memory.usage_in_bytes", None),
            control(driver, path, "memory.stat", Some("total_inactive_file")),
        ),
        CgroupVersion::V2 => {
            (control(driver, path, "memory.current", None), control(driver, path, "memory.stat", Some("inactive_file")))
        }
    };
    usage.saturating_sub(inactive)
}

/// The CPU time of cgroup `path` from its files, in nanoseconds.
pub fn cpu_ns(driver: &dyn CgroupDriver, path: &str) -> u64 {
    match driver.version() {
        CgroupVersion::V1 => control(driver, path, "cpuacct.usage", None),
        CgroupVersion::V2 => control(driver, path, "cpu.stat", Some("usage_usec")) * 1000,
    }
}

pub fn container<'a>(p: &'a PodStats, name: &str) -> &'a ContainerStats {
    p.containers.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no container {name} in {p:?}"))
}

/// Asserts that `got` is within `tolerance` of `want`.
pub fn near(what: &str, got: u64, want: u64, tolerance: u64) {
    assert!(got.abs_diff(want) <= tolerance, "{what}: {got} is not within {tolerance} of {want}");
}

/// A snapshot in which pod `name` shows `ok`, within `timeout` (collections come every 10 s).
pub fn snapshot_where(
    view: &ferrolet::node::stats::StatsView,
    name: &str,
    timeout: Duration,
    ok: impl Fn(&PodStats) -> bool,
) -> (Arc<Snapshot>, PodStats) {
    wait_for(&format!("a snapshot where pod {name} is measured"), timeout, || {
        let s = view.get()?;
        let p = s.pods.iter().find(|p| p.name == name).filter(|p| ok(p))?.clone();
        Some((s, p))
    })
}

const POD: &str = "  terminationGracePeriodSeconds: 1
  containers:
  - name: mem
    image: x
    command: [sh, -c, 'echo started; head -c 1048576 /dev/zero > /cache/data; head -c 1048576 /dev/zero > /ram/data; dd if=/dev/zero bs=50M count=1 2>/dev/null | sleep 3600']
    resources:
      limits: {memory: 200Mi}
    volumeMounts:
    - {name: cache, mountPath: /cache}
    - {name: ram, mountPath: /ram}
  - name: burn
    image: x
    command: [sh, -c, 'while :; do :; done']
    resources:
      limits: {cpu: 200m}
  volumes:
  - {name: cache, emptyDir: {}}
  - {name: ram, emptyDir: {medium: Memory}}
";

#[test]
fn the_collector_reads_a_pods_cgroups_logs_and_volumes_as_the_files_show_them() {
    if !root_or_skip("pod cgroups and mount namespaces need root") {
        return;
    }
    let driver: Arc<dyn CgroupDriver> = Arc::from(detect(Path::new("/proc/self/mountinfo"), None).unwrap());
    let sb = Sandbox::new();
    sb.write_manifest("stats.yaml", &manifest("stats", POD));
    let cfg = Config::parse("stats.toml", &sb.config_text(free_port())).unwrap();
    let agent = Agent::start(&cfg, &ferrolet_bin()).unwrap();
    let (snap, p) = snapshot_where(&agent.stats, "stats-testnode", Duration::from_secs(90), |p| {
        let burn_rate = p.containers.iter().find(|c| c.name == "burn").and_then(|c| c.cpu?.usage_nano_cores);
        let mem = p.containers.iter().find(|c| c.name == "mem").and_then(|c| c.memory);
        burn_rate.is_some() && mem.is_some_and(|m| m.working_set_bytes >= 50 * MIB)
    });

    // Where the cgroups are: the pod's by its QoS class, its containers' by name.
    let pod: Pod = agent.statuses.list().pods().find(|x| x.metadata.name == "stats-testnode").unwrap();
    let settings = CmSettings { root: sb.cgroup_root(), ..Default::default() };
    let pod_cg = pod_path(&settings, &pod);
    assert!(pod_cg.contains("/kubepods/burstable/pod"), "{pod_cg}");
    let (mem_cg, burn_cg) = (format!("{pod_cg}/mem"), format!("{pod_cg}/burn"));

    // Memory: the container that holds 50 MiB, against its files a moment later.
    let mem = container(&p, "mem");
    let m = mem.memory.unwrap();
    near("mem's working set", m.working_set_bytes, working_set(&*driver, &mem_cg), 8 * MIB);
    assert!(m.working_set_bytes < 100 * MIB, "{m:?}");
    assert_eq!(m.available_bytes, Some(200 * MIB - m.working_set_bytes), "its limit less its working set");
    assert!(m.usage_bytes >= m.working_set_bytes && m.rss_bytes >= 45 * MIB, "{m:?}");
    assert!(m.page_faults > 0, "{m:?}");
    let pm = p.memory.unwrap();
    assert!(pm.working_set_bytes >= m.working_set_bytes, "the pod holds its containers: {pm:?}");
    near("the pod's working set", pm.working_set_bytes, working_set(&*driver, &pod_cg), 8 * MIB);
    assert_eq!(pm.available_bytes, None, "the burn container has no memory limit, so neither has the pod");

    // CPU: 200m of quota, over the 10 s between two readings; the cumulative count below
    // what the file says a moment later.
    let burn = container(&p, "burn");
    let cpu = burn.cpu.unwrap();
    let rate = cpu.usage_nano_cores.unwrap();
    // Above a tenth of the quota whatever else the machine runs, and never above it.
    assert!((20_000_000..=260_000_000).contains(&rate), "burn's rate {rate} nanocores under a 200m quota");
    let file = cpu_ns(&*driver, &burn_cg);
    let since = SystemTime::now().duration_since(cpu.time.unwrap()).unwrap();
    assert!(cpu.usage_core_nano_seconds <= file, "{} > {file}", cpu.usage_core_nano_seconds);
    assert!(file - cpu.usage_core_nano_seconds <= (since.as_nanos() as u64) / 3 + 500_000_000, "{file}, {cpu:?}");
    let pod_cpu = p.cpu.unwrap();
    assert!(pod_cpu.usage_core_nano_seconds >= cpu.usage_core_nano_seconds);
    assert!(pod_cpu.usage_nano_cores.is_some_and(|r| r >= rate / 2), "{pod_cpu:?}");
    assert!(burn.start_time.is_some() && mem.start_time.is_some() && p.start_time.is_some());

    // Processes: sh, dd and sleep in mem, sh in burn.
    let pids = control(&*driver, &pod_cg, "pids.current", None);
    assert_eq!(p.process_count, Some(pids));
    assert!(pids >= 4, "{pids}");

    // Disk: the logs (one line), the disk emptyDir (1 MiB) and not the memory one.
    assert_eq!(mem.rootfs, None, "no writable layer on the process runtime");
    let logs = mem.logs.unwrap();
    assert!(logs.used_bytes.unwrap() > 0 && logs.inodes_used.unwrap() >= 2, "{logs:?}");
    assert_eq!(p.volumes.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(), ["cache"]);
    let cache = &p.volumes[0].fs;
    assert!(cache.used_bytes.unwrap() >= MIB && cache.inodes_used == Some(2), "{cache:?}");
    assert!(cache.capacity_bytes.is_some() && cache.available_bytes.is_some());
    let e = p.ephemeral_storage.unwrap();
    let logs_all: u64 = p.containers.iter().filter_map(|c| c.logs?.used_bytes).sum();
    assert_eq!(e.used_bytes, Some(cache.used_bytes.unwrap() + logs_all));

    // The node.
    let n = &snap.node;
    let total: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap()
        * 1024;
    let nm = n.memory.unwrap();
    assert!(nm.working_set_bytes >= pm.working_set_bytes && nm.working_set_bytes < total);
    assert_eq!(nm.available_bytes, Some(total - nm.working_set_bytes));
    assert!(n.cpu.unwrap().usage_nano_cores.is_some(), "a second reading of the node: a rate");
    let kube = n.pods_memory.unwrap();
    assert!(kube.working_set_bytes >= pm.working_set_bytes && kube.available_bytes.is_some(), "{kube:?}");
    assert!(n.pods_cpu.unwrap().usage_core_nano_seconds >= pod_cpu.usage_core_nano_seconds);
    let fs = n.fs.unwrap();
    assert!(fs.capacity_bytes.unwrap() > 0 && fs.used_bytes.unwrap() <= fs.capacity_bytes.unwrap());
    assert_eq!(n.image_fs, None, "the process runtime has no images");
    let r = n.rlimit.unwrap();
    assert!(r.max_pid > 0 && r.num_of_running_processes >= pids, "{r:?}");
    assert!(n.start_time.is_some());
    assert_eq!(n.node_name, "testnode");

    let late = agent.stop();
    assert!(late.is_empty(), "{late:?}");
}
