//! Appending to the log, and rotating it by size.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use serde_json::{Map, Value};

use crate::redact::redact_value;

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(
        "cannot write the audit log {path}: {source}; the tool call is refused because it could not be recorded. Free disk space or fix policy.audit.path"
    )]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read the audit log {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Somewhere else every record goes too (a deployment's shared store).
pub trait AuditSink: Send + Sync + std::fmt::Debug {
    /// Takes one record, redacted already. Must not block.
    fn record(&self, record: &Value);
}

/// An append-only JSON-lines file, rotated when it reaches `max_bytes`.
pub struct AuditLog {
    path: PathBuf,
    max_bytes: u64,
    keep: u32,
    file: Mutex<Option<File>>,
    sink: std::sync::OnceLock<std::sync::Arc<dyn AuditSink>>,
    scrub: std::sync::OnceLock<Scrub>,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("path", &self.path)
            .field("max_bytes", &self.max_bytes)
            .field("keep", &self.keep)
            .finish_non_exhaustive()
    }
}

/// What removes the host's own secrets (config credentials) from a record
/// before it is written or shared.
pub type Scrub = std::sync::Arc<dyn Fn(&mut Value) + Send + Sync>;

impl AuditLog {
    /// The log at `path` (its directory is made on the first write).
    /// Rotated files beyond `keep` are deleted.
    pub fn new(path: PathBuf, max_bytes: u64, keep: u32) -> Self {
        AuditLog {
            path,
            max_bytes: max_bytes.max(4096),
            keep: keep.max(1),
            file: Mutex::new(None),
            sink: std::sync::OnceLock::new(),
            scrub: std::sync::OnceLock::new(),
        }
    }

    /// Runs `scrub` on every record appended from now on, before it is
    /// written or sent anywhere (once).
    pub fn scrub_with(&self, scrub: Scrub) {
        let _ = self.scrub.set(scrub);
    }

    /// Sends every record appended from now on to `sink` as well (once).
    pub fn set_sink(&self, sink: std::sync::Arc<dyn AuditSink>) {
        let _ = self.sink.set(sink);
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `{"ts", "event", ...fields}` as one line, personal data
    /// redacted. Written with one `write` on a file opened for appending,
    /// so lines of two processes sharing the log do not interleave.
    pub fn append(&self, event: &str, fields: Value) -> Result<(), AuditError> {
        let mut record = Map::new();
        record.insert(
            "ts".into(),
            Value::String(humantime::format_rfc3339_millis(SystemTime::now()).to_string()),
        );
        record.insert("event".into(), Value::String(event.to_string()));
        if let Value::Object(fields) = fields {
            record.extend(fields);
        }
        let mut record = Value::Object(record);
        if let Some(scrub) = self.scrub.get() {
            scrub(&mut record);
        }
        redact_value(&mut record);
        if let Some(sink) = self.sink.get() {
            sink.record(&record);
        }
        let mut line = record.to_string();
        line.push('\n');
        let fail = |source| AuditError::Write {
            path: self.path.clone(),
            source,
        };
        let mut guard = self
            .file
            .lock()
            .map_err(|_| fail(std::io::Error::other("the audit log's lock is poisoned")))?;
        let file = self.current(&mut guard).map_err(fail)?;
        let size = file.metadata().map_err(fail)?.len();
        let file = if size > 0 && size + line.len() as u64 > self.max_bytes {
            self.rotate().map_err(fail)?;
            *guard = None;
            self.current(&mut guard).map_err(fail)?
        } else {
            file
        };
        file.write_all(line.as_bytes()).map_err(fail)
    }

    /// The open file, reopened when another process rotated the log.
    fn current<'g>(&self, slot: &'g mut Option<File>) -> std::io::Result<&'g mut File> {
        let moved = match (slot.as_ref(), std::fs::metadata(&self.path)) {
            (Some(open), Ok(on_disk)) => open.metadata()?.ino() != on_disk.ino(),
            (Some(_), Err(_)) => true,
            (None, _) => true,
        };
        if moved {
            if let Some(dir) = self.path.parent()
                && !dir.exists()
            {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)?;
            }
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(&self.path)?;
            // A file made before us (by hand, or by another tool) keeps its
            // mode on open: the log holds who called what, for the owner
            // only. Only our own regular file is changed (not /dev/null, not
            // a file another user shares with us), and a failure is told,
            // not fatal: the log still works.
            let meta = file.metadata()?;
            if meta.is_file()
                && meta.uid() == nix::unistd::geteuid().as_raw()
                && meta.permissions().mode() & 0o077 != 0
                && let Err(e) = file.set_permissions(std::fs::Permissions::from_mode(0o600))
            {
                tracing::warn!(
                    path = %self.path.display(),
                    "the audit log is readable by others and its mode could not be set to 0600: {e}"
                );
            }
            *slot = Some(file);
        }
        slot.as_mut()
            .ok_or_else(|| std::io::Error::other("the audit log is not open"))
    }

    /// `audit.jsonl` becomes `.1`, `.1` becomes `.2`, ...; the oldest goes.
    fn rotate(&self) -> std::io::Result<()> {
        let _ = std::fs::remove_file(rotated(&self.path, self.keep));
        for n in (1..self.keep).rev() {
            let from = rotated(&self.path, n);
            if from.exists() {
                std::fs::rename(&from, rotated(&self.path, n + 1))?;
            }
        }
        std::fs::rename(&self.path, rotated(&self.path, 1))
    }
}

/// The `n`th rotated file of `path` (`audit.jsonl.n`).
pub(crate) fn rotated(path: &Path, n: u32) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lines_are_appended_redacted_and_rotated_by_size() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("audit").join("audit.jsonl");
        let log = AuditLog::new(path.clone(), 4096, 2);
        for i in 0..100 {
            let appended = log.append(
                "call",
                json!({"tool": "memory.create_entities", "n": i, "error": "bad ana@example.com"}),
            );
            assert!(appended.is_ok(), "{appended:?}");
        }
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        let first = std::fs::read_to_string(rotated(&path, 1)).unwrap_or_default();
        let second = std::fs::read_to_string(rotated(&path, 2)).unwrap_or_default();
        assert!(
            !rotated(&path, 3).exists(),
            "only `keep` rotated files stay"
        );
        for text in [&current, &first, &second] {
            assert!(!text.is_empty() && text.len() <= 4096);
            assert!(!text.contains("ana@example.com"));
            for line in text.lines() {
                let v: Value = serde_json::from_str(line).unwrap_or_default();
                assert_eq!(v["event"], "call");
                assert!(v["ts"].as_str().is_some_and(|t| t.ends_with('Z')));
            }
        }
        let last: Value =
            serde_json::from_str(current.lines().last().unwrap_or_default()).unwrap_or_default();
        assert_eq!(last["n"], 99);
        let mode = std::fs::metadata(&path)
            .map(|m| m.mode() & 0o777)
            .unwrap_or(0);
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn a_log_that_cannot_be_written_is_an_error() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, "x").unwrap_or_else(|e| panic!("{e}"));
        let log = AuditLog::new(blocker.join("audit.jsonl"), 1 << 20, 3);
        let err = log
            .append("call", json!({}))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("the tool call is refused"), "{err}");
    }

    #[test]
    fn a_log_made_readable_to_others_is_made_private_again() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("audit").join("audit.jsonl");
        let log = AuditLog::new(path.clone(), 1 << 20, 2);
        assert!(
            log.append("call", serde_json::json!({"tool": "a.b"}))
                .is_ok()
        );
        let mode = |p: &Path| {
            std::fs::metadata(p)
                .map(|m| m.permissions().mode() & 0o777)
                .unwrap_or(0)
        };
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(dir.path().join("audit").as_path()), 0o700);
        let other = dir.path().join("other.jsonl");
        assert!(std::fs::write(&other, "").is_ok());
        assert!(std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o666)).is_ok());
        let log = AuditLog::new(other.clone(), 1 << 20, 2);
        assert!(
            log.append("call", serde_json::json!({"tool": "a.b"}))
                .is_ok()
        );
        assert_eq!(mode(&other), 0o600);
    }
}
