//! The model file: one flat little-endian layout that is read in place.
//!
//! ```text
//! magic      8 bytes  "CEMEMB01"
//! name_len   u32      then the model's name (UTF-8), its identity in caches
//! dims       u32      vector length
//! count      u32      vocabulary size
//! vocab_len  u32      then the tokens, each ended by '\n' (WordPiece: "##" marks a continuation)
//! scales     count × f32    row i's value j is rows[i * dims + j] as i8 × scales[i]
//! rows       count × dims × i8
//! ```
//!
//! A hand-written reader rather than a container crate: three arrays and a
//! word list, checked for size before use, need no more.

const MAGIC: &[u8; 8] = b"CEMEMB01";

/// What is wrong with a model file.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("not an embedding model file (bad magic bytes)")]
    Magic,
    #[error("the embedding model file is truncated: {0} is missing")]
    Truncated(&'static str),
    #[error("the embedding model file is malformed: {0}")]
    Malformed(String),
}

/// The parts of a model file, borrowed from its bytes.
pub(crate) struct Parts<'a> {
    pub name: &'a str,
    pub dims: usize,
    pub tokens: Vec<&'a str>,
    pub scales: Vec<f32>,
    pub rows: &'a [u8],
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ModelError> {
        let end = self.at.checked_add(n).ok_or(ModelError::Truncated(what))?;
        let slice = self
            .bytes
            .get(self.at..end)
            .ok_or(ModelError::Truncated(what))?;
        self.at = end;
        Ok(slice)
    }

    fn u32(&mut self, what: &'static str) -> Result<usize, ModelError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }
}

pub(crate) fn parse(bytes: &[u8]) -> Result<Parts<'_>, ModelError> {
    let mut r = Reader { bytes, at: 0 };
    if r.take(8, "magic")? != MAGIC {
        return Err(ModelError::Magic);
    }
    let name_len = r.u32("name length")?;
    let name = std::str::from_utf8(r.take(name_len, "name")?)
        .map_err(|_| ModelError::Malformed("the name is not UTF-8".into()))?;
    let dims = r.u32("dims")?;
    let count = r.u32("vocabulary size")?;
    if dims == 0 || dims > 4096 || count == 0 {
        return Err(ModelError::Malformed(format!(
            "{count} tokens of {dims} dimensions"
        )));
    }
    let vocab_len = r.u32("vocabulary length")?;
    let vocab = std::str::from_utf8(r.take(vocab_len, "vocabulary")?)
        .map_err(|_| ModelError::Malformed("the vocabulary is not UTF-8".into()))?;
    let tokens: Vec<&str> = vocab.split_terminator('\n').collect();
    if tokens.len() != count {
        return Err(ModelError::Malformed(format!(
            "{} tokens listed, {count} announced",
            tokens.len()
        )));
    }
    let scales = r
        .take(count * 4, "scales")?
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect::<Vec<_>>();
    if scales.iter().any(|s| !s.is_finite()) {
        return Err(ModelError::Malformed(
            "a scale is not a finite number".into(),
        ));
    }
    let rows = r.take(count * dims, "vectors")?;
    if r.at != bytes.len() {
        return Err(ModelError::Malformed(format!(
            "{} bytes after the vectors",
            bytes.len() - r.at
        )));
    }
    Ok(Parts {
        name,
        dims,
        tokens,
        scales,
        rows,
    })
}

/// The bytes of a model file (for tests and the export script's checks).
#[cfg(test)]
pub(crate) fn write(name: &str, dims: usize, tokens: &[&str], rows: &[Vec<f32>]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend((name.len() as u32).to_le_bytes());
    out.extend(name.as_bytes());
    out.extend((dims as u32).to_le_bytes());
    out.extend((tokens.len() as u32).to_le_bytes());
    let vocab: String = tokens.iter().map(|t| format!("{t}\n")).collect();
    out.extend((vocab.len() as u32).to_le_bytes());
    out.extend(vocab.as_bytes());
    let scales: Vec<f32> = rows
        .iter()
        .map(|r| r.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0)
        .collect();
    for s in &scales {
        out.extend(s.to_le_bytes());
    }
    for (row, s) in rows.iter().zip(&scales) {
        for v in row {
            let q = if *s > 0.0 { (v / s).round() } else { 0.0 };
            out.push((q as i8) as u8);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_file_reads_back() {
        let bytes = write("t", 2, &["a", "##b"], &[vec![1.0, -0.5], vec![0.0, 0.25]]);
        let parts = parse(&bytes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parts.name, "t");
        assert_eq!(parts.dims, 2);
        assert_eq!(parts.tokens, ["a", "##b"]);
        assert_eq!(parts.rows.len(), 4);
    }

    #[test]
    fn damaged_files_are_refused_with_the_reason() {
        let bytes = write("t", 2, &["a", "b"], &[vec![1.0, 0.0], vec![0.0, 1.0]]);
        assert!(matches!(parse(b"nonsense"), Err(ModelError::Magic)));
        assert!(matches!(
            parse(&bytes[..bytes.len() - 1]),
            Err(ModelError::Truncated("vectors"))
        ));
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(parse(&longer), Err(ModelError::Malformed(_))));
        assert!(matches!(parse(&bytes[..20]), Err(ModelError::Truncated(_))));
    }
}
