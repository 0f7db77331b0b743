//! Embedding models: text to a unit vector. The built-in one is static
//! (the mean of its word pieces' vectors, in microseconds and with no
//! network); a sentence transformer under ONNX Runtime is the opt-in
//! ([`OnnxModel`]).
//!
//! The built-in model (feature `builtin`, on by default) is a
//! [Model2Vec](https://github.com/MinishLab/model2vec)-style distillation
//! of the sentence transformer all-MiniLM-L6-v2: each token of its
//! vocabulary was passed through the transformer once, the outputs reduced
//! by PCA and weighted by token frequency, then quantized to 8 bits.
//! `model/README.md` says where the weights came from and how to rebuild
//! them; `model/LICENSE` is the teacher's licence.
//!
//! The tool catalog (`cem-catalog`) uses it to rank tools by meaning beside
//! its lexical score.

mod format;
mod model;
mod onnx;
mod quantized;
mod wordpiece;

pub use format::ModelError;
pub use model::{StaticModel, dot, normalize};
pub use onnx::{OnnxError, OnnxModel};
pub use quantized::{Quantized, Rows, dots, vector_unit};

/// A model the catalog ranks with: the static one (microseconds a text,
/// compiled in) or a sentence transformer under ONNX Runtime (about a
/// millisecond a query, opt-in; it tells a need asked again in other words
/// from another need much better, `model/README.md`).
#[derive(Debug)]
pub enum Model {
    Static(StaticModel),
    Onnx(OnnxModel),
}

impl Model {
    /// The model's name and version: what caches of its vectors are keyed by.
    pub fn name(&self) -> &str {
        match self {
            Model::Static(m) => m.name(),
            Model::Onnx(m) => m.name(),
        }
    }

    /// The length of its vectors.
    pub fn dims(&self) -> usize {
        match self {
            Model::Static(m) => m.dims(),
            Model::Onnx(m) => m.dims(),
        }
    }

    /// Whether `word` (lowercase) is one whole token of the vocabulary.
    pub fn knows(&self, word: &str) -> bool {
        match self {
            Model::Static(m) => m.knows(word),
            Model::Onnx(m) => m.knows(word),
        }
    }

    /// The unit vector of a text given as its lowercase words (split by
    /// the caller); all zeros when no word is known.
    pub fn embed<'a>(&self, words: impl IntoIterator<Item = &'a str>) -> Vec<f32> {
        match self {
            Model::Static(m) => m.embed(words),
            Model::Onnx(m) => m.embed(words),
        }
    }

    /// A text's vector (as [`Model::embed`]) and the vector of its words
    /// where `keep` is true (a query without its stop words, what learning
    /// compares with its records). A transformer that gives its tokens'
    /// states reads the kept words in the context of the whole text and
    /// pools them, in the same run; another embeds them on their own.
    pub fn embed_parts(&self, words: &[&str], keep: &[bool]) -> Parts {
        if let Model::Onnx(m) = self
            && let Some(parts) = m.embed_parts(words, keep)
        {
            return parts;
        }
        let kept = words
            .iter()
            .zip(keep.iter().chain(std::iter::repeat(&false)))
            .filter(|(_, k)| **k)
            .map(|(w, _)| *w);
        Parts {
            all: self.embed(words.iter().copied()),
            kept: self.embed(kept),
        }
    }

    /// How many texts the model failed to embed so far (each got a zero
    /// vector); the static model never fails.
    pub fn failures(&self) -> u64 {
        match self {
            Model::Static(_) => 0,
            Model::Onnx(m) => m.failures(),
        }
    }

    /// Whether this is a transformer (whose cosines run on another scale
    /// than the static model's: the catalog's learning weighs them apart).
    pub fn is_transformer(&self) -> bool {
        matches!(self, Model::Onnx(_))
    }
}

/// A text's vector and its kept words' ([`Model::embed_parts`]); zeros
/// where there is nothing to embed.
#[derive(Debug, Clone, PartialEq)]
pub struct Parts {
    pub all: Vec<f32>,
    pub kept: Vec<f32>,
}

/// The model compiled into this binary, parsed on first use. `None` when
/// the crate was built without the `builtin` feature.
#[cfg(feature = "builtin")]
pub fn builtin() -> Option<Result<&'static Model, &'static ModelError>> {
    static MODEL: std::sync::OnceLock<Result<Model, ModelError>> = std::sync::OnceLock::new();
    const BYTES: &[u8] = include_bytes!("../model/minilm-l6-static.bin");
    Some(
        MODEL
            .get_or_init(|| StaticModel::from_static(BYTES).map(Model::Static))
            .as_ref(),
    )
}

/// The model compiled into this binary: none in this build.
#[cfg(not(feature = "builtin"))]
pub fn builtin() -> Option<Result<&'static Model, &'static ModelError>> {
    None
}
