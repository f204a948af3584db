use super::*;

const GIB: u64 = 1 << 30;

fn t(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
}

fn image(id: &str, tag: &str, size: u64) -> ImageInfo {
    ImageInfo { id: id.into(), repo_tags: vec![tag.into()], size, ..Default::default() }
}

fn record(id: &str, size: u64, first: u64, used: u64) -> ImageRecord {
    ImageRecord {
        id: id.into(),
        tags: vec![format!("docker.io/library/{id}:1")],
        size,
        pinned: false,
        first_detected: t(first),
        last_used: t(used),
    }
}

fn policy() -> Policy {
    Policy {
        high_percent: 85,
        low_percent: 80,
        min_age: Duration::from_secs(120),
        max_age: Duration::ZERO,
        high_bytes_free: None,
        low_bytes_free: None,
    }
}

#[test]
fn detection_keeps_first_seen_marks_use_and_forgets_what_is_gone() {
    let listed = vec![image("sha256:a", "a:1", 10), image("sha256:b", "b:1", 20)];
    let none = HashSet::new();
    let first = detect(&BTreeMap::new(), &listed, &none, t(0));
    assert_eq!((first["sha256:a"].first_detected, first["sha256:a"].last_used), (t(0), t(0)));
    let in_use = HashSet::from(["sha256:b".to_string()]);
    let listed = vec![image("sha256:b", "b:1", 25), image("sha256:c", "c:1", 5)];
    let second = detect(&first, &listed, &in_use, t(300));
    assert_eq!(second.keys().collect::<Vec<_>>(), ["sha256:b", "sha256:c"], "a is no longer listed");
    assert_eq!(
        (second["sha256:b"].first_detected, second["sha256:b"].last_used, second["sha256:b"].size),
        (t(0), t(300), 25)
    );
    assert_eq!((second["sha256:c"].first_detected, second["sha256:c"].last_used), (t(300), t(300)));
}

#[test]
fn in_use_is_matched_by_id_digest_or_name() {
    let mut a = image("sha256:a", "docker.io/library/a:1", 1);
    a.repo_digests = vec!["docker.io/library/a@sha256:aa".into()];
    let listed = vec![a, image("sha256:b", "localhost/b:latest", 1), image("sha256:c", "c:1", 1)];
    let used = images_in_use(&listed, ["docker.io/library/a@sha256:aa", "localhost/b:latest"]);
    assert_eq!(used, HashSet::from(["sha256:a".to_string(), "sha256:b".to_string()]));
    assert_eq!(images_in_use(&listed, ["sha256:c"]), HashSet::from(["sha256:c".to_string()]));
}

#[test]
fn the_order_is_least_recently_used_then_first_detected_and_skips_every_kept_image() {
    let mut records: BTreeMap<String, ImageRecord> = [
        record("new", 1, 50, 200),
        record("old", 1, 10, 100),
        record("older-seen", 1, 5, 100),
        record("used", 1, 0, 0),
        record("pinned", 1, 0, 0),
        record("pause", 1, 0, 0),
        record("kept", 1, 0, 0),
    ]
    .into_iter()
    .map(|r| (r.id.clone(), r))
    .collect();
    records.get_mut("pinned").unwrap().pinned = true;
    let p = Protected {
        in_use: HashSet::from(["used".to_string()]),
        sandbox: Some("docker.io/library/pause:1".into()),
        keep: vec!["kept:1".into()],
    };
    let order: Vec<&str> = eviction_order(&records, &p).iter().map(|r| r.id.as_str()).collect();
    assert_eq!(order, ["older-seen", "old", "new"]);
    let reason = |id: &str| keep_reason(&records[id], &p);
    assert_eq!(
        [reason("used"), reason("pinned"), reason("pause"), reason("kept"), reason("old")],
        [Some(Kept::InUse), Some(Kept::Pinned), Some(Kept::Sandbox), Some(Kept::KeepList), None]
    );
}

#[test]
fn the_amount_to_free_is_kubelets_worked_example_and_the_absolute_thresholds_can_ask_more() {
    // 100 GiB with 10 GiB free is 90 % used: with 85/80, free 100*20/100 - 10 = 10 GiB.
    let fs = FsStats { capacity: 100 * GIB, available: 10 * GIB };
    assert_eq!(usage_percent(fs), 90);
    assert_eq!(amount_to_free(fs, &policy()), 10 * GIB);
    // Below the high threshold nothing is freed; at it, down to low.
    assert_eq!(amount_to_free(FsStats { capacity: 100 * GIB, available: 16 * GIB }, &policy()), 0);
    assert_eq!(amount_to_free(FsStats { capacity: 100 * GIB, available: 15 * GIB }, &policy()), 5 * GIB);
    // High 100 never starts a space pass by percent.
    assert_eq!(amount_to_free(FsStats { capacity: 100, available: 0 }, &Policy { high_percent: 100, ..policy() }), 0);
    // A small disk: fewer than 1 GiB free asks for 2 GiB free, beyond what 85/80 asks.
    let small = FsStats { capacity: 8 * GIB, available: GIB / 2 };
    let abs = Policy { high_bytes_free: Some(GIB), low_bytes_free: Some(2 * GIB), ..policy() };
    assert_eq!(
        amount_to_free(small, &policy()),
        8 * GIB * 20 / 100 - GIB / 2,
        "percent: 20 % of 8 GiB, less what is free"
    );
    assert_eq!(amount_to_free(small, &abs), 2 * GIB - GIB / 2);
    assert_eq!(amount_to_free(FsStats { capacity: 8 * GIB, available: 3 * GIB }, &abs), 0);
    // Available beyond capacity is clamped.
    assert_eq!(usage_percent(FsStats { capacity: 10, available: 20 }), 0);
}

#[test]
fn a_space_pass_takes_images_in_order_skipping_young_and_just_used_ones() {
    let records: BTreeMap<String, ImageRecord> = [
        record("a", 3 * GIB, 0, 10),
        record("b", 4 * GIB, 0, 20),
        record("young", 9 * GIB, 950, 950),
        record("just-used", 9 * GIB, 0, 1000),
        record("c", 5 * GIB, 0, 30),
        record("d", 5 * GIB, 0, 40),
    ]
    .into_iter()
    .map(|r| (r.id.clone(), r))
    .collect();
    let order = eviction_order(&records, &Protected::default());
    let ids: Vec<&str> =
        space_candidates(&order, t(1000), Duration::from_secs(120)).iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c", "d"], "least recently used first; young and just-used ones skipped");
}

#[test]
fn an_age_pass_removes_images_unused_past_the_maximum_age_once_the_agent_has_run_that_long() {
    let records: BTreeMap<String, ImageRecord> =
        [record("stale", 1, 0, 0), record("fresh", 1, 0, 3500)].into_iter().map(|r| (r.id.clone(), r)).collect();
    let order = eviction_order(&records, &Protected::default());
    let hour = Duration::from_secs(3600);
    assert_eq!(old_images(&order, t(4000), t(0), hour), ["stale"]);
    assert!(old_images(&order, t(4000), t(1000), hour).is_empty(), "up for less than the maximum age");
    assert!(old_images(&order, t(4000), t(0), Duration::ZERO).is_empty(), "off");
}

#[test]
fn periodic_gc_is_off_only_at_100_percent_without_a_maximum_age_or_byte_threshold() {
    assert!(policy().periodic());
    let off = Policy { high_percent: 100, low_percent: 99, ..policy() };
    assert!(!off.periodic());
    assert!(Policy { max_age: Duration::from_secs(60), ..off.clone() }.periodic());
    assert!(Policy { high_bytes_free: Some(1), low_bytes_free: Some(2), ..off }.periodic());
}
