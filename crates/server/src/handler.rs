//! The rmcp `ServerHandler`: tools/list and tools/call.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;

use crate::AppState;
use crate::tools::{self, Args};

static SESSIONS: AtomicU64 = AtomicU64::new(0);

/// One MCP session's view of the server. A new value is made per session
/// (per connection over stdio, per `Mcp-Session-Id` over HTTP), so anything
/// stored here is never seen by another session.
#[derive(Debug, Clone)]
pub struct McpHandler {
    state: Arc<AppState>,
    session: u64,
    /// Dropped with the last clone: the session is over, its vault goes.
    _ended: Arc<SessionEnd>,
}

#[derive(Debug)]
struct SessionEnd {
    state: Arc<AppState>,
    session: u64,
}

impl Drop for SessionEnd {
    fn drop(&mut self) {
        self.state
            .vaults
            .remove(&crate::privacy::connection_key(self.session));
    }
}

impl McpHandler {
    pub fn new(state: Arc<AppState>) -> Self {
        let session = SESSIONS.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::debug!(session, "new MCP session");
        let ended = Arc::new(SessionEnd {
            state: state.clone(),
            session,
        });
        Self {
            state,
            session,
            _ended: ended,
        }
    }

    /// The tool list as sent to clients.
    pub fn tools(&self) -> Vec<Tool> {
        tools::listed(self.state.tool_set)
            .map(|t| {
                let schema = match (t.schema)() {
                    serde_json::Value::Object(map) => map,
                    _ => serde_json::Map::new(),
                };
                Tool::new(t.name, t.description, Arc::new(schema))
            })
            .collect()
    }
}

impl ServerHandler for McpHandler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new("code-execution-mcp", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let args = Args::new(request.arguments);
        let started = std::time::Instant::now();
        let key = crate::privacy::session_key(
            context.extensions.get::<axum::http::request::Parts>(),
            self.session,
            &self.state.key_hasher,
        );
        let session = self.state.session(&key);
        let Some(outcome) = tools::call(&self.state, &name, args, &session).await else {
            let known: Vec<_> = tools::listed(self.state.tool_set).map(|t| t.name).collect();
            return Err(ErrorData::invalid_params(
                format!("unknown tool '{name}'; available: {}", known.join(", ")),
                None,
            ));
        };
        let result = match outcome {
            tools::Answer::Plain(Ok(answer)) => CallToolResult::structured(answer),
            tools::Answer::Plain(Err(failure)) => {
                tracing::info!(session = self.session, tool = %name, error = %failure.0, "tool error");
                CallToolResult::structured_error(json!({"success": false, "error": failure.0}))
            }
            tools::Answer::Flagged {
                body,
                is_error: false,
            } => CallToolResult::structured(body),
            tools::Answer::Flagged {
                body,
                is_error: true,
            } => CallToolResult::structured_error(body),
        };
        tracing::debug!(session = self.session, tool = %name, ms = started.elapsed().as_millis() as u64, "tool call");
        Ok(result.into())
    }
}
