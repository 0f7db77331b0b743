//! The rmcp `ServerHandler`: tools/list and tools/call.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cem_metrics::traces;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitResult,
    ElicitationAction, Implementation, InputRequest, InputRequests, InputRequiredResult,
    InputResponses, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ResourceUpdatedNotificationParam, ServerCapabilities, ServerConfig, SubscribeRequestParams,
    SubscriptionFilter, Tool, UnsubscribeRequestParams,
};
use rmcp::model::{
    CancelTaskParams, CreateTaskResult, GetTaskParams, GetTaskResult, TASKS_EXTENSION_ID,
    UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::service::SubscriptionContext;
use rmcp::task_manager::{TaskExit, TaskOptions};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;
use tokio::sync::mpsc;
use tracing::Instrument;

use std::sync::OnceLock;

use cem_auth::{Ability, Principal};

use crate::Tenants;
use cem_host::AppState;
use cem_host::approval::{ElicitApprover, InputRequiredApprover};
use cem_host::{Answer, Args, Paused, ToolFailure};
use cem_tools as tools;
use cem_tools::resources;

static SESSIONS: AtomicU64 = AtomicU64::new(0);

/// One MCP session's view of the server. A new value is made per session
/// (per connection over stdio, per `Mcp-Session-Id` over HTTP), so anything
/// stored here is never seen by another session.
#[derive(Debug, Clone)]
pub struct McpHandler {
    tenants: Arc<Tenants>,
    session: u64,
    /// The tenant this session belongs to, set by its first request: a
    /// session is never used by another principal.
    bound: Arc<OnceLock<Arc<AppState>>>,
    /// Resources this (legacy) session subscribed to with
    /// `resources/subscribe`.
    subscribed: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// Whether this session's forwarder of resource changes runs.
    forwarding: Arc<std::sync::atomic::AtomicBool>,
    /// The level `logging/setLevel` asked for.
    log_level: crate::logging::LogLevel,
    /// Dropped with the last clone: the session is over, its vault goes.
    _ended: Arc<SessionEnd>,
}

#[derive(Debug)]
struct SessionEnd {
    bound: Arc<OnceLock<Arc<AppState>>>,
    session: u64,
    /// Cancelled when the session ends: stops its subscription forwarder.
    over: tokio_util::sync::CancellationToken,
    /// Counts the session open in `cem_sessions` until it ends.
    _counted: cem_metrics::SessionCount,
}

impl Drop for SessionEnd {
    fn drop(&mut self) {
        self.over.cancel();
        let Some(state) = self.bound.get() else {
            return;
        };
        let key = cem_host::privacy::connection_key(self.session);
        state.vaults.remove(&key);
        state.gate.end_session(&key);
    }
}

/// The key under which an approval question travels in `inputRequests`.
const APPROVAL_KEY: &str = "approval";

impl McpHandler {
    /// A session of the local tenant only (stdio).
    pub fn new(state: Arc<AppState>) -> Self {
        Self::for_tenants(Tenants::new(state))
    }

    /// A session whose tenant is the principal of its requests (HTTP).
    pub fn for_tenants(tenants: Arc<Tenants>) -> Self {
        let session = SESSIONS.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::debug!(session, "new MCP session");
        let bound = Arc::new(OnceLock::new());
        let ended = Arc::new(SessionEnd {
            bound: bound.clone(),
            session,
            over: tokio_util::sync::CancellationToken::new(),
            _counted: cem_metrics::metrics().session_opened(),
        });
        Self {
            tenants,
            session,
            bound,
            subscribed: Arc::default(),
            forwarding: Arc::default(),
            log_level: crate::logging::LogLevel::default(),
            _ended: ended,
        }
    }

    /// The state of the tenant behind this request: its principal's (set by
    /// the HTTP layer), else the local one. Refuses a principal that is not
    /// the one that began the session, and a tool its abilities do not
    /// cover (the HTTP layer answered 403 already; this is the backstop).
    fn tenant(
        &self,
        context: &RequestContext<RoleServer>,
        tool: Option<&str>,
    ) -> Result<Arc<AppState>, ErrorData> {
        let principal = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<Principal>())
            .cloned()
            .unwrap_or_else(Principal::local);
        if let Some(ability) = tool.and_then(Ability::for_tool)
            && !principal.can(ability)
        {
            return Err(ErrorData::invalid_request(
                format!(
                    "your access token does not grant '{}', which this tool needs",
                    ability.as_str()
                ),
                None,
            ));
        }
        let state = self.tenants.get(&principal).map_err(|e| {
            ErrorData::internal_error(format!("cannot open your tenant: {e}"), None)
        })?;
        // A tenant released for idleness warms up again on any request.
        state.engine.touch();
        let bound = self.bound.get_or_init(|| state.clone());
        if bound.tenant != state.tenant {
            return Err(ErrorData::invalid_request(
                "unknown session: start a new one",
                None,
            ));
        }
        Ok(state)
    }

    /// The tool list as sent to clients.
    pub fn tools(&self) -> Vec<Tool> {
        let state = self.tenants.local();
        // Bounds from config (a file's content up to workspace.max_file_bytes).
        let limits = tools::input::Limits::of(state);
        tools::listed(state.tool_set)
            .map(|t| {
                let schema = match (t.schema)(&limits) {
                    serde_json::Value::Object(map) => map,
                    _ => serde_json::Map::new(),
                };
                let output = match tools::output_schema(t.name) {
                    serde_json::Value::Object(map) => map,
                    _ => serde_json::Map::new(),
                };
                Tool::new(t.name, t.description, Arc::new(schema))
                    .with_raw_output_schema(Arc::new(output))
            })
            .collect()
    }
}

impl ServerHandler for McpHandler {
    #[allow(deprecated)] // logging, offered to clients before 2026-07-28
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_tools()
            .enable_tasks()
            .enable_logging()
            .build();
        ServerConfig::new(capabilities).with_server_info(Implementation::new(
            "code-execution-mcp",
            env!("CARGO_PKG_VERSION"),
        ))
    }

    #[allow(deprecated)] // logging, before 2026-07-28
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.log_level.set(request.level);
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.tenant(&context, None)?;
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let state = self.tenant(&context, Some("execute_code"))?;
        Ok(GetTaskResult::new(state.tasks.get_task(&request.task_id)?))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let state = self.tenant(&context, Some("execute_code"))?;
        state.tasks.cancel_task(&request.task_id)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let state = self.tenant(&context, Some("execute_code"))?;
        state
            .tasks
            .update_task(&request.task_id, request.input_responses)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let state = self.tenant(&context, Some("list_workspace_files"))?;
        let session = self.session_of(&state, &context);
        Ok(ListResourcesResult::with_all_items(
            resources::list(&state, &session).await?,
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.tenant(&context, None)?;
        Ok(ListResourceTemplatesResult::with_all_items(
            resources::templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let tool = if request.uri.starts_with(resources::SKILL) {
            "load_skill"
        } else {
            "read_workspace_file"
        };
        let state = self.tenant(&context, Some(tool))?;
        let session = self.session_of(&state, &context);
        Ok(ReadResourceResponse::Complete(
            resources::read(&state, &session, &request.uri).await?,
        ))
    }

    #[allow(deprecated)] // the legacy (before 2026-07-28) subscription
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let state = self.tenant(&context, Some("read_workspace_file"))?;
        let ours = request.uri.starts_with(resources::WORKSPACE)
            || request.uri.starts_with(resources::SKILL);
        if !ours {
            // A file not written yet may be watched; a URI of another
            // scheme can never change here.
            return Err(ErrorData::invalid_params(
                format!(
                    "cannot subscribe to '{}': this server's resources are workspace://{{path}} and skill://{{name}}",
                    request.uri
                ),
                None,
            ));
        }
        let first = {
            let mut subscribed = self
                .subscribed
                .lock()
                .map_err(|_| ErrorData::internal_error("subscriptions are poisoned", None))?;
            subscribed.insert(request.uri);
            !self
                .forwarding
                .swap(true, std::sync::atomic::Ordering::SeqCst)
        };
        if first {
            let mut changes = state.changes.listen();
            let (subscribed, peer) = (self.subscribed.clone(), context.peer.clone());
            let over = self._ended.over.clone();
            tokio::spawn(async move {
                loop {
                    let uri = tokio::select! {
                        () = over.cancelled() => return,
                        changed = changes.recv() => match changed {
                            Ok(change) => resources::uri_of(&change),
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                            Err(_) => return,
                        },
                    };
                    let wanted = subscribed.lock().is_ok_and(|s| s.contains(&uri));
                    if wanted {
                        let _ = peer
                            .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                            .await;
                    }
                }
            });
        }
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if let Ok(mut subscribed) = self.subscribed.lock() {
            subscribed.remove(&request.uri);
        }
        Ok(())
    }

    /// 2026-07-28 `subscriptions/listen`: resource updates of our URIs.
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let ours =
            |u: &String| u.starts_with(resources::WORKSPACE) || u.starts_with(resources::SKILL);
        let mut accepted = SubscriptionFilter::new();
        accepted.resource_subscriptions = requested
            .resource_subscriptions
            .as_ref()
            .map(|uris| uris.iter().filter(|u| ours(u)).cloned().collect());
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let state = self.tenant(context.request_context(), Some("read_workspace_file"))?;
        let mut changes = state.changes.listen();
        loop {
            let uri = tokio::select! {
                () = context.cancelled() => return Ok(()),
                changed = changes.recv() => match changed {
                    Ok(change) => resources::uri_of(&change),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(_) => return Ok(()),
                },
            };
            let wanted = context
                .accepted()
                .resource_subscriptions
                .as_ref()
                .is_some_and(|uris| uris.contains(&uri));
            if wanted {
                let _ = context.sink().notify_resource_updated(uri).await;
            }
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // notifications/cancelled: the call's future is dropped, and with
        // it an execution's interpreter (its process is killed), its slot
        // and the upstream calls it was waiting on.
        let cancelled = context.ct.clone();
        let name = request.name.to_string();
        // Every log line of this call carries it (`--log-format json`); the
        // tenant is known once the request is authenticated.
        let span = tracing::info_span!(
            "request",
            // The client's JSON-RPC id repeats across clients and
            // requests; this one is the server's own, once per call.
            request = %cem_host::gate::new_id(),
            rpc_id = %context.id,
            tool = %name,
            tenant = tracing::field::Empty,
            node = %node_name(self.tenants.local()),
            // For traces (`serve --otlp-endpoint`), recorded only then.
            otel.name = tracing::field::Empty,
            otel.kind = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        traces::name(&span, || format!("tools/call {name}"));
        traces::kind(&span, traces::Kind::Server);
        crate::trace_context::continue_trace(&span, &context);
        let (traced, cancelled_span) = (span.clone(), span.clone());
        let run = async move {
            let answer = self.run_tool(request, context).await;
            if failed(&answer) {
                traces::failed(&traced);
            }
            answer
        };
        tokio::select! {
            answer = run.instrument(span) => answer,
            () = cancelled.cancelled() => {
                traces::failed(&cancelled_span);
                tracing::info!(session = self.session, tool = %name, "cancelled by the client");
                Err(ErrorData::internal_error("cancelled by the client", None))
            }
        }
    }
}

impl McpHandler {
    /// Starts execute_code as a task (the client declared the Tasks
    /// extension): the answer is the task, which `tasks/get` polls until
    /// the result is there, kept for the task's time to live after the
    /// client has gone. `tasks/cancel` kills the execution. Approval
    /// questions cannot be asked from inside a task: an `ask` call is
    /// refused, saying so.
    async fn as_task(
        &self,
        state: &Arc<AppState>,
        args: Args,
        mut session: cem_host::privacy::Session,
    ) -> CreateTaskResult {
        session.no_approver =
            "the call runs as a task, where this server cannot ask a person; run it without a task to be asked".into();
        session.progress = None;
        let (handler, state_for_task) = (self.clone(), state.clone());
        let traced = crate::trace_context::detached("execute_code task");
        let task = state.tasks.spawn(
            TaskOptions::new().with_ttl_ms(task_ttl_ms(state)),
            move |context| {
                Box::pin(async move {
                    let run = tools::call(&state_for_task, "execute_code", args, &session);
                    tokio::select! {
                        answer = run => match answer {
                            Some(answer) => Ok(handler.result("execute_code", answer)),
                            None => Err(TaskExit::Error(ErrorData::internal_error("execute_code is not served here", None))),
                        },
                        // Dropping the execution kills its interpreter.
                        () = context.cancelled() => Err(TaskExit::Cancelled),
                    }
                }.instrument(traced))
            },
        );
        if let Some(cluster) = &state.cluster
            && let Err(e) = cluster
                .claim(cem_cluster::SessionKind::Task, &state.tenant, &task.task_id)
                .await
        {
            tracing::warn!(error = %e, "a task's node was not recorded; only this node can answer for it");
        }
        CreateTaskResult::new(task)
    }

    /// The caller's session (its vault) for a request of `state`'s tenant.
    fn session_of(
        &self,
        state: &AppState,
        context: &RequestContext<RoleServer>,
    ) -> cem_host::privacy::Session {
        let key = cem_host::privacy::session_key(
            context.extensions.get::<axum::http::request::Parts>(),
            self.session,
        );
        state.session(&key)
    }

    async fn run_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let state = self.tenant(&context, Some(&name))?;
        tracing::Span::current()
            .record("tenant", cem_config::tenant_digest(&state.tenant).as_str());
        let args = Args::new(request.arguments);
        let started = std::time::Instant::now();
        let key = cem_host::privacy::session_key(
            context.extensions.get::<axum::http::request::Parts>(),
            self.session,
        );
        let mut session = state.session(&key);
        session.progress = context.meta.get_progress_token().map(|token| {
            Arc::new(cem_host::progress::ProgressSink::new(
                context.peer.clone(),
                token,
            ))
        });
        if name == "execute_code" {
            if let Some(handle) = request.request_state {
                return self
                    .resume(&state, &key, &handle, request.input_responses)
                    .await;
            }
            if wants_task(&context) {
                return Ok(self.as_task(&state, args, session).await.into());
            }
            match approval_route(&context) {
                Route::InputRequired {
                    client,
                    forms,
                    links,
                } => {
                    let (questions, rx) = mpsc::unbounded_channel();
                    session.approver = Some(Arc::new(InputRequiredApprover {
                        questions,
                        client,
                        forms,
                        links,
                    }));
                    // The execution may outlive this request (paused on a
                    // question): its progress token ends with the request.
                    session.progress = None;
                    let task_state = state.clone();
                    let traced = crate::trace_context::detached("execute_code");
                    let task =
                        tokio::spawn(
                            async move {
                                tools::call(&task_state, "execute_code", args, &session).await
                            }
                            .instrument(traced),
                        );
                    let paused = Paused {
                        owner: key,
                        task,
                        questions: rx,
                        reply: None,
                        expires: expiry(&state),
                    };
                    return self.wait(&state, paused).await;
                }
                Route::Elicit {
                    client,
                    forms,
                    links,
                } => {
                    session.approver = Some(Arc::new(ElicitApprover {
                        peer: context.peer.clone(),
                        client,
                        forms,
                        links,
                    }));
                }
                Route::None(why) => session.no_approver = why,
            }
        }
        let outcome = tools::call(&state, &name, args, &session).await;
        if let Some(sink) = &session.progress {
            // The answer ends the client's interest in this call's progress.
            sink.flush().await;
        }
        let Some(outcome) = outcome else {
            let known: Vec<_> = tools::listed(state.tool_set).map(|t| t.name).collect();
            return Err(ErrorData::invalid_params(
                format!("unknown tool '{name}'; available: {}", known.join(", ")),
                None,
            ));
        };
        if let Answer::Plain(Ok(body)) | Answer::Flagged { body, .. } = &outcome {
            let secrets = &state.config.secrets;
            self.log_level
                .warn_about(
                    context.meta.log_level(),
                    &context.peer,
                    &name,
                    body,
                    |text| secrets.redact(text).into_owned(),
                )
                .await;
        }
        let result = self.result(&name, outcome);
        tracing::debug!(session = self.session, tool = %name, ms = started.elapsed().as_millis() as u64, "tool call");
        Ok(result.into())
    }
}

/// This node as log lines name it: its id in the store's deployment, else
/// the host's name.
fn node_name(state: &AppState) -> &'static str {
    static NODE: OnceLock<String> = OnceLock::new();
    NODE.get_or_init(|| match &state.cluster {
        Some(cluster) => cluster.node_id(),
        None => nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "local".into()),
    })
}

/// How long a task lives: at least 30 minutes, and always longer than the
/// longest execution the config allows (rmcp ends a task at its TTL,
/// finished or not), so a result is kept a while after the longest run.
fn task_ttl_ms(state: &AppState) -> u64 {
    let longest = state
        .config
        .sandbox
        .max_timeout_seconds
        .saturating_mul(1000);
    longest.saturating_mul(2).max(30 * 60 * 1000)
}

/// Whether the client declared the Tasks extension on the 2026-07-28
/// protocol, so a long call may answer with a task. A client that declares
/// it on an older protocol (the Inspector CLI does, on 2025-11-25) reads a
/// `tools/call` answer as the tool's result and never polls: it gets one.
fn wants_task(context: &RequestContext<RoleServer>) -> bool {
    let declared = context
        .client_capabilities()
        .and_then(|c| c.extensions)
        .is_some_and(|e| e.contains_key(TASKS_EXTENSION_ID));
    declared && stateless(context)
}

/// Whether the request speaks the stateless 2026-07-28 protocol (or later).
fn stateless(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28)
}

/// How an approval question reaches the person behind this request.
enum Route {
    /// In an input-required result (2026-07-28).
    InputRequired {
        client: String,
        forms: bool,
        links: bool,
    },
    /// As an `elicitation/create` request on the session.
    Elicit {
        client: String,
        forms: bool,
        links: bool,
    },
    /// Not at all, for this reason.
    None(String),
}

fn approval_route(context: &RequestContext<RoleServer>) -> Route {
    let client = context
        .client_info()
        .map(|i| format!("{} {}", i.name, i.version))
        .unwrap_or_else(|| "unnamed client".into());
    let elicitation = context.client_capabilities().and_then(|c| c.elicitation);
    // An empty `elicitation` object is form mode (the 2025-06-18 shape).
    let forms = elicitation
        .as_ref()
        .is_some_and(|e| e.form.is_some() || e.url.is_none());
    let links = elicitation.as_ref().is_some_and(|e| e.url.is_some());
    if !forms && !links {
        return Route::None(format!(
            "the client ({client}) did not declare the MCP elicitation capability, so nobody can be asked"
        ));
    }
    if stateless(context) {
        Route::InputRequired {
            client,
            forms,
            links,
        }
    } else {
        Route::Elicit {
            client,
            forms,
            links,
        }
    }
}

/// When a paused execution of `state`'s is given up.
fn expiry(state: &AppState) -> std::time::Instant {
    let wait = state.config.policy.approval_timeout_seconds
        + state.config.sandbox.max_timeout_seconds
        + 60;
    std::time::Instant::now() + std::time::Duration::from_secs(wait)
}

impl McpHandler {
    /// Waits for a running execution: its answer, or its next question,
    /// which goes back to the client while the execution stays paused.
    async fn wait(
        &self,
        state: &AppState,
        mut paused: Paused,
    ) -> Result<CallToolResponse, ErrorData> {
        tokio::select! {
            done = &mut paused.task => {
                let outcome = done
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| Answer::Plain(Err(ToolFailure("the execution task failed; run the code again".into()))));
                Ok(self.result("execute_code", outcome).into())
            }
            Some(asked) = paused.questions.recv() => {
                paused.reply = Some(asked.reply);
                let handle = cem_host::gate::new_id();
                let mut requests = InputRequests::new();
                requests.insert(APPROVAL_KEY.to_string(), InputRequest::Elicitation(asked.request));
                if let Ok(mut all) = state.paused.lock() {
                    let now = std::time::Instant::now();
                    all.retain(|_, p| p.expires > now);
                    all.insert(handle.clone(), paused);
                }
                // The client's retry may reach any node: it is sent here.
                if let Some(cluster) = &state.cluster
                    && let Err(e) = cluster.claim(cem_cluster::SessionKind::Paused, &state.tenant, &handle).await
                {
                    tracing::warn!(error = %e, "a paused execution's node was not recorded; its answer must reach this node");
                }
                Ok(InputRequiredResult::new(Some(requests), Some(handle)).into())
            }
        }
    }

    /// The client's retry after an input-required result: the answer goes
    /// to the paused execution, which runs on.
    async fn resume(
        &self,
        state: &AppState,
        key: &str,
        handle: &str,
        responses: Option<InputResponses>,
    ) -> Result<CallToolResponse, ErrorData> {
        let found = state.paused.lock().ok().and_then(|mut all| {
            let owned = all.get(handle).is_some_and(|p| p.owner == key);
            if owned { all.remove(handle) } else { None }
        });
        if let Some(cluster) = &state.cluster {
            let _ = cluster
                .release(cem_cluster::SessionKind::Paused, &state.tenant, handle)
                .await;
        }
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
        self.wait(state, paused).await
    }

    fn result(&self, name: &str, outcome: Answer) -> CallToolResult {
        // The last look before the model: no config credential passes,
        // whichever way it came.
        let secrets = &self.tenants.local().config.secrets;
        let outcome = match outcome {
            Answer::Plain(Ok(mut answer)) => {
                secrets.redact_json(&mut answer);
                Answer::Plain(Ok(answer))
            }
            Answer::Plain(Err(failure)) => Answer::Plain(Err(ToolFailure(
                secrets.redact_credentials(&failure.0).into_owned(),
            ))),
            Answer::Flagged {
                mut body,
                is_error,
                images,
            } => {
                secrets.redact_json(&mut body);
                Answer::Flagged {
                    body,
                    is_error,
                    images,
                }
            }
        };
        match outcome {
            Answer::Plain(Ok(answer)) => CallToolResult::structured(answer),
            Answer::Plain(Err(failure)) => {
                tracing::info!(session = self.session, tool = %name, error = %failure.0, "tool error");
                CallToolResult::structured_error(json!({"success": false, "error": failure.0}))
            }
            Answer::Flagged {
                body,
                is_error,
                images,
            } => {
                // The model reads the lean text; the whole answer (timing,
                // counts, token figures, full table rows) is structured.
                let rows = self.tenants.local().config.answers.table_rows;
                let text = tools::envelope::text(&body, usize::try_from(rows).unwrap_or(30));
                // Images alone are the answer: no empty text before them.
                let mut content = if text.is_empty() && !images.is_empty() {
                    Vec::new()
                } else {
                    vec![ContentBlock::text(text)]
                };
                content.extend(
                    images
                        .into_iter()
                        .map(|i| ContentBlock::image(i.data, i.mime)),
                );
                content.extend(resources::links(&body));
                let mut result = CallToolResult::success(content);
                result.structured_content = Some(body);
                result.is_error = Some(is_error);
                result
            }
        }
    }
}

/// Whether a tool call's answer is a failure, for its span's status.
fn failed(answer: &Result<CallToolResponse, ErrorData>) -> bool {
    match answer {
        Err(_) => true,
        Ok(CallToolResponse::Complete(result)) => result.is_error == Some(true),
        Ok(_) => false,
    }
}
