//! Pure translations between ferrolet's runtime types and CRI v1 messages: what
//! `CriRuntime` sends (sandbox and container configs) and how it reads back what the
//! runtime reports (sandboxes and container statuses). No I/O here; the executor in
//! `runtime.rs` only makes the calls.

use super::super::stats::{RuntimeContainerStats, RuntimeCpu, RuntimeFsUsage, RuntimeMemory, RuntimePodStats};
use super::super::{
    labels, ContainerConfig, ContainerInfo, ContainerState, ExecResult, ImageFsInfo, ImageInfo, Propagation, PullAuth,
    SandboxConfig, SandboxInfo, StreamIo,
};
use crate::api::security::{ContainerSecurity, Profile, SandboxSecurity};
use crate::proto::cri;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Annotation holding the `SandboxConfig` (JSON) a sandbox was made with, so a relist (also
/// after an agent restart) reports it as created.
pub const SANDBOX_CONFIG_ANNOTATION: &str = "io.ferrolet.sandbox-config";
/// Annotation holding the `ContainerConfig` (JSON) a container was made with.
pub const CONTAINER_CONFIG_ANNOTATION: &str = "io.ferrolet.container-config";

/// A translation that cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum TranslateError {
    /// The container's log file is not under its sandbox's log directory (CRI takes the log
    /// path relative to it).
    #[error("log path {log_path} is not under the sandbox's log directory {log_directory}")]
    LogPath {
        /// The container's log path.
        log_path: String,
        /// The sandbox's log directory.
        log_directory: String,
    },
    /// A config could not be written into its annotation.
    #[error("cannot encode the {what} config")]
    Encode {
        /// `sandbox` or `container`.
        what: &'static str,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// A cgroup control file value is not a number.
    #[error("cgroup control file {file}: {value:?} is not a number")]
    ControlFile {
        /// The file, e.g. `cpu.shares`.
        file: String,
        /// Its value.
        value: String,
    },
}

/// The labels on every object the agent of node `node` makes, which it lists its own by
/// (`ListPodSandbox`, `ListContainers`): agents of two nodes may share one runtime.
pub fn owner_labels(node: &str) -> HashMap<String, String> {
    HashMap::from([
        (labels::MANAGED_BY.to_string(), labels::MANAGED_BY_FERROLET.to_string()),
        (labels::NODE.to_string(), node.to_string()),
    ])
}

/// The `PodSandboxConfig` for `config`, as kubelet makes it: metadata, kubelet's pod labels,
/// the annotations, the log directory, the pod cgroup as `cgroup_parent`, the pod's hostname
/// and resolver configuration; a host-network pod gets `NamespaceMode::NODE` and no hostname
/// (it shares the host's UTS namespace, and runc refuses a hostname there); the pod's
/// security context and namespaced sysctls.
pub fn sandbox_config(
    config: &SandboxConfig,
    owner: &HashMap<String, String>,
) -> Result<cri::PodSandboxConfig, TranslateError> {
    let mut c = cri::PodSandboxConfig::new();
    let m = c.mut_metadata();
    m.set_name(config.pod_name.clone());
    m.set_uid(config.pod_uid.clone());
    m.set_namespace(config.namespace.clone());
    m.set_attempt(config.attempt);
    if !config.host_network {
        let hostname = if config.hostname.is_empty() { &config.pod_name } else { &config.hostname };
        c.set_hostname(hostname.clone());
    }
    if let Some(d) = &config.dns {
        let dns = c.mut_dns_config();
        dns.set_servers(d.servers.clone());
        dns.set_searches(d.searches.clone());
        dns.set_options(d.options.clone());
    }
    c.set_log_directory(config.log_directory.display().to_string());
    let l = c.mut_labels();
    l.insert(labels::POD_NAME.into(), config.pod_name.clone());
    l.insert(labels::POD_NAMESPACE.into(), config.namespace.clone());
    l.insert(labels::POD_UID.into(), config.pod_uid.clone());
    l.extend(owner.iter().map(|(k, v)| (k.clone(), v.clone())));
    let a = c.mut_annotations();
    a.extend(config.annotations.iter().map(|(k, v)| (k.clone(), v.clone())));
    let json = serde_json::to_string(config).map_err(|source| TranslateError::Encode { what: "sandbox", source })?;
    a.insert(SANDBOX_CONFIG_ANNOTATION.into(), json);
    c.set_port_mappings(
        config
            .port_mappings
            .iter()
            .map(|m| {
                let mut pm = cri::PortMapping::new();
                pm.set_protocol(match m.protocol.as_str() {
                    "UDP" => cri::Protocol::UDP,
                    "SCTP" => cri::Protocol::SCTP,
                    _ => cri::Protocol::TCP,
                });
                pm.set_container_port(m.container_port);
                pm.set_host_port(m.host_port);
                pm
            })
            .collect(),
    );
    let linux = c.mut_linux();
    linux.set_cgroup_parent(config.cgroup_parent.clone());
    linux.set_security_context(sandbox_security(config));
    linux.set_sysctls(config.security.sysctls.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
    Ok(c)
}

/// kubelet's namespaces for a pod (`NamespacesForPod`): PID the node's with `hostPID`, the
/// pod's with `shareProcessNamespace`, else each container's own; IPC the node's with
/// `hostIPC`, else the pod's; network the node's with `hostNetwork`, else the pod's.
pub fn namespace_options(config: &SandboxConfig) -> cri::NamespaceOption {
    let sec = &config.security;
    let mut ns = cri::NamespaceOption::new();
    ns.set_pid(match (sec.host_pid, sec.share_process_namespace) {
        (true, _) => cri::NamespaceMode::NODE,
        (false, true) => cri::NamespaceMode::POD,
        (false, false) => cri::NamespaceMode::CONTAINER,
    });
    ns.set_ipc(if sec.host_ipc { cri::NamespaceMode::NODE } else { cri::NamespaceMode::POD });
    ns.set_network(if config.host_network { cri::NamespaceMode::NODE } else { cri::NamespaceMode::POD });
    ns
}

/// A profile in CRI's terms.
fn security_profile(p: &Profile) -> cri::SecurityProfile {
    let mut sp = cri::SecurityProfile::new();
    match p {
        Profile::RuntimeDefault => sp.set_profile_type(cri::security_profile::ProfileType::RuntimeDefault),
        Profile::Unconfined => sp.set_profile_type(cri::security_profile::ProfileType::Unconfined),
        Profile::Localhost(name) => {
            sp.set_profile_type(cri::security_profile::ProfileType::Localhost);
            sp.set_localhost_ref(name.clone());
        }
    }
    sp
}

/// The seccomp profile kubelet sends: the one asked for, else `Unconfined` (kubelet's
/// default without `seccompDefault`).
fn seccomp_profile(p: &Option<Profile>) -> cri::SecurityProfile {
    security_profile(p.as_ref().unwrap_or(&Profile::Unconfined))
}

fn int64(v: i64) -> cri::Int64Value {
    let mut i = cri::Int64Value::new();
    i.set_value(v);
    i
}

/// The sandbox's `LinuxSandboxSecurityContext` (kubelet's `generatePodSandboxLinuxConfig`):
/// namespaces, the pod's uid, gid, groups and seccomp profile, privileged when any container is.
pub fn sandbox_security(config: &SandboxConfig) -> cri::LinuxSandboxSecurityContext {
    let sec: &SandboxSecurity = &config.security;
    let mut sc = cri::LinuxSandboxSecurityContext::new();
    sc.set_namespace_options(namespace_options(config));
    if let Some(uid) = sec.run_as_user {
        sc.set_run_as_user(int64(uid));
    }
    if let Some(gid) = sec.run_as_group {
        sc.set_run_as_group(int64(gid));
    }
    sc.set_supplemental_groups(sec.supplemental_groups.clone());
    sc.set_privileged(sec.privileged);
    sc.set_seccomp(seccomp_profile(&sec.seccomp));
    sc
}

/// A container's `LinuxContainerSecurityContext` (kubelet's `determineEffectiveSecurityContext`
/// and `convertToRuntimeSecurityContext`): capabilities as written, privileged, the pod's
/// namespaces, uid, gid, groups, read-only root, `no_new_privs`, kubelet's masked and
/// read-only paths (none with `procMount: Unmasked`), seccomp and AppArmor profiles.
pub fn container_security(sec: &ContainerSecurity, sandbox: &SandboxConfig) -> cri::LinuxContainerSecurityContext {
    let mut sc = cri::LinuxContainerSecurityContext::new();
    if !sec.add_capabilities.is_empty() || !sec.drop_capabilities.is_empty() {
        let caps = sc.mut_capabilities();
        caps.set_add_capabilities(sec.add_capabilities.clone());
        caps.set_drop_capabilities(sec.drop_capabilities.clone());
    }
    sc.set_privileged(sec.privileged);
    sc.set_namespace_options(namespace_options(sandbox));
    if let Some(uid) = sec.run_as_user {
        sc.set_run_as_user(int64(uid));
    }
    if let Some(gid) = sec.run_as_group {
        sc.set_run_as_group(int64(gid));
    }
    sc.set_readonly_rootfs(sec.readonly_rootfs);
    sc.set_supplemental_groups(sec.supplemental_groups.clone());
    sc.set_no_new_privs(sec.no_new_privs);
    sc.set_masked_paths(sec.masked_paths());
    sc.set_readonly_paths(sec.readonly_paths());
    sc.set_seccomp(seccomp_profile(&sec.seccomp));
    if let Some(p) = &sec.apparmor {
        sc.set_apparmor(security_profile(p));
    }
    sc
}

/// `LinuxContainerResources` from the container cgroup's control files (`cm`'s values, in
/// the host's cgroup version): v1 files go to their fields; anything else (v2 files) goes to
/// `unified`, which the runtime writes as given.
pub fn resources(files: &BTreeMap<String, String>) -> Result<cri::LinuxContainerResources, TranslateError> {
    let mut r = cri::LinuxContainerResources::new();
    for (file, value) in files {
        let num = || {
            value
                .trim()
                .parse::<i64>()
                .map_err(|_| TranslateError::ControlFile { file: file.clone(), value: value.clone() })
        };
        match file.as_str() {
            "cpu.shares" => r.set_cpu_shares(num()?),
            "cpu.cfs_quota_us" => r.set_cpu_quota(num()?),
            "cpu.cfs_period_us" => r.set_cpu_period(num()?),
            "memory.limit_in_bytes" => r.set_memory_limit_in_bytes(num()?),
            _ => {
                r.mut_unified().insert(file.clone(), value.clone());
            }
        }
    }
    Ok(r)
}

/// The `CreateContainerRequest` for `config` in sandbox `sandbox_id` made from `sandbox`:
/// the argv as the command (it is already `command` + `args`), env, working directory, the
/// log path relative to the sandbox's log directory, kubelet's labels, device plugin
/// mounts, devices, annotations and CDI devices, and the cgroup values as resources.
pub fn create_container_request(
    sandbox_id: &str,
    sandbox: &SandboxConfig,
    config: &ContainerConfig,
    owner: &HashMap<String, String>,
) -> Result<cri::CreateContainerRequest, TranslateError> {
    let mut c = cri::ContainerConfig::new();
    c.mut_metadata().set_name(config.name.clone());
    c.mut_metadata().set_attempt(config.attempt);
    c.mut_image().set_image(config.image.clone());
    c.set_command(config.argv.clone());
    c.set_working_dir(config.working_dir.clone());
    // What `kubectl attach` reaches: the runtime keeps the stdin (and the terminal) open.
    c.set_stdin(config.stdin);
    c.set_stdin_once(config.stdin_once);
    c.set_tty(config.tty);
    c.set_envs(
        config
            .env
            .iter()
            .map(|(k, v)| {
                let mut kv = cri::KeyValue::new();
                kv.set_key(k.clone());
                kv.set_value(v.clone().into_bytes());
                kv
            })
            .collect(),
    );
    let relative =
        config.log_path.strip_prefix(&sandbox.log_directory).ok().filter(|p| !p.as_os_str().is_empty()).ok_or_else(
            || TranslateError::LogPath {
                log_path: config.log_path.display().to_string(),
                log_directory: sandbox.log_directory.display().to_string(),
            },
        )?;
    c.set_log_path(relative.display().to_string());
    let l = c.mut_labels();
    l.extend(config.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    l.extend(owner.iter().map(|(k, v)| (k.clone(), v.clone())));
    for m in &config.mounts {
        let mut mount = cri::Mount::new();
        mount.set_container_path(m.container_path.clone());
        mount.set_host_path(m.host_path.display().to_string());
        mount.set_readonly(m.read_only);
        mount.set_propagation(match m.propagation {
            Propagation::Private => cri::MountPropagation::PROPAGATION_PRIVATE,
            Propagation::HostToContainer => cri::MountPropagation::PROPAGATION_HOST_TO_CONTAINER,
            Propagation::Bidirectional => cri::MountPropagation::PROPAGATION_BIDIRECTIONAL,
        });
        c.mut_mounts().push(mount);
    }
    if let Some(d) = &config.devices {
        c.mut_annotations().extend(d.annotations.iter().map(|(k, v)| (k.clone(), v.clone())));
        for m in &d.mounts {
            let mut mount = cri::Mount::new();
            mount.set_container_path(m.container_path.clone());
            mount.set_host_path(m.host_path.clone());
            mount.set_readonly(m.read_only);
            c.mut_mounts().push(mount);
        }
        for dev in &d.devices {
            let mut device = cri::Device::new();
            device.set_container_path(dev.container_path.clone());
            device.set_host_path(dev.host_path.clone());
            device.set_permissions(dev.permissions.clone());
            c.mut_devices().push(device);
        }
        for name in &d.cdi_devices {
            let mut cdi = cri::CDIDevice::new();
            cdi.set_name(name.clone());
            c.mut_CDI_devices().push(cdi);
        }
    }
    let json = serde_json::to_string(config).map_err(|source| TranslateError::Encode { what: "container", source })?;
    c.mut_annotations().insert(CONTAINER_CONFIG_ANNOTATION.into(), json);
    if let Some(linux) = &config.linux {
        let mut r = resources(&linux.files)?;
        r.set_oom_score_adj(linux.oom_score_adj);
        c.mut_linux().set_resources(r);
    }
    c.mut_linux().set_security_context(container_security(&config.security, sandbox));
    let mut req = cri::CreateContainerRequest::new();
    req.set_pod_sandbox_id(sandbox_id.into());
    req.set_config(c);
    req.set_sandbox_config(sandbox_config(sandbox, owner)?);
    Ok(req)
}

/// A CRI timestamp (nanoseconds since the epoch; 0: not set).
pub fn time_from_nanos(ns: i64) -> Option<SystemTime> {
    (ns > 0).then(|| UNIX_EPOCH + Duration::from_nanos(ns as u64))
}

/// The config a sandbox was made with: from its annotation, or (for one whose annotation is
/// missing or damaged) what its metadata tells.
pub fn sandbox_config_of(metadata: &cri::PodSandboxMetadata, annotations: &HashMap<String, String>) -> SandboxConfig {
    annotations.get(SANDBOX_CONFIG_ANNOTATION).and_then(|j| serde_json::from_slice(j.as_bytes()).ok()).unwrap_or_else(
        || SandboxConfig {
            pod_uid: metadata.uid().into(),
            pod_name: metadata.name().into(),
            namespace: metadata.namespace().into(),
            attempt: metadata.attempt(),
            ..Default::default()
        },
    )
}

/// A listed sandbox as `SandboxInfo`, with its config (parsed once by the caller).
pub fn sandbox_info(s: &cri::PodSandbox, config: Arc<SandboxConfig>) -> SandboxInfo {
    SandboxInfo {
        id: s.id().into(),
        config,
        created_at: time_from_nanos(s.created_at()).unwrap_or(UNIX_EPOCH),
        ready: s.state() == cri::PodSandboxState::SANDBOX_READY,
        ips: Vec::new(),
    }
}

/// The pod's IPs from its sandbox's status: the primary, then the additional ones.
pub fn sandbox_ips(status: &cri::PodSandboxStatus) -> Vec<String> {
    let network = status.network();
    let additional = network.additional_ips().iter().map(|ip| ip.ip());
    std::iter::once(network.ip()).chain(additional).filter(|ip| !ip.is_empty()).map(String::from).collect()
}

/// The config a container was made with: from its annotation, or what its metadata, image
/// and labels tell.
pub fn container_config_of(c: &cri::Container) -> ContainerConfig {
    c.annotations()
        .get(CONTAINER_CONFIG_ANNOTATION)
        .and_then(|j| serde_json::from_slice(j.as_bytes()).ok())
        .unwrap_or_else(|| ContainerConfig {
            name: c.metadata().name().into(),
            attempt: c.metadata().attempt(),
            image: c.image().image().into(),
            labels: c.labels().iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            ..Default::default()
        })
}

/// A container's CRI status as `ContainerInfo`. A container in `CONTAINER_UNKNOWN` is
/// reported as kubelet reports it: exited with reason `ContainerStatusUnknown` and, unless
/// the runtime knows better, exit code 137, so it never passes for a success (ferrolet's
/// states have no unknown).
pub fn container_info(sandbox_id: &str, status: &cri::ContainerStatus, config: Arc<ContainerConfig>) -> ContainerInfo {
    let mut exit_code = status.exit_code();
    let (state, reason) = match status.state() {
        cri::ContainerState::CONTAINER_CREATED => (ContainerState::Created, status.reason().to_string()),
        cri::ContainerState::CONTAINER_RUNNING => (ContainerState::Running, String::new()),
        cri::ContainerState::CONTAINER_EXITED => (ContainerState::Exited, status.reason().to_string()),
        cri::ContainerState::CONTAINER_UNKNOWN => {
            if exit_code == 0 {
                exit_code = 137;
            }
            (ContainerState::Exited, "ContainerStatusUnknown".to_string())
        }
    };
    ContainerInfo {
        image_ref: status.image_ref().into(),
        id: status.id().into(),
        sandbox_id: sandbox_id.into(),
        config,
        state,
        created_at: time_from_nanos(status.created_at()).unwrap_or(UNIX_EPOCH),
        started_at: time_from_nanos(status.started_at()),
        finished_at: time_from_nanos(status.finished_at()),
        exit_code,
        reason,
        message: status.message().into(),
        // CRI reports no pid (only in verbose info, runtime-specific).
        pid: None,
    }
}

/// How long after its exit a container's status may still change: containerd sets
/// `OOMKilled` when the shim's OOM event arrives, and that can come after the exit event.
pub const EXIT_SETTLES: Duration = Duration::from_secs(5);

/// How often a container whose exited status may still change is asked again.
pub const REASK: Duration = Duration::from_secs(1);

/// Whether `info`, read at `read_at`, stands for the container at `now` while it is listed
/// in the same state: when it had settled as it was read, or was read less than `REASK` ago.
pub fn reusable(info: &ContainerInfo, read_at: SystemTime, now: SystemTime) -> bool {
    settled(info, read_at) || now.duration_since(read_at).is_ok_and(|d| d < REASK)
}

/// Whether `info`, read at `now`, stands for the container's next statuses, so a relist that
/// lists it in the same state need not ask again: a running one until it is listed otherwise;
/// an exited one once it finished `EXIT_SETTLES` ago (or its finish is unknown, or ahead of
/// the clock); a created one never.
pub fn settled(info: &ContainerInfo, now: SystemTime) -> bool {
    match info.state {
        ContainerState::Running => true,
        ContainerState::Exited => match info.finished_at {
            Some(f) => now.duration_since(f).map_or(true, |since| since >= EXIT_SETTLES),
            None => true,
        },
        ContainerState::Created => false,
    }
}

/// CRI's `ExecSync` timeout: whole seconds, rounded up, at least 1 (0 would mean none).
pub fn exec_timeout_seconds(timeout: Duration) -> i64 {
    let s = timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0);
    s.clamp(1, i64::MAX as u64) as i64
}

/// CRI's `StopContainer` grace period: whole seconds, rounded up.
pub fn stop_timeout_seconds(grace: Duration) -> i64 {
    let s = grace.as_secs() + u64::from(grace.subsec_nanos() > 0);
    s.min(i64::MAX as u64) as i64
}

/// The `ExecSyncRequest` for `cmd` in container `id`.
pub fn exec_sync_request(id: &str, cmd: &[String], timeout: Duration) -> cri::ExecSyncRequest {
    let mut req = cri::ExecSyncRequest::new();
    req.set_container_id(id.into());
    req.set_cmd(cmd.to_vec());
    req.set_timeout(exec_timeout_seconds(timeout));
    req
}

/// The `ExecRequest` for `cmd` in container `id` with the streams `io` (a terminal carries
/// no separate stderr, as kubelet asks).
pub fn exec_request(id: &str, cmd: &[String], io: StreamIo) -> cri::ExecRequest {
    let mut req = cri::ExecRequest::new();
    req.set_container_id(id.into());
    req.set_cmd(cmd.to_vec());
    req.set_tty(io.tty);
    req.set_stdin(io.stdin);
    req.set_stdout(io.stdout);
    req.set_stderr(io.stderr && !io.tty);
    req
}

/// The `AttachRequest` for container `id` with the streams `io` (as `exec_request`).
pub fn attach_request(id: &str, io: StreamIo) -> cri::AttachRequest {
    let mut req = cri::AttachRequest::new();
    req.set_container_id(id.into());
    req.set_tty(io.tty);
    req.set_stdin(io.stdin);
    req.set_stdout(io.stdout);
    req.set_stderr(io.stderr && !io.tty);
    req
}

/// The `PortForwardRequest` for sandbox `id`; the ports are named later, in the stream.
pub fn port_forward_request(sandbox_id: &str) -> cri::PortForwardRequest {
    let mut req = cri::PortForwardRequest::new();
    req.set_pod_sandbox_id(sandbox_id.into());
    req
}

/// The ready sandbox of pod `pod_uid` among `listed` (by its uid label), the newest when
/// there are several; `None` when the pod has none ready.
pub fn ready_sandbox<'a>(listed: &'a [cri::PodSandbox], pod_uid: &str) -> Option<&'a cri::PodSandbox> {
    listed
        .iter()
        .filter(|s| s.state() == cri::PodSandboxState::SANDBOX_READY)
        .filter(|s| s.labels().get(labels::POD_UID).map(String::as_str) == Some(pod_uid))
        .max_by_key(|s| s.created_at())
}

/// The streaming URL a runtime answered with, made absolute: a URL with a scheme is kept; a
/// relative one (`/exec/<token>`, `//host/…`, `exec/<token>`) is resolved against `base`, the
/// streaming server's own URL (RFC 3986's resolution for these forms). `None`: the URL is
/// empty, or relative with no base to resolve it against.
pub fn stream_url(url: &str, base: Option<&str>) -> Option<String> {
    if url.is_empty() {
        return None;
    }
    if url.contains("://") {
        return Some(url.to_string());
    }
    let base = base?;
    let (scheme, rest) = base.split_once("://")?;
    if let Some(authority_path) = url.strip_prefix("//") {
        return Some(format!("{scheme}://{authority_path}"));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if url.starts_with('/') {
        return Some(format!("{scheme}://{authority}{url}"));
    }
    // Relative to the base's directory (its path up to the last `/`).
    let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
    let dir = if dir.is_empty() { "/" } else { dir };
    Some(format!("{scheme}://{authority}{dir}{url}"))
}

/// An `ExecSync` answer as `ExecResult`, output capped as the process runtime caps it.
pub fn exec_result(mut resp: cri::ExecSyncResponse) -> ExecResult {
    let cap = |mut v: Vec<u8>| {
        v.truncate(crate::node::runtime::exec::EXEC_OUTPUT_CAP);
        v
    };
    ExecResult {
        exit_code: resp.exit_code(),
        stdout: cap(resp.take_stdout()),
        stderr: cap(resp.take_stderr()),
        timed_out: false,
    }
}

/// An exec that ran past its timeout (containerd answers `DEADLINE_EXCEEDED`), reported as
/// the process runtime reports a killed one.
pub fn exec_timed_out() -> ExecResult {
    ExecResult { exit_code: -1, stdout: Vec::new(), stderr: Vec::new(), timed_out: true }
}

/// An image as ferrolet reports it.
pub fn image_info(i: &cri::Image) -> ImageInfo {
    ImageInfo {
        id: i.id().into(),
        repo_tags: i.repo_tags().to_vec(),
        repo_digests: i.repo_digests().to_vec(),
        size: i.size(),
        pinned: i.pinned(),
        uid: i.has_uid().then(|| i.uid().value()),
        username: i.username().into(),
    }
}

/// The image filesystems of an `ImageFsInfo` answer (the container filesystems, which newer
/// runtimes report apart, are not images').
pub fn image_fs_info(resp: &cri::ImageFsInfoResponse) -> Vec<ImageFsInfo> {
    resp.image_filesystems()
        .iter()
        .map(|f| ImageFsInfo {
            mount_point: f.fs_id().mountpoint().into(),
            used_bytes: f.used_bytes().value(),
            inodes_used: f.has_inodes_used().then(|| f.inodes_used().value()),
        })
        .collect()
}

/// The `PullImage` request for `image` with `auth`. No sandbox config goes with it: the
/// image is shared by every pod that uses it, and containerd uses the config only to pick a
/// runtime handler's snapshotter, which ferrolet does not set.
pub fn pull_image_request(image: &str, auth: Option<&PullAuth>) -> cri::PullImageRequest {
    let mut req = cri::PullImageRequest::new();
    req.mut_image().set_image(image.into());
    if let Some(a) = auth {
        let c = req.mut_auth();
        c.set_username(a.username.clone());
        c.set_password(a.password.clone());
        c.set_auth(a.auth.clone());
        c.set_server_address(a.server_address.clone());
        c.set_identity_token(a.identity_token.clone());
        c.set_registry_token(a.registry_token.clone());
    }
    req
}

/// A CRI `CpuUsage`; `None` without a cumulative usage.
fn runtime_cpu(c: &cri::CpuUsage) -> Option<RuntimeCpu> {
    c.usage_core_nano_seconds.as_ref().map(|u| RuntimeCpu {
        time: time_from_nanos(c.timestamp()),
        usage_core_nano_seconds: u.value(),
        usage_nano_cores: c.usage_nano_cores.as_ref().map(|v| v.value()),
    })
}

/// A CRI `MemoryUsage`; `None` without a working set.
fn runtime_memory(m: &cri::MemoryUsage) -> Option<RuntimeMemory> {
    let v = |f: &protobuf::MessageField<cri::UInt64Value>| f.as_ref().map(|v| v.value());
    Some(RuntimeMemory {
        time: time_from_nanos(m.timestamp()),
        working_set_bytes: v(&m.working_set_bytes)?,
        available_bytes: v(&m.available_bytes),
        usage_bytes: v(&m.usage_bytes),
        rss_bytes: v(&m.rss_bytes),
        page_faults: v(&m.page_faults),
        major_page_faults: v(&m.major_page_faults),
    })
}

/// A container's usage from a `ListContainerStats` (or `ListPodSandboxStats`) answer; fields
/// the runtime left out (containerd leaves out what it could not read) stay `None`.
pub fn container_stats(s: &cri::ContainerStats) -> RuntimeContainerStats {
    RuntimeContainerStats {
        id: s.attributes().id().to_string(),
        cpu: s.cpu.as_ref().and_then(runtime_cpu),
        memory: s.memory.as_ref().and_then(runtime_memory),
        writable_layer: s.writable_layer.as_ref().map(|w| RuntimeFsUsage {
            time: time_from_nanos(w.timestamp()),
            mount_point: w.fs_id().mountpoint().into(),
            used_bytes: w.used_bytes.as_ref().map(|v| v.value()),
            inodes_used: w.inodes_used.as_ref().map(|v| v.value()),
        }),
    }
}

/// A sandbox's usage from a `ListPodSandboxStats` answer (its Linux part; its containers are
/// asked with `ListContainerStats`).
pub fn pod_stats(s: &cri::PodSandboxStats) -> RuntimePodStats {
    let linux = s.linux.as_ref();
    RuntimePodStats {
        sandbox_id: s.attributes().id().to_string(),
        pod_uid: s.attributes().metadata().uid().to_string(),
        cpu: linux.and_then(|l| l.cpu.as_ref()).and_then(runtime_cpu),
        memory: linux.and_then(|l| l.memory.as_ref()).and_then(runtime_memory),
        process_count: linux.and_then(|l| l.process.as_ref()).and_then(|p| p.process_count.as_ref()).map(|v| v.value()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::runtime::devices::{DeviceOptions, DeviceSpec, MountSpec};
    use std::path::PathBuf;

    fn owner() -> HashMap<String, String> {
        owner_labels("node1")
    }

    fn sandbox(host_network: bool) -> SandboxConfig {
        SandboxConfig {
            pod_uid: "u1".into(),
            pod_name: "web".into(),
            namespace: "default".into(),
            attempt: 1,
            log_directory: PathBuf::from("/var/log/pods/default_web_u1"),
            termination_grace_period_seconds: 30,
            host_network,
            cgroup_parent: "/kubepods/burstable/podu1".into(),
            annotations: BTreeMap::from([("kubernetes.io/config.source".into(), "file".into())]),
            security: SandboxSecurity::default(),
            port_mappings: vec![crate::node::runtime::PortMapping {
                protocol: "UDP".into(),
                container_port: 53,
                host_port: 5353,
            }],
            hostname: String::new(),
            dns: None,
        }
    }

    fn container() -> ContainerConfig {
        ContainerConfig {
            name: "app".into(),
            attempt: 2,
            image: "localhost/busybox:latest".into(),
            argv: vec!["sleep".into(), "1000".into()],
            env: vec![("A".into(), "1".into()), ("B".into(), "2".into())],
            working_dir: "/tmp".into(),
            log_path: PathBuf::from("/var/log/pods/default_web_u1/app/2.log"),
            labels: BTreeMap::from([
                (labels::POD_UID.into(), "u1".into()),
                (labels::CONTAINER_NAME.into(), "app".into()),
            ]),
            linux: Some(crate::node::cm::LinuxContainerConfig {
                cgroup_parent: "/kubepods/burstable/podu1".into(),
                files: BTreeMap::from([
                    ("cpu.shares".into(), "512".into()),
                    ("cpu.cfs_quota_us".into(), "50000".into()),
                    ("cpu.cfs_period_us".into(), "100000".into()),
                    ("memory.limit_in_bytes".into(), "67108864".into()),
                ]),
                oom_score_adj: 750,
            }),
            devices: None,
            security: ContainerSecurity::default(),
            mounts: Vec::new(),
            termination_log: None,
            stdin: false,
            stdin_once: false,
            tty: false,
        }
    }

    #[test]
    fn a_host_network_sandbox_shares_the_node_namespace_and_sets_no_hostname() {
        let c = sandbox_config(&sandbox(true), &owner()).unwrap();
        assert_eq!(c.hostname(), "");
        let ns = c.linux().security_context().namespace_options();
        assert_eq!(ns.network(), cri::NamespaceMode::NODE);
        assert_eq!((ns.pid(), ns.ipc()), (cri::NamespaceMode::CONTAINER, cri::NamespaceMode::POD));
        assert_eq!(c.linux().cgroup_parent(), "/kubepods/burstable/podu1");
        assert_eq!(c.log_directory(), "/var/log/pods/default_web_u1");
        assert_eq!(c.metadata().uid(), "u1");
        assert_eq!(c.metadata().name(), "web");
        assert_eq!(c.metadata().namespace(), "default");
        assert_eq!(c.metadata().attempt(), 1);
        let pm = &c.port_mappings()[0];
        assert_eq!((pm.protocol(), pm.container_port(), pm.host_port()), (cri::Protocol::UDP, 53, 5353));
    }

    #[test]
    fn a_pod_network_sandbox_gets_the_pod_name_as_hostname() {
        let c = sandbox_config(&sandbox(false), &owner()).unwrap();
        assert_eq!(c.hostname(), "web");
        assert_eq!(c.linux().security_context().namespace_options().network(), cri::NamespaceMode::POD);
        assert!(!c.has_dns_config(), "no resolver config asked: the runtime's default");
    }

    #[test]
    fn a_sandbox_gets_the_pods_hostname_and_resolver_config_but_a_host_network_one_no_hostname() {
        let dns = crate::node::runtime::DnsConfig {
            servers: vec!["10.0.0.10".into(), "1.1.1.1".into()],
            searches: vec!["ns.svc.cluster.local".into(), "example.com".into()],
            options: vec!["ndots:2".into(), "rotate".into()],
        };
        let cfg = SandboxConfig { hostname: "db-0.sub.default.svc".into(), dns: Some(dns), ..sandbox(false) };
        let c = sandbox_config(&cfg, &owner()).unwrap();
        assert_eq!(c.hostname(), "db-0.sub.default.svc");
        let d = c.dns_config();
        assert_eq!(d.servers(), ["10.0.0.10", "1.1.1.1"]);
        assert_eq!(d.searches(), ["ns.svc.cluster.local", "example.com"]);
        assert_eq!(d.options(), ["ndots:2", "rotate"]);
        let c = sandbox_config(&SandboxConfig { host_network: true, ..cfg.clone() }, &owner()).unwrap();
        assert_eq!(c.hostname(), "", "the node's UTS namespace keeps the node's hostname");
        assert_eq!(c.dns_config().servers(), ["10.0.0.10", "1.1.1.1"]);
        let back = sandbox_config_of(c.metadata(), c.annotations());
        assert_eq!((back.hostname.as_str(), back.dns), (cfg.hostname.as_str(), cfg.dns));
    }

    #[test]
    fn a_sandbox_carries_kubelets_labels_the_managed_label_and_the_pod_annotations() {
        let c = sandbox_config(&sandbox(true), &owner()).unwrap();
        let l = c.labels();
        assert_eq!(l[labels::POD_NAME], "web");
        assert_eq!(l[labels::POD_NAMESPACE], "default");
        assert_eq!(l[labels::POD_UID], "u1");
        assert_eq!(l[labels::MANAGED_BY], labels::MANAGED_BY_FERROLET);
        assert_eq!(c.annotations()["kubernetes.io/config.source"], "file");
    }

    #[test]
    fn a_sandbox_config_survives_the_round_trip_through_its_annotation() {
        let c = sandbox_config(&sandbox(true), &owner()).unwrap();
        let back = sandbox_config_of(c.metadata(), c.annotations());
        assert_eq!(serde_json::to_value(&back).unwrap(), serde_json::to_value(sandbox(true)).unwrap());
        // Without the annotation, the metadata still names the pod.
        let back = sandbox_config_of(c.metadata(), &HashMap::new());
        assert_eq!((back.pod_uid.as_str(), back.pod_name.as_str(), back.namespace.as_str()), ("u1", "web", "default"));
    }

    #[test]
    fn a_container_request_carries_argv_env_workdir_relative_log_path_and_labels() {
        let req = create_container_request("sb1", &sandbox(true), &container(), &owner()).unwrap();
        assert_eq!(req.pod_sandbox_id(), "sb1");
        assert_eq!(req.sandbox_config().log_directory(), "/var/log/pods/default_web_u1");
        let c = req.config();
        assert_eq!(c.metadata().name(), "app");
        assert_eq!(c.metadata().attempt(), 2);
        assert_eq!(c.image().image(), "localhost/busybox:latest");
        assert_eq!(c.command(), ["sleep", "1000"]);
        assert!(c.args().is_empty());
        assert_eq!(c.working_dir(), "/tmp");
        let env: Vec<_> = c.envs().iter().map(|kv| (kv.key(), kv.value())).collect();
        assert_eq!(env, [("A", &b"1"[..]), ("B", &b"2"[..])]);
        assert_eq!(c.log_path(), "app/2.log");
        assert_eq!(c.labels()[labels::CONTAINER_NAME], "app");
        assert_eq!(c.labels()[labels::POD_UID], "u1");
        assert_eq!(c.labels()[labels::MANAGED_BY], labels::MANAGED_BY_FERROLET);
        assert_eq!(c.linux().security_context().namespace_options().network(), cri::NamespaceMode::NODE);
    }

    #[test]
    fn cgroup_v1_values_become_resources_and_v2_files_go_to_unified() {
        let r = resources(&container().linux.unwrap().files).unwrap();
        assert_eq!((r.cpu_shares(), r.cpu_quota(), r.cpu_period()), (512, 50000, 100000));
        assert_eq!(r.memory_limit_in_bytes(), 67108864);
        assert!(r.unified().is_empty());
        let v2 = BTreeMap::from([("cpu.weight".to_string(), "39".to_string()), ("memory.max".into(), "1024".into())]);
        let r = resources(&v2).unwrap();
        assert_eq!(r.unified()["cpu.weight"], "39");
        assert_eq!(r.unified()["memory.max"], "1024");
        let bad = BTreeMap::from([("cpu.shares".to_string(), "many".to_string())]);
        assert_eq!(
            resources(&bad).unwrap_err().to_string(),
            "cgroup control file cpu.shares: \"many\" is not a number"
        );
    }

    #[test]
    fn volume_mounts_come_first_with_their_mode_and_propagation() {
        let mut cfg = container();
        let mount = |path: &str, read_only, propagation| crate::node::runtime::Mount {
            container_path: path.into(),
            host_path: format!("/var/lib/ferrolet{path}").into(),
            read_only,
            propagation,
        };
        cfg.mounts = vec![
            mount("/data", false, Propagation::Private),
            mount("/host", true, Propagation::HostToContainer),
            mount("/shared", false, Propagation::Bidirectional),
        ];
        cfg.devices = Some(DeviceOptions {
            mounts: vec![MountSpec { container_path: "/dev/shm/x".into(), host_path: "/x".into(), read_only: true }],
            ..Default::default()
        });
        let req = create_container_request("sb1", &sandbox(false), &cfg, &owner()).unwrap();
        let got: Vec<(&str, &str, bool, cri::MountPropagation)> = req
            .config()
            .mounts()
            .iter()
            .map(|m| (m.container_path(), m.host_path(), m.readonly(), m.propagation()))
            .collect();
        assert_eq!(
            got,
            [
                ("/data", "/var/lib/ferrolet/data", false, cri::MountPropagation::PROPAGATION_PRIVATE),
                ("/host", "/var/lib/ferrolet/host", true, cri::MountPropagation::PROPAGATION_HOST_TO_CONTAINER),
                ("/shared", "/var/lib/ferrolet/shared", false, cri::MountPropagation::PROPAGATION_BIDIRECTIONAL),
                ("/dev/shm/x", "/x", true, cri::MountPropagation::PROPAGATION_PRIVATE),
            ]
        );
    }

    #[test]
    fn device_plugin_mounts_devices_annotations_and_cdi_names_reach_the_container() {
        let mut cfg = container();
        cfg.devices = Some(DeviceOptions {
            mounts: vec![MountSpec { container_path: "/dev/shm/x".into(), host_path: "/x".into(), read_only: true }],
            devices: vec![DeviceSpec {
                container_path: "/dev/fpga0".into(),
                host_path: "/dev/fpga0".into(),
                permissions: "rw".into(),
            }],
            annotations: BTreeMap::from([("vendor/fpga".into(), "0".into())]),
            cdi_devices: vec!["vendor.com/fpga=0".into()],
            ..Default::default()
        });
        let req = create_container_request("sb1", &sandbox(true), &cfg, &owner()).unwrap();
        let c = req.config();
        assert_eq!(c.mounts()[0].container_path(), "/dev/shm/x");
        assert!(c.mounts()[0].readonly());
        assert_eq!(c.devices()[0].host_path(), "/dev/fpga0");
        assert_eq!(c.devices()[0].permissions(), "rw");
        assert_eq!(c.annotations()["vendor/fpga"], "0");
        assert_eq!(c.CDI_devices()[0].name(), "vendor.com/fpga=0");
    }

    #[test]
    fn a_log_path_outside_the_sandbox_log_directory_is_refused() {
        let mut cfg = container();
        cfg.log_path = PathBuf::from("/elsewhere/app.log");
        let e = create_container_request("sb1", &sandbox(true), &cfg, &owner()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "log path /elsewhere/app.log is not under the sandbox's log directory /var/log/pods/default_web_u1"
        );
    }

    fn listed(cfg: &ContainerConfig) -> cri::Container {
        let req = create_container_request("sb1", &sandbox(true), cfg, &owner()).unwrap();
        let mut c = cri::Container::new();
        c.set_id("c1".into());
        c.set_pod_sandbox_id("sb1".into());
        c.set_metadata(req.config().metadata().clone());
        c.set_labels(req.config().labels().clone());
        c.set_annotations(req.config().annotations().clone());
        c
    }

    #[test]
    fn a_container_config_survives_the_round_trip_through_its_annotation() {
        assert_eq!(container_config_of(&listed(&container())), container());
        let mut bare = listed(&container());
        bare.mut_annotations().clear();
        let back = container_config_of(&bare);
        assert_eq!((back.name.as_str(), back.attempt), ("app", 2));
        assert_eq!(back.labels[labels::POD_UID], "u1");
    }

    fn status(state: cri::ContainerState, exit_code: i32, reason: &str) -> cri::ContainerStatus {
        let mut s = cri::ContainerStatus::new();
        s.set_id("c1".into());
        s.set_state(state);
        s.set_created_at(1_700_000_000_000_000_000);
        s.set_started_at(1_700_000_001_000_000_000);
        if state == cri::ContainerState::CONTAINER_EXITED {
            s.set_finished_at(1_700_000_002_500_000_000);
        }
        s.set_exit_code(exit_code);
        s.set_reason(reason.into());
        s
    }

    #[test]
    fn an_exited_status_settles_only_once_a_late_oom_reason_has_had_its_time() {
        let cfg = Arc::new(container());
        let exited = container_info("sb1", &status(cri::ContainerState::CONTAINER_EXITED, 137, ""), cfg.clone());
        let finished = exited.finished_at.unwrap();
        assert!(!settled(&exited, finished), "just exited: containerd may still say OOMKilled");
        assert!(!settled(&exited, finished + EXIT_SETTLES - Duration::from_millis(1)));
        assert!(settled(&exited, finished + EXIT_SETTLES));
        assert!(settled(&exited, finished - Duration::from_secs(60)), "a clock behind the finish: asked no more");
        let unknown_finish = ContainerInfo { finished_at: None, ..exited.clone() };
        assert!(settled(&unknown_finish, finished));
        let running = container_info("sb1", &status(cri::ContainerState::CONTAINER_RUNNING, 0, ""), cfg.clone());
        assert!(settled(&running, finished));
        let created = container_info("sb1", &status(cri::ContainerState::CONTAINER_CREATED, 0, ""), cfg);
        assert!(!settled(&created, finished + EXIT_SETTLES));

        // Until it settles, an exited status is asked again at most every REASK.
        let read = finished + Duration::from_millis(100);
        assert!(reusable(&exited, read, read + REASK - Duration::from_millis(1)));
        assert!(!reusable(&exited, read, read + REASK));
        assert!(reusable(&exited, finished + EXIT_SETTLES, finished + EXIT_SETTLES + REASK), "read once settled");
    }

    #[test]
    fn cri_states_exit_codes_reasons_and_times_map_into_container_info() {
        let cfg = Arc::new(container());
        let running = container_info("sb1", &status(cri::ContainerState::CONTAINER_RUNNING, 0, ""), cfg.clone());
        assert_eq!(running.state, ContainerState::Running);
        assert_eq!(running.sandbox_id, "sb1");
        assert_eq!(running.created_at, UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        assert_eq!(running.started_at, Some(UNIX_EPOCH + Duration::from_secs(1_700_000_001)));
        assert_eq!(running.finished_at, None);
        let exited = container_info("sb1", &status(cri::ContainerState::CONTAINER_EXITED, 3, "Error"), cfg.clone());
        assert_eq!((exited.state, exited.exit_code, exited.reason.as_str()), (ContainerState::Exited, 3, "Error"));
        assert_eq!(exited.finished_at, Some(UNIX_EPOCH + Duration::from_millis(1_700_000_002_500)));
        let oom = container_info("sb1", &status(cri::ContainerState::CONTAINER_EXITED, 137, "OOMKilled"), cfg.clone());
        assert_eq!(oom.reason, "OOMKilled");
        let created = container_info("sb1", &status(cri::ContainerState::CONTAINER_CREATED, 0, ""), cfg.clone());
        assert_eq!(created.state, ContainerState::Created);
        let unknown = container_info("sb1", &status(cri::ContainerState::CONTAINER_UNKNOWN, 0, ""), cfg);
        assert_eq!((unknown.state, unknown.reason.as_str()), (ContainerState::Exited, "ContainerStatusUnknown"));
        assert_eq!(unknown.exit_code, 137, "an unknown end is never a success");
    }

    #[test]
    fn a_listed_sandbox_is_ready_until_stopped() {
        let mut s = cri::PodSandbox::new();
        s.set_id("sb1".into());
        s.set_created_at(1_700_000_000_000_000_000);
        let cfg = Arc::new(sandbox(true));
        let info = sandbox_info(&s, cfg.clone());
        assert!(info.ready);
        assert_eq!(info.created_at, UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        s.set_state(cri::PodSandboxState::SANDBOX_NOTREADY);
        assert!(!sandbox_info(&s, cfg).ready);
    }

    #[test]
    fn timeouts_round_up_to_whole_seconds_and_an_exec_always_has_one() {
        assert_eq!(exec_timeout_seconds(Duration::ZERO), 1);
        assert_eq!(exec_timeout_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(exec_timeout_seconds(Duration::from_secs(10)), 10);
        assert_eq!(stop_timeout_seconds(Duration::ZERO), 0);
        assert_eq!(stop_timeout_seconds(Duration::from_millis(200)), 1);
        assert_eq!(stop_timeout_seconds(Duration::from_secs(30)), 30);
        let req = exec_sync_request("c1", &["echo".into(), "hi".into()], Duration::from_secs(3));
        assert_eq!((req.container_id(), req.timeout()), ("c1", 3));
        assert_eq!(req.cmd(), ["echo", "hi"]);
    }

    #[test]
    fn exec_answers_keep_the_exit_code_and_streams_and_a_timeout_reads_as_the_process_runtimes() {
        let mut resp = cri::ExecSyncResponse::new();
        resp.set_exit_code(3);
        resp.set_stdout(b"out".to_vec());
        resp.set_stderr(b"err".to_vec());
        let r = exec_result(resp);
        assert_eq!((r.exit_code, &r.stdout[..], &r.stderr[..], r.timed_out), (3, &b"out"[..], &b"err"[..], false));
        let t = exec_timed_out();
        assert_eq!((t.exit_code, t.timed_out), (-1, true));
    }

    #[test]
    fn images_and_their_filesystem_are_read_from_cri() {
        let mut i = cri::Image::new();
        i.set_id("sha256:abc".into());
        i.set_repo_tags(vec!["localhost/busybox:latest".to_string()]);
        i.set_repo_digests(vec!["localhost/busybox@sha256:def".to_string()]);
        i.set_size(4_000_000);
        i.set_pinned(true);
        let info = image_info(&i);
        assert_eq!(info.id, "sha256:abc");
        assert_eq!((info.repo_tags.len(), info.repo_digests.len(), info.size, info.pinned), (1, 1, 4_000_000, true));

        let mut resp = cri::ImageFsInfoResponse::new();
        let mut fs = cri::FilesystemUsage::new();
        fs.mut_fs_id().set_mountpoint("/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs".into());
        fs.mut_used_bytes().set_value(1234);
        resp.mut_image_filesystems().push(fs.clone());
        fs.clear_inodes_used();
        fs.mut_fs_id().set_mountpoint("/elsewhere".into());
        resp.mut_container_filesystems().push(fs);
        let got = image_fs_info(&resp);
        assert_eq!(got.len(), 1, "container filesystems are not image filesystems");
        assert_eq!(got[0].used_bytes, 1234);
        assert_eq!(got[0].inodes_used, None);
        assert!(got[0].mount_point.ends_with("io.containerd.snapshotter.v1.overlayfs"));
    }

    #[test]
    fn a_pull_carries_its_credentials_only_when_given() {
        let req = pull_image_request("registry.local/app:1", None);
        assert_eq!(req.image().image(), "registry.local/app:1");
        assert!(!req.has_auth());
        let auth = PullAuth {
            username: "u".into(),
            password: "p".into(),
            server_address: "registry.local".into(),
            ..Default::default()
        };
        let req = pull_image_request("registry.local/app:1", Some(&auth));
        assert_eq!((req.auth().username(), req.auth().password()), ("u", "p"));
        assert_eq!(req.auth().server_address(), "registry.local");
        // The secrets never reach a log line.
        assert!(!format!("{auth:?}").contains("\"p\""), "{auth:?}");
    }

    #[test]
    fn host_pid_host_ipc_and_a_shared_process_namespace_become_kubelets_namespace_modes() {
        let modes = |host_pid, host_ipc, share| {
            let mut sb = sandbox(false);
            sb.security = SandboxSecurity { host_pid, host_ipc, share_process_namespace: share, ..Default::default() };
            let ns = namespace_options(&sb);
            (ns.pid(), ns.ipc(), ns.network())
        };
        use cri::NamespaceMode::{CONTAINER, NODE, POD};
        assert_eq!(modes(false, false, false), (CONTAINER, POD, POD));
        assert_eq!(modes(false, false, true), (POD, POD, POD));
        assert_eq!(modes(true, false, false), (NODE, POD, POD));
        assert_eq!(modes(false, true, false), (CONTAINER, NODE, POD));
        // The container gets the sandbox's namespaces.
        let mut sb = sandbox(true);
        sb.security.host_pid = true;
        let req = create_container_request("sb1", &sb, &container(), &owner()).unwrap();
        let ns = req.config().linux().security_context().namespace_options();
        assert_eq!((ns.pid(), ns.network()), (NODE, NODE));
    }

    #[test]
    fn a_sandbox_carries_the_pods_ids_groups_seccomp_sysctls_and_privileged() {
        let mut sb = sandbox(false);
        sb.security = SandboxSecurity {
            run_as_user: Some(1000),
            run_as_group: Some(2000),
            supplemental_groups: vec![7, 5],
            privileged: true,
            seccomp: Some(Profile::RuntimeDefault),
            sysctls: BTreeMap::from([("net.ipv4.tcp_syncookies".into(), "1".into())]),
            ..Default::default()
        };
        let c = sandbox_config(&sb, &owner()).unwrap();
        let sc = c.linux().security_context();
        assert_eq!((sc.run_as_user().value(), sc.run_as_group().value()), (1000, 2000));
        assert_eq!(sc.supplemental_groups(), [7, 5]);
        assert!(sc.privileged());
        assert_eq!(sc.seccomp().profile_type(), cri::security_profile::ProfileType::RuntimeDefault);
        assert_eq!(c.linux().sysctls()["net.ipv4.tcp_syncookies"], "1");
        // Nothing asked: no uid (the image's), seccomp Unconfined as kubelet's default.
        let c = sandbox_config(&sandbox(false), &owner()).unwrap();
        let sc = c.linux().security_context();
        assert!(!sc.has_run_as_user() && !sc.has_run_as_group() && !sc.privileged());
        assert_eq!(sc.seccomp().profile_type(), cri::security_profile::ProfileType::Unconfined);
    }

    #[test]
    fn a_container_security_context_carries_every_effective_field() {
        let mut cfg = container();
        cfg.security = ContainerSecurity {
            run_as_user: Some(65534),
            run_as_group: Some(65533),
            supplemental_groups: vec![3000],
            add_capabilities: vec!["NET_BIND_SERVICE".into()],
            drop_capabilities: vec!["ALL".into()],
            no_new_privs: true,
            readonly_rootfs: true,
            seccomp: Some(Profile::Localhost("profiles/audit.json".into())),
            apparmor: Some(Profile::RuntimeDefault),
            ..Default::default()
        };
        let req = create_container_request("sb1", &sandbox(true), &cfg, &owner()).unwrap();
        let sc = req.config().linux().security_context();
        assert_eq!((sc.run_as_user().value(), sc.run_as_group().value()), (65534, 65533));
        assert_eq!(sc.supplemental_groups(), [3000]);
        assert_eq!(sc.capabilities().add_capabilities(), ["NET_BIND_SERVICE"]);
        assert_eq!(sc.capabilities().drop_capabilities(), ["ALL"]);
        assert!(sc.no_new_privs() && sc.readonly_rootfs() && !sc.privileged());
        assert_eq!(sc.seccomp().profile_type(), cri::security_profile::ProfileType::Localhost);
        assert_eq!(sc.seccomp().localhost_ref(), "profiles/audit.json");
        assert_eq!(sc.apparmor().profile_type(), cri::security_profile::ProfileType::RuntimeDefault);
        assert_eq!(sc.masked_paths().len(), crate::api::security::DEFAULT_MASKED_PATHS.len());
        assert_eq!(sc.readonly_paths(), crate::api::security::DEFAULT_READONLY_PATHS);

        // Nothing asked: no uid, no capabilities, kubelet's masks, Unconfined seccomp, no AppArmor.
        let req = create_container_request("sb1", &sandbox(true), &container(), &owner()).unwrap();
        let sc = req.config().linux().security_context();
        assert!(!sc.has_run_as_user() && !sc.has_capabilities() && !sc.no_new_privs() && !sc.has_apparmor());
        assert_eq!(sc.seccomp().profile_type(), cri::security_profile::ProfileType::Unconfined);
        assert!(!sc.masked_paths().is_empty());
        // The security context survives the round trip through the config annotation.
        assert_eq!(container_config_of(&listed(&cfg)).security, cfg.security);
    }

    #[test]
    fn an_images_numeric_user_or_user_name_is_read_from_cri() {
        let mut i = cri::Image::new();
        assert_eq!((image_info(&i).uid, image_info(&i).username.as_str()), (None, ""));
        i.mut_uid().set_value(0);
        assert_eq!(image_info(&i).uid, Some(0));
        i.clear_uid();
        i.set_username("nginx".into());
        assert_eq!((image_info(&i).uid, image_info(&i).username.as_str()), (None, "nginx"));
    }

    #[test]
    fn a_container_asking_for_stdin_and_a_terminal_gets_them_from_the_runtime() {
        let plain = create_container_request("s1", &sandbox(false), &container(), &owner()).unwrap();
        assert!(!plain.config().stdin() && !plain.config().stdin_once() && !plain.config().tty());
        let attached = ContainerConfig { stdin: true, stdin_once: true, tty: true, ..container() };
        let req = create_container_request("s1", &sandbox(false), &attached, &owner()).unwrap();
        assert!(req.config().stdin() && req.config().stdin_once() && req.config().tty());
        // Kept in the config annotation, so a relisted container still says so.
        let mut listed = cri::Container::new();
        listed.set_annotations(req.config().annotations().clone());
        let back = container_config_of(&listed);
        assert!(back.stdin && back.stdin_once && back.tty);
    }

    #[test]
    fn exec_and_attach_ask_for_the_streams_wanted_and_a_terminal_has_no_stderr() {
        let cmd = vec!["sh".to_string()];
        let io = StreamIo { stdin: true, stdout: true, stderr: true, tty: false };
        let req = exec_request("c1", &cmd, io);
        assert_eq!((req.container_id(), req.cmd()), ("c1", &cmd[..]));
        assert_eq!((req.stdin(), req.stdout(), req.stderr(), req.tty()), (true, true, true, false));
        let req = exec_request("c1", &cmd, StreamIo { tty: true, ..io });
        assert_eq!((req.stdin(), req.stdout(), req.stderr(), req.tty()), (true, true, false, true));
        let req = attach_request("c1", StreamIo { stdout: true, ..StreamIo::default() });
        assert_eq!(req.container_id(), "c1");
        assert_eq!((req.stdin(), req.stdout(), req.stderr(), req.tty()), (false, true, false, false));
        let req = attach_request("c1", StreamIo { tty: true, ..io });
        assert_eq!((req.stdin(), req.stdout(), req.stderr(), req.tty()), (true, true, false, true));
        let req = port_forward_request("s1");
        assert_eq!(req.pod_sandbox_id(), "s1");
        assert!(req.port().is_empty());
    }

    #[test]
    fn port_forwarding_goes_to_the_pods_newest_ready_sandbox() {
        let listed_sandbox = |id: &str, uid: &str, ready: bool, created: i64| {
            let mut s = cri::PodSandbox::new();
            s.set_id(id.into());
            s.set_created_at(created);
            s.set_state(if ready {
                cri::PodSandboxState::SANDBOX_READY
            } else {
                cri::PodSandboxState::SANDBOX_NOTREADY
            });
            s.mut_labels().insert(labels::POD_UID.into(), uid.into());
            s
        };
        let listed = [
            listed_sandbox("old", "u1", true, 1),
            listed_sandbox("new", "u1", true, 2),
            listed_sandbox("newest-dead", "u1", false, 3),
            listed_sandbox("other", "u2", true, 4),
        ];
        assert_eq!(ready_sandbox(&listed, "u1").map(|s| s.id()), Some("new"));
        assert_eq!(ready_sandbox(&listed, "u2").map(|s| s.id()), Some("other"));
        assert!(ready_sandbox(&listed[2..3], "u1").is_none(), "a stopped sandbox forwards nothing");
        assert!(ready_sandbox(&listed, "u3").is_none());
    }

    #[test]
    fn a_relative_streaming_url_is_resolved_against_the_streaming_servers_base() {
        let abs = "http://127.0.0.1:35001/exec/Ab3";
        assert_eq!(stream_url(abs, None).as_deref(), Some(abs));
        assert_eq!(stream_url(abs, Some("http://other:1/")).as_deref(), Some(abs));
        let base = Some("http://127.0.0.1:10010/cri/");
        assert_eq!(stream_url("/exec/Ab3", base).as_deref(), Some("http://127.0.0.1:10010/exec/Ab3"));
        assert_eq!(stream_url("exec/Ab3", base).as_deref(), Some("http://127.0.0.1:10010/cri/exec/Ab3"));
        assert_eq!(stream_url("//10.0.0.1:5/x", base).as_deref(), Some("http://10.0.0.1:5/x"));
        assert_eq!(stream_url("exec/Ab3", Some("https://node:10250")).as_deref(), Some("https://node:10250/exec/Ab3"));
        assert_eq!(stream_url("/exec/Ab3", None), None, "no base to resolve against");
        assert_eq!(stream_url("", base), None, "no URL at all");
        assert_eq!(stream_url("/exec/Ab3", Some("not a url")), None);
    }

    #[test]
    fn container_stats_keep_what_the_runtime_measured_and_only_that() {
        let mut s = cri::ContainerStats::new();
        s.mut_attributes().set_id("c1".into());
        s.mut_cpu().set_timestamp(1_700_000_000_000_000_000);
        s.mut_cpu().mut_usage_core_nano_seconds().set_value(5_000_000_000);
        s.mut_memory().set_timestamp(1_700_000_000_000_000_000);
        s.mut_memory().mut_working_set_bytes().set_value(40 << 20);
        s.mut_memory().mut_usage_bytes().set_value(50 << 20);
        s.mut_writable_layer().mut_fs_id().set_mountpoint("/var/lib/containerd/snap".into());
        s.mut_writable_layer().mut_used_bytes().set_value(8192);
        s.mut_writable_layer().mut_inodes_used().set_value(3);
        let got = container_stats(&s);
        let at = Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        assert_eq!(got.id, "c1");
        assert_eq!(
            got.cpu,
            Some(RuntimeCpu { time: at, usage_core_nano_seconds: 5_000_000_000, usage_nano_cores: None })
        );
        let m = got.memory.unwrap();
        assert_eq!(
            (m.working_set_bytes, m.usage_bytes, m.rss_bytes, m.available_bytes),
            (40 << 20, Some(50 << 20), None, None)
        );
        let w = got.writable_layer.unwrap();
        assert_eq!((w.used_bytes, w.inodes_used), (Some(8192), Some(3)));
        assert_eq!(w.mount_point, std::path::PathBuf::from("/var/lib/containerd/snap"));

        // A runtime that measured nothing (a container just started): nothing is made up.
        let mut bare = cri::ContainerStats::new();
        bare.mut_attributes().set_id("c2".into());
        bare.mut_cpu().set_timestamp(1);
        bare.mut_memory().mut_usage_bytes().set_value(1);
        let got = container_stats(&bare);
        assert_eq!((got.cpu, got.memory, got.writable_layer), (None, None, None));
    }

    #[test]
    fn sandbox_stats_name_the_pod_by_its_uid() {
        let mut s = cri::PodSandboxStats::new();
        s.mut_attributes().set_id("sb1".into());
        s.mut_attributes().mut_metadata().set_uid("u1".into());
        s.mut_linux().mut_cpu().mut_usage_core_nano_seconds().set_value(7);
        s.mut_linux().mut_process().mut_process_count().set_value(4);
        let got = pod_stats(&s);
        assert_eq!((got.sandbox_id.as_str(), got.pod_uid.as_str()), ("sb1", "u1"));
        assert_eq!(got.cpu.map(|c| c.usage_core_nano_seconds), Some(7));
        assert_eq!((got.memory, got.process_count), (None, Some(4)));
        assert_eq!(pod_stats(&cri::PodSandboxStats::new()), RuntimePodStats::default());
    }
}
