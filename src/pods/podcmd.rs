//! `ferrolet logs` and `ferrolet exec`: find a pod's container in the runtime by its labels,
//! as `crictl` does (no agent needed), then print its log (`podlogs`) or run a command in it
//! (`ContainerRuntime::exec_interactive`). The choices are pure and unit-tested: which containers
//! the pod has and in which order (`pod_containers`), which one to use (`choose_container`),
//! which instance (`choose_instance`), and the exit code of an exec (`exec_exit_code`). The
//! two executors at the end only call the runtime and print.

use super::ContainerKind;
use crate::api::fields::RuntimeKind;
use crate::node::podlogs::{self, Follow, LogError, LogOptions};
use crate::node::runtime::exec::EXEC_OUTPUT_CAP;
use crate::node::runtime::{labels, ContainerInfo, ContainerRuntime, ContainerState, ExecResult, RuntimeError};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The namespace without `-n` (kubectl's).
pub const DEFAULT_NAMESPACE: &str = "default";
/// kubectl's annotation naming the container `logs` and `exec` use without `-c`.
pub const DEFAULT_CONTAINER_ANNOTATION: &str = "kubectl.kubernetes.io/default-container";
/// `exec`'s timeout without `--timeout`.
pub const DEFAULT_EXEC_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest `--timeout`.
pub const MAX_EXEC_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// The exit code of an `exec` whose command ran past its timeout (as `timeout(1)`).
pub const EXIT_TIMED_OUT: u8 = 124;
/// The exit code of a command interrupted by SIGINT or SIGTERM (as a shell reports it).
pub const EXIT_INTERRUPTED: u8 = 130;
/// How often `logs -f` asks the runtime whether the instance still runs.
pub const RUNNING_CHECK: Duration = Duration::from_secs(1);

/// What `logs` or `exec` could not do.
#[derive(Debug, thiserror::Error)]
pub enum PodCmdError {
    /// A flag's value is not allowed.
    #[error("{flag}: {message}")]
    Flag {
        /// The flag.
        flag: &'static str,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// The runtime could not list its containers or sandboxes.
    #[error("cannot list the runtime's {what}")]
    List {
        /// `containers` or `sandboxes`.
        what: &'static str,
        /// Why.
        #[source]
        source: RuntimeError,
    },
    /// No container of the runtime belongs to the pod.
    #[error("pod {name:?} not found in namespace {namespace:?} ({known})")]
    PodNotFound {
        /// The pod's name.
        name: String,
        /// Its namespace.
        namespace: String,
        /// The pods that have containers, or that there are none.
        known: String,
    },
    /// The pod has no container of that name.
    #[error("container {container:?} not found in pod {pod:?} (its containers: {known})")]
    ContainerNotFound {
        /// The name asked for.
        container: String,
        /// The pod.
        pod: String,
        /// Its containers, as kubectl lists them.
        known: String,
    },
    /// `--previous` with only one instance (kubectl's words).
    #[error("previous terminated container {container:?} in pod {pod:?} not found")]
    PreviousNotFound {
        /// The container.
        container: String,
        /// The pod.
        pod: String,
    },
    /// `exec` into a container whose newest instance does not run.
    #[error("container {container:?} in pod {pod:?} is not running ({state})")]
    NotRunning {
        /// The container.
        container: String,
        /// The pod.
        pod: String,
        /// What it is instead.
        state: String,
    },
    /// The instance's log could not be read or printed.
    #[error("logs of {subject}")]
    Logs {
        /// `container "app" in pod "web"`.
        subject: String,
        /// Why.
        #[source]
        source: LogError,
    },
    /// `logs -f` lost the runtime while following.
    #[error("following {subject}: cannot ask the runtime whether it still runs")]
    Follow {
        /// `container "app" in pod "web"`.
        subject: String,
        /// Why.
        #[source]
        source: RuntimeError,
    },
    /// The command could not be run.
    #[error("exec in {subject}")]
    Exec {
        /// `container "app" in pod "web"`.
        subject: String,
        /// Why.
        #[source]
        source: RuntimeError,
    },
    /// Signal handlers could not be installed.
    #[error("cannot install signal handlers")]
    Signals(#[source] std::io::Error),
    /// The output could not be written.
    #[error("cannot write the output")]
    Write(#[source] std::io::Error),
}

/// A pod by namespace and name (as `ferrolet get pods` shows it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// One container of a pod as the runtime has it.
#[derive(Clone, Debug)]
pub struct PodContainer {
    /// Its name.
    pub name: String,
    /// Init (sidecars too) or app: kubectl lists init containers after app containers.
    pub init: bool,
    /// Its index in its list of the spec (`None` for containers made before ferrolet
    /// recorded it: they sort by name after the others).
    pub index: Option<u32>,
    /// Its instances, newest first (by attempt, then creation).
    pub instances: Vec<ContainerInfo>,
}

impl PodContainer {
    /// The name as kubectl lists it: init containers with ` (init)`.
    fn listed(&self) -> String {
        if self.init {
            format!("{} (init)", self.name)
        } else {
            self.name.clone()
        }
    }
}

fn label<'a>(c: &'a ContainerInfo, key: &str) -> &'a str {
    labels::get(&c.config.labels, key).unwrap_or("")
}

/// The containers of pod `pod` among `all`, app containers first, each list in spec order.
/// When containers of two pods of that name are there (a pod replaced by a changed
/// manifest while the old one ends), those of the pod with the newest instance.
pub fn pod_containers(all: Vec<ContainerInfo>, pod: &PodRef) -> Vec<PodContainer> {
    let mut mine: Vec<ContainerInfo> = all
        .into_iter()
        .filter(|c| label(c, labels::POD_NAME) == pod.name && label(c, labels::POD_NAMESPACE) == pod.namespace)
        .collect();
    let newest_uid = mine.iter().max_by_key(|c| c.created_at).map(|c| label(c, labels::POD_UID).to_string());
    mine.retain(|c| Some(label(c, labels::POD_UID)) == newest_uid.as_deref());
    let mut out: Vec<PodContainer> = Vec::new();
    for c in mine {
        let name = match label(&c, labels::CONTAINER_NAME) {
            "" => c.config.name.clone(),
            n => n.to_string(),
        };
        match out.iter_mut().find(|p| p.name == name) {
            Some(p) => p.instances.push(c),
            None => {
                let kind = label(&c, labels::CONTAINER_KIND);
                out.push(PodContainer {
                    name,
                    init: kind == ContainerKind::Init.as_str() || kind == ContainerKind::Sidecar.as_str(),
                    index: label(&c, labels::CONTAINER_INDEX).parse().ok(),
                    instances: vec![c],
                })
            }
        }
    }
    for p in &mut out {
        p.instances.sort_by_key(|i| std::cmp::Reverse((i.config.attempt, i.created_at)));
    }
    out.sort_by(|a, b| {
        (a.init, a.index.is_none(), a.index, &a.name).cmp(&(b.init, b.index.is_none(), b.index, &b.name))
    });
    out
}

/// `namespace/name` of every pod that has containers among `all`, sorted.
fn pods_of(all: &[ContainerInfo]) -> Vec<String> {
    let mut pods: Vec<String> =
        all.iter().map(|c| format!("{}/{}", label(c, labels::POD_NAMESPACE), label(c, labels::POD_NAME))).collect();
    pods.sort();
    pods.dedup();
    pods
}

/// The container to use, and kubectl's notice when it was chosen for the user: `requested`
/// (`-c`), else the one the pod's default-container annotation names, else the only one,
/// else the first app container (with `Defaulted container "a" out of: a, b`).
pub fn choose_container<'a>(
    containers: &'a [PodContainer],
    pod: &str,
    requested: Option<&str>,
    annotated: Option<&str>,
) -> Result<(&'a PodContainer, Option<String>), PodCmdError> {
    let known = || containers.iter().map(PodContainer::listed).collect::<Vec<_>>().join(", ");
    if let Some(name) = requested {
        return match containers.iter().find(|c| c.name == name) {
            Some(c) => Ok((c, None)),
            None => Err(PodCmdError::ContainerNotFound { container: name.into(), pod: pod.into(), known: known() }),
        };
    }
    if let Some(c) = annotated.and_then(|name| containers.iter().find(|c| c.name == name)) {
        return Ok((c, None));
    }
    // App containers come first; a pod whose app containers were never made shows its
    // init containers.
    let Some(first) = containers.first() else {
        return Err(PodCmdError::ContainerNotFound { container: String::new(), pod: pod.into(), known: known() });
    };
    let notice = (containers.len() > 1).then(|| format!("Defaulted container {:?} out of: {}", first.name, known()));
    Ok((first, notice))
}

/// The instance to use: the newest, or with `previous` the one before it.
pub fn choose_instance<'a>(c: &'a PodContainer, pod: &str, previous: bool) -> Result<&'a ContainerInfo, PodCmdError> {
    let i = usize::from(previous);
    c.instances.get(i).ok_or_else(|| PodCmdError::PreviousNotFound { container: c.name.clone(), pod: pod.into() })
}

/// `--tail`: a number of lines up to `podlogs::MAX_TAIL`, or -1 for all (kubectl's default).
pub fn parse_tail(text: &str) -> Result<Option<u64>, PodCmdError> {
    let err = |message: String| PodCmdError::Flag { flag: "--tail", message };
    match text.trim().parse::<i64>() {
        Ok(-1) => Ok(None),
        Ok(n) if n >= 0 && n as u64 <= podlogs::MAX_TAIL => Ok(Some(n as u64)),
        Ok(n) => Err(err(format!("{n} is out of range: give 0 to {} lines, or -1 for all", podlogs::MAX_TAIL))),
        Err(_) => Err(err(format!("{text:?} is not a number of lines"))),
    }
}

/// `--timeout`: a Go-style duration from 1s to `MAX_EXEC_TIMEOUT`.
pub fn parse_timeout(text: &str) -> Result<Duration, PodCmdError> {
    let err = |message: String| PodCmdError::Flag { flag: "--timeout", message };
    let d = crate::base::timefmt::parse_duration(text).map_err(|e| err(e.to_string()))?;
    if d < Duration::from_secs(1) || d > MAX_EXEC_TIMEOUT {
        return Err(err(format!("{text:?} is out of range: give 1s to 24h")));
    }
    Ok(d)
}

/// The exit code `exec` ends with: the command's (128 + N when killed by signal N),
/// `EXIT_TIMED_OUT` when it ran past its timeout, 255 when the code fits no exit status.
pub fn exec_exit_code(r: &ExecResult) -> u8 {
    if r.timed_out {
        return EXIT_TIMED_OUT;
    }
    u8::try_from(r.exit_code).unwrap_or(u8::MAX)
}

/// `container "app" in pod "web"`, for messages.
fn subject(c: &PodContainer, pod: &str) -> String {
    format!("container {:?} in pod {pod:?}", c.name)
}

/// What an instance is, for messages.
fn state_of(c: &ContainerInfo) -> String {
    match c.state {
        ContainerState::Running => "running".into(),
        ContainerState::Created => "created, not started".into(),
        ContainerState::Exited if c.reason.is_empty() => format!("exited with code {}", c.exit_code),
        ContainerState::Exited => format!("exited with code {}: {}", c.exit_code, c.reason),
    }
}

/// What `logs` and `exec` take.
#[derive(Clone, Debug)]
pub struct Target {
    /// The pod.
    pub pod: PodRef,
    /// `-c`.
    pub container: Option<String>,
}

/// The container `target` names, found in `runtime`, and kubectl's notice when it chose one.
pub fn find(runtime: &dyn ContainerRuntime, target: &Target) -> Result<(PodContainer, Option<String>), PodCmdError> {
    let all = runtime.list_containers().map_err(|source| PodCmdError::List { what: "containers", source })?;
    let pods = pods_of(&all);
    let containers = pod_containers(all, &target.pod);
    if containers.is_empty() {
        let known = if pods.is_empty() {
            "the runtime has no pod containers".to_string()
        } else {
            format!("pods with containers: {}", pods.join(", "))
        };
        return Err(PodCmdError::PodNotFound {
            name: target.pod.name.clone(),
            namespace: target.pod.namespace.clone(),
            known,
        });
    }
    // The default-container annotation is the pod's, on its sandbox; asked only when it
    // could matter.
    let annotated = if target.container.is_none() && containers.len() > 1 {
        let sandbox = &containers[0].instances[0].sandbox_id;
        let sandboxes =
            runtime.list_pod_sandboxes().map_err(|source| PodCmdError::List { what: "sandboxes", source })?;
        sandboxes
            .into_iter()
            .find(|s| &s.id == sandbox)
            .and_then(|s| s.config.annotations.get(DEFAULT_CONTAINER_ANNOTATION).cloned())
    } else {
        None
    };
    let (chosen, notice) =
        choose_container(&containers, &target.pod.name, target.container.as_deref(), annotated.as_deref())?;
    Ok((chosen.clone(), notice))
}

/// A flag SIGINT and SIGTERM set, instead of ending the process.
/// Whether container `id` still runs, as the runtime lists it.
pub fn still_running(runtime: &dyn ContainerRuntime, id: &str) -> Result<bool, RuntimeError> {
    Ok(runtime.list_containers()?.iter().any(|i| i.id == id && i.state == ContainerState::Running))
}

/// `find`, its notice said on stderr.
fn found(runtime: &dyn ContainerRuntime, target: &Target) -> Result<PodContainer, PodCmdError> {
    let (c, notice) = find(runtime, target)?;
    if let Some(n) = notice {
        eprintln!("{n}");
    }
    Ok(c)
}

fn interrupt_flag() -> Result<Arc<AtomicBool>, PodCmdError> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [libc::SIGINT, libc::SIGTERM] {
        signal_hook::flag::register(sig, flag.clone()).map_err(PodCmdError::Signals)?;
    }
    Ok(flag)
}

/// `ferrolet logs`: prints the log of the chosen instance; with `follow` and a running
/// instance, follows it until it stops running (asked every `RUNNING_CHECK`), SIGINT or
/// SIGTERM. Returns the exit code: 0, or `EXIT_INTERRUPTED`.
pub fn logs(
    runtime: &dyn ContainerRuntime,
    target: &Target,
    previous: bool,
    follow: bool,
    opts: LogOptions,
) -> Result<u8, PodCmdError> {
    let c = found(runtime, target)?;
    let pod = &target.pod.name;
    let instance = choose_instance(&c, pod, previous)?;
    // Flushed by the printer after each read of the files.
    let out = std::io::BufWriter::new(std::io::stdout().lock());
    let flag = interrupt_flag()?;
    let mut interrupted = false;
    let mut go_on = || {
        interrupted |= flag.load(Ordering::Relaxed);
        !interrupted
    };
    let malformed = write_logs(runtime, &c, instance, pod, follow, opts, out, &mut go_on)?;
    if malformed > 0 {
        eprintln!("warning: skipped {malformed} malformed line(s) in the log of container {:?}", c.name);
    }
    Ok(if interrupted { EXIT_INTERRUPTED } else { 0 })
}

/// Writes the log of `instance` (of container `c` in pod `pod`) to `out`; with `follow` and
/// while the instance runs, goes on as it is written until it ends or `go_on` says no
/// (asked every `podlogs::FOLLOW_POLL`). Returns the malformed lines skipped.
#[allow(clippy::too_many_arguments)]
pub fn write_logs(
    runtime: &dyn ContainerRuntime,
    c: &PodContainer,
    instance: &ContainerInfo,
    pod: &str,
    follow: bool,
    opts: LogOptions,
    out: impl Write,
    go_on: &mut dyn FnMut() -> bool,
) -> Result<u64, PodCmdError> {
    let logs_err = |source| PodCmdError::Logs { subject: subject(c, pod), source };
    if !(follow && instance.state == ContainerState::Running) {
        return podlogs::print_logs(&instance.config.log_path, opts, out, None).map_err(logs_err);
    }
    let mut lost: Option<RuntimeError> = None;
    let mut checked = Instant::now();
    let mut still_running = || {
        if !go_on() {
            return Follow::Stop;
        }
        if checked.elapsed() < RUNNING_CHECK {
            return Follow::Go;
        }
        checked = Instant::now();
        match still_running(runtime, &instance.id) {
            Ok(true) => Follow::Go,
            Ok(false) => Follow::Finish,
            Err(e) => {
                lost = Some(e);
                Follow::Stop
            }
        }
    };
    let malformed =
        podlogs::print_logs(&instance.config.log_path, opts, out, Some(&mut still_running)).map_err(logs_err)?;
    match lost {
        Some(source) => Err(PodCmdError::Follow { subject: subject(c, pod), source }),
        None => Ok(malformed),
    }
}

/// `ferrolet exec`: runs `command` in the newest instance of the chosen container, which
/// must be running, for at most `timeout` (`ContainerRuntime::exec_interactive`); prints its
/// stdout and stderr (each capped at `EXEC_OUTPUT_CAP`) and returns its exit code
/// (`exec_exit_code`), or `EXIT_INTERRUPTED` after SIGINT or SIGTERM.
pub fn exec(
    runtime: &dyn ContainerRuntime,
    target: &Target,
    command: &[String],
    timeout: Duration,
) -> Result<u8, PodCmdError> {
    let c = found(runtime, target)?;
    let pod = &target.pod.name;
    let instance = choose_instance(&c, pod, false)?;
    if instance.state != ContainerState::Running {
        return Err(PodCmdError::NotRunning { container: c.name.clone(), pod: pod.clone(), state: state_of(instance) });
    }
    let exec_err = |source| PodCmdError::Exec { subject: subject(&c, pod), source };
    let interrupt = interrupt_flag()?;
    let ended = exec_ended(runtime.kind());
    let Some(result) = runtime.exec_interactive(&instance.id, command, timeout, &interrupt).map_err(exec_err)? else {
        eprintln!("interrupted: {ended}");
        return Ok(EXIT_INTERRUPTED);
    };
    std::io::stdout().write_all(&result.stdout).and_then(|()| std::io::stdout().flush()).map_err(PodCmdError::Write)?;
    std::io::stderr().write_all(&result.stderr).map_err(PodCmdError::Write)?;
    for (name, out) in [("stdout", &result.stdout), ("stderr", &result.stderr)] {
        if out.len() >= EXEC_OUTPUT_CAP {
            eprintln!("warning: the command's {name} reached the cap of {EXEC_OUTPUT_CAP} bytes; the rest was dropped");
        }
    }
    if result.timed_out {
        eprintln!(
            "error: the command ran past its timeout of {} (exit code {EXIT_TIMED_OUT}): {ended}",
            crate::base::timefmt::go_duration(timeout)
        );
    }
    Ok(exec_exit_code(&result))
}

/// What happened to a command `ferrolet exec` stopped waiting for, on the runtime `kind`.
fn exec_ended(kind: RuntimeKind) -> &'static str {
    if kind == RuntimeKind::Cri {
        "its stream was closed (containerd 2 kills the command then; containerd 1.x lets it run to its end)"
    } else {
        "the command was killed"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::runtime::ContainerConfig;
    use std::collections::BTreeMap;
    use std::time::UNIX_EPOCH;

    fn info(pod: &str, uid: &str, name: &str, kind: &str, index: Option<u32>, attempt: u32, at: u64) -> ContainerInfo {
        let mut labels = BTreeMap::from([
            (labels::POD_NAME.to_string(), pod.to_string()),
            (labels::POD_NAMESPACE.to_string(), "default".to_string()),
            (labels::POD_UID.to_string(), uid.to_string()),
            (labels::CONTAINER_NAME.to_string(), name.to_string()),
        ]);
        if !kind.is_empty() {
            labels.insert(crate::node::runtime::labels::CONTAINER_KIND.into(), kind.into());
        }
        if let Some(i) = index {
            labels.insert(crate::node::runtime::labels::CONTAINER_INDEX.into(), i.to_string());
        }
        ContainerInfo {
            image_ref: String::new(),
            id: format!("{uid}-{name}-{attempt}"),
            sandbox_id: format!("s-{uid}"),
            config: Arc::new(ContainerConfig { name: name.into(), attempt, labels, ..Default::default() }),
            state: ContainerState::Exited,
            created_at: UNIX_EPOCH + Duration::from_secs(at),
            started_at: None,
            finished_at: None,
            exit_code: 1,
            reason: "Error".into(),
            message: String::new(),
            pid: None,
        }
    }

    fn web() -> PodRef {
        PodRef { namespace: "default".into(), name: "web".into() }
    }

    fn names(cs: &[PodContainer]) -> Vec<String> {
        cs.iter().map(PodContainer::listed).collect()
    }

    #[test]
    fn a_pods_containers_are_listed_app_first_in_spec_order() {
        let all = vec![
            info("web", "u1", "zeta", "app", Some(0), 0, 10),
            info("web", "u1", "alpha", "app", Some(1), 0, 11),
            info("web", "u1", "setup", "init", Some(0), 0, 5),
            info("web", "u1", "proxy", "sidecar", Some(1), 0, 6),
            info("web", "u1", "old", "", None, 0, 7),
            info("other", "u9", "x", "app", Some(0), 0, 99),
        ];
        let cs = pod_containers(all, &web());
        assert_eq!(names(&cs), ["zeta", "alpha", "old", "setup (init)", "proxy (init)"]);
    }

    #[test]
    fn instances_are_newest_first_and_a_replaced_pods_containers_are_left_out() {
        let all = vec![
            info("web", "old-uid", "app", "app", Some(0), 7, 1),
            info("web", "u2", "app", "app", Some(0), 0, 10),
            info("web", "u2", "app", "app", Some(0), 2, 30),
            info("web", "u2", "app", "app", Some(0), 1, 20),
        ];
        let cs = pod_containers(all, &web());
        assert_eq!(cs.len(), 1);
        let attempts: Vec<u32> = cs[0].instances.iter().map(|i| i.config.attempt).collect();
        assert_eq!(attempts, [2, 1, 0]);
        assert_eq!(choose_instance(&cs[0], "web", false).unwrap().config.attempt, 2);
        assert_eq!(choose_instance(&cs[0], "web", true).unwrap().config.attempt, 1);
    }

    #[test]
    fn previous_without_an_earlier_instance_is_kubectls_error() {
        let cs = pod_containers(vec![info("web", "u1", "app", "app", Some(0), 0, 1)], &web());
        let e = choose_instance(&cs[0], "web", true).unwrap_err();
        assert_eq!(e.to_string(), r#"previous terminated container "app" in pod "web" not found"#);
    }

    #[test]
    fn the_default_container_is_the_only_one_or_the_first_app_container_with_a_notice() {
        let one = pod_containers(vec![info("web", "u1", "app", "app", Some(0), 0, 1)], &web());
        let (c, notice) = choose_container(&one, "web", None, None).unwrap();
        assert_eq!((c.name.as_str(), notice), ("app", None));
        let all = vec![
            info("web", "u1", "b", "app", Some(1), 0, 1),
            info("web", "u1", "a", "app", Some(0), 0, 2),
            info("web", "u1", "init", "init", Some(0), 0, 0),
        ];
        let cs = pod_containers(all, &web());
        let (c, notice) = choose_container(&cs, "web", None, None).unwrap();
        assert_eq!(c.name, "a");
        assert_eq!(notice.unwrap(), r#"Defaulted container "a" out of: a, b, init (init)"#);
        // kubectl's annotation wins, silently; one naming no container is ignored.
        let (c, notice) = choose_container(&cs, "web", None, Some("b")).unwrap();
        assert_eq!((c.name.as_str(), notice), ("b", None));
        assert_eq!(choose_container(&cs, "web", None, Some("nope")).unwrap().0.name, "a");
        // -c picks any, init containers too.
        assert_eq!(choose_container(&cs, "web", Some("init"), Some("b")).unwrap().0.name, "init");
    }

    #[test]
    fn an_unknown_container_is_named_with_the_pods_containers() {
        let cs = pod_containers(
            vec![info("web", "u1", "a", "app", Some(0), 0, 1), info("web", "u1", "i", "init", Some(0), 0, 0)],
            &web(),
        );
        let e = choose_container(&cs, "web", Some("nope"), None).unwrap_err();
        assert_eq!(e.to_string(), r#"container "nope" not found in pod "web" (its containers: a, i (init))"#);
    }

    #[test]
    fn tail_and_timeout_are_bounded() {
        assert_eq!(parse_tail("-1").unwrap(), None);
        assert_eq!(parse_tail("0").unwrap(), Some(0));
        assert_eq!(parse_tail("20").unwrap(), Some(20));
        assert!(parse_tail("-2").unwrap_err().to_string().starts_with("--tail: -2 is out of range: give 0 to 1000000"));
        assert!(parse_tail("1000001").is_err());
        assert_eq!(parse_tail("ten").unwrap_err().to_string(), r#"--tail: "ten" is not a number of lines"#);
        assert_eq!(parse_timeout("1m30s").unwrap(), Duration::from_secs(90));
        assert!(parse_timeout("500ms").unwrap_err().to_string().contains("give 1s to 24h"));
        assert!(parse_timeout("25h").is_err());
        assert!(parse_timeout("soon").unwrap_err().to_string().starts_with("--timeout: "));
    }

    #[test]
    fn exec_ends_with_the_commands_code_or_124_on_a_timeout() {
        let r = |exit_code, timed_out| ExecResult { exit_code, timed_out, ..Default::default() };
        assert_eq!(exec_exit_code(&r(0, false)), 0);
        assert_eq!(exec_exit_code(&r(7, false)), 7);
        assert_eq!(exec_exit_code(&r(137, false)), 137);
        assert_eq!(exec_exit_code(&r(-1, true)), EXIT_TIMED_OUT);
        assert_eq!(exec_exit_code(&r(300, false)), 255);
        assert_eq!(exec_exit_code(&r(-5, false)), 255);
    }

    #[test]
    fn a_container_that_is_not_running_says_how_it_ended() {
        let mut c = info("web", "u1", "app", "app", Some(0), 0, 1);
        assert_eq!(state_of(&c), "exited with code 1: Error");
        c.state = ContainerState::Created;
        assert_eq!(state_of(&c), "created, not started");
    }
}
