//! What nodes share about upstream servers: the tool digests first trusted
//! (pins) and the last tool list each server gave.

use serde_json::Value;

use crate::{Cluster, ClusterError};

impl Cluster {
    /// The pins stored for `server`, or, when none are, `pins` stored as
    /// the server's (the first node to trust a server decides for all).
    /// Returns what the store holds afterwards.
    pub async fn pin(&self, server: &str, pins: &Value) -> Result<Value, ClusterError> {
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO cem_pins (server, pins) VALUES ($1, $2) ON CONFLICT (server) DO NOTHING",
                &[&server, pins],
            )
            .await?;
        Ok(client
            .query_one("SELECT pins FROM cem_pins WHERE server = $1", &[&server])
            .await?
            .get(0))
    }

    /// Every server's stored pins.
    pub async fn all_pins(&self) -> Result<Vec<(String, Value)>, ClusterError> {
        Ok(self
            .client()
            .await?
            .query("SELECT server, pins FROM cem_pins", &[])
            .await?
            .into_iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect())
    }

    /// Stores the tool list `server` just gave.
    pub async fn put_tool_list(&self, server: &str, list: &Value) -> Result<(), ClusterError> {
        self.client()
            .await?
            .execute(
                "INSERT INTO cem_tool_lists (server, list, updated) VALUES ($1, $2, now())
                 ON CONFLICT (server) DO UPDATE SET list = $2, updated = now()",
                &[&server, list],
            )
            .await?;
        Ok(())
    }

    /// Every stored tool list, by server.
    pub async fn tool_lists(&self) -> Result<Vec<(String, Value)>, ClusterError> {
        Ok(self
            .client()
            .await?
            .query("SELECT server, list FROM cem_tool_lists", &[])
            .await?
            .into_iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect())
    }
}
