//! The tools this server exposes: their definitions and their dispatch.
//!
//! Schemas are written by hand rather than derived: derived schemas carry
//! titles, `$schema` and format noise that every agent would pay for in
//! context on each `tools/list`.

mod args;
mod discovery;
mod execute;
mod pii;
mod skills;
mod stats;
mod workspace;

use std::sync::Arc;

use serde_json::{Value, json};

pub use args::Args;
pub use discovery::{CATEGORIES, DEFINITION, SEARCH};
pub use execute::audit_execution;

use crate::AppState;
use crate::privacy::Session;

/// Which tools `tools/list` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ToolSet {
    /// Every tool.
    #[default]
    Full,
    /// Only execute_code, search_tools and get_tool_definition, for agents
    /// that want the least context.
    Minimal,
}

/// One tool: its name, its one-line description and its input schema.
pub struct ToolDef {
    pub name: &'static str,
    pub description: &'static str,
    pub schema: fn() -> Value,
    /// Listed under `--tools minimal` too.
    pub minimal: bool,
}

/// Every tool, in the order `tools/list` shows them.
pub const TOOLS: &[ToolDef] = &[
    execute::EXECUTE,
    discovery::SEARCH,
    discovery::DEFINITION,
    discovery::CATEGORIES,
    workspace::WRITE,
    workspace::READ,
    workspace::LIST,
    stats::STATS,
    pii::SANITIZE,
    pii::RESTORE,
    skills::SAVE,
    skills::LOAD,
    skills::LIST,
    skills::DELETE,
];

/// The tools listed for `set`.
pub fn listed(set: ToolSet) -> impl Iterator<Item = &'static ToolDef> {
    TOOLS
        .iter()
        .filter(move |t| set == ToolSet::Full || t.minimal)
}

/// The `outputSchema` of tool `name`: its `structuredContent` is an object
/// with `success` and, on success, these fields (errors carry `error`).
/// Terse on purpose, as every `tools/list` pays for it: only fields every
/// successful answer carries, with the one type they always have.
pub fn output_schema(name: &str) -> Value {
    let fields: &[(&str, &str)] = match name {
        "execute_code" => &[
            ("result", ""),
            ("output", "string"),
            ("execution_time_ms", "integer"),
            ("tool_calls", "integer"),
        ],
        "search_tools" => &[("count", "integer"), ("tools", "array")],
        "get_tool_definition" => &[("name", "string")],
        "list_tool_categories" => &[("count", "integer"), ("categories", "array")],
        "write_workspace_file" => &[("filename", "string"), ("size", "integer")],
        "read_workspace_file" => &[("content", "string"), ("size", "integer")],
        "list_workspace_files" => &[("files", "array"), ("count", "integer")],
        "get_execution_stats" => &[("version", "string"), ("uptime_seconds", "integer")],
        "sanitize_pii" => &[("sanitized_text", "string"), ("pii_found", "integer")],
        "restore_pii" => &[("restored_text", "string"), ("restored", "integer")],
        "save_skill" => &[("name", "string"), ("version", "integer")],
        "load_skill" => &[
            ("name", "string"),
            ("code", "string"),
            ("version", "integer"),
        ],
        "list_skills" => &[("count", "integer"), ("skills", "array")],
        "delete_skill" => &[("name", "string"), ("versions", "integer")],
        _ => &[],
    };
    let mut properties = serde_json::Map::new();
    properties.insert("success".into(), json!({"type": "boolean"}));
    for (field, kind) in fields {
        let schema = if kind.is_empty() {
            json!({})
        } else {
            json!({"type": kind})
        };
        properties.insert((*field).into(), schema);
    }
    json!({"type": "object", "properties": properties, "required": ["success"]})
}

/// A tool's failure, returned to the agent as a tool error it can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolFailure(pub String);

impl<E: std::error::Error> From<E> for ToolFailure {
    fn from(e: E) -> Self {
        ToolFailure(e.to_string())
    }
}

/// What a tool returns: a JSON object (success) or a failure message.
pub type ToolResult = Result<Value, ToolFailure>;

/// A tool's answer when it decides itself whether it is an error: the
/// JSON and the isError flag (execute_code: failed code is an error the
/// agent must see, yet it has the full answer shape).
pub enum Answer {
    Plain(ToolResult),
    Flagged { body: Value, is_error: bool },
}

/// Runs `name` with `args`. `None` means there is no such tool.
/// `session` is the caller's (its PII vault).
pub async fn call(
    state: &Arc<AppState>,
    name: &str,
    args: Args,
    session: &Session,
) -> Option<Answer> {
    let listed = listed(state.tool_set).any(|t| t.name == name);
    if !listed {
        return None;
    }
    run(state, name, args, session).await
}

/// Runs `name` whether `tools/list` shows it or not (resources read files
/// and skills through the tools, under `--tools minimal` too).
pub(crate) async fn run(
    state: &Arc<AppState>,
    name: &str,
    args: Args,
    session: &Session,
) -> Option<Answer> {
    if let Err(e) = crate::cluster::before_call(state, session).await {
        return Some(Answer::Plain(Err(e)));
    }
    let mut answer = dispatch(state, name, args, session).await?;
    crate::cluster::after_call(state, session, name, &mut answer).await;
    Some(answer)
}

async fn dispatch(
    state: &Arc<AppState>,
    name: &str,
    args: Args,
    session: &Session,
) -> Option<Answer> {
    let answer = match name {
        "execute_code" => return Some(execute::execute(state, args, session).await),
        "search_tools" => discovery::search(state, args).await,
        "get_tool_definition" => discovery::definition(state, args).await,
        "list_tool_categories" => discovery::categories_tool(state, args).await,
        "write_workspace_file" => workspace::write(state, args).await,
        "read_workspace_file" => workspace::read(state, args, session).await,
        "list_workspace_files" => workspace::list(state, args).await,
        "get_execution_stats" => stats::stats(state, args).await,
        "sanitize_pii" => pii::sanitize(state, args, session),
        "restore_pii" => pii::restore(args, session),
        "save_skill" => skills::save(state, args, session).await,
        "load_skill" => skills::load(state, args).await,
        "list_skills" => skills::list(state, args).await,
        "delete_skill" => skills::delete(state, args).await,
        _ => return None,
    };
    Some(Answer::Plain(match answer {
        // Skills and workspace files are written by agents and code, and
        // these answers show them (a skill's text, a file's name): in
        // automatic mode the model sees their personal data as tokens, like
        // everything else code produced.
        Ok(mut body)
            if SHOWS_CODE_OUTPUT.contains(&name)
                && crate::privacy::automatic(&state.config.pii) =>
        {
            crate::privacy::tokenize_answer(state, session, &mut body);
            Ok(body)
        }
        other => other,
    }))
}

/// Tools whose answers can carry what a skill holds or a file's name.
const SHOWS_CODE_OUTPUT: &[&str] = &[
    "search_tools",
    "get_tool_definition",
    "load_skill",
    "list_skills",
    "list_workspace_files",
];

/// The success answer: `{"success": true, ...fields}`.
pub fn success(fields: Value) -> Value {
    let mut out = json!({"success": true});
    if let (Some(out), Value::Object(fields)) = (out.as_object_mut(), fields) {
        out.extend(fields);
    }
    out
}

/// Runs blocking file work off the async executor.
pub(crate) async fn blocking<T: Send + 'static>(
    state: &AppState,
    work: impl FnOnce() -> Result<T, ToolFailure> + Send + 'static,
) -> Result<T, ToolFailure> {
    state.host.run(work).await.map_err(ToolFailure)?
}

#[cfg(test)]
mod output_tests {
    use super::*;

    #[test]
    fn every_tool_declares_what_its_answer_holds() {
        for tool in TOOLS {
            let schema = output_schema(tool.name);
            let properties = schema["properties"].as_object().map(|p| p.len());
            assert!(
                properties.is_some_and(|n| n >= 2),
                "{} declares no fields beyond success: {schema}",
                tool.name
            );
            assert_eq!(schema["required"], json!(["success"]), "{}", tool.name);
        }
    }
}
