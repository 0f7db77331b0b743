//! An execution paused on an approval question that went back to the
//! client (kept in the tenant's state until the client answers).

use rmcp::model::ElicitResult;
use tokio::sync::{mpsc, oneshot};

use crate::approval::Asked;

/// An execute_code call waiting for the answer to an approval question
/// that went back to the client in an input-required result (protocol
/// 2026-07-28). The client's retry, carrying the answer and the handle as
/// its `requestState`, picks it up on any request of the same session.
pub struct Paused {
    /// The MCP session (its key) the execution belongs to.
    pub owner: String,
    /// The execution itself, still running on the server.
    pub task: tokio::task::JoinHandle<Option<crate::Answer>>,
    /// Further questions of the same execution.
    pub questions: mpsc::UnboundedReceiver<Asked>,
    /// Where the answer to the question in flight goes.
    pub reply: Option<oneshot::Sender<ElicitResult>>,
    /// After this the entry is dropped (the question has long timed out).
    pub expires: std::time::Instant,
}

impl Drop for Paused {
    /// A paused execution given up (cancelled, expired, or its session
    /// gone) is stopped: its task's future is dropped, which kills its
    /// interpreter.
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl std::fmt::Debug for Paused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Paused")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}
