//! The text of an execution's answer, as the model reads it: the result,
//! the output when there is any, the error with one traceback, and the
//! notes the agent can act on; nothing else. Timing, call counts, token
//! figures and the rest stay in the structured answer (`structuredContent`,
//! the CLI's JSON), where a client or a person finds them and the model does
//! not pay for them.
//!
//! A table result (a DataFrame, `table()`, a list of flat dicts) reads as a
//! compact Markdown table with its rows capped.

use serde_json::Value;

/// The rows of a table result the text shows when the config says nothing.
pub const DEFAULT_TABLE_ROWS: usize = 30;
/// Columns shown; the rest are counted.
const TABLE_COLUMNS: usize = 20;
/// Characters of one cell shown; a longer one ends in "…".
const CELL_CHARS: usize = 60;

/// The text of the answer `body` (the execution's structured answer, after
/// its personal data was replaced by tokens).
pub fn text(body: &Value, table_rows: usize) -> String {
    let field = |k: &str| {
        body.get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let success = body
        .get("success")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut parts: Vec<String> = Vec::new();
    let output = field("output").map(|o| o.trim_end_matches('\n'));
    if let Some(output) = output.filter(|o| !o.is_empty()) {
        parts.push(output.to_string());
    }
    let result = body.get("result").unwrap_or(&Value::Null);
    if let Some(table) = table_of(body, result) {
        parts.push(markdown(&table, table_rows));
    } else if !result.is_null() || (success && parts.is_empty() && !shows_images(body)) {
        parts.push(match (result, parts.is_empty()) {
            // A text result alone reads as the text itself.
            (Value::String(s), true) => s.clone(),
            (value, true) => value.to_string(),
            (value, false) => format!("result: {value}"),
        });
    }
    if !success {
        parts.push(failure(field("error"), field("traceback")));
    }
    if let Some(stderr) = field("stderr") {
        parts.push(format!("stderr: {}", stderr.trim_end_matches('\n')));
    }
    for (key, label) in [
        ("note", "note"),
        ("warning", "warning"),
        ("store_warning", "warning"),
    ] {
        if let Some(text) = field(key) {
            parts.push(format!("{label}: {text}"));
        }
    }
    parts.join("\n")
}

fn shows_images(body: &Value) -> bool {
    body.get("images")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
}

/// The error once: the traceback already ends with the error's line, so
/// only a traceback that does not (a host-side failure with the
/// interpreter's last words) follows the error.
fn failure(error: Option<&str>, traceback: Option<&str>) -> String {
    let traceback = traceback.map(|t| t.trim_end_matches('\n'));
    match (error, traceback) {
        (Some(error), Some(tb)) => {
            let head = error.lines().next().unwrap_or_default();
            // The traceback's last line is the exception as Python formats
            // it; `error` may add to it (a SyntaxError's "(<code>, line 1)",
            // which the traceback shows above).
            let last = tb.lines().last().unwrap_or_default();
            let said = last == head || (last.contains(": ") && head.starts_with(last));
            if tb.ends_with(error) || said {
                tb.to_string()
            } else {
                format!("{error}\n{tb}")
            }
        }
        (Some(error), None) => error.to_string(),
        (None, Some(tb)) => tb.to_string(),
        (None, None) => "the execution failed without saying why".to_string(),
    }
}

/// A table result: its rows, its columns and how many rows it had in all.
struct Table<'a> {
    rows: &'a [Value],
    columns: Vec<&'a str>,
    total: usize,
}

/// The table in `result`, when the runtime marked it as one (`table`:
/// columns and row count) and it is still rows (a result cut to text is
/// no table).
fn table_of<'a>(body: &'a Value, result: &'a Value) -> Option<Table<'a>> {
    let marker = body.get("table")?;
    let rows = result.as_array()?;
    if !rows.iter().all(Value::is_object) {
        return None;
    }
    let columns: Vec<&str> = marker
        .get("columns")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    if columns.is_empty() {
        return None;
    }
    let total = marker
        .get("rows")
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(rows.len())
        .max(rows.len());
    Some(Table {
        rows,
        columns,
        total,
    })
}

fn markdown(table: &Table<'_>, max_rows: usize) -> String {
    let shown = &table.columns[..table.columns.len().min(TABLE_COLUMNS)];
    let more_columns = table.columns.len() - shown.len();
    let mut out = String::new();
    let line = |cells: &mut dyn Iterator<Item = String>, out: &mut String| {
        out.push('|');
        for cell in cells {
            out.push_str(&cell);
            out.push('|');
        }
        if more_columns > 0 {
            out.push('…');
            out.push('|');
        }
        out.push('\n');
    };
    line(&mut shown.iter().map(|c| cell_text(c)), &mut out);
    line(&mut shown.iter().map(|_| "-".to_string()), &mut out);
    for row in table.rows.iter().take(max_rows) {
        line(
            &mut shown
                .iter()
                .map(|c| row.get(*c).map(cell).unwrap_or_default()),
            &mut out,
        );
    }
    let more_rows = table.total - table.rows.len().min(max_rows);
    if more_rows > 0 {
        out.push_str(&format!("… {more_rows} more rows\n"));
    }
    if more_columns > 0 {
        out.push_str(&format!("… {more_columns} more columns\n"));
    }
    out.truncate(out.trim_end_matches('\n').len());
    out
}

fn cell(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => cell_text(s),
        other => cell_text(&other.to_string()),
    }
}

/// A cell on one line, without a bare `|`, at most [`CELL_CHARS`].
fn cell_text(text: &str) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == CELL_CHARS {
            out.push('…');
            break;
        }
        match c {
            '|' => out.push_str("\\|"),
            '\n' | '\r' | '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_value_alone_is_the_whole_text() {
        let body = json!({"success": true, "result": 1, "output": "", "execution_time_ms": 3, "tool_calls": 0});
        assert_eq!(text(&body, 30), "1");
        let body = json!({"success": true, "result": "a report\nof two lines", "output": ""});
        assert_eq!(text(&body, 30), "a report\nof two lines");
        let body = json!({"success": true, "result": null, "output": ""});
        assert_eq!(text(&body, 30), "null");
        // The images are the answer.
        let body = json!({"success": true, "result": null, "output": "", "images": [{"path": "shown/a.png"}]});
        assert_eq!(text(&body, 30), "");
    }

    #[test]
    fn output_comes_first_and_the_result_is_named() {
        let body = json!({"success": true, "result": {"n": 2}, "output": "hello\n"});
        assert_eq!(text(&body, 30), "hello\nresult: {\"n\":2}");
        let body = json!({"success": true, "result": null, "output": "only printed\n"});
        assert_eq!(text(&body, 30), "only printed");
    }

    #[test]
    fn an_error_is_said_once() {
        let tb = "Traceback (most recent call last):\n  File \"<code>\", line 1, in <module>\nZeroDivisionError: division by zero\n";
        let body = json!({"success": false, "result": null, "output": "",
            "error": "ZeroDivisionError: division by zero", "traceback": tb});
        let t = text(&body, 30);
        assert_eq!(t, tb.trim_end());
        assert_eq!(t.matches("division by zero").count(), 1);
    }

    #[test]
    fn a_syntax_error_is_said_once_and_a_bare_exception_keeps_its_message() {
        let tb = "  File \"<code>\", line 1\n    x y\n      ^\nSyntaxError: invalid syntax\n";
        let body = json!({"success": false, "error": "SyntaxError: invalid syntax (<code>, line 1)", "traceback": tb});
        assert_eq!(text(&body, 30), tb.trim_end());
        let tb = "Traceback (most recent call last):\n  File \"<code>\", line 1, in <module>\nMemoryError\n";
        let body = json!({"success": false, "error": "MemoryError: the memory limit (500 MB) was reached", "traceback": tb});
        assert!(
            text(&body, 30)
                .starts_with("MemoryError: the memory limit (500 MB) was reached\nTraceback")
        );
    }

    #[test]
    fn a_host_failure_keeps_its_reason_and_the_last_words() {
        let body = json!({"success": false, "result": null, "output": "",
            "error": "the interpreter crashed (SIGSEGV)", "traceback": "Fatal Python error: Segmentation fault"});
        assert_eq!(
            text(&body, 30),
            "the interpreter crashed (SIGSEGV)\nFatal Python error: Segmentation fault"
        );
        let body = json!({"success": false, "error": "TimeoutError: the code ran longer than 1 s"});
        assert_eq!(
            text(&body, 30),
            "TimeoutError: the code ran longer than 1 s"
        );
    }

    #[test]
    fn notes_and_warnings_are_labelled() {
        let body = json!({"success": true, "result": 1, "output": "", "note": "result was cut",
            "warning": "no OS isolation"});
        assert_eq!(
            text(&body, 30),
            "1\nnote: result was cut\nwarning: no OS isolation"
        );
    }

    #[test]
    fn a_marked_table_reads_as_markdown_with_its_rows_capped() {
        let rows: Vec<Value> = (0..5)
            .map(|i| json!({"region": format!("r{i}"), "total": i * 10, "note": null}))
            .collect();
        let body = json!({"success": true, "result": rows, "output": "",
            "table": {"columns": ["region", "total", "note"], "rows": 12}});
        assert_eq!(
            text(&body, 3),
            "|region|total|note|\n|-|-|-|\n|r0|0||\n|r1|10||\n|r2|20||\n… 9 more rows"
        );
    }

    #[test]
    fn cells_stay_on_one_line_and_short() {
        let long = "x".repeat(100);
        let body = json!({"success": true, "result": [{"a": "p|q\nr", "b": long}], "output": "",
            "table": {"columns": ["a", "b"], "rows": 1}});
        let t = text(&body, 30);
        assert!(t.contains("|p\\|q r|"), "{t}");
        assert!(t.contains(&format!("{}…|", "x".repeat(60))), "{t}");
        assert_eq!(t.lines().count(), 3);
    }

    #[test]
    fn wide_tables_count_their_hidden_columns() {
        let columns: Vec<String> = (0..25).map(|i| format!("c{i}")).collect();
        let row: serde_json::Map<String, Value> =
            columns.iter().map(|c| (c.clone(), json!(1))).collect();
        let body = json!({"success": true, "result": [row], "output": "",
            "table": {"columns": columns, "rows": 1}});
        let t = text(&body, 30);
        assert!(t.ends_with("… 5 more columns"), "{t}");
        assert!(
            t.lines().next().is_some_and(|l| l.ends_with("|c19|…|")),
            "{t}"
        );
    }

    #[test]
    fn a_result_cut_to_text_is_no_table() {
        let body = json!({"success": true, "result": "[{\"a\": 1}, ... cut", "output": "",
            "table": {"columns": ["a"], "rows": 1000}});
        assert_eq!(text(&body, 30), "[{\"a\": 1}, ... cut");
    }
}
