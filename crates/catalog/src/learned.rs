//! Learning from use: which tool an agent went on to use after a search.
//!
//! When code calls a tool (or the agent reads its definition) after a
//! `search_tools` in the same session, the search's words are recorded
//! against that tool. Later searches close to a recorded one (in words, and
//! in meaning when the catalog has a model) rank its tool higher: agents of
//! one deployment ask for the same things again and again, in other words
//! each time.
//!
//! Each record decays (half its weight every [`HALF_LIFE_SECS`]) and there
//! are at most [`MAX_USES`]; the weakest goes first. Pure data: what to
//! record, where it is kept and when personal data is removed from the
//! query is the caller's.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use cem_embed::Model;
use serde::{Deserialize, Serialize};

pub use crate::kept::{KeptError, KeptFile, remove as forget_vectors};
use crate::prepared::Prepared;
use crate::text::{is_stop, split_words, stem};

/// A record loses half its weight in this many seconds (two weeks): what a
/// team stopped doing fades, what it does daily stays.
pub const HALF_LIFE_SECS: f64 = 14.0 * 24.0 * 3600.0;
/// Records kept per tenant.
pub const MAX_USES: usize = 2_000;
/// Words kept of one query, stop words counted: a search is a sentence,
/// not a document.
pub const MAX_WORDS: usize = 24;
/// How [`learning_vector`] makes a record's vector, as files of kept
/// vectors name it (with the model and the stop words): another version's
/// are embedded again.
pub const LEARNING_VECTOR_VERSION: u32 = 1;
/// Below this decayed weight a record is dropped (about five half-lives
/// after a single use).
const FORGOTTEN: f32 = 0.03;

/// One recorded use: a search's words and the tool used after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Use {
    /// The query's words (lowercase, as written). Stop words are kept, for
    /// a transformer to read the others in context as it read the query's
    /// ([`learning_vector`]); records made before they were have none.
    pub words: Vec<String>,
    /// The tool used after it (`server.tool`).
    pub tool: String,
    /// How often, as of `last` (decays from there).
    pub weight: f32,
    /// When it was last recorded (Unix seconds).
    pub last: u64,
}

impl Use {
    /// The weight at `now`.
    pub fn weight_at(&self, now: u64) -> f32 {
        decayed(self.weight, self.last, now)
    }

    /// The query's words stemmed, stop words dropped, as a sorted set.
    pub(crate) fn terms(&self) -> Vec<String> {
        term_set(&self.words)
    }
}

/// `weight` as of `since`, at `now`: half of it every [`HALF_LIFE_SECS`].
pub(crate) fn decayed(weight: f32, since: u64, now: u64) -> f32 {
    let age = now.saturating_sub(since) as f64;
    (f64::from(weight) * (-age / HALF_LIFE_SECS).exp2()) as f32
}

/// One tenant's recorded uses.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Learned {
    uses: Vec<Use>,
    /// Each record's terms, vector and hubness, made on the first search
    /// after a change (embedding 2,000 records on every search cost 4 ms).
    #[serde(skip)]
    prepared: OnceLock<Prepared>,
    /// What was made before the last change, to make the next from.
    #[serde(skip)]
    before: Mutex<Option<Prepared>>,
    /// How many preparations changed the records' vectors (ran the model
    /// on a record, or dropped one), and as of which of them the vectors
    /// were last kept on disk ([`Learned::vectors_to_keep`]).
    #[serde(skip)]
    changes: AtomicU64,
    #[serde(skip)]
    kept: AtomicU64,
}

impl Clone for Learned {
    /// The records; what was made for searches is made again when needed.
    fn clone(&self) -> Self {
        Learned {
            uses: self.uses.clone(),
            ..Learned::default()
        }
    }
}

impl PartialEq for Learned {
    fn eq(&self, other: &Self) -> bool {
        self.uses == other.uses
    }
}

impl Learned {
    /// Records that `tool` was used after a search for `query` (its
    /// personal data already removed). The same words for the same tool
    /// add to one record. Returns whether anything was recorded (a query
    /// of stop words only is not).
    pub fn record(&mut self, query: &str, tool: &str, now: u64) -> bool {
        let words = words_of(query);
        if words.is_empty() || tool.is_empty() {
            return false;
        }
        let terms = term_set(&words);
        match self
            .uses
            .iter_mut()
            .find(|u| u.tool == tool && u.terms() == terms)
        {
            Some(existing) => {
                existing.weight = existing.weight_at(now) + 1.0;
                existing.last = now;
                existing.words = words;
            }
            None => self.uses.push(Use {
                words,
                tool: tool.to_string(),
                weight: 1.0,
                last: now,
            }),
        }
        self.prune(now);
        self.changed();
        true
    }

    /// Records as another copy holds them (the store nodes share), the
    /// same words for the same tool as one. Rows of one record that differ
    /// in their stop words ("show me the log", "show the log"; and rows
    /// stored before stop words were kept) keep the words of the latest,
    /// whatever order the copy gives them in: every node then embeds the
    /// same words for it.
    pub fn from_uses(uses: impl IntoIterator<Item = Use>, now: u64) -> Self {
        let mut learned = Learned::default();
        // Per record, the latest of its rows' times and words.
        let mut latest: Vec<(u64, Vec<String>)> = Vec::new();
        for used in uses {
            let terms = used.terms();
            match learned
                .uses
                .iter()
                .position(|u| u.tool == used.tool && u.terms() == terms)
            {
                Some(at) => {
                    let same = &mut learned.uses[at];
                    same.weight = same.weight_at(now) + used.weight_at(now);
                    same.last = now;
                    let (when, words) = &mut latest[at];
                    if (used.last, &used.words) > (*when, &*words) {
                        *when = used.last;
                        words.clone_from(&used.words);
                    }
                }
                None => {
                    latest.push((used.last, used.words.clone()));
                    learned.uses.push(used);
                }
            }
        }
        for (used, (_, words)) in learned.uses.iter_mut().zip(latest) {
            used.words = words;
        }
        learned.prune(now);
        learned
    }

    /// Drops what has faded and, past [`MAX_USES`], the weakest.
    pub fn prune(&mut self, now: u64) {
        self.uses.retain(|u| u.weight_at(now) >= FORGOTTEN);
        if self.uses.len() > MAX_USES {
            self.uses
                .sort_by(|a, b| b.weight_at(now).total_cmp(&a.weight_at(now)));
            self.uses.truncate(MAX_USES);
        }
        self.changed();
    }

    /// Every record, strongest first.
    pub fn list(&self, now: u64) -> Vec<&Use> {
        let mut all: Vec<&Use> = self.uses.iter().collect();
        all.sort_by(|a, b| b.weight_at(now).total_cmp(&a.weight_at(now)));
        all
    }

    /// Forgets every record, or only those of `tool`; how many went.
    pub fn clear(&mut self, tool: Option<&str>) -> usize {
        let before = self.uses.len();
        self.uses.retain(|u| tool.is_some_and(|t| u.tool != t));
        self.changed();
        before - self.uses.len()
    }

    pub fn len(&self) -> usize {
        self.uses.len()
    }

    pub fn is_empty(&self) -> bool {
        self.uses.is_empty()
    }

    pub(crate) fn uses(&self) -> &[Use] {
        &self.uses
    }

    /// Each record's terms, and with `model` its vector and hubness; made
    /// on the first search after a change, from what was made before it.
    pub(crate) fn prepared(&self, model: Option<&Model>) -> &Prepared {
        self.prepared.get_or_init(|| {
            let before = self
                .before
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            let made = Prepared::build(&self.uses, model, before);
            if made.embedded > 0 || made.dropped {
                self.changes.fetch_add(1, Ordering::Relaxed);
            }
            made
        })
    }

    /// The records' vectors as the last search made them, to keep on disk
    /// (a transformer's only: the built-in model makes them in
    /// milliseconds), if they changed since they were last kept: made
    /// under the records' lock, written by the caller outside it, then
    /// marked with [`Learned::vectors_kept`]. A later
    /// [`Learned::load_vectors`] (after a restart) then runs the model only
    /// on records that are not there.
    pub fn vectors_to_keep(&self) -> Option<KeptFile> {
        let generation = self.changes.load(Ordering::Relaxed);
        if generation <= self.kept.load(Ordering::Relaxed) {
            return None;
        }
        let vectors = self.prepared.get()?.kept_vectors();
        // None: nothing worth a file (the built-in model ranks, or none):
        // one a transformer wrote before is removed, as it names words.
        let bytes = vectors.as_ref().and_then(crate::kept::encode);
        Some(KeptFile { bytes, generation })
    }

    /// Whether the records' vectors changed since they were last kept.
    pub fn has_vectors_to_keep(&self) -> bool {
        self.changes.load(Ordering::Relaxed) > self.kept.load(Ordering::Relaxed)
    }

    /// Marks the vectors of `generation` ([`KeptFile::generation`]) kept.
    pub fn vectors_kept(&self, generation: u64) {
        self.kept.fetch_max(generation, Ordering::Relaxed);
    }

    /// [`Learned::vectors_to_keep`] written to `path`; whether the file
    /// changed (written, or removed when there is nothing worth keeping
    /// any more).
    pub fn keep_vectors(&self, path: &Path) -> Result<bool, KeptError> {
        let Some(file) = self.vectors_to_keep() else {
            return Ok(false);
        };
        file.write(path)?;
        self.vectors_kept(file.generation);
        Ok(true)
    }

    /// Takes the vectors kept in `path` as made before (nothing when no
    /// file is there, or when this copy already made or took some): the
    /// next search runs the model only on records whose model, tool or
    /// words the file lacks. How many it offers.
    pub fn load_vectors(&mut self, path: &Path) -> Result<usize, KeptError> {
        let before = self
            .before
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if self.prepared.get().is_some() || before.is_some() {
            return Ok(0);
        }
        let Some(kept) = crate::kept::read(path)? else {
            return Ok(0);
        };
        let count = kept.len();
        *before = Some(kept);
        Ok(count)
    }

    /// Drops what was made for searches (the records' vectors, terms and
    /// hubness: megabytes for a full set), giving an idle tenant's memory
    /// back; the records stay. The next search makes it again, from the
    /// vectors [`Learned::load_vectors`] offers if any (keep them first).
    /// Whether there was anything to drop.
    pub fn release(&mut self) -> bool {
        let before = self
            .before
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let made = self.prepared.take();
        made.is_some() || before.is_some()
    }

    /// Whether what searches use is made and held (see
    /// [`Learned::release`]).
    pub fn is_prepared(&self) -> bool {
        self.prepared.get().is_some()
    }

    /// Takes over what `other` made for its searches (the records of the
    /// same tenant as another copy held them: the store's, the file's), so
    /// that replacing one copy with the other does not embed and compare
    /// every record again.
    pub fn take_prepared_from(&mut self, other: &mut Learned) {
        // The other's count goes on here: a write of its vectors under way
        // marks its generation on this copy, and must not mark more.
        self.changes
            .fetch_max(other.changes.load(Ordering::Relaxed), Ordering::Relaxed);
        self.kept
            .fetch_max(other.kept.load(Ordering::Relaxed), Ordering::Relaxed);
        let made = other.prepared.take().or_else(|| {
            other
                .before
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
        });
        self.changed();
        // Without anything from `other`, what this copy made is the base.
        if let Some(made) = made {
            *self
                .before
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner) = Some(made);
        }
    }

    /// After a change: what was made is kept to make the next from.
    fn changed(&mut self) {
        if let Some(made) = self.prepared.take() {
            *self
                .before
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner) = Some(made);
        }
    }
}

/// The words of `query` a record keeps: lowercase, as written, at most
/// [`MAX_WORDS`]; none for a query of stop words only.
pub fn words_of(query: &str) -> Vec<String> {
    let mut words = split_words(query);
    words.truncate(MAX_WORDS);
    if words.iter().all(|w| is_stop(w)) {
        words.clear();
    }
    words
}

/// Words stemmed, stop words dropped, as a sorted set: what a record's
/// words are compared as.
pub fn term_set(words: &[String]) -> Vec<String> {
    let mut terms: Vec<String> = words
        .iter()
        .filter(|w| !is_stop(w))
        .map(|w| stem(w))
        .collect();
    terms.sort();
    terms.dedup();
    terms
}

/// The vector learning compares a search with its records by (a record's
/// and a query's alike): its words without the stop words, which carry the
/// style of a request ("show me the ...") rather than the need. A
/// transformer reads them in the context of the whole text, from the run
/// that embeds the query for ranking (`Model::embed_parts`); stop words
/// left in measured a point of top-3 worse, and embedding the rest on its
/// own cost a second run.
///
/// What it gives is kept on disk (`crate::kept`): a change to how it is
/// made must change [`LEARNING_VECTOR_VERSION`].
pub fn learning_vector(model: &Model, words: &[impl AsRef<str>]) -> cem_embed::Parts {
    let words: Vec<&str> = words.iter().map(AsRef::as_ref).collect();
    let keep: Vec<bool> = words.iter().map(|w| !is_stop(w)).collect();
    model.embed_parts(&words, &keep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_words_for_the_same_tool_add_up_and_fade() {
        let mut learned = Learned::default();
        assert!(learned.record("show the commit history", "git.git_log", 1000));
        assert!(learned.record("History of COMMITS, show", "git.git_log", 1000));
        assert!(learned.record("show the commit history", "github.list_commits", 1000));
        assert!(!learned.record("the of a", "git.git_log", 1000));
        assert_eq!(learned.len(), 2);
        let top = learned.list(1000);
        assert_eq!(top[0].tool, "git.git_log");
        assert!((top[0].weight_at(1000) - 2.0).abs() < 1e-6);
        let later = 1000 + HALF_LIFE_SECS as u64;
        assert!((top[0].weight_at(later) - 1.0).abs() < 1e-3);
        // Long unused, it is forgotten.
        learned.prune(1000 + 7 * HALF_LIFE_SECS as u64);
        assert!(learned.is_empty());
    }

    /// The store's copy replacing this node's, with what this node made
    /// taken over: the same vectors and hubness as made from nothing.
    #[cfg(feature = "semantic")]
    #[test]
    fn a_copy_that_takes_over_what_another_made_searches_the_same() {
        let Some(Ok(model)) = cem_embed::builtin() else {
            panic!("the built-in model does not load");
        };
        let mut mine = Learned::default();
        for (q, t) in [
            ("show the commit history", "git.git_log"),
            ("list the files in a folder", "fs.list"),
            ("what time is it in tokyo", "time.now"),
        ] {
            mine.record(q, t, 1000);
        }
        mine.prepared(Some(model));
        // The store has one of them, and two this node has not seen.
        let mut theirs = Learned::from_uses(
            [
                mine.uses[1].clone(),
                Use {
                    words: vec!["read".into(), "config".into(), "file".into()],
                    tool: "fs.read".into(),
                    weight: 2.0,
                    last: 1000,
                },
                Use {
                    words: vec!["create".into(), "branch".into()],
                    tool: "git.git_branch".into(),
                    weight: 1.0,
                    last: 1000,
                },
            ],
            1000,
        );
        let fresh = theirs.clone();
        theirs.take_prepared_from(&mut mine);
        let made = theirs.prepared(Some(model));
        let expected = fresh.prepared(Some(model));
        assert_eq!(made.vectors, expected.vectors);
        assert_eq!(made.hubs, expected.hubs);
        assert_eq!(made.terms, expected.terms);
        assert_eq!(made.hubs.len(), 3);
    }

    /// Two rows of one record in the store (an old one without stop words,
    /// a newer one with them) become one record with the newer words,
    /// whichever row comes first.
    #[test]
    fn rows_of_one_record_keep_the_latest_words_in_any_order() {
        let row = |words: &str, last: u64| Use {
            words: words.split(' ').map(String::from).collect(),
            tool: "git.git_log".into(),
            weight: 1.0,
            last,
        };
        let old = row("show commit history", 1000);
        let new = row("show the commit history", 2000);
        for rows in [[old.clone(), new.clone()], [new.clone(), old.clone()]] {
            let learned = Learned::from_uses(rows, 2000);
            assert_eq!(learned.len(), 1);
            let only = learned.list(2000)[0];
            assert_eq!(only.words.join(" "), "show the commit history");
            assert!(only.weight_at(2000) > 1.9, "{}", only.weight_at(2000));
        }
        // Stop words alone make no record, and do not count as terms.
        assert!(words_of("the of a").is_empty());
        assert_eq!(term_set(&words_of("show me the log")), vec!["log", "show"]);
    }

    /// A copy that takes over from another (the records read again, or
    /// from the shared store) while the other's vectors are written must
    /// still write its own later changes: the count goes on.
    #[cfg(feature = "semantic")]
    #[test]
    fn a_write_under_way_never_hides_a_later_change() {
        let Some(Ok(model)) = cem_embed::builtin() else {
            panic!("the built-in model does not load");
        };
        let mut old = Learned::default();
        for (i, words) in ["commit history", "list files", "time in tokyo"]
            .iter()
            .enumerate()
        {
            old.record(words, "git.git_log", i as u64);
            old.prepared(Some(model));
        }
        let Some(writing) = old.vectors_to_keep() else {
            panic!("three changes and nothing to keep");
        };
        let mut fresh = old.clone();
        fresh.take_prepared_from(&mut old);
        // The write of the old copy's vectors ends, marked on the new one.
        fresh.vectors_kept(writing.generation);
        assert!(!fresh.has_vectors_to_keep());
        fresh.record("show the log", "git.git_log", 9);
        fresh.prepared(Some(model));
        assert!(fresh.has_vectors_to_keep(), "a new record after the write");
    }

    /// Vectors a transformer kept are removed once the built-in model
    /// ranks (they would name the records' words for good).
    #[cfg(feature = "semantic")]
    #[test]
    fn a_transformers_file_goes_once_the_built_in_model_ranks()
    -> Result<(), Box<dyn std::error::Error>> {
        let Some(Ok(model)) = cem_embed::builtin() else {
            panic!("the built-in model does not load");
        };
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("learned-vectors.bin");
        let words: Vec<String> = vec!["commit".into(), "history".into()];
        let kept = Prepared::of_vectors(
            "onnx-3-test".into(),
            3,
            vec![("git.git_log".into(), words.clone())],
            vec![0.0, 1.0, 0.0],
        );
        KeptFile {
            bytes: kept.kept_vectors().as_ref().and_then(crate::kept::encode),
            generation: 0,
        }
        .write(&path)?;
        let mut learned = Learned::default();
        learned.record("commit history", "git.git_log", 0);
        assert_eq!(learned.load_vectors(&path)?, 1);
        learned.prepared(Some(model));
        assert!(learned.keep_vectors(&path)?);
        assert!(!path.exists());
        assert!(!learned.keep_vectors(&path)?, "nothing more to do");
        Ok(())
    }

    #[test]
    fn there_are_at_most_max_uses_and_the_weakest_go() {
        let mut learned = Learned::default();
        // A word per record: "baaaq", "baabq", ... (digits would be split
        // off, and a stemmer suffix would merge two).
        let word = |i: usize| {
            let letter = |n: usize| char::from(b'a' + (n % 26) as u8);
            format!("b{}{}{}q", letter(i / 676), letter(i / 26), letter(i))
        };
        for i in 0..MAX_USES + 10 {
            assert!(learned.record(&format!("need {}", word(i)), "s.t", i as u64));
        }
        assert_eq!(learned.len(), MAX_USES);
        // The oldest (weakest) went.
        let first = word(0);
        assert!(learned.list(0).iter().all(|u| u.words[1] != first));
        assert_eq!(learned.clear(Some("other.tool")), 0);
        assert_eq!(learned.clear(None), MAX_USES);
    }
}
