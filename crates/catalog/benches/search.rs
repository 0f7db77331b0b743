//! Search latency over a catalog of 10,000 tools built from real schemas,
//! by words alone and by words and meaning, in one run.
//!
//! `cargo bench -p cem-catalog --bench search`. The eleven servers' real
//! tool lists of the search evaluation (tests/search_eval/servers) are
//! replicated under numbered server names to 10,000 entries; 36
//! natural-language queries are run round-robin and each search is timed.
//! With `CEM_ONNX_MODEL` set, the sentence transformer in that directory
//! ranks instead of the built-in model (`search.model`); its 10,000 tools
//! take a minute or more to embed, so `CEM_BENCH_CACHE=DIR` keeps their
//! vectors in DIR for the next run (`embed_ms` is then a cache read).
//! Also measured: the first search after a start with a tenant's full
//! records (from nothing, and for a transformer with the records' vectors
//! kept on disk), loading the model, building each index, and the
//! resident memory the model and the vectors add. Prints one JSON line.

use std::time::Instant;

use cem_catalog::{Catalog, Entry, Learned, Learning, Model, OnnxModel, Semantic, builtin_model};

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

/// Resident memory in bytes (Linux), 0 elsewhere.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn entries() -> Result<Vec<Entry>, Box<dyn std::error::Error>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/search_eval/servers");
    let mut files: Vec<_> = std::fs::read_dir(dir)?
        .flatten()
        .map(|f| f.path())
        .collect();
    files.sort();
    let mut tools = Vec::new();
    for file in files {
        let list: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(file)?)?;
        let server = list["server"].as_str().unwrap_or("s").to_string();
        for t in list["tools"].as_array().into_iter().flatten() {
            tools.push((server.clone(), t.clone()));
        }
    }
    let mut entries = Vec::new();
    'fill: for copy in 0.. {
        for (server, t) in &tools {
            if entries.len() == 10_000 {
                break 'fill;
            }
            if let Some(e) = Entry::upstream(&format!("{server}_{copy}"), t, None) {
                entries.push(e);
            }
        }
    }
    Ok(entries)
}

/// p50 and p99 in ms of 20 rounds of the queries (with `learned`: as
/// search_tools runs them with learning on).
fn time(catalog: &Catalog, learned: Option<&Learned>) -> (f64, f64) {
    let search = |q: &str| match learned {
        Some(learned) => catalog.search_learned(q, None, 10, Learning { learned, now: NOW }),
        None => catalog.search(q, None, 10),
    };
    for q in QUERIES {
        std::hint::black_box(search(q));
    }
    let mut times: Vec<f64> = Vec::new();
    for _ in 0..20 {
        for q in QUERIES {
            let t0 = Instant::now();
            std::hint::black_box(search(q));
            times.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let p = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
    (p(0.5), p(0.99))
}

const NOW: u64 = 1_800_000_000;

/// A tenant's full records: the most kept, each a query of the set with a
/// word of its own, against tools spread over the catalog.
fn full_records(catalog: &Catalog) -> Learned {
    let mut learned = Learned::default();
    let letter = |n: usize| char::from(b'a' + (n % 26) as u8);
    for i in 0..cem_catalog::learned::MAX_USES {
        let query = format!(
            "{} z{}{}{}q",
            QUERIES[i % QUERIES.len()],
            letter(i / 676),
            letter(i / 26),
            letter(i)
        );
        let tool = catalog.entries()[(i * 7919) % catalog.len()].qualified_name();
        learned.record(&query, &tool, NOW);
    }
    learned
}

/// The median of 9 searches, each the first after a use was recorded: it
/// embeds the new record and compares it with every other
/// (`Learned::prepared`), and at the cap the records that lost a close
/// record to the one dropped; later searches reuse it all.
fn first_search_after_a_change(catalog: &Catalog, records: &mut Learned) -> f64 {
    let mut learned = records.clone();
    learned.take_prepared_from(records);
    let mut times: Vec<f64> = (0..9)
        .map(|i| {
            learned.record(QUERIES[i], &catalog.entries()[i].qualified_name(), NOW);
            let t0 = Instant::now();
            std::hint::black_box(catalog.search_learned(
                QUERIES[i + 1],
                None,
                10,
                Learning {
                    learned: &learned,
                    now: NOW,
                },
            ));
            t0.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    times.sort_by(|a, b| a.total_cmp(b));
    times[times.len() / 2]
}

/// The built-in model, or with `CEM_ONNX_MODEL` set the sentence
/// transformer in that directory (run by the ONNX Runtime library
/// `CEM_ONNX_RUNTIME`, else `ORT_DYLIB_PATH`), on one thread as the server
/// runs it by default, or on `CEM_ONNX_THREADS` (`search.onnx_threads`).
fn model() -> Result<&'static Model, Box<dyn std::error::Error>> {
    if let Some(dir) = std::env::var_os("CEM_ONNX_MODEL") {
        let runtime = std::env::var_os("CEM_ONNX_RUNTIME").map(std::path::PathBuf::from);
        let model = OnnxModel::load(std::path::Path::new(&dir), runtime.as_deref(), threads())?;
        return Ok(Box::leak(Box::new(Model::Onnx(model))));
    }
    match builtin_model() {
        Some(Ok(model)) => Ok(model),
        Some(Err(e)) => Err(e.to_string().into()),
        None => Err("built without the `semantic` feature".into()),
    }
}

/// ONNX Runtime's threads for one query (`CEM_ONNX_THREADS`, else 1).
fn threads() -> usize {
    std::env::var("CEM_ONNX_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(1)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let entries = entries()?;
    let t0 = Instant::now();
    let lexical = Catalog::new(entries.clone());
    let lexical_build_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let (lexical_p50, lexical_p99) = time(&lexical, None);
    drop(lexical);

    let rss_before = rss();
    let t0 = Instant::now();
    let model = model()?;
    let model_load_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let rss_model = rss();
    let cache = tempfile::tempdir()?;
    let kept = std::env::var_os("CEM_BENCH_CACHE").map(std::path::PathBuf::from);
    // One folder per model: a catalog's cache keeps one model's vectors
    // per server, and the other model's run would replace them.
    let kept = kept.as_deref().unwrap_or(cache.path()).join(model.name());
    let kept = kept.as_path();
    let t0 = Instant::now();
    // A transformer takes a minute or more over 10,000 tools: embedded once,
    // into the cache, which is then read as a server restarting would.
    let semantic = if model.is_transformer() {
        Semantic::new(model, &entries, Some(kept))
    } else {
        Semantic::new(model, &entries, None)
    };
    let embed_ms = t0.elapsed().as_secs_f64() * 1000.0;
    if !model.is_transformer() {
        Semantic::new(model, &entries, Some(kept));
    }
    let t0 = Instant::now();
    std::hint::black_box(Semantic::new(model, &entries, Some(kept)));
    let cached_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let hybrid = Catalog::hybrid(entries, semantic);
    let rss_vectors = rss();
    let (p50, p99) = time(&hybrid, None);
    let mut learned = full_records(&hybrid);
    let (learned_p50, learned_p99) = time(&hybrid, Some(&learned));
    let after_change = first_search_after_a_change(&hybrid, &mut learned);
    // The first search of a copy with nothing made for it, in ms.
    let first_search = |learned: &Learned| {
        let t0 = Instant::now();
        std::hint::black_box(hybrid.search_learned(
            QUERIES[0],
            None,
            10,
            Learning { learned, now: NOW },
        ));
        t0.elapsed().as_secs_f64() * 1000.0
    };
    // Everything made afresh: the first search after the server starts.
    let copy = learned.clone();
    let from_nothing = first_search(&copy);
    // The same after a restart that finds the records' vectors kept (a
    // transformer's only): the model runs on no record.
    let kept_file = cache.path().join("learned-vectors.bin");
    let from_kept = if model.is_transformer() && copy.keep_vectors(&kept_file)? {
        let mut restarted = learned.clone();
        restarted.load_vectors(&kept_file)?;
        format!("{:.1}", first_search(&restarted))
    } else {
        "null".to_string()
    };
    println!(
        "{{\"model\": \"{}\", \"onnx_threads\": {}, \"catalog_tools\": {}, \"p50_ms\": {p50:.3}, \"p99_ms\": {p99:.3}, \
         \"learned_records\": {}, \"learned_p50_ms\": {learned_p50:.3}, \"learned_p99_ms\": {learned_p99:.3}, \
         \"learned_after_change_ms\": {after_change:.1}, \"learned_from_nothing_ms\": {from_nothing:.1}, \
         \"learned_from_kept_ms\": {from_kept}, \
         \"lexical_p50_ms\": {lexical_p50:.3}, \"lexical_p99_ms\": {lexical_p99:.3}, \
         \"lexical_build_ms\": {lexical_build_ms:.1}, \"model_load_ms\": {model_load_ms:.1}, \
         \"embed_ms\": {embed_ms:.1}, \"embed_cached_ms\": {cached_ms:.1}, \
         \"model_rss_mb\": {:.1}, \"vectors_rss_mb\": {:.1}, \"searches\": {}}}",
        model.name(),
        if model.is_transformer() { threads() } else { 0 },
        hybrid.len(),
        learned.len(),
        (rss_model.saturating_sub(rss_before)) as f64 / 1048576.0,
        (rss_vectors.saturating_sub(rss_model)) as f64 / 1048576.0,
        20 * QUERIES.len(),
    );
    Ok(())
}
