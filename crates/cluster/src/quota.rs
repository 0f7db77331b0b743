//! Per-tenant execution counters shared by every node, so a tenant's
//! `quotas` hold across the deployment rather than per node.

use crate::{Cluster, ClusterError, LOCK};

/// A running execution's row; [`Cluster::finish_execution`] closes it.
#[derive(Debug)]
#[must_use = "finish the execution when it ends"]
pub struct ExecutionSlot(i64);

/// Why an execution may not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// `concurrent_executions` are running across all nodes.
    Concurrent { limit: u64 },
    /// `executions_per_minute` started in the last 60 s; the oldest of
    /// them leaves the window after this many seconds.
    PerMinute { limit: u64, retry_after_secs: u64 },
}

impl Cluster {
    /// Counts an execution of `tenant` against its limits, atomically
    /// across nodes. Rows older than `stale_secs` (the longest an execution
    /// may run) count as finished, so a node that died mid-run does not
    /// hold its slots for ever.
    pub async fn start_execution(
        &self,
        tenant: &str,
        concurrent: Option<u64>,
        per_minute: Option<u64>,
        stale_secs: u64,
    ) -> Result<Result<ExecutionSlot, Refused>, ClusterError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.execute(LOCK, &[&format!("executions:{tenant}")]).await?;
        let stale = stale_secs as f64;
        if let Some(limit) = concurrent {
            let running: i64 = tx
                .query_one(
                    "SELECT count(*) FROM cem_executions WHERE tenant = $1 AND finished IS NULL
                     AND started > now() - make_interval(secs => $2)",
                    &[&tenant, &stale],
                )
                .await?
                .get(0);
            if running as u64 >= limit {
                return Ok(Err(Refused::Concurrent { limit }));
            }
        }
        if let Some(limit) = per_minute {
            let row = tx
                .query_one(
                    "SELECT count(*), coalesce(extract(epoch FROM min(started) + interval '60 seconds' - now()), 0)::float8
                     FROM cem_executions WHERE tenant = $1 AND started > now() - interval '60 seconds'",
                    &[&tenant],
                )
                .await?;
            let (count, wait): (i64, f64) = (row.get(0), row.get(1));
            if count as u64 >= limit {
                return Ok(Err(Refused::PerMinute {
                    limit,
                    retry_after_secs: wait.ceil().max(1.0) as u64,
                }));
            }
        }
        let id: i64 = tx
            .query_one(
                "INSERT INTO cem_executions (tenant, node) VALUES ($1, $2) RETURNING id",
                &[&tenant, &self.node_url],
            )
            .await?
            .get(0);
        // Rows past the window and finished are of no further use.
        tx.execute(
            "DELETE FROM cem_executions WHERE tenant = $1 AND started < now() - make_interval(secs => $2)",
            &[&tenant, &(stale.max(60.0) * 2.0)],
        )
        .await?;
        tx.commit().await?;
        Ok(Ok(ExecutionSlot(id)))
    }

    /// Marks an execution finished.
    pub async fn finish_execution(&self, slot: ExecutionSlot) -> Result<(), ClusterError> {
        self.client()
            .await?
            .execute(
                "UPDATE cem_executions SET finished = now() WHERE id = $1",
                &[&slot.0],
            )
            .await?;
        Ok(())
    }
}
