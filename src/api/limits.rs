//! The bounds validation applies beyond the apiserver's field rules: sizes the apiserver
//! or etcd would refuse, and values the kernel or runc cannot take, so that a manifest that
//! could never run is an error before anything starts (not a pod Pending forever).

use super::expand::expanded_lengths;
use super::field::Errs;
use super::{Container, Pod, Quantity};
use std::collections::BTreeMap;

/// The apiserver's limit for all annotations of one object together, keys and values
/// (`TotalAnnotationSizeLimitB`).
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;
pub use crate::base::procs::MAX_ARG_STRLEN;
/// The largest pod, as JSON with defaults applied: etcd's default request limit
/// (1.5 MiB), the most an apiserver could store. Twice it bounds what one document may
/// expand to through YAML aliases.
pub const MAX_OBJECT_BYTES: usize = 3 << 19;
/// Most bytes a container's env, command and args (or an exec probe's command with the
/// env) may expand to: what Linux leaves for arguments and environment with the usual
/// 8 MiB stack limit (a quarter of it). More could not be started anyway.
pub const MAX_EXPANDED_BYTES: usize = 2 << 20;
/// The largest CFS quota the kernel accepts, in µs (`max_cfs_runtime`: 2^44 - 1).
pub const MAX_CFS_QUOTA_US: i64 = (1 << 44) - 1;
/// Pods one node runs at most unless `max_pods` says otherwise: kubelet's `maxPods` default.
pub const DEFAULT_MAX_PODS: usize = 110;
/// Most pods one node may run: the upper bound of the `max_pods` setting (kubelet's
/// default is 110), and so also of the pods one manifest file may hold.
pub const MAX_PODS_PER_NODE: usize = 5000;
/// The CFS period in µs every quota is written with (kubelet's `QuotaPeriod`, 100 ms).
pub const QUOTA_PERIOD: u64 = 100_000;
/// The largest CPU amount, in millicores, for one container and for a pod's containers
/// together: the cgroup code writes `millicores × 100` µs (period 100 ms) as the quota.
pub const MAX_CPU_MILLIS: i64 = MAX_CFS_QUOTA_US / (QUOTA_PERIOD as i64 / 1000);
/// The longest grace period (one year). Kubernetes sets none, but deadlines are computed
/// as now + grace, and a value near `i64::MAX` seconds overflows every clock.
pub const MAX_GRACE_PERIOD_SECONDS: i64 = 365 * 86_400;
/// What the grace period bound says in errors.
pub(super) const GRACE_TOO_LONG: &str = "must be at most 31536000 (one year)";
/// Most containers (init and app together) in one pod. Kubernetes has no such limit, but
/// each container costs a shim process, a cgroup and log files on a small machine; 256 is
/// far beyond any real pod and keeps one manifest from exhausting the node.
pub const MAX_CONTAINERS_PER_POD: usize = 256;
/// The smallest memory limit a container may have: runc's minimum (6 MiB); below it a
/// process cannot even be started in its cgroup.
pub const MIN_MEMORY_LIMIT: i64 = 6 << 20;
/// The largest memory amount for one pod (1 PiB): far beyond any machine, and small
/// enough that the node's sums over thousands of pods never overflow.
pub const MAX_MEMORY_BYTES: i64 = 1 << 50;

/// The pod's containers together: what the cgroup code sums into pod-level values.
pub(super) fn validate_pod_totals(e: &mut Errs, pod: &Pod) {
    let all: Vec<&Container> = pod.spec.init_containers.iter().chain(&pod.spec.containers).collect();
    for (field, list) in [
        ("requests", (|c: &Container| &c.resources.requests) as fn(&Container) -> &BTreeMap<String, Quantity>),
        ("limits", |c: &Container| &c.resources.limits),
    ] {
        for (name, max) in [("cpu", MAX_CPU_MILLIS), ("memory", MAX_MEMORY_BYTES)] {
            let total: i128 = all
                .iter()
                .filter_map(|c| list(c).get(name))
                .map(|q| i128::from(if name == "cpu" { q.milli_value() } else { q.value() }))
                .sum();
            // Each container is checked on its own first; only report the sum when each is fine.
            let each_ok = all.iter().filter_map(|c| list(c).get(name)).all(|q| within_max(name, q));
            if each_ok && total > i128::from(max) {
                e.invalid(
                    &format!("spec.containers[*].resources.{field}.{name}"),
                    total.to_string(),
                    format!("the pod's containers together {}", allowed_max(name)),
                );
            }
        }
    }
}

pub(super) fn within_max(name: &str, q: &Quantity) -> bool {
    match name {
        "cpu" => q.milli_value() <= MAX_CPU_MILLIS,
        "memory" => q.value() <= MAX_MEMORY_BYTES,
        _ => true,
    }
}

pub(super) fn allowed_max(name: &str) -> String {
    match name {
        "cpu" => format!("must be at most {MAX_CPU_MILLIS}m: more overflows the kernel's CFS quota (at most 2^44-1 µs per 100 ms period)"),
        _ => format!("must be at most {MAX_MEMORY_BYTES} (1Pi)"),
    }
}

/// `$(VAR)` references multiply sizes (Kubernetes expands them, once, from variables
/// defined earlier): bound the result before anything builds it. Each string must fit
/// `execve`'s per-string limit, and all of them its total.
pub(super) fn validate_expanded_sizes(e: &mut Errs, c: &Container, path: &str) {
    let argv: Vec<&String> = c.command.iter().chain(&c.args).collect();
    let (env_lens, argv_lens) = expanded_lengths(&c.env, &argv);
    let one = |n: usize| {
        format!("expands to {n} bytes; one argument or NAME=value environment entry may have at most {MAX_ARG_STRLEN} bytes (Linux's MAX_ARG_STRLEN)")
    };
    let mut env_total = 0usize;
    for (i, (v, n)) in c.env.iter().zip(&env_lens).enumerate() {
        // NAME=value and the terminating NUL.
        let entry = v.name.len().saturating_add(2).saturating_add(*n);
        env_total = env_total.saturating_add(entry);
        if entry > MAX_ARG_STRLEN {
            e.too_long(&format!("{path}.env[{i}].value"), one(entry));
        }
    }
    let mut total = env_total;
    for (i, n) in argv_lens.iter().enumerate() {
        let (field, j) = if i < c.command.len() { ("command", i) } else { ("args", i - c.command.len()) };
        total = total.saturating_add(n.saturating_add(1));
        if n.saturating_add(1) > MAX_ARG_STRLEN {
            e.too_long(&format!("{path}.{field}[{j}]"), one(n.saturating_add(1)));
        }
    }
    let total_msg = |n: usize, what: &str| {
        format!("{what} expand to {n} bytes; at most {MAX_EXPANDED_BYTES} bytes are allowed (what Linux leaves for a process's arguments and environment)")
    };
    if total > MAX_EXPANDED_BYTES {
        e.too_long(path, total_msg(total, "env, command and args"));
    }
    for (probe, field) in [
        (&c.liveness_probe, "livenessProbe"),
        (&c.readiness_probe, "readinessProbe"),
        (&c.startup_probe, "startupProbe"),
    ] {
        let Some(cmd) = probe.as_ref().and_then(|p| p.exec.as_ref()).map(|x| &x.command) else { continue };
        let argv: Vec<&String> = cmd.iter().collect();
        let (_, lens) = expanded_lengths(&c.env, &argv);
        let mut total = env_total;
        for (i, n) in lens.iter().enumerate() {
            total = total.saturating_add(n.saturating_add(1));
            if n.saturating_add(1) > MAX_ARG_STRLEN {
                e.too_long(&format!("{path}.{field}.exec.command[{i}]"), one(n.saturating_add(1)));
            }
        }
        if total > MAX_EXPANDED_BYTES {
            e.too_long(&format!("{path}.{field}.exec.command"), total_msg(total, "env and the probe's command"));
        }
    }
}

/// The largest uid or gid the API accepts (`runAsUser`, `runAsGroup`, `fsGroup`,
/// `supplementalGroups`).
pub const MAX_ID: i64 = i32::MAX as i64;
/// Most supplemental groups a pod may list (the kernel allows 65536; no pod needs that many,
/// and each is in every container's config).
pub const MAX_SUPPLEMENTAL_GROUPS: usize = 256;
/// Most sysctls a pod may set.
pub const MAX_SYSCTLS: usize = 128;
/// Most names in one capability list (`add` or `drop`); there are 41 capabilities.
pub const MAX_CAPABILITIES: usize = 64;
/// Longest `localhostProfile` name and sysctl value, in bytes (a path, at most `PATH_MAX`).
pub const MAX_PROFILE_NAME_BYTES: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::validation::validate_pod;

    fn pod(yaml_spec: &str) -> Pod {
        let text = format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n{yaml_spec}");
        let mut pod: Pod = serde_norway::from_str(&text).unwrap();
        crate::api::defaults::set_pod_defaults(&mut pod);
        pod
    }

    fn errors(pod: &Pod) -> Vec<String> {
        validate_pod(pod).iter().map(|e| e.to_string()).collect()
    }

    const ONE: &str = "  containers:\n  - name: a\n    image: b\n";

    #[test]
    fn annotations_together_are_limited_to_256_kib() {
        let mut p = pod(ONE);
        p.metadata.annotations.insert("a".into(), "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT - 1));
        assert_eq!(errors(&p), Vec::<String>::new());
        p.metadata.annotations.insert("b".into(), String::new());
        assert_eq!(
            errors(&p),
            vec![
                "metadata.annotations: Too long: 262145 bytes; all annotations together may have at most 262144 bytes"
            ]
        );
    }

    #[test]
    fn a_pod_bigger_than_etcd_stores_is_rejected() {
        // Every container is within its own limits; together they are over 1.5 MiB.
        let env: String = (0..10).map(|i| format!("    - name: V{i}\n      value: {}\n", "y".repeat(20_000))).collect();
        let spec: String = (0..10).map(|i| format!("  - name: c{i}\n    image: busybox\n    env:\n{env}")).collect();
        let e = errors(&pod(&format!("  containers:\n{spec}")));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("Too long: the pod is 20"), "{}", e[0]);
        assert!(e[0].ends_with("an object may have at most 1572864 bytes (1.5 MiB, etcd's request limit)"), "{}", e[0]);
    }

    #[test]
    fn containers_per_pod_are_bounded() {
        let spec: String = (0..10_000).map(|i| format!("  - name: c{i}\n    image: busybox\n")).collect();
        let e = errors(&pod(&format!("  containers:\n{spec}")));
        assert_eq!(
            e,
            vec!["spec.containers: Too many: 10000: must have at most 256 items (init and app containers together)"]
        );
        let spec: String = (0..256).map(|i| format!("  - name: c{i}\n    image: busybox\n")).collect();
        assert_eq!(errors(&pod(&format!("  containers:\n{spec}"))), Vec::<String>::new());
    }

    #[test]
    fn expansion_results_are_bounded_per_string_and_in_total() {
        let spec = format!(
            "  containers:\n  - name: a\n    image: b\n    env:\n    - name: A\n      value: {}\n    - name: B\n      value: {}\n    - name: C\n      value: {}\n    args: ['$(C)']\n",
            "x".repeat(1000),
            "$(A)".repeat(1000),
            "$(B)".repeat(1000)
        );
        let e = errors(&pod(&spec));
        assert_eq!(
            e,
            vec![
                "spec.containers[0].env[1].value: Too long: expands to 1000003 bytes; one argument or NAME=value environment entry may have at most 131072 bytes (Linux's MAX_ARG_STRLEN)",
                "spec.containers[0].env[2].value: Too long: expands to 1000000003 bytes; one argument or NAME=value environment entry may have at most 131072 bytes (Linux's MAX_ARG_STRLEN)",
                "spec.containers[0].args[0]: Too long: expands to 1000000001 bytes; one argument or NAME=value environment entry may have at most 131072 bytes (Linux's MAX_ARG_STRLEN)",
                "spec.containers[0]: Too long: env, command and args expand to 2001001010 bytes; at most 2097152 bytes are allowed (what Linux leaves for a process's arguments and environment)",
            ]
        );
        // Many strings each below the per-string limit still add up.
        let env: String =
            (0..20).map(|i| format!("    - name: V{i}\n      value: {}\n", "y".repeat(120_000))).collect();
        let e = errors(&pod(&format!("{ONE}    env:\n{env}")));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("spec.containers[0]: Too long: env, command and args expand to 2400"), "{}", e[0]);
    }

    #[test]
    fn quantities_the_cgroup_code_cannot_write_are_rejected() {
        let limits = |l: &str| errors(&pod(&format!("{ONE}    resources:\n      limits: {{{l}}}\n")));
        assert_eq!(
            limits("cpu: 1e30"),
            vec![
                "spec.containers[0].resources.requests.cpu: Invalid value: \"1e30\": must be at most 175921860444m: more overflows the kernel's CFS quota (at most 2^44-1 µs per 100 ms period)",
                "spec.containers[0].resources.limits.cpu: Invalid value: \"1e30\": must be at most 175921860444m: more overflows the kernel's CFS quota (at most 2^44-1 µs per 100 ms period)",
            ]
        );
        assert_eq!(limits("cpu: '175921860444m'"), Vec::<String>::new());
        assert_eq!(
            limits("memory: '1'"),
            vec!["spec.containers[0].resources.limits.memory: Invalid value: \"1\": must be 0 (no limit) or at least 6291456 (6Mi, runc's minimum): a container cannot start in a smaller memory cgroup"]
        );
        assert_eq!(limits("memory: 6Mi"), Vec::<String>::new());
        assert_eq!(
            limits("memory: 2Pi"),
            vec![
                "spec.containers[0].resources.requests.memory: Invalid value: \"2Pi\": must be at most 1125899906842624 (1Pi)",
                "spec.containers[0].resources.limits.memory: Invalid value: \"2Pi\": must be at most 1125899906842624 (1Pi)",
            ]
        );
        // Each container fits, their sum (the pod cgroup's quota) does not.
        let two = "  containers:\n  - name: a\n    image: b\n    resources:\n      limits: {cpu: 100M}\n  - name: c\n    image: b\n    resources:\n      limits: {cpu: 100M}\n";
        let e = errors(&pod(two));
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[1].starts_with("spec.containers[*].resources.limits.cpu: Invalid value: 200000000000: the pod's containers together must be at most 175921860444m"), "{}", e[1]);
    }
}
