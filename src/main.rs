//! The `ferrolet` command line: `run`, `validate`, `get …`, `describe`, `top`, `logs`, `exec`,
//! `plan`, `drain`, `version` (and the internal `shim`, which the process runtime starts
//! once per container). This file parses and dispatches; each subcommand is in
//! `ferrolet::cli`.

use ferrolet::cli::flags::{help_for, parse_flags, split_at_dashes, Flags, USAGE};
use ferrolet::cli::logging::{abort_on_panic, end_quietly_on_a_closed_stdout, init_logging, log_panics};
use ferrolet::cli::{
    drain::drain, get::describe, get::get, logs_exec::exec, logs_exec::logs, plan::plan, run::run, top::top,
    validate::validate,
};
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(cmd) = args.next() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    if cmd == "shim" {
        // Said on stderr (the shim's log) by Rust's own hook.
        abort_on_panic();
        // The shim must fork before anything else creates threads or state.
        let Some(dir) = args.next() else {
            return ExitCode::from(2);
        };
        return ExitCode::from(ferrolet::node::runtime::process::shim::main(std::path::Path::new(&dir)) as u8);
    }
    let cmd = cmd.to_string_lossy().into_owned();
    init_logging();
    log_panics();
    abort_on_panic();
    if matches!(
        cmd.as_str(),
        "get"
            | "describe"
            | "top"
            | "logs"
            | "exec"
            | "validate"
            | "plan"
            | "version"
            | "--version"
            | "help"
            | "-h"
            | "--help"
    ) {
        end_quietly_on_a_closed_stdout();
    }
    // Only `exec` takes words after `--` (its command, which may look like flags).
    let args: Vec<std::ffi::OsString> = args.collect();
    let parsed = if cmd == "exec" {
        split_at_dashes(args).and_then(|(args, command)| Ok(Flags { command, ..parse_flags(args)? }))
    } else {
        parse_flags(args)
    };
    let flags = match parsed {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e:#}\n\n{}", help_for(&cmd));
            return ExitCode::from(2);
        }
    };
    if flags.help {
        print!("{}", help_for(&cmd));
        return ExitCode::SUCCESS;
    }
    let done = |ok: bool| u8::from(!ok);
    let result = match cmd.as_str() {
        "run" => run(flags).map(|_| 0),
        "validate" => validate(flags).map(done),
        "get" => get(flags).map(|_| 0),
        "drain" => drain(flags).map(|_| 0),
        "describe" => describe(flags).map(|_| 0),
        "top" => top(flags).map(|_| 0),
        "logs" => logs(flags),
        "exec" => exec(flags),
        "plan" => plan(flags).map(done),
        "version" | "--version" => {
            println!("ferrolet {}", env!("CARGO_PKG_VERSION"));
            Ok(0)
        }
        "help" | "-h" | "--help" => {
            // `ferrolet help get` is `ferrolet get --help`.
            print!("{}", help_for(flags.positional.first().map_or("", String::as_str)));
            Ok(0)
        }
        other => {
            eprintln!("error: unknown command {other:?}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
