//! A shape as JSON Schema: what the wrappers type their results from and
//! the definitions show, as they do a declared `outputSchema`.

use serde_json::{Map, Value, json};

use crate::shape::Shape;

/// The JSON Schema of `shape`: one type, or `anyOf` the types seen (a
/// place seen as anything is `{}`). Objects list their fields, `required`
/// those every object had; maps are `additionalProperties`; strings carry
/// the format all of them had.
pub fn to_schema(shape: &Shape) -> Value {
    if shape.any > 0 || shape.is_empty() {
        return json!({});
    }
    let mut types = Vec::new();
    if let Some(o) = &shape.object {
        let properties: Map<String, Value> = o
            .fields
            .iter()
            .map(|(k, f)| (k.clone(), to_schema(f)))
            .collect();
        let required: Vec<&String> = o
            .fields
            .iter()
            .filter(|(_, f)| o.required(f))
            .map(|(k, _)| k)
            .collect();
        let mut schema = json!({"type": "object", "properties": properties});
        if !required.is_empty() {
            schema["required"] = json!(required);
        }
        types.push(schema);
    }
    if let Some(m) = &shape.map {
        types.push(json!({"type": "object", "additionalProperties": to_schema(&m.values)}));
    }
    if let Some(a) = &shape.array {
        types.push(json!({"type": "array", "items": to_schema(&a.items)}));
    }
    if let Some(s) = &shape.string {
        types.push(match s.format() {
            Some(f) => json!({"type": "string", "format": f.name()}),
            None => json!({"type": "string"}),
        });
    }
    if shape.number > 0 {
        types.push(json!({"type": "number"}));
    } else if shape.integer > 0 {
        types.push(json!({"type": "integer"}));
    }
    if shape.boolean > 0 {
        types.push(json!({"type": "boolean"}));
    }
    if shape.null > 0 {
        types.push(json!({"type": "null"}));
    }
    match types.len() {
        1 => types.pop().unwrap_or_else(|| json!({})),
        _ => json!({"anyOf": types}),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn learned(values: &[Value]) -> Shape {
        let mut shape = Shape::default();
        for v in values {
            shape.merge(Shape::of(v));
        }
        shape
    }

    #[test]
    fn keys_seen_every_time_are_required_and_the_others_optional() {
        let shape = learned(&[json!({"id": 1, "name": "a"}), json!({"id": 2})]);
        assert_eq!(
            to_schema(&shape),
            json!({"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
                   "required": ["id"]})
        );
    }

    #[test]
    fn arrays_give_their_items_shape_and_empty_ones_give_none() {
        let shape = learned(&[
            json!([{"sha": "abc", "when": "2026-12-02T10:00:00Z"}]),
            json!([]),
        ]);
        assert_eq!(
            to_schema(&shape),
            json!({"type": "array", "items": {"type": "object", "properties": {
                "sha": {"type": "string"}, "when": {"type": "string", "format": "date-time"}},
                "required": ["sha", "when"]}})
        );
        assert_eq!(
            to_schema(&learned(&[json!([])])),
            json!({"type": "array", "items": {}})
        );
    }

    #[test]
    fn unions_are_the_types_seen_and_integers_with_fractions_are_numbers() {
        let shape = learned(&[json!(1), json!(2.5), json!(null), json!("x")]);
        assert_eq!(
            to_schema(&shape),
            json!({"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "null"}]})
        );
    }

    #[test]
    fn a_format_holds_only_while_every_string_has_it() {
        let urls = learned(&[json!("https://a.invalid/x"), json!("https://b.invalid/")]);
        assert_eq!(to_schema(&urls), json!({"type": "string", "format": "uri"}));
        let mixed = learned(&[json!("https://a.invalid/x"), json!("not a link")]);
        assert_eq!(to_schema(&mixed), json!({"type": "string"}));
    }

    #[test]
    fn objects_keyed_by_data_are_maps_and_their_keys_are_not_kept() {
        let by_email =
            json!({"alice@example.com": {"visits": 3}, "bob@example.com": {"visits": 1}});
        let by_date = json!({"2026-12-01": 3, "2026-12-02": 5});
        let shape = learned(&[by_email]);
        assert_eq!(
            to_schema(&shape),
            json!({"type": "object", "additionalProperties": {"type": "object",
                   "properties": {"visits": {"type": "integer"}}, "required": ["visits"]}})
        );
        assert_eq!(
            to_schema(&learned(&[by_date])),
            json!({"type": "object", "additionalProperties": {"type": "integer"}})
        );
        let text = serde_json::to_string(&shape).unwrap_or_default();
        assert!(!text.contains("example.com"), "{text}");
    }

    #[test]
    fn an_object_and_a_map_at_one_place_are_a_map() {
        // The first call's ids read as names, the second's do not.
        let shape = learned(&[json!({"alpha": 1, "beta": 2}), json!({"2026-12-02": 3})]);
        assert_eq!(
            to_schema(&shape),
            json!({"type": "object", "additionalProperties": {"type": "integer"}})
        );
    }

    #[test]
    fn depth_is_capped_at_any() {
        let mut deep = json!("leaf");
        for _ in 0..20 {
            deep = json!({"next": deep});
        }
        let schema = to_schema(&Shape::of(&deep));
        let mut at = &schema;
        let mut levels = 0;
        while let Some(next) = at.get("properties").and_then(|p| p.get("next")) {
            at = next;
            levels += 1;
        }
        assert_eq!(levels, crate::MAX_DEPTH, "{schema}");
        assert_eq!(at, &json!({}));
    }

    #[test]
    fn a_shape_past_its_node_bound_is_cut_from_the_deepest_levels() {
        // 60 fields, each an object of 60 fields of distinct names: 3,600 nodes before the cut.
        let mut wide = serde_json::Map::new();
        for i in 0..60 {
            let mut inner = serde_json::Map::new();
            for j in 0..60 {
                inner.insert(format!("f{i}x{j}"), json!(j));
            }
            wide.insert(format!("g{i}"), Value::Object(inner));
        }
        let shape = Shape::of(&Value::Object(wide));
        assert!(shape.nodes() <= crate::MAX_NODES, "{}", shape.nodes());
        let object = shape.object.as_ref().map(|o| o.fields.len());
        assert_eq!(object, Some(60));
    }

    #[test]
    fn a_value_fits_until_it_brings_something_new() {
        let shape = learned(&[json!({"id": 1, "tags": ["a"], "at": "2026-12-02"})]);
        assert!(shape.fits(&json!({"id": 7, "tags": [], "at": "2025-01-01"})));
        assert!(
            !shape.fits(&json!({"id": 7, "tags": [], "at": "yesterday"})),
            "format broken"
        );
        assert!(
            !shape.fits(&json!({"id": 7, "tags": []})),
            "required field missing"
        );
        assert!(
            !shape.fits(&json!({"id": 7, "tags": [], "at": "2025-01-01", "new": 1})),
            "new field"
        );
        assert!(
            !shape.fits(&json!({"id": 1.5, "tags": [], "at": "2025-01-01"})),
            "number where integers were"
        );
        assert!(!shape.fits(&json!([1])), "another type");
    }
}
