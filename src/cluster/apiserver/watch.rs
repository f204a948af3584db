//! `fl-apiwatch`: the pods bound to this node, listed and then watched (client-go's
//! reflector, `pods::Reflector`, fed by this thread), handed to the pod manager as the `api`
//! source and kept in the state directory (`podstore`). The apiserver's mirror pods are not
//! pods to run: they go to the shared view only, where `fl-apisync` reads them.
//!
//! The list is asked in pages (`limit`, `continue`, as client-go's reflector asks), so no
//! answer grows with the node's pods; a page too large for the client is asked again in
//! halves. A failed list or watch is tried again after 1 s, 2 s, … at most 30 s. If the
//! first list fails, the pods kept by the previous run are handed over instead, so an agent
//! restarted while the apiserver is away keeps running what the cluster placed here; if
//! those cannot be read either, nothing is handed over, and the pod manager leaves running
//! what runs (a source that has not reported removes nothing).

use super::client::ApiClient;
use super::client::ApiError;
use super::link::Link;
use super::mirror::MIRROR_ANNOTATION;
use super::pods::{
    list_path, watch_path, ListMeta, PodListAnswer, Reflector, Step, LIST_PAGE, MAX_LIST_PAGES, MAX_PODS,
};
use super::podstore::PodStore;
use crate::api::manifest::{CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION};
use crate::api::Pod;
use crate::base::manager::{Exit, Publisher, StopSignal};
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The source name of the apiserver's pods (`kubernetes.io/config.source`).
pub const SOURCE: crate::api::manifest::PodSource = crate::api::manifest::PodSource::Api;
/// The longest pause between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long the server keeps a watch open (`timeoutSeconds` in `watch_path`), and the
/// margin after which the client gives up on a silent one.
const WATCH_TIMEOUT: Duration = Duration::from_secs(300 + 30);

/// The next pause after `backoff`: 1 s, 2 s, … `MAX_BACKOFF`.
fn longer(backoff: Duration) -> Duration {
    (backoff * 2).clamp(Duration::from_secs(1), MAX_BACKOFF)
}

/// The pod set of the `api` source, for the pod manager.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiPods(pub Vec<Arc<Pod>>);

/// Every pod the apiserver has bound to this node, mirror pods included, by uid (each pod
/// shared with the reflector, not copied).
pub type PodsView = Arc<RwLock<BTreeMap<String, Arc<Pod>>>>;

/// Whether `pod` is a mirror pod (the apiserver's copy of a static pod).
pub fn is_mirror(pod: &Pod) -> bool {
    pod.metadata.annotations.contains_key(MIRROR_ANNOTATION)
}

/// A pod to run: marked as the `api` source's, with a hash (`kubernetes.io/config.hash`)
/// of what the apiserver lets change in a running pod's spec and a node acts on: its
/// containers' images and `activeDeadlineSeconds`. A change stops the pod and starts it
/// again with the new spec (kubelet restarts only a container whose image changed);
/// tolerations may change too, and mean nothing on the node.
fn to_run(p: &Pod) -> Pod {
    let mut p = p.clone();
    p.metadata.annotations.insert(CONFIG_SOURCE_ANNOTATION.into(), SOURCE.as_str().into());
    p.metadata.annotations.insert(CONFIG_HASH_ANNOTATION.into(), mutable_spec_hash(&p));
    p
}

/// The pods to run (every pod of the set but mirror pods, `to_run`), kept between changes:
/// a pod's marked copy is made again only when the pod changed, so a watch event costs one
/// copy of one pod, not two of the whole set.
#[derive(Default)]
pub struct RunSet(BTreeMap<String, (Arc<Pod>, Arc<Pod>)>);

impl RunSet {
    /// Follows `all`; returns whether the pods to run changed.
    pub fn update(&mut self, all: &BTreeMap<String, Arc<Pod>>) -> bool {
        let before = self.0.len();
        self.0.retain(|uid, _| all.get(uid).is_some_and(|p| !is_mirror(p)));
        let mut changed = self.0.len() != before;
        for (uid, p) in all.iter().filter(|(_, p)| !is_mirror(p)) {
            if !self.0.get(uid).is_some_and(|(seen, _)| Arc::ptr_eq(seen, p)) {
                self.0.insert(uid.clone(), (p.clone(), Arc::new(to_run(p))));
                changed = true;
            }
        }
        changed
    }

    /// The pods to run, by uid.
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.0.values().map(|(_, run)| run.clone()).collect()
    }
}

/// What was handed to the pod manager.
#[derive(Default)]
struct Published {
    run: RunSet,
    /// Whether anything was handed yet.
    sent: bool,
}

/// The hash of a pod's images and `activeDeadlineSeconds`.
fn mutable_spec_hash(p: &Pod) -> String {
    use md5::{Digest, Md5};
    let mut h = Md5::new();
    for c in p.spec.init_containers.iter().chain(&p.spec.containers) {
        h.update(format!("{}={}\n", c.name, c.image).as_bytes());
    }
    h.update(format!("deadline={:?}", p.spec.active_deadline_seconds).as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// What the thread needs.
pub struct PodWatch {
    /// The client.
    pub client: Arc<ApiClient>,
    /// Reachability.
    pub link: Arc<Link>,
    /// This node.
    pub node: String,
    /// Where the set is kept.
    pub store: PodStore,
    /// The pod manager.
    pub publish: Publisher<ApiPods>,
    /// The view `fl-apisync` reads.
    pub view: PodsView,
}

impl PodWatch {
    /// The thread's body.
    pub fn run(self, stop: StopSignal) -> Exit {
        let mut reflector = Reflector::new(&self.node);
        let mut published = Published::default();
        let mut backoff = Duration::ZERO;
        loop {
            if !backoff.is_zero() && stop.sleep(backoff) {
                return Exit::Done;
            }
            if stop.is_stopped() {
                return Exit::Done;
            }
            backoff = longer(backoff);
            let list = match self.list() {
                Ok(list) => list,
                Err(e) => {
                    if !self.link.failed(&e) {
                        log::warn!("apiserver: listing this node's pods failed: {}", crate::base::errors::Chain(&e));
                    }
                    if matches!(e, ApiError::NoCredentials { .. }) {
                        // Nothing is sent while TLS bootstrap waits: list once it has a
                        // certificate (or every 30 s, to say so again at debug level).
                        crossbeam_channel::select! {
                            recv(stop.receiver()) -> _ => return Exit::Done,
                            recv(self.client.credentials_set()) -> _ => {}
                            default(MAX_BACKOFF) => {}
                        }
                        backoff = Duration::ZERO;
                    }
                    if !published.sent {
                        self.publish_kept(&mut published);
                    }
                    continue;
                }
            };
            self.link.reached();
            reflector.listed(list);
            self.changed(&mut reflector, &mut published, true);
            backoff = Duration::ZERO;
            // Watch from the list's resourceVersion until it is too old.
            while let Some(rv) = reflector.resource_version().map(str::to_string) {
                match self.watch_once(&mut reflector, &rv, &stop, &mut published) {
                    WatchEnd::Stopped => return Exit::Done,
                    WatchEnd::Relist => break,
                    WatchEnd::Again => backoff = Duration::ZERO,
                    WatchEnd::Failed => {
                        backoff = longer(backoff);
                        if stop.sleep(backoff) {
                            return Exit::Done;
                        }
                    }
                }
            }
            backoff = Duration::ZERO;
        }
    }

    /// Every pod bound to this node, page by page; the list's resourceVersion is the last
    /// page's (every page of one list answers the same).
    fn list(&self) -> Result<PodListAnswer, ApiError> {
        let mut all = PodListAnswer { metadata: ListMeta::default(), items: Vec::new() };
        let (mut limit, mut cont) = (LIST_PAGE, String::new());
        for _ in 0..MAX_LIST_PAGES {
            let page: PodListAnswer = match self.client.get(&list_path(&self.node, limit, &cont)) {
                Ok(p) => p,
                Err(e) if e.is_too_large() && limit > 1 => {
                    limit /= 2;
                    log::info!("apiserver: a page of this node's pods was too large; asking {limit} at a time");
                    continue;
                }
                Err(e) => return Err(e),
            };
            all.metadata.resource_version = page.metadata.resource_version;
            all.items.extend(page.items);
            // One more than taken tells `Reflector::listed` that the list was cut.
            if page.metadata.continue_.is_empty() || all.items.len() > MAX_PODS {
                return Ok(all);
            }
            cont = page.metadata.continue_;
        }
        Err(ApiError::Decode {
            method: "GET",
            url: list_path(&self.node, limit, ""),
            what: "list",
            message: format!("the list did not end within {MAX_LIST_PAGES} pages"),
        })
    }

    /// Before the first list: the pods kept by the previous run, when they can be read.
    fn publish_kept(&self, published: &mut Published) {
        match self.store.load() {
            Ok(kept) => {
                let kept: BTreeMap<String, Arc<Pod>> = kept.into_iter().map(|(uid, p)| (uid, Arc::new(p))).collect();
                *self.view.write() = kept.clone();
                self.publish(&kept, published);
                log::warn!(
                    "apiserver: running the {} pod(s) it gave this node before, until it can be listed",
                    published.run.0.len()
                );
            }
            Err(e) => log::warn!(
                "apiserver: the pods it gave this node before cannot be read ({e}); what runs is left running until it can be listed"
            ),
        }
    }

    /// One watch stream, followed to its end.
    fn watch_once(
        &self,
        reflector: &mut Reflector,
        rv: &str,
        stop: &StopSignal,
        published: &mut Published,
    ) -> WatchEnd {
        let mut lines = match self.client.watch(&watch_path(&self.node, rv), WATCH_TIMEOUT) {
            Ok(l) => l,
            Err(e) if e.code() == Some(410) => return WatchEnd::Relist,
            Err(e) => {
                if !self.link.failed(&e) {
                    log::warn!("apiserver: watching this node's pods failed: {}", crate::base::errors::Chain(&e));
                }
                return WatchEnd::Failed;
            }
        };
        self.link.reached();
        loop {
            let line = lines.next_line();
            if stop.is_stopped() {
                return WatchEnd::Stopped;
            }
            let line = match line {
                Ok(Some(l)) => l,
                // The server ended it (`timeoutSeconds`): watch on from where it stood.
                Ok(None) => return WatchEnd::Again,
                Err(e) => {
                    log::info!("apiserver: the pod watch ended: {}; watching again", crate::base::errors::Chain(&e));
                    return WatchEnd::Failed;
                }
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match reflector.watched(&line) {
                Step::Changed => self.changed(reflector, published, false),
                Step::Unchanged => {}
                Step::Relist => return WatchEnd::Relist,
                Step::Broken(why) => {
                    log::warn!("apiserver: the pod watch broke: {why}; watching again");
                    return WatchEnd::Failed;
                }
            }
        }
    }

    /// The reflector's set changed: view, store (after a list the whole set, else the pods
    /// that changed), pod manager.
    fn changed(&self, reflector: &mut Reflector, published: &mut Published, listed: bool) {
        for (pod, why) in &reflector.unreadable {
            log::warn!("apiserver: pod {pod} cannot be read: {why}; it is not run");
        }
        *self.view.write() = reflector.pods().clone();
        let changed = reflector.take_changed();
        let saved = if listed {
            self.store.save(reflector.pods())
        } else {
            self.store.save_changed(reflector.pods(), &changed)
        };
        if let Err(e) = saved {
            log::warn!("apiserver: cannot keep the pod set in the state directory: {e}");
        }
        self.publish(reflector.pods(), published);
    }

    /// Hands the pods to run to the pod manager when they differ from the last handed.
    fn publish(&self, all: &BTreeMap<String, Arc<Pod>>, published: &mut Published) {
        if published.run.update(all) || !published.sent {
            self.publish.publish(ApiPods(published.run.pods()));
            published.sent = true;
        }
    }
}

/// How one watch stream ended.
enum WatchEnd {
    Stopped,
    Relist,
    /// Cleanly: watch again at once.
    Again,
    Failed,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods_to_run(all: &BTreeMap<String, Pod>) -> Vec<Arc<Pod>> {
        let mut run = RunSet::default();
        run.update(&all.iter().map(|(k, p)| (k.clone(), Arc::new(p.clone()))).collect());
        run.pods()
    }

    #[test]
    fn mirror_pods_are_not_run_and_the_rest_are_marked_as_the_api_source() {
        let mut web = Pod::default();
        web.metadata.uid = "u1".into();
        let mut mirror = Pod::default();
        mirror.metadata.uid = "u2".into();
        mirror.metadata.annotations.insert(MIRROR_ANNOTATION.into(), "hash".into());
        let all = BTreeMap::from([("u1".to_string(), web), ("u2".to_string(), mirror)]);
        let run = pods_to_run(&all);
        assert_eq!(run.len(), 1);
        assert_eq!(run[0].metadata.uid, "u1");
        assert_eq!(run[0].metadata.annotations[CONFIG_SOURCE_ANNOTATION], SOURCE.as_str());
        // What the apiserver lets change and the node acts on changes the hash.
        let hash =
            |all: &BTreeMap<String, Pod>| pods_to_run(all)[0].metadata.annotations[CONFIG_HASH_ANNOTATION].clone();
        let mut changed = all.clone();
        changed.get_mut("u1").unwrap().spec.active_deadline_seconds = Some(60);
        assert_ne!(hash(&all), hash(&changed));
        let mut labelled = all.clone();
        labelled.get_mut("u1").unwrap().metadata.labels.insert("a".into(), "b".into());
        assert_eq!(hash(&all), hash(&labelled), "labels do not restart a pod");
    }

    #[test]
    fn a_change_of_one_pod_makes_one_new_copy_and_the_others_are_shared() {
        let pod = |uid: &str| {
            let mut p = Pod::default();
            p.metadata.uid = uid.into();
            Arc::new(p)
        };
        let mut all: BTreeMap<String, Arc<Pod>> = (0..300).map(|i| (format!("u{i}"), pod(&format!("u{i}")))).collect();
        let mut run = RunSet::default();
        assert!(run.update(&all));
        let first = run.pods();
        assert!(!run.update(&all), "nothing changed");
        all.insert("u7".into(), pod("u7"));
        assert!(run.update(&all));
        let second = run.pods();
        let shared = first.iter().zip(&second).filter(|(a, b)| Arc::ptr_eq(a, b)).count();
        assert_eq!(shared, 299, "only the changed pod was copied again");
        all.remove("u8");
        assert!(run.update(&all));
        assert_eq!(run.pods().len(), 299);
    }
}
