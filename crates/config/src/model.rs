//! The typed settings a config file turns into.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::{Requirement, Secret};

/// Everything the server reads from `mcp_config.json`.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Upstream MCP servers by name (disabled ones included, marked so).
    pub servers: BTreeMap<String, ServerConfig>,
    pub sandbox: SandboxConfig,
    pub pii: PiiConfig,
    pub workspace: WorkspaceConfig,
    pub upstream: UpstreamConfig,
    /// The seed's static registry directory (`tools_registry/`), if set.
    pub tools_registry: Option<PathBuf>,
    /// Which upstream tools code may call (`policy`).
    pub policy: cem_policy::Policy,
    /// Where tool calls are recorded (`policy.audit`).
    pub audit: AuditConfig,
    /// How tools are found (`search`).
    pub search: SearchConfig,
    /// What the catalog learns of the tools (`catalog`).
    pub catalog: CatalogConfig,
    /// What an execution's answer may carry: images and tables (`answers`).
    pub answers: AnswersConfig,
    /// The Prometheus metrics listener (`metrics`).
    pub metrics: MetricsConfig,
    /// How the HTTP listener holds slow and many connections (`http`).
    pub http: HttpConfig,
    /// Who may use the server over HTTP (`auth`).
    pub auth: crate::AuthConfig,
    /// Limits per tenant (`quotas`).
    pub quotas: crate::QuotaConfig,
    /// Where state shared between nodes lives (`store`).
    pub store: crate::StoreConfig,
    /// How people sign in to upstream servers (`signin`).
    pub signin: crate::SignInConfig,
    /// The values above that must never leave the host: what `${VAR}`
    /// gave, upstream `env` and `headers`, URL passwords, tokens.
    pub secrets: crate::Redactor,
}

/// The `metrics` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MetricsConfig {
    /// Where `GET /metrics` is served, on a listener of its own so it can
    /// stay private while `/mcp` is public (`serve --metrics ADDR` wins).
    /// None: no metrics listener.
    pub listen: Option<std::net::SocketAddr>,
}

/// The `http` section: what the HTTP listener allows a connection before
/// any request on it is authenticated, so slow or many connections cannot
/// hold the server.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HttpConfig {
    /// A request's line and headers must arrive within this many seconds of
    /// its first byte.
    pub header_timeout_seconds: u64,
    /// A request's headers and body must arrive within this many seconds of
    /// its first byte (the answer may stream for longer).
    pub request_timeout_seconds: u64,
    /// A connection with no request under way is closed when no byte of a
    /// new one has come for this many seconds.
    pub idle_timeout_seconds: u64,
    /// The most connections held at once. None: the open-file limit less a
    /// reserve for the server's own work (a quarter, at least 256).
    pub max_connections: Option<u64>,
    /// The most connections held at once from one peer address; 0: no
    /// per-peer cap (behind a proxy, every client is the proxy's address).
    pub max_connections_per_peer: u64,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            header_timeout_seconds: 10,
            request_timeout_seconds: 60,
            idle_timeout_seconds: 30,
            max_connections: None,
            max_connections_per_peer: 256,
        }
    }
}

/// The `catalog` section: what is learned of the tools themselves.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CatalogConfig {
    /// Learn the shapes of tool results (types and field names, never
    /// values) from what code gets back, for tools that declare no
    /// `outputSchema`: wrappers, stubs and definitions then say what a
    /// tool returns. On by default; off records nothing and shows none.
    pub learn_shapes: bool,
    /// At start-up (`serve`), call the tools that are read-only by their
    /// annotations and allowed by policy, with arguments built from their
    /// schemas, to learn their shapes before first use (what `tools
    /// discover` does). Off by default: it starts every server and calls
    /// its tools.
    pub discover_at_start: bool,
}

impl Default for CatalogConfig {
    fn default() -> Self {
        CatalogConfig {
            learn_shapes: true,
            discover_at_start: false,
        }
    }
}

/// The `answers` section: the images and tables an execution's answer
/// carries to the model and the person.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnswersConfig {
    /// The most images one execution shows (`show()` and the figures left
    /// open); `show()` raises past it.
    pub max_images: u64,
    /// The largest image `show()` takes, in bytes as given (a PNG, JPEG or
    /// SVG file); `show()` raises past it.
    pub max_image_bytes: u64,
    /// The longest edge of an image sent, in pixels; larger ones are
    /// downscaled (the answer says so).
    pub max_image_edge: u32,
    /// The most bytes one image block carries once encoded; a PNG over it is
    /// sent as a JPEG, smaller if need be (the answer says so).
    pub max_image_block_bytes: u64,
    /// The most rows of a table result the model's text shows; the rest
    /// are counted ("… N more rows") and are in `structuredContent`.
    pub table_rows: u64,
}

impl Default for AnswersConfig {
    fn default() -> Self {
        AnswersConfig {
            max_images: 8,
            max_image_bytes: 10 << 20,
            // The longest edge vision models take without scaling.
            max_image_edge: 1568,
            max_image_block_bytes: 1 << 20,
            table_rows: 30,
        }
    }
}

/// The `search` section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchConfig {
    /// Rank by meaning (the built-in embedding model) as well as by words.
    /// On by default: on the search evaluation it finds far more tools
    /// described in other words, and more of those named in their own
    /// words. Off ranks by words alone (fully deterministic, and what a
    /// binary built without the model does anyway).
    pub semantic: bool,
    /// Learn from use: the words of a search are recorded against the tool
    /// the session used next (called from code, or its definition read),
    /// per tenant, and later searches close to them rank that tool higher.
    /// On by default; off records nothing and ranks without the records.
    pub learn: bool,
    /// A sentence transformer to rank with instead of the built-in static
    /// model: a directory with `model.onnx` and `vocab.txt`, as
    /// `code-execution-mcp tools transformer DIR` makes it (`DIR/minilm`). None: the built-in
    /// model. It finds far more tools asked for in other words, and learns
    /// from use far better (BENCHMARKS.md, "A transformer at query time"),
    /// for about a millisecond more a search.
    pub model: Option<PathBuf>,
    /// ONNX Runtime's shared library (`libonnxruntime.so`, 1.24 or newer),
    /// which runs `model`; None: the `ORT_DYLIB_PATH` environment
    /// variable.
    pub onnx_runtime: Option<PathBuf>,
    /// Threads ONNX Runtime runs one query on (1 to 16). One by default:
    /// the server answers many searches and sandboxes at once on few
    /// cores. Two cut a search over 10,000 tools by about a fifth on a
    /// 2-core machine, busying both cores while it runs. Read when the
    /// model is first loaded: a change takes a restart.
    pub onnx_threads: usize,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig {
            semantic: true,
            learn: true,
            model: None,
            onnx_runtime: None,
            onnx_threads: 1,
        }
    }
}

/// The `policy.audit` section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditConfig {
    /// The log file; `<data dir>/audit/audit.jsonl` when unset.
    pub path: Option<PathBuf>,
    /// Size at which the log is rotated.
    pub max_bytes: u64,
    /// Rotated files kept (`audit.jsonl.1` ... `.keep`).
    pub keep: u32,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            path: None,
            max_bytes: 100 << 20,
            keep: 10,
        }
    }
}

/// The `upstream` section: how upstream servers are called.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UpstreamConfig {
    /// Per-call timeout (a server's `timeout_seconds` overrides it).
    pub timeout_seconds: u64,
    /// Time allowed to start a server and finish the MCP handshake.
    pub connect_timeout_seconds: u64,
    /// The most tools one server may list; a server over it is marked
    /// unavailable with the reason.
    pub max_tools: u64,
    /// The most pages of `tools/list` read from one server per listing.
    pub max_list_pages: u64,
    /// The most bytes of tool definitions (as JSON) one server may list.
    pub max_list_bytes: u64,
    /// At most one re-list of a server that says its tools changed this
    /// often; a server that keeps changing waits twice as long each time,
    /// up to [`MAX_LIST_CHANGED_BACKOFF_SECONDS`].
    pub list_changed_interval_seconds: u64,
    /// Lines a second a stdio server may write to our log from its stderr
    /// (a burst of as many again); the rest are counted and dropped.
    pub stderr_lines_per_second: u64,
    /// Bytes of stderr a stdio server may write to our log in all (each
    /// tenant's processes of it, across their restarts); after that one
    /// line says the rest is dropped.
    pub stderr_max_bytes: u64,
}

/// The longest wait between two re-lists of a server that keeps saying
/// its tools changed.
pub const MAX_LIST_CHANGED_BACKOFF_SECONDS: u64 = 60;

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            timeout_seconds: 60,
            connect_timeout_seconds: 30,
            max_tools: 5_000,
            max_list_pages: 100,
            max_list_bytes: 16 << 20,
            list_changed_interval_seconds: 2,
            stderr_lines_per_second: 100,
            stderr_max_bytes: 4 << 20,
        }
    }
}

/// One entry of `mcpServers`.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub name: String,
    pub transport: Transport,
    pub disabled: bool,
    /// Per-call timeout for this server, when set (else the global default).
    pub timeout_seconds: Option<u64>,
    /// One process (one state) for every tenant, instead of one per tenant
    /// (`"shared": true`): said in `list_tool_categories` and `doctor`.
    pub shared: bool,
    /// Whose credential an http or sse server's calls carry.
    pub auth: crate::UpstreamAuth,
    /// The OAuth client it signs in as (`oauth`).
    pub oauth: crate::UpstreamOAuth,
}

/// How to reach an upstream server. Credentials (`env`, `headers`) are
/// [`Secret`]s: they stay on the host and out of logs.
#[derive(Debug, Clone)]
pub enum Transport {
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, Secret>,
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP.
    Http {
        url: url::Url,
        headers: BTreeMap<String, Secret>,
    },
    /// Legacy HTTP+SSE (protocol 2024-11-05).
    Sse {
        url: url::Url,
        headers: BTreeMap<String, Secret>,
    },
}

impl Transport {
    /// The name used in the config's `type` field.
    pub fn kind(&self) -> &'static str {
        match self {
            Transport::Stdio { .. } => "stdio",
            Transport::Http { .. } => "http",
            Transport::Sse { .. } => "sse",
        }
    }
}

/// Interpreters kept ready by default when each is forked from a zygote: a
/// pooled child costs about 1 MB, so a burst of executions finds more ready.
pub const POOL_FORKED: u32 = 4;
/// Interpreters kept ready by default when each is built cold.
pub const POOL_COLD: u32 = 2;

/// The `sandbox` section: limits and interpreter for executed code.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxConfig {
    /// Default wall-clock limit of one execution.
    pub timeout_seconds: u64,
    /// Default memory limit of one execution.
    pub memory_mb: u64,
    /// Largest timeout_seconds a call may ask for.
    pub max_timeout_seconds: u64,
    /// Largest memory_mb a call may ask for.
    pub max_memory_mb: u64,
    /// The Python interpreter (or virtualenv's python) the sandbox runs.
    pub python: PathBuf,
    /// Disk space one execution may use up.
    pub disk_quota_mb: u64,
    /// How disk quotas are held: by the kernel (each tenant's workspace on
    /// its own file system) or by a watchdog polling free space.
    pub disk_quota_mode: DiskQuotaMode,
    /// Upstream tool calls one execution may make.
    pub max_tool_calls: u64,
    /// Requests to the host that are not tool calls (search, PII, skills,
    /// wrappers) one execution may make.
    pub max_host_requests: u64,
    /// Idle time after which a tenant's warm pool, zygote and interpreter
    /// sessions are released (its next request starts them again).
    pub tenant_idle_seconds: u64,
    /// The most of the host's CPU (percent of all its cores) one tenant
    /// other than the local one may use, its sandboxes and the host's work
    /// for it together (a cgroup bandwidth limit; 100: none).
    pub tenant_cpu_percent: u32,
    /// The fastest one tenant other than the local one may write to its
    /// workspace's own file system, in MB a second (a block-I/O throttle on
    /// its loop device; 0: none).
    pub tenant_disk_mb_per_second: u64,
    /// Executions allowed to run at once (others wait their turn).
    pub max_concurrent: u32,
    /// Pre-started interpreters kept warm. Unset: [`POOL_FORKED`] when
    /// sandboxes are forked from a zygote (about 1 MB and 1 ms of CPU each),
    /// [`POOL_COLD`] when they are built cold (a whole interpreter each).
    pub pool_size: Option<u32>,
    /// Fork each fresh sandbox from a zygote (a prepared, sandboxed
    /// interpreter) instead of building it cold, where the host allows.
    pub zygote: bool,
    /// Whether sandboxed code may reach the network (off by default).
    pub network: bool,
    /// Run without OS isolation where the host cannot isolate. Off by default;
    /// when on, `doctor` and `get_execution_stats` say so.
    pub allow_unsandboxed: bool,
    /// Cap on printed output and on the answer returned to the model.
    pub max_output_chars: u64,
    /// Idle time after which a `session_id`'s interpreter is ended.
    pub session_idle_seconds: u64,
    /// Interpreter sessions the whole server keeps at once (every tenant's);
    /// a new one past it ends the least recently used idle one.
    pub max_sessions: u32,
    /// Packages installed on the host into an environment every sandbox
    /// mounts read-only.
    pub packages: Vec<Requirement>,
    /// Let the installer build source distributions (runs their build code
    /// on the host). Off: wheels only.
    pub allow_source_builds: bool,
    /// Whether agents may ask for more packages while they work.
    pub on_demand: OnDemand,
    /// Packages (normalised names) agents may ask for when `on_demand` is
    /// `allowlist`.
    pub allowed_packages: Vec<String>,
    /// The `uv` binary that installs packages; `None`: `uv` on PATH.
    pub installer: Option<PathBuf>,
    /// Longest one install may take.
    pub install_timeout_seconds: u64,
}

/// How disk quotas are held (`sandbox.disk_quota_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DiskQuotaMode {
    /// The kernel where the host allows (root, `mkfs.ext4`), else the
    /// watchdog with a warning.
    Auto,
    /// The kernel, or the server does not start.
    Kernel,
    /// A watchdog that stops an execution within 100 ms of going over.
    Watchdog,
}

impl DiskQuotaMode {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DiskQuotaMode::Auto => "auto",
            DiskQuotaMode::Kernel => "kernel",
            DiskQuotaMode::Watchdog => "watchdog",
        }
    }
}

/// Who may add packages while code runs (`sandbox.on_demand`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnDemand {
    /// Never: only `sandbox.packages`.
    Off,
    /// Only packages named in `sandbox.allowed_packages`.
    Allowlist,
    /// Any package of the index (wheels only unless source builds are on).
    Any,
}

impl OnDemand {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OnDemand::Off => "off",
            OnDemand::Allowlist => "allowlist",
            OnDemand::Any => "any",
        }
    }
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            timeout_seconds: 30,
            memory_mb: 500,
            max_timeout_seconds: 300,
            max_memory_mb: 4096,
            disk_quota_mb: 1024,
            disk_quota_mode: DiskQuotaMode::Auto,
            max_concurrent: 8,
            max_tool_calls: 1000,
            max_host_requests: 1000,
            tenant_idle_seconds: 600,
            tenant_cpu_percent: 25,
            tenant_disk_mb_per_second: 32,
            python: PathBuf::from("/usr/bin/python3"),
            pool_size: None,
            zygote: true,
            network: false,
            allow_unsandboxed: false,
            max_output_chars: 20_000,
            session_idle_seconds: 600,
            max_sessions: 64,
            packages: Vec::new(),
            allow_source_builds: false,
            on_demand: OnDemand::Allowlist,
            allowed_packages: Vec::new(),
            installer: None,
            install_timeout_seconds: 600,
        }
    }
}

/// How personal data is handled on the way to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PiiMode {
    /// Everything returned to the model is tokenized automatically.
    Auto,
    /// Only the explicit tools and sandbox helpers tokenize.
    Manual,
    /// No tokenization at all.
    Off,
}

/// Kinds of personal data the detector knows (the detector crate's own
/// type, so config and detection cannot drift apart).
pub use cem_pii::Kind as PiiType;

/// The `pii` section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PiiConfig {
    pub mode: PiiMode,
    /// Types tokenized in automatic mode (IP addresses are opt-in).
    pub types: Vec<PiiType>,
    /// Servers (`git`) or tools (`git.git_commit`) that may receive real
    /// values restored from tokens; `*` means every upstream.
    pub restore_to: Vec<String>,
}

impl Default for PiiConfig {
    fn default() -> Self {
        Self {
            mode: PiiMode::Auto,
            types: vec![
                PiiType::Email,
                PiiType::Phone,
                PiiType::Ssn,
                PiiType::CreditCard,
                PiiType::Iban,
                PiiType::Secret,
            ],
            restore_to: vec!["*".to_string()],
        }
    }
}

/// The `workspace` section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkspaceConfig {
    /// Largest file the workspace tools write or read back.
    pub max_file_bytes: u64,
}

impl Default for WorkspaceConfig {
    fn default() -> Self {
        Self {
            max_file_bytes: 10 * 1024 * 1024,
        }
    }
}
