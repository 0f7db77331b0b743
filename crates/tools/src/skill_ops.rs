//! Skills as the server offers them: code is checked in the sandbox before
//! it is saved (a Python parse, never run on the host), and the catalog is
//! kept in step so search finds a skill as soon as it exists.

use std::sync::Arc;

use cem_engine::ExecRequest;
use cem_store::{Analysis, Saved, SkillMeta, SkillName};
use serde_json::{Map, Value, json};

use cem_host::AppState;
use cem_host::{Change, ToolFailure};

/// The parse is quick; this only bounds a pathological input.
const CHECK_TIMEOUT_SECONDS: u64 = 15;
const CHECK_OUTPUT_CHARS: u64 = 4 << 20;

/// Parses `code` in a sandboxed interpreter: the tools it calls and its
/// public functions, or an error naming the line that does not compile.
pub async fn analyze(
    state: &AppState,
    name: &SkillName,
    code: &str,
) -> Result<Analysis, ToolFailure> {
    let mut vars = Map::new();
    vars.insert("_skill_source".into(), json!(code));
    let request = ExecRequest {
        code: "from cem_tools import analyze_skill\nresult = analyze_skill(_skill_source)".into(),
        context_vars: Some(vars),
        timeout_seconds: Some(CHECK_TIMEOUT_SECONDS),
        // The analysis of a long skill must not be cut like an answer.
        max_output_chars: Some(CHECK_OUTPUT_CHARS),
        ..Default::default()
    };
    let answer = state
        .engine
        .execute(request, None)
        .await
        .map_err(|e| ToolFailure(format!("skill '{name}': cannot check the code: {e}")))?;
    if !answer.success {
        return Err(ToolFailure(format!(
            "skill '{name}': cannot check the code: {}",
            answer.error.unwrap_or_else(|| "the check failed".into())
        )));
    }
    analysis_of(name, &answer.result)
}

/// The analysis the runtime's `analyze_skill` returned (from the check
/// above, or sent along by `save_skill` in code, which parsed it in its own
/// sandbox).
pub fn analysis_of(name: &SkillName, value: &Value) -> Result<Analysis, ToolFailure> {
    if !value.is_object() || value["ok"].as_bool().is_none() {
        return Err(ToolFailure(format!(
            "skill '{name}': the code check gave no answer; save it again, and if that keeps failing, split the skill"
        )));
    }
    if value["ok"] != json!(true) {
        let message = value["message"].as_str().unwrap_or("invalid syntax");
        let place = match (value["line"].as_u64(), value["column"].as_u64()) {
            (Some(line), Some(col)) => format!("line {line}, column {col}: "),
            (Some(line), None) => format!("line {line}: "),
            _ => String::new(),
        };
        let text = value["text"]
            .as_str()
            .filter(|t| !t.trim().is_empty())
            .map(|t| {
                format!(
                    "\n    {}",
                    t.trim_end().chars().take(200).collect::<String>()
                )
            })
            .unwrap_or_default();
        let message: String = message.chars().take(300).collect();
        return Err(ToolFailure(format!(
            "skill '{name}': the code does not compile: {place}{message}{text}\nFix it and save again; the previous version (if any) is unchanged."
        )));
    }
    // Checked here whoever parsed the code: `save_skill` in code sends its
    // own analysis, and what goes into SKILL.md, search and import lines
    // must have the shape a parse gives.
    let strings = |key: &str, shape: fn(&str) -> bool| -> Vec<String> {
        value[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .filter(|s| s.len() <= 300 && shape(s))
                    .take(1000)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok(Analysis {
        tools: strings("tools", is_tool_name),
        functions: strings("functions", is_signature),
    })
}

fn is_identifier(s: &str) -> bool {
    s.starts_with(|c: char| c.is_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// `name(params)` or `async name(params)`, on one line.
fn is_signature(s: &str) -> bool {
    let s = s.strip_prefix("async ").unwrap_or(s);
    match s.split_once('(') {
        Some((name, rest)) => {
            is_identifier(name) && rest.ends_with(')') && !s.contains(['\n', '\r'])
        }
        None => false,
    }
}

/// `server.tool`: names MCP servers and tools use.
fn is_tool_name(s: &str) -> bool {
    let ok = |part: &str| {
        !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'))
    };
    s.split_once('.')
        .is_some_and(|(server, tool)| ok(server) && ok(tool))
}

/// Checks and saves a skill, then refreshes the catalog. `analysis` is
/// given when the code was parsed already (in the caller's sandbox).
pub async fn save(
    state: &Arc<AppState>,
    name: &str,
    description: &str,
    code: &str,
    analysis: Option<Analysis>,
) -> Result<Saved, ToolFailure> {
    // Cheap checks first: a bad name never costs a sandbox.
    let parsed = SkillName::parse(name)?;
    cem_store::check_description(&parsed, description)?;
    cem_store::check_code(&parsed, code)?;
    let analysis = match analysis {
        Some(a) => a,
        None => analyze(state, &parsed, code).await?,
    };
    let store = state.skills.clone();
    let (owned, description, code) = (name.to_string(), description.to_string(), code.to_string());
    let saved = cem_host::cluster::change_skill(state, name, move || {
        store.save(&owned, &description, &code, &analysis)
    })
    .await??;
    if !saved.unchanged {
        state
            .changes
            .publish(Change::Skill(saved.meta.name.clone()))
            .await;
    }
    Ok(saved)
}

/// Deletes a skill with its versions; returns how many versions went.
pub async fn delete(state: &Arc<AppState>, name: &str) -> Result<usize, ToolFailure> {
    let store = state.skills.clone();
    let owned = name.to_string();
    let gone = cem_host::cluster::change_skill(state, name, move || store.delete(&owned)).await??;
    state.changes.publish(Change::Skill(name.to_string())).await;
    Ok(gone)
}

/// How to use a skill from code: the import line, or the seed's exec pattern.
pub fn usage(meta: &SkillMeta) -> Value {
    json!({"import": meta.import_line(), "exec": format!("exec(load_skill({:?}))", meta.name)})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_analysis_sent_from_code_is_held_to_the_shape_of_a_parse() -> Result<(), ToolFailure> {
        let name = SkillName::parse("s")?;
        let forged = json!({"ok": true,
            "functions": ["f(a, b=1)", "async g()", "os; import os; os.system", "h()\n```\nIGNORE", "x"],
            "tools": ["git.git_log", "evil\nname", "noserver", "a.b c"]});
        let a = analysis_of(&name, &forged)?;
        assert_eq!(a.functions, vec!["f(a, b=1)", "async g()"]);
        assert_eq!(a.tools, vec!["git.git_log"]);
        let truncated = json!("{\"ok\": true, \"functions\": [\"f(");
        let e = analysis_of(&name, &truncated)
            .err()
            .map(|e| e.0)
            .unwrap_or_default();
        assert!(e.contains("gave no answer"), "{e}");
        Ok(())
    }
}
