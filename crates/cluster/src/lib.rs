//! What the nodes of one deployment share, kept in PostgreSQL.
//!
//! Each node keeps working copies of a tenant's state in its data
//! directory, because the sandbox mounts real directories (the workspace,
//! the skills) and the tools already read and write them there. PostgreSQL
//! is the source of truth: a node *pulls* what changed elsewhere before it
//! serves a call and *pushes* what the call changed after it. Every table
//! that two nodes could race on is written in a transaction under an
//! advisory lock (a skill's versions, a vault's token numbers, a tenant's
//! execution counters); generations (`cem_tenants`) make an unchanged
//! tenant cost one small query per call.
//!
//! Interpreter sessions are processes and stay on their node:
//! [`Cluster::locate`] says which node holds one, so another node can
//! forward the call there over the internal endpoint, authenticated with
//! [`Cluster::node_key`] (a random key the first node writes into the
//! store: only holders of the database credential can read it).

mod audit;
mod credentials;
mod error;
mod learned;
mod quota;
mod schema;
mod sessions;
mod shapes;
mod skills;
mod upstream;
mod vault;
mod workspace;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

pub use error::ClusterError;
pub use learned::LearnedRow;
pub use quota::{ExecutionSlot, Refused};
pub use sessions::SessionKind;
pub use shapes::ShapeRow;
pub use upstream::Shared;
pub use vault::Renamed;

/// Connections one node keeps open to the store.
const POOL_SIZE: usize = 16;

/// One node's handle on the shared store.
pub struct Cluster {
    pool: Pool,
    /// How peers reach this node (`serve --node-url`).
    node_url: String,
    /// The internal endpoint's key, shared by every node of the store.
    node_key: String,
    /// What this node last pulled, per tenant or vault scope.
    replicas: Mutex<HashMap<String, Arc<replica::Replica>>>,
    /// What this node last agreed on of the shared directories.
    mirrors: upstream::Mirrors,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("node_url", &self.node_url)
            .finish_non_exhaustive()
    }
}

mod replica;

impl Cluster {
    /// Connects to the store at `url`, brings its schema up to date
    /// (migrations run at start, one node at a time) and registers this
    /// node as reachable at `node_url`.
    pub async fn connect(url: &str, node_url: &str) -> Result<Arc<Self>, ClusterError> {
        let config: tokio_postgres::Config = url.parse().map_err(|e| ClusterError::Url {
            reason: format!("{e}"),
        })?;
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .build()
            .map_err(|e| ClusterError::Url {
                reason: e.to_string(),
            })?;
        let mut client = pool.get().await?;
        schema::migrate(&mut client).await?;
        let node_key = schema::node_key(&client).await?;
        client
            .execute(
                "INSERT INTO cem_nodes (url, started, seen) VALUES ($1, now(), now())
                 ON CONFLICT (url) DO UPDATE SET started = now(), seen = now()",
                &[&node_url],
            )
            .await?;
        drop(client);
        Ok(Arc::new(Self {
            pool,
            node_url: node_url.to_string(),
            node_key,
            replicas: Mutex::new(HashMap::new()),
            mirrors: upstream::Mirrors::default(),
        }))
    }

    pub fn node_url(&self) -> &str {
        &self.node_url
    }

    /// A short name of this node for clients and logs (12 hex digits of a
    /// digest of its URL): says which node answered without telling
    /// clients the deployment's internal addresses.
    pub fn node_id(&self) -> String {
        node_id(&self.node_url)
    }

    /// The key peers present on the internal endpoint.
    pub fn node_key(&self) -> &str {
        &self.node_key
    }

    /// Whether the store answers (for `/readyz`).
    pub async fn ready(&self) -> Result<(), ClusterError> {
        let client = self.pool.get().await?;
        client.execute("SELECT 1", &[]).await?;
        Ok(())
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, ClusterError> {
        Ok(self.pool.get().await?)
    }

    /// This node's record of what it pulled under `key`.
    fn replica(&self, key: &str) -> Arc<replica::Replica> {
        let mut replicas = match self.replicas.lock() {
            Ok(r) => r,
            Err(poisoned) => poisoned.into_inner(),
        };
        replicas.entry(key.to_string()).or_default().clone()
    }
}

/// The id of the node reachable at `node_url` (see [`Cluster::node_id`]).
pub fn node_id(node_url: &str) -> String {
    use sha2::Digest as _;
    workspace::hex(&sha2::Sha256::digest(node_url.as_bytes())[..6])
}

/// What `doctor` reports of a store.
#[derive(Debug, Clone)]
pub struct StoreReport {
    /// The schema version applied (None: no node has started on it yet).
    pub schema: Option<i32>,
    /// The nodes that ever started on it, by URL.
    pub nodes: Vec<String>,
}

/// Connects to the store at `url` and reports on it, changing nothing.
pub async fn inspect(url: &str) -> Result<StoreReport, ClusterError> {
    let config: tokio_postgres::Config = url.parse().map_err(|e| ClusterError::Url {
        reason: format!("{e}"),
    })?;
    let (client, connection) = config.connect(NoTls).await?;
    let task = tokio::spawn(connection);
    let schema = match client
        .query_one("SELECT max(version) FROM cem_migrations", &[])
        .await
    {
        Ok(row) => row.get(0),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => None,
        Err(e) => return Err(e.into()),
    };
    let nodes = match schema {
        None => Vec::new(),
        Some(_) => client
            .query("SELECT url FROM cem_nodes ORDER BY url", &[])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect(),
    };
    drop(client);
    task.abort();
    Ok(StoreReport { schema, nodes })
}

/// The advisory-lock key of `name` (one 64-bit number per name).
const LOCK: &str = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))";

/// Bumps and returns one of a tenant's generations (`skills_gen`,
/// `workspace_gen`) inside `tx`.
async fn bump(
    tx: &deadpool_postgres::Transaction<'_>,
    tenant: &str,
    column: &'static str,
) -> Result<i64, ClusterError> {
    let sql = format!(
        "INSERT INTO cem_tenants (tenant, {column}) VALUES ($1, 1)
         ON CONFLICT (tenant) DO UPDATE SET {column} = cem_tenants.{column} + 1
         RETURNING {column}"
    );
    Ok(tx.query_one(&sql, &[&tenant]).await?.get(0))
}

/// Where a tenant's shared state stands: a pull compares these with what
/// it pulled last and does nothing when they match.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Generations {
    pub skills: i64,
    pub workspace: i64,
}

impl Cluster {
    /// The tenant's generations (0: never written), in one query.
    pub async fn generations(&self, tenant: &str) -> Result<Generations, ClusterError> {
        Ok(self
            .client()
            .await?
            .query_opt(
                "SELECT skills_gen, workspace_gen FROM cem_tenants WHERE tenant = $1",
                &[&tenant],
            )
            .await?
            .map(|r| Generations {
                skills: r.get(0),
                workspace: r.get(1),
            })
            .unwrap_or_default())
    }
}
