//! The executor: applies a pod's `PodActions` (kubelet's `SyncPod`), recording kubelet's
//! events: kills, back-off and device preparation here, and the runtime calls (sandboxes
//! removed and made, containers created and started, exited instances removed) as one
//! `PodWork` for the workers (`workers.rs`), whose answer `sync_answered` applies. Each
//! container start passes `actions::start_gate` first, and its config is made here.

use super::actions::{
    compute_pod_actions, sandbox_key, start_gate, Gate, KillContainer, PodActions, PodInput, StartContainer,
};
use super::backoff::Key;
use super::dns::PodDns;
use super::view::{PodView, Snapshot};
use super::workers::{Instance, NewContainer, NewSandbox, Outcome, PodWork, SandboxFailure, Started, Turn};
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
    labels, ContainerConfig, ContainerState, ImageUser, Mount, PortMapping, SandboxConfig, SandboxInfo, TerminationLog,
};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

impl PodManager {
    /// Decides what a running pod needs next, does what is done here (kills, back-off,
    /// device preparation), and hands the runtime calls to the workers as one `PodWork`.
    pub(super) fn sync_pod(&mut self, uid: &str, snap: &Snapshot, now: SystemTime) {
        let pod = Arc::clone(&self.pods[uid].pod);
        if !self.setup.ensure_cgroup(&self.act, &pod, &self.pods) || !self.setup.ensure_volumes(&self.act, &pod) {
            return;
        }
        let view = snap.pod(uid);
        let startup_succeeded = self.startup_succeeded(&pod, snap);
        let mut actions = compute_pod_actions(&PodInput {
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
        // Decided when a worker can make it: meanwhile only its pulls are queued, and the
        // next answer syncs the pod again.
        if self.workers.turn(uid, actions.ask_runtime()) == Turn::Full {
            let sandbox = actions.create_sandbox && !actions.sandbox_back_off;
            self.pull_ahead(&pod, sandbox, &actions.start, now);
            return;
        }
        let mut work = PodWork::new(uid);
        work.remove_sandboxes = std::mem::take(&mut actions.remove_sandboxes);
        let mut next = Vec::new();
        if !actions.sandbox_back_off {
            match view.sandbox {
                Some(s) if !actions.create_sandbox => self.execute(&pod, &s.id, actions, &mut work, now),
                dead => {
                    work.sandbox = self.new_sandbox(&pod, view, dead, now);
                    next = actions.start;
                }
            }
        }
        self.submit(work);
        // A new sandbox's containers start with the next work, once it is listed; their
        // images are pulled meanwhile.
        self.pull_ahead(&pod, false, &next, now);
    }

    /// Queues the pulls of the images the pod's next steps need (its sandbox's when
    /// `sandbox`, and `start`'s containers'), without using any (`Images::pull_ahead`).
    fn pull_ahead(&mut self, pod: &Pod, sandbox: bool, start: &[StartContainer], now: SystemTime) {
        let Some(images) = self.images.as_mut() else { return };
        let (act, restarts, objects) = (&self.act, &mut self.restarts, &self.setup.objects);
        if sandbox {
            images.pull_ahead(act, restarts, pod, None, now, objects);
        }
        let refused = self.pods.get(&pod.metadata.uid).map(|e| e.refused.as_slice()).unwrap_or_default();
        for s in start {
            let c = pod.spec.init_containers.iter().chain(&pod.spec.containers).find(|c| c.name == s.name);
            // A container that cannot be made does not have its image looked at (`start_gate`).
            if let Some(c) = c.filter(|c| fields::refusal(refused, pod, &c.name).is_none()) {
                images.pull_ahead(act, restarts, pod, Some(c), now, objects);
            }
        }
    }

    /// Does a pod's actions in kubelet's order: kills, then starts, then removals; the
    /// starts and removals go into `work`.
    fn execute(&mut self, pod: &Pod, sandbox_id: &str, actions: PodActions, work: &mut PodWork, now: SystemTime) {
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
        work.sandbox_id = sandbox_id.into();
        for s in &start {
            let Some(c) = self.start(pod, sandbox_id, s, now) else { continue };
            let holds = self.hooks.holds_next(pod, &s.name);
            work.start.push(c);
            // The next one waits for this one's postStart hook, which starts with the answer.
            if holds {
                break;
            }
        }
        work.remove_containers = remove_dead.into_iter().map(|d| Instance { name: d.name, id: d.id }).collect();
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

    /// The pod's new sandbox, once its image is there; `None` meanwhile, or when its config
    /// cannot be made (`FailedCreatePodSandBox`). A sandbox that is no longer ready (nothing
    /// runs in it any more) is replaced: kubelet's `SandboxChanged` event, and the next one
    /// waits longer each time. The dead one is removed first when it holds no container
    /// instance (a sandbox whose network never came up), else with the pod, so the instances
    /// in it still count restarts; while it cannot be removed, no new one is made (as
    /// kubelet's pod sync stops at a sandbox it cannot kill): one dead sandbox at most, not
    /// one more at every try.
    fn new_sandbox(
        &mut self,
        pod: &Pod,
        view: PodView,
        dead: Option<&SandboxInfo>,
        now: SystemTime,
    ) -> Option<NewSandbox> {
        // The sandbox's image first (pulled off this thread when absent).
        if !self.image_ready(pod, None, now) {
            return None;
        }
        let key = sandbox_key(&pod.metadata.uid);
        let mut remove_dead = None;
        if let Some(s) = dead {
            self.restarts.backoff.next(&key, now, now);
            self.act.event(
                pod,
                None,
                false,
                "SandboxChanged",
                "Pod sandbox changed, it will be killed and re-created.",
            );
            if !view.containers.iter().any(|c| c.sandbox_id == s.id) {
                remove_dead = Some(s.id.clone());
            }
        }
        match self.sandbox_config(pod, view.next_sandbox_attempt()) {
            Ok(config) => Some(NewSandbox { remove_dead, replaces_dead: dead.is_some(), config }),
            Err(why) => {
                let message = format!("Failed to create pod sandbox: {why}");
                self.act.event(pod, None, true, "FailedCreatePodSandBox", &message);
                if dead.is_none() {
                    self.restarts.backoff.next(&key, now, now);
                }
                None
            }
        }
    }

    /// What the pod's sandbox is made with; `Err` with why it cannot be.
    fn sandbox_config(&mut self, pod: &Pod, attempt: u32) -> Result<SandboxConfig, String> {
        let (hostname, dns) = self.dns.sandbox_names(&self.act, pod)?;
        Ok(SandboxConfig {
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
        })
    }

    /// A container the pod's actions start, past its gate (its config, image and devices),
    /// its back-off advanced and its config made; `None` (with its waiting reason) when it
    /// does not start now.
    fn start(&mut self, pod: &Pod, sandbox_id: &str, s: &StartContainer, now: SystemTime) -> Option<NewContainer> {
        let c = pod.spec.init_containers.iter().chain(&pod.spec.containers).find(|c| c.name == s.name)?;
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
                return None;
            }
            Gate::CheckImage | Gate::WaitForImage | Gate::WaitForDevices => return None,
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
        let config = devices.and_then(|d| self.container_config(pod, sandbox_id, c, s, d.as_ref())).and_then(|cfg| {
            match self.act.runtime.mount_refusal(&cfg) {
                Some(message) => Err(ContainerStartError::Config { message }),
                None => Ok(cfg),
            }
        });
        let config = match config {
            Ok(config) => config,
            Err(e) => {
                self.start_failed(pod, &c.name, e, s.backoff_from.is_some(), now);
                return None;
            }
        };
        if s.replace.is_some() {
            // The runtime reports Created only when nothing runs it: it is removed and
            // created again.
            log::info!(
                "pods: pod {} container {}: created but never started (the agent stopped or the start failed); creating it again",
                pod.key(),
                c.name
            );
        }
        Some(NewContainer { replace: s.replace.clone(), config, counted: s.backoff_from.is_some() })
    }

    /// A container could not be created or started: a config that cannot be made waits as
    /// `CreateContainerConfigError` (asked again at every sync, without back-off: nothing
    /// ran); a failed create as `CreateContainerError` under back-off (advanced unless its
    /// start already `counted`); a failed start is an exit the runtime recorded
    /// (`StartError`), which the next sync restarts under back-off like any other.
    fn start_failed(&mut self, pod: &Pod, name: &str, e: ContainerStartError, counted: bool, now: SystemTime) {
        let key: Key = (pod.metadata.uid.clone(), name.to_string());
        if let ContainerStartError::Config { message } = e {
            self.restarts.hold_config_error(&self.act, pod, name, message, now);
            return;
        }
        let message = Chain(&e).to_string();
        self.act.event(pod, Some(name), true, "Failed", &format!("Error: {message}"));
        if e.is_create_failure() {
            self.restarts.create_failed(key, message, counted, now);
        } else {
            self.restarts.waiting.remove(&key);
        }
    }

    /// A running pod's work answered (`workers::run`): kubelet's events, back-off and
    /// waiting reasons for what failed, and for each container started its `postStart`
    /// hook (unless the pod is stopping meanwhile). Returns whether a sandbox was made (its
    /// containers start at the next sync).
    pub(super) fn sync_answered(&mut self, pod: &Pod, work: PodWork, out: Outcome, now: SystemTime) -> bool {
        let key = sandbox_key(&pod.metadata.uid);
        if let Some((id, e)) = &out.sandbox_left {
            log::warn!("pods: pod {}: cannot remove dead sandbox {id}: {}", pod.key(), Chain(e));
            self.restarts.backoff.next(&key, now, now);
        }
        let mut made = false;
        match (&work.sandbox, out.sandbox) {
            (Some(s), Some(Err(SandboxFailure::DeadLeft(e)))) => {
                let id = s.remove_dead.as_deref().unwrap_or_default();
                log::warn!("pods: pod {}: cannot remove dead sandbox {id}: {}", pod.key(), Chain(&e));
            }
            (Some(s), Some(Err(SandboxFailure::Run(e)))) => {
                let message = format!("Failed to create pod sandbox: {}", Chain(&e));
                self.act.event(pod, None, true, "FailedCreatePodSandBox", &message);
                // A dead one's replacement advanced the back-off when it was asked.
                if !s.replaces_dead {
                    self.restarts.backoff.next(&key, now, now);
                }
            }
            (_, Some(Ok(id))) => {
                log::debug!("pods: pod {}: sandbox {id} made", pod.key());
                made = true;
            }
            _ => {}
        }
        let stopping = self.pods.get(&pod.metadata.uid).is_some_and(|e| e.termination.is_some() || e.failure.is_some());
        for (c, started) in work.start.iter().zip(out.started) {
            let name = c.config.name.as_str();
            match started {
                Started::StaleLeft(e) => {
                    // Not created beside it: the two would share the container's cgroup, and
                    // removing the stale one later would kill the new one. Retried under back-off.
                    log::warn!("pods: pod {} container {name}: cannot remove it: {}", pod.key(), Chain(&e));
                }
                Started::CreateFailed(source) => {
                    self.start_failed(pod, name, ContainerStartError::CreateContainer { source }, c.counted, now)
                }
                Started::StartFailed(_, source) => {
                    self.act.event(pod, Some(name), false, "Created", &format!("Created container {name}"));
                    self.start_failed(pod, name, ContainerStartError::StartContainer { source }, c.counted, now);
                }
                Started::Running(id) => {
                    self.act.event(pod, Some(name), false, "Created", &format!("Created container {name}"));
                    self.act.event(pod, Some(name), false, "Started", &format!("Started container {name}"));
                    self.restarts.waiting.remove(&(pod.metadata.uid.clone(), name.to_string()));
                    let spec = pod.spec.init_containers.iter().chain(&pod.spec.containers).find(|s| s.name == name);
                    if let Some(spec) = spec.filter(|_| !stopping) {
                        self.hooks.start_post_start(&mut self.act, pod, spec, &id, now);
                    }
                }
            }
        }
        for (i, e) in &out.containers_left {
            log::warn!(
                "pods: pod {} container {}: cannot remove exited instance {}: {}",
                pod.key(),
                i.name,
                i.id,
                Chain(e)
            );
        }
        made
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
