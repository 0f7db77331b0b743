//! What one person holds for one upstream, and where it is kept.
//!
//! A [`Backend`] keeps [`Record`]s sealed with the operator's key: sealed
//! files in the data directory ([`crate::FileBackend`]) for one node, the
//! deployment's PostgreSQL for many. [`PersonStore`] is one person's view
//! of one upstream in it, in the shape rmcp's OAuth client asks for
//! ([`CredentialStore`]), with the refresh guard rmcp holds across a
//! refresh so one refresh token is spent once.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use oauth2::TokenResponse as _;
use rmcp::transport::auth::{AuthError, CredentialStore, StoredCredentials};
use serde::{Deserialize, Serialize};

/// What [`Backend::lock`] returns: rmcp's guard, named here so a backend
/// elsewhere needs no rmcp of its own.
pub use rmcp::transport::auth::CredentialRefreshGuard;

/// Whose credential for which upstream.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CredentialId {
    pub tenant: String,
    pub server: String,
}

impl CredentialId {
    pub fn new(tenant: impl Into<String>, server: impl Into<String>) -> Self {
        Self {
            tenant: tenant.into(),
            server: server.into(),
        }
    }

    /// The additional authenticated data a record of this id is sealed
    /// with: `tenant NUL server` (neither holds a NUL).
    pub fn context(&self) -> Vec<u8> {
        let mut context = Vec::with_capacity(self.tenant.len() + 1 + self.server.len());
        context.extend_from_slice(self.tenant.as_bytes());
        context.push(0);
        context.extend_from_slice(self.server.as_bytes());
        context
    }
}

impl std::fmt::Display for CredentialId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tenant '{}', server '{}'", self.tenant, self.server)
    }
}

/// What one person holds for one upstream.
// Unboxed: a record is loaded, used and dropped, a few at a time, and the
// flow matches and builds it often.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Secret {
    /// An OAuth sign-in: rmcp's credentials and the resource (the
    /// upstream's URL as the authorization server knows it) they were
    /// issued for.
    #[serde(rename = "oauth")]
    OAuth {
        credentials: StoredCredentials,
        resource: String,
    },
    /// A key the person gave for an upstream that takes keys: sent as
    /// `header: value`.
    ApiKey { header: String, value: String },
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // StoredCredentials' own Debug redacts the token response.
            Secret::OAuth {
                credentials,
                resource,
            } => f
                .debug_struct("OAuth")
                .field("credentials", credentials)
                .field("resource", resource)
                .finish(),
            Secret::ApiKey { header, .. } => f
                .debug_struct("ApiKey")
                .field("header", header)
                .field("value", &"[REDACTED]")
                .finish(),
        }
    }
}

impl Secret {
    pub fn kind(&self) -> &'static str {
        match self {
            Secret::OAuth { .. } => "oauth",
            Secret::ApiKey { .. } => "api_key",
        }
    }
}

/// A secret and when it was given.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    pub secret: Secret,
    /// When the person signed in (or gave the key), unix seconds.
    pub signed_in_at: u64,
    /// When the record last changed (a refresh), unix seconds.
    pub updated_at: u64,
}

/// What `auth status` shows of a record: no secret.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Summary {
    pub tenant: String,
    /// Empty in an error entry whose server the store cannot tell (a
    /// sealed file keeps the name inside the sealed part).
    pub server: String,
    /// `"oauth"`, `"api_key"`, or `"error"` for a record that does not
    /// open or parse (then `error` says why).
    pub kind: &'static str,
    pub issuer: Option<String>,
    pub scopes: Vec<String>,
    /// When the access token expires, unix seconds (None: not said).
    pub expires_at: Option<u64>,
    /// Whether a refresh token is held, so the sign-in outlives the
    /// access token.
    pub refreshable: bool,
    pub signed_in_at: u64,
    pub updated_at: u64,
    /// Why this record could not be read; the other fields are then empty.
    pub error: Option<String>,
}

impl Summary {
    /// The entry `list` gives for a record that does not open or parse,
    /// so one bad record does not hide the others.
    pub fn unreadable(tenant: &str, server: &str, error: &StoreError) -> Summary {
        Summary {
            tenant: tenant.to_string(),
            server: server.to_string(),
            kind: "error",
            issuer: None,
            scopes: Vec::new(),
            expires_at: None,
            refreshable: false,
            signed_in_at: 0,
            updated_at: 0,
            error: Some(error.to_string()),
        }
    }
}

impl Record {
    pub fn summary(&self, id: &CredentialId) -> Summary {
        let mut summary = Summary {
            tenant: id.tenant.clone(),
            server: id.server.clone(),
            kind: self.secret.kind(),
            issuer: None,
            scopes: Vec::new(),
            expires_at: None,
            refreshable: false,
            signed_in_at: self.signed_in_at,
            updated_at: self.updated_at,
            error: None,
        };
        if let Secret::OAuth { credentials, .. } = &self.secret {
            summary.issuer = credentials.issuer.clone();
            summary.scopes = credentials.granted_scopes.clone();
            if let Some(token) = &credentials.token_response {
                summary.refreshable = token.refresh_token().is_some();
                summary.expires_at = match (token.expires_in(), credentials.token_received_at) {
                    (Some(lasts), Some(at)) => Some(at.saturating_add(lasts.as_secs())),
                    _ => None,
                };
            }
        }
        summary
    }
}

/// What can go wrong keeping credentials.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "the sign-in store cannot use {path}: {source}; check that the data directory exists and the server may write it"
    )]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the saved sign-in for {what} does not open: it was sealed with another token key or changed since; set the key it was sealed with, or sign in again"
    )]
    Sealed { what: String },
    #[error("the saved sign-in for {what} is not readable ({reason}); sign in again")]
    Corrupt { what: String, reason: String },
    #[error(
        "the sign-in store cannot be reached: {0}; retry, and tell the operator if it persists"
    )]
    Unreachable(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Key(crate::KeyError),
}

impl StoreError {
    /// The error for a sealed record of `what` that `key` refused.
    pub fn from_key(what: impl std::fmt::Display, error: crate::KeyError) -> StoreError {
        match error {
            crate::KeyError::Open => StoreError::Sealed {
                what: what.to_string(),
            },
            other => StoreError::Key(other),
        }
    }
}

/// Where records are kept. Implementations seal every record with the
/// operator's [`crate::TokenKey`] (bound to its id), so the store never
/// holds a token in plain text.
#[async_trait]
pub trait Backend: Send + Sync {
    async fn load(&self, id: &CredentialId) -> Result<Option<Record>, StoreError>;
    async fn save(&self, id: &CredentialId, record: &Record) -> Result<(), StoreError>;
    /// Whether there was a record to delete.
    async fn delete(&self, id: &CredentialId) -> Result<bool, StoreError>;
    /// Every record of `tenant` (all tenants when None), as summaries,
    /// ordered by tenant and server; a record that does not open or parse
    /// is an entry with `error` set rather than a failure of the list.
    async fn list(&self, tenant: Option<&str>) -> Result<Vec<Summary>, StoreError>;
    /// Held across a refresh: the load, the token request and the save.
    /// Other holders of the same id (other tasks, other processes, other
    /// nodes) wait. `load`/`save` do not take it.
    async fn lock(&self, id: &CredentialId) -> Result<CredentialRefreshGuard, StoreError>;
    /// Where records are kept, for `doctor` and errors.
    fn describe(&self) -> String;
}

/// Unix seconds now.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// One person's credentials for one upstream, as rmcp's OAuth client
/// keeps them.
///
/// `save` is how rmcp stores both a sign-in (the code exchange) and a
/// refresh; the two are told apart by the refresh guard: a save while this
/// store's guard is held is a refresh and keeps the record's
/// `signed_in_at`, any other save is a sign-in and starts it anew.
pub struct PersonStore {
    backend: Arc<dyn Backend>,
    id: CredentialId,
    resource: String,
    /// Refresh guards of this store now held.
    refreshing: Arc<AtomicUsize>,
}

impl std::fmt::Debug for PersonStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersonStore")
            .field("id", &self.id)
            .field("resource", &self.resource)
            .field("backend", &self.backend.describe())
            .finish()
    }
}

impl PersonStore {
    /// `resource` is the upstream's URL the tokens are for: credentials
    /// saved for another resource (the upstream moved) are not loaded.
    pub fn new(backend: Arc<dyn Backend>, id: CredentialId, resource: impl Into<String>) -> Self {
        Self {
            backend,
            id,
            resource: resource.into(),
            refreshing: Arc::new(AtomicUsize::new(0)),
        }
    }

    pub fn id(&self) -> &CredentialId {
        &self.id
    }

    /// The OAuth credentials held for this resource, if any.
    async fn credentials(&self) -> Result<Option<StoredCredentials>, StoreError> {
        Ok(match self.backend.load(&self.id).await? {
            Some(Record {
                secret:
                    Secret::OAuth {
                        credentials,
                        resource,
                    },
                ..
            }) => {
                if resource == self.resource {
                    Some(credentials)
                } else {
                    // A token is bound to the resource it was issued for;
                    // sending it to the upstream's new address would be
                    // refused at best.
                    tracing::info!(
                        tenant = %self.id.tenant,
                        server = %self.id.server,
                        "the saved sign-in is for another address of this server; a new sign-in is needed"
                    );
                    None
                }
            }
            _ => None,
        })
    }
}

fn to_auth(error: StoreError) -> AuthError {
    AuthError::CredentialStoreError(error.to_string())
}

/// Lowers the store's count of held guards when rmcp drops the guard.
struct Refreshing(Arc<AtomicUsize>);

impl Drop for Refreshing {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl CredentialStore for PersonStore {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        self.credentials().await.map_err(to_auth)
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let now = now();
        let refresh = self.refreshing.load(Ordering::SeqCst) > 0;
        let signed_in_at = if refresh {
            match self.backend.load(&self.id).await {
                Ok(Some(record)) => record.signed_in_at,
                // A record that no longer opens is being replaced anyway.
                Ok(None) | Err(StoreError::Sealed { .. } | StoreError::Corrupt { .. }) => now,
                Err(e) => return Err(to_auth(e)),
            }
        } else {
            now
        };
        let record = Record {
            secret: Secret::OAuth {
                credentials,
                resource: self.resource.clone(),
            },
            signed_in_at,
            updated_at: now,
        };
        self.backend.save(&self.id, &record).await.map_err(to_auth)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.backend.delete(&self.id).await.map_err(to_auth)?;
        Ok(())
    }

    async fn on_refresh_token_rejected(
        &self,
        credentials: &StoredCredentials,
    ) -> Result<(), AuthError> {
        // Called under the guard rmcp already holds: only what this refresh
        // read is dropped, never credentials another refresh or a new
        // sign-in has put there since.
        let rejected = refresh_token(credentials);
        if rejected.is_none() {
            return Ok(());
        }
        let held = self.credentials().await.map_err(to_auth)?;
        if held.as_ref().and_then(refresh_token) == rejected {
            tracing::info!(
                tenant = %self.id.tenant,
                server = %self.id.server,
                "the upstream's authorization server rejected the refresh token; the sign-in is dropped"
            );
            self.backend.delete(&self.id).await.map_err(to_auth)?;
        }
        Ok(())
    }

    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        let held = self.backend.lock(&self.id).await.map_err(to_auth)?;
        self.refreshing.fetch_add(1, Ordering::SeqCst);
        let counted = Refreshing(self.refreshing.clone());
        Ok(Some(CredentialRefreshGuard::new((held, counted))))
    }
}

fn refresh_token(credentials: &StoredCredentials) -> Option<String> {
    credentials
        .token_response
        .as_ref()
        .and_then(|t| t.refresh_token())
        .map(|t| t.secret().clone())
}
