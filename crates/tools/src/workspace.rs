//! write_workspace_file, read_workspace_file, list_workspace_files.

use std::sync::Arc;

use serde_json::{Value, json};

use schemars::JsonSchema;
use serde::Deserialize;

use crate::def::ToolDef;
use crate::input::{FILE_BYTES, input_schema, parse};
use cem_host::AppState;
use cem_host::privacy::Session;
use cem_host::{Args, ToolFailure, ToolResult, blocking, success};
use cem_store::MAX_PATH_BYTES;

pub const WRITE: ToolDef = ToolDef {
    name: "write_workspace_file",
    description: "Write a text file to the persistent workspace (atomic; creates parent dirs; replaces an existing file).",
    schema: input_schema::<WriteInput>,
    minimal: false,
};

#[derive(Deserialize, JsonSchema)]
struct WriteInput {
    /// Path relative to the workspace
    #[schemars(extend("maxLength" = MAX_PATH_BYTES))]
    filename: String,
    #[schemars(extend("maxLength" = FILE_BYTES))]
    content: String,
}

pub const READ: ToolDef = ToolDef {
    name: "read_workspace_file",
    description: "Read a UTF-8 text file from the workspace.",
    schema: input_schema::<ReadInput>,
    minimal: false,
};

#[derive(Deserialize, JsonSchema)]
struct ReadInput {
    /// Path relative to the workspace
    #[schemars(extend("maxLength" = MAX_PATH_BYTES))]
    filename: String,
}

pub const LIST: ToolDef = ToolDef {
    name: "list_workspace_files",
    description: "List workspace files and directories recursively, with sizes.",
    schema: input_schema::<ListInput>,
    minimal: false,
};

#[derive(Deserialize, JsonSchema)]
struct ListInput {
    /// Directory to list (default: all)
    #[schemars(extend("maxLength" = MAX_PATH_BYTES))]
    subpath: Option<String>,
}

pub async fn write(state: &Arc<AppState>, args: Args) -> ToolResult {
    let WriteInput { filename, content } = parse(&args)?;
    let writer = state.clone();
    let written = blocking(state, move || {
        let state = writer;
        if state.quota.config().workspace_bytes.is_some() {
            let used = state.workspace.usage()?.bytes;
            let replacing = state
                .workspace
                .read(&filename)
                .map_or(0, |b| b.len() as u64);
            state
                .quota
                .check_write(used, replacing, content.len() as u64)
                .map_err(|e| ToolFailure(e.message))?;
        }
        let _room = state.engine.hold_disk_for_host();
        Ok(state.workspace.write(&filename, content.as_bytes())?)
    })
    .await?;
    state
        .changes
        .publish(cem_host::Change::WorkspaceFile(written.path.clone()))
        .await;
    let verb = if written.created {
        "Created"
    } else {
        "Replaced"
    };
    Ok(success(json!({
        "message": format!("{verb} {} ({} bytes)", written.path, written.size),
        "filename": written.path,
        "size": written.size,
    })))
}

pub async fn read(state: &Arc<AppState>, args: Args, session: &Session) -> ToolResult {
    let ReadInput { filename: shown } = parse(&args)?;
    // list_workspace_files shows names with personal data as tokens: the
    // name the model passes back may hold them.
    let filename = if cem_host::privacy::automatic(&state.config.pii) {
        session.vault().restore(&shown).text
    } else {
        shown.clone()
    };
    let reader = state.clone();
    let content = match blocking(state, move || Ok(reader.workspace.read_text(&filename)?)).await {
        Ok(content) => content,
        // The error quotes the restored name: the model sees it as tokens.
        Err(e) if cem_host::privacy::automatic(&state.config.pii) => {
            let shown = cem_pii::tokenize_shared(&session.vault, &e.0, &state.config.pii.types);
            return Err(ToolFailure(shown.text));
        }
        Err(e) => return Err(e),
    };
    let size = content.len();
    // Code may have written real personal data to the file: in automatic
    // mode the model sees tokens here too.
    let (content, tokenized) = if cem_host::privacy::automatic(&state.config.pii) {
        let t = cem_pii::tokenize_shared(&session.vault, &content, &state.config.pii.types);
        let counts = (!t.counts.is_empty()).then(|| cem_host::privacy::summary(&t.counts));
        (t.text, counts)
    } else {
        (content, None)
    };
    let mut answer = success(json!({
        "filename": shown,
        "content": content,
        "size": size,
    }));
    if let (Some(pii), Some(obj)) = (tokenized, answer.as_object_mut()) {
        obj.insert("pii".into(), pii);
    }
    Ok(answer)
}

pub async fn list(state: &Arc<AppState>, args: Args) -> ToolResult {
    let subpath = parse::<ListInput>(&args)?.subpath.unwrap_or_default();
    let st = state.clone();
    let listing = blocking(state, move || Ok(st.workspace.list(&subpath)?)).await?;
    let mut answer = success(json!({
        "files": listing.entries,
        "count": listing.entries.len(),
    }));
    if listing.truncated
        && let Some(obj) = answer.as_object_mut()
    {
        obj.insert("truncated".into(), Value::Bool(true));
        obj.insert(
            "message".into(),
            json!(format!(
                "only the first {} entries are listed; pass subpath to narrow",
                cem_store::LIST_LIMIT
            )),
        );
    }
    Ok(answer)
}
