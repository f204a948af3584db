//! The downward API for environment variables (`env[].valueFrom`): `fieldRef` (the pod's
//! name, namespace, uid, labels, annotations, node, service account, IPs) and
//! `resourceFieldRef` (a container's cpu or memory request or limit, limits defaulting to
//! the node's allocatable as kubelet does, divided by `divisor` and rounded up). Pure:
//! `check` is the validation of a source, `value` its value for one container.

use super::quantity::Quantity;
use super::types::{Container, Pod};
use serde_json::Value;

/// What the values come from besides the pod itself.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// This node's name (`spec.nodeName`).
    pub node_name: String,
    /// The pod's IPs (the node's on the host network).
    pub pod_ips: Vec<String>,
    /// The node's IP.
    pub host_ip: String,
    /// The node's allocatable cpu (millicores) and memory (bytes): the limits of a
    /// container that sets none.
    pub allocatable: (i64, i64),
}

/// The `fieldRef.fieldPath`s a container may read, as the API server allows them for env.
const FIELD_PATHS: [&str; 9] = [
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.podIP",
    "status.podIPs",
    "status.hostIP",
    "status.hostIPs",
];

/// The resources `resourceFieldRef` may name.
const RESOURCES: [&str; 4] = ["limits.cpu", "limits.memory", "requests.cpu", "requests.memory"];

/// `metadata.labels['key']` or `metadata.annotations['key']`: (`labels`, `key`).
fn subscript(path: &str) -> Option<(&str, &str)> {
    let (map, rest) = path.strip_prefix("metadata.")?.split_once("['")?;
    let key = rest.strip_suffix("']")?;
    (matches!(map, "labels" | "annotations") && !key.is_empty()).then_some((map, key))
}

/// Checks one `valueFrom`: exactly one source, and one ferrolet can resolve (whether a pod
/// may use ConfigMaps and Secrets is judged by `fields`). The error is the problem, for the
/// caller to put after the field path.
pub fn check(source: &Value) -> Result<(), String> {
    let Some(obj) = source.as_object() else { return Err("must be an object".into()) };
    let set: Vec<&String> = obj.keys().filter(|k| !obj[*k].is_null()).collect();
    if set.len() != 1 {
        return Err("must set exactly one of fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef".into());
    }
    let inner = &obj[set[0].as_str()];
    match set[0].as_str() {
        "fieldRef" => {
            let path = inner.get("fieldPath").and_then(Value::as_str).unwrap_or_default();
            if FIELD_PATHS.contains(&path) || subscript(path).is_some() {
                Ok(())
            } else {
                Err(format!(
                    "fieldRef.fieldPath: Unsupported value: {path:?}: supported values: {}, metadata.labels['<KEY>'], metadata.annotations['<KEY>']",
                    FIELD_PATHS.join(", ")
                ))
            }
        }
        "resourceFieldRef" => {
            let resource = inner.get("resource").and_then(Value::as_str).unwrap_or_default();
            if !RESOURCES.contains(&resource) {
                return Err(format!(
                    "resourceFieldRef.resource: Unsupported value: {resource:?}: supported values: {}",
                    RESOURCES.join(", ")
                ));
            }
            divisor(inner).map(|_| ())
        }
        kind @ ("configMapKeyRef" | "secretKeyRef") => {
            let text = |k: &str| inner.get(k).and_then(Value::as_str).unwrap_or_default();
            if text("name").is_empty() {
                Err(format!("{kind}.name: Required value"))
            } else if text("key").is_empty() {
                Err(format!("{kind}.key: Required value"))
            } else if !super::field::is_config_key(text("key")) {
                Err(format!("{kind}.key: Invalid value: {:?}: a valid config key must consist of alphanumeric characters, '-', '_' or '.'", text("key")))
            } else {
                Ok(())
            }
        }
        other => Err(format!("{other}: Unsupported value: not an env var source")),
    }
}

/// The divisor of a `resourceFieldRef` (default 1), which must be positive.
fn divisor(inner: &Value) -> Result<Quantity, String> {
    let text = match inner.get("divisor") {
        None | Some(Value::Null) => "1".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(_) => return Err("resourceFieldRef.divisor: must be a quantity".into()),
    };
    let q = Quantity::parse(&text).map_err(|e| format!("resourceFieldRef.divisor: {e}"))?;
    if q.is_zero() || q.is_negative() {
        return Err(format!("resourceFieldRef.divisor: Invalid value: {text:?}: must be greater than zero"));
    }
    Ok(q)
}

/// The value of `source` for container `c` of `pod`. Errors name what is missing (a
/// checked source only fails on a `containerName` the pod does not have).
pub fn value(source: &Value, pod: &Pod, c: &Container, facts: &Facts) -> Result<String, String> {
    if let Some(f) = source.get("fieldRef").filter(|v| !v.is_null()) {
        let path = f.get("fieldPath").and_then(Value::as_str).unwrap_or_default();
        let m = &pod.metadata;
        let ips = if facts.pod_ips.is_empty() { vec![facts.host_ip.clone()] } else { facts.pod_ips.clone() };
        return Ok(match path {
            "metadata.name" => m.name.clone(),
            "metadata.namespace" => m.namespace.clone(),
            "metadata.uid" => m.uid.clone(),
            "spec.nodeName" => facts.node_name.clone(),
            "spec.serviceAccountName" => {
                pod.spec.other.get("serviceAccountName").and_then(Value::as_str).unwrap_or_default().to_string()
            }
            "status.podIP" => ips[0].clone(),
            "status.podIPs" => ips.join(","),
            "status.hostIP" | "status.hostIPs" => facts.host_ip.clone(),
            other => match subscript(other) {
                Some(("labels", k)) => m.labels.get(k).cloned().unwrap_or_default(),
                Some((_, k)) => m.annotations.get(k).cloned().unwrap_or_default(),
                None => return Err(format!("unsupported fieldPath {other:?}")),
            },
        });
    }
    if let Some(r) = source.get("resourceFieldRef").filter(|v| !v.is_null()) {
        let name = r.get("containerName").and_then(Value::as_str).filter(|n| !n.is_empty());
        let target = match name {
            None => c,
            Some(n) => pod
                .spec
                .init_containers
                .iter()
                .chain(&pod.spec.containers)
                .find(|x| x.name == n)
                .ok_or_else(|| format!("resourceFieldRef: container {n:?} is not in the pod"))?,
        };
        let resource = r.get("resource").and_then(Value::as_str).unwrap_or_default();
        let (list, name) = resource.split_once('.').unwrap_or_default();
        let set = if list == "limits" { &target.resources.limits } else { &target.resources.requests };
        let cpu = name == "cpu";
        let amount = match set.get(name) {
            Some(q) if cpu => q.milli_value(),
            Some(q) => q.value(),
            // An unset limit is the node's allocatable; an unset request is nothing.
            None if list == "limits" => {
                if cpu {
                    facts.allocatable.0
                } else {
                    facts.allocatable.1
                }
            }
            None => 0,
        };
        let d = divisor(r)?;
        let per = if cpu { d.milli_value() } else { d.value() }.max(1);
        // Rounded up, as kubelet's ConvertResourceCPUToString / MemoryToString.
        return Ok(((amount + per - 1) / per).to_string());
    }
    Err("no fieldRef or resourceFieldRef".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> (Pod, Facts) {
        let mut p = Pod::default();
        p.metadata.name = "web-node1".into();
        p.metadata.namespace = "default".into();
        p.metadata.uid = "u1".into();
        p.metadata.labels.insert("app".into(), "web".into());
        p.metadata.annotations.insert("team".into(), "edge".into());
        let mut c = Container { name: "app".into(), ..Default::default() };
        c.resources.limits.insert("memory".into(), Quantity::parse("64Mi").unwrap());
        c.resources.requests.insert("cpu".into(), Quantity::parse("250m").unwrap());
        p.spec.containers.push(c);
        p.spec.containers.push(Container { name: "side".into(), ..Default::default() });
        let facts = Facts {
            node_name: "node1".into(),
            pod_ips: vec!["10.85.0.7".into(), "fd00::7".into()],
            host_ip: "192.0.2.2".into(),
            allocatable: (2000, 8 << 30),
        };
        (p, facts)
    }

    fn get(source: Value) -> String {
        let (p, facts) = pod();
        check(&source).unwrap();
        value(&source, &p, &p.spec.containers[0], &facts).unwrap()
    }

    #[test]
    fn field_refs_read_the_pod_and_the_node() {
        let f = |path: &str| get(json!({"fieldRef": {"fieldPath": path}}));
        assert_eq!(f("metadata.name"), "web-node1");
        assert_eq!(f("metadata.uid"), "u1");
        assert_eq!(f("metadata.labels['app']"), "web");
        assert_eq!(f("metadata.annotations['team']"), "edge");
        assert_eq!(f("metadata.labels['none']"), "");
        assert_eq!(f("spec.nodeName"), "node1");
        assert_eq!(f("status.podIP"), "10.85.0.7");
        assert_eq!(f("status.podIPs"), "10.85.0.7,fd00::7");
        assert_eq!(f("status.hostIP"), "192.0.2.2");
    }

    #[test]
    fn resource_refs_divide_and_round_up_and_unset_limits_are_the_nodes() {
        let r = |resource: &str, divisor: Option<&str>| {
            let mut spec = json!({"resource": resource});
            if let Some(d) = divisor {
                spec["divisor"] = json!(d);
            }
            get(json!({ "resourceFieldRef": spec }))
        };
        assert_eq!(r("limits.memory", None), (64u64 << 20).to_string());
        assert_eq!(r("limits.memory", Some("1Mi")), "64");
        assert_eq!(r("requests.cpu", None), "1", "250m is one core, rounded up");
        assert_eq!(r("requests.cpu", Some("1m")), "250");
        assert_eq!(r("limits.cpu", None), "2", "no limit: the node's allocatable");
        assert_eq!(r("requests.memory", None), "0");
        let (p, facts) = pod();
        let other =
            json!({"resourceFieldRef": {"containerName": "side", "resource": "limits.memory", "divisor": "1Gi"}});
        assert_eq!(value(&other, &p, &p.spec.containers[0], &facts).unwrap(), "8");
        let missing = json!({"resourceFieldRef": {"containerName": "nope", "resource": "limits.cpu"}});
        assert!(value(&missing, &p, &p.spec.containers[0], &facts).unwrap_err().contains("\"nope\""));
    }

    #[test]
    fn sources_are_checked_with_what_is_allowed() {
        assert!(check(&json!({"fieldRef": {"fieldPath": "spec.hostname"}}))
            .unwrap_err()
            .starts_with("fieldRef.fieldPath: Unsupported value: \"spec.hostname\": supported values: metadata.name"));
        assert!(check(&json!({"resourceFieldRef": {"resource": "limits.gpu"}})).is_err());
        assert!(check(&json!({"resourceFieldRef": {"resource": "limits.cpu", "divisor": "0"}}))
            .unwrap_err()
            .contains("must be greater than zero"));
        assert!(check(&json!({})).unwrap_err().contains("exactly one"));
        assert!(check(&json!({"fieldRef": {"fieldPath": "metadata.name"}, "secretKeyRef": {"name": "s", "key": "k"}}))
            .is_err());
        assert!(check(&json!({"configMapKeyRef": {"name": "c", "key": "k"}})).is_ok());
    }
}
