//! Refusing a config whose objects name a key twice.
//!
//! JSON parsers keep the last of two equal keys, so `{"rules": {"x": "deny",
//! "x": "allow"}}` would quietly allow what the first line denies. The config
//! is read once through [`Unique`] before it is parsed, and such a file is
//! refused with the key's position.

use std::collections::HashSet;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

/// Any JSON value whose objects have distinct keys, all the way down.
pub struct Unique;

impl<'de> Deserialize<'de> for Unique {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueVisitor)
    }
}

struct UniqueVisitor;

impl<'de> Visitor<'de> for UniqueVisitor {
    type Value = Unique;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_str<E>(self, _: &str) -> Result<Unique, E> {
        Ok(Unique)
    }
    fn visit_unit<E>(self) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Unique, A::Error> {
        while seq.next_element::<Unique>()?.is_some() {}
        Ok(Unique)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Unique, A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                // Before its value: the error's position is the key's.
                return Err(de::Error::custom(format!(
                    "\"{key}\" appears twice in one object; keep one (JSON would silently use the last)"
                )));
            }
            map.next_value::<Unique>()?;
        }
        Ok(Unique)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<(), String> {
        serde_json::from_str::<Unique>(text)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_key_twice_in_one_object_is_refused_at_any_depth() {
        assert!(check(r#"{"a": 1, "b": {"a": 2}, "c": [{"a": 1}, {"a": 2}]}"#).is_ok());
        let twice = check("{\"policy\": {\"rules\": {\n\"x.y\": \"deny\",\n\"x.y\": \"allow\"}}}");
        let error = twice.err().unwrap_or_default();
        assert!(
            error.contains("\"x.y\" appears twice") && error.contains("line 3"),
            "{error}"
        );
        assert!(check(r#"[{"a": 1, "a": 1}]"#).is_err());
    }
}
