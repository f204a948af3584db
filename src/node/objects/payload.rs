//! ConfigMaps, Secrets and tokens turned into what a pod sees, as kubelet turns them (pure):
//! the files of a `configMap`, `secret`, `downwardAPI` or `projected` volume, and a
//! container's variables from `envFrom` and `configMapKeyRef`/`secretKeyRef`, with kubelet's
//! messages for what is missing.

use super::{service_account, token_ref, Kind, Known, KnownToken, ObjectRef, ObjectsView};
use crate::api::types::{Container, DownwardApiVolumeFile, KeyToPath, Pod, Volume};
use std::collections::BTreeMap;
use std::time::SystemTime;

/// One file of a volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct File {
    /// Its content.
    pub data: Vec<u8>,
    /// Its mode.
    pub mode: u32,
}

/// A volume's files by path (relative, as validation keeps them).
pub type Payload = BTreeMap<String, File>;

/// The mode of a file no item or default sets (0644).
pub const DEFAULT_MODE: i32 = 0o644;

/// The files of one `items`-or-every-key source of `object` into `out`; `optional` makes a
/// missing key no file. `missing_key` is kubelet's message for a missing key.
fn key_files(
    data: &BTreeMap<String, Vec<u8>>,
    items: &[KeyToPath],
    default_mode: i32,
    optional: bool,
    missing_key: &dyn Fn(&str) -> String,
    out: &mut Payload,
) -> Result<(), String> {
    if items.is_empty() {
        for (k, v) in data {
            out.insert(k.clone(), File { data: v.clone(), mode: default_mode as u32 });
        }
        return Ok(());
    }
    for item in items {
        match data.get(&item.key) {
            Some(v) => {
                out.insert(item.path.clone(), File { data: v.clone(), mode: item.mode.unwrap_or(default_mode) as u32 });
            }
            None if optional => {}
            None => return Err(missing_key(&item.key)),
        }
    }
    Ok(())
}

/// What the view has of `r`, as kubelet's cache answers: the object, `None` for a missing
/// optional one, or the error.
fn lookup(view: &ObjectsView, r: &ObjectRef, optional: bool) -> Result<Option<std::sync::Arc<super::Object>>, String> {
    match view.object(r) {
        Known::Found(o) => Ok(Some(o)),
        Known::Missing if optional => Ok(None),
        Known::Missing => Err(format!("{} {:?} not found", r.kind.word(), r.name)),
        Known::Forbidden(message) | Known::Failed(message) => Err(message),
        Known::Unread => Err(format!("object {:?}/{:?} not registered", r.namespace, r.name)),
    }
}

fn object_ref(pod: &Pod, kind: Kind, name: &str) -> ObjectRef {
    ObjectRef { kind, namespace: pod.metadata.namespace.clone(), name: name.to_string() }
}

/// The files of volume `v` of `pod`: `None` for a volume that holds no written files
/// (`emptyDir`, `hostPath`), else its payload or kubelet's `MountVolume.SetUp` message for
/// what is missing. `downward` gives one downward API file's content; `now` is when tokens
/// are judged expired.
pub fn volume_payload(
    v: &Volume,
    pod: &Pod,
    view: &ObjectsView,
    downward: &dyn Fn(&DownwardApiVolumeFile) -> Result<String, String>,
    now: SystemTime,
) -> Option<Result<Payload, String>> {
    let mut out = Payload::new();
    let result = if let Some(d) = &v.downward_api {
        downward_files(&d.items, d.default_mode.unwrap_or(DEFAULT_MODE), downward, &mut out)
    } else if let Some(c) = &v.config_map {
        let r = object_ref(pod, Kind::ConfigMap, &c.name);
        let missing = |k: &str| format!("configmap references non-existent config key: {k}");
        let mode = c.default_mode.unwrap_or(DEFAULT_MODE);
        object_files(view, &r, &c.items, mode, c.optional, &missing, &|e| e, &mut out)
    } else if let Some(s) = &v.secret {
        let r = object_ref(pod, Kind::Secret, &s.secret_name);
        let missing = |k: &str| format!("references non-existent secret key: {k}");
        let mode = s.default_mode.unwrap_or(DEFAULT_MODE);
        object_files(view, &r, &s.items, mode, s.optional, &missing, &|e| e, &mut out)
    } else if let Some(p) = &v.projected {
        projected(p, pod, view, downward, now, &mut out)
    } else {
        return None;
    };
    Some(result.map(|()| out))
}

/// The files of a `configMap` or `secret` source of object `r` into `out`; `lookup_failed`
/// words a failed lookup (a projected volume names the object first).
#[allow(clippy::too_many_arguments)]
fn object_files(
    view: &ObjectsView,
    r: &ObjectRef,
    items: &[KeyToPath],
    default_mode: i32,
    optional: Option<bool>,
    missing_key: &dyn Fn(&str) -> String,
    lookup_failed: &dyn Fn(String) -> String,
    out: &mut Payload,
) -> Result<(), String> {
    let optional = optional.unwrap_or(false);
    match lookup(view, r, optional).map_err(lookup_failed)? {
        Some(o) => key_files(&o.data, items, default_mode, optional, missing_key, out),
        None => Ok(()),
    }
}

fn downward_files(
    items: &[DownwardApiVolumeFile],
    default_mode: i32,
    downward: &dyn Fn(&DownwardApiVolumeFile) -> Result<String, String>,
    out: &mut Payload,
) -> Result<(), String> {
    for item in items {
        let data = downward(item).map_err(|e| format!("{}: {e}", item.path))?;
        out.insert(item.path.clone(), File { data: data.into_bytes(), mode: item.mode.unwrap_or(default_mode) as u32 });
    }
    Ok(())
}

/// A projected volume's files, source by source (kubelet's `collectData`).
fn projected(
    p: &crate::api::types::ProjectedVolumeSource,
    pod: &Pod,
    view: &ObjectsView,
    downward: &dyn Fn(&DownwardApiVolumeFile) -> Result<String, String>,
    now: SystemTime,
    out: &mut Payload,
) -> Result<(), String> {
    let default_mode = p.default_mode.unwrap_or(DEFAULT_MODE);
    let ns = &pod.metadata.namespace;
    for s in &p.sources {
        if let Some(d) = &s.downward_api {
            downward_files(&d.items, default_mode, downward, out)?;
        }
        if let Some(c) = &s.config_map {
            let r = object_ref(pod, Kind::ConfigMap, &c.name);
            let missing = |k: &str| format!("configmap references non-existent config key: {k}");
            let failed = |e| format!("couldn't get configMap {ns}/{}: {e}", c.name);
            object_files(view, &r, &c.items, default_mode, c.optional, &missing, &failed, out)?;
        }
        if let Some(c) = &s.secret {
            let r = object_ref(pod, Kind::Secret, &c.name);
            let missing = |k: &str| format!("secret references non-existent secret key: {k}");
            let failed = |e| format!("couldn't get secret {ns}/{}: {e}", c.name);
            object_files(view, &r, &c.items, default_mode, c.optional, &missing, &failed, out)?;
        }
        if let Some(t) = &s.service_account_token {
            let r = token_ref(pod, t);
            let token = match view.token(&r) {
                KnownToken::Found(token) if token.expires > now => token,
                KnownToken::Found(token) => {
                    return Err(format!(
                        "failed to fetch token: the token of service account {ns}/{} expired at {} and no new one could be requested",
                        service_account(pod),
                        crate::base::timefmt::rfc3339(token.expires)
                    ))
                }
                KnownToken::Unread => {
                    return Err(format!("failed to fetch token: not yet requested for service account {ns}/{}", r.service_account))
                }
                KnownToken::Failed(e) => return Err(format!("failed to fetch token: {e}")),
            };
            out.insert(t.path.clone(), File { data: token.token.clone().into_bytes(), mode: default_mode as u32 });
        }
    }
    Ok(())
}

/// Variables (name, value), and warnings.
pub type EnvFrom = (Vec<(String, String)>, Vec<String>);

/// A container's variables from its `envFrom` sources, in order (a later source's key wins),
/// before its `env`; and for each source that had keys which are not variable names, kubelet's
/// `InvalidEnvironmentVariableNames` message. The error is `CreateContainerConfigError`'s
/// message.
pub fn env_from(c: &Container, pod: &Pod, view: &ObjectsView) -> Result<EnvFrom, String> {
    let mut vars: Vec<(String, String)> = Vec::new();
    let mut warnings = Vec::new();
    for f in &c.env_from {
        let (kind, r) = match (&f.config_map_ref, &f.secret_ref) {
            (Some(r), _) => (Kind::ConfigMap, r),
            (None, Some(r)) => (Kind::Secret, r),
            (None, None) => continue,
        };
        let Some(o) = lookup(view, &object_ref(pod, kind, &r.name), r.optional.unwrap_or(false))? else { continue };
        let mut invalid = Vec::new();
        for (k, v) in &o.data {
            let name = format!("{}{k}", f.prefix);
            if !crate::api::validation::is_env_var_name(&name) {
                invalid.push(name);
                continue;
            }
            vars.retain(|(n, _)| *n != name);
            vars.push((name, String::from_utf8_lossy(v).into_owned()));
        }
        if !invalid.is_empty() {
            warnings.push(format!(
                "Keys [{}] from the EnvFrom {} {}/{} were skipped since they are considered invalid environment variable names.",
                invalid.join(", "),
                kind.word(),
                pod.metadata.namespace,
                r.name
            ));
        }
    }
    Ok((vars, warnings))
}

/// The value of an env var's `configMapKeyRef` or `secretKeyRef` source: `Ok(None)` for
/// another kind of source, `Ok(Some(None))` when an optional object or key is missing (the
/// variable is left unset), or kubelet's message (`couldn't find key k in ConfigMap ns/x`).
pub fn key_ref(source: &serde_json::Value, pod: &Pod, view: &ObjectsView) -> Result<Option<Option<String>>, String> {
    let (kind, r, label) = if let Some(r) = source.get("configMapKeyRef").filter(|r| !r.is_null()) {
        (Kind::ConfigMap, r, "ConfigMap")
    } else if let Some(r) = source.get("secretKeyRef").filter(|r| !r.is_null()) {
        (Kind::Secret, r, "Secret")
    } else {
        return Ok(None);
    };
    let text = |k: &str| r.get(k).and_then(|v| v.as_str()).unwrap_or_default();
    let optional = r.get("optional").and_then(|v| v.as_bool()).unwrap_or(false);
    let Some(o) = lookup(view, &object_ref(pod, kind, text("name")), optional)? else { return Ok(Some(None)) };
    match o.data.get(text("key")) {
        Some(v) => Ok(Some(Some(String::from_utf8_lossy(v).into_owned()))),
        None if optional => Ok(Some(None)),
        None => {
            Err(format!("couldn't find key {} in {label} {}/{}", text("key"), pod.metadata.namespace, text("name")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::api_pod;
    use super::super::{Object, Token, TokenRef};
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn found(view: &ObjectsView, kind: Kind, name: &str, data: &[(&str, &str)]) {
        let data = data.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect();
        let r = ObjectRef { kind, namespace: "shop".into(), name: name.into() };
        view.set_object(&r, Some(Known::Found(Arc::new(Object { data, ..Object::default() }))));
    }

    fn no_downward(_: &DownwardApiVolumeFile) -> Result<String, String> {
        Ok("web".into())
    }

    fn files(p: &Payload) -> Vec<(String, String, u32)> {
        p.iter().map(|(k, f)| (k.clone(), String::from_utf8_lossy(&f.data).into_owned(), f.mode)).collect()
    }

    #[test]
    fn a_config_map_volume_holds_every_key_or_the_items_with_their_modes() {
        let view = ObjectsView::default();
        found(&view, Kind::ConfigMap, "app", &[("a.conf", "A"), ("b.conf", "B")]);
        let p = api_pod("  volumes:\n  - {name: all, configMap: {name: app}}\n  - {name: some, configMap: {name: app, defaultMode: 0600, items: [{key: a.conf, path: conf/a}, {key: b.conf, path: b, mode: 0444}]}}\n  containers: [{name: c, image: i}]\n");
        let now = SystemTime::now();
        let all = volume_payload(&p.spec.volumes[0], &p, &view, &no_downward, now).unwrap().unwrap();
        assert_eq!(files(&all), [("a.conf".into(), "A".into(), 0o644), ("b.conf".into(), "B".into(), 0o644)]);
        let some = volume_payload(&p.spec.volumes[1], &p, &view, &no_downward, now).unwrap().unwrap();
        assert_eq!(files(&some), [("b".into(), "B".into(), 0o444), ("conf/a".into(), "A".into(), 0o600)]);
    }

    #[test]
    fn what_is_missing_is_said_in_kubelets_words_unless_optional() {
        let view = ObjectsView::default();
        found(&view, Kind::Secret, "tls", &[("crt", "C")]);
        let gone = ObjectRef { kind: Kind::ConfigMap, namespace: "shop".into(), name: "gone".into() };
        view.set_object(&gone, Some(Known::Missing));
        let p = api_pod("  volumes:\n  - {name: a, configMap: {name: gone}}\n  - {name: b, configMap: {name: gone, optional: true}}\n  - {name: c, secret: {secretName: tls, items: [{key: key, path: k}]}}\n  - {name: d, secret: {secretName: tls, optional: true, items: [{key: key, path: k}, {key: crt, path: c}]}}\n  - {name: e, secret: {secretName: never-read}}\n  - {name: f, emptyDir: {}}\n  containers: [{name: c, image: i}]\n");
        let now = SystemTime::now();
        let got =
            |i: usize| volume_payload(&p.spec.volumes[i], &p, &view, &no_downward, now).map(|r| r.map(|p| files(&p)));
        assert_eq!(got(0), Some(Err("configmap \"gone\" not found".into())));
        assert_eq!(got(1), Some(Ok(vec![])));
        assert_eq!(got(2), Some(Err("references non-existent secret key: key".into())));
        assert_eq!(got(3), Some(Ok(vec![("c".into(), "C".into(), 0o644)])));
        assert_eq!(got(4), Some(Err("object \"shop\"/\"never-read\" not registered".into())));
        assert_eq!(got(5), None);
    }

    #[test]
    fn the_default_token_volume_holds_token_ca_and_namespace_while_the_token_is_valid() {
        let view = ObjectsView::default();
        found(&view, Kind::ConfigMap, "kube-root-ca.crt", &[("ca.crt", "PEM")]);
        let p = api_pod("  volumes:\n  - name: kube-api-access-x1y2z\n    projected:\n      defaultMode: 420\n      sources:\n      - serviceAccountToken: {expirationSeconds: 3607, path: token}\n      - configMap: {name: kube-root-ca.crt, items: [{key: ca.crt, path: ca.crt}]}\n      - downwardAPI: {items: [{path: namespace, fieldRef: {apiVersion: v1, fieldPath: metadata.namespace}}]}\n  containers: [{name: c, image: i}]\n");
        let ns = |_: &DownwardApiVolumeFile| Ok::<_, String>("shop".to_string());
        let now = SystemTime::now();
        let v = &p.spec.volumes[0];
        assert_eq!(
            volume_payload(v, &p, &view, &ns, now).unwrap(),
            Err("failed to fetch token: not yet requested for service account shop/default".into())
        );
        let r = TokenRef {
            namespace: "shop".into(),
            service_account: "default".into(),
            pod_name: "web".into(),
            pod_uid: "u-1".into(),
            audience: String::new(),
            expiration_seconds: 3607,
        };
        let token = Token { token: "jwt".into(), issued: now, expires: now + Duration::from_secs(3607) };
        view.set_token(&r, Some(KnownToken::Found(Arc::new(token))));
        let got = volume_payload(v, &p, &view, &ns, now).unwrap().unwrap();
        assert_eq!(
            files(&got),
            [
                ("ca.crt".into(), "PEM".into(), 0o644),
                ("namespace".into(), "shop".into(), 0o644),
                ("token".into(), "jwt".into(), 0o644)
            ]
        );
        let later = now + Duration::from_secs(3608);
        let expired = volume_payload(v, &p, &view, &ns, later).unwrap().unwrap_err();
        assert!(expired.contains("expired at") && expired.contains("no new one could be requested"), "{expired}");
    }

    #[test]
    fn env_from_sources_apply_in_order_with_prefixes_and_skip_invalid_names() {
        let view = ObjectsView::default();
        found(&view, Kind::ConfigMap, "app", &[("MODE", "prod"), ("1st", "x"), ("LEVEL", "3")]);
        found(&view, Kind::Secret, "db", &[("MODE", "secret-wins"), ("PW", "hunter2")]);
        let absent = ObjectRef { kind: Kind::ConfigMap, namespace: "shop".into(), name: "absent".into() };
        view.set_object(&absent, Some(Known::Missing));
        let p = api_pod("  containers:\n  - name: c\n    image: i\n    envFrom:\n    - configMapRef: {name: app}\n    - secretRef: {name: db}\n    - {configMapRef: {name: app}, prefix: CM_}\n    - configMapRef: {name: absent, optional: true}\n");
        let (vars, warnings) = env_from(&p.spec.containers[0], &p, &view).unwrap();
        let names: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            names,
            [
                ("LEVEL", "3"),
                ("MODE", "secret-wins"),
                ("PW", "hunter2"),
                ("CM_1st", "x"),
                ("CM_LEVEL", "3"),
                ("CM_MODE", "prod")
            ]
        );
        assert_eq!(
            warnings,
            ["Keys [1st] from the EnvFrom configmap shop/app were skipped since they are considered invalid environment variable names."]
        );
        let p = api_pod("  containers:\n  - name: c\n    image: i\n    envFrom: [{configMapRef: {name: absent}}, {secretRef: {name: unread}}]\n");
        assert_eq!(env_from(&p.spec.containers[0], &p, &view), Err("configmap \"absent\" not found".into()));
        let p = api_pod(
            "  containers:\n  - name: c\n    image: i\n    envFrom: [{secretRef: {name: unread, optional: true}}]\n",
        );
        assert_eq!(env_from(&p.spec.containers[0], &p, &view), Err("object \"shop\"/\"unread\" not registered".into()));
    }

    #[test]
    fn key_refs_give_the_value_skip_optional_ones_and_name_what_is_missing() {
        let view = ObjectsView::default();
        found(&view, Kind::ConfigMap, "app", &[("mode", "prod")]);
        let gone = ObjectRef { kind: Kind::Secret, namespace: "shop".into(), name: "gone".into() };
        view.set_object(&gone, Some(Known::Missing));
        let p = api_pod("  containers: [{name: c, image: i}]\n");
        let get = |v: serde_json::Value| key_ref(&v, &p, &view);
        assert_eq!(
            get(serde_json::json!({"configMapKeyRef": {"name": "app", "key": "mode"}})),
            Ok(Some(Some("prod".into())))
        );
        assert_eq!(
            get(serde_json::json!({"configMapKeyRef": {"name": "app", "key": "nope"}})),
            Err("couldn't find key nope in ConfigMap shop/app".into())
        );
        assert_eq!(
            get(serde_json::json!({"configMapKeyRef": {"name": "app", "key": "nope", "optional": true}})),
            Ok(Some(None))
        );
        assert_eq!(
            get(serde_json::json!({"secretKeyRef": {"name": "gone", "key": "k"}})),
            Err("secret \"gone\" not found".into())
        );
        assert_eq!(
            get(serde_json::json!({"secretKeyRef": {"name": "gone", "key": "k", "optional": true}})),
            Ok(Some(None))
        );
        assert_eq!(get(serde_json::json!({"fieldRef": {"fieldPath": "metadata.name"}})), Ok(None));
    }
}
