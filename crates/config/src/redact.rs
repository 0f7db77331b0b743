//! Config secrets kept out of every string that leaves the host.
//!
//! A value the config took from the environment (`${VAR}`), an upstream's
//! `env` and `headers`, a password or token in a URL: each is the host's and
//! must never reach the model, the sandbox, a log line or the audit file.
//! Typing them as [`crate::Secret`] keeps them out of `{:?}`; a [`Redactor`]
//! covers what typing cannot: an upstream's error that quotes the command
//! line, a connection error that quotes the URL, a tool that prints its own
//! environment.
//!
//! Two sets, because the places differ in what they may lose:
//! - [`Redactor::redact`] (every configured value of four characters or
//!   more) is for strings that *describe the configuration*: the upstream
//!   manager's errors and statuses, an upstream's stderr, log lines. Losing
//!   a `${HOME}` there costs nothing.
//! - [`Redactor::redact_credentials`] (the values that are credentials) is
//!   for *data*: tool results on their way to code, answers on their way to
//!   the model, audit records. A `${HOME}` in a server's arguments must not
//!   turn every path a filesystem tool returns into `[redacted]/…`, so only
//!   what is a credential by its place (a header, a URL's password or query,
//!   an `env` or `${VAR}` whose name says key, token, secret, password…) or
//!   by its shape (a key the secret detector knows) is removed there.
//!
//! Each value is also matched as JSON, URL and base64 text would carry it,
//! so quoting it in a JSON string or a URL does not hide it.

use std::borrow::Cow;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine as _;

/// What a removed value is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Values shorter than this are not removed: "1", "on" or "dev" are not
/// secrets, and removing them would garble every message that has them.
pub const MIN_SECRET: usize = 4;

/// The config's secrets, compiled for fast search. Cheap to clone.
#[derive(Clone, Default)]
pub struct Redactor {
    all: Option<Arc<AhoCorasick>>,
    credentials: Option<Arc<AhoCorasick>>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Redactor(..)")
    }
}

/// The values a config holds, by how secret each is; see [`Redactor`].
#[derive(Debug, Default)]
pub struct SecretValues {
    /// Every configured value worth removing from descriptions.
    pub all: Vec<String>,
    /// The credentials among them.
    pub credentials: Vec<String>,
}

impl SecretValues {
    /// A value from the config; a credential when `credential` says so or
    /// when the secret detector recognises a key in it (then the key).
    pub fn add(&mut self, value: &str, credential: bool) {
        if value.chars().count() < MIN_SECRET {
            return;
        }
        self.all.push(value.to_string());
        if credential && credential_shaped(value) {
            self.credentials.push(value.to_string());
        }
        self.add_keys_in(value);
    }

    /// Only the keys the secret detector finds in `value` (a command line's
    /// `--token=ghp_…`): its other words are no secret. Each is a credential.
    pub fn add_keys_in(&mut self, value: &str) {
        for found in cem_pii::detect(value) {
            if found.kind == cem_pii::Kind::Secret
                && let Some(key) = value.get(found.start..found.end)
                && key.chars().count() >= MIN_SECRET
            {
                self.all.push(key.to_string());
                self.credentials.push(key.to_string());
            }
        }
    }

    /// A header's value: a credential whole when the header's name says so
    /// (`Authorization`, `X-Api-Key`, `Cookie`), and so is what follows an
    /// auth scheme (`Bearer x`), and for `Basic` the decoded password.
    pub fn add_header(&mut self, name: &str, value: &str) {
        let credential = names_a_credential(name);
        self.add(value, credential);
        if !credential {
            return;
        }
        if let Some((scheme, rest)) = value.trim().split_once(' ') {
            let rest = rest.trim();
            self.add(rest, true);
            if scheme.eq_ignore_ascii_case("basic")
                && let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(rest)
                && let Ok(pair) = String::from_utf8(bytes)
            {
                self.add(&pair, true);
                if let Some((_, password)) = pair.split_once(':') {
                    self.add(password, true);
                }
            }
        }
    }

    /// A URL's secrets: its password, and its query values (a credential
    /// when the parameter's name says so, or the detector knows the key).
    pub fn add_url(&mut self, url: &url::Url) {
        if let Some(password) = url.password() {
            self.add(password, true);
            if let Ok(decoded) = percent_encoding::percent_decode_str(password).decode_utf8() {
                self.add(&decoded, true);
            }
        }
        for (name, value) in url.query_pairs() {
            self.add(&value, names_a_credential(&name));
        }
    }

    pub fn compile(self) -> Redactor {
        Redactor {
            all: matcher(self.all),
            credentials: matcher(self.credentials),
        }
    }
}

/// Whether a variable, key or parameter name says its value is a credential:
/// one of its words (split at `_`, `-`, `.` and case changes are not
/// needed: names are compared lower-cased) is a credential word, or ends
/// with one (`APIKEY`, `AUTHTOKEN`, `CLIENTSECRET`). Words, not substrings:
/// `PRIVATE_MODE`, `SESSION_TTL`, `MONKEY_COUNT`, `GIT_AUTHOR_NAME` and
/// `PWD` (the working directory) name no credential; `DB_PWD` does.
pub fn names_a_credential(name: &str) -> bool {
    const WORDS: &[&str] = &[
        "key",
        "token",
        "secret",
        "password",
        "passwd",
        "pass",
        "auth",
        "authorization",
        "credential",
        "credentials",
        "cred",
        "creds",
        "cookie",
        "bearer",
        "signature",
        "pat",
    ];
    const ENDINGS: &[&str] = &["key", "token", "secret", "password", "passwd"];
    let lower = name.to_ascii_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let pwd = words.len() > 1 && words.contains(&"pwd");
    pwd || words.iter().any(|w| {
        WORDS.contains(w)
            || (w.len() > 4 && ENDINGS.iter().any(|e| w.ends_with(e) && *w != "monkey"))
    })
}

/// Whether `value` could be a credential at all: long enough, and not a
/// boolean, a number or a path (`AUTH_ENABLED=true`, `TOKEN_TTL=3600` and
/// `KEY_FILE=/etc/x.pem` name credentials their values are not; removing
/// `true` from every tool result would corrupt them).
fn credential_shaped(value: &str) -> bool {
    let v = value.trim();
    v.chars().count() >= 8
        && !v
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.' || c == '-')
        && !["true", "false", "yes", "no", "on", "off"].contains(&v.to_ascii_lowercase().as_str())
        && !v.starts_with(['/', '~', '.'])
}

/// Every value with the forms it takes inside JSON, a URL and base64.
fn matcher(values: Vec<String>) -> Option<Arc<AhoCorasick>> {
    let mut patterns: Vec<String> = Vec::new();
    for v in values {
        let json = serde_json::to_string(&v).unwrap_or_default();
        let json = json
            .strip_prefix('"')
            .and_then(|j| j.strip_suffix('"'))
            .unwrap_or(&json)
            .to_string();
        let url: String = url::form_urlencoded::byte_serialize(v.as_bytes()).collect();
        let b64 = base64::engine::general_purpose::STANDARD.encode(v.as_bytes());
        // The base64 of a value inside longer base64 shifts with its
        // offset; only the value alone is matched that way.
        patterns.extend([v, json, url, b64]);
    }
    patterns.retain(|p| p.chars().count() >= MIN_SECRET);
    patterns.sort();
    patterns.dedup();
    if patterns.is_empty() {
        return None;
    }
    AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostLongest)
        .build(&patterns)
        .ok()
        .map(Arc::new)
}

fn replace<'a>(matcher: &Option<Arc<AhoCorasick>>, text: &'a str) -> Cow<'a, str> {
    match matcher {
        Some(m) if m.is_match(text) => {
            let with: Vec<&str> = vec![REDACTED; m.patterns_len()];
            Cow::Owned(m.replace_all(text, &with))
        }
        _ => Cow::Borrowed(text),
    }
}

impl Redactor {
    /// `text` without any configured value (for descriptions of the
    /// configuration: errors, statuses, an upstream's stderr, logs).
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        replace(&self.all, text)
    }

    /// `text` without the configured credentials (for data: tool results,
    /// answers, audit records).
    pub fn redact_credentials<'a>(&self, text: &'a str) -> Cow<'a, str> {
        replace(&self.credentials, text)
    }

    /// Removes the credentials from every string of `value`, keys too.
    pub fn redact_json(&self, value: &mut serde_json::Value) {
        use serde_json::Value;
        if self.credentials.is_none() {
            return;
        }
        match value {
            Value::String(s) => {
                if let Cow::Owned(clean) = self.redact_credentials(s) {
                    *s = clean;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_json(v)),
            Value::Object(map) => {
                let dirty = map
                    .keys()
                    .any(|k| matches!(self.redact_credentials(k), Cow::Owned(_)));
                if dirty {
                    let old = std::mem::take(map);
                    for (k, v) in old {
                        map.insert(self.redact_credentials(&k).into_owned(), v);
                    }
                }
                map.values_mut().for_each(|v| self.redact_json(v));
            }
            _ => {}
        }
    }

    /// Whether there is nothing to remove.
    pub fn is_empty(&self) -> bool {
        self.all.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Outcome = Result<(), Box<dyn std::error::Error>>;

    fn redactor() -> Redactor {
        let mut v = SecretValues::default();
        v.add("/home/alice", false);
        v.add("s3cr3t-Value\"q", true);
        v.add("on", true);
        v.add_header("Authorization", "Bearer tok_ABCDEFGH12345678");
        v.add_header("Accept", "application/json");
        if let Ok(url) = url::Url::parse("https://u:p%40ssw0rd@h/x?api_key=k3yk3yk3y&fmt=json") {
            v.add_url(&url);
        }
        v.compile()
    }

    #[test]
    fn descriptions_lose_every_value_data_only_credentials() {
        let r = redactor();
        assert_eq!(
            r.redact("cannot start /home/alice/bin"),
            "cannot start [redacted]/bin"
        );
        assert_eq!(
            r.redact_credentials("/home/alice/notes.txt"),
            "/home/alice/notes.txt"
        );
        assert_eq!(
            r.redact_credentials("KEY=s3cr3t-Value\"q; on"),
            "KEY=[redacted]; on"
        );
        assert_eq!(
            r.redact_credentials("Authorization: Bearer tok_ABCDEFGH12345678"),
            "Authorization: [redacted]"
        );
        assert_eq!(r.redact_credentials("tok_ABCDEFGH12345678"), "[redacted]");
    }

    #[test]
    fn quoted_encoded_and_url_forms_are_found() -> Outcome {
        let r = redactor();
        let json = serde_json::to_string("s3cr3t-Value\"q")?;
        assert_eq!(r.redact_credentials(&json), "\"[redacted]\"");
        assert_eq!(
            r.redact_credentials("p%40ssw0rd and p@ssw0rd"),
            "[redacted] and [redacted]"
        );
        assert_eq!(
            r.redact_credentials("?api_key=k3yk3yk3y"),
            "?api_key=[redacted]"
        );
        let b64 = base64::engine::general_purpose::STANDARD.encode("tok_ABCDEFGH12345678");
        assert_eq!(r.redact_credentials(&b64), "[redacted]");
        // A short query value with a plain name is no credential, nor is
        // a header that says what it accepts.
        assert_eq!(r.redact_credentials("fmt=json"), "fmt=json");
        assert_eq!(r.redact_credentials("application/json"), "application/json");
        assert_eq!(r.redact("application/json"), "[redacted]");
        Ok(())
    }

    #[test]
    fn json_values_and_keys() {
        let r = redactor();
        let mut v =
            serde_json::json!({"env": {"s3cr3t-Value\"q": ["x tok_ABCDEFGH12345678 y", 3]}});
        r.redact_json(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"env": {"[redacted]": ["x [redacted] y", 3]}})
        );
    }

    #[test]
    fn credential_names() {
        for name in [
            "GITHUB_TOKEN",
            "api_key",
            "DB_PASSWORD",
            "GITHUB_PAT",
            "Authorization",
            "x-api-key",
            "DB_PWD",
            "APIKEY",
            "CLIENTSECRET",
            "AUTH_ENABLED",
        ] {
            assert!(names_a_credential(name), "{name}");
        }
        for name in [
            "HOME",
            "PATH",
            "PWD",
            "LOG_LEVEL",
            "NODE_ENV",
            "PORT",
            "GIT_AUTHOR_NAME",
            "PRIVATE_MODE",
            "SESSION_TTL",
            "MONKEY_COUNT",
            "KEYBOARD",
        ] {
            assert!(!names_a_credential(name), "{name}");
        }
    }

    #[test]
    fn a_credential_name_over_a_plain_value_removes_nothing_from_data() {
        let mut v = SecretValues::default();
        for (name, value) in [
            ("AUTH_ENABLED", "true"),
            ("TOKEN_TTL", "3600"),
            ("KEY_FILE", "/etc/ssl/key.pem"),
            ("DB_PWD", "hunter2-Hunter2"),
        ] {
            v.add(value, names_a_credential(name));
        }
        if let Ok(url) = url::Url::parse("https://h/x?workspace=engineering") {
            v.add_url(&url);
        }
        let r = v.compile();
        let data =
            r#"{"ok": true, "ttl": 3600, "path": "/etc/ssl/key.pem", "team": "engineering"}"#;
        assert_eq!(r.redact_credentials(data), data);
        assert_eq!(r.redact_credentials("pw hunter2-Hunter2"), "pw [redacted]");
    }

    #[test]
    fn keys_the_detector_knows_are_credentials_wherever_they_are() {
        let mut v = SecretValues::default();
        v.add("--token=ghp_abcdefghijklmnopqrstuvwxyz0123456789", false);
        let r = v.compile();
        assert!(
            !r.redact_credentials("x ghp_abcdefghijklmnopqrstuvwxyz0123456789 y")
                .contains("ghp_")
        );
    }
}

#[cfg(test)]
mod from_config {
    #[test]
    fn a_parsed_config_knows_its_credentials() -> Result<(), Box<dyn std::error::Error>> {
        let text = r#"{"mcpServers": {"e": {"command": "node", "env": {"SERVICE_API_KEY": "${CEM_T_KEY}"}}}}"#;
        let lookup = |name: &str| {
            (name == "CEM_T_KEY").then(|| "sk_live_Zq81vLm0Pq3RtW7yXb5NcD2f".to_string())
        };
        let parsed = crate::parse_str(text, std::path::Path::new("x.json"), &lookup)?;
        let r = &parsed.config.secrets;
        assert_eq!(
            r.redact_credentials("k sk_live_Zq81vLm0Pq3RtW7yXb5NcD2f"),
            "k [redacted]"
        );
        Ok(())
    }
}

/// A tenant as log lines name it: the first 12 hex digits of the SHA-256
/// of its id, so a log shipper never holds a person's name or e-mail
/// address (`tools learned --tenant`, the audit log and the data directory
/// map ids back).
pub fn tenant_digest(tenant: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(tenant.as_bytes())
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}
