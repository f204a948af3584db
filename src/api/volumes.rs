//! Pod volumes and containers' volume mounts (the types are in `types.rs`): their validation (the
//! apiserver's rules and messages), and the pure decisions the node makes over them: the
//! downward API files, the `hostPath` type checks, `subPathExpr` expansion, `fsGroup` modes
//! and the size of a memory-backed `emptyDir`. The node side (directories, tmpfs, files,
//! ownership) is the `poddir` module.
//!
//! ferrolet honours `emptyDir`, `hostPath`, `downwardAPI`, `configMap`, `secret`, and
//! `projected` with `downwardAPI`, `configMap`, `secret` and `serviceAccountToken` sources
//! (what pods take from the apiserver only in pods from it: `api::fields`). Every other
//! source is kept in `other` and refused by `api::fields`.

use super::field::{is_config_key, is_dns1123_label, quote, Errs, DNS1123_LABEL_FMT};
use super::quantity::Quantity;
use super::types::{
    Container, DownwardApiVolumeFile, EmptyDirVolumeSource, KeyToPath, Pod, ServiceAccountTokenProjection, Volume,
    VolumeMount,
};
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};

/// At most this many volumes in a pod (the apiserver sets no bound; a node needs one).
pub const MAX_VOLUMES: usize = 256;
/// At most this many files in one downward API volume (or projected volume).
pub const MAX_ITEMS: usize = 256;
/// At most this many mounts in one container.
pub const MAX_MOUNTS: usize = 256;

/// A `hostPath` volume's `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostPathType {
    /// `""`: nothing is checked.
    Unset,
    /// Made (0755, with its parents) when missing, then must be a directory.
    DirectoryOrCreate,
    /// Must be a directory.
    Directory,
    /// Made (empty, 0644) when missing, then must be a file.
    FileOrCreate,
    /// Must be a regular file.
    File,
    /// Must be a Unix socket.
    Socket,
    /// Must be a character device.
    CharDevice,
    /// Must be a block device.
    BlockDevice,
}

impl HostPathType {
    /// The spellings the API accepts.
    pub const NAMES: [&'static str; 8] =
        ["", "BlockDevice", "CharDevice", "Directory", "DirectoryOrCreate", "File", "FileOrCreate", "Socket"];

    /// The type spelled `s`, if it is one.
    pub fn parse(s: &str) -> Option<HostPathType> {
        Some(match s {
            "" => HostPathType::Unset,
            "DirectoryOrCreate" => HostPathType::DirectoryOrCreate,
            "Directory" => HostPathType::Directory,
            "FileOrCreate" => HostPathType::FileOrCreate,
            "File" => HostPathType::File,
            "Socket" => HostPathType::Socket,
            "CharDevice" => HostPathType::CharDevice,
            "BlockDevice" => HostPathType::BlockDevice,
            _ => return None,
        })
    }
}

/// What is at a path on the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// Nothing.
    Missing,
    /// A directory.
    Directory,
    /// A regular file.
    File,
    /// A Unix socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// Anything else (a FIFO).
    Other,
}

/// What the node does for a `hostPath` volume before it is mounted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostPathAction {
    /// Mount it as it is.
    Use,
    /// Make the directory (0755, with its parents), then mount it.
    MakeDirectory,
    /// Make an empty file (0644), then mount it.
    MakeFile,
}

/// kubelet's `hostPath` type check: what to do for `type_` when `found` is at `path`, or
/// kubelet's error (`hostPath type check failed: … is not a directory`).
pub fn host_path_check(type_: HostPathType, path: &str, found: FileKind) -> Result<HostPathAction, String> {
    let not = |what: &str| Err(format!("hostPath type check failed: {path} is not a {what}"));
    match (type_, found) {
        (HostPathType::Unset, _) => Ok(HostPathAction::Use),
        (HostPathType::DirectoryOrCreate, FileKind::Missing) => Ok(HostPathAction::MakeDirectory),
        (HostPathType::FileOrCreate, FileKind::Missing) => Ok(HostPathAction::MakeFile),
        (HostPathType::Directory | HostPathType::DirectoryOrCreate, FileKind::Directory)
        | (HostPathType::File | HostPathType::FileOrCreate, FileKind::File)
        | (HostPathType::Socket, FileKind::Socket)
        | (HostPathType::CharDevice, FileKind::CharDevice)
        | (HostPathType::BlockDevice, FileKind::BlockDevice) => Ok(HostPathAction::Use),
        (HostPathType::Directory | HostPathType::DirectoryOrCreate, _) => not("directory"),
        (HostPathType::File | HostPathType::FileOrCreate, _) => not("file"),
        (HostPathType::Socket, _) => not("socket file"),
        (HostPathType::CharDevice, _) => not("character device"),
        (HostPathType::BlockDevice, _) => not("block device"),
    }
}

impl Volume {
    /// The sources it sets, by their API names (exactly one in a valid volume).
    fn sources(&self) -> Vec<&str> {
        let mut set = Vec::new();
        for (name, present) in [
            ("emptyDir", self.empty_dir.is_some()),
            ("hostPath", self.host_path.is_some()),
            ("downwardAPI", self.downward_api.is_some()),
            ("projected", self.projected.is_some()),
            ("configMap", self.config_map.is_some()),
            ("secret", self.secret.is_some()),
        ] {
            if present {
                set.push(name);
            }
        }
        set.extend(self.other.iter().filter(|(_, v)| !v.is_null()).map(|(k, _)| k.as_str()));
        set
    }
}

/// The `fieldRef.fieldPath`s a downward API volume file may hold (the whole label and
/// annotation maps besides single keys; no IPs or node: a file is written once).
const VOLUME_FIELD_PATHS: [&str; 5] =
    ["metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels", "metadata.annotations"];

/// A file mode the API accepts: 0 to 0777.
fn check_mode(e: &mut Errs, mode: Option<i32>, path: &str) {
    if let Some(m) = mode.filter(|m| !(0..=0o777).contains(m)) {
        e.invalid(path, m.to_string(), "must be a number between 0 and 0777 (octal), both inclusive");
    }
}

/// A relative path with no `..` element (the apiserver's `validateLocalNonReservedPath`
/// without the reserved prefix rule for `subPath`).
fn check_local_path(e: &mut Errs, p: &str, path: &str) {
    if p.starts_with('/') {
        e.invalid(path, quote(p), "must be a relative path");
    }
    if p.split('/').any(|part| part == "..") {
        e.invalid(path, quote(p), "must not contain '..'");
    }
}

fn check_items(e: &mut Errs, items: &[DownwardApiVolumeFile], path: &str, pod: &Pod) {
    if items.len() > MAX_ITEMS {
        e.too_many(path, items.len(), MAX_ITEMS);
        return;
    }
    let mut seen = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        let base = format!("{path}[{i}]");
        if item.path.is_empty() {
            e.required(&format!("{base}.path"), "");
        } else {
            check_local_path(e, &item.path, &format!("{base}.path"));
            if item.path.starts_with("..") {
                e.invalid(&format!("{base}.path"), quote(&item.path), "must not start with '..'");
            }
            if !seen.insert(item.path.as_str()) {
                e.duplicate(&format!("{base}.path"), &item.path);
            }
        }
        check_mode(e, item.mode, &format!("{base}.mode"));
        match (&item.field_ref, &item.resource_field_ref) {
            (Some(f), None) => {
                let field = f.get("fieldPath").and_then(Value::as_str).unwrap_or_default();
                let subscripted = super::downward::check(&serde_json::json!({ "fieldRef": f })).is_ok()
                    && (field.starts_with("metadata.labels[") || field.starts_with("metadata.annotations["));
                if !VOLUME_FIELD_PATHS.contains(&field) && !subscripted {
                    e.not_supported(
                        &format!("{base}.fieldRef.fieldPath"),
                        field,
                        &[
                            "metadata.annotations",
                            "metadata.labels",
                            "metadata.name",
                            "metadata.namespace",
                            "metadata.uid",
                            "metadata.annotations['<KEY>']",
                            "metadata.labels['<KEY>']",
                        ],
                    );
                }
            }
            (None, Some(r)) => {
                if let Err(problem) = super::downward::check(&serde_json::json!({ "resourceFieldRef": r })) {
                    e.invalid(&format!("{base}.resourceFieldRef"), "{…}".into(), problem);
                }
                let container = r.get("containerName").and_then(Value::as_str).unwrap_or_default();
                if container.is_empty() {
                    e.required(&format!("{base}.resourceFieldRef.containerName"), "");
                } else if !pod.spec.init_containers.iter().chain(&pod.spec.containers).any(|c| c.name == container) {
                    e.invalid(
                        &format!("{base}.resourceFieldRef.containerName"),
                        quote(container),
                        "must be the name of a container in the pod",
                    );
                }
            }
            _ => e.invalid(&base, "{…}".into(), "must set exactly one of fieldRef and resourceFieldRef"),
        }
    }
}

/// A file's path in an atomically written volume: relative, no `..` element, not starting
/// with `..` (the writer's own names).
fn check_file_path(e: &mut Errs, p: &str, path: &str) {
    if p.is_empty() {
        e.required(path, "");
        return;
    }
    check_local_path(e, p, path);
    if p.starts_with("..") {
        e.invalid(path, quote(p), "must not start with '..'");
    }
}

/// A ConfigMap's or Secret's `items`, their paths recorded in `seen`.
fn check_key_items<'a>(e: &mut Errs, items: &'a [KeyToPath], path: &str, seen: &mut HashSet<&'a str>) {
    if items.len() > MAX_ITEMS {
        e.too_many(path, items.len(), MAX_ITEMS);
        return;
    }
    for (i, item) in items.iter().enumerate() {
        let base = format!("{path}[{i}]");
        if item.key.is_empty() {
            e.required(&format!("{base}.key"), "");
        } else if !is_config_key(&item.key) {
            e.invalid(&format!("{base}.key"), quote(&item.key), CONFIG_KEY_FMT);
        }
        check_file_path(e, &item.path, &format!("{base}.path"));
        if !item.path.is_empty() && !seen.insert(item.path.as_str()) {
            e.duplicate(&format!("{base}.path"), &item.path);
        }
        check_mode(e, item.mode, &format!("{base}.mode"));
    }
}

/// The apiserver's words for a bad ConfigMap or Secret key.
const CONFIG_KEY_FMT: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

/// The object's name a volume source refers to: required, a DNS subdomain.
fn check_object_name(e: &mut Errs, name: &str, path: &str) {
    if name.is_empty() {
        e.required(path, "");
    } else if !super::field::is_dns1123_subdomain(name) {
        e.invalid(path, quote(name), super::field::DNS1123_SUBDOMAIN_FMT);
    }
}

/// The shortest and longest service account token lifetimes the apiserver accepts.
pub const TOKEN_SECONDS: (i64, i64) = (600, 1 << 32);

/// A projected volume's `serviceAccountToken` source.
fn check_token(e: &mut Errs, t: &ServiceAccountTokenProjection, path: &str) {
    check_file_path(e, &t.path, &format!("{path}.path"));
    if let Some(s) = t.expiration_seconds {
        if s < TOKEN_SECONDS.0 {
            e.invalid(
                &format!("{path}.expirationSeconds"),
                s.to_string(),
                "may not specify a duration less than 10 minutes",
            );
        } else if s > TOKEN_SECONDS.1 {
            e.invalid(
                &format!("{path}.expirationSeconds"),
                s.to_string(),
                "may not specify a duration larger than 2^32 seconds",
            );
        }
    }
}

/// The apiserver's checks of `spec.volumes`.
pub(super) fn validate_volumes(e: &mut Errs, pod: &Pod) {
    let volumes = &pod.spec.volumes;
    if volumes.len() > MAX_VOLUMES {
        e.too_many("spec.volumes", volumes.len(), MAX_VOLUMES);
        return;
    }
    let mut names = HashSet::new();
    for (i, v) in volumes.iter().enumerate() {
        let base = format!("spec.volumes[{i}]");
        if v.name.is_empty() {
            e.required(&format!("{base}.name"), "");
        } else if !is_dns1123_label(&v.name) {
            e.invalid(&format!("{base}.name"), quote(&v.name), DNS1123_LABEL_FMT);
        } else if !names.insert(v.name.as_str()) {
            e.duplicate(&format!("{base}.name"), &v.name);
        }
        match v.sources().len() {
            0 => e.required(&base, "must specify a volume type"),
            1 => {}
            _ => e.forbidden(&base, "may not specify more than 1 volume type"),
        }
        if let Some(d) = &v.empty_dir {
            const MEDIA: &[&str] = &["", "HugePages", "Memory"];
            if !MEDIA.contains(&d.medium.as_str()) {
                e.not_supported(&format!("{base}.emptyDir.medium"), &d.medium, MEDIA);
            }
            if let Some(q) = d.size_limit.as_ref().filter(|q| q.is_negative() || q.is_zero()) {
                e.invalid(&format!("{base}.emptyDir.sizeLimit"), quote(&q.to_string()), "must be greater than zero");
            }
        }
        if let Some(h) = &v.host_path {
            if h.path.is_empty() {
                e.required(&format!("{base}.hostPath.path"), "");
            } else if h.path.split('/').any(|part| part == "..") {
                e.invalid(&format!("{base}.hostPath.path"), quote(&h.path), "must not contain '..'");
            }
            if let Some(t) = h.type_.as_deref().filter(|t| HostPathType::parse(t).is_none()) {
                e.not_supported(&format!("{base}.hostPath.type"), t, &HostPathType::NAMES);
            }
        }
        if let Some(d) = &v.downward_api {
            check_mode(e, d.default_mode, &format!("{base}.downwardAPI.defaultMode"));
            check_items(e, &d.items, &format!("{base}.downwardAPI.items"), pod);
        }
        if let Some(c) = &v.config_map {
            check_object_name(e, &c.name, &format!("{base}.configMap.name"));
            check_mode(e, c.default_mode, &format!("{base}.configMap.defaultMode"));
            check_key_items(e, &c.items, &format!("{base}.configMap.items"), &mut HashSet::new());
        }
        if let Some(s) = &v.secret {
            check_object_name(e, &s.secret_name, &format!("{base}.secret.secretName"));
            check_mode(e, s.default_mode, &format!("{base}.secret.defaultMode"));
            check_key_items(e, &s.items, &format!("{base}.secret.items"), &mut HashSet::new());
        }
        if let Some(p) = &v.projected {
            check_mode(e, p.default_mode, &format!("{base}.projected.defaultMode"));
            let mut seen = HashSet::new();
            for (j, s) in p.sources.iter().enumerate() {
                let sb = format!("{base}.projected.sources[{j}]");
                let kinds = usize::from(s.downward_api.is_some())
                    + usize::from(s.config_map.is_some())
                    + usize::from(s.secret.is_some())
                    + usize::from(s.service_account_token.is_some())
                    + s.other.values().filter(|x| !x.is_null()).count();
                if kinds != 1 {
                    e.forbidden(&sb, "must specify exactly 1 projection source");
                }
                if let Some(d) = &s.downward_api {
                    check_items(e, &d.items, &format!("{sb}.downwardAPI.items"), pod);
                    for (k, item) in d.items.iter().enumerate().filter(|(_, i)| !i.path.is_empty()) {
                        if !seen.insert(item.path.as_str()) {
                            e.invalid(
                                &format!("{sb}.downwardAPI.items[{k}].path"),
                                quote(&item.path),
                                "conflicting duplicate paths",
                            );
                        }
                    }
                }
                if let Some(c) = &s.config_map {
                    check_object_name(e, &c.name, &format!("{sb}.configMap.name"));
                    check_key_items(e, &c.items, &format!("{sb}.configMap.items"), &mut seen);
                }
                if let Some(c) = &s.secret {
                    check_object_name(e, &c.name, &format!("{sb}.secret.name"));
                    check_key_items(e, &c.items, &format!("{sb}.secret.items"), &mut seen);
                }
                if let Some(t) = &s.service_account_token {
                    check_token(e, t, &format!("{sb}.serviceAccountToken"));
                    if !t.path.is_empty() && !seen.insert(t.path.as_str()) {
                        e.invalid(
                            &format!("{sb}.serviceAccountToken.path"),
                            quote(&t.path),
                            "conflicting duplicate paths",
                        );
                    }
                }
            }
        }
    }
}

/// A `mountPropagation` the API accepts.
pub const PROPAGATIONS: [&str; 3] = ["Bidirectional", "HostToContainer", "None"];

/// The apiserver's checks of one container's `volumeMounts`.
pub(super) fn validate_mounts(e: &mut Errs, pod: &Pod, c: &Container, path: &str) {
    if c.volume_mounts.len() > MAX_MOUNTS {
        e.too_many(&format!("{path}.volumeMounts"), c.volume_mounts.len(), MAX_MOUNTS);
        return;
    }
    let mut paths = HashSet::new();
    for (i, m) in c.volume_mounts.iter().enumerate() {
        let base = format!("{path}.volumeMounts[{i}]");
        if m.name.is_empty() {
            e.required(&format!("{base}.name"), "");
        } else if !pod.spec.volumes.iter().any(|v| v.name == m.name) {
            e.not_found(&format!("{base}.name"), &m.name);
        }
        if m.mount_path.is_empty() {
            e.required(&format!("{base}.mountPath"), "");
        } else {
            if !m.mount_path.starts_with('/') {
                e.invalid(&format!("{base}.mountPath"), quote(&m.mount_path), "must be an absolute path");
            }
            if !paths.insert(m.mount_path.trim_end_matches('/')) {
                e.invalid(&format!("{base}.mountPath"), quote(&m.mount_path), "must be unique");
            }
        }
        if !m.sub_path.is_empty() {
            check_local_path(e, &m.sub_path, &format!("{base}.subPath"));
        }
        if !m.sub_path_expr.is_empty() {
            if !m.sub_path.is_empty() {
                e.invalid(
                    &format!("{base}.subPathExpr"),
                    quote(&m.sub_path_expr),
                    "subPathExpr and subPath are mutually exclusive",
                );
            }
            check_local_path(e, &m.sub_path_expr, &format!("{base}.subPathExpr"));
        }
        match m.mount_propagation.as_deref() {
            None | Some("None" | "HostToContainer") => {}
            Some("Bidirectional") => {
                if !c.security_context.as_ref().and_then(|s| s.privileged).unwrap_or(false) {
                    e.forbidden(
                        &format!("{base}.mountPropagation"),
                        "Bidirectional mount propagation is available only to privileged containers",
                    );
                }
            }
            Some(other) => e.not_supported(&format!("{base}.mountPropagation"), other, &PROPAGATIONS),
        }
    }
}

/// The contents of downward API file `item` for `pod`: a field (a whole label or
/// annotation map is `key="value"` lines, sorted, as kubelet writes it), or a container's
/// resource. `facts` are as for env.
pub fn downward_file(
    item: &DownwardApiVolumeFile,
    pod: &Pod,
    facts: &super::downward::Facts,
) -> Result<String, String> {
    if let Some(f) = &item.field_ref {
        let map = match f.get("fieldPath").and_then(Value::as_str) {
            Some("metadata.labels") => Some(&pod.metadata.labels),
            Some("metadata.annotations") => Some(&pod.metadata.annotations),
            _ => None,
        };
        if let Some(map) = map {
            let sorted: BTreeMap<&String, &String> = map.iter().collect();
            let lines: Vec<String> = sorted.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
            return Ok(lines.join("\n"));
        }
        let source = serde_json::json!({ "fieldRef": f });
        // No container is read for a field.
        return super::downward::value(&source, pod, &Container::default(), facts);
    }
    if let Some(r) = &item.resource_field_ref {
        let source = serde_json::json!({ "resourceFieldRef": r });
        return super::downward::value(&source, pod, &Container::default(), facts);
    }
    Err("no fieldRef or resourceFieldRef".into())
}

/// The mode of a file or directory `mode` after `fsGroup` ownership, as kubelet's
/// `SetVolumeOwnership`: group read and write (read only for a read-only volume), and for a
/// directory group search and set-group-id, so new files get the group too.
pub fn fs_group_mode(mode: u32, is_dir: bool, read_only: bool) -> u32 {
    let mut add = if read_only { 0o440 } else { 0o660 };
    if is_dir {
        add |= 0o2000 | 0o110;
    }
    mode | add
}

/// The size of a memory-backed `emptyDir` (kubelet's): its `sizeLimit`, capped by the
/// pod's memory limit (the sum of its containers' when every app container sets one, else
/// the node's allocatable memory `node_memory`).
pub fn memory_volume_size(source: &EmptyDirVolumeSource, pod: &Pod, node_memory: i64) -> i64 {
    let limits: Option<i64> =
        pod.spec.containers.iter().map(|c| c.resources.limits.get("memory").map(Quantity::value)).sum::<Option<i64>>();
    let init = pod.spec.init_containers.iter().filter_map(|c| c.resources.limits.get("memory").map(Quantity::value));
    let pod_limit = limits.map(|l| init.fold(l, i64::max)).unwrap_or(node_memory);
    match &source.size_limit {
        Some(q) if q.value() > 0 => q.value().min(pod_limit),
        _ => pod_limit,
    }
}

/// A mount's `subPath` for a container: `subPath` as written, or `subPathExpr` expanded from
/// the container's environment `env` (kubelet's rule: the result must stay relative and
/// without `..`; a reference to an unknown variable is an error, not left as written).
pub fn sub_path(m: &VolumeMount, env: &[(String, String)]) -> Result<String, String> {
    if m.sub_path_expr.is_empty() {
        return Ok(m.sub_path.clone());
    }
    let missing = std::cell::RefCell::new(None);
    let lookup = |name: &str| {
        let v = env.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        if v.is_none() {
            missing.borrow_mut().get_or_insert_with(|| name.to_string());
        }
        v
    };
    let expanded = super::expand::expand(&m.sub_path_expr, &lookup);
    if let Some(name) = missing.into_inner() {
        return Err(format!(
            "subPathExpr {:?}: variable {name} is not in the container's environment",
            m.sub_path_expr
        ));
    }
    if expanded.starts_with('/') || expanded.split('/').any(|p| p == "..") {
        return Err(format!(
            "subPathExpr {:?} expands to {expanded:?}, which must be a relative path without '..'",
            m.sub_path_expr
        ));
    }
    Ok(expanded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::manifest::decode_pods;

    fn decode(spec: &str) -> Result<Pod, String> {
        let text = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  labels: {{app: web, tier: edge}}\nspec:\n{spec}"
        );
        decode_pods("web.yaml", &text)
            .remove(0)
            .map_err(|e| e.into_iter().map(|e| e.problem).collect::<Vec<_>>().join("\n"))
    }

    #[test]
    fn volumes_and_mounts_are_checked_as_the_apiserver_does() {
        let err = decode("  volumes:\n  - {name: data, emptyDir: {}, hostPath: {path: /srv}}\n  - {name: data, emptyDir: {medium: Disk}}\n  - {name: none}\n  - {name: host, hostPath: {path: /srv/../etc, type: Dir}}\n  - name: info\n    downwardAPI:\n      defaultMode: 1000\n      items:\n      - {path: ../x, fieldRef: {fieldPath: status.podIP}}\n      - {path: cpu, resourceFieldRef: {resource: limits.cpu}}\n  containers:\n  - name: app\n    image: busybox\n    volumeMounts:\n    - {name: nothing, mountPath: data}\n    - {name: info, mountPath: /d, subPath: a, subPathExpr: b, mountPropagation: Sideways}\n    - {name: info, mountPath: /d/}\n").unwrap_err();
        let expected = [
            "spec.volumes[0]: Forbidden: may not specify more than 1 volume type",
            "spec.volumes[1].name: Duplicate value: \"data\"",
            "spec.volumes[1].emptyDir.medium: Unsupported value: \"Disk\": supported values: \"\", \"HugePages\", \"Memory\"",
            "spec.volumes[2]: Required value: must specify a volume type",
            "spec.volumes[3].hostPath.path: Invalid value: \"/srv/../etc\": must not contain '..'",
            "spec.volumes[3].hostPath.type: Unsupported value: \"Dir\"",
            "spec.volumes[4].downwardAPI.defaultMode: Invalid value: 1000: must be a number between 0 and 0777 (octal), both inclusive",
            "spec.volumes[4].downwardAPI.items[0].path: Invalid value: \"../x\": must not contain '..'",
            "spec.volumes[4].downwardAPI.items[0].path: Invalid value: \"../x\": must not start with '..'",
            "spec.volumes[4].downwardAPI.items[0].fieldRef.fieldPath: Unsupported value: \"status.podIP\"",
            "spec.volumes[4].downwardAPI.items[1].resourceFieldRef.containerName: Required value",
            "spec.containers[0].volumeMounts[0].name: Not found: \"nothing\"",
            "spec.containers[0].volumeMounts[0].mountPath: Invalid value: \"data\": must be an absolute path",
            "spec.containers[0].volumeMounts[1].subPathExpr: Invalid value: \"b\": subPathExpr and subPath are mutually exclusive",
            "spec.containers[0].volumeMounts[1].mountPropagation: Unsupported value: \"Sideways\"",
            "spec.containers[0].volumeMounts[2].mountPath: Invalid value: \"/d/\": must be unique",
        ];
        for want in expected {
            assert!(err.lines().any(|l| l.starts_with(want)), "missing {want:?} in:\n{err}");
        }
        assert_eq!(err.lines().count(), expected.len(), "{err}");
        let ok = decode("  securityContext: {fsGroup: 2000, fsGroupChangePolicy: OnRootMismatch}\n  volumes:\n  - {name: data, emptyDir: {medium: Memory, sizeLimit: 64Mi}}\n  - {name: host, hostPath: {path: /srv, type: DirectoryOrCreate}}\n  - name: info\n    projected:\n      sources:\n      - downwardAPI: {items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}, {path: mem, resourceFieldRef: {containerName: app, resource: limits.memory, divisor: 1Mi}, mode: 0400}, {path: uid, fieldRef: {fieldPath: metadata.uid}, mode: 0o440}]}\n  containers:\n  - name: app\n    image: busybox\n    volumeMounts:\n    - {name: data, mountPath: /data, subPathExpr: $(POD)}\n    - {name: host, mountPath: /srv, readOnly: true, mountPropagation: HostToContainer}\n    - {name: info, mountPath: /etc/info}\n");
        let pod = ok.unwrap();
        assert_eq!(pod.spec.volumes.len(), 3);
        let items = &pod.spec.volumes[2].projected.as_ref().unwrap().sources[0].downward_api.as_ref().unwrap().items;
        assert_eq!((items[1].mode, items[2].mode), (Some(0o400), Some(0o440)), "YAML 1.1 octal, as kubectl reads it");
        assert_eq!(pod.spec.containers[0].volume_mounts[1].mount_propagation.as_deref(), Some("HostToContainer"));
    }

    #[test]
    fn host_path_types_are_checked_as_kubelet_does() {
        use FileKind::*;
        use HostPathType as T;
        let check = |t, found| host_path_check(t, "/srv/x", found);
        assert_eq!(check(T::Unset, Missing), Ok(HostPathAction::Use));
        assert_eq!(check(T::DirectoryOrCreate, Missing), Ok(HostPathAction::MakeDirectory));
        assert_eq!(check(T::FileOrCreate, Missing), Ok(HostPathAction::MakeFile));
        assert_eq!(check(T::DirectoryOrCreate, Directory), Ok(HostPathAction::Use));
        assert_eq!(check(T::Socket, Socket), Ok(HostPathAction::Use));
        assert_eq!(check(T::CharDevice, CharDevice), Ok(HostPathAction::Use));
        assert_eq!(check(T::BlockDevice, BlockDevice), Ok(HostPathAction::Use));
        assert_eq!(check(T::Directory, File), Err("hostPath type check failed: /srv/x is not a directory".into()));
        assert_eq!(
            check(T::DirectoryOrCreate, File),
            Err("hostPath type check failed: /srv/x is not a directory".into())
        );
        assert_eq!(check(T::Directory, Missing), Err("hostPath type check failed: /srv/x is not a directory".into()));
        assert_eq!(check(T::FileOrCreate, Directory), Err("hostPath type check failed: /srv/x is not a file".into()));
        assert_eq!(check(T::File, Socket), Err("hostPath type check failed: /srv/x is not a file".into()));
        assert_eq!(check(T::Socket, File), Err("hostPath type check failed: /srv/x is not a socket file".into()));
        assert_eq!(
            check(T::CharDevice, BlockDevice),
            Err("hostPath type check failed: /srv/x is not a character device".into())
        );
        assert_eq!(
            check(T::BlockDevice, Other),
            Err("hostPath type check failed: /srv/x is not a block device".into())
        );
    }

    #[test]
    fn downward_files_hold_fields_whole_maps_and_resources() {
        let pod = decode("  volumes:\n  - name: info\n    downwardAPI:\n      items:\n      - {path: name, fieldRef: {fieldPath: metadata.name}}\n      - {path: labels, fieldRef: {fieldPath: metadata.labels}}\n      - {path: tier, fieldRef: {fieldPath: \"metadata.labels['tier']\"}}\n      - {path: mem, resourceFieldRef: {containerName: app, resource: limits.memory, divisor: 1Mi}}\n  containers:\n  - name: app\n    image: busybox\n    resources: {limits: {memory: 64Mi}}\n").unwrap();
        let facts = crate::api::downward::Facts::default();
        let source = pod.spec.volumes[0].downward_api.as_ref().unwrap();
        let (items, mode) = (&source.items, source.default_mode);
        assert_eq!(mode, None);
        let got: Vec<String> = items.iter().map(|i| downward_file(i, &pod, &facts).unwrap()).collect();
        assert_eq!(got, ["web", "app=\"web\"\ntier=\"edge\"", "edge", "64"]);
    }

    #[test]
    fn fs_group_gives_the_group_access_and_directories_set_group_id() {
        assert_eq!(fs_group_mode(0o644, false, false), 0o664);
        assert_eq!(fs_group_mode(0o600, false, true), 0o640);
        assert_eq!(fs_group_mode(0o777, true, false), 0o2777);
        assert_eq!(fs_group_mode(0o700, true, true), 0o2750);
    }

    #[test]
    fn a_memory_volume_is_its_size_limit_capped_by_the_pods_memory_limit() {
        let pod = |limits: &str| {
            decode(&format!("  containers:\n  - name: a\n    image: busybox\n    resources: {{limits: {{{limits}}}}}\n  - name: b\n    image: busybox\n    resources: {{limits: {{memory: 32Mi}}}}\n")).unwrap()
        };
        let source = |limit: Option<&str>| EmptyDirVolumeSource {
            medium: "Memory".into(),
            size_limit: limit.map(|l| Quantity::parse(l).unwrap()),
        };
        let node = 1 << 30;
        assert_eq!(memory_volume_size(&source(Some("16Mi")), &pod("memory: 64Mi"), node), 16 << 20);
        assert_eq!(
            memory_volume_size(&source(Some("1Gi")), &pod("memory: 64Mi"), node),
            96 << 20,
            "the pod's limit caps it"
        );
        assert_eq!(memory_volume_size(&source(None), &pod("memory: 64Mi"), node), 96 << 20);
        assert_eq!(
            memory_volume_size(&source(None), &pod("cpu: '1'"), node),
            node,
            "a container without a limit: the node's"
        );
    }

    #[test]
    fn sub_path_expr_expands_from_the_environment_and_stays_inside_the_volume() {
        let m = |expr: &str| VolumeMount { sub_path_expr: expr.into(), ..Default::default() };
        let env = [("POD".to_string(), "web-1".to_string()), ("UP".to_string(), "..".to_string())];
        assert_eq!(sub_path(&m("logs/$(POD)"), &env), Ok("logs/web-1".into()));
        assert_eq!(sub_path(&VolumeMount { sub_path: "a/b".into(), ..Default::default() }, &env), Ok("a/b".into()));
        assert_eq!(
            sub_path(&m("$(UP)/etc"), &env),
            Err("subPathExpr \"$(UP)/etc\" expands to \"../etc\", which must be a relative path without '..'".into())
        );
        assert_eq!(
            sub_path(&m("$(NODE)"), &env),
            Err("subPathExpr \"$(NODE)\": variable NODE is not in the container's environment".into())
        );
    }
}
