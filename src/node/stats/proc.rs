//! The node's own numbers from `/proc`: pure parsers of `meminfo` (the node's memory on
//! cgroup v2), `stat` (the node's CPU time and boot time), `vmstat` (page faults), `loadavg`
//! (how many processes and threads there are) and the kernel's process id limits, and
//! `ProcReader`, which reads them (from a root a test may point elsewhere). Also
//! `read_small`, the bounded read of a kernel file both readers share.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// The most bytes read of one kernel file: `memory.stat` and `meminfo` are a few KiB; a file
/// larger than this is not the kernel's.
pub const MAX_KERNEL_FILE: usize = 64 << 10;

/// Reads the whole of `path` into `buf` (at most `MAX_KERNEL_FILE` bytes) and returns it as
/// text.
pub fn read_small<'a>(path: &Path, buf: &'a mut Vec<u8>) -> io::Result<&'a str> {
    buf.clear();
    let f = File::open(path)?;
    let n = f.take(MAX_KERNEL_FILE as u64 + 1).read_to_end(buf)?;
    if n > MAX_KERNEL_FILE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: more than {MAX_KERNEL_FILE} bytes", path.display()),
        ));
    }
    std::str::from_utf8(buf)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("{}: not text", path.display())))
}

/// What `/proc/meminfo` says, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meminfo {
    /// `MemTotal`: the node's memory capacity.
    pub total: u64,
    /// `MemFree`.
    pub free: u64,
    /// `Inactive(file)`.
    pub inactive_file: u64,
    /// `Active(anon)` + `Inactive(anon)`: anonymous memory on the LRU lists.
    pub anon: u64,
}

impl Meminfo {
    /// In use: `MemTotal` − `MemFree` (cgroup v2's node usage, as runc reads the root).
    pub fn usage(&self) -> u64 {
        self.total.saturating_sub(self.free)
    }
}

/// `/proc/meminfo`; `None` without `MemTotal` and `MemFree`.
pub fn parse_meminfo(text: &str) -> Option<Meminfo> {
    let (mut total, mut free) = (None, None);
    let mut m = Meminfo::default();
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else { continue };
        let mut words = rest.split_whitespace();
        let Some(n) = words.next().and_then(|n| n.parse::<u64>().ok()) else { continue };
        let bytes = if words.next() == Some("kB") { n.saturating_mul(1024) } else { n };
        match key {
            "MemTotal" => total = Some(bytes),
            "MemFree" => free = Some(bytes),
            "Inactive(file)" => m.inactive_file = bytes,
            "Active(anon)" | "Inactive(anon)" => m.anon = m.anon.saturating_add(bytes),
            _ => {}
        }
    }
    m.total = total?;
    m.free = free?;
    Some(m)
}

/// What `/proc/stat` says of the node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcStat {
    /// Busy CPU time of every CPU, in clock ticks: user, nice, system, irq, softirq and steal
    /// (not idle and iowait; guest time is inside user).
    pub busy_ticks: Option<u64>,
    /// Boot time, in seconds since the epoch (`btime`).
    pub boot_time: Option<u64>,
}

/// `/proc/stat`: its first line (`cpu`, every CPU together) and `btime`.
pub fn parse_stat(text: &str) -> ProcStat {
    let mut s = ProcStat::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("cpu ") {
            let f: Vec<u64> = rest.split_whitespace().map(|w| w.parse().unwrap_or(0)).collect();
            // user nice system idle iowait irq softirq steal guest guest_nice
            if f.len() >= 7 {
                let busy = [0, 1, 2, 5, 6, 7].iter().filter_map(|&i| f.get(i)).fold(0u64, |a, v| a.saturating_add(*v));
                s.busy_ticks = Some(busy);
            }
        } else if let Some(rest) = line.strip_prefix("btime ") {
            s.boot_time = rest.trim().parse().ok();
        }
    }
    s
}

/// The page faults in `/proc/vmstat`: (`pgfault`, `pgmajfault`), 0 where missing.
pub fn parse_vmstat_faults(text: &str) -> (u64, u64) {
    let (mut minor, mut major) = (0, 0);
    for line in text.lines() {
        match line.split_once(' ') {
            Some(("pgfault", v)) => minor = v.trim().parse().unwrap_or(0),
            Some(("pgmajfault", v)) => major = v.trim().parse().unwrap_or(0),
            _ => {}
        }
    }
    (minor, major)
}

/// The processes and threads that exist, from `/proc/loadavg`'s fourth field
/// (`running/total`): the total.
pub fn parse_loadavg_total(text: &str) -> Option<u64> {
    text.split_whitespace().nth(3)?.split_once('/')?.1.parse().ok()
}

/// The most process ids the kernel hands out: the lower of `kernel.pid_max` and
/// `kernel.threads-max` (kubelet's `MaxPID`).
pub fn max_pid(pid_max: Option<u64>, threads_max: Option<u64>) -> Option<u64> {
    match (pid_max, threads_max) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Reads the node's files under a `/proc` root (one buffer for all).
pub struct ProcReader {
    root: PathBuf,
    buf: Vec<u8>,
    /// Clock ticks per second (`sysconf(_SC_CLK_TCK)`).
    ticks_per_second: u64,
}

impl ProcReader {
    /// A reader of the files under `root` (`/proc`).
    pub fn new(root: &Path) -> ProcReader {
        // SAFETY: sysconf has no preconditions.
        let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        ProcReader {
            root: root.into(),
            buf: Vec::with_capacity(4096),
            ticks_per_second: u64::try_from(tck).unwrap_or(100).max(1),
        }
    }

    fn text(&mut self, file: &str) -> io::Result<&str> {
        read_small(&self.root.join(file), &mut self.buf)
    }

    fn number(&mut self, file: &str) -> io::Result<u64> {
        let t = self.text(file)?;
        t.trim().parse().map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("{file}: not a number")))
    }

    /// `meminfo`.
    pub fn meminfo(&mut self) -> io::Result<Meminfo> {
        let t = self.text("meminfo")?;
        parse_meminfo(t).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "meminfo: no MemTotal or MemFree"))
    }

    /// `stat`.
    pub fn stat(&mut self) -> io::Result<ProcStat> {
        self.text("stat").map(parse_stat)
    }

    /// The node's busy CPU time from `stat`, in nanoseconds.
    pub fn cpu_ns(&self, stat: &ProcStat) -> Option<u64> {
        stat.busy_ticks.map(|t| t.saturating_mul(1_000_000_000 / self.ticks_per_second))
    }

    /// `vmstat`'s page faults.
    pub fn faults(&mut self) -> io::Result<(u64, u64)> {
        self.text("vmstat").map(parse_vmstat_faults)
    }

    /// How many processes and threads exist (`loadavg`).
    pub fn processes(&mut self) -> io::Result<u64> {
        let t = self.text("loadavg")?;
        parse_loadavg_total(t)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "loadavg: no running/total field"))
    }

    /// The most process ids the kernel hands out (`sys/kernel/pid_max`, `threads-max`).
    pub fn max_pid(&mut self) -> Option<u64> {
        let pid_max = self.number("sys/kernel/pid_max").ok();
        let threads_max = self.number("sys/kernel/threads-max").ok();
        max_pid(pid_max, threads_max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str = "\
MemTotal:        8039872 kB
MemFree:          419608 kB
MemAvailable:    5632556 kB
Active(anon):      32768 kB
Inactive(anon):   659348 kB
Active(file):   10433020 kB
Inactive(file):  8455676 kB
HugePages_Total:       0
";

    #[test]
    fn meminfo_is_read_in_bytes_and_usage_is_total_less_free() {
        let m = parse_meminfo(MEMINFO).unwrap();
        assert_eq!(m.total, 8039872 * 1024);
        assert_eq!(m.free, 419608 * 1024);
        assert_eq!(m.inactive_file, 8455676 * 1024);
        assert_eq!(m.anon, (32768 + 659348) * 1024);
        assert_eq!(m.usage(), (8039872 - 419608) * 1024);
        assert_eq!(parse_meminfo("MemFree: 1 kB\n"), None, "no capacity, no reading");
        assert_eq!(parse_meminfo("MemTotal: 2 kB\nMemFree: 1 kB\n").map(|m| m.inactive_file), Some(0));
    }

    #[test]
    fn stat_counts_busy_ticks_and_the_boot_time() {
        let text = "cpu  2420740 3627 637880 4721116 40437 0 11192 2329 0 0\ncpu0 1108940 1667 300088 2488978 13154 0 3468 1151 0 0\nintr 1 2\nbtime 1795784918\n";
        let s = parse_stat(text);
        assert_eq!(s.busy_ticks, Some(2420740 + 3627 + 637880 + 11192 + 2329));
        assert_eq!(s.boot_time, Some(1795784918));
        // An old kernel without steal (7 fields): what is there counts.
        assert_eq!(parse_stat("cpu  1 2 3 4 5 6 7\n").busy_ticks, Some(1 + 2 + 3 + 6 + 7));
        assert_eq!(parse_stat("cpu0 1 2 3 4 5 6 7\n"), ProcStat::default(), "one CPU's line is not the node's");
        let r = ProcReader { root: PathBuf::new(), buf: Vec::new(), ticks_per_second: 100 };
        assert_eq!(r.cpu_ns(&ProcStat { busy_ticks: Some(250), boot_time: None }), Some(2_500_000_000));
    }

    #[test]
    fn processes_faults_and_pid_limits() {
        assert_eq!(parse_loadavg_total("2.70 3.04 3.03 3/106 5845\n"), Some(106));
        assert_eq!(parse_loadavg_total("2.70 3.04\n"), None);
        assert_eq!(parse_vmstat_faults("pgfault 872550887\npgmajfault 117284\npgfree 3\n"), (872550887, 117284));
        assert_eq!(parse_vmstat_faults(""), (0, 0));
        assert_eq!(max_pid(Some(32768), Some(192730)), Some(32768));
        assert_eq!(max_pid(Some(4194304), Some(63278)), Some(63278), "threads-max lower on a small machine");
        assert_eq!(max_pid(None, Some(7)), Some(7));
        assert_eq!(max_pid(None, None), None);
    }

    #[test]
    fn a_kernel_file_is_read_whole_or_refused_when_too_large() {
        let dir = tempfile::tempdir().unwrap();
        let mut buf = Vec::new();
        let small = dir.path().join("small");
        std::fs::write(&small, "42\n").unwrap();
        assert_eq!(read_small(&small, &mut buf).unwrap(), "42\n");
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'1'; MAX_KERNEL_FILE + 1]).unwrap();
        let e = read_small(&big, &mut buf).unwrap_err();
        assert!(e.to_string().contains("more than 65536 bytes"), "{e}");
        let e = read_small(&dir.path().join("none"), &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn this_nodes_proc_reads() {
        let mut r = ProcReader::new(Path::new("/proc"));
        let m = r.meminfo().unwrap();
        assert!(m.total > 0 && m.free <= m.total);
        let s = r.stat().unwrap();
        assert!(r.cpu_ns(&s).unwrap() > 0 && s.boot_time.unwrap() > 0);
        assert!(r.processes().unwrap() > 0);
        assert!(r.max_pid().unwrap() > 0);
    }
}
