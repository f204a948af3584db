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
pub mod strict;
pub mod types;
pub mod validation;
pub mod volumes;

pub use quantity::{Quantity, QuantityError};
pub use types::*;
