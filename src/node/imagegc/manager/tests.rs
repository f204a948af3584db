//! The executor against the fake runtime: a scripted image list and image filesystem, a
//! fake clock, real events.

use super::*;
use crate::api::Event;
use crate::base::clock::FakeClock;
use crate::node::runtime::fake::{Call, FakeRuntime};
use crate::node::runtime::{ContainerConfig, SandboxConfig};
use crossbeam_channel::Receiver;
use std::sync::atomic::{AtomicU64, Ordering};

const GIB: u64 = 1 << 30;

struct Node {
    gc: ImageGc,
    rt: Arc<FakeRuntime>,
    clock: FakeClock,
    events: Receiver<Event>,
    available: Arc<AtomicU64>,
    _dir: tempfile::TempDir,
}

fn settings() -> ImageGcSettings {
    ImageGcSettings {
        node_name: "node1".into(),
        policy: Policy {
            high_percent: 85,
            low_percent: 80,
            min_age: Duration::from_secs(120),
            max_age: Duration::ZERO,
            high_bytes_free: None,
            low_bytes_free: None,
        },
        keep: vec!["keep-me:1".into()],
        period: Duration::from_secs(300),
    }
}

impl Node {
    /// A 100 GiB image filesystem with `available` free.
    fn new(settings: ImageGcSettings, available: u64) -> Node {
        let dir = tempfile::tempdir().unwrap();
        Node::in_dir(settings, available, dir, FakeClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1 << 30)))
    }

    fn in_dir(settings: ImageGcSettings, available: u64, dir: tempfile::TempDir, clock: FakeClock) -> Node {
        let rt = Arc::new(FakeRuntime::new(clock.clone()).with_sandbox_image("pause:3.9"));
        let (tx, events) = crossbeam_channel::unbounded();
        let recorder = EventRecorder::new(tx, "ferrolet", "node1", Default::default());
        let free = Arc::new(AtomicU64::new(available));
        let read = free.clone();
        let gc = ImageGc::new(settings, rt.clone(), recorder, Arc::new(clock.clone()), dir.path()).with_fs(Box::new(
            move |p: &Path| {
                assert_eq!(p, Path::new("/fake/images"), "the runtime's image filesystem is read");
                Ok(FsStats { capacity: 100 * GIB, available: read.load(Ordering::Relaxed) })
            },
        ));
        Node { gc, rt, clock, events, available: free, _dir: dir }
    }

    fn events(&self) -> Vec<(String, String)> {
        self.events.try_iter().map(|e| (e.reason, e.message)).collect()
    }

    fn removed(&self) -> Vec<String> {
        self.rt
            .take_calls()
            .into_iter()
            .filter_map(|c| if let Call::RemoveImage(i) = c { Some(i) } else { None })
            .collect()
    }

    /// A container of image `image`, running.
    fn run(&self, name: &str, image: &str) {
        let sb = self.rt.run_pod_sandbox(&SandboxConfig { pod_uid: name.into(), ..Default::default() }).unwrap();
        let cfg = ContainerConfig { name: name.into(), image: image.into(), ..Default::default() };
        let id = self.rt.create_container(&sb, &cfg).unwrap();
        self.rt.start_container(&id).unwrap();
    }

    fn advance(&self, secs: u64) -> SystemTime {
        self.clock.advance(Duration::from_secs(secs));
        self.clock.now()
    }
}

/// Images a (1 GiB, oldest use) … e (5 GiB), and the protected ones.
fn images(node: &Node) {
    for (name, gib) in [("a:1", 1), ("b:1", 2), ("c:1", 3), ("d:1", 4), ("e:1", 5)] {
        node.rt.add_image(name, gib * GIB);
    }
    for name in ["running:1", "exited:1", "pinned:1", "pause:3.9", "keep-me:1"] {
        node.rt.add_image(name, 50 * GIB);
    }
    node.rt.pin_image("pinned:1");
    node.run("web", "running:1");
    node.run("job", "exited:1");
    node.rt.exit("job", 0);
}

#[test]
fn a_pass_frees_the_least_recently_used_images_and_never_a_protected_one() {
    // 90 % used: free 10 GiB.
    let mut node = Node::new(settings(), 10 * GIB);
    images(&node);
    // All seen at once and never used.
    node.gc.detect(node.clock.now(), false).unwrap();
    node.advance(600);
    node.gc.garbage_collect(node.clock.now()).unwrap();
    // All five are as old and as unused: first detection ties, then ids: a 1 + b 2 + c 3 + d 4.
    assert_eq!(node.removed(), ["a:1", "b:1", "c:1", "d:1"]);
    assert_eq!(node.gc.view().images().iter().filter(|i| i.kept.is_none()).count(), 1, "e is left");
    let kept: Vec<(String, Option<String>)> = node
        .gc
        .view()
        .images()
        .into_iter()
        .filter(|i| i.size == 50 * GIB)
        .map(|i| (i.tags[0].clone(), i.kept))
        .collect();
    assert_eq!(
        kept,
        [
            ("exited:1".to_string(), Some("in use".to_string())),
            ("keep-me:1".to_string(), Some("on image_gc_keep".to_string())),
            ("pause:3.9".to_string(), Some("sandbox image".to_string())),
            ("pinned:1".to_string(), Some("pinned".to_string())),
            ("running:1".to_string(), Some("in use".to_string())),
        ]
    );
    let mut metrics = String::new();
    node.gc.view().render_metrics(&mut metrics);
    assert!(metrics.contains("kubelet_image_garbage_collected_total{reason=\"space\"} 4"), "{metrics}");
    assert!(metrics.contains("ferrolet_imagefs_capacity_bytes 107374182400"), "{metrics}");
    assert_eq!(node.events(), []);
}

#[test]
fn images_younger_than_the_minimum_age_stay_and_a_shortfall_is_said_once_then_failed_twice_is_image_gc_failed() {
    let mut node = Node::new(settings(), 10 * GIB);
    images(&node);
    node.gc.detect(node.clock.now(), false).unwrap();
    node.advance(60);
    // Younger than 2 minutes: nothing is eligible. A failed pass is logged the first time.
    node.gc.run_pass(node.clock.now());
    let shortfall = "Failed to garbage collect required amount of images. Attempted to free 10737418240 bytes, but only found 0 bytes eligible to free.";
    assert_eq!(node.events(), [("FreeDiskSpaceFailed".to_string(), shortfall.to_string())]);
    assert_eq!(node.removed(), Vec::<String>::new());
    // The second in a row is ImageGCFailed; the same shortfall is not said again.
    node.gc.run_pass(node.clock.now());
    assert_eq!(node.events(), [("ImageGCFailed".to_string(), shortfall.to_string())]);
    node.advance(600);
    node.gc.run_pass(node.clock.now());
    assert_eq!(node.removed(), ["a:1", "b:1", "c:1", "d:1"]);
    assert_eq!(node.events(), [], "a good pass resets the count");
}

#[test]
fn a_failed_removal_does_not_stop_the_pass_and_zero_capacity_is_invalid() {
    let mut node = Node::new(settings(), 10 * GIB);
    images(&node);
    node.rt.fail_remove_image("a:1");
    node.gc.detect(node.clock.now(), false).unwrap();
    node.advance(600);
    let e = node.gc.garbage_collect(node.clock.now()).unwrap_err();
    assert!(e.starts_with("image sha256:a:1: removing sha256:a:1"), "{e}");
    assert_eq!(node.removed(), ["b:1", "c:1", "d:1", "e:1"], "a's failure is passed over");

    let mut node = Node::new(settings(), 0);
    node.gc = node.gc.with_fs(Box::new(|_: &Path| Ok(FsStats { capacity: 0, available: 0 })));
    assert_eq!(node.gc.garbage_collect(node.clock.now()).unwrap_err(), "invalid capacity 0 on image filesystem");
    assert_eq!(
        node.events(),
        [("InvalidDiskCapacity".to_string(), "invalid capacity 0 on image filesystem".to_string())]
    );
}

#[test]
fn images_unused_past_the_maximum_age_go_once_the_agent_has_run_that_long() {
    let hour = Duration::from_secs(3600);
    let mut s = settings();
    s.policy.max_age = hour;
    // Plenty of room: only age removes anything.
    let mut node = Node::new(s, 90 * GIB);
    images(&node);
    node.gc.detect(node.clock.now(), false).unwrap();
    node.advance(1800);
    node.gc.garbage_collect(node.clock.now()).unwrap();
    assert_eq!(node.removed(), Vec::<String>::new());
    node.advance(1801);
    node.gc.garbage_collect(node.clock.now()).unwrap();
    assert_eq!(node.removed(), ["a:1", "b:1", "c:1", "d:1", "e:1"]);
    let mut metrics = String::new();
    node.gc.view().render_metrics(&mut metrics);
    assert!(metrics.contains("kubelet_image_garbage_collected_total{reason=\"age\"} 5"), "{metrics}");
}

#[test]
fn first_seen_and_last_used_survive_an_agent_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let clock = FakeClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1 << 30));
    let mut node = Node::in_dir(settings(), 10 * GIB, dir, clock.clone());
    images(&node);
    let seen = clock.now();
    node.gc.garbage_collect(seen).unwrap_err();
    clock.advance(Duration::from_secs(600));
    // The agent restarts: a new GC over the same runtime and state directory.
    let (tx, _events) = crossbeam_channel::unbounded();
    let recorder = EventRecorder::new(tx, "ferrolet", "node1", Default::default());
    let restarted = ImageGc::new(settings(), node.rt.clone(), recorder, Arc::new(clock.clone()), &path)
        .with_fs(Box::new(|_: &Path| Ok(FsStats { capacity: 100 * GIB, available: 10 * GIB })));
    node.gc = restarted;
    node.rt.take_calls();
    node.gc.garbage_collect(clock.now()).unwrap();
    // Old enough from before the restart: kubelet would see them as new and keep them.
    assert_eq!(node.removed(), ["a:1", "b:1", "c:1", "d:1"]);
    let a = node.gc.view().images().into_iter().find(|i| i.tags == ["e:1"]).unwrap();
    assert_eq!(a.first_detected, crate::base::timefmt::rfc3339(seen));
}

#[test]
fn delete_unused_removes_every_unused_image_old_enough_at_once_and_answers_the_bytes_freed() {
    // Plenty of room: a pass would remove nothing; eviction decides that the disk is short.
    let mut node = Node::new(settings(), 90 * GIB);
    images(&node);
    node.gc.detect(node.clock.now(), false).unwrap();
    node.advance(600);
    // Seen just now: younger than image_minimum_gc_age, so it stays, as kubelet's freeSpace.
    node.rt.add_image("new:1", 7 * GIB);
    let freed = node.gc.delete_unused(node.clock.now()).unwrap();
    assert_eq!(freed, 15 * GIB, "a 1 + b 2 + c 3 + d 4 + e 5");
    assert_eq!(node.removed(), ["a:1", "b:1", "c:1", "d:1", "e:1"], "least recently used first, all of them");
    let kept: Vec<(String, Option<String>)> =
        node.gc.view().images().into_iter().map(|i| (i.tags[0].clone(), i.kept)).collect();
    assert_eq!(
        kept,
        [
            ("exited:1".to_string(), Some("in use".to_string())),
            ("keep-me:1".to_string(), Some("on image_gc_keep".to_string())),
            ("pause:3.9".to_string(), Some("sandbox image".to_string())),
            ("pinned:1".to_string(), Some("pinned".to_string())),
            ("running:1".to_string(), Some("in use".to_string())),
            ("new:1".to_string(), Some("younger than image_minimum_gc_age".to_string())),
        ],
        "the removed images are forgotten; the rest say why they stay"
    );
    let mut metrics = String::new();
    node.gc.view().render_metrics(&mut metrics);
    assert!(metrics.contains("kubelet_image_garbage_collected_total{reason=\"space\"} 5"), "{metrics}");
    assert_eq!(node.events(), [], "no FreeDiskSpaceFailed: freeing everything is never short");
    // Asked again with nothing left: nothing to free, and no error.
    assert_eq!(node.gc.delete_unused(node.advance(10)).unwrap(), 0);
    assert_eq!(node.removed(), Vec::<String>::new());
    // The new image, once old enough, goes at the next request.
    assert_eq!(node.gc.delete_unused(node.advance(120)).unwrap(), 7 * GIB);
    assert_eq!(node.removed(), ["new:1"]);
}

#[test]
fn delete_unused_reports_what_it_could_not_remove_and_a_listing_it_could_not_make() {
    let mut node = Node::new(settings(), 90 * GIB);
    images(&node);
    node.rt.fail_remove_image("b:1");
    node.gc.detect(node.clock.now(), false).unwrap();
    node.advance(600);
    let e = node.gc.delete_unused(node.clock.now()).unwrap_err();
    assert!(
        matches!(&e, DeleteUnusedError::RemoveImages { freed, images, .. } if *freed == 13 * GIB && images == &["sha256:b:1"]),
        "{e:?}"
    );
    let text = Chain(&e).to_string();
    assert!(
        text.starts_with("freed 13958643712 bytes, but failed to remove sha256:b:1: removing sha256:b:1"),
        "{text}"
    );
    assert_eq!(node.removed(), ["a:1", "c:1", "d:1", "e:1"], "b's failure is passed over");
    let left: Vec<String> = node.gc.view().images().into_iter().filter(|i| i.kept.is_none()).map(|i| i.id).collect();
    assert_eq!(left, ["sha256:b:1"], "b is still recorded, removable");

    // The containers cannot be listed: nothing is known to be unused, nothing goes.
    node.rt.fail_list(1);
    let e = node.gc.delete_unused(node.advance(10)).unwrap_err();
    assert!(matches!(e, DeleteUnusedError::ListImages { .. }), "{e:?}");
    assert_eq!(Chain(&e).to_string(), "failed to list images: runtime state fake: scripted failure");
    assert_eq!(node.removed(), Vec::<String>::new());
}

#[test]
fn the_eviction_manager_asks_through_the_thread_and_gets_the_answer() {
    let node = Node::new(settings(), 90 * GIB);
    images(&node);
    let Node { gc, rt, clock, _dir, .. } = node;
    let health = crate::base::manager::Health::default();
    let handle =
        crate::base::manager::ManagerHandle::spawn_with_channel("fl-imagegc", gc, command_channel(), &health).unwrap();
    let client = ImageGcClient::new(handle.sender());
    let wait = Duration::from_secs(30);
    // Nothing is old enough yet: the images were first seen by this request.
    assert_eq!(client.clone().delete_unused(wait).unwrap(), 0);
    clock.advance(Duration::from_secs(600));
    assert_eq!(client.delete_unused(wait).unwrap(), 15 * GIB);
    let removed = rt.take_calls().into_iter().filter(|c| matches!(c, Call::RemoveImage(_))).count();
    assert_eq!(removed, 5);
    handle.stop(wait).unwrap();
    assert!(matches!(client.delete_unused(wait), Err(DeleteUnusedError::NotRunning)));
}

#[test]
fn a_request_never_blocks_on_a_busy_thread_and_the_queue_is_bounded() {
    // A thread that takes no commands (inside a long pass).
    let (tx, rx) = command_channel();
    let client = ImageGcClient::new(tx);
    let short = Duration::from_millis(1);
    for _ in 0..MAX_QUEUED {
        let e = client.delete_unused(short).unwrap_err();
        assert!(matches!(e, DeleteUnusedError::NoReply { waited } if waited == short), "{e:?}");
    }
    let e = client.delete_unused(short).unwrap_err();
    assert!(matches!(e, DeleteUnusedError::QueueFull), "{e:?}");
    assert_eq!(e.to_string(), "image garbage collection has 4 requests waiting already");
    drop(rx);
    assert!(matches!(client.delete_unused(short), Err(DeleteUnusedError::NotRunning)));
}

#[test]
fn high_100_without_a_maximum_age_runs_no_pass_but_delete_unused_still_reclaims() {
    let mut s = settings();
    s.policy.high_percent = 100;
    s.policy.low_percent = 90;
    let mut node = Node::new(s, 2 * GIB);
    images(&node);
    node.gc.tick(node.clock.now());
    for _ in 0..40 {
        let t = node.advance(30);
        node.gc.tick(t);
    }
    assert_eq!(node.removed(), Vec::<String>::new(), "98 % used, but no pass");
    assert_eq!(node.gc.delete_unused(node.advance(10)).unwrap(), 15 * GIB);
    assert_eq!(node.removed(), ["a:1", "b:1", "c:1", "d:1", "e:1"]);
}

#[test]
fn the_first_pass_comes_a_whole_period_after_the_first_detection() {
    let mut node = Node::new(settings(), 10 * GIB);
    images(&node);
    node.gc.tick(node.clock.now());
    assert_eq!(node.removed(), Vec::<String>::new(), "only a detection");
    let t = node.advance(299);
    node.gc.tick(t);
    assert_eq!(node.removed(), Vec::<String>::new());
    let t = node.advance(1);
    node.gc.tick(t);
    assert_eq!(node.removed(), ["a:1", "b:1", "c:1", "d:1"], "old enough: seen a period ago");
}

#[test]
fn the_least_recently_used_image_goes_last_whatever_its_name() {
    let mut node = Node::new(settings(), 10 * GIB);
    images(&node);
    node.gc.detect(node.clock.now(), false).unwrap();
    // a is used for a while, then its container goes: b … e were never used, so they go first.
    let sb = node.rt.run_pod_sandbox(&SandboxConfig { pod_uid: "once".into(), ..Default::default() }).unwrap();
    let cfg = ContainerConfig { name: "once".into(), image: "a:1".into(), ..Default::default() };
    let id = node.rt.create_container(&sb, &cfg).unwrap();
    node.advance(60);
    node.gc.detect(node.clock.now(), false).unwrap();
    node.rt.remove_container(&id).unwrap();
    node.advance(600);
    node.gc.garbage_collect(node.clock.now()).unwrap();
    // b 2 + c 3 + d 4 = 9 GiB is short of 10: e goes too, and a, used last, stays.
    assert_eq!(node.removed(), ["b:1", "c:1", "d:1", "e:1"]);
}

#[test]
fn a_shortfall_after_the_disk_had_room_again_is_said_again() {
    let mut node = Node::new(settings(), 10 * GIB);
    images(&node);
    node.gc.detect(node.clock.now(), false).unwrap();
    node.advance(60);
    node.gc.run_pass(node.clock.now());
    assert_eq!(node.events().len(), 1, "the first shortfall");
    // Room again (nothing wanted), then full again with the same images eligible.
    node.available.store(50 * GIB, Ordering::Relaxed);
    node.gc.run_pass(node.clock.now());
    node.available.store(10 * GIB, Ordering::Relaxed);
    node.gc.run_pass(node.clock.now());
    let reasons: Vec<String> = node.events().into_iter().map(|(r, _)| r).collect();
    assert_eq!(reasons, ["FreeDiskSpaceFailed"]);
}
