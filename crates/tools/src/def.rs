//! What defines a tool for `tools/list`: its name, description, input
//! schema and the shape of its answer.
//!
//! Schemas are terse on purpose: every agent pays for the whole list in
//! context on each `tools/list`.

use serde_json::{Value, json};

/// One tool: its name, its one-line description and its input schema.
pub struct ToolDef {
    pub name: &'static str,
    pub description: &'static str,
    /// Its input schema: [`crate::input::input_schema`] of its input
    /// struct, with the size bounds that come from config made numbers.
    pub schema: fn(&crate::input::Limits) -> Value,
    /// Listed under `--tools minimal` too.
    pub minimal: bool,
}

impl ToolDef {
    /// Refuses `args` where one is over a size bound this tool's input
    /// schema declares (every string, array and free object has one),
    /// naming the argument, its size and the bound. The arguments are
    /// looked at where they are, not copied.
    pub fn check_sizes(
        &self,
        state: &cem_host::AppState,
        args: &mut cem_host::Args,
    ) -> Result<(), cem_host::ToolFailure> {
        let Some(bounds) =
            cem_host::bounds::Bounds::of(&(self.schema)(&crate::input::Limits::of(state)))
        else {
            return Ok(());
        };
        bounds
            .check(args.as_map_mut())
            .map_err(|over| cem_host::ToolFailure(format!("{}: {over}", self.name)))
    }
}

/// The `outputSchema` of tool `name`: its `structuredContent` is an object
/// with `success` and, on success, these fields (errors carry `error`).
/// Terse on purpose, as every `tools/list` pays for it: only fields every
/// successful answer carries, with the one type they always have.
pub fn output_schema(name: &str) -> Value {
    let fields: &[(&str, &str)] = match name {
        "execute_code" => &[
            ("result", ""),
            ("output", "string"),
            ("execution_time_ms", "integer"),
            ("tool_calls", "integer"),
        ],
        "search_tools" => &[("count", "integer"), ("tools", "array")],
        "get_tool_definition" => &[("name", "string")],
        "list_tool_categories" => &[("count", "integer"), ("categories", "array")],
        "write_workspace_file" => &[("filename", "string"), ("size", "integer")],
        "read_workspace_file" => &[("content", "string"), ("size", "integer")],
        "list_workspace_files" => &[("files", "array"), ("count", "integer")],
        "get_execution_stats" => &[("version", "string"), ("uptime_seconds", "integer")],
        "sanitize_pii" => &[("sanitized_text", "string"), ("pii_found", "integer")],
        "restore_pii" => &[("restored_text", "string"), ("restored", "integer")],
        "save_skill" => &[("name", "string"), ("version", "integer")],
        "load_skill" => &[
            ("name", "string"),
            ("code", "string"),
            ("version", "integer"),
        ],
        "list_skills" => &[("count", "integer"), ("skills", "array")],
        "delete_skill" => &[("name", "string"), ("versions", "integer")],
        _ => &[],
    };
    let mut properties = serde_json::Map::new();
    properties.insert("success".into(), json!({"type": "boolean"}));
    for (field, kind) in fields {
        let schema = if kind.is_empty() {
            json!({})
        } else {
            json!({"type": kind})
        };
        properties.insert((*field).into(), schema);
    }
    json!({"type": "object", "properties": properties, "required": ["success"]})
}
