//! Trust on first use: the tools of a server as first seen, and what changed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{definition, digest};

/// Where a tool stands against its server's pins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PinState {
    /// Pinned, and the same as when it was pinned (or just pinned now).
    #[default]
    Trusted,
    /// Pinned, but its description, schema or annotations differ now.
    Changed,
    /// Not among the pins: it appeared after its server was trusted.
    New,
}

/// One pinned tool: its digest and the definition it was taken from (kept
/// so a review can show what changed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PinnedTool {
    pub digest: String,
    pub definition: Value,
}

impl PinnedTool {
    /// Pins `tool` (an MCP `Tool` as JSON) as it is now.
    pub fn of(tool: &Value) -> Self {
        PinnedTool {
            digest: digest(tool),
            definition: definition(tool),
        }
    }
}

/// A server's pinned tools by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Pins {
    pub tools: BTreeMap<String, PinnedTool>,
}

/// A difference between a server's pins and its tools now.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum ToolChange {
    /// The tool is new since the pins were taken.
    Added { tool: String, now: Value },
    /// A pinned tool is gone.
    Removed { tool: String, pinned: Value },
    /// The tool differs in these parts (`description`, `inputSchema`, `annotations`).
    Changed {
        tool: String,
        parts: Vec<String>,
        pinned: Value,
        now: Value,
    },
}

impl ToolChange {
    pub fn tool(&self) -> &str {
        match self {
            ToolChange::Added { tool, .. }
            | ToolChange::Removed { tool, .. }
            | ToolChange::Changed { tool, .. } => tool,
        }
    }
}

impl Pins {
    /// Pins every tool of `tools` (MCP `Tool`s as JSON).
    pub fn of(tools: &[Value]) -> Self {
        Pins {
            tools: tools
                .iter()
                .filter_map(|t| Some((t.get("name")?.as_str()?.to_string(), PinnedTool::of(t))))
                .collect(),
        }
    }

    /// Where `tool` (as JSON) stands against these pins.
    pub fn state(&self, tool: &Value) -> PinState {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
        match self.tools.get(name) {
            None => PinState::New,
            Some(pinned) if pinned.digest == digest(tool) => PinState::Trusted,
            Some(_) => PinState::Changed,
        }
    }

    /// Every difference between these pins and `tools`, by tool name.
    pub fn changes(&self, tools: &[Value]) -> Vec<ToolChange> {
        let mut out = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for tool in tools {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            seen.insert(name.to_string());
            let now = definition(tool);
            match self.tools.get(name) {
                None => out.push(ToolChange::Added {
                    tool: name.to_string(),
                    now,
                }),
                Some(pinned) if pinned.digest != digest(tool) => {
                    let parts = ["description", "inputSchema", "annotations"]
                        .into_iter()
                        .filter(|k| {
                            crate::canonical(&pinned.definition[*k]) != crate::canonical(&now[*k])
                        })
                        .map(str::to_string)
                        .collect();
                    out.push(ToolChange::Changed {
                        tool: name.to_string(),
                        parts,
                        pinned: pinned.definition.clone(),
                        now,
                    });
                }
                Some(_) => {}
            }
        }
        for (name, pinned) in &self.tools {
            if !seen.contains(name) {
                out.push(ToolChange::Removed {
                    tool: name.clone(),
                    pinned: pinned.definition.clone(),
                });
            }
        }
        out.sort_by(|a, b| a.tool().cmp(b.tool()));
        out
    }

    /// Accepts `tools` as they are now: all of them, or only `tool`
    /// (pinned as it is now, or unpinned when it is gone).
    pub fn accept(&mut self, tools: &[Value], tool: Option<&str>) {
        match tool {
            None => *self = Pins::of(tools),
            Some(name) => {
                match tools
                    .iter()
                    .find(|t| t.get("name").and_then(Value::as_str) == Some(name))
                {
                    Some(t) => {
                        self.tools.insert(name.to_string(), PinnedTool::of(t));
                    }
                    None => {
                        self.tools.remove(name);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, description: &str, prop: &str) -> Value {
        json!({"name": name, "description": description,
               "inputSchema": {"type": "object", "properties": {prop: {"type": "string"}}}})
    }

    #[test]
    fn changes_added_and_removed_tools_are_found_and_accepted() {
        let before = [
            tool("read", "reads", "path"),
            tool("write", "writes", "path"),
            tool("old", "x", "y"),
        ];
        let pins = Pins::of(&before);
        let now = [
            tool("read", "reads", "path"),
            tool("write", "writes anywhere", "target"),
            tool("new", "n", "z"),
        ];
        assert_eq!(pins.state(&now[0]), PinState::Trusted);
        assert_eq!(pins.state(&now[1]), PinState::Changed);
        assert_eq!(pins.state(&now[2]), PinState::New);
        let changes = pins.changes(&now);
        let names: Vec<_> = changes.iter().map(|c| c.tool().to_string()).collect();
        assert_eq!(names, ["new", "old", "write"]);
        match &changes[2] {
            ToolChange::Changed { parts, .. } => assert_eq!(parts, &["description", "inputSchema"]),
            other => panic!("{other:?}"),
        }
        let mut one = pins.clone();
        one.accept(&now, Some("write"));
        assert_eq!(one.state(&now[1]), PinState::Trusted);
        assert_eq!(
            one.state(&now[2]),
            PinState::New,
            "only the named tool is accepted"
        );
        one.accept(&now, Some("old"));
        assert!(!one.tools.contains_key("old"), "a gone tool is unpinned");
        let mut all = pins;
        all.accept(&now, None);
        assert!(all.changes(&now).is_empty());
    }
}
