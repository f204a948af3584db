//! One `fl-objwatch` thread per ConfigMap or Secret the node's pods reference, as kubelet's
//! watch-based manager reads them: a list of that one object
//! (`fieldSelector=metadata.name=<name>`, what the Node authorizer allows), then a watch
//! from the list's resourceVersion. What it reads goes to `fl-apiobjects`. An `immutable`
//! object is read once. A refusal (403) or any failure is tried again after a pause that
//! doubles (a 403 from 10 s, anything else from 1 s, at most 5 minutes), never in a tight
//! loop.

use super::super::client::{ApiClient, ApiError};
use super::super::link::Link;
use super::ObjectsCommand;
use crate::base::errors::Chain;
use crate::base::manager::{Exit, StopSignal};
use crate::node::objects::{Kind, Known, Object, ObjectRef};
use base64::Engine;
use crossbeam_channel::Sender;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How long the server keeps one watch open (`timeoutSeconds`): 5 to 10 minutes, drawn for
/// each watch, as client-go's reflector draws it, so the node's watches are not all opened
/// again at once.
fn watch_seconds() -> u64 {
    300 + (crate::base::random::random_f64() * 300.0) as u64
}
/// The longest pause between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// The first pause after a 403: the Node authorizer learns of a new pod within seconds.
const FORBIDDEN_BACKOFF: Duration = Duration::from_secs(10);

/// A ConfigMap or Secret as the apiserver sends it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Wire {
    metadata: WireMeta,
    data: BTreeMap<String, String>,
    binary_data: BTreeMap<String, String>,
    #[serde(rename = "type")]
    type_: String,
    immutable: Option<bool>,
    /// A `Status`'s code (an `ERROR` event's object).
    code: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct WireMeta {
    name: String,
    resource_version: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireList {
    metadata: WireMeta,
    items: Vec<Wire>,
}

#[derive(Debug, Deserialize)]
struct WireEvent {
    #[serde(rename = "type")]
    type_: String,
    object: Wire,
}

/// The object's content: a Secret's `data` and a ConfigMap's `binaryData` are base64.
fn decode(kind: Kind, w: Wire) -> Result<Object, String> {
    let b64 = |k: &str, v: &str, field: &str| {
        base64::engine::general_purpose::STANDARD.decode(v).map_err(|e| format!("{field}[{k:?}]: not base64: {e}"))
    };
    let mut data = BTreeMap::new();
    for (k, v) in w.data {
        let bytes = match kind {
            Kind::Secret => b64(&k, &v, "data")?,
            Kind::ConfigMap => v.into_bytes(),
        };
        data.insert(k, bytes);
    }
    for (k, v) in w.binary_data {
        let bytes = b64(&k, &v, "binaryData")?;
        data.insert(k, bytes);
    }
    Ok(Object {
        data,
        type_: w.type_,
        resource_version: w.metadata.resource_version,
        immutable: w.immutable == Some(true),
    })
}

/// The path of object `r`'s list (`watch`: its watch from a resourceVersion, for so many
/// seconds).
fn path(r: &ObjectRef, watch: Option<(&str, u64)>) -> String {
    let base =
        format!("/api/v1/namespaces/{}/{}?fieldSelector=metadata.name%3D{}", r.namespace, r.kind.resource(), r.name);
    match watch {
        None => base,
        Some((rv, secs)) => {
            format!("{base}&watch=true&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds={secs}")
        }
    }
}

/// What one line of the watch says.
#[derive(Debug, PartialEq)]
enum Line {
    /// The object is now this (its resourceVersion is the watch's).
    Now(Known, String),
    /// A bookmark: the watch stands at this resourceVersion.
    At(String),
    /// The resourceVersion is too old: list again.
    Relist,
    /// Not understood.
    Broken(String),
}

fn read_line(kind: Kind, line: &[u8]) -> Line {
    let event: WireEvent = match serde_json::from_slice(line) {
        Ok(e) => e,
        Err(e) => return Line::Broken(format!("not a watch event: {e}")),
    };
    let wire = event.object;
    if event.type_ == "ERROR" {
        return match wire.code {
            Some(410) => Line::Relist,
            code => Line::Broken(format!("watch error (code {code:?})")),
        };
    }
    let rv = wire.metadata.resource_version.clone();
    match event.type_.as_str() {
        "BOOKMARK" => Line::At(rv),
        "DELETED" => Line::Now(Known::Missing, rv),
        "ADDED" | "MODIFIED" => match decode(kind, wire) {
            Ok(o) => Line::Now(Known::Found(Arc::new(o)), rv),
            Err(e) => Line::Now(Known::Failed(format!("{kind} cannot be read: {e}", kind = kind.word())), rv),
        },
        other => Line::Broken(format!("unknown watch event type {other:?}")),
    }
}

/// What an error means for the pods that use the object.
fn known_of(r: &ObjectRef, e: &ApiError) -> Known {
    match e {
        ApiError::Status { code: 403, message, .. } => Known::Forbidden(message.clone()),
        _ => Known::Failed(format!("cannot read {r}: {}", Chain(e))),
    }
}

/// The next pause: doubled, from `first`, at most `MAX_BACKOFF`.
fn longer(backoff: Duration, first: Duration) -> Duration {
    (backoff * 2).clamp(first, MAX_BACKOFF)
}

/// One object's thread.
pub(super) struct ObjectWatch {
    pub(super) client: Arc<ApiClient>,
    pub(super) link: Arc<Link>,
    pub(super) r: ObjectRef,
    pub(super) tx: Sender<ObjectsCommand>,
}

/// How one watch ended.
enum End {
    /// Told to stop, or the object is immutable and read.
    Done,
    /// The resourceVersion is too old.
    Relist,
    /// Refused: what the apiserver said.
    Forbidden(String),
    /// Broken or failed: watch again after a pause.
    Failed,
    /// The server ended it: watch on from this resourceVersion.
    Again(String),
}

impl ObjectWatch {
    /// Tells `fl-apiobjects`, unless told to stop (a stopped watcher says nothing more).
    fn tell(&self, stop: &StopSignal, known: Known) {
        if !stop.is_stopped() {
            let _ = self.tx.send(ObjectsCommand::Watched(self.r.clone(), known));
        }
    }

    /// The thread's body: list, watch, again.
    pub(super) fn run(self, stop: StopSignal) -> Exit {
        let mut backoff = Duration::ZERO;
        loop {
            if !backoff.is_zero() && stop.sleep(backoff) || stop.is_stopped() {
                return Exit::Done;
            }
            let list: WireList = match self.client.get(&path(&self.r, None)) {
                Ok(l) => l,
                Err(e) => {
                    self.link.failed(&e);
                    let forbidden = e.code() == Some(403);
                    self.tell(&stop, known_of(&self.r, &e));
                    backoff = longer(backoff, if forbidden { FORBIDDEN_BACKOFF } else { Duration::from_secs(1) });
                    continue;
                }
            };
            self.link.reached();
            let mut rv = list.metadata.resource_version;
            let found = list.items.into_iter().find(|w| w.metadata.name == self.r.name);
            let known = match found.map(|w| decode(self.r.kind, w)) {
                None => Known::Missing,
                Some(Ok(o)) if o.immutable => {
                    self.tell(&stop, Known::Found(Arc::new(o)));
                    return Exit::Done;
                }
                Some(Ok(o)) => Known::Found(Arc::new(o)),
                Some(Err(e)) => Known::Failed(format!("{} cannot be read: {e}", self.r)),
            };
            self.tell(&stop, known);
            backoff = Duration::ZERO;
            loop {
                match self.watch_once(&rv, &stop) {
                    End::Done => return Exit::Done,
                    End::Relist => break,
                    End::Again(at) => rv = at,
                    End::Forbidden(why) => {
                        self.tell(&stop, Known::Forbidden(why));
                        backoff = FORBIDDEN_BACKOFF;
                        break;
                    }
                    End::Failed => {
                        backoff = longer(backoff, Duration::from_secs(1));
                        break;
                    }
                }
            }
        }
    }

    /// One watch stream, followed to its end.
    fn watch_once(&self, rv: &str, stop: &StopSignal) -> End {
        let secs = watch_seconds();
        let mut lines = match self.client.watch(&path(&self.r, Some((rv, secs))), Duration::from_secs(secs + 30)) {
            Ok(l) => l,
            Err(e) if e.code() == Some(410) => return End::Relist,
            Err(e) => {
                self.link.failed(&e);
                return match known_of(&self.r, &e) {
                    Known::Forbidden(why) => End::Forbidden(why),
                    _ => End::Failed,
                };
            }
        };
        let mut at = rv.to_string();
        loop {
            let line = lines.next_line();
            if stop.is_stopped() {
                return End::Done;
            }
            let line = match line {
                Ok(Some(l)) if l.iter().all(u8::is_ascii_whitespace) => continue,
                Ok(Some(l)) => l,
                Ok(None) => return End::Again(at),
                Err(e) => {
                    log::info!("apiserver: the watch of {} ended: {}; watching again", self.r, Chain(&e));
                    return End::Failed;
                }
            };
            match read_line(self.r.kind, &line) {
                Line::Now(known, rv) => {
                    at = rv;
                    let immutable = matches!(&known, Known::Found(o) if o.immutable);
                    self.tell(stop, known);
                    if immutable {
                        return End::Done;
                    }
                }
                Line::At(rv) => at = rv,
                Line::Relist => return End::Relist,
                Line::Broken(why) => {
                    log::warn!("apiserver: the watch of {} broke: {why}; watching again", self.r);
                    return End::Failed;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_decoded_from_base64_and_a_config_map_keeps_its_text() {
        let line = br#"{"type":"MODIFIED","object":{"kind":"Secret","metadata":{"name":"db","resourceVersion":"7"},"type":"Opaque","data":{"pw":"aHVudGVyMg=="}}}"#;
        let Line::Now(Known::Found(o), rv) = read_line(Kind::Secret, line) else { panic!() };
        assert_eq!((o.data["pw"].as_slice(), o.type_.as_str(), rv.as_str()), (&b"hunter2"[..], "Opaque", "7"));
        let line = br#"{"type":"ADDED","object":{"metadata":{"name":"app","resourceVersion":"8"},"data":{"a":"x"},"binaryData":{"b":"AAE="},"immutable":true}}"#;
        let Line::Now(Known::Found(o), _) = read_line(Kind::ConfigMap, line) else { panic!() };
        assert_eq!((o.data["a"].as_slice(), o.data["b"].as_slice(), o.immutable), (&b"x"[..], &[0u8, 1][..], true));
    }

    #[test]
    fn deletions_bookmarks_expiry_and_garbage_are_told_apart() {
        let deleted = br#"{"type":"DELETED","object":{"metadata":{"name":"app","resourceVersion":"9"}}}"#;
        assert_eq!(read_line(Kind::ConfigMap, deleted), Line::Now(Known::Missing, "9".into()));
        let bookmark = br#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"12"}}}"#;
        assert_eq!(read_line(Kind::ConfigMap, bookmark), Line::At("12".into()));
        let gone = br#"{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}}"#;
        assert_eq!(read_line(Kind::ConfigMap, gone), Line::Relist);
        assert!(matches!(read_line(Kind::Secret, b"{not json"), Line::Broken(_)));
        let bad = br#"{"type":"ADDED","object":{"metadata":{"name":"db","resourceVersion":"3"},"data":{"pw":"***"}}}"#;
        let Line::Now(Known::Failed(why), _) = read_line(Kind::Secret, bad) else { panic!() };
        assert!(why.contains("data[\"pw\"]: not base64"), "{why}");
    }

    #[test]
    fn one_object_is_listed_and_watched_by_its_name_only() {
        let r = ObjectRef { kind: Kind::Secret, namespace: "shop".into(), name: "db".into() };
        assert_eq!(path(&r, None), "/api/v1/namespaces/shop/secrets?fieldSelector=metadata.name%3Ddb");
        assert_eq!(
            path(&r, Some(("41", 300))),
            "/api/v1/namespaces/shop/secrets?fieldSelector=metadata.name%3Ddb&watch=true&allowWatchBookmarks=true&resourceVersion=41&timeoutSeconds=300"
        );
    }
}
