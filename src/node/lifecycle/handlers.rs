//! Running one hook handler, blocking, bounded by the hook's timeout (kubelet's
//! `handlerRunner`): `exec` through the runtime (`exec_sync`), `httpGet` as an HTTP probe's
//! GET (any status below 400 is a success), `sleep` on this thread (ended early by the
//! agent's stop). Failures are kubelet's messages.

use super::{HookKind, HookRequest};
use crate::base::errors::Chain;
use crate::base::manager::StopSignal;
use crate::node::prober::probes::{self, Lookups, Outcome, Target};
use crate::node::runtime::ContainerRuntime;
use std::sync::Arc;
use std::time::Duration;

/// Runs `req`'s handler; `None` when the agent stopped first (nothing to report).
pub fn run(
    req: &HookRequest,
    runtime: &Arc<dyn ContainerRuntime>,
    lookups: &Lookups,
    stop: &StopSignal,
) -> Option<Result<(), String>> {
    let h = &req.handler;
    let name = &req.container.name;
    if let Some(x) = &h.exec {
        let joined = x.command.join(" ");
        let failed = |error: String, output: &str| {
            Err(format!(
                "Exec lifecycle hook ({:?}) for Container {name:?} in Pod {:?} failed - error: {error}, message: {output:?}",
                x.command, req.pod_desc
            ))
        };
        return Some(match runtime.exec_sync(&req.container_id, &x.command, req.timeout) {
            Ok(r) if r.timed_out => failed(format!("command '{joined}' timed out after {:?}", req.timeout), ""),
            Ok(r) if r.exit_code != 0 => {
                let mut out = r.stdout;
                out.extend_from_slice(&r.stderr);
                out.truncate(crate::node::prober::MAX_OUTPUT);
                let out = String::from_utf8_lossy(&out);
                failed(format!("command '{joined}' exited with {}", r.exit_code), &out)
            }
            Ok(_) => Ok(()),
            Err(e) => failed(Chain(&e).to_string(), ""),
        });
    }
    if let Some(g) = &h.http_get {
        let target = Target {
            pod_ip: req.pod_ip.clone(),
            container: req.container.clone(),
            container_id: req.container_id.clone(),
        };
        return Some(match probes::http(g, &target, req.timeout, lookups) {
            Outcome::Success(_) | Outcome::Warning(_) => Ok(()),
            Outcome::Failure(e) | Outcome::Error(e) => Err(format!(
                "HTTP lifecycle hook ({}) for Container {name:?} in Pod {:?} failed - error: {e}",
                g.path, req.pod_desc
            )),
        });
    }
    if let Some(s) = &h.sleep {
        let d = Duration::from_secs(s.seconds.max(0) as u64).min(req.timeout);
        // The agent's stop ends the sleep, unreported.
        return (!stop.sleep(d)).then_some(Ok(()));
    }
    let what = if req.kind == HookKind::PostStart { "postStart" } else { "preStop" };
    Some(Err(format!("{what} hook of container {name:?} in pod {:?} has no handler", req.pod_desc)))
}
