//! Hostile input (issue 10): special files, huge files, configuration values past their
//! bounds, duplicate pods and names that try to forge log lines. Each is refused with a
//! clear message, by `ferrolet validate` and the agent alike, and never hangs or
//! exhausts anything.

#![allow(clippy::disallowed_methods)] // decoding JSON as it likes (clippy.toml)

mod common;

use common::{manifest, AgentProcess, Sandbox};
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a finished child process did.
struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    /// Peak resident memory in KiB, from the kernel's accounting of this child alone.
    max_rss_kib: i64,
}

/// Runs `ferrolet ARGS`, killing it (and failing) if it takes longer than `timeout`.
// The child is reaped by wait4 (for its own rusage), which clippy cannot see.
#[allow(clippy::zombie_processes)]
fn ferrolet(args: &[&std::ffi::OsStr], timeout: Duration) -> Outcome {
    let mut child =
        Command::new(common::ferrolet_bin()).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // Read both pipes on threads so a chatty child cannot block on a full pipe.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let pid = child.id() as i32;
    let deadline = Instant::now() + timeout;
    let (status, usage) = loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waiting for our own child with valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break (status, usage);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ferrolet {args:?} did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    Outcome { code, stdout: t_out.join().unwrap(), stderr: t_err.join().unwrap(), max_rss_kib: usage.ru_maxrss }
}

fn validate(files: &[&Path]) -> Outcome {
    let mut args: Vec<&std::ffi::OsStr> = vec!["validate".as_ref()];
    args.extend(files.iter().map(|f| f.as_os_str()));
    ferrolet(&args, Duration::from_secs(20))
}

const POD: &str = "  containers:\n  - name: app\n    image: busybox\n    command: [sleep, '3600']\n";

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo {}", path.display());
}

#[test]
fn validate_refuses_fifos_sockets_devices_and_directories_without_blocking() {
    let sb = Sandbox::new();
    let m = sb.manifests();
    mkfifo(&m.join("fifo.yaml"));
    let _socket = std::os::unix::net::UnixListener::bind(m.join("sock.yaml")).unwrap();
    std::fs::create_dir(m.join("dir.yaml")).unwrap();
    std::os::unix::fs::symlink(m.join("fifo.yaml"), m.join("link-to-fifo.yaml")).unwrap();
    std::os::unix::fs::symlink("/dev/null", m.join("device.yaml")).unwrap();
    sb.write_manifest("good.yaml", &manifest("good", POD));
    let outside = sb.dir.path().join("linked.yaml");
    std::fs::write(&outside, manifest("linked", POD)).unwrap();
    std::os::unix::fs::symlink(&outside, m.join("link-to-good.yaml")).unwrap();

    let named: Vec<_> =
        ["fifo", "sock", "dir", "link-to-fifo", "device"].iter().map(|n| m.join(format!("{n}.yaml"))).collect();
    let out = validate(&named.iter().map(|p| p.as_path()).collect::<Vec<_>>());
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    for (file, kind) in [
        ("fifo", "a FIFO"),
        ("sock", "a socket"),
        ("dir", "a directory"),
        ("link-to-fifo", "a FIFO"),
        ("device", "a character device"),
    ] {
        let want = format!(
            "{}: {kind}, not a regular file: only regular files (or links to them) are read",
            m.join(format!("{file}.yaml")).display()
        );
        assert!(out.stderr.lines().any(|l| l == want), "want {want}\nstderr:\n{}", out.stderr);
    }

    // The whole directory: the same files are skipped with a warning, as the agent skips them.
    let dir_flag = ["validate".as_ref(), "--manifest-dir".as_ref(), m.as_os_str()];
    let out = ferrolet(&dir_flag, Duration::from_secs(20));
    assert_eq!(out.code, Some(0), "stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert_eq!(out.stdout.matches(": warning: skipped: ").count(), 5, "{}", out.stdout);
    assert!(out.stdout.contains("good.yaml: ok (good-"), "{}", out.stdout);
    assert!(out.stdout.contains("link-to-good.yaml: ok (linked-"), "{}", out.stdout);
}

/// 50,000 nested `[` (97 KB): libyaml looks at every open level at every token, so this
/// once held `validate` (and the agent's manifest thread) for 76 s. Refused before parsing.
#[test]
fn deeply_nested_yaml_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let deep = dir.path().join("deep.yaml");
    std::fs::write(&deep, format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: deep}}\nspec: {}", "[".repeat(50_000)))
        .unwrap();
    let out = validate(&[&deep]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("Too deep: flow collections ([ or {) nested more than 1000 levels; a pod needs a handful"),
        "{}",
        out.stderr
    );
}

#[test]
fn manifest_files_over_10_mib_are_refused_without_being_read() {
    let sb = Sandbox::new();
    let big = sb.manifests().join("big.yaml");
    // Sparse: 200 MiB on paper, nothing on disk.
    std::fs::File::create(&big).unwrap().set_len(200 << 20).unwrap();
    let out = validate(&[&big]);
    assert_eq!(out.code, Some(1));
    assert_eq!(
        out.stderr.trim_end(),
        format!(
            "{}: file is 209715200 bytes; a manifest file may have at most 10485760 bytes (10 MiB, kubelet's limit for static pod files)",
            big.display()
        )
    );
    assert!(out.max_rss_kib < 30 << 10, "validate peaked at {} KiB", out.max_rss_kib);

    // Within the size limit, a document of millions of tiny nodes is refused before the
    // YAML parser holds them all (665 MB for this one before).
    let flat = sb.manifests().join("flat.yaml");
    std::fs::write(&flat, format!("kind: Pod\nspec:\n  containers: [{}1]\n", "1,".repeat(5_000_000))).unwrap();
    let out = validate(&[&flat]);
    assert_eq!(out.code, Some(1));
    assert_eq!(
        out.stderr.trim_end(),
        format!("{}: Too long: more than 250000 YAML nodes in one document; a pod within the object size limit has far fewer", flat.display())
    );
    assert!(out.max_rss_kib < 60 << 10, "validate peaked at {} KiB", out.max_rss_kib);

    // The same nodes split into 5000 documents, each far below the per-document bound, and
    // a file of 250,000 problems: documents are decoded one at a time and only the
    // reported problems kept (390 MB and 234 MB before).
    let doc = format!("x: [{}1]\n", "1,".repeat(1000));
    std::fs::write(&flat, vec![doc; 5000].join("---\n")).unwrap();
    let out = validate(&[&flat]);
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.trim_end().ends_with("… and 4800 more problem(s)"), "{}", out.stderr);
    assert!(out.max_rss_kib < 60 << 10, "validate peaked at {} KiB", out.max_rss_kib);
    let names: String = (0..60).map(|i| format!("  - {{name: B_{i}, image: x}}\n")).collect();
    let doc = format!("kind: Pod\nmetadata: {{name: p}}\nspec:\n  containers:\n{names}");
    std::fs::write(&flat, vec![doc; 5000].join("---\n")).unwrap();
    let out = validate(&[&flat]);
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.trim_end().ends_with("… and 254800 more problem(s)"), "{}", out.stderr);
    assert!(out.max_rss_kib < 60 << 10, "validate peaked at {} KiB", out.max_rss_kib);

    // Exactly at the limit is read (and rejected for its content, not its size).
    std::fs::File::create(&big).unwrap().set_len(10 << 20).unwrap();
    let out = validate(&[&big]);
    assert_eq!(out.code, Some(1));
    assert!(!out.stderr.contains("at most 10485760 bytes"), "{}", out.stderr);
}

#[test]
fn config_values_past_their_bounds_are_refused_by_validate() {
    let sb = Sandbox::new();
    let cases = [
        (
            "sync_frequency = \"99999999999999999999h\"\n",
            "sync_frequency: invalid duration \"99999999999999999999h\": too long to represent",
        ),
        ("sync_frequency = \"2h\"\n", "sync_frequency: invalid value 7200s: must be at most 3600s"),
        (
            "[events]\nqueue_size = 100000000000\n",
            "events.queue_size: invalid value 100000000000: must be at most 100000",
        ),
        (
            "[events]\nlru_cache_size = 100000000000\n",
            "events.lru_cache_size: invalid value 100000000000: must be at most 100000",
        ),
        (
            "[events]\nstore_max_events = 100000000000\n",
            "events.store_max_events: invalid value 100000000000: must be at most 100000",
        ),
        (
            "[logs]\nmax_size = \"1Ei\"\n",
            "logs.max_size: invalid value 1152921504606846976: must be at most 10737418240",
        ),
        ("[prober]\nmax_threads = 100000\n", "prober.max_threads: invalid value 100000: must be between 1 and 64"),
        (
            "[cgroups]\npod_pids_limit = 99999999\n",
            "cgroups.pod_pids_limit: invalid value 99999999: must be at most 4194304",
        ),
        (
            "[cgroups]\nsystem_reserved = { memory = \"1e30\" }\n",
            "cgroups.system_reserved.memory: invalid value \"1e30\": must be at most 1125899906842624",
        ),
        (
            "[devices]\nendpoint_grace_period = \"1000h\"\n",
            "devices.endpoint_grace_period: invalid value 3600000s: must be at most 86400s",
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let cfg = sb.dir.path().join(format!("c{i}.toml"));
        std::fs::write(&cfg, text).unwrap();
        let out = ferrolet(&["validate".as_ref(), "--config".as_ref(), cfg.as_os_str()], Duration::from_secs(20));
        assert_eq!(out.code, Some(1), "{text}: {}", out.stderr);
        let want = format!("error: {}: {want}", cfg.display());
        assert!(out.stderr.starts_with(&want), "config:\n{text}\nwant: {want}\ngot:  {}", out.stderr);
    }
}

#[test]
fn validate_refuses_what_run_refuses_state_dir_and_listen_address() {
    let sb = Sandbox::new();
    let file = sb.dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let cases = [
        (
            format!("state_dir = {:?}\n", file.join("state")),
            format!("state_dir: {} exists and is not a directory", file.display()),
        ),
        (format!("state_dir = {:?}\n", file), format!("state_dir: {} exists and is not a directory", file.display())),
        // Root may write /proc as access(2) sees it; run cannot make a directory there.
        (
            "state_dir = \"/proc/ferrolet-state\"\n".to_string(),
            "state_dir: /proc is on the kernel's proc filesystem, where no state can be kept".to_string(),
        ),
        (
            format!("[devices]\nplugin_dir = {:?}\n", file.join("plugins")),
            format!("devices.plugin_dir: {} exists and is not a directory", file.display()),
        ),
        (
            format!("[cgroups]\nenforcement = \"required\"\nmountinfo = {:?}\n", file.join("mountinfo")),
            "cgroups.enforcement: resource enforcement is required but cgroups cannot be used: ".to_string(),
        ),
        // TEST-NET-1 (RFC 5737): never an address of this machine.
        (
            "[api]\nlisten = \"192.0.2.1:10255\"\n".to_string(),
            "api.listen: invalid value \"192.0.2.1:10255\": 192.0.2.1 is not an address of this machine".to_string(),
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let cfg = sb.dir.path().join(format!("c{i}.toml"));
        let text = format!("manifest_dir = {:?}\n{text}", sb.manifests());
        let text = if text.contains("state_dir") { text } else { format!("state_dir = {:?}\n{text}", sb.state()) };
        std::fs::write(&cfg, &text).unwrap();
        let want = format!("{}: {want}", cfg.display());
        let out = ferrolet(&["validate".as_ref(), "--config".as_ref(), cfg.as_os_str()], Duration::from_secs(20));
        assert_eq!(out.code, Some(1), "{text}");
        assert!(out.stderr.starts_with(&want), "validate, config:\n{text}\nwant: {want}\ngot:  {}", out.stderr);
        // `run` refuses it with the same words, before starting anything.
        let out = ferrolet(&["run".as_ref(), "--config".as_ref(), cfg.as_os_str()], Duration::from_secs(20));
        assert_eq!(out.code, Some(1), "{text}");
        assert!(
            out.stderr.contains(&format!("error: {want}")),
            "run, config:\n{text}\nwant: {want}\ngot:  {}",
            out.stderr
        );
    }
    // A good configuration still says ok.
    let cfg = sb.dir.path().join("good.toml");
    std::fs::write(&cfg, format!("state_dir = {:?}\nmanifest_dir = {:?}\n", sb.state(), sb.manifests())).unwrap();
    let out = ferrolet(&["validate".as_ref(), "--config".as_ref(), cfg.as_os_str()], Duration::from_secs(20));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

#[test]
fn validate_prints_every_problem_of_every_file_on_its_own_line() {
    let sb = Sandbox::new();
    let spec = "  restartPolicy: Sometimes\n  containers:\n  - name: app\n    image: busybox\n    ports:\n    - containerPort: eighty\n    livenessProbe:\n      exec:\n        command: [/bin/true]\n      periodSeconds: ten\n";
    sb.write_manifest("a.yaml", &manifest("Bad", spec));
    sb.write_manifest(
        "b.yaml",
        &format!("{}---\n{}", manifest("x", "  containers: nope\n"), manifest("y", "  containers: []\n")),
    );
    let m = sb.manifests();
    let out = validate(&[&m.join("a.yaml"), &m.join("b.yaml")]);
    assert_eq!(out.code, Some(1));
    let (a, b) = (m.join("a.yaml").display().to_string(), m.join("b.yaml").display().to_string());
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(
        lines,
        vec![
            format!("{a}: spec.containers[0].ports[0].containerPort: invalid type: string \"eighty\", expected i64"),
            format!("{a}: spec.containers[0].livenessProbe.periodSeconds: invalid type: string \"ten\", expected i32"),
            format!("{a}: metadata.name: Invalid value: \"Bad\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"),
            format!("{a}: spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""),
            format!("{b}: document 1: spec.containers: invalid type: string \"nope\", expected a sequence"),
            format!("{b}: document 2: spec.containers: Required value"),
        ]
    );
}

#[test]
fn validate_reports_duplicate_pod_names_across_files_and_documents() {
    let sb = Sandbox::new();
    sb.write_manifest("a.yaml", &manifest("web", POD));
    sb.write_manifest("b.yaml", &format!("{}---\n{}", manifest("other", POD), manifest("other", POD)));
    sb.write_manifest("c.yaml", &manifest("web", POD));
    let m = sb.manifests();
    // Given in another order: the first in file name order is the one that runs.
    let out = validate(&[&m.join("c.yaml"), &m.join("b.yaml"), &m.join("a.yaml")]);
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    let node = ferrolet::base::net::hostname().to_lowercase();
    let (a, b, c) = (m.join("a.yaml"), m.join("b.yaml"), m.join("c.yaml"));
    assert_eq!(
        out.stderr.lines().collect::<Vec<_>>(),
        vec![
            format!("{}: metadata.name: Duplicate value: pod \"default/other-{node}\" is already defined in {}; the agent runs only the first", b.display(), b.display()),
            format!("{}: metadata.name: Duplicate value: pod \"default/web-{node}\" is already defined in {}; the agent runs only the first", c.display(), a.display()),
        ]
    );
}

#[test]
fn log_lines_cannot_be_forged_through_file_names() {
    let sb = Sandbox::new();
    let name = "x\nINFO forged line.yaml";
    sb.write_manifest(name, &manifest("Bad", POD));
    let out = validate(&[&sb.manifests().join(name)]);
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("x\\nINFO forged line.yaml: metadata.name: Invalid value: \"Bad\""), "{}", out.stderr);
    assert!(!out.stderr.lines().any(|l| l.starts_with("INFO forged")), "{}", out.stderr);
}

#[test]
fn the_agent_runs_the_first_of_duplicate_pods_and_refuses_huge_and_special_files() {
    let sb = Sandbox::new();
    let forged = "z\nINFO forged line.yaml";
    sb.write_manifest("a.yaml", &manifest("web", POD));
    sb.write_manifest("b.yaml", &manifest("web", &POD.replace("3600", "3601")));
    sb.write_manifest(forged, &manifest("solo", POD));
    mkfifo(&sb.manifests().join("fifo.yaml"));
    std::fs::File::create(sb.manifests().join("huge.yaml")).unwrap().set_len(200 << 20).unwrap();
    let agent = AgentProcess::start(&sb);
    let pod = common::wait_for("web to run", Duration::from_secs(20), || {
        agent.pod("web").filter(|p| common::container(p, "app").is_some_and(|c| c.state.running.is_some()))
    });
    let from = &pod.metadata.annotations[ferrolet::api::manifest::CONFIG_FILE_ANNOTATION];
    assert_eq!(from, &sb.manifests().join("a.yaml").display().to_string());
    common::wait_for("solo to run", Duration::from_secs(20), || agent.pod("solo"));
    let events = agent.get("/events").unwrap();
    let (a, b) = (sb.manifests().join("a.yaml"), sb.manifests().join("b.yaml"));
    let want = format!(
        "{}: metadata.name: Duplicate value: pod \"default/web-testnode\" is already defined in {}",
        b.display(),
        a.display()
    );
    let events: ferrolet::api::EventList = serde_json::from_str(&events).unwrap();
    assert!(
        events
            .items
            .iter()
            .any(|e| e.reason == "FailedValidation" && e.type_ == "Warning" && e.message.contains(&want)),
        "{:?}",
        events.items.iter().map(|e| &e.message).collect::<Vec<_>>()
    );
    let log = agent.log_text();
    // Said once, by the event log (which prints the message quoted).
    let logged = want.replace('"', "\\\"");
    assert_eq!(log.matches(&logged).count(), 1, "one error line per duplicate:\n{log}");
    assert!(log.contains("z\\nINFO forged line.yaml: 1 pod(s)"), "{log}");
    assert!(!log.lines().any(|l| l.starts_with("INFO forged")), "{log}");
    assert_eq!(log.matches("fifo.yaml: a FIFO, not a regular file").count(), 1, "{log}");
    assert_eq!(agent.pods().len(), 2);
    let huge = format!(
        "{}: file is 209715200 bytes; a manifest file may have at most 10485760 bytes",
        sb.manifests().join("huge.yaml").display()
    );
    assert!(log.contains(&huge), "{log}");
    assert!(events.items.iter().any(|e| e.reason == "FailedValidation" && e.message.contains(&huge)));
    // The agent never read the 200 MiB: its peak RSS stays far below it.
    let status = std::fs::read_to_string(format!("/proc/{}/status", agent.child.id())).unwrap();
    let peak_kib: u64 =
        status.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap().trim().trim_end_matches(" kB").parse().unwrap();
    assert!(peak_kib < 100 << 10, "agent peak RSS {peak_kib} KiB");
}

#[test]
fn a_config_file_that_is_a_fifo_or_too_large_is_refused_without_blocking() {
    let sb = Sandbox::new();
    let fifo = sb.dir.path().join("fifo.toml");
    mkfifo(&fifo);
    let out = ferrolet(&["validate".as_ref(), "--config".as_ref(), fifo.as_os_str()], Duration::from_secs(20));
    assert_eq!(out.code, Some(1));
    assert_eq!(
        out.stderr.trim_end(),
        format!(
            "error: cannot read config file {}: a FIFO, not a regular file: only regular files (or links to them) are read",
            fifo.display()
        )
    );
    let big = sb.dir.path().join("big.toml");
    std::fs::File::create(&big).unwrap().set_len(100 << 20).unwrap();
    let out = ferrolet(&["validate".as_ref(), "--config".as_ref(), big.as_os_str()], Duration::from_secs(20));
    assert_eq!(out.code, Some(1));
    assert_eq!(
        out.stderr.trim_end(),
        format!(
            "error: cannot read config file {}: file is 104857600 bytes; at most 1048576 bytes are allowed",
            big.display()
        )
    );
}

#[test]
fn pods_past_max_pods_are_refused_in_file_order() {
    let sb = Sandbox::new();
    for name in ["c", "a", "b"] {
        sb.write_manifest(&format!("{name}.yaml"), &manifest(name, POD));
    }
    let cfg = sb.dir.path().join("two.toml");
    std::fs::write(&cfg, format!("state_dir = {:?}\nmax_pods = 2\n", sb.state())).unwrap();
    let m = sb.manifests();
    let out = ferrolet(
        &["validate".as_ref(), "--config".as_ref(), cfg.as_os_str(), "--manifest-dir".as_ref(), m.as_os_str()],
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    let node = ferrolet::base::net::hostname().to_lowercase();
    assert_eq!(
        out.stderr.trim_end(),
        format!("{}: pod \"default/c-{node}\": Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2 (max_pods); the agent would refuse it", m.join("c.yaml").display())
    );

    let agent = AgentProcess::start_with(&sb, |text| text.replace("[api]", "max_pods = 2\n[api]"));
    common::wait_for("a and b to run", Duration::from_secs(20), || {
        (agent.pod("a").is_some() && agent.pod("b").is_some()).then_some(())
    });
    let want =
        format!("{}: pod \"default/c-testnode\": Node didn't have enough resource: pods", m.join("c.yaml").display());
    let events: ferrolet::api::EventList = common::wait_for("the OutOfpods event", Duration::from_secs(10), || {
        let list: ferrolet::api::EventList = serde_json::from_str(&agent.get("/events").ok()?).ok()?;
        list.items.iter().any(|e| e.reason == "OutOfpods" && e.message.contains(&want)).then_some(list)
    });
    assert!(!events.items.is_empty());
    assert_eq!(agent.pods().len(), 2);
    assert!(agent.pod("c").is_none());
    // Said once, by the event log, which quotes the message.
    let quoted = format!("{want:?}");
    assert_eq!(agent.log_text().matches(&quoted[1..quoted.len() - 1]).count(), 1);
}

/// A manifest of 10,000 containers is refused before any of them is built, and the memory
/// its reading took is given back (it once kept the agent at 64 MB from 11).
#[test]
fn a_refused_manifest_of_10000_containers_leaves_no_memory_behind() {
    let sb = Sandbox::new();
    sb.write_manifest("small.yaml", &manifest("small", POD));
    let agent = AgentProcess::start(&sb);
    common::wait_for("small to run", Duration::from_secs(20), || agent.pod("small"));
    let rss = |pid: u32| -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let before = rss(agent.child.id());
    let mut text = String::from("  containers:\n");
    for i in 0..10_000 {
        text.push_str(&format!("  - name: c{i}\n    image: busybox\n    command: [sleep, '3600']\n"));
    }
    sb.write_manifest("many.yaml", &manifest("many", &text));
    let events = common::wait_for("the refusal", Duration::from_secs(30), || {
        let events = agent.get("/events").unwrap();
        events.contains("Too many: 10000").then_some(events)
    });
    assert!(events.contains("must have at most 256 items"), "{events}");
    std::thread::sleep(Duration::from_secs(1));
    let after = rss(agent.child.id());
    eprintln!("RSS {before} KiB before, {after} KiB after the refusal");
    assert!(after < before + 8 * 1024, "RSS {before} KiB before, {after} KiB after the refusal");
    assert!(agent.pod("small").is_some() && agent.pod("many").is_none());
}
