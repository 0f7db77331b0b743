//! `tools discover`: learning result shapes ahead of use, by calling the
//! tools that cannot change anything.
//!
//! A tool is called only when all of these hold: its annotations say it is
//! read-only (`readOnlyHint: true`) and not destructive; it declares no
//! `outputSchema` (there is nothing to learn); the policy allows it
//! outright; and every required argument can be built from its input
//! schema (its default, first example, first enum value or const; a number
//! at its minimum; `false`; an empty array; an object of such). The call
//! goes through the gate with no one to ask: a call the policy or a pin
//! would put to a person is refused there, whatever this module decided,
//! and every call is in the audit log.

use std::sync::Arc;

use cem_policy::{Decision, PinState, ToolFacts};
use cem_upstream::Tool;
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::AppState;
use crate::gate::{Caller, Execution};

/// What discovering did with one tool.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(tag = "outcome", rename_all = "lowercase")]
pub enum Probe {
    /// Called, and its shape recorded.
    Called { tool: String, arguments: Value },
    /// Not called, and why.
    Skipped { tool: String, reason: String },
    /// Called, and the call failed.
    Failed { tool: String, error: String },
}

/// Probes every tool of `servers` (all enabled servers when empty), with
/// `given` as the value of any top-level argument of that name.
pub async fn discover(
    state: &Arc<AppState>,
    servers: &[String],
    given: &Map<String, Value>,
) -> Result<Vec<Probe>, String> {
    if !state.shapes.enabled() {
        return Err("shapes are not learned here (catalog.learn_shapes is false)".into());
    }
    let manager = state.catalog.manager().clone();
    let mut names: Vec<String> = Vec::new();
    for wanted in servers {
        let upstream = manager.get(wanted).map_err(|e| e.to_string())?;
        names.push(upstream.config.name.clone());
    }
    if names.is_empty() {
        names = manager
            .servers()
            .filter(|u| !u.config.disabled)
            .map(|u| u.config.name.clone())
            .collect();
    }
    let exec = Execution::new(
        &state.gate,
        Caller::Cli,
        "discover",
        None,
        None,
        "tools discover asks no one: it calls only what the policy allows outright",
    );
    let mut probes = Vec::new();
    for server in names {
        let tools = match manager.tools(&server, false).await {
            Ok(tools) => tools,
            Err(e) => {
                probes.push(Probe::Skipped {
                    tool: format!("{server}.*"),
                    reason: format!("the server's tools could not be listed: {e}"),
                });
                continue;
            }
        };
        for tool in tools {
            let name = format!("{server}.{}", tool.name);
            let arguments = match plan(state, &server, &tool, given) {
                Ok(arguments) => arguments,
                Err(reason) => {
                    probes.push(Probe::Skipped { tool: name, reason });
                    continue;
                }
            };
            let shown_args = Value::Object(arguments.clone());
            let shown = move || shown_args.clone();
            let called = state
                .gate
                .call(
                    &manager,
                    &exec,
                    &server,
                    &tool.name,
                    Some(arguments.clone()),
                    &shown,
                )
                .await;
            let probe = match called {
                Ok(result) if result.is_error == Some(true) => Probe::Failed {
                    tool: name,
                    error: first_text(&result).unwrap_or_else(|| "an error result".into()),
                },
                Ok(result) => {
                    let value = value_of(result);
                    state
                        .shapes
                        .record(&name, &value, cem_shapes::Source::Probed);
                    Probe::Called {
                        tool: name,
                        arguments: Value::Object(arguments),
                    }
                }
                Err(error) => Probe::Failed { tool: name, error },
            };
            probes.push(probe);
        }
    }
    state.shapes.flush();
    Ok(probes)
}

/// The arguments to probe `tool` with, or why it is not probed.
fn plan(
    state: &AppState,
    server: &str,
    tool: &Tool,
    given: &Map<String, Value>,
) -> Result<Map<String, Value>, String> {
    if tool.output_schema.is_some() {
        return Err("it declares an outputSchema: nothing to learn".into());
    }
    let annotations = tool.annotations.as_ref();
    let read_only = annotations.and_then(|a| a.read_only_hint);
    let destructive = annotations.and_then(|a| a.destructive_hint);
    if read_only != Some(true) {
        return Err("not read-only by its annotations (readOnlyHint is not true)".into());
    }
    if destructive == Some(true) {
        return Err("destructive by its annotations".into());
    }
    let facts = ToolFacts {
        read_only,
        destructive,
        pin: PinState::Trusted,
    };
    let verdict = state.gate.policy.decide(server, &tool.name, facts);
    match verdict.decision {
        Decision::Allow => {}
        Decision::Ask => {
            return Err(format!(
                "the policy asks a person first ({})",
                verdict.reason
            ));
        }
        Decision::Deny => return Err(format!("the policy denies it ({})", verdict.reason)),
    }
    let mut schema = Value::Object(tool.input_schema.as_ref().clone());
    // A value given for an argument stands as its default.
    if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for (name, value) in given {
            if let Some(Value::Object(property)) = properties.get_mut(name) {
                property.insert("default".into(), value.clone());
            }
        }
    }
    match build(&schema, &schema, "", 0)? {
        Value::Object(arguments) => Ok(arguments),
        _ => Ok(Map::new()),
    }
}

/// Nesting followed when building arguments (and `$ref` cycles end).
const MAX_DEPTH: usize = 8;

/// A minimal valid value for `schema` (at `at`, for the reason).
fn build(root: &Value, schema: &Value, at: &str, depth: usize) -> Result<Value, String> {
    let cannot = |why: &str| {
        let place = if at.is_empty() { "the arguments" } else { at };
        Err(format!("cannot build {place}: {why}"))
    };
    if depth > MAX_DEPTH {
        return cannot("nested too deep");
    }
    let Some(object) = schema.as_object() else {
        return Ok(Value::Null);
    };
    if let Some(reference) = object.get("$ref").and_then(Value::as_str) {
        return match reference.strip_prefix('#').and_then(|p| root.pointer(p)) {
            Some(target) => build(root, target, at, depth + 1),
            None => cannot("a reference outside the schema"),
        };
    }
    if let Some(default) = object.get("default") {
        return Ok(default.clone());
    }
    if let Some(example) = object
        .get("examples")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return Ok(example.clone());
    }
    if let Some(first) = object
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return Ok(first.clone());
    }
    if let Some(constant) = object.get("const") {
        return Ok(constant.clone());
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(options) = object.get(key).and_then(Value::as_array) {
            let mut last = None;
            for option in options {
                match build(root, option, at, depth + 1) {
                    Ok(v) => return Ok(v),
                    Err(e) => last = Some(e),
                }
            }
            return Err(last.unwrap_or_else(|| format!("cannot build {at}: an empty {key}")));
        }
    }
    let types: Vec<&str> = match object.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ if object.contains_key("properties") => vec!["object"],
        _ => Vec::new(),
    };
    if types.contains(&"null") {
        return Ok(Value::Null);
    }
    match types.first().copied() {
        Some("boolean") => Ok(json!(false)),
        Some("integer") | Some("number") => {
            let at_least = object
                .get("minimum")
                .and_then(Value::as_f64)
                .or_else(|| {
                    object
                        .get("exclusiveMinimum")
                        .and_then(Value::as_f64)
                        .map(|m| m.floor() + 1.0)
                })
                .unwrap_or(0.0)
                .max(0.0)
                .ceil();
            let at_most = object.get("maximum").and_then(Value::as_f64);
            if at_most.is_some_and(|max| max < at_least) {
                return Ok(json!(at_most));
            }
            Ok(json!(at_least as i64))
        }
        Some("array") => {
            let needs = object.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            if needs == 0 {
                return Ok(json!([]));
            }
            let item = object.get("items").unwrap_or(&Value::Null);
            let one = build(root, item, &format!("{at}[0]"), depth + 1)?;
            Ok(Value::Array(vec![one; needs.min(16) as usize]))
        }
        Some("object") => {
            let required: Vec<&str> = object
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let properties = object.get("properties").and_then(Value::as_object);
            let mut built = Map::new();
            for key in required {
                let place = if at.is_empty() {
                    format!("'{key}'")
                } else {
                    format!("{at}.{key}")
                };
                let Some(property) = properties.and_then(|p| p.get(key)) else {
                    return cannot(&format!("{place} is required but has no schema"));
                };
                built.insert(key.to_string(), build(root, property, &place, depth + 1)?);
            }
            Ok(Value::Object(built))
        }
        // A free string: no value of it can be guessed that means anything
        // to the tool (a path, a query, a name).
        Some("string") => cannot("a string with no default, example or enum"),
        _ => cannot("no type, default, example or enum"),
    }
}

/// What code would get from `result`: its structured content, else its
/// text parsed as JSON (as text when it is none), else its blocks.
fn value_of(result: cem_upstream::CallToolResult) -> Value {
    if let Some(structured) = result.structured_content {
        return structured;
    }
    let content = serde_json::to_value(&result.content).unwrap_or(Value::Null);
    let texts: Option<Vec<&str>> = content.as_array().and_then(|blocks| {
        blocks
            .iter()
            .map(|b| (b["type"] == "text").then(|| b["text"].as_str()).flatten())
            .collect()
    });
    match texts {
        Some(texts) => {
            let text = texts.join("\n");
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        }
        None => content,
    }
}

fn first_text(result: &cem_upstream::CallToolResult) -> Option<String> {
    let content = serde_json::to_value(&result.content).ok()?;
    content
        .as_array()?
        .iter()
        .find_map(|b| b["text"].as_str().map(|t| t.chars().take(500).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(schema: Value) -> Result<Value, String> {
        build(&schema, &schema, "", 0)
    }

    #[test]
    fn arguments_come_from_defaults_examples_enums_and_minimums() {
        let schema = json!({"type": "object", "required": ["a", "b", "c", "d", "e", "f"],
            "properties": {
                "a": {"type": "string", "default": "x"},
                "b": {"type": "string", "examples": ["Europe/Paris"]},
                "c": {"type": "string", "enum": ["asc", "desc"]},
                "d": {"type": "integer", "minimum": 1, "maximum": 100},
                "e": {"type": "boolean"},
                "f": {"type": "array", "items": {"type": "string"}},
                "optional": {"type": "string"}}});
        assert_eq!(
            args(schema),
            Ok(json!({"a": "x", "b": "Europe/Paris", "c": "asc", "d": 1, "e": false, "f": []}))
        );
    }

    #[test]
    fn a_required_free_string_cannot_be_built() {
        let schema = json!({"type": "object", "required": ["repo_path"],
            "properties": {"repo_path": {"type": "string"}}});
        let why = args(schema).err().unwrap_or_default();
        assert!(
            why.contains("'repo_path'") && why.contains("string"),
            "{why}"
        );
    }

    #[test]
    fn no_arguments_and_nested_references_build() {
        assert_eq!(args(json!({"type": "object"})), Ok(json!({})));
        let schema = json!({"type": "object", "required": ["page"],
            "$defs": {"Page": {"type": "object", "required": ["size"],
                "properties": {"size": {"type": "integer", "exclusiveMinimum": 0}}}},
            "properties": {"page": {"$ref": "#/$defs/Page"}}});
        assert_eq!(args(schema), Ok(json!({"page": {"size": 1}})));
    }
}
