//! A sentence transformer run by ONNX Runtime: the query's words in
//! context, not a mean of static vectors. Opt-in (`search.model`): it needs
//! ONNX Runtime's shared library, which this binary loads at run time and
//! never ships, and a model directory that `model/build_onnx.sh` makes from
//! all-MiniLM-L6-v2's published weights.
//!
//! The model directory holds `model.onnx` (one input, `input_ids`, the
//! token ids of one text with `[CLS]` and `[SEP]`; the output `embedding`,
//! the mean-pooled unit vector, and optionally `tokens`, the last layer's
//! row per token, from which a search takes its query without stop words
//! in the same run) and `vocab.txt` (BERT's WordPiece vocabulary, one
//! token a line, the line number its id). A model made before `tokens`
//! existed still works: a search with records then runs it twice.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use ort::session::Session;
use ort::value::Tensor;

use crate::wordpiece;

/// BERT's limit for all-MiniLM-L6-v2 as sentence-transformers runs it:
/// longer texts (a tool's parameter descriptions) are cut.
const MAX_TOKENS: usize = 256;

/// Changes when the way texts become token ids changes (it is part of the
/// model's name, which cached vectors are keyed by). FNV-1a's offset basis,
/// plus the version.
const TOKENIZER_VERSION: u64 = 0xcbf2_9ce4_8422_2325 + 1;

/// Why a transformer could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum OnnxError {
    #[error(
        "ONNX Runtime could not be loaded from {path}: {reason}. Point search.onnx_runtime \
         (or ORT_DYLIB_PATH) at libonnxruntime.so 1.24 or newer, e.g. the one inside the \
         `onnxruntime` Python package (site-packages/onnxruntime/capi/)"
    )]
    Runtime { path: PathBuf, reason: String },
    #[error(
        "no ONNX Runtime library given: set search.onnx_runtime (or ORT_DYLIB_PATH) to the path of \
         libonnxruntime.so, e.g. the one `code-execution-mcp tools transformer DIR` copies to \
         DIR/runtime/ from the `onnxruntime` Python package"
    )]
    NoRuntime,
    #[error(
        "cannot read {path}: {reason}. `code-execution-mcp tools transformer DIR` makes one (DIR/minilm)"
    )]
    Read { path: PathBuf, reason: String },
    #[error(
        "{path} is not a usable sentence model: {reason}. `code-execution-mcp tools transformer DIR` \
         makes one (one input `input_ids`, one text with [CLS] and [SEP]; one output `embedding`, \
         its pooled vector)"
    )]
    Model { path: PathBuf, reason: String },
}

/// A sentence transformer in ONNX form, with its vocabulary.
pub struct OnnxModel {
    name: String,
    dims: usize,
    vocab: HashMap<Box<str>, u32>,
    cls: u32,
    sep: u32,
    unk: u32,
    /// One run at a time: ONNX Runtime's session wants `&mut` to run, and
    /// its own threads already share the work of one text.
    session: Mutex<Session>,
    /// Whether the model gives the last layer's rows (`tokens`) too.
    states: bool,
    failures: AtomicU64,
}

impl std::fmt::Debug for OnnxModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnnxModel")
            .field("name", &self.name)
            .field("dims", &self.dims)
            .field("vocabulary", &self.vocab.len())
            .finish()
    }
}

impl OnnxModel {
    /// Loads ONNX Runtime from `runtime` (once per process: a later call
    /// with another path keeps the first library) and the model of `dir`,
    /// then embeds one text to learn its width and prove it runs.
    pub fn load(dir: &Path, runtime: Option<&Path>, threads: usize) -> Result<Self, OnnxError> {
        let runtime = match runtime {
            Some(path) => path.to_path_buf(),
            None => std::env::var_os("ORT_DYLIB_PATH")
                .map(PathBuf::from)
                .ok_or(OnnxError::NoRuntime)?,
        };
        let environment = environment(&runtime)?;
        let vocab_path = dir.join("vocab.txt");
        let text = std::fs::read_to_string(&vocab_path).map_err(|e| OnnxError::Read {
            path: vocab_path.clone(),
            reason: e.to_string(),
        })?;
        let vocab: HashMap<Box<str>, u32> = text
            .lines()
            .enumerate()
            .map(|(i, t)| (Box::from(t), i as u32))
            .collect();
        let special = |token: &str| {
            vocab.get(token).copied().ok_or_else(|| OnnxError::Model {
                path: vocab_path.clone(),
                reason: format!("its vocabulary has no {token}"),
            })
        };
        let (cls, sep, unk) = (special("[CLS]")?, special("[SEP]")?, special("[UNK]")?);
        let model_path = dir.join("model.onnx");
        let model_error = |e: ort::Error| OnnxError::Model {
            path: model_path.clone(),
            reason: e.to_string(),
        };
        let mut builder = Session::builder(&environment)
            .map_err(model_error)?
            .with_intra_threads(threads.max(1))
            .map_err(|e| OnnxError::Model {
                path: model_path.clone(),
                reason: e.to_string(),
            })?;
        let session = builder.commit_from_file(&model_path).map_err(model_error)?;
        let states = session.outputs().iter().any(|o| o.name() == "tokens");
        let mut model = OnnxModel {
            name: String::new(),
            dims: 0,
            vocab,
            cls,
            sep,
            unk,
            session: Mutex::new(session),
            states,
            failures: AtomicU64::new(0),
        };
        // Two lengths of text: a per-token output would change width (and
        // `tokens`, when there, must have a row per token).
        let (probe, _) = model.run(&[cls, sep], states).map_err(model_error)?;
        let (longer, _) = model
            .run(&[cls, unk, unk, sep], states)
            .map_err(model_error)?;
        if probe.is_empty() || probe.len() != longer.len() {
            return Err(OnnxError::Model {
                path: model_path,
                reason: format!(
                    "its output `embedding` is {} wide for 2 tokens and {} for 4: it must be one \
                     vector a text",
                    probe.len(),
                    longer.len()
                ),
            });
        }
        model.dims = probe.len();
        let bytes = std::fs::read(&model_path).map_err(|e| OnnxError::Read {
            path: model_path.clone(),
            reason: e.to_string(),
        })?;
        // Cached tool vectors are keyed by the name: another model file, another
        // vocabulary or another way of tokenizing must not reuse them.
        let key = fingerprint(text.as_bytes(), fingerprint(&bytes, TOKENIZER_VERSION));
        model.name = format!("onnx-{}-{key:016x}", model.dims);
        Ok(model)
    }

    /// The pooled vector of `ids`, and with `states` the last layer's
    /// rows (one per token), from one run.
    fn run(&self, ids: &[u32], states: bool) -> Result<(Vec<f32>, Vec<f32>), ort::Error> {
        let ids: Vec<i64> = ids.iter().map(|&i| i64::from(i)).collect();
        let count = ids.len();
        let input = Tensor::from_array(([count], ids))?;
        let mut session = self
            .session
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let outputs = session.run(ort::inputs!["input_ids" => input])?;
        let output = outputs
            .get("embedding")
            .ok_or_else(|| ort::Error::new("it has no output named `embedding`"))?;
        let (shape, values) = output.try_extract_tensor::<f32>()?;
        if shape.len() != 1 {
            return Err(ort::Error::new(format!(
                "its output `embedding` has shape {shape:?}, not one vector a text (a pooled sentence embedding)"
            )));
        }
        let pooled = values.to_vec();
        if !states {
            return Ok((pooled, Vec::new()));
        }
        let output = outputs
            .get("tokens")
            .ok_or_else(|| ort::Error::new("it has no output named `tokens`"))?;
        let (shape, values) = output.try_extract_tensor::<f32>()?;
        let expected = [count as i64, pooled.len() as i64];
        if shape[..] != expected {
            return Err(ort::Error::new(format!(
                "its output `tokens` has shape {shape:?}, not {expected:?} (one row per token)"
            )));
        }
        Ok((pooled, values.to_vec()))
    }

    /// The token ids of `words` with `[CLS]` and `[SEP]`, cut at
    /// [`MAX_TOKENS`], and each id's word (`None` for the two marks);
    /// `None` when no word is known (no meaning: the search then ranks by
    /// words alone, as with the static model).
    fn tokens<'a>(
        &self,
        words: impl IntoIterator<Item = &'a str>,
    ) -> Option<(Vec<u32>, Vec<Option<usize>>)> {
        let mut ids = vec![self.cls];
        let mut of = vec![None];
        let mut known = false;
        for (at, word) in words.into_iter().enumerate() {
            let before = ids.len();
            wordpiece::split(&self.vocab, word, &mut ids);
            if ids.len() == before {
                if !word.is_empty() {
                    ids.push(self.unk);
                }
            } else {
                known = true;
            }
            of.resize(ids.len(), Some(at));
            if ids.len() >= MAX_TOKENS - 1 {
                ids.truncate(MAX_TOKENS - 1);
                of.truncate(MAX_TOKENS - 1);
                break;
            }
        }
        if !known {
            return None;
        }
        ids.push(self.sep);
        of.push(None);
        Some((ids, of))
    }

    /// Counts and logs a failed run; the text gets zeros.
    fn failed(&self, why: String) {
        let count = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        // The 1st, 2nd, 4th, 8th ... failure: said, not flooded.
        if count.is_power_of_two() {
            tracing::warn!(
                model = %self.name,
                failures = count,
                "the transformer failed to embed a text (it ranks by words alone): {why}"
            );
        }
    }

    /// `values` if they are one finite vector of the model's width.
    fn checked(&self, values: Vec<f32>) -> Result<Vec<f32>, String> {
        if values.len() == self.dims && values.iter().all(|x| x.is_finite()) {
            Ok(values)
        } else {
            Err(format!(
                "{} values, {} of them finite",
                values.len(),
                values.iter().filter(|x| x.is_finite()).count()
            ))
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn dims(&self) -> usize {
        self.dims
    }

    pub fn knows(&self, word: &str) -> bool {
        self.vocab.contains_key(word)
    }

    /// How many texts could not be embedded (each got a zero vector, so
    /// ranked by words alone).
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// The unit vector of a text given as its lowercase words; all zeros
    /// when there are none or the runtime fails.
    pub fn embed<'a>(&self, words: impl IntoIterator<Item = &'a str>) -> Vec<f32> {
        let Some((ids, _)) = self.tokens(words) else {
            return vec![0.0; self.dims];
        };
        let done = self
            .run(&ids, false)
            .map_err(|e| e.to_string())
            .and_then(|(pooled, _)| self.checked(pooled));
        done.unwrap_or_else(|why| {
            self.failed(why);
            vec![0.0; self.dims]
        })
    }

    /// As [`crate::Model::embed_parts`], from one run: the pooled vector,
    /// and the unit mean of the last layer's rows of the kept words' tokens
    /// (zeros with none kept). `None` for a model without the `tokens`
    /// output (made before it had one): the caller embeds twice.
    pub fn embed_parts(&self, words: &[&str], keep: &[bool]) -> Option<crate::Parts> {
        if !self.states {
            return None;
        }
        let zeros = || crate::Parts {
            all: vec![0.0; self.dims],
            kept: vec![0.0; self.dims],
        };
        let Some((ids, of)) = self.tokens(words.iter().copied()) else {
            return Some(zeros());
        };
        let done = self.run(&ids, true).map_err(|e| e.to_string());
        let (all, rows) = match done.and_then(|(pooled, rows)| Ok((self.checked(pooled)?, rows))) {
            Ok(made) => made,
            Err(why) => {
                self.failed(why);
                return Some(zeros());
            }
        };
        // The kept words' known tokens: `[UNK]` carries no meaning (the
        // static model and a run on the kept words alone skip it too).
        let mut kept = vec![0f32; self.dims];
        for ((row, word), id) in rows.chunks_exact(self.dims.max(1)).zip(&of).zip(&ids) {
            if *id != self.unk && word.is_some_and(|w| keep.get(w).copied().unwrap_or(false)) {
                kept.iter_mut().zip(row).for_each(|(k, x)| *k += x);
            }
        }
        crate::normalize(&mut kept);
        // A bad pooled row costs learning this query, not its ranking.
        let kept = self.checked(kept).unwrap_or_else(|why| {
            self.failed(why);
            vec![0.0; self.dims]
        });
        Some(crate::Parts { all, kept })
    }
}

/// ONNX Runtime's environment: one per process (`ort` refuses a second),
/// made on the first load that succeeds, with the library of that load; a
/// later load naming another library gets this one.
fn environment(runtime: &Path) -> Result<ort::environment::Environment, OnnxError> {
    static ENVIRONMENT: Mutex<Option<ort::environment::Environment>> = Mutex::new(None);
    let mut made = ENVIRONMENT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(environment) = made.as_ref() {
        return Ok(environment.clone());
    }
    let runtime_error = |reason: String| OnnxError::Runtime {
        path: runtime.to_path_buf(),
        reason,
    };
    let environment = ort::init_from(runtime)
        .map_err(|e| runtime_error(e.to_string()))?
        .with_name("code-execution-mcp")
        .build()
        .map_err(|e| runtime_error(e.to_string()))?;
    *made = Some(environment.clone());
    Ok(environment)
}

/// FNV-1a over `bytes`, from `seed`: a stable name for the vectors' cache.
fn fingerprint(bytes: &[u8], seed: u64) -> u64 {
    bytes.iter().fold(seed, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}
