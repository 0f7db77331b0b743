//! What a search compares a query with, per record: its terms, its vector
//! and its hubness, made again after each change to the records from what
//! was made before. A change is one use recorded (and, at the cap, the
//! weakest record dropped); embedding every record again and comparing
//! every pair would cost tens of milliseconds at 2,000 records on the
//! first search after each use, so only the records that are new, or that
//! lost one of their closest records, are compared with all the others.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use cem_embed::Model;

use crate::learned::{Use, decayed};

/// A record's hubness is the mean cosine of its this many closest records
/// of other tools.
pub(crate) const HUB_NEIGHBOURS: usize = 5;

/// Per record, in the records' order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Prepared {
    pub terms: Terms,
    /// `records × dims` unit vectors (empty without a model).
    pub vectors: Vec<f32>,
    /// The same as bytes, for a transformer: what a search reads (0.8 MB
    /// of a tenant's 2,000 records, not 3 MB, beside its weights: see
    /// `Semantic::new`); the floats above are kept to make the next
    /// preparation from. None for the static model, which reads the floats.
    bytes: Option<cem_embed::Quantized>,
    /// Each record's hubness less the mean hubness of all records (empty
    /// without a model). A record in the words every query uses ("show me
    /// the ...") is close to many queries that are not its need: its
    /// closeness to a query counts less by its hubness (the record side of
    /// cross-domain similarity local scaling, CSLS, Conneau et al. 2018,
    /// which corrects nearest-neighbour search for such hubs). A record
    /// with no other tool's to compare with counts as typical.
    pub hubs: Vec<f32>,
    /// The tools with records, each once, with where their records point
    /// (see [`used_tools`]).
    pub tools: Vec<UsedTool>,
    /// Each record's tool's place in `tools`.
    pub tool_of: Vec<usize>,
    /// Each record's weight as of the latest record (what the shifts
    /// weigh it by).
    pub weights: Vec<f32>,
    /// Their sum.
    total: f32,
    /// Per used tool, for the catalog last searched: the tool's entry and
    /// its vector's dot with the shift (see [`Prepared::placed`]).
    placed: Placed,
    /// Each record's tool and words: what finds it again after a change.
    keys: Vec<(String, Vec<String>)>,
    /// Each record's closest records of other tools, (cosine, record), the
    /// closest first, at most [`HUB_NEIGHBOURS`].
    neighbours: Vec<Vec<(f32, usize)>>,
    dims: usize,
    /// The model's centre (`crate::tuning::Tuning::centre`) the shifts
    /// were made with.
    centre: f32,
    /// The model the vectors are of (its name): another model's vectors,
    /// even as wide, are never taken over.
    model: String,
    /// How many records this preparation ran the model on (the others'
    /// vectors were taken from before).
    pub embedded: usize,
    /// Whether a record of before is not here (gone, or its words
    /// changed): vectors kept on disk would still name its words.
    pub dropped: bool,
    /// Whether its vectors are worth keeping on disk: a transformer's (it
    /// took 2.4 s over 2,000 records, one run each); the built-in model
    /// makes them in milliseconds.
    keep: bool,
}

impl Prepared {
    /// Prepares `uses`, taking from `before` (what was prepared for an
    /// earlier state of the same records, with the same model) the vectors
    /// and neighbours that still hold.
    pub(crate) fn build(uses: &[Use], model: Option<&Model>, before: Option<Prepared>) -> Prepared {
        let terms = Terms::new(uses);
        let keys: Vec<(String, Vec<String>)> = uses
            .iter()
            .map(|u| (u.tool.clone(), u.words.clone()))
            .collect();
        let Some(model) = model else {
            let (tools, tool_of, weights) = used_tools(uses, &[], 0, 0.0);
            return Prepared {
                terms,
                keys,
                total: weights.iter().sum(),
                tools,
                tool_of,
                weights,
                // Vectors from before (a file a transformer kept) are of
                // no use now, and name words.
                dropped: before.is_some_and(|b| !b.vectors.is_empty()),
                ..Prepared::default()
            };
        };
        let dims = model.dims();
        let before = before
            .filter(|b| {
                b.dims == dims && b.model == model.name() && b.vectors.len() == b.keys.len() * dims
            })
            .unwrap_or_default();
        let old_at: HashMap<(&str, &[String]), usize> = before
            .keys
            .iter()
            .enumerate()
            .map(|(at, (tool, words))| ((tool.as_str(), words.as_slice()), at))
            .collect();
        // Where each record was before (each old record claimed once).
        let mut new_of_old: Vec<Option<usize>> = vec![None; before.keys.len()];
        let mut was: Vec<Option<usize>> = Vec::with_capacity(uses.len());
        for (at, (tool, words)) in keys.iter().enumerate() {
            let old = old_at
                .get(&(tool.as_str(), words.as_slice()))
                .copied()
                .filter(|o| new_of_old[*o].is_none());
            if let Some(o) = old {
                new_of_old[o] = Some(at);
            }
            was.push(old);
        }
        let mut vectors = Vec::with_capacity(uses.len() * dims);
        for (used, old) in uses.iter().zip(&was) {
            match old {
                Some(o) => vectors.extend_from_slice(&before.vectors[o * dims..(o + 1) * dims]),
                None => vectors.extend(crate::learned::learning_vector(model, &used.words).kept),
            }
        }
        let fresh: Vec<bool> = was.iter().map(Option::is_none).collect();
        let embedded = fresh.iter().filter(|f| **f).count();
        let dropped = new_of_old.iter().any(Option::is_none);
        // A kept record keeps its neighbours unless one of them went: then
        // the one beyond them is unknown, and it is compared again.
        let mut again = fresh.clone();
        let mut neighbours: Vec<Vec<(f32, usize)>> = Vec::with_capacity(uses.len());
        for (at, old) in was.iter().enumerate() {
            let kept: Option<Vec<(f32, usize)>> = old.and_then(|o| {
                before.neighbours.get(o).and_then(|list| {
                    list.iter()
                        .map(|(cosine, n)| new_of_old[*n].map(|n| (*cosine, n)))
                        .collect()
                })
            });
            if kept.is_none() {
                again[at] = true;
            }
            neighbours.push(kept.unwrap_or_default());
        }
        let vector = |i: usize| &vectors[i * dims..(i + 1) * dims];
        for i in (0..uses.len()).filter(|i| again[*i]) {
            // The records after i in one scan (most pairs, when every
            // record is compared: after a start), the others one by one.
            let later = cem_embed::dots(&vectors[(i + 1) * dims..], dims, vector(i));
            for j in 0..uses.len() {
                if j == i || uses[j].tool == uses[i].tool || (again[j] && j < i) {
                    // The same tool, or a pair already compared from j's side.
                    continue;
                }
                let cosine = match j.checked_sub(i + 1).and_then(|k| later.get(k)) {
                    Some(&cosine) => cosine,
                    None => cem_embed::dot(vector(i), vector(j)),
                };
                closer(&mut neighbours[i], cosine, j);
                // j learns of i if j is compared again too (and skips this
                // pair then), or if i is new to it.
                if again[j] || fresh[i] {
                    closer(&mut neighbours[j], cosine, i);
                }
            }
        }
        let hubs = centred_hubs(&neighbours);
        let centre = crate::tuning::of(Some(model)).centre;
        let (tools, tool_of, weights) = used_tools(uses, &vectors, dims, centre);
        let total = weights.iter().sum();
        let bytes = model
            .is_transformer()
            .then(|| cem_embed::Quantized::new(&vectors, dims));
        Prepared {
            terms,
            vectors,
            bytes,
            hubs,
            tools,
            tool_of,
            weights,
            total,
            placed: Placed::default(),
            keys,
            neighbours,
            dims,
            centre,
            model: model.name().to_string(),
            embedded,
            dropped,
            keep: model.is_transformer(),
        }
    }

    /// What the records' vectors were made from (another preparation takes
    /// over only those of the same model, tool and words): a preparation
    /// with nothing else, as a file kept them (`crate::kept`).
    pub(crate) fn of_vectors(
        model: String,
        dims: usize,
        keys: Vec<(String, Vec<String>)>,
        vectors: Vec<f32>,
    ) -> Prepared {
        Prepared {
            keys,
            vectors,
            dims,
            model,
            keep: true,
            ..Prepared::default()
        }
    }

    /// How many records' vectors it has.
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// The records' vectors worth keeping on disk (see `keep`), with their
    /// model, width and keys.
    pub(crate) fn kept_vectors(&self) -> Option<KeptVectors<'_>> {
        (self.keep && self.dims > 0 && self.vectors.len() == self.keys.len() * self.dims).then_some(
            KeptVectors {
                model: &self.model,
                dims: self.dims,
                keys: &self.keys,
                vectors: &self.vectors,
            },
        )
    }
}

/// What [`Prepared::kept_vectors`] gives: `keys.len() × dims` values of
/// the model named `model`.
#[derive(Debug, PartialEq)]
pub(crate) struct KeptVectors<'a> {
    pub model: &'a str,
    pub dims: usize,
    pub keys: &'a [(String, Vec<String>)],
    pub vectors: &'a [f32],
}

/// Each record's terms as numbers: a search compares them with its own
/// 2,000 times, and comparing strings was a tenth of its time.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Terms {
    /// Per record, its terms' numbers (its stemmed words as a set).
    records: Vec<Vec<u32>>,
    number: HashMap<String, u32>,
}

impl Terms {
    fn new(uses: &[Use]) -> Terms {
        let mut terms = Terms::default();
        for used in uses {
            let numbers = used
                .terms()
                .into_iter()
                .map(|term| {
                    let next = terms.number.len() as u32;
                    *terms.number.entry(term).or_insert(next)
                })
                .collect();
            terms.records.push(numbers);
        }
        terms
    }

    /// Record `at`'s terms.
    pub fn of(&self, at: usize) -> Option<&[u32]> {
        self.records.get(at).map(Vec::as_slice)
    }

    /// The numbers of those of `terms` some record has.
    pub fn numbers(&self, terms: &[String]) -> Vec<u32> {
        terms
            .iter()
            .filter_map(|t| self.number.get(t).copied())
            .collect()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.records.len()
    }
}

/// A tool with records: its name, how much they weigh, and which way
/// they move its vector.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct UsedTool {
    pub tool: String,
    /// Its records' mean vector less the model's centre
    /// (`crate::tuning::Tuning::centre`) times the other tools' records'
    /// mean (empty without a model).
    pub shift: Vec<f32>,
    /// The shift's squared length.
    pub length2: f32,
    /// Its records' weight as of `latest`.
    pub weight: f32,
    /// The latest record's time, over all records.
    latest: u64,
}

impl UsedTool {
    /// The tool's records' weight at `now`: decay halves every weight
    /// alike, so this is their weight at the latest record, decayed since.
    pub fn weight_at(&self, now: u64) -> f32 {
        decayed(self.weight, self.latest, now)
    }
}

/// The tools of `uses`, each once, with their shifts (`dims` wide, from the
/// records' `vectors`; none when `dims` is 0); each record's tool's place
/// among them; each record's weight. Records are weighed by their weight
/// as of the latest record: decay halves all weights alike, so the means
/// hold until the records change.
fn used_tools(
    uses: &[Use],
    vectors: &[f32],
    dims: usize,
    centre: f32,
) -> (Vec<UsedTool>, Vec<usize>, Vec<f32>) {
    let latest = uses.iter().map(|u| u.last).max().unwrap_or(0);
    let mut place: HashMap<&str, usize> = HashMap::new();
    // Per tool, in the order of their first records: name, weighted sum of
    // its records' vectors, their weight.
    let mut sums: Vec<(&str, Vec<f32>, f32)> = Vec::new();
    let mut tool_of = Vec::with_capacity(uses.len());
    let mut weights = Vec::with_capacity(uses.len());
    let mut all = vec![0f32; dims];
    let mut total = 0f32;
    for (i, used) in uses.iter().enumerate() {
        let at = *place.entry(used.tool.as_str()).or_insert_with(|| {
            sums.push((used.tool.as_str(), vec![0f32; dims], 0.0));
            sums.len() - 1
        });
        tool_of.push(at);
        let weight = Some(used.weight_at(latest)).filter(|w| w.is_finite() && *w > 0.0);
        weights.push(weight.unwrap_or(0.0));
        let Some(weight) = weight else {
            continue;
        };
        let (_, sum, of_tool) = &mut sums[at];
        let vector = vectors.get(i * dims..(i + 1) * dims).unwrap_or_default();
        for ((s, a), x) in sum.iter_mut().zip(all.iter_mut()).zip(vector) {
            *s += weight * x;
            *a += weight * x;
        }
        *of_tool += weight;
        total += weight;
    }
    let tools = sums
        .into_iter()
        .map(|(tool, sum, weight)| {
            let rest = total - weight;
            let shift: Vec<f32> = sum
                .iter()
                .zip(&all)
                .map(|(s, a)| {
                    // A tool whose records weigh nothing does not move.
                    if weight <= 0.0 {
                        return 0.0;
                    }
                    let others = if rest > f32::EPSILON * total {
                        (a - s) / rest
                    } else {
                        0.0
                    };
                    s / weight - centre * others
                })
                .collect();
            UsedTool {
                tool: tool.to_string(),
                length2: cem_embed::dot(&shift, &shift),
                shift,
                weight,
                latest,
            }
        })
        .collect();
    (tools, tool_of, weights)
}

impl Prepared {
    /// The dot of `query` with every record's vector, in the records'
    /// order; none without a model.
    pub(crate) fn dots(&self, query: &[f32]) -> Vec<f32> {
        match &self.bytes {
            Some(bytes) => bytes.dots(query),
            None if self.dims > 0 => cem_embed::dots(&self.vectors, self.dims, query),
            None => Vec::new(),
        }
    }

    /// A query's dot with used tool `t`'s shift, from its dots with the
    /// records: `toward[t]` is the sum over `t`'s records of their weight
    /// times the query's dot with them, `toward_all` the same over all
    /// records. The shift is made of weighted means of record vectors, so
    /// this is exact, and a search that compares the query with every
    /// record anyway gets it for nothing.
    pub(crate) fn query_dot(&self, t: usize, toward: &[f32], toward_all: f32) -> f32 {
        let (Some(used), Some(&own)) = (self.tools.get(t), toward.get(t)) else {
            return 0.0;
        };
        if used.weight <= 0.0 {
            return 0.0;
        }
        let rest = self.total - used.weight;
        let others = if rest > f32::EPSILON * self.total {
            (toward_all - own) / rest
        } else {
            0.0
        };
        own / used.weight - self.centre * others
    }

    /// Per used tool, its entry in the catalog `catalog` identifies and
    /// that entry's vector's dot with the tool's shift, as `place` gives
    /// them: made once per catalog and state of the records (looking 2,000
    /// tools up by name and 2,000 dots over 10,000 tools' vectors took
    /// about a millisecond a search), then kept until either changes.
    pub(crate) fn placed(
        &self,
        catalog: u64,
        place: impl Fn(&UsedTool) -> Option<(usize, f32)>,
    ) -> Arc<Places> {
        if let Some((made_for, placed)) =
            &*self.placed.0.lock().unwrap_or_else(PoisonError::into_inner)
            && *made_for == catalog
        {
            return Arc::clone(placed);
        }
        let placed = Arc::new(self.tools.iter().map(place).collect::<Vec<_>>());
        *self.placed.0.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((catalog, Arc::clone(&placed)));
        placed
    }
}

/// What [`Prepared::placed`] made last, and for which catalog vectors. A
/// copy starts empty.
#[derive(Debug, Default)]
struct Placed(Mutex<Option<(u64, Arc<Places>)>>);

/// Per used tool: its entry and that entry's vector's dot with its shift
/// (`None` for a tool the catalog does not have).
pub(crate) type Places = Vec<Option<(usize, f32)>>;

impl Clone for Placed {
    fn clone(&self) -> Self {
        Placed::default()
    }
}

/// Puts `(cosine, record)` in `list` if it is among the closest.
fn closer(list: &mut Vec<(f32, usize)>, cosine: f32, record: usize) {
    let at = list.partition_point(|(c, _)| *c >= cosine);
    if at < HUB_NEIGHBOURS {
        list.insert(at, (cosine, record));
        list.truncate(HUB_NEIGHBOURS);
    }
}

/// Each record's mean cosine with its neighbours, less the mean of that.
fn centred_hubs(neighbours: &[Vec<(f32, usize)>]) -> Vec<f32> {
    let raw: Vec<Option<f32>> = neighbours
        .iter()
        .map(|list| {
            (!list.is_empty()).then(|| list.iter().map(|(c, _)| c).sum::<f32>() / list.len() as f32)
        })
        .collect();
    let known: Vec<f32> = raw.iter().flatten().copied().collect();
    let mean = known.iter().sum::<f32>() / known.len().max(1) as f32;
    raw.iter().map(|r| r.map_or(0.0, |r| r - mean)).collect()
}

#[cfg(all(test, feature = "semantic"))]
mod tests {
    use super::*;

    fn model() -> &'static Model {
        match cem_embed::builtin() {
            Some(Ok(model)) => model,
            _ => panic!("the built-in model does not load"),
        }
    }

    fn used(words: &str, tool: &str) -> Use {
        Use {
            words: words.split(' ').map(String::from).collect(),
            tool: tool.into(),
            weight: 1.0,
            last: 0,
        }
    }

    const QUERIES: &[&str] = &[
        "show me the commit history",
        "list the files in a folder",
        "read the config file",
        "what time is it in tokyo",
        "search the knowledge graph",
        "open the page and click the button",
        "show me the open pull requests",
        "create a new branch from main",
        "convert this time to london",
        "show me what changed in the working tree",
        "write the report to a file",
        "take a screenshot of the page",
    ];

    /// Made after a series of changes, from each state's predecessor, the
    /// records' vectors and hubness are what making them from nothing
    /// gives, exactly: new records, dropped ones (a neighbour of others),
    /// one record's words changed, everything dropped.
    #[test]
    fn made_from_before_is_made_from_nothing() {
        let tools = ["git.log", "fs.list", "fs.read", "time.now", "mem.search"];
        let mut uses: Vec<Use> = Vec::new();
        let mut before: Option<Prepared> = None;
        let mut compared = 0;
        for step in 0..40 {
            match step % 5 {
                // Two new records.
                0 | 1 => {
                    for k in 0..2 {
                        let i = (step * 3 + k) % QUERIES.len();
                        uses.push(used(QUERIES[i], tools[(step + k) % tools.len()]));
                    }
                }
                // The oldest goes, as the weakest does at the cap.
                2 if !uses.is_empty() => {
                    uses.remove(0);
                }
                // A record's words change (the same need recorded again).
                3 if !uses.is_empty() => {
                    let at = step % uses.len();
                    uses[at].words.push("again".into());
                }
                _ if step == 34 => uses.clear(),
                _ => {}
            }
            let fresh = Prepared::build(&uses, Some(model()), None);
            let made = Prepared::build(&uses, Some(model()), before.take());
            assert_eq!(made.vectors, fresh.vectors, "step {step}");
            assert_eq!(made.hubs, fresh.hubs, "step {step}");
            assert_eq!(made.tools, fresh.tools, "step {step}");
            assert_eq!(made.tool_of, fresh.tool_of, "step {step}");
            compared += usize::from(made.hubs.iter().any(|h| *h != 0.0));
            before = Some(made);
        }
        // Not trivially equal: most states had hubs to compare.
        assert!(compared > 20, "{compared}");
    }

    /// A record in generic words sits closer to other tools' records than
    /// one in specific words.
    #[test]
    fn generic_records_are_hubs() {
        let uses = vec![
            used("show me the thing", "a.generic"),
            used("show me the list", "b.list"),
            used("show me the page", "c.page"),
            used("show me the file", "d.file"),
            used("convert pacific time to utc offset", "e.time"),
        ];
        let prepared = Prepared::build(&uses, Some(model()), None);
        assert!(prepared.hubs[0] > prepared.hubs[4], "{:?}", prepared.hubs);
    }

    /// A tool's shift points toward how it was asked for and away from
    /// how the other tools were; a tenant's only tool moves toward its
    /// records alone.
    #[test]
    fn a_shift_points_to_its_records_and_away_from_the_others() {
        let uses = vec![
            used("show me the commit history", "git.log"),
            used("who changed what lately", "git.log"),
            used("read the config file", "fs.read"),
            used("print the contents of settings.toml", "fs.read"),
            used("what time is it in tokyo", "time.now"),
        ];
        let model = model();
        let prepared = Prepared::build(&uses, Some(model), None);
        let Some(used) = prepared.tools.iter().find(|s| s.tool == "git.log") else {
            panic!("no shift for git.log: {:?}", prepared.tools);
        };
        let toward = |words: &str| cem_embed::dot(&used.shift, &model.embed(words.split(' ')));
        assert!(
            toward("recent commits and their authors") > toward("open the yaml file"),
            "{} {}",
            toward("recent commits and their authors"),
            toward("open the yaml file")
        );
        assert!(toward("open the yaml file") < 0.0);
        assert!((used.length2 - cem_embed::dot(&used.shift, &used.shift)).abs() < 1e-6);

        let alone = Prepared::build(&uses[..2], Some(model), None);
        let Some(used) = alone.tools.iter().find(|s| s.tool == "git.log") else {
            panic!("no shift for git.log alone");
        };
        assert_eq!(alone.tool_of, [0, 0]);
        assert!((used.weight_at(0) - 2.0).abs() < 1e-6);
        let mean: Vec<f32> = alone.vectors[..model.dims()]
            .iter()
            .zip(&alone.vectors[model.dims()..])
            .map(|(a, b)| (a + b) / 2.0)
            .collect();
        let off: f32 = mean
            .iter()
            .zip(&used.shift)
            .map(|(a, b)| (a - b).abs())
            .sum();
        assert!(off < 1e-4, "{off}");
    }

    /// A query's dot with each shift, made from its dots with every record
    /// (as a search makes it), is its dot with the shift itself.
    #[test]
    fn the_query_dot_from_the_records_is_the_dot_with_the_shift() {
        let model = model();
        let uses: Vec<Use> = QUERIES
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let mut u = used(q, ["git.log", "fs.read", "time.now", "gone.tool"][i % 4]);
                u.weight = 1.0 + i as f32 / 4.0;
                u.last = i as u64 * 3600;
                u
            })
            .collect();
        let prepared = Prepared::build(&uses, Some(model), None);
        let q = model.embed("recent changes to the config file".split(' '));
        let dims = model.dims();
        let mut toward = vec![0f32; prepared.tools.len()];
        let mut toward_all = 0f32;
        for (at, t) in prepared.tool_of.iter().enumerate() {
            let dot = cem_embed::dot(&q, &prepared.vectors[at * dims..(at + 1) * dims]);
            toward[*t] += prepared.weights[at] * dot;
            toward_all += prepared.weights[at] * dot;
        }
        for (t, used) in prepared.tools.iter().enumerate() {
            let direct = cem_embed::dot(&q, &used.shift);
            let made = prepared.query_dot(t, &toward, toward_all);
            assert!(
                (direct - made).abs() < 1e-4,
                "{}: {direct} {made}",
                used.tool
            );
        }
    }

    /// Vectors of another model are never taken over, even as wide (a
    /// file kept by a server that ranked with another model); those of the
    /// same model and words are, and a record that is gone is said.
    #[test]
    fn only_the_same_models_vectors_are_taken_over() {
        let model = model();
        let dims = model.dims();
        let uses: Vec<Use> = QUERIES[..4]
            .iter()
            .zip(["git.log", "fs.list", "fs.read", "time.now"])
            .map(|(q, tool)| used(q, tool))
            .collect();
        let keys: Vec<(String, Vec<String>)> = uses
            .iter()
            .map(|u| (u.tool.clone(), u.words.clone()))
            .collect();
        let mut unit = vec![0.0; dims];
        unit[0] = 1.0;
        let wrong: Vec<f32> = (0..uses.len()).flat_map(|_| unit.clone()).collect();
        let fresh = Prepared::build(&uses, Some(model), None);
        let other = Prepared::of_vectors("another-model".into(), dims, keys.clone(), wrong.clone());
        let made = Prepared::build(&uses, Some(model), Some(other));
        assert_eq!(made.embedded, uses.len());
        assert_eq!(made.vectors, fresh.vectors);
        // The same model's are taken, even wrong ones (the key is the
        // model, the tool and the words), and nothing is embedded.
        let same = Prepared::of_vectors(model.name().into(), dims, keys, wrong.clone());
        let made = Prepared::build(&uses, Some(model), Some(same));
        assert_eq!((made.embedded, made.dropped), (0, false));
        assert_eq!(made.vectors, wrong);
        // One record fewer: the one before that is gone is said.
        let made = Prepared::build(&uses[1..], Some(model), Some(made));
        assert_eq!((made.embedded, made.dropped), (0, true));
    }

    #[test]
    fn without_a_model_only_terms() {
        let prepared = Prepared::build(&[used("show me", "a.b")], None, None);
        assert_eq!(prepared.terms.len(), 1);
        assert!(prepared.vectors.is_empty() && prepared.hubs.is_empty());
        // The tool is known without a model; it has no shift.
        assert_eq!(prepared.tool_of, [0]);
        assert!(prepared.tools[0].shift.is_empty());
    }
}
