// This file is generated. Do not edit
// @generated

// https://github.com/Manishearth/rust-clippy/issues/702


const METHOD_REGISTRATION_REGISTER: ::grpcio::Method<super::deviceplugin::RegisterRequest, super::deviceplugin::Empty> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/v1beta1.Registration/Register",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

#[derive(Clone)]
pub struct RegistrationClient {
    pub client: ::grpcio::Client,
}

impl RegistrationClient {
    pub fn new(channel: ::grpcio::Channel) -> Self {
        RegistrationClient {
            client: ::grpcio::Client::new(channel),
        }
    }

    pub fn register_opt(&self, req: &super::deviceplugin::RegisterRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::deviceplugin::Empty> {
        self.client.unary_call(&METHOD_REGISTRATION_REGISTER, req, opt)
    }

    pub fn register(&self, req: &super::deviceplugin::RegisterRequest) -> ::grpcio::Result<super::deviceplugin::Empty> {
        self.register_opt(req, ::grpcio::CallOption::default())
    }

    pub fn register_async_opt(&self, req: &super::deviceplugin::RegisterRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::deviceplugin::Empty>> {
        self.client.unary_call_async(&METHOD_REGISTRATION_REGISTER, req, opt)
    }

    pub fn register_async(&self, req: &super::deviceplugin::RegisterRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::deviceplugin::Empty>> {
        self.register_async_opt(req, ::grpcio::CallOption::default())
    }
    pub fn spawn<F>(&self, f: F) where F: ::std::future::Future<Output = ()> + Send + 'static {
        self.client.spawn(f)
    }
}

pub trait Registration {
    fn register(&mut self, ctx: ::grpcio::RpcContext, _req: super::deviceplugin::RegisterRequest, sink: ::grpcio::UnarySink<super::deviceplugin::Empty>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
}

pub fn create_registration<S: Registration + Send + Clone + 'static>(s: S) -> ::grpcio::Service {
    let mut builder = ::grpcio::ServiceBuilder::new();
    let mut instance = s;
    builder = builder.add_unary_handler(&METHOD_REGISTRATION_REGISTER, move |ctx, req, resp| {
        instance.register(ctx, req, resp)
    });
    builder.build()
}

const METHOD_DEVICE_PLUGIN_GET_DEVICE_PLUGIN_OPTIONS: ::grpcio::Method<super::deviceplugin::Empty, super::deviceplugin::DevicePluginOptions> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/v1beta1.DevicePlugin/GetDevicePluginOptions",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_DEVICE_PLUGIN_LIST_AND_WATCH: ::grpcio::Method<super::deviceplugin::Empty, super::deviceplugin::ListAndWatchResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::ServerStreaming,
    name: "/v1beta1.DevicePlugin/ListAndWatch",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_DEVICE_PLUGIN_GET_PREFERRED_ALLOCATION: ::grpcio::Method<super::deviceplugin::PreferredAllocationRequest, super::deviceplugin::PreferredAllocationResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/v1beta1.DevicePlugin/GetPreferredAllocation",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_DEVICE_PLUGIN_ALLOCATE: ::grpcio::Method<super::deviceplugin::AllocateRequest, super::deviceplugin::AllocateResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/v1beta1.DevicePlugin/Allocate",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

const METHOD_DEVICE_PLUGIN_PRE_START_CONTAINER: ::grpcio::Method<super::deviceplugin::PreStartContainerRequest, super::deviceplugin::PreStartContainerResponse> = ::grpcio::Method {
    ty: ::grpcio::MethodType::Unary,
    name: "/v1beta1.DevicePlugin/PreStartContainer",
    req_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
    resp_mar: ::grpcio::Marshaller { ser: ::grpcio::pb_ser, de: ::grpcio::pb_de },
};

#[derive(Clone)]
pub struct DevicePluginClient {
    pub client: ::grpcio::Client,
}

impl DevicePluginClient {
    pub fn new(channel: ::grpcio::Channel) -> Self {
        DevicePluginClient {
            client: ::grpcio::Client::new(channel),
        }
    }

    pub fn get_device_plugin_options_opt(&self, req: &super::deviceplugin::Empty, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::deviceplugin::DevicePluginOptions> {
        self.client.unary_call(&METHOD_DEVICE_PLUGIN_GET_DEVICE_PLUGIN_OPTIONS, req, opt)
    }

    pub fn get_device_plugin_options(&self, req: &super::deviceplugin::Empty) -> ::grpcio::Result<super::deviceplugin::DevicePluginOptions> {
        self.get_device_plugin_options_opt(req, ::grpcio::CallOption::default())
    }

    pub fn get_device_plugin_options_async_opt(&self, req: &super::deviceplugin::Empty, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::deviceplugin::DevicePluginOptions>> {
        self.client.unary_call_async(&METHOD_DEVICE_PLUGIN_GET_DEVICE_PLUGIN_OPTIONS, req, opt)
    }

    pub fn get_device_plugin_options_async(&self, req: &super::deviceplugin::Empty) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::deviceplugin::DevicePluginOptions>> {
        self.get_device_plugin_options_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn list_and_watch_opt(&self, req: &super::deviceplugin::Empty, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientSStreamReceiver<super::deviceplugin::ListAndWatchResponse>> {
        self.client.server_streaming(&METHOD_DEVICE_PLUGIN_LIST_AND_WATCH, req, opt)
    }

    pub fn list_and_watch(&self, req: &super::deviceplugin::Empty) -> ::grpcio::Result<::grpcio::ClientSStreamReceiver<super::deviceplugin::ListAndWatchResponse>> {
        self.list_and_watch_opt(req, ::grpcio::CallOption::default())
    }

    pub fn get_preferred_allocation_opt(&self, req: &super::deviceplugin::PreferredAllocationRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::deviceplugin::PreferredAllocationResponse> {
        self.client.unary_call(&METHOD_DEVICE_PLUGIN_GET_PREFERRED_ALLOCATION, req, opt)
    }

    pub fn get_preferred_allocation(&self, req: &super::deviceplugin::PreferredAllocationRequest) -> ::grpcio::Result<super::deviceplugin::PreferredAllocationResponse> {
        self.get_preferred_allocation_opt(req, ::grpcio::CallOption::default())
    }

    pub fn get_preferred_allocation_async_opt(&self, req: &super::deviceplugin::PreferredAllocationRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::deviceplugin::PreferredAllocationResponse>> {
        self.client.unary_call_async(&METHOD_DEVICE_PLUGIN_GET_PREFERRED_ALLOCATION, req, opt)
    }

    pub fn get_preferred_allocation_async(&self, req: &super::deviceplugin::PreferredAllocationRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::deviceplugin::PreferredAllocationResponse>> {
        self.get_preferred_allocation_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn allocate_opt(&self, req: &super::deviceplugin::AllocateRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::deviceplugin::AllocateResponse> {
        self.client.unary_call(&METHOD_DEVICE_PLUGIN_ALLOCATE, req, opt)
    }

    pub fn allocate(&self, req: &super::deviceplugin::AllocateRequest) -> ::grpcio::Result<super::deviceplugin::AllocateResponse> {
        self.allocate_opt(req, ::grpcio::CallOption::default())
    }

    pub fn allocate_async_opt(&self, req: &super::deviceplugin::AllocateRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::deviceplugin::AllocateResponse>> {
        self.client.unary_call_async(&METHOD_DEVICE_PLUGIN_ALLOCATE, req, opt)
    }

    pub fn allocate_async(&self, req: &super::deviceplugin::AllocateRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::deviceplugin::AllocateResponse>> {
        self.allocate_async_opt(req, ::grpcio::CallOption::default())
    }

    pub fn pre_start_container_opt(&self, req: &super::deviceplugin::PreStartContainerRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<super::deviceplugin::PreStartContainerResponse> {
        self.client.unary_call(&METHOD_DEVICE_PLUGIN_PRE_START_CONTAINER, req, opt)
    }

    pub fn pre_start_container(&self, req: &super::deviceplugin::PreStartContainerRequest) -> ::grpcio::Result<super::deviceplugin::PreStartContainerResponse> {
        self.pre_start_container_opt(req, ::grpcio::CallOption::default())
    }

    pub fn pre_start_container_async_opt(&self, req: &super::deviceplugin::PreStartContainerRequest, opt: ::grpcio::CallOption) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::deviceplugin::PreStartContainerResponse>> {
        self.client.unary_call_async(&METHOD_DEVICE_PLUGIN_PRE_START_CONTAINER, req, opt)
    }

    pub fn pre_start_container_async(&self, req: &super::deviceplugin::PreStartContainerRequest) -> ::grpcio::Result<::grpcio::ClientUnaryReceiver<super::deviceplugin::PreStartContainerResponse>> {
        self.pre_start_container_async_opt(req, ::grpcio::CallOption::default())
    }
    pub fn spawn<F>(&self, f: F) where F: ::std::future::Future<Output = ()> + Send + 'static {
        self.client.spawn(f)
    }
}

pub trait DevicePlugin {
    fn get_device_plugin_options(&mut self, ctx: ::grpcio::RpcContext, _req: super::deviceplugin::Empty, sink: ::grpcio::UnarySink<super::deviceplugin::DevicePluginOptions>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn list_and_watch(&mut self, ctx: ::grpcio::RpcContext, _req: super::deviceplugin::Empty, sink: ::grpcio::ServerStreamingSink<super::deviceplugin::ListAndWatchResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn get_preferred_allocation(&mut self, ctx: ::grpcio::RpcContext, _req: super::deviceplugin::PreferredAllocationRequest, sink: ::grpcio::UnarySink<super::deviceplugin::PreferredAllocationResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn allocate(&mut self, ctx: ::grpcio::RpcContext, _req: super::deviceplugin::AllocateRequest, sink: ::grpcio::UnarySink<super::deviceplugin::AllocateResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
    fn pre_start_container(&mut self, ctx: ::grpcio::RpcContext, _req: super::deviceplugin::PreStartContainerRequest, sink: ::grpcio::UnarySink<super::deviceplugin::PreStartContainerResponse>) {
        grpcio::unimplemented_call!(ctx, sink)
    }
}

pub fn create_device_plugin<S: DevicePlugin + Send + Clone + 'static>(s: S) -> ::grpcio::Service {
    let mut builder = ::grpcio::ServiceBuilder::new();
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_DEVICE_PLUGIN_GET_DEVICE_PLUGIN_OPTIONS, move |ctx, req, resp| {
        instance.get_device_plugin_options(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_server_streaming_handler(&METHOD_DEVICE_PLUGIN_LIST_AND_WATCH, move |ctx, req, resp| {
        instance.list_and_watch(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_DEVICE_PLUGIN_GET_PREFERRED_ALLOCATION, move |ctx, req, resp| {
        instance.get_preferred_allocation(ctx, req, resp)
    });
    let mut instance = s.clone();
    builder = builder.add_unary_handler(&METHOD_DEVICE_PLUGIN_ALLOCATE, move |ctx, req, resp| {
        instance.allocate(ctx, req, resp)
    });
    let mut instance = s;
    builder = builder.add_unary_handler(&METHOD_DEVICE_PLUGIN_PRE_START_CONTAINER, move |ctx, req, resp| {
        instance.pre_start_container(ctx, req, resp)
    });
    builder.build()
}
