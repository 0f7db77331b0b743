//! A shape: what was seen at one place of a result, with counts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::format::Format;
use crate::keys::{is_field_name, looks_like_map};
use crate::{MAX_DEPTH, MAX_FIELDS, MAX_NODES};

/// Items of one array a shape is learned from (and checked against): the
/// first ones. A result of a million rows costs no more than one of this
/// many, and rows of one list are alike.
pub const MAX_ITEMS: usize = 256;

/// The types seen at one place, each with how often: a union of them.
/// Counts are of values seen there, so a field's count is how many of its
/// objects had it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Shape {
    #[serde(skip_serializing_if = "is_zero")]
    pub null: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub boolean: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub integer: u64,
    /// Numbers with a fraction (integers seen too make the place a number).
    #[serde(skip_serializing_if = "is_zero")]
    pub number: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub string: Option<Strings>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub array: Option<Box<Array>>,
    /// Objects whose keys are field names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<Box<Object>>,
    /// Objects keyed by data (`dict[str, T]`): their keys are not kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub map: Option<Box<MapOf>>,
    /// Values past a bound (depth, size): anything.
    #[serde(skip_serializing_if = "is_zero")]
    pub any: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Strings seen, and how many of them had each format.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Strings {
    pub count: u64,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub formats: BTreeMap<Format, u64>,
}

impl Strings {
    /// The format every string seen here had, if one did.
    pub fn format(&self) -> Option<Format> {
        self.formats
            .iter()
            .find(|(_, n)| **n == self.count && self.count > 0)
            .map(|(f, _)| *f)
    }
}

/// Arrays seen, and the shape of their items (empty if all were empty).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Array {
    pub count: u64,
    pub items: Shape,
}

/// Objects seen with field names for keys, and each field's shape.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Object {
    pub count: u64,
    pub fields: BTreeMap<String, Shape>,
}

impl Object {
    /// Whether every object seen here had `field`.
    pub fn required(&self, field: &Shape) -> bool {
        field.seen() >= self.count
    }
}

/// Objects seen keyed by data, and the shape of their values.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MapOf {
    pub count: u64,
    pub values: Shape,
}

impl Shape {
    /// The shape of one value, within the bounds.
    pub fn of(value: &Value) -> Shape {
        let mut shape = observe(value, 0);
        shape.bound();
        shape
    }

    /// Values seen here, of any type.
    pub fn seen(&self) -> u64 {
        self.null
            + self.boolean
            + self.integer
            + self.number
            + self.string.as_ref().map_or(0, |s| s.count)
            + self.array.as_ref().map_or(0, |a| a.count)
            + self.object.as_ref().map_or(0, |o| o.count)
            + self.map.as_ref().map_or(0, |m| m.count)
            + self.any
    }

    /// Whether nothing was seen here.
    pub fn is_empty(&self) -> bool {
        self.seen() == 0
    }

    /// Types at a place, counted over the whole shape: what [`MAX_NODES`]
    /// bounds.
    pub fn nodes(&self) -> usize {
        let scalars = [self.null, self.boolean, self.integer, self.number, self.any]
            .iter()
            .filter(|n| **n > 0)
            .count()
            + usize::from(self.string.is_some());
        scalars
            + self.array.as_ref().map_or(0, |a| 1 + a.items.nodes())
            + self.object.as_ref().map_or(0, |o| {
                1 + o.fields.values().map(Shape::nodes).sum::<usize>()
            })
            + self.map.as_ref().map_or(0, |m| 1 + m.values.nodes())
    }

    /// `other` seen here too: counts add, unions grow, an object and a map
    /// at one place make a map, and the bounds hold.
    pub fn merge(&mut self, other: Shape) {
        self.merge_unbounded(other);
        self.bound();
    }

    fn merge_unbounded(&mut self, other: Shape) {
        self.null += other.null;
        self.boolean += other.boolean;
        self.integer += other.integer;
        self.number += other.number;
        self.any += other.any;
        if let Some(s) = other.string {
            let mine = self.string.get_or_insert_with(Strings::default);
            mine.count += s.count;
            for (f, n) in s.formats {
                *mine.formats.entry(f).or_default() += n;
            }
        }
        if let Some(a) = other.array {
            let mine = self.array.get_or_insert_with(Box::default);
            mine.count += a.count;
            mine.items.merge_unbounded(a.items);
        }
        if let Some(o) = other.object {
            let mine = self.object.get_or_insert_with(Box::default);
            mine.count += o.count;
            for (k, v) in o.fields {
                mine.fields.entry(k).or_default().merge_unbounded(v);
            }
        }
        if let Some(m) = other.map {
            let mine = self.map.get_or_insert_with(Box::default);
            mine.count += m.count;
            mine.values.merge_unbounded(m.values);
        }
        let too_many = self
            .object
            .as_ref()
            .is_some_and(|o| o.fields.len() > MAX_FIELDS);
        if too_many || (self.object.is_some() && self.map.is_some()) {
            self.object_into_map();
        }
    }

    /// The objects here become a map of what their fields held.
    fn object_into_map(&mut self) {
        let Some(object) = self.object.take() else {
            return;
        };
        let map = self.map.get_or_insert_with(Box::default);
        map.count += object.count;
        for field in object.fields.into_values() {
            map.values.merge_unbounded(field);
        }
    }

    /// Cuts levels from the deepest up until the shape has at most
    /// [`MAX_NODES`] nodes, and anything below [`MAX_DEPTH`].
    fn bound(&mut self) {
        let mut depth = MAX_DEPTH;
        self.cut(0, depth);
        while self.nodes() > MAX_NODES && depth > 0 {
            depth -= 1;
            self.cut(0, depth);
        }
    }

    fn cut(&mut self, at: usize, limit: usize) {
        if at >= limit {
            if !self.is_empty() && (self.nodes() > 1 || self.any == 0) {
                *self = Shape {
                    any: self.seen().max(1),
                    ..Shape::default()
                };
            }
            return;
        }
        if let Some(a) = &mut self.array {
            a.items.cut(at + 1, limit);
        }
        if let Some(o) = &mut self.object {
            for f in o.fields.values_mut() {
                f.cut(at + 1, limit);
            }
        }
        if let Some(m) = &mut self.map {
            m.values.cut(at + 1, limit);
        }
    }

    /// Whether `value` is within this shape as it is: seeing it would widen
    /// nothing (no new type, field, missing required field or broken
    /// format). Arrays are checked on their first [`MAX_ITEMS`] items, as
    /// they are learned.
    pub fn fits(&self, value: &Value) -> bool {
        self.fits_at(value, 0)
    }

    fn fits_at(&self, value: &Value, depth: usize) -> bool {
        if self.any > 0 {
            return true;
        }
        if depth >= MAX_DEPTH {
            return false;
        }
        match value {
            Value::Null => self.null > 0,
            Value::Bool(_) => self.boolean > 0,
            Value::Number(n) if n.is_i64() || n.is_u64() => self.integer > 0 || self.number > 0,
            Value::Number(_) => self.number > 0,
            Value::String(s) => self.string.as_ref().is_some_and(|st| match st.format() {
                Some(f) => Format::of(s) == Some(f),
                None => true,
            }),
            Value::Array(items) => self.array.as_ref().is_some_and(|a| {
                items
                    .iter()
                    .take(MAX_ITEMS)
                    .all(|v| a.items.fits_at(v, depth + 1))
            }),
            Value::Object(o) => {
                if looks_like_map(o) {
                    return self.map.as_ref().is_some_and(|m| {
                        o.values()
                            .take(MAX_ITEMS)
                            .all(|v| m.values.fits_at(v, depth + 1))
                    });
                }
                let as_object = self.object.as_ref().is_some_and(|obj| {
                    o.iter()
                        .all(|(k, v)| obj.fields.get(k).is_some_and(|f| f.fits_at(v, depth + 1)))
                        && obj
                            .fields
                            .iter()
                            .all(|(k, f)| !obj.required(f) || o.contains_key(k))
                });
                as_object
                    || self
                        .map
                        .as_ref()
                        .is_some_and(|m| o.values().all(|v| m.values.fits_at(v, depth + 1)))
            }
        }
    }

    /// The field names the shape holds, each once, for search to match.
    pub fn field_names(&self) -> Vec<String> {
        let mut names = std::collections::BTreeSet::new();
        self.collect_names(&mut names);
        names.into_iter().collect()
    }

    fn collect_names(&self, names: &mut std::collections::BTreeSet<String>) {
        if let Some(a) = &self.array {
            a.items.collect_names(names);
        }
        if let Some(o) = &self.object {
            for (k, f) in &o.fields {
                names.insert(k.clone());
                f.collect_names(names);
            }
        }
        if let Some(m) = &self.map {
            m.values.collect_names(names);
        }
    }

    /// A shape read back from storage, held to what a learned one may be:
    /// a key that is not a field name makes its object a map (so it is
    /// dropped), and the bounds hold.
    pub fn sanitized(mut self) -> Shape {
        self.sanitize(0);
        self.bound();
        self
    }

    fn sanitize(&mut self, depth: usize) {
        if depth > MAX_DEPTH {
            return;
        }
        if let Some(a) = &mut self.array {
            a.items.sanitize(depth + 1);
        }
        if let Some(m) = &mut self.map {
            m.values.sanitize(depth + 1);
        }
        let bad = self
            .object
            .as_ref()
            .is_some_and(|o| o.fields.keys().any(|k| !is_field_name(k)));
        if bad {
            self.object_into_map();
        }
        if let Some(o) = &mut self.object {
            for f in o.fields.values_mut() {
                f.sanitize(depth + 1);
            }
        }
    }
}

fn observe(value: &Value, depth: usize) -> Shape {
    if depth >= MAX_DEPTH {
        return Shape {
            any: 1,
            ..Shape::default()
        };
    }
    let mut shape = Shape::default();
    match value {
        Value::Null => shape.null = 1,
        Value::Bool(_) => shape.boolean = 1,
        Value::Number(n) if n.is_i64() || n.is_u64() => shape.integer = 1,
        Value::Number(_) => shape.number = 1,
        Value::String(s) => {
            let mut formats = BTreeMap::new();
            if let Some(f) = Format::of(s) {
                formats.insert(f, 1);
            }
            shape.string = Some(Strings { count: 1, formats });
        }
        Value::Array(items) => {
            let mut of_items = Shape::default();
            for item in items.iter().take(MAX_ITEMS) {
                of_items.merge_unbounded(observe(item, depth + 1));
            }
            shape.array = Some(Box::new(Array {
                count: 1,
                items: of_items,
            }));
        }
        Value::Object(o) if looks_like_map(o) => {
            let mut values = Shape::default();
            for v in o.values().take(MAX_ITEMS) {
                values.merge_unbounded(observe(v, depth + 1));
            }
            shape.map = Some(Box::new(MapOf { count: 1, values }));
        }
        Value::Object(o) => {
            let fields = o
                .iter()
                .map(|(k, v)| (k.clone(), observe(v, depth + 1)))
                .collect();
            shape.object = Some(Box::new(Object { count: 1, fields }));
        }
    }
    shape
}
