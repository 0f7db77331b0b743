//! Secrets: keys with well-known prefixes, JWTs, private key blocks, bearer
//! tokens, and the values of `key=value` / `"key": "value"` pairs whose key
//! says secret. For pairs only the value is the finding.

use std::sync::LazyLock;

use regex::Regex;

use crate::Kind;
use crate::scan::{Entity, bounded, pattern};

/// Keys issued with a recognisable prefix.
static PREFIXED: LazyLock<Regex> = LazyLock::new(|| {
    pattern(concat!(
        r"(?-u)(?:",
        r"sk-(?:proj-|ant-|live-)?[A-Za-z0-9_\-]{20,}",
        r"|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",
        r"|gh[pousr]_[A-Za-z0-9]{30,}",
        r"|github_pat_[A-Za-z0-9_]{22,}",
        r"|glpat-[A-Za-z0-9_\-]{20,}",
        r"|xox[abposr]-[A-Za-z0-9\-]{10,}",
        r"|(?:AKIA|ASIA)[0-9A-Z]{16}",
        r"|AIza[0-9A-Za-z_\-]{35}",
        r"|npm_[A-Za-z0-9]{36}",
        r"|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
        r")",
    ))
});

static PRIVATE_KEY: LazyLock<Regex> = LazyLock::new(|| {
    pattern(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----")
});

static BEARER: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"(?i-u)\bbearer\s+([A-Za-z0-9\-._~+/]{16,}=*)"));

/// `password=…`, `"api_key": "…"`, `CLIENT_SECRET: …`: the key names a
/// secret; the value is what is hidden.
/// The words that make a key name a secret (`password`, `api_key`,
/// `CLIENT_SECRET`).
const SECRET_WORDS: &str = r"(?:password|passwd|pwd|passphrase|secret|token|api[_\-]?key|access[_\-]?key|private[_\-]?key|credentials?)";

static PAIR: LazyLock<Regex> = LazyLock::new(|| {
    pattern(&format!(
        r#"(?i)[A-Za-z0-9_.\-]*{SECRET_WORDS}[A-Za-z0-9_\-]*["']?[ \t]*[:=][ \t]*["']?([!#$%&*+\-./0-9:=?@A-Z\\^_a-z|~]{{8,}})"#
    ))
});

/// A key that names a secret.
static SECRET_KEY: LazyLock<Regex> = LazyLock::new(|| pattern(&format!("(?i){SECRET_WORDS}")));

/// A structured field whose key names a secret: its whole value is one
/// (the pair pattern needs key and value in one string; a JSON object
/// keeps them apart).
pub fn field(key: &str, value: &str) -> bool {
    SECRET_KEY.is_match(key) && !value.contains(char::is_whitespace) && looks_secret(value)
}

/// A token (`[SECRET_1]`) or a redaction mark (`[redacted]`) stands for a
/// value and is none itself: tokenizing it again would give the model a
/// token for a token (code in automatic mode holds tokens, and returns
/// them in fields named `password`).
fn placeholder(v: &str) -> bool {
    v.len() > 2
        && v.starts_with('[')
        && v.ends_with(']')
        && v[1..v.len() - 1]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
}

pub fn find(text: &str, found: &mut Vec<Entity>) {
    let mut push = |start, end| found.push(Entity::new(Kind::Secret, start, end));
    for m in PREFIXED.find_iter(text) {
        if bounded(text, m.start(), m.end(), "") {
            push(m.start(), m.end());
        }
    }
    for m in PRIVATE_KEY.find_iter(text) {
        push(m.start(), m.end());
    }
    for c in BEARER.captures_iter(text) {
        if let Some(v) = c.get(1) {
            let value = v.as_str().trim_end_matches('.');
            push(v.start(), v.start() + value.len());
        }
    }
    for c in PAIR.captures_iter(text) {
        if let Some(v) = c.get(1) {
            // A sentence's full stop is not part of the value.
            let value = v.as_str().trim_end_matches(['.', ':']);
            if looks_secret(value) {
                push(v.start(), v.start() + value.len());
            }
        }
    }
}

/// A value that is a secret rather than code naming one: not a dotted
/// identifier (`self.token`, `process.env.API_KEY`), not a template
/// (`${TOKEN}`, `%s`), not a placeholder, and with some mix of characters.
fn looks_secret(v: &str) -> bool {
    if v.len() < 8 || v.contains('$') || format_spec(v) || placeholder(v) {
        return false;
    }
    let identifier = |s: &str| {
        s.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    // Code names a secret through a path that starts with a lower-case
    // object or module: self.token, os.environ, std::env::var.
    let path = v.replace("::", ".");
    let code_path = path.contains('.')
        && path.split('.').all(identifier)
        && path
            .split('.')
            .next()
            .is_some_and(|first| first.chars().all(|c| c.is_ascii_lowercase() || c == '_'));
    if code_path || v.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
        return false;
    }
    if v.chars()
        .all(|c| c == '*' || c == 'x' || c == 'X' || c == '.')
    {
        return false; // a masked value
    }
    let classes = [
        v.chars().any(|c| c.is_ascii_lowercase()),
        v.chars().any(|c| c.is_ascii_uppercase()),
        v.chars().any(|c| c.is_ascii_digit()),
        v.chars().any(|c| !c.is_ascii_alphanumeric()),
    ];
    classes.iter().filter(|c| **c).count() >= 2
}

/// A printf-style placeholder (`%s`, `%d`, `%(name)s`, `%%`) standing on
/// its own, as in a format string; `%dD7` inside a random value is not one.
fn format_spec(v: &str) -> bool {
    let b = v.as_bytes();
    b.iter().enumerate().any(|(i, &c)| {
        c == b'%'
            && match b.get(i + 1) {
                Some(b'(' | b'%') => true,
                Some(b's' | b'd' | b'i' | b'f' | b'r') => {
                    b.get(i + 2).is_none_or(|n| !n.is_ascii_alphanumeric())
                }
                _ => false,
            }
    })
}

#[cfg(test)]
mod tests {
    use crate::Kind;
    use crate::detect::found_of;

    fn secrets(text: &str) -> Vec<&str> {
        found_of(text, Kind::Secret)
    }

    #[test]
    fn prefixes_pairs_and_tokens() {
        let key = "sk-proj-Abc123Def456Ghi789Jkl012Mno345";
        assert_eq!(secrets(&format!("OPENAI_API_KEY={key}")), [key]);
        assert_eq!(
            secrets("token ghp_16C7e42F292c6912E7710c838347Ae178B4a here"),
            ["ghp_16C7e42F292c6912E7710c838347Ae178B4a"]
        );
        assert_eq!(secrets("AKIAIOSFODNN7EXAMPLE"), ["AKIAIOSFODNN7EXAMPLE"]);
        assert_eq!(
            secrets(r#"{"password": "hunter2Hunter2"}"#),
            ["hunter2Hunter2"]
        );
        assert_eq!(secrets("DB_PASSWORD: s3cr3t-Value!"), ["s3cr3t-Value!"]);
        assert_eq!(
            secrets("SMTP_PASSWD: W#*GNT1oWFr!%6ZCA9."),
            ["W#*GNT1oWFr!%6ZCA9"]
        );
        assert_eq!(secrets("api_key=Ab3dEf6hIj9k，客服热线"), ["Ab3dEf6hIj9k"]);
        assert_eq!(
            secrets(r#""passwd": "bo1ONakqR%dD7gvfham1R4cy^GyE""#),
            ["bo1ONakqR%dD7gvfham1R4cy^GyE"]
        );
        assert_eq!(
            secrets(r#""admin_passwd": "K14F.sgna_ABgorF""#),
            ["K14F.sgna_ABgorF"]
        );
        assert_eq!(
            secrets("Authorization: Bearer abcDEF123456ghiJKL789"),
            ["abcDEF123456ghiJKL789"]
        );
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
        assert_eq!(secrets(&format!("jwt {jwt}")), [jwt]);
    }

    #[test]
    fn a_token_or_a_redaction_mark_is_no_secret() {
        for clean in [
            r#"{"password": "[SECRET_1]"}"#,
            "DB_PASSWORD: [redacted]",
            "api_key=[SECRET_12]",
        ] {
            assert_eq!(secrets(clean), Vec::<&str>::new(), "{clean}");
        }
        assert!(!super::field("SERVICE_API_KEY", "[SECRET_2]"));
        assert!(super::field("SERVICE_API_KEY", "[SECRET_2]x9Kd8e"));
    }

    #[test]
    fn code_naming_secrets_is_not_a_secret() {
        for clean in [
            "password = get_password()",
            "token = self.token",
            "api_key = os.environ['API_KEY']",
            "const secret = process.env.CLIENT_SECRET;",
            "password: str",
            "token=${TOKEN}",
            "password = ********",
            "secret_name = database_credentials",
            r#"let token = std::env::var("GITHUB_TOKEN");"#,
            "password = '%s:%d' % (user, port)",
        ] {
            assert_eq!(secrets(clean), Vec::<&str>::new(), "{clean}");
        }
    }
}
