//! `code-execution-mcp`: the binary. It parses arguments, sets up logging,
//! loads the config and hands over to the library crates.

mod args;
mod doctor;
mod exec;
mod logging;
mod pii;
mod run;
mod serve;
mod setup;
mod skills;
mod token_count;
mod tools;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

fn main() -> ExitCode {
    // The sandbox launcher must run before anything can start a thread
    // (unshare refuses multi-threaded processes), so it is dispatched here,
    // ahead of argument parsing and logging.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == cem_sandbox::LAUNCHER_ARG)
    {
        cem_sandbox::launcher_main();
    }
    let cli = Cli::parse();
    logging::init(&cli.log_level);
    let outcome = match &cli.command {
        Command::Serve(serve) => serve::run(&cli, serve),
        Command::Doctor(doctor) => doctor::run(&cli, doctor),
        Command::Exec(exec) => exec::run(&cli, exec),
        Command::Generate(args) => tools::generate(&cli, args),
        Command::Run(args) => run::run(&cli, args),
        Command::Tools(cmd) => tools::run(&cli, cmd),
        Command::Pii(cmd) => pii::run(cmd),
        Command::Skills(cmd) => skills::run(&cli, cmd),
        Command::Tokens => token_count::run(),
    };
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(1)
        }
    }
}
