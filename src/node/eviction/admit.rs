//! kubelet's `Admit` under node pressure: with memory pressure alone only BestEffort pods
//! are refused (unless they tolerate the memory-pressure taint); with disk or PID pressure
//! every pod. Critical pods (static, mirror, or of system-critical priority) are always
//! admitted, as kubelet's.

use super::messages::admission_message;
use super::{is_critical, NodeConditions, Pressure, MEMORY_PRESSURE_TAINT, REASON};
use crate::api::Pod;
use crate::node::cm::qos::{pod_qos, QosClass};

/// The verdict on a new pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// It may start.
    Admit,
    /// It fails at once with this reason (`Evicted`) and message.
    Refuse {
        /// The pod status's reason, and the Warning event's.
        reason: &'static str,
        /// `The node had condition: [MemoryPressure]. `
        message: String,
    },
}

/// Whether one of `pod`'s tolerations (`spec.tolerations`) tolerates the taint `key` with
/// effect `NoSchedule` and no value (kubelet's `ToleratesTaint`).
fn tolerates(pod: &Pod, key: &str) -> bool {
    let Some(list) = pod.spec.other.get("tolerations").and_then(serde_json::Value::as_array) else {
        return false;
    };
    list.iter().any(|t| {
        let field = |name: &str| t.get(name).and_then(serde_json::Value::as_str).unwrap_or("");
        let effect_ok = field("effect").is_empty() || field("effect") == "NoSchedule";
        let key_ok = field("key").is_empty() || field("key") == key;
        let op_ok = match field("operator") {
            "" | "Equal" => field("value").is_empty(),
            "Exists" => true,
            _ => false,
        };
        effect_ok && key_ok && op_ok
    })
}

/// kubelet's `Admit`.
pub fn admit(conditions: &NodeConditions, pod: &Pod) -> Admission {
    let active = conditions.active();
    if active.is_empty() || is_critical(pod) {
        return Admission::Admit;
    }
    if active == [Pressure::Memory] && (pod_qos(pod) != QosClass::BestEffort || tolerates(pod, MEMORY_PRESSURE_TAINT)) {
        return Admission::Admit;
    }
    Admission::Refuse { reason: REASON, message: admission_message(&active) }
}
