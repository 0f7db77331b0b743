//! Writes the search evaluation as JSON, so that an embedding model other
//! than the built-in one can be measured on exactly what the catalog
//! embeds and ranks:
//!
//! ```text
//! cargo run -p cem-catalog --example search_eval_export > eval.json
//! python3 crates/embed/model/compare.py eval.json MODEL_DIR
//! ```
//!
//! Each tool: its qualified name, its server and the two texts the catalog
//! embeds (`texts_to_embed`). Each need: its file, its text, its answers,
//! and the lexical score of every tool with a word in common (`search_words`
//! over the whole catalog: BM25 over the weighted fields, as the hybrid
//! ranking blends it; for a query with a tool's name words, as in
//! `named.jsonl`, these also carry the name bonuses that ranking by words
//! alone adds, so figures on that set are approximate).

#[path = "../tests/search_eval/load.rs"]
mod load;

use anyhow::Context;
use cem_catalog::{Catalog, texts_to_embed};
use serde_json::json;

fn main() -> anyhow::Result<()> {
    let entries = load::entries();
    let catalog = Catalog::new(entries.clone());
    let tools: Vec<_> = entries
        .iter()
        .map(|e| {
            let [short, long] = texts_to_embed(e);
            json!({"name": e.qualified_name(), "server": e.category, "short": short, "long": long})
        })
        .collect();
    let mut needs = Vec::new();
    for file in ["needs.jsonl", "named.jsonl"] {
        for need in load::read_needs(file) {
            let lexical: Vec<_> = catalog
                .search_words(&need.text, None, entries.len())
                .iter()
                .map(|h| json!([h.index, h.score]))
                .collect();
            needs.push(json!({
                "set": file, "line": need.line, "need": need.text,
                "answers": need.answers, "lexical": lexical,
            }));
        }
    }
    let out = json!({"tools": tools, "needs": needs});
    println!(
        "{}",
        serde_json::to_string(&out).context("the evaluation as JSON")?
    );
    Ok(())
}
