//! Skill names: one name, two spellings. Python imports it as
//! `skills.top_authors`; the Agent Skills format (Claude Code's SKILL.md)
//! wants `top-authors`. Both spellings name the same skill.

use crate::SkillError;

/// The longest name, as the Agent Skills format allows.
pub const MAX_NAME: usize = 64;

/// Python's keywords: `from skills.class import f` cannot be written.
const KEYWORDS: &[&str] = &[
    "false", "none", "true", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// A checked skill name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SkillName(String);

impl SkillName {
    /// Checks `raw`: lowercase letters and digits in words joined by single
    /// `_` or `-`, starting with a letter, at most 64 characters, not a
    /// Python keyword. The rules keep every name a Python module name, a
    /// valid Agent Skills name and a safe directory name at once.
    pub fn parse(raw: &str) -> Result<Self, SkillError> {
        let bad = |reason: &str| SkillError::BadName {
            name: raw.chars().take(80).collect(),
            reason: reason.to_string(),
        };
        if raw.is_empty() {
            return Err(bad("it is empty"));
        }
        if raw.len() > MAX_NAME {
            return Err(bad(&format!("it is longer than {MAX_NAME} characters")));
        }
        if raw.contains(['/', '\\', '.']) {
            return Err(bad("it contains a path separator or a dot"));
        }
        if raw.chars().any(char::is_whitespace) {
            return Err(bad("it contains a space"));
        }
        if raw.chars().any(|c| c.is_ascii_uppercase()) {
            return Err(bad("it contains an uppercase letter; use lowercase"));
        }
        if !raw.starts_with(|c: char| c.is_ascii_lowercase()) {
            return Err(bad("it must start with a letter"));
        }
        if let Some(c) = raw
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_' || *c == '-'))
        {
            return Err(bad(&format!("{c:?} is not allowed")));
        }
        let module = raw.replace('-', "_");
        if module.ends_with('_') || module.contains("__") {
            return Err(bad(
                "separators (_ or -) must sit between letters or digits, one at a time",
            ));
        }
        if KEYWORDS.contains(&module.as_str()) {
            return Err(bad("it is a Python keyword"));
        }
        Ok(SkillName(module))
    }

    /// The Python spelling, `top_authors` (also the directory name).
    pub fn module(&self) -> &str {
        &self.0
    }

    /// The Agent Skills spelling, `top-authors`.
    pub fn slug(&self) -> String {
        self.0.replace('_', "-")
    }
}

impl std::fmt::Display for SkillName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_spellings_name_one_skill() -> Result<(), SkillError> {
        let a = SkillName::parse("top_authors")?;
        let b = SkillName::parse("top-authors")?;
        assert_eq!(a, b);
        assert_eq!(a.module(), "top_authors");
        assert_eq!(a.slug(), "top-authors");
        assert_eq!(SkillName::parse("csv2json")?.module(), "csv2json");
        Ok(())
    }

    #[test]
    fn refuses_what_cannot_be_a_module_or_a_directory() {
        let long = "a".repeat(65);
        for (raw, why) in [
            ("", "empty"),
            ("../etc", "path separator"),
            ("a/b", "path separator"),
            ("a.b", "dot"),
            ("my skill", "space"),
            ("Top", "uppercase"),
            ("1st", "start with a letter"),
            ("_private", "start with a letter"),
            ("a__b", "one at a time"),
            ("a-_b", "one at a time"),
            ("trailing_", "one at a time"),
            ("trailing-", "one at a time"),
            ("class", "keyword"),
            ("naïve", "not allowed"),
            ("a\0b", "not allowed"),
            (long.as_str(), "longer than 64"),
        ] {
            match SkillName::parse(raw) {
                Err(e) => assert!(e.to_string().contains(why), "{raw:?}: {e}"),
                Ok(n) => panic!("{raw:?} was accepted as {n}"),
            }
        }
    }
}
