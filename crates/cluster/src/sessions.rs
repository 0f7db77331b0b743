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
    /// A person's sign-in to an upstream, waiting for their browser's
    /// callback (keyed by a digest of its `state`; no tenant).
    SignIn,
}

impl SessionKind {
    fn as_str(self) -> &'static str {
        match self {
            SessionKind::Interpreter => "interpreter",
            SessionKind::Mcp => "mcp",
            SessionKind::Paused => "paused",
            SessionKind::Task => "task",
            SessionKind::SignIn => "signin",
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

/// The store as the sign-ins' [`cem_signin::Directory`]: which node waits
/// for which callback.
#[derive(Debug)]
struct SignIns(std::sync::Arc<Cluster>);

/// A callback's record names no tenant (the callback does not say whose).
const NO_TENANT: &str = "";

impl Cluster {
    /// Where this deployment's nodes say which of them waits for a
    /// sign-in's callback.
    pub fn signin_directory(
        self: &std::sync::Arc<Self>,
    ) -> std::sync::Arc<dyn cem_signin::Directory> {
        std::sync::Arc::new(SignIns(self.clone()))
    }
}

#[async_trait::async_trait]
impl cem_signin::Directory for SignIns {
    async fn started(&self, key: &str) {
        if let Err(e) = self.0.claim(SessionKind::SignIn, NO_TENANT, key).await {
            tracing::warn!(error = %e, "cannot record where a sign-in waits: its callback must reach this node");
        }
        // Sign-ins that never came back (a person who closed the tab)
        // leave a row each; two hours is past any sign-in's deadline
        // (signin.timeout_seconds is at most one).
        let purged = async {
            self.0
                .client()
                .await?
                .execute(
                    "DELETE FROM cem_sessions WHERE kind = 'signin' AND updated < now() - interval '2 hours'",
                    &[],
                )
                .await?;
            Ok::<(), ClusterError>(())
        };
        if let Err(e) = purged.await {
            tracing::debug!(error = %e, "cannot purge old sign-in records");
        }
    }

    async fn ended(&self, key: &str) {
        if let Err(e) = self.0.release(SessionKind::SignIn, NO_TENANT, key).await {
            tracing::debug!(error = %e, "cannot forget where a sign-in waited");
        }
    }

    async fn node_of(&self, key: &str) -> Option<String> {
        match self.0.locate(SessionKind::SignIn, NO_TENANT, key).await {
            Ok(Some(node)) if node != self.0.node_url => Some(node),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(error = %e, "cannot look up which node waits for a sign-in");
                None
            }
        }
    }
}
