//! save_skill, load_skill, list_skills, delete_skill.

use std::sync::Arc;

use serde_json::{Value, json};

use schemars::JsonSchema;
use serde::Deserialize;

use crate::def::ToolDef;
use crate::input::{NoArgs, input_schema, parse};
use crate::skill_ops::usage;
use cem_host::AppState;
use cem_host::privacy::{self, Session};
use cem_host::{Args, ToolResult, blocking, success};
use cem_store::{MAX_CODE_BYTES, MAX_DESCRIPTION, MAX_NAME};

/// The bound on a skill name argument: the store refuses a name over
/// [`MAX_NAME`] with the reason and the rule for names, which says more
/// than a size; this bound is only for what a name costs, well past any
/// near miss.
const NAME_ARG: usize = MAX_NAME * 4;

pub const SAVE: ToolDef = ToolDef {
    name: "save_skill",
    description: "Save working Python as a reusable skill (importable as skills.<name>; saving a name again keeps the old version).",
    schema: input_schema::<SaveInput>,
    minimal: false,
};

#[derive(Deserialize, JsonSchema)]
struct SaveInput {
    /// lowercase_identifier
    #[schemars(extend("maxLength" = NAME_ARG))]
    name: String,
    #[schemars(extend("maxLength" = MAX_CODE_BYTES))]
    code: String,
    /// What it does and when to use it
    #[schemars(extend("maxLength" = MAX_DESCRIPTION))]
    description: String,
}

pub const LOAD: ToolDef = ToolDef {
    name: "load_skill",
    description: "A skill's code and metadata.",
    schema: input_schema::<LoadInput>,
    minimal: false,
};

#[derive(Deserialize, JsonSchema)]
struct LoadInput {
    #[schemars(extend("maxLength" = NAME_ARG))]
    name: String,
    /// Default: current
    version: Option<u64>,
}

pub const LIST: ToolDef = ToolDef {
    name: "list_skills",
    description: "Saved skills: name, description, functions, version.",
    schema: input_schema::<NoArgs>,
    minimal: false,
};

pub const DELETE: ToolDef = ToolDef {
    name: "delete_skill",
    description: "Delete a skill and all its versions.",
    schema: input_schema::<NameInput>,
    minimal: false,
};

#[derive(Deserialize, JsonSchema)]
struct NameInput {
    #[schemars(extend("maxLength" = NAME_ARG))]
    name: String,
}

pub async fn save(state: &Arc<AppState>, args: Args, session: &Session) -> ToolResult {
    let SaveInput {
        name,
        mut code,
        mut description,
    } = parse(&args)?;
    // The model saw the skill's personal data as tokens (load_skill) and
    // writes them back: those become the skill's values again. Any other
    // token stays a token: a skill is code every session of the tenant
    // reads and runs, and putting this session's values from its vault
    // into it would hand them to the others.
    let (mut restored, mut kept) = (0, 0);
    if privacy::automatic(&state.config.pii)
        && cem_pii::Vault::has_tokens(&(code.clone() + &description))
    {
        let store = state.skills.clone();
        let wanted = name.clone();
        let before = blocking(state, move || Ok(store.load(&wanted, None).ok()))
            .await?
            .map(|s| format!("{}\n{}", s.code, s.meta.description))
            .unwrap_or_default();
        let vault = session.vault();
        for text in [&mut code, &mut description] {
            let all = vault.restore(text);
            let r = vault.restore_where(text, |value| before.contains(value));
            restored += r.restored;
            kept += all.restored - r.restored;
            *text = r.text;
        }
    }
    let saved = crate::skill_ops::save(state, &name, &description, &code, None).await?;
    let meta = &saved.meta;
    let message = if saved.unchanged {
        format!(
            "skill '{}' is unchanged (version {})",
            meta.name, meta.version
        )
    } else {
        format!("saved skill '{}' version {}", meta.name, meta.version)
    };
    let mut answer = json!({
        "message": message,
        "name": meta.name,
        "version": meta.version,
        "unchanged": saved.unchanged,
        "functions": meta.functions,
        "tools": meta.tools,
        "use": usage(meta),
    });
    answer["tokens_restored"] = json!(restored);
    if kept > 0 {
        answer["note"] = json!(format!(
            "the skill holds {kept} personal-data token(s) as written: they stand for values of this \
             session, which a skill (run by every session) does not get. Pass personal data to the \
             skill's functions as arguments instead."
        ));
    }
    Ok(success(answer))
}

pub async fn load(state: &Arc<AppState>, args: Args) -> ToolResult {
    let LoadInput { name, version } = parse(&args)?;
    let store = state.skills.clone();
    let (skill, versions) =
        blocking(state, move || Ok(store.load_with_versions(&name, version)?)).await?;
    let use_ = usage(&skill.meta);
    let mut body = serde_json::to_value(&skill).unwrap_or(Value::Null);
    if let Some(obj) = body.as_object_mut() {
        obj.insert("versions".into(), json!(versions));
        obj.insert("use".into(), use_);
    }
    Ok(success(body))
}

pub async fn list(state: &Arc<AppState>, args: Args) -> ToolResult {
    let NoArgs {} = parse(&args)?;
    let store = state.skills.clone();
    let (skills, problems) = blocking(state, move || Ok(store.list()?)).await?;
    let listed: Vec<Value> = skills
        .iter()
        .map(|m| {
            json!({
                "name": m.name,
                "description": m.description,
                "functions": m.functions,
                "tools": m.tools,
                "version": m.version,
                "updated": m.updated,
            })
        })
        .collect();
    let mut answer = success(json!({"count": listed.len(), "skills": listed}));
    if !problems.is_empty()
        && let Some(obj) = answer.as_object_mut()
    {
        obj.insert("unreadable".into(), json!(problems));
    }
    Ok(answer)
}

pub async fn delete(state: &Arc<AppState>, args: Args) -> ToolResult {
    let NameInput { name } = parse(&args)?;
    let versions = crate::skill_ops::delete(state, &name).await?;
    Ok(success(json!({
        "message": format!("deleted skill '{name}' ({versions} version(s))"),
        "name": name,
        "versions": versions,
    })))
}
