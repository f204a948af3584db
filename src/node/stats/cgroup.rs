//! A cgroup's usage from its control files: pure parsers of the kernel's texts for cgroup v1
//! (`cpuacct.usage`, `memory.usage_in_bytes`, `memory.stat`'s hierarchical `total_*` values,
//! `memory.limit_in_bytes`, `pids.current`) and v2 (`cpu.stat`, `memory.current`,
//! `memory.stat`, `memory.max`, `pids.current`), and `CgroupReader`, the thin executor that
//! reads them through the `CgroupDriver` into one reused buffer.

use super::proc::read_small;
use crate::node::cm::cgroupfs::{CgroupDriver, CgroupVersion};
use std::io;

/// A v1 limit at or above this is no limit: the kernel shows "unlimited" as the largest
/// page-aligned `i64` (9223372036854771712), as kubelet tells it.
pub const V1_UNLIMITED: u64 = 1 << 62;

/// What one reading of a cgroup's memory gives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryUsage {
    /// All memory charged to the cgroup, page cache included.
    pub usage: u64,
    /// Its limit; `None`: unlimited.
    pub limit: Option<u64>,
    /// Inactive file pages (reclaimable page cache).
    pub inactive_file: u64,
    /// Anonymous memory.
    pub rss: u64,
    /// Page faults.
    pub page_faults: u64,
    /// Major page faults.
    pub major_page_faults: u64,
}

impl MemoryUsage {
    /// Usage minus inactive file pages, never below 0 (kubelet's and cAdvisor's working set on
    /// both versions).
    pub fn working_set(&self) -> u64 {
        self.usage.saturating_sub(self.inactive_file)
    }

    /// The limit minus the working set, when there is a limit.
    pub fn available(&self) -> Option<u64> {
        self.limit.map(|l| l.saturating_sub(self.working_set()))
    }
}

/// One reading of a cgroup: each part `None` where its file could not be read (a controller
/// not mounted, a cgroup gone meanwhile).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupUsage {
    /// Cumulative CPU time, in nanoseconds.
    pub cpu_usage_ns: Option<u64>,
    /// Memory.
    pub memory: Option<MemoryUsage>,
    /// Processes and threads (`pids.current`).
    pub pids: Option<u64>,
}

/// A file holding one number (`cpuacct.usage`, `memory.current`, `pids.current`).
pub fn parse_u64(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// `memory.limit_in_bytes` (v1): `None` inside is no limit.
pub fn parse_limit_v1(text: &str) -> Option<Option<u64>> {
    parse_u64(text).map(|l| (l < V1_UNLIMITED).then_some(l))
}

/// `memory.max` (v2): `max`, or a number of bytes.
pub fn parse_max_v2(text: &str) -> Option<Option<u64>> {
    match text.trim() {
        "max" => Some(None),
        n => n.parse().ok().map(Some),
    }
}

/// The value of `key` in a flat-keyed file (`key value` per line: `memory.stat`, `cpu.stat`).
pub fn flat_keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// `cpu.stat` (v2): the cumulative CPU time, `usage_usec`, in nanoseconds.
pub fn parse_cpu_stat_v2(text: &str) -> Option<u64> {
    flat_keyed(text, "usage_usec").map(|us| us.saturating_mul(1000))
}

/// The keys of `memory.stat` the stats read: v1's hierarchical totals (the cgroup and every
/// descendant, as `memory.usage_in_bytes` counts them), v2's own (always hierarchical).
struct StatKeys {
    inactive_file: &'static str,
    rss: &'static str,
    page_faults: &'static str,
    major_page_faults: &'static str,
}

const V1_KEYS: StatKeys = StatKeys {
    inactive_file: "total_inactive_file",
    rss: "total_rss",
    page_faults: "total_pgfault",
    major_page_faults: "total_pgmajfault",
};

const V2_KEYS: StatKeys =
    StatKeys { inactive_file: "inactive_file", rss: "anon", page_faults: "pgfault", major_page_faults: "pgmajfault" };

/// The memory reading from `usage` (`memory.usage_in_bytes` or `memory.current`), `stat`
/// (`memory.stat`) and `limit`; a key `stat` lacks counts 0. One pass over `stat`.
pub fn memory_usage(version: CgroupVersion, usage: u64, stat: &str, limit: Option<u64>) -> MemoryUsage {
    let keys = match version {
        CgroupVersion::V1 => V1_KEYS,
        CgroupVersion::V2 => V2_KEYS,
    };
    let mut m = MemoryUsage { usage, limit, ..MemoryUsage::default() };
    for line in stat.lines() {
        let Some((k, v)) = line.split_once(' ') else { continue };
        let slot = match k {
            _ if k == keys.inactive_file => &mut m.inactive_file,
            _ if k == keys.rss => &mut m.rss,
            _ if k == keys.page_faults => &mut m.page_faults,
            _ if k == keys.major_page_faults => &mut m.major_page_faults,
            _ => continue,
        };
        *slot = v.trim().parse().unwrap_or(0);
    }
    m
}

/// The control files of one version, by what they give.
struct Files {
    cpu: &'static str,
    usage: &'static str,
    limit: &'static str,
}

const V1_FILES: Files = Files { cpu: "cpuacct.usage", usage: "memory.usage_in_bytes", limit: "memory.limit_in_bytes" };
const V2_FILES: Files = Files { cpu: "cpu.stat", usage: "memory.current", limit: "memory.max" };

/// What to read of a cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Want {
    /// CPU and memory.
    pub usage: bool,
    /// `pids.current`.
    pub pids: bool,
}

/// Reads cgroups' usage through a driver, into one buffer reused for every file (a
/// collection reads hundreds).
pub struct CgroupReader {
    buf: Vec<u8>,
    stat: String,
}

impl Default for CgroupReader {
    fn default() -> Self {
        CgroupReader { buf: Vec::with_capacity(4096), stat: String::with_capacity(4096) }
    }
}

impl CgroupReader {
    /// The text of control file `file` of cgroup `path`.
    fn text(&mut self, driver: &dyn CgroupDriver, path: &str, file: &str) -> io::Result<&str> {
        let dir = driver
            .dir_for(path, file)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no hierarchy holds {file}")))?;
        read_small(&dir.join(file), &mut self.buf)
    }

    /// One number from control file `file`.
    fn number(&mut self, driver: &dyn CgroupDriver, path: &str, file: &str) -> io::Result<u64> {
        let t = self.text(driver, path, file)?;
        parse_u64(t).ok_or_else(|| bad(file, t))
    }

    /// The CPU time of cgroup `path`, in nanoseconds.
    pub fn cpu(&mut self, driver: &dyn CgroupDriver, path: &str) -> io::Result<u64> {
        match driver.version() {
            CgroupVersion::V1 => self.number(driver, path, V1_FILES.cpu),
            CgroupVersion::V2 => {
                let t = self.text(driver, path, V2_FILES.cpu)?;
                parse_cpu_stat_v2(t).ok_or_else(|| bad(V2_FILES.cpu, t))
            }
        }
    }

    /// The memory of cgroup `path` (not the root on v2, which has no `memory.current`).
    pub fn memory(&mut self, driver: &dyn CgroupDriver, path: &str) -> io::Result<MemoryUsage> {
        let v = driver.version();
        let files = match v {
            CgroupVersion::V1 => &V1_FILES,
            CgroupVersion::V2 => &V2_FILES,
        };
        let usage = self.number(driver, path, files.usage)?;
        let limit = {
            let t = self.text(driver, path, files.limit)?;
            match v {
                CgroupVersion::V1 => parse_limit_v1(t),
                CgroupVersion::V2 => parse_max_v2(t),
            }
            .ok_or_else(|| bad(files.limit, t))?
        };
        let mut stat = std::mem::take(&mut self.stat);
        stat.clear();
        let read = self.text(driver, path, "memory.stat").map(|t| stat.push_str(t));
        let m = read.map(|()| memory_usage(v, usage, &stat, limit));
        self.stat = stat;
        m
    }

    /// `pids.current` of cgroup `path`.
    pub fn pids(&mut self, driver: &dyn CgroupDriver, path: &str) -> io::Result<u64> {
        self.number(driver, path, "pids.current")
    }

    /// What `want` asks of cgroup `path`; a part that cannot be read is `None`, and the first
    /// failure other than a missing file comes back beside it (for the log).
    pub fn read(&mut self, driver: &dyn CgroupDriver, path: &str, want: Want) -> (CgroupUsage, Option<io::Error>) {
        let mut out = CgroupUsage::default();
        let mut failed = None;
        let keep = |r: io::Result<u64>, failed: &mut Option<io::Error>| match r {
            Ok(v) => Some(v),
            Err(e) => {
                if e.kind() != io::ErrorKind::NotFound && failed.is_none() {
                    *failed = Some(e);
                }
                None
            }
        };
        if want.usage {
            out.cpu_usage_ns = keep(self.cpu(driver, path), &mut failed);
            out.memory = match self.memory(driver, path) {
                Ok(m) => Some(m),
                Err(e) => {
                    keep(Err(e), &mut failed);
                    None
                }
            };
        }
        if want.pids {
            out.pids = keep(self.pids(driver, path), &mut failed);
        }
        (out, failed)
    }
}

fn bad(file: &str, text: &str) -> io::Error {
    let shown: String = text.chars().take(64).collect();
    io::Error::new(io::ErrorKind::InvalidData, format!("{file}: not what the kernel writes: {shown:?}"))
}

#[cfg(test)]
mod tests;
