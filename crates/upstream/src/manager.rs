//! Upstream servers: lazy connections, tool lists, calls.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use cem_config::Redactor;
use cem_config::UpstreamAuth;
use cem_config::{Config, ServerConfig, Transport};
use cem_signin::Credential;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, JsonObject, Tool};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::auth::AuthClient;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use crate::stdio::{self, ChildTransport};
use cem_metrics::traces;
use rmcp::{RoleClient, ServiceExt};
use serde::Serialize;
use tokio::sync::{Mutex, Notify};
use tracing::Instrument as _;

use crate::handler::Handler;
use crate::sse::SseTransport;
use crate::tenancy::Tenancy;
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
    /// Its person has not signed in to it (or must sign in again).
    SignIn,
    Failed(String),
}

/// One configured server.
pub struct Upstream {
    pub config: ServerConfig,
    conn: Mutex<Option<RunningService<RoleClient, Handler>>>,
    status: std::sync::Mutex<ServerStatus>,
    /// The server's list_changed notices, coalesced (see [`crate::relist`]).
    notices: crate::relist::Notices,
    /// Whether the task that re-lists on notices runs.
    relisting: AtomicBool,
    /// The lists read so far, shared with the manager.
    pub(crate) lists: Arc<Lists>,
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
    /// Whose processes the manager starts (unset: the CLI's, as configured).
    tenancy: Arc<std::sync::OnceLock<Tenancy>>,
    /// The config's secrets, removed from every string that leaves here.
    secrets: Redactor,
    /// Its stderr budget, kept across restarts (a server made to crash does
    /// not get a fresh one each time).
    stderr_gate: crate::stderr::SharedGate,
    /// Where people's upstream credentials are (unset: no sign-in).
    signin: Arc<std::sync::OnceLock<Arc<cem_signin::SignIn>>>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        // Its re-listing task waits for a notice: this one ends it.
        self.notices.notice();
    }
}

/// The bounds on what one server may send (the `upstream` section).
#[derive(Debug, Clone, Copy)]
struct Limits {
    stderr: crate::stderr::Budget,
}

impl Limits {
    fn from_config(config: &Config) -> Self {
        Self {
            stderr: crate::stderr::Budget {
                lines_per_second: config.upstream.stderr_lines_per_second,
                max_bytes: config.upstream.stderr_max_bytes,
            },
        }
    }
}

/// Something done to a stdio server's command before it starts (the
/// server puts a tenant's upstream processes in the tenant's cpu group).
pub type StartHook = Arc<dyn Fn(&mut std::process::Command) + Send + Sync>;

impl Upstream {
    pub(crate) fn set_status(&self, status: ServerStatus) {
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
    pub(crate) async fn peer(&self) -> Result<Peer<RoleClient>, UpstreamError> {
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
        // rmcp keeps up to 512 responses per connection (every page of a
        // listing among them, kept stale to serve on errors); the manager
        // keeps the lists itself, bounded.
        peer.set_response_cache_config(rmcp::ClientCacheConfig::disabled())
            .await;
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
            notices: self.notices.clone(),
            generation: self.generation.clone(),
            progress: self.progress.clone(),
        };
        match &self.config.transport {
            Transport::Stdio { .. } => {
                let start = match self.tenancy.get() {
                    Some(tenancy) => tenancy.start(&self.config),
                    None => crate::tenancy::Start::as_configured(&self.config),
                }
                .map_err(&fail)?;
                let command = start.command.as_str();
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(&start.args).env_clear();
                for key in INHERITED_ENV {
                    if let Ok(v) = std::env::var(key)
                        && !start.unset.contains(key)
                    {
                        cmd.env(key, v);
                    }
                }
                for (k, v) in &start.env {
                    cmd.env(k, v);
                }
                if let Some(dir) = &start.cwd {
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
                if let Some(writable) = &start.writable {
                    tracing::debug!(server = %name, ?writable, unreadable = ?start.unreadable, "a tenant's process, confined");
                    crate::confine::confine(cmd.as_std_mut(), writable, &start.unreadable)
                        .map_err(&fail)?;
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
                    tokio::spawn(crate::stderr::forward(
                        stderr,
                        name.clone(),
                        self.secrets.clone(),
                        self.stderr_gate.clone(),
                    ));
                }
                handler
                    .serve(transport)
                    .await
                    .map_err(|e| fail(e.to_string()))
            }
            Transport::Http { url, headers } => {
                let credential = self.credential().await?;
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
                let served = match credential {
                    Some(Credential::OAuth(manager)) => {
                        config = config.custom_headers(custom);
                        // Renewed now if due: a renewal refused for good
                        // says so here, where AuthClient would send no
                        // token and read back a bare 401.
                        if let Err(e) = manager.get_access_token().await
                            && let Some(ended) = crate::signed::ended_by(&e)
                        {
                            return Err(self.needs_sign_in(false, None, ended.to_string()));
                        }
                        // rmcp's AuthClient puts the person's token on each
                        // request and refreshes it as it runs out.
                        let client = AuthClient::new(reqwest::Client::default(), *manager);
                        handler
                            .serve(StreamableHttpClientTransport::with_client(client, config))
                            .await
                    }
                    other => {
                        if let Some(Credential::ApiKey { header, value }) = other {
                            let name = reqwest::header::HeaderName::from_bytes(header.as_bytes())
                                .map_err(|e| fail(format!("header {header}: {e}")))?;
                            let value =
                                reqwest::header::HeaderValue::from_str(&value).map_err(|_| {
                                    fail(format!(
                                        "the key for header {header} is not a header value"
                                    ))
                                })?;
                            custom.insert(name, value);
                        }
                        config = config.custom_headers(custom);
                        handler
                            .serve(StreamableHttpClientTransport::from_config(config))
                            .await
                    }
                };
                served.map_err(|e| {
                    self.refused(&e)
                        .unwrap_or_else(|| fail(plain_http_error(&e.to_string(), url)))
                })
            }
            Transport::Sse { url, headers } => {
                let credential = match self.credential().await? {
                    Some(Credential::OAuth(manager)) => {
                        let token = manager.get_access_token().await.map_err(|e| {
                            self.needs_sign_in(
                                false,
                                None,
                                format!("its token could not be renewed: {e}"),
                            )
                        })?;
                        Some(("Authorization".to_string(), format!("Bearer {token}")))
                    }
                    Some(Credential::ApiKey { header, value }) => Some((header, value)),
                    None => None,
                };
                let transport =
                    SseTransport::connect(url, headers, credential, self.connect_timeout)
                        .await
                        .map_err(|e| {
                            self.refused(&e)
                                .unwrap_or_else(|| fail(plain_http_error(&e.to_string(), url)))
                        })?;
                handler
                    .serve(transport)
                    .await
                    .map_err(|e| fail(plain_http_error(&e.to_string(), url)))
            }
        }
    }

    /// Whose credential this connection carries, and the credential:
    /// None for a server that takes no sign-in or nobody signed in to.
    async fn credential(&self) -> Result<Option<Credential>, UpstreamError> {
        let Some(signin) = self.signin.get() else {
            return Ok(None);
        };
        if self.config.auth == UpstreamAuth::None {
            return Ok(None);
        }
        let id = self.credential_id();
        signin
            .credential(&id, &self.config)
            .await
            .map_err(|e| UpstreamError::Connect {
                server: self.name().to_string(),
                cause: e.to_string(),
            })
    }

    /// Whose credential this server's calls carry here.
    pub fn credential_id(&self) -> cem_signin::CredentialId {
        let tenant = self
            .tenancy
            .get()
            .map_or(cem_signin::OPERATOR, |t| t.tenant.as_str());
        cem_signin::SignIn::id_for(&self.config, tenant)
    }

    /// The sign-in `e` asks for, when this server takes sign-ins.
    pub(crate) fn refused(&self, e: &(dyn std::error::Error + 'static)) -> Option<UpstreamError> {
        if self.config.auth == UpstreamAuth::None || self.signin.get().is_none() {
            return None;
        }
        let challenge = crate::signed::challenge_in(e)?;
        let why = match challenge.ended {
            Some(ended) => ended,
            None if challenge.step_up => "it answered 403 insufficient_scope",
            None => "it answered 401",
        };
        Some(self.needs_sign_in(challenge.step_up, challenge.header, why.to_string()))
    }

    fn needs_sign_in(
        &self,
        step_up: bool,
        challenge: Option<String>,
        why: String,
    ) -> UpstreamError {
        let e = UpstreamError::SignInRequired {
            server: self.name().to_string(),
            challenge,
            step_up,
            why,
        };
        self.set_status(ServerStatus::SignIn);
        e
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
    lists: Arc<Lists>,
    children: crate::stdio::Children,
    start_hook: Arc<std::sync::OnceLock<StartHook>>,
    tenancy: Arc<std::sync::OnceLock<Tenancy>>,
    /// The manager that runs the `"shared": true` servers for everyone
    /// (unset: this one runs them).
    shared_with: std::sync::OnceLock<Arc<Manager>>,
    /// The config's secrets: out of every error, status, tool list and
    /// result this manager hands on (see [`cem_config::Redactor`]).
    secrets: Redactor,
    signin: Arc<std::sync::OnceLock<Arc<cem_signin::SignIn>>>,
}

/// The tool lists read so far, shared by the manager and each server's
/// re-listing task.
pub(crate) struct Lists {
    /// Tool lists already read (from disk or the server) this run.
    known: std::sync::Mutex<HashMap<String, Arc<Vec<Tool>>>>,
    cache_dir: PathBuf,
    /// The tenant's digest, for the lists of servers each person signs in
    /// to (a person's list may differ from another's; unset: the local
    /// user's, kept with the rest).
    identity: std::sync::OnceLock<String>,
    /// Woken when a server's list, read again, differs from the one known.
    changed: Arc<Notify>,
    secrets: Redactor,
    caps: crate::listing::ListCaps,
    call_timeout: Duration,
}

impl Lists {
    /// Where `server`'s list is cached: apart for each person where each
    /// person signs in.
    fn dir_for(&self, server: &ServerConfig) -> PathBuf {
        let personal = !matches!(server.transport, Transport::Stdio { .. })
            && server.auth == UpstreamAuth::PerPerson;
        match self.identity.get() {
            Some(identity) if personal => self.cache_dir.join("people").join(identity),
            _ => self.cache_dir.clone(),
        }
    }

    /// Keeps a list the server just gave: in memory, and on disk with the
    /// server's instructions.
    fn remember(&self, upstream: &Upstream, tools: Arc<Vec<Tool>>) {
        let name = upstream.name();
        if let Err(e) = cache::store(
            &self.dir_for(&upstream.config),
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

    /// Whether `tools` differ from the list known for `server`.
    fn differs(&self, server: &str, tools: &[Tool]) -> bool {
        self.known
            .lock()
            .ok()
            .is_some_and(|k| k.get(server).is_none_or(|t| t.as_slice() != tools))
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

    fn timeout_for(&self, upstream: &Upstream) -> Duration {
        upstream
            .config
            .timeout_seconds
            .map(Duration::from_secs)
            .unwrap_or(self.call_timeout)
    }

    /// Lists `upstream`'s tools on `peer`, within the caps and the call
    /// timeout; a server over a cap is marked failed with the reason.
    pub(crate) async fn list(
        &self,
        upstream: &Upstream,
        peer: &Peer<RoleClient>,
    ) -> Result<Vec<Tool>, UpstreamError> {
        let name = upstream.name();
        let limit = self.timeout_for(upstream);
        match tokio::time::timeout(limit, crate::listing::list_tools(peer, self.caps)).await {
            Ok(Ok(tools)) => Ok(self.clean_tools(tools)),
            Ok(Err(crate::listing::ListError::Service(e))) => {
                if let Some(refused) = upstream.refused(&e) {
                    upstream.drop_connection().await;
                    return Err(refused);
                }
                Err(UpstreamError::Call {
                    server: name.to_string(),
                    cause: format!("tools/list failed: {e}"),
                })
            }
            Ok(Err(crate::listing::ListError::OverCap(why))) => {
                let e = UpstreamError::Call {
                    server: name.to_string(),
                    cause: format!("its tools are refused: {why}"),
                };
                upstream.set_status(ServerStatus::Failed(e.to_string()));
                Err(e)
            }
            Err(_) => Err(UpstreamError::Timeout {
                server: name.to_string(),
                what: "tools/list".into(),
                seconds: limit.as_secs(),
            }),
        }
    }

    /// Reads `upstream`'s list again after it said it changed; when it
    /// differs from the one known, keeps it and wakes the catalogs.
    pub(crate) async fn relist(&self, upstream: &Upstream) {
        let peer = match upstream.peer().await {
            Ok(peer) => peer,
            Err(e) => {
                tracing::debug!(server = upstream.name(), error = %e, "cannot list a changed server again");
                return;
            }
        };
        match self.list(upstream, &peer).await {
            Ok(tools) if self.differs(upstream.name(), &tools) => {
                self.remember(upstream, Arc::new(tools));
                self.changed.notify_waiters();
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(server = upstream.name(), error = %e, "a server that said its tools changed could not be listed again")
            }
        }
    }
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
        let lists = Arc::new(Lists {
            known: std::sync::Mutex::new(HashMap::new()),
            cache_dir,
            identity: std::sync::OnceLock::new(),
            changed: Arc::new(Notify::new()),
            secrets: config.secrets.clone(),
            caps: crate::listing::ListCaps {
                max_tools: config.upstream.max_tools,
                max_pages: config.upstream.max_list_pages,
                max_bytes: config.upstream.max_list_bytes,
            },
            call_timeout,
        });
        let interval = Duration::from_secs(config.upstream.list_changed_interval_seconds);
        let children = crate::stdio::Children::default();
        let start_hook = Arc::new(std::sync::OnceLock::new());
        let tenancy = Arc::new(std::sync::OnceLock::new());
        let signin = Arc::new(std::sync::OnceLock::new());
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
                    notices: crate::relist::Notices::new(interval),
                    relisting: AtomicBool::new(false),
                    lists: lists.clone(),
                    connect_timeout,
                    oversized: tokio::sync::watch::Sender::new(0),
                    generation: Arc::new(AtomicU64::new(0)),
                    live: std::sync::Mutex::new(None),
                    instructions: std::sync::Mutex::new(None),
                    progress: Default::default(),
                    children: children.clone(),
                    start_hook: start_hook.clone(),
                    tenancy: tenancy.clone(),
                    secrets: config.secrets.clone(),
                    stderr_gate: crate::stderr::SharedGate::new(Limits::from_config(config).stderr),
                    signin: signin.clone(),
                };
                (s.name.clone(), Arc::new(upstream))
            })
            .collect();
        Manager {
            servers,
            lists,
            children,
            start_hook,
            tenancy,
            shared_with: std::sync::OnceLock::new(),
            secrets: config.secrets.clone(),
            signin,
        }
    }

    /// Gives http and sse servers that ask for sign-in the credentials in
    /// `signin` (before any connects; a second call is ignored).
    pub fn sign_in_with(&self, signin: Arc<cem_signin::SignIn>) {
        let _ = self.signin.set(signin);
    }

    /// Where this manager's servers find their people's credentials.
    pub fn signin(&self) -> Option<&Arc<cem_signin::SignIn>> {
        self.signin.get()
    }

    /// Drops `server`'s connection (after its person signed in, out or
    /// again), so the next use connects with the credential held now.
    pub async fn reconnect(&self, server: &str) {
        if let Ok(upstream) = self.get(server) {
            upstream.drop_connection().await;
            upstream.set_status(ServerStatus::NotStarted);
        }
    }

    /// Starts every stdio server's processes as `tenancy`'s (before any
    /// starts; a second call is ignored: one owner decides).
    pub fn serve_tenant(&self, tenancy: Tenancy) {
        if !tenancy.local {
            let _ = self
                .lists
                .identity
                .set(cem_config::tenant_digest(&tenancy.tenant));
        }
        let _ = self.tenancy.set(tenancy);
    }

    /// Whose processes this manager starts, if it was told.
    pub fn tenancy(&self) -> Option<&Tenancy> {
        self.tenancy.get()
    }

    /// Hands calls of `"shared": true` servers to `manager` (the local
    /// tenant's), so they have one process for everyone.
    pub fn share_with(&self, manager: Arc<Manager>) {
        let _ = self.shared_with.set(manager);
    }

    /// The manager that runs `upstream` for this one: another for a shared
    /// server, when one was given.
    fn runner_of(&self, upstream: &Upstream) -> Option<&Arc<Manager>> {
        upstream
            .config
            .shared
            .then(|| self.shared_with.get())
            .flatten()
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
        self.lists.changed.clone()
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

    /// The server's tools: from memory or the disk cache unless `refresh`
    /// (a server that says its list changed is listed again in the
    /// background, at most once per `upstream.list_changed_interval_seconds`).
    pub async fn tools(&self, name: &str, refresh: bool) -> Result<Vec<Tool>, UpstreamError> {
        self.read_tools(name, refresh)
            .await
            .map_err(|e| e.redacted(&self.secrets))
    }

    async fn read_tools(&self, name: &str, refresh: bool) -> Result<Vec<Tool>, UpstreamError> {
        let upstream = self.get(name)?;
        if let Some(runner) = self.runner_of(upstream) {
            return Box::pin(runner.read_tools(name, refresh)).await;
        }
        if upstream.config.disabled {
            return Err(UpstreamError::Disabled(upstream.config.name.clone()));
        }
        let key = upstream.config.name.clone();
        if !refresh {
            if let Some(tools) = self
                .lists
                .known
                .lock()
                .ok()
                .and_then(|k| k.get(&key).cloned())
            {
                return Ok(tools.as_ref().clone());
            }
            if let Some(tools) =
                cache::load(&self.lists.dir_for(&upstream.config), &upstream.config)
            {
                let tools = self.lists.clean_tools(tools);
                if let Ok(mut k) = self.lists.known.lock() {
                    k.insert(key, Arc::new(tools.clone()));
                }
                return Ok(tools);
            }
        }
        let peer = self.peer_of(upstream).await?;
        let tools = match self.lists.list(upstream, &peer).await {
            Ok(tools) => tools,
            Err(e) => {
                if matches!(e, UpstreamError::Call { .. }) {
                    upstream.set_status(ServerStatus::Failed(e.to_string()));
                }
                return Err(e);
            }
        };
        self.lists.remember(upstream, Arc::new(tools.clone()));
        Ok(tools)
    }

    /// A live session with `upstream`, its re-listing task started. A
    /// tenant's own process is that tenant's use of the server's fixed
    /// paths (see [`crate::tenancy`]).
    async fn peer_of(&self, upstream: &Arc<Upstream>) -> Result<Peer<RoleClient>, UpstreamError> {
        if let Some(tenancy) = self.tenancy.get()
            && !tenancy.local
        {
            self.claim(tenancy, upstream)?;
        }
        let peer = upstream.peer().await?;
        if !upstream.relisting.swap(true, Ordering::SeqCst) {
            crate::relist::spawn(Arc::downgrade(upstream), upstream.notices.clone());
        }
        Ok(peer)
    }

    fn claim(&self, tenancy: &Tenancy, upstream: &Upstream) -> Result<(), UpstreamError> {
        tenancy.claim(&upstream.config).map_err(|cause| {
            upstream.set_status(ServerStatus::Failed(cause.clone()));
            UpstreamError::Call {
                server: upstream.config.name.clone(),
                cause,
            }
        })
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
        if let Some(runner) = self.runner_of(upstream) {
            return Box::pin(runner.read_live_tools(name)).await;
        }
        let peer = self.peer_of(upstream).await?;
        let generation = upstream.generation.load(Ordering::SeqCst);
        if let Ok(live) = upstream.live.lock()
            && let Some((g, tools)) = live.as_ref()
            && *g == generation
        {
            return Ok(tools.clone());
        }
        let tools = Arc::new(self.lists.list(upstream, &peer).await?);
        if let Ok(mut live) = upstream.live.lock() {
            *live = Some((generation, tools.clone()));
        }
        if self.lists.differs(&upstream.config.name, &tools) {
            self.lists.remember(upstream, tools.clone());
            self.lists.changed.notify_waiters();
        }
        Ok(tools)
    }

    /// The tools already read this run (from the server or the disk
    /// cache), asking no one.
    pub fn known_tools(&self, name: &str) -> Option<Vec<Tool>> {
        let upstream = self.get(name).ok()?;
        let known = self.lists.known.lock().ok()?;
        known.get(&upstream.config.name).map(|t| t.as_ref().clone())
    }

    /// A server's tools from the disk cache only (never connects).
    pub fn cached_tools(&self, name: &str) -> Option<Vec<Tool>> {
        let upstream = self.get(name).ok()?;
        cache::load(&self.lists.dir_for(&upstream.config), &upstream.config)
            .map(|t| self.lists.clean_tools(t))
    }

    /// What the server says of itself (its `instructions`), from this
    /// run's connection, else from the disk cache; asks no one.
    pub fn instructions(&self, name: &str) -> Option<Arc<str>> {
        let upstream = self.get(name).ok()?;
        upstream
            .instructions()
            .or_else(|| {
                cache::load_instructions(&self.lists.dir_for(&upstream.config), &upstream.config)
                    .map(Arc::from)
            })
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
        if let Some(runner) = self.runner_of(upstream) {
            return Box::pin(runner.call_upstream(server, tool, arguments, timeout, progress))
                .await;
        }
        let name = upstream.config.name.clone();
        if let Some(tenancy) = self.tenancy.get() {
            self.claim(tenancy, upstream)?;
        }
        let peer = self.peer_of(upstream).await?;
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
                if let Some(refused) = upstream.refused(&e) {
                    // A token revoked or out of scope: the next use connects
                    // with whatever the person signs in with.
                    upstream.drop_connection().await;
                    return Err(refused);
                }
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
        self.lists.timeout_for(upstream)
    }

    /// Forgets every cached tool list.
    pub fn clear_cache(&self) {
        if let Ok(mut k) = self.lists.known.lock() {
            k.clear();
        }
        cache::clear(&self.lists.cache_dir);
    }

    /// The name in `server`'s known tool list that `pick` chooses, without
    /// copying the list; `None` when no list is known yet (or `pick` finds
    /// nothing). Memory only: never connects.
    pub fn find_known_tool(&self, server: &str, pick: impl Fn(&str) -> bool) -> Option<String> {
        let known = self.lists.known.lock().ok()?;
        known
            .get(server)?
            .iter()
            .find(|t| pick(&t.name))
            .map(|t| t.name.to_string())
    }

    /// The `outputSchema` `server` declares for `tool`, from the list in
    /// memory: `Some(None)` for a listed tool that declares none, `None`
    /// when the tool is not listed (yet).
    pub fn known_output_schema(
        &self,
        server: &str,
        tool: &str,
    ) -> Option<Option<Arc<rmcp::model::JsonObject>>> {
        let known = self.lists.known.lock().ok()?;
        known
            .get(server)?
            .iter()
            .find(|t| t.name == tool)
            .map(|t| t.output_schema.clone())
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
