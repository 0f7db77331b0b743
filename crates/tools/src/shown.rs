//! The images an execution showed (`show()`, figures left open): read
//! back from the workspace, checked and made fit for the answer
//! (`cem-pictures`), counted in its token figures.

use std::sync::Arc;

use base64::Engine as _;
use cem_engine::Shown;
use cem_host::{AppState, ImageBlock};
use serde_json::{Value, json};

/// What the answer gets of the images shown: the blocks to send, and for
/// the structured answer what each is and what was done to it.
#[derive(Default)]
pub struct Attached {
    pub blocks: Vec<ImageBlock>,
    /// `{path, mime, width, height, bytes, changed?}` per image sent.
    pub listed: Vec<Value>,
    /// What went wrong with any image, and what was changed, for the note.
    pub notes: Vec<String>,
    /// The images' tokens by the published rule.
    pub tokens: u64,
}

/// Reads and prepares `shown` on the tenant's blocking threads. Never
/// fails the execution: an image that cannot be sent is said in a note.
pub async fn attach(state: &Arc<AppState>, shown: Vec<Shown>) -> Attached {
    if shown.is_empty() {
        return Attached::default();
    }
    let st = state.clone();
    cem_host::blocking(state, move || Ok(prepare_all(&st, shown)))
        .await
        .unwrap_or_else(|e| Attached {
            notes: vec![format!("the images shown were not sent: {}", e.0)],
            ..Default::default()
        })
}

fn prepare_all(state: &AppState, shown: Vec<Shown>) -> Attached {
    let limits = &state.config.answers;
    let picture_limits = cem_pictures::Limits {
        max_edge: limits.max_image_edge,
        max_bytes: usize::try_from(limits.max_image_block_bytes).unwrap_or(usize::MAX),
    };
    let max = usize::try_from(limits.max_images).unwrap_or(usize::MAX);
    let mut out = Attached::default();
    if shown.len() > max {
        // The runtime refuses past the limit; only a tampered one gets here.
        out.notes.push(format!(
            "{} images were shown; answers.max_images is {max}, so the first {max} are sent",
            shown.len()
        ));
    }
    for image in shown.into_iter().take(max) {
        let path = image.path;
        let bytes = match state.workspace.read(&path) {
            Ok(bytes) => bytes,
            Err(e) => {
                out.notes.push(format!("image {path} was not sent: {e}"));
                continue;
            }
        };
        if bytes.len() as u64 > limits.max_image_bytes {
            out.notes.push(format!(
                "image {path} was not sent: it is {} bytes, over answers.max_image_bytes ({})",
                bytes.len(),
                limits.max_image_bytes
            ));
            continue;
        }
        match cem_pictures::prepare(&bytes, picture_limits) {
            Ok(picture) => {
                let mut entry = json!({
                    "path": path, "mime": picture.mime, "width": picture.width,
                    "height": picture.height, "bytes": picture.data.len(),
                });
                if let Some(changed) = &picture.changed {
                    entry["changed"] = json!(changed);
                    out.notes.push(format!("image {path} was {changed}"));
                }
                out.tokens += picture.tokens();
                out.listed.push(entry);
                out.blocks.push(ImageBlock {
                    data: base64::engine::general_purpose::STANDARD.encode(&picture.data),
                    mime: picture.mime,
                });
            }
            Err(e) => out.notes.push(format!("image {path} was not sent: {e}")),
        }
    }
    out
}

/// Puts what was attached into the structured answer: the images' list,
/// their notes, and their tokens in the answer's figure.
pub fn record(body: &mut Value, attached: &Attached) {
    let Some(obj) = body.as_object_mut() else {
        return;
    };
    if !attached.listed.is_empty() {
        obj.insert("images".into(), json!(attached.listed));
    }
    if !attached.notes.is_empty() {
        let joined = attached.notes.join("; ");
        let note = match obj.get("note").and_then(Value::as_str) {
            Some(before) => format!("{before}; {joined}"),
            None => joined,
        };
        obj.insert("note".into(), json!(note));
    }
    if attached.tokens > 0
        && let Some(tokens) = obj.get_mut("tokens").and_then(Value::as_object_mut)
    {
        let returned =
            tokens.get("returned").and_then(Value::as_u64).unwrap_or(0) + attached.tokens;
        let inside = tokens
            .get("tool_results")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        tokens.insert("returned".into(), json!(returned));
        tokens.insert(
            "kept_out_of_context".into(),
            json!(inside.saturating_sub(returned)),
        );
    }
}
