//! Turning names and descriptions into search terms.

/// Words too common to help ranking (and left out of a record's vector:
/// changing them changes `crate::kept::recipe`).
pub(crate) const STOP: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "into", "is", "it",
    "its", "of", "on", "or", "that", "the", "this", "to", "with", "you", "your", "i", "me", "my",
    "we", "can", "will", "which",
];

/// Splits text into lowercase words: on anything not a letter or digit,
/// and inside camelCase and letter/digit boundaries (`getTinyImage` →
/// get, tiny, image; `git_log` → git, log).
pub fn split_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut prev: Option<char> = None;
    for c in text.chars() {
        if !c.is_alphanumeric() {
            flush(&mut current, &mut words);
            prev = None;
            continue;
        }
        if let Some(p) = prev {
            let camel = p.is_lowercase() && c.is_uppercase();
            let digit_edge = p.is_ascii_digit() != c.is_ascii_digit();
            if camel || digit_edge {
                flush(&mut current, &mut words);
            }
        }
        current.extend(c.to_lowercase());
        prev = Some(c);
    }
    flush(&mut current, &mut words);
    words
}

fn flush(current: &mut String, words: &mut Vec<String>) {
    if !current.is_empty() {
        words.push(std::mem::take(current));
    }
}

/// Whether `word` (lowercase) is too common to help ranking.
pub fn is_stop(word: &str) -> bool {
    STOP.contains(&word)
}

/// Search terms of `text`: split, stop words dropped, stemmed.
pub fn terms(text: &str) -> Vec<String> {
    name_words(text).into_iter().map(|w| stem(&w)).collect()
}

/// Words of `text` as written (lowercase), stop words dropped.
pub fn name_words(text: &str) -> Vec<String> {
    split_words(text)
        .into_iter()
        .filter(|w| !STOP.contains(&w.as_str()))
        .collect()
}

/// A light English stemmer: enough that "commits", "committed" and
/// "committing" meet "commit", "stage", "staged" and "staging" meet
/// "stage", and "create", "created" and "creating" meet "creat", without
/// the surprises of a full one. The final "e" follows Porter (1980): it
/// stays on a short word ending consonant-vowel-consonant ("stage",
/// "note", "state", which would else become "stag", "not", "stat") and is
/// put back where "-ed" or "-ing" took it; a longer word loses it.
pub fn stem(word: &str) -> String {
    let w = word;
    let n = w.len();
    if n <= 3 || !w.is_ascii() {
        return w.to_string();
    }
    let strip = |suffix: &str, keep: usize| -> Option<String> {
        w.strip_suffix(suffix)
            .filter(|base| base.len() >= keep)
            .map(str::to_string)
    };
    // "-ed" and "-ing" only from a stem with a vowel ("string" stays).
    let verb = |suffix: &str| {
        strip(suffix, 3).and_then(|b| {
            let v = vowels(&b);
            v.contains(&true).then(|| restore_e(&b, &v))
        })
    };
    let base = strip("ies", 3)
        .map(|b| b + "y")
        .or_else(|| strip("sses", 2).map(|b| b + "ss"))
        .or_else(|| {
            strip("eed", 1)
                .filter(|b| measure(&vowels(b)) > 0)
                .map(|b| b + "ee")
        })
        .or_else(|| verb("ing"))
        .or_else(|| verb("ed"))
        .or_else(|| {
            if w.ends_with("ss") || w.ends_with("us") || w.ends_with("is") {
                None
            } else {
                strip("s", 3)
            }
        })
        .unwrap_or_else(|| w.to_string());
    // "committ" (from committing/committed) -> "commit"
    let bytes = base.as_bytes();
    let len = bytes.len();
    if len >= 4
        && bytes[len - 1] == bytes[len - 2]
        && !matches!(bytes[len - 1], b'l' | b's' | b'z' | b'e')
    {
        return base[..len - 1].to_string();
    }
    // The final "e" goes from a longer word ("create", "update", "change"),
    // stays on a short one ("stage", "file"): "branches" and "matches"
    // come to "branch" and "match" this way too.
    if let Some(rest) = base.strip_suffix('e')
        && rest.len() >= 3
    {
        let v = vowels(rest);
        let m = measure(&v);
        if m > 1 || (m == 1 && !ends_cvc(rest, &v)) {
            return rest.to_string();
        }
    }
    base
}

/// Which letters of a word are vowels: a, e, i, o, u, and y after a
/// consonant ("type"). One pass, left to right: a query's word can be as
/// long as its sender likes.
fn vowels(word: &str) -> Vec<bool> {
    let mut out: Vec<bool> = Vec::with_capacity(word.len());
    for b in word.bytes() {
        let vowel = match b {
            b'a' | b'e' | b'i' | b'o' | b'u' => true,
            b'y' => out.last().is_some_and(|before| !before),
            _ => false,
        };
        out.push(vowel);
    }
    out
}

/// Porter's measure of a word whose letters [`vowels`] classed: how many
/// times a vowel is followed by a consonant ("stag" 1, "creat" 2).
fn measure(vowels: &[bool]) -> usize {
    vowels.windows(2).filter(|pair| pair[0] && !pair[1]).count()
}

/// Whether a word (its letters classed by [`vowels`]) ends
/// consonant-vowel-consonant, the last not w, x or y ("stag", "not", but
/// not "box").
fn ends_cvc(word: &str, v: &[bool]) -> bool {
    let n = v.len();
    n >= 3 && !v[n - 3] && v[n - 2] && !v[n - 1] && !word.ends_with(['w', 'x', 'y'])
}

/// What "-ed" or "-ing" left, with the "e" they took put back where
/// Porter puts it: "creat" → "create", "stag" → "stage"; a doubled last
/// letter is left for [`stem`] to undo ("committ").
fn restore_e(base: &str, vowels: &[bool]) -> String {
    let short_cvc = measure(vowels) == 1 && ends_cvc(base, vowels);
    if base.ends_with("at") || base.ends_with("bl") || base.ends_with("iz") || short_cvc {
        format!("{base}e")
    } else {
        base.to_string()
    }
}

/// Edit distance counting a swap of two neighbours as one edit (optimal
/// string alignment), giving up (returning `max + 1`) past `max`: "lgo"
/// is one edit from "log".
pub fn edit_distance(a: &str, b: &str, max: usize) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a.len().abs_diff(b.len()) > max {
        return max + 1;
    }
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for (j, cell) in d.iter_mut().take(width).enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        d[i * width] = i;
        let mut row_min = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[(i - 1) * width + j - 1] + cost)
                .min(d[(i - 1) * width + j] + 1)
                .min(d[i * width + j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[(i - 2) * width + j - 2] + 1);
            }
            d[i * width + j] = v;
            row_min = row_min.min(v);
        }
        if row_min > max {
            return max + 1;
        }
    }
    d[a.len() * width + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_snake_kebab_dots_and_camel_case() {
        assert_eq!(split_words("git_log"), ["git", "log"]);
        assert_eq!(split_words("get-sum"), ["get", "sum"]);
        assert_eq!(
            split_words("filesystem.read_text_file"),
            ["filesystem", "read", "text", "file"]
        );
        assert_eq!(split_words("getTinyImage"), ["get", "tiny", "image"]);
        assert_eq!(split_words("HTTPServer2go"), ["httpserver", "2", "go"]);
    }

    #[test]
    fn stems_common_endings() {
        for (w, s) in [
            ("commits", "commit"),
            ("committed", "commit"),
            ("committing", "commit"),
            ("entities", "entity"),
            ("files", "file"),
            ("searches", "search"),
            ("status", "status"),
            ("process", "process"),
            ("listing", "list"),
            ("branches", "branch"),
            ("time", "time"),
            ("zones", "zone"),
            ("use", "use"),
            ("note", "note"),
            ("state", "state"),
            ("stats", "stat"),
            ("strings", "string"),
            ("tree", "tree"),
            ("type", "type"),
            ("types", "type"),
        ] {
            assert_eq!(stem(w), s, "{w}");
        }
    }

    /// A word of a hundred thousand letters is stemmed like any other.
    #[test]
    fn a_long_word_is_stemmed() {
        let word = "y".repeat(100_000) + "ing";
        assert!(stem(&word).starts_with("yyyy"));
    }

    /// A word and its "-s", "-ed" and "-ing" forms share a stem, whether or
    /// not the word ends in a silent "e".
    #[test]
    fn a_word_meets_its_inflections() {
        for forms in [
            ["stage", "stages", "staged", "staging"],
            ["create", "creates", "created", "creating"],
            ["update", "updates", "updated", "updating"],
            ["close", "closes", "closed", "closing"],
            ["move", "moves", "moved", "moving"],
            ["name", "names", "named", "naming"],
            ["change", "changes", "changed", "changing"],
            ["commit", "commits", "committed", "committing"],
            ["list", "lists", "listed", "listing"],
            ["note", "notes", "noted", "noting"],
            ["agree", "agrees", "agreed", "agreeing"],
            ["file", "files", "filed", "filing"],
            ["delete", "deletes", "deleted", "deleting"],
            ["cache", "caches", "cached", "caching"],
            ["type", "types", "typed", "typing"],
        ] {
            let stems: Vec<String> = forms.iter().map(|w| stem(w)).collect();
            assert!(stems.iter().all(|s| *s == stems[0]), "{forms:?}: {stems:?}");
        }
    }

    #[test]
    fn edit_distance_with_cutoff() {
        assert_eq!(edit_distance("comit", "commit", 2), 1);
        assert_eq!(edit_distance("kitten", "sitting", 3), 3);
        assert_eq!(edit_distance("a", "abcdef", 2), 3);
        assert_eq!(edit_distance("lgo", "log", 2), 1);
    }
}
