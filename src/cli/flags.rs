//! The command line's words: the usage and each subcommand's help, and the flags after
//! the subcommand (`parse_flags`; `split_at_dashes` for `exec`).

use crate::cli::Output;
use crate::config::Overrides;
use anyhow::bail;
use std::path::PathBuf;

pub const USAGE: &str = "\
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
  ferrolet top pods [NAME] [-n NAMESPACE | -A] [--containers] [--sort-by cpu|memory]
                    [--server ADDR | --config FILE]   CPU and memory in use, as kubectl top
  ferrolet top node [--server ADDR | --config FILE]
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
pub const RUN_HELP: &str = "\
usage: ferrolet run [--config FILE] [--node-name NAME] [--manifest-dir DIR] [--state-dir DIR]
                    [--listen ADDR] [--runtime process|cri]
                    [--container-runtime-endpoint unix:///PATH] [--device-plugin-dir DIR]
                    [--image-gc-high-threshold N] [--image-gc-low-threshold N]
                    [--minimum-image-ttl-duration DURATION] [--kubeconfig FILE]

Runs the agent until SIGTERM or SIGINT. Without --config the built-in defaults apply;
flags win over the file.
";

/// `ferrolet validate --help`.
pub const VALIDATE_HELP: &str = "\
usage: ferrolet validate [--config FILE] [--manifest-dir DIR] [MANIFEST...]

Checks the configuration, the host and the manifests (those named, or the manifest
directory's), as `run` would, and runs nothing.
";

/// `ferrolet get --help`.
pub const GET_HELP: &str = "\
usage: ferrolet get pods [-o wide|json|yaml] [--server ADDR | --config FILE]
       ferrolet get events [--for pod/NAME] [--watch] [-o json|yaml] [--server ADDR | --config FILE]
       ferrolet get node|devices [-o json|yaml] [--server ADDR | --config FILE]

Lists what a running agent reports: pods, events, the node's capacity, device plugins.
";

/// `ferrolet describe --help`.
pub const DESCRIBE_HELP: &str = "\
usage: ferrolet describe pod NAME [--server ADDR | --config FILE]

Shows one pod of a running agent, with its containers and events.
";

/// `ferrolet top --help`.
pub const TOP_HELP: &str = "\
usage: ferrolet top pods [NAME] [-n NAMESPACE | -A] [--containers] [--sort-by cpu|memory]
                         [--server ADDR | --config FILE]
       ferrolet top node [NAME] [--server ADDR | --config FILE]

Shows the CPU and memory a running agent's pods, or its node, use now, as kubectl top does:
CPU as the rate over the last collection (10s), in millicores; memory as the working set
(what the OOM killer and eviction see), in MiB. It reads the agent's /stats/summary.

  -n, --namespace NS    pods of namespace NS (default: default)
  -A, --all-namespaces  pods of every namespace, with a NAMESPACE column
      --containers      one row per container
      --sort-by KEY     cpu or memory, the largest first (default: by name)

top node shows CPU(%) and MEMORY(%) of the node's allocatable CPU and memory, as /node
reports them. A pod appears once each of its containers was measured twice (10s after it
started); before the agent's first collection, top says that metrics are not available yet.
";

/// `ferrolet plan --help`.
pub const PLAN_HELP: &str = "\
usage: ferrolet plan cgroups [--config FILE] [-o json] [--cpus N] [--memory Q] [--pids N]
                             [--system-reserved cpu=…,memory=…] [--kube-reserved …]
                             [--qos-reserved memory=N%] [--cgroup-version 1|2]
                             [--cgroup-root PATH] MANIFEST...

Prints the cgroups and values ferrolet would write for these pods, and writes nothing.
";

/// `ferrolet drain --help`.
pub const DRAIN_HELP: &str = "\
usage: ferrolet drain [--config FILE] [--state-dir DIR]

Stops every container and removes every pod, with no agent running.
";

/// `ferrolet logs --help`.
pub const LOGS_HELP: &str = "\
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
pub const EXEC_HELP: &str = "\
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
pub const VERSION_HELP: &str = "\
usage: ferrolet version

Prints the version.
";

/// The help of a subcommand (the whole usage for `help` and anything unknown).
pub fn help_for(cmd: &str) -> &'static str {
    match cmd {
        "run" => RUN_HELP,
        "validate" => VALIDATE_HELP,
        "get" => GET_HELP,
        "describe" => DESCRIBE_HELP,
        "top" => TOP_HELP,
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
pub struct Flags {
    /// `-h`/`--help` was given: print the subcommand's help and do nothing else.
    pub help: bool,
    pub config: Option<PathBuf>,
    pub overrides: Overrides,
    pub output: Option<Output>,
    pub server: Option<String>,
    pub for_object: Option<String>,
    pub watch: bool,
    /// `plan` flags named like kubelet's, by name without the dashes.
    pub plan: std::collections::BTreeMap<&'static str, String>,
    /// `logs` and `exec`: `-c`, `-n`.
    pub container: Option<String>,
    pub namespace: Option<String>,
    /// `logs`: `-p`, `--tail`, `-f`, `--timestamps`.
    pub previous: bool,
    pub tail: Option<String>,
    pub follow: bool,
    pub timestamps: bool,
    /// `top`: `-A`, `--containers`, `--sort-by`.
    pub all_namespaces: bool,
    pub containers: bool,
    pub sort_by: Option<String>,
    /// `exec`: `--timeout`, and the command after `--`.
    pub timeout: Option<String>,
    pub command: Option<Vec<String>>,
    pub positional: Vec<String>,
}

/// The `plan` flags, named like kubelet's.
pub const PLAN_FLAGS: [&str; 8] =
    ["cpus", "memory", "pids", "system-reserved", "kube-reserved", "qos-reserved", "cgroup-version", "cgroup-root"];

/// The value of `flag`, as the next argument or after `=`.
pub fn value(p: &mut lexopt::Parser, flag: &str) -> anyhow::Result<String> {
    let v = p.value().map_err(|_| anyhow::anyhow!("{flag} needs a value"))?;
    v.into_string().map_err(|v| anyhow::anyhow!("{flag}: {v:?} is not UTF-8"))
}

/// Parses the flags after the subcommand. It never exits: `--help` is returned as
/// `Flags::help`, and a bad flag as an error the caller prints with the usage.
pub fn parse_flags(args: impl IntoIterator<Item = std::ffi::OsString>) -> anyhow::Result<Flags> {
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
            Short('A') | Long("all-namespaces") => f.all_namespaces = true,
            Long("containers") => f.containers = true,
            Long("sort-by") => f.sort_by = Some(value(&mut p, &flag)?),
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

/// `args` split at the first `--`: what is before it, and the words after it (`exec`'s
/// command, taken as they are), or `None` when there is no `--`.
pub fn split_at_dashes(
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn top_flags_are_kubectls() {
        let f = parse(&["pods", "-A", "--containers", "--sort-by", "memory"]).unwrap();
        assert!(f.all_namespaces && f.containers);
        assert_eq!((f.positional, f.sort_by.as_deref()), (vec!["pods".to_string()], Some("memory")));
        assert!(parse(&["pods", "--all-namespaces"]).unwrap().all_namespaces);
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
        for cmd in ["run", "validate", "get", "describe", "top", "logs", "exec", "plan", "drain", "version"] {
            let h = help_for(cmd);
            assert!(h.starts_with(&format!("usage: ferrolet {cmd}")), "{cmd}: {h}");
        }
        assert_eq!(help_for("help"), USAGE);
    }
}
