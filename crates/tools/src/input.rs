//! One definition per tool's input: a struct that derives `Deserialize`
//! and `JsonSchema` gives both the schema `tools/list` shows
//! ([`input_schema`]) and the checked arguments the tool runs with
//! ([`parse`]).
//!
//! The derived schema is cut to what an agent needs (no `$schema`, titles,
//! formats, bounds or `additionalProperties`, optional fields not spelled
//! as nullable): every agent pays for the whole list in context on each
//! `tools/list`. Arguments are checked against that same schema before
//! serde sees them, so every refusal names the argument and says what it
//! must be ("argument 'limit' must be a whole number from 0 to …, got a
//! string"), a misspelt optional argument is refused rather than ignored,
//! and a whole number sent as a float (`30.0`) is taken.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use cem_host::{Args, ToolFailure};

/// The terse input schema of `T`.
pub fn input_schema<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.meta_schema = None;
            s.inline_subschemas = true;
        })
        .into_generator();
    terse(generator.into_root_schema_for::<T>().to_value())
}

/// `args` checked against `T`'s schema, then as a `T`.
pub fn parse<T: DeserializeOwned + JsonSchema + 'static>(args: &Args) -> Result<T, ToolFailure> {
    let schema = cached::<T>();
    let properties = schema["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let known: Vec<&str> = properties.keys().map(String::as_str).collect();
    args.only(&known)?;
    let required = |name: &str| {
        schema["required"]
            .as_array()
            .is_some_and(|r| r.iter().any(|n| n == name))
    };
    let mut checked = Map::new();
    for (name, property) in &properties {
        if let Some(value) = checked_value(args, name, property, required(name))? {
            checked.insert(name.clone(), value);
        }
    }
    serde_json::from_value(Value::Object(checked))
        .map_err(|e| ToolFailure(format!("the arguments do not fit this tool: {e}")))
}

/// One argument as the schema says it must be (None: absent or null).
fn checked_value(
    args: &Args,
    name: &str,
    property: &Value,
    required: bool,
) -> Result<Option<Value>, ToolFailure> {
    let value = match property["type"].as_str() {
        Some("string") => {
            let text = if required {
                Some(args.string(name)?)
            } else {
                args.opt_string(name)?
            };
            if let (Some(text), Some(allowed)) = (&text, property["enum"].as_array())
                && !allowed.iter().any(|a| a == text)
            {
                let allowed: Vec<&str> = allowed.iter().filter_map(Value::as_str).collect();
                return Err(ToolFailure(format!(
                    "argument '{name}' must be {}, got {text:?}",
                    one_of(&allowed)
                )));
            }
            text.map(Value::String)
        }
        Some("integer") => args.opt_u64(name)?.map(Value::from),
        Some("boolean") => args.opt_bool(name)?.map(Value::Bool),
        Some("object") => args.opt_object(name)?.map(Value::Object),
        Some("array") if property["items"]["type"] == "string" => {
            let items = args.opt_strings(name)?;
            args.is_set(name)
                .then(|| items.into_iter().map(Value::String).collect())
        }
        _ => {
            return Err(ToolFailure(format!(
                "argument '{name}' has a type this server cannot check; this is a bug in the server"
            )));
        }
    };
    if value.is_none() && required {
        return Err(ToolFailure(format!("missing required argument '{name}'")));
    }
    Ok(value)
}

/// `a, b or c`.
fn one_of(allowed: &[&str]) -> String {
    match allowed {
        [] => "nothing".into(),
        [one] => (*one).into(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// Each type's schema, made once.
fn cached<T: JsonSchema + 'static>() -> Arc<Value> {
    static SCHEMAS: Mutex<Option<HashMap<TypeId, Arc<Value>>>> = Mutex::new(None);
    let mut schemas = match SCHEMAS.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    schemas
        .get_or_insert_with(HashMap::new)
        .entry(TypeId::of::<T>())
        .or_insert_with(|| Arc::new(input_schema::<T>()))
        .clone()
}

/// The object schema cut to `type`, `properties` (each cut by
/// [`terse_property`]) and `required` (when not empty).
fn terse(schema: Value) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), "object".into());
    let properties: Map<String, Value> = schema["properties"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, p)| (name.clone(), terse_property(p)))
        .collect();
    out.insert("properties".into(), Value::Object(properties));
    if let Some(required) = schema["required"].as_array().filter(|r| !r.is_empty()) {
        out.insert("required".into(), Value::Array(required.clone()));
    }
    Value::Object(out)
}

/// One property as `type`, then `enum`, `items`, `default`, `description`
/// where it has them; an optional field's `["string", "null"]` is
/// `"string"` (absent and null mean the same to every tool).
fn terse_property(property: &Value) -> Value {
    let mut out = Map::new();
    let kind = match &property["type"] {
        Value::Array(kinds) => kinds.iter().find(|k| *k != "null").cloned(),
        Value::Null => None,
        kind => Some(kind.clone()),
    };
    if let Some(kind) = kind {
        out.insert("type".into(), kind);
    }
    if let Some(allowed) = property["enum"].as_array() {
        let allowed: Vec<Value> = allowed.iter().filter(|v| !v.is_null()).cloned().collect();
        out.insert("enum".into(), Value::Array(allowed));
    }
    if property["items"].is_object() {
        out.insert("items".into(), terse_property(&property["items"]));
    }
    for key in ["default", "description"] {
        if let Some(value) = property.get(key) {
            out.insert(key.into(), value.clone());
        }
    }
    Value::Object(out)
}

/// The input of a tool that takes no arguments.
#[derive(Debug, serde::Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
    #[serde(rename_all = "lowercase")]
    enum Level {
        Low,
        High,
    }

    #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
    struct Sample {
        name: String,
        /// How many
        #[schemars(extend("default" = 10))]
        count: Option<u64>,
        level: Option<Level>,
        tags: Option<Vec<String>>,
    }

    fn args(v: Value) -> Args {
        Args::new(v.as_object().cloned())
    }

    #[test]
    fn the_schema_is_terse_and_in_field_order() {
        assert_eq!(
            serde_json::to_string(&input_schema::<Sample>()).ok(),
            Some(
                json!({"type": "object", "properties": {
                    "name": {"type": "string"},
                    "count": {"type": "integer", "default": 10, "description": "How many"},
                    "level": {"type": "string", "enum": ["low", "high"]},
                    "tags": {"type": "array", "items": {"type": "string"}}},
                    "required": ["name"]})
                .to_string()
            )
        );
        assert_eq!(
            input_schema::<NoArgs>(),
            json!({"type": "object", "properties": {}})
        );
    }

    #[test]
    fn arguments_are_checked_by_the_same_definition() {
        let ok = parse::<Sample>(&args(
            json!({"name": "a", "count": 30.0, "level": "high", "tags": null}),
        ));
        assert_eq!(
            ok,
            Ok(Sample {
                name: "a".into(),
                count: Some(30),
                level: Some(Level::High),
                tags: None
            })
        );
        let refused = |v: Value| {
            parse::<Sample>(&args(v))
                .err()
                .map(|e| e.0)
                .unwrap_or_default()
        };
        assert_eq!(
            refused(json!({})),
            "missing required argument 'name' (a string)"
        );
        assert_eq!(
            refused(json!({"name": "a", "colour": 1})),
            "unknown argument 'colour'; expected name, count, level, tags"
        );
        assert_eq!(
            refused(json!({"name": "a", "level": "mid"})),
            "argument 'level' must be low or high, got \"mid\""
        );
        assert!(
            refused(json!({"name": "a", "count": -1}))
                .contains("argument 'count' must be a whole number")
        );
        assert!(
            refused(json!({"name": "a", "tags": [1]}))
                .contains("argument 'tags' must be an array of strings")
        );
        assert_eq!(
            parse::<NoArgs>(&args(json!({"x": 1}))).err().map(|e| e.0),
            Some("unknown argument 'x'; this tool takes no arguments".into())
        );
    }
}
