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

choice! {
    /// `cgroups.driver` (kubelet's `cgroupDriver`): who makes the pod cgroups.
    CgroupDriverSetting {
        /// The CRI runtime's driver where it reports one; otherwise systemd where systemd is
        /// the init system with its bus up, cgroupfs elsewhere (OpenRC, busybox init).
        Auto = "auto",
        /// Directories ferrolet makes in the cgroup filesystem.
        Cgroupfs = "cgroupfs",
        /// Transient slices systemd makes (`kubepods.slice`, ...), over D-Bus.
        Systemd = "systemd",
    }
}

impl CgroupDriverSetting {
    /// Whether this setting means the systemd driver, given whether systemd runs here with
    /// its bus (`booted`) and which driver the CRI runtime reports (`runtime`, `Some(true)`
    /// for systemd). An explicit setting the runtime contradicts is refused: the runtime
    /// would place containers where ferrolet does not look.
    pub fn resolve(self, booted: bool, runtime: Option<bool>) -> Result<bool, String> {
        let name = |systemd: bool| if systemd { "systemd" } else { "cgroupfs" };
        match (self, runtime) {
            (CgroupDriverSetting::Auto, Some(r)) => Ok(r),
            (CgroupDriverSetting::Auto, None) => Ok(booted),
            (explicit, Some(r)) if r != (explicit == CgroupDriverSetting::Systemd) => Err(format!(
                "the CRI runtime uses the {} cgroup driver and cgroups.driver is \"{}\": set cgroups.driver = \"{}\" (or \"auto\"), or configure the runtime's runc with SystemdCgroup = {}",
                name(r),
                explicit,
                name(r),
                !r
            )),
            (explicit, _) => Ok(explicit == CgroupDriverSetting::Systemd),
        }
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
    fn the_cgroup_driver_follows_the_runtime_then_the_host_and_a_contradiction_is_refused() {
        use CgroupDriverSetting::*;
        assert_eq!(Auto.resolve(true, None), Ok(true));
        assert_eq!(Auto.resolve(false, None), Ok(false));
        assert_eq!(Auto.resolve(false, Some(true)), Ok(true), "the runtime's driver wins");
        assert_eq!(Auto.resolve(true, Some(false)), Ok(false));
        assert_eq!(Systemd.resolve(false, None), Ok(true));
        assert_eq!(Cgroupfs.resolve(true, None), Ok(false));
        assert_eq!(Systemd.resolve(true, Some(true)), Ok(true));
        let e = Cgroupfs.resolve(true, Some(true)).unwrap_err();
        assert_eq!(e, "the CRI runtime uses the systemd cgroup driver and cgroups.driver is \"cgroupfs\": set cgroups.driver = \"systemd\" (or \"auto\"), or configure the runtime's runc with SystemdCgroup = false");
        assert!(Systemd.resolve(true, Some(false)).unwrap_err().contains("SystemdCgroup = true"));
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
