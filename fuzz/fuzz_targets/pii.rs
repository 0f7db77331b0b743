//! PII detection and the vault on arbitrary UTF-8: `cem_pii::detect`,
//! `cem_pii::detect_field` (key: the first line, value: the rest), and a
//! round trip through `cem_pii::Vault` (`Found::in_text` / `Found::in_field`,
//! `tokenize`, `restore`). Everything the sandboxed code, an upstream tool
//! or the model sends passes here. Never panics; findings are in order, do
//! not overlap and lie on character boundaries; and restoring what was
//! tokenized gives the original back whenever the original holds no
//! token-shaped string of its own.

#![no_main]

use cem_pii::{Entity, Found, Kind, Vault, detect, detect_field};
use libfuzzer_sys::fuzz_target;

fn check_findings(text: &str, found: &[Entity]) {
    let mut last = 0;
    for e in found {
        assert!(
            e.start >= last && e.start <= e.end && e.end <= text.len(),
            "findings out of order or overlapping in {text:?}: {found:?}"
        );
        assert!(
            text.get(e.start..e.end).is_some(),
            "finding {e:?} is not on character boundaries in {text:?}"
        );
        last = e.end;
    }
}

/// Tokenizes `text` with everything `found` in it, restores the result and
/// checks the round trip.
fn round_trip(text: &str, found: Found) {
    let mut vault = Vault::new(usize::MAX); // nothing forgotten
    let tokenized = vault.tokenize(text, found, &Kind::ALL);
    let restored = vault.restore(&tokenized.text);
    if !Vault::has_tokens(text) {
        assert_eq!(
            restored.text, text,
            "round trip changed the text (tokenized: {:?})",
            tokenized.text
        );
        assert!(restored.unknown.is_empty(), "{:?}", restored.unknown);
        assert_eq!(restored.restored, tokenized.total());
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    check_findings(text, &detect(text));
    round_trip(text, Found::in_text(text));

    let (key, value) = text.split_once('\n').unwrap_or(("", text));
    check_findings(value, &detect_field(key, value));
    round_trip(value, Found::in_field(key, value));

    // Only some kinds, in a vault small enough to forget: restoring must
    // still not panic (forgotten tokens stay as they are).
    let kinds: Vec<Kind> = Kind::ALL
        .into_iter()
        .enumerate()
        .filter(|(i, _)| (text.len() >> i) & 1 == 1)
        .map(|(_, k)| k)
        .collect();
    let mut small = Vault::new(256);
    let tokenized = small.tokenize(text, Found::in_text(text), &kinds);
    let _ = small.restore(&tokenized.text);
    let _ = small.restore(text);
});
