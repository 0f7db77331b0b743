//! `code-execution-mcp`: the binary. It parses arguments, sets up logging,
//! loads the config and hands over to the library crates.

mod args;
mod doctor;
mod exec;
mod logging;
mod serve;
mod setup;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

fn main() -> ExitCode {
    // The sandbox launcher must run before anything can start a thread
    // (unshare refuses multi-threaded processes), so it is dispatched here,
    // ahead of argument parsing and logging.
    let mut raw = std::env::args_os();
    if raw.nth(1).is_some_and(|a| a == cem_sandbox::LAUNCHER_ARG) {
        let spec = raw
            .next()
            .and_then(|s| s.into_string().ok())
            .unwrap_or_default();
        cem_sandbox::launcher_main(&spec);
    }
    let cli = Cli::parse();
    logging::init(&cli.log_level);
    let outcome = match &cli.command {
        Command::Serve(serve) => serve::run(&cli, serve),
        Command::Doctor(doctor) => doctor::run(&cli, doctor),
        Command::Exec(exec) => exec::run(&cli, exec),
    };
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(1)
        }
    }
}
