//! Settings that are one of a few names (`runtime`, `cgroups.enforcement`,
//! `cgroups.version`): enums that serde parses, so a bad value is refused while the file is
//! read, naming the key, the value and what is allowed.

use serde::{Deserialize, Deserializer};

/// A value that is not one of the setting's names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported value {value:?}: supported values: {}", allowed.join(", "))]
pub struct ParseChoiceError {
    /// The value as written.
    pub value: String,
    /// Every allowed spelling, in the order the message lists them.
    pub allowed: Vec<&'static str>,
}

/// Declares a setting that is one of a few names, spelled as in the file.
macro_rules! choice {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in the order messages list them.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The value's spelling in the file.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The value spelled `s`; the error says what is allowed.
            pub fn parse(s: &str) -> Result<$name, ParseChoiceError> {
                Self::ALL.iter().copied().find(|c| c.as_str() == s).ok_or_else(|| ParseChoiceError {
                    value: s.into(),
                    allowed: Self::ALL.iter().map(|c| c.as_str()).collect(),
                })
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                $name::parse(&s).map_err(serde::de::Error::custom)
            }
        }
    };
}

choice! {
    /// `server.authorization.mode`: who decides what an authenticated user may do.
    AuthorizationMode {
        /// A `SubjectAccessReview` to the apiserver for each request (cached).
        Webhook = "Webhook",
        /// Every authenticated user may do everything.
        AlwaysAllow = "AlwaysAllow",
    }
}

choice! {
    /// `runtime`: the container runtime backend.
    RuntimeBackend {
        /// Every container is a host process under a small shim.
        Process = "process",
        /// Containers run on a CRI v1 runtime (containerd) at `container_runtime_endpoint`.
        Cri = "cri",
    }
}

impl RuntimeBackend {
    /// The runtime's kind, as Pod fields are judged by it.
    pub fn kind(self) -> crate::api::fields::RuntimeKind {
        match self {
            RuntimeBackend::Process => crate::api::fields::RuntimeKind::Process,
            RuntimeBackend::Cri => crate::api::fields::RuntimeKind::Cri,
        }
    }
}

choice! {
    /// `cgroups.enforcement`: whether pods get cgroups.
    Enforcement {
        /// Enforce when the cgroup tree is writable; otherwise run without limits and say why.
        Auto = "auto",
        /// Refuse to start when cgroups cannot be used.
        Required = "required",
        /// No pod cgroups at all.
        Off = "off",
    }
}

choice! {
    /// `cgroups.version`: detect the cgroup version, or force one.
    CgroupVersionSetting {
        /// As the mounts show (a hybrid host counts as v1).
        Auto = "auto",
        /// Force cgroup v1.
        V1 = "1",
        /// Force cgroup v2.
        V2 = "2",
    }
}

impl CgroupVersionSetting {
    /// The forced version, if any.
    pub fn forced(self) -> Option<crate::node::cm::cgroupfs::CgroupVersion> {
        match self {
            CgroupVersionSetting::Auto => None,
            CgroupVersionSetting::V1 => Some(crate::node::cm::cgroupfs::CgroupVersion::V1),
            CgroupVersionSetting::V2 => Some(crate::node::cm::cgroupfs::CgroupVersion::V2),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Doc {
        runtime: RuntimeBackend,
        enforcement: Enforcement,
        version: CgroupVersionSetting,
    }

    #[test]
    fn choices_parse_their_spellings_and_name_what_is_allowed() {
        let d: Doc = toml::from_str("runtime = \"process\"\nenforcement = \"required\"\nversion = \"2\"\n").unwrap();
        assert_eq!(
            (d.runtime, d.enforcement, d.version),
            (RuntimeBackend::Process, Enforcement::Required, CgroupVersionSetting::V2)
        );
        assert_eq!(d.version.forced(), Some(crate::node::cm::cgroupfs::CgroupVersion::V2));
        assert_eq!(CgroupVersionSetting::Auto.forced(), None);
        for c in Enforcement::ALL {
            assert_eq!(Enforcement::parse(c.as_str()), Ok(*c));
            assert_eq!(c.to_string(), c.as_str());
        }
        assert_eq!(
            Enforcement::parse("maybe").unwrap_err().to_string(),
            "unsupported value \"maybe\": supported values: auto, required, off"
        );
        assert_eq!(
            CgroupVersionSetting::parse("3").unwrap_err().to_string(),
            "unsupported value \"3\": supported values: auto, 1, 2"
        );
        let e = RuntimeBackend::parse("docker").unwrap_err();
        assert_eq!(e, ParseChoiceError { value: "docker".into(), allowed: vec!["process", "cri"] });
        assert_eq!(e.to_string(), "unsupported value \"docker\": supported values: process, cri");
        let e = toml::from_str::<Doc>("runtime = \"process\"\nenforcement = \"auto\"\nversion = 2\n").unwrap_err();
        assert!(e.message().starts_with("invalid type: integer `2`, expected a string"), "{e}");
    }
}
