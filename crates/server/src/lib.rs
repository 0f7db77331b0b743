//! The MCP transports of code-execution-mcp: the rmcp handler, stdio,
//! streamable HTTP (its DNS-rebinding checks and bearer auth), forwarding
//! between nodes, and one state per tenant.
//!
//! [`McpHandler`] turns MCP requests into calls of `cem-tools` and their
//! answers into MCP results (with approvals as elicitation or input
//! requests, progress, tasks and resource subscriptions); [`serve_stdio`]
//! and [`serve_http`] put it on a transport; [`Tenants`] gives each
//! principal its own [`cem_host::AppState`]. Each MCP session gets its own
//! handler value, so per-session state never crosses sessions.
//!
//! This crate must not hold tool logic or host policy: a change to what a
//! tool does belongs in `cem-tools`, to what the host does for a tenant in
//! `cem-host`.

mod forward;
mod handler;
mod http;
mod listener;
mod logging;
mod metrics;
mod stdio;
mod tenants;
mod trace_context;

pub use handler::McpHandler;
/// For the fuzz targets: the HTTP transport's checks on what a client sends.
#[doc(hidden)]
pub use http::{CheckedBody, check_body, transport_config, vouched_principal};
pub use http::{HttpOptions, serve_http};
pub use metrics::MetricsListener;
pub use stdio::serve_stdio;
pub use tenants::Tenants;

/// Errors that stop a transport from serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error(
        "refusing to listen on {addr} without an auth token: anyone who can reach it could \
         run code here. Pass --auth-token (or set CODE_EXECUTION_MCP_AUTH_TOKEN), or bind 127.0.0.1"
    )]
    PublicWithoutAuth { addr: std::net::SocketAddr },
    #[error("MCP session failed: {0}")]
    Mcp(String),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}
