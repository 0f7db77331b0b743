//! The shapes of tool results, learned from use.
//!
//! Most upstream tools declare no `outputSchema`, so the agent's wrappers
//! return `Any` and its first execution is spent printing a sample. This
//! crate learns what a tool returns from the values code got back: types,
//! object keys (required when seen every time), array items, maps (objects
//! keyed by data: ids, emails, dates) as `dict[str, T]`, strings that are
//! date-times, dates or URLs, unions of what was seen. Shapes are merged over
//! calls with counts, and rendered as JSON Schema for the wrappers and the
//! definitions ([`schema::to_schema`]).
//!
//! What is kept is a shape and nothing else:
//! - no value, ever: a string is "a string" (and maybe its format), a
//!   number "a number";
//! - no key that is personal data or looks like data: keys that are not
//!   plain field names (the personal-data detector's findings, numbers,
//!   dates, UUIDs, hashes, anything with spaces or punctuation) make their
//!   object a map, whose keys are not kept ([`keys::is_field_name`]);
//! - bounded: at most [`MAX_DEPTH`] levels, [`MAX_FIELDS`] keys per
//!   object and [`MAX_NODES`] nodes per shape; past a bound the part is
//!   `Any` (or a map, for too many keys).
//!
//! Pure code: no I/O but the [`ShapeBook`]'s own file.

mod book;
pub mod declared;
mod format;
pub mod keys;
pub mod schema;
mod shape;

pub use book::{BookError, Learned, MAX_TOOLS, Recorded, ShapeBook, Source};
pub use format::Format;
pub use shape::Shape;

/// Levels of nesting a shape follows; deeper values are `Any`.
pub const MAX_DEPTH: usize = 8;
/// Keys an object keeps as fields; one with more is a map.
pub const MAX_FIELDS: usize = 64;
/// Nodes (types at a place) one shape holds; past it, the deepest levels
/// are cut to `Any` until it fits.
pub const MAX_NODES: usize = 512;
