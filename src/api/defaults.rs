//! Kubernetes API defaulting for pods (`pkg/apis/core/v1/defaults.go`), applied to every
//! manifest before validation, so a pod reads the same here as `kubectl get -o yaml` shows it.

use super::{Container, HttpGetAction, Pod, Probe, RestartPolicy};
use std::time::Duration;

/// Default grace period, seconds (the API's `DefaultTerminationGracePeriodSeconds`).
pub const DEFAULT_TERMINATION_GRACE_PERIOD: i64 = 30;
/// `DEFAULT_TERMINATION_GRACE_PERIOD` as a duration, for stops that have no pod spec at hand.
pub const DEFAULT_TERMINATION_GRACE: Duration = Duration::from_secs(DEFAULT_TERMINATION_GRACE_PERIOD as u64);

/// The termination message file a container gets when its spec names none.
pub const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";

/// Applies API defaults in place.
pub fn set_pod_defaults(pod: &mut Pod) {
    if pod.api_version.is_empty() {
        pod.api_version = "v1".into();
    }
    if pod.kind.is_empty() {
        pod.kind = "Pod".into();
    }
    if pod.metadata.namespace.is_empty() {
        pod.metadata.namespace = "default".into();
    }
    let spec = &mut pod.spec;
    if spec.restart_policy.is_empty() {
        spec.restart_policy = RestartPolicy::Always.as_str().into();
    }
    if spec.termination_grace_period_seconds.is_none() {
        spec.termination_grace_period_seconds = Some(DEFAULT_TERMINATION_GRACE_PERIOD);
    }
    for c in spec.init_containers.iter_mut().chain(spec.containers.iter_mut()) {
        set_container_defaults(c);
    }
}

/// kubelet's `SetDefaults_Container` pull policy: `Always` for the tag `latest`, or for no tag
/// and no digest (`ParseImageName` then assumes `latest`); `IfNotPresent` otherwise, so a
/// digest alone pins the image, but `name:latest@sha256:…` still pulls.
pub fn default_pull_policy(image: &str) -> &'static str {
    let last = image.rsplit('/').next().unwrap_or("");
    let (name, digest) = match last.split_once('@') {
        Some((n, _)) => (n, true),
        None => (last, false),
    };
    match name.split_once(':').map(|(_, t)| t) {
        Some("latest") => "Always",
        None if !digest => "Always",
        _ => "IfNotPresent",
    }
}

fn set_container_defaults(c: &mut Container) {
    if c.image_pull_policy.is_empty() {
        c.image_pull_policy = default_pull_policy(&c.image).into();
    }
    if c.termination_message_path.is_empty() {
        c.termination_message_path = DEFAULT_TERMINATION_MESSAGE_PATH.into();
    }
    if c.termination_message_policy.is_empty() {
        c.termination_message_policy = super::TerminationMessagePolicy::File.as_str().into();
    }
    if let Some(l) = &mut c.lifecycle {
        for h in [&mut l.post_start, &mut l.pre_stop].into_iter().flatten() {
            if let Some(g) = &mut h.http_get {
                set_http_get_defaults(g);
            }
        }
    }
    for p in &mut c.ports {
        if p.protocol.is_empty() {
            p.protocol = "TCP".into();
        }
    }
    // SetDefaults_Pod: a limit without a request makes the request equal to the limit.
    let limits = c.resources.limits.clone();
    for (name, q) in limits {
        c.resources.requests.entry(name).or_insert(q);
    }
    for p in [&mut c.liveness_probe, &mut c.readiness_probe, &mut c.startup_probe].into_iter().flatten() {
        set_probe_defaults(p);
    }
}

/// `SetDefaults_Probe` and `SetDefaults_HTTPGetAction`: zero means "use the default".
pub fn set_probe_defaults(p: &mut Probe) {
    if p.timeout_seconds == 0 {
        p.timeout_seconds = 1;
    }
    if p.period_seconds == 0 {
        p.period_seconds = 10;
    }
    if p.success_threshold == 0 {
        p.success_threshold = 1;
    }
    if p.failure_threshold == 0 {
        p.failure_threshold = 3;
    }
    if let Some(h) = &mut p.http_get {
        set_http_get_defaults(h);
    }
}

/// `SetDefaults_HTTPGetAction` (probes and lifecycle hooks).
fn set_http_get_defaults(h: &mut HttpGetAction) {
    if h.path.is_empty() {
        h.path = "/".into();
    }
    if h.scheme.is_empty() {
        h.scheme = "HTTP".into();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{HttpGetAction, IntOrString, Quantity};

    #[test]
    fn fills_pod_level_defaults() {
        let mut pod = Pod::default();
        pod.spec.containers.push(Container { name: "app".into(), image: "nginx:1.25".into(), ..Default::default() });
        set_pod_defaults(&mut pod);
        assert_eq!(pod.metadata.namespace, "default");
        assert_eq!(pod.spec.restart_policy, "Always");
        assert_eq!(pod.spec.termination_grace_period_seconds, Some(30));
        assert_eq!(pod.spec.containers[0].image_pull_policy, "IfNotPresent");
        assert_eq!(pod.spec.containers[0].termination_message_path, "/dev/termination-log");
    }

    #[test]
    fn pull_policy_follows_the_tag() {
        for (image, want) in [
            ("nginx", "Always"),
            ("nginx:latest", "Always"),
            ("registry:5000/nginx", "Always"),
            ("registry:5000/nginx:1.2", "IfNotPresent"),
            ("nginx@sha256:abcd", "IfNotPresent"),
            ("registry:5000/nginx@sha256:abcd", "IfNotPresent"),
            ("nginx:1.2@sha256:abcd", "IfNotPresent"),
            // kubelet parses the tag beside the digest: `latest` still means Always.
            ("nginx:latest@sha256:abcd", "Always"),
        ] {
            let mut c = Container { image: image.into(), ..Default::default() };
            set_container_defaults(&mut c);
            assert_eq!(c.image_pull_policy, want, "{image}");
        }
    }

    #[test]
    fn requests_default_from_limits_without_overriding() {
        let mut c = Container::default();
        c.resources.limits.insert("cpu".into(), Quantity::parse("2").unwrap());
        c.resources.limits.insert("memory".into(), Quantity::parse("1Gi").unwrap());
        c.resources.requests.insert("cpu".into(), Quantity::parse("500m").unwrap());
        set_container_defaults(&mut c);
        assert_eq!(c.resources.requests["cpu"].milli_value(), 500);
        assert_eq!(c.resources.requests["memory"].value(), 1 << 30);
    }

    #[test]
    fn probe_zeros_become_defaults() {
        let mut p = Probe {
            http_get: Some(HttpGetAction {
                path: String::new(),
                port: IntOrString::Int(80),
                host: String::new(),
                scheme: String::new(),
                http_headers: vec![],
            }),
            period_seconds: 5,
            ..Default::default()
        };
        set_probe_defaults(&mut p);
        assert_eq!((p.timeout_seconds, p.period_seconds, p.success_threshold, p.failure_threshold), (1, 5, 1, 3));
        let h = p.http_get.unwrap();
        assert_eq!((h.path.as_str(), h.scheme.as_str()), ("/", "HTTP"));
    }
}
