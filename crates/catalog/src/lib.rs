//! The tool catalog: everything an agent can discover, and ranked search
//! over it.
//!
//! Entries come from upstream MCP servers, from the seed's static
//! `tools_registry/` (see [`registry`]) and, later, from saved skills. Search
//! is BM25 over weighted fields (a tool's name counts three times its
//! description), with names split on `_`, `-`, `.` and camelCase, a light
//! English stemmer, and fuzzy matching of misspelt name words.

mod entry;
mod fields;
mod index;
mod kept;
pub mod learned;
mod prepared;
pub mod python;
pub mod registry;
mod semantic;
mod source;
mod text;
mod tuning;
pub mod typed;

/// The embedding model compiled in, when there is one (feature `semantic`).
pub use cem_embed::builtin as builtin_model;
pub use cem_embed::{Model, OnnxError, OnnxModel};
pub use entry::{Effects, Entry, EntryKind};
pub use index::{Catalog, Hit, LEARNING_KEEPS_WORDS_FIRST, Learning, Why};
pub use learned::Learned;
pub use semantic::{Semantic, texts_to_embed};
pub use text::{split_words, stem};
