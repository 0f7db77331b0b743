//! `audit`: the last lines of the audit log, filtered.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use cem_audit::Filter;
use serde_json::Value;

use crate::args::{AuditArgs, Cli};
use crate::setup;

pub fn run(cli: &Cli, args: &AuditArgs) -> anyhow::Result<ExitCode> {
    let loaded = match setup::config_or_exit(cli) {
        Ok(loaded) => loaded,
        Err(code) => return Ok(code),
    };
    let path = match loaded.config.audit.path {
        Some(path) => path,
        None => setup::data_dir(cli)?.join("audit").join("audit.jsonl"),
    };
    let tool = args
        .tool
        .as_deref()
        .map(cem_policy::Pattern::parse)
        .transpose()
        .context(
            "--tool takes a tool (server.tool), a server, or a glob such as github.delete_*",
        )?;
    let filter = Filter {
        tool,
        session: args.session.clone(),
        decision: args.decision.clone(),
        event: args.event.clone(),
        since: args.since.as_deref().map(when).transpose()?,
        until: args.until.as_deref().map(when).transpose()?,
    };
    let lines = cem_audit::read(&path, &filter, args.last)?;
    if lines.is_empty() && !path.exists() {
        eprintln!(
            "no audit log at {} yet (nothing was called)",
            path.display()
        );
    }
    for line in &lines {
        if args.json {
            println!("{line}");
        } else {
            println!("{}", human(line));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// An RFC 3339 time, or a duration before now (`30m`, `2h`).
fn when(text: &str) -> anyhow::Result<SystemTime> {
    if let Ok(t) = humantime::parse_rfc3339_weak(text) {
        return Ok(t);
    }
    let ago: Duration = humantime::parse_duration(text).with_context(|| {
        format!("'{text}' is neither a time (2026-11-25T10:00:00Z) nor a duration (30m, 2h)")
    })?;
    Ok(SystemTime::now() - ago)
}

/// One line for people: time, event, tool, then what matters for the event.
fn human(line: &Value) -> String {
    let text = |k: &str| {
        line.get(k)
            .and_then(Value::as_str)
            .unwrap_or("-")
            .to_string()
    };
    let ts = text("ts");
    let session = match line.get("session_id").and_then(Value::as_str) {
        Some(id) => format!("{} ({id})", text("session")),
        None => text("session"),
    };
    match text("event").as_str() {
        "decision" => {
            let mut out = format!(
                "{ts}  decision   {:<32} {} -> {}  ({})",
                text("tool"),
                text("decision"),
                text("outcome"),
                text("reason")
            );
            if let Some(answer) = line.get("answer").and_then(Value::as_str) {
                out.push_str(&format!("  answer {answer} by {}", text("answered_by")));
            }
            out.push_str(&format!("  [{} {session}]", text("caller")));
            out
        }
        "call" => format!(
            "{ts}  call       {:<32} {} in {:.1} ms, args {} B, result {} B{}  [{} {session}]",
            text("tool"),
            if line["ok"] == Value::Bool(true) {
                "ok"
            } else {
                "FAILED"
            },
            line["ms"].as_f64().unwrap_or(0.0),
            line["args_bytes"],
            line["result_bytes"],
            line.get("error")
                .and_then(Value::as_str)
                .map(|e| format!(": {e}"))
                .unwrap_or_default(),
            text("caller"),
        ),
        "execution" => format!(
            "{ts}  execution  {} {} ms, {} tool call(s), code {}  [{} {session}]",
            text("outcome"),
            line["ms"],
            line["tool_calls"],
            text("code_digest").chars().take(19).collect::<String>(),
            text("caller"),
        ),
        _ => line.to_string(),
    }
}
