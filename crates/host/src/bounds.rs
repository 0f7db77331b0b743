//! The size bounds a tool's input schema declares (`maxLength` on strings,
//! `maxItems` on arrays, `maxProperties` on objects), checked on a call's
//! arguments before any work is done for it.
//!
//! Nothing else bounds what an argument costs: a tool that searches, scans
//! or tokenizes its input spends time in proportion to it (a 61 MB tool
//! name was half an hour of one core in the suggestion search). One checker
//! serves every tool: the server's own, whose schemas declare a bound on
//! every string, array and free object, and the upstreams' (called from
//! code through the gate), held to what their schemas declare and nothing
//! more.
//!
//! Only sizes are checked here; types, enums, patterns and the rest are the
//! tool's own to check. Lengths are counted in characters (Unicode scalar
//! values), as JSON Schema counts them. The checker follows `properties`,
//! `additionalProperties`, `items`, `prefixItems` (and the older array form
//! of `items` with `additionalItems`), `allOf`, `anyOf`, `oneOf` and local
//! `$ref`s (`#/$defs/…`, `#/definitions/…`). Under `anyOf`/`oneOf` a value
//! is refused only when every branch of its type refuses it. Keys matched
//! by `patternProperties` are not checked (a schema with them has its
//! `additionalProperties` skipped too, as which keys those cover would need
//! the patterns). A schema whose branches multiply the work beyond a fixed
//! number of steps is checked no further: the tool still checks its input.

use std::fmt;

use serde_json::{Map, Value};

/// The keywords this checker enforces.
const KEYWORDS: [&str; 3] = ["maxLength", "maxItems", "maxProperties"];

/// The most schema-and-value pairs one check visits. A plain schema visits
/// each part of the value once; only branches (`anyOf` over `$ref`s that
/// recurse) could multiply that, and past this the check gives up rather
/// than spend what it exists to save.
const MAX_STEPS: u32 = 1_000_000;

/// The most `$ref`s followed in a row without going into the value (a
/// chain of references that loops would otherwise never end).
const MAX_REF_HOPS: u8 = 16;

/// The longest argument path a refusal shows.
const MAX_PATH: usize = 200;

/// An input schema that declares at least one size bound.
#[derive(Debug, Clone)]
pub struct Bounds {
    root: Value,
}

/// Which size went over its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// A string's length, in characters (`maxLength`).
    Characters,
    /// An array's items (`maxItems`).
    Items,
    /// An object's keys (`maxProperties`).
    Keys,
}

impl Measure {
    fn keyword(self) -> &'static str {
        match self {
            Measure::Characters => "maxLength",
            Measure::Items => "maxItems",
            Measure::Keys => "maxProperties",
        }
    }
}

/// An argument over a bound its tool's schema declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Oversize {
    /// Where it is: `tool_name`, `filter.tags[3]`; empty for the arguments
    /// as a whole.
    pub path: String,
    pub measure: Measure,
    pub size: u64,
    pub limit: u64,
}

impl fmt::Display for Oversize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.path.is_empty() {
            "the arguments".to_string()
        } else {
            format!("argument '{}'", self.path)
        };
        let (verb, unit, count) = match self.measure {
            Measure::Characters => ("is", "characters long", "characters"),
            Measure::Items => ("has", "items", "items"),
            Measure::Keys => ("has", "keys", "keys"),
        };
        write!(
            f,
            "{what} {verb} {} {unit}, over the {} the tool's input schema allows ({}): \
             send at most {} {count} there, or split the work over several calls",
            self.size,
            self.limit,
            self.measure.keyword(),
            self.limit,
        )
    }
}

impl std::error::Error for Oversize {}

impl Bounds {
    /// The bounds `schema` declares; `None` when it declares none, so a
    /// tool without bounds costs nothing at each call.
    pub fn of(schema: &Value) -> Option<Bounds> {
        declares_any(schema, 0).then(|| Bounds {
            root: schema.clone(),
        })
    }

    /// `Err` names the first argument found over its bound. The map is
    /// taken for the check and put back as it was: arguments may be tens
    /// of megabytes, and are never copied.
    pub fn check(&self, arguments: &mut Map<String, Value>) -> Result<(), Oversize> {
        let value = Value::Object(std::mem::take(arguments));
        let checked = self.check_value(&value);
        if let Value::Object(map) = value {
            *arguments = map;
        }
        checked
    }

    /// [`Bounds::check`] of any JSON value (the arguments as a whole).
    pub fn check_value(&self, value: &Value) -> Result<(), Oversize> {
        let mut walk = Walk {
            root: &self.root,
            steps: 0,
            path: Vec::new(),
        };
        match walk.visit(&self.root, value, 0) {
            Err(Stop::Over(o)) => Err(o),
            Err(Stop::TooMuchWork) => {
                tracing::debug!("an input schema's size bounds were too costly to check in full");
                Ok(())
            }
            Ok(()) => Ok(()),
        }
    }
}

/// Whether `schema` has a size bound anywhere (as a keyword, not a
/// property's name).
fn declares_any(schema: &Value, depth: usize) -> bool {
    // Deeper than any real schema: a pathological one is not walked.
    if depth > 64 {
        return false;
    }
    match schema {
        Value::Object(map) => map.iter().any(|(key, value)| {
            if key == "properties" || key == "$defs" || key == "definitions" {
                // Maps of names to schemas: the names are not keywords.
                value
                    .as_object()
                    .is_some_and(|m| m.values().any(|s| declares_any(s, depth + 1)))
            } else {
                (KEYWORDS.contains(&key.as_str()) && value.is_number())
                    || declares_any(value, depth + 1)
            }
        }),
        Value::Array(items) => items.iter().any(|s| declares_any(s, depth + 1)),
        _ => false,
    }
}

enum Stop {
    Over(Oversize),
    TooMuchWork,
}

/// One piece of an argument's path.
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

struct Walk<'a> {
    root: &'a Value,
    steps: u32,
    path: Vec<Step<'a>>,
}

impl<'a> Walk<'a> {
    fn visit(&mut self, schema: &'a Value, value: &'a Value, hops: u8) -> Result<(), Stop> {
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return Err(Stop::TooMuchWork);
        }
        let Some(schema) = schema.as_object() else {
            return Ok(());
        };
        if let Some(target) = schema.get("$ref").and_then(Value::as_str)
            && hops < MAX_REF_HOPS
            && let Some(referred) = self.resolve(target)
        {
            self.visit(referred, value, hops + 1)?;
        }
        if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
            for branch in all {
                self.visit(branch, value, hops)?;
            }
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(branches) = schema.get(key).and_then(Value::as_array) {
                self.any(branches, value, hops)?;
            }
        }
        match value {
            Value::String(text) => {
                if let Some(limit) = bound(schema, "maxLength")
                    // A string has at least as many bytes as characters:
                    // counting is needed only past the bound in bytes.
                    && text.len() as u64 > limit
                {
                    let size = text.chars().count() as u64;
                    if size > limit {
                        return Err(self.over(Measure::Characters, size, limit));
                    }
                }
            }
            Value::Array(items) => {
                if let Some(limit) = bound(schema, "maxItems")
                    && items.len() as u64 > limit
                {
                    return Err(self.over(Measure::Items, items.len() as u64, limit));
                }
                self.items(schema, items)?;
            }
            Value::Object(members) => {
                if let Some(limit) = bound(schema, "maxProperties")
                    && members.len() as u64 > limit
                {
                    return Err(self.over(Measure::Keys, members.len() as u64, limit));
                }
                self.members(schema, members)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// `anyOf` / `oneOf`: refused only when every branch that takes a value
    /// of this type refuses it (a branch of another type is not the one
    /// the value was meant for; the type is the tool's to check).
    fn any(&mut self, branches: &'a [Value], value: &'a Value, hops: u8) -> Result<(), Stop> {
        let mut first = None;
        for branch in branches {
            if !self.takes_type(branch, value) {
                continue;
            }
            let depth = self.path.len();
            match self.visit(branch, value, hops) {
                Ok(()) => return Ok(()),
                Err(Stop::Over(o)) => {
                    self.path.truncate(depth);
                    first.get_or_insert(o);
                }
                Err(stop) => return Err(stop),
            }
        }
        first.map_or(Ok(()), |o| Err(Stop::Over(o)))
    }

    /// Whether `schema` (through a `$ref` or two) may take `value`'s type.
    fn takes_type(&self, schema: &'a Value, value: &Value) -> bool {
        let mut schema = schema;
        for _ in 0..MAX_REF_HOPS {
            match schema.get("$ref").and_then(Value::as_str) {
                Some(target) if schema.get("type").is_none() => match self.resolve(target) {
                    Some(referred) => schema = referred,
                    None => return true,
                },
                _ => break,
            }
        }
        let kind = match value {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        let named = |t: &Value| t == kind || (kind == "number" && t == "integer");
        match schema.get("type") {
            None => true,
            Some(Value::Array(types)) => types.iter().any(named),
            Some(t) => named(t),
        }
    }

    fn items(&mut self, schema: &'a Map<String, Value>, items: &'a [Value]) -> Result<(), Stop> {
        // 2020-12: prefixItems by position, then items for the rest; before
        // it, items as an array by position, then additionalItems.
        let (positional, rest) = match (schema.get("prefixItems"), schema.get("items")) {
            (Some(Value::Array(prefix)), rest) => (prefix.as_slice(), rest),
            (_, Some(Value::Array(prefix))) => (prefix.as_slice(), schema.get("additionalItems")),
            (_, rest) => (&[][..], rest),
        };
        for (index, item) in items.iter().enumerate() {
            let item_schema = positional.get(index).or(rest);
            if let Some(item_schema) = item_schema.filter(|s| s.is_object()) {
                self.path.push(Step::Index(index));
                self.visit(item_schema, item, 0)?;
                self.path.pop();
            }
        }
        Ok(())
    }

    fn members(
        &mut self,
        schema: &'a Map<String, Value>,
        members: &'a Map<String, Value>,
    ) -> Result<(), Stop> {
        let properties = schema.get("properties").and_then(Value::as_object);
        let additional = schema
            .get("additionalProperties")
            .filter(|s| s.is_object() && !schema.contains_key("patternProperties"));
        if properties.is_none() && additional.is_none() {
            return Ok(());
        }
        for (key, member) in members {
            let member_schema = properties.and_then(|p| p.get(key)).or(additional);
            if let Some(member_schema) = member_schema {
                self.path.push(Step::Key(key));
                self.visit(member_schema, member, 0)?;
                self.path.pop();
            }
        }
        Ok(())
    }

    /// A local reference (`#/$defs/Item`, JSON Pointer escapes included);
    /// `None` for any other.
    fn resolve(&self, target: &str) -> Option<&'a Value> {
        let pointer = target.strip_prefix('#')?;
        if pointer.is_empty() {
            return Some(self.root);
        }
        self.root.pointer(pointer)
    }

    fn over(&self, measure: Measure, size: u64, limit: u64) -> Stop {
        let mut path = String::new();
        for step in &self.path {
            match step {
                Step::Key(key) if path.is_empty() => path.push_str(key),
                Step::Key(key) => {
                    path.push('.');
                    path.push_str(key);
                }
                Step::Index(i) => path.push_str(&format!("[{i}]")),
            }
            if path.len() > MAX_PATH {
                break;
            }
        }
        if path.len() > MAX_PATH {
            let mut end = MAX_PATH;
            while !path.is_char_boundary(end) {
                end -= 1;
            }
            path.truncate(end);
            path.push('…');
        }
        Stop::Over(Oversize {
            path,
            measure,
            size,
            limit,
        })
    }
}

/// A size bound of `schema`, when it declares one as a whole number (a
/// float such as 10.0 counts as 10; a negative or other value as none).
fn bound(schema: &Map<String, Value>, keyword: &str) -> Option<u64> {
    let value = schema.get(keyword)?;
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|f| *f >= 0.0 && f.is_finite())
            .map(|f| f.floor() as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(schema: Value, value: Value) -> Result<(), Oversize> {
        match Bounds::of(&schema) {
            Some(bounds) => bounds.check_value(&value),
            None => Ok(()),
        }
    }

    fn over(path: &str, measure: Measure, size: u64, limit: u64) -> Result<(), Oversize> {
        Err(Oversize {
            path: path.into(),
            measure,
            size,
            limit,
        })
    }

    #[test]
    fn a_schema_without_bounds_is_not_kept() {
        let schema = json!({"type": "object", "properties": {
            "maxLength": {"type": "string"}, "q": {"type": "string", "description": "maxItems"}}});
        assert!(Bounds::of(&schema).is_none());
        assert!(Bounds::of(&json!({"properties": {"q": {"maxLength": 3}}})).is_some());
        assert!(Bounds::of(&json!({"$defs": {"Q": {"maxItems": 3}}})).is_some());
    }

    #[test]
    fn strings_are_counted_in_characters_not_bytes() {
        let schema = json!({"properties": {"name": {"type": "string", "maxLength": 3}}});
        // Three characters of two, three and four bytes: within the bound.
        assert_eq!(check(schema.clone(), json!({"name": "é€😀"})), Ok(()));
        assert_eq!(
            check(schema.clone(), json!({"name": "é€😀x"})),
            over("name", Measure::Characters, 4, 3)
        );
        assert_eq!(check(schema, json!({"name": "abc"})), Ok(()));
    }

    #[test]
    fn nested_objects_and_arrays_name_the_argument_by_its_path() {
        let schema = json!({"type": "object", "properties": {
            "filter": {"type": "object", "properties": {
                "tags": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 5}}}},
            "vars": {"type": "object", "maxProperties": 2},
            "extra": {"type": "object", "additionalProperties": {"maxLength": 1}}}});
        assert_eq!(
            check(
                schema.clone(),
                json!({"filter": {"tags": ["a", "b", "toolong"]}})
            ),
            over("filter.tags[2]", Measure::Characters, 7, 5)
        );
        assert_eq!(
            check(
                schema.clone(),
                json!({"filter": {"tags": ["a", "b", "c", "d"]}})
            ),
            over("filter.tags", Measure::Items, 4, 3)
        );
        assert_eq!(
            check(schema.clone(), json!({"vars": {"a": 1, "b": 2, "c": 3}})),
            over("vars", Measure::Keys, 3, 2)
        );
        assert_eq!(
            check(schema.clone(), json!({"extra": {"k": "xy"}})),
            over("extra.k", Measure::Characters, 2, 1)
        );
        // Types the bounds do not apply to are left to the tool.
        assert_eq!(
            check(
                schema,
                json!({"filter": {"tags": "not an array"}, "vars": 3})
            ),
            Ok(())
        );
    }

    #[test]
    fn tuples_by_position_in_both_forms() {
        let new = json!({"prefixItems": [{"maxLength": 1}], "items": {"maxLength": 2}});
        assert_eq!(check(new.clone(), json!(["a", "bb"])), Ok(()));
        assert_eq!(
            check(new, json!(["a", "bbb"])),
            over("[1]", Measure::Characters, 3, 2)
        );
        let old = json!({"items": [{"maxLength": 1}], "additionalItems": {"maxLength": 2}});
        assert_eq!(
            check(old, json!(["aa"])),
            over("[0]", Measure::Characters, 2, 1)
        );
    }

    #[test]
    fn references_and_branches_as_pydantic_writes_them() {
        // `note: str | None = Field(None, max_length=4)` in a nested model.
        let schema = json!({
            "$defs": {"Item": {"type": "object", "properties": {
                "note": {"anyOf": [{"type": "string", "maxLength": 4}, {"type": "null"}]}}}},
            "type": "object",
            "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"}}}});
        assert_eq!(
            check(
                schema.clone(),
                json!({"items": [{"note": null}, {"note": "abcd"}]})
            ),
            Ok(())
        );
        assert_eq!(
            check(schema, json!({"items": [{"note": "abcde"}]})),
            over("items[0].note", Measure::Characters, 5, 4)
        );
        // A branch of the value's type without the bound takes it.
        let either = json!({"anyOf": [{"type": "string", "maxLength": 2}, {"type": "string"}]});
        assert_eq!(check(either, json!("abc")), Ok(()));
        // allOf: every branch applies.
        let all = json!({"allOf": [{"maxLength": 5}, {"maxLength": 2}]});
        assert_eq!(
            check(all, json!("abc")),
            over("", Measure::Characters, 3, 2)
        );
    }

    #[test]
    fn loops_of_references_end() {
        let looped = json!({"$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A", "maxLength": 1}},
            "$ref": "#/$defs/A"});
        assert_eq!(
            check(looped, json!("ab")),
            over("", Measure::Characters, 2, 1)
        );
        // A recursive tree, followed as deep as the value goes.
        let tree = json!({"$defs": {"Node": {"type": "object", "properties": {
            "name": {"maxLength": 2}, "child": {"$ref": "#/$defs/Node"}}}},
            "$ref": "#/$defs/Node"});
        let value = json!({"name": "a", "child": {"name": "b", "child": {"name": "toolong"}}});
        assert_eq!(
            check(tree, value),
            over("child.child.name", Measure::Characters, 7, 2)
        );
    }

    #[test]
    fn the_refusal_says_what_to_do() {
        let text = Oversize {
            path: "tool_name".into(),
            measure: Measure::Characters,
            size: 5_000_000,
            limit: 512,
        }
        .to_string();
        assert_eq!(
            text,
            "argument 'tool_name' is 5000000 characters long, over the 512 the tool's input schema \
             allows (maxLength): send at most 512 characters there, or split the work over several \
             calls"
        );
    }
}
