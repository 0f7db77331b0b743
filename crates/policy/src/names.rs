//! How a tool's name is spelled where it is compared: as Python code calls
//! it (the generated wrappers' names) and as it reads folded.

const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield", "match", "case", "type",
];

/// A Python identifier for `name`: `get-sum` → `get_sum`, `2fa` → `_2fa`,
/// `class` → `class_`. What the generated wrappers call a tool, a server
/// or a parameter.
pub fn python_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    if KEYWORDS.contains(&out.as_str()) {
        out.push('_');
    }
    out
}

/// Whether `word` is a Python keyword.
pub fn is_keyword(word: &str) -> bool {
    KEYWORDS.contains(&word)
}

/// A name as it compares: NFKC, lowercase, every character but a letter,
/// a digit or a glob's `*` as `_`.
pub(crate) fn fold(text: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    text.nfkc()
        .flat_map(char::to_lowercase)
        .map(|c| {
            if c.is_alphanumeric() || c == '*' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The spellings a name is compared in: folded as written, and folded as
/// Python code calls it (the same string for most names).
pub(crate) fn spellings(name: &str) -> [String; 2] {
    [fold(name), fold(&python_name(name))]
}

/// `server.tool` in each of its spellings, folded once for every pattern it
/// is compared with (a call is checked against all the rules and budgets).
pub(crate) struct Spelled([(String, String); 2]);

impl Spelled {
    pub(crate) fn new(server: &str, tool: &str) -> Self {
        let [server_written, server_python] = spellings(server);
        let [tool_written, tool_python] = spellings(tool);
        Spelled([(server_written, tool_written), (server_python, tool_python)])
    }

    /// Each spelling, as (server, tool).
    pub(crate) fn each(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(s, t)| (s.as_str(), t.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_names_are_identifiers() {
        assert_eq!(python_name("get-sum"), "get_sum");
        assert_eq!(python_name("2fa.check"), "_2fa_check");
        assert_eq!(python_name("class"), "class_");
        assert_eq!(python_name(""), "_");
    }

    #[test]
    fn spellings_fold_case_punctuation_and_compatibility_forms() {
        assert_eq!(spellings("Delete.Repo"), ["delete_repo", "delete_repo"]);
        assert_eq!(spellings("import"), ["import", "import_"]);
        assert_eq!(spellings("\u{fb01}le"), ["file", "_le"]);
    }
}
