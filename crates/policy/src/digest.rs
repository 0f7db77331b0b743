//! What a tool is, as a digest: the parts of its definition that decide
//! what calling it does (name, description, input schema, annotations).

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The pinned part of a tool definition (an MCP `Tool` as JSON): `name`,
/// `description`, `inputSchema` and `annotations`, absent ones as null.
pub fn definition(tool: &Value) -> Value {
    let mut out = Map::new();
    for key in ["name", "description", "inputSchema", "annotations"] {
        out.insert(key.into(), tool.get(key).cloned().unwrap_or(Value::Null));
    }
    Value::Object(out)
}

/// `value` with every object's keys sorted, so two servers that send the
/// same schema in another key order get the same digest.
pub fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), canonical(&map[k])))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// `sha256:<hex>` of the canonical JSON of the tool's [`definition`].
pub fn digest(tool: &Value) -> String {
    let text = canonical(&definition(tool)).to_string();
    let hash = Sha256::digest(text.as_bytes());
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_and_other_fields_do_not_matter_but_the_pinned_parts_do() {
        let a = json!({"name": "t", "description": "d", "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}, "title": "T"});
        let b = json!({"inputSchema": {"properties": {"x": {"type": "string"}}, "type": "object"}, "description": "d", "name": "t", "outputSchema": {}});
        assert_eq!(digest(&a), digest(&b));
        let changed_schema = json!({"name": "t", "description": "d", "inputSchema": {"type": "object", "properties": {"x": {"type": "integer"}}}});
        let changed_text = json!({"name": "t", "description": "d!", "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}});
        let annotated = json!({"name": "t", "description": "d", "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}, "annotations": {"readOnlyHint": true}});
        for other in [changed_schema, changed_text, annotated] {
            assert_ne!(digest(&a), digest(&other));
        }
        assert!(digest(&a).starts_with("sha256:") && digest(&a).len() == 71);
    }
}
