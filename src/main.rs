//! The `ferrolet` command line: `run`, `validate`, `get …`, `describe`, `logs`, `exec`,
//! `plan`, `drain`, `version` (and the internal
//! `shim`, which the process runtime starts once per container).

use anyhow::{bail, Context};
use ferrolet::agent::Agent;
use ferrolet::cli::podcmd;
use ferrolet::cli::{self, Output};
use ferrolet::config::{Config, Overrides};
use ferrolet::pods::source::read_manifest;
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "\
ferrolet: a kubelet-class node agent for edge and IoT machines

usage:
  ferrolet run [--config FILE] [--node-name NAME] [--manifest-dir DIR] [--state-dir DIR]
               [--listen ADDR] [--runtime process|cri]
               [--container-runtime-endpoint unix:///PATH] [--device-plugin-dir DIR]
               [--image-gc-high-threshold N] [--image-gc-low-threshold N]
               [--minimum-image-ttl-duration DURATION] [--kubeconfig FILE]
  ferrolet validate [--config FILE] [MANIFEST...]   check config and manifests, run nothing
  ferrolet get pods [-o wide|json|yaml] [--server ADDR | --config FILE]
  ferrolet get events [--for pod/NAME] [--watch] [-o json|yaml] [--server ADDR | --config FILE]
  ferrolet get node|devices [-o json|yaml] [--server ADDR | --config FILE]   capacity, device plugins
  ferrolet get images [-o json|yaml] [--server ADDR | --config FILE]   images, and whether GC may remove them
  ferrolet describe pod NAME [--server ADDR | --config FILE]
  ferrolet plan cgroups [--config FILE] [-o json] [--cpus N] [--memory Q] [--system-reserved cpu=…,memory=…]
                        [--kube-reserved …] [--qos-reserved memory=N%] [--cgroup-version 1|2]
                        [--cgroup-root PATH] MANIFEST...   the cgroups and values ferrolet would write
  ferrolet logs POD [-c CONTAINER] [-n NAMESPACE] [-p] [--tail N] [-f] [--timestamps]
                [--config FILE] [--state-dir DIR] [--runtime process|cri]
                [--container-runtime-endpoint unix:///PATH]   a container's log, as kubectl logs
  ferrolet exec POD [-c CONTAINER] [-n NAMESPACE] [--timeout DURATION] [config flags as for logs]
                -- COMMAND [ARG...]   run a command in a running container (no terminal, no stdin)
  ferrolet drain [--config FILE] [--state-dir DIR]  stop every container and remove every pod
                                                    (with no agent running)
  ferrolet version

Every command takes --help (or: ferrolet help COMMAND).
Without --config the built-in defaults apply; flags win over the file.
Logging: RUST_LOG=debug (default info); lines start with an RFC 3339 UTC timestamp
unless stderr goes to journald (JOURNAL_STREAM), which stamps them itself.
";

/// `ferrolet run --help`.
const RUN_HELP: &str = "\
usage: ferrolet run [--config FILE] [--node-name NAME] [--manifest-dir DIR] [--state-dir DIR]
                    [--listen ADDR] [--runtime process|cri]
                    [--container-runtime-endpoint unix:///PATH] [--device-plugin-dir DIR]
                    [--image-gc-high-threshold N] [--image-gc-low-threshold N]
                    [--minimum-image-ttl-duration DURATION] [--kubeconfig FILE]

Runs the agent until SIGTERM or SIGINT. Without --config the built-in defaults apply;
flags win over the file.
";

/// `ferrolet validate --help`.
const VALIDATE_HELP: &str = "\
usage: ferrolet validate [--config FILE] [--manifest-dir DIR] [MANIFEST...]

Checks the configuration, the host and the manifests (those named, or the manifest
directory's), as `run` would, and runs nothing.
";

/// `ferrolet get --help`.
const GET_HELP: &str = "\
usage: ferrolet get pods [-o wide|json|yaml] [--server ADDR | --config FILE]
       ferrolet get events [--for pod/NAME] [--watch] [-o json|yaml] [--server ADDR | --config FILE]
       ferrolet get node|devices [-o json|yaml] [--server ADDR | --config FILE]

Lists what a running agent reports: pods, events, the node's capacity, device plugins.
";

/// `ferrolet describe --help`.
const DESCRIBE_HELP: &str = "\
usage: ferrolet describe pod NAME [--server ADDR | --config FILE]

Shows one pod of a running agent, with its containers and events.
";

/// `ferrolet plan --help`.
const PLAN_HELP: &str = "\
usage: ferrolet plan cgroups [--config FILE] [-o json] [--cpus N] [--memory Q] [--pids N]
                             [--system-reserved cpu=…,memory=…] [--kube-reserved …]
                             [--qos-reserved memory=N%] [--cgroup-version 1|2]
                             [--cgroup-root PATH] MANIFEST...

Prints the cgroups and values ferrolet would write for these pods, and writes nothing.
";

/// `ferrolet drain --help`.
const DRAIN_HELP: &str = "\
usage: ferrolet drain [--config FILE] [--state-dir DIR]

Stops every container and removes every pod, with no agent running.
";

/// `ferrolet logs --help`.
const LOGS_HELP: &str = "\
usage: ferrolet logs POD [-c CONTAINER] [-n NAMESPACE] [-p|--previous] [--tail N] [-f|--follow]
                     [--timestamps] [--config FILE] [--state-dir DIR] [--runtime process|cri]
                     [--container-runtime-endpoint unix:///PATH]

Prints the log of a container of pod POD (the name `ferrolet get pods` shows; static pods
are <manifest name>-<node name>) in namespace NAMESPACE (default: default), both streams
to stdout, as kubectl logs does. The container runtime of the configuration is asked
which containers the pod has (no agent needs to run, and a running one is not disturbed);
the log is read from the instance's log files, rotated ones included.

  -c, --container NAME  the container; without it, the pod's only container, else the one
                        its kubectl.kubernetes.io/default-container annotation names, else
                        the first app container (saying so on stderr)
  -p, --previous        the instance before the newest one (the one that ended last)
      --tail N          only the last N lines (at most 1000000; -1: all, the default)
  -f, --follow          go on printing as the container writes, across log rotations, until
                        that instance stops running, or SIGINT/SIGTERM (exit code 130)
      --timestamps      start each line with the time it was written (RFC 3339)

Lines of the log file that are not CRI log records are skipped (a warning counts them).
";

/// `ferrolet exec --help`.
const EXEC_HELP: &str = "\
usage: ferrolet exec POD [-c CONTAINER] [-n NAMESPACE] [--timeout DURATION] [--config FILE]
                     [--state-dir DIR] [--runtime process|cri]
                     [--container-runtime-endpoint unix:///PATH] -- COMMAND [ARG...]

Runs COMMAND in the newest instance of a container of pod POD, which must be running: with
the process runtime, as the container runs (its environment, working directory and
cgroup); with CRI, through ExecSync. There is no terminal and no stdin. POD, NAMESPACE and
the container are found as for `ferrolet logs`.

The command's output is printed when it ends, stdout to stdout and stderr to stderr, each
at most 1 MiB (the rest is dropped, with a warning). ferrolet exec exits with the command's
exit code (128+N when a signal N killed it). A command still running after --timeout
(default 1m, from 1s to 24h) is killed, and ferrolet exec exits 124. SIGINT or SIGTERM kills
the command and exits 130. Errors of ferrolet itself (no such pod, a container that is not
running) exit 1.
";

/// `ferrolet version --help`.
const VERSION_HELP: &str = "\
usage: ferrolet version

Prints the version.
";

/// The help of a subcommand (the whole usage for `help` and anything unknown).
fn help_for(cmd: &str) -> &'static str {
    match cmd {
        "run" => RUN_HELP,
        "validate" => VALIDATE_HELP,
        "get" => GET_HELP,
        "describe" => DESCRIBE_HELP,
        "plan" => PLAN_HELP,
        "drain" => DRAIN_HELP,
        "logs" => LOGS_HELP,
        "exec" => EXEC_HELP,
        "version" | "--version" => VERSION_HELP,
        _ => USAGE,
    }
}

/// Parsed command-line flags shared by the subcommands.
#[derive(Debug, Default)]
struct Flags {
    /// `-h`/`--help` was given: print the subcommand's help and do nothing else.
    help: bool,
    config: Option<PathBuf>,
    overrides: Overrides,
    output: Option<Output>,
    server: Option<String>,
    for_object: Option<String>,
    watch: bool,
    /// `plan` flags named like kubelet's, by name without the dashes.
    plan: std::collections::BTreeMap<&'static str, String>,
    /// `logs` and `exec`: `-c`, `-n`.
    container: Option<String>,
    namespace: Option<String>,
    /// `logs`: `-p`, `--tail`, `-f`, `--timestamps`.
    previous: bool,
    tail: Option<String>,
    follow: bool,
    timestamps: bool,
    /// `exec`: `--timeout`, and the command after `--`.
    timeout: Option<String>,
    command: Option<Vec<String>>,
    positional: Vec<String>,
}

/// The `plan` flags, named like kubelet's.
const PLAN_FLAGS: [&str; 8] =
    ["cpus", "memory", "pids", "system-reserved", "kube-reserved", "qos-reserved", "cgroup-version", "cgroup-root"];

/// The value of `flag`, as the next argument or after `=`.
fn value(p: &mut lexopt::Parser, flag: &str) -> anyhow::Result<String> {
    let v = p.value().map_err(|_| anyhow::anyhow!("{flag} needs a value"))?;
    v.into_string().map_err(|v| anyhow::anyhow!("{flag}: {v:?} is not UTF-8"))
}

/// Parses the flags after the subcommand. It never exits: `--help` is returned as
/// `Flags::help`, and a bad flag as an error the caller prints with the usage.
fn parse_flags(args: impl IntoIterator<Item = std::ffi::OsString>) -> anyhow::Result<Flags> {
    use lexopt::Arg::{Long, Short, Value};
    let mut f = Flags::default();
    let mut p = lexopt::Parser::from_args(args);
    while let Some(arg) = p.next()? {
        // The flag as written, for messages (`--config`, `-o`).
        let flag = match &arg {
            Long(name) => format!("--{name}"),
            Short(c) => format!("-{c}"),
            Value(_) => String::new(),
        };
        match arg {
            Short('h') | Long("help") => {
                f.help = true;
                return Ok(f);
            }
            Long("config") => f.config = Some(value(&mut p, &flag)?.into()),
            Long("node-name") => f.overrides.node_name = Some(value(&mut p, &flag)?),
            Long("manifest-dir") => f.overrides.manifest_dir = Some(value(&mut p, &flag)?.into()),
            Long("state-dir") => f.overrides.state_dir = Some(value(&mut p, &flag)?.into()),
            Long("listen") => f.overrides.listen = Some(value(&mut p, &flag)?),
            Long("runtime") => f.overrides.runtime = Some(value(&mut p, &flag)?),
            Long("container-runtime-endpoint") => f.overrides.container_runtime_endpoint = Some(value(&mut p, &flag)?),
            Long("device-plugin-dir") => f.overrides.device_plugin_dir = Some(value(&mut p, &flag)?.into()),
            Long("image-gc-high-threshold") => f.overrides.image_gc_high_threshold = Some(value(&mut p, &flag)?),
            Long("image-gc-low-threshold") => f.overrides.image_gc_low_threshold = Some(value(&mut p, &flag)?),
            Long("minimum-image-ttl-duration") => f.overrides.minimum_image_ttl_duration = Some(value(&mut p, &flag)?),
            Long("kubeconfig") => f.overrides.kubeconfig = Some(value(&mut p, &flag)?.into()),
            Long("server") => f.server = Some(value(&mut p, &flag)?),
            Long("for") => f.for_object = Some(value(&mut p, &flag)?),
            Short('w') | Long("watch") => f.watch = true,
            Short('o') | Long("output") => f.output = Some(value(&mut p, &flag)?.parse()?),
            Short('c') | Long("container") => f.container = Some(value(&mut p, &flag)?),
            Short('n') | Long("namespace") => f.namespace = Some(value(&mut p, &flag)?),
            Short('p') | Long("previous") => f.previous = true,
            Long("tail") => f.tail = Some(value(&mut p, &flag)?),
            Short('f') | Long("follow") => f.follow = true,
            Long("timestamps") => f.timestamps = true,
            Long("timeout") => f.timeout = Some(value(&mut p, &flag)?),
            Long(name) if PLAN_FLAGS.contains(&name) => {
                let key = PLAN_FLAGS.iter().copied().find(|n| *n == name).unwrap_or("cpus");
                f.plan.insert(key, value(&mut p, &flag)?);
            }
            Value(v) => f.positional.push(v.into_string().map_err(|v| anyhow::anyhow!("argument {v:?} is not UTF-8"))?),
            Long(_) | Short(_) => bail!("unknown flag {flag}"),
        }
    }
    Ok(f)
}

fn run(flags: Flags) -> anyhow::Result<()> {
    // glibc gives every thread that allocates its own malloc arena; with a dozen threads
    // (probe pool included) that is megabytes of idle RSS on a small device. Two arenas
    // are plenty for an agent whose threads mostly wait.
    // SAFETY: mallopt only tunes the allocator; called before any thread is started.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
    // The file as the agent started with it is what a reload compares with.
    let (cfg, started_with) = match &flags.config {
        Some(p) => Config::load_file(p, &flags.overrides)?,
        None => (Config::load(None, &flags.overrides)?, toml::Table::new()),
    };
    if !cfg.log_level.is_empty() {
        set_log_level(&cfg.log_level);
    }
    // The same checks `ferrolet validate` makes, before anything is started.
    let cfg_name = flags.config.as_ref().map_or("defaults".to_string(), |p| p.display().to_string());
    if let Some(e) = cfg.check_host(&cfg_name).into_iter().next() {
        return Err(e.into());
    }
    let exe = std::env::current_exe().context("cannot find the ferrolet binary for container shims")?;
    // Read (and taken out of the environment) before any thread starts.
    let notify =
        ferrolet::agent::notify::Notify::from_env().context("cannot use the service manager's NOTIFY_SOCKET")?;
    let mut signals = signal_hook::iterator::Signals::new([libc::SIGTERM, libc::SIGINT, libc::SIGHUP])
        .context("cannot install signal handlers")?;
    // While a CRI runtime is still starting: SIGTERM or SIGINT end the wait at once (a
    // SIGHUP is dropped: the file is read at start), and the service manager hears why the
    // start takes long and lets it take the whole wait.
    let mut told = false;
    let waiting = &mut |why: &str, wait: std::time::Duration| {
        if let (Some(n), false) = (&notify.notifier, told) {
            let usec = (wait + std::time::Duration::from_secs(30)).as_micros();
            n.say(&format!("STATUS=waiting for the container runtime: {why}\nEXTEND_TIMEOUT_USEC={usec}"));
            told = true;
        }
        !signals.pending().any(|s| s == libc::SIGTERM || s == libc::SIGINT)
    };
    let mut agent = match Agent::start_waiting(&cfg, &exe, waiting) {
        Err(ferrolet::agent::AgentError::StoppedWaiting) => {
            log::info!("agent: stopped by a signal while waiting for the container runtime to start");
            return Ok(());
        }
        started => started?,
    };
    let mut log_level = cfg.log_level.clone();
    let watchdog = match (&notify.notifier, notify.watchdog) {
        (Some(n), Some(interval)) => Some(
            ferrolet::agent::notify::spawn_watchdog(n.clone(), agent.health.clone(), interval)
                .context("cannot start the watchdog thread")?,
        ),
        _ => None,
    };
    if let Some(n) = &notify.notifier {
        n.say("READY=1\nSTATUS=running");
    }
    let mut last_reload: Option<std::time::Instant> = None;
    // Blocking here is the point: the main thread has nothing to do until a signal arrives.
    while let Some(mut sig) = signals.forever().next() {
        if sig == libc::SIGHUP {
            // At most one reload a second: the SIGHUPs of a storm meanwhile are one reload,
            // of the file as it is then. A SIGTERM meanwhile waits that long at most.
            if let Some(wait) = last_reload.map(|at| RELOAD_INTERVAL.saturating_sub(at.elapsed())) {
                std::thread::sleep(wait);
            }
            match signals.pending().find(|s| *s != libc::SIGHUP) {
                Some(other) => sig = other,
                None => {
                    reload(&flags, &started_with, &mut log_level, &mut agent);
                    last_reload = Some(std::time::Instant::now());
                    continue;
                }
            }
        }
        log::info!("agent: received signal {sig}, shutting down");
        break;
    }
    if let Some(n) = &notify.notifier {
        n.say("STOPPING=1");
    }
    if let Some(w) = watchdog {
        let _ = w.stop(std::time::Duration::from_secs(5));
    }
    let stuck = agent.stop();
    if !stuck.is_empty() {
        bail!("shutdown incomplete: {}", stuck.join("; "));
    }
    Ok(())
}

/// The shortest time between two SIGHUP reloads.
const RELOAD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// SIGHUP: reads the configuration file again; a file that cannot be read or is invalid
/// changes nothing, and so does a file that changes a key only a restart applies (it no
/// longer describes this agent: an empty file, say, would move `manifest_dir` to its
/// default while `state_dir` and `node_name` stay). Otherwise the run-time keys are applied
/// where they differ from what runs. A key a command-line flag sets keeps the flag's value.
fn reload(flags: &Flags, started_with: &toml::Table, log_level: &mut String, agent: &mut Agent) {
    let Some(path) = &flags.config else {
        log::info!("agent: SIGHUP: running on the built-in defaults, no configuration file to read again");
        return;
    };
    let (new, table) = match Config::load_file(path, &flags.overrides) {
        Ok(x) => x,
        Err(e) => {
            log::error!("agent: SIGHUP: {}; nothing changed", ferrolet::base::errors::Chain(&e));
            return;
        }
    };
    let restart = ferrolet::config::reload::needing_restart(started_with, &table);
    if !restart.is_empty() {
        log::error!(
            "agent: SIGHUP: {} changes {}, which only a restart applies; the file no longer describes this agent, so nothing changed (restart the agent to run on it)",
            path.display(),
            restart.join(", ")
        );
        return;
    }
    let mut applied = agent.reload(&new);
    if new.log_level != *log_level {
        set_log_level(&new.log_level);
        log_level.clone_from(&new.log_level);
        applied.insert(0, "log_level".into());
    }
    if applied.is_empty() {
        log::info!("agent: SIGHUP: {} read again; nothing to change", path.display());
    } else {
        log::info!("agent: SIGHUP: applied {}", applied.join(", "));
    }
}

fn validate(flags: Flags) -> anyhow::Result<bool> {
    use ferrolet::base::logsafe;
    use ferrolet::pods::source::{dedupe, list_manifest_dir, over_max_pods_message, split_at_max_pods};
    let cfg = Config::load(flags.config.as_deref(), &flags.overrides)?;
    let cfg_name = flags.config.as_ref().map_or("defaults".to_string(), |p| p.display().to_string());
    // What `run` would refuse on this machine, by the same check `run` makes.
    let host = cfg.check_host(&cfg_name);
    let mut ok = host.is_empty();
    for e in &host {
        eprintln!("{}", logsafe::Escaped(&ferrolet::base::errors::Chain(e).to_string()));
    }
    if ok {
        if let Some(p) = &flags.config {
            println!("{}: ok", logsafe::path(p));
        }
    }
    let mut files: Vec<PathBuf> = flags.positional.iter().map(PathBuf::from).collect();
    if files.is_empty() {
        // The files the agent would read, skipped ones reported as the agent does.
        match list_manifest_dir(&cfg.manifest_dir) {
            Ok(entries) => {
                for (path, checked) in entries {
                    match checked {
                        Ok(_) => files.push(path),
                        Err(e) => println!(
                            "{}: warning: skipped: {}",
                            logsafe::path(&path),
                            logsafe::Escaped(&ferrolet::base::errors::Chain(&e).to_string())
                        ),
                    }
                }
            }
            Err(e) => {
                eprintln!("{}: cannot read the manifest directory: {e}", logsafe::path(&cfg.manifest_dir));
                ok = false;
            }
        }
    }
    // File name order, then document order: the order in which the agent keeps the
    // first of two pods with the same name.
    files.sort();
    let mut valid: Vec<(PathBuf, Vec<ferrolet::api::Pod>)> = Vec::new();
    for f in files {
        let shown = logsafe::path(&f);
        match read_manifest(&f, &cfg.node_name) {
            Ok(pods) => {
                let names: Vec<String> = pods.iter().map(|p| p.metadata.name.clone()).collect();
                println!("{shown}: ok ({})", names.join(", "));
                for p in &pods {
                    // What this runtime will refuse (the pod's containers would not start)
                    // or accept without effect.
                    for u in ferrolet::api::fields::check(p, cfg.runtime.kind()) {
                        let what = if u.is_refused() { "error" } else { "note" };
                        let line = format!("{shown}: {what}: pod {}: {}", p.metadata.name, u.describe());
                        if u.is_refused() {
                            ok = false;
                            eprintln!("{}", logsafe::Escaped(&line));
                        } else {
                            println!("{}", logsafe::Escaped(&line));
                        }
                    }
                    for c in p.spec.init_containers.iter().chain(&p.spec.containers) {
                        if cfg.runtime == ferrolet::config::RuntimeBackend::Process && c.command.is_empty() {
                            println!(
                                "{shown}: warning: container {}: the process runtime needs `command` (images are not used)",
                                c.name
                            );
                        }
                    }
                }
                valid.push((f, pods));
            }
            Err(errors) => {
                ok = false;
                for e in errors {
                    eprintln!("{e}");
                }
            }
        }
    }
    let (pods, duplicates) = dedupe(valid.iter().map(|(f, pods)| (f.as_path(), pods.as_slice())));
    for d in duplicates {
        ok = false;
        eprintln!("{}; the agent runs only the first", d.message());
    }
    let (_, refused) = split_at_max_pods(pods, cfg.max_pods);
    for p in refused {
        ok = false;
        eprintln!("{}; the agent would refuse it", over_max_pods_message(&p, cfg.max_pods));
    }
    Ok(ok)
}

fn drain(flags: Flags) -> anyhow::Result<()> {
    let cfg = Config::load(flags.config.as_deref(), &flags.overrides)?;
    let exe = std::env::current_exe().context("cannot find the ferrolet binary")?;
    let n = ferrolet::agent::drain(&cfg, &exe)?;
    println!("drained {n} pod(s) from {}", cfg.state_dir.display());
    Ok(())
}

fn api_server(flags: &Flags) -> anyhow::Result<String> {
    match &flags.server {
        Some(s) => Ok(s.clone()),
        None => Ok(Config::load(flags.config.as_deref(), &flags.overrides)?.api.listen),
    }
}

fn get(flags: Flags) -> anyhow::Result<()> {
    let server = api_server(&flags)?;
    match flags.positional.first().map(String::as_str) {
        Some("pods" | "pod" | "po") => {
            let list = cli::fetch_pods(&server)?;
            print!("{}", cli::render_pods(&list, flags.output.unwrap_or(Output::Table))?);
            Ok(())
        }
        Some("events" | "event" | "ev") => get_events(&server, &flags),
        Some("node" | "nodes" | "no") => {
            print!("{}", cli::render_node(&cli::fetch_node(&server)?, flags.output.unwrap_or(Output::Table))?);
            Ok(())
        }
        Some("devices" | "device") => {
            print!("{}", cli::render_devices(&cli::fetch_devices(&server)?, flags.output.unwrap_or(Output::Table))?);
            Ok(())
        }
        Some("images" | "image") => {
            print!("{}", cli::render_images(&cli::fetch_images(&server)?, flags.output.unwrap_or(Output::Table))?);
            Ok(())
        }
        Some(other) => bail!("unknown resource type {other:?}: supported: pods, events, node, devices, images"),
        None => bail!("get needs a resource type: pods, events, node, devices or images"),
    }
}

fn get_events(server: &str, flags: &Flags) -> anyhow::Result<()> {
    let pod = match &flags.for_object {
        Some(obj) => {
            let name = obj.strip_prefix("pod/").or_else(|| obj.strip_prefix("pods/")).with_context(|| {
                format!(
                    "--for {obj:?}: give the object as pod/NAME (events for other objects are listed without --for)"
                )
            })?;
            Some(cli::find_pod(&cli::fetch_pods(server)?, name)?)
        }
        None => None,
    };
    let list = cli::fetch_events(server, pod.as_ref())?;
    match flags.output {
        Some(Output::Json) => {
            println!("{}", serde_json::to_string_pretty(&list)?);
            return Ok(());
        }
        Some(Output::Yaml) => {
            print!("{}", serde_norway::to_string(&list)?);
            return Ok(());
        }
        _ => {}
    }
    if list.items.is_empty() && !flags.watch {
        println!("No events found");
        return Ok(());
    }
    print!("{}", cli::render_events(&list.items, true));
    if !flags.watch {
        return Ok(());
    }
    // --watch: print each event again whenever it is new or its count changed; Ctrl-C ends it.
    let mut seen: std::collections::HashMap<String, i32> =
        list.items.iter().map(|e| (e.metadata.name.clone(), e.count)).collect();
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
        let list = cli::fetch_events(server, pod.as_ref())?;
        let fresh: Vec<_> = list.items.into_iter().filter(|e| seen.get(&e.metadata.name) != Some(&e.count)).collect();
        for e in &fresh {
            seen.insert(e.metadata.name.clone(), e.count);
        }
        print!("{}", cli::render_events(&fresh, false));
        use std::io::Write as _;
        std::io::stdout().flush()?;
    }
}

fn plan(flags: Flags) -> anyhow::Result<bool> {
    use ferrolet::config::{parse_resource_list, qos_reserved_memory, reserved_resources};
    use ferrolet::node::cm::{self, cgroupfs::CgroupVersion};
    match flags.positional.first().map(String::as_str) {
        Some("cgroups") => {}
        _ => bail!("usage: ferrolet plan cgroups [flags] MANIFEST..."),
    }
    let cfg = Config::load(flags.config.as_deref(), &flags.overrides)?;
    let mut settings = cfg.cgroups.settings()?;
    let p = &flags.plan;
    let mut capacity = cm::NodeResources::from_proc();
    if let Some(v) = p.get("cpus") {
        let q = ferrolet::api::Quantity::parse(v).map_err(|e| anyhow::anyhow!("--cpus: {e}"))?;
        capacity.cpu_millis = q.milli_value();
    }
    if let Some(v) = p.get("memory") {
        capacity.memory = ferrolet::api::Quantity::parse(v).map_err(|e| anyhow::anyhow!("--memory: {e}"))?.value();
    }
    if let Some(v) = p.get("pids") {
        capacity.pids = v.parse().map_err(|_| anyhow::anyhow!("--pids: {v:?} is not a number"))?;
    }
    for (flag, target) in
        [("system-reserved", &mut settings.system_reserved), ("kube-reserved", &mut settings.kube_reserved)]
    {
        if let Some(v) = p.get(flag) {
            let list = parse_resource_list(&format!("--{flag}"), v)?;
            *target = reserved_resources(&format!("--{flag}"), &list)?;
        }
    }
    if let Some(v) = p.get("qos-reserved") {
        let list =
            v.split(',').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect();
        settings.qos_reserved_memory = qos_reserved_memory("--qos-reserved", &list)?;
    }
    if let Some(v) = p.get("cgroup-root") {
        settings.root = v.clone();
    }
    let version = match p.get("cgroup-version").map(String::as_str) {
        Some("1") => CgroupVersion::V1,
        Some("2") => CgroupVersion::V2,
        Some(other) => bail!("--cgroup-version: unsupported value {other:?}: supported values: 1, 2"),
        None => cm::cgroupfs::Mounts::read(&cfg.cgroups.mountinfo)
            .and_then(|m| m.version(cfg.cgroups.forced_version()))
            .unwrap_or(CgroupVersion::V2),
    };
    let mut pods = Vec::new();
    let mut ok = true;
    for f in &flags.positional[1..] {
        match read_manifest(std::path::Path::new(f), &cfg.node_name) {
            Ok(p) => pods.extend(p),
            Err(errors) => {
                ok = false;
                for e in errors {
                    eprintln!("{e}");
                }
            }
        }
    }
    let refs: Vec<&ferrolet::api::Pod> = pods.iter().collect();
    let plan = cm::plan(&settings, version, &capacity, &refs, cfg.runtime == ferrolet::config::RuntimeBackend::Process);
    if flags.output == Some(Output::Json) {
        println!("{}", serde_json::to_string_pretty(&plan)?);
    } else {
        print!("{}", cli::render_plan(&plan));
    }
    Ok(ok)
}

/// The pod and container `logs` and `exec` name: `POD`, `-n`, `-c`.
fn pod_target(flags: &Flags, cmd: &str) -> anyhow::Result<podcmd::Target> {
    let name = match flags.positional.as_slice() {
        [name] => name.clone(),
        [] => bail!("{cmd} needs a pod name"),
        [_, extra, ..] => bail!("{cmd}: unexpected argument {extra:?} (give one pod name)"),
    };
    let namespace = flags.namespace.clone().unwrap_or_else(|| podcmd::DEFAULT_NAMESPACE.into());
    Ok(podcmd::Target { pod: podcmd::PodRef { namespace, name }, container: flags.container.clone() })
}

fn logs(flags: Flags) -> anyhow::Result<u8> {
    let target = pod_target(&flags, "logs")?;
    let opts = ferrolet::node::podlogs::LogOptions {
        tail: flags.tail.as_deref().map(podcmd::parse_tail).transpose()?.flatten(),
        timestamps: flags.timestamps,
    };
    let cfg = Config::load(flags.config.as_deref(), &flags.overrides)?;
    let runtime = ferrolet::agent::open_runtime_read_only(&cfg)?;
    Ok(podcmd::logs(&*runtime, &target, flags.previous, flags.follow, opts)?)
}

fn exec(flags: Flags) -> anyhow::Result<u8> {
    let Some(command) = flags.command.as_deref() else {
        bail!("exec needs the command after --: ferrolet exec POD -- COMMAND [ARG...]");
    };
    if command.is_empty() {
        bail!("exec needs a command after --");
    }
    let target = pod_target(&flags, "exec")?;
    let timeout = flags.timeout.as_deref().map(podcmd::parse_timeout).transpose()?;
    let cfg = Config::load(flags.config.as_deref(), &flags.overrides)?;
    let runtime = ferrolet::agent::open_runtime_read_only(&cfg)?;
    Ok(podcmd::exec(&*runtime, &target, command, timeout.unwrap_or(podcmd::DEFAULT_EXEC_TIMEOUT))?)
}

/// `args` split at the first `--`: what is before it, and the words after it (`exec`'s
/// command, taken as they are), or `None` when there is no `--`.
fn split_at_dashes(
    mut args: Vec<std::ffi::OsString>,
) -> anyhow::Result<(Vec<std::ffi::OsString>, Option<Vec<String>>)> {
    let Some(dash) = args.iter().position(|a| a == "--") else { return Ok((args, None)) };
    let after = args.split_off(dash + 1);
    args.pop();
    let words = after
        .into_iter()
        .map(|a| a.into_string().map_err(|a| anyhow::anyhow!("argument {a:?} is not UTF-8")))
        .collect::<anyhow::Result<_>>()?;
    Ok((args, Some(words)))
}

fn describe(flags: Flags) -> anyhow::Result<()> {
    let server = api_server(&flags)?;
    let name = match flags.positional.as_slice() {
        [kind, name] if matches!(kind.as_str(), "pod" | "pods" | "po") => name,
        [kind, _] => bail!("unknown resource type {kind:?}: supported: pod"),
        _ => bail!("usage: ferrolet describe pod NAME"),
    };
    let pod = cli::find_pod(&cli::fetch_pods(&server)?, name)?;
    let events = cli::fetch_events(&server, Some(&pod))?;
    print!("{}", cli::describe_pod(&pod, &events.items));
    Ok(())
}

/// `device:inode` of stderr, to compare with `JOURNAL_STREAM`.
fn stderr_identity() -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata("/proc/self/fd/2").ok()?;
    Some((meta.dev(), meta.ino()))
}

/// Whether stderr is the journald stream systemd connected (journald then stamps each line
/// itself). `JOURNAL_STREAM` is `device:inode` of that stream; a process started from a
/// service with stderr redirected elsewhere inherits the variable, so it must match stderr.
fn logs_to_journal(journal_stream: Option<&str>, stderr: Option<(u64, u64)>) -> bool {
    let Some((dev, ino)) = journal_stream.and_then(|v| v.split_once(':')) else { return false };
    matches!((dev.parse::<u64>(), ino.parse::<u64>(), stderr), (Ok(d), Ok(i), Some(s)) if (d, i) == s)
}

/// The log line prefix: an RFC 3339 UTC timestamp with milliseconds, or for journald the
/// syslog priority (`<6>`), which it turns into the entry's priority.
fn log_prefix(journal: bool, level: log::Level, now: std::time::SystemTime) -> String {
    if journal {
        let priority = match level {
            log::Level::Error => 3,
            log::Level::Warn => 4,
            log::Level::Info => 6,
            log::Level::Debug | log::Level::Trace => 7,
        };
        return format!("<{priority}>");
    }
    // `2024-05-01T10:00:00.123456789Z` cut to milliseconds.
    let nanos = ferrolet::base::timefmt::rfc3339_nano(now);
    format!("{}Z ", &nanos[..nanos.len().saturating_sub(7)])
}

/// The process's logger: env_logger's, replaced whole when a reload changes `log_level`.
struct Logger(parking_lot::RwLock<env_logger::Logger>);

impl log::Log for Logger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        self.0.read().enabled(metadata)
    }
    fn log(&self, record: &log::Record) {
        // env_logger's own `log` applies its filter.
        self.0.read().log(record);
    }
    fn flush(&self) {
        self.0.read().flush();
    }
}

static LOGGER: std::sync::OnceLock<Logger> = std::sync::OnceLock::new();

/// env_logger for `spec` (RUST_LOG's syntax; `None`: RUST_LOG, else `info`).
fn env_logger_for(spec: Option<&str>) -> env_logger::Logger {
    let journal = logs_to_journal(std::env::var("JOURNAL_STREAM").ok().as_deref(), stderr_identity());
    let mut builder = env_logger::Builder::new();
    let asked = match spec {
        Some(s) => s.to_string(),
        None => std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
    };
    builder.parse_filters(&asked);
    if let Ok(style) = std::env::var("RUST_LOG_STYLE") {
        builder.parse_write_style(&style);
    }
    // The HTTP client's and TLS library's own debug lines (every request and handshake of
    // cluster mode) only when the spec names them.
    for module in ["ureq", "ureq_proto", "rustls"] {
        if !asked.contains(module) {
            builder.filter_module(module, log::LevelFilter::Info);
        }
    }
    builder
        .format(move |buf, record| {
            let prefix = log_prefix(journal, record.level(), std::time::SystemTime::now());
            write_log_line(buf, &prefix, record.level(), record.args())
        })
        .build()
}

/// One log record as one line: control characters in it (a user's string with a newline,
/// say, in an image name) are escaped here, so no call site can forget it and forge a line.
fn write_log_line(
    out: &mut impl std::io::Write,
    prefix: &str,
    level: log::Level,
    args: &std::fmt::Arguments,
) -> std::io::Result<()> {
    let text = match args.as_str() {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(args.to_string()),
    };
    writeln!(out, "{prefix}[{level:<5}] {}", ferrolet::base::logsafe::Escaped(&text))
}

fn init_logging() {
    let inner = env_logger_for(None);
    log::set_max_level(inner.filter());
    let logger = LOGGER.get_or_init(|| Logger(parking_lot::RwLock::new(inner)));
    let _ = log::set_logger(logger);
}

/// Logs from now on as `spec` says (`log_level`; empty: RUST_LOG, else `info`).
fn set_log_level(spec: &str) {
    let inner = env_logger_for(Some(spec).filter(|s| !s.is_empty()));
    log::set_max_level(inner.filter());
    if let Some(logger) = LOGGER.get() {
        *logger.0.write() = inner;
    }
}

/// A panic goes to the log with the thread it happened on (and its backtrace, when
/// `RUST_BACKTRACE` asks for one).
fn log_panics() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        let backtrace = std::backtrace::Backtrace::capture();
        log::error!("panic on thread {}: {info}", thread.name().unwrap_or("(unnamed)"));
        if backtrace.status() == std::backtrace::BacktraceStatus::Captured {
            // A log record is one line: the backtrace goes a line a record.
            for line in backtrace.to_string().lines() {
                log::error!("  {line}");
            }
        }
    }));
}

/// A panic ends the process at once, in every build (the release profile aborts on panic
/// anyway; the others would unwind one thread and carry on without it): the hook in place
/// says it first, then the process aborts. The service manager restarts the agent, and its
/// pods run on under their shims.
fn abort_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::abort();
    }));
}

/// Commands that only print end as any Unix filter does when their reader goes away
/// (`ferrolet get pods | head -1`): killed quietly by SIGPIPE. Rust ignores SIGPIPE, and
/// `print!` then panics on EPIPE. Not for `run` or `drain`, which must not die halfway;
/// sockets are unaffected (std sends with MSG_NOSIGNAL).
fn end_quietly_on_a_closed_stdout() {
    // SAFETY: restoring the default disposition of one signal; no handler is involved.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(cmd) = args.next() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    if cmd == "shim" {
        // Said on stderr (the shim's log) by Rust's own hook.
        abort_on_panic();
        // The shim must fork before anything else creates threads or state.
        let Some(dir) = args.next() else {
            return ExitCode::from(2);
        };
        return ExitCode::from(ferrolet::node::runtime::process::shim::main(std::path::Path::new(&dir)) as u8);
    }
    let cmd = cmd.to_string_lossy().into_owned();
    init_logging();
    log_panics();
    abort_on_panic();
    if matches!(
        cmd.as_str(),
        "get" | "describe" | "logs" | "exec" | "validate" | "plan" | "version" | "--version" | "help" | "-h" | "--help"
    ) {
        end_quietly_on_a_closed_stdout();
    }
    // Only `exec` takes words after `--` (its command, which may look like flags).
    let args: Vec<std::ffi::OsString> = args.collect();
    let parsed = if cmd == "exec" {
        split_at_dashes(args).and_then(|(args, command)| Ok(Flags { command, ..parse_flags(args)? }))
    } else {
        parse_flags(args)
    };
    let flags = match parsed {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e:#}\n\n{}", help_for(&cmd));
            return ExitCode::from(2);
        }
    };
    if flags.help {
        print!("{}", help_for(&cmd));
        return ExitCode::SUCCESS;
    }
    let done = |ok: bool| u8::from(!ok);
    let result = match cmd.as_str() {
        "run" => run(flags).map(|_| 0),
        "validate" => validate(flags).map(done),
        "get" => get(flags).map(|_| 0),
        "drain" => drain(flags).map(|_| 0),
        "describe" => describe(flags).map(|_| 0),
        "logs" => logs(flags),
        "exec" => exec(flags),
        "plan" => plan(flags).map(done),
        "version" | "--version" => {
            println!("ferrolet {}", env!("CARGO_PKG_VERSION"));
            Ok(0)
        }
        "help" | "-h" | "--help" => {
            // `ferrolet help get` is `ferrolet get --help`.
            print!("{}", help_for(flags.positional.first().map_or("", String::as_str)));
            Ok(0)
        }
        other => {
            eprintln!("error: unknown command {other:?}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_left_to_journald_only_when_stderr_is_its_stream() {
        assert!(logs_to_journal(Some("8:42"), Some((8, 42))));
        assert!(!logs_to_journal(Some("8:42"), Some((8, 43))), "stderr redirected elsewhere");
        assert!(!logs_to_journal(None, Some((8, 42))));
        assert!(!logs_to_journal(Some("garbage"), Some((8, 42))));
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_123);
        assert_eq!(log_prefix(false, log::Level::Info, t), "2023-11-14T22:13:20.123Z ");
        assert_eq!(log_prefix(true, log::Level::Warn, t), "<4>");
    }

    fn parse(args: &[&str]) -> anyhow::Result<Flags> {
        parse_flags(args.iter().map(std::ffi::OsString::from))
    }

    #[test]
    fn flags_take_their_value_apart_or_after_an_equals_sign() {
        let f = parse(&["pods", "-o", "wide", "--server=127.0.0.1:1", "--config", "/etc/f.toml", "-w"]).unwrap();
        assert_eq!(f.positional, ["pods"]);
        assert_eq!(f.output, Some(Output::Wide));
        assert_eq!(f.server.as_deref(), Some("127.0.0.1:1"));
        assert_eq!(f.config, Some(PathBuf::from("/etc/f.toml")));
        assert!(f.watch && !f.help);
        let f = parse(&["cgroups", "--cpus", "2", "--cgroup-version=1", "a.yaml"]).unwrap();
        assert_eq!(f.plan.get("cpus").map(String::as_str), Some("2"));
        assert_eq!(f.plan.get("cgroup-version").map(String::as_str), Some("1"));
        assert_eq!(f.positional, ["cgroups", "a.yaml"]);
    }

    #[test]
    fn a_log_record_is_one_line_whatever_a_users_string_in_it_holds() {
        let image = "busybox\n2026-01-01T00:00:00.000Z [ERROR] forged\r\u{1b}[2J";
        let mut out = Vec::new();
        write_log_line(&mut out, "T ", log::Level::Info, &format_args!("images: pulling {image}")).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text, "T [INFO ] images: pulling busybox\\n2026-01-01T00:00:00.000Z [ERROR] forged\\r\\u{1b}[2J\n");
        assert_eq!(text.lines().count(), 1);
    }

    #[test]
    fn exec_takes_the_words_after_the_first_double_dash_as_they_are() {
        let args = |v: &[&str]| v.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        let (before, command) = split_at_dashes(args(&["web", "-c", "app", "--", "sh", "-c", "echo --"])).unwrap();
        assert_eq!(before, args(&["web", "-c", "app"]));
        assert_eq!(command.unwrap(), ["sh", "-c", "echo --"]);
        let f = parse_flags(before).unwrap();
        assert_eq!((f.positional, f.container), (vec!["web".to_string()], Some("app".into())));
        assert_eq!(split_at_dashes(args(&["web"])).unwrap().1, None);
        assert_eq!(split_at_dashes(args(&["web", "--"])).unwrap().1, Some(vec![]));
    }

    #[test]
    fn logs_flags_are_kubectls() {
        let f = parse(&["web", "-c", "app", "-n", "kube-system", "-p", "--tail", "-1", "-f", "--timestamps"]).unwrap();
        assert_eq!(f.positional, ["web"]);
        assert_eq!((f.container.as_deref(), f.namespace.as_deref()), (Some("app"), Some("kube-system")));
        assert!(f.previous && f.follow && f.timestamps);
        assert_eq!(f.tail.as_deref(), Some("-1"));
    }

    #[test]
    fn help_is_returned_not_acted_on_and_wins_over_later_flags() {
        assert!(parse(&["--help"]).unwrap().help);
        assert!(parse(&["pods", "-h", "--bogus"]).unwrap().help);
    }

    #[test]
    fn bad_flags_say_which_flag_and_what_is_wrong() {
        assert_eq!(parse(&["--bogus"]).unwrap_err().to_string(), "unknown flag --bogus");
        assert_eq!(parse(&["-x"]).unwrap_err().to_string(), "unknown flag -x");
        assert_eq!(parse(&["--config"]).unwrap_err().to_string(), "--config needs a value");
        assert!(parse(&["-o", "xml"]).unwrap_err().to_string().contains("allowed formats are wide, json, yaml"));
    }

    #[test]
    fn every_subcommand_has_its_own_help() {
        for cmd in ["run", "validate", "get", "describe", "logs", "exec", "plan", "drain", "version"] {
            let h = help_for(cmd);
            assert!(h.starts_with(&format!("usage: ferrolet {cmd}")), "{cmd}: {h}");
        }
        assert_eq!(help_for("help"), USAGE);
    }
}
