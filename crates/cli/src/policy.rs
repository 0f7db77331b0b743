//! `policy review` and `policy accept`: the tools whose pinned digest no
//! longer holds, and accepting them.

use std::process::ExitCode;

use anyhow::Context;
use cem_host::{AppState, RunMode};
use cem_policy::ToolChange;
use serde_json::{Value, json};

use crate::args::{Cli, PolicyCommand};
use crate::setup;

pub fn run(cli: &Cli, cmd: &PolicyCommand) -> anyhow::Result<ExitCode> {
    let loaded = match setup::config_or_exit(cli) {
        Ok(loaded) => loaded,
        Err(code) => return Ok(code),
    };
    let state = setup::one_off_state(
        cli,
        loaded.config,
        loaded.located.map(|l| l.path),
        RunMode::default(),
    )?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let outcome = runtime.block_on(async {
        let outcome = match cmd {
            PolicyCommand::Review { server, json } => {
                review(&state, server.as_deref(), *json).await
            }
            PolicyCommand::Accept { target } => accept(&state, target).await,
        };
        state.catalog.manager().shutdown().await;
        outcome
    });
    match outcome {
        Ok(code) => Ok(code),
        Err(e) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(2))
        }
    }
}

/// The server's tools as it lists them now, as JSON.
async fn live(state: &AppState, server: &str) -> Result<Vec<Value>, String> {
    let tools = state
        .catalog
        .manager()
        .live_tools(server)
        .await
        .map_err(|e| e.to_string())?;
    Ok(tools
        .iter()
        .filter_map(|t| serde_json::to_value(t).ok())
        .collect())
}

async fn review(state: &AppState, only: Option<&str>, as_json: bool) -> Result<ExitCode, String> {
    let manager = state.catalog.manager();
    let servers: Vec<String> = match only {
        Some(name) => vec![
            manager
                .get(name)
                .map_err(|e| e.to_string())?
                .config
                .name
                .clone(),
        ],
        None => manager
            .servers()
            .filter(|u| !u.config.disabled)
            .map(|u| u.config.name.clone())
            .collect(),
    };
    let mut report = Vec::new();
    let mut changed = 0;
    for server in servers {
        let pins = state.gate.pins.load(&server).map_err(|e| e.to_string())?;
        let entry = match (pins, live(state, &server).await) {
            (_, Err(e)) => json!({"server": server, "error": e}),
            (None, Ok(_)) => json!({"server": server, "pinned": false}),
            (Some(pins), Ok(tools)) => {
                let changes = pins.changes(&tools);
                changed += changes.len();
                json!({"server": server, "pinned": true, "changes": changes})
            }
        };
        report.push(entry);
    }
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        for entry in &report {
            print_entry(entry);
        }
        if changed > 0 {
            println!(
                "\n{changed} change(s). Calls of these tools ask (or are denied, with policy.on_change \"deny\") until accepted: \
                 `code-execution-mcp policy accept SERVER` or `... accept SERVER.TOOL`."
            );
        }
    }
    Ok(if changed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn print_entry(entry: &Value) {
    let server = entry["server"].as_str().unwrap_or_default();
    if let Some(error) = entry["error"].as_str() {
        println!("{server}: cannot list its tools: {error}");
        return;
    }
    if entry["pinned"] == Value::Bool(false) {
        println!("{server}: not pinned yet (its tools are pinned at the first call)");
        return;
    }
    let changes: Vec<ToolChange> = entry["changes"]
        .as_array()
        .map(|c| c.iter().filter_map(change_of).collect())
        .unwrap_or_default();
    if changes.is_empty() {
        println!("{server}: no changes");
        return;
    }
    for change in changes {
        match change {
            ToolChange::Added { tool, now } => {
                println!("{server}.{tool}: NEW since the server was pinned");
                diff(&Value::Null, &now);
            }
            ToolChange::Removed { tool, .. } => println!("{server}.{tool}: REMOVED"),
            ToolChange::Changed {
                tool,
                parts,
                pinned,
                now,
            } => {
                println!("{server}.{tool}: CHANGED ({})", parts.join(", "));
                diff(&pinned, &now);
            }
        }
    }
}

fn change_of(v: &Value) -> Option<ToolChange> {
    let tool = v["tool"].as_str()?.to_string();
    Some(match v["change"].as_str()? {
        "added" => ToolChange::Added {
            tool,
            now: v["now"].clone(),
        },
        "removed" => ToolChange::Removed {
            tool,
            pinned: v["pinned"].clone(),
        },
        _ => ToolChange::Changed {
            tool,
            parts: v["parts"]
                .as_array()
                .map(|p| {
                    p.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            pinned: v["pinned"].clone(),
            now: v["now"].clone(),
        },
    })
}

/// A line diff of two definitions as pretty JSON.
fn diff(before: &Value, after: &Value) {
    let pretty = |v: &Value| match v {
        Value::Null => String::new(),
        v => serde_json::to_string_pretty(&cem_policy::canonical(v)).unwrap_or_default() + "\n",
    };
    let (a, b) = (pretty(before), pretty(after));
    let text = similar::TextDiff::from_lines(&a, &b);
    for change in text.iter_all_changes() {
        let sign = match change.tag() {
            similar::ChangeTag::Delete => "-",
            similar::ChangeTag::Insert => "+",
            similar::ChangeTag::Equal => " ",
        };
        print!("  {sign} {change}");
    }
}

async fn accept(state: &AppState, target: &str) -> Result<ExitCode, String> {
    let (server, tool) = match target.split_once('.') {
        Some((s, t)) => (s, Some(t)),
        None => (target, None),
    };
    let manager = state.catalog.manager();
    let server = manager
        .get(server)
        .map_err(|e| e.to_string())?
        .config
        .name
        .clone();
    let tools = live(state, &server).await?;
    let mut pins = state
        .gate
        .pins
        .load(&server)
        .map_err(|e| e.to_string())?
        .unwrap_or_default();
    if let Some(tool) = tool {
        let known = tools.iter().any(|t| t["name"] == tool) || pins.tools.contains_key(tool);
        if !known {
            return Err(format!(
                "{server} has no tool '{tool}' now and none pinned; `policy review {server}` lists its changes"
            ));
        }
    }
    let before = pins.changes(&tools).len();
    pins.accept(&tools, tool);
    state
        .gate
        .pins
        .save(&server, &pins)
        .map_err(|e| e.to_string())?;
    let after = pins.changes(&tools).len();
    let accepted = before - after.min(before);
    let written = state.gate.audit.append(
        "pins",
        json!({"server": server, "tool": tool.map(|t| format!("{server}.{t}")).unwrap_or_else(|| format!("{server}.*")),
               "accepted_changes": accepted, "caller": "cli"}),
    );
    if let Err(e) = written {
        eprintln!("warning: {e}");
    }
    println!("{target}: accepted ({accepted} change(s)); {after} change(s) left on {server}");
    Ok(ExitCode::SUCCESS)
}
