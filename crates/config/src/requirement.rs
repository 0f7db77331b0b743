//! Python package requirements as the config and agents may write them: a
//! strict subset of PEP 508 (a name, extras, version specifiers).
//!
//! Strict on purpose: the text goes to an installer on the host. URLs,
//! paths, options (`--index-url ...`) and environment markers are refused,
//! so a requirement can only ever name a package of the configured index.

use std::fmt;

/// One validated requirement, e.g. `pandas>=2` or `requests[socks]==2.32.3`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Requirement {
    /// The project name normalised as PEP 503 says (`Foo_Bar` -> `foo-bar`).
    name: String,
    /// The requirement as the installer gets it (name normalised, spaces
    /// removed).
    text: String,
}

/// Characters no requirement of ours contains: URL, path, option, marker
/// and shell syntax.
const FORBIDDEN: &str = "@/\\;:'\"$`|&?\t\n\r#%";
/// Version comparison operators of PEP 440, longest first for matching.
const OPERATORS: &[&str] = &["===", "==", "!=", "<=", ">=", "~=", "<", ">"];

impl Requirement {
    /// Parses `text`; the error says what is wrong in words a user can act on.
    pub fn parse(text: &str) -> Result<Requirement, String> {
        if let Some(c) = text.chars().find(|c| FORBIDDEN.contains(*c)) {
            return Err(format!(
                "\"{}\" is not a package requirement ('{}' is not allowed): write a name with an \
                 optional version, such as \"pandas>=2\"; URLs, paths, options and markers are refused",
                text.escape_debug(),
                c.escape_debug()
            ));
        }
        // Spaces only beside operators, commas and brackets: "pkg>=1 2"
        // must not quietly become "pkg>=12".
        let chars: Vec<char> = text.trim().chars().collect();
        for (i, c) in chars.iter().enumerate() {
            if *c != ' ' {
                continue;
            }
            let before = chars[..i].iter().rev().find(|c| **c != ' ');
            let after = chars[i + 1..].iter().find(|c| **c != ' ');
            let beside = |c: Option<&char>| c.is_some_and(|c| "<>=!~,[]".contains(*c));
            if !beside(before) && !beside(after) {
                return Err(format!(
                    "\"{text}\" has a space inside a name or version; one requirement is one package"
                ));
            }
        }
        let compact: String = chars.into_iter().filter(|c| *c != ' ').collect();
        if compact.is_empty() {
            return Err("a requirement is empty; write a package name such as \"pandas\"".into());
        }
        if compact.len() > 200 {
            return Err(format!(
                "\"{}...\" is too long for a requirement",
                cut(&compact, 40)
            ));
        }
        let name_end = compact
            .find(|c: char| !(c.is_ascii_alphanumeric() || "._-".contains(c)))
            .unwrap_or(compact.len());
        let raw_name = &compact[..name_end];
        let valid_name = !raw_name.is_empty()
            && raw_name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && raw_name.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !valid_name {
            return Err(format!(
                "\"{text}\" does not start with a package name (letters, digits, '.', '_', '-'; \
                 starting and ending with a letter or digit)"
            ));
        }
        let mut rest = &compact[name_end..];
        if let Some(extras) = rest.strip_prefix('[') {
            let Some(close) = extras.find(']') else {
                return Err(format!("\"{text}\": the extras' '[' is never closed"));
            };
            let ok = extras[..close].split(',').all(|e| {
                !e.is_empty()
                    && e.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            });
            if !ok {
                return Err(format!(
                    "\"{text}\": extras are names separated by commas, such as [excel,parquet]"
                ));
            }
            rest = &extras[close + 1..];
        }
        if !rest.is_empty() {
            for clause in rest.split(',') {
                let Some(op) = OPERATORS.iter().find(|op| clause.starts_with(**op)) else {
                    return Err(format!(
                        "\"{text}\": \"{clause}\" is not a version clause; use one of \
                         == != <= >= ~= < > followed by a version, such as \"pandas>=2,<3\""
                    ));
                };
                let version = &clause[op.len()..];
                let ok = !version.is_empty()
                    && version
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || ".*+!_-".contains(c));
                if !ok {
                    return Err(format!(
                        "\"{text}\": \"{version}\" after {op} is not a version"
                    ));
                }
            }
        }
        // The name normalised, so "Pandas" and "pandas" are one requirement
        // (one environment digest, one layer).
        let name = normalize(raw_name);
        let text = format!("{name}{}", &compact[name_end..]);
        Ok(Requirement { name, text })
    }

    /// The normalised project name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The requirement as given to the installer: the normalised name,
    /// then extras and versions as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl serde::Serialize for Requirement {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// PEP 503 normalisation: lower case, runs of `-`, `_` and `.` become `-`.
pub fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut dash = false;
    for c in name.chars() {
        if "-_.".contains(c) {
            dash = true;
            continue;
        }
        if dash && !out.is_empty() {
            out.push('-');
        }
        dash = false;
        out.push(c.to_ascii_lowercase());
    }
    out
}

fn cut(text: &str, chars: usize) -> String {
    text.chars().take(chars).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_names_extras_and_versions() {
        for (text, name, canonical) in [
            ("pandas", "pandas", "pandas"),
            ("pandas >= 2", "pandas", "pandas>=2"),
            (
                "Foo_Bar.baz==1.0.post1",
                "foo-bar-baz",
                "foo-bar-baz==1.0.post1",
            ),
            (
                "requests[socks,security]~=2.32",
                "requests",
                "requests[socks,security]~=2.32",
            ),
            ("numpy>=1.26,<3", "numpy", "numpy>=1.26,<3"),
            ("pyarrow==17.*", "pyarrow", "pyarrow==17.*"),
        ] {
            let r = Requirement::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!((r.name(), r.as_str()), (name, canonical), "{text}");
        }
    }

    #[test]
    fn refuses_anything_that_is_not_a_plain_requirement() {
        for text in [
            "",
            "--index-url=http://evil",
            "-e .",
            "pkg @ https://example.invalid/pkg.whl",
            "./local/dir",
            "/abs/path.whl",
            "pkg; python_version>'3'",
            "pkg>=1;rm -rf /",
            "pkg$(id)",
            "_private",
            "pkg-",
            "pkg[",
            "pkg[a b]",
            "pkg=1",
            "pkg>=",
            "pkg>=1 2",
            "pkg\n--extra-index-url x",
        ] {
            assert!(Requirement::parse(text).is_err(), "accepted {text:?}");
        }
    }

    #[test]
    fn normalizes_like_pep_503() {
        assert_eq!(normalize("Django_REST.framework"), "django-rest-framework");
        assert_eq!(normalize("a--b__c"), "a-b-c");
    }
}
