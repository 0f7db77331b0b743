//! From an `Authorization` header to a principal.

use cem_config::{AuthConfig, Secret};

use crate::{Ability, OAuthVerifier, Principal, Rejection};

/// Every way a caller can prove who it is, as configured.
#[derive(Debug)]
pub struct Authenticator {
    /// `--auth-token`: the one local user, as before tenants existed.
    legacy: Option<Secret>,
    /// `auth.tokens`: (principal name, token).
    tokens: Vec<(String, Secret)>,
    oauth: Option<OAuthVerifier>,
    resource: Option<url::Url>,
}

impl Authenticator {
    /// `legacy_token`: the `--auth-token` of `serve`, which keeps meaning
    /// "the local user" so existing one-person setups see their data.
    pub fn new(config: &AuthConfig, legacy_token: Option<String>) -> Self {
        let resource = config.resource.clone();
        let oauth = config.oauth.as_ref().map(|o| {
            let audience = o
                .audience
                .clone()
                .or_else(|| resource.as_ref().map(|r| r.to_string()))
                .unwrap_or_default();
            OAuthVerifier::new(o, &audience)
        });
        Self {
            legacy: legacy_token.map(Secret::new),
            tokens: config
                .tokens
                .iter()
                .map(|(name, token)| (name.clone(), token.clone()))
                .collect(),
            oauth,
            resource,
        }
    }

    /// Whether requests need a credential at all.
    pub fn required(&self) -> bool {
        self.legacy.is_some() || !self.tokens.is_empty() || self.oauth.is_some()
    }

    pub fn oauth(&self) -> Option<&OAuthVerifier> {
        self.oauth.as_ref()
    }

    /// The resource URL (`auth.resource`).
    pub fn resource(&self) -> Option<&url::Url> {
        self.resource.as_ref()
    }

    /// Where the protected resource metadata is (RFC 9728 §3.1: the
    /// well-known path inserted before the resource's path). Only with OAuth.
    pub fn metadata_url(&self) -> Option<String> {
        self.oauth.as_ref()?;
        let resource = self.resource.as_ref()?;
        let origin = resource.origin().ascii_serialization();
        let path = resource.path().trim_end_matches('/');
        Some(format!(
            "{origin}/.well-known/oauth-protected-resource{path}"
        ))
    }

    /// The scope that grants `ability` (the ability's name for static
    /// tokens, which hold every ability anyway).
    pub fn scope_of(&self, ability: Ability) -> String {
        match &self.oauth {
            Some(o) => o.config().scope_of(ability).to_string(),
            None => ability.as_str().to_string(),
        }
    }

    /// Every scope this server understands, for the metadata.
    pub fn scopes_supported(&self) -> Vec<String> {
        Ability::ALL.iter().map(|a| self.scope_of(*a)).collect()
    }

    /// The principal behind an `Authorization` header value.
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<Principal, Rejection> {
        if !self.required() {
            return Ok(Principal::local());
        }
        let Some(header) = authorization else {
            return Err(Rejection::missing(self.how_to_sign_in()));
        };
        // The scheme name is case-insensitive (RFC 7235).
        let token = header
            .split_once(' ')
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, rest)| rest.trim())
            .filter(|t| !t.is_empty());
        let Some(token) = token else {
            return Err(Rejection {
                status: 401,
                error: Some("invalid_request"),
                description: format!(
                    "expected 'Authorization: Bearer <token>'. {}",
                    self.how_to_sign_in()
                ),
                scope: None,
            });
        };
        // Every static token is compared in full, so timing reveals
        // neither which one nor how much of one was right.
        let mut found: Option<Principal> = None;
        for (name, secret) in &self.tokens {
            if constant_time_eq(token.as_bytes(), secret.expose().as_bytes()) {
                found = Some(Principal::named(name));
            }
        }
        if let Some(legacy) = &self.legacy
            && constant_time_eq(token.as_bytes(), legacy.expose().as_bytes())
        {
            found = Some(Principal::local());
        }
        if let Some(principal) = found {
            return Ok(principal);
        }
        match &self.oauth {
            Some(verifier) if token.matches('.').count() == 2 => verifier.verify(token).await,
            _ => Err(Rejection::invalid(format!(
                "the bearer token is not one this server accepts. {}",
                self.how_to_sign_in()
            ))),
        }
    }

    fn how_to_sign_in(&self) -> String {
        match (&self.oauth, self.metadata_url()) {
            (Some(o), Some(meta)) => format!(
                "sign in with the identity provider {} (the protected resource metadata is at {meta})",
                o.issuer()
            ),
            _ => {
                "send a bearer token the server is configured with: 'Authorization: Bearer <token>'"
                    .into()
            }
        }
    }
}

/// Compares without an early exit, so timing does not reveal how much of a
/// guessed token was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn config(tokens: &[(&str, &str)]) -> AuthConfig {
        AuthConfig {
            resource: None,
            tokens: tokens
                .iter()
                .map(|(n, t)| (n.to_string(), Secret::new(*t)))
                .collect::<BTreeMap<_, _>>(),
            oauth: None,
        }
    }

    #[tokio::test]
    async fn static_tokens_name_their_principal() {
        let auth = Authenticator::new(
            &config(&[
                ("alice", "alice-token-0123456789"),
                ("bob", "bob-token-0123456789"),
            ]),
            Some("legacy-token-0123456789".into()),
        );
        let p = auth
            .authenticate(Some("Bearer alice-token-0123456789"))
            .await;
        assert_eq!(p.map(|p| p.tenant), Ok("token-alice".to_string()));
        let p = auth.authenticate(Some("bearer bob-token-0123456789")).await;
        assert_eq!(p.map(|p| p.tenant), Ok("token-bob".to_string()));
        let p = auth
            .authenticate(Some("Bearer legacy-token-0123456789"))
            .await;
        assert_eq!(p.map(|p| p.tenant), Ok(crate::LOCAL_TENANT.to_string()));
        let wrong = auth
            .authenticate(Some("Bearer alice-token-012345678"))
            .await;
        assert_eq!(
            wrong.map_err(|r| (r.status, r.error)),
            Err((401, Some("invalid_token")))
        );
        let none = auth.authenticate(None).await;
        assert_eq!(none.map_err(|r| (r.status, r.error)), Err((401, None)));
        let basic = auth.authenticate(Some("Basic YWxpY2U6eA==")).await;
        assert_eq!(basic.map_err(|r| r.error), Err(Some("invalid_request")));
    }

    #[tokio::test]
    async fn without_credentials_everyone_is_local() {
        let auth = Authenticator::new(&config(&[]), None);
        assert!(!auth.required());
        let p = auth.authenticate(Some("Bearer whatever")).await;
        assert_eq!(p.map(|p| p.tenant), Ok(crate::LOCAL_TENANT.to_string()));
    }

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
