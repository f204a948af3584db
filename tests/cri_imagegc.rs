//! Image garbage collection against a real containerd of each test's own (GC removes
//! images, so it must not see the images other tests run).
//!
//! The periodic pass: images of different sizes, one used by a running pod, one by an
//! exited container, one by another node's container on the same containerd, one unused;
//! thresholds that make every pass want more than there is. The unused image goes; the
//! used ones, the sandbox image and the kept one never; the shortfall event names exactly
//! the unused image's size; `/images` and `ferrolet get images` say why each is kept.
//!
//! The eviction manager's request (`DeleteUnused`), sent through the agent's own wiring
//! (`Agent::image_gc`) with the periodic pass off: the unused image goes at once and the
//! answer is its size. Without the harness the tests skip with the reason.

use crate::common;

use common::cri::{CriNode, OwnContainerd};
use common::{container, ferrolet_bin, manifest, wait_for};
use ferrolet::agent::Agent;
use ferrolet::api::EventList;
use ferrolet::config::Config;
use ferrolet::node::imagegc::DeleteUnusedError;
use std::io::Write;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// Builds `name` (busybox and `extra` bytes of data that do not compress) and imports it.
fn image(containerd: &OwnContainerd, dir: &std::path::Path, name: &str, extra: usize) {
    let data = dir.join(format!("{}.bin", name.replace(['/', ':'], "_")));
    let mut f = std::fs::File::create(&data).unwrap();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ extra as u64;
    let mut buf = Vec::with_capacity(extra);
    while buf.len() < extra {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf.extend_from_slice(&x.to_le_bytes());
    }
    f.write_all(&buf[..extra]).unwrap();
    let tar = dir.join(format!("{}.tar", name.replace(['/', ':'], "_")));
    let out = std::process::Command::new("python3")
        .arg(format!("{}/tests/cri/mkimage.py", env!("CARGO_MANIFEST_DIR")))
        .args(["--name", name, "--busybox", "/bin/busybox", "--cmd", "/bin/sh", "--out"])
        .arg(&tar)
        .arg("--file")
        .arg(format!("{}:/data.bin", data.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "mkimage: {}", String::from_utf8_lossy(&out.stderr));
    containerd.import(&tar);
}

#[test]
fn gc_removes_the_unused_image_and_never_one_in_use_the_sandbox_image_or_a_kept_one() {
    if common::cri::endpoint().is_none() {
        return;
    }
    let containerd = OwnContainerd::start();
    let Some(node) = CriNode::on(containerd.endpoint()) else { return };
    let dir = node.sb.work();
    image(&containerd, &dir, "localhost/gc-running:1", 1 << 20);
    image(&containerd, &dir, "localhost/gc-exited:1", 3 << 20);
    image(&containerd, &dir, "localhost/gc-unused:1", 6 << 20);
    image(&containerd, &dir, "localhost/gc-foreign:1", 2 << 20);
    // Another node's container on the same containerd (this agent does not list it): its
    // image is in use all the same.
    let other = ferrolet::node::runtime::cri::CriRuntime::new(
        common::cri::client(&containerd.endpoint()),
        "localhost/pause:catatonit",
        "another-node",
        &ferrolet::base::manager::Health::default(),
    );
    let foreign = common::cri::TestPod::run(&other, "foreign");
    foreign.start(&ferrolet::node::runtime::ContainerConfig {
        image: "localhost/gc-foreign:1".into(),
        ..foreign.config("app", 0, &["sleep", "3600"])
    });
    let client = common::cri::client(&containerd.endpoint());
    let size_of = |name: &str| {
        let listed = client.list_images().unwrap();
        listed.iter().find(|i| i.repo_tags().iter().any(|t| t == name)).map(|i| i.size())
    };
    let unused = size_of("localhost/gc-unused:1").expect("imported");
    // What the image filesystem holds, once containerd's usage sync (every 10 s) settled.
    let used = || {
        let info = client.image_fs_info().unwrap();
        info.image_filesystems().iter().map(|f| f.used_bytes().value()).sum::<u64>()
    };
    let mut before = used();
    for _ in 0..8 {
        std::thread::sleep(Duration::from_secs(5));
        let now = used();
        if now == before && now > 0 {
            break;
        }
        before = now;
    }
    node.sb.write_manifest(
        "run.yaml",
        &manifest(
            "run",
            "  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    image: localhost/gc-running:1\n    imagePullPolicy: Never\n    command: [sleep, '3600']\n",
        ),
    );
    node.sb.write_manifest(
        "done.yaml",
        &manifest(
            "done",
            "  hostNetwork: true\n  restartPolicy: Never\n  containers:\n  - name: job\n    image: localhost/gc-exited:1\n    imagePullPolicy: Never\n    command: ['true']\n",
        ),
    );
    // Every pass wants more than there is (high 1 %, low 0 %), every 2 s; images count as
    // old after 1 s; busybox (which the harness's pods share) is kept by name.
    let agent = node.start_with(
        |text| {
            let gc = "image_gc_high_threshold_percent = 1\nimage_gc_low_threshold_percent = 0\nimage_minimum_gc_age = \"1s\"\nimage_gc_period = \"2s\"\nimage_gc_keep = [\"localhost/busybox:latest\"]\n";
            format!("{gc}{text}")
        },
        "info",
    );
    wait_for("one pod running, one done", WAIT, || {
        let run = node.pod(&agent, "run")?;
        let done = node.pod(&agent, "done")?;
        let running = container(&run, "app")?.state.running.is_some();
        let exited = container(&done, "job")?.state.terminated.is_some();
        (running && exited).then_some(())
    });
    let want = format!("but only found {unused} bytes eligible to free.");
    let event = wait_for("the shortfall with the unused image's size", WAIT, || {
        let events: EventList = serde_json::from_str(&agent.get("/events").unwrap()).unwrap();
        events.items.into_iter().find(|e| e.reason == "FreeDiskSpaceFailed" && e.message.ends_with(&want))
    });
    assert_eq!(event.type_, "Warning");
    wait_for("the unused image removed", WAIT, || size_of("localhost/gc-unused:1").is_none().then_some(()));
    // The bytes freed are the image's, as the runtime's own ImageFsInfo counts them (its
    // unpacked layer; the containers' writable layers add a little).
    let after = wait_for("ImageFsInfo to count the removal", WAIT, || {
        let now = used();
        (now + unused * 9 / 10 <= before).then_some(now)
    });
    eprintln!("ImageFsInfo: {before} -> {after} bytes used ({} freed); the image: {unused} bytes", before - after);
    assert!(before - after <= unused * 11 / 10, "freed {} bytes for an image of {unused}", before - after);
    for kept in
        ["localhost/gc-running:1", "localhost/gc-exited:1", "localhost/busybox:latest", "localhost/pause:catatonit"]
    {
        assert!(size_of(kept).is_some(), "{kept} was removed");
    }
    // Why each is kept, as the API and the CLI say it.
    let images: serde_json::Value = serde_json::from_str(&agent.get("/images").unwrap()).unwrap();
    let why = |name: &str| {
        images["images"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["tags"].as_array().unwrap().iter().any(|t| t == name))
            .map(|i| i["kept"].as_str().unwrap_or("").to_string())
    };
    assert_eq!(why("localhost/gc-running:1").as_deref(), Some("in use"));
    assert_eq!(why("localhost/gc-exited:1").as_deref(), Some("in use"), "an exited container's image is in use");
    assert_eq!(why("localhost/gc-foreign:1").as_deref(), Some("in use"), "another node's container's image is in use");
    assert_eq!(why("localhost/busybox:latest").as_deref(), Some("on image_gc_keep"));
    assert_eq!(why("localhost/pause:catatonit").as_deref(), Some("sandbox image"));
    assert_eq!(why("localhost/gc-unused:1"), None, "gone from the list");
    let table = agent.cli(&["get", "images"]);
    assert!(table.lines().any(|l| l.starts_with("localhost/gc-exited:1") && l.ends_with("kept: in use")), "{table}");
    let metrics = agent.get("/metrics").unwrap();
    assert!(metrics.contains("kubelet_image_garbage_collected_total{reason=\"space\"} 1"), "{metrics}");
    assert!(metrics.contains("ferrolet_imagefs_capacity_bytes "), "{metrics}");
    // Once the unused image is gone nothing is eligible: said once more, then not at every
    // pass while that stays so (a pass every tick, 2 s).
    agent.wait_metric_growth("ferrolet_manager_ticks_total{manager=\"fl-imagegc\"}", 3);
    let events: EventList = serde_json::from_str(&agent.get("/events").unwrap()).unwrap();
    let shortfalls: Vec<(String, i32)> = events
        .items
        .iter()
        .filter(|e| e.reason == "FreeDiskSpaceFailed")
        .map(|e| (e.message.split(", but ").nth(1).unwrap_or_default().to_string(), e.count))
        .collect();
    assert_eq!(
        shortfalls,
        [
            (format!("only found {unused} bytes eligible to free."), 1),
            ("only found 0 bytes eligible to free.".to_string(), 1)
        ]
    );
    let failed = events.items.iter().find(|e| e.reason == "ImageGCFailed").expect("two failed passes in a row");
    assert!(failed.message.contains("eligible to free"), "{}", failed.message);
    for name in ["run", "done"] {
        node.own(&node.pod(&agent, name).unwrap().metadata.uid);
    }
}

#[test]
fn the_eviction_managers_request_removes_every_unused_image_at_once_and_answers_its_size() {
    if common::cri::endpoint().is_none() {
        return;
    }
    let containerd = OwnContainerd::start();
    let Some(node) = CriNode::on(containerd.endpoint()) else { return };
    let dir = node.sb.work();
    image(&containerd, &dir, "localhost/du-running:1", 1 << 20);
    image(&containerd, &dir, "localhost/du-unused:1", 4 << 20);
    let client = common::cri::client(&containerd.endpoint());
    let size_of = |name: &str| {
        let listed = client.list_images().unwrap();
        listed.iter().find(|i| i.repo_tags().iter().any(|t| t == name)).map(|i| i.size())
    };
    let unused = size_of("localhost/du-unused:1").expect("imported");
    node.sb.write_manifest(
        "run.yaml",
        &manifest(
            "run",
            "  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    image: localhost/du-running:1\n    imagePullPolicy: Never\n    command: [sleep, '3600']\n",
        ),
    );
    // No periodic pass (high 100, no maximum age): only the request removes anything.
    let gc = "image_gc_high_threshold_percent = 100\nimage_gc_low_threshold_percent = 80\nimage_minimum_gc_age = \"1s\"\nimage_gc_keep = [\"localhost/busybox:latest\"]\n";
    let cfg = Config::parse("cri.toml", &format!("{gc}{}", node.config_text())).unwrap();
    let agent = Agent::start(&cfg, &ferrolet_bin()).unwrap();
    let requests = agent.image_gc().expect("image GC runs on the CRI runtime");
    let name = format!("run-{}", node.node);
    let uid = wait_for("the pod running", WAIT, || {
        let pod = agent.statuses.list().pods().find(|p| p.metadata.name == name)?;
        container(&pod, "app")?.state.running.is_some().then(|| pod.metadata.uid.clone())
    });
    node.own(&uid);
    // The first request may be the first detection: an image seen for less than
    // image_minimum_gc_age stays. A second, later one finds it old enough.
    let first = requests.delete_unused(WAIT).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    let second = requests.clone().delete_unused(WAIT).unwrap();
    assert_eq!(first + second, unused, "the answers are the unused image's size ({first} + {second})");
    assert_eq!(size_of("localhost/du-unused:1"), None, "removed");
    for kept in ["localhost/du-running:1", "localhost/busybox:latest", "localhost/pause:catatonit"] {
        assert!(size_of(kept).is_some(), "{kept} was removed");
    }
    assert_eq!(requests.delete_unused(WAIT).unwrap(), 0, "nothing unused is left");
    let late = agent.stop();
    assert!(late.is_empty(), "{late:?}");
    let e = requests.delete_unused(WAIT).unwrap_err();
    assert!(matches!(e, DeleteUnusedError::NotRunning), "{e:?}");
}
