//! Access tokens of the identity provider: JWTs (RFC 9068) whose signature,
//! issuer, audience, expiry and not-before are checked before their subject
//! and scopes are believed.

use std::collections::BTreeSet;

use cem_config::OAuthConfig;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;
use serde_json::Value;

use crate::jwks::{KeyCache, UNKNOWN_KID_COOLDOWN};
use crate::{Ability, AuthError, KeySetReport, Principal, Rejection};

/// Checks access tokens of one issuer for one audience.
#[derive(Debug)]
pub struct OAuthVerifier {
    config: OAuthConfig,
    audience: String,
    algorithms: Vec<Algorithm>,
    keys: KeyCache,
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
    /// Space-separated scopes (RFC 9068, RFC 8693).
    #[serde(default)]
    scope: Option<Value>,
    /// Scopes as an array (some providers: Okta, Entra's `scp`).
    #[serde(default)]
    scp: Option<Value>,
}

#[derive(Deserialize)]
struct Unverified {
    #[serde(default)]
    iss: Option<Value>,
}

impl OAuthVerifier {
    /// `audience`: the resource URL tokens must be issued for (the config's
    /// `auth.oauth.audience`, else `auth.resource`).
    pub fn new(config: &OAuthConfig, audience: &str) -> Self {
        let algorithms = config
            .algorithms
            .iter()
            .filter_map(|a| a.parse::<Algorithm>().ok())
            .collect();
        Self {
            keys: KeyCache::new(&config.issuer, config.jwks_uri.as_deref()),
            config: config.clone(),
            audience: audience.to_string(),
            algorithms,
        }
    }

    pub fn issuer(&self) -> &str {
        &self.config.issuer
    }

    pub fn audience(&self) -> &str {
        &self.audience
    }

    pub fn config(&self) -> &OAuthConfig {
        &self.config
    }

    /// Fetches the metadata and key set now (for `doctor` and start-up).
    pub async fn check(&self) -> Result<KeySetReport, AuthError> {
        self.keys.refresh().await
    }

    /// The principal of a valid access token, or why it is not one.
    pub async fn verify(&self, token: &str) -> Result<Principal, Rejection> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| {
            Rejection::invalid(format!(
                "the bearer token is not a JWT access token ({e}); get one from the identity provider {}",
                self.config.issuer
            ))
        })?;
        if !self.algorithms.contains(&header.alg) {
            return Err(Rejection::invalid(format!(
                "the token is signed with {:?}, which this server does not accept (auth.oauth.algorithms: {})",
                header.alg,
                self.config.algorithms.join(", ")
            )));
        }
        // Said before any key is fetched: a token of another issuer must
        // not make this server fetch keys, and deserves a precise answer.
        // (The signature check below still covers `iss`.)
        if let Ok(data) = jsonwebtoken::dangerous::insecure_decode::<Unverified>(token) {
            let iss = data.claims.iss.as_ref().and_then(Value::as_str);
            if !iss.is_some_and(|i| self.trusted_issuer(i)) {
                return Err(Rejection::invalid(format!(
                    "the token was issued by {}, but this server trusts only {}",
                    iss.map(|i| format!("{i:?}"))
                        .unwrap_or_else(|| "no issuer".into()),
                    self.config.issuer
                )));
            }
        }
        let candidates = match self.keys.candidates(header.kid.as_deref()).await {
            Ok(c) => c,
            // Refused at once rather than queued: whoever sends many tokens
            // naming made-up keys cannot make a real one wait.
            Err(e @ AuthError::KeysBusy { .. }) => return Err(Rejection::invalid(e.to_string())),
            Err(e) => {
                // The fetch itself logged the failure, once for all of its
                // waiters.
                tracing::debug!(error = %e, "cannot fetch the identity provider's keys");
                return Err(Rejection {
                    status: 503,
                    error: None,
                    description: format!(
                        "this server cannot check access tokens right now: {e}. Try again shortly"
                    ),
                    scope: None,
                });
            }
        };
        let candidates: Vec<_> = candidates
            .into_iter()
            .filter(|k| k.alg.is_none_or(|a| a == header.alg))
            .collect();
        if candidates.is_empty() {
            return Err(Rejection::invalid(format!(
                "the token is signed by key {:?}, which the identity provider does not publish (a forged or very old token); get a new one (if the provider has only just rotated its keys, try again in {} seconds)",
                header.kid.as_deref().unwrap_or("(no kid)"),
                UNKNOWN_KID_COOLDOWN.as_secs()
            )));
        }
        let validation = self.validation(header.alg);
        let mut last = None;
        for key in &candidates {
            match jsonwebtoken::decode::<Claims>(token, &key.key, &validation) {
                Ok(data) => return self.principal(data.claims),
                Err(e) => {
                    let bad_signature = matches!(e.kind(), ErrorKind::InvalidSignature);
                    last = Some(e);
                    if !bad_signature {
                        break;
                    }
                }
            }
        }
        Err(match last {
            Some(e) => self.explain(e.into_kind()),
            None => Rejection::invalid("the token could not be checked"),
        })
    }

    fn trusted_issuer(&self, iss: &str) -> bool {
        iss.trim_end_matches('/') == self.config.issuer.trim_end_matches('/')
    }

    fn validation(&self, alg: Algorithm) -> Validation {
        let mut v = Validation::new(alg);
        let issuer = self.config.issuer.trim_end_matches('/');
        v.set_issuer(&[issuer.to_string(), format!("{issuer}/")]);
        v.set_audience(&[self.audience.as_str()]);
        v.leeway = self.config.leeway_seconds;
        v.validate_exp = true;
        v.validate_nbf = true;
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        v
    }

    fn explain(&self, kind: ErrorKind) -> Rejection {
        Rejection::invalid(match kind {
            ErrorKind::ExpiredSignature => {
                "the access token has expired; get a new one from the identity provider".to_string()
            }
            ErrorKind::ImmatureSignature => {
                "the access token is not valid yet (nbf is in the future); check the clocks".into()
            }
            ErrorKind::InvalidAudience => format!(
                "the access token was issued for another resource; ask the identity provider for a token for {} (the resource parameter, RFC 8707)",
                self.audience
            ),
            ErrorKind::InvalidIssuer => {
                format!("the access token was not issued by {}", self.config.issuer)
            }
            ErrorKind::InvalidSignature => "the access token's signature does not verify".into(),
            ErrorKind::MissingRequiredClaim(c) => {
                format!(
                    "the access token has no `{c}` claim; this server needs exp, iss, aud and sub"
                )
            }
            ErrorKind::InvalidClaimFormat(c) => {
                format!("the access token's `{c}` claim is malformed")
            }
            other => format!("the access token is not valid ({other:?})"),
        })
    }

    fn principal(&self, claims: Claims) -> Result<Principal, Rejection> {
        if claims.sub.is_empty() {
            return Err(Rejection::invalid("the access token's `sub` is empty"));
        }
        let granted = scopes(claims.scope.as_ref())
            .chain(scopes(claims.scp.as_ref()))
            .collect::<BTreeSet<String>>();
        let abilities = Ability::ALL
            .into_iter()
            .filter(|a| granted.contains(self.config.scope_of(*a)))
            .collect();
        Ok(Principal::subject(
            self.config.issuer.trim_end_matches('/'),
            &claims.sub,
            abilities,
        ))
    }
}

/// The scopes of a `scope` (string) or `scp` (string or array) claim.
fn scopes(value: Option<&Value>) -> Box<dyn Iterator<Item = String> + '_> {
    match value {
        Some(Value::String(s)) => Box::new(s.split_whitespace().map(str::to_string)),
        Some(Value::Array(items)) => {
            Box::new(items.iter().filter_map(Value::as_str).map(str::to_string))
        }
        _ => Box::new(std::iter::empty()),
    }
}
