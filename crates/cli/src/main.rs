//! `code-execution-mcp`: the binary. It parses arguments, sets up logging,
//! loads the config and hands over to the library crates.

mod args;
mod audit;
mod auth;
mod doctor;
mod exec;
mod json_lines;
mod logging;
mod memory;
mod packages;
mod pii;
mod policy;
mod run;
mod serve;
mod setup;
mod skills;
mod telemetry;
mod terminal;
mod tools;
mod transformer;

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
    memory::return_large_blocks();
    quiet_broken_pipe();
    let cli = Cli::parse();
    // Before logging (the tracer is one of its layers) and before any
    // async runtime (the exporter's blocking client starts its own).
    let traces = match &cli.command {
        Command::Serve(serve) => match telemetry::Traces::start(serve.otlp_endpoint.as_ref()) {
            Ok(traces) => traces,
            Err(error) => {
                eprintln!("error: {error:#}");
                return ExitCode::from(2);
            }
        },
        _ => None,
    };
    let (traces, tracer) = traces.unzip();
    if tracer.is_some() {
        cem_metrics::traces::exporting();
    }
    logging::init(&cli.log_level, cli.log_format, tracer);
    let outcome = match &cli.command {
        Command::Serve(serve) => serve::run(&cli, serve),
        Command::Doctor(doctor) => doctor::run(&cli, doctor),
        Command::Exec(exec) => exec::run(&cli, exec),
        Command::Generate(args) => tools::generate(&cli, args),
        Command::Run(args) => run::run(&cli, args),
        Command::Tools(cmd) => tools::run(&cli, cmd),
        Command::Pii(cmd) => pii::run(cmd),
        Command::Skills(cmd) => skills::run(&cli, cmd),
        Command::Packages(cmd) => packages::run(&cli, cmd),
        Command::Policy(cmd) => policy::run(&cli, cmd),
        Command::Audit(args) => audit::run(&cli, args),
        Command::Auth(cmd) => auth::run(&cli, cmd),
        // The embedded o200k tokenizer from the shell, so benchmarks and
        // scripts count exactly as execute_code's `tokens` field does.
        Command::Tokens => {
            json_lines::answer_each(|text| cem_engine::count_tokens(text).to_string())
        }
    };
    if let Some(traces) = traces {
        traces.shutdown();
    }
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(1)
        }
    }
}

/// `code-execution-mcp exec ... | head` must end quietly when the reader
/// goes away. Rust ignores SIGPIPE (restoring it would also kill the server
/// on a closed socket or a dead sandbox's pipe), so `println!` panics on a
/// closed stdout instead; that one panic becomes the exit status a shell
/// expects (128 + SIGPIPE), any other keeps the default report.
fn quiet_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}
