//! A tenant's record vectors kept on disk beside its records, so that the
//! first search after a restart does not run a transformer over every
//! record again: 2,000 records took 2.4 s, one run each, and then some
//! 0.1 s to compare them.
//!
//! The file: [`MAGIC`], the header's length (4 bytes, little-endian), the
//! header (JSON: how the vectors were made, the width, each record's tool
//! and words), then the vectors as little-endian `f32`, one row per key.
//! It is only ever a cache: a file that does not read back whole is said
//! and ignored, one made another way (another model, stop words or
//! [`LEARNING_VECTOR_VERSION`]) is ignored quietly, and a record whose
//! tool or words the file lacks is embedded again. It names the records'
//! words, so it goes when they do.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::learned::{LEARNING_VECTOR_VERSION, MAX_USES};
use crate::prepared::{KeptVectors, Prepared};

const MAGIC: &[u8] = b"cem-record-vectors 1\n";
/// The widest vector read back.
const MAX_DIMS: usize = 4096;
/// The longest header read back: the keys of [`MAX_USES`] records of
/// [`crate::learned::MAX_WORDS`] words take some 600 KB.
const MAX_HEADER: usize = 4 << 20;
/// How far a row's squared length may be from 1: each is a unit vector
/// (or zeros, never written).
const UNIT: f32 = 0.01;

#[derive(Serialize, Deserialize)]
struct Header {
    /// [`recipe`]: the model and how a record's vector is made from it.
    made: String,
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

/// Vectors to keep, as [`crate::Learned::vectors_to_keep`] made them
/// (under the records' lock) for the caller to write (outside it).
#[derive(Debug)]
pub struct KeptFile {
    /// None: nothing worth keeping any more (the built-in model ranks now,
    /// or no model): a file from before is removed, as it names words.
    pub(crate) bytes: Option<Vec<u8>>,
    /// The records' state they are of (see `Learned::vectors_kept`).
    pub generation: u64,
}

impl KeptFile {
    /// Writes the file at `path`, atomically: a crash leaves the old file
    /// or the new one, and a failed write leaves no part of it. With
    /// nothing to keep, removes it.
    pub fn write(&self, path: &Path) -> Result<(), KeptError> {
        let io = |doing, source| KeptError::Io {
            doing,
            path: path.to_path_buf(),
            source,
        };
        let Some(bytes) = &self.bytes else {
            return remove(path).map_err(|e| io("remove", e));
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io("make the folder of", e))?;
        }
        let tmp = temporary(path);
        let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
        written.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io("write", e)
        })
    }
}

/// Where a write of `path` is made before it takes its name.
fn temporary(path: &Path) -> PathBuf {
    path.with_extension(format!("tmp{}", std::process::id()))
}

/// Removes the file at `path` and any part of one a crash left; a file
/// that is not there is no error.
pub fn remove(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let (Some(dir), Some(stem)) = (path.parent(), path.file_stem()) else {
        return Ok(());
    };
    let prefix = format!("{}.tmp", stem.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// How the vectors of the model named `model` were made: another recipe's
/// are not taken.
pub(crate) fn recipe(model: &str) -> String {
    // FNV-1a over the stop words, which a record's vector leaves out.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in crate::text::STOP.join(" ").bytes() {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{model} learning-vector {LEARNING_VECTOR_VERSION} stop {hash:016x}")
}

/// The file's bytes for `vectors`; none when it has no row to keep. A row
/// of zeros (a failed run, or no word the model knows) is left out: the
/// next start embeds it again rather than keep a failure for good.
pub(crate) fn encode(vectors: &KeptVectors<'_>) -> Option<Vec<u8>> {
    let dims = vectors.dims;
    let rows: Vec<usize> = (0..vectors.keys.len())
        .filter(|&at| {
            vectors
                .vectors
                .get(at * dims..(at + 1) * dims)
                .is_some_and(|row| row.iter().any(|v| *v != 0.0))
        })
        .collect();
    let header = serde_json::to_vec(&Header {
        made: recipe(vectors.model),
        dims,
        keys: rows.iter().map(|&at| vectors.keys[at].clone()).collect(),
    })
    .ok()?;
    let length = u32::try_from(header.len()).ok()?;
    let mut bytes = Vec::with_capacity(MAGIC.len() + 4 + header.len() + rows.len() * dims * 4);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&length.to_le_bytes());
    bytes.extend_from_slice(&header);
    for &at in &rows {
        for value in &vectors.vectors[at * dims..(at + 1) * dims] {
            bytes.extend_from_slice(&value.to_le_bytes());
        }
    }
    Some(bytes)
}

/// The vectors kept at `path`, as a preparation to make the next from;
/// None when there is no file, or one made another way.
pub(crate) fn read(path: &Path) -> Result<Option<Prepared>, KeptError> {
    let io = |source| KeptError::Io {
        doing: "read",
        path: path.to_path_buf(),
        source,
    };
    let bad = |reason: String| KeptError::Format {
        path: path.to_path_buf(),
        reason,
    };
    // Only a regular file (opening a FIFO would block, a device never
    // end), read no further than records can take.
    match std::fs::metadata(path) {
        Ok(meta) if !meta.is_file() => return Err(bad("not a regular file".into())),
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    }
    let file = std::fs::File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(bad("not a regular file".into()));
    }
    let largest = (MAGIC.len() + 4 + MAX_HEADER + MAX_USES * MAX_DIMS * 4) as u64;
    if meta.len() > largest {
        return Err(bad(format!(
            "{} bytes, more than records can take",
            meta.len()
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    io::Read::read_to_end(&mut io::Read::take(file, largest + 1), &mut bytes).map_err(io)?;
    if bytes.len() as u64 > largest {
        return Err(bad("it grew past what records can take".into()));
    }
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
    // Made before the model, its stop words or the way a record is read
    // changed: an upgrade, not damage.
    let Some(model) = header.made.strip_suffix(recipe("").as_str()) else {
        return Ok(None);
    };
    for row in vectors.chunks_exact(header.dims) {
        let length2 = cem_embed::dot(row, row);
        if !length2.is_finite() || (length2 - 1.0).abs() > UNIT {
            return Err(bad(format!(
                "a row of squared length {length2}, not a unit vector"
            )));
        }
    }
    Ok(Some(Prepared::of_vectors(
        model.to_string(),
        header.dims,
        header.keys,
        vectors,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes what `prepared` has worth keeping; whether it had any.
    fn write(path: &Path, prepared: &Prepared) -> Result<bool, KeptError> {
        let Some(bytes) = prepared.kept_vectors().as_ref().and_then(encode) else {
            return Ok(false);
        };
        KeptFile {
            bytes: Some(bytes),
            generation: 0,
        }
        .write(path)?;
        Ok(true)
    }

    fn key(tool: &str, words: &str) -> (String, Vec<String>) {
        (
            tool.to_string(),
            words.split(' ').map(String::from).collect(),
        )
    }

    fn kept() -> Prepared {
        let keys = vec![
            key("git.git_log", "commit history"),
            key("time.now", "time in tokyo"),
        ];
        Prepared::of_vectors(
            "onnx-3-test".into(),
            3,
            keys,
            vec![0.6, 0.8, 0.0, 0.0, 0.0, -1.0],
        )
    }

    #[test]
    fn vectors_read_back_as_written_and_a_failed_row_is_left_out()
    -> Result<(), Box<dyn std::error::Error>> {
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
        // A row of zeros (a run that failed) is embedded again next time,
        // not kept.
        let with_zeros = Prepared::of_vectors(
            "onnx-3-test".into(),
            3,
            vec![key("a.b", "x"), key("c.d", "y")],
            vec![0.0, 0.0, 0.0, 0.0, 1.0, 0.0],
        );
        assert!(write(&path, &with_zeros)?);
        let Some(back) = read(&path)? else {
            panic!("nothing read back");
        };
        let Some(back) = back.kept_vectors() else {
            panic!("no vectors read back");
        };
        assert_eq!(back.keys, &[key("c.d", "y")]);
        assert_eq!(back.vectors, &[0.0, 1.0, 0.0]);
        Ok(())
    }

    #[test]
    fn vectors_made_another_way_are_not_taken() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("learned-vectors.bin");
        write(&path, &kept())?;
        let mut bytes = std::fs::read(&path)?;
        let made = recipe("onnx-3-test");
        let Some(at) = bytes.windows(made.len()).position(|w| w == made.as_bytes()) else {
            panic!("no {made:?} in the file");
        };
        // Another way of making a record's vector (as long, so the header's
        // length still holds).
        let other = made.replace(
            &format!("learning-vector {LEARNING_VECTOR_VERSION}"),
            &format!("learning-vector {}", LEARNING_VECTOR_VERSION + 1),
        );
        assert_eq!(other.len(), made.len());
        bytes[at..at + made.len()].copy_from_slice(other.as_bytes());
        std::fs::write(&path, &bytes)?;
        assert!(read(&path)?.is_none());
        // The same way, read back.
        bytes[at..at + made.len()].copy_from_slice(made.as_bytes());
        std::fs::write(&path, &bytes)?;
        assert!(read(&path)?.is_some());
        Ok(())
    }

    #[test]
    fn a_file_that_does_not_read_back_whole_is_refused_with_its_path()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("learned-vectors.bin");
        write(&path, &kept())?;
        let whole = std::fs::read(&path)?;
        let body = whole.len() - 6 * 4;
        let with_value = |value: f32| {
            let mut bytes = whole.clone();
            bytes[body..body + 4].copy_from_slice(&value.to_le_bytes());
            bytes
        };
        let mut long_header = whole.clone();
        long_header[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("cut in a vector", whole[..whole.len() - 3].to_vec()),
            ("one byte more", [whole.as_slice(), &[0]].concat()),
            ("cut in the header", whole[..MAGIC.len() + 10].to_vec()),
            ("another format", b"{\"uses\": []}".to_vec()),
            ("a value that is not a number", with_value(f32::NAN)),
            ("a row far from unit length", with_value(1e30)),
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
        // Larger than any tenant's records: refused before it is read.
        let huge = std::fs::File::create(&path)?;
        huge.set_len(1 << 40)?;
        match read(&path) {
            Err(KeptError::Format { reason, .. }) => {
                assert!(reason.contains("more than"), "{reason}")
            }
            other => panic!("a 1 TB file: {:?}", other.map(|p| p.map(|p| p.len()))),
        }
        Ok(())
    }

    #[test]
    fn removing_takes_what_a_crash_left_too() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("learned-vectors.bin");
        write(&path, &kept())?;
        std::fs::write(dir.path().join("learned-vectors.tmp4242"), "part of one")?;
        std::fs::write(dir.path().join("learned.json"), "{}")?;
        remove(&path)?;
        let left: Vec<_> = std::fs::read_dir(dir.path())?
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left, ["learned.json"]);
        // Nothing there is no error.
        remove(&path)?;
        remove(&dir.path().join("gone").join("learned-vectors.bin"))?;
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
