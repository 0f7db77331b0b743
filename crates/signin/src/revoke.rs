//! Token revocation (RFC 7009) at logout, where the authorization server
//! offers it.

use cem_config::{ServerConfig, Transport};
use rmcp::transport::auth::{AuthorizationManager, StoredCredentials};

/// What revoking did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revoked {
    /// This many tokens (refresh and access) were revoked.
    Tokens(usize),
    /// The authorization server names no revocation endpoint: the tokens
    /// were deleted here and end when they expire.
    NotOffered,
    /// The revocation failed (the tokens were deleted here all the same).
    Failed(String),
    /// A key, not a token.
    NotApplicable,
}

pub async fn revoke(server: &ServerConfig, credentials: &StoredCredentials) -> Revoked {
    use oauth2::TokenResponse;
    let (Transport::Http { url, .. } | Transport::Sse { url, .. }) = &server.transport else {
        return Revoked::NotApplicable;
    };
    let Some(tokens) = &credentials.token_response else {
        return Revoked::Tokens(0);
    };
    let endpoint = match AuthorizationManager::new_allowing_private_addresses(url.as_str()).await {
        Ok(manager) => match manager.resolve_metadata().await {
            Ok(resolution) => resolution
                .metadata
                .additional_fields
                .get("revocation_endpoint")
                .and_then(|v| v.as_str())
                .map(String::from),
            Err(e) => return Revoked::Failed(e.to_string()),
        },
        Err(e) => return Revoked::Failed(e.to_string()),
    };
    let Some(endpoint) = endpoint else {
        return Revoked::NotOffered;
    };
    let client = reqwest::Client::new();
    let mut done = 0;
    // The refresh token: revoking it ends the grant (RFC 7009 §2.1), and
    // many servers cannot revoke a self-contained (JWT) access token.
    // Without one, the access token.
    let kinds = match tokens.refresh_token() {
        Some(refresh) => vec![(refresh.secret().clone(), "refresh_token")],
        None => vec![(tokens.access_token().secret().clone(), "access_token")],
    };
    for (token, hint) in kinds {
        let secret = server
            .oauth
            .client_secret
            .as_ref()
            .filter(|_| server.oauth.client_id.as_deref() == Some(&credentials.client_id));
        let mut request = client
            .post(&endpoint)
            .header("content-type", "application/x-www-form-urlencoded");
        // In a block of its own: the serializer is not Send, and must not
        // live across the await below.
        let body = {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            form.append_pair("token", &token)
                .append_pair("token_type_hint", hint);
            match secret {
                Some(secret) => {
                    request = request.basic_auth(&credentials.client_id, Some(secret.expose()));
                }
                None => {
                    form.append_pair("client_id", &credentials.client_id);
                }
            }
            form.finish()
        };
        match request.body(body).send().await {
            Ok(r) if r.status().is_success() => done += 1,
            Ok(r) => {
                return Revoked::Failed(format!("the revocation endpoint answered {}", r.status()));
            }
            Err(e) => {
                return Revoked::Failed(format!("the revocation endpoint is unreachable: {e}"));
            }
        }
    }
    Revoked::Tokens(done)
}
