//! `exec`: one snippet through the same engine as execute_code.

use std::io::Read;
use std::process::ExitCode;

use anyhow::Context;
use cem_engine::{Engine, EngineOptions, ExecRequest};

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
    let workspace = cem_store::Workspace::open_owned(
        &data_dir.join("workspace"),
        loaded.config.workspace.max_file_bytes,
        cem_sandbox::sandbox_owner(),
    )?;
    let mut sandbox = loaded.config.sandbox.clone();
    // One snippet needs no warm pool.
    sandbox.pool_size = 0;
    let engine = Engine::new(EngineOptions {
        data_dir: data_dir.clone(),
        workspace: workspace.root().to_path_buf(),
        sandbox,
        exe: std::env::current_exe().context("cannot find our own executable")?,
    });
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let answer = runtime.block_on(engine.execute(ExecRequest {
        code,
        timeout_seconds: args.timeout,
        memory_mb: args.memory,
        ..Default::default()
    }));
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
