//! The line protocol of `tokens` and `pii detect`: JSON lines on stdin,
//! each a JSON string, and one answer line per input line on stdout.

use std::io::{BufRead, Write};
use std::process::ExitCode;

use anyhow::{Context, bail};
use serde_json::Value;

/// Writes `answer(text)` for each input line, flushed as it goes, so a
/// caller can keep one process and ask line by line.
pub fn answer_each(mut answer: impl FnMut(&str) -> String) -> anyhow::Result<ExitCode> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for (n, line) in std::io::stdin().lock().lines().enumerate() {
        let line = line.context("cannot read stdin")?;
        let Ok(Value::String(text)) = serde_json::from_str::<Value>(&line) else {
            bail!("line {}: expected a JSON string", n + 1);
        };
        writeln!(out, "{}", answer(&text))?;
        out.flush()?;
    }
    Ok(ExitCode::SUCCESS)
}
