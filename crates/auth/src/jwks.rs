//! The identity provider's signing keys: found through its metadata,
//! fetched, cached, and fetched again when a token names a key the cache
//! does not have (the provider rotated its keys).

use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{Jwk, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;
use tokio::sync::{Mutex, RwLock};

use crate::AuthError;

/// Keys older than this are fetched again before use.
const MAX_AGE: Duration = Duration::from_secs(600);
/// A token naming an unknown key triggers at most one fetch this often, so
/// garbage tokens cannot turn the server into a JWKS hammer.
const UNKNOWN_KID_COOLDOWN: Duration = Duration::from_secs(2);
/// Metadata and key sets larger than this are refused.
const MAX_DOCUMENT: usize = 1 << 20;

/// A usable key of the set.
#[derive(Clone)]
pub(crate) struct Key {
    pub kid: Option<String>,
    /// The algorithm the key is published for, if it says.
    pub alg: Option<Algorithm>,
    pub key: DecodingKey,
}

struct Fetched {
    keys: Vec<Key>,
    at: Instant,
}

/// What a fetch found, for `doctor`.
#[derive(Debug, Clone)]
pub struct KeySetReport {
    pub jwks_uri: String,
    /// Key ids (or `-` for a key without one).
    pub kids: Vec<String>,
}

/// The cached key set of one issuer.
pub struct KeyCache {
    client: reqwest::Client,
    issuer: String,
    configured_uri: Option<String>,
    discovered_uri: RwLock<Option<String>>,
    keys: RwLock<Option<Fetched>>,
    /// Single flight for fetches, with the time of the last one.
    fetching: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for KeyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyCache")
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct Metadata {
    issuer: Option<String>,
    jwks_uri: Option<String>,
}

impl KeyCache {
    pub fn new(issuer: &str, jwks_uri: Option<&str>) -> Self {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .connect_timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::limited(3))
            .build()
            .unwrap_or_default();
        Self {
            client,
            issuer: issuer.to_string(),
            configured_uri: jwks_uri.map(str::to_string),
            discovered_uri: RwLock::new(None),
            keys: RwLock::new(None),
            fetching: Mutex::new(None),
        }
    }

    /// The keys that may have signed a token with header `kid`: from the
    /// cache, else fetched (a key id the cache lacks triggers a fetch, at
    /// most once per cooldown).
    pub(crate) async fn candidates(&self, kid: Option<&str>) -> Result<Vec<Key>, AuthError> {
        if let Some(found) = self.cached(kid).await {
            return Ok(found);
        }
        self.refresh(true).await?;
        Ok(self.cached_any_age(kid).await)
    }

    async fn cached(&self, kid: Option<&str>) -> Option<Vec<Key>> {
        let keys = self.keys.read().await;
        let fetched = keys.as_ref()?;
        if fetched.at.elapsed() > MAX_AGE {
            return None;
        }
        let found = matching(&fetched.keys, kid);
        (!found.is_empty()).then_some(found)
    }

    async fn cached_any_age(&self, kid: Option<&str>) -> Vec<Key> {
        match self.keys.read().await.as_ref() {
            Some(fetched) => matching(&fetched.keys, kid),
            None => Vec::new(),
        }
    }

    /// Fetches the key set again. With `cooldown`, skips the fetch when one
    /// ran moments ago (a burst of tokens with an unknown key). A failed
    /// fetch keeps the keys already cached.
    pub async fn refresh(&self, cooldown: bool) -> Result<KeySetReport, AuthError> {
        let mut last = self.fetching.lock().await;
        if cooldown
            && let Some(at) = *last
            && at.elapsed() < UNKNOWN_KID_COOLDOWN
        {
            // Waiting (with the lock held) rather than refusing: a token
            // of freshly rotated keys is still served, a moment late, and
            // a flood of made-up key ids still causes one fetch per period.
            tokio::time::sleep(UNKNOWN_KID_COOLDOWN.saturating_sub(at.elapsed())).await;
        }
        *last = Some(Instant::now());
        let uri = self.jwks_uri().await?;
        let set: JwkSet = self.get_json(&uri).await?;
        let mut keys = Vec::new();
        let mut skipped = Vec::new();
        for jwk in &set.keys {
            match usable(jwk) {
                Ok(key) => keys.push(key),
                Err(why) => skipped.push(format!(
                    "{}: {why}",
                    jwk.common.key_id.as_deref().unwrap_or("-")
                )),
            }
        }
        if keys.is_empty() {
            return Err(AuthError::BadDocument {
                url: uri,
                reason: format!("no signing key in the set ({})", skipped.join("; ")),
            });
        }
        let kids = keys
            .iter()
            .map(|k| k.kid.clone().unwrap_or_else(|| "-".into()))
            .collect();
        tracing::info!(jwks_uri = %uri, keys = keys.len(), "identity provider keys fetched");
        *self.keys.write().await = Some(Fetched {
            keys,
            at: Instant::now(),
        });
        Ok(KeySetReport {
            jwks_uri: uri,
            kids,
        })
    }

    /// The JWKS URL: configured, or read from the issuer's metadata.
    async fn jwks_uri(&self) -> Result<String, AuthError> {
        if let Some(uri) = &self.configured_uri {
            return Ok(uri.clone());
        }
        if let Some(uri) = self.discovered_uri.read().await.clone() {
            return Ok(uri);
        }
        let mut tried = Vec::new();
        for url in metadata_urls(&self.issuer) {
            match self.get_json::<Metadata>(&url).await {
                Ok(meta) => {
                    if let Some(found) = &meta.issuer
                        && found.trim_end_matches('/') != self.issuer.trim_end_matches('/')
                    {
                        return Err(AuthError::BadDocument {
                            url,
                            reason: format!(
                                "it names issuer {found:?}, not {:?}; set auth.oauth.issuer to the provider's issuer exactly",
                                self.issuer
                            ),
                        });
                    }
                    let Some(uri) = meta.jwks_uri else {
                        return Err(AuthError::BadDocument {
                            url,
                            reason: "it has no jwks_uri; set auth.oauth.jwks_uri".into(),
                        });
                    };
                    *self.discovered_uri.write().await = Some(uri.clone());
                    return Ok(uri);
                }
                Err(e) => tried.push(format!("{url} ({e})")),
            }
        }
        Err(AuthError::NoMetadata {
            issuer: self.issuer.clone(),
            tried: tried.join(", "),
        })
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, AuthError> {
        let fetch = |reason: String| AuthError::Fetch {
            url: url.to_string(),
            reason,
        };
        let response = self
            .client
            .get(url)
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| fetch(e.to_string()))?;
        let status = response.status();
        if !status.is_success() {
            return Err(fetch(format!("HTTP {status}")));
        }
        let body = response.bytes().await.map_err(|e| fetch(e.to_string()))?;
        if body.len() > MAX_DOCUMENT {
            return Err(fetch(format!("larger than {MAX_DOCUMENT} bytes")));
        }
        serde_json::from_slice(&body).map_err(|e| AuthError::BadDocument {
            url: url.to_string(),
            reason: format!("not the expected JSON: {e}"),
        })
    }
}

/// Where an issuer's metadata may be, in the order the MCP authorization
/// spec has clients try: RFC 8414 with the path inserted, then OpenID
/// Connect discovery (path inserted, then appended).
fn metadata_urls(issuer: &str) -> Vec<String> {
    let Ok(url) = url::Url::parse(issuer) else {
        return Vec::new();
    };
    let origin = url.origin().ascii_serialization();
    let path = url.path().trim_end_matches('/');
    if path.is_empty() {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server"),
            format!("{origin}/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{origin}/.well-known/openid-configuration{path}"),
            format!("{origin}{path}/.well-known/openid-configuration"),
        ]
    }
}

fn matching(keys: &[Key], kid: Option<&str>) -> Vec<Key> {
    keys.iter()
        .filter(|k| match kid {
            Some(kid) => k.kid.as_deref() == Some(kid),
            // A token without a key id may be checked against every key.
            None => true,
        })
        .cloned()
        .collect()
}

fn usable(jwk: &Jwk) -> Result<Key, String> {
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return Err("an encryption key".into());
    }
    let alg = match jwk.common.key_algorithm {
        Some(a) => Some(
            a.to_string()
                .parse::<Algorithm>()
                .map_err(|_| format!("algorithm {a} is not for signatures"))?,
        ),
        None => None,
    };
    let key = DecodingKey::from_jwk(jwk).map_err(|e| e.to_string())?;
    Ok(Key {
        kid: jwk.common.key_id.clone(),
        alg,
        key,
    })
}

#[cfg(test)]
mod tests {
    use super::metadata_urls;

    #[test]
    fn metadata_locations_follow_the_spec_order() {
        assert_eq!(
            metadata_urls("https://idp.example.com"),
            [
                "https://idp.example.com/.well-known/oauth-authorization-server",
                "https://idp.example.com/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            metadata_urls("https://idp.example.com/tenant1/"),
            [
                "https://idp.example.com/.well-known/oauth-authorization-server/tenant1",
                "https://idp.example.com/.well-known/openid-configuration/tenant1",
                "https://idp.example.com/tenant1/.well-known/openid-configuration"
            ]
        );
    }
}
