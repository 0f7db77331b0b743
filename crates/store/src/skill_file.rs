//! SKILL.md: YAML front matter in the Agent Skills format (what Claude Code
//! reads: `name`, `description`) with our fields under `metadata`, which
//! that format reserves for tools' own keys (string values), then a short
//! Markdown body that says how to use the skill.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{SkillError, SkillName};

/// What a skill's SKILL.md records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkillMeta {
    /// The Python spelling (`top_authors`).
    pub name: String,
    pub description: String,
    /// 1 for the first save, one more for each save that changed something.
    pub version: u64,
    /// RFC 3339, UTC.
    pub created: String,
    pub updated: String,
    /// `sha256:<hex>` of the code file.
    pub code_hash: String,
    /// The upstream tools the code calls, as `server.tool`.
    pub tools: Vec<String>,
    /// Its public top-level functions with their parameters, `f(a, b=1)`.
    pub functions: Vec<String>,
}

impl SkillMeta {
    /// How code imports the skill: its first public function, else the module.
    pub fn import_line(&self) -> String {
        match self.functions.first() {
            Some(f) => {
                let function = f
                    .trim_start_matches("async ")
                    .split('(')
                    .next()
                    .unwrap_or(f);
                format!("from skills.{} import {function}", self.name)
            }
            None => format!("import skills.{}", self.name),
        }
    }
}

/// The front matter as read: any SKILL.md (ours, or one written by hand
/// for Claude Code) has at least a name and a description.
#[derive(Deserialize)]
struct FrontIn {
    name: Option<String>,
    description: Option<String>,
    #[serde(default)]
    metadata: BTreeMap<String, yaml_serde::Value>,
}

/// A SKILL.md read back: the metadata we could find and the body.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub name: SkillName,
    pub description: String,
    /// Our fields, when the file is ours.
    pub version: Option<u64>,
    pub created: Option<String>,
    pub updated: Option<String>,
    pub code_hash: Option<String>,
    pub tools: Vec<String>,
    pub functions: Vec<String>,
}

/// The whole SKILL.md for `meta`.
pub fn render(meta: &SkillMeta, code_file: &str) -> Result<String, SkillError> {
    let name = SkillName::parse(&meta.name)?;
    // Every value is written as a double-quoted scalar, so no reader takes
    // a date, a version or "no" for anything but a string, as the format's
    // metadata wants.
    let metadata = [
        ("module", format!("skills.{}", name.module())),
        ("version", meta.version.to_string()),
        ("created", meta.created.clone()),
        ("updated", meta.updated.clone()),
        ("code_hash", meta.code_hash.clone()),
        ("tools", meta.tools.join(" ")),
        ("functions", meta.functions.join("\n")),
    ];
    let mut yaml = format!(
        "name: {}\ndescription: {}\nmetadata:\n",
        yaml_quote(&name.slug()),
        yaml_quote(&meta.description)
    );
    for (key, value) in metadata {
        yaml.push_str(&format!("  {key}: {}\n", yaml_quote(&value)));
    }
    let module = name.module();
    let mut body = format!("---\n{yaml}---\n\n# {module}\n\n{}\n\n", meta.description);
    body.push_str(&format!(
        "The code is in [{code_file}]({code_file}). In code-execution-mcp's sandbox:\n\n```python\n"
    ));
    body.push_str(&meta.import_line());
    body.push('\n');
    body.push_str(&format!(
        "# or, to define everything in the current scope:\nexec(load_skill(\"{module}\"))\n```\n"
    ));
    if !meta.tools.is_empty() {
        body.push_str(&format!("\nTools it calls: {}.\n", meta.tools.join(", ")));
    }
    Ok(body)
}

/// `text` as a YAML double-quoted scalar. Everything outside printable
/// ASCII and ordinary Unicode letters is escaped (`\uXXXX`): YAML refuses
/// some control characters raw and folds others (NEL, U+2028) into spaces,
/// which would change the value on the way back.
pub fn yaml_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control()
                || matches!(
                    c,
                    '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
                ) =>
            {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Reads a SKILL.md: front matter between `---` lines, then the body.
pub fn parse(text: &str, origin: &str) -> Result<Parsed, SkillError> {
    let bad = |reason: String| SkillError::Format {
        name: origin.to_string(),
        reason,
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or_else(|| bad("it does not start with a '---' line of YAML front matter".into()))?;
    let end = rest
        .find("\n---")
        .ok_or_else(|| bad("the front matter has no closing '---' line".into()))?;
    let front: FrontIn = yaml_serde::from_str(&rest[..end])
        .map_err(|e| bad(format!("the front matter is not valid YAML: {e}")))?;
    let raw_name = front
        .name
        .ok_or_else(|| bad("the front matter has no 'name'".into()))?;
    let name = SkillName::parse(raw_name.trim())?;
    let description = front
        .description
        .map(|d| d.trim().to_string())
        .filter(|d| !d.is_empty())
        .ok_or_else(|| bad("the front matter has no 'description'".into()))?;
    let text_of = |key: &str| -> Option<String> {
        match front.metadata.get(key)? {
            yaml_serde::Value::String(s) => Some(s.clone()),
            yaml_serde::Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    };
    let split = |key: &str, sep: char| -> Vec<String> {
        text_of(key)
            .map(|s| {
                s.split(sep)
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok(Parsed {
        name,
        description,
        version: text_of("version").and_then(|v| v.parse().ok()),
        created: text_of("created"),
        updated: text_of("updated"),
        code_hash: text_of("code_hash"),
        tools: split("tools", ' '),
        functions: split("functions", '\n'),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> SkillMeta {
        SkillMeta {
            name: "top_authors".into(),
            description:
                "Top authors: a git log summarised.\nSecond line: with \"quotes\" and: colons"
                    .into(),
            version: 3,
            created: "2026-11-22T07:00:00Z".into(),
            updated: "2026-11-22T08:00:00Z".into(),
            code_hash: "sha256:abc".into(),
            tools: vec!["git.git_log".into(), "memory.read_graph".into()],
            functions: vec![
                "top_authors(repo_path, limit=10)".into(),
                "other(sep=';')".into(),
            ],
        }
    }

    #[test]
    fn round_trips_through_yaml() -> Result<(), SkillError> {
        let text = render(&meta(), "skill.py")?;
        assert!(text.starts_with("---\nname: \"top-authors\"\n"), "{text}");
        assert!(text.contains("from skills.top_authors import top_authors"));
        let parsed = parse(&text, "test")?;
        assert_eq!(parsed.name.module(), "top_authors");
        assert_eq!(parsed.description, meta().description);
        assert_eq!(parsed.version, Some(3));
        assert_eq!(parsed.tools, meta().tools);
        assert_eq!(parsed.functions, meta().functions);
        assert_eq!(parsed.code_hash.as_deref(), Some("sha256:abc"));
        Ok(())
    }

    #[test]
    fn reads_a_hand_written_claude_code_skill() -> Result<(), SkillError> {
        let text = "---\nname: pdf-tools\ndescription: >\n  Extract text from PDFs.\n  Use when asked about PDFs.\nallowed-tools: Read\n---\n# PDF\n";
        let parsed = parse(text, "pdf-tools")?;
        assert_eq!(parsed.name.module(), "pdf_tools");
        assert_eq!(
            parsed.description,
            "Extract text from PDFs. Use when asked about PDFs."
        );
        assert_eq!(parsed.version, None);
        Ok(())
    }

    #[test]
    fn says_what_is_wrong_with_a_broken_file() {
        for (text, why) in [
            ("# no front matter", "does not start"),
            ("---\nname: x\n", "no closing"),
            ("---\nname: [x\n---\n", "not valid YAML"),
            ("---\ndescription: d\n---\n", "no 'name'"),
            ("---\nname: x\n---\n", "no 'description'"),
            ("---\nname: ../x\ndescription: d\n---\n", "path separator"),
        ] {
            match parse(text, "t") {
                Err(e) => assert!(e.to_string().contains(why), "{text:?}: {e}"),
                Ok(p) => panic!("{text:?} parsed as {}", p.name),
            }
        }
    }
}
