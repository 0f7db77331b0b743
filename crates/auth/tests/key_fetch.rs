//! Key fetches nobody can queue behind: a provider of our own (a plain
//! HTTP server on a local port) serves metadata and a key set whose answer
//! the test holds back, and tokens naming keys nobody published (no valid
//! signature: an accepted `alg` and the issuer's name are all it takes)
//! are sent at once, with real tokens of a cached and of a just-rotated key.
//!
//! Only `OAuthVerifier`'s public API is used, so the same file runs against
//! an older `jwks.rs` (the queueing one fails every test here).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cem_auth::{OAuthVerifier, Rejection};
use cem_config::OAuthConfig;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const AUDIENCE: &str = "http://127.0.0.1:9/mcp";
/// The verifier's cooldown for unknown key ids (`UNKNOWN_KID_COOLDOWN`).
const COOLDOWN: Duration = Duration::from_secs(2);
/// How many requests may wait for one fetch (`MAX_WAITERS`).
const MAX_WAITERS: usize = 64;
/// Far longer than anything here should take, far shorter than the old
/// queue (two seconds per waiting token).
const PATIENCE: Duration = Duration::from_secs(20);

// Test-only P-256 keys (PKCS#8 DER, in hex), made for this file; they sign
// nothing real.
const K1: &str = "308187020100301306072a8648ce3d020106082a8648ce3d030107046d306b0201010420708a515691384310ad0c60dc5e85d1565f85cc9e7ef75b015385b026f741d932a14403420004206ea337245a3bf6287d830d3f4de9b524b46aff8ab5c6a57c281926c5204a9d8e6a74e76a27a0e7b141141f00ba9051f6e6231156b140c439940e25969241b4";
const K2: &str = "308187020100301306072a8648ce3d020106082a8648ce3d030107046d306b02010104202df3e8d66563c1028d6796948f4bc9d2b59be58f073351b3891fd5050d0fbdcba14403420004a8c2025640b213de991d42ebaf51791fc330625fff718066aa0c11241bb076f4a12182218aca88065526aeb65df30cf19f32d2ed895bcb33d71f68f34bfe7132";

/// The provider: what it publishes, whether the key set may be answered
/// yet, and what it saw.
struct Provider {
    issuer: String,
    /// The key set document served.
    published: Mutex<String>,
    /// `true`: key set requests are answered; `false`: they wait.
    open: watch::Sender<bool>,
    jwks_requests: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

impl Provider {
    async fn start() -> TestResult<Arc<Self>> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let provider = Arc::new(Self {
            issuer: format!("http://127.0.0.1:{port}"),
            published: Mutex::new(String::new()),
            open: watch::Sender::new(true),
            jwks_requests: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        });
        let p = Arc::clone(&provider);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(Arc::clone(&p).serve(stream));
            }
        });
        Ok(provider)
    }

    fn publish(&self, keys: &[(&str, &str)]) -> TestResult {
        let keys = keys
            .iter()
            .map(|(kid, hex)| jwk(kid, hex))
            .collect::<TestResult<Vec<Jwk>>>()?;
        *self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = serde_json::to_string(&JwkSet { keys })?;
        Ok(())
    }

    fn hold(&self) {
        self.open.send_replace(false);
    }

    fn release(&self) {
        self.open.send_replace(true);
    }

    fn fetches(&self) -> usize {
        self.jwks_requests.load(Ordering::SeqCst)
    }

    async fn serve(self: Arc<Self>, mut stream: TcpStream) {
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let head = String::from_utf8_lossy(&head);
        let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
        let body = match path.as_str() {
            "/.well-known/oauth-authorization-server" => serde_json::json!({
                "issuer": self.issuer,
                "jwks_uri": format!("{}/jwks", self.issuer),
            })
            .to_string(),
            "/jwks" => {
                self.jwks_requests.fetch_add(1, Ordering::SeqCst);
                let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                self.max_in_flight.fetch_max(now, Ordering::SeqCst);
                let mut open = self.open.subscribe();
                let _ = open.wait_for(|open| *open).await;
                self.in_flight.fetch_sub(1, Ordering::SeqCst);
                self.published
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone()
            }
            _ => {
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    )
                    .await;
                return;
            }
        };
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(response.as_bytes()).await;
    }

    fn verifier(&self) -> Arc<OAuthVerifier> {
        let config = OAuthConfig {
            issuer: self.issuer.clone(),
            jwks_uri: None,
            audience: Some(AUDIENCE.into()),
            algorithms: vec!["ES256".into()],
            leeway_seconds: 0,
            scopes: BTreeMap::new(),
        };
        Arc::new(OAuthVerifier::new(&config, AUDIENCE))
    }

    /// A real access token signed by key `kid`.
    fn token(&self, kid: &str, hex: &str) -> TestResult<String> {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(kid.into());
        let exp = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs() + 600;
        let claims = serde_json::json!({
            "iss": self.issuer, "sub": "alice", "aud": AUDIENCE, "exp": exp, "scope": "execute",
        });
        Ok(jsonwebtoken::encode(&header, &claims, &signing_key(hex)?)?)
    }

    /// What an attacker sends: an accepted `alg`, the issuer's name, a key
    /// id nobody published, and no signature worth the name.
    fn garbage(&self, i: usize) -> String {
        let header =
            serde_json::json!({"alg": "ES256", "typ": "JWT", "kid": format!("made-up-{i}")});
        let claims = serde_json::json!({"iss": self.issuer, "sub": "mallory", "aud": AUDIENCE, "exp": 4_000_000_000u64});
        format!(
            "{}.{}.{}",
            b64(&header.to_string()),
            b64(&claims.to_string()),
            b64("not a signature")
        )
    }
}

fn jwk(kid: &str, hex: &str) -> TestResult<Jwk> {
    let mut jwk = Jwk::from_encoding_key(&signing_key(hex)?, Algorithm::ES256)?;
    jwk.common.key_id = Some(kid.into());
    Ok(jwk)
}

fn signing_key(hex: &str) -> TestResult<EncodingKey> {
    let der = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()?;
    Ok(EncodingKey::from_ec_der(&der))
}

fn b64(text: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = text.as_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

fn verify(verifier: &Arc<OAuthVerifier>, token: String) -> JoinHandle<Result<String, Rejection>> {
    let verifier = Arc::clone(verifier);
    tokio::spawn(async move { verifier.verify(&token).await.map(|p| p.name) })
}

/// The answer of a verification, which must come by `deadline` (set by
/// each test to [`PATIENCE`] from a point where nothing should wait long).
async fn answer(
    handle: JoinHandle<Result<String, Rejection>>,
    deadline: Instant,
) -> TestResult<Result<String, Rejection>> {
    let joined = tokio::time::timeout_at(deadline.into(), handle)
        .await
        .map_err(
            |_| "a verification was still waiting at the deadline: it queued behind other fetches",
        )?;
    Ok(joined?)
}

fn deadline() -> Instant {
    Instant::now() + PATIENCE
}

/// Waits (bounded) until `done` holds; for a state the test cannot be told of.
async fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn not_published(result: &Result<String, Rejection>) -> bool {
    matches!(result, Err(r) if r.status == 401 && r.description.contains("does not publish"))
}

fn busy(result: &Result<String, Rejection>) -> bool {
    matches!(result, Err(r) if r.status == 401 && r.description.contains("already waiting"))
}

/// Within the cooldown after a fetch that an unknown key id caused, more
/// unknown key ids are refused from the cache at once: no fetch, no wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_kids_within_the_cooldown_are_refused_at_once() -> TestResult {
    let provider = Provider::start().await?;
    provider.publish(&[("k1", K1)])?;
    let verifier = provider.verifier();
    // The first real token finds an empty cache: that fetch starts the cooldown.
    assert_eq!(
        answer(verify(&verifier, provider.token("k1", K1)?), deadline()).await?,
        Ok("alice".into())
    );
    assert_eq!(provider.fetches(), 1);
    // Any fetch from now on would hang: only answers from the cache come back.
    provider.hold();
    let by = deadline();
    let garbage: Vec<_> = (0..40)
        .map(|i| verify(&verifier, provider.garbage(i)))
        .collect();
    for handle in garbage {
        let result = answer(handle, by).await?;
        assert!(not_published(&result), "{result:?}");
    }
    assert_eq!(
        provider.fetches(),
        1,
        "a token naming a made-up key fetched the key set again"
    );
    assert_eq!(
        answer(verify(&verifier, provider.token("k1", K1)?), deadline()).await?,
        Ok("alice".into())
    );
    provider.release();
    Ok(())
}

/// After the cooldown, 40 tokens naming made-up keys share ONE fetch with
/// a real token of a just-rotated key; a token of a cached key is answered
/// while that fetch is still held, and nobody waits for a second fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_fetch_serves_every_waiter_and_a_cached_key_never_waits() -> TestResult {
    let provider = Provider::start().await?;
    provider.publish(&[("k1", K1)])?;
    let verifier = provider.verifier();
    assert_eq!(
        answer(verify(&verifier, provider.token("k1", K1)?), deadline()).await?,
        Ok("alice".into())
    );
    tokio::time::sleep(COOLDOWN + Duration::from_millis(300)).await;
    // The provider rotates (k2 is published); its key set answers only when told.
    provider.publish(&[("k1", K1), ("k2", K2)])?;
    provider.hold();
    let garbage: Vec<_> = (0..40)
        .map(|i| verify(&verifier, provider.garbage(i)))
        .collect();
    until("a key set fetch is in flight", || {
        provider.in_flight.load(Ordering::SeqCst) == 1
    })
    .await;
    let rotated = verify(&verifier, provider.token("k2", K2)?);
    // A cached key: answered while the fetch is held, so it waited behind nothing.
    assert_eq!(
        answer(verify(&verifier, provider.token("k1", K1)?), deadline()).await?,
        Ok("alice".into())
    );
    assert!(
        garbage.iter().all(|h| !h.is_finished()),
        "the made-up keys wait for the fetch"
    );
    assert!(!rotated.is_finished());
    provider.release();
    let by = deadline();
    for handle in garbage {
        let result = answer(handle, by).await?;
        assert!(not_published(&result), "{result:?}");
    }
    assert_eq!(answer(rotated, by).await?, Ok("alice".into()));
    assert_eq!(
        provider.fetches(),
        2,
        "one fetch to start, ONE for all 41 unknown key ids"
    );
    assert_eq!(provider.max_in_flight.load(Ordering::SeqCst), 1);
    Ok(())
}

/// Beyond the cap, a token naming an unknown key is refused at once with
/// a reason (it does not join a queue that grows with what is sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_beyond_the_cap_are_refused_at_once() -> TestResult {
    let provider = Provider::start().await?;
    provider.publish(&[("k1", K1)])?;
    let verifier = provider.verifier();
    assert_eq!(
        answer(verify(&verifier, provider.token("k1", K1)?), deadline()).await?,
        Ok("alice".into())
    );
    tokio::time::sleep(COOLDOWN + Duration::from_millis(300)).await;
    provider.hold();
    let sent = MAX_WAITERS + 36;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let by = deadline();
    for i in 0..sent {
        let handle = verify(&verifier, provider.garbage(i));
        let tx = tx.clone();
        tokio::spawn(async move {
            let _ = tx.send(answer(handle, by).await);
        });
    }
    drop(tx);
    let mut results = Vec::new();
    // While the one fetch is held, only the refusals beyond the cap come back.
    while results.len() < sent - MAX_WAITERS {
        let result = tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .map_err(|_| "no refusal beyond the cap came back while the fetch was held")?
            .ok_or("a verification ended without an answer")??;
        assert!(busy(&result), "answered before the fetch ended: {result:?}");
        results.push(result);
    }
    // A refusal comes back at once, while the fetch it would not wait for
    // is a task that may not have reached the provider yet.
    until("the held fetch reached the provider", || {
        provider.in_flight.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(provider.fetches(), 2);
    provider.release();
    while let Some(result) = rx.recv().await {
        results.push(result?);
    }
    assert_eq!(results.len(), sent);
    assert_eq!(
        results.iter().filter(|r| busy(r)).count(),
        sent - MAX_WAITERS
    );
    assert_eq!(
        results.iter().filter(|r| not_published(r)).count(),
        MAX_WAITERS
    );
    assert_eq!(provider.fetches(), 2, "the waiters shared one fetch");
    assert_eq!(provider.max_in_flight.load(Ordering::SeqCst), 1);
    Ok(())
}

/// A key set that never comes: every waiting request is answered (503)
/// when the one fetch times out, not one fetch timeout after another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_provider_holds_no_request_past_the_fetch_timeout() -> TestResult {
    let provider = Provider::start().await?;
    provider.publish(&[("k1", K1)])?;
    provider.hold();
    let verifier = provider.verifier();
    let started = Instant::now();
    let by = deadline();
    let mut waiting: Vec<_> = (0..20)
        .map(|i| verify(&verifier, provider.garbage(i)))
        .collect();
    waiting.push(verify(&verifier, provider.token("k1", K1)?));
    for handle in waiting {
        let result = answer(handle, by).await?;
        assert!(matches!(&result, Err(r) if r.status == 503), "{result:?}");
    }
    // The fetch timeout is 10 s; the old queue took that long per token.
    assert!(started.elapsed() < PATIENCE, "{:?}", started.elapsed());
    assert_eq!(provider.fetches(), 1, "one fetch for all 21 waiters");
    // Moments after the failure, an unknown key id is answered from it at once.
    let again = answer(verify(&verifier, provider.garbage(99)), deadline()).await?;
    assert!(matches!(&again, Err(r) if r.status == 503), "{again:?}");
    assert_eq!(provider.fetches(), 1);
    provider.release();
    Ok(())
}
