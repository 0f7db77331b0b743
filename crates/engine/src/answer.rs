//! The answer of one execution, as the model sees it.

use serde::Serialize;
use serde_json::Value;

use crate::process::Failure;

/// The seed's fields (`success`, `result`, `output`, `execution_time_ms`,
/// `error`, `traceback`) plus notes the agent can act on.
#[derive(Debug, Clone, Serialize, Default)]
pub struct ExecAnswer {
    pub success: bool,
    pub result: Value,
    pub output: String,
    pub execution_time_ms: u64,
    /// Upstream tool calls the code made.
    pub tool_calls: u64,
    /// o200k tokens of the tool results that stayed in the sandbox against
    /// the tokens of this answer (when the code called tools).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceback: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// What a script wrote to stderr (for `run`; snippets merge it into output).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// The status a script passed to sys.exit() (for `run`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// Present when the code ran without OS isolation, or without the
    /// declared packages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// When the execution waited on package installs: for how long, what
    /// was installed, whether it all came ready-built.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packages: Option<Value>,
    /// When the result is a table (a DataFrame, `table()`, flat dicts):
    /// `{"columns": [...], "rows": N}`, N counting rows the answer had no
    /// room for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table: Option<Value>,
    /// The module an uncaught ModuleNotFoundError named (for the note the
    /// host adds; not part of the answer).
    #[serde(skip)]
    pub missing_module: Option<String>,
    /// The images the code showed, for the host to read from the
    /// workspace, check and attach (not part of the answer: the host puts
    /// what it attached there).
    #[serde(skip)]
    pub shown: Vec<Shown>,
}

/// An image the code showed: a file in the workspace and the type the
/// runtime sniffed (the host checks the bytes again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    pub path: String,
    pub mime: String,
}

/// The most images the host takes from one runtime answer, whatever it
/// claims (the config's limit is at most this).
const MAX_SHOWN: usize = 100;
/// The most columns a table marker names.
const MAX_COLUMNS: usize = 1000;

impl Shown {
    fn from_value(v: &Value) -> Option<Shown> {
        let path = v.get("path")?.as_str()?;
        let mime = v.get("mime")?.as_str()?;
        let known = matches!(mime, "image/png" | "image/jpeg" | "image/svg+xml");
        (known && !path.is_empty() && path.len() <= 4096).then(|| Shown {
            path: path.to_string(),
            mime: mime.to_string(),
        })
    }
}

/// The runtime's table marker, if it is one: columns that are names, and
/// a row count.
fn table_marker(v: &Value) -> Option<Value> {
    let columns = v.get("columns")?.as_array()?;
    let rows = v.get("rows")?.as_u64()?;
    let ok = !columns.is_empty()
        && columns.len() <= MAX_COLUMNS
        && columns
            .iter()
            .all(|c| c.as_str().is_some_and(|s| s.len() <= 1000));
    ok.then(|| serde_json::json!({"columns": columns, "rows": rows}))
}

impl ExecAnswer {
    /// From the runtime's result message, re-capped on the host (the
    /// runtime runs agent code and cannot be trusted to have capped).
    pub fn from_runtime(msg: &Value, cap: usize) -> Self {
        if msg.get("type").and_then(Value::as_str) != Some("result") {
            return ExecAnswer::failed(
                &Failure::Protocol(
                    "the runtime answered with something that is not a result".into(),
                ),
                0,
                0,
                false,
            );
        }
        let text = |k: &str| msg.get(k).and_then(Value::as_str).map(str::to_string);
        let mut answer = ExecAnswer {
            success: msg.get("success").and_then(Value::as_bool).unwrap_or(false),
            result: msg.get("result").cloned().unwrap_or(Value::Null),
            output: text("output").unwrap_or_default(),
            error: text("error").map(|e| cut(&e, cap)),
            traceback: text("traceback").map(|t| cut(&t, cap)),
            note: text("note").map(|n| cut(&n, 1000)),
            exit_code: msg.get("exit_code").and_then(Value::as_i64),
            stderr: text("stderr"),
            missing_module: text("missing_module").filter(|m| m.len() <= 200),
            table: msg.get("table").and_then(table_marker),
            shown: msg
                .get("images")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .take(MAX_SHOWN)
                        .filter_map(Shown::from_value)
                        .collect()
                })
                .unwrap_or_default(),
            ..Default::default()
        };
        // The runtime caps at `cap` and adds a note; only a runtime that
        // agent code tampered with goes past that.
        if answer.output.chars().count() > cap + 1000 {
            answer.output = cut(&answer.output, cap);
        }
        let size = serde_json::to_string(&answer.result)
            .map(|s| s.len())
            .unwrap_or(0);
        if size > cap + 2 {
            answer.table = None;
            answer.result = Value::String(cut(&answer.result.to_string(), cap));
            answer.note = Some(format!(
                "result was {size} characters as JSON, over the {cap} limit; it is cut. Return a summary, \
                 or write the data to a file with write_file()"
            ));
        }
        answer
    }

    /// Whether the code failed on a full disk (`ENOSPC`, which the kernel
    /// gives a write past the quota).
    pub fn ran_out_of_space(&self) -> bool {
        [&self.error, &self.traceback, &self.stderr]
            .into_iter()
            .flatten()
            .any(|t| t.contains("[Errno 28]") || t.contains("No space left on device"))
    }

    /// For an execution that did not come back.
    pub fn failed(failure: &Failure, timeout_s: u64, memory_mb: u64, in_session: bool) -> Self {
        let lost = if in_session {
            " The session's interpreter was ended: its variables are gone, and the next call starts afresh."
        } else {
            ""
        };
        let (error, traceback) = match failure {
            Failure::Timeout => (
                format!(
                    "TimeoutError: the code ran longer than {timeout_s} s and was stopped. Make it faster, \
                     process less data per call, or pass a larger timeout_seconds.{lost}"
                ),
                None,
            ),
            Failure::Died {
                status,
                out_of_memory,
                stderr,
            } => {
                let why = match (status, out_of_memory) {
                    (_, true) | (Some(137), _) => format!(
                        "MemoryError: the interpreter was killed at the memory limit of {memory_mb} MB. Use less \
                         memory (stream or chunk the data) or pass a larger memory_mb."
                    ),
                    (Some(139), _) => "the interpreter crashed (SIGSEGV), typically from recursion too deep for the C \
                                       stack; make the recursion iterative or shallower."
                        .to_string(),
                    (Some(152), _) => "the CPU time limit was reached".to_string(),
                    (Some(125), _) => "the sandbox could not be set up for this execution".to_string(),
                    (Some(code), _) => format!("the interpreter exited unexpectedly (status {code})"),
                    (None, _) => "the interpreter ended unexpectedly".to_string(),
                };
                let tail: String = stderr
                    .chars()
                    .rev()
                    .take(2000)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                (
                    format!("{why}{lost}"),
                    (!tail.trim().is_empty()).then_some(tail),
                )
            }
            Failure::Protocol(p) => (
                format!("the interpreter broke the runtime protocol: {p}.{lost}"),
                None,
            ),
            Failure::Disk { used_mb } => (
                format!(
                    "OSError: the code used up about {used_mb} MB of disk, over the per-execution quota \
                     (sandbox.disk_quota_mb) or what is left of the workspace quota (quotas.workspace_bytes), or the disk is nearly full, and was stopped. The files it \
                     wrote remain in the workspace: delete what is not needed.{lost}"
                ),
                None,
            ),
        };
        ExecAnswer {
            success: false,
            error: Some(error),
            traceback,
            ..Default::default()
        }
    }
}

/// The first `cap` characters of `s`, with a note of what was cut.
fn cut(s: &str, cap: usize) -> String {
    let total = s.chars().count();
    if total <= cap {
        return s.to_string();
    }
    let kept: String = s.chars().take(cap).collect();
    // End on a word boundary: a value cut in half (an email, a card number)
    // would reach the model where tokenization can no longer see it.
    let boundary = kept.rfind([' ', '\n', '\t', ',', ';', '|']).map(|i| i + 1);
    let kept = match boundary {
        Some(end) if kept.len() - end <= 256 => kept[..end].to_string(),
        _ => {
            let mut end = kept.len().saturating_sub(256);
            while !kept.is_char_boundary(end) {
                end -= 1;
            }
            kept[..end].to_string()
        }
    };
    format!(
        "{kept}\n[truncated: {} more characters. Print less, or write large data to a file with write_file()]",
        total - kept.chars().count()
    )
}
