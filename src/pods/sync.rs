//! The executor: applies a pod's `PodActions` through `ContainerRuntime` and the cgroup
//! manager (kubelet's `SyncPod`), recording kubelet's events; each container start passes
//! `actions::start_gate` first.

use super::actions::{
    compute_pod_actions, sandbox_key, start_gate, DeadInstance, Gate, KillContainer, PodActions, PodInput,
    StartContainer,
};
use super::backoff::Key;
use super::dns::PodDns;
use super::view::Snapshot;
use super::{ContainerKind, ContainerStartError, DevicePrep, PodManager, MIN_GRACE};
use crate::api::expand::{expand, resolve_env};
use crate::api::security::{self, verify_run_as_non_root, ContainerSecurity};
use crate::api::{downward, fields};
use crate::api::{Container, Pod, RestartPolicy, TerminationMessagePolicy};
use crate::base::errors::Chain;
use crate::node::objects::payload;
use crate::node::prober::{ProbeResult, ProbeType};
use crate::node::runtime::devices::DeviceOptions;
use crate::node::runtime::{
    labels, ContainerConfig, ContainerInfo, ContainerState, ImageUser, Mount, PortMapping, SandboxConfig, SandboxInfo,
    TerminationLog,
};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

impl PodManager {
    /// Decides and applies what a running pod needs next.
    pub(super) fn sync_pod(&mut self, uid: &str, snap: &Snapshot, now: SystemTime) {
        let pod = Arc::clone(&self.pods[uid].pod);
        if !self.setup.ensure_cgroup(&self.act, &pod, &self.pods) || !self.setup.ensure_volumes(&self.act, &pod) {
            return;
        }
        let view = snap.pod(uid);
        let startup_succeeded = self.startup_succeeded(&pod, snap);
        let actions = compute_pod_actions(&PodInput {
            pod: &pod,
            view,
            backoff: &self.restarts.backoff,
            waiting: &self.restarts.waiting,
            startup_succeeded: &startup_succeeded,
            device_prep: self.devices.as_ref().map(|d| &d.prep),
            max_dead_per_container: self.act.cfg.max_dead_per_container,
            post_start_running: self.hooks.post_start_running(uid),
            now,
        });
        let key = sandbox_key(uid);
        for id in &actions.remove_sandboxes {
            if !self.remove_sandbox(&pod, id) {
                self.restarts.backoff.next(&key, now, now);
                break;
            }
        }
        if actions.sandbox_back_off {
            return;
        }
        let sandbox_id = match view.sandbox {
            Some(s) if !actions.create_sandbox => s.id.clone(),
            dead => {
                // The sandbox's image first (pulled off this thread when absent).
                if !self.image_ready(&pod, None, now) {
                    return;
                }
                if let Some(s) = dead {
                    // A sandbox that died: the next one waits longer each time, and is not
                    // made while the dead one cannot be removed (as kubelet's pod sync stops
                    // at a sandbox it cannot kill): one dead sandbox at most, not one more
                    // at every try.
                    self.restarts.backoff.next(&key, now, now);
                    if !self.replace_dead_sandbox(&pod, s, view.containers) {
                        return;
                    }
                }
                match self.run_sandbox(&pod, view.next_sandbox_attempt()) {
                    Some(id) => id,
                    None => {
                        if dead.is_none() {
                            self.restarts.backoff.next(&key, now, now);
                        }
                        return;
                    }
                }
            }
        };
        self.execute(&pod, &sandbox_id, actions, now);
    }

    /// Applies a pod's actions in kubelet's order: kills, then starts, then removals.
    fn execute(&mut self, pod: &Pod, sandbox_id: &str, actions: PodActions, now: SystemTime) {
        let PodActions { kill, back_off, prepare_devices, start, remove_dead, .. } = actions;
        for k in &kill {
            self.hooks.kill(&mut self.act, pod, k);
        }
        for b in back_off {
            self.restarts.hold_in_back_off(&self.act, pod, b, now);
        }
        for name in prepare_devices {
            if let Some(link) = self.devices.as_mut() {
                link.prepare(&pod.metadata.uid, &name);
            }
        }
        for s in &start {
            self.start(pod, sandbox_id, s, now);
            // The next one waits for this one's postStart hook.
            if self.hooks.post_start_running(&pod.metadata.uid) {
                break;
            }
        }
        for dead in &remove_dead {
            self.remove_dead(pod, dead);
        }
    }

    /// Container ids of the pod's sidecars whose startup probe succeeded.
    fn startup_succeeded(&self, pod: &Pod, snap: &Snapshot) -> HashSet<String> {
        let view = snap.pod(&pod.metadata.uid);
        pod.spec
            .init_containers
            .iter()
            .filter(|c| c.is_sidecar() && c.startup_probe.is_some())
            .filter_map(|c| view.latest(&c.name))
            .filter(|i| self.published.probe_results.get(ProbeType::Startup, &i.id) == Some(ProbeResult::Success))
            .map(|i| i.id.clone())
            .collect()
    }

    /// A sandbox that is no longer ready (nothing runs in it any more) is replaced:
    /// kubelet's `SandboxChanged` event; the dead sandbox is removed at once when it holds
    /// no container instance (a sandbox whose network never came up), else with the pod, so
    /// the instances in it still count restarts.
    /// Returns false when the dead sandbox had to go and could not.
    fn replace_dead_sandbox(&mut self, pod: &Pod, dead: &SandboxInfo, containers: &[ContainerInfo]) -> bool {
        self.act.event(pod, None, false, "SandboxChanged", "Pod sandbox changed, it will be killed and re-created.");
        containers.iter().any(|c| c.sandbox_id == dead.id) || self.remove_sandbox(pod, &dead.id)
    }

    /// Stops and removes sandbox `id` of `pod`; false (said) when the runtime cannot.
    fn remove_sandbox(&mut self, pod: &Pod, id: &str) -> bool {
        let removed = self.act.mutate().stop_pod_sandbox(id).and_then(|_| self.act.mutate().remove_pod_sandbox(id));
        if let Err(e) = &removed {
            log::warn!("pods: pod {}: cannot remove dead sandbox {id}: {}", pod.key(), Chain(e));
        }
        removed.is_ok()
    }

    /// Creates the pod's sandbox; `None` (with `FailedCreatePodSandBox`) when it fails.
    fn run_sandbox(&mut self, pod: &Pod, attempt: u32) -> Option<String> {
        let (hostname, dns) = match self.dns.sandbox_names(&self.act, pod) {
            Ok(names) => names,
            Err(why) => {
                self.act.event(
                    pod,
                    None,
                    true,
                    "FailedCreatePodSandBox",
                    &format!("Failed to create pod sandbox: {why}"),
                );
                return None;
            }
        };
        let cfg = SandboxConfig {
            pod_uid: pod.metadata.uid.clone(),
            pod_name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            attempt,
            log_directory: self.act.log_dir(pod),
            termination_grace_period_seconds: pod.spec.grace_period_seconds(),
            host_network: pod.spec.host_network,
            cgroup_parent: self.setup.cm.as_ref().map(|cm| cm.pod_cgroup(pod)).unwrap_or_default(),
            annotations: pod.metadata.annotations.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            security: security::sandbox(&pod.spec),
            port_mappings: pod
                .spec
                .init_containers
                .iter()
                .chain(&pod.spec.containers)
                .flat_map(|c| &c.ports)
                .filter_map(|p| {
                    let host_port = i32::try_from(p.host_port?).ok().filter(|h| *h > 0)?;
                    let container_port = i32::try_from(p.container_port).ok()?;
                    Some(PortMapping { protocol: p.protocol.clone(), container_port, host_port })
                })
                .collect(),
            hostname,
            dns,
        };
        match self.act.mutate().run_pod_sandbox(&cfg) {
            Ok(id) => Some(id),
            Err(e) => {
                let message = format!("Failed to create pod sandbox: {}", Chain(&e));
                self.act.event(pod, None, true, "FailedCreatePodSandBox", &message);
                None
            }
        }
    }

    /// Creates and starts one container, advancing its back-off; a failed create waits as
    /// `CreateContainerError`.
    fn start(&mut self, pod: &Pod, sandbox_id: &str, s: &StartContainer, now: SystemTime) {
        let Some(c) = pod.spec.init_containers.iter().chain(&pod.spec.containers).find(|c| c.name == s.name) else {
            return;
        };
        let key: Key = (pod.metadata.uid.clone(), c.name.clone());
        // A field that cannot be honoured stops it (kubelet's CreateContainerConfigError).
        let refusal = self.pods.get(&pod.metadata.uid).and_then(|e| fields::refusal(&e.refused, pod, &c.name));
        let mut gate = start_gate(refusal.as_deref(), None, self.device_prep(&key));
        if gate == Gate::CheckImage {
            let ready = self.image_ready(pod, Some(c), now);
            gate = start_gate(refusal.as_deref(), Some(ready), self.device_prep(&key));
        }
        let devices = match gate {
            Gate::ConfigError(why) => {
                self.restarts.hold_config_error(&self.act, pod, &c.name, why, now);
                return;
            }
            Gate::CheckImage | Gate::WaitForImage | Gate::WaitForDevices => return,
            // Devices that cannot be prepared fail the create, under the same back-off.
            Gate::DevicesFailed(reason) => {
                self.take_prepared_devices(&key);
                Err(ContainerStartError::PrepareDevices { reason })
            }
            Gate::Create => Ok(self.take_prepared_devices(&key)),
        };
        if let Some(t) = s.backoff_from {
            self.restarts.backoff.next(&key, t, now);
        }
        if let Some(stale) = &s.replace {
            // The runtime reports Created only when nothing runs it: it is removed and
            // created again.
            log::info!(
                "pods: pod {} container {}: created but never started (the agent stopped or the start failed); creating it again",
                pod.key(),
                c.name
            );
            if let Err(e) = self.act.mutate().remove_container(stale) {
                // Not created beside it: the two would share the container's cgroup, and
                // removing the stale one later would kill the new one. Retried under back-off.
                log::warn!("pods: pod {} container {}: cannot remove it: {}", pod.key(), c.name, Chain(&e));
                return;
            }
        }
        let started = devices.and_then(|d| self.create_and_start(pod, sandbox_id, c, s, d.as_ref()));
        match started {
            Ok(id) => {
                self.restarts.waiting.remove(&key);
                self.hooks.start_post_start(&mut self.act, pod, c, &id, now);
            }
            // Asked again at every sync (no back-off: nothing ran), said once per message.
            Err(ContainerStartError::Config { message }) => {
                self.restarts.hold_config_error(&self.act, pod, &c.name, message, now)
            }
            Err(e) => {
                let message = Chain(&e).to_string();
                self.act.event(pod, Some(&c.name), true, "Failed", &format!("Error: {message}"));
                if e.is_create_failure() {
                    self.restarts.create_failed(key, message, s.backoff_from.is_some(), now);
                } else {
                    // The runtime recorded the failed start as an exit (StartError); the next
                    // sync restarts it under back-off like any other exit.
                    self.restarts.waiting.remove(&key);
                }
            }
        }
    }

    /// The image gate (`images.rs`) for container `c`, or for the pod's sandbox (`None`);
    /// a runtime without images has nothing to wait for.
    fn image_ready(&mut self, pod: &Pod, c: Option<&Container>, now: SystemTime) -> bool {
        let Some(images) = self.images.as_mut() else { return true };
        images.gate(&self.act, &mut self.restarts, pod, c, now, &self.setup.objects)
    }

    /// How far a container's devices are prepared (`None`: it asks for none, or no device
    /// manager is connected).
    fn device_prep(&self, key: &Key) -> Option<&DevicePrep> {
        self.devices.as_ref().and_then(|d| d.prep.get(key))
    }

    /// The options of a container's prepared devices, taken (each preparation serves one
    /// start); none when it asks for none.
    fn take_prepared_devices(&mut self, key: &Key) -> Option<DeviceOptions> {
        match self.devices.as_mut().and_then(|d| d.take_prepared(key)) {
            Some(DevicePrep::Ready(options)) => Some(options),
            _ => None,
        }
    }

    fn create_and_start(
        &mut self,
        pod: &Pod,
        sandbox_id: &str,
        c: &Container,
        s: &StartContainer,
        devices: Option<&DeviceOptions>,
    ) -> Result<String, ContainerStartError> {
        let cfg = self.container_config(pod, sandbox_id, c, s, devices)?;
        if let Some(message) = self.act.runtime.mount_refusal(&cfg) {
            return Err(ContainerStartError::Config { message });
        }
        let id = self
            .act
            .mutate()
            .create_container(sandbox_id, &cfg)
            .map_err(|source| ContainerStartError::CreateContainer { source })?;
        self.act.event(pod, Some(&c.name), false, "Created", &format!("Created container {}", c.name));
        self.act.mutate().start_container(&id).map_err(|source| ContainerStartError::StartContainer { source })?;
        self.act.event(pod, Some(&c.name), false, "Started", &format!("Started container {}", c.name));
        Ok(id)
    }

    /// The container's variables, as kubelet's `makeEnvironmentVariables` makes them: its
    /// `envFrom` sources' keys in order (keys that are not variable names skipped, with
    /// `InvalidEnvironmentVariableNames`), then `env` in order, each value from a literal
    /// (`$(VAR)` expanded from what comes before it), the downward API, a ConfigMap or a
    /// Secret. A missing required object or key is `CreateContainerConfigError`.
    fn container_env(
        &self,
        pod: &Pod,
        c: &Container,
        facts: &downward::Facts,
    ) -> Result<Vec<(String, String)>, ContainerStartError> {
        let objects = &self.setup.objects;
        let config = |message: String| ContainerStartError::Config { message };
        let (from, warnings) = payload::env_from(c, pod, objects).map_err(config)?;
        for w in warnings {
            self.act.event(pod, Some(&c.name), true, "InvalidEnvironmentVariableNames", &w);
        }
        let mut failed = None;
        let env = resolve_env(&c.env, &from, |source| match payload::key_ref(source, pod, objects) {
            Ok(Some(value)) => value,
            // A checked downward source only fails on a container the pod lacks, which
            // validation refuses.
            Ok(None) => Some(downward::value(source, pod, c, facts).unwrap_or_default()),
            Err(message) => {
                failed.get_or_insert(message);
                None
            }
        });
        match failed {
            Some(message) => Err(ContainerStartError::Config { message }),
            None => Ok(env),
        }
    }

    /// What the runtime creates the container with.
    fn container_config(
        &self,
        pod: &Pod,
        sandbox_id: &str,
        c: &Container,
        s: &StartContainer,
        devices: Option<&DeviceOptions>,
    ) -> Result<ContainerConfig, ContainerStartError> {
        let security = security::effective(&pod.spec, c);
        self.check_security(pod, c, &security)?;
        let facts = self.setup.downward_facts(&self.act, pod, Some(sandbox_id));
        let mut env = self.container_env(pod, c, &facts)?;
        if let Some(d) = devices {
            // The process runtime shares the host's filesystem: a device or mount the
            // plugin names must exist as given.
            let paths = d.devices.iter().map(|x| &x.host_path).chain(d.mounts.iter().map(|m| &m.host_path));
            if let Some(missing) = paths.into_iter().find(|p| !std::path::Path::new(p).exists()) {
                return Err(ContainerStartError::DevicePathMissing { path: missing.clone() });
            }
            // Device plugin envs first, as kubelet: the container's own env wins.
            let own: HashSet<&String> = env.iter().map(|(k, _)| k).collect();
            let mut with_devices: Vec<(String, String)> =
                d.envs.iter().filter(|(k, _)| !own.contains(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
            with_devices.append(&mut env);
            env = with_devices;
        }
        let lookup = |name: &str| env.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        let argv: Vec<String> = c.command.iter().chain(&c.args).map(|a| expand(a, &lookup)).collect();
        // As kubelet: the volume mounts, the pod's hosts file (unless a volume is mounted at
        // /etc/hosts), then the termination message file.
        let mut mounts =
            self.act.pod_dir(pod).mounts(pod, c, &env).map_err(|message| ContainerStartError::Config { message })?;
        if let Some(hosts) = PodDns::hosts_mount(&self.act, pod, sandbox_id, &mounts)? {
            mounts.push(hosts);
        }
        let termination_log = self.termination_log(pod, c, s.attempt, &mut mounts)?;
        let mut lbl = BTreeMap::new();
        lbl.insert(labels::POD_UID.to_string(), pod.metadata.uid.clone());
        lbl.insert(labels::POD_NAME.to_string(), pod.metadata.name.clone());
        lbl.insert(labels::POD_NAMESPACE.to_string(), pod.metadata.namespace.clone());
        lbl.insert(labels::CONTAINER_NAME.to_string(), c.name.clone());
        lbl.insert(labels::CONTAINER_KIND.to_string(), s.kind.as_str().to_string());
        let list = if s.kind == ContainerKind::App { &pod.spec.containers } else { &pod.spec.init_containers };
        if let Some(index) = list.iter().position(|x| x.name == c.name) {
            lbl.insert(labels::CONTAINER_INDEX.to_string(), index.to_string());
        }
        Ok(ContainerConfig {
            name: c.name.clone(),
            attempt: s.attempt,
            image: c.image.clone(),
            argv,
            env,
            working_dir: c.working_dir.clone(),
            log_path: self.act.log_dir(pod).join(&c.name).join(format!("{}.log", s.attempt)),
            labels: lbl,
            linux: self.setup.cm.as_ref().map(|cm| cm.container(pod, c)),
            devices: devices.cloned(),
            security,
            mounts,
            termination_log,
            stdin: c.stdin,
            stdin_once: c.stdin_once,
            tty: c.tty,
        })
    }

    /// The container's termination message file, made empty and added to its mounts at
    /// `terminationMessagePath` (unless a volume is mounted there, as kubelet).
    fn termination_log(
        &self,
        pod: &Pod,
        c: &Container,
        attempt: u32,
        mounts: &mut Vec<Mount>,
    ) -> Result<Option<TerminationLog>, ContainerStartError> {
        let path = &c.termination_message_path;
        if path.is_empty() || mounts.iter().any(|m| &m.container_path == path) {
            return Ok(None);
        }
        let host_path = self.act.pod_dir(pod).termination_log(&c.name, attempt).map_err(|e| {
            ContainerStartError::Config { message: format!("cannot make the termination message file: {}", Chain(&e)) }
        })?;
        mounts.push(Mount { container_path: path.clone(), host_path: host_path.clone(), ..Default::default() });
        let fallback_to_logs = c.termination_message() == TerminationMessagePolicy::FallbackToLogsOnError;
        Ok(Some(TerminationLog { host_path, fallback_to_logs }))
    }

    /// What kubelet checks of a security context before a create: `runAsNonRoot` against
    /// the uid the container would run as (kubelet's `verifyRunAsNonRoot`), then whether the
    /// runtime can honour every setting (its mounts are asked once they are known).
    fn check_security(&self, pod: &Pod, c: &Container, sec: &ContainerSecurity) -> Result<(), ContainerStartError> {
        // The image's user matters only when no uid is asked for (kubelet's getImageUser).
        let image_user = if sec.run_as_non_root && sec.run_as_user.is_none() {
            self.act.runtime.image_user(&c.image).map_err(|e| ContainerStartError::Config {
                message: format!("failed to inspect the user of image {}: {}", c.image, Chain(&e)),
            })?
        } else {
            ImageUser::default()
        };
        verify_run_as_non_root(pod, c, sec, image_user.uid, &image_user.username)
            .map_err(|message| ContainerStartError::Config { message })?;
        match self.act.runtime.security_refusal(&security::sandbox(&pod.spec), sec) {
            Some(message) => Err(ContainerStartError::Config { message }),
            None => Ok(()),
        }
    }

    /// Removes an exited instance beyond the retention limit (with its log).
    fn remove_dead(&mut self, pod: &Pod, dead: &DeadInstance) {
        if let Err(e) = self.act.mutate().remove_container(&dead.id) {
            log::warn!(
                "pods: pod {} container {}: cannot remove exited instance {}: {}",
                pod.key(),
                dead.name,
                dead.id,
                Chain(&e)
            );
        }
    }

    /// A liveness or startup probe failed for good: kill the container (it restarts under
    /// its restart policy and back-off); kubelet's `Killing` event and grace period rules.
    pub(super) fn on_probe_failure(&mut self, uid: &str, name: &str, container_id: &str, kind: ProbeType) {
        let Some(entry) = self.pods.get(uid) else { return };
        if entry.termination.is_some() {
            return;
        }
        let pod = entry.pod.clone();
        let Some(spec) = pod.spec.init_containers.iter().chain(&pod.spec.containers).find(|c| c.name == name) else {
            return;
        };
        let Ok(containers) = self.act.runtime.list_containers() else { return };
        let Some(info) = containers.into_iter().find(|c| c.id == container_id && c.state == ContainerState::Running)
        else {
            return;
        };
        self.hooks.kill(&mut self.act, &pod, &probe_kill(&pod, spec, &info.id, kind));
    }
}

/// The kill of a container whose liveness or startup probe failed: the probe's own grace
/// period, else the pod's, never below the minimum.
fn probe_kill(pod: &Pod, spec: &Container, id: &str, kind: ProbeType) -> KillContainer {
    let probe = if kind == ProbeType::Liveness { spec.liveness_probe.as_ref() } else { spec.startup_probe.as_ref() };
    let grace = probe.and_then(|p| p.termination_grace_period_seconds).unwrap_or(pod.spec.grace_period_seconds());
    let restarts = spec.is_sidecar() || pod.spec.restart() != RestartPolicy::Never;
    let what = if kind == ProbeType::Liveness { "liveness" } else { "startup" };
    KillContainer {
        name: spec.name.clone(),
        id: id.into(),
        grace: Duration::from_secs(grace.max(0) as u64).max(MIN_GRACE),
        message: format!(
            "Container {} failed {what} probe{}",
            spec.name,
            if restarts { ", will be restarted" } else { "" }
        ),
    }
}
