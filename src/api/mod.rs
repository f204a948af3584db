//! The Kubernetes object subset: types, quantities, defaulting, validation, manifest decoding.

pub mod defaults;
pub mod downward;
pub mod expand;
pub mod field;
pub mod fields;
pub mod limits;
pub mod manifest;
pub mod quantity;
pub mod security;
pub mod source;
pub mod strict;
pub mod types;
pub mod validation;
pub mod volumes;

pub use quantity::{Quantity, QuantityError};
pub use types::*;

/// Decodes an object from a JSON value; an error names the field path it is about. Every
/// Kubernetes object ferrolet reads (manifests, the apiserver's pods, the kept pod set, the
/// CLI's answers) is decoded through this one deserializer: the object types' decoders are
/// compiled once for each deserializer they are used with, and each copy of the pod types'
/// adds about 0.2 MB to the static binary.
pub fn from_value<T: serde::de::DeserializeOwned>(
    value: &serde_json::Value,
) -> Result<T, serde_path_to_error::Error<serde_json::Error>> {
    serde_path_to_error::deserialize(value)
}

/// `from_value`, its error as one line: `spec.containers: invalid type: …`.
pub fn decode<T: serde::de::DeserializeOwned>(value: &serde_json::Value) -> Result<T, String> {
    from_value(value).map_err(|e| match e.path().to_string() {
        root if root == "." => e.into_inner().to_string(),
        path => format!("{path}: {}", e.into_inner()),
    })
}
