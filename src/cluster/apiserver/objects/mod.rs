//! `fl-apiobjects`: the ConfigMaps, Secrets and service account tokens of the pods bound to
//! this node, as kubelet's watch-based secret and configmap managers and its token manager
//! keep them, written into `ObjectsView` for the pod manager.
//!
//! - It is told the pods bound to the node (`ObjectsCommand::Pods`, from `fl-apiwatch`), and
//!   reads exactly what they reference (`node::objects::refs`): one `fl-objwatch` thread per
//!   ConfigMap or Secret (`watch`), started when the first pod that references it arrives and
//!   stopped when the last one is gone. Nothing lists a namespace.
//! - It asks a token per projected `serviceAccountToken` source (TokenRequest, bound to the
//!   pod), and asks again once 80 % of its lifetime has passed or it is 24 hours old
//!   (`renew_at`). A failure is tried again after 5 s, doubling to 5 minutes.
//! - Everything read is kept (`keep`, sealed) and read back at start, before the apiserver
//!   answers: an agent restarted offline starts its pods with what they had. A kept token is
//!   served until it expires.
//! - Each change is published (`ObjectsChanged`) so the pod manager rewrites the volumes of
//!   the pods that use it.

mod keep;
mod watch;

pub use keep::{Keep, KeepError};

use super::client::ApiClient;
use super::link::Link;
use crate::api::Pod;
use crate::base::clock::Clock;
use crate::base::errors::Chain;
use crate::base::manager::{Health, Manager, Publisher, WorkerId, WorkerSet};
use crate::node::objects::{Known, KnownToken, ObjectRef, ObjectsChanged, ObjectsView, Token, TokenRef};
use crossbeam_channel::Sender;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// At most this many ConfigMaps and Secrets watched at once (one thread each).
pub const MAX_WATCHED: usize = 1024;
/// A token older than this is renewed whatever its lifetime (kubelet's `maxTTL`).
const MAX_TOKEN_AGE: Duration = Duration::from_secs(24 * 3600);
/// The first pause after a failed token request, and the longest.
const TOKEN_BACKOFF: (Duration, Duration) = (Duration::from_secs(5), Duration::from_secs(300));

/// Commands to `fl-apiobjects`.
#[derive(Debug)]
pub enum ObjectsCommand {
    /// Every pod bound to this node now (from `fl-apiwatch`).
    Pods(Vec<Arc<Pod>>),
    /// What a watcher read of one object.
    Watched(ObjectRef, Known),
}

/// When token `t` is renewed: once 80 % of its lifetime has passed, or it is 24 hours old
/// (kubelet's `requiresRefresh`).
pub fn renew_at(t: &Token) -> SystemTime {
    let lifetime = t.expires.duration_since(t.issued).unwrap_or_default();
    (t.issued + lifetime.mul_f64(0.8)).min(t.issued + MAX_TOKEN_AGE)
}

/// What the node's pods reference, all together.
fn wanted(pods: &[Arc<Pod>]) -> (BTreeSet<ObjectRef>, BTreeSet<TokenRef>) {
    let (mut objects, mut tokens) = (BTreeSet::new(), BTreeSet::new());
    for p in pods {
        let r = crate::node::objects::refs(p);
        objects.extend(r.objects);
        tokens.extend(r.tokens);
    }
    (objects, tokens)
}

/// A token's next request.
#[derive(Clone, Copy, Debug)]
struct Renewal {
    /// When.
    at: SystemTime,
    /// The pause after the next failure.
    backoff: Duration,
}

/// The manager.
pub struct ObjectsManager {
    client: Arc<ApiClient>,
    link: Arc<Link>,
    view: ObjectsView,
    publish: Publisher<ObjectsChanged>,
    keep: Option<Keep>,
    clock: Arc<dyn Clock>,
    /// The `fl-objwatch` threads (shared with whoever stops the agent).
    watchers: Arc<WorkerSet>,
    /// Where watchers send what they read (this manager's own channel).
    tx: Sender<ObjectsCommand>,
    /// The objects referenced, and their watcher (none once an immutable one is read).
    watching: BTreeMap<ObjectRef, Option<WorkerId>>,
    /// The tokens referenced, and when each is asked next.
    tokens: BTreeMap<TokenRef, Renewal>,
}

impl ObjectsManager {
    /// A manager over `client`, writing `view`, publishing through `publish`, keeping
    /// copies in `keep` (`None`: nothing is kept, said once at start), its watchers
    /// sending to `tx` (this manager's channel). What was kept is in the view at once.
    pub fn new(
        client: Arc<ApiClient>,
        link: Arc<Link>,
        view: ObjectsView,
        publish: Publisher<ObjectsChanged>,
        mut keep: Option<Keep>,
        tx: Sender<ObjectsCommand>,
        health: &Health,
    ) -> ObjectsManager {
        let clock: Arc<dyn Clock> = Arc::new(crate::base::clock::RealClock);
        if let Some(k) = keep.as_mut() {
            let (objects, tokens) = k.load();
            if !objects.is_empty() || !tokens.is_empty() {
                log::info!(
                    "apiserver: {} ConfigMap(s) and Secret(s) and {} token(s) kept by the previous run are used until read again",
                    objects.len(),
                    tokens.len()
                );
            }
            for (r, o) in objects {
                view.set_object(&r, Some(Known::Found(Arc::new(o))));
            }
            for (r, t) in tokens {
                view.set_token(&r, Some(KnownToken::Found(Arc::new(t))));
            }
        }
        ObjectsManager {
            client,
            link,
            view,
            publish,
            keep,
            clock,
            watchers: Arc::new(WorkerSet::new("fl-objwatch", MAX_WATCHED, health)),
            tx,
            watching: BTreeMap::new(),
            tokens: BTreeMap::new(),
        }
    }

    /// Starts and stops watchers and tokens to match what `pods` reference; forgets (and
    /// stops keeping) what none references any more.
    fn set_pods(&mut self, pods: &[Arc<Pod>]) {
        let (objects, tokens) = wanted(pods);
        let mut changed = ObjectsChanged::default();
        // What is watched, and what was kept by an earlier run for pods that are gone.
        let known: BTreeSet<ObjectRef> = self.watching.keys().cloned().chain(self.view.object_refs()).collect();
        for r in known.into_iter().filter(|r| !objects.contains(r)) {
            if let Some(Some(id)) = self.watching.remove(&r) {
                self.watchers.signal_stop_one(id);
            }
            self.view.set_object(&r, None);
            if let Some(Err(e)) = self.keep.as_mut().map(|k| k.remove_object(&r)) {
                log::warn!("apiserver: cannot forget the kept {r}: {}", Chain(&e));
            }
        }
        let new: Vec<ObjectRef> = objects.into_iter().filter(|r| !self.watching.contains_key(r)).collect();
        for r in new {
            let watcher = watch::ObjectWatch {
                client: self.client.clone(),
                link: self.link.clone(),
                r: r.clone(),
                tx: self.tx.clone(),
            };
            match self.watchers.spawn("fl-objwatch", move |stop| watcher.run(stop)) {
                Ok(id) => {
                    self.watching.insert(r, Some(id));
                }
                Err(e) => {
                    let why = format!("cannot watch {r}: {}", Chain(&e));
                    log::warn!("apiserver: {why}");
                    self.view.set_object(&r, Some(Known::Failed(why)));
                    changed.objects.push(r);
                }
            }
        }
        let now = self.clock.now();
        self.tokens.retain(|r, _| tokens.contains(r));
        for r in tokens {
            if self.tokens.contains_key(&r) {
                continue;
            }
            let at = match self.view.token(&r) {
                KnownToken::Found(t) => renew_at(&t),
                _ => now,
            };
            self.tokens.insert(r, Renewal { at, backoff: TOKEN_BACKOFF.0 });
        }
        for r in self.view.token_refs().into_iter().filter(|r| !self.tokens.contains_key(r)) {
            self.view.set_token(&r, None);
            if let Some(Err(e)) = self.keep.as_mut().map(|k| k.remove_token(&r)) {
                log::warn!("apiserver: cannot forget the kept token of pod {}: {}", r.pod_uid, Chain(&e));
            }
        }
        if !changed.objects.is_empty() {
            self.publish.publish(changed);
        }
        self.renew_due();
    }

    /// A watcher read `known` of `r`.
    fn watched(&mut self, r: ObjectRef, known: Known) {
        let Some(watcher) = self.watching.get_mut(&r) else { return };
        let before = self.view.object(&r);
        if let (Known::Failed(why), Known::Found(_)) = (&known, &before) {
            // A failure after a good read changes nothing for the pods: they keep what they have.
            log::warn!("apiserver: {why}; its pods keep what was read before");
            return;
        }
        if known == before {
            return;
        }
        if let Known::Found(o) = &known {
            if o.immutable {
                *watcher = None;
            }
        }
        match (&known, self.keep.as_mut()) {
            (Known::Found(o), Some(k)) => {
                if let Err(e) = k.save_object(&r, o) {
                    log::warn!("apiserver: cannot keep {r} for offline restarts: {}", Chain(&e));
                }
            }
            (Known::Missing, Some(k)) => {
                if let Err(e) = k.remove_object(&r) {
                    log::warn!("apiserver: cannot forget the kept {r}: {}", Chain(&e));
                }
            }
            _ => {}
        }
        if let Known::Forbidden(why) = &known {
            log::warn!("apiserver: {why}");
        }
        self.view.set_object(&r, Some(known));
        self.publish.publish(ObjectsChanged { objects: vec![r], tokens: Vec::new() });
    }

    /// Asks the tokens that are due.
    fn renew_due(&mut self) {
        let now = self.clock.now();
        let due: Vec<TokenRef> = self.tokens.iter().filter(|(_, n)| n.at <= now).map(|(r, _)| r.clone()).collect();
        let mut changed = Vec::new();
        // Once the apiserver is found away, the other due tokens are not asked this time: each
        // request could wait its whole timeout, and together they would hold up this thread.
        let mut away: Option<String> = None;
        for r in due {
            let result = match &away {
                Some(why) => Err(why.clone()),
                None => request_token(&self.client, &r).map_err(|e| {
                    if self.link.failed(&e) {
                        away = Some(Chain(&e).to_string());
                    }
                    Chain(&e).to_string()
                }),
            };
            let now = self.clock.now();
            let Some(next) = self.tokens.get_mut(&r) else { continue };
            match result {
                Ok(t) => {
                    self.link.reached();
                    next.at = renew_at(&t);
                    next.backoff = TOKEN_BACKOFF.0;
                    if let Some(Err(e)) = self.keep.as_mut().map(|k| k.save_token(&r, &t)) {
                        log::warn!(
                            "apiserver: cannot keep the token of pod {} for offline restarts: {}",
                            r.pod_uid,
                            Chain(&e)
                        );
                    }
                    self.view.set_token(&r, Some(KnownToken::Found(Arc::new(t))));
                    changed.push(r);
                }
                Err(cause) => {
                    next.at = now + next.backoff;
                    next.backoff = (next.backoff * 2).min(TOKEN_BACKOFF.1);
                    let why = format!(
                        "cannot request a token of service account {}/{} for pod {}: {cause}",
                        r.namespace, r.service_account, r.pod_name
                    );
                    log::warn!("apiserver: {why}");
                    // A token held and not expired is served on; the volume says when it is not.
                    if !matches!(self.view.token(&r), KnownToken::Found(_)) {
                        self.view.set_token(&r, Some(KnownToken::Failed(why)));
                        changed.push(r);
                    }
                }
            }
        }
        if !changed.is_empty() {
            self.publish.publish(ObjectsChanged { objects: Vec::new(), tokens: changed });
        }
    }

    /// The watcher threads, to stop with the agent: they wait in watch reads, which end by
    /// their own timeout, so the late ones are left, and send nothing more.
    pub fn watchers(&self) -> Arc<WorkerSet> {
        self.watchers.clone()
    }
}

/// One TokenRequest.
fn request_token(client: &ApiClient, r: &TokenRef) -> Result<Token, super::ApiError> {
    let mut spec = serde_json::json!({
        "expirationSeconds": r.expiration_seconds,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": r.pod_name, "uid": r.pod_uid},
    });
    if !r.audience.is_empty() {
        spec["audiences"] = serde_json::json!([r.audience]);
    }
    let body = serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec});
    let path = format!("/api/v1/namespaces/{}/serviceaccounts/{}/token", r.namespace, r.service_account);
    let issued = SystemTime::now();
    let answer: serde_json::Value = client.write("POST", &path, &body)?;
    let status = &answer["status"];
    let token = status["token"].as_str().unwrap_or_default().to_string();
    let expires = status["expirationTimestamp"].as_str().and_then(crate::base::timefmt::parse_rfc3339);
    match expires {
        Some(expires) if !token.is_empty() => Ok(Token { token, issued, expires }),
        _ => Err(super::ApiError::Decode {
            method: "POST",
            url: path,
            what: "TokenRequest",
            message: "the answer has no status.token or status.expirationTimestamp".into(),
        }),
    }
}

impl Manager for ObjectsManager {
    type Command = ObjectsCommand;

    fn handle(&mut self, cmd: ObjectsCommand) {
        match cmd {
            ObjectsCommand::Pods(pods) => self.set_pods(&pods),
            ObjectsCommand::Watched(r, known) => self.watched(r, known),
        }
    }

    fn on_tick(&mut self) {
        self.renew_due();
    }

    fn tick_interval(&self) -> Duration {
        Duration::from_secs(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_renewed_after_80_percent_of_its_life_or_at_24_hours() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let token = |secs: u64| Token { token: "t".into(), issued: t0, expires: t0 + Duration::from_secs(secs) };
        assert_eq!(renew_at(&token(3607)), t0 + Duration::from_millis(2_885_600));
        assert_eq!(renew_at(&token(600)), t0 + Duration::from_secs(480));
        assert_eq!(renew_at(&token(10)), t0 + Duration::from_secs(8));
        // A year-long token (the apiserver's extended 3607 s one) is renewed daily.
        assert_eq!(renew_at(&token(365 * 24 * 3600)), t0 + MAX_TOKEN_AGE);
        // Expired at issue (a clock step): due at once.
        let backwards = Token { token: "t".into(), issued: t0, expires: t0 - Duration::from_secs(1) };
        assert_eq!(renew_at(&backwards), t0);
    }
}
