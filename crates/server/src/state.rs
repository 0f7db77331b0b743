//! Process-wide state shared by every MCP session.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use std::sync::Arc;

use cem_config::Config;
use cem_engine::{Engine, EngineOptions};
use cem_upstream::Manager;

use crate::discovery::CatalogService;
use cem_store::{SkillError, SkillStore, Workspace, WorkspaceError};

use crate::ToolSet;
use crate::privacy::{MAX_VAULTS, Session, VAULT_BYTES, VAULT_IDLE};
use cem_pii::Vaults;

/// Everything the tools need that outlives one session.
#[derive(Debug)]
pub struct AppState {
    pub config: Config,
    /// Where the config came from, for `get_execution_stats` (None: defaults).
    pub config_path: Option<PathBuf>,
    pub data_dir: PathBuf,
    pub workspace: Workspace,
    /// Saved skills (`<data>/skills`, read-only at /skills in the sandbox).
    pub skills: SkillStore,
    pub tool_set: ToolSet,
    pub started: Instant,
    pub engine: Arc<Engine>,
    pub catalog: Arc<CatalogService>,
    /// One PII vault per MCP session.
    pub vaults: Vaults,
    /// Hashes credentials into session keys (random per process).
    pub key_hasher: std::hash::RandomState,
    /// The policy, pins and audit log every upstream call passes.
    pub gate: crate::gate::Gate,
    /// Executions paused on an approval question that went back to the
    /// client in an input-required result, by their requestState handle.
    pub paused: std::sync::Mutex<HashMap<String, crate::handler::Paused>>,
}

/// How [`AppState::open_with`] should run code.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunMode {
    /// `run --no-sandbox`: trusted local scripts, no isolation.
    pub no_sandbox: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot use data directory {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open the workspace: {0}")]
    Workspace(#[from] WorkspaceError),
    #[error("cannot open the skill store: {0}")]
    Skills(#[from] SkillError),
}

impl AppState {
    /// The session (its PII vault) under `key`; see [`crate::privacy::session_key`].
    pub fn session(&self, key: &str) -> Session {
        Session {
            key: key.to_string(),
            vault: self.vaults.get(key),
            approver: None,
            no_approver: "nothing here can ask a person".into(),
        }
    }

    /// Opens the data directory (creating it) and the workspace inside it.
    /// `exe` is our own binary, re-executed as the sandbox launcher.
    pub fn open(
        config: Config,
        config_path: Option<PathBuf>,
        data_dir: &Path,
        tool_set: ToolSet,
        exe: PathBuf,
    ) -> Result<Self, StateError> {
        Self::open_with(
            config,
            config_path,
            data_dir,
            tool_set,
            exe,
            RunMode::default(),
        )
    }

    /// Like [`AppState::open`], choosing how code runs.
    pub fn open_with(
        config: Config,
        config_path: Option<PathBuf>,
        data_dir: &Path,
        tool_set: ToolSet,
        exe: PathBuf,
        mode: RunMode,
    ) -> Result<Self, StateError> {
        std::fs::create_dir_all(data_dir).map_err(|source| StateError::DataDir {
            path: data_dir.to_path_buf(),
            source,
        })?;
        let workspace = Workspace::open_owned(
            &data_dir.join("workspace"),
            config.workspace.max_file_bytes,
            // Sandboxed code must be able to write what the tools write.
            cem_sandbox::sandbox_owner(),
        )?;
        let skills = SkillStore::open(&data_dir.join("skills"))?;
        let engine = Engine::new(EngineOptions {
            data_dir: data_dir.to_path_buf(),
            workspace: workspace.root().to_path_buf(),
            sandbox: config.sandbox.clone(),
            exe,
            extra_ro: vec![
                (data_dir.join("servers"), "/servers".into()),
                (skills.root().to_path_buf(), "/skills".into()),
            ],
            no_sandbox: mode.no_sandbox,
        });
        let manager = Arc::new(Manager::new(&config, data_dir.join("cache").join("tools")));
        let registry_dir = config
            .tools_registry
            .clone()
            .unwrap_or_else(|| data_dir.join("tools_registry"));
        let registry = match cem_catalog::registry::load(&registry_dir) {
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!(error = %e, "the tool registry could not be read; continuing without it");
                Vec::new()
            }
        };
        // Generated wrappers live in <data>/servers and appear read-only
        // at /servers in every sandbox.
        let servers_dir = data_dir.join("servers");
        std::fs::create_dir_all(&servers_dir).map_err(|source| StateError::DataDir {
            path: servers_dir.clone(),
            source,
        })?;
        let catalog = Arc::new(CatalogService::new(
            manager,
            registry,
            Some(data_dir.to_path_buf()),
            Some(skills.clone()),
            crate::discovery::Ranking::from_config(&config.search),
            Some(data_dir.join("cache").join("vectors")),
        ));
        let audit_path = config
            .audit
            .path
            .clone()
            .unwrap_or_else(|| data_dir.join("audit").join("audit.jsonl"));
        let gate = crate::gate::Gate::new(
            config.policy.clone(),
            cem_store::PinStore::new(&data_dir.join("policy").join("pins")),
            cem_audit::AuditLog::new(audit_path, config.audit.max_bytes, config.audit.keep),
        );
        Ok(Self {
            gate,
            paused: std::sync::Mutex::new(HashMap::new()),
            engine,
            catalog,
            config,
            config_path,
            data_dir: data_dir.to_path_buf(),
            workspace,
            skills,
            tool_set,
            started: Instant::now(),
            vaults: Vaults::new(VAULT_IDLE, MAX_VAULTS, VAULT_BYTES),
            key_hasher: std::hash::RandomState::new(),
        })
    }
}
