//! `ferrolet logs` and `ferrolet exec` (the built binary) against a real agent on the process
//! runtime: a pod whose container fails once, then writes enough to rotate its small log
//! file while `logs -f` follows it, and exits.

use crate::common;

use common::{ferrolet_bin, wait_for, AgentProcess, Sandbox};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `app` counts its runs in `count`. Run 1 prints two lines and fails; run 2 (restarted at
/// once: the first restart has no back-off) prints, waits for the test's `go` file, then
/// prints 150 lines (over 10 KiB: the 4 KiB log rotates at least twice) and completes, so
/// under OnFailure nothing runs after it. `helper` runs for exec.
fn web_manifest(work: &Path) -> String {
    let w = work.display();
    let app = format!(
        r#"n=$(cat {w}/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > {w}/count
echo "run $n start"; sleep 0.1; echo "run $n to stderr" >&2
if [ $n -eq 1 ]; then exit 1; fi
while [ ! -e {w}/go ]; do sleep 0.05; done
i=0; while [ $i -lt 150 ]; do i=$((i+1)); echo "run $n line $i with some padding to fill the log"; done
sleep 0.5; echo "run $n end""#
    );
    let quoted = serde_json::to_string(&app).unwrap();
    common::manifest(
        "web",
        &format!(
            "  restartPolicy: OnFailure\n  containers:\n  - name: app\n    image: busybox\n    command: [\"sh\", \"-c\", {quoted}]\n  - name: helper\n    image: busybox\n    command: [\"sh\", \"-c\", \"echo helper up; exec sleep 600\"]\n    env:\n    - name: GREETING\n      value: hello from helper\n"
        ),
    )
}

/// `ferrolet ARGS --config CONFIG`, with a deadline (a hung command fails the test).
fn ferrolet(config: &Path, args: &[&str]) -> Output {
    let mut child = Command::new(ferrolet_bin())
        .args(args)
        .arg("--config")
        .arg(config)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("ferrolet {args:?} did not end within 30 s: {:?}", child.wait_with_output().unwrap());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `ferrolet exec …` with `--config CONFIG` before the `--` of ARGS.
fn exec(config: &Path, args: &[&str]) -> Output {
    let dash = args.iter().position(|a| *a == "--").unwrap();
    let mut all: Vec<&str> = args[..dash].to_vec();
    all.extend(["--config", config.to_str().unwrap()]);
    all.extend(&args[dash..]);
    Command::new(ferrolet_bin()).args(&all).output().unwrap()
}

#[test]
fn logs_and_exec_reach_a_pods_containers_through_the_process_runtime() {
    let sb = Sandbox::new();
    let work = sb.work();
    sb.write_manifest("web.yaml", &common::sharing_dir(&web_manifest(&work), &work));
    let agent = AgentProcess::start_with(&sb, |t| format!("{t}[logs]\nmax_size = \"4Ki\"\nmax_files = 10\n"));
    let config = sb.dir.path().join("ferrolet.toml");
    let count = work.join("count");
    wait_for("run 2 of app", Duration::from_secs(20), || {
        (std::fs::read_to_string(&count).ok()?.trim() == "2").then_some(())
    });
    wait_for("run 2 to log its start", Duration::from_secs(10), || {
        let out = ferrolet(&config, &["logs", "web-testnode", "-c", "app"]);
        text(&out.stdout).contains("run 2 start").then_some(())
    });

    // -f while run 2 waits: it follows across the rotations and ends with the container.
    let follower = Command::new(ferrolet_bin())
        .args(["logs", "web-testnode", "-c", "app", "-f", "--config"])
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(work.join("go"), "").unwrap();
    let mut follower = follower;
    let status =
        wait_for("logs -f to end with the container", Duration::from_secs(10), || follower.try_wait().unwrap());
    let followed = follower.wait_with_output().unwrap();
    assert!(status.success(), "{status}: {}", text(&followed.stderr));
    let expected: Vec<String> = ["run 2 start".to_string(), "run 2 to stderr".to_string()]
        .into_iter()
        .chain((1..=150).map(|i| format!("run 2 line {i} with some padding to fill the log")))
        .chain(["run 2 end".to_string()])
        .collect();
    assert_eq!(text(&followed.stdout).lines().collect::<Vec<_>>(), expected, "every line once, in order");
    let log_dir = sb.state().join("logs");
    let rotated = wait_for("the rotated files", Duration::from_secs(1), || {
        let files: Vec<_> = walk(&log_dir).into_iter().filter(|p| p.to_string_lossy().contains(".log.")).collect();
        (files.len() >= 2).then_some(files)
    });
    assert!(rotated.len() >= 2, "{rotated:?}");

    // The whole log again, from the rotated files on; the notice names both containers.
    let out = ferrolet(&config, &["logs", "web-testnode"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().collect::<Vec<_>>(), expected);
    assert_eq!(text(&out.stderr).trim(), r#"Defaulted container "app" out of: app, helper"#);

    let out = ferrolet(&config, &["logs", "web-testnode", "-c", "app", "--tail", "2", "--timestamps"]);
    let lines: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    let (ts, rest) = lines[1].split_once(' ').unwrap();
    assert!(ferrolet::base::timefmt::parse_rfc3339(ts).is_some(), "{ts}");
    assert_eq!(rest, "run 2 end");
    assert!(lines[0].ends_with(" run 2 line 150 with some padding to fill the log"), "{}", lines[0]);

    let out = ferrolet(&config, &["logs", "web-testnode", "-c", "app", "--previous"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "run 1 start\nrun 1 to stderr\n");
    let out = ferrolet(&config, &["logs", "web-testnode", "-c", "helper", "-p"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr).trim(),
        r#"error: previous terminated container "helper" in pod "web-testnode" not found"#
    );
    let out = ferrolet(&config, &["logs", "web"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr)
            .contains(r#"pod "web" not found in namespace "default" (pods with containers: default/web-testnode)"#),
        "{}",
        text(&out.stderr)
    );
    let out = ferrolet(&config, &["logs", "web-testnode", "-c", "db"]);
    assert!(
        text(&out.stderr).contains(r#"container "db" not found in pod "web-testnode" (its containers: app, helper)"#)
    );

    // exec: both streams, the command's exit code, the container's environment.
    let out =
        exec(&config, &["exec", "web-testnode", "-c", "helper", "--", "sh", "-c", "echo out; echo err >&2; exit 7"]);
    assert_eq!((text(&out.stdout), text(&out.stderr), out.status.code()), ("out\n".into(), "err\n".into(), Some(7)));
    let out = exec(&config, &["exec", "web-testnode", "-c", "helper", "--", "sh", "-c", "echo $GREETING"]);
    assert_eq!((text(&out.stdout), out.status.code()), ("hello from helper\n".into(), Some(0)));
    let out = exec(&config, &["exec", "web-testnode", "-c", "helper", "--timeout", "1s", "--", "sleep", "30"]);
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("ran past its timeout of 1s"), "{}", text(&out.stderr));
    let out = exec(&config, &["exec", "web-testnode", "-c", "app", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr)
            .contains(r#"container "app" in pod "web-testnode" is not running (exited with code 0: Completed)"#),
        "{}",
        text(&out.stderr)
    );

    // Nothing of the agent's was disturbed: the pod still runs its helper, and the agent's
    // log has no warning from the commands.
    let pod = agent.pod("web").unwrap();
    assert_eq!(common::container(&pod, "helper").unwrap().restart_count, 0);
    assert!(!agent.log_text().contains("already running"), "a start was disturbed");
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.extend(walk(&e.path()));
            } else {
                out.push(e.path());
            }
        }
    }
    out
}
