use super::*;
use crate::base::clock::FakeClock;
use crate::node::cm::cgroupfs::{Mounts, V1, V2};
use crate::node::runtime::fake::FakeRuntime;
use crate::node::runtime::stats::RuntimeFsUsage;

const S: Duration = Duration::from_secs(1);

fn sample(usage_ns: u64, at_secs: u64) -> CpuSample {
    CpuSample { usage_ns, at: Duration::from_secs(at_secs) }
}

#[test]
fn the_cpu_rate_is_the_usage_between_two_readings_over_the_time_between_them() {
    // (previous, current, nanocores)
    let cases: [(Option<CpuSample>, CpuSample, Option<u64>); 7] = [
        (None, sample(5_000_000_000, 10), None),
        // Half a core for 10 s.
        (Some(sample(5_000_000_000, 10)), sample(10_000_000_000, 20), Some(500_000_000)),
        // Two whole cores.
        (Some(sample(0, 0)), sample(20_000_000_000, 10), Some(2_000_000_000)),
        (Some(sample(7, 10)), sample(7, 20), Some(0)),
        // The counter went back: a new cgroup at the same path, a restarted container.
        (Some(sample(9_000, 10)), sample(1_000, 20), None),
        // No time passed (a runtime's cached reading given twice), or the clock went back.
        (Some(sample(1, 10)), sample(5, 10), None),
        (Some(sample(1, 10)), sample(5, 9), None),
    ];
    for (prev, cur, want) in cases {
        assert_eq!(nano_cores(prev, cur), want, "{prev:?} -> {cur:?}");
    }
    // Large counters do not overflow: 100 cores for a year, then a second more.
    let year = 365 * 24 * 3600;
    let a = sample(100 * year * 1_000_000_000, year);
    let b = sample(100 * (year + 1) * 1_000_000_000, year + 1);
    assert_eq!(nano_cores(Some(a), b), Some(100_000_000_000));
}

#[test]
fn a_source_not_seen_in_a_collection_is_forgotten() {
    let mut h = CpuHistory::default();
    assert_eq!(h.observe("/kubepods/poda", sample(0, 0)), None);
    assert_eq!(h.observe("/kubepods/podb", sample(0, 0)), None);
    h.sweep();
    assert_eq!(h.observe("/kubepods/poda", sample(1_000_000_000, 1)), Some(1_000_000_000));
    h.sweep();
    assert_eq!(h.last.len(), 1, "podb went: its reading is dropped");
    // A pod back under the same path starts over.
    assert_eq!(h.observe("/kubepods/podb", sample(5_000_000_000, 2)), None);
}

#[test]
fn memory_stats_say_what_is_available_below_the_capacity_or_the_limit() {
    let t = UNIX_EPOCH + S;
    let m = MemoryUsage {
        usage: 300,
        inactive_file: 100,
        limit: Some(1000),
        rss: 150,
        page_faults: 9,
        major_page_faults: 1,
    };
    let s = memory_stats(&m, None, t);
    assert_eq!((s.working_set_bytes, s.available_bytes, s.usage_bytes, s.rss_bytes), (200, Some(800), 300, 150));
    assert_eq!((s.page_faults, s.major_page_faults, s.time), (9, 1, Some(t)));
    assert_eq!(memory_stats(&m, Some(500), t).available_bytes, Some(300), "the node's capacity, or allocatable");
    assert_eq!(memory_stats(&MemoryUsage { limit: None, ..m }, None, t).available_bytes, None);
    assert_eq!(memory_stats(&m, Some(100), t).available_bytes, Some(0));
}

#[test]
fn ephemeral_storage_adds_layers_logs_and_volumes_under_nodefs_totals() {
    let t = UNIX_EPOCH;
    let nodefs = FsTotals { capacity: 1000, available: 400, used: 600, inodes: 50, inodes_free: 20 };
    let used = |b: u64, i: u64| Some(fs_usage(t, None, Some(b), Some(i)));
    let containers = [
        ContainerStats { rootfs: used(10, 1), logs: used(20, 2), ..Default::default() },
        ContainerStats { rootfs: None, logs: used(5, 1), ..Default::default() },
        ContainerStats::default(),
    ];
    let volumes = [VolumeStats { name: "cache".into(), fs: fs_usage(t, Some(nodefs), Some(100), Some(7)) }];
    let e = ephemeral_storage(t, Some(nodefs), &containers, &volumes);
    assert_eq!((e.used_bytes, e.inodes_used), (Some(135), Some(11)));
    assert_eq!(
        (e.capacity_bytes, e.available_bytes, e.inodes, e.inodes_free),
        (Some(1000), Some(400), Some(50), Some(20))
    );
    let none = ephemeral_storage(t, None, &[], &[]);
    assert_eq!((none.used_bytes, none.capacity_bytes), (Some(0), None));
    let whole = fs_totals(t, nodefs);
    assert_eq!((whole.used_bytes, whole.inodes_used), (Some(600), Some(30)));
}

#[test]
fn a_tree_is_walked_again_after_a_hundred_times_its_last_walk() {
    assert_eq!(next_walk(Duration::from_micros(50)), Duration::from_millis(5), "a few files: every collection");
    assert_eq!(next_walk(Duration::from_millis(200)), Duration::from_secs(20));
    assert_eq!(next_walk(Duration::from_secs(10)), MAX_WALK_AGE);
}

/// A fake node: `/proc` files, and a v1 or v2 cgroup tree with the root, kubepods, a pod and
/// its container `app`.
struct FakeNode {
    dir: tempfile::TempDir,
}

impl FakeNode {
    fn new() -> FakeNode {
        let dir = tempfile::tempdir().unwrap();
        let proc = dir.path().join("proc");
        std::fs::create_dir_all(proc.join("sys/kernel")).unwrap();
        std::fs::write(proc.join("meminfo"), "MemTotal: 1000000 kB\nMemFree: 400000 kB\nInactive(file): 100000 kB\nActive(anon): 1000 kB\nInactive(anon): 2000 kB\n").unwrap();
        std::fs::write(proc.join("stat"), "cpu  100 0 50 1000 0 0 0 0 0 0\nbtime 1700000000\n").unwrap();
        std::fs::write(proc.join("vmstat"), "pgfault 77\npgmajfault 3\n").unwrap();
        std::fs::write(proc.join("loadavg"), "0.1 0.2 0.3 2/345 999\n").unwrap();
        std::fs::write(proc.join("sys/kernel/pid_max"), "4194304\n").unwrap();
        std::fs::write(proc.join("sys/kernel/threads-max"), "63000\n").unwrap();
        FakeNode { dir }
    }

    fn settings(&self) -> CollectorSettings {
        let mut s = CollectorSettings::new("node1", self.dir.path());
        s.proc_root = self.dir.path().join("proc");
        s.kubepods = Some("/kubepods".into());
        s.allocatable_memory = Some(800 << 20);
        s
    }

    /// A v1 tree (cpu and cpuacct together); `usage` is written as every cgroup's CPU.
    fn v1(&self) -> V1 {
        let r = self.dir.path().join("cg");
        let text = format!(
            "1 0 0:1 / {r}/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n2 0 0:2 / {r}/memory rw - cgroup cgroup rw,memory\n3 0 0:3 / {r}/pids rw - cgroup cgroup rw,pids\n",
            r = r.display()
        );
        for (path, usage) in [
            ("", 900_000_000u64),
            ("kubepods", 600 << 20),
            ("kubepods/podu1", 300 << 20),
            ("kubepods/podu1/app", 200 << 20),
        ] {
            let d = |c: &str| r.join(c).join(path);
            for c in ["cpu,cpuacct", "memory", "pids"] {
                std::fs::create_dir_all(d(c)).unwrap();
            }
            self.cpu_v1(path, 1_000_000_000);
            std::fs::write(d("memory").join("memory.usage_in_bytes"), format!("{usage}\n")).unwrap();
            let limit = if path == "kubepods/podu1" { 512u64 << 20 } else { 9223372036854771712 };
            std::fs::write(d("memory").join("memory.limit_in_bytes"), format!("{limit}\n")).unwrap();
            std::fs::write(
                d("memory").join("memory.stat"),
                format!("total_inactive_file {}\ntotal_rss 1000\n", 50 << 20),
            )
            .unwrap();
            std::fs::write(d("pids").join("pids.current"), "3\n").unwrap();
        }
        V1::new(&Mounts::parse(&text))
    }

    fn cpu_v1(&self, path: &str, ns: u64) {
        let f = self.dir.path().join("cg/cpu,cpuacct").join(path).join("cpuacct.usage");
        std::fs::write(f, format!("{ns}\n")).unwrap();
    }

    fn logs(&self) -> PathBuf {
        let d = self.dir.path().join("logs/app");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("0.log"), vec![b'x'; 10_000]).unwrap();
        d
    }

    fn volume(&self) -> PathBuf {
        let d = self.dir.path().join("pods/u1/volumes/kubernetes.io~empty-dir/cache");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("data"), vec![b'y'; 50_000]).unwrap();
        d
    }
}

fn runtime() -> Arc<FakeRuntime> {
    Arc::new(FakeRuntime::new(FakeClock::new(UNIX_EPOCH)))
}

fn pod(node: &FakeNode, cgroups: bool) -> PodTarget {
    PodTarget {
        uid: "u1".into(),
        name: "web".into(),
        namespace: "default".into(),
        start_time: Some(UNIX_EPOCH + S),
        cgroup: cgroups.then(|| "/kubepods/podu1".into()),
        containers: vec![ContainerTarget {
            name: "app".into(),
            id: "c1".into(),
            start_time: Some(UNIX_EPOCH + 2 * S),
            cgroup: cgroups.then(|| "/kubepods/podu1/app".into()),
            log_dir: Some(node.logs()),
        }],
        volumes: vec![VolumeTarget { name: "cache".into(), path: node.volume() }],
    }
}

#[test]
fn a_v1_node_and_its_pods_are_read_from_their_cgroups_proc_and_disks() {
    let node = FakeNode::new();
    let driver: Arc<dyn CgroupDriver> = Arc::new(node.v1());
    let rt = runtime();
    let mut c = Collector::new(node.settings(), Some(driver), rt.clone());
    let pods = [pod(&node, true)];
    let first = c.collect(&pods);

    let n = &first.node;
    assert_eq!(n.node_name, "node1");
    assert_eq!(n.start_time, Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000)));
    let mem = n.memory.unwrap();
    assert_eq!(mem.usage_bytes, 900_000_000, "the root memory cgroup on v1");
    assert_eq!(mem.working_set_bytes, 900_000_000 - (50 << 20));
    assert_eq!(mem.available_bytes, Some(1_000_000 * 1024 - mem.working_set_bytes), "MemTotal less the working set");
    assert_eq!(n.cpu.unwrap().usage_core_nano_seconds, 1_000_000_000);
    assert_eq!(n.cpu.unwrap().usage_nano_cores, None, "one reading: no rate yet");
    assert_eq!(n.rlimit.map(|r| (r.max_pid, r.num_of_running_processes)), Some((63000, 345)));
    assert!(n.fs.unwrap().capacity_bytes.unwrap() > 0);
    assert_eq!(n.image_fs, None, "the fake runtime's image filesystem does not exist here");
    let pm = n.pods_memory.unwrap();
    assert_eq!(pm.available_bytes, Some((800 << 20) - ((600 << 20) - (50 << 20))), "allocatable less the working set");

    let p = &first.pods[0];
    assert_eq!((p.name.as_str(), p.namespace.as_str(), p.uid.as_str()), ("web", "default", "u1"));
    assert_eq!(p.process_count, Some(3));
    let m = p.memory.unwrap();
    assert_eq!((m.usage_bytes, m.available_bytes), (300 << 20, Some((512 << 20) - (250 << 20))));
    let app = &p.containers[0];
    assert_eq!(app.memory.unwrap().working_set_bytes, 150 << 20);
    assert_eq!(app.rootfs, None, "the process runtime has no writable layer");
    let logs = app.logs.unwrap();
    assert!(logs.used_bytes.unwrap() >= 10_000 && logs.inodes_used == Some(2), "{logs:?}");
    assert!(logs.capacity_bytes.is_some());
    let v = &p.volumes[0];
    assert_eq!(v.name, "cache");
    assert!(v.fs.used_bytes.unwrap() >= 50_000 && v.fs.inodes_used == Some(2));
    let e = p.ephemeral_storage.unwrap();
    assert_eq!(e.used_bytes.unwrap(), logs.used_bytes.unwrap() + v.fs.used_bytes.unwrap());

    // A second reading, 1.5 cores more on the container: a rate.
    node.cpu_v1("kubepods/podu1/app", 2_500_000_000);
    std::thread::sleep(Duration::from_millis(20));
    let second = c.collect(&pods);
    let rate = second.pods[0].containers[0].cpu.unwrap().usage_nano_cores.unwrap();
    assert!(rate > 1_000_000_000, "1.5 s of CPU in about 20 ms: {rate}");
    assert_eq!(second.pods[0].cpu.unwrap().usage_nano_cores, Some(0), "the pod's counter did not move");

    // The pod goes: its readings are forgotten.
    let (cpu, trees) = c.remembered();
    assert_eq!((cpu, trees), (4, 2), "the root, kubepods, the pod, its container; its logs and its volume");
    c.collect(&[]);
    assert_eq!(c.remembered(), (2, 0));
}

#[test]
fn a_v2_node_reads_its_memory_from_meminfo_and_its_cpu_from_the_root() {
    let node = FakeNode::new();
    let root = node.dir.path().join("cg2");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("cpu.stat"), "usage_usec 4000000\n").unwrap();
    let driver: Arc<dyn CgroupDriver> = Arc::new(V2::new(&root));
    let mut s = node.settings();
    s.kubepods = None;
    let mut c = Collector::new(s, Some(driver), runtime());
    let n = c.collect(&[]).node;
    let m = n.memory.unwrap();
    assert_eq!(m.usage_bytes, 600_000 * 1024, "MemTotal less MemFree");
    assert_eq!(m.working_set_bytes, 500_000 * 1024, "less Inactive(file)");
    assert_eq!(m.available_bytes, Some(500_000 * 1024));
    assert_eq!((m.rss_bytes, m.page_faults, m.major_page_faults), (3000 * 1024, 77, 3));
    assert_eq!(n.cpu.unwrap().usage_core_nano_seconds, 4_000_000_000);
    assert_eq!((n.pods_cpu, n.pods_memory), (None, None));

    // Without cgroups at all: /proc/stat's busy ticks.
    let mut s = node.settings();
    s.kubepods = None;
    let mut c = Collector::new(s, None, runtime());
    let ticks = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap();
    assert_eq!(c.collect(&[]).node.cpu.unwrap().usage_core_nano_seconds, 150 * 1_000_000_000 / ticks);
}

#[test]
fn on_cri_the_runtime_gives_the_writable_layer_and_what_the_cgroups_cannot() {
    let node = FakeNode::new();
    let rt = runtime();
    let at = |s: u64| Some(UNIX_EPOCH + Duration::from_secs(s));
    let container = |usage: u64, time| RuntimeContainerStats {
        id: "c1".into(),
        cpu: Some(RuntimeCpu { time, usage_core_nano_seconds: usage, usage_nano_cores: Some(7) }),
        memory: Some(RuntimeMemory { time, working_set_bytes: 40 << 20, ..Default::default() }),
        writable_layer: Some(RuntimeFsUsage {
            time,
            mount_point: node.dir.path().into(),
            used_bytes: Some(4096),
            inodes_used: Some(4),
        }),
    };
    let sandbox = RuntimePodStats {
        sandbox_id: "sb1".into(),
        pod_uid: "u1".into(),
        cpu: Some(RuntimeCpu { time: at(100), usage_core_nano_seconds: 9, usage_nano_cores: None }),
        memory: Some(RuntimeMemory { working_set_bytes: 45 << 20, ..Default::default() }),
        process_count: Some(2),
    };
    rt.report_stats(Some(vec![container(1_000_000_000, at(100))]), Some(vec![sandbox]));
    let mut c = Collector::new(node.settings(), None, rt.clone());
    let pods = [pod(&node, false)];
    let p = &c.collect(&pods).pods[0];
    let app = &p.containers[0];
    assert_eq!(app.memory.unwrap().working_set_bytes, 40 << 20, "no cgroup to read: the runtime's");
    assert_eq!(app.cpu.unwrap().usage_nano_cores, Some(7), "the runtime's own rate before a second reading");
    let rootfs = app.rootfs.unwrap();
    assert_eq!((rootfs.used_bytes, rootfs.inodes_used, rootfs.time), (Some(4096), Some(4), at(100)));
    assert!(rootfs.capacity_bytes.is_some(), "the layer's filesystem's size");
    assert_eq!((p.memory.unwrap().working_set_bytes, p.process_count), (45 << 20, Some(2)), "the sandbox's");
    let e = p.ephemeral_storage.unwrap().used_bytes.unwrap();
    assert!(e >= 4096 + 10_000 + 50_000, "layer, logs and volume: {e}");

    // Ten seconds later by the runtime's clock, half a core more: the rate is the collector's.
    rt.report_stats(Some(vec![container(6_000_000_000, at(110))]), None);
    let p = &c.collect(&pods).pods[0];
    assert_eq!(p.containers[0].cpu.unwrap().usage_nano_cores, Some(500_000_000));
    assert_eq!((p.cpu, p.memory, p.process_count), (None, None, None), "no sandbox stats now: none made up");
}
