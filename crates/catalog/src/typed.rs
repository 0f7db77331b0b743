//! JSON schemas as Python types: nested objects become `TypedDict`s, so a
//! tool's definition reads as the Python an agent writes (`entities:
//! list[Entity]`) instead of as a JSON schema, with fewer tokens (over the
//! 155 tools of the token benchmark's eleven servers, whole definitions
//! are 17% smaller; descriptions, kept whole, are most of what remains).
//!
//! What a schema says that a type cannot (descriptions, defaults, bounds,
//! formats, patterns) is kept as a comment on the field. `$ref`s into
//! `$defs`/`definitions` are followed, once per name; recursion and depth
//! past [`MAX_DEPTH`] fall back to `dict`.

use serde_json::{Map, Value};

use crate::source::{clean_text, string_literal};

/// Nesting followed before an object is shown as a plain `dict`.
const MAX_DEPTH: usize = 6;
/// Classes one tool may define (a schema with hundreds of nested objects is
/// shown with `dict` past this).
const MAX_CLASSES: usize = 24;
/// Schema nodes rendered for one tool: a hostile schema (a `type` list
/// that repeats `items` a thousand times, at every level) could otherwise
/// take exponential time and memory. Past it, types are `Any`.
const MAX_STEPS: usize = 4_000;
/// Names the rendered module already uses.
const TAKEN: &[&str] = &[
    "Any",
    "Literal",
    "NotRequired",
    "TypedDict",
    "call_tool",
    "dict",
    "list",
    "str",
    "int",
    "float",
    "bool",
    "None",
];

/// The types of one tool: the classes its parameters and result use, and
/// the Python type of each.
#[derive(Debug, Default)]
pub struct Types {
    /// `Name = TypedDict("Name", {...})` definitions, dependencies first.
    pub classes: Vec<(String, String)>,
    /// `$ref` targets being rendered (recursion guard) and their class names.
    refs: Vec<(String, String)>,
    /// Each class's fields as rendered, and its name: an object of the same
    /// shape (a tool's result repeating its argument's items) reuses it.
    shapes: Vec<(String, String)>,
    /// Schema nodes rendered so far (see [`MAX_STEPS`]).
    steps: usize,
    root: Value,
}

impl Types {
    /// A renderer for the schemas of one tool; `root` holds its `$defs`.
    pub fn new(root: &Value) -> Self {
        Types {
            root: root.clone(),
            ..Default::default()
        }
    }

    /// The Python type of `schema`, defining classes for its objects;
    /// `hint` names them (a property name, `Result`).
    pub fn of(&mut self, schema: &Value, hint: &str) -> String {
        self.render(schema, hint, 0)
    }

    /// Like [`Types::of`] for a schema whose `$ref`s point into `root`
    /// (another document than the one this renderer started with).
    pub fn of_rooted(&mut self, root: &Value, schema: &Value, hint: &str) -> String {
        let saved_root = std::mem::replace(&mut self.root, root.clone());
        let saved_refs = std::mem::take(&mut self.refs);
        let ty = self.render(schema, hint, 0);
        self.root = saved_root;
        self.refs = saved_refs;
        ty
    }

    /// The class definitions as Python source, in definition order.
    pub fn source(&self) -> String {
        self.classes
            .iter()
            .map(|(_, body)| body.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn render(&mut self, schema: &Value, hint: &str, depth: usize) -> String {
        self.steps += 1;
        if depth > MAX_DEPTH || self.steps > MAX_STEPS {
            return "Any".into();
        }
        if let Some(target) = schema.get("$ref").and_then(Value::as_str) {
            return self.reference(target, depth);
        }
        if let Some(options) = schema
            .get("anyOf")
            .or_else(|| schema.get("oneOf"))
            .and_then(Value::as_array)
        {
            let types: Vec<String> = options
                .iter()
                .map(|option| self.render(option, hint, depth + 1))
                .collect();
            return union(types);
        }
        // `allOf: [{"$ref": ...}]` is how some generators add a description
        // to a reference; with more parts, an intersection Python cannot say.
        if let Some(parts) = schema.get("allOf").and_then(Value::as_array) {
            return match parts.as_slice() {
                [one] => self.render(one, hint, depth + 1),
                _ => "dict".into(),
            };
        }
        if let Some(values) = schema.get("enum").and_then(Value::as_array) {
            return literal(values);
        }
        if let Some(value) = schema.get("const") {
            return literal(std::slice::from_ref(value));
        }
        match schema.get("type") {
            Some(Value::String(t)) => self.simple(t, schema, hint, depth),
            Some(Value::Array(ts)) => {
                let types: Vec<String> = ts
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|t| self.simple(t, schema, hint, depth))
                    .collect();
                union(types)
            }
            // No type but properties: an object all the same.
            _ if schema.get("properties").is_some() => self.simple("object", schema, hint, depth),
            _ => "Any".into(),
        }
    }

    fn simple(&mut self, t: &str, schema: &Value, hint: &str, depth: usize) -> String {
        match t {
            "string" => "str".into(),
            "integer" => "int".into(),
            "number" => "float".into(),
            "boolean" => "bool".into(),
            "null" => "None".into(),
            "array" => match schema.get("items") {
                Some(items) => format!("list[{}]", self.render(items, &singular(hint), depth + 1)),
                None => "list".into(),
            },
            "object" => self.object(schema, hint, depth),
            _ => "Any".into(),
        }
    }

    fn object(&mut self, schema: &Value, hint: &str, depth: usize) -> String {
        let properties = schema.get("properties").and_then(Value::as_object);
        let Some(properties) = properties.filter(|p| !p.is_empty()) else {
            // A map: `additionalProperties` gives its values' type.
            return match schema.get("additionalProperties") {
                Some(values @ Value::Object(_))
                    if !values.as_object().is_some_and(Map::is_empty) =>
                {
                    format!(
                        "dict[str, {}]",
                        self.render(values, &singular(hint), depth + 1)
                    )
                }
                _ => "dict".into(),
            };
        };
        if self.classes.len() >= MAX_CLASSES {
            return "dict".into();
        }
        let title = schema.get("title").and_then(Value::as_str).unwrap_or(hint);
        let name = self.fresh_name(title);
        // Reserve the name now: a nested object with the same hint gets
        // another one.
        self.classes.push((name.clone(), String::new()));
        let slot = self.classes.len() - 1;
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut fields = Vec::with_capacity(properties.len());
        for (key, prop) in properties {
            let ty = self.render(prop, key, depth + 1);
            let ty = if required.contains(&key.as_str()) {
                ty
            } else {
                format!("NotRequired[{ty}]")
            };
            let comment = comment(prop);
            let comment = if comment.is_empty() {
                String::new()
            } else {
                format!("  # {comment}")
            };
            fields.push(format!("    {}: {ty},{comment}", quoted(key)));
        }
        let fields = fields.join("\n");
        // Dependencies were pushed after the slot: this class goes after
        // them, so every name is defined before use.
        self.classes.remove(slot);
        if let Some((_, same)) = self.shapes.iter().find(|(f, _)| *f == fields) {
            return same.clone();
        }
        let body = format!("{name} = TypedDict({}, {{\n{fields}\n}})\n", quoted(&name));
        self.shapes.push((fields, name.clone()));
        self.classes.push((name.clone(), body));
        name
    }

    fn reference(&mut self, target: &str, depth: usize) -> String {
        if let Some((_, name)) = self.refs.iter().find(|(r, _)| r == target) {
            // Rendered already (its class name), or being rendered: a
            // recursive reference, shown as `dict`.
            return name.clone();
        }
        let Some(resolved) = resolve(&self.root, target).cloned() else {
            return "Any".into();
        };
        let hint = target.rsplit('/').next().unwrap_or("Item").to_string();
        self.refs.push((target.to_string(), "dict".into()));
        let rendered = self.render(&resolved, &hint, depth + 1);
        self.refs.retain(|(r, _)| r != target);
        self.refs.push((target.to_string(), rendered.clone()));
        rendered
    }

    /// A class name from `hint`: CamelCase, an identifier, unused.
    fn fresh_name(&self, hint: &str) -> String {
        let mut base = camel(hint);
        if base.is_empty() || base.starts_with(|c: char| c.is_ascii_digit()) {
            base.insert(0, 'T');
        }
        if TAKEN.contains(&base.as_str()) || cem_policy::is_keyword(&base) {
            base.push('_');
        }
        let used = |n: &str| self.classes.iter().any(|(c, _)| c == n);
        if !used(&base) {
            return base;
        }
        (2..)
            .map(|i| format!("{base}{i}"))
            .find(|n| !used(n))
            .unwrap_or(base)
    }
}

/// `Literal[...]` of JSON scalars as Python literals; `Any` when a value is
/// not a scalar or there is none.
fn literal(values: &[Value]) -> String {
    let shown: Option<Vec<String>> = values
        .iter()
        .map(|v| match v {
            Value::Bool(true) => Some("True".into()),
            Value::Bool(false) => Some("False".into()),
            Value::Null => Some("None".into()),
            Value::Number(n) => Some(n.to_string()),
            Value::String(s) => Some(string_literal(s)),
            _ => None,
        })
        .collect();
    match shown {
        Some(shown) if !shown.is_empty() => format!("Literal[{}]", shown.join(", ")),
        _ => "Any".into(),
    }
}

/// `a | b` without repeats, or the one type.
fn union(types: Vec<String>) -> String {
    let mut distinct: Vec<String> = Vec::with_capacity(types.len());
    for t in types {
        if !distinct.contains(&t) {
            distinct.push(t);
        }
    }
    if distinct.is_empty() {
        "Any".into()
    } else {
        distinct.join(" | ")
    }
}

/// `#/$defs/Name` or `#/definitions/Name` within `root`.
fn resolve<'a>(root: &'a Value, target: &str) -> Option<&'a Value> {
    let path = target.strip_prefix("#/")?;
    let mut node = root;
    for part in path.split('/') {
        let part = part.replace("~1", "/").replace("~0", "~");
        node = node.get(part.as_str())?;
    }
    Some(node)
}

/// What the schema says beyond the type: description, default, bounds.
pub fn comment(schema: &Value) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(d) = schema.get("description").and_then(Value::as_str) {
        let d = d.split_whitespace().collect::<Vec<_>>().join(" ");
        if !d.is_empty() {
            parts.push(d);
        }
    }
    for (key, label) in [
        ("default", "default"),
        ("minimum", ">="),
        ("maximum", "<="),
        ("exclusiveMinimum", ">"),
        ("exclusiveMaximum", "<"),
        ("minLength", "min length"),
        ("maxLength", "max length"),
        ("minItems", "min items"),
        ("maxItems", "max items"),
        ("format", "format"),
        ("pattern", "pattern"),
    ] {
        if let Some(v) = schema.get(key) {
            // Booleans are JSON Schema draft 4's exclusive flags: not bounds.
            if v.is_boolean() && key.starts_with("exclusive") {
                continue;
            }
            let shown = match v {
                Value::String(s) if key != "default" => s.clone(),
                // A default as the Python value the agent would pass.
                Value::Bool(true) => "True".into(),
                Value::Bool(false) => "False".into(),
                Value::Null => "None".into(),
                other => other.to_string(),
            };
            parts.push(format!("{label} {shown}"));
        }
    }
    // A comment is one line of Python source: newlines would end it, and a
    // NUL (or any control character) makes the file unreadable.
    clean_text(&parts.join("; "), false)
}

/// A Python string literal for a dict key or class name.
fn quoted(s: &str) -> String {
    string_literal(s)
}

/// `create_entities` → `CreateEntities`, `entity-type` → `EntityType`.
fn camel(s: &str) -> String {
    s.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut chars = w.chars();
            match chars.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

/// The name of one item of a list called `plural`: `entities` → `entity`,
/// `observations` → `observation`; other names get `Item`.
fn singular(plural: &str) -> String {
    if let Some(stem) = plural.strip_suffix("ies") {
        format!("{stem}y")
    } else if let Some(stem) = plural.strip_suffix("ses") {
        format!("{stem}s")
    } else if let Some(stem) = plural.strip_suffix('s').filter(|s| !s.ends_with('s')) {
        stem.to_string()
    } else {
        format!("{plural}Item")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_objects_become_typed_dicts() {
        let schema = json!({
            "type": "object",
            "properties": {"entities": {"type": "array", "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "The name\nof the entity"},
                    "observations": {"type": "array", "items": {"type": "string"}},
                    "from": {"type": "integer", "minimum": 1, "default": 5}
                },
                "required": ["name"]
            }}},
            "required": ["entities"]
        });
        let mut types = Types::new(&schema);
        let ty = types.of(&schema["properties"]["entities"], "entities");
        assert_eq!(ty, "list[Entity]");
        assert_eq!(
            types.source(),
            "Entity = TypedDict(\"Entity\", {\n    \"name\": str,  # The name of the entity\n    \
             \"observations\": NotRequired[list[str]],\n    \
             \"from\": NotRequired[int],  # default 5; >= 1\n})\n"
        );
    }

    #[test]
    fn refs_are_followed_once_and_recursion_stops() {
        let schema = json!({
            "$defs": {"Node": {"title": "Node", "type": "object", "properties": {
                "label": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                "kind": {"$ref": "#/$defs/Kind"}
            }, "required": ["label", "children", "kind"]},
            "Kind": {"type": "string", "enum": ["leaf", "branch"]}},
            "type": "object",
            "properties": {"root": {"$ref": "#/$defs/Node"}, "other": {"$ref": "#/$defs/Node"}}
        });
        let mut types = Types::new(&schema);
        assert_eq!(types.of(&schema["properties"]["root"], "root"), "Node");
        assert_eq!(types.of(&schema["properties"]["other"], "other"), "Node");
        assert_eq!(types.classes.len(), 1);
        let source = types.source();
        // The recursion itself is a plain dict: every name shown is defined.
        assert!(source.contains("\"children\": list[dict],"), "{source}");
        assert!(
            source.contains("\"kind\": Literal[\"leaf\", \"branch\"],"),
            "{source}"
        );
    }

    #[test]
    fn maps_unions_and_names() {
        let mut types = Types::new(&json!({}));
        let map = json!({"type": "object", "additionalProperties": {"type": "number"}});
        assert_eq!(types.of(&map, "scores"), "dict[str, float]");
        let nullable = json!({"anyOf": [{"type": "string"}, {"type": "null"}]});
        assert_eq!(types.of(&nullable, "x"), "str | None");
        // A property named like a typing name gets a class name of its own.
        let any = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(types.of(&any, "any"), "Any_");
        let other = json!({"type": "object", "properties": {"b": {"type": "string"}}});
        assert_eq!(types.of(&other, "any"), "Any_2");
        assert_eq!(singular("relations"), "relation");
        assert_eq!(singular("addresses"), "address");
        assert_eq!(singular("data"), "dataItem");
        // The same shape under another name is the same class.
        let again = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(types.of(&again, "other"), "Any_");
    }

    #[test]
    fn odd_values_stay_valid_python() {
        let mut types = Types::new(&json!({}));
        assert_eq!(types.of(&json!({"enum": []}), "x"), "Any");
        assert_eq!(
            types.of(&json!({"enum": [true, null, 2, "a\"b"]}), "x"),
            "Literal[True, None, 2, \"a\\\"b\"]"
        );
        assert_eq!(types.of(&json!({"enum": [{"a": 1}]}), "x"), "Any");
        assert_eq!(types.of(&json!({"const": false}), "x"), "Literal[False]");
        assert_eq!(comment(&json!({"default": true})), "default True");
        let obj = json!({"type": "object", "properties": {"k": {"type": "string", "description": "a\u{0}b\tc"}}});
        types.of(&obj, "odd");
        assert!(!types.source().chars().any(|c| c.is_control() && c != '\n'));
        // A reference wrapped in allOf (to carry a description) is followed.
        let root =
            json!({"$defs": {"P": {"type": "object", "properties": {"q": {"type": "integer"}}}}});
        let mut types = Types::new(&root);
        assert_eq!(
            types.of(&json!({"allOf": [{"$ref": "#/$defs/P"}]}), "p"),
            "P"
        );
    }

    #[test]
    fn hostile_fan_out_is_bounded() {
        // A type list repeating `items` a thousand times, recursively.
        let many: Vec<Value> = (0..1000).map(|_| json!("array")).collect();
        let root = json!({"$defs": {"L": {"type": many, "items": {"$ref": "#/$defs/L"}}}});
        let mut types = Types::new(&root);
        let ty = types.of(&json!({"$ref": "#/$defs/L"}), "x");
        assert!(ty.len() < 10_000, "{}", ty.len());
        let mut nested = json!({"type": "string"});
        for _ in 0..7 {
            let list: Vec<Value> = (0..20).map(|_| json!("array")).collect();
            nested = json!({"type": list, "items": nested});
        }
        let mut types = Types::new(&json!({}));
        assert!(types.of(&nested, "x").len() < 10_000);
    }

    #[test]
    fn deep_or_huge_schemas_fall_back_to_dict() {
        let mut deep = json!({"type": "string"});
        for _ in 0..20 {
            deep = json!({"type": "object", "properties": {"inner": deep}});
        }
        let mut types = Types::new(&json!({}));
        types.of(&deep, "outer");
        assert!(types.classes.len() <= MAX_DEPTH + 1);
        assert!(types.source().contains("Any"));
        let mut wide = serde_json::Map::new();
        for i in 0..100 {
            wide.insert(
                format!("f{i}"),
                json!({"type": "object", "properties": {"x": {"type": "string"}}}),
            );
        }
        let wide = json!({"type": "object", "properties": wide});
        let mut types = Types::new(&wide);
        types.of(&wide, "wide");
        assert!(types.classes.len() <= MAX_CLASSES);
    }
}
