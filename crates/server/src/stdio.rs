//! MCP over stdin/stdout.

use std::sync::Arc;

use rmcp::ServiceExt;
use tokio_util::sync::CancellationToken;

use crate::{AppState, McpHandler, ServeError};

/// Serves one MCP session on stdin/stdout until the client closes stdin or
/// `shutdown` is cancelled. Nothing but protocol messages goes to stdout.
pub async fn serve_stdio(
    state: Arc<AppState>,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let handler = McpHandler::new(state);
    let running = handler
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| ServeError::Mcp(e.to_string()))?;
    let cancel = running.cancellation_token();
    tokio::select! {
        outcome = running.waiting() => {
            outcome.map_err(|e| ServeError::Mcp(e.to_string()))?;
        }
        () = shutdown.cancelled() => {
            cancel.cancel();
        }
    }
    Ok(())
}
