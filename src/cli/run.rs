//! `ferrolet run`: the agent until SIGTERM or SIGINT, SIGHUP reloading the file.

use super::flags::Flags;
use super::logging::set_log_level;
use crate::agent::Agent;
use crate::config::Config;
use anyhow::{bail, Context};

pub fn run(flags: Flags) -> anyhow::Result<()> {
    // glibc gives every thread that allocates its own malloc arena; with a dozen threads
    // (probe pool included) that is megabytes of idle RSS on a small device. Two arenas
    // are plenty for an agent whose threads mostly wait.
    // SAFETY: mallopt only tunes the allocator; called before any thread is started.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
    // The file as the agent started with it is what a reload compares with.
    let (cfg, started_with) = match &flags.config {
        Some(p) => Config::load_file(p, &flags.overrides)?,
        None => (Config::load(None, &flags.overrides)?, toml::Table::new()),
    };
    if !cfg.log_level.is_empty() {
        set_log_level(&cfg.log_level);
    }
    // The same checks `ferrolet validate` makes, before anything is started.
    let cfg_name = flags.config.as_ref().map_or("defaults".to_string(), |p| p.display().to_string());
    if let Some(e) = cfg.check_host(&cfg_name).into_iter().next() {
        return Err(e.into());
    }
    let exe = std::env::current_exe().context("cannot find the ferrolet binary for container shims")?;
    // Read (and taken out of the environment) before any thread starts.
    let notify = crate::agent::notify::Notify::from_env().context("cannot use the service manager's NOTIFY_SOCKET")?;
    let mut signals = signal_hook::iterator::Signals::new([libc::SIGTERM, libc::SIGINT, libc::SIGHUP])
        .context("cannot install signal handlers")?;
    // While a CRI runtime is still starting: SIGTERM or SIGINT end the wait at once (a
    // SIGHUP is dropped: the file is read at start), and the service manager hears why the
    // start takes long and lets it take the whole wait.
    let mut told = false;
    let waiting = &mut |why: &str, wait: std::time::Duration| {
        if let (Some(n), false) = (&notify.notifier, told) {
            let usec = (wait + std::time::Duration::from_secs(30)).as_micros();
            n.say(&format!("STATUS=waiting for the container runtime: {why}\nEXTEND_TIMEOUT_USEC={usec}"));
            told = true;
        }
        !signals.pending().any(|s| s == libc::SIGTERM || s == libc::SIGINT)
    };
    let mut agent = match Agent::start_waiting(&cfg, &exe, waiting) {
        Err(crate::agent::AgentError::StoppedWaiting) => {
            log::info!("agent: stopped by a signal while waiting for the container runtime to start");
            return Ok(());
        }
        started => started?,
    };
    let mut log_level = cfg.log_level.clone();
    let watchdog = match (&notify.notifier, notify.watchdog) {
        (Some(n), Some(interval)) => Some(
            crate::agent::notify::spawn_watchdog(n.clone(), agent.health.clone(), interval)
                .context("cannot start the watchdog thread")?,
        ),
        _ => None,
    };
    if let Some(n) = &notify.notifier {
        n.say("READY=1\nSTATUS=running");
    }
    let mut last_reload: Option<std::time::Instant> = None;
    // Blocking here is the point: the main thread has nothing to do until a signal arrives.
    while let Some(mut sig) = signals.forever().next() {
        if sig == libc::SIGHUP {
            // At most one reload a second: the SIGHUPs of a storm meanwhile are one reload,
            // of the file as it is then. A SIGTERM meanwhile waits that long at most.
            if let Some(wait) = last_reload.map(|at| RELOAD_INTERVAL.saturating_sub(at.elapsed())) {
                std::thread::sleep(wait);
            }
            match signals.pending().find(|s| *s != libc::SIGHUP) {
                Some(other) => sig = other,
                None => {
                    reload(&flags, &started_with, &mut log_level, &mut agent);
                    last_reload = Some(std::time::Instant::now());
                    continue;
                }
            }
        }
        log::info!("agent: received signal {sig}, shutting down");
        break;
    }
    if let Some(n) = &notify.notifier {
        n.say("STOPPING=1");
    }
    if let Some(w) = watchdog {
        let _ = w.stop(std::time::Duration::from_secs(5));
    }
    let stuck = agent.stop();
    if !stuck.is_empty() {
        bail!("shutdown incomplete: {}", stuck.join("; "));
    }
    Ok(())
}

/// The shortest time between two SIGHUP reloads.
pub const RELOAD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// SIGHUP: reads the configuration file again; a file that cannot be read or is invalid
/// changes nothing, and so does a file that changes a key only a restart applies (it no
/// longer describes this agent: an empty file, say, would move `manifest_dir` to its
/// default while `state_dir` and `node_name` stay). Otherwise the run-time keys are applied
/// where they differ from what runs. A key a command-line flag sets keeps the flag's value.
pub fn reload(flags: &Flags, started_with: &toml::Table, log_level: &mut String, agent: &mut Agent) {
    let Some(path) = &flags.config else {
        log::info!("agent: SIGHUP: running on the built-in defaults, no configuration file to read again");
        return;
    };
    let (new, table) = match Config::load_file(path, &flags.overrides) {
        Ok(x) => x,
        Err(e) => {
            log::error!("agent: SIGHUP: {}; nothing changed", crate::base::errors::Chain(&e));
            return;
        }
    };
    let restart = crate::config::reload::needing_restart(started_with, &table);
    if !restart.is_empty() {
        log::error!(
            "agent: SIGHUP: {} changes {}, which only a restart applies; the file no longer describes this agent, so nothing changed (restart the agent to run on it)",
            path.display(),
            restart.join(", ")
        );
        return;
    }
    let mut applied = agent.reload(&new);
    if new.log_level != *log_level {
        set_log_level(&new.log_level);
        log_level.clone_from(&new.log_level);
        applied.insert(0, "log_level".into());
    }
    if applied.is_empty() {
        log::info!("agent: SIGHUP: {} read again; nothing to change", path.display());
    } else {
        log::info!("agent: SIGHUP: applied {}", applied.join(", "));
    }
}
