//! Workspace files: the store holds each file's content (up to
//! `workspace.max_file_bytes`) with its digest; a node writes what changed
//! into its copy before a call, and sends what the call changed after it.
//! Concurrent writers of one file: the last push wins, as on one machine.

use std::collections::HashMap;

use cem_store::Workspace;
use sha2::{Digest, Sha256};

use crate::replica::Known;
use crate::{Cluster, ClusterError, bump};

/// What a push sent.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pushed {
    pub written: usize,
    pub removed: usize,
    /// Files over `workspace.max_file_bytes`, kept on this node only.
    pub too_large: Vec<String>,
}

impl Cluster {
    /// Brings the tenant's workspace copy up to date with the store at
    /// generation `current` ([`Cluster::generations`]). A local file the
    /// node changed since (not pushed yet) is overwritten only when the
    /// store has a newer version of it.
    pub async fn pull_workspace(
        &self,
        tenant: &str,
        workspace: &std::sync::Arc<Workspace>,
        current: i64,
    ) -> Result<(), ClusterError> {
        let replica = self.replica(tenant);
        let mut copy = replica.workspace.lock().await;
        if copy.generation == Some(current) {
            return Ok(());
        }
        let client = self.client().await?;
        let stored: HashMap<String, String> = client
            .query(
                "SELECT path, sha256 FROM cem_workspace_files WHERE tenant = $1",
                &[&tenant],
            )
            .await?
            .into_iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let wanted: Vec<String> = stored
            .iter()
            .filter(|(path, sha)| copy.files.get(*path).is_none_or(|k| k.sha256 != **sha))
            .map(|(path, _)| path.clone())
            .collect();
        let mut fetched = Vec::with_capacity(wanted.len());
        for path in &wanted {
            if let Some(row) = client
                .query_opt(
                    "SELECT content, sha256 FROM cem_workspace_files WHERE tenant = $1 AND path = $2",
                    &[&tenant, path],
                )
                .await?
            {
                fetched.push((path.clone(), row.get::<_, Vec<u8>>(0), row.get::<_, String>(1)));
            }
        }
        let gone: Vec<(String, Known)> = copy
            .files
            .iter()
            .filter(|(path, _)| !stored.contains_key(*path))
            .map(|(p, k)| (p.clone(), k.clone()))
            .collect();
        let ws = workspace.clone();
        let updates = tokio::task::spawn_blocking(move || -> Result<_, ClusterError> {
            let local = stamps(&ws)?;
            let mut updates: Vec<(String, Option<Known>)> = Vec::new();
            let mut written = Vec::new();
            for (path, content, sha) in fetched {
                ws.write(&path, &content)
                    .map_err(|e| ClusterError::Local(format!("workspace file {path}: {e}")))?;
                written.push((path, content.len() as u64, sha));
            }
            let after = stamps(&ws)?;
            for (path, size, sha) in written {
                // 0 when unreadable: the next push looks at it again.
                let modified_ns = after.get(&path).map(|(_, ns)| *ns).unwrap_or(0);
                updates.push((
                    path,
                    Some(Known {
                        sha256: sha,
                        size,
                        modified_ns,
                    }),
                ));
            }
            for (path, known) in gone {
                // Removed elsewhere; keep a local edit made since.
                let unchanged = local
                    .get(&path)
                    .is_some_and(|(size, ns)| *size == known.size && *ns == known.modified_ns);
                if unchanged {
                    ws.remove(&path)
                        .map_err(|e| ClusterError::Local(format!("workspace file {path}: {e}")))?;
                }
                updates.push((path, None));
            }
            Ok(updates)
        })
        .await??;
        for (path, known) in updates {
            match known {
                Some(k) => copy.files.insert(path, k),
                None => copy.files.remove(&path),
            };
        }
        copy.generation = Some(current);
        Ok(())
    }

    /// Sends what changed in the tenant's workspace copy since the last
    /// pull or push.
    pub async fn push_workspace(
        &self,
        tenant: &str,
        workspace: &std::sync::Arc<Workspace>,
    ) -> Result<Pushed, ClusterError> {
        let replica = self.replica(tenant);
        let mut copy = replica.workspace.lock().await;
        let ws = workspace.clone();
        let known = copy.files.clone();
        let max = workspace.max_file_bytes();
        let (changed, removed, too_large) =
            tokio::task::spawn_blocking(move || -> Result<_, ClusterError> {
                let local = stamps(&ws)?;
                let mut changed = Vec::new();
                let mut too_large = Vec::new();
                for (path, (size, ns)) in &local {
                    let same_stamp = known
                        .get(path)
                        .is_some_and(|k| k.size == *size && k.modified_ns == *ns);
                    if same_stamp {
                        continue;
                    }
                    if *size > max {
                        too_large.push(path.clone());
                        continue;
                    }
                    // Deleted or replaced between the listing and the read:
                    // the next push sees it.
                    let Ok(content) = ws.read(path) else {
                        continue;
                    };
                    let sha = hex(&Sha256::digest(&content));
                    changed.push((path.clone(), content, sha, *ns));
                }
                let removed: Vec<String> = known
                    .keys()
                    .filter(|p| !local.contains_key(*p))
                    .cloned()
                    .collect();
                Ok((changed, removed, too_large))
            })
            .await??;
        // A file whose stamp moved but whose content did not: remember the
        // stamp, send nothing.
        let mut real = Vec::new();
        for (path, content, sha, ns) in changed {
            match copy.files.get_mut(&path) {
                Some(k) if k.sha256 == sha => {
                    k.modified_ns = ns;
                    k.size = content.len() as u64;
                }
                _ => real.push((path, content, sha, ns)),
            }
        }
        let pushed = Pushed {
            written: real.len(),
            removed: removed.len(),
            too_large,
        };
        if real.is_empty() && removed.is_empty() {
            return Ok(pushed);
        }
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        for (path, content, sha, _) in &real {
            tx.execute(
                "INSERT INTO cem_workspace_files (tenant, path, content, size, sha256, updated)
                 VALUES ($1, $2, $3, $4, $5, now())
                 ON CONFLICT (tenant, path) DO UPDATE
                 SET content = $3, size = $4, sha256 = $5, updated = now()",
                &[&tenant, path, content, &(content.len() as i64), sha],
            )
            .await?;
        }
        for path in &removed {
            tx.execute(
                "DELETE FROM cem_workspace_files WHERE tenant = $1 AND path = $2",
                &[&tenant, path],
            )
            .await?;
        }
        let now = bump(&tx, tenant, "workspace_gen").await?;
        tx.commit().await?;
        for (path, content, sha, ns) in real {
            copy.files.insert(
                path,
                Known {
                    sha256: sha,
                    size: content.len() as u64,
                    modified_ns: ns,
                },
            );
        }
        for path in removed {
            copy.files.remove(&path);
        }
        if copy.generation == Some(now - 1) {
            copy.generation = Some(now);
        }
        Ok(pushed)
    }
}

/// Every regular file of the workspace: size and modification time.
fn stamps(ws: &Workspace) -> Result<HashMap<String, (u64, i128)>, ClusterError> {
    Ok(ws
        .files()
        .map_err(|e| ClusterError::Local(format!("cannot list the workspace: {e}")))?
        .into_iter()
        .map(|f| (f.path, (f.size, f.modified_ns)))
        .collect())
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
