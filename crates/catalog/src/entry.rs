//! One discoverable thing.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

/// Where an entry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// A tool of a configured upstream MCP server.
    #[default]
    Upstream,
    /// A tool of the static registry (`tools_registry/`).
    Registry,
    /// A saved skill.
    Skill,
}

/// What a tool says of its effects (its MCP annotations), as far as
/// search uses it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Effects {
    pub read_only: Option<bool>,
    pub destructive: Option<bool>,
}

/// A tool (or skill) as the catalog knows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Entry {
    pub kind: EntryKind,
    /// The upstream server, registry category, or "skills".
    pub category: String,
    /// The tool's own name (`git_log`, `get-sum`).
    pub name: String,
    pub description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// More searchable words (a registry tool's functions and use cases).
    #[serde(skip)]
    pub keywords: Vec<String>,
    /// The MCP server a registry entry says it belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp_server: Option<String>,
    /// The tool's annotations, searchable ("read-only", "destructive").
    #[serde(skip)]
    pub effects: Effects,
    /// What the tool's server says of itself (the `instructions` of its
    /// initialize result), shared by all its tools.
    #[serde(skip)]
    pub server_instructions: Option<Arc<str>>,
}

impl Entry {
    /// An upstream tool from its `tools/list` JSON (`name`, `description`,
    /// `inputSchema`, `outputSchema`, `title` and `annotations`). `None`
    /// without a name.
    pub fn upstream(server: &str, tool: &Value, instructions: Option<Arc<str>>) -> Option<Entry> {
        let name = tool.get("name")?.as_str()?;
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
        let annotations = tool.get("annotations");
        let hint = |key: &str| {
            annotations
                .and_then(|a| a.get(key))
                .and_then(Value::as_bool)
        };
        // A title may sit at the top (the spec) or inside the annotations
        // (older servers, @playwright/mcp).
        let titles = [
            text(tool.get("title")),
            text(annotations.and_then(|a| a.get("title"))),
        ];
        let mut keywords: Vec<String> = titles.into_iter().flatten().collect();
        keywords.dedup();
        Some(Entry {
            kind: EntryKind::Upstream,
            category: server.to_string(),
            name: name.to_string(),
            description: cut(text(tool.get("description")).unwrap_or_default()),
            input_schema: tool.get("inputSchema").filter(|s| s.is_object()).cloned(),
            output_schema: tool.get("outputSchema").filter(|s| s.is_object()).cloned(),
            keywords,
            mcp_server: None,
            effects: Effects {
                read_only: hint("readOnlyHint"),
                destructive: hint("destructiveHint"),
            },
            server_instructions: instructions,
        })
    }

    /// `category.name`, the form agents and `call_tool` use.
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.category, self.name)
    }

    /// The first sentence (or line) of the description, for summaries.
    pub fn summary(&self) -> String {
        let text = self.description.trim();
        let line = text.lines().next().unwrap_or("");
        let end = line
            .char_indices()
            .find(|(i, c)| *c == '.' && line[i + 1..].starts_with(' '))
            .map(|(i, _)| i + 1)
            .unwrap_or(line.len());
        let sentence = &line[..end];
        if sentence.chars().count() > 160 {
            let cut: String = sentence.chars().take(157).collect();
            format!("{cut}...")
        } else {
            sentence.to_string()
        }
    }
}

/// The most of a tool's description the catalog keeps: ample for any real
/// one (the longest of the token benchmark's 155 tools is under 4 KB), and
/// a server's megabyte description cannot fill every search and definition.
const MAX_DESCRIPTION: usize = 16 * 1024;

fn cut(description: String) -> String {
    if description.len() <= MAX_DESCRIPTION {
        return description;
    }
    let mut end = MAX_DESCRIPTION;
    while !description.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}… (cut here: the server's description is {} bytes)",
        &description[..end],
        description.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_huge_description_is_cut_and_says_so() {
        let long = "é".repeat(20_000);
        let tool = json!({"name": "t", "description": long});
        let entry = Entry::upstream("s", &tool, None).unwrap_or_default();
        assert!(entry.description.len() < MAX_DESCRIPTION + 100);
        assert!(
            entry
                .description
                .ends_with("(cut here: the server's description is 40000 bytes)")
        );
        let short = json!({"name": "t", "description": "Adds two numbers."});
        let entry = Entry::upstream("s", &short, None).unwrap_or_default();
        assert_eq!(entry.description, "Adds two numbers.");
    }
}
