//! The policy for tool calls made from code, from `run` scripts and from
//! the CLI: every caller asks [`Policy::decide`] the same question and gets
//! the same answer.
//!
//! - [`Pattern`]s are globs on `server.tool` (`github.delete_*`, `memory`,
//!   `*`); the most specific matching rule wins, and without one the tool's
//!   MCP annotations decide (`readOnlyHint` allows, `destructiveHint` asks),
//!   then the policy's default.
//! - [`Pins`] remember each tool's [`digest`] (name, description, input
//!   schema, annotations) from the first time it was seen: a tool that
//!   changed or appeared since falls to `ask` (or `deny`) until accepted.
//! - [`Budgets`] count calls within one execution against per-tool or
//!   per-server limits.
//!
//! Pure code: no I/O, no clock, no global state. Storage, approvals and the
//! audit log belong to the callers.

mod budget;
mod decision;
mod digest;
mod names;
mod pattern;
mod pins;
mod policy;

pub use budget::{Budget, BudgetExceeded, Budgets};
pub use decision::Decision;
pub use digest::{canonical, definition, digest};
pub use names::{is_keyword, python_name};
pub use pattern::{Pattern, PatternError};
pub use pins::{PinState, PinnedTool, Pins, ToolChange};
pub use policy::{Policy, Rule, ToolFacts, Verdict};
