//! SIGHUP: what a changed configuration file means for a running agent. The keys of
//! `AT_RUN_TIME` are applied at once (`Agent::reload`, the logger in `main`); every other
//! key that changed is named as waiting for a restart. Pure: `main` reads the files.

use std::collections::BTreeMap;

/// The keys a running agent applies when they change.
pub const AT_RUN_TIME: &[&str] = &[
    "log_level",
    "manifest_dir",
    "prober.max_threads",
    "events.aggregate_max_events",
    "events.aggregate_interval",
    "events.spam_burst",
    "events.spam_refill",
];

/// The keys set differently in file `new` than in file `old` (parsed TOML tables) that
/// take effect only at the next start; sorted.
pub fn needing_restart(old: &toml::Table, new: &toml::Table) -> Vec<String> {
    changed_keys(old, new).into_iter().filter(|k| !AT_RUN_TIME.contains(&k.as_str())).collect()
}

/// The keys (dotted: `events.spam_burst`) set differently in the two files, a key missing
/// from one counting as changed; sorted. Arrays are compared whole.
pub fn changed_keys(old: &toml::Table, new: &toml::Table) -> Vec<String> {
    let (mut a, mut b) = (BTreeMap::new(), BTreeMap::new());
    flatten("", old, &mut a);
    flatten("", new, &mut b);
    let mut keys: Vec<String> =
        a.keys().chain(b.keys()).filter(|k| a.get(*k) != b.get(*k)).map(|k| k.to_string()).collect();
    keys.sort();
    keys.dedup();
    keys
}

fn flatten<'a>(prefix: &str, table: &'a toml::Table, out: &mut BTreeMap<String, &'a toml::Value>) {
    for (k, v) in table {
        let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        match v {
            toml::Value::Table(t) => flatten(&key, t, out),
            other => {
                out.insert(key, other);
            }
        }
    }
}

/// Checks a `log_level` as `RUST_LOG` reads it: comma-separated directives, each a level
/// or `module=level`.
pub fn check_log_level(spec: &str) -> Result<(), String> {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    for directive in spec.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let level = directive.rsplit_once('=').map_or(directive, |(_, l)| l);
        let module_only = !directive.contains('=') && !LEVELS.contains(&directive.to_ascii_lowercase().as_str());
        if module_only && directive.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            // A bare module name turns it on at every level, as RUST_LOG reads it.
            continue;
        }
        if !LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "invalid value {spec:?}: {directive:?} is not a level (off, error, warn, info, debug, trace) or module=level"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        text.parse().unwrap()
    }

    #[test]
    fn changed_keys_are_dotted_and_a_key_set_in_one_file_only_counts() {
        let old = table("node_name = \"a\"\nmanifest_dir = \"/m\"\n[events]\nspam_burst = 5\nqueue_size = 9\n");
        let new = table("node_name = \"a\"\nmanifest_dir = \"/n\"\nlog_level = \"debug\"\n[events]\nspam_burst = 6\nqueue_size = 9\n[api]\nlisten = \"\"\n");
        assert_eq!(changed_keys(&old, &new), ["api.listen", "events.spam_burst", "log_level", "manifest_dir"]);
        assert_eq!(changed_keys(&new, &new), Vec::<String>::new());
    }

    #[test]
    fn run_time_keys_are_not_said_to_need_a_restart() {
        let old = table("state_dir = \"/s\"\n[prober]\nmax_threads = 8\n");
        let new =
            table("state_dir = \"/t\"\n[prober]\nmax_threads = 2\n[events]\nspam_refill = \"1m\"\nqueue_size = 10\n");
        assert_eq!(needing_restart(&old, &new), ["events.queue_size", "state_dir"]);
    }

    #[test]
    fn log_levels_are_read_as_rust_log_reads_them() {
        for ok in ["", "info", "DEBUG", "info,ferrolet::node::prober=debug", "ferrolet", "warn, ureq=off"] {
            assert_eq!(check_log_level(ok), Ok(()), "{ok}");
        }
        let e = check_log_level("info,prober=loud").unwrap_err();
        assert_eq!(
            e,
            "invalid value \"info,prober=loud\": \"prober=loud\" is not a level (off, error, warn, info, debug, trace) or module=level"
        );
        assert!(check_log_level("very verbose").is_err());
    }
}
