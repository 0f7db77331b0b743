//! Whether a result fits the `outputSchema` its tool declares.
//!
//! A check of the keywords that say what a value is (`type`, `properties`,
//! `required`, `additionalProperties: false`, `items`, `enum`, `const`,
//! `anyOf`, `oneOf`, `allOf`, local `$ref`s), never of the ones that
//! only narrow it (lengths, patterns, formats): what it reports is a real
//! break of the declared type, and a schema it cannot follow is taken as
//! kept, so it never cries wolf.

use serde_json::Value;

/// Nesting followed before the rest is taken as kept (and `$ref` cycles end).
const MAX_DEPTH: usize = 32;

/// The first place `value` breaks `schema`, in words (`$.items[2].id: expected
/// string, got number`); None when it fits.
pub fn violation(schema: &Value, value: &Value) -> Option<String> {
    check(schema, schema, value, "$", 0)
}

fn check(root: &Value, schema: &Value, value: &Value, at: &str, depth: usize) -> Option<String> {
    if depth > MAX_DEPTH {
        return None;
    }
    let Some(schema) = schema.as_object() else {
        // `true`, `{}` or something that is no schema: anything fits.
        return (schema == &Value::Bool(false)).then(|| format!("{at}: nothing is allowed here"));
    };
    if let Some(target) = schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|reference| reference.strip_prefix('#'))
        .and_then(|pointer| root.pointer(pointer))
        && let Some(found) = check(root, target, value, at, depth + 1)
    {
        return Some(found);
    }
    if let Some(types) = schema.get("type") {
        let names: Vec<&str> = match types {
            Value::String(one) => vec![one.as_str()],
            Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !names.is_empty() && !names.iter().any(|t| is_type(value, t)) {
            return Some(format!(
                "{at}: expected {}, got {}",
                names.join(" or "),
                type_name(value)
            ));
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        return Some(format!("{at}: not one of the declared values"));
    }
    if let Some(constant) = schema.get("const")
        && constant != value
    {
        return Some(format!("{at}: not the declared constant"));
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(options) = schema.get(key).and_then(Value::as_array)
            && !options.is_empty()
            && options
                .iter()
                .all(|o| check(root, o, value, at, depth + 1).is_some())
        {
            return Some(format!("{at}: fits none of the declared {key} types"));
        }
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for part in all {
            if let Some(found) = check(root, part, value, at, depth + 1) {
                return Some(found);
            }
        }
    }
    if let Value::Object(object) = value {
        let properties = schema.get("properties").and_then(Value::as_object);
        if let Some(required) = schema.get("required").and_then(Value::as_array) {
            for key in required.iter().filter_map(Value::as_str) {
                if !object.contains_key(key) {
                    return Some(format!(
                        "{at}: the required key '{}' is missing",
                        shown(key)
                    ));
                }
            }
        }
        for (key, item) in object {
            match properties.and_then(|p| p.get(key)) {
                Some(property) => {
                    let here = format!("{at}.{}", shown(key));
                    if let Some(found) = check(root, property, item, &here, depth + 1) {
                        return Some(found);
                    }
                }
                None => match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) => {
                        return Some(format!("{at}: a key the schema does not declare"));
                    }
                    Some(extra @ Value::Object(_)) => {
                        let here = format!("{at}.*");
                        if let Some(found) = check(root, extra, item, &here, depth + 1) {
                            return Some(found);
                        }
                    }
                    _ => {}
                },
            }
        }
    }
    if let (Value::Array(items), Some(item_schema)) = (value, schema.get("items"))
        && item_schema.is_object()
    {
        for (i, item) in items.iter().enumerate() {
            if let Some(found) = check(root, item_schema, item, &format!("{at}[{i}]"), depth + 1) {
                return Some(found);
            }
        }
    }
    None
}

/// A key as the report shows it: a field name as it is, anything else (it
/// may be personal data) as `<key>`.
fn shown(key: &str) -> &str {
    if crate::keys::is_field_name(key) {
        key
    } else {
        "<key>"
    }
}

fn is_type(value: &Value, name: &str) -> bool {
    match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        // A type this check does not know: taken as kept.
        _ => true,
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_fitting_result_has_no_violation() {
        let schema = json!({"type": "object", "required": ["id"],
            "properties": {"id": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}}});
        assert_eq!(violation(&schema, &json!({"id": 3, "tags": ["a"]})), None);
    }

    #[test]
    fn each_break_is_named_by_its_place() {
        let schema = json!({"type": "object", "required": ["id"],
            "properties": {"id": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}}});
        assert_eq!(
            violation(&schema, &json!({"tags": []})).as_deref(),
            Some("$: the required key 'id' is missing")
        );
        assert_eq!(
            violation(&schema, &json!({"id": 1, "tags": ["a", 2]})).as_deref(),
            Some("$.tags[1]: expected string, got integer")
        );
        assert_eq!(
            violation(&json!({"type": "object"}), &json!([1])).as_deref(),
            Some("$: expected object, got array")
        );
    }

    #[test]
    fn refs_unions_and_closed_objects_are_followed() {
        let schema = json!({"$defs": {"n": {"type": ["integer", "null"]}},
            "type": "object", "additionalProperties": false,
            "properties": {"a": {"$ref": "#/$defs/n"}, "b": {"anyOf": [{"type": "string"}, {"type": "boolean"}]}}});
        assert_eq!(violation(&schema, &json!({"a": null, "b": true})), None);
        assert!(violation(&schema, &json!({"a": "x"})).is_some());
        assert!(violation(&schema, &json!({"b": 1})).is_some());
        assert_eq!(
            violation(&schema, &json!({"ann@example.com": 1})).as_deref(),
            Some("$: a key the schema does not declare")
        );
    }

    #[test]
    fn what_it_cannot_follow_is_taken_as_kept() {
        // A remote reference, an unknown type, narrowing keywords.
        let schema = json!({"properties": {"a": {"$ref": "https://x/y.json"},
            "b": {"type": "decimal"}, "c": {"type": "string", "maxLength": 1, "pattern": "^z$"}}});
        assert_eq!(
            violation(&schema, &json!({"a": 1, "b": 2, "c": "long"})),
            None
        );
        // A self-referencing schema ends.
        let cyclic = json!({"$ref": "#"});
        assert_eq!(violation(&cyclic, &json!(1)), None);
    }

    #[test]
    fn a_key_that_is_data_is_not_written_into_the_report() {
        let schema = json!({"properties": {"ann@example.com": {"type": "string"}}});
        let found = violation(&schema, &json!({"ann@example.com": 1})).unwrap_or_default();
        assert!(!found.contains("ann@"), "{found}");
    }
}
