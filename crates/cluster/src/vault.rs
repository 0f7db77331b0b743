//! Personal-data vaults: every token a node makes is stored under its
//! vault's scope (`principal:<tenant>` for stateless requests), so a token
//! issued through one node restores on every other.
//!
//! Token numbers are reserved in blocks per node ([`BLOCK`] at a time, in
//! `cem_vault_blocks`), so two nodes never give one number to two values
//! however their calls interleave; the same value tokenized on two nodes
//! at once gets two tokens, and both restore it. Only a call that uses up
//! its node's block can number past it and clash: the push finds that
//! under the scope's lock, and the clashing token gives way (renamed in
//! the call's answer before anyone sees it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cem_pii::{Kind, Vault, lock};

use crate::replica::VaultCopy;
use crate::{Cluster, ClusterError, LOCK};

/// Token numbers of one kind a node reserves at a time.
pub const BLOCK: i64 = 256;
/// Below this many numbers left, a node reserves its next block.
const LOW: u64 = 64;

/// Tokens a push renamed (old → new): apply to whatever the call is about
/// to return ([`cem_pii::rename_tokens`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Renamed(pub HashMap<String, String>);

impl Cluster {
    /// Takes in the tokens other nodes made in `scope` since the last pull.
    pub async fn pull_vault(
        &self,
        scope: &str,
        vault: &Arc<Mutex<Vault>>,
    ) -> Result<(), ClusterError> {
        let replica = self.replica(&format!("vault:{scope}"));
        let mut copy = replica.vault.lock().await;
        same_vault(&mut copy, vault);
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT id, kind, value, token FROM cem_vault WHERE scope = $1 AND id > $2 ORDER BY id",
                &[&scope, &copy.last_id],
            )
            .await?;
        let low: Vec<Kind> = {
            let mut v = lock(vault);
            for row in rows {
                let (id, kind, value, token): (i64, String, String, String) =
                    (row.get(0), row.get(1), row.get(2), row.get(3));
                let Some(kind) = Kind::from_name(&kind) else {
                    copy.last_id = id;
                    continue;
                };
                if !v.adopt(kind, &value, &token) {
                    // Clashes with a token of this node not pushed yet: the
                    // push settles it.
                    break;
                }
                copy.shared.insert(token);
                copy.last_id = id;
            }
            Kind::ALL
                .into_iter()
                .filter(|k| v.reserved_left(*k) < LOW)
                .collect()
        };
        for kind in low {
            let last: i64 = client
                .query_one(
                    "INSERT INTO cem_vault_blocks (scope, kind, last) VALUES ($1, $2, $3)
                     ON CONFLICT (scope, kind) DO UPDATE SET last = cem_vault_blocks.last + $3
                     RETURNING last",
                    &[&scope, &kind.name(), &BLOCK],
                )
                .await?
                .get(0);
            let first = (last - BLOCK + 1).max(1) as u64;
            lock(vault).reserve(kind, first, last as u64);
        }
        Ok(())
    }

    /// Stores the tokens this node made in `scope`, renaming any that
    /// clash with ones another node stored first.
    pub async fn push_vault(
        &self,
        scope: &str,
        vault: &Arc<Mutex<Vault>>,
    ) -> Result<Renamed, ClusterError> {
        let replica = self.replica(&format!("vault:{scope}"));
        let mut copy = replica.vault.lock().await;
        same_vault(&mut copy, vault);
        if unpushed(&lock(vault), &copy).is_empty() {
            return Ok(Renamed::default());
        }
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.execute(LOCK, &[&format!("vault:{scope}")]).await?;
        let rows = tx
            .query(
                "SELECT id, kind, value, token FROM cem_vault WHERE scope = $1 AND id > $2 ORDER BY id",
                &[&scope, &copy.last_id],
            )
            .await?;
        let mut renamed = HashMap::new();
        let fresh = {
            let mut v = lock(vault);
            let mut displaced = Vec::new();
            for row in &rows {
                let (id, kind, value, token): (i64, String, String, String) =
                    (row.get(0), row.get(1), row.get(2), row.get(3));
                copy.last_id = copy.last_id.max(id);
                let Some(kind) = Kind::from_name(&kind) else {
                    continue;
                };
                if !v.adopt(kind, &value, &token) {
                    // Ours took the number for another value (numbering
                    // past its block): ours moves.
                    if let Some(other) = v.value_of(&token).map(str::to_string) {
                        v.forget(&token);
                        displaced.push((kind, other, token.clone()));
                    }
                    v.adopt(kind, &value, &token);
                }
                copy.shared.insert(token);
            }
            for (kind, value, old) in displaced {
                let new = v.token_for(kind, &value);
                renamed.insert(old, new);
            }
            unpushed(&v, &copy)
        };
        for (kind, value, token) in &fresh {
            let id: i64 = tx
                .query_one(
                    "INSERT INTO cem_vault (scope, kind, value, token) VALUES ($1, $2, $3, $4) RETURNING id",
                    &[&scope, &kind.name(), value, token],
                )
                .await?
                .get(0);
            copy.last_id = copy.last_id.max(id);
        }
        tx.commit().await?;
        copy.shared.extend(fresh.into_iter().map(|(_, _, t)| t));
        Ok(Renamed(renamed))
    }
}

/// Starts the record over when the node's vault for the scope was evicted
/// and made anew since.
fn same_vault(copy: &mut VaultCopy, vault: &Arc<Mutex<Vault>>) {
    let identity = Arc::as_ptr(vault) as usize;
    if copy.vault != identity {
        *copy = VaultCopy {
            vault: identity,
            ..VaultCopy::default()
        };
    }
}

/// The vault's tokens the store does not have yet.
fn unpushed(v: &Vault, copy: &VaultCopy) -> Vec<(Kind, String, String)> {
    v.entries()
        .filter(|(_, _, t)| !copy.shared.contains(*t))
        .map(|(k, v, t)| (k, v.to_string(), t.to_string()))
        .collect()
}
