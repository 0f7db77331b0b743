//! `${VAR}` expansion in config strings.
//!
//! Supported forms: `${VAR}` (the variable must be set) and `${VAR:-default}`
//! (the default when unset or empty), as Claude Code accepts them. A `$` not
//! followed by `{` is left alone, so `$HOME` or a price like `$5` pass through.

/// Why a string could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpandError {
    /// `${NAME}` with `NAME` unset and no default.
    Unset(String),
    /// `${` without its closing `}`.
    Unterminated,
    /// `${}` or a name with characters other than letters, digits and `_`.
    BadName(String),
    /// An editor's own variable (`${input:x}`, `${workspaceFolder}`).
    EditorOnly(String),
}

impl std::fmt::Display for ExpandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExpandError::Unset(name) => write!(
                f,
                "${{{name}}} is not set in the environment; set it, or write ${{{name}:-default}}"
            ),
            ExpandError::Unterminated => f.write_str("\"${\" has no closing \"}\""),
            ExpandError::EditorOnly(name) => write!(
                f,
                "${{{name}}} is a variable only an editor can fill in; use an environment \
                 variable (${{NAME}}) or the value itself"
            ),
            ExpandError::BadName(name) => write!(
                f,
                "\"${{{name}}}\" is not a variable name (letters, digits and _ only)"
            ),
        }
    }
}

/// The variable a serving server fills in when it starts a stdio server's
/// process: that tenant's own state directory for the server
/// (`<tenant>/upstream/<server>`). Kept as written here, filled in later.
pub const TENANT_DIR_VAR: &str = "CEM_TENANT_DIR";

/// Expands every `${...}` in `input` using `lookup`.
pub fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, ExpandError> {
    expand_noting(input, lookup, &mut |_, _| {})
}

/// [`expand`], telling `noted` each variable's name and the value it put
/// in (defaults too): what came from the environment is kept out of what
/// the server says (see [`crate::Redactor`]).
pub fn expand_noting(
    input: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    noted: &mut dyn FnMut(&str, &str),
) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or(ExpandError::Unterminated)?;
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inner, None),
        };
        // Cursor and VS Code spell environment variables ${env:NAME}.
        let name = name.strip_prefix("env:").unwrap_or(name);
        if name.starts_with("input:") || name == "workspaceFolder" || name == "userHome" {
            return Err(ExpandError::EditorOnly(inner.to_string()));
        }
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(ExpandError::BadName(inner.to_string()));
        }
        if name == TENANT_DIR_VAR {
            // One spelling, the one the server fills in (a default or the
            // editors' env: prefix would reach the process as written).
            out.push_str(concat!("${", "CEM_TENANT_DIR", "}"));
            rest = &after[end + 1..];
            continue;
        }
        match (
            lookup(name).filter(|v| !v.is_empty() || default.is_none()),
            default,
        ) {
            (Some(value), _) => {
                noted(name, &value);
                out.push_str(&value)
            }
            (None, Some(default)) => {
                noted(name, default);
                out.push_str(default)
            }
            (None, None) => return Err(ExpandError::Unset(name.to_string())),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("abc".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn the_tenant_directory_is_left_for_the_server_to_fill_in() {
        assert_eq!(
            expand("${CEM_TENANT_DIR}/memory-${TOKEN}.jsonl", &env).as_deref(),
            Ok("${CEM_TENANT_DIR}/memory-abc.jsonl")
        );
        for spelled in ["${env:CEM_TENANT_DIR}/m", "${CEM_TENANT_DIR:-/tmp}/m"] {
            assert_eq!(expand(spelled, &env).as_deref(), Ok("${CEM_TENANT_DIR}/m"));
        }
    }

    #[test]
    fn expands_set_variables_and_defaults() {
        assert_eq!(expand("Bearer ${TOKEN}", &env).as_deref(), Ok("Bearer abc"));
        assert_eq!(expand("${NOPE:-x}/${TOKEN}", &env).as_deref(), Ok("x/abc"));
        assert_eq!(
            expand("${EMPTY:-fallback}", &env).as_deref(),
            Ok("fallback")
        );
        assert_eq!(expand("${EMPTY}", &env).as_deref(), Ok(""));
    }

    #[test]
    fn editor_spellings() {
        assert_eq!(expand("${env:TOKEN}", &env).as_deref(), Ok("abc"));
        assert!(matches!(
            expand("${input:key}", &env),
            Err(ExpandError::EditorOnly(_))
        ));
        assert!(matches!(
            expand("${workspaceFolder}/x", &env),
            Err(ExpandError::EditorOnly(_))
        ));
    }

    #[test]
    fn leaves_plain_dollars_alone() {
        assert_eq!(
            expand("$HOME costs $5", &env).as_deref(),
            Ok("$HOME costs $5")
        );
    }

    #[test]
    fn reports_unset_unterminated_and_bad_names() {
        assert_eq!(
            expand("${NOPE}", &env),
            Err(ExpandError::Unset("NOPE".into()))
        );
        assert_eq!(expand("x ${TOKEN", &env), Err(ExpandError::Unterminated));
        assert_eq!(
            expand("${A B}", &env),
            Err(ExpandError::BadName("A B".into()))
        );
        assert_eq!(
            expand("${}", &env),
            Err(ExpandError::BadName(String::new()))
        );
    }
}
