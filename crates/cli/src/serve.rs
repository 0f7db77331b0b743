//! `serve`: MCP over stdio or HTTP until the client leaves or a signal comes.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use cem_server::{AppState, HttpOptions, ToolSet};
use tokio_util::sync::CancellationToken;

use crate::args::{Cli, ServeArgs, ToolsArg};
use crate::setup;

pub fn run(cli: &Cli, args: &ServeArgs) -> anyhow::Result<ExitCode> {
    let loaded = match setup::load_config(cli) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let data_dir = setup::data_dir(cli)?;
    let tool_set = match args.tools {
        ToolsArg::Full => ToolSet::Full,
        ToolsArg::Minimal => ToolSet::Minimal,
    };
    let state = AppState::open(
        loaded.config,
        loaded.located.map(|l| l.path),
        &data_dir,
        tool_set,
    )?;
    let state = Arc::new(state);

    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(async {
        let shutdown = CancellationToken::new();
        tokio::spawn(cancel_on_signal(shutdown.clone()));
        match args.http {
            None => cem_server::serve_stdio(state, shutdown).await?,
            Some(addr) => {
                let options = HttpOptions {
                    addr,
                    auth_token: args.auth_token.clone().filter(|t| !t.is_empty()),
                    allowed_hosts: args.allowed_hosts.clone(),
                    allowed_origins: args.allowed_origins.clone(),
                };
                cem_server::serve_http(state, options, shutdown, |bound| {
                    // One line on stderr that scripts (and our tests) can wait for.
                    eprintln!("listening on http://{bound}/mcp");
                })
                .await?
            }
        }
        tracing::info!("shut down cleanly");
        anyhow::Ok(())
    })?;
    // Do not wait for blocked stdin reads or idle tasks on the way out.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    Ok(ExitCode::SUCCESS)
}

async fn cancel_on_signal(shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!("cannot install signal handlers; SIGTERM will end the process abruptly");
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
        _ = int.recv() => tracing::info!("SIGINT received, shutting down"),
    }
    shutdown.cancel();
}
