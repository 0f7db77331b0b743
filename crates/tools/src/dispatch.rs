//! Which tools there are, and running one by name: the only file that
//! knows every tool.

use std::sync::Arc;

use cem_host::privacy::Session;
use cem_host::{AppState, Args, ToolFailure, ToolSet};

use crate::def::ToolDef;
use crate::{discovery, execute, pii, skills, stats, workspace};
pub use cem_host::Answer;

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
    let Some(lane) = &state.lane else {
        return run(state, name, args, session).await;
    };
    // On the tenant's own workers (see cem_host::lane): what this call
    // costs the host weighs on the tenant's share, not on every tenant's.
    let (on_lane, name_owned, session) = (state.clone(), name.to_string(), session.clone());
    match lane
        .run(async move { run(&on_lane, &name_owned, args, &session).await })
        .await
    {
        Ok(answer) => answer,
        Err(e) => Some(Answer::Plain(Err(e.into()))),
    }
}

/// Runs `name` whether `tools/list` shows it or not (resources read files
/// and skills through the tools, under `--tools minimal` too).
pub async fn run(
    state: &Arc<AppState>,
    name: &str,
    args: Args,
    session: &Session,
) -> Option<Answer> {
    let mut args = args;
    // Before any work: an argument costs the tool in proportion to its size.
    if let Err(e) = check_sizes(state, name, &mut args) {
        return Some(Answer::Plain(Err(e)));
    }
    if let Err(e) = cem_host::cluster::before_call(state, session).await {
        return Some(Answer::Plain(Err(e)));
    }
    let mut answer = dispatch(state, name, args, session).await?;
    cem_host::cluster::after_call(state, session, name, &mut answer).await;
    Some(answer)
}

/// [`ToolDef::check_sizes`] of tool `name`, when it is one of ours.
fn check_sizes(state: &AppState, name: &str, args: &mut Args) -> Result<(), ToolFailure> {
    match TOOLS.iter().find(|t| t.name == name) {
        Some(tool) => tool.check_sizes(state, args),
        None => Ok(()),
    }
}

async fn dispatch(
    state: &Arc<AppState>,
    name: &str,
    args: Args,
    session: &Session,
) -> Option<Answer> {
    let answer = match name {
        "execute_code" => return Some(execute::execute(state, args, session).await),
        "search_tools" => discovery::search(state, args, session).await,
        "get_tool_definition" => discovery::definition(state, args, session).await,
        "list_tool_categories" => discovery::categories_tool(state, args).await,
        "write_workspace_file" => workspace::write(state, args).await,
        "read_workspace_file" => workspace::read(state, args, session).await,
        "list_workspace_files" => workspace::list(state, args).await,
        "get_execution_stats" => {
            let names = listed(state.tool_set).map(|t| t.name).collect();
            stats::stats(state, args, names).await
        }
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
                && cem_host::privacy::automatic(&state.config.pii) =>
        {
            cem_host::privacy::tokenize_answer(state, session, &mut body);
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

#[cfg(test)]
mod output_tests {
    use super::*;
    use crate::def::output_schema;
    use serde_json::{Value, json};

    /// Where `schema` (one argument's) lacks a bound, by path.
    fn unbounded(path: &str, schema: &Value, out: &mut Vec<String>) {
        let has = |key: &str| schema[key].as_u64().is_some_and(|n| n > 0);
        match schema["type"].as_str() {
            // An enum bounds a string by itself.
            Some("string") if !has("maxLength") && !schema["enum"].is_array() => {
                out.push(format!("{path}: maxLength"))
            }
            Some("array") => {
                if !has("maxItems") {
                    out.push(format!("{path}: maxItems"));
                }
                unbounded(&format!("{path}[]"), &schema["items"], out);
            }
            Some("object") => match schema["properties"].as_object() {
                Some(properties) => {
                    for (name, p) in properties {
                        unbounded(&format!("{path}.{name}"), p, out);
                    }
                }
                None if !has("maxProperties") => out.push(format!("{path}: maxProperties")),
                None => {}
            },
            _ => {}
        }
    }

    #[test]
    fn every_string_array_and_free_object_of_every_tool_is_bounded() {
        let limits = crate::input::Limits { file_bytes: 777 };
        let mut missing = Vec::new();
        for tool in TOOLS {
            let schema = (tool.schema)(&limits);
            for (name, p) in schema["properties"].as_object().into_iter().flatten() {
                unbounded(&format!("{}.{name}", tool.name), p, &mut missing);
            }
        }
        assert!(missing.is_empty(), "arguments without a bound: {missing:?}");
        // The bounds that come from config are config's.
        let write = (crate::workspace::WRITE.schema)(&limits);
        assert_eq!(write["properties"]["content"]["maxLength"], json!(777));
        let sanitize = (crate::pii::SANITIZE.schema)(&limits);
        assert_eq!(sanitize["properties"]["text"]["maxLength"], json!(777));
    }

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

#[cfg(test)]
mod size_tests {
    use super::*;
    use serde_json::json;

    fn state() -> Result<(tempfile::TempDir, Arc<AppState>), Box<dyn std::error::Error>> {
        let tmp = tempfile::tempdir()?;
        let state = AppState::open(
            Default::default(),
            None,
            tmp.path(),
            ToolSet::Full,
            "/nonexistent".into(),
        )?;
        Ok((tmp, Arc::new(state)))
    }

    async fn refusal(state: &Arc<AppState>, tool: &str, args: serde_json::Value) -> String {
        let session = state.session("test");
        match run(state, tool, Args::new(args.as_object().cloned()), &session).await {
            Some(Answer::Plain(Err(e))) => e.0,
            other => format!("not refused: {:?}", other.map(|_| "an answer")),
        }
    }

    #[tokio::test]
    async fn an_argument_over_its_bound_is_refused_by_name_before_the_tool_runs()
    -> Result<(), Box<dyn std::error::Error>> {
        let (_tmp, state) = state()?;
        let name = "é".repeat(600);
        let text = refusal(&state, "get_tool_definition", json!({"tool_name": name})).await;
        assert_eq!(
            text,
            "get_tool_definition: argument 'tool_name' is 600 characters long, over the 512 the \
             tool's input schema allows (maxLength): send at most 512 characters there, or split \
             the work over several calls"
        );
        let vars: serde_json::Map<_, _> = (0..1001).map(|i| (format!("v{i}"), json!(i))).collect();
        let text = refusal(
            &state,
            "execute_code",
            json!({"code": "pass", "context_vars": vars}),
        )
        .await;
        assert!(
            text.starts_with("execute_code: argument 'context_vars' has 1001 keys, over the 1000"),
            "{text}"
        );
        let text = refusal(
            &state,
            "execute_code",
            json!({"code": "pass", "requirements": ["x".repeat(201)]}),
        )
        .await;
        assert!(
            text.starts_with("execute_code: argument 'requirements[0]' is 201 characters long"),
            "{text}"
        );
        // The workspace's own bound, from config.
        let big = "a".repeat(state.workspace.max_file_bytes() as usize + 1);
        let text = refusal(
            &state,
            "write_workspace_file",
            json!({"filename": "a.txt", "content": big}),
        )
        .await;
        assert!(
            text.contains("argument 'content' is 10485761 characters long, over the 10485760"),
            "{text}"
        );
        assert!(
            state.workspace.read("a.txt").is_err(),
            "nothing was written"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_name_longer_than_any_tool_s_gets_no_suggestions()
    -> Result<(), Box<dyn std::error::Error>> {
        let (_tmp, state) = state()?;
        // Within the bound, longer than every name the catalog holds.
        let text = refusal(
            &state,
            "get_tool_definition",
            json!({"tool_name": "x".repeat(400)}),
        )
        .await;
        assert!(
            text.contains("no tool has a name that long") && !text.contains("closest"),
            "{text}"
        );
        assert!(text.len() < 400, "the name is cut in the refusal: {text}");
        Ok(())
    }
}
