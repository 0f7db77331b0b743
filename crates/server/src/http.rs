//! MCP over streamable HTTP at `/mcp`.
//!
//! DNS-rebinding protection (the MCP spec's rule for local servers) comes
//! from rmcp's Host and Origin allow-lists; bearer auth is our middleware.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::{AppState, McpHandler, ServeError};

/// How to serve over HTTP.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub addr: SocketAddr,
    /// When set, every request needs `Authorization: Bearer <token>`.
    pub auth_token: Option<String>,
    /// Extra `Host` values to accept besides the loopback names.
    pub allowed_hosts: Vec<String>,
    /// Extra `Origin` values to accept besides loopback origins.
    pub allowed_origins: Vec<String>,
}

/// Serves until `shutdown` is cancelled. `on_ready` gets the bound address
/// (useful with port 0).
pub async fn serve_http(
    state: Arc<AppState>,
    options: HttpOptions,
    shutdown: CancellationToken,
    on_ready: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    if !options.addr.ip().is_loopback() && options.auth_token.is_none() {
        return Err(ServeError::PublicWithoutAuth { addr: options.addr });
    }
    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .map_err(|source| ServeError::Bind {
            addr: options.addr,
            source,
        })?;
    let bound = listener.local_addr()?;

    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    if !bound.ip().is_unspecified() {
        hosts.push(bound.ip().to_string());
    }
    hosts.extend(options.allowed_hosts.iter().cloned());
    let mut origins: Vec<String> = vec![
        "http://localhost:*".into(),
        "http://127.0.0.1:*".into(),
        "http://[::1]:*".into(),
    ];
    origins.extend(options.allowed_origins.iter().cloned());

    // A write of max_file_bytes must fit in one request, JSON escaping
    // included (up to 6 bytes a byte for control characters).
    let body_limit = (state.workspace.max_file_bytes() as usize)
        .saturating_mul(6)
        .saturating_add(1 << 20)
        .max(4 << 20);
    let config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(body_limit)
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .enforce_origin_validation()
        .with_cancellation_token(shutdown.child_token());
    let factory_state = state.clone();
    let service = StreamableHttpService::new(
        move || Ok(McpHandler::new(factory_state.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let token = options.auth_token.map(Arc::<str>::from);
    let router = Router::new()
        .nest_service("/mcp", service)
        .layer(middleware::from_fn_with_state(token, require_bearer));

    tracing::info!(%bound, "serving MCP over streamable HTTP at /mcp");
    on_ready(bound);
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await?;
    Ok(())
}

/// Rejects requests without the configured bearer token (401).
async fn require_bearer(
    State(token): State<Option<Arc<str>>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = token else {
        return next.run(request).await;
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        // The scheme name is case-insensitive (RFC 7235).
        .and_then(|v| {
            let (scheme, rest) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        });
    match presented {
        Some(p) if constant_time_eq(p.as_bytes(), token.as_bytes()) => next.run(request).await,
        _ => {
            let mut response = (
                StatusCode::UNAUTHORIZED,
                "missing or wrong bearer token: send 'Authorization: Bearer <token>' with the token the server was started with\n",
            )
                .into_response();
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            response
        }
    }
}

/// Compares without an early exit, so timing does not reveal how much of a
/// guessed token was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
