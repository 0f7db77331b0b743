//! Skills as the server offers them: code is checked in the sandbox before
//! it is saved (a Python parse, never run on the host), and the catalog is
//! kept in step so search finds a skill as soon as it exists.

use std::sync::Arc;

use cem_engine::ExecRequest;
use cem_store::{Analysis, Saved, SkillName};
use serde_json::{Map, Value, json};

use crate::AppState;
use crate::tools::ToolFailure;

/// The parse is quick; this only bounds a pathological input.
const CHECK_TIMEOUT_SECONDS: u64 = 15;

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
            .map(|t| format!("\n    {}", t.trim_end()))
            .unwrap_or_default();
        return Err(ToolFailure(format!(
            "skill '{name}': the code does not compile: {place}{message}{text}\nFix it and save again; the previous version (if any) is unchanged."
        )));
    }
    let strings = |key: &str| -> Vec<String> {
        value[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .take(200)
                    .map(|s| s.chars().take(300).collect())
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok(Analysis {
        tools: strings("tools"),
        functions: strings("functions"),
    })
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
    let (name, description, code) = (name.to_string(), description.to_string(), code.to_string());
    let saved =
        crate::tools::blocking(move || Ok(store.save(&name, &description, &code, &analysis)?))
            .await?;
    if !saved.unchanged {
        state.catalog.skills_changed().await;
    }
    Ok(saved)
}

/// Deletes a skill with its versions; returns how many versions went.
pub async fn delete(state: &Arc<AppState>, name: &str) -> Result<usize, ToolFailure> {
    let store = state.skills.clone();
    let name = name.to_string();
    let gone = crate::tools::blocking(move || Ok(store.delete(&name)?)).await?;
    state.catalog.skills_changed().await;
    Ok(gone)
}

/// How to use a skill from code: the import of its first function.
pub fn usage(name: &str, functions: &[String]) -> Value {
    let import = match functions.first() {
        Some(f) => format!(
            "from skills.{name} import {}",
            f.trim_start_matches("async ")
                .split('(')
                .next()
                .unwrap_or(f)
        ),
        None => format!("import skills.{name}"),
    };
    json!({"import": import, "exec": format!("exec(load_skill({name:?}))")})
}
