//! Search latency over a catalog of 10,000 tools built from real schemas.
//!
//! `cargo bench -p cem-catalog --bench search`. The five test servers'
//! real tool lists (benches/real_tools.json) are replicated under 200
//! server names to 10,000 entries; 36 natural-language queries are run
//! round-robin and each search is timed. Prints p50 and p99.

use std::time::Instant;

use cem_catalog::{Catalog, Entry, EntryKind};

const QUERIES: &[&str] = &[
    "show the commit history of a repository",
    "what changed in the working tree",
    "add files to the staging area",
    "record changes with a message",
    "make a new branch",
    "switch to another branch",
    "list branches",
    "diff of staged changes",
    "unstage everything",
    "show a commit",
    "what time is it in Tokyo",
    "convert 3pm New York time to London",
    "read a text file",
    "read several files at once",
    "write content to a file",
    "make a directory",
    "list the files in a folder",
    "recursive tree of directories",
    "rename a file",
    "find files matching a pattern",
    "file size and modification time metadata",
    "edit lines in a file",
    "read an image or audio file",
    "add entities to the knowledge graph",
    "connect two entities with a relation",
    "add facts to an existing entity",
    "search the knowledge graph",
    "dump the whole memory graph",
    "remove entities from memory",
    "add two numbers",
    "echo back my message",
    "return a small image",
    "compress a file with gzip",
    "long running task with progress",
    "structured output with schema",
    "comit log",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let fixture: serde_json::Value = serde_json::from_str(include_str!("real_tools.json"))?;
    let tools = fixture["tools"].as_array().ok_or("fixture has no tools")?;
    let mut entries = Vec::new();
    'fill: for copy in 0.. {
        for t in tools {
            if entries.len() == 10_000 {
                break 'fill;
            }
            entries.push(Entry {
                kind: EntryKind::Upstream,
                category: format!("{}_{copy}", t["server"].as_str().unwrap_or("s")),
                name: t["name"].as_str().unwrap_or("t").to_string(),
                description: t["description"].as_str().unwrap_or("").to_string(),
                input_schema: Some(t["inputSchema"].clone()),
                output_schema: None,
                keywords: vec![],
                mcp_server: None,
                ..Default::default()
            });
        }
    }
    let built = Instant::now();
    let catalog = Catalog::new(entries);
    let build_ms = built.elapsed().as_secs_f64() * 1000.0;
    // Warm up, then time each search.
    for q in QUERIES {
        std::hint::black_box(catalog.search(q, None, 10));
    }
    let mut times: Vec<f64> = Vec::new();
    for round in 0..20 {
        for q in QUERIES {
            let t0 = Instant::now();
            let hits = catalog.search(q, None, 10);
            times.push(t0.elapsed().as_secs_f64() * 1000.0);
            if round == 0 {
                std::hint::black_box(hits);
            }
        }
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let p = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
    println!(
        "{{\"catalog_tools\": {}, \"build_ms\": {:.1}, \"searches\": {}, \"p50_ms\": {:.3}, \"p99_ms\": {:.3}}}",
        catalog.len(),
        build_ms,
        times.len(),
        p(0.5),
        p(0.99)
    );
    Ok(())
}
