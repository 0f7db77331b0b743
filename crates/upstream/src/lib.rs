//! The client side: upstream MCP servers from `mcpServers`.
//!
//! [`Manager`] owns one [`Upstream`] per configured server and connects
//! lazily: nothing starts until a tool list or a call needs it, and tool
//! lists are cached on disk (keyed by each server's configuration), so
//! search works at start-up without starting every upstream. A crashed
//! stdio server is restarted on next use; a broken one is reported by name
//! and never stops the others. Transports: stdio (the child's stderr goes to
//! our log; `env` is merged over a minimal environment), streamable HTTP and
//! legacy HTTP+SSE ([`sse`], since rmcp dropped its SSE client).

mod cache;
mod error;
mod handler;
mod manager;
mod redact;
pub mod sse;
mod stdio;

pub use error::UpstreamError;
pub use handler::ProgressFn;
pub use manager::{Manager, ServerStatus, StartHook, Upstream};
pub use rmcp::model::{CallToolResult, Tool};
