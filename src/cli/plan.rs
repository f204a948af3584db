//! `ferrolet plan cgroups`: the cgroup tree ferrolet would write for the given pods.

use super::flags::Flags;
use crate::cli::{self, Output};
use crate::config::Config;
use crate::pods::source::read_manifest;
use anyhow::bail;

pub fn plan(flags: Flags) -> anyhow::Result<bool> {
    use crate::config::{parse_resource_list, qos_reserved_memory, reserved_resources};
    use crate::node::cm::{self, cgroupfs::CgroupVersion};
    match flags.positional.first().map(String::as_str) {
        Some("cgroups") => {}
        _ => bail!("usage: ferrolet plan cgroups [flags] MANIFEST..."),
    }
    let cfg = Config::load(flags.config.as_deref(), &flags.overrides)?;
    let mut settings = cfg.cgroups.settings()?;
    let p = &flags.plan;
    let mut capacity = cm::NodeResources::from_proc();
    if let Some(v) = p.get("cpus") {
        let q = crate::api::Quantity::parse(v).map_err(|e| anyhow::anyhow!("--cpus: {e}"))?;
        capacity.cpu_millis = q.milli_value();
    }
    if let Some(v) = p.get("memory") {
        capacity.memory = crate::api::Quantity::parse(v).map_err(|e| anyhow::anyhow!("--memory: {e}"))?.value();
    }
    if let Some(v) = p.get("pids") {
        capacity.pids = v.parse().map_err(|_| anyhow::anyhow!("--pids: {v:?} is not a number"))?;
    }
    for (flag, target) in
        [("system-reserved", &mut settings.system_reserved), ("kube-reserved", &mut settings.kube_reserved)]
    {
        if let Some(v) = p.get(flag) {
            let list = parse_resource_list(&format!("--{flag}"), v)?;
            *target = reserved_resources(&format!("--{flag}"), &list)?;
        }
    }
    if let Some(v) = p.get("qos-reserved") {
        let list =
            v.split(',').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect();
        settings.qos_reserved_memory = qos_reserved_memory("--qos-reserved", &list)?;
    }
    if let Some(v) = p.get("cgroup-root") {
        settings.root = v.clone();
    }
    let version = match p.get("cgroup-version").map(String::as_str) {
        Some("1") => CgroupVersion::V1,
        Some("2") => CgroupVersion::V2,
        Some(other) => bail!("--cgroup-version: unsupported value {other:?}: supported values: 1, 2"),
        None => cm::cgroupfs::Mounts::read(&cfg.cgroups.mountinfo)
            .and_then(|m| m.version(cfg.cgroups.forced_version()))
            .unwrap_or(CgroupVersion::V2),
    };
    // Swap limits as the agent writes them on this host: when its kernel accounts swap.
    if p.get("cgroup-version").is_none() {
        if let Ok(driver) = cm::cgroupfs::detect(&cfg.cgroups.mountinfo, cfg.cgroups.forced_version()) {
            capacity.swap = cm::swap_accounted(&*driver, &cm::kubepods_path(&settings));
        }
    }
    let mut pods = Vec::new();
    let mut ok = true;
    for f in &flags.positional[1..] {
        match read_manifest(std::path::Path::new(f), &cfg.node_name) {
            Ok(p) => pods.extend(p),
            Err(errors) => {
                ok = false;
                for e in errors {
                    eprintln!("{e}");
                }
            }
        }
    }
    let refs: Vec<&crate::api::Pod> = pods.iter().collect();
    let plan = cm::plan(&settings, version, &capacity, &refs, cfg.runtime == crate::config::RuntimeBackend::Process);
    if flags.output == Some(Output::Json) {
        println!("{}", serde_json::to_string_pretty(&plan)?);
    } else {
        print!("{}", cli::render_plan(&plan));
    }
    Ok(ok)
}
