//! get_execution_stats: what this server is and has, in one answer.

use std::sync::Arc;

use serde_json::json;

use crate::def::ToolDef;
use crate::input::{NoArgs, input_schema, parse};
use cem_host::AppState;
use cem_host::{Args, ToolResult, blocking, success};

pub const STATS: ToolDef = ToolDef {
    name: "get_execution_stats",
    description: "Server status: workspace usage, skills, limits, sandbox layers, upstream servers, PII mode.",
    schema: input_schema::<NoArgs>,
    minimal: false,
};

/// `tools`: the names `tools/list` shows.
pub async fn stats(state: &Arc<AppState>, args: Args, tools: Vec<&'static str>) -> ToolResult {
    let NoArgs {} = parse(&args)?;
    let st = state.clone();
    let usage = blocking(state, move || Ok(st.workspace.usage()?)).await?;
    let store = state.skills.clone();
    let skills = blocking(state, move || Ok(store.list()?.0.len())).await?;
    let config = &state.config;
    let upstreams: Vec<_> = config
        .servers
        .values()
        .map(|s| {
            json!({
                "name": s.name,
                "type": s.transport.kind(),
                "disabled": s.disabled,
                // Connecting to upstreams lands with the upstream manager;
                // until then they are only configured.
                "state": if s.disabled { "disabled" } else { "configured" },
            })
        })
        .collect();
    Ok(success(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_seconds": state.started.elapsed().as_secs(),
        "config": state.config_path.as_ref().map(|p| p.display().to_string()),
        "data_dir": state.data_dir.display().to_string(),
        "workspace": {
            "path": state.workspace.root().display().to_string(),
            "files": usage.files,
            "bytes": usage.bytes,
            "max_file_bytes": state.workspace.max_file_bytes(),
        },
        "skills": {
            "path": state.skills.root().display().to_string(),
            "count": skills,
        },
        "limits": {
            "timeout_seconds": config.sandbox.timeout_seconds,
            "memory_mb": config.sandbox.memory_mb,
            "max_output_chars": config.sandbox.max_output_chars,
            // null: the default for how sandboxes start (sandbox.pool_target says which).
            "pool_size": config.sandbox.pool_size,
            "max_timeout_seconds": config.sandbox.max_timeout_seconds,
            "max_memory_mb": config.sandbox.max_memory_mb,
        },
        "sandbox": state.engine.status().await,
        "upstream_servers": upstreams,
        "pii": {
            "mode": config.pii.mode,
            "types": config.pii.types,
            "restore_to": config.pii.restore_to,
            "sessions_with_a_vault": state.vaults.sessions(),
        },
        "tools": tools,
    })))
}
