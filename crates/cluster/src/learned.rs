//! What search learned from use, per tenant, shared by every node: a node
//! records a use here as it records it locally, and reads the tenant's
//! records back from time to time (see `cem_host::cluster::pull_learned`).

use crate::{Cluster, ClusterError};

/// One record: a search's words, the tool used after it, its weight as of
/// `last` (Unix seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct LearnedRow {
    pub words: String,
    pub tool: String,
    pub weight: f64,
    pub last: i64,
}

impl Cluster {
    /// Adds one use of `tool` after a search for `words` at `now`: the
    /// record's weight decays by `half_life` seconds to `now`, plus one;
    /// past `max` records the tenant's weakest go.
    pub async fn learn(
        &self,
        tenant: &str,
        words: &str,
        tool: &str,
        now: i64,
        half_life: f64,
        max: i64,
    ) -> Result<(), ClusterError> {
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO cem_learned (tenant, words, tool, weight, last) VALUES ($1, $2, $3, 1, $4)
                 ON CONFLICT (tenant, words, tool) DO UPDATE SET
                   weight = cem_learned.weight
                       * power(0.5, GREATEST(0, $4 - cem_learned.last)::float8 / $5) + 1,
                   last = GREATEST(cem_learned.last, $4)",
                &[&tenant, &words, &tool, &now, &half_life],
            )
            .await?;
        client
            .execute(
                "DELETE FROM cem_learned WHERE tenant = $1 AND (words, tool) IN (
                   SELECT words, tool FROM cem_learned WHERE tenant = $1
                   ORDER BY weight * power(0.5, GREATEST(0, $2 - last)::float8 / $3) DESC
                   OFFSET $4)",
                &[&tenant, &now, &half_life, &max],
            )
            .await?;
        Ok(())
    }

    /// The tenant's records.
    pub async fn learned(&self, tenant: &str) -> Result<Vec<LearnedRow>, ClusterError> {
        Ok(self
            .client()
            .await?
            .query(
                "SELECT words, tool, weight, last FROM cem_learned WHERE tenant = $1",
                &[&tenant],
            )
            .await?
            .iter()
            .map(|r| LearnedRow {
                words: r.get(0),
                tool: r.get(1),
                weight: r.get(2),
                last: r.get(3),
            })
            .collect())
    }

    /// Remembers `query` (the words a record keeps, personal data already
    /// removed) as the last search
    /// of `session`, a session any node may serve (a stateless client's),
    /// at `now` (Unix seconds): the use of what it found may reach another
    /// node.
    pub async fn remember_search(
        &self,
        tenant: &str,
        session: &str,
        query: &str,
        now: i64,
    ) -> Result<(), ClusterError> {
        self.client()
            .await?
            .execute(
                "INSERT INTO cem_last_search (tenant, session, query, at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (tenant, session) DO UPDATE SET query = $3, at = $4, used = '{}'",
                &[&tenant, &session, &query, &now],
            )
            .await?;
        Ok(())
    }

    /// `session` used `tool` at `now`: its last search, if made within
    /// `recent` seconds and not yet answered by `tool`, is claimed for it
    /// and returned; once per search and tool, whichever node asks first.
    pub async fn claim_search(
        &self,
        tenant: &str,
        session: &str,
        tool: &str,
        now: i64,
        recent: i64,
    ) -> Result<Option<String>, ClusterError> {
        Ok(self
            .client()
            .await?
            .query_opt(
                "UPDATE cem_last_search SET used = array_append(used, $3::text)
                 WHERE tenant = $1 AND session = $2 AND at >= $4::bigint - $5::bigint
                   AND NOT ($3::text = ANY (used))
                 RETURNING query",
                &[&tenant, &session, &tool, &now, &recent],
            )
            .await?
            .map(|row| row.get(0)))
    }

    /// Forgets the tenant's records, or those of `tool`; how many went.
    /// Forgetting all of them forgets the tenant's last searches too.
    pub async fn forget_learned(
        &self,
        tenant: &str,
        tool: Option<&str>,
    ) -> Result<u64, ClusterError> {
        let client = self.client().await?;
        if tool.is_none() {
            client
                .execute("DELETE FROM cem_last_search WHERE tenant = $1", &[&tenant])
                .await?;
        }
        Ok(client
            .execute(
                "DELETE FROM cem_learned WHERE tenant = $1 AND ($2::text IS NULL OR tool = $2)",
                &[&tenant, &tool],
            )
            .await?)
    }
}
