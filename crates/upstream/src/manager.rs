//! Upstream servers: lazy connections, tool lists, calls.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use cem_config::Redactor;
use cem_config::{Config, ServerConfig, Transport};
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, JsonObject, Tool};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use crate::stdio::{self, ChildTransport};
use cem_metrics::traces;
use rmcp::{RoleClient, ServiceExt};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{Mutex, Notify};
use tracing::Instrument as _;

use crate::handler::Handler;
use crate::sse::SseTransport;
use crate::{UpstreamError, cache};

/// Host variables a stdio server inherits; its own `env` goes on top.
/// Everything else (other servers' credentials included) stays behind.
const INHERITED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TMPDIR",
    "TERM",
    "SHELL",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "SYSTEMROOT",
];

/// How a server is doing, for list_tool_categories and doctor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", content = "error", rename_all = "snake_case")]
pub enum ServerStatus {
    Disabled,
    /// Never started this run (its tools may come from the disk cache).
    NotStarted,
    Connected,
    Failed(String),
}

/// One configured server.
pub struct Upstream {
    pub config: ServerConfig,
    conn: Mutex<Option<RunningService<RoleClient, Handler>>>,
    status: std::sync::Mutex<ServerStatus>,
    stale: Arc<AtomicBool>,
    changed: Arc<Notify>,
    connect_timeout: Duration,
    /// Bumped when the server starts sending a message too big to accept.
    oversized: tokio::sync::watch::Sender<u64>,
    /// Bumped on every new connection and every list_changed notice: a
    /// live list read under another generation is out of date.
    generation: Arc<AtomicU64>,
    /// The tool list this connection's server gave, and its generation.
    live: std::sync::Mutex<Option<(u64, Arc<Vec<Tool>>)>>,
    /// What the server said of itself when it last connected (the
    /// `instructions` of its initialize result).
    instructions: std::sync::Mutex<Option<Arc<str>>>,
    /// Calls in flight that forward their progress.
    progress: crate::handler::ProgressRoutes,
    /// The manager's stdio children, stopped at its shutdown.
    children: crate::stdio::Children,
    /// What the manager does to each stdio command before it starts.
    start_hook: Arc<std::sync::OnceLock<StartHook>>,
    /// The config's secrets, removed from every string that leaves here.
    secrets: Redactor,
}

/// Something done to a stdio server's command before it starts (the
/// server puts a tenant's upstream processes in the tenant's cpu group).
pub type StartHook = Arc<dyn Fn(&mut std::process::Command) + Send + Sync>;

impl Upstream {
    fn set_status(&self, status: ServerStatus) {
        let status = match status {
            ServerStatus::Failed(why) => {
                ServerStatus::Failed(self.secrets.redact(&why).into_owned())
            }
            other => other,
        };
        if let Ok(mut s) = self.status.lock() {
            *s = status;
        }
    }

    pub fn status(&self) -> ServerStatus {
        self.status
            .lock()
            .map(|s| s.clone())
            .unwrap_or(ServerStatus::NotStarted)
    }

    fn name(&self) -> &str {
        &self.config.name
    }

    fn instructions(&self) -> Option<Arc<str>> {
        self.instructions.lock().ok().and_then(|i| i.clone())
    }

    /// A live session, connecting (or reconnecting after a crash) first.
    async fn peer(&self) -> Result<Peer<RoleClient>, UpstreamError> {
        if self.config.disabled {
            return Err(UpstreamError::Disabled(self.name().to_string()));
        }
        let mut conn = self.conn.lock().await;
        if let Some(service) = conn.as_ref() {
            if !service.is_closed() {
                return Ok(service.peer().clone());
            }
            tracing::warn!(
                server = self.name(),
                "upstream connection closed; restarting it"
            );
        }
        *conn = None;
        // The connection outlives the call that opened it, and so do the
        // spans rmcp opens for it: under the call's span they would hold
        // that span (and its trace) open until the connection closes. So
        // they hang from a root of their own, which names the server in
        // rmcp's log lines (exported, it is a trace of its own, as long as
        // the connection).
        let connection = tracing::info_span!(target: "connection", parent: None, "upstream connection", server = %self.name());
        let connect =
            tokio::time::timeout(self.connect_timeout, self.connect().instrument(connection));
        let service = match connect.await {
            Ok(Ok(service)) => service,
            Ok(Err(e)) => {
                self.set_status(ServerStatus::Failed(e.to_string()));
                return Err(e);
            }
            Err(_) => {
                let e = UpstreamError::Timeout {
                    server: self.name().to_string(),
                    what: "the MCP handshake".into(),
                    seconds: self.connect_timeout.as_secs(),
                };
                self.set_status(ServerStatus::Failed(e.to_string()));
                return Err(e);
            }
        };
        let peer = service.peer().clone();
        if let Ok(mut slot) = self.instructions.lock() {
            *slot = peer
                .peer_info()
                .and_then(|info| info.instructions.clone())
                .map(|text| cache::bounded_instructions(&text));
        }
        *conn = Some(service);
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.set_status(ServerStatus::Connected);
        Ok(peer)
    }

    async fn connect(&self) -> Result<RunningService<RoleClient, Handler>, UpstreamError> {
        let name = self.name().to_string();
        let fail = |cause: String| UpstreamError::Connect {
            server: name.clone(),
            cause,
        };
        let handler = Handler {
            stale: self.stale.clone(),
            changed: self.changed.clone(),
            generation: self.generation.clone(),
            progress: self.progress.clone(),
        };
        match &self.config.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).env_clear();
                for key in INHERITED_ENV {
                    if let Ok(v) = std::env::var(key) {
                        cmd.env(key, v);
                    }
                }
                for (k, v) in env {
                    cmd.env(k, v.expose());
                }
                if let Some(dir) = cwd {
                    cmd.current_dir(dir);
                }
                cmd.stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    // Its own process group: stopped with what it starts,
                    // and a Ctrl-C at our terminal reaches us, not it.
                    .process_group(0)
                    .kill_on_drop(true);
                if let Some(hook) = self.start_hook.get() {
                    hook(cmd.as_std_mut());
                }
                let mut child = cmd.spawn().map_err(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => fail(format!(
                        "command '{command}' not found; install it or fix mcpServers.{name}.command"
                    )),
                    _ => fail(format!("cannot start '{command}': {e}")),
                })?;
                let stderr = child.stderr.take();
                let transport =
                    ChildTransport::new(child, self.oversized.clone(), self.children.clone())
                        .map_err(|e| fail(e.to_string()))?;
                if let Some(stderr) = stderr {
                    let server = name.clone();
                    let secrets = self.secrets.clone();
                    tokio::spawn(async move {
                        let mut lines = BufReader::new(stderr).lines();
                        while let Ok(Some(line)) = lines.next_line().await {
                            let line: String = line.chars().take(2000).collect();
                            let line = secrets.redact(&line);
                            tracing::info!(target: "upstream", server = %server, "{line}");
                        }
                    });
                }
                handler
                    .serve(transport)
                    .await
                    .map_err(|e| fail(e.to_string()))
            }
            Transport::Http { url, headers } => {
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                let mut custom = HashMap::new();
                for (k, v) in headers {
                    let value = v.expose();
                    if k.eq_ignore_ascii_case("authorization")
                        && let Some(token) = value.strip_prefix("Bearer ")
                    {
                        config = config.auth_header(token.trim());
                        continue;
                    }
                    let header = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                        .map_err(|e| fail(format!("header {k}: {e}")))?;
                    let value = reqwest::header::HeaderValue::from_str(value)
                        .map_err(|_| fail(format!("header {k} has an invalid value")))?;
                    custom.insert(header, value);
                }
                config = config.custom_headers(custom);
                let transport = StreamableHttpClientTransport::from_config(config);
                handler
                    .serve(transport)
                    .await
                    .map_err(|e| fail(plain_http_error(&e.to_string(), url)))
            }
            Transport::Sse { url, headers } => {
                let transport = SseTransport::connect(url, headers, self.connect_timeout)
                    .await
                    .map_err(|e| fail(plain_http_error(&e.to_string(), url)))?;
                handler
                    .serve(transport)
                    .await
                    .map_err(|e| fail(plain_http_error(&e.to_string(), url)))
            }
        }
    }

    /// Forgets the connection (after a crash or on shutdown).
    async fn drop_connection(&self) {
        // A connection being made holds the lock through its handshake,
        // which a hanging server never ends: its child is stopped by
        // `Children::stop_all` instead.
        let Ok(mut conn) = tokio::time::timeout(Duration::from_secs(1), self.conn.lock()).await
        else {
            return;
        };
        if let Some(service) = conn.take() {
            let _ = service.cancel().await;
        }
    }
}

/// All configured servers.
pub struct Manager {
    servers: BTreeMap<String, Arc<Upstream>>,
    /// Tool lists already read (from disk or the server) this run.
    known: std::sync::Mutex<HashMap<String, Arc<Vec<Tool>>>>,
    cache_dir: PathBuf,
    changed: Arc<Notify>,
    call_timeout: Duration,
    children: crate::stdio::Children,
    start_hook: Arc<std::sync::OnceLock<StartHook>>,
    /// The config's secrets: out of every error, status, tool list and
    /// result this manager hands on (see [`cem_config::Redactor`]).
    secrets: Redactor,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("servers", &self.servers.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Manager {
    /// `cache_dir` holds the tool-list cache; timeouts come from the
    /// `upstream` section (a server's `timeout_seconds` overrides the call one).
    pub fn new(config: &Config, cache_dir: PathBuf) -> Self {
        let call_timeout = Duration::from_secs(config.upstream.timeout_seconds);
        let connect_timeout = Duration::from_secs(config.upstream.connect_timeout_seconds);
        let changed = Arc::new(Notify::new());
        let children = crate::stdio::Children::default();
        let start_hook = Arc::new(std::sync::OnceLock::new());
        let servers = config
            .servers
            .values()
            .map(|s| {
                let status = if s.disabled {
                    ServerStatus::Disabled
                } else {
                    ServerStatus::NotStarted
                };
                let upstream = Upstream {
                    config: s.clone(),
                    conn: Mutex::new(None),
                    status: std::sync::Mutex::new(status),
                    stale: Arc::new(AtomicBool::new(false)),
                    changed: changed.clone(),
                    connect_timeout,
                    oversized: tokio::sync::watch::Sender::new(0),
                    generation: Arc::new(AtomicU64::new(0)),
                    live: std::sync::Mutex::new(None),
                    instructions: std::sync::Mutex::new(None),
                    progress: Default::default(),
                    children: children.clone(),
                    start_hook: start_hook.clone(),
                    secrets: config.secrets.clone(),
                };
                (s.name.clone(), Arc::new(upstream))
            })
            .collect();
        Manager {
            servers,
            known: std::sync::Mutex::new(HashMap::new()),
            cache_dir,
            changed,
            call_timeout,
            children,
            start_hook,
            secrets: config.secrets.clone(),
        }
    }

    /// Runs `hook` on every stdio server's command before it starts, from
    /// now on (a second hook is ignored: one owner decides).
    pub fn start_commands_with(&self, hook: StartHook) {
        let _ = self.start_hook.set(hook);
    }

    pub fn servers(&self) -> impl Iterator<Item = &Arc<Upstream>> {
        self.servers.values()
    }

    /// Woken when any server says its tool list changed.
    pub fn changed(&self) -> Arc<Notify> {
        self.changed.clone()
    }

    /// The server called `name` (also with `-` and `_` swapped).
    pub fn get(&self, name: &str) -> Result<&Arc<Upstream>, UpstreamError> {
        self.servers
            .get(name)
            .or_else(|| {
                let norm = |s: &str| s.replace('-', "_").to_ascii_lowercase();
                self.servers
                    .values()
                    .find(|u| norm(&u.config.name) == norm(name))
            })
            .ok_or_else(|| UpstreamError::UnknownServer(name.to_string()))
    }

    /// The server's tools: from the disk cache unless `refresh`, or unless
    /// the server said its list changed.
    pub async fn tools(&self, name: &str, refresh: bool) -> Result<Vec<Tool>, UpstreamError> {
        self.read_tools(name, refresh)
            .await
            .map_err(|e| e.redacted(&self.secrets))
    }

    async fn read_tools(&self, name: &str, refresh: bool) -> Result<Vec<Tool>, UpstreamError> {
        let upstream = self.get(name)?;
        if upstream.config.disabled {
            return Err(UpstreamError::Disabled(upstream.config.name.clone()));
        }
        let stale = upstream.stale.swap(false, Ordering::SeqCst);
        let key = upstream.config.name.clone();
        if !refresh && !stale {
            if let Some(tools) = self.known.lock().ok().and_then(|k| k.get(&key).cloned()) {
                return Ok(tools.as_ref().clone());
            }
            if let Some(tools) = cache::load(&self.cache_dir, &upstream.config) {
                let tools = self.clean_tools(tools);
                if let Ok(mut k) = self.known.lock() {
                    k.insert(key, Arc::new(tools.clone()));
                }
                return Ok(tools);
            }
        }
        let peer = upstream.peer().await?;
        let tools =
            match tokio::time::timeout(self.timeout_for(upstream), peer.list_all_tools()).await {
                Ok(Ok(tools)) => self.clean_tools(tools),
                Ok(Err(e)) => {
                    let e = UpstreamError::Call {
                        server: name.to_string(),
                        cause: format!("tools/list failed: {e}"),
                    };
                    upstream.set_status(ServerStatus::Failed(e.to_string()));
                    return Err(e);
                }
                Err(_) => {
                    return Err(UpstreamError::Timeout {
                        server: name.to_string(),
                        what: "tools/list".into(),
                        seconds: self.timeout_for(upstream).as_secs(),
                    });
                }
            };
        self.remember(upstream, Arc::new(tools.clone()));
        Ok(tools)
    }

    /// Keeps a list the server just gave: in memory, and on disk with the
    /// server's instructions.
    fn remember(&self, upstream: &Upstream, tools: Arc<Vec<Tool>>) {
        let name = upstream.name();
        if let Err(e) = cache::store(
            &self.cache_dir,
            &upstream.config,
            &tools,
            upstream.instructions().as_deref(),
        ) {
            tracing::warn!(server = name, error = %e, "cannot write the tool-list cache");
        }
        if let Ok(mut k) = self.known.lock() {
            k.insert(name.to_string(), tools);
        }
    }

    /// The tools the server lists on its current connection (connecting
    /// first if needed), never a cache: what a call is about to reach.
    /// Listed once per connection and again after the server says its list
    /// changed. The known list and the disk cache are updated with it.
    pub async fn live_tools(&self, name: &str) -> Result<Arc<Vec<Tool>>, UpstreamError> {
        self.read_live_tools(name)
            .await
            .map_err(|e| e.redacted(&self.secrets))
    }

    async fn read_live_tools(&self, name: &str) -> Result<Arc<Vec<Tool>>, UpstreamError> {
        let upstream = self.get(name)?;
        let peer = upstream.peer().await?;
        let generation = upstream.generation.load(Ordering::SeqCst);
        if let Ok(live) = upstream.live.lock()
            && let Some((g, tools)) = live.as_ref()
            && *g == generation
        {
            return Ok(tools.clone());
        }
        let limit = self.timeout_for(upstream);
        let tools = match tokio::time::timeout(limit, peer.list_all_tools()).await {
            Ok(Ok(tools)) => Arc::new(self.clean_tools(tools)),
            Ok(Err(e)) => {
                return Err(UpstreamError::Call {
                    server: name.to_string(),
                    cause: format!("tools/list failed: {e}"),
                });
            }
            Err(_) => {
                return Err(UpstreamError::Timeout {
                    server: name.to_string(),
                    what: "tools/list".into(),
                    seconds: limit.as_secs(),
                });
            }
        };
        if let Ok(mut live) = upstream.live.lock() {
            *live = Some((generation, tools.clone()));
        }
        let key = upstream.config.name.clone();
        let known_differs = self
            .known
            .lock()
            .ok()
            .is_some_and(|k| k.get(&key).is_none_or(|t| t.as_ref() != tools.as_ref()));
        if known_differs {
            self.remember(upstream, tools.clone());
            self.changed.notify_waiters();
        }
        Ok(tools)
    }

    /// A server's tools from the disk cache only (never connects).
    /// The tools already read this run (from the server or the disk
    /// cache), asking no one.
    pub fn known_tools(&self, name: &str) -> Option<Vec<Tool>> {
        let upstream = self.get(name).ok()?;
        let known = self.known.lock().ok()?;
        known.get(&upstream.config.name).map(|t| t.as_ref().clone())
    }

    pub fn cached_tools(&self, name: &str) -> Option<Vec<Tool>> {
        let upstream = self.get(name).ok()?;
        cache::load(&self.cache_dir, &upstream.config).map(|t| self.clean_tools(t))
    }

    /// A tool list without the config's credentials (a server may put its
    /// key in a description): lists are small and read once per connection.
    fn clean_tools(&self, tools: Vec<Tool>) -> Vec<Tool> {
        if self.secrets.is_empty() {
            return tools;
        }
        let Ok(mut value) = serde_json::to_value(&tools) else {
            return tools;
        };
        let before = value.clone();
        self.secrets.redact_json(&mut value);
        if value == before {
            return tools;
        }
        // Only strings changed, so the list reads back; were it not to, no
        // list is safer than one with a credential in it, and the log says so.
        serde_json::from_value(value).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "a tool list held a configured credential and could not be cleaned; its tools are hidden");
            Vec::new()
        })
    }

    /// What the server says of itself (its `instructions`), from this
    /// run's connection, else from the disk cache; asks no one.
    pub fn instructions(&self, name: &str) -> Option<Arc<str>> {
        let upstream = self.get(name).ok()?;
        upstream
            .instructions()
            .or_else(|| cache::load_instructions(&self.cache_dir, &upstream.config).map(Arc::from))
            .map(|text| match self.secrets.redact_credentials(&text) {
                std::borrow::Cow::Borrowed(_) => text,
                std::borrow::Cow::Owned(clean) => Arc::from(clean),
            })
    }

    /// Every enabled server's tools, fetched concurrently.
    pub async fn all_tools(
        &self,
        refresh: bool,
    ) -> Vec<(String, Result<Vec<Tool>, UpstreamError>)> {
        let names: Vec<String> = self
            .servers
            .values()
            .filter(|u| !u.config.disabled)
            .map(|u| u.config.name.clone())
            .collect();
        let futures = names.iter().map(|n| self.tools(n, refresh));
        let results = futures::future::join_all(futures).await;
        names.into_iter().zip(results).collect()
    }

    /// Calls `tool` on `server`. A closed (crashed) connection is dropped so
    /// the next use restarts the server.
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Option<JsonObject>,
        timeout: Option<Duration>,
    ) -> Result<CallToolResult, UpstreamError> {
        self.call_with_progress(server, tool, arguments, timeout, None)
            .await
    }

    /// Like [`Manager::call`], handing the server's progress notifications
    /// for this call to `progress`. Dropping the returned future before it
    /// completes sends the server `notifications/cancelled` (rmcp cancels
    /// a request dropped in flight).
    pub async fn call_with_progress(
        &self,
        server: &str,
        tool: &str,
        arguments: Option<JsonObject>,
        timeout: Option<Duration>,
        progress: Option<crate::handler::ProgressFn>,
    ) -> Result<CallToolResult, UpstreamError> {
        // A client span in traces: which server and tool, how it ended.
        let span = tracing::info_span!(
            "upstream call",
            server,
            tool,
            otel.name = tracing::field::Empty,
            otel.kind = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        traces::name(&span, || format!("upstream {server}.{tool}"));
        traces::kind(&span, traces::Kind::Client);
        let answer = self
            .call_upstream(server, tool, arguments, timeout, progress)
            .instrument(span.clone())
            .await;
        if answer.as_ref().map_or(true, |r| r.is_error == Some(true)) {
            traces::failed(&span);
        }
        match answer {
            Ok(mut result) => {
                crate::redact::call_result(&self.secrets, &mut result);
                Ok(result)
            }
            Err(e) => Err(e.redacted(&self.secrets)),
        }
    }

    async fn call_upstream(
        &self,
        server: &str,
        tool: &str,
        arguments: Option<JsonObject>,
        timeout: Option<Duration>,
        progress: Option<crate::handler::ProgressFn>,
    ) -> Result<CallToolResult, UpstreamError> {
        let upstream = self.get(server)?;
        let name = upstream.config.name.clone();
        let peer = upstream.peer().await?;
        let mut params = CallToolRequestParams::new(tool.to_string());
        if let Some(args) = arguments {
            params = params.with_arguments(args);
        }
        let limit = timeout.unwrap_or_else(|| self.timeout_for(upstream));
        let mut oversized = upstream.oversized.subscribe();
        oversized.mark_unchanged();
        let call = async {
            tokio::select! {
                answer = call_tool(&peer, &upstream.progress, params, progress) => Some(answer),
                _ = oversized.changed() => None,
            }
        };
        let answer = match tokio::time::timeout(limit, call).await {
            Ok(Some(answer)) => Ok(answer),
            Ok(None) => {
                return Err(UpstreamError::Call {
                    server: name,
                    cause: format!(
                        "the server sent a message over {} MiB while '{tool}' was running (most likely its answer), which is refused; ask the tool for less (filters, pages)",
                        stdio::MAX_MESSAGE_BYTES >> 20
                    ),
                });
            }
            Err(elapsed) => Err(elapsed),
        };
        match answer {
            Ok(Ok(CallToolResponse::Complete(result))) => Ok(result),
            Ok(Ok(_)) => Err(UpstreamError::Call {
                server: name,
                cause: format!("tool '{tool}' asked for interactive input, which code cannot give"),
            }),
            Ok(Err(e)) => {
                // rmcp may report the closed transport before it marks the
                // service closed; either means the server is gone.
                let text = e.to_string().to_ascii_lowercase();
                let closed = text.contains("transport closed")
                    || text.contains("connection closed")
                    || upstream
                        .conn
                        .lock()
                        .await
                        .as_ref()
                        .is_none_or(|s| s.is_closed());
                if closed {
                    upstream.drop_connection().await;
                    upstream.set_status(ServerStatus::Failed(format!("connection lost: {e}")));
                    Err(UpstreamError::Call {
                        server: name,
                        cause: format!(
                            "the server exited or disconnected during the call ({e}); it is restarted on next use"
                        ),
                    })
                } else {
                    Err(UpstreamError::Call {
                        server: name,
                        cause: e.to_string(),
                    })
                }
            }
            Err(_) => Err(UpstreamError::Timeout {
                server: name,
                what: format!("tools/call {tool}"),
                seconds: limit.as_secs(),
            }),
        }
    }

    fn timeout_for(&self, upstream: &Upstream) -> Duration {
        upstream
            .config
            .timeout_seconds
            .map(Duration::from_secs)
            .unwrap_or(self.call_timeout)
    }

    /// Forgets every cached tool list.
    pub fn clear_cache(&self) {
        if let Ok(mut k) = self.known.lock() {
            k.clear();
        }
        cache::clear(&self.cache_dir);
    }

    /// The name in `server`'s known tool list that `pick` chooses, without
    /// copying the list; `None` when no list is known yet (or `pick` finds
    /// nothing). Memory only: never connects.
    pub fn find_known_tool(&self, server: &str, pick: impl Fn(&str) -> bool) -> Option<String> {
        let known = self.known.lock().ok()?;
        known
            .get(server)?
            .iter()
            .find(|t| pick(&t.name))
            .map(|t| t.name.to_string())
    }

    /// Closes every connection (stdio servers are stopped).
    pub async fn shutdown(&self) {
        // All at once: a server that ignores the end of its input holds
        // its own shutdown for a few seconds, not everyone's.
        futures::future::join_all(self.servers.values().map(|u| u.drop_connection())).await;
        // A server still in its handshake has no connection to drop.
        self.children.stop_all().await;
    }
}

/// Turns a transport error chain into words: "connection refused" beats
/// three layers of type names.
fn plain_http_error(raw: &str, url: &url::Url) -> String {
    let lower = raw.to_ascii_lowercase();
    if lower.contains("connection refused") || lower.contains("error sending request") {
        format!(
            "nothing is listening at {url} (connection refused); start the server or fix its url"
        )
    } else if lower.contains("dns error")
        || lower.contains("failed to lookup")
        || lower.contains("name or service not known")
    {
        format!("cannot resolve the host of {url}; check the url")
    } else if lower.contains("timed out") || lower.contains("timeout") {
        format!("{url} did not answer in time")
    } else if lower.contains("401") || lower.contains("unauthorized") {
        format!("{url} refused our credentials (401); check the server's headers in the config")
    } else {
        // Drop rmcp's internal type names ("[rmcp::transport::...]").
        let mut out = String::new();
        let mut depth = 0;
        for c in raw.chars() {
            match c {
                '[' => depth += 1,
                ']' if depth > 0 => depth -= 1,
                _ if depth == 0 => out.push(c),
                _ => {}
            }
        }
        out.split_whitespace().collect::<Vec<_>>().join(" ")
    }
}

/// One tools/call. Without `progress`, rmcp's own call (cancelled on the
/// server when dropped). With it, the request is sent first so its
/// progress token (rmcp picks it) can be routed to `progress`; then a
/// dropped call is cancelled on the server by [`CancelOnDrop`].
async fn call_tool(
    peer: &rmcp::service::Peer<rmcp::RoleClient>,
    routes: &crate::handler::ProgressRoutes,
    params: CallToolRequestParams,
    progress: Option<crate::handler::ProgressFn>,
) -> Result<CallToolResponse, rmcp::service::ServiceError> {
    use rmcp::model::{CallToolRequest, ClientRequest, ServerResult};
    let Some(progress) = progress else {
        return peer.call_tool_once(params).await;
    };
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = peer
        .send_cancellable_request(request, rmcp::service::PeerRequestOptions::no_options())
        .await?;
    let _route = ProgressRoute::new(
        routes,
        crate::handler::progress_key(&handle.progress_token),
        progress,
    );
    let mut guard = CancelOnDrop {
        peer: peer.clone(),
        id: Some(handle.id.clone()),
    };
    let answer = handle.await_response().await;
    guard.id = None;
    match answer? {
        ServerResult::CallToolResult(result) => Ok(CallToolResponse::Complete(result)),
        ServerResult::InputRequiredResult(result) => Ok(CallToolResponse::InputRequired(result)),
        ServerResult::CreateTaskResult(result) => Ok(CallToolResponse::Task(result)),
        _ => Err(rmcp::service::ServiceError::UnexpectedResponse),
    }
}

/// Tells the server a request it is working on was given up.
struct CancelOnDrop {
    peer: rmcp::service::Peer<rmcp::RoleClient>,
    id: Option<rmcp::model::RequestId>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let (Some(id), Ok(runtime)) = (self.id.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let peer = self.peer.clone();
        runtime.spawn(async move {
            let reason = Some("the execution that made this call was cancelled".to_string());
            let _ = peer
                .notify_cancelled(rmcp::model::CancelledNotificationParam::new(
                    Some(id),
                    reason,
                ))
                .await;
        });
    }
}

/// A call's entry in the progress routes, removed when the call ends.
struct ProgressRoute {
    routes: crate::handler::ProgressRoutes,
    key: String,
}

impl ProgressRoute {
    fn new(
        routes: &crate::handler::ProgressRoutes,
        key: String,
        route: crate::handler::ProgressFn,
    ) -> Self {
        if let Ok(mut r) = routes.lock() {
            r.insert(key.clone(), route);
        }
        Self {
            routes: routes.clone(),
            key,
        }
    }
}

impl Drop for ProgressRoute {
    fn drop(&mut self) {
        if let Ok(mut r) = self.routes.lock() {
            r.remove(&self.key);
        }
    }
}
