#[path = "search_eval/load.rs"]
mod load;
use cem_catalog::{Catalog, Learned, Learning, Semantic, builtin_model};
#[test]
fn scratch() {
    let Some(Ok(model)) = builtin_model() else {
        panic!()
    };
    let entries = load::entries();
    let c = Catalog::hybrid(entries.clone(), Semantic::new(model, &entries, None));
    let first = load::read_needs("needs.jsonl");
    let second = load::read_needs("paraphrases.jsonl");
    for half in 0..2 {
        let mut learned = Learned::default();
        for n in first.iter().filter(|n| n.line % 2 == half) {
            learned.record(&n.text, &n.answers[0], 1_800_000_000);
        }
        let learning = Learning {
            learned: &learned,
            now: 1_800_000_000,
        };
        for (a, b) in first
            .iter()
            .zip(&second)
            .filter(|(n, _)| n.line % 2 == half)
        {
            let why = c.explain(&b.text, None, 10, Some(learning));
            let pos = why.iter().position(|w| {
                b.answers
                    .contains(&c.entries()[w.hit.index].qualified_name())
            });
            if pos != Some(0) {
                let top: Vec<String> = why
                    .iter()
                    .take(3)
                    .map(|w| {
                        format!(
                            "{} {:.3} L{:?}",
                            c.entries()[w.hit.index].qualified_name(),
                            w.hit.score,
                            w.learned.as_ref().map(|(x, q)| format!("{x:+.2} {q}"))
                        )
                    })
                    .collect();
                let right = pos.map(|p| {
                    format!(
                        "{:.3} L{:?}",
                        why[p].hit.score,
                        why[p].learned.as_ref().map(|(x, _)| format!("{x:+.2}"))
                    )
                });
                println!(
                    "rank {:?} {:?}\n   recorded {:?}\n   want {:?} {:?}\n   got {:?}",
                    pos.map(|p| p + 1),
                    b.text,
                    a.text,
                    b.answers[0],
                    right,
                    top
                );
            }
        }
    }
}
