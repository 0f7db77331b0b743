//! One definition per tool's input: a struct that derives `Deserialize`
//! and `JsonSchema` gives both the schema `tools/list` shows
//! ([`input_schema`]) and the checked arguments the tool runs with
//! ([`parse`]).
//!
//! The derived schema is cut to what an agent needs (no `$schema`, titles,
//! formats, numeric bounds or `additionalProperties`, optional fields not
//! spelled as nullable): every agent pays for the whole list in context on
//! each `tools/list`. Arguments are checked against that same schema before
//! serde sees them, so every refusal names the argument and says what it
//! must be ("argument 'limit' must be a whole number from 0 to …, got a
//! string"), a misspelt optional argument is refused rather than ignored,
//! and a whole number sent as a float (`30.0`) is taken.
//!
//! Size bounds stay: every string has a `maxLength`, every array a
//! `maxItems` and every free object a `maxProperties`, which the dispatcher
//! checks before the tool runs ([`cem_host::bounds`]). A bound that comes
//! from config is written in the input struct as the config key's name
//! ([`FILE_BYTES`]) and made a number from that config ([`Limits`]) when
//! the schema is listed or checked.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use cem_host::{AppState, Args, ToolFailure};

/// A bound of as many characters as a workspace file may have bytes
/// (`workspace.max_file_bytes`): a file's content, or a text as long as a
/// file an agent would sanitize. A string has at least as many bytes as
/// characters, so what the schema lets through may still be refused by the
/// byte count the workspace checks itself, never the other way round.
pub const FILE_BYTES: &str = "workspace.max_file_bytes";

/// The bounds of the server's own tools that come from config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `workspace.max_file_bytes`.
    pub file_bytes: u64,
}

impl Limits {
    pub fn of(state: &AppState) -> Limits {
        Limits {
            file_bytes: state.workspace.max_file_bytes(),
        }
    }

    /// The number a bound written as a config key's name stands for.
    fn get(&self, key: &str) -> Option<u64> {
        match key {
            FILE_BYTES => Some(self.file_bytes),
            _ => None,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            file_bytes: cem_config::Config::default().workspace.max_file_bytes,
        }
    }
}

/// The size keywords a schema keeps.
const SIZE_KEYWORDS: [&str; 3] = ["maxLength", "maxItems", "maxProperties"];

/// The terse input schema of `T`, with its bounds from `limits`.
pub fn input_schema<T: JsonSchema + 'static>(limits: &Limits) -> Value {
    let mut schema = (*cached::<T>()).clone();
    resolve(&mut schema, limits);
    schema
}

/// The terse schema of `T` as derived, config bounds still named by key.
fn derived<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.meta_schema = None;
            s.inline_subschemas = true;
        })
        .into_generator();
    terse(generator.into_root_schema_for::<T>().to_value())
}

/// Each size bound written as a config key's name made that number (one
/// no config names is dropped: a test checks every tool has none).
fn resolve(schema: &mut Value, limits: &Limits) {
    match schema {
        Value::Object(map) => {
            for keyword in SIZE_KEYWORDS {
                if let Some(key) = map.get(keyword).and_then(Value::as_str) {
                    match limits.get(key) {
                        Some(n) => map.insert(keyword.into(), Value::from(n)),
                        None => map.remove(keyword),
                    };
                }
            }
            map.values_mut().for_each(|v| resolve(v, limits));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| resolve(v, limits)),
        _ => {}
    }
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
                // An enum is its own bound: what was sent is shown cut.
                return Err(ToolFailure(format!(
                    "argument '{name}' must be {}, got {:?}",
                    one_of(&allowed),
                    cem_host::gate::capped(text)
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

/// Each type's schema, made once (config bounds named by key).
fn cached<T: JsonSchema + 'static>() -> Arc<Value> {
    static SCHEMAS: Mutex<Option<HashMap<TypeId, Arc<Value>>>> = Mutex::new(None);
    let mut schemas = match SCHEMAS.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    schemas
        .get_or_insert_with(HashMap::new)
        .entry(TypeId::of::<T>())
        .or_insert_with(|| Arc::new(derived::<T>()))
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

/// One property as `type`, then `enum`, `items`, its size bound,
/// `default`, `description` where it has them; an optional field's
/// `["string", "null"]` is `"string"` (absent and null mean the same to
/// every tool).
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
    for key in SIZE_KEYWORDS.into_iter().chain(["default", "description"]) {
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
        #[schemars(extend("maxLength" = 8))]
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
            serde_json::to_string(&input_schema::<Sample>(&Limits::default())).ok(),
            Some(
                json!({"type": "object", "properties": {
                    "name": {"type": "string", "maxLength": 8},
                    "count": {"type": "integer", "default": 10, "description": "How many"},
                    "level": {"type": "string", "enum": ["low", "high"]},
                    "tags": {"type": "array", "items": {"type": "string"}}},
                    "required": ["name"]})
                .to_string()
            )
        );
        assert_eq!(
            input_schema::<NoArgs>(&Limits::default()),
            json!({"type": "object", "properties": {}})
        );
    }

    // Only its schema is looked at.
    #[allow(dead_code)]
    #[derive(Debug, Deserialize, JsonSchema)]
    struct FromConfig {
        #[schemars(extend("maxLength" = FILE_BYTES))]
        content: String,
        #[schemars(extend("maxItems" = 3), inner(length(max = 4)))]
        tags: Option<Vec<String>>,
    }

    #[test]
    fn a_bound_named_by_its_config_key_is_that_config_s_number() {
        let limits = Limits { file_bytes: 1234 };
        let schema = input_schema::<FromConfig>(&limits);
        assert_eq!(schema["properties"]["content"]["maxLength"], json!(1234));
        assert_eq!(
            schema["properties"]["tags"],
            json!({"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3})
        );
        let other = input_schema::<FromConfig>(&Limits { file_bytes: 99 });
        assert_eq!(other["properties"]["content"]["maxLength"], json!(99));
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
