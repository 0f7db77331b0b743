//! Serving as one node of many: the tenant's shared state is pulled from
//! the store before a tool runs and what the tool changed is pushed after
//! it (see [`cem_cluster`]), so the next request can land on any node.

use std::sync::Arc;

use cem_audit::{AuditLog, AuditSink};
use cem_cluster::Cluster;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::AppState;
use crate::privacy::Session;
use crate::{Answer, ToolFailure};

/// How often a node mirrors pins and tool lists with the store.
const MIRROR_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Mirrors the pins and the tool-list cache under `data_dir` with the
/// store now, then every few seconds in the background.
pub async fn mirror_upstream_state(cluster: Arc<Cluster>, data_dir: &std::path::Path) {
    let dirs = [
        (
            cem_cluster::Shared::Pins,
            data_dir.join("policy").join("pins"),
        ),
        (
            cem_cluster::Shared::ToolLists,
            data_dir.join("cache").join("tools"),
        ),
    ];
    let round = {
        let cluster = cluster.clone();
        move |dirs: Vec<(cem_cluster::Shared, std::path::PathBuf)>| {
            let cluster = cluster.clone();
            async move {
                for (what, dir) in dirs {
                    if let Err(e) = cluster.mirror(what, &dir).await {
                        tracing::warn!(error = %e, dir = %dir.display(), "could not mirror with the store");
                    }
                }
            }
        }
    };
    round(dirs.to_vec()).await;
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(MIRROR_EVERY).await;
            round(dirs.to_vec()).await;
        }
    });
}

/// Tools after which the workspace copy may have changed.
const WRITES_WORKSPACE: &[&str] = &["execute_code", "write_workspace_file"];

/// Whether `session`'s vault is shared between nodes. A legacy MCP
/// session's vault lives with the session on its one node; a stateless
/// request's (keyed by principal) must follow the client anywhere.
fn shared_vault(session: &Session) -> bool {
    !session.key.starts_with("connection:")
}

/// Brings the tenant's skills, workspace and the session's vault up to
/// date before a tool runs.
pub async fn before_call(state: &AppState, session: &Session) -> Result<(), ToolFailure> {
    let Some(cluster) = &state.cluster else {
        return Ok(());
    };
    let asked = std::time::Instant::now();
    let current = cluster.generations(&state.tenant).await?;
    cem_metrics::metrics().store_round_trip(asked.elapsed().as_secs_f64());
    if cluster
        .pull_skills(&state.tenant, &state.skills, current.skills)
        .await?
    {
        state.catalog.skills_changed().await;
    }
    // Files other nodes' executions wrote (each held to its own quota there).
    let room = state.engine.hold_disk_for_host();
    cluster
        .pull_workspace(&state.tenant, &state.workspace, current.workspace)
        .await?;
    drop(room);
    if shared_vault(session) {
        cluster.pull_vault(&session.key, &session.vault).await?;
    }
    Ok(())
}

/// Stores what the tool `name` changed; renames in `answer` any token
/// another node had given out first.
pub async fn after_call(state: &AppState, session: &Session, name: &str, answer: &mut Answer) {
    let Some(cluster) = &state.cluster else {
        return;
    };
    if let Err(e) = push(cluster, state, session, name, answer).await {
        tracing::error!(error = %e, tool = name, tenant = %cem_config::tenant_digest(&state.tenant), "the shared store was not updated");
        match answer {
            // The code ran, with whatever effects it had: say so beside its
            // answer rather than invite a rerun.
            Answer::Flagged { body, .. } => {
                if let Some(obj) = body.as_object_mut() {
                    obj.insert(
                        "store_warning".into(),
                        Value::String(format!(
                            "{e}. Files this code wrote and tokens in this answer may be unknown to the server's other nodes until a later call succeeds"
                        )),
                    );
                }
            }
            _ => {
                let message = format!(
                    "{e}. The change was made on this node only and other nodes may not see it; retry the call"
                );
                *answer = Answer::Plain(Err(ToolFailure(message)));
            }
        }
    }
}

/// Stores what a cancelled execution changed (its workspace files, its
/// session's new tokens): nobody waits for its answer, so a failure is
/// only logged.
pub async fn after_cancelled(state: &AppState, session: &Session) {
    let Some(cluster) = &state.cluster else {
        return;
    };
    let mut answer = Answer::Plain(Ok(Value::Null));
    if let Err(e) = push(cluster, state, session, "execute_code", &mut answer).await {
        tracing::error!(error = %e, tenant = %cem_config::tenant_digest(&state.tenant), "a cancelled execution's changes were not stored");
    }
}

async fn push(
    cluster: &Cluster,
    state: &AppState,
    session: &Session,
    name: &str,
    answer: &mut Answer,
) -> Result<(), cem_cluster::ClusterError> {
    if WRITES_WORKSPACE.contains(&name) {
        let pushed = cluster
            .push_workspace(&state.tenant, &state.workspace)
            .await?;
        if !pushed.too_large.is_empty() {
            tracing::warn!(files = ?pushed.too_large, "workspace files over workspace.max_file_bytes stay on this node");
        }
    }
    if shared_vault(session) {
        let renamed = cluster.push_vault(&session.key, &session.vault).await?;
        if !renamed.0.is_empty() {
            let body = match answer {
                Answer::Plain(Ok(body)) | Answer::Flagged { body, .. } => Some(body),
                Answer::Plain(Err(_)) => None,
            };
            if let Some(body) = body {
                rename(body, &renamed.0);
            }
        }
    }
    Ok(())
}

fn rename(value: &mut Value, renamed: &std::collections::HashMap<String, String>) {
    match value {
        Value::String(s) if cem_pii::Vault::has_tokens(s) => {
            *s = cem_pii::rename_tokens(s, renamed);
        }
        Value::Array(items) => items.iter_mut().for_each(|v| rename(v, renamed)),
        Value::Object(map) => map.values_mut().for_each(|v| rename(v, renamed)),
        _ => {}
    }
}

/// Runs a skill save or delete as the one writer of that skill across
/// nodes (or directly, on one machine).
pub async fn change_skill<T: Send + 'static>(
    state: &AppState,
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ToolFailure> {
    match &state.cluster {
        Some(cluster) => Ok(cluster
            .change_skill(&state.tenant, &state.skills, name, work)
            .await?),
        None => crate::blocking(state, move || Ok(work())).await,
    }
}

/// Sends every audit record of `log` to the store as well, from a task
/// of its own (appending must not wait on the network).
pub fn share_audit(log: &AuditLog, cluster: &Arc<Cluster>, tenant: &str) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::warn!("no runtime: audit records stay in the local log");
        return;
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
    let cluster = cluster.clone();
    let owner = tenant.to_string();
    runtime.spawn(async move {
        while let Some(record) = rx.recv().await {
            if let Err(e) = cluster.audit(&owner, &record).await {
                tracing::error!(error = %e, "an audit record reached the local log only");
            }
        }
    });
    log.set_sink(Arc::new(SharedAudit { tx }));
}

#[derive(Debug)]
struct SharedAudit {
    tx: mpsc::UnboundedSender<Value>,
}

impl AuditSink for SharedAudit {
    fn record(&self, record: &Value) {
        let _ = self.tx.send(record.clone());
    }
}

/// Remembers `query` as `session`'s last search (see
/// [`crate::learning::Learning::searched`]), and for a session any node may
/// serve (a stateless client's, keyed by its principal) in the shared store
/// too, before the results go back: the client's next request, a use of
/// what it found, may reach another node. A store that does not answer in
/// [`STORE_WAIT`] costs that search its learning, said in the log.
pub async fn searched(state: &AppState, session: &Session, query: &str) {
    let Some(clean) = state.learning.searched(&session.key, query) else {
        return;
    };
    let Some(cluster) = state.cluster.as_ref().filter(|_| shared_vault(session)) else {
        return;
    };
    // Only the words a record would keep go to the store.
    let words = cem_catalog::learned::words_of(&clean).join(" ");
    if words.is_empty() {
        return;
    }
    let now = i64::try_from(crate::learning::now()).unwrap_or(i64::MAX);
    let remembered = tokio::time::timeout(
        STORE_WAIT,
        cluster.remember_search(&state.tenant, &session.key, &words, now),
    )
    .await;
    let error = match remembered {
        Ok(Ok(())) => {
            state.learning.stored(&session.key);
            return;
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("the store did not answer in {} s", STORE_WAIT.as_secs()),
    };
    tracing::warn!(error = %error, tenant = %cem_config::tenant_digest(&state.tenant),
        "a search was not remembered in the store; a use of what it found on another node will not be learned from");
}

/// The longest a search waits for the store to remember it.
const STORE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Records that `session` used `tool` after its last search, once per
/// search and tool. A session of one node (a connection, a legacy HTTP
/// session) has its last search here ([`crate::learning::Learning::used`]);
/// the use is recorded at once, and in the shared store from a task of its
/// own (a slow store never holds up the call). A session any node may
/// serve has its last search in the store, which the use claims there,
/// whichever node it reaches: then the use is recorded here and in the
/// store, from that task.
pub fn used_tool(state: &Arc<AppState>, session: &Session, tool: &str) {
    if !state.learning.enabled() {
        return;
    }
    let now = i64::try_from(crate::learning::now()).unwrap_or(i64::MAX);
    let runtime = tokio::runtime::Handle::try_current();
    // A search the store did not take is answered from here.
    let shared = state
        .cluster
        .clone()
        .filter(|_| shared_vault(session) && !state.learning.only_here(&session.key));
    let Some(cluster) = shared else {
        let Some(query) = state.learning.used(&session.key, tool) else {
            return;
        };
        if let (Some(cluster), Ok(runtime)) = (state.cluster.clone(), runtime) {
            let (tenant, tool) = (state.tenant.clone(), tool.to_string());
            runtime.spawn(async move { store_use(&cluster, &tenant, &query, &tool, now).await });
        }
        return;
    };
    let Ok(runtime) = runtime else {
        return;
    };
    let (state, key, tool) = (Arc::clone(state), session.key.clone(), tool.to_string());
    runtime.spawn(async move {
        let recent = i64::try_from(crate::learning::RECENT.as_secs()).unwrap_or(i64::MAX);
        match cluster
            .claim_search(&state.tenant, &key, &tool, now, recent)
            .await
        {
            Ok(Some(query)) => {
                if state.learning.record(&query, &tool) {
                    store_use(&cluster, &state.tenant, &query, &tool, now).await;
                }
            }
            Ok(None) => {}
            Err(e) => {
                // The store is away: this node's own last search of the
                // session, if any, answers it here.
                tracing::warn!(error = %e, tenant = %cem_config::tenant_digest(&state.tenant),
                    "the store could not say which search a use answers; learned from this node's own search of the session, if any");
                state.learning.used(&key, &tool);
            }
        }
    });
}

/// Adds a use to the tenant's records in the store.
async fn store_use(cluster: &Cluster, tenant: &str, query: &str, tool: &str, now: i64) {
    let words = cem_catalog::learned::words_of(query).join(" ");
    let learned = cluster
        .learn(
            tenant,
            &words,
            tool,
            now,
            cem_catalog::learned::HALF_LIFE_SECS,
            cem_catalog::learned::MAX_USES as i64,
        )
        .await;
    if let Err(e) = learned {
        tracing::warn!(error = %e, tenant = %cem_config::tenant_digest(tenant),
            "a use search learned was not stored; other nodes will not rank with it, and this node drops it at its next read of the store");
    }
}

/// Reads the tenant's records from the shared store, at most every
/// [`crate::learning::PULL_EVERY`], so every node ranks with what any node
/// learned.
pub async fn pull_learned(state: &AppState) {
    let Some(cluster) = &state.cluster else {
        return;
    };
    if !state.learning.pull_due() {
        return;
    }
    match cluster.learned(&state.tenant).await {
        Ok(rows) => {
            let now = crate::learning::now();
            let uses = rows.into_iter().map(|row| cem_catalog::learned::Use {
                words: row.words.split(' ').map(str::to_string).collect(),
                tool: row.tool,
                weight: row.weight as f32,
                last: u64::try_from(row.last).unwrap_or(0),
            });
            state
                .learning
                .replace(cem_catalog::Learned::from_uses(uses, now));
        }
        Err(e) => {
            tracing::warn!(error = %e, tenant = %cem_config::tenant_digest(&state.tenant), "the store's search records could not be read; this node ranks with the ones it has")
        }
    }
}

/// Shares what this node learned of `tool`'s results with the other nodes
/// (in the background: the call that taught it does not wait).
pub fn push_shape(state: &AppState, tool: &str) {
    let (Some(cluster), Some(learned)) = (&state.cluster, state.shapes.own(tool)) else {
        return;
    };
    let Ok(value) = serde_json::to_value(&learned) else {
        return;
    };
    let (cluster, tenant, tool) = (cluster.clone(), state.tenant.clone(), tool.to_string());
    tokio::spawn(async move {
        let now = crate::learning::now() as i64;
        if let Err(e) = cluster.put_shape(&tenant, &tool, &value, now).await {
            tracing::warn!(error = %e, tool, tenant = %cem_config::tenant_digest(&tenant), "a learned shape was not shared; other nodes learn it from their own calls");
        }
    });
}

/// Reads what the other nodes learned of this tenant's tools (and of the
/// local tenant's, which type the wrappers), at most every
/// [`crate::shapes::PULL_EVERY`].
pub async fn pull_shapes(state: &AppState) {
    let Some(cluster) = &state.cluster else {
        return;
    };
    let mut all = vec![state.shapes.clone()];
    all.extend(state.shapes.fallback().cloned());
    for shapes in all {
        if !shapes.pull_due() {
            continue;
        }
        let max = (cem_shapes::MAX_TOOLS * 8) as i64;
        match cluster.other_shapes(shapes.tenant_id(), max).await {
            Ok(rows) => shapes.take_others(rows.into_iter().filter_map(|row| {
                let learned = serde_json::from_value::<cem_shapes::Learned>(row.learned).ok()?;
                Some((row.tool, learned))
            })),
            Err(e) => {
                tracing::warn!(error = %e, tenant = %cem_config::tenant_digest(shapes.tenant_id()), "the other nodes' learned shapes could not be read; this node shows its own")
            }
        }
    }
}
