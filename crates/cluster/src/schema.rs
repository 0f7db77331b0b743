//! The store's tables, created and upgraded at start.

use crate::ClusterError;

/// Each migration once, in order; never edit one that shipped.
const MIGRATIONS: &[(i32, &str)] = &[
    (
        1,
        r#"
CREATE TABLE cem_meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE cem_nodes (url text PRIMARY KEY, started timestamptz NOT NULL, seen timestamptz NOT NULL);
CREATE TABLE cem_tenants (
    tenant text PRIMARY KEY,
    skills_gen bigint NOT NULL DEFAULT 0,
    workspace_gen bigint NOT NULL DEFAULT 0
);
CREATE TABLE cem_skill_files (
    tenant text NOT NULL, name text NOT NULL, path text NOT NULL, content bytea NOT NULL,
    PRIMARY KEY (tenant, name, path)
);
CREATE TABLE cem_workspace_files (
    tenant text NOT NULL, path text NOT NULL, content bytea NOT NULL,
    size bigint NOT NULL, sha256 text NOT NULL, updated timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, path)
);
CREATE TABLE cem_vault (
    id bigserial PRIMARY KEY, scope text NOT NULL, kind text NOT NULL,
    value text NOT NULL, token text NOT NULL,
    UNIQUE (scope, token)
);
CREATE TABLE cem_vault_blocks (
    scope text NOT NULL, kind text NOT NULL, last bigint NOT NULL,
    PRIMARY KEY (scope, kind)
);
CREATE TABLE cem_audit (
    id bigserial PRIMARY KEY, tenant text NOT NULL, node text NOT NULL,
    at timestamptz NOT NULL DEFAULT now(), record jsonb NOT NULL
);
CREATE INDEX cem_audit_tenant ON cem_audit (tenant, id);
CREATE TABLE cem_pins (server text PRIMARY KEY, content jsonb NOT NULL, updated timestamptz NOT NULL DEFAULT now());
CREATE TABLE cem_tool_lists (server text PRIMARY KEY, content jsonb NOT NULL, updated timestamptz NOT NULL DEFAULT now());
CREATE TABLE cem_executions (
    id bigserial PRIMARY KEY, tenant text NOT NULL, node text NOT NULL,
    started timestamptz NOT NULL DEFAULT now(), finished timestamptz
);
CREATE INDEX cem_executions_tenant ON cem_executions (tenant, started);
CREATE TABLE cem_sessions (
    kind text NOT NULL, tenant text NOT NULL, id text NOT NULL, node text NOT NULL,
    updated timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, tenant, id)
);
CREATE INDEX cem_sessions_id ON cem_sessions (kind, id);
"#,
    ),
    (
        2,
        r#"
CREATE TABLE cem_learned (
    tenant text NOT NULL, words text NOT NULL, tool text NOT NULL,
    weight float8 NOT NULL, last bigint NOT NULL,
    PRIMARY KEY (tenant, words, tool)
);
"#,
    ),
    (
        3,
        r#"
CREATE TABLE cem_last_search (
    tenant text NOT NULL, session text NOT NULL, query text NOT NULL, at bigint NOT NULL,
    used text[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (tenant, session)
);
"#,
    ),
    (
        4,
        r#"
CREATE TABLE cem_upstream_credentials (
    tenant text NOT NULL, server text NOT NULL, sealed bytea NOT NULL, updated_at bigint NOT NULL,
    PRIMARY KEY (tenant, server)
);
"#,
    ),
    (
        5,
        r#"
CREATE TABLE cem_shapes (
    tenant text NOT NULL, node text NOT NULL, tool text NOT NULL, learned jsonb NOT NULL,
    updated bigint NOT NULL,
    PRIMARY KEY (tenant, node, tool)
);
"#,
    ),
];

/// Applies the migrations this store lacks, under a lock so nodes that
/// start together do not race.
pub async fn migrate(client: &mut deadpool_postgres::Object) -> Result<(), ClusterError> {
    let tx = client.transaction().await?;
    // The lock comes before any DDL: two sessions running even `CREATE
    // TABLE IF NOT EXISTS` at once on an empty store race in the catalog
    // (one fails on pg_type's unique index), and orchestrators start
    // replicas together.
    tx.execute(crate::LOCK, &[&"cem:migrations"]).await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS cem_migrations (
            version int PRIMARY KEY, applied timestamptz NOT NULL DEFAULT now())",
    )
    .await?;
    let applied: Vec<i32> = tx
        .query("SELECT version FROM cem_migrations", &[])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    for (version, sql) in MIGRATIONS {
        if applied.contains(version) {
            continue;
        }
        tracing::info!(version, "applying a store migration");
        tx.batch_execute(sql).await?;
        tx.execute(
            "INSERT INTO cem_migrations (version) VALUES ($1)",
            &[version],
        )
        .await?;
    }
    if let Some(newest) = applied.iter().max()
        && MIGRATIONS.iter().all(|(v, _)| v < newest)
    {
        return Err(ClusterError::Conflict(format!(
            "the store's schema (version {newest}) is newer than this build understands; upgrade this node"
        )));
    }
    tx.commit().await?;
    Ok(())
}

/// The internal endpoint's key: made by the first node, read by the rest.
pub async fn node_key(client: &deadpool_postgres::Object) -> Result<String, ClusterError> {
    let fresh = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    client
        .execute(
            "INSERT INTO cem_meta (key, value) VALUES ('node_key', $1) ON CONFLICT (key) DO NOTHING",
            &[&fresh],
        )
        .await?;
    Ok(client
        .query_one("SELECT value FROM cem_meta WHERE key = 'node_key'", &[])
        .await?
        .get(0))
}
