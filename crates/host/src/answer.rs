//! What a tool gives back, and the one way tools do blocking work: the
//! types every layer above shares (the tools make them, the bridge and the
//! store sync read them, the transports put them on the wire).

use serde_json::{Value, json};

use crate::AppState;

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
#[derive(Debug)]
pub enum Answer {
    Plain(ToolResult),
    Flagged {
        body: Value,
        is_error: bool,
        /// Images for the answer (execute_code's `show()`), sent as MCP
        /// image blocks beside the text.
        images: Vec<ImageBlock>,
    },
}

/// An image an answer carries: base64 data and its type (PNG or JPEG).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageBlock {
    pub data: String,
    pub mime: &'static str,
}

/// The success answer: `{"success": true, ...fields}`.
pub fn success(fields: Value) -> Value {
    let mut out = json!({"success": true});
    if let (Some(out), Value::Object(fields)) = (out.as_object_mut(), fields) {
        out.extend(fields);
    }
    out
}

/// Runs blocking file work off the async executor, within the tenant's
/// share of the host's threads.
pub async fn blocking<T: Send + 'static>(
    state: &AppState,
    work: impl FnOnce() -> Result<T, ToolFailure> + Send + 'static,
) -> Result<T, ToolFailure> {
    state.host.run(work).await.map_err(ToolFailure)?
}
