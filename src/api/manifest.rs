//! Decoding pod manifests as users write them for kubectl: YAML (several documents per
//! file) or JSON, a `Pod` or a `List`/`PodList` of pods. Unknown fields are ignored, every
//! error names the file and the field path.

use super::defaults::set_pod_defaults;
use super::validation::validate_pod;
use super::Pod;
use md5::{Digest, Md5};
use serde::Deserialize;
use std::path::Path;

/// Why a manifest document was rejected; `Display` reads `<file>: <field path>: <problem>`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {}{problem}", doc.map(|d| format!("document {d}: ")).unwrap_or_default())]
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
/// Annotation kubelet puts on static pods: where the pod came from.
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// Annotation ferrolet puts on static pods: the manifest file.
pub const CONFIG_FILE_ANNOTATION: &str = "ferrolet.io/manifest";

/// Splits a file's text into JSON values, one per non-empty document.
fn documents(file: &str, text: &str) -> Result<Vec<serde_json::Value>, ManifestError> {
    let err = |doc, problem: String| ManifestError { file: file.into(), doc, problem };
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| err(None, format!("invalid JSON: {e}")))?;
        return Ok(vec![v]);
    }
    let mut out = Vec::new();
    for (i, de) in serde_norway::Deserializer::from_str(text).enumerate() {
        let v = serde_json::Value::deserialize(de)
            .map_err(|e| err((i > 0).then_some(i + 1), format!("invalid YAML: {e}")))?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

/// Decodes, defaults and validates every pod in a manifest text. Pods keep their manifest
/// names; `as_static_pods` turns them into this node's static pods.
pub fn decode_pods(file: &str, text: &str) -> Vec<Result<Pod, ManifestError>> {
    let docs = match documents(file, text) {
        Ok(d) => d,
        Err(e) => return vec![Err(e)],
    };
    let many = docs.len() > 1;
    let mut out = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        let err = |problem: String| ManifestError { file: file.into(), doc: many.then_some(i + 1), problem };
        let kind = doc.get("kind").and_then(|k| k.as_str()).unwrap_or("").to_string();
        match kind.as_str() {
            "List" | "PodList" => {
                let items = doc.get("items").and_then(|v| v.as_array()).cloned().unwrap_or_default();
                for (j, item) in items.into_iter().enumerate() {
                    out.push(decode_one(item).map_err(|p| err(format!("items[{j}].{p}"))));
                }
            }
            _ => out.push(decode_one(doc).map_err(err)),
        }
    }
    out
}

fn decode_one(value: serde_json::Value) -> Result<Pod, String> {
    match value.get("kind").and_then(|k| k.as_str()) {
        Some("Pod") => {}
        Some(other) => return Err(format!("kind: Unsupported value: {other:?}: supported values: \"Pod\", \"List\"")),
        None => return Err("kind: Required value: a manifest must say `kind: Pod`".into()),
    }
    let mut pod: Pod = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            e.into_inner().to_string()
        } else {
            format!("{path}: {}", e.into_inner())
        }
    })?;
    set_pod_defaults(&mut pod);
    let errs = validate_pod(&pod);
    if !errs.is_empty() {
        let lines: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        return Err(lines.join("; "));
    }
    Ok(pod)
}

/// Makes a decoded pod this node's static pod, as kubelet's file source does: the name
/// gets `-<node>` appended, the uid is a hash of node, file and content (stable across
/// agent restarts, new whenever the manifest changes), and the config annotations are set.
pub fn as_static_pod(mut pod: Pod, node_name: &str, file: &Path) -> Pod {
    let mut h = Md5::new();
    h.update(format!("host:{node_name}").as_bytes());
    h.update(format!("file:{}", file.display()).as_bytes());
    // Serializing our own types cannot fail: every map key is a string.
    h.update(serde_json::to_vec(&pod).unwrap_or_default());
    let uid: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    pod.metadata.name = format!("{}-{}", pod.metadata.name, node_name);
    pod.metadata.uid = uid.clone();
    pod.metadata.annotations.insert(CONFIG_HASH_ANNOTATION.into(), uid);
    pod.metadata.annotations.insert(CONFIG_SOURCE_ANNOTATION.into(), "file".into());
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
        let e = pods[1].as_ref().unwrap_err().to_string();
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
    fn json_manifests_and_lists_decode() {
        let json = r#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"i"}]}}]}"#;
        let pods = decode_pods("list.json", json);
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].as_ref().unwrap().metadata.name, "a");
    }
}
