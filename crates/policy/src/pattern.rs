//! Globs on `server.tool`.

use std::fmt;

use crate::names::{Spelled, fold, spellings};

/// A glob on `server.tool`: `*` matches any run of characters. A pattern
/// without a dot names a whole server (`github` is `github.*`).
///
/// Names compare as written and as Python code names them (see
/// [`crate::names`]): case does not count, every character other than a
/// letter or a digit is `_` (`everything.get_sum` names the upstream's
/// `get-sum`, `odd.delete_repo` its `delete.repo`, `odd.drop_table` its
/// `drop table`), compatibility forms are folded (`ﬁle_delete` with a
/// ligature is `file_delete`), and the generated wrapper's name counts too
/// (`odd.import_` names `import`, `odd._2fa` names `2fa`). The policy
/// decides each spelling apart and keeps the stricter decision, so a
/// spelling can only tighten what a rule says.
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

    /// Whether the pattern matches `server.tool` in any of its spellings.
    pub fn matches(&self, server: &str, tool: &str) -> bool {
        self.matches_spelled(&Spelled::new(server, tool))
    }

    /// [`Pattern::matches`] for a name already spelled.
    pub(crate) fn matches_spelled(&self, name: &Spelled) -> bool {
        name.each()
            .any(|(server, tool)| self.matches_spelling(server, tool))
    }

    /// Whether the pattern matches one spelling (already folded).
    pub(crate) fn matches_spelling(&self, server: &str, tool: &str) -> bool {
        glob(&self.server, server) && glob(&self.tool, tool)
    }

    /// Whether the pattern's server part is a name without `*`, and matches
    /// none of `servers`: a rule for a server that is not configured (a
    /// typo such as `memroy.delete_entities`) that applies to nothing.
    pub fn names_none_of<'a>(&self, mut servers: impl Iterator<Item = &'a str>) -> bool {
        !self.server.contains('*')
            && !servers.any(|s| spellings(s).iter().any(|s| glob(&self.server, s)))
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
            ("odd.delete_*", "delete_"),
            ("odd.*_admin", "_admin"),
        ] {
            assert!(p(rule).matches("odd", tool), "{rule} must cover {tool:?}");
        }
        for (rule, tool) in [
            ("odd.delete_repo", "delete_repos"),
            ("odd.drop_table", "droptable"),
            ("odd.delete_*", "undelete.repo"),
            ("odd.list", "list_"),
            ("odd.list", "_list"),
            ("odd.caf", "café"),
            ("odd.repo", "\u{5220}\u{9664}_repo"),
        ] {
            assert!(
                !p(rule).matches("odd", tool),
                "{rule} must not cover {tool:?}"
            );
        }
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
