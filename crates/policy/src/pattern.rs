//! Globs on `server.tool`.

use std::fmt;

/// A glob on `server.tool`: `*` matches any run of characters. A pattern
/// without a dot names a whole server (`github` is `github.*`).
///
/// Names compare as Python code names them, so that a rule written with
/// the name code uses covers the tool: case does not count, every character
/// other than a letter or a digit is `_` (`everything.get_sum` names the
/// upstream's `get-sum`, `odd.delete_repo` its `delete.repo` and
/// `odd.drop_table` its `drop table`), leading and trailing `_` do not count
/// (`odd.import_` names `import`), and compatibility forms are folded
/// (`ﬁle_delete` with a ligature is `file_delete`). A tool name matches
/// when either its letters as written or their ASCII spelling (what Python
/// code calls it: `_le_delete`) does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    server: String,
    tool: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("a pattern cannot be empty; use \"*\" for every tool or \"server.tool\"")]
    Empty,
    #[error(
        "'{0}' has an empty server or tool part; write \"server.tool\", \"server.*\" or \"server\""
    )]
    EmptyPart(String),
    #[error(
        "'{0}' has a control character or a space; write a space in a tool's name as _ (a rule's _ also matches -, . and spaces)"
    )]
    BadCharacter(String),
}

impl Pattern {
    pub fn parse(text: &str) -> Result<Pattern, PatternError> {
        if text.is_empty() {
            return Err(PatternError::Empty);
        }
        if text.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(PatternError::BadCharacter(text.to_string()));
        }
        let (server, tool) = match text.split_once('.') {
            Some((server, tool)) => (server, tool),
            None if text == "*" => ("*", "*"),
            None => (text, "*"),
        };
        if server.is_empty() || tool.is_empty() {
            return Err(PatternError::EmptyPart(text.to_string()));
        }
        Ok(Pattern {
            text: text.to_string(),
            server: fold(server),
            tool: fold(tool),
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn matches(&self, server: &str, tool: &str) -> bool {
        let spellings = |name: &str| {
            let unicode = fold(name);
            let ascii = fold_ascii(name);
            (unicode != ascii)
                .then_some(ascii)
                .into_iter()
                .chain([unicode])
        };
        spellings(server).any(|s| glob(&self.server, &s))
            && spellings(tool).any(|t| glob(&self.tool, &t))
    }

    /// Whether the pattern's server part is a name without `*`, and matches
    /// none of `servers`: a rule for a server that is not configured (a
    /// typo such as `memroy.delete_entities`) that applies to nothing.
    pub fn names_none_of<'a>(&self, mut servers: impl Iterator<Item = &'a str>) -> bool {
        !self.server.contains('*') && !servers.any(|s| glob(&self.server, &fold(s)))
    }

    /// How specific the pattern is: a pattern without `*` beats every glob;
    /// among globs, more literal characters win (`github.delete_*` beats
    /// `github.*`, which beats `*`).
    pub fn specificity(&self) -> (bool, usize) {
        let wild = self.server.contains('*') || self.tool.contains('*');
        let literal = self.server.chars().chain(self.tool.chars());
        (!wild, literal.filter(|c| *c != '*').count())
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A name as it compares (see [`Pattern`]): NFKC, lowercase, every
/// character but a letter, a digit or the glob's `*` as `_`, without `_` at
/// either end.
fn fold(text: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    let folded: String = text
        .nfkc()
        .flat_map(char::to_lowercase)
        .map(|c| {
            if c.is_alphanumeric() || c == '*' {
                c
            } else {
                '_'
            }
        })
        .collect();
    folded.trim_matches('_').to_string()
}

/// [`fold`] with every character outside ASCII as `_` too, as the
/// generated Python names spell it.
fn fold_ascii(text: &str) -> String {
    let ascii: String = text
        .chars()
        .map(|c| if c.is_ascii() { c } else { '_' })
        .collect();
    fold(&ascii)
}

/// `*`-only glob matching, linear in practice (greedy with backtracking to
/// the last star, as shells do).
fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Pattern {
        match Pattern::parse(text) {
            Ok(p) => p,
            Err(e) => panic!("{text}: {e}"),
        }
    }

    #[test]
    fn globs_match_server_and_tool() {
        assert!(p("github.delete_*").matches("github", "delete_repo"));
        assert!(!p("github.delete_*").matches("github", "create_repo"));
        assert!(!p("github.delete_*").matches("gitlab", "delete_repo"));
        assert!(p("github").matches("github", "anything"));
        assert!(p("*").matches("any", "thing"));
        assert!(p("*.send_*").matches("mail", "send_email"));
        assert!(p("everything.get_sum").matches("everything", "get-sum"));
        assert!(p("Memory.Create_Entities").matches("memory", "create_entities"));
        assert!(!p("a*b*c").matches("x", "y"));
        assert!(p("x.a*b*c").matches("x", "aXbYc"));
        assert!(!p("x.a*b*c").matches("x", "aXbYcd"));
    }

    #[test]
    fn rules_written_with_python_names_cover_the_tools() {
        // Each: the rule as written, the tool's name on its server.
        for (rule, tool) in [
            ("odd.delete_repo", "delete.repo"),
            ("odd.delete.repo", "delete.repo"),
            ("odd.drop_table", "drop table"),
            ("odd.import_", "import"),
            ("odd.import", "import"),
            ("odd._2fa", "2fa"),
            ("odd.file_delete", "\u{fb01}le_delete"),
            ("odd._le_delete", "\u{fb01}le_delete"),
            ("odd.send_*", "Send.Mail"),
            ("odd.café", "CAFÉ"),
        ] {
            assert!(p(rule).matches("odd", tool), "{rule} must cover {tool:?}");
        }
        assert!(!p("odd.delete_repo").matches("odd", "delete_repos"));
        assert!(!p("odd.drop_table").matches("odd", "droptable"));
        assert!(!p("odd.delete_*").matches("odd", "undelete.repo"));
    }

    #[test]
    fn bad_patterns_are_refused() {
        assert_eq!(Pattern::parse(""), Err(PatternError::Empty));
        assert!(matches!(
            Pattern::parse("github."),
            Err(PatternError::EmptyPart(_))
        ));
        assert!(matches!(
            Pattern::parse(".x"),
            Err(PatternError::EmptyPart(_))
        ));
        assert!(matches!(
            Pattern::parse("a b"),
            Err(PatternError::BadCharacter(_))
        ));
    }

    #[test]
    fn a_pattern_for_a_server_not_configured_is_noticed() {
        let servers = ["memory", "git-hub"];
        assert!(p("memroy.delete_entities").names_none_of(servers.into_iter()));
        assert!(!p("memory.delete_entities").names_none_of(servers.into_iter()));
        assert!(!p("Git_Hub").names_none_of(servers.into_iter()));
        assert!(!p("*.delete_*").names_none_of(servers.into_iter()));
        assert!(!p("mem*").names_none_of(servers.into_iter()));
    }

    #[test]
    fn exact_names_are_more_specific_than_globs() {
        let exact = p("github.delete_repo").specificity();
        let glob = p("github.delete_*").specificity();
        let server = p("github").specificity();
        let all = p("*").specificity();
        assert!(exact > glob && glob > server && server > all);
    }
}
