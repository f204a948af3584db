//! What pods from the apiserver take from it besides themselves: ConfigMaps, Secrets and
//! service account tokens. `refs` says what a pod references (pure); `ObjectsView` is what
//! the node knows of each (written by `fl-apiobjects`, read by the pod manager); `payload`
//! turns them into a volume's files and a container's environment, with kubelet's messages
//! (pure).
//!
//! Only pods from the apiserver reference these (`api::fields` refuses them in static
//! pods), so without `[apiserver]` the view stays empty.

pub mod payload;

use crate::api::Pod;
use parking_lot::RwLock;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::SystemTime;

/// A ConfigMap or a Secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub enum Kind {
    /// A ConfigMap.
    ConfigMap,
    /// A Secret.
    Secret,
}

impl Kind {
    /// The resource's name in API paths (`configmaps`).
    pub fn resource(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmaps",
            Kind::Secret => "secrets",
        }
    }

    /// The word kubelet's messages use (`configmap "x" not found`).
    pub fn word(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmap",
            Kind::Secret => "secret",
        }
    }
}

/// One ConfigMap or Secret, by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct ObjectRef {
    /// Which kind.
    pub kind: Kind,
    /// Its namespace (the pod's).
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind.word(), self.namespace, self.name)
    }
}

/// A ConfigMap's or Secret's content: `data` and `binaryData` (a ConfigMap), or `data`
/// decoded (a Secret), as bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Object {
    /// Key to value.
    pub data: BTreeMap<String, Vec<u8>>,
    /// A Secret's `type` (`Opaque`, `kubernetes.io/dockerconfigjson`, …); empty for a ConfigMap.
    #[serde(default)]
    pub type_: String,
    /// The version read.
    pub resource_version: String,
    /// `immutable: true`: it never changes, so it is read once.
    #[serde(default)]
    pub immutable: bool,
}

/// What the node knows of one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Known {
    /// Read (or kept from an earlier run while the apiserver is away).
    Found(Arc<Object>),
    /// The apiserver says it does not exist.
    Missing,
    /// The apiserver refuses it to this node (the Node authorizer's answer, as it said it).
    Forbidden(String),
    /// Not read yet.
    Unread,
    /// Reading it failed, and nothing was read before (the error, with its cause).
    Failed(String),
}

/// A service account token for one projected volume source of one pod.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct TokenRef {
    /// The pod's namespace.
    pub namespace: String,
    /// The service account.
    pub service_account: String,
    /// The pod it is bound to.
    pub pod_name: String,
    /// The pod's uid.
    pub pod_uid: String,
    /// Who it is for; empty: the apiserver's own audiences.
    pub audience: String,
    /// The lifetime asked for.
    pub expiration_seconds: i64,
}

/// A token the apiserver issued.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Token {
    /// The token (a JWT).
    pub token: String,
    /// When it was received.
    pub issued: SystemTime,
    /// When it expires (the apiserver's `expirationTimestamp`).
    pub expires: SystemTime,
}

/// What the node has of one token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KnownToken {
    /// A token, maybe kept from an earlier run (served until it expires).
    Found(Arc<Token>),
    /// Not asked yet.
    Unread,
    /// Asking failed and no unexpired token is held (the error, with its cause).
    Failed(String),
}

/// The default lifetime of a token (the apiserver's, for a TokenRequest without one).
pub const DEFAULT_TOKEN_SECONDS: i64 = 3600;

/// What one pod references in the apiserver.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodRefs {
    /// ConfigMaps and Secrets: volumes, projected sources, env, envFrom, pull secrets.
    pub objects: BTreeSet<ObjectRef>,
    /// The tokens of its projected `serviceAccountToken` sources.
    pub tokens: BTreeSet<TokenRef>,
}

impl PodRefs {
    /// Whether it references nothing.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty() && self.tokens.is_empty()
    }
}

/// The pod's service account (`default` when unset, as the apiserver defaults it).
pub fn service_account(pod: &Pod) -> String {
    let other = &pod.spec.other;
    let name = ["serviceAccountName", "serviceAccount"].iter().find_map(|k| other.get(*k).and_then(|v| v.as_str()));
    name.filter(|n| !n.is_empty()).unwrap_or("default").to_string()
}

/// The token a projected `serviceAccountToken` source asks for.
pub fn token_ref(pod: &Pod, source: &crate::api::types::ServiceAccountTokenProjection) -> TokenRef {
    TokenRef {
        namespace: pod.metadata.namespace.clone(),
        service_account: service_account(pod),
        pod_name: pod.metadata.name.clone(),
        pod_uid: pod.metadata.uid.clone(),
        audience: source.audience.clone(),
        expiration_seconds: source.expiration_seconds.unwrap_or(DEFAULT_TOKEN_SECONDS),
    }
}

/// Everything `pod` references in the apiserver (what the Node authorizer lets the node read
/// for it).
pub fn refs(pod: &Pod) -> PodRefs {
    let mut out = PodRefs::default();
    let ns = &pod.metadata.namespace;
    let mut add = |kind: Kind, name: &str| {
        out.objects.insert(ObjectRef { kind, namespace: ns.clone(), name: name.to_string() });
    };
    for r in &pod.spec.image_pull_secrets {
        add(Kind::Secret, &r.name);
    }
    for v in &pod.spec.volumes {
        if let Some(c) = &v.config_map {
            add(Kind::ConfigMap, &c.name);
        }
        if let Some(s) = &v.secret {
            add(Kind::Secret, &s.secret_name);
        }
        for s in v.projected.iter().flat_map(|p| &p.sources) {
            if let Some(c) = &s.config_map {
                add(Kind::ConfigMap, &c.name);
            }
            if let Some(c) = &s.secret {
                add(Kind::Secret, &c.name);
            }
        }
    }
    for c in pod.spec.init_containers.iter().chain(&pod.spec.containers) {
        for f in &c.env_from {
            if let Some(r) = &f.config_map_ref {
                add(Kind::ConfigMap, &r.name);
            }
            if let Some(r) = &f.secret_ref {
                add(Kind::Secret, &r.name);
            }
        }
        for from in c.env.iter().filter_map(|v| v.value_from.as_ref()) {
            for (field, kind) in [("configMapKeyRef", Kind::ConfigMap), ("secretKeyRef", Kind::Secret)] {
                if let Some(name) = from.get(field).and_then(|r| r.get("name")).and_then(|n| n.as_str()) {
                    add(kind, name);
                }
            }
        }
    }
    for s in pod.spec.volumes.iter().filter_map(|v| v.projected.as_ref()).flat_map(|p| &p.sources) {
        if let Some(t) = &s.service_account_token {
            out.tokens.insert(token_ref(pod, t));
        }
    }
    out
}

#[derive(Default)]
struct State {
    objects: BTreeMap<ObjectRef, Known>,
    tokens: BTreeMap<TokenRef, KnownToken>,
}

/// What the node knows of the objects and tokens its pods reference. One writer
/// (`fl-apiobjects`); the pod manager reads it when it writes volumes and environments.
#[derive(Clone, Default)]
pub struct ObjectsView(Arc<RwLock<State>>);

impl ObjectsView {
    /// What is known of `r` (`Unread` when nothing is).
    pub fn object(&self, r: &ObjectRef) -> Known {
        self.0.read().objects.get(r).cloned().unwrap_or(Known::Unread)
    }

    /// What is held of token `r` (`Unread` when nothing is).
    pub fn token(&self, r: &TokenRef) -> KnownToken {
        self.0.read().tokens.get(r).cloned().unwrap_or(KnownToken::Unread)
    }

    /// Every object known.
    pub fn object_refs(&self) -> Vec<ObjectRef> {
        self.0.read().objects.keys().cloned().collect()
    }

    /// Every token held or asked for.
    pub fn token_refs(&self) -> Vec<TokenRef> {
        self.0.read().tokens.keys().cloned().collect()
    }

    /// Sets what is known of `r` (`None`: forgets it).
    pub fn set_object(&self, r: &ObjectRef, known: Option<Known>) {
        let mut s = self.0.write();
        match known {
            Some(k) => s.objects.insert(r.clone(), k),
            None => s.objects.remove(r),
        };
    }

    /// Sets what is held of token `r` (`None`: forgets it).
    pub fn set_token(&self, r: &TokenRef, known: Option<KnownToken>) {
        let mut s = self.0.write();
        match known {
            Some(k) => s.tokens.insert(r.clone(), k),
            None => s.tokens.remove(r),
        };
    }
}

/// What changed in the view, for the pod manager to rewrite the volumes of the pods that
/// use it (published by `fl-apiobjects`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectsChanged {
    /// Objects read, changed, gone or refused.
    pub objects: Vec<ObjectRef>,
    /// Tokens issued or renewed, or failed.
    pub tokens: Vec<TokenRef>,
}

impl ObjectsChanged {
    /// Whether it concerns something `refs` (one pod's) references.
    pub fn touches(&self, refs: &PodRefs) -> bool {
        self.objects.iter().any(|o| refs.objects.contains(o)) || self.tokens.iter().any(|t| refs.tokens.contains(t))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Pod `shop/web` (uid `u-1`) with `spec`.
    pub(in crate::node::objects) fn api_pod(spec: &str) -> Pod {
        let text =
            format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  namespace: shop\n  uid: u-1\nspec:\n{spec}");
        crate::api::manifest::decode_pods("web.yaml", &text).remove(0).unwrap()
    }

    #[test]
    fn a_pod_references_what_its_volumes_env_and_pull_secrets_name() {
        let p = api_pod("  serviceAccountName: web-sa\n  imagePullSecrets: [{name: regcred}]\n  volumes:\n  - {name: cfg, configMap: {name: app}}\n  - {name: sec, secret: {secretName: tls}}\n  - name: api\n    projected:\n      sources:\n      - serviceAccountToken: {path: token, expirationSeconds: 3607}\n      - serviceAccountToken: {path: vault, audience: vault}\n      - configMap: {name: kube-root-ca.crt}\n  initContainers:\n  - name: init\n    image: busybox\n    env: [{name: K, valueFrom: {secretKeyRef: {name: db, key: pw}}}]\n  containers:\n  - name: app\n    image: busybox\n    envFrom: [{configMapRef: {name: app}}, {secretRef: {name: more}, prefix: X_}]\n    env: [{name: N, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]\n");
        let r = refs(&p);
        let named: Vec<String> = r.objects.iter().map(ToString::to_string).collect();
        assert_eq!(
            named,
            [
                "configmap shop/app",
                "configmap shop/kube-root-ca.crt",
                "secret shop/db",
                "secret shop/more",
                "secret shop/regcred",
                "secret shop/tls"
            ]
        );
        let tokens: Vec<(&str, &str, i64)> =
            r.tokens.iter().map(|t| (t.service_account.as_str(), t.audience.as_str(), t.expiration_seconds)).collect();
        assert_eq!(tokens, [("web-sa", "", 3607), ("web-sa", "vault", DEFAULT_TOKEN_SECONDS)]);
        assert!(r.tokens.iter().all(|t| t.pod_uid == "u-1" && t.pod_name == "web" && t.namespace == "shop"));
    }

    #[test]
    fn a_pod_without_a_service_account_runs_as_default() {
        let p = api_pod("  containers:\n  - name: app\n    image: busybox\n");
        assert_eq!(service_account(&p), "default");
        assert!(refs(&p).is_empty());
    }
}
