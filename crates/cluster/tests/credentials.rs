//! The deployment's store of sign-ins on a real PostgreSQL (Debian's, as
//! installed by scripts/test): records saved through one node open on
//! another, and the refresh lock holds across nodes without blocking its
//! holder's own save.
//!
//! The server is started here the way tests/integration/cluster.py does
//! it: a fresh `initdb` in a directory under /tmp, trust auth for `cem` on
//! 127.0.0.1, run as the `postgres` user when the tests run as root. When
//! PostgreSQL is not installed the test says so and passes.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cem_cluster::Cluster;
use cem_signin::{CredentialId, Record, Secret, StoreError, TokenKey};

type Result<T = ()> = std::result::Result<T, Box<dyn Error>>;

const KEY: &str = "8f0e1d2c3b4a59687766554433221100ffeeddccbbaa99887766554433221100";
const OTHER_KEY: &str = "0000000000000000000000000000000000000000000000000000000000000001";
/// Generous: only reached when the code under test hangs.
const HANG: Duration = Duration::from_secs(30);

/// The newest /usr/lib/postgresql/VERSION/bin, else initdb's directory on
/// PATH; None when PostgreSQL is not installed.
fn pg_bin_dir() -> Option<PathBuf> {
    let version = |d: &Path| -> Vec<u32> {
        d.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .map(|v| v.split('.').filter_map(|p| p.parse().ok()).collect())
            .unwrap_or_default()
    };
    let installed = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|d| d.join("initdb").exists())
        .max_by_key(|d| version(d));
    installed.or_else(|| {
        std::env::var_os("PATH")
            .and_then(|path| std::env::split_paths(&path).find(|d| d.join("initdb").exists()))
    })
}

/// The uid and gid of `user` in /etc/passwd.
fn user_ids(user: &str) -> Result<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd")?;
    passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.first() == Some(&user) && f.len() > 3)
        .map(|f| -> Result<(u32, u32)> { Ok((f[2].parse()?, f[3].parse()?)) })
        .ok_or_else(|| format!("no user {user}: PostgreSQL refuses to run as root"))?
}

/// A throwaway PostgreSQL server; stopped and removed on drop.
struct Postgres {
    server: Child,
    scratch: tempfile::TempDir,
    port: u16,
}

impl Postgres {
    fn start(bin: &Path) -> Result<Postgres> {
        use std::os::unix::process::CommandExt as _;
        let scratch = tempfile::Builder::new().prefix("cem-pg-").tempdir()?;
        use std::os::unix::fs::MetadataExt as _;
        // /proc/self belongs to the process's effective user.
        let as_user = if std::fs::metadata("/proc/self")?.uid() == 0 {
            let (uid, gid) = user_ids("postgres")?;
            std::os::unix::fs::chown(scratch.path(), Some(uid), Some(gid))?;
            Some((uid, gid))
        } else {
            None
        };
        let command = |program: &str| {
            let mut c = Command::new(bin.join(program));
            c.current_dir(scratch.path()).stdin(Stdio::null());
            if let Some((uid, gid)) = as_user {
                c.uid(uid).gid(gid);
            }
            c
        };
        let data = scratch.path().join("data");
        let init = command("initdb")
            .arg("-D")
            .arg(&data)
            .args([
                "-A",
                "trust",
                "-U",
                "cem",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ])
            .output()?;
        if !init.status.success() {
            return Err(format!(
                "initdb failed ({}): {}",
                init.status,
                String::from_utf8_lossy(&init.stderr)
            )
            .into());
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let log = std::fs::File::create(scratch.path().join("postgres.log"))?;
        let server = command("postgres")
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(scratch.path())
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
            ])
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        Ok(Postgres {
            server,
            scratch,
            port,
        })
    }

    fn url(&self, database: &str) -> String {
        format!("postgres://cem@127.0.0.1:{}/{database}", self.port)
    }

    /// A plain connection, once the server takes one.
    async fn connect(&mut self, database: &str) -> Result<tokio_postgres::Client> {
        let deadline = Instant::now() + HANG;
        loop {
            match tokio_postgres::connect(&self.url(database), tokio_postgres::NoTls).await {
                Ok((client, connection)) => {
                    tokio::spawn(connection);
                    return Ok(client);
                }
                Err(e) => {
                    if let Some(status) = self.server.try_wait()? {
                        let log = std::fs::read_to_string(self.scratch.path().join("postgres.log"))
                            .unwrap_or_default();
                        return Err(format!("postgres exited ({status}):\n{log}").into());
                    }
                    if Instant::now() > deadline {
                        return Err(format!("postgres does not take connections: {e}").into());
                    }
                    // Polling for the server to come up, not ordering the test.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        // Fast shutdown: the server ends its sessions and exits.
        if let Ok(pid) = i32::try_from(self.server.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGINT);
        }
        let _ = self.server.wait();
    }
}

fn api_key(value: &str, at: u64) -> Record {
    Record {
        secret: Secret::ApiKey {
            header: "Authorization".into(),
            value: value.into(),
        },
        signed_in_at: at,
        updated_at: at,
    }
}

fn value_of(record: &Record) -> Option<&str> {
    match &record.secret {
        Secret::ApiKey { value, .. } => Some(value),
        Secret::OAuth { .. } => None,
    }
}

/// Waits until `count` refresh locks are waited for (or, with `granted`,
/// held) in the server, as pg_locks shows them.
async fn advisory_locks(db: &tokio_postgres::Client, granted: bool, count: i64) -> Result<()> {
    let deadline = Instant::now() + HANG;
    loop {
        let n: i64 = db
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted = $1",
                &[&granted],
            )
            .await?
            .get(0);
        if n == count {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{n} advisory locks {} where {count} were expected",
                if granted { "held" } else { "waited for" }
            )
            .into());
        }
        // Polling the server's own account of its locks.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_share_sign_ins_and_one_refresh_lock() -> Result {
    let Some(bin) = pg_bin_dir() else {
        println!("skipped: PostgreSQL is not installed (no initdb); scripts/test installs it");
        return Ok(());
    };
    let mut pg = Postgres::start(&bin)?;
    pg.connect("postgres")
        .await?
        .batch_execute("CREATE DATABASE cem")
        .await?;
    let db = pg.connect("cem").await?;

    let key = Arc::new(TokenKey::from_hex(KEY)?);
    let one = Cluster::connect(&pg.url("cem"), "http://node-1:8080").await?;
    let two = Cluster::connect(&pg.url("cem"), "http://node-2:8080").await?;
    let on_one = one.credentials(key.clone());
    let on_two = two.credentials(key.clone());
    let alice = CredentialId::new("alice", "github");
    let alices_other = CredentialId::new("alice", "search");
    let bob = CredentialId::new("bob", "github");

    // Saved through one node, read through the other.
    assert!(on_two.load(&alice).await?.is_none());
    on_one.save(&alice, &api_key("SECRET-VALUE-1", 100)).await?;
    on_one.save(&bob, &api_key("bobs", 100)).await?;
    let loaded = on_two.load(&alice).await?.ok_or("not shared")?;
    assert_eq!(value_of(&loaded), Some("SECRET-VALUE-1"));
    let listed: Vec<_> = on_two
        .list(None)
        .await?
        .into_iter()
        .map(|s| (s.tenant, s.server, s.kind, s.error))
        .collect();
    assert_eq!(
        listed,
        [
            ("alice".into(), "github".into(), "api_key", None),
            ("bob".into(), "github".into(), "api_key", None)
        ]
    );
    assert_eq!(on_two.list(Some("bob")).await?.len(), 1);

    // The store holds only sealed bytes.
    let sealed: Vec<u8> = db
        .query_one(
            "SELECT sealed FROM cem_upstream_credentials WHERE tenant = 'alice'",
            &[],
        )
        .await?
        .get(0);
    assert!(!sealed.windows(14).any(|w| w == b"SECRET-VALUE-1"));

    // A row moved to another person's key does not open, and is listed as
    // such beside the rest; nor does a row under another key.
    db.execute(
        "UPDATE cem_upstream_credentials SET sealed = (SELECT sealed FROM cem_upstream_credentials WHERE tenant = 'alice') WHERE tenant = 'bob'",
        &[],
    )
    .await?;
    let err = on_two
        .load(&bob)
        .await
        .err()
        .ok_or("Alice's row opened as Bob's")?;
    assert!(matches!(err, StoreError::Sealed { .. }), "{err:?}");
    let bobs = on_one.list(Some("bob")).await?;
    assert_eq!(bobs.len(), 1);
    assert_eq!((bobs[0].server.as_str(), bobs[0].kind), ("github", "error"));
    assert!(bobs[0].error.is_some());
    let other = two.credentials(Arc::new(TokenKey::from_hex(OTHER_KEY)?));
    assert!(matches!(
        other.load(&alice).await,
        Err(StoreError::Sealed { .. })
    ));
    assert!(on_one.delete(&bob).await?);
    assert!(!on_one.delete(&bob).await?);

    // Node one holds the refresh lock; node two's lock of the same id waits
    // in the server, its lock of another id does not.
    let held = on_one.lock(&alice).await?;
    advisory_locks(&db, true, 1).await?;
    let waiting = {
        let (on_two, alice) = (on_two.clone(), alice.clone());
        tokio::spawn(async move {
            let guard = on_two.lock(&alice).await?;
            // What the first holder saved before letting go.
            let seen = on_two.load(&alice).await?;
            Ok::<_, StoreError>((guard, seen))
        })
    };
    advisory_locks(&db, false, 1).await?;
    let other_id = tokio::time::timeout(HANG, on_two.lock(&alices_other)).await??;
    drop(other_id);

    // The holder's save goes through while it holds the lock.
    tokio::time::timeout(HANG, on_one.save(&alice, &api_key("SECRET-VALUE-2", 200))).await??;
    assert!(!waiting.is_finished());
    drop(held);
    let (second, seen) = tokio::time::timeout(HANG, waiting).await???;
    assert_eq!(
        seen.as_ref().and_then(value_of),
        Some("SECRET-VALUE-2"),
        "the second holder did not see the first one's save"
    );
    advisory_locks(&db, true, 1).await?;
    advisory_locks(&db, false, 0).await?;
    drop(second);
    // Dropping the guard ends its session, and so the lock.
    advisory_locks(&db, true, 0).await?;

    // A dropped guard's connection does not come back to the pool holding
    // anything: the pool still serves, and locks again at once.
    for _ in 0..3 {
        let again = tokio::time::timeout(HANG, on_one.lock(&alice)).await??;
        on_one.load(&alice).await?;
        drop(again);
    }
    advisory_locks(&db, true, 0).await?;

    // Which node waits for a sign-in's callback: the other node is told,
    // the one waiting is not sent to itself, and once it ends nobody is.
    let (dir_one, dir_two) = (one.signin_directory(), two.signin_directory());
    let key = cem_signin::callback_key("a-state-value");
    dir_one.started(&key).await;
    assert_eq!(
        dir_two.node_of(&key).await.as_deref(),
        Some("http://node-1:8080")
    );
    assert_eq!(dir_one.node_of(&key).await, None);
    assert_eq!(
        dir_two.node_of(&cem_signin::callback_key("other")).await,
        None
    );
    let rows: i64 = db
        .query_one(
            "SELECT count(*) FROM cem_sessions WHERE kind = 'signin' AND id LIKE '%a-state-value%'",
            &[],
        )
        .await?
        .get(0);
    assert_eq!(
        rows, 0,
        "the store holds a digest of the state, not the state"
    );
    dir_one.ended(&key).await;
    assert_eq!(dir_two.node_of(&key).await, None);
    Ok(())
}
