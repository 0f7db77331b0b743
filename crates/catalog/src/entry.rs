//! One discoverable thing.

use serde::Serialize;
use serde_json::Value;

/// Where an entry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// A tool of a configured upstream MCP server.
    Upstream,
    /// A tool of the static registry (`tools_registry/`).
    Registry,
    /// A saved skill.
    Skill,
}

/// A tool (or skill) as the catalog knows it.
#[derive(Debug, Clone, Serialize)]
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
}

impl Entry {
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
