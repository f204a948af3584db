//! The code generated from the .proto files in proto/, checked in under src/proto/ (`make
//! proto` writes it; tests/proto.rs fails when it differs from what the generator makes).

/// One generated proto: messages (`<name>.rs`) and services (`<name>_grpc.rs`), with the
/// lints generated code does not meet turned off.
macro_rules! generated {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[allow(
            clippy::all,
            missing_docs,
            unused,
            unknown_lints,
            mismatched_lifetime_syntaxes,
            renamed_and_removed_lints,
            non_camel_case_types,
            non_snake_case,
            non_upper_case_globals
        )]
        pub mod $name {
            include!(concat!(stringify!($name), ".rs"));
            include!(concat!(stringify!($name), "_grpc.rs"));
        }
    };
}

generated!(
    /// grpc.health.v1: messages and the Health service (client and server).
    health
);
generated!(
    /// Device plugin API v1beta1: messages, the Registration service (served by the agent)
    /// and the DevicePlugin service (served by plugins).
    deviceplugin
);
generated!(
    /// CRI v1 (`runtime.v1`), the subset ferrolet calls: the RuntimeService and ImageService
    /// clients of the CRI runtime backend.
    cri
);
