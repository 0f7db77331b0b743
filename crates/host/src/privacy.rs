//! Personal data on its way to the model and back. Each MCP session has a
//! vault; in automatic mode everything execute_code returns (and what
//! read_workspace_file reads) is tokenized with it, and tokens in the
//! arguments of tool calls from code are restored, for the upstreams the
//! config allows, before they leave the host.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use cem_config::{PiiConfig, PiiMode};
use cem_pii::{Found, Kind, Vault};
use serde_json::{Map, Value, json};

/// How long an unused session's vault is kept.
pub const VAULT_IDLE: std::time::Duration = std::time::Duration::from_secs(12 * 3600);
/// Vaults kept at once (the least recently used goes first).
pub const MAX_VAULTS: usize = 256;
/// Bytes one vault holds (values, tokens, bookkeeping) before it forgets
/// its oldest tokens: at most MAX_VAULTS × VAULT_BYTES (1 GiB) in all.
pub const VAULT_BYTES: usize = 4 << 20;

/// The caller of a tool: which session's vault applies.
#[derive(Clone)]
pub struct Session {
    /// The session key (also scopes execute_code's `session_id`).
    pub key: String,
    pub vault: Arc<Mutex<Vault>>,
    /// Who can approve this session's `ask` tool calls (none: refused).
    pub approver: Option<crate::approval::SharedApprover>,
    /// Why there is no approver, in words for the refusal.
    pub no_approver: String,
    /// Where `report_progress` from code goes (the request carried a
    /// progress token).
    pub progress: Option<Arc<crate::progress::ProgressSink>>,
}

impl Session {
    pub fn vault(&self) -> std::sync::MutexGuard<'_, Vault> {
        cem_pii::lock(&self.vault)
    }
}

/// The key of the session a request belongs to: the handler (one per stdio
/// connection, one per stateful HTTP session: rmcp makes a handler per
/// session, so this cannot be forged with a header). Stateless HTTP
/// requests (protocol 2026-07-28, one handler per request) have no session:
/// their key is the principal's (each tenant has its own vaults, so this is
/// one key per person), so a client keeps its tokens from one request to
/// the next, across access-token refreshes too.
pub fn session_key(parts: Option<&http::request::Parts>, connection: u64) -> String {
    let stateless = parts
        .and_then(|p| p.headers.get("mcp-protocol-version"))
        .and_then(|v| v.to_str().ok())
        == Some(STATELESS_PROTOCOL);
    if !stateless {
        return connection_key(connection);
    }
    match parts.and_then(|p| p.extensions.get::<cem_auth::Principal>()) {
        Some(principal) => format!("{PRINCIPAL_PREFIX}{}", principal.tenant),
        None => LOCAL_KEY.to_string(),
    }
}

/// The key of stateless requests by a signed-in principal, before its tenant.
const PRINCIPAL_PREFIX: &str = "principal:";
/// The key of stateless requests without sign-in.
const LOCAL_KEY: &str = "http-local";

/// Whether `key` is a session that ends (a connection, a stateful HTTP
/// session, a CLI run), not the key every stateless request of a person
/// shares: "allow for this session" means nothing there, as no session
/// ends it and other clients of the same person share the key.
pub fn is_a_session(key: &str) -> bool {
    key != LOCAL_KEY && !key.starts_with(PRINCIPAL_PREFIX)
}

/// The protocol version whose HTTP requests carry no session.
const STATELESS_PROTOCOL: &str = "2026-07-28";

/// The key of a handler's own session (see [`session_key`]).
pub fn connection_key(connection: u64) -> String {
    format!("connection:{connection}")
}

/// `text` as the model may see it: its personal data as the session's
/// tokens in automatic mode (a progress message, say), else unchanged.
pub fn shown(state: &crate::AppState, session: &Session, text: String) -> String {
    if automatic(&state.config.pii) {
        cem_pii::tokenize_shared(&session.vault, &text, &state.config.pii.types).text
    } else {
        text
    }
}

/// Whether this config tokenizes answers automatically.
pub fn automatic(config: &PiiConfig) -> bool {
    config.mode == PiiMode::Auto
}

/// Tokenizes every string in `value` (object keys too), counting by kind.
/// An object's entries are read with their key (`"password": "…"` is a
/// secret, `"phone": "4155552671"` a phone number), and numbers as text
/// (a card number may be one): a number found whole becomes its token.
///
/// Two passes over the value: the first detects with no lock held, the
/// second locks the vault only to give out tokens (and is skipped when
/// nothing was found). A session's vault is shared by its requests and its
/// code's bridge calls: detection under the lock made them queue behind a
/// megabyte's scan.
pub fn tokenize_value(
    vault: &Mutex<Vault>,
    value: &mut Value,
    kinds: &[Kind],
    counts: &mut BTreeMap<Kind, usize>,
) {
    let mut found = Vec::new();
    walk(None, value, &mut |key, text| {
        found.push(match key {
            Some(k) => Found::in_field(k, text),
            None => Found::in_text(text),
        });
        None
    });
    if found.iter().all(|f| f.none_of(kinds)) {
        return;
    }
    let mut vault = cem_pii::lock(vault);
    let mut found = found.into_iter();
    walk(None, value, &mut |_, text| {
        let f = found.next()?;
        if f.none_of(kinds) {
            return None;
        }
        let t = vault.tokenize(text, f, kinds);
        for (k, n) in t.counts {
            *counts.entry(k).or_insert(0) += n;
        }
        Some(t.text)
    });
}

/// Visits every string of `value` (numbers as text, object keys after
/// their value) in one fixed order, with the key it sits under; where
/// `visit` returns a text, that text takes the string's place (a number
/// becomes a string).
fn walk(
    key: Option<&str>,
    value: &mut Value,
    visit: &mut impl FnMut(Option<&str>, &str) -> Option<String>,
) {
    match value {
        Value::String(s) => {
            if let Some(t) = visit(key, s) {
                *s = t;
            }
        }
        Value::Number(n) => {
            if let Some(t) = visit(key, &n.to_string()) {
                *value = Value::String(t);
            }
        }
        Value::Array(items) => {
            for item in items {
                walk(key, item, visit);
            }
        }
        Value::Object(map) => {
            let old = std::mem::take(map);
            let mut new = Map::with_capacity(old.len());
            for (k, mut v) in old {
                walk(Some(&k), &mut v, visit);
                let key = visit(None, &k).unwrap_or(k);
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

/// Tokenizes a whole answer with the session's vault (keys, strings and
/// numbers alike) and, when something was replaced, adds the `pii` summary.
pub fn tokenize_answer(state: &crate::AppState, session: &Session, body: &mut Value) {
    let mut counts = BTreeMap::new();
    tokenize_value(&session.vault, body, &state.config.pii.types, &mut counts);
    if !counts.is_empty()
        && let Some(obj) = body.as_object_mut()
    {
        obj.insert("pii".into(), summary(&counts));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_keys_included() {
        let vault = Mutex::new(Vault::new(1 << 20));
        let original = json!({"ana@example.com": ["call +44 20 7946 0958", 3, {"note": "none"}]});
        let mut v = original.clone();
        let mut counts = BTreeMap::new();
        tokenize_value(&vault, &mut v, &Kind::ALL, &mut counts);
        let vault = cem_pii::lock(&vault);
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
        let parts = |headers: &[(&str, &str)], principal: Option<cem_auth::Principal>| {
            let mut request = http::Request::builder();
            for (k, v) in headers {
                request = request.header(*k, *v);
            }
            request.body(()).ok().map(|r| {
                let mut parts = r.into_parts().0;
                if let Some(p) = principal {
                    parts.extensions.insert(p);
                }
                parts
            })
        };
        let stateless = ("mcp-protocol-version", "2026-07-28");
        // stdio: the connection.
        assert_eq!(session_key(None, 7), "connection:7");
        // A stateful HTTP session: its handler; a copied session header changes nothing.
        let a = parts(
            &[
                ("mcp-session-id", "victim"),
                ("mcp-protocol-version", "2025-11-25"),
            ],
            Some(cem_auth::Principal::named("alice")),
        );
        assert_eq!(session_key(a.as_ref(), 1), "connection:1");
        // Stateless HTTP: one vault per principal, whatever token it shows.
        let key = |who: &str, auth: &str| {
            session_key(
                parts(
                    &[stateless, ("authorization", auth)],
                    Some(cem_auth::Principal::named(who)),
                )
                .as_ref(),
                1,
            )
        };
        assert_eq!(key("alice", "Bearer t1"), key("alice", "Bearer t2"));
        assert_ne!(key("alice", "Bearer t1"), key("bob", "Bearer t1"));
        assert_eq!(
            session_key(parts(&[stateless], None).as_ref(), 3),
            "http-local"
        );
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
