//! What nodes share about upstream servers, as directories of JSON files
//! mirrored through the store: the tool digests first trusted (pins,
//! `<data>/policy/pins`) and the tool lists each server gave
//! (`<data>/cache/tools`), so a node that just started can search every
//! tool before its own upstream connections are up, and a server pinned
//! through one node is checked against the same pins on every other.
//!
//! Each node runs its own upstream connections; only these files travel.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tokio::sync::Mutex;

use crate::{Cluster, ClusterError};

/// Which shared directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shared {
    /// `policy/pins`: one file per upstream server.
    Pins,
    /// `cache/tools`: one file per server configuration.
    ToolLists,
}

impl Shared {
    fn table(self) -> &'static str {
        match self {
            Shared::Pins => "cem_pins",
            Shared::ToolLists => "cem_tool_lists",
        }
    }
}

/// What a node last agreed with the store on, per file.
#[derive(Debug, Default)]
pub struct Mirrors {
    known: Mutex<HashMap<(Shared, String), Value>>,
}

impl Cluster {
    /// One round of mirroring `dir` (the node's copy of `what`):
    /// - a file changed here since the last round is stored, except that a
    ///   file this node never agreed on loses to one already stored (the
    ///   first node to pin a server decides for all);
    /// - a stored file that changed elsewhere is written here.
    ///
    /// Returns how many files were written here.
    pub async fn mirror(&self, what: Shared, dir: &Path) -> Result<usize, ClusterError> {
        let mut known = self.mirrors.known.lock().await;
        let client = self.client().await?;
        let table = what.table();
        let stored: HashMap<String, Value> = client
            .query(&format!("SELECT server, content FROM {table}"), &[])
            .await?
            .into_iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let local = read_json_files(dir);
        let mut names: Vec<&String> = stored.keys().chain(local.keys()).collect();
        names.sort();
        names.dedup();
        let mut written = 0;
        for name in names {
            let key = (what, name.clone());
            let (l, d, k) = (local.get(name), stored.get(name), known.get(&key));
            if l.is_some() && l != k {
                if let (None, Some(d)) = (k, d) {
                    write_json(dir, name, d)?;
                    known.insert(key, d.clone());
                    written += 1;
                } else if let Some(l) = l {
                    client
                        .execute(
                            &format!(
                                "INSERT INTO {table} (server, content, updated) VALUES ($1, $2, now())
                                 ON CONFLICT (server) DO UPDATE SET content = $2, updated = now()"
                            ),
                            &[name, l],
                        )
                        .await?;
                    known.insert(key, l.clone());
                }
            } else if let Some(d) = d
                && Some(d) != k
            {
                write_json(dir, name, d)?;
                known.insert(key, d.clone());
                written += 1;
            }
        }
        Ok(written)
    }
}

/// Every `*.json` file of `dir` that parses, by stem.
fn read_json_files(dir: &Path) -> HashMap<String, Value> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return HashMap::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let path = e.path();
            let stem = path.file_stem()?.to_str()?.to_string();
            (path.extension()? == "json" && e.file_type().ok()?.is_file()).then_some(())?;
            let value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
            Some((stem, value))
        })
        .collect()
}

/// Writes `dir/<name>.json` through a temporary file and a rename.
fn write_json(dir: &Path, name: &str, value: &Value) -> Result<(), ClusterError> {
    if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
        return Err(ClusterError::Local(format!(
            "the store holds a file named {name:?}, which is not a plain file name"
        )));
    }
    let fail = |e: std::io::Error, p: &Path| ClusterError::Local(format!("{}: {e}", p.display()));
    std::fs::create_dir_all(dir).map_err(|e| fail(e, dir))?;
    let target: PathBuf = dir.join(format!("{name}.json"));
    let tmp = dir.join(format!(".{name}.json.{}", uuid::Uuid::new_v4().simple()));
    let text = serde_json::to_vec_pretty(value).map_err(|e| ClusterError::Local(e.to_string()))?;
    std::fs::write(&tmp, text).map_err(|e| fail(e, &tmp))?;
    std::fs::rename(&tmp, &target).map_err(|e| fail(e, &target))
}
