//! Which object keys are field names (kept in a shape) and which are data
//! (their object is a map, and no key of it is kept).

use serde_json::{Map, Value};

/// The longest key kept as a field name.
pub const MAX_KEY: usize = 64;

/// Whether `key` reads as a field name a program chose (`name`,
/// `created_at`, `@type`, `x-total`), not as data (an id, an email, a
/// date, a number, a hash, a person's name with a space, a path). Only
/// such keys are ever kept. A bare word that is data (`alice` as a
/// user's key) reads as a name here; such objects are caught by their
/// values instead ([`looks_like_map`]).
pub fn is_field_name(key: &str) -> bool {
    let mut chars = key.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    if key.len() > MAX_KEY || !(first.is_ascii_alphabetic() || matches!(first, '_' | '$' | '@')) {
        return false;
    }
    if !key
        .chars()
        .skip(1)
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return false;
    }
    // `v1`, `x86_64`, `sha256` are names; `u1234567`, `order20261202` are
    // ids: a run of four digits or more is a number, not a name.
    let longest_run = key
        .split(|c: char| !c.is_ascii_digit())
        .map(str::len)
        .max()
        .unwrap_or(0);
    if longest_run >= 4 {
        return false;
    }
    let digits = key.chars().filter(char::is_ascii_digit).count();
    // Hex of 8 digits or more (a hash, a commit, a UUID's parts).
    let hex = key.chars().filter(|c| c.is_ascii_hexdigit()).count();
    if key.len() >= 8 && hex == key.chars().filter(|c| *c != '-').count() && digits > 0 {
        return false;
    }
    // What the personal-data detector finds (an IPv6 address, a secret).
    cem_pii::detect(key).is_empty()
}

/// Whether the keys of `object` are data: any key that is not a field
/// name, more keys than [`crate::MAX_FIELDS`], or at least three keys whose
/// values are all objects (or all arrays) of one shape (records keyed by
/// their id: `{"alice": {…}, "bob": {…}, "carol": {…}}`).
pub fn looks_like_map(object: &Map<String, Value>) -> bool {
    if object.len() > crate::MAX_FIELDS || object.keys().any(|k| !is_field_name(k)) {
        return true;
    }
    if object.len() < 3 {
        return false;
    }
    let mut values = object.values();
    let Some(first) = values.next().map(skeleton) else {
        return false;
    };
    matches!(first, Skeleton::Object(_) | Skeleton::Array(_))
        && values.all(|v| skeleton(v) == first)
}

/// A value's structure to two levels, for comparing records.
#[derive(Debug, PartialEq)]
enum Skeleton {
    Scalar(&'static str),
    Array(usize),
    Object(Vec<String>),
}

fn skeleton(v: &Value) -> Skeleton {
    match v {
        Value::Null => Skeleton::Scalar("null"),
        Value::Bool(_) => Skeleton::Scalar("bool"),
        Value::Number(_) => Skeleton::Scalar("number"),
        Value::String(_) => Skeleton::Scalar("string"),
        // Arrays of records: the same skeleton when non-empty.
        Value::Array(a) => Skeleton::Array(usize::from(!a.is_empty())),
        Value::Object(o) => {
            let mut keys: Vec<String> = o.keys().cloned().collect();
            keys.sort();
            Skeleton::Object(keys)
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn field_names_are_kept_and_data_is_not() {
        for k in [
            "name",
            "created_at",
            "@type",
            "$ref",
            "x-total",
            "v1",
            "x86_64",
            "sha256",
            "isPrivate",
            "a.b",
        ] {
            assert!(is_field_name(k), "{k}");
        }
        for k in [
            "",
            "alice@example.com",
            "Alice Smith",
            "2026-12-02",
            "12345",
            "u1234567",
            "e3b0c44298fc1c14",
            "9f86d081-884c-4d65-9a2f-0b9a1a2b3c4d",
            "/etc/passwd",
            "192.168.0.1",
            "fe80::1",
            &"k".repeat(65),
        ] {
            assert!(!is_field_name(k), "{k}");
        }
    }

    #[test]
    fn records_keyed_by_id_are_a_map() -> Result<(), String> {
        let by_user = json!({"alice": {"age": 1}, "bob": {"age": 2}, "carol": {"age": 3}});
        let record = json!({"name": "x", "email": "y", "city": "z"});
        let two = json!({"min": {"x": 1}, "max": {"x": 2}});
        let (Some(by_user), Some(record), Some(two)) =
            (by_user.as_object(), record.as_object(), two.as_object())
        else {
            return Err("not objects".into());
        };
        assert!(looks_like_map(by_user));
        assert!(!looks_like_map(record));
        assert!(!looks_like_map(two));
        Ok(())
    }
}
