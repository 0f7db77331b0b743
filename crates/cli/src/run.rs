//! `run script.py [-- args]`: a script with the upstream tools, behaving
//! like a normal program: its output on stdout, errors on stderr, its exit
//! status (sys.exit codes, 1 for an uncaught exception).

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use cem_engine::ExecRequest;
use cem_host::RunMode;

use crate::args::{Cli, RunArgs};
use crate::setup;

/// A script's output is its own: far more than an answer to a model.
const SCRIPT_OUTPUT: u64 = 64 << 20;

pub fn run(cli: &Cli, args: &RunArgs) -> anyhow::Result<ExitCode> {
    let loaded = match setup::config_or_exit(cli) {
        Ok(loaded) => loaded,
        Err(code) => return Ok(code),
    };
    let code = std::fs::read_to_string(&args.script)
        .with_context(|| format!("cannot read the script {}", args.script.display()))?;
    let mut config = loaded.config;
    let timeout = args.timeout.unwrap_or(config.sandbox.max_timeout_seconds);
    config.sandbox.max_timeout_seconds = config.sandbox.max_timeout_seconds.max(timeout);
    if args.no_sandbox {
        eprintln!(
            "warning: --no-sandbox: the script runs WITHOUT isolation, with your user's rights"
        );
    }
    let mode = RunMode {
        no_sandbox: args.no_sandbox,
        runs_code: true,
    };
    let state = setup::one_off_state(cli, config, loaded.located.map(|l| l.path), mode)?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let name = args
        .script
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "script.py".into());
    let answer = runtime.block_on(async {
        let exec = Arc::new(crate::terminal::execution(
            &state.gate,
            cem_host::gate::Caller::Run,
        ));
        let code_digest = cem_host::gate::sha256(code.as_bytes());
        let code_bytes = code.len();
        let bridge = cem_tools::bridge::ToolBridge::shared(
            state.clone(),
            state.session("cli"),
            exec.clone(),
        );
        let request = ExecRequest {
            code,
            timeout_seconds: Some(timeout),
            memory_mb: args.memory,
            argv: Some(args.args.clone()),
            script_name: Some(name),
            max_output_chars: Some(SCRIPT_OUTPUT),
            ..Default::default()
        };
        let answer = state.engine.execute(request, Some(bridge)).await;
        cem_tools::audit_execution(&state, &exec, &code_digest, code_bytes, &answer);
        state.catalog.manager().shutdown().await;
        answer
    });
    let answer = match answer {
        Ok(answer) => answer,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    print!("{}", answer.output);
    if let Some(err) = &answer.stderr {
        eprint!("{err}");
    }
    if answer.success {
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(code) = answer.exit_code {
        return Ok(ExitCode::from(
            u8::try_from(code.clamp(0, 255)).unwrap_or(1),
        ));
    }
    if let Some(tb) = &answer.traceback {
        eprint!("{tb}");
    } else if let Some(e) = &answer.error {
        eprintln!("{e}");
    }
    Ok(ExitCode::from(1))
}
