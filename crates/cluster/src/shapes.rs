//! Learned result shapes, per tenant, shared by every node: each node keeps
//! its own row per tool (what it saw itself), and reads the other nodes'
//! rows to merge with its own, so no observation is counted twice however
//! often a node reads (see `cem_host::cluster::pull_shapes`).

use serde_json::Value;

use crate::{Cluster, ClusterError};

/// One node's shape of one tool, as `cem_shapes::Learned` writes it.
#[derive(Debug, Clone, PartialEq)]
pub struct ShapeRow {
    pub tool: String,
    pub learned: Value,
}

impl Cluster {
    /// Stores what this node learned of `tool`'s results for `tenant`.
    pub async fn put_shape(
        &self,
        tenant: &str,
        tool: &str,
        learned: &Value,
        now: i64,
    ) -> Result<(), ClusterError> {
        self.client()
            .await?
            .execute(
                "INSERT INTO cem_shapes (tenant, node, tool, learned, updated) VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (tenant, node, tool) DO UPDATE SET learned = $4, updated = $5",
                &[&tenant, &self.node_url, &tool, learned, &now],
            )
            .await?;
        Ok(())
    }

    /// The shapes other nodes learned for `tenant` (at most `max` rows).
    pub async fn other_shapes(
        &self,
        tenant: &str,
        max: i64,
    ) -> Result<Vec<ShapeRow>, ClusterError> {
        Ok(self
            .client()
            .await?
            .query(
                "SELECT tool, learned FROM cem_shapes WHERE tenant = $1 AND node <> $2
                 ORDER BY updated DESC LIMIT $3",
                &[&tenant, &self.node_url, &max],
            )
            .await?
            .iter()
            .map(|r| ShapeRow {
                tool: r.get(0),
                learned: r.get(1),
            })
            .collect())
    }

    /// Forgets the tenant's shapes on every node, or those of `server`'s
    /// tools; how many rows went.
    pub async fn forget_shapes(
        &self,
        tenant: &str,
        server: Option<&str>,
    ) -> Result<u64, ClusterError> {
        let prefix = server.map(|s| format!("{s}."));
        Ok(self
            .client()
            .await?
            .execute(
                "DELETE FROM cem_shapes WHERE tenant = $1 AND ($2::text IS NULL OR starts_with(tool, $2))",
                &[&tenant, &prefix],
            )
            .await?)
    }
}
