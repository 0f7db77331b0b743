//! The evaluation's tool lists and needs, shared by the test
//! (`tests/search_eval.rs`) and the export for other models
//! (`examples/search_eval_export.rs`).

use std::path::Path;
use std::sync::Arc;

use cem_catalog::Entry;
use serde_json::Value;

pub struct Need {
    pub line: usize,
    pub text: String,
    pub answers: Vec<String>,
}

fn dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/search_eval")
}

pub fn entries() -> Vec<Entry> {
    entries_in("servers")
}

/// The tools of the held-out servers (`held_out/servers/`), which no
/// constant of the search was chosen on.
#[allow(dead_code)] // used by the test, not by the export
pub fn held_out_entries() -> Vec<Entry> {
    entries_in("held_out/servers")
}

fn entries_in(servers: &str) -> Vec<Entry> {
    let mut files: Vec<_> = std::fs::read_dir(dir().join(servers))
        .unwrap_or_else(|e| panic!("{servers}/: {e}"))
        .map(|f| f.unwrap_or_else(|e| panic!("{servers}/: {e}")).path())
        .collect();
    files.sort();
    let mut entries = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        let list: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        let server = list["server"]
            .as_str()
            .unwrap_or_else(|| panic!("{file:?}: no server"));
        let instructions: Option<Arc<str>> = list["instructions"].as_str().map(Arc::from);
        for tool in list["tools"].as_array().into_iter().flatten() {
            entries.push(
                Entry::upstream(server, tool, instructions.clone())
                    .unwrap_or_else(|| panic!("{file:?}: a tool without a name")),
            );
        }
    }
    entries
}

pub fn read_needs(file: &str) -> Vec<Need> {
    let text = std::fs::read_to_string(dir().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let v: Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("line {}: {e}", i + 1));
            Need {
                line: i + 1,
                text: v["need"].as_str().unwrap_or_default().to_string(),
                answers: v["answers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|a| a.as_str().map(str::to_string))
                    .collect(),
            }
        })
        .collect()
}
