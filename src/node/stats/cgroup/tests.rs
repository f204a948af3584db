use super::*;
use crate::node::cm::cgroupfs::{Mounts, V1, V2};
use std::path::Path;

/// The head of a real v1 `memory.stat` (the cgroup's own values first, then the totals).
const V1_STAT: &str = "\
cache 13402112
rss 9539584
pgfault 361408
pgmajfault 0
inactive_file 180224
hierarchical_memory_limit 9223372036854771712
total_cache 19351302144
total_rss 684855296
total_pgfault 872550887
total_pgmajfault 117284
total_inactive_anon 675172352
total_inactive_file 8658612224
total_active_file 10683342848
";

/// A v2 `memory.stat` (abridged).
const V2_STAT: &str = "\
anon 52428800
file 4194304
kernel 1048576
inactive_anon 0
active_anon 52428800
inactive_file 3145728
active_file 1048576
pgfault 12931
pgmajfault 7
";

#[test]
fn single_numbers_and_limits_read_as_the_kernel_writes_them() {
    // (text, parse_u64, v1 limit, v2 max)
    type Case = (&'static str, Option<u64>, Option<Option<u64>>, Option<Option<u64>>);
    let cases: [Case; 6] = [
        ("123456\n", Some(123456), Some(Some(123456)), Some(Some(123456))),
        ("9223372036854771712\n", Some(9223372036854771712), Some(None), Some(Some(9223372036854771712))),
        ("max\n", None, None, Some(None)),
        ("", None, None, None),
        ("-1\n", None, None, None),
        ("12 34\n", None, None, None),
    ];
    for (text, n, v1, v2) in cases {
        assert_eq!(parse_u64(text), n, "{text:?}");
        assert_eq!(parse_limit_v1(text), v1, "{text:?} as memory.limit_in_bytes");
        assert_eq!(parse_max_v2(text), v2, "{text:?} as memory.max");
    }
}

#[test]
fn cpu_stat_gives_microseconds_made_nanoseconds() {
    let text = "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 0\n";
    assert_eq!(parse_cpu_stat_v2(text), Some(2_500_000_000));
    assert_eq!(parse_cpu_stat_v2("user_usec 1\n"), None);
    assert_eq!(flat_keyed("a 1\nab 2\n", "ab"), Some(2), "the whole key, not a prefix");
    assert_eq!(flat_keyed("a x\n", "a"), None);
}

#[test]
fn v1_memory_takes_the_hierarchical_totals_and_v2_its_own_keys() {
    let m = memory_usage(CgroupVersion::V1, 10_000_000_000, V1_STAT, None);
    assert_eq!(m.inactive_file, 8658612224, "total_inactive_file, not the cgroup's own inactive_file");
    assert_eq!((m.rss, m.page_faults, m.major_page_faults), (684855296, 872550887, 117284));
    assert_eq!(m.working_set(), 10_000_000_000 - 8658612224);
    assert_eq!(m.available(), None, "no limit, nothing available to say");

    let m = memory_usage(CgroupVersion::V2, 56 << 20, V2_STAT, Some(64 << 20));
    assert_eq!((m.inactive_file, m.rss, m.page_faults, m.major_page_faults), (3145728, 52428800, 12931, 7));
    assert_eq!(m.working_set(), (56 << 20) - 3145728);
    assert_eq!(m.available(), Some((64 << 20) - m.working_set()));
}

#[test]
fn the_working_set_and_what_is_available_never_go_below_zero() {
    // Page cache counted as inactive beyond the usage read a moment before (two files, two
    // moments), and a cgroup over its limit (usage charged before the limit was lowered).
    let m = MemoryUsage { usage: 100, inactive_file: 150, limit: Some(50), ..Default::default() };
    assert_eq!(m.working_set(), 0);
    let m = MemoryUsage { usage: 100, inactive_file: 10, limit: Some(50), ..Default::default() };
    assert_eq!(m.available(), Some(0));
    let m = memory_usage(CgroupVersion::V2, 7, "", Some(10));
    assert_eq!((m.inactive_file, m.working_set(), m.available()), (0, 7, Some(3)), "keys missing count 0");
}

/// A fake v1 tree (cpu and cpuacct together, memory, pids) holding cgroup `pod1`.
fn v1_tree(root: &Path) -> V1 {
    let text = format!(
        "1 0 0:1 / {r}/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n2 0 0:2 / {r}/memory rw - cgroup cgroup rw,memory\n3 0 0:3 / {r}/pids rw - cgroup cgroup rw,pids\n",
        r = root.display()
    );
    let d = |c: &str| root.join(c).join("pod1");
    for c in ["cpu,cpuacct", "memory", "pids"] {
        std::fs::create_dir_all(d(c)).unwrap();
    }
    std::fs::write(d("cpu,cpuacct").join("cpuacct.usage"), "5000000000\n").unwrap();
    std::fs::write(d("memory").join("memory.usage_in_bytes"), "10000000000\n").unwrap();
    std::fs::write(d("memory").join("memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
    std::fs::write(d("memory").join("memory.stat"), V1_STAT).unwrap();
    std::fs::write(d("pids").join("pids.current"), "12\n").unwrap();
    V1::new(&Mounts::parse(&text))
}

#[test]
fn a_v1_cgroup_is_read_through_its_controllers_directories() {
    let root = tempfile::tempdir().unwrap();
    let driver = v1_tree(root.path());
    let mut r = CgroupReader::default();
    let (u, failed) = r.read(&driver, "/pod1", Want { usage: true, pids: true });
    assert!(failed.is_none(), "{failed:?}");
    assert_eq!(u.cpu_usage_ns, Some(5_000_000_000));
    assert_eq!(u.pids, Some(12));
    let m = u.memory.unwrap();
    assert_eq!((m.usage, m.limit, m.inactive_file), (10_000_000_000, None, 8658612224));

    // Gone: nothing, and nothing to say (a cgroup removed between listing and reading).
    let (u, failed) = r.read(&driver, "/pod2", Want { usage: true, pids: true });
    assert_eq!((u, failed.is_none()), (CgroupUsage::default(), true));

    // A file that holds something else is said, naming the file.
    std::fs::write(root.path().join("pids/pod1/pids.current"), "lots\n").unwrap();
    let (u, failed) = r.read(&driver, "/pod1", Want { usage: false, pids: true });
    assert_eq!(u.pids, None);
    let e = failed.unwrap().to_string();
    assert!(e.starts_with("pids.current: not what the kernel writes"), "{e}");
}

#[test]
fn a_v2_cgroup_is_read_from_its_one_directory() {
    let root = tempfile::tempdir().unwrap();
    let d = root.path().join("kubepods/pod1");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("cpu.stat"), "usage_usec 1500\nuser_usec 1000\n").unwrap();
    std::fs::write(d.join("memory.current"), format!("{}\n", 56 << 20)).unwrap();
    std::fs::write(d.join("memory.max"), "67108864\n").unwrap();
    std::fs::write(d.join("memory.stat"), V2_STAT).unwrap();
    let driver = V2::new(root.path());
    let mut r = CgroupReader::default();
    let (u, failed) = r.read(&driver, "/kubepods/pod1", Want { usage: true, pids: true });
    assert_eq!(u.cpu_usage_ns, Some(1_500_000));
    assert_eq!(u.memory.map(|m| (m.limit, m.rss)), Some((Some(64 << 20), 52428800)));
    assert_eq!(u.pids, None, "no pids controller here");
    assert!(failed.is_none(), "a missing file is no failure: {failed:?}");
}
