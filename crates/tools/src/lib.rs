//! The fourteen MCP tools of code-execution-mcp: their definitions for
//! `tools/list`, their arguments and answers, and running one by name; the
//! host's side of the bridge that code in the sandbox calls through
//! ([`bridge`]); and workspace files and skills as MCP resources.
//!
//! This crate knows no transport: what it gives back is an
//! [`cem_host::Answer`], which `cem-server` puts on the wire. It builds on
//! one tenant's [`cem_host::AppState`].
//!
//! [`dispatch`] is the only file that knows every tool; each tool's file
//! knows only its own, so a new tool is one new file and one line there.

pub mod bridge;
pub mod def;
mod discovery;
pub mod dispatch;
mod execute;
pub mod input;
mod pii;
pub mod resources;
mod shown;
pub mod skill_ops;
mod skills;
mod stats;
mod workspace;
pub mod written;

pub use cem_engine::envelope;
pub use def::{ToolDef, output_schema};
pub use discovery::{CATEGORIES, DEFINITION, SEARCH};
pub use dispatch::{TOOLS, call, listed, run};
pub use execute::audit_execution;
