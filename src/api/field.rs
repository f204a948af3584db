//! Field errors (apimachinery's `field.Error`): a problem at one field path, rendered as
//! the apiserver renders it, and the collector validation fills.

use std::fmt;

/// What is wrong with a field, mirroring `field.ErrorType`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// `Required value`.
    Required,
    /// `Invalid value: <value>`.
    Invalid(String),
    /// `Unsupported value: <value>: supported values: ...`.
    NotSupported(String, Vec<&'static str>),
    /// `Duplicate value: <value>`.
    Duplicate(String),
    /// `Forbidden`.
    Forbidden,
    /// `Too long`: the detail says how long it is and what is allowed.
    TooLong,
    /// `Too many: <count>`.
    TooMany(usize),
    /// `Not found: <value>`.
    NotFound(String),
}

/// One validation problem at one field path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// e.g. `spec.containers[0].livenessProbe.httpGet.port`.
    pub path: String,
    /// The kind of problem.
    pub kind: FieldErrorKind,
    /// What is allowed, in words.
    pub detail: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // An empty path is the whole object.
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        match &self.kind {
            FieldErrorKind::Required => write!(f, "Required value")?,
            FieldErrorKind::Invalid(v) => write!(f, "Invalid value: {v}")?,
            FieldErrorKind::NotSupported(v, allowed) => {
                let list: Vec<String> = allowed.iter().map(|a| format!("{a:?}")).collect();
                return write!(f, "Unsupported value: {v}: supported values: {}", list.join(", "));
            }
            FieldErrorKind::Duplicate(v) => write!(f, "Duplicate value: {v}")?,
            FieldErrorKind::Forbidden => write!(f, "Forbidden")?,
            FieldErrorKind::TooLong => write!(f, "Too long")?,
            FieldErrorKind::TooMany(n) => write!(f, "Too many: {n}")?,
            FieldErrorKind::NotFound(v) => write!(f, "Not found: {v}")?,
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

/// A value as the apiserver quotes it in a message.
pub(super) fn quote(s: &str) -> String {
    format!("{s:?}")
}

/// Problems collected while validating one pod.
pub(super) struct Errs(pub(super) Vec<FieldError>);

impl Errs {
    pub(super) fn required(&mut self, path: &str, detail: &str) {
        self.0.push(FieldError { path: path.into(), kind: FieldErrorKind::Required, detail: detail.into() });
    }
    pub(super) fn invalid(&mut self, path: &str, value: String, detail: impl Into<String>) {
        self.0.push(FieldError { path: path.into(), kind: FieldErrorKind::Invalid(value), detail: detail.into() });
    }
    pub(super) fn not_supported(&mut self, path: &str, value: &str, allowed: &[&'static str]) {
        self.0.push(FieldError {
            path: path.into(),
            kind: FieldErrorKind::NotSupported(quote(value), allowed.to_vec()),
            detail: String::new(),
        });
    }
    pub(super) fn forbidden(&mut self, path: &str, detail: &str) {
        self.0.push(FieldError { path: path.into(), kind: FieldErrorKind::Forbidden, detail: detail.into() });
    }
    pub(super) fn too_long(&mut self, path: &str, detail: String) {
        self.0.push(FieldError { path: path.into(), kind: FieldErrorKind::TooLong, detail });
    }
    pub(super) fn too_many(&mut self, path: &str, count: usize, max: usize) {
        self.0.push(FieldError {
            path: path.into(),
            kind: FieldErrorKind::TooMany(count),
            detail: format!("must have at most {max} items"),
        });
    }
    pub(super) fn not_found(&mut self, path: &str, value: &str) {
        self.0.push(FieldError {
            path: path.into(),
            kind: FieldErrorKind::NotFound(quote(value)),
            detail: String::new(),
        });
    }
    pub(super) fn duplicate(&mut self, path: &str, value: &str) {
        self.0.push(FieldError {
            path: path.into(),
            kind: FieldErrorKind::Duplicate(quote(value)),
            detail: String::new(),
        });
    }
}

pub const DNS1123_LABEL_FMT: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
pub const DNS1123_SUBDOMAIN_FMT: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// RFC 1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// RFC 1123 subdomain: dot-separated labels, at most 253 characters.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// A valid ConfigMap or Secret key (the apiserver's `IsConfigMapKey`).
pub fn is_config_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key != "."
        && key != ".."
        && !key.starts_with("..")
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}
