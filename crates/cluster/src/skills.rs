//! Skills: each skill's directory (current version and the ones kept) is
//! stored file by file. A save or delete runs on the node's own copy under
//! the skill's advisory lock, after pulling that skill, and is written back
//! before the lock goes: two nodes saving one name at once get consecutive
//! versions, never a lost write.

use std::path::{Path, PathBuf};

use cem_store::{SkillName, SkillStore};

use crate::{Cluster, ClusterError, LOCK, bump};

type Files = Vec<(String, Vec<u8>)>;

impl Cluster {
    /// Brings `store` (the tenant's local skills) up to date with the
    /// store at generation `current` ([`Cluster::generations`]); true when
    /// anything changed.
    pub async fn pull_skills(
        &self,
        tenant: &str,
        store: &SkillStore,
        current: i64,
    ) -> Result<bool, ClusterError> {
        let replica = self.replica(tenant);
        let mut pulled = replica.skills.lock().await;
        if *pulled == Some(current) {
            return Ok(false);
        }
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT name, path, content FROM cem_skill_files WHERE tenant = $1 ORDER BY name",
                &[&tenant],
            )
            .await?;
        let mut skills: Vec<(String, Files)> = Vec::new();
        for row in rows {
            let name: String = row.get(0);
            match skills.last_mut() {
                Some((last, files)) if *last == name => files.push((row.get(1), row.get(2))),
                _ => skills.push((name, vec![(row.get(1), row.get(2))])),
            }
        }
        let root = store.root().to_path_buf();
        let store = store.clone();
        tokio::task::spawn_blocking(move || -> Result<(), ClusterError> {
            let wanted: Vec<&str> = skills.iter().map(|(n, _)| n.as_str()).collect();
            for name in local_skills(&root) {
                if !wanted.contains(&name.as_str()) {
                    replace_dir(&root, &name, &[])?;
                }
            }
            for (name, files) in &skills {
                if read_dir_files(&root.join(name)) != *files {
                    replace_dir(&root, name, files)?;
                }
            }
            store.bump_generation();
            Ok(())
        })
        .await??;
        *pulled = Some(current);
        Ok(true)
    }

    /// Runs `work` (a save or delete of skill `name` on `store`) as the
    /// only writer of that skill across nodes, and stores the outcome.
    pub async fn change_skill<T: Send + 'static>(
        &self,
        tenant: &str,
        store: &SkillStore,
        name: &str,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ClusterError> {
        let Ok(parsed) = SkillName::parse(name) else {
            // A bad name changes nothing; let the store word the refusal.
            return Ok(tokio::task::spawn_blocking(work).await?);
        };
        let module = parsed.module().to_string();
        let replica = self.replica(tenant);
        let mut pulled = replica.skills.lock().await;
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.execute(LOCK, &[&format!("skill:{tenant}:{module}")])
            .await?;
        let stored: Files = tx
            .query(
                "SELECT path, content FROM cem_skill_files WHERE tenant = $1 AND name = $2 ORDER BY path",
                &[&tenant, &module],
            )
            .await?
            .into_iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let root = store.root().to_path_buf();
        let dir_name = module.clone();
        let (out, files) = tokio::task::spawn_blocking(move || -> Result<_, ClusterError> {
            if read_dir_files(&root.join(&dir_name)) != stored {
                replace_dir(&root, &dir_name, &stored)?;
            }
            let out = work();
            Ok((out, read_dir_files(&root.join(&dir_name))))
        })
        .await??;
        tx.execute(
            "DELETE FROM cem_skill_files WHERE tenant = $1 AND name = $2",
            &[&tenant, &module],
        )
        .await?;
        for (path, content) in &files {
            tx.execute(
                "INSERT INTO cem_skill_files (tenant, name, path, content) VALUES ($1, $2, $3, $4)",
                &[&tenant, &module, path, content],
            )
            .await?;
        }
        let now = bump(&tx, tenant, "skills_gen").await?;
        tx.commit().await?;
        // Nothing else changed since our pull: the copy is current.
        if *pulled == Some(now - 1) {
            *pulled = Some(now);
        }
        Ok(out)
    }
}

/// The skill directories under `root` (hidden ones are the store's own).
fn local_skills(root: &Path) -> Vec<String> {
    std::fs::read_dir(root)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default()
}

/// Every regular file under `dir`, by path relative to it, sorted.
fn read_dir_files(dir: &Path) -> Files {
    fn walk(base: &Path, dir: &Path, depth: usize, out: &mut Files) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() && depth < 4 => walk(base, &path, depth + 1, out),
                Ok(t) if t.is_file() => {
                    if let (Ok(rel), Ok(content)) = (path.strip_prefix(base), std::fs::read(&path))
                    {
                        out.push((rel.to_string_lossy().into_owned(), content));
                    }
                }
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, 0, &mut out);
    out.sort();
    out
}

/// Makes `root/name` hold exactly `files` (none: removes it), building the
/// new directory aside and renaming it into place.
fn replace_dir(root: &Path, name: &str, files: &[(String, Vec<u8>)]) -> Result<(), ClusterError> {
    let local = |e: std::io::Error, p: &Path| ClusterError::Local(format!("{}: {e}", p.display()));
    let target = root.join(name);
    let unique = uuid::Uuid::new_v4().simple().to_string();
    let fresh = root.join(format!(".sync-{name}-{unique}"));
    for (path, content) in files {
        let rel = cem_store::validate_relative(path)
            .map_err(|e| ClusterError::Local(format!("stored skill file {path:?}: {e}")))?;
        let file: PathBuf = fresh.join(rel);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).map_err(|e| local(e, parent))?;
        }
        std::fs::write(&file, content).map_err(|e| local(e, &file))?;
    }
    if target.exists() {
        let old = root.join(format!(".deleted-{name}-{unique}"));
        std::fs::rename(&target, &old).map_err(|e| local(e, &target))?;
        std::fs::remove_dir_all(&old).map_err(|e| local(e, &old))?;
    }
    if !files.is_empty() {
        std::fs::rename(&fresh, &target).map_err(|e| local(e, &fresh))?;
    }
    Ok(())
}
