//! `make soak DURATION=1h`: the release agent under churn for a long time, not part of
//! `make test`. Pods are created, changed and removed every few seconds; containers crash
//! in a loop; probes fail and flap; a device plugin crashes and registers again every
//! minute; twenty failing readiness probes make an event storm. Every 30 s it samples the
//! agent's RSS, open fds, threads, the state directory's size and events.log's size into a
//! CSV, draws them in an SVG, and fails when any of them still grows over the last half of
//! the run. With `fatrace` (Debian's package; `make soak` installs it) it also checks that
//! the agent and its shims (which run the soak's own copy of the binary, `flsoak<pid>`, a
//! command name nothing else has) write nothing outside their state directory (logs
//! included), the plugin directory, the cgroup tree and their lock directory.

mod support;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::common::plugin::{Behaviour, TestPlugin};
use support::common::{manifest, AgentProcess, Sandbox};

/// What is sampled, with the growth over the last half that counts as "without bound".
const SERIES: [(&str, f64); 5] =
    [("rss_kib", 1024.0), ("fds", 16.0), ("threads", 8.0), ("state_bytes", 1048576.0), ("events_log_bytes", 262144.0)];

fn main() {
    let duration = env_duration("FERROLET_SOAK_DURATION", Duration::from_secs(600));
    let every = env_duration("FERROLET_SOAK_SAMPLE", Duration::from_secs(30));
    let out = PathBuf::from(std::env::var("FERROLET_SOAK_OUT").unwrap_or_else(|_| "target/soak".into()));
    std::fs::create_dir_all(&out).unwrap();
    let sb = Sandbox::new();
    for (name, spec) in fixed_pods() {
        sb.write_manifest(&format!("{name}.yaml"), &manifest(name, &spec));
    }
    let cfg = sb.dir.path().join("ferrolet.toml");
    let port = support::common::free_port();
    std::fs::write(&cfg, sb.config_text(port)).unwrap();
    // The agent runs from a copy named for this soak: it and its shims (which execute the
    // same file) have a command name no other process on the machine has, which is how
    // fatrace's lines are told apart (a pid alone is reused within an hour).
    let name = format!("flsoak{}", std::process::id());
    let bin = sb.dir.path().join(&name);
    std::fs::copy(support::bin(), &bin).unwrap();
    let mut cmd = Command::new(&bin);
    cmd.args(["run", "--config"]).arg(&cfg);
    let agent =
        AgentProcess::spawn_command(cmd, port, "info", sb.dir.path().join("agent.log"), Duration::from_millis(100));
    let pid = agent.child.id();
    let writes = Fatrace::start();
    println!(
        "soak: {} as {} for {duration:?}, a sample every {every:?} (pid {pid}, state in {})",
        support::bin().display(),
        bin.display(),
        sb.state().display()
    );

    let mut csv = String::from("seconds,rss_kib,fds,threads,state_bytes,events_log_bytes\n");
    let mut rows: Vec<[f64; 6]> = Vec::new();
    let mut plugin = Some(start_plugin(&sb.plugin_dir()));
    let start = Instant::now();
    let (mut next_sample, mut next_churn, mut next_crash) = (start, start, start + Duration::from_secs(60));
    let mut round = 0u64;
    while start.elapsed() < duration {
        let now = Instant::now();
        if now >= next_churn {
            churn(&sb, round);
            round += 1;
            next_churn += Duration::from_secs(3);
        }
        if now >= next_crash {
            // The plugin dies (its socket goes with it), then comes back and registers.
            drop(plugin.take());
            std::thread::sleep(Duration::from_millis(500));
            plugin = Some(start_plugin(&sb.plugin_dir()));
            next_crash += Duration::from_secs(60);
        }
        if now >= next_sample {
            let row = sample(pid, &sb.state(), start.elapsed());
            let _ = writeln!(csv, "{:.0},{},{},{},{},{}", row[0], row[1], row[2], row[3], row[4], row[5]);
            println!(
                "{:>6.0}s rss {:>6} KiB  fds {:>4}  threads {:>3}  state {:>9} B  events.log {:>8} B",
                row[0], row[1], row[2], row[3], row[4], row[5]
            );
            rows.push(row);
            std::fs::write(out.join("soak.csv"), &csv).unwrap();
            next_sample += every;
        }
        if agent.child.id() != pid || !alive(pid) {
            panic!("the agent died; its log: {}", agent.log.display());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(plugin);
    std::fs::write(out.join("soak.svg"), svg(&rows)).unwrap();
    println!("soak: {} and {}", out.join("soak.csv").display(), out.join("soak.svg").display());
    let mut failed = false;
    for (i, (name, bound)) in SERIES.iter().enumerate() {
        let growth = growth_over_last_half(&rows, i + 1);
        let verdict = if growth > *bound { "GROWS" } else { "flat" };
        failed |= growth > *bound;
        println!("soak: {name:<17} grew {growth:>12.0} over the last half (bound {bound:.0}): {verdict}");
    }
    if let Some(w) = writes {
        let outside = w.outside(
            &name,
            &[
                sb.dir.path().to_path_buf(),
                PathBuf::from("/sys/fs/cgroup"),
                PathBuf::from(ferrolet::node::cm::ownership::LOCK_DIR),
            ],
        );
        println!("soak: writes by the agent and its shims outside their directories: {}", outside.len());
        for line in outside.iter().take(20) {
            println!("  {line}");
        }
        failed |= !outside.is_empty();
    } else {
        println!("soak: fatrace not found; the check of where the agent writes was not made");
    }
    // The agent, then its pods (the sandbox's), before the exit code is decided.
    drop(agent);
    drop(sb);
    if failed {
        eprintln!("soak: FAILED");
        std::process::exit(1);
    }
    println!("soak: passed");
}

fn env_duration(key: &str, default: Duration) -> Duration {
    std::env::var(key).ok().and_then(|v| ferrolet::base::timefmt::parse_duration(&v).ok()).unwrap_or(default)
}

/// The pods that stay: crash loops, failing and flapping probes, an event storm.
fn fixed_pods() -> Vec<(&'static str, String)> {
    let container = |name: &str, extra: &str| {
        format!("  - name: {name}\n    image: x\n    command: [sh, -c, 'while :; do sleep 1; done']\n{extra}")
    };
    let probe = |kind: &str, cmd: &str| {
        format!("    {kind}:\n      exec:\n        command: [sh, -c, '{cmd}']\n      periodSeconds: 1\n      failureThreshold: 1\n")
    };
    let storm: String =
        (0..20).map(|i| container(&format!("c{i}"), &probe("readinessProbe", "exit 1"))).collect::<Vec<_>>().concat();
    vec![
        (
            "crashloop",
            "  containers:\n  - name: app\n    image: x\n    command: [sh, -c, 'sleep 1; exit 1']\n".to_string(),
        ),
        ("liveness", format!("  containers:\n{}", container("app", &probe("livenessProbe", "exit 1")))),
        (
            "flapping",
            format!(
                "  containers:\n{}",
                container("app", &probe("readinessProbe", "test $(( $(date +%s) / 10 % 2 )) -eq 0"))
            ),
        ),
        ("storm", format!("  containers:\n{storm}")),
    ]
}

/// One churn step: a pod created, one changed, one removed (ten names in turn).
fn churn(sb: &Sandbox, round: u64) {
    let name = |i: u64| format!("churn{}", i % 10);
    let spec = |v: u64| {
        format!("  terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    image: x\n    command: [sleep, '{}']\n", 3600 + v)
    };
    sb.write_manifest(&format!("{}.yaml", name(round)), &manifest(&name(round), &spec(0)));
    let changed = name(round + 3);
    if sb.manifests().join(format!("{changed}.yaml")).exists() {
        sb.write_manifest(&format!("{changed}.yaml"), &manifest(&changed, &spec(round)));
    }
    let _ = std::fs::remove_file(sb.manifests().join(format!("{}.yaml", name(round + 6))));
}

fn start_plugin(dir: &Path) -> TestPlugin {
    let p = TestPlugin::start(dir, "example.com/soak", "soak.sock", &["s0", "s1"], Behaviour::default());
    if let Err(e) = p.register() {
        println!("soak: the plugin could not register ({e}); it tries again at its next restart");
    }
    p
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn count(dir: &str) -> f64 {
    std::fs::read_dir(dir).map_or(0, |d| d.count()) as f64
}

fn dir_bytes(p: &Path) -> u64 {
    let Ok(md) = std::fs::symlink_metadata(p) else { return 0 };
    if !md.is_dir() {
        return md.len();
    }
    std::fs::read_dir(p).map_or(0, |d| d.flatten().map(|e| dir_bytes(&e.path())).sum())
}

fn sample(pid: u32, state: &Path, at: Duration) -> [f64; 6] {
    [
        at.as_secs_f64(),
        support::rss_kib(pid) as f64,
        count(&format!("/proc/{pid}/fd")),
        count(&format!("/proc/{pid}/task")),
        dir_bytes(state) as f64,
        std::fs::metadata(state.join("events.log")).map_or(0, |m| m.len()) as f64,
    ]
}

/// How much series `col` grew over the last half of the run, by its least-squares slope.
fn growth_over_last_half(rows: &[[f64; 6]], col: usize) -> f64 {
    let half = &rows[rows.len() / 2..];
    if half.len() < 3 {
        return 0.0;
    }
    let n = half.len() as f64;
    let (mx, my) = (half.iter().map(|r| r[0]).sum::<f64>() / n, half.iter().map(|r| r[col]).sum::<f64>() / n);
    let sxy: f64 = half.iter().map(|r| (r[0] - mx) * (r[col] - my)).sum();
    let sxx: f64 = half.iter().map(|r| (r[0] - mx).powi(2)).sum();
    let slope = if sxx == 0.0 { 0.0 } else { sxy / sxx };
    slope * (half[half.len() - 1][0] - half[0][0])
}

/// One panel a series, each scaled to its own range.
fn svg(rows: &[[f64; 6]]) -> String {
    let (w, h, pad) = (720.0, 130.0, 40.0);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
        h * SERIES.len() as f64 + 20.0
    );
    let t_max = rows.last().map_or(1.0, |r| r[0].max(1.0));
    for (i, (name, _)) in SERIES.iter().enumerate() {
        let top = 10.0 + i as f64 * h;
        let vals: Vec<f64> = rows.iter().map(|r| r[i + 1]).collect();
        let lo = vals.iter().cloned().fold(f64::INFINITY, f64::min).min(0.0);
        let hi = vals.iter().cloned().fold(0.0, f64::max).max(lo + 1.0);
        let _ = writeln!(
            s,
            "<text x=\"{pad}\" y=\"{}\">{name}: {:.0} .. {:.0} (last {:.0})</text>",
            top + 12.0,
            vals.iter().cloned().fold(f64::INFINITY, f64::min),
            hi,
            vals.last().unwrap_or(&0.0)
        );
        let _ = writeln!(
            s,
            "<rect x=\"{pad}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#ccc\"/>",
            top + 18.0,
            w - 2.0 * pad,
            h - 40.0
        );
        let points: Vec<String> = rows
            .iter()
            .map(|r| {
                let x = pad + (r[0] / t_max) * (w - 2.0 * pad);
                let y = top + 18.0 + (h - 40.0) * (1.0 - (r[i + 1] - lo) / (hi - lo));
                format!("{x:.1},{y:.1}")
            })
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"{}\"/>",
            points.join(" ")
        );
    }
    let _ =
        writeln!(s, "<text x=\"{pad}\" y=\"{}\">0 s .. {t_max:.0} s</text>\n</svg>", h * SERIES.len() as f64 + 12.0);
    s
}

/// `fatrace -c`-less, whole-system file write trace (fanotify), kept in a file.
struct Fatrace {
    child: Child,
    log: PathBuf,
}

impl Fatrace {
    fn start() -> Option<Fatrace> {
        let log = std::env::temp_dir().join(format!("ferrolet-soak-fatrace-{}.log", std::process::id()));
        let child = Command::new("fatrace")
            .args(["-f", "W", "-o"])
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        Some(Fatrace { child, log })
    }

    /// Writes by the processes named `comm` (the agent and its shims) outside `allowed`.
    fn outside(mut self, comm: &str, allowed: &[PathBuf]) -> Vec<String> {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let _ = self.child.wait();
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let _ = std::fs::remove_file(&self.log);
        // Lines look like `ferrolet(1234): W /path/to/file`.
        let ours = |l: &str| l.split_once('(').is_some_and(|(c, _)| c == comm);
        let mut seen: Vec<String> = text
            .lines()
            .filter(|l| ours(l))
            .filter_map(|l| l.split_once(": ").map(|(_, rest)| rest.trim_start_matches(|c: char| c != '/').to_string()))
            .filter(|path| !path.is_empty() && !allowed.iter().any(|a| Path::new(path).starts_with(a)))
            .collect();
        seen.sort();
        seen.dedup();
        seen
    }
}
