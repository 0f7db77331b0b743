//! Search quality on needs phrased as agents phrase them.
//!
//! `search_eval/servers/` holds the tool lists of the token benchmark's
//! eleven real MCP servers, as `bench/capture_tool_lists.py` captured them;
//! `search_eval/needs.jsonl` holds needs written without their tools' name
//! words, each with the tools that answer it. Every need is searched over
//! all eleven servers' tools at once, as one agent configuration would.
//!
//! `cargo test -p cem-catalog --test search_eval -- --nocapture` prints
//! top-1, top-3 and MRR, lexical only beside hybrid, for the whole set and
//! for its two halves (even and odd lines: the ranking's few constants were
//! chosen looking at the even half only).

#[path = "search_eval/load.rs"]
mod load;

use std::collections::BTreeSet;

use cem_catalog::learned::{learning_vector, words_of};
use cem_catalog::{Catalog, Entry, Learned, Learning, Semantic, builtin_model, split_words, stem};
use load::{Need, entries, held_out_entries, read_needs};

fn needs() -> Vec<Need> {
    read_needs("needs.jsonl")
}

/// The model under evaluation: the built-in static one, or with
/// `CEM_ONNX_MODEL` set (a directory `crates/embed/model/build_onnx.sh`
/// made) the sentence transformer in it, run by the ONNX Runtime library
/// `CEM_ONNX_RUNTIME` (else `ORT_DYLIB_PATH`). `scripts/test` runs the
/// evaluation both ways.
fn model() -> &'static cem_catalog::Model {
    static TRANSFORMER: std::sync::OnceLock<Option<cem_catalog::Model>> =
        std::sync::OnceLock::new();
    let transformer = TRANSFORMER.get_or_init(|| {
        let dir = std::env::var_os("CEM_ONNX_MODEL")?;
        let runtime = std::env::var_os("CEM_ONNX_RUNTIME").map(std::path::PathBuf::from);
        match cem_catalog::OnnxModel::load(std::path::Path::new(&dir), runtime.as_deref(), 1) {
            Ok(model) => Some(cem_catalog::Model::Onnx(model)),
            Err(e) => panic!("CEM_ONNX_MODEL is set but does not load: {e}"),
        }
    });
    if let Some(model) = transformer {
        return model;
    }
    match builtin_model() {
        Some(Ok(model)) => model,
        Some(Err(e)) => panic!("the built-in model does not load: {e}"),
        None => panic!("built without the `semantic` feature: nothing to evaluate"),
    }
}

/// What the model under evaluation must reach: floors just under today's
/// figures for the static model, so that a change that loses quality fails
/// here; for the transformer, issue 38's targets themselves.
struct Floors {
    /// Needs in other words, words and meaning: top-1 and top-3.
    hybrid: (f64, f64),
    /// A second phrasing after one use of the first: top-1 and top-3.
    phrasing: (f64, f64),
    /// The same the other way round (no constant was picked on it).
    reversed: (f64, f64),
    /// Held-out descriptive queries allowed out of the first three.
    held_out_misses: usize,
}

fn floors() -> Floors {
    if model().is_transformer() {
        // Today 46.4% / 70.2%; 88.7% / 95.5%; 86.4% / 96.2%; none.
        Floors {
            hybrid: (0.45, 0.69),
            phrasing: (0.85, 0.95),
            reversed: (0.85, 0.95),
            held_out_misses: 0,
        }
    } else {
        // Today 38.1% / 60.0%; 79.6% / 89.4%; 80.8% / 90.9%; "comment on a
        // page" fifth. These are NOT issue 38's targets (85% and 95%),
        // which the static model does not reach (BENCHMARKS.md, "Relevance
        // feedback").
        Floors {
            hybrid: (0.35, 0.58),
            phrasing: (0.78, 0.89),
            reversed: (0.80, 0.90),
            held_out_misses: 1,
        }
    }
}

#[derive(Default, Clone, Copy)]
struct Score {
    needs: usize,
    top1: usize,
    top3: usize,
    top5: usize,
    /// In the first ten: what `search_tools` shows with its default limit.
    top10: usize,
    reciprocal: f64,
}

impl Score {
    /// Adds another part's counts (the two halves of a split).
    fn merge(&mut self, part: Score) {
        self.needs += part.needs;
        self.top1 += part.top1;
        self.top3 += part.top3;
        self.top5 += part.top5;
        self.top10 += part.top10;
        self.reciprocal += part.reciprocal;
    }

    fn add(&mut self, rank: Option<usize>) {
        self.needs += 1;
        if let Some(r) = rank {
            self.top1 += usize::from(r == 0);
            self.top3 += usize::from(r < 3);
            self.top5 += usize::from(r < 5);
            self.top10 += usize::from(r < 10);
            self.reciprocal += 1.0 / (r + 1) as f64;
        }
    }
    fn top1(&self) -> f64 {
        self.top1 as f64 / self.needs.max(1) as f64
    }
    fn top3(&self) -> f64 {
        self.top3 as f64 / self.needs.max(1) as f64
    }
    fn mrr(&self) -> f64 {
        self.reciprocal / self.needs.max(1) as f64
    }
    fn line(&self) -> String {
        format!(
            "top-1 {:5.1}%  top-3 {:5.1}%  top-5 {:5.1}%  top-10 {:5.1}%  MRR {:.3}  ({} needs)",
            100.0 * self.top1(),
            100.0 * self.top3(),
            100.0 * self.top5 as f64 / self.needs.max(1) as f64,
            100.0 * self.top10 as f64 / self.needs.max(1) as f64,
            self.mrr(),
            self.needs
        )
    }
}

/// The rank of the first answer among the first 20 hits.
fn rank(catalog: &Catalog, need: &Need) -> Option<usize> {
    rank_learned(catalog, need, None)
}

/// As [`rank`], with recorded uses.
fn rank_learned(catalog: &Catalog, need: &Need, learning: Option<Learning<'_>>) -> Option<usize> {
    let hits = match learning {
        Some(learning) => catalog.search_learned(&need.text, None, 20, learning),
        None => catalog.search(&need.text, None, 20),
    };
    hits.iter().position(|h| {
        need.answers
            .contains(&catalog.entries()[h.index].qualified_name())
    })
}

/// Scores of the whole set, its even lines and its odd lines; misses of
/// the top 3 are printed when `show` is set.
fn evaluate(catalog: &Catalog, needs: &[Need], show: bool) -> [Score; 3] {
    let mut scores = [Score::default(); 3];
    for need in needs {
        let r = rank(catalog, need);
        scores[0].add(r);
        scores[1 + need.line % 2].add(r);
        if show && r.is_none_or(|r| r >= 3) {
            let hits: Vec<String> = catalog
                .search(&need.text, None, 3)
                .iter()
                .map(|h| catalog.entries()[h.index].qualified_name())
                .collect();
            println!(
                "  miss (rank {}): {:?} wants {:?}, got {:?}",
                r.map_or("-".to_string(), |r| (r + 1).to_string()),
                need.text,
                need.answers,
                hits
            );
        }
    }
    scores
}

#[test]
fn the_set_is_large_and_honest() {
    let entries = entries();
    let known: BTreeSet<String> = entries.iter().map(Entry::qualified_name).collect();
    let servers: BTreeSet<&str> = entries.iter().map(|e| e.category.as_str()).collect();
    assert!(servers.len() >= 10, "tools of {} servers", servers.len());
    let needs = needs();
    assert!(needs.len() >= 150, "{} needs", needs.len());
    for need in &needs {
        assert!(!need.answers.is_empty(), "line {}: no answer", need.line);
        let words: BTreeSet<String> = split_words(&need.text).iter().map(|w| stem(w)).collect();
        for answer in &need.answers {
            assert!(
                known.contains(answer),
                "line {}: no tool {answer}",
                need.line
            );
            let (_, tool) = answer.split_once('.').unwrap_or(("", answer));
            for name_word in split_words(tool) {
                assert!(
                    !words.contains(&stem(&name_word)),
                    "line {}: {:?} uses {name_word:?}, a word of {answer}",
                    need.line,
                    need.text
                );
            }
        }
    }
}

/// Queries that do use their tool's words (the integration test's, over
/// five of these servers): meaning must not cost what words already find.
#[test]
fn meaning_keeps_what_words_find() {
    let named = read_needs("named.jsonl");
    let lexical = Catalog::new(entries());
    let [l, _, _] = evaluate(&lexical, &named, false);
    let model = model();
    let entries = entries();
    let hybrid = Catalog::hybrid(entries.clone(), Semantic::new(model, &entries, None));
    let [h, _, _] = evaluate(&hybrid, &named, true);
    println!("named lexical {}", l.line());
    println!("named hybrid  {}", h.line());
    assert!(
        h.top3 >= l.top3 && h.top1 >= l.top1,
        "hybrid {} against lexical {}",
        h.line(),
        l.line()
    );
}

#[test]
fn agents_find_their_tool_in_the_top_three() {
    let needs = needs();
    let show = std::env::var_os("SEARCH_EVAL_MISSES").is_some();
    let lexical = Catalog::new(entries());
    let [all, even, odd] = evaluate(&lexical, &needs, false);
    println!("lexical  all   {}", all.line());
    println!("lexical  even  {}", even.line());
    println!("lexical  odd   {}", odd.line());
    let model = model();
    let entries = entries();
    let semantic = Semantic::new(model, &entries, None);
    let hybrid = Catalog::hybrid(entries, semantic);
    let [h_all, h_even, h_odd] = evaluate(&hybrid, &needs, show);
    println!("hybrid   all   {}", h_all.line());
    println!("hybrid   even  {}", h_even.line());
    println!("hybrid   odd   {}", h_odd.line());
    // Meaning must help on both halves, not only on the half the
    // constants were chosen on.
    for (h, l, half) in [(h_even, even, "even"), (h_odd, odd, "odd")] {
        assert!(
            h.top3 > l.top3 && h.mrr() > l.mrr(),
            "{half}: hybrid {} against lexical {}",
            h.line(),
            l.line()
        );
    }
    // Not the targets of issue 19 (top-3 90%, top-1 75%), which no model
    // here reaches; BENCHMARKS.md says so.
    let (top1, top3) = floors().hybrid;
    assert!(h_all.top3() >= top3, "top-3 fell: {}", h_all.line());
    assert!(h_all.top1() >= top1, "top-1 fell: {}", h_all.line());
}

/// A query that is a tool's whole name finds that tool first, with meaning
/// on: meaning alone put `git_branch`, `git_commit` and `git_diff` above
/// `git_log` for "git.git_log".
#[test]
fn a_tools_own_name_finds_it_first() {
    let entries = entries();
    let hybrid = Catalog::hybrid(entries.clone(), Semantic::new(model(), &entries, None));
    let first = |query: &str| {
        hybrid
            .search(query, None, 3)
            .first()
            .map(|h| hybrid.entries()[h.index].qualified_name())
    };
    for entry in &entries {
        let qualified = entry.qualified_name();
        assert_eq!(first(&qualified).as_deref(), Some(qualified.as_str()));
        let same_name = entries.iter().filter(|e| e.name == entry.name).count();
        if same_name == 1 {
            assert_eq!(
                first(&entry.name).as_deref(),
                Some(qualified.as_str()),
                "{}",
                entry.name
            );
        }
    }
}

/// A tool's name words as a set: lowercase, stemmed, in order.
fn word_set(text: &str) -> Vec<String> {
    let mut words: Vec<String> = split_words(text).iter().map(|w| stem(w)).collect();
    words.sort();
    words.dedup();
    words
}

/// Whether a tool's own description calls it deprecated (it is named by
/// its whole name only: its words find its replacement).
fn deprecated(entry: &Entry) -> bool {
    entry
        .description
        .to_ascii_lowercase()
        .contains("deprecated")
}

/// `word` with its first letter in upper case (`log` → `Log`).
fn capitalized(word: &str) -> String {
    let mut letters = word.chars();
    letters
        .next()
        .map(|first| first.to_uppercase().collect::<String>() + letters.as_str())
        .unwrap_or_default()
}

/// Queries made of a tool's own name words, in any order, with any
/// separator or case (`git log`, `log git`, `git-log`, `Git Log`), and with
/// its server's name before them (`filesystem read text file`); each answered
/// by every tool whose words are exactly those (two servers may both have a
/// `search`).
fn name_word_queries(entries: &[Entry]) -> Vec<Need> {
    let mut needs = Vec::new();
    // A deprecated tool is named by its whole name only (its words find its
    // replacement).
    for entry in entries.iter().filter(|e| !deprecated(e)) {
        let words = split_words(&entry.name);
        let mut reversed = words.clone();
        reversed.reverse();
        let title: Vec<String> = words.iter().map(|w| capitalized(w)).collect();
        let mut queries = vec![
            words.join(" "),
            reversed.join(" "),
            words.join("-"),
            title.join(" "),
        ];
        let server_words = split_words(&entry.category);
        if server_words.iter().any(|w| !words.contains(w)) {
            queries.push(format!("{} {}", entry.category, words.join(" ")));
        }
        queries.dedup();
        for query in queries {
            let wanted = word_set(&query);
            let answers: Vec<String> = entries
                .iter()
                .filter(|e| {
                    !deprecated(e)
                        && (word_set(&e.name) == wanted
                            || word_set(&format!("{} {}", e.category, e.name)) == wanted)
                })
                .map(Entry::qualified_name)
                .collect();
            needs.push(Need {
                line: needs.len() + 1,
                text: query,
                answers,
            });
        }
    }
    needs
}

/// Queries that write a tool's name, of two words or more, as a name
/// among other words (`run git_log for me`, `` `git-log` on ~/proj please``,
/// `I'd like to use GitLog now`, and `gitlog` alone); each answered by every
/// tool whose words are exactly those. No camel case for a name with a
/// one-letter word: `ApiRetrieveAPage` reads "apage".
fn names_among_other_words(entries: &[Entry]) -> Vec<Need> {
    let mut needs = Vec::new();
    for entry in entries.iter().filter(|e| !deprecated(e)) {
        let words = split_words(&entry.name);
        let wanted = word_set(&entry.name);
        if wanted.len() < 2 {
            continue;
        }
        let answers: Vec<String> = entries
            .iter()
            .filter(|e| !deprecated(e) && word_set(&e.name) == wanted)
            .map(Entry::qualified_name)
            .collect();
        let mut queries = vec![
            format!("run {} for me", words.join("_")),
            format!("`{}` on ~/proj please", words.join("-")),
            words.concat(),
        ];
        if words.iter().all(|w| w.chars().count() > 1) {
            let title: String = words.iter().map(|w| capitalized(w)).collect();
            queries.push(format!("I'd like to use {title} now"));
        }
        for query in queries {
            needs.push(Need {
                line: needs.len() + 1,
                text: query,
                answers: answers.clone(),
            });
        }
    }
    needs
}

/// Descriptions that hold two of a tool's name words written apart, a word
/// that splits into some ("GitHub": git, hub; "settable": set, table), a
/// path or a file's name (`git.log`), or a tool's name within a longer one
/// they ask for ("stop the port-forward"): a need, not a name. Searched over the thirteen servers, none names a tool (a named
/// tool is put first whatever else ranks).
#[test]
fn descriptions_name_no_tool() {
    let mut entries = entries();
    entries.extend(held_out_entries());
    let catalog = Catalog::new(entries);
    for query in [
        "list commits in my local repo",
        "create table in excel",
        "read range of lines from a file",
        "search code in my project folder",
        "search users in the database",
        "get env variables of the pod",
        "delete note in notion",
        "undo last git commit",
        "switch git branch to main",
        "show GitHub pull requests",
        "add GitHub remote",
        "create a branch in my local clone",
        "read a text file in the repo",
        "what is in ~/git/log",
        "REST API get user by id",
        "stop the port-forward to my pod please",
        "load export.csv into a new sheet",
        "what is in git.log",
        "is the field settable",
    ] {
        let named: Vec<String> = catalog
            .explain(query, None, 10, None)
            .iter()
            .filter(|why| why.named.is_some())
            .map(|why| catalog.entries()[why.hit.index].qualified_name())
            .collect();
        assert!(named.is_empty(), "{query:?} named {named:?}");
    }
}

/// A query built from a tool's own name words finds that tool first, by
/// words alone and with meaning: meaning put `git_branch` above `git_log`
/// for `git log`.
#[test]
fn a_tools_name_words_find_it_first() {
    let entries = entries();
    let lexical = Catalog::new(entries.clone());
    let hybrid = Catalog::hybrid(entries.clone(), Semantic::new(model(), &entries, None));
    name_words_find_their_tool_first("name words", &entries, &lexical, &hybrid);
}

/// Every query of [`name_word_queries`] over `entries` finds its tool
/// first, by words alone and with meaning; the scores printed under
/// `label`.
fn name_words_find_their_tool_first(
    label: &str,
    entries: &[Entry],
    lexical: &Catalog,
    hybrid: &Catalog,
) {
    for (set, needs) in [
        ("", name_word_queries(entries)),
        (", written among others", names_among_other_words(entries)),
    ] {
        let [l, _, _] = evaluate(lexical, &needs, true);
        let [h, _, _] = evaluate(hybrid, &needs, true);
        println!("{label}{set} lexical {}", l.line());
        println!("{label}{set} hybrid  {}", h.line());
        assert_eq!(l.top1, l.needs, "lexical {}", l.line());
        assert_eq!(h.top1, h.needs, "hybrid {}", h.line());
    }
}

/// Two servers no constant of the search was chosen on (`held_out/`:
/// Notion's and Kubernetes' MCP servers, as `held_out/capture.py` lists
/// them), beside the eleven, as a user with all thirteen connected would
/// search: every query of a tool's name words still finds it first
/// (`kubectl get` is `kubectl_get`), and the descriptive queries of
/// `held_out/needs.jsonl`, in the two servers' own words, mostly find
/// their tool in the first three.
#[test]
fn servers_no_constant_was_chosen_on() {
    let mut entries = entries();
    let held_out = held_out_entries();
    assert!(held_out.len() >= 40, "{} held-out tools", held_out.len());
    entries.extend(held_out);
    let lexical = Catalog::new(entries.clone());
    let hybrid = Catalog::hybrid(entries.clone(), Semantic::new(model(), &entries, None));
    name_words_find_their_tool_first("held out, name words", &entries, &lexical, &hybrid);
    let described = read_needs("held_out/needs.jsonl");
    let [l, _, _] = evaluate(&lexical, &described, false);
    let [h, _, _] = evaluate(&hybrid, &described, true);
    println!("held out, described lexical {}", l.line());
    println!("held out, described hybrid  {}", h.line());
    // The target for such queries is all of them; the static model
    // ranks Notion's create-a-comment fifth for "comment on a page" (second
    // by words alone).
    assert!(h.top3 + floors().held_out_misses >= h.needs, "{}", h.line());
}

/// When learning is weighed (any fixed time: the records are as fresh).
const NOW: u64 = 1_800_000_000;

/// Records that each need's first answer was used after a search for it.
fn learned_from(needs: &[&Need]) -> Learned {
    let mut learned = Learned::default();
    for need in needs {
        learned.record(&need.text, &need.answers[0], NOW);
    }
    learned
}

fn score_of(catalog: &Catalog, needs: &[&Need], learned: Option<&Learned>) -> Score {
    let mut score = Score::default();
    for need in needs {
        let learning = learned.map(|learned| Learning { learned, now: NOW });
        score.add(rank_learned(catalog, need, learning));
    }
    score
}

/// Learning from use, across needs: the needs are split by line parity;
/// the uses of one half are recorded (each need's tool used once after
/// searching for it), and the other half is searched: needs whose tool
/// answered another need of the recorded half, and apart, needs whose tool
/// nobody used. Then both
/// halves swap. Also: the same phrasing searched again after its use (every
/// need recorded), and the named sets with every need recorded (learning
/// must not cost a named tool its place).
#[test]
fn learning_from_one_use_of_another_phrasing() {
    let entries = entries();
    let hybrid = Catalog::hybrid(entries.clone(), Semantic::new(model(), &entries, None));
    let needs = needs();
    let (mut without, mut with) = (Score::default(), Score::default());
    let (mut unused_without, mut unused_with) = (Score::default(), Score::default());
    for half in 0..2 {
        let recorded: Vec<&Need> = needs.iter().filter(|n| n.line % 2 == half).collect();
        let tools: BTreeSet<&str> = recorded.iter().map(|n| n.answers[0].as_str()).collect();
        let searched: Vec<&Need> = needs
            .iter()
            .filter(|n| n.line % 2 != half && n.answers.iter().any(|a| tools.contains(a.as_str())))
            .collect();
        // Needs whose tool nobody used: learning must not push them down.
        let unused: Vec<&Need> = needs
            .iter()
            .filter(|n| n.line % 2 != half && !n.answers.iter().any(|a| tools.contains(a.as_str())))
            .collect();
        let learned = learned_from(&recorded);
        let before = score_of(&hybrid, &searched, None);
        let after = score_of(&hybrid, &searched, Some(&learned));
        let unused_before = score_of(&hybrid, &unused, None);
        let unused_after = score_of(&hybrid, &unused, Some(&learned));
        println!("learning half {half}: without {}", before.line());
        println!("learning half {half}: with    {}", after.line());
        println!("  tools nobody used, without {}", unused_before.line());
        println!("  tools nobody used, with    {}", unused_after.line());
        for (total, part) in [
            (&mut without, before),
            (&mut with, after),
            (&mut unused_without, unused_before),
            (&mut unused_with, unused_after),
        ] {
            total.merge(part);
        }
    }
    println!("learning both halves: without {}", without.line());
    println!("learning both halves: with    {}", with.line());
    println!("tools nobody used, without   {}", unused_without.line());
    println!("tools nobody used, with      {}", unused_with.line());
    let all: Vec<&Need> = needs.iter().collect();
    let learned = learned_from(&all);
    let again = score_of(&hybrid, &all, Some(&learned));
    println!("the same phrasing again: {}", again.line());
    let named = read_needs("named.jsonl");
    let named: Vec<&Need> = named.iter().collect();
    let words = name_word_queries(&entries);
    let words: Vec<&Need> = words.iter().collect();
    let named_with = score_of(&hybrid, &named, Some(&learned));
    let words_with = score_of(&hybrid, &words, Some(&learned));
    println!("named with learning      {}", named_with.line());
    println!("name words with learning {}", words_with.line());
    // Another need of a tool used once is another need, not another
    // phrasing (`learning_from_another_phrasing_of_the_same_need` measures
    // that): learning must not cost it more than a little. And it must
    // never cost a tool named by its words its first place.
    assert!(
        with.top3 + with.needs / 20 >= without.top3,
        "with {} without {}",
        with.line(),
        without.line()
    );
    assert!(again.top1() >= 0.95, "again {}", again.line());
    assert_eq!(words_with.top1, words_with.needs, "{}", words_with.line());
    // A descriptive query whose tool was in the first three keeps it there
    // whatever the records of other needs lift ("show a commit").
    let learning = Learning {
        learned: &learned,
        now: NOW,
    };
    for need in &named {
        let before = rank(&hybrid, need);
        let after = rank_learned(&hybrid, need, Some(learning));
        assert!(
            before.is_none_or(|r| r >= 3) || after.is_some_and(|r| r < 3),
            "{:?}: rank {before:?} without learning, {after:?} with",
            need.text
        );
    }
}

/// What learning could reach with this model if it knew which searches
/// repeat a recorded need: only the tools that have records, each ranked by
/// its closest record (the cosine of the two queries' vectors), no catalog
/// score and no "none of them". `crates/embed/model/compare.py
/// --learning-bound` measures the same with a transformer.
fn nearest_record(recorded: &[&Need], searched: &[&Need]) -> Score {
    let model = model();
    // The vector learning compares, for records and queries alike (stop
    // words left out of it); a query of more than `MAX_WORDS` is cut as a
    // record would be.
    let vector = |text: &str| learning_vector(model, &words_of(text)).kept;
    let records: Vec<(&str, Vec<f32>)> = recorded
        .iter()
        .map(|n| (n.answers[0].as_str(), vector(&n.text)))
        .collect();
    let mut score = Score::default();
    for need in searched {
        let q = vector(&need.text);
        let mut closest: Vec<(&str, f32)> = Vec::new();
        for (tool, v) in &records {
            let cosine = cem_embed::dot(&q, v);
            match closest.iter_mut().find(|(t, _)| t == tool) {
                Some((_, best)) => *best = best.max(cosine),
                None => closest.push((tool, cosine)),
            }
        }
        closest.sort_by(|a, b| b.1.total_cmp(&a.1));
        score.add(
            closest
                .iter()
                .position(|(t, _)| need.answers.iter().any(|a| a == t)),
        );
    }
    score
}

/// Learning measured on what it is for: `paraphrases.jsonl` holds a second
/// phrasing of every need (line for line: other words, other sentence
/// shape, the concrete names changed in about half). The uses of one half's
/// needs are recorded in their first phrasing, and the same needs are
/// searched in their second; the needs of the other half whose tools
/// nobody used are searched too, with and without the records, so that
/// learning is seen to cost them nothing. Then the halves swap. Then all
/// of it the other way round (second phrasings recorded, first searched),
/// which no constant was picked on.
#[test]
fn learning_from_another_phrasing_of_the_same_need() {
    let entries = entries();
    let hybrid = Catalog::hybrid(entries.clone(), Semantic::new(model(), &entries, None));
    let needs = needs();
    let second = read_needs("paraphrases.jsonl");
    assert_eq!(second.len(), needs.len());
    let (scores, bound) = phrasing_scores(&hybrid, &needs, &second);
    let after = report_phrasing("another phrasing", "tools nobody used", scores);
    println!("nearest record alone (the bound)   {}", bound.line());
    let floors = floors();
    assert!(after.top1() >= floors.phrasing.0, "{}", after.line());
    assert!(after.top3() >= floors.phrasing.1, "{}", after.line());
    // The other way round, which no constant was picked on: the second
    // phrasings recorded, the first searched.
    let (scores, _) = phrasing_scores(&hybrid, &second, &needs);
    let reversed = report_phrasing("reversed", "reversed, nobody used", scores);
    assert!(reversed.top1() >= floors.reversed.0, "{}", reversed.line());
    assert!(reversed.top3() >= floors.reversed.1, "{}", reversed.line());
}

/// Prints the scores of [`phrasing_scores`] and checks what holds either
/// way round: learning lifts the needs searched again into the first three,
/// and records of other tools push a need's own tool out of the first
/// three only rarely. Returns the needs searched again, with learning.
fn report_phrasing(
    again: &str,
    unused: &str,
    [before, after, unused_before, unused_after]: [Score; 4],
) -> Score {
    let label = |what: &str, how: &str| format!("{what}, {how}");
    println!("{:<35}{}", label(again, "without learning"), before.line());
    println!("{:<35}{}", label(again, "with learning"), after.line());
    println!("{:<35}{}", label(unused, "without"), unused_before.line());
    println!("{:<35}{}", label(unused, "with"), unused_after.line());
    assert!(after.top3 > before.top3, "{}", after.line());
    assert!(
        unused_after.top3 + unused_after.needs / 20 >= unused_before.top3,
        "with {} without {}",
        unused_after.line(),
        unused_before.line()
    );
    after
}

/// Each half's needs recorded in their `first` phrasing and searched in
/// their `second`, without and with the records, then the needs of the
/// other half whose tools nobody used, without and with; and the bound.
fn phrasing_scores(hybrid: &Catalog, first: &[Need], second: &[Need]) -> ([Score; 4], Score) {
    let mut totals = [Score::default(); 4];
    let mut bound = Score::default();
    for half in 0..2 {
        let recorded: Vec<&Need> = first.iter().filter(|n| n.line % 2 == half).collect();
        let tools: BTreeSet<&str> = recorded.iter().map(|n| n.answers[0].as_str()).collect();
        let again: Vec<&Need> = second.iter().filter(|n| n.line % 2 == half).collect();
        let unused: Vec<&Need> = second
            .iter()
            .filter(|n| n.line % 2 != half && !n.answers.iter().any(|a| tools.contains(a.as_str())))
            .collect();
        let learned = learned_from(&recorded);
        bound.merge(nearest_record(&recorded, &again));
        let parts = [
            score_of(hybrid, &again, None),
            score_of(hybrid, &again, Some(&learned)),
            score_of(hybrid, &unused, None),
            score_of(hybrid, &unused, Some(&learned)),
        ];
        for (total, part) in totals.iter_mut().zip(parts) {
            total.merge(part);
        }
    }
    (totals, bound)
}
