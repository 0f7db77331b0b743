//! Packages on demand for one execution: `requirements` of execute_code and
//! `install()` from code. The host installs (cem-packages); the interpreter,
//! which mounts the layer directory read-only, is told which layer to put
//! on sys.path.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cem_config::Requirement;
use cem_packages::{Env, Packages};
use serde_json::{Value, json};

/// Where the declared environment and the layer directory appear inside
/// the sandbox.
pub const ENV_TARGET: &str = "/opt/packages/env";
pub const LAYERS_TARGET: &str = "/opt/packages/layers";

/// The package store and the declared environment in force.
#[derive(Clone)]
pub struct Installs {
    pub packages: Arc<Packages>,
    pub base: Option<Arc<Env>>,
}

/// What installs cost one execution, for its answer.
#[derive(Debug, Default)]
pub struct InstallStats {
    pub waited: Duration,
    /// "name==version" of what the layers hold.
    pub installed: Vec<String>,
    /// Every layer was found built (no installer ran).
    pub all_cached: bool,
    pub layers: u32,
}

impl InstallStats {
    /// The answer's `packages` field; `None` when nothing was waited on.
    pub fn to_value(&self) -> Option<Value> {
        (self.layers > 0 || !self.waited.is_zero()).then(|| {
            json!({
                "waited_ms": self.waited.as_millis() as u64,
                "installed": self.installed,
                "from_cache": self.layers > 0 && self.all_cached,
            })
        })
    }
}

/// Parses requirement strings from a request, with errors that say which.
pub fn parse_requirements(texts: &[String]) -> Result<Vec<Requirement>, String> {
    if texts.is_empty() {
        return Err("name at least one package, e.g. [\"pandas\"]".into());
    }
    if texts.len() > 64 {
        return Err(format!(
            "{} packages in one request; ask for at most 64",
            texts.len()
        ));
    }
    texts.iter().map(|t| Requirement::parse(t)).collect()
}

impl Installs {
    /// Builds (or finds) the layer for `requested`; returns the names of
    /// the layers to put on sys.path and the "name==version"s they hold.
    pub async fn install(
        &self,
        requested: Vec<Requirement>,
        stats: &Arc<Mutex<InstallStats>>,
    ) -> Result<(Vec<String>, Vec<String>), String> {
        let this = self.clone();
        let started = std::time::Instant::now();
        let outcome = tokio::task::spawn_blocking(move || {
            let layer = this
                .packages
                .layer(this.base.as_deref(), &requested, &|_| {})
                .map_err(|e| e.to_string())?;
            Ok(match layer {
                Some(layer) => (vec![layer.env.digest.clone()], Some(layer)),
                None => (Vec::new(), None),
            })
        })
        .await
        .unwrap_or_else(|e| Err(format!("the install task failed: {e}")));
        let mut s = stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.waited += started.elapsed();
        let (dirs, layer) = outcome?;
        let mut these = Vec::new();
        if let Some(layer) = layer {
            s.all_cached = if s.layers == 0 {
                layer.cached
            } else {
                s.all_cached && layer.cached
            };
            s.layers += 1;
            for d in &layer.env.manifest.dists {
                let item = format!("{}=={}", d.name, d.version);
                if !s.installed.contains(&item) {
                    s.installed.push(item.clone());
                }
                these.push(item);
            }
        }
        Ok((dirs, these))
    }
}
