//! Reading the log back: the last lines that pass a filter.

use std::path::Path;
use std::time::SystemTime;

use serde_json::Value;

use crate::AuditError;
use crate::log::rotated;

/// Which lines `audit` shows. Every set field must match.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// A tool (`server.tool`), a server (`server`), or a glob on either,
    /// matched as the policy matches its rules (case, `-`, `_` and `.` in
    /// a tool's name do not count).
    pub tool: Option<cem_policy::Pattern>,
    /// An MCP session or an execute_code `session_id`.
    pub session: Option<String>,
    /// `allow`, `ask` or `deny` (the decision), or an answer to an
    /// approval (`allow_once`, `deny`, ...): matches decision lines.
    pub decision: Option<String>,
    /// `execution`, `call` or `decision`.
    pub event: Option<String>,
    pub since: Option<SystemTime>,
    pub until: Option<SystemTime>,
}

impl Filter {
    pub fn matches(&self, line: &Value) -> bool {
        let text = |key: &str| line.get(key).and_then(Value::as_str).unwrap_or_default();
        if let Some(pattern) = &self.tool {
            let (server, tool) = text("tool").split_once('.').unwrap_or((text("tool"), ""));
            if !pattern.matches(server, tool) {
                return false;
            }
        }
        if let Some(session) = &self.session
            && text("session") != session
            && text("session_id") != session
        {
            return false;
        }
        if let Some(decision) = &self.decision
            && text("decision") != decision
            && text("answer") != decision
        {
            return false;
        }
        if let Some(event) = &self.event
            && text("event") != event
        {
            return false;
        }
        if self.since.is_some() || self.until.is_some() {
            let Ok(ts) = humantime::parse_rfc3339_weak(text("ts")) else {
                return false;
            };
            if self.since.is_some_and(|s| ts < s) || self.until.is_some_and(|u| ts > u) {
                return false;
            }
        }
        true
    }
}

/// The last `last` lines of the log at `path` (its rotated files included,
/// oldest first) that pass `filter`. Lines that are not JSON objects (a
/// torn write after a crash) are skipped.
pub fn read(path: &Path, filter: &Filter, last: usize) -> Result<Vec<Value>, AuditError> {
    let mut files = Vec::new();
    let mut n = 1;
    loop {
        let old = rotated(path, n);
        if !old.exists() {
            break;
        }
        files.push(old);
        n += 1;
    }
    files.reverse();
    files.push(path.to_path_buf());
    let mut out = std::collections::VecDeque::new();
    for file in files {
        let text = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(AuditError::Read { path: file, source }),
        };
        for line in text.lines() {
            let Ok(value) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if value.is_object() && filter.matches(&value) {
                out.push_back(value);
                if out.len() > last {
                    out.pop_front();
                }
            }
        }
    }
    Ok(out.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AuditLog;

    fn pattern(text: &str) -> cem_policy::Pattern {
        cem_policy::Pattern::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }
    use serde_json::json;

    #[test]
    fn filters_pick_lines_across_rotated_files() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::new(path.clone(), 4096, 10);
        for i in 0..60 {
            let tool = if i % 2 == 0 {
                "memory.create_entities"
            } else {
                "git.git_log"
            };
            let decision = if i % 3 == 0 { "deny" } else { "allow" };
            let _ = log.append("decision", json!({"tool": tool, "decision": decision, "session": format!("s{}", i % 4), "n": i}));
        }
        assert!(rotated(&path, 1).exists(), "the test needs rotation");
        let all = read(&path, &Filter::default(), 1000).unwrap_or_default();
        assert_eq!(all.len(), 60);
        assert_eq!(
            all.first().map(|v| v["n"].clone()),
            Some(json!(0)),
            "oldest first"
        );
        let last = read(&path, &Filter::default(), 5).unwrap_or_default();
        let ns: Vec<_> = last.iter().map(|v| v["n"].as_u64().unwrap_or(0)).collect();
        assert_eq!(ns, [55, 56, 57, 58, 59]);
        let memory = Filter {
            tool: Some(pattern("memory")),
            ..Filter::default()
        };
        assert_eq!(read(&path, &memory, 1000).unwrap_or_default().len(), 30);
        let denied_git = Filter {
            tool: Some(pattern("git.git_*")),
            decision: Some("deny".into()),
            ..Filter::default()
        };
        let found = read(&path, &denied_git, 1000).unwrap_or_default();
        assert_eq!(found.len(), 10);
        assert!(found.iter().all(|v| v["n"].as_u64().unwrap_or(0) % 6 == 3));
        let session = Filter {
            session: Some("s1".into()),
            ..Filter::default()
        };
        assert_eq!(read(&path, &session, 1000).unwrap_or_default().len(), 15);
        let future = Filter {
            since: Some(SystemTime::now() + std::time::Duration::from_secs(3600)),
            ..Filter::default()
        };
        assert!(read(&path, &future, 1000).unwrap_or_default().is_empty());
    }

    #[test]
    fn a_tool_is_found_under_every_spelling_the_policy_treats_as_it() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::new(path.clone(), 1 << 20, 2);
        for tool in [
            "everything.get-sum",
            "everything.GET_SUM",
            "Everything.Get-Sum",
            "everything.get_summary",
        ] {
            let _ = log.append("decision", json!({"tool": tool}));
        }
        for asked in [
            "everything.get_sum",
            "everything.get-sum",
            "EVERYTHING.get_sum",
            "Everything",
        ] {
            let filter = Filter {
                tool: Some(pattern(asked)),
                ..Filter::default()
            };
            let found = read(&path, &filter, 100).unwrap_or_default();
            let expected = if asked == "Everything" { 4 } else { 3 };
            assert_eq!(found.len(), expected, "--tool {asked}: {found:?}");
        }
    }
}
