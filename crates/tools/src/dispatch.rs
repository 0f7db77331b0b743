//! Which tools there are, and running one by name: the only file that
//! knows every tool.

use std::sync::Arc;

use cem_host::privacy::Session;
use cem_host::{AppState, Args, ToolSet};

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
    if let Err(e) = cem_host::cluster::before_call(state, session).await {
        return Some(Answer::Plain(Err(e)));
    }
    let mut answer = dispatch(state, name, args, session).await?;
    cem_host::cluster::after_call(state, session, name, &mut answer).await;
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
    use serde_json::json;

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
