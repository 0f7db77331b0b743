//! Personal data out of audit lines.

use serde_json::Value;

/// `text` with every email, phone number, card number, IBAN, address and
/// secret the detector finds replaced by its kind (`[EMAIL]`).
pub fn redact(text: &str) -> String {
    let found = cem_pii::detect(text);
    if found.is_empty() {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for e in found {
        if e.start < at {
            continue;
        }
        out.push_str(&text[at..e.start]);
        out.push('[');
        out.push_str(e.kind.label());
        out.push(']');
        at = e.end;
    }
    out.push_str(&text[at..]);
    out
}

/// Redacts every string in `value`, keys included, except digests (hex
/// that a detector could mistake for a key, and that must stay exact).
pub(crate) fn redact_value(value: &mut Value) {
    match value {
        Value::String(s) => {
            let clean = redact(s);
            if clean != *s {
                *s = clean;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_value),
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let Some(mut item) = map.remove(&key) else {
                    continue;
                };
                if !key.ends_with("digest") {
                    redact_value(&mut item);
                }
                map.insert(redact(&key), item);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn personal_data_is_replaced_by_its_kind() {
        let text =
            "mail ana@example.com or call +1 415 555 2671, key sk-proj-abcdefghijklmnopqrstuvwx";
        let clean = redact(text);
        assert!(!clean.contains("ana@example.com"), "{clean}");
        assert!(!clean.contains("555 2671"), "{clean}");
        assert!(!clean.contains("abcdefghijklmnop"), "{clean}");
        assert!(clean.starts_with("mail [EMAIL"), "{clean}");
        let mut v = json!({"error": "no user ana@example.com", "args_digest": "sha256:0123456789abcdef0123456789abcdef", "ana@example.com": 1});
        redact_value(&mut v);
        let text = v.to_string();
        assert!(!text.contains("ana@"), "{text}");
        assert!(text.contains("sha256:0123456789abcdef0123456789abcdef"));
    }
}
