//! sanitize_pii and restore_pii: the session's vault, called explicitly.
//! Explicit calls detect every kind, whatever `pii.types` says (that
//! setting governs the automatic mode only).

use std::sync::Arc;

use cem_pii::Kind;
use serde_json::json;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::def::ToolDef;
use crate::input::{FILE_BYTES, input_schema, parse};
use cem_host::AppState;
use cem_host::privacy::{Session, summary};
use cem_host::{Args, ToolResult, success};

pub const SANITIZE: ToolDef = ToolDef {
    name: "sanitize_pii",
    description: "Replace personal data and secrets in text with this session's tokens ([EMAIL_1], [PHONE_2], ...).",
    schema: input_schema::<TextInput>,
    minimal: false,
};

pub const RESTORE: ToolDef = ToolDef {
    name: "restore_pii",
    description: "Put the original values back for this session's tokens in text.",
    schema: input_schema::<TextInput>,
    minimal: false,
};

/// Both tools take one argument, `text`, as long as a workspace file may
/// be: what an agent sanitizes is a file's worth of text at most.
#[derive(Deserialize, JsonSchema)]
struct TextInput {
    #[schemars(extend("maxLength" = FILE_BYTES))]
    text: String,
}

pub fn sanitize(_state: &Arc<AppState>, args: Args, session: &Session) -> ToolResult {
    let TextInput { text } = parse(&args)?;
    let out = cem_pii::tokenize_shared(&session.vault, &text, &Kind::ALL);
    let counts = summary(&out.counts);
    Ok(success(json!({
        "sanitized_text": out.text,
        "pii_found": counts["tokenized"],
        "pii_types": counts["by_type"],
    })))
}

pub fn restore(args: Args, session: &Session) -> ToolResult {
    let TextInput { text } = parse(&args)?;
    let out = session.vault().restore(&text);
    let mut answer = success(json!({"restored_text": out.text, "restored": out.restored}));
    if !out.unknown.is_empty()
        && let Some(obj) = answer.as_object_mut()
    {
        obj.insert("unknown_tokens".into(), json!(out.unknown));
        obj.insert(
            "message".into(),
            json!("some tokens were not made in this session (or have expired) and were left as they are"),
        );
    }
    Ok(answer)
}
