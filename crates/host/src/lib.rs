//! What the server holds for each tenant and does on its behalf, below any
//! tool and any transport.
//!
//! [`AppState`] is one tenant's state: its config, workspace, skills,
//! engine, upstream connections, vaults, quotas and catalog. Around it:
//! the [`gate`] every upstream call passes (policy, pins, budgets,
//! approvals, audit), [`privacy`] (each session's vault, tokenizing what
//! reaches the model), [`quota`], [`host_work`] (the tenant's share of the
//! host's blocking threads), [`discovery`] (the catalog service), [`cluster`]
//! (keeping the tenant's data in step with the store other nodes share) and
//! [`changes`] (the one way a change travels to who cares). The types every
//! layer above shares ([`Answer`], [`ToolFailure`], [`Args`]) live here too.
//!
//! This crate must not know any tool by name or any transport: the tools
//! (`cem-tools`) and the MCP transports (`cem-server`) build on it.

pub mod answer;
pub mod approval;
pub mod args;
pub mod bounds;
pub mod changes;
pub mod cluster;
pub mod discovery;
mod disk_quota;
pub mod gate;
pub mod host_work;
pub mod lane;
mod last_use;
pub mod learning;
pub mod paused;
pub mod privacy;
pub mod probe;
pub mod progress;
pub mod quota;
pub mod shapes;
pub mod signin;
mod state;

pub use answer::{Answer, ImageBlock, ToolFailure, ToolResult, ToolSet, blocking, success};
pub use args::Args;
pub use changes::{Change, Changes};
pub use paused::Paused;
pub use state::{AppState, RunMode, StateError, Tasks};
