//! The systemd cgroup driver (kubelet's `cgroupDriver: systemd`). On a host where systemd is
//! PID 1 it owns the cgroup tree: a cgroup made beside it is one it does not know, and it
//! may take controllers away from it or reset its limits at a `daemon-reload`. So, as
//! kubelet does through libcontainer, ferrolet's levels are transient slices systemd makes
//! and removes (`StartTransientUnit`, `StopUnit` over D-Bus), named so that systemd nests
//! them (`kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`), with
//! their limits set as unit properties (`CPUWeight`, `MemoryMax`, `TasksMax`, ...) and
//! written to the files as well. A container's cgroup is a scope in its pod's slice with
//! `Delegate=yes`, started around its process by whoever starts it (containerd's runc with
//! `SystemdCgroup = true`, or the process runtime's shim, `start_scope`).
//!
//! The decisions (names, properties) are pure functions; `Systemd` is the thin executor over
//! a cgroupfs driver that reads and writes the files.

use super::cgroupfs::{CgroupDriver, CgroupError, CgroupVersion};
use crate::base::dbus::{self, Connection, DbusError, Message, Type, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long one call to systemd's manager may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a started or stopped unit's cgroup may take to appear or go.
const UNIT_WAIT: Duration = Duration::from_secs(10);
/// How long a control file may take to appear once a property asks for its controller.
const CONTROLLER_WAIT: Duration = Duration::from_secs(2);
/// The property value systemd reads as "no limit" (`infinity`).
pub const INFINITY: u64 = u64::MAX;

/// The directory systemd makes when it runs as the init system (`sd_booted(3)`).
pub const SYSTEMD_RUN_DIR: &str = "/run/systemd/system";

/// Whether systemd is the init system here (`sd_booted`) with its bus up: where `auto`
/// picks the systemd driver.
pub fn available() -> bool {
    Path::new(SYSTEMD_RUN_DIR).is_dir() && system_bus().exists()
}

/// A part of a cgroup name as a slice name part: a dash is a level of systemd's tree, so it
/// becomes an underscore (kubelet's `escapeSystemdCgroupName`; pod UIDs have dashes).
pub fn escape(part: &str) -> String {
    part.replace('-', "_")
}

/// The cgroupfs path of cgroup name `parts` as nested slices: `["kubepods", "burstable"]` is
/// `/kubepods.slice/kubepods-burstable.slice` (kubelet's `CgroupName.ToSystemd`).
pub fn slice_path(parts: &[&str]) -> String {
    let mut path = String::new();
    let mut name = String::new();
    for part in parts.iter().filter(|p| !p.is_empty()) {
        if !name.is_empty() {
            name.push('-');
        }
        name.push_str(&escape(part));
        path.push('/');
        path.push_str(&name);
        path.push_str(".slice");
    }
    if path.is_empty() {
        "/".into()
    } else {
        path
    }
}

/// The pod UID in a pod slice's name (`kubepods-burstable-pod<uid>.slice`), if it is one.
pub fn pod_uid_of_slice(name: &str) -> Option<String> {
    let last = name.strip_suffix(".slice")?.rsplit('-').next()?;
    last.strip_prefix("pod").filter(|u| !u.is_empty()).map(|u| u.replace('_', "-"))
}

/// The slice unit whose cgroup is `path` (its last part), if the path ends in one.
pub fn slice_unit(path: &str) -> Option<&str> {
    path.rsplit('/').next().filter(|last| last.ends_with(".slice") && last.len() > ".slice".len())
}

/// The scope a container of the process runtime runs in (containerd's are
/// `cri-containerd-<id>.scope`).
pub fn container_scope(container_id: &str) -> String {
    format!("ferrolet-{container_id}.scope")
}

/// A `cpu.max` quota in µs per `period` as systemd's `CPUQuotaPerSecUSec`, rounded up to
/// systemd's 10 ms granularity (as libcontainer does, so the file is never below the quota).
fn quota_per_sec(quota: u64, period: u64) -> u64 {
    if period == 0 {
        return INFINITY;
    }
    let per_sec = quota.saturating_mul(1_000_000) / period;
    per_sec.div_ceil(10_000).saturating_mul(10_000)
}

/// A control file's value as a property value: a number, or "max"/"-1" as infinity.
fn limit(value: &str) -> Option<u64> {
    match value.trim() {
        "max" | "-1" => Some(INFINITY),
        v => v.parse().ok(),
    }
}

/// The unit properties that say what control `files` say, so systemd keeps the limits
/// (at a `daemon-reload` it writes its own values back). Files with no property
/// (`memory.oom.group`) are only written.
pub fn properties(files: &BTreeMap<String, String>) -> Vec<(&'static str, u64)> {
    let mut props = Vec::new();
    for (file, value) in files {
        let name = match file.as_str() {
            "cpu.weight" => "CPUWeight",
            "cpu.shares" => "CPUShares",
            "memory.max" => "MemoryMax",
            "memory.limit_in_bytes" => "MemoryLimit",
            "memory.swap.max" => "MemorySwapMax",
            "pids.max" => "TasksMax",
            // v2 `cpu.max` is "quota period"; v1 keeps the period in a file of its own.
            "cpu.max" | "cpu.cfs_quota_us" => {
                let mut parts = value.split_whitespace();
                let quota = parts.next().unwrap_or("max");
                let period = parts.next().or(files.get("cpu.cfs_period_us").map(String::as_str));
                let period = period.and_then(|p| p.parse().ok()).unwrap_or(crate::api::limits::QUOTA_PERIOD);
                let per_sec =
                    limit(quota).map_or(INFINITY, |q| if q == INFINITY { q } else { quota_per_sec(q, period) });
                props.push(("CPUQuotaPerSecUSec", per_sec));
                props.push(("CPUQuotaPeriodUSec", period));
                continue;
            }
            _ => continue,
        };
        if let Some(v) = limit(value) {
            props.push((name, v));
        }
    }
    props
}

/// `a(sv)` of unit properties.
fn property_array(props: Vec<(&str, Value)>) -> Value {
    let entries = props.into_iter().map(|(k, v)| Value::Struct(vec![Value::str(k), Value::Variant(Box::new(v))]));
    Value::Array(Type::Struct(vec![Type::Str, Type::Variant]), entries.collect())
}

/// The properties every unit ferrolet starts has: no implicit dependencies (it must not
/// wait for or stop with the boot's targets), and accounting on, so systemd enables the
/// controllers the limits need in every parent.
fn common_properties(description: String) -> Vec<(&'static str, Value)> {
    vec![
        ("Description", Value::Str(description)),
        ("DefaultDependencies", Value::Bool(false)),
        ("CPUAccounting", Value::Bool(true)),
        ("MemoryAccounting", Value::Bool(true)),
        ("TasksAccounting", Value::Bool(true)),
    ]
}

/// `StartTransientUnit` of `unit` with `props` and no auxiliary units.
fn start_transient(unit: &str, mode: &str, props: Vec<(&str, Value)>) -> Message {
    let aux = Value::Array(Type::Struct(vec![Type::Str, property_array(vec![]).type_of()]), vec![]);
    manager_call("StartTransientUnit", vec![Value::str(unit), Value::str(mode), property_array(props), aux])
}

/// Limits as property values.
fn limit_values(files: &BTreeMap<String, String>) -> impl Iterator<Item = (&'static str, Value)> {
    properties(files).into_iter().map(|(k, v)| (k, Value::U64(v)))
}

/// Polls `done` every 5 ms for up to `UNIT_WAIT` (systemd acts on a unit after it answers);
/// a timeout is `action` on `unit` failing.
fn wait_until(unit: &str, action: &'static str, done: impl Fn() -> bool) -> Result<(), CgroupError> {
    let deadline = Instant::now() + UNIT_WAIT;
    while !done() {
        if Instant::now() >= deadline {
            return Err(systemd_err(unit, action)(DbusError::Timeout(UNIT_WAIT)));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

fn manager_call(member: &str, body: Vec<Value>) -> Message {
    Message::call(
        "org.freedesktop.systemd1",
        "/org/freedesktop/systemd1",
        "org.freedesktop.systemd1.Manager",
        member,
        body,
    )
}

/// Whether a D-Bus error is systemd's "that unit is not there" (already stopped).
fn no_such_unit(e: &DbusError) -> bool {
    matches!(e, DbusError::Remote { name, .. } if name == "org.freedesktop.systemd1.NoSuchUnit")
}

/// Whether a D-Bus error is systemd's "that unit already exists" (already started).
fn unit_exists(e: &DbusError) -> bool {
    matches!(e, DbusError::Remote { name, .. } if name == "org.freedesktop.systemd1.UnitExists")
}

fn systemd_err<'a>(unit: &'a str, action: &'static str) -> impl FnOnce(DbusError) -> CgroupError + 'a {
    move |source| CgroupError::Systemd { unit: unit.into(), action, source: Box::new(source) }
}

/// Starts transient scope `unit` in `slice` around process `pid`, with `Delegate=yes` and
/// the limits of `files` as properties, and waits until the process is in it. What runc
/// does for a container; the process runtime's shim calls it before its workload runs.
pub fn start_scope(
    bus: &Path,
    unit: &str,
    slice: &str,
    pid: u32,
    files: &BTreeMap<String, String>,
) -> Result<(), CgroupError> {
    let mut conn = Connection::connect(bus, CALL_TIMEOUT).map_err(systemd_err(unit, "connecting to"))?;
    let mut props = common_properties(format!("ferrolet container {unit}"));
    props.push(("Slice", Value::str(slice)));
    props.push(("Delegate", Value::Bool(true)));
    props.push(("PIDs", Value::Array(Type::U32, vec![Value::U32(pid)])));
    if !files.contains_key("pids.max") {
        // Not systemd's DefaultTasksMax (15 % of the node's): the pod's pids.max limits it.
        props.push(("TasksMax", Value::U64(INFINITY)));
    }
    props.extend(limit_values(files));
    conn.call(&start_transient(unit, "fail", props), CALL_TIMEOUT).map_err(systemd_err(unit, "starting"))?;
    // The start job moves the process; until then it is still where it was forked.
    let needle = format!("/{unit}\n");
    let cgroup_file = format!("/proc/{pid}/cgroup");
    wait_until(unit, "waiting for", || std::fs::read_to_string(&cgroup_file).is_ok_and(|t| t.contains(&needle)))
}

/// The systemd driver: slices through systemd's manager on the system bus, files through a
/// cgroupfs driver of the host's version.
pub struct Systemd {
    fs: Box<dyn CgroupDriver>,
    bus: PathBuf,
    conn: parking_lot::Mutex<Option<Connection>>,
    /// The hierarchies systemd tracks processes in besides those `fs` writes (v1: its
    /// `name=systemd` one and a hybrid host's unified one).
    tracking: Vec<PathBuf>,
    /// The properties last set on each slice: the QoS slices are refreshed at every pod
    /// change and every minute, mostly to the same values, which need no call (systemd
    /// writes drop-in files for each).
    set: parking_lot::Mutex<std::collections::HashMap<String, Vec<(&'static str, u64)>>>,
}

impl Systemd {
    /// A driver over `fs`, talking to systemd on the bus socket `bus`; processes also join
    /// their cgroup in the `tracking` hierarchies (mount points).
    pub fn new(fs: Box<dyn CgroupDriver>, bus: &Path, tracking: Vec<PathBuf>) -> Systemd {
        Systemd { fs, bus: bus.into(), conn: Default::default(), tracking, set: Default::default() }
    }

    /// Checks that systemd answers on the bus (its `Version`), for the start-up log.
    pub fn systemd_version(&self) -> Result<String, CgroupError> {
        let body = vec![Value::str("org.freedesktop.systemd1.Manager"), Value::str("Version")];
        let call = Message::call(
            "org.freedesktop.systemd1",
            "/org/freedesktop/systemd1",
            "org.freedesktop.DBus.Properties",
            "Get",
            body,
        );
        let answer = self.call(&call).map_err(systemd_err("systemd", "reading the version of"))?;
        Ok(match answer.first() {
            Some(Value::Variant(v)) => v.as_str().unwrap_or_default().to_string(),
            _ => String::new(),
        })
    }

    /// One call on the kept connection, made anew when there is none or it broke.
    fn call(&self, msg: &Message) -> Result<Vec<Value>, DbusError> {
        let mut conn = self.conn.lock();
        if conn.is_none() {
            *conn = Some(Connection::connect(&self.bus, CALL_TIMEOUT)?);
        }
        let result = conn.as_mut().map_or(Err(DbusError::Timeout(CALL_TIMEOUT)), |c| c.call(msg, CALL_TIMEOUT));
        if matches!(result, Err(DbusError::Io(_) | DbusError::Timeout(_) | DbusError::Malformed(_))) {
            *conn = None;
        }
        result
    }

    /// `msg` about `unit`, where an error `done` says is already the wanted state.
    fn call_unit(
        &self,
        unit: &str,
        action: &'static str,
        msg: &Message,
        done: fn(&DbusError) -> bool,
    ) -> Result<(), CgroupError> {
        match self.call(msg) {
            Err(e) if !done(&e) => Err(systemd_err(unit, action)(e)),
            _ => Ok(()),
        }
    }

    /// Waits until the cgroup of slice `unit` at `path` exists (`want`) or is gone.
    fn wait_cgroup(&self, unit: &str, path: &str, want: bool) -> Result<(), CgroupError> {
        let Some(dir) = self.fs.dirs(path).into_iter().next() else { return Ok(()) };
        let action = if want { "waiting for the cgroup of" } else { "waiting for the removal of" };
        wait_until(unit, action, || dir.is_dir() == want)
    }
}

impl CgroupDriver for Systemd {
    fn version(&self) -> CgroupVersion {
        self.fs.version()
    }

    fn dirs(&self, path: &str) -> Vec<PathBuf> {
        self.fs.dirs(path)
    }

    fn dir_for(&self, path: &str, file: &str) -> Option<PathBuf> {
        self.fs.dir_for(path, file)
    }

    fn memory_dir(&self, path: &str) -> Option<PathBuf> {
        self.fs.memory_dir(path)
    }

    /// systemd enables what its units' accounting and delegation need; below a delegated
    /// scope the tree is the scope owner's.
    fn enable_controllers(&self, path: &str) -> Result<(), CgroupError> {
        match slice_unit(path) {
            Some(_) => Ok(()),
            None => self.fs.enable_controllers(path),
        }
    }

    fn systemd(&self) -> bool {
        true
    }

    /// The written hierarchies' and the tracking ones': a process in a scope must be in it
    /// where systemd looks, or systemd takes the scope for empty and stops it.
    fn procs_files(&self, path: &str) -> Vec<PathBuf> {
        let tracked = self.tracking.iter().map(|m| m.join(path.trim_start_matches('/')).join("cgroup.procs"));
        self.fs.procs_files(path).into_iter().chain(tracked).collect()
    }

    /// A slice is started as a transient unit (its parent slices with it, by systemd); a
    /// slice that is already there is left as it is.
    fn create(&self, path: &str) -> Result<(), CgroupError> {
        let Some(unit) = slice_unit(path) else { return self.fs.create(path) };
        if self.exists(path) {
            return Ok(());
        }
        let mut props = common_properties(format!("ferrolet {unit}"));
        if let Some(parent) = path.rsplit_once('/').and_then(|(parent, _)| slice_unit(parent)) {
            // Started after its parent, as libcontainer asks.
            props.push(("Wants", Value::Array(Type::Str, vec![Value::str(parent)])));
        }
        // A unit started meanwhile, or left from an earlier run and being stopped, is waited for.
        self.call_unit(unit, "starting", &start_transient(unit, "replace", props), unit_exists)?;
        self.set.lock().remove(unit);
        self.wait_cgroup(unit, path, true)
    }

    /// A slice's limits go to systemd as properties (kept by it for the unit's life) and to
    /// the files (what the kernel enforces now), as libcontainer does.
    fn apply(&self, path: &str, files: &BTreeMap<String, String>) -> Result<(), CgroupError> {
        if let Some(unit) = slice_unit(path) {
            let props = properties(files);
            if !props.is_empty() && self.set.lock().get(unit) != Some(&props) {
                let body = vec![Value::str(unit), Value::Bool(true), property_array(limit_values(files).collect())];
                let msg = manager_call("SetUnitProperties", body);
                self.call_unit(unit, "setting the properties of", &msg, |_| false)?;
                self.set.lock().insert(unit.to_string(), props);
            }
        }
        // systemd enables a controller in the parent once a unit's property needs it, after
        // it answers: a control file may take a moment to appear.
        let deadline = Instant::now() + CONTROLLER_WAIT;
        loop {
            match self.fs.apply(path, files) {
                Err(CgroupError::WriteControlFile { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
                other => return other,
            }
        }
    }

    /// Whatever is left in the slice is killed and its cgroups removed; then the unit is
    /// stopped, so systemd forgets it.
    fn destroy(&self, path: &str) -> Result<(), CgroupError> {
        let Some(unit) = slice_unit(path) else { return self.fs.destroy(path) };
        self.fs.destroy(path)?;
        self.set.lock().remove(unit);
        let stop = manager_call("StopUnit", vec![Value::str(unit), Value::str("replace")]);
        self.call_unit(unit, "stopping", &stop, no_such_unit)?;
        self.wait_cgroup(unit, path, false)
    }
}

/// The system bus, where systemd's manager is.
pub fn system_bus() -> PathBuf {
    PathBuf::from(dbus::SYSTEM_BUS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_names_nest_as_slices_with_dashes_escaped() {
        assert_eq!(slice_path(&["kubepods"]), "/kubepods.slice");
        assert_eq!(slice_path(&["kubepods", "burstable"]), "/kubepods.slice/kubepods-burstable.slice");
        assert_eq!(
            slice_path(&["kubepods", "besteffort", "pod0e1b-22"]),
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0e1b_22.slice"
        );
        assert_eq!(slice_path(&["ferrolet", "kubepods"]), "/ferrolet.slice/ferrolet-kubepods.slice");
        assert_eq!(slice_path(&[]), "/");
        assert_eq!(slice_path(&["", "kubepods"]), "/kubepods.slice");
    }

    #[test]
    fn a_pod_slice_gives_back_its_uid_and_other_slices_none() {
        assert_eq!(pod_uid_of_slice("kubepods-burstable-pod0e1b_22.slice").as_deref(), Some("0e1b-22"));
        assert_eq!(pod_uid_of_slice("kubepods-podabc.slice").as_deref(), Some("abc"));
        for other in ["kubepods-burstable.slice", "kubepods-pod.slice", "podabc", "x.scope"] {
            assert_eq!(pod_uid_of_slice(other), None, "{other}");
        }
        assert_eq!(slice_unit("/kubepods.slice/kubepods-pod1.slice"), Some("kubepods-pod1.slice"));
        assert_eq!(slice_unit("/kubepods.slice/kubepods-pod1.slice/ferrolet-ab.scope"), None);
        assert_eq!(slice_unit("/kubepods/pod1"), None);
        assert_eq!(slice_unit("/.slice"), None);
    }

    #[test]
    fn limits_become_the_properties_libcontainer_sets() {
        let files = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let v2 = properties(&files(&[
            ("cpu.weight", "39"),
            ("cpu.max", "50000 100000"),
            ("memory.max", "67108864"),
            ("memory.swap.max", "0"),
            ("memory.oom.group", "1"),
            ("pids.max", "max"),
        ]));
        assert_eq!(
            v2,
            vec![
                ("CPUQuotaPerSecUSec", 500_000),
                ("CPUQuotaPeriodUSec", 100_000),
                ("CPUWeight", 39),
                ("MemoryMax", 64 << 20),
                ("MemorySwapMax", 0),
                ("TasksMax", INFINITY),
            ]
        );
        // 1.5 ms a period of 100 ms is 15 ms a second: rounded up to systemd's 10 ms steps.
        let odd = properties(&files(&[("cpu.max", "1500 100000")]));
        assert_eq!(odd[0], ("CPUQuotaPerSecUSec", 20_000));
        let v1 = properties(&files(&[
            ("cpu.shares", "2"),
            ("cpu.cfs_period_us", "100000"),
            ("cpu.cfs_quota_us", "-1"),
            ("memory.limit_in_bytes", "1024"),
        ]));
        assert_eq!(
            v1,
            vec![
                ("CPUQuotaPerSecUSec", INFINITY),
                ("CPUQuotaPeriodUSec", 100_000),
                ("CPUShares", 2),
                ("MemoryLimit", 1024),
            ]
        );
    }
}
