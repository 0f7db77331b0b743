//! Sealed credential files in the data directory: the [`Backend`] of a
//! single node.
//!
//! One file per person and upstream, `<dir>/<tenant>/<name>.sealed`, where
//! `<name>` is 32 hex digits of SHA-256 over the server's name (any name
//! makes a safe file name, and the directory does not list which upstreams
//! a person uses). The file is an envelope `{server, record}` sealed with
//! the operator's key and bound to `tenant NUL <name>`: the server's own
//! name is inside, so `list` can show it, and a file copied into another
//! tenant's directory or another server's name does not open. Directories
//! are 0700, files 0600, and every write is a new file renamed over the
//! old, so a crash leaves the old record or the new, never half of one.
//!
//! The refresh lock is an exclusive `flock` on `<name>.sealed.lock` (the
//! server and the `auth login` command are two processes) behind an
//! in-process async mutex per id (so tasks of one process wait on the
//! mutex rather than each holding a blocking thread on `flock`).

use std::collections::HashMap;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{ErrorKind, Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use nix::fcntl::{Flock, FlockArg};
use rmcp::transport::auth::CredentialRefreshGuard;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::TokenKey;
use crate::store::{Backend, CredentialId, Record, StoreError, Summary};

const SEALED: &str = "sealed";
/// A sealed record is a few kilobytes; a file far larger is not one.
const MAX_FILE: u64 = 1 << 20;

/// What is sealed in a file: the record and whose it is.
#[derive(Serialize, Deserialize)]
struct Envelope {
    server: String,
    record: Record,
}

/// Sealed files under one directory.
pub struct FileBackend {
    dir: PathBuf,
    key: Arc<TokenKey>,
    /// One async mutex per id whose lock is wanted or held.
    locks: Mutex<HashMap<CredentialId, Arc<tokio::sync::Mutex<()>>>>,
}

impl std::fmt::Debug for FileBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileBackend")
            .field("dir", &self.dir)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl FileBackend {
    /// Records under `dir` (made 0700 on the first save if missing).
    pub fn new(dir: impl Into<PathBuf>, key: Arc<TokenKey>) -> Self {
        Self {
            dir: dir.into(),
            key,
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// The file that holds `id`'s record.
    pub fn path_of(&self, id: &CredentialId) -> Result<PathBuf, StoreError> {
        check_tenant(&id.tenant)?;
        Ok(self
            .dir
            .join(&id.tenant)
            .join(format!("{}.{SEALED}", file_name(&id.server))))
    }

    /// The in-process mutex of `id`, dropping those nobody holds.
    fn mutex(&self, id: &CredentialId) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = match self.locks.lock() {
            Ok(l) => l,
            Err(poisoned) => poisoned.into_inner(),
        };
        locks.retain(|_, m| Arc::strong_count(m) > 1);
        locks.entry(id.clone()).or_default().clone()
    }
}

/// Tenant ids are safe directory names already; this keeps it so.
fn check_tenant(tenant: &str) -> Result<(), StoreError> {
    if tenant.is_empty()
        || tenant == "."
        || tenant == ".."
        || tenant.contains(['/', '\0'])
        || tenant.starts_with('.')
    {
        return Err(StoreError::Invalid(format!(
            "'{tenant}' cannot name a directory of sign-ins (empty, '/', NUL or a leading '.'); this is a bug in the caller"
        )));
    }
    Ok(())
}

/// The file name (without extension) of a server's record.
fn file_name(server: &str) -> String {
    crate::key::hex(&Sha256::digest(server.as_bytes())[..16])
}

/// What a file of `tenant` named `name` is sealed with.
fn context(tenant: &str, name: &str) -> Vec<u8> {
    let mut context = tenant.as_bytes().to_vec();
    context.push(0);
    context.extend_from_slice(name.as_bytes());
    context
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Runs blocking file work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| StoreError::Unreachable(format!("a file task failed: {e}")))?
}

/// Makes `dir` (and missing parents) owner-only.
fn make_dir(dir: &Path) -> Result<(), StoreError> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io(dir))
}

/// The bytes of `path`, None when there is no such file.
fn read(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path)(e)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_FILE)
        .read_to_end(&mut bytes)
        .map_err(io(path))?;
    Ok(Some(bytes))
}

/// Opens and parses a sealed file of `tenant`; `what` names it in errors.
fn unseal(
    key: &TokenKey,
    tenant: &str,
    name: &str,
    bytes: &[u8],
    what: &str,
) -> Result<Envelope, StoreError> {
    let plain = key
        .open(&context(tenant, name), bytes)
        .map_err(|e| StoreError::from_key(what, e))?;
    let envelope: Envelope = serde_json::from_slice(&plain).map_err(|e| StoreError::Corrupt {
        what: what.to_string(),
        reason: e.to_string(),
    })?;
    if file_name(&envelope.server) != name {
        // Sealed for this name, so only a digest collision gets here.
        return Err(StoreError::Corrupt {
            what: what.to_string(),
            reason: "it names another server".to_string(),
        });
    }
    Ok(envelope)
}

/// Writes `bytes` as `path`, whole or not at all.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("record");
    let temp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .map_err(io(&temp))?;
        file.write_all(bytes).map_err(io(&temp))?;
        file.sync_all().map_err(io(&temp))?;
        fs::rename(&temp, path).map_err(io(path))
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written?;
    // The rename is durable once the directory is.
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

/// Every record in one tenant's directory, as summaries.
fn list_tenant(
    key: &TokenKey,
    dir: &Path,
    tenant: &str,
    out: &mut Vec<Summary>,
) -> Result<(), StoreError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io(dir))?;
        let path = entry.path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".sealed"))
            .filter(|n| !n.starts_with('.'))
        else {
            continue;
        };
        let what = path.display().to_string();
        let opened = read(&path).and_then(|bytes| match bytes {
            // Deleted since the directory was read.
            None => Ok(None),
            Some(bytes) => unseal(key, tenant, name, &bytes, &what).map(Some),
        });
        match opened {
            Ok(None) => {}
            Ok(Some(envelope)) => {
                let id = CredentialId::new(tenant, envelope.server);
                out.push(envelope.record.summary(&id));
            }
            Err(e) => out.push(Summary::unreadable(tenant, "", &e)),
        }
    }
    Ok(())
}

/// The refresh lock of one id; dropping it unlocks.
struct Held {
    _file: Flock<File>,
    _task: tokio::sync::OwnedMutexGuard<()>,
}

#[async_trait]
impl Backend for FileBackend {
    async fn load(&self, id: &CredentialId) -> Result<Option<Record>, StoreError> {
        let path = self.path_of(id)?;
        let key = self.key.clone();
        let id = id.clone();
        blocking(move || {
            let Some(bytes) = read(&path)? else {
                return Ok(None);
            };
            let name = file_name(&id.server);
            let envelope = unseal(&key, &id.tenant, &name, &bytes, &id.to_string())?;
            if envelope.server != id.server {
                return Err(StoreError::Corrupt {
                    what: id.to_string(),
                    reason: "it names another server".to_string(),
                });
            }
            Ok(Some(envelope.record))
        })
        .await
    }

    async fn save(&self, id: &CredentialId, record: &Record) -> Result<(), StoreError> {
        let path = self.path_of(id)?;
        let name = file_name(&id.server);
        let plain = serde_json::to_vec(&Envelope {
            server: id.server.clone(),
            record: record.clone(),
        })
        .map_err(|e| StoreError::Invalid(format!("a record could not be written: {e}")))?;
        let sealed = self
            .key
            .seal(&context(&id.tenant, &name), &plain)
            .map_err(|e| StoreError::from_key(id, e))?;
        let root = self.dir.clone();
        blocking(move || {
            make_dir(&root)?;
            if let Some(dir) = path.parent() {
                make_dir(dir)?;
            }
            write_atomic(&path, &sealed)
        })
        .await
    }

    async fn delete(&self, id: &CredentialId) -> Result<bool, StoreError> {
        let path = self.path_of(id)?;
        blocking(move || match fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io(&path)(e)),
        })
        .await
    }

    async fn list(&self, tenant: Option<&str>) -> Result<Vec<Summary>, StoreError> {
        let key = self.key.clone();
        let root = self.dir.clone();
        let tenant = tenant.map(str::to_string);
        if let Some(t) = &tenant {
            check_tenant(t)?;
        }
        let mut out = blocking(move || {
            let mut out = Vec::new();
            let tenants = match tenant {
                Some(t) => vec![t],
                None => match fs::read_dir(&root) {
                    Err(e) if e.kind() == ErrorKind::NotFound => Vec::new(),
                    Err(e) => return Err(io(&root)(e)),
                    Ok(entries) => {
                        let mut tenants = Vec::new();
                        for entry in entries {
                            let entry = entry.map_err(io(&root))?;
                            if entry.file_type().map_err(io(&root))?.is_dir()
                                && let Some(name) = entry.file_name().to_str()
                                && check_tenant(name).is_ok()
                            {
                                tenants.push(name.to_string());
                            }
                        }
                        tenants
                    }
                },
            };
            for t in tenants {
                list_tenant(&key, &root.join(&t), &t, &mut out)?;
            }
            Ok(out)
        })
        .await?;
        out.sort_by(|a, b| (&a.tenant, &a.server).cmp(&(&b.tenant, &b.server)));
        Ok(out)
    }

    async fn lock(&self, id: &CredentialId) -> Result<CredentialRefreshGuard, StoreError> {
        let path = self.path_of(id)?;
        let task = self.mutex(id).lock_owned().await;
        let root = self.dir.clone();
        let file = blocking(move || {
            make_dir(&root)?;
            if let Some(dir) = path.parent() {
                make_dir(dir)?;
            }
            let mut lock_path = path.into_os_string();
            lock_path.push(".lock");
            let lock_path = PathBuf::from(lock_path);
            // Lock files stay: removing one while another process waits on
            // it would let a third lock a new file beside it.
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(&lock_path)
                .map_err(io(&lock_path))?;
            Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, errno)| StoreError::Io {
                path: lock_path,
                source: std::io::Error::from(errno),
            })
        })
        .await?;
        Ok(CredentialRefreshGuard::new(Held {
            _file: file,
            _task: task,
        }))
    }

    fn describe(&self) -> String {
        format!("sealed files in {}", self.dir.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_that_could_leave_the_directory_are_refused() {
        for bad in ["", ".", "..", "a/b", "../x", ".hidden", "a\0b"] {
            assert!(
                matches!(check_tenant(bad), Err(StoreError::Invalid(_))),
                "{bad:?}"
            );
        }
        for good in ["alice", "team-1", "a.b", "user@example"] {
            assert!(check_tenant(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn file_names_are_32_hex_digits_of_the_server() {
        let name = file_name("github");
        assert_eq!(name.len(), 32);
        assert!(name.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(name, file_name("gitlab"));
        assert_eq!(name, file_name("github"));
    }
}
