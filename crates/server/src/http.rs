//! MCP over streamable HTTP at `/mcp`.
//!
//! DNS-rebinding protection (the MCP spec's rule for local servers) comes
//! from rmcp's Host and Origin allow-lists. Authorization is ours: every
//! request to `/mcp` passes [`guard`], which finds the principal
//! ([`cem_auth::Authenticator`]), checks its per-minute request quota, its
//! scopes against the tools a JSON-RPC body calls, and that an
//! `Mcp-Session-Id` belongs to it; then hands the principal to the handler,
//! which serves that principal's tenant. The protected resource metadata
//! (RFC 9728) is served at `/.well-known/oauth-protected-resource`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{RawQuery, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use cem_auth::{Ability, Authenticator, Principal, Rejection};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::forward::{self, Forwarder};
use crate::{McpHandler, ServeError, Tenants, listener};

/// How to serve over HTTP.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub addr: SocketAddr,
    /// Who may call: static tokens, OAuth, or (none configured) anyone
    /// who can reach a loopback address.
    pub auth: Arc<Authenticator>,
    /// Extra `Host` values to accept besides the loopback names.
    pub allowed_hosts: Vec<String>,
    /// Extra `Origin` values to accept besides loopback origins.
    pub allowed_origins: Vec<String>,
    /// The deployment's shared store, when this is one node of many.
    pub cluster: Option<Arc<cem_cluster::Cluster>>,
}

/// What a request for a session this principal does not have gets.
const NO_SESSION: &str = "session not found: start a new one with an initialize request";

/// Sessions remembered with their owner before old ones are forgotten.
const MAX_OWNED_SESSIONS: usize = 50_000;

/// What the guard needs.
struct Guard {
    auth: Arc<Authenticator>,
    tenants: Arc<Tenants>,
    /// Which tenant began each MCP session (`Mcp-Session-Id`).
    owners: Mutex<HashMap<String, (String, Instant)>>,
    body_limit: usize,
    /// Relays requests to the node holding their session (with a store).
    forwarder: Option<Forwarder>,
}

/// Serves until `shutdown` is cancelled. `on_ready` gets the bound address
/// (useful with port 0).
pub async fn serve_http(
    tenants: Arc<Tenants>,
    options: HttpOptions,
    shutdown: CancellationToken,
    on_ready: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    if !options.addr.ip().is_loopback() && !options.auth.required() {
        return Err(ServeError::PublicWithoutAuth { addr: options.addr });
    }
    // Before the listener takes its first descriptor, so the connection
    // cap is set from the limit in force.
    let open_files = listener::raise_open_files();
    let limits = listener::Limits::new(&tenants.local().config.http, open_files);
    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .map_err(|source| ServeError::Bind {
            addr: options.addr,
            source,
        })?;
    let bound = listener.local_addr()?;

    let mut hosts: Vec<String> = Vec::new();
    if !bound.ip().is_unspecified() {
        hosts.push(bound.ip().to_string());
    }
    // Clients reach the server at its resource URL (often through a proxy).
    if let Some(host) = options.auth.resource().and_then(|r| r.host_str()) {
        hosts.push(host.to_string());
    }
    // Peers reach this node at its node URL.
    if let Some(host) = options
        .cluster
        .as_ref()
        .and_then(|c| url::Url::parse(c.node_url()).ok())
        .and_then(|u| u.host_str().map(str::to_string))
    {
        hosts.push(host);
    }
    hosts.extend(options.allowed_hosts.iter().cloned());

    // A write of max_file_bytes must fit in one request, JSON escaping
    // included (up to 6 bytes a byte for control characters).
    let body_limit = (tenants.local().workspace.max_file_bytes() as usize)
        .saturating_mul(6)
        .saturating_add(1 << 20)
        .max(4 << 20);
    let config = transport_config(
        hosts,
        options.allowed_origins.clone(),
        body_limit,
        shutdown.child_token(),
    );
    let signin = tenants.local().upstreams.signin().cloned();
    let factory_tenants = tenants.clone();
    let service = StreamableHttpService::new(
        move || Ok(McpHandler::for_tenants(factory_tenants.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let guard = Arc::new(Guard {
        auth: options.auth.clone(),
        tenants,
        owners: Mutex::new(HashMap::new()),
        body_limit,
        forwarder: options.cluster.clone().map(Forwarder::new),
    });
    let metadata = options.auth.clone();
    // The guard covers /mcp only: the metadata is public.
    let mcp = Router::new()
        .nest_service("/mcp", service.clone())
        .layer(middleware::from_fn_with_state(guard.clone(), guard_layer));
    // Relayed by peers: the node key instead of a client credential.
    let internal = Router::new()
        .nest_service(forward::INTERNAL_PATH, service)
        .layer(middleware::from_fn_with_state(guard, internal_layer));
    let health_cluster = options.cluster.clone();
    // Sign-in callbacks that reach this node for another.
    let callback_relay = options.cluster.clone().map(|c| Arc::new(Forwarder::new(c)));
    // Where people's browsers come back from signing in to an upstream:
    // the resource URL's origin (what they reach us at) or this address.
    if let Some(signin) = &signin
        && let Some(base) = callback_base(options.auth.resource(), bound)
    {
        signin.listen_at(base);
    }
    let router = Router::new()
        .merge(mcp)
        .merge(internal)
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(move || readiness(health_cluster.clone())))
        .route(
            "/.well-known/oauth-protected-resource",
            get({
                let m = metadata.clone();
                move || resource_metadata(m.clone())
            }),
        )
        .route(
            "/.well-known/oauth-protected-resource/{*path}",
            get(move || resource_metadata(metadata.clone())),
        )
        .route(
            "/oauth/callback",
            get({
                let (signin, relay) = (signin.clone(), callback_relay.clone());
                move |query: RawQuery| {
                    signin_page(signin.clone(), relay.clone(), Page::Callback, query, None)
                }
            }),
        )
        .route(
            "/oauth/key",
            get({
                let (signin, relay) = (signin.clone(), callback_relay.clone());
                move |query: RawQuery| {
                    signin_page(signin.clone(), relay.clone(), Page::Key, query, None)
                }
            })
            .post({
                let (signin, relay) = (signin.clone(), callback_relay.clone());
                move |query: RawQuery, form: String| {
                    signin_page(signin.clone(), relay.clone(), Page::Key, query, Some(form))
                }
            })
            .layer(axum::extract::DefaultBodyLimit::max(KEY_FORM_LIMIT)),
        )
        .route(
            &format!("{}/{{page}}", forward::INTERNAL_SIGNIN_PATH),
            get({
                let (signin, relay) = (signin.clone(), callback_relay.clone());
                move |page: axum::extract::Path<String>,
                      headers: axum::http::HeaderMap,
                      query: RawQuery| {
                    relayed_signin_page(signin.clone(), relay.clone(), page, headers, query, None)
                }
            })
            .post({
                let (signin, relay) = (signin.clone(), callback_relay.clone());
                move |page: axum::extract::Path<String>,
                      headers: axum::http::HeaderMap,
                      query: RawQuery,
                      form: String| {
                    relayed_signin_page(
                        signin.clone(),
                        relay.clone(),
                        page,
                        headers,
                        query,
                        Some(form),
                    )
                }
            })
            .layer(axum::extract::DefaultBodyLimit::max(KEY_FORM_LIMIT)),
        )
        .route(
            "/oauth/client.json",
            get(move || client_metadata(signin.clone())),
        );

    tracing::info!(
        %bound,
        header_timeout_seconds = limits.header_timeout.as_secs(),
        request_timeout_seconds = limits.request_timeout.as_secs(),
        idle_timeout_seconds = limits.idle_timeout.as_secs(),
        max_connections = limits.max_connections,
        max_connections_per_peer = limits.max_per_peer,
        "serving MCP over streamable HTTP at /mcp"
    );
    on_ready(bound);
    listener::serve(listener, router, limits, shutdown).await;
    Ok(())
}

/// `<origin>/` of the resource URL (its path less a final `/mcp`), else
/// this listener's own address (loopback when it listens on all).
fn callback_base(resource: Option<&url::Url>, bound: SocketAddr) -> Option<url::Url> {
    if let Some(resource) = resource {
        let mut base = resource.clone();
        let path = base.path().trim_end_matches('/');
        let path = path.strip_suffix("/mcp").unwrap_or(path).to_string();
        base.set_path(&format!("{path}/"));
        base.set_query(None);
        return Some(base);
    }
    let ip = if bound.ip().is_unspecified() {
        std::net::IpAddr::from([127, 0, 0, 1])
    } else {
        bound.ip()
    };
    url::Url::parse(&format!("http://{}/", SocketAddr::new(ip, bound.port()))).ok()
}

/// A person's browser back from signing in to an upstream: the sign-in
/// its `state` names ends here, and the page says how.
/// The most a key page's form may hold (a key is at most 4 KiB).
const KEY_FORM_LIMIT: usize = 16 * 1024;

/// The pages a person's browser reaches while signing in to an upstream.
#[derive(Debug, Clone, Copy)]
enum Page {
    /// Where the authorization server sends the browser back.
    Callback,
    /// Where a person gives an API key (GET: the form; POST: its answer).
    Key,
}

impl Page {
    fn name(self) -> &'static str {
        match self {
            Page::Callback => "callback",
            Page::Key => "key",
        }
    }
}

async fn signin_page(
    signin: Option<Arc<cem_signin::SignIn>>,
    relay: Option<Arc<Forwarder>>,
    page: Page,
    RawQuery(query): RawQuery,
    form: Option<String>,
) -> Response {
    let Some(signin) = signin else {
        return (
            StatusCode::NOT_FOUND,
            "sign-in is not set up on this server\n",
        )
            .into_response();
    };
    let query = query.unwrap_or_default();
    // Behind a balancer the browser may come back to another node than
    // the one that began the sign-in (and holds its verifier and the
    // call waiting on it): that one answers.
    let names = form.as_deref().unwrap_or(&query);
    if let Some(relay) = &relay
        && let Some(node) = signin.elsewhere(names).await
    {
        let response = match relay.relay_signin(&node, page.name(), &query, form).await {
            Ok(response) => response,
            Err(forward::Failed::Unreachable(why)) => {
                tracing::warn!(node = %cem_cluster::node_id(&node), error = %why, "the node waiting for a sign-in did not answer");
                let gone: Result<cem_signin::CredentialId, _> =
                    Err(cem_signin::SignInError::Other(
                        "the server node that began this sign-in cannot be reached (it may have \
                     stopped); start the sign-in again"
                            .into(),
                    ));
                (StatusCode::BAD_GATEWAY, cem_signin::callback_page(&gone)).into_response()
            }
        };
        return signin_headers(response);
    }
    signin_headers(finish_here(&signin, page, &query, form).await)
}

/// A sign-in page this node answers itself.
async fn finish_here(
    signin: &cem_signin::SignIn,
    page: Page,
    query: &str,
    form: Option<String>,
) -> Response {
    let status = |ok: bool| {
        if ok {
            StatusCode::OK
        } else {
            StatusCode::BAD_REQUEST
        }
    };
    match (page, form) {
        (Page::Callback, _) => {
            let result = signin.complete(query).await;
            (status(result.is_ok()), cem_signin::callback_page(&result)).into_response()
        }
        (Page::Key, None) => match signin.key_page(query) {
            Ok(form) => (StatusCode::OK, form).into_response(),
            Err(e) => (
                StatusCode::BAD_REQUEST,
                cem_signin::key_result_page(&Err(e)),
            )
                .into_response(),
        },
        (Page::Key, Some(form)) => {
            let result = signin.complete_key(&form).await;
            (status(result.is_ok()), cem_signin::key_result_page(&result)).into_response()
        }
    }
}

/// A sign-in page another node handed over (see `signin_page`): answered
/// here, never handed on again. Only the nodes' key opens it.
async fn relayed_signin_page(
    signin: Option<Arc<cem_signin::SignIn>>,
    relay: Option<Arc<Forwarder>>,
    axum::extract::Path(page): axum::extract::Path<String>,
    headers: axum::http::HeaderMap,
    RawQuery(query): RawQuery,
    form: Option<String>,
) -> Response {
    let (Some(signin), Some(relay)) = (signin, relay) else {
        return plain(StatusCode::NOT_FOUND, "not found".into());
    };
    let key_ok = headers
        .get(forward::NODE_KEY_HEADER)
        .is_some_and(|k| forward::key_matches(k.as_bytes(), relay.cluster.node_key()));
    if !key_ok {
        return plain(
            StatusCode::FORBIDDEN,
            "this endpoint is for the server's own nodes; browsers use /oauth/callback".into(),
        );
    }
    let page = match page.as_str() {
        "callback" => Page::Callback,
        "key" => Page::Key,
        _ => return plain(StatusCode::NOT_FOUND, "not found".into()),
    };
    let query = query.unwrap_or_default();
    signin_headers(finish_here(&signin, page, &query, form).await)
}

/// What a sign-in page is sent with: HTML, never cached, no referrer
/// (the page's address holds the state or the code), never in a frame
/// (a page of someone else's cannot dress the key form up), and a form
/// that posts only back here.
fn signin_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
    headers.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    response
}

/// The client metadata document authorization servers fetch when this
/// server's client id is its URL (CIMD), where `signin.public_url` is https.
async fn client_metadata(signin: Option<Arc<cem_signin::SignIn>>) -> Response {
    match signin.and_then(|s| s.client_metadata()) {
        Some(document) => axum::Json(document).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            "no client metadata document: signin.public_url is not an https URL\n",
        )
            .into_response(),
    }
}

/// The transport's settings: the Host and Origin allow-lists (the loopback
/// names and origins, plus `hosts` and `origins`), enforced, and the body
/// limit. Public for the fuzz targets, which feed rmcp's header checks
/// (Host, Origin, `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`) with it.
#[doc(hidden)]
pub fn transport_config(
    hosts: Vec<String>,
    origins: Vec<String>,
    body_limit: usize,
    cancel: CancellationToken,
) -> StreamableHttpServerConfig {
    let mut allowed_hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    allowed_hosts.extend(hosts);
    let mut allowed_origins: Vec<String> = vec![
        "http://localhost:*".into(),
        "http://127.0.0.1:*".into(),
        "http://[::1]:*".into(),
    ];
    allowed_origins.extend(origins);
    StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(body_limit)
        .with_allowed_hosts(allowed_hosts)
        .with_allowed_origins(allowed_origins)
        .enforce_origin_validation()
        .with_cancellation_token(cancel)
}

/// The protected resource metadata (RFC 9728); 404 without OAuth.
async fn resource_metadata(auth: Arc<Authenticator>) -> Response {
    let (Some(oauth), Some(resource)) = (auth.oauth(), auth.resource()) else {
        return (
            StatusCode::NOT_FOUND,
            "this server does not use OAuth (no auth.oauth in its config)\n",
        )
            .into_response();
    };
    let body = cem_auth::protected_resource_metadata(
        resource.as_str(),
        oauth.issuer(),
        &auth.scopes_supported(),
    );
    axum::Json(body).into_response()
}

/// 200 when this node can serve: its store (if any) answers.
async fn readiness(cluster: Option<Arc<cem_cluster::Cluster>>) -> Response {
    match cluster {
        None => (StatusCode::OK, "ready\n").into_response(),
        Some(c) => match c.ready().await {
            Ok(()) => (StatusCode::OK, "ready\n").into_response(),
            Err(e) => plain(StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {e}")),
        },
    }
}

async fn guard_layer(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let deleting = request.method() == Method::DELETE;
    let mut response = match guard.check(request).await {
        Ok((request, principal, new_session)) => match guard.route(request, &principal).await {
            Err(relayed) => relayed,
            Ok(request) => {
                let deleting = request.method() == Method::DELETE;
                let session = session_id(&request);
                let response = next.run(request).await;
                guard.remember(&principal, session, deleting, new_session, &response);
                response
            }
        },
        Err(response) => response,
    };
    // rmcp answers an ended session 202 Accepted, which clients read as
    // "still in progress" (the Python SDK warns); the session is gone, so
    // say so. Here rather than in `internal_layer`, so that a DELETE a
    // peer served gets the same answer.
    if deleting && response.status() == StatusCode::ACCEPTED {
        let (mut parts, _) = response.into_parts();
        parts.status = StatusCode::NO_CONTENT;
        parts.headers.remove(header::CONTENT_LENGTH);
        response = Response::from_parts(parts, Body::empty());
    }
    if let Some(f) = &guard.forwarder
        && !response.headers().contains_key(forward::NODE_HEADER)
        && let Ok(v) = HeaderValue::from_str(&f.cluster.node_id())
    {
        response.headers_mut().insert(forward::NODE_HEADER, v);
    }
    response
}

/// The internal endpoint: requests a peer relayed, with the node key and
/// the principal that peer authenticated. Never relayed again.
async fn internal_layer(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let Some(f) = &guard.forwarder else {
        return plain(StatusCode::NOT_FOUND, "not found".into());
    };
    let key_ok = request
        .headers()
        .get(forward::NODE_KEY_HEADER)
        .is_some_and(|k| forward::key_matches(k.as_bytes(), f.cluster.node_key()));
    let principal = request
        .headers()
        .get(forward::PRINCIPAL_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(forward::decode_principal);
    let (true, Some(principal)) = (key_ok, principal) else {
        return plain(
            StatusCode::FORBIDDEN,
            "this endpoint is for the server's own nodes; clients use /mcp".into(),
        );
    };
    let (mut parts, body) = request.into_parts();
    parts.extensions.insert(principal.clone());
    let request = Request::from_parts(parts, body);
    let deleting = request.method() == Method::DELETE;
    let session = session_id(&request);
    let new_session = session.is_none();
    let mut response = next.run(request).await;
    guard.remember(&principal, session, deleting, new_session, &response);
    if let Ok(v) = HeaderValue::from_str(&f.cluster.node_id()) {
        response.headers_mut().insert(forward::NODE_HEADER, v);
    }
    response
}

impl Guard {
    /// The request with its principal attached, or the refusal to send.
    async fn check(&self, request: Request) -> Result<(Request, Principal, bool), Response> {
        let authorization = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let principal = self
            .auth
            .authenticate(authorization)
            .await
            .map_err(|r| self.refuse(&r))?;
        let tenant = self.tenants.get(&principal).map_err(|e| {
            plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot open your tenant: {e}"),
            )
        })?;
        if let Err(e) = tenant.quota.request() {
            let mut response = (
                StatusCode::TOO_MANY_REQUESTS,
                axum::Json(json!({"error": "quota_exceeded", "error_description": e.message})),
            )
                .into_response();
            if let Ok(v) = HeaderValue::from_str(&e.retry_after.as_secs().max(1).to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, v);
            }
            return Err(response);
        }
        let session = session_id(&request);
        if let Some(id) = &session {
            let owner = self
                .owners
                .lock()
                .ok()
                .and_then(|o| o.get(id).map(|(t, _)| t.clone()));
            // Another principal's session is, to this one, no session.
            if owner.is_some_and(|t| t != principal.tenant) {
                return Err(plain(StatusCode::NOT_FOUND, NO_SESSION.into()));
            }
        }
        let (mut parts, body) = request.into_parts();
        let body = if parts.method == Method::POST {
            let bytes = axum::body::to_bytes(body, self.body_limit)
                .await
                .map_err(|e| match listener::request_timed_out(&e) {
                    Some(limit) => timed_out(limit),
                    None => plain(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!("the request body is over {} bytes", self.body_limit),
                    ),
                })?;
            let message = one_message(&bytes)
                .map_err(|refusal| jsonrpc_error(StatusCode::BAD_REQUEST, refusal))?;
            if let Some(missing) = missing_ability(&principal, &message) {
                let scope = self.auth.scope_of(missing);
                return Err(self.refuse(&Rejection::insufficient(
                    scope.clone(),
                    format!(
                        "this call needs the scope '{scope}', which your access token does not have; \
                         ask the identity provider for a token with it"
                    ),
                )));
            }
            Body::from(bytes)
        } else {
            body
        };
        parts.extensions.insert(principal.clone());
        Ok((
            Request::from_parts(parts, body),
            principal,
            session.is_none(),
        ))
    }

    /// With a shared store: the request itself when this node serves it,
    /// or the answer of the node that holds its session.
    async fn route(&self, request: Request, principal: &Principal) -> Result<Request, Response> {
        let Some(f) = &self.forwarder else {
            return Ok(request);
        };
        let (parts, body) = request.into_parts();
        // POST bodies were read (and bounded) by `check` already.
        let bytes = axum::body::to_bytes(body, self.body_limit)
            .await
            .map_err(|e| {
                plain(
                    StatusCode::BAD_REQUEST,
                    format!("cannot read the request body: {e}"),
                )
            })?;
        let here = f.cluster.node_url();
        let session = parts
            .headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let stateless = session.is_none()
            && parts
                .headers
                .get("mcp-protocol-version")
                .and_then(|v| v.to_str().ok())
                == Some("2026-07-28");
        if stateless && let Some(held) = forward::held(&bytes) {
            let holder = f
                .cluster
                .locate(held.kind, &principal.tenant, &held.id)
                .await;
            if let Ok(Some(node)) = holder
                && node != here
            {
                let (kind, tenant) = (held.kind, principal.tenant.clone());
                return Err(f
                    .relay_held(
                        &node,
                        &parts,
                        bytes,
                        principal,
                        kind,
                        &tenant,
                        &held.id,
                        || forward::session_lost(&held, &node),
                    )
                    .await);
            }
        }
        if let Some(id) = &session {
            let known_here = self.owners.lock().is_ok_and(|o| o.contains_key(id));
            if !known_here && let Ok(Some((owner, node))) = f.cluster.locate_mcp(id).await {
                if owner != principal.tenant {
                    return Err(plain(StatusCode::NOT_FOUND, NO_SESSION.into()));
                }
                if node != here {
                    let kind = cem_cluster::SessionKind::Mcp;
                    return Err(f
                        .relay_held(&node, &parts, bytes, principal, kind, &owner, id, || {
                            plain(
                                StatusCode::NOT_FOUND,
                                format!(
                                    "session not found: the server node that held it (node {}) is gone; \
                                     start a new session with an initialize request",
                                    cem_cluster::node_id(&node)
                                ),
                            )
                        })
                        .await);
                }
            }
        }
        Ok(Request::from_parts(parts, Body::from(bytes)))
    }

    /// Notes the owner of a session the response just began, and forgets
    /// one the client ended.
    fn remember(
        &self,
        principal: &Principal,
        session: Option<String>,
        deleting: bool,
        new_session: bool,
        response: &Response,
    ) {
        let Ok(mut owners) = self.owners.lock() else {
            return;
        };
        if deleting {
            if let Some(id) = session {
                owners.remove(&id);
                self.share(cem_cluster::SessionKind::Mcp, &principal.tenant, &id, false);
            }
            return;
        }
        if !new_session {
            return;
        }
        let Some(id) = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        else {
            return;
        };
        if owners.len() >= MAX_OWNED_SESSIONS {
            // Forget the oldest half; their sessions have long gone idle.
            let mut ages: Vec<Instant> = owners.values().map(|(_, t)| *t).collect();
            ages.sort();
            let cut = ages[ages.len() / 2];
            owners.retain(|_, (_, t)| *t > cut);
        }
        owners.insert(id.to_string(), (principal.tenant.clone(), Instant::now()));
        self.share(cem_cluster::SessionKind::Mcp, &principal.tenant, id, true);
    }

    /// Records in the store (in the background) that this node holds, or
    /// no longer holds, MCP session `id`.
    fn share(&self, kind: cem_cluster::SessionKind, tenant: &str, id: &str, held: bool) {
        let Some(f) = &self.forwarder else {
            return;
        };
        let (cluster, tenant, id) = (f.cluster.clone(), tenant.to_string(), id.to_string());
        tokio::spawn(async move {
            let done = if held {
                cluster.claim(kind, &tenant, &id).await
            } else {
                cluster.release(kind, &tenant, &id).await
            };
            if let Err(e) = done {
                tracing::warn!(error = %e, "a session's node was not recorded in the store");
            }
        });
    }

    fn refuse(&self, rejection: &Rejection) -> Response {
        let status = StatusCode::from_u16(rejection.status).unwrap_or(StatusCode::UNAUTHORIZED);
        let body = json!({
            "error": rejection.error.unwrap_or("unauthorized"),
            "error_description": rejection.description,
        });
        let mut response = (status, axum::Json(body)).into_response();
        if matches!(rejection.status, 401 | 403) {
            let challenge =
                cem_auth::www_authenticate(rejection, self.auth.metadata_url().as_deref());
            if let Ok(v) = HeaderValue::from_str(&challenge) {
                response.headers_mut().insert(header::WWW_AUTHENTICATE, v);
            }
        }
        response
    }
}

fn session_id(request: &Request) -> Option<String> {
    request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The answer to a request whose body did not arrive by its deadline; the
/// connection is closed after it (the rest of the body is not read).
fn timed_out(limit: std::time::Duration) -> Response {
    let mut response = plain(
        StatusCode::REQUEST_TIMEOUT,
        format!(
            "the request did not arrive within {} s of its first byte \
             (http.request_timeout_seconds); send the body at once, or raise that limit",
            limit.as_secs()
        ),
    );
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

fn plain(status: StatusCode, message: String) -> Response {
    (status, format!("{message}\n")).into_response()
}

/// A JSON-RPC error the guard answers itself: its code and message.
#[derive(Debug, PartialEq)]
struct Refusal {
    code: i64,
    message: String,
}

/// The JSON-RPC message a POST body holds, or why it holds none. rmcp would
/// answer both refusals 415 with a plain-text serde error, which neither
/// names the mistake nor is a JSON-RPC answer a client can show.
fn one_message(body: &[u8]) -> Result<Value, Refusal> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        let what = if body.iter().all(u8::is_ascii_whitespace) {
            "the request body is empty".to_string()
        } else {
            format!("the request body is not valid JSON ({e})")
        };
        Refusal {
            code: -32700,
            message: format!(
                "Parse error: {what}; send one JSON-RPC message as a JSON object, \
                 with Content-Type: application/json"
            ),
        }
    })?;
    // MCP removed JSON-RPC batching (2025-06-18), and rmcp reads one
    // message a request; refusing here also keeps a batch's tools/call
    // from slipping past the scope check.
    if value.is_array() {
        return Err(Refusal {
            code: -32600,
            message: "Invalid Request: JSON-RPC batches are not supported; \
                      send one JSON-RPC message per request"
                .into(),
        });
    }
    Ok(value)
}

/// For the fuzz targets: what the guard makes of a POST body from
/// `principal` (see `Guard::check` and `Guard::route`), without a
/// server or a store.
#[doc(hidden)]
#[derive(Debug)]
pub struct CheckedBody {
    /// The JSON-RPC message, or the refusal's code and message.
    pub message: Result<Value, (i64, String)>,
    /// The ability the message needs that `principal` lacks.
    pub missing: Option<Ability>,
    /// What a stateless request continues in one node: its kind and id.
    pub held: Option<(cem_cluster::SessionKind, String)>,
}

/// For the fuzz targets: `one_message`, `missing_ability` and
/// `forward::held` on `body`.
#[doc(hidden)]
pub fn check_body(body: &[u8], principal: &Principal) -> CheckedBody {
    let message = one_message(body).map_err(|r| (r.code, r.message));
    let missing = message
        .as_ref()
        .ok()
        .and_then(|m| missing_ability(principal, m));
    let held = forward::held(body).map(|h| (h.kind, h.id));
    CheckedBody {
        message,
        missing,
        held,
    }
}

/// For the fuzz targets: the principal a peer's `cem-principal` header
/// vouches for (see `internal_layer`).
#[doc(hidden)]
pub fn vouched_principal(header: &str) -> Option<Principal> {
    forward::decode_principal(header)
}

/// A JSON-RPC error answer with no id (the request's could not be read).
fn jsonrpc_error(status: StatusCode, refusal: Refusal) -> Response {
    let body = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": refusal.code, "message": refusal.message},
    });
    (status, axum::Json(body)).into_response()
}

/// The ability a JSON-RPC message needs that `principal` lacks. Only
/// tools/call needs one: listing and the protocol's own messages are open
/// to any valid credential.
fn missing_ability(principal: &Principal, message: &Value) -> Option<Ability> {
    if message["method"] != "tools/call" {
        return None;
    }
    message["params"]["name"]
        .as_str()
        .and_then(Ability::for_tool)
        .filter(|a| !principal.can(*a))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn tool_calls_need_their_ability() {
        let reader = Principal::subject("i", "r", BTreeSet::from([Ability::ToolsRead]));
        let call = |tool: &str| json!({"method": "tools/call", "params": {"name": tool}});
        assert_eq!(missing_ability(&reader, &call("search_tools")), None);
        assert_eq!(
            missing_ability(&reader, &call("execute_code")),
            Some(Ability::Execute)
        );
        assert_eq!(
            missing_ability(&reader, &call("save_skill")),
            Some(Ability::SkillsWrite)
        );
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        assert_eq!(missing_ability(&reader, &list), None);
        assert_eq!(
            missing_ability(&Principal::local(), &call("execute_code")),
            None
        );
    }

    #[test]
    fn a_body_must_be_one_json_rpc_message() {
        let one = br#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#;
        assert_eq!(
            one_message(one).map(|m| m["method"].clone()),
            Ok(json!("tools/list"))
        );
        let code = |body: &[u8]| one_message(body).err().map(|r| r.code);
        assert_eq!(code(b"{not json"), Some(-32700));
        assert_eq!(code(b""), Some(-32700));
        // A batch is refused whole, even one whose tool calls are allowed.
        let batch = format!("[{}]", String::from_utf8_lossy(one));
        assert_eq!(code(batch.as_bytes()), Some(-32600));
        assert_eq!(code(b"[]"), Some(-32600));
        let empty = one_message(b" \n")
            .err()
            .map(|r| r.message)
            .unwrap_or_default();
        assert!(empty.contains("the request body is empty"), "{empty}");
    }
}
