//! What the server tells clients about its authorization: the protected
//! resource metadata (RFC 9728) and the `WWW-Authenticate` challenge
//! (RFC 6750 with RFC 9728's `resource_metadata`).

use serde_json::{Value, json};

use crate::Rejection;

/// The metadata document served at `/.well-known/oauth-protected-resource`
/// (and at that path with the resource's path appended).
pub fn protected_resource_metadata(resource: &str, issuer: &str, scopes: &[String]) -> Value {
    json!({
        "resource": resource,
        "authorization_servers": [issuer],
        "scopes_supported": scopes,
        "bearer_methods_supported": ["header"],
        "resource_name": "code-execution-mcp",
    })
}

/// The `WWW-Authenticate` value for a refusal. `metadata_url` is given
/// when the server has OAuth (it tells clients where to sign in).
pub fn www_authenticate(rejection: &Rejection, metadata_url: Option<&str>) -> String {
    let mut params: Vec<String> = Vec::new();
    if let Some(error) = rejection.error {
        params.push(format!("error=\"{error}\""));
        params.push(format!(
            "error_description=\"{}\"",
            quotable(&rejection.description)
        ));
    }
    if let Some(scope) = &rejection.scope {
        params.push(format!("scope=\"{}\"", quotable(scope)));
    }
    if let Some(url) = metadata_url {
        params.push(format!("resource_metadata=\"{}\"", quotable(url)));
    }
    if params.is_empty() {
        "Bearer".to_string()
    } else {
        format!("Bearer {}", params.join(", "))
    }
}

/// RFC 6750 limits error_description to printable ASCII without `"` and
/// `\`; anything else is replaced so the header stays well-formed.
fn quotable(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '"' => '\'',
            '\\' => '/',
            c if (' '..='~').contains(&c) => c,
            _ => '?',
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenge_carries_the_spec_parameters() {
        let r = Rejection::insufficient("execute".into(), "needs \"execute\"\n");
        let h = www_authenticate(
            &r,
            Some("https://h/.well-known/oauth-protected-resource/mcp"),
        );
        assert_eq!(
            h,
            "Bearer error=\"insufficient_scope\", error_description=\"needs 'execute'?\", \
             scope=\"execute\", resource_metadata=\"https://h/.well-known/oauth-protected-resource/mcp\""
        );
        assert_eq!(www_authenticate(&Rejection::missing("x"), None), "Bearer");
    }
}
