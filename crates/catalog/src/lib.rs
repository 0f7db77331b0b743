//! The tool catalog: everything an agent can discover, and ranked search
//! over it.
//!
//! Entries come from upstream MCP servers, from the seed's static
//! `tools_registry/` (see [`registry`]) and, later, from saved skills. Search
//! is BM25 over weighted fields (a tool's name counts three times its
//! description), with names split on `_`, `-`, `.` and camelCase, a light
//! English stemmer, and fuzzy matching of misspelt name words.

mod entry;
mod index;
pub mod python;
pub mod registry;
mod text;
pub mod typed;

pub use entry::{Entry, EntryKind};
pub use index::{Catalog, Hit};
pub use text::{split_words, stem};
