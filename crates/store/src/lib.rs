//! Persistent storage of code-execution-mcp.
//!
//! For now this is the [`Workspace`]: the directory under the data dir where
//! agents keep files between executions. Every access is confined to it with
//! `cap-std`, which resolves each path beneath the workspace's directory
//! handle and refuses `..`, absolute paths and symlinks that lead out, so a
//! symlink planted by sandboxed code cannot make the host read or write
//! outside. Writes go to a temporary file that is renamed into place.

mod error;
mod path;
mod workspace;

pub use error::WorkspaceError;
pub use path::validate_relative;
pub use workspace::{Entry, LIST_LIMIT, Listing, MAX_DEPTH, Usage, Workspace, Written};
