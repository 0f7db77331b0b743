//! The opt-in transformer against a real model and a real ONNX Runtime:
//! `CEM_ONNX_MODEL` (or `CEM_ONNX_MODEL_DIR`) names a directory
//! `model/build_onnx.sh` made (`DIR/minilm`), `CEM_ONNX_RUNTIME` its
//! library. `scripts/test` sets them and runs this file; without them each
//! test says so and checks nothing, unless `CEM_REQUIRE_TRANSFORMER` is set
//! (as `scripts/test` sets it): then it fails.

use std::path::{Path, PathBuf};

use cem_embed::{OnnxError, OnnxModel, dot};

fn paths() -> Option<(PathBuf, PathBuf)> {
    let model =
        std::env::var_os("CEM_ONNX_MODEL").or_else(|| std::env::var_os("CEM_ONNX_MODEL_DIR"));
    let (Some(model), Some(runtime)) = (model, std::env::var_os("CEM_ONNX_RUNTIME")) else {
        assert!(
            std::env::var_os("CEM_REQUIRE_TRANSFORMER").is_none(),
            "CEM_REQUIRE_TRANSFORMER is set but CEM_ONNX_MODEL / CEM_ONNX_RUNTIME are not"
        );
        return None;
    };
    Some((model.into(), runtime.into()))
}

fn load() -> Option<OnnxModel> {
    let Some((model, runtime)) = paths() else {
        eprintln!(
            "CEM_ONNX_MODEL / CEM_ONNX_RUNTIME unset: nothing checked (scripts/test sets them)"
        );
        return None;
    };
    match OnnxModel::load(&model, Some(&runtime), 1) {
        Ok(m) => Some(m),
        Err(e) => panic!("{e}"),
    }
}

fn words(text: &str) -> Vec<&str> {
    text.split(' ').collect()
}

#[test]
fn it_embeds_by_meaning_into_unit_vectors() {
    let Some(m) = load() else { return };
    assert_eq!(m.dims(), 384);
    assert!(m.name().starts_with("onnx-384-"), "{}", m.name());
    let delete = m.embed(words("delete a file from the disk"));
    let remove = m.embed(words("remove the document from storage"));
    let time = m.embed(words("what time is it in tokyo"));
    assert!((dot(&delete, &delete) - 1.0).abs() < 1e-3);
    assert!(
        dot(&delete, &remove) > dot(&delete, &time) + 0.2,
        "{} against {}",
        dot(&delete, &remove),
        dot(&delete, &time)
    );
    assert_eq!(m.failures(), 0);
}

#[test]
fn nothing_to_embed_gives_zeros_and_a_long_text_is_cut() {
    let Some(m) = load() else { return };
    assert!(m.embed(std::iter::empty()).iter().all(|x| *x == 0.0));
    // Far past the 256 tokens the model takes: cut, not refused.
    let long = "parameter description of a tool ".repeat(300);
    let v = m.embed(words(long.trim()));
    assert!((dot(&v, &v) - 1.0).abs() < 1e-3);
    // A word outside the vocabulary is BERT's [UNK], not an error.
    let v = m.embed(["\u{1f9ea}\u{1f9ea}"]);
    assert!(v.iter().all(|x| x.is_finite()));
    assert!(m.knows("file") && !m.knows("qqqzzzxq"));
}

#[test]
fn two_models_in_one_process_share_the_runtime() {
    // ONNX Runtime allows one environment a process: a second load (another
    // configuration, `doctor` beside the server) must reuse it.
    let (Some(a), Some(b)) = (load(), load()) else {
        return;
    };
    let text = words("list the branches of a repository");
    assert_eq!(a.embed(text.clone()), b.embed(text));
}

#[test]
fn a_missing_model_names_the_file_and_what_makes_it() {
    let Some((_, runtime)) = paths() else { return };
    let missing = Path::new("/nonexistent/minilm");
    match OnnxModel::load(missing, Some(&runtime), 1) {
        Err(e @ OnnxError::Read { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("/nonexistent/minilm/vocab.txt")
                    && text.contains("tools transformer"),
                "{text}"
            );
        }
        other => panic!("expected a read error, got {other:?}"),
    }
}

/// One run gives the text's vector and its kept words' vector read in
/// context: the first is what `embed` gives, the second close to the kept
/// words embedded on their own, and far from a text about something else.
#[test]
fn the_kept_words_come_from_the_same_run() {
    let Some(m) = load() else { return };
    let text = words("show me the commit history of the repository");
    let keep: Vec<bool> = text
        .iter()
        .map(|w| !matches!(*w, "me" | "the" | "of"))
        .collect();
    let Some(parts) = m.embed_parts(&text, &keep) else {
        panic!("the model has no `tokens` output: make it again with `tools transformer`");
    };
    assert_eq!(parts.all, m.embed(text.clone()));
    assert!((dot(&parts.kept, &parts.kept) - 1.0).abs() < 1e-3);
    let alone = m.embed(words("show commit history repository"));
    let other = m.embed(words("what time is it in tokyo"));
    assert!(
        dot(&parts.kept, &alone) > 0.8 && dot(&parts.kept, &alone) > dot(&parts.kept, &other) + 0.4,
        "{} against {}",
        dot(&parts.kept, &alone),
        dot(&parts.kept, &other)
    );
    // Kept words the vocabulary lacks ([UNK]) carry nothing.
    let unknown = vec!["show", "me", "the", "\u{1f9ea}\u{1f9ea}"];
    let Some(odd) = m.embed_parts(&unknown, &[true, false, false, true]) else {
        panic!("no parts");
    };
    let show = m.embed_parts(&unknown, &[true, false, false, false]);
    assert_eq!(Some(odd.kept.clone()), show.map(|p| p.kept));
    assert!(odd.all.iter().any(|x| *x != 0.0));
    // Nothing kept: zeros, and the text's vector still.
    let none = m
        .embed_parts(&text, &[false; 8])
        .unwrap_or_else(|| panic!("no parts"));
    assert!(none.kept.iter().all(|x| *x == 0.0));
    assert_eq!(none.all, parts.all);
    assert_eq!(m.failures(), 0);
}
