// This file is generated. Do not edit
// @generated

// https://github.com/Manishearth/rust-clippy/issues/702


const METHOD_RUNTIME_SERVICE_VERSION: ::grpcio::Method<super::cri::VersionRequest, super::cri::VersionResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.RuntimeService/Version",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_RUNTIME_SERVICE_RUN_POD_SANDBOX: ::grpcio::Method<super::cri::RunPodSandboxRequest, super::cri::RunPodSandboxResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.RuntimeService/RunPodSandbox",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_RUNTIME_SERVICE_STOP_POD_SANDBOX: ::grpcio::Method<super::cri::StopPodSandboxRequest, super::cri::StopPodSandboxResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.RuntimeService/StopPodSandbox",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_RUNTIME_SERVICE_REMOVE_POD_SANDBOX: ::grpcio::Method<super::cri::RemovePodSandboxRequest, super::cri::RemovePodSandboxResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.RuntimeService/RemovePodSandbox",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_RUNTIME_SERVICE_POD_SANDBOX_STATUS: ::grpcio::Method<super::cri::PodSandboxStatusRequest, super::cri::PodSandboxStatusResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.RuntimeService/PodSandboxStatus",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_RUNTIME_SERVICE_LIST_POD_SANDBOX: ::grpcio::Method<super::cri::ListPodSandboxRequest, super::cri::ListPodSandboxResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.RuntimeService/ListPodSandbox",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_RUNTIME_SERVICE_CREATE_CONTAINER: ::grpcio::Method<super::cri::CreateContainerRequest, super::cri::CreateContainerResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.RuntimeService/CreateContainer",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_RUNTIME_SERVICE_START_CONTAINER: ::grpcio::Method<super::cri::StartContainerRequest, super::cri::StartContainerResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.RuntimeService/StartContainer",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_RUNTIME_SERVICE_STOP_CONTAINER: ::grpcio::Method<super::cri::StopContainerRequest, super::cri::StopContainerResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.RuntimeService/StopContainer",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_RUNTIME_SERVICE_REMOVE_CONTAINER: ::grpcio::Method<super::cri::RemoveContainerRequest, super::cri::RemoveContainerResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.RuntimeService/RemoveContainer",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_RUNTIME_SERVICE_LIST_CONTAINERS: ::grpcio::Method<super::cri::ListContainersRequest, super::cri::ListContainersResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.RuntimeService/ListContainers",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_RUNTIME_SERVICE_LIST_CONTAINER_STATS: ::grpcio::Method<super::cri::ListContainerStatsRequest, super::cri::ListContainerStatsResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.RuntimeService/ListContainerStats",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_RUNTIME_SERVICE_LIST_POD_SANDBOX_STATS: ::grpcio::Method<super::cri::ListPodSandboxStatsRequest, super::cri::ListPodSandboxStatsResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.RuntimeService/ListPodSandboxStats",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_RUNTIME_SERVICE_CONTAINER_STATUS: ::grpcio::Method<super::cri::ContainerStatusRequest, super::cri::ContainerStatusResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.RuntimeService/ContainerStatus",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_RUNTIME_SERVICE_UPDATE_CONTAINER_RESOURCES: ::grpcio::Method<super::cri::UpdateContainerResourcesRequest, super::cri::UpdateContainerResourcesResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.RuntimeService/UpdateContainerResources",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_RUNTIME_SERVICE_REOPEN_CONTAINER_LOG: ::grpcio::Method<super::cri::ReopenContainerLogRequest, super::cri::ReopenContainerLogResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.RuntimeService/ReopenContainerLog",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_RUNTIME_SERVICE_EXEC_SYNC: ::grpcio::Method<super::cri::ExecSyncRequest, super::cri::ExecSyncResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.RuntimeService/ExecSync",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_RUNTIME_SERVICE_EXEC: ::grpcio::Method<super::cri::ExecRequest, super::cri::ExecResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.RuntimeService/Exec",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_RUNTIME_SERVICE_ATTACH: ::grpcio::Method<super::cri::AttachRequest, super::cri::AttachResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.RuntimeService/Attach",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_RUNTIME_SERVICE_PORT_FORWARD: ::grpcio::Method<super::cri::PortForwardRequest, super::cri::PortForwardResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.RuntimeService/PortForward",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_RUNTIME_SERVICE_STATUS: ::grpcio::Method<super::cri::StatusRequest, super::cri::StatusResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.RuntimeService/Status",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_RUNTIME_SERVICE_RUNTIME_CONFIG: ::grpcio::Method<super::cri::RuntimeConfigRequest, super::cri::RuntimeConfigResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.RuntimeService/RuntimeConfig",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

#[derive(Clone)]
pub struct RuntimeServiceClient {
    pub client: ::grpcio::Client,
}

impl RuntimeServiceClient {
    pub fn new(channel: ::grpcio::Channel) -> Self {
        RuntimeServiceClient {
            client: ::grpcio::Client::new(channel),
        }
    }

    pub fn version_opt(&self, req: &super::cri::VersionRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::VersionResponse> {
        self.client.unary_call(&METHOD_RUNTIME_SERVICE_VERSION, req, opt)
    }

    pub fn version(&self, req: &super::cri::VersionRequest) -> ::grpcio::Result<super::cri::VersionResponse> {
        self.version_opt(req, ::grpcio::CallOption::default())
    }

    pub fn version_async_opt(&self, req: &super::cri::VersionRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::VersionResponse>> {
        self.client.unary_call_async(&METHOD_RUNTIME_SERVICE_VERSION, req, opt)
    }

    pub fn version_async(&self, req: &super::cri::VersionRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::VersionResponse>> {
        self.version_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn run_pod_sandbox_opt(&self, req: &super::cri::RunPodSandboxRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::RunPodSandboxResponse> {
        self.client.unary_call(&METHOD_RUNTIME_SERVICE_RUN_POD_SANDBOX, req, opt)
    }

    pub fn run_pod_sandbox(&self, req: &super::cri::RunPodSandboxRequest) -> ::grpcio::Result<super::cri::RunPodSandboxResponse> {
        self.run_pod_sandbox_opt(req, ::grpcio::CallOption::default())
    }

    pub fn run_pod_sandbox_async_opt(&self, req: &super::cri::RunPodSandboxRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::RunPodSandboxResponse>> {
        self.client.unary_call_async(&METHOD_RUNTIME_SERVICE_RUN_POD_SANDBOX, req, opt)
    }

    pub fn run_pod_sandbox_async(&self, req: &super::cri::RunPodSandboxRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::RunPodSandboxResponse>> {
        self.run_pod_sandbox_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn stop_pod_sandbox_opt(&self, req: &super::cri::StopPodSandboxRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::StopPodSandboxResponse> {
        self.client.unary_call(&METHOD_RUNTIME_SERVICE_STOP_POD_SANDBOX, req, opt)
    }

    pub fn stop_pod_sandbox(&self, req: &super::cri::StopPodSandboxRequest) -> ::grpcio::Result<super::cri::StopPodSandboxResponse> {
        self.stop_pod_sandbox_opt(req, ::grpcio::CallOption::default())
    }

    pub fn stop_pod_sandbox_async_opt(&self, req: &super::cri::StopPodSandboxRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::StopPodSandboxResponse>> {
        self.client.unary_call_async(&METHOD_RUNTIME_SERVICE_STOP_POD_SANDBOX, req, opt)
    }

    pub fn stop_pod_sandbox_async(&self, req: &super::cri::StopPodSandboxRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::StopPodSandboxResponse>> {
        self.stop_pod_sandbox_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn remove_pod_sandbox_opt(&self, req: &super::cri::RemovePodSandboxRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::RemovePodSandboxResponse> {
        self.client.unary_call(&METHOD_RUNTIME_SERVICE_REMOVE_POD_SANDBOX, req, opt)
    }

    pub fn remove_pod_sandbox(&self, req: &super::cri::RemovePodSandboxRequest) -> ::grpcio::Result<super::cri::RemovePodSandboxResponse> {
        self.remove_pod_sandbox_opt(req, ::grpcio::CallOption::default())
    }

    pub fn remove_pod_sandbox_async_opt(&self, req: &super::cri::RemovePodSandboxRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::RemovePodSandboxResponse>> {
        self.client.unary_call_async(&METHOD_RUNTIME_SERVICE_REMOVE_POD_SANDBOX, req, opt)
    }

    pub fn remove_pod_sandbox_async(&self, req: &super::cri::RemovePodSandboxRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::RemovePodSandboxResponse>> {
        self.remove_pod_sandbox_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn pod_sandbox_status_opt(&self, req: &super::cri::PodSandboxStatusRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::PodSandboxStatusResponse> {
        self.client.unary_call(&METHOD_RUNTIME_SERVICE_POD_SANDBOX_STATUS, req, opt)
    }

    pub fn pod_sandbox_status(&self, req: &super::cri::PodSandboxStatusRequest) -> ::grpcio::Result<super::cri::PodSandboxStatusResponse> {
        self.pod_sandbox_status_opt(req, ::grpcio::CallOption::default())
    }

    pub fn pod_sandbox_status_async_opt(&self, req: &super::cri::PodSandboxStatusRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::PodSandboxStatusResponse>> {
        self.client.unary_call_async(&METHOD_RUNTIME_SERVICE_POD_SANDBOX_STATUS, req, opt)
    }

    pub fn pod_sandbox_status_async(&self, req: &super::cri::PodSandboxStatusRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::PodSandboxStatusResponse>> {
        self.pod_sandbox_status_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn list_pod_sandbox_opt(&self, req: &super::cri::ListPodSandboxRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::ListPodSandboxResponse> {
        self.client.unary_call(&METHOD_RUNTIME_SERVICE_LIST_POD_SANDBOX, req, opt)
    }

    pub fn list_pod_sandbox(&self, req: &super::cri::ListPodSandboxRequest) -> ::grpcio::Result<super::cri::ListPodSandboxResponse> {
        self.list_pod_sandbox_opt(req, ::grpcio::CallOption::default())
    }

    pub fn list_pod_sandbox_async_opt(&self, req: &super::cri::ListPodSandboxRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::ListPodSandboxResponse>> {
        self.client.unary_call_async(&METHOD_RUNTIME_SERVICE_LIST_POD_SANDBOX, req, opt)
    }

    pub fn list_pod_sandbox_async(&self, req: &super::cri::ListPodSandboxRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::ListPodSandboxResponse>> {
        self.list_pod_sandbox_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn create_container_opt(&self, req: &super::cri::CreateContainerRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::CreateContainerResponse> {
        self.client.unary_call(&METHOD_RUNTIME_SERVICE_CREATE_CONTAINER, req, opt)
    }

    pub fn create_container(&self, req: &super::cri::CreateContainerRequest) -> ::grpcio::Result<super::cri::CreateContainerResponse> {
        self.create_container_opt(req, ::grpcio::CallOption::default())
    }

    pub fn create_container_async_opt(&self, req: &super::cri::CreateContainerRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::CreateContainerResponse>> {
        self.client.unary_call_async(&METHOD_RUNTIME_SERVICE_CREATE_CONTAINER, req, opt)
    }

    pub fn create_container_async(&self, req: &super::cri::CreateContainerRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::CreateContainerResponse>> {
        self.create_container_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn start_container_opt(&self, req: &super::cri::StartContainerRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::StartContainerResponse> {
        self.client.unary_call(&METHOD_RUNTIME_SERVICE_START_CONTAINER, req, opt)
    }

    pub fn start_container(&self, req: &super::cri::StartContainerRequest) -> ::grpcio::Result<super::cri::StartContainerResponse> {
        self.start_container_opt(req, ::grpcio::CallOption::default())
    }

    pub fn start_container_async_opt(&self, req: &super::cri::StartContainerRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::StartContainerResponse>> {
        self.client.unary_call_async(&METHOD_RUNTIME_SERVICE_START_CONTAINER, req, opt)
    }

    pub fn start_container_async(&self, req: &super::cri::StartContainerRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::StartContainerResponse>> {
        self.start_container_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn stop_container_opt(&self, req: &super::cri::StopContainerRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::StopContainerResponse> {
        self.client.unary_call(&METHOD_RUNTIME_SERVICE_STOP_CONTAINER, req, opt)
    }

    pub fn stop_container(&self, req: &super::cri::StopContainerRequest) -> ::grpcio::Result<super::cri::StopContainerResponse> {
        self.stop_container_opt(req, ::grpcio::CallOption::default())
    }

    pub fn stop_container_async_opt(&self, req: &super::cri::StopContainerRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::StopContainerResponse>> {
        self.client.unary_call_async(&METHOD_RUNTIME_SERVICE_STOP_CONTAINER, req, opt)
    }

    pub fn stop_container_async(&self, req: &super::cri::StopContainerRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::StopContainerResponse>> {
        self.stop_container_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn remove_container_opt(&self, req: &super::cri::RemoveContainerRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::RemoveContainerResponse> {
        self.client.unary_call(&METHOD_RUNTIME_SERVICE_REMOVE_CONTAINER, req, opt)
    }

    pub fn remove_container(&self, req: &super::cri::RemoveContainerRequest) -> ::grpcio::Result<super::cri::RemoveContainerResponse> {
        self.remove_container_opt(req, ::grpcio::CallOption::default())
    }

    pub fn remove_container_async_opt(&self, req: &super::cri::RemoveContainerRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::RemoveContainerResponse>> {
        self.client.unary_call_async(&METHOD_RUNTIME_SERVICE_REMOVE_CONTAINER, req, opt)
    }

    pub fn remove_container_async(&self, req: &super::cri::RemoveContainerRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::RemoveContainerResponse>> {
        self.remove_container_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn list_containers_opt(&self, req: &super::cri::ListContainersRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::ListContainersResponse> {
        self.client.unary_call(&METHOD_RUNTIME_SERVICE_LIST_CONTAINERS, req, opt)
    }

    pub fn list_containers(&self, req: &super::cri::ListContainersRequest) -> ::grpcio::Result<super::cri::ListContainersResponse> {
        self.list_containers_opt(req, ::grpcio::CallOption::default())
    }

    pub fn list_containers_async_opt(&self, req: &super::cri::ListContainersRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::ListContainersResponse>> {
        self.client.unary_call_async(&METHOD_RUNTIME_SERVICE_LIST_CONTAINERS, req, opt)
    }

    pub fn list_containers_async(&self, req: &super::cri::ListContainersRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::ListContainersResponse>> {
        self.list_containers_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn list_container_stats_opt(&self, req: &super::cri::ListContainerStatsRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::ListContainerStatsResponse> {
        self.client.unary_call(&METHOD_RUNTIME_SERVICE_LIST_CONTAINER_STATS, req, opt)
    }

    pub fn list_container_stats(&self, req: &super::cri::ListContainerStatsRequest) -> ::grpcio::Result<super::cri::ListContainerStatsResponse> {
        self.list_container_stats_opt(req, ::grpcio::CallOption::default())
    }

    pub fn list_container_stats_async_opt(&self, req: &super::cri::ListContainerStatsRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::ListContainerStatsResponse>> {
        self.client.unary_call_async(&METHOD_RUNTIME_SERVICE_LIST_CONTAINER_STATS, req, opt)
    }

    pub fn list_container_stats_async(&self, req: &super::cri::ListContainerStatsRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::ListContainerStatsResponse>> {
        self.list_container_stats_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn list_pod_sandbox_stats_opt(&self, req: &super::cri::ListPodSandboxStatsRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::ListPodSandboxStatsResponse> {
        self.client.unary_call(&METHOD_RUNTIME_SERVICE_LIST_POD_SANDBOX_STATS, req, opt)
    }

    pub fn list_pod_sandbox_stats(&self, req: &super::cri::ListPodSandboxStatsRequest) -> ::grpcio::Result<super::cri::ListPodSandboxStatsResponse> {
        self.list_pod_sandbox_stats_opt(req, ::grpcio::CallOption::default())
    }

    pub fn list_pod_sandbox_stats_async_opt(&self, req: &super::cri::ListPodSandboxStatsRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::ListPodSandboxStatsResponse>> {
        self.client.unary_call_async(&METHOD_RUNTIME_SERVICE_LIST_POD_SANDBOX_STATS, req, opt)
    }

    pub fn list_pod_sandbox_stats_async(&self, req: &super::cri::ListPodSandboxStatsRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::ListPodSandboxStatsResponse>> {
        self.list_pod_sandbox_stats_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn container_status_opt(&self, req: &super::cri::ContainerStatusRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::ContainerStatusResponse> {
        self.client.unary_call(&METHOD_RUNTIME_SERVICE_CONTAINER_STATUS, req, opt)
    }

    pub fn container_status(&self, req: &super::cri::ContainerStatusRequest) -> ::grpcio::Result<super::cri::ContainerStatusResponse> {
        self.container_status_opt(req, ::grpcio::CallOption::default())
    }

    pub fn container_status_async_opt(&self, req: &super::cri::ContainerStatusRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::ContainerStatusResponse>> {
        self.client.unary_call_async(&METHOD_RUNTIME_SERVICE_CONTAINER_STATUS, req, opt)
    }

    pub fn container_status_async(&self, req: &super::cri::ContainerStatusRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::ContainerStatusResponse>> {
        self.container_status_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn update_container_resources_opt(&self, req: &super::cri::UpdateContainerResourcesRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::UpdateContainerResourcesResponse> {
        self.client.unary_call(&METHOD_RUNTIME_SERVICE_UPDATE_CONTAINER_RESOURCES, req, opt)
    }

    pub fn update_container_resources(&self, req: &super::cri::UpdateContainerResourcesRequest) -> ::grpcio::Result<super::cri::UpdateContainerResourcesResponse> {
        self.update_container_resources_opt(req, ::grpcio::CallOption::default())
    }

    pub fn update_container_resources_async_opt(&self, req: &super::cri::UpdateContainerResourcesRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::UpdateContainerResourcesResponse>> {
        self.client.unary_call_async(&METHOD_RUNTIME_SERVICE_UPDATE_CONTAINER_RESOURCES, req, opt)
    }

    pub fn update_container_resources_async(&self, req: &super::cri::UpdateContainerResourcesRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::UpdateContainerResourcesResponse>> {
        self.update_container_resources_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn reopen_container_log_opt(&self, req: &super::cri::ReopenContainerLogRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::ReopenContainerLogResponse> {
        self.client.unary_call(&METHOD_RUNTIME_SERVICE_REOPEN_CONTAINER_LOG, req, opt)
    }

    pub fn reopen_container_log(&self, req: &super::cri::ReopenContainerLogRequest) -> ::grpcio::Result<super::cri::ReopenContainerLogResponse> {
        self.reopen_container_log_opt(req, ::grpcio::CallOption::default())
    }

    pub fn reopen_container_log_async_opt(&self, req: &super::cri::ReopenContainerLogRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::ReopenContainerLogResponse>> {
        self.client.unary_call_async(&METHOD_RUNTIME_SERVICE_REOPEN_CONTAINER_LOG, req, opt)
    }

    pub fn reopen_container_log_async(&self, req: &super::cri::ReopenContainerLogRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::ReopenContainerLogResponse>> {
        self.reopen_container_log_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn exec_sync_opt(&self, req: &super::cri::ExecSyncRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::ExecSyncResponse> {
        self.client.unary_call(&METHOD_RUNTIME_SERVICE_EXEC_SYNC, req, opt)
    }

    pub fn exec_sync(&self, req: &super::cri::ExecSyncRequest) -> ::grpcio::Result<super::cri::ExecSyncResponse> {
        self.exec_sync_opt(req, ::grpcio::CallOption::default())
    }

    pub fn exec_sync_async_opt(&self, req: &super::cri::ExecSyncRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::ExecSyncResponse>> {
        self.client.unary_call_async(&METHOD_RUNTIME_SERVICE_EXEC_SYNC, req, opt)
    }

    pub fn exec_sync_async(&self, req: &super::cri::ExecSyncRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::ExecSyncResponse>> {
        self.exec_sync_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn exec_opt(&self, req: &super::cri::ExecRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::ExecResponse> {
        self.client.unary_call(&METHOD_RUNTIME_SERVICE_EXEC, req, opt)
    }

    pub fn exec(&self, req: &super::cri::ExecRequest) -> ::grpcio::Result<super::cri::ExecResponse> {
        self.exec_opt(req, ::grpcio::CallOption::default())
    }

    pub fn exec_async_opt(&self, req: &super::cri::ExecRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::ExecResponse>> {
        self.client.unary_call_async(&METHOD_RUNTIME_SERVICE_EXEC, req, opt)
    }

    pub fn exec_async(&self, req: &super::cri::ExecRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::ExecResponse>> {
        self.exec_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn attach_opt(&self, req: &super::cri::AttachRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::AttachResponse> {
        self.client.unary_call(&METHOD_RUNTIME_SERVICE_ATTACH, req, opt)
    }

    pub fn attach(&self, req: &super::cri::AttachRequest) -> ::grpcio::Result<super::cri::AttachResponse> {
        self.attach_opt(req, ::grpcio::CallOption::default())
    }

    pub fn attach_async_opt(&self, req: &super::cri::AttachRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::AttachResponse>> {
        self.client.unary_call_async(&METHOD_RUNTIME_SERVICE_ATTACH, req, opt)
    }

    pub fn attach_async(&self, req: &super::cri::AttachRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::AttachResponse>> {
        self.attach_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn port_forward_opt(&self, req: &super::cri::PortForwardRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::PortForwardResponse> {
        self.client.unary_call(&METHOD_RUNTIME_SERVICE_PORT_FORWARD, req, opt)
    }

    pub fn port_forward(&self, req: &super::cri::PortForwardRequest) -> ::grpcio::Result<super::cri::PortForwardResponse> {
        self.port_forward_opt(req, ::grpcio::CallOption::default())
    }

    pub fn port_forward_async_opt(&self, req: &super::cri::PortForwardRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::PortForwardResponse>> {
        self.client.unary_call_async(&METHOD_RUNTIME_SERVICE_PORT_FORWARD, req, opt)
    }

    pub fn port_forward_async(&self, req: &super::cri::PortForwardRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::PortForwardResponse>> {
        self.port_forward_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn status_opt(&self, req: &super::cri::StatusRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::StatusResponse> {
        self.client.unary_call(&METHOD_RUNTIME_SERVICE_STATUS, req, opt)
    }

    pub fn status(&self, req: &super::cri::StatusRequest) -> ::grpcio::Result<super::cri::StatusResponse> {
        self.status_opt(req, ::grpcio::CallOption::default())
    }

    pub fn status_async_opt(&self, req: &super::cri::StatusRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::StatusResponse>> {
        self.client.unary_call_async(&METHOD_RUNTIME_SERVICE_STATUS, req, opt)
    }

    pub fn status_async(&self, req: &super::cri::StatusRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::StatusResponse>> {
        self.status_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn runtime_config_opt(&self, req: &super::cri::RuntimeConfigRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::RuntimeConfigResponse> {
        self.client.unary_call(&METHOD_RUNTIME_SERVICE_RUNTIME_CONFIG, req, opt)
    }

    pub fn runtime_config(&self, req: &super::cri::RuntimeConfigRequest) -> ::grpcio::Result<super::cri::RuntimeConfigResponse> {
        self.runtime_config_opt(req, ::grpcio::CallOption::default())
    }

    pub fn runtime_config_async_opt(&self, req: &super::cri::RuntimeConfigRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::RuntimeConfigResponse>> {
        self.client.unary_call_async(&METHOD_RUNTIME_SERVICE_RUNTIME_CONFIG, req, opt)
    }

    pub fn runtime_config_async(&self, req: &super::cri::RuntimeConfigRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::RuntimeConfigResponse>> {
        self.runtime_config_async_opt(req, ::grpcio::CallOption::default())
    }
    pub fn spawn<F>(&self, f: F) where F: ::std::future::Future<Output = ()> + Send + 'static {
        self.client.spawn(f)
    }
}

pub trait RuntimeService {
    fn version(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::VersionRequest, sink: ::grpcio::UnarySink<super::cri::VersionResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn run_pod_sandbox(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::RunPodSandboxRequest, sink: ::grpcio::UnarySink<super::cri::RunPodSandboxResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn stop_pod_sandbox(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::StopPodSandboxRequest, sink: ::grpcio::UnarySink<super::cri::StopPodSandboxResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn remove_pod_sandbox(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::RemovePodSandboxRequest, sink: ::grpcio::UnarySink<super::cri::RemovePodSandboxResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn pod_sandbox_status(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::PodSandboxStatusRequest, sink: ::grpcio::UnarySink<super::cri::PodSandboxStatusResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn list_pod_sandbox(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::ListPodSandboxRequest, sink: ::grpcio::UnarySink<super::cri::ListPodSandboxResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn create_container(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::CreateContainerRequest, sink: ::grpcio::UnarySink<super::cri::CreateContainerResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn start_container(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::StartContainerRequest, sink: ::grpcio::UnarySink<super::cri::StartContainerResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn stop_container(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::StopContainerRequest, sink: ::grpcio::UnarySink<super::cri::StopContainerResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn remove_container(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::RemoveContainerRequest, sink: ::grpcio::UnarySink<super::cri::RemoveContainerResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn list_containers(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::ListContainersRequest, sink: ::grpcio::UnarySink<super::cri::ListContainersResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn list_container_stats(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::ListContainerStatsRequest, sink: ::grpcio::UnarySink<super::cri::ListContainerStatsResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn list_pod_sandbox_stats(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::ListPodSandboxStatsRequest, sink: ::grpcio::UnarySink<super::cri::ListPodSandboxStatsResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn container_status(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::ContainerStatusRequest, sink: ::grpcio::UnarySink<super::cri::ContainerStatusResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn update_container_resources(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::UpdateContainerResourcesRequest, sink: ::grpcio::UnarySink<super::cri::UpdateContainerResourcesResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn reopen_container_log(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::ReopenContainerLogRequest, sink: ::grpcio::UnarySink<super::cri::ReopenContainerLogResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn exec_sync(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::ExecSyncRequest, sink: ::grpcio::UnarySink<super::cri::ExecSyncResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn exec(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::ExecRequest, sink: ::grpcio::UnarySink<super::cri::ExecResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn attach(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::AttachRequest, sink: ::grpcio::UnarySink<super::cri::AttachResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn port_forward(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::PortForwardRequest, sink: ::grpcio::UnarySink<super::cri::PortForwardResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn status(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::StatusRequest, sink: ::grpcio::UnarySink<super::cri::StatusResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn runtime_config(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::RuntimeConfigRequest, sink: ::grpcio::UnarySink<super::cri::RuntimeConfigResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
}

pub fn create_runtime_service<S: RuntimeService + Send + Clone + 'static>(s: S) -> ::grpcio::Service {
    let mut builder = ::grpcio::ServiceBuilder::new();
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_RUNTIME_SERVICE_VERSION, move |ctx, req, resp| {
        instance.version(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_RUNTIME_SERVICE_RUN_POD_SANDBOX, move |ctx, req, resp| {
        instance.run_pod_sandbox(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_RUNTIME_SERVICE_STOP_POD_SANDBOX, move |ctx, req, resp| {
        instance.stop_pod_sandbox(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_RUNTIME_SERVICE_REMOVE_POD_SANDBOX, move |ctx, req, resp| {
        instance.remove_pod_sandbox(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_RUNTIME_SERVICE_POD_SANDBOX_STATUS, move |ctx, req, resp| {
        instance.pod_sandbox_status(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_RUNTIME_SERVICE_LIST_POD_SANDBOX, move |ctx, req, resp| {
        instance.list_pod_sandbox(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_RUNTIME_SERVICE_CREATE_CONTAINER, move |ctx, req, resp| {
        instance.create_container(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_RUNTIME_SERVICE_START_CONTAINER, move |ctx, req, resp| {
        instance.start_container(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_RUNTIME_SERVICE_STOP_CONTAINER, move |ctx, req, resp| {
        instance.stop_container(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_RUNTIME_SERVICE_REMOVE_CONTAINER, move |ctx, req, resp| {
        instance.remove_container(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_RUNTIME_SERVICE_LIST_CONTAINERS, move |ctx, req, resp| {
        instance.list_containers(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_RUNTIME_SERVICE_LIST_CONTAINER_STATS, move |ctx, req, resp| {
        instance.list_container_stats(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_RUNTIME_SERVICE_LIST_POD_SANDBOX_STATS, move |ctx, req, resp| {
        instance.list_pod_sandbox_stats(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_RUNTIME_SERVICE_CONTAINER_STATUS, move |ctx, req, resp| {
        instance.container_status(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_RUNTIME_SERVICE_UPDATE_CONTAINER_RESOURCES, move |ctx, req, resp| {
        instance.update_container_resources(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_RUNTIME_SERVICE_REOPEN_CONTAINER_LOG, move |ctx, req, resp| {
        instance.reopen_container_log(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_RUNTIME_SERVICE_EXEC_SYNC, move |ctx, req, resp| {
        instance.exec_sync(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_RUNTIME_SERVICE_EXEC, move |ctx, req, resp| {
        instance.exec(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_RUNTIME_SERVICE_ATTACH, move |ctx, req, resp| {
        instance.attach(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_RUNTIME_SERVICE_PORT_FORWARD, move |ctx, req, resp| {
        instance.port_forward(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_RUNTIME_SERVICE_STATUS, move |ctx, req, resp| {
        instance.status(ctx, req, resp)
    });
    let mut instance = s;
    builder = builder.add_unary_handler(&METHOD_RUNTIME_SERVICE_RUNTIME_CONFIG, move |ctx, req, resp| {
        instance.runtime_config(ctx, req, resp)
    });
    builder.build()
}

const METHOD_IMAGE_SERVICE_LIST_IMAGES: ::grpcio::Method<super::cri::ListImagesRequest, super::cri::ListImagesResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.ImageService/ListImages",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_IMAGE_SERVICE_IMAGE_STATUS: ::grpcio::Method<super::cri::ImageStatusRequest, super::cri::ImageStatusResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.ImageService/ImageStatus",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_IMAGE_SERVICE_PULL_IMAGE: ::grpcio::Method<super::cri::PullImageRequest, super::cri::PullImageResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.ImageService/PullImage",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_IMAGE_SERVICE_REMOVE_IMAGE: ::grpcio::Method<super::cri::RemoveImageRequest, super::cri::RemoveImageResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.ImageService/RemoveImage",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_IMAGE_SERVICE_IMAGE_FS_INFO: ::grpcio::Method<super::cri::ImageFsInfoRequest, super::cri::ImageFsInfoResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/runtime.v1.ImageService/ImageFsInfo",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

#[derive(Clone)]
pub struct ImageServiceClient {
    pub client: ::grpcio::Client,
}

impl ImageServiceClient {
    pub fn new(channel: ::grpcio::Channel) -> Self {
        ImageServiceClient {
            client: ::grpcio::Client::new(channel),
        }
    }

    pub fn list_images_opt(&self, req: &super::cri::ListImagesRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::ListImagesResponse> {
        self.client.unary_call(&METHOD_IMAGE_SERVICE_LIST_IMAGES, req, opt)
    }

    pub fn list_images(&self, req: &super::cri::ListImagesRequest) -> ::grpcio::Result<super::cri::ListImagesResponse> {
        self.list_images_opt(req, ::grpcio::CallOption::default())
    }

    pub fn list_images_async_opt(&self, req: &super::cri::ListImagesRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::ListImagesResponse>> {
        self.client.unary_call_async(&METHOD_IMAGE_SERVICE_LIST_IMAGES, req, opt)
    }

    pub fn list_images_async(&self, req: &super::cri::ListImagesRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::ListImagesResponse>> {
        self.list_images_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn image_status_opt(&self, req: &super::cri::ImageStatusRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::ImageStatusResponse> {
        self.client.unary_call(&METHOD_IMAGE_SERVICE_IMAGE_STATUS, req, opt)
    }

    pub fn image_status(&self, req: &super::cri::ImageStatusRequest) -> ::grpcio::Result<super::cri::ImageStatusResponse> {
        self.image_status_opt(req, ::grpcio::CallOption::default())
    }

    pub fn image_status_async_opt(&self, req: &super::cri::ImageStatusRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::ImageStatusResponse>> {
        self.client.unary_call_async(&METHOD_IMAGE_SERVICE_IMAGE_STATUS, req, opt)
    }

    pub fn image_status_async(&self, req: &super::cri::ImageStatusRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::ImageStatusResponse>> {
        self.image_status_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn pull_image_opt(&self, req: &super::cri::PullImageRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::PullImageResponse> {
        self.client.unary_call(&METHOD_IMAGE_SERVICE_PULL_IMAGE, req, opt)
    }

    pub fn pull_image(&self, req: &super::cri::PullImageRequest) -> ::grpcio::Result<super::cri::PullImageResponse> {
        self.pull_image_opt(req, ::grpcio::CallOption::default())
    }

    pub fn pull_image_async_opt(&self, req: &super::cri::PullImageRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::PullImageResponse>> {
        self.client.unary_call_async(&METHOD_IMAGE_SERVICE_PULL_IMAGE, req, opt)
    }

    pub fn pull_image_async(&self, req: &super::cri::PullImageRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::PullImageResponse>> {
        self.pull_image_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn remove_image_opt(&self, req: &super::cri::RemoveImageRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::RemoveImageResponse> {
        self.client.unary_call(&METHOD_IMAGE_SERVICE_REMOVE_IMAGE, req, opt)
    }

    pub fn remove_image(&self, req: &super::cri::RemoveImageRequest) -> ::grpcio::Result<super::cri::RemoveImageResponse> {
        self.remove_image_opt(req, ::grpcio::CallOption::default())
    }

    pub fn remove_image_async_opt(&self, req: &super::cri::RemoveImageRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::RemoveImageResponse>> {
        self.client.unary_call_async(&METHOD_IMAGE_SERVICE_REMOVE_IMAGE, req, opt)
    }

    pub fn remove_image_async(&self, req: &super::cri::RemoveImageRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::RemoveImageResponse>> {
        self.remove_image_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn image_fs_info_opt(&self, req: &super::cri::ImageFsInfoRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::cri::ImageFsInfoResponse> {
        self.client.unary_call(&METHOD_IMAGE_SERVICE_IMAGE_FS_INFO, req, opt)
    }

    pub fn image_fs_info(&self, req: &super::cri::ImageFsInfoRequest) -> ::grpcio::Result<super::cri::ImageFsInfoResponse> {
        self.image_fs_info_opt(req, ::grpcio::CallOption::default())
    }

    pub fn image_fs_info_async_opt(&self, req: &super::cri::ImageFsInfoRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::ImageFsInfoResponse>> {
        self.client.unary_call_async(&METHOD_IMAGE_SERVICE_IMAGE_FS_INFO, req, opt)
    }

    pub fn image_fs_info_async(&self, req: &super::cri::ImageFsInfoRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::cri::ImageFsInfoResponse>> {
        self.image_fs_info_async_opt(req, ::grpcio::CallOption::default())
    }
    pub fn spawn<F>(&self, f: F) where F: ::std::future::Future<Output = ()> + Send + 'static {
        self.client.spawn(f)
    }
}

pub trait ImageService {
    fn list_images(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::ListImagesRequest, sink: ::grpcio::UnarySink<super::cri::ListImagesResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn image_status(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::ImageStatusRequest, sink: ::grpcio::UnarySink<super::cri::ImageStatusResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn pull_image(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::PullImageRequest, sink: ::grpcio::UnarySink<super::cri::PullImageResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn remove_image(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::RemoveImageRequest, sink: ::grpcio::UnarySink<super::cri::RemoveImageResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn image_fs_info(&mut self, ctx: ::grpcio::RpcContext, _req: super::cri::ImageFsInfoRequest, sink: ::grpcio::UnarySink<super::cri::ImageFsInfoResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
}

pub fn create_image_service<S: ImageService + Send + Clone + 'static>(s: S) -> ::grpcio::Service {
    let mut builder = ::grpcio::ServiceBuilder::new();
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_IMAGE_SERVICE_LIST_IMAGES, move |ctx, req, resp| {
        instance.list_images(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_IMAGE_SERVICE_IMAGE_STATUS, move |ctx, req, resp| {
        instance.image_status(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_IMAGE_SERVICE_PULL_IMAGE, move |ctx, req, resp| {
        instance.pull_image(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_IMAGE_SERVICE_REMOVE_IMAGE, move |ctx, req, resp| {
        instance.remove_image(ctx, req, resp)
    });
    let mut instance = s;
    builder = builder.add_unary_handler(&METHOD_IMAGE_SERVICE_IMAGE_FS_INFO, move |ctx, req, resp| {
        instance.image_fs_info(ctx, req, resp)
    });
    builder.build()
}
