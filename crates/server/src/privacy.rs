//! Personal data on its way to the model and back. Each MCP session has a
//! vault; in automatic mode everything execute_code returns (and what
//! read_workspace_file reads) is tokenized with it, and tokens in the
//! arguments of tool calls from code are restored, for the upstreams the
//! config allows, before they leave the host.

use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

use cem_config::{PiiConfig, PiiMode};
use cem_pii::{Kind, Vault};
use serde_json::{Map, Value, json};

/// How long an unused session's vault is kept.
pub const VAULT_IDLE: std::time::Duration = std::time::Duration::from_secs(12 * 3600);
/// Vaults kept at once (the least recently used goes first).
pub const MAX_VAULTS: usize = 1024;
/// Bytes of values one vault holds before it forgets its oldest tokens.
pub const VAULT_BYTES: usize = 16 << 20;

/// The caller of a tool: which session's vault applies.
#[derive(Clone)]
pub struct Session {
    pub vault: Arc<Mutex<Vault>>,
}

impl Session {
    pub fn vault(&self) -> std::sync::MutexGuard<'_, Vault> {
        cem_pii::lock(&self.vault)
    }
}

/// The key of the session a request belongs to. An MCP session id when the
/// client has one (streamable HTTP); else, for stateless HTTP requests, the
/// bearer credential (hashed; each credential is one client); else the
/// connection (stdio: one client per process).
pub fn session_key(
    parts: Option<&axum::http::request::Parts>,
    connection: u64,
    hasher: &std::hash::RandomState,
) -> String {
    let Some(parts) = parts else {
        return format!("connection:{connection}");
    };
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(id) = header("mcp-session-id") {
        return format!("mcp-session:{id}");
    }
    match header("authorization") {
        Some(auth) => format!("credential:{:016x}", hasher.hash_one(auth)),
        None => "http-local".to_string(),
    }
}

/// Whether this config tokenizes answers automatically.
pub fn automatic(config: &PiiConfig) -> bool {
    config.mode == PiiMode::Auto
}

/// Tokenizes every string in `value` (object keys too), counting by kind.
pub fn tokenize_value(
    vault: &mut Vault,
    value: &mut Value,
    kinds: &[Kind],
    counts: &mut BTreeMap<Kind, usize>,
) {
    fn text(
        vault: &mut Vault,
        s: &str,
        kinds: &[Kind],
        counts: &mut BTreeMap<Kind, usize>,
    ) -> Option<String> {
        let t = vault.tokenize(s, kinds);
        if t.counts.is_empty() {
            return None;
        }
        for (k, n) in t.counts {
            *counts.entry(k).or_insert(0) += n;
        }
        Some(t.text)
    }
    match value {
        Value::String(s) => {
            if let Some(t) = text(vault, s, kinds, counts) {
                *s = t;
            }
        }
        Value::Array(items) => {
            for item in items {
                tokenize_value(vault, item, kinds, counts);
            }
        }
        Value::Object(map) => {
            let old = std::mem::take(map);
            let mut new = Map::with_capacity(old.len());
            for (k, mut v) in old {
                tokenize_value(vault, &mut v, kinds, counts);
                let key = text(vault, &k, kinds, counts).unwrap_or(k);
                new.insert(key, v);
            }
            *map = new;
        }
        _ => {}
    }
}

/// Restores the vault's tokens in every string of `value` (keys too);
/// returns how many were restored.
pub fn restore_value(vault: &Vault, value: &mut Value) -> usize {
    match value {
        Value::String(s) if Vault::has_tokens(s) => {
            let r = vault.restore(s);
            *s = r.text;
            r.restored
        }
        Value::Array(items) => items.iter_mut().map(|v| restore_value(vault, v)).sum(),
        Value::Object(map) => {
            let old = std::mem::take(map);
            let mut n = 0;
            for (k, mut v) in old {
                n += restore_value(vault, &mut v);
                let key = if Vault::has_tokens(&k) {
                    let r = vault.restore(&k);
                    n += r.restored;
                    r.text
                } else {
                    k
                };
                map.insert(key, v);
            }
            n
        }
        _ => 0,
    }
}

/// Whether `server.tool` may receive values restored from tokens:
/// `restore_to` lists servers (`git`), tools (`git.git_commit`) or `*`.
pub fn may_restore(restore_to: &[String], server: &str, tool: &str) -> bool {
    restore_to.iter().any(|rule| {
        rule == "*"
            || rule == server
            || rule
                .split_once('.')
                .is_some_and(|(s, t)| s == server && t == tool)
    })
}

/// The answer's summary of what was tokenized: `{"tokenized": 3, "by_type": {...}}`.
pub fn summary(counts: &BTreeMap<Kind, usize>) -> Value {
    let by_type: Map<String, Value> = counts
        .iter()
        .map(|(k, n)| (k.name().to_string(), json!(n)))
        .collect();
    json!({"tokenized": counts.values().sum::<usize>(), "by_type": by_type})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_keys_included() {
        let mut vault = Vault::new(1 << 20);
        let original = json!({"ana@example.com": ["call +44 20 7946 0958", 3, {"note": "none"}]});
        let mut v = original.clone();
        let mut counts = BTreeMap::new();
        tokenize_value(&mut vault, &mut v, &Kind::ALL, &mut counts);
        assert_eq!(
            v,
            json!({"[EMAIL_1]": ["call [PHONE_1]", 3, {"note": "none"}]})
        );
        assert_eq!(
            summary(&counts),
            json!({"tokenized": 2, "by_type": {"email": 1, "phone": 1}})
        );
        assert_eq!(restore_value(&vault, &mut v), 2);
        assert_eq!(v, original);
    }

    #[test]
    fn session_keys() {
        let hasher = std::hash::RandomState::new();
        let parts = |headers: &[(&str, &str)]| {
            let mut request = axum::http::Request::builder();
            for (k, v) in headers {
                request = request.header(*k, *v);
            }
            request.body(()).map(|r| r.into_parts().0).ok()
        };
        // stdio: the connection.
        assert_eq!(session_key(None, 7, &hasher), "connection:7");
        // HTTP with a session: the session, whatever the credential.
        let a = parts(&[("mcp-session-id", "abc"), ("authorization", "Bearer t1")]);
        assert_eq!(session_key(a.as_ref(), 1, &hasher), "mcp-session:abc");
        // Stateless HTTP: one vault per credential, never the same for two.
        let t1 = session_key(
            parts(&[("authorization", "Bearer t1")]).as_ref(),
            1,
            &hasher,
        );
        let t2 = session_key(
            parts(&[("authorization", "Bearer t2")]).as_ref(),
            2,
            &hasher,
        );
        assert!(t1.starts_with("credential:") && t1 != t2 && !t1.contains("t1"));
        assert_eq!(session_key(parts(&[]).as_ref(), 3, &hasher), "http-local");
    }

    #[test]
    fn restore_rules() {
        let rules = vec!["memory".to_string(), "filesystem.write_file".to_string()];
        assert!(may_restore(&rules, "memory", "create_entities"));
        assert!(may_restore(&rules, "filesystem", "write_file"));
        assert!(!may_restore(&rules, "filesystem", "move_file"));
        assert!(may_restore(&["*".to_string()], "git", "git_commit"));
        assert!(!may_restore(&[], "git", "git_commit"));
    }
}
