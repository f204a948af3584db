//! `ferrolet drain`: every pod of the node stopped and its records removed (with no agent running).

use super::flags::Flags;
use crate::config::Config;
use anyhow::Context;

pub fn drain(flags: Flags) -> anyhow::Result<()> {
    let cfg = Config::load(flags.config.as_deref(), &flags.overrides)?;
    let exe = std::env::current_exe().context("cannot find the ferrolet binary")?;
    let n = crate::agent::drain(&cfg, &exe)?;
    println!("drained {n} pod(s) from {}", cfg.state_dir.display());
    Ok(())
}
