//! apiserver-style validation of pods (`pkg/apis/core/validation`): every problem is a
//! `FieldError` with the field path and a message shaped like the apiserver's, so
//! `ferrolet validate` and `kubectl apply` say the same thing about the same manifest.

use super::field::{is_dns1123_label, is_dns1123_subdomain, quote, Errs, DNS1123_LABEL_FMT, DNS1123_SUBDOMAIN_FMT};
pub use super::field::{FieldError, FieldErrorKind};
use super::limits::{
    allowed_max, validate_expanded_sizes, validate_pod_totals, within_max, GRACE_TOO_LONG, MAX_CONTAINERS_PER_POD,
    MAX_GRACE_PERIOD_SECONDS, MAX_OBJECT_BYTES, MIN_MEMORY_LIMIT, TOTAL_ANNOTATION_SIZE_LIMIT,
};
use super::{
    Container, DnsPolicy, HttpGetAction, IntOrString, LifecycleHandler, Pod, PodSpec, Probe, Quantity, RestartPolicy,
    TerminationMessagePolicy,
};
use std::collections::{BTreeMap, HashSet};

/// What a `metadata.uid` set in a manifest may hold.
const UID_FMT: &str = "a uid must consist of at most 64 alphanumeric characters or '-' (e.g. a UUID such as '0b5c6d2e-1f3a-4b5c-8d9e-0a1b2c3d4e5f')";

/// Whether `s` may be a pod uid: 1 to 64 ASCII letters, digits or dashes (a UUID, an md5 hex),
/// so it is safe in a path and a cgroup name.
pub fn is_uid(s: &str) -> bool {
    (1..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// IANA service name as Kubernetes accepts it for port names.
fn is_port_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 15
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.iter().any(|c| c.is_ascii_lowercase())
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
        && !s.contains("--")
}

/// Environment variable names: `[-._a-zA-Z][-._a-zA-Z0-9]*`.
pub fn is_env_var_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || "-._".contains(c))
        && chars.all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
}

/// At most this many `envFrom` sources in a container, and `imagePullSecrets` in a pod (the
/// apiserver sets no bound; a node needs one).
pub const MAX_REFS: usize = 64;

/// The apiserver's words for a bad variable name.
pub const ENV_VAR_NAME_FMT: &str = "a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', and must not start with a digit";

/// The apiserver's checks of a container's `envFrom`.
fn validate_env_from(e: &mut Errs, c: &Container, path: &str) {
    if c.env_from.len() > MAX_REFS {
        e.too_many(&format!("{path}.envFrom"), c.env_from.len(), MAX_REFS);
        return;
    }
    for (i, f) in c.env_from.iter().enumerate() {
        let base = format!("{path}.envFrom[{i}]");
        let (field, r) = match (&f.config_map_ref, &f.secret_ref) {
            (Some(r), None) => ("configMapRef", r),
            (None, Some(r)) => ("secretRef", r),
            (None, None) => {
                e.invalid(&base, String::new(), "must specify one of: `configMapRef` or `secretRef`");
                continue;
            }
            (Some(_), Some(_)) => {
                e.forbidden(&base, "may not have more than one field specified at a time");
                continue;
            }
        };
        if r.name.is_empty() {
            e.required(&format!("{base}.{field}.name"), "");
        } else if !super::field::is_dns1123_subdomain(&r.name) {
            e.invalid(&format!("{base}.{field}.name"), quote(&r.name), super::field::DNS1123_SUBDOMAIN_FMT);
        }
        if !f.prefix.is_empty() && !is_env_var_name(&f.prefix) {
            e.invalid(&format!("{base}.prefix"), quote(&f.prefix), ENV_VAR_NAME_FMT);
        }
    }
}

/// Label/annotation keys: `[prefix/]name`, name ≤ 63 of `[A-Za-z0-9_.-]` starting and ending alphanumeric.
/// A Kubernetes qualified name: `[prefix/]name`, name at most 63 characters.
pub fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    name_ok && prefix.map_or(true, |p| !p.is_empty() && is_dns1123_subdomain(p))
}

fn is_label_value(s: &str) -> bool {
    s.is_empty() || (is_qualified_name(s) && !s.contains('/'))
}

/// Validates a defaulted pod; returns every problem found (empty when valid).
pub fn validate_pod(pod: &Pod) -> Vec<FieldError> {
    let mut e = Errs(Vec::new());
    let m = &pod.metadata;
    if pod.kind != "Pod" {
        e.not_supported("kind", &pod.kind, &["Pod"]);
    }
    if pod.api_version != "v1" {
        e.not_supported("apiVersion", &pod.api_version, &["v1"]);
    }
    if m.name.is_empty() {
        e.required("metadata.name", "name or generateName is required");
    } else if !is_dns1123_subdomain(&m.name) {
        e.invalid("metadata.name", quote(&m.name), DNS1123_SUBDOMAIN_FMT);
    }
    if !is_dns1123_label(&m.namespace) {
        e.invalid("metadata.namespace", quote(&m.namespace), DNS1123_LABEL_FMT);
    }
    // A uid the manifest sets is kept, and it names directories and cgroups (`pod<uid>`).
    if !m.uid.is_empty() && !is_uid(&m.uid) {
        e.invalid("metadata.uid", quote(&m.uid), UID_FMT);
    }
    for (k, v) in &m.labels {
        if !is_qualified_name(k) {
            e.invalid("metadata.labels", quote(k), "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc'), with an optional DNS subdomain prefix and '/'");
        } else if !is_label_value(v) {
            e.invalid(&format!("metadata.labels.{k}"), quote(v), "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character");
        }
    }
    let mut annotation_bytes = 0usize;
    for (k, v) in &m.annotations {
        annotation_bytes += k.len() + v.len();
        if !is_qualified_name(k) {
            e.invalid("metadata.annotations", quote(k), "must be a qualified name, e.g. 'example.com/my-note'");
        }
    }
    if annotation_bytes > TOTAL_ANNOTATION_SIZE_LIMIT {
        e.too_long(
            "metadata.annotations",
            format!("{annotation_bytes} bytes; all annotations together may have at most {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"),
        );
    }
    let spec = &pod.spec;
    if RestartPolicy::parse(&spec.restart_policy).is_none() {
        e.not_supported("spec.restartPolicy", &spec.restart_policy, &RestartPolicy::NAMES);
    }
    if let Some(g) = spec.termination_grace_period_seconds {
        if g < 0 {
            e.invalid("spec.terminationGracePeriodSeconds", g.to_string(), "must be greater than or equal to 0");
        } else if g > MAX_GRACE_PERIOD_SECONDS {
            e.invalid("spec.terminationGracePeriodSeconds", g.to_string(), GRACE_TOO_LONG);
        }
    }
    if let Some(d) = spec.active_deadline_seconds {
        if !(1..=MAX_ACTIVE_DEADLINE_SECONDS).contains(&d) {
            e.invalid(
                "spec.activeDeadlineSeconds",
                d.to_string(),
                format!("must be between 1 and {MAX_ACTIVE_DEADLINE_SECONDS}, inclusive"),
            );
        }
    }
    super::security::validate_pod_security(&mut e, spec);
    super::volumes::validate_volumes(&mut e, pod);
    if spec.image_pull_secrets.len() > MAX_REFS {
        e.too_many("spec.imagePullSecrets", spec.image_pull_secrets.len(), MAX_REFS);
    }
    for (i, r) in spec.image_pull_secrets.iter().enumerate().filter(|(_, r)| r.name.is_empty()) {
        e.required(&format!("spec.imagePullSecrets[{i}].name"), &r.name);
    }
    validate_pod_dns(&mut e, spec);
    if spec.containers.is_empty() {
        e.required("spec.containers", "");
    }
    let count = spec.init_containers.len() + spec.containers.len();
    if count > MAX_CONTAINERS_PER_POD {
        e.0.push(FieldError {
            path: "spec.containers".into(),
            kind: FieldErrorKind::TooMany(count),
            detail: format!("must have at most {MAX_CONTAINERS_PER_POD} items (init and app containers together)"),
        });
        // Validating each of thousands of containers would only bury this.
        return e.0;
    }
    let mut names = HashSet::new();
    for (i, c) in spec.init_containers.iter().enumerate() {
        let path = format!("spec.initContainers[{i}]");
        validate_container(&mut e, c, &path, &mut names, spec.termination_grace_period_seconds);
        match c.restart_policy.as_deref() {
            None => {}
            Some(p) if p == RestartPolicy::Always.as_str() => {}
            Some(other) => e.not_supported(&format!("{path}.restartPolicy"), other, &[RestartPolicy::Always.as_str()]),
        }
        if !c.is_sidecar() && c.lifecycle.is_some() {
            e.forbidden(
                &format!("{path}.lifecycle"),
                "may not be set for init containers without restartPolicy=Always",
            );
        }
        if !c.is_sidecar() {
            for (probe, field) in [
                (&c.liveness_probe, "livenessProbe"),
                (&c.readiness_probe, "readinessProbe"),
                (&c.startup_probe, "startupProbe"),
            ] {
                if probe.is_some() {
                    e.forbidden(
                        &format!("{path}.{field}"),
                        "may not be set for init containers without restartPolicy=Always",
                    );
                }
            }
        }
    }
    for (i, c) in spec.containers.iter().enumerate() {
        let path = format!("spec.containers[{i}]");
        validate_container(&mut e, c, &path, &mut names, spec.termination_grace_period_seconds);
        if c.restart_policy.is_some() {
            e.forbidden(&format!("{path}.restartPolicy"), "may not be set for non-init containers");
        }
    }
    for (i, c) in spec.init_containers.iter().enumerate() {
        super::volumes::validate_mounts(&mut e, pod, c, &format!("spec.initContainers[{i}]"));
    }
    for (i, c) in spec.containers.iter().enumerate() {
        super::volumes::validate_mounts(&mut e, pod, c, &format!("spec.containers[{i}]"));
    }
    validate_pod_totals(&mut e, pod);
    // Last, and only for an otherwise sane pod: the whole object as the apiserver stores it.
    if e.0.is_empty() {
        let size = serde_json::to_vec(pod).map(|v| v.len()).unwrap_or(0);
        if size > MAX_OBJECT_BYTES {
            e.too_long("", format!("the pod is {size} bytes as JSON with defaults applied; an object may have at most {MAX_OBJECT_BYTES} bytes (1.5 MiB, etcd's request limit)"));
        }
    }
    e.0
}

fn validate_container(e: &mut Errs, c: &Container, path: &str, names: &mut HashSet<String>, grace: Option<i64>) {
    if c.name.is_empty() {
        e.required(&format!("{path}.name"), "");
    } else if !is_dns1123_label(&c.name) {
        e.invalid(&format!("{path}.name"), quote(&c.name), DNS1123_LABEL_FMT);
    } else if !names.insert(c.name.clone()) {
        e.duplicate(&format!("{path}.name"), &c.name);
    }
    if c.image.trim().is_empty() {
        e.required(&format!("{path}.image"), "");
    }
    const PULL: &[&str] = &["Always", "IfNotPresent", "Never"];
    if !PULL.contains(&c.image_pull_policy.as_str()) {
        e.not_supported(&format!("{path}.imagePullPolicy"), &c.image_pull_policy, PULL);
    }
    for (i, v) in c.env.iter().enumerate() {
        let p = format!("{path}.env[{i}].name");
        if v.name.is_empty() {
            e.required(&p, "");
        } else if !is_env_var_name(&v.name) {
            e.invalid(&p, quote(&v.name), ENV_VAR_NAME_FMT);
        }
        if let Some(Err(problem)) = v.value_from.as_ref().map(super::downward::check) {
            e.invalid(&format!("{path}.env[{i}].valueFrom"), "{…}".into(), problem);
        }
    }
    validate_env_from(e, c, path);
    validate_expanded_sizes(e, c, path);
    super::security::validate_container_security(e, &c.security_context, path);
    let mut port_names = HashSet::new();
    for (i, p) in c.ports.iter().enumerate() {
        let base = format!("{path}.ports[{i}]");
        if !(1..=65535).contains(&p.container_port) {
            e.invalid(
                &format!("{base}.containerPort"),
                p.container_port.to_string(),
                "must be between 1 and 65535, inclusive",
            );
        }
        if let Some(h) = p.host_port {
            if !(0..=65535).contains(&h) {
                e.invalid(&format!("{base}.hostPort"), h.to_string(), "must be between 1 and 65535, inclusive");
            }
        }
        if !p.name.is_empty() {
            if !is_port_name(&p.name) {
                e.invalid(&format!("{base}.name"), quote(&p.name), "must be no more than 15 characters, contain only lowercase alphanumeric characters or '-', contain at least one letter, and not start, end or contain consecutive '-'");
            } else if !port_names.insert(p.name.clone()) {
                e.duplicate(&format!("{base}.name"), &p.name);
            }
        }
        const PROTOS: &[&str] = &["SCTP", "TCP", "UDP"];
        if !PROTOS.contains(&p.protocol.as_str()) {
            e.not_supported(&format!("{base}.protocol"), &p.protocol, PROTOS);
        }
    }
    validate_resources(e, &c.resources.requests, &format!("{path}.resources.requests"));
    validate_resources(e, &c.resources.limits, &format!("{path}.resources.limits"));
    for (name, req) in &c.resources.requests {
        if let Some(lim) = c.resources.limits.get(name) {
            if req > lim {
                e.invalid(
                    &format!("{path}.resources.requests"),
                    quote(&req.to_string()),
                    format!("must be less than or equal to {name} limit of {lim}"),
                );
            }
        } else if is_extended_resource(name) {
            e.invalid(
                &format!("{path}.resources.requests[{name}]"),
                quote(&req.to_string()),
                "must be equal to {name} limit (extended resources cannot be overcommitted)".replace("{name}", name),
            );
        }
    }
    for (name, lim) in &c.resources.limits {
        if is_extended_resource(name) {
            if let Some(req) = c.resources.requests.get(name) {
                if req != lim {
                    e.invalid(
                        &format!("{path}.resources.requests[{name}]"),
                        quote(&req.to_string()),
                        format!("must be equal to {name} limit of {lim}"),
                    );
                }
            }
        }
    }
    let ports: Vec<&str> = c.ports.iter().map(|p| p.name.as_str()).filter(|n| !n.is_empty()).collect();
    if TerminationMessagePolicy::parse(&c.termination_message_policy).is_none() {
        let p = format!("{path}.terminationMessagePolicy");
        if c.termination_message_policy.is_empty() {
            e.required(&p, "");
        } else {
            e.not_supported(&p, &c.termination_message_policy, &TerminationMessagePolicy::NAMES);
        }
    }
    if let Some(l) = &c.lifecycle {
        for (h, field) in [(&l.post_start, "postStart"), (&l.pre_stop, "preStop")] {
            if let Some(h) = h {
                validate_lifecycle_handler(e, h, &format!("{path}.lifecycle.{field}"), &ports, grace);
            }
        }
    }
    if let Some(p) = &c.liveness_probe {
        validate_probe(e, p, &format!("{path}.livenessProbe"), &ports);
        if p.success_threshold != 1 {
            e.invalid(&format!("{path}.livenessProbe.successThreshold"), p.success_threshold.to_string(), "must be 1");
        }
    }
    if let Some(p) = &c.readiness_probe {
        validate_probe(e, p, &format!("{path}.readinessProbe"), &ports);
        if p.termination_grace_period_seconds.is_some() {
            e.invalid(
                &format!("{path}.readinessProbe.terminationGracePeriodSeconds"),
                p.termination_grace_period_seconds.unwrap_or_default().to_string(),
                "must not be set for readinessProbes",
            );
        }
    }
    if let Some(p) = &c.startup_probe {
        validate_probe(e, p, &format!("{path}.startupProbe"), &ports);
        if p.success_threshold != 1 {
            e.invalid(&format!("{path}.startupProbe.successThreshold"), p.success_threshold.to_string(), "must be 1");
        }
    }
}

/// Extended resources are domain-qualified names outside the `kubernetes.io/` domains
/// (kubelet's `IsPrefixedNativeResource` matches `kubernetes.io/` anywhere in the name).
pub fn is_extended_resource(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

fn validate_resources(e: &mut Errs, list: &BTreeMap<String, Quantity>, path: &str) {
    for (name, q) in list {
        let p = format!("{path}.{name}");
        let standard =
            matches!(name.as_str(), "cpu" | "memory" | "ephemeral-storage" | "pods") || name.starts_with("hugepages-");
        if !(standard || is_extended_resource(name) && is_qualified_name(name)) {
            e.invalid(&p, quote(name), "must be a standard resource type (cpu, memory, ephemeral-storage, hugepages-<size>) or a fully qualified extended resource name (e.g. 'example.com/dev')");
            continue;
        }
        if q.is_negative() {
            e.invalid(&p, quote(&q.to_string()), "must be greater than or equal to 0");
        } else if !within_max(name, q) {
            e.invalid(&p, quote(&q.to_string()), allowed_max(name));
        } else if name == "memory" && path.ends_with(".limits") && !q.is_zero() && q.value() < MIN_MEMORY_LIMIT {
            e.invalid(
                &p,
                quote(&q.to_string()),
                format!("must be 0 (no limit) or at least {MIN_MEMORY_LIMIT} (6Mi, runc's minimum): a container cannot start in a smaller memory cgroup"),
            );
        }
        if is_extended_resource(name) && q.milli_value() % 1000 != 0 {
            e.invalid(&p, quote(&q.to_string()), "must be an integer");
        }
    }
}

fn validate_port(e: &mut Errs, port: &IntOrString, path: &str, named: &[&str]) {
    match port {
        IntOrString::Int(n) if !(1..=65535).contains(n) => {
            e.invalid(path, n.to_string(), "must be between 1 and 65535, inclusive");
        }
        IntOrString::Int(_) => {}
        IntOrString::String(s) if !is_port_name(s) => {
            e.invalid(path, quote(s), "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-), be no more than 15 characters and contain at least one letter");
        }
        IntOrString::String(s) if !named.contains(&s.as_str()) => {
            e.invalid(path, quote(s), "must be a container port name defined in this container's ports");
        }
        IntOrString::String(_) => {}
    }
}

/// The most nameservers a pod's DNS config may name (the API's `MaxDNSNameservers`: glibc
/// reads three).
pub const MAX_DNS_NAMESERVERS: usize = 3;
/// The most search domains (the API's `MaxDNSSearchPaths`).
pub const MAX_DNS_SEARCH_PATHS: usize = 32;
/// The longest search list, spaces between the domains included (`MaxDNSSearchListChars`).
pub const MAX_DNS_SEARCH_LIST_CHARS: usize = 2048;

/// apimachinery's `IsValidIP` message.
const IP_FMT: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";

/// A list as the apiserver prints it in an `Invalid value` (Go's `%#v` of a `[]string`).
fn go_strings(list: &[String]) -> String {
    let quoted: Vec<String> = list.iter().map(|s| quote(s)).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// The pod's names and DNS fields, as the apiserver's `ValidatePodSpec` checks them:
/// `hostname` and `subdomain` are DNS-1123 labels, each host alias an IP with host names,
/// `dnsPolicy` one of the four, and `dnsConfig` within glibc's limits (`None` requires it,
/// with a nameserver).
fn validate_pod_dns(e: &mut Errs, spec: &PodSpec) {
    for (value, path) in [(&spec.hostname, "spec.hostname"), (&spec.subdomain, "spec.subdomain")] {
        if !value.is_empty() && !is_dns1123_label(value) {
            e.invalid(path, quote(value), DNS1123_LABEL_FMT);
        }
    }
    for (i, alias) in spec.host_aliases.iter().enumerate() {
        let path = format!("spec.hostAliases[{i}]");
        if alias.ip.parse::<std::net::IpAddr>().is_err() {
            e.invalid(&format!("{path}.ip"), quote(&alias.ip), IP_FMT);
        }
        // The apiserver lets an alias without names through; its hosts file line would
        // name nothing.
        if alias.hostnames.is_empty() {
            e.required(&format!("{path}.hostnames"), "at least one hostname");
        }
        for (j, name) in alias.hostnames.iter().enumerate() {
            if !is_dns1123_subdomain(name) {
                e.invalid(&format!("{path}.hostnames[{j}]"), quote(name), DNS1123_SUBDOMAIN_FMT);
            }
        }
    }
    if !spec.dns_policy.is_empty() && DnsPolicy::parse(&spec.dns_policy).is_none() {
        e.not_supported("spec.dnsPolicy", &spec.dns_policy, &DnsPolicy::NAMES);
    }
    let path = "spec.dnsConfig";
    if spec.dns() == DnsPolicy::None {
        match &spec.dns_config {
            None => return e.required(path, "must provide `dnsConfig` when `dnsPolicy` is None"),
            Some(c) if c.nameservers.is_empty() => {
                return e.required(
                    &format!("{path}.nameservers"),
                    "must provide at least one DNS nameserver when `dnsPolicy` is None",
                )
            }
            Some(_) => {}
        }
    }
    let Some(c) = &spec.dns_config else { return };
    if c.nameservers.len() > MAX_DNS_NAMESERVERS {
        e.invalid(
            &format!("{path}.nameservers"),
            go_strings(&c.nameservers),
            format!("must not have more than {MAX_DNS_NAMESERVERS} nameservers"),
        );
    }
    for (i, ns) in c.nameservers.iter().enumerate() {
        if ns.parse::<std::net::IpAddr>().is_err() {
            e.invalid(&format!("{path}.nameservers[{i}]"), quote(ns), IP_FMT);
        }
    }
    if c.searches.len() > MAX_DNS_SEARCH_PATHS {
        e.invalid(
            &format!("{path}.searches"),
            go_strings(&c.searches),
            format!("must not have more than {MAX_DNS_SEARCH_PATHS} search paths"),
        );
    }
    // Counted with the spaces between the domains, as the resolv.conf line holds them.
    let chars = c.searches.iter().map(String::len).sum::<usize>() + c.searches.len().saturating_sub(1);
    if chars > MAX_DNS_SEARCH_LIST_CHARS {
        e.invalid(
            &format!("{path}.searches"),
            go_strings(&c.searches),
            format!(
                "must not have more than {MAX_DNS_SEARCH_LIST_CHARS} characters (including spaces) in the search list"
            ),
        );
    }
    for (i, search) in c.searches.iter().enumerate() {
        // A trailing dot (an absolute name) is fine.
        if !is_dns1123_subdomain(search.strip_suffix('.').unwrap_or(search)) {
            e.invalid(&format!("{path}.searches[{i}]"), quote(search), DNS1123_SUBDOMAIN_FMT);
        }
    }
    // resolv.conf separates options by white space: one inside a name or value would add
    // options (or, with a line break, lines) the pod did not name.
    let spaced = |s: &str| s.chars().any(|ch| ch.is_whitespace() || ch.is_control());
    for (i, option) in c.options.iter().enumerate() {
        if option.name.is_empty() {
            e.required(&format!("{path}.options[{i}]"), "must not be empty");
        } else if spaced(&option.name) || option.name.contains(':') {
            e.invalid(
                &format!("{path}.options[{i}].name"),
                quote(&option.name),
                "must not contain white space, control characters or ':'",
            );
        }
        if let Some(v) = option.value.as_deref().filter(|v| spaced(v)) {
            e.invalid(
                &format!("{path}.options[{i}].value"),
                quote(v),
                "must not contain white space or control characters",
            );
        }
    }
}

/// The largest `activeDeadlineSeconds` (the API's `math.MaxInt32`).
const MAX_ACTIVE_DEADLINE_SECONDS: i64 = i32::MAX as i64;

/// A `postStart` or `preStop` handler: exactly one of exec, httpGet, sleep (a sleep no
/// longer than the pod's grace period, as the apiserver checks it).
fn validate_lifecycle_handler(
    e: &mut Errs,
    h: &LifecycleHandler,
    path: &str,
    named_ports: &[&str],
    grace: Option<i64>,
) {
    let handlers = [h.exec.is_some(), h.http_get.is_some(), h.sleep.is_some()];
    match handlers.iter().filter(|x| **x).count() {
        0 => e.required(path, "must specify a handler type"),
        1 => {}
        _ => e.forbidden(path, "may not specify more than 1 handler type"),
    }
    if let Some(x) = &h.exec {
        if x.command.is_empty() {
            e.required(&format!("{path}.exec.command"), "");
        }
    }
    if let Some(g) = &h.http_get {
        validate_http_get(e, g, &format!("{path}.httpGet"), named_ports);
    }
    if let (Some(s), Some(grace)) = (&h.sleep, grace) {
        if s.seconds < 0 || s.seconds > grace {
            e.invalid(
                &format!("{path}.sleep.seconds"),
                s.seconds.to_string(),
                format!("must be non-negative and less than terminationGracePeriodSeconds ({grace})"),
            );
        }
    }
}

fn validate_http_get(e: &mut Errs, h: &HttpGetAction, base: &str, named_ports: &[&str]) {
    if h.path.is_empty() {
        e.required(&format!("{base}.path"), "");
    }
    validate_port(e, &h.port, &format!("{base}.port"), named_ports);
    if h.scheme != "HTTP" && h.scheme != "HTTPS" {
        e.not_supported(&format!("{base}.scheme"), &h.scheme, &["HTTP", "HTTPS"]);
    }
    for (i, hd) in h.http_headers.iter().enumerate() {
        let ok = !hd.name.is_empty()
            && hd.name.bytes().all(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c));
        if !ok {
            e.invalid(&format!("{base}.httpHeaders[{i}].name"), quote(&hd.name), "a valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name', regex used for validation is '[-A-Za-z0-9]+')");
        }
    }
}

fn validate_probe(e: &mut Errs, p: &Probe, path: &str, named_ports: &[&str]) {
    for (v, field) in [
        (p.initial_delay_seconds, "initialDelaySeconds"),
        (p.timeout_seconds, "timeoutSeconds"),
        (p.period_seconds, "periodSeconds"),
        (p.success_threshold, "successThreshold"),
        (p.failure_threshold, "failureThreshold"),
    ] {
        if v < 0 {
            e.invalid(&format!("{path}.{field}"), v.to_string(), "must be greater than or equal to 0");
        }
    }
    if let Some(g) = p.termination_grace_period_seconds {
        if g <= 0 {
            e.invalid(&format!("{path}.terminationGracePeriodSeconds"), g.to_string(), "must be greater than 0");
        } else if g > MAX_GRACE_PERIOD_SECONDS {
            e.invalid(&format!("{path}.terminationGracePeriodSeconds"), g.to_string(), GRACE_TOO_LONG);
        }
    }
    let handlers = [p.exec.is_some(), p.http_get.is_some(), p.tcp_socket.is_some(), p.grpc.is_some()];
    match handlers.iter().filter(|h| **h).count() {
        0 => e.required(path, "must specify a handler type"),
        1 => {}
        _ => e.forbidden(path, "may not specify more than 1 handler type"),
    }
    if let Some(x) = &p.exec {
        if x.command.is_empty() {
            e.required(&format!("{path}.exec.command"), "");
        }
    }
    if let Some(h) = &p.http_get {
        validate_http_get(e, h, &format!("{path}.httpGet"), named_ports);
    }
    if let Some(t) = &p.tcp_socket {
        validate_port(e, &t.port, &format!("{path}.tcpSocket.port"), named_ports);
    }
    if let Some(g) = &p.grpc {
        if !(1..=65535).contains(&g.port) {
            e.invalid(&format!("{path}.grpc.port"), g.port.to_string(), "must be between 1 and 65535, inclusive");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_shaped_like_the_apiservers() {
        let req = FieldError {
            path: "spec.containers[0].name".into(),
            kind: FieldErrorKind::Required,
            detail: String::new(),
        };
        assert_eq!(req.to_string(), "spec.containers[0].name: Required value");
        let ns = FieldError {
            path: "spec.restartPolicy".into(),
            kind: FieldErrorKind::NotSupported("\"Sometimes\"".into(), vec!["Always", "OnFailure", "Never"]),
            detail: String::new(),
        };
        assert_eq!(ns.to_string(), "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"");
    }

    #[test]
    fn name_rules_match_kubernetes() {
        assert!(is_dns1123_label("web-1"));
        assert!(!is_dns1123_label("Web"));
        assert!(!is_dns1123_label("-web"));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(is_dns1123_subdomain("a.b-c.d"));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(is_port_name("http"));
        assert!(!is_port_name("8080"));
        assert!(!is_port_name("my--port"));
        assert!(!is_port_name("a-very-long-port-name"));
        assert!(is_env_var_name("MY_VAR.1"));
        assert!(!is_env_var_name("1VAR"));
        assert!(is_qualified_name("app.kubernetes.io/name"));
        assert!(!is_qualified_name("/name"));
        assert!(is_extended_resource("example.com/dev"));
        assert!(!is_extended_resource("kubernetes.io/foo"));
    }

    fn errors_of(spec_yaml: &str) -> Vec<String> {
        let text = format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n{spec_yaml}");
        let mut pod: Pod = serde_norway::from_str(&text).unwrap();
        crate::api::defaults::set_pod_defaults(&mut pod);
        validate_pod(&pod).iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn lifecycle_hooks_need_exactly_one_bounded_handler_and_only_on_containers_that_run_on() {
        let ok = "  terminationGracePeriodSeconds: 10\n  containers:\n  - name: a\n    image: x\n    lifecycle:\n      postStart:\n        exec:\n          command: [true]\n      preStop:\n        sleep:\n          seconds: 10\n";
        assert_eq!(errors_of(ok), Vec::<String>::new());
        let bad = "  terminationGracePeriodSeconds: 10\n  initContainers:\n  - name: i\n    image: x\n    lifecycle:\n      preStop:\n        sleep:\n          seconds: 1\n  containers:\n  - name: a\n    image: x\n    terminationMessagePolicy: Sometimes\n    lifecycle:\n      postStart: {}\n      preStop:\n        sleep:\n          seconds: 11\n        httpGet:\n          port: web\n";
        assert_eq!(
            errors_of(bad),
            [
                "spec.initContainers[0].lifecycle: Forbidden: may not be set for init containers without restartPolicy=Always",
                "spec.containers[0].terminationMessagePolicy: Unsupported value: \"Sometimes\": supported values: \"File\", \"FallbackToLogsOnError\"",
                "spec.containers[0].lifecycle.postStart: Required value: must specify a handler type",
                "spec.containers[0].lifecycle.preStop: Forbidden: may not specify more than 1 handler type",
                "spec.containers[0].lifecycle.preStop.httpGet.port: Invalid value: \"web\": must be a container port name defined in this container's ports",
                "spec.containers[0].lifecycle.preStop.sleep.seconds: Invalid value: 11: must be non-negative and less than terminationGracePeriodSeconds (10)",
            ]
        );
    }

    #[test]
    fn active_deadline_seconds_is_at_least_one() {
        let spec = |d: i64| format!("  activeDeadlineSeconds: {d}\n  containers:\n  - name: a\n    image: x\n");
        assert_eq!(errors_of(&spec(1)), Vec::<String>::new());
        assert_eq!(
            errors_of(&spec(0)),
            ["spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive"]
        );
    }

    #[test]
    fn names_and_dns_fields_are_checked_as_the_apiserver_checks_them() {
        let ok = "  hostname: db-0\n  subdomain: sub\n  hostAliases: [{ip: 10.1.2.3, hostnames: [db, db.local]}, {ip: 'fd00::1', hostnames: [v6]}]\n  dnsPolicy: None\n  dnsConfig:\n    nameservers: [10.0.0.53]\n    searches: [my.example, abs.example.]\n    options: [{name: ndots, value: '2'}, {name: rotate}]\n  containers:\n  - name: a\n    image: x\n";
        assert_eq!(errors_of(ok), Vec::<String>::new());
        let bad = "  hostname: Db_0\n  subdomain: a.b\n  hostAliases: [{ip: 10.1.2, hostnames: [ok]}, {ip: 10.1.2.4}, {ip: 10.1.2.5, hostnames: ['-x']}]\n  dnsPolicy: ClusterLast\n  dnsConfig:\n    nameservers: [1.1.1.1, 1.1.1.2, 1.1.1.3, dns.example]\n    searches: [UPPER.example]\n    options: [{name: ''}, {name: 'a b', value: \"1\\n2\"}]\n  containers:\n  - name: a\n    image: x\n";
        assert_eq!(
            errors_of(bad),
            [
                format!("spec.hostname: Invalid value: \"Db_0\": {DNS1123_LABEL_FMT}"),
                format!("spec.subdomain: Invalid value: \"a.b\": {DNS1123_LABEL_FMT}"),
                format!("spec.hostAliases[0].ip: Invalid value: \"10.1.2\": {IP_FMT}"),
                "spec.hostAliases[1].hostnames: Required value: at least one hostname".to_string(),
                format!("spec.hostAliases[2].hostnames[0]: Invalid value: \"-x\": {DNS1123_SUBDOMAIN_FMT}"),
                "spec.dnsPolicy: Unsupported value: \"ClusterLast\": supported values: \"ClusterFirstWithHostNet\", \"ClusterFirst\", \"Default\", \"None\"".to_string(),
                "spec.dnsConfig.nameservers: Invalid value: []string{\"1.1.1.1\", \"1.1.1.2\", \"1.1.1.3\", \"dns.example\"}: must not have more than 3 nameservers".to_string(),
                format!("spec.dnsConfig.nameservers[3]: Invalid value: \"dns.example\": {IP_FMT}"),
                format!("spec.dnsConfig.searches[0]: Invalid value: \"UPPER.example\": {DNS1123_SUBDOMAIN_FMT}"),
                "spec.dnsConfig.options[0]: Required value: must not be empty".to_string(),
                "spec.dnsConfig.options[1].name: Invalid value: \"a b\": must not contain white space, control characters or ':'".to_string(),
                "spec.dnsConfig.options[1].value: Invalid value: \"1\\n2\": must not contain white space or control characters".to_string(),
            ]
        );
    }

    #[test]
    fn dns_policy_none_needs_a_dns_config_with_a_nameserver_and_searches_are_bounded() {
        let spec = |dns: &str| format!("  dnsPolicy: None\n{dns}  containers:\n  - name: a\n    image: x\n");
        assert_eq!(
            errors_of(&spec("")),
            ["spec.dnsConfig: Required value: must provide `dnsConfig` when `dnsPolicy` is None"]
        );
        assert_eq!(
            errors_of(&spec("  dnsConfig: {searches: [a.example]}\n")),
            ["spec.dnsConfig.nameservers: Required value: must provide at least one DNS nameserver when `dnsPolicy` is None"]
        );
        let many: Vec<String> = (0..33).map(|i| format!("d{i}.example")).collect();
        let errs = errors_of(&format!(
            "  dnsConfig:\n    searches: [{}]\n  containers:\n  - name: a\n    image: x\n",
            many.join(", ")
        ));
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].starts_with("spec.dnsConfig.searches: Invalid value: []string{\"d0.example\", ")
                && errs[0].ends_with("must not have more than 32 search paths"),
            "{errs:?}"
        );
        // 11 domains of 191 characters: 2111 with the spaces.
        let long: Vec<String> =
            (0..11).map(|i| format!("{i:x}{}", "x".repeat(62))).map(|l| format!("{l}.{l}.{l}")).collect();
        let errs = errors_of(&format!(
            "  dnsConfig:\n    searches: [{}]\n  containers:\n  - name: a\n    image: x\n",
            long.join(", ")
        ));
        assert!(
            errs.len() == 1
                && errs[0].ends_with("must not have more than 2048 characters (including spaces) in the search list"),
            "{errs:?}"
        );
    }
}
