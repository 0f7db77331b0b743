//! Where sessions live. Interpreter sessions and legacy MCP sessions are
//! state inside one node's process; the store says which node, so any
//! other node can send the call there.

use crate::{Cluster, ClusterError};

/// What kind of session a record is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionKind {
    /// An `execute_code` interpreter session (`session_id`), per tenant.
    Interpreter,
    /// An MCP session (`Mcp-Session-Id`), owned by one tenant.
    Mcp,
    /// An execution paused on an approval question (its `requestState`
    /// handle), waiting for the client's retry.
    Paused,
    /// An execution running as a task (its task id), polled with
    /// `tasks/get`.
    Task,
}

impl SessionKind {
    fn as_str(self) -> &'static str {
        match self {
            SessionKind::Interpreter => "interpreter",
            SessionKind::Mcp => "mcp",
            SessionKind::Paused => "paused",
            SessionKind::Task => "task",
        }
    }
}

impl Cluster {
    /// Records that this node holds session `id` of `tenant`.
    pub async fn claim(
        &self,
        kind: SessionKind,
        tenant: &str,
        id: &str,
    ) -> Result<(), ClusterError> {
        self.client()
            .await?
            .execute(
                "INSERT INTO cem_sessions (kind, tenant, id, node, updated) VALUES ($1, $2, $3, $4, now())
                 ON CONFLICT (kind, tenant, id) DO UPDATE SET node = $4, updated = now()",
                &[&kind.as_str(), &tenant, &id, &self.node_url],
            )
            .await?;
        Ok(())
    }

    /// The node holding session `id` of `tenant`, if any holds it.
    pub async fn locate(
        &self,
        kind: SessionKind,
        tenant: &str,
        id: &str,
    ) -> Result<Option<String>, ClusterError> {
        Ok(self
            .client()
            .await?
            .query_opt(
                "SELECT node FROM cem_sessions WHERE kind = $1 AND tenant = $2 AND id = $3",
                &[&kind.as_str(), &tenant, &id],
            )
            .await?
            .map(|r| r.get(0)))
    }

    /// The owner (tenant) and node of MCP session `id`.
    pub async fn locate_mcp(&self, id: &str) -> Result<Option<(String, String)>, ClusterError> {
        Ok(self
            .client()
            .await?
            .query_opt(
                "SELECT tenant, node FROM cem_sessions WHERE kind = 'mcp' AND id = $1",
                &[&id],
            )
            .await?
            .map(|r| (r.get(0), r.get(1))))
    }

    /// Forgets session `id` (ended, or lost with its node).
    pub async fn release(
        &self,
        kind: SessionKind,
        tenant: &str,
        id: &str,
    ) -> Result<(), ClusterError> {
        self.client()
            .await?
            .execute(
                "DELETE FROM cem_sessions WHERE kind = $1 AND tenant = $2 AND id = $3",
                &[&kind.as_str(), &tenant, &id],
            )
            .await?;
        Ok(())
    }
}
