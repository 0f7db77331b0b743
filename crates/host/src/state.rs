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

/// Everything the tools need that outlives one session, for one tenant:
/// the local one (stdio, the CLI, HTTP without per-person credentials),
/// or one per principal (see [`crate::Tenants`]). Tenants share the config,
/// the upstream connections and their tool lists, the package store and
/// the host's execution limit; everything a person makes (workspace,
/// skills, vaults, interpreter sessions, approvals, audit trail, execution
/// counts) is the tenant's own.
#[derive(Debug)]
pub struct AppState {
    /// The tenant id (`local`, `token-<name>`, `oidc-<sub>-<digest>`).
    pub tenant: String,
    pub config: Config,
    /// Where the config came from, for `get_execution_stats` (None: defaults).
    pub config_path: Option<PathBuf>,
    pub data_dir: PathBuf,
    pub workspace: Arc<Workspace>,
    /// Saved skills (`<data>/skills`, read-only at /skills in the sandbox).
    pub skills: SkillStore,
    pub tool_set: ToolSet,
    pub started: Instant,
    pub engine: Arc<Engine>,
    pub catalog: Arc<CatalogService>,
    /// The upstream connections this tenant's tool calls go through. The
    /// local tenant's are the catalog's; every other tenant has its own
    /// (its own process for each stdio server, started on its first call
    /// and stopped when it idles), so one tenant's calls, huge results,
    /// cancellations and the crashes they cause never share a process or a
    /// pipe with another's, nor does a stateful server share one tenant's
    /// data with another.
    pub upstreams: Arc<Manager>,
    /// One PII vault per MCP session.
    pub vaults: Vaults,
    /// The policy, pins and audit log every upstream call passes.
    pub gate: crate::gate::Gate,
    /// Executions paused on an approval question that went back to the
    /// client in an input-required result, by their requestState handle.
    pub paused: std::sync::Mutex<HashMap<String, crate::Paused>>,
    /// This tenant's use of its `quotas`.
    pub quota: crate::quota::Quota,
    /// The store shared with other nodes (`store.url`); None: this node's
    /// data directory is the whole store.
    pub cluster: Option<Arc<cem_cluster::Cluster>>,
    /// Changes to the tenant's workspace and skills: tools publish them,
    /// the catalog and resource subscribers take them in.
    pub changes: crate::Changes,
    /// execute_code calls run as tasks (the MCP Tasks extension), until
    /// their time to live has passed.
    pub tasks: Tasks,
    /// This tenant's share of the host's blocking threads.
    pub host: crate::host_work::HostWork,
    /// What search learned from this tenant's use of tools.
    pub learning: crate::learning::Learning,
    /// The shapes of tool results this tenant learned.
    pub shapes: Arc<crate::shapes::Shapes>,
    /// The tenant's own async workers, where its tool calls run (see
    /// [`crate::lane`]); None for the local tenant, whose calls run on the
    /// server's workers (stdio, the CLI, HTTP without per-person tokens).
    pub lane: Option<crate::lane::Lane>,
}

/// The tenant's tasks (rmcp's manager, which keeps no `Debug`).
pub struct Tasks(rmcp::task_manager::TaskManager);

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tasks({} running)", self.0.running_task_count())
    }
}

impl std::ops::Deref for Tasks {
    type Target = rmcp::task_manager::TaskManager;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

/// What every tenant of one server shares: taken from the config and the
/// data directory for the local tenant, from the local state for others.
struct Shared<'a> {
    config: Config,
    config_path: Option<PathBuf>,
    data_dir: &'a Path,
    tool_set: ToolSet,
    /// The sandbox launcher, and whether `run --no-sandbox` asked for none.
    exe: PathBuf,
    no_sandbox: bool,
    /// Whether code runs (the workspace then gets its own file system).
    runs_code: bool,
    manager: Arc<Manager>,
    /// Where this tenant's calls go: `manager` for the local tenant.
    upstreams: Arc<Manager>,
    registry: Vec<cem_catalog::Entry>,
    ranking: crate::discovery::Ranking,
    /// Catalogs without skills, one for every tenant that has none.
    shared_builds: Arc<crate::discovery::SharedBuilds>,
    /// The host's bound on executions at once.
    running: Option<Arc<tokio::sync::Semaphore>>,
    /// Every tenant's interpreter sessions (one server-wide cap).
    sessions: Option<Arc<cem_engine::SessionTable>>,
    /// The host's bound on blocking jobs at once, for all tenants.
    host: Arc<tokio::sync::Semaphore>,
    cluster: Option<Arc<cem_cluster::Cluster>>,
    /// The local tenant's shapes (None: this is the local tenant): the
    /// wrappers are typed from them, and a tenant's definitions fall back
    /// to them.
    local_shapes: Option<Arc<crate::shapes::Shapes>>,
}

/// How [`AppState::open_with`] should run code.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunMode {
    /// `run --no-sandbox`: trusted local scripts, no isolation.
    pub no_sandbox: bool,
    /// The state runs code (`serve`, `run`, `exec`), so the workspace is
    /// put on its own file system where the kernel can hold the disk
    /// quota; a state only looked at (`tools`, `policy`) mounts nothing.
    pub runs_code: bool,
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
    #[error("{0}")]
    Tenant(String),
}

impl AppState {
    /// The session (its PII vault) under `key`; see [`crate::privacy::session_key`].
    pub fn session(&self, key: &str) -> Session {
        Session {
            key: key.to_string(),
            vault: self.vaults.get(key),
            approver: None,
            no_approver: "nothing here can ask a person".into(),
            progress: None,
        }
    }

    /// Makes this (the local) state, and every tenant made from it, a node
    /// of the deployment whose store `cluster` is.
    pub fn join(&mut self, cluster: Arc<cem_cluster::Cluster>) {
        crate::cluster::share_audit(&self.gate.audit, &cluster, &self.tenant);
        // People's upstream credentials live in the store too, sealed with
        // the same key, so every node holds each person's sign-in and one
        // refresh token is spent once (the store's lock).
        if let Some(signin) = self.upstreams.signin() {
            if let Some(key) = signin.key() {
                signin.set_backend(Ok(cluster.credentials(key.clone())));
            }
            // A person's browser may come back through the balancer to
            // another node than the one waiting for it.
            signin.set_directory(cluster.signin_directory());
        }
        self.cluster = Some(cluster);
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
        // Before any tenant's cpu group is made.
        cem_sandbox::limit_tenants_to(config.sandbox.tenant_cpu_percent, cem_auth::LOCAL_TENANT);
        let manager = Arc::new(Manager::new(&config, data_dir.join("cache").join("tools")));
        manager.sign_in_with(crate::signin::open(&config, data_dir));
        // The operator's processes keep the operator's environment; their
        // ${CEM_TENANT_DIR} is <data>/upstream/<server>.
        manager.serve_tenant(cem_upstream::Tenancy {
            tenant: cem_auth::LOCAL_TENANT.to_string(),
            root: data_dir.join("upstream"),
            data_dir: data_dir.to_path_buf(),
            hidden: config_path.iter().cloned().collect(),
            local: true,
            claims: cem_upstream::Claims::open(data_dir.join("upstream").join("claims.json")),
        });
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
        let audit_path = config
            .audit
            .path
            .clone()
            .unwrap_or_else(|| data_dir.join("audit").join("audit.jsonl"));
        let shared = Shared {
            ranking: crate::discovery::Ranking::from_config(&config.search),
            shared_builds: Arc::default(),
            running: Some(Arc::new(tokio::sync::Semaphore::new(
                config.sandbox.max_concurrent as usize,
            ))),
            sessions: Some(cem_engine::SessionTable::new(
                config.sandbox.max_sessions as usize,
            )),
            // Host work runs in tenants' cpu groups where sandboxes get them.
            host: crate::host_work::HostWork::server_bound(
                mode.runs_code && !mode.no_sandbox && cem_sandbox::CpuPriority::get().is_ok(),
            ),
            config,
            config_path,
            data_dir,
            tool_set,
            exe,
            no_sandbox: mode.no_sandbox,
            runs_code: mode.runs_code,
            upstreams: manager.clone(),
            manager,
            registry,
            cluster: None,
            local_shapes: None,
        };
        // The local tenant writes the wrappers every tenant mounts.
        Self::assemble(shared, cem_auth::LOCAL_TENANT, data_dir, audit_path, true)
    }

    /// The state of tenant `id`, made from this (the local) state: its own
    /// workspace, skills and audit log under `<data>/tenants/<id>/`, its own
    /// engine (interpreters mount its workspace and skills) and catalog
    /// (its skills are searchable); upstreams, packages, wrappers, pins and
    /// the execution limit are shared. `id` comes from
    /// [`cem_auth::Principal`] and is a safe directory name.
    pub fn for_tenant(&self, id: &str) -> Result<Self, StateError> {
        if id.is_empty() || id.contains(['/', '\\']) || id.starts_with('.') {
            return Err(StateError::Tenant(format!("unusable tenant id {id:?}")));
        }
        let root = self.data_dir.join("tenants").join(id);
        std::fs::create_dir_all(&root).map_err(|source| StateError::DataDir {
            path: root.clone(),
            source,
        })?;
        let base = self.engine.options();
        // The tenant's own processes of every stdio server, with their own
        // state roots under <tenant>/upstream/; shared servers run in the
        // local tenant's manager, one process for everyone.
        let upstreams = Arc::new(Manager::new(
            &self.config,
            self.data_dir.join("cache").join("tools"),
        ));
        upstreams.serve_tenant(cem_upstream::Tenancy {
            tenant: id.to_string(),
            root: root.join("upstream"),
            data_dir: self.data_dir.clone(),
            hidden: self.config_path.iter().cloned().collect(),
            local: false,
            claims: self
                .upstreams
                .tenancy()
                .map(|t| t.claims.clone())
                .unwrap_or_default(),
        });
        upstreams.share_with(self.upstreams.clone());
        if let Some(signin) = self.upstreams.signin() {
            upstreams.sign_in_with(signin.clone());
        }
        let shared = Shared {
            config: self.config.clone(),
            config_path: self.config_path.clone(),
            data_dir: &self.data_dir,
            tool_set: self.tool_set,
            exe: base.exe.clone(),
            no_sandbox: base.no_sandbox,
            // Tenants are made by a serving server, for running code.
            runs_code: true,
            manager: self.catalog.manager().clone(),
            upstreams,
            registry: self.catalog.registry().to_vec(),
            ranking: self.catalog.ranking().clone(),
            shared_builds: self.catalog.shared_builds().clone(),
            running: base.running.clone(),
            sessions: base.sessions.clone(),
            host: self.host.server(),
            cluster: self.cluster.clone(),
            local_shapes: Some(self.shapes.clone()),
        };
        let audit_path = root.join("audit").join("audit.jsonl");
        let mut state = Self::assemble(shared, id, &root, audit_path, false)?;
        let cpu = (!state.engine.options().no_sandbox)
            .then(|| cem_engine::tenant_cpu(id))
            .flatten();
        state.lane = Some(
            crate::lane::Lane::new(id, cpu)
                .map_err(|e| StateError::Tenant(format!("{e}; the host may be out of threads")))?,
        );
        Ok(state)
    }

    /// One tenant's state: its workspace and skills under `root`, its
    /// engine, catalog (writing the wrappers when `writes_wrappers`) and
    /// gate (its audit log at `audit_path`).
    fn assemble(
        shared: Shared<'_>,
        tenant: &str,
        root: &Path,
        audit_path: PathBuf,
        writes_wrappers: bool,
    ) -> Result<Self, StateError> {
        let Shared {
            config,
            config_path,
            data_dir,
            tool_set,
            exe,
            no_sandbox,
            runs_code,
            manager,
            upstreams,
            registry,
            ranking,
            shared_builds,
            running,
            sessions,
            host,
            cluster,
            local_shapes,
        } = shared;
        // The workspace's own file system (when the kernel holds the disk
        // quota) is mounted before anything opens the workspace.
        let (disk, disk_watchdog_reason) = crate::disk_quota::open(
            &config,
            root,
            &root.join("workspace"),
            runs_code,
            tenant == cem_auth::LOCAL_TENANT,
        )
        .map_err(StateError::Tenant)?;
        let workspace = Arc::new(Workspace::open_owned(
            &root.join("workspace"),
            config.workspace.max_file_bytes,
            // Sandboxed code must be able to write what the tools write.
            cem_sandbox::sandbox_owner(),
        )?);
        let skills = SkillStore::open(&root.join("skills"))?;
        // A tenant's upstream processes and the host's blocking work for it
        // weigh on its own cpu share (only where sandboxes get cpu groups).
        let tenant_cpu = (runs_code && !no_sandbox)
            .then(|| cem_engine::tenant_cpu(tenant))
            .flatten();
        if let Some(cpu) = tenant_cpu {
            let tenant_id = tenant.to_string();
            upstreams.start_commands_with(Arc::new(move |cmd| {
                if let Err(e) = cpu.start_in_foreground(cmd) {
                    tracing::warn!(error = %e, tenant = %cem_config::tenant_digest(&tenant_id), "this upstream process runs at the server's cpu weight");
                }
            }));
        }
        let engine = Engine::new(EngineOptions {
            running,
            sessions,
            tenant: tenant.to_string(),
            data_dir: data_dir.to_path_buf(),
            workspace: workspace.root().to_path_buf(),
            sandbox: config.sandbox.clone(),
            exe,
            extra_ro: vec![
                (data_dir.join("servers"), "/servers".into()),
                (skills.root().to_path_buf(), "/skills".into()),
            ],
            no_sandbox,
            disk,
            disk_watchdog_reason,
        });
        let catalog = Arc::new(CatalogService::new(
            manager,
            registry,
            writes_wrappers.then(|| crate::discovery::Wrappers {
                dir: data_dir.to_path_buf(),
                python: config.sandbox.python.clone(),
            }),
            Some(skills.clone()),
            ranking,
            Some(data_dir.join("cache").join("vectors")),
            shared_builds,
        ));
        if !writes_wrappers {
            catalog.writes_imports_to(crate::discovery::Wrappers {
                dir: data_dir.to_path_buf(),
                python: config.sandbox.python.clone(),
            });
            catalog.lists_sign_ins_with(upstreams.clone());
        }
        let gate = crate::gate::Gate::new(
            config.policy.clone(),
            cem_store::PinStore::new(&data_dir.join("policy").join("pins")),
            cem_audit::AuditLog::new(audit_path, config.audit.max_bytes, config.audit.keep),
        );
        let secrets = config.secrets.clone();
        gate.audit
            .scrub_with(Arc::new(move |record| secrets.redact_json(record)));
        if let Some(cluster) = &cluster {
            crate::cluster::share_audit(&gate.audit, cluster, tenant);
        }
        let learning = crate::learning::Learning::open(
            config.search.learn,
            Some(root.join("search").join("learned.json")),
            tenant,
        );
        let shapes = crate::shapes::Shapes::open(
            config.catalog.learn_shapes,
            Some(root.join("shapes").join("learned.json")),
            tenant,
        );
        let shapes = Arc::new(match &local_shapes {
            Some(local) => shapes.falling_back_to(local.clone()),
            None => shapes,
        });
        catalog.learns_shapes_from(
            shapes.clone(),
            local_shapes.unwrap_or_else(|| shapes.clone()),
        );
        let changes = crate::Changes::new();
        changes.subscribe(catalog.clone());
        Ok(Self {
            lane: None,
            learning,
            shapes,
            changes,
            tasks: Tasks(rmcp::task_manager::TaskManager::new()),
            host: match tenant_cpu {
                Some(cpu) => crate::host_work::HostWork::in_group(host, cpu),
                None => crate::host_work::HostWork::new(host),
            },
            cluster,
            tenant: tenant.to_string(),
            quota: crate::quota::Quota::new(&config.quotas),
            gate,
            paused: std::sync::Mutex::new(HashMap::new()),
            engine,
            catalog,
            upstreams,
            config,
            config_path,
            data_dir: data_dir.to_path_buf(),
            workspace,
            skills,
            tool_set,
            started: Instant::now(),
            vaults: Vaults::new(VAULT_IDLE, MAX_VAULTS, VAULT_BYTES),
        })
    }
}
