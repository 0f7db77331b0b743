//! `exec`: one snippet through the same engine and tools as execute_code.

use std::io::Read;
use std::process::ExitCode;

use anyhow::Context;
use cem_host::Answer;
use cem_host::RunMode;

use crate::args::{Cli, ExecArgs};
use crate::setup;

pub fn run(cli: &Cli, args: &ExecArgs) -> anyhow::Result<ExitCode> {
    let loaded = match setup::config_or_exit(cli) {
        Ok(loaded) => loaded,
        Err(code) => return Ok(code),
    };
    let code = if args.code == "-" {
        let mut code = String::new();
        std::io::stdin()
            .read_to_string(&mut code)
            .context("cannot read code from stdin")?;
        code
    } else {
        args.code.clone()
    };
    let state = setup::one_off_state(
        cli,
        loaded.config,
        loaded.located.map(|l| l.path),
        RunMode {
            no_sandbox: false,
            runs_code: true,
        },
    )?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let mut arguments = serde_json::Map::new();
    arguments.insert("code".into(), code.into());
    if let Some(t) = args.timeout {
        arguments.insert("timeout_seconds".into(), t.into());
    }
    if let Some(m) = args.memory {
        arguments.insert("memory_mb".into(), m.into());
    }
    let answer = runtime.block_on(async {
        // Through the execute_code tool itself (the same answer, the same
        // PII handling), on a runtime worker as the server's handlers run.
        let worker_state = state.clone();
        let answer = tokio::spawn(async move {
            let mut session = worker_state.session("cli");
            match crate::terminal::approver() {
                Ok(approver) => session.approver = Some(approver),
                Err(why) => session.no_approver = why,
            }
            let args = cem_host::Args::new(Some(arguments));
            cem_tools::call(&worker_state, "execute_code", args, &session).await
        })
        .await;
        state.catalog.manager().shutdown().await;
        answer
    });
    match answer.context("the execution task failed")? {
        Some(Answer::Flagged { body, is_error, .. }) => {
            println!("{}", serde_json::to_string_pretty(&body)?);
            Ok(if is_error {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        Some(Answer::Plain(Err(e))) => {
            eprintln!("error: {}", e.0);
            Ok(ExitCode::from(2))
        }
        Some(Answer::Plain(Ok(body))) => {
            println!("{}", serde_json::to_string_pretty(&body)?);
            Ok(ExitCode::SUCCESS)
        }
        None => anyhow::bail!("execute_code is not available"),
    }
}
