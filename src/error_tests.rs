//! Every error type of the crate says its source once: `util::Chain` prints a message and
//! then each source after `: `, so a message that also prints its `#[source]` says the
//! cause twice. One value of each type (each variant that has a source, with a source that
//! has its own text) is run through `Chain`, which must not show any segment twice.

use std::error::Error;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::base::errors::Chain;

/// One error value and the full name of its type.
pub(crate) type Sample = (&'static str, Box<dyn Error>);

/// `e` as a sample, named by its type.
pub(crate) fn sample<E: Error + 'static>(e: E) -> Sample {
    (std::any::type_name::<E>(), Box::new(e))
}

/// An OS error with its own text and no source of its own.
pub(crate) fn io_cause() -> io::Error {
    io::Error::other("the disk is on fire")
}

fn grpc_cause() -> grpcio::Error {
    grpcio::Error::RpcFailure(grpcio::RpcStatus::with_message(
        grpcio::RpcStatusCode::UNAVAILABLE,
        "the plugin went away".into(),
    ))
}

fn json_cause() -> serde_json::Error {
    serde_json::from_str::<u8>("not json").unwrap_err()
}

fn input_cause() -> crate::base::inputfile::InputFileError {
    crate::base::inputfile::InputFileError::Read(io_cause())
}

fn cgroup_cause() -> crate::node::cm::cgroupfs::CgroupError {
    crate::node::cm::cgroupfs::CgroupError::CreateCgroup { path: "/sys/fs/cgroup/kubepods".into(), source: io_cause() }
}

fn cri_cause() -> crate::node::runtime::cri::CriError {
    crate::node::runtime::cri::CriError::Call {
        endpoint: "unix:///run/containerd/containerd.sock".into(),
        call: "RunPodSandbox",
        source: Box::new(grpc_cause()),
    }
}

fn runtime_cause() -> crate::node::runtime::RuntimeError {
    crate::node::runtime::RuntimeError::Cri { object: "sandbox sb1".into(), source: cri_cause() }
}

fn api_cause() -> crate::cluster::apiserver::ApiError {
    crate::cluster::apiserver::ApiError::Transport {
        method: "GET",
        url: "https://10.0.0.1:6443/api/v1/pods".into(),
        source: ureq::Error::Io(io_cause()),
    }
}

fn ownership_cause() -> crate::node::cm::ownership::OwnershipError {
    crate::node::cm::ownership::OwnershipError::CreateLock {
        path: "/run/ferrolet/kubepods.lock".into(),
        source: io_cause(),
    }
}

fn thread_set_cause() -> crate::base::manager::WorkerSetError {
    crate::base::manager::WorkerSetError::Spawn { name: "fl-probe-dns".into(), source: io_cause() }
}

fn samples() -> Vec<Sample> {
    use crate::node::runtime::RuntimeError;
    let path = || PathBuf::from("/var/lib/ferrolet/x.json");
    let mut all = vec![
        sample(crate::base::sealed::SealError::ReadKey { path: "/etc/ferrolet/kept.key".into(), source: io_cause() }),
        sample(crate::base::sealed::SealError::Authentication),
        sample(crate::cluster::apiserver::objects::KeepError::Key(crate::base::sealed::SealError::BadKey {
            path: "/etc/ferrolet/kept.key".into(),
            problem: "has mode 0644: it must be 0600".into(),
        })),
        sample(crate::cluster::apiserver::objects::KeepError::Io { path: path(), source: io_cause() }),
        sample(crate::cluster::apiserver::objects::KeepError::Full { path: path() }),
        sample(crate::pods::dir::atomic::AtomicWriteError::Apply {
            dir: "/var/lib/ferrolet/pods/u/volumes/kubernetes.io~configmap/cfg".into(),
            step: "swap ..data".into(),
            source: io_cause(),
        }),
        sample(crate::server::pool::PoolError::SetUpReactor { source: io_cause() }),
        sample(crate::server::pool::PoolError::SpawnThread { name: "fl-api", source: io_cause() }),
        sample(crate::server::routes::EventFilterError::CheckField { field: "reason".into() }),
        sample(crate::server::ServerError::Bind { addr: "127.0.0.1:10250".into(), source: io_cause() }),
        sample(crate::server::ServerError::Spawn {
            addr: "127.0.0.1:10250".into(),
            source: crate::server::pool::PoolError::SetUpReactor { source: io_cause() },
        }),
        sample(crate::server::http::HeadError::LineTooLong),
        sample(crate::server::stats::SummaryError::TooLarge { max: 16 << 20, source: json_cause() }),
        sample(crate::server::stats::Unavailable::NotYet),
        sample(crate::server::stats::Unavailable::Stale { at: std::time::UNIX_EPOCH }),
        sample(crate::node::runtime::process::ExecLimitsError::CheckArgument { index: 1, len: 200_000 }),
        sample(cri_cause()),
        sample(crate::node::runtime::cri::translate::TranslateError::Encode {
            what: "container",
            source: json_cause(),
        }),
        sample(crate::node::runtime::cri::stream::StreamError::Io {
            url: "http://127.0.0.1:1234/exec/x".into(),
            source: io_cause(),
        }),
        sample(RuntimeError::State { path: path(), source: io_cause() }),
        sample(runtime_cause()),
        sample(RuntimeError::Translate {
            object: "container app".into(),
            source: crate::node::runtime::cri::translate::TranslateError::Encode {
                what: "container",
                source: json_cause(),
            },
        }),
        sample(RuntimeError::Stream {
            object: "container app".into(),
            source: crate::node::runtime::cri::stream::StreamError::Io {
                url: "http://127.0.0.1:1234/exec/x".into(),
                source: io_cause(),
            },
        }),
        sample(RuntimeError::Process { action: "spawn the shim".into(), source: io_cause() }),
        sample(crate::config::ReservationError {
            key: "kube_reserved".into(),
            problem: crate::config::ReservationProblem::ParseQuantity(crate::api::quantity::QuantityError {
                input: "1.5.0".into(),
            }),
        }),
        sample(crate::config::ReservationProblem::SplitEntry { entry: "cpu".into() }),
        sample(crate::config::HostError::NotWritable { path: path(), source: io_cause() }),
        sample(crate::config::HostError::Stat { path: path(), source: io_cause() }),
        sample(crate::config::HostError::NotLocal {
            listen: "10.9.9.9:10250".into(),
            ip: [10, 9, 9, 9].into(),
            source: io_cause(),
        }),
        sample(crate::config::HostError::Cgroups(cgroup_cause())),
        sample(crate::config::ParseChoiceError { value: "v3".into(), allowed: vec!["v1", "v2"] }),
        sample(crate::cluster::ClusterError::Client {
            path: "/etc/ferrolet/kubeconfig".into(),
            source: Box::new(api_cause()),
        }),
        sample(crate::base::manager::StopTimeout { name: "fl-pods".into(), timeout: Duration::from_secs(5) }),
        sample(crate::base::manager::JobError::Spawn(io_cause())),
        sample(crate::node::images::keyring::KeyringError::BadAuth { registry: "reg.io".into(), reason: "not base64" }),
        sample(ownership_cause()),
        sample(crate::node::cm::ownership::OwnershipError::Record {
            cgroup: "kubepods/pod1".into(),
            path: path(),
            source: io_cause(),
        }),
        sample(crate::node::cm::CmError::Ownership(ownership_cause())),
        sample(crate::node::cm::cgroupfs::CgroupError::ReadMountinfo {
            path: "/proc/self/mountinfo".into(),
            source: io_cause(),
        }),
        sample(cgroup_cause()),
        sample(crate::node::cm::cgroupfs::CgroupError::WriteControlFile {
            path: "/sys/fs/cgroup/kubepods/cpu.weight".into(),
            value: "100".into(),
            source: io_cause(),
        }),
        sample(crate::node::cm::cgroupfs::CgroupError::RemoveCgroup {
            path: "/sys/fs/cgroup/kubepods".into(),
            source: io_cause(),
        }),
        sample(crate::node::cm::cgroupfs::CgroupError::Systemd {
            unit: "kubepods-burstable.slice".into(),
            action: "starting",
            source: Box::new(crate::base::dbus::DbusError::Remote {
                name: "org.freedesktop.systemd1.UnitExists".into(),
                message: "Unit kubepods-burstable.slice was already loaded or has a fragment file.".into(),
            }),
        }),
        sample(crate::base::dbus::DbusError::Connect {
            path: crate::base::dbus::SYSTEM_BUS.into(),
            source: io_cause(),
        }),
        sample(crate::base::dbus::DbusError::Timeout(Duration::from_secs(10))),
        sample(crate::api::quantity::QuantityError { input: "1.5.0".into() }),
        sample(crate::node::eviction::ThresholdError::UnsupportedSignal { signal: "mem.available".into() }),
        sample(crate::node::imagegc::DeleteUnusedError::ListImages { source: runtime_cause() }),
        sample(crate::node::imagegc::DeleteUnusedError::RemoveImages {
            freed: 1 << 20,
            images: vec!["sha256:a".into(), "sha256:b".into()],
            source: runtime_cause(),
        }),
        sample(crate::api::manifest::ManifestError { file: "web.yaml".into(), doc: Some(2), problem: "bad".into() }),
        sample(crate::node::devicemanager::registration::RegistrationError::StatSocket {
            path: "/var/lib/kubelet/device-plugins/gpu.sock".into(),
            source: io_cause(),
        }),
        sample(crate::node::devicemanager::registration::RegistrationError::PrepareDir {
            dir: "/var/lib/kubelet/device-plugins".into(),
            source: io_cause(),
        }),
        sample(crate::node::devicemanager::registration::RegistrationError::BuildServer(grpc_cause())),
        sample(crate::node::devicemanager::registration::RegistrationError::Listen {
            socket: "/var/lib/kubelet/device-plugins/kubelet.sock".into(),
            source: grpc_cause(),
        }),
        sample(crate::node::devicemanager::state::StateError::ReuseUnhealthy),
        sample(crate::node::devicemanager::endpoint::EndpointError::GetOptions(grpc_cause())),
        sample(crate::node::devicemanager::DeviceError::GetPreferredAllocation {
            resource: "example.com/gpu".into(),
            source: Arc::new(grpc_cause()),
        }),
        sample(crate::node::devicemanager::DeviceError::Allocate {
            resource: "example.com/gpu".into(),
            source: Arc::new(grpc_cause()),
        }),
        sample(crate::node::devicemanager::DeviceError::SpawnPreStart(Arc::new(io_cause()))),
        sample(crate::node::devicemanager::DeviceError::PreStartContainer {
            resource: "example.com/gpu".into(),
            source: Arc::new(grpc_cause()),
        }),
        sample(crate::node::devicemanager::checkpoint::CheckpointError::Encode(json_cause())),
        sample(crate::node::devicemanager::checkpoint::CheckpointError::Write { path: path(), source: io_cause() }),
        sample(crate::node::devicemanager::checkpoint::CheckpointError::Read { path: path(), source: io_cause() }),
        sample(crate::node::devicemanager::checkpoint::CheckpointError::Decode { path: path(), source: json_cause() }),
        sample(crate::node::devicemanager::checkpoint::CheckpointError::DecodeData {
            path: path(),
            source: json_cause(),
        }),
        sample(crate::agent::AgentError::Runtime { runtime: "cri".into(), source: runtime_cause() }),
        sample(crate::agent::AgentError::Drain { what: "stopping the sandboxes".into(), source: runtime_cause() }),
        sample(crate::agent::AgentError::ReadRuntime { runtime: "process".into(), source: runtime_cause() }),
        sample(crate::agent::AgentError::Spawn { name: "fl-pods".into(), source: io_cause() }),
        sample(crate::agent::AgentError::Cri { source: cri_cause() }),
        sample(crate::agent::AgentError::Cluster {
            source: Box::new(crate::cluster::ClusterError::Client {
                path: "/etc/ferrolet/kubeconfig".into(),
                source: Box::new(api_cause()),
            }),
        }),
        sample(crate::agent::AgentError::Shared { source: ownership_cause() }),
        sample(crate::node::events::sink::SinkError::Transient("the apiserver is away".into())),
        sample(crate::node::dns::DnsError::ReadResolvConf { path: "/etc/resolv.conf".into(), source: input_cause() }),
        sample(crate::node::dns::DnsError::ReadNodeHosts { path: "/etc/hosts".into(), source: input_cause() }),
        sample(crate::node::dns::DnsError::CreatePodDir { path: path(), source: io_cause() }),
        sample(crate::node::dns::DnsError::WriteHostsFile { path: path(), source: io_cause() }),
        sample(crate::node::prober::resolve::ResolveError::StartLookup { source: io_cause() }),
        sample(crate::node::prober::resolve::ResolveError::Lookup(io_cause())),
        sample(crate::node::prober::reaper::ReaperError::MakeWakePipe { source: io_cause() }),
        sample(crate::node::prober::reaper::ReaperError::StartThread(thread_set_cause())),
        sample(crate::node::prober::net::NetProbesError::MakeWakePipe { source: io_cause() }),
        sample(crate::node::prober::net::NetProbesError::StartThread(thread_set_cause())),
        sample(crate::node::prober::ProberError::ReadResults { path: path(), source: io_cause() }),
        sample(crate::node::prober::ProberError::SetAside { path: path(), source: io_cause() }),
        sample(crate::node::prober::ProberError::SaveResults { path: path(), source: io_cause() }),
        sample(thread_set_cause()),
        sample(crate::cluster::apiserver::kubeconfig::KubeconfigError {
            file: "/etc/ferrolet/kubeconfig".into(),
            field: "users[0].user.token".into(),
            message: "is empty".into(),
        }),
        sample(crate::cluster::apiserver::ApiError::Credentials {
            what: "client key",
            source: ureq::Error::Io(io_cause()),
        }),
        sample(crate::cluster::apiserver::ApiError::NoCredentials { why: "TLS bootstrap: there is none yet".into() }),
        sample(crate::cluster::certs::store::StoreError {
            path: "/var/lib/ferrolet/pki/kubelet-client-current.pem".into(),
            message: "the key does not belong to the certificate".into(),
        }),
        sample(crate::cluster::apiserver::ApiError::SystemCa {
            path: "/etc/ssl/certs/ca-certificates.crt".into(),
            source: input_cause(),
        }),
        sample(crate::cluster::apiserver::ApiError::TokenFile {
            path: "/etc/ferrolet/token".into(),
            source: input_cause(),
        }),
        sample(api_cause()),
        sample(crate::base::timefmt::DurationError::ParseDuration { text: "ten".into() }),
        sample(crate::config::ConfigError::Read { path: "/etc/ferrolet/ferrolet.toml".into(), source: input_cause() }),
        sample(crate::config::ConfigError::Host {
            file: "ferrolet.toml".into(),
            key: "state_dir".into(),
            source: crate::config::HostError::Stat { path: path(), source: io_cause() },
        }),
        sample(crate::config::StateGroupError::LookUpGroup { group: "ferrolet".into(), source: io_cause() }),
        sample(crate::cli::ParseOutputError { value: "xml".into() }),
        sample(crate::pods::podcmd::PodCmdError::List { what: "containers", source: runtime_cause() }),
        sample(crate::pods::podcmd::PodCmdError::Logs {
            subject: "default/web app".into(),
            source: crate::node::podlogs::LogError::Read { path: path(), source: io_cause() },
        }),
        sample(crate::pods::podcmd::PodCmdError::Follow { subject: "default/web app".into(), source: runtime_cause() }),
        sample(crate::pods::podcmd::PodCmdError::Exec { subject: "default/web app".into(), source: runtime_cause() }),
        sample(crate::pods::podcmd::PodCmdError::Signals(io_cause())),
        sample(crate::pods::podcmd::PodCmdError::Write(io_cause())),
        sample(crate::pods::dir::VolumeError { volume: "data".into(), message: "cannot make /x".into() }),
        sample(crate::node::lifecycle::HookError::SpawnThread { source: io_cause() }),
        sample(crate::pods::ContainerStartError::CreateContainer { source: runtime_cause() }),
        sample(crate::pods::ContainerStartError::StartContainer { source: runtime_cause() }),
        sample(input_cause()),
        sample(crate::base::inputfile::InputFileError::NotUtf8(String::from_utf8(vec![0xff]).unwrap_err())),
        sample(crate::node::podlogs::Malformed::Timestamp),
        sample(crate::node::podlogs::LogError::Read { path: path(), source: io_cause() }),
        sample(crate::node::podlogs::LogError::Write(io_cause())),
        sample(crate::agent::kubeletapi::KubeletApiError::Tls {
            key: "server.tls_cert_file",
            source: Box::new(crate::server::kubelet::tls::TlsError::Read { path: path(), source: input_cause() }),
        }),
        sample(crate::agent::kubeletapi::KubeletApiError::Start(crate::server::kubelet::StartError::Bind {
            addr: "0.0.0.0:10250".into(),
            source: io_cause(),
        })),
        sample(crate::server::kubelet::StartError::Spawn(io_cause())),
        sample(crate::server::kubelet::tls::TlsError::Read { path: path(), source: input_cause() }),
        sample(crate::server::kubelet::spdy::SpdyError::UnsupportedVersion { version: 2 }),
        sample(crate::server::kubelet::websocket::HandshakeError::Protocol {
            offered: vec!["v5.channel.k8s.io".into()],
            served: vec!["v4.channel.k8s.io"],
        }),
        sample(crate::server::kubelet::websocket::FrameError::ControlTooLong { len: 126 }),
        sample(crate::base::x509::X509Error::TooManyNames { count: 300 }),
    ];
    all.extend(crate::node::prober::httpget_error_samples());
    all.extend(crate::node::devicemanager::endpoint::error_samples());
    all
}

/// The first segment (text between `: `) that `text` has twice.
fn repeated_segment(text: &str) -> Option<&str> {
    let segments: Vec<&str> = text.split(": ").collect();
    segments.iter().enumerate().find(|(i, s)| segments[..*i].contains(s)).map(|(_, s)| *s)
}

/// The names of the error types `src/` defines outside test code: each type deriving
/// `thiserror::Error`, read from the source text.
fn defined_error_types() -> Vec<String> {
    let mut names = Vec::new();
    let mut dirs = vec![PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/src"))];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "tests" {
                    dirs.push(path);
                }
                continue;
            }
            if !name.ends_with(".rs") || name.ends_with("tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
            let mut derived = false;
            for line in code.lines().map(str::trim) {
                if line.starts_with("#[derive(") && line.contains("thiserror::Error") {
                    derived = true;
                } else if derived && !line.starts_with("#[") && !line.starts_with("///") {
                    let words: Vec<&str> = line.split_whitespace().collect();
                    let at = words.iter().position(|w| *w == "enum" || *w == "struct").unwrap();
                    names.push(words[at + 1].trim_end_matches(['{', ';', '(']).to_string());
                    derived = false;
                }
            }
        }
    }
    names.sort();
    names
}

#[test]
fn no_error_message_repeats_its_source() {
    for (name, e) in samples() {
        let text = Chain(e.as_ref()).to_string();
        assert!(repeated_segment(&text).is_none(), "{name} says {:?} twice: {text}", repeated_segment(&text));
    }
}

#[test]
fn every_error_type_of_the_crate_has_a_sample() {
    let mut sampled: Vec<String> = samples().iter().map(|(name, _)| name.to_string()).collect();
    sampled.sort();
    sampled.dedup();
    let mut sampled: Vec<String> = sampled.iter().map(|n| n.rsplit("::").next().unwrap().to_string()).collect();
    sampled.sort();
    assert_eq!(sampled, defined_error_types());
}

#[test]
fn a_repeated_segment_is_found() {
    let cases = [
        ("GET https://a/: io: refused (os error 111): io: refused (os error 111)", Some("io")),
        ("cannot read x: the disk is on fire", None),
        ("token file /t: cannot read: the disk is on fire: the disk is on fire", Some("the disk is on fire")),
        ("no segments", None),
    ];
    for (text, want) in cases {
        assert_eq!(repeated_segment(text), want, "{text}");
    }
}
