//! The security context as a container runs with it: kubelet's effective values (the
//! container's fields override the pod's; `determineEffectiveSecurityContext`), the sandbox's
//! share of them, kubelet's `runAsNonRoot` check, and the validation of both contexts.
//! Pure functions over the spec; the runtimes turn these values into CRI fields or the
//! shim's system calls.

use super::field::{quote, Errs};
use super::limits::{MAX_CAPABILITIES, MAX_ID, MAX_PROFILE_NAME_BYTES, MAX_SUPPLEMENTAL_GROUPS, MAX_SYSCTLS};
use super::{Container, Pod, PodSpec, ProfileSpec, SecurityContext};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};

/// Linux capability names without `CAP_`, indexed by their number (`capability.h`).
pub const CAPABILITIES: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// The capability list entry that stands for every capability.
pub const ALL_CAPABILITIES: &str = "ALL";

/// kubelet's masked paths for `procMount: Default` (`securitycontext.DefaultMaskedPaths`).
pub const DEFAULT_MASKED_PATHS: [&str; 11] = [
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// kubelet's read-only paths for `procMount: Default` (`securitycontext.DefaultReadonlyPaths`).
pub const DEFAULT_READONLY_PATHS: [&str; 5] =
    ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"];

/// The profile types of `seccompProfile` and `appArmorProfile`, as the API spells them.
pub const PROFILE_TYPES: [&str; 3] = ["RuntimeDefault", "Unconfined", "Localhost"];

/// A seccomp or AppArmor profile, read from its `ProfileSpec`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Profile {
    /// The container runtime's default profile.
    RuntimeDefault,
    /// No profile.
    Unconfined,
    /// A profile on the node, by name (seccomp: a file relative to the runtime's profile
    /// directory; AppArmor: a loaded profile's name).
    Localhost(String),
}

impl Profile {
    /// The profile `spec` names; `None` for a type validation refuses.
    pub fn of(spec: &ProfileSpec) -> Option<Profile> {
        match spec.type_.as_str() {
            "RuntimeDefault" => Some(Profile::RuntimeDefault),
            "Unconfined" => Some(Profile::Unconfined),
            "Localhost" => Some(Profile::Localhost(spec.localhost_profile.clone().unwrap_or_default())),
            _ => None,
        }
    }

    /// How a message names it: `RuntimeDefault`, `Localhost (profiles/audit.json)`.
    pub fn describe(&self) -> String {
        match self {
            Profile::RuntimeDefault => "RuntimeDefault".into(),
            Profile::Unconfined => "Unconfined".into(),
            Profile::Localhost(name) => format!("Localhost ({name})"),
        }
    }
}

/// What one container runs with: its context over the pod's, as kubelet computes it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContainerSecurity {
    /// The uid; `None`: the image's user (CRI) or the agent's (process runtime).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<i64>,
    /// The primary gid; `None`: the user's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_group: Option<i64>,
    /// Refuse to run as uid 0 (checked by the pod manager before the create).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub run_as_non_root: bool,
    /// The pod's `fsGroup`, then its `supplementalGroups`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub supplemental_groups: Vec<i64>,
    /// Capabilities added, as written.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub add_capabilities: Vec<String>,
    /// Capabilities dropped, as written.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drop_capabilities: Vec<String>,
    /// Every capability and the host's devices.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub privileged: bool,
    /// `allowPrivilegeEscalation: false` (kubelet's `AddNoNewPrivileges`: unset is false).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_new_privs: bool,
    /// `readOnlyRootFilesystem`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub readonly_rootfs: bool,
    /// The seccomp profile (container's, else pod's); `None`: neither names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seccomp: Option<Profile>,
    /// The AppArmor profile (container's, else pod's); `None`: neither names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub apparmor: Option<Profile>,
    /// `procMount: Unmasked`: no masked or read-only /proc paths.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unmasked_proc: bool,
}

impl ContainerSecurity {
    /// Whether nothing is asked (the container runs as it did before security contexts).
    pub fn is_default(&self) -> bool {
        *self == ContainerSecurity::default()
    }

    /// The masked paths the runtime gets (kubelet's `ConvertToRuntimeMaskedPaths`).
    pub fn masked_paths(&self) -> Vec<String> {
        if self.unmasked_proc {
            return Vec::new();
        }
        DEFAULT_MASKED_PATHS.iter().map(|p| p.to_string()).collect()
    }

    /// The read-only paths the runtime gets (kubelet's `ConvertToRuntimeReadonlyPaths`).
    pub fn readonly_paths(&self) -> Vec<String> {
        if self.unmasked_proc {
            return Vec::new();
        }
        DEFAULT_READONLY_PATHS.iter().map(|p| p.to_string()).collect()
    }
}

/// What a pod's sandbox runs with: its namespaces and the pod-level context.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SandboxSecurity {
    /// `hostPID`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub host_pid: bool,
    /// `hostIPC`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub host_ipc: bool,
    /// `shareProcessNamespace`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub share_process_namespace: bool,
    /// The pod's `runAsUser`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<i64>,
    /// The pod's `runAsGroup`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_group: Option<i64>,
    /// The pod's `fsGroup`, then its `supplementalGroups`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub supplemental_groups: Vec<i64>,
    /// Any container (init containers included) is privileged.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub privileged: bool,
    /// The pod's seccomp profile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seccomp: Option<Profile>,
    /// The pod's sysctls by name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub sysctls: BTreeMap<String, String>,
}

impl SandboxSecurity {
    /// Whether nothing is asked.
    pub fn is_default(&self) -> bool {
        *self == SandboxSecurity::default()
    }
}

/// The pod's `fsGroup` then its `supplementalGroups`, as kubelet adds them.
fn pod_groups(spec: &PodSpec) -> Vec<i64> {
    let Some(sc) = &spec.security_context else { return Vec::new() };
    sc.fs_group.into_iter().chain(sc.supplemental_groups.iter().copied()).collect()
}

/// The effective security of container `c` of a pod with `spec`: each of `runAsUser`,
/// `runAsGroup`, `runAsNonRoot`, `seccompProfile` and `appArmorProfile` from the container's
/// context when it sets it, else from the pod's; the rest from the container's alone.
pub fn effective(spec: &PodSpec, c: &Container) -> ContainerSecurity {
    let pod = spec.security_context.clone().unwrap_or_default();
    let own = c.security_context.clone().unwrap_or_default();
    let caps = own.capabilities.clone().unwrap_or_default();
    let profile =
        |own: &Option<ProfileSpec>, pod: &Option<ProfileSpec>| own.as_ref().or(pod.as_ref()).and_then(Profile::of);
    ContainerSecurity {
        run_as_user: own.run_as_user.or(pod.run_as_user),
        run_as_group: own.run_as_group.or(pod.run_as_group),
        run_as_non_root: own.run_as_non_root.or(pod.run_as_non_root).unwrap_or(false),
        supplemental_groups: pod_groups(spec),
        add_capabilities: caps.add,
        drop_capabilities: caps.drop,
        privileged: own.privileged.unwrap_or(false),
        no_new_privs: own.allow_privilege_escalation == Some(false),
        readonly_rootfs: own.read_only_root_filesystem.unwrap_or(false),
        seccomp: profile(&own.seccomp_profile, &pod.seccomp_profile),
        apparmor: profile(&own.app_armor_profile, &pod.app_armor_profile),
        unmasked_proc: own.proc_mount.as_deref() == Some(PROC_MOUNT_UNMASKED),
    }
}

/// The security of the pod's sandbox (kubelet's `generatePodSandboxLinuxConfig`).
pub fn sandbox(spec: &PodSpec) -> SandboxSecurity {
    let pod = spec.security_context.clone().unwrap_or_default();
    let privileged = |c: &Container| c.security_context.as_ref().and_then(|s| s.privileged).unwrap_or(false);
    SandboxSecurity {
        host_pid: spec.host_pid,
        host_ipc: spec.host_ipc,
        share_process_namespace: spec.share_process_namespace.unwrap_or(false),
        run_as_user: pod.run_as_user,
        run_as_group: pod.run_as_group,
        supplemental_groups: pod_groups(spec),
        privileged: spec.init_containers.iter().chain(&spec.containers).any(privileged),
        seccomp: pod.seccomp_profile.as_ref().and_then(Profile::of),
        sysctls: pod.sysctls.iter().map(|s| (s.name.clone(), s.value.clone())).collect(),
    }
}

/// kubelet's `verifyRunAsNonRoot`: with `runAsNonRoot`, a container whose uid is 0 does not
/// start. Its uid is `runAsUser`, else the image's: `image_uid`, or `image_username` when the
/// image names its user (which cannot be checked); an image that says nothing runs as root.
/// The error is kubelet's message.
pub fn verify_run_as_non_root(
    pod: &Pod,
    c: &Container,
    sec: &ContainerSecurity,
    image_uid: Option<i64>,
    image_username: &str,
) -> Result<(), String> {
    if !sec.run_as_non_root {
        return Ok(());
    }
    let who = format!("(pod: {:?}, container: {})", pod.desc(), c.name);
    match (sec.run_as_user, image_uid) {
        (Some(0), _) => Err(format!("container's runAsUser breaks non-root policy {who}")),
        (Some(_), _) => Ok(()),
        (None, Some(0)) => Err(format!("container has runAsNonRoot and image will run as root {who}")),
        (None, Some(_)) => Ok(()),
        (None, None) if !image_username.is_empty() => Err(format!(
            "container has runAsNonRoot and image has non-numeric user ({image_username}), cannot verify user is non-root {who}"
        )),
        (None, None) => Err(format!("container has runAsNonRoot and image will run as root {who}")),
    }
}

/// `procMount`'s values.
const PROC_MOUNT_TYPES: [&str; 2] = ["Default", PROC_MOUNT_UNMASKED];
const PROC_MOUNT_UNMASKED: &str = "Unmasked";

/// The number of capability `name` (`NET_ADMIN` or `CAP_NET_ADMIN`).
pub fn capability_number(name: &str) -> Option<u32> {
    let bare = name.strip_prefix("CAP_").unwrap_or(name);
    CAPABILITIES.iter().position(|c| *c == bare).map(|i| i as u32)
}

/// Sysctls a pod may set: the ones the kernel namespaces (IPC and network), kubelet's
/// `sysctl.NamespacedBy`.
pub fn is_namespaced_sysctl(name: &str) -> bool {
    let name = name.replace('/', ".");
    name == "kernel.sem" || ["kernel.shm", "kernel.msg", "fs.mqueue.", "net."].iter().any(|p| name.starts_with(p))
}

/// Whether sysctl `name` lives in the IPC namespace.
fn is_ipc_sysctl(name: &str) -> bool {
    is_namespaced_sysctl(name) && !name.replace('/', ".").starts_with("net.")
}

/// The apiserver's sysctl name format: dot- or slash-separated segments of `[a-z0-9_-]`,
/// each starting and ending alphanumeric, at most 253 characters.
fn is_sysctl_name(s: &str) -> bool {
    let segment_ok = |seg: &str| {
        let b = seg.as_bytes();
        !b.is_empty()
            && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-' || *c == b'_')
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
    };
    s.len() <= 253 && s.split(['.', '/']).all(segment_ok)
}

const SYSCTL_FMT: &str = "must have at most 253 characters and match regex ^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$";
const ID_RANGE: &str = "must be between 0 and 2147483647, inclusive";

fn validate_id(e: &mut Errs, id: Option<i64>, path: &str) {
    if let Some(v) = id.filter(|v| !(0..=MAX_ID).contains(v)) {
        e.invalid(path, v.to_string(), ID_RANGE);
    }
}

fn validate_profile(e: &mut Errs, p: &Option<ProfileSpec>, path: &str, what: &str) {
    let Some(p) = p else { return };
    if !PROFILE_TYPES.contains(&p.type_.as_str()) {
        e.not_supported(&format!("{path}.type"), &p.type_, &PROFILE_TYPES);
        return;
    }
    let local = format!("{path}.localhostProfile");
    match (p.type_ == "Localhost", &p.localhost_profile) {
        (true, None) => e.required(&local, &format!("must be set when {what} type is Localhost")),
        (true, Some(name)) if name.trim().is_empty() => {
            e.invalid(&local, quote(name), "must not be empty or only whitespace")
        }
        (true, Some(name)) if name.len() > MAX_PROFILE_NAME_BYTES => e.too_long(
            &local,
            format!("{} bytes; a profile name may have at most {MAX_PROFILE_NAME_BYTES}", name.len()),
        ),
        (true, Some(_)) => {}
        (false, Some(_)) => e.forbidden(&local, &format!("can only be set when {what} type is Localhost")),
        (false, None) => {}
    }
}

/// Validates `spec.securityContext`, `hostPID`/`hostIPC`/`shareProcessNamespace`.
pub(super) fn validate_pod_security(e: &mut Errs, spec: &PodSpec) {
    if spec.host_pid && spec.share_process_namespace == Some(true) {
        e.invalid(
            "spec.shareProcessNamespace",
            "true".into(),
            "ShareProcessNamespace and HostPID cannot both be enabled",
        );
    }
    let Some(sc) = &spec.security_context else { return };
    let path = "spec.securityContext";
    validate_id(e, sc.run_as_user, &format!("{path}.runAsUser"));
    validate_id(e, sc.run_as_group, &format!("{path}.runAsGroup"));
    validate_id(e, sc.fs_group, &format!("{path}.fsGroup"));
    const CHANGE: &[&str] = &["Always", "OnRootMismatch"];
    if let Some(p) = sc.fs_group_change_policy.as_deref().filter(|p| !CHANGE.contains(p)) {
        e.not_supported(&format!("{path}.fsGroupChangePolicy"), p, CHANGE);
    }
    if sc.supplemental_groups.len() > MAX_SUPPLEMENTAL_GROUPS {
        e.too_many(&format!("{path}.supplementalGroups"), sc.supplemental_groups.len(), MAX_SUPPLEMENTAL_GROUPS);
    } else {
        for (i, g) in sc.supplemental_groups.iter().enumerate() {
            validate_id(e, Some(*g), &format!("{path}.supplementalGroups[{i}]"));
        }
    }
    validate_profile(e, &sc.seccomp_profile, &format!("{path}.seccompProfile"), "seccomp");
    validate_profile(e, &sc.app_armor_profile, &format!("{path}.appArmorProfile"), "AppArmor");
    if sc.sysctls.len() > MAX_SYSCTLS {
        e.too_many(&format!("{path}.sysctls"), sc.sysctls.len(), MAX_SYSCTLS);
        return;
    }
    let mut names = HashSet::new();
    for (i, s) in sc.sysctls.iter().enumerate() {
        let p = format!("{path}.sysctls[{i}].name");
        if s.name.is_empty() {
            e.required(&p, "");
        } else if !is_sysctl_name(&s.name) {
            e.invalid(&p, quote(&s.name), SYSCTL_FMT);
        } else if !names.insert(s.name.replace('/', ".")) {
            e.duplicate(&p, &s.name);
        } else if !is_namespaced_sysctl(&s.name) {
            e.invalid(&p, quote(&s.name), "is not a namespaced sysctl: a pod may set only kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.* and net.*");
        } else if spec.host_network && !is_ipc_sysctl(&s.name) {
            e.invalid(&p, quote(&s.name), "may not be specified when 'hostNetwork' is true");
        } else if spec.host_ipc && is_ipc_sysctl(&s.name) {
            e.invalid(&p, quote(&s.name), "may not be specified when 'hostIPC' is true");
        }
        if s.value.len() > MAX_PROFILE_NAME_BYTES {
            e.too_long(
                &format!("{path}.sysctls[{i}].value"),
                format!("{} bytes; a sysctl value may have at most {MAX_PROFILE_NAME_BYTES}", s.value.len()),
            );
        }
    }
}

/// Validates a container's `securityContext` at `path` (`spec.containers[0]`).
pub(super) fn validate_container_security(e: &mut Errs, sc: &Option<SecurityContext>, path: &str) {
    let Some(sc) = sc else { return };
    let path = format!("{path}.securityContext");
    validate_id(e, sc.run_as_user, &format!("{path}.runAsUser"));
    validate_id(e, sc.run_as_group, &format!("{path}.runAsGroup"));
    if let Some(caps) = &sc.capabilities {
        for (list, field) in [(&caps.add, "add"), (&caps.drop, "drop")] {
            let p = format!("{path}.capabilities.{field}");
            if list.len() > MAX_CAPABILITIES {
                e.too_many(&p, list.len(), MAX_CAPABILITIES);
                continue;
            }
            for (i, name) in list.iter().enumerate() {
                if name != ALL_CAPABILITIES && capability_number(name).is_none() {
                    e.invalid(
                        &format!("{p}[{i}]"),
                        quote(name),
                        "must be a Linux capability name such as NET_ADMIN or CAP_NET_ADMIN, or ALL",
                    );
                }
            }
        }
    }
    if sc.allow_privilege_escalation == Some(false) {
        if sc.privileged == Some(true) {
            e.invalid(
                &path,
                "privileged: true".into(),
                "cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
            );
        }
        let adds = sc.capabilities.as_ref().map(|c| c.add.as_slice()).unwrap_or_default();
        if adds.iter().any(|c| capability_number(c) == capability_number("SYS_ADMIN")) {
            e.invalid(
                &path,
                "capabilities.add: CAP_SYS_ADMIN".into(),
                "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN",
            );
        }
    }
    if let Some(pm) = &sc.proc_mount {
        if !PROC_MOUNT_TYPES.contains(&pm.as_str()) {
            e.not_supported(&format!("{path}.procMount"), pm, &PROC_MOUNT_TYPES);
        }
    }
    validate_profile(e, &sc.seccomp_profile, &format!("{path}.seccompProfile"), "seccomp");
    validate_profile(e, &sc.app_armor_profile, &format!("{path}.appArmorProfile"), "AppArmor");
}

/// The sysctls kubelet allows by default (its "safe" set: namespaced, and unable to affect
/// other pods or the node).
pub const SAFE_SYSCTLS: [&str; 10] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// The first sysctl of `pod` that is neither safe nor in `allowed_unsafe` (exact names, or
/// prefixes ending in `*`), as kubelet's admission finds it; `None` when all are allowed.
/// Names may use `/` for `.`, as kubelet accepts.
pub fn forbidden_sysctl<'a>(pod: &'a Pod, allowed_unsafe: &[String]) -> Option<&'a str> {
    let sysctls = pod.spec.security_context.as_ref().map(|s| s.sysctls.as_slice()).unwrap_or_default();
    sysctls.iter().map(|s| s.name.as_str()).find(|name| {
        let n = name.replace('/', ".");
        let allowed = SAFE_SYSCTLS.contains(&n.as_str())
            || allowed_unsafe.iter().any(|a| match a.strip_suffix('*') {
                Some(prefix) => n.starts_with(prefix),
                None => *a == n,
            });
        !allowed
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Capabilities, PodSecurityContext, Sysctl};

    fn localhost(name: &str) -> ProfileSpec {
        ProfileSpec { type_: "Localhost".into(), localhost_profile: Some(name.into()) }
    }

    fn typed(t: &str) -> ProfileSpec {
        ProfileSpec { type_: t.into(), localhost_profile: None }
    }

    fn pod_with(pod_sc: PodSecurityContext, own: Option<SecurityContext>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = "web".into();
        pod.metadata.namespace = "default".into();
        pod.metadata.uid = "u1".into();
        pod.spec.security_context = Some(pod_sc);
        pod.spec.containers.push(Container { name: "app".into(), security_context: own, ..Default::default() });
        pod
    }

    #[test]
    fn the_containers_fields_override_the_pods_and_groups_come_from_the_pod() {
        let pod_sc = PodSecurityContext {
            run_as_user: Some(1000),
            run_as_group: Some(2000),
            run_as_non_root: Some(true),
            supplemental_groups: vec![5, 6],
            fs_group: Some(7),
            seccomp_profile: Some(typed("RuntimeDefault")),
            app_armor_profile: Some(localhost("pod-profile")),
            ..Default::default()
        };
        let own = SecurityContext {
            run_as_user: Some(3000),
            run_as_non_root: Some(false),
            seccomp_profile: Some(localhost("audit.json")),
            capabilities: Some(Capabilities { add: vec!["NET_BIND_SERVICE".into()], drop: vec!["ALL".into()] }),
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            ..Default::default()
        };
        let pod = pod_with(pod_sc.clone(), Some(own));
        let sec = effective(&pod.spec, &pod.spec.containers[0]);
        assert_eq!(sec.run_as_user, Some(3000), "the container's uid wins");
        assert_eq!(sec.run_as_group, Some(2000), "the pod's gid where the container sets none");
        assert!(!sec.run_as_non_root, "an explicit false in the container wins over the pod's true");
        assert_eq!(sec.supplemental_groups, [7, 5, 6], "fsGroup first, as kubelet adds it");
        assert_eq!(sec.seccomp, Some(Profile::Localhost("audit.json".into())));
        assert_eq!(sec.apparmor, Some(Profile::Localhost("pod-profile".into())));
        assert_eq!(
            (sec.add_capabilities.as_slice(), sec.drop_capabilities.as_slice()),
            (&["NET_BIND_SERVICE".to_string()][..], &["ALL".to_string()][..])
        );
        assert!(sec.no_new_privs && sec.readonly_rootfs && !sec.privileged);
        assert_eq!(sec.masked_paths().len(), DEFAULT_MASKED_PATHS.len());

        // Without a container context, everything comes from the pod.
        let pod = pod_with(pod_sc, None);
        let sec = effective(&pod.spec, &pod.spec.containers[0]);
        assert_eq!((sec.run_as_user, sec.run_as_group, sec.run_as_non_root), (Some(1000), Some(2000), true));
        assert_eq!(sec.seccomp, Some(Profile::RuntimeDefault));
        assert!(
            !sec.no_new_privs,
            "unset allowPrivilegeEscalation sets no no_new_privs (kubelet's AddNoNewPrivileges)"
        );
    }

    #[test]
    fn no_context_is_the_default_and_unmasked_proc_has_no_masked_paths() {
        let pod = Pod {
            spec: PodSpec { containers: vec![Container::default()], ..Default::default() },
            ..Default::default()
        };
        assert!(effective(&pod.spec, &pod.spec.containers[0]).is_default());
        assert!(sandbox(&pod.spec).is_default());
        let own = SecurityContext { proc_mount: Some("Unmasked".into()), ..Default::default() };
        let pod = pod_with(PodSecurityContext::default(), Some(own));
        let sec = effective(&pod.spec, &pod.spec.containers[0]);
        assert!(sec.masked_paths().is_empty() && sec.readonly_paths().is_empty());
    }

    #[test]
    fn the_sandbox_is_privileged_when_any_container_is_and_carries_the_pods_fields() {
        let mut pod = pod_with(
            PodSecurityContext {
                run_as_user: Some(10),
                sysctls: vec![Sysctl { name: "net.ipv4.tcp_syncookies".into(), value: "1".into() }],
                seccomp_profile: Some(typed("Unconfined")),
                ..Default::default()
            },
            None,
        );
        pod.spec.host_ipc = true;
        pod.spec.share_process_namespace = Some(true);
        let sb = sandbox(&pod.spec);
        assert!(!sb.privileged);
        assert!(sb.host_ipc && sb.share_process_namespace && !sb.host_pid);
        assert_eq!((sb.run_as_user, sb.seccomp.clone()), (Some(10), Some(Profile::Unconfined)));
        assert_eq!(sb.sysctls["net.ipv4.tcp_syncookies"], "1");
        pod.spec.init_containers.push(Container {
            name: "init".into(),
            security_context: Some(SecurityContext { privileged: Some(true), ..Default::default() }),
            ..Default::default()
        });
        assert!(sandbox(&pod.spec).privileged, "an init container counts");
    }

    #[test]
    fn run_as_non_root_refuses_uid_0_with_kubelets_messages() {
        let pod = pod_with(PodSecurityContext { run_as_non_root: Some(true), ..Default::default() }, None);
        let c = &pod.spec.containers[0];
        let mut sec = effective(&pod.spec, c);
        let who = "(pod: \"web_default(u1)\", container: app)";
        assert_eq!(
            verify_run_as_non_root(&pod, c, &sec, Some(0), ""),
            Err(format!("container has runAsNonRoot and image will run as root {who}"))
        );
        assert_eq!(
            verify_run_as_non_root(&pod, c, &sec, None, ""),
            Err(format!("container has runAsNonRoot and image will run as root {who}")),
            "an image that names no user runs as root"
        );
        assert_eq!(
            verify_run_as_non_root(&pod, c, &sec, None, "nginx"),
            Err(format!("container has runAsNonRoot and image has non-numeric user (nginx), cannot verify user is non-root {who}"))
        );
        assert_eq!(verify_run_as_non_root(&pod, c, &sec, Some(101), ""), Ok(()));
        sec.run_as_user = Some(0);
        assert_eq!(
            verify_run_as_non_root(&pod, c, &sec, Some(101), ""),
            Err(format!("container's runAsUser breaks non-root policy {who}"))
        );
        sec.run_as_user = Some(65534);
        assert_eq!(verify_run_as_non_root(&pod, c, &sec, Some(0), ""), Ok(()), "runAsUser decides over the image");
        sec.run_as_non_root = false;
        sec.run_as_user = Some(0);
        assert_eq!(verify_run_as_non_root(&pod, c, &sec, Some(0), ""), Ok(()));
    }

    fn errors(pod: &Pod) -> Vec<String> {
        let mut e = Errs(Vec::new());
        validate_pod_security(&mut e, &pod.spec);
        for (i, c) in pod.spec.containers.iter().enumerate() {
            validate_container_security(&mut e, &c.security_context, &format!("spec.containers[{i}]"));
        }
        e.0.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn validation_names_the_field_of_each_bad_value() {
        let pod_sc = PodSecurityContext {
            run_as_user: Some(-1),
            supplemental_groups: vec![1, 1 << 40],
            seccomp_profile: Some(typed("Localhost")),
            app_armor_profile: Some(ProfileSpec {
                type_: "RuntimeDefault".into(),
                localhost_profile: Some("x".into()),
            }),
            sysctls: vec![
                Sysctl { name: "net.ipv4.ip_forward".into(), value: "1".into() },
                Sysctl { name: "kernel.shm_rmid_forced".into(), value: "1".into() },
                Sysctl { name: "kernel.shm_rmid_forced".into(), value: "0".into() },
                Sysctl { name: "vm.swappiness".into(), value: "1".into() },
                Sysctl { name: "Net.Bad..name".into(), value: "1".into() },
            ],
            ..Default::default()
        };
        let own = SecurityContext {
            run_as_group: Some(1 << 31),
            capabilities: Some(Capabilities {
                add: vec!["NET_ADMIN".into(), "CAP_SYS_ADMIN".into()],
                drop: vec!["ALL".into(), "FLY".into()],
            }),
            privileged: Some(true),
            allow_privilege_escalation: Some(false),
            seccomp_profile: Some(typed("Strict")),
            proc_mount: Some("Masked".into()),
            ..Default::default()
        };
        let mut pod = pod_with(pod_sc, Some(own));
        pod.spec.host_network = true;
        pod.spec.host_pid = true;
        pod.spec.share_process_namespace = Some(true);
        let got = errors(&pod);
        let want = [
            "spec.shareProcessNamespace: Invalid value: true: ShareProcessNamespace and HostPID cannot both be enabled",
            "spec.securityContext.runAsUser: Invalid value: -1: must be between 0 and 2147483647, inclusive",
            "spec.securityContext.supplementalGroups[1]: Invalid value: 1099511627776: must be between 0 and 2147483647, inclusive",
            "spec.securityContext.seccompProfile.localhostProfile: Required value: must be set when seccomp type is Localhost",
            "spec.securityContext.appArmorProfile.localhostProfile: Forbidden: can only be set when AppArmor type is Localhost",
            "spec.securityContext.sysctls[0].name: Invalid value: \"net.ipv4.ip_forward\": may not be specified when 'hostNetwork' is true",
            "spec.securityContext.sysctls[2].name: Duplicate value: \"kernel.shm_rmid_forced\"",
            "spec.securityContext.sysctls[3].name: Invalid value: \"vm.swappiness\": is not a namespaced sysctl: a pod may set only kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.* and net.*",
            &format!("spec.securityContext.sysctls[4].name: Invalid value: \"Net.Bad..name\": {SYSCTL_FMT}"),
            "spec.containers[0].securityContext.runAsGroup: Invalid value: 2147483648: must be between 0 and 2147483647, inclusive",
            "spec.containers[0].securityContext.capabilities.drop[1]: Invalid value: \"FLY\": must be a Linux capability name such as NET_ADMIN or CAP_NET_ADMIN, or ALL",
            "spec.containers[0].securityContext: Invalid value: privileged: true: cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
            "spec.containers[0].securityContext: Invalid value: capabilities.add: CAP_SYS_ADMIN: cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN",
            "spec.containers[0].securityContext.procMount: Unsupported value: \"Masked\": supported values: \"Default\", \"Unmasked\"",
            "spec.containers[0].securityContext.seccompProfile.type: Unsupported value: \"Strict\": supported values: \"RuntimeDefault\", \"Unconfined\", \"Localhost\"",
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn a_sane_context_is_valid_and_lists_are_bounded() {
        let pod_sc = PodSecurityContext {
            run_as_user: Some(65534),
            run_as_group: Some(65534),
            fs_group: Some(2000),
            supplemental_groups: vec![3000],
            sysctls: vec![Sysctl { name: "kernel/shm_rmid_forced".into(), value: "1".into() }],
            seccomp_profile: Some(localhost("profiles/audit.json")),
            ..Default::default()
        };
        let own = SecurityContext {
            capabilities: Some(Capabilities { add: vec!["CAP_NET_BIND_SERVICE".into()], drop: vec!["ALL".into()] }),
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            proc_mount: Some("Default".into()),
            ..Default::default()
        };
        let pod = pod_with(pod_sc, Some(own));
        assert_eq!(errors(&pod), Vec::<String>::new());
        let mut big = pod.clone();
        let sc = big.spec.security_context.as_mut().unwrap();
        sc.supplemental_groups = vec![1; MAX_SUPPLEMENTAL_GROUPS + 1];
        let got = errors(&big);
        assert_eq!(got, [format!("spec.securityContext.supplementalGroups: Too many: {}: must have at most {MAX_SUPPLEMENTAL_GROUPS} items", MAX_SUPPLEMENTAL_GROUPS + 1)]);
    }

    #[test]
    fn capability_names_read_with_or_without_the_prefix() {
        assert_eq!(capability_number("CHOWN"), Some(0));
        assert_eq!(capability_number("CAP_NET_ADMIN"), Some(12));
        assert_eq!(capability_number("CHECKPOINT_RESTORE"), Some(40));
        assert_eq!(capability_number("net_admin"), None);
        assert!(is_namespaced_sysctl("net.core.somaxconn") && is_namespaced_sysctl("kernel.sem"));
        assert!(!is_namespaced_sysctl("kernel.semx"));
        assert!(!is_namespaced_sysctl("kernel.pid_max"));
    }

    #[test]
    fn only_safe_sysctls_and_the_nodes_allowed_ones_pass() {
        let mut p = Pod::default();
        let set = |p: &mut Pod, names: &[&str]| {
            let sysctls = names.iter().map(|n| crate::api::Sysctl { name: n.to_string(), value: "1".into() }).collect();
            p.spec.security_context = Some(crate::api::PodSecurityContext { sysctls, ..Default::default() });
        };
        assert_eq!(forbidden_sysctl(&p, &[]), None);
        set(&mut p, &["net/ipv4/tcp_syncookies", "kernel.shm_rmid_forced"]);
        assert_eq!(forbidden_sysctl(&p, &[]), None, "safe, in either spelling");
        set(&mut p, &["net.ipv4.tcp_syncookies", "net.core.somaxconn", "kernel.msgmax"]);
        assert_eq!(forbidden_sysctl(&p, &[]), Some("net.core.somaxconn"));
        assert_eq!(forbidden_sysctl(&p, &["net.core.*".into()]), Some("kernel.msgmax"));
        assert_eq!(forbidden_sysctl(&p, &["net.core.*".into(), "kernel.msgmax".into()]), None);
    }
}
