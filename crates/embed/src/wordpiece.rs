//! BERT's WordPiece split of one lowercase word into vocabulary tokens:
//! the longest known prefix, then the longest known "##" continuation,
//! and so on. A word with an unknown remainder yields nothing (BERT's
//! `[UNK]`, which carries no meaning worth averaging).
//!
//! Splitting text into words is the caller's: the catalog already splits
//! `snake_case`, `kebab-case` and `camelCase`, which BERT's own
//! pre-tokenizer would glue into one unknown word.

use std::collections::HashMap;

/// BERT's limit: longer "words" (hashes, base64) are unknown.
const MAX_WORD_CHARS: usize = 100;

/// The token ids of `word`, appended to `out`.
pub(crate) fn split(vocab: &HashMap<Box<str>, u32>, word: &str, out: &mut Vec<u32>) {
    if let Some(id) = vocab.get(word) {
        out.push(*id);
        return;
    }
    if word.chars().count() > MAX_WORD_CHARS {
        return;
    }
    let start_len = out.len();
    let mut piece = String::with_capacity(word.len() + 2);
    let mut start = 0;
    while start < word.len() {
        let mut end = word.len();
        let mut found = None;
        while end > start {
            if word.is_char_boundary(end) {
                piece.clear();
                if start > 0 {
                    piece.push_str("##");
                }
                piece.push_str(&word[start..end]);
                if let Some(id) = vocab.get(piece.as_str()) {
                    found = Some(*id);
                    break;
                }
            }
            end -= 1;
        }
        match found {
            Some(id) => {
                out.push(id);
                start = end;
            }
            None => {
                out.truncate(start_len);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab() -> HashMap<Box<str>, u32> {
        [
            "git", "##hub", "play", "##wright", "##s", "un", "##want", "##ed",
        ]
        .iter()
        .enumerate()
        .map(|(i, t)| (Box::from(*t), i as u32))
        .collect()
    }

    fn ids(word: &str) -> Vec<u32> {
        let mut out = vec![];
        split(&vocab(), word, &mut out);
        out
    }

    #[test]
    fn known_words_and_pieces() {
        assert_eq!(ids("git"), [0]);
        assert_eq!(ids("github"), [0, 1]);
        assert_eq!(ids("playwrights"), [2, 3, 4]);
        assert_eq!(ids("unwanted"), [5, 6, 7]);
    }

    #[test]
    fn an_unknown_remainder_drops_the_whole_word() {
        assert!(ids("gitx").is_empty());
        assert!(ids("xgit").is_empty());
        assert!(ids(&"git".repeat(40)).is_empty());
    }
}
