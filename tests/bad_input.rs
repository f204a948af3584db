//! Malformed manifests and configs: each is rejected with the file, the exact field path
//! and what is allowed, and never takes anything else down.

use crate::common;

use ferrolet::api::manifest::decode_pods;
use ferrolet::config::Config;

const HEAD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n";

fn container(extra: &str) -> String {
    format!("{HEAD}spec:\n  containers:\n  - name: app\n    image: busybox\n    command: [sleep, '1']\n{extra}")
}

fn pod_error(text: &str) -> String {
    let mut r = decode_pods("etc/manifests/web.yaml", text);
    assert_eq!(r.len(), 1, "one document");
    let errors = r.remove(0).expect_err("must be rejected");
    errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n")
}

#[test]
fn malformed_manifests_name_the_file_and_field_path() {
    let cases: Vec<(String, &str)> = vec![
        (container("    resources:\n      limits:\n        cpu: 1.5.0\n"), "etc/manifests/web.yaml: spec.containers[0].resources.limits.cpu: invalid quantity \"1.5.0\""),
        (container("    resources:\n      requests:\n        memory: 12XB\n"), "etc/manifests/web.yaml: spec.containers[0].resources.requests.memory: invalid quantity \"12XB\""),
        (container("    resources:\n      limits:\n        memory: -1Gi\n"), "etc/manifests/web.yaml: spec.containers[0].resources.limits.memory: Invalid value: \"-1Gi\": must be greater than or equal to 0"),
        (container("    resources:\n      requests:\n        cpu: '2'\n      limits:\n        cpu: '1'\n"), "etc/manifests/web.yaml: spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1"),
        (format!("{HEAD}spec:\n  containers: []\n"), "etc/manifests/web.yaml: spec.containers: Required value"),
        (format!("{HEAD}spec:\n  containers:\n  - image: busybox\n"), "etc/manifests/web.yaml: spec.containers[0].name: Required value"),
        (format!("{HEAD}spec:\n  containers:\n  - name: App_1\n    image: busybox\n"), "etc/manifests/web.yaml: spec.containers[0].name: Invalid value: \"App_1\": a lowercase RFC 1123 label"),
        (format!("{HEAD}spec:\n  containers:\n  - name: a\n    image: busybox\n  - name: a\n    image: busybox\n"), "etc/manifests/web.yaml: spec.containers[1].name: Duplicate value: \"a\""),
        (format!("{HEAD}spec:\n  containers:\n  - name: a\n"), "etc/manifests/web.yaml: spec.containers[0].image: Required value"),
        (format!("{HEAD}spec:\n  restartPolicy: Sometimes\n  containers:\n  - name: a\n    image: b\n"), "etc/manifests/web.yaml: spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""),
        (format!("{HEAD}spec:\n  terminationGracePeriodSeconds: -5\n  containers:\n  - name: a\n    image: b\n"), "etc/manifests/web.yaml: spec.terminationGracePeriodSeconds: Invalid value: -5: must be greater than or equal to 0"),
        (container("    livenessProbe:\n      httpGet:\n        port: http\n"), "etc/manifests/web.yaml: spec.containers[0].livenessProbe.httpGet.port: Invalid value: \"http\": must be a container port name defined in this container's ports"),
        (container("    livenessProbe:\n      tcpSocket:\n        port: 70000\n"), "etc/manifests/web.yaml: spec.containers[0].livenessProbe.tcpSocket.port: Invalid value: 70000: must be between 1 and 65535, inclusive"),
        (container("    readinessProbe:\n      exec:\n        command: [/bin/true]\n      tcpSocket:\n        port: 80\n"), "etc/manifests/web.yaml: spec.containers[0].readinessProbe: Forbidden: may not specify more than 1 handler type"),
        (container("    startupProbe:\n      exec:\n        command: [/bin/true]\n      successThreshold: 2\n"), "etc/manifests/web.yaml: spec.containers[0].startupProbe.successThreshold: Invalid value: 2: must be 1"),
        (container("    livenessProbe:\n      exec:\n        command: [/bin/true]\n      periodSeconds: ten\n"), "etc/manifests/web.yaml: spec.containers[0].livenessProbe.periodSeconds: invalid type: string \"ten\", expected i32"),
        (container("    ports:\n    - containerPort: 0\n"), "etc/manifests/web.yaml: spec.containers[0].ports[0].containerPort: Invalid value: 0: must be between 1 and 65535, inclusive"),
        (container("    env:\n    - name: 1BAD\n      value: x\n"), "etc/manifests/web.yaml: spec.containers[0].env[0].name: Invalid value: \"1BAD\""),
        (format!("{HEAD}spec:\n  initContainers:\n  - name: i\n    image: b\n    livenessProbe:\n      exec:\n        command: [/bin/true]\n  containers:\n  - name: a\n    image: b\n"), "etc/manifests/web.yaml: spec.initContainers[0].livenessProbe: Forbidden: may not be set for init containers without restartPolicy=Always"),
        (format!("{HEAD}spec:\n  initContainers:\n  - name: i\n    image: b\n    restartPolicy: Never\n  containers:\n  - name: a\n    image: b\n"), "etc/manifests/web.yaml: spec.initContainers[0].restartPolicy: Unsupported value: \"Never\": supported values: \"Always\""),
        (format!("{HEAD}spec:\n  containers: nope\n"), "etc/manifests/web.yaml: spec.containers: invalid type: string \"nope\", expected a sequence"),
        ("apiVersion: v1\nkind: Deployment\nmetadata:\n  name: x\n".to_string(), "etc/manifests/web.yaml: kind: Unsupported value: \"Deployment\""),
        ("apiVersion: v1\nmetadata:\n  name: x\n".to_string(), "etc/manifests/web.yaml: kind: Required value"),
        ("kind: Pod\nmetadata: {name: x\n".to_string(), "etc/manifests/web.yaml: invalid YAML:"),
        ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: Web\nspec:\n  containers:\n  - name: a\n    image: b\n".to_string(), "etc/manifests/web.yaml: metadata.name: Invalid value: \"Web\": a lowercase RFC 1123 subdomain"),
        // Issue 10: values that used to be accepted (and turned into 0, or crashed later).
        (format!("{HEAD}spec:\n  terminationGracePeriodSeconds: 9223372036854775807\n  containers:\n  - name: a\n    image: b\n"), "etc/manifests/web.yaml: spec.terminationGracePeriodSeconds: Invalid value: 9223372036854775807: must be at most 31536000 (one year)"),
        (container("    livenessProbe:\n      exec:\n        command: [/bin/true]\n      terminationGracePeriodSeconds: 99999999999\n"), "etc/manifests/web.yaml: spec.containers[0].livenessProbe.terminationGracePeriodSeconds: Invalid value: 99999999999: must be at most 31536000 (one year)"),
        (format!("{HEAD}spec:\n  containers:\n{}", (0..300).map(|i| format!("  - name: c{i}\n    image: b\n")).collect::<String>()), "etc/manifests/web.yaml: spec.containers: Too many: 300: must have at most 256 items (init and app containers together)"),
        (container(&format!("    env:\n{}", (0..21).map(|i| format!("    - name: V{i}\n      value: {}\n", "y".repeat(100_000))).collect::<String>())), "etc/manifests/web.yaml: spec.containers[0]: Too long: env, command and args expand to 2100"),
        (format!("{HEAD}spec:\n  containers:\n{}", (0..20).map(|c| format!("  - name: c{c}\n    image: b\n    env:\n{}", (0..10).map(|i| format!("    - name: V{i}\n      value: {}\n", "y".repeat(10_000))).collect::<String>())).collect::<String>()), "etc/manifests/web.yaml: Too long: the pod is 20"),
        (container("    resources:\n      limits:\n        cpu: .nan\n"), "etc/manifests/web.yaml: spec.containers[0].resources.limits.cpu: Invalid value: NaN: must be a finite number (.nan and .inf are not allowed)"),
        (container("    resources:\n      requests:\n        memory: .inf\n"), "etc/manifests/web.yaml: spec.containers[0].resources.requests.memory: Invalid value: inf: must be a finite number"),
        (container("    image: other\n"), "etc/manifests/web.yaml: spec.containers[0].image: Duplicate value: \"image\": a key may appear only once in a mapping"),
        (container("    resources:\n      limits:\n        cpu: 1e30\n"), "etc/manifests/web.yaml: spec.containers[0].resources.limits.cpu: Invalid value: \"1e30\": must be at most 175921860444m"),
        (container("    resources:\n      limits:\n        memory: '1'\n"), "etc/manifests/web.yaml: spec.containers[0].resources.limits.memory: Invalid value: \"1\": must be 0 (no limit) or at least 6291456 (6Mi, runc's minimum)"),
        (format!("{HEAD}  annotations:\n    big: {}\nspec:\n  containers:\n  - name: a\n    image: b\n", "x".repeat(300 << 10)), "etc/manifests/web.yaml: metadata.annotations: Too long: 307203 bytes; all annotations together may have at most 262144 bytes"),
        (container(&format!("    env:\n    - name: A\n      value: {}\n    - name: B\n      value: {}\n    - name: C\n      value: {}\n", "x".repeat(1000), "$(A)".repeat(1000), "$(B)".repeat(1000))), "etc/manifests/web.yaml: spec.containers[0].env[2].value: Too long: expands to 1000000003 bytes"),
    ];
    assert!(cases.len() >= 15);
    for (text, want) in cases {
        let got = pod_error(&text);
        // Several problems are reported one per line; the one the case is about must be among them.
        let (file, problem) = want.split_once(": ").unwrap();
        assert!(
            got.starts_with(file) && got.contains(problem),
            "\nmanifest:\n{text}\nwant prefix: {want}\ngot:         {got}"
        );
    }
}

#[test]
fn malformed_configs_name_the_file_key_and_what_is_allowed() {
    let cases = [
        ("nodename = \"x\"\n", "cfg.toml: nodename: unknown field `nodename`, expected one of `node_name`"),
        ("runtime = \"docker\"\n", "cfg.toml: runtime: unsupported value \"docker\": supported values: process"),
        ("shutdown_timeout = \"ten\"\n", "cfg.toml: shutdown_timeout: invalid duration \"ten\""),
        ("shutdown_timeout = 10\n", "cfg.toml: shutdown_timeout: invalid type: integer `10`, expected a string"),
        ("sync_frequency = \"1ms\"\n", "cfg.toml: sync_frequency: invalid value 1ms: must be at least 100ms"),
        (
            "[api]\nlisten = \"localhost\"\n",
            "cfg.toml: api.listen: invalid value \"localhost\": must be an address and port",
        ),
        ("[logs]\nmax_size = \"1.5.0\"\n", "cfg.toml: logs.max_size: invalid quantity \"1.5.0\""),
        ("[logs]\nmax_files = 1\n", "cfg.toml: logs.max_files: invalid value 1: must be at least 2"),
        ("[logs]\nmax_files = -3\n", "cfg.toml: logs.max_files: invalid value: integer `-3`, expected u32"),
        (
            "node_name = \"Edge_1\"\n",
            "cfg.toml: node_name: invalid value \"Edge_1\": must be a lowercase RFC 1123 subdomain",
        ),
        ("node_ip = \"300.1.1.1\"\n", "cfg.toml: node_ip: invalid value \"300.1.1.1\": must be an IP address"),
        ("[gc]\nmax_dead = 3\n", "cfg.toml: gc.max_dead: unknown field `max_dead`, expected `max_dead_per_container`"),
        ("state_dir = \n", "cfg.toml: (top level): "),
        (
            "[cgroups]\nenforcement = \"maybe\"\n",
            "cfg.toml: cgroups.enforcement: unsupported value \"maybe\": supported values: auto, required, off",
        ),
        (
            "[cgroups]\nsystem_reserved = { gpu = \"1\" }\n",
            "cfg.toml: cgroups.system_reserved.gpu: unsupported resource: allowed are cpu, memory, pid",
        ),
        (
            "[cgroups]\nkube_reserved = { memory = \"1.5.0\" }\n",
            "cfg.toml: cgroups.kube_reserved.memory: invalid quantity \"1.5.0\"",
        ),
        (
            "[cgroups]\nqos_reserved = { memory = \"150%\" }\n",
            "cfg.toml: cgroups.qos_reserved.memory: invalid value \"150%\": must be a percentage from 0% to 100%",
        ),
        (
            "[cgroups]\ncontainer_cpu_weight = \"cubic\"\n",
            "cfg.toml: cgroups.container_cpu_weight: unknown variant `cubic`, expected `quadratic` or `linear`",
        ),
        (
            "[cgroups]\nroot = \"kubepods\"\n",
            "cfg.toml: cgroups.root: invalid value \"kubepods\": must be an absolute cgroup path",
        ),
        (
            "[devices]\nallocate_timeout = \"30s\"\n",
            "cfg.toml: devices.allocate_timeout: invalid value 30s: must be shorter than shutdown_timeout (10s)",
        ),
        (
            "[devices]\ndial_timeout = \"0s\"\n",
            "cfg.toml: devices.dial_timeout: invalid value 0: must be a positive duration",
        ),
        (
            "[devices]\nmax_devices_per_resource = 0\n",
            "cfg.toml: devices.max_devices_per_resource: invalid value 0: must be at least 1",
        ),
        ("[devices]\nsocket = \"x\"\n", "cfg.toml: devices.socket: unknown field `socket`, expected one of"),
    ];
    for (text, want) in cases {
        let got = Config::parse("cfg.toml", text).expect_err(text).to_string();
        assert!(got.starts_with(want), "\nconfig:\n{text}\nwant prefix: {want}\ngot:         {got}");
    }
}

#[test]
fn validate_exits_non_zero_and_prints_every_problem() {
    let sb = common::Sandbox::new();
    sb.write_manifest(
        "good.yaml",
        &common::manifest("good", "  containers:\n  - name: a\n    image: b\n    command: [sleep, '1']\n"),
    );
    sb.write_manifest("bad.yaml", &container("    resources:\n      limits:\n        cpu: 1.5.0\n"));
    let out = std::process::Command::new(common::ferrolet_bin())
        .args(["validate", "--manifest-dir"])
        .arg(sb.manifests())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("good.yaml: ok (good-"), "{stdout}");
    assert!(
        stderr.contains("bad.yaml: spec.containers[0].resources.limits.cpu: invalid quantity \"1.5.0\""),
        "{stderr}"
    );

    let cfg = sb.dir.path().join("bad.toml");
    std::fs::write(&cfg, "[api]\nlisten = \"everywhere\"\n").unwrap();
    let out =
        std::process::Command::new(common::ferrolet_bin()).args(["validate", "--config"]).arg(&cfg).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bad.toml: api.listen: invalid value \"everywhere\""), "{stderr}");
}
