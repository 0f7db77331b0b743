//! One [`AppState`] per tenant, made on a principal's first request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cem_auth::{LOCAL_TENANT, Principal};

use cem_host::{AppState, StateError};

/// How often a tenant is checked for idleness.
const IDLE_CHECK: std::time::Duration = std::time::Duration::from_secs(15);

/// Gives back what an idle tenant holds (`sandbox.tenant_idle_seconds`),
/// beside the sandboxes its engine gives back itself:
/// - its own upstream processes, once the engine gave its sandboxes back:
///   its calls come only from its executions, so none is in flight, and
///   its next call starts them again;
/// - its catalog (entries, word index, vectors) and what its searches
///   made of its records, once it has not searched for as long: its next
///   search builds them again, the records' vectors read back from disk.
///
/// Ends with the tenant.
fn release_when_idle(state: &Arc<AppState>) {
    let tenant = Arc::downgrade(state);
    let idle = std::time::Duration::from_secs(state.config.sandbox.tenant_idle_seconds);
    let every = IDLE_CHECK.min(idle);
    tokio::spawn(async move {
        let mut stopped = false;
        loop {
            tokio::time::sleep(every).await;
            let Some(state) = tenant.upgrade() else {
                return;
            };
            let digest = cem_config::tenant_digest(&state.tenant);
            if state.catalog.release_if_idle(idle).await {
                tracing::info!(tenant = %digest, "tenant idle; its search catalog released");
            }
            // Writes the records' vectors first: the tenant's host work,
            // off the async workers.
            let learning = state.clone();
            if state.learning.due_for_release(idle)
                && state
                    .host
                    .run(move || learning.learning.release_if_idle(idle))
                    .await
                    .unwrap_or(false)
            {
                tracing::info!(tenant = %digest, "tenant idle; what its searches made of its records released");
            }
            match (state.engine.parked(), stopped) {
                (true, false) => {
                    tracing::info!(tenant = %digest, "tenant idle; stopping its upstream servers");
                    state.upstreams.shutdown().await;
                    stopped = true;
                }
                (false, true) => stopped = false,
                _ => {}
            }
        }
    });
}

/// Every tenant's state, starting with the local one.
#[derive(Debug)]
pub struct Tenants {
    local: Arc<AppState>,
    others: Mutex<HashMap<String, Arc<AppState>>>,
}

impl Tenants {
    pub fn new(local: Arc<AppState>) -> Arc<Self> {
        Arc::new(Self {
            local,
            others: Mutex::new(HashMap::new()),
        })
    }

    /// The local tenant (stdio, the CLI, HTTP without per-person tokens).
    pub fn local(&self) -> &Arc<AppState> {
        &self.local
    }

    /// The state of `principal`'s tenant, made (directories, engine,
    /// catalog) on first use. Call from inside the tokio runtime: a new
    /// tenant's engine starts warming up at once.
    pub fn get(&self, principal: &Principal) -> Result<Arc<AppState>, StateError> {
        if principal.tenant == LOCAL_TENANT {
            return Ok(self.local.clone());
        }
        let mut others = self
            .others
            .lock()
            .map_err(|_| StateError::Tenant("the tenant table is poisoned".into()))?;
        if let Some(state) = others.get(&principal.tenant) {
            return Ok(state.clone());
        }
        let state = Arc::new(self.local.for_tenant(&principal.tenant)?);
        tracing::info!(tenant = %cem_config::tenant_digest(&principal.tenant), "new tenant");
        state.engine.warm_up();
        state.catalog.watch_changes();
        release_when_idle(&state);
        others.insert(principal.tenant.clone(), state.clone());
        Ok(state)
    }

    /// Stops every tenant's upstream processes (the local tenant's are the
    /// catalog's, stopped with it).
    pub async fn shutdown_upstreams(&self) {
        let others: Vec<_> = match self.others.lock() {
            Ok(others) => others.values().cloned().collect(),
            Err(_) => return,
        };
        futures_util::future::join_all(others.iter().map(|s| s.upstreams.shutdown())).await;
    }

    /// Every tenant made so far, the local one first.
    pub fn all(&self) -> Vec<Arc<AppState>> {
        let mut all = vec![self.local.clone()];
        if let Ok(others) = self.others.lock() {
            all.extend(others.values().cloned());
        }
        all
    }
}
