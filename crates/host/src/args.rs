//! Tool arguments, checked with errors that name the argument.

use serde_json::{Map, Value};

use crate::ToolFailure;

/// The arguments of one call, checked against the names a tool accepts.
#[derive(Debug, Default)]
pub struct Args(Map<String, Value>);

impl Args {
    pub fn new(map: Option<Map<String, Value>>) -> Self {
        Self(map.unwrap_or_default())
    }

    /// The arguments as sent, for a check that takes them by `&mut` to
    /// look at them in place ([`crate::bounds::Bounds::check`]).
    pub fn as_map_mut(&mut self) -> &mut Map<String, Value> {
        &mut self.0
    }

    /// Refuses arguments outside `known`: a misspelt optional argument
    /// would otherwise be silently ignored.
    pub fn only(&self, known: &[&str]) -> Result<(), ToolFailure> {
        match self.0.keys().find(|k| !known.contains(&k.as_str())) {
            None => Ok(()),
            Some(k) if known.is_empty() => Err(ToolFailure(format!(
                "unknown argument '{k}'; this tool takes no arguments"
            ))),
            Some(k) => Err(ToolFailure(format!(
                "unknown argument '{k}'; expected {}",
                known.join(", ")
            ))),
        }
    }

    /// Whether `name` was given (and not as null).
    pub fn is_set(&self, name: &str) -> bool {
        self.0.get(name).is_some_and(|v| !v.is_null())
    }

    /// A required string argument.
    pub fn string(&self, name: &str) -> Result<String, ToolFailure> {
        match self.0.get(name) {
            Some(Value::String(s)) => Ok(s.clone()),
            None | Some(Value::Null) => Err(ToolFailure(format!(
                "missing required argument '{name}' (a string)"
            ))),
            Some(other) => Err(ToolFailure(format!(
                "argument '{name}' must be a string, got {}",
                kind(other)
            ))),
        }
    }

    /// An optional whole number (absent or null: `None`).
    pub fn opt_u64(&self, name: &str) -> Result<Option<u64>, ToolFailure> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
            // 30.0 from clients that send every number as a float.
            Some(Value::Number(n))
                if n.as_f64()
                    .is_some_and(|f| f >= 0.0 && f.fract() == 0.0 && f < u64::MAX as f64) =>
            {
                Ok(n.as_f64().map(|f| f as u64))
            }
            Some(other) => Err(ToolFailure(format!(
                "argument '{name}' must be a whole number from 0 to {}, got {}",
                u64::MAX,
                describe(other)
            ))),
        }
    }

    /// An optional boolean.
    pub fn opt_bool(&self, name: &str) -> Result<Option<bool>, ToolFailure> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(ToolFailure(format!(
                "argument '{name}' must be true or false, got {}",
                kind(other)
            ))),
        }
    }

    /// An optional JSON object.
    pub fn opt_object(&self, name: &str) -> Result<Option<Map<String, Value>>, ToolFailure> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m.clone())),
            Some(other) => Err(ToolFailure(format!(
                "argument '{name}' must be an object of variable names to values, got {}",
                kind(other)
            ))),
        }
    }

    /// An optional array of strings (absent or null: empty).
    pub fn opt_strings(&self, name: &str) -> Result<Vec<String>, ToolFailure> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(ToolFailure(format!(
                        "argument '{name}' must be an array of strings, and one item is {}",
                        describe(other)
                    ))),
                })
                .collect(),
            Some(other) => Err(ToolFailure(format!(
                "argument '{name}' must be an array of strings, got {}",
                kind(other)
            ))),
        }
    }

    /// An optional string argument (absent or null: `None`).
    pub fn opt_string(&self, name: &str) -> Result<Option<String>, ToolFailure> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(_) => self.string(name).map(Some),
        }
    }
}

/// The kind of a value, with the value itself when it is short.
fn describe(value: &Value) -> String {
    let text = value.to_string();
    if text.len() <= 20 {
        format!("{} ({text})", kind(value))
    } else {
        kind(value).to_string()
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Args {
        Args::new(v.as_object().cloned())
    }

    #[test]
    fn whole_numbers_out_of_range_are_refused_not_clamped() {
        assert_eq!(args(json!({"limit": 30.0})).opt_u64("limit"), Ok(Some(30)));
        for bad in [json!(-1), json!(1.5), json!(1.2e21)] {
            let got = args(json!({ "limit": bad })).opt_u64("limit");
            assert!(
                got.as_ref()
                    .is_err_and(|e| e.0.contains("must be a whole number from 0 to")),
                "{bad}: {got:?}"
            );
        }
    }

    #[test]
    fn names_the_argument_in_every_error() {
        let a = args(json!({"filename": 3, "extra": true}));
        assert_eq!(
            a.only(&["filename", "content"]),
            Err(ToolFailure(
                "unknown argument 'extra'; expected filename, content".into()
            ))
        );
        assert_eq!(
            a.string("filename"),
            Err(ToolFailure(
                "argument 'filename' must be a string, got a number".into()
            ))
        );
        assert_eq!(
            a.string("content"),
            Err(ToolFailure(
                "missing required argument 'content' (a string)".into()
            ))
        );
        assert_eq!(
            args(json!({"subpath": null})).opt_string("subpath"),
            Ok(None)
        );
        assert_eq!(
            args(json!({"x": 1})).only(&[]),
            Err(ToolFailure(
                "unknown argument 'x'; this tool takes no arguments".into()
            ))
        );
    }
}
