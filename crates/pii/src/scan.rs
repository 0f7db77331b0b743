//! What every detector shares: a finding, and the helpers that match and
//! bound one (below the detectors, which [`crate::detect`] runs together).

use regex::Regex;

use crate::Kind;

/// One finding: `text[start..end]` (byte offsets) is of `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entity {
    pub kind: Kind,
    pub start: usize,
    pub end: usize,
}

impl Entity {
    pub fn new(kind: Kind, start: usize, end: usize) -> Self {
        Self { kind, start, end }
    }
}

/// Whether `text[start..end]` stands on its own: not glued to letters or
/// digits, nor to them through one of `joiners` (so `ORD-2024-000123` is
/// not a phone number and `v1.2.3.4` not an address).
pub(crate) fn bounded(text: &str, start: usize, end: usize, joiners: &str) -> bool {
    // ASCII only: CJK text runs into values without spaces ("至x@y.com。").
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut back = text[..start].chars().rev();
    match back.next() {
        Some(c) if word(c) => return false,
        Some(c) if joiners.contains(c) && back.next().is_some_and(word) => return false,
        _ => {}
    }
    let mut ahead = text[end..].chars();
    match ahead.next() {
        Some(c) if word(c) => false,
        Some(c) if joiners.contains(c) && ahead.next().is_some_and(word) => false,
        _ => true,
    }
}

/// Compiles one of the crate's constant patterns. Each is compiled by the
/// unit tests, so this cannot fail in a build that passed them.
#[allow(
    clippy::expect_used,
    reason = "constant patterns, each compiled by the tests"
)]
pub(crate) fn pattern(re: &str) -> Regex {
    Regex::new(re).expect("a constant pattern compiles")
}

/// Whether every non-digit character of `s` is the same one (or there is
/// none): `4111 1111 1111 1111`, not `4111-1111 1111`.
pub(crate) fn one_separator(s: &str) -> bool {
    let mut seps = s.chars().filter(|c| !c.is_ascii_digit());
    let first = seps.next();
    seps.all(|c| Some(c) == first)
}

pub(crate) fn digits(s: &str) -> Vec<u8> {
    s.bytes().filter(u8::is_ascii_digit).collect()
}
