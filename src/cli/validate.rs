//! `ferrolet validate`: the configuration file and manifests checked, nothing run.

use super::flags::Flags;
use crate::config::Config;
use crate::pods::source::read_manifest;
use std::path::PathBuf;

pub fn validate(flags: Flags) -> anyhow::Result<bool> {
    use crate::base::logsafe;
    use crate::pods::source::{dedupe, list_manifest_dir, over_max_pods_message, split_at_max_pods};
    let cfg = Config::load(flags.config.as_deref(), &flags.overrides)?;
    let cfg_name = flags.config.as_ref().map_or("defaults".to_string(), |p| p.display().to_string());
    // What `run` would refuse on this machine, by the same check `run` makes.
    let host = cfg.check_host(&cfg_name);
    let mut ok = host.is_empty();
    for e in &host {
        eprintln!("{}", logsafe::Escaped(&crate::base::errors::Chain(e).to_string()));
    }
    if ok {
        if let Some(p) = &flags.config {
            println!("{}: ok", logsafe::path(p));
        }
    }
    let mut files: Vec<PathBuf> = flags.positional.iter().map(PathBuf::from).collect();
    if files.is_empty() {
        // The files the agent would read, skipped ones reported as the agent does.
        match list_manifest_dir(&cfg.manifest_dir) {
            Ok(entries) => {
                for (path, checked) in entries {
                    match checked {
                        Ok(_) => files.push(path),
                        Err(e) => println!(
                            "{}: warning: skipped: {}",
                            logsafe::path(&path),
                            logsafe::Escaped(&crate::base::errors::Chain(&e).to_string())
                        ),
                    }
                }
            }
            Err(e) => {
                eprintln!("{}: cannot read the manifest directory: {e}", logsafe::path(&cfg.manifest_dir));
                ok = false;
            }
        }
    }
    // File name order, then document order: the order in which the agent keeps the
    // first of two pods with the same name.
    files.sort();
    let mut valid: Vec<(PathBuf, Vec<crate::api::Pod>)> = Vec::new();
    for f in files {
        let shown = logsafe::path(&f);
        match read_manifest(&f, &cfg.node_name) {
            Ok(pods) => {
                let names: Vec<String> = pods.iter().map(|p| p.metadata.name.clone()).collect();
                println!("{shown}: ok ({})", names.join(", "));
                for p in &pods {
                    // What this runtime will refuse (the pod's containers would not start)
                    // or accept without effect.
                    for u in crate::api::fields::check(p, cfg.runtime.kind()) {
                        let what = if u.is_refused() { "error" } else { "note" };
                        let line = format!("{shown}: {what}: pod {}: {}", p.metadata.name, u.describe());
                        if u.is_refused() {
                            ok = false;
                            eprintln!("{}", logsafe::Escaped(&line));
                        } else {
                            println!("{}", logsafe::Escaped(&line));
                        }
                    }
                    for c in p.spec.init_containers.iter().chain(&p.spec.containers) {
                        if cfg.runtime == crate::config::RuntimeBackend::Process && c.command.is_empty() {
                            println!(
                                "{shown}: warning: container {}: the process runtime needs `command` (images are not used)",
                                c.name
                            );
                        }
                    }
                }
                valid.push((f, pods));
            }
            Err(errors) => {
                ok = false;
                for e in errors {
                    eprintln!("{e}");
                }
            }
        }
    }
    let (pods, duplicates) = dedupe(valid.iter().map(|(f, pods)| (f.as_path(), pods.as_slice())));
    for d in duplicates {
        ok = false;
        eprintln!("{}; the agent runs only the first", d.message());
    }
    let (_, refused) = split_at_max_pods(pods, cfg.max_pods);
    for p in refused {
        ok = false;
        eprintln!("{}; the agent would refuse it", over_max_pods_message(&p, cfg.max_pods));
    }
    Ok(ok)
}
