//! What a search compares a query with, per record: its terms, its vector
//! and its hubness, made again after each change to the records from what
//! was made before. A change is one use recorded (and, at the cap, the
//! weakest record dropped); embedding every record again and comparing
//! every pair would cost tens of milliseconds at 2,000 records on the
//! first search after each use, so only the records that are new, or that
//! lost one of their closest records, are compared with all the others.

use std::collections::HashMap;

use cem_embed::StaticModel;

use crate::learned::Use;

/// A record's hubness is the mean cosine of its this many closest records
/// of other tools.
pub(crate) const HUB_NEIGHBOURS: usize = 5;

/// Per record, in the records' order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Prepared {
    pub terms: Vec<Vec<String>>,
    /// `records × dims` unit vectors (empty without a model).
    pub vectors: Vec<f32>,
    /// Each record's hubness less the mean hubness of all records (empty
    /// without a model). A record in the words every query uses ("show me
    /// the ...") is close to many queries that are not its need: its
    /// closeness to a query counts less by its hubness (the record side of
    /// cross-domain similarity local scaling, CSLS, Conneau et al. 2018,
    /// which corrects nearest-neighbour search for such hubs). A record
    /// with no other tool's to compare with counts as typical.
    pub hubs: Vec<f32>,
    /// Each record's tool and words: what finds it again after a change.
    keys: Vec<(String, Vec<String>)>,
    /// Each record's closest records of other tools, (cosine, record), the
    /// closest first, at most [`HUB_NEIGHBOURS`].
    neighbours: Vec<Vec<(f32, usize)>>,
    dims: usize,
}

impl Prepared {
    /// Prepares `uses`, taking from `before` (what was prepared for an
    /// earlier state of the same records, with the same model) the vectors
    /// and neighbours that still hold.
    pub(crate) fn build(
        uses: &[Use],
        model: Option<&StaticModel>,
        before: Option<Prepared>,
    ) -> Prepared {
        let terms = uses.iter().map(Use::terms).collect();
        let keys: Vec<(String, Vec<String>)> = uses
            .iter()
            .map(|u| (u.tool.clone(), u.words.clone()))
            .collect();
        let Some(model) = model else {
            return Prepared {
                terms,
                keys,
                ..Prepared::default()
            };
        };
        let dims = model.dims();
        let before = before
            .filter(|b| b.dims == dims && b.vectors.len() == b.keys.len() * dims)
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
                None => vectors.extend(model.embed(used.words.iter().map(String::as_str))),
            }
        }
        let fresh: Vec<bool> = was.iter().map(Option::is_none).collect();
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
            for j in 0..uses.len() {
                if j == i || uses[j].tool == uses[i].tool || (again[j] && j < i) {
                    // The same tool, or a pair already compared from j's side.
                    continue;
                }
                let cosine = cem_embed::dot(vector(i), vector(j));
                closer(&mut neighbours[i], cosine, j);
                // j learns of i if j is compared again too (and skips this
                // pair then), or if i is new to it.
                if again[j] || fresh[i] {
                    closer(&mut neighbours[j], cosine, i);
                }
            }
        }
        let hubs = centred_hubs(&neighbours);
        Prepared {
            terms,
            vectors,
            hubs,
            keys,
            neighbours,
            dims,
        }
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

    fn model() -> &'static StaticModel {
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

    #[test]
    fn without_a_model_only_terms() {
        let prepared = Prepared::build(&[used("show me", "a.b")], None, None);
        assert_eq!(prepared.terms.len(), 1);
        assert!(prepared.vectors.is_empty() && prepared.hubs.is_empty());
    }
}
