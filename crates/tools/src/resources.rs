//! Workspace files and skills as MCP resources: `workspace://{path}` and
//! `skill://{name}`, listed, read (through the same tools, so personal data
//! is tokenized and a deployment's store is pulled exactly as for the
//! tools), announced to subscribers when they change, and linked from the
//! answer of the execution that wrote them.

use std::sync::Arc;

use rmcp::ErrorData;
use rmcp::model::{ContentBlock, ReadResourceResult, Resource, ResourceContents, ResourceTemplate};
use serde_json::{Value, json};

use crate::dispatch;
use cem_host::AppState;
use cem_host::privacy::Session;
use cem_host::{Answer, Args, Change};

pub const WORKSPACE: &str = "workspace://";
pub const SKILL: &str = "skill://";
/// Files an answer links at most (the rest are in `files_written`).
const MAX_LINKS: usize = 50;

/// The URI of what `change` changed, as subscribers know it.
pub fn uri_of(change: &Change) -> String {
    match change {
        Change::WorkspaceFile(path) => workspace_uri(path),
        Change::Skill(name) => format!("{SKILL}{name}"),
    }
}

/// The URI of workspace file `path`.
pub fn workspace_uri(path: &str) -> String {
    format!("{WORKSPACE}{path}")
}

/// What a resource URI names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    /// A workspace file, by its path as written (checked when read).
    File(&'a str),
    /// A skill, by its name as written (checked when loaded).
    Skill(&'a str),
}

/// The resource `uri` names, if it is one of ours (public for the fuzz
/// targets too).
pub fn target(uri: &str) -> Option<Target<'_>> {
    if let Some(path) = uri.strip_prefix(WORKSPACE) {
        return Some(Target::File(path));
    }
    uri.strip_prefix(SKILL).map(Target::Skill)
}

/// The two templates clients can fill in.
pub fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(format!("{WORKSPACE}{{path}}"), "workspace file")
            .with_description("A file of the persistent workspace, by its path"),
        ResourceTemplate::new(format!("{SKILL}{{name}}"), "skill")
            .with_description("The code of a saved skill")
            .with_mime_type("text/x-python"),
    ]
}

/// Every workspace file and skill of the tenant, as the tools list them.
pub async fn list(state: &Arc<AppState>, session: &Session) -> Result<Vec<Resource>, ErrorData> {
    let mut out = Vec::new();
    let files =
        body_of(dispatch::run(state, "list_workspace_files", Args::new(None), session).await)?;
    for entry in files["files"].as_array().into_iter().flatten() {
        if entry["type"] != "file" {
            continue;
        }
        let Some(path) = entry["path"].as_str() else {
            continue;
        };
        let mut resource = Resource::new(workspace_uri(path), path);
        if let Some(size) = entry["size"].as_u64() {
            resource = resource.with_size(size);
        }
        out.push(resource);
    }
    let skills = body_of(dispatch::run(state, "list_skills", Args::new(None), session).await)?;
    for skill in skills["skills"].as_array().into_iter().flatten() {
        let Some(name) = skill["name"].as_str() else {
            continue;
        };
        let mut resource =
            Resource::new(format!("{SKILL}{name}"), name).with_mime_type("text/x-python");
        if let Some(d) = skill["description"].as_str() {
            resource = resource.with_description(d);
        }
        out.push(resource);
    }
    Ok(out)
}

/// One resource's content: a workspace file (text as the read tool shows
/// it; other bytes as base64) or a skill's code.
pub async fn read(
    state: &Arc<AppState>,
    session: &Session,
    uri: &str,
) -> Result<ReadResourceResult, ErrorData> {
    if let Some(Target::File(path)) = target(uri) {
        let args = Args::new(json!({"filename": path}).as_object().cloned());
        let answer = dispatch::run(state, "read_workspace_file", args, session).await;
        let text = match body_of(answer) {
            Ok(body) => body["content"].as_str().unwrap_or_default().to_string(),
            Err(e) if e.message.contains("not UTF-8") => {
                return binary(state, path, uri).await;
            }
            Err(e) => return Err(e),
        };
        return Ok(ReadResourceResult::new(vec![ResourceContents::text(
            text, uri,
        )]));
    }
    if let Some(Target::Skill(name)) = target(uri) {
        let args = Args::new(json!({"name": name}).as_object().cloned());
        let body = body_of(dispatch::run(state, "load_skill", args, session).await)?;
        let code = body["code"].as_str().unwrap_or_default().to_string();
        return Ok(ReadResourceResult::new(vec![ResourceContents::text(
            code, uri,
        )]));
    }
    Err(ErrorData::resource_not_found(
        format!("no resource '{uri}': this server serves {WORKSPACE}{{path}} and {SKILL}{{name}}"),
        None,
    ))
}

async fn binary(
    state: &Arc<AppState>,
    path: &str,
    uri: &str,
) -> Result<ReadResourceResult, ErrorData> {
    use base64::Engine as _;
    let (reader, path) = (state.clone(), path.to_string());
    let bytes = cem_host::blocking(state, move || Ok(reader.workspace.read(&path)?))
        .await
        .map_err(|e| ErrorData::invalid_params(e.0, None))?;
    if cem_host::privacy::automatic(&state.config.pii)
        && holds_personal_data(&bytes, &state.config.pii.types)
    {
        // Raw bytes cannot be tokenized: a file whose bytes read as text
        // with personal data in it is not served.
        return Err(ErrorData::invalid_params(
            format!(
                "{uri} is not UTF-8 text and holds what looks like personal data, which cannot be tokenized \
                 in raw bytes; read or convert it with execute_code"
            ),
            None,
        ));
    }
    let blob = base64::engine::general_purpose::STANDARD.encode(bytes);
    Ok(ReadResourceResult::new(vec![ResourceContents::blob(
        blob, uri,
    )]))
}

/// Whether `bytes`, read as Latin-1 or as UTF-16 (the usual encodings of
/// text that is not UTF-8), hold personal data of `kinds`.
fn holds_personal_data(bytes: &[u8], kinds: &[cem_pii::Kind]) -> bool {
    let latin1: String = bytes.iter().map(|b| char::from(*b)).collect();
    let utf16: String = char::decode_utf16(
        bytes
            .chunks_exact(2)
            .map(|pair| u16::from_le_bytes([pair[0], pair[1]])),
    )
    .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
    .collect();
    [latin1, utf16].iter().any(|text| {
        cem_pii::detect(text)
            .iter()
            .any(|e| kinds.contains(&e.kind))
    })
}

/// The JSON of a tool's successful answer, or its failure as an error.
fn body_of(answer: Option<Answer>) -> Result<Value, ErrorData> {
    match answer {
        Some(Answer::Plain(Ok(body))) => Ok(body),
        Some(Answer::Plain(Err(e))) => Err(ErrorData::invalid_params(e.0, None)),
        Some(Answer::Flagged { body, .. }) => Ok(body),
        None => Err(ErrorData::internal_error(
            "the tool behind resources is missing",
            None,
        )),
    }
}

/// Resource links for the files an execution wrote (`files_written` of its
/// answer), so a client can show or attach them without the model reading
/// them.
pub fn links(body: &Value) -> Vec<ContentBlock> {
    body["files_written"]
        .as_array()
        .into_iter()
        .flatten()
        .take(MAX_LINKS)
        .filter_map(|f| {
            let path = f["path"].as_str()?;
            let mut link = Resource::new(workspace_uri(path), path);
            if let Some(size) = f["size"].as_u64() {
                link = link.with_size(size);
            }
            Some(ContentBlock::resource_link(link))
        })
        .collect()
}
