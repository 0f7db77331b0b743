//! The sealed file store: what it keeps, what it refuses, and that its
//! refresh lock holds across tasks and processes, driven both directly and
//! through rmcp's own refresh.

use std::error::Error;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use async_trait::async_trait;
use cem_signin::{
    Backend, CredentialId, FileBackend, PersonStore, Record, Secret, StoreError, Summary, TokenKey,
};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadata, CredentialRefreshGuard,
    CredentialStore, OAuthClientConfig, OAuthTokenResponse, StoredCredentials,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::mpsc;

type Result<T = ()> = std::result::Result<T, Box<dyn Error>>;

const KEY: &str = "8f0e1d2c3b4a59687766554433221100ffeeddccbbaa99887766554433221100";
const OTHER_KEY: &str = "0000000000000000000000000000000000000000000000000000000000000001";
const RESOURCE: &str = "https://mcp.example.com/mcp";
/// Generous: only reached when the code under test hangs.
const HANG: Duration = Duration::from_secs(20);

fn key(hex: &str) -> Result<Arc<TokenKey>> {
    Ok(Arc::new(TokenKey::from_hex(hex)?))
}

fn token(access: &str, refresh: Option<&str>) -> Result<OAuthTokenResponse> {
    let mut body = serde_json::json!({
        "access_token": access, "token_type": "bearer", "expires_in": 3600,
    });
    if let Some(r) = refresh {
        body["refresh_token"] = r.into();
    }
    Ok(serde_json::from_value(body)?)
}

fn credentials(access: &str, refresh: &str) -> Result<StoredCredentials> {
    Ok(StoredCredentials::new(
        "client".into(),
        Some(token(access, Some(refresh))?),
        vec!["read".into(), "write".into()],
        Some(1_000),
    )
    .with_issuer(Some("https://idp.example.com".into())))
}

fn oauth(access: &str, refresh: &str, resource: &str) -> Result<Record> {
    Ok(Record {
        secret: Secret::OAuth {
            credentials: credentials(access, refresh)?,
            resource: resource.into(),
        },
        signed_in_at: 100,
        updated_at: 200,
    })
}

fn api_key(value: &str) -> Record {
    Record {
        secret: Secret::ApiKey {
            header: "X-Api-Key".into(),
            value: value.into(),
        },
        signed_in_at: 300,
        updated_at: 300,
    }
}

fn refresh_of(record: &Record) -> Option<String> {
    use oauth2::TokenResponse as _;
    match &record.secret {
        Secret::OAuth { credentials, .. } => credentials
            .token_response
            .as_ref()
            .and_then(|t| t.refresh_token())
            .map(|t| t.secret().clone()),
        Secret::ApiKey { .. } => None,
    }
}

fn mode(path: &Path) -> Result<u32> {
    Ok(std::fs::metadata(path)?.permissions().mode() & 0o777)
}

#[tokio::test]
async fn save_load_list_delete() -> Result {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("signin");
    let store = FileBackend::new(&root, key(KEY)?);
    let github = CredentialId::new("alice", "github");
    let search = CredentialId::new("alice", "search");
    let bobs = CredentialId::new("bob", "github");

    assert!(store.load(&github).await?.is_none());
    assert!(store.list(None).await?.is_empty());

    store.save(&github, &oauth("a1", "r1", RESOURCE)?).await?;
    store.save(&search, &api_key("k-123")).await?;
    store.save(&bobs, &oauth("b1", "rb1", RESOURCE)?).await?;

    let loaded = store.load(&github).await?.ok_or("no record")?;
    assert_eq!(refresh_of(&loaded).as_deref(), Some("r1"));
    assert_eq!((loaded.signed_in_at, loaded.updated_at), (100, 200));
    match store.load(&search).await?.ok_or("no record")?.secret {
        Secret::ApiKey { header, value } => {
            assert_eq!((header.as_str(), value.as_str()), ("X-Api-Key", "k-123"))
        }
        other => return Err(format!("expected an api key, got {other:?}").into()),
    }

    let alice = store.list(Some("alice")).await?;
    assert_eq!(
        alice,
        vec![
            Summary {
                tenant: "alice".into(),
                server: "github".into(),
                kind: "oauth",
                issuer: Some("https://idp.example.com".into()),
                scopes: vec!["read".into(), "write".into()],
                expires_at: Some(1_000 + 3600),
                refreshable: true,
                signed_in_at: 100,
                updated_at: 200,
                error: None,
            },
            Summary {
                tenant: "alice".into(),
                server: "search".into(),
                kind: "api_key",
                issuer: None,
                scopes: vec![],
                expires_at: None,
                refreshable: false,
                signed_in_at: 300,
                updated_at: 300,
                error: None,
            },
        ]
    );
    let all: Vec<_> = store
        .list(None)
        .await?
        .into_iter()
        .map(|s| (s.tenant, s.server))
        .collect();
    assert_eq!(
        all,
        [("alice", "github"), ("alice", "search"), ("bob", "github")]
            .map(|(t, s)| (t.to_string(), s.to_string()))
    );

    // Owner-only, and no temporary files left beside the records.
    let file = store.path_of(&github)?;
    assert_eq!(mode(&root)?, 0o700);
    assert_eq!(mode(&root.join("alice"))?, 0o700);
    assert_eq!(mode(&file)?, 0o600);
    let names: Vec<String> = std::fs::read_dir(root.join("alice"))?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<std::result::Result<_, _>>()?;
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(
        names
            .iter()
            .all(|n| n.len() == 32 + ".sealed".len() && n.ends_with(".sealed")),
        "{names:?}"
    );

    // Saving again replaces.
    store.save(&github, &oauth("a2", "r2", RESOURCE)?).await?;
    let loaded = store.load(&github).await?.ok_or("no record")?;
    assert_eq!(refresh_of(&loaded).as_deref(), Some("r2"));

    assert!(store.delete(&github).await?);
    assert!(!store.delete(&github).await?);
    assert!(store.load(&github).await?.is_none());
    assert_eq!(store.list(Some("alice")).await?.len(), 1);
    assert!(store.describe().contains(&root.display().to_string()));
    Ok(())
}

#[tokio::test]
async fn the_files_hold_no_secret_in_plain_text() -> Result {
    let dir = tempfile::tempdir()?;
    let store = FileBackend::new(dir.path(), key(KEY)?);
    let github = CredentialId::new("alice", "github");
    let search = CredentialId::new("alice", "search");
    store
        .save(
            &github,
            &oauth("ACCESS-TOKEN-abc123", "REFRESH-TOKEN-xyz789", RESOURCE)?,
        )
        .await?;
    store.save(&search, &api_key("API-KEY-secret-456")).await?;
    for id in [&github, &search] {
        let bytes = std::fs::read(store.path_of(id)?)?;
        for needle in [
            "ACCESS-TOKEN-abc123",
            "REFRESH-TOKEN-xyz789",
            "API-KEY-secret-456",
            "github",
            "search",
            "client",
        ] {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle.as_bytes()),
                "{needle} is in the file of {id} in plain text"
            );
        }
    }
    // Debug output of what is loaded does not show them either.
    let debug = format!(
        "{:?} {:?}",
        store.load(&github).await?,
        store.load(&search).await?
    );
    for needle in ["ACCESS-TOKEN", "REFRESH-TOKEN", "API-KEY"] {
        assert!(!debug.contains(needle), "{debug}");
    }
    Ok(())
}

#[tokio::test]
async fn a_record_moved_to_another_slot_or_opened_with_another_key_is_refused() -> Result {
    let dir = tempfile::tempdir()?;
    let store = FileBackend::new(dir.path(), key(KEY)?);
    let alices = CredentialId::new("alice", "github");
    let bobs = CredentialId::new("bob", "github");
    let alices_other = CredentialId::new("alice", "gitlab");
    store.save(&alices, &oauth("a1", "r1", RESOURCE)?).await?;
    store.save(&bobs, &oauth("b1", "rb1", RESOURCE)?).await?;

    // Bob's slot gets Alice's file: it does not open as Bob's.
    std::fs::copy(store.path_of(&alices)?, store.path_of(&bobs)?)?;
    let err = store
        .load(&bobs)
        .await
        .err()
        .ok_or("Alice's record opened as Bob's")?;
    assert!(matches!(err, StoreError::Sealed { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("set the key it was sealed with, or sign in again"),
        "{text}"
    );
    // Nor as another server of Alice's.
    std::fs::copy(store.path_of(&alices)?, store.path_of(&alices_other)?)?;
    let err = store
        .load(&alices_other)
        .await
        .err()
        .ok_or("opened as another server")?;
    assert!(matches!(err, StoreError::Sealed { .. }), "{err:?}");

    // list shows the bad ones as errors, beside the good one.
    let listed = store.list(None).await?;
    let good: Vec<_> = listed.iter().filter(|s| s.error.is_none()).collect();
    assert_eq!(good.len(), 1, "{listed:?}");
    assert_eq!(
        (good[0].tenant.as_str(), good[0].server.as_str()),
        ("alice", "github")
    );
    let bad: Vec<_> = listed.iter().filter(|s| s.error.is_some()).collect();
    assert_eq!(bad.len(), 2, "{listed:?}");
    assert!(bad.iter().all(|s| s.kind == "error"));
    assert_eq!(
        bad.iter().filter(|s| s.tenant == "bob").count(),
        1,
        "{listed:?}"
    );

    // Another key opens nothing, and says what to do.
    let other = FileBackend::new(dir.path(), key(OTHER_KEY)?);
    let err = other
        .load(&alices)
        .await
        .err()
        .ok_or("opened with another key")?;
    assert!(matches!(err, StoreError::Sealed { .. }), "{err:?}");

    // A changed byte is refused the same way.
    let path = store.path_of(&alices)?;
    let mut bytes = std::fs::read(&path)?;
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&path, bytes)?;
    let err = store
        .load(&alices)
        .await
        .err()
        .ok_or("a changed record opened")?;
    assert!(matches!(err, StoreError::Sealed { .. }), "{err:?}");

    // Tenants that would leave the directory are refused before any file.
    for bad in ["", "..", "a/b"] {
        let err = store.load(&CredentialId::new(bad, "github")).await.err();
        assert!(
            matches!(err, Some(StoreError::Invalid(_))),
            "{bad:?}: {err:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn person_store_keeps_what_rmcp_asks_for() -> Result {
    let dir = tempfile::tempdir()?;
    let backend: Arc<dyn Backend> = Arc::new(FileBackend::new(dir.path(), key(KEY)?));
    let id = CredentialId::new("alice", "github");
    let person = PersonStore::new(backend.clone(), id.clone(), RESOURCE);

    assert!(person.load().await?.is_none());

    // A save without the guard is a sign-in: it starts signed_in_at.
    let before = cem_signin::now();
    person.save(credentials("a1", "r1")?).await?;
    let record = backend.load(&id).await?.ok_or("not saved")?;
    assert!(record.signed_in_at >= before && record.updated_at >= before);
    assert!(matches!(&record.secret, Secret::OAuth { resource, .. } if resource == RESOURCE));
    let loaded = person.load().await?.ok_or("not loaded")?;
    assert_eq!(loaded.client_id, "client");

    // A save under the guard is a refresh: signed_in_at stays.
    backend.save(&id, &oauth("a1", "r1", RESOURCE)?).await?;
    {
        let _guard = person.acquire_refresh_guard().await?.ok_or("no guard")?;
        person.save(credentials("a2", "r2")?).await?;
    }
    let record = backend.load(&id).await?.ok_or("not saved")?;
    assert_eq!(record.signed_in_at, 100);
    assert!(record.updated_at >= before);
    assert_eq!(refresh_of(&record).as_deref(), Some("r2"));
    // The guard is gone: the next save is a sign-in again.
    person.save(credentials("a3", "r3")?).await?;
    assert!(backend.load(&id).await?.ok_or("not saved")?.signed_in_at >= before);

    // A rejected refresh token drops the record only while it still holds
    // that token.
    person
        .on_refresh_token_rejected(&credentials("a1", "r-old")?)
        .await?;
    assert!(
        backend.load(&id).await?.is_some(),
        "a newer sign-in was dropped"
    );
    person
        .on_refresh_token_rejected(&credentials("a3", "r3")?)
        .await?;
    assert!(
        backend.load(&id).await?.is_none(),
        "the dead token was kept"
    );

    // An API key is not OAuth credentials; tokens for another address of
    // the server are not handed out.
    backend.save(&id, &api_key("k")).await?;
    assert!(person.load().await?.is_none());
    backend
        .save(&id, &oauth("a1", "r1", "https://old.example.com/mcp")?)
        .await?;
    assert!(person.load().await?.is_none());

    person.clear().await?;
    assert!(backend.load(&id).await?.is_none());

    // Store failures are store errors for rmcp, not "sign in again".
    let other = PersonStore::new(
        Arc::new(FileBackend::new(dir.path(), key(OTHER_KEY)?)),
        id.clone(),
        RESOURCE,
    );
    backend.save(&id, &oauth("a1", "r1", RESOURCE)?).await?;
    assert!(matches!(
        other.load().await,
        Err(AuthError::CredentialStoreError(_))
    ));
    Ok(())
}

/// Polls `future` once: whether it finished at once.
fn ready_at_once<F: Future>(future: std::pin::Pin<&mut F>) -> bool {
    matches!(
        future.poll(&mut Context::from_waker(Waker::noop())),
        Poll::Ready(_)
    )
}

/// The file `FileBackend::lock` locks for `id`.
fn lock_file(store: &FileBackend, id: &CredentialId) -> Result<PathBuf> {
    let mut path = store.path_of(id)?.into_os_string();
    path.push(".lock");
    Ok(path.into())
}

/// Whether nobody holds an exclusive lock on `path` (probed through an
/// open file of its own, as another process would).
fn flock_free(path: &Path) -> Result<bool> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    // A shared lock is refused only while someone holds an exclusive one:
    // this shows the holder's lock excludes, not merely that it exists.
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(_held) => Ok(true),
        Err((_, Errno::EWOULDBLOCK)) => Ok(false),
        Err((_, e)) => Err(e.into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_waits_for_the_same_id_and_not_for_others() -> Result {
    let dir = tempfile::tempdir()?;
    let store = Arc::new(FileBackend::new(dir.path(), key(KEY)?));
    let id = CredentialId::new("alice", "github");
    let other = CredentialId::new("alice", "gitlab");
    let elsewhere = CredentialId::new("bob", "github");

    let first = store.lock(&id).await?;
    let path = lock_file(&store, &id)?;
    assert!(
        !flock_free(&path)?,
        "the lock file is not locked while held"
    );

    // Another id, of this tenant or another, is not held up.
    let _other = tokio::time::timeout(HANG, store.lock(&other)).await??;
    let _elsewhere = tokio::time::timeout(HANG, store.lock(&elsewhere)).await??;

    // The same id waits.
    // Both are polled here, in this order, so the order they queue in is
    // known: the mutex hands the lock on first come, first served.
    let mut second = pin!(store.lock(&id));
    assert!(
        !ready_at_once(second.as_mut()),
        "a second lock of one id did not wait"
    );
    let mut third = pin!(store.lock(&id));
    assert!(!ready_at_once(third.as_mut()));
    assert!(!flock_free(&path)?);

    drop(first);
    let second = tokio::time::timeout(HANG, second).await??;
    // Still one holder at a time: the third waits for the second.
    assert!(!ready_at_once(third.as_mut()));
    assert!(!flock_free(&path)?);
    drop(second);
    let third = tokio::time::timeout(HANG, third).await??;
    assert!(!flock_free(&path)?);
    drop(third);
    assert!(flock_free(&path)?, "the lock outlived its guard");
    Ok(())
}

/// Set in the child process of `lock_holds_across_processes`.
const CHILD_DIR: &str = "CEM_SIGNIN_TEST_LOCK_CHILD_DIR";
const CHILD_MARK: &str = "CEM_SIGNIN_TEST_LOCK_CHILD_MARK";

#[tokio::test]
async fn lock_holds_across_processes() -> Result {
    let id = CredentialId::new("alice", "github");
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        // The child: the parent holds the lock.
        let store = FileBackend::new(&dir, key(KEY)?);
        let path = lock_file(&store, &id)?;
        println!(
            "child: {}",
            if flock_free(&path)? { "free" } else { "busy" }
        );
        let guard = store.lock(&id).await?;
        let mark = std::env::var(CHILD_MARK)?;
        println!(
            "child: locked {}",
            if Path::new(&mark).exists() {
                "after release"
            } else {
                "early"
            }
        );
        drop(guard);
        return Ok(());
    }
    use std::io::BufRead as _;
    let dir = tempfile::tempdir()?;
    let mark = dir.path().join("released");
    let store = FileBackend::new(dir.path().join("signin"), key(KEY)?);
    let guard = store.lock(&id).await?;
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args([
            "--exact",
            "lock_holds_across_processes",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir.path().join("signin"))
        .env(CHILD_MARK, &mark)
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut lines = std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
    let mut next = move || -> Result<String> {
        for line in lines.by_ref() {
            // libtest prints the test's name on the same line first.
            let line = line?;
            if let Some(at) = line.find("child: ") {
                return Ok(line[at + "child: ".len()..].to_string());
            }
        }
        Err("the child ended without saying".into())
    };
    assert_eq!(next()?, "busy", "another process could take the held lock");
    std::fs::write(&mark, b"")?;
    drop(guard);
    assert_eq!(next()?, "locked after release");
    assert!(child.wait()?.success());
    Ok(())
}

/// A backend that reports each `lock` call before taking it.
struct Watched {
    inner: FileBackend,
    wanted: mpsc::UnboundedSender<()>,
}

#[async_trait]
impl Backend for Watched {
    async fn load(&self, id: &CredentialId) -> std::result::Result<Option<Record>, StoreError> {
        self.inner.load(id).await
    }
    async fn save(
        &self,
        id: &CredentialId,
        record: &Record,
    ) -> std::result::Result<(), StoreError> {
        self.inner.save(id, record).await
    }
    async fn delete(&self, id: &CredentialId) -> std::result::Result<bool, StoreError> {
        self.inner.delete(id).await
    }
    async fn list(&self, tenant: Option<&str>) -> std::result::Result<Vec<Summary>, StoreError> {
        self.inner.list(tenant).await
    }
    async fn lock(
        &self,
        id: &CredentialId,
    ) -> std::result::Result<CredentialRefreshGuard, StoreError> {
        let _ = self.wanted.send(());
        self.inner.lock(id).await
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// A token endpoint that rotates refresh tokens (`rN` → `rN+1`), answers
/// `invalid_grant` to a token used before or unknown, and holds its answer
/// to `r1` until told.
struct TokenServer {
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
}

async fn token_server(
    r1_arrived: mpsc::UnboundedSender<()>,
    release_r1: tokio::sync::oneshot::Receiver<()>,
) -> Result<TokenServer> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let release = Arc::new(tokio::sync::Mutex::new(Some(release_r1)));
    let recorded = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let (seen, release, r1_arrived) =
                (recorded.clone(), release.clone(), r1_arrived.clone());
            tokio::spawn(async move {
                let Some(body) = read_request(&mut stream).await else {
                    return;
                };
                let refresh = url::form_urlencoded::parse(body.as_bytes())
                    .find(|(k, _)| k == "refresh_token")
                    .map(|(_, v)| v.into_owned())
                    .unwrap_or_default();
                let first_use = {
                    let mut seen = match seen.lock() {
                        Ok(s) => s,
                        Err(p) => p.into_inner(),
                    };
                    let first = !seen.contains(&refresh);
                    seen.push(refresh.clone());
                    first
                };
                if refresh == "r1" {
                    let _ = r1_arrived.send(());
                    if let Some(rx) = release.lock().await.take() {
                        let _ = rx.await;
                    }
                }
                let next = refresh
                    .strip_prefix('r')
                    .and_then(|n| n.parse::<u32>().ok())
                    .filter(|_| first_use);
                let (status, answer) = match next {
                    Some(n) => (
                        "200 OK",
                        serde_json::json!({
                            "access_token": format!("a{}", n + 1),
                            "refresh_token": format!("r{}", n + 1),
                            "token_type": "bearer",
                            "expires_in": 3600,
                        }),
                    ),
                    None => (
                        "400 Bad Request",
                        serde_json::json!({"error": "invalid_grant"}),
                    ),
                };
                let answer = answer.to_string();
                let response = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                    answer.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    Ok(TokenServer { url, seen })
}

/// The body of one HTTP/1.1 request.
async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + length {
                let n = stream.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            return Some(String::from_utf8_lossy(&buf[end + 4..end + 4 + length]).into_owned());
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn manager(server: &TokenServer, store: PersonStore) -> Result<AuthorizationManager> {
    let mut manager = AuthorizationManager::new(format!("{}/mcp", server.url)).await?;
    manager.set_metadata(serde_json::from_value::<AuthorizationMetadata>(
        serde_json::json!({
            "authorization_endpoint": format!("{}/authorize", server.url),
            "token_endpoint": format!("{}/token", server.url),
        }),
    )?);
    manager.configure_client(OAuthClientConfig::new(
        "client",
        "http://127.0.0.1/callback",
    ))?;
    manager.set_credential_store(store);
    Ok(manager)
}

/// Two refreshes of one person's sign-in at once, by rmcp itself, each
/// with its own `PersonStore` (as two sessions or two processes would
/// have): the second waits for the first and refreshes with the token the
/// first saved, so no refresh token is spent twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_refreshes_one_at_a_time_and_spends_each_token_once() -> Result {
    let (arrived_tx, mut arrived) = mpsc::unbounded_channel();
    let (release, release_rx) = tokio::sync::oneshot::channel();
    let server = token_server(arrived_tx, release_rx).await?;
    let resource = format!("{}/mcp", server.url);
    let dir = tempfile::tempdir()?;
    let (wanted_tx, mut wanted) = mpsc::unbounded_channel();
    let backend: Arc<dyn Backend> = Arc::new(Watched {
        inner: FileBackend::new(dir.path(), key(KEY)?),
        wanted: wanted_tx,
    });
    let id = CredentialId::new("alice", "github");
    backend.save(&id, &oauth("a1", "r1", &resource)?).await?;

    let a = manager(
        &server,
        PersonStore::new(backend.clone(), id.clone(), &resource),
    )
    .await?;
    let b = manager(
        &server,
        PersonStore::new(backend.clone(), id.clone(), &resource),
    )
    .await?;

    let first = tokio::spawn(async move { a.refresh_token().await.map(|_| ()) });
    tokio::time::timeout(HANG, wanted.recv())
        .await?
        .ok_or("no lock")?;
    // The first holds the guard and waits on the token endpoint.
    tokio::time::timeout(HANG, arrived.recv())
        .await?
        .ok_or("no request")?;
    let second = tokio::spawn(async move { b.refresh_token().await.map(|_| ()) });
    // The second is at the guard, then the first gets its answer.
    tokio::time::timeout(HANG, wanted.recv())
        .await?
        .ok_or("no second lock")?;
    let _ = release.send(());
    tokio::time::timeout(HANG, first).await???;
    tokio::time::timeout(HANG, second).await???;

    let seen = match server.seen.lock() {
        Ok(s) => s.clone(),
        Err(p) => p.into_inner().clone(),
    };
    assert_eq!(
        seen,
        ["r1", "r2"],
        "a refresh token was spent twice or not at all"
    );
    let record = backend.load(&id).await?.ok_or("the sign-in is gone")?;
    assert_eq!(refresh_of(&record).as_deref(), Some("r3"));
    assert_eq!(
        record.signed_in_at, 100,
        "a refresh restarted the sign-in's age"
    );

    // A token the server refuses: rmcp says so, and the dead sign-in goes.
    backend.save(&id, &oauth("a1", "r2", &resource)?).await?;
    let c = manager(
        &server,
        PersonStore::new(backend.clone(), id.clone(), &resource),
    )
    .await?;
    let refused = c.refresh_token().await;
    assert!(
        matches!(refused, Err(AuthError::TokenRefreshRejected(_))),
        "{refused:?}"
    );
    assert!(
        backend.load(&id).await?.is_none(),
        "a rejected sign-in was kept"
    );
    Ok(())
}
