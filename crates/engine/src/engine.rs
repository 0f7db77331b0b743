//! The engine: which interpreter serves which execution.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use cem_config::{POOL_COLD, POOL_FORKED, SandboxConfig};
use cem_packages::{EnvState, Packages};
use cem_sandbox::Layers;
use serde_json::{Value, json};
use tokio::sync::{Mutex, Notify, OnceCell};

use crate::EngineError;
use crate::answer::ExecAnswer;
use crate::bridge::Bridge;
use crate::install::{InstallStats, Installs, parse_requirements};
use crate::process::{CallStats, Interp, Launch, PackageMounts};
use crate::sessions::{self, Ended, SessionTable};
use cem_sandbox::{CpuPriority, Zygote};

/// Processes and threads one sandbox may run.
const PROCESSES: u64 = 128;
/// Longest session id accepted.
pub const MAX_SESSION_ID: usize = 128;

/// How the engine runs code on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxMode {
    /// Every layer the host offers (see the probe's layers).
    Isolated,
    /// The host cannot isolate and the config allows running without.
    Unsandboxed { reason: String },
    /// The host cannot isolate and running without is not allowed.
    Unavailable { reason: String },
}

/// What the engine needs from its owner.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub data_dir: PathBuf,
    pub workspace: PathBuf,
    pub sandbox: SandboxConfig,
    /// Our own binary (the sandbox launcher).
    pub exe: PathBuf,
    /// More read-only binds: (host path, path inside), e.g. the wrappers.
    pub extra_ro: Vec<(PathBuf, PathBuf)>,
    /// Run without the sandbox because the user asked (`run --no-sandbox`).
    pub no_sandbox: bool,
    /// Bounds executions at once across engines (one engine per tenant
    /// shares the host's limit); `None`: this engine's own limit of
    /// `sandbox.max_concurrent`.
    pub running: Option<Arc<tokio::sync::Semaphore>>,
    /// The server's interpreter sessions (shared by the engines of every
    /// tenant, so `sandbox.max_sessions` counts them all); `None`: this
    /// engine's own table.
    pub sessions: Option<Arc<SessionTable>>,
    /// Whose engine this is, in the shared session table.
    pub tenant: String,
    /// The workspace's own file system, when the kernel holds the disk
    /// quota; `None`: the watchdog does, for the reason given in
    /// `disk_watchdog_reason`.
    pub disk: Option<Arc<cem_sandbox::WorkspaceDisk>>,
    pub disk_watchdog_reason: Option<String>,
}

/// One execute_code call.
#[derive(Debug, Clone, Default)]
pub struct ExecRequest {
    pub code: String,
    pub context_vars: Option<serde_json::Map<String, Value>>,
    pub timeout_seconds: Option<u64>,
    pub memory_mb: Option<u64>,
    pub session_id: Option<String>,
    /// Who owns `session_id` (the MCP session): two owners naming the same
    /// id get two interpreters.
    pub session_owner: Option<String>,
    pub reset_session: bool,
    /// For `run`: the script's arguments (sys.argv[1:]) and name.
    pub argv: Option<Vec<String>>,
    pub script_name: Option<String>,
    /// Overrides sandbox.max_output_chars (a script's output is its own).
    pub max_output_chars: Option<u64>,
    /// Packages to install (on the host) before the code runs.
    pub requirements: Vec<String>,
    /// Disk bytes this execution may add, when less than
    /// `sandbox.disk_quota_mb` (what is left of a tenant's quota).
    pub disk_limit_bytes: Option<u64>,
    /// Sessions this engine may hold at once for this caller, when fewer
    /// than the engine's own limit (a tenant's quota), with the config key
    /// to name when refusing.
    pub max_sessions: Option<(usize, &'static str)>,
    /// What the answer may carry (`answers` in the config).
    pub answer: AnswerLimits,
}

/// What one execution's answer may carry: the runtime's `show()` refuses
/// past the image limits, and the text shows `table_rows` of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerLimits {
    pub max_images: u64,
    pub max_image_bytes: u64,
    pub table_rows: usize,
}

impl Default for AnswerLimits {
    fn default() -> Self {
        AnswerLimits {
            max_images: 8,
            max_image_bytes: 10 << 20,
            table_rows: crate::envelope::DEFAULT_TABLE_ROWS,
        }
    }
}

/// The zygote of an engine: not started yet, running (with the spec it was
/// started from, so a change of what shapes it starts a new one), or off
/// (with the reason, reported by status and doctor).
enum ZygoteSlot {
    NotYet,
    /// With when it started (a zygote that lived long does not count as a
    /// failing one when it dies).
    Running(Arc<Zygote>, Box<cem_sandbox::Spec>, Instant),
    /// Off, and when to try again.
    Off(String, Instant),
}

/// How long sandboxes start cold after the zygote failed, before the engine
/// tries a zygote again.
const ZYGOTE_RETRY: Duration = Duration::from_secs(60);

/// Zygotes that may die and be replaced before the engine gives up on them
/// and starts every sandbox cold.
const ZYGOTE_RESTARTS: u32 = 5;
/// Forks in a row that may fail before the engine does the same.
const FORK_FAILURES: u32 = 3;

struct Ready {
    launch: Launch,
    /// Why fresh sandboxes cannot be forked from a zygote here (`None`:
    /// they can).
    zygote_off: Option<String>,
    mode: SandboxMode,
    layers: Option<Layers>,
    packages: Arc<Packages>,
    /// The directory of on-demand layers every interpreter mounts; made
    /// once here, not at every start. `None`: it could not be made.
    package_layers: Option<std::path::PathBuf>,
}

/// Runs agent code. Cheap to share (`Arc`).
pub struct Engine {
    options: EngineOptions,
    ready: OnceCell<Result<Ready, String>>,
    /// The declared package environment, settled once (built if needed),
    /// and whether the installer ran for it.
    base: OnceCell<(EnvState, bool)>,
    pool: Mutex<Vec<Interp>>,
    refill: Notify,
    zygote: Mutex<(ZygoteSlot, u32)>,
    fork_failures: std::sync::atomic::AtomicU32,
    sessions: Arc<SessionTable>,
    executions: std::sync::atomic::AtomicU64,
    /// Bounds executions running at once: memory and CPU of the host are
    /// shared by every sandbox.
    running: Arc<tokio::sync::Semaphore>,
    /// Released for idleness (`sandbox.tenant_idle_seconds`): no pool, no
    /// zygote, no sessions until the tenant's next request.
    parked: std::sync::atomic::AtomicBool,
    /// When the tenant last asked for anything, and its executions running.
    last_active: std::sync::Mutex<Instant>,
    active: std::sync::atomic::AtomicUsize,
}

/// Counts an execution as running for as long as it lives.
struct Active<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Engine {
    /// Makes the engine; nothing is probed or started until [`Engine::warm_up`]
    /// or the first execution.
    pub fn new(options: EngineOptions) -> Arc<Engine> {
        Arc::new(Engine {
            ready: OnceCell::new(),
            base: OnceCell::new(),
            pool: Mutex::new(Vec::new()),
            refill: Notify::new(),
            zygote: Mutex::new((ZygoteSlot::NotYet, 0)),
            fork_failures: std::sync::atomic::AtomicU32::new(0),
            sessions: options
                .sessions
                .clone()
                .unwrap_or_else(|| SessionTable::new(options.sandbox.max_sessions as usize)),
            executions: std::sync::atomic::AtomicU64::new(0),
            parked: std::sync::atomic::AtomicBool::new(false),
            last_active: std::sync::Mutex::new(Instant::now()),
            active: std::sync::atomic::AtomicUsize::new(0),
            running: options.running.clone().unwrap_or_else(|| {
                Arc::new(tokio::sync::Semaphore::new(
                    options.sandbox.max_concurrent as usize,
                ))
            }),
            options,
        })
    }

    /// What the engine was made with.
    /// Room for the host's own writes to the workspace (the tools', a
    /// node's copy of the shared store) while it is held: with the
    /// workspace on its own file system, the free space between executions
    /// is sized for them. `None` where the watchdog holds the quota.
    pub fn hold_disk_for_host(&self) -> Option<cem_sandbox::DiskHold> {
        self.options.disk.as_ref().map(|d| d.hold_rest())
    }

    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// Probes the host and starts the pool filler and the session reaper in
    /// the background. Call once from inside a tokio runtime.
    pub fn warm_up(self: &Arc<Self>) {
        let engine = self.clone();
        tokio::spawn(async move {
            if let Ok(ready) = engine.prepare().await {
                // Pooled interpreters mount the declared environment: it
                // is settled (built, or found) before the pool fills.
                engine.base_env(ready).await;
                engine.fill_pool().await;
            }
        });
        // Check often enough that a session ends close to its idle limit.
        let sandbox = &self.options.sandbox;
        let every = Duration::from_secs(
            (sandbox
                .session_idle_seconds
                .min(sandbox.tenant_idle_seconds)
                / 2)
            .clamp(1, 15),
        );
        let engine = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                engine.reap_idle_sessions().await;
                engine.release_if_idle().await;
            }
        });
    }

    /// The tenant asked for something: an engine released for idleness
    /// starts refilling its pool (its zygote and sessions start on use).
    pub fn touch(&self) {
        if let Ok(mut at) = self.last_active.lock() {
            *at = Instant::now();
        }
        if self.parked.swap(false, Ordering::SeqCst) {
            tracing::info!(tenant = %cem_config::tenant_digest(&self.options.tenant), "an idle tenant is back; warming its sandboxes");
            self.refill.notify_one();
        }
    }

    /// Whether the engine gave its sandboxes back for idleness.
    pub fn parked(&self) -> bool {
        self.parked.load(Ordering::SeqCst)
    }

    /// Gives back the pool, the zygote and the interpreter sessions of a
    /// tenant idle for `sandbox.tenant_idle_seconds` with nothing running:
    /// a server with hundreds of principals keeps processes only for the
    /// active ones. The tenant's next request starts them again; a
    /// session's next call says its interpreter ended.
    async fn release_if_idle(&self) {
        let idle = Duration::from_secs(self.options.sandbox.tenant_idle_seconds);
        let quiet = self
            .last_active
            .lock()
            .map(|at| at.elapsed() >= idle)
            .unwrap_or(false);
        if !quiet || self.active.load(Ordering::SeqCst) > 0 || self.parked() {
            return;
        }
        if self.parked.swap(true, Ordering::SeqCst) {
            return;
        }
        // A request that came between the check and the park: not idle.
        let still_quiet = self
            .last_active
            .lock()
            .map(|at| at.elapsed() >= idle)
            .unwrap_or(false);
        if !still_quiet || self.active.load(Ordering::SeqCst) > 0 {
            self.parked.store(false, Ordering::SeqCst);
            self.refill.notify_one();
            return;
        }
        tracing::info!(tenant = %cem_config::tenant_digest(&self.options.tenant), "tenant idle; releasing its sandboxes");
        let pooled: Vec<Interp> = self.pool.lock().await.drain(..).collect();
        for interp in pooled {
            interp.retire().await;
        }
        self.zygote.lock().await.0 = ZygoteSlot::NotYet;
        for session in self
            .sessions
            .expire(&self.options.tenant, Duration::ZERO)
            .await
        {
            sessions::end(&session).await;
        }
    }

    async fn prepare(&self) -> Result<&Ready, EngineError> {
        let ready = self
            .ready
            .get_or_init(|| async {
                let options = self.options.clone();
                tokio::task::spawn_blocking(move || probe_host(&options))
                    .await
                    .unwrap_or_else(|e| Err(format!("the probe task failed: {e}")))
            })
            .await;
        ready.as_ref().map_err(|e| EngineError::Start(e.clone()))
    }

    /// The declared environment, built on first need; and how long this
    /// caller waited for an install of it (zero when none ran).
    async fn base_env(&self, ready: &Ready) -> (&EnvState, Duration) {
        if let Some((state, _)) = self.base.get() {
            return (state, Duration::ZERO);
        }
        let started = Instant::now();
        let (state, installed) = self
            .base
            .get_or_init(|| async {
                let packages = ready.packages.clone();
                let synced = tokio::task::spawn_blocking(move || packages.sync(&|_| {}))
                    .await
                    .unwrap_or_else(|e| {
                        let reason = format!("the install task failed: {e}");
                        (EnvState::Failed { reason }, false)
                    });
                if let Some(warning) = synced.0.warning() {
                    tracing::warn!("{warning}");
                }
                synced
            })
            .await;
        let waited = if *installed {
            started.elapsed()
        } else {
            Duration::ZERO
        };
        (state, waited)
    }

    /// The package state for status answers (never waits on a build).
    fn packages_status(&self, ready: &Ready) -> Value {
        let settings = ready.packages.settings();
        let mut out = json!({
            "declared": settings.declared,
            "on_demand": settings.on_demand.as_str(),
        });
        if settings.on_demand == cem_config::OnDemand::Allowlist {
            out["allowed"] = json!(settings.allowed);
        }
        match self.base.get() {
            None if !settings.declared.is_empty() => out["state"] = json!("installing"),
            None => out["state"] = json!(EnvState::Empty.label()),
            Some((state, _)) => {
                out["state"] = json!(state.label());
                if let Some(env) = state.env() {
                    out["installed"] = json!(env.manifest.dists.len());
                    out["size_mb"] = json!(env.manifest.size_bytes >> 20);
                }
                if let Some(w) = state.warning() {
                    out["warning"] = json!(w);
                }
            }
        }
        out
    }

    /// How code runs here, and each layer (None until probed).
    /// Interpreters started and waiting in the pool.
    pub async fn pool_ready(&self) -> usize {
        self.pool.lock().await.len()
    }

    pub async fn status(&self) -> Value {
        match self.prepare().await {
            Ok(ready) => {
                let mode = match &ready.mode {
                    SandboxMode::Isolated => json!({"mode": "isolated"}),
                    SandboxMode::Unsandboxed { reason } => json!({
                        "mode": "UNSANDBOXED",
                        "warning": format!("code runs WITHOUT OS isolation because {reason}; sandbox.allow_unsandboxed is true"),
                    }),
                    SandboxMode::Unavailable { reason } => {
                        json!({"mode": "unavailable", "reason": reason})
                    }
                };
                let mut out = mode;
                if let (Some(obj), Some(layers)) = (out.as_object_mut(), &ready.layers) {
                    obj.insert("layers".into(), json!(layers.layers));
                    obj.insert("python".into(), json!(ready.launch.layout.version));
                }
                if let Some(obj) = out.as_object_mut() {
                    if !matches!(ready.mode, SandboxMode::Unavailable { .. }) {
                        obj.insert("fresh_sandbox".into(), self.start_path(ready).await);
                    }
                    obj.insert("packages".into(), self.packages_status(ready));
                    obj.insert(
                        "disk_quota".into(),
                        match &self.options.disk {
                            Some(_) => json!({"held_by": "kernel", "how": "the workspace is its own file system: writes past the quota fail with ENOSPC"}),
                            None => json!({
                                "held_by": "watchdog",
                                "how": "free space is polled every 100 ms; an execution over its quota is stopped",
                                "why": self.options.disk_watchdog_reason,
                            }),
                        },
                    );
                    obj.insert("pool_ready".into(), json!(self.pool.lock().await.len()));
                    obj.insert("pool_target".into(), json!(self.pool_target(ready).await));
                    obj.insert(
                        "sessions".into(),
                        json!(self.sessions.count(&self.options.tenant).await),
                    );
                    obj.insert(
                        "session_list".into(),
                        json!(self.sessions.describe(&self.options.tenant).await),
                    );
                    obj.insert(
                        "executions".into(),
                        json!(self.executions.load(std::sync::atomic::Ordering::Relaxed)),
                    );
                }
                out
            }
            Err(e) => json!({"mode": "unavailable", "reason": e.to_string()}),
        }
    }

    /// Runs one request; `bridge` (if any) serves the code's tool calls.
    pub async fn execute(
        &self,
        request: ExecRequest,
        bridge: Option<Arc<dyn Bridge>>,
    ) -> Result<ExecAnswer, EngineError> {
        self.active.fetch_add(1, Ordering::SeqCst);
        let _active = Active(&self.active);
        self.touch();
        let cfg = &self.options.sandbox;
        let timeout_s = request.timeout_seconds.unwrap_or(cfg.timeout_seconds);
        if !(1..=cfg.max_timeout_seconds).contains(&timeout_s) {
            return Err(EngineError::BadRequest(format!(
                "timeout_seconds must be from 1 to {} (sandbox.max_timeout_seconds), got {timeout_s}",
                cfg.max_timeout_seconds
            )));
        }
        let memory_mb = request.memory_mb.unwrap_or(cfg.memory_mb);
        if !(32..=cfg.max_memory_mb).contains(&memory_mb) {
            return Err(EngineError::BadRequest(format!(
                "memory_mb must be from 32 to {} (sandbox.max_memory_mb), got {memory_mb}",
                cfg.max_memory_mb
            )));
        }
        if let Some(id) = &request.session_id
            && (id.is_empty()
                || id.len() > MAX_SESSION_ID
                || !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c)))
        {
            return Err(EngineError::BadRequest(format!(
                "session_id must be 1 to {MAX_SESSION_ID} characters of letters, digits, '-', '_', '.', ':'"
            )));
        }
        let ready = self.prepare().await?;
        if let SandboxMode::Unavailable { reason } = &ready.mode {
            return Err(EngineError::Refused(format!(
                "code execution is refused: this host cannot isolate code ({reason}). Fix the host (run \
                 `code-execution-mcp doctor`), or accept the risk with \"sandbox\": {{\"allow_unsandboxed\": true}} \
                 in the config"
            )));
        }
        let requested = if request.requirements.is_empty() {
            Vec::new()
        } else {
            parse_requirements(&request.requirements)
                .map_err(|e| EngineError::BadRequest(format!("requirements: {e}")))?
        };
        let started = Instant::now();
        let (base, base_wait) = self.base_env(ready).await;
        let installs = Installs {
            packages: ready.packages.clone(),
            base: base.env().cloned(),
        };
        let _permit = self
            .running
            .acquire()
            .await
            .map_err(|_| EngineError::Start("the engine is shutting down".into()))?;
        self.executions
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);

        let max_output = request.max_output_chars.unwrap_or(cfg.max_output_chars);
        let mut message = json!({
            "type": "exec",
            "code": request.code,
            "context_vars": request.context_vars,
            "max_output_chars": max_output,
            "memory_mb": memory_mb,
            "argv": request.argv,
            "script_name": request.script_name,
            "max_images": request.answer.max_images,
            "max_image_bytes": request.answer.max_image_bytes,
        });
        let timeout = Duration::from_secs(timeout_s);
        let cap = max_output as usize;
        let mut stats = CallStats::new(cfg.max_tool_calls, cfg.max_host_requests);
        stats.disk_limit = request.disk_limit_bytes;
        if let Ok(mut s) = stats.installs.lock()
            && !base_wait.is_zero()
        {
            // This call waited for the declared environment to be built.
            s.waited = base_wait;
            if let Some(env) = base.env() {
                s.installed = env
                    .manifest
                    .dists
                    .iter()
                    .map(|d| format!("{}=={}", d.name, d.version))
                    .collect();
            }
        }
        // Layers do not depend on the interpreter: built (or found) before
        // one is taken, named to the runtime in the request.
        if !requested.is_empty() {
            let (layers, _) = installs
                .install(requested, &stats.installs)
                .await
                .map_err(EngineError::Refused)?;
            message["packages"] = json!(layers);
        }
        let mut answer = match &request.session_id {
            None => {
                let mut interp = self.take_interp(ready, memory_mb).await?;
                let outcome = interp
                    .exchange(
                        &message,
                        timeout,
                        &ready.launch,
                        bridge.as_ref(),
                        Some(&installs),
                        &mut stats,
                    )
                    .await;
                // One execution per interpreter: never reused.
                tokio::spawn(interp.retire());
                self.refill.notify_one();
                match outcome {
                    Ok(msg) => ExecAnswer::from_runtime(&msg, cap),
                    Err(f) => ExecAnswer::failed(&f, timeout_s, memory_mb, false),
                }
            }
            Some(id) => {
                let key = match &request.session_owner {
                    Some(owner) => format!("{owner}\u{0}{id}"),
                    None => id.clone(),
                };
                // A session evicted for room fails its next call, once: its
                // code counts on state that is gone.
                if !request.reset_session
                    && let Some(ended @ Ended::Evicted { .. }) =
                        self.sessions.ended(&self.options.tenant, &key).await
                {
                    self.sessions.forget_ended(&self.options.tenant, &key).await;
                    return Err(EngineError::Refused(ended.explain(id)));
                }
                self.run_in_session(
                    ready,
                    &key,
                    request.max_sessions,
                    request.reset_session,
                    memory_mb,
                    &message,
                    timeout,
                    timeout_s,
                    bridge.as_ref(),
                    &installs,
                    &mut stats,
                )
                .await?
            }
        };
        answer.execution_time_ms = started.elapsed().as_millis() as u64;
        answer.tool_calls = stats.calls;
        // Closed whatever the outcome: results still queued for counting
        // are estimated, not counted after the answer.
        let inside = stats.tokens.close();
        if stats.calls > 0 {
            answer.tokens = Some(crate::tokens::account(
                inside,
                &answer,
                request.answer.table_rows,
            ));
        }
        answer.session_id = request.session_id;
        answer.packages = stats
            .installs
            .lock()
            .ok()
            .and_then(|s| InstallStats::to_value(&s));
        if let Some(module) = answer.missing_module.take() {
            let advice = ready.packages.missing_module_note(&module);
            answer.note = Some(match answer.note.take() {
                Some(note) => format!("{note} {advice}"),
                None => advice,
            });
        }
        if ready.launch.disk.is_some() && answer.ran_out_of_space() {
            let quota = ready.launch.disk_quota_bytes;
            let which = match stats.disk_limit {
                Some(left) if left < quota => format!(
                    "what was left of the workspace quota (quotas.workspace_bytes), {} MB",
                    left >> 20
                ),
                _ => format!(
                    "its disk quota of {} MB (sandbox.disk_quota_mb)",
                    quota >> 20
                ),
            };
            let advice = format!(
                "A write was refused: the execution reached {which}. Nothing past it was written; what \
                 was written before it stays. Delete files no longer needed, or write less."
            );
            answer.note = Some(match answer.note.take() {
                Some(note) => format!("{note} {advice}"),
                None => advice,
            });
        }
        let mut warnings: Vec<String> = Vec::new();
        if let SandboxMode::Unsandboxed { reason } = &ready.mode {
            warnings.push(format!("this code ran WITHOUT a sandbox ({reason})"));
        }
        warnings.extend(base.warning());
        if !warnings.is_empty() {
            answer.warning = Some(warnings.join("; "));
        }
        Ok(answer)
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_in_session(
        &self,
        ready: &Ready,
        id: &str,
        tenant_cap: Option<(usize, &'static str)>,
        reset: bool,
        memory_mb: u64,
        message: &Value,
        timeout: Duration,
        timeout_s: u64,
        bridge: Option<&Arc<dyn Bridge>>,
        installs: &Installs,
        stats: &mut CallStats,
    ) -> Result<ExecAnswer, EngineError> {
        let cap = tenant_cap.unwrap_or((usize::MAX, "quotas.sessions"));
        let opened = self
            .sessions
            .open(&self.options.tenant, id, cap)
            .await
            .map_err(EngineError::Refused)?;
        for evicted in opened.evicted {
            tokio::spawn(async move { sessions::end(&evicted).await });
        }
        let _lease = opened.lease;
        let mut session = opened.session.lock().await;
        session.last_used = Instant::now();
        let mut note = None;
        if let Some(ended @ Ended::Idle { .. }) = &opened.ended {
            note = Some(ended.explain(sessions::shown_id(id)));
        }
        if session.interrupted {
            note = Some(
                "the previous execution in this session was cancelled and its interpreter killed: \
                 the session started afresh, without the variables it had"
                    .to_string(),
            );
        }
        if let Some(interp) = &mut session.interp {
            if reset || interp.exited() {
                interp.kill().await;
                session.interp = None;
            } else if interp.memory_mb != memory_mb {
                note = Some(format!(
                    "this session started with memory_mb={}; pass reset_session=true to change it",
                    interp.memory_mb
                ));
            }
        }
        // Out of the session while it runs: if this future is dropped (the
        // call was cancelled), the interpreter is dropped with it, which
        // kills its process, and the session is left without one.
        let mut interp = match session.interp.take() {
            Some(interp) => {
                interp.resume();
                interp
            }
            None => self.start_interp(ready, memory_mb, true).await?,
        };
        session.interrupted = true;
        let outcome = interp
            .exchange(
                message,
                timeout,
                &ready.launch,
                bridge,
                Some(installs),
                stats,
            )
            .await;
        session.interrupted = false;
        let mut answer = match outcome {
            Ok(msg) => {
                // Between calls the session's threads do not run: they would
                // take CPU outside any execution's limits and slots.
                interp.pause();
                session.interp = Some(interp);
                ExecAnswer::from_runtime(&msg, self.options.sandbox.max_output_chars as usize)
            }
            Err(f) => ExecAnswer::failed(&f, timeout_s, memory_mb, true),
        };
        if note.is_some() {
            answer.note = note;
        }
        session.last_used = Instant::now();
        Ok(answer)
    }

    /// An interpreter for one execution: from the pool when one fits, else
    /// started now; at full CPU priority either way (see `fill_pool` and
    /// [`Zygote::fork`]).
    async fn take_interp(&self, ready: &Ready, memory_mb: u64) -> Result<Interp, EngineError> {
        if memory_mb == self.options.sandbox.memory_mb {
            let mut pool = self.pool.lock().await;
            while let Some(mut interp) = pool.pop() {
                if !interp.exited() {
                    // The pool refills once this execution is done, not while it runs: a
                    // refill's fork and set-up would take CPU from the execution.
                    return Ok(interp);
                }
            }
        }
        self.refill.notify_one();
        self.start_interp(ready, memory_mb, true).await
    }

    /// Starts an interpreter: forked when a zygote runs, else cold.
    /// `waited_for`: a caller waits for it (not the pool's).
    async fn start_interp(
        &self,
        ready: &Ready,
        memory_mb: u64,
        waited_for: bool,
    ) -> Result<Interp, EngineError> {
        let mounts = self.package_mounts(ready).await;
        if let Some(zygote) = self.zygote(ready, &mounts).await {
            match Interp::fork(&zygote, &ready.launch, memory_mb, PROCESSES, waited_for).await {
                Ok(interp) => {
                    self.fork_failures.store(0, Ordering::Relaxed);
                    return Ok(interp);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not fork a fresh sandbox; starting this one cold");
                    // A host where children cannot get their namespaces or cgroup fails
                    // every time: stop trying for a while, and say why. (A child that
                    // fails with less memory than the default may just be too small.)
                    if memory_mb >= self.options.sandbox.memory_mb
                        && self.fork_failures.fetch_add(1, Ordering::Relaxed) + 1 >= FORK_FAILURES
                    {
                        self.fork_failures.store(0, Ordering::Relaxed);
                        let why = format!(
                            "forking a sandbox failed {FORK_FAILURES} times in a row ({e}); sandboxes start cold for {} s",
                            ZYGOTE_RETRY.as_secs()
                        );
                        tracing::error!("{why}");
                        self.zygote.lock().await.0 =
                            ZygoteSlot::Off(why, Instant::now() + ZYGOTE_RETRY);
                    }
                }
            }
        }
        Interp::start(&ready.launch, memory_mb, PROCESSES, mounts)
            .await
            .map_err(EngineError::Start)
    }

    /// The package directories an interpreter (or the zygote) mounts.
    async fn package_mounts(&self, ready: &Ready) -> PackageMounts {
        let (base, _) = self.base_env(ready).await;
        PackageMounts {
            env: base.env().map(|e| e.site.clone()),
            layers: ready.package_layers.clone(),
        }
    }

    /// The running zygote, started (or restarted, when it died or what
    /// shapes it changed) on need; `None` when sandboxes start cold.
    async fn zygote(&self, ready: &Ready, mounts: &PackageMounts) -> Option<Arc<Zygote>> {
        if ready.zygote_off.is_some() {
            return None;
        }
        let cfg = &self.options.sandbox;
        // The zygote holds a pidfd and a network namespace for each live
        // child (every session's, the pool's, the running ones'), and keeps
        // up to 16 spare namespaces.
        let live = u64::from(cfg.max_sessions) + u64::from(cfg.max_concurrent) + 64;
        let spec =
            crate::process::zygote_spec(&ready.launch, mounts, cfg.max_memory_mb, 2 * live + 64);
        let mut slot = self.zygote.lock().await;
        let died = match &slot.0 {
            ZygoteSlot::Off(_, retry) if Instant::now() < *retry => return None,
            ZygoteSlot::Running(z, shaped, _) if z.alive() && **shaped == spec => {
                return Some(z.clone());
            }
            ZygoteSlot::Running(z, _, started) if !z.alive() => {
                tracing::warn!(
                    stderr = %z.stderr_tail(),
                    "the zygote stopped; starting another"
                );
                // Only deaths in quick succession add up.
                Some(started.elapsed() < ZYGOTE_RETRY)
            }
            _ => None,
        };
        match died {
            Some(true) => slot.1 += 1,
            Some(false) => slot.1 = 1,
            None => {}
        }
        if slot.1 > ZYGOTE_RESTARTS {
            slot.1 = 0;
            let why = format!(
                "the zygote stopped {} times in a row; sandboxes start cold for {} s",
                ZYGOTE_RESTARTS + 1,
                ZYGOTE_RETRY.as_secs()
            );
            tracing::error!("{why}");
            slot.0 = ZygoteSlot::Off(why, Instant::now() + ZYGOTE_RETRY);
            return None;
        }
        let exe = ready.launch.exe.clone();
        let shaped = spec.clone();
        let tenant = self.options.tenant.clone();
        let started = match tokio::task::spawn_blocking(move || {
            Zygote::start(&exe, &shaped, tenant_cpu(&tenant))
        })
        .await
        {
            Ok(started) => started,
            // The runtime is shutting down: nothing to start, nothing to report.
            Err(e) if e.is_cancelled() => return None,
            Err(e) => Err(format!("the zygote's start task failed: {e}")),
        };
        match started {
            Ok(z) => {
                let z = Arc::new(z);
                slot.0 = ZygoteSlot::Running(z.clone(), Box::new(spec), Instant::now());
                Some(z)
            }
            Err(e) => {
                let why = format!(
                    "the zygote could not start ({e}); sandboxes start cold for {} s",
                    ZYGOTE_RETRY.as_secs()
                );
                tracing::error!("{why}");
                slot.0 = ZygoteSlot::Off(why, Instant::now() + ZYGOTE_RETRY);
                None
            }
        }
    }

    /// How fresh sandboxes start here, for status answers and doctor.
    async fn start_path(&self, ready: &Ready) -> Value {
        if let Some(why) = &ready.zygote_off {
            return json!({"path": "cold", "reason": why});
        }
        match &self.zygote.lock().await.0 {
            ZygoteSlot::Running(z, _, _) if z.alive() => {
                let preparation = if z.prioritized() {
                    format!(
                        "background cpu priority (cgroup v1 cpu.shares {})",
                        cem_sandbox::BACKGROUND_SHARES
                    )
                } else {
                    match CpuPriority::get() {
                        Err(why) => format!("full cpu priority: {why}"),
                        Ok(_) => "full cpu priority: the zygote could not join the background \
                                  cpu group"
                            .to_string(),
                    }
                };
                json!({"path": "zygote", "preparation": preparation})
            }
            ZygoteSlot::Off(why, retry) if Instant::now() < *retry => {
                json!({"path": "cold", "reason": why})
            }
            _ => json!({"path": "zygote", "state": "not started yet"}),
        }
    }

    /// Starts the zygote now if this host uses one, and says how fresh
    /// sandboxes start (what `doctor` reports).
    pub async fn check_start_path(&self) -> Result<Value, EngineError> {
        let ready = self.prepare().await?;
        let mounts = self.package_mounts(ready).await;
        if let Some(zygote) = self.zygote(ready, &mounts).await {
            let memory = self.options.sandbox.memory_mb;
            let mut interp = Interp::fork(&zygote, &ready.launch, memory, PROCESSES, true)
                .await
                .map_err(|e| EngineError::Start(format!("a forked sandbox failed: {e}")))?;
            interp.kill().await;
        }
        Ok(self.start_path(ready).await)
    }

    /// How many ready interpreters the pool keeps: `sandbox.pool_size`, or
    /// by default more when they are forked (cheap) than when cold.
    async fn pool_target(&self, ready: &Ready) -> u32 {
        if self.parked() {
            return 0;
        }
        let forked = ready.zygote_off.is_none()
            && !matches!(&self.zygote.lock().await.0, ZygoteSlot::Off(_, retry) if Instant::now() < *retry);
        self.options
            .sandbox
            .pool_size
            .unwrap_or(if forked { POOL_FORKED } else { POOL_COLD })
    }

    /// Keeps `pool_target` ready interpreters, refilling when one is taken.
    async fn fill_pool(self: &Arc<Self>) {
        /// Pool sandboxes set up at the same time.
        const STARTING_AT_ONCE: usize = 2;
        let Ok(ready) = self.prepare().await else {
            return;
        };
        if matches!(ready.mode, SandboxMode::Unavailable { .. })
            || self.options.sandbox.pool_size == Some(0)
        {
            return;
        }
        let mut failures = 0u32;
        // Tasks of their own, not futures polled here: a start holds the
        // zygote's lock at times, and this loop takes it too.
        let mut starting = tokio::task::JoinSet::new();
        // After a failure no new start until then; the other start, if one
        // runs, still lands in the pool meanwhile.
        let mut backing_off: Option<tokio::time::Instant> = None;
        loop {
            // Fewer when sandboxes start cold for a while (the zygote stopped).
            let target = self.pool_target(ready).await as usize;
            let have = self.pool.lock().await.len();
            if backing_off.is_some_and(|until| tokio::time::Instant::now() >= until) {
                backing_off = None;
            }
            // Two at once: one sandbox's set-up waits on the zygote, on
            // the kernel and on the host in turn, and a burst of executions
            // drains the pool faster than one set-up at a time refills it.
            while backing_off.is_none()
                && have + starting.len() < target
                && starting.len() < STARTING_AT_ONCE
            {
                let engine = self.clone();
                starting.spawn(async move {
                    let ready = engine.prepare().await?;
                    engine
                        .start_interp(ready, engine.options.sandbox.memory_mb, false)
                        .await
                });
            }
            let started = tokio::select! {
                started = starting.join_next(), if !starting.is_empty() => started,
                () = self.refill.notified() => None,
                () = tokio::time::sleep_until(backing_off.unwrap_or_else(tokio::time::Instant::now)),
                    if backing_off.is_some() => None,
            };
            let started = match started {
                None => continue,
                Some(Ok(started)) => started,
                // Only a panic (a bug) ends a start task early: say so, and go on.
                Some(Err(e)) => Err(EngineError::Start(format!("a pool start task failed: {e}"))),
            };
            match started {
                Ok(interp) => {
                    failures = 0;
                    // Set up and warmed in the background; from here it only
                    // waits (no CPU), so it waits at full priority: an
                    // execution that takes it runs at once, with no move (a
                    // move can block for milliseconds) in its way.
                    if self.parked() {
                        // Released while it started: not kept.
                        interp.retire().await;
                        continue;
                    }
                    interp.to_foreground().await;
                    self.pool.lock().await.push(interp);
                }
                Err(e) => {
                    failures += 1;
                    tracing::warn!(error = %e, "could not start a pooled interpreter");
                    // Back off rather than spin on a broken host.
                    backing_off = Some(
                        tokio::time::Instant::now()
                            + Duration::from_millis(200 * u64::from(failures.min(50))),
                    );
                }
            }
        }
    }

    async fn reap_idle_sessions(&self) {
        let idle = Duration::from_secs(self.options.sandbox.session_idle_seconds);
        for session in self.sessions.expire(&self.options.tenant, idle).await {
            sessions::end(&session).await;
        }
    }

    /// Ends every interpreter (pool and sessions) and the zygote.
    pub async fn shutdown(&self) {
        self.zygote.lock().await.0 = ZygoteSlot::NotYet;
        for mut interp in self.pool.lock().await.drain(..) {
            interp.kill().await;
        }
        for session in self.sessions.drain(&self.options.tenant).await {
            sessions::end(&session).await;
        }
    }
}

/// The cpu priority groups of `tenant`'s sandboxes: its own (so tenants
/// weigh the same whatever each runs), else the server's, else none. The
/// host puts the tenant's upstream processes and the blocking work it does
/// for the tenant there too.
pub fn tenant_cpu(tenant: &str) -> Option<&'static CpuPriority> {
    let server = CpuPriority::get().ok()?;
    match server.tenant(tenant) {
        Ok(groups) => Some(groups),
        Err(e) => {
            tracing::warn!(error = %e, tenant = %cem_config::tenant_digest(tenant), "this tenant's sandboxes share the server's cpu groups");
            Some(server)
        }
    }
}

/// Makes moving processes between cgroups wait for no RCU grace period
/// (once per process; see [`cem_sandbox::favor_dynamic_changes`]): every
/// sandbox is moved, and one tenant's fork bomb must not stall the others'.
fn favor_cgroup_changes() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| match cem_sandbox::favor_dynamic_changes() {
        cem_sandbox::Favor::AlreadyOn => {}
        cem_sandbox::Favor::TurnedOn(at) => {
            tracing::info!(mount = %at, "cgroup moves no longer wait for RCU grace periods (favordynmods)");
        }
        cem_sandbox::Favor::Off(why) => tracing::warn!(
            reason = %why,
            "cgroup moves wait for RCU grace periods: one sandbox's fork bomb can delay every other sandbox's start"
        ),
    });
}

/// Resolves the interpreter and decides how code can run here.
fn probe_host(options: &EngineOptions) -> Result<Ready, String> {
    let cfg = &options.sandbox;
    cem_sandbox::Cgroup::sweep_stale();
    let layout =
        cem_sandbox::resolve_interpreter(&cfg.python, cfg.network).map_err(|e| e.to_string())?;
    let runtime_dir = cem_runtime::install(&options.data_dir).map_err(|e| {
        format!(
            "cannot write the runtime under {}: {e}",
            options.data_dir.display()
        )
    })?;
    let probe_dir = options.data_dir.join("probe");
    std::fs::create_dir_all(&probe_dir)
        .map_err(|e| format!("cannot create {}: {e}", probe_dir.display()))?;
    if let Some((uid, gid)) = cem_sandbox::sandbox_owner() {
        let _ = std::os::unix::fs::chown(&probe_dir, Some(uid), Some(gid));
    }
    let (mode, layers) = if options.no_sandbox {
        let reason = "--no-sandbox was given".to_string();
        (SandboxMode::Unsandboxed { reason }, None)
    } else {
        let layers = cem_sandbox::probe(&options.exe, &layout, &probe_dir);
        let mode = if layers.isolated {
            SandboxMode::Isolated
        } else {
            let reason = layers
                .error
                .clone()
                .unwrap_or_else(|| "the sandbox could not start".into());
            if cfg.allow_unsandboxed {
                tracing::warn!(%reason, "host cannot isolate; running code UNSANDBOXED as the config allows");
                SandboxMode::Unsandboxed { reason }
            } else {
                tracing::error!(%reason, "host cannot isolate; execute_code will refuse to run code");
                SandboxMode::Unavailable { reason }
            }
        };
        for layer in layers.layers.iter().filter(|l| !l.on) {
            tracing::warn!(layer = layer.name, detail = %layer.detail, "sandbox layer off");
        }
        (mode, Some(layers))
    };
    let use_cgroups = layers
        .as_ref()
        .is_some_and(|l| l.layers.iter().any(|l| l.name == "cgroup" && l.on));
    if use_cgroups {
        favor_cgroup_changes();
    }
    let launch = Launch {
        exe: options.exe.clone(),
        layout,
        runtime_dir,
        workspace: options.workspace.clone(),
        network: cfg.network,
        unsandboxed: matches!(mode, SandboxMode::Unsandboxed { .. }),
        use_cgroups,
        disk_quota_bytes: cfg.disk_quota_mb << 20,
        disk: options.disk.clone(),
        prepare: crate::background::Queue::new(tenant_cpu(&options.tenant)),
        extra_ro: options.extra_ro.clone(),
    };
    let zygote_off = zygote_unavailable(cfg, &mode, use_cgroups);
    if let Some(why) = &zygote_off {
        tracing::info!(reason = %why, "fresh sandboxes start cold");
    }
    let packages = Arc::new(Packages::new(cem_packages::Settings::from_config(
        cfg,
        &options.data_dir,
        &launch.layout.version,
    )));
    let package_layers = match packages.layers_dir() {
        Ok(dir) => Some(dir),
        Err(e) => {
            tracing::warn!(error = %e, "no layer directory: interpreters cannot take packages on demand");
            None
        }
    };
    Ok(Ready {
        launch,
        zygote_off,
        mode,
        layers,
        packages,
        package_layers,
    })
}

/// Why this host cannot fork fresh sandboxes from a zygote, if it cannot.
fn zygote_unavailable(cfg: &SandboxConfig, mode: &SandboxMode, cgroups: bool) -> Option<String> {
    if !cfg.zygote {
        return Some("sandbox.zygote is false".into());
    }
    if !matches!(mode, SandboxMode::Isolated) {
        return Some("code does not run in the OS sandbox here".into());
    }
    if !cgroups {
        // Without a pids cgroup per child, the process limit would be one
        // RLIMIT_NPROC shared by every child of the zygote.
        return Some(
            "no memory and pids cgroup can be made for each sandbox (the zygote needs one per child)"
                .into(),
        );
    }
    cem_sandbox::zygote::kernel_support().err()
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}
