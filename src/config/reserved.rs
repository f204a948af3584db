//! Resource reservations (`cgroups.system_reserved`, `kube_reserved`, `qos_reserved`, and
//! the same as `ferrolet plan` flags): parsing and checking, with errors that name the key
//! down to the resource.

use super::ConfigError;
use crate::api::Quantity;
use std::collections::BTreeMap;

/// A resource reservation that cannot be used, with the flag or key it concerns
/// (`cgroups.system_reserved.cpu`, `--kube-reserved`).
#[derive(Debug, thiserror::Error)]
#[error("{key}")]
pub struct ReservationError {
    /// The flag or dotted key, down to the resource when the problem is one resource's.
    pub key: String,
    /// What is wrong and what is allowed.
    #[source]
    pub problem: ReservationProblem,
}

/// What is wrong with a reservation.
#[derive(Debug, thiserror::Error)]
pub enum ReservationProblem {
    /// An entry of a `name=quantity` list has no `=`.
    #[error("{entry:?} is not name=quantity (e.g. cpu=100m,memory=1Gi)")]
    SplitEntry {
        /// The entry.
        entry: String,
    },
    /// A quantity does not parse.
    #[error(transparent)]
    ParseQuantity(#[from] crate::api::quantity::QuantityError),
    /// A reservation is negative.
    #[error("invalid value {value:?}: must not be negative")]
    CheckSign {
        /// The quantity as written.
        value: String,
    },
    /// A resource other than cpu, memory and pid.
    #[error("unsupported resource: allowed are cpu, memory, pid")]
    CheckResource,
    /// A QoS reservation of something other than memory.
    #[error("unsupported resource: only memory can be reserved by QoS")]
    CheckQosResource,
    /// A QoS reservation that is not a percentage from 0% to 100%.
    #[error("invalid value {value:?}: must be a percentage from 0% to 100%")]
    ParsePercentage {
        /// The value as written.
        value: String,
    },
}

impl ReservationError {
    fn new(key: String, problem: ReservationProblem) -> ReservationError {
        ReservationError { key, problem }
    }

    /// The problem as a config error of `file`: `file: key: what is allowed`.
    pub fn in_file(&self, file: &str) -> ConfigError {
        let message = crate::base::errors::Chain(&self.problem).to_string();
        ConfigError::Invalid { file: file.into(), key: self.key.clone(), message }
    }
}

/// Parses `cpu=100m,memory=1Gi` (the form of `--system-reserved`); `what` names the flag or key.
pub fn parse_resource_list(what: &str, text: &str) -> Result<BTreeMap<String, Quantity>, ReservationError> {
    let mut out = BTreeMap::new();
    for pair in text.split(',').filter(|p| !p.trim().is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| ReservationError::new(what.into(), ReservationProblem::SplitEntry { entry: pair.into() }))?;
        let q =
            Quantity::parse(v.trim()).map_err(|e| ReservationError::new(format!("{what}.{}", k.trim()), e.into()))?;
        out.insert(k.trim().to_string(), q);
    }
    Ok(out)
}

/// Converts a reservation map to node resources; only `cpu`, `memory` and `pid` are allowed.
pub fn reserved_resources(
    what: &str,
    list: &BTreeMap<String, Quantity>,
) -> Result<crate::node::cm::NodeResources, ReservationError> {
    let mut r = crate::node::cm::NodeResources::default();
    for (k, q) in list {
        let bad = |problem| ReservationError::new(format!("{what}.{k}"), problem);
        if q.is_negative() {
            return Err(bad(ReservationProblem::CheckSign { value: q.to_string() }));
        }
        match k.as_str() {
            "cpu" => r.cpu_millis = q.milli_value(),
            "memory" => r.memory = q.value(),
            "pid" => r.pids = q.value(),
            _ => return Err(bad(ReservationProblem::CheckResource)),
        }
    }
    Ok(r)
}

/// Parses `memory=50%` (the form of `--qos-reserved`) into the memory percentage.
pub fn qos_reserved_memory(what: &str, list: &BTreeMap<String, String>) -> Result<Option<u32>, ReservationError> {
    let mut pct = None;
    for (k, v) in list {
        let bad = |problem| ReservationError::new(format!("{what}.{k}"), problem);
        if k != "memory" {
            return Err(bad(ReservationProblem::CheckQosResource));
        }
        let n = v.trim().strip_suffix('%').and_then(|n| n.parse::<u32>().ok()).filter(|n| *n <= 100);
        pct = Some(n.ok_or_else(|| bad(ReservationProblem::ParsePercentage { value: v.clone() }))?);
    }
    Ok(pct)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(e: &ReservationError) -> String {
        crate::base::errors::Chain(e).to_string()
    }

    #[test]
    fn reservation_errors_name_the_key_and_the_resource() {
        let e = parse_resource_list("--kube-reserved", "cpu=1,memory").unwrap_err();
        assert_eq!(chain(&e), "--kube-reserved: \"memory\" is not name=quantity (e.g. cpu=100m,memory=1Gi)");
        let e = parse_resource_list("--kube-reserved", "cpu=lots").unwrap_err();
        assert_eq!(
            (e.key.as_str(), chain(&e).as_str()),
            ("--kube-reserved.cpu", "--kube-reserved.cpu: invalid quantity \"lots\"")
        );
        let list = parse_resource_list("x", "gpu=1").unwrap();
        let e = reserved_resources("cgroups.system_reserved", &list).unwrap_err();
        assert!(matches!(e.problem, ReservationProblem::CheckResource));
        let file = e.in_file("f.toml").to_string();
        assert_eq!(file, "f.toml: cgroups.system_reserved.gpu: unsupported resource: allowed are cpu, memory, pid");
        let list = parse_resource_list("x", "memory=-1").unwrap();
        let e = reserved_resources("r", &list).unwrap_err();
        assert_eq!(chain(&e), "r.memory: invalid value \"-1\": must not be negative");
        let qos = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        assert_eq!(qos_reserved_memory("q", &qos("memory", "50%")).unwrap(), Some(50));
        let e = qos_reserved_memory("q", &qos("cpu", "50%")).unwrap_err();
        assert_eq!(chain(&e), "q.cpu: unsupported resource: only memory can be reserved by QoS");
        let e = qos_reserved_memory("q", &qos("memory", "150%")).unwrap_err();
        assert_eq!(chain(&e), "q.memory: invalid value \"150%\": must be a percentage from 0% to 100%");
    }
}
