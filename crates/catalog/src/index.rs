//! The search index: BM25 over weighted fields, plus fuzzy name words.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::entry::Entry;
use crate::fields::{effect_words, parameters};
use crate::learned::{Learned, term_set};
use crate::semantic::{Closeness, Semantic};
use crate::text::{edit_distance, name_words, split_words, stem, terms};

/// Scores by entry number: a search fills and reads thousands (a fast
/// hash for numbers, not the default one that resists flooding: the keys
/// are the catalog's own).
type Scores = rustc_hash::FxHashMap<u32, f32>;

/// Field weights: a word in a tool's name says far more than one in its
/// description.
const NAME_WEIGHT: f32 = 3.0;
const CATEGORY_WEIGHT: f32 = 1.0;
const KEYWORD_WEIGHT: f32 = 1.0;
const DESCRIPTION_WEIGHT: f32 = 1.0;
const PARAM_WEIGHT: f32 = 0.5;
const EFFECT_WEIGHT: f32 = 0.5;
/// The server's instructions are shared by all its tools: they tell a
/// server apart, hardly a tool.
const INSTRUCTIONS_WEIGHT: f32 = 0.1;
/// In hybrid ranking, the share of the lexical score (divided by
/// `Catalog::words_scale`: the best hit has 1 at most) beside the closeness
/// of meaning. Small: a need in other words shares incidental words ("log"
/// in a file path) with the wrong tools, and on the evaluation set a larger
/// share lost more than it won (0.3: top-3 44%, 0.1: 60%); it still breaks
/// ties toward a tool the query names.
const LEXICAL_SHARE: f32 = 0.1;
/// How much the closeness of a tool's server (the mean of its tools'
/// vectors) adds to the tool's own: a need about spreadsheets or a web page
/// first picks the server that deals in them, as a person would.
const SERVER_WEIGHT: f32 = 0.6;
/// With no word in common, a tool is a hit only if its meaning is at least
/// this close: a query about nothing in the catalog finds nothing.
const MIN_COSINE: f32 = 0.15;
/// A fuzzy (misspelt) match counts this much of an exact one.
const FUZZY_FACTOR: f32 = 0.6;
/// A query word that begins an indexed word ("sql" in "sqlite").
const PREFIX_FACTOR: f32 = 0.6;
/// A tool its own description calls deprecated ("DEPRECATED: use
/// read_text_file") ranks below its replacement, unless the query asks for
/// deprecated tools.
const DEPRECATED_FACTOR: f32 = 0.5;
/// Each query word found in a tool's name as written, before stemming,
/// adds this share to its score: "read a file" prefers `read_text_file` to
/// `read_multiple_files`, which the stemmer alone cannot tell apart.
const EXACT_NAME_BONUS: f32 = 0.15;
/// What a recorded use adds at most to its tool's score when a query
/// repeats it (the same stemmed words, used many times): about what meaning
/// gives the best tool, so the tool used last time comes first, and a name
/// still ranks above it. Less as fewer words are shared, nothing below
/// [`LEARN_SHARED_FLOOR`] of them.
const LEARN_WEIGHT: f32 = 1.0;
const LEARN_SHARED_FLOOR: f32 = 0.5;
/// What a recorded use adds at most for a query close in meaning only,
/// its tool's record standing out from every other tool's (see
/// `learned_boosts`), and the softmax's temperature; the settings that
/// depend on the model (the floor of "none of them", the records'
/// hubness, how far records move their tool) are in `crate::tuning`.
/// Picked on the evaluation (`compare.py --learning` replays the search
/// for any setting; BENCHMARKS.md, "Relevance feedback", has the grid)
/// for the most second phrasings of recorded needs (`paraphrases.jsonl`)
/// found first and in the first three while needs whose tool nobody used
/// keep as many first places as before.
const LEARN_MEANING_WEIGHT: f32 = 1.5;
const LEARN_TEMPERATURE: f32 = 0.04;
/// A move that changes a score by less than this is left out: thousands of
/// used tools each moved a hair from a query about something else would
/// cost the search more than they change its order.
const LEARN_MIN_CHANGE: f32 = 0.001;
/// The tool words alone rank first keeps its place among the first this
/// many when records lift other tools, if it held one before: what words
/// are sure of, meaning keeps in the first three (see the named queries of
/// the evaluation), and so must learning. "show a commit" wants
/// `git_show`, which its words find first; records of other needs ("show
/// the last 5 commits", "show what goes into the next commit") lifted
/// `git_log` and `git_diff_staged` past it. The tool the catalog ranks
/// first before the records count keeps such a place too: a need nobody
/// asked before is one the catalog alone finds as often as not, and
/// records of a sibling tool ("delete observations" for "delete
/// relations") must not push it out of sight.
pub const LEARNING_KEEPS_WORDS_FIRST: usize = 3;
const K1: f32 = 1.2;
const B: f32 = 0.75;

/// A search result: the entry's index and its score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    pub index: usize,
    pub score: f32,
}

/// Why a hit ranked where it did (`tools search --explain`).
#[derive(Debug, Clone, PartialEq)]
pub struct Why {
    pub hit: Hit,
    /// BM25 over the weighted fields (before scaling).
    pub words: f32,
    /// The cosine with the tool, and with its server, when ranking by meaning.
    pub meaning: Option<(f32, f32)>,
    /// Named by the query: by its whole name or by its name words.
    pub named: Option<&'static str>,
    /// What recorded uses added (or took: a used tool moved away from a
    /// query about something else), and the recorded query that counted
    /// most.
    pub learned: Option<(f32, String)>,
    /// Kept in the first [`LEARNING_KEEPS_WORDS_FIRST`] places although
    /// records lifted other tools past it: words alone rank it first.
    pub kept_by_words: bool,
    /// Kept in the first [`LEARNING_KEEPS_WORDS_FIRST`] places although
    /// records lifted other tools past it: the catalog ranks it first
    /// before the records count.
    pub kept_as_first: bool,
    pub deprecated: bool,
}

/// Recorded uses and the time to weigh them at, for one search.
#[derive(Debug, Clone, Copy)]
pub struct Learning<'a> {
    pub learned: &'a Learned,
    /// Unix seconds.
    pub now: u64,
}

/// Entries and their inverted index.
#[derive(Debug, Default)]
pub struct Catalog {
    entries: Vec<Entry>,
    /// term -> (entry, weighted term frequency)
    postings: HashMap<String, Vec<(u32, f32)>>,
    /// Terms that occur in names, for fuzzy matching.
    name_terms: Vec<String>,
    /// A name term's word as written (`directori` → `directory`): what a
    /// misspelt query word becomes before it is embedded.
    name_spelling: HashMap<String, String>,
    lengths: Vec<f32>,
    avg_length: f32,
    /// Entries whose description says they are deprecated.
    deprecated: Vec<bool>,
    /// Each entry's name words as written (lowercase, not stemmed).
    exact_names: Vec<Vec<String>>,
    /// Entries by `server.tool`, for recorded uses.
    by_qualified: HashMap<String, usize>,
    /// Entries by their name's word set (see [`word_set`]): a query made of
    /// those words names the tool.
    by_name_words: HashMap<String, Vec<u32>>,
    /// A name of two words or more written as one (`gitlog`,
    /// `readtextfile`) -> those words: a query word that is one stands for
    /// them.
    joined_names: HashMap<String, Vec<String>>,
    /// Entries by each stemmed word of their names.
    by_name_term: HashMap<String, Vec<u32>>,
    /// Each entry's server's word set, which a query may add to the name's.
    category_words: Vec<Vec<String>>,
    /// Vectors of meaning, when a model is in use.
    semantic: Option<Semantic>,
    /// Which catalog this is, among all made in this process: what a
    /// tenant's records keep for one catalog is kept under this (see
    /// `Prepared::placed`).
    id: u64,
}

impl Catalog {
    /// A catalog ranked by meaning as well as words: `semantic` holds the
    /// vectors of these `entries` (see [`Semantic::new`]).
    pub fn hybrid(entries: Vec<Entry>, semantic: Semantic) -> Self {
        let mut catalog = Self::new(entries);
        if semantic.vectors.len() == catalog.entries.len()
            && semantic.vectors.dims() == semantic.model.dims()
        {
            catalog.semantic = Some(semantic);
        }
        catalog
    }

    /// The name of the embedding model in use, if any.
    pub fn semantic_model(&self) -> Option<&str> {
        self.semantic.as_ref().map(|s| s.model.name())
    }

    /// A catalog ranked by words alone.
    pub fn new(entries: Vec<Entry>) -> Self {
        let mut postings: HashMap<String, HashMap<u32, f32>> = HashMap::new();
        let mut lengths = Vec::with_capacity(entries.len());
        let mut name_terms: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        let mut name_spelling: HashMap<String, String> = HashMap::new();
        for (i, entry) in entries.iter().enumerate() {
            let id = i as u32;
            let mut length = 0.0;
            let mut add =
                |text: &str, weight: f32, postings: &mut HashMap<String, HashMap<u32, f32>>| {
                    for term in terms(text) {
                        *postings.entry(term).or_default().entry(id).or_insert(0.0) += weight;
                        length += weight;
                    }
                };
            add(&entry.name, NAME_WEIGHT, &mut postings);
            add(&entry.category, CATEGORY_WEIGHT, &mut postings);
            add(&entry.description, DESCRIPTION_WEIGHT, &mut postings);
            for keyword in &entry.keywords {
                add(keyword, KEYWORD_WEIGHT, &mut postings);
            }
            // Parameter descriptions are left to the meaning: as words they
            // pulled `git_diff` ("commit" in its `target`) above `git_log`.
            for (name, _) in parameters(entry) {
                add(name, PARAM_WEIGHT, &mut postings);
            }
            add(effect_words(entry), EFFECT_WEIGHT, &mut postings);
            if let Some(instructions) = &entry.server_instructions {
                add(instructions, INSTRUCTIONS_WEIGHT, &mut postings);
            }
            for word in name_words(&entry.name) {
                let term = stem(&word);
                name_spelling.entry(term.clone()).or_insert(word);
                name_terms.insert(term);
            }
            lengths.push(length);
        }
        let deprecated = entries
            .iter()
            .map(|e| e.description.to_ascii_lowercase().contains("deprecated"))
            .collect();
        let exact_names = entries.iter().map(|e| name_words(&e.name)).collect();
        let mut by_name_words: HashMap<String, Vec<u32>> = HashMap::new();
        let mut joined_names: HashMap<String, Vec<String>> = HashMap::new();
        let mut by_name_term: HashMap<String, Vec<u32>> = HashMap::new();
        for (i, entry) in entries.iter().enumerate() {
            let written = split_words(&entry.name);
            if written.len() >= 2 {
                joined_names.entry(written.concat()).or_insert(written);
            }
            let words = word_set(&entry.name);
            for term in &words {
                by_name_term.entry(term.clone()).or_default().push(i as u32);
            }
            if !words.is_empty() {
                by_name_words
                    .entry(words.join(" "))
                    .or_default()
                    .push(i as u32);
            }
        }
        let category_words = entries.iter().map(|e| word_set(&e.category)).collect();
        let by_qualified = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.qualified_name(), i))
            .collect();
        let avg_length = if lengths.is_empty() {
            1.0
        } else {
            lengths.iter().sum::<f32>() / lengths.len() as f32
        };
        Catalog {
            entries,
            postings: postings
                .into_iter()
                .map(|(t, docs)| {
                    let mut v: Vec<(u32, f32)> = docs.into_iter().collect();
                    v.sort_by_key(|(d, _)| *d);
                    (t, v)
                })
                .collect(),
            name_terms: name_terms.into_iter().collect(),
            name_spelling,
            lengths,
            avg_length: avg_length.max(1.0),
            deprecated,
            exact_names,
            by_name_words,
            joined_names,
            by_name_term,
            by_qualified,
            category_words,
            semantic: None,
            id: {
                static MADE: AtomicU64 = AtomicU64::new(1);
                MADE.fetch_add(1, Ordering::Relaxed)
            },
        }
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The best `limit` entries for `query`, optionally within one
    /// category, best first. An empty query lists the category in order.
    pub fn search(&self, query: &str, category: Option<&str>, limit: usize) -> Vec<Hit> {
        self.rank(query, category, limit, true, None, None)
    }

    /// As [`Catalog::search`], with recorded uses lifting the tools used
    /// after searches close to this one.
    pub fn search_learned(
        &self,
        query: &str,
        category: Option<&str>,
        limit: usize,
        learning: Learning<'_>,
    ) -> Vec<Hit> {
        self.rank(query, category, limit, true, Some(learning), None)
    }

    /// The hits of [`Catalog::search_learned`] (or [`Catalog::search`]
    /// without `learning`), each with why it ranked there.
    pub fn explain(
        &self,
        query: &str,
        category: Option<&str>,
        limit: usize,
        learning: Option<Learning<'_>>,
    ) -> Vec<Why> {
        let mut why = Vec::new();
        self.rank(query, category, limit, true, learning, Some(&mut why));
        why
    }

    /// As [`Catalog::search`], by words alone: for a name that was not
    /// found ("git_lgo"), whose closest names are a matter of spelling, not
    /// of meaning.
    pub fn search_words(&self, query: &str, category: Option<&str>, limit: usize) -> Vec<Hit> {
        self.rank(query, category, limit, false, None, None)
    }

    fn rank(
        &self,
        query: &str,
        category: Option<&str>,
        limit: usize,
        meaning: bool,
        learning: Option<Learning<'_>>,
        explain: Option<&mut Vec<Why>>,
    ) -> Vec<Hit> {
        let in_category =
            |i: usize| category.is_none_or(|c| self.entries[i].category.eq_ignore_ascii_case(c));
        let query_terms = terms(query);
        if query_terms.is_empty() {
            return (0..self.entries.len())
                .filter(|i| in_category(*i))
                .take(limit)
                .map(|index| Hit { index, score: 0.0 })
                .collect();
        }
        let lexical = self.lexical_scores(&query_terms);
        let closeness = match &self.semantic {
            Some(semantic) if meaning => semantic.closeness(
                &self.spelled(semantic.model, query),
                learning.is_some_and(|l| !l.learned.is_empty()),
            ),
            _ => None,
        };
        let by_words_alone = closeness.is_none();
        let mut hits: Vec<Hit> = match &closeness {
            Some(closeness) => {
                let tuning = crate::tuning::of(self.semantic.as_ref().map(|s| s.model));
                let scale = self.words_scale(&lexical, &query_terms, tuning.words_floor);
                blend(&lexical, closeness, scale)
            }
            None => lexical
                .iter()
                .map(|(doc, score)| Hit {
                    index: *doc as usize,
                    score: *score,
                })
                .collect(),
        };
        let wants_deprecated = query_terms.iter().any(|t| t.starts_with("deprecat"));
        hits.retain(|h| in_category(h.index));
        let deprecated = |index: usize| self.deprecated[index] && !wants_deprecated;
        for hit in &mut hits {
            if deprecated(hit.index) {
                hit.score *= DEPRECATED_FACTOR;
            }
        }
        let learned = learning.map_or_else(Vec::new, |l| {
            self.learned_boosts(query, l, closeness.as_ref())
        });
        let (mut kept_by_words, mut kept_as_first) = (None, None);
        if !learned.is_empty() {
            // What the catalog ranks first before the records count: kept
            // in the first three too (a need nobody asked before is mostly
            // one the catalog already finds).
            let keep_first = crate::tuning::of(self.semantic.as_ref().map(|s| s.model)).keep_first;
            // A pass over every hit (most of a large catalog, with meaning):
            // only for a model that keeps it.
            let first_before = keep_first
                .then(|| hits.iter().min_by(|a, b| self.result_order(a, b)))
                .flatten()
                .map(|h| h.index);
            let kept =
                self.words_first_in_top(&hits, &lexical, in_category, LEARNING_KEEPS_WORDS_FIRST);
            // Each entry's place in the hits, by its index (a hash map over
            // most of a large catalog cost a third of a millisecond).
            let mut at = vec![usize::MAX; self.entries.len()];
            for (place, hit) in hits.iter().enumerate() {
                if let Some(slot) = at.get_mut(hit.index) {
                    *slot = place;
                }
            }
            for &(index, boost, _) in &learned {
                let boost = if deprecated(index) {
                    boost * DEPRECATED_FACTOR
                } else {
                    boost
                };
                match at.get(index).copied().filter(|&at| at != usize::MAX) {
                    Some(at) => hits[at].score += boost,
                    // Not a hit before (no word in common, meaning too far):
                    // what it had, and what records add.
                    None if in_category(index) && boost > 0.0 => {
                        let had = closeness
                            .as_ref()
                            .map_or(0.0, |c| blended(0.0, c.own[index], c.server[index]));
                        let had = if deprecated(index) {
                            had * DEPRECATED_FACTOR
                        } else {
                            had
                        };
                        hits.push(Hit {
                            index,
                            score: had + boost,
                        });
                    }
                    None => {}
                }
            }
            // Words first: where both would take the third place, what
            // words alone are sure of keeps it.
            if let Some(first) = first_before
                && Some(first) != kept
                && self.keep_in_top(&mut hits, first, LEARNING_KEEPS_WORDS_FIRST)
            {
                kept_as_first = Some(first);
            }
            if let Some(kept) = kept
                && self.keep_in_top(&mut hits, kept, LEARNING_KEEPS_WORDS_FIRST)
            {
                kept_by_words = Some(kept);
            }
            // Said only of a tool still in the first places.
            kept_as_first = kept_as_first.filter(|&first| {
                hits.iter().find(|h| h.index == first).is_some_and(|hit| {
                    hits.iter().filter(|h| self.ranks_before(h, hit)).count()
                        < LEARNING_KEEPS_WORDS_FIRST
                })
            });
        }
        // With meaning, the bonus would multiply the cosine too, and lift a
        // tool for an incidental word: "read a file" then needs no help.
        if by_words_alone {
            self.add_exact_name_bonus(&mut hits, &name_words(query), limit);
        }
        let named = self.put_named_first(&mut hits, query, category);
        let order = |a: &Hit, b: &Hit| self.result_order(a, b);
        // Only the best `limit` need sorting: with meaning, most of a large
        // catalog scores something.
        if hits.len() > limit && limit > 0 {
            hits.select_nth_unstable_by(limit - 1, order);
            hits.truncate(limit);
        }
        hits.sort_by(order);
        hits.truncate(limit);
        if let Some(why) = explain {
            why.extend(hits.iter().map(|hit| {
                Why {
                    hit: *hit,
                    words: lexical.get(&(hit.index as u32)).copied().unwrap_or(0.0),
                    meaning: closeness
                        .as_ref()
                        .map(|c| (c.own[hit.index], c.server[hit.index])),
                    named: named
                        .iter()
                        .find(|(i, _)| *i == hit.index)
                        .map(|(_, how)| *how),
                    // What prints as 0.00 is not a reason.
                    learned: learned
                        .iter()
                        .find(|(index, change, _)| *index == hit.index && change.abs() >= 0.005)
                        .zip(learning)
                        .and_then(|((_, change, at), l)| {
                            let words = l.learned.uses().get(*at)?.words.join(" ");
                            Some((*change, words))
                        }),
                    kept_by_words: kept_by_words == Some(hit.index),
                    kept_as_first: kept_as_first == Some(hit.index),
                    deprecated: self.deprecated[hit.index],
                }
            }));
        }
        hits
    }

    /// The tool words alone rank first, strictly (a tie is no certainty),
    /// when it also ranks among the first `places` of `hits`: what learning
    /// must not take from it. Deprecated tools count as the ranking treats
    /// them (their score already lowered).
    fn words_first_in_top(
        &self,
        hits: &[Hit],
        lexical: &Scores,
        in_category: impl Fn(usize) -> bool,
        places: usize,
    ) -> Option<usize> {
        // Over the tools with a word in common, not every hit: with meaning,
        // most of a large catalog is a hit.
        let (mut first, mut best, mut second) = (None, f32::MIN, f32::MIN);
        for (&index, &words) in lexical {
            let index = index as usize;
            if !in_category(index) {
                continue;
            }
            let words = if self.deprecated[index] {
                words * DEPRECATED_FACTOR
            } else {
                words
            };
            if words > best {
                (first, second, best) = (Some(index), best, words);
            } else if words > second {
                second = words;
            }
        }
        let first = first.filter(|_| best > second)?;
        let hit = hits.iter().find(|h| h.index == first)?;
        let above = hits.iter().filter(|h| self.ranks_before(h, hit)).count();
        (above < places).then_some(first)
    }

    /// The order of the results: the higher score first, then the name.
    fn result_order(&self, a: &Hit, b: &Hit) -> std::cmp::Ordering {
        b.score
            .total_cmp(&a.score)
            .then_with(|| self.entries[a.index].name.cmp(&self.entries[b.index].name))
    }

    /// Whether `a` comes before `b` in the results.
    fn ranks_before(&self, a: &Hit, b: &Hit) -> bool {
        self.result_order(a, b).is_lt()
    }

    /// Lifts the hit of entry `index`, if it fell below the first `places`,
    /// to just above the one now in the last of them; whether it did.
    fn keep_in_top(&self, hits: &mut [Hit], index: usize, places: usize) -> bool {
        let Some(at) = hits.iter().position(|h| h.index == index) else {
            return false;
        };
        let kept = hits[at];
        let mut above: Vec<f32> = hits
            .iter()
            .filter(|h| h.index != index && self.ranks_before(h, &kept))
            .map(|h| h.score)
            .collect();
        if above.len() < places {
            return false;
        }
        above.sort_by(|a, b| b.total_cmp(a));
        let Some(last) = places.checked_sub(1).and_then(|p| above.get(p)) else {
            return false;
        };
        hits[at].score = last.next_up();
        true
    }

    /// What recorded uses change in their tools' scores for `query`, with
    /// the record that counted most (its place in the records). Three ways:
    ///
    /// - *By words*: a record sharing half or more of the query's stemmed
    ///   words lifts its tool by up to [`LEARN_WEIGHT`], the same words in
    ///   full and used often giving the most.
    /// - *By meaning*, a soft nearest neighbour: each tool's closest record
    ///   (cosine with the query), and the tools compete in a softmax
    ///   (temperature [`LEARN_TEMPERATURE`]), each record's cosine less
    ///   the model's share of its hubness, against "none of them" at the
    ///   model's floor (`crate::tuning`). A tool whose record stands out from every
    ///   other tool's is lifted by up to [`LEARN_MEANING_WEIGHT`]; where
    ///   several are about as close, none is lifted much. A static model
    ///   finds unrelated queries fairly close, so a fixed lift per close
    ///   record lifted many wrong tools a little and the right one too
    ///   little: what tells a paraphrase of a recorded need from another
    ///   need is that its record is the closest by a margin.
    /// - *By moving the tool* ([`Catalog::shifted`]): its vector moves
    ///   toward how it was asked for, and its score is what meaning gives
    ///   it there, higher or lower.
    fn learned_boosts(
        &self,
        query: &str,
        learning: Learning<'_>,
        closeness: Option<&Closeness>,
    ) -> Vec<(usize, f32, usize)> {
        let words = name_words(query);
        let terms = term_set(&words);
        if terms.is_empty() || learning.learned.is_empty() {
            return Vec::new();
        }
        let semantic = self.semantic.as_ref();
        let model = semantic.map(|s| s.model);
        let q = closeness
            .and_then(|c| c.learning.as_deref())
            .filter(|v| v.iter().any(|x| *x != 0.0));
        let prepared = learning.learned.prepared(model);
        let tuning = crate::tuning::of(model);
        // Each used tool's entry here (and its vector's dot with its shift),
        // kept for this catalog: no name is looked up per search.
        let places = prepared.placed(self.id, |used| {
            let index = *self.by_qualified.get(&used.tool)?;
            let dot = semantic
                .and_then(|s| s.entry_vector(index))
                .map_or(0.0, |v| cem_embed::dot(&v, &used.shift));
            Some((index, dot))
        });
        let tools = prepared.tools.len();
        // Per used tool: the most its records lift it (lift, record), its
        // closest record in meaning (cosine, strength, record), and its
        // records' weighted dots with the query (see `Prepared::query_dot`).
        let mut lifts: Vec<Option<(f32, usize)>> = vec![None; tools];
        let mut nearest: Vec<Option<(f32, f32, usize)>> = vec![None; tools];
        let mut toward = vec![0f32; tools];
        let mut toward_all = 0f32;
        let lift = |lifts: &mut Vec<Option<(f32, usize)>>, t: usize, boost: f32, at: usize| {
            if let Some(best) = lifts.get_mut(t)
                && best.is_none_or(|(b, _)| boost > b)
            {
                *best = Some((boost, at));
            }
        };
        // The query's dot with every record, in one pass over their rows.
        let dots = q.map_or_else(Vec::new, |q| prepared.dots(q));
        let numbers = prepared.terms.numbers(&terms);
        for (at, used) in learning.learned.uses().iter().enumerate() {
            let (Some(&t), Some(recorded)) = (prepared.tool_of.get(at), prepared.terms.of(at))
            else {
                continue;
            };
            // Every record counts in the sums the shifts are made of, also
            // one whose tool this catalog lacks (a server away): the shifts
            // were made from all of them.
            let dot = dots.get(at).copied();
            if let Some(dot) = dot {
                let weight = prepared.weights.get(at).copied().unwrap_or(0.0);
                toward[t] += weight * dot;
                toward_all += weight * dot;
            }
            if places.get(t).is_none_or(Option::is_none) {
                continue;
            }
            // One use counts 0.63 of many.
            let strength = 1.0 - (-used.weight_at(learning.now)).exp();
            let common = recorded.iter().filter(|t| numbers.contains(t)).count();
            let shared = common as f32 / (recorded.len() + terms.len() - common).max(1) as f32;
            let by_words = LEARN_WEIGHT * above(shared, LEARN_SHARED_FLOOR);
            if by_words > 0.0 {
                lift(&mut lifts, t, strength * by_words, at);
            }
            if let Some(dot) = dot {
                let hub = prepared.hubs.get(at).copied().unwrap_or(0.0);
                let cosine = dot - tuning.hub_weight * hub;
                if nearest[t].is_none_or(|(c, _, _)| cosine > c) {
                    nearest[t] = Some((cosine, strength, at));
                }
            }
        }
        let weight = |cosine: f32| ((cosine - tuning.floor) / LEARN_TEMPERATURE).exp();
        // "None of them" weighs 1 (the floor); a tool below it weighs less.
        let total: f32 = 1.0
            + nearest
                .iter()
                .flatten()
                .map(|(c, _, _)| weight(*c))
                .sum::<f32>();
        for (t, near) in nearest.iter().enumerate() {
            if let Some((cosine, strength, at)) = *near {
                let share = weight(cosine) / total;
                if share > 0.01 {
                    lift(&mut lifts, t, strength * LEARN_MEANING_WEIGHT * share, at);
                }
            }
        }
        let moves = closeness.map(|closeness| {
            let toward: Vec<f32> = (0..tools)
                .map(|t| prepared.query_dot(t, &toward, toward_all))
                .collect();
            self.shifted(prepared, &places, &toward, learning.now, closeness)
        });
        let mut changes = Vec::new();
        for (t, place) in places.iter().enumerate() {
            let Some((index, _)) = *place else {
                continue;
            };
            let moved = moves
                .as_ref()
                .and_then(|m| m.get(t).copied())
                .unwrap_or(0.0);
            // The move adds to (or takes from) what lifted the tool; its
            // record is then the tool's closest one.
            let change = match lifts[t] {
                Some((lift, at)) => Some((lift + moved, at)),
                None => nearest[t]
                    .filter(|_| moved.abs() >= LEARN_MIN_CHANGE)
                    .map(|(_, _, at)| (moved, at)),
            };
            if let Some((change, at)) = change {
                changes.push((index, change, at));
            }
        }
        changes
    }

    /// What moving each used tool's vector changes in its score, per used
    /// tool (0 for one the catalog lacks): relevance feedback (Rocchio 1971)
    /// on the tool's side. The vector moves by the model's shift (`crate::tuning`) times the
    /// strength of its records (one use 0.63 of many) times its shift
    /// (`UsedTool::shift`: its records' mean less
    /// the model's centre times the other tools' records'
    /// mean), and keeps its length. A query in other words than the record
    /// comes closer to the tool as far as it is closer to how this tool was
    /// asked for than to how the others were; a query about something else
    /// moves away from it. The tool then competes in meaning as every other
    /// does, with its words and its server, rather than against a floor.
    /// The query's dot with each shift comes from its dots with the records
    /// (`toward`), the tool vector's from `places`: a search adds no pass
    /// over the vectors.
    fn shifted(
        &self,
        prepared: &crate::prepared::Prepared,
        places: &[Option<(usize, f32)>],
        toward: &[f32],
        now: u64,
        closeness: &Closeness,
    ) -> Vec<f32> {
        let Some(semantic) = self.semantic.as_ref() else {
            return Vec::new();
        };
        let shift = crate::tuning::of(Some(semantic.model)).shift;
        let change =
            |used: &crate::prepared::UsedTool, place: &Option<(usize, f32)>, query_dot: f32| {
                let (index, vector_dot) = (*place)?;
                let length2 = semantic.length2(index)?;
                let (own, server) = (*closeness.own.get(index)?, *closeness.server.get(index)?);
                // One use counts 0.63 of many.
                let k = shift * (1.0 - (-used.weight_at(now)).exp());
                // |v + k·s|² = |v|² + 2k v·s + k²|s|²
                let moved2 = length2 + 2.0 * k * vector_dot + k * k * used.length2;
                if length2 <= f32::MIN_POSITIVE || moved2 <= f32::MIN_POSITIVE {
                    return None;
                }
                let cosine = (own + k * query_dot) * (length2 / moved2).sqrt();
                // The words' share is the same before and after the move:
                // only the meaning changes the score.
                Some(blended(0.0, cosine, server) - blended(0.0, own, server))
            };
        prepared
            .tools
            .iter()
            .zip(places)
            .zip(toward)
            .map(|((used, place), &query_dot)| change(used, place, query_dot).unwrap_or(0.0))
            .collect()
    }

    /// What the lexical scores are divided by before they are blended with
    /// meaning: the best hit's score, or `floor` times BM25's bound on the
    /// query's own words (each word's IDF at a saturated term frequency;
    /// joined pairs and prefix matches may score above it, which the best
    /// hit then covers), whichever is larger. With a floor, words
    /// that explain only a small part of the query (the "created" of "when
    /// was it created", meeting every tool named "create") weigh less than
    /// words that explain it, instead of counting in full because no tool
    /// matched better. Never zero.
    fn words_scale(&self, lexical: &Scores, query_terms: &[String], floor: f32) -> f32 {
        let best = lexical.values().fold(0f32, |m, s| m.max(*s));
        let bound = if floor > 0.0 {
            let n = self.entries.len() as f32;
            let attainable: f32 = query_terms
                .iter()
                .map(|t| {
                    let df = self.postings.get(t).map_or(0, Vec::len) as f32;
                    idf(n, df) * (K1 + 1.0)
                })
                .sum();
            floor * attainable
        } else {
            0.0
        };
        best.max(bound).max(f32::MIN_POSITIVE)
    }

    /// BM25 over the weighted fields, with misspelt and prefix matches of
    /// words that match nothing exactly, and words that the query splits in
    /// two ("read only", "file system") matched as one.
    fn lexical_scores(&self, query_terms: &[String]) -> Scores {
        let mut query_terms = query_terms.to_vec();
        let joined: Vec<String> = query_terms
            .windows(2)
            .map(|pair| format!("{}{}", pair[0], pair[1]))
            .filter(|t| self.postings.contains_key(t))
            .collect();
        query_terms.extend(joined);
        let mut scores = Scores::default();
        let n = self.entries.len() as f32;
        for term in &query_terms {
            let mut matched: Vec<(&str, f32)> = Vec::new();
            if self.postings.contains_key(term) {
                matched.push((term.as_str(), 1.0));
            }
            // Misspelt name words ("comit") still find their tool. Only for
            // words that match nothing exactly: a large vocabulary then
            // costs nothing for ordinary queries.
            if matched.is_empty() {
                for (candidate, _) in self.misspelt(term) {
                    matched.push((candidate, FUZZY_FACTOR));
                }
            }
            // A word that matches nothing may begin one ("sql" in
            // "sqlite", "json" in "jsonpath"). Also only for unmatched words.
            if matched.is_empty() && term.len() >= 3 {
                for candidate in self.postings.keys() {
                    if candidate.len() > term.len() && candidate.starts_with(term.as_str()) {
                        matched.push((candidate.as_str(), PREFIX_FACTOR));
                    }
                }
            }
            for (t, factor) in matched {
                let Some(docs) = self.postings.get(t) else {
                    continue;
                };
                let idf = idf(n, docs.len() as f32);
                for (doc, tf) in docs {
                    let len = self.lengths[*doc as usize];
                    let norm = tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / self.avg_length));
                    *scores.entry(*doc).or_insert(0.0) += factor * idf * norm;
                }
            }
        }
        scores
    }

    /// The name terms `term` may be a misspelling of, with their edit
    /// distance: one edit for a word under eight letters, two from eight,
    /// none under three.
    fn misspelt<'a>(&'a self, term: &'a str) -> impl Iterator<Item = (&'a str, usize)> + 'a {
        let max = if term.len() >= 8 { 2 } else { 1 };
        self.name_terms
            .iter()
            .filter(move |c| {
                term.len() >= 3 && c.as_str() != term && c.len().abs_diff(term.len()) <= max
            })
            .map(move |c| (c.as_str(), edit_distance(term, c, max)))
            .filter(move |(_, d)| *d <= max)
    }

    /// The query's words for the embedding model, misspellings mended: a
    /// word that neither the catalog nor the model knows, and that is one
    /// or two edits from a tool's name word, becomes that name word
    /// ("comit" → "commit", "git_lgo" → "git log"). The model would
    /// otherwise spell it out in word pieces that mean something else.
    fn spelled(&self, model: &cem_embed::Model, query: &str) -> Vec<String> {
        split_words(query)
            .into_iter()
            .map(|word| {
                let term = stem(&word);
                if model.knows(&word) || self.postings.contains_key(&term) {
                    return word;
                }
                self.misspelt(&term)
                    .min_by_key(|(_, distance)| *distance)
                    .and_then(|(closest, _)| self.name_spelling.get(closest))
                    .cloned()
                    .unwrap_or(word)
            })
            .collect()
    }

    /// Raises each hit's score by [`EXACT_NAME_BONUS`] per query word its
    /// name holds as written. Only for hits that could still reach the best
    /// `limit`: comparing words for every hit of a common word in a large
    /// catalog cost more than the rest of the search.
    fn add_exact_name_bonus(&self, hits: &mut [Hit], words: &[String], limit: usize) {
        if words.is_empty() || limit == 0 {
            return;
        }
        let most = 1.0 + EXACT_NAME_BONUS * words.len() as f32;
        // The `limit`-th best score before the bonus: a hit below it even at
        // the largest bonus stays out of the results, the bonus or not.
        let floor = if hits.len() > limit {
            let mut scores: Vec<f32> = hits.iter().map(|h| h.score).collect();
            *scores
                .select_nth_unstable_by(limit - 1, |a, b| b.total_cmp(a))
                .1
        } else {
            0.0
        };
        for hit in hits.iter_mut().filter(|h| h.score * most >= floor) {
            let names = &self.exact_names[hit.index];
            let exact = words.iter().filter(|w| names.contains(w)).count();
            hit.score *= 1.0 + EXACT_NAME_BONUS * exact as f32;
        }
    }

    /// A query that names a tool finds it first, whatever its meaning
    /// scores: an agent that knows the name wants that tool. Named are,
    /// first, the tool whose whole name the query is (`git.git_log`,
    /// `git_log`), then the tools whose name words the query is made of, in
    /// any order, case or separator, with its server's words or not (`git
    /// log`, `log git`, `Git-Log`, `filesystem read text file`); of those,
    /// the ones whose names hold most of the query's words, deprecated
    /// tools aside. When neither names anything, the tools whose name the
    /// query writes as a name among other words (`run git_log for me`, see
    /// [`Catalog::named_in_query`]). Tools named alike keep the order they
    /// had.
    fn put_named_first(
        &self,
        hits: &mut Vec<Hit>,
        query: &str,
        category: Option<&str>,
    ) -> Vec<(usize, &'static str)> {
        let query = query.trim();
        let in_category =
            |i: &usize| category.is_none_or(|c| self.entries[*i].category.eq_ignore_ascii_case(c));
        // In the category as the ranking filters it (`find` is looser).
        let whole: Vec<usize> = if query.is_empty() || query.contains(char::is_whitespace) {
            Vec::new()
        } else {
            self.find_indices(query, category)
                .into_iter()
                .filter(in_category)
                .collect()
        };
        // A deprecated tool is named by its whole name only: `read file`
        // wants what replaced `read_file` (its own description says so).
        let by_words: Vec<usize> = self
            .named_by_words(query)
            .into_iter()
            .filter(in_category)
            .filter(|i| !whole.contains(i) && !self.deprecated[*i])
            .collect();
        // Only when nothing is named outright.
        let among_others: Vec<usize> = if whole.is_empty() && by_words.is_empty() {
            self.named_in_query(query, |i| in_category(&i) && !self.deprecated[i])
        } else {
            Vec::new()
        };
        let mut named = Vec::new();
        let top = hits.iter().fold(0f32, |m, h| m.max(h.score));
        for (these, score, how) in [
            (whole, top * 2.0 + 2.0, "its whole name"),
            (by_words, top * 2.0 + 1.0, "its name words"),
            (among_others, top * 2.0 + 0.5, "its name, among other words"),
        ] {
            for index in these {
                match hits.iter_mut().find(|h| h.index == index) {
                    // Several tools named alike keep the order they had.
                    Some(hit) => {
                        let before = (hit.score / top.max(f32::MIN_POSITIVE)).clamp(0.0, 1.0);
                        hit.score = score + 0.25 * before;
                    }
                    None => hits.push(Hit { index, score }),
                }
                named.push((index, how));
            }
        }
        named
    }

    /// The tools whose name words `query` holds all of, with nothing else
    /// but their server's words; of those, the ones whose names hold most of
    /// the query. Looked up by each subset of the query's words (a query
    /// of more than [`MAX_NAMING_WORDS`] words names nothing), so it costs
    /// the same over ten tools or ten thousand.
    fn named_by_words(&self, query: &str) -> Vec<usize> {
        let words = term_set(&self.naming_words(query));
        if words.is_empty() || words.len() > MAX_NAMING_WORDS {
            return Vec::new();
        }
        let mut best: Vec<usize> = Vec::new();
        let mut most = 0;
        for mask in 1u32..(1 << words.len()) {
            let (mut named, mut rest) = (Vec::new(), Vec::new());
            for (bit, word) in words.iter().enumerate() {
                if mask & (1 << bit) != 0 {
                    named.push(word.as_str());
                } else {
                    rest.push(word);
                }
            }
            if named.len() < most {
                continue;
            }
            let key = named.join(" ");
            let Some(entries) = self.by_name_words.get(&key) else {
                continue;
            };
            for &index in entries {
                let server = &self.category_words[index as usize];
                if rest.iter().all(|w| server.contains(w)) {
                    if named.len() > most {
                        most = named.len();
                        best.clear();
                    }
                    best.push(index as usize);
                }
            }
        }
        best
    }

    /// The query's words (lowercase, stop words kept), a word that is a
    /// name of several words written as one (`gitlog`) taken as those words
    /// unless the catalog knows it as a word of its own.
    fn naming_words(&self, query: &str) -> Vec<String> {
        split_words(query)
            .into_iter()
            .flat_map(|word| self.unjoined(word))
            .collect()
    }

    /// `word`, or the name words it joins (`gitlog`: git, log).
    fn unjoined(&self, word: String) -> Vec<String> {
        match self.joined_names.get(&word) {
            Some(parts) if !self.postings.contains_key(&stem(&word)) => parts.clone(),
            _ => vec![word],
        }
    }

    /// The tools whose name the query writes as a name among other words:
    /// one of its words, punctuation around it aside, made of two name
    /// words or more joined by `_`, `-`, `.` or case (`run git_log for me`,
    /// `use GitLog on ~/proj`, `call API-create-a-comment`, `gitlog`,
    /// `git.git_log with max_count 5`), that would name the tool as a whole
    /// query ([`Catalog::named_by_words`]); of those, the tools with the
    /// longest names that `keep` lets through. The same words written apart
    /// name nothing among others: "list commits in my local repo", "undo
    /// the last git commit" and "create table in excel" describe a need, and
    /// share two words with a tool's name by chance. A word of a path
    /// (`~/git/log`) is no name.
    fn named_in_query(&self, query: &str, keep: impl Fn(usize) -> bool) -> Vec<usize> {
        let mut best: Vec<usize> = Vec::new();
        let mut most = 2;
        for word in query.split_whitespace() {
            let word = word.trim_matches(|c: char| !c.is_alphanumeric());
            // Most words of a query are plain words: nothing to split.
            let plain = word
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
            if plain && !self.joined_names.contains_key(word) {
                continue;
            }
            if !word
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
            {
                continue;
            }
            let named: Vec<usize> = if word.contains('.') {
                // A dot only as `server.tool`: `export.csv` and `git.log`
                // are files.
                self.find_indices(word, None)
            } else {
                let parts = self.naming_words(word);
                self.named_by_words(word)
                    .into_iter()
                    // Written as one word among others, a name of two words
                    // is too often a word ("settable"): it must begin with
                    // its server's word (`gitlog`) or have three.
                    .filter(|&i| {
                        !plain
                            || parts.len() >= 3
                            || parts
                                .first()
                                .is_some_and(|first| self.category_words[i].contains(&stem(first)))
                    })
                    .collect()
            };
            for index in named.into_iter().filter(|&i| keep(i)) {
                // The tool's own name words count, not its server's.
                let length = self.exact_names[index].len();
                if length < most || self.within_a_longer_name(index, query) {
                    continue;
                }
                if length > most {
                    most = length;
                    best.clear();
                }
                if !best.contains(&index) {
                    best.push(index);
                }
            }
        }
        best
    }

    /// Whether another tool's name holds all of entry `index`'s name words
    /// and more, and `query` holds all of those: "stop the port-forward"
    /// writes `port_forward` but asks for `stop_port_forward`, and names
    /// neither.
    fn within_a_longer_name(&self, index: usize, query: &str) -> bool {
        let own = term_set(&self.exact_names[index]);
        let Some(rarest) = own
            .iter()
            .filter_map(|t| self.by_name_term.get(t))
            .min_by_key(|entries| entries.len())
        else {
            return false;
        };
        let asked = term_set(&self.naming_words(query));
        rarest.iter().any(|&other| {
            let other = other as usize;
            if other == index {
                return false;
            }
            let theirs = term_set(&self.exact_names[other]);
            theirs.len() > own.len()
                && own.iter().all(|t| theirs.contains(t))
                && theirs.iter().all(|t| asked.contains(t))
        })
    }

    /// Finds an entry by `name`, `category.name` or `category__name`, with
    /// `category` narrowing (case-insensitive, `-` and `_` alike).
    pub fn find(&self, name: &str, category: Option<&str>) -> Vec<&Entry> {
        self.find_indices(name, category)
            .into_iter()
            .map(|i| &self.entries[i])
            .collect()
    }

    /// [`Catalog::find`] as indices into the entries. Compares without
    /// allocating: a one-word search runs it over the whole catalog.
    fn find_indices(&self, name: &str, category: Option<&str>) -> Vec<usize> {
        let (cat, tool) = match (
            category,
            // A server's name has no dot, and a tool's may have `__`
            // (`list__items`): the dot first.
            name.split_once('.').or_else(|| name.split_once("__")),
        ) {
            (Some(c), _) => (Some(c), name),
            (None, Some((c, t))) if self.entries.iter().any(|e| same_name(&e.category, c)) => {
                (Some(c), t)
            }
            _ => (None, name),
        };
        let found: Vec<usize> = (0..self.entries.len())
            .filter(|i| same_name(&self.entries[*i].name, tool))
            .filter(|i| cat.is_none_or(|c| same_name(&self.entries[*i].category, c)))
            .collect();
        // `get-sum` and `get_sum` may both exist: the name as written wins.
        let exact: Vec<usize> = found
            .iter()
            .copied()
            .filter(|i| self.entries[*i].name == tool)
            .collect();
        if found.len() > 1 && exact.len() == 1 {
            return exact;
        }
        found
    }
}

/// BM25's inverse document frequency of a term in `df` of `n` entries
/// (Lucene's form, never negative).
fn idf(n: f32, df: f32) -> f32 {
    ((n - df + 0.5) / (df + 0.5) + 1.0).ln()
}

/// How far `value` is from `floor` to 1, from 0 to 1.
fn above(value: f32, floor: f32) -> f32 {
    ((value - floor) / (1.0 - floor)).clamp(0.0, 1.0)
}

/// The most words a query that names a tool by its name words may have
/// (the subsets of its words are looked up: 2^6).
const MAX_NAMING_WORDS: usize = 6;

/// The words of a name or query as a set: split at separators and case
/// changes, lowercase, stop words dropped, stemmed, sorted, each once.
fn word_set(text: &str) -> Vec<String> {
    term_set(&name_words(text))
}

/// Whether two names are the same without case, with `-` as `_`.
fn same_name(a: &str, b: &str) -> bool {
    let fold = |c: u8| {
        if c == b'-' {
            b'_'
        } else {
            c.to_ascii_lowercase()
        }
    };
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| fold(x) == fold(y))
}

/// The hybrid score: the lexical score divided by `scale` (see
/// [`Catalog::words_scale`]: the best hit then has 1 at most), with
/// [`LEXICAL_SHARE`] of the weight, and the closeness of meaning (the
/// tool's cosine plus [`SERVER_WEIGHT`] of its server's) with the rest. An
/// entry with no word in common is kept when its own cosine reaches
/// [`MIN_COSINE`]: a close server alone does not make a tool a hit.
fn blend(lexical: &Scores, closeness: &Closeness, scale: f32) -> Vec<Hit> {
    // Each entry's lexical score by its place (NaN for none): a hash lookup
    // per entry of a large catalog cost more than the cosines.
    let mut by_index = vec![f32::NAN; closeness.own.len()];
    for (&index, &score) in lexical {
        if let Some(slot) = by_index.get_mut(index as usize) {
            *slot = score;
        }
    }
    let mut hits = Vec::with_capacity(closeness.own.len());
    for (index, ((cosine, server), score)) in closeness
        .own
        .iter()
        .zip(&closeness.server)
        .zip(&by_index)
        .enumerate()
    {
        let lex = if !score.is_nan() {
            score / scale
        } else if *cosine < MIN_COSINE {
            continue;
        } else {
            0.0
        };
        hits.push(Hit {
            index,
            score: blended(lex, *cosine, *server),
        });
    }
    hits
}

/// A tool's score from its scaled lexical score, its cosine and its
/// server's.
fn blended(lex: f32, cosine: f32, server: f32) -> f32 {
    let meaning = (cosine + SERVER_WEIGHT * server).max(0.0);
    LEXICAL_SHARE * lex + (1.0 - LEXICAL_SHARE) * meaning
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EntryKind;

    pub(super) fn entry(category: &str, name: &str, description: &str) -> Entry {
        Entry {
            kind: EntryKind::Upstream,
            category: category.into(),
            name: name.into(),
            description: description.into(),
            input_schema: None,
            output_schema: None,
            keywords: vec![],
            mcp_server: None,
            ..Default::default()
        }
    }

    fn catalog() -> Catalog {
        Catalog::new(vec![
            entry("git", "git_log", "Shows the commit logs"),
            entry("git", "git_commit", "Records changes to the repository"),
            entry("everything", "get-sum", "Returns the sum of two numbers"),
            entry("everything", "getTinyImage", "Returns a small image"),
            entry(
                "fs",
                "read_text_file",
                "Read the complete contents of a file as text",
            ),
        ])
    }

    fn top(c: &Catalog, q: &str) -> String {
        c.search(q, None, 1)
            .first()
            .map(|h| c.entries()[h.index].name.clone())
            .unwrap_or_default()
    }

    #[test]
    fn names_rank_first_and_words_are_split() {
        let c = catalog();
        assert_eq!(top(&c, "git log"), "git_log");
        assert_eq!(top(&c, "commit history logs"), "git_log");
        assert_eq!(top(&c, "tiny image"), "getTinyImage");
        assert_eq!(top(&c, "add two numbers sum"), "get-sum");
    }

    #[test]
    fn records_of_other_tools_leave_the_words_first_tool_in_the_top_three() {
        let c = Catalog::new(vec![
            entry("git", "git_show", "Shows a commit"),
            entry("git", "git_log", "Shows the commit logs"),
            entry(
                "git",
                "git_diff_staged",
                "Shows the changes of the next commit",
            ),
            entry("github", "list_commits", "Lists the commits of a branch"),
        ]);
        let mut learned = Learned::default();
        for _ in 0..20 {
            for tool in ["git.git_log", "git.git_diff_staged", "github.list_commits"] {
                learned.record("show commit", tool, 0);
            }
        }
        let names = |learning: Option<Learning<'_>>| -> Vec<String> {
            let hits = match learning {
                Some(learning) => c.search_learned("show a commit", None, 10, learning),
                None => c.search("show a commit", None, 10),
            };
            hits.iter()
                .map(|h| c.entries()[h.index].name.clone())
                .collect()
        };
        assert_eq!(names(None)[0], "git_show");
        let learning = Learning {
            learned: &learned,
            now: 0,
        };
        // The records lift all three above it; it keeps the third place.
        let with = names(Some(learning));
        assert_eq!(with.len(), 4, "{with:?}");
        assert_eq!(with[2], "git_show", "{with:?}");
        // Explained, the lifted tools say which record lifted them, and the
        // kept one why it stayed.
        let why = c.explain("show a commit", None, 10, Some(learning));
        assert!(why[2].kept_by_words && why.iter().filter(|w| w.kept_by_words).count() == 1);
        assert!(
            why.iter()
                .filter(|w| w.learned.is_some())
                .all(|w| w.learned.as_ref().is_some_and(|(_, q)| q == "show commit")),
            "{why:?}"
        );
    }

    #[test]
    fn a_query_of_a_tools_name_words_names_it() {
        let c = Catalog::new(vec![
            entry(
                "git",
                "git_branch",
                "List git log branches and the log of each",
            ),
            entry("git", "git_log", "Shows the commit logs"),
            entry("k8s", "kubectl_get", "Get or list kubectl resources"),
            entry("k8s", "kubectl_get_logs", "Get kubectl logs of a pod"),
            entry("fs", "read_text_file", "Read a file as text"),
            entry("other", "log", "Write a log line"),
        ]);
        // Any order, case or separator; stop words and plurals aside.
        for q in ["git log", "log git", "Git-Log", "GIT LOGS", "the git log"] {
            assert_eq!(top(&c, q), "git_log", "{q}");
        }
        // The name holding most of the query wins: `kubectl get logs` is
        // not `kubectl_get`, and `log` alone is the `log` tool's name.
        assert_eq!(top(&c, "kubectl get"), "kubectl_get");
        assert_eq!(top(&c, "get logs kubectl"), "kubectl_get_logs");
        assert_eq!(top(&c, "log"), "log");
        // With its server's words too; a word of neither names nothing.
        assert_eq!(c.named_by_words("fs read text file"), vec![4]);
        assert!(c.named_by_words("read text file quickly").is_empty());
        // Within the category asked for only.
        assert!(
            c.search("git log", Some("k8s"), 3)
                .iter()
                .all(|h| c.entries()[h.index].category == "k8s")
        );
    }

    /// A tool's name written as a name among other words names it, ahead
    /// of what meaning or words alone rank first, the longest name winning;
    /// its words written apart, one word, a file's name, a word that only
    /// reads as a name, or a name within a longer one the query asks for,
    /// name nothing.
    #[test]
    fn a_name_written_among_other_words_names_its_tool() {
        let c = Catalog::new(vec![
            entry(
                "git",
                "git_branch",
                "List git log branches and the log of each run",
            ),
            entry("git", "git_log", "Shows the commit logs"),
            entry("k8s", "kubectl_get", "Get or list kubectl resources"),
            entry("k8s", "kubectl_get_logs", "Get kubectl logs of a pod"),
            entry("fs", "read_text_file", "Read a file as text"),
            entry("docs", "note_book", "Keeps a notebook"),
            entry("other", "log", "Write a log line"),
            entry("git", "git_show", "Shows the contents of a commit"),
            entry("fs", "read_text_file_old", "DEPRECATED: use read_text_file"),
            entry("k8s", "port_forward", "Forward a local port to a pod"),
            entry("k8s", "stop_port_forward", "Stop forwarding a port"),
            entry("excel", "export_csv", "Export a sheet as CSV"),
            entry("excel", "set_table", "Make a range a table"),
        ]);
        let all = |_: usize| true;
        for q in [
            "run git_log for me",
            "`git-log` on ~/proj please",
            "please run gitlog",
            "what does GitLog say about branches?",
            "git.git_log with max_count 5",
        ] {
            assert!(c.named_by_words(q).is_empty(), "{q}");
            assert_eq!(c.named_in_query(q, all), vec![1], "{q}");
            assert_eq!(top(&c, q), "git_log", "{q}");
        }
        assert_eq!(top(&c, "call kubectl_get for pods"), "kubectl_get");
        // The longest name; and a name within a longer one the query asks
        // for names nothing.
        assert_eq!(
            c.named_in_query("kubectl_get or kubectl_get_logs for pod web-1", all),
            vec![3]
        );
        assert!(
            c.named_in_query("stop the port-forward to my pod", all)
                .is_empty()
        );
        assert_eq!(
            c.named_in_query("start a port-forward to my pod", all),
            vec![9]
        );
        // Written apart, the words are a description's: named by nothing.
        assert!(c.named_in_query("run git log for me", all).is_empty());
        assert!(c.named_in_query("read text file quickly", all).is_empty());
        // One word is a word, even a tool's whole name; a path or a file's
        // name is no tool's name.
        assert!(c.named_in_query("show the log please", all).is_empty());
        assert!(c.named_in_query("what is in ~/git/log", all).is_empty());
        assert!(c.named_in_query("what is in git.log", all).is_empty());
        assert!(
            c.named_in_query("load export.csv into a sheet", all)
                .is_empty()
        );
        // A word the catalog has is not taken apart; one that reads as two
        // name words, among others, names only with its server's word first.
        assert!(c.named_in_query("open my notebook today", all).is_empty());
        assert_eq!(c.named_in_query("open my note_book today", all), vec![5]);
        assert!(c.named_in_query("is the field settable", all).is_empty());
        // What `keep` turns away (here the deprecated tool) does not hide a
        // shorter name it keeps.
        assert_eq!(
            c.named_in_query("read_text_file_old or git_log", |i| i != 8),
            vec![1]
        );
        // Tools named alike keep the order they had: `git_show` is the
        // closer to "contents of a commit", whatever the names' order.
        let hits = c.search("git_log git_show contents of a commit", None, 2);
        let names: Vec<&str> = hits
            .iter()
            .map(|h| c.entries()[h.index].name.as_str())
            .collect();
        assert_eq!(names, ["git_show", "git_log"]);
    }

    #[test]
    fn misspelt_names_still_match() {
        assert_eq!(top(&catalog(), "comit"), "git_commit");
    }

    /// A short word keeps its final "e" when stemmed: "nav" begins
    /// "navigate" and is no misspelling of "name" (one edit from "nam",
    /// which dropping every final "e" made of it).
    #[test]
    fn a_short_query_word_is_no_misspelling_of_a_name() {
        let c = Catalog::new(vec![
            entry("playwright", "browser_navigate", "Navigate to a URL"),
            entry("everything", "get_name", "Returns the server's name"),
        ]);
        assert_eq!(top(&c, "nav"), "browser_navigate");
        assert_eq!(top(&c, "nmae"), "get_name");
    }

    /// The forms of a word meet whether or not it ends in a silent "e":
    /// "stage files" finds the tool whose description says "staging".
    #[test]
    fn a_word_finds_its_other_forms() {
        let c = Catalog::new(vec![
            entry("git", "git_add", "Adds file contents to the staging area"),
            entry("git", "git_status", "Shows which files changed"),
            entry("github", "create_issue", "Create a new issue"),
            entry("github", "list_issues", "List issues in a repository"),
        ]);
        assert_eq!(top(&c, "stage a file"), "git_add");
        assert_eq!(top(&c, "issue created"), "create_issue");
    }

    #[test]
    fn a_word_that_begins_another_matches_it() {
        let c = Catalog::new(vec![
            entry(
                "sqlite",
                "read_query",
                "Execute a SELECT query on the SQLite database",
            ),
            entry(
                "everything",
                "trigger-long-running-operation",
                "Demonstrates a long running operation with progress updates",
            ),
            entry(
                "playwright",
                "browser_run_code_unsafe",
                "Run a Playwright code snippet",
            ),
        ]);
        // "sql" is no word of the catalog; it begins "sqlite".
        assert_eq!(top(&c, "sql"), "read_query");
        assert_eq!(top(&c, "run a SQL query"), "read_query");
        // Short words do not spread: "ru" would begin too much.
        assert!(c.search("xq", None, 5).is_empty());
    }

    #[test]
    fn deprecated_tools_rank_below_their_replacement() {
        let c = Catalog::new(vec![
            entry(
                "filesystem",
                "read_file",
                "Read the complete contents of a file as text. DEPRECATED: Use read_text_file instead.",
            ),
            entry(
                "filesystem",
                "read_text_file",
                "Read the complete contents of a file from the file system as text. Handles various \
                 text encodings and provides detailed error messages if the file cannot be read.",
            ),
        ]);
        assert_eq!(top(&c, "read a file"), "read_text_file");
        assert_eq!(top(&c, "deprecated read file"), "read_file");
    }

    /// With a floor, words that explain little of a query are scaled by
    /// what the whole query could score, not by the best of these weak
    /// matches: they weigh less beside meaning. Words that explain the
    /// query keep their full weight, floor or not.
    #[test]
    fn words_that_explain_little_of_a_query_weigh_less() {
        let c = catalog();
        let scale = |q: &str, floor: f32| {
            let terms = terms(q);
            let lexical = c.lexical_scores(&terms);
            let best = lexical.values().fold(0f32, |m, s| m.max(*s));
            (best, c.words_scale(&lexical, &terms, floor))
        };
        // "commit" is the only word of the query a tool has (two have it);
        // the others, which no tool has, count at the largest IDF in the
        // bound.
        let (best, weak) = scale("how large was that commit from yesterday's audit", 0.3);
        assert!(best > 0.0);
        assert!(weak > 2.0 * best, "best {best}, scale {weak}");
        let (_, without) = scale("how large was that commit from yesterday's audit", 0.0);
        assert_eq!(without, best);
        // A query in a tool's own words: the best hit scores more than the
        // floor's share of the bound, so it still counts in full.
        let (best, full) = scale("shows the commit logs", 0.3);
        assert_eq!(full, best);
        // Nothing in common: never a division by zero.
        let (_, none) = scale("zebra", 0.3);
        assert!(none > 0.0);
    }

    /// server-filesystem's own descriptions: the stemmer makes "file" and
    /// "files" one term, the name as written tells them apart.
    #[test]
    fn a_name_word_as_written_breaks_the_tie() {
        let c = Catalog::new(vec![
            entry(
                "filesystem",
                "read_text_file",
                "Read the complete contents of a file from the file system as text. Handles \
                 various text encodings and provides detailed error messages if the file cannot \
                 be read. Use this tool when you need to examine the contents of a single file. \
                 Use the 'head' parameter to read only the first N lines of a file, or the 'tail' \
                 parameter to read only the last N lines of a file. Operates on the file as text \
                 regardless of extension. Only works within allowed directories.",
            ),
            entry(
                "filesystem",
                "read_multiple_files",
                "Read the contents of multiple files simultaneously. This is more efficient than \
                 reading files one by one when you need to analyze or compare multiple files. \
                 Each file's content is returned with its path as a reference. Failed reads for \
                 individual files won't stop the entire operation. Only works within allowed \
                 directories.",
            ),
            entry(
                "filesystem",
                "read_media_file",
                "Read a file and return it as a base64-encoded content block with its MIME type. \
                 Image and audio files are returned as image/audio content; any other file type \
                 is returned as an embedded resource. Only works within allowed directories.",
            ),
        ]);
        assert_eq!(top(&c, "read a file"), "read_text_file");
        assert_eq!(top(&c, "read files"), "read_multiple_files");
        assert_eq!(top(&c, "read an image file"), "read_media_file");
    }

    #[test]
    fn category_filter_and_lookup() {
        let c = catalog();
        assert!(c.search("file", Some("git"), 5).is_empty());
        assert_eq!(c.find("git.git_log", None).len(), 1);
        assert_eq!(c.find("git__git_log", None).len(), 1);
        let odd = Catalog::new(vec![
            entry("awk", "list__items", "Lists items"),
            entry("awk", "get-sum", "Adds"),
            entry("awk", "get_sum", "Adds too"),
        ]);
        let names = |found: Vec<&Entry>| found.iter().map(|e| e.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(odd.find("awk.list__items", None)), ["list__items"]);
        assert_eq!(names(odd.find("awk.get-sum", None)), ["get-sum"]);
        assert_eq!(names(odd.find("awk.get_sum", None)), ["get_sum"]);
        assert_eq!(odd.find("awk.GET_SUM", None).len(), 2);
        assert_eq!(c.find("get_sum", Some("everything")).len(), 1);
        assert!(c.find("git_log", Some("fs")).is_empty());
    }
}

#[cfg(all(test, feature = "semantic"))]
mod learning_tests {
    use super::tests::entry;
    use super::*;

    fn hybrid() -> Catalog {
        hybrid_of(false)
    }

    /// The catalog, its entries in reverse order when `reversed`.
    fn hybrid_of(reversed: bool) -> Catalog {
        let entries = [
            entry("git", "git_log", "Shows the commit logs"),
            entry(
                "git",
                "git_diff",
                "Shows differences between branches or commits",
            ),
            entry(
                "fs",
                "read_text_file",
                "Read the complete contents of a file as text",
            ),
            entry(
                "fs",
                "list_directory",
                "Get a detailed listing of all files and directories in a specified path",
            ),
            entry(
                "time",
                "get_current_time",
                "Get current time in a specific timezone",
            ),
        ]
        .into_iter();
        let entries: Vec<Entry> = if reversed {
            entries.rev().collect()
        } else {
            entries.collect()
        };
        let Some(Ok(model)) = cem_embed::builtin() else {
            panic!("the built-in model does not load");
        };
        Catalog::hybrid(entries.clone(), Semantic::new(model, &entries, None))
    }

    /// A use moves its tool toward how it was asked for: a search in other
    /// words finds it first, and `explain` says by how much and from which
    /// record; a search for something else does not.
    #[test]
    fn a_use_moves_its_tool_toward_how_it_was_asked_for() {
        let c = hybrid();
        let mut learned = Learned::default();
        learned.record("who changed what lately", "git.git_log", 0);
        learned.record(
            "print the contents of settings.toml",
            "fs.read_text_file",
            0,
        );
        let learning = Learning {
            learned: &learned,
            now: 0,
        };
        let query = "recent edits and their authors";
        let first = |learning: Option<Learning<'_>>| {
            let why = c.explain(query, None, 5, learning);
            why.first()
                .map(|w| c.entries()[w.hit.index].qualified_name())
        };
        assert_ne!(first(None).as_deref(), Some("git.git_log"));
        assert_eq!(first(Some(learning)).as_deref(), Some("git.git_log"));
        let why = c.explain(query, None, 5, Some(learning));
        let Some((change, words)) = &why[0].learned else {
            panic!("{why:?}");
        };
        assert!(
            *change > 0.0 && words == "who changed what lately",
            "{why:?}"
        );

        // Asked for the time, the used tools stay below the time tool.
        let time = c.search_learned("what hour is it in Paris", None, 5, learning);
        assert_eq!(c.entries()[time[0].index].name, "get_current_time");
    }

    /// What a search keeps of the records for one catalog's vectors is not
    /// used for another's: the same records searched through two catalogs
    /// (the same tools in another order, as after a server reconnects)
    /// rank as a fresh copy of them does.
    #[test]
    fn records_searched_through_two_catalogs_rank_alike() {
        let (a, b) = (hybrid_of(false), hybrid_of(true));
        let mut learned = Learned::default();
        learned.record("who changed what lately", "git.git_log", 0);
        learned.record(
            "print the contents of settings.toml",
            "fs.read_text_file",
            0,
        );
        learned.record("which folders are here", "fs.list_directory", 0);
        let names = |c: &Catalog, learned: &Learned, query: &str| -> Vec<(String, String)> {
            let learning = Learning { learned, now: 0 };
            c.search_learned(query, None, 5, learning)
                .iter()
                .map(|h| {
                    (
                        c.entries()[h.index].qualified_name(),
                        format!("{:.5}", h.score),
                    )
                })
                .collect()
        };
        for query in [
            "recent edits and their authors",
            "show a file",
            "what hour is it",
        ] {
            let through_a = names(&a, &learned, query);
            let through_b = names(&b, &learned, query);
            assert_eq!(through_a, names(&a, &learned.clone(), query), "{query}");
            assert_eq!(through_b, names(&b, &learned.clone(), query), "{query}");
            assert_eq!(names(&a, &learned, query), through_a, "{query}");
        }
    }
}
