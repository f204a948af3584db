//! A device plugin for tests and benchmarks: a real grpcio server for the v1beta1
//! `DevicePlugin` service on a Unix socket, with knobs for what a test needs (health
//! changes, a preferred allocation, PreStartContainer, an Allocate or a PreStartContainer
//! that never answers) and a record of every call it got.
#![allow(dead_code)]

use crossbeam_channel::{unbounded, Sender};
use ferrolet::proto::deviceplugin as pb;
use futures::SinkExt;
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How the plugin behaves.
#[derive(Clone, Default)]
pub struct Behaviour {
    /// Advertise and require PreStartContainer.
    pub pre_start_required: bool,
    /// Advertise GetPreferredAllocation and answer with these IDs.
    pub preferred: Option<Vec<String>>,
    /// Never answer Allocate.
    pub allocate_hangs: bool,
    /// Never answer PreStartContainer.
    pub pre_start_hangs: bool,
    /// Device node the allocate response names for each device (`/dev/null` if unset).
    pub device_host_path: Option<String>,
}

/// Calls the plugin received.
#[derive(Default)]
pub struct Calls {
    pub allocate: Vec<Vec<String>>,
    pub preferred: Vec<(Vec<String>, Vec<String>, i32)>,
    pub pre_start: Vec<Vec<String>>,
    pub list_and_watch: usize,
}

#[derive(Default)]
struct Inner {
    devices: Vec<(String, bool)>,
    streams: Vec<Sender<Vec<(String, bool)>>>,
    calls: Calls,
    hung: Vec<grpcio::UnarySink<pb::AllocateResponse>>,
    hung_pre_start: Vec<grpcio::UnarySink<pb::PreStartContainerResponse>>,
}

#[derive(Clone)]
struct Service {
    inner: Arc<Mutex<Inner>>,
    behaviour: Behaviour,
}

fn list(devices: &[(String, bool)]) -> pb::ListAndWatchResponse {
    let mut r = pb::ListAndWatchResponse::new();
    for (id, healthy) in devices {
        let mut d = pb::Device::new();
        d.set_ID(id.clone());
        d.set_health(if *healthy { "Healthy" } else { "Unhealthy" }.into());
        r.mut_devices().push(d);
    }
    r
}

fn answer<T>(ctx: &grpcio::RpcContext, sink: grpcio::UnarySink<T>, value: T) {
    use futures::FutureExt;
    ctx.spawn(sink.success(value).map(|_| ()));
}

impl pb::DevicePlugin for Service {
    fn get_device_plugin_options(
        &mut self,
        ctx: grpcio::RpcContext,
        _req: pb::Empty,
        sink: grpcio::UnarySink<pb::DevicePluginOptions>,
    ) {
        let mut o = pb::DevicePluginOptions::new();
        o.set_pre_start_required(self.behaviour.pre_start_required);
        o.set_get_preferred_allocation_available(self.behaviour.preferred.is_some());
        answer(&ctx, sink, o);
    }

    fn list_and_watch(
        &mut self,
        _ctx: grpcio::RpcContext,
        _req: pb::Empty,
        mut sink: grpcio::ServerStreamingSink<pb::ListAndWatchResponse>,
    ) {
        let (tx, rx) = unbounded();
        let first = {
            let mut inner = self.inner.lock();
            inner.calls.list_and_watch += 1;
            inner.streams.push(tx);
            inner.devices.clone()
        };
        std::thread::spawn(move || {
            let mut next = Some(first);
            while let Some(devices) = next {
                let msg = (list(&devices), grpcio::WriteFlags::default());
                if futures::executor::block_on(sink.send(msg)).is_err() {
                    return;
                }
                next = rx.recv().ok();
            }
            let _ = futures::executor::block_on(sink.close());
        });
    }

    fn get_preferred_allocation(
        &mut self,
        ctx: grpcio::RpcContext,
        req: pb::PreferredAllocationRequest,
        sink: grpcio::UnarySink<pb::PreferredAllocationResponse>,
    ) {
        let c = &req.container_requests()[0];
        self.inner.lock().calls.preferred.push((
            c.available_deviceIDs().to_vec(),
            c.must_include_deviceIDs().to_vec(),
            c.allocation_size(),
        ));
        let mut r = pb::ContainerPreferredAllocationResponse::new();
        r.set_deviceIDs(self.behaviour.preferred.clone().unwrap_or_default());
        let mut resp = pb::PreferredAllocationResponse::new();
        resp.mut_container_responses().push(r);
        answer(&ctx, sink, resp);
    }

    fn allocate(
        &mut self,
        ctx: grpcio::RpcContext,
        req: pb::AllocateRequest,
        sink: grpcio::UnarySink<pb::AllocateResponse>,
    ) {
        let mut inner = self.inner.lock();
        let mut resp = pb::AllocateResponse::new();
        for c in req.container_requests() {
            let ids = c.devices_ids().to_vec();
            inner.calls.allocate.push(ids.clone());
            let mut r = pb::ContainerAllocateResponse::new();
            r.mut_envs().insert("EXAMPLE_DEVICES".into(), ids.join(","));
            for id in &ids {
                let mut d = pb::DeviceSpec::new();
                d.set_container_path(format!("/dev/example-{id}"));
                d.set_host_path(self.behaviour.device_host_path.clone().unwrap_or_else(|| "/dev/null".into()));
                d.set_permissions("rw".into());
                r.mut_devices().push(d);
            }
            resp.mut_container_responses().push(r);
        }
        if self.behaviour.allocate_hangs {
            inner.hung.push(sink);
            return;
        }
        drop(inner);
        answer(&ctx, sink, resp);
    }

    fn pre_start_container(
        &mut self,
        ctx: grpcio::RpcContext,
        req: pb::PreStartContainerRequest,
        sink: grpcio::UnarySink<pb::PreStartContainerResponse>,
    ) {
        let mut inner = self.inner.lock();
        inner.calls.pre_start.push(req.devices_ids().to_vec());
        if self.behaviour.pre_start_hangs {
            inner.hung_pre_start.push(sink);
            return;
        }
        drop(inner);
        answer(&ctx, sink, pb::PreStartContainerResponse::new());
    }
}

/// A running test plugin.
pub struct TestPlugin {
    pub resource: String,
    pub socket: PathBuf,
    dir: PathBuf,
    env: Arc<grpcio::Environment>,
    server: Option<grpcio::Server>,
    service: Service,
}

impl TestPlugin {
    /// Serves on `<dir>/<socket_name>` with `devices` (all healthy).
    pub fn start(dir: &Path, resource: &str, socket_name: &str, devices: &[&str], behaviour: Behaviour) -> TestPlugin {
        let env = Arc::new(grpcio::EnvBuilder::new().cq_count(1).name_prefix("test-plugin").build());
        let inner = Inner { devices: devices.iter().map(|d| (d.to_string(), true)).collect(), ..Inner::default() };
        let service = Service { inner: Arc::new(Mutex::new(inner)), behaviour };
        let mut p = TestPlugin {
            resource: resource.into(),
            socket: dir.join(socket_name),
            dir: dir.into(),
            env,
            server: None,
            service,
        };
        p.serve();
        p
    }

    fn serve(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        let mut server = grpcio::ServerBuilder::new(self.env.clone())
            .register_service(pb::create_device_plugin(self.service.clone()))
            .build()
            .unwrap();
        server
            .add_listening_port(format!("unix:{}", self.socket.display()), grpcio::ServerCredentials::insecure())
            .unwrap();
        server.start();
        self.server = Some(server);
    }

    /// Calls Register on the agent's `kubelet.sock`.
    pub fn register(&self) -> Result<(), String> {
        register_raw(&self.dir, "v1beta1", self.socket.file_name().unwrap().to_str().unwrap(), &self.resource)
    }

    /// Replaces the device list (id, healthy) and sends it on every open stream.
    pub fn set_devices(&self, devices: &[(&str, bool)]) {
        let mut inner = self.service.inner.lock();
        inner.devices = devices.iter().map(|(d, h)| (d.to_string(), *h)).collect();
        let list = inner.devices.clone();
        inner.streams.retain(|s| s.send(list.clone()).is_ok());
    }

    /// Ends every ListAndWatch stream and stops serving; the socket is removed too unless
    /// `keep_socket` (a plugin that crashed and is about to come back on the same path).
    pub fn stop(&mut self, keep_socket: bool) {
        self.service.inner.lock().streams.clear();
        if let Some(mut s) = self.server.take() {
            let _ = futures::executor::block_on(s.shutdown());
        }
        if !keep_socket {
            let _ = std::fs::remove_file(&self.socket);
        }
    }

    /// Serves again on the same socket (after `stop`).
    pub fn restart(&mut self) {
        self.serve();
    }

    /// What the plugin was asked.
    pub fn calls<T>(&self, f: impl FnOnce(&Calls) -> T) -> T {
        f(&self.service.inner.lock().calls)
    }
}

impl Drop for TestPlugin {
    fn drop(&mut self) {
        self.stop(false);
    }
}

/// A Register call with any values, as a misbehaving plugin might send.
pub fn register_raw(dir: &Path, version: &str, endpoint: &str, resource: &str) -> Result<(), String> {
    let env = Arc::new(grpcio::EnvBuilder::new().cq_count(1).build());
    let ch = grpcio::ChannelBuilder::new(env).connect(&format!("unix:{}", dir.join("kubelet.sock").display()));
    let client = pb::RegistrationClient::new(ch);
    let mut req = pb::RegisterRequest::new();
    req.set_version(version.into());
    req.set_endpoint(endpoint.into());
    req.set_resource_name(resource.into());
    let opt = grpcio::CallOption::default().timeout(Duration::from_secs(20)).wait_for_ready(true);
    client.register_opt(&req, opt).map(|_| ()).map_err(|e| match e {
        grpcio::Error::RpcFailure(s) => s.message().to_string(),
        other => other.to_string(),
    })
}
