//! A static embedding model: text to a unit vector by averaging the
//! vectors of its word pieces, in microseconds and with no network.
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
mod wordpiece;

pub use format::ModelError;
pub use model::{StaticModel, dot, normalize};

/// The model compiled into this binary, parsed on first use. `None` when
/// the crate was built without the `builtin` feature.
#[cfg(feature = "builtin")]
pub fn builtin() -> Option<Result<&'static StaticModel, &'static ModelError>> {
    static MODEL: std::sync::OnceLock<Result<StaticModel, ModelError>> = std::sync::OnceLock::new();
    const BYTES: &[u8] = include_bytes!("../model/minilm-l6-static.bin");
    Some(
        MODEL
            .get_or_init(|| StaticModel::from_static(BYTES))
            .as_ref(),
    )
}

/// The model compiled into this binary: none in this build.
#[cfg(not(feature = "builtin"))]
pub fn builtin() -> Option<Result<&'static StaticModel, &'static ModelError>> {
    None
}
