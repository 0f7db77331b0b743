//! Errors a config file can produce.

use std::fmt;
use std::path::PathBuf;

/// One thing wrong with a config file, located by its key path
/// (`mcpServers.git.args[2]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub key: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.key, self.message)
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is not valid JSON (line {line}, column {column}): {message}")]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("config file {path} is invalid:\n{}", list(.problems))]
    Invalid {
        path: PathBuf,
        problems: Vec<Problem>,
    },
    #[error(
        "config file {path} was named by {origin} but does not exist; create it or drop {origin}"
    )]
    Missing { path: PathBuf, origin: String },
}

fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("  - {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}
