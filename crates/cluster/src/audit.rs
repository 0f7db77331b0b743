//! Audit records of every node in one table, by tenant.

use serde_json::Value;

use crate::{Cluster, ClusterError};

impl Cluster {
    /// Stores one audit record of `tenant`.
    pub async fn audit(&self, tenant: &str, record: &Value) -> Result<(), ClusterError> {
        self.client()
            .await?
            .execute(
                "INSERT INTO cem_audit (tenant, node, record) VALUES ($1, $2, $3)",
                &[&tenant, &self.node_url, record],
            )
            .await?;
        Ok(())
    }

    /// The last `last` records of `tenant`, oldest first.
    pub async fn audit_records(&self, tenant: &str, last: i64) -> Result<Vec<Value>, ClusterError> {
        let mut rows: Vec<Value> = self
            .client()
            .await?
            .query(
                "SELECT record FROM cem_audit WHERE tenant = $1 ORDER BY id DESC LIMIT $2",
                &[&tenant, &last],
            )
            .await?
            .into_iter()
            .map(|r| r.get(0))
            .collect();
        rows.reverse();
        Ok(rows)
    }
}
