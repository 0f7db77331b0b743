//! Property tests: any text round-trips through a vault, tokens are stable
//! within a vault, another vault restores nothing, and detection never
//! panics or returns overlapping or misplaced spans.

use std::time::Duration;

use cem_pii::{Found, Kind, Vault, Vaults, detect, tokenize_shared};
use proptest::prelude::*;

/// Text mixing free characters (anything but `[`, which could spell a
/// token by hand) with values of every kind.
fn text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[^\\[]{0,24}",
        "[a-z]{1,8}(\\.[a-z]{1,5})?@[a-z]{2,8}\\.(com|org|de)",
        "\\+[1-9][0-9] [0-9]{3} [0-9]{3} [0-9]{4}",
        "\\([2-9][0-9]{2}\\) [2-9][0-9]{2}-[0-9]{4}",
        "[1-8][0-9]{2}-[1-9][0-9]-[1-9][0-9]{3}",
        Just("4111 1111 1111 1111".to_string()),
        Just("DE89 3704 0044 0532 0130 00".to_string()),
        "(1[0-9]|2[0-4][0-9])\\.[1-9]\\.[1-9][0-9]\\.[1-9]",
        "ghp_[A-Za-z0-9]{36}",
        "password=[A-Za-z]{4}[0-9]{4}",
    ];
    prop::collection::vec(piece, 0..12).prop_map(|p| p.join(" "))
}

proptest! {
    #[test]
    fn restore_of_tokenize_is_the_original(x in text()) {
        let mut v = Vault::new(1 << 20);
        let t = v.tokenize(&x, Found::in_text(&x), &Kind::ALL);
        prop_assert_eq!(v.restore(&t.text).text, x);
    }

    #[test]
    fn tokens_are_stable_within_a_vault(x in text()) {
        let mut v = Vault::new(1 << 20);
        let first = v.tokenize(&x, Found::in_text(&x), &Kind::ALL).text;
        let again = v.tokenize(&x, Found::in_text(&x), &Kind::ALL).text;
        prop_assert_eq!(first, again);
    }

    #[test]
    fn another_session_restores_nothing(x in text()) {
        let vaults = Vaults::new(Duration::from_secs(60), 16, 1 << 20);
        let (a, b) = (vaults.get("a"), vaults.get("b"));
        let t = tokenize_shared(&a, &x, &Kind::ALL);
        let r = b.lock().map_err(|_| TestCaseError::fail("poisoned"))?.restore(&t.text);
        prop_assert_eq!(r.restored, 0);
        prop_assert_eq!(r.text, t.text);
    }

    #[test]
    fn detection_never_panics_and_spans_are_sane(x in any::<String>()) {
        let found = detect(&x);
        let mut last = 0;
        for e in found {
            prop_assert!(e.start >= last && e.start < e.end && e.end <= x.len());
            prop_assert!(x.is_char_boundary(e.start) && x.is_char_boundary(e.end));
            last = e.end;
        }
    }
}
