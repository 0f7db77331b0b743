//! Each person's upstream sign-ins, shared by the nodes of a deployment.
//!
//! The same [`Backend`] as the data directory's sealed files, kept in
//! `cem_upstream_credentials`: one row per tenant and server, the record
//! sealed by the node with the operator's [`TokenKey`] (bound to the
//! tenant and server) before it is sent, so the store never holds a token
//! in plain text and a row copied to another person's key does not open.
//!
//! The refresh lock is `pg_advisory_xact_lock` on a 64-bit hash of the
//! tenant and server, in a transaction on a connection taken out of the
//! pool for the purpose: dropping the guard closes that connection, which
//! ends the transaction and so the lock, and a connection that holds a
//! lock never goes back to the pool. It is an advisory lock, not a row
//! lock, because the holder saves the refreshed record on another pooled
//! connection while it holds the guard, and would wait on its own row
//! lock.

use std::sync::Arc;

use async_trait::async_trait;
use cem_signin::{
    Backend, CredentialId, CredentialRefreshGuard, Record, StoreError, Summary, TokenKey,
};

use crate::{Cluster, ClusterError, LOCK};

impl Cluster {
    /// The deployment's store of sign-ins, sealed with `key` (every node
    /// needs the same key).
    pub fn credentials(self: &Arc<Self>, key: Arc<TokenKey>) -> Arc<dyn Backend> {
        Arc::new(Credentials {
            cluster: self.clone(),
            key,
        })
    }
}

struct Credentials {
    cluster: Arc<Cluster>,
    key: Arc<TokenKey>,
}

/// A store failure as the sign-in code reports it.
fn unreachable(error: impl Into<ClusterError>) -> StoreError {
    StoreError::Unreachable(match error.into() {
        ClusterError::Unreachable(text) | ClusterError::Database(text) => text,
        other => other.to_string(),
    })
}

/// The advisory-lock name of `id`: unambiguous whatever the names hold.
fn lock_name(id: &CredentialId) -> String {
    format!(
        "credentials:{}:{}:{}",
        id.tenant.len(),
        id.tenant,
        id.server
    )
}

impl Credentials {
    fn open(&self, id: &CredentialId, sealed: &[u8]) -> Result<Record, StoreError> {
        let plain = self
            .key
            .open(&id.context(), sealed)
            .map_err(|e| StoreError::from_key(id, e))?;
        serde_json::from_slice(&plain).map_err(|e| StoreError::Corrupt {
            what: id.to_string(),
            reason: e.to_string(),
        })
    }
}

#[async_trait]
impl Backend for Credentials {
    async fn load(&self, id: &CredentialId) -> Result<Option<Record>, StoreError> {
        let client = self.cluster.client().await.map_err(unreachable)?;
        let row = client
            .query_opt(
                "SELECT sealed FROM cem_upstream_credentials WHERE tenant = $1 AND server = $2",
                &[&id.tenant, &id.server],
            )
            .await
            .map_err(unreachable)?;
        match row {
            None => Ok(None),
            Some(row) => self.open(id, row.get::<_, &[u8]>(0)).map(Some),
        }
    }

    async fn save(&self, id: &CredentialId, record: &Record) -> Result<(), StoreError> {
        let plain = serde_json::to_vec(record)
            .map_err(|e| StoreError::Invalid(format!("a record could not be written: {e}")))?;
        let sealed = self
            .key
            .seal(&id.context(), &plain)
            .map_err(|e| StoreError::from_key(id, e))?;
        let updated_at = i64::try_from(record.updated_at).unwrap_or(i64::MAX);
        let client = self.cluster.client().await.map_err(unreachable)?;
        client
            .execute(
                "INSERT INTO cem_upstream_credentials (tenant, server, sealed, updated_at)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (tenant, server)
                 DO UPDATE SET sealed = EXCLUDED.sealed, updated_at = EXCLUDED.updated_at",
                &[&id.tenant, &id.server, &sealed, &updated_at],
            )
            .await
            .map_err(unreachable)?;
        Ok(())
    }

    async fn delete(&self, id: &CredentialId) -> Result<bool, StoreError> {
        let client = self.cluster.client().await.map_err(unreachable)?;
        let deleted = client
            .execute(
                "DELETE FROM cem_upstream_credentials WHERE tenant = $1 AND server = $2",
                &[&id.tenant, &id.server],
            )
            .await
            .map_err(unreachable)?;
        Ok(deleted > 0)
    }

    async fn list(&self, tenant: Option<&str>) -> Result<Vec<Summary>, StoreError> {
        let client = self.cluster.client().await.map_err(unreachable)?;
        let rows = client
            .query(
                "SELECT tenant, server, sealed FROM cem_upstream_credentials
                 WHERE $1::text IS NULL OR tenant = $1
                 ORDER BY tenant, server",
                &[&tenant],
            )
            .await
            .map_err(unreachable)?;
        Ok(rows
            .iter()
            .map(|row| {
                let id = CredentialId::new(row.get::<_, String>(0), row.get::<_, String>(1));
                match self.open(&id, row.get::<_, &[u8]>(2)) {
                    Ok(record) => record.summary(&id),
                    Err(e) => Summary::unreadable(&id.tenant, &id.server, &e),
                }
            })
            .collect())
    }

    async fn lock(&self, id: &CredentialId) -> Result<CredentialRefreshGuard, StoreError> {
        let pooled = self.cluster.client().await.map_err(unreachable)?;
        // Out of the pool for good: dropping it closes the connection.
        let client = deadpool_postgres::Object::take(pooled);
        client.batch_execute("BEGIN").await.map_err(unreachable)?;
        client
            .execute(LOCK, &[&lock_name(id)])
            .await
            .map_err(unreachable)?;
        // The guard is the connection whose open transaction holds the lock.
        Ok(CredentialRefreshGuard::new(client))
    }

    fn describe(&self) -> String {
        "the deployment's store (PostgreSQL)".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_names_do_not_run_together() {
        let a = lock_name(&CredentialId::new("a:b", "c"));
        let b = lock_name(&CredentialId::new("a", "b:c"));
        assert_ne!(a, b);
    }
}
