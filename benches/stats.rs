//! `make bench`: the cost of one stats collection at 100 pods on this machine. 100 pod cgroups
//! (Burstable, under a cgroup root of its own) each with a container cgroup holding a sleeping
//! process, a log file and a disk `emptyDir`; the collector (`fl-stats`' work) run on them
//! repeatedly. Prints the CPU one collection takes (this thread's CPU time), the share of one
//! core that is at the 10 s period, the heap the snapshot and the collector's state hold (a
//! counting allocator), and the RSS growth over the run. Needs root (it says so and stops
//! otherwise); removes its cgroups, processes and files after. Asserts nothing.

use ferrolet::node::cm::cgroupfs::{detect, CgroupDriver, CgroupVersion};
use ferrolet::node::runtime::process::ProcessRuntime;
use ferrolet::node::stats::collector::{Collector, CollectorSettings};
use ferrolet::node::stats::target::{ContainerTarget, PodTarget, VolumeTarget};
use ferrolet::node::stats::PERIOD;
use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The heap in use, counted at every allocation and free.
struct Counting;

static HEAP: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only a counter is kept.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        HEAP.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's layout, as given.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        HEAP.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: a block this allocator gave out, with its layout.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        HEAP.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        // SAFETY: a block this allocator gave out, with its layout.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const PODS: usize = 100;
const RUNS: usize = 30;

fn heap() -> isize {
    HEAP.load(Ordering::Relaxed)
}

/// This thread's CPU time.
fn thread_cpu() -> Duration {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn percentile(samples: &mut [Duration], q: f64) -> Duration {
    samples.sort();
    samples[((samples.len() - 1) as f64 * q).round() as usize]
}

/// The pods: their cgroups made and a `sleep` in each container cgroup, their log files and
/// volumes under `dir`.
fn setup(driver: &dyn CgroupDriver, root: &str, dir: &Path) -> (Vec<PodTarget>, Vec<Child>) {
    let mut targets = Vec::new();
    let mut sleepers = Vec::new();
    for i in 0..PODS {
        let uid = format!("{i:032x}");
        let pod_cg = format!("{root}/kubepods/burstable/pod{uid}");
        let app_cg = format!("{pod_cg}/app");
        driver.create(&app_cg).expect("a container cgroup");
        let child = Command::new("sleep").arg("3600").spawn().expect("sleep");
        for f in driver.procs_files(&app_cg) {
            std::fs::write(&f, child.id().to_string()).expect("join the container cgroup");
        }
        sleepers.push(child);
        let logs = dir.join(format!("logs/default_p{i}_{uid}/app"));
        std::fs::create_dir_all(&logs).unwrap();
        std::fs::write(logs.join("0.log"), "2024-05-01T10:00:00.000000000Z stdout F started\n").unwrap();
        let volume = dir.join(format!("pods/{uid}/volumes/kubernetes.io~empty-dir/cache"));
        std::fs::create_dir_all(&volume).unwrap();
        std::fs::write(volume.join("data"), vec![0u8; 4096]).unwrap();
        targets.push(PodTarget {
            uid: uid.clone(),
            name: format!("p{i}"),
            namespace: "default".into(),
            start_time: Some(std::time::SystemTime::now()),
            cgroup: Some(pod_cg),
            containers: vec![ContainerTarget {
                name: "app".into(),
                id: format!("c{i}"),
                start_time: Some(std::time::SystemTime::now()),
                cgroup: Some(app_cg),
                log_dir: Some(logs),
            }],
            volumes: vec![VolumeTarget { name: "cache".into(), path: volume }],
        });
    }
    (targets, sleepers)
}

fn main() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return println!("stats benchmark skipped: making cgroups needs root");
    }
    let driver: Arc<dyn CgroupDriver> = match detect(Path::new("/proc/self/mountinfo"), None) {
        Ok(d) => Arc::from(d),
        Err(e) => return println!("stats benchmark skipped: {e}"),
    };
    let root = format!("/ferrolet-bench-stats-{}", std::process::id());
    let dir = tempfile::tempdir_in("/var/tmp").expect("a temporary directory");
    let (targets, mut sleepers) = setup(&*driver, &root, dir.path());
    let runtime =
        Arc::new(ProcessRuntime::new(&dir.path().join("runtime"), Path::new("/bin/false"), 1 << 20, 1).unwrap());

    let rss_before = rss_kib();
    let heap_before = heap();
    let mut settings = CollectorSettings::new("bench", dir.path());
    settings.kubepods = Some(format!("{root}/kubepods"));
    settings.allocatable_memory = Some(1 << 30);
    let mut collector = Collector::new(settings, Some(driver.clone()), runtime);
    let (mut cpu, mut wall) = (Vec::new(), Vec::new());
    let mut last = None;
    for _ in 0..RUNS {
        drop(last.take());
        let (c0, w0) = (thread_cpu(), Instant::now());
        let snapshot = collector.collect(&targets);
        cpu.push(thread_cpu() - c0);
        wall.push(w0.elapsed());
        last = Some(snapshot);
    }
    let held = heap() - heap_before;
    let snapshot = last.take().expect("a snapshot");
    let measured = snapshot.pods.iter().filter(|p| p.memory.is_some() && p.containers[0].cpu.is_some()).count();
    let rated = snapshot.pods.iter().filter(|p| p.containers[0].cpu.and_then(|c| c.usage_nano_cores).is_some()).count();
    let with_snapshot = heap();
    drop(snapshot);
    let snapshot_bytes = with_snapshot - heap();
    let rss_growth = rss_kib().saturating_sub(rss_before);

    let version = if driver.version() == CgroupVersion::V1 { 1 } else { 2 };
    println!(
        "stats: {PODS} pods under {root} (cgroup v{version}): {} cgroups, {PODS} log directories, {PODS} emptyDirs; {measured} pods measured, {rated} with a CPU rate",
        PODS * 2 + 2
    );
    let (p50, max) = (percentile(&mut cpu, 0.5), percentile(&mut cpu, 1.0));
    println!(
        "stats collection: CPU p50 {:.0} µs, max {:.0} µs; wall p50 {:.0} µs ({RUNS} collections)",
        p50.as_secs_f64() * 1e6,
        max.as_secs_f64() * 1e6,
        percentile(&mut wall, 0.5).as_secs_f64() * 1e6
    );
    println!(
        "stats thread at the {:?} period: {:.3} % of one core (p50), {:.3} % (max)",
        PERIOD,
        p50.as_secs_f64() / PERIOD.as_secs_f64() * 100.0,
        max.as_secs_f64() / PERIOD.as_secs_f64() * 100.0
    );
    let (cpu_sources, trees) = collector.remembered();
    println!(
        "stats memory: snapshot {:.1} KiB on the heap ({} B a pod); snapshot and collector state {:.1} KiB ({cpu_sources} CPU sources, {trees} trees remembered); RSS growth {} KiB over {RUNS} collections",
        snapshot_bytes as f64 / 1024.0,
        snapshot_bytes / PODS as isize,
        held as f64 / 1024.0,
        rss_growth
    );

    for s in &mut sleepers {
        let _ = s.kill();
        let _ = s.wait();
    }
    if let Err(e) = driver.destroy(&root) {
        println!("stats: cannot remove {root}: {e}");
    }
}
