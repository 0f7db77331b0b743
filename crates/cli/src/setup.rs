//! Finding the config and the data directory.

use std::path::PathBuf;

use anyhow::Context;
use cem_config::{Config, ConfigError, Located, locate};

use crate::args::Cli;

/// The config in force and where it came from.
pub struct Loaded {
    pub config: Config,
    pub located: Option<Located>,
}

/// Locates and parses the config. Warnings are logged; errors are returned
/// as they are, because their text names the key at fault.
pub fn load_config(cli: &Cli) -> Result<Loaded, ConfigError> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let user = dirs::config_dir();
    // --config and CODE_EXECUTION_MCP_CONFIG both arrive in cli.config
    // (clap reads the variable), so the env slot stays empty here.
    let located = locate::locate(cli.config.as_deref(), None, &cwd, user.as_deref())?;
    let Some(found) = located else {
        tracing::info!("no config file found; using defaults with no upstream servers");
        return Ok(Loaded {
            config: Config::default(),
            located: None,
        });
    };
    let parsed = cem_config::load_file(&found.path)?;
    crate::logging::hide_secrets(&parsed.config.secrets);
    for warning in &parsed.warnings {
        tracing::warn!(file = %found.path.display(), "{warning}");
    }
    tracing::info!(file = %found.path.display(), from = found.source.describe(), servers = parsed.config.servers.len(), "config loaded");
    Ok(Loaded {
        config: parsed.config,
        located: Some(found),
    })
}

/// The config for a command: on an error, printed, and the exit status
/// (2, as the README promises) the command returns.
pub fn config_or_exit(cli: &Cli) -> Result<Loaded, std::process::ExitCode> {
    load_config(cli).map_err(|e| {
        eprintln!("error: {e}");
        std::process::ExitCode::from(2)
    })
}

/// The data directory: --data-dir, $CODE_EXECUTION_MCP_DATA_DIR, else the
/// user data directory.
pub fn data_dir(cli: &Cli) -> anyhow::Result<PathBuf> {
    if let Some(dir) = &cli.data_dir {
        return Ok(dir.clone());
    }
    let base = dirs::data_dir().context(
        "cannot tell the user data directory (is HOME set?); pass --data-dir or set CODE_EXECUTION_MCP_DATA_DIR",
    )?;
    Ok(base.join("code-execution-mcp"))
}

/// The local tenant's state for a one-off command (`exec`, `run`,
/// `policy`): no warm pool, since at most one execution follows.
pub fn one_off_state(
    cli: &Cli,
    mut config: Config,
    config_path: Option<PathBuf>,
    mode: cem_host::RunMode,
) -> anyhow::Result<std::sync::Arc<cem_host::AppState>> {
    let data_dir = data_dir(cli)?;
    config.sandbox.pool_size = Some(0);
    // One command, one sandbox (or a few): starting a zygote would cost more than it saves.
    config.sandbox.zygote = false;
    let exe = std::env::current_exe().context("cannot find our own executable")?;
    Ok(std::sync::Arc::new(cem_host::AppState::open_with(
        config,
        config_path,
        &data_dir,
        cem_host::ToolSet::Full,
        exe,
        mode,
    )?))
}
