//! Who is calling over HTTP.
//!
//! The server is an OAuth 2.1 resource server as the MCP authorization
//! spec describes: a request's bearer token is either one of the configured
//! static tokens (`auth.tokens`, each a named principal) or an access token
//! issued by the configured identity provider (`auth.oauth`), a JWT whose
//! signature is checked against the issuer's JWKS (fetched, cached, and
//! fetched again when a token names a key it has not seen: key rotation),
//! whose audience must be this server's resource URL (RFC 8707), and whose
//! `exp` and `nbf` hold. [`Authenticator::authenticate`] turns the header
//! into a [`Principal`] (its tenant and abilities) or a [`Rejection`] that
//! says what to send back (401 or 403 and the `WWW-Authenticate` header).
//!
//! The cryptography is `jsonwebtoken`'s (aws-lc-rs); nothing here signs or
//! verifies by hand.

mod authenticator;
mod jwks;
mod metadata;
mod principal;
mod verifier;

pub use authenticator::Authenticator;
pub use jwks::{KeyCache, KeySetReport};
pub use metadata::{protected_resource_metadata, www_authenticate};
pub use principal::{LOCAL_TENANT, Principal, STATIC_TENANT_PREFIX};
pub use verifier::OAuthVerifier;

pub use cem_config::Ability;

/// Why a request is refused, and how to say so over HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// 401 (no or bad credential) or 403 (valid, but not allowed this).
    pub status: u16,
    /// The RFC 6750 error code: `invalid_token`, `insufficient_scope`,
    /// `invalid_request`; none when no credential was sent at all.
    pub error: Option<&'static str>,
    /// What went wrong and what to do, for a person or an agent.
    pub description: String,
    /// The scope(s) that would be enough (space-separated).
    pub scope: Option<String>,
}

impl Rejection {
    pub fn missing(description: impl Into<String>) -> Self {
        Self {
            status: 401,
            error: None,
            description: description.into(),
            scope: None,
        }
    }

    pub fn invalid(description: impl Into<String>) -> Self {
        Self {
            status: 401,
            error: Some("invalid_token"),
            description: description.into(),
            scope: None,
        }
    }

    pub fn insufficient(scope: String, description: impl Into<String>) -> Self {
        Self {
            status: 403,
            error: Some("insufficient_scope"),
            description: description.into(),
            scope: Some(scope),
        }
    }
}

/// Failures to reach or read the identity provider. Cloned: one fetch's
/// failure is the answer of every request that waited for it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AuthError {
    #[error("cannot fetch {url}: {reason}")]
    Fetch { url: String, reason: String },
    #[error("{url} is not usable: {reason}")]
    BadDocument { url: String, reason: String },
    #[error(
        "no authorization server metadata found for issuer {issuer} (tried {tried}); set auth.oauth.jwks_uri"
    )]
    NoMetadata { issuer: String, tried: String },
    #[error(
        "the identity provider {issuer} did not send its metadata and key set within {seconds} s; check that it is up and reachable from this server"
    )]
    TimedOut { issuer: String, seconds: u64 },
    #[error(
        "{waiting} requests with tokens naming keys this server has not seen are already waiting for the identity provider's key set, as many as may wait; try again in a few seconds"
    )]
    KeysBusy { waiting: usize },
}
