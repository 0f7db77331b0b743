//! A tenant's record vectors kept on disk (`Learned::keep_vectors`) and
//! taken back after a restart (`Learned::load_vectors`), with the real
//! transformer: `CEM_ONNX_MODEL` (or `CEM_ONNX_MODEL_DIR`, as `scripts/test`
//! exports it for every test) names a directory `model/build_onnx.sh` made
//! (`DIR/minilm`), `CEM_ONNX_RUNTIME` its library; without them each test
//! says so and checks nothing, unless `CEM_REQUIRE_TRANSFORMER` is set (as
//! `scripts/test` sets it): then it fails.

use std::path::Path;

use cem_catalog::{Catalog, Entry, Learned, Learning, Model, OnnxModel, Semantic};
use serde_json::json;

const NOW: u64 = 1_800_000_000;

fn transformer() -> Option<&'static Model> {
    let dir = std::env::var_os("CEM_ONNX_MODEL").or_else(|| std::env::var_os("CEM_ONNX_MODEL_DIR"));
    let (Some(dir), Some(runtime)) = (dir, std::env::var_os("CEM_ONNX_RUNTIME")) else {
        assert!(
            std::env::var_os("CEM_REQUIRE_TRANSFORMER").is_none(),
            "CEM_REQUIRE_TRANSFORMER is set but CEM_ONNX_MODEL / CEM_ONNX_RUNTIME are not"
        );
        eprintln!(
            "CEM_ONNX_MODEL (or CEM_ONNX_MODEL_DIR) / CEM_ONNX_RUNTIME unset: nothing checked (scripts/test sets them)"
        );
        return None;
    };
    match OnnxModel::load(Path::new(&dir), Some(Path::new(&runtime)), 1) {
        Ok(model) => Some(Box::leak(Box::new(Model::Onnx(model)))),
        Err(e) => panic!("{e}"),
    }
}

fn catalog(model: &'static Model) -> Catalog {
    let tools = [
        ("git", "git_log", "Shows the commit logs"),
        ("git", "git_show", "Shows the contents of a commit"),
        ("git", "git_status", "Shows the working tree status"),
        (
            "time",
            "get_current_time",
            "Get the current time in a timezone",
        ),
        ("fs", "read_file", "Read the complete contents of a file"),
        (
            "fs",
            "list_directory",
            "List the files and folders in a directory",
        ),
    ];
    let entries: Vec<Entry> = tools
        .iter()
        .filter_map(|(server, name, description)| {
            let tool = json!({"name": name, "description": description, "inputSchema": {"type": "object"}});
            Entry::upstream(server, &tool, None)
        })
        .collect();
    Catalog::hybrid(entries.clone(), Semantic::new(model, &entries, None))
}

fn search(catalog: &Catalog, learned: &Learned, query: &str) -> Vec<(usize, u32)> {
    catalog
        .search_learned(query, None, 6, Learning { learned, now: NOW })
        .iter()
        .map(|hit| (hit.index, hit.score.to_bits()))
        .collect()
}

#[test]
fn kept_vectors_spare_the_model_and_rank_exactly_as_before()
-> Result<(), Box<dyn std::error::Error>> {
    let Some(model) = transformer() else {
        return Ok(());
    };
    let catalog = catalog(model);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("search").join("learned-vectors.bin");
    let mut learned = Learned::default();
    learned.record("what happened in this repo lately", "git.git_log", NOW);
    learned.record("which files did I touch", "git.git_status", NOW);
    learned.record("clock in osaka", "time.get_current_time", NOW);
    let query = "recent changes to the project";
    let before = search(&catalog, &learned, query);
    assert!(
        learned.keep_vectors(&path)?,
        "the model ran: its vectors are kept"
    );
    assert!(!learned.keep_vectors(&path)?, "nothing new since");

    // After a restart: the records as the file of records holds them.
    let mut restarted = learned.clone();
    assert_eq!(restarted.load_vectors(&path)?, 3);
    assert_eq!(search(&catalog, &restarted, query), before);
    assert!(
        !restarted.keep_vectors(&path)?,
        "the search after the restart ran the model on no record"
    );
    // A new record is embedded, and kept with the others.
    restarted.record("show me the log", "git.git_log", NOW);
    search(&catalog, &restarted, query);
    assert!(restarted.keep_vectors(&path)?);
    let mut again = restarted.clone();
    assert_eq!(again.load_vectors(&path)?, 4);
    assert_eq!(
        search(&catalog, &again, query),
        search(&catalog, &restarted, query)
    );
    Ok(())
}

#[test]
fn another_models_vectors_are_not_taken() -> Result<(), Box<dyn std::error::Error>> {
    let Some(model) = transformer() else {
        return Ok(());
    };
    let Some(Ok(builtin)) = cem_catalog::builtin_model() else {
        eprintln!("built without the built-in model: nothing to compare with");
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("learned-vectors.bin");
    let mut learned = Learned::default();
    learned.record("what happened in this repo lately", "git.git_log", NOW);
    learned.record("clock in osaka", "time.get_current_time", NOW);
    search(&catalog(model), &learned, "recent changes");
    assert!(learned.keep_vectors(&path)?);
    // The server now ranks with the built-in model: the transformer's
    // vectors (another width) must change nothing.
    let static_catalog = catalog(builtin);
    let mut loaded = learned.clone();
    assert_eq!(loaded.load_vectors(&path)?, 2);
    assert_eq!(
        search(&static_catalog, &loaded, "recent changes"),
        search(&static_catalog, &learned.clone(), "recent changes")
    );
    Ok(())
}
