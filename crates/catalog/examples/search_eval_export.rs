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
//! alone adds, so figures on that set are approximate). With the built-in
//! model (feature `semantic`), each need also carries what learning from
//! use works with, so that `compare.py --learning` can weigh the built-in
//! model and a transformer on the same records: `terms`, its words as a
//! record keeps them, stemmed; `static`, the built-in model's vector of
//! those words; `static_query`, its vector of all the need's words, as
//! ranking by meaning embeds a query (misspellings not mended); `hybrid`,
//! the catalog's hybrid score of every tool it ranks. Each tool then also
//! carries `static`, its vector as the catalog ranks with it (what learning
//! moves). `paraphrases.jsonl` (the second phrasing of every need) is
//! exported too.

#[path = "../tests/search_eval/load.rs"]
mod load;

use anyhow::Context;
use cem_catalog::learned::{term_set, words_of};
use cem_catalog::{Catalog, Semantic, builtin_model, split_words, texts_to_embed};
use serde_json::json;

fn main() -> anyhow::Result<()> {
    let entries = load::entries();
    let catalog = Catalog::new(entries.clone());
    let model = builtin_model()
        .transpose()
        .context("the built-in model does not load")?;
    let hybrid = model.map(|m| {
        (
            m,
            Catalog::hybrid(entries.clone(), Semantic::new(m, &entries, None)),
        )
    });
    // The tools' vectors as the catalog ranks with them.
    let vectors = model.map(|m| Semantic::new(m, &entries, None));
    let tools: Vec<_> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let [short, long] = texts_to_embed(e);
            let mut tool = json!({"name": e.qualified_name(), "server": e.category, "short": short, "long": long});
            if let Some(v) = vectors.as_ref().and_then(|s| s.entry_vector(i)) {
                tool["static"] = json!(v);
            }
            tool
        })
        .collect();
    let mut needs = Vec::new();
    for file in ["needs.jsonl", "named.jsonl", "paraphrases.jsonl"] {
        for need in load::read_needs(file) {
            let lexical: Vec<_> = catalog
                .search_words(&need.text, None, entries.len())
                .iter()
                .map(|h| json!([h.index, h.score]))
                .collect();
            let mut out = json!({
                "set": file, "line": need.line, "need": need.text,
                "answers": need.answers, "lexical": lexical,
            });
            if let Some((model, hybrid)) = &hybrid {
                let words = words_of(&need.text);
                let terms = term_set(&words);
                let scores: Vec<_> = hybrid
                    .search(&need.text, None, entries.len())
                    .iter()
                    .map(|h| json!([h.index, h.score]))
                    .collect();
                out["terms"] = json!(terms);
                out["static"] = json!(model.embed(words.iter().map(String::as_str)));
                out["static_query"] =
                    json!(model.embed(split_words(&need.text).iter().map(String::as_str)));
                out["hybrid"] = json!(scores);
            }
            needs.push(out);
        }
    }
    let out = json!({"tools": tools, "needs": needs});
    println!(
        "{}",
        serde_json::to_string(&out).context("the evaluation as JSON")?
    );
    Ok(())
}
