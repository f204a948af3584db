//! Who a request comes from and what they may do, as kubelet's delegated authentication
//! and authorization: a client certificate the TLS layer verified against the client CA
//! (user = its CN, groups = its O's), else a bearer token checked with a `TokenReview`,
//! else anonymous when allowed; then a `SubjectAccessReview` for `nodes/<subresource>`
//! (or everything, with `AlwaysAllow`). Answers are cached with kubelet's TTLs; a failed
//! review is not cached. The apiserver calls are behind `Reviews`, so the decisions are
//! tested against a fake.

use crate::base::errors::Chain;
use crate::cluster::apiserver::ApiClient;
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An authenticated user.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct User {
    /// The name (`system:node:x`, `system:serviceaccount:ns:sa`, a certificate's CN).
    pub name: String,
    /// Its uid, when the authenticator gave one.
    pub uid: String,
    /// Its groups.
    pub groups: Vec<String>,
}

impl User {
    /// The user of unauthenticated requests, when they are allowed.
    pub fn anonymous() -> User {
        User { name: "system:anonymous".into(), uid: String::new(), groups: vec!["system:unauthenticated".into()] }
    }
}

/// What a request asks to do to this node (kubelet's `GetRequestAttributes`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Attributes {
    /// `get`, `create`, …
    pub verb: &'static str,
    /// `proxy`, `stats`, `metrics`, `log`.
    pub subresource: &'static str,
    /// The node's name.
    pub node: String,
}

/// The apiserver's reviews.
pub trait Reviews: Send + Sync {
    /// The user a bearer token is, `Ok(None)` when the apiserver says it is not valid.
    fn token_review(&self, token: &str) -> Result<Option<User>, String>;
    /// Whether `user` may do `attrs`, and the apiserver's reason.
    fn access_review(&self, user: &User, attrs: &Attributes) -> Result<(bool, String), String>;
}

/// The most answers a cache keeps; past it, expired ones go, then the whole cache.
const CACHE_MAX: usize = 4096;

/// A map of answers that expire.
struct Cache<K, V> {
    entries: Mutex<HashMap<K, (V, Instant)>>,
}

impl<K: Eq + Hash, V: Clone> Cache<K, V> {
    fn new() -> Self {
        Cache { entries: Mutex::new(HashMap::new()) }
    }

    fn get(&self, k: &K, now: Instant) -> Option<V> {
        self.entries.lock().get(k).filter(|(_, until)| *until > now).map(|(v, _)| v.clone())
    }

    fn put(&self, k: K, v: V, ttl: Duration, now: Instant) {
        if ttl.is_zero() {
            return;
        }
        let mut m = self.entries.lock();
        if m.len() >= CACHE_MAX {
            m.retain(|_, (_, until)| *until > now);
            if m.len() >= CACHE_MAX {
                m.clear();
            }
        }
        m.insert(k, (v, now + ttl));
    }
}

/// Why a request is not served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No credentials that hold: 401.
    Unauthorized,
    /// Authenticated, not allowed: 403 with kubelet's text.
    Forbidden(String),
    /// A review could not be made (the apiserver is away): 500, as kubelet answers.
    Failed(String),
}

impl Refusal {
    /// The status code and body the client gets.
    pub fn answer(&self) -> (u16, String) {
        match self {
            Refusal::Unauthorized => (401, "Unauthorized".into()),
            Refusal::Forbidden(text) => (403, text.clone()),
            Refusal::Failed(text) => (500, text.clone()),
        }
    }
}

/// The settings of `Gate`.
#[derive(Clone, Debug)]
pub struct GateSettings {
    /// Unauthenticated requests are served as `system:anonymous`.
    pub anonymous: bool,
    /// Bearer tokens are reviewed.
    pub token_webhook: bool,
    /// How long a token's answer is kept.
    pub token_ttl: Duration,
    /// Requests are reviewed (else every authenticated user may do everything).
    pub authz_webhook: bool,
    /// How long an allowed answer is kept.
    pub allowed_ttl: Duration,
    /// How long a denied answer is kept.
    pub denied_ttl: Duration,
}

/// Authentication and authorization with their caches.
pub struct Gate {
    settings: GateSettings,
    reviews: Option<Arc<dyn Reviews>>,
    tokens: Cache<[u8; 32], Option<User>>,
    access: Cache<(User, Attributes), (bool, String)>,
}

impl Gate {
    /// A gate asking `reviews` (`None`: no apiserver, so no webhooks).
    pub fn new(settings: GateSettings, reviews: Option<Arc<dyn Reviews>>) -> Gate {
        Gate { settings, reviews, tokens: Cache::new(), access: Cache::new() }
    }

    /// The user of a request with the verified client certificate identity `cert` and the
    /// bearer token `token`.
    pub fn authenticate(&self, cert: Option<User>, token: Option<&str>, now: Instant) -> Result<User, Refusal> {
        if let Some(u) = cert {
            return Ok(u);
        }
        if let (Some(token), true, Some(reviews)) = (token, self.settings.token_webhook, &self.reviews) {
            // Keyed by a digest: the cache holds no token.
            let key: [u8; 32] =
                ring::digest::digest(&ring::digest::SHA256, token.as_bytes()).as_ref().try_into().unwrap_or([0; 32]);
            let answer = match self.tokens.get(&key, now) {
                Some(a) => a,
                None => {
                    let a = reviews.token_review(token).map_err(|e| {
                        log::warn!("server: a TokenReview failed: {e}");
                        Refusal::Unauthorized
                    })?;
                    self.tokens.put(key, a.clone(), self.settings.token_ttl, now);
                    a
                }
            };
            return answer.ok_or(Refusal::Unauthorized);
        }
        if self.settings.anonymous {
            return Ok(User::anonymous());
        }
        Err(Refusal::Unauthorized)
    }

    /// Whether `user` may do `attrs`.
    pub fn authorize(&self, user: &User, attrs: &Attributes, now: Instant) -> Result<(), Refusal> {
        if !self.settings.authz_webhook {
            return Ok(());
        }
        let Some(reviews) = &self.reviews else {
            return Err(Refusal::Failed("authorization webhook without an apiserver".into()));
        };
        let key = (user.clone(), attrs.clone());
        let (allowed, reason) = match self.access.get(&key, now) {
            Some(a) => a,
            None => {
                let a = reviews.access_review(user, attrs).map_err(|e| {
                    Refusal::Failed(format!(
                        "Authorization error (user={}, verb={}, resource=nodes, subresource={}): {e}",
                        user.name, attrs.verb, attrs.subresource
                    ))
                })?;
                let ttl = if a.0 { self.settings.allowed_ttl } else { self.settings.denied_ttl };
                self.access.put(key, a.clone(), ttl, now);
                a
            }
        };
        if allowed {
            return Ok(());
        }
        if !reason.is_empty() {
            log::debug!("server: {} may not {} nodes/{}: {reason}", user.name, attrs.verb, attrs.subresource);
        }
        Err(Refusal::Forbidden(forbidden(user, attrs)))
    }
}

/// kubelet's 403 text.
pub fn forbidden(user: &User, attrs: &Attributes) -> String {
    format!("Forbidden (user={}, verb={}, resource=nodes, subresource={})", user.name, attrs.verb, attrs.subresource)
}

/// The `TokenReview` a bearer token is checked with.
pub fn token_review_body(token: &str) -> Value {
    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
}

/// The user a `TokenReview`'s answer names, `None` when not authenticated.
pub fn token_review_user(answer: &Value) -> Option<User> {
    let status = &answer["status"];
    if status["authenticated"] != true {
        return None;
    }
    let user = &status["user"];
    let name = user["username"].as_str().filter(|n| !n.is_empty())?;
    let groups = user["groups"].as_array().map(|g| g.iter().filter_map(|v| v.as_str().map(String::from)).collect());
    Some(User { name: name.into(), uid: user["uid"].as_str().unwrap_or("").into(), groups: groups.unwrap_or_default() })
}

/// The `SubjectAccessReview` of `user` doing `attrs` (kubelet's).
pub fn access_review_body(user: &User, attrs: &Attributes) -> Value {
    json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user.name,
            "uid": user.uid,
            "groups": user.groups,
            "resourceAttributes": {
                "verb": attrs.verb,
                "version": "v1",
                "resource": "nodes",
                "subresource": attrs.subresource,
                "name": attrs.node,
            },
        },
    })
}

/// A `SubjectAccessReview`'s answer: (allowed, reason).
pub fn access_review_answer(answer: &Value) -> (bool, String) {
    let status = &answer["status"];
    (status["allowed"] == true, status["reason"].as_str().unwrap_or("").to_string())
}

impl Reviews for ApiClient {
    fn token_review(&self, token: &str) -> Result<Option<User>, String> {
        let answer: Value = self
            .write("POST", "/apis/authentication.k8s.io/v1/tokenreviews", &token_review_body(token))
            .map_err(|e| Chain(&e).to_string())?;
        Ok(token_review_user(&answer))
    }

    fn access_review(&self, user: &User, attrs: &Attributes) -> Result<(bool, String), String> {
        let answer: Value = self
            .write("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", &access_review_body(user, attrs))
            .map_err(|e| Chain(&e).to_string())?;
        Ok(access_review_answer(&answer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Default)]
    struct Fake {
        tokens: AtomicUsize,
        reviews: AtomicUsize,
        fail: bool,
    }

    impl Reviews for Fake {
        fn token_review(&self, token: &str) -> Result<Option<User>, String> {
            self.tokens.fetch_add(1, Ordering::SeqCst);
            if self.fail {
                return Err("connection refused".into());
            }
            Ok((token == "good").then(|| User { name: "sa".into(), uid: "u".into(), groups: vec!["g".into()] }))
        }
        fn access_review(&self, user: &User, attrs: &Attributes) -> Result<(bool, String), String> {
            self.reviews.fetch_add(1, Ordering::SeqCst);
            if self.fail {
                return Err("connection refused".into());
            }
            Ok((user.name == "alice" && attrs.subresource == "proxy", String::new()))
        }
    }

    fn settings() -> GateSettings {
        GateSettings {
            anonymous: false,
            token_webhook: true,
            token_ttl: Duration::from_secs(120),
            authz_webhook: true,
            allowed_ttl: Duration::from_secs(300),
            denied_ttl: Duration::from_secs(30),
        }
    }

    fn user(name: &str) -> User {
        User { name: name.into(), uid: String::new(), groups: vec![] }
    }

    fn attrs(sub: &'static str) -> Attributes {
        Attributes { verb: "create", subresource: sub, node: "n".into() }
    }

    #[test]
    fn a_certificate_wins_then_a_reviewed_token_then_nothing_unless_anonymous_is_on() {
        let fake = Arc::new(Fake::default());
        let gate = Gate::new(settings(), Some(fake.clone()));
        let now = Instant::now();
        assert_eq!(gate.authenticate(Some(user("alice")), Some("bad"), now), Ok(user("alice")));
        assert_eq!(fake.tokens.load(Ordering::SeqCst), 0);
        assert_eq!(gate.authenticate(None, Some("good"), now).unwrap().name, "sa");
        assert_eq!(gate.authenticate(None, Some("bad"), now), Err(Refusal::Unauthorized));
        assert_eq!(gate.authenticate(None, None, now), Err(Refusal::Unauthorized));
        // Both answers are kept for the TTL, then asked again.
        gate.authenticate(None, Some("good"), now + Duration::from_secs(119)).unwrap();
        let _ = gate.authenticate(None, Some("bad"), now + Duration::from_secs(119));
        assert_eq!(fake.tokens.load(Ordering::SeqCst), 2);
        gate.authenticate(None, Some("good"), now + Duration::from_secs(121)).unwrap();
        assert_eq!(fake.tokens.load(Ordering::SeqCst), 3);
        let open = Gate::new(GateSettings { anonymous: true, ..settings() }, None);
        assert_eq!(open.authenticate(None, None, now), Ok(User::anonymous()));
    }

    #[test]
    fn a_failed_review_is_not_kept() {
        let fake = Arc::new(Fake { fail: true, ..Default::default() });
        let gate = Gate::new(settings(), Some(fake.clone()));
        let now = Instant::now();
        assert_eq!(gate.authenticate(None, Some("good"), now), Err(Refusal::Unauthorized));
        let _ = gate.authenticate(None, Some("good"), now);
        assert_eq!(fake.tokens.load(Ordering::SeqCst), 2);
        assert!(matches!(gate.authorize(&user("alice"), &attrs("proxy"), now), Err(Refusal::Failed(_))));
    }

    #[test]
    fn access_answers_are_kept_5_minutes_when_allowed_and_30_seconds_when_denied() {
        let fake = Arc::new(Fake::default());
        let gate = Gate::new(settings(), Some(fake.clone()));
        let now = Instant::now();
        assert_eq!(gate.authorize(&user("alice"), &attrs("proxy"), now), Ok(()));
        let denied = gate.authorize(&user("alice"), &attrs("stats"), now);
        assert_eq!(
            denied,
            Err(Refusal::Forbidden("Forbidden (user=alice, verb=create, resource=nodes, subresource=stats)".into()))
        );
        let later = now + Duration::from_secs(31);
        assert_eq!(gate.authorize(&user("alice"), &attrs("proxy"), later), Ok(()));
        let _ = gate.authorize(&user("alice"), &attrs("stats"), later);
        assert_eq!(fake.reviews.load(Ordering::SeqCst), 3);
        let _ = gate.authorize(&user("alice"), &attrs("proxy"), now + Duration::from_secs(301));
        assert_eq!(fake.reviews.load(Ordering::SeqCst), 4);
        let allow_all = Gate::new(GateSettings { authz_webhook: false, ..settings() }, None);
        assert_eq!(allow_all.authorize(&user("x"), &attrs("stats"), now), Ok(()));
    }

    #[test]
    fn reviews_are_the_apiservers_shapes() {
        let a = json!({"status": {"authenticated": true, "user": {"username": "system:serviceaccount:d:s", "uid": "1", "groups": ["system:serviceaccounts"]}}});
        assert_eq!(token_review_user(&a).unwrap().groups, ["system:serviceaccounts"]);
        assert_eq!(token_review_user(&json!({"status": {"authenticated": false, "error": "x"}})), None);
        let body = access_review_body(&user("bob"), &attrs("proxy"));
        assert_eq!(body["spec"]["resourceAttributes"]["subresource"], "proxy");
        assert_eq!(body["spec"]["resourceAttributes"]["name"], "n");
        assert_eq!(access_review_answer(&json!({"status": {"allowed": true}})), (true, String::new()));
        assert_eq!(access_review_answer(&json!({"status": {"denied": true, "reason": "no"}})), (false, "no".into()));
    }
}
