//! `exec`: one snippet through the same engine and tools as execute_code.

use std::io::Read;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use cem_engine::ExecRequest;
use cem_server::{AppState, ToolSet};

use crate::args::{Cli, ExecArgs};
use crate::setup;

pub fn run(cli: &Cli, args: &ExecArgs) -> anyhow::Result<ExitCode> {
    let loaded = match setup::load_config(cli) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
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
    let data_dir = setup::data_dir(cli)?;
    let mut config = loaded.config;
    // One snippet needs no warm pool.
    config.sandbox.pool_size = 0;
    let exe = std::env::current_exe().context("cannot find our own executable")?;
    let state = Arc::new(AppState::open(
        config,
        loaded.located.map(|l| l.path),
        &data_dir,
        ToolSet::Full,
        exe,
    )?);
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let answer = runtime.block_on(async {
        let bridge = cem_server::bridge::ToolBridge::shared(state.clone());
        let request = ExecRequest {
            code,
            timeout_seconds: args.timeout,
            memory_mb: args.memory,
            ..Default::default()
        };
        // On a runtime worker, as the server's handlers run: answers from
        // the sandbox and the upstreams wake it without a thread handoff.
        let engine_state = state.clone();
        let answer =
            tokio::spawn(async move { engine_state.engine.execute(request, Some(bridge)).await })
                .await;
        state.catalog.manager().shutdown().await;
        answer
    });
    let answer = match answer {
        Ok(answer) => answer,
        Err(e) => anyhow::bail!("the execution task failed: {e}"),
    };
    match answer {
        Ok(answer) => {
            println!("{}", serde_json::to_string_pretty(&answer)?);
            Ok(if answer.success {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Err(e) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(2))
        }
    }
}
