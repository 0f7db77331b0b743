//! The audit log of tool calls made from code.
//!
//! One JSON object per line, appended to `audit.jsonl` (0600) and never
//! rewritten: each line has `ts` (RFC 3339, UTC, milliseconds) and `event`
//! (`execution`, `call`, `decision`, or `pins` for an accepted change) and
//! the event's fields. When the file
//! would pass its size limit it is renamed to `audit.jsonl.1` (older ones
//! shift to `.2`, ...; the oldest beyond `keep` is deleted) and a new one
//! starts. Every string is passed through the personal-data detector before
//! it is written, so values such as emails or keys never appear in clear.
//!
//! [`AuditLog::append`] returns an error when the line could not be written:
//! callers refuse the tool call then, so no call goes unrecorded.

mod log;
mod query;
mod redact;

pub use log::{AuditError, AuditLog, AuditSink};
pub use query::{Filter, read};
pub use redact::redact;
