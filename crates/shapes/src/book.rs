//! A tenant's learned shapes, by tool, kept in one file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::schema::to_schema;
use crate::shape::Shape;

/// Tools one book holds: far more than a deployment's servers list, and a
/// bound on the file whatever code calls.
pub const MAX_TOOLS: usize = 4096;
/// The largest book file read back (a full book of bounded shapes is far
/// smaller).
const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;
/// The file's format; a book of another version is started afresh.
const VERSION: u32 = 1;

/// How a shape was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// A result code got back.
    Learned,
    /// A result of `tools discover`'s safe call.
    Probed,
}

/// What is known of one tool's results.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Learned {
    pub shape: Shape,
    /// Results code got back.
    pub calls: u64,
    /// Results of safe probes.
    pub probes: u64,
    /// Results that did not fit the shape as it was, and widened it.
    pub widened: u64,
}

impl Learned {
    /// What `self` and `other` saw together (another node's observations
    /// added to this one's).
    pub fn merged(&self, other: &Learned) -> Learned {
        let mut shape = self.shape.clone();
        shape.merge(other.shape.clone());
        Learned {
            shape,
            calls: self.calls.saturating_add(other.calls),
            probes: self.probes.saturating_add(other.probes),
            widened: self.widened.saturating_add(other.widened),
        }
    }

    /// Held to what a learned shape may be (field-name keys only, the
    /// bounds), whoever wrote it.
    pub fn sanitized(mut self) -> Learned {
        self.shape = self.shape.sanitized();
        self
    }

    /// The shape as JSON Schema, marked with where it comes from:
    /// `"x-cem-shape": {"source": "learned"|"probed", "calls": N, "probes":
    /// N}` (learned once code's results are among them).
    pub fn schema(&self) -> Value {
        let mut schema = to_schema(&self.shape);
        let source = if self.calls > 0 {
            Source::Learned
        } else {
            Source::Probed
        };
        if let Some(object) = schema.as_object_mut() {
            object.insert(
                "x-cem-shape".into(),
                json!({"source": source, "calls": self.calls, "probes": self.probes}),
            );
        }
        schema
    }
}

/// What recording a result did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// The tool's first shape.
    First,
    /// The result fit: only the counts changed.
    Same,
    /// The result brought something new, and the shape grew.
    Widened,
    /// The book holds [`MAX_TOOLS`] tools: this one is not learned.
    Full,
}

impl Recorded {
    /// Whether the shape's schema changed (the wrappers must be written).
    pub fn changed(self) -> bool {
        matches!(self, Recorded::First | Recorded::Widened)
    }
}

/// Why a book could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum BookError {
    #[error("cannot read the learned shapes at {path}: {reason}; remove the file to start afresh")]
    Read { path: PathBuf, reason: String },
    #[error("cannot write the learned shapes at {path}: {reason}")]
    Write { path: PathBuf, reason: String },
}

/// A tenant's learned shapes, by `server.tool`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShapeBook {
    version: u32,
    tools: BTreeMap<String, Learned>,
}

impl ShapeBook {
    /// `value` came back from `tool` (`server.tool`).
    pub fn record(&mut self, tool: &str, value: &Value, source: Source) -> Recorded {
        if !self.tools.contains_key(tool) && self.tools.len() >= MAX_TOOLS {
            return Recorded::Full;
        }
        let learned = self.tools.entry(tool.to_string()).or_default();
        let outcome = if learned.shape.is_empty() {
            Recorded::First
        } else if learned.shape.fits(value) {
            Recorded::Same
        } else {
            learned.widened += 1;
            Recorded::Widened
        };
        learned.shape.merge(Shape::of(value));
        match source {
            Source::Learned => learned.calls += 1,
            Source::Probed => learned.probes += 1,
        }
        outcome
    }

    /// What is known of `tool`'s results.
    pub fn get(&self, tool: &str) -> Option<&Learned> {
        self.tools.get(tool)
    }

    /// Every tool with a shape, by name.
    pub fn tools(&self) -> impl Iterator<Item = (&str, &Learned)> {
        self.tools.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// `tool`'s learned shape as JSON Schema (see [`Learned::schema`]).
    pub fn schema(&self, tool: &str) -> Option<Value> {
        self.tools.get(tool).map(Learned::schema)
    }

    /// Forgets the shapes of `server`'s tools (every tool's without one):
    /// how many were forgotten.
    pub fn forget(&mut self, server: Option<&str>) -> usize {
        let before = self.tools.len();
        match server {
            Some(server) => self
                .tools
                .retain(|tool, _| tool.split_once('.').map(|(s, _)| s) != Some(server)),
            None => self.tools.clear(),
        }
        before - self.tools.len()
    }

    /// The book at `path`; empty when there is none yet, or when it was
    /// written by another version. What is read is held to what a learned
    /// shape may be (field-name keys only, the bounds), whoever wrote it.
    pub fn load(path: &Path) -> Result<ShapeBook, BookError> {
        let read = |reason: String| BookError::Read {
            path: path.to_path_buf(),
            reason,
        };
        let meta = match std::fs::metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ShapeBook::new()),
            Err(e) => return Err(read(e.to_string())),
        };
        if meta.len() > MAX_FILE_BYTES {
            return Err(read(format!("{} bytes, over {MAX_FILE_BYTES}", meta.len())));
        }
        let text = std::fs::read_to_string(path).map_err(|e| read(e.to_string()))?;
        let book: ShapeBook = serde_json::from_str(&text).map_err(|e| read(e.to_string()))?;
        if book.version != VERSION {
            return Ok(ShapeBook::new());
        }
        let tools = book
            .tools
            .into_iter()
            .take(MAX_TOOLS)
            .map(|(tool, learned)| (tool, learned.sanitized()))
            .collect();
        Ok(ShapeBook {
            version: VERSION,
            tools,
        })
    }

    /// Writes the book to `path` whole (a temporary file renamed over it),
    /// so a reader never sees half of one.
    pub fn save(&self, path: &Path) -> Result<(), BookError> {
        let write = |reason: String| BookError::Write {
            path: path.to_path_buf(),
            reason,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| write(e.to_string()))?;
        }
        let text = serde_json::to_vec(self).map_err(|e| write(e.to_string()))?;
        let temporary = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&temporary, text).map_err(|e| write(e.to_string()))?;
        std::fs::rename(&temporary, path).map_err(|e| {
            let _ = std::fs::remove_file(&temporary);
            write(e.to_string())
        })
    }

    pub fn new() -> ShapeBook {
        ShapeBook {
            version: VERSION,
            tools: BTreeMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

    #[test]
    fn recording_says_when_the_shape_changed() {
        let mut book = ShapeBook::new();
        assert_eq!(
            book.record("git.log", &json!([{"sha": "a"}]), Source::Learned),
            Recorded::First
        );
        assert_eq!(
            book.record("git.log", &json!([{"sha": "b"}]), Source::Learned),
            Recorded::Same
        );
        assert_eq!(
            book.record(
                "git.log",
                &json!([{"sha": "c", "author": "x"}]),
                Source::Probed
            ),
            Recorded::Widened
        );
        let learned = book.get("git.log").cloned().unwrap_or_default();
        assert_eq!((learned.calls, learned.probes, learned.widened), (2, 1, 1));
        let schema = book.schema("git.log").unwrap_or_default();
        assert_eq!(
            schema["x-cem-shape"],
            json!({"source": "learned", "calls": 2, "probes": 1})
        );
        assert_eq!(schema["items"]["required"], json!(["sha"]));
    }

    #[test]
    fn a_full_book_learns_no_new_tool() {
        let mut book = ShapeBook::new();
        for i in 0..MAX_TOOLS {
            book.record(&format!("s.t{i}"), &json!(1), Source::Learned);
        }
        assert_eq!(
            book.record("s.another", &json!(1), Source::Learned),
            Recorded::Full
        );
        assert_eq!(
            book.record("s.t0", &json!(2), Source::Learned),
            Recorded::Same
        );
        assert_eq!(book.len(), MAX_TOOLS);
    }

    #[test]
    fn forget_takes_one_servers_tools_or_all() {
        let mut book = ShapeBook::new();
        for tool in ["git.log", "git.status", "time.now"] {
            book.record(tool, &json!({"a": 1}), Source::Learned);
        }
        assert_eq!(book.forget(Some("git")), 2);
        assert!(book.get("time.now").is_some());
        assert_eq!(book.forget(None), 1);
        assert!(book.is_empty());
    }

    #[test]
    fn a_book_is_written_whole_and_read_back() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("shapes.json");
        assert_eq!(ShapeBook::load(&path)?, ShapeBook::new());
        let mut book = ShapeBook::new();
        book.record(
            "git.log",
            &json!([{"sha": "a", "when": "2026-12-02"}]),
            Source::Learned,
        );
        book.save(&path)?;
        assert_eq!(ShapeBook::load(&path)?, book);
        std::fs::write(&path, "{not json")?;
        let err = ShapeBook::load(&path)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("remove the file"), "{err}");
        Ok(())
    }

    #[test]
    fn a_book_read_back_keeps_no_key_that_is_data() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("shapes.json");
        // As another writer might have left it: an email as a field name.
        std::fs::write(
            &path,
            r#"{"version":1,"tools":{"crm.find":{"shape":{"object":{"count":1,"fields":{
                "alice@example.com":{"integer":1},"id":{"integer":1}}}},"calls":1}}}"#,
        )?;
        let book = ShapeBook::load(&path)?;
        let text = serde_json::to_string(&book)?;
        assert!(!text.contains("alice"), "{text}");
        assert_eq!(
            book.schema("crm.find")
                .map(|s| s["additionalProperties"].clone()),
            Some(json!({"type": "integer"}))
        );
        Ok(())
    }
}
