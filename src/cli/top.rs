//! `ferrolet top pods` and `ferrolet top node`: the CPU and memory in use, read from the
//! local API's `/stats/summary` and printed as `kubectl top` prints metrics-server's numbers
//! (CPU as the recent rate in millicores, memory as the working set in MiB). The printing is
//! pure (`render_top_pods`, `render_top_node`); `top` only fetches.

use super::flags::Flags;
use crate::api::{Node, Quantity};
use anyhow::bail;
use serde::Deserialize;

/// What `top` reads of kubelet's stats `Summary`: only what it prints (the rest of the JSON
/// is ignored).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Summary {
    /// The node.
    pub node: NodeUsage,
    /// The pods.
    pub pods: Vec<PodUsage>,
}

/// The node's usage.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeUsage {
    /// Its name.
    pub node_name: String,
    /// The whole machine's CPU.
    pub cpu: Option<CpuUsage>,
    /// The whole machine's memory.
    pub memory: Option<MemoryUsage>,
}

/// One pod's usage.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodUsage {
    /// Which pod.
    pub pod_ref: PodRef,
    /// Its running containers.
    pub containers: Vec<ContainerUsage>,
}

/// A pod's name and namespace.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct PodRef {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
}

/// One container's usage.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ContainerUsage {
    /// Its name in the pod.
    pub name: String,
    /// CPU.
    pub cpu: Option<CpuUsage>,
    /// Memory.
    pub memory: Option<MemoryUsage>,
}

/// CPU: the rate over the last collection period.
#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CpuUsage {
    /// Nanocores; `None` until the second collection.
    pub usage_nano_cores: Option<u64>,
}

/// Memory: the working set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MemoryUsage {
    /// Bytes.
    pub working_set_bytes: Option<u64>,
}

/// The order of the rows (`--sort-by`, as kubectl's: the largest first).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortBy {
    /// By namespace (with `-A`), then name.
    #[default]
    Name,
    /// By CPU in use.
    Cpu,
    /// By memory in use.
    Memory,
}

impl std::str::FromStr for SortBy {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<SortBy> {
        match s {
            "cpu" => Ok(SortBy::Cpu),
            "memory" => Ok(SortBy::Memory),
            other => bail!("--sort-by {other:?}: sort by cpu or memory"),
        }
    }
}

/// What `top pods` shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodsQuery {
    /// Only this namespace; `None`: every namespace (`-A`), with a NAMESPACE column.
    pub namespace: Option<String>,
    /// Only the pod of this name (its own, or the manifest's for a static pod).
    pub pod: Option<String>,
    /// One row per container (`--containers`).
    pub containers: bool,
    /// The order.
    pub sort_by: SortBy,
}

/// One pod's or container's numbers: nanocores and working-set bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Usage {
    nano_cores: u64,
    bytes: u64,
}

impl Usage {
    /// A container's, once it has both readings (a CPU rate needs two collections).
    fn of(c: &ContainerUsage) -> Option<Usage> {
        let nano_cores = c.cpu?.usage_nano_cores?;
        let bytes = c.memory?.working_set_bytes?;
        Some(Usage { nano_cores, bytes })
    }

    fn add(self, o: Usage) -> Usage {
        Usage { nano_cores: self.nano_cores.saturating_add(o.nano_cores), bytes: self.bytes.saturating_add(o.bytes) }
    }
}

/// A pod with each container's numbers and their sum.
struct Measured<'a> {
    pod: &'a PodUsage,
    containers: Vec<(&'a str, Usage)>,
    total: Usage,
}

/// kubectl's CPU cell: millicores, rounded up (`Quantity.MilliValue`), as `12m`.
fn cpu_cell(nano_cores: u64) -> String {
    format!("{}m", nano_cores.div_ceil(1_000_000))
}

/// kubectl's memory cell: whole MiB, rounded down, as `34Mi`.
fn memory_cell(bytes: u64) -> String {
    format!("{}Mi", bytes >> 20)
}

/// Whether pod `name` is the one asked for: its own name, or (a static pod) the manifest's
/// name before `-<node>`.
fn is_named(p: &PodRef, name: &str, node: &str) -> bool {
    p.name == name || p.name == format!("{name}-{node}")
}

/// `ferrolet top pods`, as `kubectl top pod`: NAME CPU(cores) MEMORY(bytes), with NAMESPACE
/// first for every namespace and POD before the container's NAME with `--containers`. A pod
/// is shown once each of its running containers has both readings, as metrics-server keeps
/// a pod only then.
pub fn render_top_pods(s: &Summary, q: &PodsQuery) -> anyhow::Result<String> {
    let node = &s.node.node_name;
    let wanted: Vec<&PodUsage> = s
        .pods
        .iter()
        .filter(|p| q.namespace.as_ref().map_or(true, |ns| *ns == p.pod_ref.namespace))
        .filter(|p| q.pod.as_ref().map_or(true, |name| is_named(&p.pod_ref, name, node)))
        .collect();
    // Each pod with its containers' numbers; a pod without all of them is left out.
    let mut measured: Vec<Measured> = wanted
        .iter()
        .filter(|p| !p.containers.is_empty())
        .filter_map(|p| {
            let containers: Option<Vec<(&str, Usage)>> =
                p.containers.iter().map(|c| Some((c.name.as_str(), Usage::of(c)?))).collect();
            let containers = containers?;
            let total = containers.iter().fold(Usage::default(), |a, (_, u)| a.add(*u));
            Some(Measured { pod: p, containers, total })
        })
        .collect();
    let where_ = match &q.namespace {
        Some(ns) => format!(" in {ns} namespace"),
        None => String::new(),
    };
    if let Some(name) = &q.pod {
        match (wanted.first(), measured.is_empty()) {
            (None, _) => bail!("pod {name:?} not found{where_}"),
            (Some(p), true) => bail!(
                "metrics not available yet for pod {}/{}: each of its running containers needs two collections (10s apart)",
                p.pod_ref.namespace,
                p.pod_ref.name
            ),
            _ => {}
        }
    }
    if measured.is_empty() {
        return Ok(format!("No resources found{where_}.\n"));
    }
    let key = |u: &Usage| match q.sort_by {
        SortBy::Name => 0,
        SortBy::Cpu => u.nano_cores,
        SortBy::Memory => u.bytes,
    };
    let all = q.namespace.is_none();
    // Largest first for cpu and memory; else (and between equals) by namespace and name.
    measured.sort_by(|a, b| {
        key(&b.total).cmp(&key(&a.total)).then_with(|| {
            let (a, b) = (&a.pod.pod_ref, &b.pod.pod_ref);
            let ns = if all { a.namespace.cmp(&b.namespace) } else { std::cmp::Ordering::Equal };
            ns.then_with(|| a.name.cmp(&b.name))
        })
    });
    let mut header: Vec<String> = Vec::new();
    if all {
        header.push("NAMESPACE".into());
    }
    if q.containers {
        header.push("POD".into());
    }
    header.extend(["NAME", "CPU(cores)", "MEMORY(bytes)"].map(String::from));
    let mut rows = vec![header];
    for Measured { pod, mut containers, total } in measured {
        let (namespace, name) = (&pod.pod_ref.namespace, &pod.pod_ref.name);
        let lead = || if all { vec![namespace.clone()] } else { Vec::new() };
        if q.containers {
            containers.sort_by(|a, b| key(&b.1).cmp(&key(&a.1)).then_with(|| a.0.cmp(b.0)));
            for (container, u) in containers {
                let mut row = lead();
                row.extend([name.clone(), container.to_string(), cpu_cell(u.nano_cores), memory_cell(u.bytes)]);
                rows.push(row);
            }
        } else {
            let mut row = lead();
            row.extend([name.clone(), cpu_cell(total.nano_cores), memory_cell(total.bytes)]);
            rows.push(row);
        }
    }
    Ok(super::table(rows, ""))
}

/// `ferrolet top node`, as `kubectl top node`: NAME CPU(cores) CPU(%) MEMORY(bytes)
/// MEMORY(%), the percentages of the node's allocatable CPU and memory (of its capacity
/// where `/node` gives no allocatable), `<unknown>` for a reading not made yet.
pub fn render_top_node(s: &Summary, node: &Node) -> String {
    let available = |name: &str| -> Option<&Quantity> {
        node.status.allocatable.get(name).or_else(|| node.status.capacity.get(name)).filter(|q| q.milli_value() > 0)
    };
    let percent = |used_milli: u64, of: Option<&Quantity>| match of {
        // kubectl's: the fraction of the milli-values, truncated.
        Some(q) => format!("{}%", (used_milli as f64 / q.milli_value() as f64 * 100.0) as i64),
        None => "<unknown>".into(),
    };
    let unknown = || ["<unknown>".to_string(), "<unknown>".to_string()];
    let cpu = match s.node.cpu.and_then(|c| c.usage_nano_cores) {
        Some(n) => [cpu_cell(n), percent(n.div_ceil(1_000_000), available("cpu"))],
        None => unknown(),
    };
    let memory = match s.node.memory.and_then(|m| m.working_set_bytes) {
        Some(b) => [memory_cell(b), percent(b.saturating_mul(1000), available("memory"))],
        None => unknown(),
    };
    let name = if s.node.node_name.is_empty() { node.metadata.name.clone() } else { s.node.node_name.clone() };
    let rows = vec![
        ["NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"].map(String::from).to_vec(),
        [name, cpu[0].clone(), cpu[1].clone(), memory[0].clone(), memory[1].clone()].to_vec(),
    ];
    super::table(rows, "")
}

/// `/stats/summary` from the agent at `server`; when it has none to give yet, its own reason
/// (`metrics not available yet: …`).
pub fn fetch_summary(server: &str) -> anyhow::Result<Summary> {
    let path = "/stats/summary?only_cpu_and_memory=true";
    let answer = super::fetch_answer(server, path)?;
    if answer.status == 503 {
        bail!("{}", answer.first_line());
    }
    super::decode_answer(server, path, &answer)
}

/// `ferrolet top pods|node`.
pub fn top(flags: Flags) -> anyhow::Result<()> {
    let server = super::get::api_server(&flags)?;
    match flags.positional.as_slice() {
        [kind, rest @ ..] if matches!(kind.as_str(), "pods" | "pod" | "po") => {
            if flags.all_namespaces && flags.namespace.is_some() {
                bail!("-A and --namespace cannot be used together");
            }
            let pod = match rest {
                [] => None,
                [name] => Some(name.clone()),
                _ => bail!("top pods takes at most one pod name"),
            };
            let namespace =
                if flags.all_namespaces { None } else { Some(flags.namespace.clone().unwrap_or("default".into())) };
            let sort_by = flags.sort_by.as_deref().map(str::parse).transpose()?.unwrap_or_default();
            let q = PodsQuery { namespace, pod, containers: flags.containers, sort_by };
            print!("{}", render_top_pods(&fetch_summary(&server)?, &q)?);
            Ok(())
        }
        [kind, rest @ ..] if matches!(kind.as_str(), "node" | "nodes" | "no") => {
            let summary = fetch_summary(&server)?;
            let node = super::fetch_node(&server)?;
            match rest {
                [] => {}
                [name] if *name == node.metadata.name => {}
                [name] => bail!("node {name:?} not found: this agent is node {:?}", node.metadata.name),
                _ => bail!("top node takes at most one node name"),
            }
            print!("{}", render_top_node(&summary, &node));
            Ok(())
        }
        [kind, ..] => bail!("unknown resource type {kind:?}: top shows pods or node"),
        [] => bail!("top needs a resource type: pods or node"),
    }
}

#[cfg(test)]
mod tests;
