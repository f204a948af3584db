//! The rule for Pod fields: every field is honoured by the runtime in use, or refused with
//! a reason, or (where it means nothing on one node) accepted with one log line. Never
//! silently dropped.
//!
//! The fields ferrolet models are in `types.rs` and honoured; what a manifest sets beyond
//! them lands in `PodSpec::other` and `Container::other`, and is judged here by name (a
//! name not listed is unknown to ferrolet: a typo, or a field newer than it, and refused).
//! A field set to its zero value (`null`, `false`, `""`, `{}`, `[]`) asks for nothing and is
//! accepted silently: `kubectl get -o yaml` writes `tolerations: []`. The security
//! contexts and volumes are modelled (`api::security`, `api::volumes`); what they set beyond
//! the model (an `nfs` volume, `recursiveReadOnly`) is judged here too.
//! Some modelled fields are judged here too: on the process runtime `image` and a pod
//! network are accepted with a log line (it uses no image, every pod is on the host
//! network), and `hostAliases`, `hostname`, `subdomain`, `setHostnameAsFQDN`, `dnsConfig`
//! and `dnsPolicy: None` are refused (it shares the node's filesystem, UTS namespace and
//! resolver), as are `stdin`, `stdinOnce` and `tty` (it attaches nothing to a container); on the CRI runtime a host-network pod's hostname fields are accepted with a
//! log line (it has the node's hostname); a `hostPort` other than the `containerPort` on the
//! host network is refused. What a pod takes from the apiserver (ConfigMaps, Secrets, service
//! account tokens, pull secrets) is honoured in a pod from the apiserver and refused in a
//! static pod, as the apiserver refuses the mirror pod of such a pod.

use super::source::PodSource;
use super::types::{Container, DnsPolicy, Pod};
use serde_json::Value;
use std::collections::BTreeMap;

/// What ferrolet does with one field a pod sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Accepted; it has no effect on this node, for this reason.
    Accepted(String),
    /// Not run: the container waits as `CreateContainerConfigError` with this reason.
    Refused(String),
}

/// One field a pod sets that ferrolet does not model, or that the runtime cannot honour.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldUse {
    /// The field path, `spec.containers[0].volumeMounts`.
    pub path: String,
    /// Its verdict.
    pub verdict: Verdict,
}

impl FieldUse {
    /// Whether the field stops the pod's containers (a pod-level field) or this container.
    pub fn is_refused(&self) -> bool {
        matches!(self.verdict, Verdict::Refused(_))
    }

    /// `path: reason`, for messages and `ferrolet validate`.
    pub fn describe(&self) -> String {
        match &self.verdict {
            Verdict::Accepted(why) => format!("{}: accepted, no effect here: {why}", self.path),
            Verdict::Refused(why) => format!("{}: refused: {why}", self.path),
        }
    }
}

/// The fields that name a pod's service account.
const SERVICE_ACCOUNT_FIELDS: [&str; 3] = ["serviceAccountName", "serviceAccount", "automountServiceAccountToken"];

/// Why fields that place or admit pods across a cluster mean nothing to a static pod.
const SCHEDULING: &str = "it only guides the scheduler, and a static pod is already on its node";
/// Fields of later work.
const NOT_YET: &str = "not supported by ferrolet yet";

/// The verdict on a pod-level field ferrolet does not model.
fn pod_field(name: &str, value: &Value) -> Verdict {
    let accept = |why: &str| Verdict::Accepted(why.into());
    let refuse = |why: &str| Verdict::Refused(why.into());
    match name {
        "affinity"
        | "nodeSelector"
        | "tolerations"
        | "topologySpreadConstraints"
        | "schedulerName"
        | "schedulingGates"
        | "preemptionPolicy" => accept(SCHEDULING),
        "priority" | "priorityClassName" => {
            accept("priority orders scheduling and preemption, which do not happen on one node")
        }
        _ if SERVICE_ACCOUNT_FIELDS.contains(&name) => {
            accept("a static pod runs without a service account or its token")
        }
        "enableServiceLinks" => accept("there are no services to link on one node"),
        "os" => match value.get("name").and_then(Value::as_str) {
            Some("linux") => accept("this node is Linux"),
            _ => refuse("this node runs Linux pods only"),
        },
        "hostUsers" => refuse("user namespaces are not supported by ferrolet yet, and are never ignored"),
        "readinessGates" | "runtimeClassName" | "overhead" | "resourceClaims" | "ephemeralContainers" | "resources" => {
            refuse(NOT_YET)
        }
        _ => refuse("unknown field: not a PodSpec field ferrolet knows"),
    }
}

/// The verdict on a container field ferrolet does not model.
fn container_field(name: &str) -> Verdict {
    let refuse = |why: &str| Verdict::Refused(why.into());
    match name {
        "volumeDevices" => refuse("raw block volumes need a PersistentVolumeClaim, which ferrolet does not support"),
        "resizePolicy" | "restartPolicyRules" => refuse(NOT_YET),
        _ => refuse("unknown field: not a Container field ferrolet knows"),
    }
}

/// The verdict on a volume source ferrolet does not mount (`volumes[].X`, or a projected
/// volume's `sources[].X`).
fn volume_source(name: &str) -> Verdict {
    Verdict::Refused(format!(
        "the {name} volume source is not supported by ferrolet (it mounts emptyDir, hostPath, downwardAPI, configMap, secret and projected volumes of downwardAPI, configMap, secret and serviceAccountToken sources)"
    ))
}

/// Why a static pod may not use what the apiserver holds.
const STATIC_REFS: &str = "a static pod cannot use ConfigMaps, Secrets or service account tokens: the apiserver refuses the mirror pod of a pod that references them, and the node may read only what pods from the apiserver reference";

/// What a pod references in the apiserver (ConfigMaps, Secrets, service account tokens):
/// honoured for a pod from the apiserver, refused in a static pod (`STATIC_REFS`).
fn cluster_ref_uses(pod: &Pod, runtime: RuntimeKind, out: &mut Vec<FieldUse>) {
    let spec = &pod.spec;
    if PodSource::of(pod) == Some(PodSource::Api) {
        if runtime == RuntimeKind::Process && !spec.image_pull_secrets.is_empty() {
            let why = "the process runtime pulls no images";
            out.push(FieldUse { path: "spec.imagePullSecrets".into(), verdict: Verdict::Accepted(why.into()) });
        }
        return;
    }
    let mut refuse = |path: String| out.push(FieldUse { path, verdict: Verdict::Refused(STATIC_REFS.into()) });
    if !spec.image_pull_secrets.is_empty() {
        refuse("spec.imagePullSecrets".into());
    }
    for (i, v) in spec.volumes.iter().enumerate() {
        if v.config_map.is_some() {
            refuse(format!("spec.volumes[{i}].configMap"));
        }
        if v.secret.is_some() {
            refuse(format!("spec.volumes[{i}].secret"));
        }
        for (j, s) in v.projected.iter().flat_map(|p| p.sources.iter().enumerate()) {
            let set = [
                ("configMap", s.config_map.is_some()),
                ("secret", s.secret.is_some()),
                ("serviceAccountToken", s.service_account_token.is_some()),
            ];
            for (name, _) in set.iter().filter(|(_, set)| *set) {
                refuse(format!("spec.volumes[{i}].projected.sources[{j}].{name}"));
            }
        }
    }
    let containers = spec.init_containers.iter().map(|c| ("initContainers", c));
    let indexed = containers.enumerate().chain(spec.containers.iter().map(|c| ("containers", c)).enumerate());
    for (i, (list, c)) in indexed {
        for (k, _) in c.env_from.iter().enumerate() {
            refuse(format!("spec.{list}[{i}].envFrom[{k}]"));
        }
        for (k, v) in c.env.iter().enumerate() {
            let Some(from) = &v.value_from else { continue };
            for key in
                ["configMapKeyRef", "secretKeyRef"].into_iter().filter(|k| from.get(k).is_some_and(|x| !x.is_null()))
            {
                refuse(format!("spec.{list}[{i}].env[{k}].valueFrom.{key}"));
            }
        }
    }
}

/// The verdicts on what the pod's volumes set beyond what ferrolet mounts.
fn volume_uses(pod: &Pod, runtime: RuntimeKind, out: &mut Vec<FieldUse>) {
    for (i, v) in pod.spec.volumes.iter().enumerate() {
        let base = format!("spec.volumes[{i}]");
        for name in v.other.iter().filter(|(_, x)| !x.is_null()).map(|(n, _)| n) {
            out.push(FieldUse { path: format!("{base}.{name}"), verdict: volume_source(name) });
        }
        for (j, source) in v.projected.iter().flat_map(|p| p.sources.iter().enumerate()) {
            for name in source.other.iter().filter(|(_, x)| !x.is_null()).map(|(n, _)| n) {
                let path = format!("{base}.projected.sources[{j}].{name}");
                out.push(FieldUse { path, verdict: volume_source(name) });
            }
        }
        if let Some(d) = &v.empty_dir {
            if d.medium == "HugePages" {
                let why = "huge page volumes are not supported by ferrolet";
                out.push(FieldUse { path: format!("{base}.emptyDir.medium"), verdict: Verdict::Refused(why.into()) });
            }
        }
    }
    let lists = [("initContainers", &pod.spec.init_containers), ("containers", &pod.spec.containers)];
    for (list, containers) in lists {
        for (index, (j, m)) in
            containers.iter().enumerate().flat_map(|(i, c)| c.volume_mounts.iter().enumerate().map(move |m| (i, m)))
        {
            let base = format!("spec.{list}[{index}].volumeMounts[{j}]");
            if runtime == RuntimeKind::Process && m.mount_propagation.as_deref() == Some("Bidirectional") {
                let why = "the process runtime cannot propagate a container's mounts back to the host";
                out.push(FieldUse { path: format!("{base}.mountPropagation"), verdict: Verdict::Refused(why.into()) });
            }
            for (name, value) in m.other.iter().filter(|(_, x)| !is_zero(x)) {
                let verdict = match (name.as_str(), value.as_str()) {
                    ("recursiveReadOnly", Some("Disabled")) => continue,
                    ("recursiveReadOnly", Some("IfPossible")) => Verdict::Accepted(
                        "mounts below a read-only volume keep their own mode (recursive read-only is not possible here)"
                            .into(),
                    ),
                    ("recursiveReadOnly", _) => Verdict::Refused("recursive read-only mounts are not supported by ferrolet".into()),
                    _ => Verdict::Refused("unknown field: not a VolumeMount field ferrolet knows".into()),
                };
                out.push(FieldUse { path: format!("{base}.{name}"), verdict });
            }
        }
    }
}

/// The verdict on a security context field (pod or container) ferrolet does not model.
fn security_field(name: &str, value: &Value) -> Verdict {
    let accept = |why: &str| Verdict::Accepted(why.into());
    let refuse = |why: &str| Verdict::Refused(why.into());
    match name {
        "windowsOptions" => accept("this node runs Linux pods only"),
        "seLinuxChangePolicy" => accept("ferrolet labels no volume for SELinux"),
        "supplementalGroupsPolicy" if value.as_str() == Some("Merge") => accept("Merge is what ferrolet does"),
        "seLinuxOptions" => refuse("SELinux labels are not supported by ferrolet yet, and are never ignored"),
        "supplementalGroupsPolicy" => refuse("only Merge (the default) is supported"),
        _ => refuse("unknown field: not a security context field ferrolet knows"),
    }
}

fn security_uses(other: Option<&BTreeMap<String, Value>>, path: &str, out: &mut Vec<FieldUse>) {
    for (name, value) in other.into_iter().flatten().filter(|(_, v)| !is_zero(v)) {
        out.push(FieldUse { path: format!("{path}.securityContext.{name}"), verdict: security_field(name, value) });
    }
}

/// The fields `original` (a manifest's `spec`, as written) sets that `decoded` (the same
/// spec decoded and written back) lost: the members of modelled objects ferrolet does not
/// know (`ports[].hostIP`, a typo in a probe), which would otherwise be silently dropped.
/// A value that asks for nothing (including a 0) is not reported. Paths start with `path`.
pub fn dropped_fields(original: &Value, decoded: &Value, path: &str, out: &mut Vec<String>) {
    match (original, decoded) {
        (Value::Object(o), Value::Object(d)) => {
            for (k, v) in o {
                let p = format!("{path}.{k}");
                match d.get(k) {
                    Some(dv) => dropped_fields(v, dv, &p, out),
                    None if !asks_nothing(v) => out.push(p),
                    None => {}
                }
            }
        }
        (Value::Array(o), Value::Array(d)) if o.len() == d.len() => {
            for (i, (v, dv)) in o.iter().zip(d).enumerate() {
                dropped_fields(v, dv, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Whether a value asks for nothing, all the way down (`{limits: {}}`, a 0).
fn asks_nothing(v: &Value) -> bool {
    match v {
        Value::Object(o) => o.values().all(asks_nothing),
        Value::Array(a) => a.iter().all(asks_nothing),
        Value::Number(n) => n.as_f64() == Some(0.0),
        other => is_zero(other),
    }
}

/// Whether a value asks for nothing.
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Number(_) => false,
    }
}

fn container_uses(c: &Container, path: &str, runtime: RuntimeKind, host_network: bool, out: &mut Vec<FieldUse>) {
    // On the host network a port is the node's: it cannot be published elsewhere.
    if host_network || runtime == RuntimeKind::Process {
        for (i, p) in c.ports.iter().enumerate() {
            if p.host_port.is_some_and(|h| h != 0 && h != p.container_port) {
                let why = "on the host network hostPort must equal containerPort";
                out.push(FieldUse {
                    path: format!("{path}.ports[{i}].hostPort"),
                    verdict: Verdict::Refused(why.into()),
                });
            }
        }
    }
    if runtime == RuntimeKind::Process {
        for (name, _) in
            [("stdin", c.stdin), ("stdinOnce", c.stdin_once), ("tty", c.tty)].iter().filter(|(_, set)| *set)
        {
            out.push(FieldUse { path: format!("{path}.{name}"), verdict: Verdict::Refused(PROCESS_TERMINAL.into()) });
        }
    }
    for name in c.other.iter().filter(|(_, v)| !is_zero(v)).map(|(n, _)| n) {
        out.push(FieldUse { path: format!("{path}.{name}"), verdict: container_field(name) });
    }
    security_uses(c.security_context.as_ref().map(|s| &s.other), path, out);
    if runtime == RuntimeKind::Process && !c.image.is_empty() {
        let why = "the process runtime runs `command` on the host and uses no image";
        out.push(FieldUse { path: format!("{path}.image"), verdict: Verdict::Accepted(why.into()) });
    }
}

/// Why the process runtime refuses `stdin`, `stdinOnce` and `tty`.
const PROCESS_TERMINAL: &str = "the process runtime attaches no terminal or stdin to containers; the CRI runtime does";

/// Why the process runtime cannot honour the pod's own names and resolver settings.
const PROCESS_HOSTS: &str = "the process runtime runs every pod on the node's filesystem, with the node's /etc/hosts";
const PROCESS_UTS: &str = "the process runtime runs every pod in the node's UTS namespace, with the node's hostname";
const PROCESS_RESOLV: &str = "the process runtime runs every pod with the node's /etc/resolv.conf";

/// The pod's names and DNS fields (modelled): the CRI runtime honours them, except the
/// hostname fields of a host-network pod, which has the node's hostname (as with kubelet);
/// the process runtime, which shares the node's filesystem, UTS namespace and resolver,
/// refuses what it cannot honour.
fn dns_uses(pod: &Pod, runtime: RuntimeKind, out: &mut Vec<FieldUse>) {
    let spec = &pod.spec;
    let mut add = |field: &str, verdict: Verdict| out.push(FieldUse { path: format!("spec.{field}"), verdict });
    let hostname_fields = [
        ("hostname", !spec.hostname.is_empty()),
        ("subdomain", !spec.subdomain.is_empty()),
        ("setHostnameAsFQDN", spec.hostname_as_fqdn()),
    ];
    if runtime != RuntimeKind::Process {
        if spec.host_network {
            let why = "a host-network pod has the node's hostname, as with kubelet";
            for (field, _) in hostname_fields.iter().filter(|(_, set)| *set) {
                add(field, Verdict::Accepted(why.into()));
            }
        }
        return;
    }
    if !spec.host_aliases.is_empty() {
        add("hostAliases", Verdict::Refused(PROCESS_HOSTS.into()));
    }
    for (field, _) in hostname_fields.iter().filter(|(_, set)| *set) {
        add(field, Verdict::Refused(PROCESS_UTS.into()));
    }
    match spec.dns() {
        DnsPolicy::None => add("dnsPolicy", Verdict::Refused(PROCESS_RESOLV.into())),
        // A host-network pod's ClusterFirst is the node's resolver (kubelet's Default) anyway.
        DnsPolicy::ClusterFirstWithHostNet => add("dnsPolicy", Verdict::Accepted(PROCESS_RESOLV.into())),
        DnsPolicy::ClusterFirst | DnsPolicy::Default => {}
    }
    if spec.dns_config.is_some() {
        add("dnsConfig", Verdict::Refused(PROCESS_RESOLV.into()));
    }
}

/// Which runtime a pod runs on: what some Pod fields mean depends on it (the process
/// runtime runs every pod on the host network, from no image).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeKind {
    /// ferrolet's own: every container a host process under a shim.
    Process,
    /// A CRI v1 runtime (containerd).
    Cri,
}

/// Every field `pod` sets that ferrolet does not model, or that `runtime` does not
/// honour, with its verdict: pod fields first, then each container's.
pub fn check(pod: &Pod, runtime: RuntimeKind) -> Vec<FieldUse> {
    let mut out = Vec::new();
    // A pod from the apiserver runs as its service account: its token volume asks tokens for it.
    let from_api = PodSource::of(pod) == Some(PodSource::Api);
    let honoured = |name: &str| from_api && SERVICE_ACCOUNT_FIELDS.contains(&name);
    for (name, value) in pod.spec.other.iter().filter(|(n, v)| !is_zero(v) && !honoured(n)) {
        out.push(FieldUse { path: format!("spec.{name}"), verdict: pod_field(name, value) });
    }
    security_uses(pod.spec.security_context.as_ref().map(|s| &s.other), "spec", &mut out);
    volume_uses(pod, runtime, &mut out);
    cluster_ref_uses(pod, runtime, &mut out);
    dns_uses(pod, runtime, &mut out);
    if runtime == RuntimeKind::Process && !pod.spec.host_network {
        let why = "the process runtime runs every pod on the host network (podIP is the node's)";
        out.push(FieldUse { path: "spec.hostNetwork".into(), verdict: Verdict::Accepted(why.into()) });
    }
    for (i, c) in pod.spec.init_containers.iter().enumerate() {
        container_uses(c, &format!("spec.initContainers[{i}]"), runtime, pod.spec.host_network, &mut out);
    }
    for (i, c) in pod.spec.containers.iter().enumerate() {
        container_uses(c, &format!("spec.containers[{i}]"), runtime, pod.spec.host_network, &mut out);
    }
    out
}

/// Whether a field path is the pod's own, not one container's.
fn is_pod_level(path: &str) -> bool {
    !(path.starts_with("spec.containers[") || path.starts_with("spec.initContainers["))
}

/// The refusals that stop container `name` of a pod (the pod's own and the container's),
/// as one message; `None` when it may run.
pub fn refusal(uses: &[FieldUse], pod: &Pod, name: &str) -> Option<String> {
    let index = |list: &[Container]| list.iter().position(|c| c.name == name);
    let own = match (index(&pod.spec.init_containers), index(&pod.spec.containers)) {
        (Some(i), _) => format!("spec.initContainers[{i}]."),
        (None, Some(i)) => format!("spec.containers[{i}]."),
        (None, None) => return None,
    };
    let refused: Vec<String> = uses
        .iter()
        .filter(|u| u.is_refused())
        .filter(|u| u.path.starts_with(&own) || is_pod_level(&u.path))
        .map(FieldUse::describe)
        .collect();
    (!refused.is_empty()).then(|| refused.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::manifest::decode_pods;

    fn pod(spec: &str) -> Pod {
        let text = format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n{spec}");
        decode_pods("web.yaml", &text).remove(0).unwrap()
    }

    #[test]
    fn fields_ferrolet_does_not_model_are_kept_and_judged_never_dropped() {
        let p = pod("  tolerations: [{operator: Exists}]\n  volumes: [{name: data, emptyDir: {}}, {name: cfg, configMap: {name: app}}]\n  securityContext: {}\n  dnsPolicy: ClusterFirst\n  containers:\n  - name: app\n    image: busybox\n    command: [sleep, '1']\n    volumeMounts: [{name: data, mountPath: /data}]\n    tty: false\n    volumeDevices: [{name: data, devicePath: /dev/xvda}]\n    restartPolicyRules: []\n    terminationMessagePolicy: File\n");
        let uses = check(&p, RuntimeKind::Cri);
        let described: Vec<String> = uses.iter().map(FieldUse::describe).collect();
        assert_eq!(
            described,
            [
                format!("spec.tolerations: accepted, no effect here: {SCHEDULING}").as_str(),
                format!("spec.volumes[1].configMap: refused: {STATIC_REFS}").as_str(),
                "spec.containers[0].volumeDevices: refused: raw block volumes need a PersistentVolumeClaim, which ferrolet does not support",
            ]
        );
        // The pod's refusal stops every container; the container's own only it.
        let why = refusal(&uses, &p, "app").unwrap();
        assert!(
            why.starts_with("spec.volumes[1].configMap: refused") && why.contains("; spec.containers[0].volumeDevices"),
            "{why}"
        );
        // A field set to nothing asks for nothing.
        assert!(!described.iter().any(|d| d.contains("securityContext") || d.contains("tty")));
    }

    #[test]
    fn stdin_and_tty_are_honoured_by_the_cri_runtime_and_refused_by_the_process_runtime() {
        let p = pod("  containers:\n  - name: app\n    image: busybox\n    stdin: true\n    stdinOnce: true\n    tty: true\n  - name: plain\n    image: busybox\n    stdin: false\n");
        let c = &p.spec.containers[0];
        assert!(c.stdin && c.stdin_once && c.tty, "modelled, not left in `other`");
        assert!(c.other.is_empty());
        assert_eq!(check(&p, RuntimeKind::Cri), []);
        let uses = check(&p, RuntimeKind::Process);
        let refused: Vec<String> = uses.iter().filter(|u| u.is_refused()).map(FieldUse::describe).collect();
        assert_eq!(
            refused,
            ["stdin", "stdinOnce", "tty"].map(|f| format!("spec.containers[0].{f}: refused: {PROCESS_TERMINAL}"))
        );
        assert_eq!(
            refused[0],
            "spec.containers[0].stdin: refused: the process runtime attaches no terminal or stdin to containers; the CRI runtime does"
        );
        assert!(refusal(&uses, &p, "plain").is_none(), "only the container that asks is refused");
    }

    #[test]
    fn volume_sources_and_mount_fields_beyond_the_model_are_judged() {
        let p = pod("  volumes:\n  - {name: scratch, emptyDir: {sizeLimit: 1Gi}}\n  - {name: huge, emptyDir: {medium: HugePages}}\n  - {name: claim, persistentVolumeClaim: {claimName: c}}\n  - name: both\n    projected:\n      sources:\n      - downwardAPI: {items: [{path: name, fieldRef: {fieldPath: metadata.name}}]}\n      - serviceAccountToken: {path: token}\n  containers:\n  - name: app\n    image: busybox\n    securityContext: {privileged: true}\n    volumeMounts:\n    - {name: scratch, mountPath: /a, recursiveReadOnly: Disabled}\n    - {name: both, mountPath: /b, recursiveReadOnly: IfPossible, mountPropagation: Bidirectional}\n    - {name: huge, mountPath: /c, recursiveReadOnly: Enabled}\n");
        let described: Vec<String> = check(&p, RuntimeKind::Process).iter().map(FieldUse::describe).collect();
        assert_eq!(
            described[..6],
            [
                "spec.volumes[1].emptyDir.medium: refused: huge page volumes are not supported by ferrolet",
                "spec.volumes[2].persistentVolumeClaim: refused: the persistentVolumeClaim volume source is not supported by ferrolet (it mounts emptyDir, hostPath, downwardAPI, configMap, secret and projected volumes of downwardAPI, configMap, secret and serviceAccountToken sources)",
                "spec.containers[0].volumeMounts[1].mountPropagation: refused: the process runtime cannot propagate a container's mounts back to the host",
                "spec.containers[0].volumeMounts[1].recursiveReadOnly: accepted, no effect here: mounts below a read-only volume keep their own mode (recursive read-only is not possible here)",
                "spec.containers[0].volumeMounts[2].recursiveReadOnly: refused: recursive read-only mounts are not supported by ferrolet",
                &format!("spec.volumes[3].projected.sources[1].serviceAccountToken: refused: {STATIC_REFS}"),
            ]
        );
        assert!(
            !check(&p, RuntimeKind::Cri).iter().any(|u| u.path.ends_with("mountPropagation")),
            "CRI propagates them"
        );
    }

    #[test]
    fn what_the_apiserver_holds_is_honoured_for_its_pods_and_refused_in_static_pods() {
        let mut p = pod("  serviceAccountName: web\n  imagePullSecrets: [{name: regcred}]\n  volumes:\n  - {name: cfg, configMap: {name: app}}\n  - {name: sec, secret: {secretName: app}}\n  - name: api\n    projected:\n      sources:\n      - serviceAccountToken: {path: token}\n      - configMap: {name: kube-root-ca.crt}\n  containers:\n  - name: app\n    image: busybox\n    envFrom: [{configMapRef: {name: app}}]\n    env: [{name: K, valueFrom: {secretKeyRef: {name: app, key: k}}}]\n");
        let described = |p: &Pod, r| check(p, r).iter().map(FieldUse::describe).collect::<Vec<_>>();
        let refused = |path: &str| format!("{path}: refused: {STATIC_REFS}");
        assert_eq!(
            described(&p, RuntimeKind::Cri),
            [
                "spec.serviceAccountName: accepted, no effect here: a static pod runs without a service account or its token".to_string(),
                refused("spec.imagePullSecrets"),
                refused("spec.volumes[0].configMap"),
                refused("spec.volumes[1].secret"),
                refused("spec.volumes[2].projected.sources[0].serviceAccountToken"),
                refused("spec.volumes[2].projected.sources[1].configMap"),
                refused("spec.containers[0].envFrom[0]"),
                refused("spec.containers[0].env[0].valueFrom.secretKeyRef"),
            ]
        );
        p.metadata.annotations.insert(crate::api::source::CONFIG_SOURCE_ANNOTATION.into(), "api".into());
        assert_eq!(described(&p, RuntimeKind::Cri), Vec::<String>::new());
        assert_eq!(
            described(&p, RuntimeKind::Process)[0],
            "spec.imagePullSecrets: accepted, no effect here: the process runtime pulls no images"
        );
    }

    #[test]
    fn security_context_fields_beyond_the_model_are_judged_too() {
        let p = pod("  securityContext:\n    runAsUser: 1000\n    seLinuxOptions: {level: 's0:c1'}\n    seLinuxChangePolicy: Recursive\n  containers:\n  - name: app\n    image: busybox\n    securityContext:\n      windowsOptions: {runAsUserName: x}\n      runAsGroup: 5\n      seccompProfle: {type: RuntimeDefault}\n");
        assert_eq!(p.spec.security_context.as_ref().unwrap().run_as_user, Some(1000), "modelled fields are read");
        let described: Vec<String> = check(&p, RuntimeKind::Cri).iter().map(FieldUse::describe).collect();
        assert_eq!(
            described,
            [
                "spec.securityContext.seLinuxChangePolicy: accepted, no effect here: ferrolet labels no volume for SELinux",
                "spec.securityContext.seLinuxOptions: refused: SELinux labels are not supported by ferrolet yet, and are never ignored",
                "spec.containers[0].securityContext.seccompProfle: refused: unknown field: not a security context field ferrolet knows",
                "spec.containers[0].securityContext.windowsOptions: accepted, no effect here: this node runs Linux pods only",
            ]
        );
    }

    #[test]
    fn members_of_modelled_objects_that_decoding_would_drop_are_found() {
        let err = crate::api::manifest::decode_pods("web.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: app\n    image: busybox\n    ports: [{containerPort: 80, hostIP: 127.0.0.1}]\n    readinessProbe: {tcpSocket: {port: 80}, periodSecond: 5, initialDelaySeconds: 0}\n    resources: {limits: {cpu: '1'}, claims: []}\n").remove(0).unwrap_err();
        let problems: Vec<String> = err.into_iter().map(|e| e.problem).collect();
        assert_eq!(
            problems,
            [
                "spec.containers[0].ports[0].hostIP: Unsupported value: not a field ferrolet knows or supports",
                "spec.containers[0].readinessProbe.periodSecond: Unsupported value: not a field ferrolet knows or supports",
            ]
        );
    }

    #[test]
    fn a_typo_is_refused_as_unknown_and_a_pod_that_sets_nothing_unusual_runs() {
        let p = pod("  containers:\n  - name: app\n    image: busybox\n    comand: [sleep, '1']\n");
        let uses = check(&p, RuntimeKind::Cri);
        assert_eq!(
            uses,
            [FieldUse {
                path: "spec.containers[0].comand".into(),
                verdict: Verdict::Refused("unknown field: not a Container field ferrolet knows".into())
            }]
        );
        let p = pod("  hostNetwork: true\n  containers:\n  - name: app\n    image: busybox\n");
        assert_eq!(check(&p, RuntimeKind::Cri), []);
        assert_eq!(refusal(&[], &p, "app"), None);
    }

    #[test]
    fn the_process_runtime_says_it_uses_no_image_and_no_pod_network() {
        let p = pod("  initContainers:\n  - name: init\n    image: busybox\n    command: ['true']\n  containers:\n  - name: app\n    image: busybox\n    command: [sleep, '1']\n");
        let paths: Vec<(String, bool)> =
            check(&p, RuntimeKind::Process).into_iter().map(|u| (u.path.clone(), u.is_refused())).collect();
        assert_eq!(
            paths,
            [
                ("spec.hostNetwork".to_string(), false),
                ("spec.initContainers[0].image".to_string(), false),
                ("spec.containers[0].image".to_string(), false)
            ]
        );
        assert_eq!(check(&p, RuntimeKind::Cri), []);
    }

    #[test]
    fn a_host_port_other_than_the_container_port_is_refused_on_the_host_network() {
        let spec = |host_network: bool| {
            format!("  hostNetwork: {host_network}\n  containers:\n  - name: app\n    image: busybox\n    ports: [{{containerPort: 80, hostPort: 8080}}, {{containerPort: 53, hostPort: 53}}]\n")
        };
        let refused = |p: &Pod, runtime: RuntimeKind| -> Vec<String> {
            check(p, runtime).into_iter().filter(FieldUse::is_refused).map(|u| u.path).collect()
        };
        assert_eq!(refused(&pod(&spec(true)), RuntimeKind::Cri), ["spec.containers[0].ports[0].hostPort"]);
        assert_eq!(refused(&pod(&spec(false)), RuntimeKind::Process), ["spec.containers[0].ports[0].hostPort"]);
        assert!(refused(&pod(&spec(false)), RuntimeKind::Cri).is_empty(), "mapped by the runtime on the pod network");
    }

    #[test]
    fn the_process_runtime_refuses_the_pods_own_names_and_resolver_and_cri_honours_them() {
        let spec = "  hostAliases: [{ip: 10.1.2.3, hostnames: [db]}]\n  hostname: web\n  subdomain: sub\n  setHostnameAsFQDN: true\n  dnsPolicy: None\n  dnsConfig: {nameservers: [10.0.0.10]}\n  containers:\n  - name: app\n    image: busybox\n";
        let p = pod(spec);
        let described: Vec<String> =
            check(&p, RuntimeKind::Process).iter().filter(|u| u.is_refused()).map(FieldUse::describe).collect();
        assert_eq!(
            described,
            [
                format!("spec.hostAliases: refused: {PROCESS_HOSTS}"),
                format!("spec.hostname: refused: {PROCESS_UTS}"),
                format!("spec.subdomain: refused: {PROCESS_UTS}"),
                format!("spec.setHostnameAsFQDN: refused: {PROCESS_UTS}"),
                format!("spec.dnsPolicy: refused: {PROCESS_RESOLV}"),
                format!("spec.dnsConfig: refused: {PROCESS_RESOLV}"),
            ]
        );
        assert!(refusal(&check(&p, RuntimeKind::Process), &p, "app").unwrap().contains("node's UTS namespace"));
        assert_eq!(check(&p, RuntimeKind::Cri), [], "the CRI runtime honours every one of them");
        // The node's resolver is what the process runtime gives: ClusterFirst and Default ask
        // for nothing more; ClusterFirstWithHostNet is said once.
        for (policy, said) in [("ClusterFirst", false), ("Default", false), ("ClusterFirstWithHostNet", true)] {
            let p = pod(&format!("  dnsPolicy: {policy}\n  containers:\n  - name: app\n    image: busybox\n"));
            let uses = check(&p, RuntimeKind::Process);
            assert!(uses.iter().all(|u| !u.is_refused()), "{policy}");
            assert_eq!(uses.iter().any(|u| u.path == "spec.dnsPolicy"), said, "{policy}");
        }
    }

    #[test]
    fn a_host_network_pod_on_cri_keeps_the_nodes_hostname_and_says_so() {
        let p = pod("  hostNetwork: true\n  hostname: web\n  hostAliases: [{ip: 10.1.2.3, hostnames: [db]}]\n  containers:\n  - name: app\n    image: busybox\n");
        assert_eq!(
            check(&p, RuntimeKind::Cri),
            [FieldUse {
                path: "spec.hostname".into(),
                verdict: Verdict::Accepted("a host-network pod has the node's hostname, as with kubelet".into())
            }]
        );
    }
}
