//! The subset of the Kubernetes core/v1 object model that ferrolet reads and writes.
//! Field names and JSON shapes follow k8s.io/api so objects can be posted to an apiserver
//! unchanged. Unknown fields in manifests are ignored: users paste real manifests.

use super::Quantity;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::SystemTime;

/// A `metav1.Time`: serialized as RFC 3339 with second precision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Time(pub SystemTime);

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::base::timefmt::rfc3339(self.0))
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        crate::base::timefmt::parse_rfc3339(&s)
            .map(Time)
            .ok_or_else(|| serde::de::Error::custom(format!("invalid RFC 3339 time {s:?}")))
    }
}

/// A value that is either an integer or a string (`IntOrString`), e.g. a probe port.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum IntOrString {
    /// A number, e.g. `port: 8080`.
    Int(i64),
    /// A name, e.g. `port: http`.
    String(String),
}

/// `metav1.ObjectMeta` (the fields a node agent uses).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectMeta {
    /// Object name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Namespace; defaulted to `default`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Unique id; for static pods derived from the manifest.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// Labels.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// When the agent first saw the object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<Time>,
    /// Set when the object is being deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<Time>,
    /// The grace period the deletion was asked with (seconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion_grace_period_seconds: Option<i64>,
    /// Opaque version from the store that holds the object.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
}

/// `v1.Pod`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Pod {
    /// Always `v1` on output.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// Always `Pod` on output.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Desired state.
    pub spec: PodSpec,
    /// Observed state; filled by the status manager.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<PodStatus>,
}

impl Pod {
    /// `namespace/name`, the way log lines and the CLI name a pod.
    pub fn key(&self) -> String {
        format!("{}/{}", self.metadata.namespace, self.metadata.name)
    }

    /// kubelet's `format.Pod`: `name_namespace(uid)`, used in event messages.
    pub fn desc(&self) -> String {
        format!("{}_{}({})", self.metadata.name, self.metadata.namespace, self.metadata.uid)
    }
}

/// A pod's `restartPolicy`. The spec keeps the text (the manifest's shape, and validation's
/// `Unsupported value` messages, stay the API's); code compares these values, read with
/// `PodSpec::restart()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartPolicy {
    /// Restart every container that exits.
    Always,
    /// Restart containers that exit with a non-zero code.
    OnFailure,
    /// Never restart a container.
    Never,
}

impl RestartPolicy {
    /// Every value, in the order the API lists them.
    pub const ALL: [RestartPolicy; 3] = [RestartPolicy::Always, RestartPolicy::OnFailure, RestartPolicy::Never];
    /// The values' spellings, in the order the API lists them (for validation messages).
    pub const NAMES: [&'static str; 3] = ["Always", "OnFailure", "Never"];

    /// The value's spelling in a manifest.
    pub const fn as_str(self) -> &'static str {
        match self {
            RestartPolicy::Always => "Always",
            RestartPolicy::OnFailure => "OnFailure",
            RestartPolicy::Never => "Never",
        }
    }

    /// The value spelled `s`, if it is one.
    pub fn parse(s: &str) -> Option<RestartPolicy> {
        RestartPolicy::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// Whether a container that exited with `exit_code` is started again (kubelet's
    /// `ShouldContainerBeRestarted` for a container that ran).
    pub fn restarts(self, exit_code: i32) -> bool {
        match self {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => exit_code != 0,
            RestartPolicy::Never => false,
        }
    }
}

/// `v1.PodSpec` (the fields a node agent acts on).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodSpec {
    /// Init containers, run in order before the app containers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<Container>,
    /// App containers.
    pub containers: Vec<Container>,
    /// `Always`, `OnFailure` or `Never`; defaulted to `Always`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub restart_policy: String,
    /// Grace period for termination; defaulted to `DEFAULT_TERMINATION_GRACE_PERIOD`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    /// Whether the pod uses the node's network namespace.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub host_network: bool,
    /// Node the pod is bound to; static pods are bound to this node.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    /// Seconds the pod may be active on the node (counted from its start time) before the
    /// agent fails it (`DeadlineExceeded`) and kills its containers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    /// Whether the pod uses the node's PID namespace.
    #[serde(rename = "hostPID", skip_serializing_if = "std::ops::Not::not")]
    pub host_pid: bool,
    /// Whether the pod uses the node's IPC namespace.
    #[serde(rename = "hostIPC", skip_serializing_if = "std::ops::Not::not")]
    pub host_ipc: bool,
    /// Whether the pod's containers share one PID namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share_process_namespace: Option<bool>,
    /// The pod-level security context (its containers' defaults, and the sandbox's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,
    /// The pod's volumes (`api::volumes`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
    /// Entries added to the pod's hosts file (`/etc/hosts` in its containers).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub host_aliases: Vec<HostAlias>,
    /// The pod's hostname; empty: the pod's name (at most 63 characters of it).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    /// With it the pod's domain is `<subdomain>.<namespace>.svc.<cluster domain>`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subdomain: String,
    /// Make the kernel's hostname the pod's FQDN (`<hostname>.<domain>`), not the short name.
    #[serde(rename = "setHostnameAsFQDN", skip_serializing_if = "Option::is_none")]
    pub set_hostname_as_fqdn: Option<bool>,
    /// `ClusterFirst`, `ClusterFirstWithHostNet`, `Default` or `None`; unset reads as the API
    /// default, `ClusterFirst` (read with `PodSpec::dns()`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub dns_policy: String,
    /// Nameservers, search domains and resolver options merged onto what `dnsPolicy` gives
    /// (with `None`, all there is).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_config: Option<PodDnsConfig>,
    /// Secrets with registry credentials for the pod's image pulls (apiserver pods only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Every other field as written: ferrolet does not model it, so it is refused or, where
    /// it means nothing on one node, accepted with a log line (`api::fields`); never
    /// silently dropped.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// `v1.HostAlias`: one line of the pod's hosts file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostAlias {
    /// The address.
    pub ip: String,
    /// The names it has.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hostnames: Vec<String>,
}

/// `v1.PodDNSConfig`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodDnsConfig {
    /// Nameserver addresses (at most 3).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    /// Search domains (at most 32, 2048 characters together).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub searches: Vec<String>,
    /// Resolver options; one of the base's with the same name is replaced.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<PodDnsConfigOption>,
}

/// `v1.PodDNSConfigOption`: `name` or `name:value` in resolv.conf's `options` line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodDnsConfigOption {
    /// e.g. `ndots`.
    pub name: String,
    /// e.g. `2`; unset for a flag such as `rotate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// A pod's `dnsPolicy`. The spec keeps the text (validation reports the manifest's
/// spelling); code compares these values, read with `PodSpec::dns()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DnsPolicy {
    /// The cluster's DNS; on the host network, the node's (`Default`).
    ClusterFirst,
    /// The cluster's DNS, on the host network too.
    ClusterFirstWithHostNet,
    /// The node's resolver configuration.
    Default,
    /// Only what `dnsConfig` says.
    None,
}

impl DnsPolicy {
    /// Every value, in the order the API lists them.
    pub const ALL: [DnsPolicy; 4] =
        [DnsPolicy::ClusterFirstWithHostNet, DnsPolicy::ClusterFirst, DnsPolicy::Default, DnsPolicy::None];
    /// The values' spellings, in the order the API lists them (for validation messages).
    pub const NAMES: [&'static str; 4] = ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];

    /// The value's spelling in a manifest.
    pub const fn as_str(self) -> &'static str {
        match self {
            DnsPolicy::ClusterFirst => "ClusterFirst",
            DnsPolicy::ClusterFirstWithHostNet => "ClusterFirstWithHostNet",
            DnsPolicy::Default => "Default",
            DnsPolicy::None => "None",
        }
    }

    /// The value spelled `s`, if it is one.
    pub fn parse(s: &str) -> Option<DnsPolicy> {
        DnsPolicy::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// `v1.PodSecurityContext` (the Linux fields).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodSecurityContext {
    /// The uid containers run as, unless their own context says otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<i64>,
    /// The primary gid containers run as, unless their own context says otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_group: Option<i64>,
    /// Refuse to start containers that would run as uid 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_non_root: Option<bool>,
    /// Groups added to every container's first process.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub supplemental_groups: Vec<i64>,
    /// A group added to every container's first process, and the group that owns the
    /// pod's writable volumes (`emptyDir`, downward API files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs_group: Option<i64>,
    /// `Always` or `OnRootMismatch`: when the volumes' ownership is set. ferrolet sets it
    /// once, when it makes a volume, which both ask for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs_group_change_policy: Option<String>,
    /// Namespaced kernel parameters set in the pod's namespaces.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sysctls: Vec<Sysctl>,
    /// The seccomp profile of containers that name none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seccomp_profile: Option<ProfileSpec>,
    /// The AppArmor profile of containers that name none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app_armor_profile: Option<ProfileSpec>,
    /// Every other field as written, judged by `api::fields` (never silently dropped).
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// `v1.SecurityContext`: a container's own (the Linux fields).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SecurityContext {
    /// The uid the container runs as (overrides the pod's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<i64>,
    /// The primary gid the container runs as (overrides the pod's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_group: Option<i64>,
    /// Refuse to start the container if it would run as uid 0 (overrides the pod's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_non_root: Option<bool>,
    /// Capabilities added to and dropped from the runtime's default set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Capabilities>,
    /// Run with every capability and the host's devices.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub privileged: Option<bool>,
    /// Whether the process may gain privileges (setuid binaries, file capabilities); false
    /// sets `no_new_privs`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_privilege_escalation: Option<bool>,
    /// Mount the container's root filesystem read-only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only_root_filesystem: Option<bool>,
    /// The container's seccomp profile (overrides the pod's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seccomp_profile: Option<ProfileSpec>,
    /// The container's AppArmor profile (overrides the pod's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app_armor_profile: Option<ProfileSpec>,
    /// `Default` (the runtime masks parts of /proc) or `Unmasked`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proc_mount: Option<String>,
    /// Every other field as written, judged by `api::fields` (never silently dropped).
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// `v1.Capabilities`: names as the API spells them (`NET_ADMIN`; `CAP_NET_ADMIN` and `ALL`
/// are accepted too).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Capabilities {
    /// Added capabilities.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub add: Vec<String>,
    /// Dropped capabilities.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drop: Vec<String>,
}

/// `v1.Sysctl`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Sysctl {
    /// e.g. `net.ipv4.ip_local_port_range`.
    pub name: String,
    /// Its value.
    pub value: String,
}

/// `v1.SeccompProfile` and `v1.AppArmorProfile`, which have the same shape. The text is
/// kept (validation reports the manifest's spelling); code reads `api::security::Profile`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProfileSpec {
    /// `RuntimeDefault`, `Unconfined` or `Localhost`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The profile's name on the node; required for (and only for) `Localhost`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub localhost_profile: Option<String>,
}

/// `v1.Container`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Container {
    /// Container name, unique in the pod.
    pub name: String,
    /// Image reference; the process runtime ignores it.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub image: String,
    /// Entrypoint.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Arguments.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Working directory.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub working_dir: String,
    /// Environment variables.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Every key of ConfigMaps and Secrets as variables, before `env` (apiserver pods only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env_from: Vec<EnvFromSource>,
    /// Ports (named ports are referenced by probes).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<ContainerPort>,
    /// Resource requests and limits.
    #[serde(skip_serializing_if = "ResourceRequirements::is_empty")]
    pub resources: ResourceRequirements,
    /// Liveness probe.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub liveness_probe: Option<Probe>,
    /// Readiness probe.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readiness_probe: Option<Probe>,
    /// Startup probe.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub startup_probe: Option<Probe>,
    /// Only `Always` is allowed, on init containers: it makes them sidecars.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
    /// `IfNotPresent`, `Always` or `Never`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub image_pull_policy: String,
    /// Where the termination message is read from.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub termination_message_path: String,
    /// `File` (the default) or `FallbackToLogsOnError`; read with
    /// `Container::termination_message()`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub termination_message_policy: String,
    /// Hooks run after the container started and before it is stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
    /// The container's own security context (overrides the pod's where both set a field).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
    /// Where the pod's volumes appear in it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<VolumeMount>,
    /// The runtime keeps a stdin open for `kubectl attach` (CRI runtime only).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stdin: bool,
    /// The stdin is closed once the first attached client detaches.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stdin_once: bool,
    /// The container's stdin, stdout and stderr are a terminal (CRI runtime only).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tty: bool,
    /// Every other field as written (see `PodSpec::other`).
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// `v1.Lifecycle`: the container's hooks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Lifecycle {
    /// Runs right after the container started; a failure kills the container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub post_start: Option<LifecycleHandler>,
    /// Runs before the container is sent SIGTERM, within its grace period.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pre_stop: Option<LifecycleHandler>,
}

/// `v1.LifecycleHandler`: exactly one of its members is set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LifecycleHandler {
    /// A command run in the container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecAction>,
    /// An HTTP GET to the pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_get: Option<HttpGetAction>,
    /// A pause of the agent (the container is not touched).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sleep: Option<SleepAction>,
}

/// `v1.SleepAction`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SleepAction {
    /// How long to sleep, in seconds.
    pub seconds: i64,
}

/// A container's `terminationMessagePolicy`. The spec keeps the text; code compares these
/// values, read with `Container::termination_message()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TerminationMessagePolicy {
    /// The message is what the container wrote to its termination message file.
    File,
    /// As `File`, but a container that failed and wrote no message gets the tail of its log.
    FallbackToLogsOnError,
}

impl TerminationMessagePolicy {
    /// The values' spellings, in the order the API lists them (for validation messages).
    pub const NAMES: [&'static str; 2] = ["File", "FallbackToLogsOnError"];

    /// The value's spelling in a manifest.
    pub const fn as_str(self) -> &'static str {
        match self {
            TerminationMessagePolicy::File => "File",
            TerminationMessagePolicy::FallbackToLogsOnError => "FallbackToLogsOnError",
        }
    }

    /// The value spelled `s`, if it is one.
    pub fn parse(s: &str) -> Option<TerminationMessagePolicy> {
        [TerminationMessagePolicy::File, TerminationMessagePolicy::FallbackToLogsOnError]
            .into_iter()
            .find(|p| p.as_str() == s)
    }
}

impl PodSpec {
    /// The restart policy; an unset or unknown one (which validation refuses) reads as the
    /// API default, `Always`.
    pub fn restart(&self) -> RestartPolicy {
        RestartPolicy::parse(&self.restart_policy).unwrap_or(RestartPolicy::Always)
    }

    /// The termination grace period in seconds; unset means the API default.
    pub fn grace_period_seconds(&self) -> i64 {
        self.termination_grace_period_seconds.unwrap_or(super::defaults::DEFAULT_TERMINATION_GRACE_PERIOD)
    }

    /// The termination grace period (a negative one, which validation refuses, is zero).
    pub fn termination_grace(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.grace_period_seconds().max(0) as u64)
    }

    /// The DNS policy; an unset or unknown one (which validation refuses) reads as the API
    /// default, `ClusterFirst`. It is not written into the spec by defaulting: that would
    /// change the content hash, and so the uid, of every static pod written before.
    pub fn dns(&self) -> DnsPolicy {
        DnsPolicy::parse(&self.dns_policy).unwrap_or(DnsPolicy::ClusterFirst)
    }

    /// Whether the kernel's hostname is to be the pod's FQDN.
    pub fn hostname_as_fqdn(&self) -> bool {
        self.set_hostname_as_fqdn == Some(true)
    }
}

impl Container {
    /// A restartable init container (`restartPolicy: Always`), i.e. a sidecar.
    pub fn is_sidecar(&self) -> bool {
        self.restart_policy.as_deref() == Some(RestartPolicy::Always.as_str())
    }

    /// The termination message policy; an unset or unknown one (which validation refuses)
    /// reads as the API default, `File`.
    pub fn termination_message(&self) -> TerminationMessagePolicy {
        TerminationMessagePolicy::parse(&self.termination_message_policy).unwrap_or(TerminationMessagePolicy::File)
    }

    /// The `postStart` hook, if any.
    pub fn post_start(&self) -> Option<&LifecycleHandler> {
        self.lifecycle.as_ref().and_then(|l| l.post_start.as_ref())
    }

    /// The `preStop` hook, if any.
    pub fn pre_stop(&self) -> Option<&LifecycleHandler> {
        self.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref())
    }
}

/// `v1.EnvVar`: a literal value, or a value from the downward API, a ConfigMap or a Secret.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EnvVar {
    /// Variable name.
    pub name: String,
    /// Literal value; `$(VAR)` references are expanded.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// Where the value comes from (`fieldRef`, `resourceFieldRef`, `configMapKeyRef`,
    /// `secretKeyRef`): checked by `api::downward::check`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_from: Option<serde_json::Value>,
}

/// `v1.ContainerPort`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ContainerPort {
    /// IANA service name, referenced by probes.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Port number.
    pub container_port: i64,
    /// `TCP`, `UDP` or `SCTP`; defaulted to `TCP`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub protocol: String,
    /// Host port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_port: Option<i64>,
}

/// `v1.ResourceRequirements`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceRequirements {
    /// Requests by resource name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, Quantity>,
    /// Limits by resource name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, Quantity>,
}

impl ResourceRequirements {
    /// True when neither requests nor limits are set.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty() && self.limits.is_empty()
    }
}

/// `v1.Probe`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Probe {
    /// Exec handler.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecAction>,
    /// HTTP GET handler.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_get: Option<HttpGetAction>,
    /// TCP handler.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_socket: Option<TcpSocketAction>,
    /// gRPC health handler.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc: Option<GrpcAction>,
    /// Seconds after the container started before the first probe.
    pub initial_delay_seconds: i32,
    /// Probe timeout; defaulted to 1.
    pub timeout_seconds: i32,
    /// Probe period; defaulted to 10.
    pub period_seconds: i32,
    /// Consecutive successes to count as success; defaulted to 1.
    pub success_threshold: i32,
    /// Consecutive failures to count as failure; defaulted to 3.
    pub failure_threshold: i32,
    /// Grace period when this probe kills the container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
}

/// `v1.ExecAction`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ExecAction {
    /// Command line.
    pub command: Vec<String>,
}

/// `v1.HTTPGetAction`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpGetAction {
    /// Path; defaulted to `/`.
    #[serde(default)]
    pub path: String,
    /// Port number or container port name.
    pub port: IntOrString,
    /// Host; defaulted to the pod IP.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host: String,
    /// `HTTP` or `HTTPS`; defaulted to `HTTP`.
    #[serde(default)]
    pub scheme: String,
    /// Extra request headers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http_headers: Vec<HttpHeader>,
}

/// `v1.HTTPHeader`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HttpHeader {
    /// Header name.
    pub name: String,
    /// Header value.
    pub value: String,
}

/// `v1.TCPSocketAction`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TcpSocketAction {
    /// Port number or container port name.
    pub port: IntOrString,
    /// Host; defaulted to the pod IP.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host: String,
}

/// `v1.GRPCAction`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrpcAction {
    /// Port number (names are not allowed).
    pub port: i64,
    /// Service name for `grpc.health.v1.Health/Check`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
}

/// A pod's `status.phase` (kubelet's `getPhase` computes it), spelled as the API spells it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PodPhase {
    /// Accepted, but not every container has been created (init containers may run).
    #[default]
    Pending,
    /// Every container has been created and at least one runs (or restarts).
    Running,
    /// Every container exited with 0 and none will restart.
    Succeeded,
    /// Every container has exited and at least one failed, with no restart to come.
    Failed,
    /// The phase could not be determined.
    Unknown,
}

impl PodPhase {
    /// Every value, in the order the API lists them.
    pub const ALL: [PodPhase; 5] =
        [PodPhase::Pending, PodPhase::Running, PodPhase::Succeeded, PodPhase::Failed, PodPhase::Unknown];

    /// The value's spelling in the API.
    pub const fn as_str(self) -> &'static str {
        match self {
            PodPhase::Pending => "Pending",
            PodPhase::Running => "Running",
            PodPhase::Succeeded => "Succeeded",
            PodPhase::Failed => "Failed",
            PodPhase::Unknown => "Unknown",
        }
    }

    /// The value spelled `s`, if it is one.
    pub fn parse(s: &str) -> Option<PodPhase> {
        PodPhase::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// Succeeded or Failed: nothing of the pod will run again.
    pub fn is_terminal(self) -> bool {
        matches!(self, PodPhase::Succeeded | PodPhase::Failed)
    }
}

impl std::fmt::Display for PodPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for PodPhase {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for PodPhase {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for PodPhase {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for PodPhase {
    /// Any other spelling reads as `Unknown`: the API types the phase as a free string, and a
    /// manifest's `status` (which the agent replaces) must never make the pod undecodable.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<str>::deserialize(d)?;
        Ok(PodPhase::parse(&s).unwrap_or(PodPhase::Unknown))
    }
}

/// `v1.PodStatus`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodStatus {
    /// The pod's phase.
    pub phase: PodPhase,
    /// PodScheduled, PodReadyToStartContainers, Initialized, ContainersReady, Ready.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<PodCondition>,
    /// Human-readable reason for the phase.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Machine-readable reason for the phase.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Node address.
    #[serde(rename = "hostIP", skip_serializing_if = "String::is_empty")]
    pub host_ip: String,
    /// Node addresses.
    #[serde(rename = "hostIPs", skip_serializing_if = "Vec::is_empty")]
    pub host_ips: Vec<PodIp>,
    /// Pod address.
    #[serde(rename = "podIP", skip_serializing_if = "String::is_empty")]
    pub pod_ip: String,
    /// Pod addresses.
    #[serde(rename = "podIPs", skip_serializing_if = "Vec::is_empty")]
    pub pod_ips: Vec<PodIp>,
    /// When the agent acknowledged the pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// Init container statuses, in spec order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub init_container_statuses: Vec<ContainerStatus>,
    /// App container statuses, in spec order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub container_statuses: Vec<ContainerStatus>,
    /// Guaranteed, Burstable or BestEffort.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub qos_class: String,
}

/// `v1.PodIP` / `v1.HostIP`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodIp {
    /// The address.
    pub ip: String,
}

/// `v1.PodCondition`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodCondition {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Last probe time (always null, as in kubelet).
    pub last_probe_time: Option<Time>,
    /// When the status last changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// Machine-readable reason.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Human-readable message.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// `v1.ContainerStatus`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ContainerStatus {
    /// Container name.
    pub name: String,
    /// Current state.
    pub state: ContainerState,
    /// The previous termination, if any.
    pub last_state: ContainerState,
    /// Whether the container passes its readiness probe.
    pub ready: bool,
    /// How often the container was restarted.
    pub restart_count: i32,
    /// Image as written in the spec.
    pub image: String,
    /// Image id (empty for the process runtime).
    #[serde(rename = "imageID")]
    pub image_id: String,
    /// `<runtime>://<id>` once created.
    #[serde(rename = "containerID", skip_serializing_if = "String::is_empty")]
    pub container_id: String,
    /// Whether the container passed its startup probe.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started: Option<bool>,
    /// Plugin devices the container holds, with their health.
    #[serde(rename = "allocatedResourcesStatus", skip_serializing_if = "Vec::is_empty")]
    pub allocated_resources_status: Vec<ResourceStatus>,
}

/// `v1.ResourceStatus`: the devices of one resource a container holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ResourceStatus {
    /// Resource name, e.g. `example.com/dev`.
    pub name: String,
    /// One entry per device.
    pub resources: Vec<ResourceHealth>,
}

/// `v1.ResourceHealth`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ResourceHealth {
    /// Device ID.
    #[serde(rename = "resourceID")]
    pub resource_id: String,
    /// `Healthy` or `Unhealthy`.
    pub health: String,
}

/// `v1.ContainerState`: at most one member is set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContainerState {
    /// Waiting to start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<ContainerStateWaiting>,
    /// Running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<ContainerStateRunning>,
    /// Exited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminated: Option<ContainerStateTerminated>,
}

/// `v1.ContainerStateWaiting`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContainerStateWaiting {
    /// e.g. `ContainerCreating`, `PodInitializing`, `CrashLoopBackOff`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Details.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// `v1.ContainerStateRunning`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ContainerStateRunning {
    /// When the process started.
    pub started_at: Option<Time>,
}

/// `v1.ContainerStateTerminated`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ContainerStateTerminated {
    /// Exit code (128 + signal for a signalled process).
    pub exit_code: i32,
    /// Signal number, if the process was signalled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// `Completed`, `Error` or `OOMKilled`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Details.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When the process started.
    pub started_at: Option<Time>,
    /// When the process exited.
    pub finished_at: Option<Time>,
    /// `<runtime>://<id>`.
    #[serde(rename = "containerID", skip_serializing_if = "String::is_empty")]
    pub container_id: String,
}

/// `metav1.ListMeta`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ListMeta {
    /// Unused locally; kept for shape compatibility.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
}

/// `v1.PodList`, the body of the local API's `/pods`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodList {
    /// `v1`.
    pub api_version: String,
    /// `PodList`.
    pub kind: String,
    /// List metadata.
    pub metadata: ListMeta,
    /// The pods.
    pub items: Vec<Pod>,
}

/// `v1.ObjectReference`: what an event is about.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectReference {
    /// `Pod` or `Node`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Namespace (empty for the Node).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Uid.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// `v1`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// Object version.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    /// A part of the object, e.g. `spec.containers{app}`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub field_path: String,
}

/// `v1.EventSource`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct EventSource {
    /// Component, e.g. `ferrolet`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub component: String,
    /// Node name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub host: String,
}

/// `v1.Event` (core/v1, the kind kubelet records).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Event {
    /// `v1`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// `Event`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Name `<involved name>.<hex nanoseconds>`, namespace of the object or `default`.
    pub metadata: ObjectMeta,
    /// What the event is about.
    pub involved_object: ObjectReference,
    /// Short machine-readable reason, e.g. `BackOff`.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// Who reported it.
    pub source: EventSource,
    /// First occurrence.
    pub first_timestamp: Option<Time>,
    /// Last occurrence.
    pub last_timestamp: Option<Time>,
    /// Occurrences.
    pub count: i32,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Always null for these legacy events.
    pub event_time: Option<Time>,
    /// Controller that emitted it (the source component).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reporting_component: String,
    /// Instance that emitted it (the node name).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reporting_instance: String,
}

/// `v1.EventList`, the body of the local API's `/events`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EventList {
    /// `v1`.
    pub api_version: String,
    /// `EventList`.
    pub kind: String,
    /// List metadata.
    pub metadata: ListMeta,
    /// The events, oldest first.
    pub items: Vec<Event>,
}

/// `v1.Node`: what the local API shows and what cluster mode registers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Node {
    /// `v1`.
    pub api_version: String,
    /// `Node`.
    pub kind: String,
    /// Name, labels.
    pub metadata: ObjectMeta,
    /// Taints.
    #[serde(skip_serializing_if = "NodeSpec::is_empty")]
    pub spec: NodeSpec,
    /// Capacity, allocatable, conditions, addresses, node info, images.
    pub status: NodeStatus,
}

/// `v1.NodeSpec` (what a node agent sets).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeSpec {
    /// Taints registered with the node.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Every other field as the apiserver has it (kept when the node is adopted).
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

impl NodeSpec {
    fn is_empty(&self) -> bool {
        self.taints.is_empty() && self.other.is_empty()
    }
}

/// `v1.Taint`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Taint {
    /// The key.
    pub key: String,
    /// The value.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// `v1.NodeAddress`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeAddress {
    /// `InternalIP`, `Hostname`, …
    #[serde(rename = "type")]
    pub type_: String,
    /// The address.
    pub address: String,
}

/// `v1.NodeSystemInfo`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeSystemInfo {
    /// `/etc/machine-id`.
    #[serde(rename = "machineID")]
    pub machine_id: String,
    /// The DMI product UUID, when readable.
    #[serde(rename = "systemUUID")]
    pub system_uuid: String,
    /// `/proc/sys/kernel/random/boot_id`.
    #[serde(rename = "bootID")]
    pub boot_id: String,
    /// `uname -r`.
    pub kernel_version: String,
    /// `PRETTY_NAME` of `/etc/os-release`.
    pub os_image: String,
    /// `containerd://1.6.20`, `process://<ferrolet version>`.
    pub container_runtime_version: String,
    /// The agent's version (kubelet's field; ferrolet's own version here).
    pub kubelet_version: String,
    /// Empty (deprecated).
    pub kube_proxy_version: String,
    /// `linux`.
    pub operating_system: String,
    /// `amd64`, `arm64`, … (GOARCH names).
    pub architecture: String,
}

/// `v1.ContainerImage`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ContainerImage {
    /// Tags and digests.
    pub names: Vec<String>,
    /// Bytes.
    pub size_bytes: i64,
}

/// `v1.DaemonEndpoint` inside `v1.NodeDaemonEndpoints`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeDaemonEndpoints {
    /// The agent's own endpoint (`{"Port": N}`).
    pub kubelet_endpoint: DaemonEndpoint,
}

/// `v1.DaemonEndpoint`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DaemonEndpoint {
    /// The port (the API's spelling is `Port`).
    #[serde(rename = "Port")]
    pub port: i32,
}

/// `v1.NodeStatus`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeStatus {
    /// `InternalIP` and `Hostname`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<NodeAddress>,
    /// Kernel, OS, runtime and agent versions, architecture.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_info: Option<NodeSystemInfo>,
    /// The images on the node (the largest 50, as kubelet reports them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ContainerImage>,
    /// The agent's endpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daemon_endpoints: Option<NodeDaemonEndpoints>,
    /// Everything the node has, device plugin resources included (healthy + unhealthy).
    pub capacity: BTreeMap<String, Quantity>,
    /// What pods may use (device plugin resources: healthy devices).
    pub allocatable: BTreeMap<String, Quantity>,
    /// Ready and the pressure conditions, as kubelet reports them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<NodeCondition>,
}

/// `v1.NodeCondition`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeCondition {
    /// `Ready`, `MemoryPressure`, `DiskPressure`, `PIDPressure`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// When the agent last confirmed the condition.
    pub last_heartbeat_time: Option<Time>,
    /// When the status last changed.
    pub last_transition_time: Option<Time>,
    /// Machine-readable reason (`KubeletReady`).
    #[serde(default)]
    pub reason: String,
    /// Human-readable message.
    #[serde(default)]
    pub message: String,
}

/// `v1.Volume`: a name and exactly one source.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Volume {
    /// The name mounts refer to (a DNS label, unique in the pod).
    pub name: String,
    /// A directory that lives as long as the pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub empty_dir: Option<EmptyDirVolumeSource>,
    /// A file or directory of the node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_path: Option<HostPathVolumeSource>,
    /// Files holding the pod's own fields.
    #[serde(rename = "downwardAPI", skip_serializing_if = "Option::is_none")]
    pub downward_api: Option<DownwardApiVolumeSource>,
    /// Several sources in one directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub projected: Option<ProjectedVolumeSource>,
    /// A ConfigMap's keys as files (pods from the apiserver only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapVolumeSource>,
    /// A Secret's keys as files, on a tmpfs (pods from the apiserver only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretVolumeSource>,
    /// Every other source as written (`persistentVolumeClaim`, `nfs`, …): refused by
    /// `api::fields`, never silently dropped.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// A file mode as manifests write it: a number, or octal as YAML 1.1 reads `0644` (the YAML
/// parser here reads it as text) or `0o644`.
fn file_mode<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i32>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Mode {
        Number(i32),
        Text(String),
    }
    Ok(match Option::<Mode>::deserialize(d)? {
        None => None,
        Some(Mode::Number(n)) => Some(n),
        Some(Mode::Text(t)) => {
            let digits = t.strip_prefix("0o").or_else(|| t.strip_prefix('0')).unwrap_or(&t);
            let octal = i32::from_str_radix(digits, 8).ok().filter(|_| t.starts_with('0'));
            Some(octal.ok_or_else(|| {
                serde::de::Error::custom(format!("{t:?} is not a file mode (a number, or octal like 0644)"))
            })?)
        }
    })
}

/// `v1.EmptyDirVolumeSource`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EmptyDirVolumeSource {
    /// `""` (the node's disk) or `Memory` (a tmpfs).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub medium: String,
    /// The most it may hold: a tmpfs's size; on disk, ferrolet does not measure it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_limit: Option<Quantity>,
}

/// `v1.HostPathVolumeSource`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HostPathVolumeSource {
    /// The path on the node.
    pub path: String,
    /// What must be there (`HostPathType`); unset or `""`: nothing is checked.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

/// `v1.DownwardAPIVolumeSource`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DownwardApiVolumeSource {
    /// The files.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<DownwardApiVolumeFile>,
    /// The files' mode unless an item sets its own (default 0644).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "file_mode")]
    pub default_mode: Option<i32>,
}

/// `v1.DownwardAPIVolumeFile`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DownwardApiVolumeFile {
    /// The file's path in the volume (relative, no `..`).
    pub path: String,
    /// A field of the pod (`metadata.name`, `metadata.labels`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field_ref: Option<Value>,
    /// A container's resource request or limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_field_ref: Option<Value>,
    /// The file's mode.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "file_mode")]
    pub mode: Option<i32>,
}

/// `v1.ProjectedVolumeSource`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProjectedVolumeSource {
    /// The sources, each exactly one kind.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<VolumeProjection>,
    /// The files' mode unless an item sets its own (default 0644).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "file_mode")]
    pub default_mode: Option<i32>,
}

/// `v1.VolumeProjection`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct VolumeProjection {
    /// Downward API files.
    #[serde(rename = "downwardAPI", skip_serializing_if = "Option::is_none")]
    pub downward_api: Option<DownwardApiProjection>,
    /// A ConfigMap's keys.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapProjection>,
    /// A Secret's keys.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretProjection>,
    /// A token of the pod's service account (TokenRequest), bound to the pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account_token: Option<ServiceAccountTokenProjection>,
    /// Every other source as written (`clusterTrustBundle`, `podCertificate`, …), refused
    /// by `api::fields`.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// `v1.DownwardAPIProjection`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DownwardApiProjection {
    /// The files.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<DownwardApiVolumeFile>,
}

/// `v1.KeyToPath`: one key of a ConfigMap or Secret as one file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KeyToPath {
    /// The key.
    pub key: String,
    /// The file's path in the volume (relative, no `..`).
    pub path: String,
    /// The file's mode.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "file_mode")]
    pub mode: Option<i32>,
}

/// `v1.ConfigMapVolumeSource`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConfigMapVolumeSource {
    /// The ConfigMap, in the pod's namespace.
    pub name: String,
    /// The keys to write, and where; none: every key, at its own name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<KeyToPath>,
    /// The files' mode unless an item sets its own (default 0644).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "file_mode")]
    pub default_mode: Option<i32>,
    /// A missing ConfigMap (or key) is an empty volume (or no file), not an error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

/// `v1.SecretVolumeSource`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SecretVolumeSource {
    /// The Secret, in the pod's namespace.
    pub secret_name: String,
    /// The keys to write, and where; none: every key, at its own name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<KeyToPath>,
    /// The files' mode unless an item sets its own (default 0644).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "file_mode")]
    pub default_mode: Option<i32>,
    /// A missing Secret (or key) is an empty volume (or no file), not an error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

/// `v1.ConfigMapProjection`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConfigMapProjection {
    /// The ConfigMap, in the pod's namespace.
    pub name: String,
    /// The keys to write, and where; none: every key, at its own name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<KeyToPath>,
    /// A missing ConfigMap (or key) writes nothing, not an error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

/// `v1.SecretProjection`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SecretProjection {
    /// The Secret, in the pod's namespace.
    pub name: String,
    /// The keys to write, and where; none: every key, at its own name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<KeyToPath>,
    /// A missing Secret (or key) writes nothing, not an error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

/// `v1.ServiceAccountTokenProjection`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServiceAccountTokenProjection {
    /// Who the token is for; empty: the apiserver's own audiences.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub audience: String,
    /// Its lifetime asked for (default 3600, at least 600).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expiration_seconds: Option<i64>,
    /// The file's path in the volume.
    pub path: String,
}

/// `v1.EnvFromSource`: every key of a ConfigMap or Secret as a variable.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EnvFromSource {
    /// Put before each key.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub prefix: String,
    /// A ConfigMap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<OptionalRef>,
    /// A Secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<OptionalRef>,
}

/// A ConfigMap or Secret in the pod's namespace, maybe optional (`ConfigMapEnvSource`,
/// `SecretEnvSource`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OptionalRef {
    /// Its name.
    pub name: String,
    /// A missing object is no variables, not an error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

/// `v1.LocalObjectReference` (`imagePullSecrets[]`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LocalObjectReference {
    /// The name, in the pod's namespace.
    pub name: String,
}

/// `v1.VolumeMount`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct VolumeMount {
    /// The volume's name.
    pub name: String,
    /// Where it appears in the container (absolute).
    pub mount_path: String,
    /// Mounted read-only.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
    /// A path inside the volume to mount instead of its root.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub sub_path: String,
    /// As `subPath`, with `$(VAR)` expanded from the container's environment.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub sub_path_expr: String,
    /// `None` (the default), `HostToContainer` or `Bidirectional`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mount_propagation: Option<String>,
    /// Every other field as written (`recursiveReadOnly`), judged by `api::fields`.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn restart_policies_restart_as_kubelet_does_and_keep_their_spelling() {
        let cases = [
            (RestartPolicy::Always, [true, true]),
            (RestartPolicy::OnFailure, [false, true]),
            (RestartPolicy::Never, [false, false]),
        ];
        for (policy, [after_success, after_failure]) in cases {
            assert_eq!(policy.restarts(0), after_success, "{policy:?} after exit 0");
            assert_eq!(policy.restarts(1), after_failure, "{policy:?} after exit 1");
            assert_eq!(RestartPolicy::parse(policy.as_str()), Some(policy));
        }
        assert_eq!(RestartPolicy::NAMES, RestartPolicy::ALL.map(RestartPolicy::as_str));
        assert_eq!(RestartPolicy::parse("Sometimes"), None);
        let spec = PodSpec { restart_policy: "OnFailure".into(), ..Default::default() };
        assert_eq!(spec.restart(), RestartPolicy::OnFailure);
        assert_eq!(PodSpec::default().restart(), RestartPolicy::Always, "unset reads as the API default");
        let back: PodSpec = serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap()["restartPolicy"], "OnFailure", "the manifest keeps the text");
    }

    #[test]
    fn an_unset_grace_period_is_the_api_default_and_a_negative_one_is_zero() {
        let mut spec = PodSpec::default();
        assert_eq!(spec.grace_period_seconds(), 30);
        assert_eq!(spec.termination_grace(), Duration::from_secs(30));
        assert_eq!(spec.termination_grace(), crate::api::defaults::DEFAULT_TERMINATION_GRACE);
        spec.termination_grace_period_seconds = Some(5);
        assert_eq!(spec.termination_grace(), Duration::from_secs(5));
        spec.termination_grace_period_seconds = Some(-1);
        assert_eq!((spec.grace_period_seconds(), spec.termination_grace()), (-1, Duration::ZERO));
    }

    #[test]
    fn pod_phases_keep_their_api_spelling_and_odd_ones_read_as_unknown() {
        for phase in PodPhase::ALL {
            let json = serde_json::to_string(&phase).unwrap();
            assert_eq!(json, format!("\"{phase}\""));
            assert_eq!(serde_json::from_str::<PodPhase>(&json).unwrap(), phase);
        }
        assert_eq!(serde_json::from_str::<PodPhase>("\"Sometimes\"").unwrap(), PodPhase::Unknown);
        let st: PodStatus = serde_json::from_str("{}").unwrap();
        assert_eq!(st.phase, PodPhase::Pending);
        assert!(PodPhase::Failed.is_terminal() && !PodPhase::Running.is_terminal());
        assert_eq!(PodPhase::Running, "Running");
    }
}
