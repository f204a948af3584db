//! An in-memory `ContainerRuntime` for unit tests. It keeps sandboxes and containers with
//! their states and times (read from a `FakeClock` the test moves), records every call that
//! changes something, and follows scripts: a running container exits, a create or start
//! fails, a relist fails, a container ignores its stop request. Containers stop at once
//! when asked (exit 143, as from SIGTERM), unless told to ignore it. Images: some are
//! present, pulls answer as scripted (an unscripted pull fails as a registry without the
//! image would), and a pull can be made to hang until cancelled.

use super::exec::ExecStart;
use super::{
    ContainerConfig, ContainerInfo, ContainerRuntime, ContainerState, ImageFsInfo, ImageInfo, PullAuth, RuntimeError,
    SandboxConfig, SandboxInfo,
};
use crate::api::fields::RuntimeKind;
use crate::base::clock::{Clock, FakeClock};
use crate::base::manager::Cancel;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Exit code of a container stopped by SIGTERM.
pub const SIGTERM_EXIT: i32 = 128 + 15;

/// A call that changed the runtime, by pod and container names (ids are internal).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// A sandbox for this pod name.
    RunPodSandbox(String),
    /// The sandbox of this pod name.
    StopPodSandbox(String),
    /// The sandbox of this pod name.
    RemovePodSandbox(String),
    /// A container (name, attempt).
    CreateContainer(String, u32),
    /// A container by name.
    StartContainer(String),
    /// A container by name, with its grace period.
    StopContainer(String, Duration),
    /// A stop set for later: container name, time until the deadline, grace after it.
    ArmStop(String, Duration, Duration),
    /// A container by name.
    RemoveContainer(String),
    /// An image, with whether credentials came with it.
    PullImage(String, bool),
    /// An image, by the reference it was added as.
    RemoveImage(String),
}

#[derive(Default)]
struct Scripts {
    fail_create: HashMap<String, u32>,
    fail_start: HashMap<String, u32>,
    fail_list: u32,
    ignore_stop: HashSet<String>,
    /// Per image, the next pulls' outcomes: the image's size, or why the pull fails.
    pulls: HashMap<String, VecDeque<Result<u64, String>>>,
    /// Images whose pulls hang until cancelled.
    hang_pulls: HashSet<String>,
    /// The pod IPs a new pod-network sandbox gets.
    pod_ips: Vec<String>,
    /// Images whose removal fails.
    fail_remove: HashSet<String>,
    /// Sandboxes to fail, each leaving a NOT_READY sandbox behind (a missing CNI plugin).
    fail_sandbox: u32,
    /// What `container_stats` and `pod_sandbox_stats` answer (`None`: not reported).
    container_stats: Option<Vec<super::stats::RuntimeContainerStats>>,
    pod_stats: Option<Vec<super::stats::RuntimePodStats>>,
}

#[derive(Default)]
struct State {
    sandboxes: BTreeMap<String, SandboxInfo>,
    containers: BTreeMap<String, ContainerInfo>,
    next_id: u64,
    calls: Vec<Call>,
    scripts: Scripts,
    /// Present images, by the reference they were added or pulled as.
    images: BTreeMap<String, ImageInfo>,
}

impl State {
    fn id(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}{:04}", self.next_id)
    }

    fn pod_name(&self, sandbox_id: &str) -> String {
        self.sandboxes.get(sandbox_id).map(|s| s.config.pod_name.clone()).unwrap_or_default()
    }
}

/// The in-memory runtime.
pub struct FakeRuntime {
    clock: FakeClock,
    state: Mutex<State>,
    sandbox_image: Option<String>,
}

/// A fake image: its id is derived from its reference.
fn image_info(image: &str, size: u64) -> ImageInfo {
    ImageInfo { id: format!("sha256:{image}"), repo_tags: vec![image.into()], size, ..Default::default() }
}

fn not_found(kind: &'static str, id: &str) -> RuntimeError {
    RuntimeError::NotFound { kind, id: id.into() }
}

impl FakeRuntime {
    /// An empty runtime reading the time from `clock`.
    pub fn new(clock: FakeClock) -> Self {
        FakeRuntime { clock, state: Mutex::new(State::default()), sandbox_image: None }
    }

    /// Every recorded call since the last `take_calls`, oldest first.
    pub fn take_calls(&self) -> Vec<Call> {
        std::mem::take(&mut self.state.lock().calls)
    }

    /// Every container instance, in creation order.
    pub fn containers(&self) -> Vec<ContainerInfo> {
        // Ids grow with each create, and the map keeps them sorted.
        self.state.lock().containers.values().cloned().collect()
    }

    /// Every sandbox.
    pub fn sandboxes(&self) -> Vec<SandboxInfo> {
        self.state.lock().sandboxes.values().cloned().collect()
    }

    /// Names of the running containers, sorted.
    pub fn running(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .state
            .lock()
            .containers
            .values()
            .filter(|c| c.state == ContainerState::Running)
            .map(|c| c.config.name.clone())
            .collect();
        v.sort();
        v
    }

    /// The running container `name` exits with `code` now.
    ///
    /// Panics when no container of that name runs: the test's script is wrong.
    pub fn exit(&self, name: &str, code: i32) {
        let now = self.clock.now();
        let mut st = self.state.lock();
        let c = st.containers.values_mut().find(|c| c.config.name == name && c.state == ContainerState::Running);
        let Some(c) = c else { panic!("fake runtime: no running container {name} to exit") };
        c.state = ContainerState::Exited;
        c.finished_at = Some(now);
        c.exit_code = code;
        c.reason = if code == 0 { "Completed" } else { "Error" }.into();
        c.pid = None;
    }

    /// The newest exited container `name` is now said to have ended for `reason`, as
    /// containerd says `OOMKilled` when the OOM event comes after the exit.
    ///
    /// Panics when no container of that name has exited.
    pub fn set_exit_reason(&self, name: &str, reason: &str) {
        let mut st = self.state.lock();
        let exited = st.containers.values_mut().filter(|c| c.config.name == name && c.state == ContainerState::Exited);
        let Some(c) = exited.max_by_key(|c| c.config.attempt) else {
            panic!("fake runtime: no exited container {name}")
        };
        c.reason = reason.into();
    }

    /// The next `times` creates of container `name` fail.
    pub fn fail_create(&self, name: &str, times: u32) {
        self.state.lock().scripts.fail_create.insert(name.into(), times);
    }

    /// The next `times` starts of container `name` fail; each is recorded as an exit with
    /// `StartError`, as the process runtime records an executable that cannot run.
    pub fn fail_start(&self, name: &str, times: u32) {
        self.state.lock().scripts.fail_start.insert(name.into(), times);
    }

    /// Scripted relist failures still to come.
    pub fn fail_list_left(&self) -> u32 {
        self.state.lock().scripts.fail_list
    }

    /// The next `times` sandboxes fail, each leaving a NOT_READY sandbox, as containerd
    /// does without its CNI plugin.
    pub fn fail_sandboxes(&self, times: u32) {
        self.state.lock().scripts.fail_sandbox = times;
    }

    /// The next `times` relists fail.
    pub fn fail_list(&self, times: u32) {
        self.state.lock().scripts.fail_list = times;
    }

    /// Image `image` is present, `size` bytes.
    pub fn add_image(&self, image: &str, size: u64) {
        self.state.lock().images.insert(image.into(), image_info(image, size));
    }

    /// Image `image` is pinned by the runtime.
    pub fn pin_image(&self, image: &str) {
        if let Some(i) = self.state.lock().images.get_mut(image) {
            i.pinned = true;
        }
    }

    /// Removing image `image` fails.
    pub fn fail_remove_image(&self, image: &str) {
        self.state.lock().scripts.fail_remove.insert(image.into());
    }

    /// Image `image` is gone.
    pub fn delete_image(&self, image: &str) {
        self.state.lock().images.remove(image);
    }

    /// The next pull of `image` succeeds (the image is then present, `size` bytes).
    pub fn pull_succeeds(&self, image: &str, size: u64) {
        self.state.lock().scripts.pulls.entry(image.into()).or_default().push_back(Ok(size));
    }

    /// The next pull of `image` fails with `why`.
    pub fn pull_fails(&self, image: &str, why: &str) {
        self.state.lock().scripts.pulls.entry(image.into()).or_default().push_back(Err(why.into()));
    }

    /// Pulls of `image` hang until cancelled.
    pub fn hang_pulls(&self, image: &str) {
        self.state.lock().scripts.hang_pulls.insert(image.into());
    }

    /// Sandboxes are made from `image`, which must be present first.
    pub fn with_sandbox_image(mut self, image: &str) -> Self {
        self.sandbox_image = Some(image.into());
        self
    }

    /// New pod-network sandboxes get `ips` (none by default).
    pub fn give_pod_ips(&self, ips: &[&str]) {
        self.state.lock().scripts.pod_ips = ips.iter().map(|s| s.to_string()).collect();
    }

    /// What the runtime reports of its containers' and sandboxes' usage from now on
    /// (`None`: not reported, as the process runtime).
    pub fn report_stats(
        &self,
        containers: Option<Vec<super::stats::RuntimeContainerStats>>,
        pods: Option<Vec<super::stats::RuntimePodStats>>,
    ) {
        let mut st = self.state.lock();
        st.scripts.container_stats = containers;
        st.scripts.pod_stats = pods;
    }

    /// Container `name` keeps running when asked to stop (it outlives its grace period).
    pub fn ignore_stop(&self, name: &str) {
        self.state.lock().scripts.ignore_stop.insert(name.into());
    }

    fn scripted(counts: &mut HashMap<String, u32>, name: &str) -> bool {
        match counts.get_mut(name) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    }
}

impl ContainerRuntime for FakeRuntime {
    /// Pod fields are judged as on CRI (the fake has no host-network rule).
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Cri
    }

    fn id_scheme(&self) -> &str {
        "fake"
    }

    fn run_pod_sandbox(&self, config: &SandboxConfig) -> Result<String, RuntimeError> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        st.calls.push(Call::RunPodSandbox(config.pod_name.clone()));
        let id = st.id("sandbox-");
        let ips = if config.host_network { Vec::new() } else { st.scripts.pod_ips.clone() };
        let failing = st.scripts.fail_sandbox > 0;
        st.scripts.fail_sandbox = st.scripts.fail_sandbox.saturating_sub(1);
        let info =
            SandboxInfo { id: id.clone(), config: Arc::new(config.clone()), created_at: now, ready: !failing, ips };
        st.sandboxes.insert(id.clone(), info);
        if failing {
            let source = std::io::Error::other("failed to setup network for sandbox: cni plugin not initialized");
            return Err(RuntimeError::Process { action: format!("running sandbox {id}"), source });
        }
        Ok(id)
    }

    fn stop_pod_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        let mut st = self.state.lock();
        let name = st.pod_name(id);
        st.calls.push(Call::StopPodSandbox(name));
        let s = st.sandboxes.get_mut(id).ok_or_else(|| not_found("sandbox", id))?;
        s.ready = false;
        Ok(())
    }

    fn remove_pod_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        let mut st = self.state.lock();
        let name = st.pod_name(id);
        st.calls.push(Call::RemovePodSandbox(name));
        st.containers.retain(|_, c| c.sandbox_id != id);
        st.sandboxes.remove(id);
        Ok(())
    }

    fn list_pod_sandboxes(&self) -> Result<Vec<SandboxInfo>, RuntimeError> {
        Ok(self.sandboxes())
    }

    fn create_container(&self, sandbox_id: &str, config: &ContainerConfig) -> Result<String, RuntimeError> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        st.calls.push(Call::CreateContainer(config.name.clone(), config.attempt));
        if !st.sandboxes.contains_key(sandbox_id) {
            return Err(not_found("sandbox", sandbox_id));
        }
        if Self::scripted(&mut st.scripts.fail_create, &config.name) {
            return Err(RuntimeError::CreateContainer {
                name: config.name.clone(),
                message: "scripted failure".into(),
            });
        }
        let id = st.id("container-");
        let info = ContainerInfo {
            image_ref: String::new(),
            id: id.clone(),
            sandbox_id: sandbox_id.into(),
            config: Arc::new(config.clone()),
            state: ContainerState::Created,
            created_at: now,
            started_at: None,
            finished_at: None,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            pid: None,
        };
        st.containers.insert(id.clone(), info);
        Ok(id)
    }

    fn start_container(&self, id: &str) -> Result<(), RuntimeError> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        let name = st.containers.get(id).map(|c| c.config.name.clone()).ok_or_else(|| not_found("container", id))?;
        st.calls.push(Call::StartContainer(name.clone()));
        let fail = Self::scripted(&mut st.scripts.fail_start, &name);
        let Some(c) = st.containers.get_mut(id) else { return Err(not_found("container", id)) };
        if fail {
            c.state = ContainerState::Exited;
            c.finished_at = Some(now);
            c.exit_code = 128;
            c.reason = "StartError".into();
            c.message = "scripted failure".into();
            return Err(RuntimeError::StartContainer { name, message: "scripted failure".into() });
        }
        c.state = ContainerState::Running;
        c.started_at = Some(now);
        c.pid = Some(1000);
        Ok(())
    }

    fn stop_container(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        let now = self.clock.now();
        let mut st = self.state.lock();
        let name = st.containers.get(id).map(|c| c.config.name.clone()).ok_or_else(|| not_found("container", id))?;
        st.calls.push(Call::StopContainer(name.clone(), grace));
        let ignore = st.scripts.ignore_stop.contains(&name);
        if let Some(c) = st.containers.get_mut(id).filter(|c| c.state == ContainerState::Running && !ignore) {
            c.state = ContainerState::Exited;
            c.finished_at = Some(now);
            c.exit_code = SIGTERM_EXIT;
            c.reason = "Error".into();
            c.pid = None;
        }
        Ok(())
    }

    fn arm_stop(&self, id: &str, deadline: SystemTime, grace: Duration) -> Result<(), RuntimeError> {
        let until = deadline.duration_since(self.clock.now()).unwrap_or_default();
        let mut st = self.state.lock();
        let name = st.containers.get(id).map(|c| c.config.name.clone()).ok_or_else(|| not_found("container", id))?;
        st.calls.push(Call::ArmStop(name, until, grace));
        Ok(())
    }

    fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        let mut st = self.state.lock();
        // Unknown ids are fine: removal is idempotent, as with the process runtime.
        if let Some(c) = st.containers.remove(id) {
            st.calls.push(Call::RemoveContainer(c.config.name.clone()));
        }
        Ok(())
    }

    fn list_containers(&self) -> Result<Vec<ContainerInfo>, RuntimeError> {
        {
            let mut st = self.state.lock();
            if st.scripts.fail_list > 0 {
                st.scripts.fail_list -= 1;
                let source = std::io::Error::other("scripted failure");
                return Err(RuntimeError::State { path: "fake".into(), source });
            }
        }
        Ok(self.containers())
    }

    fn exec_start(&self, id: &str, _cmd: &[String], _timeout: Duration) -> Result<ExecStart, RuntimeError> {
        Err(not_found("container", id))
    }

    fn list_images(&self) -> Result<Vec<ImageInfo>, RuntimeError> {
        Ok(self.state.lock().images.values().cloned().collect())
    }

    fn image_status(&self, image: &str) -> Result<Option<ImageInfo>, RuntimeError> {
        let st = self.state.lock();
        Ok(st.images.get(image).or_else(|| st.images.values().find(|i| i.id == image)).cloned())
    }

    fn pull_image(
        &self,
        image: &str,
        auth: Option<&PullAuth>,
        _timeout: Duration,
        cancel: &mut Cancel,
    ) -> Result<String, RuntimeError> {
        let outcome = {
            let mut st = self.state.lock();
            st.calls.push(Call::PullImage(image.into(), auth.is_some()));
            if st.scripts.hang_pulls.contains(image) {
                None
            } else {
                let scripted = st.scripts.pulls.get_mut(image).and_then(VecDeque::pop_front);
                Some(scripted.unwrap_or_else(|| Err(format!("{image}: not found in the registry"))))
            }
        };
        let Some(outcome) = outcome else {
            let never = cancel.run(futures::future::pending::<()>());
            debug_assert!(never.is_none());
            return Err(RuntimeError::Cancelled { what: format!("pull of image {image}") });
        };
        match outcome {
            Ok(size) => {
                let info = image_info(image, size);
                let id = info.id.clone();
                self.state.lock().images.insert(image.into(), info);
                Ok(id)
            }
            Err(why) => {
                Err(RuntimeError::Process { action: format!("pulling {image}"), source: std::io::Error::other(why) })
            }
        }
    }

    fn remove_image(&self, image: &str) -> Result<(), RuntimeError> {
        let mut st = self.state.lock();
        let key = st.images.iter().find(|(k, i)| *k == image || i.id == image).map(|(k, _)| k.clone());
        let key = key.ok_or_else(|| not_found("image", image))?;
        if st.scripts.fail_remove.contains(&key) {
            let e = std::io::Error::other("image is being used by a container the runtime forgot");
            return Err(RuntimeError::Process { action: format!("removing {image}"), source: e });
        }
        st.calls.push(Call::RemoveImage(key.clone()));
        st.images.remove(&key);
        Ok(())
    }

    fn image_fs_info(&self) -> Result<Vec<ImageFsInfo>, RuntimeError> {
        let used_bytes = self.state.lock().images.values().map(|i| i.size).sum();
        Ok(vec![ImageFsInfo { mount_point: "/fake/images".into(), used_bytes, inodes_used: None }])
    }

    fn container_stats(&self) -> Result<Option<Vec<super::stats::RuntimeContainerStats>>, RuntimeError> {
        Ok(self.state.lock().scripts.container_stats.clone())
    }

    fn pod_sandbox_stats(&self) -> Result<Option<Vec<super::stats::RuntimePodStats>>, RuntimeError> {
        Ok(self.state.lock().scripts.pod_stats.clone())
    }

    fn pod_sandbox_ips(&self, id: &str) -> Vec<String> {
        self.state.lock().sandboxes.get(id).map(|s| s.ips.clone()).unwrap_or_default()
    }

    fn sandbox_image(&self) -> Option<&str> {
        self.sandbox_image.as_deref()
    }
}
