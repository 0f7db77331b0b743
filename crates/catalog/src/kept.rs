//! A tenant's record vectors kept on disk beside its records, so that the
//! first search after a restart (or after an idle tenant was let go) does
//! not run a transformer over every record again: 2,000 records took 2.4 s,
//! one run each, and then some 0.1 s to compare them.
//!
//! The file: [`MAGIC`], the header's length (4 bytes, little-endian), the
//! header (JSON: the model's name, the width, each record's tool and
//! words), then the vectors as little-endian `f32`, one row per key. It is
//! only ever a cache: a file that does not read back whole is said and
//! ignored, and a record whose model, tool or words differ from the file's
//! is embedded again.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::learned::MAX_USES;
use crate::prepared::Prepared;

const MAGIC: &[u8] = b"cem-record-vectors 1\n";
/// The widest vector read back (the widest models in use are 1,024 to
/// 4,096 wide).
const MAX_DIMS: usize = 8192;
/// The longest header read back: the keys of [`MAX_USES`] records of
/// [`crate::learned::MAX_WORDS`] words.
const MAX_HEADER: usize = 16 << 20;

#[derive(Serialize, Deserialize)]
struct Header {
    model: String,
    dims: usize,
    keys: Vec<(String, Vec<String>)>,
}

/// Why kept vectors could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum KeptError {
    #[error("cannot {doing} {path}: {source}")]
    Io {
        doing: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error(
        "{path} is not a file of record vectors ({reason}); it is ignored, the records are embedded again and the file rewritten"
    )]
    Format { path: PathBuf, reason: String },
}

/// Writes `prepared`'s vectors to `path` (atomically: a crash leaves the
/// old file or the new one); false when it has none worth keeping.
pub(crate) fn write(path: &Path, prepared: &Prepared) -> Result<bool, KeptError> {
    let Some(crate::prepared::KeptVectors {
        model,
        dims,
        keys,
        vectors,
    }) = prepared.kept_vectors()
    else {
        return Ok(false);
    };
    let io = |doing, source| KeptError::Io {
        doing,
        path: path.to_path_buf(),
        source,
    };
    let header = serde_json::to_vec(&Header {
        model: model.to_string(),
        dims,
        keys: keys.to_vec(),
    })
    .map_err(|e| io("write", io::Error::other(e)))?;
    let length = u32::try_from(header.len())
        .map_err(|_| io("write", io::Error::other("the header is over 4 GB")))?;
    let mut bytes = Vec::with_capacity(MAGIC.len() + 4 + header.len() + vectors.len() * 4);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&length.to_le_bytes());
    bytes.extend_from_slice(&header);
    for value in vectors {
        bytes.extend_from_slice(&value.to_le_bytes());
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io("make the folder of", e))?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, &bytes).map_err(|e| io("write", e))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io("write", e)
    })?;
    Ok(true)
}

/// The vectors kept at `path`, as a preparation to make the next from;
/// None when there is no file.
pub(crate) fn read(path: &Path) -> Result<Option<Prepared>, KeptError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(KeptError::Io {
                doing: "read",
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let bad = |reason: String| KeptError::Format {
        path: path.to_path_buf(),
        reason,
    };
    let rest = bytes
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("it does not begin as one".into()))?;
    let (length, rest) = rest
        .split_first_chunk::<4>()
        .ok_or_else(|| bad("it ends before its header".into()))?;
    let length = u32::from_le_bytes(*length) as usize;
    if length > MAX_HEADER || length > rest.len() {
        return Err(bad(format!(
            "a header of {length} bytes in {} bytes",
            rest.len()
        )));
    }
    let (header, body) = rest.split_at(length);
    let header: Header =
        serde_json::from_slice(header).map_err(|e| bad(format!("its header: {e}")))?;
    if header.dims == 0 || header.dims > MAX_DIMS || header.keys.len() > MAX_USES {
        return Err(bad(format!(
            "{} records {} wide",
            header.keys.len(),
            header.dims
        )));
    }
    let expected = header.keys.len() * header.dims * 4;
    if body.len() != expected {
        return Err(bad(format!(
            "{} bytes of vectors where {} records {} wide take {expected}",
            body.len(),
            header.keys.len(),
            header.dims
        )));
    }
    let vectors: Vec<f32> = body
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    if vectors.iter().any(|v| !v.is_finite()) {
        return Err(bad("a value that is not a number".into()));
    }
    Ok(Some(Prepared::of_vectors(
        header.model,
        header.dims,
        header.keys,
        vectors,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept() -> Prepared {
        let keys = vec![
            (
                "git.git_log".to_string(),
                vec!["commit".into(), "history".into()],
            ),
            (
                "time.now".to_string(),
                vec!["time".into(), "in".into(), "tokyo".into()],
            ),
        ];
        let vectors = vec![0.5, -0.25, 1.0, 0.0, 0.125, -1.0];
        Prepared::of_vectors("onnx-3-test".into(), 3, keys, vectors)
    }

    #[test]
    fn vectors_read_back_as_written() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("search").join("learned-vectors.bin");
        assert!(
            read(&path)?.is_none(),
            "no file is no vectors, not an error"
        );
        assert!(write(&path, &kept())?);
        let Some(back) = read(&path)? else {
            panic!("nothing read back");
        };
        assert_eq!(back.kept_vectors(), kept().kept_vectors());
        // Nothing left beside it.
        assert_eq!(
            std::fs::read_dir(path.parent().ok_or("no parent")?)?.count(),
            1
        );
        Ok(())
    }

    #[test]
    fn a_file_that_does_not_read_back_whole_is_refused_with_its_path()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("learned-vectors.bin");
        write(&path, &kept())?;
        let whole = std::fs::read(&path)?;
        let header_end = whole.len() - 6 * 4;
        let mut nan = whole.clone();
        nan[header_end..header_end + 4].copy_from_slice(&f32::NAN.to_le_bytes());
        let mut long_header = whole.clone();
        long_header[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("cut in a vector", whole[..whole.len() - 3].to_vec()),
            ("one byte more", [whole.as_slice(), &[0]].concat()),
            ("cut in the header", whole[..MAGIC.len() + 10].to_vec()),
            ("another format", b"{\"uses\": []}".to_vec()),
            ("a value that is not a number", nan),
            ("a header longer than the file", long_header),
            ("empty", Vec::new()),
        ];
        for (what, bytes) in cases {
            std::fs::write(&path, bytes)?;
            match read(&path) {
                Err(e @ KeptError::Format { .. }) => {
                    assert!(
                        e.to_string().contains(&path.display().to_string()),
                        "{what}: {e}"
                    );
                }
                other => panic!("{what}: {:?}", other.map(|p| p.map(|p| p.len()))),
            }
        }
        Ok(())
    }

    #[cfg(feature = "semantic")]
    #[test]
    fn the_built_in_models_vectors_are_not_kept() -> Result<(), Box<dyn std::error::Error>> {
        let Some(Ok(model)) = cem_embed::builtin() else {
            panic!("the built-in model does not load");
        };
        let uses = [crate::learned::Use {
            words: vec!["commit".into(), "history".into()],
            tool: "git.git_log".into(),
            weight: 1.0,
            last: 0,
        }];
        let made = Prepared::build(&uses, Some(model), None);
        assert_eq!(made.embedded, 1);
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("learned-vectors.bin");
        assert!(!write(&path, &made)?);
        assert!(!path.exists());
        Ok(())
    }
}
