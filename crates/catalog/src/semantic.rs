//! Ranking by meaning: each entry's vector from a static embedding model,
//! computed once per tool list and cached on disk beside the tool lists.

use std::path::Path;

use cem_embed::{Model, Rows, dot, normalize};
use sha2::{Digest, Sha256};

use crate::entry::Entry;
use crate::text::split_words;

/// The model and one vector per entry, in the catalog's order.
pub struct Semantic {
    pub(crate) model: &'static Model,
    /// One row per entry; an entry with no known word has zeros.
    pub(crate) vectors: Rows,
    /// Each entry's vector's squared length (the mean of two unit vectors
    /// is shorter than one).
    lengths2: Vec<f32>,
    /// Each entry's category (its server), as an index into `centroids`.
    category_of: Vec<u32>,
    /// `categories × dims`: the unit mean of each category's vectors, what
    /// the server as a whole is about.
    centroids: Vec<f32>,
}

/// A query's closeness to each entry, in the catalog's order.
pub(crate) struct Closeness {
    /// The cosine with the entry's own vector.
    pub own: Vec<f32>,
    /// The cosine with the centroid of the entry's category.
    pub server: Vec<f32>,
    /// The query's vector for learning, from the same run
    /// ([`crate::learned::learning_vector`]; zeros when it has no word but
    /// stop words); None when no records were to be compared.
    pub learning: Option<Vec<f32>>,
}

impl std::fmt::Debug for Semantic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semantic")
            .field("model", &self.model.name())
            .field("vectors", &self.vectors.len())
            .finish()
    }
}

impl Semantic {
    /// The vectors of `entries`: per category (an upstream server, the
    /// skills, a registry category), read from `cache_dir` when its file
    /// matches the model and the entries' texts, else computed (and
    /// written there).
    pub fn new(model: &'static Model, entries: &[Entry], cache_dir: Option<&Path>) -> Self {
        let dims = model.dims();
        let mut vectors = vec![0f32; entries.len() * dims];
        let mut category_of = vec![0u32; entries.len()];
        let mut centroids = Vec::new();
        let mut groups: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
        for (i, e) in entries.iter().enumerate() {
            groups.entry(e.category.as_str()).or_default().push(i);
        }
        for (category, members) in groups {
            let texts: Vec<[String; 2]> = members
                .iter()
                .map(|i| texts_to_embed(&entries[*i]))
                .collect();
            let key = cache_key(model, &texts);
            let cached =
                cache_dir.and_then(|dir| read_cache(dir, category, &key, members.len() * dims));
            let block = cached.unwrap_or_else(|| {
                let failed = model.failures();
                let block = embed_all(model, &texts);
                // A text the model failed on has a zero vector: not kept,
                // so the next start tries again.
                if let Some(dir) = cache_dir
                    && model.failures() == failed
                {
                    write_cache(dir, category, &key, &block);
                }
                block
            });
            for (row, i) in block.chunks_exact(dims).zip(&members) {
                vectors[i * dims..(i + 1) * dims].copy_from_slice(row);
            }
            let mut centroid = vec![0f32; dims];
            for row in block.chunks_exact(dims) {
                centroid.iter_mut().zip(row).for_each(|(c, x)| *c += x);
            }
            normalize(&mut centroid);
            let index = (centroids.len() / dims) as u32;
            centroids.extend(centroid);
            for i in members {
                category_of[i] = index;
            }
        }
        // Bytes for a transformer: its query runs through 10 MB of weights
        // that reading 15 MB of `f32` rows over 10,000 tools pushed out of
        // the processor's cache (its query then cost 1.3 ms, not 0.8 ms).
        let vectors = Rows::new(vectors, dims, model.is_transformer());
        // Of each vector as the rows hold it: what the search's cosines
        // are made from.
        let lengths2 = (0..vectors.len())
            .map(|i| vectors.row(i).map_or(0.0, |v| dot(&v, &v)))
            .collect();
        Semantic {
            model,
            lengths2,
            vectors,
            category_of,
            centroids,
        }
    }

    /// Entry `index`'s vector, as ranking by meaning compares queries with
    /// it (the mean of the two texts' unit vectors, see [`texts_to_embed`],
    /// rounded to bytes); zeros for an entry with no known word.
    pub fn entry_vector(&self, index: usize) -> Option<Vec<f32>> {
        self.vectors.row(index)
    }

    /// Entry `index`'s vector's squared length.
    pub(crate) fn length2(&self, index: usize) -> Option<f32> {
        self.lengths2.get(index).copied()
    }

    /// The cosine of a query (its lowercase words) with every entry and
    /// with every entry's server; with `learning` (records to compare it
    /// with), its vector for learning too.
    pub(crate) fn closeness(&self, words: &[String], learning: bool) -> Option<Closeness> {
        // Without records nothing compares the learning vector: not made (a
        // transformer without the `tokens` output would run a second time).
        let (q, learning) = if learning {
            let parts = crate::learned::learning_vector(self.model, words);
            (parts.all, Some(parts.kept))
        } else {
            (self.model.embed(words.iter().map(String::as_str)), None)
        };
        if q.iter().all(|x| *x == 0.0) {
            return None;
        }
        let dims = self.model.dims();
        let per_category = cem_embed::dots(&self.centroids, dims, &q);
        Some(Closeness {
            own: self.vectors.dots(&q),
            server: self
                .category_of
                .iter()
                .map(|c| per_category.get(*c as usize).copied().unwrap_or(0.0))
                .collect(),
            learning,
        })
    }
}

/// The two texts an entry is embedded from: a short one (its name, title
/// and first sentence) and a long one (its whole description, parameters
/// and annotations). A short need matches the first, a detailed one the
/// second; each counts half (see [`embed_all`]). Public so that other
/// models can be measured on the same texts (`examples/search_eval_export.rs`).
pub fn texts_to_embed(entry: &Entry) -> [String; 2] {
    let name = split_words(&entry.name).join(" ");
    let titles = entry.keywords.join(". ");
    let mut short = format!("{name}. {titles}");
    short.push_str(". ");
    short.push_str(&first_sentence(&entry.description));
    let mut long = format!("{name}. {}", entry.description);
    for (param, description) in crate::fields::parameters(entry) {
        long.push(' ');
        long.push_str(&split_words(param).join(" "));
        if !description.is_empty() {
            long.push_str(": ");
            long.push_str(description);
        }
    }
    [short, long]
}

fn first_sentence(text: &str) -> String {
    let text = text.trim();
    let end = text
        .char_indices()
        .find(|(i, c)| {
            matches!(c, '.' | '!' | '?' | '\n') && text[i + 1..].starts_with(char::is_whitespace)
        })
        .map_or(text.len(), |(i, _)| i);
    text[..end].to_string()
}

/// The mean of an entry's two unit vectors: its dot with a query is the
/// mean of the two cosines.
fn embed_all(model: &Model, texts: &[[String; 2]]) -> Vec<f32> {
    let mut out = Vec::with_capacity(texts.len() * model.dims());
    for [short, long] in texts {
        let a = model.embed(split_words(short).iter().map(String::as_str));
        let b = model.embed(split_words(long).iter().map(String::as_str));
        out.extend(a.iter().zip(&b).map(|(x, y)| (x + y) / 2.0));
    }
    out
}

/// What a cache file is valid for: the model and every text embedded.
fn cache_key(model: &Model, texts: &[[String; 2]]) -> String {
    let mut h = Sha256::new();
    h.update(model.name().as_bytes());
    for pair in texts {
        for t in pair {
            h.update(b"\0");
            h.update(t.as_bytes());
        }
    }
    h.finalize()
        .iter()
        .take(12)
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn cache_path(dir: &Path, category: &str, key: &str) -> std::path::PathBuf {
    // A category is a configured server name: keep only what is safe in a
    // file name, the key makes it unique.
    let safe: String = category
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    dir.join(format!("{safe}-{key}.vec"))
}

fn read_cache(dir: &Path, category: &str, key: &str, len: usize) -> Option<Vec<f32>> {
    let bytes = std::fs::read(cache_path(dir, category, key)).ok()?;
    if bytes.len() != len * 4 {
        return None;
    }
    let v: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    v.iter().all(|x| x.is_finite()).then_some(v)
}

/// Writes the file under a temporary name, then renames it; older files of
/// the category go (their tool list changed). Failing to cache costs only
/// the time to embed again, so it is logged by the caller's absence of a
/// file, never an error.
fn write_cache(dir: &Path, category: &str, key: &str, block: &[f32]) {
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let target = cache_path(dir, category, key);
    let prefix = target
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(&format!("{key}.vec")))
        .unwrap_or_default()
        .to_string();
    if let Ok(read) = std::fs::read_dir(dir) {
        for old in read.flatten() {
            let name = old.file_name();
            let name = name.to_string_lossy();
            let rest = name.strip_prefix(prefix.as_str()).unwrap_or_default();
            // Only `<category>-<24 hex>.vec`: not another category whose
            // name begins with this one's.
            if rest.len() == 28
                && rest.ends_with(".vec")
                && rest[..24].bytes().all(|b| b.is_ascii_hexdigit())
            {
                let _ = std::fs::remove_file(old.path());
            }
        }
    }
    let bytes: Vec<u8> = block.iter().flat_map(|x| x.to_le_bytes()).collect();
    if let Ok(mut tmp) = tempfile::Builder::new().prefix(".vec-").tempfile_in(dir)
        && std::io::Write::write_all(&mut tmp, &bytes).is_ok()
    {
        let _ = tmp.persist(target);
    }
}

#[cfg(all(test, feature = "semantic"))]
mod tests {
    use super::*;
    use crate::Catalog;

    fn model() -> &'static Model {
        match cem_embed::builtin() {
            Some(Ok(m)) => m,
            Some(Err(e)) => panic!("{e}"),
            None => panic!("no built-in model"),
        }
    }

    fn entry(category: &str, name: &str, description: &str) -> Entry {
        Entry {
            category: category.into(),
            name: name.into(),
            description: description.into(),
            ..Entry::default()
        }
    }

    fn entries() -> Vec<Entry> {
        vec![
            entry(
                "time",
                "get_current_time",
                "Get the current time in a specific timezone",
            ),
            entry(
                "fs",
                "create_directory",
                "Create a new directory or ensure it exists",
            ),
            entry(
                "web",
                "fetch",
                "Fetches a URL from the internet and extracts its contents as markdown",
            ),
            entry("fs", "move_file", "Move or rename files and directories"),
        ]
    }

    fn top(c: &Catalog, q: &str) -> String {
        c.search(q, None, 1)
            .first()
            .map(|h| c.entries()[h.index].qualified_name())
            .unwrap_or_default()
    }

    #[test]
    fn meaning_finds_what_words_miss() {
        let lexical = Catalog::new(entries());
        let hybrid = Catalog::hybrid(entries(), Semantic::new(model(), &entries(), None));
        let need = "what hour is it in Sydney";
        assert_ne!(top(&lexical, need), "time.get_current_time");
        assert_eq!(top(&hybrid, need), "time.get_current_time");
        assert_eq!(top(&hybrid, "make a new folder"), "fs.create_directory");
        // Words still count: the name wins when the query says it.
        assert_eq!(top(&hybrid, "move file"), "fs.move_file");
        assert_eq!(hybrid.semantic_model(), Some(model().name()));
    }

    #[test]
    fn vectors_are_cached_per_category_and_renewed_when_tools_change() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let first = Semantic::new(model(), &entries(), Some(dir.path()));
        let files = |dir: &Path| {
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        let written = files(dir.path());
        assert_eq!(written.len(), 3, "{written:?}");
        // A file the cache holds is what is used: overwrite one with other
        // (valid) numbers and read them back.
        let time_file = dir.path().join(
            written
                .iter()
                .find(|n| n.starts_with("time-"))
                .unwrap_or_else(|| panic!("{written:?}")),
        );
        let dims = model().dims();
        std::fs::write(&time_file, vec![0u8; dims * 4]).unwrap_or_else(|e| panic!("{e}"));
        let again = Semantic::new(model(), &entries(), Some(dir.path()));
        let row = |s: &Semantic, i: usize| s.entry_vector(i).unwrap_or_default();
        assert!(row(&again, 0).iter().all(|x| *x == 0.0));
        assert_eq!(dims, row(&again, 0).len());
        for i in 1..entries().len() {
            assert_eq!(row(&first, i), row(&again, i));
        }
        // A changed description is a new key; the old file of that server goes.
        let mut changed = entries();
        changed[0].description = "Tell the time somewhere".into();
        let renewed = Semantic::new(model(), &changed, Some(dir.path()));
        assert!(row(&renewed, 0).iter().any(|x| *x != 0.0));
        let now = files(dir.path());
        assert_eq!(now.len(), 3, "{now:?}");
        assert!(
            !now.contains(
                &time_file
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            )
        );
        // A truncated file is not trusted.
        let fs_file = dir.path().join(
            now.iter()
                .find(|n| n.starts_with("fs-"))
                .unwrap_or_else(|| panic!("{now:?}")),
        );
        std::fs::write(&fs_file, [0u8; 8]).unwrap_or_else(|e| panic!("{e}"));
        let recomputed = Semantic::new(model(), &changed, Some(dir.path()));
        assert_eq!(recomputed.vectors, renewed.vectors);
    }
}
