//! `code-execution-mcp`: the binary. It parses arguments, sets up logging,
//! loads the config and hands over to the library crates.

mod args;
mod doctor;
mod logging;
mod serve;
mod setup;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(&cli.log_level);
    let outcome = match &cli.command {
        Command::Serve(serve) => serve::run(&cli, serve),
        Command::Doctor(doctor) => doctor::run(&cli, doctor),
    };
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(1)
        }
    }
}
