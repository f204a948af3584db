use super::*;
use crate::base::clock::FakeClock;
use crate::node::runtime::fake::FakeRuntime;
use crate::node::stats::collector::CollectorSettings;
use crate::node::stats::target::PodTarget;
use parking_lot::Mutex;

/// What the after-collect work saw: which piece of work, and the snapshot.
type Seen = Arc<Mutex<Vec<(&'static str, Arc<Snapshot>)>>>;

/// A manager over a node with nothing to read (no cgroups, an empty `/proc`) and one pod;
/// the after-collect work records the snapshots it saw under `seen`.
fn manager(dir: &std::path::Path, seen: Seen) -> StatsManager {
    let mut settings = CollectorSettings::new("node1", dir);
    settings.proc_root = dir.join("no-proc");
    let runtime = Arc::new(FakeRuntime::new(FakeClock::new(std::time::UNIX_EPOCH)));
    let collector = Collector::new(settings, None, runtime);
    let targets: TargetSource =
        Box::new(|| vec![PodTarget { uid: "u1".into(), name: "web".into(), ..Default::default() }]);
    let (first, second) = (seen.clone(), seen);
    StatsManager::new(collector, targets)
        .after_collect(Box::new(move |s, _| first.lock().push(("first", s.clone()))))
        .after_collect(Box::new(move |s, _| second.lock().push(("second", s.clone()))))
}

#[test]
fn the_first_collection_is_due_at_once_and_the_next_every_period() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::default();
    let mut m = manager(dir.path(), seen);
    assert!(m.next_deadline().is_some_and(|d| d <= Instant::now()), "due at start");
    assert_eq!(m.tick_interval(), PERIOD);
    assert!(m.view().get().is_none());
    m.on_deadline();
    assert!(m.next_deadline().is_none(), "then only the ticker");
    let s = m.view().get().unwrap();
    assert_eq!(s.pods.len(), 1);
    assert_eq!(s.node.node_name, "node1");
    m.on_deadline();
    assert!(Arc::ptr_eq(&s, &m.view().get().unwrap()), "a late deadline collects nothing more");
    m.on_tick();
    assert!(!Arc::ptr_eq(&s, &m.view().get().unwrap()), "each tick publishes a new snapshot");
}

#[test]
fn work_after_a_collection_sees_the_published_snapshot_in_the_order_it_was_registered() {
    let dir = tempfile::tempdir().unwrap();
    let seen: Seen = Arc::default();
    let mut m = manager(dir.path(), seen.clone());
    let got = m.collect_now();
    let seen = seen.lock();
    assert_eq!(seen.iter().map(|(n, _)| *n).collect::<Vec<_>>(), ["first", "second"]);
    assert!(seen.iter().all(|(_, s)| Arc::ptr_eq(s, &got)));
    assert!(Arc::ptr_eq(&got, &m.view().get().unwrap()), "published before the work runs");
}

#[test]
fn an_ask_within_min_interval_of_a_collection_is_kept_for_when_that_has_passed() {
    let dir = tempfile::tempdir().unwrap();
    let seen: Seen = Arc::default();
    let mut m = manager(dir.path(), seen.clone());
    m.handle(StatsCommand::Collect);
    assert!(m.next_deadline().is_none(), "an asked collection is the first one too");
    let asked = Instant::now();
    m.handle(StatsCommand::Collect);
    m.handle(StatsCommand::Collect);
    assert_eq!(seen.lock().len(), 2, "one collection so far (two pieces of work after it)");
    let due = m.next_deadline().expect("the asks are kept, not dropped");
    assert!(due > asked && due <= asked + MIN_INTERVAL, "{due:?}");
    std::thread::sleep(due.saturating_duration_since(Instant::now()));
    m.on_deadline();
    assert_eq!(seen.lock().len(), 4, "both asks answered by one more collection");
    assert!(m.next_deadline().is_none());
}
