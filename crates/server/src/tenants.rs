//! One [`AppState`] per tenant, made on a principal's first request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cem_auth::{LOCAL_TENANT, Principal};

use crate::{AppState, StateError};

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
        tracing::info!(tenant = %principal.tenant, principal = %principal.name, "new tenant");
        state.engine.warm_up();
        state.catalog.watch_changes();
        others.insert(principal.tenant.clone(), state.clone());
        Ok(state)
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
