//! The MCP server of code-execution-mcp.
//!
//! [`McpHandler`] answers `tools/list` and `tools/call` with hand-written,
//! deliberately terse tool schemas (the whole list must cost an agent little
//! context). [`serve_stdio`] and [`serve_http`] put it on a transport; HTTP
//! adds the DNS-rebinding checks (Host, Origin) and optional bearer auth.
//!
//! Shared, process-wide state lives in [`AppState`]; each MCP session gets
//! its own handler value, so per-session state never crosses sessions.

pub mod approval;
pub mod bridge;
pub mod cluster;
pub mod discovery;
mod disk_quota;
mod forward;
pub mod gate;
mod handler;
pub mod host_work;
mod http;
pub mod privacy;
pub mod progress;
pub mod quota;
pub mod resources;
pub mod skills;
mod state;
mod stdio;
mod tenants;
pub mod tools;

pub use handler::McpHandler;
/// For the fuzz targets: the HTTP transport's checks on what a client sends.
#[doc(hidden)]
pub use http::{CheckedBody, check_body, transport_config, vouched_principal};
pub use http::{HttpOptions, serve_http};
pub use state::{AppState, RunMode, StateError};
pub use stdio::serve_stdio;
pub use tenants::Tenants;
pub use tools::ToolSet;

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
