//! The rmcp `ServerHandler`: tools/list and tools/call.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ElicitResult, ElicitationAction,
    Implementation, InputRequest, InputRequests, InputRequiredResult, InputResponses,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use crate::AppState;
use crate::approval::{Asked, ElicitApprover, InputRequiredApprover};
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
        let key = crate::privacy::connection_key(self.session);
        self.state.vaults.remove(&key);
        self.state.gate.end_session(&key);
    }
}

/// An execute_code call waiting for the answer to an approval question
/// that went back to the client in an input-required result (protocol
/// 2026-07-28). The client's retry, carrying the answer and the handle as
/// its `requestState`, picks it up on any request of the same session.
pub struct Paused {
    /// The MCP session (its key) the execution belongs to.
    owner: String,
    /// The execution itself, still running on the server.
    task: tokio::task::JoinHandle<Option<tools::Answer>>,
    /// Further questions of the same execution.
    questions: mpsc::UnboundedReceiver<Asked>,
    /// Where the answer to the question in flight goes.
    reply: Option<oneshot::Sender<ElicitResult>>,
    /// After this the entry is dropped (the question has long timed out).
    expires: std::time::Instant,
}

impl std::fmt::Debug for Paused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Paused")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

/// The key under which an approval question travels in `inputRequests`.
const APPROVAL_KEY: &str = "approval";

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
        let mut session = self.state.session(&key);
        if name == "execute_code" {
            if let Some(handle) = request.request_state {
                return self.resume(&key, &handle, request.input_responses).await;
            }
            match approval_route(&context) {
                Route::InputRequired(client) => {
                    let (questions, rx) = mpsc::unbounded_channel();
                    session.approver = Some(Arc::new(InputRequiredApprover { questions, client }));
                    let state = self.state.clone();
                    let task = tokio::spawn(async move {
                        tools::call(&state, "execute_code", args, &session).await
                    });
                    let paused = Paused {
                        owner: key,
                        task,
                        questions: rx,
                        reply: None,
                        expires: self.expiry(),
                    };
                    return self.wait(paused).await;
                }
                Route::Elicit(client) => {
                    session.approver = Some(Arc::new(ElicitApprover {
                        peer: context.peer.clone(),
                        client,
                    }));
                }
                Route::None(why) => session.no_approver = why,
            }
        }
        let Some(outcome) = tools::call(&self.state, &name, args, &session).await else {
            let known: Vec<_> = tools::listed(self.state.tool_set).map(|t| t.name).collect();
            return Err(ErrorData::invalid_params(
                format!("unknown tool '{name}'; available: {}", known.join(", ")),
                None,
            ));
        };
        let result = self.result(&name, outcome);
        tracing::debug!(session = self.session, tool = %name, ms = started.elapsed().as_millis() as u64, "tool call");
        Ok(result.into())
    }
}

/// How an approval question reaches the person behind this request.
enum Route {
    /// In an input-required result (2026-07-28).
    InputRequired(String),
    /// As an `elicitation/create` request on the session.
    Elicit(String),
    /// Not at all, for this reason.
    None(String),
}

fn approval_route(context: &RequestContext<RoleServer>) -> Route {
    let client = context
        .client_info()
        .map(|i| format!("{} {}", i.name, i.version))
        .unwrap_or_else(|| "unnamed client".into());
    let elicits = context
        .client_capabilities()
        .and_then(|c| c.elicitation)
        .is_some_and(|e| e.form.is_some() || e.url.is_none());
    if !elicits {
        return Route::None(format!(
            "the client ({client}) did not declare the MCP elicitation capability, so nobody can be asked"
        ));
    }
    let stateless = context
        .protocol_version()
        .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
    if stateless {
        Route::InputRequired(client)
    } else {
        Route::Elicit(client)
    }
}

impl McpHandler {
    fn expiry(&self) -> std::time::Instant {
        let wait = self.state.config.policy.approval_timeout_seconds
            + self.state.config.sandbox.max_timeout_seconds
            + 60;
        std::time::Instant::now() + std::time::Duration::from_secs(wait)
    }

    /// Waits for a running execution: its answer, or its next question,
    /// which goes back to the client while the execution stays paused.
    async fn wait(&self, mut paused: Paused) -> Result<CallToolResponse, ErrorData> {
        tokio::select! {
            done = &mut paused.task => {
                let outcome = done
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| tools::Answer::Plain(Err(tools::ToolFailure("the execution task failed; run the code again".into()))));
                Ok(self.result("execute_code", outcome).into())
            }
            Some(asked) = paused.questions.recv() => {
                paused.reply = Some(asked.reply);
                let handle = crate::gate::new_id();
                let mut requests = InputRequests::new();
                requests.insert(APPROVAL_KEY.to_string(), InputRequest::Elicitation(asked.request));
                if let Ok(mut all) = self.state.paused.lock() {
                    let now = std::time::Instant::now();
                    all.retain(|_, p| p.expires > now);
                    all.insert(handle.clone(), paused);
                }
                Ok(InputRequiredResult::new(Some(requests), Some(handle)).into())
            }
        }
    }

    /// The client's retry after an input-required result: the answer goes
    /// to the paused execution, which runs on.
    async fn resume(
        &self,
        key: &str,
        handle: &str,
        responses: Option<InputResponses>,
    ) -> Result<CallToolResponse, ErrorData> {
        let found = self.state.paused.lock().ok().and_then(|mut all| {
            let owned = all.get(handle).is_some_and(|p| p.owner == key);
            if owned { all.remove(handle) } else { None }
        });
        let Some(mut paused) = found else {
            return Err(ErrorData::invalid_params(
                "requestState names no paused execution of this session (it finished, timed out, or belongs to another session); run the code again",
                None,
            ));
        };
        let answer = responses
            .and_then(|r| r.get(APPROVAL_KEY).cloned())
            .and_then(|v| serde_json::from_value::<ElicitResult>(v).ok())
            .unwrap_or_else(|| ElicitResult::new(ElicitationAction::Cancel));
        if let Some(reply) = paused.reply.take() {
            let _ = reply.send(answer);
        }
        self.wait(paused).await
    }

    fn result(&self, name: &str, outcome: tools::Answer) -> CallToolResult {
        match outcome {
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
        }
    }
}
