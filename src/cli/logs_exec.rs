//! `ferrolet logs` and `ferrolet exec`: the flags turned into `podcmd`'s calls.

use super::flags::Flags;
use crate::config::Config;
use crate::pods::podcmd;
use anyhow::bail;

/// The pod and container `logs` and `exec` name: `POD`, `-n`, `-c`.
pub fn pod_target(flags: &Flags, cmd: &str) -> anyhow::Result<podcmd::Target> {
    let name = match flags.positional.as_slice() {
        [name] => name.clone(),
        [] => bail!("{cmd} needs a pod name"),
        [_, extra, ..] => bail!("{cmd}: unexpected argument {extra:?} (give one pod name)"),
    };
    let namespace = flags.namespace.clone().unwrap_or_else(|| podcmd::DEFAULT_NAMESPACE.into());
    Ok(podcmd::Target { pod: podcmd::PodRef { namespace, name }, container: flags.container.clone() })
}

pub fn logs(flags: Flags) -> anyhow::Result<u8> {
    let target = pod_target(&flags, "logs")?;
    let opts = crate::node::podlogs::LogOptions {
        tail: flags.tail.as_deref().map(podcmd::parse_tail).transpose()?.flatten(),
        timestamps: flags.timestamps,
        since: None,
    };
    let cfg = Config::load(flags.config.as_deref(), &flags.overrides)?;
    let runtime = crate::agent::open_runtime_read_only(&cfg)?;
    Ok(podcmd::logs(&*runtime, &target, flags.previous, flags.follow, opts)?)
}

pub fn exec(flags: Flags) -> anyhow::Result<u8> {
    let Some(command) = flags.command.as_deref() else {
        bail!("exec needs the command after --: ferrolet exec POD -- COMMAND [ARG...]");
    };
    if command.is_empty() {
        bail!("exec needs a command after --");
    }
    let target = pod_target(&flags, "exec")?;
    let timeout = flags.timeout.as_deref().map(podcmd::parse_timeout).transpose()?;
    let cfg = Config::load(flags.config.as_deref(), &flags.overrides)?;
    let runtime = crate::agent::open_runtime_read_only(&cfg)?;
    Ok(podcmd::exec(&*runtime, &target, command, timeout.unwrap_or(podcmd::DEFAULT_EXEC_TIMEOUT))?)
}
