//! `tokens`: the embedded o200k tokenizer from the shell, so benchmarks and
//! scripts count exactly as execute_code's `tokens` field does.

use std::io::{BufRead, Write};
use std::process::ExitCode;

use anyhow::{Context, bail};
use serde_json::Value;

pub fn run() -> anyhow::Result<ExitCode> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for (n, line) in std::io::stdin().lock().lines().enumerate() {
        let line = line.context("cannot read stdin")?;
        let Ok(Value::String(text)) = serde_json::from_str::<Value>(&line) else {
            bail!("line {}: expected a JSON string", n + 1);
        };
        writeln!(out, "{}", cem_engine::count_tokens(&text))?;
        // Answer each line as it comes, so a caller can keep one process
        // and ask line by line.
        out.flush()?;
    }
    Ok(ExitCode::SUCCESS)
}
