//! The parts of an entry search reads beyond its name and description.

use serde_json::Value;

use crate::entry::Entry;

/// At most this many parameters of one tool are indexed: a generated
/// schema can hold thousands.
const MAX_PARAMETERS: usize = 64;
/// Nested objects are followed this deep (`options.filter.field`).
const MAX_DEPTH: usize = 3;

/// The names and descriptions of an entry's parameters, nested ones
/// included (object properties, array items), first-level ones first.
pub(crate) fn parameters(entry: &Entry) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    if let Some(schema) = &entry.input_schema {
        let mut level = vec![schema];
        for _ in 0..MAX_DEPTH {
            let mut next = Vec::new();
            for schema in level {
                let Some(props) = schema.get("properties").and_then(Value::as_object) else {
                    continue;
                };
                for (name, prop) in props {
                    if out.len() == MAX_PARAMETERS {
                        return out;
                    }
                    let description = prop.get("description").and_then(Value::as_str);
                    out.push((name.as_str(), description.unwrap_or_default()));
                    next.push(prop);
                    if let Some(items) = prop.get("items") {
                        next.push(items);
                    }
                }
            }
            level = next;
        }
    }
    out
}

/// Words that say what a tool's annotations say, for the lexical index:
/// an agent asking for a "read-only" or "destructive" tool finds them.
pub(crate) fn effect_words(entry: &Entry) -> &'static str {
    match (entry.effects.read_only, entry.effects.destructive) {
        (Some(true), _) => "readonly safe",
        (_, Some(true)) => "destructive",
        _ => "",
    }
}
