//! The model in memory and what it computes.

use std::collections::HashMap;

use crate::format::{ModelError, Parts, parse};
use crate::wordpiece;

/// A static embedding model: one vector per vocabulary token; a text's
/// vector is the mean of its tokens' vectors, scaled to unit length.
pub struct StaticModel {
    name: String,
    dims: usize,
    vocab: HashMap<Box<str>, u32>,
    scales: Vec<f32>,
    /// `count × dims` signed bytes, kept as the file's bytes: the matrix is
    /// never copied, only the rows a text uses are read.
    rows: RowBytes,
}

enum RowBytes {
    Static(&'static [u8]),
    Owned(Vec<u8>),
}

impl RowBytes {
    fn get(&self) -> &[u8] {
        match self {
            RowBytes::Static(b) => b,
            RowBytes::Owned(b) => b,
        }
    }
}

impl std::fmt::Debug for StaticModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticModel")
            .field("name", &self.name)
            .field("dims", &self.dims)
            .field("vocabulary", &self.vocab.len())
            .finish()
    }
}

impl StaticModel {
    /// A model from a file's bytes that live as long as the program (the
    /// built-in model): its matrix is used in place.
    pub fn from_static(bytes: &'static [u8]) -> Result<Self, ModelError> {
        let parts = parse(bytes)?;
        let rows = RowBytes::Static(parts.rows);
        Ok(Self::assemble(parts, rows))
    }

    /// A model from a file's bytes (copied).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ModelError> {
        let parts = parse(bytes)?;
        let rows = RowBytes::Owned(parts.rows.to_vec());
        Ok(Self::assemble(parts, rows))
    }

    fn assemble(parts: Parts<'_>, rows: RowBytes) -> Self {
        let vocab = parts
            .tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (Box::from(*t), i as u32))
            .collect();
        StaticModel {
            name: parts.name.to_string(),
            dims: parts.dims,
            vocab,
            scales: parts.scales,
            rows,
        }
    }

    /// The model's name and version: what caches of its vectors are keyed by.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether `word` (lowercase) is one whole token of the vocabulary: a
    /// word the model knows as such, not one it can only spell out in
    /// pieces (a misspelling, usually).
    pub fn knows(&self, word: &str) -> bool {
        self.vocab.contains_key(word)
    }

    /// The length of its vectors.
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// The unit vector of a text given as its lowercase words (split by
    /// the caller); all zeros when no word is known.
    pub fn embed<'a>(&self, words: impl IntoIterator<Item = &'a str>) -> Vec<f32> {
        let mut ids = Vec::new();
        for word in words {
            wordpiece::split(&self.vocab, word, &mut ids);
        }
        let mut sum = vec![0f32; self.dims];
        let rows = self.rows.get();
        for id in ids {
            let i = id as usize;
            let scale = self.scales[i];
            let row = &rows[i * self.dims..(i + 1) * self.dims];
            for (s, b) in sum.iter_mut().zip(row) {
                *s += f32::from(*b as i8) * scale;
            }
        }
        normalize(&mut sum);
        sum
    }
}

/// Scales `v` to unit length; leaves a zero vector as it is.
pub fn normalize(v: &mut [f32]) {
    let norm = dot(v, v).sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// The dot product (the cosine, for unit vectors). Eight running sums so
/// the compiler can keep them in vector registers.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    dot_inline(a, b)
}

/// [`dot`], always inlined: a scan over rows built for a wider vector unit
/// (`quantized::scan`) gets it built for that unit too.
#[inline(always)]
pub(crate) fn dot_inline(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::write;

    fn model() -> StaticModel {
        let bytes = write(
            "test-1",
            3,
            &["delete", "remove", "file", "##s", "sky"],
            &[
                vec![1.0, 0.0, 0.1],
                vec![0.9, 0.1, 0.0],
                vec![0.0, 1.0, 0.0],
                vec![0.0, 0.0, 0.1],
                vec![0.0, 0.0, 1.0],
            ],
        );
        StaticModel::from_bytes(&bytes).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn related_texts_are_close_and_vectors_are_unit() {
        let m = model();
        let a = m.embed(["remove", "files"]);
        let b = m.embed(["delete", "file"]);
        let c = m.embed(["sky"]);
        assert!((dot(&a, &a) - 1.0).abs() < 1e-4);
        assert!(dot(&a, &b) > 0.9, "{}", dot(&a, &b));
        assert!(dot(&a, &c) < 0.2, "{}", dot(&a, &c));
        assert_eq!(m.name(), "test-1");
        assert!(m.knows("file") && !m.knows("files"));
    }

    #[test]
    fn unknown_words_give_a_zero_vector() {
        let m = model();
        assert!(m.embed(["zzz", "qqq"]).iter().all(|x| *x == 0.0));
        assert!(m.embed([]).iter().all(|x| *x == 0.0));
    }

    #[test]
    fn dot_handles_any_length() {
        let a: Vec<f32> = (0..19).map(|i| i as f32).collect();
        let expected: f32 = a.iter().map(|x| x * x).sum();
        assert_eq!(dot(&a, &a), expected);
    }
}
