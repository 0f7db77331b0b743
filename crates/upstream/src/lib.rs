//! The client side: upstream MCP servers from `mcpServers`.
//!
//! [`Manager`] owns one [`Upstream`] per configured server and connects
//! lazily: nothing starts until a tool list or a call needs it, and tool
//! lists are cached on disk (keyed by each server's configuration), so
//! search works at start-up without starting every upstream. A crashed
//! stdio server is restarted on next use; a broken one is reported by name
//! and never stops the others. Transports: stdio (the child's stderr goes to
//! our log; `env` is merged over a minimal environment), streamable HTTP and
//! legacy HTTP+SSE ([`sse`], since rmcp dropped its SSE client). An http or
//! sse server that asks for sign-in gets each tenant's own credential
//! (`cem_signin`), refreshed as it runs out.

mod cache;
mod confine;
mod error;
mod handler;
mod listing;
mod manager;
mod redact;
mod relist;
mod signed;
pub mod sse;
mod stderr;
mod stdio;
pub mod tenancy;

pub use confine::available as confinement_available;
pub use error::UpstreamError;
pub use handler::ProgressFn;
pub use manager::{Manager, ServerStatus, StartHook, Upstream};
pub use rmcp::model::{CallToolResult, Tool};
pub use tenancy::{Claims, Tenancy};
