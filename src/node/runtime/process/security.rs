//! The security context on the process runtime. A container here is a host process, so
//! what the shim can do before exec is honoured — supplementary groups, gid and uid (in that
//! order), capabilities (the bounding set, with inheritable and ambient cleared), and
//! `no_new_privs` — and what would need a container's own namespaces or a loaded profile is
//! refused openly (`refusal`), never silently ignored. The container's root, its volumes and
//! `readOnlyRootFilesystem` are `root`'s.
//!
//! Capabilities: as root, the process runtime's default set is containerd's but `MKNOD`
//! (`DEFAULT_CAPABILITIES`: no `SYS_ADMIN`, so a root workload cannot undo its root, nor
//! `SYS_PTRACE`; and no `MKNOD`, because no device cgroup stops a device node made in the
//! container's writable layer from reaching the node's disks, as containerd's does). `drop` removes from it (`ALL`: everything), `add` puts back;
//! `privileged` keeps everything. The set becomes the bounding set, so a root workload's
//! effective set is exactly it; a non-root workload starts with no effective capability, as
//! under containerd (added capabilities are not made ambient). A shim that is not root
//! cannot narrow the bounding set, and leaves it unless the pod asks.
//!
//! Processes: as root, unless the pod has `hostPID`, each container has a PID namespace of
//! its own with its own `/proc` (in its own root), so no process of the node is
//! visible or reachable through `/proc/<pid>/root`. Its PID 1 is a copy of the shim that
//! only reaps (`reap_as_init`): the workload runs as PID 2, so it gets SIGTERM as any
//! process does (a PID 1 without a handler ignores it, which made many a kubelet pod wait
//! out its grace period), orphans are reaped, and when the workload exits its namespace
//! goes with it. A shared PID namespace for the pod (`shareProcessNamespace`) is refused.

use crate::api::security::{capability_number, ContainerSecurity, Profile, SandboxSecurity, ALL_CAPABILITIES};
use crate::node::runtime::ContainerConfig;
use std::io;

/// What the shim does to the workload's process between fork and exec. Made before the fork
/// (no allocation may happen after it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The identity to switch to: uid, gid and supplementary groups (the gid first).
    pub ids: Option<Ids>,
    /// The capability set to keep (bit n: capability n), when it is not everything.
    pub capabilities: Option<u64>,
    /// Set `no_new_privs`.
    pub no_new_privs: bool,
    /// A PID namespace of its own, with its own `/proc` (mounted in its root) and a
    /// reaping PID 1 (`reap_as_init`). The shim makes the namespace before the fork.
    pub pid_namespace: bool,
}

/// A process identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ids {
    /// The uid.
    pub uid: u32,
    /// The primary gid.
    pub gid: u32,
    /// The supplementary groups: the gid, then the pod's groups.
    pub groups: Vec<u32>,
}

/// Why the process runtime cannot honour `sandbox`'s and `c`'s settings, each named by its
/// field; `None` when it can.
pub fn refusal(sandbox: &SandboxSecurity, c: &ContainerSecurity) -> Option<String> {
    let mut why = Vec::new();
    if let Some(p) = c.seccomp.as_ref().filter(|p| **p != Profile::Unconfined) {
        why.push(format!("securityContext.seccompProfile {} (it loads no seccomp filter)", p.describe()));
    }
    if let Some(p) = c.apparmor.as_ref().filter(|p| **p != Profile::Unconfined) {
        why.push(format!("securityContext.appArmorProfile {} (it applies no AppArmor profile)", p.describe()));
    }
    if sandbox.share_process_namespace && !sandbox.host_pid {
        why.push(
            "spec.shareProcessNamespace (each container has a PID namespace of its own; a shared one is not supported)"
                .into(),
        );
    }
    if !sandbox.sysctls.is_empty() {
        let names: Vec<&str> = sandbox.sysctls.keys().map(String::as_str).collect();
        why.push(format!(
            "spec.securityContext.sysctls {} (the pod has no namespaces of its own to set them in)",
            names.join(", ")
        ));
    }
    if why.is_empty() {
        return None;
    }
    Some(format!("the process runtime cannot honour {}", why.join("; ")))
}

/// containerd's default capabilities (`oci.defaultUnixCaps`), which a CRI container gets
/// unless it adds or drops, less `MKNOD` (no device cgroup backs it here; `add` puts it back).
pub const DEFAULT_CAPABILITIES: [&str; 13] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FSETID",
    "FOWNER",
    "NET_RAW",
    "SETGID",
    "SETUID",
    "SETFCAP",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "KILL",
    "AUDIT_WRITE",
];

/// The capability set `c` asks for over `all` (every capability the kernel has), starting
/// from `DEFAULT_CAPABILITIES`; `None` (`privileged`): keep everything.
pub fn capability_set(c: &ContainerSecurity, all: u64) -> Option<u64> {
    if c.privileged {
        return None;
    }
    let mask = |names: &[String]| {
        names.iter().fold(0u64, |m, n| match capability_number(n) {
            _ if n == ALL_CAPABILITIES => all,
            Some(bit) => m | (1u64 << bit),
            // Validation refuses unknown names; a record from elsewhere adds or drops nothing.
            None => m,
        })
    };
    let defaults = DEFAULT_CAPABILITIES.iter().filter_map(|n| capability_number(n)).fold(0u64, |m, bit| m | (1 << bit));
    Some((defaults & all & !mask(&c.drop_capabilities)) | (mask(&c.add_capabilities) & all))
}

/// The primary gid of `uid` in an `/etc/passwd` text.
pub fn passwd_gid(passwd: &str, uid: u32) -> Option<u32> {
    passwd.lines().find_map(|line| {
        let mut f = line.split(':');
        let (_name, _pw, u, g) = (f.next()?, f.next()?, f.next()?, f.next()?);
        (u.parse::<u32>().ok()? == uid).then(|| g.parse().ok()).flatten()
    })
}

/// The plan for `c`, with `all` the kernel's capabilities, `current_uid` who the shim runs
/// as, `passwd` the host's `/etc/passwd` (a uid without `runAsGroup` gets its primary
/// group there, else 0, as containerd does with an image's) and `host_pid` the pod's
/// `hostPID`. What needs root (the default capability set, a PID namespace) is planned only
/// for a root shim.
pub fn plan(c: &ContainerSecurity, all: u64, current_uid: u32, passwd: &str, host_pid: bool) -> Plan {
    let root = current_uid == 0;
    let asks_capabilities = !c.add_capabilities.is_empty() || !c.drop_capabilities.is_empty();
    let wants_ids = c.run_as_user.is_some() || c.run_as_group.is_some() || !c.supplemental_groups.is_empty();
    let ids = wants_ids.then(|| {
        // Validation keeps ids within 0..=i32::MAX.
        let uid = c.run_as_user.map_or(current_uid, |u| u as u32);
        let gid = c.run_as_group.map(|g| g as u32).or_else(|| passwd_gid(passwd, uid)).unwrap_or(0);
        let mut groups = vec![gid];
        for g in c.supplemental_groups.iter().map(|g| *g as u32) {
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
        Ids { uid, gid, groups }
    });
    Plan {
        ids,
        capabilities: if root || asks_capabilities { capability_set(c, all) } else { None },
        no_new_privs: c.no_new_privs,
        pid_namespace: root && !host_pid,
    }
}

/// Every capability the running kernel has, as a mask (`/proc/sys/kernel/cap_last_cap`).
pub fn all_capabilities() -> u64 {
    let last = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(40)
        .min(63);
    (((1u128 << (last + 1)) - 1) & u64::MAX as u128) as u64
}

/// The plan for container `cfg` on this host (`host_pid`: the pod's `hostPID`): its
/// security context (reading `cap_last_cap` and `/etc/passwd` when they matter). Called
/// before the fork.
pub fn host_plan(cfg: &ContainerConfig, host_pid: bool) -> Plan {
    let c = &cfg.security;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    let passwd = if c.run_as_user.is_some() && c.run_as_group.is_none() {
        std::fs::read_to_string("/etc/passwd").unwrap_or_default()
    } else {
        String::new()
    };
    plan(c, all_capabilities(), euid, &passwd, host_pid)
}

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `_LINUX_CAPABILITY_VERSION_3`: two `CapData`, 64 capabilities.
const CAP_VERSION_3: u32 = 0x2008_0522;

/// `prctl(option, arg, 0, 0, 0)`, every argument an unsigned long as the kernel reads them
/// (a variadic `int` would leave the upper half of its register undefined).
fn prctl(option: libc::c_int, arg: libc::c_ulong) -> io::Result<()> {
    const ZERO: libc::c_ulong = 0;
    // SAFETY: prctl with integer arguments only.
    check(unsafe { libc::prctl(option, arg, ZERO, ZERO, ZERO) } as libc::c_long)
}

fn check(r: libc::c_long) -> io::Result<()> {
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// In the child between fork and exec (after it joined its cgroups and entered its root,
/// which need the shim's privileges): applies `plan` with system calls only (async-signal-safe, no allocation).
/// `all` is every capability the kernel has (`all_capabilities`, read before the fork).
pub fn apply(plan: &Plan, all: u64) -> io::Result<()> {
    if let Some(keep) = plan.capabilities {
        // `cap` is an unsigned long, as prctl takes it (32 bits on 32-bit ARM).
        for cap in 0..64 {
            if all & (1 << cap) != 0 && keep & (1 << cap) == 0 {
                prctl(libc::PR_CAPBSET_DROP, cap)?;
            }
        }
    }
    if let Some(ids) = &plan.ids {
        // SAFETY: the pointer and length describe `ids.groups`, which outlives the call.
        check(unsafe { libc::setgroups(ids.groups.len(), ids.groups.as_ptr()) } as libc::c_long)?;
        // SAFETY: plain system calls with integer arguments.
        check(unsafe { libc::setresgid(ids.gid, ids.gid, ids.gid) } as libc::c_long)?;
        // SAFETY: as above.
        check(unsafe { libc::setresuid(ids.uid, ids.uid, ids.uid) } as libc::c_long)?;
    }
    if let Some(keep) = plan.capabilities {
        // Effective and permitted within the kept set, nothing inheritable or ambient: after
        // exec a root process has exactly the bounding set, any other none.
        let mut header = CapHeader { version: CAP_VERSION_3, pid: 0 };
        let mut data = [CapData::default(); 2];
        // SAFETY: header and a two-element data array, as version 3 requires.
        check(unsafe { libc::syscall(libc::SYS_capget, &mut header as *mut CapHeader, data.as_mut_ptr()) })?;
        for (i, d) in data.iter_mut().enumerate() {
            let k = (keep >> (32 * i)) as u32;
            d.effective &= k;
            d.permitted &= k;
            d.inheritable = 0;
        }
        // SAFETY: as above.
        check(unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut CapHeader, data.as_ptr()) })?;
        prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong)?;
    }
    if plan.no_new_privs {
        prctl(libc::PR_SET_NO_NEW_PRIVS, 1)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const ALL: u64 = (1 << 41) - 1;

    fn caps(add: &[&str], drop: &[&str]) -> ContainerSecurity {
        ContainerSecurity {
            add_capabilities: add.iter().map(|s| s.to_string()).collect(),
            drop_capabilities: drop.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn drop_all_then_add_keeps_only_the_added_and_privileged_keeps_everything() {
        // containerd's 14 less MKNOD 27: CHOWN 0, DAC_OVERRIDE 1, FOWNER 3, FSETID 4, KILL 5,
        // SETGID 6, SETUID 7, SETPCAP 8, NET_BIND_SERVICE 10, NET_RAW 13, SYS_CHROOT 18,
        // AUDIT_WRITE 29, SETFCAP 31.
        let defaults: u64 = [0, 1, 3, 4, 5, 6, 7, 8, 10, 13, 18, 29, 31].iter().map(|b| 1u64 << b).sum();
        assert_eq!(capability_set(&caps(&[], &[]), ALL), Some(defaults), "nothing asked: containerd's set, no MKNOD");
        assert_eq!(capability_set(&caps(&["MKNOD"], &[]), ALL), Some(defaults | (1 << 27)), "asked for");
        assert_eq!(capability_set(&caps(&[], &["ALL"]), ALL), Some(0));
        assert_eq!(capability_set(&caps(&["NET_BIND_SERVICE"], &["ALL"]), ALL), Some(1 << 10));
        assert_eq!(capability_set(&caps(&[], &["CAP_NET_RAW", "SYS_ADMIN"]), ALL), Some(defaults & !(1 << 13)));
        assert_eq!(capability_set(&caps(&["NET_ADMIN"], &[]), ALL), Some(defaults | (1 << 12)));
        assert_eq!(
            capability_set(&caps(&["CHECKPOINT_RESTORE"], &["ALL"]), (1 << 40) - 1),
            Some(0),
            "a capability the kernel lacks is not kept"
        );
        let mut privileged = caps(&[], &["ALL"]);
        privileged.privileged = true;
        assert_eq!(capability_set(&privileged, ALL), None);
    }

    #[test]
    fn the_identity_is_the_asked_uid_and_gid_with_the_gid_first_among_the_groups() {
        let sec = ContainerSecurity {
            run_as_user: Some(65534),
            run_as_group: Some(65534),
            supplemental_groups: vec![2000, 65534, 3000],
            no_new_privs: true,
            ..caps(&[], &["ALL"])
        };
        let p = plan(&sec, ALL, 0, "", false);
        assert_eq!(p.ids, Some(Ids { uid: 65534, gid: 65534, groups: vec![65534, 2000, 3000] }));
        assert_eq!((p.capabilities, p.no_new_privs, p.pid_namespace), (Some(0), true, true));
        // A uid alone gets its passwd group, else 0; a group alone keeps the shim's uid.
        let passwd = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65533:nobody:/:/usr/sbin/nologin\n";
        let uid_only = ContainerSecurity { run_as_user: Some(65534), ..Default::default() };
        assert_eq!(plan(&uid_only, ALL, 0, passwd, false).ids.unwrap().gid, 65533);
        assert_eq!(plan(&uid_only, ALL, 0, "", false).ids.unwrap().gid, 0);
        let gid_only = ContainerSecurity { run_as_group: Some(5), ..Default::default() };
        assert_eq!(plan(&gid_only, ALL, 1000, "", false).ids, Some(Ids { uid: 1000, gid: 5, groups: vec![5] }));
        // Nothing asked: as root, containerd's capabilities and a PID namespace (none with
        // hostPID); a shim that is not root can do neither.
        let default = plan(&ContainerSecurity::default(), ALL, 0, passwd, false);
        assert_eq!((default.ids, default.capabilities.is_some(), default.pid_namespace), (None, true, true));
        assert!(!plan(&ContainerSecurity::default(), ALL, 0, passwd, true).pid_namespace);
        assert_eq!(plan(&ContainerSecurity::default(), ALL, 1000, passwd, false), Plan::default());
    }

    #[test]
    fn what_needs_a_real_container_is_refused_naming_the_field() {
        let none = SandboxSecurity::default();
        assert_eq!(refusal(&none, &ContainerSecurity::default()), None);
        let ok = ContainerSecurity {
            seccomp: Some(Profile::Unconfined),
            apparmor: Some(Profile::Unconfined),
            privileged: true,
            no_new_privs: true,
            run_as_user: Some(1),
            ..caps(&["NET_ADMIN"], &["ALL"])
        };
        let host =
            SandboxSecurity { host_pid: true, host_ipc: true, share_process_namespace: true, ..Default::default() };
        assert_eq!(refusal(&host, &ok), None, "what the shim does, and what a host process already is");
        let shared = SandboxSecurity { share_process_namespace: true, ..Default::default() };
        assert!(refusal(&shared, &ContainerSecurity::default()).unwrap().contains("spec.shareProcessNamespace"));
        let seccomp =
            ContainerSecurity { seccomp: Some(Profile::Localhost("audit.json".into())), ..Default::default() };
        assert_eq!(
            refusal(&none, &seccomp).unwrap(),
            "the process runtime cannot honour securityContext.seccompProfile Localhost (audit.json) (it loads no seccomp filter)"
        );
        let all = ContainerSecurity {
            seccomp: Some(Profile::RuntimeDefault),
            apparmor: Some(Profile::RuntimeDefault),
            ..Default::default()
        };
        let sysctls = SandboxSecurity {
            sysctls: BTreeMap::from([("net.ipv4.tcp_syncookies".into(), "1".into())]),
            ..Default::default()
        };
        let why = refusal(&sysctls, &all).unwrap();
        for field in
            ["seccompProfile RuntimeDefault", "appArmorProfile RuntimeDefault", "sysctls net.ipv4.tcp_syncookies"]
        {
            assert!(why.contains(field), "{field} in {why}");
        }
    }

    #[test]
    fn passwd_lines_give_the_primary_group() {
        let passwd = "# comment\nbad line\nwww:x:33:34::/var/www:/bin/false\n";
        assert_eq!(passwd_gid(passwd, 33), Some(34));
        assert_eq!(passwd_gid(passwd, 34), None);
        assert!(all_capabilities() & 1 == 1 && all_capabilities() >= (1 << 37) - 1);
    }
}
