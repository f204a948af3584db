//! `ferrolet get` and `ferrolet describe`: the local API's answers printed as kubectl prints them.

use super::flags::Flags;
use crate::cli::{self, Output};
use crate::config::Config;
use anyhow::{bail, Context};

pub fn api_server(flags: &Flags) -> anyhow::Result<String> {
    match &flags.server {
        Some(s) => Ok(s.clone()),
        None => Ok(Config::load(flags.config.as_deref(), &flags.overrides)?.api.listen),
    }
}

pub fn get(flags: Flags) -> anyhow::Result<()> {
    let server = api_server(&flags)?;
    match flags.positional.first().map(String::as_str) {
        Some("pods" | "pod" | "po") => {
            let list = cli::fetch_pods(&server)?;
            print!("{}", cli::render_pods(&list, flags.output.unwrap_or(Output::Table))?);
            Ok(())
        }
        Some("events" | "event" | "ev") => get_events(&server, &flags),
        Some("node" | "nodes" | "no") => {
            print!("{}", cli::render_node(&cli::fetch_node(&server)?, flags.output.unwrap_or(Output::Table))?);
            Ok(())
        }
        Some("devices" | "device") => {
            print!("{}", cli::render_devices(&cli::fetch_devices(&server)?, flags.output.unwrap_or(Output::Table))?);
            Ok(())
        }
        Some("images" | "image") => {
            print!("{}", cli::render_images(&cli::fetch_images(&server)?, flags.output.unwrap_or(Output::Table))?);
            Ok(())
        }
        Some(other) => bail!("unknown resource type {other:?}: supported: pods, events, node, devices, images"),
        None => bail!("get needs a resource type: pods, events, node, devices or images"),
    }
}

pub fn get_events(server: &str, flags: &Flags) -> anyhow::Result<()> {
    let pod = match &flags.for_object {
        Some(obj) => {
            let name = obj.strip_prefix("pod/").or_else(|| obj.strip_prefix("pods/")).with_context(|| {
                format!(
                    "--for {obj:?}: give the object as pod/NAME (events for other objects are listed without --for)"
                )
            })?;
            Some(cli::find_pod(&cli::fetch_pods(server)?, name)?)
        }
        None => None,
    };
    let list = cli::fetch_events(server, pod.as_ref())?;
    match flags.output {
        Some(Output::Json) => {
            println!("{}", serde_json::to_string_pretty(&list)?);
            return Ok(());
        }
        Some(Output::Yaml) => {
            print!("{}", serde_norway::to_string(&list)?);
            return Ok(());
        }
        _ => {}
    }
    if list.items.is_empty() && !flags.watch {
        println!("No events found");
        return Ok(());
    }
    print!("{}", cli::render_events(&list.items, true));
    if !flags.watch {
        return Ok(());
    }
    // --watch: print each event again whenever it is new or its count changed; Ctrl-C ends it.
    let mut seen: std::collections::HashMap<String, i32> =
        list.items.iter().map(|e| (e.metadata.name.clone(), e.count)).collect();
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
        let list = cli::fetch_events(server, pod.as_ref())?;
        let fresh: Vec<_> = list.items.into_iter().filter(|e| seen.get(&e.metadata.name) != Some(&e.count)).collect();
        for e in &fresh {
            seen.insert(e.metadata.name.clone(), e.count);
        }
        print!("{}", cli::render_events(&fresh, false));
        use std::io::Write as _;
        std::io::stdout().flush()?;
    }
}

pub fn describe(flags: Flags) -> anyhow::Result<()> {
    let server = api_server(&flags)?;
    let name = match flags.positional.as_slice() {
        [kind, name] if matches!(kind.as_str(), "pod" | "pods" | "po") => name,
        [kind, _] => bail!("unknown resource type {kind:?}: supported: pod"),
        _ => bail!("usage: ferrolet describe pod NAME"),
    };
    let pod = cli::find_pod(&cli::fetch_pods(&server)?, name)?;
    let events = cli::fetch_events(&server, Some(&pod))?;
    print!("{}", cli::describe_pod(&pod, &events.items));
    Ok(())
}
