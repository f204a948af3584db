//! Decoding pod manifests as users write them for kubectl: YAML (several documents per
//! file) or JSON, a `Pod` or a `List`/`PodList` of pods. Unknown fields are ignored, every
//! error names the file and the field path.

use super::defaults::set_pod_defaults;
use super::strict::{
    oversized_yaml_document, yaml_flow_too_deep, Findings, Strict, MAX_YAML_EVENTS_PER_DOCUMENT, MAX_YAML_FLOW_DEPTH,
};
use super::validation::validate_pod;
use super::Pod;
use crate::base::logsafe::Escaped;
use md5::{Digest, Md5};
use serde::de::DeserializeSeed;
use serde_path_to_error::Segment;
use std::path::Path;

/// kubelet's limit for one static pod file (`maxConfigLength` of its file and HTTP
/// sources): 10 MiB. Larger files are refused before they are read.
pub const MAX_MANIFEST_BYTES: u64 = 10 << 20;
pub use super::limits::MAX_OBJECT_BYTES;
/// Most problems reported for one document; the rest are summarised in one line.
pub const MAX_PROBLEMS_PER_DOCUMENT: usize = 50;
/// Most pods (documents and list items together) in one file: as many as a node may run
/// (the bound of `max_pods`). Each costs a result even when it is only `{}`, so a 10 MiB
/// file of a million tiny documents took 1.2 GB before this bound; a file with more is
/// rejected.
pub const MAX_PODS_PER_FILE: usize = super::limits::MAX_PODS_PER_NODE;

/// The problem of a file with more than `MAX_PODS_PER_FILE` pods.
fn too_many_pods() -> String {
    format!("Too many: more than {MAX_PODS_PER_FILE} pods in one file (a node runs at most {MAX_PODS_PER_FILE})")
}

/// One problem with a manifest; `Display` reads `<file>: [document N: ]<field path>: <problem>`,
/// with control characters in the file name and the problem escaped (one log line each).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}: {}{}", Escaped(file), doc.map(|d| format!("document {d}: ")).unwrap_or_default(), Escaped(problem))]
pub struct ManifestError {
    /// The manifest file as the user named it.
    pub file: String,
    /// 1-based document number, when the file holds more than one document.
    pub doc: Option<usize>,
    /// `<field path>: <what is wrong and what is allowed>`.
    pub problem: String,
}

/// Annotation kubelet puts on static pods: the pod's hash (its uid).
pub const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
pub use super::source::{PodSource, CONFIG_SOURCE_ANNOTATION};
/// Annotation ferrolet puts on static pods: the manifest file.
pub const CONFIG_FILE_ANNOTATION: &str = "ferrolet.io/manifest";

/// Why one document could not be turned into a value.
struct DocumentError {
    /// Problems with field paths (duplicate keys, non-finite numbers, too long).
    problems: Vec<String>,
    /// The parser's own error; decoding cannot go on in this file after one.
    syntax: Option<String>,
}

/// Decodes one document strictly (duplicate keys, non-finite numbers, size budget).
fn strict_value<'de, D: serde::Deserializer<'de>>(d: D) -> Result<serde_json::Value, DocumentError> {
    // Twice the object limit: the budget counts 8 bytes per node, which JSON may not, and
    // a pod within the object limit must never trip it; the object limit itself is checked
    // on the decoded pod.
    let findings = Findings::new(2 * MAX_OBJECT_BYTES);
    let value = Strict { path: String::new(), findings: &findings }.deserialize(d);
    let over_budget = findings.over_budget.get();
    let problems = findings.problems.into_inner();
    match value {
        Ok(v) if problems.is_empty() => Ok(v),
        Ok(_) => Err(DocumentError { problems, syntax: None }),
        Err(_) if over_budget => Err(DocumentError { problems, syntax: None }),
        Err(e) => Err(DocumentError { problems, syntax: Some(e.to_string()) }),
    }
}

/// One document of a file, as `documents` hands it on: whether the file has more than one
/// (so problems name their document), its 1-based position, and its value or problems.
struct Document {
    many: bool,
    index: usize,
    value: Result<serde_json::Value, Vec<String>>,
}

/// Whether a YAML text has more than one non-empty document, or one that is not the first
/// (then problems say `document N:`). Only reads as far as the second such document, and
/// builds no value.
fn many_yaml_documents(text: &str) -> bool {
    let mut found = 0;
    for (i, de) in serde_norway::Deserializer::from_str(text).enumerate() {
        let read = <Option<serde::de::IgnoredAny> as serde::Deserialize>::deserialize(de);
        if !matches!(read, Ok(None)) {
            found += 1;
            if i > 0 || found > 1 {
                return true;
            }
        }
        if read.is_err() {
            return false; // decoding stops at this syntax error too
        }
    }
    false
}

/// Hands each document of a file's text to `f` (empty ones skipped) until `f` returns
/// false. One document is decoded at a time, so a file of many documents never holds all
/// their values at once. A YAML syntax error ends the file: the parser cannot find the
/// next document reliably after one.
fn documents(text: &str, mut f: impl FnMut(Document) -> bool) {
    let flatten = |e: DocumentError, what: &str| -> Vec<String> {
        e.problems.into_iter().chain(e.syntax.map(|s| format!("invalid {what}: {s}"))).collect()
    };
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let mut de = serde_json::Deserializer::from_slice(text.as_bytes());
        let v = strict_value(&mut de).and_then(|v| {
            de.end().map(|_| v).map_err(|e| DocumentError { problems: Vec::new(), syntax: Some(e.to_string()) })
        });
        f(Document { many: false, index: 1, value: v.map_err(|e| flatten(e, "JSON")) });
        return;
    }
    if yaml_flow_too_deep(text, MAX_YAML_FLOW_DEPTH) {
        let problem = format!(
            "Too deep: flow collections ([ or {{) nested more than {MAX_YAML_FLOW_DEPTH} levels; a pod needs a handful"
        );
        f(Document { many: false, index: 1, value: Err(vec![problem]) });
        return;
    }
    if let Some(doc) = oversized_yaml_document(text, MAX_YAML_EVENTS_PER_DOCUMENT) {
        let problem = format!("Too long: more than {MAX_YAML_EVENTS_PER_DOCUMENT} YAML nodes in one document; a pod within the object size limit has far fewer");
        f(Document { many: doc > 1, index: doc.max(1), value: Err(vec![problem]) });
        return;
    }
    let many = many_yaml_documents(text);
    let mut handed = 0;
    for (i, de) in serde_norway::Deserializer::from_str(text).enumerate() {
        let decoded = strict_value(de);
        if matches!(decoded, Ok(serde_json::Value::Null)) {
            continue;
        }
        let index = i + 1;
        if handed == MAX_PODS_PER_FILE {
            f(Document { many, index, value: Err(vec![too_many_pods()]) });
            return;
        }
        handed += 1;
        let (value, stop) = match decoded {
            Ok(v) => (Ok(v), false),
            Err(e) => {
                let stop = e.syntax.is_some();
                (Err(flatten(e, "YAML")), stop)
            }
        };
        if !f(Document { many, index, value }) || stop {
            return;
        }
    }
}

/// Decodes, defaults and validates every pod in a manifest text: one result per pod,
/// with every problem of a rejected pod (each its own `ManifestError`). Pods keep their
/// manifest names; `as_static_pod` turns them into this node's static pods.
pub fn decode_pods(file: &str, text: &str) -> Vec<Result<Pod, Vec<ManifestError>>> {
    let mut out = Vec::new();
    for_each_pod(file, text, |r| out.push(r));
    out
}

/// `decode_pods`, handing each result to `f` as it is decoded (a caller that keeps only
/// some problems never holds all of them).
pub fn for_each_pod(file: &str, text: &str, mut f: impl FnMut(Result<Pod, Vec<ManifestError>>)) {
    // Results handed on so far (documents and list items).
    let mut n = 0usize;
    documents(text, |Document { many, index: i, value }| {
        let errs = |problems: Vec<String>| -> Vec<ManifestError> {
            problems
                .into_iter()
                .map(|problem| ManifestError { file: file.into(), doc: many.then_some(i), problem })
                .collect()
        };
        let doc = match value {
            Ok(d) => d,
            Err(p) => {
                n += 1;
                f(Err(errs(p)));
                return true;
            }
        };
        let kind = doc.get("kind").and_then(|k| k.as_str()).unwrap_or("").to_string();
        match kind.as_str() {
            "List" | "PodList" => {
                let items = match doc {
                    serde_json::Value::Object(mut o) => match o.remove("items") {
                        Some(serde_json::Value::Array(items)) => items,
                        _ => Vec::new(),
                    },
                    _ => Vec::new(),
                };
                for (j, item) in items.into_iter().enumerate() {
                    if n >= MAX_PODS_PER_FILE {
                        f(Err(errs(vec![format!("items[{j}]: {}", too_many_pods())])));
                        return false;
                    }
                    n += 1;
                    f(decode_one(item).map_err(|p| errs(p.into_iter().map(|p| format!("items[{j}].{p}")).collect())));
                }
            }
            _ if n >= MAX_PODS_PER_FILE => {
                f(Err(errs(vec![too_many_pods()])));
                return false;
            }
            _ => {
                n += 1;
                f(decode_one(doc).map_err(errs));
            }
        }
        true
    });
}

/// Whether two field paths name the same field or one lies inside the other.
fn related(a: &str, b: &str) -> bool {
    let inside = |x: &str, y: &str| x.strip_prefix(y).is_some_and(|r| r.is_empty() || r.starts_with(['.', '[']));
    inside(a, b) || inside(b, a)
}

/// The value at `segments` inside `value`.
fn value_at<'a>(value: &'a mut serde_json::Value, segments: &[Segment]) -> Option<&'a mut serde_json::Value> {
    let mut cur = value;
    for s in segments {
        cur = match (s, cur) {
            (Segment::Seq { index }, serde_json::Value::Array(a)) => a.get_mut(*index)?,
            (Segment::Map { key }, serde_json::Value::Object(o)) => o.get_mut(key)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// Takes the field a decode error was about out of the document, so decoding can go on
/// and report the next problem: a map key is removed, a list element becomes null (so
/// later indexes keep their meaning), a null element that still fails takes its list.
fn strip(value: &mut serde_json::Value, segments: &[Segment]) -> bool {
    let Some((last, parents)) = segments.split_last() else { return false };
    let element_was_null = match (last, value_at(value, parents)) {
        (Segment::Map { key }, Some(serde_json::Value::Object(o))) => return o.shift_remove(key).is_some(),
        (Segment::Seq { index }, Some(serde_json::Value::Array(a))) if *index < a.len() => {
            let was_null = a[*index].is_null();
            a[*index] = serde_json::Value::Null;
            was_null
        }
        _ => return false,
    };
    !element_was_null || strip(value, parents)
}

fn decode_one(mut value: serde_json::Value) -> Result<Pod, Vec<String>> {
    match value.get("kind").and_then(|k| k.as_str()) {
        Some("Pod") => {}
        Some(other) => {
            return Err(vec![format!("kind: Unsupported value: {other:?}: supported values: \"Pod\", \"List\"")])
        }
        None => return Err(vec!["kind: Required value: a manifest must say `kind: Pod`".into()]),
    }
    // Counted in the document before any container is decoded: a pod of 10,000 containers
    // is refused without building 10,000 of them (validation says the same of fewer).
    let count: usize = ["initContainers", "containers"]
        .iter()
        .filter_map(|k| value.get("spec")?.get(*k)?.as_array().map(Vec::len))
        .sum();
    if count > super::limits::MAX_CONTAINERS_PER_POD {
        return Err(vec![format!(
            "spec.containers: Too many: {count}: must have at most {} items (init and app containers together)",
            super::limits::MAX_CONTAINERS_PER_POD
        )]);
    }
    let mut problems = Vec::new();
    let mut stripped: Vec<String> = Vec::new();
    // Every decode error is reported, not only the first: the field it names is taken
    // out and decoding runs again, at most MAX_PROBLEMS_PER_DOCUMENT times.
    let decoded = loop {
        let e = match super::from_value::<Pod>(&value) {
            Ok(pod) => break Some(pod),
            Err(e) => e,
        };
        let path = e.path().to_string();
        let segments: Vec<Segment> = e.path().iter().cloned().collect();
        let message = e.into_inner().to_string();
        if path == "." {
            problems.push(message);
            break None;
        }
        if !stripped.iter().any(|s| related(s, &path)) {
            problems.push(format!("{path}: {message}"));
        }
        if problems.len() >= MAX_PROBLEMS_PER_DOCUMENT || !strip(&mut value, &segments) {
            break None;
        }
        stripped.push(path);
    };
    if let Some(pod) = &decoded {
        // Members of modelled objects ferrolet does not know would be dropped by decoding:
        // they are refused here, the field rule (`fields`) judging only whole unknown fields.
        let written = serde_json::to_value(&pod.spec).unwrap_or_default();
        let mut dropped = Vec::new();
        super::fields::dropped_fields(
            value.get("spec").unwrap_or(&serde_json::Value::Null),
            &written,
            "spec",
            &mut dropped,
        );
        problems.extend(
            dropped.into_iter().map(|p| format!("{p}: Unsupported value: not a field ferrolet knows or supports")),
        );
    }
    drop(value);
    if let Some(mut pod) = decoded {
        set_pod_defaults(&mut pod);
        // Problems about fields taken out above would only repeat them.
        let errs = validate_pod(&pod);
        problems.extend(errs.iter().filter(|e| !stripped.iter().any(|s| related(s, &e.path))).map(|e| e.to_string()));
        if problems.is_empty() {
            return Ok(pod);
        }
    }
    if problems.len() > MAX_PROBLEMS_PER_DOCUMENT {
        let more = problems.len() - MAX_PROBLEMS_PER_DOCUMENT;
        problems.truncate(MAX_PROBLEMS_PER_DOCUMENT);
        problems.push(format!("… and {more} more problem(s)"));
    }
    Err(problems)
}

/// Makes a decoded pod this node's static pod, as kubelet's file source does: the name
/// gets `-<node>` appended, and a pod whose manifest sets no `metadata.uid` gets a hash of
/// node, file and content as its uid (stable across agent restarts, new whenever the
/// manifest changes); a uid the manifest sets is kept. The config annotations are set; the
/// hash annotation is always the content hash, so a change to a pod that keeps its uid is
/// still seen.
pub fn as_static_pod(mut pod: Pod, node_name: &str, file: &Path) -> Pod {
    let mut h = Md5::new();
    h.update(format!("host:{node_name}").as_bytes());
    h.update(format!("file:{}", file.display()).as_bytes());
    // Serializing our own types cannot fail: every map key is a string.
    h.update(serde_json::to_vec(&pod).unwrap_or_default());
    let hash: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    if pod.metadata.uid.is_empty() {
        pod.metadata.uid = hash.clone();
    }
    pod.metadata.name = format!("{}-{}", pod.metadata.name, node_name);
    pod.metadata.annotations.insert(CONFIG_HASH_ANNOTATION.into(), hash);
    pod.metadata.annotations.insert(CONFIG_SOURCE_ANNOTATION.into(), PodSource::File.as_str().into());
    pod.metadata.annotations.insert(CONFIG_FILE_ANNOTATION.into(), file.display().to_string());
    pod.spec.node_name = node_name.into();
    pod
}

#[cfg(test)]
mod tests {
    use super::*;

    const WEB: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: app\n    image: busybox\n    command: [sleep, '3600']\n    resources:\n      limits: {cpu: 500m, memory: 64Mi}\n    someFutureField: true\n";

    #[test]
    fn decodes_and_defaults_a_pod_ignoring_unknown_fields() {
        let pods = decode_pods("web.yaml", WEB);
        let pod = pods[0].as_ref().unwrap();
        assert_eq!(pod.metadata.namespace, "default");
        assert_eq!(pod.spec.containers[0].resources.requests["cpu"].milli_value(), 500);
    }

    #[test]
    fn multi_document_files_yield_each_pod_and_name_the_bad_document() {
        let text = format!("{WEB}---\n{}---\n", WEB.replace("name: web", "name: Web"));
        let pods = decode_pods("two.yaml", &text);
        assert_eq!(pods.len(), 2);
        assert!(pods[0].is_ok());
        let e = pods[1].as_ref().unwrap_err()[0].to_string();
        assert!(e.starts_with("two.yaml: document 2: metadata.name: Invalid value: \"Web\""), "{e}");
    }

    #[test]
    fn static_pod_uid_is_stable_and_content_derived() {
        let pod = decode_pods("web.yaml", WEB).remove(0).unwrap();
        let a = as_static_pod(pod.clone(), "edge1", Path::new("/m/web.yaml"));
        let b = as_static_pod(pod.clone(), "edge1", Path::new("/m/web.yaml"));
        assert_eq!(a.metadata.uid, b.metadata.uid);
        assert_eq!(a.metadata.name, "web-edge1");
        let mut changed = pod;
        changed.spec.containers[0].args.push("x".into());
        let c = as_static_pod(changed, "edge1", Path::new("/m/web.yaml"));
        assert_ne!(a.metadata.uid, c.metadata.uid);
    }

    #[test]
    fn a_uid_the_manifest_sets_is_kept_and_the_hash_still_follows_the_content() {
        let with_uid = WEB.replace("  name: web\n", "  name: web\n  uid: 0b5c6d2e-1f3a-4b5c-8d9e-0a1b2c3d4e5f\n");
        let pod = decode_pods("web.yaml", &with_uid).remove(0).unwrap();
        let a = as_static_pod(pod.clone(), "edge1", Path::new("/m/web.yaml"));
        assert_eq!(a.metadata.uid, "0b5c6d2e-1f3a-4b5c-8d9e-0a1b2c3d4e5f");
        let mut changed = pod;
        changed.spec.containers[0].args.push("x".into());
        let c = as_static_pod(changed, "edge1", Path::new("/m/web.yaml"));
        assert_eq!(c.metadata.uid, a.metadata.uid);
        assert_ne!(c.metadata.annotations[CONFIG_HASH_ANNOTATION], a.metadata.annotations[CONFIG_HASH_ANNOTATION]);
    }

    #[test]
    fn a_uid_unfit_for_a_path_is_refused() {
        for bad in ["../../etc", "a/b", "x y", &"a".repeat(65)] {
            let text = WEB.replace("  name: web\n", &format!("  name: web\n  uid: {bad:?}\n"));
            let e = problems("web.yaml", &text);
            assert!(e.iter().any(|e| e.contains("metadata.uid: Invalid value")), "{bad}: {e:?}");
        }
    }

    #[test]
    fn an_empty_uid_is_the_hash() {
        let pod = decode_pods("web.yaml", WEB).remove(0).unwrap();
        let a = as_static_pod(pod, "edge1", Path::new("/m/web.yaml"));
        assert_eq!(a.metadata.uid.len(), 32);
        assert_eq!(a.metadata.annotations[CONFIG_HASH_ANNOTATION], a.metadata.uid);
    }

    #[test]
    fn json_manifests_and_lists_decode() {
        let json = r#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"i"}]}}]}"#;
        let pods = decode_pods("list.json", json);
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].as_ref().unwrap().metadata.name, "a");
    }

    fn problems(file: &str, text: &str) -> Vec<String> {
        decode_pods(file, text).into_iter().filter_map(|r| r.err()).flatten().map(|e| e.to_string()).collect()
    }

    #[test]
    fn nan_and_inf_quantities_are_rejected_with_their_path() {
        for (v, shown) in [(".nan", "NaN"), (".inf", "inf"), ("-.Inf", "-inf")] {
            let text = WEB.replace("cpu: 500m", &format!("cpu: {v}"));
            let got = problems("web.yaml", &text);
            let want = format!("web.yaml: spec.containers[0].resources.limits.cpu: Invalid value: {shown}: must be a finite number (.nan and .inf are not allowed)");
            assert_eq!(got, vec![want], "{v}");
        }
    }

    #[test]
    fn duplicate_keys_are_rejected_with_their_path() {
        let text = WEB.replace("  name: web\n", "  name: web\n  name: other\n");
        let got = problems("web.yaml", &text);
        assert_eq!(
            got,
            vec!["web.yaml: metadata.name: Duplicate value: \"name\": a key may appear only once in a mapping"]
        );
        let json =
            r#"{"kind":"Pod","metadata":{"name":"a","name":"b"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#;
        let got = problems("p.json", json);
        assert_eq!(
            got,
            vec!["p.json: metadata.name: Duplicate value: \"name\": a key may appear only once in a mapping"]
        );
    }

    #[test]
    fn every_decode_and_validation_problem_is_reported_on_its_own() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: Web\nspec:\n  restartPolicy: Sometimes\n  containers:\n  - name: app\n    image: busybox\n    ports:\n    - containerPort: eighty\n    livenessProbe:\n      exec:\n        command: [/bin/true]\n      periodSeconds: ten\n    resources:\n      limits:\n        cpu: 1.5.0\n";
        let got = problems("web.yaml", text);
        assert_eq!(
            got,
            vec![
                "web.yaml: spec.containers[0].ports[0].containerPort: invalid type: string \"eighty\", expected i64",
                "web.yaml: spec.containers[0].livenessProbe.periodSeconds: invalid type: string \"ten\", expected i32",
                "web.yaml: spec.containers[0].resources.limits.cpu: invalid quantity \"1.5.0\"",
                "web.yaml: metadata.name: Invalid value: \"Web\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "web.yaml: spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
            ]
        );
    }

    #[test]
    fn a_file_holds_at_most_as_many_pods_as_a_node_runs() {
        // A million `{}` documents or list items cost a result each: the file is refused
        // at the first one past the bound, without decoding the rest.
        let docs = "a: 1\n---\n".repeat(MAX_PODS_PER_FILE + 1000);
        let r = decode_pods("many.yaml", &docs);
        assert_eq!(r.len(), MAX_PODS_PER_FILE + 1);
        let last = r.last().unwrap().as_ref().unwrap_err()[0].to_string();
        let want = format!("many.yaml: document {}: Too many: more than {MAX_PODS_PER_FILE} pods in one file (a node runs at most {MAX_PODS_PER_FILE})", MAX_PODS_PER_FILE + 1);
        assert_eq!(last, want);
        let list = format!("kind: List\nitems: [{}{{}}]\n", "{},".repeat(MAX_PODS_PER_FILE + 1000));
        let r = decode_pods("list.yaml", &list);
        assert_eq!(r.len(), MAX_PODS_PER_FILE + 1);
        let last = r.last().unwrap().as_ref().unwrap_err()[0].to_string();
        assert!(last.starts_with(&format!("list.yaml: items[{MAX_PODS_PER_FILE}]: Too many: more than")), "{last}");
        // Empty documents are no pods.
        let empty = format!("{}a: 1\n", "---\n".repeat(MAX_PODS_PER_FILE + 10));
        assert_eq!(decode_pods("empty.yaml", &empty).len(), 1);
    }

    #[test]
    fn later_documents_are_decoded_after_a_bad_one() {
        let bad = WEB.replace("name: web", "name: bad").replace("cpu: 500m", "cpu: [1]");
        let text = format!("{bad}---\n{}", WEB.replace("name: web", "name: good"));
        let r = decode_pods("two.yaml", &text);
        assert_eq!(r.len(), 2);
        let e = r[0].as_ref().unwrap_err()[0].to_string();
        assert!(
            e.starts_with("two.yaml: document 1: spec.containers[0].resources.limits.cpu: invalid type: sequence"),
            "{e}"
        );
        assert_eq!(r[1].as_ref().unwrap().metadata.name, "good");
    }

    #[test]
    fn control_characters_in_file_names_and_values_are_escaped() {
        let text = WEB.replace("name: web", "name: \"we\\nb\"");
        let got = problems("x\nINFO forged.yaml", &text);
        assert_eq!(got.len(), 1);
        assert!(got[0].starts_with("x\\nINFO forged.yaml: metadata.name: Invalid value: \"we\\nb\""), "{}", got[0]);
        assert!(!got[0].contains('\n'));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            #[test]
            fn any_text_is_decoded_or_refused_without_a_panic(text in "\\PC{0,300}") {
                let _ = decode_pods("any.yaml", &text);
            }

            #[test]
            fn any_value_in_a_pod_is_decoded_or_refused_without_a_panic(
                key in prop::sample::select(vec!["metadata", "spec", "containers", "resources", "limits", "ports"]),
                value in "[a-z0-9:{}\\[\\], '-]{0,40}",
            ) {
                let text = format!("{WEB}    {key}: {value}\n");
                let _ = decode_pods("any.yaml", &text);
                let text = WEB.replace("image: busybox", &format!("image: busybox\n    {key}: {value}"));
                let _ = decode_pods("any.yaml", &text);
            }

            #[test]
            fn a_pod_name_is_taken_when_it_is_a_dns_subdomain_and_refused_otherwise(name in "[a-zA-Z0-9.-]{1,20}") {
                let pods = decode_pods("n.yaml", &WEB.replace("name: web", &format!("name: '{name}'")));
                let valid = crate::api::field::is_dns1123_subdomain(&name);
                match &pods[0] {
                    Ok(pod) => {
                        prop_assert!(valid, "{} taken", name);
                        prop_assert_eq!(&pod.metadata.name, &name);
                    }
                    Err(e) => {
                        prop_assert!(!valid, "{} refused: {:?}", name, e);
                        prop_assert!(e[0].to_string().contains("metadata.name"), "{}", e[0]);
                    }
                }
            }
        }
    }
}
