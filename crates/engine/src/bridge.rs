//! What sandboxed code may ask of the host during an execution: calling
//! upstream tools, searching the catalog, the session's PII vault, skills and the generated wrappers. The engine only relays; the
//! server implements [`Bridge`] with the upstream manager and the catalog.

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A tool's answer, as the code gets it.
#[derive(Debug, Clone, PartialEq)]
pub struct Called {
    pub value: Value,
    /// Said to the code as a Python warning (`ToolResultWarning`): a
    /// result that breaks the `outputSchema` its tool declares.
    pub warning: Option<String>,
}

impl From<Value> for Called {
    fn from(value: Value) -> Self {
        Called {
            value,
            warning: None,
        }
    }
}

/// A failed tool call, as the code's `ToolError` sees it.
#[derive(Debug, Clone)]
pub struct CallError {
    pub server: String,
    pub tool: String,
    pub message: String,
}

pub trait Bridge: Send + Sync {
    /// Calls `tool` ("server.tool" or "server__tool") with `arguments`.
    fn call(&self, tool: String, arguments: Value) -> BoxFuture<Result<Called, CallError>>;
    /// search_tools from code: the same answer as the MCP tool.
    fn search(&self, arguments: Value) -> BoxFuture<Result<Value, String>>;
    /// tokenize_pii / detokenize_pii from code (`{"op", "text"}`), with the
    /// vault of the session the execution belongs to.
    fn pii(&self, arguments: Value) -> BoxFuture<Result<Value, String>>;
    /// save_skill / load_skill / list_skills from code (`{"op", ...}`).
    fn skill(&self, arguments: Value) -> BoxFuture<Result<Value, String>>;
    /// `import servers.<server>` found no wrappers (`{"server"}`): list the
    /// server's tools (starting it if needed) and write them.
    fn wrappers(&self, arguments: Value) -> BoxFuture<Result<Value, String>>;
    /// `report_progress(done, total, message)` from code
    /// (`{"done", "total"?, "message"?}`); nothing is answered.
    fn progress(&self, update: Value) {
        let _ = update;
    }
    /// Whether the execution is waiting for a person to approve a call
    /// (true while a question is open). The engine freezes the sandbox for
    /// that time (no thread of it runs) and extends the deadline by the
    /// time it was frozen (where it cannot freeze, by the wait, with a
    /// warning: its threads go on meanwhile).
    fn asking(&self) -> Option<tokio::sync::watch::Receiver<bool>> {
        None
    }
}
