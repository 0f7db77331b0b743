//! The identity provider's signing keys: found through its metadata,
//! fetched, cached, and fetched again when a token names a key the cache
//! does not have (the provider rotated its keys).
//!
//! No request waits behind another's network I/O. The cache is read under
//! short locks that are never held across an `await`, so a token of a
//! cached key is answered while any fetch runs. A fetch runs in a task of
//! its own and every request that needs it shares its outcome (single
//! flight): a token naming a key the cache lacks waits for the fetch in
//! flight (at most [`MAX_WAITERS`] at once, the others are refused at
//! once), starts one if none ran for an unknown key within
//! [`UNKNOWN_KID_COOLDOWN`], and is otherwise answered from the cache at
//! once. A fetch ends within [`FETCH_TIMEOUT`], whatever the provider does.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{Jwk, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;
use tokio::sync::watch;

use crate::AuthError;

/// Keys older than this are fetched again.
const MAX_AGE: Duration = Duration::from_secs(600);
/// Past [`MAX_AGE`] a cached key still verifies tokens while the fetch runs
/// in the background (so a token of a known key never waits for the
/// provider), until this long after the last successful fetch; an older
/// set is not trusted without a fetch.
const MAX_STALE: Duration = Duration::from_secs(3600);
/// Tokens naming keys the cache lacks start at most one fetch this often,
/// so garbage tokens cannot turn the server into a JWKS hammer; in between
/// they are answered from the cache at once.
pub(crate) const UNKNOWN_KID_COOLDOWN: Duration = Duration::from_secs(2);
/// Requests that may wait at once for the fetch in flight (each holds a
/// connection); a further token naming an unknown key is refused at once.
pub(crate) const MAX_WAITERS: usize = 64;
/// A whole fetch (metadata and key set) ends by then, so a slow or hanging
/// provider holds no request longer.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
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
    inner: Arc<Inner>,
}

/// The cache itself, shared with the task of a fetch in flight.
struct Inner {
    client: reqwest::Client,
    issuer: String,
    configured_uri: Option<String>,
    discovered_uri: Mutex<Option<String>>,
    keys: RwLock<Option<Fetched>>,
    flights: Mutex<Flights>,
}

/// What a fetch gives the requests waiting for it (`None` while it runs).
type Outcome = Option<Result<KeySetReport, AuthError>>;

#[derive(Default)]
struct Flights {
    /// The fetch in flight.
    current: Option<Flight>,
    /// When the last fetch ended, whatever started it: a stale set is
    /// refreshed in the background at most once per cooldown.
    last_end: Option<Instant>,
    /// The last fetch a token naming an unknown key started or waited for:
    /// when it ended, and why it failed if it did.
    last_for_unknown: Option<(Instant, Option<AuthError>)>,
}

struct Flight {
    done: watch::Receiver<Outcome>,
    waiters: Arc<AtomicUsize>,
    /// Whether a token naming an unknown key started or joined it (then its
    /// end starts the cooldown).
    for_unknown: bool,
}

/// A request waiting for a fetch; it holds one of the flight's waiter
/// slots until it is dropped (answered, or its client went away).
struct Waiter {
    done: watch::Receiver<Outcome>,
    waiters: Arc<AtomicUsize>,
}

impl Waiter {
    fn new(flight: &Flight) -> Self {
        flight.waiters.fetch_add(1, Ordering::SeqCst);
        Self {
            done: flight.done.clone(),
            waiters: Arc::clone(&flight.waiters),
        }
    }

    async fn outcome(mut self, issuer: &str) -> Result<KeySetReport, AuthError> {
        let stopped = || AuthError::Fetch {
            url: issuer.to_string(),
            reason: "the key fetch stopped before it finished".into(),
        };
        // The fetch has its own deadline; this one only guards against a
        // fetch task that is never run again (a runtime shutting down).
        let wait = self.done.wait_for(Option::is_some);
        match tokio::time::timeout(FETCH_TIMEOUT + Duration::from_secs(1), wait).await {
            Ok(Ok(outcome)) => outcome.clone().unwrap_or_else(|| Err(stopped())),
            Ok(Err(_)) => Err(stopped()),
            Err(_) => Err(AuthError::TimedOut {
                issuer: issuer.to_string(),
                seconds: FETCH_TIMEOUT.as_secs(),
            }),
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Why a fetch is wanted.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// A token names a key the cache lacks (rotation, or garbage).
    UnknownKid,
    /// A token's key is cached but the set is past [`MAX_AGE`].
    Stale,
}

/// What a request needing a fetch does.
enum Join {
    /// Waits for this fetch's outcome.
    Wait(Waiter),
    /// Uses the cache as it is (within the cooldown, or a background
    /// refresh is under way).
    FromCache,
    /// Is refused: the last fetch, moments ago, failed like this, or too
    /// many requests wait already.
    Refused(AuthError),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere leaves the data as consistent as each line left
    // it (plain assignments), so the cache stays usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl std::fmt::Debug for KeyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyCache")
            .field("issuer", &self.inner.issuer)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct Metadata {
    issuer: Option<String>,
    jwks_uri: Option<String>,
}

/// What the cache holds for a key id.
enum Cached {
    Fresh(Vec<Key>),
    /// Past [`MAX_AGE`], within [`MAX_STALE`].
    Stale(Vec<Key>),
    Missing,
}

impl KeyCache {
    pub fn new(issuer: &str, jwks_uri: Option<&str>) -> Self {
        let client = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .connect_timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::limited(3))
            .build()
            .unwrap_or_default();
        Self {
            inner: Arc::new(Inner {
                client,
                issuer: issuer.to_string(),
                configured_uri: jwks_uri.map(str::to_string),
                discovered_uri: Mutex::new(None),
                keys: RwLock::new(None),
                flights: Mutex::new(Flights::default()),
            }),
        }
    }

    /// The keys that may have signed a token with header `kid`: from the
    /// cache at once, else after the fetch this request starts or joins
    /// (see the module's doc for when it does neither). Empty: the
    /// provider does not publish such a key (as of its last fetch).
    pub(crate) async fn candidates(&self, kid: Option<&str>) -> Result<Vec<Key>, AuthError> {
        let inner = &self.inner;
        match inner.lookup(kid) {
            Cached::Fresh(keys) => return Ok(keys),
            Cached::Stale(keys) => {
                // Served now; the refresh runs on its own, and only a
                // successful one replaces these keys.
                let _ = inner.join(Purpose::Stale);
                return Ok(keys);
            }
            Cached::Missing => {}
        }
        match inner.join(Purpose::UnknownKid) {
            Join::Wait(waiter) => {
                waiter.outcome(&inner.issuer).await?;
            }
            Join::FromCache => {}
            Join::Refused(e) => return Err(e),
        }
        Ok(match inner.lookup(kid) {
            Cached::Fresh(keys) | Cached::Stale(keys) => keys,
            Cached::Missing => Vec::new(),
        })
    }

    /// Fetches the key set now (for `doctor` and start-up), or waits for
    /// the fetch already in flight. Not subject to the cooldown. A failed
    /// fetch keeps the keys already cached.
    pub async fn refresh(&self) -> Result<KeySetReport, AuthError> {
        let waiter = {
            let mut flights = lock(&self.inner.flights);
            self.inner.start_or_join(&mut flights, false)
        };
        waiter.outcome(&self.inner.issuer).await
    }
}

impl Inner {
    fn lookup(&self, kid: Option<&str>) -> Cached {
        let keys = self.keys.read().unwrap_or_else(PoisonError::into_inner);
        let Some(fetched) = keys.as_ref() else {
            return Cached::Missing;
        };
        let age = fetched.at.elapsed();
        let found = matching(&fetched.keys, kid);
        if found.is_empty() || age > MAX_STALE {
            Cached::Missing
        } else if age > MAX_AGE {
            Cached::Stale(found)
        } else {
            Cached::Fresh(found)
        }
    }

    /// Decides, under one short lock, whether a request waits for a fetch,
    /// starts one, uses the cache, or is refused.
    fn join(self: &Arc<Self>, purpose: Purpose) -> Join {
        let mut flights = lock(&self.flights);
        // A flight whose task is gone (its runtime shut down) is replaced.
        let live = flights
            .current
            .as_ref()
            .is_some_and(|f| f.done.has_changed().is_ok());
        if live && let Some(flight) = flights.current.as_mut() {
            return match purpose {
                Purpose::Stale => Join::FromCache,
                Purpose::UnknownKid => {
                    let waiting = flight.waiters.load(Ordering::SeqCst);
                    if waiting >= MAX_WAITERS {
                        Join::Refused(AuthError::KeysBusy { waiting })
                    } else {
                        flight.for_unknown = true;
                        Join::Wait(Waiter::new(flight))
                    }
                }
            };
        }
        match purpose {
            Purpose::UnknownKid => {
                if let Some((at, failure)) = &flights.last_for_unknown
                    && at.elapsed() < UNKNOWN_KID_COOLDOWN
                {
                    return match failure {
                        Some(e) => Join::Refused(e.clone()),
                        None => Join::FromCache,
                    };
                }
                Join::Wait(self.start_or_join(&mut flights, true))
            }
            Purpose::Stale => {
                if flights
                    .last_end
                    .is_none_or(|at| at.elapsed() >= UNKNOWN_KID_COOLDOWN)
                {
                    drop(self.start_or_join(&mut flights, false));
                }
                Join::FromCache
            }
        }
    }

    /// The fetch in flight, or a new one in a task of its own (so it ends,
    /// and its outcome reaches every waiter, even when the request that
    /// started it goes away).
    fn start_or_join(self: &Arc<Self>, flights: &mut Flights, for_unknown: bool) -> Waiter {
        if let Some(flight) = flights.current.as_mut()
            && flight.done.has_changed().is_ok()
        {
            flight.for_unknown |= for_unknown;
            return Waiter::new(flight);
        }
        let (tx, rx) = watch::channel(None);
        let flight = Flight {
            done: rx,
            waiters: Arc::new(AtomicUsize::new(0)),
            for_unknown,
        };
        let waiter = Waiter::new(&flight);
        flights.current = Some(flight);
        tokio::spawn(Arc::clone(self).fly(tx));
        waiter
    }

    async fn fly(self: Arc<Self>, done: watch::Sender<Outcome>) {
        let outcome = match tokio::time::timeout(FETCH_TIMEOUT, self.fetch()).await {
            Ok(outcome) => outcome,
            Err(_) => Err(AuthError::TimedOut {
                issuer: self.issuer.clone(),
                seconds: FETCH_TIMEOUT.as_secs(),
            }),
        };
        if let Err(e) = &outcome {
            tracing::warn!(error = %e, "cannot fetch the identity provider's keys");
        }
        {
            let mut flights = lock(&self.flights);
            let for_unknown = flights.current.take().is_some_and(|f| f.for_unknown);
            let now = Instant::now();
            flights.last_end = Some(now);
            if for_unknown {
                flights.last_for_unknown = Some((now, outcome.as_ref().err().cloned()));
            }
        }
        done.send_replace(Some(outcome));
    }

    /// One fetch of the key set (and, the first time, of the metadata).
    async fn fetch(&self) -> Result<KeySetReport, AuthError> {
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
        *self.keys.write().unwrap_or_else(PoisonError::into_inner) = Some(Fetched {
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
        let discovered = lock(&self.discovered_uri).clone();
        if let Some(uri) = discovered {
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
                    *lock(&self.discovered_uri) = Some(uri.clone());
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
    use super::*;

    /// A key of a set past its age is used at once while the set is fetched
    /// again in the background (here from an endpoint that never answers).
    #[tokio::test]
    async fn a_stale_set_serves_its_keys_while_it_is_refreshed()
    -> Result<(), Box<dyn std::error::Error>> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let jwks = format!("http://{}/jwks", listener.local_addr()?);
        let cache = KeyCache::new("http://127.0.0.1:9", Some(&jwks));
        let at = Instant::now()
            .checked_sub(MAX_AGE + Duration::from_secs(60))
            .ok_or("the clock is too young for this test")?;
        let key = Key {
            kid: Some("k1".into()),
            alg: None,
            key: DecodingKey::from_secret(b"test"),
        };
        *cache.inner.keys.write().map_err(|e| e.to_string())? = Some(Fetched {
            keys: vec![key],
            at,
        });
        let found =
            tokio::time::timeout(Duration::from_secs(5), cache.candidates(Some("k1"))).await??;
        assert_eq!(found.len(), 1);
        // The refresh is under way: the endpoint is asked, and a flight is up.
        tokio::time::timeout(Duration::from_secs(5), listener.accept()).await??;
        assert!(lock(&cache.inner.flights).current.is_some());
        // A second token of that key neither waits nor starts another fetch.
        let again =
            tokio::time::timeout(Duration::from_secs(5), cache.candidates(Some("k1"))).await??;
        assert_eq!(again.len(), 1);
        assert!(
            tokio::time::timeout(Duration::from_millis(300), listener.accept())
                .await
                .is_err()
        );
        Ok(())
    }

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
